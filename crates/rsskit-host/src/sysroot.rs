//! The host as `plan`, `apply` and `check` see it: one [`Sysroot`] that
//! reads a device's whole RSS setup (sysfs queues, IRQs, ethtool), writes
//! single settings, and finds `irqbalance`.
//!
//! [`Sysroot::live`] is the running system (`/sys`, `/proc`, the ethtool
//! ioctl). [`Sysroot::tree`] is a directory with the shape of `/sys` and
//! `/proc` under `DIR/sys` and `DIR/proc`, for tests: there the ethtool
//! answers come from `DIR/ethtool/IF.json` (a fake driver), and
//! `ETHTOOL_SRSSH` writes are built as the ioctl's bytes and parsed back as
//! the kernel would before they update that file.

use rsskit_linux::ethtool::{self, Channels, Ethtool, EthtoolError, FlowHash, Reported, Rss};
use rsskit_linux::netdev::{self, IfaceFacts, IfaceIrq, Roots, RxQueue, TxQueue};
use rsskit_linux::topology::Topology;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// Errors reading the host.
#[derive(Debug, thiserror::Error)]
pub enum SysrootError {
    /// The interface is not in `/sys/class/net`.
    #[error("interface '{0}' does not exist")]
    NoSuchInterface(String),
    /// `/sys/class/net` could not be listed.
    #[error("listing interfaces in {path}")]
    List {
        /// The directory.
        path: PathBuf,
        /// The listing error.
        source: io::Error,
    },
    /// An ethtool ioctl failed for a reason other than "not supported" (the message names it).
    #[error("{0}")]
    Ethtool(String),
    /// A fake driver file of a test tree is unreadable or malformed.
    #[error("fake driver file {path}: {msg}")]
    Fake {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        msg: String,
    },
}

/// Everything about one interface that tuning needs.
#[derive(Debug, Clone)]
pub struct DeviceState {
    /// Interface name.
    pub name: String,
    /// Its driver, if sysfs names one.
    pub driver: Option<String>,
    /// Operstate, MTU, NUMA node.
    pub facts: IfaceFacts,
    /// Channel counts (`ETHTOOL_GCHANNELS`).
    pub channels: Reported<Channels>,
    /// Key and indirection table (`ETHTOOL_GRSSH`).
    pub rss: Reported<Rss>,
    /// Fields hashed per flow type (`ETHTOOL_GRXFH`).
    pub hash: Reported<Vec<FlowHash>>,
    /// Its RX queues in sysfs, in queue order.
    pub rx: Vec<RxQueue>,
    /// Its TX queues in sysfs, in queue order.
    pub tx: Vec<TxQueue>,
    /// Its IRQs with what they serve and where they run.
    pub irqs: Vec<IfaceIrq>,
}

impl DeviceState {
    /// Hardware RSS: a table (or key) the driver reports, and more than one
    /// RX queue to spread over.
    pub fn hardware_rss(&self) -> bool {
        self.rss.ok().is_some_and(|r| !r.indir.is_empty()) && self.rx.len() > 1
    }
}

/// A running `irqbalance` and the IRQs it was told to leave alone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct IrqBalance {
    /// Its process id.
    pub pid: u32,
    /// IRQs from `--banirq=N` / `-i N` on its command line.
    pub banned_irqs: Vec<u32>,
}

/// The fake driver of a test tree: `DIR/ethtool/IF.json`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct FakeDriver {
    /// The driver name sysfs would show.
    #[serde(default)]
    pub driver: Option<String>,
    /// `combined` channel count, if the driver reports channels.
    #[serde(default)]
    pub combined: Option<u32>,
    /// Key (hex) and table; absent = no RSS.
    #[serde(default)]
    pub rss: Option<FakeRss>,
    /// `RXH_*` mask per flow type (`udp4`...); absent = no `ETHTOOL_GRXFH`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hash: Option<BTreeMap<String, u64>>,
    /// Refuse `ETHTOOL_SRSSH` and `ETHTOOL_SRXFH` with this reason (a driver without `set_rxfh`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refuse_set: Option<String>,
}

/// The fake RSS state of a test tree's driver.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct FakeRss {
    /// The key, hex.
    pub key: String,
    /// The indirection table: bucket -> RX queue.
    pub table: Vec<u32>,
}

/// Where the host is read and written.
#[derive(Debug, Clone)]
pub struct Sysroot {
    /// Where sysfs and procfs are read (and written by `apply`).
    pub roots: Roots,
    /// `Some(DIR/ethtool)` for a test tree: the fake driver files.
    fake_ethtool: Option<PathBuf>,
    /// Where `apply` keeps its save files by default.
    state_dir: PathBuf,
}

/// The default directory of `apply`'s save files on the running system
/// (root's, mode 0700: not the current directory, which may be shared).
pub const STATE_DIR: &str = "/var/lib/rsskit";

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    let s = s.trim();
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok()).collect()
}

impl Sysroot {
    /// The running system.
    pub fn live() -> Sysroot {
        Sysroot { roots: Roots::default(), fake_ethtool: None, state_dir: PathBuf::from(STATE_DIR) }
    }

    /// A test tree: `dir/sys`, `dir/proc`, `dir/ethtool/IF.json`; save
    /// files go to `dir/var/lib/rsskit`, as the tree stands for the host.
    pub fn tree(dir: &Path) -> Sysroot {
        Sysroot {
            roots: Roots { sys: dir.join("sys"), proc: dir.join("proc") },
            fake_ethtool: Some(dir.join("ethtool")),
            state_dir: dir.join(&STATE_DIR[1..]),
        }
    }

    /// Where `apply` keeps its save files when not told (`--save`).
    pub fn state_dir(&self) -> &Path {
        &self.state_dir
    }

    /// Whether this is the running system (not a test tree).
    pub fn is_live(&self) -> bool {
        self.fake_ethtool.is_none()
    }

    /// The CPU/NUMA topology under these roots.
    pub fn topology(&self) -> Topology {
        Topology::read_from(&self.roots.sys)
    }

    /// Interface names, sorted.
    pub fn interfaces(&self) -> Result<Vec<String>, SysrootError> {
        netdev::interfaces(&self.roots)
            .map_err(|source| SysrootError::List { path: self.roots.sys.join("class/net"), source })
    }

    /// Whether interface `name` exists.
    pub fn exists(&self, name: &str) -> bool {
        netdev::exists(&self.roots, name)
    }

    fn fake_path(&self, name: &str) -> Option<PathBuf> {
        self.fake_ethtool.as_ref().map(|d| d.join(format!("{name}.json")))
    }

    fn read_fake(&self, name: &str) -> Result<FakeDriver, SysrootError> {
        let path = self.fake_path(name).expect("a test tree");
        match fs::read_to_string(&path) {
            Ok(t) => serde_json::from_str(&t).map_err(|e| SysrootError::Fake { path, msg: e.to_string() }),
            // No file: a driver that implements nothing (as veth).
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(FakeDriver::default()),
            Err(e) => Err(SysrootError::Fake { path, msg: e.to_string() }),
        }
    }

    /// Reads one interface.
    pub fn device(&self, name: &str) -> Result<DeviceState, SysrootError> {
        if !self.exists(name) {
            return Err(SysrootError::NoSuchInterface(name.to_string()));
        }
        let interrupts = netdev::interrupts(&self.roots);
        let (driver, channels, rss, hash) = if self.is_live() {
            let map = |e: EthtoolError| match e {
                EthtoolError::NoSuchInterface(n) => SysrootError::NoSuchInterface(n),
                e => SysrootError::Ethtool(e.to_string()),
            };
            let eth = Ethtool::open(name).map_err(map)?;
            let driver = match eth.driver().map_err(map)? {
                Reported::Supported(d) if !d.is_empty() => Some(d),
                _ => netdev::sysfs_driver(&self.roots, name),
            };
            (driver, eth.channels().map_err(map)?, eth.rss().map_err(map)?, eth.flow_hashes().map_err(map)?)
        } else {
            let f = self.read_fake(name)?;
            fn not<T>(what: &str) -> Reported<T> {
                Reported::Unsupported { reason: format!("{what}: operation not supported by the driver") }
            }
            let channels = match f.combined {
                Some(c) => Reported::Supported(Channels {
                    combined_count: c,
                    max_combined: c,
                    ..Channels::default()
                }),
                None => not("ETHTOOL_GCHANNELS"),
            };
            let rss = match &f.rss {
                Some(r) => Reported::Supported(Rss {
                    key: unhex(&r.key).unwrap_or_default(),
                    indir: r.table.clone(),
                    hfunc: vec!["toeplitz".into()],
                    input_xfrm: vec![],
                    source: "ETHTOOL_GRSSH",
                }),
                None => not("ETHTOOL_GRSSH"),
            };
            let hash = match &f.hash {
                Some(m) => Reported::Supported(
                    ethtool::FLOW_TYPES
                        .iter()
                        .filter_map(|ft| {
                            let raw = *m.get(ft.name)?;
                            Some(FlowHash { flow: ft.name, raw, fields: ethtool::rxh_fields(raw) })
                        })
                        .collect(),
                ),
                None => not("ETHTOOL_GRXFH"),
            };
            (f.driver.clone(), channels, rss, hash)
        };
        Ok(DeviceState {
            name: name.to_string(),
            driver,
            facts: netdev::facts(&self.roots, name),
            channels,
            rss,
            hash,
            rx: netdev::rx_queues(&self.roots, name),
            tx: netdev::tx_queues(&self.roots, name),
            irqs: netdev::iface_irqs(&self.roots, name, &interrupts),
        })
    }

    /// Re-reads the RSS key and table of one interface.
    pub fn rss(&self, name: &str) -> Result<Reported<Rss>, SysrootError> {
        Ok(self.device(name)?.rss)
    }

    /// Writes the table and/or key (`ETHTOOL_SRSSH`). `Unsupported` carries
    /// the driver's refusal.
    pub fn set_rss(
        &self,
        name: &str,
        indir: Option<&[u32]>,
        key: Option<&[u8]>,
    ) -> Result<Reported<()>, SysrootError> {
        if self.is_live() {
            let eth = Ethtool::open(name).map_err(|e| SysrootError::Ethtool(e.to_string()))?;
            return eth.set_rss(indir, key).map_err(|e| SysrootError::Ethtool(e.to_string()));
        }
        let mut f = self.read_fake(name)?;
        if let Some(r) = &f.refuse_set {
            return Ok(Reported::Unsupported { reason: format!("ETHTOOL_SRSSH: {r}") });
        }
        let Some(cur) = f.rss.as_mut() else {
            return Ok(Reported::Unsupported {
                reason: "ETHTOOL_SRSSH: operation not supported by the driver".into(),
            });
        };
        // The request as bytes, parsed as the kernel does.
        let req = ethtool::rssh_set_request(indir, key);
        let (t, k) = match ethtool::parse_set_request(&req) {
            Ok(x) => x,
            Err(e) => return Ok(Reported::Unsupported { reason: e }),
        };
        let rings = f.combined.unwrap_or(u32::MAX);
        if let Some(t) = t {
            if t.len() != cur.table.len() || t.iter().any(|&r| r >= rings) {
                return Ok(Reported::Unsupported {
                    reason: "ETHTOOL_SRSSH: Invalid argument (os error 22) (the driver refused the \
                             table: a ring it does not have, or a size other than the device's)"
                        .into(),
                });
            }
            cur.table = t;
        }
        if let Some(k) = k {
            if k.len() != unhex(&cur.key).map_or(0, |b| b.len()) {
                return Ok(Reported::Unsupported {
                    reason: "ETHTOOL_SRSSH: Invalid argument (os error 22) (key size other than the \
                             device's)"
                        .into(),
                });
            }
            cur.key = hex(&k);
        }
        let path = self.fake_path(name).expect("a test tree");
        let text = serde_json::to_string_pretty(&f).expect("plain data");
        fs::write(&path, text).map_err(|e| SysrootError::Fake { path, msg: e.to_string() })?;
        Ok(Reported::Supported(()))
    }

    /// Sets the combined channel count (`ETHTOOL_SCHANNELS`), other counts
    /// kept. A test tree refuses (its queue directories cannot follow).
    pub fn set_combined_channels(&self, name: &str, combined: u32) -> Result<Reported<()>, SysrootError> {
        if !self.is_live() {
            return Ok(Reported::Unsupported {
                reason: "ETHTOOL_SCHANNELS: a fixture tree cannot change its queues".into(),
            });
        }
        let eth = Ethtool::open(name).map_err(|e| SysrootError::Ethtool(e.to_string()))?;
        let cur = match eth.channels().map_err(|e| SysrootError::Ethtool(e.to_string()))? {
            Reported::Supported(c) => c,
            Reported::Unsupported { reason } => return Ok(Reported::Unsupported { reason }),
        };
        eth.set_channels(Channels { combined_count: combined, ..cur })
            .map_err(|e| SysrootError::Ethtool(e.to_string()))
    }

    /// Sets the fields hashed for one flow type (`ETHTOOL_SRXFH`).
    pub fn set_flow_hash(&self, name: &str, flow: &str, raw: u64) -> Result<Reported<()>, SysrootError> {
        if self.is_live() {
            let eth = Ethtool::open(name).map_err(|e| SysrootError::Ethtool(e.to_string()))?;
            return eth.set_flow_hash(flow, raw).map_err(|e| SysrootError::Ethtool(e.to_string()));
        }
        let mut f = self.read_fake(name)?;
        if let Some(r) = &f.refuse_set {
            return Ok(Reported::Unsupported { reason: format!("ETHTOOL_SRXFH: {r}") });
        }
        let Some(code) = ethtool::FLOW_TYPES.iter().find(|t| t.name == flow).map(|t| t.code) else {
            return Ok(Reported::Unsupported {
                reason: format!("ETHTOOL_SRXFH: unknown flow type '{flow}'"),
            });
        };
        let Some(map) = f.hash.as_mut() else {
            return Ok(Reported::Unsupported {
                reason: "ETHTOOL_SRXFH: operation not supported by the driver".into(),
            });
        };
        // The request as bytes, parsed as the kernel does.
        let (flow, raw) = match ethtool::parse_srxfh_request(&ethtool::srxfh_request(code, raw)) {
            Ok(x) => x,
            Err(e) => return Ok(Reported::Unsupported { reason: e }),
        };
        map.insert(flow.to_string(), raw);
        let path = self.fake_path(name).expect("a test tree");
        let text = serde_json::to_string_pretty(&f).expect("plain data");
        fs::write(&path, text).map_err(|e| SysrootError::Fake { path, msg: e.to_string() })?;
        Ok(Reported::Supported(()))
    }

    /// Path of `/proc/sys/net/core/rps_sock_flow_entries` (global, not per
    /// network namespace).
    pub fn sock_flow_entries_path(&self) -> PathBuf {
        self.roots.proc.join("sys/net/core/rps_sock_flow_entries")
    }

    /// `/proc/irq/N/smp_affinity_list`.
    pub fn irq_affinity_path(&self, irq: u32) -> PathBuf {
        self.roots.proc.join(format!("irq/{irq}/smp_affinity_list"))
    }

    /// `/sys/class/net/IF/queues/{rx,tx}-N/FILE`.
    pub fn queue_path(&self, name: &str, dir: &str, q: usize, file: &str) -> PathBuf {
        self.roots.sys.join(format!("class/net/{name}/queues/{dir}-{q}/{file}"))
    }

    /// A running irqbalance, from `/proc/PID/comm`.
    pub fn irqbalance(&self) -> Option<IrqBalance> {
        let entries = fs::read_dir(&self.roots.proc).ok()?;
        for e in entries.flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
            let comm = fs::read_to_string(e.path().join("comm")).unwrap_or_default();
            if comm.trim() != "irqbalance" {
                continue;
            }
            let cmdline = fs::read(e.path().join("cmdline")).unwrap_or_default();
            let args: Vec<String> = cmdline
                .split(|&b| b == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect();
            return Some(IrqBalance { pid, banned_irqs: banned_irqs(&args) });
        }
        None
    }
}

/// IRQs banned on an irqbalance command line (`--banirq=N`, `--banirq N`, `-i N`).
pub fn banned_irqs(args: &[String]) -> Vec<u32> {
    let mut out = Vec::new();
    let mut it = args.iter().peekable();
    while let Some(a) = it.next() {
        let v = if let Some(v) = a.strip_prefix("--banirq=") {
            Some(v.to_string())
        } else if a == "--banirq" || a == "-i" {
            it.next().cloned()
        } else {
            a.strip_prefix("-i").filter(|v| !v.is_empty()).map(str::to_string)
        };
        if let Some(n) = v.and_then(|v| v.parse().ok()) {
            out.push(n);
        }
    }
    out.sort_unstable();
    out.dedup();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn irqbalance_args() {
        let a: Vec<String> =
            ["/usr/sbin/irqbalance", "--foreground", "--banirq=41", "-i", "42", "--banirq", "43", "-i44"]
                .iter()
                .map(|s| s.to_string())
                .collect();
        assert_eq!(banned_irqs(&a), vec![41, 42, 43, 44]);
        assert!(banned_irqs(&a[..2]).is_empty());
    }

    #[test]
    fn hex_round_trip() {
        assert_eq!(unhex(&hex(&[0, 0x6d, 0xff])).unwrap(), vec![0, 0x6d, 0xff]);
        assert!(unhex("abc").is_none());
        assert!(unhex("zz").is_none());
    }
}
