//! `rsskit plan`: the layout that keeps each flow on one CPU, per device:
//! CPUs, queue -> CPU (DragonFly's ringmap), indirection table, key, IRQ
//! affinity, XPS, RPS, RFS sizes, and the steering for rsskit's servers.
//! Read-only; `rsskit apply` writes it.

use crate::cmd::common::print_json;
use crate::cmd::host::planning::{make_plan, PlanArgs};
use anyhow::Result;
use rsskit_core::ringmap::is_mismatch;
use rsskit_host::plan::{DevicePlan, Plan};
use rsskit_linux::cpulist;
use std::fmt::Write as _;

const AFTER_HELP: &str = "\
CPUs: --cpus, else by rules printed as `note: rule NAME:` lines: isolated and
nohz_full CPUs (and --app-cpus) get no IRQ; the NIC's NUMA node first (then
its socket's other nodes); within each, one thread per physical core before
SMT siblings; cores already taking an earlier NIC's queues left out while the
node has enough
(docs/host-tuning.md). Queues are bound to those CPUs (ascending) with
DragonFly's ringmap (as `rsskit table`); the indirection table is the
ringmap's: fewest entries whose ring runs on another CPU than the host's
(hash & 127) % N. Past 128 CPUs or queues (rule size) queues are bound in
order and the table spreads evenly over them. Devices without hardware RSS (veth,
single-queue virtio) get RPS over the CPUs instead (or, with --software-rss
xdp, rsskit's XDP Toeplitz steering: `rsskit xdp-steer`); devices with it get
RPS off (no double steering). RFS sizes only when asked (rounded up to a power of
two, as the kernel does).

Examples:
  rsskit plan --iface eth0
  rsskit plan --iface eth0 --iface eth1 --key random --json > plan.json
  rsskit plan --iface eth0 --hash-fields udp4=4-tuple --hash-fields udp6=4-tuple
  rsskit apply plan.json --dry-run";

/// The flags `plan` and `apply` share.
#[derive(clap::Args, Debug)]
#[command(after_help = AFTER_HELP)]
pub struct Args {
    #[command(flatten)]
    pub p: PlanArgs,
    /// Print the plan as JSON (the input of `rsskit apply`).
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: Args) -> Result<()> {
    let (_, plan) = make_plan(&a.p)?;
    if a.json {
        print_json(&serde_json::to_value(&plan)?)
    } else {
        print!("{}", plan_text(&plan));
        Ok(())
    }
}

fn cpus_text(c: &[usize]) -> String {
    if c.is_empty() {
        "off".into()
    } else {
        cpulist::format(c)
    }
}

/// The plan as a readable table per device.
pub fn plan_text(p: &Plan) -> String {
    let mut s = String::new();
    for d in &p.devices {
        device_text(&mut s, d);
        s.push('\n');
    }
    if let Some(n) = p.rps_sock_flow_entries {
        let _ = writeln!(s, "host: net.core.rps_sock_flow_entries = {n}");
    }
    // The padded columns leave trailing blanks.
    s.lines().map(|l| format!("{}\n", l.trim_end())).collect()
}

fn device_text(s: &mut String, d: &DevicePlan) {
    let node = d.numa_node.map(|n| format!(", NUMA node {n}")).unwrap_or_default();
    let _ = writeln!(
        s,
        "{} ({}{node}): {}, {} RX / {} TX queues, unit {}",
        d.name,
        d.driver.as_deref().unwrap_or("no driver"),
        if d.hardware_rss { "hardware RSS" } else { "no hardware RSS" },
        d.rx.len(),
        d.tx.len(),
        d.unit
    );
    let order: Vec<String> = d.cpus.iter().map(usize::to_string).collect();
    let how = if d.notes.iter().any(|n| n.starts_with("rule size:")) {
        "queues bound in order"
    } else {
        "ringmap index order"
    };
    let _ = writeln!(s, "  CPUs: {} ({how}); grid {}", order.join(","), d.grid);
    let _ = writeln!(s, "  {:<7} {:>4}  {:<22} {:<10} xps / rfs", "queue", "cpu", "irq", "rps");
    let irq_of = |irq: Option<u32>| match irq.and_then(|i| d.irqs.iter().find(|x| x.irq == i)) {
        Some(x) => format!("{} {}", x.irq, x.name),
        None => "-".into(),
    };
    let cpu = |c: Option<usize>| c.map_or("-".to_string(), |c| c.to_string());
    for q in &d.rx {
        let rfs = q.rps_flow_cnt.map(|n| format!("rps_flow_cnt {n}")).unwrap_or_default();
        let _ = writeln!(
            s,
            "  rx-{:<4} {:>4}  {:<22} {:<10} {rfs}",
            q.queue,
            cpu(q.cpu),
            irq_of(q.irq),
            cpus_text(&q.rps_cpus)
        );
    }
    for q in &d.tx {
        let xps = q.xps_cpus.as_ref().map_or("- (one TX queue)".to_string(), |x| cpus_text(x));
        let _ = writeln!(s, "  tx-{:<4} {:>4}  {:<22} {:<10} {xps}", q.queue, cpu(q.cpu), irq_of(q.irq), "");
    }
    if let Some(t) = &d.table {
        let mm = match (d.table_mismatches, d.current_table_mismatches, d.min_mismatches) {
            (Some(m), Some(c), Some(min)) => {
                format!("; mismatches {m} (now {c}, fewest possible {min})")
            }
            _ => String::new(),
        };
        let n = d.cpus.len();
        // The host-pick marks are DragonFly's model: only where the ringmap laid the table.
        let model = d.table_mismatches.is_some();
        let legend = if model { format!("; * = ring not on (i & 127) % {n}") } else { String::new() };
        let _ = writeln!(s, "  indirection table ({} entries{mm}{legend}):", t.len());
        let ring_cpu: Vec<Option<usize>> = d.rx.iter().map(|q| q.cpu).collect();
        for (row, chunk) in t.chunks(16).enumerate().take(8) {
            let cells: String = chunk
                .iter()
                .enumerate()
                .map(|(j, &r)| {
                    let i = row * 16 + j;
                    let off = model && is_mismatch(i, r as usize, &ring_cpu, &d.cpus);
                    format!("{r:>3}{}", if off { '*' } else { ' ' })
                })
                .collect();
            let _ = writeln!(s, "    {:>4}:{cells}", row * 16);
        }
        if t.len() > 128 {
            let repeats = t.chunks(128).all(|c| c == &t[..c.len()]);
            let what = if repeats { "repeat the first 128" } else { "not shown" };
            let _ = writeln!(s, "    (entries 128-{} {what})", t.len() - 1);
        }
    }
    match &d.key {
        Some(k) => {
            let _ = writeln!(s, "  key: {} ({} bytes): {k}", d.key_source, k.len() / 2);
        }
        None => {
            let _ = writeln!(s, "  key: keep the NIC's");
        }
    }
    for h in &d.hash_fields {
        let _ = writeln!(s, "  hashed fields {}: {}", h.flow, h.fields.join(", "));
    }
    // nicres: NIC resources.
    if let Some(c) = &d.channels {
        let _ = writeln!(s, "  {}", c.reason);
    }
    if d.rx_ring.is_some() || d.tx_ring.is_some() {
        let n = |v: Option<u32>| v.map_or("kept".to_string(), |n| n.to_string());
        let _ = writeln!(s, "  rings: rx {}, tx {}", n(d.rx_ring), n(d.tx_ring));
    }
    if let Some(c) = &d.coalesce {
        let _ = writeln!(s, "  coalescing: {c}");
    }
    if let Some(x) = &d.xdp_steer {
        let _ =
            writeln!(s, "  XDP software RSS on CPUs {} (RPS off): {}", cpulist::format(&x.cpus), x.command);
    }
    isolation_text(s, d);
    // napi:
    for t in &d.napi_threads {
        let _ = writeln!(
            s,
            "  NAPI thread napi/{}-{} (rx-{}) on CPUs {}",
            d.name,
            t.napi_id,
            t.queue,
            cpulist::format(&t.cpus)
        );
    }
    if let Some(v) = d.napi_defer_hard_irqs {
        let _ = writeln!(s, "  napi_defer_hard_irqs: {v}");
    }
    if let Some(v) = d.gro_flush_timeout {
        let _ = writeln!(s, "  gro_flush_timeout: {v} ns");
    }
    // symplan
    if let Some(x) = &d.input_xfrm {
        let _ = writeln!(s, "  input_xfrm: {x} (symmetric hashing by the NIC)");
    }
    let st = &d.steering;
    let _ = writeln!(s, "  steering for rsskit servers: {} on CPUs {}", st.mode, cpulist::format(&st.cpus));
    let _ = writeln!(s, "    ({})", st.reason);
    let key = st.key.as_ref().map(|k| format!(" --key {k}")).unwrap_or_default();
    let _ = writeln!(
        s,
        "    e.g. rsskit udp-echo --bind ADDR:PORT --steer {} --cpus {}{key}",
        st.mode,
        cpulist::format(&st.cpus)
    );
    for n in &d.notes {
        let _ = writeln!(s, "  note: {n}");
    }
}

/// Service isolation: per spec, its context and the rules into it.
fn isolation_text(s: &mut String, d: &DevicePlan) {
    for iso in &d.isolation {
        let queues: Vec<usize> = iso.queues.iter().map(|&q| q as usize).collect();
        let _ = writeln!(
            s,
            "  isolate {}: new RSS context over queues {} (CPUs {}), table of {} entries; the main table leaves them out",
            iso.spec,
            cpulist::format(&queues),
            cpulist::format(&iso.cpus),
            iso.table.len()
        );
        for r in &iso.rules {
            let _ = writeln!(s, "    rule: {r} -> the new context");
        }
    }
}
