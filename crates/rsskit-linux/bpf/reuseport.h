/* Shared between reuseport.bpf.c and its loader
 * (rsskit-linux/src/ebpf/reuseport.rs mirrors these layouts). */
#ifndef RSSKIT_REUSEPORT_H
#define RSSKIT_REUSEPORT_H

#include <linux/types.h>

/* Most sockets (workers) in one group, and most buckets (2^MAX_BITS of
 * rsskit-core's policy). */
#define RSSKIT_RP_MAX_SOCKS 256
#define RSSKIT_RP_MAX_BUCKETS 128

/* config.flags */
#define RSSKIT_RP_V4_PORTS 1 /* IPv4 packets: 4-tuple hash (else 2-tuple) */
#define RSSKIT_RP_V6_PORTS 2 /* IPv6 packets: 4-tuple hash */
#define RSSKIT_RP_WINDOWS 4  /* bucket bits from key windows, not the byte table */

#define RSSKIT_RP_MAX_BITS 7
#define RSSKIT_RP_MAX_WORDS 9 /* 36 input bytes */

struct rsskit_rp_config {
	__u32 mask;  /* buckets - 1 */
	__u32 flags; /* RSSKIT_RP_* */
	__u32 bits;  /* bucket bits (mask == (1 << bits) - 1) */
	__u32 _pad;
	/* win[j][w]: the key window that bucket bit j ANDs input word w with
	 * (rsskit_core::toeplitz::key_window(key, 32w + 31 - j)): bit j of a
	 * Toeplitz hash is the parity of the input AND that window, the
	 * classic BPF program's method (cbpf.rs). */
	__u32 win[RSSKIT_RP_MAX_BITS][RSSKIT_RP_MAX_WORDS];
};

/* Indices of the per-CPU counters. */
enum {
	RSSKIT_RP_STEERED = 0,  /* a socket was selected */
	RSSKIT_RP_NO_SOCKET,    /* the bucket's worker has no socket: kernel hash */
	RSSKIT_RP_FALLBACK,     /* not hashable here (other family/next header): kernel hash */
	RSSKIT_RP_ERROR,        /* header load or map lookup failed: kernel hash */
	RSSKIT_RP_NCOUNTERS,
};

#endif
