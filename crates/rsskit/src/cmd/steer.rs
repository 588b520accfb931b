//! `rsskit steer`: attach a steering program to an unmodified, running
//! server's `SO_REUSEPORT` group (nginx with `listen ... reuseport`, any
//! server whose workers each serve one socket of the group).
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

use super::common::{key_arg, print_json};
use anyhow::{anyhow, bail, Context, Result};
use rsskit_core::cbpf::{Insn, Program, BPF_K, BPF_RET};
use rsskit_core::{CpuId, HashConfig, L4Proto, RssKey, RssPolicy, WorkerId};
use rsskit_linux::procnet::{self, PidFd, ProcNetError, SockProto, Stopped};
use rsskit_linux::reuseport;
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpStream, UdpSocket};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

const ABOUT: &str = "Steer an unmodified running server's SO_REUSEPORT group: each connection (datagram) \
goes to the worker pinned to the CPU that processed it (cpu), or to the worker owning its Toeplitz bucket \
(toeplitz).\n\nrsskit finds the group's sockets in PID and its children, maps each socket to the worker \
process that serves it and that worker to the CPU it is pinned to, measures the group's socket order, and \
attaches a classic BPF program built from that map.\n\nExample (nginx: worker_cpu_affinity auto; listen 80 \
reuseport;):\n  rsskit steer --pid $(cat /run/nginx.pid) --port 80\n  rsskit steer --pid $(cat /run/nginx.pid) \
--port 80 --detach";

/// Steering mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    /// The socket of the worker pinned to the CPU processing the packet.
    Cpu,
    /// The worker owning the packet's Toeplitz bucket.
    Toeplitz,
}

impl SteerOpts {
    /// Judges `--key` (used by `--steer toeplitz` only) before anything is
    /// touched: for its hash types and `--bits`, or the full 128-entry table
    /// when the group sizes are not known yet (a key reaching every one of
    /// 128 buckets reaches every one of fewer).
    pub fn vet_key(&self) -> Result<()> {
        if self.steer != Mode::Toeplitz {
            return Ok(());
        }
        let hash = HashConfig::default().with_udp_4tuple(self.udp_4tuple);
        let bits = self.bits.unwrap_or(rsskit_core::rss::MAX_BITS);
        super::common::vet_key(&self.key, rsskit_core::keycheck::KeyUse::of_config(hash, bits))
    }
}

/// What to steer and how (shared with `rsskit run`).
#[derive(clap::Args, Debug, Clone)]
pub struct SteerOpts {
    /// Only sockets on this local port, 1-65535 (default: every reuseport group of the process tree).
    #[arg(long, value_parser = super::common::int_in(1u16, u16::MAX))]
    pub port: Option<u16>,
    /// Only this transport (default: both).
    #[arg(long, value_enum)]
    pub proto: Option<super::common::Proto>,
    /// Steering program.
    #[arg(long, value_enum, default_value = "cpu")]
    pub steer: Mode,
    /// The number of workers expected per group, 1-8192 (refuse otherwise).
    #[arg(long, value_parser = super::common::int_in(1usize, 8192))]
    pub workers: Option<usize>,
    /// RSS key for --steer toeplitz: default (Microsoft), symmetric, random, or 40+ bytes of hex.
    #[arg(long, default_value = "default", value_parser = key_arg)]
    pub key: RssKey,
    /// Bucket bits for --steer toeplitz (1-7); default FreeBSD's fls(workers-1)+1.
    #[arg(long, value_parser = super::common::int_in(1u32, 7))]
    pub bits: Option<u32>,
    /// Hash UDP on addresses and ports (--steer toeplitz); default addresses only.
    #[arg(long)]
    pub udp_4tuple: bool,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(clap::Args, Debug)]
#[command(about = ABOUT, long_about = ABOUT)]
pub struct Args {
    /// The server's process id (nginx: the master), 1-4194304; its children are searched too.
    #[arg(long, value_parser = super::common::int_in(1i32, 1 << 22))]
    pub pid: i32,
    #[command(flatten)]
    pub opts: SteerOpts,
    /// Detach the program: the kernel's reuseport hash picks sockets again.
    #[arg(long)]
    pub detach: bool,
}

/// One socket of a group as found.
#[derive(Debug)]
pub struct Member {
    pub inode: u64,
    /// `SO_COOKIE` (known once a copy was taken).
    pub cookie: Option<u64>,
    /// (pid, fd) of every descriptor of it in the tree.
    pub holders: Vec<(i32, RawFd)>,
    /// The process serving it and the CPU that process is pinned to.
    pub owner: Option<(i32, usize)>,
}

/// One reuseport group (a local address and port).
#[derive(Debug)]
pub struct Group {
    pub proto: SockProto,
    pub local: SocketAddr,
    /// In socket inode order until [`order`] measured the join order.
    pub members: Vec<Member>,
}

impl Group {
    pub fn name(&self) -> String {
        format!("{} {}", self.proto.name(), self.local)
    }
}

fn protos(o: &SteerOpts) -> Vec<SockProto> {
    match o.proto {
        Some(super::common::Proto::Tcp) => vec![SockProto::Tcp],
        Some(super::common::Proto::Udp) => vec![SockProto::Udp],
        None => vec![SockProto::Tcp, SockProto::Udp],
    }
}

/// The tree's listening / bound sockets on the port, grouped by local
/// address (holders filled, owners not yet).
pub fn find_groups(pid: i32, o: &SteerOpts) -> Result<(Vec<i32>, Vec<Group>)> {
    if pid == std::process::id() as i32 {
        bail!("--pid {pid} is rsskit itself");
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
        let want = if proto == SockProto::Tcp { procnet::STATE_LISTEN } else { procnet::STATE_CLOSE };
        let mut by_addr: BTreeMap<SocketAddr, Vec<u64>> = BTreeMap::new();
        for e in procnet::sockets_of_netns(pid, proto)? {
            if e.state == want && e.local.port() != 0 && o.port.is_none_or(|p| p == e.local.port()) {
                by_addr.entry(e.local).or_default().push(e.inode);
            }
        }
        for (local, mut inodes) in by_addr {
            inodes.sort_unstable();
            if !inodes.iter().any(|i| fds.contains_key(i)) {
                continue; // another program's sockets
            }
            if let Some(i) = inodes.iter().find(|i| !fds.contains_key(i)) {
                bail!(
                    "{} {local}: socket inode {i} is not held by process {pid} or its children: the group \
                     has members outside the server, whose order rsskit cannot map",
                    proto.name()
                );
            }
            let members = inodes
                .into_iter()
                .map(|inode| Member { holders: fds[&inode].clone(), inode, cookie: None, owner: None })
                .collect();
            groups.push(Group { proto, local, members });
        }
    }
    if groups.is_empty() {
        let what = match o.proto {
            Some(super::common::Proto::Tcp) => "listening TCP",
            Some(super::common::Proto::Udp) => "bound UDP",
            None => "listening TCP or bound UDP",
        };
        let port = o.port.map(|p| format!(" on port {p}")).unwrap_or_default();
        bail!("process {pid} and its {} children hold no {what} socket{port}", tree.len() - 1);
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
            .context("fstat of a socket copy")?;
        if ino != m.inode {
            bail!("{}: process {p} closed fd {fd} while rsskit looked; try again", g.name());
        }
        out.push(c);
    }
    Ok(out)
}

/// Checks every member has `SO_REUSEPORT` and the group more than one member.
pub fn check_reuseport(g: &Group, c: &[OwnedFd]) -> Result<()> {
    for (m, fd) in g.members.iter().zip(c) {
        if !reuseport::reuseport_enabled(fd)? {
            let (p, f) = m.holders[0];
            bail!(
                "{}: not a reuseport group: the socket (inode {}, pid {p} fd {f}) does not have SO_REUSEPORT \
                 (nginx: `listen ... reuseport;`)",
                g.name(),
                m.inode
            );
        }
    }
    if g.members.len() < 2 {
        bail!(
            "{}: a reuseport group of one socket: nothing to steer (one socket per worker is needed)",
            g.name()
        );
    }
    Ok(())
}

/// Whether to steer `g`: a group failing [`check_reuseport`] is an error
/// when the port was named, and skipped (with a note if `note`) when every
/// port of the server is looked at (its other listeners need not be reuseport groups).
fn steerable(g: &Group, c: &[OwnedFd], o: &SteerOpts, note: bool) -> Result<bool> {
    match check_reuseport(g, c) {
        Ok(()) => Ok(true),
        Err(e) if o.port.is_none() => {
            if note {
                eprintln!("rsskit: skipping {e:#}");
            }
            Ok(false)
        }
        Err(e) => Err(e),
    }
}

/// When no group was steerable.
fn none_steerable(pid: i32) -> anyhow::Error {
    anyhow!("process {pid} and its children have no SO_REUSEPORT group of two or more sockets (nginx: `listen ... reuseport;`)")
}

/// Socket -> serving process -> its CPU, for every member.
pub fn resolve_owners(tree: &[i32], g: &mut Group, o: &SteerOpts) -> Result<()> {
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
        let owner = match (pollers.as_slice(), holders.len()) {
            ([one], _) => *one,
            ([], 1) => *holders.first().unwrap(),
            ([], _) => bail!(
                "{name}: cannot tell which process serves socket inode {}: processes {holders:?} hold it and \
                 none polls it with epoll",
                m.inode
            ),
            (many, _) => bail!(
                "{name}: socket inode {} is polled by several processes {many:?}: steering needs one socket per \
                 worker (nginx: `listen ... reuseport;`)",
                m.inode
            ),
        };
        let sets = procnet::process_affinity(owner)?;
        let cpu = match sets.as_slice() {
            [s] if s.len() == 1 => s[0],
            _ => {
                let all: BTreeSet<usize> = sets.iter().flatten().copied().collect();
                let list = rsskit_linux::cpulist::format(&all.into_iter().collect::<Vec<_>>());
                bail!(
                    "{name}: worker {owner} is not pinned to one CPU (its threads may run on CPUs {list}): pin each \
                     worker to its own CPU (nginx: `worker_cpu_affinity auto;`; otherwise \
                     `taskset -a -p -c CPU {owner}`)"
                )
            }
        };
        m.owner = Some((owner, cpu));
    }
    let owners: BTreeSet<i32> = g.members.iter().filter_map(|m| m.owner.map(|o| o.0)).collect();
    if owners.len() != g.members.len() {
        bail!(
            "{name}: {} sockets but {} worker processes serve them: the count does not match (one socket per worker)",
            g.members.len(),
            owners.len()
        );
    }
    if let Some(w) = o.workers {
        if w != g.members.len() {
            bail!("{name}: {} sockets in the group, --workers says {w}", g.members.len());
        }
    }
    if o.steer == Mode::Cpu {
        let mut seen: BTreeMap<usize, i32> = BTreeMap::new();
        for (p, c) in g.members.iter().filter_map(|m| m.owner) {
            if let Some(q) = seen.insert(c, p) {
                bail!("{name}: workers {q} and {p} are both pinned to CPU {c}: --steer cpu needs one worker per CPU");
            }
        }
    }
    Ok(())
}

fn ret_program(k: u32) -> Program {
    Program::new(vec![Insn { code: BPF_RET | BPF_K, jt: 0, jf: 0, k }]).expect("one ret instruction")
}

fn probe_target(local: SocketAddr) -> SocketAddr {
    let ip = match local.ip() {
        IpAddr::V4(a) if a.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(a) if a.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
        ip => ip,
    };
    SocketAddr::new(ip, local.port())
}

fn queued(proto: SockProto, c: &[OwnedFd]) -> Result<Vec<u32>> {
    c.iter()
        .map(|fd| match proto {
            SockProto::Tcp => reuseport::accept_queue_len(fd),
            SockProto::Udp => reuseport::rmem_alloc(fd),
        })
        .collect::<std::io::Result<_>>()
        .context("reading a socket's queue")
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
            .context("attaching a probe program")?;
        *probed = true;
        let mut found = None;
        for _attempt in 0..3 {
            let before = queued(g.proto, c)?;
            // Kept until the queues were read: a TCP probe stays queued, a UDP one is taken back.
            let (_tcp, udp) = match g.proto {
                SockProto::Tcp => (
                    Some(
                        TcpStream::connect_timeout(&target, Duration::from_secs(2))
                            .with_context(|| format!("{}: probe connection to {target}", g.name()))?,
                    ),
                    None,
                ),
                SockProto::Udp => {
                    let bind: SocketAddr =
                        if target.is_ipv4() { "127.0.0.1:0".parse()? } else { "[::1]:0".parse()? };
                    let s = UdpSocket::bind(bind).context("probe socket")?;
                    s.send_to(b"rsskit steer probe", target)
                        .with_context(|| format!("probe datagram to {target}"))?;
                    (None, Some(s))
                }
            };
            let t = Instant::now();
            let grew = loop {
                let now = queued(g.proto, c)?;
                let grew: Vec<usize> = (0..c.len()).filter(|&i| now[i] > before[i]).collect();
                if !grew.is_empty() || t.elapsed() > Duration::from_secs(2) {
                    break grew;
                }
                std::thread::sleep(Duration::from_millis(1));
            };
            if let (Some(s), [i]) = (&udp, grew.as_slice()) {
                reuseport::take_datagram_from(&c[*i], s.local_addr()?).context("taking the probe back")?;
            }
            if let [i] = grew.as_slice() {
                found = Some(*i);
                break;
            }
            // Nothing (or more than the probe, other traffic) arrived: try again.
        }
        let i = found.ok_or_else(|| {
            anyhow!(
                "{}: could not measure the group's order: a probe for socket {k} reached none of the server's \
                 sockets (a firewall, or group members outside the server?)",
                g.name()
            )
        })?;
        if order.contains(&i) {
            bail!(
                "{}: probes for two indices reached the same socket (inode {})",
                g.name(),
                g.members[i].inode
            );
        }
        order.push(i);
    }
    Ok(order)
}

/// The steering policy for a group in join order: worker i = the owner of
/// socket i, on its CPU. Buckets go round-robin over the workers in CPU
/// order (bucket b -> the (b mod n)-th CPU, as `rsskit hash` and `rsskit
/// find` count), not in socket order, so a flow's bucket names its CPU
/// whatever order the server's sockets joined in.
fn policy(g: &Group, o: &SteerOpts) -> Result<RssPolicy> {
    let cpus: Vec<CpuId> = g.members.iter().map(|m| CpuId(m.owner.expect("resolved").1 as u32)).collect();
    let mut p =
        RssPolicy::new(o.key.clone(), HashConfig::default().with_udp_4tuple(o.udp_4tuple), &cpus, o.bits)
            .map_err(|e| anyhow!("{e}"))?;
    let mut by_cpu: Vec<WorkerId> = (0..cpus.len() as u32).map(WorkerId).collect();
    by_cpu.sort_by_key(|w| (cpus[w.index()], *w));
    for b in 0..p.buckets() {
        p.assign(b, by_cpu[b as usize % by_cpu.len()]).map_err(|e| anyhow!("{e}"))?;
    }
    Ok(p)
}

/// What was attached to one group.
#[derive(Debug)]
pub struct Steered {
    pub group: Group,
    pub program_len: usize,
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
fn prepare(pid: i32, o: &SteerOpts) -> Result<(bool, Vec<Ready>)> {
    let (tree, groups) = find_groups(pid, o)?;
    let netns = procnet::other_netns(pid)
        .with_context(|| format!("process {pid}: cannot tell its network namespace (nothing was changed)"))?;
    if netns {
        // The probes are sent from a thread inside it: try entering now.
        std::thread::scope(|s| s.spawn(|| procnet::enter_netns_of(pid)).join())
            .map_err(|_| anyhow!("the namespace thread panicked"))?
            .with_context(|| {
                format!("entering the network namespace of process {pid} (nothing was changed)")
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
            // SAFETY: kill(2) with signal 0 only checks existence and permission.
            if unsafe { libc::kill(p, 0) } != 0 {
                let e = std::io::Error::last_os_error();
                bail!(
                    "{}: no permission to stop worker {p} for the order probe: {e} (nothing was changed)",
                    g.name()
                );
            }
        }
        ready.push(Ready { group: g, copies: c, stop });
    }
    if ready.is_empty() {
        return Err(none_steerable(pid));
    }
    Ok((netns, ready))
}

/// Measures the order of one prepared group and attaches its program.
/// Before the first change a watchdog process is started: should rsskit
/// die (SIGKILL included) while the holders are stopped, it detaches the
/// probe program and continues them.
fn steer_group(pid: i32, netns: bool, r: Ready, o: &SteerOpts) -> Result<Steered> {
    let Ready { group: mut g, copies: c, stop } = r;
    let watchdog = rsskit_linux::watchdog::Watchdog::start(&stop, &c[0])
        .with_context(|| format!("{}: starting the watchdog (nothing was changed)", g.name()))?;
    let stopped = match Stopped::new(&stop, Duration::from_secs(5)) {
        Ok(s) => s,
        Err(e) => {
            // Those stopped so far were continued: nothing for the watchdog to do.
            watchdog.finish();
            return Err(anyhow::Error::new(e).context(format!(
                "{}: stopping the workers for the order probe (nothing was changed)",
                g.name()
            )));
        }
    };
    let mut probed = false;
    let attached = (|| -> Result<Steered> {
        // Before the first probe replaces the group's program: from here a
        // death of rsskit makes the watchdog detach (never leave a probe).
        watchdog.probing().context("telling the watchdog")?;
        // The probes must be sent inside the server's network namespace.
        let order = std::thread::scope(|s| {
            s.spawn(|| {
                if netns {
                    procnet::enter_netns_of(pid)?;
                }
                measure_order(&g, &c, &mut probed)
            })
            .join()
            .map_err(|_| anyhow!("the probe thread panicked"))?
        })?;
        let mut slots: Vec<Option<Member>> = g.members.drain(..).map(Some).collect();
        g.members = order.iter().map(|&i| slots[i].take().expect("a permutation")).collect();
        let c: Vec<&OwnedFd> = order.iter().map(|&i| &c[i]).collect();
        let p = policy(&g, o)?;
        let (prog, ht) = match o.steer {
            Mode::Cpu => (p.cpu_program(), None),
            Mode::Toeplitz => {
                let proto = if g.proto == SockProto::Tcp { L4Proto::Tcp } else { L4Proto::Udp };
                let ht = p.hash_type(g.local.is_ipv6(), proto, false);
                (p.toeplitz_program(ht), Some(ht.name()))
            }
        };
        let prog = prog.map_err(|e| anyhow!("{}: building the program: {e}", g.name()))?;
        if o.steer == Mode::Toeplitz && g.local.is_ipv6() && !reuseport::v6only(c[0]).unwrap_or(true) {
            // The IPv6 program reads an IPv6 header; IPv4 packets get the fallback.
            eprintln!(
                "rsskit: warning: {} is dual-stack (not IPV6_V6ONLY): --steer toeplitz steers its IPv6 flows \
                 only, IPv4 ones are spread by the kernel's hash",
                g.name()
            );
        }
        rsskit_linux::bpf::attach_reuseport(&prog, c[0]).with_context(|| g.name())?;
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
    attached.context(if probed {
        "the probe replaced the group's program: the kernel's own reuseport hash is in force"
    } else {
        "nothing was changed"
    })
}

/// Finds, maps, measures and steers every group of the tree of `pid`.
/// Every group is checked before the first one is changed.
pub fn steer(pid: i32, o: &SteerOpts) -> Result<Vec<Steered>> {
    let (netns, ready) = prepare(pid, o)?;
    ready.into_iter().map(|r| steer_group(pid, netns, r, o)).collect()
}

/// A group as it would be steered now: its name and (inode, worker, CPU)
/// per socket, in inode order.
pub type Survey = (String, Vec<(u64, i32, usize)>);

/// The groups as they would be steered now, without touching them. Fails
/// as `steer` would.
pub fn survey(pid: i32, o: &SteerOpts) -> Result<Vec<Survey>> {
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
        return Err(none_steerable(pid));
    }
    Ok(out)
}

/// Prints what `steer` did (JSON on stdout, or lines on `w`).
pub fn report(steered: &[Steered], o: &SteerOpts, w: &mut dyn std::io::Write) -> Result<()> {
    let mode = match o.steer {
        Mode::Cpu => "cpu",
        Mode::Toeplitz => "toeplitz",
    };
    if o.json {
        let groups: Vec<_> = steered
            .iter()
            .map(|s| {
                json!({
                    "proto": s.group.proto.name(),
                    "local": s.group.local.to_string(),
                    "steer": mode,
                    "hash_type": s.hash_type,
                    "program_insns": s.program_len,
                    "sockets": s.group.members.iter().enumerate().map(|(i, m)| {
                        let (pid, cpu) = m.owner.expect("resolved");
                        json!({"index": i, "inode": m.inode, "cookie": m.cookie, "pid": pid, "cpu": cpu})
                    }).collect::<Vec<_>>(),
                })
            })
            .collect();
        return print_json(&json!({ "groups": groups }));
    }
    for s in steered {
        let ht = s.hash_type.map(|h| format!(", hash {h}")).unwrap_or_default();
        writeln!(
            w,
            "{}: {} sockets, steer {mode}{ht} ({} BPF instructions)",
            s.group.name(),
            s.group.members.len(),
            s.program_len
        )?;
        for (i, m) in s.group.members.iter().enumerate() {
            let (pid, cpu) = m.owner.expect("resolved");
            let cookie = m.cookie.map(|c| format!(", cookie {c}")).unwrap_or_default();
            writeln!(w, "  socket {i} (inode {}{cookie}): worker {pid} on CPU {cpu}", m.inode)?;
        }
    }
    Ok(())
}

/// Detaches the program of every group of the tree.
fn detach(pid: i32, o: &SteerOpts) -> Result<()> {
    let (_, groups) = find_groups(pid, o)?;
    let mut any = false;
    for g in groups {
        let c = copies(&g)?;
        if !steerable(&g, &c, o, true)? {
            continue;
        }
        any = true;
        let had = reuseport::detach(&c[0]).with_context(|| g.name())?;
        println!(
            "{}: {}",
            g.name(),
            if had {
                "program detached, the kernel's reuseport hash picks sockets"
            } else {
                "no program was attached"
            }
        );
    }
    if !any {
        return Err(none_steerable(pid));
    }
    Ok(())
}

pub fn run(a: Args) -> Result<()> {
    if a.detach {
        return detach(a.pid, &a.opts);
    }
    // While the server is stopped for the probes, SIGINT/SIGTERM must not
    // kill rsskit before it continues the server: they only set a flag.
    let interrupted = super::common::stop_on_signals()?;
    a.opts.vet_key()?;
    let s = steer(a.pid, &a.opts)?;
    report(&s, &a.opts, &mut std::io::stdout())?;
    if interrupted.load(std::sync::atomic::Ordering::Relaxed) {
        bail!("interrupted (the steering above was completed)");
    }
    Ok(())
}
