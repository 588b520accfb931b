//! Files for the HTTP server: an `O_PATH` directory handle, opening beneath
//! it with `openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)`, and
//! `sendfile`. Safe wrappers, so the runtime needs no `unsafe`.

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

fn c_path(p: &Path) -> io::Result<CString> {
    CString::new(p.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in path"))
}

/// Creates (truncates) a file to write as `File::create` does, but never
/// through a symlink (`O_NOFOLLOW`): rsskit runs as root, and a link planted
/// in a shared directory (`/tmp/out.pcap -> /etc/shadow`) must not make it
/// overwrite the link's target.
pub fn create_nofollow(path: &Path) -> io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt as _;
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
}

/// `open(path, O_PATH | O_DIRECTORY | O_CLOEXEC)`: a handle to resolve
/// paths beneath, not to read.
pub fn open_path_dir(path: &Path) -> io::Result<OwnedFd> {
    let c = c_path(path)?;
    // SAFETY: `c` is a valid C string; the result is checked.
    let fd = unsafe { libc::open(c.as_ptr(), libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `openat2(dir, rel, flags, RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)`: no
/// `..`, absolute path or symlink can lead outside `dir` (`EXDEV`). An empty
/// `rel` opens `dir` itself. Kernels without `openat2` give `ENOSYS`
/// (seccomp filters may give `EPERM`); the caller picks a fallback.
pub fn open_beneath(dir: impl AsFd, rel: &Path, flags: libc::c_int) -> io::Result<File> {
    let rel_c = if rel.as_os_str().is_empty() { c_path(Path::new("."))? } else { c_path(rel)? };
    // SAFETY: open_how is plain data; all-zero is valid.
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = flags as u64;
    how.resolve = libc::RESOLVE_BENEATH | libc::RESOLVE_NO_MAGICLINKS;
    // SAFETY: `rel_c` is a valid C string, `how` a valid open_how of the size
    // passed; the result is checked.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            dir.as_fd().as_raw_fd(),
            rel_c.as_ptr(),
            &how as *const libc::open_how,
            std::mem::size_of::<libc::open_how>(),
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor we own.
    Ok(unsafe { File::from_raw_fd(fd as i32) })
}

/// `sendfile(out, file, offset, len)`: copies up to `len` bytes of `file`
/// from `*offset` to `out` and advances `*offset` by what was sent.
pub fn sendfile(out: impl AsFd, file: impl AsFd, offset: &mut i64, len: usize) -> io::Result<usize> {
    // SAFETY: both descriptors are live for the call; `offset` is a valid,
    // writable offset the kernel advances.
    let n = unsafe { libc::sendfile(out.as_fd().as_raw_fd(), file.as_fd().as_raw_fd(), offset, len) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n as usize)
}

/// Takes an exclusive `flock(2)` on `f` without waiting: `Ok(false)` when
/// another descriptor holds it. (std's `File::try_lock` is newer than the
/// workspace's minimum Rust.)
pub fn try_lock_exclusive(f: &File) -> io::Result<bool> {
    // SAFETY: flock on a descriptor the caller owns; no memory is passed.
    let r = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if r == 0 {
        return Ok(true);
    }
    let e = io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
        Ok(false)
    } else {
        Err(e)
    }
}

/// The PIDs holding a lock on the file whose `stat` device and inode are
/// `dev` and `ino`, from the text of `/proc/locks`
/// (`1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF`; waiters, `1: -> ...`,
/// are not holders). No I/O.
pub fn lock_holders(locks: &str, dev: u64, ino: u64) -> Vec<u32> {
    // dev_t's glibc encoding: 12 bits of major and 20 of minor, split.
    let major = ((dev >> 8) & 0xfff) | ((dev >> 32) & !0xfff);
    let minor = (dev & 0xff) | ((dev >> 12) & !0xff);
    let mut out = Vec::new();
    for line in locks.lines() {
        let mut w = line.split_whitespace().skip(1);
        let words: Vec<&str> = w.by_ref().take(5).collect();
        if words.len() < 5 || words[0] == "->" {
            continue;
        }
        let (pid, id) = (words[3], words[4]);
        let mut parts = id.split(':');
        let (Some(ma), Some(mi), Some(i)) = (parts.next(), parts.next(), parts.next()) else { continue };
        let same = u64::from_str_radix(ma, 16) == Ok(major)
            && u64::from_str_radix(mi, 16) == Ok(minor)
            && i.parse::<u64>() == Ok(ino);
        if let (true, Ok(pid)) = (same, pid.parse::<u32>()) {
            out.push(pid);
        }
    }
    out
}

/// Who holds a lock on `f` now, as `pid N (COMMAND)` (from `/proc/locks`
/// and the holder's `comm`); `None` when it cannot be found out.
pub fn lock_holder(f: &File) -> Option<String> {
    use std::os::unix::fs::MetadataExt as _;
    let m = f.metadata().ok()?;
    let locks = std::fs::read_to_string("/proc/locks").ok()?;
    let pid = *lock_holders(&locks, m.dev(), m.ino()).first()?;
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
    let comm: String = comm.trim().chars().filter(|c| !c.is_control()).take(32).collect();
    Some(if comm.is_empty() { format!("pid {pid}") } else { format!("pid {pid} ({comm})") })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    #[test]
    fn lock_holders_match_device_and_inode() {
        // dev 0x0801 (major 8, minor 1); dev_t of major 259, minor 70000.
        let text = "1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF\n\
                    1: -> FLOCK  ADVISORY  WRITE 99 08:01:5678 0 EOF\n\
                    2: POSIX  ADVISORY  READ 77 103:11170:42 0 EOF\n\
                    3: FLOCK  ADVISORY  WRITE 55 08:01:5679 0 EOF\n";
        assert_eq!(lock_holders(text, 0x0801, 5678), vec![1234]);
        let big = (259 << 8) | (70000 & 0xff) | ((70000 & !0xff) << 12);
        assert_eq!(lock_holders(text, big, 42), vec![77]);
        assert!(lock_holders(text, 0x0801, 1).is_empty());
    }

    #[test]
    fn the_holder_of_a_lock_is_named() {
        let p = std::env::temp_dir().join(format!("rsskit-linux-lock-{}", std::process::id()));
        let f = File::create(&p).unwrap();
        assert!(try_lock_exclusive(&f).unwrap());
        let other = File::open(&p).unwrap();
        let who = lock_holder(&other).expect("our own lock is in /proc/locks");
        assert!(who.starts_with(&format!("pid {} (", std::process::id())), "{who}");
        std::fs::remove_file(&p).unwrap();
    }

    #[test]
    fn beneath_and_sendfile() {
        let base = std::env::temp_dir().join(format!("rsskit-linux-fs-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(base.join("root")).unwrap();
        std::fs::write(base.join("root/a"), b"hello world").unwrap();
        std::fs::write(base.join("secret"), b"no").unwrap();
        let dir = open_path_dir(&base.join("root")).unwrap();
        assert!(open_path_dir(&base.join("root/a")).is_err(), "not a directory");
        let flags = libc::O_RDONLY | libc::O_CLOEXEC;
        match open_beneath(&dir, Path::new("../secret"), flags) {
            Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => {}
            Err(e) => assert_eq!(e.raw_os_error(), Some(libc::EXDEV), "{e}"),
            Ok(_) => panic!("opened a file outside the directory"),
        }
        let f = match open_beneath(&dir, Path::new("a"), flags) {
            Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => File::open(base.join("root/a")).unwrap(),
            r => r.unwrap(),
        };
        let (tx, mut rx) = std::os::unix::net::UnixStream::pair().unwrap();
        let mut off = 6;
        assert_eq!(sendfile(&tx, &f, &mut off, 100).unwrap(), 5);
        assert_eq!(off, 11);
        assert_eq!(sendfile(&tx, &f, &mut off, 100).unwrap(), 0, "at the end");
        drop(tx);
        let mut got = String::new();
        rx.read_to_string(&mut got).unwrap();
        assert_eq!(got, "world");
        std::fs::remove_dir_all(&base).unwrap();
    }
}
