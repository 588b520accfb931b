//! `rsskit info`: the host's RSS setup, the Linux answer to FreeBSD's
//! `sysctl net.inet.rss`: CPUs and NUMA nodes; per interface its queues, RSS
//! key, indirection table, hashed fields, IRQs and their CPUs, RPS/XPS masks;
//! and the kernel's default RSS key.

use crate::cmd::common::print_json;
use anyhow::{bail, Result};
use rsskit_core::key::MICROSOFT_KEY;
use rsskit_host::isolate::IsolationSupport;
use rsskit_host::nic_rules::NicRules;
use rsskit_host::sysroot::Sysroot;
use rsskit_linux::cpulist;
use rsskit_linux::ethtool::params::{Coalesce, Rings, Via};
use rsskit_linux::ethtool::{Channels, EthtoolError, FlowHash, Reported, Rss};
use rsskit_linux::ethtool_nl::{Answer, Nic};
use rsskit_linux::netdev::{self, DefaultKey, IfaceFacts, IfaceIrq, Roots, RxQueue, TxQueue};
use rsskit_linux::netdev_nl::{self, QueueType};
use rsskit_linux::topology::Topology;
use serde_json::{json, Value};
use std::fmt::Write as _;

const AFTER_HELP: &str = "\
Reads /sys/devices/system/{cpu,node}, /sys/class/net/IF/queues, the device's
msi_irqs with /proc/interrupts and /proc/irq/N/smp_affinity_list,
/proc/sys/net/core/netdev_rss_key, and asks the driver: RSS (key, table, hash
function, input transform), channels, rings and coalescing through the ethtool
generic netlink family (RSS_GET, CHANNELS_GET, RINGS_GET, COALESCE_GET) where
the kernel has the command, else through the ethtool ioctl (ETHTOOL_GRSSH or
ETHTOOL_GRXFHINDIR, ETHTOOL_GCHANNELS, ETHTOOL_GRINGPARAM, ETHTOOL_GCOALESCE),
saying per query which answered; hashed fields and the driver name through the
ioctl (ETHTOOL_GRXFH, ETHTOOL_GDRVINFO). Each queue's NAPI instance, IRQ and NAPI thread come from
the kernel's netdev generic netlink family (queue-get, napi-get: Linux 6.8+);
where the kernel has no such map, the queue's IRQ is guessed from the IRQ
names in /proc/interrupts, and info says which source it used. What a driver does not implement (veth and lo have no RSS)
is shown as not reported, with the reason; it is not an error.

JSON fields (--json prints one object):
  cpus                 online CPU ids
  numa_nodes           [{node, cpus}]
  cpu_topology         [{cpu, core_id, package_id, node}] (null = unknown)
  default_key          {hex, len, initialised} or {error}; initialised is false
                       while the kernel key is all zero (no driver used it yet)
  interfaces           [interface], sorted by name; each:
    name, driver (null if unknown), operstate, mtu, numa_node, virtual
    rx_queue_count, tx_queue_count
    channels           {supported: true, rx, tx, other, combined, max_rx,
                        max_tx, max_other, max_combined} or {supported: false, reason}
    channels_via, rss_via  netlink | ioctl: which kernel interface answered
                       (null for a capture, which asks no kernel)
    rings              {supported: true, rx, tx, rx_max, tx_max, via} or
                       {supported: false, reason, via}; null for a capture
    coalesce           {supported: true, adaptive_rx, adaptive_tx, rx_usecs,
                       rx_frames, tx_usecs, tx_frames, via} or {supported:
                       false, reason, via}; null for a capture
    ethtool_netlink_unavailable  why no query went through netlink (the
                       kernel has no ethtool family), or null
    rss                {supported: true, source, key (hex, null if not given),
                        key_len, key_is (microsoft|kernel_default|symmetric|null),
                        key_check ({verdict: good|warn|weak, problems [text]}:
                        the check every --key gets; weak: rsskit refuses it
                        without --allow-weak-key; null: no key of 40+ bytes),
                        hfunc [names], input_xfrm [names], table [ring per entry],
                        table_size} or {supported: false, reason}
    hash_fields        {supported: true, flows: [{flow (tcp4, udp4, sctp4, ip4,
                        tcp6, udp6, sctp6, ip6), fields [ip_src, ip_dst,
                        l4_src_port, l4_dst_port, ...], tuple (4-tuple|2-tuple|
                        none|other), raw}]} or {supported: false, reason}
    queue_map          {source (kernel netlink | guessed from IRQ names),
                        kernel_unavailable (why the kernel's map was not
                        used, null when it was)}
    flow_rules         {rules [text, as ethtool -N words], opaque [{location,
                        reason}], contexts {id: {id, key, table, xfrm}},
                        unreadable_contexts {id: reason}, not_listed (the
                        driver's answer when it lists none)} or {unreadable}
    isolation          {rss_contexts {supported, reason}, flow_rules
                        {supported, reason}, possible (whether plan
                        --isolate could work here)} or {unreadable}
    rx_queues          [{queue, rps_cpus, rps_mask, rps_flow_cnt, rss_table_entries,
                        napi_id, napi_pid, irq_source, irq, irq_name, irq_cpus,
                        irq_effective_cpus}]; napi_id and napi_pid (the NAPI
                        thread, when threaded) only from the kernel's map;
                        irq_source: kernel netlink, or guessed from IRQ names
                        (also where the kernel links the NAPI to no IRQ)
    tx_queues          [{queue, xps_cpus, xps_mask, napi_id, napi_pid,
                        irq_source, irq, irq_name, irq_cpus, irq_effective_cpus}]
    irqs               [{irq, name, kind (rx|tx|rxtx|other), queue, cpus,
                        effective_cpus}]
    notes              [text]: queue IRQs allowed off the NIC's NUMA node, RX
                        queues the table never names, table entries naming
                        rings the device lacks
  A value that could not be read is null; rps_cpus [] means RPS is off.

Examples:
  rsskit info
  rsskit info --iface eth0 --json";

#[derive(clap::Args, Debug)]
#[command(after_help = AFTER_HELP)]
pub struct Args {
    /// Only this interface (default: all of them).
    #[arg(long, value_name = "IF")]
    iface: Option<String>,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
    /// Show the host captured in DIR (`rsskit capture DIR`) instead of this one.
    #[arg(long, value_name = "DIR")]
    from: Option<std::path::PathBuf>,
}

/// Everything known about one interface.
struct Iface {
    name: String,
    driver: Option<String>,
    facts: IfaceFacts,
    channels: Reported<Channels>,
    rss: Reported<Rss>,
    hash: Reported<Vec<FlowHash>>,
    rx: Vec<RxQueue>,
    tx: Vec<TxQueue>,
    irqs: Vec<IfaceIrq>,
    map: QueueLinks,
    /// The NIC's flow rules and the contexts they name, or why not read.
    rules: Result<NicRules, String>,
    /// Which kernel interface answered, per query (None: a capture).
    channels_via: Option<Via>,
    rss_via: Option<Via>,
    /// Ring sizes and coalescing, asked of the running kernel only.
    rings: Option<Answer<Rings>>,
    coalesce: Option<Answer<Coalesce>>,
    /// Why the ethtool netlink family was not used at all, if it was not.
    netlink_unavailable: Option<String>,
    // isolate2: whether `--isolate` could work here, or why it could not be read.
    isolation: Result<IsolationSupport, String>,
}

/// Where the queue -> IRQ links came from.
const KERNEL_MAP: &str = "kernel netlink";
const GUESSED: &str = "guessed from IRQ names";

/// Each queue's NAPI instance and IRQ, from one source.
struct QueueLinks {
    source: &'static str,
    /// Why the kernel's map was not used (None when it was).
    kernel_unavailable: Option<String>,
    rx: Vec<Link>,
    tx: Vec<Link>,
}

/// One queue's NAPI instance and IRQ.
#[derive(Default)]
struct Link {
    napi_id: Option<u32>,
    napi_pid: Option<u32>,
    irq: Option<IfaceIrq>,
    /// Where `irq` came from: a NAPI instance the kernel links to no IRQ
    /// (virtio-net's, up to 7.3 at least) keeps the IRQ-name guess.
    irq_source: Option<&'static str>,
}

fn guessed_link(irq: Option<&IfaceIrq>) -> Link {
    Link { irq_source: irq.map(|_| GUESSED), irq: irq.cloned(), ..Link::default() }
}

/// Each queue's IRQ guessed from the IRQ names (`netdev::classify_irq`).
fn guessed(why: String, rx: usize, tx: usize, irqs: &[IfaceIrq]) -> QueueLinks {
    QueueLinks {
        source: GUESSED,
        kernel_unavailable: Some(why),
        rx: (0..rx).map(|q| guessed_link(netdev::rx_irq(irqs, q))).collect(),
        tx: (0..tx).map(|q| guessed_link(netdev::tx_irq(irqs, q))).collect(),
    }
}

/// The kernel's map where it has one (its IRQs named and placed from
/// /proc), else the IRQ-name guess, saying why.
fn queue_links(
    roots: &Roots,
    name: &str,
    rx: usize,
    tx: usize,
    irqs: &[IfaceIrq],
    interrupts: &[netdev::IrqLine],
) -> QueueLinks {
    let guess = |why: String| guessed(why, rx, tx, irqs);
    let map = match netdev_nl::queue_map(name) {
        Ok(m) if !m.queues.is_empty() => m,
        Ok(_) => return guess(format!("the kernel reports no queues for {name}")),
        Err(e) => return guess(rsskit_host::causes(&e)),
    };
    let irq_of = |irq: u32| -> IfaceIrq {
        irqs.iter().find(|x| x.irq == irq).cloned().unwrap_or_else(|| {
            let line = interrupts.iter().find(|l| l.irq == irq);
            let name = line.map(|l| l.name.clone()).unwrap_or_default();
            let (kind, queue) = netdev::classify_irq(&name);
            IfaceIrq {
                irq,
                name,
                kind,
                queue,
                cpus: netdev::irq_cpus(roots, irq, "smp_affinity_list"),
                effective_cpus: netdev::irq_cpus(roots, irq, "effective_affinity_list"),
            }
        })
    };
    let link = |kind: QueueType, q: usize| {
        let napi = u32::try_from(q).ok().and_then(|q| map.napi_of(kind, q));
        let base = match napi.and_then(|n| n.irq) {
            Some(irq) => Link { irq: Some(irq_of(irq)), irq_source: Some(KERNEL_MAP), ..Link::default() },
            None if kind == QueueType::Rx => guessed_link(netdev::rx_irq(irqs, q)),
            None => guessed_link(netdev::tx_irq(irqs, q)),
        };
        Link { napi_id: napi.map(|n| n.id), napi_pid: napi.and_then(|n| n.pid), ..base }
    };
    QueueLinks {
        source: KERNEL_MAP,
        kernel_unavailable: None,
        rx: (0..rx).map(|q| link(QueueType::Rx, q)).collect(),
        tx: (0..tx).map(|q| link(QueueType::Tx, q)).collect(),
    }
}

fn gather(roots: &Roots, name: &str, interrupts: &[netdev::IrqLine]) -> Result<Iface> {
    let nodev = |e: EthtoolError| match e {
        EthtoolError::NoSuchInterface(n) => anyhow::anyhow!("interface '{n}' does not exist"),
        e => anyhow::anyhow!("{e}"),
    };
    let mut nic = Nic::open(name).map_err(nodev)?;
    let eth = nic.ioctl();
    let driver = match eth.driver().map_err(nodev)? {
        Reported::Supported(d) if !d.is_empty() => Some(d),
        _ => netdev::sysfs_driver(roots, name),
    };
    let rx = netdev::rx_queues(roots, name);
    let tx = netdev::tx_queues(roots, name);
    let irqs = netdev::iface_irqs(roots, name, interrupts);
    let map = queue_links(roots, name, rx.len(), tx.len(), &irqs, interrupts);
    let hash = eth.flow_hashes().map_err(nodev)?;
    let channels = nic.channels().map_err(nodev)?;
    let rss = nic.rss().map_err(nodev)?;
    Ok(Iface {
        name: name.to_string(),
        driver,
        facts: netdev::facts(roots, name),
        channels: channels.value,
        rss: rss.value,
        hash,
        rx,
        tx,
        irqs,
        map,
        rules: NicRules::read(&Sysroot::live(), name).map_err(|e| e.to_string()),
        channels_via: Some(channels.via),
        rss_via: Some(rss.via),
        rings: Some(nic.rings().map_err(nodev)?),
        coalesce: Some(nic.coalesce().map_err(nodev)?),
        netlink_unavailable: nic.netlink_unavailable().map(str::to_string),
        isolation: rsskit_host::nic_rules::isolation_support(&Sysroot::live(), name)
            .map_err(|e| e.to_string()),
    })
}

/// An interface as a capture holds it.
fn from_state(d: rsskit_host::sysroot::DeviceState) -> Iface {
    // The kernel's map is asked of the running kernel: a capture has none.
    let map = guessed("a capture holds no netdev netlink map".into(), d.rx.len(), d.tx.len(), &d.irqs);
    Iface {
        name: d.name,
        driver: d.driver,
        facts: d.facts,
        channels: d.channels,
        rss: d.rss,
        hash: d.hash,
        rx: d.rx,
        tx: d.tx,
        irqs: d.irqs,
        map,
        rules: Err("a capture holds no flow rules".into()),
        channels_via: d.via.channels,
        rss_via: d.via.rss,
        rings: None,
        coalesce: None,
        netlink_unavailable: None,
        isolation: Err("a capture holds no RSS contexts or flow rules".into()),
    }
}

pub fn run(a: Args) -> Result<()> {
    let capture = a.from.as_ref().map(|d| super::source(Some(d), None)).transpose()?;
    let roots = capture.as_ref().map_or_else(Roots::default, |c| c.roots.clone());
    let names = match &a.iface {
        Some(n) => {
            if !netdev::exists(&roots, n) {
                bail!("interface '{n}' does not exist");
            }
            vec![n.clone()]
        }
        None => netdev::interfaces(&roots).map_err(|e| anyhow::anyhow!("reading /sys/class/net: {e}"))?,
    };
    let topo = capture.as_ref().map_or_else(Topology::read, |c| c.topology());
    let default_key = netdev::default_rss_key(&roots);
    let interrupts = netdev::interrupts(&roots);
    let mut ifaces = Vec::new();
    for n in &names {
        let got = match &capture {
            Some(c) => c.device(n).map(from_state).map_err(anyhow::Error::from),
            None => gather(&roots, n, &interrupts),
        };
        match got {
            Ok(i) => ifaces.push(i),
            // An interface that vanished between listing and asking: skip it
            // when listing all, fail when it was asked for by name.
            Err(e) if a.iface.is_none() => eprintln!("rsskit: warning: {n}: {e:#}"),
            Err(e) => return Err(e),
        }
    }
    if a.json {
        print_json(&to_json(&topo, &default_key, &ifaces))
    } else {
        print!("{}", to_text(&topo, &default_key, &ifaces));
        Ok(())
    }
}

// ---------------------------------------------------------------- helpers

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn colon_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(":")
}

/// The check every `--key` goes through (`keycheck::vet`), on a key a
/// driver reported, judged for every hash type and the 128-entry table
/// (how the NIC uses it is not known here): `good`, `warn` (reaches every
/// bucket, other problems) or `weak` (cannot reach every bucket), with the
/// problems. `None` for a key
/// too short to check.
fn key_check(key: &[u8]) -> Option<(&'static str, Vec<String>)> {
    let k = rsskit_core::RssKey::from_bytes(key).ok()?;
    let problems =
        rsskit_core::keycheck::vet(&k, rsskit_core::keycheck::KeyUse::full(), true).unwrap_or_default();
    let verdict = if problems.iter().any(|p| p.unreachable_buckets()) {
        "weak"
    } else if problems.is_empty() {
        "good"
    } else {
        "warn"
    };
    Some((verdict, problems.iter().map(|p| p.to_string()).collect()))
}

/// Names a known key: the Microsoft default, the kernel's default, or a
/// symmetric key (one 2-byte pattern repeated, as DragonFly's 0x6d5a).
fn key_is(key: &[u8], kernel: Option<&DefaultKey>) -> Option<&'static str> {
    if key.is_empty() {
        return None;
    }
    if key.len() >= MICROSOFT_KEY.len() && key[..MICROSOFT_KEY.len()] == MICROSOFT_KEY {
        return Some("microsoft");
    }
    if let Some(k) = kernel {
        if k.initialised && key.len() <= k.key.len() && k.key[..key.len()] == *key {
            return Some("kernel_default");
        }
    }
    if key.len() >= 4 && key.iter().enumerate().all(|(i, b)| *b == key[i % 2]) {
        return Some("symmetric");
    }
    None
}

fn table_entries(rss: &Reported<Rss>, q: usize) -> Option<usize> {
    rss.ok().map(|r| r.indir.iter().filter(|&&x| x as usize == q).count())
}

fn driver_label(i: &Iface) -> String {
    match &i.driver {
        Some(d) => d.clone(),
        None if !i.facts.has_device => format!("of {} (virtual, no driver name)", i.name),
        None => format!("of {}", i.name),
    }
}

/// Things worth a second look: queue IRQs allowed off the NIC's NUMA node,
/// RX queues the indirection table never picks, table entries naming rings
/// the device does not have.
fn notes(topo: &Topology, i: &Iface) -> Vec<String> {
    let mut out = Vec::new();
    if let (Some(node), true) = (i.facts.numa_node, topo.nodes.len() > 1) {
        let local: Vec<usize> =
            topo.nodes.iter().find(|n| n.node == node).map(|n| n.cpus.clone()).unwrap_or_default();
        for x in i.irqs.iter().filter(|x| x.kind != netdev::IrqKind::Other) {
            if let Some(c) = &x.cpus {
                let far: Vec<usize> = c.iter().copied().filter(|c| !local.contains(c)).collect();
                if !far.is_empty() {
                    out.push(format!(
                        "IRQ {} ({}) may run on CPUs {} outside the NIC's NUMA node {node} (CPUs {})",
                        x.irq,
                        x.name,
                        cpulist::format(&far),
                        cpus_text(Some(&local))
                    ));
                }
            }
        }
    }
    if let Some(r) = i.rss.ok().filter(|r| !r.indir.is_empty()) {
        let nrx = match i.channels.ok() {
            Some(c) if c.rx_count + c.combined_count > 0 => (c.rx_count + c.combined_count) as usize,
            _ => i.rx.len(),
        };
        let bad: Vec<usize> = r.indir.iter().map(|&x| x as usize).filter(|&x| x >= nrx).collect();
        if !bad.is_empty() {
            out.push(format!(
                "the indirection table names ring(s) {} but the device has {nrx} RX queue(s)",
                cpulist::format(&bad)
            ));
        }
        let mut unused: Vec<usize> = (0..nrx).filter(|q| !r.indir.contains(&(*q as u32))).collect();
        // isolate2: a queue a flow rule reaches (directly or through an RSS context) is not idle.
        if let Ok(rules) = &i.rules {
            for (qs, how) in rules.reaching(&unused) {
                out.push(format!(
                    "RX queue(s) {} are left out of the indirection table: they get the flows of {how}",
                    cpulist::format(&qs)
                ));
                unused.retain(|q| !qs.contains(q));
            }
        }
        if !unused.is_empty() {
            out.push(format!(
                "RX queue(s) {} get no RSS traffic: the indirection table never names them",
                cpulist::format(&unused)
            ));
        }
    }
    out
}

// ---------------------------------------------------------------- JSON

fn unsupported(reason: &str) -> Value {
    json!({ "supported": false, "reason": reason })
}

fn to_json(topo: &Topology, dk: &Result<DefaultKey, String>, ifaces: &[Iface]) -> Value {
    let default_key = match dk {
        Ok(k) => json!({ "hex": hex(&k.key), "len": k.key.len(), "initialised": k.initialised }),
        Err(e) => json!({ "error": e }),
    };
    json!({
        "cpus": topo.online,
        "numa_nodes": topo.nodes,
        "cpu_topology": topo.cpus,
        "default_key": default_key,
        "interfaces": ifaces.iter().map(|i| iface_json(topo, i, dk.as_ref().ok())).collect::<Vec<_>>(),
    })
}

fn iface_json(topo: &Topology, i: &Iface, dk: Option<&DefaultKey>) -> Value {
    let channels = match &i.channels {
        Reported::Supported(c) => json!({
            "supported": true,
            "rx": c.rx_count, "tx": c.tx_count, "other": c.other_count, "combined": c.combined_count,
            "max_rx": c.max_rx, "max_tx": c.max_tx, "max_other": c.max_other,
            "max_combined": c.max_combined,
        }),
        Reported::Unsupported { reason } => unsupported(reason),
    };
    let rss = match &i.rss {
        Reported::Supported(r) => json!({
            "supported": true,
            "source": r.source,
            "key": if r.key.is_empty() { Value::Null } else { json!(hex(&r.key)) },
            "key_len": r.key.len(),
            "key_is": key_is(&r.key, dk),
            "key_check": key_check(&r.key).map(|(verdict, problems)| json!({ "verdict": verdict, "problems": problems })),
            "hfunc": r.hfunc,
            "input_xfrm": r.input_xfrm,
            "table": r.indir,
            "table_size": r.indir.len(),
        }),
        Reported::Unsupported { reason } => unsupported(reason),
    };
    let hash_fields = match &i.hash {
        Reported::Supported(flows) => json!({
            "supported": true,
            "flows": flows.iter().map(|f| json!({
                "flow": f.flow, "fields": f.fields, "tuple": f.tuple(), "raw": f.raw,
            })).collect::<Vec<_>>(),
        }),
        Reported::Unsupported { reason } => unsupported(reason),
    };
    let rx: Vec<Value> =
        i.rx.iter()
            .map(|q| {
                let link = i.map.rx.get(q.queue);
                let irq = link.and_then(|l| l.irq.as_ref());
                json!({
                    "queue": q.queue,
                    "rps_cpus": q.rps_cpus,
                    "rps_mask": q.rps_mask,
                    "rps_flow_cnt": q.rps_flow_cnt,
                    "rss_table_entries": table_entries(&i.rss, q.queue),
                    "napi_id": link.and_then(|l| l.napi_id),
                    "napi_pid": link.and_then(|l| l.napi_pid),
                    "irq_source": link.and_then(|l| l.irq_source),
                    "irq": irq.map(|x| x.irq),
                    "irq_name": irq.map(|x| &x.name),
                    "irq_cpus": irq.and_then(|x| x.cpus.as_ref()),
                    "irq_effective_cpus": irq.and_then(|x| x.effective_cpus.as_ref()),
                })
            })
            .collect();
    let tx: Vec<Value> =
        i.tx.iter()
            .map(|q| {
                let link = i.map.tx.get(q.queue);
                let irq = link.and_then(|l| l.irq.as_ref());
                json!({
                    "queue": q.queue,
                    "xps_cpus": q.xps_cpus,
                    "xps_mask": q.xps_mask,
                    "napi_id": link.and_then(|l| l.napi_id),
                    "napi_pid": link.and_then(|l| l.napi_pid),
                    "irq_source": link.and_then(|l| l.irq_source),
                    "irq": irq.map(|x| x.irq),
                    "irq_name": irq.map(|x| &x.name),
                    "irq_cpus": irq.and_then(|x| x.cpus.as_ref()),
                    "irq_effective_cpus": irq.and_then(|x| x.effective_cpus.as_ref()),
                })
            })
            .collect();
    let via = |v: Via| match v {
        Via::Netlink => "netlink",
        Via::Ioctl => "ioctl",
    };
    let rings = i.rings.as_ref().map(|a| match &a.value {
        Reported::Supported(r) => json!({
            "supported": true, "rx": r.rx, "tx": r.tx, "rx_max": r.rx_max, "tx_max": r.tx_max,
            "via": via(a.via),
        }),
        Reported::Unsupported { reason } => {
            json!({ "supported": false, "reason": reason, "via": via(a.via) })
        }
    });
    let coalesce = i.coalesce.as_ref().map(|a| match &a.value {
        Reported::Supported(c) => json!({
            "supported": true, "adaptive_rx": c.adaptive_rx, "adaptive_tx": c.adaptive_tx,
            "rx_usecs": c.rx_usecs, "rx_frames": c.rx_frames, "tx_usecs": c.tx_usecs,
            "tx_frames": c.tx_frames, "via": via(a.via),
        }),
        Reported::Unsupported { reason } => {
            json!({ "supported": false, "reason": reason, "via": via(a.via) })
        }
    });
    json!({
        "name": i.name,
        "driver": i.driver,
        "operstate": i.facts.operstate,
        "mtu": i.facts.mtu,
        "numa_node": i.facts.numa_node,
        "virtual": !i.facts.has_device,
        "rx_queue_count": i.rx.len(),
        "tx_queue_count": i.tx.len(),
        "channels": channels,
        "channels_via": i.channels_via.map(via),
        "rss": rss,
        "rss_via": i.rss_via.map(via),
        "rings": rings,
        "coalesce": coalesce,
        "ethtool_netlink_unavailable": i.netlink_unavailable,
        "hash_fields": hash_fields,
        "queue_map": { "source": i.map.source, "kernel_unavailable": i.map.kernel_unavailable },
        "flow_rules": match &i.rules {
            Ok(r) => json!(r),
            Err(e) => json!({ "unreadable": e }),
        },
        "isolation": isolation_json(&i.isolation),
        "rx_queues": rx,
        "tx_queues": tx,
        "irqs": i.irqs,
        "notes": notes(topo, i),
    })
}

/// What `--isolate` needs of the NIC, each `{supported, reason}`.
fn isolation_json(iso: &Result<IsolationSupport, String>) -> Value {
    let one = |why: &Option<String>| match why {
        None => json!({ "supported": true }),
        Some(w) => json!({ "supported": false, "reason": w }),
    };
    match iso {
        Ok(x) => json!({
            "rss_contexts": one(&x.no_contexts),
            "flow_rules": one(&x.no_rules),
            "possible": x.no_contexts.is_none() && x.no_rules.is_none(),
        }),
        Err(e) => json!({ "unreadable": e }),
    }
}

// ---------------------------------------------------------------- text

/// Whether `plan --isolate` could work on this NIC, and why not.
fn isolation_text(s: &mut String, iso: &Result<IsolationSupport, String>) {
    let x = match iso {
        Ok(x) => x,
        Err(e) => {
            let _ = writeln!(s, "  Service isolation (--isolate): not read ({e})");
            return;
        }
    };
    let one = |why: &Option<String>| why.as_ref().map_or_else(|| "yes".to_string(), |w| format!("no ({w})"));
    let verdict = if x.no_contexts.is_none() && x.no_rules.is_none() { "possible" } else { "refused" };
    let _ = writeln!(
        s,
        "  Service isolation (--isolate): {verdict}; RSS contexts: {}; flow rules: {}",
        one(&x.no_contexts),
        one(&x.no_rules)
    );
}

/// The NIC's flow rules (looked at before the table) and their contexts.
fn rules_text(s: &mut String, rules: &Result<NicRules, String>) {
    let r = match rules {
        Err(e) => {
            let _ = writeln!(s, "  Flow rules: not read ({e})");
            return;
        }
        Ok(r) if !r.any() => {
            let why = r.not_listed.as_deref().map_or("none".to_string(), |w| format!("none ({w})"));
            let _ = writeln!(s, "  Flow rules: {why}");
            return;
        }
        Ok(r) => r,
    };
    let _ = writeln!(s, "  Flow rules (looked at before the table, lowest location first):");
    let mut lines: Vec<(u32, String)> = r.rules.iter().map(|x| (x.location, x.to_string())).collect();
    lines.extend(r.opaque.iter().map(|o| (o.location, format!("not understood: {}", o.reason))));
    lines.sort();
    for (loc, text) in lines {
        let _ = writeln!(s, "    {loc:>5}: {text}");
    }
    for c in r.contexts.values() {
        let queues: std::collections::BTreeSet<u32> = c.table.iter().copied().collect();
        let queues: Vec<usize> = queues.into_iter().map(|q| q as usize).collect();
        let _ = writeln!(
            s,
            "  RSS context {}: key {}, {} entries over queues {}, input transform {}",
            c.id,
            colon_hex(&c.key),
            c.table.len(),
            cpulist::format(&queues),
            c.xfrm.name()
        );
    }
    for (id, why) in &r.unreadable_contexts {
        let _ = writeln!(s, "  RSS context {id}: not read ({why})");
    }
}

fn cpus_text(c: Option<&Vec<usize>>) -> String {
    match c {
        None => "?".into(),
        Some(v) if v.is_empty() => "none".into(),
        Some(v) => cpulist::format(v),
    }
}

fn to_text(topo: &Topology, dk: &Result<DefaultKey, String>, ifaces: &[Iface]) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "CPUs: {} online ({})", topo.online.len(), cpulist::format(&topo.online));
    if topo.nodes.is_empty() {
        let _ = writeln!(s, "NUMA nodes: none reported (/sys/devices/system/node missing)");
    } else {
        let _ = writeln!(s, "NUMA nodes: {}", topo.nodes.len());
        for n in &topo.nodes {
            let _ = writeln!(s, "  node{}: CPUs {}", n.node, cpus_text(Some(&n.cpus)));
        }
    }
    let packages: std::collections::BTreeSet<_> = topo.cpus.iter().filter_map(|c| c.package_id).collect();
    let cores: std::collections::BTreeSet<_> =
        topo.cpus.iter().filter_map(|c| Some((c.package_id?, c.core_id?))).collect();
    if !packages.is_empty() {
        let _ = writeln!(s, "Packages: {}, cores: {}", packages.len(), cores.len());
    }
    match dk {
        Ok(k) if k.initialised => {
            let _ = writeln!(
                s,
                "Kernel default RSS key ({} bytes, /proc/sys/net/core/netdev_rss_key):\n  {}",
                k.key.len(),
                colon_hex(&k.key)
            );
        }
        Ok(k) => {
            let _ = writeln!(
                s,
                "Kernel default RSS key: not initialised yet ({} zero bytes: no driver has used it)",
                k.key.len()
            );
        }
        Err(e) => {
            let _ = writeln!(s, "Kernel default RSS key: unreadable ({e})");
        }
    }
    for i in ifaces {
        s.push('\n');
        iface_text(&mut s, topo, i, dk.as_ref().ok());
    }
    s
}

fn iface_text(s: &mut String, topo: &Topology, i: &Iface, dk: Option<&DefaultKey>) {
    let mut head = format!("Interface {}: driver {}", i.name, i.driver.as_deref().unwrap_or("unknown"));
    if !i.facts.has_device {
        head.push_str(" (virtual)");
    }
    if let Some(st) = &i.facts.operstate {
        let _ = write!(head, ", {st}");
    }
    if let Some(m) = i.facts.mtu {
        let _ = write!(head, ", mtu {m}");
    }
    if let Some(n) = i.facts.numa_node {
        let _ = write!(head, ", NUMA node {n}");
    }
    let _ = writeln!(s, "{head}");
    let _ = writeln!(s, "  Queues: {} RX, {} TX", i.rx.len(), i.tx.len());
    let nr = |reason: &str| format!("not reported by driver {}: {reason}", driver_label(i));
    match &i.channels {
        Reported::Supported(c) => {
            let _ = writeln!(
                s,
                "  Channels: rx {} tx {} other {} combined {} (max: rx {} tx {} other {} combined {})",
                c.rx_count,
                c.tx_count,
                c.other_count,
                c.combined_count,
                c.max_rx,
                c.max_tx,
                c.max_other,
                c.max_combined
            );
        }
        Reported::Unsupported { reason } => {
            let _ = writeln!(s, "  Channels: {}", nr(reason));
        }
    }
    ethtool_text(s, i, &nr);
    match &i.rss {
        Reported::Supported(r) if r.indir.is_empty() => {
            let _ = writeln!(s, "  RX flow hash indirection table: {}", nr("only the key is given"));
            rss_key_text(s, r, dk, &nr);
        }
        Reported::Supported(r) => {
            let rings = r.indir.iter().max().map_or(0, |m| m + 1);
            let _ = writeln!(
                s,
                "  RX flow hash indirection table ({} entries, rings 0-{}; {}):",
                r.indir.len(),
                rings.saturating_sub(1),
                r.source
            );
            for (row, chunk) in r.indir.chunks(8).enumerate() {
                let cells: String = chunk.iter().map(|x| format!("{x:>6}")).collect();
                let _ = writeln!(s, "  {:>5}:{cells}", row * 8);
            }
            rss_key_text(s, r, dk, &nr);
        }
        Reported::Unsupported { reason } => {
            let _ = writeln!(s, "  RSS key and indirection table: {}", nr(reason));
        }
    }
    match &i.hash {
        Reported::Supported(flows) => {
            let _ = writeln!(s, "  Hashed fields:");
            for f in flows {
                let fields = if f.fields.is_empty() { "none".to_string() } else { f.fields.join(", ") };
                let _ = writeln!(s, "    {:<6} {fields} ({})", f.flow, f.tuple());
            }
        }
        Reported::Unsupported { reason } => {
            let _ = writeln!(s, "  Hashed fields: {}", nr(reason));
        }
    }
    let irq_text = |link: Option<&Link>| {
        let napi = match link.and_then(|l| l.napi_id) {
            Some(id) => {
                let thread =
                    link.and_then(|l| l.napi_pid).map(|p| format!(" (thread PID {p})")).unwrap_or_default();
                format!("NAPI {id}{thread}, ")
            }
            None => String::new(),
        };
        let irq = match link.and_then(|l| l.irq.as_ref()) {
            Some(x) => {
                let eff = match &x.effective_cpus {
                    Some(e) if Some(e) != x.cpus.as_ref() => format!(", now on {}", cpus_text(Some(e))),
                    _ => String::new(),
                };
                // Said where the map is the kernel's but this IRQ is not.
                let guess =
                    match (i.map.source, link.and_then(|l| l.irq_source), link.and_then(|l| l.napi_id)) {
                        (KERNEL_MAP, Some(GUESSED), Some(_)) => {
                            " (guessed from its name: the kernel links no IRQ to the NAPI)"
                        }
                        (KERNEL_MAP, Some(GUESSED), None) => {
                            " (guessed from its name: the kernel links no NAPI to the queue)"
                        }
                        _ => "",
                    };
                format!("IRQ {} ({}) on CPUs {}{eff}{guess}", x.irq, x.name, cpus_text(x.cpus.as_ref()))
            }
            None => "no IRQ of its own".to_string(),
        };
        napi + &irq
    };
    rules_text(s, &i.rules);
    isolation_text(s, &i.isolation);
    match &i.map.kernel_unavailable {
        None => {
            let _ = writeln!(s, "  Queue -> NAPI -> IRQ map: {}", i.map.source);
        }
        Some(why) => {
            let _ = writeln!(s, "  Queue -> IRQ map: {} ({why})", i.map.source);
        }
    }
    let _ = writeln!(s, "  RX queues:");
    for q in &i.rx {
        let rps = match (&q.rps_cpus, &q.rps_mask) {
            (Some(c), _) if c.is_empty() => "RPS off".to_string(),
            (Some(c), Some(m)) => format!("RPS CPUs {} (mask {m})", cpulist::format(c)),
            _ => "RPS ?".to_string(),
        };
        let flow = q.rps_flow_cnt.map(|n| format!(", rps_flow_cnt {n}")).unwrap_or_default();
        let entries =
            table_entries(&i.rss, q.queue).map(|n| format!(", {n} table entries")).unwrap_or_default();
        let _ =
            writeln!(s, "    rx-{:<3} {}; {rps}{flow}{entries}", q.queue, irq_text(i.map.rx.get(q.queue)));
    }
    let _ = writeln!(s, "  TX queues:");
    for q in &i.tx {
        let xps = match (&q.xps_cpus, &q.xps_mask) {
            (Some(c), _) if c.is_empty() => "XPS off".to_string(),
            (Some(c), Some(m)) => format!("XPS CPUs {} (mask {m})", cpulist::format(c)),
            _ => "XPS not readable".to_string(),
        };
        let _ = writeln!(s, "    tx-{:<3} {}; {xps}", q.queue, irq_text(i.map.tx.get(q.queue)));
    }
    let other: Vec<&IfaceIrq> = i
        .irqs
        .iter()
        .filter(|x| {
            x.queue.is_none()
                || !(x.kind.serves_rx() && x.queue.is_some_and(|q| q < i.rx.len())
                    || x.kind.serves_tx() && x.queue.is_some_and(|q| q < i.tx.len()))
        })
        .collect();
    if !other.is_empty() {
        let _ = writeln!(s, "  Other IRQs:");
        for x in other {
            let _ = writeln!(
                s,
                "    IRQ {} ({}, {}) on CPUs {}",
                x.irq,
                x.name,
                x.kind.as_str(),
                cpus_text(x.cpus.as_ref())
            );
        }
    }
    let n = notes(topo, i);
    if !n.is_empty() {
        let _ = writeln!(s, "  Notes:");
        for line in n {
            let _ = writeln!(s, "    - {line}");
        }
    }
}

/// The key, hash function and input transform lines of a reported RSS setup.
fn via_name(v: Option<Via>) -> &'static str {
    match v {
        Some(Via::Netlink) => "netlink",
        Some(Via::Ioctl) => "ioctl",
        None => "not asked (a capture)",
    }
}

/// Which kernel interface answered, then rings and coalescing.
fn ethtool_text(s: &mut String, i: &Iface, nr: &dyn Fn(&str) -> String) {
    let _ = writeln!(
        s,
        "  Answered by: channels {}, RSS {}, rings {}, coalescing {}",
        via_name(i.channels_via),
        via_name(i.rss_via),
        via_name(i.rings.as_ref().map(|a| a.via)),
        via_name(i.coalesce.as_ref().map(|a| a.via)),
    );
    if let Some(why) = &i.netlink_unavailable {
        let _ = writeln!(s, "  ethtool netlink: {why}");
    }
    match i.rings.as_ref().map(|a| &a.value) {
        Some(Reported::Supported(r)) => {
            let _ = writeln!(s, "  Rings: rx {} tx {} (max: rx {} tx {})", r.rx, r.tx, r.rx_max, r.tx_max);
        }
        Some(Reported::Unsupported { reason }) => {
            let _ = writeln!(s, "  Rings: {}", nr(reason));
        }
        None => {}
    }
    match i.coalesce.as_ref().map(|a| &a.value) {
        Some(Reported::Supported(c)) => {
            let onoff = |b: bool| if b { "on" } else { "off" };
            let _ = writeln!(
                s,
                "  Coalescing: adaptive rx {} tx {}, rx-usecs {} rx-frames {}, tx-usecs {} tx-frames {}",
                onoff(c.adaptive_rx),
                onoff(c.adaptive_tx),
                c.rx_usecs,
                c.rx_frames,
                c.tx_usecs,
                c.tx_frames
            );
        }
        Some(Reported::Unsupported { reason }) => {
            let _ = writeln!(s, "  Coalescing: {}", nr(reason));
        }
        None => {}
    }
}

fn rss_key_text(s: &mut String, r: &Rss, dk: Option<&DefaultKey>, nr: &dyn Fn(&str) -> String) {
    if r.key.is_empty() {
        let _ = writeln!(s, "  RSS hash key: {}", nr("only the table is given"));
    } else {
        let known = match key_is(&r.key, dk) {
            Some("microsoft") => " (the Microsoft default key)",
            Some("kernel_default") => " (the kernel's default key)",
            Some("symmetric") => " (symmetric: a 2-byte pattern repeated)",
            _ => "",
        };
        let _ = writeln!(s, "  RSS hash key ({} bytes){known}:", r.key.len());
        let _ = writeln!(s, "    {}", colon_hex(&r.key));
        let _ = writeln!(s, "    (rsskit hash --key {} ...)", hex(&r.key));
        match key_check(&r.key) {
            Some(("good", _)) => {
                let _ = writeln!(s, "    key check: good");
            }
            Some((verdict, problems)) => {
                let what = if verdict == "weak" {
                    "WEAK, cannot reach every bucket (rsskit refuses it without --allow-weak-key)"
                } else {
                    "usable, but"
                };
                let _ = writeln!(s, "    key check: {what}: {}", problems.join("; "));
            }
            None => {}
        }
    }
    let hf = if r.hfunc.is_empty() { "not reported".to_string() } else { r.hfunc.join(", ") };
    let _ = write!(s, "  RSS hash function: {hf}");
    if !r.input_xfrm.is_empty() {
        let _ = write!(s, "; input transform: {}", r.input_xfrm.join(", "));
    }
    s.push('\n');
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A NIC with RSS, as a driver that implements everything reports it.
    fn fake_nic() -> (Topology, Result<DefaultKey, String>, Vec<Iface>) {
        use rsskit_linux::ethtool::{rxh, rxh_fields};
        use rsskit_linux::netdev::IrqKind;
        use rsskit_linux::topology::{CpuPlace, NumaNode};
        let topo = Topology {
            online: vec![0, 1, 2, 3],
            nodes: vec![NumaNode { node: 0, cpus: vec![0, 1] }, NumaNode { node: 1, cpus: vec![2, 3] }],
            cpus: (0..4)
                .map(|c| CpuPlace { cpu: c, core_id: Some(c), package_id: Some(c / 2), node: Some(c / 2) })
                .collect(),
            isolated: vec![],
            nohz_full: vec![],
        };
        let dk = Ok(DefaultKey { key: vec![0; 52], initialised: false });
        let four = rxh::IP_SRC | rxh::IP_DST | rxh::L4_B_0_1 | rxh::L4_B_2_3;
        let two = rxh::IP_SRC | rxh::IP_DST;
        let channels = Channels { combined_count: 2, max_combined: 8, ..Channels::default() };
        let irq = |irq, q: Option<usize>, kind, cpus: Vec<usize>| IfaceIrq {
            irq,
            name: match q {
                Some(q) => format!("eth9-TxRx-{q}"),
                None => "eth9".into(),
            },
            kind,
            queue: q,
            cpus: Some(cpus.clone()),
            effective_cpus: Some(cpus),
        };
        let irqs = vec![
            irq(70, Some(0), IrqKind::RxTx, vec![0]),
            irq(71, Some(1), IrqKind::RxTx, vec![2]),
            irq(72, None, IrqKind::Other, vec![0, 1, 2, 3]),
        ];
        let nic = Iface {
            name: "eth9".into(),
            driver: Some("ixgbe".into()),
            facts: IfaceFacts {
                operstate: Some("up".into()),
                mtu: Some(1500),
                numa_node: Some(0),
                has_device: true,
            },
            channels: Reported::Supported(channels),
            rss: Reported::Supported(Rss {
                key: MICROSOFT_KEY.to_vec(),
                indir: (0..16).map(|i| i % 2).collect(),
                hfunc: vec!["toeplitz".into()],
                input_xfrm: vec![],
                source: "ETHTOOL_GRSSH",
            }),
            hash: Reported::Supported(vec![
                FlowHash { flow: "tcp4", raw: four, fields: rxh_fields(four) },
                FlowHash { flow: "udp4", raw: two, fields: rxh_fields(two) },
            ]),
            rx: (0..2)
                .map(|q| RxQueue {
                    queue: q,
                    rps_mask: Some(if q == 1 { "c".into() } else { "0".into() }),
                    rps_cpus: Some(if q == 1 { vec![2, 3] } else { vec![] }),
                    rps_flow_cnt: Some(0),
                })
                .collect(),
            tx: (0..2).map(|q| TxQueue { queue: q, xps_mask: None, xps_cpus: None }).collect(),
            map: guessed("the kernel's map is not available: a test".into(), 2, 2, &irqs),
            irqs,
            rules: Ok(NicRules {
                rules: vec![rsskit_core::flowrule::parse_rule("udp4 dst-port 443 context 1 loc 3").unwrap()],
                contexts: [(
                    1,
                    rsskit_host::nic_rules::NicContext {
                        id: 1,
                        key: MICROSOFT_KEY.to_vec(),
                        table: vec![2, 3, 2, 3],
                        xfrm: rsskit_core::InputXfrm::None,
                    },
                )]
                .into_iter()
                .collect(),
                ..NicRules::default()
            }),
            channels_via: Some(Via::Netlink),
            rss_via: Some(Via::Ioctl),
            rings: Some(Answer {
                value: Reported::Supported(Rings { rx: 256, tx: 512, rx_max: 4096, tx_max: 4096 }),
                via: Via::Netlink,
            }),
            coalesce: Some(Answer {
                value: Reported::Supported(Coalesce {
                    adaptive_rx: true,
                    rx_usecs: 3,
                    ..Coalesce::default()
                }),
                via: Via::Netlink,
            }),
            netlink_unavailable: None,
            isolation: Ok(IsolationSupport::default()),
        };
        (topo, dk, vec![nic])
    }

    // isolate2: info says whether --isolate would be refused, and why.
    #[test]
    fn isolation_support_is_said_in_text_and_json() {
        let (topo, dk, mut ifaces) = fake_nic();
        let t = to_text(&topo, &dk, &ifaces);
        assert!(
            t.contains("  Service isolation (--isolate): possible; RSS contexts: yes; flow rules: yes\n"),
            "{t}"
        );
        let j = to_json(&topo, &dk, &ifaces);
        assert_eq!(
            j["interfaces"][0]["isolation"],
            json!({"rss_contexts": {"supported": true}, "flow_rules": {"supported": true}, "possible": true})
        );
        ifaces[0].isolation = Ok(IsolationSupport {
            no_contexts: Some("ETHTOOL_GRSSH with an RSS context: Operation not supported".into()),
            no_rules: None,
        });
        let t = to_text(&topo, &dk, &ifaces);
        assert!(
            t.contains("  Service isolation (--isolate): refused; RSS contexts: no (ETHTOOL_GRSSH with an RSS context: Operation not supported); flow rules: yes\n"),
            "{t}"
        );
        let j = to_json(&topo, &dk, &ifaces);
        let iso = &j["interfaces"][0]["isolation"];
        assert_eq!(iso["possible"], false, "{iso}");
        assert_eq!(iso["rss_contexts"]["supported"], false, "{iso}");
        assert_eq!(
            iso["rss_contexts"]["reason"],
            "ETHTOOL_GRSSH with an RSS context: Operation not supported"
        );
        assert_eq!(iso["flow_rules"], json!({"supported": true}));
        ifaces[0].isolation = Err("a capture holds no RSS contexts or flow rules".into());
        let t = to_text(&topo, &dk, &ifaces);
        assert!(
            t.contains("  Service isolation (--isolate): not read (a capture holds no RSS contexts"),
            "{t}"
        );
        assert_eq!(
            to_json(&topo, &dk, &ifaces)["interfaces"][0]["isolation"],
            json!({"unreadable": "a capture holds no RSS contexts or flow rules"})
        );
    }

    #[test]
    fn each_query_says_which_interface_answered() {
        let (topo, dk, mut ifaces) = fake_nic();
        let t = to_text(&topo, &dk, &ifaces);
        assert!(
            t.contains("  Answered by: channels netlink, RSS ioctl, rings netlink, coalescing netlink\n"),
            "{t}"
        );
        assert!(t.contains("  Rings: rx 256 tx 512 (max: rx 4096 tx 4096)\n"), "{t}");
        assert!(
            t.contains(
                "  Coalescing: adaptive rx on tx off, rx-usecs 3 rx-frames 0, tx-usecs 0 tx-frames 0\n"
            ),
            "{t}"
        );
        let i = &to_json(&topo, &dk, &ifaces)["interfaces"][0];
        assert_eq!((&i["channels_via"], &i["rss_via"]), (&json!("netlink"), &json!("ioctl")), "{i}");
        assert_eq!(
            i["rings"],
            json!({"supported": true, "rx": 256, "tx": 512, "rx_max": 4096, "tx_max": 4096, "via": "netlink"})
        );
        assert_eq!(i["coalesce"]["rx_usecs"], 3);
        assert_eq!(i["coalesce"]["via"], "netlink");
        // A capture asked no kernel: no via, no rings, said so in text.
        let nic = &mut ifaces[0];
        (nic.channels_via, nic.rss_via, nic.rings, nic.coalesce) = (None, None, None, None);
        nic.netlink_unavailable =
            Some("the kernel has no ethtool generic netlink family (Linux 5.6+)".into());
        let t = to_text(&topo, &dk, &ifaces);
        assert!(
            t.contains("  Answered by: channels not asked (a capture), RSS not asked (a capture)"),
            "{t}"
        );
        assert!(t.contains("  ethtool netlink: the kernel has no ethtool"), "{t}");
        assert!(!t.contains("  Rings:"), "{t}");
        let i = &to_json(&topo, &dk, &ifaces)["interfaces"][0];
        assert!(i["rss_via"].is_null() && i["rings"].is_null() && i["coalesce"].is_null(), "{i}");
    }

    #[test]
    fn flow_rules_and_contexts_are_listed() {
        let (topo, dk, ifaces) = fake_nic();
        let t = to_text(&topo, &dk, &ifaces);
        assert!(t.contains("  Flow rules (looked at before the table, lowest location first):\n        3: udp4 dst-port 443 context 1 loc 3\n"), "{t}");
        assert!(t.contains("  RSS context 1: key 6d:5a:"), "{t}");
        assert!(t.contains(", 4 entries over queues 2-3, input transform none"), "{t}");
        let j = to_json(&topo, &dk, &ifaces);
        let r = &j["interfaces"][0]["flow_rules"];
        assert_eq!(r["rules"], json!(["udp4 dst-port 443 context 1 loc 3"]), "{r}");
        assert_eq!(r["contexts"]["1"]["table"], json!([2, 3, 2, 3]), "{r}");
    }

    #[test]
    fn text_of_a_nic_with_rss() {
        let (topo, dk, ifaces) = fake_nic();
        let t = to_text(&topo, &dk, &ifaces);
        assert!(t.contains("CPUs: 4 online (0-3)"), "{t}");
        assert!(t.contains("  node1: CPUs 2-3"), "{t}");
        assert!(t.contains("Interface eth9: driver ixgbe, up, mtu 1500, NUMA node 0"), "{t}");
        assert!(t.contains("RX flow hash indirection table (16 entries, rings 0-1; ETHTOOL_GRSSH):"), "{t}");
        assert!(t.contains("      0:     0     1     0     1     0     1     0     1\n"), "{t}");
        assert!(t.contains("      8:     0     1"), "{t}");
        assert!(t.contains("RSS hash key (40 bytes) (the Microsoft default key):"), "{t}");
        assert!(t.contains("    6d:5a:56:da:"), "{t}");
        assert!(t.contains("    key check: good\n"), "{t}");
        assert!(t.contains("RSS hash function: toeplitz"), "{t}");
        assert!(t.contains("tcp4   ip_src, ip_dst, l4_src_port, l4_dst_port (4-tuple)"), "{t}");
        assert!(t.contains("udp4   ip_src, ip_dst (2-tuple)"), "{t}");
        assert!(t.contains("rx-1   IRQ 71 (eth9-TxRx-1) on CPUs 2; RPS CPUs 2-3 (mask c), rps_flow_cnt 0, 8 table entries"), "{t}");
        assert!(t.contains("tx-0   IRQ 70 (eth9-TxRx-0) on CPUs 0; XPS not readable"), "{t}");
        assert!(t.contains("IRQ 72 (eth9, other) on CPUs 0-3"), "{t}");
        assert!(!t.contains("not reported"), "{t}");
        assert!(
            t.contains("  Notes:\n    - IRQ 71 (eth9-TxRx-1) may run on CPUs 2 outside the NIC's NUMA node 0 (CPUs 0-1)\n"),
            "{t}"
        );
    }

    #[test]
    fn json_of_a_nic_with_rss() {
        let (topo, dk, ifaces) = fake_nic();
        let v = to_json(&topo, &dk, &ifaces);
        let i = &v["interfaces"][0];
        assert_eq!(i["rss"]["supported"], true);
        assert_eq!(i["rss"]["key"], hex(&MICROSOFT_KEY));
        assert_eq!(i["rss"]["key_is"], "microsoft");
        assert_eq!(i["rss"]["key_check"], json!({ "verdict": "good", "problems": [] }));
        assert_eq!(i["rss"]["table_size"], 16);
        assert_eq!(i["rss"]["table"][3], 1);
        assert_eq!(i["hash_fields"]["flows"][0]["tuple"], "4-tuple");
        assert_eq!(i["hash_fields"]["flows"][1]["fields"], json!(["ip_src", "ip_dst"]));
        assert_eq!(i["channels"]["combined"], 2);
        assert_eq!(i["rx_queues"][1]["irq"], 71);
        assert_eq!(i["rx_queues"][1]["irq_cpus"], json!([2]));
        assert_eq!(i["notes"].as_array().unwrap().len(), 1, "{}", i["notes"]);
        assert_eq!(i["rx_queues"][1]["rps_cpus"], json!([2, 3]));
        assert_eq!(i["rx_queues"][0]["rss_table_entries"], 8);
        assert_eq!(i["tx_queues"][0]["irq"], 70);
        assert_eq!(i["irqs"][2]["kind"], "other");
        assert_eq!(v["numa_nodes"][1]["cpus"], json!([2, 3]));
        assert_eq!(v["default_key"]["initialised"], false);
    }

    #[test]
    fn kernel_map_text_and_json() {
        let (topo, dk, mut ifaces) = fake_nic();
        let i = &mut ifaces[0];
        // rx-0: NAPI 9 on IRQ 70 with a thread; rx-1: NAPI 10 without an IRQ
        // (kept the name guess); tx: no NAPI.
        i.map.source = KERNEL_MAP;
        i.map.kernel_unavailable = None;
        i.map.rx[0] =
            Link { napi_id: Some(9), napi_pid: Some(412), irq_source: Some(KERNEL_MAP), ..Link::default() };
        i.map.rx[0].irq = i.irqs.first().cloned();
        i.map.rx[1].napi_id = Some(10);
        let t = to_text(&topo, &dk, &ifaces);
        assert!(t.contains("  Queue -> NAPI -> IRQ map: kernel netlink\n"), "{t}");
        assert!(t.contains("rx-0   NAPI 9 (thread PID 412), IRQ 70 (eth9-TxRx-0) on CPUs 0; RPS off"), "{t}");
        assert!(
            t.contains("rx-1   NAPI 10, IRQ 71 (eth9-TxRx-1) on CPUs 2 (guessed from its name: the kernel links no IRQ to the NAPI)"),
            "{t}"
        );
        assert!(t.contains("(guessed from its name: the kernel links no NAPI to the queue)"), "{t}");
        let v = to_json(&topo, &dk, &ifaces);
        let j = &v["interfaces"][0];
        assert_eq!(j["queue_map"], json!({ "source": "kernel netlink", "kernel_unavailable": null }));
        assert_eq!(j["rx_queues"][0]["napi_id"], 9);
        assert_eq!(j["rx_queues"][0]["napi_pid"], 412);
        assert_eq!(j["rx_queues"][0]["irq_source"], "kernel netlink");
        assert_eq!(j["rx_queues"][1]["irq_source"], "guessed from IRQ names");
        assert_eq!(j["tx_queues"][0]["napi_id"], Value::Null);
    }

    #[test]
    fn guessed_map_says_why() {
        let (topo, dk, ifaces) = fake_nic();
        let t = to_text(&topo, &dk, &ifaces);
        assert!(
            t.contains(
                "  Queue -> IRQ map: guessed from IRQ names (the kernel's map is not available: a test)\n"
            ),
            "{t}"
        );
        let v = to_json(&topo, &dk, &ifaces);
        assert_eq!(v["interfaces"][0]["queue_map"]["source"], "guessed from IRQ names");
        assert_eq!(v["interfaces"][0]["rx_queues"][1]["irq"], 71);
        assert_eq!(v["interfaces"][0]["rx_queues"][1]["napi_id"], Value::Null);
    }

    #[test]
    fn notes_on_tables() {
        let (topo, _, mut ifaces) = fake_nic();
        let i = &mut ifaces[0];
        assert_eq!(notes(&topo, i).len(), 1);
        // Three combined channels but a table over rings 0-1, one entry naming ring 5.
        i.channels = Reported::Supported(Channels { combined_count: 3, ..Channels::default() });
        if let Reported::Supported(r) = &mut i.rss {
            r.indir[15] = 5;
        }
        let n = notes(&topo, i);
        assert!(
            n.contains(&"the indirection table names ring(s) 5 but the device has 3 RX queue(s)".to_string()),
            "{n:?}"
        );
        // Queue 2 is out of the table, but rule 3 reaches it through context 1 (table 2, 3, 2, 3).
        assert!(
            n.contains(
                &"RX queue(s) 2 are left out of the indirection table: they get the flows of rule(s) 3 \
                  through RSS context 1"
                    .to_string()
            ),
            "{n:?}"
        );
        assert!(!n.iter().any(|x| x.contains("get no RSS traffic")), "{n:?}");
        // Without the rule, nothing reaches it.
        i.rules = Ok(NicRules::default());
        let n = notes(&topo, i);
        assert!(
            n.contains(
                &"RX queue(s) 2 get no RSS traffic: the indirection table never names them".to_string()
            ),
            "{n:?}"
        );
        // One NUMA node: no locality notes.
        let flat = Topology { nodes: vec![topo.nodes[0].clone()], ..topo.clone() };
        assert_eq!(notes(&flat, i).len(), 2);
    }

    #[test]
    fn nic_keys_get_the_key_check() {
        // A driver reporting an all-zero key: every flow in one bucket.
        let (topo, dk, mut ifaces) = fake_nic();
        if let Reported::Supported(r) = &mut ifaces[0].rss {
            r.key = vec![0; 40];
        }
        let t = to_text(&topo, &dk, &ifaces);
        assert!(t.contains("    key check: WEAK, cannot reach every bucket"), "{t}");
        assert!(t.contains("source port alone reaches only 2^0 of 2^7 buckets"), "{t}");
        let v = to_json(&topo, &dk, &ifaces);
        assert_eq!(v["interfaces"][0]["rss"]["key_check"]["verdict"], "weak");
        assert_eq!(key_check(&[1, 2, 3]), None);
        assert_eq!(key_check(&[0x6d, 0x5a].repeat(20)).unwrap().0, "good");
    }

    #[test]
    fn known_keys() {
        assert_eq!(key_is(&MICROSOFT_KEY, None), Some("microsoft"));
        let sym: Vec<u8> = [0x6d, 0x5a].repeat(20);
        assert_eq!(key_is(&sym, None), Some("symmetric"));
        let k = DefaultKey { key: (1..=52).collect(), initialised: true };
        assert_eq!(key_is(&k.key[..40], Some(&k)), Some("kernel_default"));
        assert_eq!(key_is(&[1, 2, 3, 4, 5], None), None);
        assert_eq!(key_is(&[], None), None);
    }
}
