/*
 * udp-echo-floor: the cost floor for `rsskit udp-echo`: a plain C echo loop,
 * one socket, one thread, recvmmsg/sendmmsg in batches, nothing else. What
 * the kernel itself costs per echoed datagram; bench-only.
 *
 *   cc -O2 -o udp-echo-floor bench/udp-echo-floor.c
 *   ./udp-echo-floor ADDR PORT [BATCH=32] [CPU=-1]
 *
 * Runs until SIGINT/SIGTERM, then prints "received N sent N calls N" on stderr
 * (calls: recvmmsg calls that returned datagrams).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define MAXB 256
#define BUFSZ 2048

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
    unsigned long long rx = 0, tx = 0, calls = 0;
    while (!stop) {
        for (int i = 0; i < batch; i++) {
            iov[i].iov_base = bufs[i];
            iov[i].iov_len = BUFSZ;
            memset(&msgs[i].msg_hdr, 0, sizeof msgs[i].msg_hdr);
            msgs[i].msg_hdr.msg_iov = &iov[i];
            msgs[i].msg_hdr.msg_iovlen = 1;
            msgs[i].msg_hdr.msg_name = &peers[i];
            msgs[i].msg_hdr.msg_namelen = sizeof peers[i];
        }
        int n = recvmmsg(fd, msgs, batch, MSG_WAITFORONE, NULL);
        if (n < 0) {
            if (errno == EINTR) continue;
            perror("recvmmsg");
            return 1;
        }
        rx += n;
        calls++;
        for (int i = 0; i < n; i++) iov[i].iov_len = msgs[i].msg_len;
        int off = 0;
        while (off < n) {
            int m = sendmmsg(fd, msgs + off, n - off, 0);
            if (m < 0) {
                if (errno == EINTR) continue;
                break; /* drop the rest, like a full socket buffer would */
            }
            off += m;
            tx += m;
        }
    }
    fprintf(stderr, "received %llu sent %llu calls %llu\n", rx, tx, calls);
    return 0;
}
