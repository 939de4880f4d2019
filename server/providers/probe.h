/* Live availability probes of the isolation backends. Each runs the real
 * thing (a trivial sandbox, a daemon ping) every time it is called: a host
 * where the binary exists but cannot create namespaces, or a daemon that
 * went away, must read as unavailable at once. */
#ifndef WS_PROVIDERS_PROBE_H
#define WS_PROVIDERS_PROBE_H

#include "server/providers/provider.h"

/* Longest a probe may take before it counts as failed. */
#define WS_PROBE_TIMEOUT_MS 5000

/* bubblewrap found (fixed path, then PATH) and a probe sandbox with every
 * namespace unshared ran /bin/true successfully. When it did but the
 * user-mode network tool is missing, the provider stays available (for
 * workspaces without network) and the reason says that sandboxes with
 * network cannot be made, so a command failing for it can tell why. */
void ws_probe_bwrap(struct ws_probe *ret);

/* The Docker daemon (DOCKER_HOST unix:// or tcp://, default the local
 * unix socket) answered GET /_ping with 200 OK. Failures are transient. */
void ws_probe_docker(struct ws_probe *ret);

/* Environment variable naming the bwrap binary to use (absolute path);
 * when set, nothing else is searched. */
#define WS_BWRAP_ENV "WORKSPACED_BWRAP"

/* Path of the bwrap binary the server will use (WORKSPACED_BWRAP, else a
 * fixed path, else the server's PATH), or NULL if none; the string is
 * static. */
const char *ws_probe_bwrap_path(void);

/* Environment variable naming the slirp4netns binary (absolute path) that
 * gives a sandbox with network its user-mode network; when set, nothing
 * else is searched. */
#define WS_USERNET_ENV  "WORKSPACED_SLIRP4NETNS"
#define WS_USERNET_NAME "slirp4netns"

/* Path of the slirp4netns binary (WORKSPACED_SLIRP4NETNS, else a fixed
 * path, else the server's PATH), or NULL if none; the string is
 * thread-local or static. */
const char *ws_probe_usernet_path(void);

/* Whether a sandbox with network can be made: slirp4netns is found. The
 * reason names the missing tool. */
void ws_probe_usernet(struct ws_probe *ret);

/* The device slirp4netns opens to make the sandbox's network device. */
#define WS_TUN_PATH "/dev/net/tun"

/* Whether slirp4netns can open the tun device at `path` (WS_TUN_PATH):
 * a character device readable and writable by every user when
 * `workspace_uid` (it runs as the workspace's uid, never the server's),
 * else by the server itself. The reason names the device and its mode. */
void ws_probe_tun(const char *path, bool workspace_uid, struct ws_probe *ret);

/* The sandbox's init: WORKSPACED_SANDBOX_INIT (absolute; nothing else is
 * looked at when set), else WS_SANDBOX_INIT_NAME next to the server
 * binary or in its sandbox/ directory; NULL if none is executable. The
 * string is thread-local or static. */
#define WS_SANDBOX_INIT_ENV  "WORKSPACED_SANDBOX_INIT"
#define WS_SANDBOX_INIT_NAME "workspaced-sandbox-init"
const char *ws_probe_sandbox_init_path(void);

/* The in-box agent (agent mode) and the init it runs each command under
 * (the docker provider's): found as the sandbox's init is; NULL if none. */
#define WS_AGENT_ENV       "WORKSPACED_AGENT"
#define WS_AGENT_NAME      "workspaced-agent"
#define WS_INBOX_INIT_ENV  "WORKSPACED_DOCKER_INIT"
#define WS_INBOX_INIT_NAME "workspaced-docker-init"
const char *ws_probe_agent_path(void);
const char *ws_probe_inbox_init_path(void);

/* A program the server ships: the absolute path named by the environment
 * variable `env` (only that one, when set), else `name` in `subdir` beside
 * the server binary (the build tree), else beside it (an install); written
 * into buf. NULL when not found or not executable. */
const char *ws_probe_server_program(const char *env, const char *name, const char *subdir,
                                    char *buf, size_t size);

#endif
