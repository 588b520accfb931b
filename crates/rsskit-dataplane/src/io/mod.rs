//! Packet sources and sinks: in-memory frames (benchmarks), pcap / pcapng
//! files ([`pcap`]), AF_PACKET sockets ([`afpacket`]), AF_XDP sockets
//! ([`afxdp`]) and the null sink
//! ([`crate::output::NullSink`]).
//!
//! Every source yields Ethernet II frames (captures of raw IP are given a
//! synthetic Ethernet header), so the data plane has one link layer.

pub mod afpacket;
pub mod afxdp;
pub mod pcap;
pub mod spec;

/// One receive attempt.
#[derive(Debug)]
pub enum Recv<'a> {
    /// A frame (valid until the next call) and its timestamp (ns since the
    /// epoch, 0 if unknown).
    Frame {
        /// The frame.
        data: &'a [u8],
        /// Its timestamp.
        ts_ns: u64,
    },
    /// Nothing right now (a live interface, or capture timing waiting).
    Idle,
    /// The source is exhausted.
    Done,
}

/// A packet source. A source is polled by the worker it is homed on.
pub trait Source: Send {
    /// The next frame.
    fn recv(&mut self) -> Recv<'_>;
    /// Frames the source saw but could not deliver (kernel ring drops,
    /// truncated records...).
    fn drops(&self) -> u64 {
        0
    }
    /// [`Source::drops`] by reason (e.g. the kernel's AF_XDP counters), each
    /// frame under one reason; drops not covered count as `source`.
    fn drop_reasons(&self) -> Vec<(&'static str, u64)> {
        Vec::new()
    }
    /// Why the source ended before its end, if it did (a corrupt capture
    /// record: which one and where). Asked once it returned [`Recv::Done`].
    fn failure(&self) -> Option<String> {
        None
    }
}

/// Frames from memory, cycled `rounds` times (or forever for `u64::MAX`).
///
/// Aligned to 128 bytes (two cache lines, the pair the prefetcher moves):
/// `pos`/`left` are written for every frame, and one source per worker is
/// boxed by the same thread one after the other, so without it two
/// workers' sources can share a cache line (false sharing on every frame).
///
/// The frames are copied into one buffer of this source's own, each at a
/// 64-byte boundary (a 64-byte frame is one cache line): a generator per
/// worker then reads memory no other worker's frames are interleaved
/// with. Kept as separately allocated `Vec`s made by one thread, the
/// frames of two workers (and the holes of the ones `--gen-owned` threw
/// away) were mixed in the heap, and each 64-byte frame in its 80-byte
/// chunk spanned two cache lines, plus a 24-byte `Vec` header read per frame.
#[repr(align(128))]
pub struct MemSource {
    /// The frames back to back, each starting at a multiple of 64.
    data: Box<[u8]>,
    /// `(offset, length)` of each frame in `data`.
    spans: Box<[(usize, usize)]>,
    pos: usize,
    left: u64,
}

impl MemSource {
    /// Delivers `total` frames taken in order (cycling) from `frames`.
    pub fn new(frames: std::sync::Arc<Vec<Vec<u8>>>, total: u64) -> Self {
        let left = if frames.is_empty() { 0 } else { total };
        let size: usize = frames.iter().map(|f| f.len().div_ceil(64) * 64).sum();
        let mut data = vec![0u8; size].into_boxed_slice();
        let mut spans = Vec::with_capacity(frames.len());
        let mut at = 0;
        for f in frames.iter() {
            data[at..at + f.len()].copy_from_slice(f);
            spans.push((at, f.len()));
            at += f.len().div_ceil(64) * 64;
        }
        MemSource { data, spans: spans.into_boxed_slice(), pos: 0, left }
    }
}

impl Source for MemSource {
    #[inline]
    fn recv(&mut self) -> Recv<'_> {
        if self.left == 0 {
            return Recv::Done;
        }
        self.left -= 1;
        let i = self.pos;
        self.pos += 1;
        if self.pos == self.spans.len() {
            self.pos = 0;
        }
        let (at, len) = self.spans[i];
        Recv::Frame { data: &self.data[at..at + len], ts_ns: 0 }
    }
}

/// A synthetic Ethernet header (locally administered MACs) for a raw IP
/// packet of version `v` (4 or 6).
pub fn eth_header_for(ip: &[u8]) -> [u8; 14] {
    use crate::wire::{ethernet, ethertype, EthernetFrame};
    let et = if ip.first().map(|b| b >> 4) == Some(6) { ethertype::IPV6 } else { ethertype::IPV4 };
    let mut h = [0u8; ethernet::HEADER_LEN];
    let mut e = EthernetFrame::new_unchecked(&mut h[..]);
    e.set_dst([0x02, 0, 0, 0, 0, 0x02]);
    e.set_src([0x02, 0, 0, 0, 0, 0x01]);
    e.set_ethertype(et);
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mem_source_cycles_then_ends() {
        let f = std::sync::Arc::new(vec![vec![1u8], vec![2u8]]);
        let mut s = MemSource::new(f.clone(), 3);
        let mut got = Vec::new();
        while let Recv::Frame { data, .. } = s.recv() {
            got.push(data[0]);
        }
        assert_eq!(got, vec![1, 2, 1]);
        // Its per-frame cursor never shares a cache-line pair with another's.
        let (a, b) = (Box::new(MemSource::new(f.clone(), 1)), Box::new(MemSource::new(f.clone(), 1)));
        let (pa, pb) = (&*a as *const MemSource as usize, &*b as *const MemSource as usize);
        assert!(pa % 128 == 0 && pb % 128 == 0 && pa / 128 != pb / 128);
        // Each source reads its own copy of the frames, each frame on a
        // 64-byte boundary: two workers' generators never read interleaved memory.
        let frames = std::sync::Arc::new(vec![vec![7u8; 64], vec![8u8; 65], vec![9u8; 3]]);
        let (mut a, mut b) = (MemSource::new(frames.clone(), 3), MemSource::new(frames, 3));
        let mut starts = Vec::new();
        for src in [&mut a, &mut b] {
            let mut got = Vec::new();
            while let Recv::Frame { data, .. } = src.recv() {
                starts.push(data.as_ptr() as usize);
                got.push((data[0], data.len()));
            }
            assert_eq!(got, vec![(7, 64), (8, 65), (9, 3)]);
        }
        assert_eq!(starts[1] - starts[0], 64);
        assert_eq!(starts[2] - starts[1], 128, "a 65-byte frame takes two lines");
        assert!(starts[3] >= starts[2] + 64 || starts[3] + 192 <= starts[0], "separate buffers");
        assert!(matches!(s.recv(), Recv::Done));
        assert_eq!(eth_header_for(&[0x60])[12..], [0x86, 0xdd]);
        assert_eq!(eth_header_for(&[0x45])[12..], [0x08, 0x00]);
    }
}
