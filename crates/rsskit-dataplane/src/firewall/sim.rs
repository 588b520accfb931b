//! A deterministic single-thread driver: every worker of a firewall in one
//! thread, each frame processed to completion (including the hops of a
//! redirection and the control messages it causes) before the next. Tests
//! use it to check semantics exactly; [`super::run`] is the threaded driver.

use super::{Config, Dir, Firewall, FlowOwners, Rules, Verdict, Worker};
use std::sync::Arc;

/// What happened to one frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// Whether the frame left the firewall.
    pub pass: bool,
    /// The frame as it left (rewritten by a redirection).
    pub frame: Vec<u8>,
    /// The workers that handled it, in order.
    pub hops: Vec<usize>,
}

/// All workers of a firewall, driven from one thread.
pub struct Cluster {
    /// The shared firewall.
    pub fw: Arc<Firewall>,
    /// Every worker, index = worker id.
    pub workers: Vec<Worker>,
    /// Which worker owns a flow.
    pub steer: FlowOwners,
}

impl Cluster {
    /// A firewall with `rules` and its workers.
    pub fn new(config: Config, rules: Rules) -> Self {
        let steer = FlowOwners::new(&config.policy);
        let fw = Firewall::new(config, rules);
        let workers = (0..fw.config.workers()).map(|i| fw.worker(i)).collect();
        Cluster { fw, workers, steer }
    }

    /// The worker a frame arrives at (RSS of its outer header).
    pub fn worker_of(&self, frame: &[u8]) -> usize {
        self.steer.worker_of_frame(frame, &self.fw.config.parse)
    }

    /// Processes one frame to completion at time `now` (ms), after running
    /// every worker's housekeeping ([`Cluster::tick`]).
    pub fn feed(&mut self, frame: &[u8], dir: Dir, now: u64) -> Outcome {
        // Every worker runs its housekeeping continuously in a real run.
        self.tick(now);
        let mut f = frame.to_vec();
        let w = self.worker_of(&f);
        let mut hops = vec![w];
        let mut v = self.workers[w].process(&mut f, dir, now);
        loop {
            self.deliver_controls();
            match v {
                Verdict::Pass => return Outcome { pass: true, frame: f, hops },
                Verdict::Drop => return Outcome { pass: false, frame: f, hops },
                Verdict::Forward { to, msg } => {
                    hops.push(to);
                    self.workers[to].begin_batch(now);
                    v = self.workers[to].resume(&mut f, dir, msg, now);
                }
            }
        }
    }

    /// Runs every worker's per-batch housekeeping at `now` and delivers the
    /// resulting messages.
    pub fn tick(&mut self, now: u64) {
        for w in &mut self.workers {
            w.begin_batch(now);
        }
        self.deliver_controls();
        for w in &self.workers {
            w.publish();
        }
    }

    /// Delivers control messages until none is left.
    pub fn deliver_controls(&mut self) {
        loop {
            let msgs: Vec<_> =
                self.workers.iter_mut().flat_map(|w| w.drain_outbox().collect::<Vec<_>>()).collect();
            if msgs.is_empty() {
                return;
            }
            for (to, c) in msgs {
                self.workers[to].control(c);
            }
        }
    }

    /// States per worker.
    pub fn states(&self) -> Vec<usize> {
        self.workers.iter().map(|w| w.states()).collect()
    }
}
