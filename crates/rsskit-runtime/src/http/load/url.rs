//! `http://HOST[:PORT]/PATH` target URLs (name resolution is the only I/O).

use super::LoadError;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};

/// A parsed `http://HOST[:PORT]/PATH` URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Url {
    /// The target, resolved.
    pub addr: SocketAddr,
    /// Host header value.
    pub host: String,
    /// Path and query (at least `/`).
    pub path: String,
}

/// Parses and resolves an `http://` URL.
pub fn parse_url(s: &str) -> Result<Url, LoadError> {
    let bad = |reason: String| LoadError::Url { url: s.to_string(), reason, source: None };
    let rest = s.strip_prefix("http://").ok_or_else(|| bad("only http:// URLs are supported".into()))?;
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    if authority.is_empty() || authority.contains('@') {
        return Err(bad("expected http://HOST[:PORT]/PATH".into()));
    }
    if path.bytes().any(|b| b <= b' ' || b == 0x7f) {
        return Err(bad("the path has spaces or control characters".into()));
    }
    let port_of = |p: &str| p.parse::<u16>().map_err(|_| bad(format!("bad port '{p}'")));
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let (h, after) = v6.split_once(']').ok_or_else(|| bad("unterminated [IPv6] host".into()))?;
        let port = match after.strip_prefix(':') {
            Some(p) => port_of(p)?,
            None if after.is_empty() => 80,
            None => return Err(bad("junk after the [IPv6] host".into())),
        };
        (h.to_string(), port)
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) => (h.to_string(), port_of(p)?),
            None => (authority.to_string(), 80),
        }
    };
    if port == 0 {
        return Err(bad("port 0".into()));
    }
    let addr = match host.parse::<IpAddr>() {
        Ok(ip) => SocketAddr::new(ip, port),
        Err(_) => (host.as_str(), port)
            .to_socket_addrs()
            .map_err(|e| LoadError::Url {
                url: s.to_string(),
                reason: format!("cannot resolve '{host}'"),
                source: Some(e),
            })?
            .next()
            .ok_or_else(|| bad(format!("'{host}' resolves to no address")))?,
    };
    Ok(Url { addr, host: authority.to_string(), path: path.to_string() })
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn url_errors_name_the_url_and_the_problem() {
        let e = parse_url("http://1.2.3.4:99999/").unwrap_err();
        assert!(matches!(&e, LoadError::Url { url, .. } if url == "http://1.2.3.4:99999/"), "{e:?}");
        assert_eq!(e.to_string(), "url 'http://1.2.3.4:99999/': bad port '99999'");
        let e = parse_url("ftp://x/").unwrap_err();
        assert_eq!(e.to_string(), "url 'ftp://x/': only http:// URLs are supported");
    }

    #[test]
    fn a_failed_resolution_keeps_its_cause() {
        let e = parse_url("http://no-such-host.invalid/").unwrap_err();
        assert!(e.to_string().starts_with("url 'http://no-such-host.invalid/': cannot resolve"), "{e}");
        assert!(std::error::Error::source(&e).is_some_and(|c| c.is::<std::io::Error>()), "{e:?}");
    }
}
