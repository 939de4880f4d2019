/* Helpers shared by the fuzz targets (fuzz.h). */
#include "tests/fuzz/fuzz.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void fuzz_fail(const char *file, int line, const char *what)
{
    fprintf(stderr, "%s:%d: check failed: %s\n", file, line, what);
    fflush(stderr);
    abort();
}

void fuzz_rng_seed(struct fuzz_rng *g, const uint8_t *data, size_t size)
{
    uint64_t h = UINT64_C(1469598103934665603);

    for (size_t i = 0; i < size; i++) {
        h ^= data[i];
        h *= UINT64_C(1099511628211);
    }
    g->state = h;
}

uint64_t fuzz_rng_next(struct fuzz_rng *g)
{
    uint64_t z = (g->state += UINT64_C(0x9e3779b97f4a7c15));

    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

size_t fuzz_rng_below(struct fuzz_rng *g, size_t n)
{
    return n ? (size_t)(fuzz_rng_next(g) % n) : 0;
}

static char scratch[PATH_MAX];

static int remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)ftw;
    /* Directories made read-only by a target get their bits back first.
     * Never through a symlink: chmod follows one, and the trees here hold
     * links to "/" and "..". */
    if (flag == FTW_DP || flag == FTW_D)
        chmod(path, 0700);
    remove(path);
    return 0;
}

void fuzz_remove_tree(const char *path)
{
    nftw(path, remove_one, 16, FTW_DEPTH | FTW_PHYS);
}

static void remove_scratch(void)
{
    if (scratch[0])
        fuzz_remove_tree(scratch);
}

const char *fuzz_scratch_dir(const char *tag)
{
    const char *tmp = getenv("TMPDIR");

    if (scratch[0])
        return scratch;
    if (!tmp || !*tmp)
        tmp = "/tmp";
    if (snprintf(scratch, sizeof(scratch), "%s/%s.XXXXXX", tmp, tag) >= (int)sizeof(scratch))
        fuzz_fail(__FILE__, __LINE__, "TMPDIR too long");
    if (!mkdtemp(scratch)) {
        perror(scratch);
        fuzz_fail(__FILE__, __LINE__, "mkdtemp");
    }
    atexit(remove_scratch);
    return scratch;
}

void fuzz_write_file(const char *path, const void *data, size_t size)
{
    const char *p = data;
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);

    if (fd < 0) {
        perror(path);
        fuzz_fail(__FILE__, __LINE__, "open");
    }
    while (size > 0) {
        ssize_t n = write(fd, p, size);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            perror(path);
            fuzz_fail(__FILE__, __LINE__, "write");
        }
        p += n;
        size -= (size_t)n;
    }
    close(fd);
}
