//! `rsskit agent`'s loop: keeps every persisted plan true. The decisions
//! (what drifted, back-off, refused-once) are [`crate::keeper`]'s, with the
//! time passed in; this is the loop around them: rtnetlink link events
//! (through `rsskit_linux::rtnl`), the periodic re-check, reload and stop
//! flags, one log line per event, and the [`Snapshot`] the metrics endpoint
//! ([`crate::metrics_server`]) serves. The CLI parses flags, wires signals
//! and sd_notify, and calls [`Agent::run`], or one [`Agent::pass`].

use crate::apply::{self, HostFiles, HostRestarter};
use crate::causes;
use crate::irqbalance;
use crate::keep;
use crate::keeper::{Cause, Event, Keeper, Policy, Verdict};
use crate::lock;
use crate::metrics::{self, DeviceMetrics, Snapshot};
use crate::persist::{self, Persisted};
use crate::softnet;
use crate::sysroot::Sysroot;
use crate::tune::{self, Outcome};
use rsskit_linux::rtnl::{LinkEvent, LinkWatch};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What the loop tells its service manager (sd_notify in the CLI).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Notify {
    /// The first pass is done; keeping this many plans.
    Ready {
        /// Plans loaded.
        plans: usize,
        /// Whether link events are watched (a live host) besides the timer.
        links: bool,
    },
    /// Reloading the plans (SIGHUP).
    Reloading,
    /// Reloaded.
    Reloaded,
    /// Stopping (the stop flag).
    Stopping,
}

/// The agent: the persisted plans, the keeper's decisions and what each
/// pass found, shared with the metrics endpoint through `shared`.
pub struct Agent {
    files: HostFiles,
    sys: Sysroot,
    plans: Vec<Persisted>,
    invalid: usize,
    keeper: Keeper,
    start: Instant,
    /// Queue counts per device at the last check (a change = channels changed).
    queues: BTreeMap<String, (usize, usize)>,
    /// RX queue packets per device at the last check, for the imbalance.
    last_packets: BTreeMap<String, BTreeMap<usize, u64>>,
    corrections: BTreeMap<(String, &'static str, &'static str), u64>,
    shared: Arc<Mutex<Snapshot>>,
    /// Set by SIGTERM/SIGINT: a pass waiting for the host lock gives up.
    stop: Arc<AtomicBool>,
    /// What the last pass could not check, with why (a busy lock, an
    /// unreadable device): never reported as aligned.
    unchecked: Vec<String>,
    /// The devices the last pass read and judged.
    checked: Vec<String>,
    /// The plan files refused at the last load, with why.
    refused: Vec<String>,
    /// Where each event's line goes (the CLI: stderr, for journald).
    log: Box<dyn FnMut(&str) + Send>,
}

impl Agent {
    /// An agent over `sys` keeping the plans under `files`; `stop` (set by
    /// SIGTERM) makes a pass waiting for the lock give up; `shared` is what
    /// the metrics endpoint reads; `log` takes one line per event.
    pub fn new(
        sys: Sysroot,
        files: HostFiles,
        stop: Arc<AtomicBool>,
        shared: Arc<Mutex<Snapshot>>,
        log: Box<dyn FnMut(&str) + Send>,
    ) -> Agent {
        Agent {
            files,
            sys,
            plans: Vec::new(),
            invalid: 0,
            keeper: Keeper::new(Policy::default()),
            start: Instant::now(),
            queues: BTreeMap::new(),
            last_packets: BTreeMap::new(),
            corrections: BTreeMap::new(),
            shared,
            stop,
            unchecked: Vec::new(),
            checked: Vec::new(),
            refused: Vec::new(),
            log,
        }
    }

    fn log(&mut self, line: &str) {
        (self.log)(line);
    }

    /// The plans loaded now.
    pub fn plans(&self) -> usize {
        self.plans.len()
    }

    /// (Re)loads the persisted plans; refused files are logged by name.
    pub fn load(&mut self) {
        let (plans, bad) = persist::load_all(&self.files.root);
        for e in &bad {
            self.log(&format!("plan refused: {e} (nothing of it is used)"));
        }
        self.refused = bad.iter().map(|e| e.to_string()).collect();
        self.log(&format!(
            "{} plan(s) loaded from {}",
            plans.len(),
            persist::plans_dir(&self.files.root).display()
        ));
        self.plans = plans;
        self.invalid = bad.len();
        self.keeper.forget_all();
    }

    fn now_ms(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }

    /// Checks the persisted devices present (`only`: one of them) and puts
    /// back what drifted.
    pub fn pass(&mut self, cause: Cause, only: Option<&str>) {
        self.unchecked.clear();
        self.checked.clear();
        let present: Vec<(String, Persisted)> = match keep::present(&self.sys, &self.plans) {
            Ok(v) => v.into_iter().map(|x| (x.name, x.plan.clone())).collect(),
            Err(e) => {
                let e = causes(&e);
                self.log(&format!("cannot list interfaces: {e}"));
                self.unchecked.push(format!("every device: cannot list interfaces: {e}"));
                return;
            }
        };
        let todo: Vec<&(String, Persisted)> =
            present.iter().filter(|(n, _)| only.is_none_or(|o| o == n)).collect();
        let lock = if todo.is_empty() {
            None
        } else {
            let stop = self.stop.clone();
            match lock::acquire_unless(&self.files.root, self.files.lock_wait, "rsskit agent", &|| {
                stop.load(Ordering::Relaxed)
            }) {
                Ok(l) => Some(l),
                Err(e) => {
                    let e = causes(&e);
                    self.log(&format!("check skipped ({}): {e}; the next check retries", cause.as_str()));
                    for (name, _) in &todo {
                        self.unchecked.push(format!("{name}: not checked: {e}"));
                    }
                    return;
                }
            }
        };
        let mut devices: BTreeMap<String, DeviceMetrics> = self
            .shared
            .lock()
            .map(|s| s.devices.iter().map(|d| (d.device.clone(), d.clone())).collect())
            .unwrap_or_default();
        devices.retain(|n, _| present.iter().any(|(m, _)| m == n));
        for (name, plan) in todo {
            let m = self.device(name, plan, cause);
            devices.insert(name.clone(), m);
        }
        drop(lock);
        let mut snap = Snapshot {
            devices: devices.into_values().collect(),
            corrections: self.corrections.clone(),
            softnet: Vec::new(),
            plans: self.plans.len(),
            invalid_plans: self.invalid,
        };
        if let Ok(mut s) = self.shared.lock() {
            snap.softnet = std::mem::take(&mut s.softnet);
            *s = snap;
        }
    }

    fn suspect(&self, class: &str) -> Option<String> {
        if class != "irq_affinity" {
            return None;
        }
        self.sys.irqbalance().map(|ib| format!("irqbalance (pid {})", ib.pid))
    }

    fn record(&mut self, events: Vec<Event>) {
        for e in events {
            if let Event::Corrected { device, class, cause, .. } = &e {
                *self.corrections.entry((device.clone(), class, cause.as_str())).or_default() += 1;
            }
            self.log(&e.to_string());
        }
    }

    fn device(&mut self, name: &str, plan: &Persisted, cause: Cause) -> DeviceMetrics {
        let mut m = DeviceMetrics { device: name.to_string(), ..DeviceMetrics::default() };
        let mut cause = cause;
        let mut check = match keep::check_device(&self.sys, name, plan) {
            Ok(c) => c,
            Err(e) => {
                let e = causes(&e);
                self.log(&format!("{name}: cannot read it: {e}"));
                self.unchecked.push(format!("{name}: not checked: cannot read it: {e}"));
                m.problems.insert("drifted", 1);
                return m;
            }
        };
        self.checked.push(name.to_string());
        let counts = (check.plan.devices[0].rx.len(), check.plan.devices[0].tx.len());
        let now_counts = match &check.channels {
            Some(_) => (usize::MAX, usize::MAX),
            None => counts,
        };
        if cause == Cause::Periodic && self.queues.get(name).is_some_and(|c| *c != now_counts) {
            cause = Cause::ChannelsChanged;
        }
        self.queues.insert(name.to_string(), now_counts);
        if let Some(ch) = check.channels.clone() {
            let now = self.now_ms();
            if self.keeper.decide(now, &ch) == Verdict::Correct {
                let o = keep::write_channels(&self.sys, &ch, plan)
                    .unwrap_or_else(|e| Outcome::Refused { reason: causes(&e) });
                let ev = self.keeper.outcome(now, &ch, cause, &o, None);
                self.record(ev);
                if o == Outcome::Applied {
                    match keep::check_device(&self.sys, name, plan) {
                        Ok(c) => check = c,
                        Err(e) => self
                            .log(&format!("{name}: cannot read it after setting channels: {}", causes(&e))),
                    }
                }
            }
            if check.channels.is_some() {
                m.problems.insert("queues_differ", 1);
                return m;
            }
        }
        if !check.offline.is_empty() {
            m.problems.insert("cpus_offline", check.offline.len() as u64);
        }
        // The bans first: an irqbalance without them can move an IRQ between
        // this pass's write and its restart.
        let mut restarter = HostRestarter::new(&self.files, &self.sys);
        match apply::ban_pinned(&self.files, &check.plan, &mut restarter) {
            Ok(Some(c)) => self.log(&format!("{name}: {}", irqbalance::change_line(&c, "added"))),
            Ok(None) => {}
            Err(e) => self.log(&format!("{name}: irqbalance: cannot ban the IRQs: {}", causes(&e))),
        }
        // Service isolation: only the contexts and rules rsskit recorded as its own.
        let dev_plan = check.plan.devices[0].clone();
        // A rule or context that keeps vanishing gets a setting's back-off (isolate2).
        let now = self.now_ms();
        let (mut held, mut contested) = (0u64, Vec::new());
        let keeper = &mut self.keeper;
        let mut may_put_back = |c: &tune::Created| match keeper.decide_object(now, name, &c.describe()) {
            Verdict::BackingOff { .. } => {
                held += 1;
                false
            }
            _ => {
                contested.extend(keeper.object_put_back(now, name, &c.describe()));
                true
            }
        };
        let events = crate::isolate::keep::keep(
            &self.sys,
            &self.files.root,
            &plan.identity,
            name,
            &dev_plan,
            &mut may_put_back,
        );
        for e in events {
            if matches!(e, crate::isolate::keep::KeepEvent::Failed(_)) {
                *m.problems.entry("drifted").or_default() += 1;
            }
            self.log(&e.to_string());
        }
        if held + contested.len() as u64 > 0 {
            *m.problems.entry("contested").or_default() += held + contested.len() as u64;
        }
        self.record(contested);
        // What this pass put back, in write order (for the hashed fields' follow-up).
        let mut written: Vec<tune::Setting> = Vec::new();
        for s in &check.settings {
            let now = self.now_ms();
            match self.keeper.decide(now, s) {
                Verdict::InPlace => continue,
                Verdict::Correct => {
                    let o = tune::write_one(&self.sys, s)
                        .unwrap_or_else(|e| Outcome::Refused { reason: e.to_string() });
                    // Who else writes it: looked for only when it becomes contested.
                    let suspect = if self.keeper.would_contest(now, s) {
                        self.suspect(crate::keeper::class(s))
                    } else {
                        None
                    };
                    let ev = self.keeper.outcome(now, s, cause, &o, suspect.as_deref());
                    self.record(ev);
                    if o == Outcome::Applied {
                        written.push(s.clone());
                    }
                    if o == Outcome::Applied && !self.keeper.contested(now, s) {
                        continue;
                    }
                }
                Verdict::Refused | Verdict::BackingOff { .. } => {}
            }
            let kind = if self.keeper.refused(s) {
                "refused"
            } else if self.keeper.contested(self.now_ms(), s) {
                "contested"
            } else {
                "drifted"
            };
            *m.problems.entry(kind).or_default() += 1;
        }
        self.push_hash_fields(name, written, &mut m);
        m.aligned = m.problems.is_empty();
        self.queue_stats(name, &mut m);
        m
    }

    /// Hashed fields put back alone do not reach a virtio_net device (it
    /// takes them only with ETHTOOL_SRSSH): as `apply` does, the device's
    /// key (or table) is written again after them (`tune::push_hash_fields`,
    /// the one rule), unless this pass wrote one after them anyway.
    fn push_hash_fields(&mut self, name: &str, written: Vec<tune::Setting>, m: &mut DeviceMetrics) {
        if !written.iter().any(|s| s.kind() == tune::Kind::HashFields) {
            return;
        }
        let again = match tune::push_hash_fields(&self.sys, written) {
            Ok(all) => all.into_iter().filter(|s| s.unchanged()),
            Err(e) => {
                self.log(&format!("{name}: cannot read the RSS key to follow the hashed fields: {e}"));
                *m.problems.entry("drifted").or_default() += 1;
                return;
            }
        };
        for s in again {
            match tune::write_one(&self.sys, &s) {
                Ok(Outcome::Applied) => self.log(&format!("{name}: {} after the hashed fields", s.what)),
                Ok(o) => {
                    self.log(&format!(
                        "{name}: {} failed ({o:?}): the device may hash the old fields",
                        s.what
                    ));
                    *m.problems.entry("drifted").or_default() += 1;
                }
                Err(e) => {
                    self.log(&format!("{name}: {} failed ({e}): the device may hash the old fields", s.what));
                    *m.problems.entry("drifted").or_default() += 1;
                }
            }
        }
    }

    /// Per RX queue packets (where the driver names them) and the imbalance
    /// over the last interval.
    fn queue_stats(&mut self, name: &str, m: &mut DeviceMetrics) {
        // nicres: qstats where the driver has them, its ethtool -S names otherwise.
        if let Ok(Some(d)) = softnet::nic_drop_counters(&self.sys.roots, name, self.sys.is_live()) {
            m.nic_drops = d.counters;
        }
        if !self.sys.is_live() {
            return;
        }
        let Ok(eth) = rsskit_linux::ethtool::Ethtool::open(name) else { return };
        let Ok(rsskit_linux::ethtool::Reported::Supported(stats)) = eth.stats() else { return };
        let q: BTreeMap<usize, u64> =
            softnet::rx_queue_stats(&stats).into_iter().map(|(q, (p, _))| (q, p)).collect();
        if let Some(prev) = self.last_packets.get(name) {
            let loads: Vec<f64> =
                q.iter().map(|(k, v)| v.saturating_sub(*prev.get(k).unwrap_or(&0)) as f64).collect();
            if loads.iter().any(|&x| x > 0.0) {
                m.imbalance = Some(softnet::imbalance(&loads));
            }
        }
        self.last_packets.insert(name.to_string(), q.clone());
        m.rx_queue_packets = q;
    }

    /// The verdict of one pass (`agent --once`): the devices checked, or
    /// every problem by name: every device not aligned, every device
    /// not checked and every plan not read; "all aligned" only for devices
    /// actually checked.
    pub fn once_verdict(&self) -> Result<usize, String> {
        let snap = self.shared.lock().map(|s| s.clone()).unwrap_or_default();
        let mut problems: Vec<String> = self.unchecked.clone();
        problems.extend(self.refused.iter().map(|e| format!("plan not read: {e}")));
        let bad: Vec<&str> = snap
            .devices
            .iter()
            .filter(|d| !d.aligned && self.checked.contains(&d.device))
            .map(|d| d.device.as_str())
            .collect();
        if !bad.is_empty() {
            problems.insert(0, format!("not aligned after one check: {}", bad.join(", ")));
        }
        if !problems.is_empty() {
            return Err(problems.join("; "));
        }
        Ok(self.checked.len())
    }

    /// The loop: the first pass, then link events, the periodic re-check
    /// every `interval` and reloads on `hup`, until the stop flag. `Err`
    /// only when the rtnetlink socket cannot be opened on a live host.
    pub fn run(
        &mut self,
        interval: Duration,
        hup: &AtomicBool,
        notify: &mut dyn FnMut(Notify),
    ) -> std::io::Result<()> {
        // Link events only on the live host (a fixture tree has none).
        let mut watch = if self.sys.is_live() { Some(LinkWatch::open()?) } else { None };
        let stop = self.stop.clone();
        let agent = self;
        // ifindex -> (name, up) of the links seen, to tell a new link from a change.
        let mut links: BTreeMap<u32, (String, bool)> = BTreeMap::new();
        for name in agent.sys.interfaces().unwrap_or_default() {
            if let Some(i) = ifindex_of(&agent.sys, &name) {
                let up =
                    std::fs::read_to_string(agent.sys.roots.sys.join("class/net").join(&name).join("flags"))
                        .ok()
                        .and_then(|f| u32::from_str_radix(f.trim().trim_start_matches("0x"), 16).ok())
                        .is_some_and(|f| f & libc::IFF_UP as u32 != 0);
                links.insert(i, (name, up));
            }
        }
        agent.pass(Cause::Start, None);
        notify(Notify::Ready { plans: agent.plans.len(), links: watch.is_some() });
        agent.log(&format!(
            "ready: re-checking every {:.1} s{}",
            interval.as_secs_f64(),
            if watch.is_some() { " and on link events" } else { "" }
        ));
        let mut next = Instant::now() + interval;
        while !stop.load(Ordering::Relaxed) {
            if hup.swap(false, Ordering::Relaxed) {
                agent.log("SIGHUP: reloading the plans");
                notify(Notify::Reloading);
                agent.load();
                agent.pass(Cause::Reload, None);
                notify(Notify::Reloaded);
            }
            let wait = next.saturating_duration_since(Instant::now()).min(Duration::from_millis(250));
            let events = match watch.as_mut() {
                Some(w) => w.recv(wait).unwrap_or_else(|e| {
                    agent.log(&format!("rtnetlink: {e}; relying on the periodic check"));
                    watch = None;
                    Vec::new()
                }),
                None => {
                    std::thread::sleep(wait);
                    Vec::new()
                }
            };
            let mut due: BTreeMap<String, Cause> = BTreeMap::new();
            for e in events {
                match e {
                    LinkEvent::New { ifindex, name: Some(name), up } => {
                        let cause = match links.get(&ifindex) {
                            None => Some(Cause::NewLink),
                            Some((old, _)) if *old != name => Some(Cause::NewLink),
                            Some((_, was_up)) if up && !was_up => Some(Cause::LinkUp),
                            _ => None,
                        };
                        links.insert(ifindex, (name.clone(), up));
                        if let Some(c) = cause {
                            if c == Cause::NewLink {
                                // A device that appears again gets refused settings retried.
                                agent.keeper.forget(&name);
                                agent.queues.remove(&name);
                                agent.last_packets.remove(&name);
                            }
                            due.entry(name).and_modify(|x| *x = (*x).min(c)).or_insert(c);
                        }
                    }
                    LinkEvent::New { .. } => {}
                    LinkEvent::Del { ifindex } => {
                        if let Some((name, _)) = links.remove(&ifindex) {
                            if agent.plans.iter().any(|p| p.plan.name == name)
                                || agent.queues.contains_key(&name)
                            {
                                agent.log(&format!("{name}: link removed"));
                            }
                        }
                    }
                    LinkEvent::Overflow => {
                        agent.log("rtnetlink: events lost (buffer overflow): checking everything");
                        next = Instant::now();
                    }
                }
            }
            for (name, cause) in due {
                agent.pass(cause, Some(&name));
            }
            if Instant::now() >= next {
                agent.pass(Cause::Periodic, None);
                next = Instant::now() + interval;
            }
        }
        notify(Notify::Stopping);
        agent.log("stopping (signal): settings stay as they are");
        Ok(())
    }
}

/// The `/metrics` text now: the last pass's snapshot and the softnet
/// counters read for this scrape.
pub fn scrape(shared: &Mutex<Snapshot>, proc_dir: &std::path::Path) -> String {
    let mut snap = shared.lock().map(|s| s.clone()).unwrap_or_default();
    snap.softnet = std::fs::read_to_string(proc_dir.join("net/softnet_stat"))
        .ok()
        .and_then(|t| softnet::parse_softnet(&t).ok())
        .unwrap_or_default();
    metrics::render(&snap)
}

fn ifindex_of(sys: &Sysroot, name: &str) -> Option<u32> {
    std::fs::read_to_string(sys.roots.sys.join("class/net").join(name).join("ifindex"))
        .ok()?
        .trim()
        .parse()
        .ok()
}
