/*
 * gso-selfecho: what the kernel's UDP GSO/GRO path costs on this machine,
 * and how it scales, with no server, no client and no wake-ups between them.
 * Each thread, pinned to its own CPU, owns two connected loopback UDP
 * sockets with UDP_GRO; it sends a burst of 16 x 510 B with one UDP_SEGMENT
 * send from the first to the second, receives it coalesced, echoes it back
 * the same way and receives that. Nothing is shared between threads but the
 * kernel and the machine. Optionally each thread sleeps GAP_US before each
 * burst (nanosleep): the cost of going idle and waking up, added.
 *
 *   cc -O2 -Wall -pthread -o /tmp/gso-selfecho bench/peers/gso-selfecho.c
 *   /tmp/gso-selfecho THREADS BURSTS [GAP_US=0] [PORT=21000]
 *
 * Prints the wall time and the threads' CPU time (CLOCK_THREAD_CPUTIME_ID)
 * per echoed datagram; THREADS=2 against THREADS=1 is this path's own
 * 2/1 (bench/LOG.md, 2026-11-26 17:30). Bench-only.
 */
#include "../lib/udp-offload.h"
#include <time.h>

#define SEG 510
#define BURST 16
#define MAXT 64

static long bursts, gap_us;
static int port_base;
static double cpu_ns[MAXT];
static int failed;

static void die(const char *what) {
    perror(what);
    exit(1);
}

static int udp_socket(int port) {
    int s = socket(AF_INET, SOCK_DGRAM, 0), one = 1, big = 4 << 20;
    if (s < 0) die("socket");
    if (setsockopt(s, SOL_UDP, UDP_GRO, &one, sizeof one)) die("UDP_GRO");
    setsockopt(s, SOL_SOCKET, SO_RCVBUF, &big, sizeof big);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(0x7f000001)};
    if (bind(s, (void *)&a, sizeof a)) die("bind");
    return s;
}

static void connect_to(int s, int port) {
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(0x7f000001)};
    if (connect(s, (void *)&a, sizeof a)) die("connect");
}

static void gso_send(int s, char *buf) {
    uint64_t ctrl[CMSG_SPACE(sizeof(uint16_t)) / 8 + 1] = {0};
    struct iovec v = {buf, BURST * SEG};
    struct msghdr m = {.msg_iov = &v, .msg_iovlen = 1, .msg_control = ctrl, .msg_controllen = CMSG_SPACE(2)};
    struct cmsghdr *h = CMSG_FIRSTHDR(&m);
    h->cmsg_level = SOL_UDP;
    h->cmsg_type = UDP_SEGMENT;
    h->cmsg_len = CMSG_LEN(2);
    uint16_t seg = SEG;
    memcpy(CMSG_DATA(h), &seg, sizeof seg);
    if (sendmsg(s, &m, 0) != BURST * SEG) die("sendmsg");
}

/* Receives until a whole burst is in (GRO usually gives it in one call). */
static void gro_recv_burst(int s, char *buf) {
    uint64_t ctrl[32];
    for (int got = 0; got < BURST * SEG;) {
        struct iovec v = {buf, 65536};
        struct msghdr m = {.msg_iov = &v, .msg_iovlen = 1, .msg_control = ctrl, .msg_controllen = sizeof ctrl};
        ssize_t r = recvmsg(s, &m, 0);
        if (r <= 0) die("recvmsg");
        got += r;
    }
}

static void *thread_main(void *arg) {
    int i = (int)(uintptr_t)arg;
    cpu_set_t cs;
    CPU_ZERO(&cs);
    CPU_SET(i, &cs);
    if (sched_setaffinity(0, sizeof cs, &cs)) {
        perror("sched_setaffinity");
        failed = 1;
        return NULL;
    }
    int pa = port_base + 2 * i, pb = pa + 1, a = udp_socket(pa), b = udp_socket(pb);
    connect_to(a, pb);
    connect_to(b, pa);
    char *buf = malloc(65536);
    if (!buf) die("malloc");
    memset(buf, 7, 65536);
    struct timespec c0, c1, gap = {gap_us / 1000000, (gap_us % 1000000) * 1000};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c0);
    for (long k = 0; k < bursts; k++) {
        if (gap_us) nanosleep(&gap, NULL);
        gso_send(a, buf);
        gro_recv_burst(b, buf);
        gso_send(b, buf);
        gro_recv_burst(a, buf);
    }
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c1);
    cpu_ns[i] = (c1.tv_sec - c0.tv_sec) * 1e9 + (c1.tv_nsec - c0.tv_nsec);
    free(buf);
    close(a);
    close(b);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s THREADS BURSTS [GAP_US=0] [PORT=21000]\n", argv[0]);
        return 2;
    }
    int n = atoi(argv[1]);
    bursts = atol(argv[2]);
    gap_us = argc > 3 ? atol(argv[3]) : 0;
    port_base = argc > 4 ? atoi(argv[4]) : 21000;
    if (n < 1 || n > MAXT || bursts < 1 || gap_us < 0 || port_base < 1 || port_base + 2 * n > 65535) {
        fprintf(stderr, "%s: THREADS 1-%d, BURSTS >= 1, GAP_US >= 0, PORT 1-65535\n", argv[0], MAXT);
        return 2;
    }
    pthread_t th[MAXT];
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < n; i++)
        if (pthread_create(&th[i], NULL, thread_main, (void *)(uintptr_t)i)) die("pthread_create");
    for (int i = 0; i < n; i++) pthread_join(th[i], NULL);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (failed) return 1;
    double wall = (t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec), cpu = 0;
    for (int i = 0; i < n; i++) cpu += cpu_ns[i];
    double per = bursts * (double)BURST;
    printf("threads %d gap_us %ld: wall %.1f ns, CPU %.1f ns per echoed datagram per thread\n", n, gap_us,
           wall / per, cpu / n / per);
    return 0;
}
