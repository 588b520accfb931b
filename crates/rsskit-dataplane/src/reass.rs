//! Bounded, sans-I/O IPv4 and IPv6 fragment reassembly.
//!
//! Time is passed in (`now` in nanoseconds of any monotonic clock); there
//! are no clocks, threads or sockets here. One [`Reassembler`] per worker:
//! all fragments of a datagram carry the same addresses, so the NIC's
//! 2-tuple hash sends them all to the same worker.
//!
//! # Policy
//! - **Key**: (source, destination, identification, protocol) for IPv4;
//!   (source, destination, identification) for IPv6.
//! - **Duplicates**: a fragment with the same offset, length and bytes as one
//!   already held is dropped alone (RFC 8200 4.5 allows this), the datagram
//!   stays.
//! - **Overlaps**: any other overlap (partial, contained, or same range with
//!   different bytes) drops the whole datagram. For IPv6 this is RFC 5722,
//!   which also requires dropping fragments of that datagram "not yet
//!   received": the key is kept as a tombstone until its timeout and later
//!   fragments for it are dropped ([`ReassDrop::DeadDatagram`]). For IPv4 the
//!   datagram is dropped and forgotten (IPv4 identifications wrap quickly,
//!   RFC 4963, so a tombstone could eat a later, legitimate datagram). This
//!   is stricter than Linux, which silently ignores a fragment that lies
//!   entirely inside data it already holds; we cannot tell such a fragment
//!   from an attempt to rewrite bytes without comparing, and a rewrite is the
//!   attack, so we drop.
//! - **Tiny fragments** (RFC 1858, RFC 3128, RFC 7112): a first fragment that
//!   does not contain the whole transport header (TCP 20 bytes, UDP / ICMP /
//!   ICMPv6 8) and an IPv4 TCP fragment at offset 8 are dropped. Any later
//!   fragment that overlaps the transport header is an overlap (above).
//! - **Bounds**: datagrams time out `timeout_*_ns` after their first fragment
//!   arrived (default 30 s IPv4, 60 s IPv6); at most `max_datagrams` keys are
//!   held (new ones are refused, like Linux over `ipfrag_high_thresh`; the
//!   held ones are not evicted, so an attacker cannot flush them); at most
//!   `max_frags_per_datagram` fragments per datagram (more drop the datagram,
//!   FreeBSD's `maxfragsperpacket`); at most `max_bytes` bytes accounted in
//!   total: the capacity of every datagram's buffers plus a fixed overhead
//!   per datagram. The payload of a datagram lives in one buffer (fragments
//!   are copied to their offsets), so a fragment far out (offset 65000) costs
//!   the buffer up to it: memory is bounded by what is allocated, not by what
//!   was received. A fragment that would pass `max_bytes` is dropped, and so is
//!   the datagram it belonged to (it could no longer complete).
//!   [`Reassembler::bytes_in_use`] never exceeds `max_bytes`.
//!
//! # Counting: every fragment accounted for
//! The counters count *frames* (fragments; [`Reassembler::push_frames`]
//! lets a caller give a packet a weight, e.g. an already reassembled
//! datagram standing for N captured frames). A datagram killed by an
//! overlap, an inconsistency or a limit, or that times out, drops every
//! fragment it held plus the one that killed it, all under that reason;
//! a completed datagram moves its fragments to `reassembled_frames`; the
//! fragments still waiting are `held`. At any time:
//! `fragments == reassembled_frames + dropped() + timeout_frames + held`.
//!
//! # Output
//! A completed datagram is returned as a whole IP packet ready to be parsed,
//! re-hashed with its full hash type and re-injected: IPv4 with the first
//! fragment's header (options included), total length set, flags and offset
//! cleared, checksum recomputed; IPv6 with the first fragment's unfragmentable
//! part, the fragment header removed (the preceding Next Header byte takes
//! its value) and the payload length fixed.

use crate::wire::ip::{proto, IpLayer};
use crate::wire::{self, DropReason, Ipv4Packet, Ipv6Packet, ParseConfig};
use core::net::IpAddr;
use std::collections::{BTreeMap, HashMap};

/// Nanoseconds per second.
pub const NS: u64 = 1_000_000_000;

/// Accounted cost of one datagram beyond its buffers (map entry, timer
/// entry, bookkeeping). A datagram's accounted bytes are this plus the
/// *capacity* of its payload buffer, its header copy and its range list.
pub const DATAGRAM_OVERHEAD: usize = 256;

/// Held-range records allocated with a datagram (more grow one at a time).
pub const PREALLOC_RANGES: usize = 8;

/// Most room kept in front of the payload in a datagram's buffer, so that
/// the header can be written in front of it on completion without a new
/// allocation or a move.
const GAP: usize = 64;

/// Reassembly limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReassConfig {
    /// IPv4 timeout, ns (default 30 s, Linux `ipfrag_time`).
    pub timeout_v4_ns: u64,
    /// IPv6 timeout, ns (default 60 s, RFC 8200).
    pub timeout_v6_ns: u64,
    /// M: datagrams (including IPv6 tombstones) held at once.
    pub max_datagrams: usize,
    /// F: fragments per datagram.
    pub max_frags_per_datagram: usize,
    /// B: accounted bytes in total.
    pub max_bytes: usize,
}

impl Default for ReassConfig {
    fn default() -> Self {
        ReassConfig {
            timeout_v4_ns: 30 * NS,
            timeout_v6_ns: 60 * NS,
            max_datagrams: 1024,
            max_frags_per_datagram: 64,
            max_bytes: 4 << 20,
        }
    }
}

/// Why a fragment was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReassDrop {
    /// Exact duplicate of a held fragment (the datagram is kept).
    Duplicate,
    /// Overlap: the whole datagram was dropped.
    Overlap,
    /// Fragment of an IPv6 datagram already dropped for overlap (RFC 5722).
    DeadDatagram,
    /// First fragment too short for the transport header, or IPv4 TCP at offset 8.
    TinyFragment,
    /// Lengths disagree (two different last fragments, data past the end):
    /// the datagram was dropped.
    Inconsistent,
    /// The reassembled packet would exceed 65535 bytes: dropped.
    TooBig,
    /// `max_datagrams` reached: a new datagram was refused.
    TooManyDatagrams,
    /// `max_frags_per_datagram` passed: the datagram was dropped.
    TooManyFragments,
    /// `max_bytes` would be passed: the fragment (and its datagram) dropped.
    MemoryLimit,
    /// The packet did not parse ([`Reassembler::push_bytes`] only).
    Malformed(DropReason),
}

/// Result of offering one packet to the reassembler.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReassOutcome {
    /// Not a fragment: process the packet as it is.
    NotFragment,
    /// Held, waiting for the rest.
    Held,
    /// The datagram is complete: the whole IP packet.
    Complete(Vec<u8>),
    /// Dropped, see the reason.
    Dropped(ReassDrop),
}

/// Reassembly counters (per worker). The per-reason drop counters and
/// `fragments`, `reassembled_frames`, `timeout_frames` and `held` count
/// frames (see the [module docs](self)); `reassembled` and `timeouts`
/// count datagrams.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ReassCounters {
    /// Fragments offered (frames).
    pub fragments: u64,
    /// Datagrams completed.
    pub reassembled: u64,
    /// Frames consumed into completed datagrams.
    pub reassembled_frames: u64,
    /// Datagrams that timed out incomplete.
    pub timeouts: u64,
    /// Frames those datagrams held.
    pub timeout_frames: u64,
    /// Frames held now, waiting for the rest of their datagram.
    pub held: u64,
    /// Fragments dropped as [`ReassDrop::Duplicate`].
    pub duplicates: u64,
    /// Fragments dropped as [`ReassDrop::Overlap`].
    pub overlaps: u64,
    /// Fragments dropped as [`ReassDrop::DeadDatagram`].
    pub dead: u64,
    /// Fragments dropped as [`ReassDrop::TinyFragment`].
    pub tiny: u64,
    /// Fragments dropped as [`ReassDrop::Inconsistent`].
    pub inconsistent: u64,
    /// Fragments dropped as [`ReassDrop::TooBig`].
    pub too_big: u64,
    /// Fragments dropped as [`ReassDrop::TooManyDatagrams`].
    pub too_many_datagrams: u64,
    /// Fragments dropped as [`ReassDrop::TooManyFragments`].
    pub too_many_fragments: u64,
    /// Fragments dropped as [`ReassDrop::MemoryLimit`].
    pub memory_limit: u64,
    /// Fragments dropped as [`ReassDrop::Malformed`].
    pub malformed: u64,
    /// Highest `bytes_in_use` seen.
    pub bytes_high_water: usize,
}

impl ReassCounters {
    fn count(&mut self, d: ReassDrop, frames: u64) {
        let c = match d {
            ReassDrop::Duplicate => &mut self.duplicates,
            ReassDrop::Overlap => &mut self.overlaps,
            ReassDrop::DeadDatagram => &mut self.dead,
            ReassDrop::TinyFragment => &mut self.tiny,
            ReassDrop::Inconsistent => &mut self.inconsistent,
            ReassDrop::TooBig => &mut self.too_big,
            ReassDrop::TooManyDatagrams => &mut self.too_many_datagrams,
            ReassDrop::TooManyFragments => &mut self.too_many_fragments,
            ReassDrop::MemoryLimit => &mut self.memory_limit,
            ReassDrop::Malformed(_) => &mut self.malformed,
        };
        *c += frames;
    }

    /// Frames dropped for any reason but a timeout (those are in
    /// `timeout_frames`).
    pub fn dropped(&self) -> u64 {
        self.duplicates
            + self.overlaps
            + self.dead
            + self.tiny
            + self.inconsistent
            + self.too_big
            + self.too_many_datagrams
            + self.too_many_fragments
            + self.memory_limit
            + self.malformed
    }

    /// Adds another set of counters (high water: the maximum).
    pub fn merge(&mut self, o: &ReassCounters) {
        self.fragments += o.fragments;
        self.reassembled += o.reassembled;
        self.reassembled_frames += o.reassembled_frames;
        self.timeouts += o.timeouts;
        self.timeout_frames += o.timeout_frames;
        self.held += o.held;
        self.duplicates += o.duplicates;
        self.overlaps += o.overlaps;
        self.dead += o.dead;
        self.tiny += o.tiny;
        self.inconsistent += o.inconsistent;
        self.too_big += o.too_big;
        self.too_many_datagrams += o.too_many_datagrams;
        self.too_many_fragments += o.too_many_fragments;
        self.memory_limit += o.memory_limit;
        self.malformed += o.malformed;
        self.bytes_high_water = self.bytes_high_water.max(o.bytes_high_water);
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Key {
    V4 { src: [u8; 4], dst: [u8; 4], id: u16, proto: u8 },
    V6 { src: [u8; 16], dst: [u8; 16], id: u32 },
}

impl core::hash::Hash for Key {
    /// One `write` of the packed key: the derived impl feeds SipHash field by
    /// field (discriminant, array lengths...), which was the largest single
    /// cost per fragment (bench_wire, callgrind).
    fn hash<H: core::hash::Hasher>(&self, state: &mut H) {
        let mut b = [0u8; 37];
        let n = match *self {
            Key::V4 { src, dst, id, proto } => {
                b[0..4].copy_from_slice(&src);
                b[4..8].copy_from_slice(&dst);
                b[8..10].copy_from_slice(&id.to_be_bytes());
                b[10] = proto;
                11
            }
            Key::V6 { src, dst, id } => {
                b[0..16].copy_from_slice(&src);
                b[16..32].copy_from_slice(&dst);
                b[32..36].copy_from_slice(&id.to_be_bytes());
                b[36] = 6;
                37
            }
        };
        state.write(&b[..n]);
    }
}

#[derive(Debug)]
struct Datagram {
    /// `gap` bytes of room, then the fragmentable payload at its offsets;
    /// its length is `gap` + the highest fragment end seen.
    buf: Vec<u8>,
    /// Room in front of the payload in `buf`: the header length if the first
    /// fragment was there when `buf` was allocated, else the usual one (20
    /// for IPv4, 40 for IPv6); at most `GAP`.
    gap: usize,
    /// Held byte ranges of the payload, sorted, never overlapping.
    ranges: Vec<(u32, u32)>,
    /// Fragmentable-part length, known once the last fragment arrived.
    total: Option<u32>,
    /// Sum of held fragment lengths.
    received: u32,
    /// From the first fragment: IPv4 header, or the IPv6 unfragmentable part.
    header: Vec<u8>,
    /// IPv6: index of the Next Header byte naming the fragment header.
    nh_at: u16,
    /// IPv6: the fragment header's Next Header (of the first fragment).
    next_header: u8,
    /// Timer entry.
    timer: (u64, u64),
    /// Accounted bytes.
    cost: usize,
    /// IPv6 tombstone after an overlap (RFC 5722).
    dead: bool,
    /// Frames held (the weights of the stored fragments).
    frames: u64,
}

impl Datagram {
    /// Accounted bytes of this datagram as allocated now.
    fn cost_now(&self) -> usize {
        DATAGRAM_OVERHEAD
            + self.buf.capacity()
            + self.header.capacity()
            + self.ranges.capacity() * core::mem::size_of::<(u32, u32)>()
    }
}

/// The reassembler. See the [module docs](self) for the policy.
#[derive(Debug)]
pub struct Reassembler {
    cfg: ReassConfig,
    map: HashMap<Key, Datagram>,
    timers: BTreeMap<(u64, u64), Key>,
    seq: u64,
    bytes: usize,
    counters: ReassCounters,
    /// Frames of the datagram last returned as [`ReassOutcome::Complete`].
    last_complete_frames: u64,
}

/// Minimum transport header a first fragment must hold (RFC 1858 / 3128 / 7112).
fn min_l4(proto_num: u8) -> usize {
    match proto_num {
        proto::TCP => 20,
        proto::UDP | proto::ICMP | proto::ICMPV6 => 8,
        _ => 0,
    }
}

impl Reassembler {
    /// An empty reassembler with limits `cfg`.
    pub fn new(cfg: ReassConfig) -> Self {
        Reassembler {
            cfg,
            map: HashMap::new(),
            timers: BTreeMap::new(),
            seq: 0,
            bytes: 0,
            counters: ReassCounters::default(),
            last_complete_frames: 0,
        }
    }

    /// The limits.
    pub fn config(&self) -> &ReassConfig {
        &self.cfg
    }

    /// Counters so far.
    pub fn counters(&self) -> &ReassCounters {
        &self.counters
    }

    /// Frames (fragments, weighted) of the datagram the last
    /// [`ReassOutcome::Complete`] returned.
    pub fn last_complete_frames(&self) -> u64 {
        self.last_complete_frames
    }

    /// Accounted bytes held now (always <= `max_bytes`).
    pub fn bytes_in_use(&self) -> usize {
        self.bytes
    }

    /// Datagrams (and tombstones) held now.
    pub fn in_progress(&self) -> usize {
        self.map.len()
    }

    /// Earliest pending timeout, if any (for the caller's timer).
    pub fn next_deadline(&self) -> Option<u64> {
        self.timers.keys().next().map(|k| k.0)
    }

    /// Drops every datagram whose timeout is at or before `now`.
    pub fn expire(&mut self, now: u64) {
        while let Some((&(deadline, seq), &key)) = self.timers.iter().next() {
            if deadline > now {
                break;
            }
            self.timers.remove(&(deadline, seq));
            if let Some(d) = self.map.remove(&key) {
                self.bytes -= d.cost;
                if !d.dead {
                    self.counters.timeouts += 1;
                    self.counters.timeout_frames += d.frames;
                    self.counters.held -= d.frames;
                }
            }
        }
    }

    /// Parses `ip` (an IPv4 or IPv6 packet) and offers it; a packet that does
    /// not parse is [`ReassDrop::Malformed`].
    pub fn push_bytes(&mut self, ip: &[u8], parse: &ParseConfig, now: u64) -> ReassOutcome {
        match wire::ip::parse_ip_any(ip, 0, parse) {
            Ok(layer) => self.push(&layer, now),
            Err(r) => {
                self.counters.fragments += 1;
                self.drop_frag(ReassDrop::Malformed(r), 1)
            }
        }
    }

    /// Offers one parsed IP packet. Not-fragments pass straight through.
    pub fn push(&mut self, ip: &IpLayer<'_>, now: u64) -> ReassOutcome {
        self.push_frames(ip, now, 1)
    }

    /// [`Reassembler::push`] of a packet that stands for `frames` frames
    /// (a packet re-injected after an earlier reassembly): the counters
    /// count it that many times, and a completed datagram's weight is the
    /// sum of its fragments' ([`Reassembler::last_complete_frames`]).
    pub fn push_frames(&mut self, ip: &IpLayer<'_>, now: u64, frames: u64) -> ReassOutcome {
        let Some(fi) = ip.frag else {
            return ReassOutcome::NotFragment;
        };
        self.expire(now);
        let w = frames;
        self.counters.fragments += w;
        let key = match (ip.src, ip.dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                Key::V4 { src: s.octets(), dst: d.octets(), id: fi.id as u16, proto: ip.proto }
            }
            (IpAddr::V6(s), IpAddr::V6(d)) => Key::V6 { src: s.octets(), dst: d.octets(), id: fi.id },
            _ => return self.drop_frag(ReassDrop::Malformed(DropReason::BadIpVersion), w),
        };
        let v6 = ip.is_ipv6();
        let data = ip.fragment_data();
        let off = u32::from(fi.offset);
        let end = off + data.len() as u32;

        // Tiny fragments (RFC 1858 / 3128 / 7112).
        if fi.is_first() {
            // Bytes of the fragmentable part before the transport header
            // (IPv6 extension headers after the fragment header).
            let before_l4 = if v6 { ip.header_len - (fi.frag_hdr_at as usize + 8) } else { 0 };
            if data.len() < before_l4 + min_l4(ip.proto) {
                return self.drop_frag(ReassDrop::TinyFragment, w);
            }
        } else if !v6 && ip.proto == proto::TCP && off == 8 {
            return self.drop_frag(ReassDrop::TinyFragment, w);
        }

        // Find or create the datagram.
        if !self.map.contains_key(&key) {
            if self.map.len() >= self.cfg.max_datagrams {
                return self.drop_frag(ReassDrop::TooManyDatagrams, w);
            }
            let fresh = DATAGRAM_OVERHEAD + PREALLOC_RANGES * core::mem::size_of::<(u32, u32)>();
            if self.bytes + fresh > self.cfg.max_bytes {
                return self.drop_frag(ReassDrop::MemoryLimit, w);
            }
            let timeout = if v6 { self.cfg.timeout_v6_ns } else { self.cfg.timeout_v4_ns };
            self.seq += 1;
            let timer = (now.saturating_add(timeout), self.seq);
            self.timers.insert(timer, key);
            self.map.insert(
                key,
                Datagram {
                    buf: Vec::new(),
                    gap: if v6 { 40 } else { 20 },
                    ranges: Vec::with_capacity(PREALLOC_RANGES),
                    total: None,
                    received: 0,
                    header: Vec::new(),
                    nh_at: 0,
                    next_header: 0,
                    timer,
                    cost: 0,
                    dead: false,
                    frames: 0,
                },
            );
            if let Some(d) = self.map.get_mut(&key) {
                d.cost = d.cost_now();
                self.bytes += d.cost;
            }
            if self.bytes > self.cfg.max_bytes {
                return self.kill(key, false, ReassDrop::MemoryLimit, w);
            }
        }
        let max_frags = self.cfg.max_frags_per_datagram;
        let room = self.cfg.max_bytes - self.bytes;
        let Some(d) = self.map.get_mut(&key) else {
            return self.drop_frag(ReassDrop::Malformed(DropReason::BadFragment), w);
        };
        if d.dead {
            return self.drop_frag(ReassDrop::DeadDatagram, w);
        }

        if d.buf.capacity() == 0 && fi.is_first() {
            let hl = if v6 { fi.frag_hdr_at as usize } else { ip.header_len };
            d.gap = hl.min(GAP);
        }
        let gap = d.gap;
        // Where it goes: first held range starting at or after `off`.
        let i = d.ranges.partition_point(|r| r.0 < off);
        if let Some(&(s, e)) = d.ranges.get(i) {
            if s == off && e == end {
                let held = &d.buf[gap + s as usize..gap + e as usize];
                if held == data && (fi.more || d.total == Some(end)) {
                    return self.drop_frag(ReassDrop::Duplicate, w);
                }
                return self.kill(key, v6, ReassDrop::Overlap, w);
            }
        }
        let overlaps_prev = i > 0 && d.ranges[i - 1].1 > off;
        let overlaps_next = d.ranges.get(i).is_some_and(|r| r.0 < end);
        if overlaps_prev || overlaps_next {
            return self.kill(key, v6, ReassDrop::Overlap, w);
        }
        // Length consistency.
        if !fi.more {
            if d.total.is_some_and(|t| t != end) || d.ranges.last().is_some_and(|r| r.1 > end) {
                return self.kill(key, v6, ReassDrop::Inconsistent, w);
            }
        } else if d.total.is_some_and(|t| end > t) {
            return self.kill(key, v6, ReassDrop::Inconsistent, w);
        }
        if d.ranges.len() >= max_frags {
            return self.kill(key, false, ReassDrop::TooManyFragments, w);
        }
        let header: &[u8] = if fi.is_first() {
            if v6 {
                &ip.bytes[..fi.frag_hdr_at as usize]
            } else {
                &ip.bytes[..ip.header_len]
            }
        } else {
            &[]
        };

        // Memory: the buffer grows to the known total, or doubles (capped at
        // the largest possible payload) while the total is unknown.
        let need = gap + end as usize;
        let total = if !fi.more { Some(end) } else { d.total };
        let range_cap =
            if d.ranges.len() == d.ranges.capacity() { d.ranges.capacity() + 1 } else { d.ranges.capacity() };
        let cost_with = |cap: usize| {
            DATAGRAM_OVERHEAD
                + cap
                + d.header.capacity().max(header.len())
                + range_cap * core::mem::size_of::<(u32, u32)>()
        };
        let fits = |cap: usize| cost_with(cap) <= d.cost || cost_with(cap) - d.cost <= room;
        let target_cap = if need <= d.buf.capacity() {
            d.buf.capacity()
        } else {
            // Grow to the known total; while it is unknown, to room for 8
            // fragments of this size at first (a 9000-byte datagram in
            // MTU-sized fragments needs 7), doubling after, if that fits in
            // the memory bound; else to exactly what this fragment needs.
            let want = match total {
                Some(t) => gap + t as usize,
                None => need.max(2 * d.buf.capacity()).max(gap + 8 * data.len()).min(gap + 65535),
            }
            .max(need);
            if fits(want) {
                want
            } else {
                need
            }
        };
        if !fits(target_cap) {
            return self.kill(key, false, ReassDrop::MemoryLimit, w);
        }

        // Store.
        if target_cap > d.buf.capacity() {
            d.buf.reserve_exact(target_cap - d.buf.len());
        }
        if gap + off as usize == d.buf.len() {
            // Appending (fragments in order): no zero fill first.
            d.buf.extend_from_slice(data);
        } else {
            if gap + off as usize > d.buf.len() {
                d.buf.resize(gap + off as usize, 0);
            }
            if need > d.buf.len() {
                d.buf.resize(need, 0);
            }
            d.buf[gap + off as usize..need].copy_from_slice(data);
        }
        if d.ranges.len() == d.ranges.capacity() {
            d.ranges.reserve_exact(1);
        }
        d.ranges.insert(i, (off, end));
        d.received += data.len() as u32;
        d.frames += w;
        self.counters.held += w;
        if fi.is_first() {
            d.header = header.to_vec();
            d.nh_at = fi.nh_at;
            // The first fragment's own Next Header from its fragment header.
            d.next_header = if v6 { ip.bytes[fi.frag_hdr_at as usize] } else { 0 };
        }
        d.total = total;
        let cost = d.cost_now();
        self.bytes = self.bytes - d.cost + cost;
        d.cost = cost;
        if self.bytes > self.cfg.max_bytes {
            // Only if the allocator handed out more than asked for (this
            // fragment is already among the held ones).
            return self.kill(key, false, ReassDrop::MemoryLimit, 0);
        }
        self.counters.bytes_high_water = self.counters.bytes_high_water.max(self.bytes);

        match d.total {
            Some(t) if d.received == t => self.complete(key, v6),
            _ => ReassOutcome::Held,
        }
    }

    /// Counts `frames` dropped frames under `r`.
    fn drop_frag(&mut self, r: ReassDrop, frames: u64) -> ReassOutcome {
        self.counters.count(r, frames);
        ReassOutcome::Dropped(r)
    }

    /// Drops a datagram's fragments (all it held plus the `frames` of the
    /// one that killed it, under `r`); an IPv6 overlap leaves a tombstone.
    fn kill(&mut self, key: Key, tombstone: bool, r: ReassDrop, frames: u64) -> ReassOutcome {
        let held = self.map.get(&key).map_or(0, |d| d.frames);
        self.counters.held -= held;
        if tombstone && matches!(r, ReassDrop::Overlap) {
            if let Some(d) = self.map.get_mut(&key) {
                d.frames = 0;
                d.buf = Vec::new();
                d.ranges = Vec::new();
                d.header = Vec::new();
                d.dead = true;
                let cost = d.cost_now();
                self.bytes = self.bytes - d.cost + cost;
                d.cost = cost;
            }
        } else {
            self.remove(key);
        }
        self.drop_frag(r, held + frames)
    }

    fn remove(&mut self, key: Key) -> Option<Datagram> {
        let d = self.map.remove(&key)?;
        self.timers.remove(&d.timer);
        self.bytes -= d.cost;
        Some(d)
    }

    fn complete(&mut self, key: Key, v6: bool) -> ReassOutcome {
        let Some(d) = self.remove(key) else {
            return ReassOutcome::Held;
        };
        self.counters.held -= d.frames;
        self.last_complete_frames = d.frames;
        let hl = d.header.len();
        let gap = d.gap;
        let mut out = d.buf;
        if hl <= gap {
            // Header into the gap (usually exactly its size), then drop what
            // is left of the gap (a memmove within the buffer, if any).
            out[gap - hl..gap].copy_from_slice(&d.header);
            out.drain(..gap - hl);
        } else {
            let mut v = Vec::with_capacity(hl + out.len() - gap);
            v.extend_from_slice(&d.header);
            v.extend_from_slice(&out[gap..]);
            out = v;
        }
        let hl = d.header.len();
        if v6 {
            let plen = out.len() - 40;
            if plen > 65535 || hl < 40 {
                return self.drop_frag(ReassDrop::TooBig, d.frames);
            }
            Ipv6Packet::new_unchecked(&mut out[..]).set_payload_len(plen as u16);
            out[usize::from(d.nh_at)] = d.next_header;
        } else {
            if out.len() > 65535 || hl < 20 {
                return self.drop_frag(ReassDrop::TooBig, d.frames);
            }
            let tl = out.len() as u16;
            let mut ip = Ipv4Packet::new_unchecked(&mut out[..]);
            ip.set_total_len(tl);
            // The reassembled datagram is whole: no MF, offset 0, and DF
            // cleared as before.
            ip.set_flags_frag(false, false, 0);
            ip.fill_checksum();
        }
        self.counters.reassembled += 1;
        self.counters.reassembled_frames += d.frames;
        ReassOutcome::Complete(out)
    }
}

#[cfg(test)]
mod tests;
