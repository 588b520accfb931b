//! Rate scheduling and the run's phases (send, drain, finish), no I/O:
//! times are nanoseconds since the run started, passed in.

use std::time::Duration;

/// Most datagrams one pass of the loop sends (unpaced, or paced and behind):
/// after a stall the pacer catches up in passes of this size rather than in
/// one burst.
pub const CATCH_UP: u64 = 256;
/// Datagrams one pass sends without `--rate`.
pub const UNPACED_BATCH: u64 = 64;
/// Longest idle wait while sending (a stop request is seen this fast).
const MAX_WAIT_NS: f64 = 5e6;

/// When one sender thread's datagrams are due.
#[derive(Debug, Clone, Copy)]
pub struct Pacer {
    /// Datagrams per second for this thread; `None`: as fast as possible.
    rate: Option<f64>,
    /// Send only once this many are due (round-robin over the streams).
    burst: u32,
    /// Closed loop (`--window`): unpaced threads still wait for echoes.
    windowed: bool,
}

impl Pacer {
    /// A pacer for `rate` datagrams per second (`None`: unpaced), `burst` at a time; `windowed`: closed loop.
    pub fn new(rate: Option<f64>, burst: u32, windowed: bool) -> Self {
        Pacer { rate, burst: burst.max(1), windowed }
    }

    /// The thread's share of a total `rate` when it runs `streams` of `total`.
    pub fn share(rate: Option<u64>, streams: usize, total: usize) -> Option<f64> {
        rate.map(|r| r as f64 * streams as f64 / total.max(1) as f64)
    }

    /// How many to send now, `sent` having been sent in `elapsed_ns`.
    pub fn due(&self, elapsed_ns: u64, sent: u64) -> u64 {
        match self.rate {
            Some(r) => {
                let d = ((r * elapsed_ns as f64 / 1e9) as u64).saturating_sub(sent);
                // Whole bursts only: what is due beyond the last whole burst
                // waits for the next one. A late pass that sent it all would
                // send a burst and a stray remainder, and the remainder
                // would go to the next stream as a short burst (2 streams,
                // --burst 16 --gso 16 once split 18,624 / 1,371).
                let b = u64::from(self.burst);
                (d - d % b).min((CATCH_UP / b).max(1) * b)
            }
            None => UNPACED_BATCH,
        }
    }

    /// How long to wait (for an echo or the next send slot) when a pass did
    /// nothing; zero: do not wait.
    pub fn idle_wait(&self, elapsed_ns: u64, sent: u64, draining: bool) -> Duration {
        let ns = match (self.rate, draining) {
            (_, true) => MAX_WAIT_NS,
            (Some(r), false) => {
                let next_at_ns = (sent + u64::from(self.burst)) as f64 * 1e9 / r;
                (next_at_ns - elapsed_ns as f64).clamp(0.0, MAX_WAIT_NS)
            }
            (None, false) if self.windowed => 1e6,
            (None, false) => 0.0,
        };
        Duration::from_nanos(ns as u64)
    }
}

/// Where a sender thread is in its run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Sending datagrams.
    Sending,
    /// Waiting for the last echoes.
    Draining,
    /// Done: sending and draining are over.
    Finished,
}

/// Sending until `duration` (or every stream is done, or a stop), then
/// draining until every echo is in, `drain` is over, or a quarter of it
/// after a stop request.
#[derive(Debug, Clone, Copy)]
pub struct Schedule {
    duration_ns: Option<u64>,
    drain_ns: u64,
    draining_since: Option<u64>,
}

impl Schedule {
    /// Send for `duration` (`None`: until every stream is done), then drain for up to `drain`.
    pub fn new(duration: Option<Duration>, drain: Duration) -> Self {
        let ns = |d: Duration| d.as_nanos().min(u128::from(u64::MAX)) as u64;
        Schedule { duration_ns: duration.map(ns), drain_ns: ns(drain), draining_since: None }
    }

    /// The phase at `elapsed_ns`. `stop`: stop requested; `all_done`: no
    /// stream has anything left to send; `all_in`: every echo is in (only
    /// asked while draining).
    pub fn step(
        &mut self,
        elapsed_ns: u64,
        stop: bool,
        all_done: bool,
        all_in: impl FnOnce() -> bool,
    ) -> Phase {
        if self.draining_since.is_none()
            && (stop || all_done || self.duration_ns.is_some_and(|d| elapsed_ns >= d))
        {
            self.draining_since = Some(elapsed_ns);
        }
        let Some(since) = self.draining_since else { return Phase::Sending };
        let drained = elapsed_ns - since;
        if drained >= self.drain_ns || (stop && drained >= self.drain_ns / 4) || all_in() {
            Phase::Finished
        } else {
            Phase::Draining
        }
    }

    /// Whether sending is over and the last echoes are awaited.
    pub fn draining(&self) -> bool {
        self.draining_since.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    /// Runs a paced sender over `[0, until_ns)` in steps of `step_ns`,
    /// waiting as told when nothing was due; returns (time, count) of sends.
    fn simulate(p: &Pacer, until_ns: u64, step_ns: u64) -> Vec<(u64, u64)> {
        let (mut t, mut sent, mut out) = (0, 0, vec![]);
        while t < until_ns {
            let n = p.due(t, sent);
            if n > 0 {
                sent += n;
                out.push((t, n));
                t += step_ns;
            } else {
                t += p.idle_wait(t, sent, false).as_nanos().max(u128::from(step_ns)) as u64;
            }
        }
        out
    }

    #[test]
    fn paced_sends_happen_at_their_time() {
        // 1000/s, burst 1: one send per ms, each at (or just after) its slot.
        let p = Pacer::new(Some(1000.0), 1, false);
        assert_eq!(p.due(0, 0), 0);
        assert_eq!(p.idle_wait(0, 0, false), Duration::from_millis(1));
        assert_eq!(p.due(MS - 1, 0), 0);
        assert_eq!(p.due(MS, 0), 1);
        assert_eq!(p.idle_wait(MS, 1, false), Duration::from_millis(1));
        let sends = simulate(&p, 100 * MS, 1000);
        assert_eq!(sends.len(), 99);
        for (i, (t, n)) in sends.iter().enumerate() {
            assert_eq!(*n, 1);
            let slot = (i as u64 + 1) * MS;
            assert!(*t >= slot && *t < slot + 2000, "send {i} at {t}, slot {slot}");
        }
        // Total over a second: the rate.
        assert_eq!(simulate(&p, 1000 * MS + 1, 1000).iter().map(|s| s.1).sum::<u64>(), 1000);
    }

    #[test]
    fn bursts_wait_for_a_whole_burst() {
        let p = Pacer::new(Some(1000.0), 8, false);
        assert_eq!(p.due(7 * MS, 0), 0);
        assert_eq!(p.idle_wait(7 * MS, 0, false), Duration::from_millis(1));
        assert_eq!(p.due(8 * MS, 0), 8);
        let sends = simulate(&p, 80 * MS + 1, 1000);
        assert_eq!(sends.len(), 10);
        assert!(sends.iter().all(|s| s.1 == 8));
        // A late pass sends whole bursts; the rest waits for its burst.
        assert_eq!(p.due(13 * MS, 0), 8);
        assert_eq!(p.due(13 * MS, 8), 0);
        assert_eq!(p.due(17 * MS, 8), 8);
        assert_eq!(p.due(30 * MS, 0), 24);
        // Behind by more than CATCH_UP: whole bursts within it.
        assert_eq!(Pacer::new(Some(100_000.0), 100, false).due(10 * MS, 0), 200);
    }

    #[test]
    fn a_stall_is_caught_up_in_bounded_passes() {
        let p = Pacer::new(Some(100_000.0), 1, false);
        // 10 ms stalled: 1000 due, sent at most CATCH_UP a pass.
        assert_eq!(p.due(10 * MS, 0), CATCH_UP);
        assert_eq!(p.due(10 * MS, CATCH_UP), CATCH_UP);
        assert_eq!(p.due(10 * MS, 900), 100);
        assert_eq!(p.due(10 * MS, 1000), 0);
        assert_eq!(p.idle_wait(10 * MS, 1000, false), Duration::from_nanos(10_000));
        // A burst larger than the catch-up bound is sent whole.
        assert_eq!(Pacer::new(Some(100_000.0), 1000, false).due(20 * MS, 0), 1000);
        // Long behind: waits are zero, never negative.
        assert_eq!(p.idle_wait(10 * MS, 0, false), Duration::ZERO);
    }

    #[test]
    fn unpaced_and_draining() {
        let p = Pacer::new(None, 1, false);
        assert_eq!(p.due(0, 0), UNPACED_BATCH);
        assert_eq!(p.due(123 * MS, 1 << 40), UNPACED_BATCH);
        assert_eq!(p.idle_wait(0, 0, false), Duration::ZERO);
        assert_eq!(Pacer::new(None, 1, true).idle_wait(0, 0, false), Duration::from_millis(1));
        assert_eq!(p.idle_wait(0, 0, true), Duration::from_millis(5));
        assert_eq!(
            Pacer::new(Some(1.0), 1, false).idle_wait(0, 0, false),
            Duration::from_millis(5),
            "capped"
        );
        assert_eq!(Pacer::share(Some(1000), 1, 4), Some(250.0));
        assert_eq!(Pacer::share(None, 1, 4), None);
    }

    #[test]
    fn phases() {
        let mut s = Schedule::new(Some(Duration::from_millis(100)), Duration::from_millis(40));
        assert_eq!(s.step(99 * MS, false, false, || panic!("not asked while sending")), Phase::Sending);
        assert_eq!(s.step(100 * MS, false, false, || false), Phase::Draining);
        assert!(s.draining());
        assert_eq!(s.step(139 * MS, false, false, || false), Phase::Draining);
        assert_eq!(s.step(140 * MS, false, false, || false), Phase::Finished, "drain over");
        let mut s = Schedule::new(Some(Duration::from_millis(100)), Duration::from_millis(40));
        assert_eq!(s.step(10 * MS, false, false, || true), Phase::Sending);
        assert_eq!(s.step(100 * MS, false, false, || true), Phase::Finished, "all in");
        // Every stream done (count reached / refused): drain at once.
        let mut s = Schedule::new(None, Duration::from_millis(40));
        assert_eq!(s.step(5 * MS, false, true, || false), Phase::Draining);
        // A stop request: a quarter of the drain.
        let mut s = Schedule::new(None, Duration::from_millis(40));
        assert_eq!(s.step(5 * MS, true, false, || false), Phase::Draining);
        assert_eq!(s.step(14 * MS, true, false, || false), Phase::Draining);
        assert_eq!(s.step(15 * MS, true, false, || false), Phase::Finished);
    }
}
