//! Per-worker counters. Each worker counts in plain local integers
//! ([`Counters`]) and publishes them once per batch into its own
//! cache-line-aligned block of relaxed atomics ([`WorkerStats`]); the
//! reporter thread only reads. One writer per block, no read-modify-write,
//! no line shared between workers.

use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Why a batch of replies was sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlushReason {
    /// `--flush-packets` replies were pending.
    Count,
    /// `--flush-bytes` bytes were pending.
    Bytes,
    /// Nothing more to read.
    Idle,
}

/// Flush counts by reason.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Flushes {
    /// Flushes because `--flush-packets` replies were pending.
    pub count: u64,
    /// Flushes because `--flush-bytes` bytes were pending.
    pub bytes: u64,
    /// Flushes because there was nothing more to read.
    pub idle: u64,
}

impl Flushes {
    /// All flushes.
    pub fn total(&self) -> u64 {
        self.count + self.bytes + self.idle
    }
}

/// One worker's counters (a snapshot, or the worker's own running copy).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Counters {
    /// Datagrams received.
    pub received: u64,
    /// Replies the kernel accepted.
    pub sent: u64,
    /// Payload bytes received.
    pub bytes: u64,
    /// `recvmmsg` calls that returned datagrams.
    pub batches: u64,
    /// Misdirected datagrams: in `cpu` steering, processed by the kernel on
    /// another CPU than the worker's; otherwise, of a bucket the worker
    /// does not own (with live buckets, `--rebalance`: not one the worker
    /// owned when its socket was last empty, i.e. not one in flight during
    /// a move; `unowned - misdirected` counts those).
    pub misdirected: u64,
    /// Datagrams of a bucket the worker does not own (every mode).
    pub unowned: u64,
    /// Datagrams we dropped: truncated (too long) or refused by `sendmmsg`.
    pub dropped: u64,
    /// Datagrams that are not probes (echoed unchanged).
    pub foreign: u64,
    /// Datagrams that arrived coalesced with others of their flow
    /// (`UDP_GRO`: several in one buffer); each is still counted in
    /// `received` on its own.
    pub coalesced: u64,
    /// Reply flushes by reason.
    pub flushes: Flushes,
}

impl Counters {
    /// Records a flush.
    #[inline]
    pub fn flushed(&mut self, why: FlushReason) {
        match why {
            FlushReason::Count => self.flushes.count += 1,
            FlushReason::Bytes => self.flushes.bytes += 1,
            FlushReason::Idle => self.flushes.idle += 1,
        }
    }

    /// `self - earlier`, field by field.
    pub fn delta(&self, earlier: &Counters) -> Counters {
        let d = |a: u64, b: u64| a.saturating_sub(b);
        Counters {
            received: d(self.received, earlier.received),
            sent: d(self.sent, earlier.sent),
            bytes: d(self.bytes, earlier.bytes),
            batches: d(self.batches, earlier.batches),
            misdirected: d(self.misdirected, earlier.misdirected),
            unowned: d(self.unowned, earlier.unowned),
            dropped: d(self.dropped, earlier.dropped),
            foreign: d(self.foreign, earlier.foreign),
            coalesced: d(self.coalesced, earlier.coalesced),
            flushes: Flushes {
                count: d(self.flushes.count, earlier.flushes.count),
                bytes: d(self.flushes.bytes, earlier.flushes.bytes),
                idle: d(self.flushes.idle, earlier.flushes.idle),
            },
        }
    }

    /// Field-by-field sum.
    pub fn add(&mut self, o: &Counters) {
        self.received += o.received;
        self.sent += o.sent;
        self.bytes += o.bytes;
        self.batches += o.batches;
        self.misdirected += o.misdirected;
        self.unowned += o.unowned;
        self.dropped += o.dropped;
        self.foreign += o.foreign;
        self.coalesced += o.coalesced;
        self.flushes.count += o.flushes.count;
        self.flushes.bytes += o.flushes.bytes;
        self.flushes.idle += o.flushes.idle;
    }

    /// Sum of many.
    pub fn total<'a>(it: impl IntoIterator<Item = &'a Counters>) -> Counters {
        let mut t = Counters::default();
        for c in it {
            t.add(c);
        }
        t
    }
}

/// The published copy of one worker's [`Counters`]: written only by its
/// worker (relaxed stores), read by anyone. Aligned to 128 bytes (two
/// cache lines, the adjacent-line prefetcher's unit) so no two workers'
/// blocks share a line.
#[repr(align(128))]
#[derive(Debug, Default)]
pub struct WorkerStats {
    received: AtomicU64,
    sent: AtomicU64,
    bytes: AtomicU64,
    batches: AtomicU64,
    misdirected: AtomicU64,
    unowned: AtomicU64,
    dropped: AtomicU64,
    foreign: AtomicU64,
    coalesced: AtomicU64,
    flush_count: AtomicU64,
    flush_bytes: AtomicU64,
    flush_idle: AtomicU64,
}

impl WorkerStats {
    /// A zeroed block.
    pub fn new() -> Self {
        Self::default()
    }

    /// Publishes the worker's running counters. Call from the owning worker only.
    #[inline]
    pub fn publish(&self, c: &Counters) {
        self.received.store(c.received, Relaxed);
        self.sent.store(c.sent, Relaxed);
        self.bytes.store(c.bytes, Relaxed);
        self.batches.store(c.batches, Relaxed);
        self.misdirected.store(c.misdirected, Relaxed);
        self.unowned.store(c.unowned, Relaxed);
        self.dropped.store(c.dropped, Relaxed);
        self.foreign.store(c.foreign, Relaxed);
        self.coalesced.store(c.coalesced, Relaxed);
        self.flush_count.store(c.flushes.count, Relaxed);
        self.flush_bytes.store(c.flushes.bytes, Relaxed);
        self.flush_idle.store(c.flushes.idle, Relaxed);
    }

    /// The last published counters (fields may be from adjacent publishes).
    pub fn snapshot(&self) -> Counters {
        Counters {
            received: self.received.load(Relaxed),
            sent: self.sent.load(Relaxed),
            bytes: self.bytes.load(Relaxed),
            batches: self.batches.load(Relaxed),
            misdirected: self.misdirected.load(Relaxed),
            unowned: self.unowned.load(Relaxed),
            dropped: self.dropped.load(Relaxed),
            foreign: self.foreign.load(Relaxed),
            coalesced: self.coalesced.load(Relaxed),
            flushes: Flushes {
                count: self.flush_count.load(Relaxed),
                bytes: self.flush_bytes.load(Relaxed),
                idle: self.flush_idle.load(Relaxed),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn publish_snapshot_delta_total() {
        let s = WorkerStats::new();
        let mut c =
            Counters { received: 10, sent: 9, bytes: 5100, batches: 2, dropped: 1, ..Default::default() };
        c.flushed(FlushReason::Count);
        c.flushed(FlushReason::Idle);
        c.flushed(FlushReason::Idle);
        s.publish(&c);
        let snap = s.snapshot();
        assert_eq!(snap, c);
        assert_eq!(snap.flushes, Flushes { count: 1, bytes: 0, idle: 2 });
        assert_eq!(snap.flushes.total(), 3);
        let mut later = c;
        later.received = 25;
        later.flushed(FlushReason::Bytes);
        let d = later.delta(&c);
        assert_eq!((d.received, d.sent, d.flushes.bytes, d.flushes.idle), (15, 0, 1, 0));
        let t = Counters::total([&c, &later]);
        assert_eq!(t.received, 35);
        assert_eq!(t.flushes.idle, 4);
    }

    #[test]
    fn blocks_do_not_share_cache_lines() {
        assert_eq!(std::mem::align_of::<WorkerStats>(), 128);
        let v: Vec<WorkerStats> = (0..2).map(|_| WorkerStats::new()).collect();
        let a = &v[0] as *const _ as usize;
        let b = &v[1] as *const _ as usize;
        assert!(b - a >= 128);
    }
}
