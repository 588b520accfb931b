//! Readiness signals for sockets a thread does not block on: `O_ASYNC`
//! with the calling thread as owner (`F_SETOWN_EX`, `F_OWNER_TID`), so the
//! kernel sends that thread `SIGIO` when a datagram is queued. The signal
//! ends the thread's blocking read of another socket with `EINTR` (a read
//! with `SO_RCVTIMEO` is never restarted, signal(7)), and a counter bumped
//! by the handler tells a thread that was not blocked.
//!
//! Why: udp-echo's `--steer cpu` keeps one socket per CPU so that the
//! processing CPU of every datagram is known, also for CPUs without a
//! worker. Polling those sockets on every wake-up cost a third system call
//! per wake-up and ~65 ns of server CPU per echoed datagram (bench/udp-steer
//! with GSO bursts, 1 worker of 2 CPUs); with signals a worker blocks in
//! `recvmmsg` on its own socket and the quiet ones cost nothing.
//!
//! The handler is process-wide (installed once, chained with any earlier
//! `SIGIO` handler by signal-hook) and only adds to an atomic; the signal
//! is directed at the owning thread only.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

/// `SIGIO`s handled so far, by any thread.
static FIRED: AtomicU64 = AtomicU64::new(0);
/// The handler's installation, once per process (its errno on failure).
static HANDLER: OnceLock<Result<(), i32>> = OnceLock::new();

// <asm-generic/fcntl.h>; the libc crate has them only for some targets.
const F_SETOWN_EX: libc::c_int = 15;
const F_OWNER_TID: libc::c_int = 0;

/// `struct f_owner_ex`.
#[repr(C)]
struct FOwnerEx {
    kind: libc::c_int,
    pid: libc::pid_t,
}

fn install_handler() -> io::Result<()> {
    let r = HANDLER.get_or_init(|| {
        // SAFETY: the action only adds to a static atomic, which is
        // async-signal-safe; it allocates nothing and takes no lock.
        unsafe {
            signal_hook::low_level::register(libc::SIGIO, || {
                FIRED.fetch_add(1, Ordering::Release);
            })
        }
        .map(|_| ())
        .map_err(|e| e.raw_os_error().unwrap_or(libc::EINVAL))
    });
    r.map_err(io::Error::from_raw_os_error)
}

fn fcntl_result(rc: libc::c_int) -> io::Result<libc::c_int> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

/// Sockets armed to signal the thread that armed them.
#[derive(Debug)]
pub struct ReadySignals {
    seen: u64,
}

impl ReadySignals {
    /// Installs the handler (once per process), then makes each of `fds`
    /// send `SIGIO` to the calling thread whenever data is queued on it.
    /// Call it from the thread that reads them.
    pub fn arm<'a>(fds: impl IntoIterator<Item = BorrowedFd<'a>>) -> io::Result<Self> {
        install_handler()?;
        let seen = FIRED.load(Ordering::Acquire);
        // SAFETY: gettid has no preconditions.
        let tid = unsafe { libc::gettid() };
        for fd in fds {
            let fd = fd.as_raw_fd();
            let owner = FOwnerEx { kind: F_OWNER_TID, pid: tid };
            // SAFETY: `fd` is a live descriptor (borrowed); F_SETOWN_EX reads
            // the struct behind the pointer, which lives for the call.
            fcntl_result(unsafe { libc::fcntl(fd, F_SETOWN_EX, &owner as *const FOwnerEx) })?;
            // SAFETY: plain flag get/set on a live descriptor.
            let flags = fcntl_result(unsafe { libc::fcntl(fd, libc::F_GETFL) })?;
            // SAFETY: as above.
            fcntl_result(unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_ASYNC) })?;
        }
        Ok(Self { seen })
    }

    /// Whether a `SIGIO` was handled since the last call (or since `arm`).
    /// Any thread's signal counts: a false alarm costs the caller one read
    /// that finds nothing, a missed one cannot happen.
    pub fn fired(&mut self) -> bool {
        let now = FIRED.load(Ordering::Acquire);
        let fired = now != self.seen;
        self.seen = now;
        fired
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;
    use std::os::fd::AsFd;
    use std::time::{Duration, Instant};

    #[test]
    fn a_datagram_on_an_armed_socket_ends_a_blocking_read_of_another() {
        let quiet = UdpSocket::bind("127.0.0.1:0").unwrap();
        let armed = UdpSocket::bind("127.0.0.1:0").unwrap();
        armed.set_nonblocking(true).unwrap();
        quiet.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut sig = ReadySignals::arm([armed.as_fd()]).unwrap();
        assert!(!sig.fired(), "nothing queued yet");
        let to = armed.local_addr().unwrap();
        // One datagram every 100 ms until the read below ends: should the
        // first signal land before this thread blocks, the next one counts.
        let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let sender = std::thread::spawn({
            let done = done.clone();
            move || {
                let s = UdpSocket::bind("127.0.0.1:0").unwrap();
                while !done.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(100));
                    s.send_to(b"x", to).unwrap();
                }
            }
        });
        let t = Instant::now();
        let e = quiet.recv(&mut [0u8; 8]).unwrap_err();
        done.store(true, Ordering::Relaxed);
        sender.join().unwrap();
        assert_eq!(e.kind(), io::ErrorKind::Interrupted, "{e}");
        assert!(t.elapsed() < Duration::from_secs(4), "woken by the signal, not the timeout");
        assert!(sig.fired());
        assert_eq!(armed.recv(&mut [0u8; 8]).unwrap(), 1, "the datagram is there to read");
    }
}
