/* Runs a fuzz target over files, as libFuzzer does with a corpus but once
 * each and without instrumentation: `replay DIR_OR_FILE...` calls
 * LLVMFuzzerTestOneInput on every regular file of each directory (sorted
 * by name, not recursive) and on each file argument. A target that
 * crashes or fails a check aborts the run; an argument with no file in it
 * is an error, so a corpus that went missing cannot pass by running
 * nothing.
 *
 * Linked with each target's source as the //tests/fuzz:*_replay tests of
 * the regular build: every committed seed and crash reproducer is re-run
 * by the normal suite.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tests/fuzz/fuzz.h"

static int run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    uint8_t *buf = NULL;
    size_t len = 0, cap = 0;

    if (!f) {
        fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
        return -1;
    }
    for (;;) {
        if (len == cap) {
            cap = cap ? 2 * cap : 4096;
            buf = realloc(buf, cap);
            if (!buf) {
                fprintf(stderr, "replay: out of memory\n");
                exit(1);
            }
        }
        size_t n = fread(buf + len, 1, cap - len, f);
        if (n == 0)
            break;
        len += n;
    }
    if (ferror(f)) {
        fprintf(stderr, "replay: %s: read error\n", path);
        fclose(f);
        free(buf);
        return -1;
    }
    fclose(f);
    /* An exact-size copy, so reading past the input is caught under ASan. */
    uint8_t *exact = malloc(len ? len : 1);
    if (!exact) {
        fprintf(stderr, "replay: out of memory\n");
        exit(1);
    }
    memcpy(exact, buf, len);
    free(buf);
    fprintf(stderr, "replay: %s (%zu bytes)\n", path, len);
    LLVMFuzzerTestOneInput(exact, len);
    free(exact);
    return 0;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Runs every regular file of `dir`; returns how many, or -1. */
static long run_dir(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    char **names = NULL;
    size_t n = 0, cap = 0;
    long ran = 0;

    if (!d) {
        fprintf(stderr, "replay: %s: %s\n", dir, strerror(errno));
        return -1;
    }
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            names = realloc(names, cap * sizeof(*names));
            if (!names)
                exit(1);
        }
        names[n] = strdup(e->d_name);
        if (!names[n])
            exit(1);
        n++;
    }
    closedir(d);
    if (n)
        qsort(names, n, sizeof(*names), by_name);
    for (size_t i = 0; i < n; i++) {
        char path[4096];
        struct stat st;

        snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
        /* stat, not the dirent type: runfiles are symlinks. */
        if (stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
            if (run_file(path) < 0)
                ran = -1;
            else if (ran >= 0)
                ran++;
        }
        free(names[i]);
    }
    free(names);
    return ran;
}

int main(int argc, char **argv)
{
    long total = 0;
    int failed = 0;

    if (argc < 2) {
        fprintf(stderr, "usage: %s DIR_OR_FILE...\n", argv[0]);
        return 2;
    }
    for (int i = 1; i < argc; i++) {
        struct stat st;
        long ran;

        if (stat(argv[i], &st) < 0) {
            fprintf(stderr, "replay: %s: %s\n", argv[i], strerror(errno));
            failed++;
            continue;
        }
        ran = S_ISDIR(st.st_mode) ? run_dir(argv[i]) : (run_file(argv[i]) < 0 ? -1 : 1);
        if (ran <= 0) {
            fprintf(stderr, "replay: %s: %s\n", argv[i], ran == 0 ? "no input files" : "failed");
            failed++;
            continue;
        }
        total += ran;
    }
    printf("replay: %ld inputs ran\n", total);
    return failed ? 1 : 0;
}
