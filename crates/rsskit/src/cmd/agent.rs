//! `rsskit agent`: keeps every persisted plan true. The decisions (what
//! drifted, back-off, refused-once) are `rsskit_host::keeper`'s, with the
//! time passed in; this is the shell: rtnetlink link events, the periodic
//! re-check, signals (SIGHUP reloads the plans, SIGTERM/SIGINT stop),
//! sd_notify for `Type=notify`, one log line per event, and `/metrics`.

use super::persist::{self as p, HostArgs};
use anyhow::{bail, Context, Result};
use rsskit_host::keeper::{Cause, Event, Keeper, Policy, Verdict};
use rsskit_host::metrics::{self, DeviceMetrics, Snapshot};
use rsskit_host::metrics_server;
use rsskit_host::persist::{self, Persisted};
use rsskit_host::softnet;
use rsskit_host::sysroot::Sysroot;
use rsskit_host::tune::{self, Outcome};
use rsskit_linux::rtnl::{LinkEvent, LinkWatch};
use std::collections::BTreeMap;
use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const AFTER_HELP: &str = "\
Reads the plans `rsskit apply --persist` stored (/etc/rsskit/devices/) and
keeps them applied on the devices present: on a new link or a link coming up
(rtnetlink), when the queue count changed, and every --interval seconds it
reads every planned setting (channels, table, key, hashed fields, IRQ
affinity, XPS, RPS) and puts back what drifted, logging the setting, the old
and new value and the cause; hashed fields put back are followed by the
device's key written again (virtio_net takes fields only with it). A setting put back 3 times within 5 minutes is
reported as contested (with irqbalance named when it runs) and left alone
for a back-off that doubles up to an hour; a setting the kernel or driver
refuses is reported once and retried only when the device appears again or
on SIGHUP. Bans pinned IRQs in irqbalance's options when it is installed.

--once checks and corrects once and exits: 1 if a device is not aligned,
could not be checked (the host lock busy, the device unreadable) or a plan
file could not be read or is refused; 'all aligned' counts only devices
actually checked.

Signals: SIGHUP reloads the plans; SIGTERM or SIGINT stops. With
NOTIFY_SOCKET set (systemd Type=notify) it sends READY=1 after the first
check. Each check takes the host lock (/run/rsskit.lock) while it writes.
Plan files must be regular files owned by root, writable by no one else, in
a directory with the same properties; anything else is refused by name.

--metrics ADDR:PORT serves Prometheus text at /metrics: rsskit_device_aligned,
rsskit_device_problems, rsskit_corrections_total, rsskit_rx_queue_packets_total,
rsskit_rx_queue_imbalance_ratio, rsskit_softnet_{processed,dropped}_packets_total,
rsskit_softnet_time_squeeze_total, rsskit_plans, rsskit_plans_invalid. It
serves many clients at once: each connection has 2 s from accept to the
answer, at most 64 are open (a new one closes the oldest).

Examples:
  rsskit agent
  rsskit agent --interval 10 --metrics 127.0.0.1:9469";

#[derive(clap::Args, Debug)]
#[command(after_help = AFTER_HELP)]
pub struct Args {
    #[command(flatten)]
    host: HostArgs,
    /// Re-check every S seconds (besides link events), 1-86400.
    #[arg(long, value_name = "S", default_value_t = 30.0, value_parser = super::common::float_from(1.0, 86400.0, "seconds"))]
    interval: f64,
    /// Serve Prometheus metrics at http://ADDR:PORT/metrics.
    #[arg(long, value_name = "ADDR:PORT")]
    metrics: Option<SocketAddr>,
    /// Check and correct once, then exit (0: every persisted device checked and aligned, 1: not).
    #[arg(long)]
    once: bool,
    /// Read a tree shaped like /sys and /proc under DIR instead (tests; no link events there).
    #[arg(long, value_name = "DIR", hide = true)]
    sysroot: Option<PathBuf>,
}

fn log(line: &str) {
    // One line per event on stderr (unbuffered); journald stamps it.
    eprintln!("rsskit agent: {line}");
}

/// `sd_notify(3)` without libsystemd: one datagram to $NOTIFY_SOCKET.
fn sd_notify(msg: &str) {
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else { return };
    let Ok(sock) = std::os::unix::net::UnixDatagram::unbound() else { return };
    let bytes = std::os::unix::ffi::OsStrExt::as_bytes(path.as_os_str());
    let r = if let Some(name) = bytes.strip_prefix(b"@") {
        use std::os::linux::net::SocketAddrExt as _;
        std::os::unix::net::SocketAddr::from_abstract_name(name)
            .and_then(|a| sock.send_to_addr(msg.as_bytes(), &a))
    } else {
        sock.send_to(msg.as_bytes(), &path)
    };
    if let Err(e) = r {
        eprintln!("rsskit: warning: sd_notify to {}: {e}", path.to_string_lossy());
    }
}

struct Agent {
    host: HostArgs,
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
}

impl Agent {
    fn load(&mut self) {
        let (plans, bad) = persist::load_all(&self.host.root);
        for e in &bad {
            log(&format!("plan refused: {e} (nothing of it is used)"));
        }
        self.refused = bad.iter().map(|e| e.to_string()).collect();
        log(&format!(
            "{} plan(s) loaded from {}",
            plans.len(),
            persist::plans_dir(&self.host.root).display()
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
    fn pass(&mut self, cause: Cause, only: Option<&str>) {
        self.unchecked.clear();
        self.checked.clear();
        let present: Vec<(String, Persisted)> = match p::present(&self.sys, &self.plans) {
            Ok(v) => v.into_iter().map(|x| (x.name, x.plan.clone())).collect(),
            Err(e) => {
                log(&format!("cannot list interfaces: {e:#}"));
                self.unchecked.push(format!("every device: cannot list interfaces: {e:#}"));
                return;
            }
        };
        let todo: Vec<&(String, Persisted)> =
            present.iter().filter(|(n, _)| only.is_none_or(|o| o == n)).collect();
        let lock = if todo.is_empty() {
            None
        } else {
            match self.host.lock_unless("rsskit agent", &|| self.stop.load(Ordering::Relaxed)) {
                Ok(l) => Some(l),
                Err(e) => {
                    log(&format!("check skipped ({}): {e:#}; the next check retries", cause.as_str()));
                    for (name, _) in &todo {
                        self.unchecked.push(format!("{name}: not checked: {e:#}"));
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
            log(&e.to_string());
        }
    }

    fn device(&mut self, name: &str, plan: &Persisted, cause: Cause) -> DeviceMetrics {
        let mut m = DeviceMetrics { device: name.to_string(), ..DeviceMetrics::default() };
        let mut cause = cause;
        let mut check = match p::check_device(&self.sys, name, plan) {
            Ok(c) => c,
            Err(e) => {
                log(&format!("{name}: cannot read it: {e:#}"));
                self.unchecked.push(format!("{name}: not checked: cannot read it: {e:#}"));
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
                let o = p::write_channels(&self.sys, &ch, plan)
                    .unwrap_or_else(|e| Outcome::Refused { reason: format!("{e:#}") });
                let ev = self.keeper.outcome(now, &ch, cause, &o, None);
                self.record(ev);
                if o == Outcome::Applied {
                    match p::check_device(&self.sys, name, plan) {
                        Ok(c) => check = c,
                        Err(e) => log(&format!("{name}: cannot read it after setting channels: {e:#}")),
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
        match p::ban_pinned(&self.host, &self.sys, &check.plan) {
            Ok(Some(c)) => log(&format!("{name}: {}", p::irqbalance_line(&c, "added"))),
            Ok(None) => {}
            Err(e) => log(&format!("{name}: irqbalance: cannot ban the IRQs: {e:#}")),
        }
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
                        self.suspect(rsskit_host::keeper::class(s))
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
                log(&format!("{name}: cannot read the RSS key to follow the hashed fields: {e}"));
                *m.problems.entry("drifted").or_default() += 1;
                return;
            }
        };
        for s in again {
            match tune::write_one(&self.sys, &s) {
                Ok(Outcome::Applied) => log(&format!("{name}: {} after the hashed fields", s.what)),
                Ok(o) => {
                    log(&format!("{name}: {} failed ({o:?}): the device may hash the old fields", s.what));
                    *m.problems.entry("drifted").or_default() += 1;
                }
                Err(e) => {
                    log(&format!("{name}: {} failed ({e}): the device may hash the old fields", s.what));
                    *m.problems.entry("drifted").or_default() += 1;
                }
            }
        }
    }

    /// Per RX queue packets (where the driver names them) and the imbalance
    /// over the last interval.
    fn queue_stats(&mut self, name: &str, m: &mut DeviceMetrics) {
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
}

/// The `/metrics` text now: the last pass's snapshot and the softnet
/// counters read for this scrape.
fn scrape(shared: &Mutex<Snapshot>, proc_dir: &std::path::Path) -> String {
    let mut snap = shared.lock().map(|s| s.clone()).unwrap_or_default();
    snap.softnet = std::fs::read_to_string(proc_dir.join("net/softnet_stat"))
        .ok()
        .and_then(|t| softnet::parse_softnet(&t).ok())
        .unwrap_or_default();
    metrics::render(&snap)
}

/// `--once`'s exit: an error naming every device not aligned, every device
/// not checked and every plan not read; "all aligned" only for devices
/// actually checked.
fn once_verdict(agent: &Agent) -> Result<()> {
    let snap = agent.shared.lock().map(|s| s.clone()).unwrap_or_default();
    let mut problems: Vec<String> = agent.unchecked.clone();
    problems.extend(agent.refused.iter().map(|e| format!("plan not read: {e}")));
    let bad: Vec<&str> = snap
        .devices
        .iter()
        .filter(|d| !d.aligned && agent.checked.contains(&d.device))
        .map(|d| d.device.as_str())
        .collect();
    if !bad.is_empty() {
        problems.insert(0, format!("not aligned after one check: {}", bad.join(", ")));
    }
    if !problems.is_empty() {
        bail!("{} (see the lines above)", problems.join("; "));
    }
    log(&format!("{} persisted device(s) present and checked, all aligned", agent.checked.len()));
    Ok(())
}

fn ifindex_of(sys: &Sysroot, name: &str) -> Option<u32> {
    std::fs::read_to_string(sys.roots.sys.join("class/net").join(name).join("ifindex"))
        .ok()?
        .trim()
        .parse()
        .ok()
}

pub fn run(a: Args) -> Result<()> {
    let sys = super::plan::sysroot(a.sysroot.as_ref())?;
    let stop = super::common::stop_on_signals()?;
    let hup = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(libc::SIGHUP, hup.clone()).context("installing the SIGHUP handler")?;
    let interval = Duration::from_secs_f64(a.interval);
    let shared = Arc::new(Mutex::new(Snapshot::default()));
    let metrics_thread = match a.metrics {
        Some(addr) => {
            let l = TcpListener::bind(addr).with_context(|| format!("--metrics {addr}: cannot listen"))?;
            log(&format!("metrics at http://{}/metrics", l.local_addr().unwrap_or(addr)));
            let (s, d, st) = (shared.clone(), sys.roots.proc.clone(), stop.clone());
            Some(std::thread::spawn(move || {
                if let Err(e) = metrics_server::serve(l, &st, || scrape(&s, &d)) {
                    log(&format!("metrics: {e}; /metrics is not served"));
                }
            }))
        }
        None => None,
    };
    // Link events only on the live host (a fixture tree has none).
    let mut watch =
        if sys.is_live() { Some(LinkWatch::open().context("opening the rtnetlink socket")?) } else { None };
    let mut agent = Agent {
        stop: stop.clone(),
        unchecked: Vec::new(),
        checked: Vec::new(),
        refused: Vec::new(),
        host: a.host.with_fixture(a.sysroot.as_ref()),
        sys,
        plans: Vec::new(),
        invalid: 0,
        keeper: Keeper::new(Policy::default()),
        start: Instant::now(),
        queues: BTreeMap::new(),
        last_packets: BTreeMap::new(),
        corrections: BTreeMap::new(),
        shared,
    };
    agent.load();
    // ifindex -> (name, up) of the links seen, to tell a new link from a change.
    let mut links: BTreeMap<u32, (String, bool)> = BTreeMap::new();
    for name in agent.sys.interfaces().unwrap_or_default() {
        if let Some(i) = ifindex_of(&agent.sys, &name) {
            let up = std::fs::read_to_string(agent.sys.roots.sys.join("class/net").join(&name).join("flags"))
                .ok()
                .and_then(|f| u32::from_str_radix(f.trim().trim_start_matches("0x"), 16).ok())
                .is_some_and(|f| f & libc::IFF_UP as u32 != 0);
            links.insert(i, (name, up));
        }
    }
    agent.pass(Cause::Start, None);
    if a.once {
        stop.store(true, Ordering::Relaxed);
        if let Some(t) = metrics_thread {
            let _ = t.join();
        }
        return once_verdict(&agent);
    }
    sd_notify(&format!("READY=1\nSTATUS=keeping {} plan(s)", agent.plans.len()));
    log(&format!(
        "ready: re-checking every {:.1} s{}",
        interval.as_secs_f64(),
        if watch.is_some() { " and on link events" } else { "" }
    ));
    let mut next = Instant::now() + interval;
    while !stop.load(Ordering::Relaxed) {
        if hup.swap(false, Ordering::Relaxed) {
            log("SIGHUP: reloading the plans");
            sd_notify("RELOADING=1");
            agent.load();
            agent.pass(Cause::Reload, None);
            sd_notify("READY=1");
        }
        let wait = next.saturating_duration_since(Instant::now()).min(Duration::from_millis(250));
        let events = match watch.as_mut() {
            Some(w) => w.recv(wait).unwrap_or_else(|e| {
                log(&format!("rtnetlink: {e}; relying on the periodic check"));
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
                        if agent.plans.iter().any(|p| p.plan.name == name) || agent.queues.contains_key(&name)
                        {
                            log(&format!("{name}: link removed"));
                        }
                    }
                }
                LinkEvent::Overflow => {
                    log("rtnetlink: events lost (buffer overflow): checking everything");
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
    sd_notify("STOPPING=1");
    log("stopping (signal): settings stay as they are");
    if let Some(t) = metrics_thread {
        let _ = t.join();
    }
    Ok(())
}
