/* bench/peers/duty-ceiling.c: the machine's 2-thread / 1-thread cost for work
 * done in short bursts between sleeps, the shape of an echo server's
 * wake-ups (bench/peers/scaling-ceiling.c measures busy loops, which this VM
 * scales perfectly).
 *
 *   cc -O2 -pthread -o duty-ceiling bench/peers/duty-ceiling.c
 *   duty-ceiling THREADS [CHUNK=20000] [SLEEP_US=1000] [SECONDS=3] [FIRST_CPU=0]
 *
 * Each thread, pinned to CPU FIRST_CPU + i, does a fixed chunk of integer
 * work (four independent multiply-add chains, CHUNK steps: ~40 µs here),
 * then sleeps SLEEP_US, until SECONDS have passed; it prints its own CPU
 * time per chunk (CLOCK_THREAD_CPUTIME_ID), which is the same for 1 and 2
 * threads on a machine whose CPUs do not slow each other down. */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static long chunk = 20000, sleep_us = 1000, first_cpu;
static double seconds = 3;

static double mono_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static double thread_cpu_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

static void *run(void *arg) {
    long cpu = first_cpu + (long)arg;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (pthread_setaffinity_np(pthread_self(), sizeof set, &set) != 0) {
        fprintf(stderr, "duty-ceiling: cannot pin to CPU %ld\n", cpu);
        exit(1);
    }
    volatile unsigned long sink = 0;
    struct timespec nap = {sleep_us / 1000000, (sleep_us % 1000000) * 1000};
    long n = 0;
    double c0 = thread_cpu_ns(), t0 = mono_s();
    while (mono_s() - t0 < seconds) {
        unsigned long a = n, b = n + 1, c = n + 2, d = n + 3;
        for (long i = 0; i < chunk; i++) {
            a = a * 3 + 1;
            b = b * 5 + 1;
            c = c * 7 + 1;
            d = d * 9 + 1;
        }
        sink += a ^ b ^ c ^ d;
        n++;
        nanosleep(&nap, NULL);
    }
    printf("cpu %ld: %.0f ns of CPU per chunk (%ld chunks)\n", cpu, (thread_cpu_ns() - c0) / n, n);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s THREADS [CHUNK] [SLEEP_US] [SECONDS] [FIRST_CPU]\n", argv[0]);
        return 2;
    }
    int threads = atoi(argv[1]);
    if (argc > 2) chunk = atol(argv[2]);
    if (argc > 3) sleep_us = atol(argv[3]);
    if (argc > 4) seconds = atof(argv[4]);
    if (argc > 5) first_cpu = atol(argv[5]);
    if (threads < 1 || threads > 64 || chunk < 1 || sleep_us < 0 || seconds <= 0) {
        fprintf(stderr, "duty-ceiling: bad arguments\n");
        return 2;
    }
    pthread_t t[64];
    for (long i = 0; i < threads; i++)
        if (pthread_create(&t[i], NULL, run, (void *)i) != 0) {
            perror("pthread_create");
            return 1;
        }
    for (int i = 0; i < threads; i++) pthread_join(t[i], NULL);
    return 0;
}
