//! A watchdog that undoes a probe of another process's `SO_REUSEPORT`
//! group however its caller ends (SIGKILL included).
//!
//! `rsskit steer` stops a server's workers (`SIGSTOP`) and attaches probe
//! programs (`ret k`) to measure the group's order. If rsskit died there,
//! the workers would stay stopped, or every connection would go to one
//! worker. So before it changes anything, it forks this watchdog: a child
//! in its own session (a signal to rsskit's process group does not reach
//! it) that holds the read end of a pipe, a copy of the group's socket and
//! a pidfd of each process to stop. When the pipe reaches EOF without a
//! "clean" byte (the caller died, or dropped the guard), the watchdog
//! detaches the group's program if a probe may have replaced it (told
//! "probing", not yet "final": the previous program stays otherwise) and
//! continues the processes, then exits.
//!
//! `PR_SET_PDEATHSIG` is the wrong tool here: it kills a child with its
//! parent, and this child must outlive it. Hand-written on `fork`: no
//! crate offers this, and the child runs only async-signal-safe system
//! calls on memory prepared before the fork (no allocation, no lock).

use crate::procnet::{PidFd, ProcNetError};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// Message: a probe program is about to replace the group's program.
const PROBING: u8 = b'P';
/// Message: the final program is attached (do not detach it).
const FINAL: u8 = b'F';
/// Message: finished cleanly, the caller continued the processes itself.
const CLEAN: u8 = b'C';

/// The caller's end of a running watchdog. Dropping it without
/// [`Watchdog::finish`] makes the watchdog act (as if the caller died).
#[derive(Debug)]
pub struct Watchdog {
    pid: libc::pid_t,
    tx: Option<OwnedFd>,
}

fn sys(what: &str) -> ProcNetError {
    ProcNetError::Sys { what: what.into(), source: io::Error::last_os_error() }
}

impl Watchdog {
    /// Starts the watchdog for stopping `pids` and probing the group of
    /// `group` (a descriptor of one of its sockets). Fails, having changed
    /// nothing, when a pid cannot be opened as a pidfd.
    pub fn start(pids: &[i32], group: &impl AsRawFd) -> Result<Watchdog, ProcNetError> {
        let pidfds: Vec<PidFd> = pids.iter().map(|&p| PidFd::open(p)).collect::<Result<_, _>>()?;
        let raw_pidfds: Vec<RawFd> = pidfds.iter().map(|p| p.as_raw_fd()).collect();
        let mut ends = [0 as RawFd; 2];
        // SAFETY: pipe2 fills the two-element array on success.
        if unsafe { libc::pipe2(ends.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(sys("pipe2 for the watchdog"));
        }
        // SAFETY: pipe2 just returned these descriptors; nobody else owns them.
        let (rx, tx) = unsafe { (OwnedFd::from_raw_fd(ends[0]), OwnedFd::from_raw_fd(ends[1])) };
        // The descriptors the child keeps, sorted (everything else is closed there).
        let mut keep: Vec<RawFd> = raw_pidfds.clone();
        keep.extend([rx.as_raw_fd(), group.as_raw_fd()]);
        keep.sort_unstable();
        let sock = group.as_raw_fd();
        let rxfd = rx.as_raw_fd();
        // SAFETY: fork(2); the child runs only `child_main` (async-signal-safe
        // system calls on the vectors above, never freed or resized there) and
        // leaves by _exit.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(sys("fork of the watchdog"));
        }
        if pid == 0 {
            child_main(rxfd, sock, &raw_pidfds, &keep);
        }
        drop(rx);
        Ok(Watchdog { pid, tx: Some(tx) })
    }

    /// The watchdog's process id.
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Tells the watchdog a probe program is about to be attached: from
    /// now on (until [`Watchdog::final_attached`]) it detaches the group's
    /// program should the caller die.
    pub fn probing(&self) -> io::Result<()> {
        self.send(PROBING)
    }

    /// Tells the watchdog the final program is attached: from now on it
    /// only continues the processes.
    pub fn final_attached(&self) -> io::Result<()> {
        self.send(FINAL)
    }

    fn send(&self, b: u8) -> io::Result<()> {
        let fd = self.tx.as_ref().expect("open until finish").as_raw_fd();
        // SAFETY: writes one byte from a live buffer to our pipe end.
        if unsafe { libc::write(fd, [b].as_ptr().cast(), 1) } != 1 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Finished cleanly (the caller continued the processes): the watchdog
    /// exits without acting, and is reaped.
    pub fn finish(mut self) {
        let _ = self.send(CLEAN);
        self.close_and_reap();
    }

    fn close_and_reap(&mut self) {
        if self.tx.take().is_some() {
            let mut st = 0;
            // SAFETY: waits for our own child; EINTR retried.
            while unsafe { libc::waitpid(self.pid, &mut st, 0) } < 0
                && io::Error::last_os_error().raw_os_error() == Some(libc::EINTR)
            {}
        }
    }
}

impl Drop for Watchdog {
    /// Without `finish`: the watchdog acts as if the caller had died
    /// (detach unless final, continue), and is reaped.
    fn drop(&mut self) {
        self.close_and_reap();
    }
}

/// The watchdog process. Only async-signal-safe system calls: the parent
/// may have had other threads holding locks at the fork.
fn child_main(rx: RawFd, sock: RawFd, pidfds: &[RawFd], keep: &[RawFd]) -> ! {
    // SAFETY: (whole function) plain system calls on descriptors this
    // process owns and on memory the parent prepared before the fork.
    unsafe {
        libc::setsid();
        libc::prctl(libc::PR_SET_NAME, c"rsskit-watchdog".as_ptr(), 0, 0, 0);
        for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGPIPE] {
            libc::signal(sig, libc::SIG_IGN);
        }
        // Close everything else (stdout/stderr pipes of whoever waits for
        // rsskit, the pipe's write end): between the kept descriptors.
        let mut from: u32 = 0;
        for &k in keep {
            if k as u32 > from {
                libc::syscall(libc::SYS_close_range, from, k as u32 - 1, 0);
            }
            from = k as u32 + 1;
        }
        libc::syscall(libc::SYS_close_range, from, u32::MAX, 0);
        let (mut probing, mut is_final) = (false, false);
        loop {
            let mut b = 0u8;
            let n = libc::read(rx, (&mut b as *mut u8).cast(), 1);
            if n == 1 && b == CLEAN {
                libc::_exit(0);
            }
            if n == 1 {
                probing |= b == PROBING;
                is_final |= b == FINAL;
                continue;
            }
            if n < 0 && *libc::__errno_location() == libc::EINTR {
                continue;
            }
            break; // EOF (or an error): the caller is gone.
        }
        if probing && !is_final {
            // Before the processes continue: no probe program may meet their traffic.
            let zero: libc::c_int = 0;
            libc::setsockopt(
                sock,
                libc::SOL_SOCKET,
                libc::SO_DETACH_REUSEPORT_BPF,
                (&zero as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            );
        }
        for &p in pidfds {
            libc::syscall(libc::SYS_pidfd_send_signal, p, libc::SIGCONT, std::ptr::null::<u8>(), 0);
        }
        libc::_exit(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::procnet::Stopped;
    use crate::socket::{udp_socket, UdpOptions};
    use rsskit_core::cbpf::cpu_program;
    use std::process::Command;
    use std::time::Duration;

    fn state(pid: u32) -> char {
        let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        s[s.rfind(')').unwrap() + 2..].chars().next().unwrap()
    }

    /// A sleeper stopped and a program attached, as during a probe.
    fn probing() -> (std::process::Child, std::net::UdpSocket, std::mem::ManuallyDrop<Stopped>) {
        let child = Command::new("sleep").arg("30").spawn().unwrap();
        let opts = UdpOptions { reuseport: true, ..Default::default() };
        let s: std::net::UdpSocket = udp_socket("127.0.0.1:0".parse().unwrap(), &opts).unwrap().into();
        crate::bpf::attach_reuseport(&cpu_program(&[0]).unwrap(), &s).unwrap();
        // Never continued by us: only the watchdog may.
        let stopped = Stopped::new(&[child.id() as i32], Duration::from_secs(5)).unwrap();
        assert_eq!(state(child.id()), 'T');
        (child, s, std::mem::ManuallyDrop::new(stopped))
    }

    #[test]
    fn abandoned_detaches_and_continues() {
        let (mut child, s, _stopped) = probing();
        let w = Watchdog::start(&[child.id() as i32], &s).unwrap();
        w.probing().unwrap();
        drop(w); // as if rsskit died: pipe EOF
        assert_ne!(state(child.id()), 'T', "continued");
        assert!(!crate::reuseport::detach(&s).unwrap(), "the watchdog detached the program");
        child.kill().unwrap();
        child.wait().unwrap();
    }

    #[test]
    fn abandoned_before_probing_keeps_the_previous_program() {
        let (mut child, s, _stopped) = probing();
        let w = Watchdog::start(&[child.id() as i32], &s).unwrap();
        drop(w);
        assert_ne!(state(child.id()), 'T', "continued");
        assert!(crate::reuseport::detach(&s).unwrap(), "the previous program stayed");
        child.kill().unwrap();
        child.wait().unwrap();
    }

    #[test]
    fn final_program_stays_and_clean_finish_does_nothing() {
        let (mut child, s, _stopped) = probing();
        let w = Watchdog::start(&[child.id() as i32], &s).unwrap();
        w.probing().unwrap();
        w.final_attached().unwrap();
        drop(w);
        assert_ne!(state(child.id()), 'T', "continued");
        assert!(crate::reuseport::detach(&s).unwrap(), "the final program stayed");
        // Clean: the watchdog neither continues nor detaches.
        crate::bpf::attach_reuseport(&cpu_program(&[0]).unwrap(), &s).unwrap();
        let again = Stopped::new(&[child.id() as i32], Duration::from_secs(5)).unwrap();
        std::mem::forget(again);
        let w = Watchdog::start(&[child.id() as i32], &s).unwrap();
        w.finish();
        assert_eq!(state(child.id()), 'T', "left to the caller");
        assert!(crate::reuseport::detach(&s).unwrap());
        child.kill().unwrap();
        child.wait().unwrap();
    }

    #[test]
    fn a_missing_process_is_refused_before_any_fork() {
        let opts = UdpOptions { reuseport: true, ..Default::default() };
        let s = udp_socket("127.0.0.1:0".parse().unwrap(), &opts).unwrap();
        let mut c = Command::new("true").spawn().unwrap();
        let pid = c.id() as i32;
        c.wait().unwrap();
        assert!(matches!(Watchdog::start(&[pid], &s), Err(ProcNetError::NoProcess(p)) if p == pid));
    }
}
