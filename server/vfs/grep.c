/* Grep: PCRE2 over the regular files of a tree, walked iteratively and
 * resumable between calls.
 *
 * A file is read in chunks of GREP_CHUNK bytes cut after the last newline,
 * and each chunk is matched as one subject in multiline mode (one
 * pcre2_match call per matching line instead of one per line). A match
 * that spans a newline is re-checked against its first line alone, so
 * the result is what per-line matching would give. When a whole-chunk
 * call hits the match limit, the rest of the file is matched line by line
 * (each line then gets the whole budget); a line that still hits a limit
 * ends the file's scan and counts in limited_files.
 *
 * A line longer than a chunk is matched in chunk-sized windows that keep
 * GREP_LONG_OVERLAP bytes of the previous one (a match longer than that
 * across a window boundary is missed); it is reported once, cut at
 * WS_GREP_LINE_MAX, so memory stays one chunk whatever the line length.
 *
 * A request's budget: the CPU time of the threads that run it, summed over
 * every ws_grep_next call; the ctl with it; and the walk's entry budgets.
 * The time and the ctl are looked at before every pcre2_match call and
 * every file, cheaply: reading a clock costs about as much as matching a
 * short line, so the ctl and the monotonic clock are read only once the
 * time stamp counter says some tens of microseconds went by, and the
 * thread's CPU clock (a system call) only once the monotonic clock, which
 * never advances less than the thread's CPU time, says GREP_CPU_CHECK_NS
 * may have been spent.
 *
 * PCRE2's limits hold per start position, not per call: one call over a
 * chunk of short lines that each cost just under the limit runs for
 * seconds, and one over a long line of such start positions as well. So
 * under a budget a call tries a bounded number of start positions (an
 * offset limit), and a whole-chunk call also gets a lower limit per start
 * position (hitting it switches the file to line by line, as the full
 * limit does): no single call can outrun the budget by much.
 */
#include "server/vfs/ops.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#ifndef PCRE2_CODE_UNIT_WIDTH
#define PCRE2_CODE_UNIT_WIDTH 8 /* @system//:pcre2 defines it too */
#endif
#include <pcre2.h>

#include "server/base/time.h"
#include "server/vfs/internal.h"
#include "server/work/pool.h"

/* Bytes read and matched at once. */
#define GREP_CHUNK (128 * 1024)
/* Bytes of a long line carried from one window to the next. */
#define GREP_LONG_OVERLAP 1024
/* PCRE2 budgets per pcre2_match call: backtracking steps, nesting depth
 * (interpreter only) and backtracking memory (interpreter only). */
#define GREP_MATCH_LIMIT    2000000
#define GREP_DEPTH_LIMIT    10000
#define GREP_HEAP_LIMIT_KIB (16 * 1024)
/* The JIT's own stack. */
#define GREP_JIT_STACK_MIN (32 * 1024)
#define GREP_JIT_STACK_MAX (1024 * 1024)
/* Work one ws_grep_next call does at most before it returns (bytes read,
 * each file opened counting GREP_FILE_COST), so a search without matches
 * still comes back to its caller regularly. */
#define GREP_STEP_BYTES (16 * 1024 * 1024)
#define GREP_FILE_COST  4096
#define GREP_ENTRY_COST 64
/* Under a budget: start positions one pcre2_match call tries, and the
 * steps each may take, over a chunk; and the start positions of one call
 * in a line (with the full limit). A call then costs at most a few tens
 * of milliseconds, and normal text still goes at whole-chunk speed. */
#define GREP_CHUNK_STARTS      4096
#define GREP_CHUNK_MATCH_LIMIT 10000
#define GREP_LINE_STARTS       64
/* Time stamp counter ticks between two looks at the ctl and the clocks:
 * 10 to 50 microseconds at the counter's usual rates. */
#define GREP_CHECK_TICKS 50000
/* CPU time a search may spend between two readings of its clock. */
#define GREP_CPU_CHECK_NS (1000 * 1000)
/* ws_grep.halt once the CPU budget is spent. */
#define GREP_HALT_TIME 1

#define GREP_COMPILE_OPTS                                                                          \
    (PCRE2_MULTILINE | PCRE2_UTF | PCRE2_MATCH_INVALID_UTF | PCRE2_NEVER_BACKSLASH_C)

struct ws_grep {
    struct ws_fsops *ops;
    pcre2_code *re;
    pcre2_match_data *md;
    pcre2_match_context *mctx;
    pcre2_match_context *mctx_chunk; /* whole-chunk calls; NULL: mctx */
    /* Calls try a bounded number of start positions (a budget, and a
     * pattern whose matches do not depend on where a call starts). */
    bool windows;
    pcre2_jit_stack *jit_stack;

    struct ws_globpat *include; /* NULL: every file */
    uint64_t *inc_states;       /* per depth, ws_globpat_words each */
    size_t words;

    struct ws_walk *walk; /* NULL when the request names one file */
    bool single_pending;
    unsigned max_depth;
    uint64_t max_matches;
    bool done;
    int64_t step_left; /* work left in this ws_grep_next call */
    struct ws_grep_summary sum;

    /* The request's budget (has_budget false: none). */
    bool has_budget;
    struct ws_budget budget;
    int64_t cpu_used_ns;      /* by the ws_grep_next calls that returned */
    int64_t call_cpu_start;   /* thread CPU time when this call began */
    int64_t cpu_checked_mono; /* monotonic time of the last CPU reading */
    uint64_t checked_ticks;   /* cheap_ticks() at the last look at the ctl */
    bool check_due;           /* look at the ctl at the next chance */
    int halt;                 /* 0, GREP_HALT_TIME, or the ctl's -errno */

    /* The file being scanned. */
    struct ws_vfs_file *file;
    uint64_t file_off;
    uint64_t file_size; /* at open */
    bool eof;
    bool probed;       /* binary check done */
    bool per_line;     /* a whole-chunk match hit a limit */
    bool always_lines; /* the pattern can see past a line's end */
    unsigned char *buf;
    size_t have;       /* valid bytes in buf */
    size_t region;     /* buf[0, region) is complete lines */
    size_t pos;        /* next search offset in the region, a line start */
    size_t cnt_off;    /* newlines counted up to here... */
    uint64_t cnt_line; /* ...so this is the number of the line at cnt_off */

    /* A line longer than the chunk. */
    bool in_long;
    bool long_first, long_final, long_searched, long_reported;
    size_t long_end; /* window is buf[0, long_end) */
    uint64_t long_line;
    size_t head_len;
    unsigned char head[WS_GREP_LINE_MAX];

    size_t path_len;
    char path[WS_WALK_PATH_MAX + 1];
};

/* Thread CPU time the request has used, this call included. */
static int64_t cpu_spent(const struct ws_grep *g)
{
    return g->cpu_used_ns + ws_clock_ns(CLOCK_THREAD_CPUTIME_ID) - g->call_cpu_start;
}

/* ws_work_ctl_check against a monotonic time already read: this runs
 * before every pcre2_match, and one clock reading is a fair share of a
 * short line's cost. */
static int ctl_check_at(const struct ws_work_ctl *ctl, int64_t now_ns)
{
    if (!ctl)
        return 0;
    if (ctl->deadline_mono_ms > 0 && now_ns / WS_NSEC_PER_MSEC >= ctl->deadline_mono_ms)
        return -ETIMEDOUT;
    if (__atomic_load_n(&ctl->cancelled, __ATOMIC_ACQUIRE))
        return -ECANCELED;
    return 0;
}

/* A clock that costs a few cycles to read, used only to tell when the
 * real clocks are worth reading (which costs about as much as matching a
 * short line): the time stamp counter on x86-64, which counts at a
 * constant one to a few GHz, elsewhere the monotonic clock itself. */
static inline uint64_t cheap_ticks(void)
{
#if defined(__x86_64__)
    return __builtin_ia32_rdtsc();
#else
    return (uint64_t)ws_mono_ns();
#endif
}

/* Whether the search must stop now: the ctl stopped or the CPU budget is
 * spent (g->halt says which). Callers then return -EAGAIN, which
 * ws_grep_next turns into the end of the search. Called before every
 * pcre2_match, so it looks at the ctl and the clocks only once
 * GREP_CHECK_TICKS have passed since it last did, or on the first call
 * of each ws_grep_next. */
static bool grep_halted(struct ws_grep *g)
{
    uint64_t ticks;
    int64_t now;
    int r;

    if (!g->has_budget)
        return false;
    if (g->halt)
        return true;
    ticks = cheap_ticks();
    if (!g->check_due && ticks - g->checked_ticks < GREP_CHECK_TICKS)
        return false;
    g->check_due = false;
    g->checked_ticks = ticks;
    now = ws_mono_ns();
    r = ctl_check_at(g->budget.ctl, now);
    if (r < 0) {
        g->halt = r;
        return true;
    }
    if (g->budget.cpu_budget_ns <= 0 || now - g->cpu_checked_mono < GREP_CPU_CHECK_NS)
        return false;
    g->cpu_checked_mono = now;
    if (cpu_spent(g) >= g->budget.cpu_budget_ns) {
        g->halt = GREP_HALT_TIME;
        return true;
    }
    return false;
}

/* Newlines in p[0, n), eight bytes at a time. */
static uint64_t count_nl(const unsigned char *p, size_t n)
{
    const uint64_t ones = UINT64_C(0x0101010101010101);
    const uint64_t low7 = UINT64_C(0x7f7f7f7f7f7f7f7f);
    uint64_t c = 0;
    size_t i = 0;

    for (; i + 8 <= n; i += 8) {
        uint64_t x, y;

        memcpy(&x, p + i, 8);
        x ^= ones * '\n'; /* newline bytes become zero */
        y = (x & low7) + low7;
        y = ~(y | x | low7); /* high bit set exactly in zero bytes */
        c += (uint64_t)__builtin_popcountll(y);
    }
    for (; i < n; i++)
        c += p[i] == '\n';
    return c;
}

/* Number of the line starting at `off` (off >= cnt_off). */
static uint64_t line_at(struct ws_grep *g, size_t off)
{
    g->cnt_line += count_nl(g->buf + g->cnt_off, off - g->cnt_off);
    g->cnt_off = off;
    return g->cnt_line;
}

static bool is_limit(int rc)
{
    return rc == PCRE2_ERROR_MATCHLIMIT || rc == PCRE2_ERROR_DEPTHLIMIT ||
           rc == PCRE2_ERROR_HEAPLIMIT || rc == PCRE2_ERROR_JIT_STACKLIMIT ||
           rc == PCRE2_ERROR_NOMEMORY;
}

/* match_call: the search must stop (grep_halted). */
#define GREP_RC_HALTED INT_MIN

/* pcre2_match of subj[0, len) from `start`. Under a budget the budget is
 * checked first and, with windows, each call tries at most `starts` start
 * positions, the next call going on after them, until a match, an error
 * or the end. Returns pcre2_match's result or GREP_RC_HALTED. */
static int match_call(struct ws_grep *g, const unsigned char *subj, size_t len, size_t start,
                      uint32_t opts, bool chunk)
{
    pcre2_match_context *mctx = chunk && g->mctx_chunk ? g->mctx_chunk : g->mctx;
    size_t starts = chunk ? GREP_CHUNK_STARTS : GREP_LINE_STARTS;

    if (!g->has_budget)
        return pcre2_match(g->re, subj, len, start, opts, g->md, mctx);
    for (;;) {
        size_t last;
        int rc;

        if (grep_halted(g))
            return GREP_RC_HALTED;
        if (!g->windows || len - start <= starts) {
            if (g->windows)
                pcre2_set_offset_limit(mctx, PCRE2_UNSET);
            return pcre2_match(g->re, subj, len, start, opts, g->md, mctx);
        }
        last = start + starts - 1;
        pcre2_set_offset_limit(mctx, last);
        rc = pcre2_match(g->re, subj, len, start, opts, g->md, mctx);
        if (rc != PCRE2_ERROR_NOMATCH)
            return rc;
        /* A start inside a UTF-8 sequence is no start at all. */
        for (start = last + 1; start < len && (subj[start] & 0xc0) == 0x80; start++)
            ;
        if (start >= len)
            return rc;
    }
}

/* 1 match (ovector in g->md), 0 none, -1 a limit or another matching
 * error (the file's scan stops), -EAGAIN when the search must stop
 * (grep_halted). */
static int match(struct ws_grep *g, const unsigned char *subj, size_t len, size_t start,
                 uint32_t opts)
{
    int rc = match_call(g, subj, len, start, opts, false);

    if (rc >= 0)
        return 1;
    if (rc == PCRE2_ERROR_NOMATCH)
        return 0;
    if (rc == GREP_RC_HALTED)
        return -EAGAIN;
    return -1;
}

static void file_close(struct ws_grep *g)
{
    g->ops->fs->ops->close(g->file);
    g->file = NULL;
}

static void file_limited(struct ws_grep *g)
{
    g->sum.limited_files++;
    file_close(g);
}

static void report_line(struct ws_grep *g, size_t ls, size_t le, struct ws_grep_match *m)
{
    size_t len = le - ls;

    *m = (struct ws_grep_match){
        .path = g->path,
        .path_len = g->path_len,
        .line_number = line_at(g, ls),
        .line = (const char *)g->buf + ls,
        .line_len = len > WS_GREP_LINE_MAX ? WS_GREP_LINE_MAX : len,
        .line_truncated = len > WS_GREP_LINE_MAX,
    };
}

/* Reads until the buffer is full or the file ends. */
static int read_more(struct ws_grep *g)
{
    while (g->have < GREP_CHUNK && !g->eof) {
        ssize_t n =
            g->ops->fs->ops->pread(g->file, g->buf + g->have, GREP_CHUNK - g->have, g->file_off);

        if (n < 0)
            return (int)n;
        if (n == 0) {
            g->eof = true;
            break;
        }
        g->have += (size_t)n;
        g->file_off += (uint64_t)n;
        g->step_left -= n;
        /* A short read up to the size the file had when opened is the
         * end: one read() per small file instead of two. */
        if (g->have < GREP_CHUNK && g->file_off >= g->file_size)
            g->eof = true;
    }
    return 0;
}

/* Drops the searched region, reads the next chunk and cuts it after its
 * last newline. 1 when there is something to search, 0 at the end of the
 * file (closed), or -errno. */
static int refill(struct ws_grep *g)
{
    const unsigned char *nl;
    uint64_t next_line = line_at(g, g->region);
    int r;

    memmove(g->buf, g->buf + g->region, g->have - g->region);
    g->have -= g->region;
    g->region = g->pos = g->cnt_off = 0;
    g->cnt_line = next_line;
    r = read_more(g);
    if (r < 0)
        return r;
    if (!g->probed) {
        g->probed = true;
        if (memchr(g->buf, 0, g->have < WS_GREP_BINARY_PROBE ? g->have : WS_GREP_BINARY_PROBE)) {
            g->sum.binary_files_skipped++;
            file_close(g);
            return 0;
        }
        g->sum.files_scanned++;
    }
    if (g->have == 0) {
        file_close(g);
        return 0;
    }
    if (g->eof) {
        g->region = g->have;
        return 1;
    }
    nl = memrchr(g->buf, '\n', g->have);
    if (nl) {
        g->region = (size_t)(nl - g->buf) + 1;
        return 1;
    }
    /* A full chunk without a newline: the start of a long line. */
    g->in_long = true;
    g->long_first = true;
    g->long_final = false;
    g->long_searched = false;
    g->long_reported = false;
    g->long_end = g->have;
    g->long_line = g->cnt_line;
    g->head_len = g->have < WS_GREP_LINE_MAX ? g->have : WS_GREP_LINE_MAX;
    memcpy(g->head, g->buf, g->head_len);
    return 1;
}

/* Next matching line of the region, one pcre2_match call per line. */
static int region_next_per_line(struct ws_grep *g, struct ws_grep_match *m)
{
    while (g->pos < g->region) {
        const unsigned char *nl = memchr(g->buf + g->pos, '\n', g->region - g->pos);
        size_t ls = g->pos, le = nl ? (size_t)(nl - g->buf) : g->region;
        int rc;

        g->pos = nl ? le + 1 : g->region;
        rc = match(g, g->buf + ls, le - ls, 0, 0);
        if (rc == -EAGAIN)
            return rc;
        if (rc < 0) {
            file_limited(g);
            return 0;
        }
        if (rc > 0) {
            report_line(g, ls, le, m);
            return 1;
        }
    }
    return 0;
}

/* Next matching line of the region: 1 (*m filled), 0 when the region is
 * done or the file was stopped (g->file NULL), -EAGAIN when the search
 * must stop (grep_halted). */
static int region_next(struct ws_grep *g, struct ws_grep_match *m)
{
    while (g->pos < g->region) {
        const PCRE2_SIZE *ov;
        const unsigned char *p;
        size_t o, e, ls, le;
        int rc;

        if (g->per_line)
            return region_next_per_line(g, m);
        rc = match_call(g, g->buf, g->region, g->pos, 0, true);
        if (rc == GREP_RC_HALTED)
            return -EAGAIN;
        if (rc == PCRE2_ERROR_NOMATCH) {
            g->pos = g->region;
            return 0;
        }
        if (rc < 0) {
            if (!is_limit(rc)) {
                file_limited(g);
                return 0;
            }
            g->per_line = true;
            continue;
        }
        ov = pcre2_get_ovector_pointer(g->md);
        o = ov[0];
        e = ov[1];
        if (o < g->pos || o > g->region || e < o) { /* \K can move the start back */
            g->per_line = true;
            continue;
        }
        /* An empty match after the final newline is not on a line. */
        if (o == g->region && g->buf[g->region - 1] == '\n') {
            g->pos = g->region;
            return 0;
        }
        p = o > g->pos ? memrchr(g->buf + g->pos, '\n', o - g->pos) : NULL;
        ls = p ? (size_t)(p - g->buf) + 1 : g->pos;
        p = memchr(g->buf + o, '\n', g->region - o);
        le = p ? (size_t)(p - g->buf) : g->region;
        g->pos = p ? le + 1 : g->region;
        if (e > le) {
            /* The match runs past the end of the line: does the line
             * match on its own? */
            rc = match(g, g->buf + ls, le - ls, 0, 0);
            if (rc == -EAGAIN)
                return rc;
            if (rc < 0) {
                file_limited(g);
                return 0;
            }
            if (rc == 0)
                continue;
        }
        report_line(g, ls, le, m);
        return 1;
    }
    return 0;
}

/* Ends long-line mode: what follows the line's newline becomes the
 * unsearched rest of the buffer, numbered from the next line. */
static void long_exit(struct ws_grep *g)
{
    g->in_long = false;
    g->region = g->long_end < g->have ? g->long_end + 1 : g->have;
    g->pos = g->region;
    g->cnt_off = 0;
    g->cnt_line = g->long_line;
}

/* Advances through a long line one window at a time. 1: the line matched
 * (*m filled); 0: the line is done (or the file was stopped); -errno. */
static int long_next(struct ws_grep *g, struct ws_grep_match *m)
{
    for (;;) {
        const unsigned char *nl;
        size_t keep;
        int r;

        if (!g->long_searched) {
            g->long_searched = true;
            if (!g->long_reported) {
                uint32_t opts =
                    (g->long_first ? 0 : PCRE2_NOTBOL) | (g->long_final ? 0 : PCRE2_NOTEOL);

                r = match(g, g->buf, g->long_end, 0, opts);
                if (r == -EAGAIN)
                    return r; /* the search ends: it never resumes */
                if (r < 0) {
                    file_limited(g);
                    return 0;
                }
                if (r > 0) {
                    g->long_reported = true;
                    *m = (struct ws_grep_match){
                        .path = g->path,
                        .path_len = g->path_len,
                        .line_number = g->long_line,
                        .line = (const char *)g->head,
                        .line_len = g->head_len,
                        .line_truncated = true,
                    };
                    return 1;
                }
            }
        }
        if (g->long_final) {
            long_exit(g);
            return 0;
        }
        if (g->step_left <= 0)
            return -EAGAIN; /* resumes here: the window is searched */
        keep = g->long_reported ? 0 : (g->have < GREP_LONG_OVERLAP ? g->have : GREP_LONG_OVERLAP);
        memmove(g->buf, g->buf + g->have - keep, keep);
        g->have = keep;
        g->long_first = false;
        r = read_more(g);
        if (r < 0)
            return r;
        nl = memchr(g->buf + keep, '\n', g->have - keep);
        g->long_end = nl ? (size_t)(nl - g->buf) : g->have;
        g->long_final = nl || g->eof;
        g->long_searched = false;
    }
}

/* Next matching line of the current file: 1, or 0 when the file is done
 * (it is closed then), or -errno. */
static int file_next(struct ws_grep *g, struct ws_grep_match *m)
{
    int r;

    while (g->file) {
        if (g->in_long) {
            r = long_next(g, m);
            if (r != 0)
                return r;
            continue;
        }
        if (g->pos < g->region) {
            r = region_next(g, m);
            if (r != 0)
                return r;
            continue;
        }
        if (g->step_left <= 0 || grep_halted(g))
            return -EAGAIN;
        r = refill(g);
        if (r < 0)
            return r;
    }
    return 0;
}

static void file_start(struct ws_grep *g, struct ws_vfs_file *f, const struct ws_stat *st,
                       const char *path, size_t len)
{
    g->file = f;
    g->file_off = 0;
    g->file_size = st->size;
    g->eof = false;
    g->probed = false;
    g->per_line = g->always_lines;
    g->have = g->region = g->pos = g->cnt_off = 0;
    g->cnt_line = 1;
    g->in_long = false;
    memcpy(g->path, path, len);
    g->path[len] = '\0';
    g->path_len = len;
    g->step_left -= GREP_FILE_COST;
}

/* Opens the next file to search: 1, 0 when there are none left, -errno. */
static int next_file(struct ws_grep *g)
{
    struct ws_vfs *fs = g->ops->fs;
    struct ws_walk_entry e;
    int r;

    if (!g->walk) {
        struct ws_vfs_file *f;
        struct ws_stat st;

        if (!g->single_pending)
            return 0;
        g->single_pending = false;
        r = fs->ops->open_read(fs, g->path, &f, &st);
        if (r < 0)
            return ws_walk_skippable(r) ? 0 : r;
        file_start(g, f, &st, g->path, g->path_len);
        return 1;
    }
    for (;;) {
        uint64_t *st_here = NULL;
        enum ws_ftype type;
        struct ws_vfs_file *f;
        struct ws_stat st;

        if (g->step_left <= 0 || grep_halted(g))
            return -EAGAIN;
        r = ws_walk_next(g->walk, &e);
        if (r <= 0)
            return r;
        g->step_left -= GREP_ENTRY_COST;
        type = e.type;

        if (g->include) {
            st_here = g->inc_states + (size_t)e.depth * g->words;
            ws_globpat_step(g->include, st_here - g->words, e.name, st_here);
        }
        if (type == WS_FT_UNKNOWN) {
            r = fs->ops->stat_at(e.dir, e.name, &st);
            if (r < 0) {
                if (ws_walk_skippable(r))
                    continue;
                return r;
            }
            type = st.type;
        }
        if (type == WS_FT_DIRECTORY) {
            if (e.depth >= g->max_depth || (g->include && !ws_globpat_alive(g->include, st_here)))
                continue;
            r = ws_walk_descend(g->walk, 0);
            if (r < 0 && !ws_walk_skippable(r))
                return r;
            continue;
        }
        if (type != WS_FT_REGULAR)
            continue; /* symlinks are never followed, special files never opened */
        if (g->include && !ws_globpat_accepts(g->include, st_here))
            continue;
        r = fs->ops->open_read_at(e.dir, e.name, &f, &st);
        if (r < 0) {
            if (ws_walk_skippable(r))
                continue;
            return r;
        }
        file_start(g, f, &st, e.path, e.path_len);
        return 1;
    }
}

static void truncate_for(struct ws_grep *g, enum ws_trunc_reason reason)
{
    g->sum.truncated = true;
    g->sum.truncated_reason = reason;
    g->done = true;
    if (g->file)
        file_close(g);
}

/* A step that returned -EAGAIN: 1 to come back later, or the search ends
 * here because its budget said so (0, truncated) or its ctl (-errno). */
static int paused(struct ws_grep *g)
{
    if (g->halt == 0)
        return 1;
    if (g->halt < 0)
        return g->halt;
    truncate_for(g, WS_TRUNC_TIME_BUDGET);
    return 0;
}

static int grep_next(struct ws_grep *g, unsigned batch, ws_grep_cb cb, void *userdata)
{
    unsigned reported = 0;
    int r;

    for (;;) {
        struct ws_grep_match m;

        if (batch && reported >= batch)
            return 1;
        if (!g->file) {
            r = next_file(g);
            if (r == -EAGAIN)
                return paused(g);
            if (r < 0)
                return r;
            if (r == 0) {
                g->done = true;
                if (g->walk && ws_walk_truncated(g->walk))
                    truncate_for(g, WS_TRUNC_ENTRIES_BUDGET);
                return 0;
            }
        }
        r = file_next(g, &m);
        if (r == -EAGAIN)
            return paused(g);
        if (r < 0)
            return r;
        if (r == 0)
            continue;
        if (g->sum.matches >= g->max_matches) {
            truncate_for(g, WS_TRUNC_MAX_RESULTS);
            return 0;
        }
        g->sum.matches++;
        reported++;
        r = cb(userdata, &m);
        if (r < 0)
            return r;
    }
}

int ws_grep_next(struct ws_grep *g, unsigned batch, ws_grep_cb cb, void *userdata)
{
    bool timed = g->has_budget && g->budget.cpu_budget_ns > 0;
    int r;

    if (g->halt < 0)
        return g->halt;
    if (g->done)
        return 0;
    g->step_left = GREP_STEP_BYTES;
    g->check_due = true;
    if (timed) {
        g->call_cpu_start = ws_clock_ns(CLOCK_THREAD_CPUTIME_ID);
        g->cpu_checked_mono = ws_mono_ns();
        /* Spent in earlier calls: stop before doing anything. */
        if (g->cpu_used_ns >= g->budget.cpu_budget_ns)
            g->halt = GREP_HALT_TIME;
    }
    r = g->halt ? paused(g) : grep_next(g, batch, cb, userdata);
    if (timed)
        g->cpu_used_ns = cpu_spent(g);
    /* A stop the walk saw first stays the answer, as one seen here does. */
    if (r < 0 && g->halt == 0 && g->has_budget && ws_budget_check(&g->budget) == r)
        g->halt = r;
    return r;
}

void ws_grep_get_summary(const struct ws_grep *g, struct ws_grep_summary *ret)
{
    *ret = g->sum;
}

void ws_grep_free(struct ws_grep *g)
{
    if (!g)
        return;
    if (g->file)
        file_close(g);
    ws_walk_free(g->walk);
    ws_globpat_free(g->include);
    free(g->inc_states);
    free(g->buf);
    pcre2_match_data_free(g->md);
    pcre2_match_context_free(g->mctx);
    pcre2_match_context_free(g->mctx_chunk);
    pcre2_jit_stack_free(g->jit_stack);
    pcre2_code_free(g->re);
    free(g);
}

/* Constructs whose result can depend on text beyond the line they match
 * in when the subject is a whole chunk: lookarounds, \A \z \Z \G, \K
 * (moves the reported start) and (*VERB)s (which can change what a
 * newline is). Patterns with them are matched line by line. Erring
 * towards true only costs speed. */
static bool needs_lines(const char *p, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        if (p[i] == '\\' && i + 1 < len) {
            if (strchr("AzZGK", p[i + 1]))
                return true;
            i++;
        } else if (p[i] == '(' && i + 2 < len && (p[i + 1] == '*' || p[i + 1] == '?')) {
            char c = p[i + 2];

            if (p[i + 1] == '*' || c == '=' || c == '!' ||
                (c == '<' && i + 3 < len && (p[i + 3] == '=' || p[i + 3] == '!')))
                return true;
        }
    }
    return false;
}

/* Constructs whose result depends on where a pcre2_match call starts
 * (\G) or that end a call's search early ((*COMMIT) and the other
 * verbs): patterns with them are matched without windows. */
static bool starts_matter(const char *p, size_t len)
{
    for (size_t i = 0; i + 1 < len; i++) {
        if (p[i] == '\\') {
            if (p[i + 1] == 'G')
                return true;
            i++;
        } else if (p[i] == '(' && p[i + 1] == '*') {
            return true;
        }
    }
    return false;
}

static int compile(struct ws_grep *g, const struct ws_grep_request *req, struct ws_diag *d)
{
    pcre2_compile_context *cctx = NULL;
    PCRE2_SIZE erroff = 0;
    size_t len;
    int err = 0, r;

    len = strnlen(req->pattern, WS_GREP_PATTERN_MAX + 1);
    if (len > WS_GREP_PATTERN_MAX) {
        ws_diag_set(d, "pattern longer than %d bytes", WS_GREP_PATTERN_MAX);
        ws_diag_meta(d, "limit", "%d", WS_GREP_PATTERN_MAX);
        return -WS_EBADPATTERN;
    }
    g->always_lines = needs_lines(req->pattern, len);
    g->windows = g->has_budget && !starts_matter(req->pattern, len);
    cctx = pcre2_compile_context_create(NULL);
    if (!cctx)
        return -ENOMEM;
    pcre2_set_newline(cctx, PCRE2_NEWLINE_LF);
    g->re = pcre2_compile((PCRE2_SPTR)req->pattern, len,
                          GREP_COMPILE_OPTS | (req->ignore_case ? PCRE2_CASELESS : 0) |
                              (g->windows ? PCRE2_USE_OFFSET_LIMIT : 0),
                          &err, &erroff, cctx);
    pcre2_compile_context_free(cctx);
    if (!g->re) {
        PCRE2_UCHAR msg[WS_DIAG_MESSAGE_MAX];

        if (err == PCRE2_ERROR_NOMEMORY)
            return -ENOMEM;
        if (pcre2_get_error_message(err, msg, sizeof(msg)) < 0)
            msg[0] = '\0';
        ws_diag_set(d, "bad pattern at offset %zu: %s", (size_t)erroff, (const char *)msg);
        ws_diag_meta(d, "offset", "%zu", (size_t)erroff);
        return -WS_EBADPATTERN;
    }
    g->mctx = pcre2_match_context_create(NULL);
    g->md = pcre2_match_data_create(1, NULL);
    if (!g->mctx || !g->md)
        return -ENOMEM;
    pcre2_set_match_limit(g->mctx, GREP_MATCH_LIMIT);
    pcre2_set_depth_limit(g->mctx, GREP_DEPTH_LIMIT);
    pcre2_set_heap_limit(g->mctx, GREP_HEAP_LIMIT_KIB);
    /* The JIT is an optimization: without it (not built in, out of
     * executable memory) the interpreter gives the same results. */
    r = pcre2_jit_compile(g->re, PCRE2_JIT_COMPLETE);
    if (r == 0) {
        g->jit_stack = pcre2_jit_stack_create(GREP_JIT_STACK_MIN, GREP_JIT_STACK_MAX, NULL);
        if (g->jit_stack)
            pcre2_jit_stack_assign(g->mctx, NULL, g->jit_stack);
    }
    if (g->has_budget) {
        g->mctx_chunk = pcre2_match_context_copy(g->mctx);
        if (!g->mctx_chunk)
            return -ENOMEM;
        pcre2_set_match_limit(g->mctx_chunk, GREP_CHUNK_MATCH_LIMIT);
    }
    return 0;
}

/* Starting state of the include pattern for entries below `base`: the
 * pattern has already consumed base's components. */
static void include_start(struct ws_grep *g, const char *base)
{
    uint64_t *a = g->inc_states, *b = g->inc_states + g->words;
    char name[WS_VFS_NAME_MAX + 1];
    const char *s = base;

    ws_globpat_start(g->include, a);
    while (*s) {
        const char *end = strchrnul(s, '/');
        size_t n = (size_t)(end - s);

        memcpy(name, s, n);
        name[n] = '\0';
        ws_globpat_step(g->include, a, name, b);
        memcpy(a, b, g->words * sizeof(*a));
        s = *end ? end + 1 : end;
    }
}

int ws_grep_start(struct ws_fsops *ops, const struct ws_grep_request *req, struct ws_diag *d,
                  struct ws_grep **ret)
{
    char base[WS_VFS_PATH_MAX + 1];
    const char *path = req->path && req->path[0] ? req->path : ".";
    struct ws_grep *g = NULL;
    struct ws_stat st;
    int r, blen;

    if (!req->pattern) {
        ws_diag_meta(d, "field", "pattern");
        return -WS_EMALFORMED;
    }
    if (req->max_matches > WS_GREP_MAX_MATCHES) {
        ws_diag_meta(d, "limit", "%d", WS_GREP_MAX_MATCHES);
        return -WS_ELIMIT;
    }
    if (req->max_depth > WS_LIST_DEPTH_MAX) {
        ws_diag_meta(d, "limit", "%d", WS_LIST_DEPTH_MAX);
        return -WS_ELIMIT;
    }
    r = ws_vfs_check_path(path);
    if (r < 0)
        return r;
    blen = ws_path_normalize(path, base, sizeof(base));
    if (blen < 0)
        return blen;

    g = calloc(1, sizeof(*g));
    if (!g)
        return -ENOMEM;
    g->ops = ops;
    if (req->budget) {
        g->has_budget = true;
        g->budget = *req->budget;
    }
    g->max_matches = req->max_matches ? req->max_matches : WS_GREP_DEFAULT_MATCHES;
    g->max_depth = req->max_depth ? req->max_depth : WS_LIST_DEPTH_MAX;
    r = compile(g, req, d);
    if (r < 0)
        goto out;
    if (req->include && req->include[0]) {
        r = ws_globpat_compile(req->include, &g->include);
        if (r < 0) {
            ws_diag_set(d, "bad include pattern");
            ws_diag_meta(d, "field", "include");
            goto out;
        }
        g->words = ws_globpat_words(g->include);
        g->inc_states = calloc((WS_LIST_DEPTH_MAX + 1) * g->words, sizeof(*g->inc_states));
        if (!g->inc_states) {
            r = -ENOMEM;
            goto out;
        }
        include_start(g, base);
    }
    g->buf = malloc(GREP_CHUNK);
    if (!g->buf) {
        r = -ENOMEM;
        goto out;
    }

    r = ops->fs->ops->stat(ops->fs, path, &st);
    if (r < 0)
        goto out;
    switch (st.type) {
    case WS_FT_DIRECTORY:
        r = ws_walk_open(ops->fs, path, base, 0, g->has_budget ? &g->budget : NULL, &g->walk);
        if (r < 0)
            goto out;
        break;
    case WS_FT_REGULAR:
        /* One file: the include filter applies to its path as well. */
        g->single_pending = !g->include || ws_globpat_accepts(g->include, g->inc_states);
        memcpy(g->path, base, (size_t)blen + 1);
        g->path_len = (size_t)blen;
        break;
    case WS_FT_SYMLINK:
        r = -WS_ESYMLINK_LEAF;
        goto out;
    default:
        r = -WS_ESPECIAL;
        goto out;
    }
    *ret = g;
    g = NULL;
    r = 0;
out:
    ws_grep_free(g);
    return r;
}
