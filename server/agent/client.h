/* The server's end of one box's in-box agent (wsagent): the channel, the
 * commands started through it, and their exits.
 *
 * A command runs as a ws_proc like any other, with a wrapper whose start
 * hook sends the agent a START carrying the command's own pipes or
 * terminal (made by the exec layer, so output never passes through the
 * agent or this module) and waits for STARTED; the exit comes back as
 * EXITED and reaches the process through its detached child. Signals and
 * kills go as SIGNAL frames.
 *
 * The agent is trusted with its box only: anything it sends that the
 * protocol does not allow (a malformed or oversized frame, a frame for a
 * stream it was not given, two answers to one START, a second HELLO, the
 * channel ending) loses it. Then every command still running through it
 * ends at once with cause EVICTED, a start waiting for it fails, the
 * channel is shut (the agent kills everything in its box and exits), and
 * `lost` runs once with the reason, on the pump thread.
 *
 * Thread safety: every function may be called from any thread, except
 * that a command's start (inside ws_proc_spawn) must not run on the pump
 * thread, which delivers the answer it waits for (-EDEADLK).
 */
#ifndef WS_AGENT_CLIENT_H
#define WS_AGENT_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "server/events/pump.h"
#include "server/exec/process.h"

/* How long the agent has for its HELLO, and to answer a START. */
#define WS_AGENT_HELLO_MS 10000
#define WS_AGENT_START_MS 30000
/* How long a write to the agent may block before it counts as lost. */
#define WS_AGENT_SEND_MS 10000
/* The longest reason kept. */
#define WS_AGENT_WHY_MAX 256

struct ws_agent;

struct ws_agent_config {
    struct ws_pump *pump;
    /* The channel, a connected unix stream socket; consumed (closed on
     * failure too). */
    int fd;
    /* The one-time secret the agent must present (64 lowercase hex
     * digits), or NULL when it was given none. */
    const char *secret;
    /* Once, on the pump thread, when the agent is lost (not when freed). */
    void (*lost)(void *arg, const char *why);
    void *arg;
};

/* Waits for the agent's HELLO (WS_AGENT_HELLO_MS at most), checks its
 * version and secret, answers, and starts reading. Returns 0, or -EPROTO
 * (a bad HELLO), -ETIMEDOUT, -EPERM (a wrong or missing secret),
 * -ECONNRESET (the channel ended) with the reason in why. */
int ws_agent_new(const struct ws_agent_config *cfg, struct ws_agent **ret, char *why,
                 size_t why_size);
/* Shuts the channel (the agent then ends its box's processes and exits)
 * and drops the caller's reference; commands still running end with cause
 * EVICTED, and `lost` is not called (one running on another thread is
 * waited for). Accepts NULL. */
void ws_agent_free(struct ws_agent *a);
/* The agent's pid, as it said in its HELLO (in its own namespace). */
pid_t ws_agent_pid(const struct ws_agent *a);
/* Whether it was lost, and why (valid while a is). */
bool ws_agent_lost(struct ws_agent *a, char *why, size_t size);

/* What one command is, as the agent starts it. */
struct ws_agent_command {
    const char *const *argv; /* vetted; argv[0] absolute or a bare name */
    const char *const *envp; /* the whole environment */
    const char *cwd;         /* absolute, inside the box */
    /* The agent's backstop: it kills the tree after this (0: none). The
     * exec layer's own timeout normally acts first. */
    uint64_t timeout_ms;
    bool pty;
    /* The command's identity (docker), or none: the agent's own. */
    bool identity;
    uid_t uid;
    gid_t gid;
    uint64_t nproc; /* RLIMIT_NPROC for it; 0: none */
};

/* Fills *ret with the hooks that run c through a: start, signal, kill,
 * exited and free (the wrapper holds a reference to a). Returns 0,
 * -ENOMEM, -E2BIG (c does not fit a frame) or -ECONNRESET (a is lost). */
int ws_agent_wrap(struct ws_agent *a, const struct ws_agent_command *c,
                  struct ws_proc_wrapper *ret);

/* Commands started through a and not yet ended (tests). */
size_t ws_agent_running(struct ws_agent *a);

/* What an agent's EXITED record says of its command. */
struct ws_agent_exit {
    struct ws_child_exit exit;
    /* Killed by the box's OOM killer: the record's OOM flag on a death by
     * SIGKILL (the flag alone, on any other end, says nothing). */
    bool oom_killed;
};

/* Interprets the payload of an EXITED frame (its fields, as in wire.h)
 * the way the client does with every exit record an agent sends, and
 * nothing else: no I/O, no allocation, no state, so a test or a fuzzer
 * can feed it any bytes. STATUS must be present and 0 (exited, CODE
 * 0-255) or 1 (signaled, SIGNO 1 to NSIG-1); CODE, SIGNO, CORE, OOM,
 * USER_MS, SYS_MS and MAXRSS_KIB default to 0; a number field of another
 * size than 8 or a field running past the payload refuses the record, and
 * where a tag repeats its last value counts. Returns 0 with *ret filled,
 * or -EPROTO (also for len over WS_WIRE_PAYLOAD_MAX); *ret is written
 * only on success. */
int ws_agent_parse_exit(const uint8_t *payload, size_t len, struct ws_agent_exit *ret);

#endif
