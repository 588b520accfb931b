//! The agent's `/metrics` endpoint: one thread, many clients at once, none
//! able to stall it. Every connection is non-blocking on one epoll set and
//! has a whole-request deadline ([`REQUEST_DEADLINE`] from accept to the
//! last byte of the answer); at most [`MAX_CONNECTIONS`] are open, and a new
//! one past that closes the oldest. So a client sending a byte a second, or
//! thousands of idle ones, cost a Prometheus scrape at most the deadline of
//! the connection in front of it, and stopping takes one wait tick.
//!
//! Written here rather than with an HTTP server crate: the endpoint is one
//! GET route answered with a small text, and what matters is the bound on
//! every client (deadline, cap, eviction), which the small crates leave to
//! the caller (tiny_http reads headers with no deadline). The request is
//! parsed by `httparse`; [`reply`] is the part with no I/O.

use rsskit_linux::epoll::{self, Epoll};
use std::collections::HashMap;
use std::io::{self, Read as _, Write as _};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// From accept to the last byte of the answer.
pub const REQUEST_DEADLINE: Duration = Duration::from_secs(2);
/// Connections open at once; one more closes the oldest.
pub const MAX_CONNECTIONS: usize = 64;
/// A request's bytes; more is a bad request.
const MAX_REQUEST: usize = 8192;
/// The longest wait between looks at the stop flag.
const TICK: Duration = Duration::from_millis(100);
const LISTENER: u64 = u64::MAX;

/// What the bytes of a request so far call for.
#[derive(Debug, PartialEq, Eq)]
pub enum Reply {
    /// Not a whole request yet.
    More,
    /// The whole answer to send, then close.
    Answer(Vec<u8>),
}

/// The answer to the request in `buf` (no I/O): `body` is called only for
/// a `GET /metrics`.
pub fn reply(buf: &[u8], body: &mut dyn FnMut() -> String) -> Reply {
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut req = httparse::Request::new(&mut headers);
    let (status, text, ctype) = match req.parse(buf) {
        Ok(httparse::Status::Complete(_)) => {
            match (req.method, req.path.map(|p| p.split('?').next().unwrap_or(p))) {
                (Some("GET"), Some("/metrics")) => {
                    ("200 OK", body(), "text/plain; version=0.0.4; charset=utf-8")
                }
                (Some("GET"), _) => ("404 Not Found", "only /metrics here\n".into(), "text/plain"),
                _ => ("405 Method Not Allowed", "GET only\n".into(), "text/plain"),
            }
        }
        Ok(httparse::Status::Partial) if buf.len() < MAX_REQUEST => return Reply::More,
        _ => ("400 Bad Request", "bad request\n".into(), "text/plain"),
    };
    Reply::Answer(
        format!(
            "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{text}",
            text.len()
        )
        .into_bytes(),
    )
}

struct Conn {
    stream: TcpStream,
    deadline: Instant,
    request: Vec<u8>,
    /// The answer and how much of it is sent, once known.
    answer: Option<(Vec<u8>, usize)>,
}

/// What a connection needs next.
enum Next {
    Wait,
    Close,
}

impl Conn {
    fn on_ready(&mut self, body: &mut dyn FnMut() -> String) -> Next {
        if self.answer.is_none() {
            let mut chunk = [0u8; 1024];
            loop {
                match self.stream.read(&mut chunk) {
                    Ok(0) => return Next::Close,
                    Ok(n) => {
                        let room = MAX_REQUEST - self.request.len().min(MAX_REQUEST);
                        self.request.extend_from_slice(&chunk[..n.min(room + 1)]);
                        if self.request.len() > MAX_REQUEST {
                            break;
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(_) => return Next::Close,
                }
            }
            match reply(&self.request, body) {
                Reply::More => return Next::Wait,
                Reply::Answer(a) => self.answer = Some((a, 0)),
            }
        }
        let Some((out, sent)) = self.answer.as_mut() else { return Next::Wait };
        while *sent < out.len() {
            match self.stream.write(&out[*sent..]) {
                Ok(0) => return Next::Close,
                Ok(n) => *sent += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Next::Wait,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => return Next::Close,
            }
        }
        Next::Close
    }
}

/// Serves `GET /metrics` with `body()` on `listener` until `stop` is set;
/// returns within a tick (100 ms) of it. `Err` only when the epoll set cannot be made.
pub fn serve(listener: TcpListener, stop: &AtomicBool, mut body: impl FnMut() -> String) -> io::Result<()> {
    listener.set_nonblocking(true)?;
    let mut ep = Epoll::new(MAX_CONNECTIONS + 1)?;
    ep.add(listener.as_raw_fd(), epoll::IN, LISTENER)?;
    let mut conns: HashMap<u64, Conn> = HashMap::new();
    let mut next_token = 0u64;
    let close = |conns: &mut HashMap<u64, Conn>, ep: &Epoll, t: u64| {
        if let Some(c) = conns.remove(&t) {
            let _ = ep.delete(c.stream.as_raw_fd());
        }
    };
    while !stop.load(Ordering::Relaxed) {
        let now = Instant::now();
        let wait = conns.values().map(|c| c.deadline.saturating_duration_since(now)).min().unwrap_or(TICK);
        let n = ep.wait(Some(wait.min(TICK)))?;
        let ready: Vec<(u64, u32)> = (0..n).map(|i| ep.event(i)).collect();
        for (token, _) in ready {
            if token == LISTENER {
                loop {
                    let stream = match listener.accept() {
                        Ok((s, _)) => s,
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                        // ECONNABORTED, EMFILE...: try again on the next event.
                        Err(_) => break,
                    };
                    if conns.len() >= MAX_CONNECTIONS {
                        let oldest = conns.iter().min_by_key(|(_, c)| c.deadline).map(|(t, _)| *t);
                        if let Some(t) = oldest {
                            close(&mut conns, &ep, t);
                        }
                    }
                    if stream.set_nonblocking(true).is_err() {
                        continue;
                    }
                    let t = next_token;
                    next_token += 1;
                    if ep
                        .add(stream.as_raw_fd(), epoll::IN | epoll::OUT | epoll::ET | epoll::RDHUP, t)
                        .is_ok()
                    {
                        let deadline = Instant::now() + REQUEST_DEADLINE;
                        conns.insert(t, Conn { stream, deadline, request: Vec::new(), answer: None });
                    }
                }
                continue;
            }
            let Some(c) = conns.get_mut(&token) else { continue };
            if let Next::Close = c.on_ready(&mut body) {
                close(&mut conns, &ep, token);
            }
        }
        let now = Instant::now();
        let late: Vec<u64> = conns.iter().filter(|(_, c)| c.deadline <= now).map(|(t, _)| *t).collect();
        for t in late {
            close(&mut conns, &ep, t);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn text(r: Reply) -> String {
        match r {
            Reply::Answer(a) => String::from_utf8(a).unwrap(),
            Reply::More => panic!("wanted an answer"),
        }
    }

    #[test]
    fn replies() {
        let calls = std::cell::Cell::new(0);
        let mut body = || {
            calls.set(calls.get() + 1);
            "m 1\n".to_string()
        };
        assert_eq!(reply(b"GET /metrics HTTP/1.1\r\nHost: x\r\n", &mut body), Reply::More);
        let ok = text(reply(b"GET /metrics?x=1 HTTP/1.1\r\n\r\n", &mut body));
        assert!(
            ok.starts_with("HTTP/1.1 200 OK\r\n")
                && ok.ends_with("Content-Length: 4\r\nConnection: close\r\n\r\nm 1\n"),
            "{ok}"
        );
        assert!(text(reply(b"GET / HTTP/1.1\r\n\r\n", &mut body)).starts_with("HTTP/1.1 404"));
        assert!(text(reply(b"POST /metrics HTTP/1.1\r\n\r\n", &mut body)).starts_with("HTTP/1.1 405"));
        assert!(text(reply(b"\x00\x01garbage\r\n\r\n", &mut body)).starts_with("HTTP/1.1 400"));
        let long = [b"GET /metrics HTTP/1.1\r\nX: ".as_slice(), &[b'a'; MAX_REQUEST]].concat();
        assert!(text(reply(&long, &mut body)).starts_with("HTTP/1.1 400"), "an endless request ends");
        assert_eq!(calls.get(), 1, "the body is made only for GET /metrics");
    }

    fn scrape(addr: std::net::SocketAddr) -> (String, Duration) {
        let t = Instant::now();
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        (out, t.elapsed())
    }

    /// Slow and idle clients do not hold up a scrape, and stopping is quick.
    #[test]
    fn slow_and_idle_clients_stall_nothing() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let st = stop.clone();
        let server = std::thread::spawn(move || serve(l, &st, || "rsskit_plans 1\n".to_string()));
        // A client that sends one byte every 200 ms, for longer than the deadline.
        let slow = std::thread::spawn(move || {
            let mut s = TcpStream::connect(addr).unwrap();
            let mut closed_after = None;
            let t = Instant::now();
            for b in b"GET /metrics HTTP/1.1\r\nHost: slowly\r\n\r\n" {
                std::thread::sleep(Duration::from_millis(200));
                if s.write_all(&[*b]).is_err() {
                    closed_after = Some(t.elapsed());
                    break;
                }
            }
            closed_after
        });
        std::thread::sleep(Duration::from_millis(300));
        for _ in 0..3 {
            let (out, took) = scrape(addr);
            assert!(out.ends_with("rsskit_plans 1\n"), "{out}");
            assert!(took < Duration::from_secs(1), "a scrape beside a slow client took {took:?}");
        }
        let closed = slow.join().unwrap().expect("the slow client was cut off");
        assert!(
            closed >= REQUEST_DEADLINE - Duration::from_millis(300)
                && closed < REQUEST_DEADLINE + Duration::from_secs(2),
            "the slow client was cut after {closed:?}"
        );
        // Idle connections, three times the cap: the oldest make way.
        let idle: Vec<TcpStream> =
            (0..MAX_CONNECTIONS * 3).map(|_| TcpStream::connect(addr).unwrap()).collect();
        for _ in 0..3 {
            let (out, took) = scrape(addr);
            assert!(out.ends_with("rsskit_plans 1\n"), "{out}");
            assert!(took < Duration::from_secs(1), "a scrape beside idle clients took {took:?}");
        }
        let t = Instant::now();
        stop.store(true, Ordering::Relaxed);
        server.join().unwrap().unwrap();
        assert!(t.elapsed() < Duration::from_secs(1), "stopping took {:?}", t.elapsed());
        drop(idle);
    }
}
