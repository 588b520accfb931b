//! The planning flags `plan` and `apply` share ([`PlanArgs`]) and the plan
//! they ask for, read from the host.

use crate::cmd::host::{devices, source};
use anyhow::{anyhow, bail, Context, Result};
use rsskit_core::key::MICROSOFT_KEY;
use rsskit_core::{keycheck, RssKey};
use rsskit_host::plan::{self, KeyChoice, Plan, PlanOptions};
use rsskit_host::sysroot::Sysroot;
use rsskit_linux::cpulist;
use std::io::Write as _;
use std::path::PathBuf;

mod rebalance;

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
    /// CPUs for the application (e.g. 8-15): no IRQ or RPS there; the plan's steering runs
    /// udp-echo, http-serve and steer workers on them (toeplitz with the NIC's key).
    #[arg(long, value_name = "LIST")]
    pub app_cpus: Option<String>,
    /// Device unit of the first NIC: each NIC starts its queues on its own CPU set (0-8191).
    #[arg(long, default_value_t = 0, value_parser = crate::cmd::common::int_in(0usize, 8191))]
    pub unit: usize,
    /// RSS key: keep (the NIC's), random (checked), symmetric, microsoft, or hex of the device's key length.
    #[arg(long, default_value = "keep", value_name = "KEY")]
    pub key: String,
    /// RFS: flow table entries per RX queue (rps_flow_cnt), 0-1073741824.
    #[arg(long, value_name = "N", value_parser = crate::cmd::common::int_in(0u64, 1 << 30))]
    pub rps_flow_cnt: Option<u64>,
    /// RFS: global socket flow table entries (net.core.rps_sock_flow_entries), 0-1073741824.
    #[arg(long, value_name = "N", value_parser = crate::cmd::common::int_in(0u64, 1 << 30))]
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
    /// Plan the host captured in DIR (`rsskit capture DIR`) instead of this one, offline and read-only.
    #[arg(long, value_name = "DIR")]
    pub from: Option<PathBuf>,
    /// Give a service its own queues and CPUs: MATCH=CPUS (udp:443=8-15, tcp4:8080=2,3,
    /// or ethtool -N match words: 'ip4 dst-ip 10.0.0.0/24=4-7'). The queues whose IRQs go
    /// to those CPUs get a new RSS context, a flow rule steers the matches into it, and the
    /// main table leaves them out; repeat for several.
    #[arg(long = "isolate", value_name = "MATCH=CPUS")]
    pub isolate: Vec<String>,
    /// Read and write a tree shaped like /sys and /proc under DIR instead (tests).
    #[arg(long, value_name = "DIR", hide = true)]
    pub sysroot: Option<PathBuf>,
    // napi:
    /// NAPI: napi_defer_hard_irqs for each planned device (IRQs kept masked over N empty polls; 0-2147483647).
    #[arg(long, value_name = "N", value_parser = crate::cmd::common::int_in(0u64, plan::MAX_DEFER_HARD_IRQS))]
    pub napi_defer_hard_irqs: Option<u64>,
    /// NAPI: gro_flush_timeout for each planned device, in nanoseconds (0-3600000000000).
    #[arg(long, value_name = "NS", value_parser = crate::cmd::common::int_in(0u64, plan::MAX_GRO_FLUSH_TIMEOUT_NS))]
    pub gro_flush_timeout: Option<u64>,
    // nicres: NIC resources.
    /// Descriptors per RX ring (ethtool -G rx), 1 to the device's maximum; default: kept.
    #[arg(long, value_name = "N", value_parser = crate::cmd::common::int_in(1u32, u32::MAX))]
    pub rx_ring: Option<u32>,
    /// Descriptors per TX ring (ethtool -G tx), 1 to the device's maximum; default: kept.
    #[arg(long, value_name = "N", value_parser = crate::cmd::common::int_in(1u32, u32::MAX))]
    pub tx_ring: Option<u32>,
    /// Interrupt coalescing: adaptive (RX and TX moderation by load) or fixed:USECS[,FRAMES]
    /// (adaptive RX off, an RX interrupt USECS after a frame or at FRAMES frames); default: kept.
    #[arg(long, value_name = "MODE", value_parser = rsskit_host::nicres::CoalesceChoice::parse)]
    pub coalesce: Option<rsskit_host::nicres::CoalesceChoice>,
    /// Combined channels: keep (default: changing the count resets every queue and IRQ of a live
    /// NIC, dropping traffic for a moment), auto (one queue per planned CPU up to the device's
    /// maximum) or a count. The plan prints the decision and why.
    #[arg(long, value_name = "keep|auto|N", default_value = "keep", value_parser = rsskit_host::nicres::ChannelChoice::parse)]
    pub channels: rsskit_host::nicres::ChannelChoice,
    // symplan: symmetric hashing (issue 37 item 3).
    /// Symmetric hashing (a flow and its reverse on one queue): auto (the NIC's input_xfrm where
    /// the driver takes one, else the symmetric key), xfrm (ask the driver for the transform) or
    /// key (the symmetric key); the plan says which and why. --key only with xfrm.
    #[arg(long, value_enum, value_name = "auto|xfrm|key", num_args = 0..=1, default_missing_value = "auto")]
    pub symmetric: Option<SymmetricArg>,
}

// symplan
/// `--symmetric`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SymmetricArg {
    Auto,
    Xfrm,
    Key,
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
            || self.app_cpus.is_some()
            || self.unit != 0
            || self.key != "keep"
            || self.rps_flow_cnt.is_some()
            || self.rps_sock_flow_entries.is_some()
            || !self.hash_fields.is_empty()
            || self.rebalance.is_some()
            || self.software_rss != SoftwareRssArg::Rps
            // nicres
            || self.rx_ring.is_some()
            || self.tx_ring.is_some()
            || self.coalesce.is_some()
            || self.channels != rsskit_host::nicres::ChannelChoice::Keep
            || !self.isolate.is_empty()
            || self.napi_defer_hard_irqs.is_some()
            // symplan
            || self.symmetric.is_some()
            || self.gro_flush_timeout.is_some()
    }
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
            crate::cmd::common::check_key(&k, keycheck::KeyUse::full(), allow_weak_key)?;
            KeyChoice::Set { bytes: k.as_bytes().to_vec(), source: "given".into(), fit: false }
        }
    })
}

/// Makes the plan the flags ask for.
pub fn make_plan(p: &PlanArgs) -> Result<(Sysroot, Plan)> {
    let root = source(p.from.as_ref(), p.sysroot.as_ref())?;
    if p.rebalance.is_some() && p.from.is_some() {
        bail!("--rebalance measures live queue load: not with --from");
    }
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
    let app_cpus = match &p.app_cpus {
        Some(s) => Some(cpulist::parse(s).map_err(|e| anyhow!("--app-cpus: {e}"))?),
        None => None,
    };
    for (flag, v) in
        [("--rps-flow-cnt", p.rps_flow_cnt), ("--rps-sock-flow-entries", p.rps_sock_flow_entries)]
    {
        if v.is_some_and(|n| n > 1 << 30) {
            bail!("{flag}: at most 2^30 entries");
        }
    }
    // symplan: auto and key choose the key themselves.
    if p.symmetric.is_some_and(|s| s != SymmetricArg::Xfrm) && p.key != "keep" {
        bail!("--symmetric auto or key chooses the key itself: with --key, use --symmetric xfrm");
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
        app_cpus,
        napi_defer_hard_irqs: p.napi_defer_hard_irqs,
        gro_flush_timeout: p.gro_flush_timeout,
        // nicres
        rx_ring: p.rx_ring,
        tx_ring: p.tx_ring,
        coalesce: p.coalesce,
        channels: p.channels,
        // symplan
        symmetric: p.symmetric.map(|s| match s {
            SymmetricArg::Auto => rsskit_host::symmetric::SymmetricChoice::Auto,
            SymmetricArg::Xfrm => rsskit_host::symmetric::SymmetricChoice::Xfrm,
            SymmetricArg::Key => rsskit_host::symmetric::SymmetricChoice::Key,
        }),
    };
    let devs = devices(root, &p.ifaces)?;
    let mut plan = plan::plan(&topo, &devs, &opts).map_err(|e| match e {
        // The library names the option's field; here it is a flag.
        plan::PlanError::NapiValue { field, .. } => anyhow!("--{}: {e}", field.replace('_', "-")),
        e => anyhow!("{e}"),
    })?;
    if let Some(s) = p.rebalance {
        rebalance::rebalance_plan(root, &devs, &mut plan, s)?;
    }
    isolate(root, p, &mut plan)?;
    Ok(plan)
}

/// What the flags asked for on an interface named with --iface that the
/// plan left out (a key or hashed fields on a device without them), each
/// with the plan's reason: reported as refused (exit 2), never dropped
/// silently.
pub fn asked_not_planned(p: &PlanArgs, plan: &Plan) -> Vec<String> {
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
        // nicres
        if (p.rx_ring.is_some() || p.tx_ring.is_some()) && d.rx_ring.is_none() && d.tx_ring.is_none() {
            out.push(format!("{:<8} ring sizes: {}", d.name, note("ring sizes", "not planned")));
        }
        if p.coalesce.is_some() && d.coalesce.is_none() {
            out.push(format!("{:<8} coalescing: {}", d.name, note("coalescing", "not planned")));
        }
        // symplan: neither transform nor key planned, nor already on.
        let sym_on = d.notes.iter().any(|n| n.starts_with("symmetric hashing already on"));
        if p.symmetric.is_some() && d.input_xfrm.is_none() && d.key_source != "symmetric" && !sym_on {
            out.push(format!(
                "{:<8} symmetric hashing: {}",
                d.name,
                note("symmetric hashing", "not planned")
            ));
        }
    }
    out
}

/// Exit 2 when settings asked for were not planned (listed above).
pub fn refused_exit(unplanned: &[String], written: usize) -> Result<()> {
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

/// A plan from `rsskit plan --json`: a file, or `-` for stdin.
pub fn load_plan(path: &PathBuf) -> Result<Plan> {
    let text = if path.as_os_str() == "-" {
        std::io::read_to_string(std::io::stdin()).context("reading the plan from stdin")?
    } else {
        std::fs::read_to_string(path).with_context(|| format!("reading the plan {}", path.display()))?
    };
    Plan::from_json(&text).with_context(|| format!("{} is not a plan rsskit can apply", path.display()))
}

/// `--isolate`: each spec on every planned device (after the table is final).
fn isolate(root: &Sysroot, p: &PlanArgs, plan: &mut Plan) -> Result<()> {
    if p.isolate.is_empty() {
        return Ok(());
    }
    let specs = p
        .isolate
        .iter()
        .map(|s| rsskit_host::isolate::parse_spec(s))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| anyhow!("--{e}"))?;
    for d in &mut plan.devices {
        let support = rsskit_host::nic_rules::isolation_support(root, &d.name)?;
        rsskit_host::isolate::isolate_device(d, &specs, &support).map_err(|e| anyhow!("--{e}"))?;
    }
    Ok(())
}
