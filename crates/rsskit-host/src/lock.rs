//! One writer at a time: `apply`, `apply --restore`, `persist` and the
//! agent take an exclusive `flock` on `/run/rsskit.lock` (under `--root`
//! for fixtures) before they write host settings. A second writer waits a
//! bounded time, then refuses naming the holder (pid and command, which the
//! holder writes into the lock file, or `/proc/locks` when it wrote none).
//!
//! The file is root's alone (0600, and an existing one is refused unless
//! this user owns it): `flock` needs only a read-only descriptor, so a lock
//! file anyone could open is a lock anyone could hold, stalling every apply
//! and every check of the agent.
//!
//! `flock` locks belong to the open file description, so two opens in one
//! process exclude each other too (the unit test relies on that), and the
//! kernel drops the lock when the holder dies: no stale locks.

use std::fs::{File, OpenOptions};
use std::io::{self, Read as _, Seek as _, Write as _};
use std::os::unix::fs::{MetadataExt as _, OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The lock file, relative to the root (`/` on a live host).
pub const LOCK_PATH: &str = "run/rsskit.lock";

/// Why the lock was not taken.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// Another writer held it for the whole wait.
    #[error("another rsskit writer holds {path} ({holder}); waited {waited:?}: try again when it is done, or wait longer")]
    Busy {
        /// The lock file.
        path: PathBuf,
        /// What the holder wrote: `pid N: COMMAND`, sanitised.
        holder: String,
        /// How long this writer waited.
        waited: Duration,
    },
    /// The wait was given up because the caller is stopping (a signal).
    #[error("gave up waiting for {path}: stopping")]
    Stopped {
        /// The lock file.
        path: PathBuf,
    },
    /// Something other than rsskit's own lock file is at the lock path.
    #[error("{path}: {why}; remove it (rsskit creates its lock file itself, mode 0600)")]
    Untrusted {
        /// The lock file.
        path: PathBuf,
        /// What is wrong with it.
        why: String,
    },
    /// The lock file could not be opened or locked.
    #[error("locking {path}: {source}")]
    Io {
        /// The lock file.
        path: PathBuf,
        /// The error.
        source: io::Error,
    },
}

/// A held lock; released when dropped (closing the file releases `flock`).
#[derive(Debug)]
pub struct HostLock {
    file: File,
    path: PathBuf,
}

impl HostLock {
    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for HostLock {
    fn drop(&mut self) {
        // Leave no stale holder text behind; the lock itself goes with the fd.
        let _ = self.file.set_len(0);
    }
}

/// The lock path under `root`.
pub fn lock_path(root: &Path) -> PathBuf {
    root.join(LOCK_PATH)
}

/// What a waiter is told when the holder wrote nothing and `/proc/locks`
/// does not name it either.
const UNKNOWN: &str = "holder unknown";

/// Holder text as read from the file: untrusted, so bounded and stripped
/// of control characters before it is shown.
fn sanitise(raw: &[u8]) -> String {
    let s: String = String::from_utf8_lossy(raw).chars().filter(|c| !c.is_control()).take(200).collect();
    if s.trim().is_empty() {
        UNKNOWN.into()
    } else {
        s.trim().to_string()
    }
}

/// Takes the lock at `root/run/rsskit.lock`, waiting at most `wait`;
/// `command` is what the holder says it is doing (shown to a waiter).
pub fn acquire(root: &Path, wait: Duration, command: &str) -> Result<HostLock, LockError> {
    acquire_unless(root, wait, command, &|| false)
}

/// Opens (creating it 0600) the lock file, refusing anything that is not a
/// regular file this user owns; an older rsskit's 0644 file is tightened.
fn open_lock(path: &Path) -> Result<File, LockError> {
    let io_err = |source| LockError::Io { path: path.to_path_buf(), source };
    let untrusted = |why: String| LockError::Untrusted { path: path.to_path_buf(), why };
    // O_NOFOLLOW: a symlink planted at the lock path is refused, not
    // followed; O_NONBLOCK: a FIFO there does not block the open.
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => untrusted("a symlink".into()),
            _ => io_err(e),
        })?;
    let m = file.metadata().map_err(io_err)?;
    if !m.file_type().is_file() {
        return Err(untrusted("not a regular file".into()));
    }
    let me = rsskit_linux::process::effective_uid();
    if m.uid() != me {
        return Err(untrusted(format!("owned by uid {}, not by this user ({me})", m.uid())));
    }
    if m.mode() & 0o077 != 0 {
        file.set_permissions(std::fs::Permissions::from_mode(0o600)).map_err(io_err)?;
    }
    Ok(file)
}

/// [`acquire`], giving up early (with [`LockError::Stopped`]) as soon as
/// `stop()` says so: a stopping agent does not sit out the whole wait.
pub fn acquire_unless(
    root: &Path,
    wait: Duration,
    command: &str,
    stop: &dyn Fn() -> bool,
) -> Result<HostLock, LockError> {
    let path = lock_path(root);
    let io_err = |source| LockError::Io { path: path.clone(), source };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(io_err)?;
    }
    let mut file = open_lock(&path)?;
    let start = Instant::now();
    loop {
        if rsskit_linux::fs::try_lock_exclusive(&file).map_err(io_err)? {
            break;
        }
        if stop() {
            return Err(LockError::Stopped { path });
        }
        if start.elapsed() >= wait {
            let mut raw = Vec::new();
            let _ = (&file).take(4096).read_to_end(&mut raw);
            let mut holder = sanitise(&raw);
            if holder == UNKNOWN {
                holder = rsskit_linux::fs::lock_holder(&file).unwrap_or(holder);
            }
            return Err(LockError::Busy { path, holder, waited: start.elapsed() });
        }
        std::thread::sleep(Duration::from_millis(50).min(wait.saturating_sub(start.elapsed())));
    }
    let holder = format!("pid {}: {}", std::process::id(), sanitise(command.as_bytes()));
    file.set_len(0).map_err(io_err)?;
    file.rewind().map_err(io_err)?;
    file.write_all(holder.as_bytes()).map_err(io_err)?;
    Ok(HostLock { file, path })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    fn tmp(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("rsskit-lock-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn a_second_writer_is_refused_naming_the_holder() {
        let root = tmp("busy");
        let held = acquire(&root, Duration::ZERO, "rsskit apply plan.json").unwrap();
        let e = acquire(&root, Duration::from_millis(120), "rsskit agent").unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains(&format!("pid {}: rsskit apply plan.json", std::process::id())), "{msg}");
        assert!(matches!(e, LockError::Busy { waited, .. } if waited >= Duration::from_millis(120)));
        drop(held);
        let again = acquire(&root, Duration::ZERO, "rsskit agent").unwrap();
        assert_eq!(
            std::fs::read_to_string(again.path()).unwrap(),
            format!("pid {}: rsskit agent", std::process::id())
        );
        drop(again);
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn concurrent_writers_are_serialised() {
        let root = tmp("serial");
        let inside = Arc::new(AtomicUsize::new(0));
        let overlaps = Arc::new(AtomicUsize::new(0));
        let done = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..4)
            .map(|i| {
                let (root, inside, overlaps, done) =
                    (root.clone(), inside.clone(), overlaps.clone(), done.clone());
                std::thread::spawn(move || {
                    for _ in 0..5 {
                        let _l = acquire(&root, Duration::from_secs(30), &format!("writer {i}")).unwrap();
                        if inside.fetch_add(1, Ordering::SeqCst) != 0 {
                            overlaps.fetch_add(1, Ordering::SeqCst);
                        }
                        std::thread::sleep(Duration::from_millis(5));
                        inside.fetch_sub(1, Ordering::SeqCst);
                        done.fetch_add(1, Ordering::SeqCst);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(done.load(Ordering::SeqCst), 20);
        assert_eq!(overlaps.load(Ordering::SeqCst), 0, "two writers were inside at once");
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn a_symlink_or_fifo_at_the_lock_path_is_refused() {
        let root = tmp("link");
        std::fs::create_dir_all(root.join("run")).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", root.join(LOCK_PATH)).unwrap();
        assert!(matches!(acquire(&root, Duration::ZERO, "x"), Err(LockError::Untrusted { .. })));
        std::fs::remove_file(root.join(LOCK_PATH)).unwrap();
        assert!(std::process::Command::new("mkfifo").arg(root.join(LOCK_PATH)).status().unwrap().success());
        let e = acquire(&root, Duration::ZERO, "x").unwrap_err();
        assert!(e.to_string().contains("not a regular file"), "{e}");
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn the_lock_file_is_private() {
        let root = tmp("mode");
        std::fs::create_dir_all(root.join("run")).unwrap();
        // An older rsskit's lock file, readable by all: tightened.
        std::fs::write(root.join(LOCK_PATH), "").unwrap();
        std::fs::set_permissions(root.join(LOCK_PATH), std::fs::Permissions::from_mode(0o644)).unwrap();
        let l = acquire(&root, Duration::ZERO, "x").unwrap();
        let mode = std::fs::metadata(l.path()).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        drop(l);
        if rsskit_linux::process::effective_uid() == 0 {
            // One planted by another user is refused, not used.
            std::os::unix::fs::chown(root.join(LOCK_PATH), Some(65534), None).unwrap();
            let e = acquire(&root, Duration::ZERO, "x").unwrap_err();
            assert!(e.to_string().contains("owned by uid 65534"), "{e}");
        }
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn a_holder_that_wrote_nothing_is_found_in_proc_locks() {
        let root = tmp("anon");
        let held = acquire(&root, Duration::ZERO, "x").unwrap();
        // Another descriptor of this process, holding it without a word.
        held.file.set_len(0).unwrap();
        let e = acquire(&root, Duration::ZERO, "y").unwrap_err();
        assert!(e.to_string().contains(&format!("(pid {} (", std::process::id())), "{e}");
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn a_stopping_waiter_gives_up_at_once() {
        let root = tmp("stop");
        let _held = acquire(&root, Duration::ZERO, "x").unwrap();
        let t = Instant::now();
        let e = acquire_unless(&root, Duration::from_secs(30), "y", &|| true).unwrap_err();
        assert!(matches!(e, LockError::Stopped { .. }), "{e}");
        assert!(t.elapsed() < Duration::from_secs(5));
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn holder_text_is_sanitised() {
        assert_eq!(sanitise(b"pid 1: a\x1b[2Jb\n"), "pid 1: a[2Jb");
        assert_eq!(sanitise(b""), "holder unknown");
    }
}
