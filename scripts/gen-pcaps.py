#!/usr/bin/env python3
"""Generates the rsskit-dataplane test captures with scapy, an independent
packet library, plus the facts scapy computes about each packet.

    pip install scapy        # or: apt-get install python3-scapy
    python3 scripts/gen-pcaps.py [OUTDIR]   (default crates/rsskit-dataplane/testdata)

Writes:
  parse.pcap / parse.expect   one frame per line of the .expect file
  frags.pcap / frags.expect   fragment trains in several orders, with overlaps

.expect format (plain text, so the Rust tests need no JSON crate): one record
per line, fields separated by single spaces, the first two fixed:
  parse.expect:  <frame-index> ok key=value ...   |   <frame-index> drop reason=<name>
    keys: vlans=<id,id|->  outer=<v>:<src>><dst>:<proto>  frag=<id>:<offset>:<more|last>|-
          inner=<v>:<src>><dst>:<proto>|-  l4=udp:<sport>><dport>:<payload-len>|tcp:<sport>><dport>|
          icmp:<type>:<code>|icmp6:<type>:<code>|frag|other:<n>
          rss_default=0x........ (NIC hash, Microsoft key, FreeBSD default types: TCP 4-tuple, UDP 2-tuple)
          rss_all=0x........     (NIC hash, all six types enabled)
          flow_all=0x........    (innermost flow hash, all types: the re-injection hash)
  frags.expect:  <name> complete|drop frames=<i,j,...> [ip=<hex of the whole reassembled IP packet>]
Hashes are computed here with a bit-by-bit Toeplitz straight from the
Microsoft RSS definition, independent of the Rust implementation.
Drop reasons are rsskit's names (the malformations are built on purpose).
"""

import logging
import os
import sys

logging.getLogger("scapy.runtime").setLevel(logging.ERROR)

from scapy.all import (  # noqa: E402
    ARP,
    GRE,
    ICMP,
    IP,
    TCP,
    UDP,
    Dot1AD,
    Dot1Q,
    Ether,
    ICMPv6EchoRequest,
    IPOption_RR,
    IPOption_Router_Alert,
    IPv6,
    IPv6ExtHdrDestOpt,
    IPv6ExtHdrFragment,
    IPv6ExtHdrHopByHop,
    IPv6ExtHdrRouting,
    Raw,
    fragment,
    fragment6,
    wrpcap,
)

MS_KEY = bytes.fromhex(
    "6d5a56da255b0ec24167253d43a38fb0d0ca2bcbae7b30b477cb2da38030f20c6a42b73bbeac01fa"
)


def toeplitz(key: bytes, data: bytes) -> int:
    k = int.from_bytes(key, "big")
    klen = len(key) * 8
    result = 0
    for i in range(len(data) * 8):
        if data[i // 8] & (0x80 >> (i % 8)):
            # 32-bit window of the key starting at bit i
            result ^= (k >> (klen - 32 - i)) & 0xFFFFFFFF
    return result


def addr_bytes(ip) -> bytes:
    import ipaddress

    return ipaddress.ip_address(ip).packed


def ip_layers(pkt):
    """Outer and innermost IP layers as scapy sees them (after decap)."""
    layers = []
    cur = pkt
    while cur is not None and not isinstance(cur, type(None)):
        if isinstance(cur, (IP, IPv6)):
            layers.append(cur)
        cur = cur.payload if cur.payload and not isinstance(cur.payload, Raw) else None
    return layers


def is_frag(l3) -> bool:
    if isinstance(l3, IP):
        return bool(l3.flags.MF) or l3.frag != 0
    fh = l3.getlayer(IPv6ExtHdrFragment)
    return fh is not None and (fh.m or fh.offset != 0)


def upper(l3):
    """The transport layer directly carried by l3 (after v6 ext headers)."""
    p = l3.payload
    while isinstance(p, (IPv6ExtHdrHopByHop, IPv6ExtHdrRouting, IPv6ExtHdrDestOpt, IPv6ExtHdrFragment)):
        p = p.payload
    return p


def proto_of(l3) -> int:
    if isinstance(l3, IP):
        return l3.proto
    nh = l3.nh
    p = l3.payload
    while isinstance(p, (IPv6ExtHdrHopByHop, IPv6ExtHdrRouting, IPv6ExtHdrDestOpt, IPv6ExtHdrFragment)):
        nh = p.nh
        if isinstance(p, IPv6ExtHdrFragment) and p.offset != 0:
            break
        p = p.payload
    return nh


def rss(l3, types_tcp: bool, types_udp: bool) -> int:
    proto = proto_of(l3)
    data = addr_bytes(l3.src) + addr_bytes(l3.dst)
    if not is_frag(l3):
        u = upper(l3)
        if (proto == 6 and types_tcp and isinstance(u, TCP)) or (proto == 17 and types_udp and isinstance(u, UDP)):
            data += u.sport.to_bytes(2, "big") + u.dport.to_bytes(2, "big")
    return toeplitz(MS_KEY, data)


def describe(frame) -> str:
    pkt = Ether(bytes(frame))
    vlans = []
    p = pkt.payload
    while isinstance(p, (Dot1Q, Dot1AD)):
        vlans.append(str(p.vlan))
        p = p.payload
    layers = ip_layers(pkt)
    outer, inner = layers[0], layers[-1]

    def l3s(l3):
        v = 4 if isinstance(l3, IP) else 6
        return f"{v}:{l3.src}>{l3.dst}:{proto_of(l3)}"

    def frag(l3):
        if not is_frag(l3):
            return "-"
        if isinstance(l3, IP):
            return f"{l3.id}:{l3.frag * 8}:{'more' if l3.flags.MF else 'last'}"
        fh = l3.getlayer(IPv6ExtHdrFragment)
        return f"{fh.id}:{fh.offset * 8}:{'more' if fh.m else 'last'}"

    if is_frag(inner) and not (isinstance(inner, IP) and inner.frag == 0) and not (
        isinstance(inner, IPv6) and inner.getlayer(IPv6ExtHdrFragment).offset == 0
    ):
        l4 = "frag"
    else:
        u = upper(inner)
        if isinstance(u, UDP):
            ln = len(bytes(u.payload)) if not is_frag(inner) else len(bytes(u)) - 8
            l4 = f"udp:{u.sport}>{u.dport}:{ln}"
        elif isinstance(u, TCP):
            l4 = f"tcp:{u.sport}>{u.dport}"
        elif isinstance(u, ICMP):
            l4 = f"icmp:{u.type}:{u.code}"
        elif isinstance(u, ICMPv6EchoRequest):
            l4 = f"icmp6:{u.type}:{u.code}"
        else:
            l4 = f"other:{proto_of(inner)}"
    fields = [
        f"vlans={','.join(vlans) or '-'}",
        f"outer={l3s(outer)}",
        f"frag={frag(outer)}",
        f"inner={l3s(inner) if inner is not outer else '-'}",
        f"l4={l4}",
        f"rss_default=0x{rss(outer, True, False) if inner is outer else rss(outer, False, False):08x}",
        f"rss_all=0x{rss(outer, True, True) if inner is outer else rss(outer, False, False):08x}",
        f"flow_all=0x{rss(inner, True, True):08x}",
    ]
    return " ".join(fields)


MAC = dict(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")


def parse_cases():
    """(frame, expectation) pairs. expectation None => 'ok' (described by scapy)."""
    e = Ether(**MAC)
    pl = Raw(b"rsskit-test-payload")
    cases = [
        (e / IP(src="66.9.149.187", dst="161.142.100.80") / TCP(sport=2794, dport=1766) / pl, None),
        (e / IP(src="66.9.149.187", dst="161.142.100.80") / UDP(sport=2794, dport=1766) / pl, None),
        (
            e
            / IP(src="10.0.0.1", dst="10.0.0.2", options=[IPOption_Router_Alert(), IPOption_RR()])
            / TCP(sport=1234, dport=80, flags="S")
            / pl,
            None,
        ),
        (e / Dot1Q(vlan=100) / IP(src="10.1.0.1", dst="10.1.0.2") / UDP(sport=5000, dport=6000) / pl, None),
        (
            Ether(type=0x88A8, **MAC)
            / Dot1AD(vlan=7)
            / Dot1Q(vlan=200)
            / IP(src="10.2.0.1", dst="10.2.0.2")
            / TCP(sport=40000, dport=443)
            / pl,
            None,
        ),
        (e / IPv6(src="2001:db8::1", dst="2001:db8::2") / UDP(sport=53, dport=5353) / pl, None),
        (
            e
            / IPv6(src="3ffe:2501:200:1fff::7", dst="3ffe:2501:200:3::1")
            / TCP(sport=2794, dport=1766)
            / pl,
            None,
        ),
        (
            e
            / IPv6(src="2001:db8::a", dst="2001:db8::b")
            / IPv6ExtHdrHopByHop()
            / IPv6ExtHdrRouting(type=0, addresses=["2001:db8::c"], segleft=0)
            / IPv6ExtHdrDestOpt()
            / UDP(sport=1111, dport=2222)
            / pl,
            None,
        ),
        (e / IP(src="192.0.2.1", dst="192.0.2.2") / ICMP(type=8, code=0) / pl, None),
        (e / IPv6(src="fe80::1", dst="fe80::2") / ICMPv6EchoRequest() / pl, None),
        # Tunnels: IPIP, 6in4, 4in6, GRE (v4 in v4, v6 in v4 with key), GRE over VLAN.
        (
            e
            / IP(src="198.51.100.1", dst="198.51.100.2")
            / IP(src="10.9.0.1", dst="10.9.0.2")
            / UDP(sport=7, dport=9)
            / pl,
            None,
        ),
        (
            e
            / IP(src="198.51.100.1", dst="198.51.100.2")
            / IPv6(src="2001:db8:1::1", dst="2001:db8:1::2")
            / TCP(sport=22, dport=2222)
            / pl,
            None,
        ),
        (
            e
            / IPv6(src="2001:db8:2::1", dst="2001:db8:2::2")
            / IP(src="10.8.0.1", dst="10.8.0.2")
            / UDP(sport=4789, dport=4790)
            / pl,
            None,
        ),
        (
            e
            / IP(src="203.0.113.1", dst="203.0.113.2")
            / GRE()
            / IP(src="10.7.0.1", dst="10.7.0.2")
            / TCP(sport=3333, dport=4444)
            / pl,
            None,
        ),
        (
            e
            / Dot1Q(vlan=42)
            / IP(src="203.0.113.1", dst="203.0.113.2")
            / GRE(key_present=1, key=0xABCD)
            / IPv6(src="2001:db8:3::1", dst="2001:db8:3::2")
            / UDP(sport=100, dport=200)
            / pl,
            None,
        ),
    ]
    # Fragments: first and later, both families.
    big = IP(src="10.3.0.1", dst="10.3.0.2", id=0x4242) / UDP(sport=999, dport=888) / Raw(bytes(range(200)))
    f4 = fragment(big, fragsize=96)
    cases += [(e / f4[0], None), (e / f4[1], None)]
    big6 = (
        IPv6(src="2001:db8:4::1", dst="2001:db8:4::2")
        / IPv6ExtHdrFragment(id=0xCAFE)
        / UDP(sport=999, dport=888)
        / Raw(bytes(range(200)))
    )
    f6 = fragment6(big6, 120)
    cases += [(e / f6[0], None), (e / f6[1], None)]

    # Malformed, with rsskit's reason.
    good4 = bytes(e / IP(src="10.0.0.1", dst="10.0.0.2") / UDP(sport=1, dport=2) / pl)
    bad_sum = bytearray(good4)
    bad_sum[14 + 10] ^= 0xFF
    bad_ihl = bytearray(good4)
    bad_ihl[14] = 0x44
    bad_ver = bytearray(good4)
    bad_ver[14] = 0x55
    bad_udp_len = bytes(e / IP(src="10.0.0.1", dst="10.0.0.2") / UDP(sport=1, dport=2, len=200) / pl)
    cases += [
        (good4[:14 + 12], "ipv4_truncated"),
        (bytes(good4[:30]) + b"", "ipv4_truncated"),
        (bytes(bad_sum), "ipv4_bad_checksum"),
        (bytes(bad_ihl), "ipv4_bad_ihl"),
        (bytes(bad_ver), "bad_ip_version"),
        (bad_udp_len, "udp_bad_length"),
        (bytes(e / ARP()), "not_ip"),
        (good4[:10], "eth_truncated"),
        (bytes(e / Dot1Q(vlan=1))[:16], "vlan_truncated"),
        (
            bytes(
                e
                / IPv6(src="::1", dst="::2")
                / IPv6ExtHdrDestOpt()
                / IPv6ExtHdrHopByHop()
                / UDP(sport=1, dport=2)
            ),
            "ipv6_bad_ext_header",
        ),
        (bytes(e / IP(src="10.0.0.1", dst="10.0.0.2") / TCP(sport=1, dport=2))[:14 + 20 + 12], "ipv4_bad_total_len"),
        (bytes(e / IP(src="10.0.0.1", dst="10.0.0.2", proto=6) / Raw(b"\x00" * 12)), "l4_truncated"),
        (bytes(e / IP(src="10.0.0.1", dst="10.0.0.2") / GRE(version=1) / IP() / UDP()), "gre_malformed"),
        (bad_options(), "ipv4_bad_options"),
        (
            bytes(
                e
                / IPv6(src="::1", dst="::2")
                / IPv6ExtHdrRouting(type=0, addresses=["2001:db8::9"], segleft=1)
                / UDP(sport=1, dport=2)
            ),
            "ipv6_bad_ext_header",
        ),
    ]
    return cases


def bad_options():
    """IPv4 with a timestamp option whose length (12) runs past the 4 option
    bytes; the header checksum is correct (scapy's checksum())."""
    from scapy.utils import checksum

    hdr = bytearray(bytes(IP(src="10.0.0.1", dst="10.0.0.2", options=[IPOption_Router_Alert()]) / UDP(sport=1, dport=2)))
    hdr[20:24] = b"\x44\x0c\x05\x00"
    hdr[10:12] = b"\x00\x00"
    hdr[10:12] = checksum(bytes(hdr[:24])).to_bytes(2, "big")
    return bytes(Ether(**MAC, type=0x0800)) + bytes(hdr)


def frag_cases():
    """(name, [frames], expected_ip_bytes or None for drop)."""
    e = Ether(**MAC)
    out = []

    def v4(ident, n, sport=40000):
        return IP(src="10.5.0.1", dst="10.5.0.2", id=ident) / UDP(sport=sport, dport=9) / Raw(
            bytes((i * 7 + ident) & 0xFF for i in range(n))
        )

    def v6(ident, n):
        return (
            IPv6(src="2001:db8:5::1", dst="2001:db8:5::2")
            / IPv6ExtHdrFragment(id=ident)
            / UDP(sport=40000, dport=9)
            / Raw(bytes((i * 11 + ident) & 0xFF for i in range(n)))
        )

    def whole6(p):
        # The packet without its fragment header: what reassembly returns.
        q = p.copy()
        fh = q[IPv6ExtHdrFragment]
        q[IPv6].nh = fh.nh
        q[IPv6].remove_payload()
        q = q / fh.payload
        q[IPv6].plen = None
        return bytes(IPv6(bytes(q)))

    for ident, n, size, order in [
        (1, 1000, 296, "inorder"),
        (2, 1400, 400, "reverse"),
        (3, 3000, 1000, "lastfirst"),
        (4, 2000, 504, "shuffle"),
        (5, 600, 200, "dups"),
    ]:
        p = v4(ident, n)
        fr = fragment(p, fragsize=size)
        fr = reorder(fr, order)
        out.append((f"v4-{order}", [e / f for f in fr], bytes(IP(bytes(p)))))
        p6 = v6(0x1000 + ident, n)
        fr6 = reorder(fragment6(p6, size + 48), order)
        out.append((f"v6-{order}", [e / f for f in fr6], whole6(p6)))

    # Overlaps: a second fragment that starts inside the first.
    p = v4(20, 300)
    raw = bytes(p)[20:]  # UDP header + data
    a = IP(src="10.5.0.1", dst="10.5.0.2", id=20, proto=17, flags="MF", frag=0) / Raw(raw[:160])
    b = IP(src="10.5.0.1", dst="10.5.0.2", id=20, proto=17, frag=128 // 8) / Raw(raw[128:])
    out.append(("v4-overlap", [e / a, e / b], None))
    # Same range, different bytes.
    c = IP(src="10.5.0.1", dst="10.5.0.2", id=21, proto=17, flags="MF", frag=0) / Raw(raw[:160])
    d = IP(src="10.5.0.1", dst="10.5.0.2", id=21, proto=17, flags="MF", frag=0) / Raw(b"X" * 8 + raw[8:160])
    f = IP(src="10.5.0.1", dst="10.5.0.2", id=21, proto=17, frag=160 // 8) / Raw(raw[160:])
    out.append(("v4-rewrite", [e / c, e / d, e / f], None))
    # IPv6 overlap (RFC 5722), then the correct fragments: still dropped.
    p6 = v6(0x2000, 300)
    raw6 = bytes(p6[IPv6ExtHdrFragment].payload)
    s, dd = "2001:db8:5::1", "2001:db8:5::2"
    g = IPv6(src=s, dst=dd) / IPv6ExtHdrFragment(nh=17, id=0x2000, m=1, offset=0) / Raw(raw6[:160])
    h = IPv6(src=s, dst=dd) / IPv6ExtHdrFragment(nh=17, id=0x2000, m=0, offset=152 // 8) / Raw(raw6[152:])
    k = IPv6(src=s, dst=dd) / IPv6ExtHdrFragment(nh=17, id=0x2000, m=0, offset=160 // 8) / Raw(raw6[160:])
    out.append(("v6-overlap", [e / g, e / h, e / k], None))
    # Tiny TCP first fragment (RFC 1858).
    t = IP(src="10.5.0.1", dst="10.5.0.2", id=30) / TCP(sport=1, dport=2) / Raw(b"\x00" * 100)
    traw = bytes(t)[20:]
    t0 = IP(src="10.5.0.1", dst="10.5.0.2", id=30, proto=6, flags="MF", frag=0) / Raw(traw[:8])
    t1 = IP(src="10.5.0.1", dst="10.5.0.2", id=30, proto=6, frag=1) / Raw(traw[8:])
    out.append(("v4-tiny-tcp", [e / t0, e / t1], None))
    # GRE-tunnelled fragments: the outer packet is fragmented.
    inner = IP(src="10.6.0.1", dst="10.6.0.2") / UDP(sport=5555, dport=6666) / Raw(b"g" * 600)
    outer = IP(src="203.0.113.9", dst="203.0.113.10", id=40) / GRE() / inner
    fo = fragment(outer, fragsize=256)
    out.append(("v4-gre-frags", [e / f for f in reversed(fo)], bytes(IP(bytes(outer)))))
    return out


def reorder(frags, how):
    frags = list(frags)
    if how == "reverse":
        return frags[::-1]
    if how == "lastfirst":
        return frags[-1:] + frags[:-1]
    if how == "shuffle":
        idx = [2, 0, 3, 1] + list(range(4, len(frags)))
        return [frags[i] for i in idx if i < len(frags)]
    if how == "dups":
        return [frags[0], frags[0]] + frags[1:] + [frags[1]] if len(frags) > 2 else frags + frags[:1]
    return frags


def main():
    outdir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(__file__), "..", "crates", "rsskit-dataplane", "testdata"
    )
    os.makedirs(outdir, exist_ok=True)
    frames, lines = [], []
    for i, (frame, reason) in enumerate(parse_cases()):
        data = bytes(frame)
        fr = Raw(data)  # the bytes exactly as built (malformed ones too)
        fr.time = 1_700_000_000 + i / 1000  # fixed: reproducible files
        frames.append(fr)
        lines.append(f"{i} drop reason={reason}" if reason else f"{i} ok {describe(data)}")
    wrpcap(os.path.join(outdir, "parse.pcap"), frames, linktype=1)
    with open(os.path.join(outdir, "parse.expect"), "w") as f:
        f.write("\n".join(lines) + "\n")

    frames, lines = [], []
    for name, group, expect in frag_cases():
        idx = []
        for fr in group:
            idx.append(str(len(frames)))
            fr = Raw(bytes(fr))
            fr.time = 1_700_000_000 + len(frames) / 1000
            frames.append(fr)
        if expect is None:
            lines.append(f"{name} drop frames={','.join(idx)}")
        else:
            lines.append(f"{name} complete frames={','.join(idx)} ip={expect.hex()}")
    wrpcap(os.path.join(outdir, "frags.pcap"), frames, linktype=1)
    with open(os.path.join(outdir, "frags.expect"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"wrote {outdir}")


if __name__ == "__main__":
    main()
