/* Watching a workspace's files: the engine behind FileSystem.Watch.
 *
 * One engine per server: one thread that waits (epoll) on every watch's
 * inotify descriptor and on a wakeup eventfd, merges the changes of one
 * path that come within a watch's window into one event, and hands the
 * results to each watch's consumer. A watch covers a directory (with its
 * subdirectories when recursive) or one file of a struct ws_vfs:
 *
 *  * a storage on a host directory (open_dir_fd): inotify on the
 *    directories. The watch's directory is opened by the storage
 *    (confined, never through a symlink) and every directory below it
 *    with openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS) from there, and
 *    watched through its descriptor (/proc/self/fd/N, IN_ONLYDIR), so a
 *    symlink, even one to "/", is reported as an entry and never followed.
 *    A new directory is watched first and listed second: what the listing
 *    finds is reported `created`, so nothing made in it is missed.
 *  * a storage that reports its own changes (subscribe): those reports.
 *
 * Bounds: every watch holds at most WS_WATCH_MAX_PENDING events (merging
 * and waiting to be taken); past it events are dropped and counted, and
 * an OVERFLOW event says so (also when the kernel's queue overflowed). A
 * watch covers at most WS_WATCH_MAX_DIRECTORIES directories. The engine
 * admits at most max_watches watches, and max_watches_per_key per key (a
 * workspace id).
 *
 * Thread safety: every function may be called from any thread. The
 * callbacks of a watch (notify, check, released) run on the engine's
 * thread with no engine lock held; they may call ws_watch_next and
 * ws_watch_stop.
 *
 * Return values: >= 0 or a negated errno / WS_E* (server/base/errors.h).
 */
#ifndef WS_WATCH_WATCH_H
#define WS_WATCH_WATCH_H

#include <stdbool.h>
#include <stdint.h>

#include "server/base/errors.h"
#include "server/vfs/vfs.h"

#ifdef __cplusplus
extern "C" {
#endif

#define WS_WATCH_MAX_WATCHES_DEFAULT         100
#define WS_WATCH_MAX_WATCHES_PER_KEY_DEFAULT 16
#define WS_WATCH_MAX_PENDING                 4096
#define WS_WATCH_MAX_DIRECTORIES             65536
#define WS_WATCH_COALESCE_MS_DEFAULT         10
#define WS_WATCH_COALESCE_MS_MAX             1000
#define WS_WATCH_PATTERNS_MAX                64
/* How often a watch's check callback runs. */
#define WS_WATCH_CHECK_MS 200

enum ws_watch_kind {
    WS_WATCH_READY = 1,
    WS_WATCH_CREATED,
    WS_WATCH_MODIFIED,
    WS_WATCH_REMOVED,
    WS_WATCH_MOVED,
    WS_WATCH_OVERFLOW,
    WS_WATCH_GONE,
};

struct ws_watch_event {
    enum ws_watch_kind kind;
    enum ws_ftype type;
    /* Workspace-relative; "" for READY, OVERFLOW and GONE. */
    char *path;
    /* MOVED: the old path; else NULL. */
    char *from;
    /* OVERFLOW: events the watch dropped (0: the kernel's queue
     * overflowed, count unknown). */
    uint64_t dropped;
};

void ws_watch_event_free(struct ws_watch_event *ev);

struct ws_watch_engine;
struct ws_watch;

/* Starts the engine's thread. Returns 0, -ENOMEM or -errno. */
int ws_watch_engine_new(struct ws_watch_engine **ret);
/* Only once every watch was stopped and released. Accepts NULL. */
void ws_watch_engine_free(struct ws_watch_engine *e);
/* The server's limits (0: the default). Lowering them refuses new watches
 * only. */
/* Watches running under `key` (a workspace id). */
unsigned ws_watch_engine_count_key(struct ws_watch_engine *e, const char *key);
void ws_watch_engine_set_limits(struct ws_watch_engine *e, unsigned max_watches,
                                unsigned max_watches_per_key);
/* Watches running now (for tests and metrics). */
unsigned ws_watch_engine_count(struct ws_watch_engine *e);

struct ws_watch_config {
    /* The storage; must stay valid until released is called. */
    struct ws_vfs *fs;
    /* What the per-key limit counts (a workspace id); copied. */
    const char *key;
    /* The watched path, workspace-relative ("." is the root). */
    const char *path;
    bool recursive;
    /* 0: WS_WATCH_COALESCE_MS_DEFAULT; over WS_WATCH_COALESCE_MS_MAX is
     * -WS_ELIMIT. */
    uint32_t coalesce_ms;
    /* Globs (ws_glob_match) on workspace-relative paths; copied. */
    const char *const *include;
    size_t n_include;
    const char *const *exclude;
    size_t n_exclude;
    /* Events are waiting (or the watch ended): call ws_watch_next. */
    void (*notify)(void *ud);
    /* Optional, every WS_WATCH_CHECK_MS: a negative return ends the watch
     * with that error (ws_watch_next returns it). */
    int (*check)(void *ud);
    /* After ws_watch_stop: the watch is gone, no callback of it runs any
     * more and cfg.fs is no longer used. Called exactly once. */
    void (*released)(void *ud);
    void *ud;
};

/* Puts the watches in place (the directory walk of a recursive watch
 * happens here, on the caller's thread) and queues READY. Errors: -ENOENT,
 * -ENOTDIR (recursive on a file), -WS_EBADPATTERN, -WS_ELIMIT,
 * -WS_ECAPABILITY (the storage can be watched neither way), -WS_EQUOTA
 * with diag metadata quota=server_watches, watches or
 * watched_directories (also when the kernel's inotify limits are hit), and
 * limit. On error nothing is left behind and released is never called. */
int ws_watch_start(struct ws_watch_engine *e, const struct ws_watch_config *cfg, struct ws_diag *d,
                   struct ws_watch **ret);

/* The next event: 1 with *ret (free it with ws_watch_event_free), 0 when
 * none is waiting, or the error the watch ended with (a check's). After
 * GONE, -ENOENT. */
int ws_watch_next(struct ws_watch *w, struct ws_watch_event **ret);

/* Ends the watch: returns at once, its slot of the limits is free again;
 * the engine frees it later and then calls released. Call once; w is not
 * to be used after. */
void ws_watch_stop(struct ws_watch *w);

#ifdef __cplusplus
}
#endif

#endif
