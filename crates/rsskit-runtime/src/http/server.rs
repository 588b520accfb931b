//! `rsskit http-serve`: one pinned worker per CPU, each with its own
//! listener in a `SO_REUSEPORT` group (steered like the UDP runtime: `cpu`,
//! in-kernel `toeplitz`, the `kernel`'s hash, or one `shared` listener), its
//! own epoll loop and its own connections.
//!
//! Each wake-up accepts at most `accept_batch` connections (DragonFly's
//! cap, 32 by default) before serving the ready connections; the listener
//! is level-triggered so the rest are picked up on the next wake-up.
//!
//! HTTP/1.1: keep-alive, `Connection: close`, pipelining; GET and HEAD; a
//! generated object at `/` (`object_size` bytes) and `/bytes/N`; static
//! files under `root`. Idle and header-read timeouts; error statuses from
//! [`request::parse`](super::request::parse). Refused requests are answered, then the connection
//! is closed gracefully (write side shut, input drained for a moment) so
//! the client reads the answer instead of a reset.
//!
//! The protocol is [`super::conn`]'s sans-I/O state machine; this file is
//! the shell: listeners, workers, epoll, and the system calls its actions
//! ask for (read, write, `sendfile`, shutdown, close).
#![forbid(unsafe_code)]

use super::conn::{Action, ConnConfig, Expiry, Http, Interest, ReadMode, INLINE_BODY};
use super::event::{self, Epoll};
use super::files::{Body, CachedRoot, Root};
use super::{now_ns, unix_secs};
use crate::config::ConfigError;
use crate::steer::{self, Steer, SteerSpec, SteeredGroup, Transport};
use crate::worker::Workers;
use rsskit_core::rss::RssError;
use rsskit_core::{CpuId, RssPolicy};
pub use rsskit_linux::affinity::ThreadPolicy;
use rsskit_linux::socket::TcpListenOptions;
use socket2::Socket;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

pub use super::conn::pattern_byte;
pub use super::counters::{ServeCounters, SharedCounters, STATUS_CODES};

/// Largest `/bytes/N`.
pub const MAX_GENERATED: usize = 1 << 30;
/// How long a refused connection is drained before it is closed.
const LINGER: Duration = Duration::from_secs(2);
/// Timeout scan period.
const SCAN_NS: u64 = 250_000_000;
const LISTENER: u64 = u64::MAX;

impl From<ConfigError> for ServeError {
    fn from(e: ConfigError) -> Self {
        ServeError::Config(Box::new(e))
    }
}

fn root_error(path: &str) -> ConfigError {
    ConfigError::value("root", path, "")
}

impl ServeError {
    /// The config field refused, for the errors that are one.
    pub fn config(&self) -> Option<ConfigError> {
        match self {
            ServeError::Config(c) => Some(ConfigError::clone(c)),
            ServeError::Root { path, .. } => Some(root_error(path)),
            _ => None,
        }
    }
}

/// Why the server did not start (or stopped badly).
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// Reading the eBPF bucket map (`ebpf` steering).
    #[error("reading the eBPF bucket counters")]
    Ebpf(#[source] rsskit_linux::ebpf::reuseport::ReuseportError),
    /// An empty CPU list.
    #[error("no worker CPUs")]
    NoCpus,
    /// A config field refused (`accept_batch`, `object_size`).
    #[error(transparent)]
    Config(Box<ConfigError>),
    /// A zero idle or header timeout.
    #[error("timeouts must be positive")]
    Timeouts,
    /// The policy refused the bucket table or CPUs.
    #[error("bucket table")]
    Policy(#[source] RssError),
    /// `root` could not be opened as a directory.
    #[error("{}", root_error(path))]
    Root {
        /// The directory.
        path: String,
        /// Why it could not be opened.
        source: io::Error,
    },
    /// A worker's epoll instance.
    #[error("epoll_create1")]
    Epoll(#[source] io::Error),
    /// A worker could not set its scheduling policy.
    #[error("setting the workers' scheduling policy to {0}")]
    Sched(ThreadPolicy, #[source] io::Error),
    /// A worker's listener could not be added to its epoll.
    #[error("registering the listener")]
    Register(#[source] io::Error),
    /// Binding and steering the listeners ([`steer::build`]).
    #[error(transparent)]
    Listen(#[from] crate::steer::SteerError),
    /// Spawning, pinning or joining the workers.
    #[error(transparent)]
    Workers(#[from] crate::worker::WorkerError),
}

/// Shorthand for this module's results.
pub type Result<T, E = ServeError> = std::result::Result<T, E>;

/// What to serve and how.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// Address and port to listen on (port 0: the kernel picks one).
    pub bind: SocketAddr,
    /// The RSS policy, built once by the caller: worker `i` pinned to its
    /// CPU, the key of the `toeplitz` program, bucket -> worker (e.g. from
    /// a NIC's table, see [`RssPolicy::from_table`]).
    pub policy: Arc<RssPolicy>,
    /// How connections reach the workers' listeners.
    pub steer: Steer,
    /// Most connections accepted per wake-up.
    pub accept_batch: usize,
    /// Size of the object at `/`.
    pub object_size: usize,
    /// Largest `/bytes/N`.
    pub max_generated: usize,
    /// Directory of static files (`None`: generated objects only).
    pub root: Option<PathBuf>,
    /// A keep-alive connection with no request for this long is closed.
    pub idle_timeout: Duration,
    /// A request head not complete within this is answered 408.
    pub header_timeout: Duration,
    /// `listen` backlog per listener.
    pub backlog: i32,
    /// Requests per keep-alive connection; the last is answered with
    /// `Connection: close` (0: no limit).
    pub max_requests: u64,
    /// `TCP_DEFER_ACCEPT`: wake the listener only once the request arrived
    /// (a connection that sends nothing is accepted after about a second,
    /// the kernel's first SYN-ACK retransmission, and then meets the header
    /// timeout). On by default: a short-lived connection then costs no
    /// `EAGAIN` read, no epoll registration and no extra wake-up.
    pub defer_accept: bool,
    /// Files under `root` of up to [`super::conn::INLINE_BODY`] bytes are
    /// served from a per-worker copy for this long ([`CachedRoot`]; zero:
    /// opened and read per request).
    pub file_cache: Duration,
    /// Scheduling policy of the workers: `Batch` (the default) lets the
    /// wake-up of a connection's arrival wait until the task running on the
    /// worker's CPU blocks or ends its slice, so one wake-up accepts and
    /// serves more; `Normal` wakes the worker at once. With the client on the
    /// same two CPUs (bench/http-vs-nginx), `Batch` gave ~8% more requests/s
    /// and a steadier tail (bench/LOG.md, 2026-11-26 14:35-15:13).
    pub sched: ThreadPolicy,
}

impl ServeConfig {
    /// Defaults for everything but the address and the policy.
    pub fn new(bind: SocketAddr, policy: Arc<RssPolicy>) -> ServeConfig {
        ServeConfig {
            bind,
            policy,
            steer: Steer::Kernel,
            accept_batch: 32,
            object_size: 1024,
            max_generated: MAX_GENERATED,
            root: None,
            idle_timeout: Duration::from_secs(60),
            header_timeout: Duration::from_secs(10),
            backlog: 4096,
            max_requests: 0,
            defer_accept: true,
            file_cache: Duration::from_secs(1),
            sched: ThreadPolicy::Batch,
        }
    }

    /// Refuses settings the server cannot use, before anything is bound.
    pub fn validate(&self) -> Result<()> {
        if self.policy.workers() == 0 {
            return Err(ServeError::NoCpus);
        }
        if self.accept_batch == 0 {
            return Err(ConfigError::at_least_one("accept_batch", 0).into());
        }
        if self.object_size > self.max_generated {
            return Err(ConfigError::value(
                "object_size",
                self.object_size,
                format!(" exceeds the largest generated object ({})", self.max_generated),
            )
            .into());
        }
        if self.idle_timeout.is_zero() || self.header_timeout.is_zero() {
            return Err(ServeError::Timeouts);
        }
        Ok(())
    }

    /// The connection state machine's settings.
    pub fn conn_config(&self) -> ConnConfig {
        let ns = |d: Duration| d.as_nanos().min(u64::MAX as u128) as u64;
        ConnConfig {
            object_size: self.object_size,
            max_generated: self.max_generated,
            idle_ns: ns(self.idle_timeout),
            header_ns: ns(self.header_timeout),
            linger_ns: ns(LINGER),
            max_requests: self.max_requests,
        }
    }
}

/// Binds the listeners for `cfg` with the runtime's steering
/// ([`steer::build`] over TCP): refuses a port that is already in use
/// (joining someone else's reuseport group would silently share its
/// connections), then binds and listens one socket per worker in worker
/// order (the group's socket index) and attaches the steering program.
pub fn listen(cfg: &ServeConfig) -> Result<SteeredGroup> {
    steer::build(&SteerSpec {
        mode: cfg.steer,
        bind: cfg.bind,
        policy: &cfg.policy,
        transport: Transport::Tcp(TcpListenOptions {
            reuseport: false,
            backlog: cfg.backlog,
            defer_accept: cfg.defer_accept,
        }),
    })
    .map_err(ServeError::Listen)
}

/// Running server.
pub struct Server {
    workers: Workers<ServeCounters>,
    shared: Vec<Arc<SharedCounters>>,
    /// The bound address (with the port the kernel picked for port 0).
    pub local: SocketAddr,
    /// Instructions of the attached steering program, if any.
    pub program_len: Option<usize>,
    /// Worker CPUs, in worker order.
    pub cpus: Vec<CpuId>,
    /// `RLIMIT_NOFILE` in force.
    pub nofile: u64,
    /// The steering mode in force (`toeplitz` when `ebpf` fell back).
    pub mode: Steer,
    /// `ebpf` asked for, classic `toeplitz` in force: why.
    pub fallback: Option<String>,
    /// The workers' scheduling policy.
    pub sched: ThreadPolicy,
    /// `ebpf` steering: the live bucket maps (`--rebalance`).
    live: Option<crate::rebalance::LiveBuckets>,
}

impl Server {
    /// Binds, spawns the pinned workers, and returns once every worker is
    /// pinned and polling its listener.
    pub fn start(cfg: ServeConfig, stop: Arc<AtomicBool>) -> Result<Server> {
        cfg.validate()?;
        let nofile = super::raise_nofile(1 << 18).unwrap_or(0);
        let root = match &cfg.root {
            Some(p) => Some(Arc::new(
                Root::open(p).map_err(|source| ServeError::Root { path: p.display().to_string(), source })?,
            )),
            None => None,
        };
        let ls = listen(&cfg)?;
        let (local, program_len, cpus) = (ls.local, ls.program_len, cfg.policy.worker_cpus().to_vec());
        let (mode, fallback) = (ls.mode, ls.fallback.clone());
        let live = ls.ebpf.map(crate::rebalance::LiveBuckets::new).transpose().map_err(ServeError::Ebpf)?;
        let shared: Vec<Arc<SharedCounters>> = cpus.iter().map(|_| Arc::default()).collect();
        let states: Vec<_> = ls.sockets.into_iter().zip(shared.iter().cloned()).collect();
        let file_cache_ns = cfg.file_cache.as_nanos().min(u128::from(u64::MAX)) as u64;
        let sched = cfg.sched;
        let cfg = Arc::new(cfg);
        let workers = Workers::spawn_with_setup(
            &cpus,
            true,
            states,
            stop,
            move |_, (listener, counters)| {
                rsskit_linux::affinity::set_current_thread_policy(sched)
                    .map_err(|e| ServeError::Sched(sched, e))?;
                // Each worker its own cache (touched on its own CPU).
                let files = root.clone().map(|r| Arc::new(CachedRoot::new(r, file_cache_ns, INLINE_BODY)));
                Worker::new(&cfg, files, listener, counters)
            },
            |ctx, mut w: Worker| w.run(&ctx.stop),
        )
        .map_err(ServeError::Workers)?;
        Ok(Server { workers, shared, local, program_len, cpus, nofile, mode, fallback, sched, live })
    }

    /// One rebalancing round over the connections (SYNs) each bucket got
    /// since the last ([`crate::rebalance`]); `None` without `ebpf` steering.
    pub fn rebalance(
        &mut self,
        target: f64,
        min_sample: u64,
    ) -> std::result::Result<Option<crate::rebalance::Round>, rsskit_linux::ebpf::reuseport::ReuseportError>
    {
        self.live.as_mut().map(|l| l.rebalance(target, min_sample)).transpose()
    }

    /// `ebpf` steering: the program's counters.
    pub fn ebpf_counters(&self) -> Option<rsskit_linux::ebpf::reuseport::Counters> {
        self.live.as_ref().and_then(|l| l.counters().ok())
    }

    /// `ebpf` steering: bucket -> worker now.
    pub fn bucket_owners(&self) -> Option<Vec<u32>> {
        self.live.as_ref().map(|l| l.steering().owners().to_vec())
    }

    /// Every worker's counters now.
    pub fn snapshot(&self) -> Vec<ServeCounters> {
        self.shared.iter().map(|s| s.snapshot()).collect()
    }

    /// Asks the workers to stop (they notice within 100 ms).
    pub fn request_stop(&self) {
        self.workers.request_stop();
    }

    /// Stops the workers and returns their final counters.
    pub fn join(self) -> Result<Vec<ServeCounters>> {
        self.workers.join().map_err(ServeError::Workers)
    }
}

/// A connection as the shell keeps it: the socket and its protocol state.
struct Live {
    sock: TcpStream,
    conn: super::conn::Conn<Body>,
    /// epoll interest (0: not registered yet).
    interest: u32,
    /// Something was written already (a further write may meet Nagle).
    wrote: bool,
    /// `TCP_NODELAY` is set.
    nodelay: bool,
}

struct Slot {
    gen: u32,
    conn: Option<Live>,
}

enum Flow {
    Keep,
    Close,
}

struct Worker {
    http: Http<CachedRoot>,
    /// The same files as `http`'s, to pass it the clock.
    files: Option<Arc<CachedRoot>>,
    accept_batch: usize,
    ep: Epoll,
    listener: Socket,
    listener_on: bool,
    exclusive: bool,
    slots: Vec<Slot>,
    free: Vec<u32>,
    scratch: Vec<u8>,
    events: Vec<(u64, u32)>,
    shared: Arc<SharedCounters>,
    now: u64,
}

fn would_block(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::WouldBlock
}

impl Worker {
    fn new(
        cfg: &Arc<ServeConfig>,
        files: Option<Arc<CachedRoot>>,
        listener: Socket,
        shared: Arc<SharedCounters>,
    ) -> Result<Worker> {
        let ep = Epoll::new(512).map_err(ServeError::Epoll)?;
        let mut w = Worker {
            http: Http::new(cfg.conn_config(), files.clone(), unix_secs()),
            files,
            accept_batch: cfg.accept_batch,
            ep,
            listener,
            listener_on: false,
            exclusive: cfg.steer == Steer::Shared,
            slots: Vec::new(),
            free: Vec::new(),
            scratch: vec![0; 64 * 1024],
            events: Vec::with_capacity(512),
            shared,
            now: now_ns(),
        };
        w.listener_enable(true).map_err(ServeError::Register)?;
        Ok(w)
    }

    fn listener_enable(&mut self, on: bool) -> io::Result<()> {
        if on == self.listener_on {
            return Ok(());
        }
        let fd = self.listener.as_raw_fd();
        if on {
            let ev = event::IN | if self.exclusive { event::EXCLUSIVE } else { 0 };
            self.ep.add(fd, ev, LISTENER)?;
        } else {
            self.ep.delete(fd)?;
        }
        self.listener_on = on;
        Ok(())
    }

    fn run(&mut self, stop: &AtomicBool) -> ServeCounters {
        let mut next_scan = self.now + SCAN_NS;
        while !stop.load(Ordering::Relaxed) {
            let n = match self.ep.wait(Some(Duration::from_millis(100))) {
                Ok(n) => n,
                Err(e) => {
                    eprintln!("http-serve: epoll_wait: {e}");
                    break;
                }
            };
            self.now = now_ns();
            self.http.set_wall_clock(unix_secs());
            if let Some(f) = &self.files {
                f.set_now(self.now);
            }
            let mut evs = std::mem::take(&mut self.events);
            evs.clear();
            evs.extend((0..n).map(|i| self.ep.event(i)));
            for &(tok, ev) in &evs {
                if tok == LISTENER {
                    self.accept_some();
                } else {
                    self.on_event(tok, ev);
                }
            }
            self.events = evs;
            if self.now >= next_scan {
                self.scan();
                next_scan = self.now + SCAN_NS;
            }
            self.shared.publish(&self.http.c);
        }
        // Shutdown: close every connection.
        for slot in &mut self.slots {
            if slot.conn.take().is_some() {
                self.http.c.closed += 1;
            }
        }
        self.shared.publish(&self.http.c);
        self.http.c
    }

    fn accept_some(&mut self) {
        for _ in 0..self.accept_batch {
            let sock = match rsskit_linux::socket::accept4(&self.listener) {
                Ok(s) => s,
                Err(e) => match e.raw_os_error() {
                    Some(libc::EAGAIN) => break,
                    Some(libc::EINTR | libc::ECONNABORTED | libc::EPROTO) => continue,
                    Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM) => {
                        // Out of descriptors: stop polling the listener until
                        // the next timeout scan instead of spinning on it.
                        let _ = self.listener_enable(false);
                        break;
                    }
                    _ => {
                        eprintln!("http-serve: accept: {e}");
                        break;
                    }
                },
            };
            self.http.c.accepted += 1;
            let mut live =
                Live { sock, conn: self.http.accept(self.now), interest: 0, wrote: false, nodelay: false };
            let idx = match self.free.pop() {
                Some(i) => i as usize,
                None => {
                    self.slots.push(Slot { gen: 0, conn: None });
                    self.slots.len() - 1
                }
            };
            let token = (u64::from(self.slots[idx].gen) << 32) | idx as u64;
            // The request often arrives with (or right after) the
            // handshake: try it now rather than after another wait. A
            // short-lived connection may be served and closed right here,
            // never registered with epoll (one system call less each).
            let mut flow = self.on_readable(&mut live, token);
            if matches!(flow, Flow::Keep) && live.interest == 0 {
                self.set_interest(&mut live, token, event::IN | event::RDHUP);
            }
            if matches!(flow, Flow::Keep) && live.interest == 0 {
                flow = Flow::Close; // could not register it
            }
            match flow {
                Flow::Keep => self.slots[idx].conn = Some(live),
                Flow::Close => {
                    self.http.c.closed += 1;
                    self.release(idx);
                }
            }
        }
    }

    fn release(&mut self, idx: usize) {
        let s = &mut self.slots[idx];
        s.conn = None;
        s.gen = s.gen.wrapping_add(1);
        self.free.push(idx as u32);
    }

    fn on_event(&mut self, tok: u64, ev: u32) {
        let idx = (tok & 0xffff_ffff) as usize;
        let gen = (tok >> 32) as u32;
        let Some(slot) = self.slots.get_mut(idx) else { return };
        if slot.gen != gen {
            return;
        }
        let Some(mut live) = slot.conn.take() else { return };
        let mut flow = Flow::Keep;
        if ev & event::ERR != 0 {
            self.http.c.resets += 1;
            flow = Flow::Close;
        }
        if matches!(flow, Flow::Keep) && ev & (event::IN | event::HUP | event::RDHUP) != 0 {
            flow = self.on_readable(&mut live, tok);
        }
        if matches!(flow, Flow::Keep) && ev & event::OUT != 0 {
            self.http.on_writable(&mut live.conn);
            flow = self.drive(&mut live, tok);
        }
        match flow {
            Flow::Keep => self.slots[idx].conn = Some(live),
            Flow::Close => {
                self.http.c.closed += 1;
                self.release(idx);
            }
        }
    }

    /// Reads what the state machine wants read, then performs its actions.
    fn on_readable(&mut self, live: &mut Live, tok: u64) -> Flow {
        match self.http.read_mode(&live.conn) {
            // Backpressure: the client is not reading our answers.
            ReadMode::Hold => Flow::Keep,
            ReadMode::Drain => {
                // Drain and discard until EOF (or the linger deadline).
                for _ in 0..16 {
                    match (&live.sock).read(&mut self.scratch) {
                        Ok(0) => return Flow::Close,
                        Ok(n) => self.http.on_readable(&mut live.conn, &self.scratch[..n], self.now),
                        Err(e) if would_block(&e) => return Flow::Keep,
                        Err(_) => return Flow::Close,
                    }
                }
                Flow::Keep
            }
            ReadMode::Serve => {
                let n = match (&live.sock).read(&mut self.scratch) {
                    Ok(0) => return Flow::Close,
                    Ok(n) => n,
                    Err(e) if would_block(&e) => return Flow::Keep,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => return Flow::Keep,
                    Err(_) => {
                        self.http.c.resets += 1;
                        return Flow::Close;
                    }
                };
                self.http.on_readable(&mut live.conn, &self.scratch[..n], self.now);
                self.drive(live, tok)
            }
        }
    }

    /// Performs the state machine's actions until it waits or closes.
    fn drive(&mut self, live: &mut Live, tok: u64) -> Flow {
        let now = self.now;
        loop {
            // Known once the request is parsed (before its answer is polled).
            let keep_alive = live.conn.keep_alive();
            let action = self.http.poll(&mut live.conn, now);
            if matches!(action, Action::Write(_) | Action::SendFile { .. })
                && live.wrote
                && !live.nodelay
                && keep_alive
            {
                // A further write on a kept connection (the next answer, or
                // a body after its head) must not wait for Nagle. Only then:
                // a short-lived connection's one write never needs the
                // system call (bench/http-perf: 0.6 setsockopt per request).
                let _ = live.sock.set_nodelay(true);
                live.nodelay = true;
            }
            match action {
                Action::Write(b) => match (&live.sock).write(b) {
                    Ok(n) => {
                        live.wrote = true;
                        self.http.sent(&mut live.conn, n, now)
                    }
                    Err(e) if would_block(&e) => self.http.blocked(&mut live.conn, now),
                    Err(_) => self.http.failed(&mut live.conn),
                },
                Action::SendFile { body, offset, len } => {
                    let mut off = offset as i64;
                    let sent = match body {
                        Body::File(f) => rsskit_linux::fs::sendfile(&live.sock, f, &mut off, len),
                        // Cached bytes are small enough to go inline; this
                        // only serves a range of them if one is ever asked.
                        Body::Mem(b) => {
                            let from = (offset as usize).min(b.len());
                            (&live.sock).write(&b[from..(from + len).min(b.len())])
                        }
                    };
                    match sent {
                        Ok(n) => {
                            live.wrote = true;
                            self.http.sent(&mut live.conn, n, now)
                        }
                        Err(e) if would_block(&e) => self.http.blocked(&mut live.conn, now),
                        Err(_) => self.http.failed(&mut live.conn),
                    }
                }
                Action::ShutdownWrite => {
                    let _ = live.sock.shutdown(Shutdown::Write);
                }
                Action::Wait(Interest::Read) => {
                    self.set_interest(live, tok, event::IN | event::RDHUP);
                    return Flow::Keep;
                }
                Action::Wait(Interest::Write) => {
                    self.set_interest(live, tok, event::OUT);
                    return Flow::Keep;
                }
                Action::Close => return Flow::Close,
            }
        }
    }

    fn set_interest(&mut self, live: &mut Live, tok: u64, ev: u32) {
        if live.interest == ev {
            return;
        }
        let fd = live.sock.as_raw_fd();
        let ok = if live.interest == 0 { self.ep.add(fd, ev, tok) } else { self.ep.modify(fd, ev, tok) };
        if ok.is_ok() {
            live.interest = ev;
        }
    }

    /// Timeouts; re-enabling a listener paused for lack of descriptors.
    fn scan(&mut self) {
        if !self.listener_on {
            let _ = self.listener_enable(true);
        }
        let now = self.now;
        for idx in 0..self.slots.len() {
            let Some(live) = self.slots[idx].conn.as_mut() else { continue };
            let close = match self.http.expire(&mut live.conn, now) {
                Expiry::Keep => false,
                Expiry::Close => true,
                Expiry::Answer(b) => {
                    let n = (&live.sock).write(b).ok();
                    self.http.answered(n);
                    true
                }
            };
            if close {
                self.http.c.closed += 1;
                self.release(idx);
            }
        }
    }
}
