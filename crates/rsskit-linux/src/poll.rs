//! `ppoll` over a fixed set of descriptors: the wait of event loops that
//! poll non-blocking sockets themselves (the UDP load generator).

use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::time::Duration;

/// Descriptors waited on for readability.
#[derive(Debug, Default)]
pub struct PollSet {
    fds: Vec<libc::pollfd>,
}

impl PollSet {
    /// A set waiting for input on each of `fds`.
    pub fn readable(fds: impl IntoIterator<Item = RawFd>) -> PollSet {
        PollSet {
            fds: fds.into_iter().map(|fd| libc::pollfd { fd, events: libc::POLLIN, revents: 0 }).collect(),
        }
    }

    /// A set over sockets (or anything with a descriptor).
    pub fn of<'a, T: AsRawFd + 'a>(items: impl IntoIterator<Item = &'a T>) -> PollSet {
        Self::readable(items.into_iter().map(|s| s.as_raw_fd()))
    }

    /// Number of descriptors in the set.
    pub fn len(&self) -> usize {
        self.fds.len()
    }

    /// Whether the set holds no descriptor.
    pub fn is_empty(&self) -> bool {
        self.fds.is_empty()
    }

    /// Waits up to `timeout` (nanosecond precision) for any descriptor to be
    /// readable; the number ready, 0 on timeout or on a signal.
    pub fn wait(&mut self, timeout: Duration) -> io::Result<usize> {
        let ts = libc::timespec {
            tv_sec: timeout.as_secs().min(libc::time_t::MAX as u64) as libc::time_t,
            tv_nsec: timeout.subsec_nanos() as libc::c_long,
        };
        for p in &mut self.fds {
            p.revents = 0;
        }
        // SAFETY: our own pollfd array with its length, a valid timespec,
        // and no signal mask change (null sigmask).
        let rc = unsafe {
            libc::ppoll(self.fds.as_mut_ptr(), self.fds.len() as libc::nfds_t, &ts, std::ptr::null())
        };
        if rc < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                return Ok(0);
            }
            return Err(e);
        }
        Ok(rc as usize)
    }

    /// Whether descriptor `i` was readable (or in error) at the last wait.
    pub fn ready(&self, i: usize) -> bool {
        self.fds[i].revents != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;
    use std::time::Instant;

    #[test]
    fn times_out_then_sees_a_datagram() {
        let a = UdpSocket::bind("127.0.0.1:0").unwrap();
        let b = UdpSocket::bind("127.0.0.1:0").unwrap();
        let mut p = PollSet::of([&a]);
        assert_eq!(p.len(), 1);
        let t = Instant::now();
        assert_eq!(p.wait(Duration::from_millis(30)).unwrap(), 0);
        assert!(t.elapsed() >= Duration::from_millis(25), "{:?}", t.elapsed());
        b.send_to(b"x", a.local_addr().unwrap()).unwrap();
        assert_eq!(p.wait(Duration::from_secs(5)).unwrap(), 1);
        assert!(p.ready(0));
    }

    #[test]
    fn a_closed_descriptor_is_reported_not_waited_for() {
        // POLLNVAL: an fd that is not open is "ready" at once.
        let mut p = PollSet::readable([999_999]);
        assert_eq!(p.wait(Duration::from_secs(5)).unwrap(), 1);
        assert!(p.ready(0));
    }
}
