/* What every fuzz target shares: libFuzzer's entry point, a check that
 * aborts with a message (an ASan/UBSan-style crash libFuzzer records), a
 * small deterministic generator for choices made from the input, and a
 * scratch directory per process.
 *
 * The targets compile with gcc too: tests/fuzz/replay_main.c runs a
 * target's entry point over its committed corpus in the regular build.
 */
#ifndef WS_TESTS_FUZZ_FUZZ_H
#define WS_TESTS_FUZZ_FUZZ_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Aborts with "file:line: check failed: what" unless cond holds. */
#define FUZZ_CHECK(cond, what)                                                                     \
    do {                                                                                           \
        if (!(cond))                                                                               \
            fuzz_fail(__FILE__, __LINE__, (what));                                                 \
    } while (0)

void fuzz_fail(const char *file, int line, const char *what) __attribute__((noreturn));

/* A splitmix64 stream seeded from the input: the same input always makes
 * the same choices. */
struct fuzz_rng {
    uint64_t state;
};

void fuzz_rng_seed(struct fuzz_rng *g, const uint8_t *data, size_t size);
uint64_t fuzz_rng_next(struct fuzz_rng *g);
/* Uniform-ish in [0, n); 0 when n is 0. */
size_t fuzz_rng_below(struct fuzz_rng *g, size_t n);

/* A fresh directory under $TMPDIR (or /tmp) named after `tag`, made on
 * the first call and removed with everything in it when the process
 * exits. Aborts when it cannot be made. */
const char *fuzz_scratch_dir(const char *tag);

/* Removes `path` and everything below it, never following a symlink
 * (directories made read-only get their bits back first). Errors are
 * ignored. */
void fuzz_remove_tree(const char *path);

/* Writes data[0..size) to `path` (created or truncated). Aborts on
 * failure. */
void fuzz_write_file(const char *path, const void *data, size_t size);

#ifdef __cplusplus
}
#endif

#endif
