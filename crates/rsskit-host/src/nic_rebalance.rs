//! FreeBSD's planned "bucket rebalancing" for a NIC: measure each RX
//! queue's load over an interval (`top`'s counters) and move indirection
//! table entries from the busiest queues to the least busy ones.
//!
//! The load of a queue is the packets processed per second on its IRQ's CPU
//! (`/proc/net/softnet_stat`) when every queue's IRQ has a CPU of its own,
//! else its interrupts per second (`/proc/interrupts`). A queue's load is
//! taken as spread evenly over its table entries; a moved entry carries its
//! share.

use crate::softnet::{self, Softnet, SoftnetError};
use crate::sysroot::DeviceState;
use rsskit_core::rebalance::{imbalance, plan_moves, MoveRule};
use rsskit_linux::netdev::{self, IrqLine, Roots};
use serde::Serialize;
use std::path::PathBuf;
use std::time::Instant;

/// One read of the counters rebalancing needs.
#[derive(Debug, Clone)]
pub struct Snapshot {
    at: Instant,
    irqs: Vec<IrqLine>,
    softnet: Vec<(usize, Softnet)>,
}

impl Snapshot {
    /// Reads softnet stats and interrupt counts under `roots`, timestamped now.
    pub fn take(roots: &Roots) -> Result<Snapshot, SoftnetError> {
        let at = Instant::now();
        let path: PathBuf = roots.proc.join("net/softnet_stat");
        let text = std::fs::read_to_string(&path)
            .map_err(|source| SoftnetError::Read { path: path.clone(), source })?;
        let softnet = softnet::parse_softnet(&text).map_err(|msg| SoftnetError::Parse { path, msg })?;
        Ok(Snapshot { at, irqs: netdev::interrupts(roots), softnet })
    }
}

/// Per-queue load of one device between two snapshots.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct QueueLoads {
    /// `packets/s` (softnet processed on each queue's own CPU) or `irqs/s`.
    pub measure: &'static str,
    /// Indexed by RX queue.
    pub load: Vec<f64>,
}

/// The load of each of `dev`'s RX queues between `a` and `b`.
pub fn queue_loads(dev: &DeviceState, a: &Snapshot, b: &Snapshot) -> QueueLoads {
    let secs = b.at.saturating_duration_since(a.at).as_secs_f64().max(1e-9);
    let n = dev.rx.len();
    let irqs: Vec<Option<&netdev::IfaceIrq>> = (0..n).map(|q| netdev::rx_irq(&dev.irqs, q)).collect();
    let cpu_of = |q: usize| {
        irqs[q].and_then(|i| i.effective_cpus.clone().filter(|c| c.len() == 1).or_else(|| i.cpus.clone()))
    };
    let cpus: Vec<Option<usize>> = (0..n).map(|q| cpu_of(q).filter(|c| c.len() == 1).map(|c| c[0])).collect();
    let mut distinct: Vec<usize> = cpus.iter().flatten().copied().collect();
    distinct.sort_unstable();
    distinct.dedup();
    if n > 0 && cpus.iter().all(Option::is_some) && distinct.len() == n {
        let processed = |s: &Snapshot, cpu: usize| {
            s.softnet.iter().find(|(c, _)| *c == cpu).map_or(0, |(_, x)| x.processed)
        };
        let load = cpus
            .iter()
            .map(|c| {
                let c = c.expect("checked");
                processed(b, c).saturating_sub(processed(a, c)) as f64 / secs
            })
            .collect();
        return QueueLoads { measure: "packets/s", load };
    }
    let count = |s: &Snapshot, irq: u32| {
        s.irqs.iter().find(|l| l.irq == irq).map_or(0, |l| l.counts.iter().sum::<u64>())
    };
    let load = irqs
        .iter()
        .map(|i| i.map_or(0.0, |i| count(b, i.irq).saturating_sub(count(a, i.irq)) as f64 / secs))
        .collect();
    QueueLoads { measure: "irqs/s", load }
}

/// The outcome of [`rebalance`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Rebalanced {
    /// The indirection table after the moves (queue per entry).
    pub table: Vec<u32>,
    /// Entries moved to another queue.
    pub moved: usize,
    /// Max over mean of the queues' loads, before and after (estimated).
    pub before: f64,
    /// Max over mean of the queues' loads after the moves (estimated).
    pub after: f64,
    /// Estimated load of each queue after the moves, indexed by queue.
    pub loads_after: Vec<f64>,
}

/// Moves entries of `table` from the busiest queue to the least busy one
/// while that lowers the busiest queue's load and the imbalance (max/mean)
/// is above `target`: core's one move rule ([`MoveRule::LargestFit`]: an
/// entry's load is only its queue's rate spread over the queue's entries).
/// No load, or a balanced one: the table unchanged.
pub fn rebalance(table: &[u32], queue_load: &[f64], target: f64) -> Rebalanced {
    let nq = queue_load.len();
    let mut t = table.to_vec();
    let count = |q: usize, t: &[u32]| t.iter().filter(|&&x| x as usize == q).count();
    // Each entry's share of its queue's load; a moved entry keeps its share
    // (it may move on later).
    let share: Vec<f64> = t
        .iter()
        .map(|&q| {
            let q = q as usize;
            if q < nq {
                queue_load[q] / count(q, table) as f64
            } else {
                0.0
            }
        })
        .collect();
    let mut load = queue_load.to_vec();
    let before = imbalance(&load);
    plan_moves(&mut t, &share, &mut load, &vec![true; nq], target, MoveRule::LargestFit);
    let moved_n = t.iter().zip(table).filter(|(a, b)| a != b).count();
    Rebalanced { before, after: imbalance(&load), table: t, moved: moved_n, loads_after: load }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busiest_entries_move_to_the_idle_queue() {
        let table: Vec<u32> = (0..8).map(|i| i % 2).collect();
        // Queue 0 carries 900/s over 4 entries, queue 1 100/s.
        let r = rebalance(&table, &[900.0, 100.0], 1.1);
        assert!((r.before - 1.8).abs() < 1e-9);
        assert!(r.after < r.before, "{r:?}");
        assert!(r.moved >= 1 && r.moved <= 2, "{r:?}");
        // 2 entries of 225 moved: 450 / 550.
        assert!(r.after <= 1.1 + 1e-9, "{r:?}");
        assert_eq!(r.table.iter().filter(|&&q| q == 1).count(), 4 + r.moved);
    }

    #[test]
    fn no_traffic_or_balanced_means_no_change() {
        let table: Vec<u32> = (0..8).map(|i| i % 4).collect();
        let r = rebalance(&table, &[0.0; 4], 1.1);
        assert_eq!((r.moved, r.table.clone(), r.before), (0, table.clone(), 0.0));
        let r = rebalance(&table, &[100.0, 104.0, 98.0, 101.0], 1.1);
        assert_eq!((r.moved, r.table), (0, table));
    }

    #[test]
    fn one_elephant_entry_is_not_bounced() {
        // A single entry carries everything: moving it just moves the peak.
        let r = rebalance(&[0, 1], &[1000.0, 0.0], 1.1);
        assert_eq!(r.moved, 0, "{r:?}");
    }
}
