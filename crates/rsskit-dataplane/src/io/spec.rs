//! The inputs and outputs a data-plane command names (`pcap:FILE`,
//! `afpacket:IF`, ...), and opening them as [`Source`]s and [`Sink`]s.
//!
//! One enum each, shared by `pipeline` and `firewall` (a command refuses the
//! variants it cannot use when it parses its arguments): a new kind of
//! input or output is one variant here plus its arm in [`InSpec::open`]
//! (what differs between the commands, a bridge's second port or `gen`, is
//! an [`OpenIn`] field) or [`open_outputs`].

use super::afpacket::{AfPacketSink, AfPacketSource, PacketError, RingConfig};
use super::afxdp::{self, AfXdpError};
use super::pcap::{CaptureError, PcapSink, PcapSource};
use super::Source;
use crate::netisr::{NetisrError, FLAG_PORT_B};
use crate::output::{NullSink, Sink};
use crate::pool::Mbuf;
use std::path::PathBuf;

/// Where frames come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InSpec {
    /// A pcap or pcapng capture (`pcap:FILE`).
    Pcap(PathBuf),
    /// A TPACKET_V3 ring on an interface (`afpacket:IFNAME`).
    AfPacket(String),
    /// AF_XDP sockets on an interface's RX queues (`xdp:IFNAME[:QUEUES]`;
    /// `None`: every queue).
    Xdp(String, Option<Vec<u32>>),
    /// Synthetic UDP frames of this size from memory (`gen[:SIZE]`).
    Gen(usize),
}

impl InSpec {
    /// A capture replay: it can wait for the workers and has a recorded order.
    pub fn is_capture(&self) -> bool {
        matches!(self, InSpec::Pcap(_))
    }

    /// Live traffic from an interface (wall-clock timestamps, cannot wait).
    pub fn is_live(&self) -> bool {
        matches!(self, InSpec::AfPacket(_) | InSpec::Xdp(..))
    }
}

/// Where frames go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OutSpec {
    /// A pcap file (`pcap:FILE`).
    Pcap(PathBuf),
    /// A pcapng file (`pcapng:FILE`).
    PcapNg(PathBuf),
    /// Sent on an interface (`afpacket:IFNAME`).
    AfPacket(String),
    /// Sent through AF_XDP sockets on an interface's TX queues (`xdp:IFNAME`).
    Xdp(String),
    /// Counted and discarded (`null`).
    Null,
}

/// Why a data-plane run could not be set up or ended in error.
#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    /// The input capture is not there.
    #[error("input capture {} does not exist", .0.display())]
    NoCapture(PathBuf),
    /// Opening, creating or closing a capture failed.
    #[error(transparent)]
    Capture(#[from] CaptureError),
    /// An AF_PACKET input could not be opened.
    #[error("input afpacket:{ifname}")]
    Input {
        /// The interface.
        ifname: String,
        /// What the kernel said.
        #[source]
        source: PacketError,
    },
    /// An AF_PACKET output could not be opened.
    #[error("output afpacket:{ifname}")]
    Output {
        /// The interface.
        ifname: String,
        /// What the kernel said.
        #[source]
        source: PacketError,
    },
    /// An AF_XDP input or output could not be set up.
    #[error(transparent)]
    Xdp(#[from] AfXdpError),
    /// The dispatch refused its configuration or a worker failed.
    #[error(transparent)]
    Netisr(#[from] NetisrError),
    /// A command was given an input or output it cannot use (the argument
    /// parsers refuse these first).
    #[error("{0}")]
    Unsupported(&'static str),
}

/// Opens a capture input: `loops` passes (at least one), at capture timing
/// if `timing`, a corrupt record ending it quietly if `lenient`.
pub fn open_capture(
    path: &std::path::Path,
    loops: u64,
    timing: bool,
    lenient: bool,
) -> Result<PcapSource, SpecError> {
    if !path.exists() {
        return Err(SpecError::NoCapture(path.to_path_buf()));
    }
    let src = PcapSource::open(path, loops, timing)?;
    Ok(if lenient { src.lenient() } else { src })
}

/// Opens an AF_PACKET input on `ifname`, in fanout group `fanout` if given.
pub fn open_afpacket_input(ifname: &str, fanout: Option<u16>) -> Result<AfPacketSource, SpecError> {
    AfPacketSource::open(ifname, RingConfig::default(), fanout)
        .map_err(|source| SpecError::Input { ifname: ifname.to_string(), source })
}

/// Opens an AF_PACKET output on `ifname`.
pub fn open_afpacket_output(ifname: &str) -> Result<AfPacketSink, SpecError> {
    AfPacketSink::open(ifname).map_err(|source| SpecError::Output { ifname: ifname.to_string(), source })
}

/// `count` AF_PACKET inputs on `ifname` (one per worker), in one fanout
/// group when there is more than one; `salt` keeps the groups of two
/// interfaces apart.
pub fn afpacket_inputs(ifname: &str, count: usize, salt: u16) -> Result<Vec<Box<dyn Source>>, SpecError> {
    let fanout = (count > 1).then(|| (std::process::id() as u16 & 0x7fff) ^ salt);
    (0..count).map(|_| open_afpacket_input(ifname, fanout).map(|s| Box::new(s) as Box<dyn Source>)).collect()
}

/// How a command opens its input: what differs between the commands is
/// said here, not in a match of their own.
pub struct OpenIn<'a> {
    /// Workers the sources are homed on: an AF_PACKET interface gets one
    /// socket per worker (in one fanout group when there are several),
    /// AF_XDP queues are spread over them.
    pub workers: usize,
    /// Buffer stride (the AF_XDP UMEM frame size follows it).
    pub stride: usize,
    /// Capture: passes over the file (at least one).
    pub loops: u64,
    /// Capture: replay at capture timing.
    pub timing: bool,
    /// Capture: a corrupt record ends the input quietly.
    pub lenient: bool,
    /// A bridge (AF_PACKET input): this interface is read too, its frames
    /// flagged [`FLAG_PORT_B`], in a fanout group of its own.
    pub port_b: Option<&'a str>,
    /// `gen:SIZE`: worker `w`'s source of frames of SIZE bytes, `gen(SIZE,
    /// w)` (`None`: the command takes no `gen`).
    pub gen: Option<&'a dyn Fn(usize, usize) -> Box<dyn Source>>,
}

/// The opened input.
pub struct Inputs {
    /// `(home worker, flags, source)`, as [`crate::netisr::Netisr::start_ports`] takes them.
    pub sources: Vec<(usize, u8, Box<dyn Source>)>,
    /// How the input was set up, one line each for the user (AF_XDP).
    pub notes: Vec<String>,
}

impl InSpec {
    /// Opens the input as `o` says.
    pub fn open(&self, o: &OpenIn<'_>) -> Result<Inputs, SpecError> {
        let mut sources: Vec<(usize, u8, Box<dyn Source>)> = Vec::new();
        let mut notes = Vec::new();
        match self {
            InSpec::Pcap(p) => sources.push((0, 0, Box::new(open_capture(p, o.loops, o.timing, o.lenient)?))),
            InSpec::AfPacket(i) => {
                // One fanout group per interface (the salt keeps them apart).
                let ports = std::iter::once((i.as_str(), 0u8, 0u16))
                    .chain(o.port_b.map(|b| (b, FLAG_PORT_B, 0x8000)));
                for (ifname, flags, salt) in ports {
                    let srcs = afpacket_inputs(ifname, o.workers, salt)?;
                    sources.extend(srcs.into_iter().enumerate().map(|(w, s)| (w, flags, s)));
                }
            }
            InSpec::Xdp(i, queues) => {
                let (srcs, note) = open_xdp_inputs(i, queues.as_deref(), o.workers, o.stride)?;
                notes.push(note);
                sources.extend(srcs.into_iter().map(|(w, s)| (w, 0, s)));
            }
            InSpec::Gen(size) => {
                let gen = o
                    .gen
                    .ok_or(SpecError::Unsupported("this command reads a capture or an interface, not gen"))?;
                sources.extend((0..o.workers).map(|w| (w, 0, gen(*size, w))));
            }
        }
        Ok(Inputs { sources, notes })
    }
}

/// The opened output: one sink per worker, and the shared capture writer
/// to close once the workers stopped.
pub struct Outputs {
    /// One per worker.
    pub sinks: Vec<Box<dyn Sink>>,
    /// The capture file all sinks write to, if the output is one.
    pub capture: Option<PcapSink>,
    /// How the output was set up, one line each for the user (the AF_XDP
    /// mode, queues and frame size).
    pub notes: Vec<String>,
}

impl Outputs {
    /// Flushes and closes the capture output (after the workers stopped).
    pub fn close(capture: Option<PcapSink>) -> Result<(), SpecError> {
        match capture {
            Some(p) => Ok(p.close()?),
            None => Ok(()),
        }
    }
}

/// Opens `out` for `workers` workers whose buffers are `stride` bytes
/// (the AF_XDP UMEM frame size follows it, [`afxdp::frame_size_for`]).
/// With `bridge_back` (both sides are AF_PACKET interfaces), each sink is a
/// [`BridgeSink`]: frames of the port-B input go back out on
/// `bridge_back`, the others on `out`.
pub fn open_outputs(
    out: &OutSpec,
    workers: usize,
    bridge_back: Option<&str>,
    stride: usize,
) -> Result<Outputs, SpecError> {
    let mut sinks: Vec<Box<dyn Sink>> = Vec::with_capacity(workers);
    let mut capture = None;
    let mut notes = Vec::new();
    match out {
        OutSpec::Null => sinks.extend((0..workers).map(|_| Box::new(NullSink::default()) as Box<dyn Sink>)),
        OutSpec::Pcap(p) | OutSpec::PcapNg(p) => {
            let s = if matches!(out, OutSpec::PcapNg(_)) {
                PcapSink::create_ng(p)?
            } else {
                PcapSink::create(p)?
            };
            sinks.extend((0..workers).map(|_| Box::new(s.clone()) as Box<dyn Sink>));
            capture = Some(s);
        }
        OutSpec::AfPacket(o) => {
            for _ in 0..workers {
                sinks.push(match bridge_back {
                    Some(i) => Box::new(BridgeSink {
                        to_out: open_afpacket_output(o)?,
                        to_in: open_afpacket_output(i)?,
                    }),
                    None => Box::new(open_afpacket_output(o)?),
                });
            }
        }
        OutSpec::Xdp(o) => {
            let (s, setup) = afxdp::open_sinks(o, workers, stride)?;
            notes.push(setup.line(o, "output"));
            sinks.extend(s);
        }
    }
    Ok(Outputs { sinks, capture, notes })
}

/// Opens AF_XDP input on `ifname` (`queues`, or every RX queue) for
/// `workers` workers whose buffers are `stride` bytes: the sources with
/// the worker each is homed on, and the setup line for the user.
pub fn open_xdp_inputs(
    ifname: &str,
    queues: Option<&[u32]>,
    workers: usize,
    stride: usize,
) -> Result<(Vec<afxdp::HomedSource>, String), SpecError> {
    let (srcs, setup) = afxdp::open_sources(ifname, queues, workers, stride)?;
    Ok((srcs, setup.line(ifname, "input")))
}

/// The two sides of a bridge: frames read on the second interface (port B,
/// [`FLAG_PORT_B`]) go back out on the first, all others on the second.
pub struct BridgeSink {
    to_out: AfPacketSink,
    to_in: AfPacketSink,
}

impl Sink for BridgeSink {
    fn send(&mut self, frames: &[Mbuf]) -> std::io::Result<usize> {
        let port_b = |m: &Mbuf| m.flags & FLAG_PORT_B != 0;
        let mut sent = 0;
        let mut rest = frames;
        while let Some(first) = rest.first() {
            let b = port_b(first);
            let k = rest.iter().position(|m| port_b(m) != b).unwrap_or(rest.len());
            let (run, tail) = rest.split_at(k);
            sent += if b { self.to_in.send(run)? } else { self.to_out.send(run)? };
            rest = tail;
        }
        Ok(sent)
    }

    fn finish(&mut self) -> std::io::Result<()> {
        self.to_out.finish()?;
        self.to_in.finish()
    }
}
