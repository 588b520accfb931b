//! HTTP/1.1 request parsing glue over `httparse`, with strict limits: what
//! the server accepts (GET and HEAD, origin-form targets, HTTP/1.0 and 1.1)
//! and the status for everything else.
#![forbid(unsafe_code)]

/// Most header lines in a request.
pub const MAX_HEADERS: usize = 64;
/// Most bytes in a request head (request line and headers).
pub const MAX_HEAD_BYTES: usize = 8192;
/// Largest request body the server reads (and discards).
pub const MAX_BODY: usize = 1 << 20;

/// Methods that exist but that this server does not allow (405).
const KNOWN: [&str; 7] = ["POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE", "CONNECT"];

/// The methods the server answers (others are refused with 405 or 501).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// `GET`: the object and its body.
    Get,
    /// `HEAD`: the headers a `GET` would get, no body.
    Head,
}

/// A request the server will answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request<'a> {
    /// `GET` or `HEAD`.
    pub method: Method,
    /// The target as sent (origin-form: path and query).
    pub target: &'a str,
    /// Whether the connection stays open after the response.
    pub keep_alive: bool,
    /// Bytes of the request head.
    pub head_len: usize,
    /// Content-Length of the request body (read and discarded).
    pub body_len: usize,
}

impl Request<'_> {
    /// The target without its query.
    pub fn path(&self) -> &str {
        self.target.split_once('?').map_or(self.target, |(p, _)| p)
    }
}

/// A request refused: status and a short reason (also the body).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refusal {
    /// The HTTP status to answer with.
    pub status: u16,
    /// Why, in a few words (also the response body).
    pub reason: &'static str,
}

fn refuse(status: u16, reason: &'static str) -> Parsed<'static> {
    Parsed::Refused(Refusal { status, reason })
}

/// Outcome of [`parse`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parsed<'a> {
    /// More bytes needed.
    Partial,
    /// A whole request head: answer it.
    Done(Request<'a>),
    /// Answer with this status and close the connection.
    Refused(Refusal),
}

/// Parses one request from the start of `buf`.
pub fn parse(buf: &[u8]) -> Parsed<'_> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    let head_len = match req.parse(buf) {
        Ok(httparse::Status::Partial) => {
            if buf.len() >= MAX_HEAD_BYTES {
                return refuse(431, "request header fields too large");
            }
            return Parsed::Partial;
        }
        Ok(httparse::Status::Complete(n)) => n,
        Err(httparse::Error::TooManyHeaders) => return refuse(431, "too many header fields"),
        Err(httparse::Error::Version) => return refuse(505, "HTTP version not supported"),
        Err(_) => return refuse(400, "malformed request"),
    };
    if head_len > MAX_HEAD_BYTES {
        return refuse(431, "request header fields too large");
    }
    let (Some(m), Some(target), Some(version)) = (req.method, req.path, req.version) else {
        return refuse(400, "malformed request");
    };
    let method = match m {
        "GET" => Method::Get,
        "HEAD" => Method::Head,
        m if KNOWN.contains(&m) => return refuse(405, "method not allowed"),
        _ => return refuse(501, "method not implemented"),
    };
    if !target.starts_with('/') {
        return refuse(400, "request target must be an absolute path");
    }
    let mut keep_alive = version == 1;
    let mut hosts = 0;
    let mut body_len: Option<usize> = None;
    for h in req.headers.iter() {
        if h.name.eq_ignore_ascii_case("host") {
            hosts += 1;
        } else if h.name.eq_ignore_ascii_case("connection") {
            let Ok(v) = std::str::from_utf8(h.value) else { return refuse(400, "bad Connection header") };
            for tok in v.split(',').map(str::trim) {
                if tok.eq_ignore_ascii_case("close") {
                    keep_alive = false;
                } else if tok.eq_ignore_ascii_case("keep-alive") && version == 0 {
                    keep_alive = true;
                }
            }
        } else if h.name.eq_ignore_ascii_case("content-length") {
            let v = std::str::from_utf8(h.value)
                .ok()
                .map(str::trim)
                .filter(|v| !v.is_empty() && v.len() <= 18 && v.bytes().all(|b| b.is_ascii_digit()));
            let Some(n) = v.and_then(|v| v.parse::<usize>().ok()) else {
                return refuse(400, "bad Content-Length");
            };
            if body_len.is_some_and(|b| b != n) {
                return refuse(400, "conflicting Content-Length");
            }
            if n > MAX_BODY {
                return refuse(413, "request body too large");
            }
            body_len = Some(n);
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            return refuse(501, "transfer codings not implemented");
        }
    }
    if hosts > 1 || (version == 1 && hosts == 0) {
        return refuse(400, "exactly one Host header is required");
    }
    Parsed::Done(Request { method, target, keep_alive, head_len, body_len: body_len.unwrap_or(0) })
}

/// Reason phrase of a status the server sends.
pub fn reason_phrase(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        413 => "Content Too Large",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        503 => "Service Unavailable",
        505 => "HTTP Version Not Supported",
        _ => "Unknown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(b: &[u8]) -> u16 {
        match parse(b) {
            Parsed::Refused(r) => r.status,
            Parsed::Done(_) => 200,
            Parsed::Partial => 0,
        }
    }

    #[test]
    fn good_requests() {
        let b = b"GET /a?b=c HTTP/1.1\r\nHost: x\r\n\r\nGET";
        let Parsed::Done(r) = parse(b) else { panic!() };
        assert_eq!((r.method, r.target, r.path(), r.keep_alive), (Method::Get, "/a?b=c", "/a", true));
        assert_eq!(r.head_len, b.len() - 3);
        let Parsed::Done(r) = parse(b"HEAD / HTTP/1.0\r\n\r\n") else { panic!() };
        assert!(!r.keep_alive && r.method == Method::Head);
        let Parsed::Done(r) = parse(b"GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n") else { panic!() };
        assert!(r.keep_alive);
        let Parsed::Done(r) = parse(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: foo, close\r\n\r\n") else {
            panic!()
        };
        assert!(!r.keep_alive);
        let Parsed::Done(r) = parse(b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello") else {
            panic!()
        };
        assert_eq!(r.body_len, 5);
    }

    #[test]
    fn refusals() {
        assert_eq!(status(b"GET / HTTP/1.1\r\nHost: x\r\n"), 0);
        assert_eq!(status(b"GET / HTTP/1.1\r\n\r\n"), 400, "no Host");
        assert_eq!(status(b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n"), 400);
        assert_eq!(status(b"G@T / HTTP/1.1\r\nHost: x\r\n\r\n"), 400);
        assert_eq!(status(b"GET / HTTP/1.1\r\nHo st: x\r\n\r\n"), 400);
        assert_eq!(status(b"\x00\x01\x02\r\n\r\n"), 400);
        assert_eq!(status(b"GET http://x/ HTTP/1.1\r\nHost: x\r\n\r\n"), 400);
        assert_eq!(status(b"POST / HTTP/1.1\r\nHost: x\r\n\r\n"), 405);
        assert_eq!(status(b"BREW / HTTP/1.1\r\nHost: x\r\n\r\n"), 501);
        assert_eq!(status(b"GET / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"), 501);
        assert_eq!(status(b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n"), 400);
        assert_eq!(
            status(b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n"),
            400
        );
        assert_eq!(status(b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999\r\n\r\n"), 413);
        let mut many = b"GET / HTTP/1.1\r\nHost: x\r\n".to_vec();
        for i in 0..MAX_HEADERS {
            many.extend_from_slice(format!("X-{i}: y\r\n").as_bytes());
        }
        many.extend_from_slice(b"\r\n");
        assert_eq!(status(&many), 431);
        let mut long = b"GET / HTTP/1.1\r\nHost: x\r\nX: ".to_vec();
        long.resize(MAX_HEAD_BYTES + 10, b'a');
        assert_eq!(status(&long), 431, "unterminated and over the limit");
        long.extend_from_slice(b"\r\n\r\n");
        assert_eq!(status(&long), 431, "complete but over the limit");
    }
}
