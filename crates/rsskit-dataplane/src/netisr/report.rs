//! What a run reports: each worker's own counters ([`WorkerCounters`],
//! [`FrameCounters`]), a worker as `netstat -Q` shows it
//! ([`WorkerReport`]), the result of a run ([`RunReport`]) and its
//! per-frame balance `in == out + dropped + held` ([`Accounting`]). Kept
//! apart because this is what the CLI prints and the tests check, and the
//! accounting rules are easier to audit in one place (see the
//! [module docs](super)).

use super::Handler;
use crate::output::OutputCounters;
use crate::reass::ReassCounters;
use crate::wire::DropCounters;
use serde::Serialize;
use std::time::Duration;
// Only named in the docs' links.
#[cfg(doc)]
use super::{Delivery, Disposition, Mbuf};
#[cfg(doc)]
use crate::io::Source;

/// A worker's own counters (single writer; published to the monitor).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct WorkerCounters {
    /// Frames read from the sources homed on this worker.
    pub input: u64,
    /// Packets this worker's inputs processed in place (direct dispatch).
    pub dispatched: u64,
    /// Packets handled (parsed and processed) by this worker, including
    /// re-injected ones.
    pub handled: u64,
    /// Packets this worker re-injected (after reassembly or decapsulation).
    pub reinjected: u64,
    /// ... of which this worker owned and processed at once.
    pub reinjected_direct: u64,
    /// Datagrams reassembled here.
    pub reassembled: u64,
    /// Tunnel packets decapsulated here.
    pub decapsulated: u64,
    /// Packets the handler forwarded to the output.
    pub forwarded: u64,
    /// Packets the handler consumed.
    pub consumed: u64,
    /// Times the input paused because every pool buffer was in flight
    /// (backpressure; no frame is lost).
    pub pool_stalls: u64,
    /// Frames dropped by the parser, by reason.
    #[serde(skip)]
    pub drops: DropCounters,
    /// Per-frame accounting terms ([`RunReport::accounting`]).
    #[serde(skip)]
    pub frames: FrameCounters,
    #[serde(skip)]
    /// Reassembly counters.
    pub reass: ReassCounters,
    /// Output (send aggregation) counters.
    pub output: OutputCounters,
    /// CPU time this worker's thread used (ns): busy polling included, so
    /// packets per CPU-second is a lower bound of what a dedicated core does.
    pub cpu_ns: u64,
}

/// A worker's per-frame terms (each in input frames, [`Mbuf::frames`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FrameCounters {
    /// Dropped by the parser, by reason.
    pub parse: DropCounters,
    /// Dropped because the queue to the owner was full (no backpressure).
    pub queue_full: u64,
    /// Dropped by the handler ([`Disposition::Drop`], [`Delivery::Drop`]).
    pub handler: u64,
    /// Handed off in handler messages ([`Disposition::Handoff`], [`Delivery::Handoff`]).
    pub handoff: u64,
    /// Carried by the handler messages delivered here.
    pub handoff_done: u64,
    /// Still staged for another worker's queue at exit.
    pub staged: u64,
}

impl FrameCounters {
    fn merge(&mut self, o: &FrameCounters) {
        self.parse.merge(&o.parse);
        self.queue_full += o.queue_full;
        self.handler += o.handler;
        self.handoff += o.handoff;
        self.handoff_done += o.handoff_done;
        self.staged += o.staged;
    }
}

/// The per-frame balance of a run: `input == out + dropped + held`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Accounting {
    /// Frames read, plus those the sources saw but could not deliver.
    #[serde(rename = "in")]
    pub input: u64,
    /// Frames sent (a reassembled datagram: all its fragments).
    pub out: u64,
    /// Frames dropped, by reason (only non-zero reasons).
    pub dropped: std::collections::BTreeMap<String, u64>,
    /// Frames still held at exit (fragments waiting for the rest of their
    /// datagram, frames in flight).
    pub held: u64,
}

impl Accounting {
    /// Adds `n` dropped frames under `reason` (nothing for 0).
    pub fn add_drop(&mut self, reason: &str, n: u64) {
        if n > 0 {
            *self.dropped.entry(reason.to_string()).or_insert(0) += n;
        }
    }

    /// Sum of the drops.
    pub fn dropped_total(&self) -> u64 {
        self.dropped.values().sum()
    }

    /// `in == out + dropped + held`?
    pub fn balanced(&self) -> bool {
        self.input == self.out + self.dropped_total() + self.held
    }

    /// One line: `in N = out N + dropped N (reason=N ...) + held N`.
    pub fn line(&self) -> String {
        let reasons: Vec<String> = self.dropped.iter().map(|(k, v)| format!("{k}={v}")).collect();
        format!(
            "in {} = out {} + dropped {}{} + held {}{}",
            self.input,
            self.out,
            self.dropped_total(),
            if reasons.is_empty() { String::new() } else { format!(" ({})", reasons.join(" ")) },
            self.held,
            if self.balanced() { "" } else { "  UNBALANCED" }
        )
    }
}

impl WorkerCounters {
    /// Parser drops, total.
    pub fn parse_drops(&self) -> u64 {
        self.drops.total()
    }
}

/// A worker as `netstat -Q` shows it: its counters plus the state of the
/// rings that feed it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WorkerReport {
    /// Worker index.
    pub worker: usize,
    /// The CPU it is pinned to.
    pub cpu: Option<rsskit_core::CpuId>,
    /// Its counters.
    pub counters: WorkerCounters,
    /// Packets queued to this worker (by other workers' inputs and re-injection).
    pub queued: u64,
    /// Packets refused because a ring to this worker was full.
    pub qdrops: u64,
    /// Highest occupancy of any ring to this worker.
    pub high_water: usize,
    /// Packets waiting in the rings to this worker now.
    pub queue_len: usize,
    /// Source drops (kernel ring drops...).
    pub source_drops: u64,
    /// The part of `source_drops` the sources gave reasons for
    /// ([`Source::drop_reasons`]).
    pub source_drop_reasons: Vec<(&'static str, u64)>,
}

impl WorkerReport {
    /// Everything this worker dropped (queue, parser, reassembly, buffers).
    pub fn total_drops(&self) -> u64 {
        self.qdrops
            + self.counters.drops.total()
            + self.counters.reass.dropped()
            + self.counters.reass.timeout_frames
    }
}

/// The result of a run.
#[derive(Debug)]
pub struct RunReport<H> {
    /// Each worker at the end.
    pub workers: Vec<WorkerReport>,
    /// The handlers, index = worker.
    pub handlers: Vec<H>,
    /// Run time: from the start to the moment the last worker finished
    /// its work (the controlling thread's polling delay excluded).
    pub elapsed: Duration,
    /// Sources that ended early and why ([`Source::failure`]), e.g. a
    /// corrupt capture record: the counters cover what came before it.
    pub input_errors: Vec<String>,
}

impl<H> RunReport<H> {
    /// Sum of the per-worker counters.
    pub fn total(&self) -> WorkerReport {
        let mut t = WorkerReport::default();
        for w in &self.workers {
            let c = &w.counters;
            let tc = &mut t.counters;
            tc.input += c.input;
            tc.dispatched += c.dispatched;
            tc.handled += c.handled;
            tc.reinjected += c.reinjected;
            tc.reinjected_direct += c.reinjected_direct;
            tc.reassembled += c.reassembled;
            tc.decapsulated += c.decapsulated;
            tc.forwarded += c.forwarded;
            tc.consumed += c.consumed;
            tc.pool_stalls += c.pool_stalls;
            tc.drops.merge(&c.drops);
            tc.frames.merge(&c.frames);
            tc.reass.merge(&c.reass);
            tc.output.merge(&c.output);
            tc.cpu_ns += c.cpu_ns;
            t.queued += w.queued;
            t.qdrops += w.qdrops;
            t.high_water = t.high_water.max(w.high_water);
            t.queue_len += w.queue_len;
            t.source_drops += w.source_drops;
            add_reasons(&mut t.source_drop_reasons, &w.source_drop_reasons);
        }
        t
    }
}

impl<H: Handler> RunReport<H> {
    /// The per-frame balance of the run (see the [module docs](super)).
    pub fn accounting(&self) -> Accounting {
        let t = self.total();
        let c = &t.counters;
        let f = &c.frames;
        let mut a = Accounting {
            input: c.input + t.source_drops,
            out: c.output.frames,
            held: c.reass.held + f.staged + f.handoff.saturating_sub(f.handoff_done),
            ..Default::default()
        };
        let explained: u64 = t.source_drop_reasons.iter().map(|r| r.1).sum();
        for (name, n) in &t.source_drop_reasons {
            a.add_drop(name, *n);
        }
        a.add_drop("source", t.source_drops.saturating_sub(explained));
        for (r, n) in f.parse.nonzero() {
            a.add_drop(r.name(), n);
        }
        a.add_drop("queue_full", f.queue_full);
        for (name, n) in reass_drop_reasons(&c.reass) {
            a.add_drop(name, n);
        }
        a.add_drop(H::DROP_REASON, f.handler);
        a.add_drop("output_error", c.output.error_frames);
        a
    }
}

/// Adds `more` into `into`, reason by reason.
pub(crate) fn add_reasons(into: &mut Vec<(&'static str, u64)>, more: &[(&'static str, u64)]) {
    for &(name, n) in more {
        match into.iter_mut().find(|r| r.0 == name) {
            Some(r) => r.1 += n,
            None => into.push((name, n)),
        }
    }
}

/// The reassembly drop reasons (in frames) with their names.
fn reass_drop_reasons(r: &ReassCounters) -> [(&'static str, u64); 11] {
    [
        ("frag_duplicate", r.duplicates),
        ("frag_overlap", r.overlaps),
        ("frag_dead_datagram", r.dead),
        ("frag_tiny", r.tiny),
        ("frag_inconsistent", r.inconsistent),
        ("frag_too_big", r.too_big),
        ("frag_too_many_datagrams", r.too_many_datagrams),
        ("frag_too_many_fragments", r.too_many_fragments),
        ("frag_memory_limit", r.memory_limit),
        ("frag_malformed", r.malformed),
        ("frag_timeout", r.timeout_frames),
    ]
}

/// Convenience: the names of the drop reasons with counts, for reports.
pub fn drop_reasons(c: &WorkerCounters) -> Vec<(String, u64)> {
    let mut v: Vec<(String, u64)> = c.drops.nonzero().map(|(r, n)| (r.name().to_string(), n)).collect();
    for (name, n) in reass_drop_reasons(&c.reass) {
        if n > 0 {
            v.push((name.to_string(), n));
        }
    }
    v
}
