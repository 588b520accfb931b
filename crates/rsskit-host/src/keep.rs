//! Persisted plans on the host now: which devices are present, one device
//! checked against its plan (channels first), a plan put back on its device
//! (`persist apply IF`), plans removed with everything rsskit installed for
//! them (`persist remove`), and the listing (`persist list`). The writes
//! go through a [`Locked`], like every host write.

use crate::apply::{ApplyError, Locked, Step};
use crate::irqbalance::{self, Restarter};
use crate::persist::{self, Identity, PersistError, Persisted};
use crate::plan::Plan;
use crate::sysroot::{DeviceState, Sysroot, SysrootError};
use crate::tune::{self, Outcome, Setting, Target};
use std::path::{Path, PathBuf};

/// What putting a persisted plan back did.
#[derive(Debug, Default)]
pub struct PutBackReport {
    /// Settings written.
    pub written: usize,
    /// Of which not applied.
    pub failed: usize,
    /// The channel count could not be set: nothing else was written.
    pub channels_refused: bool,
}

/// What `persist remove` took away.
#[derive(Debug, Default)]
pub struct RemoveReport {
    /// Plan files removed, with the identity each was for.
    pub removed: Vec<(PathBuf, Identity)>,
    /// Plan files that could not be read, left in place (all removed only).
    pub unreadable: Vec<PersistError>,
    /// Plans left: then the rule, the unit and the bans stay.
    pub left: usize,
    /// The udev rule and apply unit removed (unedited copies only).
    pub units_removed: Vec<PathBuf>,
    /// The irqbalance bans rsskit had added, taken away.
    pub unbanned: Option<irqbalance::Change>,
    // Service isolation (issue 33 item 3).
    /// The contexts and rules rsskit created for the removed plans: what became of each.
    pub isolation: Vec<String>,
}

/// `persist list`: every plan and where its device is now.
#[derive(Debug, Default)]
pub struct Listing {
    /// Each readable plan and the name of its device when present now.
    pub plans: Vec<(Persisted, Option<String>)>,
    /// Plan files refused, with why.
    pub refused: Vec<PersistError>,
    /// IRQs rsskit banned in irqbalance.
    pub banned: Vec<u32>,
    /// The udev rule and apply unit as rsskit installed them.
    pub installed: Vec<PathBuf>,
}

/// Every persisted plan under `root`, and what else rsskit keeps there.
pub fn list(sys: &Sysroot, root: &Path) -> Result<Listing, PersistError> {
    let (plans, refused) = persist::load_all(root);
    let here = present(sys, &plans).unwrap_or_default();
    let plans = plans
        .iter()
        .map(|p| {
            let now = here.iter().find(|x| x.plan.identity == p.identity).map(|x| x.name.clone());
            (p.clone(), now)
        })
        .collect();
    Ok(Listing {
        plans,
        refused,
        banned: irqbalance::read_record(root)?.added,
        installed: persist::installed_units(root),
    })
}

impl Locked<'_> {
    /// Puts the persisted plan `p` back on device `iface`: the channel
    /// count first (nothing else when it cannot be set), then the bans,
    /// then every setting that differs.
    pub fn put_back(
        &self,
        iface: &str,
        p: &Persisted,
        restarter: &mut dyn Restarter,
        observe: &mut dyn FnMut(Step),
    ) -> Result<PutBackReport, ApplyError> {
        let mut c = check_device(self.sys, iface, p)?;
        if let Some(ch) = &c.channels {
            let o = write_channels(self.sys, ch, p)?;
            observe(Step::ChannelsSet(ch, &o));
            if o != Outcome::Applied {
                return Ok(PutBackReport { channels_refused: true, ..PutBackReport::default() });
            }
            c = check_device(self.sys, iface, p)?;
        }
        if !c.offline.is_empty() {
            observe(Step::OfflineCpus(&c.offline));
        }
        let changes: Vec<Setting> = c.settings.iter().filter(|s| !s.unchanged()).cloned().collect();
        let changes = tune::push_hash_fields(self.sys, changes)?;
        observe(Step::ToPutBack { changes: changes.len(), total: c.settings.len() });
        self.ban_pinned(&c.plan, restarter, observe)?;
        // Service isolation: only what rsskit recorded as its own (isolate::keep).
        for e in crate::isolate::keep::keep(
            self.sys,
            &self.files.root,
            &p.identity,
            iface,
            &c.plan.devices[0],
            &mut |_| true,
        ) {
            observe(Step::IsolationKept(&e));
        }
        let mut failed = 0;
        for s in &changes {
            // As `Locked::write`: an error on one setting is its outcome, so
            // the settings written before it are still counted and named.
            let o =
                tune::write_one(self.sys, s).unwrap_or_else(|e| Outcome::Refused { reason: e.to_string() });
            failed += usize::from(o != Outcome::Applied);
            observe(Step::Wrote(s, &o));
        }
        Ok(PutBackReport { written: changes.len(), failed, channels_refused: false })
    }

    /// Removes the plan of `iface` (its identity now, or the name it was
    /// persisted under), or every plan; when none is left, also the rule
    /// and unit rsskit installed and exactly the irqbalance bans it added.
    pub fn remove_persisted(
        &self,
        iface: Option<&str>,
        restarter: &mut dyn Restarter,
    ) -> Result<RemoveReport, ApplyError> {
        let root = &self.files.root;
        let (plans, bad) = persist::load_all(root);
        let ids: Vec<Identity> = match iface {
            Some(name) => {
                let id = persist::identity(self.sys, name)
                    .filter(|id| persist::find(&plans, id).is_some())
                    .or_else(|| plans.iter().find(|p| p.plan.name == name).map(|p| p.identity.clone()))
                    .ok_or_else(|| ApplyError::NoPlanFor(name.to_string()))?;
                vec![id]
            }
            None => plans.iter().map(|p| p.identity.clone()).collect(),
        };
        let mut report = RemoveReport::default();
        for id in ids {
            let path = persist::remove(root, &id)?;
            report.isolation.extend(crate::isolate::keep::forget(self.sys, root, &id));
            report.removed.push((path, id));
        }
        if iface.is_none() {
            report.unreadable = bad;
        }
        report.left = persist::load_all(root).0.len();
        if report.left > 0 {
            return Ok(report);
        }
        report.units_removed = persist::remove_units(root)?;
        report.unbanned = irqbalance::unban(root, restarter).map_err(ApplyError::Unban)?;
        Ok(report)
    }
}

/// A persisted device present now.
pub struct Present<'a> {
    /// Its interface name now.
    pub name: String,
    /// Its plan.
    pub plan: &'a Persisted,
}

/// The persisted plans whose device is present now.
pub fn present<'a>(sys: &Sysroot, plans: &'a [Persisted]) -> Result<Vec<Present<'a>>, SysrootError> {
    let mut out = Vec::new();
    for name in sys.interfaces()? {
        if let Some(id) = persist::identity(sys, &name) {
            if let Some(p) = persist::find(plans, &id) {
                out.push(Present { name, plan: p });
            }
        }
    }
    Ok(out)
}

/// One device checked against its plan.
pub struct DeviceCheck {
    /// The plan as resolved for the device now.
    pub plan: Plan,
    /// Every setting with its current value; empty when the queues differ.
    pub settings: Vec<Setting>,
    /// The channel setting, when the queue count differs from the plan.
    pub channels: Option<Setting>,
    /// Planned CPUs that are offline now.
    pub offline: Vec<usize>,
}

/// The combined-channels pseudo-setting (written through ETHTOOL_SCHANNELS).
fn channels_setting(name: &str, dev: &DeviceState, p: &Persisted) -> Option<Setting> {
    if dev.rx.len() == p.channels.rx && dev.tx.len() == p.channels.tx {
        return None;
    }
    Some(Setting {
        target: Target::Channels { device: name.to_string() },
        what: "combined channels".into(),
        old: Some(format!("{} RX / {} TX queues", dev.rx.len(), dev.tx.len())),
        new: p.channels.rx.to_string(),
    })
}

/// Writes the channel count (only as combined channels, when the plan has as
/// many RX as TX queues), then reads the queues back.
pub fn write_channels(sys: &Sysroot, s: &Setting, p: &Persisted) -> Result<Outcome, SysrootError> {
    if p.channels.rx != p.channels.tx {
        return Ok(Outcome::Refused {
            reason: format!(
                "the plan has {} RX and {} TX queues: set them with ethtool -L",
                p.channels.rx, p.channels.tx
            ),
        });
    }
    let r = sys.set_combined_channels(s.device(), p.channels.rx as u32)?;
    if let Some(reason) = r.reason() {
        return Ok(Outcome::Refused { reason: reason.to_string() });
    }
    let dev = sys.device(s.device())?;
    Ok(match channels_setting(s.device(), &dev, p) {
        None => Outcome::Applied,
        Some(now) => Outcome::Changed {
            read_back: now.old.unwrap_or_default(),
            reason: "the driver kept another queue count".into(),
        },
    })
}

/// Reads device `name` and its plan's settings (channels first).
pub fn check_device(sys: &Sysroot, name: &str, p: &Persisted) -> Result<DeviceCheck, ApplyError> {
    let dev = sys.device(name)?;
    let online = sys.topology().online;
    let plan = persist::resolve(p, &dev, &online);
    let offline: Vec<usize> = p.plan.cpus.iter().copied().filter(|c| !online.contains(c)).collect();
    let channels = channels_setting(name, &dev, p);
    let settings = if channels.is_some() { Vec::new() } else { tune::settings(sys, &plan)? };
    Ok(DeviceCheck { plan, settings, channels, offline })
}
