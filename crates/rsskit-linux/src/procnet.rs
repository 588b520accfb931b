//! Another process's sockets, seen from the outside: its network
//! namespace's socket tables (`/proc/PID/net/{tcp,tcp6,udp,udp6}`), its
//! file descriptors and the socket inodes behind them (`/proc/PID/fd`),
//! what its epoll instances watch (`/proc/PID/fdinfo`, `tfd:` lines), its
//! children and threads and their CPU affinity, copies of its descriptors
//! (`pidfd_open` + `pidfd_getfd`, Linux >= 5.6, ptrace permission), and a
//! guard that holds a set of processes stopped (`SIGSTOP` ... `SIGCONT`).
//!
//! `rsskit steer` builds on this to find a server's `SO_REUSEPORT` group
//! and which worker process serves each socket of it.

use std::collections::BTreeMap;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};
use thiserror::Error;

/// What can go wrong looking at another process.
#[derive(Debug, Error)]
pub enum ProcNetError {
    /// The pid is not (or no longer) in `/proc`.
    #[error("process {0} does not exist (or has exited)")]
    NoProcess(i32),
    /// A `/proc` file could not be read.
    #[error("reading {path}")]
    Read {
        /// The file.
        path: String,
        /// The read error.
        #[source]
        source: io::Error,
    },
    /// A line of a socket table did not parse.
    #[error("{path}: cannot parse line {line:?}")]
    Parse {
        /// The file.
        path: String,
        /// The line.
        line: String,
    },
    /// A system call on the process failed (`pidfd_open`, `pidfd_getfd`, a signal).
    #[error("{what}")]
    Sys {
        /// What was being done.
        what: String,
        /// The call's error.
        #[source]
        source: io::Error,
    },
}

/// Transport of a socket table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SockProto {
    /// `/proc/net/tcp[6]`.
    Tcp,
    /// `/proc/net/udp[6]`.
    Udp,
}

impl SockProto {
    /// The lowercase name (`tcp`, `udp`).
    pub fn name(self) -> &'static str {
        match self {
            SockProto::Tcp => "tcp",
            SockProto::Udp => "udp",
        }
    }
}

/// `TCP_LISTEN` in the `st` column.
pub const STATE_LISTEN: u8 = 0x0a;
/// `TCP_CLOSE`: an unconnected UDP socket.
pub const STATE_CLOSE: u8 = 0x07;

/// One line of `/proc/net/{tcp,udp}[6]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SocketEntry {
    /// Which table the line came from.
    pub proto: SockProto,
    /// The local address and port.
    pub local: SocketAddr,
    /// The remote address and port (unspecified for listeners and unconnected UDP).
    pub remote: SocketAddr,
    /// Kernel `TCP_*` state number ([`STATE_LISTEN`], [`STATE_CLOSE`]).
    pub state: u8,
    /// Socket inode (0 for sockets no file refers to, e.g. not yet accepted).
    pub inode: u64,
}

/// An address column: `0100007F:1F90` (IPv4, host-order u32 printed as hex)
/// or 32 hex digits (IPv6, four host-order u32 words) then `:PORT`.
fn parse_addr(s: &str) -> Option<SocketAddr> {
    let (a, p) = s.split_once(':')?;
    let port = u16::from_str_radix(p, 16).ok()?;
    let ip = match a.len() {
        8 => IpAddr::V4(Ipv4Addr::from(u32::from_str_radix(a, 16).ok()?.to_ne_bytes())),
        32 => {
            let mut b = [0u8; 16];
            for w in 0..4 {
                let v = u32::from_str_radix(&a[8 * w..8 * w + 8], 16).ok()?;
                b[4 * w..4 * w + 4].copy_from_slice(&v.to_ne_bytes());
            }
            IpAddr::V6(Ipv6Addr::from(b))
        }
        _ => return None,
    };
    Some(SocketAddr::new(ip, port))
}

/// Parses the text of one `/proc/net/{tcp,udp}[6]` file (`path` names it in errors).
pub fn parse_socket_table(
    text: &str,
    proto: SockProto,
    path: &str,
) -> Result<Vec<SocketEntry>, ProcNetError> {
    let mut out = Vec::new();
    for line in text.lines().skip(1) {
        let f: Vec<&str> = line.split_whitespace().collect();
        let bad = || ProcNetError::Parse { path: path.into(), line: line.into() };
        if f.len() < 10 {
            return Err(bad());
        }
        out.push(SocketEntry {
            proto,
            local: parse_addr(f[1]).ok_or_else(bad)?,
            remote: parse_addr(f[2]).ok_or_else(bad)?,
            state: u8::from_str_radix(f[3], 16).map_err(|_| bad())?,
            inode: f[9].parse().map_err(|_| bad())?,
        });
    }
    Ok(out)
}

/// Every `proto` socket (IPv4 and IPv6) of the network namespace `pid` is in.
pub fn sockets_of_netns(pid: i32, proto: SockProto) -> Result<Vec<SocketEntry>, ProcNetError> {
    let mut out = Vec::new();
    for suffix in ["", "6"] {
        let path = format!("/proc/{pid}/net/{}{suffix}", proto.name());
        match std::fs::read_to_string(&path) {
            Ok(t) => out.extend(parse_socket_table(&t, proto, &path)?),
            // No IPv6 in this kernel/namespace: nothing to list.
            Err(e) if suffix == "6" && e.kind() == io::ErrorKind::NotFound => {}
            Err(_) if !exists(pid) => return Err(ProcNetError::NoProcess(pid)),
            Err(source) => return Err(ProcNetError::Read { path, source }),
        }
    }
    Ok(out)
}

/// Whether process `pid` exists.
pub fn exists(pid: i32) -> bool {
    pid > 0 && std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// Whether this process may signal `pid` (`kill(pid, 0)`): the check
/// before stopping it, so a refusal comes before anything changed.
pub fn may_signal(pid: i32) -> io::Result<()> {
    // SAFETY: kill(2) with signal 0 only checks existence and permission.
    if unsafe { libc::kill(pid, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `(fd, inode)` of every socket descriptor of `pid` (`socket:[INODE]` links).
pub fn socket_fds(pid: i32) -> Result<Vec<(RawFd, u64)>, ProcNetError> {
    Ok(fd_links(pid)?
        .into_iter()
        .filter_map(|(fd, l)| Some((fd, l.strip_prefix("socket:[")?.strip_suffix(']')?.parse().ok()?)))
        .collect())
}

/// `(fd, link target)` of every descriptor of `pid`; descriptors closed
/// while we look are skipped.
fn fd_links(pid: i32) -> Result<Vec<(RawFd, String)>, ProcNetError> {
    let dir = format!("/proc/{pid}/fd");
    let rd = std::fs::read_dir(&dir).map_err(|source| {
        if exists(pid) {
            ProcNetError::Read { path: dir.clone(), source }
        } else {
            ProcNetError::NoProcess(pid)
        }
    })?;
    let mut out = Vec::new();
    for e in rd.flatten() {
        let Some(fd) = e.file_name().to_str().and_then(|s| s.parse::<RawFd>().ok()) else { continue };
        if let Ok(l) = std::fs::read_link(e.path()) {
            out.push((fd, l.to_string_lossy().into_owned()));
        }
    }
    out.sort();
    Ok(out)
}

/// Processes holding a BPF link to program `prog_id` (a descriptor
/// `anon_inode:bpf_link` whose `/proc/PID/fdinfo` says `prog_id: ID`),
/// sorted; processes that cannot be read are skipped.
pub fn bpf_link_holders(prog_id: u32) -> Vec<i32> {
    let Ok(rd) = std::fs::read_dir("/proc") else { return Vec::new() };
    let mut out = Vec::new();
    for e in rd.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else { continue };
        let Ok(links) = fd_links(pid) else { continue };
        let holds = links.iter().filter(|(_, l)| l == "anon_inode:bpf_link").any(|(fd, _)| {
            std::fs::read_to_string(format!("/proc/{pid}/fdinfo/{fd}"))
                .is_ok_and(|t| parse_fdinfo_prog_id(&t) == Some(prog_id))
        });
        if holds {
            out.push(pid);
        }
    }
    out.sort_unstable();
    out
}

/// The `prog_id:` of a BPF link's fdinfo text.
pub fn parse_fdinfo_prog_id(text: &str) -> Option<u32> {
    text.lines().find_map(|l| l.strip_prefix("prog_id:")).and_then(|v| v.trim().parse().ok())
}

/// Inodes of the files registered in any epoll instance of `pid` (the
/// `tfd: ... ino:HEX` lines of `/proc/PID/fdinfo/EPFD`).
pub fn epoll_watched_inodes(pid: i32) -> Result<Vec<u64>, ProcNetError> {
    let mut out = Vec::new();
    for (fd, link) in fd_links(pid)? {
        if link != "anon_inode:[eventpoll]" {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/fdinfo/{fd}")) else { continue };
        out.extend(parse_epoll_fdinfo(&text));
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

/// The target inodes of an epoll fdinfo text.
pub fn parse_epoll_fdinfo(text: &str) -> Vec<u64> {
    text.lines()
        .filter(|l| l.starts_with("tfd:"))
        .filter_map(|l| l.split_whitespace().find_map(|w| w.strip_prefix("ino:")))
        .filter_map(|h| u64::from_str_radix(h, 16).ok())
        .collect()
}

/// State letter and parent of `pid` (`/proc/PID/stat`).
fn stat_state_ppid(path: &str) -> Option<(char, i32)> {
    let s = std::fs::read_to_string(path).ok()?;
    // The command name may contain spaces and parentheses: fields follow the last ')'.
    let rest = &s[s.rfind(')')? + 1..];
    let mut f = rest.split_whitespace();
    let state = f.next()?.chars().next()?;
    let ppid = f.next()?.parse().ok()?;
    Some((state, ppid))
}

/// `pid` and all its descendants, parents before children.
pub fn process_tree(pid: i32) -> Result<Vec<i32>, ProcNetError> {
    if !exists(pid) {
        return Err(ProcNetError::NoProcess(pid));
    }
    let mut children: BTreeMap<i32, Vec<i32>> = BTreeMap::new();
    let rd =
        std::fs::read_dir("/proc").map_err(|source| ProcNetError::Read { path: "/proc".into(), source })?;
    for e in rd.flatten() {
        let Some(p) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else { continue };
        if let Some((_, ppid)) = stat_state_ppid(&format!("/proc/{p}/stat")) {
            children.entry(ppid).or_default().push(p);
        }
    }
    let mut out = vec![pid];
    let mut i = 0;
    while i < out.len() {
        if let Some(c) = children.get(&out[i]) {
            out.extend(c);
        }
        i += 1;
    }
    Ok(out)
}

/// Thread ids of `pid`.
pub fn threads(pid: i32) -> Result<Vec<i32>, ProcNetError> {
    let dir = format!("/proc/{pid}/task");
    let rd = std::fs::read_dir(&dir).map_err(|_| ProcNetError::NoProcess(pid))?;
    let mut t: Vec<i32> = rd.flatten().filter_map(|e| e.file_name().to_str()?.parse().ok()).collect();
    t.sort_unstable();
    Ok(t)
}

/// CPUs thread `tid` may run on (`sched_getaffinity(tid)`).
pub fn thread_affinity(tid: i32) -> Result<Vec<usize>, ProcNetError> {
    // SAFETY: cpu_set_t is plain data; all-zero is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: the kernel writes at most size_of::<cpu_set_t>() bytes into `set`.
    let rc = unsafe { libc::sched_getaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if rc != 0 {
        return Err(ProcNetError::Sys {
            what: format!("sched_getaffinity({tid})"),
            source: io::Error::last_os_error(),
        });
    }
    // SAFETY: CPU_ISSET reads within the set for every index < CPU_SETSIZE.
    Ok((0..libc::CPU_SETSIZE as usize).filter(|&c| unsafe { libc::CPU_ISSET(c, &set) }).collect())
}

/// The CPU set of each thread of `pid`, distinct sets only (one entry if
/// all threads agree).
pub fn process_affinity(pid: i32) -> Result<Vec<Vec<usize>>, ProcNetError> {
    let mut sets: Vec<Vec<usize>> = Vec::new();
    for t in threads(pid)? {
        match thread_affinity(t) {
            Ok(s) => {
                if !sets.contains(&s) {
                    sets.push(s);
                }
            }
            // A thread that exited meanwhile.
            Err(_) if !std::path::Path::new(&format!("/proc/{pid}/task/{t}")).exists() => {}
            Err(e) => return Err(e),
        }
    }
    Ok(sets)
}

/// Whether `pid` and `/proc/self` live in different network namespaces.
pub fn other_netns(pid: i32) -> Result<bool, ProcNetError> {
    let theirs = std::fs::read_link(format!("/proc/{pid}/ns/net"))
        .map_err(|source| ProcNetError::Read { path: format!("/proc/{pid}/ns/net"), source })?;
    let ours = std::fs::read_link("/proc/self/ns/net")
        .map_err(|source| ProcNetError::Read { path: "/proc/self/ns/net".into(), source })?;
    Ok(theirs != ours)
}

/// Moves the calling *thread* into the network namespace of `pid`
/// (`setns(CLONE_NEWNET)` only changes the calling thread).
pub fn enter_netns_of(pid: i32) -> Result<(), ProcNetError> {
    let path = format!("/proc/{pid}/ns/net");
    let f = std::fs::File::open(&path).map_err(|source| ProcNetError::Read { path: path.clone(), source })?;
    // SAFETY: `f` is an open namespace file for the duration of the call.
    let rc = unsafe { libc::setns(std::os::fd::AsRawFd::as_raw_fd(&f), libc::CLONE_NEWNET) };
    if rc != 0 {
        return Err(ProcNetError::Sys { what: format!("setns({path})"), source: io::Error::last_os_error() });
    }
    Ok(())
}

/// A process file descriptor (`pidfd_open`).
#[derive(Debug)]
pub struct PidFd {
    pid: i32,
    fd: OwnedFd,
}

impl PidFd {
    /// `pidfd_open(pid, 0)` (Linux >= 5.3).
    pub fn open(pid: i32) -> Result<PidFd, ProcNetError> {
        // SAFETY: pidfd_open takes (pid, flags) and returns a new fd or -1.
        let rc = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        if rc < 0 {
            let e = io::Error::last_os_error();
            return Err(if e.raw_os_error() == Some(libc::ESRCH) {
                ProcNetError::NoProcess(pid)
            } else {
                ProcNetError::Sys { what: format!("pidfd_open({pid})"), source: e }
            });
        }
        // SAFETY: the kernel just returned this fd to us; nobody else owns it.
        Ok(PidFd { pid, fd: unsafe { OwnedFd::from_raw_fd(rc as RawFd) } })
    }

    /// A copy of the target's descriptor `fd` in this process
    /// (`pidfd_getfd`, Linux >= 5.6, needs ptrace permission over the target).
    pub fn get_fd(&self, fd: RawFd) -> Result<OwnedFd, ProcNetError> {
        let me = std::os::fd::AsRawFd::as_raw_fd(&self.fd);
        // SAFETY: pidfd_getfd takes (pidfd, targetfd, flags) and returns a new fd or -1.
        let rc = unsafe { libc::syscall(libc::SYS_pidfd_getfd, me, fd, 0) };
        if rc < 0 {
            let e = io::Error::last_os_error();
            let hint = match e.raw_os_error() {
                Some(libc::EPERM) => " (needs ptrace permission over the process: run as its user or root)",
                Some(libc::ENOSYS) => " (needs Linux 5.6 or later)",
                _ => "",
            };
            return Err(ProcNetError::Sys {
                what: format!("pidfd_getfd(pid {}, fd {fd}){hint}", self.pid),
                source: e,
            });
        }
        // SAFETY: the kernel just installed this fd for us; nobody else owns it.
        Ok(unsafe { OwnedFd::from_raw_fd(rc as RawFd) })
    }
}

impl std::os::fd::AsRawFd for PidFd {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// Holds a set of processes stopped (`SIGSTOP`) until dropped (`SIGCONT`):
/// while stopped, none of them accepts or reads, so what arrives on their
/// sockets stays queued where the kernel put it.
#[derive(Debug)]
pub struct Stopped {
    pids: Vec<i32>,
}

impl Stopped {
    /// Stops every process of `pids` and waits (at most `within`) until
    /// all their threads are stopped; on failure the ones stopped so far
    /// are continued.
    pub fn new(pids: &[i32], within: Duration) -> Result<Stopped, ProcNetError> {
        let mut g = Stopped { pids: Vec::new() };
        for &p in pids {
            // SAFETY: kill(2) with a plain pid and signal.
            if unsafe { libc::kill(p, libc::SIGSTOP) } != 0 {
                return Err(ProcNetError::Sys {
                    what: format!("SIGSTOP {p}"),
                    source: io::Error::last_os_error(),
                });
            }
            g.pids.push(p);
        }
        let t = Instant::now();
        loop {
            let all = pids.iter().all(|&p| {
                threads(p).map_or(true, |ts| {
                    ts.iter().all(|t| {
                        stat_state_ppid(&format!("/proc/{p}/task/{t}/stat"))
                            .is_none_or(|(s, _)| matches!(s, 'T' | 't' | 'Z' | 'X'))
                    })
                })
            });
            if all {
                return Ok(g);
            }
            if t.elapsed() > within {
                return Err(ProcNetError::Sys {
                    what: format!("processes {pids:?} did not stop within {within:?}"),
                    source: io::Error::from(io::ErrorKind::TimedOut),
                });
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        for &p in &self.pids {
            // SAFETY: kill(2) with a plain pid and signal.
            unsafe { libc::kill(p, libc::SIGCONT) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    #[test]
    fn parses_socket_tables() {
        let v4 = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 12345 1 0000000000000000 100 0 0 10 0\n";
        let e = parse_socket_table(v4, SockProto::Tcp, "t").unwrap();
        assert_eq!(e[0].local, "127.0.0.1:8080".parse().unwrap());
        assert_eq!(e[0].state, STATE_LISTEN);
        assert_eq!(e[0].inode, 12345);
        let v6 = "  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
   0: 00000000000000000000000001000000:0050 00000000000000000000000000000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 777 2 0000000000000000 0\n";
        let e = parse_socket_table(v6, SockProto::Udp, "u").unwrap();
        assert_eq!(e[0].local, "[::1]:80".parse().unwrap());
        assert_eq!(e[0].state, STATE_CLOSE);
        let err = parse_socket_table("hdr\n 0: zz\n", SockProto::Udp, "/x").unwrap_err().to_string();
        assert!(err.starts_with("/x: cannot parse line"), "{err}");
    }

    #[test]
    fn bpf_link_fdinfo_prog_id() {
        let t = "pos:\t0\nflags:\t02000000\nmnt_id:\t16\nino:\t1060\nlink_type:\txdp\nlink_id:\t7\n\
prog_tag:\t0123456789abcdef\nprog_id:\t42\nifindex:\t5\n";
        assert_eq!(parse_fdinfo_prog_id(t), Some(42));
        assert_eq!(parse_fdinfo_prog_id("link_type:\txdp\n"), None);
        assert!(bpf_link_holders(u32::MAX).is_empty());
    }

    #[test]
    fn epoll_fdinfo_lines() {
        let t = "pos:\t0\nflags:\t02\nmnt_id:\t15\nino:\t1057\n\
tfd:        6 events:       19 data:                6  pos:0 ino:3039 sdev:8\n\
tfd:        7 events:       19 data:                7  pos:0 ino:303a sdev:8\n";
        assert_eq!(parse_epoll_fdinfo(t), vec![0x3039, 0x303a]);
    }

    #[test]
    fn own_sockets_fds_epoll_and_getfd() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let me = std::process::id() as i32;
        let table = sockets_of_netns(me, SockProto::Tcp).unwrap();
        let ent = table
            .iter()
            .find(|e| e.local.port() == port && e.state == STATE_LISTEN)
            .expect("listener listed");
        let fds = socket_fds(me).unwrap();
        assert!(fds.contains(&(l.as_raw_fd(), ent.inode)), "fd {} -> inode {}", l.as_raw_fd(), ent.inode);
        // Registered in an epoll instance: listed by inode.
        let ep = crate::epoll::Epoll::new(4).unwrap();
        ep.add(l.as_raw_fd(), libc::EPOLLIN as u32, 1).unwrap();
        assert!(epoll_watched_inodes(me).unwrap().contains(&ent.inode));
        // A copy through pidfd_getfd is the same socket.
        let copy = PidFd::open(me).unwrap().get_fd(l.as_raw_fd()).unwrap();
        let cfds = socket_fds(me).unwrap();
        assert!(cfds.contains(&(copy.as_raw_fd(), ent.inode)));
        assert!(process_tree(me).unwrap().starts_with(&[me]));
        assert!(!process_affinity(me).unwrap().is_empty());
        assert!(matches!(process_tree(-5), Err(ProcNetError::NoProcess(-5))));
    }
}
