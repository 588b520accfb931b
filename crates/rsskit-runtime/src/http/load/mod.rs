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

//!
//! Layout (as quinn: protocol state without I/O, time passed in): [`url`]
//! parses the target, [`sources`] picks source addresses and ports, [`conn`]
//! is the per-connection state machine and [`report`] the results; this
//! module is the thin epoll worker that performs the machine's steps on
//! real sockets, and [`run`].

pub mod conn;
pub mod report;
pub mod sources;
pub mod url;

pub use report::{Errors, Live, LoadReport, RunInfo, WorkerReport};
pub use sources::{plan_sources, plan_sources_from, reply_ports, source_addresses, SourcePlan, SrcPorts};
pub use url::{parse_url, Url};

use super::event::{self, Epoll};
use super::now_ns;
use crate::config::ConfigError;
use crate::udp_load::IpNet;
use crate::worker::Workers;
use conn::{Conn, Done, Next, Params, State, Step};
use rsskit_core::finder::FindError;
use rsskit_core::rss::RssError;
use rsskit_core::{CpuId, RssPolicy};
use rsskit_linux::socket::setsockopt_int;
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Why a load run could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// `url` could not be used (syntax, scheme, name resolution).
    #[error("{}", url_error(url, reason))]
    Url {
        /// The URL as given.
        url: String,
        /// What is wrong with it.
        reason: String,
        /// The name resolution's error, where that failed.
        #[source]
        source: Option<io::Error>,
    },
    /// `connections` of 0.
    #[error("{}", ConfigError::at_least_one("connections", 0))]
    NoConnections,
    /// No CPU to run a worker on.
    #[error("no worker threads")]
    NoThreads,
    /// More workers than connections (the caller cuts the list).
    #[error("{workers} worker threads for {connections} connections: at most one per connection")]
    IdleWorkers {
        /// Workers of the policy.
        workers: usize,
        /// Connections asked for.
        connections: usize,
    },
    /// `rate` not a positive finite number.
    #[error("{}", bad_rate(*.0))]
    BadRate(f64),
    /// `sources` and the target are of different families.
    #[error("{}", family_mismatch(sources, target))]
    FamilyMismatch {
        /// The source network.
        sources: IpNet,
        /// The target.
        target: SocketAddr,
    },
    /// More connections than the file descriptor limit allows.
    #[error(
        "{connections} connections need more file descriptors than RLIMIT_NOFILE allows ({limit}); raise the hard limit (ulimit -Hn)"
    )]
    Nofile {
        /// Connections asked for.
        connections: usize,
        /// `RLIMIT_NOFILE` after raising it as far as allowed (0: unknown).
        limit: u64,
    },
    /// The kernel's route to the target gave no local address.
    #[error("finding the local address towards the target")]
    LocalAddress(#[source] io::Error),
    /// The policy refused a bucket table.
    #[error("{which} table")]
    Table {
        /// Whose table: `server` or `client`.
        which: &'static str,
        /// The policy's reason.
        #[source]
        source: RssError,
    },
    /// The tuple finder could not be set up for a source and target.
    #[error("tuple finder for {src} -> {dst}")]
    Finder {
        /// The source address.
        src: IpAddr,
        /// The target.
        dst: SocketAddr,
        /// The finder's reason.
        #[source]
        source: FindError,
    },
    /// No source port lands a connection in one of the worker's buckets.
    #[error("the tuple finder found no source port for worker {worker}")]
    NoSourcePort {
        /// The client worker.
        worker: usize,
    },
    /// `SCHED_BATCH` refused on a worker's thread (`--sched-batch`).
    #[error("SCHED_BATCH")]
    SchedBatch(#[source] io::Error),
    /// A worker's epoll instance.
    #[error("epoll")]
    Epoll(#[source] io::Error),
    /// A worker could not be set up (its CPU, epoll, scheduling policy).
    #[error("load worker setup: {0}")]
    Setup(String),
    /// A worker died.
    #[error("{0}")]
    Worker(String),
}

/// What to run.
#[derive(Debug, Clone)]
pub struct LoadConfig {
    /// Target host, port and path.
    pub url: Url,
    /// Connections kept open over all workers.
    pub connections: usize,
    /// How long requests are started.
    pub duration: Duration,
    /// Requests per second over all connections (scheduled starts).
    pub rate: Option<f64>,
    /// One request per connection.
    pub close: bool,
    /// The client's RSS policy, built once by the caller: worker `i` runs
    /// on its CPU (pinned if `pin`; at most one worker per connection), the
    /// key of the tuple finder, and the buckets each worker owns
    /// (`SrcPorts::Reply`).
    pub policy: Arc<RssPolicy>,
    /// Pin each worker to its CPU (`false`: `--no-pin`).
    pub pin: bool,
    /// Source addresses to spread connections over; `None`: the kernel's choice.
    pub sources: Option<IpNet>,
    /// A request with no whole answer within this fails as a timeout.
    pub timeout: Duration,
    /// How source ports are chosen.
    pub src_ports: SrcPorts,
    /// The server's RSS policy (same key; `SrcPorts::Server`): client
    /// worker `i` aims at server worker `i % workers`.
    pub server_policy: Arc<RssPolicy>,
    /// Run the workers under `SCHED_BATCH` (no wakeup preemption): when
    /// the client shares CPUs with the server, a worker woken by each
    /// answer no longer preempts the server after every response, so
    /// both sides work in batches (fewer context switches per request).
    pub sched_batch: bool,
}

fn url_error(url: &str, reason: &str) -> ConfigError {
    ConfigError::value("url", format!("'{url}'"), format!(": {reason}"))
}

fn bad_rate(rate: f64) -> ConfigError {
    ConfigError::Must {
        field: "rate",
        value: rate.to_string(),
        need: "a positive number of requests per second",
    }
}

fn family_mismatch(sources: &IpNet, target: &SocketAddr) -> ConfigError {
    ConfigError::value(
        "sources",
        sources,
        format!(" and the target {target} are of different address families"),
    )
}

impl LoadError {
    /// The config field refused, for the errors that are one.
    pub fn config(&self) -> Option<ConfigError> {
        match self {
            LoadError::Url { url, reason, .. } => Some(url_error(url, reason)),
            LoadError::NoConnections => Some(ConfigError::at_least_one("connections", 0)),
            LoadError::BadRate(r) => Some(bad_rate(*r)),
            LoadError::FamilyMismatch { sources, target } => Some(family_mismatch(sources, target)),
            _ => None,
        }
    }
}

impl LoadConfig {
    /// Refuses settings the run cannot use, before anything is opened.
    pub fn validate(&self) -> Result<(), LoadError> {
        if self.connections == 0 {
            return Err(LoadError::NoConnections);
        }
        if self.policy.workers() == 0 {
            return Err(LoadError::NoThreads);
        }
        // The caller cuts its worker list to the connections: a worker
        // without a connection would only idle.
        if self.policy.workers() > self.connections {
            return Err(LoadError::IdleWorkers {
                workers: self.policy.workers(),
                connections: self.connections,
            });
        }
        if let Some(r) = self.rate {
            if !(r.is_finite() && r > 0.0) {
                return Err(LoadError::BadRate(r));
            }
        }
        if let Some(n) = &self.sources {
            if n.addr.is_ipv4() != self.url.addr.is_ipv4() {
                return Err(LoadError::FamilyMismatch { sources: *n, target: self.url.addr });
            }
        }
        Ok(())
    }

    /// The request every exchange sends.
    pub fn request(&self) -> Vec<u8> {
        format!(
            "GET {} HTTP/1.1\r\nHost: {}\r\nUser-Agent: rsskit-http-load\r\n{}\r\n",
            self.url.path,
            self.url.host,
            if self.close { "Connection: close\r\n" } else { "" }
        )
        .into_bytes()
    }
}

/// One connection of a worker: the protocol state and what the event
/// loop holds for it.
struct Slot {
    conn: Conn,
    sock: Option<TcpStream>,
    /// Bumped when the socket goes: events for an old socket are stale.
    gen: u32,
    /// Pending start timer time (0: none).
    timer: u64,
}

/// The epoll worker: performs the connections' steps on real sockets.
struct Worker {
    ep: Epoll,
    slots: Vec<Slot>,
    p: Params,
    target: SockAddr,
    ipv6: bool,
    locals: Vec<SocketAddr>,
    local_cursor: usize,
    bind_port: bool,
    timers: BinaryHeap<Reverse<(u64, u32)>>,
    scratch: Vec<u8>,
    report: WorkerReport,
    live: Arc<Live>,
    open: u64,
    inflight: usize,
    /// Connections to start once the current event batch is handled
    /// (never from inside a read: no recursion into the reader).
    ready: Vec<(u32, u64)>,
}

impl Worker {
    fn token(&self, i: usize) -> u64 {
        (u64::from(self.slots[i].gen) << 32) | i as u64
    }

    fn arm(&mut self, i: usize, at: u64) {
        self.slots[i].timer = at;
        self.timers.push(Reverse((at, i as u32)));
    }

    /// Starts request `i` now (its latency origin `start`).
    fn begin(&mut self, i: usize, start: u64, now: u64) {
        let s = &mut self.slots[i];
        let step = s.conn.begin(start, now, s.sock.is_some());
        self.inflight += 1;
        self.step(i, step, now);
    }

    /// Performs a step of connection `i`'s machine.
    fn step(&mut self, i: usize, step: Step, now: u64) {
        match step {
            Step::Connect => self.open(i, now),
            Step::Write => self.write_req(i, now),
            Step::Sent { read_now } => {
                self.report.sent += 1;
                if read_now {
                    self.read_resp(i, now);
                }
            }
            Step::Read => self.read_resp(i, now),
            Step::Done(d) => self.done(i, d),
        }
    }

    /// The end of an exchange: count it, close or keep the socket, and
    /// schedule the connection's next request.
    fn done(&mut self, i: usize, d: Done) {
        self.report.record(d.outcome);
        if !d.keep {
            self.drop_sock(i);
        }
        self.inflight -= 1;
        match d.next {
            Next::Now { start } => self.ready.push((i as u32, start)),
            Next::At(at) => self.arm(i, at),
            Next::Finished => {}
        }
    }

    fn open_failed(&mut self, i: usize, kind: Option<io::ErrorKind>, now: u64) {
        let d = self.slots[i].conn.on_open_failed(&self.p, kind, now);
        self.done(i, d);
    }

    fn open(&mut self, i: usize, now: u64) {
        let domain = if self.ipv6 { Domain::IPV6 } else { Domain::IPV4 };
        let s = match Socket::new(domain, Type::STREAM.nonblocking(), Some(Protocol::TCP)) {
            Ok(s) => s,
            Err(_) => return self.open_failed(i, None, now),
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
                return self.open_failed(i, None, now);
            }
        }
        if !self.p.close {
            // Keep-alive: a request must never wait behind Nagle.
            let _ = s.set_nodelay(true);
        }
        match s.connect(&self.target) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => {}
            Err(e) => return self.open_failed(i, Some(e.kind()), now),
        }
        let sock = TcpStream::from(s);
        let tok = self.token(i);
        if self.ep.add(sock.as_raw_fd(), event::IN | event::OUT | event::RDHUP | event::ET, tok).is_err() {
            return self.open_failed(i, None, now);
        }
        self.open += 1;
        self.slots[i].sock = Some(sock);
    }

    fn drop_sock(&mut self, i: usize) {
        let s = &mut self.slots[i];
        if s.sock.take().is_some() {
            self.open -= 1;
            s.gen = s.gen.wrapping_add(1);
        }
    }

    /// Writes (the rest of) the request.
    fn write_req(&mut self, i: usize, now: u64) {
        loop {
            let s = &mut self.slots[i];
            let Some(sock) = s.sock.as_ref() else { return };
            match (&*sock).write(s.conn.pending(&self.p)) {
                Ok(n) => match s.conn.on_written(&self.p, n) {
                    Step::Write => {}
                    step => return self.step(i, step, now),
                },
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return s.conn.on_write_blocked(),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    let d = s.conn.on_write_error(&self.p, e.kind(), now);
                    return self.done(i, d);
                }
            }
        }
    }

    fn read_resp(&mut self, i: usize, now: u64) {
        let mut scratch = std::mem::take(&mut self.scratch);
        self.read_into(i, now, &mut scratch);
        self.scratch = scratch;
    }

    /// Reads until the socket is drained or the exchange is over.
    fn read_into(&mut self, i: usize, now: u64, buf: &mut [u8]) {
        loop {
            let s = &mut self.slots[i];
            if s.conn.state() != State::Reading {
                return;
            }
            let Some(sock) = s.sock.as_ref() else { return };
            let n = match (&*sock).read(buf) {
                Ok(0) => {
                    let d = s.conn.on_eof(&self.p, now);
                    return self.done(i, d);
                }
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => {
                    let d = s.conn.on_read_error(&self.p, now);
                    return self.done(i, d);
                }
            };
            self.report.bytes_in += n as u64;
            match s.conn.on_read(&self.p, &buf[..n], now) {
                Step::Read => {}
                step => return self.step(i, step, now),
            }
        }
    }

    fn on_event(&mut self, tok: u64, ev: u32, now: u64) {
        let i = (tok & 0xffff_ffff) as usize;
        if i >= self.slots.len() || self.slots[i].gen != (tok >> 32) as u32 || self.slots[i].sock.is_none() {
            return;
        }
        let s = &mut self.slots[i];
        match s.conn.state() {
            State::Connecting => {
                if ev & (event::OUT | event::ERR | event::HUP) == 0 {
                    return;
                }
                let err = s.sock.as_ref().and_then(|s| s.take_error().ok().flatten());
                if err.is_some() || ev & (event::ERR | event::HUP) != 0 {
                    let d = s.conn.on_connect_error(&self.p, err.map(|e| e.kind()), now);
                    return self.done(i, d);
                }
                let (t, step) = s.conn.on_connected(now, ev & event::IN != 0);
                self.report.connects += 1;
                self.report.connect.record(t);
                self.step(i, step, now);
            }
            State::Writing => {
                if ev & event::OUT != 0 {
                    self.write_req(i, now);
                } else if ev & (event::ERR | event::HUP) != 0 {
                    let d = s.conn.on_hangup(&self.p, now);
                    self.done(i, d);
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
                    let gone = match s.sock.as_ref().map(|s| s.peek(&mut b)) {
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
        for i in 0..self.slots.len() {
            if let Some(d) = self.slots[i].conn.poll_timeout(&self.p, now) {
                self.done(i, d);
            }
        }
    }

    fn publish(&self) {
        self.live.publish(&self.report, self.open);
    }

    fn run(&mut self, t0: u64, phase: &[u64], stop: &AtomicBool) {
        // First starts: phases spread over the schedule (rate) or a short
        // ramp (closed loop) so that thousands of connects do not all hit the
        // listen backlog in the same microsecond.
        for (i, &p) in phase.iter().enumerate() {
            self.slots[i].conn.schedule_first(t0 + p);
            self.arm(i, t0 + p);
        }
        let mut next_scan = t0;
        let mut drain_until = u64::MAX;
        loop {
            let now = now_ns();
            if stop.load(Ordering::Relaxed) && self.p.end > now {
                self.p.end = now;
            }
            if now >= self.p.end {
                if drain_until == u64::MAX {
                    drain_until = now + self.p.timeout_ns.min(2_000_000_000);
                    for s in &mut self.slots {
                        s.conn.finish();
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
                let s = &mut self.slots[i];
                if s.timer != at {
                    continue;
                }
                let Some(step) = s.conn.on_timer(&self.p, at, now, s.sock.is_some()) else { continue };
                s.timer = 0;
                self.inflight += 1;
                self.step(i, step, now);
            }
            if now >= next_scan {
                self.scan_timeouts(now);
                next_scan = now + 50_000_000;
            }
            self.publish();
            let mut wait = next_scan.saturating_sub(now).min(self.p.end.saturating_sub(now).max(1_000_000));
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
                    if self.slots[i].conn.startable() {
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
        for i in 0..self.slots.len() {
            if let Some(d) = self.slots[i].conn.abort(&self.p, now) {
                self.done(i, d);
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
) -> Result<LoadReport, LoadError> {
    cfg.validate()?;
    let cpus: Vec<CpuId> = cfg.policy.worker_cpus().to_vec();
    let threads = cpus.len();
    let nofile = super::raise_nofile((cfg.connections as u64 + 1024).max(4096)).unwrap_or(0);
    if nofile < cfg.connections as u64 + 64 {
        return Err(LoadError::Nofile { connections: cfg.connections, limit: nofile });
    }
    let plans = plan_sources(cfg)?;
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
    let params = Params {
        request,
        interval,
        close: cfg.close,
        timeout_ns: cfg.timeout.as_nanos().min(u64::MAX as u128) as u64,
        end,
    };
    let target = cfg.url.addr;
    let bind_port = cfg.src_ports != SrcPorts::Kernel;
    let sched_batch = cfg.sched_batch;
    // Set up on the worker's own thread (pinned unless --no-pin); Workers
    // returns once every worker is ready, or the first setup error.
    let workers = Workers::spawn_with_setup(
        &cpus,
        cfg.pin,
        states,
        stop.clone(),
        move |ctx, (plan, phase, live): (SourcePlan, Vec<u64>, Arc<Live>)| {
            if sched_batch {
                rsskit_linux::process::set_sched_batch().map_err(LoadError::SchedBatch)?;
            }
            let ep = Epoll::new(1024).map_err(LoadError::Epoll)?;
            let n = phase.len();
            let slots =
                (0..n).map(|_| Slot { conn: Conn::default(), sock: None, gen: 0, timer: 0 }).collect();
            let wk = Worker {
                ep,
                slots,
                p: params.clone(),
                target: target.into(),
                ipv6: target.is_ipv6(),
                locals: plan.locals,
                local_cursor: 0,
                bind_port,
                timers: BinaryHeap::with_capacity(n),
                scratch: vec![0; 64 * 1024],
                report: WorkerReport::new(ctx.worker(), ctx.cpu_id(), n),
                live,
                open: 0,
                inflight: 0,
                ready: Vec::new(),
            };
            Ok::<_, LoadError>((wk, phase))
        },
        move |ctx, (mut wk, phase): (Worker, Vec<u64>)| {
            wk.run(t0, &phase, &ctx.stop);
            wk.report
        },
    )
    .map_err(|e| LoadError::Setup(format!("{e:#}")))?;
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
    let workers = workers.join().map_err(|e| LoadError::Worker(format!("{e:#}")))?;
    Ok(LoadReport::summarize(
        cfg,
        RunInfo { cpus, source_addresses, nofile, elapsed_ns, per_second },
        workers,
    ))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Microsoft key, one worker per CPU of `cpus`, TCP hashed on the 4-tuple.
    pub(crate) fn policy(cpus: &[u32]) -> Arc<RssPolicy> {
        let cpus: Vec<rsskit_core::CpuId> = cpus.iter().map(|&c| rsskit_core::CpuId(c)).collect();
        Arc::new(
            RssPolicy::new(rsskit_core::RssKey::microsoft(), rsskit_core::HashConfig::default(), &cpus, None)
                .unwrap(),
        )
    }

    /// A valid configuration for the unit tests (nothing is run).
    pub(crate) fn config() -> LoadConfig {
        LoadConfig {
            url: parse_url("http://127.0.0.1:8080/obj").unwrap(),
            connections: 4,
            duration: Duration::from_secs(1),
            rate: None,
            close: false,
            policy: policy(&[0]),
            pin: false,
            sources: None,
            timeout: Duration::from_secs(5),
            src_ports: SrcPorts::Kernel,
            server_policy: policy(&[0]),
            sched_batch: false,
        }
    }

    #[test]
    fn invalid_configurations_are_typed_errors() {
        assert!(config().validate().is_ok());
        let bad = |f: fn(&mut LoadConfig)| {
            let mut c = config();
            f(&mut c);
            c.validate().unwrap_err()
        };
        assert!(matches!(bad(|c| c.connections = 0), LoadError::NoConnections));
        let e = bad(|c| c.policy = policy(&[0, 1, 2, 3, 4]));
        assert!(matches!(e, LoadError::IdleWorkers { workers: 5, connections: 4 }));
        assert!(matches!(bad(|c| c.rate = Some(0.0)), LoadError::BadRate(_)));
        assert!(matches!(bad(|c| c.rate = Some(f64::NAN)), LoadError::BadRate(_)));
        let e = bad(|c| c.sources = Some("::1/128".parse().unwrap()));
        assert!(matches!(e, LoadError::FamilyMismatch { .. }));
        assert_eq!(
            e.to_string(),
            "sources ::1/128 and the target 127.0.0.1:8080 are of different address families"
        );
    }

    #[test]
    fn the_request() {
        let mut c = config();
        assert_eq!(
            c.request(),
            b"GET /obj HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nUser-Agent: rsskit-http-load\r\n\r\n"
        );
        c.close = true;
        assert!(String::from_utf8(c.request()).unwrap().ends_with("\r\nConnection: close\r\n\r\n"));
    }

    /// A loopback server that answers in three pieces (the shell reads
    /// partial answers) and closes every third exchange with
    /// `Connection: close` (the shell reconnects); it counts what it served.
    fn piecemeal_server(stop: Arc<AtomicBool>) -> (SocketAddr, std::thread::JoinHandle<u64>) {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.set_nonblocking(true).unwrap();
        let addr = l.local_addr().unwrap();
        let h = std::thread::spawn(move || {
            let served = Arc::new(std::sync::atomic::AtomicU64::new(0));
            let mut conns = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let Ok((mut c, _)) = l.accept() else {
                    std::thread::sleep(Duration::from_millis(2));
                    continue;
                };
                let served = served.clone();
                conns.push(std::thread::spawn(move || {
                    c.set_nonblocking(false).unwrap();
                    c.set_nodelay(true).unwrap();
                    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                    let mut buf = Vec::new();
                    for k in 1.. {
                        while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                            let mut b = [0u8; 1024];
                            match c.read(&mut b) {
                                Ok(0) | Err(_) => return,
                                Ok(n) => buf.extend_from_slice(&b[..n]),
                            }
                        }
                        buf.clear();
                        let close = if k % 3 == 0 { "Connection: close\r\n" } else { "" };
                        let resp = format!("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n{close}\r\n0123456789");
                        let b = resp.as_bytes();
                        for part in [&b[..7], &b[7..b.len() - 4], &b[b.len() - 4..]] {
                            if c.write_all(part).is_err() {
                                return;
                            }
                            std::thread::sleep(Duration::from_micros(300));
                        }
                        served.fetch_add(1, Ordering::Relaxed);
                        if k % 3 == 0 {
                            return;
                        }
                    }
                }));
            }
            for c in conns {
                let _ = c.join();
            }
            served.load(Ordering::Relaxed)
        });
        (addr, h)
    }

    #[test]
    fn the_shell_reads_partial_answers_and_reconnects_after_close() {
        let stop_srv = Arc::new(AtomicBool::new(false));
        let (addr, srv) = piecemeal_server(stop_srv.clone());
        let mut cfg = config();
        cfg.url = parse_url(&format!("http://{addr}/")).unwrap();
        cfg.duration = Duration::from_millis(600);
        let stop = Arc::new(AtomicBool::new(false));
        let r = run(&cfg, &stop, |_, _, _, _| {}).unwrap();
        stop_srv.store(true, Ordering::Relaxed);
        let served = srv.join().unwrap();
        assert_eq!(r.errors, Errors::default(), "{r:?}");
        assert!(r.responses >= 30, "{r:?}");
        // Every request sent was answered (the run drains in-flight ones).
        assert_eq!(r.sent, r.responses);
        assert_eq!(served, r.responses);
        // A new connection after every third answer.
        assert!(r.connects >= r.responses / 3, "{} connects for {} answers", r.connects, r.responses);
        assert!(r.connects <= r.responses / 3 + cfg.connections as u64, "{r:?}");
        // 49 bytes an answer, 19 more with the close header.
        let closes = r.connects.min(r.responses);
        assert!(
            r.bytes_in >= r.responses * 49 + (closes.saturating_sub(cfg.connections as u64)) * 19,
            "{r:?}"
        );
        assert!(r.bytes_in <= r.responses * 49 + closes * 19, "{r:?}");
    }
}
