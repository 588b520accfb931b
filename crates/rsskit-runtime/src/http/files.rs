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

use std::fs::File;
use std::io::{self, Read};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

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
}
