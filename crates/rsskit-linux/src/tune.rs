//! Applying a [`Plan`]: every setting as one [`Setting`] (where, current
//! value, new value), the diff, the writes with a read-back of each, and
//! the save file that `--restore` writes back.
//!
//! Values are kept as the kernel's text (`rps_cpus` masks, CPU lists,
//! counts) or, for the ethtool settings, as hex (key) and a comma list
//! (table); comparisons parse them, so `0000000f` equals `f`.

use crate::cpulist;
use crate::netdev::parse_hex_mask;
use crate::plan::Plan;
use crate::sysroot::{DeviceState, Sysroot, SysrootError};
use serde::{Deserialize, Serialize};
use std::fs;
use std::io;
use std::path::PathBuf;

/// What a setting is, which says how to write and compare it.
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

/// One setting: a file under the sysroot, or an ethtool write on `device`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Setting {
    /// Interface, or `host` for global settings.
    pub device: String,
    /// What it is, for people: `rx-0 rps_cpus`, `IRQ 41 (eth0-TxRx-1) affinity`.
    pub what: String,
    /// How the value is read and written.
    pub kind: Kind,
    /// The file (for file settings), relative to nothing: as the sysroot
    /// gives it.
    pub path: Option<PathBuf>,
    /// The value now (`None`: unreadable).
    pub old: Option<String>,
    /// The value to write.
    pub new: String,
    /// The flow type of a [`Kind::HashFields`] setting.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flow: Option<String>,
}

impl Setting {
    /// Whether `new` is already in place.
    pub fn unchanged(&self) -> bool {
        self.old.as_deref().is_some_and(|o| same(self.kind, o, &self.new))
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

/// Errors that stop an apply before anything is written.
#[derive(Debug, thiserror::Error)]
pub enum TuneError {
    /// Reading or writing a setting through the sysroot failed.
    #[error(transparent)]
    Host(#[from] SysrootError),
    /// The save file could not be written.
    #[error("writing the save file {path}")]
    Save {
        /// The save file.
        path: PathBuf,
        /// The I/O error.
        source: io::Error,
    },
    /// A file (e.g. a save file) could not be read or parsed.
    #[error("reading {path}: {msg}")]
    Read {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        msg: String,
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
    crate::ethtool::rxh_from_names(&names)
}

fn hash_text(d: &crate::ethtool::Reported<Vec<crate::ethtool::FlowHash>>, flow: &str) -> Option<String> {
    d.ok()?.iter().find(|f| f.flow == flow).map(|f| f.fields.join(","))
}

fn read_file(p: &std::path::Path) -> Option<String> {
    fs::read_to_string(p).ok().map(|s| s.trim().to_string())
}

fn table_text(t: &[u32]) -> String {
    t.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Every setting of `plan` with its current value, read from `root`.
pub fn settings(root: &Sysroot, plan: &Plan) -> Result<Vec<Setting>, TuneError> {
    let mut out = Vec::new();
    for d in &plan.devices {
        let dev: DeviceState = root.device(&d.name)?;
        if dev.rx.len() != d.rx.len() || dev.tx.len() != d.tx.len() {
            return Err(TuneError::PlanMismatch {
                device: d.name.clone(),
                msg: format!(
                    "it has {} RX / {} TX queues now, the plan was made for {} / {}: plan again",
                    dev.rx.len(),
                    dev.tx.len(),
                    d.rx.len(),
                    d.tx.len()
                ),
            });
        }
        let file = |what: String, kind, path: PathBuf, new: String| Setting {
            device: d.name.clone(),
            what,
            kind,
            old: read_file(&path),
            path: Some(path),
            new,
            flow: None,
        };
        // Hashed fields before key and table: virtio_net (6.1) sends its
        // hash types to the device only with the RSS command of ETHTOOL_SRSSH,
        // so fields written after the table would read back while the device
        // still hashes the old ones (seen in the QEMU lab, tests/lab.rs).
        for h in &d.hash_fields {
            out.push(Setting {
                device: d.name.clone(),
                what: format!("{} hashed fields", h.flow),
                kind: Kind::HashFields,
                path: None,
                old: hash_text(&dev.hash, &h.flow),
                new: h.fields.join(","),
                flow: Some(h.flow.clone()),
            });
        }
        let cur_rss = dev.rss.ok();
        if let Some(t) = &d.table {
            out.push(Setting {
                device: d.name.clone(),
                what: "RSS indirection table".into(),
                kind: Kind::RssTable,
                path: None,
                old: cur_rss.filter(|r| !r.indir.is_empty()).map(|r| table_text(&r.indir)),
                new: table_text(t),
                flow: None,
            });
        }
        if let Some(k) = &d.key {
            out.push(Setting {
                device: d.name.clone(),
                what: "RSS key".into(),
                kind: Kind::RssKey,
                path: None,
                old: cur_rss.filter(|r| !r.key.is_empty()).map(|r| hex(&r.key)),
                new: k.clone(),
                flow: None,
            });
        }
        for x in &d.irqs {
            out.push(file(
                format!("IRQ {} ({}) affinity", x.irq, x.name),
                Kind::CpuList,
                root.irq_affinity_path(x.irq),
                cpulist::format(&x.cpus),
            ));
        }
        for q in &d.rx {
            out.push(file(
                format!("rx-{} rps_cpus", q.queue),
                Kind::CpuMask,
                root.queue_path(&d.name, "rx", q.queue, "rps_cpus"),
                crate::netdev::format_hex_mask(&q.rps_cpus),
            ));
            if let Some(n) = q.rps_flow_cnt {
                out.push(file(
                    format!("rx-{} rps_flow_cnt", q.queue),
                    Kind::Count,
                    root.queue_path(&d.name, "rx", q.queue, "rps_flow_cnt"),
                    n.to_string(),
                ));
            }
        }
        for q in &d.tx {
            if let Some(x) = &q.xps_cpus {
                out.push(file(
                    format!("tx-{} xps_cpus", q.queue),
                    Kind::CpuMask,
                    root.queue_path(&d.name, "tx", q.queue, "xps_cpus"),
                    crate::netdev::format_hex_mask(x),
                ));
            }
        }
    }
    if let Some(n) = plan.rps_sock_flow_entries {
        let path = root.sock_flow_entries_path();
        out.push(Setting {
            device: "host".into(),
            what: "net.core.rps_sock_flow_entries".into(),
            kind: Kind::Count,
            old: read_file(&path),
            path: Some(path),
            new: n.to_string(),
            flow: None,
        });
    }
    Ok(out)
}

/// The save file: what `apply` replaced, for `--restore`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SaveFile {
    /// Save file format version.
    pub version: u32,
    /// Seconds since the epoch.
    pub saved_at: u64,
    /// The settings with `new` = the value to put back.
    pub settings: Vec<Setting>,
}

/// What to save before applying `changes`: each with its old value as the
/// value to restore. Settings whose old value is unreadable cannot be
/// restored and are left out (the caller reports them).
pub fn save_of(changes: &[Setting], now: u64) -> SaveFile {
    let settings = changes
        .iter()
        .filter_map(|s| Some(Setting { old: Some(s.new.clone()), new: s.old.clone()?, ..s.clone() }))
        .collect();
    SaveFile { version: 1, saved_at: now, settings }
}

/// Writes a save file; fails when it cannot (then nothing is applied).
pub fn write_save(path: &std::path::Path, save: &SaveFile) -> Result<(), TuneError> {
    let text = serde_json::to_string_pretty(save).expect("plain data");
    fs::write(path, text + "\n").map_err(|source| TuneError::Save { path: path.to_path_buf(), source })
}

/// Reads and parses a save file; [`TuneError::Read`] if unreadable or not valid JSON for [`SaveFile`].
pub fn read_save(path: &std::path::Path) -> Result<SaveFile, TuneError> {
    let text = fs::read_to_string(path)
        .map_err(|e| TuneError::Read { path: path.to_path_buf(), msg: e.to_string() })?;
    serde_json::from_str(&text).map_err(|e| TuneError::Read {
        path: path.to_path_buf(),
        msg: format!("not an rsskit save file: {e}"),
    })
}

/// The current value of a setting (re-read).
pub fn current(root: &Sysroot, s: &Setting) -> Result<Option<String>, TuneError> {
    Ok(match s.kind {
        Kind::RssTable | Kind::RssKey => {
            let r = root.rss(&s.device)?;
            r.ok().map(|r| if s.kind == Kind::RssTable { table_text(&r.indir) } else { hex(&r.key) })
        }
        Kind::HashFields => hash_text(&root.device(&s.device)?.hash, s.flow.as_deref().unwrap_or("")),
        _ => s.path.as_deref().and_then(read_file),
    })
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
    let why = match (s.kind, errno) {
        (Kind::CpuList, Some(libc::EIO)) => {
            " (the kernel manages this IRQ's affinity: a managed interrupt, set by the driver per CPU)"
        }
        (Kind::CpuList, Some(libc::EINVAL)) => " (no CPU of the list can take this IRQ)",
        (Kind::CpuMask, Some(libc::EINVAL)) => {
            " (the kernel refuses this mask here, e.g. XPS on a single-queue device)"
        }
        (_, Some(libc::ENOENT)) => {
            " (the kernel has no such setting: built without RPS/XPS, or the queue is gone)"
        }
        (_, Some(libc::EPERM | libc::EACCES)) => " (not permitted: run as root)",
        _ => "",
    };
    format!("write failed: {e}{why}")
}

/// Writes one setting and reads it back.
pub fn write_one(root: &Sysroot, s: &Setting) -> Result<Outcome, TuneError> {
    match s.kind {
        Kind::RssTable | Kind::RssKey => {
            let r = if s.kind == Kind::RssTable {
                let t: Result<Vec<u32>, _> = s.new.split(',').map(|x| x.trim().parse::<u32>()).collect();
                let Ok(t) = t else {
                    return Ok(Outcome::Refused {
                        reason: format!("'{}' is not a table of ring numbers", s.new),
                    });
                };
                root.set_rss(&s.device, Some(&t), None)?
            } else {
                let k: Option<Vec<u8>> = (0..s.new.len())
                    .step_by(2)
                    .map(|i| u8::from_str_radix(s.new.get(i..i + 2)?, 16).ok())
                    .collect();
                let Some(k) = k.filter(|_| s.new.len().is_multiple_of(2)) else {
                    return Ok(Outcome::Refused { reason: format!("'{}' is not a hex key", s.new) });
                };
                root.set_rss(&s.device, None, Some(&k))?
            };
            if let Some(reason) = r.reason() {
                return Ok(Outcome::Refused { reason: reason.to_string() });
            }
        }
        Kind::HashFields => {
            let (Some(flow), Ok(raw)) = (s.flow.as_deref(), fields_mask(&s.new)) else {
                return Ok(Outcome::Refused {
                    reason: format!("'{}' is not a list of hashed fields", s.new),
                });
            };
            if let Some(reason) = root.set_flow_hash(&s.device, flow, raw)?.reason() {
                return Ok(Outcome::Refused { reason: reason.to_string() });
            }
        }
        _ => {
            let path = s.path.as_deref().expect("file settings have a path");
            if let Err(e) = fs::write(path, format!("{}\n", s.new)) {
                return Ok(Outcome::Refused { reason: write_reason(s, &e) });
            }
        }
    }
    let back = current(root, s)?;
    Ok(match back {
        Some(b) if same(s.kind, &b, &s.new) => Outcome::Applied,
        Some(b) => Outcome::Changed {
            reason: match s.kind {
                Kind::Count => "the kernel rounds RFS sizes up to a power of two".into(),
                Kind::CpuList => "the kernel or irqbalance changed the IRQ's CPUs".into(),
                _ => "the kernel stored another value".into(),
            },
            read_back: b,
        },
        None => {
            Outcome::Changed { read_back: "(unreadable)".into(), reason: "cannot read the value back".into() }
        }
    })
}

/// Seconds since the epoch as `YYYYmmddTHHMMSSZ` (UTC), for save file names.
pub fn utc_stamp(secs: u64) -> String {
    let t = crate::clock::utc(secs);
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

    #[test]
    fn refusal_reasons() {
        let s = Setting {
            device: "eth0".into(),
            what: "IRQ 41 (eth0-TxRx-1) affinity".into(),
            kind: Kind::CpuList,
            path: Some("/proc/irq/41/smp_affinity_list".into()),
            old: Some("0-5".into()),
            new: "3".into(),
            flow: None,
        };
        let r = write_reason(&s, &io::Error::from_raw_os_error(libc::EIO));
        assert!(r.contains("managed interrupt"), "{r}");
        let x = Setting { kind: Kind::CpuMask, ..s };
        let r = write_reason(&x, &io::Error::from_raw_os_error(libc::EINVAL));
        assert!(r.contains("refuses this mask"), "{r}");
        let r = write_reason(&x, &io::Error::from_raw_os_error(libc::ENOENT));
        assert!(r.contains("no such setting"), "{r}");
    }

    #[test]
    fn stamps() {
        assert_eq!(utc_stamp(0), "19700101T000000Z");
        assert_eq!(utc_stamp(951_782_400 + 3661), "20000229T010101Z");
        assert_eq!(utc_stamp(1_798_070_400), "20261224T000000Z");
    }

    #[test]
    fn save_swaps_old_and_new() {
        let s = Setting {
            device: "eth0".into(),
            what: "rx-0 rps_cpus".into(),
            kind: Kind::CpuMask,
            path: Some("/x".into()),
            old: Some("00000000".into()),
            new: "00000003".into(),
            flow: None,
        };
        let unreadable = Setting { old: None, ..s.clone() };
        let f = save_of(&[s, unreadable], 7);
        assert_eq!(f.settings.len(), 1);
        assert_eq!(f.settings[0].new, "00000000");
        assert_eq!(f.settings[0].old.as_deref(), Some("00000003"));
    }
}
