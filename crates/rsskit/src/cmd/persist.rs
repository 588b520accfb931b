//! `rsskit persist`: what `apply --persist` stored (`list`), applying one
//! device's plan when it appears (`apply IF`, run by the udev rule through
//! `rsskit-apply@IF.service`), and taking it all away (`remove [IF]`).
//! Also the pieces `apply` and `agent` share: the host lock, the root, and
//! the per-device check (channels first, then every setting of the plan).

use super::plan::sysroot;
use anyhow::{anyhow, bail, Context, Result};
use rsskit_host::irqbalance::{self, Restarter};
use rsskit_host::lock::{self, HostLock};
use rsskit_host::persist::{self, Identity, Persisted};
use rsskit_host::plan::Plan;
use rsskit_host::sysroot::{DeviceState, Sysroot};
use rsskit_host::tune::{self, Outcome, Setting, Target};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const AFTER_HELP: &str = "\
`rsskit apply ... --persist` stores each device's plan in
/etc/rsskit/devices/ (one file per device, named by a stable identity: the
permanent MAC, else the bus device, else a MAC the administrator set), and
installs /etc/udev/rules.d/90-rsskit.rules and
/etc/systemd/system/rsskit-apply@.service (unless a package installed them),
so the plan is applied whenever the device appears. When irqbalance is
installed, the IRQs rsskit pins are banned in its options file
(/etc/default/irqbalance or /etc/sysconfig/irqbalance) and it is restarted.

`remove IF` removes that device's plan; `remove` without IF removes every
plan, the rule and unit rsskit installed (unedited ones only) and exactly the
irqbalance bans rsskit added. Settings already applied stay until reboot or
`rsskit apply --restore`.

Examples:
  rsskit apply plan.json --persist
  rsskit persist list
  rsskit persist apply eth0
  rsskit persist remove eth0
  rsskit persist remove";

/// Where rsskit keeps its files, and how long a writer waits for another.
#[derive(clap::Args, Debug, Clone)]
pub struct HostArgs {
    /// Prefix every rsskit file (/etc/rsskit, /run/rsskit.lock, the udev rule, the units, irqbalance's options) with DIR.
    #[arg(long, value_name = "DIR", default_value = "/")]
    pub root: PathBuf,
    /// Seconds to wait for another rsskit writer (apply, persist, agent) before refusing.
    #[arg(long, value_name = "S", default_value_t = 10.0, value_parser = super::common::float_in(-1.0, 3600.0, "seconds"))]
    pub lock_wait: f64,
}

impl HostArgs {
    /// With a fixture tree (`--sysroot DIR`) and no `--root`, rsskit's own
    /// files (lock, plans) live in the tree too, never on the real host.
    pub fn with_fixture(mut self, sysroot: Option<&PathBuf>) -> HostArgs {
        if let Some(d) = sysroot.filter(|_| self.is_host_root()) {
            self.root = d.clone();
        }
        self
    }

    /// Takes the host lock for `what`.
    pub fn lock(&self, what: &str) -> Result<HostLock> {
        Ok(lock::acquire(&self.root, Duration::from_secs_f64(self.lock_wait.max(0.0)), what)?)
    }

    /// Takes the host lock for `what`, giving up as soon as `stop()` says so.
    pub fn lock_unless(&self, what: &str, stop: &dyn Fn() -> bool) -> Result<HostLock> {
        Ok(lock::acquire_unless(&self.root, Duration::from_secs_f64(self.lock_wait.max(0.0)), what, stop)?)
    }

    /// Whether this is the live host's own root (only then is irqbalance restarted).
    pub fn is_host_root(&self) -> bool {
        self.root == Path::new("/")
    }
}

#[derive(clap::Args, Debug)]
#[command(after_help = AFTER_HELP)]
pub struct Args {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(clap::Subcommand, Debug)]
enum Cmd {
    /// The persisted plans, and which interface each matches now.
    List {
        #[command(flatten)]
        host: HostArgs,
        /// Read a tree shaped like /sys and /proc under DIR instead (tests).
        #[arg(long, value_name = "DIR", hide = true)]
        sysroot: Option<PathBuf>,
    },
    /// Apply the persisted plan of IF now (run by rsskit-apply@IF.service).
    Apply {
        /// The interface.
        iface: String,
        #[command(flatten)]
        host: HostArgs,
        #[arg(long, value_name = "DIR", hide = true)]
        sysroot: Option<PathBuf>,
    },
    /// Remove IF's plan; without IF every plan, the rule, the unit and rsskit's irqbalance bans.
    Remove {
        /// The interface (its identity now, or the name it was persisted under).
        iface: Option<String>,
        #[command(flatten)]
        host: HostArgs,
        #[arg(long, value_name = "DIR", hide = true)]
        sysroot: Option<PathBuf>,
    },
}

pub fn run(a: Args) -> Result<()> {
    match a.cmd {
        Cmd::List { host, sysroot: s } => list(&host.with_fixture(s.as_ref()), &sysroot(s.as_ref())?),
        Cmd::Apply { iface, host, sysroot: s } => {
            apply_one(&host.with_fixture(s.as_ref()), &sysroot(s.as_ref())?, &iface)
        }
        Cmd::Remove { iface, host, sysroot: s } => {
            remove(&host.with_fixture(s.as_ref()), &sysroot(s.as_ref())?, iface.as_deref())
        }
    }
}

fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// Restarts irqbalance only on the host's own root, and only when it runs.
pub struct HostRestarter {
    live: bool,
}

impl HostRestarter {
    pub fn new(host: &HostArgs, sys: &Sysroot) -> HostRestarter {
        HostRestarter { live: host.is_host_root() && sys.is_live() && sys.irqbalance().is_some() }
    }
}

impl Restarter for HostRestarter {
    fn restart(&mut self) -> Result<(), String> {
        if self.live {
            irqbalance::Systemctl.restart()
        } else {
            Err("not restarted: irqbalance is not running here (or --root names another tree); it reads the bans when it starts".into())
        }
    }
}

/// What an irqbalance ban or unban changed, as one line.
pub fn irqbalance_line(c: &irqbalance::Change, verb: &str) -> String {
    let irqs: Vec<String> = c.irqs.iter().map(u32::to_string).collect();
    let restarted = match &c.restarted {
        Ok(()) => "irqbalance restarted".to_string(),
        Err(e) => e.clone(),
    };
    format!("irqbalance: {verb} --banirq for IRQs {} in {}; {restarted}", irqs.join(","), c.file.display())
}

/// Prints what an irqbalance ban or unban changed.
pub fn say_irqbalance(c: &irqbalance::Change, verb: &str) {
    println!("{}", irqbalance_line(c, verb));
}

/// Whether every device of `plan` can be persisted (a stable identity, a
/// valid plan), checked before `apply --persist` writes anything.
pub fn check_persistable(sys: &Sysroot, plan: &Plan) -> Result<()> {
    for d in &plan.devices {
        persist::persisted_of(sys, d, 0)?;
    }
    Ok(())
}

/// Bans the IRQs `plan` pins in irqbalance (restarting it) before they are
/// written: a running irqbalance without the bans can move an IRQ in the
/// moment between rsskit's write and its restart (the lab saw it move 4 of
/// 8 to the device's NUMA node).
pub fn ban_before_pinning(host: &HostArgs, sys: &Sysroot, plan: &Plan) -> Result<()> {
    if let Some(c) = ban_pinned(host, sys, plan)? {
        say_irqbalance(&c, "added");
    }
    Ok(())
}

/// Bans the IRQs `plan` pins in irqbalance; what changed, if anything.
pub fn ban_pinned(host: &HostArgs, sys: &Sysroot, plan: &Plan) -> Result<Option<irqbalance::Change>> {
    let irqs: Vec<u32> = plan.devices.iter().flat_map(|d| d.irqs.iter().map(|x| x.irq)).collect();
    if irqs.is_empty() {
        return Ok(None);
    }
    Ok(irqbalance::ban(&host.root, &irqs, &mut HostRestarter::new(host, sys))?)
}

/// After `apply --persist` wrote `plan`: store each device's plan, install
/// the rule and unit (the IRQ bans came first: `ban_before_pinning`).
pub fn after_apply(host: &HostArgs, sys: &Sysroot, plan: &Plan) -> Result<()> {
    if plan.rps_sock_flow_entries.is_some() {
        println!("note: net.core.rps_sock_flow_entries is host-wide and not persisted per device: set it in /etc/sysctl.d/");
    }
    let t = now();
    for d in &plan.devices {
        let p = persist::persisted_of(sys, d, t)?;
        let path = persist::store(&host.root, &p)?;
        println!("Persisted the plan of {} ({}) in {}", d.name, p.identity, path.display());
    }
    for path in persist::install_units(&host.root)? {
        println!("Installed {}", path.display());
    }
    Ok(())
}

/// A persisted device present now.
pub struct Present<'a> {
    pub name: String,
    pub plan: &'a Persisted,
}

/// The persisted plans whose device is present now.
pub fn present<'a>(sys: &Sysroot, plans: &'a [Persisted]) -> Result<Vec<Present<'a>>> {
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
pub fn write_channels(sys: &Sysroot, s: &Setting, p: &Persisted) -> Result<Outcome> {
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
pub fn check_device(sys: &Sysroot, name: &str, p: &Persisted) -> Result<DeviceCheck> {
    let dev = sys.device(name)?;
    let online = sys.topology().online;
    let plan = persist::resolve(p, &dev, &online);
    let offline: Vec<usize> = p.plan.cpus.iter().copied().filter(|c| !online.contains(c)).collect();
    let channels = channels_setting(name, &dev, p);
    let settings = if channels.is_some() { Vec::new() } else { tune::settings(sys, &plan)? };
    Ok(DeviceCheck { plan, settings, channels, offline })
}

fn apply_one(host: &HostArgs, sys: &Sysroot, iface: &str) -> Result<()> {
    let (plans, bad) = persist::load_all(&host.root);
    for e in &bad {
        eprintln!("rsskit: warning: {e}: ignored");
    }
    let id = persist::identity(sys, iface)
        .ok_or_else(|| anyhow!("{iface}: no such interface, or it has no stable identity"))?;
    let Some(p) = persist::find(&plans, &id) else {
        if !bad.is_empty() {
            // An unreadable plan is not the same as no plan: it may be this one.
            bail!(
                "{iface} ({id}): no readable persisted plan, and {} plan file(s) could not be read (one may be its plan): nothing applied",
                bad.len()
            );
        }
        println!("{iface} ({id}): no persisted plan; nothing to do");
        return Ok(());
    };
    let _lock = host.lock(&format!("rsskit persist apply {iface}"))?;
    let mut c = check_device(sys, iface, p)?;
    let mut failed = 0;
    if let Some(ch) = &c.channels {
        match write_channels(sys, ch, p)? {
            Outcome::Applied => {
                println!("  ok       {iface:<8} combined channels = {}", ch.new);
                c = check_device(sys, iface, p)?;
            }
            o => {
                println!("  REFUSED  {iface:<8} combined channels: {o:?}");
                bail!("{iface}: the queues differ from the plan and cannot be set: nothing else written");
            }
        }
    }
    if !c.offline.is_empty() {
        eprintln!("rsskit: warning: {iface}: planned CPUs {:?} are offline", c.offline);
    }
    let changes: Vec<Setting> = c.settings.iter().filter(|s| !s.unchanged()).cloned().collect();
    let changes = tune::push_hash_fields(sys, changes)?;
    println!("{iface} ({id}): {} of {} settings to put back", changes.len(), c.settings.len());
    ban_before_pinning(host, sys, &c.plan)?;
    for s in &changes {
        match tune::write_one(sys, s)? {
            Outcome::Applied => println!("  ok       {iface:<8} {} = {}", s.what, s.new),
            Outcome::Refused { reason } => {
                failed += 1;
                println!("  REFUSED  {iface:<8} {}: {reason}", s.what)
            }
            Outcome::Changed { read_back, reason } => {
                failed += 1;
                println!("  CHANGED  {iface:<8} {}: reads back {read_back} ({reason})", s.what)
            }
        }
    }
    if failed > 0 {
        std::process::exit(2);
    }
    Ok(())
}

fn list(host: &HostArgs, sys: &Sysroot) -> Result<()> {
    let (plans, bad) = persist::load_all(&host.root);
    let here = present(sys, &plans).unwrap_or_default();
    println!("{} persisted plan(s) in {}", plans.len(), persist::plans_dir(&host.root).display());
    for p in &plans {
        let now = here
            .iter()
            .find(|x| x.plan.identity == p.identity)
            .map_or("absent now".to_string(), |x| format!("present as {}", x.name));
        println!(
            "  {:<30} {} (persisted as {}; {} RX / {} TX queues, CPUs {}); {now}",
            p.identity.file_name(),
            p.identity,
            p.plan.name,
            p.channels.rx,
            p.channels.tx,
            rsskit_linux::cpulist::format(&p.plan.cpus)
        );
    }
    for e in &bad {
        println!("  INVALID {e}");
    }
    let rec = irqbalance::read_record(&host.root)?;
    if !rec.added.is_empty() {
        let irqs: Vec<String> = rec.added.iter().map(u32::to_string).collect();
        println!("irqbalance: rsskit banned IRQs {}", irqs.join(","));
    }
    for (rel, _, text) in persist::INSTALLED {
        let path = host.root.join(rel);
        if std::fs::read_to_string(&path).is_ok_and(|t| t == text) {
            println!("installed: {}", path.display());
        }
    }
    Ok(())
}

fn remove(host: &HostArgs, sys: &Sysroot, iface: Option<&str>) -> Result<()> {
    let _lock = host.lock("rsskit persist remove")?;
    let (plans, bad) = persist::load_all(&host.root);
    let ids: Vec<Identity> = match iface {
        Some(name) => {
            let id = persist::identity(sys, name)
                .filter(|id| persist::find(&plans, id).is_some())
                .or_else(|| plans.iter().find(|p| p.plan.name == name).map(|p| p.identity.clone()))
                .ok_or_else(|| anyhow!("{name}: no persisted plan matches it (see `rsskit persist list`)"))?;
            vec![id]
        }
        None => plans.iter().map(|p| p.identity.clone()).collect(),
    };
    for id in &ids {
        let path = persist::remove(&host.root, id)?;
        println!("Removed {} ({id})", path.display());
    }
    if iface.is_none() {
        for e in &bad {
            eprintln!("rsskit: warning: left in place (not an rsskit plan rsskit can read): {e}");
        }
    }
    let left = persist::load_all(&host.root).0.len();
    if left > 0 {
        println!("{left} plan(s) left: the udev rule, unit and irqbalance bans stay");
        return Ok(());
    }
    for path in persist::remove_units(&host.root)? {
        println!("Removed {}", path.display());
    }
    if let Some(c) = irqbalance::unban(&host.root, &mut HostRestarter::new(host, sys))
        .context("undoing the irqbalance bans")?
    {
        say_irqbalance(&c, "removed");
    }
    println!("Nothing of rsskit is applied at boot any more; settings in place now stay until reboot or `rsskit apply --restore`.");
    Ok(())
}
