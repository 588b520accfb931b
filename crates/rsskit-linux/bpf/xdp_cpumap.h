/* Layout shared by xdp_cpumap.bpf.c and rsskit-linux/src/xdp_steer.rs
 * (keep the two in step: the Rust side repeats these numbers). */
#ifndef RSSKIT_XDP_CPUMAP_H
#define RSSKIT_XDP_CPUMAP_H

#include <linux/types.h>

/* Most target CPUs the counters have a slot for (CPU ids 0..MAX-1). */
#define RSSKIT_XS_MAX_CPUS 256
/* Most buckets (rsskit_core::rss::MAX_BITS = 7). */
#define RSSKIT_XS_MAX_BUCKETS 128

/* Counter slots after the per-target-CPU ones (index MAX_CPUS + n). */
#define RSSKIT_XS_SEEN 0          /* every frame the program saw */
#define RSSKIT_XS_PASS_NON_IP 1   /* not IPv4/IPv6: passed */
#define RSSKIT_XS_ERR_MALFORMED 2 /* truncated IP header: passed */
#define RSSKIT_XS_ERR_REDIRECT 3  /* no cpumap entry for the CPU: passed */
#define RSSKIT_XS_FRAG_2TUPLE 4   /* fragments hashed on the 2-tuple */
#define RSSKIT_XS_SPECIALS 5

/* Hash type bits: rsskit_core::HashType in declaration order. */
#define RSSKIT_HT_IPV4 (1u << 0)
#define RSSKIT_HT_TCP_IPV4 (1u << 1)
#define RSSKIT_HT_UDP_IPV4 (1u << 2)
#define RSSKIT_HT_IPV6 (1u << 3)
#define RSSKIT_HT_TCP_IPV6 (1u << 4)
#define RSSKIT_HT_UDP_IPV6 (1u << 5)

struct rsskit_xs_config {
	__u32 hash_types;  /* RSSKIT_HT_* enabled */
	__u32 bucket_mask; /* buckets - 1 */
};

#endif
