//! `rsskit plan --rebalance [S]` (and `apply` of it): FreeBSD's planned
//! bucket rebalancing. Measures each device's RX queue load for S seconds
//! and replaces the plan's table by the device's current table with entries
//! moved from the busiest queues to the least busy; the imbalance before and
//! after goes into the device's notes.

use anyhow::{bail, Context, Result};
use rsskit_host::nic_rebalance::{self, Snapshot};
use rsskit_host::plan::Plan;
use rsskit_host::sysroot::{DeviceState, Sysroot};

/// Rebalance when the busiest queue carries more than this over the mean.
const TARGET: f64 = 1.10;

pub fn rebalance_plan(root: &Sysroot, devs: &[DeviceState], plan: &mut Plan, secs: f64) -> Result<()> {
    let interval = crate::cmd::common::seconds("--rebalance", secs)?;
    if secs > 3600.0 {
        bail!("--rebalance: measure for at most 3600 seconds, not {secs}");
    }
    let a = Snapshot::take(&root.roots).context("--rebalance: reading the counters")?;
    eprintln!("rsskit: rebalance: measuring RX queue load for {secs} s");
    std::thread::sleep(interval);
    let b = Snapshot::take(&root.roots).context("--rebalance: reading the counters")?;
    for d in plan.devices.iter_mut() {
        let Some(state) = devs.iter().find(|s| s.name == d.name) else { continue };
        let current = state.rss.ok().map(|r| r.indir.clone()).filter(|t| !t.is_empty());
        let (Some(current), true) = (current, d.hardware_rss) else {
            d.notes
                .push("rebalance: no hardware RSS table to rebalance (RPS spreads by its own hash)".into());
            continue;
        };
        let loads = nic_rebalance::queue_loads(state, &a, &b);
        let r = nic_rebalance::rebalance(&current, &loads.load, TARGET);
        let shown: Vec<String> = loads.load.iter().map(|l| format!("{l:.0}")).collect();
        let note = if loads.load.iter().all(|&l| l == 0.0) {
            format!("rebalance: no traffic in {secs} s: the current table is kept")
        } else if r.moved == 0 {
            format!(
                "rebalance: queue load ({}) {}: imbalance {:.2} (max/mean), no move helps or needed: the current table is kept",
                loads.measure,
                shown.join(" "),
                r.before
            )
        } else {
            format!(
                "rebalance: queue load ({}) {}: imbalance {:.2} -> {:.2} (estimated), {} of {} entries moved",
                loads.measure,
                shown.join(" "),
                r.before,
                r.after,
                r.moved,
                current.len()
            )
        };
        d.notes.push(note);
        d.table = Some(r.table);
        // The ringmap mismatch counts describe the ringmap's table, not this one.
        d.table_mismatches = None;
    }
    Ok(())
}
