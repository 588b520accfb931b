use super::*;
use crate::craft::{self, V4};
use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use ip::proto;

fn a4(s: &str) -> Ipv4Addr {
    s.parse().unwrap()
}
fn a6(s: &str) -> Ipv6Addr {
    s.parse().unwrap()
}
fn cfg() -> ParseConfig {
    ParseConfig::default()
}

fn udp4(sp: u16, dp: u16, payload: &[u8]) -> Vec<u8> {
    craft::ipv4(&V4::new(a4("10.0.0.1"), a4("10.0.0.2"), proto::UDP), &craft::udp(sp, dp, payload))
}

#[test]
fn plain_udp4() {
    let f = craft::eth(ethertype::IPV4, &[], &udp4(1000, 53, b"hello"));
    let p = parse_ethernet(&f, &cfg()).unwrap();
    assert_eq!(p.vlan_count, 0);
    assert_eq!(p.outer.offset, 14);
    assert_eq!(p.outer.src, IpAddr::V4(a4("10.0.0.1")));
    assert_eq!(p.outer.proto, proto::UDP);
    assert!(p.inner.is_none());
    match p.l4 {
        Transport::Udp { src_port, dst_port, payload } => {
            assert_eq!((src_port, dst_port), (1000, 53));
            assert_eq!(payload, b"hello");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn ethernet_padding_is_cut() {
    let mut f = craft::eth(ethertype::IPV4, &[], &udp4(1, 2, b""));
    f.resize(60, 0xee);
    let p = parse_ethernet(&f, &cfg()).unwrap();
    assert_eq!(p.outer.bytes.len(), 28);
    assert_eq!(p.l4.ports(), Some((1, 2)));
}

#[test]
fn vlan_and_qinq() {
    let ip = udp4(1, 2, b"x");
    let f = craft::eth(ethertype::IPV4, &[(ethertype::VLAN, 0x2064)], &ip);
    let p = parse_ethernet(&f, &cfg()).unwrap();
    assert_eq!(p.vlans().len(), 1);
    assert_eq!(p.vlans()[0].id(), 100);
    assert_eq!(p.outer.offset, 18);

    let f = craft::eth(ethertype::IPV4, &[(ethertype::QINQ, 7), (ethertype::VLAN, 200)], &ip);
    let p = parse_ethernet(&f, &cfg()).unwrap();
    assert_eq!(
        p.vlans().iter().map(|v| (v.tpid, v.id())).collect::<Vec<_>>(),
        vec![(ethertype::QINQ, 7), (ethertype::VLAN, 200)]
    );
    assert_eq!(p.outer.offset, 22);

    let f =
        craft::eth(ethertype::IPV4, &[(ethertype::QINQ, 1), (ethertype::VLAN, 2), (ethertype::VLAN, 3)], &ip);
    assert_eq!(parse_ethernet(&f, &cfg()), Err(DropReason::TooManyVlans));
}

#[test]
fn non_ip_rejected() {
    let f = craft::eth(0x0806, &[], &[0u8; 28]);
    assert_eq!(parse_ethernet(&f, &cfg()), Err(DropReason::NotIp));
    let f = craft::eth(0x0040, &[], &[0u8; 64]); // 802.3 length field
    assert_eq!(parse_ethernet(&f, &cfg()), Err(DropReason::NotIp));
}

#[test]
fn ipv4_options_and_checksum() {
    let mut h = V4::new(a4("1.2.3.4"), a4("5.6.7.8"), proto::TCP);
    h.options = vec![0x94, 0x04, 0, 0, 0x01]; // router alert, NOP
    let ip = craft::ipv4(&h, &craft::tcp(80, 8080, b"data"));
    let p = parse_ip(&ip, &cfg()).unwrap();
    assert_eq!(p.outer.header_len, 28);
    assert_eq!(p.l4.ports(), Some((80, 8080)));
    if let Transport::Tcp { flags, payload, .. } = p.l4 {
        assert_eq!(flags, 0x10);
        assert_eq!(payload, b"data");
    } else {
        panic!()
    }
    let mut bad = ip.clone();
    bad[8] ^= 1; // TTL change without checksum update
    assert_eq!(parse_ip(&bad, &cfg()), Err(DropReason::Ipv4BadChecksum));
    let lax = ParseConfig { verify_ipv4_checksum: false, ..cfg() };
    assert!(parse_ip(&bad, &lax).is_ok());
    // An option whose length runs past the header.
    let mut h2 = h.clone();
    h2.options = vec![0x44, 12, 5, 0];
    let ip = craft::ipv4(&h2, &craft::tcp(80, 8080, b""));
    assert_eq!(parse_ip(&ip, &cfg()), Err(DropReason::Ipv4BadOptions));
}

#[test]
fn ipv4_bad_lengths() {
    let ip = udp4(1, 2, b"abc");
    let mut b = ip.clone();
    b[0] = 0x44; // IHL 4
    assert_eq!(parse_ip(&b, &cfg()), Err(DropReason::Ipv4BadIhl));
    let mut b = ip.clone();
    b[2..4].copy_from_slice(&200u16.to_be_bytes());
    let c = internet_checksum(&{
        let mut z = b[..20].to_vec();
        z[10] = 0;
        z[11] = 0;
        z
    });
    b[10..12].copy_from_slice(&c.to_be_bytes());
    assert_eq!(parse_ip(&b, &cfg()), Err(DropReason::Ipv4BadTotalLen));
    let mut b = ip.clone();
    b[0] = 0x55;
    assert_eq!(parse_ip(&b, &cfg()), Err(DropReason::BadIpVersion));
    // UDP length larger than the IP payload.
    let mut b = ip.clone();
    b[24..26].copy_from_slice(&100u16.to_be_bytes());
    assert_eq!(parse_ip(&b, &cfg()), Err(DropReason::UdpBadLength));
}

#[test]
fn ipv6_extension_chain() {
    let mut rest = craft::ext_header(proto::ROUTING, &[5, 2, 0, 0]); // hop-by-hop
    let mut rt = craft::ext_header(proto::DSTOPTS, &[0, 0, 0, 0, 0, 0]); // routing type 0, segs 0
    rest.append(&mut rt);
    rest.extend(craft::ext_header(proto::UDP, &[]));
    rest.extend(craft::udp(5353, 5353, b"q"));
    let ip = craft::ipv6(a6("2001:db8::1"), a6("2001:db8::2"), proto::HOPOPT, &rest);
    let p = parse_ip(&ip, &cfg()).unwrap();
    assert_eq!(p.outer.proto, proto::UDP);
    assert_eq!(p.outer.header_len, 40 + 24);
    assert_eq!(p.l4.ports(), Some((5353, 5353)));

    // Hop-by-hop after another extension header is invalid.
    let mut rest = craft::ext_header(proto::HOPOPT, &[]);
    rest.extend(craft::ext_header(proto::UDP, &[]));
    rest.extend(craft::udp(1, 2, b""));
    let ip = craft::ipv6(a6("::1"), a6("::2"), proto::DSTOPTS, &rest);
    assert_eq!(parse_ip(&ip, &cfg()), Err(DropReason::Ipv6BadExtHeader));

    // A chain longer than the limit.
    let mut rest = Vec::new();
    for _ in 0..9 {
        rest.extend(craft::ext_header(proto::DSTOPTS, &[]));
    }
    let ip = craft::ipv6(a6("::1"), a6("::2"), proto::DSTOPTS, &rest);
    assert_eq!(parse_ip(&ip, &cfg()), Err(DropReason::Ipv6ExtChainTooLong));

    // Type 0 routing header with segments left (RFC 5095).
    let mut rest = craft::ext_header(proto::UDP, &[0, 1, 0, 0, 0, 0]);
    rest.extend(craft::udp(1, 2, b""));
    let ip = craft::ipv6(a6("::1"), a6("::2"), proto::ROUTING, &rest);
    assert_eq!(parse_ip(&ip, &cfg()), Err(DropReason::Ipv6BadExtHeader));

    // Truncated extension header.
    let ip = craft::ipv6(a6("::1"), a6("::2"), proto::DSTOPTS, &[17, 1, 0, 0, 0, 0, 0, 0]);
    assert_eq!(parse_ip(&ip, &cfg()), Err(DropReason::Ipv6BadExtHeader));
}

#[test]
fn ipv6_fragment_header_bits_match_rfc8200() {
    // scapy: bytes(IPv6ExtHdrFragment(nh=17, offset=1, m=1, id=5)) == 1100000900000005
    let mut rest = vec![0x11, 0x00, 0x00, 0x09, 0x00, 0x00, 0x00, 0x05];
    rest.extend_from_slice(&[0u8; 16]);
    let ip = craft::ipv6(a6("::1"), a6("::2"), proto::FRAGMENT, &rest);
    let f = parse_ip(&ip, &cfg()).unwrap().outer.frag.unwrap();
    assert_eq!((f.offset, f.more, f.id), (8, true, 5));
    assert_eq!(craft::frag_header(17, 8, true, 5), [0x11, 0, 0, 9, 0, 0, 0, 5]);
}

#[test]
fn ipv6_fragments() {
    let payload: Vec<u8> = craft::udp(7, 9, &[0xab; 100]);
    let frags = craft::fragment_v6(
        a6("2001:db8::1"),
        a6("2001:db8::2"),
        proto::FRAGMENT,
        &[],
        proto::UDP,
        0xdead_beef,
        &payload,
        &[48],
    );
    let p0 = parse_ip(&frags[0], &cfg()).unwrap();
    let f0 = p0.outer.frag.unwrap();
    assert_eq!((f0.id, f0.offset, f0.more, f0.frag_hdr_at, f0.nh_at), (0xdead_beef, 0, true, 40, 6));
    assert_eq!(p0.l4.ports(), Some((7, 9)));
    assert_eq!(p0.outer.fragment_data(), &payload[..48]);
    let p1 = parse_ip(&frags[1], &cfg()).unwrap();
    let f1 = p1.outer.frag.unwrap();
    assert_eq!((f1.offset, f1.more), (48, false));
    assert_eq!(p1.l4, Transport::Fragment);
    assert_eq!(p1.outer.proto, proto::UDP);
    assert_eq!(p1.outer.fragment_data(), &payload[48..]);

    // Later-fragment data that looks like extension headers is data.
    let later =
        craft::fragment_v6(a6("::1"), a6("::2"), proto::FRAGMENT, &[], proto::DSTOPTS, 1, &[0xff; 64], &[32]);
    let p = parse_ip(&later[1], &cfg()).unwrap();
    assert_eq!(p.l4, Transport::Fragment);
    assert_eq!(p.outer.header_len, 48);

    // Fragment header after a destination options header.
    let unfrag = craft::ext_header(proto::FRAGMENT, &[]);
    let fr =
        craft::fragment_v6(a6("::1"), a6("::2"), proto::DSTOPTS, &unfrag, proto::UDP, 5, &payload, &[56]);
    let p = parse_ip(&fr[1], &cfg()).unwrap();
    let f = p.outer.frag.unwrap();
    assert_eq!((f.frag_hdr_at, f.nh_at, f.offset), (48, 40, 56));

    // Atomic fragment: treated as a whole packet.
    let at = craft::fragment_v6(a6("::1"), a6("::2"), 0, &[], proto::UDP, 5, &payload, &[]);
    let p = parse_ip(&at[0], &cfg()).unwrap();
    assert!(p.outer.frag.is_none());
    assert_eq!(p.l4.ports(), Some((7, 9)));

    // Two fragment headers are dropped (drop.rs: Ipv6BadExtHeader), also
    // when the first is an atomic fragment (offset 0, M = 0), which once
    // slipped through as a whole packet; and in the other order.
    let two = |first: [u8; 8], second: [u8; 8]| {
        let mut rest = first.to_vec();
        rest.extend_from_slice(&second);
        rest.extend(craft::udp(7, 9, &[0xab; 16]));
        craft::ipv6(a6("::1"), a6("::2"), proto::FRAGMENT, &rest)
    };
    let atomic = craft::frag_header(proto::FRAGMENT, 0, false, 5);
    let real = craft::frag_header(proto::UDP, 0, true, 6);
    let atomic_last = craft::frag_header(proto::UDP, 0, false, 6);
    assert_eq!(parse_ip(&two(atomic, real), &cfg()), Err(DropReason::Ipv6BadExtHeader));
    assert_eq!(parse_ip(&two(atomic, atomic_last), &cfg()), Err(DropReason::Ipv6BadExtHeader));
    let first_real = craft::frag_header(proto::FRAGMENT, 0, true, 5);
    assert_eq!(parse_ip(&two(first_real, atomic_last), &cfg()), Err(DropReason::Ipv6BadExtHeader));

    // A non-last fragment whose size is not a multiple of 8.
    let bad = craft::fragment_v6(a6("::1"), a6("::2"), 0, &[], proto::UDP, 5, &payload, &[50]);
    assert_eq!(parse_ip(&bad[0], &cfg()), Err(DropReason::BadFragment));
}

#[test]
fn ipv4_fragments_and_tiny_first() {
    let h = V4::new(a4("10.1.1.1"), a4("10.1.1.2"), proto::UDP);
    let payload = craft::udp(1, 2, &[7; 64]);
    let fr = craft::fragment_v4(&h, &payload, &[8, 40]);
    let p = parse_ip(&fr[0], &cfg()).unwrap();
    assert_eq!(p.l4.ports(), Some((1, 2)));
    assert_eq!(p.outer.frag.unwrap().offset, 0);
    let p = parse_ip(&fr[2], &cfg()).unwrap();
    assert_eq!(p.l4, Transport::Fragment);
    assert_eq!(p.outer.frag.unwrap().offset, 40);
    assert!(!p.outer.frag.unwrap().more);

    // TCP first fragment with only 8 bytes of the TCP header: RFC 1858.
    let mut th = h.clone();
    th.proto = proto::TCP;
    let seg = craft::tcp(1, 2, &[0; 32]);
    let fr = craft::fragment_v4(&th, &seg, &[8]);
    assert_eq!(parse_ip(&fr[0], &cfg()), Err(DropReason::L4Truncated));
}

#[test]
fn tunnels() {
    let inner4 = udp4(1111, 2222, b"in");
    // IPIP
    let ip = craft::ipv4(&V4::new(a4("192.0.2.1"), a4("192.0.2.2"), proto::IPIP), &inner4);
    let p = parse_ip(&ip, &cfg()).unwrap();
    assert_eq!(p.tunnel, Some(TunnelKind::Ipip));
    assert_eq!(p.depth, 1);
    assert_eq!(p.outer.src, IpAddr::V4(a4("192.0.2.1")));
    assert_eq!(p.innermost().src, IpAddr::V4(a4("10.0.0.1")));
    assert_eq!(p.inner.as_ref().unwrap().offset, 20);
    assert_eq!(p.l4.ports(), Some((1111, 2222)));

    // 6in4
    let inner6 = craft::ipv6(a6("2001:db8::a"), a6("2001:db8::b"), proto::TCP, &craft::tcp(5, 6, b""));
    let ip = craft::ipv4(&V4::new(a4("192.0.2.1"), a4("192.0.2.2"), proto::IPV6), &inner6);
    let p = parse_ip(&ip, &cfg()).unwrap();
    assert_eq!(p.tunnel, Some(TunnelKind::Ip6in));
    assert!(p.innermost().is_ipv6());
    assert_eq!(p.l4.ports(), Some((5, 6)));

    // GRE with key, IPv4 inside, in a VLAN frame
    let g = craft::gre(ethertype::IPV4, Some(42), &inner4);
    let ip = craft::ipv4(&V4::new(a4("192.0.2.1"), a4("192.0.2.2"), proto::GRE), &g);
    let f = craft::eth(ethertype::IPV4, &[(ethertype::VLAN, 10)], &ip);
    let p = parse_ethernet(&f, &cfg()).unwrap();
    assert_eq!(p.tunnel, Some(TunnelKind::Gre { ether_type: ethertype::IPV4, key: Some(42) }));
    assert_eq!(p.inner.as_ref().unwrap().offset, 18 + 20 + 8);
    assert_eq!(p.l4.ports(), Some((1111, 2222)));

    // GRE transparent Ethernet bridging over IPv6
    let e = craft::eth(ethertype::IPV4, &[(ethertype::VLAN, 5)], &inner4);
    let g = craft::gre(ethertype::TEB, None, &e);
    let ip = craft::ipv6(a6("fd00::1"), a6("fd00::2"), proto::GRE, &g);
    let p = parse_ip(&ip, &cfg()).unwrap();
    assert_eq!(p.l4.ports(), Some((1111, 2222)));
    assert!(!p.outer.is_ipv6() || p.innermost().src == IpAddr::V4(a4("10.0.0.1")));

    // Unknown GRE payload stays opaque.
    let g = craft::gre(0x8847, None, &[0; 8]);
    let ip = craft::ipv4(&V4::new(a4("192.0.2.1"), a4("192.0.2.2"), proto::GRE), &g);
    let p = parse_ip(&ip, &cfg()).unwrap();
    assert_eq!(p.depth, 0);
    assert_eq!(p.l4, Transport::Other(proto::GRE));

    // GRE version 1 and the routing bit are rejected.
    let mut g = craft::gre(ethertype::IPV4, None, &inner4);
    g[1] = 1;
    let ip = craft::ipv4(&V4::new(a4("192.0.2.1"), a4("192.0.2.2"), proto::GRE), &g);
    assert_eq!(parse_ip(&ip, &cfg()), Err(DropReason::GreMalformed));

    // Too deep: IPIP in IPIP in IPIP.
    let mut pkt = inner4.clone();
    for _ in 0..3 {
        pkt = craft::ipv4(&V4::new(a4("192.0.2.1"), a4("192.0.2.2"), proto::IPIP), &pkt);
    }
    assert_eq!(parse_ip(&pkt, &cfg()), Err(DropReason::TunnelTooDeep));
    let deep = ParseConfig { max_tunnel_depth: 3, ..cfg() };
    assert_eq!(parse_ip(&pkt, &deep).unwrap().depth, 3);
    let off = ParseConfig { decap_tunnels: false, ..cfg() };
    assert_eq!(parse_ip(&pkt, &off).unwrap().l4, Transport::Other(proto::IPIP));

    // Inner length past the outer packet is rejected, not read.
    let mut short = craft::ipv4(&V4::new(a4("192.0.2.1"), a4("192.0.2.2"), proto::IPIP), &inner4);
    short.extend_from_slice(&[0; 16]); // link padding after the outer packet
    short[20 + 2..20 + 4].copy_from_slice(&((inner4.len() + 8) as u16).to_be_bytes());
    assert!(parse_ip(&short, &ParseConfig { verify_ipv4_checksum: false, ..cfg() }).is_err());
}

#[test]
fn every_prefix_is_rejected_or_parsed_without_panic() {
    let inner4 = udp4(1111, 2222, b"in");
    let g = craft::gre(ethertype::IPV4, Some(42), &inner4);
    let ip = craft::ipv4(&V4::new(a4("192.0.2.1"), a4("192.0.2.2"), proto::GRE), &g);
    let f = craft::eth(ethertype::IPV4, &[(ethertype::QINQ, 1), (ethertype::VLAN, 10)], &ip);
    let mut drops = DropCounters::new();
    for n in 0..f.len() {
        assert!(parse_counted(&f[..n], &cfg(), &mut drops).is_none(), "prefix {n} parsed");
    }
    assert_eq!(drops.total(), f.len() as u64);
    assert!(drops.get(DropReason::EthTruncated) > 0);
    assert!(drops.get(DropReason::VlanTruncated) > 0);
    assert!(drops.get(DropReason::Ipv4BadTotalLen) > 0);
    assert!(parse_counted(&f, &cfg(), &mut drops).is_some());
}

mod props {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn random_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = parse_ethernet(&data, &cfg());
            let _ = parse_ip(&data, &cfg());
        }

        #[test]
        fn mutated_packets_never_panic(pos in 0usize..120, val in any::<u8>(), cut in 0usize..130) {
            let inner = craft::ipv6(a6("::1"), a6("::2"), proto::UDP, &craft::udp(1, 2, &[3; 20]));
            let g = craft::gre(ethertype::IPV6, Some(1), &inner);
            let mut ip = craft::ipv4(&V4::new(a4("1.1.1.1"), a4("2.2.2.2"), proto::GRE), &g);
            if pos < ip.len() { ip[pos] = val; }
            ip.truncate(cut);
            let lax = ParseConfig { verify_ipv4_checksum: false, ..cfg() };
            if let Ok(p) = parse_ip(&ip, &lax) {
                // Every view lies inside the buffer.
                let inner = p.innermost();
                prop_assert!(inner.offset + inner.bytes.len() <= ip.len());
                prop_assert!(inner.header_len <= inner.bytes.len());
            }
        }
    }
}

/// The views read what the parser reads, and their setters write fields the
/// parser then reads back.
#[test]
fn views_read_and_write_the_named_fields() {
    let mut f = craft::eth(ethertype::IPV4, &[], &udp4(1000, 53, b"hello"));
    let e = EthernetFrame::new_checked(&f[..]).unwrap();
    assert_eq!(e.ethertype(), ethertype::IPV4);
    let ip = Ipv4Packet::new_checked(e.payload()).unwrap();
    assert_eq!((ip.src_addr(), ip.dst_addr()), (a4("10.0.0.1"), a4("10.0.0.2")));
    assert_eq!((ip.header_len(), ip.protocol(), ip.ttl()), (20, proto::UDP, 64));
    assert!(ip.verify_checksum() && !ip.is_fragment());
    let u = UdpPacket::new_checked(ip.payload()).unwrap();
    assert_eq!((u.src_port(), u.dst_port(), u.len()), (1000, 53, 13));
    assert_eq!(u.payload(), b"hello");

    let mut ip = Ipv4Packet::new_unchecked(&mut f[ethernet::HEADER_LEN..]);
    let old = ip.rewrite_addr(true, a4("192.0.2.7"));
    assert_eq!(old, [10, 0, 0, 2]);
    assert!(ip.verify_checksum(), "incremental update keeps the header checksum");
    ip.set_ttl(9);
    ip.fill_checksum();
    let p = parse_ethernet(&f, &cfg()).unwrap();
    assert_eq!((p.outer.dst, p.outer.ttl), (IpAddr::V4(a4("192.0.2.7")), 9));

    let mut v6 = craft::ipv6(a6("2001:db8::1"), a6("2001:db8::2"), proto::TCP, &craft::tcp(7, 8, b"xy"));
    let ip6 = Ipv6Packet::new_checked(&v6[..]).unwrap();
    assert_eq!((ip6.src_addr(), ip6.next_header(), ip6.payload_len()), (a6("2001:db8::1"), proto::TCP, 22));
    let t = TcpPacket::new_checked(ip6.payload()).unwrap();
    assert_eq!((t.src_port(), t.dst_port(), t.flags(), t.payload()), (7, 8, 0x10, &b"xy"[..]));
    Ipv6Packet::new_unchecked(&mut v6[..]).set_hop_limit(3);
    assert_eq!(parse_ip(&v6, &cfg()).unwrap().outer.ttl, 3);
}

/// `new_checked` rejects with the reason the parser reports.
#[test]
fn views_check_lengths_and_versions() {
    let ip = udp4(1, 2, b"");
    assert_eq!(Ipv4Packet::new_checked(&ip[..19]).err(), Some(DropReason::Ipv4Truncated));
    let mut bad = ip.clone();
    bad[0] = 0x65;
    assert_eq!(Ipv4Packet::new_checked(&bad[..]).err(), Some(DropReason::BadIpVersion));
    bad[0] = 0x44;
    assert_eq!(Ipv4Packet::new_checked(&bad[..]).err(), Some(DropReason::Ipv4BadIhl));
    bad[0] = 0x46;
    assert_eq!(Ipv4Packet::new_checked(&bad[..22]).err(), Some(DropReason::Ipv4Truncated));
    let mut long = ip.clone();
    long[3] += 1;
    assert_eq!(Ipv4Packet::new_checked(&long[..]).err(), Some(DropReason::Ipv4BadTotalLen));
    let v6 = craft::ipv6(a6("::1"), a6("::2"), proto::UDP, &craft::udp(1, 2, b"abc"));
    assert_eq!(Ipv6Packet::new_checked(&v6[..v6.len() - 1]).err(), Some(DropReason::Ipv6Truncated));
    assert_eq!(Ipv6Packet::new_checked(&ip[..]).err(), Some(DropReason::Ipv6Truncated));
    assert_eq!(EthernetFrame::new_checked(&[0u8; 13][..]).err(), Some(DropReason::EthTruncated));
    assert_eq!(UdpPacket::new_checked(&[0u8; 7][..]).err(), Some(DropReason::L4Truncated));
    let mut t = craft::tcp(1, 2, b"");
    assert_eq!(TcpPacket::new_checked(&t[..19]).err(), Some(DropReason::L4Truncated));
    t[12] = 0x60;
    assert_eq!(TcpPacket::new_checked(&t[..]).err(), Some(DropReason::TcpBadDataOffset));
    let ext = craft::ext_header(proto::UDP, &[0; 10]);
    assert_eq!(Ipv6ExtHeader::new_checked(&ext[..]).unwrap().header_len(), 16);
    assert_eq!(Ipv6ExtHeader::new_checked(&ext[..15]).err(), Some(DropReason::Ipv6BadExtHeader));
    let fh = craft::frag_header(proto::UDP, 1448, true, 77);
    let fv = Ipv6ExtHeader::new_checked_fragment(&fh[..]).unwrap();
    assert_eq!((fv.frag_offset(), fv.more_frags(), fv.frag_ident()), (1448, true, 77));
    assert_eq!(
        Ipv6ExtHeader::new_checked_ah(&[proto::UDP, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0][..]).err(),
        Some(DropReason::Ipv6BadExtHeader)
    );
}
