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

/// `ETH_RXFH_CONTEXT_ALLOC`: the `rss_context` of an `ETHTOOL_SRSSH` that
/// asks the kernel for a new context (it writes the new id back there).
pub const ETH_RXFH_CONTEXT_ALLOC: u32 = 0xffff_ffff;
/// `RX_CLS_LOC_ANY`: the location of an insert that lets the driver choose
/// (only where `ETHTOOL_GRXCLSRLCNT` says it takes special locations).
pub const RX_CLS_LOC_ANY: u32 = 0xffff_ffff;

/// What an `ETHTOOL_SRSSH` with an `rss_context` asks, as the kernel's
/// `ethtool_set_rxfh` reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ContextRequest {
    /// `rss_context = ETH_RXFH_CONTEXT_ALLOC`: a new context with this table and key.
    Create {
        /// Its table (queue numbers).
        indir: Vec<u32>,
        /// Its key (`None`: the driver's).
        key: Option<Vec<u8>>,
    },
    /// An existing context's new table (and key).
    Modify {
        /// The context.
        context: u32,
        /// Its new table.
        indir: Vec<u32>,
        /// Its new key (`None`: unchanged).
        key: Option<Vec<u8>>,
    },
    /// `indir_size = 0` on a context other than 0: delete it.
    Delete {
        /// The context.
        context: u32,
    },
}

/// The `ETHTOOL_SRSSH` request that creates (`context` =
/// [`ETH_RXFH_CONTEXT_ALLOC`]) or rewrites context `context` with this table
/// and key: the main table's request with the context id in its header.
///
/// `hfunc` and `input_xfrm` stay 0. Kernel 7.x `ethtool_set_rxfh`
/// (`net/ethtool/ioctl.c`): a new context starts with both at their
/// `NO_CHANGE` values (`ethtool_rxfh_ctx_alloc`) and any `input_xfrm` other
/// than `RXH_XFRM_NO_CHANGE` is stored, so 0 on create means "no input
/// transform" for the new context (it does not inherit the main table's);
/// `hfunc` 0 is `ETH_RSS_HASH_NO_CHANGE`. A driver without per-context keys
/// refuses a key on a context (`EOPNOTSUPP`), hence `None` from isolate.
pub fn context_set_request(context: u32, indir: &[u32], key: Option<&[u8]>) -> Vec<u32> {
    let mut buf = super::rssh_set_request(Some(indir), key);
    buf[1] = context;
    // input_xfrm 0: the contexts rsskit makes have no transform (see above).
    buf[4] &= !u32::from_ne_bytes([0, 0xff, 0, 0]);
    buf
}

/// The `ETHTOOL_SRSSH` request that deletes context `context`: its id with
/// `indir_size` and `key_size` 0 (the kernel's `rss_delete`; on context 0
/// the same request would reset the main table, so 0 is never sent).
/// Since 6.13 the kernel refuses it with `EBUSY` while a `FLOW_RSS` rule
/// names the context (`ethtool_check_rss_ctx_busy`, `net/ethtool/common.c`):
/// delete the rules first.
pub fn context_delete_request(context: u32) -> Vec<u32> {
    let mut buf = super::rssh_set_request(Some(&[]), None);
    buf[1] = context;
    buf[4] &= !u32::from_ne_bytes([0, 0xff, 0, 0]);
    buf
}

/// An `ETHTOOL_SRSSH` request on a context, as the kernel reads it: the
/// fixture driver's parser, and the check of the builders above. `n_indir`
/// and `n_key` are the device's sizes (the kernel refuses others).
pub fn parse_context_request(buf: &[u32], n_indir: usize, n_key: usize) -> Result<ContextRequest, String> {
    const HDR: usize = super::RXFH_HDR_WORDS;
    if buf.len() < HDR {
        return Err("ETHTOOL_SRSSH request shorter than its header".into());
    }
    let h = super::read_header(buf);
    if h.cmd != super::ETHTOOL_SRSSH {
        return Err(format!("command 0x{:x} is not ETHTOOL_SRSSH", h.cmd));
    }
    if h.rsvd8 != [0, 0] || h.rsvd32 != 0 {
        return Err("ETHTOOL_SRSSH: reserved fields set (EINVAL)".into());
    }
    if h.rss_context == 0 {
        return Err("ETHTOOL_SRSSH: context 0 is the main table, not a context".into());
    }
    let create = h.rss_context == ETH_RXFH_CONTEXT_ALLOC;
    if h.indir_size == 0 {
        if create || h.key_size != 0 {
            return Err("ETHTOOL_SRSSH: deleting needs an existing context and no key (EINVAL)".into());
        }
        return Ok(ContextRequest::Delete { context: h.rss_context });
    }
    if h.indir_size == super::ETH_RXFH_INDIR_NO_CHANGE || h.indir_size as usize != n_indir {
        return Err(format!(
            "ETHTOOL_SRSSH: table of {} entries, the device's has {n_indir} (EINVAL)",
            h.indir_size
        ));
    }
    if h.key_size != 0 && h.key_size as usize != n_key {
        return Err(format!("ETHTOOL_SRSSH: key of {} bytes, the device's has {n_key} (EINVAL)", h.key_size));
    }
    let n_key = h.key_size as usize;
    if buf.len() < HDR + n_indir + n_key.div_ceil(4) {
        return Err("ETHTOOL_SRSSH request shorter than its table and key".into());
    }
    let indir = buf[HDR..HDR + n_indir].to_vec();
    let key =
        (n_key > 0).then(|| buf[HDR + n_indir..].iter().flat_map(|w| w.to_ne_bytes()).take(n_key).collect());
    Ok(if create {
        ContextRequest::Create { indir, key }
    } else {
        ContextRequest::Modify { context: h.rss_context, indir, key }
    })
}

/// The `ETHTOOL_SRXCLSRLINS` request for `rule`: at its own location, or at
/// [`RX_CLS_LOC_ANY`] when `any_location` (the driver chooses and writes the
/// location back). A context target carries `FLOW_RSS` and `rss_context`.
pub fn rule_insert_request(rule: &FlowRule, any_location: bool) -> Vec<u8> {
    let mut b = encode_rule(ETHTOOL_SRXCLSRLINS, rule);
    if any_location {
        b[OFF_LOCATION..OFF_LOCATION + 4].copy_from_slice(&RX_CLS_LOC_ANY.to_ne_bytes());
    }
    b
}

/// The `ETHTOOL_SRXCLSRLDEL` request for the rule at `location`.
pub fn rule_delete_request(location: u32) -> Vec<u8> {
    let mut b = vec![0u8; RXNFC_LEN];
    b[0..4].copy_from_slice(&ETHTOOL_SRXCLSRLDEL.to_ne_bytes());
    b[OFF_LOCATION..OFF_LOCATION + 4].copy_from_slice(&location.to_ne_bytes());
    b
}

/// The location an `ETHTOOL_SRXCLSRLDEL` request names (the fixture driver's parser).
pub fn parse_rule_delete(b: &[u8]) -> Result<u32, String> {
    if b.len() < RXNFC_LEN || u32ne(b, 0) != ETHTOOL_SRXCLSRLDEL {
        return Err("not an ETHTOOL_SRXCLSRLDEL request".into());
    }
    Ok(u32ne(b, OFF_LOCATION))
}

/// The location an insert request asks for (`RX_CLS_LOC_ANY` included) and its rule.
pub fn parse_rule_insert(b: &[u8]) -> Result<(u32, FlowRule), String> {
    if b.len() < RXNFC_LEN || u32ne(b, 0) != ETHTOOL_SRXCLSRLINS {
        return Err("not an ETHTOOL_SRXCLSRLINS request".into());
    }
    let rule = decode_rule(b).map_err(|e| e.to_string())?;
    Ok((u32ne(b, OFF_LOCATION), rule))
}

impl Ethtool {
    fn srssh(&self, buf: &mut [u32]) -> Result<Reported<()>, EthtoolError> {
        match self.ioctl_slice(buf) {
            Ok(()) => Ok(Reported::Supported(())),
            Err(e) => self.refused("ETHTOOL_SRSSH", e),
        }
    }

    /// Creates an RSS context over `indir` (and `key`, `None`: the
    /// driver's); its id, as the kernel wrote it back.
    pub fn create_context(&self, indir: &[u32], key: Option<&[u8]>) -> Result<Reported<u32>, EthtoolError> {
        let mut buf = context_set_request(ETH_RXFH_CONTEXT_ALLOC, indir, key);
        Ok(match self.srssh(&mut buf)? {
            Reported::Supported(()) if buf[1] != ETH_RXFH_CONTEXT_ALLOC && buf[1] != 0 => {
                Reported::Supported(buf[1])
            }
            Reported::Supported(()) => {
                Reported::Unsupported { reason: "ETHTOOL_SRSSH: the driver created no context id".into() }
            }
            Reported::Unsupported { reason } => Reported::Unsupported { reason },
        })
    }

    /// Rewrites context `context`'s table (and key).
    pub fn set_context(
        &self,
        context: u32,
        indir: &[u32],
        key: Option<&[u8]>,
    ) -> Result<Reported<()>, EthtoolError> {
        self.srssh(&mut context_set_request(context, indir, key))
    }

    /// Deletes context `context` (never 0: that request resets the main table).
    pub fn delete_context(&self, context: u32) -> Result<Reported<()>, EthtoolError> {
        if context == 0 || context == ETH_RXFH_CONTEXT_ALLOC {
            return Ok(Reported::Unsupported {
                reason: format!("ETHTOOL_SRSSH: {context} is not a context to delete"),
            });
        }
        self.srssh(&mut context_delete_request(context))
    }

    /// Inserts `rule` (at `RX_CLS_LOC_ANY` when `any_location`); the
    /// location it went to, as the kernel wrote it back.
    pub fn insert_rule(&self, rule: &FlowRule, any_location: bool) -> Result<Reported<u32>, EthtoolError> {
        let req = rule_insert_request(rule, any_location);
        let mut buf = buffer(RXNFC_LEN);
        bytes_mut(&mut buf)[..RXNFC_LEN].copy_from_slice(&req);
        if let Err(e) = self.rxnfc(&mut buf) {
            return self.refused("ETHTOOL_SRXCLSRLINS", e);
        }
        Ok(Reported::Supported(u32ne(bytes_mut(&mut buf), OFF_LOCATION)))
    }

    /// Whether the driver has RSS contexts: `ETHTOOL_GRSSH` on context 1
    /// is refused with `EOPNOTSUPP` only by a driver without them (an
    /// absent context 1 is `ENOENT` or `EINVAL`).
    pub fn contexts_supported(&self) -> Result<Reported<()>, EthtoolError> {
        match self.grssh_context(1) {
            Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => {
                self.refused("ETHTOOL_GRSSH with an RSS context", e)
            }
            Err(e) if self.nodev(&e) => Err(EthtoolError::NoSuchInterface(self.iface.clone())),
            _ => Ok(Reported::Supported(())),
        }
    }

    /// Deletes the rule at `location`.
    pub fn delete_rule(&self, location: u32) -> Result<Reported<()>, EthtoolError> {
        let req = rule_delete_request(location);
        let mut buf = buffer(RXNFC_LEN);
        bytes_mut(&mut buf)[..RXNFC_LEN].copy_from_slice(&req);
        match self.rxnfc(&mut buf) {
            Ok(()) => Ok(Reported::Supported(())),
            Err(e) => self.refused("ETHTOOL_SRXCLSRLDEL", e),
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

    // Header words laid out by hand from ethtool.h's struct ethtool_rxfh
    // (cmd, rss_context, indir_size, key_size, hfunc/input_xfrm/rsvd8, rsvd32).
    #[test]
    fn context_requests_lay_out_as_the_header_says() {
        let c = context_set_request(ETH_RXFH_CONTEXT_ALLOC, &[8, 9, 8, 9], Some(&[1, 2, 3, 4, 5]));
        assert_eq!(&c[..6], &[0x47, 0xffff_ffff, 4, 5, 0, 0]);
        assert_eq!(&c[6..10], &[8, 9, 8, 9]);
        assert_eq!(c[10].to_ne_bytes(), [1, 2, 3, 4]);
        assert_eq!(c[11].to_ne_bytes(), [5, 0, 0, 0]);
        assert_eq!(
            parse_context_request(&c, 4, 5),
            Ok(ContextRequest::Create { indir: vec![8, 9, 8, 9], key: Some(vec![1, 2, 3, 4, 5]) })
        );
        let m = context_set_request(3, &[1, 2], None);
        assert_eq!(&m[..6], &[0x47, 3, 2, 0, 0, 0]);
        assert_eq!(
            parse_context_request(&m, 2, 40),
            Ok(ContextRequest::Modify { context: 3, indir: vec![1, 2], key: None })
        );
        let d = context_delete_request(3);
        assert_eq!(d, vec![0x47, 3, 0, 0, 0, 0]);
        assert_eq!(parse_context_request(&d, 2, 40), Ok(ContextRequest::Delete { context: 3 }));
        // What the kernel refuses: a table of another size, deleting "the new one", context 0.
        assert!(parse_context_request(&m, 4, 40).is_err());
        assert!(parse_context_request(&context_delete_request(ETH_RXFH_CONTEXT_ALLOC), 2, 40).is_err());
        assert!(parse_context_request(&context_delete_request(0), 2, 40).is_err());
    }

    // Offsets from ethtool.h's struct ethtool_rxnfc: cmd 0, flow_type 4 of
    // fs at 16, ring_cookie 168, location 176, rss_context 184.
    #[test]
    fn rule_insert_and_delete_requests() {
        let quic = parse_quic();
        let b = rule_insert_request(&quic, true);
        assert_eq!(u32ne(&b, 0), 0x32, "ETHTOOL_SRXCLSRLINS");
        assert_eq!(u32ne(&b, 16), 0x02 | 0x2000_0000, "UDP_V4_FLOW | FLOW_RSS");
        assert_eq!(&b[20 + 10..20 + 12], &443u16.to_be_bytes());
        assert_eq!(&b[92 + 10..92 + 12], &[0xff, 0xff]);
        assert_eq!(u64ne(&b, 168), 0, "offset 0 in the context");
        assert_eq!(u32ne(&b, 176), 0xffff_ffff, "RX_CLS_LOC_ANY");
        assert_eq!(u32ne(&b, 184), 2, "rss_context");
        let (loc, back) = parse_rule_insert(&b).unwrap();
        assert_eq!(loc, RX_CLS_LOC_ANY);
        assert_eq!(back.action, quic.action);
        assert_eq!(u32ne(&rule_insert_request(&quic, false), 176), 7);
        let d = rule_delete_request(7);
        assert_eq!(u32ne(&d, 0), 0x31);
        assert_eq!(u32ne(&d, 176), 7);
        assert!(d.iter().enumerate().all(|(i, &x)| x == 0 || i < 4 || (176..180).contains(&i)));
        assert_eq!(parse_rule_delete(&d), Ok(7));
        assert!(parse_rule_delete(&b).is_err());
    }

    fn parse_quic() -> FlowRule {
        let mut m = RuleMatch::any(RuleFlow::Udp4);
        m.dst_port = Masked { value: 443, mask: 0xffff };
        FlowRule { location: 7, matcher: m, action: RuleAction::Context { context: 2, offset: 0 } }
    }

    // Through the real ioctl: lo has no contexts and no rules, and every
    // write is refused with the command named (no panic, nothing written).
    #[test]
    fn loopback_refuses_contexts_and_rules() {
        let e = Ethtool::open("lo").unwrap();
        let said = |r: Option<&str>, cmd: &str| {
            let r = r.unwrap_or_else(|| panic!("{cmd}: lo answered"));
            assert!(r.contains(cmd), "{r}");
        };
        said(e.contexts_supported().unwrap().reason(), "ETHTOOL_GRSSH");
        said(e.create_context(&[0; 4], None).unwrap().reason(), "ETHTOOL_SRSSH");
        said(e.delete_context(1).unwrap().reason(), "ETHTOOL_SRSSH");
        said(e.delete_context(0).unwrap().reason(), "not a context");
        said(e.insert_rule(&parse_quic(), true).unwrap().reason(), "ETHTOOL_SRXCLSRLINS");
        said(e.delete_rule(7).unwrap().reason(), "ETHTOOL_SRXCLSRLDEL");
        assert!(matches!(
            Ethtool::open("nosuchif0").unwrap().delete_rule(1),
            Err(EthtoolError::NoSuchInterface(_))
        ));
    }
}
