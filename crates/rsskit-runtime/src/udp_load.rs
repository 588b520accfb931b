//! The UDP load generator (`rsskit udp-load`, FreeBSD's `udp-clt` done right):
//! N streams, each its own connected socket and source, spread over the
//! server's RSS buckets with the tuple finder; pinned sender threads; sent,
//! echoed, lost, out of order; RTT histogram; per-stream check, from the
//! server's echo stamps, that each stream was served by the worker owning its
//! bucket.

use crate::proto;
use anyhow::{anyhow, bail, Context, Result};
use hdrhistogram::Histogram;
use rsskit_core::{finder, CpuId, FlowTuple, HashConfig, HashType, L4Proto, RssKey, RssPolicy, WorkerId};
use rsskit_linux::socket::Batch;
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::io::ErrorKind;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Largest UDP payload over IPv4.
pub const MAX_SIZE: usize = 65507;
/// Smallest datagram: the probe header.
pub const MIN_SIZE: usize = proto::HEADER_LEN;

/// The server's RSS policy as the client must assume it (key, hash types,
/// buckets, worker `i` on CPU `cpus[i]`), with the UDP questions the load
/// generator asks of it.
#[derive(Debug, Clone)]
pub struct ServerTable {
    policy: RssPolicy,
}

impl ServerTable {
    /// Table over `cpus` with `bits` bucket bits (default FreeBSD's).
    pub fn new(key: RssKey, hash_config: HashConfig, cpus: Vec<usize>, bits: Option<u32>) -> Result<Self> {
        let cpus: Vec<CpuId> = cpus.iter().map(|&c| CpuId(c as u32)).collect();
        let policy =
            RssPolicy::new(key, hash_config, &cpus, bits).map_err(|e| anyhow!("server table: {e}"))?;
        Ok(ServerTable { policy })
    }

    /// The table of a server whose policy is known (the demo's own server).
    pub fn from_policy(policy: RssPolicy) -> Self {
        ServerTable { policy }
    }

    /// The policy.
    pub fn policy(&self) -> &RssPolicy {
        &self.policy
    }

    /// The hash type the server uses for UDP of this family.
    pub fn hash_type(&self, ipv6: bool) -> HashType {
        self.policy.hash_type(ipv6, L4Proto::Udp, false)
    }

    /// Hash of a datagram `src -> dst`, as the server computes it.
    pub fn hash(&self, src: SocketAddr, dst: SocketAddr) -> u32 {
        let t = FlowTuple::new(src.ip(), src.port(), dst.ip(), dst.port(), L4Proto::Udp);
        self.policy.hash_tuple_as(&t, self.hash_type(dst.is_ipv6()))
    }

    /// The worker index owning `bucket`.
    pub fn owner(&self, bucket: u32) -> Option<usize> {
        (bucket < self.policy.buckets()).then(|| self.policy.worker_of_bucket(bucket).index())
    }

    /// The CPU of the worker owning `bucket`.
    pub fn owner_cpu(&self, bucket: u32) -> Option<usize> {
        self.policy.cpu_of(WorkerId(self.owner(bucket)? as u32)).map(CpuId::as_usize)
    }

    /// Worker CPUs in worker order.
    pub fn cpus(&self) -> Vec<usize> {
        self.policy.worker_cpus().iter().map(|c| c.as_usize()).collect()
    }

    /// One line saying which hash configuration is in force.
    pub fn describe(&self, ipv6: bool) -> String {
        let ht = self.hash_type(ipv6);
        let how = if ht.has_ports() {
            "UDP 4-tuple hashing: streams are spread by source port"
        } else {
            "UDP hashed on addresses only (FreeBSD default): streams are spread by source address"
        };
        format!(
            "hash {ht} ({how}); {} buckets over server CPUs {}",
            self.policy.buckets(),
            rsskit_linux::cpulist::format(&self.cpus())
        )
    }
}

/// Where sources come from when spreading.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpNet {
    pub addr: IpAddr,
    pub prefix_len: u8,
}

impl std::str::FromStr for IpNet {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let (a, l) = s.split_once('/').ok_or_else(|| format!("'{s}' is not a CIDR network (ADDR/LEN)"))?;
        let addr: IpAddr = a.parse().map_err(|_| format!("'{a}' in '{s}' is not an IP address"))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix_len: u8 = l
            .parse()
            .ok()
            .filter(|&n: &u8| n <= max)
            .ok_or_else(|| format!("prefix length '{l}' in '{s}' must be 0..={max}"))?;
        Ok(IpNet { addr, prefix_len })
    }
}

impl std::fmt::Display for IpNet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix_len)
    }
}

/// What to run.
#[derive(Debug, Clone)]
pub struct LoadConfig {
    pub target: SocketAddr,
    pub streams: usize,
    /// Datagram size (payload bytes), `MIN_SIZE..=MAX_SIZE`.
    pub size: usize,
    /// Total datagrams per second over all streams; `None`: as fast as possible.
    pub rate: Option<u64>,
    /// Stop sending after this long (default 5 s when `count` is unset too).
    pub duration: Option<Duration>,
    /// Datagrams per stream.
    pub count: Option<u64>,
    /// Most datagrams outstanding per stream (closed loop).
    pub window: Option<u32>,
    /// With `rate`: send in bursts of this many datagrams (round-robin over
    /// the thread's streams), like a NIC coalescing interrupts; 1: evenly paced.
    pub burst: u32,
    /// Pick sources so the streams land in distinct buckets.
    pub spread: bool,
    /// Source network to pick addresses from (address-only hashing).
    pub src_net: Option<IpNet>,
    /// Sender threads.
    pub threads: usize,
    /// CPUs the sender threads are pinned to (round-robin); empty: unpinned.
    pub pin: Vec<usize>,
    /// One sender thread per server CPU owning some stream's bucket, pinned
    /// to that CPU (overrides `threads` and `pin`): on loopback the kernel
    /// then processes each datagram on the CPU of the worker owning it, as a
    /// NIC with RSS would deliver it.
    pub pin_owner: bool,
    /// How long to wait for the last echoes after sending stops.
    pub drain: Duration,
    pub table: ServerTable,
}

impl LoadConfig {
    /// Checks the numbers that need no socket.
    pub fn validate(&self) -> Result<()> {
        if self.streams == 0 {
            bail!("--streams must be at least 1");
        }
        if self.size < MIN_SIZE || self.size > MAX_SIZE {
            bail!("--size {} is out of range: a probe datagram is {MIN_SIZE}..={MAX_SIZE} bytes", self.size);
        }
        if self.target.port() == 0 {
            bail!("--target {}: port 0 cannot be a destination", self.target);
        }
        if self.target.ip().is_unspecified() {
            bail!("--target {}: the unspecified address cannot be a destination", self.target);
        }
        if self.threads == 0 {
            bail!("--threads must be at least 1");
        }
        if self.rate == Some(0) {
            bail!("--rate must be at least 1 datagram per second");
        }
        if self.count == Some(0) {
            bail!("--count must be at least 1");
        }
        if self.burst == 0 || self.burst > 4096 {
            bail!("--burst must be 1..=4096, not {}", self.burst);
        }
        if self.window == Some(0) {
            bail!("--window must be at least 1");
        }
        if let Some(net) = self.src_net {
            if net.addr.is_ipv4() != self.target.is_ipv4() {
                bail!("--src-net {net} and --target {} are of different address families", self.target);
            }
        }
        Ok(())
    }
}

/// One planned stream: its socket (bound and connected) and where it lands.
#[derive(Debug)]
pub struct Stream {
    pub id: u32,
    pub src: SocketAddr,
    pub hash: u32,
    pub bucket: u32,
    pub owner: Option<usize>,
    socket: Socket,
}

fn new_socket(target: SocketAddr) -> Result<Socket> {
    let dom = if target.is_ipv4() { Domain::IPV4 } else { Domain::IPV6 };
    let s = Socket::new(dom, Type::DGRAM, Some(Protocol::UDP)).context("creating a UDP socket")?;
    // Big buffers so that the client is not where datagrams get lost.
    let _ = s.set_recv_buffer_size(4 << 20);
    let _ = s.set_send_buffer_size(1 << 20);
    Ok(s)
}

fn connect_err(e: std::io::Error, target: SocketAddr) -> anyhow::Error {
    match e.raw_os_error() {
        Some(libc::ENETUNREACH) | Some(libc::EHOSTUNREACH) => {
            anyhow!("target {target} is unreachable: no route to it ({e})")
        }
        _ => anyhow!("cannot connect a UDP socket to {target}: {e}"),
    }
}

/// Socket bound to `src` and connected to `target`; `None` if `src` cannot be
/// bound (address not local, port in use).
fn bound_socket(src: SocketAddr, target: SocketAddr) -> Result<Option<Socket>> {
    let s = new_socket(target)?;
    match s.bind(&SockAddr::from(src)) {
        Ok(()) => {}
        Err(e) if matches!(e.raw_os_error(), Some(libc::EADDRNOTAVAIL) | Some(libc::EADDRINUSE)) => {
            return Ok(None)
        }
        Err(e) => return Err(anyhow!("binding a UDP socket to {src}: {e}")),
    }
    s.connect(&SockAddr::from(target)).map_err(|e| connect_err(e, target))?;
    Ok(Some(s))
}

fn local_addr(s: &Socket) -> Result<SocketAddr> {
    s.local_addr().context("getsockname")?.as_socket().ok_or_else(|| anyhow!("socket has no IP address"))
}

/// The local address the kernel picks to reach `target`.
fn route_source(target: SocketAddr) -> Result<IpAddr> {
    let s = new_socket(target)?;
    s.connect(&SockAddr::from(target)).map_err(|e| connect_err(e, target))?;
    Ok(local_addr(&s)?.ip())
}

/// Local addresses of one family (getifaddrs), loopback first.
fn local_addrs(ipv6: bool) -> Vec<IpAddr> {
    let mut out = Vec::new();
    // SAFETY: getifaddrs fills a linked list we only read and then free with
    // freeifaddrs; every ifa_addr is checked for null and its family before
    // the cast to the matching sockaddr type.
    unsafe {
        let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
        if libc::getifaddrs(&mut head) != 0 {
            return out;
        }
        let mut p = head;
        while !p.is_null() {
            let a = (*p).ifa_addr;
            if !a.is_null() {
                match (i32::from((*a).sa_family), ipv6) {
                    (libc::AF_INET, false) => {
                        let sin = &*(a as *const libc::sockaddr_in);
                        out.push(IpAddr::V4(Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr))));
                    }
                    (libc::AF_INET6, true) => {
                        let sin6 = &*(a as *const libc::sockaddr_in6);
                        let ip = std::net::Ipv6Addr::from(sin6.sin6_addr.s6_addr);
                        // Link-local needs a scope id: not usable as a plain source.
                        if ip.segments()[0] & 0xffc0 != 0xfe80 {
                            out.push(IpAddr::V6(ip));
                        }
                    }
                    _ => {}
                }
            }
            p = (*p).ifa_next;
        }
        libc::freeifaddrs(head);
    }
    out.sort_by_key(|a| !a.is_loopback());
    out.dedup();
    out
}

/// Builds the streams: sockets bound and connected, sources chosen so the
/// streams land in distinct buckets when `cfg.spread`. Prints nothing.
pub fn plan_streams(cfg: &LoadConfig) -> Result<Vec<Stream>> {
    cfg.validate()?;
    let target = cfg.target;
    let t = &cfg.table;
    let mut streams = Vec::with_capacity(cfg.streams);
    let push = |socket: Socket, streams: &mut Vec<Stream>| -> Result<()> {
        let src = local_addr(&socket)?;
        let hash = t.hash(src, target);
        let bucket = t.policy().bucket(hash);
        let id = streams.len() as u32;
        streams.push(Stream { id, src, hash, bucket, owner: t.owner(bucket), socket });
        Ok(())
    };
    if !cfg.spread {
        let any: IpAddr = if target.is_ipv4() {
            Ipv4Addr::UNSPECIFIED.into()
        } else {
            std::net::Ipv6Addr::UNSPECIFIED.into()
        };
        for _ in 0..cfg.streams {
            let s = bound_socket(SocketAddr::new(any, 0), target)?
                .ok_or_else(|| anyhow!("no free UDP port to bind"))?;
            push(s, &mut streams)?;
        }
        return Ok(streams);
    }
    let ipv6 = target.is_ipv6();
    let ht = t.hash_type(ipv6);
    let mask = t.policy().mask();
    let nb = t.policy().buckets() as usize;
    // Buckets in the order the streams take them: round-robin over workers
    // first (bucket b is owned by worker b % workers), then all buckets.
    let order: Vec<u32> = (0..nb as u32).collect();
    let mut used_addrs: HashSet<IpAddr> = HashSet::new();
    if ht.has_ports() {
        // 4-tuple: one source address (the route's), distinct source ports.
        let src = route_source(target)?;
        for i in 0..cfg.streams {
            let bucket = order[i % nb];
            let found = finder::find_src_ports(
                t.policy().key(),
                ht,
                src,
                target.ip(),
                target.port(),
                1024..=65535,
                mask,
                bucket,
                256,
            )
            .map_err(|e| anyhow!("finding a source port for bucket {bucket}: {e}"))?;
            let mut ok = None;
            for f in found {
                if let Some(s) = bound_socket(SocketAddr::new(f.src, f.src_port), target)? {
                    ok = Some(s);
                    break;
                }
            }
            let s = ok.ok_or_else(|| anyhow!("no free source port of {src} lands in bucket {bucket}"))?;
            push(s, &mut streams)?;
        }
        return Ok(streams);
    }
    // Address-only hashing: distinct source addresses.
    let net = match cfg.src_net {
        Some(n) => Some(n),
        None if target.ip().is_loopback() && !ipv6 => {
            Some(IpNet { addr: Ipv4Addr::new(127, 0, 0, 0).into(), prefix_len: 8 })
        }
        None => None,
    };
    match net {
        Some(net) => {
            let locals: HashSet<IpAddr> = local_addrs(ipv6).into_iter().collect();
            for i in 0..cfg.streams {
                let bucket = order[i % nb];
                let found = finder::find_src_addrs(
                    t.policy().key(),
                    ht,
                    net.addr,
                    net.prefix_len,
                    0,
                    target.ip(),
                    target.port(),
                    mask,
                    bucket,
                    4096,
                )
                .map_err(|e| anyhow!("finding a source address in {net} for bucket {bucket}: {e}"))?;
                // Addresses assigned here first, then any other (127/8 and
                // AnyIP routes make a whole prefix bindable).
                let (mine, others): (Vec<IpAddr>, Vec<IpAddr>) = found
                    .iter()
                    .map(|f| f.src)
                    .filter(|a| *a != target.ip() && !used_addrs.contains(a) && !is_special(*a))
                    .partition(|a| locals.contains(a));
                let mut ok = None;
                for a in mine.into_iter().chain(others.into_iter().take(64)) {
                    if let Some(s) = bound_socket(SocketAddr::new(a, 0), target)? {
                        used_addrs.insert(a);
                        ok = Some(s);
                        break;
                    }
                }
                let s = ok.ok_or_else(|| {
                    anyhow!(
                        "no local address in {net} lands in bucket {bucket} (UDP is hashed on addresses only: \
                         add addresses of {net} to an interface, or for IPv4 make the whole network local \
                         with `ip route add local {net} dev lo`, or use --udp-4tuple)"
                    )
                })?;
                push(s, &mut streams)?;
            }
        }
        None => {
            // No pool given: the machine's own addresses of the family.
            let locals = local_addrs(ipv6);
            let mut by_bucket: BTreeMap<u32, Vec<IpAddr>> = BTreeMap::new();
            for a in locals {
                if a == target.ip() && !a.is_loopback() {
                    continue;
                }
                let h = t.hash(SocketAddr::new(a, 0), target);
                by_bucket.entry(t.policy().bucket(h)).or_default().push(a);
            }
            for i in 0..cfg.streams {
                let bucket = order[i % nb];
                let cands = by_bucket.get(&bucket).cloned().unwrap_or_default();
                let mut ok = None;
                for a in cands.iter().filter(|a| !used_addrs.contains(a)).chain(cands.iter()) {
                    if let Some(s) = bound_socket(SocketAddr::new(*a, 0), target)? {
                        used_addrs.insert(*a);
                        ok = Some(s);
                        break;
                    }
                }
                let s = ok.ok_or_else(|| {
                    anyhow!(
                        "none of this host's {} addresses lands in bucket {bucket} (UDP is hashed on addresses \
                         only: give --src-net with addresses assigned here, or use --udp-4tuple)",
                        if ipv6 { "IPv6" } else { "IPv4" }
                    )
                })?;
                push(s, &mut streams)?;
            }
        }
    }
    Ok(streams)
}

/// Network and broadcast-ish addresses we never bind.
fn is_special(a: IpAddr) -> bool {
    match a {
        IpAddr::V4(v) => {
            let o = v.octets();
            o[3] == 0 || o[3] == 255
        }
        IpAddr::V6(v) => v.is_unspecified() || v.is_multicast(),
    }
}

/// Per-stream results.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct StreamReport {
    pub stream: u32,
    pub src: String,
    pub hash: u32,
    pub bucket: u32,
    /// The worker owning `bucket` in the assumed server table.
    pub owner_worker: Option<usize>,
    pub owner_cpu: Option<usize>,
    /// Workers that served it (from the echo stamps).
    pub served_by_workers: Vec<u16>,
    /// Their CPUs.
    pub served_by_cpus: Vec<u16>,
    /// CPUs the server's kernel processed the datagrams on (when known).
    pub kernel_cpus: Vec<u16>,
    /// Buckets the server computed (should be just `bucket`).
    pub server_buckets: Vec<u16>,
    pub sent: u64,
    pub echoed: u64,
    pub lost: u64,
    pub out_of_order: u64,
    pub duplicates: u64,
    /// ECONNREFUSED errors (ICMP port unreachable: nothing listens at the
    /// target any more); the stream stops sending at the first.
    pub refused: u64,
    /// Echoes the server flagged as misdirected (bucket not owned by the worker).
    pub flagged_misdirected: u64,
    /// Echoes whose kernel CPU differs from the serving worker's CPU.
    pub kernel_cpu_mismatch: u64,
    /// Every echo served by the owner worker, with the bucket we expected.
    #[serde(rename = "match")]
    pub matched: bool,
}

/// Whole-run results.
#[derive(Debug, Clone, serde::Serialize)]
pub struct LoadReport {
    pub sent: u64,
    pub echoed: u64,
    pub lost: u64,
    pub out_of_order: u64,
    pub duplicates: u64,
    /// Datagrams that were not our probes (bad magic, wrong stream).
    pub invalid: u64,
    pub rtt_us: RttSummary,
    /// The RTT distribution (for `--plot`): see [`crate::http::hist::log2_buckets`].
    #[serde(skip)]
    pub rtt_log2_us: Vec<(f64, u64)>,
    /// Once a second: (seconds since the start, sent so far, echoed so far), for `--plot`.
    #[serde(skip)]
    pub per_second: Vec<(f64, u64, u64)>,
    pub elapsed_s: f64,
    pub streams: Vec<StreamReport>,
    pub hash_config: serde_json::Value,
    /// ECONNREFUSED errors over all streams (the target went away or was
    /// never there).
    pub refused: u64,
    /// Some stream stopped sending before its `duration`/`count` because
    /// the target refused: the run was cut short.
    pub cut_short: bool,
}

#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct RttSummary {
    pub p50: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
}

/// Progress totals, updated by the sender threads.
#[derive(Debug, Default)]
pub struct Progress {
    pub sent: AtomicU64,
    pub echoed: AtomicU64,
}

/// CLOCK_MONOTONIC in nanoseconds (the probe's timestamp clock).
pub use rsskit_linux::clock::monotonic_ns;

/// State of one stream inside its sender thread.
struct StreamState {
    id: u32,
    socket: Socket,
    sent: u64,
    echoed: u64,
    highest: Option<u64>,
    seen: Vec<u64>,
    out_of_order: u64,
    duplicates: u64,
    /// Datagrams given up for the window (presumed lost).
    written_off: u64,
    last_progress: Instant,
    workers: BTreeMap<u16, u64>,
    cpus: BTreeSet<u16>,
    kcpus: BTreeSet<u16>,
    buckets: BTreeSet<u16>,
    flagged: u64,
    kcpu_mismatch: u64,
    /// ECONNREFUSED errors seen (the stream stops sending at the first).
    refused: u64,
    /// Refused while it still had datagrams to send.
    cut_short: bool,
}

impl StreamState {
    fn mark(&mut self, seq: u64) -> bool {
        let (w, b) = ((seq / 64) as usize, seq % 64);
        if w >= self.seen.len() {
            self.seen.resize(w + 1, 0);
        }
        let fresh = self.seen[w] & (1 << b) == 0;
        self.seen[w] |= 1 << b;
        fresh
    }
}

struct ThreadResult {
    states: Vec<StreamState>,
    hist: Histogram<u64>,
    invalid: u64,
}

/// Sets the calling thread's CPU affinity to one CPU.
fn pin_to(cpu: usize) -> Result<()> {
    rsskit_linux::affinity::pin_current_thread(cpu).map_err(|e| anyhow!("{e}"))
}

/// Runs the load: sends until `duration`/`count` (or `stop`), drains the
/// echoes, and reports. `on_second` is called about once a second with the
/// running totals and the elapsed time.
pub fn run(
    cfg: &LoadConfig,
    streams: Vec<Stream>,
    stop: &AtomicBool,
    mut on_second: impl FnMut(u64, u64, Duration),
) -> Result<LoadReport> {
    cfg.validate()?;
    let infos: Vec<(u32, SocketAddr, u32, u32, Option<usize>)> =
        streams.iter().map(|s| (s.id, s.src, s.hash, s.bucket, s.owner)).collect();
    let mut groups: Vec<Vec<Stream>> = Vec::new();
    let mut group_cpu: Vec<Option<usize>> = Vec::new();
    if cfg.pin_owner {
        let mut by_cpu: BTreeMap<usize, Vec<Stream>> = BTreeMap::new();
        for s in streams {
            let cpu =
                cfg.table.owner_cpu(s.bucket).ok_or_else(|| anyhow!("bucket {} has no owner", s.bucket))?;
            by_cpu.entry(cpu).or_default().push(s);
        }
        let online = rsskit_linux::cpulist::online();
        for (cpu, g) in by_cpu {
            if !online.contains(&cpu) {
                bail!("cannot pin a sender to server CPU {cpu}: not online here");
            }
            groups.push(g);
            group_cpu.push(Some(cpu));
        }
    } else {
        let nthreads = cfg.threads.min(streams.len()).max(1);
        groups = (0..nthreads).map(|_| Vec::new()).collect();
        for (i, s) in streams.into_iter().enumerate() {
            groups[i % nthreads].push(s);
        }
        group_cpu =
            (0..nthreads).map(|t| (!cfg.pin.is_empty()).then(|| cfg.pin[t % cfg.pin.len()])).collect();
    }
    let duration = match (cfg.duration, cfg.count) {
        (Some(d), _) => Some(d),
        (None, Some(_)) => None,
        (None, None) => Some(Duration::from_secs(5)),
    };
    let progress = Arc::new(Progress::default());
    let mut per_second = Vec::new();
    let start = Instant::now();
    let results: Vec<Result<ThreadResult>> = std::thread::scope(|sc| {
        let mut handles = Vec::new();
        for (g, pin) in groups.into_iter().zip(group_cpu) {
            let rate = cfg.rate.map(|r| (r as f64) * (g.len() as f64) / (infos.len() as f64));
            let progress = progress.clone();
            let cfg = cfg.clone();
            handles.push(sc.spawn(move || sender(&cfg, g, rate, duration, pin, stop, &progress, start)));
        }
        let mut last = Instant::now();
        while handles.iter().any(|h| !h.is_finished()) {
            std::thread::sleep(Duration::from_millis(20));
            if last.elapsed() >= Duration::from_secs(1) {
                last += Duration::from_secs(1);
                let (sent, echoed) =
                    (progress.sent.load(Ordering::Relaxed), progress.echoed.load(Ordering::Relaxed));
                per_second.push((start.elapsed().as_secs_f64(), sent, echoed));
                on_second(sent, echoed, start.elapsed());
            }
        }
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err(anyhow!("a sender thread panicked"))))
            .collect()
    });
    let elapsed = start.elapsed();
    let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).expect("valid histogram bounds");
    let mut states = Vec::new();
    let mut invalid = 0;
    for r in results {
        let r = r?;
        let _ = hist.add(&r.hist);
        invalid += r.invalid;
        states.extend(r.states);
    }
    states.sort_by_key(|s| s.id);
    let t = &cfg.table;
    let mut reports = Vec::new();
    let (mut refused, mut cut_short) = (0, false);
    for (st, info) in states.iter().zip(&infos) {
        let (id, src, hash, bucket, owner) = *info;
        let owner_cpu = t.owner_cpu(bucket);
        let served: Vec<u16> = st.workers.keys().copied().collect();
        let matched = st.echoed > 0
            && owner.is_some()
            && served.iter().all(|&w| Some(w as usize) == owner)
            && st.cpus.iter().all(|&c| Some(c as usize) == owner_cpu)
            && st.buckets.iter().all(|&b| b as u32 == bucket)
            && st.flagged == 0;
        refused += st.refused;
        cut_short |= st.cut_short;
        reports.push(StreamReport {
            stream: id,
            src: src.to_string(),
            hash,
            bucket,
            owner_worker: owner,
            owner_cpu,
            served_by_workers: served,
            served_by_cpus: st.cpus.iter().copied().collect(),
            kernel_cpus: st.kcpus.iter().copied().collect(),
            server_buckets: st.buckets.iter().copied().collect(),
            sent: st.sent,
            echoed: st.echoed,
            lost: st.sent - st.echoed.min(st.sent),
            out_of_order: st.out_of_order,
            duplicates: st.duplicates,
            refused: st.refused,
            flagged_misdirected: st.flagged,
            kernel_cpu_mismatch: st.kcpu_mismatch,
            matched,
        });
    }
    let sum = |f: fn(&StreamReport) -> u64| reports.iter().map(f).sum::<u64>();
    let us = |ns: u64| ns as f64 / 1000.0;
    let rtt = if hist.is_empty() {
        RttSummary::default()
    } else {
        RttSummary {
            p50: us(hist.value_at_quantile(0.5)),
            p99: us(hist.value_at_quantile(0.99)),
            p999: us(hist.value_at_quantile(0.999)),
            max: us(hist.max()),
        }
    };
    let ipv6 = cfg.target.is_ipv6();
    let ht = t.hash_type(ipv6);
    Ok(LoadReport {
        sent: sum(|s| s.sent),
        echoed: sum(|s| s.echoed),
        lost: sum(|s| s.lost),
        out_of_order: sum(|s| s.out_of_order),
        duplicates: sum(|s| s.duplicates),
        invalid,
        rtt_us: rtt,
        rtt_log2_us: crate::http::hist::log2_buckets(&hist),
        per_second,
        elapsed_s: elapsed.as_secs_f64(),
        streams: reports,
        hash_config: serde_json::json!({
            "hash_type": ht.name(),
            "udp_4tuple": ht.has_ports(),
            "spread_by": if ht.has_ports() { "source port" } else { "source address" },
            "key": t.policy().key().to_hex(),
            "bits": t.policy().bits(),
            "buckets": t.policy().buckets(),
            "server_cpus": t.cpus(),
        }),
        refused,
        cut_short,
    })
}

#[allow(clippy::too_many_arguments)]
fn sender(
    cfg: &LoadConfig,
    streams: Vec<Stream>,
    rate: Option<f64>,
    duration: Option<Duration>,
    pin: Option<usize>,
    stop: &AtomicBool,
    progress: &Progress,
    start: Instant,
) -> Result<ThreadResult> {
    if let Some(cpu) = pin {
        pin_to(cpu)?;
    }
    let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).expect("valid histogram bounds");
    let now = Instant::now();
    let mut states: Vec<StreamState> = streams
        .into_iter()
        .map(|s| {
            let _ = s.socket.set_nonblocking(true);
            StreamState {
                id: s.id,
                socket: s.socket,
                sent: 0,
                echoed: 0,
                highest: None,
                seen: Vec::new(),
                out_of_order: 0,
                duplicates: 0,
                written_off: 0,
                last_progress: now,
                workers: BTreeMap::new(),
                cpus: BTreeSet::new(),
                kcpus: BTreeSet::new(),
                buckets: BTreeSet::new(),
                flagged: 0,
                kcpu_mismatch: 0,
                refused: 0,
                cut_short: false,
            }
        })
        .collect();
    let mut buf = vec![0u8; cfg.size.max(2048)];
    // Echoes come back at the size sent; anything longer is not ours.
    let mut rx = Batch::new(64, cfg.size.max(proto::HEADER_LEN), false);
    let mut invalid = 0u64;
    let mut thread_sent = 0u64;
    let mut next = 0usize;
    let window_timeout = Duration::from_millis(200);
    let count = cfg.count;
    let mut pfds: Vec<libc::pollfd> = states
        .iter()
        .map(|s| libc::pollfd { fd: s.socket.as_raw_fd(), events: libc::POLLIN, revents: 0 })
        .collect();
    let mut draining_since: Option<Instant> = None;
    loop {
        let now = Instant::now();
        let elapsed = now - start;
        let done_sending = stop.load(Ordering::Relaxed)
            || duration.is_some_and(|d| elapsed >= d)
            || states.iter().all(|s| s.refused > 0 || count.is_some_and(|c| s.sent >= c));
        if done_sending && draining_since.is_none() {
            draining_since = Some(now);
        }
        if let Some(d) = draining_since {
            let all_in = states.iter().all(|s| s.refused > 0 || s.echoed >= s.sent);
            if all_in || now - d >= cfg.drain || (stop.load(Ordering::Relaxed) && now - d >= cfg.drain / 4) {
                break;
            }
        }
        let mut did = false;
        // Send what is due.
        if draining_since.is_none() {
            let due = match rate {
                Some(r) => {
                    let d = ((r * elapsed.as_secs_f64()) as u64).saturating_sub(thread_sent);
                    // Hold back until a whole burst is due.
                    if d < u64::from(cfg.burst) {
                        0
                    } else {
                        d.min(256.max(u64::from(cfg.burst)))
                    }
                }
                None => 64,
            };
            let mut tries = 0;
            let mut sent_now = 0;
            while sent_now < due && tries < states.len() {
                let i = next % states.len();
                let st = &mut states[i];
                let can = st.refused == 0
                    && count.is_none_or(|c| st.sent < c)
                    && cfg.window.is_none_or(|w| {
                        // Late echoes of written-off datagrams may still come: saturate.
                        let outstanding = st.sent.saturating_sub(st.echoed + st.written_off);
                        if outstanding >= w as u64 && now - st.last_progress > window_timeout {
                            // Presume the outstanding ones lost; keep going.
                            st.written_off = st.sent.saturating_sub(st.echoed);
                            st.last_progress = now;
                            true
                        } else {
                            outstanding < w as u64
                        }
                    });
                if !can {
                    tries += 1;
                    next += 1;
                    continue;
                }
                proto::encode_probe(
                    &mut buf[..cfg.size],
                    &proto::Probe { stream: st.id, seq: st.sent, sent_ns: monotonic_ns() },
                );
                match st.socket.send(&buf[..cfg.size]) {
                    Ok(_) => {
                        if st.sent == 0 {
                            st.last_progress = now;
                        }
                        st.sent += 1;
                        thread_sent += 1;
                        sent_now += 1;
                        tries = 0;
                        did = true;
                    }
                    Err(e)
                        if e.kind() == ErrorKind::WouldBlock || e.raw_os_error() == Some(libc::ENOBUFS) =>
                    {
                        tries += 1;
                    }
                    Err(e) if e.raw_os_error() == Some(libc::ECONNREFUSED) => {
                        st.refused += 1;
                        // Sending phase and not yet at --count: cut short.
                        st.cut_short = true;
                        tries += 1;
                    }
                    Err(e) => return Err(anyhow!("sending to {}: {e}", cfg.target)),
                }
                next += 1;
            }
            progress.sent.fetch_add(sent_now, Ordering::Relaxed);
        }
        // Receive what is there.
        let sending = draining_since.is_none();
        let mut got = 0u64;
        for st in states.iter_mut() {
            for _ in 0..4 {
                let n = match rx.recv(&st.socket, true) {
                    Ok(n) => n,
                    Err(e) if e.raw_os_error() == Some(libc::ECONNREFUSED) => {
                        st.refused += 1;
                        st.cut_short |= sending && count.is_none_or(|c| st.sent < c);
                        continue;
                    }
                    Err(_) => break,
                };
                let now_ns = monotonic_ns();
                for i in 0..n {
                    let d = rx.data(i);
                    let Some((p, s)) = (!rx.truncated(i)).then(|| proto::decode(d)).flatten() else {
                        invalid += 1;
                        continue;
                    };
                    if p.stream != st.id || p.seq >= st.sent {
                        invalid += 1;
                        continue;
                    }
                    if !st.mark(p.seq) {
                        st.duplicates += 1;
                        continue;
                    }
                    st.echoed += 1;
                    got += 1;
                    match st.highest {
                        Some(h) if p.seq < h => st.out_of_order += 1,
                        _ => st.highest = Some(p.seq),
                    }
                    let _ = hist.record(now_ns.saturating_sub(p.sent_ns).max(1));
                    *st.workers.entry(s.worker).or_default() += 1;
                    st.cpus.insert(s.cpu);
                    st.buckets.insert(s.bucket);
                    if s.kernel_cpu != proto::CPU_UNKNOWN {
                        st.kcpus.insert(s.kernel_cpu);
                        if s.kernel_cpu != s.cpu {
                            st.kcpu_mismatch += 1;
                        }
                    }
                    if s.misdirected() {
                        st.flagged += 1;
                    }
                }
                st.last_progress = Instant::now();
                if n < rx.capacity() {
                    break;
                }
            }
        }
        if got > 0 {
            progress.echoed.fetch_add(got, Ordering::Relaxed);
            did = true;
        }
        if !did {
            // Nothing to do: wait for an echo or the next send slot.
            let wait_ns: i64 = match (rate, draining_since) {
                (Some(r), None) => {
                    let next_at = (thread_sent + u64::from(cfg.burst)) as f64 / r;
                    ((next_at - (Instant::now() - start).as_secs_f64()) * 1e9).clamp(0.0, 5e6) as i64
                }
                (None, None) if cfg.window.is_some() => 1_000_000,
                (None, None) => 0,
                (_, Some(_)) => 5_000_000,
            };
            if wait_ns > 0 {
                let ts = libc::timespec { tv_sec: 0, tv_nsec: wait_ns };
                // SAFETY: ppoll on our own pollfd array, its length passed;
                // no signal mask change.
                unsafe { libc::ppoll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, &ts, std::ptr::null()) };
            }
        }
    }
    Ok(ThreadResult { states, hist, invalid })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(udp4: bool) -> ServerTable {
        ServerTable::new(RssKey::microsoft(), HashConfig::default().with_udp_4tuple(udp4), vec![0, 1], None)
            .unwrap()
    }

    fn cfg(streams: usize, udp4: bool) -> LoadConfig {
        LoadConfig {
            target: "127.0.0.1:9".parse().unwrap(),
            streams,
            size: 64,
            rate: Some(1000),
            duration: Some(Duration::from_millis(100)),
            count: None,
            window: None,
            burst: 1,
            spread: true,
            src_net: None,
            threads: 1,
            pin: vec![],
            pin_owner: false,
            drain: Duration::from_millis(100),
            table: table(udp4),
        }
    }

    /// A one-thread echo server that stamps like worker `owner(bucket)` would,
    /// except for streams from `liar`, which it stamps as worker 7.
    fn echo_server(t: ServerTable, drop_every: u64, liar: Option<IpAddr>) -> (SocketAddr, Arc<AtomicBool>) {
        echo_server_late(t, drop_every, 0, liar)
    }

    /// As [`echo_server`], echoing every `late_every`-th datagram 300 ms late.
    fn echo_server_late(
        t: ServerTable,
        drop_every: u64,
        late_every: u64,
        liar: Option<IpAddr>,
    ) -> (SocketAddr, Arc<AtomicBool>) {
        let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        s.set_read_timeout(Some(Duration::from_millis(20))).unwrap();
        let addr = s.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let st = stop.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 2048];
            let mut n_in = 0u64;
            let mut late: Vec<(Instant, Vec<u8>, SocketAddr)> = Vec::new();
            while !st.load(Ordering::Relaxed) {
                late.retain(|(at, d, to)| {
                    if at.elapsed() < Duration::from_millis(300) {
                        return true;
                    }
                    let _ = s.send_to(d, to);
                    false
                });
                let Ok((n, from)) = s.recv_from(&mut buf) else { continue };
                n_in += 1;
                if drop_every > 0 && n_in.is_multiple_of(drop_every) {
                    continue;
                }
                let is_late = late_every > 0 && n_in.is_multiple_of(late_every);
                let h = t.hash(from, addr);
                let b = t.policy().bucket(h);
                let w = if Some(from.ip()) == liar { 7 } else { t.owner(b).unwrap() as u16 };
                let stamp = proto::ServerStamp {
                    worker: w,
                    cpu: t.cpus().get(w as usize).copied().unwrap_or(99) as u16,
                    bucket: b as u16,
                    kernel_cpu: proto::CPU_UNKNOWN,
                    hash: h,
                    flags: 0,
                };
                proto::write_stamp(&mut buf[..n], &stamp);
                if is_late {
                    late.push((Instant::now(), buf[..n].to_vec(), from));
                    continue;
                }
                let _ = s.send_to(&buf[..n], from);
            }
        });
        (addr, stop)
    }

    #[test]
    fn counts_every_datagram_and_checks_the_owner() {
        let mut c = cfg(4, false);
        let (addr, stop) = echo_server(c.table.clone(), 10, None);
        c.target = addr;
        c.count = Some(200);
        c.duration = None;
        c.rate = None;
        c.window = Some(4);
        c.drain = Duration::from_millis(300);
        let streams = plan_streams(&c).unwrap();
        let r = run(&c, streams, &AtomicBool::new(false), |_, _, _| {}).unwrap();
        stop.store(true, Ordering::Relaxed);
        assert_eq!(r.sent, 800, "every stream sends its --count");
        assert_eq!(r.echoed + r.lost, r.sent);
        assert_eq!(r.lost, 80, "the server dropped every 10th datagram");
        for s in &r.streams {
            assert!(s.matched, "stream {} served by {:?}", s.stream, s.served_by_workers);
            assert_eq!(s.served_by_workers, vec![s.owner_worker.unwrap() as u16]);
            assert_eq!(s.server_buckets, vec![s.bucket as u16]);
        }
        assert!(r.rtt_us.p50 > 0.0 && r.rtt_us.max >= r.rtt_us.p99);
    }

    #[test]
    fn late_echoes_after_a_window_write_off_are_still_counted() {
        let mut c = cfg(2, false);
        let (addr, stop) = echo_server_late(c.table.clone(), 0, 7, None);
        c.target = addr;
        c.count = Some(100);
        c.duration = None;
        c.rate = None;
        c.window = Some(2);
        c.drain = Duration::from_millis(800);
        let streams = plan_streams(&c).unwrap();
        let r = run(&c, streams, &AtomicBool::new(false), |_, _, _| {}).unwrap();
        stop.store(true, Ordering::Relaxed);
        assert_eq!(r.sent, 200);
        assert_eq!(r.echoed, 200, "late echoes arrive within the drain and are counted");
        assert_eq!(r.lost, 0);
        assert!(r.out_of_order > 0, "late echoes come back out of order");
        assert!(r.rtt_us.max >= 300_000.0, "the late ones took 300 ms: {:?}", r.rtt_us);
    }

    #[test]
    fn a_wrong_worker_is_a_mismatch() {
        let mut c = cfg(2, false);
        let streams = {
            c.target = "127.0.0.1:9".parse().unwrap();
            plan_streams(&c).unwrap()
        };
        let liar = streams[1].src.ip();
        drop(streams);
        let (addr, stop) = echo_server(c.table.clone(), 0, Some(liar));
        c.target = addr;
        c.count = Some(50);
        c.duration = None;
        c.window = Some(2);
        let streams = plan_streams(&c).unwrap();
        assert_eq!(streams[1].src.ip(), liar, "plan is deterministic");
        let r = run(&c, streams, &AtomicBool::new(false), |_, _, _| {}).unwrap();
        stop.store(true, Ordering::Relaxed);
        assert_eq!(r.echoed, 100);
        assert!(r.streams[0].matched);
        assert!(!r.streams[1].matched);
        assert_eq!(r.streams[1].served_by_workers, vec![7]);
    }

    #[test]
    fn refused_target_is_seen() {
        // Bind and drop a socket to get a port with nothing on it, and aim
        // at an odd loopback address no other test binds, so a parallel test
        // that happens to get the same ephemeral port cannot answer.
        let port = std::net::UdpSocket::bind("127.213.7.9:0").unwrap().local_addr().unwrap().port();
        let mut c = cfg(1, false);
        c.spread = false;
        c.target = SocketAddr::new("127.213.7.9".parse().unwrap(), port);
        c.duration = Some(Duration::from_millis(200));
        let streams = plan_streams(&c).unwrap();
        let r = run(&c, streams, &AtomicBool::new(false), |_, _, _| {}).unwrap();
        assert_eq!(r.echoed, 0);
        assert!(r.refused > 0 && r.cut_short, "{} {}", r.refused, r.cut_short);
        assert_eq!(r.streams[0].refused, r.refused);
    }

    #[test]
    fn server_going_away_cuts_the_run_short() {
        // Echoes for a while, then the server closes its socket: the kernel
        // answers ICMP port unreachable and the streams are refused.
        let mut c = cfg(2, false);
        let (addr, stop) = echo_server(c.table.clone(), 0, None);
        c.target = addr;
        c.duration = Some(Duration::from_secs(3));
        let streams = plan_streams(&c).unwrap();
        let t = Instant::now();
        let r = std::thread::scope(|sc| {
            sc.spawn(|| {
                std::thread::sleep(Duration::from_millis(500));
                stop.store(true, Ordering::Relaxed);
            });
            run(&c, streams, &AtomicBool::new(false), |_, _, _| {}).unwrap()
        });
        assert!(r.echoed > 0, "echoed before the server went away");
        assert!(r.refused > 0, "refusals counted");
        assert!(r.cut_short, "the run stopped before --duration 3");
        assert!(t.elapsed() < Duration::from_millis(2900), "{:?}", t.elapsed());
        assert_eq!(r.refused, r.streams.iter().map(|s| s.refused).sum::<u64>());
        let j = serde_json::to_value(&r).unwrap();
        assert_eq!(j["refused"], r.refused);
        assert_eq!(j["cut_short"], true);
    }

    #[test]
    fn ipnet_parses() {
        let n: IpNet = "10.1.0.0/16".parse().unwrap();
        assert_eq!(n.prefix_len, 16);
        assert!("10.1.0.0/33".parse::<IpNet>().is_err());
        assert!("10.1.0.0".parse::<IpNet>().is_err());
        assert!("fd00::/64".parse::<IpNet>().is_ok());
    }

    #[test]
    fn validation() {
        let mut c = cfg(1, false);
        assert!(c.validate().is_ok());
        c.size = MAX_SIZE + 1;
        assert!(c.validate().unwrap_err().to_string().contains("65507"));
        c.size = MIN_SIZE - 1;
        assert!(c.validate().is_err());
        c.size = 64;
        c.streams = 0;
        assert!(c.validate().is_err());
    }

    #[test]
    fn spread_by_address_on_loopback_hits_distinct_buckets() {
        let c = cfg(4, false);
        let s = plan_streams(&c).unwrap();
        let buckets: BTreeSet<u32> = s.iter().map(|s| s.bucket).collect();
        assert_eq!(buckets.len(), 4);
        let addrs: BTreeSet<IpAddr> = s.iter().map(|s| s.src.ip()).collect();
        assert_eq!(addrs.len(), 4, "address-only hashing needs distinct addresses");
        for st in &s {
            assert_eq!(c.table.policy().bucket(c.table.hash(st.src, c.target)), st.bucket);
        }
    }

    #[test]
    fn spread_by_port_with_4tuple() {
        let c = cfg(4, true);
        let s = plan_streams(&c).unwrap();
        let buckets: BTreeSet<u32> = s.iter().map(|s| s.bucket).collect();
        assert_eq!(buckets.len(), 4);
        for st in &s {
            assert!(st.src.ip().is_loopback());
            assert_eq!(c.table.policy().bucket(c.table.hash(st.src, c.target)), st.bucket);
        }
    }
}
