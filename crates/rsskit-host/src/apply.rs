//! The host-writing workflows, as functions that report each step:
//! `apply` of a plan, writing a save back (`apply --restore`), and putting
//! one persisted plan back on its device (`persist apply IF`). The order
//! rules live here, and only here:
//! - the host lock first, before the current values are read (a save must
//!   hold what this run replaces, not another writer's half-written state):
//!   a [`Locked`] is the only way to write;
//! - nothing written when a device cannot be persisted or the save cannot
//!   be written;
//! - the IRQs banned in irqbalance before they are pinned (an irqbalance
//!   without the bans moved 4 of 8 just-pinned IRQs in the lab);
//! - channels before the table (a table names queues the count must have);
//! - every write read back ([`tune::write_one`]);
//! - an error on one setting is that setting's outcome: the rest are still
//!   tried, and the report names what remains written (never an error
//!   that hides writes already made).
//!
//! Persisted plans (`persist apply`, `remove`, `list`, the agent's device
//! check) are [`crate::keep`]'s.
//!
//! Callers see each step as it happens through an observer (the CLI prints
//! them; tests record them) and get a report at the end.

use crate::irqbalance::{self, RestartError, Restarter};
use crate::lock::{self, HostLock, LockError};
use crate::persist::{self, Identity, PersistError};
use crate::plan::Plan;
use crate::sysroot::{Sysroot, SysrootError};
use crate::tune::{self, Outcome, Setting, Target, TuneError};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Where rsskit keeps its own files (plans, lock, units, irqbalance's
/// options: all under `root`, `/` on a live host) and how long a writer
/// waits for another.
#[derive(Debug, Clone)]
pub struct HostFiles {
    /// The root every rsskit file is under.
    pub root: PathBuf,
    /// How long to wait for another writer's lock.
    pub lock_wait: Duration,
}

impl HostFiles {
    /// Whether this is the live host's own root (only then is irqbalance restarted).
    pub fn is_host_root(&self) -> bool {
        self.root == Path::new("/")
    }
}

/// Restarts irqbalance only on the host's own root, and only when it runs.
pub struct HostRestarter {
    live: bool,
}

impl HostRestarter {
    /// For `files` on `sys`.
    pub fn new(files: &HostFiles, sys: &Sysroot) -> HostRestarter {
        HostRestarter { live: files.is_host_root() && sys.is_live() && sys.irqbalance().is_some() }
    }
}

impl Restarter for HostRestarter {
    fn restart(&mut self) -> Result<(), RestartError> {
        if self.live {
            irqbalance::Systemctl.restart()
        } else {
            Err(RestartError::NotHere)
        }
    }
}

/// Why a workflow stopped.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// The host lock.
    #[error(transparent)]
    Lock(#[from] LockError),
    /// Reading or writing settings, or the save file.
    #[error(transparent)]
    Tune(#[from] TuneError),
    /// Reading the host.
    #[error(transparent)]
    Host(#[from] SysrootError),
    /// Persisted plans, units, irqbalance's options.
    #[error(transparent)]
    Persist(#[from] PersistError),
    /// No persisted plan matches the interface (by identity or by the
    /// name it was persisted under).
    #[error("{0}: no persisted plan matches it")]
    NoPlanFor(String),
    /// The irqbalance bans could not be taken away.
    #[error("undoing the irqbalance bans")]
    Unban(#[source] PersistError),
    /// Every save file name of this second is taken.
    #[error("no free save file name in {0}")]
    NoSaveName(PathBuf),
    // Service isolation (issue 33 item 3).
    /// A context or rule was refused (what this run created was rolled back).
    #[error(transparent)]
    Isolation(#[from] crate::isolate::write::IsolateWriteError),
    /// The record of what rsskit owns on a persisted device could not be written.
    #[error("isolation record: {0}")]
    IsolationRecord(String),
}

/// One thing a workflow did, in order, as it happens.
#[derive(Debug)]
pub enum Step<'a> {
    /// Nothing differs from the plan.
    NothingToDo,
    /// `rps_sock_flow_entries` is host-wide: not persisted per device.
    SockFlowNotPersisted,
    /// The values about to be replaced were saved.
    Saved {
        /// The save file.
        path: &'a Path,
        /// How many values it holds.
        values: usize,
    },
    /// A setting whose current value cannot be read (so is not saved).
    Unsaved(&'a Setting),
    /// IRQs banned in irqbalance (before any of them is written).
    Banned(&'a irqbalance::Change),
    /// The writes start.
    Writing,
    /// One setting written and read back.
    Wrote(&'a Setting, &'a Outcome),
    /// A device some of whose settings were not applied.
    PartlyTuned {
        /// The interface.
        device: &'a str,
        /// Settings written to it.
        total: usize,
        /// Of which not applied.
        failed: usize,
    },
    /// Every setting applied and read back.
    AllApplied(usize),
    /// A device's plan stored.
    Persisted {
        /// The interface.
        device: &'a str,
        /// What it is recognised by.
        identity: &'a Identity,
        /// The plan file.
        path: &'a Path,
    },
    /// The udev rule or apply unit installed.
    Installed(&'a Path),
    /// `persist apply`: the channel count set before anything else.
    ChannelsSet(&'a Setting, &'a Outcome),
    /// `persist apply`: planned CPUs that are offline now.
    OfflineCpus(&'a [usize]),
    /// `persist apply`: how many of the plan's settings differ.
    ToPutBack {
        /// Settings that differ (and are written).
        changes: usize,
        /// Settings in the plan.
        total: usize,
    },
    // Service isolation (issue 33 item 3).
    /// An RSS context or flow rule created (recorded in the save file).
    Created(&'a tune::Created),
    /// A recorded context or rule deleted, found gone, or left as someone else's.
    Removed(&'a tune::Created, &'a crate::isolate::write::Removal),
    /// A device's isolation is already in place (same rules into a context with the planned table).
    IsolationInPlace {
        /// The interface.
        device: &'a str,
        /// The spec.
        spec: &'a str,
    },
    /// `persist apply`: what keeping a persisted isolation did.
    IsolationKept(&'a crate::isolate::keep::KeepEvent),
}

/// The settings `plan` changes on the host now, in write order (hashed
/// fields followed by the key or table: [`tune::push_hash_fields`]). Used
/// under the lock by [`Locked::changes`], and alone for a dry run.
pub fn preview(sys: &Sysroot, plan: &Plan) -> Result<(Vec<Setting>, usize), TuneError> {
    let all = tune::settings(sys, plan)?;
    let changes: Vec<Setting> = all.iter().filter(|s| !s.unchanged()).cloned().collect();
    Ok((tune::push_hash_fields(sys, changes)?, all.len()))
}

/// Where the save file goes.
#[derive(Debug, Clone)]
pub enum SaveTo {
    /// This file (created new, never over an earlier one).
    File(PathBuf),
    /// A new file named by the time in the host's state directory
    /// (`/var/lib/rsskit`), created 0700 when missing.
    StateDir,
}

/// How to apply.
#[derive(Debug, Clone)]
pub struct ApplyOptions {
    /// Where the values replaced are saved.
    pub save: SaveTo,
    /// Also store each device's plan and install the rule and unit.
    pub persist: bool,
    /// Seconds since the epoch (the save's time and name, the plan's stamp).
    pub now: u64,
}

/// What an apply did.
#[derive(Debug, Default)]
pub struct ApplyReport {
    /// Settings written.
    pub written: usize,
    /// Of which not applied (refused, or read back otherwise).
    pub failed: usize,
    /// The save file, when anything was written.
    pub save: Option<PathBuf>,
}

/// The host lock, held: the only way to write host settings.
pub struct Locked<'a> {
    pub(crate) sys: &'a Sysroot,
    pub(crate) files: &'a HostFiles,
    _lock: HostLock,
}

impl<'a> Locked<'a> {
    /// Takes the lock for `what` (shown to a waiter), waiting at most the
    /// files' `lock_wait` and giving up as soon as `stop()` says so.
    pub fn take(
        sys: &'a Sysroot,
        files: &'a HostFiles,
        what: &str,
        stop: &dyn Fn() -> bool,
    ) -> Result<Locked<'a>, LockError> {
        let lock = lock::acquire_unless(&files.root, files.lock_wait, what, stop)?;
        Ok(Locked { sys, files, _lock: lock })
    }

    /// [`preview`], read under the lock.
    pub fn changes(&self, plan: &Plan) -> Result<(Vec<Setting>, usize), TuneError> {
        preview(self.sys, plan)
    }

    /// Writes `changes` of `plan`: when persisting, refuses first if a
    /// device cannot be persisted; saves what it replaces; bans the pinned
    /// IRQs; writes and reads back each setting; then stores the plans.
    pub fn apply(
        &self,
        plan: &Plan,
        changes: &[Setting],
        opts: &ApplyOptions,
        restarter: &mut dyn Restarter,
        observe: &mut dyn FnMut(Step),
    ) -> Result<ApplyReport, ApplyError> {
        if changes.is_empty() && !self.isolation_needed(plan)? {
            observe(Step::NothingToDo);
            if opts.persist {
                self.ban_pinned(plan, restarter, observe)?;
                self.store_plans(plan, opts.now, observe)?;
            }
            return Ok(ApplyReport::default());
        }
        if opts.persist {
            // Refuse before writing anything when a device cannot be persisted.
            for d in &plan.devices {
                persist::persisted_of(self.sys, d, 0)?;
            }
        }
        let path = match &opts.save {
            SaveTo::File(p) => p.clone(),
            SaveTo::StateDir => self.free_save_name(opts.now)?,
        };
        let mut save = tune::save_of(changes, opts.now);
        // nicres: what a channel change may reset, read before anything is written.
        let before = self.before_channels(changes)?;
        // Contexts and rules before the settings (the main table shrinks
        // among them): the order is isolate::write's. Created before the
        // save so that it records their ids (the kernel picks them); undone
        // if the save fails. A crash between the two leaves them unrecorded:
        // `rsskit info` lists them, `ethtool -N/-X ... delete` removes them.
        save.created = self.create_isolation(plan, observe)?;
        if let Err(e) = tune::write_save(&path, &save) {
            self.remove_created(&save.created, observe);
            return Err(e.into());
        }
        observe(Step::Saved { path: &path, values: save.settings.len() });
        for s in changes.iter().filter(|s| s.old.is_none()) {
            observe(Step::Unsaved(s));
        }
        if opts.persist {
            self.ban_pinned(plan, restarter, observe)?;
        }
        let failed = self.write(changes, observe)?;
        // nicres
        let (more, more_failed) =
            self.after_channels(plan, changes, (&path, save.clone(), &before), observe)?;
        if opts.persist {
            self.store_plans(plan, opts.now, observe)?;
            // What this run created is what the persisted plan owns.
            for d in plan.devices.iter().filter(|d| !d.isolation.is_empty()) {
                let id = persist::persisted_of(self.sys, d, opts.now)?.identity;
                crate::isolate::keep::record_created(&self.files.root, &id, &save.created, &d.name)
                    .map_err(ApplyError::IsolationRecord)?;
            }
        }
        Ok(ApplyReport { written: changes.len() + more, failed: failed + more_failed, save: Some(path) })
    }

    /// Writes every setting in order, reading each back; returns how many
    /// were not applied (the others stay written).
    pub fn write(&self, changes: &[Setting], observe: &mut dyn FnMut(Step)) -> Result<usize, TuneError> {
        observe(Step::Writing);
        let mut per_dev: Vec<(&str, usize, usize)> = Vec::new();
        for s in changes {
            // An error on one setting (the device gone, its driver not
            // answering, a failed read-back) is that setting's outcome, not
            // the end of the run: stopping would leave the settings before
            // it written and unnamed, behind an error that means "nothing
            // written". The rest are still tried and the run lists what
            // remains; `--restore` compares each saved value with the host,
            // so it also covers a write whose read-back failed.
            let o =
                tune::write_one(self.sys, s).unwrap_or_else(|e| Outcome::Refused { reason: e.to_string() });
            observe(Step::Wrote(s, &o));
            let bad = usize::from(o != Outcome::Applied);
            match per_dev.iter_mut().find(|(d, _, _)| *d == s.device()) {
                Some(e) => {
                    e.1 += 1;
                    e.2 += bad;
                }
                None => per_dev.push((s.device(), 1, bad)),
            }
        }
        for (device, total, failed) in per_dev.iter().filter(|(_, _, f)| *f > 0) {
            observe(Step::PartlyTuned { device, total: *total, failed: *failed });
        }
        let failed = per_dev.iter().map(|(_, _, f)| f).sum();
        if failed == 0 {
            observe(Step::AllApplied(changes.len()));
        }
        Ok(failed)
    }

    /// Creates every device's isolation (contexts, then rules), skipping one
    /// already in place; on a refusal, what this run created is removed.
    fn create_isolation(
        &self,
        plan: &Plan,
        observe: &mut dyn FnMut(Step),
    ) -> Result<Vec<tune::Created>, ApplyError> {
        let mut all: Vec<tune::Created> = Vec::new();
        for d in plan.devices.iter().filter(|d| !d.isolation.is_empty()) {
            let mut dev = d.clone();
            dev.isolation.clear();
            for iso in &d.isolation {
                if crate::isolate::write::in_place(self.sys, &d.name, iso)? {
                    observe(Step::IsolationInPlace { device: &d.name, spec: &iso.spec });
                } else {
                    dev.isolation.push(iso.clone());
                }
            }
            match crate::isolate::write::create(self.sys, &dev, &mut |c| observe(Step::Created(c))) {
                Ok(made) => all.extend(made),
                Err(e) => {
                    self.remove_created(&all, observe);
                    return Err(e.into());
                }
            }
        }
        Ok(all)
    }

    /// Whether some device's isolation is not in place yet.
    fn isolation_needed(&self, plan: &Plan) -> Result<bool, SysrootError> {
        for d in &plan.devices {
            for iso in &d.isolation {
                if !crate::isolate::write::in_place(self.sys, &d.name, iso)? {
                    return Ok(true);
                }
            }
        }
        Ok(false)
    }

    /// Deletes the recorded contexts and rules that still hold what was
    /// recorded (rules first); someone else's are left and reported. How
    /// many the driver refused to delete.
    pub fn remove_created(&self, created: &[tune::Created], observe: &mut dyn FnMut(Step)) -> usize {
        let done = crate::isolate::write::remove(self.sys, created);
        for (c, r) in &done {
            observe(Step::Removed(c, r));
        }
        done.iter().filter(|(_, r)| matches!(r, crate::isolate::write::Removal::Refused(_))).count()
    }

    /// Bans the IRQs `plan` pins in irqbalance (restarting it when it runs).
    pub fn ban_pinned(
        &self,
        plan: &Plan,
        restarter: &mut dyn Restarter,
        observe: &mut dyn FnMut(Step),
    ) -> Result<(), PersistError> {
        if let Some(c) = ban_pinned(self.files, plan, restarter)? {
            observe(Step::Banned(&c));
        }
        Ok(())
    }

    /// Stores each device's plan and installs the rule and unit.
    fn store_plans(&self, plan: &Plan, now: u64, observe: &mut dyn FnMut(Step)) -> Result<(), PersistError> {
        if plan.rps_sock_flow_entries.is_some() {
            observe(Step::SockFlowNotPersisted);
        }
        for d in &plan.devices {
            let p = persist::persisted_of(self.sys, d, now)?;
            let path = persist::store(&self.files.root, &p)?;
            observe(Step::Persisted { device: &d.name, identity: &p.identity, path: &path });
        }
        for path in persist::install_units(&self.files.root)? {
            observe(Step::Installed(&path));
        }
        Ok(())
    }

    /// A new save file name in the state directory, by the time; two
    /// applies in one second get a suffix, never an overwrite.
    fn free_save_name(&self, now: u64) -> Result<PathBuf, ApplyError> {
        let dir = self.sys.state_dir();
        tune::prepare_save_dir(dir)?;
        let stamp = tune::utc_stamp(now);
        (0..100)
            .map(|i| match i {
                0 => format!("rsskit-saved-{stamp}.json"),
                _ => format!("rsskit-saved-{stamp}-{i}.json"),
            })
            .map(|n| dir.join(n))
            .find(|p| std::fs::symlink_metadata(p).is_err())
            .ok_or_else(|| ApplyError::NoSaveName(dir.to_path_buf()))
    }
}

// nicres: a channel change inside an apply and its restore.
impl Locked<'_> {
    /// The current values of what a channel change may reset on each
    /// device whose count `changes` sets (table, key, hashed fields, queue
    /// IRQs, RPS, XPS, rings, coalescing): the save keeps these, not what
    /// the device shows after the change.
    fn before_channels(&self, changes: &[Setting]) -> Result<Vec<tune::SavedValue>, TuneError> {
        let mut out = Vec::new();
        for s in changes.iter().filter(|s| matches!(s.target, Target::Channels { .. })) {
            let dev = self.sys.device(s.device())?;
            let device = || dev.name.clone();
            let mut targets = vec![
                Target::RssTable { device: device() },
                Target::RssKey { device: device() },
                Target::RxRing { device: device() },
                Target::TxRing { device: device() },
                Target::Coalesce { device: device() },
            ];
            if let Some(h) = dev.hash.ok() {
                targets.extend(h.iter().map(|f| Target::HashFields { device: device(), flow: f.flow }));
            }
            targets.extend(
                dev.irqs
                    .iter()
                    .filter(|x| x.queue.is_some())
                    .map(|x| Target::IrqAffinity { device: device(), irq: x.irq }),
            );
            for q in &dev.rx {
                let queue = q.queue as u32;
                targets.push(Target::RpsCpus { device: device(), queue });
                targets.push(Target::RpsFlowCnt { device: device(), queue });
            }
            targets
                .extend(dev.tx.iter().map(|q| Target::XpsCpus { device: device(), queue: q.queue as u32 }));
            for target in targets {
                let probe = Setting { what: String::new(), old: None, new: String::new(), target };
                if let Some(value) = tune::current(self.sys, &probe)? {
                    out.push(tune::SavedValue { target: probe.target, value });
                }
            }
        }
        Ok(out)
    }

    /// After channel counts were written: each such device's plan read and
    /// written now that its queues exist, the save file rewritten first
    /// with the values they replace (as read before the change where the
    /// setting existed then). Returns (written, not applied).
    fn after_channels(
        &self,
        plan: &Plan,
        changes: &[Setting],
        (path, save, before): (&Path, tune::SaveFile, &[tune::SavedValue]),
        observe: &mut dyn FnMut(Step),
    ) -> Result<(usize, usize), ApplyError> {
        let devices: Vec<&str> = changes
            .iter()
            .filter(|s| matches!(s.target, Target::Channels { .. }))
            .map(|s| s.device())
            .collect();
        if devices.is_empty() {
            return Ok((0, 0));
        }
        let (rest, _) = preview(self.sys, plan)?;
        let rest: Vec<Setting> = rest
            .into_iter()
            .filter(|s| devices.contains(&s.device()) && !matches!(s.target, Target::Channels { .. }))
            .collect();
        if rest.is_empty() {
            return Ok((0, 0));
        }
        let mut save = save;
        for s in rest.iter().filter(|s| !s.unchanged()) {
            let value = before
                .iter()
                .find(|b| b.target == s.target)
                .map(|b| b.value.clone())
                .or_else(|| s.old.clone());
            if let (Some(value), false) = (value, save.settings.iter().any(|x| x.target == s.target)) {
                save.settings.push(tune::SavedValue { target: s.target.clone(), value });
            }
        }
        tune::rewrite_save(path, &save)?;
        observe(Step::Saved { path, values: save.settings.len() });
        let failed = self.write(&rest, observe)?;
        Ok((rest.len(), failed))
    }
}

/// After a restore wrote `written`: when it put a channel count back, the
/// rest of save file `file`, read again now that the queues are as saved
/// (empty otherwise).
pub fn restore_rest(sys: &Sysroot, file: &Path, written: &[Setting]) -> Result<Vec<Setting>, TuneError> {
    if !written.iter().any(|s| matches!(s.target, Target::Channels { .. })) {
        return Ok(Vec::new());
    }
    restore_changes(sys, file)
}

/// The settings of save file `file` that differ from the host now, every
/// entry checked against the host first (one bad entry and none is
/// returned), in write order. A channel count that differs comes alone
/// (the queues it removes or adds decide what the rest can be); entries of
/// queues and IRQs that went away with the count are left out.
pub fn restore_changes(sys: &Sysroot, file: &Path) -> Result<Vec<Setting>, TuneError> {
    let save = tune::read_save(file)?;
    // nicres: channel counts first.
    let counts: Vec<tune::SavedValue> =
        save.settings.iter().filter(|s| matches!(s.target, Target::Channels { .. })).cloned().collect();
    let save = if counts.is_empty() {
        save
    } else {
        // Going back to fewer queues: their tables first (the saved table
        // fits the saved count, and the kernel refuses fewer queues than
        // the table names); to more, the tables after them.
        let fewer = |c: &tune::SavedValue| {
            let now =
                sys.device(c.target.device()).ok().and_then(|d| d.channels.ok().map(|x| x.combined_count));
            c.value.parse::<u32>().ok().zip(now).is_some_and(|(saved, now)| saved < now)
        };
        let shrinking: Vec<&str> = counts.iter().filter(|c| fewer(c)).map(|c| c.target.device()).collect();
        let tables = save.settings.iter().filter(|s| {
            matches!(s.target, Target::RssTable { .. }) && shrinking.contains(&s.target.device())
        });
        let first = tune::SaveFile {
            saved_at: save.saved_at,
            settings: tables.chain(&counts).cloned().collect(),
            created: Vec::new(),
        };
        let ch: Vec<Setting> =
            tune::restore_settings(sys, file, &first)?.into_iter().filter(|s| !s.unchanged()).collect();
        if ch.iter().any(|s| matches!(s.target, Target::Channels { .. })) {
            return Ok(ch);
        }
        without_gone_queues(sys, save, &counts)
    };
    let changes: Vec<Setting> =
        tune::restore_settings(sys, file, &save)?.into_iter().filter(|s| !s.unchanged()).collect();
    tune::push_hash_fields(sys, changes)
}

/// `save` without the entries of the devices of `counts` whose queue or
/// IRQ no longer exists (it came and went with a channel count).
fn without_gone_queues(sys: &Sysroot, save: tune::SaveFile, counts: &[tune::SavedValue]) -> tune::SaveFile {
    let mut devices: Vec<crate::sysroot::DeviceState> = Vec::new();
    for c in counts {
        if let Ok(d) = sys.device(c.target.device()) {
            devices.push(d);
        }
    }
    let gone = |t: &Target| {
        let Some(d) = devices.iter().find(|d| d.name == t.device()) else { return false };
        match t {
            Target::RpsCpus { queue, .. } | Target::RpsFlowCnt { queue, .. } => {
                !d.rx.iter().any(|q| q.queue == *queue as usize)
            }
            Target::XpsCpus { queue, .. } => !d.tx.iter().any(|q| q.queue == *queue as usize),
            Target::IrqAffinity { irq, .. } => !d.irqs.iter().any(|x| x.irq == *irq),
            _ => false,
        }
    };
    let settings = save.settings.into_iter().filter(|s| !gone(&s.target)).collect();
    tune::SaveFile { settings, ..save }
}

/// The contexts and rules save file `file` records as created (checked).
pub fn restore_created(file: &Path) -> Result<Vec<tune::Created>, TuneError> {
    Ok(tune::read_save(file)?.created)
}

/// The IRQs `plan` pins that a running irqbalance has not banned (it will
/// move them): its pid and those IRQs, or `None` when nothing is at risk.
pub fn unbanned_irqs(sys: &Sysroot, plan: &Plan) -> Option<(u32, Vec<u32>)> {
    let ib = sys.irqbalance()?;
    let irqs: Vec<u32> = plan
        .devices
        .iter()
        .flat_map(|d| d.irqs.iter().map(|x| x.irq))
        .filter(|i| !ib.banned_irqs.contains(i))
        .collect();
    (!irqs.is_empty()).then_some((ib.pid, irqs))
}

/// Bans the IRQs `plan` pins in irqbalance; what changed, if anything.
pub fn ban_pinned(
    files: &HostFiles,
    plan: &Plan,
    restarter: &mut dyn Restarter,
) -> Result<Option<irqbalance::Change>, PersistError> {
    let irqs: Vec<u32> = plan.devices.iter().flat_map(|d| d.irqs.iter().map(|x| x.irq)).collect();
    if irqs.is_empty() {
        return Ok(None);
    }
    irqbalance::ban(&files.root, &irqs, restarter)
}
