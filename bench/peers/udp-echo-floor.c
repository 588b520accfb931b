/*
 * udp-echo-floor: the cost floor for `rsskit udp-echo`: a plain C echo loop,
 * one socket, one thread, recvmmsg/sendmmsg in batches, nothing else. What
 * the kernel itself costs per echoed datagram; bench-only.
 *
 *   cc -O2 -pthread -o udp-echo-floor bench/peers/udp-echo-floor.c
 *   ./udp-echo-floor ADDR PORT [BATCH=32] [CPU=-1] [THREADS=1]
 *
 * Arguments, the THREADS > 1 shape, shutdown and the summary line:
 * bench/lib/udp-echo-floor.h.
 */
#include "../lib/udp-echo-floor.h"

#define MAXB 256
#define BUFSZ 2048

static void *echo_loop(void *arg) {
    struct worker *w = arg;
    if (pin_worker(w) != 0) return NULL;
    /* Allocated after pinning: first touch on the thread's own CPU. */
    char (*bufs)[BUFSZ] = malloc(sizeof *bufs * MAXB);
    struct sockaddr_storage *peers = calloc(MAXB, sizeof *peers);
    struct iovec *iov = calloc(MAXB, sizeof *iov);
    struct mmsghdr *msgs = calloc(MAXB, sizeof *msgs);
    if (!bufs || !peers || !iov || !msgs) {
        perror("malloc");
        w->failed = 1;
        return NULL;
    }
    int fd = w->fd, batch = w->batch;
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
            if (errno == EINTR || errno == EAGAIN) continue; /* EAGAIN: SO_RCVTIMEO, see the stop flag */
            perror("recvmmsg");
            w->failed = 1;
            break;
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
    w->rx = rx;
    w->tx = tx;
    w->calls = calls;
    return NULL;
}

int main(int argc, char **argv) { return floor_main(argc, argv, MAXB, 0, echo_loop); }
