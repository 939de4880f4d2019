/*
 * Does one thing the sanitizers must stop, chosen on the command line so
 * the compiler cannot see it coming:
 *
 *   canary overflow N   adds 1 to INT_MAX - 1 + N (signed overflow for N >= 1)
 *   canary heap N       reads byte N of an 8-byte heap block
 *
 * It prints "survived RESULT" and exits 0 when nothing stopped it.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
    if (argc != 3)
        return 2;
    int n = (int)strtol(argv[2], NULL, 10);
    if (strcmp(argv[1], "overflow") == 0) {
        int v = INT_MAX - 1 + (n > 0 ? 0 : n);
        v += n > 0 ? n + 1 : 1;
        printf("survived %d\n", v);
        return 0;
    }
    if (strcmp(argv[1], "heap") == 0) {
        volatile char *p = malloc(8);
        if (p == NULL)
            return 2;
        memset((char *)p, 7, 8);
        /* Hide the block's size from UBSan's object-size check, so that
         * the read past it is left to ASan. */
        __asm__ volatile("" : "+r"(p));
        int v = p[n];
        free((char *)p);
        printf("survived %d\n", v);
        return 0;
    }
    return 2;
}
