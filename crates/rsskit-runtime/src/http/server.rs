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
//! [`request::parse`]. Refused requests are answered, then the connection
//! is closed gracefully (write side shut, input drained for a moment) so
//! the client reads the answer instead of a reset.

use super::event::{self, Epoll};
use super::files::Root;
use super::request::{self, Method, Parsed, Request};
use super::{http_date, now_ns, unix_secs};
use crate::steer::{self, Steer, SteerSpec, Steering, Transport};
use crate::worker::Workers;
use anyhow::{anyhow, bail, Context, Result};
use rsskit_core::{CpuId, HashConfig, RssKey, RssPolicy};
use rsskit_linux::socket::TcpListenOptions;
use socket2::Socket;
use std::collections::VecDeque;
use std::fs::File;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Largest `/bytes/N`.
pub const MAX_GENERATED: usize = 1 << 30;
/// Bodies up to this size are copied next to their header (one write);
/// larger ones are streamed from the pattern or the file.
const INLINE_BODY: usize = 16 * 1024;
/// The generated body repeats `a..z`; this many bytes of it are kept (a
/// multiple of 26, so the pattern continues across the wrap).
const PATTERN_LEN: usize = 26 * 2521;
/// How long a refused connection is drained before it is closed.
const LINGER: Duration = Duration::from_secs(2);
/// Timeout scan period.
const SCAN_NS: u64 = 250_000_000;
const LISTENER: u64 = u64::MAX;

/// Byte `i` of every generated body.
#[inline]
pub fn pattern_byte(i: usize) -> u8 {
    b'a' + (i % 26) as u8
}

/// What to serve and how.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    pub bind: SocketAddr,
    /// Worker `i` is pinned to `cpus[i]`.
    pub cpus: Vec<usize>,
    pub steer: Steer,
    /// Most connections accepted per wake-up.
    pub accept_batch: usize,
    /// Size of the object at `/`.
    pub object_size: usize,
    /// Largest `/bytes/N`.
    pub max_generated: usize,
    pub root: Option<PathBuf>,
    pub idle_timeout: Duration,
    pub header_timeout: Duration,
    pub backlog: i32,
    /// Key of the `toeplitz` program.
    pub key: RssKey,
    /// `TCP_DEFER_ACCEPT`: wake the listener only once the request arrived.
    pub defer_accept: bool,
    /// Bucket -> CPU from a NIC's table (`--table nic:IF`): see
    /// [`steer::policy_from_table`].
    pub bucket_cpus: Option<Vec<usize>>,
}

impl ServeConfig {
    /// Defaults for everything but the address and CPUs.
    pub fn new(bind: SocketAddr, cpus: Vec<usize>) -> ServeConfig {
        ServeConfig {
            bind,
            cpus,
            steer: Steer::Kernel,
            accept_batch: 32,
            object_size: 1024,
            max_generated: MAX_GENERATED,
            root: None,
            idle_timeout: Duration::from_secs(60),
            header_timeout: Duration::from_secs(10),
            backlog: 4096,
            key: RssKey::microsoft(),
            defer_accept: false,
            bucket_cpus: None,
        }
    }

    pub fn validate(&self) -> Result<()> {
        if self.cpus.is_empty() {
            bail!("no worker CPUs");
        }
        if self.accept_batch == 0 {
            bail!("--accept-batch must be at least 1");
        }
        if self.object_size > self.max_generated {
            bail!(
                "--object-size {} exceeds the largest generated object ({})",
                self.object_size,
                self.max_generated
            );
        }
        if self.idle_timeout.is_zero() || self.header_timeout.is_zero() {
            bail!("timeouts must be positive");
        }
        Ok(())
    }
}

/// Statuses counted separately; anything else is counted as "other".
pub const STATUS_CODES: [u16; 11] = [200, 400, 403, 404, 405, 408, 413, 431, 500, 501, 505];
const NSTATUS: usize = STATUS_CODES.len() + 1;
const NFIELDS: usize = 8 + NSTATUS;

/// One worker's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ServeCounters {
    pub accepted: u64,
    pub closed: u64,
    /// Requests parsed (answered or refused).
    pub requests: u64,
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub timeouts_idle: u64,
    pub timeouts_header: u64,
    /// Connections reset or failed by the peer.
    pub resets: u64,
    /// Responses by status: [`STATUS_CODES`], then "other".
    pub status: [u64; NSTATUS],
}

impl ServeCounters {
    fn to_array(self) -> [u64; NFIELDS] {
        let mut a = [0; NFIELDS];
        a[..8].copy_from_slice(&[
            self.accepted,
            self.closed,
            self.requests,
            self.bytes_in,
            self.bytes_out,
            self.timeouts_idle,
            self.timeouts_header,
            self.resets,
        ]);
        a[8..].copy_from_slice(&self.status);
        a
    }

    fn from_array(a: &[u64; NFIELDS]) -> ServeCounters {
        let mut status = [0; NSTATUS];
        status.copy_from_slice(&a[8..]);
        ServeCounters {
            accepted: a[0],
            closed: a[1],
            requests: a[2],
            bytes_in: a[3],
            bytes_out: a[4],
            timeouts_idle: a[5],
            timeouts_header: a[6],
            resets: a[7],
            status,
        }
    }

    /// All responses sent.
    pub fn responses(&self) -> u64 {
        self.status.iter().sum()
    }

    /// Responses with `code` (0 for "other").
    pub fn with_status(&self, code: u16) -> u64 {
        STATUS_CODES.iter().position(|&c| c == code).map_or(self.status[NSTATUS - 1], |i| self.status[i])
    }

    fn count_status(&mut self, code: u16) {
        let i = STATUS_CODES.iter().position(|&c| c == code).unwrap_or(NSTATUS - 1);
        self.status[i] += 1;
    }

    pub fn add(&mut self, o: &ServeCounters) {
        let (mut a, b) = (self.to_array(), o.to_array());
        for (x, y) in a.iter_mut().zip(b) {
            *x += y;
        }
        *self = ServeCounters::from_array(&a);
    }

    pub fn total<'a>(it: impl IntoIterator<Item = &'a ServeCounters>) -> ServeCounters {
        let mut t = ServeCounters::default();
        for c in it {
            t.add(c);
        }
        t
    }

    /// `{"200": n, ...}` for the statuses seen.
    pub fn status_json(&self) -> serde_json::Value {
        let mut m = serde_json::Map::new();
        for (i, &n) in self.status.iter().enumerate() {
            if n > 0 {
                let k = STATUS_CODES.get(i).map_or("other".to_string(), |c| c.to_string());
                m.insert(k, n.into());
            }
        }
        m.into()
    }

    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "accepted": self.accepted,
            "closed": self.closed,
            "requests": self.requests,
            "responses": self.responses(),
            "status": self.status_json(),
            "bytes_in": self.bytes_in,
            "bytes_out": self.bytes_out,
            "timeouts_idle": self.timeouts_idle,
            "timeouts_header": self.timeouts_header,
            "resets": self.resets,
        })
    }

    /// `200:n 404:n ...` for the statuses seen.
    pub fn status_line(&self) -> String {
        let mut v = Vec::new();
        for (i, &n) in self.status.iter().enumerate() {
            if n > 0 {
                v.push(format!("{}:{n}", STATUS_CODES.get(i).map_or("other".to_string(), |c| c.to_string())));
            }
        }
        if v.is_empty() {
            "-".into()
        } else {
            v.join(" ")
        }
    }
}

/// A worker's counters as the reporting thread sees them: written by the
/// worker alone (relaxed stores), read by anyone.
#[derive(Debug, Default)]
pub struct SharedCounters {
    v: [AtomicU64; NFIELDS],
}

impl SharedCounters {
    fn publish(&self, c: &ServeCounters) {
        for (slot, x) in self.v.iter().zip(c.to_array()) {
            slot.store(x, Ordering::Relaxed);
        }
    }

    pub fn snapshot(&self) -> ServeCounters {
        let mut a = [0; NFIELDS];
        for (x, slot) in a.iter_mut().zip(&self.v) {
            *x = slot.load(Ordering::Relaxed);
        }
        ServeCounters::from_array(&a)
    }
}

/// The server's RSS policy: one worker per entry of `cfg.cpus` (worker `i`
/// on `cpus[i]`), FreeBSD's buckets round-robin over the workers, TCP hashed
/// on the 4-tuple.
pub fn policy(cfg: &ServeConfig) -> Result<RssPolicy> {
    let cpus: Vec<CpuId> = cfg.cpus.iter().map(|&c| CpuId(c as u32)).collect();
    if let Some(t) = &cfg.bucket_cpus {
        return steer::policy_from_table(cfg.key.clone(), HashConfig::default(), &cpus, t);
    }
    RssPolicy::new(cfg.key.clone(), HashConfig::default(), &cpus, None)
        .map_err(|e| anyhow!("bucket table: {e}"))
}

/// Binds the listeners for `cfg` with the runtime's steering
/// ([`steer::build`] over TCP): refuses a port that is already in use
/// (joining someone else's reuseport group would silently share its
/// connections), then binds and listens one socket per worker in worker
/// order (the group's socket index) and attaches the steering program.
pub fn listen(cfg: &ServeConfig) -> Result<Steering> {
    steer::build(&SteerSpec {
        mode: cfg.steer,
        bind: cfg.bind,
        policy: &policy(cfg)?,
        transport: Transport::Tcp(TcpListenOptions {
            reuseport: false,
            backlog: cfg.backlog,
            defer_accept: cfg.defer_accept,
        }),
    })
}

/// Running server.
pub struct Server {
    workers: Workers<ServeCounters>,
    shared: Vec<Arc<SharedCounters>>,
    pub local: SocketAddr,
    pub program_len: Option<usize>,
    pub cpus: Vec<usize>,
    /// `RLIMIT_NOFILE` in force.
    pub nofile: u64,
}

impl Server {
    /// Binds, spawns the pinned workers, and returns once every worker is
    /// pinned and polling its listener.
    pub fn start(cfg: ServeConfig, stop: Arc<AtomicBool>) -> Result<Server> {
        cfg.validate()?;
        let nofile = super::raise_nofile(1 << 18).unwrap_or(0);
        let root = match &cfg.root {
            Some(p) => Some(Arc::new(Root::open(p).with_context(|| format!("--root {}", p.display()))?)),
            None => None,
        };
        let ls = listen(&cfg)?;
        let (local, program_len, cpus) = (ls.local, ls.program_len, cfg.cpus.clone());
        let shared: Vec<Arc<SharedCounters>> = cpus.iter().map(|_| Arc::default()).collect();
        let states: Vec<_> = ls.sockets.into_iter().zip(shared.iter().cloned()).collect();
        let cfg = Arc::new(cfg);
        let workers = Workers::spawn_with_setup(
            &cpus,
            states,
            stop,
            move |_, (listener, counters)| Worker::new(&cfg, root.clone(), listener, counters),
            |ctx, mut w: Worker| w.run(&ctx.stop),
        )?;
        Ok(Server { workers, shared, local, program_len, cpus, nofile })
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
        self.workers.join()
    }
}

/// Output waiting for the socket to drain.
enum Chunk {
    Mem(Vec<u8>, usize),
    /// Generated body bytes `pos..end`.
    Gen(usize, usize),
    /// File bytes `off..end`.
    File(File, i64, i64),
}

struct Conn {
    sock: TcpStream,
    /// Unparsed input (a partial request), only when some is left over.
    pending: Vec<u8>,
    out: VecDeque<Chunk>,
    /// Request body bytes still to discard.
    body_skip: usize,
    /// Close once the output is written.
    close_after: bool,
    /// Input left unread behind the last answered request (drain before close).
    unread: bool,
    /// Input parsing paused until the output drains.
    stalled: bool,
    lingering: bool,
    linger_until: u64,
    /// When the current request head started arriving, or the connection
    /// was accepted (then `pending` is empty until the first byte).
    header_since: Option<u64>,
    last_active: u64,
    /// epoll interest (0: not registered yet).
    interest: u32,
}

struct Slot {
    gen: u32,
    conn: Option<Conn>,
}

enum Flow {
    Keep,
    Close,
}

struct Worker {
    cfg: Arc<ServeConfig>,
    root: Option<Arc<Root>>,
    ep: Epoll,
    listener: Socket,
    listener_on: bool,
    exclusive: bool,
    slots: Vec<Slot>,
    free: Vec<u32>,
    scratch: Vec<u8>,
    staged: Vec<u8>,
    pattern: Vec<u8>,
    events: Vec<(u64, u32)>,
    c: ServeCounters,
    shared: Arc<SharedCounters>,
    date: String,
    date_secs: u64,
    now: u64,
    idle_ns: u64,
    header_ns: u64,
}

fn would_block(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::WouldBlock
}

impl Worker {
    fn new(
        cfg: &Arc<ServeConfig>,
        root: Option<Arc<Root>>,
        listener: Socket,
        shared: Arc<SharedCounters>,
    ) -> Result<Worker> {
        let ep = Epoll::new(512).context("epoll_create1")?;
        let exclusive = cfg.steer == Steer::Shared;
        let w = Worker {
            cfg: cfg.clone(),
            root,
            ep,
            listener,
            listener_on: false,
            exclusive,
            slots: Vec::new(),
            free: Vec::new(),
            scratch: vec![0; 64 * 1024],
            staged: Vec::with_capacity(64 * 1024),
            pattern: (0..PATTERN_LEN).map(pattern_byte).collect(),
            events: Vec::with_capacity(512),
            c: ServeCounters::default(),
            shared,
            date: http_date(unix_secs()),
            date_secs: unix_secs(),
            now: now_ns(),
            idle_ns: cfg.idle_timeout.as_nanos().min(u64::MAX as u128) as u64,
            header_ns: cfg.header_timeout.as_nanos().min(u64::MAX as u128) as u64,
        };
        let mut w = w;
        w.listener_enable(true).context("registering the listener")?;
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
            self.shared.publish(&self.c);
        }
        // Shutdown: close every connection.
        for slot in &mut self.slots {
            if slot.conn.take().is_some() {
                self.c.closed += 1;
            }
        }
        self.shared.publish(&self.c);
        self.c
    }

    fn accept_some(&mut self) {
        let lfd = self.listener.as_raw_fd();
        for _ in 0..self.cfg.accept_batch {
            // SAFETY: null address pointers are allowed; the result is checked.
            let fd = unsafe {
                libc::accept4(
                    lfd,
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                )
            };
            if fd < 0 {
                let e = io::Error::last_os_error();
                match e.raw_os_error() {
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
                }
            }
            // SAFETY: `fd` is a fresh connected socket we now own.
            let sock = unsafe { TcpStream::from_raw_fd(fd) };
            self.c.accepted += 1;
            let conn = Conn {
                sock,
                pending: Vec::new(),
                out: VecDeque::new(),
                body_skip: 0,
                close_after: false,
                unread: false,
                stalled: false,
                lingering: false,
                linger_until: 0,
                // The header timeout runs from accept: a client that never
                // sends a byte must not hold the slot for the idle timeout.
                header_since: Some(self.now),
                last_active: self.now,
                interest: 0,
            };
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
            let mut conn = conn;
            let mut flow = self.on_readable(&mut conn, token);
            if matches!(flow, Flow::Keep) && conn.interest == 0 {
                self.set_interest(&mut conn, token, event::IN | event::RDHUP);
            }
            if matches!(flow, Flow::Keep) && conn.interest == 0 {
                flow = Flow::Close; // could not register it
            }
            if matches!(flow, Flow::Keep) && !conn.close_after {
                // It stays for more requests: answers must not wait for Nagle.
                let _ = conn.sock.set_nodelay(true);
            }
            match flow {
                Flow::Keep => self.slots[idx].conn = Some(conn),
                Flow::Close => {
                    self.c.closed += 1;
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
        let Some(mut conn) = slot.conn.take() else { return };
        let mut flow = Flow::Keep;
        if ev & event::ERR != 0 {
            self.c.resets += 1;
            flow = Flow::Close;
        }
        if matches!(flow, Flow::Keep) && ev & (event::IN | event::HUP | event::RDHUP) != 0 {
            flow = self.on_readable(&mut conn, tok);
        }
        if matches!(flow, Flow::Keep) && ev & event::OUT != 0 {
            flow = self.drive(&mut conn, tok);
        }
        match flow {
            Flow::Keep => self.slots[idx].conn = Some(conn),
            Flow::Close => {
                self.c.closed += 1;
                self.release(idx);
            }
        }
    }

    fn on_readable(&mut self, conn: &mut Conn, tok: u64) -> Flow {
        let mut scratch = std::mem::take(&mut self.scratch);
        let flow = self.read_and_serve(conn, tok, &mut scratch);
        self.scratch = scratch;
        flow
    }

    fn read_and_serve(&mut self, conn: &mut Conn, tok: u64, scratch: &mut [u8]) -> Flow {
        if conn.lingering {
            // Drain and discard until EOF (or the linger deadline).
            for _ in 0..16 {
                match (&conn.sock).read(scratch) {
                    Ok(0) => return Flow::Close,
                    Ok(n) => self.c.bytes_in += n as u64,
                    Err(e) if would_block(&e) => return Flow::Keep,
                    Err(_) => return Flow::Close,
                }
            }
            return Flow::Keep;
        }
        if conn.stalled || !conn.out.is_empty() {
            // Backpressure: the client is not reading our answers.
            return Flow::Keep;
        }
        let n = match (&conn.sock).read(scratch) {
            Ok(0) => return Flow::Close,
            Ok(n) => n,
            Err(e) if would_block(&e) => return Flow::Keep,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => return Flow::Keep,
            Err(_) => {
                self.c.resets += 1;
                return Flow::Close;
            }
        };
        self.c.bytes_in += n as u64;
        conn.last_active = self.now;
        if conn.pending.is_empty() {
            let at = self.process(conn, &scratch[..n]);
            self.keep_rest(conn, &scratch[at..n]);
        } else {
            let mut buf = std::mem::take(&mut conn.pending);
            buf.extend_from_slice(&scratch[..n]);
            let at = self.process(conn, &buf);
            buf.drain(..at);
            let rest = std::mem::take(&mut buf);
            self.keep_rest(conn, &rest);
        }
        self.drive(conn, tok)
    }

    /// Whatever [`Worker::process`] did not consume.
    fn keep_rest(&mut self, conn: &mut Conn, rest: &[u8]) {
        if rest.is_empty() {
            conn.pending.clear();
            return;
        }
        if conn.close_after {
            conn.unread = true;
            conn.pending.clear();
            return;
        }
        conn.pending.clear();
        conn.pending.extend_from_slice(rest);
        if conn.header_since.is_none() && !conn.stalled {
            conn.header_since = Some(self.now);
        }
    }

    /// Answers every complete request at the start of `data` (pipelining);
    /// returns how many bytes it consumed.
    fn process(&mut self, conn: &mut Conn, data: &[u8]) -> usize {
        let mut at = 0;
        loop {
            if conn.body_skip > 0 {
                let k = conn.body_skip.min(data.len() - at);
                at += k;
                conn.body_skip -= k;
                if conn.body_skip > 0 {
                    break;
                }
            }
            if at == data.len() || conn.close_after {
                break;
            }
            if self.staged.len() >= 256 * 1024 || conn.out.len() >= 64 {
                conn.stalled = true;
                break;
            }
            match request::parse(&data[at..]) {
                Parsed::Partial => {
                    if conn.header_since.is_none() {
                        conn.header_since = Some(self.now);
                    }
                    break;
                }
                Parsed::Done(r) => {
                    self.c.requests += 1;
                    conn.header_since = None;
                    at += r.head_len;
                    conn.body_skip = r.body_len;
                    if !r.keep_alive {
                        conn.close_after = true;
                    }
                    self.respond(conn, &r);
                }
                Parsed::Refused(rf) => {
                    self.c.requests += 1;
                    conn.header_since = None;
                    conn.close_after = true;
                    self.error(rf.status, rf.reason, false, false);
                    break;
                }
            }
        }
        at
    }

    fn head(&mut self, status: u16, ctype: &str, len: usize, keep_alive: bool) {
        let secs = unix_secs();
        if secs != self.date_secs {
            self.date = http_date(secs);
            self.date_secs = secs;
        }
        let _ = write!(
            self.staged,
            "HTTP/1.1 {status} {}\r\nServer: rsskit\r\nDate: {}\r\nContent-Type: {ctype}\r\nContent-Length: {len}\r\n{}{}\r\n",
            request::reason_phrase(status),
            self.date,
            if status == 405 { "Allow: GET, HEAD\r\n" } else { "" },
            if keep_alive { "Connection: keep-alive\r\n" } else { "Connection: close\r\n" },
        );
        self.c.count_status(status);
    }

    fn error(&mut self, status: u16, reason: &str, keep_alive: bool, head_only: bool) {
        let body = format!("{status} {reason}\n");
        self.head(status, "text/plain", body.len(), keep_alive);
        if !head_only {
            self.staged.extend_from_slice(body.as_bytes());
        }
    }

    fn respond(&mut self, conn: &mut Conn, r: &Request<'_>) {
        let head_only = r.method == Method::Head;
        let ka = r.keep_alive;
        let path = r.path();
        let gen_len = if path == "/" {
            Some(Ok(self.cfg.object_size))
        } else {
            path.strip_prefix("/bytes/").map(|n| {
                let digits = !n.is_empty() && n.len() <= 12 && n.bytes().all(|b| b.is_ascii_digit());
                match n.parse::<usize>() {
                    Ok(n) if digits && n <= self.cfg.max_generated => Ok(n),
                    _ => Err(()),
                }
            })
        };
        match gen_len {
            Some(Ok(len)) => {
                self.head(200, "application/octet-stream", len, ka);
                if head_only {
                    return;
                }
                if len <= INLINE_BODY {
                    let mut left = len;
                    while left > 0 {
                        let k = left.min(PATTERN_LEN);
                        self.staged.extend_from_slice(&self.pattern[..k]);
                        left -= k;
                    }
                } else {
                    self.stage_to(conn);
                    conn.out.push_back(Chunk::Gen(0, len));
                }
            }
            Some(Err(())) => self.error(400, "bad size in /bytes/N", ka, head_only),
            None => {
                let Some(root) = self.root.clone() else {
                    self.error(404, "not found", ka, head_only);
                    return;
                };
                match root.lookup(path) {
                    Err(e) => {
                        let reason = match e.status() {
                            400 => "bad path",
                            403 => "forbidden",
                            _ => "not found",
                        };
                        self.error(e.status(), reason, ka, head_only);
                    }
                    Ok(mut o) => {
                        let len = o.size as usize;
                        if head_only {
                            self.head(200, o.content_type, len, ka);
                        } else if len <= INLINE_BODY {
                            let start = self.staged.len();
                            self.head(200, o.content_type, len, ka);
                            let body_at = self.staged.len();
                            let ok = (&mut o.file).take(len as u64).read_to_end(&mut self.staged).is_ok()
                                && self.staged.len() - body_at == len;
                            if !ok {
                                // The file changed under us: answer 500 instead.
                                self.staged.truncate(start);
                                self.c.status[0] -= 1;
                                self.error(500, "read error", false, false);
                                conn.close_after = true;
                            }
                        } else {
                            self.head(200, o.content_type, len, ka);
                            self.stage_to(conn);
                            conn.out.push_back(Chunk::File(o.file, 0, len as i64));
                        }
                    }
                }
            }
        }
    }

    /// Moves staged bytes into the connection's queue (to keep order with a
    /// streamed chunk that follows).
    fn stage_to(&mut self, conn: &mut Conn) {
        if !self.staged.is_empty() {
            conn.out.push_back(Chunk::Mem(self.staged.clone(), 0));
            self.staged.clear();
        }
    }

    /// Writes what is staged and queued; resumes parsing a stalled
    /// connection once its output drained; closes when done.
    fn drive(&mut self, conn: &mut Conn, tok: u64) -> Flow {
        loop {
            if let Err(()) = self.flush(conn) {
                self.c.resets += 1;
                return Flow::Close;
            }
            if !conn.out.is_empty() || !conn.stalled {
                break;
            }
            conn.stalled = false;
            let buf = std::mem::take(&mut conn.pending);
            let at = self.process(conn, &buf);
            self.keep_rest(conn, &buf[at..]);
        }
        if conn.out.is_empty() {
            if conn.close_after && !conn.lingering {
                if !conn.unread && conn.pending.is_empty() && conn.body_skip == 0 {
                    return Flow::Close;
                }
                // Shut our side, drain theirs for a moment, then close.
                let _ = conn.sock.shutdown(Shutdown::Write);
                conn.lingering = true;
                conn.linger_until = self.now + LINGER.as_nanos() as u64;
            }
            self.set_interest(conn, tok, event::IN | event::RDHUP);
        } else {
            self.set_interest(conn, tok, event::OUT);
        }
        Flow::Keep
    }

    fn set_interest(&mut self, conn: &mut Conn, tok: u64, ev: u32) {
        if conn.interest == ev {
            return;
        }
        let fd = conn.sock.as_raw_fd();
        let ok = if conn.interest == 0 { self.ep.add(fd, ev, tok) } else { self.ep.modify(fd, ev, tok) };
        if ok.is_ok() {
            conn.interest = ev;
        }
    }

    /// Writes staged bytes, then the queue, until done or the socket is
    /// full. `Err` when the peer is gone.
    fn flush(&mut self, conn: &mut Conn) -> Result<(), ()> {
        if !self.staged.is_empty() {
            if conn.out.is_empty() {
                match (&conn.sock).write(&self.staged) {
                    Ok(n) => {
                        self.c.bytes_out += n as u64;
                        if n < self.staged.len() {
                            conn.out.push_back(Chunk::Mem(self.staged[n..].to_vec(), 0));
                        }
                    }
                    Err(e) if would_block(&e) => conn.out.push_back(Chunk::Mem(self.staged.clone(), 0)),
                    Err(_) => {
                        self.staged.clear();
                        return Err(());
                    }
                }
            } else {
                conn.out.push_back(Chunk::Mem(self.staged.clone(), 0));
            }
            self.staged.clear();
            conn.last_active = self.now;
        }
        let fd = conn.sock.as_raw_fd();
        while let Some(front) = conn.out.front_mut() {
            let done = match front {
                Chunk::Mem(buf, pos) => match (&conn.sock).write(&buf[*pos..]) {
                    Ok(n) => {
                        *pos += n;
                        self.c.bytes_out += n as u64;
                        *pos == buf.len()
                    }
                    Err(e) if would_block(&e) => break,
                    Err(_) => return Err(()),
                },
                Chunk::Gen(pos, end) => {
                    let off = *pos % PATTERN_LEN;
                    let k = (*end - *pos).min(PATTERN_LEN - off);
                    match (&conn.sock).write(&self.pattern[off..off + k]) {
                        Ok(n) => {
                            *pos += n;
                            self.c.bytes_out += n as u64;
                            *pos == *end
                        }
                        Err(e) if would_block(&e) => break,
                        Err(_) => return Err(()),
                    }
                }
                Chunk::File(file, off, end) => {
                    let want = (*end - *off).min(1 << 20) as usize;
                    // SAFETY: both descriptors are live; `off` is a valid
                    // offset the kernel advances.
                    let n = unsafe { libc::sendfile(fd, file.as_raw_fd(), off, want) };
                    if n < 0 {
                        let e = io::Error::last_os_error();
                        if would_block(&e) {
                            break;
                        }
                        return Err(());
                    }
                    if n == 0 {
                        // The file shrank: the promised length cannot be met.
                        return Err(());
                    }
                    self.c.bytes_out += n as u64;
                    *off == *end
                }
            };
            conn.last_active = self.now;
            if done {
                conn.out.pop_front();
            }
        }
        Ok(())
    }

    /// Timeouts; date; re-enabling a listener paused for lack of descriptors.
    fn scan(&mut self) {
        if !self.listener_on {
            let _ = self.listener_enable(true);
        }
        let now = self.now;
        for idx in 0..self.slots.len() {
            let Some(conn) = self.slots[idx].conn.as_mut() else { continue };
            let close = if conn.lingering {
                now > conn.linger_until
            } else if conn.header_since.is_some_and(|t| now.saturating_sub(t) > self.header_ns)
                && conn.pending.is_empty()
            {
                // Not a byte since accept: nothing to answer, just close.
                self.c.timeouts_header += 1;
                true
            } else if conn.header_since.is_some_and(|t| now.saturating_sub(t) > self.header_ns) {
                self.c.timeouts_header += 1;
                self.c.requests += 1;
                let body = b"408 request header timeout\n";
                self.staged.clear();
                let mut tmp = std::mem::take(&mut self.staged);
                let _ = write!(
                    tmp,
                    "HTTP/1.1 408 Request Timeout\r\nServer: rsskit\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                tmp.extend_from_slice(body);
                if let Ok(n) = (&conn.sock).write(&tmp) {
                    self.c.bytes_out += n as u64;
                }
                tmp.clear();
                self.staged = tmp;
                self.c.count_status(408);
                true
            } else if now.saturating_sub(conn.last_active) > self.idle_ns {
                self.c.timeouts_idle += 1;
                true
            } else {
                false
            };
            if close {
                self.c.closed += 1;
                self.release(idx);
            }
        }
    }
}
