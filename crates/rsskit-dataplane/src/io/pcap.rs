//! pcap and pcapng files through the `pcap-file` crate: a [`Source`] that
//! replays a capture at full speed or with its timing, looping N times, and
//! a [`Sink`] that writes a pcap or pcapng file (shared between workers, one
//! lock per flushed group).
//!
//! Link types read: Ethernet (1), raw IP (101, and 228 / 229 for IPv4 /
//! IPv6); raw IP gets a synthetic Ethernet header. `pcap-file` 2.0 reads
//! pcapng enhanced-packet timestamps as nanoseconds whatever the interface's
//! `if_tsresol` says; we rescale (the default resolution is microseconds).

use super::{eth_header_for, Recv, Source};
use crate::output::Sink;
use crate::pool::Mbuf;
use anyhow::{bail, Context, Result};
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
    let mut f = File::open(path).with_context(|| format!("cannot open capture {}", path.display()))?;
    let mut magic = [0u8; 4];
    f.read_exact(&mut magic)
        .with_context(|| format!("{}: not a pcap or pcapng file (too short)", path.display()))?;
    drop(f);
    let f = BufReader::with_capacity(1 << 16, File::open(path)?);
    if magic == [0x0a, 0x0d, 0x0d, 0x0a] {
        let r =
            PcapNgReader::new(f).map_err(|e| anyhow::anyhow!("{}: bad pcapng file: {e}", path.display()))?;
        Ok(Reader::PcapNg { r, ifaces: Vec::new() })
    } else {
        let r = PcapReader::new(f)
            .map_err(|e| anyhow::anyhow!("{}: not a pcap or pcapng file: {e}", path.display()))?;
        let lt = r.header().datalink;
        if link_kind(lt).is_none() {
            bail!("{}: link type {lt:?} is not supported (Ethernet or raw IP)", path.display());
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
        })
    }

    /// Reads the next record into `self.buf` (with an Ethernet header if it
    /// is raw IP); returns its timestamp, or `None` at the end of the file.
    fn read_next(&mut self) -> Option<u64> {
        loop {
            match &mut self.reader {
                Reader::Pcap(r) => {
                    let raw = link_kind(r.header().datalink) == Some(true);
                    match r.next_packet()? {
                        Ok(p) => {
                            let ts = p.timestamp.as_nanos().min(u128::from(u64::MAX)) as u64;
                            fill(&mut self.buf, &p.data, raw);
                            return Some(ts);
                        }
                        Err(_) => {
                            self.skipped += 1;
                            return None; // a broken record ends the file
                        }
                    }
                }
                Reader::PcapNg { r, ifaces } => match r.next_block()? {
                    Ok(Block::InterfaceDescription(idb)) => {
                        let mut res = Resolution::Dec(6);
                        for o in &idb.options {
                            if let pcap_file::pcapng::blocks::interface_description::InterfaceDescriptionOption::IfTsResol(v) = o {
                                res = Resolution::from_tsresol(*v);
                            }
                        }
                        ifaces.push((idb.linktype, res));
                    }
                    Ok(Block::EnhancedPacket(epb)) => {
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
                        return Some(ts);
                    }
                    Ok(Block::SimplePacket(spb)) => {
                        let Some(&(lt, _)) = ifaces.first() else {
                            self.skipped += 1;
                            continue;
                        };
                        let Some(raw) = link_kind(lt) else {
                            self.skipped += 1;
                            continue;
                        };
                        fill(&mut self.buf, &spb.data, raw);
                        return Some(0);
                    }
                    Ok(_) => continue,
                    Err(_) => {
                        self.skipped += 1;
                        return None;
                    }
                },
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
        if !self.pending {
            let ts = loop {
                match self.read_next() {
                    Some(ts) => break ts,
                    None if self.loops_left > 0 => {
                        self.loops_left -= 1;
                        match open_reader(&self.path) {
                            Ok(r) => self.reader = r,
                            Err(_) => return Recv::Done,
                        }
                        self.t0 = None;
                    }
                    None => return Recv::Done,
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

impl PcapSink {
    /// Creates (truncates) `path`.
    pub fn create(path: &Path) -> Result<Self> {
        let f = File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
        let header = PcapHeader {
            datalink: DataLink::ETHERNET,
            ts_resolution: pcap_file::TsResolution::NanoSecond,
            snaplen: 65535,
            ..Default::default()
        };
        let w = PcapWriter::with_header(BufWriter::new(f), header)
            .map_err(|e| anyhow::anyhow!("writing {}: {e}", path.display()))?;
        Ok(PcapSink { w: Arc::new(Mutex::new(Writer::Pcap(w))) })
    }

    /// Creates (truncates) a pcapng file at `path`.
    pub fn create_ng(path: &Path) -> Result<Self> {
        use pcap_file::pcapng::blocks::interface_description::{
            InterfaceDescriptionBlock, InterfaceDescriptionOption,
        };
        let f = File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
        let mut w = pcap_file::pcapng::PcapNgWriter::new(BufWriter::new(f))
            .map_err(|e| anyhow::anyhow!("writing {}: {e}", path.display()))?;
        let idb = InterfaceDescriptionBlock {
            linktype: DataLink::ETHERNET,
            snaplen: 65535,
            options: vec![InterfaceDescriptionOption::IfTsResol(9)],
        };
        w.write_block(&Block::InterfaceDescription(idb))
            .map_err(|e| anyhow::anyhow!("writing {}: {e}", path.display()))?;
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
                bw.flush().context("flushing the output pcap")?;
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
        let ip = crate::build::ipv4(
            &crate::build::V4::new([1, 2, 3, 4].into(), [5, 6, 7, 8].into(), 17),
            &crate::build::udp(1, 2, b"ng"),
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
    fn tsresol() {
        assert_eq!(Resolution::Dec(6).to_ns(5), 5000);
        assert_eq!(Resolution::Dec(9).to_ns(5), 5);
        assert_eq!(Resolution::Bin(10).to_ns(1024), 1_000_000_000);
    }
}
