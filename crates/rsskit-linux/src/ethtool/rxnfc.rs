//! Flow classification rules and RSS contexts through the ioctl
//! (`ETHTOOL_GRXCLSRLCNT`, `ETHTOOL_GRXCLSRLALL`, `ETHTOOL_GRXCLSRULE`;
//! `ETHTOOL_GRSSH` with an `rss_context`).
//!
//! A rule travels as `struct ethtool_rxnfc` (192 bytes). Its bytes come
//! from a driver and are decoded defensively by [`decode_rule`] (a fuzz
//! target): a length or flow type it does not know is an error naming it,
//! never a guess. Offsets are the header's on 64-bit Linux (`offsetof` on
//! x86_64 and aarch64 agree: `ring_cookie` is 8-aligned).

use super::{describe, Ethtool, EthtoolError, Reported, Rss};
use rsskit_core::flowrule::{FlowRule, Masked, RuleAction, RuleFlow, RuleMatch};
use serde::Serialize;
use std::io;

const ETHTOOL_GRXCLSRLCNT: u32 = 0x2e;
const ETHTOOL_GRXCLSRULE: u32 = 0x2f;
const ETHTOOL_GRXCLSRLALL: u32 = 0x30;
/// `ETHTOOL_SRXCLSRLDEL`.
pub const ETHTOOL_SRXCLSRLDEL: u32 = 0x31;
/// `ETHTOOL_SRXCLSRLINS`.
pub const ETHTOOL_SRXCLSRLINS: u32 = 0x32;

const FLOW_EXT: u32 = 0x8000_0000;
const FLOW_MAC_EXT: u32 = 0x4000_0000;
const FLOW_RSS: u32 = 0x2000_0000;
const RX_CLS_LOC_SPECIAL: u64 = 0x8000_0000;

/// `sizeof(struct ethtool_rxnfc)` without `rule_locs`.
pub const RXNFC_LEN: usize = 192;
const OFF_DATA: usize = 8;
const OFF_FS_FLOW: usize = 16;
const OFF_H_U: usize = 20;
const OFF_H_EXT: usize = 72;
const OFF_M_U: usize = 92;
const OFF_M_EXT: usize = 144;
const OFF_COOKIE: usize = 168;
const OFF_LOCATION: usize = 176;
const OFF_CONTEXT: usize = 184;
const OFF_LOCS: usize = 188;
/// The most rules rsskit reads from one device (NICs have up to a few thousand).
const MAX_RULES: u32 = 1 << 16;

/// Why a rule's bytes were not understood.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RuleDecodeError {
    /// Fewer bytes than `struct ethtool_rxnfc`.
    #[error("rule answer of {0} bytes, shorter than struct ethtool_rxnfc ({RXNFC_LEN})")]
    Short(usize),
    /// A flow type rules cannot have, or one rsskit does not know.
    #[error("rule at location {location}: flow type {code:#x} is not one rsskit knows")]
    FlowType {
        /// The rule's location.
        location: u32,
        /// The flow type, flags removed.
        code: u32,
    },
    /// Flag bits rsskit does not know.
    #[error("rule at location {location}: unknown flow type flags {flags:#x}")]
    Flags {
        /// The rule's location.
        location: u32,
        /// The unknown bits.
        flags: u32,
    },
}

/// One entry of a device's rule table: the rule, or why its bytes were not understood.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleEntry {
    /// The location the driver listed.
    pub location: u32,
    /// The decoded rule, or why not (such a rule makes a prediction "unknown", never skipped).
    pub rule: Result<FlowRule, RuleDecodeError>,
}

/// A device's classification rules (`ethtool -n IF`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RuleTable {
    /// The size of the rule table (0 when the driver does not say).
    pub size: u32,
    /// Whether the driver accepts special locations (`RX_CLS_LOC_ANY`, ...) on insert.
    pub special_locations: bool,
    /// The rules, by ascending location.
    pub entries: Vec<RuleEntry>,
}

/// An RSS context's state as `ethtool -x IF context N` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ContextRss {
    /// The context id.
    pub context: u32,
    /// Its key, table, hash function and input transform.
    pub rss: Rss,
}

fn u16be(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}
fn u32be(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}
fn u32ne(b: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}
fn u64ne(b: &[u8], at: usize) -> u64 {
    let mut x = [0u8; 8];
    x.copy_from_slice(&b[at..at + 8]);
    u64::from_ne_bytes(x)
}
fn mac(b: &[u8], at: usize) -> [u8; 6] {
    let mut m = [0u8; 6];
    m.copy_from_slice(&b[at..at + 6]);
    m
}
fn addr6(b: &[u8], at: usize) -> u128 {
    let mut a = [0u8; 16];
    a.copy_from_slice(&b[at..at + 16]);
    u128::from_be_bytes(a)
}

/// One side (value or mask) of a rule's fields, read from `h_u`/`h_ext` or `m_u`/`m_ext`.
#[derive(Default, Clone, Copy)]
struct Side {
    src: u128,
    dst: u128,
    src_port: u16,
    dst_port: u16,
    tos: u8,
    l4_proto: u8,
    l4_bytes: u32,
    spi: u32,
    ethertype: u16,
    src_mac: [u8; 6],
    dst_mac: [u8; 6],
    vlan_tci: u16,
    vlan_etype: u16,
    user_data: u64,
}

fn read_side(b: &[u8], u: usize, ext: usize, flow: RuleFlow, flags: u32) -> Side {
    let mut s = Side::default();
    match flow {
        RuleFlow::Tcp4 | RuleFlow::Udp4 | RuleFlow::Sctp4 => {
            s.src = u128::from(u32be(b, u));
            s.dst = u128::from(u32be(b, u + 4));
            s.src_port = u16be(b, u + 8);
            s.dst_port = u16be(b, u + 10);
            s.tos = b[u + 12];
        }
        RuleFlow::Ah4 | RuleFlow::Esp4 => {
            s.src = u128::from(u32be(b, u));
            s.dst = u128::from(u32be(b, u + 4));
            s.spi = u32be(b, u + 8);
            s.tos = b[u + 12];
        }
        RuleFlow::Ip4 => {
            s.src = u128::from(u32be(b, u));
            s.dst = u128::from(u32be(b, u + 4));
            s.l4_bytes = u32be(b, u + 8);
            s.tos = b[u + 12];
            // u + 13 is `ip_ver` (always ETH_RX_NFC_IP4: nothing to compare).
            s.l4_proto = b[u + 14];
        }
        RuleFlow::Tcp6 | RuleFlow::Udp6 | RuleFlow::Sctp6 => {
            s.src = addr6(b, u);
            s.dst = addr6(b, u + 16);
            s.src_port = u16be(b, u + 32);
            s.dst_port = u16be(b, u + 34);
            s.tos = b[u + 36];
        }
        RuleFlow::Ah6 | RuleFlow::Esp6 => {
            s.src = addr6(b, u);
            s.dst = addr6(b, u + 16);
            s.spi = u32be(b, u + 32);
            s.tos = b[u + 36];
        }
        RuleFlow::Ip6 => {
            s.src = addr6(b, u);
            s.dst = addr6(b, u + 16);
            s.l4_bytes = u32be(b, u + 32);
            s.tos = b[u + 36];
            s.l4_proto = b[u + 37];
        }
        RuleFlow::Ether => {
            s.dst_mac = mac(b, u);
            s.src_mac = mac(b, u + 6);
            s.ethertype = u16be(b, u + 12);
        }
    }
    if flags & FLOW_MAC_EXT != 0 {
        s.dst_mac = mac(b, ext + 2);
    }
    if flags & FLOW_EXT != 0 {
        s.vlan_etype = u16be(b, ext + 8);
        s.vlan_tci = u16be(b, ext + 10);
        s.user_data = (u64::from(u32be(b, ext + 12)) << 32) | u64::from(u32be(b, ext + 16));
    }
    s
}

/// Decodes the kernel's answer to `ETHTOOL_GRXCLSRULE` (an `ethtool_rxnfc`).
pub fn decode_rule(b: &[u8]) -> Result<FlowRule, RuleDecodeError> {
    if b.len() < RXNFC_LEN {
        return Err(RuleDecodeError::Short(b.len()));
    }
    let location = u32ne(b, OFF_LOCATION);
    let raw = u32ne(b, OFF_FS_FLOW);
    let flags = raw & (FLOW_EXT | FLOW_MAC_EXT | FLOW_RSS);
    let code = raw & !(FLOW_EXT | FLOW_MAC_EXT | FLOW_RSS);
    if code & 0xff00_0000 != 0 {
        return Err(RuleDecodeError::Flags { location, flags: code & 0xff00_0000 });
    }
    let flow = RuleFlow::from_code(code).ok_or(RuleDecodeError::FlowType { location, code })?;
    let h = read_side(b, OFF_H_U, OFF_H_EXT, flow, flags);
    let m = read_side(b, OFF_M_U, OFF_M_EXT, flow, flags);
    let matcher = RuleMatch {
        flow,
        src: Masked { value: h.src, mask: m.src },
        dst: Masked { value: h.dst, mask: m.dst },
        src_port: Masked { value: h.src_port, mask: m.src_port },
        dst_port: Masked { value: h.dst_port, mask: m.dst_port },
        tos: Masked { value: h.tos, mask: m.tos },
        l4_proto: Masked { value: h.l4_proto, mask: m.l4_proto },
        l4_bytes: Masked { value: h.l4_bytes, mask: m.l4_bytes },
        spi: Masked { value: h.spi, mask: m.spi },
        ethertype: Masked { value: h.ethertype, mask: m.ethertype },
        src_mac: Masked { value: h.src_mac, mask: m.src_mac },
        dst_mac: Masked { value: h.dst_mac, mask: m.dst_mac },
        vlan_tci: Masked { value: h.vlan_tci, mask: m.vlan_tci },
        vlan_etype: Masked { value: h.vlan_etype, mask: m.vlan_etype },
        user_data: Masked { value: h.user_data, mask: m.user_data },
    }
    .normalized();
    let action = RuleAction::from_cookie(u64ne(b, OFF_COOKIE), flags & FLOW_RSS != 0, u32ne(b, OFF_CONTEXT));
    Ok(FlowRule { location, matcher, action })
}

fn put16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_be_bytes());
}
fn put32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_be_bytes());
}
fn put_addr(b: &mut [u8], at: usize, v: u128, v6: bool) {
    if v6 {
        b[at..at + 16].copy_from_slice(&v.to_be_bytes());
    } else {
        put32(b, at, v as u32);
    }
}

fn write_side(b: &mut [u8], u: usize, ext: usize, flow: RuleFlow, s: &Side) {
    let v6 = matches!(
        flow,
        RuleFlow::Tcp6 | RuleFlow::Udp6 | RuleFlow::Sctp6 | RuleFlow::Ah6 | RuleFlow::Esp6 | RuleFlow::Ip6
    );
    let (a, tail) = if v6 { (16, 32) } else { (4, 8) };
    match flow {
        RuleFlow::Ether => {
            b[u..u + 6].copy_from_slice(&s.dst_mac);
            b[u + 6..u + 12].copy_from_slice(&s.src_mac);
            put16(b, u + 12, s.ethertype);
        }
        _ => {
            put_addr(b, u, s.src, v6);
            put_addr(b, u + a, s.dst, v6);
            match flow {
                RuleFlow::Ah4 | RuleFlow::Esp4 | RuleFlow::Ah6 | RuleFlow::Esp6 => put32(b, u + tail, s.spi),
                RuleFlow::Ip4 | RuleFlow::Ip6 => put32(b, u + tail, s.l4_bytes),
                _ => {
                    put16(b, u + tail, s.src_port);
                    put16(b, u + tail + 2, s.dst_port);
                }
            }
            b[u + tail + 4] = s.tos;
            match flow {
                RuleFlow::Ip4 => {
                    b[u + 13] = 1; // ip_ver = ETH_RX_NFC_IP4
                    b[u + 14] = s.l4_proto;
                }
                RuleFlow::Ip6 => b[u + 37] = s.l4_proto,
                _ => {}
            }
        }
    }
    if flow != RuleFlow::Ether {
        b[ext + 2..ext + 8].copy_from_slice(&s.dst_mac);
    }
    put16(b, ext + 8, s.vlan_etype);
    put16(b, ext + 10, s.vlan_tci);
    put32(b, ext + 12, (s.user_data >> 32) as u32);
    put32(b, ext + 16, s.user_data as u32);
}

/// `rule` as an `ethtool_rxnfc` for command `cmd` (`ETHTOOL_SRXCLSRLINS` to insert it).
/// `FLOW_EXT` and `FLOW_MAC_EXT` are set when the rule compares those fields.
pub fn encode_rule(cmd: u32, rule: &FlowRule) -> Vec<u8> {
    let m = &rule.matcher;
    let h = Side {
        src: m.src.value,
        dst: m.dst.value,
        src_port: m.src_port.value,
        dst_port: m.dst_port.value,
        tos: m.tos.value,
        l4_proto: m.l4_proto.value,
        l4_bytes: m.l4_bytes.value,
        spi: m.spi.value,
        ethertype: m.ethertype.value,
        src_mac: m.src_mac.value,
        dst_mac: m.dst_mac.value,
        vlan_tci: m.vlan_tci.value,
        vlan_etype: m.vlan_etype.value,
        user_data: m.user_data.value,
    };
    let k = Side {
        src: m.src.mask,
        dst: m.dst.mask,
        src_port: m.src_port.mask,
        dst_port: m.dst_port.mask,
        tos: m.tos.mask,
        l4_proto: m.l4_proto.mask,
        l4_bytes: m.l4_bytes.mask,
        spi: m.spi.mask,
        ethertype: m.ethertype.mask,
        src_mac: m.src_mac.mask,
        dst_mac: m.dst_mac.mask,
        vlan_tci: m.vlan_tci.mask,
        vlan_etype: m.vlan_etype.mask,
        user_data: m.user_data.mask,
    };
    let mut b = vec![0u8; RXNFC_LEN];
    write_side(&mut b, OFF_H_U, OFF_H_EXT, m.flow, &h);
    write_side(&mut b, OFF_M_U, OFF_M_EXT, m.flow, &k);
    let (cookie, rss, context) = rule.action.to_cookie();
    let mut flags = 0;
    if m.vlan_tci.is_set() || m.vlan_etype.is_set() || m.user_data.is_set() {
        flags |= FLOW_EXT;
    }
    if m.flow != RuleFlow::Ether && m.dst_mac.is_set() {
        flags |= FLOW_MAC_EXT;
    }
    if rss {
        flags |= FLOW_RSS;
    }
    b[0..4].copy_from_slice(&cmd.to_ne_bytes());
    b[OFF_FS_FLOW..OFF_FS_FLOW + 4].copy_from_slice(&(m.flow.code() | flags).to_ne_bytes());
    b[OFF_COOKIE..OFF_COOKIE + 8].copy_from_slice(&cookie.to_ne_bytes());
    b[OFF_LOCATION..OFF_LOCATION + 4].copy_from_slice(&rule.location.to_ne_bytes());
    b[OFF_CONTEXT..OFF_CONTEXT + 4].copy_from_slice(&context.to_ne_bytes());
    b
}

/// An 8-aligned ioctl buffer of at least `len` bytes (the struct holds a u64).
fn buffer(len: usize) -> Vec<u64> {
    vec![0u64; len.div_ceil(8)]
}

fn bytes_mut(buf: &mut [u64]) -> &mut [u8] {
    // SAFETY: a u64 slice is valid as bytes of 8x its length (u8 has no
    // alignment or validity requirements), and the borrow is exclusive.
    unsafe { std::slice::from_raw_parts_mut(buf.as_mut_ptr().cast::<u8>(), buf.len() * 8) }
}

impl Ethtool {
    fn rxnfc(&self, buf: &mut [u64]) -> io::Result<()> {
        // SAFETY: every caller sizes `buf` for the whole answer of its
        // command: `struct ethtool_rxnfc`, plus `rule_cnt` locations for
        // ETHTOOL_GRXCLSRLALL, the count it wrote into the request (the
        // kernel refuses with EMSGSIZE rather than write more).
        unsafe { self.ioctl_raw(buf.as_mut_ptr().cast()) }
    }

    fn refused<T>(&self, cmd: &str, e: io::Error) -> Result<Reported<T>, EthtoolError> {
        if self.nodev(&e) {
            return Err(EthtoolError::NoSuchInterface(self.iface.clone()));
        }
        Ok(Reported::Unsupported { reason: describe(cmd, &e) })
    }

    /// The device's classification rules, by ascending location. A rule
    /// whose bytes are not understood is listed with the reason.
    pub fn rules(&self) -> Result<Reported<RuleTable>, EthtoolError> {
        let mut head = buffer(RXNFC_LEN);
        bytes_mut(&mut head)[0..4].copy_from_slice(&ETHTOOL_GRXCLSRLCNT.to_ne_bytes());
        if let Err(e) = self.rxnfc(&mut head) {
            return self.refused("ETHTOOL_GRXCLSRLCNT", e);
        }
        let hb = bytes_mut(&mut head);
        let data = u64ne(hb, OFF_DATA);
        let count = u32ne(hb, OFF_CONTEXT);
        let mut table = RuleTable {
            size: (data & !RX_CLS_LOC_SPECIAL) as u32,
            special_locations: data & RX_CLS_LOC_SPECIAL != 0,
            entries: Vec::new(),
        };
        if count == 0 {
            return Ok(Reported::Supported(table));
        }
        if count > MAX_RULES {
            return Ok(Reported::Unsupported {
                reason: format!("ETHTOOL_GRXCLSRLCNT: {count} rules, more than rsskit reads ({MAX_RULES})"),
            });
        }
        let mut all = buffer(OFF_LOCS + 4 * count as usize);
        {
            let b = bytes_mut(&mut all);
            b[0..4].copy_from_slice(&ETHTOOL_GRXCLSRLALL.to_ne_bytes());
            b[OFF_CONTEXT..OFF_CONTEXT + 4].copy_from_slice(&count.to_ne_bytes());
        }
        if let Err(e) = self.rxnfc(&mut all) {
            return self.refused("ETHTOOL_GRXCLSRLALL", e);
        }
        let b = bytes_mut(&mut all);
        // The driver may report fewer than it counted (a rule removed in between), never more.
        let got = u32ne(b, OFF_CONTEXT).min(count) as usize;
        let mut locs: Vec<u32> = (0..got).map(|i| u32ne(b, OFF_LOCS + 4 * i)).collect();
        locs.sort_unstable();
        locs.dedup();
        for location in locs {
            let mut one = buffer(RXNFC_LEN);
            {
                let ob = bytes_mut(&mut one);
                ob[0..4].copy_from_slice(&ETHTOOL_GRXCLSRULE.to_ne_bytes());
                ob[OFF_LOCATION..OFF_LOCATION + 4].copy_from_slice(&location.to_ne_bytes());
            }
            match self.rxnfc(&mut one) {
                Ok(()) => {
                    let rule = decode_rule(bytes_mut(&mut one));
                    table.entries.push(RuleEntry { location, rule });
                }
                // Deleted between the listing and this read.
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
                Err(e) => return self.refused("ETHTOOL_GRXCLSRULE", e),
            }
        }
        Ok(Reported::Supported(table))
    }

    /// RSS context `context`'s key and table (`ETHTOOL_GRSSH` with `rss_context`).
    pub fn context_rss(&self, context: u32) -> Result<Reported<ContextRss>, EthtoolError> {
        match self.grssh_context(context) {
            Ok(rss) => Ok(Reported::Supported(ContextRss { context, rss })),
            Err(e) => self.refused("ETHTOOL_GRSSH", e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<FlowRule> {
        let mut quic = RuleMatch::any(RuleFlow::Udp4);
        quic.dst_port = Masked { value: 443, mask: 0xffff };
        quic.dst = Masked { value: 0x0a00_0002, mask: 0xffff_ffff };
        let mut v6 = RuleMatch::any(RuleFlow::Tcp6);
        v6.src = Masked { value: 0xfd00 << 112, mask: 0xffff << 112 };
        v6.vlan_tci = Masked { value: 0x2000, mask: 0xe000 };
        let mut eth = RuleMatch::any(RuleFlow::Ether);
        eth.ethertype = Masked { value: 0x88f7, mask: 0xffff };
        eth.src_mac = Masked { value: [2, 0, 0, 0, 0, 1], mask: [0xff; 6] };
        let mut user = RuleMatch::any(RuleFlow::Ip4);
        user.l4_proto = Masked { value: 17, mask: 0xff };
        user.l4_bytes = Masked { value: 0x1234_0000, mask: 0xffff_0000 };
        user.dst_mac = Masked { value: [1, 2, 3, 4, 5, 6], mask: [0xff; 6] };
        let mut esp = RuleMatch::any(RuleFlow::Esp6);
        esp.spi = Masked { value: 7, mask: u32::MAX };
        esp.user_data = Masked { value: 0x1122_3344_5566_7788, mask: u64::MAX };
        vec![
            FlowRule { location: 3, matcher: quic, action: RuleAction::Context { context: 1, offset: 8 } },
            FlowRule { location: 4, matcher: v6, action: RuleAction::Queue(2) },
            FlowRule { location: 9, matcher: eth, action: RuleAction::Drop },
            FlowRule { location: 10, matcher: user, action: RuleAction::Vf { vf: 2, queue: 1 } },
            FlowRule { location: 11, matcher: esp, action: RuleAction::Wake },
        ]
    }

    #[test]
    fn rules_survive_encoding_and_decoding() {
        for r in sample() {
            let b = encode_rule(ETHTOOL_GRXCLSRULE, &r);
            assert_eq!(b.len(), RXNFC_LEN);
            assert_eq!(decode_rule(&b), Ok(r), "{r:?}");
        }
    }

    // Bytes laid out by hand from ethtool.h (`ethtool -N eth0 flow-type udp4
    // dst-port 443 context 1 action 8`), not by encode_rule.
    #[test]
    fn a_hand_laid_rule_decodes() {
        let mut b = vec![0u8; RXNFC_LEN];
        b[0..4].copy_from_slice(&ETHTOOL_GRXCLSRULE.to_ne_bytes());
        b[16..20].copy_from_slice(&(0x02u32 | 0x2000_0000).to_ne_bytes()); // UDP_V4_FLOW | FLOW_RSS
        b[20 + 10..20 + 12].copy_from_slice(&443u16.to_be_bytes()); // h_u.pdst
        b[92 + 10..92 + 12].copy_from_slice(&[0xff, 0xff]); // m_u.pdst
        b[20 + 8..20 + 10].copy_from_slice(&77u16.to_be_bytes()); // h_u.psrc under a zero mask: not compared
        b[168..176].copy_from_slice(&8u64.to_ne_bytes()); // ring_cookie
        b[176..180].copy_from_slice(&5u32.to_ne_bytes()); // location
        b[184..188].copy_from_slice(&1u32.to_ne_bytes()); // rss_context
        let r = decode_rule(&b).unwrap();
        assert_eq!(r.location, 5);
        assert_eq!(r.matcher.flow, RuleFlow::Udp4);
        assert_eq!(r.matcher.dst_port, Masked { value: 443, mask: 0xffff });
        assert!(!r.matcher.src.is_set() && !r.matcher.tos.is_set());
        assert_eq!(r.matcher.src_port, Masked { value: 0, mask: 0 }, "uncompared bits are cleared");
        assert_eq!(r.action, RuleAction::Context { context: 1, offset: 8 });
    }

    #[test]
    fn odd_bytes_are_refused_by_name() {
        assert_eq!(decode_rule(&[0; 100]), Err(RuleDecodeError::Short(100)));
        let mut b = vec![0u8; RXNFC_LEN];
        b[16..20].copy_from_slice(&0x04u32.to_ne_bytes()); // AH_ESP_V4_FLOW: hash only
        b[176..180].copy_from_slice(&2u32.to_ne_bytes());
        assert_eq!(decode_rule(&b), Err(RuleDecodeError::FlowType { location: 2, code: 4 }));
        b[16..20].copy_from_slice(&0x0100_0001u32.to_ne_bytes());
        assert!(matches!(decode_rule(&b), Err(RuleDecodeError::Flags { .. })));
    }
}
