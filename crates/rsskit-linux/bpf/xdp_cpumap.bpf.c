// Software RSS in XDP (the kernel's xdp_redirect_cpu pattern): hash each
// IPv4/IPv6 frame with rsskit's Toeplitz key and hash types, take the
// bucket's CPU from the policy's bucket -> CPU table, and redirect the
// frame into a CPUMAP so the stack runs on that CPU. Non-IP frames and
// frames the program cannot hash pass, counted.
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/in.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "toeplitz.h"
#include "xdp_cpumap.h"

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct rsskit_tpz_table);
} tpz_table SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct rsskit_xs_config);
} xs_config SEC(".maps");

/* bucket -> CPU id (the policy's bucket -> worker -> CPU, flattened). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, RSSKIT_XS_MAX_BUCKETS);
	__type(key, __u32);
	__type(value, __u32);
} bucket_cpu SEC(".maps");

/* max_entries is set by the loader (possible CPUs). */
struct {
	__uint(type, BPF_MAP_TYPE_CPUMAP);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct bpf_cpumap_val);
} cpu_map SEC(".maps");

/* Per receiving CPU: redirected to target CPU i (i < MAX_CPUS), then the
 * RSSKIT_XS_* slots. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, RSSKIT_XS_MAX_CPUS + RSSKIT_XS_SPECIALS);
	__type(key, __u32);
	__type(value, __u64);
} xs_counters SEC(".maps");

/* Per CPU: frames the cpumap kthread of that CPU handed to the stack. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} xs_delivered SEC(".maps");

struct vlan_hdr_ {
	__be16 tci;
	__be16 proto;
};

struct frag_hdr_ {
	__u8 nexthdr;
	__u8 reserved;
	__be16 frag_off; /* offset << 3 | M */
	__be32 id;
};

struct opt_hdr_ {
	__u8 nexthdr;
	__u8 len; /* 8-byte units after the first 8 */
};

static __always_inline void count(__u32 slot)
{
	__u64 *c = bpf_map_lookup_elem(&xs_counters, &slot);
	if (c)
		*c += 1;
}

/* The hash once the addresses (addr_len bytes) are in `in`: a fragment on
 * the 2-tuple, a TCP/UDP flow whose hash type is on (`ports`) on the
 * 4-tuple, anything else on the 2-tuple. Inlined with a constant addr_len,
 * so each call unrolls as rsskit_toeplitz needs. */
static __always_inline __s64 l4_hash(const struct rsskit_tpz_table *tb, __u8 *in, const int addr_len,
				     int frag, int ports, void *l4, void *end)
{
	if (frag) {
		count(RSSKIT_XS_MAX_CPUS + RSSKIT_XS_FRAG_2TUPLE);
		return rsskit_toeplitz(tb, in, addr_len);
	}
	if (ports) {
		if (l4 + 4 > end) {
			count(RSSKIT_XS_MAX_CPUS + RSSKIT_XS_ERR_MALFORMED);
			return -1;
		}
		__builtin_memcpy(in + addr_len, l4, 4);
		return rsskit_toeplitz(tb, in, addr_len + 4);
	}
	return rsskit_toeplitz(tb, in, addr_len);
}

/* Returns the Toeplitz hash, or -1 (as __s64) when the frame passes. */
static __always_inline __s64 frame_hash(struct xdp_md *ctx, const struct rsskit_tpz_table *tb,
					__u32 types)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	__u8 in[RSSKIT_TPZ_MAX_INPUT] = {};
	void *l4;
	__u8 proto;
	int frag = 0;

	if ((void *)(eth + 1) > end) {
		count(RSSKIT_XS_MAX_CPUS + RSSKIT_XS_PASS_NON_IP);
		return -1;
	}
	__be16 h_proto = eth->h_proto;
	void *l3 = eth + 1;
	if (h_proto == bpf_htons(ETH_P_8021Q) || h_proto == bpf_htons(ETH_P_8021AD)) {
		struct vlan_hdr_ *vh = l3;
		if ((void *)(vh + 1) > end) {
			count(RSSKIT_XS_MAX_CPUS + RSSKIT_XS_ERR_MALFORMED);
			return -1;
		}
		h_proto = vh->proto;
		l3 = vh + 1;
	}

	if (h_proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = l3;
		if ((void *)(ip + 1) > end || ip->ihl < 5) {
			count(RSSKIT_XS_MAX_CPUS + RSSKIT_XS_ERR_MALFORMED);
			return -1;
		}
		__builtin_memcpy(in, &ip->saddr, 8);
		proto = ip->protocol;
		frag = (ip->frag_off & bpf_htons(0x3fff)) != 0; /* MF or offset */
		l4 = l3 + ip->ihl * 4; /* options skipped */
		return l4_hash(tb, in, 8, frag,
			       (proto == IPPROTO_TCP && (types & RSSKIT_HT_TCP_IPV4)) ||
				       (proto == IPPROTO_UDP && (types & RSSKIT_HT_UDP_IPV4)),
			       l4, end);
	}

	if (h_proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = l3;
		if ((void *)(ip6 + 1) > end) {
			count(RSSKIT_XS_MAX_CPUS + RSSKIT_XS_ERR_MALFORMED);
			return -1;
		}
		__builtin_memcpy(in, &ip6->saddr, 32);
		proto = ip6->nexthdr;
		l4 = ip6 + 1;
		/* Walk a few extension headers to the transport header. */
#pragma unroll
		for (int i = 0; i < 4; i++) {
			if (proto == IPPROTO_FRAGMENT) {
				struct frag_hdr_ *fh = l4;
				if ((void *)(fh + 1) > end) {
					count(RSSKIT_XS_MAX_CPUS + RSSKIT_XS_ERR_MALFORMED);
					return -1;
				}
				if (fh->frag_off & bpf_htons(0xfff9)) /* offset or M */
					frag = 1;
				proto = fh->nexthdr;
				l4 = fh + 1;
			} else if (proto == IPPROTO_HOPOPTS || proto == IPPROTO_ROUTING ||
				   proto == IPPROTO_DSTOPTS) {
				struct opt_hdr_ *oh = l4;
				if ((void *)(oh + 1) > end) {
					count(RSSKIT_XS_MAX_CPUS + RSSKIT_XS_ERR_MALFORMED);
					return -1;
				}
				proto = oh->nexthdr;
				l4 = l4 + (oh->len + 1) * 8;
			} else {
				break;
			}
		}
		return l4_hash(tb, in, 32, frag,
			       (proto == IPPROTO_TCP && (types & RSSKIT_HT_TCP_IPV6)) ||
				       (proto == IPPROTO_UDP && (types & RSSKIT_HT_UDP_IPV6)),
			       l4, end);
	}

	count(RSSKIT_XS_MAX_CPUS + RSSKIT_XS_PASS_NON_IP);
	return -1;
}

SEC("xdp")
int rsskit_xdp_cpumap(struct xdp_md *ctx)
{
	__u32 zero = 0;
	const struct rsskit_tpz_table *tb = bpf_map_lookup_elem(&tpz_table, &zero);
	const struct rsskit_xs_config *cfg = bpf_map_lookup_elem(&xs_config, &zero);

	count(RSSKIT_XS_MAX_CPUS + RSSKIT_XS_SEEN);
	if (!tb || !cfg) {
		count(RSSKIT_XS_MAX_CPUS + RSSKIT_XS_ERR_REDIRECT);
		return XDP_PASS;
	}
	__s64 h = frame_hash(ctx, tb, cfg->hash_types);
	if (h < 0)
		return XDP_PASS;
	__u32 bucket = (__u32)h & cfg->bucket_mask;
	__u32 *cpu = bpf_map_lookup_elem(&bucket_cpu, &bucket);
	if (!cpu || *cpu >= RSSKIT_XS_MAX_CPUS) {
		count(RSSKIT_XS_MAX_CPUS + RSSKIT_XS_ERR_REDIRECT);
		return XDP_PASS;
	}
	__u32 target = *cpu;
	/* Lower bits of flags: the action when the CPU has no cpumap entry. */
	long act = bpf_redirect_map(&cpu_map, target, XDP_PASS);
	if (act == XDP_REDIRECT)
		count(target);
	else
		count(RSSKIT_XS_MAX_CPUS + RSSKIT_XS_ERR_REDIRECT);
	return act;
}

/* Runs in each target CPU's cpumap kthread before the stack: counts what
 * each CPU actually received (enqueue drops = redirected - delivered). */
SEC("xdp/cpumap")
int rsskit_xdp_cpumap_rx(struct xdp_md *ctx)
{
	__u32 zero = 0;
	__u64 *c = bpf_map_lookup_elem(&xs_delivered, &zero);
	if (c)
		*c += 1;
	return XDP_PASS;
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
