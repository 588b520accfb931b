//! Does a NIC follow the RSS setup its driver reports? The sans-I/O core of
//! `rsskit check --live`: fed each received frame with the RX queue it
//! arrived on (and the kernel's `rxhash`), it computes the hash and queue
//! from the key, hashed fields and indirection table the driver reports,
//! and counts agreement per packet and per flow.
//!
//! Every frame fed is counted once: `seen == agreed + disagreed +
//! unchecked` (by reason). No clock, no socket: the capture lives in
//! `rsskit_linux::packet::QueueCapture`, the loop in the CLI.

use crate::hash::PacketHasher;
use crate::wire::{parse_ethernet, DropReason, ParseConfig};
use core::net::IpAddr;
use rsskit_core::{FlowTuple, HashConfig, HashType, L4Proto, RssKey};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};

/// The fields a NIC hashes for one flow type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Fields {
    /// Source and destination address.
    #[serde(rename = "2-tuple")]
    TwoTuple,
    /// Addresses and ports.
    #[serde(rename = "4-tuple")]
    FourTuple,
    /// Something else (another field set, or nothing): not predicted.
    #[serde(rename = "not modeled")]
    NotModeled,
}

/// The hashed fields of the flow types with ports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct FlowFields {
    /// TCP over IPv4.
    pub tcp4: Fields,
    /// UDP over IPv4.
    pub udp4: Fields,
    /// TCP over IPv6.
    pub tcp6: Fields,
    /// UDP over IPv6.
    pub udp6: Fields,
}

impl FlowFields {
    /// 4-tuple for every type (what `hash --iface` assumes when the
    /// driver does not say).
    pub const ALL_FOUR: FlowFields = FlowFields {
        tcp4: Fields::FourTuple,
        udp4: Fields::FourTuple,
        tcp6: Fields::FourTuple,
        udp6: Fields::FourTuple,
    };

    fn of(&self, v6: bool, proto: L4Proto) -> Option<Fields> {
        match (v6, proto) {
            (false, L4Proto::Tcp) => Some(self.tcp4),
            (false, L4Proto::Udp) => Some(self.udp4),
            (true, L4Proto::Tcp) => Some(self.tcp6),
            (true, L4Proto::Udp) => Some(self.udp6),
            _ => None,
        }
    }

    fn hash_config(&self) -> HashConfig {
        let mut c = HashConfig::empty().with(HashType::Ipv4).with(HashType::Ipv6);
        for (f, t) in [
            (self.tcp4, HashType::TcpIpv4),
            (self.udp4, HashType::UdpIpv4),
            (self.tcp6, HashType::TcpIpv6),
            (self.udp6, HashType::UdpIpv6),
        ] {
            if f == Fields::FourTuple {
                c = c.with(t);
            }
        }
        c
    }
}

/// What the driver reports, and what is captured.
#[derive(Debug, Clone)]
pub struct LiveSpec {
    /// The interface (for the verdict's words).
    pub iface: String,
    /// The key the driver reports.
    pub key: RssKey,
    /// The indirection table the driver reports; empty when it reports
    /// none (every packet is then unchecked: `no_rss_table`).
    pub table: Vec<u32>,
    /// The hashed fields per flow type.
    pub fields: FlowFields,
    /// The NIC's input transform (`input_xfrm`: symmetric-xor...).
    pub xfrm: rsskit_core::InputXfrm,
    /// RX queues captured.
    pub queues: usize,
}

/// Why a frame was not checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Unchecked {
    /// Not IPv4 or IPv6 (ARP, LLDP, ...).
    NotIp,
    /// The driver recorded no RX queue for it.
    QueueNotRecorded,
    /// An IP fragment (NICs differ on which fields they hash).
    Fragment,
    /// IPv6 with extension headers (NICs differ on whether they parse them).
    Ipv6ExtensionHeaders,
    /// A transport the model has no field set for (SCTP: some NICs hash its ports).
    Sctp,
    /// The NIC hashes this flow type on fields rsskit does not model.
    FieldsNotModeled,
    /// The driver reports no indirection table.
    NoRssTable,
    /// The capture holds less than the frame, too little to parse.
    CutShort,
    /// The frame does not parse (the reason).
    Malformed(DropReason),
}

impl Unchecked {
    /// Short snake_case name for text and JSON.
    pub fn name(self) -> String {
        match self {
            Unchecked::NotIp => "not_ip".into(),
            Unchecked::QueueNotRecorded => "queue_not_recorded".into(),
            Unchecked::Fragment => "fragment".into(),
            Unchecked::Ipv6ExtensionHeaders => "ipv6_extension_headers".into(),
            Unchecked::Sctp => "sctp".into(),
            Unchecked::FieldsNotModeled => "fields_not_modeled".into(),
            Unchecked::NoRssTable => "no_rss_table".into(),
            Unchecked::CutShort => "cut_short".into(),
            Unchecked::Malformed(r) => format!("malformed_{}", r.name()),
        }
    }
}

/// One received frame.
#[derive(Debug, Clone, Copy)]
pub struct Observation<'a> {
    /// The RX queue it arrived on (`None`: none recorded).
    pub queue: Option<u16>,
    /// The kernel's `rxhash`, when the capture reports it.
    pub rxhash: Option<u32>,
    /// The captured bytes, from the Ethernet header.
    pub frame: &'a [u8],
    /// Its length on the wire (more than `frame` when the capture cut it).
    pub wire_len: usize,
}

/// What [`LiveCheck::observe`] made of a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// On the queue the reported setup predicts.
    Agreed,
    /// On another queue.
    Disagreed,
    /// Not checked, and why.
    Unchecked(Unchecked),
}

/// Most flows tracked one by one; packets of further flows are still
/// counted per packet (`untracked_packets`). Bounds memory on a busy NIC.
pub const MAX_FLOWS: usize = 1 << 16;

/// Most disagreeing flows listed.
pub const MAX_SHOWN: usize = 16;

#[derive(Debug, Clone)]
struct FlowState {
    hash: u32,
    hash_type: HashType,
    index: usize,
    predicted: u32,
    packets: u64,
    on_predicted: u64,
    /// Observed queue -> packets.
    observed: BTreeMap<u16, u64>,
    /// The first `rxhash` the kernel reported for it.
    rxhash: Option<u32>,
}

/// The comparison state: feed frames with [`LiveCheck::observe`], read the
/// result with [`LiveCheck::report`].
pub struct LiveCheck {
    spec: LiveSpec,
    hasher: PacketHasher,
    parse: ParseConfig,
    seen: u64,
    agreed: u64,
    disagreed: u64,
    unchecked: BTreeMap<Unchecked, u64>,
    flows: HashMap<FlowTuple, FlowState>,
    /// Disagreeing flows in the order they first disagreed (at most [`MAX_SHOWN`]).
    shown: Vec<FlowTuple>,
    untracked_packets: u64,
    rxhash_compared: u64,
    rxhash_equal: u64,
    /// Per queue: packets seen, checked packets predicted for it.
    per_queue: Vec<(u64, u64)>,
}

impl LiveCheck {
    /// A check of `spec`.
    pub fn new(spec: LiveSpec) -> LiveCheck {
        let hasher = PacketHasher::new(&spec.key, spec.fields.hash_config()).with_xfrm(spec.xfrm);
        // What the NIC sees: no checksum check, no decapsulation (it hashes
        // the outer header).
        let parse =
            ParseConfig { verify_ipv4_checksum: false, decap_tunnels: false, ..ParseConfig::default() };
        let width = spec.queues.max(spec.table.iter().map(|&q| q as usize + 1).max().unwrap_or(0));
        LiveCheck {
            spec,
            hasher,
            parse,
            seen: 0,
            agreed: 0,
            disagreed: 0,
            unchecked: BTreeMap::new(),
            flows: HashMap::new(),
            shown: Vec::new(),
            untracked_packets: 0,
            rxhash_compared: 0,
            rxhash_equal: 0,
            per_queue: vec![(0, 0); width],
        }
    }

    /// Counts one frame.
    pub fn observe(&mut self, o: &Observation<'_>) -> Outcome {
        self.seen += 1;
        if let Some(q) = o.queue {
            let q = usize::from(q);
            if q >= self.per_queue.len() {
                self.per_queue.resize(q + 1, (0, 0));
            }
            self.per_queue[q].0 += 1;
        }
        let out = self.judge(o);
        match out {
            Outcome::Agreed => self.agreed += 1,
            Outcome::Disagreed => self.disagreed += 1,
            Outcome::Unchecked(r) => *self.unchecked.entry(r).or_insert(0) += 1,
        }
        out
    }

    fn judge(&mut self, o: &Observation<'_>) -> Outcome {
        let p = match parse_ethernet(o.frame, &self.parse) {
            Ok(p) => p,
            Err(DropReason::NotIp) => return Outcome::Unchecked(Unchecked::NotIp),
            Err(_) if o.frame.len() < o.wire_len => return Outcome::Unchecked(Unchecked::CutShort),
            Err(r) => return Outcome::Unchecked(Unchecked::Malformed(r)),
        };
        let Some(queue) = o.queue else { return Outcome::Unchecked(Unchecked::QueueNotRecorded) };
        let ip = &p.outer;
        if ip.is_fragment() {
            return Outcome::Unchecked(Unchecked::Fragment);
        }
        if ip.is_ipv6() && ip.header_len > 40 {
            return Outcome::Unchecked(Unchecked::Ipv6ExtensionHeaders);
        }
        let proto = L4Proto::from_number(ip.proto);
        if ip.proto == 132 {
            return Outcome::Unchecked(Unchecked::Sctp);
        }
        if self.spec.fields.of(ip.is_ipv6(), proto) == Some(Fields::NotModeled) {
            return Outcome::Unchecked(Unchecked::FieldsNotModeled);
        }
        if self.spec.table.is_empty() {
            return Outcome::Unchecked(Unchecked::NoRssTable);
        }
        let h = self.hasher.nic(&p);
        let index = h.hash as usize % self.spec.table.len();
        let predicted = self.spec.table[index];
        if let Some(x) = self.per_queue.get_mut(predicted as usize) {
            x.1 += 1;
        }
        if let Some(r) = o.rxhash {
            self.rxhash_compared += 1;
            self.rxhash_equal += u64::from(r == h.hash);
        }
        let agreed = u32::from(queue) == predicted;
        let tracked = self.flows.len() < MAX_FLOWS || self.flows.contains_key(&h.tuple);
        if tracked {
            let f = self.flows.entry(h.tuple).or_insert_with(|| FlowState {
                hash: h.hash,
                hash_type: h.hash_type,
                index,
                predicted,
                packets: 0,
                on_predicted: 0,
                observed: BTreeMap::new(),
                rxhash: o.rxhash,
            });
            let first_miss = !agreed && f.on_predicted == f.packets;
            f.packets += 1;
            f.on_predicted += u64::from(agreed);
            *f.observed.entry(queue).or_insert(0) += 1;
            if first_miss && self.shown.len() < MAX_SHOWN {
                self.shown.push(h.tuple);
            }
        } else {
            self.untracked_packets += 1;
        }
        if agreed {
            Outcome::Agreed
        } else {
            Outcome::Disagreed
        }
    }

    /// Frames fed so far.
    pub fn seen(&self) -> u64 {
        self.seen
    }

    /// The result; `ring_drops`: frames the kernel dropped on full rings
    /// (never seen, so outside the identity).
    pub fn report(&self, ring_drops: u64) -> LiveReport {
        let unchecked_total: u64 = self.unchecked.values().sum();
        let flows_agreed = self.flows.values().filter(|f| f.on_predicted == f.packets).count();
        let flows_split = self.flows.values().filter(|f| f.observed.len() > 1).count();
        let disagreements = self
            .shown
            .iter()
            .filter_map(|t| {
                let f = self.flows.get(t)?;
                Some(Disagreement {
                    flow: flow_name(t),
                    hash_type: f.hash_type.name(),
                    hash: f.hash,
                    table_index: f.index,
                    predicted_queue: f.predicted,
                    observed: f
                        .observed
                        .iter()
                        .map(|(&q, &n)| QueuePackets { queue: q, packets: n })
                        .collect(),
                    packets: f.packets,
                    rxhash: f.rxhash,
                })
            })
            .collect();
        let packets = PacketCounts {
            seen: self.seen,
            agreed: self.agreed,
            disagreed: self.disagreed,
            unchecked: unchecked_total,
            unchecked_by_reason: self.unchecked.iter().map(|(r, &n)| (r.name(), n)).collect(),
            ring_drops,
        };
        let flows = FlowCounts {
            checked: self.flows.len(),
            agreed: flows_agreed,
            disagreed: self.flows.len() - flows_agreed,
            split: flows_split,
            untracked_packets: self.untracked_packets,
        };
        let rxhash = RxhashCounts { compared: self.rxhash_compared, equal: self.rxhash_equal };
        let per_queue = self
            .per_queue
            .iter()
            .enumerate()
            .map(|(q, &(seen, predicted))| QueueCount { queue: q, packets: seen, predicted })
            .collect();
        let verdict = self.verdict(&packets, &flows, &rxhash);
        LiveReport {
            iface: self.spec.iface.clone(),
            queues: self.spec.queues,
            table_size: self.spec.table.len(),
            fields: (!self.spec.table.is_empty()).then_some(self.spec.fields),
            packets,
            flows,
            rxhash,
            per_queue,
            disagreements,
            verdict,
        }
    }

    fn verdict(&self, p: &PacketCounts, f: &FlowCounts, h: &RxhashCounts) -> Verdict {
        let iface = &self.spec.iface;
        let checked = p.agreed + p.disagreed;
        let cannot = |text: String| Verdict { status: VerdictStatus::CannotVerify, text };
        if self.spec.table.is_empty() {
            return cannot(format!(
                "cannot verify {iface}: its driver reports no RSS indirection table, so no queue can be \
                 predicted ({} packets seen on {} queue(s))",
                p.seen,
                self.per_queue.iter().filter(|q| q.0 > 0).count()
            ));
        }
        if checked == 0 {
            let why = self.unchecked.iter().max_by_key(|(_, &n)| n).map(|(r, _)| r.name());
            return cannot(format!(
                "cannot verify {iface}: none of the {} packets seen could be checked{}; send TCP or UDP \
                 traffic to it during the check",
                p.seen,
                why.map_or(String::new(), |w| format!(" (most: {w})"))
            ));
        }
        let table_queues = self.spec.table.iter().copied().max().unwrap_or(0) + 1;
        if self.spec.queues <= 1 || table_queues <= 1 {
            // Every packet lands on the one queue: only the hash can say more.
            return if h.compared > 0 && h.equal == h.compared {
                Verdict {
                    status: VerdictStatus::Follows,
                    text: format!(
                        "{iface} has one RX queue in use: the hash it reports equals rsskit's on all {} packets \
                         (its key and hashed fields are followed; the table is not exercised)",
                        h.compared
                    ),
                }
            } else {
                cannot(format!(
                    "cannot verify {iface}: one RX queue in use, so every packet lands on it, and the rxhash \
                     the kernel reports equals rsskit's hash on {} of {} packets (the driver reports no hash, \
                     or another one)",
                    h.equal, h.compared
                ))
            };
        }
        if f.disagreed == 0 && p.disagreed == 0 {
            Verdict {
                status: VerdictStatus::Follows,
                text: format!(
                    "{iface} follows its reported RSS table: {} of {} flows ({} packets) on the predicted queue",
                    f.agreed, f.checked, checked
                ),
            }
        } else {
            Verdict {
                status: VerdictStatus::DoesNotFollow,
                text: format!(
                    "{iface} does not follow its reported RSS table: {} of {} flows on the predicted queue \
                     ({} of {checked} packets); `rsskit apply` writes the table and makes it",
                    f.agreed, f.checked, p.agreed
                ),
            }
        }
    }
}

/// `udp 10.0.0.1:5000 -> 10.0.0.2:9000` (`[v6]:port` for IPv6, no ports
/// for other protocols).
pub fn flow_name(t: &FlowTuple) -> String {
    let ep = |a: IpAddr, p: u16| match (a, t.proto) {
        (_, L4Proto::Other(_)) => a.to_string(),
        (IpAddr::V6(_), _) => format!("[{a}]:{p}"),
        _ => format!("{a}:{p}"),
    };
    let proto = match t.proto {
        L4Proto::Tcp => "tcp".to_string(),
        L4Proto::Udp => "udp".to_string(),
        L4Proto::Other(n) => format!("proto {n}"),
    };
    format!("{proto} {} -> {}", ep(t.src, t.src_port), ep(t.dst, t.dst_port))
}

/// Packets by outcome: `seen == agreed + disagreed + unchecked`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PacketCounts {
    /// Frames captured and fed.
    pub seen: u64,
    /// On the predicted queue.
    pub agreed: u64,
    /// On another queue.
    pub disagreed: u64,
    /// Not checked (sum of `unchecked_by_reason`).
    pub unchecked: u64,
    /// Not checked, by reason.
    pub unchecked_by_reason: BTreeMap<String, u64>,
    /// Frames the kernel dropped on full capture rings (not seen).
    pub ring_drops: u64,
}

/// Checked flows: a flow agrees when every one of its packets did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FlowCounts {
    /// Flows with checked packets (at most [`MAX_FLOWS`]).
    pub checked: usize,
    /// Every packet on the predicted queue.
    pub agreed: usize,
    /// At least one packet elsewhere.
    pub disagreed: usize,
    /// Seen on more than one queue.
    pub split: usize,
    /// Checked packets of flows beyond [`MAX_FLOWS`] (counted per packet only).
    pub untracked_packets: u64,
}

/// The kernel's `rxhash` against rsskit's hash.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RxhashCounts {
    /// Checked packets with an rxhash.
    pub compared: u64,
    /// Equal to rsskit's Toeplitz hash (a driver that reports its NIC's
    /// hash, with the reported key; else the kernel's own flow hash).
    pub equal: u64,
}

/// One queue's packets.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct QueueCount {
    /// The RX queue.
    pub queue: usize,
    /// Frames seen on it.
    pub packets: u64,
    /// Checked frames the setup sends to it.
    pub predicted: u64,
}

/// Packets on one queue.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct QueuePackets {
    /// The RX queue.
    pub queue: u16,
    /// Packets.
    pub packets: u64,
}

/// A flow that was seen off its predicted queue.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Disagreement {
    /// The flow.
    pub flow: String,
    /// The hash type the reported fields give it.
    pub hash_type: &'static str,
    /// rsskit's hash with the reported key.
    pub hash: u32,
    /// The table entry it picks.
    pub table_index: usize,
    /// The queue that entry names.
    pub predicted_queue: u32,
    /// Where its packets were seen.
    pub observed: Vec<QueuePackets>,
    /// Its packets.
    pub packets: u64,
    /// The first rxhash the kernel reported for it.
    pub rxhash: Option<u32>,
}

/// The outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum VerdictStatus {
    /// Every checked flow on its predicted queue.
    Follows,
    /// At least one flow elsewhere.
    DoesNotFollow,
    /// Nothing to compare (no table, no checkable packet, one queue without a reported hash).
    CannotVerify,
}

/// The verdict and its sentence.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Verdict {
    /// What it is.
    pub status: VerdictStatus,
    /// One sentence naming the interface and the figures.
    pub text: String,
}

/// Everything `check --live` prints.
#[derive(Debug, Clone, Serialize)]
pub struct LiveReport {
    /// The interface.
    pub iface: String,
    /// RX queues captured.
    pub queues: usize,
    /// Entries of the reported table (0: none).
    pub table_size: usize,
    /// Hashed fields used (`None`: no table, nothing predicted).
    pub fields: Option<FlowFields>,
    /// Packets.
    pub packets: PacketCounts,
    /// Flows.
    pub flows: FlowCounts,
    /// rxhash comparison.
    pub rxhash: RxhashCounts,
    /// Per RX queue.
    pub per_queue: Vec<QueueCount>,
    /// The first disagreeing flows (at most [`MAX_SHOWN`]).
    pub disagreements: Vec<Disagreement>,
    /// The verdict.
    pub verdict: Verdict,
}

impl LiveReport {
    /// Whether the packet counts add up (`seen == agreed + disagreed + unchecked`).
    pub fn balanced(&self) -> bool {
        let p = &self.packets;
        p.seen == p.agreed + p.disagreed + p.unchecked
            && p.unchecked == p.unchecked_by_reason.values().sum::<u64>()
    }
}

#[cfg(test)]
mod tests;
