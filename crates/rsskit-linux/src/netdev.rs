//! Network interfaces as sysfs and procfs show them: RX/TX queues with their
//! RPS (`rps_cpus`, `rps_flow_cnt`) and XPS (`xps_cpus`) settings, the
//! device's IRQs (`msi_irqs` + `/proc/interrupts` names) and each IRQ's CPUs
//! (`/proc/irq/N/smp_affinity_list`), the driver name, and the kernel's
//! default RSS key (`/proc/sys/net/core/netdev_rss_key`).
//!
//! Readers take a [`Roots`] (where `/sys` and `/proc` are) so tests can use a
//! fake tree; parsers are pure functions over the file text.

use crate::cpulist;
use serde::Serialize;
use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};

/// Where sysfs and procfs are mounted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Roots {
    /// Where sysfs is (`/sys`; a test tree's `DIR/sys`).
    pub sys: PathBuf,
    /// Where procfs is (`/proc`; a test tree's `DIR/proc`).
    pub proc: PathBuf,
}

impl Default for Roots {
    fn default() -> Self {
        Roots { sys: PathBuf::from("/sys"), proc: PathBuf::from("/proc") }
    }
}

/// A parse failure of a sysfs/procfs text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError(pub String);

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ParseError {}

// ---------------------------------------------------------------- parsers

/// Decodes a kernel CPU bitmap as in `rps_cpus`, `xps_cpus` or
/// `smp_affinity`: hex digits in comma-separated 32-bit words, most
/// significant word first (`00000003` -> CPUs 0,1; `1,00000000` -> CPU 32).
pub fn parse_hex_mask(s: &str) -> Result<Vec<usize>, ParseError> {
    let s = s.trim();
    if s.is_empty() {
        return Err(ParseError("empty CPU mask".into()));
    }
    let mut cpus = Vec::new();
    for (w, word) in s.rsplit(',').enumerate() {
        if word.is_empty() || word.len() > 8 {
            return Err(ParseError(format!("'{word}' in CPU mask '{s}' is not a 32-bit hex word")));
        }
        let v = u32::from_str_radix(word, 16)
            .map_err(|_| ParseError(format!("'{word}' in CPU mask '{s}' is not hex")))?;
        for bit in 0..32 {
            if v & (1 << bit) != 0 {
                cpus.push(w * 32 + bit);
            }
        }
    }
    cpus.sort_unstable();
    Ok(cpus)
}

/// Encodes CPUs as a kernel CPU bitmap (the inverse of [`parse_hex_mask`]):
/// at least one word; 8 hex digits per word, words separated by commas.
pub fn format_hex_mask(cpus: &[usize]) -> String {
    let words = cpus.iter().max().map_or(1, |m| m / 32 + 1);
    let mut w = vec![0u32; words];
    for &c in cpus {
        w[c / 32] |= 1 << (c % 32);
    }
    w.iter().rev().map(|x| format!("{x:08x}")).collect::<Vec<_>>().join(",")
}

/// Parses `/proc/sys/net/core/netdev_rss_key`: colon-separated hex bytes.
pub fn parse_colon_hex(s: &str) -> Result<Vec<u8>, ParseError> {
    let s = s.trim();
    if s.is_empty() {
        return Ok(Vec::new());
    }
    s.split(':')
        .map(|b| {
            if b.len() != 2 {
                return Err(ParseError(format!("'{b}' in key '{s}' is not a hex byte")));
            }
            u8::from_str_radix(b, 16).map_err(|_| ParseError(format!("'{b}' in key '{s}' is not a hex byte")))
        })
        .collect()
}

/// One IRQ line of `/proc/interrupts`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct IrqLine {
    /// The IRQ number (first column).
    pub irq: u32,
    /// Interrupt count per CPU column.
    pub counts: Vec<u64>,
    /// Everything after the counts (chip, hardware IRQ, action names).
    pub desc: String,
    /// The action (handler) name: the last word, e.g. `eth0-TxRx-3`,
    /// `virtio2-input.0`, `mlx5_comp3@pci:0000:3b:00.0`.
    pub name: String,
}

/// Parses `/proc/interrupts`. Only numbered IRQs are kept (not `NMI`, `LOC`...).
/// The header gives the number of CPU columns.
pub fn parse_interrupts(text: &str) -> Vec<IrqLine> {
    let mut lines = text.lines();
    let ncols = lines.next().map_or(0, |h| h.split_whitespace().filter(|t| t.starts_with("CPU")).count());
    let mut out = Vec::new();
    for line in lines {
        let Some((head, rest)) = line.split_once(':') else { continue };
        let Ok(irq) = head.trim().parse::<u32>() else { continue };
        let mut toks = rest.split_whitespace().peekable();
        let mut counts = Vec::with_capacity(ncols);
        while counts.len() < ncols {
            match toks.peek().and_then(|t| t.parse::<u64>().ok()) {
                Some(v) => {
                    counts.push(v);
                    toks.next();
                }
                None => break,
            }
        }
        let desc_toks: Vec<&str> = toks.collect();
        let name = desc_toks.last().map(|t| t.trim_end_matches(',').to_string()).unwrap_or_default();
        out.push(IrqLine { irq, counts, desc: desc_toks.join(" "), name });
    }
    out
}

/// What an IRQ serves, guessed from its action name as drivers spell it
/// (`TxRx`, `rx`/`tx`, virtio's `input`/`output`, mlx5's `comp`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum IrqKind {
    /// One vector for an RX and a TX queue (a "combined" channel).
    RxTx,
    /// An RX queue's own vector.
    Rx,
    /// A TX queue's own vector.
    Tx,
    /// Link, mailbox, configuration, async events...
    Other,
}

impl IrqKind {
    /// The lowercase name used in text and JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            IrqKind::RxTx => "rxtx",
            IrqKind::Rx => "rx",
            IrqKind::Tx => "tx",
            IrqKind::Other => "other",
        }
    }
    /// Whether the vector signals received packets (so its CPU runs the RX NAPI poll).
    pub fn serves_rx(self) -> bool {
        matches!(self, IrqKind::RxTx | IrqKind::Rx)
    }
    /// Whether the vector signals transmit completions.
    pub fn serves_tx(self) -> bool {
        matches!(self, IrqKind::RxTx | IrqKind::Tx)
    }
}

/// Classifies an IRQ action name and extracts its queue number (the trailing
/// number, e.g. `eth0-TxRx-3` -> (RxTx, 3), `virtio2-input.0` -> (Rx, 0)).
pub fn classify_irq(name: &str) -> (IrqKind, Option<usize>) {
    // mlx5 names look like `mlx5_comp3@pci:0000:3b:00.0`: the part before '@'.
    let base = name.split('@').next().unwrap_or(name);
    let lower = base.to_ascii_lowercase();
    let has = |w: &str| lower.contains(w);
    let kind = if has("txrx")
        || has("rxtx")
        || has("tx-rx")
        || has("rx-tx")
        || has("combined")
        || has("_comp")
        || has("-comp")
    {
        IrqKind::RxTx
    } else if has("config") || has("async") || has("mbox") || has("link") || has("ctrl") || has("event") {
        IrqKind::Other
    } else if has("rx") || has("input") {
        IrqKind::Rx
    } else if has("tx") || has("output") {
        IrqKind::Tx
    } else if lower.contains("-q") || lower.contains("queue") || lower.contains("fp-") {
        IrqKind::RxTx
    } else {
        IrqKind::Other
    };
    let digits: String = base.chars().rev().take_while(|c| c.is_ascii_digit()).collect();
    let queue = if digits.is_empty() || kind == IrqKind::Other {
        None
    } else {
        digits.chars().rev().collect::<String>().parse().ok()
    };
    (kind, queue)
}

// ---------------------------------------------------------------- readers

fn read_trim(p: &Path) -> Option<String> {
    fs::read_to_string(p).ok().map(|s| s.trim().to_string())
}

/// The kernel's default RSS key, which drivers copy at probe time unless told
/// otherwise. All zero until the first driver asks for it (it is filled
/// lazily from the RNG).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DefaultKey {
    /// The key bytes (`/proc/sys/net/core/netdev_rss_key`).
    pub key: Vec<u8>,
    /// False while every byte is zero: no driver has used it yet.
    pub initialised: bool,
}

/// Reads `/proc/sys/net/core/netdev_rss_key`.
pub fn default_rss_key(roots: &Roots) -> Result<DefaultKey, String> {
    let p = roots.proc.join("sys/net/core/netdev_rss_key");
    let text = fs::read_to_string(&p).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound && roots.proc.join("sys/net/core").is_dir() {
            // net.core.netdev_rss_key is registered for the initial network
            // namespace only.
            format!(
                "{} is not shown in this network namespace (the kernel exposes it only in the \
                 initial one)",
                p.display()
            )
        } else {
            format!("{}: {e}", p.display())
        }
    })?;
    let key = parse_colon_hex(&text).map_err(|e| format!("{}: {e}", p.display()))?;
    let initialised = key.iter().any(|&b| b != 0);
    Ok(DefaultKey { key, initialised })
}

/// Interface names under `/sys/class/net`, sorted.
pub fn interfaces(roots: &Roots) -> std::io::Result<Vec<String>> {
    let mut v: Vec<String> = fs::read_dir(roots.sys.join("class/net"))?
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    v.sort();
    Ok(v)
}

/// Whether `/sys/class/net/<name>` exists (and the name is a plain file name).
pub fn exists(roots: &Roots, name: &str) -> bool {
    valid_name(name) && roots.sys.join("class/net").join(name).exists()
}

/// Linux interface names: 1..=15 bytes, no '/', no whitespace, not `.`/`..`.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() < 16
        && name != "."
        && name != ".."
        && !name.contains(['/', '\0', ':'])
        && !name.chars().any(char::is_whitespace)
}

/// One RX queue (`/sys/class/net/IF/queues/rx-N`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RxQueue {
    /// The queue number `N` of `rx-N`.
    pub queue: usize,
    /// The raw `rps_cpus` mask; `None` when unreadable (kernel without RPS).
    pub rps_mask: Option<String>,
    /// CPUs in `rps_cpus`; empty = RPS off for this queue.
    pub rps_cpus: Option<Vec<usize>>,
    /// `rps_flow_cnt` (RFS flow table size for this queue).
    pub rps_flow_cnt: Option<u64>,
}

/// One TX queue (`/sys/class/net/IF/queues/tx-N`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TxQueue {
    /// The queue number `N` of `tx-N`.
    pub queue: usize,
    /// The raw `xps_cpus` mask; `None` when unreadable (the kernel refuses
    /// it on single-queue devices).
    pub xps_mask: Option<String>,
    /// CPUs in `xps_cpus`: the CPUs whose sends use this queue.
    pub xps_cpus: Option<Vec<usize>>,
}

fn queue_dirs(roots: &Roots, iface: &str, prefix: &str) -> Vec<(usize, PathBuf)> {
    let dir = roots.sys.join("class/net").join(iface).join("queues");
    let Ok(entries) = fs::read_dir(dir) else { return Vec::new() };
    let mut v: Vec<(usize, PathBuf)> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let n = e.file_name().into_string().ok()?.strip_prefix(prefix)?.parse().ok()?;
            Some((n, e.path()))
        })
        .collect();
    v.sort_by_key(|(n, _)| *n);
    v
}

/// The interface's RX queues, by index.
pub fn rx_queues(roots: &Roots, iface: &str) -> Vec<RxQueue> {
    queue_dirs(roots, iface, "rx-")
        .into_iter()
        .map(|(queue, p)| {
            let rps_mask = read_trim(&p.join("rps_cpus"));
            RxQueue {
                queue,
                rps_cpus: rps_mask.as_deref().and_then(|m| parse_hex_mask(m).ok()),
                rps_mask,
                rps_flow_cnt: read_trim(&p.join("rps_flow_cnt")).and_then(|s| s.parse().ok()),
            }
        })
        .collect()
}

/// The interface's TX queues, by index.
pub fn tx_queues(roots: &Roots, iface: &str) -> Vec<TxQueue> {
    queue_dirs(roots, iface, "tx-")
        .into_iter()
        .map(|(queue, p)| {
            let xps_mask = read_trim(&p.join("xps_cpus"));
            TxQueue { queue, xps_cpus: xps_mask.as_deref().and_then(|m| parse_hex_mask(m).ok()), xps_mask }
        })
        .collect()
}

/// The interfaces directly below `iface`: a bond's members, a VLAN's or
/// macvlan's parent (its `lower_IF` links in sysfs), sorted.
pub fn lower_devices(roots: &Roots, iface: &str) -> Vec<String> {
    let Ok(rd) = fs::read_dir(roots.sys.join("class/net").join(iface)) else { return Vec::new() };
    let mut v: Vec<String> = rd
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok()?.strip_prefix("lower_").map(str::to_string))
        .filter(|n| valid_name(n))
        .collect();
    v.sort();
    v
}

/// The driver bound to the interface's device (`device/driver` link), if it
/// has a device at all (virtual interfaces such as `lo` and veth have none).
pub fn sysfs_driver(roots: &Roots, iface: &str) -> Option<String> {
    let link = fs::read_link(roots.sys.join("class/net").join(iface).join("device/driver")).ok()?;
    link.file_name()?.to_str().map(str::to_string)
}

/// Small facts from `/sys/class/net/IF`: operstate, MTU, the device's NUMA
/// node (`-1` in sysfs = none -> `None`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct IfaceFacts {
    /// `operstate` (`up`, `down`, `unknown`...).
    pub operstate: Option<String>,
    /// The MTU, bytes.
    pub mtu: Option<u32>,
    /// The NUMA node of the device, if the platform says.
    pub numa_node: Option<usize>,
    /// Whether the interface sits on a device (`device` link); false for
    /// virtual interfaces.
    pub has_device: bool,
}

/// Reads the [`IfaceFacts`] of `iface`; a missing file leaves its field `None`.
pub fn facts(roots: &Roots, iface: &str) -> IfaceFacts {
    let base = roots.sys.join("class/net").join(iface);
    IfaceFacts {
        operstate: read_trim(&base.join("operstate")),
        mtu: read_trim(&base.join("mtu")).and_then(|s| s.parse().ok()),
        numa_node: read_trim(&base.join("device/numa_node"))
            .or_else(|| read_trim(&base.join("device/../numa_node")))
            .and_then(|s| s.parse::<i64>().ok())
            .and_then(|n| usize::try_from(n).ok()),
        has_device: base.join("device").exists(),
    }
}

/// The IRQ numbers of the interface's device: `device/msi_irqs/` (or, for
/// devices on a bus below the PCI function such as virtio, the parent's),
/// else the legacy `device/irq`. Sorted; empty for virtual interfaces.
pub fn device_irqs(roots: &Roots, iface: &str) -> Vec<u32> {
    let dev = roots.sys.join("class/net").join(iface).join("device");
    for d in [dev.join("msi_irqs"), dev.join("../msi_irqs")] {
        if let Ok(entries) = fs::read_dir(&d) {
            let mut v: Vec<u32> =
                entries.filter_map(|e| e.ok()?.file_name().into_string().ok()?.parse().ok()).collect();
            if !v.is_empty() {
                v.sort_unstable();
                return v;
            }
        }
    }
    match read_trim(&dev.join("irq")).and_then(|s| s.parse::<u32>().ok()) {
        Some(n) if n > 0 => vec![n],
        _ => Vec::new(),
    }
}

/// One IRQ of an interface, with what it serves and where it runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct IfaceIrq {
    /// The IRQ number.
    pub irq: u32,
    /// Its action name in `/proc/interrupts` (`eth0-TxRx-3`).
    pub name: String,
    /// What the vector serves, from its name.
    pub kind: IrqKind,
    /// The queue number in its name, if any.
    pub queue: Option<usize>,
    /// `/proc/irq/N/smp_affinity_list`: the CPUs the IRQ may run on.
    pub cpus: Option<Vec<usize>>,
    /// `/proc/irq/N/effective_affinity_list`: where it runs now.
    pub effective_cpus: Option<Vec<usize>>,
}

/// Reads an IRQ's CPU list from `/proc/irq/N/<file>`.
pub fn irq_cpus(roots: &Roots, irq: u32, file: &str) -> Option<Vec<usize>> {
    let s = read_trim(&roots.proc.join(format!("irq/{irq}/{file}")))?;
    if s.is_empty() {
        return Some(Vec::new());
    }
    cpulist::parse(&s).ok()
}

/// The interface's IRQs: those of its device that have a handler in
/// `/proc/interrupts`, plus any line whose action name starts with the
/// interface name (drivers that name vectors `eth0-TxRx-0`), sorted by IRQ.
pub fn iface_irqs(roots: &Roots, iface: &str, interrupts: &[IrqLine]) -> Vec<IfaceIrq> {
    let dev_irqs = device_irqs(roots, iface);
    let mut out: Vec<IfaceIrq> = interrupts
        .iter()
        .filter(|l| {
            dev_irqs.contains(&l.irq)
                || l.name.strip_prefix(iface).is_some_and(|r| r.starts_with(['-', '_', '@', ':']))
        })
        .map(|l| {
            let (kind, queue) = classify_irq(&l.name);
            IfaceIrq {
                irq: l.irq,
                name: l.name.clone(),
                kind,
                queue,
                cpus: irq_cpus(roots, l.irq, "smp_affinity_list"),
                effective_cpus: irq_cpus(roots, l.irq, "effective_affinity_list"),
            }
        })
        .collect();
    out.sort_by_key(|i| i.irq);
    out
}

/// Reads and parses `/proc/interrupts` (empty when unreadable).
pub fn interrupts(roots: &Roots) -> Vec<IrqLine> {
    fs::read_to_string(roots.proc.join("interrupts")).map(|t| parse_interrupts(&t)).unwrap_or_default()
}

/// The IRQ serving RX queue `q`, if one is named for it.
pub fn rx_irq(irqs: &[IfaceIrq], q: usize) -> Option<&IfaceIrq> {
    irqs.iter().find(|i| i.kind.serves_rx() && i.queue == Some(q))
}

/// The IRQ serving TX queue `q`, if one is named for it.
pub fn tx_irq(irqs: &[IfaceIrq], q: usize) -> Option<&IfaceIrq> {
    irqs.iter().find(|i| i.kind.serves_tx() && i.queue == Some(q))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_masks() {
        assert_eq!(parse_hex_mask("00000003").unwrap(), vec![0, 1]);
        assert_eq!(parse_hex_mask("0\n").unwrap(), Vec::<usize>::new());
        assert_eq!(parse_hex_mask("f0").unwrap(), vec![4, 5, 6, 7]);
        // More than 32 CPUs: words are comma-separated, most significant first.
        assert_eq!(parse_hex_mask("00000001,00000000").unwrap(), vec![32]);
        assert_eq!(parse_hex_mask("80000000,00000000,00000001").unwrap(), vec![0, 95]);
        assert_eq!(parse_hex_mask("3,ffffffff").unwrap(), (0..34).collect::<Vec<_>>());
        assert!(parse_hex_mask("").is_err());
        assert!(parse_hex_mask("xyz").is_err());
        assert!(parse_hex_mask("1,,0").is_err());
        assert!(parse_hex_mask("123456789").is_err());
    }

    #[test]
    fn hex_mask_round_trip() {
        assert_eq!(format_hex_mask(&[]), "00000000");
        assert_eq!(format_hex_mask(&[0, 1]), "00000003");
        assert_eq!(format_hex_mask(&[0, 95]), "80000000,00000000,00000001");
        for cpus in [vec![1usize, 31, 32, 33, 64], vec![127], vec![0]] {
            assert_eq!(parse_hex_mask(&format_hex_mask(&cpus)).unwrap(), cpus);
        }
    }

    #[test]
    fn colon_hex_key() {
        assert_eq!(parse_colon_hex("6d:5a:00:ff\n").unwrap(), vec![0x6d, 0x5a, 0, 0xff]);
        assert_eq!(parse_colon_hex("").unwrap(), Vec::<u8>::new());
        assert!(parse_colon_hex("6d:5").is_err());
        assert!(parse_colon_hex("zz").is_err());
    }

    const INTERRUPTS: &str = "           CPU0       CPU1       \n\
  0:         44          0   IO-APIC   2-edge      timer\n\
 37:          0          0 PCI-MSIX-0000:00:03.0   0-edge      virtio2-config\n\
 38:          0       1219 PCI-MSIX-0000:00:03.0   1-edge      virtio2-input.0\n\
 39:        863          0 PCI-MSIX-0000:00:03.0   2-edge      virtio2-output.0\n\
 70:         12          3  IR-PCI-MSI 1048577-edge      eth1-TxRx-0\n\
 71:          1          2  IR-PCI-MSI 1048578-edge      eth1-TxRx-1\n\
 72:          0          0  IR-PCI-MSI 1048579-edge      eth1\n\
 80:          5          6  IR-PCI-MSIX-0000:3b:00.0   1-edge      mlx5_comp1@pci:0000:3b:00.0\n\
 90:          0          0  IO-APIC  9-fasteoi   acpi, i8042\n\
NMI:          0          0   Non-maskable interrupts\n\
ERR:          0\n";

    #[test]
    fn proc_interrupts() {
        let lines = parse_interrupts(INTERRUPTS);
        assert_eq!(lines.len(), 9);
        assert_eq!(lines[0].irq, 0);
        assert_eq!(lines[0].name, "timer");
        assert_eq!(lines[2].irq, 38);
        assert_eq!(lines[2].counts, vec![0, 1219]);
        assert_eq!(lines[2].name, "virtio2-input.0");
        assert_eq!(lines[2].desc, "PCI-MSIX-0000:00:03.0 1-edge virtio2-input.0");
        assert_eq!(lines[4].name, "eth1-TxRx-0");
        assert_eq!(lines[4].counts, vec![12, 3]);
        assert_eq!(lines[7].name, "mlx5_comp1@pci:0000:3b:00.0");
        assert_eq!(lines[8].name, "i8042");
        assert!(lines.iter().all(|l| l.counts.len() == 2));
    }

    #[test]
    fn irq_names() {
        assert_eq!(classify_irq("virtio2-input.0"), (IrqKind::Rx, Some(0)));
        assert_eq!(classify_irq("virtio2-output.11"), (IrqKind::Tx, Some(11)));
        assert_eq!(classify_irq("virtio2-config"), (IrqKind::Other, None));
        assert_eq!(classify_irq("eth1-TxRx-3"), (IrqKind::RxTx, Some(3)));
        assert_eq!(classify_irq("eth1-rx-2"), (IrqKind::Rx, Some(2)));
        assert_eq!(classify_irq("eth1-tx-2"), (IrqKind::Tx, Some(2)));
        assert_eq!(classify_irq("eth1"), (IrqKind::Other, None));
        assert_eq!(classify_irq("mlx5_comp7@pci:0000:3b:00.0"), (IrqKind::RxTx, Some(7)));
        assert_eq!(classify_irq("mlx5_async0@pci:0000:3b:00.0"), (IrqKind::Other, None));
        assert_eq!(classify_irq("ens5-Tx-Rx-1"), (IrqKind::RxTx, Some(1)));
    }

    #[test]
    fn fake_tree_queues_and_irqs() {
        let root = std::env::temp_dir().join(format!("rsskit-netdev-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        let put = |rel: &str, text: &str| {
            let p = root.join(rel);
            fs::create_dir_all(p.parent().unwrap()).unwrap();
            fs::write(p, text).unwrap();
        };
        put("sys/class/net/eth1/queues/rx-0/rps_cpus", "00000000\n");
        put("sys/class/net/eth1/queues/rx-0/rps_flow_cnt", "0\n");
        put("sys/class/net/eth1/queues/rx-1/rps_cpus", "00000001,00000002\n");
        put("sys/class/net/eth1/queues/rx-1/rps_flow_cnt", "4096\n");
        put("sys/class/net/eth1/queues/tx-0/xps_cpus", "3\n");
        put("sys/class/net/eth1/device/msi_irqs/70", "msix\n");
        put("sys/class/net/eth1/device/msi_irqs/71", "msix\n");
        put("sys/class/net/eth1/device/msi_irqs/72", "msix\n");
        put("sys/class/net/eth1/device/numa_node", "1\n");
        put("sys/class/net/eth1/operstate", "up\n");
        put("proc/irq/70/smp_affinity_list", "0\n");
        put("proc/irq/71/smp_affinity_list", "1,3\n");
        put("proc/irq/71/effective_affinity_list", "3\n");
        put("proc/sys/net/core/netdev_rss_key", "00:00:00\n");
        let roots = Roots { sys: root.join("sys"), proc: root.join("proc") };

        let rx = rx_queues(&roots, "eth1");
        assert_eq!(rx.len(), 2);
        assert_eq!(rx[0].rps_cpus, Some(vec![]));
        assert_eq!(rx[1].rps_cpus, Some(vec![1, 32]));
        assert_eq!(rx[1].rps_flow_cnt, Some(4096));
        let tx = tx_queues(&roots, "eth1");
        assert_eq!(tx.len(), 1);
        assert_eq!(tx[0].xps_cpus, Some(vec![0, 1]));

        let lines = parse_interrupts(INTERRUPTS);
        let irqs = iface_irqs(&roots, "eth1", &lines);
        assert_eq!(irqs.iter().map(|i| i.irq).collect::<Vec<_>>(), vec![70, 71, 72]);
        assert_eq!(rx_irq(&irqs, 1).unwrap().irq, 71);
        assert_eq!(tx_irq(&irqs, 0).unwrap().irq, 70);
        assert_eq!(rx_irq(&irqs, 1).unwrap().cpus, Some(vec![1, 3]));
        assert_eq!(rx_irq(&irqs, 1).unwrap().effective_cpus, Some(vec![3]));
        assert_eq!(irqs[2].kind, IrqKind::Other);

        let f = facts(&roots, "eth1");
        assert_eq!(f.numa_node, Some(1));
        assert_eq!(f.operstate.as_deref(), Some("up"));
        assert!(f.has_device);
        let k = default_rss_key(&roots).unwrap();
        assert_eq!(k.key.len(), 3);
        assert!(!k.initialised);
        assert!(exists(&roots, "eth1"));
        assert!(!exists(&roots, "eth9"));
        assert!(!exists(&roots, "../eth1"));
        let _ = fs::remove_dir_all(&root);
    }

    #[test]
    fn live_loopback() {
        let roots = Roots::default();
        assert!(exists(&roots, "lo"));
        assert!(interfaces(&roots).unwrap().contains(&"lo".to_string()));
        assert!(!rx_queues(&roots, "lo").is_empty());
        assert!(!facts(&roots, "lo").has_device);
        assert!(device_irqs(&roots, "lo").is_empty());
    }
}
