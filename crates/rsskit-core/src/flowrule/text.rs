//! A rule as one line of text, close to `ethtool -N`'s words, so `info`
//! prints what an operator would type and fixture trees can state rules:
//!
//! `udp4 dst-ip 10.0.0.2 dst-port 443 context 1 loc 3`
//!
//! Fields: `src-ip`/`dst-ip` ADDR[/PREFIX], `src-port`/`dst-port`, `tos`,
//! `l4proto`, `l4data`, `spi`, `proto` (EtherType), `src-mac`/`dst-mac`,
//! `vlan`, `vlan-etype`, `user-def`, each N[/MASK] where a mask is given
//! (a set bit is compared: the kernel's sense, not `ethtool`'s `m`).
//! Actions: `queue Q`, `context C [offset O]`, `drop`, `wake`, `vf V queue Q`.
//! The location comes last: `loc L`. [`parse_rule`] reads what `Display` writes.

use super::{FlowRule, Masked, RuleAction, RuleFlow, RuleMatch};
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::fmt;
use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Why a rule's text was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleTextError {
    /// The word or value at fault.
    pub at: String,
    /// What is wrong with it.
    pub why: &'static str,
}

impl fmt::Display for RuleTextError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "rule: '{}': {}", self.at, self.why)
    }
}

#[cfg(feature = "std")]
impl std::error::Error for RuleTextError {}

fn err(at: &str, why: &'static str) -> RuleTextError {
    RuleTextError { at: at.to_string(), why }
}

const FLOWS: [RuleFlow; 13] = [
    RuleFlow::Tcp4,
    RuleFlow::Udp4,
    RuleFlow::Sctp4,
    RuleFlow::Ah4,
    RuleFlow::Esp4,
    RuleFlow::Ip4,
    RuleFlow::Tcp6,
    RuleFlow::Udp6,
    RuleFlow::Sctp6,
    RuleFlow::Ah6,
    RuleFlow::Esp6,
    RuleFlow::Ip6,
    RuleFlow::Ether,
];

fn int(s: &str, max: u64) -> Result<u64, RuleTextError> {
    let v = match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16),
        None => s.parse::<u64>(),
    }
    .map_err(|_| err(s, "not a number"))?;
    if v > max {
        return Err(err(s, "too large for the field"));
    }
    Ok(v)
}

fn masked(s: &str, max: u64) -> Result<(u64, u64), RuleTextError> {
    match s.split_once('/') {
        Some((v, m)) => Ok((int(v, max)?, int(m, max)?)),
        None => Ok((int(s, max)?, max)),
    }
}

/// A field `N[/MASK]` of at most `max`, as its type.
fn field<T: TryFrom<u64> + Default>(s: &str, max: u64) -> Result<Masked<T>, RuleTextError> {
    let (v, k) = masked(s, max)?;
    // Both are at most `max`, which fits `T`.
    Ok(Masked { value: T::try_from(v).unwrap_or_default(), mask: T::try_from(k).unwrap_or_default() })
}

fn prefix_mask(len: u32, bits: u32) -> u128 {
    if len == 0 {
        0
    } else {
        (u128::MAX << (128 - len)) >> (128 - bits)
    }
}

fn ip(s: &str, v6: bool) -> Result<Masked<u128>, RuleTextError> {
    let addr = |a: &str| -> Result<u128, RuleTextError> {
        if v6 {
            Ok(u128::from(a.parse::<Ipv6Addr>().map_err(|_| err(s, "not an IPv6 address"))?))
        } else {
            Ok(u128::from(u32::from(a.parse::<Ipv4Addr>().map_err(|_| err(s, "not an IPv4 address"))?)))
        }
    };
    let bits = if v6 { 128 } else { 32 };
    match s.split_once('/') {
        None => Ok(Masked { value: addr(s)?, mask: prefix_mask(bits, bits) }),
        // A prefix length: the host bits are not compared, and dropped.
        Some((a, l)) if !l.contains(['.', ':']) => {
            let len =
                l.parse::<u32>().ok().filter(|&l| l <= bits).ok_or_else(|| err(s, "bad prefix length"))?;
            let mask = prefix_mask(len, bits);
            Ok(Masked { value: addr(a)? & mask, mask })
        }
        // A mask written as an address: any bits, kept as given.
        Some((a, m)) => Ok(Masked { value: addr(a)?, mask: addr(m)? }),
    }
}

fn mac(s: &str) -> Result<Masked<[u8; 6]>, RuleTextError> {
    let one = |t: &str| -> Result<[u8; 6], RuleTextError> {
        let parts: Vec<&str> = t.split(':').collect();
        if parts.len() != 6 {
            return Err(err(s, "not a MAC address (6 hex bytes with ':')"));
        }
        let mut m = [0u8; 6];
        for (i, p) in parts.iter().enumerate() {
            m[i] = u8::from_str_radix(p, 16).map_err(|_| err(s, "not a MAC address"))?;
        }
        Ok(m)
    };
    match s.split_once('/') {
        Some((v, m)) => Ok(Masked { value: one(v)?, mask: one(m)? }),
        None => Ok(Masked { value: one(s)?, mask: [0xff; 6] }),
    }
}

fn next<'a>(it: &mut impl Iterator<Item = &'a str>, w: &str) -> Result<&'a str, RuleTextError> {
    it.next().ok_or_else(|| err(w, "needs a value"))
}

/// Reads one rule from its text.
pub fn parse_rule(text: &str) -> Result<FlowRule, RuleTextError> {
    let words: Vec<&str> = text.split_whitespace().collect();
    let (&first, rest) = words.split_first().ok_or_else(|| err(text, "empty rule"))?;
    let flow =
        FLOWS.iter().copied().find(|f| f.name() == first).ok_or_else(|| err(first, "unknown flow type"))?;
    let v6 = flow.is_v6();
    let mut m = RuleMatch::any(flow);
    let mut action = None;
    let mut location = None;
    let mut it = rest.iter().copied();
    while let Some(w) = it.next() {
        let ported = matches!(
            flow,
            RuleFlow::Tcp4
                | RuleFlow::Udp4
                | RuleFlow::Sctp4
                | RuleFlow::Tcp6
                | RuleFlow::Udp6
                | RuleFlow::Sctp6
        );
        let ip_flow = flow != RuleFlow::Ether;
        match w {
            "src-ip" | "dst-ip" if ip_flow => {
                let v = ip(next(&mut it, w)?, v6)?;
                if w == "src-ip" {
                    m.src = v
                } else {
                    m.dst = v
                }
            }
            "src-port" | "dst-port" if ported => {
                let f = field(next(&mut it, w)?, 0xffff)?;
                if w == "src-port" {
                    m.src_port = f
                } else {
                    m.dst_port = f
                }
            }
            "tos" if ip_flow => {
                m.tos = field(next(&mut it, w)?, 0xff)?;
            }
            "l4proto" if matches!(flow, RuleFlow::Ip4 | RuleFlow::Ip6) => {
                m.l4_proto = field(next(&mut it, w)?, 0xff)?;
            }
            "l4data" if matches!(flow, RuleFlow::Ip4 | RuleFlow::Ip6) => {
                m.l4_bytes = field(next(&mut it, w)?, 0xffff_ffff)?;
            }
            "spi" if matches!(flow, RuleFlow::Ah4 | RuleFlow::Esp4 | RuleFlow::Ah6 | RuleFlow::Esp6) => {
                m.spi = field(next(&mut it, w)?, 0xffff_ffff)?;
            }
            "proto" if flow == RuleFlow::Ether => {
                m.ethertype = field(next(&mut it, w)?, 0xffff)?;
            }
            "src-mac" if flow == RuleFlow::Ether => m.src_mac = mac(next(&mut it, w)?)?,
            "dst-mac" => m.dst_mac = mac(next(&mut it, w)?)?,
            "vlan" | "vlan-etype" => {
                let f = field(next(&mut it, w)?, 0xffff)?;
                if w == "vlan" {
                    m.vlan_tci = f
                } else {
                    m.vlan_etype = f
                }
            }
            "user-def" => {
                m.user_data = field(next(&mut it, w)?, u64::MAX)?;
            }
            "queue" | "context" | "drop" | "wake" | "vf" if action.is_some() => {
                return Err(err(w, "a rule has one action"));
            }
            "queue" => action = Some(RuleAction::Queue(int(next(&mut it, w)?, u32::MAX.into())? as u32)),
            "context" => {
                let context = int(next(&mut it, w)?, u32::MAX.into())? as u32;
                action = Some(RuleAction::Context { context, offset: 0 });
            }
            "offset" => match action {
                Some(RuleAction::Context { context, .. }) => {
                    let offset = int(next(&mut it, w)?, u32::MAX.into())? as u32;
                    action = Some(RuleAction::Context { context, offset });
                }
                _ => return Err(err(w, "an offset follows 'context C'")),
            },
            "drop" => action = Some(RuleAction::Drop),
            "wake" => action = Some(RuleAction::Wake),
            "vf" => {
                let vf = int(next(&mut it, w)?, 255)? as u8;
                if vf == 0 {
                    return Err(err(w, "VF numbers start at 1 (0 is this device)"));
                }
                if next(&mut it, w)? != "queue" {
                    return Err(err(w, "'vf V' is followed by 'queue Q'"));
                }
                let queue = int(next(&mut it, w)?, u32::MAX.into())? as u32;
                action = Some(RuleAction::Vf { vf, queue });
            }
            "loc" => location = Some(int(next(&mut it, w)?, u32::MAX.into())? as u32),
            _ => return Err(err(w, "not a field of this flow type, an action or 'loc'")),
        }
    }
    let action = action.ok_or_else(|| err(text, "no action (queue, context, drop, wake, vf)"))?;
    let location = location.ok_or_else(|| err(text, "no location ('loc L')"))?;
    Ok(FlowRule { location, matcher: m.normalized(), action })
}

fn num<T: Into<u64> + Copy>(f: &mut fmt::Formatter<'_>, name: &str, m: Masked<T>, full: u64) -> fmt::Result {
    let (v, k) = (m.value.into(), m.mask.into());
    match k {
        0 => Ok(()),
        k if k == full => write!(f, " {name} {v}"),
        k => write!(f, " {name} {v:#x}/{k:#x}"),
    }
}

fn addr(f: &mut fmt::Formatter<'_>, name: &str, m: Masked<u128>, v6: bool) -> fmt::Result {
    if m.mask == 0 {
        return Ok(());
    }
    let bits = if v6 { 128 } else { 32 };
    let show =
        |x: u128| if v6 { IpAddr::V6(Ipv6Addr::from(x)) } else { IpAddr::V4(Ipv4Addr::from(x as u32)) };
    let len = m.mask.count_ones();
    if m.mask == prefix_mask(len, bits) && m.value & !m.mask == 0 {
        if len == bits {
            write!(f, " {name} {}", show(m.value))
        } else {
            write!(f, " {name} {}/{len}", show(m.value))
        }
    } else {
        write!(f, " {name} {}/{}", show(m.value), show(m.mask))
    }
}

fn mac_text(f: &mut fmt::Formatter<'_>, name: &str, m: Masked<[u8; 6]>) -> fmt::Result {
    if !m.is_set() {
        return Ok(());
    }
    let hex = |b: [u8; 6]| {
        let mut s = String::new();
        for (i, x) in b.iter().enumerate() {
            if i > 0 {
                s.push(':');
            }
            s.push_str(&alloc::format!("{x:02x}"));
        }
        s
    };
    if m.mask == [0xff; 6] {
        write!(f, " {name} {}", hex(m.value))
    } else {
        write!(f, " {name} {}/{}", hex(m.value), hex(m.mask))
    }
}

impl fmt::Display for FlowRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let m = &self.matcher;
        let v6 = m.flow.is_v6();
        f.write_str(m.flow.name())?;
        addr(f, "src-ip", m.src, v6)?;
        addr(f, "dst-ip", m.dst, v6)?;
        num(f, "src-port", m.src_port, 0xffff)?;
        num(f, "dst-port", m.dst_port, 0xffff)?;
        num(f, "tos", m.tos, 0xff)?;
        num(f, "l4proto", m.l4_proto, 0xff)?;
        num(f, "l4data", m.l4_bytes, 0xffff_ffff)?;
        num(f, "spi", m.spi, 0xffff_ffff)?;
        num(f, "proto", m.ethertype, 0xffff)?;
        mac_text(f, "src-mac", m.src_mac)?;
        mac_text(f, "dst-mac", m.dst_mac)?;
        num(f, "vlan", m.vlan_tci, 0xffff)?;
        num(f, "vlan-etype", m.vlan_etype, 0xffff)?;
        num(f, "user-def", m.user_data, u64::MAX)?;
        match self.action {
            RuleAction::Queue(q) => write!(f, " queue {q}")?,
            RuleAction::Context { context, offset: 0 } => write!(f, " context {context}")?,
            RuleAction::Context { context, offset } => write!(f, " context {context} offset {offset}")?,
            RuleAction::Drop => f.write_str(" drop")?,
            RuleAction::Wake => f.write_str(" wake")?,
            RuleAction::Vf { vf, queue } => write!(f, " vf {vf} queue {queue}")?,
        }
        write!(f, " loc {}", self.location)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::format;

    #[test]
    fn text_reads_back() {
        for t in [
            "udp4 dst-ip 10.0.0.2 dst-port 443 context 1 loc 3",
            "udp4 dst-port 443 context 1 offset 8 loc 0",
            "tcp4 src-ip 192.168.7.0/24 drop loc 7",
            "tcp4 src-ip 10.0.7.0/255.0.255.0 src-port 0x100/0xff00 queue 2 loc 1",
            "tcp6 src-ip fd00::/16 vlan 0x2000/0xe000 queue 2 loc 4",
            "ip4 l4proto 17 l4data 0x1bb/0xffff dst-mac 01:02:03:04:05:06 vf 2 queue 1 loc 10",
            "esp6 spi 7 user-def 1234605616436508552 wake loc 11",
            "ether proto 35063 src-mac 02:00:00:00:00:01 drop loc 9",
        ] {
            let r = parse_rule(t).unwrap_or_else(|e| panic!("{t}: {e}"));
            assert_eq!(format!("{r}"), t);
            assert_eq!(parse_rule(&format!("{r}")), Ok(r));
        }
    }

    #[test]
    fn prefixes_drop_host_bits_and_words_are_checked() {
        let r = parse_rule("udp4 dst-ip 10.1.2.3/8 queue 1 loc 0").unwrap();
        assert_eq!(r.matcher.dst, Masked { value: 0x0a00_0000, mask: 0xff00_0000 });
        for (bad, at) in [
            ("", ""),
            ("udp5 queue 1 loc 0", "udp5"),
            ("udp4 queue 1", "udp4 queue 1"),
            ("udp4 loc 1", "udp4 loc 1"),
            ("udp4 spi 3 queue 1 loc 0", "spi"),
            ("ether src-ip 1.2.3.4 drop loc 0", "src-ip"),
            ("udp4 dst-port 70000 queue 1 loc 0", "70000"),
            ("udp4 dst-ip 10.0.0.1/33 queue 1 loc 0", "10.0.0.1/33"),
            ("udp4 queue 1 drop loc 0", "drop"),
            ("udp4 offset 3 queue 1 loc 0", "offset"),
            ("udp4 vf 0 queue 1 loc 0", "vf"),
            ("udp4 queue", "queue"),
        ] {
            let e = parse_rule(bad).unwrap_err();
            assert_eq!(e.at, at, "{bad}: {e}");
        }
    }
}
