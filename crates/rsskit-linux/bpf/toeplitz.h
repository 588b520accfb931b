/* Toeplitz hash for eBPF programs, table-driven like rsskit-core's scalar
 * backend: the hash of an input is the XOR of one precomputed 32-bit entry
 * per input byte, tables[i][byte_i] (rsskit_core::toeplitz::Toeplitz::
 * byte_tables). The loader fills the table from the policy's key, so the
 * program, the software hash and the NIC agree bit for bit.
 *
 * A table lookup per byte (12 for an IPv4 4-tuple, 36 for IPv6) beats the
 * bit-serial loop (one conditional XOR and shift per input bit) and keeps
 * the verifier's work small: every index is a constant or a byte. */
#ifndef RSSKIT_TOEPLITZ_H
#define RSSKIT_TOEPLITZ_H

#include <linux/types.h>

/* The longest hash input: IPv6 source + destination + two ports. */
#define RSSKIT_TPZ_MAX_INPUT 36

struct rsskit_tpz_table {
	__u32 t[RSSKIT_TPZ_MAX_INPUT][256];
};

/* Hash of in[0..len). Inline it with a constant len so the loop unrolls
 * into len loads and XORs. */
static __always_inline __u32 rsskit_toeplitz(const struct rsskit_tpz_table *tb,
					     const __u8 *in, const int len)
{
	__u32 h = 0;
#pragma unroll
	for (int i = 0; i < RSSKIT_TPZ_MAX_INPUT; i++) {
		if (i >= len)
			break;
		h ^= tb->t[i][in[i]];
	}
	return h;
}

#endif
