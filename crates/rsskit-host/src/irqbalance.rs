//! Living with irqbalance: it leaves an IRQ alone only when banned, so
//! rsskit adds `--banirq=N` for each IRQ it pins to irqbalance's own options
//! file (Debian `/etc/default/irqbalance`, RHEL `/etc/sysconfig/irqbalance`),
//! records exactly what it added (`/etc/rsskit/irqbalance.json`), restarts
//! irqbalance through a [`Restarter`], and takes away exactly that on
//! `persist remove`. Text editing is pure ([`add_bans`], [`remove_bans`]);
//! every path is derived from the root, never from a file.

use crate::persist::{write_atomic, PersistError};
use serde::{Deserialize, Serialize};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// irqbalance's options files, relative to the root, by distribution.
pub const OPTION_FILES: [(Distro, &str); 2] =
    [(Distro::Debian, "etc/default/irqbalance"), (Distro::Redhat, "etc/sysconfig/irqbalance")];
/// rsskit's record of the bans it added, relative to the root.
pub const RECORD: &str = "etc/rsskit/irqbalance.json";

/// Which options file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Distro {
    /// `/etc/default/irqbalance`.
    Debian,
    /// `/etc/sysconfig/irqbalance`.
    Redhat,
}

impl Distro {
    /// Its options file under `root`.
    pub fn path(self, root: &Path) -> PathBuf {
        root.join(OPTION_FILES.iter().find(|(d, _)| *d == self).expect("listed").1)
    }
}

/// What rsskit added, so that removal takes away exactly that.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Record {
    /// The options file edited.
    pub file: Option<Distro>,
    /// IRQs rsskit banned (not those banned before it came).
    pub added: Vec<u32>,
}

/// Why irqbalance was not restarted.
#[derive(Debug, thiserror::Error)]
pub enum RestartError {
    /// `systemctl` could not be run.
    #[error("running systemctl: {0}")]
    Spawn(#[source] io::Error),
    /// `systemctl` ran and failed; its own words.
    #[error("systemctl try-restart irqbalance.service failed: {0}")]
    Failed(String),
    /// Not the live host's own root, or no irqbalance running there.
    #[error("not restarted: irqbalance is not running here (or rsskit's files are under another root); it reads the bans when it starts")]
    NotHere,
}

/// Restarts irqbalance so it reads its options again.
pub trait Restarter {
    /// Restart it.
    fn restart(&mut self) -> Result<(), RestartError>;
}

/// The real one: `systemctl try-restart irqbalance.service` (restarts only
/// if it is running).
pub struct Systemctl;

impl Restarter for Systemctl {
    fn restart(&mut self) -> Result<(), RestartError> {
        let out = std::process::Command::new("systemctl")
            .args(["try-restart", "irqbalance.service"])
            .output()
            .map_err(RestartError::Spawn)?;
        if out.status.success() {
            Ok(())
        } else {
            Err(RestartError::Failed(String::from_utf8_lossy(&out.stderr).trim().to_string()))
        }
    }
}

/// What a ban or unban did, in words for the log.
#[derive(Debug)]
pub struct Change {
    /// The options file.
    pub file: PathBuf,
    /// IRQs added (ban) or removed (unban).
    pub irqs: Vec<u32>,
    /// `Ok` restarted, `Err` not, and why.
    pub restarted: Result<(), RestartError>,
}

/// What a ban or unban changed, as one line for a log or a terminal.
pub fn change_line(c: &Change, verb: &str) -> String {
    let irqs: Vec<String> = c.irqs.iter().map(u32::to_string).collect();
    let restarted = match &c.restarted {
        Ok(()) => "irqbalance restarted".to_string(),
        Err(e) => e.to_string(),
    };
    format!("irqbalance: {verb} --banirq for IRQs {} in {}; {restarted}", irqs.join(","), c.file.display())
}

/// The options file of this system under `root`, if irqbalance is installed.
pub fn options_file(root: &Path) -> Option<Distro> {
    OPTION_FILES.iter().find(|(_, rel)| root.join(rel).is_file()).map(|(d, _)| *d)
}

/// The value of the last `IRQBALANCE_ARGS=` line (quotes removed) and its line index.
fn args_line(text: &str) -> Option<(usize, String)> {
    text.lines()
        .enumerate()
        .filter_map(|(i, l)| {
            let v = l.trim_start().strip_prefix("IRQBALANCE_ARGS=")?;
            let v = v.trim();
            let v = v
                .strip_prefix('"')
                .and_then(|x| x.strip_suffix('"'))
                .or_else(|| v.strip_prefix('\'').and_then(|x| x.strip_suffix('\'')))
                .unwrap_or(v);
            Some((i, v.to_string()))
        })
        .last()
}

/// IRQs banned in the options text.
pub fn banned(text: &str) -> Vec<u32> {
    let args: Vec<String> =
        args_line(text).map(|(_, v)| v.split_whitespace().map(str::to_string).collect()).unwrap_or_default();
    crate::sysroot::banned_irqs(&args)
}

fn with_args(text: &str, args: &[String]) -> String {
    let line = format!("IRQBALANCE_ARGS=\"{}\"", args.join(" "));
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    match args_line(text) {
        Some((i, _)) => lines[i] = line,
        None => lines.push(line),
    }
    lines.join("\n") + "\n"
}

/// Adds `--banirq=N` for each IRQ not banned yet; returns the new text and
/// the IRQs added.
pub fn add_bans(text: &str, irqs: &[u32]) -> (String, Vec<u32>) {
    let have = banned(text);
    let mut add: Vec<u32> = irqs.iter().copied().filter(|i| !have.contains(i)).collect();
    add.sort_unstable();
    add.dedup();
    if add.is_empty() {
        return (text.to_string(), add);
    }
    let mut args: Vec<String> =
        args_line(text).map(|(_, v)| v.split_whitespace().map(str::to_string).collect()).unwrap_or_default();
    args.extend(add.iter().map(|i| format!("--banirq={i}")));
    (with_args(text, &args), add)
}

/// Removes the `--banirq=N` words for `irqs` (only that spelling: the one
/// rsskit writes); returns the new text and the IRQs removed.
pub fn remove_bans(text: &str, irqs: &[u32]) -> (String, Vec<u32>) {
    let Some((_, v)) = args_line(text) else { return (text.to_string(), Vec::new()) };
    let mut removed = Vec::new();
    let args: Vec<String> = v
        .split_whitespace()
        .filter(|w| match w.strip_prefix("--banirq=").and_then(|n| n.parse::<u32>().ok()) {
            Some(n) if irqs.contains(&n) => {
                removed.push(n);
                false
            }
            _ => true,
        })
        .map(str::to_string)
        .collect();
    if removed.is_empty() {
        return (text.to_string(), removed);
    }
    (with_args(text, &args), removed)
}

fn io_err(path: &Path) -> impl Fn(io::Error) -> PersistError + '_ {
    move |source| PersistError::Io { path: path.to_path_buf(), source }
}

/// Bound on the options file and the record (both a few lines).
const MAX_TEXT: u64 = 1 << 20;

/// Reads one of these files through [`crate::trusted`] (root's, writable by
/// no one else, never blocking); `None` when it does not exist.
fn read_trusted(path: &Path) -> Result<Option<String>, PersistError> {
    match crate::trusted::read_to_string(path, MAX_TEXT) {
        Ok(t) => Ok(Some(t)),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// The record under `root` (empty when none; refused when malformed).
pub fn read_record(root: &Path) -> Result<Record, PersistError> {
    let path = root.join(RECORD);
    match read_trusted(&path)? {
        Some(t) => serde_json::from_str(&t).map_err(|e| PersistError::Invalid { path, msg: e.to_string() }),
        None => Ok(Record::default()),
    }
}

/// Bans `irqs` in this system's options file, records what it added, and
/// restarts irqbalance when something changed. `None`: no options file
/// (irqbalance not installed) or nothing to add.
pub fn ban(root: &Path, irqs: &[u32], restarter: &mut dyn Restarter) -> Result<Option<Change>, PersistError> {
    let Some(distro) = options_file(root) else { return Ok(None) };
    let file = distro.path(root);
    let Some(text) = read_trusted(&file)? else { return Ok(None) };
    let (new, added) = add_bans(&text, irqs);
    if added.is_empty() {
        return Ok(None);
    }
    let mut rec = read_record(root)?;
    rec.file = Some(distro);
    rec.added.extend(&added);
    rec.added.sort_unstable();
    rec.added.dedup();
    // The record first: if the options write fails, removal finds nothing to take.
    write_atomic(
        &root.join(RECORD),
        &(serde_json::to_string_pretty(&rec).expect("plain data") + "\n"),
        0o644,
    )?;
    write_atomic(&file, &new, 0o644)?;
    Ok(Some(Change { file, irqs: added, restarted: restarter.restart() }))
}

/// Takes away exactly the bans rsskit recorded, then the record.
pub fn unban(root: &Path, restarter: &mut dyn Restarter) -> Result<Option<Change>, PersistError> {
    let rec = read_record(root)?;
    let Some(distro) = rec.file else { return Ok(None) };
    let file = distro.path(root);
    let rec_path = root.join(RECORD);
    let Some(text) = read_trusted(&file)? else {
        fs::remove_file(&rec_path).map_err(io_err(&rec_path))?;
        return Ok(None);
    };
    let (new, removed) = remove_bans(&text, &rec.added);
    if !removed.is_empty() {
        write_atomic(&file, &new, 0o644)?;
    }
    fs::remove_file(&rec_path).map_err(io_err(&rec_path))?;
    if removed.is_empty() {
        return Ok(None);
    }
    Ok(Some(Change { file, irqs: removed, restarted: restarter.restart() }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default)]
    struct Fake(usize);
    impl Restarter for Fake {
        fn restart(&mut self) -> Result<(), RestartError> {
            self.0 += 1;
            Ok(())
        }
    }

    const DEBIAN: &str = "# irqbalance options\n#IRQBALANCE_ARGS=\"\"\nIRQBALANCE_ONESHOT=0\n";

    #[test]
    fn text_edits() {
        let (t, a) = add_bans(DEBIAN, &[42, 41, 42]);
        assert_eq!(a, vec![41, 42]);
        assert!(t.ends_with("IRQBALANCE_ARGS=\"--banirq=41 --banirq=42\"\n"), "{t}");
        assert!(t.contains("#IRQBALANCE_ARGS=\"\""), "comments stay");
        assert_eq!(banned(&t), vec![41, 42]);
        let (t2, a2) = add_bans(&t, &[41]);
        assert!(a2.is_empty() && t2 == t);
        // Someone else's ban of 7 and -i 43 stay; ours go.
        let own = "IRQBALANCE_ARGS='--foreground -i 43 --banirq=7'\n";
        let (t, a) = add_bans(own, &[7, 43, 44]);
        assert_eq!(a, vec![44]);
        let (back, r) = remove_bans(&t, &a);
        assert_eq!(r, vec![44]);
        assert_eq!(banned(&back), vec![7, 43]);
    }

    #[test]
    fn ban_then_unban_restores_the_file_and_restarts_twice() {
        let root = std::env::temp_dir().join(format!("rsskit-irqb-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        let mut fake = Fake::default();
        assert!(ban(&root, &[1], &mut fake).unwrap().is_none(), "no irqbalance installed: nothing");
        fs::create_dir_all(root.join("etc/sysconfig")).unwrap();
        let orig = "IRQBALANCE_ARGS=\"--banirq=7\"\n";
        fs::write(root.join("etc/sysconfig/irqbalance"), orig).unwrap();
        let c = ban(&root, &[7, 100, 101], &mut fake).unwrap().unwrap();
        assert_eq!(c.irqs, vec![100, 101]);
        assert_eq!(c.file, root.join("etc/sysconfig/irqbalance"));
        assert_eq!(fake.0, 1);
        assert_eq!(read_record(&root).unwrap(), Record { file: Some(Distro::Redhat), added: vec![100, 101] });
        assert!(ban(&root, &[100], &mut fake).unwrap().is_none(), "already banned: no restart");
        assert_eq!(fake.0, 1);
        let c = unban(&root, &mut fake).unwrap().unwrap();
        assert_eq!(c.irqs, vec![100, 101]);
        assert_eq!(fake.0, 2);
        assert_eq!(
            fs::read_to_string(root.join("etc/sysconfig/irqbalance")).unwrap(),
            orig,
            "exactly what was there"
        );
        assert!(!root.join(RECORD).exists());
        assert!(unban(&root, &mut fake).unwrap().is_none());
        fs::remove_dir_all(&root).unwrap();
    }
}
