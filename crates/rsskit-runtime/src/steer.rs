//! Socket steering: how datagrams (UDP) or connections (TCP listeners)
//! reach the worker sockets.
//!
//! - [`Steer::Cpu`]: one SO_REUSEPORT group, a classic BPF program returning
//!   the socket of the CPU the kernel is processing the datagram on;
//! - [`Steer::Toeplitz`]: one group, a BPF program computing the Toeplitz
//!   hash in the kernel and returning the socket of the bucket's owner;
//! - [`Steer::Ebpf`]: one group, an eBPF `SK_REUSEPORT` program computing
//!   the same bucket and picking the socket through maps that can change
//!   live (`rsskit_linux::ebpf::reuseport`); where eBPF cannot be loaded,
//!   the classic `toeplitz` program with the reason in
//!   [`SteeredGroup::fallback`];
//! - [`Steer::Kernel`]: one group, the kernel's own reuseport hash;
//! - [`Steer::Shared`]: one socket, read by every worker (the anti-pattern).
//!
//! Socket `i` of the group (bind order) belongs to worker `i`. The same
//! modes serve `rsskit udp-echo` ([`Transport::Udp`]) and `rsskit
//! http-serve` ([`Transport::Tcp`]: the programs then see the SYN).

use rsskit_core::cbpf::{cpu_program, BpfError};
use rsskit_core::{L4Proto, RssPolicy};
use rsskit_linux::bpf::attach_reuseport;
use rsskit_linux::ebpf::reuseport::{ReuseportError, ReuseportSteering};
use rsskit_linux::socket::{tcp_bound, tcp_listener, udp_socket, TcpListenOptions, UdpOptions};
use socket2::Socket;
use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::str::FromStr;

/// Why a steered group could not be built.
#[derive(Debug, thiserror::Error)]
pub enum SteerError {
    /// The policy has no workers to give sockets to.
    #[error("no workers")]
    NoWorkers,
    /// Some socket already uses the UDP port: joining its reuseport group
    /// would share (and steal) its datagrams.
    #[error("binding UDP {bind}: port {} is already in use ({used} socket(s))", bind.port())]
    UdpPortInUse {
        /// The address asked for.
        bind: SocketAddr,
        /// Sockets found on the port (`/proc/net/udp`).
        used: usize,
    },
    /// Something already listens on the TCP port.
    #[error("binding TCP {bind}: port {} is already in use", bind.port())]
    TcpPortInUse {
        /// The address asked for.
        bind: SocketAddr,
    },
    /// Creating, configuring or binding a socket of the group.
    #[error(transparent)]
    Socket(#[from] io::Error),
    /// `dup` of the one socket in `shared` mode.
    #[error("duplicating the shared socket")]
    Duplicate(#[source] io::Error),
    /// `getsockname` on a bound socket.
    #[error("getsockname")]
    LocalAddr(#[source] io::Error),
    /// A bound socket reported a non-IP address.
    #[error("bound socket has no IP address")]
    NoIpAddress,
    /// The mode's BPF program could not be generated.
    #[error(transparent)]
    Program(#[from] BpfError),
    /// The kernel refused the mode's BPF program.
    #[error("attaching the {mode} program")]
    Attach {
        /// The mode whose program it was.
        mode: Steer,
        /// What `setsockopt(SO_ATTACH_REUSEPORT_CBPF)` said.
        #[source]
        source: io::Error,
    },
}

/// Shorthand for this module's results.
pub type Result<T, E = SteerError> = std::result::Result<T, E>;

/// Steering mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Steer {
    /// A classic BPF program picks the socket of the CPU processing the packet.
    Cpu,
    /// A classic BPF program computes the Toeplitz hash and picks the socket of the bucket's owner.
    Toeplitz,
    /// The kernel's own reuseport hash picks the socket (no program).
    Kernel,
    /// One socket shared by every worker (the anti-pattern, for comparison).
    Shared,
    /// An eBPF program computes the Toeplitz bucket and picks the owner's
    /// socket through maps, which can be changed live (`--rebalance`).
    Ebpf,
}

impl Steer {
    /// All modes.
    pub const ALL: [Steer; 5] = [Steer::Cpu, Steer::Toeplitz, Steer::Kernel, Steer::Shared, Steer::Ebpf];

    /// Name on the command line and in JSON.
    pub fn name(self) -> &'static str {
        match self {
            Steer::Cpu => "cpu",
            Steer::Toeplitz => "toeplitz",
            Steer::Kernel => "kernel",
            Steer::Shared => "shared",
            Steer::Ebpf => "ebpf",
        }
    }
}

impl fmt::Display for Steer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Steer {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Steer::ALL
            .into_iter()
            .find(|m| m.name() == s)
            .ok_or_else(|| format!("'{s}' is not a steering mode: cpu, toeplitz, kernel, shared or ebpf"))
    }
}

/// The sockets to build and their options (`reuseport` is set by [`build`]
/// as the mode needs).
#[derive(Debug, Clone)]
pub enum Transport {
    /// UDP sockets.
    Udp(UdpOptions),
    /// Non-blocking TCP listeners.
    Tcp(TcpListenOptions),
}

impl Transport {
    fn socket(&self, addr: SocketAddr, reuseport: bool) -> Result<Socket> {
        Ok(match self {
            Transport::Udp(o) => udp_socket(addr, &UdpOptions { reuseport, ..o.clone() })?,
            Transport::Tcp(o) => tcp_listener(addr, &TcpListenOptions { reuseport, ..o.clone() })?,
        })
    }
}

/// What [`build`] needs to know.
#[derive(Debug, Clone)]
pub struct SteerSpec<'a> {
    /// How packets or connections reach the sockets.
    pub mode: Steer,
    /// Where to bind; port 0 picks one port for the whole group.
    pub bind: SocketAddr,
    /// The workers (socket `i` belongs to worker `i`), their CPUs, and the
    /// key, hash types and bucket table the `toeplitz` program computes.
    pub policy: &'a RssPolicy,
    /// UDP sockets or TCP listeners, and their options.
    pub transport: Transport,
}

/// The sockets of a steering setup.
#[derive(Debug)]
pub struct SteeredGroup {
    /// One per worker, in worker order (`shared`: duplicates of one socket).
    pub sockets: Vec<Socket>,
    /// The bound address (with the port the kernel picked for port 0).
    pub local: SocketAddr,
    /// Instructions of the attached BPF program, if any.
    pub program_len: Option<usize>,
    /// UDP `cpu` mode with workers on only some CPUs: one more group
    /// socket per online CPU without a worker, `(cpu, socket)`, so that the
    /// kernel never falls back to its hash and every datagram's processing
    /// CPU is known. The caller hands each to some worker to read. Always
    /// empty for TCP (a listener nobody polls would strand its
    /// connections; the kernel's hash picks a worker's listener instead).
    pub extra: Vec<(usize, Socket)>,
    /// The mode in force: [`Steer::Toeplitz`] when `ebpf` fell back.
    pub mode: Steer,
    /// `ebpf` mode: the loaded program and its live maps.
    pub ebpf: Option<ReuseportSteering>,
    /// `ebpf` mode fell back to the classic `toeplitz` program: why (one line).
    pub fallback: Option<String>,
}

/// Binds the sockets for `spec` and attaches the mode's program.
///
/// Refuses a port some other socket already uses: a second reuseport
/// group member would silently share (and steal) its traffic.
pub fn build(spec: &SteerSpec<'_>) -> Result<SteeredGroup> {
    let cpus: Vec<usize> = spec.policy.worker_cpus().iter().map(|c| c.as_usize()).collect();
    let n = cpus.len();
    if n == 0 {
        return Err(SteerError::NoWorkers);
    }
    let tcp = matches!(spec.transport, Transport::Tcp(_));
    // Where the group binds; for UDP port 0 the first socket picks the port.
    let bind = if tcp { tcp_port_free(spec.bind)? } else { udp_port_free(spec.bind)? };
    if spec.mode == Steer::Shared {
        let s = spec.transport.socket(bind, false)?;
        let local = local_of(&s)?;
        let mut sockets = Vec::with_capacity(n);
        for _ in 1..n {
            sockets.push(s.try_clone().map_err(SteerError::Duplicate)?);
        }
        sockets.insert(0, s);
        return Ok(SteeredGroup {
            sockets,
            local,
            program_len: None,
            extra: Vec::new(),
            mode: Steer::Shared,
            ebpf: None,
            fallback: None,
        });
    }
    let first = spec.transport.socket(bind, true)?;
    let local = local_of(&first)?;
    let mut sockets = vec![first];
    for _ in 1..n {
        sockets.push(spec.transport.socket(local, true)?);
    }
    let mut extra = Vec::new();
    if spec.mode == Steer::Cpu && !tcp {
        for cpu in rsskit_linux::cpulist::online() {
            if !cpus.contains(&cpu) {
                extra.push((cpu, spec.transport.socket(local, true)?));
            }
        }
    }
    let proto = if tcp { L4Proto::Tcp } else { L4Proto::Udp };
    let (mut mode, mut fallback) = (spec.mode, None);
    // Both hashing programs compute plain Toeplitz: a symmetric NIC's
    // transform would put flows on other workers than the NIC's queues.
    if matches!(spec.mode, Steer::Ebpf | Steer::Toeplitz) && spec.policy.xfrm().is_symmetric() {
        return Err(SteerError::Program(BpfError::InputXfrm(spec.policy.xfrm())));
    }
    if spec.mode == Steer::Ebpf {
        match ebpf_steering(spec.policy, proto, &sockets) {
            Ok(st) => {
                let program_len = Some(st.insns());
                return Ok(SteeredGroup {
                    sockets,
                    local,
                    program_len,
                    extra,
                    mode,
                    ebpf: Some(st),
                    fallback,
                });
            }
            Err(e) => {
                mode = Steer::Toeplitz;
                fallback =
                    Some(format!("eBPF reuseport steering unavailable ({e}): classic BPF toeplitz instead"));
            }
        }
    }
    let program = match mode {
        Steer::Cpu => {
            let by_index: Vec<usize> = cpus.iter().copied().chain(extra.iter().map(|e| e.0)).collect();
            Some(cpu_program(&by_index)?)
        }
        Steer::Toeplitz => {
            // The program parses one family: the group's.
            Some(spec.policy.toeplitz_program(spec.policy.hash_type(local.is_ipv6(), proto, false))?)
        }
        Steer::Kernel | Steer::Shared | Steer::Ebpf => None,
    };
    let program_len = program.as_ref().map(|p| p.len());
    if let Some(p) = program {
        attach_reuseport(&p, &sockets[0]).map_err(|source| SteerError::Attach { mode: spec.mode, source })?;
    }
    Ok(SteeredGroup { sockets, local, program_len, extra, mode, ebpf: None, fallback })
}

/// Loads the eBPF program for `policy`, puts socket `i` in slot `i` and
/// attaches it to the group.
fn ebpf_steering(
    policy: &RssPolicy,
    proto: L4Proto,
    sockets: &[Socket],
) -> Result<ReuseportSteering, ReuseportError> {
    let mut st = ReuseportSteering::load(policy, proto)?;
    for (w, s) in sockets.iter().enumerate() {
        st.insert_socket(w as u32, s.as_fd())?;
    }
    st.attach(sockets[0].as_fd())?;
    Ok(st)
}

/// UDP: refuses a port with sockets on it (`/proc/net/udp`); returns `bind`.
fn udp_port_free(bind: SocketAddr) -> Result<SocketAddr> {
    if bind.port() != 0 {
        let used =
            rsskit_linux::snmp::socket_drops(bind.port(), bind.is_ipv6()).map(|d| d.sockets).unwrap_or(0);
        if used > 0 {
            return Err(SteerError::UdpPortInUse { bind, used });
        }
    }
    Ok(bind)
}

/// TCP: a probe bound without `SO_REUSEPORT` fails if anything listens
/// there; returns the address with the port picked for port 0.
fn tcp_port_free(bind: SocketAddr) -> Result<SocketAddr> {
    let probe = tcp_bound(bind, false).map_err(|e| {
        if e.kind() == io::ErrorKind::AddrInUse {
            SteerError::TcpPortInUse { bind }
        } else {
            SteerError::Socket(e)
        }
    })?;
    local_of(&probe)
}

fn local_of(s: &Socket) -> Result<SocketAddr> {
    s.local_addr().map_err(SteerError::LocalAddr)?.as_socket().ok_or(SteerError::NoIpAddress)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for m in Steer::ALL {
            assert_eq!(m.name().parse::<Steer>(), Ok(m));
        }
        assert!("rss".parse::<Steer>().unwrap_err().contains("cpu, toeplitz"));
    }

    use rsskit_core::{CpuId, HashConfig, RssKey};

    /// Workers on `cpus`, 2 bucket bits.
    fn policy(cpus: &[usize]) -> RssPolicy {
        let cpus: Vec<CpuId> = cpus.iter().map(|&c| CpuId(c as u32)).collect();
        RssPolicy::new(RssKey::microsoft(), HashConfig::default(), &cpus, Some(2)).unwrap()
    }

    fn spec(mode: Steer, policy: &RssPolicy) -> SteerSpec<'_> {
        SteerSpec {
            mode,
            bind: "127.0.0.1:0".parse().unwrap(),
            policy,
            transport: Transport::Udp(UdpOptions::default()),
        }
    }

    #[test]
    fn builds_every_mode_and_refuses_used_ports() {
        let two = policy(&[0, 0]);
        for m in Steer::ALL {
            let st = build(&spec(m, &two)).unwrap();
            assert_eq!(st.sockets.len(), 2);
            assert_ne!(st.local.port(), 0);
            assert_eq!(st.program_len.is_some(), matches!(m, Steer::Cpu | Steer::Toeplitz | Steer::Ebpf));
            for s in &st.sockets {
                assert_eq!(local_of(s).unwrap(), st.local);
            }
            // The port is now taken, whatever the mode.
            let mut again = spec(Steer::Kernel, &two);
            again.bind = st.local;
            let e = build(&again).unwrap_err().to_string();
            assert!(e.contains("already in use"), "{e}");
        }
    }

    #[test]
    fn tcp_listeners_in_every_mode() {
        let two = policy(&[0, 0]);
        for m in Steer::ALL {
            let mut sp = spec(m, &two);
            sp.transport = Transport::Tcp(TcpListenOptions::default());
            let st = build(&sp).unwrap();
            assert_eq!(st.sockets.len(), 2);
            assert!(st.extra.is_empty());
            assert_eq!(st.program_len.is_some(), matches!(m, Steer::Cpu | Steer::Toeplitz | Steer::Ebpf));
            for s in &st.sockets {
                assert_eq!(local_of(s).unwrap(), st.local);
                assert_eq!(s.r#type().unwrap(), socket2::Type::STREAM);
            }
            std::net::TcpStream::connect(st.local).unwrap();
            sp.bind = st.local;
            let e = build(&sp).unwrap_err().to_string();
            assert!(e.contains("already in use"), "{e}");
        }
    }

    #[test]
    fn cpu_mode_covers_cpus_without_workers() {
        let online = rsskit_linux::cpulist::online();
        let st = build(&spec(Steer::Cpu, &policy(&online[..1]))).unwrap();
        assert_eq!(st.sockets.len(), 1);
        let extra: Vec<usize> = st.extra.iter().map(|e| e.0).collect();
        assert_eq!(extra, online[1..].to_vec());
    }

    /// The program's family is the group's: an IPv6 group gets an IPv6
    /// program (it used to be possible to pass a mismatching hash type).
    #[test]
    fn program_family_follows_the_bind_address() {
        let one = policy(&[0]);
        for bind in ["127.0.0.1:0", "[::1]:0"] {
            let mut s = spec(Steer::Toeplitz, &one);
            s.bind = bind.parse().unwrap();
            let st = build(&s).unwrap();
            let ht = one.hash_type(st.local.is_ipv6(), L4Proto::Udp, false);
            assert_eq!(st.program_len, Some(one.toeplitz_program(ht).unwrap().len()), "{bind}");
        }
    }
}
