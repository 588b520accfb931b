//! Generic netlink plumbing shared by the `netdev` ([`crate::netdev_nl`])
//! and `ethtool` ([`crate::ethtool_nl`]) families: family lookup through
//! `nlctrl`, request building, the request/dump loop, and a bounds-checked
//! parser of replies. Every reply is untrusted bytes: each length is
//! checked against what is left, nothing panics, and errors are typed
//! (fuzzed by `fuzz/fuzz_targets/netdev_nl.rs` and `ethtool_nl.rs`).
//!
//! Hand-written over libc/socket2 rather than a netlink crate: see the
//! module comment of [`crate::ethtool_nl`] for what was tried and why.

use socket2::{Domain, Protocol, Socket, Type};
use std::io::{self, Write as _};
use std::os::fd::AsRawFd;
use std::time::Duration;

pub(crate) const NLMSG_HDR: usize = 16;
pub(crate) const GENL_HDR: usize = 4;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
pub(crate) const NLM_F_REQUEST: u16 = 1;
pub(crate) const NLM_F_ACK: u16 = 4;
pub(crate) const NLM_F_DUMP: u16 = 0x300;
/// `NLM_F_CAPPED` / `NLM_F_ACK_TLVS` on an `NLMSG_ERROR` (flags of acks).
const NLM_F_CAPPED: u16 = 0x100;
const NLM_F_ACK_TLVS: u16 = 0x200;
/// `NLMSGERR_ATTR_MSG`: the extended ack's text.
const NLMSGERR_ATTR_MSG: u16 = 1;
/// `NLA_F_NESTED`: set on nests the kernel builds with `nla_nest_start`.
pub(crate) const NLA_F_NESTED: u16 = 0x8000;
const NLA_TYPE_MASK: u16 = 0x3fff;
// <linux/netlink.h> socket options (SOL_NETLINK).
const SOL_NETLINK: libc::c_int = 270;
const NETLINK_CAP_ACK: libc::c_int = 10;
const NETLINK_EXT_ACK: libc::c_int = 11;

pub(crate) const GENL_ID_CTRL: u16 = 0x10;
const CTRL_CMD_GETFAMILY: u8 = 3;
const CTRL_ATTR_FAMILY_ID: u16 = 1;
const CTRL_ATTR_FAMILY_NAME: u16 = 2;
const CTRL_ATTR_OPS: u16 = 6;
const CTRL_ATTR_OP_ID: u16 = 1;

/// Bytes that are not the netlink the kernel sends.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed netlink reply: {0}")]
pub struct ParseError(pub String);

/// One netlink message of a reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    /// A generic netlink message: its command and attributes (type, value).
    Genl {
        /// The message type (the family id).
        family: u16,
        /// `genlmsghdr.cmd`.
        cmd: u8,
        /// Top-level attributes, in order.
        attrs: Vec<(u16, Vec<u8>)>,
    },
    /// `NLMSG_ERROR`: 0 is an acknowledgement, else a negative errno.
    Error(i32),
    /// `NLMSG_DONE`: the end of a dump.
    Done,
}

/// The kernel's refusal of a request: the errno and, where the kernel gave
/// one (extended ack), its message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The positive errno.
    pub errno: i32,
    /// The extended ack message (`NLMSGERR_ATTR_MSG`).
    pub msg: Option<String>,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The ioctl's wording (`ethtool::describe`), so both read alike.
        if self.errno == libc::EOPNOTSUPP {
            write!(f, "operation not supported by the driver")?;
        } else {
            write!(f, "{}", io::Error::from_raw_os_error(self.errno))?;
        }
        if let Some(m) = &self.msg {
            write!(f, " ({m})")?;
        }
        Ok(())
    }
}

/// A socket or reply failure (not the kernel's refusal: see [`Refusal`]).
#[derive(Debug, thiserror::Error)]
pub enum GenlError {
    /// A netlink socket call failed.
    #[error("netlink ({what})")]
    Io {
        /// The step that failed.
        what: &'static str,
        /// The system's error.
        #[source]
        source: io::Error,
    },
    /// The reply did not parse.
    #[error("{what}")]
    Parse {
        /// The request.
        what: &'static str,
        /// What was wrong with it.
        #[source]
        source: ParseError,
    },
}

pub(crate) fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(at..at.checked_add(2)?)?.try_into().ok()?))
}

pub(crate) fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at.checked_add(4)?)?.try_into().ok()?))
}

pub(crate) fn align4(n: usize) -> usize {
    (n + 3) & !3
}

/// The attributes in `b` (type without the nested/byte-order flags, value).
pub fn parse_attrs(mut b: &[u8]) -> Result<Vec<(u16, Vec<u8>)>, ParseError> {
    let mut out = Vec::new();
    while !b.is_empty() {
        let (Some(len), Some(ty)) = (u16_at(b, 0), u16_at(b, 2)) else {
            return Err(ParseError(format!("{} trailing bytes, not an attribute", b.len())));
        };
        let len = len as usize;
        if len < 4 || len > b.len() {
            return Err(ParseError(format!("attribute length {len} with {} bytes left", b.len())));
        }
        out.push((ty & NLA_TYPE_MASK, b[4..len].to_vec()));
        b = &b[align4(len).min(b.len())..];
    }
    Ok(out)
}

/// The messages of one datagram, each checked against its own length.
pub fn parse_messages(mut b: &[u8]) -> Result<Vec<Message>, ParseError> {
    let mut out = Vec::new();
    while !b.is_empty() {
        let (Some(len), Some(ty)) = (u32_at(b, 0), u16_at(b, 4)) else {
            return Err(ParseError(format!("{} trailing bytes, not a message", b.len())));
        };
        let len = len as usize;
        if len < NLMSG_HDR || len > b.len() {
            return Err(ParseError(format!("message length {len} with {} bytes left", b.len())));
        }
        let body = &b[NLMSG_HDR..len];
        out.push(match ty {
            NLMSG_ERROR => {
                let e = u32_at(body, 0).ok_or_else(|| ParseError("NLMSG_ERROR without its errno".into()))?;
                Message::Error(e as i32)
            }
            NLMSG_DONE => Message::Done,
            family => {
                if body.len() < GENL_HDR {
                    return Err(ParseError(format!(
                        "message type {family}: {} bytes, no genl header",
                        body.len()
                    )));
                }
                Message::Genl { family, cmd: body[0], attrs: parse_attrs(&body[GENL_HDR..])? }
            }
        });
        b = &b[align4(len).min(b.len())..];
    }
    Ok(out)
}

/// The extended ack message of the first `NLMSG_ERROR` in datagram `b`,
/// if the kernel attached one (`NLM_F_ACK_TLVS`). Bytes that do not parse
/// give `None`: the errno alone still reports the refusal.
pub fn extack_message(mut b: &[u8]) -> Option<String> {
    while let (Some(len), Some(ty), Some(flags)) = (u32_at(b, 0), u16_at(b, 4), u16_at(b, 6)) {
        let len = len as usize;
        if len < NLMSG_HDR || len > b.len() {
            return None;
        }
        if ty == NLMSG_ERROR {
            if flags & NLM_F_ACK_TLVS == 0 {
                return None;
            }
            let body = &b[NLMSG_HDR..len];
            // errno, then the request's header (and its payload unless capped).
            let echoed = u32_at(body, 4)? as usize;
            let skip = 4 + if flags & NLM_F_CAPPED != 0 { NLMSG_HDR } else { align4(echoed) };
            let tlvs = parse_attrs(body.get(skip..)?).ok()?;
            let (_, v) = tlvs.into_iter().find(|(t, _)| *t == NLMSGERR_ATTR_MSG)?;
            let v = &v[..v.iter().position(|&c| c == 0).unwrap_or(v.len())];
            // The kernel's text, shown to the user: printable ASCII only.
            return Some(
                String::from_utf8_lossy(v)
                    .chars()
                    .map(|c| if c.is_ascii_graphic() || c == ' ' { c } else { '?' })
                    .take(200)
                    .collect(),
            );
        }
        b = b.get(align4(len)..)?;
    }
    None
}

/// Attribute `ty` of `attrs` as a u32 (`None` when absent).
pub(crate) fn attr_u32(attrs: &[(u16, Vec<u8>)], ty: u16, what: &str) -> Result<Option<u32>, ParseError> {
    match attrs.iter().find(|(t, _)| *t == ty) {
        None => Ok(None),
        Some((_, v)) if v.len() == 4 => Ok(u32_at(v, 0)),
        Some((_, v)) => Err(ParseError(format!("{what}: {} bytes, not a u32", v.len()))),
    }
}

/// Attribute `ty` of `attrs` as a u8 (`None` when absent).
pub(crate) fn attr_u8(attrs: &[(u16, Vec<u8>)], ty: u16, what: &str) -> Result<Option<u8>, ParseError> {
    match attrs.iter().find(|(t, _)| *t == ty) {
        None => Ok(None),
        Some((_, v)) if v.len() == 1 => Ok(Some(v[0])),
        Some((_, v)) => Err(ParseError(format!("{what}: {} bytes, not a u8", v.len()))),
    }
}

/// The family's id and the command ids it offers, from a `CTRL_CMD_GETFAMILY` reply.
pub fn decode_family(msgs: &[Message], name: &str) -> Result<(u16, Vec<u32>), ParseError> {
    for m in msgs {
        let Message::Genl { attrs, .. } = m else { continue };
        let named = attrs.iter().find(|(t, _)| *t == CTRL_ATTR_FAMILY_NAME).map(|(_, v)| {
            let v = &v[..v.iter().position(|&c| c == 0).unwrap_or(v.len())];
            v == name.as_bytes()
        });
        if named != Some(true) {
            continue;
        }
        let id = match attrs.iter().find(|(t, _)| *t == CTRL_ATTR_FAMILY_ID) {
            Some((_, v)) if v.len() == 2 => u16_at(v, 0).unwrap_or(0),
            _ => return Err(ParseError("family id missing or not a u16".into())),
        };
        let mut ops = Vec::new();
        if let Some((_, nest)) = attrs.iter().find(|(t, _)| *t == CTRL_ATTR_OPS) {
            for (_, op) in parse_attrs(nest)? {
                if let Some(id) = attr_u32(&parse_attrs(&op)?, CTRL_ATTR_OP_ID, "op id")? {
                    ops.push(id);
                }
            }
        }
        return Ok((id, ops));
    }
    Err(ParseError(format!("no family named {name} in the reply")))
}

/// One attribute (type, value), padded to 4 bytes.
pub(crate) fn put_attr(m: &mut Vec<u8>, ty: u16, v: &[u8]) {
    m.extend_from_slice(&((4 + v.len()) as u16).to_ne_bytes());
    m.extend_from_slice(&ty.to_ne_bytes());
    m.extend_from_slice(v);
    m.resize(align4(m.len()), 0);
}

/// A generic netlink request: header, genl header, attributes (already
/// encoded, nests included).
pub(crate) fn request(family: u16, flags: u16, seq: u32, cmd: u8, attrs: &[(u16, &[u8])]) -> Vec<u8> {
    let mut m = vec![0u8; NLMSG_HDR];
    m.extend_from_slice(&[cmd, 1, 0, 0]);
    for (ty, v) in attrs {
        put_attr(&mut m, *ty, v);
    }
    let len = m.len() as u32;
    m[0..4].copy_from_slice(&len.to_ne_bytes());
    m[4..6].copy_from_slice(&family.to_ne_bytes());
    m[6..8].copy_from_slice(&(NLM_F_REQUEST | flags).to_ne_bytes());
    m[8..12].copy_from_slice(&seq.to_ne_bytes());
    m
}

/// A `NETLINK_GENERIC` socket with its receive buffer.
pub(crate) struct Genl {
    sock: Socket,
    buf: Vec<u8>,
    seq: u32,
}

impl Genl {
    pub(crate) fn open() -> Result<Genl, GenlError> {
        let io = |source| GenlError::Io { what: "socket(AF_NETLINK, NETLINK_GENERIC)", source };
        let sock = Socket::new(
            Domain::from(libc::AF_NETLINK),
            Type::RAW,
            Some(Protocol::from(libc::NETLINK_GENERIC)),
        )
        .map_err(io)?;
        // A kernel that never answers must not hang `info`.
        sock.set_read_timeout(Some(Duration::from_secs(5))).map_err(io)?;
        for opt in [NETLINK_EXT_ACK, NETLINK_CAP_ACK] {
            let on: libc::c_int = 1;
            // SAFETY: `on` is a live c_int and its size is passed; the fd is
            // ours. A kernel without the option (before 4.12) refuses it:
            // refusals then come without the kernel's message.
            unsafe {
                libc::setsockopt(
                    sock.as_raw_fd(),
                    SOL_NETLINK,
                    opt,
                    (&on as *const libc::c_int).cast(),
                    std::mem::size_of::<libc::c_int>() as libc::socklen_t,
                );
            }
        }
        Ok(Genl { sock, buf: vec![0; 1 << 16], seq: 0 })
    }

    /// One datagram from the kernel (port id 0); one from another socket
    /// (a privileged process can send to ours) is dropped.
    fn recv_from_kernel(&mut self) -> Result<usize, GenlError> {
        loop {
            // SAFETY: sockaddr_nl is plain integers; all-zero is valid.
            let mut sa: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
            let mut len = std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t;
            // SAFETY: buf is a live buffer of buf.len() bytes, sa and len
            // a live sockaddr_nl and its size; the fd is ours.
            let n = unsafe {
                libc::recvfrom(
                    self.sock.as_raw_fd(),
                    self.buf.as_mut_ptr().cast(),
                    self.buf.len(),
                    0,
                    (&mut sa as *mut libc::sockaddr_nl).cast(),
                    &mut len,
                )
            };
            if n < 0 {
                let source = io::Error::last_os_error();
                if source.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(GenlError::Io { what: "recv", source });
            }
            if sa.nl_pid == 0 {
                return Ok(n as usize);
            }
        }
    }

    /// Sends one request and collects the reply's messages up to its end
    /// (an ack, an error or `NLMSG_DONE`). A kernel error is `Err(refusal)`.
    pub(crate) fn transact(
        &mut self,
        what: &'static str,
        family: u16,
        flags: u16,
        cmd: u8,
        attrs: &[(u16, &[u8])],
    ) -> Result<Result<Vec<Message>, Refusal>, GenlError> {
        self.seq += 1;
        let req = request(family, flags, self.seq, cmd, attrs);
        (&self.sock).write_all(&req).map_err(|source| GenlError::Io { what: "send", source })?;
        let mut out = Vec::new();
        // A dump of a few thousand queues fits in far fewer datagrams; a
        // kernel that never ends its reply is cut off.
        for _ in 0..4096 {
            let n = self.recv_from_kernel()?;
            let msgs = parse_messages(&self.buf[..n]).map_err(|source| GenlError::Parse { what, source })?;
            for m in msgs {
                match m {
                    Message::Done => return Ok(Ok(out)),
                    Message::Error(0) if flags & NLM_F_DUMP == 0 => return Ok(Ok(out)),
                    Message::Error(0) => {}
                    Message::Error(e) => {
                        let msg = extack_message(&self.buf[..n]);
                        return Ok(Err(Refusal { errno: e.checked_neg().unwrap_or(libc::EINVAL), msg }));
                    }
                    g @ Message::Genl { .. } => {
                        out.push(g);
                        if flags & (NLM_F_DUMP | NLM_F_ACK) == 0 {
                            return Ok(Ok(out));
                        }
                    }
                }
            }
        }
        Err(GenlError::Parse { what, source: ParseError("the reply did not end".into()) })
    }

    /// The id of family `name` and the commands it offers; `None` when the
    /// kernel has no such family.
    pub(crate) fn family(
        &mut self,
        what: &'static str,
        name: &str,
    ) -> Result<Option<(u16, Vec<u32>)>, FamilyError> {
        let mut cname = name.as_bytes().to_vec();
        cname.push(0);
        match self.transact(
            what,
            GENL_ID_CTRL,
            NLM_F_ACK,
            CTRL_CMD_GETFAMILY,
            &[(CTRL_ATTR_FAMILY_NAME, &cname)],
        )? {
            Ok(msgs) => decode_family(&msgs, name)
                .map(Some)
                .map_err(|source| GenlError::Parse { what, source }.into()),
            Err(r) if r.errno == libc::ENOENT => Ok(None),
            Err(r) => Err(FamilyError::Refused(r)),
        }
    }
}

/// Why a family lookup failed.
#[derive(Debug)]
pub(crate) enum FamilyError {
    /// Socket or parse failure.
    Genl(GenlError),
    /// The controller refused the lookup.
    Refused(Refusal),
}

impl From<GenlError> for FamilyError {
    fn from(e: GenlError) -> FamilyError {
        FamilyError::Genl(e)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn attr(ty: u16, v: &[u8]) -> Vec<u8> {
        let mut a = Vec::new();
        put_attr(&mut a, ty, v);
        a
    }

    pub(crate) fn msg(ty: u16, cmd: u8, attrs: &[Vec<u8>]) -> Vec<u8> {
        let body: Vec<u8> = [vec![cmd, 1, 0, 0], attrs.concat()].concat();
        let mut m = Vec::new();
        m.extend_from_slice(&((NLMSG_HDR + body.len()) as u32).to_ne_bytes());
        m.extend_from_slice(&ty.to_ne_bytes());
        m.extend_from_slice(&[0; 10]);
        m.extend(body);
        m
    }

    pub(crate) fn u32a(ty: u16, v: u32) -> Vec<u8> {
        attr(ty, &v.to_ne_bytes())
    }

    /// An `NLMSG_ERROR` as a capped extended ack: errno, the request's
    /// header, then the TLVs.
    pub(crate) fn error_with(errno: i32, text: Option<&str>) -> Vec<u8> {
        let mut body = (-errno).to_ne_bytes().to_vec();
        body.extend_from_slice(&[0u8; NLMSG_HDR]);
        let mut flags = NLM_F_CAPPED;
        if let Some(t) = text {
            flags |= NLM_F_ACK_TLVS;
            body.extend(attr(NLMSGERR_ATTR_MSG, &[t.as_bytes(), &[0]].concat()));
        }
        let mut m = Vec::new();
        m.extend_from_slice(&((NLMSG_HDR + body.len()) as u32).to_ne_bytes());
        m.extend_from_slice(&NLMSG_ERROR.to_ne_bytes());
        m.extend_from_slice(&flags.to_ne_bytes());
        m.extend_from_slice(&[0; 8]);
        m.extend(body);
        m
    }

    #[test]
    fn extack_text_is_read_and_cleaned() {
        let e = error_with(libc::EINVAL, Some("input_xfrm\tnot supported"));
        assert_eq!(parse_messages(&e).unwrap(), vec![Message::Error(-libc::EINVAL)]);
        assert_eq!(extack_message(&e).as_deref(), Some("input_xfrm?not supported"));
        assert_eq!(extack_message(&error_with(libc::EINVAL, None)), None);
        // Truncated anywhere: no text, no panic.
        for n in 0..e.len() {
            let _ = extack_message(&e[..n]);
        }
        assert_eq!(
            Refusal { errno: libc::EINVAL, msg: Some("x".into()) }.to_string(),
            format!("{} (x)", io::Error::from_raw_os_error(libc::EINVAL))
        );
    }

    #[test]
    fn u8_and_u32_attributes_are_size_checked() {
        let attrs = parse_attrs(&[attr(1, &[7]), u32a(2, 9), attr(3, &[1, 2])].concat()).unwrap();
        assert_eq!(attr_u8(&attrs, 1, "a").unwrap(), Some(7));
        assert_eq!(attr_u32(&attrs, 2, "b").unwrap(), Some(9));
        assert!(attr_u8(&attrs, 3, "c").is_err());
        assert!(attr_u32(&attrs, 3, "c").is_err());
        assert_eq!(attr_u32(&attrs, 4, "d").unwrap(), None);
    }
}
