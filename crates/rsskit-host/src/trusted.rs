//! Reading the files rsskit keeps in its own directories (persisted plans,
//! saves, irqbalance's options and rsskit's record of its bans). They are
//! input to a root service, so a file is read only when it is a regular
//! file owned by root (or by the user running rsskit) and writable by no one
//! else, in a directory with the same properties: a plan that user `nobody`
//! could have written is refused, not applied.
//!
//! Opened with `O_NONBLOCK | O_NOFOLLOW`: a FIFO or device planted among
//! the plans never blocks the reader (a running agent must not freeze on
//! `open`), and a symlink is never followed. Everything refused is refused
//! by name, with the reason.

use std::fs::{self, File, Metadata};
use std::io::{self, Read as _};
use std::os::unix::fs::{FileTypeExt as _, MetadataExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};

/// Why a file or directory was not read.
#[derive(Debug, thiserror::Error)]
pub enum TrustError {
    /// It could not be opened or read (`NotFound` included: callers tell
    /// "absent" from "refused" by [`TrustError::is_not_found`]).
    #[error("{path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// It exists but rsskit will not trust it.
    #[error("{path}: {why}")]
    Untrusted {
        /// The file or directory.
        path: PathBuf,
        /// What is wrong with it.
        why: String,
    },
}

impl TrustError {
    /// Whether the file (or its directory) does not exist.
    pub fn is_not_found(&self) -> bool {
        matches!(self, TrustError::Io { source, .. } if source.kind() == io::ErrorKind::NotFound)
    }

    /// The path it names.
    pub fn path(&self) -> &Path {
        match self {
            TrustError::Io { path, .. } | TrustError::Untrusted { path, .. } => path,
        }
    }
}

/// What a file type is called in a refusal.
fn kind_of(m: &Metadata) -> &'static str {
    let t = m.file_type();
    if t.is_dir() {
        "a directory"
    } else if t.is_symlink() {
        "a symlink"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_char_device() || t.is_block_device() {
        "a device"
    } else {
        "a regular file"
    }
}

/// The owner and mode rule shared by files and directories: owned by root
/// or this user, writable by neither group nor others.
fn owner_and_mode(path: &Path, m: &Metadata) -> Result<(), TrustError> {
    let me = rsskit_linux::process::effective_uid();
    let why = if m.uid() != 0 && m.uid() != me {
        format!("owned by uid {}: rsskit reads only root's files here", m.uid())
    } else if m.mode() & 0o022 != 0 {
        format!(
            "mode {:04o}: writable by group or others, so anyone could have written it",
            m.mode() & 0o7777
        )
    } else {
        return Ok(());
    };
    Err(TrustError::Untrusted { path: path.to_path_buf(), why })
}

/// Checks that `dir` is a real directory (not a symlink) owned by root or
/// this user and writable by no one else, or a sticky one of root's (like
/// `/tmp`: others may add files there, but cannot rename, remove or
/// replace one they do not own, and the file itself is checked too).
pub fn check_dir(dir: &Path) -> Result<(), TrustError> {
    let m = fs::symlink_metadata(dir).map_err(|source| TrustError::Io { path: dir.to_path_buf(), source })?;
    if !m.file_type().is_dir() {
        return Err(TrustError::Untrusted {
            path: dir.to_path_buf(),
            why: format!("{}, not a directory", kind_of(&m)),
        });
    }
    if m.uid() == 0 && m.mode() & libc::S_ISVTX != 0 {
        return Ok(());
    }
    owner_and_mode(dir, &m)
}

/// Opens `path` for reading when it passes every check: its directory by
/// [`check_dir`], the file a regular file of at most `max` bytes with the
/// same owner and mode rule. Never blocks in `open` (FIFOs) and never
/// follows a symlink.
pub fn open(path: &Path, max: u64) -> Result<File, TrustError> {
    let io_err = |source| TrustError::Io { path: path.to_path_buf(), source };
    let f = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            // O_NOFOLLOW on a symlink.
            Some(libc::ELOOP) => {
                TrustError::Untrusted { path: path.to_path_buf(), why: "a symlink: never followed".into() }
            }
            _ => io_err(e),
        })?;
    let m = f.metadata().map_err(io_err)?;
    if !m.file_type().is_file() {
        return Err(TrustError::Untrusted {
            path: path.to_path_buf(),
            why: format!("{}, not a regular file", kind_of(&m)),
        });
    }
    if m.len() > max {
        return Err(TrustError::Untrusted {
            path: path.to_path_buf(),
            why: format!("{} bytes, more than the {max} rsskit reads", m.len()),
        });
    }
    owner_and_mode(path, &m)?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        check_dir(dir)?;
    }
    Ok(f)
}

/// Reads `path` as text after [`open`]'s checks; at most `max` bytes.
pub fn read_to_string(path: &Path, max: u64) -> Result<String, TrustError> {
    let f = open(path, max)?;
    let mut text = String::new();
    // The length was checked on the open file; `take` bounds a file that grows.
    f.take(max)
        .read_to_string(&mut text)
        .map_err(|source| TrustError::Io { path: path.to_path_buf(), source })?;
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt as _;

    fn tmp(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("rsskit-trusted-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        fs::set_permissions(&d, fs::Permissions::from_mode(0o755)).unwrap();
        d
    }

    fn why(e: TrustError) -> String {
        match e {
            TrustError::Untrusted { why, .. } => why,
            TrustError::Io { source, .. } => panic!("an I/O error, not a refusal: {source}"),
        }
    }

    #[test]
    fn a_private_regular_file_is_read() {
        let d = tmp("ok");
        fs::write(d.join("p.json"), "{}").unwrap();
        fs::set_permissions(d.join("p.json"), fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(read_to_string(&d.join("p.json"), 100).unwrap(), "{}");
        assert!(read_to_string(&d.join("absent"), 100).unwrap_err().is_not_found());
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_fifo_is_refused_without_blocking() {
        let d = tmp("fifo");
        let p = d.join("p.json");
        // A FIFO with no writer: a plain open() would block here forever.
        assert!(std::process::Command::new("mkfifo").arg(&p).status().unwrap().success());
        assert_eq!(why(read_to_string(&p, 100).unwrap_err()), "a FIFO, not a regular file");
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn writable_files_and_directories_and_symlinks_are_refused() {
        let d = tmp("modes");
        let p = d.join("p.json");
        fs::write(&p, "{}").unwrap();
        fs::set_permissions(&p, fs::Permissions::from_mode(0o666)).unwrap();
        assert!(
            why(read_to_string(&p, 100).unwrap_err()).starts_with("mode 0666: writable by group or others")
        );
        fs::set_permissions(&p, fs::Permissions::from_mode(0o620)).unwrap();
        assert!(why(read_to_string(&p, 100).unwrap_err()).starts_with("mode 0620"));
        fs::set_permissions(&p, fs::Permissions::from_mode(0o644)).unwrap();
        fs::set_permissions(&d, fs::Permissions::from_mode(0o777)).unwrap();
        let e = read_to_string(&p, 100).unwrap_err();
        assert_eq!(e.path(), d.as_path(), "the directory is named");
        assert!(why(e).starts_with("mode 0777"));
        // A sticky directory of root's (/tmp): others cannot swap the file.
        if rsskit_linux::process::effective_uid() == 0 {
            fs::set_permissions(&d, fs::Permissions::from_mode(0o1777)).unwrap();
            assert_eq!(read_to_string(&p, 100).unwrap(), "{}");
        }
        fs::set_permissions(&d, fs::Permissions::from_mode(0o755)).unwrap();
        std::os::unix::fs::symlink(&p, d.join("l.json")).unwrap();
        assert_eq!(why(read_to_string(&d.join("l.json"), 100).unwrap_err()), "a symlink: never followed");
        assert!(why(read_to_string(&p, 1).unwrap_err()).contains("more than the 1 rsskit reads"));
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_file_of_another_user_is_refused() {
        if rsskit_linux::process::effective_uid() != 0 {
            eprintln!("skipped: chown to another user needs root");
            return;
        }
        let d = tmp("owner");
        let p = d.join("p.json");
        fs::write(&p, "{}").unwrap();
        std::os::unix::fs::chown(&p, Some(65534), None).unwrap();
        assert_eq!(
            why(read_to_string(&p, 100).unwrap_err()),
            "owned by uid 65534: rsskit reads only root's files here"
        );
        std::os::unix::fs::chown(&p, Some(0), None).unwrap();
        std::os::unix::fs::chown(&d, Some(65534), None).unwrap();
        assert!(why(read_to_string(&p, 100).unwrap_err()).starts_with("owned by uid 65534"));
        fs::remove_dir_all(&d).unwrap();
    }
}
