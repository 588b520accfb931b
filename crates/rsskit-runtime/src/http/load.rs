//! `rsskit http-load`: an HTTP/1.1 load tester that holds tens of thousands
//! of connections. One pinned worker per CPU (or `threads`), each with its
//! own epoll loop (edge-triggered) and its own connections; latency per
//! request into a per-worker HdrHistogram, merged at the end.
//!
//! - Closed loop (default): every connection sends its next request as soon
//!   as the previous answer is in; latency runs from the request's start
//!   (the `connect()` for a request that opens a connection).
//! - `rate`: every connection has a fixed schedule (`rate / connections`
//!   requests per second, phases spread evenly); latency runs from the
//!   *scheduled* start, so a stall delays every request scheduled behind it
//!   and shows in the tail (coordinated omission corrected, as wrk2).
//! - `close`: one request per connection (`Connection: close`), else
//!   keep-alive.
//! - Sources: connections spread over the addresses of `sources` (past one
//!   address's 64K ports); source ports picked by the kernel or by the tuple
//!   finder ([`SrcPorts`]).

use super::event::{self, Epoll};
use super::hist::{Latency, LatencySummary};
use super::now_ns;
use crate::udp_load::IpNet;
use crate::worker::Workers;
use anyhow::{anyhow, bail, Context, Result};
use rsskit_core::finder::{find_src_ports_any, Solutions};
use rsskit_core::toeplitz::{key_window, reference};
use rsskit_core::{CpuId, FlowTuple, HashConfig, HashType, L4Proto, RssKey, RssPolicy, WorkerId};
use rsskit_linux::socket::setsockopt_int;
use serde::Serialize;
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io::{self, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpStream, ToSocketAddrs};
use std::os::fd::AsRawFd;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How source ports are chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SrcPorts {
    /// The kernel's ephemeral ports.
    Kernel,
    /// Tuple finder, forward direction: the flow's Toeplitz hash (TCP
    /// 4-tuple) lands in a bucket of the server worker paired with the
    /// opening client worker (a server with `--steer toeplitz`, or a NIC
    /// hashing the requests).
    Server,
    /// Tuple finder, reply direction: the server's packets to us hash into
    /// a bucket of the opening worker's CPU (the client host's RSS).
    Reply,
}

impl FromStr for SrcPorts {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "kernel" => Ok(SrcPorts::Kernel),
            "server" => Ok(SrcPorts::Server),
            "reply" => Ok(SrcPorts::Reply),
            _ => Err(format!("'{s}' is not a source-port mode: kernel, server or reply")),
        }
    }
}

/// A parsed `http://HOST[:PORT]/PATH` URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Url {
    pub addr: SocketAddr,
    /// Host header value.
    pub host: String,
    /// Path and query (at least `/`).
    pub path: String,
}

/// Parses and resolves an `http://` URL.
pub fn parse_url(s: &str) -> Result<Url> {
    let rest =
        s.strip_prefix("http://").ok_or_else(|| anyhow!("--url '{s}': only http:// URLs are supported"))?;
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    if authority.is_empty() || authority.contains('@') {
        bail!("--url '{s}': expected http://HOST[:PORT]/PATH");
    }
    if path.bytes().any(|b| b <= b' ' || b == 0x7f) {
        bail!("--url '{s}': the path has spaces or control characters");
    }
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let (h, after) =
            v6.split_once(']').ok_or_else(|| anyhow!("--url '{s}': unterminated [IPv6] host"))?;
        let port = match after.strip_prefix(':') {
            Some(p) => p.parse::<u16>().map_err(|_| anyhow!("--url '{s}': bad port '{p}'"))?,
            None if after.is_empty() => 80,
            None => bail!("--url '{s}': junk after the [IPv6] host"),
        };
        (h.to_string(), port)
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) => {
                (h.to_string(), p.parse::<u16>().map_err(|_| anyhow!("--url '{s}': bad port '{p}'"))?)
            }
            None => (authority.to_string(), 80),
        }
    };
    if port == 0 {
        bail!("--url '{s}': port 0");
    }
    let addr = match host.parse::<IpAddr>() {
        Ok(ip) => SocketAddr::new(ip, port),
        Err(_) => (host.as_str(), port)
            .to_socket_addrs()
            .map_err(|e| anyhow!("--url '{s}': cannot resolve '{host}': {e}"))?
            .next()
            .ok_or_else(|| anyhow!("--url '{s}': '{host}' resolves to no address"))?,
    };
    Ok(Url { addr, host: authority.to_string(), path: path.to_string() })
}

/// What to run.
#[derive(Debug, Clone)]
pub struct LoadConfig {
    pub url: Url,
    pub connections: usize,
    pub duration: Duration,
    /// Requests per second over all connections (scheduled starts).
    pub rate: Option<f64>,
    /// One request per connection.
    pub close: bool,
    /// Worker `i` runs on `cpus[i]` (pinned if `pin`).
    pub cpus: Vec<usize>,
    pub pin: bool,
    pub sources: Option<IpNet>,
    pub timeout: Duration,
    pub src_ports: SrcPorts,
    /// Key of the tuple finder.
    pub key: RssKey,
    /// The server's worker CPUs (`SrcPorts::Server`): client worker `i`
    /// aims at server worker `i % len`.
    pub server_cpus: Vec<usize>,
    /// Run the workers under `SCHED_BATCH` (no wakeup preemption): when
    /// the client shares CPUs with the server, a worker woken by each
    /// answer no longer preempts the server after every response, so
    /// both sides work in batches (fewer context switches per request).
    pub sched_batch: bool,
}

impl LoadConfig {
    pub fn validate(&self) -> Result<()> {
        if self.connections == 0 {
            bail!("--connections must be at least 1");
        }
        if self.cpus.is_empty() {
            bail!("no worker threads");
        }
        if let Some(r) = self.rate {
            if !(r.is_finite() && r > 0.0) {
                bail!("--rate must be a positive number of requests per second");
            }
        }
        if let Some(n) = &self.sources {
            if n.addr.is_ipv4() != self.url.addr.is_ipv4() {
                bail!("--sources {n} and the target {} are of different address families", self.url.addr);
            }
        }
        if self.src_ports == SrcPorts::Server && self.server_cpus.is_empty() {
            bail!("--server-cpus is empty");
        }
        Ok(())
    }

    fn request(&self) -> Vec<u8> {
        format!(
            "GET {} HTTP/1.1\r\nHost: {}\r\nUser-Agent: rsskit-http-load\r\n{}\r\n",
            self.url.path,
            self.url.host,
            if self.close { "Connection: close\r\n" } else { "" }
        )
        .into_bytes()
    }
}

/// Errors by kind.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq, Eq)]
pub struct Errors {
    /// Connection refused (nothing listening, or the backlog overflowed).
    pub refused: u64,
    /// No complete answer within the timeout.
    pub timeout: u64,
    /// Connection reset (or broken pipe).
    pub reset: u64,
    /// Answers with a status outside 2xx (counted as responses too).
    pub bad_status: u64,
    /// The connection ended before the whole answer.
    pub short_body: u64,
    /// Anything else: unparsable answers, no local address or port left...
    pub other: u64,
}

impl Errors {
    /// Failed requests (`bad_status` answers are answers, not counted).
    pub fn failures(&self) -> u64 {
        self.refused + self.timeout + self.reset + self.short_body + self.other
    }

    fn add(&mut self, o: &Errors) {
        self.refused += o.refused;
        self.timeout += o.timeout;
        self.reset += o.reset;
        self.bad_status += o.bad_status;
        self.short_body += o.short_body;
        self.other += o.other;
    }
}

/// One worker's results.
#[derive(Debug, Clone, Serialize)]
pub struct WorkerReport {
    pub worker: usize,
    pub cpu: usize,
    pub connections: usize,
    /// Requests written in full.
    pub sent: u64,
    /// Answers received in full (any status).
    pub responses: u64,
    /// Connections opened (connect completed).
    pub connects: u64,
    pub bytes_in: u64,
    pub errors: Errors,
    #[serde(skip)]
    pub latency: Latency,
    #[serde(skip)]
    pub connect: Latency,
}

/// The run's summary.
#[derive(Debug, Clone, Serialize)]
pub struct LoadReport {
    pub url: String,
    pub target: String,
    pub mode: &'static str,
    pub connections: usize,
    pub threads: usize,
    pub cpus: Vec<usize>,
    pub rate: Option<f64>,
    pub src_ports: SrcPorts,
    pub source_addresses: usize,
    pub duration_s: f64,
    pub elapsed_s: f64,
    pub sent: u64,
    pub responses: u64,
    pub ok: u64,
    pub requests_per_s: f64,
    pub connects: u64,
    pub bytes_in: u64,
    /// Latency in microseconds (from the scheduled start with `rate`).
    pub latency_us: LatencySummary,
    /// Connection setup (connect to established), microseconds.
    pub connect_us: LatencySummary,
    pub errors: Errors,
    pub workers: Vec<WorkerReport>,
    /// Once a second: (seconds since the start, each worker's responses so
    /// far), for `--plot`.
    #[serde(skip)]
    pub per_second: Vec<(f64, Vec<u64>)>,
    /// `RLIMIT_NOFILE` in force.
    pub nofile: u64,
}

/// Live counters of one worker, for the per-second line.
#[derive(Debug, Default)]
pub struct Live {
    pub responses: AtomicU64,
    pub failures: AtomicU64,
    pub open: AtomicU64,
}

/// The source addresses to use: up to 256 hosts of `net` (IPv4: not the
/// network address), or none (let the kernel choose).
pub fn source_addresses(net: Option<&IpNet>, connections: usize) -> Vec<IpAddr> {
    let Some(net) = net else { return Vec::new() };
    let bits: u32 = if net.addr.is_ipv4() { 32 } else { 128 };
    let host_bits = bits - u32::from(net.prefix_len);
    let hosts: u128 = if host_bits >= 127 { u128::MAX } else { 1u128 << host_bits };
    // Enough addresses for ~20,000 connections each, at least 4, at most 256.
    let want = (connections / 20_000 + 1).clamp(4, 256) as u128;
    let (base, first) = match net.addr {
        IpAddr::V4(a) => {
            let m = if host_bits == 32 { 0 } else { u32::MAX << host_bits };
            (u128::from(u32::from(a) & m), u128::from(host_bits >= 2))
        }
        IpAddr::V6(a) => {
            let m = if host_bits == 128 { 0 } else { u128::MAX << host_bits };
            (u128::from(a) & m, u128::from(host_bits >= 2))
        }
    };
    let n = want.min(hosts - first).max(1);
    (0..n)
        .map(|i| {
            let v = base + first + i;
            if net.addr.is_ipv4() {
                IpAddr::V4(Ipv4Addr::from(v as u32))
            } else {
                IpAddr::V6(Ipv6Addr::from(v))
            }
        })
        .collect()
}

/// Destination ports (our side, in the reply `server -> client`) whose
/// reply hash lands in one of `buckets` under `mask`: the finder's GF(2)
/// solver over the destination-port bits.
pub fn reply_ports(
    key: &RssKey,
    server: SocketAddr,
    client: IpAddr,
    mask: u32,
    buckets: &[u32],
    ports: std::ops::RangeInclusive<u16>,
) -> Vec<u16> {
    let ht = if server.is_ipv6() { HashType::TcpIpv6 } else { HashType::TcpIpv4 };
    let Ok(input) = FlowTuple::new(server.ip(), server.port(), client, 0, L4Proto::Tcp).input(ht) else {
        return Vec::new();
    };
    if key.len() < ht.input_len() + 4 {
        return Vec::new();
    }
    let h0 = reference(key.as_bytes(), input.as_bytes());
    // Destination port: the 16 bits after both addresses and the source
    // port; value bit j sits at input bit off + 15 - j.
    let off = if server.is_ipv6() { 256 + 16 } else { 64 + 16 };
    let w: Vec<u32> = (0..16).map(|j| key_window(key.as_bytes(), off + 15 - j)).collect();
    let mut out = Vec::new();
    for &b in buckets {
        if let Some(s) = Solutions::solve(&w, h0, mask, b & mask) {
            out.extend(
                s.in_range(u128::from(*ports.start()), u128::from(*ports.end()), 1 << 16)
                    .into_iter()
                    .map(|x| x as u16),
            );
        }
    }
    out.sort_unstable();
    out.dedup();
    out
}

/// Where worker `w`'s connections come from.
#[derive(Debug, Clone, Default)]
pub struct SourcePlan {
    /// Local addresses to bind (port 0 = the kernel picks, at connect time).
    pub locals: Vec<SocketAddr>,
}

/// Plans every worker's local addresses.
pub fn plan_sources(cfg: &LoadConfig) -> Result<Vec<SourcePlan>> {
    let threads = cfg.cpus.len();
    let mut addrs = source_addresses(cfg.sources.as_ref(), cfg.connections);
    let dst = cfg.url.addr;
    if cfg.src_ports != SrcPorts::Kernel && addrs.is_empty() {
        // The finder needs the source address: the one the kernel would use.
        let probe = std::net::UdpSocket::bind(if dst.is_ipv4() { "0.0.0.0:0" } else { "[::]:0" })
            .and_then(|s| s.connect(dst).map(|_| s))
            .and_then(|s| s.local_addr())
            .context("finding the local address towards the target")?;
        addrs.push(probe.ip());
    }
    let mut plans = vec![SourcePlan::default(); threads];
    for (w, plan) in plans.iter_mut().enumerate() {
        match cfg.src_ports {
            SrcPorts::Kernel => plan.locals = addrs.iter().map(|&a| SocketAddr::new(a, 0)).collect(),
            SrcPorts::Server => {
                let server =
                    policy_over(&cfg.key, &cfg.server_cpus).map_err(|e| anyhow!("server table: {e}"))?;
                // Client worker w aims at server worker w (mod their count).
                let buckets = server.buckets_of(WorkerId((w % server.workers()) as u32));
                let ht = if dst.is_ipv6() { HashType::TcpIpv6 } else { HashType::TcpIpv4 };
                let mut per_addr = Vec::new();
                for &a in &addrs {
                    let found = find_src_ports_any(
                        &cfg.key,
                        ht,
                        a,
                        dst.ip(),
                        dst.port(),
                        1024..=65535,
                        server.mask(),
                        &buckets,
                        1 << 16,
                    )
                    .map_err(|e| anyhow!("tuple finder for {a} -> {dst}: {e}"))?;
                    per_addr
                        .push(found.into_iter().map(|f| SocketAddr::new(a, f.src_port)).collect::<Vec<_>>());
                }
                plan.locals = interleave(per_addr);
            }
            SrcPorts::Reply => {
                let client = policy_over(&cfg.key, &cfg.cpus).map_err(|e| anyhow!("client table: {e}"))?;
                let buckets = client.buckets_of(WorkerId(w as u32));
                let per_addr = addrs
                    .iter()
                    .map(|&a| {
                        reply_ports(&cfg.key, dst, a, client.mask(), &buckets, 1024..=65535)
                            .into_iter()
                            .map(|p| SocketAddr::new(a, p))
                            .collect::<Vec<_>>()
                    })
                    .collect();
                plan.locals = interleave(per_addr);
            }
        }
        if cfg.src_ports != SrcPorts::Kernel && plan.locals.is_empty() {
            bail!("the tuple finder found no source port for worker {w}");
        }
    }
    Ok(plans)
}

/// The RSS policy of a set of workers on `cpus` (worker i on `cpus[i]`).
fn policy_over(key: &RssKey, cpus: &[usize]) -> Result<RssPolicy, rsskit_core::rss::RssError> {
    let cpus: Vec<CpuId> = cpus.iter().map(|&c| CpuId(c as u32)).collect();
    RssPolicy::new(key.clone(), HashConfig::default(), &cpus, None)
}

fn interleave(lists: Vec<Vec<SocketAddr>>) -> Vec<SocketAddr> {
    let longest = lists.iter().map(Vec::len).max().unwrap_or(0);
    let mut out = Vec::with_capacity(lists.iter().map(Vec::len).sum());
    for i in 0..longest {
        for l in &lists {
            if let Some(&a) = l.get(i) {
                out.push(a);
            }
        }
    }
    out
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Waiting for its start time (or finished, when `done`).
    Idle,
    Connecting,
    Writing,
    Reading,
}

struct Conn {
    sock: Option<TcpStream>,
    state: State,
    gen: u32,
    /// Latency origin of the current request.
    start: u64,
    /// When the current request began for real (timeouts).
    began: u64,
    connect_start: u64,
    /// Next scheduled start (rate mode).
    next_sched: u64,
    /// Bytes of the request written.
    wpos: usize,
    head: Vec<u8>,
    head_done: bool,
    remaining: usize,
    until_eof: bool,
    server_close: bool,
    status: u16,
    got_bytes: bool,
    /// Pending timer time (0: none).
    timer: u64,
    done: bool,
}

#[derive(PartialEq, Eq)]
enum Fail {
    Refused,
    Timeout,
    Reset,
    Short,
    Other,
}

struct Worker {
    index: usize,
    cpu: usize,
    ep: Epoll,
    conns: Vec<Conn>,
    request: Arc<[u8]>,
    target: SockAddr,
    ipv6: bool,
    locals: Vec<SocketAddr>,
    local_cursor: usize,
    bind_port: bool,
    timers: BinaryHeap<Reverse<(u64, u32)>>,
    interval: Option<u64>,
    close: bool,
    timeout_ns: u64,
    end: u64,
    scratch: Vec<u8>,
    report: WorkerReport,
    live: Arc<Live>,
    open: u64,
    inflight: usize,
    /// Connections to start once the current event batch is handled
    /// (never from inside a read: no recursion into the reader).
    ready: Vec<(u32, u64)>,
}

const BACKOFF_NS: u64 = 10_000_000;

impl Worker {
    fn token(&self, i: usize) -> u64 {
        (u64::from(self.conns[i].gen) << 32) | i as u64
    }

    fn arm(&mut self, i: usize, at: u64) {
        self.conns[i].timer = at;
        self.timers.push(Reverse((at, i as u32)));
    }

    /// Starts request `i` now (its latency origin `start`).
    fn begin(&mut self, i: usize, start: u64, now: u64) {
        let c = &mut self.conns[i];
        c.start = start;
        c.began = now;
        c.wpos = 0;
        c.head.clear();
        c.head_done = false;
        c.remaining = 0;
        c.until_eof = false;
        c.server_close = false;
        c.got_bytes = false;
        self.inflight += 1;
        if self.conns[i].sock.is_some() {
            self.conns[i].state = State::Writing;
            self.write_req(i, now, true);
        } else {
            self.open(i, now);
        }
    }

    fn open(&mut self, i: usize, now: u64) {
        let domain = if self.ipv6 { Domain::IPV6 } else { Domain::IPV4 };
        let s = match Socket::new(domain, Type::STREAM.nonblocking(), Some(Protocol::TCP)) {
            Ok(s) => s,
            Err(_) => return self.fail(i, Fail::Other, now),
        };
        if !self.locals.is_empty() {
            let mut bound = false;
            for _ in 0..8.min(self.locals.len()) {
                let local = self.locals[self.local_cursor % self.locals.len()];
                self.local_cursor = self.local_cursor.wrapping_add(1);
                if self.bind_port {
                    let _ = s.set_reuse_address(true);
                } else {
                    // Best effort: without it, bind() reserves a port per address.
                    let _ = setsockopt_int(s.as_raw_fd(), libc::IPPROTO_IP, libc::IP_BIND_ADDRESS_NO_PORT, 1);
                }
                if s.bind(&local.into()).is_ok() {
                    bound = true;
                    break;
                }
            }
            if !bound {
                return self.fail(i, Fail::Other, now);
            }
        }
        if !self.close {
            // Keep-alive: a request must never wait behind Nagle.
            let _ = s.set_nodelay(true);
        }
        match s.connect(&self.target) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => {}
            Err(e) => {
                let kind =
                    if e.kind() == io::ErrorKind::ConnectionRefused { Fail::Refused } else { Fail::Other };
                return self.fail(i, kind, now);
            }
        }
        let sock = TcpStream::from(s);
        let tok = self.token(i);
        if self.ep.add(sock.as_raw_fd(), event::IN | event::OUT | event::RDHUP | event::ET, tok).is_err() {
            return self.fail(i, Fail::Other, now);
        }
        self.open += 1;
        let c = &mut self.conns[i];
        c.sock = Some(sock);
        c.state = State::Connecting;
        c.connect_start = now;
    }

    fn drop_sock(&mut self, i: usize) {
        if self.conns[i].sock.take().is_some() {
            self.open -= 1;
            let c = &mut self.conns[i];
            c.gen = c.gen.wrapping_add(1);
        }
    }

    fn fail(&mut self, i: usize, why: Fail, now: u64) {
        let e = &mut self.report.errors;
        match why {
            Fail::Refused => e.refused += 1,
            Fail::Timeout => e.timeout += 1,
            Fail::Reset => e.reset += 1,
            Fail::Short => e.short_body += 1,
            Fail::Other => e.other += 1,
        }
        self.drop_sock(i);
        self.inflight -= 1;
        self.conns[i].state = State::Idle;
        // Back off a little so that a dead target does not spin the CPU.
        let at = match self.interval {
            Some(iv) => {
                let c = &mut self.conns[i];
                c.next_sched += iv;
                c.next_sched.max(now + BACKOFF_NS)
            }
            None => now + BACKOFF_NS,
        };
        self.schedule_at(i, at);
    }

    fn schedule_at(&mut self, i: usize, at: u64) {
        if at >= self.end {
            self.conns[i].done = true;
            self.conns[i].state = State::Idle;
            return;
        }
        self.arm(i, at);
    }

    /// A full answer arrived.
    fn complete(&mut self, i: usize, now: u64) {
        let c = &self.conns[i];
        self.report.latency.record(now.saturating_sub(c.start));
        self.report.responses += 1;
        if !(200..300).contains(&c.status) {
            self.report.errors.bad_status += 1;
        }
        let reuse = !self.close && !c.server_close && !c.until_eof;
        if !reuse {
            self.drop_sock(i);
        }
        self.inflight -= 1;
        self.conns[i].state = State::Idle;
        match self.interval {
            Some(iv) => {
                let c = &mut self.conns[i];
                c.next_sched += iv;
                let at = c.next_sched;
                if at >= self.end {
                    self.conns[i].done = true;
                } else if at <= now {
                    self.ready.push((i as u32, at));
                } else {
                    self.arm(i, at);
                }
            }
            None => {
                if now >= self.end {
                    self.conns[i].done = true;
                } else {
                    self.ready.push((i as u32, now));
                }
            }
        }
    }

    /// Writes (the rest of) the request. `fresh`: called from `begin` on an
    /// established, idle connection, so nothing of this exchange has been
    /// read or reported yet.
    fn write_req(&mut self, i: usize, now: u64, fresh: bool) {
        let req = self.request.clone();
        let c = &mut self.conns[i];
        let Some(sock) = c.sock.as_ref() else { return };
        let mut one_write = fresh;
        loop {
            match (&*sock).write(&req[c.wpos..]) {
                Ok(n) => {
                    c.wpos += n;
                    if c.wpos == req.len() {
                        c.state = State::Reading;
                        self.report.sent += 1;
                        if one_write {
                            // The whole request left in one write on an
                            // idle keep-alive connection: the answer can
                            // only arrive after it, and its arrival wakes
                            // the edge-triggered epoll (EPOLLIN is always
                            // registered). Reading now would almost always
                            // be an EAGAIN, one wasted syscall per request.
                            return;
                        }
                        // After a partial write or a connect, the answer
                        // may already be there (edge-triggered: it would
                        // not be reported again).
                        return self.read_resp(i, now);
                    }
                    one_write = false;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    let why = if c.got_bytes || e.kind() != io::ErrorKind::ConnectionRefused {
                        Fail::Reset
                    } else {
                        Fail::Refused
                    };
                    return self.fail(i, why, now);
                }
            }
        }
    }

    fn read_resp(&mut self, i: usize, now: u64) {
        let mut scratch = std::mem::take(&mut self.scratch);
        self.read_into(i, now, &mut scratch);
        self.scratch = scratch;
    }

    fn read_into(&mut self, i: usize, now: u64, buf: &mut [u8]) {
        loop {
            let c = &mut self.conns[i];
            if c.state != State::Reading {
                return;
            }
            let Some(sock) = c.sock.as_ref() else { return };
            let n = match (&*sock).read(buf) {
                Ok(0) => {
                    if c.head_done && c.until_eof {
                        return self.complete(i, now);
                    }
                    return self.fail(i, Fail::Short, now);
                }
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => return self.fail(i, Fail::Reset, now),
            };
            self.report.bytes_in += n as u64;
            let c = &mut self.conns[i];
            c.got_bytes = true;
            let mut body = n;
            if !c.head_done {
                c.head.extend_from_slice(&buf[..n]);
                let mut hs = [httparse::EMPTY_HEADER; 32];
                let mut resp = httparse::Response::new(&mut hs);
                match resp.parse(&c.head) {
                    Ok(httparse::Status::Partial) => {
                        if c.head.len() > 64 * 1024 {
                            return self.fail(i, Fail::Other, now);
                        }
                        continue;
                    }
                    Ok(httparse::Status::Complete(hl)) => {
                        c.status = resp.code.unwrap_or(0);
                        let mut len = None;
                        let mut chunked = false;
                        for h in resp.headers.iter() {
                            if h.name.eq_ignore_ascii_case("content-length") {
                                len = std::str::from_utf8(h.value)
                                    .ok()
                                    .and_then(|v| v.trim().parse::<usize>().ok());
                            } else if h.name.eq_ignore_ascii_case("connection") {
                                if h.value.eq_ignore_ascii_case(b"close") {
                                    c.server_close = true;
                                }
                            } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
                                chunked = true;
                            }
                        }
                        if resp.version == Some(0) {
                            c.server_close = true;
                        }
                        if chunked {
                            return self.fail(i, Fail::Other, now);
                        }
                        let no_body = c.status == 204 || c.status == 304 || (100..200).contains(&c.status);
                        match (len, no_body) {
                            (_, true) => c.remaining = 0,
                            (Some(l), false) => c.remaining = l,
                            (None, false) => c.until_eof = true,
                        }
                        c.head_done = true;
                        body = c.head.len() - hl;
                        c.head.clear();
                    }
                    Err(_) => return self.fail(i, Fail::Other, now),
                }
            }
            let c = &mut self.conns[i];
            if !c.until_eof {
                if body > c.remaining {
                    // More than announced: the stream is out of step.
                    return self.fail(i, Fail::Other, now);
                }
                c.remaining -= body;
                if c.remaining == 0 {
                    return self.complete(i, now);
                }
            }
        }
    }

    fn on_event(&mut self, tok: u64, ev: u32, now: u64) {
        let i = (tok & 0xffff_ffff) as usize;
        if i >= self.conns.len() || self.conns[i].gen != (tok >> 32) as u32 || self.conns[i].sock.is_none() {
            return;
        }
        match self.conns[i].state {
            State::Connecting => {
                if ev & (event::OUT | event::ERR | event::HUP) == 0 {
                    return;
                }
                let err = self.conns[i].sock.as_ref().and_then(|s| s.take_error().ok().flatten());
                if let Some(e) = err {
                    let why = if e.kind() == io::ErrorKind::ConnectionRefused {
                        Fail::Refused
                    } else {
                        Fail::Reset
                    };
                    return self.fail(i, why, now);
                }
                if ev & (event::ERR | event::HUP) != 0 {
                    return self.fail(i, Fail::Reset, now);
                }
                self.report.connects += 1;
                let t = now.saturating_sub(self.conns[i].connect_start);
                self.report.connect.record(t);
                self.conns[i].state = State::Writing;
                self.write_req(i, now, false);
            }
            State::Writing => {
                if ev & event::OUT != 0 {
                    self.write_req(i, now, false);
                } else if ev & (event::ERR | event::HUP) != 0 {
                    self.fail(i, Fail::Reset, now);
                }
            }
            State::Reading => self.read_resp(i, now),
            State::Idle => {
                // An idle keep-alive connection closed by the server (or
                // reset): reconnect for the next request.
                if ev & (event::IN | event::RDHUP | event::HUP | event::ERR) != 0 {
                    // Edge-triggered events can be stale: peek before
                    // dropping a connection that may still be fine.
                    let mut b = [0u8; 1];
                    let gone = match self.conns[i].sock.as_ref().map(|s| s.peek(&mut b)) {
                        Some(Err(e)) => e.kind() != io::ErrorKind::WouldBlock,
                        Some(Ok(_)) => true,
                        None => false,
                    };
                    if gone {
                        self.drop_sock(i);
                    }
                }
            }
        }
    }

    fn scan_timeouts(&mut self, now: u64) {
        for i in 0..self.conns.len() {
            let c = &self.conns[i];
            if c.state != State::Idle && now.saturating_sub(c.began) > self.timeout_ns {
                self.fail(i, Fail::Timeout, now);
            }
        }
    }

    fn publish(&self) {
        self.live.responses.store(self.report.responses, Ordering::Relaxed);
        self.live.failures.store(self.report.errors.failures(), Ordering::Relaxed);
        self.live.open.store(self.open, Ordering::Relaxed);
    }

    fn run(&mut self, t0: u64, phase: &[u64], stop: &AtomicBool) {
        // First starts: phases spread over the schedule (rate) or a short
        // ramp (closed loop) so that thousands of connects do not all hit the
        // listen backlog in the same microsecond.
        for (i, &p) in phase.iter().enumerate() {
            self.conns[i].next_sched = t0 + p;
            self.arm(i, t0 + p);
        }
        let mut next_scan = t0;
        let mut drain_until = u64::MAX;
        loop {
            let now = now_ns();
            if stop.load(Ordering::Relaxed) && self.end > now {
                self.end = now;
            }
            if now >= self.end {
                if drain_until == u64::MAX {
                    drain_until = now + self.timeout_ns.min(2_000_000_000);
                    for c in &mut self.conns {
                        if c.state == State::Idle {
                            c.done = true;
                        }
                    }
                    self.timers.clear();
                }
                if self.inflight == 0 || now >= drain_until {
                    break;
                }
            }
            // Due timers.
            while let Some(&Reverse((at, i))) = self.timers.peek() {
                if at > now {
                    break;
                }
                self.timers.pop();
                let i = i as usize;
                let c = &self.conns[i];
                if c.timer != at || c.state != State::Idle || c.done {
                    continue;
                }
                self.conns[i].timer = 0;
                let start = if self.interval.is_some() { at } else { now };
                self.begin(i, start, now);
            }
            if now >= next_scan {
                self.scan_timeouts(now);
                next_scan = now + 50_000_000;
            }
            self.publish();
            let mut wait = next_scan.saturating_sub(now).min(self.end.saturating_sub(now).max(1_000_000));
            if let Some(&Reverse((at, _))) = self.timers.peek() {
                wait = wait.min(at.saturating_sub(now));
            }
            let n = match self.ep.wait(Some(Duration::from_nanos(wait))) {
                Ok(n) => n,
                Err(_) => break,
            };
            let now = now_ns();
            for k in 0..n {
                let (tok, ev) = self.ep.event(k);
                self.on_event(tok, ev, now);
            }
            // Next requests of the connections that just completed (a
            // begin may complete another one at once: loop until none).
            while !self.ready.is_empty() {
                let batch = std::mem::take(&mut self.ready);
                for &(i, start) in &batch {
                    let i = i as usize;
                    if self.conns[i].state == State::Idle && !self.conns[i].done {
                        self.begin(i, start, now);
                    }
                }
                if self.ready.is_empty() {
                    self.ready = batch;
                    self.ready.clear();
                }
            }
        }
        // Whatever is still in flight did not finish in time.
        let now = now_ns();
        for i in 0..self.conns.len() {
            if self.conns[i].state != State::Idle {
                self.fail(i, Fail::Timeout, now);
            }
            self.drop_sock(i);
        }
        self.publish();
    }
}

/// Runs the load: `progress(responses, failures, open, elapsed)` once a
/// second from the calling thread.
pub fn run(
    cfg: &LoadConfig,
    stop: &Arc<AtomicBool>,
    mut progress: impl FnMut(u64, u64, u64, Duration),
) -> Result<LoadReport> {
    cfg.validate()?;
    let threads = cfg.cpus.len().min(cfg.connections);
    let cpus: Vec<usize> = cfg.cpus[..threads].to_vec();
    let nofile = super::raise_nofile((cfg.connections as u64 + 1024).max(4096)).unwrap_or(0);
    if nofile < cfg.connections as u64 + 64 {
        bail!(
            "{} connections need more file descriptors than RLIMIT_NOFILE allows ({nofile}); raise the hard limit (ulimit -Hn)",
            cfg.connections
        );
    }
    let mut cfg2 = cfg.clone();
    cfg2.cpus = cpus.clone();
    let plans = plan_sources(&cfg2)?;
    let source_addresses = {
        let mut a: Vec<IpAddr> = plans.iter().flat_map(|p| p.locals.iter().map(|l| l.ip())).collect();
        a.sort();
        a.dedup();
        a.len()
    };
    let request: Arc<[u8]> = cfg.request().into();
    let interval = cfg.rate.map(|r| ((cfg.connections as f64 / r) * 1e9).max(1.0) as u64);
    let dur_ns = cfg.duration.as_nanos().min(u64::MAX as u128 / 2) as u64;
    // Global connection k: worker k % threads.
    let t0 = now_ns() + 20_000_000;
    let end = t0 + dur_ns;
    let mut lives = Vec::new();
    let mut states = Vec::with_capacity(cpus.len());
    for (w, plan) in plans.into_iter().enumerate() {
        let ks: Vec<usize> = (w..cfg.connections).step_by(threads).collect();
        let phase: Vec<u64> = ks
            .iter()
            .enumerate()
            .map(|(j, &k)| match interval {
                Some(iv) => (iv as u128 * k as u128 / cfg.connections as u128) as u64,
                None => j as u64 * 20_000,
            })
            .collect();
        let live = Arc::new(Live::default());
        lives.push(live.clone());
        states.push((plan, phase, live));
    }
    let (target, close, timeout_ns) =
        (cfg.url.addr, cfg.close, cfg.timeout.as_nanos().min(u64::MAX as u128) as u64);
    let bind_port = cfg.src_ports != SrcPorts::Kernel;
    let sched_batch = cfg.sched_batch;
    // Set up on the worker's own thread (pinned unless --no-pin); Workers
    // returns once every worker is ready, or the first setup error.
    let workers = Workers::spawn_maybe_pinned(
        &cpus,
        cfg.pin,
        states,
        stop.clone(),
        move |ctx, (plan, phase, live): (SourcePlan, Vec<u64>, Arc<Live>)| {
            let (w, cpu) = (ctx.index, ctx.cpu);
            if sched_batch {
                rsskit_linux::process::set_sched_batch().map_err(|e| anyhow!("SCHED_BATCH: {e}"))?;
            }
            let ep = Epoll::new(1024).map_err(|e| anyhow!("epoll: {e}"))?;
            let n = phase.len();
            let conns = (0..n)
                .map(|_| Conn {
                    sock: None,
                    state: State::Idle,
                    gen: 0,
                    start: 0,
                    began: 0,
                    connect_start: 0,
                    next_sched: 0,
                    wpos: 0,
                    head: Vec::new(),
                    head_done: false,
                    remaining: 0,
                    until_eof: false,
                    server_close: false,
                    status: 0,
                    got_bytes: false,
                    timer: 0,
                    done: false,
                })
                .collect();
            let wk = Worker {
                index: w,
                cpu,
                ep,
                conns,
                request: request.clone(),
                target: target.into(),
                ipv6: target.is_ipv6(),
                locals: plan.locals,
                local_cursor: 0,
                bind_port,
                timers: BinaryHeap::with_capacity(n),
                interval,
                close,
                timeout_ns,
                end,
                scratch: vec![0; 64 * 1024],
                report: WorkerReport {
                    worker: w,
                    cpu,
                    connections: n,
                    sent: 0,
                    responses: 0,
                    connects: 0,
                    bytes_in: 0,
                    errors: Errors::default(),
                    latency: Latency::new(),
                    connect: Latency::new(),
                },
                live,
                open: 0,
                inflight: 0,
                ready: Vec::new(),
            };
            Ok((wk, phase))
        },
        move |ctx, (mut wk, phase): (Worker, Vec<u64>)| {
            wk.run(t0, &phase, &ctx.stop);
            let _ = (wk.index, wk.cpu);
            wk.report
        },
    )
    .context("load worker setup")?;
    // Per-second progress until every worker is done.
    let start = std::time::Instant::now();
    let mut next = Duration::from_secs(1);
    let mut per_second = Vec::new();
    while !workers.finished() {
        std::thread::sleep(Duration::from_millis(20));
        if start.elapsed() >= next && now_ns() < end {
            next += Duration::from_secs(1);
            let r: u64 = lives.iter().map(|l| l.responses.load(Ordering::Relaxed)).sum();
            let f: u64 = lives.iter().map(|l| l.failures.load(Ordering::Relaxed)).sum();
            let o: u64 = lives.iter().map(|l| l.open.load(Ordering::Relaxed)).sum();
            let t = Duration::from_nanos(now_ns().saturating_sub(t0));
            per_second
                .push((t.as_secs_f64(), lives.iter().map(|l| l.responses.load(Ordering::Relaxed)).collect()));
            progress(r, f, o, t);
        }
    }
    let elapsed_ns = now_ns().saturating_sub(t0);
    let workers = workers.join()?;
    let mut latency = Latency::new();
    let mut connect = Latency::new();
    let mut errors = Errors::default();
    for w in &workers {
        latency.merge(&w.latency);
        connect.merge(&w.connect);
        errors.add(&w.errors);
    }
    let responses: u64 = workers.iter().map(|w| w.responses).sum();
    // Requests/s over the measured window (the drain adds a few ms at most).
    let window = (elapsed_ns as f64 / 1e9).max(1e-9);
    Ok(LoadReport {
        url: format!("http://{}{}", cfg.url.host, cfg.url.path),
        target: cfg.url.addr.to_string(),
        mode: if cfg.close { "close" } else { "keep-alive" },
        connections: cfg.connections,
        threads,
        cpus,
        rate: cfg.rate,
        src_ports: cfg.src_ports,
        source_addresses,
        duration_s: cfg.duration.as_secs_f64(),
        elapsed_s: window,
        sent: workers.iter().map(|w| w.sent).sum(),
        responses,
        ok: responses - errors.bad_status,
        requests_per_s: responses as f64 / window,
        connects: workers.iter().map(|w| w.connects).sum(),
        bytes_in: workers.iter().map(|w| w.bytes_in).sum(),
        latency_us: latency.summary(),
        connect_us: connect.summary(),
        errors,
        workers,
        per_second,
        nofile,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rsskit_core::Toeplitz;

    #[test]
    fn urls() {
        let u = parse_url("http://127.0.0.1:8080/a?b").unwrap();
        assert_eq!(
            (u.addr, u.host.as_str(), u.path.as_str()),
            ("127.0.0.1:8080".parse().unwrap(), "127.0.0.1:8080", "/a?b")
        );
        let u = parse_url("http://[::1]/").unwrap();
        assert_eq!(u.addr, "[::1]:80".parse().unwrap());
        assert_eq!(parse_url("http://127.0.0.1:9").unwrap().path, "/");
        for bad in [
            "https://x/",
            "127.0.0.1:80/",
            "http://:80/",
            "http://1.2.3.4:99999/",
            "http://1.2.3.4:0/",
            "http://[::1/",
            "http://a b/",
        ] {
            assert!(parse_url(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn sources() {
        let n: IpNet = "127.0.0.0/8".parse().unwrap();
        let a = source_addresses(Some(&n), 100_000);
        assert_eq!(a.len(), 6);
        assert_eq!(a[0], "127.0.0.1".parse::<IpAddr>().unwrap());
        let one: IpNet = "10.1.2.3/32".parse().unwrap();
        assert_eq!(source_addresses(Some(&one), 10), vec!["10.1.2.3".parse::<IpAddr>().unwrap()]);
        assert!(source_addresses(None, 10).is_empty());
    }

    #[test]
    fn reply_ports_land_in_the_buckets() {
        let key = RssKey::microsoft();
        let server: SocketAddr = "10.0.0.1:80".parse().unwrap();
        let client: IpAddr = "10.0.0.2".parse().unwrap();
        let t = Toeplitz::new(&key);
        for buckets in [vec![0u32], vec![1, 3, 5, 7]] {
            let ports = reply_ports(&key, server, client, 7, &buckets, 1024..=65535);
            assert!(ports.len() > 1000, "{}", ports.len());
            for &p in ports.iter().step_by(97) {
                let reply = FlowTuple::new(server.ip(), 80, client, p, L4Proto::Tcp);
                let h = t.hash(reply.input(HashType::TcpIpv4).unwrap().as_bytes());
                assert!(buckets.contains(&(h & 7)), "port {p} hash {h:08x}");
            }
            // Every port not returned is in another bucket.
            let set: std::collections::HashSet<u16> = ports.iter().copied().collect();
            for p in (1024..=65535u16).step_by(101).filter(|p| !set.contains(p)) {
                let reply = FlowTuple::new(server.ip(), 80, client, p, L4Proto::Tcp);
                let h = t.hash(reply.input(HashType::TcpIpv4).unwrap().as_bytes());
                assert!(!buckets.contains(&(h & 7)));
            }
        }
    }
}
