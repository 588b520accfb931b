//! The loose global state counter and the two-tier `limit` tracks
//! (DragonFly's sections 5.1 and 5.2).
//!
//! # Global limit
//!
//! Each worker counts its own states exactly ([`LooseCounter`]) and keeps a
//! *pending* delta. Once the pending delta reaches the threshold it is
//! folded into the shared [`GlobalLimit`] total with one atomic add; that
//! is the only write to a shared line, once per `threshold` installs or
//! removals. Admission reads the shared total (a load) plus the worker's
//! own pending delta. Other workers hold at most `threshold - 1` unfolded
//! states each, so with `threshold = max / (40 * workers)` the table can go
//! over `max` by at most 2.5% from the pending deltas plus 2.5% of drift
//! left by a resync: within the 5% overflow DragonFly's loosely updated
//! counter allows (Qiao, "Improving the DragonFlyBSD Network Stack").
//!
//! When the total reaches the limit, the worker (1) resyncs: the total is
//! set to the sum of the workers' exact counts (each published by its owner
//! with a relaxed store); (2) if still at the limit, collects its own
//! expired states; (3) if still at the limit, asks the other workers to
//! collect theirs, at most once per second (a per-worker request flag that
//! each worker polls once per batch). The state is then refused.
//!
//! # `limit` tracks
//!
//! `limit src-addr 10` allows 10 states per source address over all
//! workers. A loose counter cannot enforce such small numbers, so there are
//! two tiers: a shared [`TrackCounter`] per distinct key (an atomic count
//! and the limit) in the [`TrackRegistry`], and per-worker tracks
//! ([`LocalTracks`]) pointing at it, found without a lock. A state install
//! increments the counter through the worker's track with a CAS that refuses
//! to pass the limit. The registry's mutex is taken only when a worker
//! creates its first track for a key or drops its last.

use core::net::IpAddr;
use core::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, AtomicU64, Ordering::Relaxed};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Pads to 128 bytes so per-worker atomics never share a line.
#[derive(Debug, Default)]
#[repr(align(128))]
pub struct Padded<T>(pub T);

/// The shared part of the global state limit.
#[derive(Debug)]
pub struct GlobalLimit {
    /// Most states over all workers (`u64::MAX`: unlimited).
    pub max: u64,
    /// Pending deltas are folded in once they reach this.
    pub threshold: i64,
    total: Padded<AtomicI64>,
    exact: Box<[Padded<AtomicI64>]>,
    gc_request: Box<[Padded<AtomicBool>]>,
    last_gc_request: AtomicU64,
    /// Times a worker resynced the total.
    pub resyncs: AtomicU64,
    /// Times the other workers were asked to collect.
    pub gc_broadcasts: AtomicU64,
}

impl GlobalLimit {
    /// A limit of `max` states (0: unlimited) over `workers` workers.
    pub fn new(max: u64, workers: usize) -> Self {
        let workers = workers.max(1);
        let max = if max == 0 { u64::MAX } else { max };
        let threshold = if max == u64::MAX { 64 } else { ((max / (40 * workers as u64)) as i64).max(1) };
        GlobalLimit {
            max,
            threshold,
            total: Padded(AtomicI64::new(0)),
            exact: (0..workers).map(|_| Padded(AtomicI64::new(0))).collect(),
            gc_request: (0..workers).map(|_| Padded(AtomicBool::new(false))).collect(),
            last_gc_request: AtomicU64::new(0),
            resyncs: AtomicU64::new(0),
            gc_broadcasts: AtomicU64::new(0),
        }
    }

    /// The loose total.
    pub fn loose_total(&self) -> i64 {
        self.total.0.load(Relaxed)
    }

    /// The exact total (sum of the workers' own counts).
    pub fn exact_total(&self) -> i64 {
        self.exact.iter().map(|e| e.0.load(Relaxed)).sum()
    }

    /// Sets the total to the exact sum; returns it.
    pub fn resync(&self) -> i64 {
        let s = self.exact_total();
        self.total.0.store(s, Relaxed);
        self.resyncs.fetch_add(1, Relaxed);
        s
    }

    /// Asks every worker but `from` to collect its expired states, unless
    /// that was done less than a second ago. Returns whether it asked.
    pub fn request_gc(&self, from: usize, now_ms: u64) -> bool {
        let last = self.last_gc_request.load(Relaxed);
        if last != 0 && now_ms < last + 1000 {
            return false;
        }
        let stamp = now_ms.max(1);
        if self.last_gc_request.compare_exchange(last, stamp, Relaxed, Relaxed).is_err() {
            return false;
        }
        for (i, f) in self.gc_request.iter().enumerate() {
            if i != from {
                f.0.store(true, Relaxed);
            }
        }
        self.gc_broadcasts.fetch_add(1, Relaxed);
        true
    }

    /// Takes worker `w`'s collect request (one load when there is none).
    #[inline]
    pub fn take_gc_request(&self, w: usize) -> bool {
        let f = &self.gc_request[w].0;
        f.load(Relaxed) && f.swap(false, Relaxed)
    }
}

/// A worker's side of the global counter.
#[derive(Debug, Default)]
pub struct LooseCounter {
    /// This worker's installs minus removals.
    pub count: i64,
    /// Not yet folded into the shared total.
    pub pending: i64,
}

impl LooseCounter {
    /// Records `delta` states installed (+) or removed (-) by worker `w`.
    #[inline]
    pub fn add(&mut self, g: &GlobalLimit, w: usize, delta: i64) {
        self.count += delta;
        self.pending += delta;
        g.exact[w].0.store(self.count, Relaxed);
        if self.pending.abs() >= g.threshold {
            g.total.0.fetch_add(self.pending, Relaxed);
            self.pending = 0;
        }
    }

    /// Whether installing one more state would reach the limit as far as
    /// this worker can tell.
    #[inline]
    pub fn at_limit(&self, g: &GlobalLimit) -> bool {
        g.max != u64::MAX && g.total.0.load(Relaxed) + self.pending >= g.max as i64
    }

    /// After [`GlobalLimit::resync`] the pending delta is in the total.
    pub fn synced(&mut self) {
        self.pending = 0;
    }
}

/// The shared tier of a `limit`: how many states all workers hold for one key.
#[derive(Debug)]
pub struct TrackCounter {
    /// States all workers hold for this key now.
    pub count: AtomicU32,
    /// The `limit`'s N.
    pub max: u32,
}

/// What a `limit` counts by: the rule and the selected fields of the flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TrackId {
    /// Number of the rule with the `limit`.
    pub rule: u16,
    /// Source address, if the limit counts by it.
    pub src: Option<IpAddr>,
    /// Destination address, if the limit counts by it.
    pub dst: Option<IpAddr>,
    /// Source port, if the limit counts by it.
    pub sport: Option<u16>,
    /// Destination port, if the limit counts by it.
    pub dport: Option<u16>,
}

impl TrackId {
    /// The track of a flow's first packet for a rule with limit keys `keys`.
    pub fn new(rule: u16, keys: u8, src: IpAddr, dst: IpAddr, ports: Option<(u16, u16)>) -> Self {
        use super::rules::limit_key::*;
        let (sp, dp) = ports.unwrap_or((0, 0));
        TrackId {
            rule,
            src: (keys & SRC_ADDR != 0).then_some(src),
            dst: (keys & DST_ADDR != 0).then_some(dst),
            sport: (keys & SRC_PORT != 0).then_some(sp),
            dport: (keys & DST_PORT != 0).then_some(dp),
        }
    }
}

/// The shared track counters.
#[derive(Debug, Default)]
pub struct TrackRegistry {
    map: Mutex<HashMap<TrackId, Arc<TrackCounter>>>,
}

impl TrackRegistry {
    /// Number of track counters alive.
    pub fn len(&self) -> usize {
        self.map.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn get(&self, id: TrackId, max: u32) -> Arc<TrackCounter> {
        let mut m = self.map.lock().unwrap_or_else(|e| e.into_inner());
        m.entry(id).or_insert_with(|| Arc::new(TrackCounter { count: AtomicU32::new(0), max })).clone()
    }

    fn put(&self, id: &TrackId, c: Arc<TrackCounter>) {
        let mut m = self.map.lock().unwrap_or_else(|e| e.into_inner());
        // Clones are only made under this lock: 2 means the map's and ours.
        if Arc::strong_count(&c) == 2 {
            m.remove(id);
        }
        // Dropped under the lock too: two workers dropping their last
        // states at once would otherwise both see 3 and leave the counter
        // in the map forever.
        drop(c);
        drop(m);
    }
}

#[derive(Debug)]
struct LocalTrack {
    id: TrackId,
    counter: Arc<TrackCounter>,
    states: u32,
}

/// A worker's tracks (the per-worker tier).
#[derive(Debug, Default)]
pub struct LocalTracks {
    map: HashMap<TrackId, u32>,
    slots: Vec<Option<LocalTrack>>,
    free: Vec<u32>,
}

impl LocalTracks {
    /// Live tracks.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Counts one more state on track `id` (limit `max`); `None` if the
    /// shared counter is at its limit.
    pub fn acquire(&mut self, reg: &TrackRegistry, id: TrackId, max: u32) -> Option<u32> {
        let slot = match self.map.get(&id) {
            Some(&s) => s,
            None => {
                let counter = reg.get(id, max);
                let t = LocalTrack { id, counter, states: 0 };
                let s = match self.free.pop() {
                    Some(s) => {
                        self.slots[s as usize] = Some(t);
                        s
                    }
                    None => {
                        self.slots.push(Some(t));
                        (self.slots.len() - 1) as u32
                    }
                };
                self.map.insert(id, s);
                s
            }
        };
        let t = self.slots[slot as usize].as_mut()?;
        let c = &t.counter;
        let mut cur = c.count.load(Relaxed);
        loop {
            if cur >= c.max {
                if t.states == 0 {
                    self.drop_slot(reg, slot);
                }
                return None;
            }
            match c.count.compare_exchange_weak(cur, cur + 1, Relaxed, Relaxed) {
                Ok(_) => break,
                Err(v) => cur = v,
            }
        }
        t.states += 1;
        Some(slot)
    }

    /// Uncounts one state of track `slot`.
    pub fn release(&mut self, reg: &TrackRegistry, slot: u32) {
        let Some(Some(t)) = self.slots.get_mut(slot as usize) else { return };
        t.counter.count.fetch_sub(1, Relaxed);
        t.states -= 1;
        if t.states == 0 {
            self.drop_slot(reg, slot);
        }
    }

    fn drop_slot(&mut self, reg: &TrackRegistry, slot: u32) {
        if let Some(t) = self.slots[slot as usize].take() {
            self.map.remove(&t.id);
            self.free.push(slot);
            reg.put(&t.id, t.counter);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::net::Ipv4Addr;

    #[test]
    fn loose_counter_folds_at_threshold() {
        let g = GlobalLimit::new(4000, 2);
        assert_eq!(g.threshold, 50);
        let mut a = LooseCounter::default();
        for _ in 0..49 {
            a.add(&g, 0, 1);
        }
        assert_eq!(g.loose_total(), 0);
        assert_eq!(g.exact_total(), 49);
        a.add(&g, 0, 1);
        assert_eq!(g.loose_total(), 50);
        assert_eq!(a.pending, 0);
    }

    #[test]
    fn gc_request_at_most_once_per_second() {
        let g = GlobalLimit::new(10, 3);
        assert!(g.request_gc(0, 5000));
        assert!(!g.request_gc(1, 5999));
        assert!(!g.take_gc_request(0));
        assert!(g.take_gc_request(1));
        assert!(!g.take_gc_request(1));
        assert!(g.take_gc_request(2));
        assert!(g.request_gc(1, 6000));
        assert!(g.take_gc_request(0));
    }

    #[test]
    fn tracks_share_a_counter_across_workers() {
        let reg = TrackRegistry::default();
        let mut w0 = LocalTracks::default();
        let mut w1 = LocalTracks::default();
        let id = TrackId::new(
            100,
            super::super::rules::limit_key::SRC_ADDR,
            Ipv4Addr::new(1, 1, 1, 1).into(),
            Ipv4Addr::new(2, 2, 2, 2).into(),
            Some((1, 2)),
        );
        let a = w0.acquire(&reg, id, 3).unwrap();
        let b = w1.acquire(&reg, id, 3).unwrap();
        let c = w1.acquire(&reg, id, 3).unwrap();
        assert_eq!(b, c);
        assert!(w0.acquire(&reg, id, 3).is_none());
        assert_eq!(reg.len(), 1);
        w1.release(&reg, b);
        let d = w0.acquire(&reg, id, 3).unwrap();
        assert_eq!(a, d);
        w0.release(&reg, a);
        w0.release(&reg, a);
        w1.release(&reg, b);
        assert!(w0.is_empty() && w1.is_empty());
        assert!(reg.is_empty(), "last track removes the shared counter");
    }
}
