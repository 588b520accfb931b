//! The fake host tree (`tests/fixtures/host6cpu`: `/sys` and `/proc` of a
//! 6-CPU, 2-node machine with a 4-queue NIC, plus its ethtool answers),
//! copied per test so tests can edit and write it.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

/// The fixture tree in the repository (never written).
pub const FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/host6cpu");

/// Copies the directory tree `from` to `to`.
pub fn copy_dir(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for e in fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let dst = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &dst);
        } else {
            fs::copy(e.path(), &dst).unwrap();
        }
    }
}

/// A temp copy of the fixture, removed on drop.
pub struct HostTree(pub PathBuf);

impl HostTree {
    /// A fresh copy named after `tag` (unique per process and call).
    pub fn new(tag: &str) -> HostTree {
        static SEQ: AtomicU32 = AtomicU32::new(0);
        let n = SEQ.fetch_add(1, Ordering::Relaxed);
        let d = std::env::temp_dir().join(format!("rsskit-host-{tag}-{}-{n}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        copy_dir(Path::new(FIXTURE), &d);
        HostTree(d)
    }
}

impl Drop for HostTree {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// Every file under `dir`, by its path relative to `base`, with its bytes:
/// a tree's state, to compare before and after a restore.
pub fn files(dir: &Path, base: &Path, out: &mut BTreeMap<String, Vec<u8>>) {
    for e in fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            files(&e.path(), base, out);
        } else {
            out.insert(
                e.path().strip_prefix(base).unwrap().display().to_string(),
                fs::read(e.path()).unwrap(),
            );
        }
    }
}
