//! How `apply`, `apply --restore` and `persist apply` print what they
//! change and each step as it happens (`rsskit_host::apply::Step`): one
//! printer for the workflows the library runs.

use rsskit_host::apply::{self, Step};
use rsskit_host::irqbalance;
use rsskit_host::persist::Identity;
use rsskit_host::plan::Plan;
use rsskit_host::sysroot::Sysroot;
use rsskit_host::tune::{Kind, Outcome, Setting};

/// Prints what an irqbalance ban or unban changed.
pub fn say_irqbalance(c: &irqbalance::Change, verb: &str) {
    println!("{}", irqbalance::change_line(c, verb));
}

pub fn short(kind: Kind, v: &str) -> String {
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

pub fn diff_line(s: &Setting) -> String {
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

/// irqbalance moves the IRQ affinities set here unless they are banned:
/// what `--persist` does about it, or the advice to do it.
pub fn irqbalance_advice(sys: &Sysroot, plan: &Plan, bans_them: bool) {
    let Some((pid, irqs)) = apply::unbanned_irqs(sys, plan) else { return };
    let missing: Vec<String> = irqs.iter().map(|i| format!("--banirq={i}")).collect();
    if bans_them {
        // The apply bans them before writing and says so: no advice to do it by hand.
        println!(
            "irqbalance is running (pid {pid}): --persist bans the IRQs pinned here ({}) in its options file",
            missing.join(" ")
        );
    } else {
        eprintln!(
            "rsskit: warning: irqbalance is running (pid {pid}): it will move the IRQ affinities set here. \
             Exclude the IRQs by adding `{}` to IRQBALANCE_ARGS (/etc/default/irqbalance or \
             /etc/sysconfig/irqbalance) and restarting it, or stop it (systemctl stop irqbalance).",
            missing.join(" ")
        );
    }
}

/// One line per step of an apply or restore, as it happens.
pub fn print_step(step: Step) {
    match step {
        Step::NothingToDo => println!("nothing to do"),
        Step::SockFlowNotPersisted => println!(
            "note: net.core.rps_sock_flow_entries is host-wide and not persisted per device: set it in /etc/sysctl.d/"
        ),
        Step::Saved { path, values } => println!(
            "Saved the {values} current values to {} (rsskit apply --restore {} puts them back)",
            path.display(),
            path.display()
        ),
        Step::Unsaved(s) => {
            eprintln!("rsskit: warning: {} {}: current value unreadable, cannot be saved", s.device(), s.what)
        }
        Step::Banned(c) => say_irqbalance(c, "added"),
        Step::Writing => println!("Writing:"),
        Step::Wrote(s, o) => match o {
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
        },
        Step::PartlyTuned { device, total, failed } => println!(
            "{device}: {} of {total} settings applied, {failed} not: the device is partly tuned",
            total - failed
        ),
        Step::AllApplied(n) => println!("All {n} settings applied and read back."),
        Step::Persisted { device, identity, path } => {
            println!("Persisted the plan of {device} ({identity}) in {}", path.display())
        }
        Step::Installed(path) => println!("Installed {}", path.display()),
        Step::ChannelsSet(..) | Step::OfflineCpus(_) | Step::ToPutBack { .. } => {}
        // Service isolation.
        Step::Created(c) => println!("  created  {:<8} {}", c.device(), c.describe()),
        Step::Removed(c, r) => say_removed(c, r),
        Step::IsolationInPlace { device, spec } => {
            println!("  ok       {device:<8} isolation {spec}: already in place (its rules into a context with the planned table)")
        }
        Step::IsolationKept(e) => println!("  {e}"),
    }
}

/// A recorded context or rule: deleted, already gone, or someone else's now.
fn say_removed(c: &rsskit_host::tune::Created, r: &rsskit_host::isolate::write::Removal) {
    use rsskit_host::isolate::write::Removal;
    match r {
        Removal::Removed => println!("  deleted  {:<8} {}", c.device(), c.describe()),
        Removal::Gone => println!("  gone     {:<8} {}: already deleted", c.device(), c.describe()),
        Removal::Foreign(why) => println!(
            "  FOREIGN  {:<8} {}: {why}; not rsskit's any more, left alone",
            c.device(),
            c.describe()
        ),
        Removal::Refused(why) => println!("  REFUSED  {:<8} delete {}: {why}", c.device(), c.describe()),
    }
}

/// One line per step of `persist apply IF` (device `iface`, identity `id`).
pub fn print_put_back(iface: &str, id: &Identity, step: Step) {
    match step {
        Step::ChannelsSet(ch, Outcome::Applied) => {
            println!("  ok       {iface:<8} combined channels = {}", ch.new)
        }
        Step::ChannelsSet(_, o) => println!("  REFUSED  {iface:<8} combined channels: {o:?}"),
        Step::OfflineCpus(cpus) => eprintln!("rsskit: warning: {iface}: planned CPUs {cpus:?} are offline"),
        Step::ToPutBack { changes, total } => {
            println!("{iface} ({id}): {changes} of {total} settings to put back")
        }
        Step::Banned(c) => say_irqbalance(c, "added"),
        Step::Wrote(s, Outcome::Applied) => println!("  ok       {iface:<8} {} = {}", s.what, s.new),
        Step::Wrote(s, Outcome::Refused { reason }) => println!("  REFUSED  {iface:<8} {}: {reason}", s.what),
        Step::Wrote(s, Outcome::Changed { read_back, reason }) => {
            println!("  CHANGED  {iface:<8} {}: reads back {read_back} ({reason})", s.what)
        }
        Step::IsolationKept(e) => println!("  {e}"),
        _ => {}
    }
}
