//! The one bucket-move rule: which items (a steered group's buckets, a
//! NIC table's entries) move from the busiest owner (worker, RX queue) to
//! the least busy one so the owners' loads even out. No I/O: loads in,
//! moves out; the runtime (`--rebalance`) and the host (`rsskit
//! rebalance`) measure and apply.
//!
//! One loop, two ways to pick the item, because the two callers know
//! different things: the runtime measures every bucket's own load, so it
//! can aim at the closest pair ([`MoveRule::ClosestPair`]); the host only
//! knows a queue's rate and spreads it evenly over the queue's entries, so
//! it moves the largest share that still fits ([`MoveRule::LargestFit`]).

use alloc::vec::Vec;

/// How the item to move is picked among the busiest owner's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MoveRule {
    /// Loads measured per item: the item whose move leaves the pair closest
    /// (`|gap - 2h|` smallest, then the lowest item), among those that
    /// lower the busiest load by a tenth of the gap at least
    /// (`min(h, gap - h)`): an item about as heavy as the gap would only
    /// swap the two owners' roles and bounce back next round. The busiest
    /// owner of equal ones is the lowest; at most one round per item.
    ClosestPair,
    /// Loads estimated per item (a queue's rate spread over its entries):
    /// the largest share (the last of equal ones) that leaves the receiver
    /// below the giver's old load. The busiest owner of equal ones is the
    /// last; a moved item may move on later (at most four rounds per item).
    LargestFit,
}

/// One item moved.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Move {
    /// The item (bucket, table entry).
    pub item: usize,
    /// Its owner before.
    pub from: u32,
    /// Its owner now.
    pub to: u32,
    /// The item's load.
    pub load: f64,
}

/// Busiest owner's load over the mean (1.0: even; 0.0 without load).
pub fn imbalance(loads: &[f64]) -> f64 {
    if loads.is_empty() {
        return 0.0;
    }
    let mean = loads.iter().sum::<f64>() / loads.len() as f64;
    if mean <= 0.0 {
        return 0.0;
    }
    loads.iter().copied().fold(0.0, f64::max) / mean
}

/// Moves items while the imbalance of the eligible owners' loads is above
/// `target`. `owner[i]` owns item `i` (updated in place), `item_load[i]`
/// is its load, `load[w]` owner `w`'s load (updated: the estimate after
/// the moves; it may exceed the sum of its items, e.g. a queue's traffic
/// that no table entry carries), and only owners with `eligible[w]` give,
/// receive and count. Fewer than two eligible owners: nothing moves.
pub fn plan_moves(
    owner: &mut [u32],
    item_load: &[f64],
    load: &mut [f64],
    eligible: &[bool],
    target: f64,
    rule: MoveRule,
) -> Vec<Move> {
    let live: Vec<usize> = (0..load.len()).filter(|&w| eligible.get(w).copied().unwrap_or(false)).collect();
    let mut moves = Vec::new();
    if live.len() < 2 {
        return moves;
    }
    let items = owner.len().min(item_load.len());
    let rounds = match rule {
        MoveRule::ClosestPair => items,
        MoveRule::LargestFit => items * 4,
    };
    for _ in 0..rounds {
        let loads: Vec<f64> = live.iter().map(|&w| load[w]).collect();
        if imbalance(&loads) <= target {
            break;
        }
        let (mut max, mut min) = (live[0], live[0]);
        for &w in &live[1..] {
            let busier = match rule {
                MoveRule::ClosestPair => load[w] > load[max],
                MoveRule::LargestFit => load[w] >= load[max],
            };
            if busier {
                max = w;
            }
            if load[w] < load[min] {
                min = w;
            }
        }
        let gap = load[max] - load[min];
        let mine = |i: &usize| owner[*i] as usize == max && item_load[*i] > 0.0;
        let best = match rule {
            MoveRule::ClosestPair => {
                let dist = |i: usize| {
                    let d = gap - 2.0 * item_load[i];
                    if d < 0.0 {
                        -d
                    } else {
                        d
                    }
                };
                (0..items)
                    .filter(mine)
                    .filter(|&i| {
                        let h = item_load[i];
                        h < gap && h.min(gap - h) * 10.0 >= gap
                    })
                    .min_by(|&a, &b| dist(a).total_cmp(&dist(b)))
            }
            MoveRule::LargestFit => (0..items)
                .filter(mine)
                .filter(|&i| load[min] + item_load[i] < load[max])
                .max_by(|&a, &b| item_load[a].total_cmp(&item_load[b])),
        };
        let Some(i) = best else { break };
        let h = item_load[i];
        load[max] -= h;
        load[min] += h;
        owner[i] = min as u32;
        moves.push(Move { item: i, from: max as u32, to: min as u32, load: h });
    }
    moves
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn closest_pair_evens_measured_buckets() {
        // Worker 0 owns buckets 0-3 (400, 300, 200, 100), worker 1 bucket 4 (0).
        let mut owner = [0, 0, 0, 0, 1];
        let item = [400.0, 300.0, 200.0, 100.0, 0.0];
        let mut load = [1000.0, 0.0];
        let m = plan_moves(&mut owner, &item, &mut load, &[true, true], 1.1, MoveRule::ClosestPair);
        // Gap 1000: 400 leaves 200 between them (|1000 - 800|), then gap 200: 100 evens it.
        assert_eq!(m.iter().map(|m| m.item).collect::<Vec<_>>(), [0, 3]);
        assert_eq!(load, [500.0, 500.0]);
        assert_eq!(owner, [1, 0, 0, 1, 1]);
        // An elephant never moves: it would only swap the roles.
        let mut load = [1000.0, 0.0];
        let mut owner = [0, 1];
        assert!(plan_moves(&mut owner, &[1000.0, 0.0], &mut load, &[true, true], 1.1, MoveRule::ClosestPair)
            .is_empty());
    }

    #[test]
    fn largest_fit_moves_shares_and_only_to_eligible_owners() {
        // Queue 0: 900/s over 4 entries, queue 1: 100/s.
        let mut owner: Vec<u32> = (0..8).map(|i| i % 2).collect();
        let share: Vec<f64> = owner.iter().map(|&q| if q == 0 { 225.0 } else { 25.0 }).collect();
        let mut load = [900.0, 100.0];
        let m = plan_moves(&mut owner, &share, &mut load, &[true, true], 1.1, MoveRule::LargestFit);
        assert_eq!(m.len(), 2, "{m:?}");
        assert_eq!(load, [450.0, 550.0]);
        // The last of equal shares moves first.
        assert_eq!((m[0].item, m[0].from, m[0].to), (6, 0, 1));
        // Owner 1 cannot receive: with one eligible owner nothing moves.
        let mut load = [900.0, 100.0];
        assert!(
            plan_moves(&mut owner, &share, &mut load, &[true, false], 1.1, MoveRule::LargestFit).is_empty()
        );
    }

    #[test]
    fn imbalance_is_max_over_mean() {
        assert_eq!(imbalance(&[]), 0.0);
        assert_eq!(imbalance(&[0.0, 0.0]), 0.0);
        assert_eq!(imbalance(&[300.0, 100.0]), 1.5);
    }
}
