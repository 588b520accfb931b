//! NIC flow classification rules (`ethtool -N`, `ETHTOOL_SRXCLSRLINS`) as
//! the kernel defines them, and which rule a flow meets first.
//!
//! A NIC looks at its rules before RSS: the first rule (lowest location)
//! whose masked fields all equal the frame's sends it to a queue, into an
//! RSS context (the context's table picks a queue, plus the rule's offset),
//! or drops it. Only a frame no rule takes is hashed with the main table.
//! Semantics from the kernel's `include/uapi/linux/ethtool.h` (struct
//! `ethtool_rx_flow_spec`, `ethtool_rxnfc`): a mask bit set means the bit
//! is compared; `RX_CLS_FLOW_DISC` drops; with `FLOW_RSS` the context's
//! table value is added to `ring_cookie`; the cookie's bits 32..39 name a
//! VF, whose queues are not this host's.
//!
//! A rule can look at fields a 5-tuple does not carry (TOS, MAC addresses,
//! VLAN tag, user data, the SPI). When such a rule stands before the one
//! that would match, [`classify`] says it cannot know rather than guess.

mod text;

pub use text::{parse_rule, RuleTextError};

use crate::hashtype::{FlowTuple, L4Proto};
use alloc::vec::Vec;
use core::fmt;
use core::net::IpAddr;

/// `flow_type` values of a rule (the low byte; flags apart).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RuleFlow {
    /// `TCP_V4_FLOW`.
    Tcp4,
    /// `UDP_V4_FLOW`.
    Udp4,
    /// `SCTP_V4_FLOW`.
    Sctp4,
    /// `AH_V4_FLOW`.
    Ah4,
    /// `ESP_V4_FLOW`.
    Esp4,
    /// `IPV4_USER_FLOW`: any IPv4 frame, with an optional protocol and the first 4 bytes of L4.
    Ip4,
    /// `TCP_V6_FLOW`.
    Tcp6,
    /// `UDP_V6_FLOW`.
    Udp6,
    /// `SCTP_V6_FLOW`.
    Sctp6,
    /// `AH_V6_FLOW`.
    Ah6,
    /// `ESP_V6_FLOW`.
    Esp6,
    /// `IPV6_USER_FLOW`.
    Ip6,
    /// `ETHER_FLOW`: MAC addresses and EtherType.
    Ether,
}

impl RuleFlow {
    /// From the kernel's code (flags already removed); `None` for a code rules cannot use.
    pub fn from_code(code: u32) -> Option<Self> {
        Some(match code {
            0x01 => RuleFlow::Tcp4,
            0x02 => RuleFlow::Udp4,
            0x03 => RuleFlow::Sctp4,
            0x05 => RuleFlow::Tcp6,
            0x06 => RuleFlow::Udp6,
            0x07 => RuleFlow::Sctp6,
            0x09 => RuleFlow::Ah4,
            0x0a => RuleFlow::Esp4,
            0x0b => RuleFlow::Ah6,
            0x0c => RuleFlow::Esp6,
            0x0d => RuleFlow::Ip4,
            0x0e => RuleFlow::Ip6,
            0x12 => RuleFlow::Ether,
            _ => return None,
        })
    }

    /// The kernel's code.
    pub fn code(self) -> u32 {
        match self {
            RuleFlow::Tcp4 => 0x01,
            RuleFlow::Udp4 => 0x02,
            RuleFlow::Sctp4 => 0x03,
            RuleFlow::Tcp6 => 0x05,
            RuleFlow::Udp6 => 0x06,
            RuleFlow::Sctp6 => 0x07,
            RuleFlow::Ah4 => 0x09,
            RuleFlow::Esp4 => 0x0a,
            RuleFlow::Ah6 => 0x0b,
            RuleFlow::Esp6 => 0x0c,
            RuleFlow::Ip4 => 0x0d,
            RuleFlow::Ip6 => 0x0e,
            RuleFlow::Ether => 0x12,
        }
    }

    /// `ethtool -N`'s name for it.
    pub fn name(self) -> &'static str {
        match self {
            RuleFlow::Tcp4 => "tcp4",
            RuleFlow::Udp4 => "udp4",
            RuleFlow::Sctp4 => "sctp4",
            RuleFlow::Ah4 => "ah4",
            RuleFlow::Esp4 => "esp4",
            RuleFlow::Ip4 => "ip4",
            RuleFlow::Tcp6 => "tcp6",
            RuleFlow::Udp6 => "udp6",
            RuleFlow::Sctp6 => "sctp6",
            RuleFlow::Ah6 => "ah6",
            RuleFlow::Esp6 => "esp6",
            RuleFlow::Ip6 => "ip6",
            RuleFlow::Ether => "ether",
        }
    }

    fn is_v6(self) -> bool {
        matches!(
            self,
            RuleFlow::Tcp6
                | RuleFlow::Udp6
                | RuleFlow::Sctp6
                | RuleFlow::Ah6
                | RuleFlow::Esp6
                | RuleFlow::Ip6
        )
    }

    /// The IP protocol the flow type itself fixes (`None`: any, the user flows and `ether`).
    fn proto(self) -> Option<u8> {
        match self {
            RuleFlow::Tcp4 | RuleFlow::Tcp6 => Some(6),
            RuleFlow::Udp4 | RuleFlow::Udp6 => Some(17),
            RuleFlow::Sctp4 | RuleFlow::Sctp6 => Some(132),
            RuleFlow::Ah4 | RuleFlow::Ah6 => Some(51),
            RuleFlow::Esp4 | RuleFlow::Esp6 => Some(50),
            RuleFlow::Ip4 | RuleFlow::Ip6 | RuleFlow::Ether => None,
        }
    }
}

/// A field compared under a mask: bits set in `mask` must equal `value`'s.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Masked<T> {
    /// The value (bits outside the mask are not compared).
    pub value: T,
    /// Which bits are compared.
    pub mask: T,
}

macro_rules! masked_int {
    ($($t:ty),*) => {$(
        impl Masked<$t> {
            /// Whether any bit is compared.
            pub fn is_set(&self) -> bool {
                self.mask != 0
            }
            /// Whether `v` has the compared bits.
            pub fn accepts(&self, v: $t) -> bool {
                v & self.mask == self.value & self.mask
            }
        }
    )*};
}
masked_int!(u8, u16, u32, u64, u128);

impl Masked<[u8; 6]> {
    /// Whether any bit is compared.
    pub fn is_set(&self) -> bool {
        self.mask != [0; 6]
    }
}

macro_rules! masked_norm {
    ($($t:ty),*) => {$(
        impl Masked<$t> {
            /// The same field with the bits it does not compare cleared.
            pub fn normalized(self) -> Self {
                Masked { value: self.value & self.mask, mask: self.mask }
            }
        }
    )*};
}
masked_norm!(u8, u16, u32, u64, u128);

impl Masked<[u8; 6]> {
    /// The same field with the bits it does not compare cleared.
    pub fn normalized(self) -> Self {
        let mut value = self.value;
        for (v, m) in value.iter_mut().zip(self.mask) {
            *v &= m;
        }
        Masked { value, mask: self.mask }
    }
}

/// What a rule compares. Addresses are held as integers (IPv4 in the low 32
/// bits), in the order the frame carries them: `src` is the sender.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RuleMatch {
    /// The flow type.
    pub flow: RuleFlow,
    /// Source address.
    pub src: Masked<u128>,
    /// Destination address.
    pub dst: Masked<u128>,
    /// Source port (TCP, UDP, SCTP).
    pub src_port: Masked<u16>,
    /// Destination port.
    pub dst_port: Masked<u16>,
    /// IPv4 TOS or IPv6 traffic class.
    pub tos: Masked<u8>,
    /// The IP protocol of a user flow (`ip4`, `ip6`).
    pub l4_proto: Masked<u8>,
    /// The first 4 bytes of L4 of a user flow, big-endian (TCP/UDP: source port, destination port).
    pub l4_bytes: Masked<u32>,
    /// The SPI of an AH/ESP flow.
    pub spi: Masked<u32>,
    /// EtherType of an `ether` flow.
    pub ethertype: Masked<u16>,
    /// Source MAC of an `ether` flow.
    pub src_mac: Masked<[u8; 6]>,
    /// Destination MAC (`ether`, or any flow with `FLOW_MAC_EXT`).
    pub dst_mac: Masked<[u8; 6]>,
    /// VLAN TCI (`FLOW_EXT`).
    pub vlan_tci: Masked<u16>,
    /// VLAN EtherType (`FLOW_EXT`).
    pub vlan_etype: Masked<u16>,
    /// User-defined data (`FLOW_EXT`).
    pub user_data: Masked<u64>,
}

impl RuleMatch {
    /// The same match with every value's uncompared bits cleared: two rules
    /// that take the same frames compare equal (drivers may report any bits
    /// under a zero mask).
    pub fn normalized(self) -> Self {
        RuleMatch {
            flow: self.flow,
            src: self.src.normalized(),
            dst: self.dst.normalized(),
            src_port: self.src_port.normalized(),
            dst_port: self.dst_port.normalized(),
            tos: self.tos.normalized(),
            l4_proto: self.l4_proto.normalized(),
            l4_bytes: self.l4_bytes.normalized(),
            spi: self.spi.normalized(),
            ethertype: self.ethertype.normalized(),
            src_mac: self.src_mac.normalized(),
            dst_mac: self.dst_mac.normalized(),
            vlan_tci: self.vlan_tci.normalized(),
            vlan_etype: self.vlan_etype.normalized(),
            user_data: self.user_data.normalized(),
        }
    }

    /// A rule of this flow type comparing nothing yet (it takes every frame of the type).
    pub fn any(flow: RuleFlow) -> Self {
        RuleMatch {
            flow,
            src: Masked::default(),
            dst: Masked::default(),
            src_port: Masked::default(),
            dst_port: Masked::default(),
            tos: Masked::default(),
            l4_proto: Masked::default(),
            l4_bytes: Masked::default(),
            spi: Masked::default(),
            ethertype: Masked::default(),
            src_mac: Masked::default(),
            dst_mac: Masked::default(),
            vlan_tci: Masked::default(),
            vlan_etype: Masked::default(),
            user_data: Masked::default(),
        }
    }
}

/// Where a rule sends what it takes (decoded from `ring_cookie`, `FLOW_RSS` and `rss_context`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RuleAction {
    /// To one RX queue.
    Queue(u32),
    /// Hashed with RSS context `context`'s key and table; the table's queue plus `offset`.
    Context {
        /// The RSS context id (0 is the main table).
        context: u32,
        /// Added to the table's queue.
        offset: u32,
    },
    /// Dropped (`RX_CLS_FLOW_DISC`).
    Drop,
    /// Used for Wake-on-LAN (`RX_CLS_FLOW_WAKE`), not delivered to a queue.
    Wake,
    /// To a queue of virtual function `vf`: not a queue of this device.
    Vf {
        /// The VF number (1-based, as the cookie carries it).
        vf: u8,
        /// Its queue.
        queue: u32,
    },
}

/// `RX_CLS_FLOW_DISC`.
pub const RX_CLS_FLOW_DISC: u64 = u64::MAX;
/// `RX_CLS_FLOW_WAKE`.
pub const RX_CLS_FLOW_WAKE: u64 = u64::MAX - 1;

impl RuleAction {
    /// From the kernel's fields: `ring_cookie`, whether `FLOW_RSS` was set, and `rss_context`.
    pub fn from_cookie(cookie: u64, flow_rss: bool, context: u32) -> Self {
        match cookie {
            RX_CLS_FLOW_DISC => RuleAction::Drop,
            RX_CLS_FLOW_WAKE => RuleAction::Wake,
            c => {
                let vf = ((c >> 32) & 0xff) as u8;
                let queue = c as u32;
                if vf != 0 {
                    RuleAction::Vf { vf, queue }
                } else if flow_rss {
                    RuleAction::Context { context, offset: queue }
                } else {
                    RuleAction::Queue(queue)
                }
            }
        }
    }

    /// The kernel's fields back: (`ring_cookie`, `FLOW_RSS`, `rss_context`).
    pub fn to_cookie(self) -> (u64, bool, u32) {
        match self {
            RuleAction::Queue(q) => (u64::from(q), false, 0),
            RuleAction::Context { context, offset } => (u64::from(offset), true, context),
            RuleAction::Drop => (RX_CLS_FLOW_DISC, false, 0),
            RuleAction::Wake => (RX_CLS_FLOW_WAKE, false, 0),
            RuleAction::Vf { vf, queue } => ((u64::from(vf) << 32) | u64::from(queue), false, 0),
        }
    }
}

impl fmt::Display for RuleAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RuleAction::Queue(q) => write!(f, "queue {q}"),
            RuleAction::Context { context, offset: 0 } => write!(f, "context {context}"),
            RuleAction::Context { context, offset } => write!(f, "context {context} + {offset}"),
            RuleAction::Drop => f.write_str("drop"),
            RuleAction::Wake => f.write_str("wake-on-lan"),
            RuleAction::Vf { vf, queue } => write!(f, "vf {vf} queue {queue}"),
        }
    }
}

/// One classification rule of a NIC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FlowRule {
    /// Its location in the NIC's rule table: lower is looked at first.
    pub location: u32,
    /// What it compares.
    pub matcher: RuleMatch,
    /// Where it sends what it takes.
    pub action: RuleAction,
}

/// A field a rule compares that a 5-tuple does not carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UnknownField {
    /// TOS / traffic class.
    Tos,
    /// A MAC address.
    Mac,
    /// The VLAN tag or its EtherType.
    Vlan,
    /// User-defined data.
    UserData,
    /// The IPsec SPI.
    Spi,
    /// L4 bytes of a protocol whose header rsskit does not model.
    L4Bytes,
}

impl UnknownField {
    /// A short name.
    pub fn name(self) -> &'static str {
        match self {
            UnknownField::Tos => "tos",
            UnknownField::Mac => "MAC address",
            UnknownField::Vlan => "VLAN tag",
            UnknownField::UserData => "user data",
            UnknownField::Spi => "SPI",
            UnknownField::L4Bytes => "L4 bytes",
        }
    }
}

/// Whether one rule takes a flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuleFit {
    /// It takes it.
    Takes,
    /// It does not.
    Passes,
    /// It would, if the frame's `field` (not in a 5-tuple) matched.
    Depends(UnknownField),
}

fn addr_bits(a: IpAddr) -> u128 {
    match a {
        IpAddr::V4(v) => u128::from(u32::from(v)),
        IpAddr::V6(v) => u128::from(v),
    }
}

/// Whether `rule` takes `flow`.
pub fn fit(m: &RuleMatch, flow: &FlowTuple) -> RuleFit {
    let proto = flow.proto.number();
    let family_ok = match m.flow {
        RuleFlow::Ether => true,
        f => f.is_v6() == flow.is_ipv6(),
    };
    if !family_ok || m.flow.proto().is_some_and(|p| p != proto) {
        return RuleFit::Passes;
    }
    if m.flow == RuleFlow::Ether {
        // An `ether` rule compares only L2 fields; its EtherType is the one
        // field a tuple implies (IPv4 or IPv6, no VLAN tag assumed).
        let ethertype = if flow.is_ipv6() { 0x86dd } else { 0x0800 };
        if !m.ethertype.accepts(ethertype) {
            return RuleFit::Passes;
        }
    } else {
        let ok = m.src.accepts(addr_bits(flow.src))
            && m.dst.accepts(addr_bits(flow.dst))
            && m.src_port.accepts(flow.src_port)
            && m.dst_port.accepts(flow.dst_port)
            && m.l4_proto.accepts(proto);
        if !ok {
            return RuleFit::Passes;
        }
        if m.l4_bytes.is_set() {
            let ported = matches!(flow.proto, L4Proto::Tcp | L4Proto::Udp) || proto == 132;
            if !ported {
                return RuleFit::Depends(UnknownField::L4Bytes);
            }
            let bytes = (u32::from(flow.src_port) << 16) | u32::from(flow.dst_port);
            if !m.l4_bytes.accepts(bytes) {
                return RuleFit::Passes;
            }
        }
    }
    // Every field the tuple carries matched; what remains decides only if compared.
    let unknown = [
        (m.tos.is_set(), UnknownField::Tos),
        (m.src_mac.is_set() || m.dst_mac.is_set(), UnknownField::Mac),
        (m.vlan_tci.is_set() || m.vlan_etype.is_set(), UnknownField::Vlan),
        (m.user_data.is_set(), UnknownField::UserData),
        (m.spi.is_set(), UnknownField::Spi),
    ];
    match unknown.iter().find(|(set, _)| *set) {
        Some((_, field)) => RuleFit::Depends(*field),
        None => RuleFit::Takes,
    }
}

/// Which rule a flow meets, in the NIC's order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Classified<'a> {
    /// No rule takes it: the main RSS table decides.
    NoRule,
    /// This rule takes it.
    Rule(&'a FlowRule),
    /// The rule at this location may take it, depending on a field a tuple does not carry.
    Unknown {
        /// The rule.
        rule: &'a FlowRule,
        /// What it depends on.
        field: UnknownField,
    },
}

/// The rule that takes `flow`: the lowest location first, whatever order `rules` is in.
pub fn classify<'a>(rules: &'a [FlowRule], flow: &FlowTuple) -> Classified<'a> {
    let mut order: Vec<&FlowRule> = rules.iter().collect();
    order.sort_by_key(|r| r.location);
    for rule in order {
        match fit(&rule.matcher, flow) {
            RuleFit::Takes => return Classified::Rule(rule),
            RuleFit::Depends(field) => return Classified::Unknown { rule, field },
            RuleFit::Passes => {}
        }
    }
    Classified::NoRule
}

/// The queue a flow hashed to `hash` reaches through a context's `table` plus the rule's `offset`
/// (`None` for an empty table).
pub fn context_queue(table: &[u32], hash: u32, offset: u32) -> Option<u32> {
    if table.is_empty() {
        return None;
    }
    // The NIC indexes its table with the hash's low bits: `hash % len` for
    // the power-of-two sizes NICs have (and what rsskit's main-table
    // prediction does for any size).
    let q = table[hash as usize % table.len()];
    Some(q.wrapping_add(offset))
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::net::{Ipv4Addr, Ipv6Addr};

    fn udp4(src: [u8; 4], sport: u16, dst: [u8; 4], dport: u16) -> FlowTuple {
        FlowTuple::new(
            IpAddr::V4(Ipv4Addr::from(src)),
            sport,
            IpAddr::V4(Ipv4Addr::from(dst)),
            dport,
            L4Proto::Udp,
        )
    }

    fn rule(location: u32, matcher: RuleMatch, action: RuleAction) -> FlowRule {
        FlowRule { location, matcher, action }
    }

    // Ground truth written from ethtool.h's text, one case per sentence.
    #[test]
    fn lowest_location_wins_whatever_the_list_order() {
        let mut quic = RuleMatch::any(RuleFlow::Udp4);
        quic.dst_port = Masked { value: 443, mask: 0xffff };
        let all_udp = RuleMatch::any(RuleFlow::Udp4);
        let rules = [rule(7, all_udp, RuleAction::Queue(1)), rule(3, quic, RuleAction::Queue(9))];
        let f = udp4([10, 0, 0, 1], 5000, [10, 0, 0, 2], 443);
        assert_eq!(classify(&rules, &f), Classified::Rule(&rules[1]));
        let other = udp4([10, 0, 0, 1], 5000, [10, 0, 0, 2], 53);
        assert_eq!(classify(&rules, &other), Classified::Rule(&rules[0]));
    }

    #[test]
    fn masks_compare_only_their_bits_and_types_fix_the_protocol() {
        let mut net = RuleMatch::any(RuleFlow::Tcp4);
        net.src = Masked { value: u128::from(u32::from(Ipv4Addr::new(192, 168, 7, 0))), mask: 0xffff_ff00 };
        let rules = [rule(0, net, RuleAction::Drop)];
        let tcp = FlowTuple::new(
            IpAddr::V4(Ipv4Addr::new(192, 168, 7, 200)),
            1,
            IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
            80,
            L4Proto::Tcp,
        );
        assert!(matches!(classify(&rules, &tcp), Classified::Rule(r) if r.action == RuleAction::Drop));
        // Same addresses over UDP: a tcp4 rule does not take it.
        let udp = FlowTuple { proto: L4Proto::Udp, ..tcp };
        assert_eq!(classify(&rules, &udp), Classified::NoRule);
        // Outside the /24.
        let out = FlowTuple { src: IpAddr::V4(Ipv4Addr::new(192, 168, 8, 1)), ..tcp };
        assert_eq!(classify(&rules, &out), Classified::NoRule);
    }

    #[test]
    fn user_flows_read_ports_from_the_l4_bytes_and_families_stay_apart() {
        let mut m = RuleMatch::any(RuleFlow::Ip4);
        m.l4_proto = Masked { value: 17, mask: 0xff };
        m.l4_bytes = Masked { value: 443, mask: 0x0000_ffff };
        let rules = [rule(1, m, RuleAction::Queue(4))];
        assert!(matches!(classify(&rules, &udp4([1, 1, 1, 1], 9, [2, 2, 2, 2], 443)), Classified::Rule(_)));
        assert_eq!(classify(&rules, &udp4([1, 1, 1, 1], 443, [2, 2, 2, 2], 9)), Classified::NoRule);
        let v6 = FlowTuple::new(
            IpAddr::V6(Ipv6Addr::LOCALHOST),
            9,
            IpAddr::V6(Ipv6Addr::LOCALHOST),
            443,
            L4Proto::Udp,
        );
        assert_eq!(classify(&rules, &v6), Classified::NoRule);
    }

    #[test]
    fn a_rule_on_a_field_no_tuple_carries_is_unknown_not_guessed() {
        let mut vlan = RuleMatch::any(RuleFlow::Udp4);
        vlan.vlan_tci = Masked { value: 0x2000, mask: 0xe000 };
        let rules = [
            rule(0, vlan, RuleAction::Queue(2)),
            rule(5, RuleMatch::any(RuleFlow::Udp4), RuleAction::Queue(3)),
        ];
        let f = udp4([1, 1, 1, 1], 1, [2, 2, 2, 2], 2);
        assert_eq!(classify(&rules, &f), Classified::Unknown { rule: &rules[0], field: UnknownField::Vlan });
        // A TCP flow passes the udp4 VLAN rule on its protocol alone.
        let t = FlowTuple { proto: L4Proto::Tcp, ..f };
        assert_eq!(classify(&rules, &t), Classified::NoRule);
        // An ether rule on EtherType: IPv4 tuples imply 0x0800.
        let mut eth = RuleMatch::any(RuleFlow::Ether);
        eth.ethertype = Masked { value: 0x86dd, mask: 0xffff };
        assert_eq!(classify(&[rule(0, eth, RuleAction::Queue(1))], &f), Classified::NoRule);
    }

    #[test]
    fn cookies_decode_as_the_header_defines_them() {
        assert_eq!(RuleAction::from_cookie(u64::MAX, false, 0), RuleAction::Drop);
        assert_eq!(RuleAction::from_cookie(u64::MAX - 1, false, 0), RuleAction::Wake);
        assert_eq!(RuleAction::from_cookie(5, false, 3), RuleAction::Queue(5));
        assert_eq!(RuleAction::from_cookie(4, true, 2), RuleAction::Context { context: 2, offset: 4 });
        assert_eq!(RuleAction::from_cookie((3 << 32) | 1, false, 0), RuleAction::Vf { vf: 3, queue: 1 });
        for a in [
            RuleAction::Drop,
            RuleAction::Wake,
            RuleAction::Queue(7),
            RuleAction::Context { context: 1, offset: 8 },
            RuleAction::Vf { vf: 2, queue: 0 },
        ] {
            let (c, rss, ctx) = a.to_cookie();
            assert_eq!(RuleAction::from_cookie(c, rss, ctx), a);
        }
        // A context's queue is its table's entry plus the rule's offset.
        assert_eq!(context_queue(&[0, 1, 2, 3], 6, 8), Some(10));
        assert_eq!(context_queue(&[], 6, 8), None);
    }
}
