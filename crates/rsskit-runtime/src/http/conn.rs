//! One HTTP/1.1 connection as a sans-I/O state machine: bytes in, actions
//! out, time passed in. The server's event loop ([`super::server`]) is the
//! shell that performs the actions on a socket; the tests here drive it with
//! byte strings and a fake clock.
//!
//! Per connection ([`Conn`]) and per worker ([`Http`]: configuration, the
//! generated-body pattern, the date, the counters, and the staging buffer
//! responses are written into before they are sent):
//!
//! - [`Http::read_mode`]: whether the shell should read now (`Serve`),
//!   read and discard (`Drain`, a refused connection lingering), or not read
//!   (`Hold`, back-pressure: the client is not reading our answers).
//! - [`Http::on_readable`]: bytes read. Complete requests are answered (in
//!   order, pipelining), a partial one is kept.
//! - [`Http::poll`]: the next [`Action`]: write bytes, send a file range,
//!   shut the write side, wait (for reading or writing), or close. The shell
//!   reports the outcome: [`Http::sent`], [`Http::blocked`] (would block),
//!   [`Http::failed`] (peer gone); and [`Http::on_writable`] when the socket
//!   drains.
//! - [`Http::expire`]: header, idle and linger timeouts at `now`.
//!
//! Routes: `/` (the object of `object_size` bytes), `/bytes/N`, and files
//! from a [`Files`] source. Bodies up to [`INLINE_BODY`] are copied next to
//! their header (one write); larger ones are streamed from the pattern or
//! sent from the file.
#![forbid(unsafe_code)]

use super::counters::ServeCounters;
use super::files::{FileError, Files};
use super::http_date;
use super::request::{self, Method, Parsed, Request};
use std::collections::VecDeque;
use std::io::Write;
use std::sync::Arc;

/// Bodies up to this size are copied next to their header (one write);
/// larger ones are streamed from the pattern or the file.
pub const INLINE_BODY: usize = 16 * 1024;
/// The generated body repeats `a..z`; this many bytes of it are kept (a
/// multiple of 26, so the pattern continues across the wrap).
const PATTERN_LEN: usize = 26 * 2521;
/// Parsing pauses (until the output drains) once this much is staged...
const STALL_STAGED: usize = 256 * 1024;
/// ... or this many chunks are queued.
const STALL_CHUNKS: usize = 64;
/// Most bytes one `sendfile` action asks for.
const SENDFILE_MAX: u64 = 1 << 20;

/// Byte `i` of every generated body.
#[inline]
pub fn pattern_byte(i: usize) -> u8 {
    b'a' + (i % 26) as u8
}

/// The state machine's settings (times in nanoseconds of the shell's
/// monotonic clock).
#[derive(Debug, Clone)]
pub struct ConnConfig {
    /// Size of the object at `/`.
    pub object_size: usize,
    /// Largest `/bytes/N`.
    pub max_generated: usize,
    /// A connection with nothing to do for longer than this is closed.
    pub idle_ns: u64,
    /// A request head (or, from accept, the first byte) must arrive within this.
    pub header_ns: u64,
    /// A refused connection is drained this long before it is closed.
    pub linger_ns: u64,
    /// Requests per connection; the last one is answered with
    /// `Connection: close` (0: no limit).
    pub max_requests: u64,
}

/// Output waiting for the socket.
enum Chunk<B> {
    Mem(Vec<u8>, usize),
    /// Generated body bytes `pos..end`.
    Gen(usize, usize),
    /// File bytes `off..end`.
    File(B, u64, u64),
}

/// One connection's protocol state (no socket: the shell keeps that).
pub struct Conn<B> {
    /// Unparsed input (a partial request), only when some is left over.
    pending: Vec<u8>,
    out: VecDeque<Chunk<B>>,
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
    /// Requests parsed on this connection.
    requests: u64,
    /// The last write would have blocked: wait until writable.
    write_blocked: bool,
    /// The peer is gone (write error): close.
    failed: bool,
}

impl<B> Conn<B> {
    /// Whether the connection stays open after what is queued (for
    /// `TCP_NODELAY`: answers on a kept connection must not wait for Nagle).
    pub fn keep_alive(&self) -> bool {
        !self.close_after
    }

    /// Whether the connection is draining before its close (its answers are sent).
    pub fn lingering(&self) -> bool {
        self.lingering
    }
}

/// What the shell does next for a connection.
pub enum Action<'a, B> {
    /// Write these bytes, then report [`Http::sent`], [`Http::blocked`] or [`Http::failed`].
    Write(&'a [u8]),
    /// Send up to `len` bytes of `body` from `offset`, then report as for `Write`.
    SendFile {
        /// The file.
        body: &'a B,
        /// Where to start, bytes.
        offset: u64,
        /// Most bytes to send.
        len: usize,
    },
    /// Shut the write side (the answer is out; the input is drained a
    /// moment so the client reads the answer rather than a reset), then poll again.
    ShutdownWrite,
    /// Nothing to do until the socket is ready for this.
    Wait(Interest),
    /// Close the connection.
    Close,
}

impl<B> std::fmt::Debug for Action<'_, B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Action::Write(b) => write!(f, "Write({} bytes)", b.len()),
            Action::SendFile { offset, len, .. } => write!(f, "SendFile {{ offset: {offset}, len: {len} }}"),
            Action::ShutdownWrite => write!(f, "ShutdownWrite"),
            Action::Wait(i) => write!(f, "Wait({i:?})"),
            Action::Close => write!(f, "Close"),
        }
    }
}

/// What a connection waits for before its next action.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Interest {
    /// Bytes to read (or EOF).
    Read,
    /// Room in the send buffer.
    Write,
}

/// Whether to read from the socket now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadMode {
    /// Read and pass the bytes to [`Http::on_readable`].
    Serve,
    /// Read and pass them on too (they are counted and discarded); close at EOF.
    Drain,
    /// Do not read: output is pending (back-pressure).
    Hold,
}

/// Outcome of [`Http::expire`].
#[derive(Debug, PartialEq, Eq)]
pub enum Expiry<'a> {
    /// Not expired: leave it.
    Keep,
    /// Expired with nothing worth answering: close it.
    Close,
    /// Try to write this answer once (a 408), report it with
    /// [`Http::answered`], then close.
    Answer(&'a [u8]),
}

/// A worker's HTTP state: shared by its connections, one at a time.
pub struct Http<F: Files> {
    cfg: ConnConfig,
    files: Option<Arc<F>>,
    /// Responses are written here; the shell's next write sends them.
    /// Empty between calls for different connections.
    staged: Vec<u8>,
    pattern: Vec<u8>,
    date: String,
    date_secs: u64,
    /// Counters (the shell counts `accepted` and `closed`).
    pub c: ServeCounters,
}

impl<F: Files> Http<F> {
    /// `wall_secs`: seconds since the epoch, for the `Date` header.
    pub fn new(cfg: ConnConfig, files: Option<Arc<F>>, wall_secs: u64) -> Http<F> {
        Http {
            cfg,
            files,
            staged: Vec::with_capacity(64 * 1024),
            pattern: (0..PATTERN_LEN).map(pattern_byte).collect(),
            date: http_date(wall_secs),
            date_secs: wall_secs,
            c: ServeCounters::default(),
        }
    }

    /// The wall clock for `Date` (the shell sets it once per wake-up).
    pub fn set_wall_clock(&mut self, secs: u64) {
        if secs != self.date_secs {
            self.date = http_date(secs);
            self.date_secs = secs;
        }
    }

    /// A new connection accepted at `now`. The header timeout runs from
    /// here: a client that never sends a byte must not hold the slot for
    /// the idle timeout.
    pub fn accept(&self, now: u64) -> Conn<F::Body> {
        Conn {
            pending: Vec::new(),
            out: VecDeque::new(),
            body_skip: 0,
            close_after: false,
            unread: false,
            stalled: false,
            lingering: false,
            linger_until: 0,
            header_since: Some(now),
            last_active: now,
            requests: 0,
            write_blocked: false,
            failed: false,
        }
    }

    /// Whether the shell should read `conn`'s socket now.
    pub fn read_mode(&self, conn: &Conn<F::Body>) -> ReadMode {
        if conn.lingering {
            ReadMode::Drain
        } else if conn.stalled || !conn.out.is_empty() || conn.write_blocked {
            ReadMode::Hold
        } else {
            ReadMode::Serve
        }
    }

    /// Bytes read from the connection at `now`: answers every complete
    /// request (the answers wait in the output for [`Http::poll`]).
    pub fn on_readable(&mut self, conn: &mut Conn<F::Body>, data: &[u8], now: u64) {
        self.c.bytes_in += data.len() as u64;
        if conn.lingering {
            return; // drained and discarded
        }
        conn.last_active = now;
        if self.read_mode(conn) == ReadMode::Hold {
            // Read against the advice: keep it for when the output drains.
            conn.pending.extend_from_slice(data);
            conn.stalled = true;
            return;
        }
        if conn.pending.is_empty() {
            let at = self.process(conn, data, now);
            self.keep_rest(conn, &data[at..], now);
        } else {
            let mut buf = std::mem::take(&mut conn.pending);
            buf.extend_from_slice(data);
            let at = self.process(conn, &buf, now);
            buf.drain(..at);
            self.keep_rest(conn, &buf, now);
        }
    }

    /// Whatever [`Http::process`] did not consume.
    fn keep_rest(&mut self, conn: &mut Conn<F::Body>, rest: &[u8], now: u64) {
        conn.pending.clear();
        if rest.is_empty() {
            return;
        }
        if conn.close_after {
            conn.unread = true;
            return;
        }
        conn.pending.extend_from_slice(rest);
        if conn.header_since.is_none() && !conn.stalled {
            conn.header_since = Some(now);
        }
    }

    /// Answers every complete request at the start of `data` (pipelining);
    /// returns how many bytes it consumed.
    fn process(&mut self, conn: &mut Conn<F::Body>, data: &[u8], now: u64) -> usize {
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
            if self.staged.len() >= STALL_STAGED || conn.out.len() >= STALL_CHUNKS {
                conn.stalled = true;
                break;
            }
            match request::parse(&data[at..]) {
                Parsed::Partial => {
                    if conn.header_since.is_none() {
                        conn.header_since = Some(now);
                    }
                    break;
                }
                Parsed::Done(r) => {
                    self.c.requests += 1;
                    conn.requests += 1;
                    conn.header_since = None;
                    at += r.head_len;
                    conn.body_skip = r.body_len;
                    let limit = self.cfg.max_requests > 0 && conn.requests >= self.cfg.max_requests;
                    let ka = r.keep_alive && !limit;
                    if !ka {
                        conn.close_after = true;
                    }
                    self.respond(conn, &r, ka);
                }
                Parsed::Refused(rf) => {
                    self.c.requests += 1;
                    conn.requests += 1;
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

    fn respond(&mut self, conn: &mut Conn<F::Body>, r: &Request<'_>, ka: bool) {
        let head_only = r.method == Method::Head;
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
                let Some(files) = self.files.clone() else {
                    self.error(404, "not found", ka, head_only);
                    return;
                };
                match files.open_file(path) {
                    Err(e) => {
                        let reason = match e {
                            FileError::BadPath => "bad path",
                            FileError::Forbidden => "forbidden",
                            FileError::NotFound => "not found",
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
                            if !files.read_body(&mut o.file, len, &mut self.staged) {
                                // The file changed under us: answer 500 instead.
                                self.staged.truncate(start);
                                self.c.uncount_status(200);
                                self.error(500, "read error", false, false);
                                conn.close_after = true;
                            }
                        } else {
                            self.head(200, o.content_type, len, ka);
                            self.stage_to(conn);
                            conn.out.push_back(Chunk::File(o.file, 0, len as u64));
                        }
                    }
                }
            }
        }
    }

    /// Moves staged bytes into the connection's queue (to keep order with a
    /// streamed chunk that follows).
    fn stage_to(&mut self, conn: &mut Conn<F::Body>) {
        if !self.staged.is_empty() {
            conn.out.push_back(Chunk::Mem(self.staged.clone(), 0));
            self.staged.clear();
        }
    }

    /// The next thing to do for `conn`. Resumes parsing a stalled
    /// connection once its output drained; decides the close.
    pub fn poll<'a>(&'a mut self, conn: &'a mut Conn<F::Body>, now: u64) -> Action<'a, F::Body> {
        enum Next {
            Staged,
            Front,
            Shut,
            Wait(Interest),
            Close,
        }
        let next = loop {
            if conn.failed {
                break Next::Close;
            }
            if conn.write_blocked {
                break Next::Wait(Interest::Write);
            }
            if !self.staged.is_empty() {
                if conn.out.is_empty() {
                    break Next::Staged;
                }
                conn.out.push_back(Chunk::Mem(self.staged.clone(), 0));
                self.staged.clear();
                conn.last_active = now;
            }
            if !conn.out.is_empty() {
                break Next::Front;
            }
            if conn.stalled {
                conn.stalled = false;
                let buf = std::mem::take(&mut conn.pending);
                let at = self.process(conn, &buf, now);
                self.keep_rest(conn, &buf[at..], now);
                continue;
            }
            if conn.close_after && !conn.lingering {
                if !conn.unread && conn.pending.is_empty() && conn.body_skip == 0 {
                    break Next::Close;
                }
                conn.lingering = true;
                conn.linger_until = now.saturating_add(self.cfg.linger_ns);
                break Next::Shut;
            }
            break Next::Wait(Interest::Read);
        };
        match next {
            Next::Staged => Action::Write(&self.staged),
            Next::Front => match conn.out.front() {
                Some(Chunk::Mem(buf, pos)) => Action::Write(&buf[*pos..]),
                Some(Chunk::Gen(pos, end)) => {
                    let off = *pos % PATTERN_LEN;
                    let k = (*end - *pos).min(PATTERN_LEN - off);
                    Action::Write(&self.pattern[off..off + k])
                }
                Some(Chunk::File(body, off, end)) => {
                    Action::SendFile { body, offset: *off, len: (*end - *off).min(SENDFILE_MAX) as usize }
                }
                None => Action::Wait(Interest::Read),
            },
            Next::Shut => Action::ShutdownWrite,
            Next::Wait(i) => Action::Wait(i),
            Next::Close => Action::Close,
        }
    }

    /// The last `Write` or `SendFile` action sent `n` bytes (0: the peer or
    /// the file is gone, as [`Http::failed`]).
    pub fn sent(&mut self, conn: &mut Conn<F::Body>, n: usize, now: u64) {
        if n == 0 {
            self.failed(conn);
            return;
        }
        self.c.bytes_out += n as u64;
        conn.last_active = now;
        if !self.staged.is_empty() {
            // The staged bytes went first (poll only offers them with an empty queue).
            if n < self.staged.len() {
                conn.out.push_back(Chunk::Mem(self.staged[n..].to_vec(), 0));
            }
            self.staged.clear();
            return;
        }
        let done = match conn.out.front_mut() {
            Some(Chunk::Mem(buf, pos)) => {
                *pos += n;
                *pos >= buf.len()
            }
            Some(Chunk::Gen(pos, end)) => {
                *pos += n;
                *pos >= *end
            }
            Some(Chunk::File(_, off, end)) => {
                *off += n as u64;
                *off >= *end
            }
            None => false,
        };
        if done {
            conn.out.pop_front();
        }
    }

    /// The last write would have blocked: keep the output, wait for writable.
    pub fn blocked(&mut self, conn: &mut Conn<F::Body>, now: u64) {
        if !self.staged.is_empty() {
            conn.out.push_back(Chunk::Mem(self.staged.clone(), 0));
            self.staged.clear();
            conn.last_active = now;
        }
        conn.write_blocked = true;
    }

    /// The last write failed (reset, broken pipe): the next poll closes.
    pub fn failed(&mut self, conn: &mut Conn<F::Body>) {
        self.staged.clear();
        if !conn.failed {
            self.c.resets += 1;
        }
        conn.failed = true;
    }

    /// The socket is writable again.
    pub fn on_writable(&mut self, conn: &mut Conn<F::Body>) {
        conn.write_blocked = false;
    }

    /// Timeouts at `now`: the linger deadline of a refused connection, the
    /// header timeout (a 408 if part of a head arrived, a silent close if
    /// nothing did), the idle timeout.
    pub fn expire(&mut self, conn: &mut Conn<F::Body>, now: u64) -> Expiry<'_> {
        if conn.lingering {
            return if now > conn.linger_until { Expiry::Close } else { Expiry::Keep };
        }
        if conn.header_since.is_some_and(|t| now.saturating_sub(t) > self.cfg.header_ns) {
            self.c.timeouts_header += 1;
            if conn.pending.is_empty() {
                // Not a byte since accept (or since the last answer): just close.
                return Expiry::Close;
            }
            self.c.requests += 1;
            let body = b"408 request header timeout\n";
            self.staged.clear();
            let _ = write!(
                self.staged,
                "HTTP/1.1 408 Request Timeout\r\nServer: rsskit\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            self.staged.extend_from_slice(body);
            self.c.count_status(408);
            return Expiry::Answer(&self.staged);
        }
        if now.saturating_sub(conn.last_active) > self.cfg.idle_ns {
            self.c.timeouts_idle += 1;
            return Expiry::Close;
        }
        Expiry::Keep
    }

    /// How much of an [`Expiry::Answer`] was written (`None`: nothing).
    pub fn answered(&mut self, n: Option<usize>) {
        self.c.bytes_out += n.unwrap_or(0) as u64;
        self.staged.clear();
    }
}

#[cfg(test)]
mod tests;
