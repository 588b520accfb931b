//! The host side: reading a setting's value and writing it with a
//! read-back through the [`Sysroot`] (never through a symlink), and the
//! save files on disk.

use super::save::{parse_save, save_text, SaveFile, MAX_SAVE_BYTES};
use super::setting::{
    coalesce_over, coalesce_text, fields_mask, hex, same, table_text, valid_value, Kind, Setting, Target,
};
// symplan
use super::setting::{input_xfrm_bits, input_xfrm_text};
use crate::sysroot::{DeviceState, Sysroot, SysrootError};
use rsskit_linux::netdev::valid_name;
use serde::Serialize;
use std::fs;
use std::io::{self, Read as _, Write as _};
use std::os::unix::fs::{DirBuilderExt as _, MetadataExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};

/// Errors that stop an apply or a restore before anything is written.
#[derive(Debug, thiserror::Error)]
pub enum TuneError {
    /// Reading or writing a setting through the sysroot failed.
    #[error(transparent)]
    Host(#[from] SysrootError),
    /// The save file (or its directory) is not one rsskit will write.
    #[error("writing the save file {path}: {msg}")]
    Save {
        /// The save file.
        path: PathBuf,
        /// What is wrong with it.
        msg: String,
    },
    /// The save file (or its directory) could not be written.
    #[error("writing the save file {path}: {source}")]
    SaveIo {
        /// The save file or directory.
        path: PathBuf,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// A file could not be read.
    #[error("reading {path}: {source}")]
    ReadIo {
        /// The file.
        path: PathBuf,
        /// The error.
        #[source]
        source: io::Error,
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
        | Target::Channels { .. }
        | Target::NapiThreadCpus { .. } => None,
        // nicres: ethtool settings.
        Target::RxRing { .. } | Target::TxRing { .. } | Target::Coalesce { .. } => None,
        // symplan: an ethtool setting.
        Target::InputXfrm { .. } => None,
        Target::IrqAffinity { irq, .. } => Some(root.irq_affinity_path(*irq)),
        Target::RpsCpus { device, queue } => Some(root.queue_path(device, "rx", *queue as usize, "rps_cpus")),
        Target::RpsFlowCnt { device, queue } => {
            Some(root.queue_path(device, "rx", *queue as usize, "rps_flow_cnt"))
        }
        Target::XpsCpus { device, queue } => Some(root.queue_path(device, "tx", *queue as usize, "xps_cpus")),
        Target::RpsSockFlowEntries => Some(root.sock_flow_entries_path()),
        Target::NapiThreaded { device } => Some(root.napi_threaded_path(device)),
        // napi:
        Target::NapiDeferHardIrqs { device } => Some(root.iface_path(device, "napi_defer_hard_irqs")),
        Target::GroFlushTimeout { device } => Some(root.iface_path(device, "gro_flush_timeout")),
    }
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

/// Makes `dir` the save directory: created with mode 0700 when missing;
/// an existing one must be a real directory (not a symlink) owned by this
/// user and writable by no one else, or it is refused.
pub fn prepare_save_dir(dir: &Path) -> Result<(), TuneError> {
    let err = |msg: String| TuneError::Save { path: dir.to_path_buf(), msg };
    let io_err = |source| TuneError::SaveIo { path: dir.to_path_buf(), source };
    match fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => return Ok(()),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            // Parents (e.g. a test tree's var/lib) as usual, the last 0700.
            fs::create_dir_all(dir.parent().unwrap_or(dir)).map_err(io_err)?;
            return fs::DirBuilder::new().mode(0o700).create(dir).map_err(io_err);
        }
        Err(e) => return Err(io_err(e)),
    }
    let m = fs::symlink_metadata(dir).map_err(io_err)?;
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
    let io_err = |source| TuneError::SaveIo { path: path.to_path_buf(), source };
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| match e.kind() {
            io::ErrorKind::AlreadyExists => TuneError::Save {
                path: path.to_path_buf(),
                msg: "it exists: an earlier save is never overwritten; name another save file".into(),
            },
            _ => io_err(e),
        })?;
    if let Err(e) = f.write_all(save_text(save).as_bytes()).and_then(|()| f.sync_all()) {
        let _ = fs::remove_file(path);
        return Err(io_err(e));
    }
    Ok(())
}

// nicres
/// Replaces save file `path` (written by [`write_save`] in this run) with
/// `save`: a new 0600 file beside it, flushed, renamed over it. Used when
/// a channel change adds settings to the save after the first writes.
pub fn rewrite_save(path: &Path, save: &SaveFile) -> Result<(), TuneError> {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("save");
    let tmp = path.with_file_name(format!(".{name}.tmp{}", std::process::id()));
    let _ = fs::remove_file(&tmp);
    write_save(&tmp, save)?;
    fs::rename(&tmp, path).map_err(|source| TuneError::SaveIo { path: path.to_path_buf(), source })
}

/// Reads, parses and validates a save file ([`parse_save`]); at most
/// [`MAX_SAVE_BYTES`] are read.
pub fn read_save(path: &Path) -> Result<SaveFile, TuneError> {
    let read_err = |msg: String| TuneError::Read { path: path.to_path_buf(), msg };
    // Root's and writable by no one else (like the save directory), and
    // never a FIFO to block on; the size is judged below.
    let f = crate::trusted::open(path, u64::MAX)?;
    let mut text = String::new();
    f.take(MAX_SAVE_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(|source| TuneError::ReadIo { path: path.to_path_buf(), source })?;
    if text.len() as u64 > MAX_SAVE_BYTES {
        return Err(read_err(format!("larger than {MAX_SAVE_BYTES} bytes: not an rsskit save file")));
    }
    parse_save(&text).map_err(|problems| TuneError::BadSave { path: path.to_path_buf(), problems })
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
        Target::NapiThreadCpus { device, napi_id } => root.napi_thread_cpus(device, *napi_id),
        // nicres
        Target::RxRing { device } => root.rings(device)?.ok().map(|r| r.rx.to_string()),
        Target::TxRing { device } => root.rings(device)?.ok().map(|r| r.tx.to_string()),
        Target::Coalesce { device } => root.coalesce(device)?.ok().map(coalesce_text),
        Target::Channels { device } => {
            root.device(device)?.channels.ok().map(|c| c.combined_count.to_string())
        }
        // symplan
        Target::InputXfrm { device } => root.rss(device)?.ok().and_then(|r| input_xfrm_text(&r.input_xfrm)),
        t => file_of(root, t).and_then(|p| read_value(&p, t.kind())),
    })
}

/// The current value from an already read device state (files re-read).
pub(super) fn current_with(root: &Sysroot, dev: Option<&DeviceState>, t: &Target) -> Option<String> {
    match (t, dev) {
        (Target::RssTable { .. }, Some(d)) => {
            d.rss.ok().filter(|r| !r.indir.is_empty()).map(|r| table_text(&r.indir))
        }
        (Target::RssKey { .. }, Some(d)) => d.rss.ok().filter(|r| !r.key.is_empty()).map(|r| hex(&r.key)),
        (Target::HashFields { flow, .. }, Some(d)) => hash_text(&d.hash, flow),
        (Target::NapiThreadCpus { device, napi_id }, _) => root.napi_thread_cpus(device, *napi_id),
        // nicres
        (Target::RxRing { .. }, Some(d)) => d.rings.ok().map(|r| r.rx.to_string()),
        (Target::TxRing { .. }, Some(d)) => d.rings.ok().map(|r| r.tx.to_string()),
        (Target::Coalesce { .. }, Some(d)) => d.coalesce.ok().map(coalesce_text),
        (Target::Channels { .. }, Some(d)) => d.channels.ok().map(|c| c.combined_count.to_string()),
        // symplan
        (Target::InputXfrm { .. }, Some(d)) => d.rss.ok().and_then(|r| input_xfrm_text(&r.input_xfrm)),
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
        Target::NapiThreadCpus { device, napi_id } => {
            let cpus = rsskit_linux::cpulist::parse(&s.new).unwrap_or_default();
            root.set_napi_thread_cpus(device, *napi_id, &cpus)?
        }
        // nicres: one ring written, the other as the driver has it now.
        Target::RxRing { device } | Target::TxRing { device } => {
            let n: u32 = match s.new.parse() {
                Ok(n) if n > 0 => n,
                _ => return Ok(Outcome::Refused { reason: "a ring size is a number above 0".into() }),
            };
            match root.rings(device)? {
                rsskit_linux::ethtool::Reported::Supported(r) => match s.target {
                    Target::RxRing { .. } => root.set_rings(device, n, r.tx)?,
                    _ => root.set_rings(device, r.rx, n)?,
                },
                rsskit_linux::ethtool::Reported::Unsupported { reason } => {
                    return Ok(Outcome::Refused { reason })
                }
            }
        }
        Target::Channels { device } => match s.new.parse::<u32>() {
            Ok(n) if n > 0 => root.set_combined_channels(device, n)?,
            _ => return Ok(Outcome::Refused { reason: "a channel count is a number above 0".into() }),
        },
        Target::Coalesce { device } => match root.coalesce(device)? {
            rsskit_linux::ethtool::Reported::Supported(c) => match coalesce_over(&c, &s.new) {
                Ok(c) => root.set_coalesce(device, &c)?,
                Err(why) => return Ok(Outcome::Refused { reason: format!("the value is {why}") }),
            },
            rsskit_linux::ethtool::Reported::Unsupported { reason } => {
                return Ok(Outcome::Refused { reason })
            }
        },
        // symplan: the transform alone (table and key untouched).
        Target::InputXfrm { device } => match input_xfrm_bits(&s.new) {
            Some(bits) => root.set_input_xfrm(device, bits)?,
            None => return Ok(Outcome::Refused { reason: "not an input transform".into() }),
        },
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
                Kind::Count if matches!(s.target, Target::NapiThreaded { .. }) => {
                    "the kernel kept threaded NAPI as it was".into()
                }
                // nicres
                Kind::Count if matches!(s.target, Target::RxRing { .. } | Target::TxRing { .. }) => {
                    "the driver rounded the ring size (it takes only sizes of its own step)".into()
                }
                Kind::Coalesce => "the driver keeps other coalescing values (its own limits or steps)".into(),
                Kind::Count if matches!(s.target, Target::Channels { .. }) => {
                    "the driver kept another channel count".into()
                }
                Kind::Count => "the kernel rounds RFS sizes up to a power of two".into(),
                Kind::CpuList if matches!(s.target, Target::NapiThreadCpus { .. }) => {
                    "the kernel kept the thread on other CPUs".into()
                }
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
    use crate::tune::setting::tests::rps;

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
}
