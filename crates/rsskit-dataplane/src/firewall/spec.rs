//! The `rsskit firewall` engine assembled from a spec: open the output and
//! the input, run the firewall workers on the chosen engine (netisr
//! dispatch, or the firewall's own threaded driver [`super::run`]), and
//! account for every frame. The command maps its arguments to a
//! [`FirewallSpec`] and prints the [`FirewallOutcome`].
//!
//! With AF_PACKET on both sides the run bridges the two interfaces: a frame
//! received on the input interface is filtered as `in` and sent on the
//! output interface, and the other way round as `out`. From a capture, a
//! frame whose source is one of the configured `me` addresses is `out`, any
//! other `in`; capture timestamps drive the state clock.

use super::netisr_handler::FwHandler;
use super::order::{self, Gate, Order, OrderStats, OrderedSource};
use super::run::{self, direction, Input};
use super::{Dir, Firewall, Snapshot};
use crate::io::pcap::PcapSink;
use crate::io::spec::{open_afpacket_output, open_outputs, InSpec, OpenIn, OutSpec, Outputs, SpecError};
use crate::io::{Recv, Source};
use crate::netisr::{Accounting, Netisr, NetisrConfig, FLAG_PORT_B};
use crate::output::Sink;
use crate::pool::Mbuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Which dispatcher runs the firewall workers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Engine {
    /// The data plane's netisr dispatch: software RSS to per-worker rings,
    /// reassembly before the rules, send aggregation (the default).
    Netisr,
    /// The firewall's own threaded driver ([`super::run`]).
    Own,
}

/// Everything a firewall run needs besides the [`Firewall`] itself.
#[derive(Debug, Clone)]
pub struct FirewallSpec {
    /// Where frames come from (a capture or an interface).
    pub input: InSpec,
    /// Where passed frames go.
    pub output: OutSpec,
    /// The dispatcher.
    pub engine: Engine,
    /// Cross-worker order of a capture replay.
    pub order: Order,
    /// Frames per batch handed to a worker.
    pub batch: usize,
    /// Capture input: a corrupt record ends the input quietly.
    pub stop_at_bad_record: bool,
    /// Stop a live run after this long.
    pub duration: Option<Duration>,
}

/// What a firewall run did.
#[derive(Debug, Clone)]
pub struct FirewallOutcome {
    /// The firewall's counters at the end.
    pub snapshot: Snapshot,
    /// Frames read.
    pub inputs: u64,
    /// Run time.
    pub elapsed: Duration,
    /// Frames sent on (or passed, with a `null` output).
    pub sent: u64,
    /// Frames the output refused.
    pub send_errors: u64,
    /// `in == out + dropped by reason + held`.
    pub accounting: Accounting,
    /// What the causal ordering did (all zero without it).
    pub order: OrderStats,
    /// Inputs that ended early and why (a corrupt capture record).
    pub input_errors: Vec<String>,
}

/// A status callback: the firewall's counters and the time since start.
pub type Status<'a> = &'a (dyn Fn(&Snapshot, Duration) + Sync);

/// A setup note callback: one line on how an input or output was set up
/// (the AF_XDP mode, queues and frame size), called before the run starts.
pub type Note<'a> = &'a dyn Fn(&str);

/// The own engine's refusal of AF_XDP.
const XDP_NEEDS_NETISR: &str = "xdp: input and output need the netisr engine (the default)";

impl FirewallSpec {
    /// Runs `fw` until the input ends, `interrupted` is set or the duration
    /// passed; `status` (if any) is called about once a second.
    pub fn run(
        &self,
        fw: &Arc<Firewall>,
        interrupted: &AtomicBool,
        status: Option<Status<'_>>,
    ) -> Result<FirewallOutcome, SpecError> {
        self.run_with_notes(fw, interrupted, status, &|_| {})
    }

    /// [`FirewallSpec::run`], telling `note` how the input and output were
    /// set up (AF_XDP: mode, queues, UMEM frame size) once they are open.
    pub fn run_with_notes(
        &self,
        fw: &Arc<Firewall>,
        interrupted: &AtomicBool,
        status: Option<Status<'_>>,
        note: Note<'_>,
    ) -> Result<FirewallOutcome, SpecError> {
        if matches!(self.input, InSpec::Gen(_)) {
            return Err(SpecError::Unsupported("the firewall reads a capture or an interface, not gen"));
        }
        match self.engine {
            Engine::Netisr => self.run_netisr(fw, interrupted, status, note),
            Engine::Own => {
                if matches!(self.input, InSpec::Xdp(..)) || matches!(self.output, OutSpec::Xdp(_)) {
                    return Err(SpecError::Unsupported(XDP_NEEDS_NETISR));
                }
                self.run_own(fw, interrupted, status)
            }
        }
    }

    /// The other interface of a bridge (both sides AF_PACKET).
    fn bridge(&self) -> Option<(&str, &str)> {
        match (&self.input, &self.output) {
            (InSpec::AfPacket(i), OutSpec::AfPacket(o)) => Some((i, o)),
            _ => None,
        }
    }

    /// How either engine opens the input: a capture once, a bridge's
    /// second interface as port B, no `gen`.
    fn open_in(&self, workers: usize, stride: usize) -> OpenIn<'_> {
        OpenIn {
            workers,
            stride,
            loops: 1,
            timing: false,
            lenient: self.stop_at_bad_record,
            port_b: self.bridge().map(|(_, o)| o),
            gen: None,
        }
    }

    /// The firewall workers as netisr protocol handlers.
    fn run_netisr(
        &self,
        fw: &Arc<Firewall>,
        interrupted: &AtomicBool,
        status: Option<Status<'_>>,
        note: Note<'_>,
    ) -> Result<FirewallOutcome, SpecError> {
        let n = fw.config.workers();
        let stride = NetisrConfig::default().stride;
        // Outputs first, so a bad name fails before the inputs open.
        let Outputs { sinks, capture, notes } =
            open_outputs(&self.output, n, self.bridge().map(|(i, _)| i), stride)?;
        // One worker, or no rule that creates cross-worker state: no frame waits.
        let gate = (self.order == Order::Causal && order::needed(fw)).then(|| Gate::new(n));
        let handlers = (0..n)
            .map(|i| {
                let h = FwHandler::new(fw, i);
                let h = if self.input.is_live() { h.live() } else { h };
                let h = match &gate {
                    Some(g) => h.ordered(g.clone()),
                    None => h,
                };
                if self.bridge().is_some() {
                    h.bridged()
                } else {
                    h
                }
            })
            .collect();
        let ncfg = NetisrConfig {
            // The firewall's own policy: dispatch and a redirect's owner agree.
            policy: fw.config.policy.clone(),
            batch: self.batch.min(256),
            // The rules see the outer header (as with the own engine).
            decap: false,
            // A capture waits for the workers (nothing lost to a full queue;
            // an ordered replay counts every frame to its completion); live
            // input cannot wait, its full queues drop (counted).
            backpressure: self.input.is_capture() || gate.is_some(),
            ..Default::default()
        };
        // A bridge also reads the other interface (its frames are `out`,
        // marked as port B).
        let opened = self.input.open(&self.open_in(n, ncfg.stride))?;
        let mut inputs = opened.sources;
        if let (Some(g), true) = (&gate, self.input.is_capture()) {
            // A capture replay keeps its causal order across workers.
            inputs = inputs
                .into_iter()
                .map(|(w, f, s)| {
                    (w, f, Box::new(OrderedSource::new(s, fw, g.clone(), ncfg.parse)) as Box<dyn Source>)
                })
                .collect();
        }
        for line in opened.notes.iter().chain(&notes) {
            note(line);
        }
        let netisr = Netisr::start_ports(ncfg, inputs, sinks, handlers)?;
        let report = netisr.wait(self.duration, Duration::from_secs(1), Some(interrupted), |_, t| {
            if let Some(s) = status {
                s(&fw.snapshot(), t);
            }
        })?;
        for h in &report.handlers {
            h.worker().publish();
        }
        Outputs::close(capture)?;
        let t = report.total();
        Ok(FirewallOutcome {
            snapshot: fw.snapshot(),
            inputs: t.counters.input,
            elapsed: report.elapsed,
            sent: t.counters.output.packets,
            send_errors: t.counters.output.errors,
            accounting: report.accounting(),
            order: gate.map(|g| g.stats()).unwrap_or_default(),
            input_errors: report.input_errors,
        })
    }

    /// The firewall's own threaded driver: a dispatcher thread and channels.
    fn run_own(
        &self,
        fw: &Arc<Firewall>,
        interrupted: &AtomicBool,
        status: Option<Status<'_>>,
    ) -> Result<FirewallOutcome, SpecError> {
        let pc = fw.config.parse;
        let me = fw.config.me.clone();
        // Open everything before starting so bad names fail first.
        let mut out = OwnOutput { to_out: None, to_in: None, sent: 0, errors: 0 };
        let mut capture: Option<PcapSink> = None;
        match &self.output {
            OutSpec::Null => {}
            OutSpec::Pcap(_) | OutSpec::PcapNg(_) => {
                let Outputs { mut sinks, capture: c, .. } =
                    open_outputs(&self.output, 1, None, NetisrConfig::default().stride)?;
                out.to_out = sinks.pop();
                capture = c;
            }
            OutSpec::AfPacket(o) => out.to_out = Some(Box::new(open_afpacket_output(o)?)),
            OutSpec::Xdp(_) => return Err(SpecError::Unsupported(XDP_NEEDS_NETISR)),
        }
        let start = Instant::now();
        let done = AtomicBool::new(false);
        // What the capture source could not deliver, and why it ended early.
        let src_drops = AtomicU64::new(0);
        let src_failure: Mutex<Option<String>> = Mutex::default();
        let report = std::thread::scope(|s| -> Result<_, SpecError> {
            // Status: one call per second.
            if let Some(status) = status {
                let done = &done;
                s.spawn(move || {
                    let mut next = Instant::now() + Duration::from_secs(1);
                    while !done.load(Ordering::Relaxed) {
                        std::thread::sleep(Duration::from_millis(50));
                        if Instant::now() >= next {
                            next += Duration::from_secs(1);
                            status(&fw.snapshot(), start.elapsed());
                        }
                    }
                });
            }
            let r =
                self.own_dispatch(fw, interrupted, start, &mut out, (&src_drops, &src_failure), (&me, &pc));
            done.store(true, Ordering::Relaxed);
            r
        })?;
        if let Some(p) = capture {
            drop(out.to_out.take());
            Outputs::close(Some(p))?;
        }
        // Every input frame passed (sent or a send error) or dropped by the
        // firewall; a redirected frame is resumed by its new worker and
        // counted there.
        let t = &report.snapshot.total;
        let source = src_drops.load(Ordering::Relaxed);
        let mut acct = Accounting { input: report.inputs + source, out: out.sent, ..Default::default() };
        acct.add_drop("source", source);
        acct.add_drop("firewall_unparsable", t.parse_drops);
        acct.add_drop("firewall_deny", t.dropped.saturating_sub(t.parse_drops));
        acct.add_drop("output_error", out.errors);
        let failure = src_failure.lock().unwrap_or_else(|e| e.into_inner()).take();
        Ok(FirewallOutcome {
            snapshot: report.snapshot,
            inputs: report.inputs,
            elapsed: report.elapsed,
            sent: out.sent,
            send_errors: out.errors,
            accounting: acct,
            order: report.order,
            input_errors: failure.into_iter().collect(),
        })
    }

    /// The own driver's input loop over the capture or the interface(s).
    #[allow(clippy::type_complexity)]
    fn own_dispatch(
        &self,
        fw: &Arc<Firewall>,
        interrupted: &AtomicBool,
        start: Instant,
        out: &mut OwnOutput,
        (drops, failure): (&AtomicU64, &Mutex<Option<String>>),
        (me, pc): (&[std::net::IpAddr], &crate::wire::ParseConfig),
    ) -> Result<run::RunTotals, SpecError> {
        // One worker reads everything here: one socket per interface, no fanout.
        let opened = self.input.open(&self.open_in(1, NetisrConfig::default().stride))?;
        if self.input.is_capture() {
            let Some((_, _, mut src)) = opened.sources.into_iter().next() else {
                return Err(SpecError::Unsupported("a capture input opened no source"));
            };
            let inputs = std::iter::from_fn(move || loop {
                if interrupted.load(Ordering::Relaxed) {
                    return None;
                }
                match src.recv() {
                    Recv::Frame { data, ts_ns } => {
                        let ts_ms =
                            if ts_ns == 0 { start.elapsed().as_millis() as u64 } else { ts_ns / 1_000_000 };
                        let dir = direction(data, me, pc);
                        return Some(Input { frame: data.to_vec(), dir, ts_ms });
                    }
                    Recv::Idle => std::thread::sleep(Duration::from_micros(100)),
                    Recv::Done => {
                        drops.store(src.drops(), Ordering::Relaxed);
                        if let Some(e) = src.failure() {
                            *failure.lock().unwrap_or_else(|e| e.into_inner()) = Some(e);
                        }
                        return None;
                    }
                }
            });
            return Ok(run::run(
                fw,
                inputs,
                self.batch,
                None,
                self.order,
                |f, d| out.send(f, d),
                None,
                |_| {},
            ));
        }
        // Live: a bridge's other side (port B) is `out` and goes back to the input interface.
        let mut sources: Vec<(Box<dyn Source>, Dir)> = opened
            .sources
            .into_iter()
            .map(|(_, flags, s)| (s, if flags & FLAG_PORT_B != 0 { Dir::Out } else { Dir::In }))
            .collect();
        if let (Some((input, _)), InSpec::AfPacket(_)) = (self.bridge(), &self.input) {
            out.to_in = Some(Box::new(open_afpacket_output(input)?));
        }
        let deadline = self.duration.map(|d| start + d);
        let mut turn = 0usize;
        let inputs = std::iter::from_fn(move || {
            let mut idle = 0usize;
            loop {
                if interrupted.load(Ordering::Relaxed) || deadline.is_some_and(|d| Instant::now() >= d) {
                    // The kernel's ring drops, for the accounting.
                    drops.store(sources.iter().map(|(s, _)| s.drops()).sum(), Ordering::Relaxed);
                    return None;
                }
                let k = sources.len();
                let (s, dir) = &mut sources[turn % k];
                let dir = *dir;
                turn = turn.wrapping_add(1);
                match s.recv() {
                    Recv::Frame { data, .. } => {
                        return Some(Input {
                            frame: data.to_vec(),
                            dir,
                            ts_ms: start.elapsed().as_millis() as u64,
                        });
                    }
                    Recv::Idle | Recv::Done => {
                        idle += 1;
                        if idle >= k {
                            idle = 0;
                            std::thread::sleep(Duration::from_micros(200));
                        }
                    }
                }
            }
        });
        // Live: small batches so a lone packet is not held back.
        Ok(run::run(fw, inputs, 1, Some(start), Order::None, |f, d| out.send(f, d), None, |_| {}))
    }
}

/// The own driver's output: one sink, or two for a bridge (by direction).
struct OwnOutput {
    to_out: Option<Box<dyn Sink>>,
    to_in: Option<Box<dyn Sink>>,
    sent: u64,
    errors: u64,
}

impl OwnOutput {
    fn send(&mut self, frame: Vec<u8>, dir: Dir) {
        let sink = match dir {
            Dir::In => self.to_out.as_mut(),
            Dir::Out => self.to_in.as_mut().or(self.to_out.as_mut()),
        };
        match sink {
            Some(s) => {
                let m = [Mbuf::heap(frame, 0, 0, 0)];
                match s.send(&m) {
                    Ok(1) => self.sent += 1,
                    _ => self.errors += 1,
                }
            }
            // `--out null`: passed is out.
            None => self.sent += 1,
        }
    }
}
