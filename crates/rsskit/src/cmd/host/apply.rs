//! `rsskit apply`: writes a plan (from `rsskit plan --json`, or made from
//! the same flags): shows the diff, saves what it replaces, writes every
//! setting, reads each back and reports what the kernel or driver refused.
//! `--restore FILE` writes a save file back.

use crate::cmd::host::planning::{asked_not_planned, load_plan, make_plan_on, refused_exit, PlanArgs};
use crate::cmd::host::report::{diff_line, irqbalance_advice, print_step};
use crate::cmd::host::sysroot;
use anyhow::{bail, Result};
use rsskit_host::apply::{self, ApplyOptions, HostRestarter, Locked, SaveTo};
use rsskit_host::sysroot::Sysroot;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

const AFTER_HELP: &str = "\
Writes, per device: the RSS indirection table and key (ethtool ETHTOOL_SRSSH),
the hashed fields per flow type when asked (ETHTOOL_SRXFH),
IRQ affinities (/proc/irq/N/smp_affinity_list), rps_cpus, rps_flow_cnt and
xps_cpus (/sys/class/net/IF/queues/*), and net.core.rps_sock_flow_entries.
Before writing it saves the values it replaces (--save FILE, else
/var/lib/rsskit/rsskit-saved-<UTC time>.json; with --sysroot DIR, under
DIR/var/lib/rsskit). The directory is created with mode 0700 (an existing one
must be root's and writable by no one else); the file is created new with
mode 0600 and never overwrites an earlier save. Every value is read back, and
a setting the kernel or driver refused (a managed IRQ, a driver without
SRSSH) is reported with the reason while the others still apply.

A save file names each setting by kind and device/queue/IRQ (rps_cpus of
eth0 queue 3, irq_affinity of eth0 IRQ 41, rss_key of eth0...), never by
path. --restore derives each file or ethtool call from that, as apply does,
and checks every entry first (a known kind, an interface name the kernel
accepts, a queue or IRQ of that device, a valid value of the kind): if any
entry is bad it names it and writes nothing.

Exit status: 0 all applied; 1 error (nothing written); 2 some settings not
applied (listed; `rsskit apply --restore FILE` puts back what was written).

Examples:
  rsskit plan --iface eth0 --json > plan.json
  rsskit apply plan.json --dry-run
  rsskit apply plan.json --save before.json
  rsskit plan --iface eth0 --key random --json | rsskit apply - --dry-run
  rsskit apply --restore before.json";

#[derive(clap::Args, Debug)]
#[command(after_help = AFTER_HELP)]
pub struct Args {
    /// A plan from `rsskit plan --json`, `-` for stdin (default: plan now from the flags below).
    #[arg(value_name = "PLAN.json")]
    plan: Option<PathBuf>,
    #[command(flatten)]
    pub p: PlanArgs,
    /// Show the changes and stop.
    #[arg(long)]
    dry_run: bool,
    /// Save the values replaced to FILE, a new file (default: /var/lib/rsskit/rsskit-saved-<time>.json).
    #[arg(long, value_name = "FILE")]
    save: Option<PathBuf>,
    /// Put back the values saved in FILE by an earlier apply.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["plan", "save"])]
    restore: Option<PathBuf>,
    /// Also keep the plan: store it under /etc/rsskit and apply it whenever the device appears (see `rsskit persist --help`).
    #[arg(long, conflicts_with = "restore")]
    persist: bool,
    #[command(flatten)]
    host: crate::cmd::host::HostArgs,
}

pub fn run(mut a: Args) -> Result<()> {
    a.host = a.host.with_fixture(a.p.sysroot.as_ref());
    let files = a.host.files();
    if a.restore.is_some() && a.p.any_set() {
        bail!("--restore takes no planning flags: it writes back what FILE holds");
    }
    if a.plan.is_some() && a.p.any_set() {
        bail!("give a plan file or planning flags (--iface, --cpus, --key, ...), not both");
    }
    // The plan file is read before the lock: waiting on stdin or a FIFO
    // must not hold every other writer off the host.
    let loaded = match (&a.plan, &a.restore) {
        (Some(path), None) => Some(load_plan(path)?),
        _ => None,
    };
    if let Some(d) = &a.p.from {
        bail!(
            "--from {}: apply writes the live host and a capture is read-only; plan it with \
             `rsskit plan --from DIR --json > plan.json`, then apply that plan on the host it came from",
            d.display()
        );
    }
    let sys = sysroot(a.p.sysroot.as_ref())?;
    // One writer at a time, from before the current values are read (the
    // save file must hold what this run replaces, not a half-written state).
    let what = if a.restore.is_some() { "rsskit apply --restore" } else { "rsskit apply" };
    let locked = if a.dry_run { None } else { Some(Locked::take(&sys, &files, what, &|| false)?) };
    if let Some(file) = &a.restore {
        return restore(&sys, locked.as_ref(), file);
    }
    let plan = match loaded {
        Some(p) => p,
        None => make_plan_on(&sys, &a.p)?,
    };
    let (changes, total) = match &locked {
        Some(l) => l.changes(&plan)?,
        None => apply::preview(&sys, &plan)?,
    };
    let unplanned = if a.plan.is_none() { asked_not_planned(&a.p, &plan) } else { Vec::new() };
    println!("Changes ({} of {total} settings; the others are already as planned):", changes.len());
    for s in &changes {
        println!("{}", diff_line(s));
    }
    for u in &unplanned {
        println!("  REFUSED  {u}");
    }
    for d in &plan.devices {
        for iso in &d.isolation {
            if rsskit_host::isolate::write::in_place(&sys, &d.name, iso)? {
                println!("  ok       {:<8} isolation {}: already in place", d.name, iso.spec);
                continue;
            }
            println!(
                "  create   {:<8} isolation {}: an RSS context over queues {:?}, rules {}",
                d.name,
                iso.spec,
                iso.queues,
                iso.rules.join("; ")
            );
        }
    }
    // XDP software RSS lives with the process that attached it (a BPF
    // link): apply turns RPS off and says what to run.
    for d in &plan.devices {
        if let Some(x) = &d.xdp_steer {
            // The command as rsskit makes it (not the file's text).
            println!(
                "{}: XDP software RSS instead of RPS: run `rsskit xdp-steer --iface {} --cpus {}` (it detaches when stopped)",
                d.name,
                d.name,
                rsskit_linux::cpulist::format(&x.cpus)
            );
        }
    }
    irqbalance_advice(&sys, &plan, a.persist && !a.dry_run);
    let Some(locked) = locked else {
        println!("dry run: nothing written");
        return Ok(());
    };
    let opts = ApplyOptions {
        save: a.save.clone().map_or(SaveTo::StateDir, SaveTo::File),
        persist: a.persist,
        now: SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs()),
    };
    let mut restarter = HostRestarter::new(&files, &sys);
    let report = locked.apply(&plan, &changes, &opts, &mut restarter, &mut print_step)?;
    if report.failed == 0 {
        refused_exit(&unplanned, changes.len())?;
    }
    let failed = report.failed + unplanned.len();
    if failed > 0 {
        let _ = std::io::stdout().flush();
        eprintln!(
            "rsskit: {failed} of {} settings not applied (listed above); the others are in place. \
             `rsskit apply --restore {}` puts back everything written.",
            changes.len(),
            report.save.as_deref().unwrap_or(Path::new("FILE")).display()
        );
        std::process::exit(2);
    }
    Ok(())
}

fn restore(sys: &Sysroot, locked: Option<&Locked>, file: &Path) -> Result<()> {
    // Every entry validated and checked against the host before anything
    // is written: one bad entry and nothing is.
    let changes = apply::restore_changes(sys, file)?;
    let created = apply::restore_created(file)?;
    println!("Restoring from {} ({} settings differ from the saved values):", file.display(), changes.len());
    for s in &changes {
        println!("{}", diff_line(s));
    }
    for c in &created {
        println!("  delete   {:<8} {} (if it still holds what apply created)", c.device(), c.describe());
    }
    let Some(locked) = locked else {
        println!("dry run: nothing written");
        return Ok(());
    };
    if changes.is_empty() && created.is_empty() {
        println!("nothing to do");
        return Ok(());
    }
    // The settings first (the main table takes its queues back), then the
    // rules and contexts apply created: no flow is left without a table.
    let mut failed = if changes.is_empty() { 0 } else { locked.write(&changes, &mut print_step)? };
    // nicres: a channel count put back first; the rest read after it.
    let rest = apply::restore_rest(sys, file, &changes)?;
    if !rest.is_empty() {
        println!("Then ({} settings differ on the queues as saved):", rest.len());
        for s in &rest {
            println!("{}", diff_line(s));
        }
        failed += locked.write(&rest, &mut print_step)?;
    }
    failed += locked.remove_created(&created, &mut print_step);
    if failed > 0 {
        let _ = std::io::stdout().flush();
        eprintln!(
            "rsskit: {failed} of {} saved settings and created objects could not be put back or deleted (listed above)",
            changes.len() + created.len()
        );
        std::process::exit(2);
    }
    Ok(())
}
