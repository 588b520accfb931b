//! Pinned workers.

use crate::Error;
use rsskit_core::{CpuId, RssPolicy, WorkerId};
use std::thread;

/// Runs `f(worker, cpu, state)` on one thread per worker of `policy`, each
/// pinned to its worker's CPU, and returns their results in worker order
/// once all have returned. `states` has one entry per worker (for instance
/// [`crate::UdpGroup::into_sockets`]).
///
/// ```
/// use rsskit_app::{per_cpu_policy, run_pinned};
/// let cpu = rsskit_app::online_cpus()[0];
/// let policy = per_cpu_policy(&[cpu])?;
/// let ran_on = run_pinned(&policy, vec![()], |_w, _cpu, ()| rsskit_linux::affinity::current_cpu())?;
/// assert_eq!(ran_on, vec![Some(cpu)]);
/// # Ok::<(), rsskit_app::Error>(())
/// ```
pub fn run_pinned<S, R, F>(policy: &RssPolicy, states: Vec<S>, f: F) -> Result<Vec<R>, Error>
where
    S: Send,
    R: Send,
    F: Fn(WorkerId, CpuId, S) -> R + Sync,
{
    if states.len() != policy.workers() {
        return Err(Error::WrongCount {
            what: "worker states",
            got: states.len(),
            workers: policy.workers(),
        });
    }
    let f = &f;
    thread::scope(|scope| {
        let handles: Vec<_> = states
            .into_iter()
            .enumerate()
            .map(|(i, state)| {
                let w = WorkerId(i as u32);
                let cpu = policy.cpu_of(w).expect("one CPU per worker");
                thread::Builder::new()
                    .name(format!("rss-worker-{i}"))
                    .spawn_scoped(scope, move || {
                        rsskit_linux::affinity::pin_current_thread(cpu.as_usize())
                            .map_err(|source| Error::Pin { worker: w.0, cpu: cpu.0, source })?;
                        Ok(f(w, cpu, state))
                    })
                    .map_err(|e| Error::io("spawning a worker thread", e))
            })
            .collect();
        let mut out = Vec::new();
        let mut first_err = None;
        for (i, h) in handles.into_iter().enumerate() {
            let r = match h {
                Ok(h) => h.join().unwrap_or(Err(Error::WorkerPanicked(i as u32))),
                Err(e) => Err(e),
            };
            match r {
                Ok(v) => out.push(v),
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        first_err.map_or(Ok(out), Err)
    })
}
