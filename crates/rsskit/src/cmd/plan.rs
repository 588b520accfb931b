//! `rsskit plan`: the layout that keeps each flow on one CPU, per device:
//! CPUs, queue -> CPU (DragonFly's ringmap), indirection table, key, IRQ
//! affinity, XPS, RPS, RFS sizes, and the steering for rsskit's servers.
//! Read-only; `rsskit apply` writes it.

use super::common::print_json;
use anyhow::{anyhow, bail, Context, Result};
use rsskit_core::key::MICROSOFT_KEY;
use rsskit_core::ringmap::is_mismatch;
use rsskit_core::{keycheck, RssKey};
use rsskit_host::plan::{self, DevicePlan, KeyChoice, Plan, PlanOptions};
use rsskit_host::sysroot::{DeviceState, Sysroot};
use rsskit_linux::cpulist;
use std::fmt::Write as _;
use std::path::PathBuf;

const AFTER_HELP: &str = "\
CPUs: --cpus, else the CPUs of the device's NUMA node (topped up with the
lowest other CPUs when it has fewer CPUs than RX queues), ascending.
Queues are bound to CPUs with DragonFly's ringmap (as `rsskit table`); the
indirection table is the ringmap's: fewest entries whose ring runs on another
CPU than the host's (hash & 127) % N. Devices without hardware RSS (veth,
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
#[derive(clap::Args, Debug, Clone, Default)]
pub struct PlanArgs {
    /// `--allow-weak-key` (a global flag, set by `main`).
    #[arg(skip)]
    pub allow_weak_key: bool,
    /// Interface to plan (repeat for several); default: every interface on a device (not lo or virtual ones).
    #[arg(long = "iface", value_name = "IF")]
    pub ifaces: Vec<String>,
    /// CPUs to use (e.g. 0-7,16-23); default: the device's NUMA node (topped up if it has fewer CPUs than queues).
    #[arg(long, value_name = "LIST")]
    pub cpus: Option<String>,
    /// Device unit of the first NIC: each NIC starts its queues on its own CPU set (0-8191).
    #[arg(long, default_value_t = 0, value_parser = super::common::int_in(0usize, 8191))]
    pub unit: usize,
    /// RSS key: keep (the NIC's), random (checked), symmetric, microsoft, or hex of the device's key length.
    #[arg(long, default_value = "keep", value_name = "KEY")]
    pub key: String,
    /// RFS: flow table entries per RX queue (rps_flow_cnt), 0-1073741824.
    #[arg(long, value_name = "N", value_parser = super::common::int_in(0u64, 1 << 30))]
    pub rps_flow_cnt: Option<u64>,
    /// RFS: global socket flow table entries (net.core.rps_sock_flow_entries), 0-1073741824.
    #[arg(long, value_name = "N", value_parser = super::common::int_in(0u64, 1 << 30))]
    pub rps_sock_flow_entries: Option<u64>,
    /// Hashed fields for a flow type, set with ETHTOOL_SRXFH: FLOW=4-tuple|2-tuple
    /// (FLOW: tcp4 udp4 sctp4 tcp6 udp6 sctp6; ip4 ip6 take 2-tuple); repeat for several.
    #[arg(long = "hash-fields", value_name = "FLOW=TUPLE", value_parser = hash_fields_arg)]
    pub hash_fields: Vec<(String, u64)>,
    /// Software RSS for devices without hardware RSS: rps (the kernel's hash) or
    /// xdp (rsskit's Toeplitz in XDP, run by `rsskit xdp-steer`; RPS off).
    #[arg(long, value_enum, default_value = "rps")]
    pub software_rss: SoftwareRssArg,
    /// Bucket rebalancing: measure each RX queue's load for S seconds (default 5)
    /// and move table entries from the busiest queues to the least busy (the
    /// current table, not the ringmap's); reports the imbalance before and after.
    #[arg(long, value_name = "S", num_args = 0..=1, default_missing_value = "5")]
    pub rebalance: Option<f64>,
    /// Read and write a tree shaped like /sys and /proc under DIR instead (tests).
    #[arg(long, value_name = "DIR", hide = true)]
    pub sysroot: Option<PathBuf>,
}

/// `--software-rss`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum SoftwareRssArg {
    #[default]
    Rps,
    Xdp,
}

/// `FLOW=4-tuple|2-tuple` -> (flow, RXH_* mask).
fn hash_fields_arg(s: &str) -> Result<(String, u64), String> {
    use rsskit_linux::ethtool::{rxh, FLOW_TYPES};
    let (flow, tuple) =
        s.split_once('=').ok_or_else(|| format!("'{s}' is not FLOW=4-tuple or FLOW=2-tuple"))?;
    if !FLOW_TYPES.iter().any(|f| f.name == flow) {
        let names: Vec<&str> = FLOW_TYPES.iter().map(|f| f.name).collect();
        return Err(format!("unknown flow type '{flow}' (one of {})", names.join(", ")));
    }
    let raw = match tuple {
        "4-tuple" if flow.starts_with("ip") => {
            return Err(format!("{flow} has no ports: only 2-tuple"));
        }
        "4-tuple" => rxh::IP_SRC | rxh::IP_DST | rxh::L4_B_0_1 | rxh::L4_B_2_3,
        "2-tuple" => rxh::IP_SRC | rxh::IP_DST,
        t => return Err(format!("'{t}' is not 4-tuple or 2-tuple")),
    };
    Ok((flow.to_string(), raw))
}

impl PlanArgs {
    /// Whether any planning flag differs from its default.
    pub fn any_set(&self) -> bool {
        !self.ifaces.is_empty()
            || self.cpus.is_some()
            || self.unit != 0
            || self.key != "keep"
            || self.rps_flow_cnt.is_some()
            || self.rps_sock_flow_entries.is_some()
            || !self.hash_fields.is_empty()
            || self.rebalance.is_some()
            || self.software_rss != SoftwareRssArg::Rps
    }
}

#[derive(clap::Args, Debug)]
#[command(after_help = AFTER_HELP)]
pub struct Args {
    #[command(flatten)]
    pub p: PlanArgs,
    /// Print the plan as JSON (the input of `rsskit apply`).
    #[arg(long)]
    pub json: bool,
}

pub fn sysroot(dir: Option<&PathBuf>) -> Result<Sysroot> {
    match dir {
        None => Ok(Sysroot::live()),
        Some(d) if d.join("sys").is_dir() && d.join("proc").is_dir() => {
            Ok(Sysroot::fixture_tree(d).context("--sysroot")?)
        }
        Some(d) => bail!("--sysroot {}: needs sys/ and proc/ directories in it", d.display()),
    }
}

/// The devices named, or every interface on a device.
pub fn devices(root: &Sysroot, names: &[String]) -> Result<Vec<DeviceState>> {
    if !names.is_empty() {
        let mut out = Vec::new();
        for n in names {
            if !root.exists(n) {
                bail!("interface '{n}' does not exist");
            }
            out.push(root.device(n).with_context(|| format!("reading {n}"))?);
        }
        return Ok(out);
    }
    let mut out = Vec::new();
    for n in root.interfaces()? {
        if n == "lo" {
            continue;
        }
        match root.device(&n) {
            Ok(d) if d.facts.has_device => out.push(d),
            Ok(_) => {}
            Err(e) => eprintln!("rsskit: warning: {n}: {e}"),
        }
    }
    if out.is_empty() {
        bail!(
            "no interface on a device found (virtual ones are left out by default): name them with --iface"
        );
    }
    Ok(out)
}

fn key_choice(s: &str, allow_weak_key: bool) -> Result<KeyChoice> {
    Ok(match s {
        "keep" => KeyChoice::Keep,
        "random" => {
            // 80 random bytes whose first 40 passed the key check; cut to the
            // device's key length (the hash of a 4-tuple uses 40 bytes).
            let a = RssKey::random().map_err(|e| anyhow!("--key random: {e}"))?;
            let b = RssKey::random().map_err(|e| anyhow!("--key random: {e}"))?;
            let bytes = [a.as_bytes(), b.as_bytes()].concat();
            KeyChoice::Set { bytes, source: "random".into(), fit: true }
        }
        "symmetric" => KeyChoice::Set { bytes: vec![0x6d, 0x5a], source: "symmetric".into(), fit: true },
        "microsoft" | "default" => {
            KeyChoice::Set { bytes: MICROSOFT_KEY.to_vec(), source: "microsoft".into(), fit: false }
        }
        hex => {
            let k = RssKey::from_hex(hex).map_err(|e| anyhow!("--key: {e}"))?;
            // For every hash type and the 128-entry table: the NIC's use.
            super::common::check_key(&k, keycheck::KeyUse::full(), allow_weak_key)?;
            KeyChoice::Set { bytes: k.as_bytes().to_vec(), source: "given".into(), fit: false }
        }
    })
}

/// Makes the plan the flags ask for.
pub fn make_plan(p: &PlanArgs) -> Result<(Sysroot, Plan)> {
    let root = sysroot(p.sysroot.as_ref())?;
    let plan = make_plan_on(&root, p)?;
    Ok((root, plan))
}

/// The plan the flags ask for, read from `root`.
pub fn make_plan_on(root: &Sysroot, p: &PlanArgs) -> Result<Plan> {
    let topo = root.topology();
    let cpus = match &p.cpus {
        Some(s) => Some(cpulist::parse(s).map_err(|e| anyhow!("--cpus: {e}"))?),
        None => None,
    };
    for (flag, v) in
        [("--rps-flow-cnt", p.rps_flow_cnt), ("--rps-sock-flow-entries", p.rps_sock_flow_entries)]
    {
        if v.is_some_and(|n| n > 1 << 30) {
            bail!("{flag}: at most 2^30 entries");
        }
    }
    let opts = PlanOptions {
        cpus,
        unit: p.unit,
        key: key_choice(&p.key, p.allow_weak_key)?,
        rps_flow_cnt: p.rps_flow_cnt,
        rps_sock_flow_entries: p.rps_sock_flow_entries,
        hash_fields: p.hash_fields.clone(),
        software_rss: match p.software_rss {
            SoftwareRssArg::Rps => plan::SoftwareRss::Rps,
            SoftwareRssArg::Xdp => plan::SoftwareRss::Xdp,
        },
    };
    let devs = devices(root, &p.ifaces)?;
    let mut plan = plan::plan(&topo, &devs, &opts).map_err(|e| anyhow!("{e}"))?;
    if let Some(s) = p.rebalance {
        super::rebalance::rebalance_plan(root, &devs, &mut plan, s)?;
    }
    Ok(plan)
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
    let _ = writeln!(s, "  CPUs: {} (ringmap index order); grid {}", order.join(","), d.grid);
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
        let _ =
            writeln!(s, "  indirection table ({} entries{mm}; * = ring not on (i & 127) % {n}):", t.len());
        let ring_cpu: Vec<Option<usize>> = d.rx.iter().map(|q| q.cpu).collect();
        for (row, chunk) in t.chunks(16).enumerate().take(8) {
            let cells: String = chunk
                .iter()
                .enumerate()
                .map(|(j, &r)| {
                    let i = row * 16 + j;
                    let mark = if is_mismatch(i, r as usize, &ring_cpu, &d.cpus) { '*' } else { ' ' };
                    format!("{r:>3}{mark}")
                })
                .collect();
            let _ = writeln!(s, "    {:>4}:{cells}", row * 16);
        }
        if t.len() > 128 {
            let _ = writeln!(s, "    (entries 128-{} repeat the first 128)", t.len() - 1);
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
    if let Some(x) = &d.xdp_steer {
        let _ =
            writeln!(s, "  XDP software RSS on CPUs {} (RPS off): {}", cpulist::format(&x.cpus), x.command);
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
