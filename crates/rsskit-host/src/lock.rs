//! One writer at a time: `apply`, `apply --restore`, `persist` and the
//! agent take an exclusive `flock` on `/run/rsskit.lock` (under `--root`
//! for fixtures) before they write host settings. A second writer waits a
//! bounded time, then refuses naming the holder (pid and command, which the
//! holder writes into the lock file).
//!
//! `flock` locks belong to the open file description, so two opens in one
//! process exclude each other too (the unit test relies on that), and the
//! kernel drops the lock when the holder dies: no stale locks.

use std::fs::{File, OpenOptions};
use std::io::{self, Read as _, Seek as _, Write as _};
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The lock file, relative to the root (`/` on a live host).
pub const LOCK_PATH: &str = "run/rsskit.lock";

/// Why the lock was not taken.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// Another writer held it for the whole wait.
    #[error("another rsskit writer holds {path} ({holder}); waited {waited:?}: try again when it is done, or give --lock-wait a longer time")]
    Busy {
        /// The lock file.
        path: PathBuf,
        /// What the holder wrote: `pid N: COMMAND`, sanitised.
        holder: String,
        /// How long this writer waited.
        waited: Duration,
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

/// Holder text as read from the file: untrusted, so bounded and stripped
/// of control characters before it is shown.
fn sanitise(raw: &[u8]) -> String {
    let s: String = String::from_utf8_lossy(raw).chars().filter(|c| !c.is_control()).take(200).collect();
    if s.trim().is_empty() {
        "holder unknown".into()
    } else {
        s.trim().to_string()
    }
}

/// Takes the lock at `root/run/rsskit.lock`, waiting at most `wait`;
/// `command` is what the holder says it is doing (shown to a waiter).
pub fn acquire(root: &Path, wait: Duration, command: &str) -> Result<HostLock, LockError> {
    let path = lock_path(root);
    let io_err = |source| LockError::Io { path: path.clone(), source };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(io_err)?;
    }
    // O_NOFOLLOW: a symlink planted at the lock path is refused, not followed.
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o644)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&path)
        .map_err(io_err)?;
    let start = Instant::now();
    loop {
        if rsskit_linux::fs::try_lock_exclusive(&file).map_err(io_err)? {
            break;
        }
        if start.elapsed() >= wait {
            let mut raw = Vec::new();
            let _ = (&file).take(4096).read_to_end(&mut raw);
            return Err(LockError::Busy { path, holder: sanitise(&raw), waited: start.elapsed() });
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
    fn a_symlink_at_the_lock_path_is_refused() {
        let root = tmp("link");
        std::fs::create_dir_all(root.join("run")).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", root.join(LOCK_PATH)).unwrap();
        assert!(matches!(acquire(&root, Duration::ZERO, "x"), Err(LockError::Io { .. })));
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn holder_text_is_sanitised() {
        assert_eq!(sanitise(b"pid 1: a\x1b[2Jb\n"), "pid 1: a[2Jb");
        assert_eq!(sanitise(b""), "holder unknown");
    }
}
