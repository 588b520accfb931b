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
use rsskit_linux::xsk::{self, XdpProgram, XskConfig, XskError, XskMode, XskRx, XskStats, XskTx};
use std::cell::Cell;
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub use rsskit_linux::xsk::MIN_FRAME_SIZE;

/// Why an AF_XDP input or output could not be set up: the kernel's
/// [`XskError`] with the interface (and queue) it was about.
#[derive(Debug, thiserror::Error)]
pub enum AfXdpError {
    /// An empty queue list.
    #[error("input xdp:{ifname}: no queue to read")]
    NoQueue {
        /// The interface.
        ifname: String,
    },
    /// The XDP redirect program could not be attached or given a socket.
    #[error("input xdp:{ifname}")]
    Program {
        /// The interface.
        ifname: String,
        /// What failed.
        #[source]
        source: XskError,
    },
    /// An AF_XDP socket could not be opened on a queue.
    #[error("{dir} xdp:{ifname} queue {queue}")]
    Socket {
        /// `input` or `output`.
        dir: &'static str,
        /// The interface.
        ifname: String,
        /// The queue.
        queue: u32,
        /// What failed.
        #[source]
        source: XskError,
    },
}

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

impl Source for AfXdpSource {
    fn recv(&mut self) -> Recv<'_> {
        // One clock read per batch: frames of a batch share its timestamp.
        if self.rx.at_batch_start() {
            self.ts_ns = rsskit_linux::clock::realtime_ns();
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
) -> Result<(Vec<HomedSource>, XdpSetup), AfXdpError> {
    let queues: Vec<u32> = match queues {
        Some(q) => q.to_vec(),
        None => (0..xsk::rx_queue_count(ifname).unwrap_or(1).max(1)).collect(),
    };
    if queues.is_empty() {
        return Err(AfXdpError::NoQueue { ifname: ifname.into() });
    }
    let cfg = XskConfig { frame_size: frame_size_for(stride), ..Default::default() };
    let program = |source| AfXdpError::Program { ifname: ifname.into(), source };
    let prog = XdpProgram::attach(ifname).map_err(program)?;
    let prog = Arc::new(Mutex::new(prog));
    let mut out: Vec<HomedSource> = Vec::new();
    let mut mode = XskMode::Copy;
    for (i, &q) in queues.iter().enumerate() {
        let rx = XskRx::open(ifname, q, cfg).map_err(|source| AfXdpError::Socket {
            dir: "input",
            ifname: ifname.into(),
            queue: q,
            source,
        })?;
        prog.lock().unwrap_or_else(|e| e.into_inner()).register(rx.socket()).map_err(program)?;
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
pub fn open_sinks(
    ifname: &str,
    workers: usize,
    stride: usize,
) -> Result<(Vec<Box<dyn Sink>>, XdpSetup), AfXdpError> {
    let nq = xsk::tx_queue_count(ifname).unwrap_or(1).max(1).min(workers.max(1) as u32);
    let cfg = XskConfig { frame_size: frame_size_for(stride), ..Default::default() };
    let mut socks = Vec::new();
    for q in 0..nq {
        let tx = XskTx::open(ifname, q, cfg).map_err(|source| AfXdpError::Socket {
            dir: "output",
            ifname: ifname.into(),
            queue: q,
            source,
        })?;
        socks.push(Arc::new(Mutex::new(tx)));
    }
    let mode = socks[0].lock().unwrap_or_else(|e| e.into_inner()).socket().mode();
    let sinks = (0..workers.max(1))
        .map(|w| Box::new(AfXdpSink { tx: socks[w % socks.len()].clone() }) as Box<dyn Sink>)
        .collect();
    Ok((sinks, XdpSetup { queues: (0..nq).collect(), mode, frame_size: cfg.frame_size }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frame_sizes() {
        assert_eq!(frame_size_for(1920), 2048);
        assert_eq!(frame_size_for(3000), 3000);
        assert_eq!(frame_size_for(65536), 4096);
    }
}
