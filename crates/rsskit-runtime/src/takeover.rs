//! Taking over an unmodified, running server's `SO_REUSEPORT` group
//! (nginx with `listen ... reuseport`, any server whose workers each serve
//! one socket of the group): `rsskit steer` and `rsskit run` are the CLI
//! around this.
//!
//! 1. The group: the process tree's listening TCP / unconnected UDP sockets
//!    on the port (`/proc/PID/net/*`, `/proc/PID/fd`), one group per local
//!    address; copies of them through `pidfd_getfd`; `SO_REUSEPORT` checked.
//! 2. Socket -> worker: the one process whose epoll watches the socket
//!    (`/proc/PID/fdinfo`, `tfd:` inodes), else the one process holding it.
//!    Worker -> CPU: the worker's threads' affinity, which must be one CPU.
//! 3. The group's order (the program returns an index in join order, which
//!    the kernel does not show): measured. With the holders stopped
//!    (SIGSTOP), for each index k a program `ret k` is attached and one
//!    probe (a connection, a datagram) sent; the socket whose accept queue
//!    (receive memory) grows is socket k. The probe datagram is taken back
//!    out; a probe connection is closed by us and met by the worker as an
//!    empty connection.
//! 4. The RssPolicy (worker i = the owner of socket i, on its CPU) builds
//!    the program; it is attached and the holders continued.
//!
//! Here rather than in `rsskit-host`: this is about a socket group and its
//! steering program, as [`crate::steer`] is for rsskit's own groups; the
//! host crate tunes NICs and IRQs. The decisions (grouping, owner and CPU
//! rules, the policy, which socket a probe reached) are pure functions,
//! unit-tested below; the rest is the I/O around them.

use crate::config::{ConfigError, Namer};
use rsskit_core::cbpf::{Insn, Program, BPF_K, BPF_RET};
use rsskit_core::{CpuId, HashConfig, L4Proto, RssKey, RssPolicy, WorkerId};
use rsskit_linux::procnet::{self, PidFd, ProcNetError, SockProto, SocketEntry, Stopped};
use rsskit_linux::reuseport;
use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpStream, UdpSocket};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

/// Which socket of the group a packet goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// The socket of the worker pinned to the CPU processing the packet.
    Cpu,
    /// The worker owning the packet's Toeplitz bucket.
    Toeplitz,
}

impl Mode {
    /// The name the CLI shows (`cpu`, `toeplitz`).
    pub fn name(self) -> &'static str {
        match self {
            Mode::Cpu => "cpu",
            Mode::Toeplitz => "toeplitz",
        }
    }
}

/// What to take over and how.
#[derive(Debug, Clone)]
pub struct Spec {
    /// Only sockets on this local port (default: every reuseport group of the tree).
    pub port: Option<u16>,
    /// Only this transport (default: both).
    pub proto: Option<SockProto>,
    /// The steering program.
    pub mode: Mode,
    /// The number of workers expected per group (refuse otherwise).
    pub workers: Option<usize>,
    /// The RSS key for [`Mode::Toeplitz`].
    pub key: RssKey,
    /// Bucket bits for [`Mode::Toeplitz`]; default FreeBSD's.
    pub bits: Option<u32>,
    /// Hash UDP on addresses and ports ([`Mode::Toeplitz`]).
    pub udp_4tuple: bool,
}

/// Why a group cannot be (or was not) taken over.
#[derive(Debug, thiserror::Error)]
pub enum TakeoverError {
    /// The pid is rsskit's own.
    #[error("{}", itself(*.0))]
    Itself(i32),
    /// Reading another process failed.
    #[error(transparent)]
    ProcNet(#[from] ProcNetError),
    /// No socket of the kind asked for.
    #[error("process {pid} and its {children} children hold no {what} socket{port}")]
    NoSockets {
        /// The server's pid.
        pid: i32,
        /// How many children were searched.
        children: usize,
        /// `listening TCP`, `bound UDP`, or both.
        what: &'static str,
        /// ` on port N`, or empty.
        port: String,
    },
    /// No group passed [`check_reuseport`].
    #[error(
        "process {0} and its children have no SO_REUSEPORT group of two or more sockets (nginx: `listen ... reuseport;`)"
    )]
    NoneSteerable(i32),
    /// Something about one group (its name first), as the operator must read it.
    #[error("{group}: {why}")]
    Group {
        /// `proto address:port`.
        group: String,
        /// What is wrong, and what to do.
        why: String,
    },
    /// A [`Spec`] field that does not fit one group (its name first).
    #[error("{group}: {error}")]
    GroupConfig {
        /// `proto address:port`.
        group: String,
        /// The field and its value.
        error: Box<ConfigError>,
    },
    /// A system call failed; `what` says which step.
    #[error("{what}")]
    Io {
        /// The step.
        what: String,
        /// The call's error.
        #[source]
        source: io::Error,
    },
    /// Building the policy or the program failed.
    #[error("{group}: {why}")]
    Policy {
        /// `proto address:port`.
        group: String,
        /// The policy's error.
        why: String,
    },
    /// The step failed; `state` says what that left in force.
    #[error("{state}")]
    After {
        /// `nothing was changed`, or that the kernel's hash is in force.
        state: &'static str,
        /// What failed.
        #[source]
        source: Box<TakeoverError>,
    },
}

type Result<T> = std::result::Result<T, TakeoverError>;

fn io_err(what: impl Into<String>) -> impl FnOnce(io::Error) -> TakeoverError {
    let what = what.into();
    move |source| TakeoverError::Io { what, source }
}

fn itself(pid: i32) -> ConfigError {
    ConfigError::value("pid", pid, " is rsskit itself")
}

impl TakeoverError {
    /// The message with each config field called `name(field)`, for the
    /// errors that name one.
    pub fn message_with(&self, name: Namer) -> Option<String> {
        match self {
            TakeoverError::Itself(pid) => Some(itself(*pid).render(name)),
            TakeoverError::GroupConfig { group, error } => Some(format!("{group}: {}", error.render(name))),
            _ => None,
        }
    }
}

fn group_err(g: &Group, why: String) -> TakeoverError {
    TakeoverError::Group { group: g.name(), why }
}

/// One socket of a group as found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// The socket's inode.
    pub inode: u64,
    /// `SO_COOKIE` (known once a copy was taken).
    pub cookie: Option<u64>,
    /// (pid, fd) of every descriptor of it in the tree.
    pub holders: Vec<(i32, RawFd)>,
    /// The process serving it and the CPU that process is pinned to.
    pub owner: Option<(i32, usize)>,
}

/// One reuseport group (a local address and port).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    /// Its transport.
    pub proto: SockProto,
    /// Its local address.
    pub local: SocketAddr,
    /// In socket inode order until the join order was measured.
    pub members: Vec<Member>,
}

impl Group {
    /// `proto address:port`, the name every message starts with.
    pub fn name(&self) -> String {
        format!("{} {}", self.proto.name(), self.local)
    }
}

fn protos(o: &Spec) -> Vec<SockProto> {
    match o.proto {
        Some(p) => vec![p],
        None => vec![SockProto::Tcp, SockProto::Udp],
    }
}

/// The groups of one transport's socket table: listening (TCP) or
/// unconnected (UDP) sockets on `port` by local address, each held by the
/// tree (`fds`: inode -> holders). A group none of whose sockets the tree
/// holds is another program's and left out; one the tree holds only in
/// part is refused (its order could not be mapped). No I/O.
pub fn groups_of(
    pid: i32,
    proto: SockProto,
    table: &[SocketEntry],
    fds: &BTreeMap<u64, Vec<(i32, RawFd)>>,
    port: Option<u16>,
) -> Result<Vec<Group>> {
    let want = if proto == SockProto::Tcp { procnet::STATE_LISTEN } else { procnet::STATE_CLOSE };
    let mut by_addr: BTreeMap<SocketAddr, Vec<u64>> = BTreeMap::new();
    for e in table {
        if e.state == want && e.local.port() != 0 && port.is_none_or(|p| p == e.local.port()) {
            by_addr.entry(e.local).or_default().push(e.inode);
        }
    }
    let mut groups = Vec::new();
    for (local, mut inodes) in by_addr {
        inodes.sort_unstable();
        if !inodes.iter().any(|i| fds.contains_key(i)) {
            continue; // another program's sockets
        }
        if let Some(i) = inodes.iter().find(|i| !fds.contains_key(i)) {
            return Err(TakeoverError::Group {
                group: format!("{} {local}", proto.name()),
                why: format!(
                    "socket inode {i} is not held by process {pid} or its children: the group has members \
                     outside the server, whose order rsskit cannot map"
                ),
            });
        }
        let members = inodes
            .into_iter()
            .map(|inode| Member { holders: fds[&inode].clone(), inode, cookie: None, owner: None })
            .collect();
        groups.push(Group { proto, local, members });
    }
    Ok(groups)
}

/// The tree's process ids and its listening / bound sockets on the port,
/// grouped by local address (holders filled, owners not yet).
pub fn find_groups(pid: i32, o: &Spec) -> Result<(Vec<i32>, Vec<Group>)> {
    if pid == std::process::id() as i32 {
        return Err(TakeoverError::Itself(pid));
    }
    let tree = procnet::process_tree(pid)?;
    let mut fds: BTreeMap<u64, Vec<(i32, RawFd)>> = BTreeMap::new();
    for &p in &tree {
        match procnet::socket_fds(p) {
            Ok(v) => v.into_iter().for_each(|(fd, ino)| fds.entry(ino).or_default().push((p, fd))),
            Err(ProcNetError::NoProcess(_)) if p != pid => {} // a child that exited meanwhile
            Err(e) => return Err(e.into()),
        }
    }
    let mut groups = Vec::new();
    for proto in protos(o) {
        groups.extend(groups_of(pid, proto, &procnet::sockets_of_netns(pid, proto)?, &fds, o.port)?);
    }
    if groups.is_empty() {
        let what = match o.proto {
            Some(SockProto::Tcp) => "listening TCP",
            Some(SockProto::Udp) => "bound UDP",
            None => "listening TCP or bound UDP",
        };
        let port = o.port.map(|p| format!(" on port {p}")).unwrap_or_default();
        return Err(TakeoverError::NoSockets { pid, children: tree.len() - 1, what, port });
    }
    Ok((tree, groups))
}

/// A copy of each member (through `pidfd_getfd`), checked to be the same socket.
pub fn copies(g: &Group) -> Result<Vec<OwnedFd>> {
    let mut out = Vec::new();
    for m in &g.members {
        let (p, fd) = m.holders[0];
        let c = PidFd::open(p)?.get_fd(fd)?;
        // The fd may have been closed and reused since we listed it.
        let ino = std::fs::metadata(format!("/proc/self/fd/{}", c.as_raw_fd()))
            .map(|m| std::os::unix::fs::MetadataExt::ino(&m))
            .map_err(io_err("fstat of a socket copy"))?;
        if ino != m.inode {
            return Err(group_err(g, format!("process {p} closed fd {fd} while rsskit looked; try again")));
        }
        out.push(c);
    }
    Ok(out)
}

/// Checks every member has `SO_REUSEPORT` and the group more than one member.
pub fn check_reuseport(g: &Group, c: &[OwnedFd]) -> Result<()> {
    for (m, fd) in g.members.iter().zip(c) {
        if !reuseport::reuseport_enabled(fd).map_err(io_err("reading SO_REUSEPORT"))? {
            let (p, f) = m.holders[0];
            return Err(group_err(
                g,
                format!(
                    "not a reuseport group: the socket (inode {}, pid {p} fd {f}) does not have SO_REUSEPORT \
                     (nginx: `listen ... reuseport;`)",
                    m.inode
                ),
            ));
        }
    }
    if g.members.len() < 2 {
        return Err(group_err(
            g,
            "a reuseport group of one socket: nothing to steer (one socket per worker is needed)".into(),
        ));
    }
    Ok(())
}

/// Whether to steer `g`: a group failing [`check_reuseport`] is an error
/// when the port was named, and skipped (with a note on stderr if `note`)
/// when every port of the server is looked at (its other listeners need
/// not be reuseport groups).
pub fn steerable(g: &Group, c: &[OwnedFd], o: &Spec, note: bool) -> Result<bool> {
    match check_reuseport(g, c) {
        Ok(()) => Ok(true),
        Err(e) if o.port.is_none() => {
            if note {
                eprintln!("rsskit: skipping {e}");
            }
            Ok(false)
        }
        Err(e) => Err(e),
    }
}

/// The process serving a socket: the one process polling it with epoll,
/// else its one holder. `Err` says why neither identifies one. No I/O.
pub fn owner_of(inode: u64, pollers: &[i32], holders: &BTreeSet<i32>) -> std::result::Result<i32, String> {
    match (pollers, holders.len()) {
        ([one], _) => Ok(*one),
        ([], 1) => Ok(*holders.first().expect("one holder")),
        ([], _) => Err(format!(
            "cannot tell which process serves socket inode {inode}: processes {holders:?} hold it and none \
             polls it with epoll"
        )),
        (many, _) => Err(format!(
            "socket inode {inode} is polled by several processes {many:?}: steering needs one socket per \
             worker (nginx: `listen ... reuseport;`)"
        )),
    }
}

/// The one CPU every thread of a worker is pinned to (its threads'
/// affinity sets), or `Err` with the CPUs it may run on. No I/O.
pub fn pinned_cpu(sets: &[Vec<usize>]) -> std::result::Result<usize, String> {
    match sets {
        [s] if s.len() == 1 => Ok(s[0]),
        _ => {
            let all: BTreeSet<usize> = sets.iter().flatten().copied().collect();
            Err(rsskit_linux::cpulist::format(&all.into_iter().collect::<Vec<_>>()))
        }
    }
}

/// The rules on a group whose owners are resolved: one worker per socket,
/// the count `--workers` expects, and for [`Mode::Cpu`] one worker per CPU.
/// No I/O.
pub fn check_owners(g: &Group, o: &Spec) -> Result<()> {
    let owners: BTreeSet<i32> = g.members.iter().filter_map(|m| m.owner.map(|o| o.0)).collect();
    if owners.len() != g.members.len() {
        return Err(group_err(
            g,
            format!(
                "{} sockets but {} worker processes serve them: the count does not match (one socket per worker)",
                g.members.len(),
                owners.len()
            ),
        ));
    }
    if let Some(w) = o.workers {
        if w != g.members.len() {
            return Err(TakeoverError::GroupConfig {
                group: g.name(),
                error: Box::new(ConfigError::Said {
                    before: format!("{} sockets in the group, ", g.members.len()),
                    field: "workers",
                    join: " says ",
                    value: w.to_string(),
                    after: String::new(),
                }),
            });
        }
    }
    if o.mode == Mode::Cpu {
        let mut seen: BTreeMap<usize, i32> = BTreeMap::new();
        for (p, c) in g.members.iter().filter_map(|m| m.owner) {
            if let Some(q) = seen.insert(c, p) {
                return Err(TakeoverError::GroupConfig {
                    group: g.name(),
                    error: Box::new(ConfigError::Said {
                        before: format!("workers {q} and {p} are both pinned to CPU {c}: "),
                        field: "mode",
                        join: " ",
                        value: "cpu".into(),
                        after: " needs one worker per CPU".into(),
                    }),
                });
            }
        }
    }
    Ok(())
}

/// Socket -> serving process -> its CPU, for every member.
pub fn resolve_owners(tree: &[i32], g: &mut Group, o: &Spec) -> Result<()> {
    let mut watched: BTreeMap<u64, Vec<i32>> = BTreeMap::new();
    for &p in tree {
        if let Ok(inos) = procnet::epoll_watched_inodes(p) {
            inos.into_iter().for_each(|i| watched.entry(i).or_default().push(p));
        }
    }
    let name = g.name();
    for m in &mut g.members {
        let pollers = watched.get(&m.inode).cloned().unwrap_or_default();
        let holders: BTreeSet<i32> = m.holders.iter().map(|h| h.0).collect();
        let owner = owner_of(m.inode, &pollers, &holders)
            .map_err(|why| TakeoverError::Group { group: name.clone(), why })?;
        let cpu = pinned_cpu(&procnet::process_affinity(owner)?).map_err(|list| TakeoverError::Group {
            group: name.clone(),
            why: format!(
                "worker {owner} is not pinned to one CPU (its threads may run on CPUs {list}): pin each worker to \
                 its own CPU (nginx: `worker_cpu_affinity auto;`; otherwise `taskset -a -p -c CPU {owner}`)"
            ),
        })?;
        m.owner = Some((owner, cpu));
    }
    check_owners(g, o)
}

fn ret_program(k: u32) -> Program {
    Program::new(vec![Insn { code: BPF_RET | BPF_K, jt: 0, jf: 0, k }]).expect("one ret instruction")
}

/// Where a probe for a group bound to `local` is sent: the address itself,
/// or loopback for a wildcard bind. No I/O.
pub fn probe_target(local: SocketAddr) -> SocketAddr {
    let ip = match local.ip() {
        IpAddr::V4(a) if a.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(a) if a.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
        ip => ip,
    };
    SocketAddr::new(ip, local.port())
}

/// The members whose queue grew between two reads. No I/O.
pub fn grown(before: &[u32], now: &[u32]) -> Vec<usize> {
    (0..now.len().min(before.len())).filter(|&i| now[i] > before[i]).collect()
}

fn queued(proto: SockProto, c: &[OwnedFd]) -> Result<Vec<u32>> {
    c.iter()
        .map(|fd| match proto {
            SockProto::Tcp => reuseport::accept_queue_len(fd),
            SockProto::Udp => reuseport::rmem_alloc(fd),
        })
        .collect::<io::Result<_>>()
        .map_err(io_err("reading a socket's queue"))
}

/// Which member receives a flow sent while `ret k` is attached, for every
/// k: the join order (`order[k]` = member index). The group's holders must
/// be stopped.
/// `probed` is set once a probe program replaced the group's program.
fn measure_order(g: &Group, c: &[OwnedFd], probed: &mut bool) -> Result<Vec<usize>> {
    let target = probe_target(g.local);
    let mut order = Vec::new();
    for k in 0..g.members.len() {
        rsskit_linux::bpf::attach_reuseport(&ret_program(k as u32), &c[0])
            .map_err(io_err("attaching a probe program"))?;
        *probed = true;
        let mut found = None;
        for _attempt in 0..3 {
            let before = queued(g.proto, c)?;
            // Kept until the queues were read: a TCP probe stays queued, a UDP one is taken back.
            let (_tcp, udp) = match g.proto {
                SockProto::Tcp => (
                    Some(
                        TcpStream::connect_timeout(&target, Duration::from_secs(2))
                            .map_err(io_err(format!("{}: probe connection to {target}", g.name())))?,
                    ),
                    None,
                ),
                SockProto::Udp => {
                    let bind = SocketAddr::new(
                        if target.is_ipv4() {
                            Ipv4Addr::LOCALHOST.into()
                        } else {
                            Ipv6Addr::LOCALHOST.into()
                        },
                        0,
                    );
                    let s = UdpSocket::bind(bind).map_err(io_err("probe socket"))?;
                    s.send_to(b"rsskit steer probe", target)
                        .map_err(io_err(format!("probe datagram to {target}")))?;
                    (None, Some(s))
                }
            };
            let t = Instant::now();
            let grew = loop {
                let grew = grown(&before, &queued(g.proto, c)?);
                if !grew.is_empty() || t.elapsed() > Duration::from_secs(2) {
                    break grew;
                }
                std::thread::sleep(Duration::from_millis(1));
            };
            if let (Some(s), [i]) = (&udp, grew.as_slice()) {
                let from = s.local_addr().map_err(io_err("probe socket"))?;
                reuseport::take_datagram_from(&c[*i], from).map_err(io_err("taking the probe back"))?;
            }
            if let [i] = grew.as_slice() {
                found = Some(*i);
                break;
            }
            // Nothing (or more than the probe, other traffic) arrived: try again.
        }
        let i = found.ok_or_else(|| {
            group_err(
                g,
                format!(
                    "could not measure the group's order: a probe for socket {k} reached none of the server's \
                     sockets (a firewall, or group members outside the server?)"
                ),
            )
        })?;
        if order.contains(&i) {
            return Err(group_err(
                g,
                format!("probes for two indices reached the same socket (inode {})", g.members[i].inode),
            ));
        }
        order.push(i);
    }
    Ok(order)
}

/// The members in join order: `order[k]` is the member index of socket k,
/// a permutation ([`measure_order`] checked). No I/O.
pub fn in_join_order(members: Vec<Member>, order: &[usize]) -> Vec<Member> {
    let mut slots: Vec<Option<Member>> = members.into_iter().map(Some).collect();
    order.iter().map(|&i| slots[i].take().expect("a permutation")).collect()
}

/// The steering policy for a group in join order: worker i = the owner of
/// socket i, on its CPU. Buckets go round-robin over the workers in CPU
/// order (bucket b -> the (b mod n)-th CPU, as `rsskit hash` and `rsskit
/// find` count), not in socket order, so a flow's bucket names its CPU
/// whatever order the server's sockets joined in. No I/O.
pub fn policy(g: &Group, o: &Spec) -> Result<RssPolicy> {
    let perr = |e: rsskit_core::rss::RssError| TakeoverError::Policy { group: g.name(), why: e.to_string() };
    let cpus: Vec<CpuId> = g.members.iter().map(|m| CpuId(m.owner.expect("resolved").1 as u32)).collect();
    let mut p =
        RssPolicy::new(o.key.clone(), HashConfig::default().with_udp_4tuple(o.udp_4tuple), &cpus, o.bits)
            .map_err(perr)?;
    let mut by_cpu: Vec<WorkerId> = (0..cpus.len() as u32).map(WorkerId).collect();
    by_cpu.sort_by_key(|w| (cpus[w.index()], *w));
    for b in 0..p.buckets() {
        p.assign(b, by_cpu[b as usize % by_cpu.len()]).map_err(perr)?;
    }
    Ok(p)
}

/// What was attached to one group.
#[derive(Debug)]
pub struct Steered {
    /// The group, its members in join order.
    pub group: Group,
    /// The program's length in instructions.
    pub program_len: usize,
    /// The hash type the program computes ([`Mode::Toeplitz`]).
    pub hash_type: Option<&'static str>,
}

/// A group checked and ready to probe: nothing has been changed yet.
struct Ready {
    group: Group,
    copies: Vec<OwnedFd>,
    /// Every process holding a socket of the group (stopped while probing).
    stop: Vec<i32>,
}

/// Checks everything that can be checked without changing anything: the
/// group's copies, owners and CPUs, the permission to stop its holders and
/// to enter the server's network namespace. A failure here leaves every
/// group as it was (its previous program, if any, in force).
fn prepare(pid: i32, o: &Spec) -> Result<(bool, Vec<Ready>)> {
    let (tree, groups) = find_groups(pid, o)?;
    let netns = procnet::other_netns(pid).map_err(|e| TakeoverError::Io {
        what: format!("process {pid}: cannot tell its network namespace (nothing was changed)"),
        source: io::Error::other(e),
    })?;
    if netns {
        // The probes are sent from a thread inside it: try entering now.
        std::thread::scope(|s| s.spawn(|| procnet::enter_netns_of(pid)).join())
            .map_err(|_| io_err("the namespace thread")(io::Error::other("panicked")))?
            .map_err(|e| TakeoverError::Io {
                what: format!("entering the network namespace of process {pid} (nothing was changed)"),
                source: io::Error::other(e),
            })?;
    }
    let mut ready = Vec::new();
    for mut g in groups {
        let c = copies(&g)?;
        if !steerable(&g, &c, o, true)? {
            continue;
        }
        for (m, fd) in g.members.iter_mut().zip(&c) {
            m.cookie = reuseport::cookie(fd).ok();
        }
        resolve_owners(&tree, &mut g, o)?;
        let mut stop: Vec<i32> = g.members.iter().flat_map(|m| m.holders.iter().map(|h| h.0)).collect();
        stop.sort_unstable();
        stop.dedup();
        for &p in &stop {
            procnet::may_signal(p).map_err(|e| {
                group_err(
                    &g,
                    format!(
                        "no permission to stop worker {p} for the order probe: {e} (nothing was changed)"
                    ),
                )
            })?;
        }
        ready.push(Ready { group: g, copies: c, stop });
    }
    if ready.is_empty() {
        return Err(TakeoverError::NoneSteerable(pid));
    }
    Ok((netns, ready))
}

/// Measures the order of one prepared group and attaches its program.
/// Before the first change a watchdog process is started: should rsskit
/// die (SIGKILL included) while the holders are stopped, it detaches the
/// probe program and continues them.
fn steer_group(pid: i32, netns: bool, r: Ready, o: &Spec) -> Result<Steered> {
    let Ready { group: mut g, copies: c, stop } = r;
    let watchdog = rsskit_linux::watchdog::Watchdog::start(&stop, &c[0]).map_err(|e| TakeoverError::Io {
        what: format!("{}: starting the watchdog (nothing was changed)", g.name()),
        source: io::Error::other(e),
    })?;
    let stopped = match Stopped::new(&stop, Duration::from_secs(5)) {
        Ok(s) => s,
        Err(e) => {
            // Those stopped so far were continued: nothing for the watchdog to do.
            watchdog.finish();
            return Err(TakeoverError::Io {
                what: format!("{}: stopping the workers for the order probe (nothing was changed)", g.name()),
                source: io::Error::other(e),
            });
        }
    };
    let mut probed = false;
    let attached = (|| -> Result<Steered> {
        // Before the first probe replaces the group's program: from here a
        // death of rsskit makes the watchdog detach (never leave a probe).
        watchdog.probing().map_err(io_err("telling the watchdog"))?;
        // The probes must be sent inside the server's network namespace.
        let order = std::thread::scope(|s| {
            s.spawn(|| {
                if netns {
                    procnet::enter_netns_of(pid)?;
                }
                measure_order(&g, &c, &mut probed)
            })
            .join()
            .map_err(|_| io_err("the probe thread")(io::Error::other("panicked")))?
        })?;
        g.members = in_join_order(std::mem::take(&mut g.members), &order);
        let c: Vec<&OwnedFd> = order.iter().map(|&i| &c[i]).collect();
        let p = policy(&g, o)?;
        let (prog, ht) = match o.mode {
            Mode::Cpu => (p.cpu_program(), None),
            Mode::Toeplitz => {
                let proto = if g.proto == SockProto::Tcp { L4Proto::Tcp } else { L4Proto::Udp };
                let ht = p.hash_type(g.local.is_ipv6(), proto, false);
                (p.toeplitz_program(ht), Some(ht.name()))
            }
        };
        let prog = prog.map_err(|e| TakeoverError::Policy {
            group: g.name(),
            why: format!("building the program: {e}"),
        })?;
        if o.mode == Mode::Toeplitz && g.local.is_ipv6() && !reuseport::v6only(c[0]).unwrap_or(true) {
            // The IPv6 program reads an IPv6 header; IPv4 packets get the fallback.
            eprintln!(
                "rsskit: warning: {} is dual-stack (not IPV6_V6ONLY): toeplitz steering steers its IPv6 flows \
                 only, IPv4 ones are spread by the kernel's hash",
                g.name()
            );
        }
        rsskit_linux::bpf::attach_reuseport(&prog, c[0]).map_err(io_err(g.name()))?;
        // Best effort: should the watchdog miss it, it detaches the final
        // program too, which leaves the kernel's hash (never a probe).
        let _ = watchdog.final_attached();
        Ok(Steered { program_len: prog.len(), hash_type: ht, group: g })
    })();
    if attached.is_err() && probed {
        // Never leave a probe program behind (detached before the server continues).
        let _ = reuseport::detach(&c[0]);
    }
    drop(stopped);
    watchdog.finish();
    attached.map_err(|e| TakeoverError::After {
        state: if probed {
            "the probe replaced the group's program: the kernel's own reuseport hash is in force"
        } else {
            "nothing was changed"
        },
        source: Box::new(e),
    })
}

/// Finds, maps, measures and steers every group of the tree of `pid`.
/// Every group is checked before the first one is changed.
pub fn steer(pid: i32, o: &Spec) -> Result<Vec<Steered>> {
    let (netns, ready) = prepare(pid, o)?;
    ready.into_iter().map(|r| steer_group(pid, netns, r, o)).collect()
}

/// A group as it would be steered now: its name and (inode, worker, CPU)
/// per socket, in inode order.
pub type Survey = (String, Vec<(u64, i32, usize)>);

/// The groups as they would be steered now, without touching them. Fails
/// as [`steer`] would.
pub fn survey(pid: i32, o: &Spec) -> Result<Vec<Survey>> {
    let (tree, groups) = find_groups(pid, o)?;
    let mut out = Vec::new();
    for mut g in groups {
        if !steerable(&g, &copies(&g)?, o, false)? {
            continue;
        }
        resolve_owners(&tree, &mut g, o)?;
        let m =
            g.members.iter().map(|m| (m.inode, m.owner.expect("resolved").0, m.owner.expect("resolved").1));
        out.push((g.name(), m.collect()));
    }
    if out.is_empty() {
        return Err(TakeoverError::NoneSteerable(pid));
    }
    Ok(out)
}

/// Detaches the program of every group of the tree: per group its name
/// and whether a program was attached.
pub fn detach(pid: i32, o: &Spec) -> Result<Vec<(String, bool)>> {
    let (_, groups) = find_groups(pid, o)?;
    let mut out = Vec::new();
    for g in groups {
        let c = copies(&g)?;
        if !steerable(&g, &c, o, true)? {
            continue;
        }
        let had = reuseport::detach(&c[0]).map_err(io_err(g.name()))?;
        out.push((g.name(), had));
    }
    if out.is_empty() {
        return Err(TakeoverError::NoneSteerable(pid));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(mode: Mode, workers: Option<usize>) -> Spec {
        Spec {
            port: None,
            proto: None,
            mode,
            workers,
            key: RssKey::microsoft(),
            bits: None,
            udp_4tuple: false,
        }
    }

    fn entry(proto: SockProto, local: &str, state: u8, inode: u64) -> SocketEntry {
        SocketEntry {
            proto,
            local: local.parse().unwrap(),
            remote: "0.0.0.0:0".parse().unwrap(),
            state,
            inode,
        }
    }

    fn member(inode: u64, owner: Option<(i32, usize)>) -> Member {
        Member { inode, cookie: None, holders: vec![(100, 3)], owner }
    }

    fn group(owners: &[(i32, usize)]) -> Group {
        Group {
            proto: SockProto::Tcp,
            local: "0.0.0.0:80".parse().unwrap(),
            members: owners.iter().enumerate().map(|(i, &o)| member(10 + i as u64, Some(o))).collect(),
        }
    }

    #[test]
    fn groups_by_address_only_the_trees_listeners() {
        let listen = procnet::STATE_LISTEN;
        let table = [
            entry(SockProto::Tcp, "0.0.0.0:80", listen, 12),
            entry(SockProto::Tcp, "0.0.0.0:80", listen, 11),
            entry(SockProto::Tcp, "127.0.0.1:80", listen, 20),
            entry(SockProto::Tcp, "0.0.0.0:443", listen, 30), // another program's
            entry(SockProto::Tcp, "0.0.0.0:80", 0x01, 40),    // established, not a listener
        ];
        let fds: BTreeMap<u64, Vec<(i32, RawFd)>> =
            [(11, vec![(100, 5)]), (12, vec![(101, 6)]), (20, vec![(100, 7)]), (40, vec![(100, 8)])].into();
        let g = groups_of(100, SockProto::Tcp, &table, &fds, None).unwrap();
        assert_eq!(g.len(), 2);
        assert_eq!(g[0].name(), "tcp 0.0.0.0:80");
        // Inode order, with every holder.
        assert_eq!(g[0].members.iter().map(|m| m.inode).collect::<Vec<_>>(), vec![11, 12]);
        assert_eq!(g[0].members[1].holders, vec![(101, 6)]);
        assert_eq!(g[1].name(), "tcp 127.0.0.1:80");
        // The port filter.
        assert!(groups_of(100, SockProto::Tcp, &table, &fds, Some(443)).unwrap().is_empty());
        // UDP wants unconnected (TCP_CLOSE) sockets: none here.
        assert!(groups_of(100, SockProto::Udp, &table, &fds, None).unwrap().is_empty());
    }

    #[test]
    fn a_group_held_only_in_part_is_refused() {
        let table = [
            entry(SockProto::Udp, "[::]:53", procnet::STATE_CLOSE, 1),
            entry(SockProto::Udp, "[::]:53", procnet::STATE_CLOSE, 2),
        ];
        let fds: BTreeMap<u64, Vec<(i32, RawFd)>> = [(1, vec![(100, 5)])].into();
        let e = groups_of(100, SockProto::Udp, &table, &fds, Some(53)).unwrap_err().to_string();
        assert!(e.starts_with("udp [::]:53: socket inode 2 is not held by process 100"), "{e}");
    }

    #[test]
    fn owner_is_the_one_poller_else_the_one_holder() {
        let one: BTreeSet<i32> = [7].into();
        let two: BTreeSet<i32> = [7, 8].into();
        assert_eq!(owner_of(1, &[8], &two), Ok(8));
        assert_eq!(owner_of(1, &[], &one), Ok(7));
        assert!(owner_of(1, &[], &two).unwrap_err().contains("cannot tell which process serves"));
        assert!(owner_of(1, &[7, 8], &two).unwrap_err().contains("polled by several processes [7, 8]"));
    }

    #[test]
    fn pinned_means_every_thread_on_one_cpu() {
        assert_eq!(pinned_cpu(&[vec![3]]), Ok(3));
        assert_eq!(pinned_cpu(&[vec![1, 2]]), Err("1-2".into()));
        // Two threads on different CPUs: not one CPU.
        assert_eq!(pinned_cpu(&[vec![1], vec![4]]), Err("1,4".into()));
        assert!(pinned_cpu(&[]).is_err());
    }

    #[test]
    fn owner_rules() {
        assert!(check_owners(&group(&[(1, 0), (2, 1)]), &spec(Mode::Cpu, Some(2))).is_ok());
        let e = check_owners(&group(&[(1, 0), (2, 1)]), &spec(Mode::Cpu, Some(3))).unwrap_err().to_string();
        assert!(e.contains("2 sockets in the group, workers says 3"), "{e}");
        let e = check_owners(&group(&[(1, 0), (1, 1)]), &spec(Mode::Cpu, None)).unwrap_err().to_string();
        assert!(e.contains("2 sockets but 1 worker processes"), "{e}");
        let e = check_owners(&group(&[(1, 2), (2, 2)]), &spec(Mode::Cpu, None)).unwrap_err().to_string();
        assert!(e.contains("workers 1 and 2 are both pinned to CPU 2"), "{e}");
        // Toeplitz buckets may share a CPU.
        assert!(check_owners(&group(&[(1, 2), (2, 2)]), &spec(Mode::Toeplitz, None)).is_ok());
    }

    #[test]
    fn probes_go_to_loopback_for_a_wildcard() {
        assert_eq!(probe_target("0.0.0.0:80".parse().unwrap()), "127.0.0.1:80".parse().unwrap());
        assert_eq!(probe_target("[::]:80".parse().unwrap()), "[::1]:80".parse().unwrap());
        assert_eq!(probe_target("10.0.0.2:53".parse().unwrap()), "10.0.0.2:53".parse().unwrap());
    }

    #[test]
    fn grown_queues_and_join_order() {
        assert_eq!(grown(&[0, 5, 1], &[0, 6, 1]), vec![1]);
        assert_eq!(grown(&[0, 5, 1], &[1, 4, 2]), vec![0, 2]);
        assert!(grown(&[3], &[3]).is_empty());
        let m: Vec<Member> = (0..3).map(|i| member(i, None)).collect();
        let joined = in_join_order(m, &[2, 0, 1]);
        assert_eq!(joined.iter().map(|m| m.inode).collect::<Vec<_>>(), vec![2, 0, 1]);
    }

    #[test]
    fn buckets_follow_cpu_order_not_socket_order() {
        // Sockets joined as CPU 5, CPU 1, CPU 3: bucket b -> the (b mod 3)-th CPU in CPU order.
        let g = group(&[(10, 5), (11, 1), (12, 3)]);
        let p = policy(&g, &spec(Mode::Toeplitz, None)).unwrap();
        let cpus: Vec<u32> = (0..p.buckets()).map(|b| p.cpu_of(p.worker_of_bucket(b)).unwrap().0).collect();
        assert_eq!(&cpus[..6], &[1, 3, 5, 1, 3, 5]);
    }
}
