/* The archive extractor (server/vfs/archive.h, ws_tar_in_*) into a memory
 * workspace (server/providers/memory.h), the input as the upload stream.
 *
 * The first input byte picks the request: bit 0 gzip, bits 1-2 the
 * overwrite policy (NONE, REPLACE, MERGE), bit 3 the root as the target
 * (with MERGE) instead of "out"; with REPLACE or MERGE the workspace
 * already holds out/keep.txt and out/dir/. The rest is the stream, fed in
 * pieces of sizes drawn from the input, then extracted, and published
 * when the extraction succeeded. The memory tree is capped (bytes and
 * entries), files at 1 MiB, and a quota callback refuses past 4 MiB.
 *
 * Checked besides memory safety: no staging entry is left anywhere; a
 * failed extraction leaves the workspace as it was (same entries); a
 * published one has its target; nothing is ever made outside the target
 * (every entry is the target or beneath it, or was there before).
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "server/providers/memory.h"
#include "server/vfs/archive.h"
#include "server/vfs/vfs.h"
#include "tests/fuzz/fuzz.h"

#define FILE_MAX  (1u << 20)
#define QUOTA_MAX (4u << 20)

static int quota(void *userdata, uint64_t bytes, struct ws_diag *d)
{
    (void)userdata;
    if (bytes <= QUOTA_MAX)
        return 0;
    ws_diag_set(d, "over the fuzz quota");
    return -WS_EQUOTA;
}

struct walk {
    const char *target; /* "" for the root */
    bool pre;           /* the workspace was prepared */
    uint64_t entries;
};

static bool beneath(const char *path, const char *target)
{
    size_t n = strlen(target);

    return n == 0 || (strncmp(path, target, n) == 0 && (path[n] == '\0' || path[n] == '/'));
}

static void walk_dir(struct ws_vfs *fs, const char *path, struct walk *w, int depth)
{
    struct ws_vfs_dir *dir = NULL;
    struct ws_dirent e;
    char child[WS_VFS_PATH_MAX + 1];
    int r;

    FUZZ_CHECK(depth < 1100, "a tree deeper than any path");
    r = fs->ops->opendir(fs, path, &dir);
    FUZZ_CHECK(r == 0, "a listed directory does not open");
    while ((r = fs->ops->readdir(dir, &e)) == 1) {
        struct ws_stat st;
        FUZZ_CHECK(!ws_vfs_transient_name(e.name, e.name_len, NULL),
                   "a staging or temporary entry left behind");
        FUZZ_CHECK(snprintf(child, sizeof(child), "%s%s%.*s", strcmp(path, ".") ? path : "",
                            strcmp(path, ".") ? "/" : "", (int)e.name_len,
                            e.name) < (int)sizeof(child),
                   "a path longer than the maximum");
        FUZZ_CHECK(beneath(child, w->target) || beneath(w->target, child) ||
                       (w->pre && beneath(child, "out")),
                   "an entry made outside the target");
        w->entries++;
        FUZZ_CHECK(fs->ops->stat(fs, child, &st) == 0, "a listed entry does not stat");
        if (st.type == WS_FT_DIRECTORY)
            walk_dir(fs, child, w, depth + 1);
    }
    FUZZ_CHECK(r == 0, "readdir failed");
    fs->ops->closedir(dir);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct ws_vfs *fs = NULL;
    struct ws_fsops *ops = NULL;
    struct ws_tar_in *t = NULL;
    struct ws_diag d;
    struct fuzz_rng rng;
    struct ws_tar_in_request req = {
        .max_file_size = FILE_MAX,
        .quota = quota,
    };
    struct walk w = {.target = "out"};
    uint64_t nodes_before;
    size_t pos = 0;
    int r, run = -1;

    if (size < 1)
        return 0;
    fuzz_rng_seed(&rng, data, size);
    req.format = (data[0] & 1) ? WS_TAR_GZIP : WS_TAR_PLAIN;
    req.overwrite = (enum ws_tar_overwrite)((data[0] >> 1) & 3);
    if (req.overwrite > WS_TAR_OVERWRITE_MERGE)
        req.overwrite = WS_TAR_OVERWRITE_NONE;
    if ((data[0] & 8) && req.overwrite == WS_TAR_OVERWRITE_MERGE)
        w.target = "";
    req.path = w.target[0] ? w.target : ".";
    data++;
    size--;

    FUZZ_CHECK(ws_memfs_new(&fs) == 0, "ws_memfs_new");
    ws_memfs_set_limits(fs, 8u << 20, 10000);
    FUZZ_CHECK(ws_fsops_new(fs, &ops) == 0, "ws_fsops_new");
    if (req.overwrite != WS_TAR_OVERWRITE_NONE) {
        struct ws_write_opts wo = {.create_parents = true};
        struct ws_vfs_writer *wr = NULL;
        w.pre = true;
        FUZZ_CHECK(fs->ops->mkdir(fs, "out/dir", true, 0755) == 0, "mkdir out/dir");
        FUZZ_CHECK(fs->ops->write_begin(fs, "out/keep.txt", &wo, &wr) == 0, "write_begin");
        FUZZ_CHECK(fs->ops->write(wr, "keep\n", 5) == 0, "write");
        FUZZ_CHECK(fs->ops->write_commit(wr, NULL) == 0, "write_commit");
    }
    nodes_before = ws_memfs_nodes(fs);

    memset(&d, 0, sizeof(d));
    r = ws_tar_in_new(ops, &req, &d, &t);
    FUZZ_CHECK(r == 0, "ws_tar_in_new refused a fixed request");
    while (pos < size) {
        size_t left = size - pos;
        size_t n = 1 + fuzz_rng_below(&rng, left < 4096 ? left : 4096);
        r = ws_tar_in_feed(t, data + pos, n);
        if (r < 0)
            break;
        pos += n;
    }
    ws_tar_in_end(t);
    run = ws_tar_in_run(t, &d);
    if (run == 0) {
        r = ws_tar_in_publish(t, &d);
        if (r == 0) {
            struct ws_stat st;
            FUZZ_CHECK(!w.target[0] || fs->ops->stat(fs, w.target, &st) == 0,
                       "published without the target");
        }
    } else {
        FUZZ_CHECK(run < 0, "a positive error");
        FUZZ_CHECK(memchr(d.message, '\0', sizeof(d.message)) != NULL, "message unterminated");
    }
    {
        const struct ws_tar_stats *s = ws_tar_in_stats(t);
        FUZZ_CHECK(s->n_skips <= WS_TAR_SKIPS_MAX, "more skips kept than the limit");
        FUZZ_CHECK(s->entries <= WS_TAR_IN_MAX_ENTRIES + 1, "more entries than the limit");
    }
    ws_tar_in_free(t);

    walk_dir(fs, ".", &w, 0);
    if (run < 0)
        FUZZ_CHECK(ws_memfs_nodes(fs) == nodes_before, "a failed extraction changed the tree");
    ws_fsops_free(ops);
    fs->ops->destroy(fs);
    return 0;
}
