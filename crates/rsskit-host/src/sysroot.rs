//! The host as `plan`, `apply` and `check` see it: one [`Sysroot`] that
//! reads a device's whole RSS setup (sysfs queues, IRQs, ethtool), writes
//! single settings, and finds `irqbalance`.
//!
//! [`Sysroot::live`] is the running system (`/sys`, `/proc`, the ethtool
//! ioctl). [`Sysroot::tree`] is a directory with the shape of `/sys` and
//! `/proc` under `DIR/sys` and `DIR/proc`, for tests: there the ethtool
//! answers come from `DIR/ethtool/IF.json` (a fake driver), and
//! `ETHTOOL_SRSSH` writes are built as the ioctl's bytes and parsed back as
//! the kernel would before they update that file. [`Sysroot::capture`] is
//! an `rsskit capture` directory ([`crate::capture`]): the same layout, read
//! only, in every build.

use rsskit_linux::ethtool::params::{Coalesce, Rings, Via};
use rsskit_linux::ethtool::rxnfc::{ContextRss, RuleTable};
use rsskit_linux::ethtool::{Channels, Ethtool, EthtoolError, FlowHash, Reported, Rss};
use rsskit_linux::ethtool_nl::{Nic, RssWrite};
use rsskit_linux::netdev::{self, IfaceFacts, IfaceIrq, Roots, RxQueue, TxQueue};
use rsskit_linux::topology::Topology;
use serde::Serialize;
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
    /// A fixture tree was asked of a build without the fixture driver.
    #[error("{}: this rsskit was built without fixture trees (the `fixtures` feature of rsskit-host, for tests)", .0.display())]
    NoFixtures(PathBuf),
    /// A capture directory was refused.
    #[error(transparent)]
    Capture(#[from] crate::capture::CaptureError),
    /// A write was asked of a capture.
    #[error("{}: a capture is read-only (plan, check and info read it; apply writes the live host)", .0.display())]
    ReadOnly(PathBuf),
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
    /// Channel counts (`CHANNELS_GET` or `ETHTOOL_GCHANNELS`: see `via`).
    pub channels: Reported<Channels>,
    /// Key and indirection table (`RSS_GET` or `ETHTOOL_GRSSH`: see `via`).
    pub rss: Reported<Rss>,
    /// Fields hashed per flow type (`ETHTOOL_GRXFH`).
    pub hash: Reported<Vec<FlowHash>>,
    /// Its RX queues in sysfs, in queue order.
    pub rx: Vec<RxQueue>,
    /// Its TX queues in sysfs, in queue order.
    pub tx: Vec<TxQueue>,
    /// Its IRQs with what they serve and where they run.
    pub irqs: Vec<IfaceIrq>,
    /// Threaded NAPI: the `threaded` file and its `napi/IF-N` threads.
    pub napi: crate::napi::NapiState,
    /// Where `irqs`' queue links came from: the kernel's map or the names.
    pub queue_map: crate::irqmap::MapSource,
    // nicres: NIC resources.
    /// Ring sizes and their maxima (`ETHTOOL_GRINGPARAM`).
    pub rings: Reported<Rings>,
    /// Interrupt coalescing (`ETHTOOL_GCOALESCE`).
    pub coalesce: Reported<Coalesce>,
    // ethtool netlink (issue 37 item 2):
    /// Which kernel interface answered `channels` and `rss` (live reads
    /// only: a fixture tree or a capture has none).
    pub via: NicVia,
}

/// Which kernel interface answered each of a live device's ethtool reads;
/// `None` where nothing was asked of a kernel (fixture trees, captures).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct NicVia {
    /// The RSS key, table, hash function and input transform.
    pub rss: Option<Via>,
    /// The channel counts.
    pub channels: Option<Via>,
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

/// Where the host is read and written.
#[derive(Debug, Clone)]
pub struct Sysroot {
    /// Where sysfs and procfs are read (and written by `apply`).
    pub roots: Roots,
    /// `Some(DIR/ethtool)` for a test tree: the fake driver files.
    #[cfg(any(test, feature = "fixtures"))]
    fake_ethtool: Option<PathBuf>,
    /// `Some(DIR)` for a capture (read-only).
    capture: Option<PathBuf>,
    /// Where `apply` keeps its save files by default.
    state_dir: PathBuf,
}

/// The default directory of `apply`'s save files on the running system
/// (root's, mode 0700: not the current directory, which may be shared).
pub const STATE_DIR: &str = "/var/lib/rsskit";

/// An ethtool failure as tuning reports it: a missing interface by name.
fn ethtool_error(e: EthtoolError) -> SysrootError {
    match e {
        EthtoolError::NoSuchInterface(n) => SysrootError::NoSuchInterface(n),
        e => SysrootError::Ethtool(e.to_string()),
    }
}

impl Sysroot {
    /// The running system.
    pub fn live() -> Sysroot {
        Sysroot {
            roots: Roots::default(),
            #[cfg(any(test, feature = "fixtures"))]
            fake_ethtool: None,
            capture: None,
            state_dir: PathBuf::from(STATE_DIR),
        }
    }

    /// An `rsskit capture` directory, checked first ([`crate::capture::open`]);
    /// read-only: every write is refused.
    pub fn capture(dir: &Path) -> Result<(Sysroot, crate::capture::Manifest), SysrootError> {
        let manifest = crate::capture::open(dir)?;
        let root = Sysroot {
            roots: Roots { sys: dir.join("sys"), proc: dir.join("proc") },
            #[cfg(any(test, feature = "fixtures"))]
            fake_ethtool: None,
            capture: Some(dir.to_path_buf()),
            state_dir: dir.join(&STATE_DIR[1..]),
        };
        Ok((root, manifest))
    }

    /// The capture directory, when this is one.
    pub fn capture_dir(&self) -> Option<&Path> {
        self.capture.as_deref()
    }

    fn refuse_capture(&self) -> Result<(), SysrootError> {
        match &self.capture {
            Some(d) => Err(SysrootError::ReadOnly(d.clone())),
            None => Ok(()),
        }
    }

    /// A test tree: `dir/sys`, `dir/proc`, `dir/ethtool/IF.json`; save
    /// files go to `dir/var/lib/rsskit`, as the tree stands for the host.
    #[cfg(any(test, feature = "fixtures"))]
    pub fn tree(dir: &Path) -> Sysroot {
        Sysroot {
            roots: Roots { sys: dir.join("sys"), proc: dir.join("proc") },
            fake_ethtool: Some(dir.join("ethtool")),
            capture: None,
            state_dir: dir.join(&STATE_DIR[1..]),
        }
    }

    /// [`Sysroot::tree`] when this build has the fixture driver (feature
    /// `fixtures`: the CLI's tests), else an error naming the feature, so a
    /// shipped binary refuses `--sysroot` instead of ignoring it.
    pub fn fixture_tree(dir: &Path) -> Result<Sysroot, SysrootError> {
        #[cfg(any(test, feature = "fixtures"))]
        return Ok(Sysroot::tree(dir));
        #[cfg(not(any(test, feature = "fixtures")))]
        Err(SysrootError::NoFixtures(dir.to_path_buf()))
    }

    /// Where `apply` keeps its save files when not told (`--save`).
    pub fn state_dir(&self) -> &Path {
        &self.state_dir
    }

    /// Whether this is the running system (not a test tree or a capture).
    pub fn is_live(&self) -> bool {
        self.fixture().is_none() && self.capture.is_none()
    }

    /// The fake driver's directory of a test tree.
    #[cfg(any(test, feature = "fixtures"))]
    fn fixture(&self) -> Option<&Path> {
        self.fake_ethtool.as_deref()
    }

    /// Without the fixture driver every `Sysroot` is the live host.
    #[cfg(not(any(test, feature = "fixtures")))]
    fn fixture(&self) -> Option<&Path> {
        None
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

    /// The interfaces that carry `name`'s traffic when it is a bond, a VLAN
    /// or a stack of them (`lower_IF` links, followed down to interfaces
    /// with none), in order, each once; empty for any other interface.
    pub fn members(&self, name: &str) -> Vec<String> {
        let mut out = Vec::new();
        let mut stack: Vec<(String, usize)> =
            netdev::lower_devices(&self.roots, name).into_iter().rev().map(|n| (n, 1)).collect();
        while let Some((n, depth)) = stack.pop() {
            let lower = netdev::lower_devices(&self.roots, &n);
            // Stacks are a few deep; a loop in a (captured) tree stops here.
            if lower.is_empty() || depth >= 8 {
                if !out.contains(&n) && n != name {
                    out.push(n);
                }
            } else {
                stack.extend(lower.into_iter().rev().map(|l| (l, depth + 1)));
            }
        }
        out
    }

    /// Reads one interface.
    pub fn device(&self, name: &str) -> Result<DeviceState, SysrootError> {
        if !self.exists(name) {
            return Err(SysrootError::NoSuchInterface(name.to_string()));
        }
        let interrupts = netdev::interrupts(&self.roots);
        #[cfg(any(test, feature = "fixtures"))]
        let fixture = self.fixture().map(|dir| crate::fixture::device(dir, name)).transpose()?;
        #[cfg(not(any(test, feature = "fixtures")))]
        let fixture = None;
        let mut via = NicVia::default();
        let (driver, channels, rss, hash) = if let Some(parts) = fixture {
            parts
        } else if let Some(dir) = &self.capture {
            crate::capture::ethtool(dir, name)?
        } else {
            let mut nic = Nic::open(name).map_err(ethtool_error)?;
            let eth = nic.ioctl();
            let driver = match eth.driver().map_err(ethtool_error)? {
                Reported::Supported(d) if !d.is_empty() => Some(d),
                _ => netdev::sysfs_driver(&self.roots, name),
            };
            let hash = eth.flow_hashes().map_err(ethtool_error)?;
            // Netlink where the kernel has the command, else the ioctl.
            let channels = nic.channels().map_err(ethtool_error)?;
            let rss = nic.rss().map_err(ethtool_error)?;
            via = NicVia { rss: Some(rss.via), channels: Some(channels.via) };
            (driver, channels.value, rss.value, hash)
        };
        // One place decides which IRQ serves which queue (crate::irqmap).
        let by_name = netdev::iface_irqs(&self.roots, name, &interrupts);
        let kernel = self.kernel_map(name);
        let extra = |irq: u32| {
            let line = interrupts.iter().find(|l| l.irq == irq)?;
            let (kind, queue) = netdev::classify_irq(&line.name);
            Some(IfaceIrq {
                irq,
                name: line.name.clone(),
                kind,
                queue,
                cpus: netdev::irq_cpus(&self.roots, irq, "smp_affinity_list"),
                effective_cpus: netdev::irq_cpus(&self.roots, irq, "effective_affinity_list"),
            })
        };
        let (irqs, queue_map) = match &kernel {
            Ok(m) => crate::irqmap::link(by_name, Some(m), extra),
            Err(why) => (by_name, crate::irqmap::MapSource::names(why.clone())),
        };
        let mut napi = crate::napi::read(&self.roots, name);
        napi.map = kernel.ok().as_ref().and_then(crate::napi::NapiMap::from_kernel);
        Ok(DeviceState {
            name: name.to_string(),
            driver,
            facts: netdev::facts(&self.roots, name),
            channels,
            rss,
            hash,
            rx: netdev::rx_queues(&self.roots, name),
            tx: netdev::tx_queues(&self.roots, name),
            irqs,
            napi,
            queue_map,
            // nicres
            rings: self.rings(name)?,
            coalesce: self.coalesce(name)?,
            via,
        })
    }

    /// The kernel's queue -> NAPI -> IRQ map of `name`: netdev netlink on
    /// the live host, `DIR/netdev_nl/IF.json` in a capture or a test tree
    /// (absent: none). `Err` says why there is none.
    pub fn kernel_map(&self, name: &str) -> Result<rsskit_linux::netdev_nl::QueueMap, String> {
        // A test tree's fake driver files are in DIR/ethtool: its map beside them.
        let tree = self.fixture().and_then(Path::parent);
        let file = tree.or(self.capture.as_deref()).map(|d| d.join("netdev_nl").join(format!("{name}.json")));
        match file {
            Some(p) => crate::capture::netdev_map(&p),
            None => rsskit_linux::netdev_nl::queue_map(name).map_err(|e| crate::causes(&e)),
        }
    }

    /// The device's flow classification rules (`ethtool -n IF`), by ascending location.
    pub fn rules(&self, name: &str) -> Result<Reported<RuleTable>, SysrootError> {
        if !self.exists(name) {
            return Err(SysrootError::NoSuchInterface(name.to_string()));
        }
        #[cfg(any(test, feature = "fixtures"))]
        if let Some(dir) = self.fixture() {
            return crate::fixture::rules(dir, name);
        }
        if self.capture.is_some() {
            // Never the live NIC of the same name.
            return Ok(Reported::Unsupported { reason: "flow rules: not in a capture (format 1)".into() });
        }
        Ethtool::open(name).and_then(|eth| eth.rules()).map_err(ethtool_error)
    }

    /// RSS context `context`'s key and table (`ethtool -x IF context N`).
    pub fn context_rss(&self, name: &str, context: u32) -> Result<Reported<ContextRss>, SysrootError> {
        #[cfg(any(test, feature = "fixtures"))]
        if let Some(dir) = self.fixture() {
            return crate::fixture::context_rss(dir, name, context);
        }
        if self.capture.is_some() {
            return Ok(Reported::Unsupported { reason: "RSS contexts: not in a capture (format 1)".into() });
        }
        Ethtool::open(name).and_then(|eth| eth.context_rss(context)).map_err(ethtool_error)
    }

    /// Re-reads the RSS key and table of one interface.
    pub fn rss(&self, name: &str) -> Result<Reported<Rss>, SysrootError> {
        Ok(self.device(name)?.rss)
    }

    /// Writes the table and/or key (`ETHTOOL_MSG_RSS_SET`, else
    /// `ETHTOOL_SRSSH`). `Unsupported` carries
    /// the driver's refusal.
    pub fn set_rss(
        &self,
        name: &str,
        indir: Option<&[u32]>,
        key: Option<&[u8]>,
    ) -> Result<Reported<()>, SysrootError> {
        self.refuse_capture()?;
        #[cfg(any(test, feature = "fixtures"))]
        if let Some(dir) = self.fixture() {
            return crate::fixture::set_rss(dir, name, indir, key);
        }
        // RSS_SET through netlink where the kernel has it, else ETHTOOL_SRSSH.
        let w = RssWrite {
            indir: indir.map(<[u32]>::to_vec),
            key: key.map(<[u8]>::to_vec),
            ..RssWrite::default()
        };
        let mut nic = Nic::open(name).map_err(|e| SysrootError::Ethtool(e.to_string()))?;
        nic.set_rss(&w).map(|a| a.value).map_err(|e| SysrootError::Ethtool(e.to_string()))
    }

    /// symplan: sets the RSS input transform of the main context alone
    /// (`RXH_XFRM_*` bits; 0 none). Only ethtool netlink `RSS_SET` carries
    /// it: on a kernel without that the answer is a refusal with the
    /// reason, as is a driver that does not take it or reads back another.
    pub fn set_input_xfrm(&self, name: &str, bits: u8) -> Result<Reported<()>, SysrootError> {
        self.refuse_capture()?;
        #[cfg(any(test, feature = "fixtures"))]
        if let Some(dir) = self.fixture() {
            return crate::fixture::set_input_xfrm(dir, name, bits);
        }
        let w = RssWrite { input_xfrm: Some(u32::from(bits)), ..RssWrite::default() };
        let mut nic = Nic::open(name).map_err(|e| SysrootError::Ethtool(e.to_string()))?;
        nic.set_rss(&w).map(|a| a.value).map_err(|e| SysrootError::Ethtool(e.to_string()))
    }

    /// Sets the combined channel count (`CHANNELS_SET` or `ETHTOOL_SCHANNELS`), other counts
    /// kept. A test tree's fake driver adds or removes its queues and IRQs.
    pub fn set_combined_channels(&self, name: &str, combined: u32) -> Result<Reported<()>, SysrootError> {
        self.refuse_capture()?;
        // nicres: the fake driver adds or removes queues and their IRQs.
        #[cfg(any(test, feature = "fixtures"))]
        if let Some(dir) = self.fixture() {
            return crate::fixture::set_channels(dir, &self.roots, name, combined);
        }
        // CHANNELS_SET through netlink where the kernel has it, else the ioctl.
        let mut nic = Nic::open(name).map_err(|e| SysrootError::Ethtool(e.to_string()))?;
        let cur = match nic.channels().map_err(|e| SysrootError::Ethtool(e.to_string()))?.value {
            Reported::Supported(c) => c,
            Reported::Unsupported { reason } => return Ok(Reported::Unsupported { reason }),
        };
        nic.set_channels(Channels { combined_count: combined, ..cur })
            .map(|a| a.value)
            .map_err(|e| SysrootError::Ethtool(e.to_string()))
    }

    // nicres: ring sizes and coalescing, live or on the fake driver.

    /// Ring sizes (`RINGS_GET` or `ETHTOOL_GRINGPARAM`, `ethtool -g`).
    pub fn rings(&self, name: &str) -> Result<Reported<Rings>, SysrootError> {
        #[cfg(any(test, feature = "fixtures"))]
        if let Some(dir) = self.fixture() {
            return crate::fixture::rings(dir, name);
        }
        if self.capture.is_some() {
            return Ok(Reported::Unsupported { reason: "ring sizes: not in a capture (format 1)".into() });
        }
        // RINGS_GET through netlink where the kernel has it, else the ioctl.
        Nic::open(name).and_then(|mut n| n.rings()).map(|a| a.value).map_err(ethtool_error)
    }

    /// Sets the RX and TX ring sizes (`ETHTOOL_SRINGPARAM`). `Unsupported`
    /// carries the driver's refusal.
    pub fn set_rings(&self, name: &str, rx: u32, tx: u32) -> Result<Reported<()>, SysrootError> {
        self.refuse_capture()?;
        #[cfg(any(test, feature = "fixtures"))]
        if let Some(dir) = self.fixture() {
            return crate::fixture::set_rings(dir, name, rx, tx);
        }
        Nic::open(name).and_then(|mut n| n.set_rings(rx, tx)).map(|a| a.value).map_err(ethtool_error)
    }

    /// Interrupt coalescing (`COALESCE_GET` or `ETHTOOL_GCOALESCE`, `ethtool -c`).
    pub fn coalesce(&self, name: &str) -> Result<Reported<Coalesce>, SysrootError> {
        #[cfg(any(test, feature = "fixtures"))]
        if let Some(dir) = self.fixture() {
            return crate::fixture::coalesce(dir, name);
        }
        if self.capture.is_some() {
            return Ok(Reported::Unsupported { reason: "coalescing: not in a capture (format 1)".into() });
        }
        Nic::open(name).and_then(|mut n| n.coalesce()).map(|a| a.value).map_err(ethtool_error)
    }

    /// Sets the modelled coalescing fields (`ETHTOOL_SCOALESCE`), the
    /// others as the driver has them.
    pub fn set_coalesce(&self, name: &str, c: &Coalesce) -> Result<Reported<()>, SysrootError> {
        self.refuse_capture()?;
        #[cfg(any(test, feature = "fixtures"))]
        if let Some(dir) = self.fixture() {
            return crate::fixture::set_coalesce(dir, name, c);
        }
        Nic::open(name).and_then(|mut n| n.set_coalesce(c)).map(|a| a.value).map_err(ethtool_error)
    }

    /// Sets the fields hashed for one flow type (`ETHTOOL_SRXFH`).
    pub fn set_flow_hash(&self, name: &str, flow: &str, raw: u64) -> Result<Reported<()>, SysrootError> {
        self.refuse_capture()?;
        #[cfg(any(test, feature = "fixtures"))]
        if let Some(dir) = self.fixture() {
            return crate::fixture::set_flow_hash(dir, name, flow, raw);
        }
        let eth = Ethtool::open(name).map_err(|e| SysrootError::Ethtool(e.to_string()))?;
        eth.set_flow_hash(flow, raw).map_err(|e| SysrootError::Ethtool(e.to_string()))
    }

    /// Path of `/proc/sys/net/core/rps_sock_flow_entries` (global, not per
    /// network namespace).
    pub fn sock_flow_entries_path(&self) -> PathBuf {
        self.roots.proc.join("sys/net/core/rps_sock_flow_entries")
    }

    /// `/sys/class/net/IF/FILE` (napi: `napi_defer_hard_irqs`, `gro_flush_timeout`).
    pub fn iface_path(&self, name: &str, file: &str) -> PathBuf {
        self.roots.sys.join(format!("class/net/{name}/{file}"))
    }

    /// The CPUs thread `napi/IF-ID` may run on now (a CPU list), found by
    /// its name among the kernel threads; `None` when there is no such
    /// thread (threading off, or the name cut at 15 bytes).
    pub fn napi_thread_cpus(&self, name: &str, napi_id: u32) -> Option<String> {
        let napi = crate::napi::read(&self.roots, name);
        let t = napi.threads.into_iter().find(|t| t.napi_id == Some(napi_id))?;
        t.cpus.map(|c| rsskit_linux::cpulist::format(&c))
    }

    /// Pins thread `napi/IF-ID` to `cpus`. The PID is found by the thread's
    /// name among kernel threads (`/proc/PID/comm` and its parent
    /// `kthreadd`) and, where the kernel's map names one, must be that PID:
    /// nothing read from `/proc` or netlink is trusted alone.
    pub fn set_napi_thread_cpus(
        &self,
        name: &str,
        napi_id: u32,
        cpus: &[usize],
    ) -> Result<Reported<()>, SysrootError> {
        self.refuse_capture()?;
        let refuse = |reason: String| Ok(Reported::Unsupported { reason });
        let thread = format!("napi/{name}-{napi_id}");
        let napi = crate::napi::read(&self.roots, name);
        let Some(t) = napi.threads.iter().find(|t| t.napi_id == Some(napi_id)) else {
            return refuse(format!("no kernel thread {thread} (threaded NAPI off, or the device changed)"));
        };
        if let Ok(map) = self.kernel_map(name) {
            let pid = map.napi(napi_id).and_then(|n| n.pid);
            if pid.is_some_and(|p| p != t.pid) {
                return refuse(format!(
                    "the kernel's map names PID {} for NAPI {napi_id}, /proc names {} PID {}: not pinned",
                    pid.unwrap_or(0),
                    thread,
                    t.pid
                ));
            }
        }
        #[cfg(any(test, feature = "fixtures"))]
        if let Some(dir) = self.fixture() {
            return crate::fixture::set_thread_cpus(dir, &self.roots, t.pid, cpus);
        }
        match rsskit_linux::affinity::set_task_affinity(t.pid, cpus) {
            Ok(()) => Ok(Reported::Supported(())),
            Err(e) => refuse(format!("sched_setaffinity({thread}, PID {}): {e}", t.pid)),
        }
    }

    /// `/sys/class/net/IF/threaded`.
    pub fn napi_threaded_path(&self, name: &str) -> PathBuf {
        self.roots.sys.join(format!("class/net/{name}/threaded"))
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

// Service isolation (issue 33 item 3): RSS contexts and flow rules written.
impl Sysroot {
    /// Whether the device has RSS contexts: `ETHTOOL_GRSSH` on a context
    /// other than 0 is refused with `EOPNOTSUPP` only by a driver without them.
    pub fn context_support(&self, name: &str) -> Result<Reported<()>, SysrootError> {
        #[cfg(any(test, feature = "fixtures"))]
        if let Some(dir) = self.fixture() {
            return crate::fixture::context_support(dir, name);
        }
        if self.capture.is_some() {
            return Ok(Reported::Unsupported { reason: "RSS contexts: not in a capture (format 1)".into() });
        }
        Ethtool::open(name).and_then(|eth| eth.contexts_supported()).map_err(ethtool_error)
    }

    /// Creates an RSS context over `indir` (and `key`; `None`: the driver's); its id.
    pub fn create_context(
        &self,
        name: &str,
        indir: &[u32],
        key: Option<&[u8]>,
    ) -> Result<Reported<u32>, SysrootError> {
        self.refuse_capture()?;
        #[cfg(any(test, feature = "fixtures"))]
        if let Some(dir) = self.fixture() {
            return crate::fixture::create_context(dir, name, indir, key);
        }
        Ethtool::open(name).and_then(|eth| eth.create_context(indir, key)).map_err(ethtool_error)
    }

    /// Deletes RSS context `id`.
    pub fn delete_context(&self, name: &str, id: u32) -> Result<Reported<()>, SysrootError> {
        self.refuse_capture()?;
        #[cfg(any(test, feature = "fixtures"))]
        if let Some(dir) = self.fixture() {
            return crate::fixture::delete_context(dir, name, id);
        }
        Ethtool::open(name).and_then(|eth| eth.delete_context(id)).map_err(ethtool_error)
    }

    /// Inserts a flow rule (at `RX_CLS_LOC_ANY` when `any_location`); the location it took.
    pub fn insert_rule(
        &self,
        name: &str,
        rule: &rsskit_core::flowrule::FlowRule,
        any_location: bool,
    ) -> Result<Reported<u32>, SysrootError> {
        self.refuse_capture()?;
        #[cfg(any(test, feature = "fixtures"))]
        if let Some(dir) = self.fixture() {
            return crate::fixture::insert_rule(dir, name, rule, any_location);
        }
        Ethtool::open(name).and_then(|eth| eth.insert_rule(rule, any_location)).map_err(ethtool_error)
    }

    /// Deletes the flow rule at `location`.
    pub fn delete_rule(&self, name: &str, location: u32) -> Result<Reported<()>, SysrootError> {
        self.refuse_capture()?;
        #[cfg(any(test, feature = "fixtures"))]
        if let Some(dir) = self.fixture() {
            return crate::fixture::delete_rule(dir, name, location);
        }
        Ethtool::open(name).and_then(|eth| eth.delete_rule(location)).map_err(ethtool_error)
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
}
