//! Link events from rtnetlink: a `NETLINK_ROUTE` socket subscribed to
//! `RTMGRP_LINK` sees links appear, go away, and change flags (up/down) in
//! the caller's network namespace. Blocking with a timeout; the parsing is
//! pure ([`parse`]). Hand-written over libc/socket2 because it is one bind
//! and a fixed header layout: a netlink crate would bring an async stack
//! or a large message model for two message types.

use socket2::{Domain, Protocol, Socket, Type};
use std::io::{self, Read as _};
use std::os::fd::AsRawFd;
use std::time::Duration;

const RTM_NEWLINK: u16 = 16;
const RTM_DELLINK: u16 = 17;
const IFLA_IFNAME: u16 = 3;
const NLMSG_HDR: usize = 16;
const IFINFOMSG: usize = 16;

/// What happened to a link.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LinkEvent {
    /// `RTM_NEWLINK`: a new link or a change of one (flags, name...).
    New {
        /// Its ifindex.
        ifindex: u32,
        /// Its name (`IFLA_IFNAME`), when present and valid.
        name: Option<String>,
        /// `IFF_UP` is set.
        up: bool,
    },
    /// `RTM_DELLINK`: the link is gone.
    Del {
        /// Its ifindex.
        ifindex: u32,
    },
    /// The socket's buffer overflowed (`ENOBUFS`): events were lost,
    /// check everything.
    Overflow,
}

/// Parses the messages of one datagram; ignores anything else.
pub fn parse(mut b: &[u8]) -> Vec<LinkEvent> {
    let mut out = Vec::new();
    while b.len() >= NLMSG_HDR {
        let len = u32::from_ne_bytes([b[0], b[1], b[2], b[3]]) as usize;
        let ty = u16::from_ne_bytes([b[4], b[5]]);
        if len < NLMSG_HDR || len > b.len() {
            break;
        }
        let body = &b[NLMSG_HDR..len];
        if (ty == RTM_NEWLINK || ty == RTM_DELLINK) && body.len() >= IFINFOMSG {
            let ifindex = i32::from_ne_bytes([body[4], body[5], body[6], body[7]]) as u32;
            let flags = u32::from_ne_bytes([body[8], body[9], body[10], body[11]]);
            if ty == RTM_DELLINK {
                out.push(LinkEvent::Del { ifindex });
            } else {
                let mut name = None;
                let mut a = &body[IFINFOMSG..];
                while a.len() >= 4 {
                    let alen = u16::from_ne_bytes([a[0], a[1]]) as usize;
                    let aty = u16::from_ne_bytes([a[2], a[3]]) & 0x3fff;
                    if alen < 4 || alen > a.len() {
                        break;
                    }
                    if aty == IFLA_IFNAME {
                        let v = &a[4..alen];
                        let v = &v[..v.iter().position(|&c| c == 0).unwrap_or(v.len())];
                        name = std::str::from_utf8(v)
                            .ok()
                            .filter(|n| crate::netdev::valid_name(n))
                            .map(str::to_string);
                    }
                    a = &a[((alen + 3) & !3).min(a.len())..];
                }
                out.push(LinkEvent::New { ifindex, name, up: flags & libc::IFF_UP as u32 != 0 });
            }
        }
        b = &b[((len + 3) & !3).min(b.len())..];
    }
    out
}

/// A socket subscribed to link events.
pub struct LinkWatch {
    sock: Socket,
    buf: Vec<u8>,
}

impl LinkWatch {
    /// Opens and subscribes (`RTMGRP_LINK`).
    pub fn open() -> io::Result<LinkWatch> {
        let sock = Socket::new(
            Domain::from(libc::AF_NETLINK),
            Type::RAW,
            Some(Protocol::from(libc::NETLINK_ROUTE)),
        )?;
        // SAFETY: sockaddr_nl is plain integers; all-zero is valid.
        let mut sa: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
        sa.nl_family = libc::AF_NETLINK as u16;
        sa.nl_groups = libc::RTMGRP_LINK as u32;
        // SAFETY: sa is a live sockaddr_nl and its size is passed; the fd is ours.
        let rc = unsafe {
            libc::bind(
                sock.as_raw_fd(),
                (&sa as *const libc::sockaddr_nl).cast(),
                std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
            )
        };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(LinkWatch { sock, buf: vec![0; 1 << 16] })
    }

    /// Waits at most `timeout` for events (empty on timeout).
    pub fn recv(&mut self, timeout: Duration) -> io::Result<Vec<LinkEvent>> {
        self.sock.set_read_timeout(Some(timeout.max(Duration::from_millis(1))))?;
        match (&self.sock).read(&mut self.buf) {
            Ok(n) => Ok(parse(&self.buf[..n])),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
                ) =>
            {
                Ok(Vec::new())
            }
            Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => Ok(vec![LinkEvent::Overflow]),
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(ty: u16, index: i32, flags: u32, name: Option<&str>) -> Vec<u8> {
        let mut attrs = Vec::new();
        if let Some(n) = name {
            let len = 4 + n.len() + 1;
            attrs.extend_from_slice(&(len as u16).to_ne_bytes());
            attrs.extend_from_slice(&IFLA_IFNAME.to_ne_bytes());
            attrs.extend_from_slice(n.as_bytes());
            attrs.push(0);
            attrs.resize((attrs.len() + 3) & !3, 0);
        }
        let len = NLMSG_HDR + IFINFOMSG + attrs.len();
        let mut m = Vec::new();
        m.extend_from_slice(&(len as u32).to_ne_bytes());
        m.extend_from_slice(&ty.to_ne_bytes());
        m.extend_from_slice(&[0; 10]);
        m.extend_from_slice(&[0, 0, 1, 0]);
        m.extend_from_slice(&index.to_ne_bytes());
        m.extend_from_slice(&flags.to_ne_bytes());
        m.extend_from_slice(&0u32.to_ne_bytes());
        m.extend_from_slice(&attrs);
        m
    }

    #[test]
    fn parses_new_and_del_links() {
        let mut b = msg(RTM_NEWLINK, 7, libc::IFF_UP as u32, Some("veth0"));
        b.extend(msg(RTM_DELLINK, 8, 0, Some("veth1")));
        b.extend(msg(24, 9, 0, None)); // RTM_NEWROUTE: ignored
        b.extend(msg(RTM_NEWLINK, 10, 0, Some("../x")));
        assert_eq!(
            parse(&b),
            vec![
                LinkEvent::New { ifindex: 7, name: Some("veth0".into()), up: true },
                LinkEvent::Del { ifindex: 8 },
                LinkEvent::New { ifindex: 10, name: None, up: false },
            ]
        );
    }

    #[test]
    fn truncated_input_is_no_panic() {
        let b = msg(RTM_NEWLINK, 7, 0, Some("veth0"));
        for n in 0..b.len() {
            let _ = parse(&b[..n]);
        }
        let mut bad = b.clone();
        bad[0] = 0xff; // length past the end
        assert!(parse(&bad).is_empty());
    }
}
