/*
 * udp-echo-floor-gso: the second cost floor for `rsskit udp-echo`: the plain
 * C echo loop of udp-echo-floor.c with UDP offload. The socket has UDP_GRO,
 * so the datagrams of one flow that arrive together (a GSO send on
 * loopback, NAPI GRO on a NIC) come as one coalesced buffer with a UDP_GRO
 * control message giving the segment size; each buffer is echoed whole
 * with one UDP_SEGMENT (GSO) message, all of a recvmmsg batch in one
 * sendmmsg. Counts are datagrams (segments), not buffers. Bench-only.
 *
 *   cc -O2 -Wall -o udp-echo-floor-gso bench/udp-echo-floor-gso.c
 *   ./udp-echo-floor-gso ADDR PORT [BATCH=32] [CPU=-1]
 *
 * Runs until SIGINT/SIGTERM, then prints "received N sent N buffers N calls N" on
 * stderr. Exits 1 at start if the kernel refuses UDP_GRO.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif
#ifndef UDP_GRO
#define UDP_GRO 104
#endif
#ifndef SOL_UDP
#define SOL_UDP 17
#endif

#define MAXB 64
#define BUFSZ 65536 /* a whole coalesced buffer: never truncated */
#define CTRLSZ 64   /* one UDP_GRO (int) cmsg in, one UDP_SEGMENT (u16) out */

static volatile sig_atomic_t stop;
static void on_sig(int s) { (void)s; stop = 1; }

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s ADDR PORT [BATCH] [CPU]\n", argv[0]);
        return 2;
    }
    int batch = argc > 3 ? atoi(argv[3]) : 32;
    int cpu = argc > 4 ? atoi(argv[4]) : -1;
    if (batch < 1 || batch > MAXB) {
        fprintf(stderr, "batch must be 1..%d\n", MAXB);
        return 2;
    }
    if (cpu >= 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(cpu, &set);
        if (sched_setaffinity(0, sizeof set, &set) != 0) {
            perror("sched_setaffinity");
            return 1;
        }
    }
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    socklen_t sl;
    int fam;
    struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
    if (inet_pton(AF_INET, argv[1], &s4->sin_addr) == 1) {
        fam = AF_INET;
        s4->sin_family = AF_INET;
        s4->sin_port = htons(atoi(argv[2]));
        sl = sizeof *s4;
    } else if (inet_pton(AF_INET6, argv[1], &s6->sin6_addr) == 1) {
        fam = AF_INET6;
        s6->sin6_family = AF_INET6;
        s6->sin6_port = htons(atoi(argv[2]));
        sl = sizeof *s6;
    } else {
        fprintf(stderr, "bad address %s\n", argv[1]);
        return 2;
    }
    int fd = socket(fam, SOCK_DGRAM, 0);
    if (fd < 0) { perror("socket"); return 1; }
    int rcv = 4 << 20;
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcv, sizeof rcv);
    int one = 1;
    if (setsockopt(fd, SOL_UDP, UDP_GRO, &one, sizeof one) != 0) { perror("UDP_GRO"); return 1; }
    if (bind(fd, (struct sockaddr *)&ss, sl) != 0) { perror("bind"); return 1; }

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sig; /* no SA_RESTART: recvmmsg returns EINTR */
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);

    static char bufs[MAXB][BUFSZ];
    static struct sockaddr_storage peers[MAXB];
    static struct iovec iov[MAXB];
    static struct mmsghdr msgs[MAXB];
    static uint64_t ctrl[MAXB][CTRLSZ / 8]; /* 8-aligned for cmsghdr */
    static unsigned segs[MAXB];
    unsigned long long rx = 0, tx = 0, buffers = 0, calls = 0;
    while (!stop) {
        for (int i = 0; i < batch; i++) {
            iov[i].iov_base = bufs[i];
            iov[i].iov_len = BUFSZ;
            memset(&msgs[i].msg_hdr, 0, sizeof msgs[i].msg_hdr);
            msgs[i].msg_hdr.msg_iov = &iov[i];
            msgs[i].msg_hdr.msg_iovlen = 1;
            msgs[i].msg_hdr.msg_name = &peers[i];
            msgs[i].msg_hdr.msg_namelen = sizeof peers[i];
            msgs[i].msg_hdr.msg_control = ctrl[i];
            msgs[i].msg_hdr.msg_controllen = CTRLSZ;
        }
        int n = recvmmsg(fd, msgs, batch, MSG_WAITFORONE, NULL);
        if (n < 0) {
            if (errno == EINTR) continue;
            perror("recvmmsg");
            return 1;
        }
        buffers += n;
        calls++;
        for (int i = 0; i < n; i++) {
            struct msghdr *h = &msgs[i].msg_hdr;
            unsigned len = msgs[i].msg_len;
            int gso = 0;
            for (struct cmsghdr *c = CMSG_FIRSTHDR(h); c; c = CMSG_NXTHDR(h, c))
                if (c->cmsg_level == SOL_UDP && c->cmsg_type == UDP_GRO) memcpy(&gso, CMSG_DATA(c), sizeof gso);
            iov[i].iov_len = len;
            h->msg_flags = 0;
            if (gso > 0 && len > (unsigned)gso) {
                /* The reply: the same segments, one UDP_SEGMENT message. */
                struct cmsghdr *c = (struct cmsghdr *)ctrl[i];
                uint16_t g = (uint16_t)gso;
                c->cmsg_level = SOL_UDP;
                c->cmsg_type = UDP_SEGMENT;
                c->cmsg_len = CMSG_LEN(sizeof g);
                memcpy(CMSG_DATA(c), &g, sizeof g);
                h->msg_control = ctrl[i];
                h->msg_controllen = CMSG_SPACE(sizeof g);
                segs[i] = (len + gso - 1) / gso;
            } else {
                h->msg_control = NULL;
                h->msg_controllen = 0;
                segs[i] = 1;
            }
            rx += segs[i];
        }
        int off = 0;
        while (off < n) {
            int m = sendmmsg(fd, msgs + off, n - off, 0);
            if (m < 0) {
                if (errno == EINTR) continue;
                break; /* drop the rest, like a full socket buffer would */
            }
            for (int i = off; i < off + m; i++) tx += segs[i];
            off += m;
        }
    }
    fprintf(stderr, "received %llu sent %llu buffers %llu calls %llu\n", rx, tx, buffers, calls);
    return 0;
}
