//! One connection's request/response state machine, with no I/O: the
//! event loop reports what its socket did (`on_connected`, `on_written`,
//! `on_read`, `on_eof`, errors) with the time, and gets back what to do
//! next ([`Step`]): connect, write [`Conn::pending`], read, or the
//! exchange is over ([`Done`]: the outcome, whether the connection may be
//! reused, and when the next request starts).
//!
//! Idle -> Connecting -> Writing -> Reading -> Idle (keep-alive: Idle ->
//! Writing). One request in flight per connection; an answer has a
//! `Content-Length`, no body (1xx, 204, 304) or runs to the end of the
//! stream. Chunked answers are not supported (counted as `other`).

use std::io::ErrorKind;
use std::sync::Arc;

/// Pause before retrying after a failure, so that a dead target does not
/// spin the CPU.
pub const BACKOFF_NS: u64 = 10_000_000;
/// Longest response head accepted.
pub const MAX_HEAD: usize = 64 * 1024;

/// What all the connections of a worker share.
#[derive(Debug, Clone)]
pub struct Params {
    /// The request, sent as is on every exchange.
    pub request: Arc<[u8]>,
    /// Rate mode: nanoseconds between a connection's scheduled starts.
    pub interval: Option<u64>,
    /// One request per connection.
    pub close: bool,
    /// A request not answered within this fails as a timeout.
    pub timeout_ns: u64,
    /// No request starts at or after this time.
    pub end: u64,
}

/// Where a connection is in its exchange.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum State {
    /// Waiting for its start time (or finished, when `done`).
    #[default]
    Idle,
    /// Connect in progress.
    Connecting,
    /// Writing the request.
    Writing,
    /// Reading the answer.
    Reading,
}

/// Why a request failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fail {
    /// Connection refused.
    Refused,
    /// No complete answer within the timeout.
    Timeout,
    /// Connection reset, broken pipe, or an error while connecting.
    Reset,
    /// The stream ended before the whole answer.
    Short,
    /// Anything else: unparsable or oversized answers, no socket, no port.
    Other,
}

/// How an exchange ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// A whole answer (any status); latency from the request's start
    /// (its scheduled start in rate mode).
    Answer {
        /// The answer's status code.
        status: u16,
        /// From the request's start to the whole answer, nanoseconds.
        latency_ns: u64,
    },
    /// The request failed; see [`Fail`].
    Failed(Fail),
}

/// When the connection's next request starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Now (once the current batch of events is handled), with this
    /// latency origin (earlier than now when behind schedule).
    Now {
        /// The latency origin of the request.
        start: u64,
    },
    /// At this time (a timer).
    At(u64),
    /// Never: the run is over for this connection.
    Finished,
}

/// The end of an exchange.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Done {
    /// How the exchange ended.
    pub outcome: Outcome,
    /// The socket may carry the next request (else close it).
    pub keep: bool,
    /// When the next request on this connection starts.
    pub next: Next,
}

/// What the event loop does next for this connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Open a socket and connect; then `on_connected` (or an error).
    Connect,
    /// Write [`Conn::pending`]; then `on_written` (or `on_write_error`).
    Write,
    /// The request is out. `read_now`: the answer may already be waiting
    /// (edge-triggered readiness would not report it again); false after
    /// one write on an idle keep-alive connection, where the answer can
    /// only come later and wake the loop (saves an `EAGAIN` read).
    Sent {
        /// Whether to try reading at once (see above).
        read_now: bool,
    },
    /// Keep reading; feed the bytes to `on_read` (EOF: `on_eof`).
    Read,
    /// The exchange is over: count it, then act on [`Done::keep`] and [`Done::next`].
    Done(Done),
}

/// One connection's protocol state.
#[derive(Debug, Default)]
pub struct Conn {
    state: State,
    /// Latency origin of the current request.
    start: u64,
    /// When the current request began for real (timeouts).
    began: u64,
    connect_start: u64,
    /// Next scheduled start (rate mode).
    next_sched: u64,
    /// Bytes of the request written.
    wpos: usize,
    /// The current request went out in one write so far on a connection
    /// that was already established.
    one_write: bool,
    head: Vec<u8>,
    head_done: bool,
    remaining: usize,
    until_eof: bool,
    server_close: bool,
    status: u16,
    got_bytes: bool,
    done: bool,
}

impl Conn {
    /// Where the connection is now.
    pub fn state(&self) -> State {
        self.state
    }

    /// No more requests on this connection.
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// Idle and not done: a request may start.
    pub fn startable(&self) -> bool {
        self.state == State::Idle && !self.done
    }

    /// Sets the first scheduled start (the connection's phase).
    pub fn schedule_first(&mut self, at: u64) {
        self.next_sched = at;
    }

    /// The run is over: an idle connection starts nothing more.
    pub fn finish(&mut self) {
        if self.state == State::Idle {
            self.done = true;
        }
    }

    /// The start timer set for `at` fired at `now`: begins a request whose
    /// latency runs from `at` in rate mode (the schedule) and from `now`
    /// in the closed loop. `connected`: an established socket is there.
    pub fn on_timer(&mut self, p: &Params, at: u64, now: u64, connected: bool) -> Option<Step> {
        if !self.startable() {
            return None;
        }
        let start = if p.interval.is_some() { at } else { now };
        Some(self.begin(start, now, connected))
    }

    /// Starts a request at `now` with latency origin `start`.
    pub fn begin(&mut self, start: u64, now: u64, connected: bool) -> Step {
        self.start = start;
        self.began = now;
        self.wpos = 0;
        self.head.clear();
        self.head_done = false;
        self.remaining = 0;
        self.until_eof = false;
        self.server_close = false;
        self.got_bytes = false;
        if connected {
            self.state = State::Writing;
            self.one_write = true;
            Step::Write
        } else {
            self.state = State::Connecting;
            self.connect_start = now;
            Step::Connect
        }
    }

    /// The connection is established: returns the connect time, and the
    /// request is to be written. `readable`: the event that reported the
    /// connect also reported input (an early answer). Without it, an
    /// answer can only arrive after this event and will raise an edge of its
    /// own, so a request sent in one write needs no `EAGAIN` read
    /// (bench/http-perf: 0.9 per short-lived request).
    pub fn on_connected(&mut self, now: u64, readable: bool) -> (u64, Step) {
        self.state = State::Writing;
        self.one_write = !readable;
        (now.saturating_sub(self.connect_start), Step::Write)
    }

    /// The bytes of the request still to write.
    pub fn pending<'a>(&self, p: &'a Params) -> &'a [u8] {
        &p.request[self.wpos.min(p.request.len())..]
    }

    /// `n` bytes of [`Conn::pending`] were written.
    pub fn on_written(&mut self, p: &Params, n: usize) -> Step {
        self.wpos += n;
        if self.wpos >= p.request.len() {
            self.state = State::Reading;
            return Step::Sent { read_now: !self.one_write };
        }
        self.one_write = false;
        Step::Write
    }

    /// The socket took nothing more for now: the rest goes out on a later
    /// writable event, after which the answer may already be waiting.
    pub fn on_write_blocked(&mut self) {
        self.one_write = false;
    }

    /// Bytes of the answer arrived (never empty: the end of the stream is
    /// [`Conn::on_eof`]).
    pub fn on_read(&mut self, p: &Params, data: &[u8], now: u64) -> Step {
        self.got_bytes = true;
        let mut body = data.len();
        if !self.head_done {
            self.head.extend_from_slice(data);
            let mut hs = [httparse::EMPTY_HEADER; 32];
            let mut resp = httparse::Response::new(&mut hs);
            match resp.parse(&self.head) {
                Ok(httparse::Status::Partial) => {
                    if self.head.len() > MAX_HEAD {
                        return Step::Done(self.fail(p, Fail::Other, now));
                    }
                    return Step::Read;
                }
                Ok(httparse::Status::Complete(hl)) => {
                    self.status = resp.code.unwrap_or(0);
                    let mut len = None;
                    let mut chunked = false;
                    for h in resp.headers.iter() {
                        if h.name.eq_ignore_ascii_case("content-length") {
                            len = std::str::from_utf8(h.value)
                                .ok()
                                .and_then(|v| v.trim().parse::<usize>().ok());
                        } else if h.name.eq_ignore_ascii_case("connection") {
                            if h.value.eq_ignore_ascii_case(b"close") {
                                self.server_close = true;
                            }
                        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
                            chunked = true;
                        }
                    }
                    if resp.version == Some(0) {
                        self.server_close = true;
                    }
                    if chunked {
                        return Step::Done(self.fail(p, Fail::Other, now));
                    }
                    let no_body =
                        self.status == 204 || self.status == 304 || (100..200).contains(&self.status);
                    match (len, no_body) {
                        (_, true) => self.remaining = 0,
                        (Some(l), false) => self.remaining = l,
                        (None, false) => self.until_eof = true,
                    }
                    self.head_done = true;
                    body = self.head.len() - hl;
                    self.head.clear();
                }
                Err(_) => return Step::Done(self.fail(p, Fail::Other, now)),
            }
        }
        if !self.until_eof {
            if body > self.remaining {
                // More than announced: the stream is out of step.
                return Step::Done(self.fail(p, Fail::Other, now));
            }
            self.remaining -= body;
            if self.remaining == 0 {
                return Step::Done(self.complete(p, now));
            }
        }
        Step::Read
    }

    /// The peer ended the stream while we read.
    pub fn on_eof(&mut self, p: &Params, now: u64) -> Done {
        if self.head_done && self.until_eof {
            self.complete(p, now)
        } else {
            self.fail(p, Fail::Short, now)
        }
    }

    /// Reading failed.
    pub fn on_read_error(&mut self, p: &Params, now: u64) -> Done {
        self.fail(p, Fail::Reset, now)
    }

    /// Writing failed: refused if the kernel says so and nothing came back
    /// yet in this exchange, else a reset.
    pub fn on_write_error(&mut self, p: &Params, kind: ErrorKind, now: u64) -> Done {
        let why =
            if self.got_bytes || kind != ErrorKind::ConnectionRefused { Fail::Reset } else { Fail::Refused };
        self.fail(p, why, now)
    }

    /// The socket could not be set up or `connect()` failed at once
    /// (`kind`: the error of `connect()`, if that was it).
    pub fn on_open_failed(&mut self, p: &Params, kind: Option<ErrorKind>, now: u64) -> Done {
        let why = if kind == Some(ErrorKind::ConnectionRefused) { Fail::Refused } else { Fail::Other };
        self.fail(p, why, now)
    }

    /// The connection attempt failed (`kind`: the socket's error, if any;
    /// none: a hangup without one).
    pub fn on_connect_error(&mut self, p: &Params, kind: Option<ErrorKind>, now: u64) -> Done {
        let why = if kind == Some(ErrorKind::ConnectionRefused) { Fail::Refused } else { Fail::Reset };
        self.fail(p, why, now)
    }

    /// Error or hangup while the request is being written.
    pub fn on_hangup(&mut self, p: &Params, now: u64) -> Done {
        self.fail(p, Fail::Reset, now)
    }

    /// When the current request times out (none while idle).
    pub fn deadline(&self, p: &Params) -> Option<u64> {
        (self.state != State::Idle).then(|| self.began.saturating_add(p.timeout_ns))
    }

    /// Fails the current request if its time is up at `now`.
    pub fn poll_timeout(&mut self, p: &Params, now: u64) -> Option<Done> {
        if self.state != State::Idle && now.saturating_sub(self.began) > p.timeout_ns {
            return Some(self.fail(p, Fail::Timeout, now));
        }
        None
    }

    /// The run is over with this request still in flight: a timeout.
    pub fn abort(&mut self, p: &Params, now: u64) -> Option<Done> {
        (self.state != State::Idle).then(|| self.fail(p, Fail::Timeout, now))
    }

    fn fail(&mut self, p: &Params, why: Fail, now: u64) -> Done {
        self.state = State::Idle;
        let at = match p.interval {
            Some(iv) => {
                self.next_sched += iv;
                self.next_sched.max(now + BACKOFF_NS)
            }
            None => now + BACKOFF_NS,
        };
        let next = if at >= p.end {
            self.done = true;
            Next::Finished
        } else {
            Next::At(at)
        };
        Done { outcome: Outcome::Failed(why), keep: false, next }
    }

    fn complete(&mut self, p: &Params, now: u64) -> Done {
        self.state = State::Idle;
        let outcome = Outcome::Answer { status: self.status, latency_ns: now.saturating_sub(self.start) };
        let keep = !p.close && !self.server_close && !self.until_eof;
        let next = match p.interval {
            Some(iv) => {
                self.next_sched += iv;
                let at = self.next_sched;
                if at >= p.end {
                    Next::Finished
                } else if at <= now {
                    Next::Now { start: at }
                } else {
                    Next::At(at)
                }
            }
            None if now >= p.end => Next::Finished,
            None => Next::Now { start: now },
        };
        if next == Next::Finished {
            self.done = true;
        }
        Done { outcome, keep, next }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const REQ: &[u8] = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    const OK: &[u8] = b"HTTP/1.1 200 OK\r\nServer: t\r\nContent-Length: 5\r\n\r\nhello";
    const MS: u64 = 1_000_000;

    fn params() -> Params {
        Params {
            request: REQ.into(),
            interval: None,
            close: false,
            timeout_ns: 5_000 * MS,
            end: 1_000_000 * MS,
        }
    }

    /// A connection with its request written on an established socket.
    fn sent(p: &Params, start: u64, now: u64) -> Conn {
        let mut c = Conn::default();
        assert_eq!(c.begin(start, now, true), Step::Write);
        assert_eq!(c.pending(p), REQ);
        assert_eq!(c.on_written(p, REQ.len()), Step::Sent { read_now: false });
        assert_eq!(c.state(), State::Reading);
        c
    }

    fn done(s: Step) -> Done {
        match s {
            Step::Done(d) => d,
            other => panic!("expected the end of the exchange, got {other:?}"),
        }
    }

    #[test]
    fn an_answer_split_at_every_byte_boundary() {
        let p = params();
        let answers: [&[u8]; 3] = [
            OK,
            b"HTTP/1.1 404 Not Found\r\nContent-Length: 3\r\nConnection: close\r\n\r\nno!",
            b"HTTP/1.1 204 No Content\r\nX: y\r\n\r\n",
        ];
        for (a, want_status, want_keep) in
            [(answers[0], 200, true), (answers[1], 404, false), (answers[2], 204, true)]
        {
            for cut in 1..a.len() {
                let mut c = sent(&p, 100, 100);
                assert_eq!(c.on_read(&p, &a[..cut], 150), Step::Read, "cut {cut}");
                let d = done(c.on_read(&p, &a[cut..], 200));
                assert_eq!(d.outcome, Outcome::Answer { status: want_status, latency_ns: 100 }, "cut {cut}");
                assert_eq!(d.keep, want_keep, "cut {cut}");
                assert_eq!(d.next, Next::Now { start: 200 });
                assert_eq!(c.state(), State::Idle);
            }
            // And one byte at a time.
            let mut c = sent(&p, 0, 0);
            for (k, b) in a.iter().enumerate() {
                let s = c.on_read(&p, std::slice::from_ref(b), 7);
                if k + 1 < a.len() {
                    assert_eq!(s, Step::Read, "byte {k}");
                } else {
                    assert_eq!(done(s).outcome, Outcome::Answer { status: want_status, latency_ns: 7 });
                }
            }
        }
    }

    #[test]
    fn an_answer_without_length_runs_to_the_end_of_the_stream() {
        let p = params();
        let a = b"HTTP/1.1 200 OK\r\n\r\nbody until eof";
        for cut in 1..a.len() {
            let mut c = sent(&p, 0, 0);
            assert_eq!(c.on_read(&p, &a[..cut], 1), Step::Read);
            assert_eq!(c.on_read(&p, &a[cut..], 2), Step::Read);
            let d = c.on_eof(&p, 3);
            assert_eq!(d.outcome, Outcome::Answer { status: 200, latency_ns: 3 });
            assert!(!d.keep, "the stream is gone");
        }
    }

    #[test]
    fn keep_alive_unless_someone_says_close() {
        // Keep-alive by default: the next request goes out on the same
        // socket, as one write, with nothing to read before the answer wakes us.
        let p = params();
        let mut c = sent(&p, 0, 0);
        let d = done(c.on_read(&p, OK, 10));
        assert!(d.keep);
        let Next::Now { start } = d.next else { panic!("{:?}", d.next) };
        assert_eq!(c.begin(start, 10, d.keep), Step::Write);
        assert_eq!(c.on_written(&p, REQ.len()), Step::Sent { read_now: false });
        assert_eq!(done(c.on_read(&p, OK, 25)).outcome, Outcome::Answer { status: 200, latency_ns: 15 });
        // --close: never reused.
        let pc = Params { close: true, ..params() };
        let mut c = sent(&pc, 0, 0);
        assert!(!done(c.on_read(&pc, OK, 1)).keep);
        // The server says close, in any case, or answers as HTTP/1.0.
        for a in [
            &b"HTTP/1.1 200 OK\r\nConnection: Close\r\nContent-Length: 0\r\n\r\n"[..],
            b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n",
        ] {
            let mut c = sent(&p, 0, 0);
            assert!(!done(c.on_read(&p, a, 1)).keep, "{}", String::from_utf8_lossy(a));
        }
    }

    #[test]
    fn one_request_in_flight_bytes_beyond_the_answer_are_an_error() {
        // Nothing is pipelined: a second answer in the same read means the
        // stream is out of step with our requests.
        let p = params();
        let mut c = sent(&p, 0, 0);
        let two = [OK, OK].concat();
        let d = done(c.on_read(&p, &two, 1));
        assert_eq!(d.outcome, Outcome::Failed(Fail::Other));
        assert!(!d.keep);
        assert_eq!(d.next, Next::At(1 + BACKOFF_NS));
    }

    #[test]
    fn unsupported_or_broken_answers_fail_as_other() {
        let p = params();
        for a in [
            &b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"[..],
            b"SPDY/9 200 OK\r\n\r\n",
        ] {
            let mut c = sent(&p, 0, 0);
            assert_eq!(done(c.on_read(&p, a, 1)).outcome, Outcome::Failed(Fail::Other));
        }
        // A head that never ends (one endless header line: not a matter
        // of too many headers).
        let mut c = sent(&p, 0, 0);
        assert_eq!(c.on_read(&p, b"HTTP/1.1 200 OK\r\nX-Big: ", 1), Step::Read);
        let filler = vec![b'a'; 4096];
        let (mut last, mut fed) = (Step::Read, 0);
        for _ in 0..(MAX_HEAD / filler.len() + 2) {
            last = c.on_read(&p, &filler, 2);
            fed += filler.len();
            if last != Step::Read {
                break;
            }
        }
        assert_eq!(done(last).outcome, Outcome::Failed(Fail::Other));
        assert!(fed > MAX_HEAD - 4096, "failed only once the head passed the limit: {fed}");
    }

    #[test]
    fn the_end_of_the_stream_before_the_whole_answer_is_short() {
        let p = params();
        for cut in 0..OK.len() {
            let mut c = sent(&p, 0, 0);
            if cut > 0 {
                assert_eq!(c.on_read(&p, &OK[..cut], 1), Step::Read);
            }
            assert_eq!(c.on_eof(&p, 2).outcome, Outcome::Failed(Fail::Short), "cut {cut}");
        }
    }

    #[test]
    fn errors_are_classified_by_phase() {
        let p = params();
        let fresh = |connected| {
            let mut c = Conn::default();
            c.begin(0, 0, connected);
            c
        };
        let r = ErrorKind::ConnectionRefused;
        assert_eq!(fresh(false).on_open_failed(&p, Some(r), 1).outcome, Outcome::Failed(Fail::Refused));
        assert_eq!(fresh(false).on_open_failed(&p, None, 1).outcome, Outcome::Failed(Fail::Other));
        assert_eq!(
            fresh(false).on_open_failed(&p, Some(ErrorKind::AddrNotAvailable), 1).outcome,
            Outcome::Failed(Fail::Other)
        );
        assert_eq!(fresh(false).on_connect_error(&p, Some(r), 1).outcome, Outcome::Failed(Fail::Refused));
        assert_eq!(
            fresh(false).on_connect_error(&p, Some(ErrorKind::TimedOut), 1).outcome,
            Outcome::Failed(Fail::Reset)
        );
        assert_eq!(fresh(false).on_connect_error(&p, None, 1).outcome, Outcome::Failed(Fail::Reset));
        // A reset while writing or reading.
        assert_eq!(
            fresh(true).on_write_error(&p, ErrorKind::ConnectionReset, 1).outcome,
            Outcome::Failed(Fail::Reset)
        );
        assert_eq!(
            fresh(true).on_write_error(&p, ErrorKind::BrokenPipe, 1).outcome,
            Outcome::Failed(Fail::Reset)
        );
        assert_eq!(fresh(true).on_write_error(&p, r, 1).outcome, Outcome::Failed(Fail::Refused));
        assert_eq!(fresh(true).on_hangup(&p, 1).outcome, Outcome::Failed(Fail::Reset));
        let mut c = sent(&p, 0, 0);
        assert_eq!(c.on_read(&p, &OK[..10], 1), Step::Read);
        assert_eq!(c.on_read_error(&p, 2).outcome, Outcome::Failed(Fail::Reset));
        // Every failure closes the socket and backs off.
        let d = fresh(true).on_read_error(&p, 7);
        assert_eq!((d.keep, d.next), (false, Next::At(7 + BACKOFF_NS)));
    }

    #[test]
    fn partial_writes_resume_where_they_stopped() {
        let p = params();
        let mut c = Conn::default();
        assert_eq!(c.begin(0, 0, true), Step::Write);
        assert_eq!(c.on_written(&p, 3), Step::Write);
        assert_eq!(c.pending(&p), &REQ[3..]);
        assert_eq!(c.on_written(&p, 10), Step::Write);
        assert_eq!(c.pending(&p), &REQ[13..]);
        assert_eq!(c.state(), State::Writing);
        // After a partial write the answer may be in already: read at once.
        assert_eq!(c.on_written(&p, REQ.len() - 13), Step::Sent { read_now: true });
        assert!(c.pending(&p).is_empty());
        // A write that would block, then the whole request on the writable event.
        let mut c = Conn::default();
        c.begin(0, 0, true);
        c.on_write_blocked();
        assert_eq!(c.pending(&p), REQ);
        assert_eq!(c.on_written(&p, REQ.len()), Step::Sent { read_now: true });
        // The same after a connect.
        let mut c = Conn::default();
        assert_eq!(c.begin(0, 100, false), Step::Connect);
        assert_eq!(c.state(), State::Connecting);
        assert_eq!(c.on_connected(350, true), (250, Step::Write));
        assert_eq!(c.on_written(&p, REQ.len()), Step::Sent { read_now: true });
        // A connect whose event showed no input: the answer raises its own edge.
        let mut c = Conn::default();
        c.begin(0, 100, false);
        assert_eq!(c.on_connected(350, false), (250, Step::Write));
        assert_eq!(c.on_written(&p, REQ.len()), Step::Sent { read_now: false });
        // ... unless the request needed more than one write.
        let mut c = Conn::default();
        c.begin(0, 100, false);
        c.on_connected(350, false);
        assert_eq!(c.on_written(&p, 3), Step::Write);
        assert_eq!(c.on_written(&p, REQ.len() - 3), Step::Sent { read_now: true });
    }

    #[test]
    fn a_timeout_fires_just_after_the_deadline() {
        let p = Params { timeout_ns: 5_000 * MS, ..params() };
        let mut c = Conn::default();
        assert_eq!(c.deadline(&p), None);
        assert_eq!(c.poll_timeout(&p, u64::MAX / 2), None, "idle connections never time out");
        let t0 = 1_000 * MS;
        c.begin(t0, t0, false);
        assert_eq!(c.deadline(&p), Some(t0 + 5_000 * MS));
        assert_eq!(c.poll_timeout(&p, t0 + 5_000 * MS), None);
        assert_eq!(c.state(), State::Connecting);
        let d = c.poll_timeout(&p, t0 + 5_000 * MS + 1).expect("timed out");
        assert_eq!(d.outcome, Outcome::Failed(Fail::Timeout));
        assert_eq!(d.next, Next::At(t0 + 5_000 * MS + 1 + BACKOFF_NS));
        assert_eq!(c.state(), State::Idle);
        // Counted from when the request began, not from its scheduled start.
        let mut c = Conn::default();
        c.begin(0, t0, true);
        assert_eq!(c.poll_timeout(&p, t0 + 4_000 * MS), None);
        // The end of the run fails whatever is in flight as a timeout.
        assert_eq!(c.abort(&p, t0 + 1).map(|d| d.outcome), Some(Outcome::Failed(Fail::Timeout)));
        assert_eq!(c.abort(&p, t0 + 2), None);
    }

    #[test]
    fn rate_latency_runs_from_the_scheduled_start() {
        // 1 request per ms on this connection; the server stalls 5 ms on
        // the first request. The requests due during the stall start late
        // but their latency counts from their scheduled times
        // (coordinated omission corrected).
        let p = Params { interval: Some(MS), ..params() };
        let t0 = 100 * MS;
        let mut c = Conn::default();
        c.schedule_first(t0);
        // The start timer fires 30 us late: latency still from t0.
        assert_eq!(c.on_timer(&p, t0, t0 + 30_000, false), Some(Step::Connect));
        c.on_connected(t0 + 50_000, true);
        assert_eq!(c.on_written(&p, REQ.len()), Step::Sent { read_now: true });
        let d = done(c.on_read(&p, OK, t0 + 5 * MS));
        assert_eq!(d.outcome, Outcome::Answer { status: 200, latency_ns: 5 * MS });
        // Behind schedule: the next one starts at once, from its due time.
        assert_eq!(d.next, Next::Now { start: t0 + MS });
        let mut now = t0 + 5 * MS;
        let mut lat = Vec::new();
        let mut next = d.next;
        while let Next::Now { start } = next {
            c.begin(start, now, true);
            c.on_written(&p, REQ.len());
            now += 100_000; // 0.1 ms answers once the stall is over
            let d = done(c.on_read(&p, OK, now));
            let Outcome::Answer { latency_ns, .. } = d.outcome else { panic!() };
            lat.push(latency_ns);
            next = d.next;
        }
        // Due at t0+1..t0+5 ms, answered at t0+5.1, 5.2, ...: 4.1, 3.2, 2.3, 1.4, 0.5 ms.
        assert_eq!(lat, vec![4_100_000, 3_200_000, 2_300_000, 1_400_000, 500_000]);
        // Caught up: the next start waits for its time.
        assert_eq!(next, Next::At(t0 + 6 * MS));
        // In the closed loop the latency runs from the actual start.
        let p = params();
        let mut c = Conn::default();
        assert_eq!(c.on_timer(&p, t0, t0 + 30_000, true), Some(Step::Write));
        c.on_written(&p, REQ.len());
        assert_eq!(
            done(c.on_read(&p, OK, t0 + 130_000)).outcome,
            Outcome::Answer { status: 200, latency_ns: 100_000 }
        );
    }

    #[test]
    fn failures_keep_the_schedule_and_back_off() {
        let p = Params { interval: Some(MS), ..params() };
        let mut c = Conn::default();
        c.schedule_first(0);
        c.on_timer(&p, 0, 0, false);
        // Refused at once: the next try is the later of the schedule and the backoff.
        assert_eq!(c.on_open_failed(&p, Some(ErrorKind::ConnectionRefused), 0).next, Next::At(BACKOFF_NS));
        c.on_timer(&p, BACKOFF_NS, BACKOFF_NS, false);
        assert_eq!(c.on_open_failed(&p, None, 20 * MS).next, Next::At(20 * MS + BACKOFF_NS));
    }

    #[test]
    fn nothing_starts_at_or_after_the_end() {
        let p = Params { end: 10 * MS, ..params() };
        let mut c = sent(&p, 0, 0);
        let d = done(c.on_read(&p, OK, 10 * MS));
        assert_eq!(d.next, Next::Finished);
        assert!(c.is_done() && !c.startable());
        assert_eq!(c.on_timer(&p, 11 * MS, 11 * MS, true), None);
        // A failure whose retry would fall after the end.
        let mut c = sent(&p, 0, 0);
        assert_eq!(c.on_read_error(&p, 10 * MS - BACKOFF_NS).next, Next::Finished);
        assert!(c.is_done());
        // Rate mode: the schedule runs out.
        let p = Params { interval: Some(4 * MS), end: 10 * MS, ..params() };
        let mut c = Conn::default();
        c.schedule_first(6 * MS);
        c.on_timer(&p, 6 * MS, 6 * MS, true);
        c.on_written(&p, REQ.len());
        assert_eq!(done(c.on_read(&p, OK, 7 * MS)).next, Next::Finished);
        // The run ends: idle connections are done, busy ones finish first.
        let p = params();
        let mut idle = Conn::default();
        idle.finish();
        assert!(idle.is_done());
        let mut busy = sent(&p, 0, 0);
        busy.finish();
        assert!(!busy.is_done());
    }
}
