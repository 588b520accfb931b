//! The order rules of the host-writing workflows (`rsskit_host::apply`),
//! checked on a fixture tree (the CLI's host6cpu: 6 CPUs, a 4-queue NIC with
//! a fake ethtool driver) without the binary: the lock first, nothing
//! written when a device cannot be persisted, the IRQ bans before the
//! pinning, the save before the writes, channels before anything else,
//! every write read back, and nothing of a save written when one entry is bad.

use rsskit_host::apply::{self, ApplyError, ApplyOptions, HostFiles, Locked, SaveTo, Step};
use rsskit_host::irqbalance::{RestartError, Restarter};
use rsskit_host::lock::{self, LockError};
use rsskit_host::persist;
use rsskit_host::plan::{self, Plan, PlanOptions};
use rsskit_host::sysroot::Sysroot;
use rsskit_host::tune::{Kind, Outcome};
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

const FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../rsskit/tests/fixtures/host6cpu");

fn copy_dir(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for e in fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &to.join(e.file_name()));
        } else {
            fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

/// A fixture host of its own, with rsskit's files under `files.root`.
struct Host {
    dir: PathBuf,
    sys: Sysroot,
    files: HostFiles,
}

impl Host {
    fn new(tag: &str, identity: bool) -> Host {
        static SEQ: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "rsskit-workflows-{tag}-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = fs::remove_dir_all(&dir);
        copy_dir(Path::new(FIXTURE), &dir);
        if identity {
            let dev = dir.join("sys/class/net/eth0");
            fs::write(dev.join("address"), "00:1b:21:aa:bb:cc\n").unwrap();
            fs::write(dev.join("addr_assign_type"), "0\n").unwrap();
        }
        let root = dir.join("hostroot");
        fs::create_dir_all(root.join("etc/default")).unwrap();
        fs::write(root.join("etc/default/irqbalance"), "IRQBALANCE_ARGS=\"\"\n").unwrap();
        let sys = Sysroot::fixture_tree(&dir).unwrap();
        Host { dir, sys, files: HostFiles { root, lock_wait: Duration::ZERO } }
    }

    fn plan(&self) -> Plan {
        let devs = vec![self.sys.device("eth0").unwrap()];
        plan::plan(&self.sys.topology(), &devs, &PlanOptions::default()).unwrap()
    }

    fn irq(&self, n: u32) -> String {
        fs::read_to_string(self.dir.join(format!("proc/irq/{n}/smp_affinity_list")))
            .unwrap()
            .trim()
            .to_string()
    }

    fn opts(&self, persist: bool) -> ApplyOptions {
        ApplyOptions { save: SaveTo::File(self.dir.join("saved.json")), persist, now: 1 }
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// Counts restarts (none is real here).
#[derive(Default)]
struct Restarts(usize);

impl Restarter for Restarts {
    fn restart(&mut self) -> Result<(), RestartError> {
        self.0 += 1;
        Ok(())
    }
}

/// Each step as a short word, in order.
fn word(s: &Step) -> String {
    match s {
        Step::Saved { .. } => "saved".into(),
        Step::Banned(c) => format!("banned {:?}", c.irqs),
        Step::Writing => "writing".into(),
        Step::Wrote(s, Outcome::Applied) => format!("wrote {:?}", s.kind()),
        Step::Wrote(s, o) => format!("not applied {:?}: {o:?}", s.kind()),
        Step::Persisted { .. } => "persisted".into(),
        Step::ChannelsSet(_, o) => format!("channels {o:?}"),
        Step::ToPutBack { changes, .. } => format!("to put back {changes}"),
        other => format!("{other:?}").split_whitespace().next().unwrap_or("").to_string(),
    }
}

#[test]
fn the_lock_comes_first_and_a_held_one_stops_everything() {
    let h = Host::new("lock", true);
    let _other = lock::acquire(&h.files.root, Duration::ZERO, "another writer").unwrap();
    let e = Locked::take(&h.sys, &h.files, "test", &|| false).err().expect("the lock is held");
    assert!(matches!(e, LockError::Busy { .. }), "{e}");
}

#[test]
fn apply_saves_then_bans_then_writes_then_persists() {
    let h = Host::new("order", true);
    let plan = h.plan();
    let irqs: Vec<u32> = plan.devices[0].irqs.iter().map(|x| x.irq).collect();
    assert!(!irqs.is_empty(), "the fixture NIC has queue IRQs");
    let locked = Locked::take(&h.sys, &h.files, "test", &|| false).unwrap();
    let (changes, _) = locked.changes(&plan).unwrap();
    assert!(changes.iter().any(|s| s.kind() == Kind::CpuList), "the plan pins IRQs");
    let mut steps = Vec::new();
    let mut restarts = Restarts::default();
    let r =
        locked.apply(&plan, &changes, &h.opts(true), &mut restarts, &mut |s| steps.push(word(&s))).unwrap();
    assert_eq!((r.written, r.failed), (changes.len(), 0), "{steps:?}");
    let at =
        |w: &str| steps.iter().position(|s| s.starts_with(w)).unwrap_or_else(|| panic!("no {w}: {steps:?}"));
    let first_irq = at("wrote CpuList");
    assert!(at("saved") < at("banned"), "saved before anything else: {steps:?}");
    assert_eq!(steps[at("banned")], format!("banned {irqs:?}"));
    assert!(at("banned") < at("writing") && at("writing") < first_irq, "bans before pinning: {steps:?}");
    assert!(at("persisted") > steps.iter().rposition(|s| s.starts_with("wrote")).unwrap(), "{steps:?}");
    assert_eq!(restarts.0, 1, "irqbalance restarted once, for the bans");
    // Every write was read back: the host now reads as planned.
    let (left, _) = apply::preview(&h.sys, &plan).unwrap();
    assert!(left.is_empty(), "{left:?}");
    assert_eq!(persist::load_all(&h.files.root).0.len(), 1);
}

#[test]
fn nothing_is_written_when_a_device_cannot_be_persisted() {
    let h = Host::new("noid", false);
    let plan = h.plan();
    let before: Vec<String> = plan.devices[0].irqs.iter().map(|x| h.irq(x.irq)).collect();
    let locked = Locked::take(&h.sys, &h.files, "test", &|| false).unwrap();
    let (changes, _) = locked.changes(&plan).unwrap();
    let mut steps = Vec::new();
    let e = locked
        .apply(&plan, &changes, &h.opts(true), &mut Restarts::default(), &mut |s| steps.push(word(&s)))
        .unwrap_err();
    assert!(matches!(e, ApplyError::Persist(persist::PersistError::NoIdentity(_))), "{e}");
    assert!(steps.is_empty(), "{steps:?}");
    assert!(!h.dir.join("saved.json").exists(), "no save either");
    let after: Vec<String> = plan.devices[0].irqs.iter().map(|x| h.irq(x.irq)).collect();
    assert_eq!(before, after);
}

#[test]
fn a_refused_write_is_read_back_and_reported_and_the_rest_applies() {
    let h = Host::new("refused", true);
    let drv = h.dir.join("ethtool/eth0.json");
    let mut v: serde_json::Value = serde_json::from_str(&fs::read_to_string(&drv).unwrap()).unwrap();
    v["refuse_set"] = serde_json::json!("operation not supported by the driver");
    fs::write(&drv, v.to_string()).unwrap();
    let mut plan = h.plan();
    plan.devices[0].table = Some(vec![0; 128]);
    let locked = Locked::take(&h.sys, &h.files, "test", &|| false).unwrap();
    let (changes, _) = locked.changes(&plan).unwrap();
    let mut steps = Vec::new();
    let r = locked
        .apply(&plan, &changes, &h.opts(false), &mut Restarts::default(), &mut |s| steps.push(word(&s)))
        .unwrap();
    assert_eq!(r.failed, 1, "{steps:?}");
    assert!(steps.iter().any(|s| s.starts_with("not applied RssTable")), "{steps:?}");
    assert!(steps.iter().any(|s| s == "wrote CpuList"), "the others still apply: {steps:?}");
    assert!(steps.iter().any(|s| s.starts_with("PartlyTuned")), "{steps:?}");
    assert!(!steps.iter().any(|s| s.starts_with("banned")), "no bans without --persist: {steps:?}");
}

#[test]
fn an_error_mid_write_is_reported_and_the_writes_around_it_stay_named() {
    let h = Host::new("midway", true);
    let mut plan = h.plan();
    plan.devices[0].table = Some(vec![0; 128]);
    let locked = Locked::take(&h.sys, &h.files, "test", &|| false).unwrap();
    let (mut changes, _) = locked.changes(&plan).unwrap();
    // The table write between two IRQ writes, and the fake driver then
    // unreadable (as a device that vanished): an error, not a refusal.
    let t = changes.iter().position(|s| s.kind() == Kind::RssTable).expect("the plan changes the table");
    let table = changes.remove(t);
    let irqs = changes.iter().filter(|s| s.kind() == Kind::CpuList).count();
    assert!(irqs >= 2, "{changes:?}");
    let first = changes.iter().position(|s| s.kind() == Kind::CpuList).unwrap();
    changes.insert(first + 1, table);
    let drv = h.dir.join("ethtool/eth0.json");
    let state = fs::read_to_string(&drv).unwrap();
    fs::write(&drv, "not the driver's state").unwrap();
    let mut steps = Vec::new();
    let r = locked
        .apply(&plan, &changes, &h.opts(false), &mut Restarts::default(), &mut |s| steps.push(word(&s)))
        .expect("an error on one setting does not end the run");
    assert_eq!((r.written, r.failed), (changes.len(), 1), "{steps:?}");
    let at =
        |w: &str| steps.iter().position(|s| s.starts_with(w)).unwrap_or_else(|| panic!("{w}: {steps:?}"));
    let bad = at("not applied RssTable");
    assert!(steps[bad].contains("not the driver") || steps[bad].contains("eth0.json"), "{steps:?}");
    assert!(at("wrote CpuList") < bad, "written before it: {steps:?}");
    assert!(steps[bad + 1..].iter().any(|s| s == "wrote CpuList"), "tried after it: {steps:?}");
    assert!(steps.iter().any(|s| s.starts_with("PartlyTuned")), "{steps:?}");
    // The driver back: only the table is left to write, everything else is as planned.
    fs::write(&drv, state).unwrap();
    let (left, _) = apply::preview(&h.sys, &plan).unwrap();
    let left: Vec<Kind> = left.iter().map(|s| s.kind()).collect();
    assert_eq!(left, [Kind::RssTable], "{steps:?}");
}

#[test]
fn channels_come_first_and_nothing_follows_when_they_cannot_be_set() {
    let h = Host::new("channels", true);
    let plan = h.plan();
    let p = persist::persisted_of(&h.sys, &plan.devices[0], 1).unwrap();
    // The device came back with 2 queues instead of 4 and takes no more
    // (a firmware or module option lowered its maximum).
    for q in ["rx-2", "rx-3", "tx-2", "tx-3"] {
        fs::remove_dir_all(h.dir.join("sys/class/net/eth0/queues").join(q)).unwrap();
    }
    let drv = h.dir.join("ethtool/eth0.json");
    let mut v: serde_json::Value = serde_json::from_str(&fs::read_to_string(&drv).unwrap()).unwrap();
    v["combined"] = 2.into();
    v["max_combined"] = 2.into();
    fs::write(&drv, v.to_string()).unwrap();
    let before: Vec<String> = plan.devices[0].irqs.iter().map(|x| h.irq(x.irq)).collect();
    let locked = Locked::take(&h.sys, &h.files, "test", &|| false).unwrap();
    let mut steps = Vec::new();
    let r = locked.put_back("eth0", &p, &mut Restarts::default(), &mut |s| steps.push(word(&s))).unwrap();
    assert!(r.channels_refused);
    assert_eq!(steps.len(), 1, "the channel count, then nothing: {steps:?}");
    assert!(steps[0].starts_with("channels Refused"), "{steps:?}");
    let after: Vec<String> = plan.devices[0].irqs.iter().map(|x| h.irq(x.irq)).collect();
    assert_eq!(before, after);
}

#[test]
fn put_back_bans_before_writing_and_restores_the_plan() {
    let h = Host::new("putback", true);
    let plan = h.plan();
    let p = persist::persisted_of(&h.sys, &plan.devices[0], 1).unwrap();
    let mut steps = Vec::new();
    let locked = Locked::take(&h.sys, &h.files, "test", &|| false).unwrap();
    let r = locked.put_back("eth0", &p, &mut Restarts::default(), &mut |s| steps.push(word(&s))).unwrap();
    assert!(r.written > 0 && r.failed == 0, "{steps:?}");
    let ban = steps.iter().position(|s| s.starts_with("banned")).expect("banned");
    let first = steps.iter().position(|s| s.starts_with("wrote")).expect("wrote");
    assert!(steps[0].starts_with("to put back") && ban < first, "{steps:?}");
    let (left, _) =
        apply::preview(&h.sys, &persist::resolve(&p, &h.sys.device("eth0").unwrap(), &[0, 1, 2, 3, 4, 5]))
            .unwrap();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn a_save_with_one_bad_entry_writes_nothing() {
    let h = Host::new("badsave", true);
    let plan = h.plan();
    let locked = Locked::take(&h.sys, &h.files, "test", &|| false).unwrap();
    let (changes, _) = locked.changes(&plan).unwrap();
    locked.apply(&plan, &changes, &h.opts(false), &mut Restarts::default(), &mut |_| {}).unwrap();
    let written: Vec<String> = plan.devices[0].irqs.iter().map(|x| h.irq(x.irq)).collect();
    // The save, with one entry naming an IRQ the device does not have.
    let path = h.dir.join("saved.json");
    let mut v: serde_json::Value = serde_json::from_str(&fs::read_to_string(&path).unwrap()).unwrap();
    let bad = v["settings"].as_array_mut().unwrap().iter_mut().find(|s| s["kind"] == "irq_affinity").unwrap();
    bad["irq"] = serde_json::json!(9999);
    let tampered = h.dir.join("tampered.json");
    fs::write(&tampered, v.to_string()).unwrap();
    let e = apply::restore_changes(&h.sys, &tampered).unwrap_err();
    assert!(e.to_string().contains("refused, nothing written"), "{e}");
    let now: Vec<String> = plan.devices[0].irqs.iter().map(|x| h.irq(x.irq)).collect();
    assert_eq!(written, now);
    // The untampered save puts the original back.
    let back = apply::restore_changes(&h.sys, &path).unwrap();
    assert_eq!(locked.write(&back, &mut |_| {}).unwrap(), 0);
}

#[test]
fn remove_takes_away_exactly_what_persist_added() {
    let h = Host::new("remove", true);
    let plan = h.plan();
    let locked = Locked::take(&h.sys, &h.files, "test", &|| false).unwrap();
    let (changes, _) = locked.changes(&plan).unwrap();
    locked.apply(&plan, &changes, &h.opts(true), &mut Restarts::default(), &mut |_| {}).unwrap();
    let l = rsskit_host::keep::list(&h.sys, &h.files.root).unwrap();
    assert_eq!(l.plans.len(), 1);
    assert_eq!(l.plans[0].1.as_deref(), Some("eth0"), "present now as eth0");
    assert_eq!(l.installed.len(), 2, "the udev rule and the unit");
    assert!(!l.banned.is_empty());
    let e = locked.remove_persisted(Some("eth9"), &mut Restarts::default()).unwrap_err();
    assert_eq!(e.to_string(), "eth9: no persisted plan matches it");
    let mut restarts = Restarts::default();
    let r = locked.remove_persisted(None, &mut restarts).unwrap();
    assert_eq!((r.removed.len(), r.left, r.units_removed.len()), (1, 0, 2));
    assert_eq!(r.unbanned.as_ref().map(|c| c.irqs.clone()), Some(l.banned.clone()));
    assert_eq!(restarts.0, 1);
    assert_eq!(
        fs::read_to_string(h.files.root.join("etc/default/irqbalance")).unwrap(),
        "IRQBALANCE_ARGS=\"\"\n",
        "exactly what was there"
    );
    let l = rsskit_host::keep::list(&h.sys, &h.files.root).unwrap();
    assert!(l.plans.is_empty() && l.installed.is_empty() && l.banned.is_empty());
}
