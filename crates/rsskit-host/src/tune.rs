//! Applying a [`Plan`]: every setting as one [`Setting`] (which, current
//! value, new value), the diff, the writes with a read-back of each, and
//! the save file that `--restore` writes back.
//!
//! A setting is named by its [`Target`]: its kind and the device, queue or
//! IRQ it belongs to. The file or ethtool call behind it is derived from
//! the target by [`file_of`] and [`Sysroot`], for `apply` and `--restore`
//! alike; a save file names targets, never paths, and every entry is
//! validated ([`parse_save`]) and checked against the host
//! ([`restore_settings`]) before anything is written.
//!
//! Values are kept as the kernel's text (`rps_cpus` masks, CPU lists,
//! counts) or, for the ethtool settings, as hex (key) and a comma list
//! (table); comparisons parse them, so `0000000f` equals `f`.

use crate::plan::Plan;
use crate::sysroot::{DeviceState, Sysroot, SysrootError};
use rsskit_linux::cpulist;
use rsskit_linux::ethtool::FLOW_TYPES;
use rsskit_linux::netdev::{parse_hex_mask, valid_name};
use serde::{Deserialize, Serialize};
use std::fs;
use std::io::{self, Read as _, Write as _};
use std::os::unix::fs::{DirBuilderExt as _, MetadataExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};

/// How a value is written and compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// A sysfs CPU bitmap (`rps_cpus`, `xps_cpus`).
    CpuMask,
    /// A CPU list (`smp_affinity_list`).
    CpuList,
    /// A number (`rps_flow_cnt`, `rps_sock_flow_entries`).
    Count,
    /// The RSS indirection table (ethtool), comma-separated rings.
    RssTable,
    /// The RSS key (ethtool), hex.
    RssKey,
    /// Fields hashed for one flow type (ethtool), comma-separated names.
    HashFields,
}

/// Which setting: its kind and what it belongs to. Everything `apply`
/// writes is one of these; the path or ethtool call is derived from it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Target {
    /// The RSS indirection table of a device (`ETHTOOL_SRSSH`).
    RssTable {
        /// Interface.
        device: String,
    },
    /// The RSS key of a device (`ETHTOOL_SRSSH`).
    RssKey {
        /// Interface.
        device: String,
    },
    /// The fields hashed for one flow type (`ETHTOOL_SRXFH`).
    HashFields {
        /// Interface.
        device: String,
        /// One of [`FLOW_TYPES`].
        flow: &'static str,
    },
    /// `/proc/irq/N/smp_affinity_list` of one of the device's IRQs.
    IrqAffinity {
        /// Interface the IRQ serves.
        device: String,
        /// IRQ number.
        irq: u32,
    },
    /// `/sys/class/net/IF/queues/rx-N/rps_cpus`.
    RpsCpus {
        /// Interface.
        device: String,
        /// RX queue.
        queue: u32,
    },
    /// `/sys/class/net/IF/queues/rx-N/rps_flow_cnt`.
    RpsFlowCnt {
        /// Interface.
        device: String,
        /// RX queue.
        queue: u32,
    },
    /// `/sys/class/net/IF/queues/tx-N/xps_cpus`.
    XpsCpus {
        /// Interface.
        device: String,
        /// TX queue.
        queue: u32,
    },
    /// `/proc/sys/net/core/rps_sock_flow_entries` (global).
    RpsSockFlowEntries,
    /// The combined channel count of a device (`ETHTOOL_SCHANNELS`): only a
    /// persisted plan sets it (`persist apply`, the agent); `apply` never
    /// writes it, so a save file never names it.
    Channels {
        /// Interface.
        device: String,
    },
}

/// The kinds a save file names, as it spells them.
pub const TARGET_KINDS: [&str; 8] = [
    "rss_table",
    "rss_key",
    "hash_fields",
    "irq_affinity",
    "rps_cpus",
    "rps_flow_cnt",
    "xps_cpus",
    "rps_sock_flow_entries",
];

impl Target {
    /// How its value is written and compared.
    pub fn kind(&self) -> Kind {
        match self {
            Target::RssTable { .. } => Kind::RssTable,
            Target::RssKey { .. } => Kind::RssKey,
            Target::HashFields { .. } => Kind::HashFields,
            Target::IrqAffinity { .. } => Kind::CpuList,
            Target::RpsCpus { .. } | Target::XpsCpus { .. } => Kind::CpuMask,
            Target::RpsFlowCnt { .. } | Target::RpsSockFlowEntries | Target::Channels { .. } => Kind::Count,
        }
    }

    /// Its kind as a save file names it (one of [`TARGET_KINDS`]).
    pub fn name(&self) -> &'static str {
        match self {
            Target::RssTable { .. } => "rss_table",
            Target::RssKey { .. } => "rss_key",
            Target::HashFields { .. } => "hash_fields",
            Target::IrqAffinity { .. } => "irq_affinity",
            Target::RpsCpus { .. } => "rps_cpus",
            Target::RpsFlowCnt { .. } => "rps_flow_cnt",
            Target::XpsCpus { .. } => "xps_cpus",
            Target::RpsSockFlowEntries => "rps_sock_flow_entries",
            Target::Channels { .. } => "channels",
        }
    }

    /// The interface, or `host` for the global setting.
    pub fn device(&self) -> &str {
        match self {
            Target::RssTable { device }
            | Target::RssKey { device }
            | Target::HashFields { device, .. }
            | Target::IrqAffinity { device, .. }
            | Target::RpsCpus { device, .. }
            | Target::RpsFlowCnt { device, .. }
            | Target::XpsCpus { device, .. }
            | Target::Channels { device } => device,
            Target::RpsSockFlowEntries => "host",
        }
    }

    /// What it is, for people (`rx-0 rps_cpus`); `irq_name` is the IRQ's
    /// action name in `/proc/interrupts`, if known.
    pub fn describe(&self, irq_name: Option<&str>) -> String {
        match self {
            Target::RssTable { .. } => "RSS indirection table".into(),
            Target::RssKey { .. } => "RSS key".into(),
            Target::HashFields { flow, .. } => format!("{flow} hashed fields"),
            Target::IrqAffinity { irq, .. } => match irq_name {
                Some(n) => format!("IRQ {irq} ({n}) affinity"),
                None => format!("IRQ {irq} affinity"),
            },
            Target::RpsCpus { queue, .. } => format!("rx-{queue} rps_cpus"),
            Target::RpsFlowCnt { queue, .. } => format!("rx-{queue} rps_flow_cnt"),
            Target::XpsCpus { queue, .. } => format!("tx-{queue} xps_cpus"),
            Target::RpsSockFlowEntries => "net.core.rps_sock_flow_entries".into(),
            Target::Channels { .. } => "combined channels".into(),
        }
    }
}

/// The sysfs/procfs file of a file setting, derived from the target alone
/// (`None` for the ethtool settings, and for a device name the kernel would
/// not accept: no path is ever built from one).
pub fn file_of(root: &Sysroot, t: &Target) -> Option<PathBuf> {
    if t.device() != "host" && !valid_name(t.device()) {
        return None;
    }
    match t {
        Target::RssTable { .. }
        | Target::RssKey { .. }
        | Target::HashFields { .. }
        | Target::Channels { .. } => None,
        Target::IrqAffinity { irq, .. } => Some(root.irq_affinity_path(*irq)),
        Target::RpsCpus { device, queue } => Some(root.queue_path(device, "rx", *queue as usize, "rps_cpus")),
        Target::RpsFlowCnt { device, queue } => {
            Some(root.queue_path(device, "rx", *queue as usize, "rps_flow_cnt"))
        }
        Target::XpsCpus { device, queue } => Some(root.queue_path(device, "tx", *queue as usize, "xps_cpus")),
        Target::RpsSockFlowEntries => Some(root.sock_flow_entries_path()),
    }
}

/// One setting: which, its value now and the value to write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Setting {
    /// Which setting.
    pub target: Target,
    /// What it is, for people: `rx-0 rps_cpus`, `IRQ 41 (eth0-TxRx-1) affinity`.
    pub what: String,
    /// The value now (`None`: unreadable, or not a valid value of its kind).
    pub old: Option<String>,
    /// The value to write (always a valid value of its kind: [`valid_value`]).
    pub new: String,
}

impl Setting {
    /// Whether `new` is already in place.
    pub fn unchanged(&self) -> bool {
        self.old.as_deref().is_some_and(|o| same(self.kind(), o, &self.new))
    }

    /// How its value is written and compared.
    pub fn kind(&self) -> Kind {
        self.target.kind()
    }

    /// The interface, or `host`.
    pub fn device(&self) -> &str {
        self.target.device()
    }
}

/// Whether two values of a kind mean the same.
pub fn same(kind: Kind, a: &str, b: &str) -> bool {
    match kind {
        Kind::CpuMask => match (parse_hex_mask(a), parse_hex_mask(b)) {
            (Ok(x), Ok(y)) => x == y,
            _ => a.trim() == b.trim(),
        },
        Kind::CpuList => match (cpulist::parse(a), cpulist::parse(b)) {
            (Ok(x), Ok(y)) => x == y,
            _ => a.trim() == b.trim(),
        },
        Kind::Count => match (a.trim().parse::<u64>(), b.trim().parse::<u64>()) {
            (Ok(x), Ok(y)) => x == y,
            _ => a.trim() == b.trim(),
        },
        Kind::RssTable | Kind::RssKey => a.trim().eq_ignore_ascii_case(b.trim()),
        Kind::HashFields => match (fields_mask(a), fields_mask(b)) {
            (Ok(x), Ok(y)) => x == y,
            _ => a.trim() == b.trim(),
        },
    }
}

/// Longest RSS key accepted (bytes); drivers use 40 or 52.
pub const MAX_KEY_BYTES: usize = 256;
/// Most indirection table entries accepted; drivers use 64..=2048.
pub const MAX_TABLE_ENTRIES: usize = 65_536;

/// Whether `v` is a value of `kind` as rsskit writes it; `Err` says why not
/// (without quoting `v`, which may be anything).
pub fn valid_value(kind: Kind, v: &str) -> Result<(), String> {
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    match kind {
        Kind::CpuMask => {
            let words = v.split(',').count();
            if words > cpulist::MAX_CPUS / 32 || !v.bytes().all(|b| b.is_ascii_hexdigit() || b == b',') {
                return Err("not a CPU mask (hex words separated by commas)".into());
            }
            parse_hex_mask(v).map(drop).map_err(|_| "not a CPU mask (32-bit hex words)".into())
        }
        Kind::CpuList => {
            if v.len() > 8 * cpulist::MAX_CPUS
                || !v.bytes().all(|b| b.is_ascii_digit() || b == b',' || b == b'-')
            {
                return Err("not a CPU list (like 0-3,5)".into());
            }
            cpulist::parse(v).map(drop).map_err(|_| "not a CPU list (like 0-3,5)".into())
        }
        Kind::Count => match digits(v) && v.len() <= 20 && v.parse::<u64>().is_ok() {
            true => Ok(()),
            false => Err("not a count (a decimal number)".into()),
        },
        Kind::RssKey => {
            let ok = !v.is_empty()
                && v.len().is_multiple_of(2)
                && v.len() <= 2 * MAX_KEY_BYTES
                && v.bytes().all(|b| b.is_ascii_hexdigit());
            if ok {
                Ok(())
            } else {
                Err(format!("not an RSS key (an even number of hex digits, at most {MAX_KEY_BYTES} bytes)"))
            }
        }
        Kind::RssTable => {
            let n = v.split(',').count();
            if n > MAX_TABLE_ENTRIES
                || !v.split(',').all(|x| digits(x) && x.len() <= 10 && x.parse::<u32>().is_ok())
            {
                return Err(format!(
                    "not an indirection table (at most {MAX_TABLE_ENTRIES} ring numbers separated by commas)"
                ));
            }
            Ok(())
        }
        Kind::HashFields => {
            let names: Vec<&str> = v.split(',').collect();
            if v.is_empty() || names.len() > 16 || rsskit_linux::ethtool::rxh_from_names(&names).is_err() {
                return Err("not a list of hashed fields (ip_src,ip_dst,l4_src_port,...)".into());
            }
            Ok(())
        }
    }
}

/// Errors that stop an apply or a restore before anything is written.
#[derive(Debug, thiserror::Error)]
pub enum TuneError {
    /// Reading or writing a setting through the sysroot failed.
    #[error(transparent)]
    Host(#[from] SysrootError),
    /// The save file could not be written.
    #[error("writing the save file {path}: {msg}")]
    Save {
        /// The save file.
        path: PathBuf,
        /// What went wrong.
        msg: String,
    },
    /// A file (e.g. a save file) could not be read or is not what it should be.
    #[error("reading {path}: {msg}")]
    Read {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        msg: String,
    },
    /// A save file not read: rsskit will not trust it ([`crate::trusted`]).
    #[error("reading the save file: {0}")]
    Untrusted(#[from] crate::trusted::TrustError),
    /// Entries of a save file that cannot be restored; nothing was written.
    #[error("{path}: refused, nothing written:\n  {}", problems.join("\n  "))]
    BadSave {
        /// The save file.
        path: PathBuf,
        /// One line per bad entry, naming it.
        problems: Vec<String>,
    },
    /// The plan does not fit the device it names.
    #[error("the plan names {device} but {msg}")]
    PlanMismatch {
        /// Interface the plan names.
        device: String,
        /// What does not match.
        msg: String,
    },
}

fn fields_mask(s: &str) -> Result<u64, String> {
    let names: Vec<&str> = s.split(',').map(str::trim).filter(|x| !x.is_empty()).collect();
    rsskit_linux::ethtool::rxh_from_names(&names)
}

fn hash_text(
    d: &rsskit_linux::ethtool::Reported<Vec<rsskit_linux::ethtool::FlowHash>>,
    flow: &str,
) -> Option<String> {
    d.ok()?.iter().find(|f| f.flow == flow).map(|f| f.fields.join(","))
}

/// Bytes read from a setting's file at most (a CPU list of 8192 CPUs fits).
const MAX_VALUE_FILE: u64 = 64 * 1024;

/// Reads a setting's file (not through a symlink, bounded) and keeps the
/// value only when it is a valid value of `kind`: rsskit shows nothing else.
fn read_value(p: &Path, kind: Kind) -> Option<String> {
    let f =
        fs::OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC).open(p).ok()?;
    let mut text = String::new();
    f.take(MAX_VALUE_FILE).read_to_string(&mut text).ok()?;
    let v = text.trim();
    valid_value(kind, v).ok().map(|()| v.to_string())
}

/// Writes a setting's file: never through a symlink, never creating one.
fn write_value(p: &Path, v: &str) -> io::Result<()> {
    let mut f = fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(p)?;
    f.write_all(format!("{v}\n").as_bytes())
}

fn table_text(t: &[u32]) -> String {
    t.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// One setting for `target` with its current value; `new` is checked.
fn setting(
    root: &Sysroot,
    dev: Option<&DeviceState>,
    target: Target,
    new: String,
) -> Result<Setting, String> {
    valid_value(target.kind(), &new)
        .map_err(|e| format!("{}: the value to write is {e}", target.describe(None)))?;
    let irq_name = match (&target, dev) {
        (Target::IrqAffinity { irq, .. }, Some(d)) => {
            d.irqs.iter().find(|x| x.irq == *irq).map(|x| x.name.as_str())
        }
        _ => None,
    };
    let what = target.describe(irq_name);
    let old = current_with(root, dev, &target);
    Ok(Setting { target, what, old, new })
}

/// Checks that `target` is a setting `dev` has now: the queue or IRQ is the
/// device's (queues in sysfs, IRQs of its device or named for it).
fn check_on_device(t: &Target, dev: &DeviceState) -> Result<(), String> {
    let has_rx = |q: u32| dev.rx.iter().any(|x| x.queue == q as usize);
    let has_tx = |q: u32| dev.tx.iter().any(|x| x.queue == q as usize);
    match t {
        Target::RpsCpus { queue, .. } | Target::RpsFlowCnt { queue, .. } if !has_rx(*queue) => {
            Err(format!("{} has no RX queue {queue}", dev.name))
        }
        Target::XpsCpus { queue, .. } if !has_tx(*queue) => {
            Err(format!("{} has no TX queue {queue}", dev.name))
        }
        Target::IrqAffinity { irq, .. } if !dev.irqs.iter().any(|x| x.irq == *irq) => {
            Err(format!("IRQ {irq} is not one of {}'s IRQs", dev.name))
        }
        _ => Ok(()),
    }
}

/// Every setting of `plan` with its current value, read from `root`. The
/// plan is a file too: every device, queue, IRQ and CPU it names must be
/// the host's (nothing is written otherwise).
pub fn settings(root: &Sysroot, plan: &Plan) -> Result<Vec<Setting>, TuneError> {
    let online = root.topology().online;
    let mut out = Vec::new();
    for d in &plan.devices {
        let dev: DeviceState = root.device(&d.name)?;
        let mismatch = |msg: String| TuneError::PlanMismatch { device: d.name.clone(), msg };
        if dev.rx.len() != d.rx.len() || dev.tx.len() != d.tx.len() {
            return Err(mismatch(format!(
                "it has {} RX / {} TX queues now, the plan was made for {} / {}: plan again",
                dev.rx.len(),
                dev.tx.len(),
                d.rx.len(),
                d.tx.len()
            )));
        }
        let all_cpus = d
            .irqs
            .iter()
            .flat_map(|x| x.cpus.iter())
            .chain(d.rx.iter().flat_map(|q| q.rps_cpus.iter()))
            .chain(d.tx.iter().flat_map(|q| q.xps_cpus.iter().flatten()));
        if let Some(c) = all_cpus.into_iter().find(|c| !online.contains(c)) {
            return Err(mismatch(format!(
                "CPU {c}, which is not online (online: {}): plan again",
                cpulist::format(&online)
            )));
        }
        let mut add = |target: Target, new: String| -> Result<(), TuneError> {
            check_on_device(&target, &dev).map_err(mismatch)?;
            out.push(setting(root, Some(&dev), target, new).map_err(mismatch)?);
            Ok(())
        };
        let device = || d.name.clone();
        // Hashed fields before key and table: virtio_net (6.1) sends its
        // hash types to the device only with the RSS command of ETHTOOL_SRSSH,
        // so fields written after the table would read back while the device
        // still hashes the old ones (seen in the QEMU lab, tests/lab.rs).
        for h in &d.hash_fields {
            let flow = FLOW_TYPES
                .iter()
                .find(|f| f.name == h.flow)
                .ok_or_else(|| mismatch(format!("an unknown flow type for hashed fields ({:?})", h.flow)))?
                .name;
            add(Target::HashFields { device: device(), flow }, h.fields.join(","))?;
        }
        if let Some(t) = &d.table {
            add(Target::RssTable { device: device() }, table_text(t))?;
        }
        if let Some(k) = &d.key {
            add(Target::RssKey { device: device() }, k.clone())?;
        }
        let queue = |q: usize| u32::try_from(q).map_err(|_| mismatch(format!("queue {q}, which it has not")));
        for x in &d.irqs {
            add(Target::IrqAffinity { device: device(), irq: x.irq }, cpulist::format(&x.cpus))?;
        }
        for q in &d.rx {
            add(
                Target::RpsCpus { device: device(), queue: queue(q.queue)? },
                rsskit_linux::netdev::format_hex_mask(&q.rps_cpus),
            )?;
            if let Some(n) = q.rps_flow_cnt {
                add(Target::RpsFlowCnt { device: device(), queue: queue(q.queue)? }, n.to_string())?;
            }
        }
        for q in &d.tx {
            if let Some(x) = &q.xps_cpus {
                add(
                    Target::XpsCpus { device: device(), queue: queue(q.queue)? },
                    rsskit_linux::netdev::format_hex_mask(x),
                )?;
            }
        }
    }
    if let Some(n) = plan.rps_sock_flow_entries {
        let s = setting(root, None, Target::RpsSockFlowEntries, n.to_string())
            .map_err(|msg| TuneError::PlanMismatch { device: "host".into(), msg })?;
        out.push(s);
    }
    Ok(out)
}

/// `changes` (settings that differ, in write order) with, for each device
/// whose hashed fields change while neither its key nor its table is
/// written after them, its current key (else its table) written again right
/// after the last hashed-fields setting. virtio_net (6.1) passes hashed
/// fields to the device only inside the RSS command that `ETHTOOL_SRSSH`
/// sends: an `ETHTOOL_SRXFH` alone reads back through ethtool while the
/// device goes on hashing the old fields (measured in the QEMU lab,
/// tests/lab.rs). The key is preferred: writing it again needs no ring
/// check and does not mark the table as the user's (which would pin the
/// channel count). The added setting has `old == new` (nothing to save);
/// a device that reports neither key nor table gets none.
pub fn push_hash_fields(root: &Sysroot, changes: Vec<Setting>) -> Result<Vec<Setting>, TuneError> {
    let mut out = changes;
    let mut devices: Vec<String> = Vec::new();
    for s in &out {
        if s.kind() == Kind::HashFields && !devices.iter().any(|d| d == s.device()) {
            devices.push(s.device().to_string());
        }
    }
    for dev in devices {
        let on_dev = |s: &Setting| s.device() == dev;
        let last_fields = out.iter().rposition(|s| on_dev(s) && s.kind() == Kind::HashFields);
        let Some(at) = last_fields else { continue };
        let rss_after =
            out[at + 1..].iter().any(|s| on_dev(s) && matches!(s.kind(), Kind::RssKey | Kind::RssTable));
        if rss_after {
            continue;
        }
        // The value the device has by then: one written earlier in this
        // batch (a save file may list the key before the fields), else its
        // current one.
        let earlier = |kind: Kind| {
            out[..at].iter().rev().find(|s| on_dev(s) && s.kind() == kind).map(|s| s.new.clone())
        };
        let rss = root.rss(&dev)?.ok().cloned();
        let key =
            earlier(Kind::RssKey).or_else(|| rss.as_ref().filter(|r| !r.key.is_empty()).map(|r| hex(&r.key)));
        let table = earlier(Kind::RssTable)
            .or_else(|| rss.as_ref().filter(|r| !r.indir.is_empty()).map(|r| table_text(&r.indir)));
        let (target, value, what) = match (key, table) {
            (Some(k), _) => (Target::RssKey { device: dev.clone() }, k, "RSS key"),
            (None, Some(t)) => (Target::RssTable { device: dev.clone() }, t, "RSS indirection table"),
            (None, None) => continue,
        };
        let again = Setting {
            target,
            what: format!("{what} written again (the device takes hashed fields with it)"),
            old: Some(value.clone()),
            new: value,
        };
        out.insert(at + 1, again);
    }
    Ok(out)
}

/// The save file format written and read by this build. Version 1 named
/// a file path per setting, which a restore running as root cannot trust;
/// it is refused (see [`parse_save`]).
pub const SAVE_VERSION: u32 = 2;

/// Largest save file read (bytes): far more than any host's settings.
pub const MAX_SAVE_BYTES: u64 = 4 << 20;

/// One saved setting: which, and the value to put back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SavedValue {
    /// Which setting.
    pub target: Target,
    /// The value to restore (valid for its kind).
    pub value: String,
}

/// The save file: what `apply` replaced, for `--restore`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SaveFile {
    /// Seconds since the epoch.
    pub saved_at: u64,
    /// The settings with the values to put back.
    pub settings: Vec<SavedValue>,
}

/// One entry as the file spells it: a kind, what it belongs to, a value.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    device: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    queue: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    irq: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    flow: Option<String>,
    value: String,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileForm<E> {
    version: u32,
    saved_at: u64,
    settings: Vec<E>,
}

impl Entry {
    fn of(s: &SavedValue) -> Entry {
        let mut e = Entry { kind: s.target.name().into(), value: s.value.clone(), ..Entry::default() };
        if s.target != Target::RpsSockFlowEntries {
            e.device = Some(s.target.device().to_string());
        }
        match &s.target {
            Target::HashFields { flow, .. } => e.flow = Some(flow.to_string()),
            Target::IrqAffinity { irq, .. } => e.irq = Some(u64::from(*irq)),
            Target::RpsCpus { queue, .. }
            | Target::RpsFlowCnt { queue, .. }
            | Target::XpsCpus { queue, .. } => e.queue = Some(u64::from(*queue)),
            _ => {}
        }
        e
    }

    /// The target and value, or why not (never quoting what the file says
    /// unescaped).
    fn check(self) -> Result<SavedValue, String> {
        let Some(&kind) = TARGET_KINDS.iter().find(|k| **k == self.kind) else {
            return Err(format!("unknown kind {} (known: {})", quoted(&self.kind), TARGET_KINDS.join(", ")));
        };
        let needs_device = kind != "rps_sock_flow_entries";
        let needs_queue = matches!(kind, "rps_cpus" | "rps_flow_cnt" | "xps_cpus");
        let needs_irq = kind == "irq_affinity";
        let needs_flow = kind == "hash_fields";
        for (name, given, needed) in [
            ("device", self.device.is_some(), needs_device),
            ("queue", self.queue.is_some(), needs_queue),
            ("irq", self.irq.is_some(), needs_irq),
            ("flow", self.flow.is_some(), needs_flow),
        ] {
            if given && !needed {
                return Err(format!("{kind} takes no {name}"));
            }
            if needed && !given {
                return Err(format!("{kind} needs a {name}"));
            }
        }
        let device = match self.device {
            Some(d) if valid_name(&d) => d,
            Some(d) => return Err(format!("{} is not an interface name", quoted(&d))),
            None => String::new(),
        };
        let queue = match self.queue.map(u32::try_from) {
            Some(Ok(q)) if q < 65_536 => q,
            Some(_) => return Err("the queue number is out of range".into()),
            None => 0,
        };
        let irq = match self.irq.map(u32::try_from) {
            Some(Ok(i)) => i,
            Some(Err(_)) => return Err("the IRQ number is out of range".into()),
            None => 0,
        };
        let flow = match self.flow {
            Some(f) => match FLOW_TYPES.iter().find(|t| t.name == f) {
                Some(t) => t.name,
                None => return Err(format!("{} is not a flow type", quoted(&f))),
            },
            None => "",
        };
        let target = match kind {
            "rss_table" => Target::RssTable { device },
            "rss_key" => Target::RssKey { device },
            "hash_fields" => Target::HashFields { device, flow },
            "irq_affinity" => Target::IrqAffinity { device, irq },
            "rps_cpus" => Target::RpsCpus { device, queue },
            "rps_flow_cnt" => Target::RpsFlowCnt { device, queue },
            "xps_cpus" => Target::XpsCpus { device, queue },
            _ => Target::RpsSockFlowEntries,
        };
        valid_value(target.kind(), &self.value).map_err(|e| format!("the value is {e}"))?;
        Ok(SavedValue { target, value: self.value })
    }
}

/// `s` in quotes with control and non-ASCII characters escaped: safe to
/// print whatever a file holds.
pub fn quoted(s: &str) -> String {
    let cut: String = s.chars().take(64).collect();
    let more = if cut.len() < s.len() { "..." } else { "" };
    format!("\"{}{more}\"", cut.escape_default())
}

/// `s` with control characters escaped (a terminal shows them as text).
pub fn printable(s: &str) -> String {
    s.chars().map(|c| if c.is_control() { c.escape_default().to_string() } else { c.to_string() }).collect()
}

/// A device name as given, or quoted and escaped when it holds anything
/// but plain ASCII (the kernel allows control characters in names).
fn shown(d: &str) -> String {
    if valid_name(d) && d.chars().all(|c| c.is_ascii_graphic()) {
        d.to_string()
    } else {
        quoted(d)
    }
}

/// The entry named for people: `entry 3 (rps_cpus eth0 rx-2)`.
fn entry_name(i: usize, e: Option<&Entry>) -> String {
    let Some(e) = e else { return format!("entry {i}") };
    let mut parts =
        vec![if TARGET_KINDS.contains(&e.kind.as_str()) { e.kind.clone() } else { quoted(&e.kind) }];
    if let Some(d) = &e.device {
        parts.push(shown(d));
    }
    if let Some(q) = e.queue {
        parts.push(format!("queue {q}"));
    }
    if let Some(q) = e.irq {
        parts.push(format!("IRQ {q}"));
    }
    format!("entry {i} ({})", parts.join(" "))
}

/// Parses and validates a save file's text. Every entry must name a known
/// kind with exactly the device/queue/IRQ/flow that kind takes, an
/// interface name the kernel would accept, and a valid value of the kind;
/// no target twice. `Err` lists every bad entry (1-based), each named.
pub fn parse_save(text: &str) -> Result<SaveFile, Vec<String>> {
    let v: serde_json::Value = serde_json::from_str(text)
        .map_err(|e| vec![format!("not an rsskit save file (not JSON: {})", printable(&e.to_string()))])?;
    match v.get("version").and_then(serde_json::Value::as_u64) {
        Some(n) if n == u64::from(SAVE_VERSION) => {}
        Some(1) => {
            return Err(vec![format!(
                "save file version 1 (from an older rsskit) names file paths, which restore no longer \
                 trusts; this rsskit restores version {SAVE_VERSION} files only. Put the values back by hand \
                 (e.g. rerun `rsskit apply` with the old settings) or reboot"
            )])
        }
        Some(n) => {
            return Err(vec![format!(
                "save file version {n} is not one this rsskit reads (version {SAVE_VERSION})"
            )])
        }
        None => return Err(vec!["not an rsskit save file (no version number)".into()]),
    }
    let form: FileForm<serde_json::Value> = serde_json::from_value(v)
        .map_err(|e| vec![format!("not an rsskit save file: {}", printable(&e.to_string()))])?;
    let mut problems = Vec::new();
    let mut settings: Vec<SavedValue> = Vec::new();
    for (i, raw) in form.settings.into_iter().enumerate() {
        let i = i + 1;
        // What the entry says it is, to name it even when it does not parse.
        let field = |k: &str| raw.get(k).and_then(serde_json::Value::as_str).map(str::to_string);
        let hint = Entry {
            kind: field("kind").unwrap_or_default(),
            device: field("device"),
            queue: raw.get("queue").and_then(serde_json::Value::as_u64),
            irq: raw.get("irq").and_then(serde_json::Value::as_u64),
            ..Entry::default()
        };
        let hint = Some(&hint).filter(|h| !h.kind.is_empty());
        let e = match serde_json::from_value::<Entry>(raw.clone()) {
            Ok(e) => e,
            Err(err) => {
                problems.push(format!("{}: {}", entry_name(i, hint), printable(&err.to_string())));
                continue;
            }
        };
        let name = entry_name(i, Some(&e));
        match e.check() {
            Ok(s) if settings.iter().any(|x| x.target == s.target) => {
                problems.push(format!("{name}: names the same setting as an earlier entry"))
            }
            Ok(s) => settings.push(s),
            Err(why) => problems.push(format!("{name}: {why}")),
        }
    }
    if problems.is_empty() {
        Ok(SaveFile { saved_at: form.saved_at, settings })
    } else {
        Err(problems)
    }
}

/// The save file's text.
pub fn save_text(save: &SaveFile) -> String {
    let form = FileForm {
        version: SAVE_VERSION,
        saved_at: save.saved_at,
        settings: save.settings.iter().map(Entry::of).collect(),
    };
    serde_json::to_string_pretty(&form).expect("plain data") + "\n"
}

/// What to save before applying `changes`: each with its old value as the
/// value to restore. Settings whose old value is unreadable (or not valid)
/// cannot be restored and are left out (the caller reports them), and so
/// are values written again unchanged ([`push_hash_fields`]).
pub fn save_of(changes: &[Setting], now: u64) -> SaveFile {
    let settings = changes
        .iter()
        .filter(|s| !s.unchanged())
        .filter_map(|s| Some(SavedValue { target: s.target.clone(), value: s.old.clone()? }))
        .collect();
    SaveFile { saved_at: now, settings }
}

/// Makes `dir` the save directory: created with mode 0700 when missing;
/// an existing one must be a real directory (not a symlink) owned by this
/// user and writable by no one else, or it is refused.
pub fn prepare_save_dir(dir: &Path) -> Result<(), TuneError> {
    let err = |msg: String| TuneError::Save { path: dir.to_path_buf(), msg };
    match fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => return Ok(()),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            // Parents (e.g. a test tree's var/lib) as usual, the last 0700.
            fs::create_dir_all(dir.parent().unwrap_or(dir)).map_err(|e| err(e.to_string()))?;
            return fs::DirBuilder::new().mode(0o700).create(dir).map_err(|e| err(e.to_string()));
        }
        Err(e) => return Err(err(e.to_string())),
    }
    let m = fs::symlink_metadata(dir).map_err(|e| err(e.to_string()))?;
    let me = rsskit_linux::process::effective_uid();
    if !m.file_type().is_dir() {
        return Err(err("not a directory (or a symlink): refusing to save there".into()));
    }
    if m.uid() != me || m.mode() & 0o022 != 0 {
        return Err(err(format!(
            "owned by uid {} with mode {:o}: a save directory must be this user's and writable by no one else",
            m.uid(),
            m.mode() & 0o7777
        )));
    }
    Ok(())
}

/// Writes a save file: created new with mode 0600 (`O_EXCL`, so never
/// through a symlink and never over an earlier save), flushed to disk.
/// Fails when it cannot (then nothing is applied).
pub fn write_save(path: &Path, save: &SaveFile) -> Result<(), TuneError> {
    let err = |msg: String| TuneError::Save { path: path.to_path_buf(), msg };
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| match e.kind() {
            io::ErrorKind::AlreadyExists => {
                err("it exists: an earlier save is never overwritten; name another --save FILE".into())
            }
            _ => err(e.to_string()),
        })?;
    if let Err(e) = f.write_all(save_text(save).as_bytes()).and_then(|()| f.sync_all()) {
        let _ = fs::remove_file(path);
        return Err(err(e.to_string()));
    }
    Ok(())
}

/// Reads, parses and validates a save file ([`parse_save`]); at most
/// [`MAX_SAVE_BYTES`] are read.
pub fn read_save(path: &Path) -> Result<SaveFile, TuneError> {
    let read_err = |msg: String| TuneError::Read { path: path.to_path_buf(), msg };
    // Root's and writable by no one else (like the save directory), and
    // never a FIFO to block on; the size is judged below.
    let f = crate::trusted::open(path, u64::MAX)?;
    let mut text = String::new();
    f.take(MAX_SAVE_BYTES + 1).read_to_string(&mut text).map_err(|e| read_err(e.to_string()))?;
    if text.len() as u64 > MAX_SAVE_BYTES {
        return Err(read_err(format!("larger than {MAX_SAVE_BYTES} bytes: not an rsskit save file")));
    }
    parse_save(&text).map_err(|problems| TuneError::BadSave { path: path.to_path_buf(), problems })
}

/// The settings to restore from `save`, with their current values: every
/// entry is checked against the host first (the device exists, the queue or
/// IRQ is the device's). `Err` names every entry that fails; then nothing
/// may be written.
pub fn restore_settings(root: &Sysroot, path: &Path, save: &SaveFile) -> Result<Vec<Setting>, TuneError> {
    let mut devices: Vec<DeviceState> = Vec::new();
    let mut problems = Vec::new();
    let mut out = Vec::new();
    for (i, s) in save.settings.iter().enumerate() {
        let name = format!("entry {} ({} {})", i + 1, s.target.name(), s.target.describe(None));
        let dev = if s.target == Target::RpsSockFlowEntries {
            None
        } else {
            let d = s.target.device();
            if !devices.iter().any(|x| x.name == d) {
                match root.device(d) {
                    Ok(x) => devices.push(x),
                    Err(e) => {
                        problems.push(format!("{name} of {}: {}", shown(d), printable(&e.to_string())));
                        continue;
                    }
                }
            }
            devices.iter().find(|x| x.name == d)
        };
        if let Some(d) = dev {
            if let Err(why) = check_on_device(&s.target, d) {
                problems.push(format!("{name}: {}", printable(&why)));
                continue;
            }
        }
        match setting(root, dev, s.target.clone(), s.value.clone()) {
            Ok(x) => out.push(x),
            Err(why) => problems.push(format!("{name}: {}", printable(&why))),
        }
    }
    if problems.is_empty() {
        Ok(out)
    } else {
        Err(TuneError::BadSave { path: path.to_path_buf(), problems })
    }
}

/// The current value of a setting (re-read); `None` when unreadable or not
/// a valid value of its kind.
pub fn current(root: &Sysroot, s: &Setting) -> Result<Option<String>, TuneError> {
    Ok(match &s.target {
        Target::RssTable { device } => {
            root.rss(device)?.ok().filter(|r| !r.indir.is_empty()).map(|r| table_text(&r.indir))
        }
        Target::RssKey { device } => {
            root.rss(device)?.ok().filter(|r| !r.key.is_empty()).map(|r| hex(&r.key))
        }
        Target::HashFields { device, flow } => hash_text(&root.device(device)?.hash, flow),
        t => file_of(root, t).and_then(|p| read_value(&p, t.kind())),
    })
}

/// The current value from an already read device state (files re-read).
fn current_with(root: &Sysroot, dev: Option<&DeviceState>, t: &Target) -> Option<String> {
    match (t, dev) {
        (Target::RssTable { .. }, Some(d)) => {
            d.rss.ok().filter(|r| !r.indir.is_empty()).map(|r| table_text(&r.indir))
        }
        (Target::RssKey { .. }, Some(d)) => d.rss.ok().filter(|r| !r.key.is_empty()).map(|r| hex(&r.key)),
        (Target::HashFields { flow, .. }, Some(d)) => hash_text(&d.hash, flow),
        _ => file_of(root, t).and_then(|p| read_value(&p, t.kind())),
    }
}

/// The outcome of one write.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum Outcome {
    /// Written and read back as asked.
    Applied,
    /// The kernel or driver refused the write.
    Refused {
        /// Why the write was refused (the driver's reason, or an invalid value).
        reason: String,
    },
    /// Written, but it reads back as something else.
    Changed {
        /// What the file or driver reports after the write.
        read_back: String,
        /// What the difference means (a kernel rounding, a driver's own choice...).
        reason: String,
    },
}

fn write_reason(s: &Setting, e: &io::Error) -> String {
    let errno = e.raw_os_error();
    let why = match (s.kind(), errno) {
        (Kind::CpuList, Some(libc::EIO)) => {
            " (the kernel manages this IRQ's affinity: a managed interrupt, set by the driver per CPU)"
        }
        (Kind::CpuList, Some(libc::EINVAL)) => " (no CPU of the list can take this IRQ)",
        (Kind::CpuMask, Some(libc::EINVAL)) => {
            " (the kernel refuses this mask here, e.g. XPS on a single-queue device)"
        }
        (_, Some(libc::ELOOP)) => " (the file is a symlink: rsskit writes no setting through one)",
        (_, Some(libc::ENOENT)) => {
            " (the kernel has no such setting: built without RPS/XPS, or the queue is gone)"
        }
        (_, Some(libc::EPERM | libc::EACCES)) => " (not permitted: run as root)",
        _ => "",
    };
    format!("write failed: {e}{why}")
}

/// Writes one setting and reads it back. The value must be a valid value
/// of its kind; the file or ethtool call is derived from the target.
pub fn write_one(root: &Sysroot, s: &Setting) -> Result<Outcome, TuneError> {
    if let Err(why) = valid_value(s.kind(), &s.new) {
        return Ok(Outcome::Refused { reason: format!("the value is {why}") });
    }
    let r = match &s.target {
        Target::RssTable { device } => {
            let t: Vec<u32> = s.new.split(',').filter_map(|x| x.parse().ok()).collect();
            root.set_rss(device, Some(&t), None)?
        }
        Target::RssKey { device } => {
            let k: Vec<u8> = (0..s.new.len())
                .step_by(2)
                .filter_map(|i| u8::from_str_radix(&s.new[i..i + 2], 16).ok())
                .collect();
            root.set_rss(device, None, Some(&k))?
        }
        Target::HashFields { device, flow } => {
            let raw = fields_mask(&s.new).unwrap_or(0);
            root.set_flow_hash(device, flow, raw)?
        }
        t => {
            let Some(path) = file_of(root, t) else {
                return Ok(Outcome::Refused { reason: "not an interface name".into() });
            };
            if let Err(e) = write_value(&path, &s.new) {
                return Ok(Outcome::Refused { reason: write_reason(s, &e) });
            }
            rsskit_linux::ethtool::Reported::Supported(())
        }
    };
    if let Some(reason) = r.reason() {
        return Ok(Outcome::Refused { reason: reason.to_string() });
    }
    let back = current(root, s)?;
    Ok(match back {
        Some(b) if same(s.kind(), &b, &s.new) => Outcome::Applied,
        Some(b) => Outcome::Changed {
            reason: match s.kind() {
                Kind::Count => "the kernel rounds RFS sizes up to a power of two".into(),
                Kind::CpuList => "the kernel or irqbalance changed the IRQ's CPUs".into(),
                _ => "the kernel stored another value".into(),
            },
            read_back: b,
        },
        None => Outcome::Changed {
            read_back: "(unreadable)".into(),
            reason: "cannot read the value back (or it is not a valid value)".into(),
        },
    })
}

/// Seconds since the epoch as `YYYYmmddTHHMMSSZ` (UTC), for save file names.
pub fn utc_stamp(secs: u64) -> String {
    let t = rsskit_linux::clock::utc(secs);
    format!("{:04}{:02}{:02}T{:02}{:02}{:02}Z", t.year, t.month, t.day, t.hour, t.minute, t.second)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comparisons() {
        assert!(same(Kind::CpuMask, "0000000f", "f"));
        assert!(same(Kind::CpuMask, "00000000,00000001", "1"));
        assert!(!same(Kind::CpuMask, "3", "1"));
        assert!(same(Kind::CpuList, "0-2", "0,1,2"));
        assert!(same(Kind::Count, "0\n", "0"));
        assert!(!same(Kind::Count, "1000", "1024"));
        assert!(same(Kind::RssKey, "6D5A", "6d5a"));
        assert!(same(Kind::HashFields, "ip_dst,ip_src", "ip_src,ip_dst"));
        assert!(!same(Kind::HashFields, "ip_src,ip_dst", "ip_src,ip_dst,l4_src_port,l4_dst_port"));
    }

    fn rps(device: &str, old: &str, new: &str) -> Setting {
        Setting {
            target: Target::RpsCpus { device: device.into(), queue: 0 },
            what: "rx-0 rps_cpus".into(),
            old: Some(old.into()),
            new: new.into(),
        }
    }

    #[test]
    fn refusal_reasons() {
        let s = Setting {
            target: Target::IrqAffinity { device: "eth0".into(), irq: 41 },
            what: "IRQ 41 (eth0-TxRx-1) affinity".into(),
            old: Some("0-5".into()),
            new: "3".into(),
        };
        let r = write_reason(&s, &io::Error::from_raw_os_error(libc::EIO));
        assert!(r.contains("managed interrupt"), "{r}");
        let x = rps("eth0", "0", "3");
        let r = write_reason(&x, &io::Error::from_raw_os_error(libc::EINVAL));
        assert!(r.contains("refuses this mask"), "{r}");
        let r = write_reason(&x, &io::Error::from_raw_os_error(libc::ENOENT));
        assert!(r.contains("no such setting"), "{r}");
        let r = write_reason(&x, &io::Error::from_raw_os_error(libc::ELOOP));
        assert!(r.contains("symlink"), "{r}");
    }

    #[test]
    fn stamps() {
        assert_eq!(utc_stamp(0), "19700101T000000Z");
        assert_eq!(utc_stamp(951_782_400 + 3661), "20000229T010101Z");
        assert_eq!(utc_stamp(1_798_070_400), "20261224T000000Z");
    }

    #[test]
    fn save_keeps_old_values_and_round_trips() {
        let s = rps("eth0", "00000000", "00000003");
        let unreadable = Setting { old: None, ..s.clone() };
        let irq = Setting {
            target: Target::IrqAffinity { device: "eth0".into(), irq: 41 },
            what: String::new(),
            old: Some("0-5".into()),
            new: "3".into(),
        };
        let flow = Setting {
            target: Target::HashFields { device: "eth0".into(), flow: "udp4" },
            what: String::new(),
            old: Some("ip_src,ip_dst".into()),
            new: "ip_src".into(),
        };
        let host = Setting {
            target: Target::RpsSockFlowEntries,
            what: String::new(),
            old: Some("0".into()),
            new: "4".into(),
        };
        let f = save_of(&[s, unreadable, irq, flow, host], 7);
        assert_eq!(f.settings.len(), 4);
        assert_eq!(f.settings[0].value, "00000000");
        let text = save_text(&f);
        assert!(!text.contains("path"), "{text}");
        assert!(text.contains("\"kind\": \"irq_affinity\""), "{text}");
        assert_eq!(parse_save(&text).unwrap(), f);
    }

    fn one(entry: &str) -> Result<SaveFile, Vec<String>> {
        parse_save(&format!("{{\"version\": 2, \"saved_at\": 1, \"settings\": [{entry}]}}"))
    }

    #[test]
    fn save_entries_are_validated_and_named() {
        let bad: [(&str, &str); 14] = [
            (
                r#"{"kind": "rps_cpus", "device": "eth0", "queue": 0, "value": "0", "path": "/etc/passwd"}"#,
                "unknown field `path`",
            ),
            (r#"{"kind": "file", "device": "eth0", "value": "0"}"#, "unknown kind \"file\""),
            (
                r#"{"kind": "rps_cpus", "device": "../../../etc", "queue": 0, "value": "0"}"#,
                "\"../../../etc\" is not an interface name",
            ),
            (
                r#"{"kind": "rps_cpus", "device": "eth0/../x", "queue": 0, "value": "0"}"#,
                "is not an interface name",
            ),
            (r#"{"kind": "rps_cpus", "device": "..", "queue": 0, "value": "0"}"#, "is not an interface name"),
            (
                r#"{"kind": "rps_cpus", "device": "a very long name", "queue": 0, "value": "0"}"#,
                "is not an interface name",
            ),
            (r#"{"kind": "rps_cpus", "device": "eth0", "value": "0"}"#, "rps_cpus needs a queue"),
            (
                r#"{"kind": "rps_cpus", "device": "eth0", "queue": 0, "irq": 4, "value": "0"}"#,
                "rps_cpus takes no irq",
            ),
            (r#"{"kind": "rps_cpus", "device": "eth0", "queue": -1, "value": "0"}"#, "entry 1"),
            (r#"{"kind": "rps_cpus", "device": "eth0", "queue": 0, "value": "0-5"}"#, "not a CPU mask"),
            (
                r#"{"kind": "irq_affinity", "device": "eth0", "irq": 41, "value": "root:x:0:0"}"#,
                "not a CPU list",
            ),
            (r#"{"kind": "rps_flow_cnt", "device": "eth0", "queue": 0, "value": "1e9"}"#, "not a count"),
            (
                r#"{"kind": "hash_fields", "device": "eth0", "flow": "udp9", "value": "ip_src"}"#,
                "\"udp9\" is not a flow type",
            ),
            (r#"{"kind": "rss_key", "device": "eth0", "value": "6d5"}"#, "not an RSS key"),
        ];
        for (entry, want) in bad {
            let e = one(entry).expect_err(entry);
            assert_eq!(e.len(), 1, "{entry}: {e:?}");
            assert!(e[0].starts_with("entry 1"), "{entry}: {e:?}");
            assert!(e[0].contains(want), "{entry}: want {want} in {e:?}");
        }
        // Control characters from the file are escaped, never printed raw.
        let e = one("{\"kind\": \"\\u001b[2J\", \"value\": \"0\"}").unwrap_err();
        assert!(!e[0].contains('\u{1b}') && e[0].contains("\\u{1b}"), "{e:?}");
        // Every bad entry is named, the good ones are not.
        let good = r#"{"kind": "rps_cpus", "device": "eth0", "queue": 0, "value": "0"}"#;
        let e = parse_save(&format!(
            "{{\"version\": 2, \"saved_at\": 1, \"settings\": [{good}, {}, {good}]}}",
            r#"{"kind": "xps_cpus", "device": "eth0", "queue": 1, "value": "zz"}"#
        ))
        .unwrap_err();
        assert_eq!(e.len(), 2, "{e:?}");
        assert!(e[0].starts_with("entry 2 (xps_cpus eth0 queue 1): the value is not a CPU mask"), "{e:?}");
        assert!(e[1].starts_with("entry 3") && e[1].contains("same setting as an earlier entry"), "{e:?}");
        let ok = one(r#"{"kind": "rps_sock_flow_entries", "value": "32768"}"#).unwrap();
        assert_eq!(ok.settings[0].target, Target::RpsSockFlowEntries);
    }

    #[test]
    fn save_versions() {
        let v1 = r#"{"version": 1, "saved_at": 1, "settings": [{"device": "eth0", "what": "x", "kind": "count",
            "path": "/etc/passwd", "old": null, "new": "0"}]}"#;
        let e = parse_save(v1).unwrap_err();
        assert!(e[0].contains("version 1") && e[0].contains("no longer trusts"), "{e:?}");
        let e = parse_save(r#"{"version": 3, "saved_at": 1, "settings": []}"#).unwrap_err();
        assert!(e[0].contains("version 3 is not one this rsskit reads"), "{e:?}");
        let e = parse_save(r#"{"saved_at": 1, "settings": []}"#).unwrap_err();
        assert!(e[0].contains("no version"), "{e:?}");
        assert!(parse_save("root:x:0:0:root:/root:/bin/bash").is_err());
    }

    #[test]
    fn paths_come_from_targets_only() {
        let root = Sysroot::tree(Path::new("/t"));
        let p = file_of(&root, &Target::XpsCpus { device: "eth0".into(), queue: 2 }).unwrap();
        assert_eq!(p, Path::new("/t/sys/class/net/eth0/queues/tx-2/xps_cpus"));
        assert_eq!(
            file_of(&root, &Target::IrqAffinity { device: "eth0".into(), irq: 45 }).unwrap(),
            Path::new("/t/proc/irq/45/smp_affinity_list")
        );
        for bad in ["..", "../../etc", "a/b", "", "x y"] {
            assert!(file_of(&root, &Target::RpsCpus { device: bad.into(), queue: 0 }).is_none(), "{bad}");
        }
        assert!(file_of(&root, &Target::RssKey { device: "eth0".into() }).is_none());
    }

    /// Mutations of a valid save (the fuzz target's invariants, on inputs
    /// close to real ones): no panic; what is accepted has valid values and
    /// paths of a device's queue or an IRQ only; errors print safely.
    #[test]
    fn mutated_saves_never_escape() {
        let seed = save_text(&SaveFile {
            saved_at: 1,
            settings: vec![
                SavedValue { target: Target::RpsCpus { device: "eth0".into(), queue: 1 }, value: "3".into() },
                SavedValue {
                    target: Target::IrqAffinity { device: "eth0".into(), irq: 41 },
                    value: "0-2".into(),
                },
                SavedValue {
                    target: Target::HashFields { device: "eth0".into(), flow: "udp4" },
                    value: "ip_src,ip_dst".into(),
                },
                SavedValue { target: Target::RpsSockFlowEntries, value: "0".into() },
            ],
        });
        let root = Sysroot::tree(Path::new("/t"));
        let pieces: [&[u8]; 10] =
            [b"..", b"/", b"\\u001b", b"\"", b"path", b"-1", b"99999999999", b"kind", b",", b"\\u0000"];
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = |n: usize| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % n as u64) as usize
        };
        let (mut ok, mut bad) = (0, 0);
        for _ in 0..20_000 {
            let mut b = seed.clone().into_bytes();
            for _ in 0..1 + next(3) {
                let at = next(b.len());
                match next(3) {
                    0 => b[at] = b"0123456789abcdef.,/-\\"[next(21)],
                    1 => drop(b.splice(at..at, pieces[next(pieces.len())].iter().copied())),
                    _ => drop(b.remove(at)),
                }
            }
            let Ok(text) = std::str::from_utf8(&b) else { continue };
            match parse_save(text) {
                Ok(save) => {
                    ok += 1;
                    for e in &save.settings {
                        assert!(valid_value(e.target.kind(), &e.value).is_ok(), "{e:?}");
                        if let Some(p) = file_of(&root, &e.target) {
                            assert!(
                                p.components().all(|c| matches!(
                                    c,
                                    std::path::Component::RootDir | std::path::Component::Normal(_)
                                )),
                                "{p:?}"
                            );
                            assert!(
                                p.starts_with("/t/sys/class/net/")
                                    || p.starts_with("/t/proc/irq/")
                                    || p == Path::new("/t/proc/sys/net/core/rps_sock_flow_entries"),
                                "{p:?}"
                            );
                        }
                    }
                }
                Err(problems) => {
                    bad += 1;
                    assert!(problems.iter().all(|p| !p.chars().any(char::is_control)), "{problems:?}");
                }
            }
        }
        assert!(ok > 100 && bad > 100, "the mutations reach both sides: {ok} accepted, {bad} refused");
    }

    #[test]
    fn values_by_kind() {
        assert!(valid_value(Kind::CpuMask, "00000000,0000000f").is_ok());
        assert!(valid_value(Kind::CpuMask, &"0,".repeat(300)).is_err(), "more words than CPUs exist");
        assert!(valid_value(Kind::CpuList, "0-3,5").is_ok());
        assert!(valid_value(Kind::CpuList, "0-99999").is_err());
        assert!(valid_value(Kind::Count, "32768").is_ok());
        assert!(valid_value(Kind::Count, "-1").is_err());
        assert!(valid_value(Kind::RssTable, "0,1,2,3").is_ok());
        assert!(valid_value(Kind::RssTable, "0,,1").is_err());
        assert!(valid_value(Kind::RssKey, &"6d".repeat(40)).is_ok());
        assert!(valid_value(Kind::HashFields, "ip_src,ip_dst").is_ok());
        assert!(valid_value(Kind::HashFields, "").is_err());
    }
}
