/* A per-CPU UDP echo server on the rsskit C API: one socket and one
 * pinned thread per online CPU in a steered group. Each reply is the
 * datagram followed by its RSS metadata (as the Rust example udp_echo),
 * and truncated=true when the datagram did not fit (MSG_TRUNC: it is also
 * said on stderr; never cut silently).
 *
 * Usage: udp_echo HOST PORT [cpu|toeplitz|kernel|shared [MAXLEN]]
 * MAXLEN: the longest datagram received whole, 1-65535 (default 65535, the
 * largest a UDP datagram can be).
 * Build: cc udp_echo.c -I include librsskit_capi.a -lpthread -ldl -lm */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netdb.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "rsskit.h"

/* The largest UDP payload (65535 minus the 8-byte UDP header and, for
 * IPv4, the IP header) fits in 65535 bytes. */
#define MAX_DATAGRAM 65535
/* Room after the datagram for the metadata stamp. */
#define STAMP_ROOM 256

struct worker { RssConfig *cfg; int fd; uint32_t id, cpu; int cpu_known; size_t maxlen; };

static void *serve(void *arg) {
    struct worker *w = arg;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(w->cpu, &set);
    if (pthread_setaffinity_np(pthread_self(), sizeof set, &set) != 0) {
        fprintf(stderr, "error: pinning worker %u to CPU %u\n", w->id, w->cpu);
        exit(1);
    }
    static _Thread_local uint8_t buf[MAX_DATAGRAM + STAMP_ROOM];
    for (;;) {
        struct sockaddr_storage from;
        socklen_t fromlen = sizeof from;
        RssRecvInfo info;
        intptr_t n = rss_recvfrom(w->cfg, w->fd, w->id, buf, w->maxlen, &from, &fromlen, &info);
        if (n < 0)
            continue;
        if (info.truncated)
            fprintf(stderr, "worker %u: a datagram longer than %zu bytes was truncated to %zd\n", w->id,
                    w->maxlen, (ssize_t)n);
        char kcpu[16] = "-";
        if (w->cpu_known)
            snprintf(kcpu, sizeof kcpu, "%u", w->cpu);
        int m = snprintf((char *)buf + n, sizeof buf - (size_t)n,
                         "|worker=%u cpu=%u kernel_cpu=%s hash=%08x bucket=%u owner=%u misdirected=%s "
                         "truncated=%s",
                         w->id, w->cpu, kcpu, info.flow.hash, info.flow.bucket, info.flow.worker,
                         info.misdirected ? "true" : "false", info.truncated ? "true" : "false");
        sendto(w->fd, buf, (size_t)n + (size_t)m, 0, (struct sockaddr *)&from, fromlen);
    }
    return NULL;
}

int main(int argc, char **argv) {
    const char *modes[] = {"cpu", "toeplitz", "kernel", "shared"};
    int mode = -1;
    for (int i = 0; i < 4; i++)
        if (strcmp(argc > 3 ? argv[3] : "cpu", modes[i]) == 0)
            mode = i; /* RSS_STEER_* follow this order */
    char *end = NULL;
    long maxlen = argc > 4 ? strtol(argv[4], &end, 10) : MAX_DATAGRAM;
    struct addrinfo hints = {.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV, .ai_socktype = SOCK_DGRAM}, *ai;
    if (argc < 3 || argc > 5 || mode < 0 || (end && (*end || end == argv[4])) || maxlen < 1 ||
        maxlen > MAX_DATAGRAM || getaddrinfo(argv[1], argv[2], &hints, &ai) != 0) {
        fprintf(stderr, "error: usage: udp_echo HOST PORT [cpu|toeplitz|kernel|shared [MAXLEN 1-65535]]\n");
        return 2;
    }
    uint32_t types = RSS_HASHTYPE_RSS_IPV4 | RSS_HASHTYPE_RSS_TCP_IPV4 | RSS_HASHTYPE_RSS_IPV6 |
                     RSS_HASHTYPE_RSS_TCP_IPV6 | RSS_HASHTYPE_RSS_UDP_IPV4 | RSS_HASHTYPE_RSS_UDP_IPV6;
    RssConfig *cfg;
    uint32_t nworkers;
    int fds[1024];
    size_t nfds;
    int rc = rss_config_new_online(types, &cfg);
    if (rc == RSS_OK)
        rc = rss_getnumworkers(cfg, &nworkers);
    if (rc == RSS_OK)
        rc = rss_group_open(cfg, SOCK_DGRAM, mode, ai->ai_addr, ai->ai_addrlen, fds, 1024, &nfds);
    if (rc != RSS_OK) {
        fprintf(stderr, "error: %s: %s\n", rss_strerror(rc), rss_last_error());
        return 1;
    }
    struct sockaddr_storage local;
    socklen_t len = sizeof local;
    char host[INET6_ADDRSTRLEN];
    getsockname(fds[0], (struct sockaddr *)&local, &len);
    int v6 = local.ss_family == AF_INET6;
    void *a = v6 ? (void *)&((struct sockaddr_in6 *)&local)->sin6_addr : (void *)&((struct sockaddr_in *)&local)->sin_addr;
    uint16_t port = ntohs(v6 ? ((struct sockaddr_in6 *)&local)->sin6_port : ((struct sockaddr_in *)&local)->sin_port);
    inet_ntop(local.ss_family, a, host, sizeof host);
    printf(v6 ? "listening on [%s]:%u\n" : "listening on %s:%u\n", host, port);
    fflush(stdout);
    /* Extra sockets (cpu mode, CPUs without a worker) are not served here:
     * this server has a worker on every online CPU, so there are none. */
    struct worker *ws = calloc(nworkers, sizeof *ws);
    pthread_t *ts = calloc(nworkers, sizeof *ts);
    for (uint32_t i = 0; i < nworkers; i++) {
        ws[i] = (struct worker){cfg, fds[i], i, 0, mode == RSS_STEER_CPU, (size_t)maxlen};
        rss_worker_cpu(cfg, i, &ws[i].cpu);
        pthread_create(&ts[i], NULL, serve, &ws[i]);
    }
    for (uint32_t i = 0; i < nworkers; i++)
        pthread_join(ts[i], NULL);
    return 0;
}
