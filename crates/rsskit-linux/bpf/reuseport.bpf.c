// SK_REUSEPORT steering with maps: the Toeplitz bucket of the datagram (or
// SYN), computed here exactly as rsskit-core's RssPolicy and the classic BPF
// program (cbpf.rs) compute it, then bucket -> worker (`buckets`) and
// worker -> socket (`socks`, a REUSEPORT_SOCKARRAY). Rebalancing and adding
// or removing workers are map updates: no re-attach.
//
// Anything the program cannot hash (another family, an IPv6 next header
// that is not the group's protocol, a bucket whose worker has no socket)
// gets SK_PASS without a selection, so the kernel falls back to its own
// reuseport hash: never a drop, and counted.
//
// Section: "socket", not "sk_reuseport", only because the aya 0.13 object
// parser knows no "sk_reuseport" section; the loader (src/ebpf/reuseport.rs)
// loads this function as BPF_PROG_TYPE_SK_REUSEPORT itself.
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "toeplitz.h"
#include "reuseport.h"

#ifndef ENOENT
#define ENOENT 2
#endif

struct {
	__uint(type, BPF_MAP_TYPE_REUSEPORT_SOCKARRAY);
	__uint(max_entries, RSSKIT_RP_MAX_SOCKS);
	__type(key, __u32);
	__type(value, __u64);
} socks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, RSSKIT_RP_MAX_BUCKETS);
	__type(key, __u32);
	__type(value, __u32);
} buckets SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct rsskit_rp_config);
} config SEC(".maps");

// A map rather than a global: .bss/.data maps need the loader's data-map
// relocations and are no faster (both are one array lookup per packet).
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct rsskit_tpz_table);
} tpz SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, RSSKIT_RP_NCOUNTERS);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

// Datagrams (or SYNs) per bucket: the load the rebalancer measures.
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, RSSKIT_RP_MAX_BUCKETS);
	__type(key, __u32);
	__type(value, __u64);
} bucket_hits SEC(".maps");

static __always_inline void count(__u32 idx)
{
	__u64 *c = bpf_map_lookup_elem(&counters, &idx);
	if (c)
		*c += 1;
}

static __always_inline int pass(__u32 idx)
{
	count(idx);
	return SK_PASS;
}

// Bucket = the low `bits` bits of the hash, bit by bit: parity of the
// input words ANDed with each bit's key windows. No table: about 4
// instructions per word per bit, and no 36 KiB of lookups to miss in.
static __always_inline __u32 bucket_by_windows(const struct rsskit_rp_config *cfg, const __u8 *in,
					       const int words)
{
	__u32 w[RSSKIT_RP_MAX_WORDS];
#pragma unroll
	for (int i = 0; i < RSSKIT_RP_MAX_WORDS; i++) {
		if (i >= words)
			break;
		w[i] = ((__u32)in[4 * i] << 24) | ((__u32)in[4 * i + 1] << 16) | ((__u32)in[4 * i + 2] << 8) |
		       (__u32)in[4 * i + 3];
	}
	__u32 bucket = 0;
#pragma unroll
	for (int j = 0; j < RSSKIT_RP_MAX_BITS; j++) {
		if (j >= cfg->bits)
			break;
		__u32 x = 0;
#pragma unroll
		for (int i = 0; i < RSSKIT_RP_MAX_WORDS; i++) {
			if (i >= words)
				break;
			x ^= w[i] & cfg->win[j][i];
		}
		x ^= x >> 16;
		x ^= x >> 8;
		x ^= x >> 4;
		x ^= x >> 2;
		x ^= x >> 1;
		bucket |= (x & 1) << j;
	}
	return bucket;
}

static __always_inline __u32 hash_or_bucket(const struct rsskit_rp_config *cfg,
					    const struct rsskit_tpz_table *tb, const __u8 *in,
					    const int len)
{
	if (cfg->flags & RSSKIT_RP_WINDOWS)
		return bucket_by_windows(cfg, in, len / 4);
	return rsskit_toeplitz(tb, in, len);
}

SEC("socket")
int rsskit_reuseport(struct sk_reuseport_md *md)
{
	__u32 zero = 0;
	struct rsskit_rp_config *cfg = bpf_map_lookup_elem(&config, &zero);
	struct rsskit_tpz_table *tb = bpf_map_lookup_elem(&tpz, &zero);
	if (!cfg || !tb)
		return pass(RSSKIT_RP_ERROR);

	// One header load per family (helper calls are most of the cost),
	// a second one for the ports.
	__u8 in[RSSKIT_TPZ_MAX_INPUT] = {};
	__u32 hash;
	if (md->eth_protocol == bpf_htons(ETH_P_IP)) {
		__u8 ip[20];
		if (bpf_skb_load_bytes_relative(md, 0, ip, 20, BPF_HDR_START_NET))
			return pass(RSSKIT_RP_ERROR);
		__builtin_memcpy(in, ip + 12, 8);
		if (cfg->flags & RSSKIT_RP_V4_PORTS) {
			// Ports after the options, as cbpf's ldxb 4*([net]&0xf).
			__u32 ihl = (ip[0] & 0xf) * 4;
			if (bpf_skb_load_bytes_relative(md, ihl, in + 8, 4, BPF_HDR_START_NET))
				return pass(RSSKIT_RP_ERROR);
			hash = hash_or_bucket(cfg, tb, in, 12);
		} else {
			hash = hash_or_bucket(cfg, tb, in, 8);
		}
	} else if (md->eth_protocol == bpf_htons(ETH_P_IPV6)) {
		__u8 ip6[40];
		if (bpf_skb_load_bytes_relative(md, 0, ip6, 40, BPF_HDR_START_NET))
			return pass(RSSKIT_RP_ERROR);
		// As cbpf: only the group's protocol right after the fixed header.
		if (ip6[6] != md->ip_protocol)
			return pass(RSSKIT_RP_FALLBACK);
		__builtin_memcpy(in, ip6 + 8, 32);
		if (cfg->flags & RSSKIT_RP_V6_PORTS) {
			if (bpf_skb_load_bytes_relative(md, 40, in + 32, 4, BPF_HDR_START_NET))
				return pass(RSSKIT_RP_ERROR);
			hash = hash_or_bucket(cfg, tb, in, 36);
		} else {
			hash = hash_or_bucket(cfg, tb, in, 32);
		}
	} else {
		return pass(RSSKIT_RP_FALLBACK);
	}

	__u32 bucket = hash & cfg->mask;
	__u64 *hits = bpf_map_lookup_elem(&bucket_hits, &bucket);
	if (hits)
		*hits += 1;
	__u32 *worker = bpf_map_lookup_elem(&buckets, &bucket);
	if (!worker)
		return pass(RSSKIT_RP_ERROR);
	long err = bpf_sk_select_reuseport(md, &socks, worker, 0);
	if (err == 0)
		return pass(RSSKIT_RP_STEERED);
	return pass(err == -ENOENT ? RSSKIT_RP_NO_SOCKET : RSSKIT_RP_ERROR);
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
