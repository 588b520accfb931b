//! `rsskit persist`: what `apply --persist` stored (`list`), applying one
//! device's plan when it appears (`apply IF`, run by the udev rule through
//! `rsskit-apply@IF.service`), and taking it all away (`remove [IF]`).
//! The workflows themselves are `rsskit_host::keep`'s.

use crate::cmd::host::report::{print_put_back, say_irqbalance};
use crate::cmd::host::{sysroot, HostArgs};
use anyhow::{anyhow, bail, Result};
use rsskit_host::apply::{ApplyError, HostRestarter, Locked};
use rsskit_host::keep;
use rsskit_host::persist;
use rsskit_host::sysroot::Sysroot;
use std::path::PathBuf;

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
    let files = host.files();
    let locked = Locked::take(sys, &files, &format!("rsskit persist apply {iface}"), &|| false)?;
    let mut restarter = HostRestarter::new(&files, sys);
    let report = locked.put_back(iface, p, &mut restarter, &mut |step| print_put_back(iface, &id, step))?;
    if report.channels_refused {
        bail!("{iface}: the queues differ from the plan and cannot be set: nothing else written");
    }
    if report.failed > 0 {
        std::process::exit(2);
    }
    Ok(())
}

fn list(host: &HostArgs, sys: &Sysroot) -> Result<()> {
    let l = keep::list(sys, &host.root)?;
    println!("{} persisted plan(s) in {}", l.plans.len(), persist::plans_dir(&host.root).display());
    for (p, now) in &l.plans {
        let now = now.as_ref().map_or("absent now".to_string(), |n| format!("present as {n}"));
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
    for e in &l.refused {
        println!("  INVALID {e}");
    }
    if !l.banned.is_empty() {
        let irqs: Vec<String> = l.banned.iter().map(u32::to_string).collect();
        println!("irqbalance: rsskit banned IRQs {}", irqs.join(","));
    }
    for path in &l.installed {
        println!("installed: {}", path.display());
    }
    Ok(())
}

fn remove(host: &HostArgs, sys: &Sysroot, iface: Option<&str>) -> Result<()> {
    let files = host.files();
    let locked = Locked::take(sys, &files, "rsskit persist remove", &|| false)?;
    let r = locked.remove_persisted(iface, &mut HostRestarter::new(&files, sys)).map_err(|e| match e {
        ApplyError::NoPlanFor(_) => anyhow!("{e} (see `rsskit persist list`)"),
        e => e.into(),
    })?;
    for (path, id) in &r.removed {
        println!("Removed {} ({id})", path.display());
    }
    for line in &r.isolation {
        println!("  {line}");
    }
    for e in &r.unreadable {
        eprintln!("rsskit: warning: left in place (not an rsskit plan rsskit can read): {e}");
    }
    if r.left > 0 {
        println!("{} plan(s) left: the udev rule, unit and irqbalance bans stay", r.left);
        return Ok(());
    }
    for path in &r.units_removed {
        println!("Removed {}", path.display());
    }
    if let Some(c) = &r.unbanned {
        say_irqbalance(c, "removed");
    }
    println!("Nothing of rsskit is applied at boot any more; settings in place now stay until reboot or `rsskit apply --restore`.");
    Ok(())
}
