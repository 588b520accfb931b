//! Pinned workers: one thread per CPU in use, each pinned before it
//! allocates anything (so its buffers are first touched on its own CPU and
//! NUMA node), each owning whatever its closure captures. The only shared
//! state is the stop flag (read) and the worker's own [`WorkerStats`] block
//! (written by the worker alone).

use crate::stats::WorkerStats;
use rsskit_core::{CpuId, WorkerId};
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;

/// Why workers could not be started or did not end well.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// The OS refused a thread.
    #[error("spawning worker {index}")]
    Spawn {
        /// The worker's index.
        index: usize,
        /// What `std::thread::Builder::spawn` said.
        #[source]
        source: io::Error,
    },
    /// Pinning or the caller's setup failed on the worker's thread; the
    /// other workers were stopped and joined.
    #[error("worker {} (CPU {}): {reason}", index.0, cpu.0)]
    Start {
        /// The worker.
        index: WorkerId,
        /// The CPU it was to run on.
        cpu: CpuId,
        /// The failure and its causes, `a: b` (it happened on another thread).
        reason: String,
    },
    /// A worker thread ended before saying whether it started.
    #[error("a worker died while starting")]
    Died,
    /// A worker's closure panicked (reported once every worker is joined).
    #[error("worker {0} panicked")]
    Panicked(usize),
    /// A worker never ran its closure (its start failed).
    #[error("worker {0} did not start")]
    NotStarted(usize),
}

/// Shorthand for this module's results.
pub type Result<T, E = WorkerError> = std::result::Result<T, E>;

/// What a worker is told about itself: its index and CPU as the numbers
/// its hot loop stamps into replies (the typed [`WorkerId`] and [`CpuId`]
/// are [`WorkerCtx::worker`] and [`WorkerCtx::cpu_id`]).
#[derive(Debug, Clone)]
pub struct WorkerCtx {
    /// Worker index (0-based, also its socket index).
    pub index: usize,
    /// CPU it is pinned to.
    pub cpu: usize,
    /// Set when the worker should return.
    pub stop: Arc<AtomicBool>,
    /// Its counters block.
    pub stats: Arc<WorkerStats>,
}

impl WorkerCtx {
    /// The worker.
    pub fn worker(&self) -> WorkerId {
        WorkerId(self.index as u32)
    }

    /// The CPU it is pinned to.
    pub fn cpu_id(&self) -> CpuId {
        CpuId(self.cpu as u32)
    }

    /// Whether stop was requested.
    #[inline]
    pub fn stopping(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }
}

/// Running workers.
pub struct Workers<R> {
    /// `None`: the worker did not start (pinning or setup failed).
    handles: Vec<JoinHandle<Option<R>>>,
    stats: Vec<Arc<WorkerStats>>,
    cpus: Vec<CpuId>,
    stop: Arc<AtomicBool>,
}

impl<R: Send + 'static> Workers<R> {
    /// Spawns one thread per entry of `cpus`, pinned to it, running `f(ctx,
    /// state)` where `state` is the worker's entry of `states` (its socket,
    /// say). Returns once every worker is pinned; if any cannot be, stops
    /// the others and returns the error.
    pub fn spawn<S, F>(cpus: &[CpuId], states: Vec<S>, stop: Arc<AtomicBool>, f: F) -> Result<Workers<R>>
    where
        S: Send + 'static,
        F: Fn(WorkerCtx, S) -> R + Send + Sync + 'static,
    {
        Self::spawn_with_setup(cpus, true, states, stop, |_, s| Ok::<S, std::convert::Infallible>(s), f)
    }

    /// As [`Workers::spawn`], with a fallible `setup(&ctx, state)` run on
    /// the worker's thread once it is pinned (so what it allocates is first
    /// touched on the worker's CPU, and need not be `Send`); `run(ctx, t)`
    /// gets what it built. With `pin` false the threads are left wherever
    /// the scheduler puts them (`cpus` only names them), for tools that
    /// offer running unpinned (`http-load --no-pin`). Returns once every
    /// worker is pinned and set up; if any fails, stops the others and
    /// returns the first error.
    pub fn spawn_with_setup<S, T, E, G, F>(
        cpus: &[CpuId],
        pin: bool,
        states: Vec<S>,
        stop: Arc<AtomicBool>,
        setup: G,
        run: F,
    ) -> Result<Workers<R>>
    where
        S: Send + 'static,
        E: std::error::Error,
        G: Fn(&WorkerCtx, S) -> Result<T, E> + Send + Sync + 'static,
        F: Fn(WorkerCtx, T) -> R + Send + Sync + 'static,
    {
        assert_eq!(cpus.len(), states.len(), "one state per worker");
        let (setup, run) = (Arc::new(setup), Arc::new(run));
        let (ready_tx, ready_rx) = mpsc::channel::<(usize, Result<(), String>)>();
        let mut w = Workers { handles: Vec::new(), stats: Vec::new(), cpus: cpus.to_vec(), stop };
        for (index, (&cpu, state)) in cpus.iter().zip(states).enumerate() {
            let stats = Arc::new(WorkerStats::new());
            w.stats.push(stats.clone());
            let ctx = WorkerCtx { index, cpu: cpu.as_usize(), stop: w.stop.clone(), stats };
            let (setup, run, ready) = (setup.clone(), run.clone(), ready_tx.clone());
            let h = std::thread::Builder::new()
                .name(format!("rsskit-w{index}-cpu{}", cpu.0))
                .spawn(move || {
                    let pinned =
                        if pin { rsskit_linux::affinity::pin_current_thread(cpu.as_usize()) } else { Ok(()) };
                    // Said as a string: the error need not be `Send`.
                    let built = match pinned {
                        Ok(()) => setup(&ctx, state).map_err(|e| crate::error_chain(&e)),
                        Err(e) => Err(crate::error_chain(&e)),
                    };
                    match built {
                        Ok(t) => {
                            let _ = ready.send((index, Ok(())));
                            drop(ready);
                            Some(run(ctx, t))
                        }
                        Err(e) => {
                            // The worker's state is simply dropped.
                            let _ = ready.send((index, Err(e)));
                            None
                        }
                    }
                })
                .map_err(|source| WorkerError::Spawn { index, source });
            match h {
                Ok(h) => w.handles.push(h),
                Err(e) => {
                    w.stop.store(true, Ordering::Relaxed);
                    let _ = w.join();
                    return Err(e);
                }
            }
        }
        drop(ready_tx);
        let mut first_err = None;
        for _ in 0..cpus.len() {
            match ready_rx.recv() {
                Ok((_, Ok(()))) => {}
                Ok((i, Err(e))) => {
                    first_err.get_or_insert(WorkerError::Start {
                        index: WorkerId(i as u32),
                        cpu: cpus[i],
                        reason: e,
                    });
                }
                Err(_) => {
                    first_err.get_or_insert(WorkerError::Died);
                    break;
                }
            }
        }
        if let Some(e) = first_err {
            w.stop.store(true, Ordering::Relaxed);
            let _ = w.join();
            return Err(e);
        }
        Ok(w)
    }

    /// Whether every worker has returned (on its own or after a stop).
    pub fn finished(&self) -> bool {
        self.handles.iter().all(|h| h.is_finished())
    }

    /// Number of workers.
    pub fn len(&self) -> usize {
        self.cpus.len()
    }

    /// No workers.
    pub fn is_empty(&self) -> bool {
        self.cpus.is_empty()
    }

    /// CPU of each worker.
    pub fn cpus(&self) -> &[CpuId] {
        &self.cpus
    }

    /// Counters blocks, in worker order.
    pub fn stats(&self) -> &[Arc<WorkerStats>] {
        &self.stats
    }

    /// The stop flag.
    pub fn stop_flag(&self) -> &Arc<AtomicBool> {
        &self.stop
    }

    /// Asks every worker to stop (they notice within their poll timeout).
    pub fn request_stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }

    /// Stops and joins every worker; their results in worker order. A worker
    /// that panicked is reported as an error after all are joined.
    pub fn join(self) -> Result<Vec<R>> {
        self.stop.store(true, Ordering::Relaxed);
        let mut out = Vec::with_capacity(self.handles.len());
        let mut panicked = None;
        let mut missing = None;
        for (i, h) in self.handles.into_iter().enumerate() {
            match h.join() {
                Ok(Some(r)) => out.push(r),
                Ok(None) => missing = Some(i),
                Err(_) => panicked = Some(i),
            }
        }
        match (panicked, missing) {
            (Some(i), _) => Err(WorkerError::Panicked(i)),
            (None, Some(i)) => Err(WorkerError::NotStarted(i)),
            (None, None) => Ok(out),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::Counters;

    fn online() -> Vec<CpuId> {
        rsskit_linux::cpulist::online().into_iter().map(|c| CpuId(c as u32)).collect()
    }

    #[test]
    fn workers_are_pinned_count_and_stop() {
        let cpus = online();
        let stop = Arc::new(AtomicBool::new(false));
        let states: Vec<u64> = (0..cpus.len() as u64).map(|i| i * 10).collect();
        let w = Workers::spawn(&cpus, states, stop, |ctx, base| {
            let mut c = Counters::default();
            let mut seen_cpu = None;
            while !ctx.stopping() {
                c.received += 1;
                ctx.stats.publish(&c);
                seen_cpu = rsskit_linux::affinity::current_cpu();
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            (ctx.index, base, seen_cpu, ctx.cpu)
        })
        .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(30));
        assert!(w.stats().iter().all(|s| s.snapshot().received > 0));
        let res = w.join().unwrap();
        for (i, (index, base, seen, cpu)) in res.into_iter().enumerate() {
            assert_eq!((index, base), (i, i as u64 * 10));
            assert_eq!(seen, Some(cpu), "worker ran on its CPU");
            assert_eq!(CpuId(cpu as u32), cpus[i]);
        }
    }

    #[test]
    fn unpinnable_cpu_is_an_error() {
        let stop = Arc::new(AtomicBool::new(false));
        let r = Workers::spawn(&[CpuId(0), CpuId(4000)], vec![(), ()], stop, |ctx, ()| ctx.index);
        let e = r.err().expect("CPU 4000 cannot be used").to_string();
        assert!(e.contains("worker 1"), "{e}");
    }

    #[test]
    fn setup_runs_pinned_and_its_failure_stops_everyone() {
        let cpus = online();
        let stop = Arc::new(AtomicBool::new(false));
        // Setup sees its CPU; what it builds (an Rc: not Send) reaches run.
        let w = Workers::spawn_with_setup(
            &cpus,
            true,
            vec![7u32; cpus.len()],
            stop,
            |ctx, s| {
                Ok::<_, io::Error>(std::rc::Rc::new((
                    s,
                    rsskit_linux::affinity::current_cpu() == Some(ctx.cpu),
                )))
            },
            |_, t| *t,
        )
        .unwrap();
        assert!(w.join().unwrap().iter().all(|&(s, pinned)| s == 7 && pinned));
        // One failing setup: an error naming it, the others stopped and joined.
        let ran = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let ran2 = ran.clone();
        let r = Workers::spawn_with_setup(
            &[cpus[0], cpus[0]],
            true,
            vec![0usize, 1],
            Arc::new(AtomicBool::new(false)),
            |_, i| if i == 1 { Err(io::Error::other("no epoll for you")) } else { Ok(i) },
            move |ctx, _| {
                while !ctx.stopping() {
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
                ran2.fetch_add(1, Ordering::Relaxed);
            },
        );
        let e = r.err().expect("setup of worker 1 fails").to_string();
        assert!(e.contains("worker 1 (CPU") && e.contains("no epoll for you"), "{e}");
        assert_eq!(ran.load(Ordering::Relaxed), 1, "worker 0 ran and was stopped");
    }

    #[test]
    fn unpinned_workers_keep_the_spawners_affinity_and_finish_on_their_own() {
        let mine = rsskit_linux::affinity::current_affinity().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        // CPU 4000 does not exist: fine when it only names the worker.
        let w = Workers::spawn_with_setup(
            &[CpuId(4000), CpuId(4001)],
            false,
            vec![(), ()],
            stop.clone(),
            |_, ()| Ok::<_, io::Error>(()),
            |_, ()| rsskit_linux::affinity::current_affinity().unwrap(),
        )
        .unwrap();
        let t = std::time::Instant::now();
        while !w.finished() {
            assert!(t.elapsed() < std::time::Duration::from_secs(5));
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert!(!stop.load(Ordering::Relaxed), "they returned without a stop request");
        assert_eq!(w.join().unwrap(), vec![mine.clone(), mine]);
    }
}
