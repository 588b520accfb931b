//! Output with send aggregation (DragonFly's netisr "rollup").
//!
//! A worker does not hand each forwarded packet to the device at once: it
//! collects them and flushes when [`FlushPolicy::max_packets`] are pending,
//! when [`FlushPolicy::max_bytes`] (about one MTU) are pending, or when it
//! runs out of input (the rollup DragonFly runs before a netisr thread
//! sleeps). One `sendmmsg` / TX-ring kick / file write then carries the
//! whole group. Every flush is counted by its [`FlushReason`].

use crate::pool::Mbuf;
use serde::Serialize;
use std::io;

/// When to flush.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlushPolicy {
    /// Flush when this many packets are pending (DragonFly: 16). 1 = no aggregation.
    pub max_packets: usize,
    /// Flush when this many bytes are pending (DragonFly: 1500).
    pub max_bytes: usize,
    /// Flush when the worker finds no more input.
    pub on_idle: bool,
}

impl Default for FlushPolicy {
    fn default() -> Self {
        FlushPolicy { max_packets: 16, max_bytes: 1500, on_idle: true }
    }
}

/// Why a flush happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlushReason {
    /// `max_packets` reached.
    Packets,
    /// `max_bytes` reached.
    Bytes,
    /// The worker ran out of input.
    Idle,
    /// Shutdown.
    Final,
}

/// Output counters of one worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct OutputCounters {
    /// Frames sent.
    pub packets: u64,
    /// Bytes sent.
    pub bytes: u64,
    /// Flushes because the group reached its packet limit.
    pub flush_packets: u64,
    /// Flushes because the group reached its byte limit.
    pub flush_bytes: u64,
    /// Flushes because input ran out (the rollup).
    pub flush_idle: u64,
    /// Flushes at the end of the run.
    pub flush_final: u64,
    /// Packets the sink failed to send.
    pub errors: u64,
    /// Input frames the sent packets stand for ([`Mbuf::frames`]: a
    /// reassembled datagram counts its fragments).
    pub frames: u64,
    /// Input frames the failed packets stand for.
    pub error_frames: u64,
}

impl OutputCounters {
    /// Flushes of any reason.
    pub fn flushes(&self) -> u64 {
        self.flush_packets + self.flush_bytes + self.flush_idle + self.flush_final
    }

    fn count(&mut self, r: FlushReason) {
        match r {
            FlushReason::Packets => self.flush_packets += 1,
            FlushReason::Bytes => self.flush_bytes += 1,
            FlushReason::Idle => self.flush_idle += 1,
            FlushReason::Final => self.flush_final += 1,
        }
    }

    /// Adds another worker's counters.
    pub fn merge(&mut self, o: &OutputCounters) {
        self.packets += o.packets;
        self.bytes += o.bytes;
        self.flush_packets += o.flush_packets;
        self.flush_bytes += o.flush_bytes;
        self.flush_idle += o.flush_idle;
        self.flush_final += o.flush_final;
        self.errors += o.errors;
        self.frames += o.frames;
        self.error_frames += o.error_frames;
    }
}

/// Where packets go. One sink per worker; a sink shared between workers
/// (a pcap file) locks once per flush, not once per packet.
pub trait Sink: Send {
    /// Sends a group of frames; returns how many were sent (the rest count
    /// as errors).
    fn send(&mut self, frames: &[Mbuf]) -> io::Result<usize>;
    /// Called once at shutdown.
    fn finish(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Discards everything (for benchmarks); touches the first byte of each frame
/// so the work is not optimised away.
///
/// Aligned to 128 bytes: `checksum` is written on every flush and the sinks
/// of all workers are boxed one after the other by one thread; unaligned,
/// two of them share a cache line (false sharing between the workers).
#[derive(Debug, Default)]
#[repr(align(128))]
pub struct NullSink {
    /// Sum of the first bytes seen (keeps the reads).
    pub checksum: u64,
}

impl Sink for NullSink {
    fn send(&mut self, frames: &[Mbuf]) -> io::Result<usize> {
        for f in frames {
            self.checksum = self.checksum.wrapping_add(u64::from(f.data().first().copied().unwrap_or(0)));
        }
        Ok(frames.len())
    }
}

/// The pending group and the policy.
pub struct Aggregator {
    policy: FlushPolicy,
    pending: Vec<Mbuf>,
    bytes: usize,
    /// What was sent and why each group was flushed.
    pub counters: OutputCounters,
}

impl Aggregator {
    /// An empty aggregator.
    pub fn new(policy: FlushPolicy) -> Self {
        let policy = FlushPolicy { max_packets: policy.max_packets.max(1), ..policy };
        Aggregator {
            policy,
            pending: Vec::with_capacity(policy.max_packets),
            bytes: 0,
            counters: Default::default(),
        }
    }

    /// The policy.
    pub fn policy(&self) -> FlushPolicy {
        self.policy
    }

    /// Pending packets.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    /// Adds a frame; returns the reason to flush now, if any.
    #[inline]
    pub fn push(&mut self, f: Mbuf) -> Option<FlushReason> {
        self.bytes += f.len();
        self.pending.push(f);
        if self.pending.len() >= self.policy.max_packets {
            Some(FlushReason::Packets)
        } else if self.bytes >= self.policy.max_bytes {
            Some(FlushReason::Bytes)
        } else {
            None
        }
    }

    /// Sends the pending group (if any) and hands every frame to `done`
    /// afterwards (to free its buffer). Counts the flush under `reason`.
    pub fn flush(&mut self, reason: FlushReason, sink: &mut dyn Sink, mut done: impl FnMut(Mbuf)) {
        if self.pending.is_empty() {
            return;
        }
        if reason == FlushReason::Idle && !self.policy.on_idle {
            return;
        }
        self.counters.count(reason);
        let sent = sink.send(&self.pending).unwrap_or(0).min(self.pending.len());
        let n = self.pending.len();
        self.counters.errors += (n - sent) as u64;
        self.counters.packets += sent as u64;
        for (i, f) in self.pending.drain(..).enumerate() {
            if i < sent {
                self.counters.bytes += f.len() as u64;
                self.counters.frames += u64::from(f.frames);
            } else {
                self.counters.error_frames += u64::from(f.frames);
            }
            done(f);
        }
        self.bytes = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two workers' sinks, boxed one after the other, never share the
    /// 128-byte pair of cache lines their counter lives in.
    #[test]
    fn null_sinks_do_not_share_cache_lines() {
        let a: Box<dyn Sink> = Box::new(NullSink::default());
        let b: Box<dyn Sink> = Box::new(NullSink::default());
        let (pa, pb) =
            (&*a as *const dyn Sink as *const u8 as usize, &*b as *const dyn Sink as *const u8 as usize);
        assert_eq!(pa % 128, 0);
        assert_eq!(pb % 128, 0);
        assert_ne!(pa / 128, pb / 128);
    }

    #[allow(non_snake_case)]
    fn F(v: Vec<u8>) -> Mbuf {
        Mbuf::heap(v, 0, 0, 0)
    }

    #[derive(Default)]
    struct Rec(Vec<usize>);
    impl Sink for Rec {
        fn send(&mut self, frames: &[Mbuf]) -> io::Result<usize> {
            self.0.push(frames.len());
            for f in frames {
                assert!(!f.is_empty());
            }
            Ok(frames.len())
        }
    }

    #[test]
    fn flush_reasons() {
        let mut a = Aggregator::new(FlushPolicy::default());
        let mut s = Rec::default();
        let mut freed = 0;
        for i in 0..15 {
            assert_eq!(a.push(F(vec![i; 64])), None);
        }
        assert_eq!(a.push(F(vec![0; 64])), Some(FlushReason::Packets));
        a.flush(FlushReason::Packets, &mut s, |_| freed += 1);
        assert_eq!(a.push(F(vec![1; 1000])), None);
        assert_eq!(a.push(F(vec![1; 600])), Some(FlushReason::Bytes));
        a.flush(FlushReason::Bytes, &mut s, |_| freed += 1);
        a.push(F(vec![2; 10]));
        a.flush(FlushReason::Idle, &mut s, |_| freed += 1);
        a.flush(FlushReason::Final, &mut s, |_| freed += 1); // nothing pending: no flush
        assert_eq!(s.0, vec![16, 2, 1]);
        assert_eq!(freed, 19);
        let c = a.counters;
        assert_eq!((c.flush_packets, c.flush_bytes, c.flush_idle, c.flush_final), (1, 1, 1, 0));
        assert_eq!(c.packets, 19);
        assert_eq!(c.bytes, 16 * 64 + 1600 + 10);
    }

    #[test]
    fn large_groups_and_no_idle_flush() {
        let p = FlushPolicy { max_packets: 100, max_bytes: usize::MAX, on_idle: false };
        let mut a = Aggregator::new(p);
        let mut s = Rec::default();
        for _ in 0..99 {
            assert_eq!(a.push(F(vec![1; 8])), None);
        }
        a.flush(FlushReason::Idle, &mut s, |_| ());
        assert_eq!(a.pending(), 99);
        assert_eq!(a.push(F(vec![1; 8])), Some(FlushReason::Packets));
        a.flush(FlushReason::Packets, &mut s, |_| ());
        assert_eq!(s.0, vec![100]);
    }
}
