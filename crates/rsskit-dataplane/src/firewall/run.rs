//! Threaded drivers.
//!
//! - [`run`]: a dispatcher (the caller's thread) steers each input frame to
//!   its worker by RSS, like a NIC queue would, in batches over channels;
//!   one thread per worker filters; frames a redirection hands over and
//!   control messages go to the target worker's channel (FIFO per sender,
//!   as [`super::redirect`] requires); passed frames go to one output
//!   callback. Used by `rsskit firewall` for pcap input. Each frame is
//!   judged at its own time (the worker's clock advances frame by frame,
//!   not to the batch's latest). With [`Order::Causal`] the dispatcher
//!   holds frames that may touch cross-worker state at an epoch barrier
//!   ([`super::order`]).
//! - [`replay_partitioned`]: the benchmark loop: each worker thread replays
//!   its own pre-steered frames from memory (what a NIC with one RX queue
//!   per worker delivers), no dispatcher, no channels.

pub use super::order::Order;
use super::order::{needed, Classifier, OrderStats, BARRIER_TIMEOUT};
use super::{Control, Dir, Firewall, FlowOwners, Resume, Snapshot, Verdict};
use rsskit_linux::affinity::spawn_pinned_scoped;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One input frame.
#[derive(Debug, Clone)]
pub struct Input {
    /// The Ethernet frame.
    pub frame: Vec<u8>,
    /// Its direction.
    pub dir: Dir,
    /// The frame's time (ms): capture time for a replay, wall clock live.
    pub ts_ms: u64,
}

/// The direction of a captured frame: `out` if its source is one of `me`,
/// else `in` (a capture taken on the host the rules protect).
pub fn direction(frame: &[u8], me: &[std::net::IpAddr], cfg: &crate::wire::ParseConfig) -> Dir {
    match crate::wire::parse_ethernet(frame, cfg) {
        Ok(p) if me.contains(&p.outer.src) => Dir::Out,
        _ => Dir::In,
    }
}

enum Item {
    Wire(Input),
    Resume(Input, Resume),
    Control(Control),
    /// Advance the clock to this time (ms): an ordered replay's barrier.
    Tick(u64),
}

/// Totals of a [`run`].
#[derive(Debug, Clone)]
pub struct RunTotals {
    /// Run time.
    pub elapsed: Duration,
    /// Frames read.
    pub inputs: u64,
    /// The firewall's counters at the end.
    pub snapshot: Snapshot,
    /// What the ordering did (all zero with [`Order::None`]).
    pub order: OrderStats,
}

/// Waits until nothing is in flight; false if that took [`BARRIER_TIMEOUT`].
fn wait_drained(inflight: &AtomicI64, since: Instant) -> bool {
    let mut spins = 0u32;
    while inflight.load(Ordering::Acquire) != 0 {
        if since.elapsed() >= BARRIER_TIMEOUT {
            return false;
        }
        spins += 1;
        if spins < 64 {
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
    true
}

/// Filters `inputs` on one thread per worker. `output` gets every passed
/// frame; `status` is called about once per `status_every` with a snapshot.
///
/// `live`: the clock's origin for live input; idle workers then keep
/// expiring states as wall time passes (with `None` the clock is the
/// frames' timestamps only). `order`: [`Order::Causal`] for a replay.
#[allow(clippy::too_many_arguments)]
pub fn run(
    fw: &Arc<Firewall>,
    inputs: impl Iterator<Item = Input>,
    batch: usize,
    live: Option<Instant>,
    order: Order,
    mut output: impl FnMut(Vec<u8>, Dir) + Send,
    status_every: Option<Duration>,
    mut status: impl FnMut(&Snapshot),
) -> RunTotals {
    let n = fw.config.workers();
    let batch = batch.max(1);
    let steer = FlowOwners::new(&fw.config.policy);
    let inflight = AtomicI64::new(0);
    let done = AtomicBool::new(false);
    let (txs, rxs): (Vec<_>, Vec<_>) = (0..n).map(|_| mpsc::channel::<Vec<Item>>()).unzip();
    let (out_tx, out_rx) = mpsc::channel::<(Vec<u8>, Dir)>();
    let cls = (order == Order::Causal && needed(fw)).then(|| Classifier::new(fw));
    let mut ostats = OrderStats::default();
    let start = Instant::now();
    let mut count = 0u64;
    std::thread::scope(|s| {
        s.spawn(move || {
            for (f, d) in out_rx {
                output(f, d);
            }
        });
        for (id, rx) in rxs.into_iter().enumerate() {
            let peers = txs.clone();
            let out = out_tx.clone();
            let inflight = &inflight;
            let done = &done;
            let mut w = fw.worker(id);
            spawn_pinned_scoped(s, format!("fw{id}"), None, move || {
                let mut now = 0u64;
                loop {
                    match rx.recv_timeout(Duration::from_millis(1)) {
                        Ok(items) => {
                            w.begin_batch(now);
                            for item in items {
                                // Each frame at its own time: housekeeping
                                // (expiry) runs again whenever the clock moves.
                                let ts = match &item {
                                    Item::Wire(x) | Item::Resume(x, _) => x.ts_ms,
                                    Item::Tick(t) => *t,
                                    Item::Control(_) => 0,
                                };
                                if ts > now {
                                    now = ts;
                                    w.begin_batch(now);
                                }
                                let (mut inp, v) = match item {
                                    Item::Wire(mut x) => {
                                        let v = w.process(&mut x.frame, x.dir, now);
                                        (x, v)
                                    }
                                    Item::Resume(mut x, m) => {
                                        let v = w.resume(&mut x.frame, x.dir, m, now);
                                        (x, v)
                                    }
                                    Item::Control(c) => {
                                        w.control(c);
                                        inflight.fetch_sub(1, Ordering::AcqRel);
                                        continue;
                                    }
                                    Item::Tick(_) => {
                                        for (to, c) in w.drain_outbox() {
                                            inflight.fetch_add(1, Ordering::AcqRel);
                                            let _ = peers[to].send(vec![Item::Control(c)]);
                                        }
                                        inflight.fetch_sub(1, Ordering::AcqRel);
                                        continue;
                                    }
                                };
                                match v {
                                    Verdict::Pass => {
                                        let _ = out.send((std::mem::take(&mut inp.frame), inp.dir));
                                    }
                                    Verdict::Drop => {}
                                    Verdict::Forward { to, msg } => {
                                        inflight.fetch_add(1, Ordering::AcqRel);
                                        let _ = peers[to].send(vec![Item::Resume(inp, msg)]);
                                    }
                                }
                                for (to, c) in w.drain_outbox() {
                                    inflight.fetch_add(1, Ordering::AcqRel);
                                    let _ = peers[to].send(vec![Item::Control(c)]);
                                }
                                inflight.fetch_sub(1, Ordering::AcqRel);
                            }
                            w.publish();
                        }
                        Err(mpsc::RecvTimeoutError::Timeout) => {
                            if done.load(Ordering::Acquire) && inflight.load(Ordering::Acquire) == 0 {
                                break;
                            }
                            if let Some(t0) = live {
                                now = now.max(t0.elapsed().as_millis() as u64);
                                w.begin_batch(now);
                                for (to, c) in w.drain_outbox() {
                                    inflight.fetch_add(1, Ordering::AcqRel);
                                    let _ = peers[to].send(vec![Item::Control(c)]);
                                }
                            }
                        }
                        Err(mpsc::RecvTimeoutError::Disconnected) => break,
                    }
                }
                // Final counters for the snapshot.
                w.publish();
            })
            // Unpinned: only the OS refusing a thread fails, as `s.spawn` would.
            .expect("spawning a firewall worker");
        }
        drop(out_tx);
        let mut pending: Vec<Vec<Item>> = (0..n).map(|_| Vec::with_capacity(batch)).collect();
        let mut last_status = Instant::now();
        // The latest frame time handed to each worker.
        let mut sent_ms = vec![0u64; n];
        for inp in inputs {
            count += 1;
            let wk = steer.worker_of_frame(&inp.frame, &fw.config.parse);
            if cls.as_ref().is_some_and(|c| c.needs_barrier(&inp.frame)) {
                // Epoch barrier: everything dispatched so far completes,
                // then every worker's clock reaches this frame's time.
                let since = Instant::now();
                for (k, b) in pending.iter_mut().enumerate() {
                    if !b.is_empty() {
                        let b = std::mem::replace(b, Vec::with_capacity(batch));
                        inflight.fetch_add(b.len() as i64, Ordering::AcqRel);
                        let _ = txs[k].send(b);
                    }
                }
                let mut ok = wait_drained(&inflight, since);
                // A worker that was sent a frame of this time (and is
                // drained) is there already.
                let behind: Vec<usize> = (0..n).filter(|&k| sent_ms[k] < inp.ts_ms).collect();
                if !behind.is_empty() {
                    inflight.fetch_add(behind.len() as i64, Ordering::AcqRel);
                    for &k in &behind {
                        let _ = txs[k].send(vec![Item::Tick(inp.ts_ms)]);
                        sent_ms[k] = inp.ts_ms;
                    }
                    ok &= wait_drained(&inflight, since);
                }
                ostats.barriers += 1;
                ostats.timeouts += u64::from(!ok);
                ostats.wait_ns += since.elapsed().as_nanos() as u64;
            }
            sent_ms[wk] = sent_ms[wk].max(inp.ts_ms);
            pending[wk].push(Item::Wire(inp));
            if pending[wk].len() >= batch {
                let b = std::mem::replace(&mut pending[wk], Vec::with_capacity(batch));
                inflight.fetch_add(b.len() as i64, Ordering::AcqRel);
                let _ = txs[wk].send(b);
            }
            if let Some(every) = status_every {
                if last_status.elapsed() >= every {
                    last_status = Instant::now();
                    status(&fw.snapshot());
                }
            }
        }
        for (wk, b) in pending.into_iter().enumerate() {
            if !b.is_empty() {
                inflight.fetch_add(b.len() as i64, Ordering::AcqRel);
                let _ = txs[wk].send(b);
            }
        }
        while inflight.load(Ordering::Acquire) != 0 {
            if let Some(every) = status_every {
                if last_status.elapsed() >= every {
                    last_status = Instant::now();
                    status(&fw.snapshot());
                }
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        done.store(true, Ordering::Release);
    });
    RunTotals { elapsed: start.elapsed(), inputs: count, snapshot: fw.snapshot(), order: ostats }
}

/// CPU time consumed by the calling thread.
pub use rsskit_linux::affinity::thread_cpu_time;

/// What [`replay_partitioned`] measured.
#[derive(Debug, Clone)]
pub struct Replay {
    /// Wall time from the common start to the last worker's end.
    pub elapsed: Duration,
    /// Frames processed over all workers.
    pub frames: u64,
    /// CPU time of each worker thread.
    pub cpu: Vec<Duration>,
}

/// Replays each worker's own frames `rounds` times from memory, one thread
/// per worker, in batches of `batch`. The clock is shared, like a kernel's
/// tick: it advances `ms_per_batch` per batch per worker on average (one
/// relaxed atomic add per 4 batches), so a worker that expires another's states
/// (the locked table) never does it early by its own clock. Frames are
/// copied into a scratch buffer before filtering (a redirect would rewrite
/// them).
pub fn replay_partitioned(
    fw: &Arc<Firewall>,
    per_worker: &[Vec<Vec<u8>>],
    rounds: usize,
    batch: usize,
    ms_per_batch: u64,
) -> Replay {
    let barrier = std::sync::Barrier::new(per_worker.len() + 1);
    let clock = std::sync::atomic::AtomicU64::new(0);
    let workers = per_worker.len().max(1) as u64;
    let mut start = Instant::now();
    let res: Vec<(u64, Duration)> = std::thread::scope(|s| {
        let hs: Vec<_> = per_worker
            .iter()
            .enumerate()
            .map(|(id, frames)| {
                let barrier = &barrier;
                let clock = &clock;
                let mut w = fw.worker(id);
                spawn_pinned_scoped(s, format!("fw-replay{id}"), None, move || {
                    let mut buf = vec![0u8; 2048];
                    let mut now;
                    let mut n = 0u64;
                    let (mut k, mut base) = (0u64, 0u64);
                    const TICK: u64 = 4;
                    barrier.wait();
                    let cpu0 = thread_cpu_time();
                    for _ in 0..rounds {
                        for chunk in frames.chunks(batch.max(1)) {
                            // One shared add per TICK batches (the clock's line
                            // moves between cores once per TICK * batch frames).
                            if k % TICK == 0 {
                                base = clock.fetch_add(TICK, Ordering::Relaxed);
                            }
                            now = 1 + (base + k % TICK) * ms_per_batch / workers;
                            k += 1;
                            w.begin_batch(now);
                            for f in chunk {
                                if buf.len() < f.len() {
                                    buf.resize(f.len(), 0);
                                }
                                let b = &mut buf[..f.len()];
                                b.copy_from_slice(f);
                                let _ = w.process(b, Dir::In, now);
                                n += 1;
                            }
                        }
                    }
                    let cpu = thread_cpu_time().saturating_sub(cpu0);
                    w.publish();
                    (n, cpu)
                })
                .expect("spawning a firewall worker")
            })
            .collect();
        barrier.wait();
        start = Instant::now();
        hs.into_iter().map(|h| h.join().unwrap_or((0, Duration::ZERO))).collect()
    });
    Replay {
        elapsed: start.elapsed(),
        frames: res.iter().map(|r| r.0).sum(),
        cpu: res.iter().map(|r| r.1).collect(),
    }
}
