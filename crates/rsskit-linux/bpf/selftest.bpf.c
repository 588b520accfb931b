// The smallest program: lets tests check that the toolchain (clang ->
// embedded object -> aya -> kernel verifier) works before anything
// real depends on it. It passes every packet.
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

SEC("xdp")
int rsskit_selftest(struct xdp_md *ctx)
{
	return XDP_PASS;
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
