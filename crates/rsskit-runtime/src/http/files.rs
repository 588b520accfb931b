//! Static files under a root directory, safely: the request path is
//! percent-decoded once, `..` segments (in any encoding) are refused, and
//! the file is opened with `openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)`
//! relative to the root, so no symlink can lead outside it. Kernels without
//! `openat2` get the fallback: canonicalize and check the prefix.
//!
//! Only regular files are served. A FIFO (or a device node) under the root
//! must not wedge the worker: every open is `O_NONBLOCK` (opening a FIFO
//! without a writer, or a terminal, then returns at once) and the type is
//! checked on the descriptor (`fstat`) before anything reads from it.
//!
//! The system calls are `rsskit_linux::fs`'s; [`Files`] is how the
//! connection state machine ([`super::conn`]) asks for a file without doing
//! I/O itself.
#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Why a file is not served: the HTTP status to answer with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileError {
    /// 400: undecodable path, NUL, or a `..` segment.
    BadPath,
    /// 403: outside the root (symlink), not a regular file, or not readable.
    Forbidden,
    /// 404.
    NotFound,
}

impl FileError {
    /// The HTTP status that answers this error.
    pub fn status(self) -> u16 {
        match self {
            FileError::BadPath => 400,
            FileError::Forbidden => 403,
            FileError::NotFound => 404,
        }
    }
}

/// Decodes `%XX` escapes. Refuses bad escapes and NUL bytes.
pub fn percent_decode(p: &str) -> Result<Vec<u8>, FileError> {
    let b = p.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = |c: u8| (c as char).to_digit(16);
            let (Some(h), Some(l)) =
                (b.get(i + 1).copied().and_then(hex), b.get(i + 2).copied().and_then(hex))
            else {
                return Err(FileError::BadPath);
            };
            out.push((h * 16 + l) as u8);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    if out.contains(&0) {
        return Err(FileError::BadPath);
    }
    Ok(out)
}

/// The decoded path as a relative path of plain segments: empty and `.`
/// segments dropped, `..` refused. `/` gives an empty path.
pub fn relative_path(decoded: &[u8]) -> Result<PathBuf, FileError> {
    let mut rel = PathBuf::new();
    for seg in decoded.split(|&c| c == b'/') {
        match seg {
            b"" | b"." => {}
            b".." => return Err(FileError::BadPath),
            s => rel.push(std::ffi::OsStr::from_bytes(s)),
        }
    }
    Ok(rel)
}

static HAVE_OPENAT2: AtomicBool = AtomicBool::new(true);

/// Never blocks in `open` (FIFO, tty, device); the caller then refuses
/// anything but a regular file or a directory before reading.
const OPEN_FLAGS: i32 = libc::O_RDONLY | libc::O_CLOEXEC | libc::O_NOCTTY | libc::O_NONBLOCK;

/// The document root.
#[derive(Debug)]
pub struct Root {
    dir: OwnedFd,
    canon: PathBuf,
}

/// An opened regular file (`B`: its handle, a `File` for a real root).
#[derive(Debug)]
pub struct Opened<B = File> {
    /// The open handle, for `sendfile`.
    pub file: B,
    /// Its size in bytes (the Content-Length).
    pub size: u64,
    /// The Content-Type chosen from its extension.
    pub content_type: &'static str,
}

impl Root {
    /// Opens `path` (a directory) as the root.
    pub fn open(path: &Path) -> io::Result<Root> {
        let canon = path.canonicalize()?;
        if !canon.is_dir() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} is not a directory", path.display()),
            ));
        }
        let dir = rsskit_linux::fs::open_path_dir(&canon)?;
        Ok(Root { dir, canon })
    }

    /// The canonical root path.
    pub fn path(&self) -> &Path {
        &self.canon
    }

    /// Opens the file a request path names (`/a/b%20c.txt`); a directory
    /// gives its `index.html`.
    pub fn lookup(&self, request_path: &str) -> Result<Opened, FileError> {
        let rel = relative_path(&percent_decode(request_path)?)?;
        let f = self.open_beneath(&rel)?;
        // fstat on the descriptor: the type of what was opened, not of
        // whatever the path names by now.
        let meta = f.metadata().map_err(|_| FileError::Forbidden)?;
        let (f, meta, rel) = if meta.is_dir() {
            let idx = rel.join("index.html");
            let f = self.open_beneath(&idx)?;
            let m = f.metadata().map_err(|_| FileError::Forbidden)?;
            (f, m, idx)
        } else {
            (f, meta, rel)
        };
        if !meta.is_file() {
            return Err(FileError::Forbidden);
        }
        Ok(Opened { file: f, size: meta.len(), content_type: content_type(&rel) })
    }

    fn open_beneath(&self, rel: &Path) -> Result<File, FileError> {
        if HAVE_OPENAT2.load(Ordering::Relaxed) {
            match rsskit_linux::fs::open_beneath(&self.dir, rel, OPEN_FLAGS) {
                Ok(f) => return Ok(f),
                Err(e) if e.kind() == io::ErrorKind::InvalidInput => return Err(FileError::BadPath),
                Err(e) => {
                    let e = e.raw_os_error().unwrap_or(0);
                    if e != libc::ENOSYS && e != libc::EPERM {
                        return Err(errno_to_file_error(e));
                    }
                    HAVE_OPENAT2.store(false, Ordering::Relaxed);
                }
            }
        }
        // Fallback: resolve every symlink, then check the prefix.
        let full = self.canon.join(rel);
        let canon = full.canonicalize().map_err(|e| errno_to_file_error(e.raw_os_error().unwrap_or(0)))?;
        if !canon.starts_with(&self.canon) {
            return Err(FileError::Forbidden);
        }
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(OPEN_FLAGS)
            .open(&canon)
            .map_err(|e| errno_to_file_error(e.raw_os_error().unwrap_or(0)))
    }
}

/// Where the connection state machine gets files: [`Root`] in the server,
/// an in-memory fake in its tests.
pub trait Files {
    /// A file's handle (what a `sendfile` action names).
    type Body;
    /// The file for a request path (as sent: percent-encoded, no query).
    fn open_file(&self, path: &str) -> Result<Opened<Self::Body>, FileError>;
    /// Appends the first `len` bytes of `body` to `out`; false if the file
    /// no longer has them (then `out` may hold part of them).
    fn read_body(&self, body: &mut Self::Body, len: usize, out: &mut Vec<u8>) -> bool;
}

impl Files for Root {
    type Body = File;

    fn open_file(&self, path: &str) -> Result<Opened, FileError> {
        self.lookup(path)
    }

    fn read_body(&self, body: &mut File, len: usize, out: &mut Vec<u8>) -> bool {
        let at = out.len();
        Read::take(&mut *body, len as u64).read_to_end(out).is_ok() && out.len() - at == len
    }
}

/// A file's bytes as a connection sends them: an open file (read or
/// `sendfile`d per request), or the bytes of a small file from a worker's
/// [`CachedRoot`].
#[derive(Debug)]
pub enum Body {
    /// An open regular file.
    File(File),
    /// A cached small file's bytes.
    Mem(Arc<[u8]>),
}

/// Most entries a worker's cache holds; when full it starts over (a client
/// cycling through many names costs the lookups it would without a cache).
const CACHE_ENTRIES: usize = 128;

struct CacheEntry {
    bytes: Arc<[u8]>,
    content_type: &'static str,
    /// Monotonic ns when the bytes were read.
    read_at: u64,
}

/// One worker's view of a [`Root`] with a small cache: a regular file of at
/// most `max_size` bytes is read once and its bytes served from memory for
/// `valid_ns` (nginx's `open_file_cache_valid`, here with the content):
/// a short-lived request then costs no `openat2`, `statx`, `read` and
/// `close` (4 of its 8 system calls, `bench/LOG.md`). A file that
/// changes is served as it was for at most `valid_ns`; `valid_ns` 0 turns
/// the cache off. Only what [`Root::lookup`] returned (beneath the root,
/// regular) is cached, keyed by the request path as sent; errors are not.
///
/// Per worker: the lock is never contended (it keeps the type `Sync`, as
/// the connection core holds its files in an `Arc`).
pub struct CachedRoot {
    root: Arc<Root>,
    valid_ns: u64,
    max_size: usize,
    /// The shell's clock, set once per wake-up.
    now: AtomicU64,
    entries: Mutex<HashMap<String, CacheEntry>>,
}

impl CachedRoot {
    /// A cache of files up to `max_size` bytes, each valid `valid_ns`.
    pub fn new(root: Arc<Root>, valid_ns: u64, max_size: usize) -> CachedRoot {
        CachedRoot { root, valid_ns, max_size, now: AtomicU64::new(0), entries: Mutex::default() }
    }

    /// The shell's monotonic clock (ns), once per wake-up.
    pub fn set_now(&self, now: u64) {
        self.now.store(now, Ordering::Relaxed);
    }

    /// Entries held now.
    pub fn cached(&self) -> usize {
        self.entries.lock().map_or(0, |m| m.len())
    }
}

impl Files for CachedRoot {
    type Body = Body;

    fn open_file(&self, path: &str) -> Result<Opened<Body>, FileError> {
        let now = self.now.load(Ordering::Relaxed);
        if self.valid_ns == 0 {
            let o = self.root.lookup(path)?;
            return Ok(Opened { file: Body::File(o.file), size: o.size, content_type: o.content_type });
        }
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(e) = entries.get(path) {
            if now.saturating_sub(e.read_at) < self.valid_ns {
                let size = e.bytes.len() as u64;
                return Ok(Opened { file: Body::Mem(e.bytes.clone()), size, content_type: e.content_type });
            }
            entries.remove(path);
        }
        let mut o = self.root.lookup(path)?;
        if o.size > self.max_size as u64 {
            return Ok(Opened { file: Body::File(o.file), size: o.size, content_type: o.content_type });
        }
        let mut buf = Vec::with_capacity(o.size as usize);
        if !self.root.read_body(&mut o.file, o.size as usize, &mut buf) {
            // Shorter than its fstat said (changing under us): not cached;
            // the connection core reads it and answers 500 if still short.
            return Ok(Opened { file: Body::File(o.file), size: o.size, content_type: o.content_type });
        }
        let bytes: Arc<[u8]> = buf.into();
        if entries.len() >= CACHE_ENTRIES {
            entries.clear();
        }
        entries.insert(
            path.to_string(),
            CacheEntry { bytes: bytes.clone(), content_type: o.content_type, read_at: now },
        );
        Ok(Opened { file: Body::Mem(bytes), size: o.size, content_type: o.content_type })
    }

    fn read_body(&self, body: &mut Body, len: usize, out: &mut Vec<u8>) -> bool {
        match body {
            Body::File(f) => self.root.read_body(f, len, out),
            Body::Mem(b) if b.len() >= len => {
                out.extend_from_slice(&b[..len]);
                true
            }
            Body::Mem(_) => false,
        }
    }
}

fn errno_to_file_error(e: i32) -> FileError {
    match e {
        libc::ENOENT | libc::ENOTDIR => FileError::NotFound,
        libc::ENAMETOOLONG => FileError::BadPath,
        // EXDEV: the path escapes the root; ELOOP: symlink loop; EACCES...
        _ => FileError::Forbidden,
    }
}

fn content_type(p: &Path) -> &'static str {
    match p.extension().and_then(|e| e.to_str()).map(|e| e.to_ascii_lowercase()).as_deref() {
        Some("html" | "htm") => "text/html",
        Some("txt") => "text/plain",
        Some("css") => "text/css",
        Some("js") => "text/javascript",
        Some("json") => "application/json",
        Some("png") => "image/png",
        Some("jpg" | "jpeg") => "image/jpeg",
        Some("gif") => "image/gif",
        Some("svg") => "image/svg+xml",
        _ => "application/octet-stream",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decoding() {
        assert_eq!(percent_decode("/a%20b").unwrap(), b"/a b");
        assert_eq!(percent_decode("/%2e%2E/").unwrap(), b"/../");
        assert_eq!(percent_decode("/%2").unwrap_err(), FileError::BadPath);
        assert_eq!(percent_decode("/%zz").unwrap_err(), FileError::BadPath);
        assert_eq!(percent_decode("/a%00b").unwrap_err(), FileError::BadPath);
        assert_eq!(relative_path(b"//a/./b/").unwrap(), PathBuf::from("a/b"));
        assert_eq!(relative_path(b"/a/../b").unwrap_err(), FileError::BadPath);
        assert_eq!(relative_path(b"/..").unwrap_err(), FileError::BadPath);
        assert_eq!(relative_path(b"/a..b/..c").unwrap(), PathBuf::from("a..b/..c"));
    }

    fn mkfifo(p: &Path) {
        let st = std::process::Command::new("mkfifo").arg(p).status().expect("running mkfifo(1)");
        assert!(st.success(), "mkfifo {}", p.display());
    }

    #[test]
    fn lookups_stay_beneath() {
        let base = std::env::temp_dir().join(format!("rsskit-files-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let root = base.join("root");
        std::fs::create_dir_all(root.join("sub")).unwrap();
        std::fs::write(root.join("a.txt"), b"hello").unwrap();
        std::fs::write(root.join("sub/index.html"), b"<p>").unwrap();
        std::fs::write(base.join("secret"), b"no").unwrap();
        std::os::unix::fs::symlink(base.join("secret"), root.join("out")).unwrap();
        std::os::unix::fs::symlink("../secret", root.join("rel-out")).unwrap();
        std::os::unix::fs::symlink("a.txt", root.join("in")).unwrap();
        mkfifo(&root.join("fifo"));
        let r = std::sync::Arc::new(Root::open(&root).unwrap());
        // A FIFO with no writer: refused at once, not a blocked open (which
        // would leave the thread stuck: fail after 5 s instead of hanging).
        let (tx, rx) = std::sync::mpsc::channel();
        let r2 = r.clone();
        std::thread::spawn(move || tx.send(r2.lookup("/fifo").map(|o| o.size)));
        let got = rx.recv_timeout(std::time::Duration::from_secs(5)).expect("lookup of a FIFO blocked");
        assert_eq!(got.unwrap_err(), FileError::Forbidden);
        let o = r.lookup("/a.txt").unwrap();
        assert_eq!((o.size, o.content_type), (5, "text/plain"));
        assert_eq!(r.lookup("/sub/").unwrap().content_type, "text/html");
        assert_eq!(r.lookup("/in").unwrap().size, 5, "a symlink inside the root is fine");
        assert_eq!(r.lookup("/out").unwrap_err(), FileError::Forbidden);
        assert_eq!(r.lookup("/rel-out").unwrap_err(), FileError::Forbidden);
        assert_eq!(r.lookup("/../secret").unwrap_err(), FileError::BadPath);
        assert_eq!(r.lookup("/%2e%2e/secret").unwrap_err(), FileError::BadPath);
        assert_eq!(r.lookup("/sub/%2E%2E/%2e%2e/secret").unwrap_err(), FileError::BadPath);
        assert_eq!(r.lookup("/nope").unwrap_err(), FileError::NotFound);
        assert_eq!(r.lookup("/").unwrap_err(), FileError::NotFound, "no index.html at the root");
        // The fallback path gives the same answers.
        HAVE_OPENAT2.store(false, Ordering::Relaxed);
        assert_eq!(r.lookup("/fifo").unwrap_err(), FileError::Forbidden);
        assert_eq!(r.lookup("/out").unwrap_err(), FileError::Forbidden);
        assert_eq!(r.lookup("/in").unwrap().size, 5);
        HAVE_OPENAT2.store(true, Ordering::Relaxed);
        std::fs::remove_dir_all(&base).unwrap();
    }

    fn body_bytes(c: &CachedRoot, path: &str) -> (Vec<u8>, bool) {
        let mut o = c.open_file(path).unwrap();
        let mut out = Vec::new();
        assert!(c.read_body(&mut o.file, o.size as usize, &mut out));
        (out, matches!(o.file, Body::Mem(_)))
    }

    #[test]
    fn cache_serves_small_files_for_their_validity_only() {
        let base = std::env::temp_dir().join(format!("rsskit-files-cache-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(&base).unwrap();
        std::fs::write(base.join("a.txt"), b"one").unwrap();
        std::fs::write(base.join("big"), vec![b'x'; 100]).unwrap();
        let root = Arc::new(Root::open(&base).unwrap());
        let c = CachedRoot::new(root.clone(), 1_000, 50);
        c.set_now(10_000);
        assert_eq!(body_bytes(&c, "/a.txt"), (b"one".to_vec(), true));
        assert_eq!(c.open_file("/a.txt").unwrap().content_type, "text/plain");
        // Changed on disk: the cached bytes until the entry is 1,000 ns old.
        std::fs::write(base.join("a.txt"), b"two!").unwrap();
        c.set_now(10_999);
        assert_eq!(body_bytes(&c, "/a.txt").0, b"one");
        c.set_now(11_000);
        assert_eq!(body_bytes(&c, "/a.txt"), (b"two!".to_vec(), true));
        // Larger than max_size: an open file every time, never cached.
        assert_eq!(body_bytes(&c, "/big"), (vec![b'x'; 100], false));
        assert_eq!(c.cached(), 1);
        // Errors are not cached; a removed file is gone once its entry expires.
        assert_eq!(c.open_file("/nope").unwrap_err(), FileError::NotFound);
        std::fs::remove_file(base.join("a.txt")).unwrap();
        c.set_now(12_000);
        assert_eq!(c.open_file("/a.txt").unwrap_err(), FileError::NotFound);
        assert_eq!(c.cached(), 0);
        // Bounded: a client cycling through names never holds more than CACHE_ENTRIES.
        std::fs::write(base.join("s"), b"s").unwrap();
        let mut most = 0;
        for i in 0..3 * CACHE_ENTRIES {
            // "/s", "//s", "///s"...: one file, a new key each time.
            assert_eq!(body_bytes(&c, &format!("{}s", "/".repeat(i + 1))), (b"s".to_vec(), true));
            most = most.max(c.cached());
        }
        assert_eq!(most, CACHE_ENTRIES);
        // valid_ns 0: no cache at all.
        let off = CachedRoot::new(root, 0, 50);
        std::fs::write(base.join("a.txt"), b"three").unwrap();
        assert_eq!(body_bytes(&off, "/a.txt"), (b"three".to_vec(), false));
        assert_eq!(off.cached(), 0);
        std::fs::remove_dir_all(&base).unwrap();
    }
}
