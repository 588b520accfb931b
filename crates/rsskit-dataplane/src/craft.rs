//! Packet construction for tests, benchmarks and traffic generators:
//! IPv4 / IPv6 headers with options and extension headers, Ethernet framing
//! with VLAN tags, and fragmentation, written through the wire views;
//! checksums correct.

use crate::wire::ip::proto;
use crate::wire::{checksum, ethernet, ethertype, ipv4, ipv6, tcp, udp};
use crate::wire::{EthernetFrame, Ipv4Packet, Ipv6ExtHeader, Ipv6Packet, TcpPacket, UdpPacket, VlanHeader};
use core::net::{Ipv4Addr, Ipv6Addr};

/// An Ethernet II frame with optional VLAN tags `(tpid, tci)`, outermost first.
pub fn eth(ether_type: u16, vlans: &[(u16, u16)], payload: &[u8]) -> Vec<u8> {
    let tags = ethernet::VLAN_LEN * vlans.len();
    let mut f = vec![0u8; ethernet::HEADER_LEN + tags + payload.len()];
    let mut e = EthernetFrame::new_unchecked(&mut f[..]);
    e.set_dst([0x02, 0, 0, 0, 0, 0x02]);
    e.set_src([0x02, 0, 0, 0, 0, 0x01]);
    // Each tag's TPID sits in the EtherType field of the header before it.
    let mut at = ethernet::field::ETHERTYPE.start;
    for &(tpid, tci) in vlans {
        f[at..at + 2].copy_from_slice(&tpid.to_be_bytes());
        VlanHeader::new_unchecked(&mut f[at + 2..]).set_tci(tci);
        at += ethernet::VLAN_LEN;
    }
    f[at..at + 2].copy_from_slice(&ether_type.to_be_bytes());
    f[ethernet::HEADER_LEN + tags..].copy_from_slice(payload);
    f
}

/// IPv4 header fields for [`ipv4`].
#[derive(Debug, Clone)]
pub struct V4 {
    /// Source address.
    pub src: Ipv4Addr,
    /// Destination address.
    pub dst: Ipv4Addr,
    /// IP protocol number.
    pub proto: u8,
    /// Identification (the fragments of one datagram share it).
    pub id: u16,
    /// Time to live.
    pub ttl: u8,
    /// Don't-fragment flag.
    pub df: bool,
    /// More-fragments flag.
    pub mf: bool,
    /// Fragment offset in bytes (multiple of 8).
    pub frag_off: u16,
    /// Options, padded with EOL to a multiple of 4.
    pub options: Vec<u8>,
}

impl V4 {
    /// Defaults: TTL 64, id 1, no flags, no options.
    pub fn new(src: Ipv4Addr, dst: Ipv4Addr, proto: u8) -> Self {
        V4 { src, dst, proto, id: 1, ttl: 64, df: false, mf: false, frag_off: 0, options: Vec::new() }
    }
}

/// An IPv4 packet with a correct header checksum.
pub fn ipv4(h: &V4, payload: &[u8]) -> Vec<u8> {
    let mut opts = h.options.clone();
    while opts.len() & 3 != 0 {
        opts.push(0);
    }
    let hl = ipv4::HEADER_LEN + opts.len();
    let mut p = vec![0u8; hl + payload.len()];
    let mut v = Ipv4Packet::new_unchecked(&mut p[..]);
    v.set_version_and_header_len(hl);
    v.set_total_len((hl + payload.len()) as u16);
    v.set_ident(h.id);
    v.set_flags_frag(h.df, h.mf, h.frag_off);
    v.set_ttl(h.ttl);
    v.set_protocol(h.proto);
    v.set_src_addr(h.src);
    v.set_dst_addr(h.dst);
    p[ipv4::HEADER_LEN..hl].copy_from_slice(&opts);
    Ipv4Packet::new_unchecked(&mut p[..]).fill_checksum();
    p[hl..].copy_from_slice(payload);
    p
}

/// An IPv6 packet: fixed header with `next_header`, then `rest` (extension
/// headers and upper layer, already encoded).
pub fn ipv6(src: Ipv6Addr, dst: Ipv6Addr, next_header: u8, rest: &[u8]) -> Vec<u8> {
    let mut p = vec![0u8; ipv6::HEADER_LEN + rest.len()];
    let mut v = Ipv6Packet::new_unchecked(&mut p[..]);
    v.set_version();
    v.set_payload_len(rest.len() as u16);
    v.set_next_header(next_header);
    v.set_hop_limit(64);
    v.set_src_addr(src);
    v.set_dst_addr(dst);
    v.payload_mut().copy_from_slice(rest);
    p
}

/// A generic IPv6 extension header (hop-by-hop, routing, destination
/// options): `next`, length, then `body` padded to a multiple of 8 with PadN.
pub fn ext_header(next: u8, body: &[u8]) -> Vec<u8> {
    let mut h = vec![next, 0];
    h.extend_from_slice(body);
    let pad = (8 - h.len() % 8) % 8;
    match pad {
        0 => {}
        1 => h.push(0), // Pad1
        n => {
            h.push(1); // PadN
            h.push((n - 2) as u8);
            h.resize(h.len() + n - 2, 0);
        }
    }
    h[ipv6::ext_field::LENGTH] = (h.len() / 8 - 1) as u8;
    h
}

/// An IPv6 fragment header.
pub fn frag_header(next: u8, offset: u16, more: bool, id: u32) -> [u8; 8] {
    let mut h = [0u8; ipv6::FRAG_HEADER_LEN];
    let mut v = Ipv6ExtHeader::new_checked_fragment(&mut h[..]).expect("8 bytes");
    v.set_next_header(next);
    v.set_frag_offset_more(offset, more);
    v.set_frag_ident(id);
    h
}

/// A UDP header + payload (checksum left 0, which IPv4 allows; RSS and the
/// parser do not look at it).
pub fn udp(sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let mut u = vec![0u8; udp::HEADER_LEN + payload.len()];
    let mut v = UdpPacket::new_unchecked(&mut u[..]);
    v.set_src_port(sport);
    v.set_dst_port(dport);
    v.set_len((udp::HEADER_LEN + payload.len()) as u16);
    u[udp::HEADER_LEN..].copy_from_slice(payload);
    u
}

/// UDP with the checksum computed over the pseudo-header.
pub fn udp_checksummed(src: &[u8], dst: &[u8], sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let mut u = udp(sport, dport, payload);
    let mut c = checksum::l4_checksum(src, dst, proto::UDP, &u);
    // 0 on the wire means "no checksum" (RFC 768).
    if c == 0 {
        c = 0xffff;
    }
    UdpPacket::new_unchecked(&mut u[..]).set_checksum(c);
    u
}

/// A minimal TCP header (20 bytes, ACK) + payload.
pub fn tcp(sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let mut t = vec![0u8; tcp::HEADER_LEN + payload.len()];
    let mut v = TcpPacket::new_unchecked(&mut t[..]);
    v.set_src_port(sport);
    v.set_dst_port(dport);
    v.set_seq(1);
    v.set_header_len(tcp::HEADER_LEN);
    v.set_flags(0x10); // ACK
    v.set_window(0xffff);
    t[tcp::HEADER_LEN..].copy_from_slice(payload);
    t
}

/// Splits an IPv4 datagram's payload at `cuts` (byte offsets, multiples of
/// 8, increasing, inside the payload) into fragments with `h`'s header.
pub fn fragment_v4(h: &V4, payload: &[u8], cuts: &[usize]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut start = 0;
    let bounds: Vec<usize> = cuts.iter().copied().chain(core::iter::once(payload.len())).collect();
    for end in bounds {
        let mut fh = h.clone();
        fh.frag_off = start as u16;
        fh.mf = end != payload.len();
        out.push(ipv4(&fh, &payload[start..end]));
        start = end;
    }
    out
}

/// Splits an IPv6 datagram into fragments: `unfrag` is the extension headers
/// before the fragment header (encoded, their last next-header must be 44),
/// `first_nh` the next header after the fragment header, `payload` the
/// fragmentable part.
#[allow(clippy::too_many_arguments)]
pub fn fragment_v6(
    src: Ipv6Addr,
    dst: Ipv6Addr,
    unfrag_nh: u8,
    unfrag: &[u8],
    first_nh: u8,
    id: u32,
    payload: &[u8],
    cuts: &[usize],
) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut start = 0;
    let bounds: Vec<usize> = cuts.iter().copied().chain(core::iter::once(payload.len())).collect();
    for end in bounds {
        let mut rest = unfrag.to_vec();
        rest.extend_from_slice(&frag_header(first_nh, start as u16, end != payload.len(), id));
        rest.extend_from_slice(&payload[start..end]);
        let nh = if unfrag.is_empty() { proto::FRAGMENT } else { unfrag_nh };
        out.push(ipv6(src, dst, nh, &rest));
        start = end;
    }
    out
}

/// GRE header (RFC 2784/2890) with optional key.
pub fn gre(ether_type: u16, key: Option<u32>, payload: &[u8]) -> Vec<u8> {
    let mut g = Vec::new();
    let flags: u16 = if key.is_some() { 0x2000 } else { 0 };
    g.extend_from_slice(&flags.to_be_bytes());
    g.extend_from_slice(&ether_type.to_be_bytes());
    if let Some(k) = key {
        g.extend_from_slice(&k.to_be_bytes());
    }
    g.extend_from_slice(payload);
    g
}

/// Ethernet + IPv4 + UDP frame of exactly `frame_len` bytes (>= 42), the
/// benchmark's "64-byte UDP packet".
pub fn udp4_frame(src: Ipv4Addr, sport: u16, dst: Ipv4Addr, dport: u16, frame_len: usize) -> Vec<u8> {
    let payload = vec![0u8; frame_len.saturating_sub(42)];
    let ip = ipv4(&V4::new(src, dst, proto::UDP), &udp(sport, dport, &payload));
    eth(ethertype::IPV4, &[], &ip)
}
