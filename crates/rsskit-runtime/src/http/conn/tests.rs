//! The connection state machine driven with byte strings, a fake socket
//! (a byte budget: what it accepts before it "would block") and a fake
//! clock.

use super::*;
use crate::http::files::Opened;
use crate::http::request::MAX_HEAD_BYTES;

const MS: u64 = 1_000_000;

/// An in-memory file: its bytes, and whether reading it fails (it shrank).
#[derive(Debug)]
struct Body {
    data: Vec<u8>,
    short: bool,
}

struct Fake;

impl Files for Fake {
    type Body = Body;

    fn open_file(&self, path: &str) -> Result<Opened<Body>, FileError> {
        let file =
            |n: usize, short: bool| Body { data: (0..n).map(|i| b'A' + (i % 7) as u8).collect(), short };
        let (f, ctype) = match path {
            "/small.txt" => (file(5, false), "text/plain"),
            "/big.bin" => (file(3 * INLINE_BODY + 11, false), "application/octet-stream"),
            "/shrunk.txt" => (file(5, true), "text/plain"),
            "/secret" => return Err(FileError::Forbidden),
            p if p.contains("%") => return Err(FileError::BadPath),
            _ => return Err(FileError::NotFound),
        };
        Ok(Opened { size: f.data.len() as u64, file: f, content_type: ctype })
    }

    fn read_body(&self, body: &mut Body, len: usize, out: &mut Vec<u8>) -> bool {
        if body.short {
            out.extend_from_slice(&body.data[..len / 2]);
            return false;
        }
        out.extend_from_slice(&body.data[..len]);
        true
    }
}

fn cfg() -> ConnConfig {
    ConnConfig {
        object_size: 1000,
        max_generated: 1 << 20,
        idle_ns: 60_000 * MS,
        header_ns: 10_000 * MS,
        linger_ns: 2_000 * MS,
        max_requests: 0,
    }
}

fn http(c: ConnConfig) -> Http<Fake> {
    Http::new(c, Some(Arc::new(Fake)), 784_111_777)
}

/// The peer: what it received, how much more it accepts before the socket
/// is "full", whether our write side was shut.
struct Peer {
    got: Vec<u8>,
    budget: usize,
    /// Most bytes one write takes (a short write beyond).
    per_write: usize,
    shut: bool,
    writes: usize,
}

impl Peer {
    fn new() -> Peer {
        Peer { got: Vec::new(), budget: usize::MAX, per_write: usize::MAX, shut: false, writes: 0 }
    }
}

#[derive(Debug, PartialEq, Eq)]
enum End {
    Wait(Interest),
    Close,
}

/// Performs actions as the shell would, until the machine waits or closes.
fn drive(h: &mut Http<Fake>, c: &mut Conn<Body>, p: &mut Peer, now: u64) -> End {
    for _ in 0..1_000_000 {
        let (k, end) = match h.poll(c, now) {
            Action::Write(b) => {
                assert!(!p.shut, "write after shutdown");
                assert!(!b.is_empty(), "empty write");
                let k = b.len().min(p.budget).min(p.per_write);
                p.got.extend_from_slice(&b[..k]);
                (k, None)
            }
            Action::SendFile { body, offset, len } => {
                assert!(!p.shut, "sendfile after shutdown");
                let k = len.min(p.budget).min(p.per_write);
                let o = offset as usize;
                p.got.extend_from_slice(&body.data[o..o + k]);
                (k, None)
            }
            Action::ShutdownWrite => {
                p.shut = true;
                continue;
            }
            Action::Wait(i) => (0, Some(End::Wait(i))),
            Action::Close => (0, Some(End::Close)),
        };
        if let Some(e) = end {
            return e;
        }
        p.writes += 1;
        if k == 0 {
            h.blocked(c, now);
        } else {
            p.budget -= k.min(p.budget);
            h.sent(c, k, now);
        }
    }
    panic!("the state machine never waits");
}

/// One response: status, head text, body.
type Resp = (u16, String, Vec<u8>);

/// Splits `buf` into responses (`head[i]`: the i-th answered a HEAD).
fn responses(mut buf: &[u8], head: &[bool]) -> Vec<Resp> {
    let mut v = Vec::new();
    while !buf.is_empty() {
        let mut hs = [httparse::EMPTY_HEADER; 16];
        let mut r = httparse::Response::new(&mut hs);
        let httparse::Status::Complete(n) = r.parse(buf).expect("a response") else {
            panic!("partial response")
        };
        let len: usize = r
            .headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case("content-length"))
            .map(|h| std::str::from_utf8(h.value).unwrap().parse().unwrap())
            .expect("Content-Length");
        let is_head = head.get(v.len()).copied().unwrap_or(false);
        let body_len = if is_head { 0 } else { len };
        let text = String::from_utf8(buf[..n].to_vec()).unwrap();
        v.push((r.code.unwrap(), text, buf[n..n + body_len].to_vec()));
        buf = &buf[n + body_len..];
    }
    v
}

fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(pattern_byte).collect()
}

/// Feeds `chunks` at `now`, driving after each as the shell does.
fn feed(h: &mut Http<Fake>, c: &mut Conn<Body>, p: &mut Peer, chunks: &[&[u8]], now: u64) -> End {
    let mut end = End::Wait(Interest::Read);
    for ch in chunks {
        assert_eq!(h.read_mode(c), ReadMode::Serve);
        h.on_readable(c, ch, now);
        end = drive(h, c, p, now);
    }
    end
}

fn exchange(req: &[u8]) -> (Vec<u8>, End, ServeCounters) {
    let (got, end, c, _) = exchange_conn(req);
    (got, end, c)
}

/// Also: (keep-alive, lingering, write side shut) at the end.
fn exchange_conn(req: &[u8]) -> (Vec<u8>, End, ServeCounters, (bool, bool, bool)) {
    let mut h = http(cfg());
    let mut c = h.accept(0);
    let mut p = Peer::new();
    let end = feed(&mut h, &mut c, &mut p, &[req], MS);
    (p.got, end, h.c, (c.keep_alive(), c.lingering(), p.shut))
}

const PIPELINE: &[u8] = b"GET /bytes/3 HTTP/1.1\r\nHost: x\r\n\r\n\
HEAD / HTTP/1.1\r\nHost: x\r\n\r\n\
GET /small.txt?q=1 HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\nbody\
GET /bytes/20000 HTTP/1.1\r\nHost: x\r\n\r\n\
GET /big.bin HTTP/1.1\r\nHost: x\r\n\r\n\
GET /bytes/0 HTTP/1.1\r\nHost: x\r\n\r\n";

fn check_pipeline(got: &[u8]) {
    let r = responses(got, &[false, true]);
    assert_eq!(r.len(), 6, "{}", String::from_utf8_lossy(got));
    assert!(r.iter().all(|x| x.0 == 200 && x.1.contains("Connection: keep-alive")));
    assert_eq!(r[0].2, b"abc");
    assert!(r[1].1.contains("Content-Length: 1000\r\n") && r[1].2.is_empty(), "HEAD: length, no body");
    assert_eq!(r[2].2, b"ABCDE");
    assert!(r[2].1.contains("Content-Type: text/plain"));
    assert_eq!(r[3].2, pattern(20000), "streamed generated body");
    assert_eq!(r[4].2, Fake.open_file("/big.bin").unwrap().file.data, "sent file");
    assert!(r[5].2.is_empty() && r[5].1.contains("Content-Length: 0\r\n"));
    assert!(r[0].1.contains("Date: Sun, 06 Nov 1994 08:49:37 GMT\r\n"));
}

#[test]
fn pipelined_requests_are_answered_in_order() {
    let (got, end, c) = exchange(PIPELINE);
    assert_eq!(end, End::Wait(Interest::Read));
    check_pipeline(&got);
    assert_eq!((c.requests, c.with_status(200)), (6, 6));
    assert_eq!(c.bytes_in, PIPELINE.len() as u64);
    assert_eq!(c.bytes_out, got.len() as u64);
}

#[test]
fn a_request_split_at_every_byte() {
    let (whole, _, _) = exchange(PIPELINE);
    for at in 1..PIPELINE.len() {
        let mut h = http(cfg());
        let mut c = h.accept(0);
        let mut p = Peer::new();
        let end = feed(&mut h, &mut c, &mut p, &[&PIPELINE[..at], &PIPELINE[at..]], MS);
        assert_eq!(end, End::Wait(Interest::Read), "split at {at}");
        assert_eq!(p.got, whole, "split at {at}");
        assert_eq!(h.c.requests, 6, "split at {at}");
    }
    // And one byte at a time.
    let mut h = http(cfg());
    let mut c = h.accept(0);
    let mut p = Peer::new();
    let bytes: Vec<&[u8]> = PIPELINE.chunks(1).collect();
    feed(&mut h, &mut c, &mut p, &bytes, MS);
    assert_eq!(p.got, whole);
}

#[test]
fn partial_writes_are_resumed() {
    let (whole, _, _) = exchange(PIPELINE);
    for per_write in [1, 7, 4096, 65536] {
        let mut h = http(cfg());
        let mut c = h.accept(0);
        let mut p = Peer::new();
        p.per_write = per_write;
        p.budget = 5000;
        h.on_readable(&mut c, PIPELINE, MS);
        let mut rounds = 0;
        // The socket fills: wait for writable, then resume where it stopped.
        while drive(&mut h, &mut c, &mut p, MS) == End::Wait(Interest::Write) {
            assert_eq!(h.read_mode(&c), ReadMode::Hold, "no reading while answers wait");
            p.budget = 5000;
            h.on_writable(&mut c);
            rounds += 1;
        }
        assert!(rounds >= whole.len() / 5000, "{rounds} rounds");
        assert_eq!(p.got, whole, "per_write {per_write}");
        assert_eq!(h.read_mode(&c), ReadMode::Serve);
        assert_eq!(h.c.bytes_out, whole.len() as u64);
    }
}

#[test]
fn many_pipelined_requests_stall_and_resume() {
    // More answers than may be staged at once: parsing pauses and resumes
    // as the output drains, all answered, in order.
    let one = b"GET /bytes/10000 HTTP/1.1\r\nHost: x\r\n\r\n";
    let reqs: Vec<u8> = one.iter().copied().cycle().take(one.len() * 60).collect();
    let mut h = http(cfg());
    let mut c = h.accept(0);
    let mut p = Peer::new();
    p.budget = 100_000;
    h.on_readable(&mut c, &reqs, MS);
    assert!(h.c.requests < 60, "staging is bounded");
    while drive(&mut h, &mut c, &mut p, MS) == End::Wait(Interest::Write) {
        p.budget = 100_000;
        h.on_writable(&mut c);
    }
    let r = responses(&p.got, &[]);
    assert_eq!(r.len(), 60);
    assert!(r.iter().all(|x| x.2 == pattern(10000)));
}

#[test]
fn keep_alive_request_limit() {
    let mut cf = cfg();
    cf.max_requests = 2;
    let mut h = http(cf);
    let mut c = h.accept(0);
    let mut p = Peer::new();
    let one = b"GET /bytes/1 HTTP/1.1\r\nHost: x\r\n\r\n";
    assert_eq!(feed(&mut h, &mut c, &mut p, &[one], MS), End::Wait(Interest::Read));
    assert!(c.keep_alive());
    // The second (last allowed) is answered with Connection: close, then
    // the connection closes; the third is never answered.
    let two: Vec<u8> = [&one[..], &one[..]].concat();
    let end = feed(&mut h, &mut c, &mut p, &[&two], 2 * MS);
    let r = responses(&p.got, &[]);
    assert_eq!(r.len(), 2);
    assert!(r[0].1.contains("Connection: keep-alive"));
    assert!(r[1].1.contains("Connection: close"));
    assert!(!c.keep_alive());
    // Unread input behind the last answer: shut our side, drain, then close.
    assert_eq!(end, End::Wait(Interest::Read));
    assert!(p.shut && c.lingering());
    assert_eq!(h.read_mode(&c), ReadMode::Drain);
    assert_eq!(h.c.requests, 2);
}

#[test]
fn close_semantics() {
    let cases: [(&[u8], bool); 5] = [
        (b"GET / HTTP/1.0\r\n\r\n", false),
        (b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", true),
        (b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", false),
        (b"GET / HTTP/1.1\r\nHost: x\r\nConnection: Keep-Alive, Close\r\n\r\n", false),
        (b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", true),
    ];
    for (req, ka) in cases {
        let (got, end, _) = exchange(req);
        let r = responses(&got, &[]);
        let what = String::from_utf8_lossy(req);
        assert_eq!(r.len(), 1, "{what}");
        assert_eq!(r[0].1.contains("Connection: keep-alive"), ka, "{what}");
        assert_eq!(r[0].1.contains("Connection: close"), !ka, "{what}");
        // Nothing unread: a closing connection closes at once, no linger.
        assert_eq!(end, if ka { End::Wait(Interest::Read) } else { End::Close }, "{what}");
    }
    // A request behind a `Connection: close` one is not answered.
    let (got, end, c) = exchange(b"GET / HTTP/1.0\r\n\r\nGET / HTTP/1.0\r\n\r\n");
    assert_eq!(responses(&got, &[]).len(), 1);
    assert_eq!((end, c.requests), (End::Wait(Interest::Read), 1), "lingers to drain the rest");
}

#[test]
fn error_statuses() {
    let long = {
        let mut v = b"GET / HTTP/1.1\r\nHost: x\r\nX: ".to_vec();
        v.resize(MAX_HEAD_BYTES + 10, b'a');
        v
    };
    let cases: [(&[u8], u16); 11] = [
        (b"G@T / HTTP/1.1\r\nHost: x\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\n\r\n", 400),
        (b"GET /bytes/12x HTTP/1.1\r\nHost: x\r\n\r\n", 400),
        (b"GET /bytes/99999999 HTTP/1.1\r\nHost: x\r\n\r\n", 400),
        (b"GET /a%zz HTTP/1.1\r\nHost: x\r\n\r\n", 400),
        (b"GET /secret HTTP/1.1\r\nHost: x\r\n\r\n", 403),
        (b"GET /nope HTTP/1.1\r\nHost: x\r\n\r\n", 404),
        (b"DELETE / HTTP/1.1\r\nHost: x\r\n\r\n", 405),
        (&long, 431),
        (b"BREW / HTTP/1.1\r\nHost: x\r\n\r\n", 501),
        (b"GET / HTTP/2.0\r\nHost: x\r\n\r\n", 505),
    ];
    for (req, status) in cases {
        let (got, end, c, state) = exchange_conn(req);
        let what = String::from_utf8_lossy(&req[..req.len().min(40)]).into_owned();
        let r = responses(&got, &[]);
        assert_eq!(r.len(), 1, "{what}");
        assert_eq!(r[0].0, status, "{what}");
        assert!(r[0].2.starts_with(format!("{status} ").as_bytes()), "{what}: body names the status");
        assert_eq!(c.with_status(status), 1, "{what}");
        assert_eq!(r[0].1.contains("Allow: GET, HEAD\r\n"), status == 405, "{what}");
        // A refused request is left unread behind its answer: the connection
        // shuts its write side and drains before closing. File and size
        // errors answer a parsed request and keep the connection.
        let refused =
            ![403, 404].contains(&status) && !req.starts_with(b"GET /bytes/") && !req.starts_with(b"GET /a%");
        assert_eq!(end, End::Wait(Interest::Read), "{what}");
        let want = if refused { (false, true, true) } else { (true, false, false) };
        assert_eq!(state, want, "{what}: (keep-alive, lingering, shut)");
    }
    // HEAD of an error: the head only.
    let (got, _, _) = exchange(b"HEAD /nope HTTP/1.1\r\nHost: x\r\n\r\n");
    let r = responses(&got, &[true]);
    assert_eq!((r[0].0, r[0].2.len()), (404, 0));
    assert!(r[0].1.contains("Content-Length: 14\r\n"), "the GET's length: {}", r[0].1);
    // Without a root every file is 404.
    let mut h: Http<Fake> = Http::new(cfg(), None, 0);
    let mut c = h.accept(0);
    let mut p = Peer::new();
    feed(&mut h, &mut c, &mut p, &[b"GET /small.txt HTTP/1.1\r\nHost: x\r\n\r\n"], MS);
    assert_eq!(responses(&p.got, &[])[0].0, 404);
}

#[test]
fn a_file_that_shrank_is_a_500_and_a_close() {
    let (got, end, c) = exchange(b"GET /shrunk.txt HTTP/1.1\r\nHost: x\r\n\r\n");
    let r = responses(&got, &[]);
    assert_eq!((r.len(), r[0].0, end), (1, 500, End::Close));
    assert_eq!((c.with_status(200), c.with_status(500)), (0, 1), "the 200 is taken back");
}

#[test]
fn head_has_no_body() {
    for (path, len) in
        [("/", 1000), ("/bytes/50000", 50000), ("/small.txt", 5), ("/big.bin", 3 * INLINE_BODY + 11)]
    {
        let req = format!("HEAD {path} HTTP/1.1\r\nHost: x\r\n\r\nGET /bytes/2 HTTP/1.1\r\nHost: x\r\n\r\n");
        let (got, end, _) = exchange(req.as_bytes());
        let r = responses(&got, &[true]);
        assert_eq!(r.len(), 2, "{path}");
        assert!(r[0].1.contains(&format!("Content-Length: {len}\r\n")), "{path}");
        assert!(r[0].2.is_empty(), "{path}");
        assert_eq!(r[1].2, b"ab", "{path}: the next response is framed right");
        assert_eq!(end, End::Wait(Interest::Read));
    }
}

#[test]
fn header_timeout_fires_at_the_right_time() {
    let h_ns = cfg().header_ns;
    // Silent from accept: closed without an answer.
    let mut h = http(cfg());
    let mut c = h.accept(100);
    assert_eq!(h.expire(&mut c, 100 + h_ns), Expiry::Keep);
    assert_eq!(h.expire(&mut c, 100 + h_ns + 1), Expiry::Close);
    assert_eq!((h.c.timeouts_header, h.c.requests, h.c.responses()), (1, 0, 0));
    // Part of a head, even with bytes trickling in (activity does not
    // extend the header timeout): a 408, then close.
    let mut h = http(cfg());
    let mut c = h.accept(100);
    let mut p = Peer::new();
    for (i, b) in b"GET / HT".iter().enumerate() {
        feed(&mut h, &mut c, &mut p, &[&[*b]], 100 + i as u64 * (h_ns / 10));
    }
    assert!(p.got.is_empty());
    assert_eq!(h.expire(&mut c, 100 + h_ns), Expiry::Keep);
    let Expiry::Answer(a) = h.expire(&mut c, 100 + h_ns + 1) else { panic!("no 408") };
    let r = responses(a, &[]);
    assert_eq!((r[0].0, r[0].1.contains("Connection: close")), (408, true));
    let n = a.len();
    h.answered(Some(n));
    assert_eq!((h.c.timeouts_header, h.c.with_status(408), h.c.bytes_out), (1, 1, n as u64));
    // After an answer, the clock restarts with the next head's first byte.
    let mut h = http(cfg());
    let mut c = h.accept(0);
    let mut p = Peer::new();
    feed(&mut h, &mut c, &mut p, &[b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"], 5);
    assert_eq!(h.expire(&mut c, 5 + h_ns + 1), Expiry::Keep, "idle, not reading a head");
    feed(&mut h, &mut c, &mut p, &[b"GET"], 1000);
    assert_eq!(h.expire(&mut c, 1000 + h_ns), Expiry::Keep);
    assert!(matches!(h.expire(&mut c, 1000 + h_ns + 1), Expiry::Answer(_)));
}

#[test]
fn idle_timeout_fires_at_the_right_time() {
    let idle = cfg().idle_ns;
    let mut h = http(cfg());
    let mut c = h.accept(0);
    let mut p = Peer::new();
    feed(&mut h, &mut c, &mut p, &[b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"], 7);
    assert_eq!(h.expire(&mut c, 7 + idle), Expiry::Keep);
    // Activity (the next request, at 50) moves the deadline.
    feed(&mut h, &mut c, &mut p, &[b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"], 50);
    assert_eq!(h.expire(&mut c, 7 + idle + 1), Expiry::Keep);
    assert_eq!(h.expire(&mut c, 50 + idle), Expiry::Keep);
    assert_eq!(h.expire(&mut c, 50 + idle + 1), Expiry::Close);
    assert_eq!((h.c.timeouts_idle, h.c.timeouts_header), (1, 0));
    // A blocked writer counts as idle from its last progress.
    let mut h = http(cfg());
    let mut c = h.accept(0);
    let mut p = Peer::new();
    p.budget = 10;
    assert_eq!(
        feed(&mut h, &mut c, &mut p, &[b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"], 9),
        End::Wait(Interest::Write)
    );
    assert_eq!(h.expire(&mut c, 9 + idle), Expiry::Keep);
    assert_eq!(h.expire(&mut c, 9 + idle + 1), Expiry::Close);
}

#[test]
fn refused_connection_lingers_then_closes() {
    let linger = cfg().linger_ns;
    let mut h = http(cfg());
    let mut c = h.accept(0);
    let mut p = Peer::new();
    // A refused request with more input behind it: answer, shut, drain.
    let end = feed(&mut h, &mut c, &mut p, &[b"POST / HTTP/1.1\r\nHost: x\r\n\r\nmore"], 10);
    assert_eq!(end, End::Wait(Interest::Read));
    assert!(p.shut);
    assert_eq!(responses(&p.got, &[])[0].0, 405);
    assert_eq!(h.read_mode(&c), ReadMode::Drain);
    let before = h.c.bytes_in;
    h.on_readable(&mut c, b"still talking", 20);
    assert_eq!(h.c.bytes_in, before + 13, "drained bytes are counted");
    assert_eq!(drive(&mut h, &mut c, &mut p, 20), End::Wait(Interest::Read), "and not answered");
    assert_eq!(h.c.requests, 1);
    assert_eq!(h.expire(&mut c, 10 + linger), Expiry::Keep);
    assert_eq!(h.expire(&mut c, 10 + linger + 1), Expiry::Close);
    assert_eq!(h.c.timeouts_header + h.c.timeouts_idle, 0, "a linger end is not a timeout");
}

#[test]
fn request_bodies_are_skipped_across_reads() {
    let mut h = http(cfg());
    let mut c = h.accept(0);
    let mut p = Peer::new();
    let chunks: [&[u8]; 4] = [
        b"GET /bytes/1 HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n012",
        b"3456",
        b"789GET /bytes/2 HTTP/1.1\r\nHo",
        b"st: x\r\n\r\n",
    ];
    feed(&mut h, &mut c, &mut p, &chunks, MS);
    let r = responses(&p.got, &[]);
    assert_eq!(r.iter().map(|x| x.2.clone()).collect::<Vec<_>>(), [b"a".to_vec(), b"ab".to_vec()]);
}

#[test]
fn a_failed_write_closes_and_counts_a_reset() {
    let mut h = http(cfg());
    let mut c = h.accept(0);
    h.on_readable(&mut c, b"GET /bytes/50000 HTTP/1.1\r\nHost: x\r\n\r\n", 1);
    assert!(matches!(h.poll(&mut c, 1), Action::Write(_)));
    h.failed(&mut c);
    assert!(matches!(h.poll(&mut c, 1), Action::Close));
    assert_eq!(h.c.resets, 1);
    // The staging buffer is left empty for the next connection.
    let mut c2 = h.accept(2);
    assert!(matches!(h.poll(&mut c2, 2), Action::Wait(Interest::Read)));
    // A zero-byte send (a file that shrank under sendfile) is a failure too.
    let mut c3 = h.accept(3);
    h.on_readable(&mut c3, b"GET /big.bin HTTP/1.1\r\nHost: x\r\n\r\n", 3);
    let mut p = Peer::new();
    p.budget = 0;
    assert_eq!(drive(&mut h, &mut c3, &mut p, 3), End::Wait(Interest::Write));
    h.on_writable(&mut c3);
    let Action::Write(head) = h.poll(&mut c3, 4) else { panic!("the head first") };
    let n = head.len();
    h.sent(&mut c3, n, 4);
    assert!(matches!(h.poll(&mut c3, 4), Action::SendFile { offset: 0, .. }));
    h.sent(&mut c3, 0, 4);
    assert!(matches!(h.poll(&mut c3, 4), Action::Close));
    assert_eq!(h.c.resets, 2);
}
