/*
 * udp-echo-floor.h: what the two C echo floors (bench/peers/udp-echo-floor.c and
 * bench/peers/udp-echo-floor-gso.c) share: the arguments, the socket group, the threads
 * and the summary. Each floor brings only its echo loop. Bench-only.
 *
 *   ./FLOOR ADDR PORT [BATCH=32] [CPU=-1] [THREADS=1]
 *
 * THREADS > 1: the shape of `rsskit udp-echo` with that many workers (the
 * 2-thread reference of bench/udp-steer): one SO_REUSEPORT socket per
 * thread, thread i pinned to CPU+i (CPU -1 counts as 0), and a classic BPF
 * reuseport program that picks the socket of the CPU the kernel processes
 * the datagram on (socket index = cpu - CPU, like `--steer cpu`), so each
 * thread serves the flows its CPU processes. Each thread runs the same loop.
 *
 * Runs until SIGINT/SIGTERM, then prints "received N sent N [buffers N] calls N"
 * on stderr (all threads; buffers with UDP_GRO), with THREADS > 1 then one
 * line per thread.
 */
#ifndef UDP_ECHO_FLOOR_H
#define UDP_ECHO_FLOOR_H

#include "udp-offload.h"
#include <errno.h>
#include <linux/filter.h>
#include <signal.h>
#ifndef SO_ATTACH_REUSEPORT_CBPF
#define SO_ATTACH_REUSEPORT_CBPF 51
#endif

#define MAXT 64

static volatile sig_atomic_t stop;
static void on_sig(int s) { (void)s; stop = 1; }

/* One thread of the floor: its socket, CPU (-1: not pinned) and counts. */
struct worker {
    int fd, cpu, batch;
    pthread_t tid;
    unsigned long long rx, tx, buffers, calls;
    int failed;
};

static int pin(int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (sched_setaffinity(0, sizeof set, &set) != 0) {
        perror("sched_setaffinity");
        return -1;
    }
    return 0;
}

/* Pins the calling thread to w's CPU, if any; marks w failed if it cannot. */
static int pin_worker(struct worker *w) {
    if (w->cpu >= 0 && pin(w->cpu) != 0) {
        w->failed = 1;
        return -1;
    }
    return 0;
}

/* ADDR PORT into ss/sl/fam; -1 on a bad address. */
static int parse_addr(const char *addr, const char *port, struct sockaddr_storage *ss, socklen_t *sl, int *fam) {
    memset(ss, 0, sizeof *ss);
    struct sockaddr_in *s4 = (struct sockaddr_in *)ss;
    struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)ss;
    if (inet_pton(AF_INET, addr, &s4->sin_addr) == 1) {
        *fam = AF_INET;
        s4->sin_family = AF_INET;
        s4->sin_port = htons(atoi(port));
        *sl = sizeof *s4;
    } else if (inet_pton(AF_INET6, addr, &s6->sin6_addr) == 1) {
        *fam = AF_INET6;
        s6->sin6_family = AF_INET6;
        s6->sin6_port = htons(atoi(port));
        *sl = sizeof *s6;
    } else {
        fprintf(stderr, "bad address %s\n", addr);
        return -1;
    }
    return 0;
}

/* The whole floor: arguments, one socket per thread (UDP_GRO on each with
 * `gro`), `loop` on every thread, the summary. Batches up to `maxb`. */
static int floor_main(int argc, char **argv, int maxb, int gro, void *(*loop)(void *)) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s ADDR PORT [BATCH] [CPU] [THREADS]\n", argv[0]);
        return 2;
    }
    int batch = argc > 3 ? atoi(argv[3]) : 32;
    int cpu = argc > 4 ? atoi(argv[4]) : -1;
    int threads = argc > 5 ? atoi(argv[5]) : 1;
    if (batch < 1 || batch > maxb) {
        fprintf(stderr, "batch must be 1..%d\n", maxb);
        return 2;
    }
    if (threads < 1 || threads > MAXT) {
        fprintf(stderr, "threads must be 1..%d\n", MAXT);
        return 2;
    }
    if (threads > 1 && cpu < 0) cpu = 0;
    struct sockaddr_storage ss;
    socklen_t sl;
    int fam;
    if (parse_addr(argv[1], argv[2], &ss, &sl, &fam) != 0) return 2;
    static struct worker ws[MAXT];
    /* Bound in thread order: the reuseport group's socket i is thread i's. */
    for (int t = 0; t < threads; t++) {
        int fd = socket(fam, SOCK_DGRAM, 0);
        if (fd < 0) { perror("socket"); return 1; }
        int rcv = 4 << 20;
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcv, sizeof rcv);
        int one = 1;
        if (gro && setsockopt(fd, SOL_UDP, UDP_GRO, &one, sizeof one) != 0) { perror("UDP_GRO"); return 1; }
        if (threads > 1) {
            if (setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) != 0) { perror("SO_REUSEPORT"); return 1; }
            /* A signal reaches one thread: the others see the stop flag within this. */
            struct timeval tv = { .tv_sec = 0, .tv_usec = 200000 };
            setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        }
        if (bind(fd, (struct sockaddr *)&ss, sl) != 0) { perror("bind"); return 1; }
        if (threads > 1 && t == 0) {
            /* Socket index = processing CPU - CPU (out of range: the kernel's hash). */
            struct sock_filter code[] = {
                { BPF_LD | BPF_W | BPF_ABS, 0, 0, (uint32_t)(SKF_AD_OFF + SKF_AD_CPU) },
                { BPF_ALU | BPF_SUB | BPF_K, 0, 0, (uint32_t)cpu },
                { BPF_RET | BPF_A, 0, 0, 0 },
            };
            struct sock_fprog prog = { .len = sizeof code / sizeof code[0], .filter = code };
            if (setsockopt(fd, SOL_SOCKET, SO_ATTACH_REUSEPORT_CBPF, &prog, sizeof prog) != 0) {
                perror("SO_ATTACH_REUSEPORT_CBPF");
                return 1;
            }
        }
        ws[t] = (struct worker){ .fd = fd, .cpu = cpu < 0 ? -1 : cpu + t, .batch = batch };
    }

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sig; /* no SA_RESTART: recvmmsg returns EINTR */
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);

    int failed = 0;
    if (threads == 1) {
        loop(&ws[0]); /* the main thread: the loop as it always ran */
    } else {
        for (int t = 0; t < threads; t++)
            if (pthread_create(&ws[t].tid, NULL, loop, &ws[t]) != 0) { perror("pthread_create"); return 1; }
        for (int t = 0; t < threads; t++) pthread_join(ws[t].tid, NULL);
    }
    unsigned long long rx = 0, tx = 0, buffers = 0, calls = 0;
    for (int t = 0; t < threads; t++) {
        rx += ws[t].rx;
        tx += ws[t].tx;
        buffers += ws[t].buffers;
        calls += ws[t].calls;
        failed |= ws[t].failed;
    }
    if (gro)
        fprintf(stderr, "received %llu sent %llu buffers %llu calls %llu\n", rx, tx, buffers, calls);
    else
        fprintf(stderr, "received %llu sent %llu calls %llu\n", rx, tx, calls);
    for (int t = 0; threads > 1 && t < threads; t++)
        fprintf(stderr, "thread %d cpu %d received %llu\n", t, ws[t].cpu, ws[t].rx);
    return failed;
}

#endif
