//! rsskit's host application: plan a host's NIC steering (queues,
//! indirection table, key, IRQ affinity, RPS/XPS), apply it with read-back
//! and restore, check it, rebalance it, and keep it true (persistence and
//! the agent's decisions). Every system call is `rsskit_linux`'s (the
//! platform layer); this crate has no `unsafe`.
//!
//! Why each module is here and not in `rsskit_linux`:
//! - [`sysroot`]: the host as tuning sees it (one device's whole RSS state,
//!   single-setting writes, irqbalance); composed from `ethtool` and
//!   `netdev` reads, and the seam where tests substitute a fixture tree.
//! - [`capture`]: `rsskit capture`'s directory format, taken from the host
//!   and read back read-only (`--from DIR`), bounded and checked as untrusted.
//! - `fixture` (feature `fixtures`): the fake ethtool driver of a fixture
//!   tree, for tests only, so the shipped binary cannot be pointed at one.
//! - [`landing`]: where a flow lands on this host, read through a
//!   [`sysroot::Sysroot`] so `hash --iface` and `nic:IF` work on fixtures;
//!   [`nic_rules`]: the NIC's flow rules and the RSS contexts they reach,
//!   looked at before the table (a rule not understood makes "unknown").
//! - [`plan`]: the tuning decision itself, no I/O (state in, plan out);
//!   [`placement`]: its CPU rules (isolated CPUs, SMT, NUMA, NICs sharing
//!   a node, any size), no I/O.
//! - [`tune`]: applies a plan (write, read back, save and restore files);
//!   `tune/setting` is its no-I/O part (the setting model and value
//!   checks, all `plan` uses), `save` the save-file format, `diff` what
//!   changes, `write` the host side.
//! - [`hostcheck`]: judges a device's state against the policy (a verdict,
//!   not a read); [`napi`]: threaded NAPI (the `threaded` file, the
//!   `napi/IF-N` threads and their CPUs) read and judged, for `check` and `plan`.
//! - [`nic_rebalance`]: moves NIC indirection-table entries by measured RX
//!   queue load (core's `rebalance` is the move rule; the runtime's
//!   rebalances live socket buckets).
//! - [`softnet`]: softirq, softnet_stat, IRQ and interface counters and their
//!   rates, read for `top`, rebalancing and the agent's metrics (`netstat
//!   -s`'s SNMP counters stay in `rsskit_linux::snmp`, which the runtime reads).
//! - [`persist`], [`irqbalance`], [`lock`]: keeping a plan across reboots
//!   (plan files, identity, units), irqbalance bans with exact undo, and the
//!   one-writer host lock: policy about files rsskit owns; [`trusted`]:
//!   how any of those files is read (root's, writable by no one else, never
//!   blocking on a FIFO).
//! - [`apply`]: the host-writing workflows (apply, restore, a persisted
//!   plan put back) with their order rules, each step reported as it
//!   happens; [`keep`]: persisted plans on the host now (present, checked,
//!   put back, removed, listed); [`agent`]: the agent's loop (link events, re-checks, reloads)
//!   around [`keeper`]. The CLI parses flags, calls them and prints.
//! - [`keeper`], [`metrics`]: the agent's decisions and its `/metrics` text,
//!   no I/O;
//!   [`metrics_server`]: the endpoint that serves that text, bounded per
//!   client so that none can stall it.
#![warn(unreachable_pub)]
#![warn(missing_docs)]
#![forbid(unsafe_code)]
pub mod agent;
pub mod apply;
pub mod capture;
#[cfg(any(test, feature = "fixtures"))]
mod fixture;
pub mod hostcheck;
pub mod irqbalance;
pub mod irqmap;
pub mod isolate;
pub mod keep;
pub mod keeper;
pub mod landing;
pub mod lock;
pub mod metrics;
pub mod metrics_server;
pub mod napi;
pub mod nic_rebalance;
pub mod nic_rules;
pub mod nicres;
pub mod persist;
pub mod placement;
pub mod plan;
pub mod softnet;
// symplan
pub mod symmetric;
pub mod sysroot;
pub mod trusted;
pub mod tune;

// What an embedder starts from: read the host, plan it, write the plan
// under the lock, keep it with the agent.
pub use agent::Agent;
pub use apply::{ApplyError, ApplyOptions, ApplyReport, HostFiles, HostRestarter, Locked, SaveTo, Step};
pub use plan::{Plan, PlanOptions};
pub use sysroot::Sysroot;

/// An error and its causes on one line, each said once: errors that print
/// their cause in their own message are not followed by it again.
pub fn causes(e: &(dyn std::error::Error + 'static)) -> String {
    causes_worded(e, &|c| c.to_string())
}

/// [`causes`], each message worded by `word` (the CLI names config fields
/// by their flags).
pub fn causes_worded(
    e: &(dyn std::error::Error + 'static),
    word: &dyn Fn(&(dyn std::error::Error + 'static)) -> String,
) -> String {
    let mut out = word(e);
    let mut next = e.source();
    while let Some(c) = next {
        let t = word(c);
        if !out.contains(&t) {
            out = format!("{out}: {t}");
        }
        next = c.source();
    }
    out
}
