//! A compiled rule set, its per-worker counters, and the run-time swap.
//!
//! A [`RuleSet`] is immutable once built and shared by every worker through
//! an `Arc` (read-only data is replicated by the caches; nothing in it is
//! written on the packet path except the worker's own counter row). Each
//! worker owns one row of packet/byte counters, cache-line aligned, and
//! bumps it with a relaxed load + store (a plain `mov` on x86: no locked
//! instruction, no sharing); [`RuleSet::totals`] sums the rows.
//!
//! [`RuleSetHandle::swap`] installs a new rule set at run time: it bumps a
//! generation number that each worker compares once per batch
//! ([`crate::firewall::Worker::begin_batch`]); a worker that sees a new
//! generation takes the new `Arc` and keeps going. Workers are never stopped;
//! a batch in progress finishes with the rule set it started with. States
//! survive the swap and keep the number of the rule that created them.

use super::rules::{Action, Rule, Rules, DEFAULT_RULE_NUMBER};
use super::FwPacket;
use core::net::IpAddr;
use core::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

const TH_SYN: u8 = 0x02;
const TH_ACK: u8 = 0x10;

/// A rule's packet and byte counters, on a cache line of their own (the
/// rows are separate allocations that could otherwise share lines).
#[derive(Debug, Default)]
#[repr(align(64))]
pub struct Counter {
    /// Packets that matched.
    pub packets: AtomicU64,
    /// IP bytes of those packets.
    pub bytes: AtomicU64,
}

/// One worker's row of counters, on its own cache lines.
#[derive(Debug)]
#[repr(align(128))]
struct Row(Box<[Counter]>);

/// Summed counters of one rule.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct RuleTotals {
    /// Rule number.
    pub number: u16,
    /// Rule text.
    pub text: String,
    /// Packets over all workers.
    pub packets: u64,
    /// IP bytes over all workers.
    pub bytes: u64,
}

/// An immutable rule set with per-worker counters.
#[derive(Debug)]
pub struct RuleSet {
    /// The rules in order.
    pub rules: Vec<Rule>,
    /// What the default rule does: allow or deny.
    pub default_allow: bool,
    /// The addresses `me` stands for.
    pub me: Vec<IpAddr>,
    /// Bumped at every swap: workers notice and take the new set.
    pub generation: u64,
    /// Index where states are looked up if no `check-state` precedes it:
    /// the first rule that creates states (ipfw's implicit check-state).
    pub implicit_check: usize,
    rows: Box<[Row]>,
}

impl RuleSet {
    /// Compiles `rules` for `workers` workers.
    pub fn new(rules: Rules, me: Vec<IpAddr>, workers: usize, generation: u64) -> Self {
        let n = rules.rules.len() + 1;
        let rows = (0..workers.max(1)).map(|_| Row((0..n).map(|_| Counter::default()).collect())).collect();
        let mut implicit_check = usize::MAX;
        for (i, r) in rules.rules.iter().enumerate() {
            if r.action == Action::CheckState {
                break;
            }
            if r.creates_state() {
                implicit_check = i;
                break;
            }
        }
        RuleSet {
            rules: rules.rules,
            default_allow: rules.default_allow,
            me,
            generation,
            implicit_check,
            rows,
        }
    }

    /// Index of the default rule (= number of rules).
    pub fn default_index(&self) -> usize {
        self.rules.len()
    }

    /// Counts a packet of `bytes` on rule `idx` for `worker`.
    #[inline]
    pub fn count(&self, worker: usize, idx: usize, bytes: u32) {
        if let Some(c) = self.rows.get(worker).and_then(|r| r.0.get(idx)) {
            c.packets.store(c.packets.load(Relaxed) + 1, Relaxed);
            c.bytes.store(c.bytes.load(Relaxed) + u64::from(bytes), Relaxed);
        }
    }

    /// Index of the first rule numbered `number` (the default rule for 65535).
    #[inline]
    pub fn index_of(&self, number: u16) -> Option<usize> {
        if number == DEFAULT_RULE_NUMBER {
            return Some(self.rules.len());
        }
        let i = self.rules.partition_point(|r| r.number < number);
        (i < self.rules.len() && self.rules[i].number == number).then_some(i)
    }

    /// Index of the first rule numbered above `number`.
    #[inline]
    pub fn index_after(&self, number: u16) -> usize {
        self.rules.partition_point(|r| r.number <= number)
    }

    /// Counters summed over workers, rules in order, default rule last.
    pub fn totals(&self) -> Vec<RuleTotals> {
        let mut v: Vec<RuleTotals> = self
            .rules
            .iter()
            .map(|r| RuleTotals { number: r.number, text: r.text.clone(), packets: 0, bytes: 0 })
            .collect();
        v.push(RuleTotals {
            number: DEFAULT_RULE_NUMBER,
            text: if self.default_allow { "allow ip from any to any" } else { "deny ip from any to any" }
                .into(),
            packets: 0,
            bytes: 0,
        });
        for row in self.rows.iter() {
            for (t, c) in v.iter_mut().zip(row.0.iter()) {
                t.packets += c.packets.load(Relaxed);
                t.bytes += c.bytes.load(Relaxed);
            }
        }
        v
    }
}

impl Rule {
    /// Whether the rule's match part (everything but the action) matches `p`.
    #[inline]
    pub fn matches(&self, p: &FwPacket, me: &[IpAddr]) -> bool {
        if let Some(d) = self.dir {
            if d != p.dir {
                return false;
            }
        }
        if !self.proto.matches(p.proto) || !self.src.matches(p.src, me) || !self.dst.matches(p.dst, me) {
            return false;
        }
        if !self.src_ports.is_any() || !self.dst_ports.is_any() {
            let Some((sp, dp)) = p.ports else { return false };
            if !self.src_ports.is_any() && !self.src_ports.matches(sp) {
                return false;
            }
            if !self.dst_ports.is_any() && !self.dst_ports.matches(dp) {
                return false;
            }
        }
        if self.setup && !(p.proto == 6 && p.flags & TH_SYN != 0 && p.flags & TH_ACK == 0) {
            return false;
        }
        true
    }
}

/// The current rule set, swappable while workers run.
#[derive(Debug)]
pub struct RuleSetHandle {
    current: Mutex<Arc<RuleSet>>,
    generation: AtomicU64,
    workers: usize,
}

impl RuleSetHandle {
    /// A handle holding `rules` (generation 1).
    pub fn new(rules: Rules, me: Vec<IpAddr>, workers: usize) -> Self {
        RuleSetHandle {
            current: Mutex::new(Arc::new(RuleSet::new(rules, me, workers, 1))),
            generation: AtomicU64::new(1),
            workers,
        }
    }

    /// The generation of the current set (one relaxed load: checked per batch).
    #[inline]
    pub fn generation(&self) -> u64 {
        self.generation.load(core::sync::atomic::Ordering::Acquire)
    }

    /// The current set.
    pub fn load(&self) -> Arc<RuleSet> {
        self.current.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Replaces the rule set (keeping `me`); workers pick it up at their
    /// next batch. Returns the new generation.
    pub fn swap(&self, rules: Rules) -> u64 {
        let mut cur = self.current.lock().unwrap_or_else(|e| e.into_inner());
        let g = cur.generation + 1;
        *cur = Arc::new(RuleSet::new(rules, cur.me.clone(), self.workers, g));
        self.generation.store(g, core::sync::atomic::Ordering::Release);
        g
    }
}
