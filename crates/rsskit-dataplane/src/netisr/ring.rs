//! A bounded single-producer single-consumer ring.
//!
//! Written here rather than taken from a crate (`rtrb` would fit the
//! queue itself) because the ring also carries the netisr producer-side
//! counters (`queued`, `qdrops`, high-water mark) on the producer's own
//! cache line, so counting costs no shared writes; and because the worker
//! needs `len()` from a third thread (the status line) and batch pops.
//!
//! Layout: `head` (next slot to read, written by the consumer) and `tail`
//! (next slot to write, written by the producer) sit on separate 128-byte
//! lines; each side keeps a cached copy of the other side's index so the
//! common case touches no shared line at all. Publication is the usual
//! Release store of the index after writing (or reading) the slot, and
//! Acquire load of the other side's index before touching a slot.

use core::cell::UnsafeCell;
use core::mem::MaybeUninit;
use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

/// Pads and aligns to 128 bytes (two 64-byte lines: the adjacent-line
/// prefetcher pairs them).
#[derive(Debug, Default)]
#[repr(align(128))]
pub struct CachePadded<T>(pub T);

impl<T> core::ops::Deref for CachePadded<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

/// Producer-side state and counters.
#[derive(Debug, Default)]
struct ProdSide {
    tail: AtomicUsize,
    /// Items pushed.
    queued: AtomicU64,
    /// Items refused because the ring was full.
    drops: AtomicU64,
    /// Highest occupancy seen by the producer right after a push.
    high_water: AtomicUsize,
}

struct Shared<T> {
    head: CachePadded<AtomicUsize>,
    prod: CachePadded<ProdSide>,
    mask: usize,
    slots: Box<[UnsafeCell<MaybeUninit<T>>]>,
}

// SAFETY: slots are accessed by exactly one producer (indices in
// [head, tail) are never written) and one consumer (indices in [tail, head
// + cap) are never read); the index hand-off uses Release/Acquire so a slot's
// contents are visible before its index. T moves between threads: T: Send.
unsafe impl<T: Send> Sync for Shared<T> {}
// SAFETY: as above.
unsafe impl<T: Send> Send for Shared<T> {}

impl<T> Drop for Shared<T> {
    fn drop(&mut self) {
        // Both sides are gone (we hold the last Arc): drop what is still queued.
        let head = *self.head.0.get_mut();
        let tail = *self.prod.0.tail.get_mut();
        for i in head..tail {
            // SAFETY: slots in [head, tail) were written and not yet read.
            unsafe { (*self.slots[i & self.mask].get()).assume_init_drop() };
        }
    }
}

/// Counters of one ring, readable from any thread.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RingStats {
    /// Items currently queued.
    pub len: usize,
    /// Items pushed so far.
    pub queued: u64,
    /// Pushes refused because the ring was full.
    pub drops: u64,
    /// Highest occupancy seen.
    pub high_water: usize,
}

/// Read-only view for monitoring (status line, termination check).
pub struct RingMonitor<T>(Arc<Shared<T>>);

impl<T> Clone for RingMonitor<T> {
    fn clone(&self) -> Self {
        RingMonitor(self.0.clone())
    }
}

impl<T> RingMonitor<T> {
    /// Snapshot of the counters.
    pub fn stats(&self) -> RingStats {
        let s = &self.0;
        let tail = s.prod.tail.load(Ordering::Acquire);
        let head = s.head.load(Ordering::Acquire);
        RingStats {
            len: tail.wrapping_sub(head).min(s.mask + 1),
            queued: s.prod.queued.load(Ordering::Relaxed),
            drops: s.prod.drops.load(Ordering::Relaxed),
            high_water: s.prod.high_water.load(Ordering::Relaxed),
        }
    }

    /// Capacity.
    pub fn capacity(&self) -> usize {
        self.0.mask + 1
    }
}

/// The producing end.
pub struct Producer<T> {
    s: Arc<Shared<T>>,
    tail: usize,
    head_cache: usize,
    queued: u64,
    drops: u64,
    high_water: usize,
}

/// The consuming end.
pub struct Consumer<T> {
    s: Arc<Shared<T>>,
    head: usize,
    tail_cache: usize,
}

/// A ring with room for `capacity` items (rounded up to a power of two, at least 2).
pub fn ring<T>(capacity: usize) -> (Producer<T>, Consumer<T>, RingMonitor<T>) {
    let cap = capacity.max(2).next_power_of_two();
    let slots = (0..cap).map(|_| UnsafeCell::new(MaybeUninit::uninit())).collect();
    let s = Arc::new(Shared {
        head: CachePadded(AtomicUsize::new(0)),
        prod: CachePadded(ProdSide::default()),
        mask: cap - 1,
        slots,
    });
    (
        Producer { s: s.clone(), tail: 0, head_cache: 0, queued: 0, drops: 0, high_water: 0 },
        Consumer { s: s.clone(), head: 0, tail_cache: 0 },
        RingMonitor(s),
    )
}

impl<T> Producer<T> {
    /// Capacity.
    pub fn capacity(&self) -> usize {
        self.s.mask + 1
    }

    /// Free slots, refreshing the consumer's index only when the cached
    /// one says the ring is full.
    #[inline]
    fn free(&mut self) -> usize {
        let cap = self.s.mask + 1;
        let mut used = self.tail.wrapping_sub(self.head_cache);
        if used == cap {
            self.head_cache = self.s.head.load(Ordering::Acquire);
            used = self.tail.wrapping_sub(self.head_cache);
        }
        cap - used
    }

    /// Enqueues `v`, or gives it back (and counts a drop) when full.
    #[inline]
    pub fn push(&mut self, v: T) -> Result<(), T> {
        self.try_push(v).inspect_err(|_| self.count_drops(1))
    }

    /// Enqueues `v`, or gives it back when full without counting a drop
    /// (the caller keeps it and retries).
    #[inline]
    pub fn try_push(&mut self, v: T) -> Result<(), T> {
        if self.free() == 0 {
            return Err(v);
        }
        // SAFETY: the slot at `tail` is free (free() > 0): the consumer
        // has read it (or it was never written) and will not touch it until
        // the Release store below publishes it.
        unsafe { (*self.s.slots[self.tail & self.s.mask].get()).write(v) };
        self.publish(1);
        Ok(())
    }

    /// Publishes the `n` slots written from `tail` (one Release store of the
    /// new tail) and updates the queued count and the high-water mark.
    #[inline(always)]
    fn publish(&mut self, n: usize) {
        self.tail = self.tail.wrapping_add(n);
        self.s.prod.tail.store(self.tail, Ordering::Release);
        self.queued += n as u64;
        self.s.prod.queued.store(self.queued, Ordering::Relaxed);
        let used = self.tail.wrapping_sub(self.head_cache);
        if used > self.high_water {
            // `head_cache` may be stale (too old), so `used` may overstate;
            // refresh before recording a new maximum.
            self.head_cache = self.s.head.load(Ordering::Acquire);
            let used = self.tail.wrapping_sub(self.head_cache);
            if used > self.high_water {
                self.high_water = used;
                self.s.prod.high_water.store(used, Ordering::Relaxed);
            }
        }
    }

    /// Moves as many items as fit from the front of `items` into the ring
    /// with one index publication (one Release store for the group);
    /// returns how many. The rest stay in `items`; they are not counted as
    /// drops (see [`Producer::count_drops`]).
    #[inline]
    pub fn push_many(&mut self, items: &mut Vec<T>) -> usize {
        if items.is_empty() {
            return 0;
        }
        let cap = self.s.mask + 1;
        let mut free = cap - self.tail.wrapping_sub(self.head_cache);
        if free < items.len() {
            self.head_cache = self.s.head.load(Ordering::Acquire);
            free = cap - self.tail.wrapping_sub(self.head_cache);
        }
        let n = free.min(items.len());
        for (k, v) in items.drain(..n).enumerate() {
            // SAFETY: slots [tail, tail + n) are free (n <= free), as in push().
            unsafe { (*self.s.slots[self.tail.wrapping_add(k) & self.s.mask].get()).write(v) };
        }
        if n > 0 {
            self.publish(n);
        }
        n
    }

    /// Counts `n` items the caller dropped because the ring was full.
    #[inline]
    pub fn count_drops(&mut self, n: u64) {
        if n > 0 {
            self.drops += n;
            self.s.prod.drops.store(self.drops, Ordering::Relaxed);
        }
    }

    /// Items queued (may be stale by the consumer's progress).
    pub fn len(&self) -> usize {
        self.tail.wrapping_sub(self.s.head.load(Ordering::Acquire))
    }

    /// True when nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<T> Consumer<T> {
    /// Dequeues one item.
    #[inline]
    pub fn pop(&mut self) -> Option<T> {
        if self.head == self.tail_cache {
            self.tail_cache = self.s.prod.tail.load(Ordering::Acquire);
            if self.head == self.tail_cache {
                return None;
            }
        }
        // SAFETY: head < tail: the producer wrote this slot and published it
        // with the Release store we Acquired; it will not write it again
        // until our Release store of the new head.
        let v = unsafe { (*self.s.slots[self.head & self.s.mask].get()).assume_init_read() };
        self.head = self.head.wrapping_add(1);
        self.s.head.store(self.head, Ordering::Release);
        Some(v)
    }

    /// Dequeues up to `max` items into `out`; returns how many. One
    /// Acquire and one Release for the whole batch.
    #[inline]
    pub fn pop_into(&mut self, out: &mut Vec<T>, max: usize) -> usize {
        let mut avail = self.tail_cache.wrapping_sub(self.head);
        if avail < max {
            self.tail_cache = self.s.prod.tail.load(Ordering::Acquire);
            avail = self.tail_cache.wrapping_sub(self.head);
        }
        let n = avail.min(max);
        for i in 0..n {
            let at = self.head.wrapping_add(i) & self.s.mask;
            // SAFETY: as in pop(): [head, tail_cache) is published and ours.
            out.push(unsafe { (*self.s.slots[at].get()).assume_init_read() });
        }
        if n > 0 {
            self.head = self.head.wrapping_add(n);
            self.s.head.store(self.head, Ordering::Release);
        }
        n
    }

    /// Items queued right now.
    pub fn len(&self) -> usize {
        self.s.prod.tail.load(Ordering::Acquire).wrapping_sub(self.head)
    }

    /// True when nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fifo_full_and_counters() {
        let (mut p, mut c, m) = ring::<u32>(4);
        assert_eq!(p.capacity(), 4);
        for i in 0..4 {
            p.push(i).unwrap();
        }
        assert_eq!(p.try_push(8), Err(8));
        assert_eq!(m.stats().drops, 0, "try_push does not count");
        assert_eq!(p.push(9), Err(9));
        let s = m.stats();
        assert_eq!((s.len, s.queued, s.drops, s.high_water), (4, 4, 1, 4));
        assert_eq!(c.pop(), Some(0));
        p.push(4).unwrap();
        let mut v = Vec::new();
        assert_eq!(c.pop_into(&mut v, 16), 4);
        assert_eq!(v, vec![1, 2, 3, 4]);
        assert_eq!(c.pop(), None);
        assert_eq!(m.stats().len, 0);
    }

    #[test]
    fn push_many_partial() {
        let (mut p, mut c, m) = ring::<u32>(4);
        let mut v = vec![1, 2, 3];
        assert_eq!(p.push_many(&mut v), 3);
        assert!(v.is_empty());
        let mut v = vec![4, 5, 6];
        assert_eq!(p.push_many(&mut v), 1);
        assert_eq!(v, vec![5, 6]);
        p.count_drops(2);
        let s = m.stats();
        assert_eq!((s.len, s.queued, s.drops, s.high_water), (4, 4, 2, 4));
        assert_eq!(c.pop(), Some(1));
        assert_eq!(p.push_many(&mut v), 1);
        assert_eq!(v, vec![6]);
        let mut out = Vec::new();
        c.pop_into(&mut out, 10);
        assert_eq!(out, vec![2, 3, 4, 5]);
    }

    #[test]
    fn drops_remaining_items() {
        let item = Arc::new(());
        let (mut p, c, m) = ring::<Arc<()>>(8);
        for _ in 0..5 {
            p.push(item.clone()).unwrap();
        }
        drop((p, c, m));
        assert_eq!(Arc::strong_count(&item), 1);
    }

    #[test]
    fn threads_every_item_once_in_order() {
        const N: u64 = 200_000;
        let (mut p, mut c, _m) = ring::<u64>(64);
        let t = std::thread::spawn(move || {
            let mut i = 0;
            while i < N {
                if p.push(i).is_ok() {
                    i += 1;
                } else {
                    std::hint::spin_loop();
                }
            }
        });
        let mut next = 0;
        let mut buf = Vec::new();
        while next < N {
            buf.clear();
            c.pop_into(&mut buf, 7);
            for &v in &buf {
                assert_eq!(v, next);
                next += 1;
            }
        }
        t.join().unwrap();
        assert_eq!(c.pop(), None);
    }
}
