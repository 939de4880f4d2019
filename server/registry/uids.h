/* A host user per workspace: the range the operator gives, the check that
 * it is nobody's, and the allocator that hands each workspace a uid of its
 * own.
 *
 * The range's first uid is the helper uid: the in-box helpers that commands
 * must not signal, trace or forge (the docker init) run as it, and no
 * workspace ever gets it. Every other uid of the range goes to at most one
 * workspace at a time, with the gid of the same number. Allocation goes
 * round-robin from a cursor, so a closed workspace's uid comes back only
 * after the whole range has been handed out once more, and a uid that
 * still has processes (a command that outlived its workspace's Close) is
 * skipped.
 *
 * Thread safety: a struct ws_uids may be used from any thread.
 */
#ifndef WS_REGISTRY_UIDS_H
#define WS_REGISTRY_UIDS_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* The documented default: 64 Ki ids well above any distribution's
 * accounts (and above systemd's dynamic users, 61184-65519). */
#define WS_UIDS_DEFAULT_FIRST 524288u
#define WS_UIDS_DEFAULT_LAST  589823u
/* A range needs the helper uid and at least one workspace uid. */
#define WS_UIDS_MIN_SIZE 2u

struct ws_uid_range {
    uid_t first; /* the helper uid */
    uid_t last;  /* inclusive */
};

/* Parses "FIRST-LAST". Returns 0, or -EINVAL with `why` saying what is
 * wrong (a sentence fragment for "invalid value ...: WHY"). */
int ws_uids_parse_range(const char *text, struct ws_uid_range *ret, const char **why);

/* Refuses a range that would hand out an id someone else has: 0, the
 * overflow ids 65534 (nobody/nogroup) and 65535, any uid in `passwd_path`
 * or gid in `group_path` (files read directly, never through NSS, so the
 * answer does not depend on a directory service being up; NULL: the
 * system's), and the `n_taken` uids of `taken` (the [peers] map: a peer's
 * uid must never be a workspace's). Returns 0, -EINVAL with a message in
 * `why` (a uid or a file and the account found), or -errno when a file
 * cannot be read. */
int ws_uids_check_range(const struct ws_uid_range *range, const char *passwd_path,
                        const char *group_path, const uid_t *taken, size_t n_taken, char *why,
                        size_t why_size);

/* Whether this process can act as every uid and gid of `range`: it runs
 * as root with CAP_CHOWN, CAP_KILL, CAP_SETGID and CAP_SETUID, and its
 * user namespace maps each of the range's ids (`uid_map_path` and
 * `gid_map_path`; NULL: /proc/self/uid_map and gid_map). A namespace that
 * maps uid 0 alone (Bazel's linux-sandbox, a rootless container) has a
 * root that can neither chown to nor become those ids. Returns 0, or
 * -EPERM with `why` saying what is missing, or -errno when a map cannot
 * be read. */
int ws_uids_usable(const struct ws_uid_range *range, const char *uid_map_path,
                   const char *gid_map_path, char *why, size_t why_size);

/* ---- host-wide leases ----
 *
 * Two servers on one host that handed out the same uid would share a user
 * between their workspaces (files, signals), and one's Close would kill the
 * other's commands. So every server that gives workspaces uids holds a
 * lease on its range for its whole life: a file FIRST-LAST in `dir`
 * (WS_UIDS_LEASE_DIR, made 0700), flocked. A lease whose holder died is
 * free (its lock went with it) and is removed by the next taker; takers
 * serialise on `dir`/.lock. */
#define WS_UIDS_LEASE_DIR "/run/workspaced-uids"
/* The default range is shared out in slots of this many uids, so that the
 * servers of one host (a test suite, several nodes) each get their own
 * without configuration. */
#define WS_UIDS_SLOT 2048u

struct ws_uids_lease;

/* Takes a lease. With `exact`, on *range itself: -EBUSY, with `why`
 * naming the live lease that overlaps it. Else on a slot of WS_UIDS_SLOT
 * uids of *range (the whole range when it is smaller): `prefer` first when
 * it is a free slot (the one this server had before, so its workspaces keep
 * their uids; NULL: none), else the first free one, which *range becomes;
 * -EBUSY when every slot is leased. Other failures are -errno with `why`. */
int ws_uids_lease_take(const char *dir, struct ws_uid_range *range, bool exact,
                       const struct ws_uid_range *prefer, struct ws_uids_lease **ret, char *why,
                       size_t why_size);
/* Gives the lease up (accepts NULL). */
void ws_uids_lease_free(struct ws_uids_lease *l);

struct ws_uids;

/* `has_processes` says whether a uid still has processes (NULL:
 * ws_uids_has_processes); the tests pass their own. */
int ws_uids_new(const struct ws_uid_range *range, bool (*has_processes)(uid_t uid),
                struct ws_uids **ret);
void ws_uids_free(struct ws_uids *u);

/* The helper uid (the range's first). */
uid_t ws_uids_helper(const struct ws_uids *u);
/* Whether `uid` is one a workspace may have (in the range, not the
 * helper's). */
bool ws_uids_in_range(const struct ws_uids *u, uid_t uid);

/* Marks `uid` taken by a workspace known from its record at start, and
 * moves the cursor past it, so the next allocation is a uid no record
 * has had yet. -EINVAL: not a workspace uid of the range (a record made
 * under another range: the caller gives that workspace a new uid);
 * -EEXIST: another record has it. */
int ws_uids_claim(struct ws_uids *u, uid_t uid);
/* A uid no workspace has and no process runs as. -WS_EQUOTA when every
 * uid of the range is taken or busy. */
int ws_uids_alloc(struct ws_uids *u, uid_t *ret);
/* Gives `uid` back (after its workspace closed). */
void ws_uids_release(struct ws_uids *u, uid_t uid);
/* How many workspace uids are taken now. */
size_t ws_uids_taken(struct ws_uids *u);

/* Whether any process on the host has `uid` as its real, effective or
 * saved uid (a scan of /proc). */
bool ws_uids_has_processes(uid_t uid);
/* Ends every process of `uid`, in any namespace: a child that becomes
 * `uid` sends SIGKILL to every process it may signal (kill(-1)), which is
 * exactly the processes of that uid, and again while a scan still finds
 * one (a fork racing the first kill). Needs CAP_SETUID. Returns 0 when no
 * process of `uid` is left, -EBUSY when some still are after the tries,
 * -EINVAL for uid 0, or -errno. */
int ws_uids_kill_all(uid_t uid);

#endif
