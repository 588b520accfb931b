//! The probe wire format shared by `rsskit udp-echo` and `rsskit udp-load`.
//!
//! A probe datagram is at least [`HEADER_LEN`] (40) bytes, all integers big endian:
//!
//! | bytes     | field                                                        |
//! |-----------|--------------------------------------------------------------|
//! | `0..4`    | magic `b"RSK1"`                                              |
//! | `4..8`    | stream id, u32                                               |
//! | `8..16`   | sequence number, u64                                         |
//! | `16..24`  | client send timestamp in ns, u64                             |
//! | `24..40`  | server stamp (written by the echo server), see [`ServerStamp`] |
//! | `40..`    | padding, echoed as is                                        |
//!
//! The server stamp: worker u16, CPU the worker is pinned to u16, software
//! RSS bucket u16, CPU the kernel processed the datagram on u16
//! ([`CPU_UNKNOWN`] when unknown), Toeplitz hash u32, flags u32
//! ([`FLAG_MISDIRECTED`]: the bucket is not owned by the receiving worker).
//!
//! Datagrams shorter than 40 bytes or without the magic are "foreign": the
//! server echoes them unchanged.

/// First four bytes of every probe.
pub const MAGIC: [u8; 4] = *b"RSK1";
/// Smallest probe: header plus server stamp.
pub const HEADER_LEN: usize = 40;
/// Offset of the server stamp area.
pub const STAMP_OFFSET: usize = 24;
/// Length of the server stamp area.
pub const STAMP_LEN: usize = 16;
// The stamp ends the header.
const _: () = assert!(STAMP_OFFSET + STAMP_LEN == HEADER_LEN);
/// `kernel_cpu` value meaning "not known".
pub const CPU_UNKNOWN: u16 = 0xffff;
/// Flag: the datagram's bucket is not owned by the worker that received it.
pub const FLAG_MISDIRECTED: u32 = 1;

/// What the client writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Probe {
    /// Stream id (one per client socket).
    pub stream: u32,
    /// Sequence number within the stream.
    pub seq: u64,
    /// Client send timestamp, ns (any monotonic clock the client likes).
    pub sent_ns: u64,
}

/// What the server writes into bytes `24..40`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ServerStamp {
    /// Worker index.
    pub worker: u16,
    /// CPU the worker is pinned to.
    pub cpu: u16,
    /// Software RSS bucket of the datagram as received.
    pub bucket: u16,
    /// CPU the kernel processed the datagram on ([`CPU_UNKNOWN`] if unknown).
    pub kernel_cpu: u16,
    /// Toeplitz hash of the datagram's tuple (server's key and hash config).
    pub hash: u32,
    /// [`FLAG_MISDIRECTED`] and future flags.
    pub flags: u32,
}

impl ServerStamp {
    /// Whether [`FLAG_MISDIRECTED`] is set.
    pub fn misdirected(&self) -> bool {
        self.flags & FLAG_MISDIRECTED != 0
    }
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_be_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// Whether `buf` is a probe (long enough, with the magic).
#[inline]
pub fn is_probe(buf: &[u8]) -> bool {
    buf.len() >= HEADER_LEN && buf[..4] == MAGIC
}

/// Writes the probe header into `buf[..40]` (server stamp zeroed); the rest
/// of `buf` is left alone (padding). Returns `false`, writing nothing, when
/// `buf` is shorter than [`HEADER_LEN`].
pub fn encode_probe(buf: &mut [u8], p: &Probe) -> bool {
    if buf.len() < HEADER_LEN {
        return false;
    }
    buf[0..4].copy_from_slice(&MAGIC);
    buf[4..8].copy_from_slice(&p.stream.to_be_bytes());
    buf[8..16].copy_from_slice(&p.seq.to_be_bytes());
    buf[16..24].copy_from_slice(&p.sent_ns.to_be_bytes());
    buf[STAMP_OFFSET..HEADER_LEN].fill(0);
    true
}

/// The client's part of a probe, if `buf` is one.
pub fn decode_probe(buf: &[u8]) -> Option<Probe> {
    is_probe(buf).then(|| Probe { stream: u32_at(buf, 4), seq: u64_at(buf, 8), sent_ns: u64_at(buf, 16) })
}

impl ServerStamp {
    /// The stamp area as written into a probe (bytes `24..40`).
    #[inline]
    pub fn to_bytes(&self) -> [u8; STAMP_LEN] {
        let mut a = [0u8; STAMP_LEN];
        a[0..2].copy_from_slice(&self.worker.to_be_bytes());
        a[2..4].copy_from_slice(&self.cpu.to_be_bytes());
        a[4..6].copy_from_slice(&self.bucket.to_be_bytes());
        a[6..8].copy_from_slice(&self.kernel_cpu.to_be_bytes());
        a[8..12].copy_from_slice(&self.hash.to_be_bytes());
        a[12..16].copy_from_slice(&self.flags.to_be_bytes());
        a
    }
}

/// Overwrites the server stamp area of a probe. Returns `false`, writing
/// nothing, when `buf` is not a probe.
#[inline]
pub fn write_stamp(buf: &mut [u8], s: &ServerStamp) -> bool {
    write_stamp_bytes(buf, &s.to_bytes())
}

/// [`write_stamp`] with the stamp already encoded ([`ServerStamp::to_bytes`]):
/// the segments of one coalesced buffer share one stamp, encoded once.
#[inline]
pub fn write_stamp_bytes(buf: &mut [u8], stamp: &[u8; STAMP_LEN]) -> bool {
    if !is_probe(buf) {
        return false;
    }
    buf[STAMP_OFFSET..HEADER_LEN].copy_from_slice(stamp);
    true
}

/// The datagrams of a coalesced buffer: every `seg` bytes of `buf` (`seg`
/// 0, or not below `buf.len()`: `buf` whole, even empty), each a probe or
/// foreign. Writes `stamp` into every probe when `stamp` is given; returns
/// how many are foreign.
///
/// Written out rather than `chunks_mut` + [`write_stamp_bytes`]: whole
/// segments go through `chunks_exact_mut` (a fixed stride, no `min` per
/// segment), the loop counts probes (foreign = segments - probes, so a
/// probe's path is compare, store, count, next) and the stamp is stored as
/// one 16-byte word, so that the compiler does not split it into one store
/// per field (bench/udp-instr: the plain form was 84 instructions per
/// datagram with GSO bursts; 20, then 12, then 10 instructions per segment).
#[inline]
pub fn stamp_segments(buf: &mut [u8], seg: usize, stamp: Option<&[u8; STAMP_LEN]>) -> u64 {
    let len = buf.len();
    if len == 0 {
        // One empty datagram: not a probe.
        return 1;
    }
    let seg = if seg == 0 || seg >= len { len } else { seg };
    let word = stamp.map(|s| u128::from_ne_bytes(*s));
    let mut whole = buf.chunks_exact_mut(seg);
    let segments = whole.len() as u64;
    let mut probes = 0;
    // Shorter segments are too short to be probes, every one of them. One
    // loop per case, so that the stamp's presence is not tested per segment.
    if seg >= HEADER_LEN {
        match word {
            Some(w) => {
                for s in &mut whole {
                    probes += u64::from(stamp_one(s, Some(w)));
                }
            }
            None => {
                for s in &mut whole {
                    probes += u64::from(stamp_one(s, None));
                }
            }
        }
    }
    let mut foreign = segments - probes;
    let tail = whole.into_remainder();
    if !tail.is_empty() {
        foreign += u64::from(!stamp_one(tail, word));
    }
    foreign
}

/// One segment of [`stamp_segments`]: whether it is a probe (stamped when
/// `word` is given).
#[inline(always)]
fn stamp_one(seg: &mut [u8], word: Option<u128>) -> bool {
    match seg.first_chunk_mut::<HEADER_LEN>() {
        Some(head) if head[..4] == MAGIC => {
            if let Some(w) = word {
                head[STAMP_OFFSET..].copy_from_slice(&w.to_ne_bytes());
            }
            true
        }
        _ => false,
    }
}

/// The server stamp of a probe (all zero if the server never stamped it).
pub fn read_stamp(buf: &[u8]) -> Option<ServerStamp> {
    if !is_probe(buf) {
        return None;
    }
    let o = STAMP_OFFSET;
    Some(ServerStamp {
        worker: u16_at(buf, o),
        cpu: u16_at(buf, o + 2),
        bucket: u16_at(buf, o + 4),
        kernel_cpu: u16_at(buf, o + 6),
        hash: u32_at(buf, o + 8),
        flags: u32_at(buf, o + 12),
    })
}

/// Both halves of an echoed probe.
pub fn decode(buf: &[u8]) -> Option<(Probe, ServerStamp)> {
    Some((decode_probe(buf)?, read_stamp(buf)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `stamp_segments` against the plain form (`chunks_mut` + `write_stamp_bytes`)
    /// over every buffer length to 130 and segment size to 70, with probes at
    /// varying segments (and one-byte-short and broken-magic look-alikes).
    #[test]
    fn stamp_segments_is_chunks_plus_write_stamp() {
        let stamp: [u8; STAMP_LEN] = std::array::from_fn(|i| 0xc0 + i as u8);
        let p = Probe { stream: 9, seq: 1, sent_ns: 2 };
        for len in 0..130usize {
            for seg in 0..70usize {
                let mut buf: Vec<u8> = (0..len).map(|i| (i * 7 + seg) as u8).collect();
                let step = if seg == 0 || seg >= len { len.max(1) } else { seg };
                for (k, at) in (0..len).step_by(step).enumerate() {
                    let end = len.min(at + step);
                    match (k + len) % 4 {
                        0 | 1 => _ = encode_probe(&mut buf[at..end], &p),
                        2 if end - at > 0 => buf[at] = b'R',
                        _ => {}
                    }
                }
                let mut want = buf.clone();
                let mark = |d: &mut [u8]| u64::from(!write_stamp_bytes(d, &stamp));
                let dgrams = if seg == 0 || len <= seg { 1 } else { len.div_ceil(seg) };
                let want_foreign: u64 =
                    if dgrams > 1 { want.chunks_mut(seg).map(mark).sum() } else { mark(&mut want) };
                let mut got = buf.clone();
                assert_eq!(stamp_segments(&mut got, seg, Some(&stamp)), want_foreign, "len {len} seg {seg}");
                assert_eq!(got, want, "len {len} seg {seg}");
                let mut sink = buf.clone();
                assert_eq!(stamp_segments(&mut sink, seg, None), want_foreign, "sink: len {len} seg {seg}");
                assert_eq!(sink, buf, "sink writes nothing");
            }
        }
    }

    #[test]
    fn round_trip() {
        let mut buf = vec![0xaau8; 64];
        let p = Probe { stream: 0x0102_0304, seq: 0x1122_3344_5566_7788, sent_ns: 42 };
        assert!(encode_probe(&mut buf, &p));
        assert_eq!(&buf[..4], b"RSK1");
        assert_eq!(&buf[4..8], &[1, 2, 3, 4]);
        assert_eq!(buf[8], 0x11);
        assert!(buf[24..40].iter().all(|&b| b == 0));
        assert!(buf[40..].iter().all(|&b| b == 0xaa), "padding untouched");
        assert_eq!(decode_probe(&buf), Some(p));
        assert_eq!(read_stamp(&buf), Some(ServerStamp::default()));

        let s = ServerStamp {
            worker: 3,
            cpu: 7,
            bucket: 0x7f,
            kernel_cpu: CPU_UNKNOWN,
            hash: 0xdead_beef,
            flags: FLAG_MISDIRECTED,
        };
        assert!(write_stamp(&mut buf, &s));
        assert_eq!(&buf[24..28], &[0, 3, 0, 7]);
        assert_eq!(&buf[28..32], &[0, 0x7f, 0xff, 0xff]);
        assert_eq!(&buf[32..36], &[0xde, 0xad, 0xbe, 0xef]);
        assert_eq!(&buf[36..40], &[0, 0, 0, 1]);
        assert_eq!(decode(&buf), Some((p, s)));
        assert!(decode(&buf).unwrap().1.misdirected());
        assert!(buf[40..].iter().all(|&b| b == 0xaa), "padding untouched by the stamp");
    }

    #[test]
    fn foreign_datagrams() {
        let mut short = [0u8; 39];
        short[..4].copy_from_slice(b"RSK1");
        assert!(!is_probe(&short));
        assert!(!write_stamp(&mut short, &ServerStamp::default()));
        assert!(!encode_probe(&mut short, &Probe::default()));
        assert_eq!(decode(&short), None);
        let mut other = [0u8; 100];
        other[..4].copy_from_slice(b"RSK2");
        let before = other;
        assert!(!write_stamp(&mut other, &ServerStamp { worker: 1, ..Default::default() }));
        assert!(!write_stamp_bytes(&mut other, &[0xff; STAMP_LEN]));
        assert!(!write_stamp_bytes(&mut short, &[0xff; STAMP_LEN]));
        assert_eq!(other, before, "foreign datagram unchanged");
        assert_eq!(decode_probe(&other), None);
    }

    #[test]
    fn exactly_header_len() {
        let mut buf = [0u8; HEADER_LEN];
        assert!(encode_probe(&mut buf, &Probe { stream: 1, seq: 2, sent_ns: 3 }));
        assert!(write_stamp(&mut buf, &ServerStamp { hash: 9, ..Default::default() }));
        assert_eq!(read_stamp(&buf).unwrap().hash, 9);
    }
}
