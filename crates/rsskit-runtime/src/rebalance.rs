//! Live bucket rebalancing over eBPF reuseport steering (`--rebalance`):
//! every interval, the load of each bucket (datagrams, or SYNs, the
//! program hashed into it: `bucket_hits`) is summed per owning worker,
//! and buckets move from the busiest worker to the least busy one through
//! the bucket map, effective from the next datagram or connection.
//!
//! [`plan`] is the policy, without I/O; [`LiveBuckets`] measures and
//! applies it, and keeps a table of owners the workers read so their
//! "unowned" accounting follows the moves.

use rsskit_core::rebalance::{plan_moves, MoveRule};
use rsskit_linux::ebpf::reuseport::{Counters as EbpfCounters, ReuseportError, ReuseportSteering};
use serde::Serialize;
use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Instant;

/// Imbalance (busiest worker's load over the mean) at or below which
/// nothing moves.
pub const DEFAULT_TARGET: f64 = 1.1;
/// Fewer datagrams (or connections) than this in an interval: too little
/// to judge, nothing moves.
pub const MIN_SAMPLE: u64 = 100;

/// One bucket moved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct BucketMove {
    /// The bucket that moved.
    pub bucket: u32,
    /// The worker that owned it.
    pub from: u32,
    /// The worker that owns it now.
    pub to: u32,
    /// The bucket's load in the interval (datagrams or connections).
    pub load: u64,
}

/// Each worker's load: the sum of its buckets' loads.
pub fn worker_loads(owner: &[u32], bucket_load: &[u64], workers: usize) -> Vec<u64> {
    let mut l = vec![0u64; workers];
    for (&w, &h) in owner.iter().zip(bucket_load) {
        if let Some(x) = l.get_mut(w as usize) {
            *x += h;
        }
    }
    l
}

/// Max over mean (1.0: even; 0.0 without load): core's
/// [`rsskit_core::rebalance::imbalance`].
pub fn imbalance(loads: &[u64]) -> f64 {
    let loads: Vec<f64> = loads.iter().map(|&l| l as f64).collect();
    rsskit_core::rebalance::imbalance(&loads)
}

/// The moves that even out the workers' loads: core's one move rule
/// ([`MoveRule::ClosestPair`]: every bucket's load is measured), among the
/// workers marked `eligible` (with a socket). `min_sample`: below that
/// many datagrams in all, nothing moves.
pub fn plan(
    owner: &[u32],
    bucket_load: &[u64],
    eligible: &[bool],
    target: f64,
    min_sample: u64,
) -> Vec<BucketMove> {
    let n = eligible.len();
    let load = worker_loads(owner, bucket_load, n);
    if load.iter().sum::<u64>() < min_sample.max(1) {
        return Vec::new();
    }
    let mut owner = owner.to_vec();
    let item_load: Vec<f64> = bucket_load.iter().map(|&h| h as f64).collect();
    let mut load: Vec<f64> = load.iter().map(|&l| l as f64).collect();
    plan_moves(&mut owner, &item_load, &mut load, eligible, target, MoveRule::ClosestPair)
        .into_iter()
        .map(|m| BucketMove { bucket: m.item as u32, from: m.from, to: m.to, load: bucket_load[m.item] })
        .collect()
}

/// Why a round whose loads were uneven moved nothing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NoMove {
    /// The busiest worker.
    pub worker: u32,
    /// Its buckets that carried load in the interval, (bucket, load),
    /// heaviest first (at most 4).
    pub buckets: Vec<(u32, u64)>,
    /// Only one worker has a socket: nobody to give a bucket to.
    pub alone: bool,
}

/// Why [`plan`] moved nothing though the loads are uneven (imbalance above
/// `target`, enough of a sample): `None` when it moved something, or when
/// there was nothing to even out.
pub fn no_move(
    owner: &[u32],
    bucket_load: &[u64],
    eligible: &[bool],
    target: f64,
    min_sample: u64,
    moves: &[BucketMove],
) -> Option<NoMove> {
    let n = eligible.len();
    let load = worker_loads(owner, bucket_load, n);
    if n < 2 || !moves.is_empty() || load.iter().sum::<u64>() < min_sample.max(1) {
        return None;
    }
    let live: Vec<usize> = (0..n).filter(|&w| eligible[w]).collect();
    let judged: Vec<u64> =
        if live.len() < 2 { load.clone() } else { live.iter().map(|&w| load[w]).collect() };
    if imbalance(&judged) <= target && live.len() >= 2 {
        return None;
    }
    let pool: Vec<usize> = if live.len() < 2 { (0..n).collect() } else { live.clone() };
    let worker = *pool.iter().max_by_key(|&&w| (load[w], std::cmp::Reverse(w)))?;
    let mut buckets: Vec<(u32, u64)> = (0..owner.len())
        .filter(|&b| owner[b] as usize == worker && bucket_load[b] > 0)
        .map(|b| (b as u32, bucket_load[b]))
        .collect();
    buckets.sort_by_key(|&(b, h)| (std::cmp::Reverse(h), b));
    buckets.truncate(4);
    Some(NoMove { worker: worker as u32, buckets, alone: live.len() < 2 })
}

/// One rebalancing round, as reported.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Round {
    /// Seconds since the server started.
    pub t_s: f64,
    /// Length of the measured interval.
    pub interval_s: f64,
    /// Each worker's load in the interval (datagrams or connections).
    pub loads: Vec<u64>,
    /// Imbalance (busiest worker's load over the mean) before the moves.
    pub imbalance_before: f64,
    /// The same, estimated from this interval's loads as if the moves had
    /// been in force.
    pub imbalance_after: f64,
    /// The buckets moved in this round.
    pub moves: Vec<BucketMove>,
    /// Why nothing moved though the loads were uneven.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub no_move: Option<NoMove>,
}

/// The eBPF steering of a running server, with what rebalancing needs.
pub struct LiveBuckets {
    steer: ReuseportSteering,
    owners: Arc<[AtomicU32]>,
    last: Vec<u64>,
    last_at: Instant,
    started: Instant,
}

impl LiveBuckets {
    /// Takes over `steer`; measuring starts now.
    pub fn new(steer: ReuseportSteering) -> Result<Self, ReuseportError> {
        let owners: Arc<[AtomicU32]> = steer.owners().iter().map(|&w| AtomicU32::new(w)).collect();
        let last = steer.bucket_hits()?;
        let now = Instant::now();
        Ok(LiveBuckets { steer, owners, last, last_at: now, started: now })
    }

    /// Bucket -> worker, shared with the workers (updated on every move).
    pub fn owners(&self) -> Arc<[AtomicU32]> {
        self.owners.clone()
    }

    /// The program and its maps.
    pub fn steering(&self) -> &ReuseportSteering {
        &self.steer
    }

    /// The program's counters.
    pub fn counters(&self) -> Result<EbpfCounters, ReuseportError> {
        self.steer.counters()
    }

    /// Moves `bucket` to `worker` now (map first, then the shared table).
    pub fn move_bucket(&mut self, bucket: u32, worker: u32) -> Result<(), ReuseportError> {
        self.steer.move_bucket(bucket, worker)?;
        self.owners[bucket as usize].store(worker, Relaxed);
        Ok(())
    }

    /// Measures the interval since the last call and applies [`plan`].
    pub fn rebalance(&mut self, target: f64, min_sample: u64) -> Result<Round, ReuseportError> {
        let hits = self.steer.bucket_hits()?;
        let now = Instant::now();
        let delta: Vec<u64> = hits.iter().zip(&self.last).map(|(a, b)| a.saturating_sub(*b)).collect();
        let interval_s = now.duration_since(self.last_at).as_secs_f64();
        self.last = hits;
        self.last_at = now;
        let n = self.steer.workers();
        let eligible: Vec<bool> = (0..n as u32).map(|w| self.steer.has_socket(w)).collect();
        let before = worker_loads(self.steer.owners(), &delta, n);
        let moves = plan(self.steer.owners(), &delta, &eligible, target, min_sample);
        let stuck = no_move(self.steer.owners(), &delta, &eligible, target, min_sample, &moves);
        for m in &moves {
            self.move_bucket(m.bucket, m.to)?;
        }
        let after = worker_loads(self.steer.owners(), &delta, n);
        Ok(Round {
            t_s: now.duration_since(self.started).as_secs_f64(),
            interval_s,
            imbalance_before: imbalance(&before),
            imbalance_after: imbalance(&after),
            loads: before,
            moves,
            no_move: stuck,
        })
    }
}

/// Whether to print round `r`: every round that moved buckets, and one
/// that could not move though the loads were uneven, when its reason
/// (worker and buckets) differs from the last one printed (`last`).
pub fn worth_printing(r: &Round, last: &mut Option<(u32, Vec<u32>, bool)>) -> bool {
    if !r.moves.is_empty() {
        *last = None;
        return true;
    }
    let Some(s) = &r.no_move else { return false };
    let key = Some((s.worker, s.buckets.iter().map(|b| b.0).collect(), s.alone));
    if *last == key {
        return false;
    }
    *last = key;
    true
}

/// `rebalance 12.0s: bucket 3 worker 0 -> 1 (4521 in 5.0s) ...; loads [..] imbalance 1.80 -> 1.02`.
pub fn round_line(r: &Round) -> String {
    let moves: Vec<String> = r
        .moves
        .iter()
        .map(|m| {
            format!("bucket {} worker {} -> {} ({} in {:.1}s)", m.bucket, m.from, m.to, m.load, r.interval_s)
        })
        .collect();
    let what = match (&r.no_move, moves.is_empty()) {
        (_, false) => moves.join(", "),
        (None, true) => "no move".to_string(),
        (Some(s), true) => {
            let per_s = |h: u64| h as f64 / r.interval_s.max(1e-9);
            let list: Vec<String> =
                s.buckets.iter().map(|&(b, h)| format!("{b}: {:.0}/s", per_s(h))).collect();
            if s.alone {
                format!("no move: only worker {} has a socket, nobody to give its buckets to", s.worker)
            } else if s.buckets.len() == 1 {
                format!(
                    "no move: the busiest worker's load is one bucket ({}); moving it would not even out \
                     (it would only make another worker the busiest)",
                    list[0]
                )
            } else {
                format!(
                    "no move: each of the busiest worker {}'s buckets ({}) is too heavy to move without making \
                     another worker the busiest",
                    s.worker,
                    list.join(", ")
                )
            }
        }
    };
    format!(
        "rebalance {:.1}s: {}; loads {:?}, imbalance {:.2} -> {:.2}",
        r.t_s, what, r.loads, r.imbalance_before, r.imbalance_after
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busiest_worker_gives_buckets_to_the_idle_one() {
        // 8 buckets round robin over 2 workers; worker 0's buckets are hot.
        let owner: Vec<u32> = (0..8).map(|b| b % 2).collect();
        let load = [400, 10, 300, 10, 200, 10, 100, 10];
        let m = plan(&owner, &load, &[true, true], 1.1, 100);
        assert!(!m.is_empty());
        assert!(m.iter().all(|x| x.from == 0 && x.to == 1 && x.load == load[x.bucket as usize]));
        let mut after = owner.clone();
        for x in &m {
            after[x.bucket as usize] = x.to;
        }
        let before = imbalance(&worker_loads(&owner, &load, 2));
        let l = worker_loads(&after, &load, 2);
        assert!(imbalance(&l) < before, "{l:?}");
        // 1000 vs 40: moving 400 + 100 (or 300 + 200) evens it best.
        assert!(l[0].abs_diff(l[1]) <= 60, "{l:?} {m:?}");
    }

    #[test]
    fn balanced_idle_or_single_elephant_moves_nothing() {
        let owner: Vec<u32> = (0..4).map(|b| b % 2).collect();
        assert!(plan(&owner, &[100, 100, 100, 100], &[true, true], 1.1, 1).is_empty());
        assert!(plan(&owner, &[0; 4], &[true, true], 1.1, 1).is_empty());
        // Too small a sample.
        assert!(plan(&owner, &[50, 0, 0, 0], &[true, true], 1.1, 100).is_empty());
        // One bucket carries everything: moving it only moves the peak.
        assert!(plan(&owner, &[1000, 0, 0, 0], &[true, true], 1.1, 1).is_empty());
        // Three equal flows on two workers (2 : 1): moving one only swaps
        // the roles, so it stays (it used to bounce every round).
        assert!(plan(&owner, &[6400, 0, 6401, 6400], &[true, true], 1.1, 1).is_empty());
    }

    #[test]
    fn a_single_hot_bucket_says_why_nothing_moves() {
        let owner: Vec<u32> = (0..4).map(|b| b % 2).collect();
        let load = [0, 5481, 0, 0];
        let m = plan(&owner, &load, &[true, true], 1.1, 100);
        assert!(m.is_empty());
        let why = no_move(&owner, &load, &[true, true], 1.1, 100, &m).expect("uneven, so a reason");
        assert_eq!(why, NoMove { worker: 1, buckets: vec![(1, 5481)], alone: false });
        let r = Round {
            t_s: 4.0,
            interval_s: 1.0,
            loads: vec![0, 5481],
            imbalance_before: 2.0,
            imbalance_after: 2.0,
            moves: vec![],
            no_move: Some(why),
        };
        let l = round_line(&r);
        assert!(
            l.starts_with("rebalance 4.0s: no move: the busiest worker's load is one bucket (1: 5481/s)"),
            "{l}"
        );
        // Even, idle, too small a sample, or moved: no reason to give.
        assert_eq!(no_move(&owner, &[100; 4], &[true, true], 1.1, 1, &[]), None);
        assert_eq!(no_move(&owner, &[0; 4], &[true, true], 1.1, 1, &[]), None);
        assert_eq!(no_move(&owner, &[0, 50, 0, 0], &[true, true], 1.1, 100, &[]), None);
        let hot = [400, 10, 300, 10];
        assert_eq!(
            no_move(&owner, &hot, &[true, true], 1.1, 1, &plan(&owner, &hot, &[true, true], 1.1, 1)),
            None
        );
        // Three equal flows on two workers: each too heavy to move.
        let three = [6400, 0, 6401, 6400];
        let w = no_move(&owner, &three, &[true, true], 1.1, 1, &[]).unwrap();
        assert_eq!(w.buckets, vec![(2, 6401), (0, 6400)]);
        assert!(round_line(&Round { no_move: Some(w.clone()), ..r.clone() }).contains("too heavy to move"));
        // Printed once per reason, and every move.
        let mut last = None;
        let stuck = Round { no_move: Some(w.clone()), ..r.clone() };
        assert!(worth_printing(&stuck, &mut last) && !worth_printing(&stuck, &mut last));
        let moved = Round {
            moves: vec![BucketMove { bucket: 0, from: 0, to: 1, load: 1 }],
            no_move: None,
            ..r.clone()
        };
        assert!(worth_printing(&moved, &mut last) && worth_printing(&stuck, &mut last));
        assert!(!worth_printing(&Round { no_move: None, ..r.clone() }, &mut last), "quiet: even loads");
        // One worker alone.
        let w = no_move(&[0, 0], &[10, 500], &[true, false], 1.1, 1, &[]).unwrap();
        assert!(w.alone && w.worker == 0);
    }

    #[test]
    fn only_workers_with_a_socket_receive() {
        let owner = [0, 0, 0, 0];
        let m = plan(&owner, &[100, 100, 100, 100], &[true, false, true], 1.1, 1);
        assert!(!m.is_empty());
        assert!(m.iter().all(|x| x.to == 2), "{m:?}");
        // Nobody else to give to.
        assert!(plan(&owner, &[100; 4], &[true, false], 1.1, 1).is_empty());
    }

    #[test]
    fn round_line_names_every_move() {
        let r = Round {
            t_s: 3.0,
            interval_s: 1.0,
            loads: vec![900, 100],
            imbalance_before: 1.8,
            imbalance_after: 1.0,
            moves: vec![BucketMove { bucket: 3, from: 0, to: 1, load: 400 }],
            no_move: None,
        };
        let l = round_line(&r);
        assert!(l.contains("bucket 3 worker 0 -> 1 (400 in 1.0s)") && l.contains("1.80 -> 1.00"), "{l}");
    }
}
