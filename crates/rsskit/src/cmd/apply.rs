//! `rsskit apply`: writes a plan (from `rsskit plan --json`, or made from
//! the same flags): shows the diff, saves what it replaces, writes every
//! setting, reads each back and reports what the kernel or driver refused.
//! `--restore FILE` writes a save file back.

use super::plan::{make_plan, sysroot, PlanArgs};
use anyhow::{bail, Context, Result};
use rsskit_host::plan::Plan;
use rsskit_host::sysroot::Sysroot;
use rsskit_host::tune::{self, Kind, Outcome, Setting};
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
    p: PlanArgs,
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
    host: super::persist::HostArgs,
}

fn short(kind: Kind, v: &str) -> String {
    match kind {
        Kind::RssKey if v.len() > 16 => format!("{}..({} bytes)", &v[..16], v.len() / 2),
        Kind::RssTable => {
            let n = v.split(',').count();
            let head: Vec<&str> = v.split(',').take(8).collect();
            format!("[{}{}] ({n} entries)", head.join(","), if n > 8 { ",.." } else { "" })
        }
        _ => v.to_string(),
    }
}

fn diff_line(s: &Setting) -> String {
    // `old` is only ever a valid value of its kind (tune::valid_value).
    let old = s.old.as_deref().map_or("(unreadable)".to_string(), |o| short(s.kind(), o));
    let mut line = format!("  {:<8} {:<40} {old} -> {}", s.device(), s.what, short(s.kind(), &s.new));
    if s.kind() == Kind::RssTable {
        if let Some(o) = &s.old {
            let changed = o.split(',').zip(s.new.split(',')).filter(|(a, b)| a != b).count();
            line.push_str(&format!("; {changed} entries change"));
        }
    }
    line
}

fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

fn load_plan(path: &PathBuf) -> Result<Plan> {
    let text = if path.as_os_str() == "-" {
        std::io::read_to_string(std::io::stdin()).context("reading the plan from stdin")?
    } else {
        std::fs::read_to_string(path).with_context(|| format!("reading the plan {}", path.display()))?
    };
    Plan::from_json(&text).with_context(|| format!("{} is not a plan rsskit can apply", path.display()))
}

/// A new save file in the state directory, named by the time.
fn default_save(root: &Sysroot, t: u64) -> Result<PathBuf> {
    let dir = root.state_dir();
    tune::prepare_save_dir(dir)?;
    let stamp = tune::utc_stamp(t);
    // Two applies in one second: a suffix, never an overwrite.
    let free = (0..100)
        .map(|i| {
            if i == 0 {
                format!("rsskit-saved-{stamp}.json")
            } else {
                format!("rsskit-saved-{stamp}-{i}.json")
            }
        })
        .map(|n| dir.join(n))
        .find(|p| std::fs::symlink_metadata(p).is_err());
    free.with_context(|| format!("no free save file name in {}", dir.display()))
}

/// What the flags asked for on an interface named with --iface that the
/// plan left out (a key or hashed fields on a device without them), each
/// with the plan's reason: reported as refused (exit 2), never dropped
/// silently.
fn asked_not_planned(p: &super::plan::PlanArgs, plan: &Plan) -> Vec<String> {
    let mut out = Vec::new();
    for d in plan.devices.iter().filter(|d| p.ifaces.contains(&d.name)) {
        let note = |word: &str, default: &str| {
            d.notes.iter().find(|n| n.contains(word)).cloned().unwrap_or_else(|| default.to_string())
        };
        if p.key != "keep" && d.key.is_none() {
            out.push(format!("{:<8} RSS key ({}): {}", d.name, p.key, note("key", "no RSS key")));
        }
        for (flow, _) in &p.hash_fields {
            if !d.hash_fields.iter().any(|h| &h.flow == flow) {
                out.push(format!(
                    "{:<8} {flow} hashed fields: {}",
                    d.name,
                    note("hashed fields", "the device does not report its hashed fields")
                ));
            }
        }
    }
    out
}

/// Exit 2 when settings asked for were not planned (listed above).
fn refused_exit(unplanned: &[String], written: usize) -> Result<()> {
    if unplanned.is_empty() {
        return Ok(());
    }
    let _ = std::io::stdout().flush();
    eprintln!(
        "rsskit: {} setting(s) asked for could not be planned (REFUSED above); the {written} others are in place.",
        unplanned.len()
    );
    std::process::exit(2);
}

pub fn run(mut a: Args) -> Result<()> {
    a.host = a.host.with_fixture(a.p.sysroot.as_ref());
    // One writer at a time, from before the current values are read (the
    // save file must hold what this run replaces, not a half-written state).
    let what = if a.restore.is_some() { "rsskit apply --restore" } else { "rsskit apply" };
    // The plan file is read before the lock: waiting on stdin or a FIFO
    // must not hold every other writer off the host.
    let loaded = match (&a.plan, &a.restore) {
        (Some(path), None) if !a.p.any_set() => Some(load_plan(path)?),
        _ => None,
    };
    let _lock = if a.dry_run { None } else { Some(a.host.lock(what)?) };
    if let Some(file) = &a.restore {
        if a.p.any_set() {
            bail!("--restore takes no planning flags: it writes back what FILE holds");
        }
        return restore(&sysroot(a.p.sysroot.as_ref())?, file, a.dry_run);
    }
    let (root, plan) = match &a.plan {
        Some(path) => {
            if a.p.any_set() {
                bail!("give a plan file or planning flags (--iface, --cpus, --key, ...), not both");
            }
            let plan = match loaded {
                Some(p) => p,
                None => load_plan(path)?,
            };
            (sysroot(a.p.sysroot.as_ref())?, plan)
        }
        None => make_plan(&a.p)?,
    };
    let all = tune::settings(&root, &plan)?;
    let changes: Vec<Setting> = all.iter().filter(|s| !s.unchanged()).cloned().collect();
    // Hashed fields alone would not reach a virtio_net device: see push_hash_fields.
    let changes = tune::push_hash_fields(&root, changes)?;
    let unplanned = if a.plan.is_none() { asked_not_planned(&a.p, &plan) } else { Vec::new() };
    println!("Changes ({} of {} settings; the others are already as planned):", changes.len(), all.len());
    for s in &changes {
        println!("{}", diff_line(s));
    }
    for u in &unplanned {
        println!("  REFUSED  {u}");
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
    if plan.devices.iter().any(|d| !d.irqs.is_empty()) {
        if let Some(ib) = root.irqbalance() {
            let irqs: Vec<u32> = plan.devices.iter().flat_map(|d| d.irqs.iter().map(|x| x.irq)).collect();
            let missing: Vec<String> = irqs
                .iter()
                .filter(|i| !ib.banned_irqs.contains(i))
                .map(|i| format!("--banirq={i}"))
                .collect();
            if !missing.is_empty() && a.persist && !a.dry_run {
                // ban_before_pinning bans them below and says so: no advice to do it by hand.
                println!(
                    "irqbalance is running (pid {}): --persist bans the IRQs pinned here ({}) in its options file",
                    ib.pid,
                    missing.join(" ")
                );
            } else if !missing.is_empty() {
                eprintln!(
                    "rsskit: warning: irqbalance is running (pid {}): it will move the IRQ affinities set here. \
                     Exclude the IRQs by adding `{}` to IRQBALANCE_ARGS (/etc/default/irqbalance or \
                     /etc/sysconfig/irqbalance) and restarting it, or stop it (systemctl stop irqbalance).",
                    ib.pid,
                    missing.join(" ")
                );
            }
        }
    }
    if a.dry_run {
        println!("dry run: nothing written");
        return Ok(());
    }
    if changes.is_empty() {
        println!("nothing to do");
        if a.persist {
            super::persist::ban_before_pinning(&a.host, &root, &plan)?;
            super::persist::after_apply(&a.host, &root, &plan)?;
        }
        return refused_exit(&unplanned, changes.len());
    }
    if a.persist {
        // Refuse before writing anything when a device cannot be persisted.
        super::persist::check_persistable(&root, &plan)?;
    }
    let t = now();
    let save_path = match &a.save {
        Some(p) => p.clone(),
        None => default_save(&root, t)?,
    };
    let save = tune::save_of(&changes, t);
    tune::write_save(&save_path, &save)?;
    println!(
        "Saved the {} current values to {} (rsskit apply --restore {} puts them back)",
        save.settings.len(),
        save_path.display(),
        save_path.display()
    );
    for s in changes.iter().filter(|s| s.old.is_none()) {
        eprintln!("rsskit: warning: {} {}: current value unreadable, cannot be saved", s.device(), s.what);
    }
    if a.persist {
        super::persist::ban_before_pinning(&a.host, &root, &plan)?;
    }
    let failed = write_all(&root, &changes)?;
    if a.persist {
        super::persist::after_apply(&a.host, &root, &plan)?;
    }
    if failed == 0 {
        refused_exit(&unplanned, changes.len())?;
    }
    let failed = failed + unplanned.len();
    if failed > 0 {
        let _ = std::io::stdout().flush();
        eprintln!(
            "rsskit: {failed} of {} settings not applied (listed above); the others are in place. \
             `rsskit apply --restore {}` puts back everything written.",
            changes.len(),
            save_path.display()
        );
        std::process::exit(2);
    }
    Ok(())
}

/// Writes every setting, prints one line each; returns how many failed.
fn write_all(root: &Sysroot, changes: &[Setting]) -> Result<usize> {
    println!("Writing:");
    let mut failed = 0;
    let mut per_dev: Vec<(String, usize, usize)> = Vec::new();
    for s in changes {
        let o = tune::write_one(root, s)?;
        let ok = o == Outcome::Applied;
        match &o {
            Outcome::Applied => {
                println!("  ok       {:<8} {} = {}", s.device(), s.what, short(s.kind(), &s.new))
            }
            Outcome::Refused { reason } => println!("  REFUSED  {:<8} {}: {reason}", s.device(), s.what),
            Outcome::Changed { read_back, reason } => println!(
                "  CHANGED  {:<8} {}: asked {}, reads back {} ({reason})",
                s.device(),
                s.what,
                short(s.kind(), &s.new),
                short(s.kind(), read_back)
            ),
        }
        match per_dev.iter_mut().find(|(d, _, _)| *d == s.device()) {
            Some(e) => {
                e.1 += 1;
                e.2 += usize::from(!ok);
            }
            None => per_dev.push((s.device().to_string(), 1, usize::from(!ok))),
        }
        failed += usize::from(!ok);
    }
    for (d, n, bad) in per_dev.iter().filter(|(_, _, bad)| *bad > 0) {
        println!("{d}: {} of {n} settings applied, {bad} not: the device is partly tuned", n - bad);
    }
    if failed == 0 {
        println!("All {} settings applied and read back.", changes.len());
    }
    Ok(failed)
}

fn restore(root: &Sysroot, file: &Path, dry_run: bool) -> Result<()> {
    // Every entry validated and checked against the host before anything
    // is written: one bad entry and nothing is.
    let save = tune::read_save(file)?;
    let changes: Vec<Setting> =
        tune::restore_settings(root, file, &save)?.into_iter().filter(|s| !s.unchanged()).collect();
    let changes = tune::push_hash_fields(root, changes)?;
    println!("Restoring from {} ({} settings differ from the saved values):", file.display(), changes.len());
    for s in &changes {
        println!("{}", diff_line(s));
    }
    if dry_run {
        println!("dry run: nothing written");
        return Ok(());
    }
    if changes.is_empty() {
        println!("nothing to do");
        return Ok(());
    }
    let failed = write_all(root, &changes)?;
    if failed > 0 {
        let _ = std::io::stdout().flush();
        eprintln!(
            "rsskit: {failed} of {} saved settings could not be put back (listed above)",
            changes.len()
        );
        std::process::exit(2);
    }
    Ok(())
}
