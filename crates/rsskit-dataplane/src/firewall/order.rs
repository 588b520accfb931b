//! Causal ordering of a capture replay across workers.
//!
//! A capture is a recording of causally ordered traffic: a reply in the
//! file was sent after its request was forwarded, a SYN after the RST that
//! freed its `limit` slot had expired. Each worker keeps the file's order
//! of its own frames (FIFO rings), and the symmetric key keeps a flow on
//! one worker, so most frames only depend on their own worker's earlier
//! frames. A frame depends on *other* workers only through cross-worker
//! state, which rsskit has two kinds of:
//!
//! - a `redirect`: the slave lives on the worker of the translated flow,
//!   installed (and later deleted) by a message from the master's worker,
//!   and replies go back to the master;
//! - a `limit` track: one shared counter per key, whose states are spread
//!   over the workers and released when they expire (by their own worker's
//!   clock).
//!
//! [`Order::Causal`] (the default for files) makes the dispatcher hold a
//! frame that may touch such state (the [`Classifier`]: a frame to or from a
//! redirect rule's addresses, or one matching a rule with `limit`) at an
//! *epoch barrier*: it is handed to its worker only once (1) every frame
//! dispatched before it has completed on every worker (redirect hops
//! included) with the control messages they caused, and (2) every worker's
//! clock has been advanced to the frame's capture time (states due by then
//! expire, their tracks are released, their slaves' deletions delivered).
//! Frames that touch only their own worker's state never wait: a file
//! without `redirect` and `limit` rules, or any file on one worker, is
//! replayed without any barrier ([`needed`]), and otherwise only the
//! frames that can touch cross-worker state pay. A barrier costs a drain
//! of the pipeline (a round trip to every busy worker): a few µs on the
//! netisr engine's polled rings, tens of µs on the own driver's channels
//! (a blocked worker thread must be woken); `rsskit bench firewall`
//! measures both against the unordered replay.
//! The result is the single-threaded [`super::sim`] order for every
//! per-rule counter. [`Order::None`] dispatches as frames come (live input:
//! there is no recorded order to keep, as on a NIC).
//!
//! Not covered: the loose global state limit (`--states-max`) stays loose
//! (within 5%) in either mode; fragments are not classified (a
//! reassembled shared packet is not held).
//!
//! [`Gate`] is what the dispatcher and the workers share: per-worker
//! completion counters (each written by its worker only), the control
//! messages sent and handled, the replay clock a barrier asks for and the
//! clock each worker reached. [`OrderedSource`] applies the barrier to the
//! netisr engine's input (it returns `Idle` while it holds a frame, so the
//! netisr worker reading the capture keeps handling its own frames and
//! messages meanwhile); [`super::run::run`] applies it in its dispatcher.

use super::limit::Padded;
use super::{Dir, Firewall, FwPacket};
use crate::io::{Recv, Source};
use crate::wire::{self, DropReason, ParseConfig};
use core::sync::atomic::{AtomicU64, Ordering::*};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How a replay orders frames across workers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Order {
    /// Epoch barriers at frames that may touch cross-worker state.
    #[default]
    Causal,
    /// Dispatch as frames come.
    None,
}

/// A barrier that waited this long gives up (and is counted in
/// [`OrderStats::timeouts`]) rather than hang the replay.
pub const BARRIER_TIMEOUT: Duration = Duration::from_secs(10);

/// What the ordering did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct OrderStats {
    /// Frames held at a barrier.
    pub barriers: u64,
    /// Barriers that gave up after [`BARRIER_TIMEOUT`] (must be 0).
    pub timeouts: u64,
    /// Time the dispatcher spent holding frames (ns).
    pub wait_ns: u64,
}

/// Which frames need a barrier, from the rule set.
pub struct Classifier {
    rs: Arc<super::ruleset::RuleSet>,
    parse: ParseConfig,
    redirects: Vec<super::rules::Redirect>,
    limits: Vec<usize>,
}

impl Classifier {
    /// The classifier of `fw`'s current rules.
    pub fn new(fw: &Firewall) -> Self {
        let rs = fw.rules.load();
        let mut redirects = Vec::new();
        let mut limits = Vec::new();
        for (i, r) in rs.rules.iter().enumerate() {
            if let super::rules::Action::Redirect(rd) = r.action {
                redirects.push(rd);
            }
            if r.limit.is_some() {
                limits.push(i);
            }
        }
        Classifier { rs, parse: fw.config.parse, redirects, limits }
    }

    /// No rule creates cross-worker state: no frame ever waits.
    pub fn trivial(&self) -> bool {
        self.redirects.is_empty() && self.limits.is_empty()
    }

    /// Whether `frame` may touch state of another worker or a shared track.
    pub fn needs_barrier(&self, frame: &[u8]) -> bool {
        if self.trivial() {
            return false;
        }
        let Ok(Some(mut p)) = FwPacket::parse(frame, Dir::In, &self.parse) else { return false };
        if let Some((sp, dp)) = p.ports {
            for rd in &self.redirects {
                if p.proto == rd.proto
                    && ((p.dst, dp) == rd.from || (p.src, sp) == rd.to || (p.dst, dp) == rd.to)
                {
                    return true;
                }
            }
        }
        for &i in &self.limits {
            let r = &self.rs.rules[i];
            for d in [Dir::In, Dir::Out] {
                p.dir = d;
                if r.matches(&p, &self.rs.me) {
                    return true;
                }
            }
        }
        false
    }
}

/// Whether a causal replay of `fw` needs barriers at all: not with one
/// worker (its FIFO is the file's order, a redirect's hops stay on it),
/// not when no rule creates cross-worker state.
pub fn needed(fw: &Firewall) -> bool {
    fw.config.workers() > 1 && !Classifier::new(fw).trivial()
}

fn padded(n: usize) -> Box<[Padded<AtomicU64>]> {
    (0..n).map(|_| Padded(AtomicU64::new(0))).collect()
}

fn sum(v: &[Padded<AtomicU64>]) -> u64 {
    v.iter().map(|c| c.0.load(Acquire)).sum()
}

/// What the dispatcher and the workers of an ordered replay share.
#[derive(Debug)]
pub struct Gate {
    /// Frames completed (final verdict), by the worker that completed them.
    done: Box<[Padded<AtomicU64>]>,
    ctl_sent: Box<[Padded<AtomicU64>]>,
    ctl_done: Box<[Padded<AtomicU64>]>,
    /// The clock each worker reached for a barrier (ms).
    clock: Box<[Padded<AtomicU64>]>,
    /// The clock a barrier asks every worker to reach (ms).
    tick: Padded<AtomicU64>,
    barriers: AtomicU64,
    timeouts: AtomicU64,
    wait_ns: AtomicU64,
}

impl Gate {
    /// A gate for `workers` workers.
    pub fn new(workers: usize) -> Arc<Self> {
        let n = workers.max(1);
        Arc::new(Gate {
            done: padded(n),
            ctl_sent: padded(n),
            ctl_done: padded(n),
            clock: padded(n),
            tick: Padded(AtomicU64::new(0)),
            barriers: AtomicU64::new(0),
            timeouts: AtomicU64::new(0),
            wait_ns: AtomicU64::new(0),
        })
    }

    /// Worker `w` gave a dispatched frame its final verdict (after sending
    /// what the frame caused).
    #[inline]
    pub fn frame_done(&self, w: usize) {
        self.done[w].0.fetch_add(1, Release);
    }

    /// Worker `w` is sending `n` control messages (before they go out).
    #[inline]
    pub fn controls_sent(&self, w: usize, n: u64) {
        if n > 0 {
            self.ctl_sent[w].0.fetch_add(n, Release);
        }
    }

    /// Worker `w` handled a control message.
    #[inline]
    pub fn control_done(&self, w: usize) {
        self.ctl_done[w].0.fetch_add(1, Release);
    }

    /// The clock a barrier asks for (ms; 0: none).
    #[inline]
    pub fn tick_request(&self) -> u64 {
        self.tick.0.load(Acquire)
    }

    /// Worker `w` advanced its clock to `t` and sent what that caused.
    pub fn reached(&self, w: usize, t: u64) {
        self.clock[w].0.fetch_max(t, Release);
    }

    /// Every one of `sent` dispatched frames and every control message is done.
    pub fn drained(&self, sent: u64) -> bool {
        if sum(&self.done) < sent {
            return false;
        }
        let cs = sum(&self.ctl_sent);
        sum(&self.ctl_done) >= cs
    }

    /// Asks every worker to advance its clock to `t`.
    pub fn request_tick(&self, t: u64) {
        self.tick.0.fetch_max(t, Release);
    }

    /// Every worker reached `t`, and what that caused is done.
    pub fn ticked(&self, t: u64, sent: u64) -> bool {
        self.clock.iter().all(|c| c.0.load(Acquire) >= t) && self.drained(sent)
    }

    /// Records one barrier that held a frame for `waited`.
    pub fn record(&self, waited: Duration, timed_out: bool) {
        self.barriers.fetch_add(1, Relaxed);
        self.wait_ns.fetch_add(waited.as_nanos() as u64, Relaxed);
        if timed_out {
            self.timeouts.fetch_add(1, Relaxed);
        }
    }

    /// The counters so far.
    pub fn stats(&self) -> OrderStats {
        OrderStats {
            barriers: self.barriers.load(Relaxed),
            timeouts: self.timeouts.load(Relaxed),
            wait_ns: self.wait_ns.load(Relaxed),
        }
    }
}

enum Phase {
    /// Passing frames through.
    Open,
    /// Holding `held` until every earlier frame is done.
    Drain,
    /// Holding `held` until every worker reached its time.
    Tick,
}

/// A capture source for the netisr engine that applies the barriers: the
/// netisr worker that polls it gets `Idle` while a frame is held, and goes
/// on handling its own frames and messages.
pub struct OrderedSource {
    inner: Box<dyn Source>,
    gate: Arc<Gate>,
    cls: Classifier,
    /// How the netisr input parses (to know which frames reach the handler).
    netisr_parse: ParseConfig,
    /// Frames handed out that a handler will complete.
    sent: u64,
    held: Vec<u8>,
    held_ts_ns: u64,
    phase: Phase,
    since: Instant,
}

/// Whether the netisr worker hands `frame` to the firewall handler as read
/// (not a parser drop, not a fragment taken by reassembly): only those
/// complete with [`Gate::frame_done`].
pub fn reaches_handler(frame: &[u8], cfg: &ParseConfig) -> bool {
    match wire::parse_ethernet(frame, cfg) {
        Ok(p) => !(p.inner.is_none() && p.outer.is_fragment()),
        Err(DropReason::NotIp) => true,
        Err(_) => false,
    }
}

/// Capture time (ns) to the firewall clock (ms).
fn ms(ts_ns: u64) -> u64 {
    ts_ns / 1_000_000
}

impl OrderedSource {
    /// Orders `inner` (read by a netisr worker whose input parses with
    /// `netisr_parse`) for `fw`'s rules; the handlers share `gate`.
    pub fn new(inner: Box<dyn Source>, fw: &Firewall, gate: Arc<Gate>, netisr_parse: ParseConfig) -> Self {
        OrderedSource {
            inner,
            gate,
            cls: Classifier::new(fw),
            netisr_parse,
            sent: 0,
            held: Vec::new(),
            held_ts_ns: 0,
            phase: Phase::Open,
            since: Instant::now(),
        }
    }
}

impl Source for OrderedSource {
    fn recv(&mut self) -> Recv<'_> {
        if let Phase::Open = self.phase {
            match self.inner.recv() {
                Recv::Frame { data, ts_ns } => {
                    if self.cls.trivial() {
                        return Recv::Frame { data, ts_ns };
                    }
                    if !reaches_handler(data, &self.netisr_parse) {
                        return Recv::Frame { data, ts_ns };
                    }
                    if !self.cls.needs_barrier(data) {
                        self.sent += 1;
                        return Recv::Frame { data, ts_ns };
                    }
                    self.held.clear();
                    self.held.extend_from_slice(data);
                    self.held_ts_ns = ts_ns;
                    self.phase = Phase::Drain;
                    self.since = Instant::now();
                }
                r => return r,
            }
        }
        let waited = self.since.elapsed();
        let timed_out = waited >= BARRIER_TIMEOUT;
        if let Phase::Drain = self.phase {
            if !timed_out && !self.gate.drained(self.sent) {
                return Recv::Idle;
            }
            self.gate.request_tick(ms(self.held_ts_ns));
            self.phase = Phase::Tick;
        }
        if !timed_out && !self.gate.ticked(ms(self.held_ts_ns), self.sent) {
            return Recv::Idle;
        }
        self.gate.record(waited, timed_out);
        self.phase = Phase::Open;
        self.sent += 1;
        Recv::Frame { data: &self.held, ts_ns: self.held_ts_ns }
    }

    fn drops(&self) -> u64 {
        self.inner.drops()
    }

    // The accounting reads why the capture ended through the wrapper.
    fn failure(&self) -> Option<String> {
        self.inner.failure()
    }
}
