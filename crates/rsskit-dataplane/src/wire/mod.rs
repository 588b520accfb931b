//! Checked, zero-copy packet parsing: Ethernet II, 802.1Q / 802.1ad VLAN
//! tags, IPv4 (options, header checksum), IPv6 (hop-by-hop, routing,
//! destination options, fragment, AH extension headers), UDP, TCP, ICMP,
//! ICMPv6, and IPIP / IPv6-in-IPv4 (and 4in6, 6in6) / GRE decapsulation.
//!
//! Each header has one typed, checked view (smoltcp-style: named field
//! ranges, `new_checked`, accessors and setters): [`ethernet`], [`ipv4`],
//! [`ipv6`] (and its extension headers), [`udp`], [`tcp`]; [`checksum`] holds
//! the checksum arithmetic. Parsing, `craft`, reassembly, the firewall's
//! rewrite and `hash::PacketHasher::nic_frame` all go through them, so each
//! header offset is written once. The layer sequencing (VLAN stack, IPv6
//! extension chain, tunnels, GRE) is here and in [`ip`]; ICMP type and code
//! are read with etherparse, whose per-type length checks we keep.
//!
//! Nothing here allocates or panics; every reject is a [`DropReason`].

pub mod checksum;
pub mod drop;
pub mod ethernet;
mod field;
pub mod ip;
pub mod ipv4;
pub mod ipv6;
pub mod l4;
pub mod tcp;
pub mod udp;

pub use checksum::internet_checksum;
pub use drop::{DropCounters, DropReason};
pub use ethernet::{EthernetFrame, VlanHeader};
pub use field::Field;
pub use ip::{ipv4_l4_checksum_ok, FragInfo, IpLayer};
pub use ipv4::Ipv4Packet;
pub use ipv6::{Ipv6ExtHeader, Ipv6Packet};
pub use l4::Transport;
pub use tcp::TcpPacket;
pub use udp::UdpPacket;

/// Ethertypes used here.
pub mod ethertype {
    /// IPv4 EtherType.
    pub const IPV4: u16 = 0x0800;
    /// IPv6 EtherType.
    pub const IPV6: u16 = 0x86dd;
    /// 802.1Q customer VLAN tag.
    pub const VLAN: u16 = 0x8100;
    /// 802.1ad service VLAN tag (QinQ outer).
    pub const QINQ: u16 = 0x88a8;
    /// Pre-standard QinQ outer tag.
    pub const QINQ_OLD: u16 = 0x9100;
    /// Transparent Ethernet bridging (Ethernet inside GRE).
    pub const TEB: u16 = 0x6558;
}

/// Parser settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParseConfig {
    /// Verify IPv4 header checksums (on by default; turn off for captures
    /// taken before checksum offload filled them in).
    pub verify_ipv4_checksum: bool,
    /// Decapsulate IPIP, IPv6-in-IP and GRE (IPv4, IPv6, Ethernet payloads).
    pub decap_tunnels: bool,
    /// Most tunnel headers to strip; one more is [`DropReason::TunnelTooDeep`].
    pub max_tunnel_depth: u8,
    /// Most IPv6 extension headers in one chain.
    pub max_ipv6_ext_headers: usize,
}

impl Default for ParseConfig {
    fn default() -> Self {
        ParseConfig {
            verify_ipv4_checksum: true,
            decap_tunnels: true,
            max_tunnel_depth: 2,
            max_ipv6_ext_headers: 8,
        }
    }
}

/// One VLAN tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct VlanTag {
    /// Tag protocol identifier: 0x8100, 0x88a8 or 0x9100.
    pub tpid: u16,
    /// Priority (3 bits), drop eligible (1), VLAN id (12).
    pub tci: u16,
}

impl VlanTag {
    /// The 12-bit VLAN id.
    pub fn id(&self) -> u16 {
        self.tci & 0x0fff
    }
}

/// Encapsulation that was stripped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TunnelKind {
    /// IPv4 in IP (protocol 4).
    Ipip,
    /// IPv6 in IP (protocol 41: 6in4, or 6in6).
    Ip6in,
    /// GRE (protocol 47) carrying IPv4, IPv6 or Ethernet; `key` if the K bit was set.
    Gre {
        /// The payload's EtherType.
        ether_type: u16,
        /// The GRE key.
        key: Option<u32>,
    },
}

/// A parsed packet. `outer` is what a NIC sees (and hashes); `inner` is the
/// innermost IP packet after stripping tunnels, `l4` its transport header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packet<'a> {
    /// The buffer the packet was parsed from.
    pub data: &'a [u8],
    /// VLAN tags, outermost first; `vlans[..vlan_count]` are valid.
    pub vlans: [VlanTag; 2],
    /// How many of `vlans` are valid.
    pub vlan_count: u8,
    /// Outermost IP layer.
    pub outer: IpLayer<'a>,
    /// Innermost IP layer if at least one tunnel was stripped.
    pub inner: Option<IpLayer<'a>>,
    /// Innermost tunnel stripped.
    pub tunnel: Option<TunnelKind>,
    /// Number of tunnel headers stripped.
    pub depth: u8,
    /// Transport header of the innermost IP layer.
    pub l4: Transport<'a>,
}

impl<'a> Packet<'a> {
    /// The innermost IP layer (`outer` if there is no tunnel).
    pub fn innermost(&self) -> &IpLayer<'a> {
        self.inner.as_ref().unwrap_or(&self.outer)
    }

    /// VLAN tags present.
    pub fn vlans(&self) -> &[VlanTag] {
        &self.vlans[..usize::from(self.vlan_count).min(2)]
    }
}

/// Parses an Ethernet II frame (without FCS).
#[inline]
pub fn parse_ethernet<'a>(frame: &'a [u8], cfg: &ParseConfig) -> Result<Packet<'a>, DropReason> {
    let (vlans, vlan_count, et, off) = parse_link(frame, 0)?;
    let outer = parse_l3(frame, off, et, cfg)?;
    finish(frame, vlans, vlan_count, outer, cfg)
}

/// Parses a raw IP packet (IPv4 or IPv6 by version nibble), e.g. a
/// reassembled datagram or a `LINKTYPE_RAW` capture record.
#[inline]
pub fn parse_ip<'a>(data: &'a [u8], cfg: &ParseConfig) -> Result<Packet<'a>, DropReason> {
    let outer = ip::parse_ip_any(data, 0, cfg)?;
    finish(data, [VlanTag::default(); 2], 0, outer, cfg)
}

/// Ethernet + VLAN tags at `data[off..]`: returns the tags, the ethertype of
/// the payload and its offset.
#[inline]
fn parse_link(data: &[u8], off: usize) -> Result<([VlanTag; 2], u8, u16, usize), DropReason> {
    let mut et = EthernetFrame::new_checked(&data[off..])?.ethertype();
    let mut pos = off + ethernet::HEADER_LEN;
    let mut vlans = [VlanTag::default(); 2];
    let mut n = 0u8;
    while matches!(et, ethertype::VLAN | ethertype::QINQ | ethertype::QINQ_OLD) {
        if n == 2 {
            return Err(DropReason::TooManyVlans);
        }
        let v = VlanHeader::new_checked(&data[pos..])?;
        vlans[usize::from(n)] = VlanTag { tpid: et, tci: v.tci() };
        n += 1;
        et = v.ethertype();
        pos += ethernet::VLAN_LEN;
    }
    Ok((vlans, n, et, pos))
}

#[inline]
fn parse_l3<'a>(data: &'a [u8], off: usize, et: u16, cfg: &ParseConfig) -> Result<IpLayer<'a>, DropReason> {
    let rest = &data[off..];
    match et {
        ethertype::IPV4 => ip::parse_ipv4(rest, off, cfg),
        ethertype::IPV6 => ip::parse_ipv6(rest, off, cfg),
        _ => Err(DropReason::NotIp),
    }
}

/// Strips tunnels starting at `outer` and parses the innermost transport.
#[inline(always)]
fn finish<'a>(
    data: &'a [u8],
    vlans: [VlanTag; 2],
    vlan_count: u8,
    outer: IpLayer<'a>,
    cfg: &ParseConfig,
) -> Result<Packet<'a>, DropReason> {
    let mut inner: Option<IpLayer<'a>> = None;
    let mut tunnel = None;
    let mut depth = 0u8;
    loop {
        let cur = inner.as_ref().unwrap_or(&outer);
        if !cfg.decap_tunnels || cur.is_fragment() {
            break;
        }
        let start = cur.offset + cur.header_len;
        let (kind, next) = match cur.proto {
            ip::proto::IPIP => (TunnelKind::Ipip, Next::Ip(ethertype::IPV4, start)),
            ip::proto::IPV6 => (TunnelKind::Ip6in, Next::Ip(ethertype::IPV6, start)),
            ip::proto::GRE => {
                let end = cur.offset + cur.bytes.len();
                let (et, key, hl) = parse_gre(&data[start..end])?;
                let kind = TunnelKind::Gre { ether_type: et, key };
                match et {
                    ethertype::IPV4 | ethertype::IPV6 => (kind, Next::Ip(et, start + hl)),
                    ethertype::TEB => (kind, Next::Eth(start + hl)),
                    // Other GRE payloads (MPLS, ERSPAN, ...) stay opaque.
                    _ => break,
                }
            }
            _ => break,
        };
        if depth == cfg.max_tunnel_depth {
            return Err(DropReason::TunnelTooDeep);
        }
        // The inner packet must stay within the outer IP packet's bytes.
        let end = cur.offset + cur.bytes.len();
        let bounded = &data[..end];
        let layer = match next {
            Next::Ip(et, at) => parse_l3(bounded, at, et, cfg)?,
            Next::Eth(at) => {
                let (_, _, et, at) = parse_link(bounded, at)?;
                parse_l3(bounded, at, et, cfg)?
            }
        };
        depth += 1;
        tunnel = Some(kind);
        inner = Some(layer);
    }
    let l4 = l4::parse_transport(inner.as_ref().unwrap_or(&outer))?;
    Ok(Packet { data, vlans, vlan_count, outer, inner, tunnel, depth, l4 })
}

enum Next {
    Ip(u16, usize),
    Eth(usize),
}

/// GRE header (RFC 2784 + RFC 2890 key and sequence): returns the protocol
/// type, the key, and the header length. etherparse has no GRE support.
fn parse_gre(p: &[u8]) -> Result<(u16, Option<u32>, usize), DropReason> {
    if p.len() < 4 {
        return Err(DropReason::GreMalformed);
    }
    let flags = u16::from_be_bytes([p[0], p[1]]);
    // Bits 1 (routing) and 4..12 reserved must be 0 (RFC 2784 2.3), version 0.
    if flags & 0x4ff8 != 0 || flags & 0x0007 != 0 {
        return Err(DropReason::GreMalformed);
    }
    let et = u16::from_be_bytes([p[2], p[3]]);
    let mut hl = 4;
    if flags & 0x8000 != 0 {
        hl += 4; // checksum + reserved1
    }
    let mut key = None;
    if flags & 0x2000 != 0 {
        if p.len() < hl + 4 {
            return Err(DropReason::GreMalformed);
        }
        key = Some(u32::from_be_bytes([p[hl], p[hl + 1], p[hl + 2], p[hl + 3]]));
        hl += 4;
    }
    if flags & 0x1000 != 0 {
        hl += 4; // sequence number
    }
    if p.len() < hl {
        return Err(DropReason::GreMalformed);
    }
    Ok((et, key, hl))
}

/// Parses and counts: `Some(packet)` or `None` with the reason counted.
pub fn parse_counted<'a>(frame: &'a [u8], cfg: &ParseConfig, drops: &mut DropCounters) -> Option<Packet<'a>> {
    match parse_ethernet(frame, cfg) {
        Ok(p) => Some(p),
        Err(r) => {
            drops.inc(r);
            None
        }
    }
}

#[cfg(test)]
mod tests;
