/*
 * Two threads add to one counter with no lock between them: a data race
 * ThreadSanitizer must report and stop the process at. It prints
 * "survived N" and exits 0 when nothing stopped it (any other build, where
 * the race is left to the hardware: N is 2 or, rarely, 1).
 */
#include <pthread.h>
#include <stdio.h>

static volatile int counter;

static void *add(void *arg)
{
    counter = counter + 1;
    return arg;
}

int main(void)
{
    pthread_t t;
    if (pthread_create(&t, NULL, add, NULL) != 0)
        return 2;
    add(NULL);
    pthread_join(t, NULL);
    printf("survived %d\n", counter);
    return 0;
}
