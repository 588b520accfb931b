//! The diff: the settings a plan or a save file names, each with its
//! current value read through the [`Sysroot`], checked against the host
//! before anything is written.

use super::save::SaveFile;
use super::setting::{hex, printable, shown, table_text, valid_value, Kind, Setting, Target};
use super::write::{current_with, TuneError};
use crate::plan::{DevicePlan, Plan};
use crate::sysroot::{DeviceState, Sysroot};
use rsskit_linux::cpulist;
use rsskit_linux::ethtool::FLOW_TYPES;
use std::path::Path;

/// One setting for `target` with its current value; `new` is checked.
fn setting(
    root: &Sysroot,
    dev: Option<&DeviceState>,
    target: Target,
    new: String,
) -> Result<Setting, String> {
    valid_value(target.kind(), &new)
        .map_err(|e| format!("{}: the value to write is {e}", target.describe(None)))?;
    let irq_name = match (&target, dev) {
        (Target::IrqAffinity { irq, .. }, Some(d)) => {
            d.irqs.iter().find(|x| x.irq == *irq).map(|x| x.name.as_str())
        }
        _ => None,
    };
    let what = target.describe(irq_name);
    let old = current_with(root, dev, &target);
    Ok(Setting { target, what, old, new })
}

/// Checks that `target` is a setting `dev` has now: the queue or IRQ is the
/// device's (queues in sysfs, IRQs of its device or named for it).
fn check_on_device(t: &Target, dev: &DeviceState) -> Result<(), String> {
    let has_rx = |q: u32| dev.rx.iter().any(|x| x.queue == q as usize);
    let has_tx = |q: u32| dev.tx.iter().any(|x| x.queue == q as usize);
    match t {
        Target::RpsCpus { queue, .. } | Target::RpsFlowCnt { queue, .. } if !has_rx(*queue) => {
            Err(format!("{} has no RX queue {queue}", dev.name))
        }
        Target::XpsCpus { queue, .. } if !has_tx(*queue) => {
            Err(format!("{} has no TX queue {queue}", dev.name))
        }
        Target::IrqAffinity { irq, .. } if !dev.irqs.iter().any(|x| x.irq == *irq) => {
            Err(format!("IRQ {irq} is not one of {}'s IRQs", dev.name))
        }
        // napi:
        Target::NapiThreadCpus { napi_id, .. }
            if !dev.napi.threads.iter().any(|t| t.napi_id == Some(*napi_id)) =>
        {
            Err(format!("it has no thread napi/{}-{napi_id} now (threaded NAPI off?): plan again", dev.name))
        }
        _ => Ok(()),
    }
}

/// Every setting of `plan` with its current value, read from `root`. The
/// plan is a file too: every device, queue, IRQ and CPU it names must be
/// the host's (nothing is written otherwise).
pub fn settings(root: &Sysroot, plan: &Plan) -> Result<Vec<Setting>, TuneError> {
    let online = root.topology().online;
    let mut out = Vec::new();
    for d in &plan.devices {
        device_settings(root, d, &online, &mut out)?;
    }
    if let Some(n) = plan.rps_sock_flow_entries {
        let s = setting(root, None, Target::RpsSockFlowEntries, n.to_string())
            .map_err(|msg| TuneError::PlanMismatch { device: "host".into(), msg })?;
        out.push(s);
    }
    Ok(out)
}

/// The settings of one device of the plan, appended to `out` in write
/// order; the device must have the plan's queue counts and CPUs online.
fn device_settings(
    root: &Sysroot,
    d: &DevicePlan,
    online: &[usize],
    out: &mut Vec<Setting>,
) -> Result<(), TuneError> {
    let dev: DeviceState = root.device(&d.name)?;
    let mismatch = |msg: String| TuneError::PlanMismatch { device: d.name.clone(), msg };
    // nicres: a plan that changes the channel count: the count alone until
    // it is in place (the queues it plans do not exist before), then the
    // rest with the new queues' IRQs found by what they serve.
    let after;
    let d = match d.channels.as_ref().filter(|c| c.changes()) {
        Some(c) if dev.channels.ok().map(|x| x.combined_count) != Some(c.chosen) => {
            // Fewer queues: the table leaves the queues that go first (the
            // kernel refuses the count while the table names them).
            // A plan without a table (one queue left) gets the device's
            // table spread over the queues that stay.
            let now = dev.channels.ok().map_or(0, |x| x.combined_count);
            let len = dev.rss.ok().map_or(0, |r| r.indir.len());
            let spread = || (0..len as u32).map(|i| i % c.chosen.max(1)).collect::<Vec<u32>>();
            let table = d.table.clone().or_else(|| (len > 0).then(spread));
            if let Some(t) = table.filter(|_| c.chosen < now) {
                let t =
                    setting(root, Some(&dev), Target::RssTable { device: d.name.clone() }, table_text(&t));
                out.push(t.map_err(mismatch)?);
            }
            let t = Target::Channels { device: d.name.clone() };
            out.push(setting(root, Some(&dev), t, c.chosen.to_string()).map_err(mismatch)?);
            return Ok(());
        }
        Some(_) => {
            after = crate::nicres::after_channels(d, &dev);
            &after
        }
        None => d,
    };
    if dev.rx.len() != d.rx.len() || dev.tx.len() != d.tx.len() {
        return Err(mismatch(format!(
            "it has {} RX / {} TX queues now, the plan was made for {} / {}: plan again",
            dev.rx.len(),
            dev.tx.len(),
            d.rx.len(),
            d.tx.len()
        )));
    }
    let all_cpus = d
        .irqs
        .iter()
        .flat_map(|x| x.cpus.iter())
        .chain(d.rx.iter().flat_map(|q| q.rps_cpus.iter()))
        .chain(d.tx.iter().flat_map(|q| q.xps_cpus.iter().flatten()))
        .chain(d.napi_threads.iter().flat_map(|t| t.cpus.iter()));
    if let Some(c) = all_cpus.into_iter().find(|c| !online.contains(c)) {
        return Err(mismatch(format!(
            "CPU {c}, which is not online (online: {}): plan again",
            cpulist::format(online)
        )));
    }
    let mut add = |target: Target, new: String| -> Result<(), TuneError> {
        check_on_device(&target, &dev).map_err(mismatch)?;
        out.push(setting(root, Some(&dev), target, new).map_err(mismatch)?);
        Ok(())
    };
    let device = || d.name.clone();
    // nicres: rings and coalescing first: a ring resize restarts the
    // queues on many drivers (igb, ixgbe, i40e: down and up), which must
    // not come after the IRQ affinity and RPS written below.
    if let Some(n) = d.rx_ring {
        add(Target::RxRing { device: device() }, n.to_string())?;
    }
    if let Some(n) = d.tx_ring {
        add(Target::TxRing { device: device() }, n.to_string())?;
    }
    if let Some(c) = &d.coalesce {
        add(Target::Coalesce { device: device() }, c.clone())?;
    }
    // Threading off first: from then on each queue is polled in its IRQ's
    // softirq, on the CPU the IRQ affinity below sets.
    if let Some(t) = d.napi_threaded {
        add(Target::NapiThreaded { device: device() }, t.to_string())?;
    }
    // Hashed fields before key and table: virtio_net (6.1) sends its
    // hash types to the device only with the RSS command of ETHTOOL_SRSSH,
    // so fields written after the table would read back while the device
    // still hashes the old ones (seen in the QEMU lab, tests/lab.rs).
    for h in &d.hash_fields {
        let flow = FLOW_TYPES
            .iter()
            .find(|f| f.name == h.flow)
            .ok_or_else(|| mismatch(format!("an unknown flow type for hashed fields ({:?})", h.flow)))?
            .name;
        add(Target::HashFields { device: device(), flow }, h.fields.join(","))?;
    }
    if let Some(t) = &d.table {
        add(Target::RssTable { device: device() }, table_text(t))?;
    }
    if let Some(k) = &d.key {
        add(Target::RssKey { device: device() }, k.clone())?;
    }
    let queue = |q: usize| u32::try_from(q).map_err(|_| mismatch(format!("queue {q}, which it has not")));
    for x in &d.irqs {
        add(Target::IrqAffinity { device: device(), irq: x.irq }, cpulist::format(&x.cpus))?;
    }
    for q in &d.rx {
        add(
            Target::RpsCpus { device: device(), queue: queue(q.queue)? },
            rsskit_linux::netdev::format_hex_mask(&q.rps_cpus),
        )?;
        if let Some(n) = q.rps_flow_cnt {
            add(Target::RpsFlowCnt { device: device(), queue: queue(q.queue)? }, n.to_string())?;
        }
    }
    for q in &d.tx {
        if let Some(x) = &q.xps_cpus {
            add(
                Target::XpsCpus { device: device(), queue: queue(q.queue)? },
                rsskit_linux::netdev::format_hex_mask(x),
            )?;
        }
    }
    // napi: the NAPI threads after their IRQs (same CPUs), then the
    // per-device NAPI settings.
    for t in &d.napi_threads {
        add(Target::NapiThreadCpus { device: device(), napi_id: t.napi_id }, cpulist::format(&t.cpus))?;
    }
    if let Some(v) = d.napi_defer_hard_irqs {
        add(Target::NapiDeferHardIrqs { device: device() }, v.to_string())?;
    }
    if let Some(v) = d.gro_flush_timeout {
        add(Target::GroFlushTimeout { device: device() }, v.to_string())?;
    }
    // symplan: the input transform last: it changes no queue or CPU, only
    // which fields feed the hash.
    if let Some(x) = &d.input_xfrm {
        add(Target::InputXfrm { device: device() }, x.clone())?;
    }
    Ok(())
}

/// `changes` (settings that differ, in write order) with, for each device
/// whose hashed fields change while neither its key nor its table is
/// written after them, its current key (else its table) written again right
/// after the last hashed-fields setting. virtio_net (6.1) passes hashed
/// fields to the device only inside the RSS command that `ETHTOOL_SRSSH`
/// sends: an `ETHTOOL_SRXFH` alone reads back through ethtool while the
/// device goes on hashing the old fields (measured in the QEMU lab,
/// tests/lab.rs). The key is preferred: writing it again needs no ring
/// check and does not mark the table as the user's (which would pin the
/// channel count). The added setting has `old == new` (nothing to save);
/// a device that reports neither key nor table gets none.
pub fn push_hash_fields(root: &Sysroot, changes: Vec<Setting>) -> Result<Vec<Setting>, TuneError> {
    let mut out = changes;
    let mut devices: Vec<String> = Vec::new();
    for s in &out {
        if s.kind() == Kind::HashFields && !devices.iter().any(|d| d == s.device()) {
            devices.push(s.device().to_string());
        }
    }
    for dev in devices {
        let on_dev = |s: &Setting| s.device() == dev;
        let last_fields = out.iter().rposition(|s| on_dev(s) && s.kind() == Kind::HashFields);
        let Some(at) = last_fields else { continue };
        let rss_after =
            out[at + 1..].iter().any(|s| on_dev(s) && matches!(s.kind(), Kind::RssKey | Kind::RssTable));
        if rss_after {
            continue;
        }
        // The value the device has by then: one written earlier in this
        // batch (a save file may list the key before the fields), else its
        // current one.
        let earlier = |kind: Kind| {
            out[..at].iter().rev().find(|s| on_dev(s) && s.kind() == kind).map(|s| s.new.clone())
        };
        let rss = root.rss(&dev)?.ok().cloned();
        let key =
            earlier(Kind::RssKey).or_else(|| rss.as_ref().filter(|r| !r.key.is_empty()).map(|r| hex(&r.key)));
        let table = earlier(Kind::RssTable)
            .or_else(|| rss.as_ref().filter(|r| !r.indir.is_empty()).map(|r| table_text(&r.indir)));
        let (target, value, what) = match (key, table) {
            (Some(k), _) => (Target::RssKey { device: dev.clone() }, k, "RSS key"),
            (None, Some(t)) => (Target::RssTable { device: dev.clone() }, t, "RSS indirection table"),
            (None, None) => continue,
        };
        let again = Setting {
            target,
            what: format!("{what} written again (the device takes hashed fields with it)"),
            old: Some(value.clone()),
            new: value,
        };
        out.insert(at + 1, again);
    }
    Ok(out)
}

/// The settings to restore from `save`, with their current values: every
/// entry is checked against the host first (the device exists, the queue or
/// IRQ is the device's). `Err` names every entry that fails; then nothing
/// may be written.
pub fn restore_settings(root: &Sysroot, path: &Path, save: &SaveFile) -> Result<Vec<Setting>, TuneError> {
    let mut devices: Vec<DeviceState> = Vec::new();
    let mut problems = Vec::new();
    let mut out = Vec::new();
    for (i, s) in save.settings.iter().enumerate() {
        let name = format!("entry {} ({} {})", i + 1, s.target.name(), s.target.describe(None));
        let dev = if s.target == Target::RpsSockFlowEntries {
            None
        } else {
            let d = s.target.device();
            if !devices.iter().any(|x| x.name == d) {
                match root.device(d) {
                    Ok(x) => devices.push(x),
                    Err(e) => {
                        problems.push(format!("{name} of {}: {}", shown(d), printable(&e.to_string())));
                        continue;
                    }
                }
            }
            devices.iter().find(|x| x.name == d)
        };
        if let Some(d) = dev {
            if let Err(why) = check_on_device(&s.target, d) {
                problems.push(format!("{name}: {}", printable(&why)));
                continue;
            }
        }
        match setting(root, dev, s.target.clone(), s.value.clone()) {
            Ok(x) => out.push(x),
            Err(why) => problems.push(format!("{name}: {}", printable(&why))),
        }
    }
    if problems.is_empty() {
        Ok(out)
    } else {
        Err(TuneError::BadSave { path: path.to_path_buf(), problems })
    }
}
