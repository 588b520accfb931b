//! AF_XDP input and output for the data plane: the kernel side (UMEM,
//! rings, the XSKMAP redirect program) is `rsskit_linux::xsk`; this module
//! adapts it to [`Source`] and [`Sink`], one socket per (queue, worker), so
//! the netisr dispatch, reassembly, re-injection and firewall run unchanged
//! on top, as for AF_PACKET ([`super::afpacket`]).
//!
//! Accounting: the frames the kernel lost before the RX ring (its
//! `XDP_STATISTICS`: RX ring full, fill ring empty, other) are the source's
//! drops, by reason.

use super::{Recv, Source};
use crate::output::Sink;
use crate::pool::Mbuf;
use anyhow::{bail, Context, Result};
use rsskit_linux::xsk::{self, XdpProgram, XskConfig, XskMode, XskRx, XskStats, XskTx};
use std::cell::Cell;
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub use rsskit_linux::xsk::MIN_FRAME_SIZE;

/// The UMEM frame size for a data plane buffer stride: the stride, raised
/// to the kernel's smallest UMEM chunk (2048) and capped at the page size.
pub fn frame_size_for(stride: usize) -> u32 {
    (stride as u32).clamp(MIN_FRAME_SIZE, 4096)
}

/// Frames of one RX queue, read in place from the UMEM.
pub struct AfXdpSource {
    rx: XskRx,
    /// Keeps the redirect program attached while any socket reads.
    _prog: Arc<Mutex<XdpProgram>>,
    ts_ns: u64,
    /// The kernel's counters as last read by [`Source::drops`].
    stats: Cell<XskStats>,
}

fn realtime_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

impl Source for AfXdpSource {
    fn recv(&mut self) -> Recv<'_> {
        // One clock read per batch: frames of a batch share its timestamp.
        if self.rx.at_batch_start() {
            self.ts_ns = realtime_ns();
        }
        match self.rx.next_frame() {
            Some(data) => Recv::Frame { data, ts_ns: self.ts_ns },
            None => Recv::Idle,
        }
    }

    fn drops(&self) -> u64 {
        // One getsockopt per publish: drop_reasons (asked right after)
        // uses the same reading.
        let st = self.rx.socket().stats();
        self.stats.set(st);
        st.rx_lost()
    }

    fn drop_reasons(&self) -> Vec<(&'static str, u64)> {
        let st = self.stats.get();
        if st.rx_lost() == 0 {
            return Vec::new();
        }
        st.rx_loss_reasons().into_iter().filter(|r| r.1 > 0).collect()
    }
}

/// What [`open_sources`] set up, for the report.
#[derive(Debug, Clone)]
pub struct XdpSetup {
    /// The queues read.
    pub queues: Vec<u32>,
    /// Zero-copy or copy (the kernel's choice, the same for every queue).
    pub mode: XskMode,
    /// UMEM frame size.
    pub frame_size: u32,
}

impl XdpSetup {
    /// One line: `xdp:IF: N AF_XDP socket(s) on queues 0,1, copy mode, 2048-byte UMEM frames`.
    pub fn line(&self, ifname: &str, dir: &str) -> String {
        let q: Vec<String> = self.queues.iter().map(|q| q.to_string()).collect();
        format!(
            "{dir} xdp:{ifname}: {} AF_XDP socket(s) on queue(s) {}, {} mode, {}-byte UMEM frames",
            self.queues.len(),
            q.join(","),
            self.mode.name(),
            self.frame_size
        )
    }
}

/// A source and the worker it is homed on.
pub type HomedSource = (usize, Box<dyn Source>);

/// Attaches the redirect program to `ifname` and opens one socket per
/// queue (`queues`, or every RX queue), queue i read by worker i mod
/// `workers`. Returns the sources with their workers.
pub fn open_sources(
    ifname: &str,
    queues: Option<&[u32]>,
    workers: usize,
    stride: usize,
) -> Result<(Vec<HomedSource>, XdpSetup)> {
    let queues: Vec<u32> = match queues {
        Some(q) => q.to_vec(),
        None => (0..xsk::rx_queue_count(ifname).unwrap_or(1).max(1)).collect(),
    };
    if queues.is_empty() {
        bail!("xdp:{ifname}: no queue to read");
    }
    let cfg = XskConfig { frame_size: frame_size_for(stride), ..Default::default() };
    let prog = XdpProgram::attach(ifname)?;
    let prog = Arc::new(Mutex::new(prog));
    let mut out: Vec<HomedSource> = Vec::new();
    let mut mode = XskMode::Copy;
    for (i, &q) in queues.iter().enumerate() {
        let rx = XskRx::open(ifname, q, cfg)?;
        prog.lock().unwrap_or_else(|e| e.into_inner()).register(rx.socket())?;
        mode = rx.socket().mode();
        out.push((
            i % workers.max(1),
            Box::new(AfXdpSource { rx, _prog: prog.clone(), ts_ns: 0, stats: Cell::default() }),
        ));
    }
    Ok((out, XdpSetup { queues, mode, frame_size: cfg.frame_size }))
}

/// Sends on one TX queue; workers beyond the number of TX queues share a
/// queue's socket (through a lock, uncontended when each has its own).
pub struct AfXdpSink {
    tx: Arc<Mutex<XskTx>>,
}

impl Sink for AfXdpSink {
    fn send(&mut self, frames: &[Mbuf]) -> std::io::Result<usize> {
        self.tx.lock().unwrap_or_else(|e| e.into_inner()).send(frames.iter().map(|f| f.data()))
    }

    fn finish(&mut self) -> std::io::Result<()> {
        let left = self.tx.lock().unwrap_or_else(|e| e.into_inner()).drain(Duration::from_secs(2));
        if left > 0 {
            return Err(std::io::Error::other(format!(
                "{left} AF_XDP TX frames not completed by the kernel within 2 s"
            )));
        }
        Ok(())
    }
}

/// One sink per worker on `ifname`: worker w sends on TX queue w mod the
/// number of TX queues.
pub fn open_sinks(ifname: &str, workers: usize, stride: usize) -> Result<(Vec<Box<dyn Sink>>, XdpSetup)> {
    let nq = xsk::tx_queue_count(ifname).unwrap_or(1).max(1).min(workers.max(1) as u32);
    let cfg = XskConfig { frame_size: frame_size_for(stride), ..Default::default() };
    let mut socks = Vec::new();
    for q in 0..nq {
        let tx = XskTx::open(ifname, q, cfg).with_context(|| format!("output xdp:{ifname} queue {q}"))?;
        socks.push(Arc::new(Mutex::new(tx)));
    }
    let mode = socks[0].lock().unwrap_or_else(|e| e.into_inner()).socket().mode();
    let sinks = (0..workers.max(1))
        .map(|w| Box::new(AfXdpSink { tx: socks[w % socks.len()].clone() }) as Box<dyn Sink>)
        .collect();
    Ok((sinks, XdpSetup { queues: (0..nq).collect(), mode, frame_size: cfg.frame_size }))
}

/// Parses the `IFNAME[:QUEUES]` of `xdp:IFNAME[:QUEUES]` (QUEUES a list
/// like `0-3` or `0,2`).
pub fn parse_in_spec(s: &str) -> Result<(String, Option<Vec<u32>>), String> {
    let (ifname, queues) = match s.split_once(':') {
        Some((i, q)) => (i, Some(q)),
        None => (s, None),
    };
    if ifname.is_empty() {
        return Err(format!("'xdp:{s}' needs an interface: xdp:IFNAME[:QUEUES]"));
    }
    let queues = queues
        .map(|q| {
            rsskit_linux::cpulist::parse(q)
                .map(|v| v.into_iter().map(|x| x as u32).collect::<Vec<u32>>())
                .map_err(|e| format!("'xdp:{s}': bad queue list {q:?} (like 0-3 or 0,2): {e}"))
        })
        .transpose()?;
    Ok((ifname.to_string(), queues))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_and_frame_sizes() {
        assert_eq!(parse_in_spec("eth0"), Ok(("eth0".into(), None)));
        assert_eq!(parse_in_spec("eth0:0,2"), Ok(("eth0".into(), Some(vec![0, 2]))));
        assert!(parse_in_spec(":1").is_err());
        assert!(parse_in_spec("eth0:").is_err());
        assert_eq!(frame_size_for(1920), 2048);
        assert_eq!(frame_size_for(3000), 3000);
        assert_eq!(frame_size_for(65536), 4096);
    }
}
