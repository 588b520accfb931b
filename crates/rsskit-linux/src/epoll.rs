//! A minimal epoll event loop: register descriptors with a 64-bit token,
//! wait with a nanosecond timeout (`epoll_pwait2`, falling back to
//! `epoll_wait`'s milliseconds on kernels without it).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Readable (`EPOLLIN`).
pub const IN: u32 = libc::EPOLLIN as u32;
/// Writable (`EPOLLOUT`).
pub const OUT: u32 = libc::EPOLLOUT as u32;
/// Error condition (`EPOLLERR`).
pub const ERR: u32 = libc::EPOLLERR as u32;
/// Hang-up (`EPOLLHUP`).
pub const HUP: u32 = libc::EPOLLHUP as u32;
/// Peer closed its writing half (`EPOLLRDHUP`).
pub const RDHUP: u32 = libc::EPOLLRDHUP as u32;
/// Edge-triggered registration (`EPOLLET`).
pub const ET: u32 = libc::EPOLLET as u32;
/// Wake only one of the epoll sets sharing the descriptor (`EPOLLEXCLUSIVE`).
pub const EXCLUSIVE: u32 = libc::EPOLLEXCLUSIVE as u32;

/// Whether `epoll_pwait2` exists (cleared on the first `ENOSYS`).
static PWAIT2: AtomicBool = AtomicBool::new(true);

/// An epoll instance and its event buffer.
pub struct Epoll {
    fd: OwnedFd,
    events: Vec<libc::epoll_event>,
    ready: usize,
}

impl Epoll {
    /// A new instance returning up to `cap` events per wait.
    pub fn new(cap: usize) -> io::Result<Epoll> {
        // SAFETY: plain syscall; the result is checked.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` is a fresh descriptor we own.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(Epoll { fd, events: vec![libc::epoll_event { events: 0, u64: 0 }; cap.max(1)], ready: 0 })
    }

    fn ctl(&self, op: libc::c_int, fd: RawFd, events: u32, token: u64) -> io::Result<()> {
        let mut ev = libc::epoll_event { events, u64: token };
        // SAFETY: `ev` is a valid event for the call; the kernel copies it.
        if unsafe { libc::epoll_ctl(self.fd.as_raw_fd(), op, fd, &mut ev) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Registers `fd` for `events` (level-triggered unless [`ET`]).
    pub fn add(&self, fd: RawFd, events: u32, token: u64) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_ADD, fd, events, token)
    }

    /// Changes the events of a registered `fd`.
    pub fn modify(&self, fd: RawFd, events: u32, token: u64) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_MOD, fd, events, token)
    }

    /// Unregisters `fd` (closing it does that too, if it was never duplicated).
    pub fn delete(&self, fd: RawFd) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_DEL, fd, 0, 0)
    }

    /// Waits up to `timeout` (forever if `None`) and returns how many events
    /// are ready; read them with [`Epoll::event`]. An interrupted wait
    /// returns 0.
    pub fn wait(&mut self, timeout: Option<Duration>) -> io::Result<usize> {
        let cap = self.events.len() as libc::c_int;
        let ep = self.fd.as_raw_fd();
        let mut n: libc::c_int = -1;
        let mut done = false;
        if PWAIT2.load(Ordering::Relaxed) {
            let ts = timeout.map(|t| libc::timespec {
                tv_sec: t.as_secs().min(i64::MAX as u64) as libc::time_t,
                tv_nsec: t.subsec_nanos() as libc::c_long,
            });
            let tsp = ts.as_ref().map_or(std::ptr::null(), |t| t as *const libc::timespec);
            // SAFETY: the events buffer holds `cap` entries; `tsp` is null or a
            // live timespec; a null sigmask means "no change".
            let r = unsafe {
                libc::syscall(
                    libc::SYS_epoll_pwait2,
                    ep,
                    self.events.as_mut_ptr(),
                    cap,
                    tsp,
                    std::ptr::null::<libc::sigset_t>(),
                    0usize,
                )
            };
            if r < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::ENOSYS) {
                PWAIT2.store(false, Ordering::Relaxed);
            } else {
                n = r as libc::c_int;
                done = true;
            }
        }
        if !done {
            let ms = timeout.map_or(-1, |t| {
                // Round up so a short timeout does not become a busy loop.
                let ms = t.as_nanos().div_ceil(1_000_000);
                ms.min(i32::MAX as u128) as libc::c_int
            });
            // SAFETY: the events buffer holds `cap` entries.
            n = unsafe { libc::epoll_wait(ep, self.events.as_mut_ptr(), cap, ms) };
        }
        if n < 0 {
            let e = io::Error::last_os_error();
            self.ready = 0;
            if e.kind() == io::ErrorKind::Interrupted {
                return Ok(0);
            }
            return Err(e);
        }
        self.ready = n as usize;
        Ok(self.ready)
    }

    /// Event `i` of the last wait: `(token, events)`.
    #[inline]
    pub fn event(&self, i: usize) -> (u64, u32) {
        assert!(i < self.ready);
        let e = self.events[i];
        (e.u64, e.events)
    }
}

impl AsRawFd for Epoll {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::net::UnixStream;

    #[test]
    fn readiness_and_timeout() {
        let mut ep = Epoll::new(8).unwrap();
        let (mut a, b) = UnixStream::pair().unwrap();
        ep.add(b.as_raw_fd(), IN, 42).unwrap();
        let t = std::time::Instant::now();
        assert_eq!(ep.wait(Some(Duration::from_millis(20))).unwrap(), 0);
        assert!(t.elapsed() >= Duration::from_millis(19));
        a.write_all(b"x").unwrap();
        assert_eq!(ep.wait(Some(Duration::from_secs(1))).unwrap(), 1);
        let (tok, ev) = ep.event(0);
        assert_eq!(tok, 42);
        assert!(ev & IN != 0);
        ep.modify(b.as_raw_fd(), OUT, 7).unwrap();
        assert_eq!(ep.wait(Some(Duration::ZERO)).unwrap(), 1);
        assert_eq!(ep.event(0).0, 7);
        ep.delete(b.as_raw_fd()).unwrap();
        assert_eq!(ep.wait(Some(Duration::ZERO)).unwrap(), 0);
    }
}
