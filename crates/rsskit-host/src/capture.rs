//! Captures: exactly the facts rsskit reads about a host (topology, NUMA,
//! isolated and nohz_full CPUs, IRQs and their affinities, each interface's
//! queues, key, table and hashed fields), copied into a directory by
//! `rsskit capture DIR` ([`take`]) and read back, read-only, by `plan`,
//! `check` and `info --from DIR` ([`open`], [`ethtool`]).
//!
//! The layout is the host's own (`DIR/sys`, `DIR/proc`, so the same readers
//! serve both) plus `DIR/ethtool/IF.json` (the ethtool ioctl's answers) and
//! `DIR/capture.json` (the [`Manifest`]). What is copied is listed once,
//! here ([`SYS_CPU_FILES`], [`SYS_IFACE_FILES`], [`PROC_FILES`] and the
//! per-CPU, per-node, per-queue and per-IRQ files [`take`] walks); no MAC or
//! IP address, no process, no traffic. A capture comes from someone else's
//! bug report: [`open`] refuses symlinks, special files, and trees or files
//! past bounded sizes before anything is read, and every ethtool file is
//! checked value by value.

use crate::tune::setting::{printable, MAX_KEY_BYTES, MAX_TABLE_ENTRIES};
use rsskit_linux::cpulist;
use rsskit_linux::ethtool::{self, Channels, FlowHash, Reported, Rss};
use rsskit_linux::netdev::{self, Roots};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fs;
use std::io::{self, Read as _};
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

/// The capture format this build writes and reads.
pub const FORMAT: u32 = 1;
/// The manifest's file name in a capture.
pub const MANIFEST: &str = "capture.json";
/// Under `sys/devices/system/cpu`: online, isolated and nohz_full CPUs.
pub const SYS_CPU_FILES: &[&str] = &["online", "isolated", "nohz_full"];
/// Under each `sys/devices/system/cpu/cpuN/topology`.
pub const SYS_TOPOLOGY_FILES: &[&str] = &["core_id", "physical_package_id"];
/// Under each `sys/class/net/IF` (queues, `msi_irqs` and `lower_*` links
/// are walked besides).
pub const SYS_IFACE_FILES: &[&str] = &[
    "operstate",
    "mtu",
    "threaded",
    "device/numa_node",
    "device/irq",
    // napi:
    "napi_defer_hard_irqs",
    "gro_flush_timeout",
];
/// Under `proc` (each IRQ's `proc/irq/N/{smp,effective}_affinity_list` besides).
pub const PROC_FILES: &[&str] =
    &["interrupts", "sys/net/core/rps_sock_flow_entries", "sys/net/core/netdev_rss_key"];

/// Most entries in a capture tree.
pub const MAX_ENTRIES: usize = 200_000;
/// Largest file in a capture (`/proc/interrupts` on 1,024 CPUs and a few
/// thousand IRQs stays well below).
pub const MAX_FILE_BYTES: u64 = 64 << 20;
/// Largest capture in all.
pub const MAX_TOTAL_BYTES: u64 = 512 << 20;
/// Deepest path in a capture (`sys/class/net/IF/queues/rx-N/rps_cpus` is 6).
pub const MAX_DEPTH: usize = 12;
/// Largest ethtool file.
const MAX_FACTS_BYTES: u64 = 4 << 20;

/// Why a capture could not be taken or read.
#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    /// The target directory exists: a capture goes into a new one.
    #[error("{}: already exists (a capture goes into a new directory)", .path.display())]
    Exists {
        /// The directory.
        path: PathBuf,
    },
    /// Reading or writing a file failed.
    #[error("{}", .path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// A capture holds something rsskit refuses to read.
    #[error("{}: {what} (a capture holds plain files and directories only)", .path.display())]
    Unsafe {
        /// The entry.
        path: PathBuf,
        /// What it is.
        what: String,
    },
    /// As root, an entry another user owns or may write.
    #[error(
        "{}: owned by uid {uid} with mode {mode:o}: as root rsskit reads only a capture that is root's \
         and writable by no one else; read it as its owner (--from needs no root) or chown -R root it",
        .path.display()
    )]
    Swappable {
        /// The entry.
        path: PathBuf,
        /// Its owner.
        uid: u32,
        /// Its permission bits.
        mode: u32,
    },
    /// A capture past the size bounds.
    #[error("{}: {what}", .path.display())]
    TooBig {
        /// The capture or file.
        path: PathBuf,
        /// Which bound.
        what: String,
    },
    /// The manifest is missing, malformed or of another format.
    #[error("{}: {msg}", .path.display())]
    Manifest {
        /// The manifest file.
        path: PathBuf,
        /// What is wrong.
        msg: String,
    },
    /// An ethtool file is malformed or holds a value no driver reports.
    #[error("{}: {msg}", .path.display())]
    Facts {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        msg: String,
    },
}

/// `capture.json`: what the capture is and what it lacks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// [`FORMAT`].
    pub format: u32,
    /// The rsskit that took it.
    pub rsskit_version: String,
    /// `uname -r` of the host.
    pub kernel: Option<String>,
    /// Seconds since 1970 (UTC) when it was taken.
    pub taken_unix: u64,
    /// Interfaces captured.
    pub interfaces: Vec<String>,
    /// What could not be copied, and why.
    pub skipped: Vec<Skipped>,
}

/// One fact left out of a capture.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Skipped {
    /// The file or ethtool query.
    pub what: String,
    /// Why (the error, e.g. permission denied without root).
    pub why: String,
}

/// One ethtool answer: the data, or the driver's refusal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Answer<T> {
    /// The driver answered.
    Supported(T),
    /// The driver refused, with its reason.
    Unsupported(String),
}

/// `ETHTOOL_GCHANNELS`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChannelFacts {
    /// Combined channels in use.
    pub combined: u32,
    /// RX-only channels in use.
    pub rx: u32,
    /// TX-only channels in use.
    pub tx: u32,
    /// Other channels in use.
    pub other: u32,
    /// Most combined channels.
    pub max_combined: u32,
    /// Most RX-only channels.
    pub max_rx: u32,
    /// Most TX-only channels.
    pub max_tx: u32,
    /// Most other channels.
    pub max_other: u32,
}

/// `ETHTOOL_GRSSH` (or `GRXFHINDIR`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RssFacts {
    /// The key, hex (empty: the driver reports none).
    pub key: String,
    /// The indirection table.
    pub table: Vec<u32>,
    /// Hash function names.
    pub hfunc: Vec<String>,
    /// Input transform names.
    pub input_xfrm: Vec<String>,
    /// Which ioctl answered.
    pub source: String,
}

/// `DIR/ethtool/IF.json`: the ethtool answers of one interface.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EthtoolFacts {
    /// The driver (`ETHTOOL_GDRVINFO`, else the sysfs link's name).
    pub driver: Option<String>,
    /// Channel counts.
    pub channels: Answer<ChannelFacts>,
    /// Key and table.
    pub rss: Answer<RssFacts>,
    /// `RXH_*` mask per flow type (`tcp4`...).
    pub hash: Answer<BTreeMap<String, u64>>,
}

/// What [`take`] wrote.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CaptureReport {
    /// The manifest written.
    pub manifest: Manifest,
    /// Files written.
    pub files: usize,
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) || !s.is_ascii() {
        return None;
    }
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).ok()).collect()
}

fn answer<T, U>(r: Reported<T>, f: impl FnOnce(T) -> U) -> Answer<U> {
    match r {
        Reported::Supported(t) => Answer::Supported(f(t)),
        Reported::Unsupported { reason } => Answer::Unsupported(reason),
    }
}

/// Whether a refusal is for want of privilege (so the capture says it skipped it).
fn denied(reason: &str) -> bool {
    let r = reason.to_ascii_lowercase();
    r.contains("not permitted") || r.contains("permission denied")
}

/// `create_dir_all` with mode 0755.
fn mkdirs(path: &Path) -> Result<(), CaptureError> {
    use std::os::unix::fs::DirBuilderExt as _;
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(path)
        .map_err(|source| CaptureError::Io { path: path.to_path_buf(), source })
}

struct Writer<'a> {
    src: &'a Roots,
    dir: &'a Path,
    skipped: Vec<Skipped>,
    files: usize,
}

impl Writer<'_> {
    fn put(&mut self, rel: &Path, bytes: &[u8]) -> Result<(), CaptureError> {
        let path = self.dir.join(rel);
        if let Some(p) = path.parent() {
            mkdirs(p)?;
        }
        // A new file in the directory we made: never through a link; never
        // group- or world-writable whatever the umask (root reads only such).
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .open(&path)
            .map_err(|source| CaptureError::Io { path: path.clone(), source })?;
        io::Write::write_all(&mut f, bytes).map_err(|source| CaptureError::Io { path, source })?;
        self.files += 1;
        Ok(())
    }

    fn mkdir(&mut self, rel: &Path) -> Result<(), CaptureError> {
        mkdirs(&self.dir.join(rel))
    }

    /// Copies `root/rel` to `DIR/top/rel`; a missing file is left out
    /// (the readers treat it as unknown), an unreadable one is skipped.
    fn copy(&mut self, top: &str, rel: &str) -> Result<(), CaptureError> {
        self.copy_to(top, rel, rel)
    }

    /// Copies `root/rel` to `DIR/top/to`.
    fn copy_to(&mut self, top: &str, rel: &str, to: &str) -> Result<(), CaptureError> {
        let root = if top == "sys" { &self.src.sys } else { &self.src.proc };
        let from = root.join(rel);
        let mut buf = Vec::new();
        let read = fs::File::open(&from).and_then(|f| f.take(MAX_FILE_BYTES + 1).read_to_end(&mut buf));
        match read {
            Ok(_) if buf.len() as u64 > MAX_FILE_BYTES => {
                self.skipped.push(Skipped { what: format!("/{top}/{rel}"), why: "too large".into() });
                Ok(())
            }
            Ok(_) => self.put(&Path::new(top).join(to), &buf),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            // sysfs refuses some reads (xps_cpus of a single-queue device); the reader sees "unknown".
            Err(e) => {
                self.skipped.push(Skipped { what: format!("/{top}/{rel}"), why: e.to_string() });
                Ok(())
            }
        }
    }

    /// Names in `root/rel`, or none.
    fn names(&self, top: &str, rel: &str) -> Vec<String> {
        let root = if top == "sys" { &self.src.sys } else { &self.src.proc };
        let Ok(rd) = fs::read_dir(root.join(rel)) else { return Vec::new() };
        let mut v: Vec<String> = rd.flatten().filter_map(|e| e.file_name().into_string().ok()).collect();
        v.sort();
        v
    }
}

/// Takes a capture of the host under `src` (the live host: `Roots::default()`)
/// into the new directory `dir`. Facts the caller may not read (without
/// root) are listed in the manifest's `skipped`.
pub fn take(src: &Roots, dir: &Path, taken_unix: u64) -> Result<CaptureReport, CaptureError> {
    // The NICs' RSS keys are in it: the taker's alone until they share it.
    let made = {
        use std::os::unix::fs::DirBuilderExt as _;
        fs::DirBuilder::new().mode(0o700).create(dir)
    };
    match made {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            return Err(CaptureError::Exists { path: dir.to_path_buf() })
        }
        Err(source) => return Err(CaptureError::Io { path: dir.to_path_buf(), source }),
    }
    let mut w = Writer { src, dir, skipped: Vec::new(), files: 0 };
    for f in SYS_CPU_FILES {
        w.copy("sys", &format!("devices/system/cpu/{f}"))?;
    }
    let online = fs::read_to_string(src.sys.join("devices/system/cpu/online"))
        .ok()
        .and_then(|s| cpulist::parse(s.trim()).ok())
        .unwrap_or_default();
    for cpu in &online {
        for f in SYS_TOPOLOGY_FILES {
            w.copy("sys", &format!("devices/system/cpu/cpu{cpu}/topology/{f}"))?;
        }
    }
    for node in w.names("sys", "devices/system/node") {
        if node.strip_prefix("node").is_some_and(|n| n.parse::<usize>().is_ok()) {
            w.copy("sys", &format!("devices/system/node/{node}/cpulist"))?;
        }
    }
    let ifaces: Vec<String> =
        netdev::interfaces(src).unwrap_or_default().into_iter().filter(|n| netdev::valid_name(n)).collect();
    for name in &ifaces {
        capture_iface(&mut w, name)?;
    }
    for f in PROC_FILES {
        w.copy("proc", f)?;
    }
    let interrupts = fs::read_to_string(src.proc.join("interrupts")).unwrap_or_default();
    for line in netdev::parse_interrupts(&interrupts) {
        for f in ["smp_affinity_list", "effective_affinity_list"] {
            w.copy("proc", &format!("irq/{}/{f}", line.irq))?;
        }
    }
    let manifest = Manifest {
        format: FORMAT,
        rsskit_version: env!("CARGO_PKG_VERSION").into(),
        kernel: fs::read_to_string(src.proc.join("sys/kernel/osrelease")).ok().map(|s| printable(s.trim())),
        taken_unix,
        interfaces: ifaces,
        skipped: std::mem::take(&mut w.skipped),
    };
    let text = serde_json::to_string_pretty(&manifest).expect("plain data");
    w.put(Path::new(MANIFEST), text.as_bytes())?;
    Ok(CaptureReport { manifest, files: w.files })
}

fn capture_iface(w: &mut Writer<'_>, name: &str) -> Result<(), CaptureError> {
    let base = format!("class/net/{name}");
    w.mkdir(&Path::new("sys").join(&base))?;
    if w.src.sys.join(&base).join("device").is_dir() {
        w.mkdir(&Path::new("sys").join(&base).join("device"))?;
    }
    for f in SYS_IFACE_FILES {
        w.copy("sys", &format!("{base}/{f}"))?;
    }
    // A device on a bus below its PCI function (virtio) has its IRQs and
    // node on the parent, `device/..`: in a capture, where `device` is a
    // plain directory, that is the interface's own directory.
    w.copy_to("sys", &format!("{base}/device/../numa_node"), &format!("{base}/numa_node"))?;
    // The IRQ numbers, as names: empty files.
    for (from, to) in [("device/msi_irqs", "device/msi_irqs"), ("device/../msi_irqs", "msi_irqs")] {
        for irq in w.names("sys", &format!("{base}/{from}")) {
            if irq.parse::<u32>().is_ok() {
                w.put(&Path::new("sys").join(&base).join(to).join(&irq), b"")?;
            }
        }
    }
    for q in w.names("sys", &format!("{base}/queues")) {
        let files: &[&str] = match q.split_once('-') {
            Some(("rx", n)) if n.parse::<usize>().is_ok() => &["rps_cpus", "rps_flow_cnt"],
            Some(("tx", n)) if n.parse::<usize>().is_ok() => &["xps_cpus"],
            _ => continue,
        };
        w.mkdir(&Path::new("sys").join(&base).join("queues").join(&q))?;
        for f in files {
            w.copy("sys", &format!("{base}/queues/{q}/{f}"))?;
        }
    }
    // Bond and VLAN members (`lower_IF` links), as directories.
    for l in w.names("sys", &base) {
        if l.strip_prefix("lower_").is_some_and(netdev::valid_name) {
            w.mkdir(&Path::new("sys").join(&base).join(&l))?;
        }
    }
    // The same front door as the live reads (netlink first, the ioctl
    // otherwise), so a capture holds the answers `info` would show.
    let facts = match rsskit_linux::ethtool_nl::Nic::open(name) {
        Ok(mut nic) => {
            let eth = nic.ioctl();
            let driver = match get(eth.driver()) {
                Reported::Supported(d) if !d.is_empty() => Some(d),
                _ => netdev::sysfs_driver(w.src, name),
            };
            let facts = EthtoolFacts {
                driver,
                hash: answer(get(eth.flow_hashes()), |v| {
                    v.iter().map(|h| (h.flow.to_string(), h.raw)).collect()
                }),
                channels: answer(get(nic.channels().map(|a| a.value)), |c| ChannelFacts {
                    combined: c.combined_count,
                    rx: c.rx_count,
                    tx: c.tx_count,
                    other: c.other_count,
                    max_combined: c.max_combined,
                    max_rx: c.max_rx,
                    max_tx: c.max_tx,
                    max_other: c.max_other,
                }),
                rss: answer(get(nic.rss().map(|a| a.value)), |r| RssFacts {
                    key: hex(&r.key),
                    table: r.indir,
                    hfunc: r.hfunc,
                    input_xfrm: r.input_xfrm,
                    source: r.source.into(),
                }),
            };
            for (what, a) in [
                ("ETHTOOL_GCHANNELS", reason(&facts.channels)),
                ("ETHTOOL_GRSSH", reason(&facts.rss)),
                ("ETHTOOL_GRXFH", reason(&facts.hash)),
            ] {
                if let Some(r) = a.filter(|r| denied(r)) {
                    w.skipped.push(Skipped { what: format!("{name}: {what}"), why: r.to_string() });
                }
            }
            facts
        }
        Err(e) => {
            w.skipped.push(Skipped { what: format!("{name}: ethtool"), why: e.to_string() });
            let why = format!("not captured: {e}");
            EthtoolFacts {
                driver: netdev::sysfs_driver(w.src, name),
                channels: Answer::Unsupported(why.clone()),
                rss: Answer::Unsupported(why.clone()),
                hash: Answer::Unsupported(why),
            }
        }
    };
    let text = serde_json::to_string_pretty(&facts).expect("plain data");
    w.put(&Path::new("ethtool").join(format!("{name}.json")), text.as_bytes())?;
    // The kernel's queue -> NAPI -> IRQ map (6.8+), so that plan and check
    // on the capture link queues to IRQs as they do live.
    if let Ok(map) = rsskit_linux::netdev_nl::queue_map(name) {
        let text = serde_json::to_string_pretty(&map).expect("plain data");
        w.put(&Path::new("netdev_nl").join(format!("{name}.json")), text.as_bytes())?;
    }
    Ok(())
}

/// Largest `netdev_nl/IF.json` read.
const MAX_MAP_BYTES: u64 = 4 << 20;

/// Reads a kernel map a capture (or a test tree) holds: `Err` says why
/// there is none (no file, or one that is not a map; never half a map).
pub fn netdev_map(path: &Path) -> Result<rsskit_linux::netdev_nl::QueueMap, String> {
    let f = match fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err("no netdev netlink map was captured (kernel before 6.8, or an older rsskit)".into())
        }
        Err(e) => return Err(format!("{}: {e}", path.display())),
    };
    let mut text = String::new();
    f.take(MAX_MAP_BYTES + 1).read_to_string(&mut text).map_err(|e| format!("{}: {e}", path.display()))?;
    if text.len() as u64 > MAX_MAP_BYTES {
        return Err(format!("{}: larger than {MAX_MAP_BYTES} bytes", path.display()));
    }
    serde_json::from_str(&text)
        .map_err(|e| format!("{}: not a queue map: {}", path.display(), printable(&e.to_string())))
}

/// An ethtool answer, or the error that stopped it as a refusal.
fn get<T>(r: Result<Reported<T>, ethtool::EthtoolError>) -> Reported<T> {
    r.unwrap_or_else(|e| Reported::Unsupported { reason: e.to_string() })
}

fn reason<T>(a: &Answer<T>) -> Option<&str> {
    match a {
        Answer::Supported(_) => None,
        Answer::Unsupported(r) => Some(r),
    }
}

/// Checks a capture before anything in it is read: only directories and
/// plain files (no symlink, device, FIFO or socket), within the entry,
/// depth and size bounds, with a manifest of this format and the files
/// every reader needs. Returns the manifest.
pub fn open(dir: &Path) -> Result<Manifest, CaptureError> {
    let meta = fs::metadata(dir).map_err(|source| CaptureError::Io { path: dir.to_path_buf(), source })?;
    if !meta.is_dir() {
        return Err(CaptureError::Unsafe { path: dir.to_path_buf(), what: "not a directory".into() });
    }
    let euid = rsskit_linux::process::effective_uid();
    unswappable(dir, &meta, euid)?;
    let (mut entries, mut total) = (0usize, 0u64);
    let mut stack = vec![(dir.to_path_buf(), 0usize)];
    while let Some((d, depth)) = stack.pop() {
        let rd = fs::read_dir(&d).map_err(|source| CaptureError::Io { path: d.clone(), source })?;
        for e in rd {
            let e = e.map_err(|source| CaptureError::Io { path: d.clone(), source })?;
            let path = e.path();
            entries += 1;
            if entries > MAX_ENTRIES {
                return Err(CaptureError::TooBig {
                    path: dir.to_path_buf(),
                    what: format!("more than {MAX_ENTRIES} entries"),
                });
            }
            let m = fs::symlink_metadata(&path)
                .map_err(|source| CaptureError::Io { path: path.clone(), source })?;
            let ft = m.file_type();
            if ft.is_dir() || ft.is_file() {
                unswappable(&path, &m, euid)?;
            }
            if ft.is_dir() {
                if depth + 1 >= MAX_DEPTH {
                    return Err(CaptureError::TooBig { path, what: format!("deeper than {MAX_DEPTH}") });
                }
                stack.push((path, depth + 1));
            } else if ft.is_file() {
                if m.len() > MAX_FILE_BYTES {
                    return Err(CaptureError::TooBig {
                        path,
                        what: format!("larger than {MAX_FILE_BYTES} bytes"),
                    });
                }
                total += m.len();
                if total > MAX_TOTAL_BYTES {
                    return Err(CaptureError::TooBig {
                        path: dir.to_path_buf(),
                        what: format!("more than {MAX_TOTAL_BYTES} bytes in all"),
                    });
                }
            } else {
                let what = if ft.is_symlink() { "a symbolic link" } else { "not a plain file" };
                return Err(CaptureError::Unsafe { path, what: what.into() });
            }
        }
    }
    let path = dir.join(MANIFEST);
    let text = read_bounded(&path, MAX_FACTS_BYTES).map_err(|e| CaptureError::Manifest {
        path: path.clone(),
        msg: format!("{e} (not an `rsskit capture` directory?)"),
    })?;
    let m: Manifest = serde_json::from_str(&text)
        .map_err(|e| CaptureError::Manifest { path: path.clone(), msg: printable(&e.to_string()) })?;
    if m.format != FORMAT {
        return Err(CaptureError::Manifest {
            path,
            msg: format!("capture format {} (this rsskit reads format {FORMAT})", m.format),
        });
    }
    let online = dir.join("sys/devices/system/cpu/online");
    let ok = read_bounded(&online, MAX_FILE_BYTES)
        .ok()
        .is_some_and(|s| cpulist::parse(s.trim()).is_ok_and(|v| !v.is_empty()));
    if !ok {
        return Err(CaptureError::Facts { path: online, msg: "missing or not a CPU list".into() });
    }
    for d in ["sys/class/net", "proc"] {
        if !dir.join(d).is_dir() {
            return Err(CaptureError::Facts { path: dir.join(d), msg: "missing".into() });
        }
    }
    Ok(m)
}

/// As root, a capture another user could change between this check and
/// the reads (swap a file for a link to a root-only file) is refused:
/// every entry must be root's and writable by no one else. Reading a
/// capture needs no root, so its owner can read it as themself.
fn unswappable(path: &Path, m: &fs::Metadata, euid: u32) -> Result<(), CaptureError> {
    use std::os::unix::fs::MetadataExt as _;
    if euid != 0 || (m.uid() == 0 && m.mode() & 0o022 == 0) {
        return Ok(());
    }
    Err(CaptureError::Swappable { path: path.to_path_buf(), uid: m.uid(), mode: m.mode() & 0o7777 })
}

fn read_bounded(path: &Path, max: u64) -> io::Result<String> {
    let mut s = String::new();
    fs::File::open(path)?.take(max + 1).read_to_string(&mut s)?;
    if s.len() as u64 > max {
        return Err(io::Error::other(format!("larger than {max} bytes")));
    }
    Ok(s)
}

/// An interface's driver name, channels, RSS and hashed fields, as the
/// ethtool ioctl answers them.
pub type DriverAnswers = (Option<String>, Reported<Channels>, Reported<Rss>, Reported<Vec<FlowHash>>);

/// What the ethtool ioctl answered for `name` when the capture was taken
/// (`DIR/ethtool/IF.json`, each value checked). No file: an interface
/// whose driver answers nothing.
pub fn ethtool(dir: &Path, name: &str) -> Result<DriverAnswers, CaptureError> {
    let path = dir.join("ethtool").join(format!("{name}.json"));
    let bad = |msg: String| CaptureError::Facts { path: path.clone(), msg };
    let text = match read_bounded(&path, MAX_FACTS_BYTES) {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            let no = |what: &str| format!("{what}: not in the capture");
            return Ok((
                None,
                Reported::Unsupported { reason: no("ETHTOOL_GCHANNELS") },
                Reported::Unsupported { reason: no("ETHTOOL_GRSSH") },
                Reported::Unsupported { reason: no("ETHTOOL_GRXFH") },
            ));
        }
        Err(e) => return Err(bad(e.to_string())),
    };
    let f: EthtoolFacts = serde_json::from_str(&text).map_err(|e| bad(printable(&e.to_string())))?;
    let short = |what: &str, s: &str| {
        if s.len() > 64 || s.chars().any(|c| c.is_control()) {
            Err(bad(format!("{what} is not a short printable name")))
        } else {
            Ok(())
        }
    };
    if let Some(d) = &f.driver {
        short("driver", d)?;
    }
    let unsupported = |r: &str| -> Result<String, CaptureError> {
        if r.len() > 1024 {
            return Err(bad("a refusal reason over 1024 bytes".into()));
        }
        Ok(printable(r))
    };
    let channels = match f.channels {
        Answer::Supported(c) => Reported::Supported(Channels {
            max_rx: c.max_rx,
            max_tx: c.max_tx,
            max_other: c.max_other,
            max_combined: c.max_combined,
            rx_count: c.rx,
            tx_count: c.tx,
            other_count: c.other,
            combined_count: c.combined,
        }),
        Answer::Unsupported(r) => Reported::Unsupported { reason: unsupported(&r)? },
    };
    let rss = match f.rss {
        Answer::Supported(r) => {
            let key = unhex(&r.key).ok_or_else(|| bad("rss.key is not hex".into()))?;
            if key.len() > MAX_KEY_BYTES {
                return Err(bad(format!("rss.key is longer than {MAX_KEY_BYTES} bytes")));
            }
            if r.table.len() > MAX_TABLE_ENTRIES {
                return Err(bad(format!("rss.table has more than {MAX_TABLE_ENTRIES} entries")));
            }
            if r.table.iter().any(|&q| q >= u16::MAX as u32) {
                return Err(bad("rss.table names a queue no device has".into()));
            }
            if r.hfunc.len() > 32 || r.input_xfrm.len() > 32 {
                return Err(bad("too many hash function names".into()));
            }
            for n in r.hfunc.iter().chain(&r.input_xfrm) {
                short("a hash function name", n)?;
            }
            let source =
                if r.source == "ETHTOOL_GRXFHINDIR" { "ETHTOOL_GRXFHINDIR" } else { "ETHTOOL_GRSSH" };
            Reported::Supported(Rss { key, indir: r.table, hfunc: r.hfunc, input_xfrm: r.input_xfrm, source })
        }
        Answer::Unsupported(r) => Reported::Unsupported { reason: unsupported(&r)? },
    };
    let hash = match f.hash {
        Answer::Supported(m) => {
            let mut v = Vec::new();
            for (flow, raw) in m {
                let ft = ethtool::FLOW_TYPES
                    .iter()
                    .find(|t| t.name == flow)
                    .ok_or_else(|| bad(format!("hash: {} is not a flow type", printable(&flow))))?;
                v.push((ft, raw));
            }
            // In the ioctl's order, as the live read lists them.
            v.sort_by_key(|(ft, _)| ethtool::FLOW_TYPES.iter().position(|t| t.name == ft.name));
            Reported::Supported(
                v.into_iter()
                    .map(|(ft, raw)| FlowHash { flow: ft.name, raw, fields: ethtool::rxh_fields(raw) })
                    .collect(),
            )
        }
        Answer::Unsupported(r) => Reported::Unsupported { reason: unsupported(&r)? },
    };
    Ok((f.driver, channels, rss, hash))
}

/// Writes `DIR/ethtool/IF.json` for a capture built by hand or by a
/// generator (tests, `docs/`): the same format [`take`] writes.
pub fn write_ethtool(dir: &Path, name: &str, facts: &EthtoolFacts) -> io::Result<()> {
    let d = dir.join("ethtool");
    fs::create_dir_all(&d)?;
    fs::write(d.join(format!("{name}.json")), serde_json::to_string_pretty(facts).expect("plain data"))
}

/// Gives a capture built by hand the modes [`take`] writes, whatever the
/// umask (directories 0755, files 0644): as root rsskit refuses a capture
/// others could change.
pub fn set_modes(dir: &Path) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    fs::set_permissions(dir, fs::Permissions::from_mode(0o755))?;
    for e in fs::read_dir(dir)? {
        let e = e?;
        let ft = e.file_type()?;
        if ft.is_dir() {
            set_modes(&e.path())?;
        } else if ft.is_file() {
            fs::set_permissions(e.path(), fs::Permissions::from_mode(0o644))?;
        }
    }
    Ok(())
}

/// Writes `DIR/capture.json` for a capture built by hand or by a generator.
pub fn write_manifest(dir: &Path, m: &Manifest) -> io::Result<()> {
    fs::write(dir.join(MANIFEST), serde_json::to_string_pretty(m).expect("plain data"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trip_and_bad_hex() {
        assert_eq!(unhex(&hex(&[0, 0x6d, 0xff])).unwrap(), vec![0, 0x6d, 0xff]);
        assert!(unhex("abc").is_none());
        assert!(unhex("zz").is_none());
        assert!(unhex("é1").is_none());
    }

    /// A minimal capture: 2 CPUs, no interface, and one ethtool file.
    fn tiny(tag: &str, facts: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("rsskit-capture-unit-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(d.join("sys/devices/system/cpu")).unwrap();
        fs::create_dir_all(d.join("sys/class/net")).unwrap();
        fs::create_dir_all(d.join("proc")).unwrap();
        fs::create_dir_all(d.join("ethtool")).unwrap();
        fs::write(d.join("sys/devices/system/cpu/online"), "0-1\n").unwrap();
        fs::write(d.join("ethtool/eth0.json"), facts).unwrap();
        let m = Manifest {
            format: FORMAT,
            rsskit_version: "test".into(),
            kernel: None,
            taken_unix: 0,
            interfaces: vec![],
            skipped: vec![],
        };
        write_manifest(&d, &m).unwrap();
        set_modes(&d).unwrap();
        d
    }

    fn facts(rss: &str, hash: &str) -> String {
        format!(r#"{{"driver": "ixgbe", "channels": {{"unsupported": "no"}}, "rss": {rss}, "hash": {hash}}}"#)
    }

    #[test]
    fn ethtool_values_are_checked() {
        let ok_rss = r#"{"supported": {"key": "6d5a", "table": [0, 1, 1, 0], "hfunc": ["toeplitz"], "input_xfrm": [], "source": "ETHTOOL_GRSSH"}}"#;
        let d = tiny("ok", &facts(ok_rss, r#"{"supported": {"udp4": 192, "tcp4": 240}}"#));
        assert!(open(&d).is_ok());
        let (driver, _, rss, hash) = ethtool(&d, "eth0").unwrap();
        assert_eq!(driver.as_deref(), Some("ixgbe"));
        assert_eq!(rss.ok().unwrap().indir, vec![0, 1, 1, 0]);
        let flows: Vec<&str> = hash.ok().unwrap().iter().map(|h| h.flow).collect();
        assert_eq!(flows, vec!["tcp4", "udp4"], "in the ioctl's order");
        // No file: a driver that answers nothing.
        assert!(ethtool(&d, "eth9").unwrap().2.ok().is_none());
        let _ = fs::remove_dir_all(&d);
        let long_key = format!(
            r#"{{"supported": {{"key": "{}", "table": [0], "hfunc": [], "input_xfrm": [], "source": "x"}}}}"#,
            "ab".repeat(300)
        );
        let big_table = format!(
            r#"{{"supported": {{"key": "", "table": [{}], "hfunc": [], "input_xfrm": [], "source": "x"}}}}"#,
            vec!["0"; 70_000].join(",")
        );
        for (tag, f, want) in [
            ("hex", facts(&ok_rss.replace("6d5a", "6d5"), r#"{"unsupported": "no"}"#), "not hex"),
            ("key", facts(&long_key, r#"{"unsupported": "no"}"#), "longer than 256"),
            ("table", facts(&big_table, r#"{"unsupported": "no"}"#), "more than 65536"),
            ("flow", facts(ok_rss, r#"{"supported": {"smtp4": 1}}"#), "not a flow type"),
            (
                "name",
                facts(&ok_rss.replace("toeplitz", "to\\u001b[2J"), r#"{"unsupported": "no"}"#),
                "printable",
            ),
            ("json", "{\"driver\": 7}".to_string(), "invalid type"),
        ] {
            let d = tiny(tag, &f);
            let e = ethtool(&d, "eth0").unwrap_err().to_string();
            assert!(e.contains(want) && e.contains("eth0.json"), "{tag}: {e}");
            let _ = fs::remove_dir_all(&d);
        }
    }

    #[test]
    fn open_refuses_links_special_files_and_other_formats() {
        let d = tiny("open", "{}");
        std::os::unix::fs::symlink("/etc/hostname", d.join("proc/interrupts")).unwrap();
        assert!(open(&d).unwrap_err().to_string().contains("a symbolic link"));
        fs::remove_file(d.join("proc/interrupts")).unwrap();
        assert!(open(&d).is_ok());
        fs::write(d.join(MANIFEST), "{\"format\": 2}").unwrap();
        assert!(open(&d).unwrap_err().to_string().contains("missing field"));
        fs::remove_file(d.join(MANIFEST)).unwrap();
        assert!(open(&d).unwrap_err().to_string().contains("not an `rsskit capture` directory"));
        // As root: a file others may swap is refused.
        let p = d.join("sys/devices/system/cpu/online");
        let m = fs::metadata(&p).unwrap();
        assert!(unswappable(&p, &m, 1000).is_ok(), "a user reads their own capture");
        use std::os::unix::fs::PermissionsExt as _;
        fs::set_permissions(&p, fs::Permissions::from_mode(0o666)).unwrap();
        let m = fs::metadata(&p).unwrap();
        assert!(unswappable(&p, &m, 0).unwrap_err().to_string().contains("writable by no one else"));
        let _ = fs::remove_dir_all(&d);
    }

    #[test]
    fn denied_reasons() {
        assert!(denied("ETHTOOL_GRSSH: Operation not permitted (os error 1)"));
        assert!(!denied("ETHTOOL_GRSSH: Operation not supported (os error 95)"));
    }
}
