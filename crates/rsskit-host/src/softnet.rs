//! The kernel's receive counters, for `rsskit top` and rebalancing: per CPU
//! NET_RX softirqs (`/proc/softirqs`) and the backlog counters of
//! `/proc/net/softnet_stat` (processed, dropped, time squeezed, RPS IPIs),
//! per IRQ counts (`/proc/interrupts`) and an interface's packet and byte
//! counters (`/sys/class/net/IF/statistics`).
//!
//! A [`Sample`] is one read of all of them; [`Rates`] is the difference of
//! two samples divided by the time between them. Parsers are pure functions
//! over the file text; readers take a [`Roots`] so tests can use a tree.

use rsskit_linux::netdev::{self, IfaceIrq, Roots};
use serde::Serialize;
use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::path::PathBuf;
use std::time::Instant;

/// Errors reading the counters.
#[derive(Debug, thiserror::Error)]
pub enum SoftnetError {
    /// A counters file could not be read.
    #[error("reading {path}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The read error.
        source: io::Error,
    },
    /// A counters file did not have the expected shape.
    #[error("{path}: {msg}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// What was wrong with it.
        msg: String,
    },
}

/// One CPU's row of `/proc/net/softnet_stat`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Softnet {
    /// Packets taken off the backlog / NAPI and handed to the stack.
    pub processed: u64,
    /// Dropped: backlog queue full (`netdev_max_backlog`).
    pub dropped: u64,
    /// NET_RX ran out of budget or time with work left.
    pub time_squeeze: u64,
    /// RPS: times this CPU was woken by an IPI to process its backlog.
    pub received_rps: u64,
    /// Dropped by the flow limit.
    pub flow_limit: u64,
}

/// Parses `/proc/net/softnet_stat`: one line per online CPU, hex columns
/// (0 processed, 1 dropped, 2 time_squeeze, 9 received_rps, 10
/// flow_limit_count; since Linux 5.10 column 12 is the CPU number — older
/// kernels list online CPUs in order, so the line index is used then).
pub fn parse_softnet(text: &str) -> Result<Vec<(usize, Softnet)>, String> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let cols: Vec<u64> = line
            .split_whitespace()
            .map(|c| u64::from_str_radix(c, 16).map_err(|_| format!("line {}: '{c}' is not hex", i + 1)))
            .collect::<Result<_, _>>()?;
        if cols.len() < 3 {
            return Err(format!("line {}: {} columns, expected at least 3", i + 1, cols.len()));
        }
        let col = |n: usize| cols.get(n).copied().unwrap_or(0);
        let cpu = if cols.len() >= 13 { col(12) as usize } else { i };
        out.push((
            cpu,
            Softnet {
                processed: col(0),
                dropped: col(1),
                time_squeeze: col(2),
                received_rps: col(9),
                flow_limit: col(10),
            },
        ));
    }
    Ok(out)
}

/// The `NET_RX:` row of `/proc/softirqs`: count per CPU column (indexed by
/// the header's `CPUn` names).
pub fn parse_softirqs_net_rx(text: &str) -> Result<Vec<(usize, u64)>, String> {
    let mut lines = text.lines();
    let header = lines.next().ok_or("empty file")?;
    let cpus: Vec<usize> = header
        .split_whitespace()
        .map(|t| t.strip_prefix("CPU").and_then(|n| n.parse().ok()).ok_or(format!("header word '{t}'")))
        .collect::<Result<_, _>>()?;
    let row = lines.find_map(|l| l.trim_start().strip_prefix("NET_RX:")).ok_or("no NET_RX row")?;
    let counts: Vec<u64> = row
        .split_whitespace()
        .map(|c| c.parse().map_err(|_| format!("NET_RX count '{c}' is not a number")))
        .collect::<Result<_, _>>()?;
    Ok(cpus.into_iter().zip(counts).collect())
}

/// An interface's totals from `/sys/class/net/IF/statistics`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct IfaceCounters {
    /// Packets received.
    pub rx_packets: u64,
    /// Bytes received.
    pub rx_bytes: u64,
    /// Received packets dropped by the kernel or driver.
    pub rx_dropped: u64,
    /// Packets sent.
    pub tx_packets: u64,
    /// Bytes sent.
    pub tx_bytes: u64,
    /// Frames the NIC itself lost, before the kernel saw them (out of RX
    /// buffers, FIFO overruns, ring overruns: `rx_missed_errors`,
    /// `rx_fifo_errors`, `rx_over_errors`); `None` when the driver exposes
    /// none of those files.
    pub nic_dropped: Option<u64>,
}

/// The statistics files of frames a NIC loses before the kernel sees them.
pub const NIC_DROP_COUNTERS: [&str; 3] = ["rx_missed_errors", "rx_fifo_errors", "rx_over_errors"];

/// One IRQ of an interface and its count per CPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct QueueIrq {
    /// The IRQ number.
    pub irq: u32,
    /// Its action name in `/proc/interrupts`.
    pub name: String,
    /// The queue number in its name, if any.
    pub queue: Option<usize>,
    /// Interrupts summed over every CPU.
    pub total: u64,
}

/// One read of every counter.
#[derive(Debug, Clone)]
pub struct Sample {
    /// When the counters were read (rates divide by the time between samples).
    pub at: Instant,
    /// Indexed by CPU number (CPUs absent from the files hold zeros).
    pub softnet: Vec<Softnet>,
    /// The CPUs `/proc/net/softnet_stat` lists (the online ones).
    pub present: Vec<usize>,
    /// `NET_RX` softirqs per CPU (`/proc/softirqs`), indexed by CPU number.
    pub net_rx: Vec<u64>,
    /// The interface's counters and IRQs, when one was asked for.
    pub iface: Option<IfaceCounters>,
    /// The interface's queue IRQs, when an interface was asked for.
    pub irqs: Vec<QueueIrq>,
    /// RX queue -> (packets, bytes), where the driver's statistics name
    /// them ([`rx_queue_stats`]); empty otherwise.
    pub queues: BTreeMap<usize, (u64, u64)>,
}

/// The RX queue and field of a driver statistic named as drivers name
/// per-queue counters: `rx_queue_N_packets`/`_bytes` (Intel, virtio),
/// `rxN_packets`/`_bytes` (mlx5), `rx-N.packets`/`.bytes`.
fn rx_queue_field(name: &str) -> Option<(usize, bool)> {
    let (rest, packets) = if let Some(r) = name.strip_suffix("packets") {
        (r, true)
    } else {
        (name.strip_suffix("bytes")?, false)
    };
    let num = rest
        .strip_prefix("rx_queue_")
        .and_then(|r| r.strip_suffix('_'))
        .or_else(|| rest.strip_prefix("rx-").and_then(|r| r.strip_suffix('.')))
        .or_else(|| rest.strip_prefix("rx").and_then(|r| r.strip_suffix('_')))?;
    if num.is_empty() || !num.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((num.parse().ok()?, packets))
}

/// Per RX queue (packets, bytes) from driver statistics (`ethtool -S`).
pub fn rx_queue_stats(stats: &[(String, u64)]) -> BTreeMap<usize, (u64, u64)> {
    let mut out: BTreeMap<usize, (u64, u64)> = BTreeMap::new();
    for (name, v) in stats {
        if let Some((q, packets)) = rx_queue_field(name) {
            let e = out.entry(q).or_default();
            if packets {
                e.0 = *v;
            } else {
                e.1 = *v;
            }
        }
    }
    out
}

fn read(path: PathBuf) -> Result<String, SoftnetError> {
    fs::read_to_string(&path).map_err(|source| SoftnetError::Read { path, source })
}

fn read_u64(path: PathBuf) -> Result<u64, SoftnetError> {
    let t = read(path.clone())?;
    t.trim().parse().map_err(|_| SoftnetError::Parse { path, msg: format!("'{}' is not a number", t.trim()) })
}

fn dense<T: Copy + Default>(pairs: impl IntoIterator<Item = (usize, T)>) -> Vec<T> {
    let mut v = Vec::new();
    for (cpu, x) in pairs {
        if v.len() <= cpu {
            v.resize(cpu + 1, T::default());
        }
        v[cpu] = x;
    }
    v
}

/// Reads the interface's statistics.
pub fn iface_counters(roots: &Roots, iface: &str) -> Result<IfaceCounters, SoftnetError> {
    let p = |f: &str| roots.sys.join(format!("class/net/{iface}/statistics/{f}"));
    Ok(IfaceCounters {
        rx_packets: read_u64(p("rx_packets"))?,
        rx_bytes: read_u64(p("rx_bytes"))?,
        rx_dropped: read_u64(p("rx_dropped"))?,
        tx_packets: read_u64(p("tx_packets"))?,
        tx_bytes: read_u64(p("tx_bytes"))?,
        nic_dropped: nic_drops(roots, iface)?.map(|d| d.values().sum()),
    })
}

/// The NIC's own drop counters by file name ([`NIC_DROP_COUNTERS`]), those
/// the driver exposes; `None` when it exposes none.
pub fn nic_drops(roots: &Roots, iface: &str) -> Result<Option<BTreeMap<&'static str, u64>>, SoftnetError> {
    // The name may come from a plan file: one path component, as the kernel allows.
    if iface.is_empty() || iface.len() >= 16 || iface.contains('/') || iface == "." || iface == ".." {
        return Ok(None);
    }
    let mut out = BTreeMap::new();
    for name in NIC_DROP_COUNTERS {
        let path = roots.sys.join(format!("class/net/{iface}/statistics/{name}"));
        if !path.exists() {
            continue;
        }
        out.insert(name, read_u64(path)?);
    }
    Ok((!out.is_empty()).then_some(out))
}

/// Reads every counter once; `iface` adds the interface's statistics and
/// the counts of its IRQs (`irqs` as [`netdev::iface_irqs`] found them).
pub fn sample(roots: &Roots, iface: Option<(&str, &[IfaceIrq])>) -> Result<Sample, SoftnetError> {
    let at = Instant::now();
    let sn_path = roots.proc.join("net/softnet_stat");
    let softnet =
        parse_softnet(&read(sn_path.clone())?).map_err(|msg| SoftnetError::Parse { path: sn_path, msg })?;
    let si_path = roots.proc.join("softirqs");
    let net_rx = parse_softirqs_net_rx(&read(si_path.clone())?)
        .map_err(|msg| SoftnetError::Parse { path: si_path, msg })?;
    let (counters, irqs) = match iface {
        None => (None, Vec::new()),
        Some((name, want)) => {
            let lines = netdev::interrupts(roots);
            let irqs = want
                .iter()
                .map(|i| QueueIrq {
                    irq: i.irq,
                    name: i.name.clone(),
                    queue: i.queue,
                    total: lines.iter().find(|l| l.irq == i.irq).map_or(0, |l| l.counts.iter().sum()),
                })
                .collect();
            (Some(iface_counters(roots, name)?), irqs)
        }
    };
    let present = softnet.iter().map(|(c, _)| *c).collect();
    Ok(Sample {
        at,
        softnet: dense(softnet),
        present,
        net_rx: dense(net_rx),
        iface: counters,
        irqs,
        queues: BTreeMap::new(),
    })
}

/// Per-second rates of one CPU between two samples.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct CpuRates {
    /// The CPU number.
    pub cpu: usize,
    /// `NET_RX` softirqs per second.
    pub net_rx_softirqs: f64,
    /// Packets its backlog processed per second (`softnet_stat`).
    pub processed: f64,
    /// Packets dropped per second because its backlog was full.
    pub dropped: f64,
    /// Times per second its NAPI budget or time ran out with work left.
    pub time_squeeze: f64,
    /// RPS inter-processor interrupts received per second.
    pub rps_ipis: f64,
}

/// Per-second rates of one IRQ.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct IrqRate {
    /// The IRQ number.
    pub irq: u32,
    /// Its action name in `/proc/interrupts`.
    pub name: String,
    /// The queue number in its name, if any.
    pub queue: Option<usize>,
    /// Interrupts per second over every CPU.
    pub per_sec: f64,
}

/// Per-second rates of one RX queue (driver statistics).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct QueueRate {
    /// The RX queue number.
    pub queue: usize,
    /// Packets per second.
    pub packets: f64,
    /// Bytes per second.
    pub bytes: f64,
}

/// Per-second rates of the interface.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct IfaceRates {
    /// Packets received per second.
    pub rx_packets: f64,
    /// Bytes received per second.
    pub rx_bytes: f64,
    /// Received packets dropped per second.
    pub rx_dropped: f64,
    /// Packets sent per second.
    pub tx_packets: f64,
    /// Bytes sent per second.
    pub tx_bytes: f64,
    /// Frames the NIC lost per second ([`IfaceCounters::nic_dropped`]).
    pub nic_dropped: Option<f64>,
}

/// Rates between two samples.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Rates {
    /// Seconds between the samples.
    pub seconds: f64,
    /// Per online CPU, in CPU order.
    pub cpus: Vec<CpuRates>,
    /// Max over mean of the CPUs' processed packets/s (1 = even; 0 = no packets).
    pub imbalance: f64,
    /// The interface's rates, when one was asked for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub iface: Option<IfaceRates>,
    /// Per queue IRQ, when an interface was asked for.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub irqs: Vec<IrqRate>,
    /// Per RX queue packets and bytes/s, where the driver counts them.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub queues: Vec<QueueRate>,
}

/// Max over mean of `loads`; 0 when all are zero (no load, nothing to say):
/// the one definition, the move rule's.
pub use rsskit_core::rebalance::imbalance;

/// `later - earlier` per second. `cpus` limits the CPUs reported (the CPUs
/// `softnet_stat` lists when empty). Counters that went backwards count as zero.
pub fn rates(earlier: &Sample, later: &Sample, cpus: &[usize]) -> Rates {
    let secs = later.at.saturating_duration_since(earlier.at).as_secs_f64().max(1e-9);
    let per = |a: u64, b: u64| b.saturating_sub(a) as f64 / secs;
    let list = if cpus.is_empty() { &later.present } else { cpus };
    let get = |v: &[Softnet], c: usize| v.get(c).copied().unwrap_or_default();
    let geti = |v: &[u64], c: usize| v.get(c).copied().unwrap_or(0);
    let cpus: Vec<CpuRates> = list
        .iter()
        .map(|&c| {
            let (a, b) = (get(&earlier.softnet, c), get(&later.softnet, c));
            CpuRates {
                cpu: c,
                net_rx_softirqs: per(geti(&earlier.net_rx, c), geti(&later.net_rx, c)),
                processed: per(a.processed, b.processed),
                dropped: per(a.dropped, b.dropped),
                time_squeeze: per(a.time_squeeze, b.time_squeeze),
                rps_ipis: per(a.received_rps, b.received_rps),
            }
        })
        .collect();
    let loads: Vec<f64> = cpus.iter().map(|c| c.processed).collect();
    let iface = match (earlier.iface, later.iface) {
        (Some(a), Some(b)) => Some(IfaceRates {
            rx_packets: per(a.rx_packets, b.rx_packets),
            rx_bytes: per(a.rx_bytes, b.rx_bytes),
            rx_dropped: per(a.rx_dropped, b.rx_dropped),
            tx_packets: per(a.tx_packets, b.tx_packets),
            tx_bytes: per(a.tx_bytes, b.tx_bytes),
            nic_dropped: a.nic_dropped.zip(b.nic_dropped).map(|(a, b)| per(a, b)),
        }),
        _ => None,
    };
    let irqs = later
        .irqs
        .iter()
        .map(|q| {
            let before = earlier.irqs.iter().find(|e| e.irq == q.irq).map_or(q.total, |e| e.total);
            IrqRate { irq: q.irq, name: q.name.clone(), queue: q.queue, per_sec: per(before, q.total) }
        })
        .collect();
    let queues = later
        .queues
        .iter()
        .map(|(&q, &(p, b))| {
            let (p0, b0) = earlier.queues.get(&q).copied().unwrap_or((p, b));
            QueueRate { queue: q, packets: per(p0, p), bytes: per(b0, b) }
        })
        .collect();
    Rates { seconds: secs, imbalance: imbalance(&loads), cpus, iface, irqs, queues }
}

// nicres: the NIC's drop counters from the best source there is.

/// Drop counters of driver statistics (`ethtool -S`) that count frames the
/// NIC lost for want of buffers or on overruns: mlx5 (`rx_out_of_buffer`,
/// `rx_discards_phy`), Intel (`rx_no_buffer_count`, `rx_missed_errors`),
/// and the generic overrun names.
pub const ETHTOOL_S_DROPS: [&str; 6] = [
    "rx_out_of_buffer",
    "rx_discards_phy",
    "rx_no_buffer_count",
    "rx_missed_errors",
    "rx_fifo_errors",
    "rx_over_errors",
];

/// A NIC's drop counters and where they came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NicDrops {
    /// `qstats` (netdev netlink `qstats-get`, the kernel's standard
    /// statistics), `ethtool -S` (the driver's own names) or `statistics`
    /// (`/sys/class/net/IF/statistics`).
    pub source: &'static str,
    /// Counter name -> value.
    pub counters: BTreeMap<&'static str, u64>,
}

/// The drop counters of `names` in driver statistics (`ethtool -S`).
pub fn ethtool_s_drops(stats: &[(String, u64)]) -> BTreeMap<&'static str, u64> {
    let mut out = BTreeMap::new();
    for (name, v) in stats {
        if let Some(k) = ETHTOOL_S_DROPS.iter().find(|k| **k == name.as_str()) {
            out.insert(*k, *v);
        }
    }
    out
}

/// The NIC's drop counters: on the live host the kernel's `qstats` where
/// the driver fills a drop counter there, else the driver's `ethtool -S`
/// names; then (and in test trees) the statistics files. `None` when no
/// source has any.
pub fn nic_drop_counters(roots: &Roots, iface: &str, live: bool) -> Result<Option<NicDrops>, SoftnetError> {
    if live {
        if let Ok(d) = rsskit_linux::netdev_nl::qstats_drops(iface) {
            if !d.is_empty() {
                return Ok(Some(NicDrops { source: "qstats", counters: d.into_iter().collect() }));
            }
        }
        if let Ok(rsskit_linux::ethtool::Reported::Supported(st)) =
            rsskit_linux::ethtool::Ethtool::open(iface).and_then(|e| e.stats())
        {
            let d = ethtool_s_drops(&st);
            if !d.is_empty() {
                return Ok(Some(NicDrops { source: "ethtool -S", counters: d }));
            }
        }
    }
    Ok(nic_drops(roots, iface)?.map(|counters| NicDrops { source: "statistics", counters }))
}

/// The counters that grew from `before` to `after` (same source only),
/// with how much: `check`'s warning.
pub fn drops_grown(before: &NicDrops, after: &NicDrops) -> Vec<(&'static str, u64)> {
    if before.source != after.source {
        return Vec::new();
    }
    after
        .counters
        .iter()
        .filter_map(|(k, b)| {
            let a = before.counters.get(k)?;
            (b > a).then(|| (*k, b - a))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const SOFTNET_NEW: &str = "\
0000a000 00000001 00000002 00000000 00000000 00000000 00000000 00000000 00000000 00000005 00000000 00000000 00000000
0000b000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000006 00000000 00000000 00000002
";

    #[test]
    fn softnet_columns_and_cpu_numbers() {
        let v = parse_softnet(SOFTNET_NEW).unwrap();
        assert_eq!(v.len(), 2);
        assert_eq!(v[0].0, 0);
        assert_eq!(
            v[0].1,
            Softnet { processed: 0xa000, dropped: 1, time_squeeze: 2, received_rps: 5, flow_limit: 0 }
        );
        // Column 12 names CPU 2 (CPU 1 offline).
        assert_eq!(v[1].0, 2);
        assert_eq!(v[1].1.processed, 0xb000);
        // Old kernels: 11 columns, line index = CPU.
        let old = "00000010 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000\n\
                   00000020 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000\n";
        let v = parse_softnet(old).unwrap();
        assert_eq!((v[1].0, v[1].1.processed), (1, 0x20));
        assert!(parse_softnet("zz 0 0").unwrap_err().contains("'zz' is not hex"));
    }

    #[test]
    fn softirqs_net_rx_row() {
        let t = "                    CPU0       CPU1\n          HI:          1          0\n      NET_RX:        100        250\n";
        assert_eq!(parse_softirqs_net_rx(t).unwrap(), vec![(0, 100), (1, 250)]);
        assert!(parse_softirqs_net_rx("    CPU0\n HI: 1\n").unwrap_err().contains("NET_RX"));
    }

    #[test]
    fn per_queue_driver_stats() {
        let s: Vec<(String, u64)> = [
            ("rx_queue_0_packets", 10),
            ("rx_queue_0_bytes", 1000),
            ("rx_queue_12_packets", 7),
            ("rx3_packets", 5),
            ("rx3_bytes", 500),
            ("rx-4.packets", 4),
            ("rx_queue_0_xdp_packets", 99),
            ("rx_packets", 1),
            ("tx_queue_0_packets", 2),
            ("rx_queue_x_packets", 3),
        ]
        .iter()
        .map(|(n, v)| (n.to_string(), *v))
        .collect();
        let q = rx_queue_stats(&s);
        assert_eq!(
            q.into_iter().collect::<Vec<_>>(),
            vec![(0, (10, 1000)), (3, (5, 500)), (4, (4, 0)), (12, (7, 0))]
        );
    }

    #[test]
    fn nic_drops_read_the_files_the_driver_has() {
        let dir = std::env::temp_dir().join(format!("rsskit-nicdrops-{}", std::process::id()));
        let stats = dir.join("sys/class/net/eth0/statistics");
        fs::create_dir_all(&stats).unwrap();
        let roots = Roots { sys: dir.join("sys"), proc: dir.join("proc") };
        assert_eq!(nic_drops(&roots, "eth0").unwrap(), None, "no such file: not zero, unknown");
        fs::write(stats.join("rx_missed_errors"), "12\n").unwrap();
        fs::write(stats.join("rx_fifo_errors"), "3\n").unwrap();
        let d = nic_drops(&roots, "eth0").unwrap().unwrap();
        assert_eq!(d.into_iter().collect::<Vec<_>>(), vec![("rx_fifo_errors", 3), ("rx_missed_errors", 12)]);
        fs::write(stats.join("rx_over_errors"), "x\n").unwrap();
        assert!(nic_drops(&roots, "eth0").is_err(), "a file that is not a number is an error");
        assert_eq!(nic_drops(&roots, "../eth0").unwrap(), None, "a name that is not one component");
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn imbalance_is_max_over_mean() {
        assert_eq!(imbalance(&[10.0, 10.0]), 1.0);
        assert_eq!(imbalance(&[30.0, 10.0, 20.0]), 1.5);
        assert_eq!(imbalance(&[0.0, 0.0]), 0.0);
        assert_eq!(imbalance(&[]), 0.0);
    }

    #[test]
    fn rates_between_samples() {
        let t0 = Instant::now();
        let s = |at, p0, p1, nr| Sample {
            at,
            softnet: vec![
                Softnet { processed: p0, ..Softnet::default() },
                Softnet { processed: p1, received_rps: p1 / 10, ..Softnet::default() },
            ],
            present: vec![0, 1],
            net_rx: vec![nr, nr],
            iface: Some(IfaceCounters { rx_packets: p0 + p1, ..IfaceCounters::default() }),
            irqs: vec![QueueIrq { irq: 40, name: "eth0-TxRx-0".into(), queue: Some(0), total: nr }],
            queues: BTreeMap::from([(0, (p0, p0 * 100))]),
        };
        let a = s(t0, 1000, 1000, 5);
        let b = s(t0 + Duration::from_secs(2), 3000, 1000 + 6000, 25);
        let r = rates(&a, &b, &[]);
        assert_eq!(r.seconds, 2.0);
        assert_eq!(r.cpus.len(), 2);
        assert_eq!(r.cpus[0].processed, 1000.0);
        assert_eq!(r.cpus[1].processed, 3000.0);
        assert_eq!(r.cpus[1].rps_ipis, 300.0);
        assert_eq!(r.cpus[0].net_rx_softirqs, 10.0);
        assert_eq!(r.imbalance, 1.5);
        assert_eq!(r.iface.unwrap().rx_packets, 4000.0);
        assert_eq!(r.irqs[0].per_sec, 10.0);
        assert_eq!((r.queues[0].packets, r.queues[0].bytes), (1000.0, 100000.0));
        // By default only the CPUs softnet_stat lists (CPU 0 offline here).
        let mut c = b.clone();
        c.present = vec![1];
        let r = rates(&a, &c, &[]);
        assert_eq!((r.cpus.len(), r.cpus[0].cpu), (1, 1));
        // Only the CPUs asked for; a counter that went backwards is zero.
        let r = rates(&b, &a, &[1]);
        assert_eq!(r.cpus.len(), 1);
        assert_eq!(r.cpus[0].processed, 0.0);
    }

    // nicres
    #[test]
    fn drop_counters_grown_and_named() {
        let st = vec![("rx_out_of_buffer".to_string(), 5), ("rx_packets".to_string(), 100)];
        assert_eq!(ethtool_s_drops(&st).into_iter().collect::<Vec<_>>(), vec![("rx_out_of_buffer", 5)]);
        let a = NicDrops { source: "qstats", counters: [("rx-hw-drops", 10), ("rx-alloc-fail", 3)].into() };
        let b = NicDrops { source: "qstats", counters: [("rx-hw-drops", 17), ("rx-alloc-fail", 3)].into() };
        assert_eq!(drops_grown(&a, &b), vec![("rx-hw-drops", 7)]);
        assert!(drops_grown(&b, &a).is_empty(), "a counter that went back (reset) is no growth");
        let c = NicDrops { source: "statistics", ..b.clone() };
        assert!(drops_grown(&a, &c).is_empty(), "counters of two sources are not compared");
    }
}
