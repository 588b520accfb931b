/*
 * udp-echo-floor-gso: the second cost floor for `rsskit udp-echo`: the plain
 * C echo loop of udp-echo-floor.c with UDP offload. The socket has UDP_GRO,
 * so the datagrams of one flow that arrive together (a GSO send on
 * loopback, NAPI GRO on a NIC) come as one coalesced buffer with a UDP_GRO
 * control message giving the segment size; each buffer is echoed whole
 * with one UDP_SEGMENT (GSO) message, all of a recvmmsg batch in one
 * sendmmsg. Counts are datagrams (segments), not buffers. Bench-only.
 *
 *   cc -O2 -Wall -pthread -o udp-echo-floor-gso bench/peers/udp-echo-floor-gso.c
 *   ./udp-echo-floor-gso ADDR PORT [BATCH=32] [CPU=-1] [THREADS=1]
 *
 * Arguments, the THREADS > 1 shape, shutdown and the summary line:
 * bench/lib/udp-echo-floor.h.
 */
#include "../lib/udp-echo-floor.h"

#define MAXB 64
#define BUFSZ 65536 /* a whole coalesced buffer: never truncated */
#define CTRLSZ 64   /* one UDP_GRO (int) cmsg in, one UDP_SEGMENT (u16) out */

static void *echo_loop(void *arg) {
    struct worker *w = arg;
    if (pin_worker(w) != 0) return NULL;
    /* Allocated after pinning: first touch on the thread's own CPU. */
    char (*bufs)[BUFSZ] = malloc(sizeof *bufs * MAXB);
    struct sockaddr_storage *peers = calloc(MAXB, sizeof *peers);
    struct iovec *iov = calloc(MAXB, sizeof *iov);
    struct mmsghdr *msgs = calloc(MAXB, sizeof *msgs);
    uint64_t (*ctrl)[CTRLSZ / 8] = calloc(MAXB, sizeof *ctrl); /* 8-aligned for cmsghdr */
    unsigned *segs = calloc(MAXB, sizeof *segs);
    if (!bufs || !peers || !iov || !msgs || !ctrl || !segs) {
        perror("malloc");
        w->failed = 1;
        return NULL;
    }
    int fd = w->fd, batch = w->batch;
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
            if (errno == EINTR || errno == EAGAIN) continue; /* EAGAIN: SO_RCVTIMEO, see the stop flag */
            perror("recvmmsg");
            w->failed = 1;
            break;
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
    w->rx = rx;
    w->tx = tx;
    w->buffers = buffers;
    w->calls = calls;
    return NULL;
}

int main(int argc, char **argv) { return floor_main(argc, argv, MAXB, 1, echo_loop); }
