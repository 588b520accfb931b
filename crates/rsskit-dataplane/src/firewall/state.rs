//! One worker's state table: no locks, no atomics.
//!
//! - Lookup: a `HashMap` from the flow's *normalized* key (lower endpoint
//!   first) to a slot, so either direction of a flow finds the same state.
//!   The map uses the standard library's keyed SipHash: the keys are chosen
//!   by whoever sends packets, and a firewall must not be open to
//!   hash-flooding.
//! - Storage: a slab of [`State`]s with a free list (slots are reused, the
//!   table never shrinks below its high-water mark).
//! - Expiry: one FIFO list per timeout class (TCP opening, established,
//!   closed; UDP; ICMP; other). Every state in a list has the same lifetime,
//!   and a state that sees a packet moves to the tail of its (possibly new)
//!   class list, so each list is sorted by expiry time and [`StateTable::expire`]
//!   pops heads until the first live one: O(expired + classes), never a scan
//!   of the whole table. Requires a non-decreasing clock.
//! - TCP tracking follows ipfw's `dyn` rules: a state is *opening* until a
//!   SYN was seen in both directions, *established* after, *closed* once both
//!   sides sent FIN or either sent RST; each class has its own lifetime.
//!
//! Slave states of a redirection ([`crate::firewall::redirect`]) are in no
//! list: they never expire on their own; their master removes them.

use super::redirect::Xlat;
use core::net::IpAddr;
use std::collections::HashMap;

/// A flow key, normalized: `(a, ap) <= (b, bp)`. ICMP and other protocols
/// without ports use port 0.
///
/// `Hash` feeds the hasher one packed 38-byte buffer instead of the
/// derived field-by-field calls (the enum tags and pieces of two `IpAddr`s
/// are a dozen `write`s): a third of the lookup cost in the profile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowKey {
    /// The lower endpoint's address (the key is normalized: both directions give one key).
    pub a: IpAddr,
    /// The higher endpoint's address.
    pub b: IpAddr,
    /// Port of `a`.
    pub ap: u16,
    /// Port of `b`.
    pub bp: u16,
    /// IP protocol number.
    pub proto: u8,
}

impl core::hash::Hash for FlowKey {
    #[inline]
    fn hash<H: core::hash::Hasher>(&self, h: &mut H) {
        let mut b = [0u8; 38];
        let fam = |a: &IpAddr, out: &mut [u8]| match a {
            IpAddr::V4(v) => {
                out[..4].copy_from_slice(&v.octets());
                0u8
            }
            IpAddr::V6(v) => {
                out.copy_from_slice(&v.octets());
                1u8
            }
        };
        let fa = fam(&self.a, &mut b[0..16]);
        let fb = fam(&self.b, &mut b[16..32]);
        b[32..34].copy_from_slice(&self.ap.to_ne_bytes());
        b[34..36].copy_from_slice(&self.bp.to_ne_bytes());
        b[36] = self.proto;
        b[37] = fa | fb << 1;
        h.write(&b);
    }
}

impl FlowKey {
    /// The key of a packet `src:sp -> dst:dp`, and whether `src` is `a`.
    #[inline]
    pub fn of(src: IpAddr, sp: u16, dst: IpAddr, dp: u16, proto: u8) -> (FlowKey, bool) {
        if (src, sp) <= (dst, dp) {
            (FlowKey { a: src, b: dst, ap: sp, bp: dp, proto }, true)
        } else {
            (FlowKey { a: dst, b: src, ap: dp, bp: sp, proto }, false)
        }
    }
}

/// Lifetimes in milliseconds (ipfw's `dyn_*_lifetime` defaults).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// TCP before a SYN was seen both ways (ipfw: 20 s).
    pub tcp_opening: u64,
    /// TCP established, also half-closed (ipfw: 300 s).
    pub tcp_established: u64,
    /// TCP after FIN both ways or RST (ipfw: 1 s).
    pub tcp_closed: u64,
    /// UDP (ipfw: 10 s).
    pub udp: u64,
    /// ICMP (ipfw: 10 s).
    pub icmp: u64,
    /// Anything else (ipfw: 10 s).
    pub other: u64,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            tcp_opening: 20_000,
            tcp_established: 300_000,
            tcp_closed: 1_000,
            udp: 10_000,
            icmp: 10_000,
            other: 10_000,
        }
    }
}

/// Timeout class of a state (index of its expiry list).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Class {
    /// TCP, before both sides' SYNs were seen.
    TcpOpening = 0,
    /// TCP, both sides sent SYN.
    TcpEstablished = 1,
    /// TCP, after an RST or a FIN from each side.
    TcpClosed = 2,
    /// UDP.
    Udp = 3,
    /// ICMP.
    Icmp = 4,
    /// Any other protocol.
    Other = 5,
    /// In no list: a redirection's slave, removed by its master only.
    Pinned = 6,
    /// A free slot.
    Free = 7,
}

const LISTS: usize = 6;

impl Timeouts {
    fn of(&self, c: Class) -> u64 {
        match c {
            Class::TcpOpening => self.tcp_opening,
            Class::TcpEstablished => self.tcp_established,
            Class::TcpClosed => self.tcp_closed,
            Class::Udp => self.udp,
            Class::Icmp => self.icmp,
            Class::Other | Class::Pinned | Class::Free => self.other,
        }
    }
}

/// TCP flag bits tracked per state, relative to the flow's initiator.
pub mod tcp {
    /// The initiator sent SYN.
    pub const FWD_SYN: u8 = 1;
    /// The responder sent SYN.
    pub const REV_SYN: u8 = 2;
    /// The initiator sent FIN.
    pub const FWD_FIN: u8 = 4;
    /// The responder sent FIN.
    pub const REV_FIN: u8 = 8;
    /// Either side sent RST.
    pub const RST: u8 = 16;
}

const TH_FIN: u8 = 0x01;
const TH_SYN: u8 = 0x02;
const TH_RST: u8 = 0x04;

const NIL: u32 = u32::MAX;

/// One dynamic state.
#[derive(Debug)]
pub struct State {
    /// The flow.
    pub key: FlowKey,
    /// Expiry time (ms); meaningless for pinned states.
    pub expire: u64,
    prev: u32,
    next: u32,
    /// Number of the rule that created the state (counters of state hits go to it).
    pub rule: u16,
    /// Whether the flow's initiator is `key.a`.
    pub init_is_a: bool,
    /// Timeout class (which expiry list).
    pub class: Class,
    /// [`tcp`] bits.
    pub tcp: u8,
    /// Index of this state's `limit` track in the worker's track table, or `u32::MAX`.
    pub track: u32,
    /// Address translation of a redirected flow.
    pub xlat: Option<Box<Xlat>>,
}

/// A state removed from a table (expired, closed or deleted), for the
/// caller's bookkeeping (tracks, slave deletion, counters).
#[derive(Debug)]
pub struct Removed {
    /// The flow.
    pub key: FlowKey,
    /// Number of the rule that created it.
    pub rule: u16,
    /// Its `limit` track index, or `u32::MAX`.
    pub track: u32,
    /// Translation, if it was part of a redirection.
    pub xlat: Option<Box<Xlat>>,
}

/// Per-worker state table.
#[derive(Debug)]
pub struct StateTable {
    map: HashMap<FlowKey, u32>,
    slots: Vec<State>,
    free: Vec<u32>,
    heads: [u32; LISTS],
    tails: [u32; LISTS],
    timeouts: Timeouts,
    /// States removed by [`StateTable::expire`] so far.
    pub expired_total: u64,
}

/// What [`StateTable::insert`] needs about a new state.
#[derive(Debug)]
pub struct NewState {
    /// The flow.
    pub key: FlowKey,
    /// Whether the flow's initiator is `key.a`.
    pub init_is_a: bool,
    /// Number of the rule creating it.
    pub rule: u16,
    /// Its `limit` track index, or `u32::MAX`.
    pub track: u32,
    /// Translation of a redirected flow.
    pub xlat: Option<Box<Xlat>>,
    /// A pinned state (redirection slave) never expires on its own.
    pub pinned: bool,
}

impl StateTable {
    /// An empty table.
    pub fn new(timeouts: Timeouts) -> Self {
        StateTable {
            map: HashMap::new(),
            slots: Vec::new(),
            free: Vec::new(),
            heads: [NIL; LISTS],
            tails: [NIL; LISTS],
            timeouts,
            expired_total: 0,
        }
    }

    /// The lifetimes in use.
    pub fn timeouts(&self) -> &Timeouts {
        &self.timeouts
    }

    /// Live states.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether there are no states.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Slab capacity (live + free slots).
    pub fn slots(&self) -> usize {
        self.slots.len()
    }

    /// The slot of `key`'s state.
    #[inline]
    pub fn lookup(&self, key: &FlowKey) -> Option<u32> {
        self.map.get(key).copied()
    }

    /// The state in slot `id` (must be live).
    #[inline]
    pub fn get(&self, id: u32) -> &State {
        &self.slots[id as usize]
    }

    /// Mutable state in slot `id` (must be live).
    #[inline]
    pub fn get_mut(&mut self, id: u32) -> &mut State {
        &mut self.slots[id as usize]
    }

    /// Inserts a state for a first packet with TCP flags `flags` (0 for
    /// non-TCP). The key must not be present. Returns its slot.
    pub fn insert(&mut self, n: NewState, flags: u8, now: u64) -> u32 {
        let st = State {
            key: n.key,
            expire: 0,
            prev: NIL,
            next: NIL,
            rule: n.rule,
            init_is_a: n.init_is_a,
            class: Class::Free,
            tcp: 0,
            track: n.track,
            xlat: n.xlat,
        };
        let id = match self.free.pop() {
            Some(id) => {
                self.slots[id as usize] = st;
                id
            }
            None => {
                self.slots.push(st);
                (self.slots.len() - 1) as u32
            }
        };
        self.map.insert(n.key, id);
        if n.pinned {
            self.slots[id as usize].class = Class::Pinned;
        } else {
            self.touch(id, true, flags, now);
        }
        id
    }

    /// Records a packet on state `id` (`fwd`: sent by the initiator) and
    /// refreshes its expiry. Returns the new class.
    #[inline]
    pub fn touch(&mut self, id: u32, fwd: bool, flags: u8, now: u64) -> Class {
        let s = &mut self.slots[id as usize];
        if s.class == Class::Pinned {
            return Class::Pinned;
        }
        let class = match s.key.proto {
            6 => {
                if flags & TH_SYN != 0 {
                    s.tcp |= if fwd { tcp::FWD_SYN } else { tcp::REV_SYN };
                }
                if flags & TH_FIN != 0 {
                    s.tcp |= if fwd { tcp::FWD_FIN } else { tcp::REV_FIN };
                }
                if flags & TH_RST != 0 {
                    s.tcp |= tcp::RST;
                }
                let b = s.tcp;
                if b & tcp::RST != 0 || b & (tcp::FWD_FIN | tcp::REV_FIN) == tcp::FWD_FIN | tcp::REV_FIN {
                    Class::TcpClosed
                } else if b & (tcp::FWD_SYN | tcp::REV_SYN) == tcp::FWD_SYN | tcp::REV_SYN {
                    Class::TcpEstablished
                } else {
                    Class::TcpOpening
                }
            }
            17 => Class::Udp,
            1 | 58 => Class::Icmp,
            _ => Class::Other,
        };
        let old = s.class;
        s.expire = now + self.timeouts.of(class);
        if old == class && self.tails[class as usize] == id {
            return class;
        }
        if old != Class::Free {
            self.unlink(id);
        }
        self.slots[id as usize].class = class;
        self.push_back(id);
        class
    }

    fn unlink(&mut self, id: u32) {
        let (prev, next, c) = {
            let s = &self.slots[id as usize];
            (s.prev, s.next, s.class as usize)
        };
        if c >= LISTS {
            return;
        }
        if prev == NIL {
            self.heads[c] = next;
        } else {
            self.slots[prev as usize].next = next;
        }
        if next == NIL {
            self.tails[c] = prev;
        } else {
            self.slots[next as usize].prev = prev;
        }
        let s = &mut self.slots[id as usize];
        s.prev = NIL;
        s.next = NIL;
    }

    fn push_back(&mut self, id: u32) {
        let c = self.slots[id as usize].class as usize;
        let tail = self.tails[c];
        {
            let s = &mut self.slots[id as usize];
            s.prev = tail;
            s.next = NIL;
        }
        if tail == NIL {
            self.heads[c] = id;
        } else {
            self.slots[tail as usize].next = id;
        }
        self.tails[c] = id;
    }

    /// Removes state `id`.
    pub fn remove(&mut self, id: u32) -> Removed {
        self.unlink(id);
        let s = &mut self.slots[id as usize];
        s.class = Class::Free;
        let r = Removed { key: s.key, rule: s.rule, track: s.track, xlat: s.xlat.take() };
        self.map.remove(&r.key);
        self.free.push(id);
        r
    }

    /// Removes the state of `key` if present.
    pub fn remove_key(&mut self, key: &FlowKey) -> Option<Removed> {
        let id = self.lookup(key)?;
        Some(self.remove(id))
    }

    /// Removes every state whose expiry is `<= now`, at most `budget`,
    /// handing each to `f`. Cost: O(removed + classes).
    pub fn expire(&mut self, now: u64, budget: usize, mut f: impl FnMut(Removed)) -> usize {
        let mut n = 0;
        for c in 0..LISTS {
            while n < budget {
                let h = self.heads[c];
                if h == NIL || self.slots[h as usize].expire > now {
                    break;
                }
                f(self.remove(h));
                n += 1;
            }
        }
        self.expired_total += n as u64;
        n
    }

    /// The earliest expiry over all lists, if any state can expire.
    pub fn next_expiry(&self) -> Option<u64> {
        self.heads.iter().filter(|&&h| h != NIL).map(|&h| self.slots[h as usize].expire).min()
    }

    /// Live states per class (for statistics and tests).
    pub fn class_counts(&self) -> [usize; 8] {
        let mut c = [0usize; 8];
        for &id in self.map.values() {
            c[self.slots[id as usize].class as usize] += 1;
        }
        c
    }

    /// Checks the list invariants (every live state in exactly the list of its
    /// class, lists sorted by expiry). For tests; O(n).
    pub fn check_invariants(&self) -> Result<(), String> {
        let mut seen = 0usize;
        for c in 0..LISTS {
            let mut prev = NIL;
            let mut last = 0u64;
            let mut cur = self.heads[c];
            while cur != NIL {
                let s = &self.slots[cur as usize];
                if s.class as usize != c {
                    return Err(format!("slot {cur} in list {c} has class {:?}", s.class));
                }
                if s.prev != prev {
                    return Err(format!("slot {cur}: bad prev link"));
                }
                if s.expire < last {
                    return Err(format!("list {c} not sorted at slot {cur}"));
                }
                last = s.expire;
                prev = cur;
                cur = s.next;
                seen += 1;
            }
            if self.tails[c] != prev {
                return Err(format!("list {c}: bad tail"));
            }
        }
        let pinned = self.map.values().filter(|&&id| self.slots[id as usize].class == Class::Pinned).count();
        if seen + pinned != self.map.len() {
            return Err(format!("{seen} listed + {pinned} pinned != {} live", self.map.len()));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::net::Ipv4Addr;

    fn key(i: u32) -> FlowKey {
        let src = IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i));
        FlowKey::of(src, 1000, IpAddr::V4(Ipv4Addr::new(10, 9, 9, 9)), 80, 6).0
    }

    fn new(k: FlowKey) -> NewState {
        NewState { key: k, init_is_a: true, rule: 100, track: NIL, xlat: None, pinned: false }
    }

    #[test]
    fn normalized_both_directions() {
        let a = IpAddr::V4(Ipv4Addr::new(1, 2, 3, 4));
        let b = IpAddr::V4(Ipv4Addr::new(5, 6, 7, 8));
        let (k1, f1) = FlowKey::of(a, 10, b, 20, 6);
        let (k2, f2) = FlowKey::of(b, 20, a, 10, 6);
        assert_eq!(k1, k2);
        assert!(f1 && !f2);
    }

    #[test]
    fn tcp_lifecycle_classes() {
        let mut t = StateTable::new(Timeouts::default());
        let id = t.insert(new(key(1)), TH_SYN, 0);
        assert_eq!(t.get(id).class, Class::TcpOpening);
        assert_eq!(t.get(id).expire, 20_000);
        assert_eq!(t.touch(id, false, TH_SYN | 0x10, 5), Class::TcpEstablished);
        assert_eq!(t.touch(id, true, 0x10, 6), Class::TcpEstablished);
        assert_eq!(t.get(id).expire, 300_006);
        assert_eq!(t.touch(id, true, TH_FIN | 0x10, 7), Class::TcpEstablished);
        assert_eq!(t.touch(id, false, TH_FIN | 0x10, 8), Class::TcpClosed);
        assert_eq!(t.get(id).expire, 1_008);
        t.check_invariants().unwrap();
        assert_eq!(t.expire(1_007, usize::MAX, |_| {}), 0);
        assert_eq!(t.expire(1_008, usize::MAX, |_| {}), 1);
        assert!(t.is_empty());
        t.check_invariants().unwrap();
    }

    #[test]
    fn rst_closes() {
        let mut t = StateTable::new(Timeouts::default());
        let id = t.insert(new(key(1)), TH_SYN, 0);
        assert_eq!(t.touch(id, false, TH_RST, 1), Class::TcpClosed);
    }

    #[test]
    fn expiry_is_fifo_and_bounded() {
        let mut t = StateTable::new(Timeouts::default());
        for i in 0..1000 {
            t.insert(new(key(i)), TH_SYN, u64::from(i));
        }
        // Refresh the even ones later: they move to the tail.
        for i in (0..1000).step_by(2) {
            let id = t.lookup(&key(i)).unwrap();
            t.touch(id, true, 0, 5000);
        }
        t.check_invariants().unwrap();
        let mut got = Vec::new();
        // Odd ones expire at i + 20000.
        let n = t.expire(20_000 + 500, usize::MAX, |r| got.push(r.key));
        assert_eq!(n, 250); // odd i < 500
        assert!(got.iter().all(|k| t.lookup(k).is_none()));
        assert_eq!(t.expire(u64::MAX, 10, |_| {}), 10, "budget respected");
        t.check_invariants().unwrap();
        t.expire(u64::MAX, usize::MAX, |_| {});
        assert!(t.is_empty());
        // Slots are reused.
        let slots = t.slots();
        for i in 0..1000 {
            t.insert(new(key(i)), TH_SYN, 0);
        }
        assert_eq!(t.slots(), slots);
    }

    #[test]
    fn pinned_never_expires() {
        let mut t = StateTable::new(Timeouts::default());
        let mut n = new(key(1));
        n.pinned = true;
        let id = t.insert(n, TH_SYN, 0);
        assert_eq!(t.touch(id, true, 0, 1), Class::Pinned);
        assert_eq!(t.expire(u64::MAX, usize::MAX, |_| {}), 0);
        t.check_invariants().unwrap();
        assert!(t.remove_key(&key(1)).is_some());
        assert!(t.is_empty());
    }
}
