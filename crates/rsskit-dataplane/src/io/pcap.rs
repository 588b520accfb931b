//! pcap and pcapng files through the `pcap-file` crate: a [`Source`] that
//! replays a capture at full speed or with its timing, looping N times, and
//! a [`Sink`] that writes a pcap or pcapng file (shared between workers, one
//! lock per flushed group).
//!
//! Link types read: Ethernet (1), raw IP (101, and 228 / 229 for IPv4 /
//! IPv6); raw IP gets a synthetic Ethernet header. `pcap-file` 2.0 reads
//! pcapng enhanced-packet timestamps as nanoseconds whatever the interface's
//! `if_tsresol` says; we rescale (the default resolution is microseconds).
//!
//! A corrupt record (longer than the snaplen or than the rest of the file,
//! a broken pcapng block) ends the input: [`Source::failure`] names the
//! record (pcap: packet record number; pcapng: block number) and its byte
//! offset, and the record counts as a source drop. With
//! [`PcapSource::lenient`] the input ends there quietly (no failure).
//! Looping stops after a pass that delivered no frame (an empty capture, or
//! one whose records are all unreadable, stays empty however often it is
//! played).

use super::{eth_header_for, Recv, Source};
use crate::output::Sink;
use crate::pool::Mbuf;
use pcap_file::pcap::{PcapHeader, PcapPacket, PcapReader, PcapWriter};
use pcap_file::pcapng::{Block, PcapNgReader};
use pcap_file::DataLink;
use std::fs::File;
use std::io::{BufReader, BufWriter, Read};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

enum Reader {
    Pcap(PcapReader<BufReader<File>>),
    PcapNg { r: PcapNgReader<BufReader<File>>, ifaces: Vec<(DataLink, Resolution)> },
}

/// Why a capture could not be opened, created or written.
#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    /// The file cannot be opened for reading.
    #[error("cannot open capture {}", path.display())]
    Open {
        /// The capture.
        path: PathBuf,
        /// What the system said.
        #[source]
        source: std::io::Error,
    },
    /// Shorter than any capture's magic number.
    #[error("{}: not a pcap or pcapng file (too short)", path.display())]
    TooShort {
        /// The capture.
        path: PathBuf,
        /// The short read.
        #[source]
        source: std::io::Error,
    },
    /// A pcapng magic number, but the section header cannot be read.
    #[error("{}: bad pcapng file", path.display())]
    BadPcapNg {
        /// The capture.
        path: PathBuf,
        /// What `pcap-file` said.
        #[source]
        source: pcap_file::PcapError,
    },
    /// Neither a pcap nor a pcapng header.
    #[error("{}: not a pcap or pcapng file", path.display())]
    NotACapture {
        /// The file.
        path: PathBuf,
        /// What `pcap-file` said.
        #[source]
        source: pcap_file::PcapError,
    },
    /// A link type the data plane has no parser for.
    #[error("{}: link type {link:?} is not supported (Ethernet or raw IP)", path.display())]
    LinkType {
        /// The capture.
        path: PathBuf,
        /// Its link type.
        link: DataLink,
    },
    /// The output file cannot be created.
    #[error("cannot create {}", path.display())]
    Create {
        /// The output.
        path: PathBuf,
        /// What the system said.
        #[source]
        source: std::io::Error,
    },
    /// Writing the output's header failed.
    #[error("writing {}", path.display())]
    Write {
        /// The output.
        path: PathBuf,
        /// What `pcap-file` said.
        #[source]
        source: pcap_file::PcapError,
    },
    /// The buffered output could not be flushed at close.
    #[error("flushing the output pcap")]
    Flush(#[source] std::io::Error),
}

type Result<T, E = CaptureError> = std::result::Result<T, E>;

/// Length of a pcap file header.
const PCAP_HEADER_LEN: u64 = 24;
/// Length of a pcap record header.
const PCAP_RECORD_HEADER_LEN: u64 = 16;

/// A capture record that cannot be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadRecord {
    /// The capture.
    pub path: PathBuf,
    /// "record" (pcap) or "block" (pcapng).
    pub unit: &'static str,
    /// 1-based number of the record (pcapng: of the block, the section
    /// header being block 1).
    pub number: u64,
    /// Byte offset of its start in the file.
    pub offset: u64,
    /// What is wrong with it.
    pub reason: String,
}

impl std::fmt::Display for BadRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: {} {} at byte offset {} is corrupt ({}); the input ends there",
            self.path.display(),
            self.unit,
            self.number,
            self.offset,
            self.reason
        )
    }
}

impl std::error::Error for BadRecord {}

/// What reading the next record gave.
enum Next {
    /// A frame in `buf`, with its timestamp.
    Frame(u64),
    End,
    Bad(BadRecord),
}

/// Describes a `pcap-file` error for a record.
fn reason(e: &pcap_file::PcapError) -> String {
    match e {
        pcap_file::PcapError::IoError(io) if io.kind() == std::io::ErrorKind::UnexpectedEof => {
            "it runs past the end of the file".to_string()
        }
        pcap_file::PcapError::InvalidField(f) => f.to_string(),
        e => e.to_string(),
    }
}

/// Length of the pcapng section header block at the start of `path`.
fn pcapng_shb_len(path: &Path) -> u64 {
    let mut b = [0u8; 12];
    let ok = File::open(path).and_then(|mut f| f.read_exact(&mut b)).is_ok();
    if !ok {
        return 0;
    }
    let len = [b[4], b[5], b[6], b[7]];
    u64::from(if b[8..12] == [0x1a, 0x2b, 0x3c, 0x4d] {
        u32::from_be_bytes(len)
    } else {
        u32::from_le_bytes(len)
    })
}

#[derive(Clone, Copy)]
enum Resolution {
    /// 10^-n seconds.
    Dec(u32),
    /// 2^-n seconds.
    Bin(u32),
}

impl Resolution {
    fn from_tsresol(v: u8) -> Self {
        if v & 0x80 == 0 {
            Resolution::Dec(u32::from(v))
        } else {
            Resolution::Bin(u32::from(v & 0x7f))
        }
    }

    /// Units (as `pcap-file` handed them to us, as "nanoseconds") to ns.
    fn to_ns(self, units: u128) -> u64 {
        let ns = match self {
            Resolution::Dec(n) if n <= 9 => units.saturating_mul(10u128.pow(9 - n)),
            Resolution::Dec(n) => units / 10u128.pow((n - 9).min(38)),
            Resolution::Bin(n) => units.saturating_mul(1_000_000_000) >> n.min(127),
        };
        ns.min(u128::from(u64::MAX)) as u64
    }
}

/// Is `lt` a link type we read, and does it need an Ethernet header?
fn link_kind(lt: DataLink) -> Option<bool> {
    match lt {
        DataLink::ETHERNET => Some(false),
        DataLink::RAW | DataLink::IPV4 | DataLink::IPV6 => Some(true),
        _ => None,
    }
}

fn open_reader(path: &Path) -> Result<Reader> {
    let open = |source| CaptureError::Open { path: path.to_path_buf(), source };
    let mut f = File::open(path).map_err(open)?;
    let mut magic = [0u8; 4];
    f.read_exact(&mut magic).map_err(|source| CaptureError::TooShort { path: path.to_path_buf(), source })?;
    drop(f);
    let f = BufReader::with_capacity(1 << 16, File::open(path).map_err(open)?);
    if magic == [0x0a, 0x0d, 0x0d, 0x0a] {
        let r = PcapNgReader::new(f)
            .map_err(|source| CaptureError::BadPcapNg { path: path.to_path_buf(), source })?;
        Ok(Reader::PcapNg { r, ifaces: Vec::new() })
    } else {
        let r = PcapReader::new(f)
            .map_err(|source| CaptureError::NotACapture { path: path.to_path_buf(), source })?;
        let link = r.header().datalink;
        if link_kind(link).is_none() {
            return Err(CaptureError::LinkType { path: path.to_path_buf(), link });
        }
        Ok(Reader::Pcap(r))
    }
}

/// Replays a capture.
pub struct PcapSource {
    path: PathBuf,
    reader: Reader,
    /// Passes still to start after this one.
    loops_left: u64,
    timing: bool,
    /// Capture time of the first packet of the pass and when we replayed it.
    t0: Option<(u64, Instant)>,
    buf: Vec<u8>,
    /// Frame waiting for its time (timing mode).
    pending: bool,
    pending_ts: u64,
    /// Records skipped: unsupported link type, read errors.
    skipped: u64,
    /// Position in the current pass: records (pcapng: blocks) read and the
    /// byte offset of the next one.
    record: u64,
    offset: u64,
    /// Frames delivered in the current pass.
    pass_frames: u64,
    /// A bad record ends the input quietly.
    lenient: bool,
    failure: Option<BadRecord>,
    /// No more frames (end of the last pass, or a bad record).
    finished: bool,
}

impl PcapSource {
    /// Opens `path` (pcap or pcapng, detected by the magic number); plays it
    /// `loops` times (at least once), at capture timing if `timing`.
    pub fn open(path: &Path, loops: u64, timing: bool) -> Result<Self> {
        let reader = open_reader(path)?;
        Ok(PcapSource {
            path: path.to_path_buf(),
            reader,
            loops_left: loops.max(1) - 1,
            timing,
            t0: None,
            buf: Vec::with_capacity(2048),
            pending: false,
            pending_ts: 0,
            skipped: 0,
            record: 0,
            offset: 0,
            pass_frames: 0,
            lenient: false,
            failure: None,
            finished: false,
        }
        .rewound())
    }

    /// A corrupt record ends the input quietly (no [`Source::failure`];
    /// the record still counts as a source drop).
    pub fn lenient(mut self) -> Self {
        self.lenient = true;
        self
    }

    /// Position counters for a fresh pass over the file.
    fn rewound(mut self) -> Self {
        self.rewind();
        self
    }

    fn rewind(&mut self) {
        match self.reader {
            Reader::Pcap(_) => {
                self.record = 0;
                self.offset = PCAP_HEADER_LEN;
            }
            Reader::PcapNg { .. } => {
                // The section header block was read on opening.
                self.record = 1;
                self.offset = pcapng_shb_len(&self.path);
            }
        }
        self.pass_frames = 0;
    }

    fn bad(&mut self, unit: &'static str, reason: String) -> Next {
        self.skipped += 1;
        Next::Bad(BadRecord {
            path: self.path.clone(),
            unit,
            number: self.record + 1,
            offset: self.offset,
            reason,
        })
    }

    /// Reads the next record into `self.buf` (with an Ethernet header if it
    /// is raw IP).
    fn read_next(&mut self) -> Next {
        loop {
            match &mut self.reader {
                Reader::Pcap(r) => {
                    let raw = link_kind(r.header().datalink) == Some(true);
                    let Some(rec) = r.next_packet() else { return Next::End };
                    match rec {
                        Ok(p) => {
                            let ts = p.timestamp.as_nanos().min(u128::from(u64::MAX)) as u64;
                            fill(&mut self.buf, &p.data, raw);
                            self.record += 1;
                            self.offset += PCAP_RECORD_HEADER_LEN + p.data.len() as u64;
                            return Next::Frame(ts);
                        }
                        Err(e) => return self.bad("record", reason(&e)),
                    }
                }
                Reader::PcapNg { r, ifaces } => {
                    // Before the block borrows the reader; a section header
                    // detects its own byte order.
                    let endianness = r.section().endianness;
                    let Some(raw) = r.next_raw_block() else { return Next::End };
                    let block = match raw {
                        Ok(raw) => {
                            let len = u64::from(raw.initial_len);
                            let b = match endianness {
                                pcap_file::Endianness::Big => {
                                    raw.try_into_block::<byteorder_slice::BigEndian>()
                                }
                                pcap_file::Endianness::Little => {
                                    raw.try_into_block::<byteorder_slice::LittleEndian>()
                                }
                            };
                            match b {
                                Ok(b) => {
                                    self.record += 1;
                                    self.offset += len;
                                    Ok(b)
                                }
                                Err(e) => Err(e),
                            }
                        }
                        Err(e) => Err(e),
                    };
                    let block = match block {
                        Ok(b) => b,
                        Err(e) => return self.bad("block", reason(&e)),
                    };
                    match block {
                        Block::InterfaceDescription(idb) => {
                            let mut res = Resolution::Dec(6);
                            for o in &idb.options {
                                if let pcap_file::pcapng::blocks::interface_description::InterfaceDescriptionOption::IfTsResol(v) = o {
                                res = Resolution::from_tsresol(*v);
                            }
                            }
                            ifaces.push((idb.linktype, res));
                        }
                        Block::EnhancedPacket(epb) => {
                            let Some(&(lt, res)) = ifaces.get(epb.interface_id as usize) else {
                                self.skipped += 1;
                                continue;
                            };
                            let Some(raw) = link_kind(lt) else {
                                self.skipped += 1;
                                continue;
                            };
                            let ts = res.to_ns(epb.timestamp.as_nanos());
                            fill(&mut self.buf, &epb.data, raw);
                            return Next::Frame(ts);
                        }
                        Block::SimplePacket(spb) => {
                            let Some(&(lt, _)) = ifaces.first() else {
                                self.skipped += 1;
                                continue;
                            };
                            let Some(raw) = link_kind(lt) else {
                                self.skipped += 1;
                                continue;
                            };
                            fill(&mut self.buf, &spb.data, raw);
                            return Next::Frame(0);
                        }
                        // A new section: its interfaces are numbered from 0.
                        Block::SectionHeader(_) => ifaces.clear(),
                        _ => continue,
                    }
                }
            }
        }
    }
}

fn fill(buf: &mut Vec<u8>, data: &[u8], raw_ip: bool) {
    buf.clear();
    if raw_ip {
        buf.extend_from_slice(&eth_header_for(data));
    }
    buf.extend_from_slice(data);
}

impl Source for PcapSource {
    fn recv(&mut self) -> Recv<'_> {
        if self.finished {
            return Recv::Done;
        }
        if !self.pending {
            let ts = loop {
                match self.read_next() {
                    Next::Frame(ts) => {
                        self.pass_frames += 1;
                        break ts;
                    }
                    Next::Bad(b) => {
                        self.finished = true;
                        if !self.lenient {
                            self.failure = Some(b);
                        }
                        return Recv::Done;
                    }
                    // A pass without a frame: every further pass is the same.
                    Next::End if self.loops_left > 0 && self.pass_frames > 0 => {
                        self.loops_left -= 1;
                        match open_reader(&self.path) {
                            Ok(r) => self.reader = r,
                            Err(e) => {
                                self.finished = true;
                                self.failure = Some(BadRecord {
                                    path: self.path.clone(),
                                    unit: "record",
                                    number: 0,
                                    offset: 0,
                                    reason: format!("reopening for the next pass: {e:#}"),
                                });
                                return Recv::Done;
                            }
                        }
                        // The previous pass had frames: this one gives one at
                        // once (or ends), so the caller's stop check is near.
                        self.rewind();
                        self.t0 = None;
                    }
                    Next::End => {
                        self.finished = true;
                        return Recv::Done;
                    }
                }
            };
            self.pending = true;
            self.pending_ts = ts;
        }
        if self.timing {
            let now = Instant::now();
            let (c0, w0) = *self.t0.get_or_insert((self.pending_ts, now));
            let due = w0 + Duration::from_nanos(self.pending_ts.saturating_sub(c0));
            if due > now {
                return Recv::Idle;
            }
        }
        self.pending = false;
        Recv::Frame { data: &self.buf, ts_ns: self.pending_ts }
    }

    fn drops(&self) -> u64 {
        self.skipped
    }

    fn failure(&self) -> Option<String> {
        self.failure.as_ref().map(|b| b.to_string())
    }
}

impl PcapSource {
    /// The corrupt record that ended the input, if any (not with [`PcapSource::lenient`]).
    pub fn bad_record(&self) -> Option<&BadRecord> {
        self.failure.as_ref()
    }
}

/// A pcap file (Ethernet, ns timestamps) written by any number of workers.
#[derive(Clone)]
pub struct PcapSink {
    w: Arc<Mutex<Writer>>,
}

enum Writer {
    Pcap(PcapWriter<BufWriter<File>>),
    /// pcapng: one Ethernet interface with nanosecond timestamps (if_tsresol 9).
    Ng(pcap_file::pcapng::PcapNgWriter<BufWriter<File>>),
}

/// Creates (truncates) an output capture, never through a symlink (root
/// writing in a shared directory: `rsskit_linux::fs::create_nofollow`).
fn create_output(path: &Path) -> Result<File> {
    rsskit_linux::fs::create_nofollow(path)
        .map_err(|source| CaptureError::Create { path: path.to_path_buf(), source })
}

impl PcapSink {
    /// Creates (truncates) `path`.
    pub fn create(path: &Path) -> Result<Self> {
        let f = create_output(path)?;
        let header = PcapHeader {
            datalink: DataLink::ETHERNET,
            ts_resolution: pcap_file::TsResolution::NanoSecond,
            snaplen: 65535,
            ..Default::default()
        };
        let w = PcapWriter::with_header(BufWriter::new(f), header)
            .map_err(|source| CaptureError::Write { path: path.to_path_buf(), source })?;
        Ok(PcapSink { w: Arc::new(Mutex::new(Writer::Pcap(w))) })
    }

    /// Creates (truncates) a pcapng file at `path`.
    pub fn create_ng(path: &Path) -> Result<Self> {
        use pcap_file::pcapng::blocks::interface_description::{
            InterfaceDescriptionBlock, InterfaceDescriptionOption,
        };
        let write = |source| CaptureError::Write { path: path.to_path_buf(), source };
        let f = create_output(path)?;
        let mut w = pcap_file::pcapng::PcapNgWriter::new(BufWriter::new(f)).map_err(write)?;
        let idb = InterfaceDescriptionBlock {
            linktype: DataLink::ETHERNET,
            snaplen: 65535,
            options: vec![InterfaceDescriptionOption::IfTsResol(9)],
        };
        w.write_block(&Block::InterfaceDescription(idb)).map_err(write)?;
        Ok(PcapSink { w: Arc::new(Mutex::new(Writer::Ng(w))) })
    }
}

impl Sink for PcapSink {
    fn send(&mut self, frames: &[Mbuf]) -> std::io::Result<usize> {
        let mut w = self.w.lock().unwrap_or_else(|e| e.into_inner());
        let mut n = 0;
        for m in frames {
            let ts = if m.ts_ns == 0 {
                std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default()
            } else {
                Duration::from_nanos(m.ts_ns)
            };
            let r = match &mut *w {
                Writer::Pcap(w) => w.write_packet(&PcapPacket::new(ts, m.len() as u32, m.data())).map(|_| ()),
                Writer::Ng(w) => {
                    // pcap-file 2.0 writes the Duration's nanoseconds as the
                    // raw units: right for if_tsresol 9.
                    let epb = pcap_file::pcapng::blocks::enhanced_packet::EnhancedPacketBlock {
                        interface_id: 0,
                        timestamp: ts,
                        original_len: m.len() as u32,
                        data: std::borrow::Cow::Borrowed(m.data()),
                        options: vec![],
                    };
                    w.write_block(&Block::EnhancedPacket(epb)).map(|_| ())
                }
            };
            r.map_err(|e| std::io::Error::other(e.to_string()))?;
            n += 1;
        }
        Ok(n)
    }
}

impl PcapSink {
    /// Flushes and closes the file once every clone is done (call after the
    /// workers stopped). Returns an error if writing failed.
    pub fn close(self) -> Result<()> {
        match Arc::try_unwrap(self.w) {
            Ok(m) => {
                let w = m.into_inner().unwrap_or_else(|e| e.into_inner());
                let mut bw = match w {
                    Writer::Pcap(w) => w.into_writer(),
                    Writer::Ng(w) => w.into_inner(),
                };
                use std::io::Write;
                bw.flush().map_err(CaptureError::Flush)?;
                Ok(())
            }
            Err(_) => Ok(()), // other clones alive: they flush on drop
        }
    }
}

/// Reads every Ethernet frame of a pcap / pcapng file (tests, tools).
pub fn read_all(path: &Path) -> Result<Vec<(u64, Vec<u8>)>> {
    let mut s = PcapSource::open(path, 1, false)?;
    let mut out = Vec::new();
    while let Recv::Frame { data, ts_ns } = s.recv() {
        out.push((ts_ns, data.to_vec()));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_output_capture_is_never_written_through_a_symlink() {
        let dir = std::env::temp_dir().join(format!("rsskit-pcap-link-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("victim"), b"precious").unwrap();
        std::os::unix::fs::symlink(dir.join("victim"), dir.join("out.pcap")).unwrap();
        assert!(matches!(PcapSink::create(&dir.join("out.pcap")), Err(CaptureError::Create { .. })));
        assert!(matches!(PcapSink::create_ng(&dir.join("out.pcap")), Err(CaptureError::Create { .. })));
        assert_eq!(std::fs::read(dir.join("victim")).unwrap(), b"precious");
        assert!(PcapSink::create(&dir.join("plain.pcap")).is_ok(), "a plain path still works");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn write_then_read_back() {
        let dir = std::env::temp_dir().join(format!("rsskit-pcap-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("t.pcap");
        let mut s = PcapSink::create(&p).unwrap();
        let frames: Vec<Mbuf> =
            (0..3u8).map(|i| Mbuf::heap(vec![i; 60], 0, 1_000_000_000 + u64::from(i), 0)).collect();
        assert_eq!(s.send(&frames).unwrap(), 3);
        s.close().unwrap();
        let back = read_all(&p).unwrap();
        assert_eq!(back.len(), 3);
        assert_eq!(back[2], (1_000_000_002, vec![2; 60]));
        // Looping.
        let mut src = PcapSource::open(&p, 3, false).unwrap();
        let mut n = 0;
        while let Recv::Frame { .. } = src.recv() {
            n += 1;
        }
        assert_eq!(n, 9);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn pcapng_write_then_read_back() {
        let p = std::env::temp_dir().join(format!("rsskit-ngw-{}.pcapng", std::process::id()));
        let mut s = PcapSink::create_ng(&p).unwrap();
        let frames: Vec<Mbuf> = (0..3u8)
            .map(|i| Mbuf::heap(vec![i; 60], 0, 1_700_000_000_123_456_789 + u64::from(i), 0))
            .collect();
        assert_eq!(s.send(&frames).unwrap(), 3);
        s.close().unwrap();
        let back = read_all(&p).unwrap();
        assert_eq!(back.len(), 3);
        assert_eq!(back[1], (1_700_000_000_123_456_790, vec![1; 60]), "nanosecond timestamps survive");
        std::fs::remove_file(&p).unwrap();
    }

    #[test]
    fn missing_and_garbage_files() {
        let e = PcapSource::open(Path::new("/nonexistent/x.pcap"), 1, false).err().unwrap();
        assert!(format!("{e:#}").contains("cannot open capture"), "{e:#}");
        let p = std::env::temp_dir().join(format!("rsskit-garbage-{}.pcap", std::process::id()));
        std::fs::write(&p, b"hello world, not a capture").unwrap();
        let e = PcapSource::open(&p, 1, false).err().unwrap();
        assert!(format!("{e:#}").contains("not a pcap"), "{e:#}");
        std::fs::remove_file(&p).unwrap();
    }

    #[test]
    fn pcapng_raw_ip_and_default_microseconds() {
        use pcap_file::pcapng::blocks::enhanced_packet::EnhancedPacketBlock;
        use pcap_file::pcapng::blocks::interface_description::InterfaceDescriptionBlock;
        use pcap_file::pcapng::PcapNgWriter;
        use std::borrow::Cow;
        let p = std::env::temp_dir().join(format!("rsskit-ng-{}.pcapng", std::process::id()));
        let ip = crate::craft::ipv4(
            &crate::craft::V4::new([1, 2, 3, 4].into(), [5, 6, 7, 8].into(), 17),
            &crate::craft::udp(1, 2, b"ng"),
        );
        {
            let mut w = PcapNgWriter::new(File::create(&p).unwrap()).unwrap();
            let idb = InterfaceDescriptionBlock { linktype: DataLink::RAW, snaplen: 0, options: vec![] };
            w.write_block(&Block::InterfaceDescription(idb)).unwrap();
            // No if_tsresol: microseconds. pcap-file writes the raw units we give as "nanos".
            let epb = EnhancedPacketBlock {
                interface_id: 0,
                timestamp: Duration::from_nanos(1_500_000),
                original_len: ip.len() as u32,
                data: Cow::Borrowed(&ip),
                options: vec![],
            };
            w.write_block(&Block::EnhancedPacket(epb)).unwrap();
        }
        let got = read_all(&p).unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].0, 1_500_000_000, "1.5 s in microsecond units");
        assert_eq!(&got[0].1[12..14], &[0x08, 0x00], "synthetic Ethernet header for raw IP");
        assert_eq!(&got[0].1[14..], &ip[..]);
        std::fs::remove_file(&p).unwrap();
    }

    #[test]
    fn capture_timing_is_honoured() {
        let p = std::env::temp_dir().join(format!("rsskit-timing-{}.pcap", std::process::id()));
        let mut s = PcapSink::create(&p).unwrap();
        let frames: Vec<Mbuf> = [0u64, 150_000_000, 300_000_000]
            .iter()
            .map(|&t| Mbuf::heap(vec![7; 60], 0, 5_000_000_000 + t, 0))
            .collect();
        s.send(&frames).unwrap();
        s.close().unwrap();
        for (timing, min_ms, max_ms) in [(true, 280, 5000), (false, 0, 250)] {
            let mut src = PcapSource::open(&p, 1, timing).unwrap();
            let t0 = Instant::now();
            let mut n = 0;
            loop {
                match src.recv() {
                    Recv::Frame { .. } => n += 1,
                    Recv::Idle => std::thread::sleep(Duration::from_millis(1)),
                    Recv::Done => break,
                }
            }
            let ms = t0.elapsed().as_millis();
            assert_eq!(n, 3);
            assert!((min_ms..max_ms).contains(&ms), "timing={timing}: {ms} ms");
        }
        std::fs::remove_file(&p).unwrap();
    }

    #[test]
    fn corrupt_pcapng_block_named_with_offset() {
        let p = std::env::temp_dir().join(format!("rsskit-badng-{}.pcapng", std::process::id()));
        let mut s = PcapSink::create_ng(&p).unwrap();
        let frames: Vec<Mbuf> = (0..2u8).map(|i| Mbuf::heap(vec![i; 60], 0, 1, 0)).collect();
        s.send(&frames).unwrap();
        s.close().unwrap();
        let mut bytes = std::fs::read(&p).unwrap();
        let good_len = bytes.len() as u64;
        // An enhanced packet block whose trailing length disagrees.
        let mut bad = Vec::new();
        bad.extend_from_slice(&6u32.to_le_bytes());
        bad.extend_from_slice(&32u32.to_le_bytes());
        bad.extend_from_slice(&[0u8; 20]);
        bad.extend_from_slice(&36u32.to_le_bytes());
        bytes.extend_from_slice(&bad);
        std::fs::write(&p, &bytes).unwrap();
        for lenient in [false, true] {
            let src = PcapSource::open(&p, 5, false).unwrap();
            let mut src = if lenient { src.lenient() } else { src };
            let mut n = 0;
            while let Recv::Frame { .. } = src.recv() {
                n += 1;
            }
            assert_eq!(n, 2, "the frames before the bad block, once: it ends the loop too");
            assert_eq!(src.drops(), 1);
            if lenient {
                assert_eq!(src.failure(), None);
            } else {
                let b = src.bad_record().expect("named");
                // Blocks: section header, interface, two packets, then the bad one.
                assert_eq!((b.unit, b.number, b.offset), ("block", 5, good_len), "{b}");
                assert!(src.failure().unwrap().contains(&format!("block 5 at byte offset {good_len}")));
            }
        }
        std::fs::remove_file(&p).unwrap();
    }

    #[test]
    fn empty_capture_loops_end() {
        let p = std::env::temp_dir().join(format!("rsskit-emptyloop-{}.pcap", std::process::id()));
        PcapSink::create(&p).unwrap().close().unwrap();
        let mut src = PcapSource::open(&p, u64::MAX, false).unwrap();
        assert!(matches!(src.recv(), Recv::Done), "an empty pass ends the loop");
        assert_eq!(src.failure(), None);
        std::fs::remove_file(&p).unwrap();
    }

    #[test]
    fn tsresol() {
        assert_eq!(Resolution::Dec(6).to_ns(5), 5000);
        assert_eq!(Resolution::Dec(9).to_ns(5), 5);
        assert_eq!(Resolution::Bin(10).to_ns(1024), 1_000_000_000);
    }
}
