// AF_XDP input: each RX queue's frames go to the AF_XDP socket registered
// for that queue in `xsks`; a queue without a socket passes its frames to
// the kernel stack unchanged (the XDP_PASS fallback of bpf_redirect_map).
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct {
	__uint(type, BPF_MAP_TYPE_XSKMAP);
	__uint(max_entries, 256);
	__type(key, __u32);
	__type(value, __u32);
} xsks SEC(".maps");

SEC("xdp")
int rsskit_xsk_redirect(struct xdp_md *ctx)
{
	return bpf_redirect_map(&xsks, ctx->rx_queue_index, XDP_PASS);
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
