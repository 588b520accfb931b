//! The controller: [`Netisr`], the running dispatch as the calling thread
//! sees it. It validates the configuration, builds the workers and spawns
//! them (pinned when asked), takes live snapshots, decides when the run is
//! over (sources done and every ring drained, or deadline / interrupt) and
//! joins the workers into a [`RunReport`]. [`RunState`] is what it shares
//! with the worker threads. Kept apart from the worker loop
//! (`worker.rs`), which runs on the workers' own threads.

use super::config::Result;
use super::ring::{self, RingMonitor};
use super::{worker, Handler, Mbuf, Msg, NetisrConfig, NetisrError, RunReport, WorkerCounters, WorkerReport};
use crate::io::Source;
use crate::output::Sink;
use rsskit_core::CpuId;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
// Only named in the docs' links.
#[cfg(doc)]
use super::{PacketCtx, FLAG_PORT_B};

/// State shared between the workers and the controlling thread.
pub(crate) struct RunState {
    /// Sources that have not finished.
    pub inputs_active: AtomicUsize,
    /// Ask sources to stop (duration elapsed, signal).
    pub stop_inputs: AtomicBool,
    /// Everything drained: workers exit.
    pub stop: AtomicBool,
    /// One per worker, each on its own cache lines (no false sharing).
    pub workers: Vec<ring::CachePadded<WorkerShared>>,
    /// Why sources ended early ([`Source::failure`]).
    pub failures: Mutex<Vec<String>>,
}

pub(crate) struct WorkerShared {
    /// Last loop found no work.
    pub idle: AtomicBool,
    /// Loops that did work (termination check).
    pub work: AtomicU64,
    /// When the worker last went idle after doing work: the end of its
    /// part of the run (the run time is measured to the last of these, not
    /// to when the controlling thread noticed).
    pub busy_until: Mutex<Option<Instant>>,
    /// Published counters.
    pub counters: Mutex<WorkerCounters>,
    pub source_drops: AtomicU64,
    pub source_drop_reasons: Mutex<Vec<(&'static str, u64)>>,
}

/// Running dispatch: monitor it, stop it, collect the handlers.
pub struct Netisr<H: Handler> {
    ctl: Arc<RunState>,
    /// `monitors[dst]`: rings into worker `dst`.
    monitors: Vec<Vec<RingMonitor<Mbuf>>>,
    /// Message rings (drained before the run counts as done).
    msg_monitors: Vec<RingMonitor<Msg>>,
    threads: Vec<JoinHandle<Result<(H, WorkerCounters)>>>,
    cpus: Vec<Option<CpuId>>,
    started: Instant,
}

impl<H: Handler> Netisr<H> {
    /// Starts the workers. `inputs`: `(home worker, source)`; `sinks` and
    /// `handlers`: one per worker.
    pub fn start(
        cfg: NetisrConfig,
        inputs: Vec<(usize, Box<dyn Source>)>,
        sinks: Vec<Box<dyn Sink>>,
        handlers: Vec<H>,
    ) -> Result<Self> {
        let inputs = inputs.into_iter().map(|(w, s)| (w, 0, s)).collect();
        Self::start_ports(cfg, inputs, sinks, handlers)
    }

    /// [`Netisr::start`] with inputs `(home worker, flags, source)`: every
    /// frame of a source carries its `flags` (e.g. [`FLAG_PORT_B`]) in
    /// [`Mbuf::flags`] and [`PacketCtx::flags`].
    pub fn start_ports(
        cfg: NetisrConfig,
        inputs: Vec<(usize, u8, Box<dyn Source>)>,
        sinks: Vec<Box<dyn Sink>>,
        handlers: Vec<H>,
    ) -> Result<Self> {
        cfg.validate()?;
        let n = cfg.workers();
        if sinks.len() != n || handlers.len() != n {
            return Err(NetisrError::PerWorker { workers: n, sinks: sinks.len(), handlers: handlers.len() });
        }
        if let Some((w, _, _)) = inputs.iter().find(|(w, _, _)| *w >= n) {
            return Err(NetisrError::InputHome { worker: *w, workers: n });
        }
        let hasher = cfg.hasher();
        let ctl = Arc::new(RunState {
            inputs_active: AtomicUsize::new(inputs.len()),
            stop_inputs: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            workers: (0..n)
                .map(|_| {
                    ring::CachePadded(WorkerShared {
                        idle: AtomicBool::new(false),
                        work: AtomicU64::new(0),
                        busy_until: Mutex::new(None),
                        counters: Mutex::new(WorkerCounters::default()),
                        source_drops: AtomicU64::new(0),
                        source_drop_reasons: Mutex::new(Vec::new()),
                    })
                })
                .collect(),
            failures: Mutex::new(Vec::new()),
        });
        let parts = worker::build(&cfg, n, hasher, inputs, sinks, handlers, &ctl)?;
        let monitors = parts.monitors;
        let msg_monitors = parts.msg_monitors;
        let mut threads = Vec::with_capacity(n);
        let mut cpus = Vec::with_capacity(n);
        // Before the first worker runs: a worker that finishes before the
        // last one is spawned must not end its work before the run began
        // (elapsed 0, rates infinite).
        let started = Instant::now();
        for w in parts.workers {
            let cpu = cfg.pinned_cpu(w.id());
            cpus.push(cpu);
            let id = w.id();
            match rsskit_linux::affinity::spawn_pinned(
                format!("netisr{id}"),
                cpu.map(CpuId::as_usize),
                move || w.run(),
            ) {
                Ok(t) => threads.push(t),
                Err(e) => {
                    // Stop the workers already running (they drain and exit).
                    ctl.stop_inputs.store(true, Ordering::SeqCst);
                    ctl.stop.store(true, Ordering::SeqCst);
                    threads.into_iter().for_each(|t| drop(t.join()));
                    return Err(NetisrError::Spawn { worker: id, source: e });
                }
            }
        }
        Ok(Netisr { ctl, monitors, msg_monitors, threads, cpus, started })
    }

    /// Live snapshot of every worker.
    pub fn snapshot(&self) -> Vec<WorkerReport> {
        (0..self.ctl.workers.len())
            .map(|w| {
                let counters = *self.ctl.workers[w].counters.lock().unwrap_or_else(|e| e.into_inner());
                self.report(w, counters)
            })
            .collect()
    }

    fn report(&self, w: usize, counters: WorkerCounters) -> WorkerReport {
        let mut r = WorkerReport { worker: w, cpu: self.cpus[w], counters, ..Default::default() };
        for m in &self.monitors[w] {
            let s = m.stats();
            r.queued += s.queued;
            r.qdrops += s.drops;
            r.high_water = r.high_water.max(s.high_water);
            r.queue_len += s.len;
        }
        r.source_drops = self.ctl.workers[w].source_drops.load(Ordering::Relaxed);
        r.source_drop_reasons =
            self.ctl.workers[w].source_drop_reasons.lock().unwrap_or_else(|e| e.into_inner()).clone();
        r
    }

    /// Asks the sources to stop; the workers then drain and exit.
    pub fn stop_inputs(&self) {
        self.ctl.stop_inputs.store(true, Ordering::SeqCst);
    }

    /// Time since start.
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// True once every source is done and everything queued was handled.
    fn quiescent(&self) -> bool {
        if self.ctl.inputs_active.load(Ordering::SeqCst) != 0 {
            return false;
        }
        let scan = || -> Option<Vec<u64>> {
            let mut work = Vec::new();
            for ws in &self.ctl.workers {
                if !ws.idle.load(Ordering::SeqCst) {
                    return None;
                }
                work.push(ws.work.load(Ordering::SeqCst));
            }
            if self.monitors.iter().flatten().any(|m| m.stats().len != 0)
                || self.msg_monitors.iter().any(|m| m.stats().len != 0)
            {
                return None;
            }
            Some(work)
        };
        let Some(a) = scan() else { return false };
        std::thread::sleep(Duration::from_millis(2));
        let Some(b) = scan() else { return false };
        a == b
    }

    /// Waits until all sources are done and drained (or `duration` passed,
    /// or `interrupt` was set: either stops the sources), calling `status`
    /// every `interval`. Then joins the workers.
    pub fn wait(
        self,
        duration: Option<Duration>,
        interval: Duration,
        interrupt: Option<&AtomicBool>,
        mut status: impl FnMut(&[WorkerReport], Duration),
    ) -> Result<RunReport<H>> {
        let mut next_status = Instant::now() + interval;
        let deadline = duration.map(|d| self.started + d);
        loop {
            if self.threads.iter().any(|t| t.is_finished()) {
                break; // a worker failed (or exited): collect below
            }
            if self.quiescent() {
                break;
            }
            let now = Instant::now();
            if deadline.is_some_and(|d| now >= d) || interrupt.is_some_and(|f| f.load(Ordering::Relaxed)) {
                self.stop_inputs();
            }
            if now >= next_status {
                status(&self.snapshot(), self.started.elapsed());
                next_status += interval;
            }
            // While sources run, wake seldom: with every CPU running a
            // worker, each wake-up of this thread preempts one of them
            // (a 1-worker run has a spare CPU for it, so frequent polling
            // cost the 2-worker run alone). The run time does not depend on
            // this delay (`busy_until`).
            let nap = if self.ctl.inputs_active.load(Ordering::Relaxed) > 0 {
                let mut nap = Duration::from_millis(50).min(next_status.saturating_duration_since(now));
                if let Some(d) = deadline {
                    nap = nap.min(d.saturating_duration_since(now));
                }
                nap.max(Duration::from_millis(1))
            } else {
                Duration::from_millis(5)
            };
            std::thread::sleep(nap);
        }
        let noticed = self.started.elapsed();
        self.ctl.stop_inputs.store(true, Ordering::SeqCst);
        self.ctl.stop.store(true, Ordering::SeqCst);
        let mut handlers = Vec::new();
        let mut finals = Vec::new();
        let mut first_err = None;
        for t in self.threads.into_iter() {
            match t.join() {
                Ok(Ok((h, c))) => {
                    handlers.push(h);
                    finals.push(c);
                }
                Ok(Err(e)) => {
                    first_err.get_or_insert(e);
                }
                Err(_) => {
                    first_err.get_or_insert(NetisrError::Panicked);
                }
            }
        }
        if let Some(e) = first_err {
            return Err(e);
        }
        let me = Netisr::<H> {
            ctl: self.ctl,
            monitors: self.monitors,
            msg_monitors: self.msg_monitors,
            threads: Vec::new(),
            cpus: self.cpus,
            started: self.started,
        };
        let last_busy = me
            .ctl
            .workers
            .iter()
            .filter_map(|ws| *ws.busy_until.lock().unwrap_or_else(|e| e.into_inner()))
            .max();
        let elapsed = last_busy.map_or(noticed, |t| t.saturating_duration_since(me.started).min(noticed));
        let workers = finals.into_iter().enumerate().map(|(w, c)| me.report(w, c)).collect();
        let input_errors = std::mem::take(&mut *me.ctl.failures.lock().unwrap_or_else(|e| e.into_inner()));
        Ok(RunReport { workers, handlers, elapsed, input_errors })
    }

    /// [`Netisr::wait`] without status reports or deadline.
    pub fn join(self) -> Result<RunReport<H>> {
        self.wait(None, Duration::from_secs(3600), None, |_, _| ())
    }
}
