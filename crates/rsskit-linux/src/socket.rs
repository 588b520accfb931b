//! UDP sockets for per-CPU workers: a builder over socket2 (SO_REUSEPORT,
//! buffer sizes, timeouts, packet info), `SO_INCOMING_CPU`, and batched
//! I/O (`recvmmsg`/`sendmmsg`) over preallocated buffers ([`Batch`]).

use socket2::{Domain, Protocol, Socket, Type};
use std::io;
use std::mem::{size_of, zeroed};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::{AsRawFd, RawFd};
use std::time::Duration;

/// Options for [`udp_socket`].
#[derive(Debug, Clone, Default)]
pub struct UdpOptions {
    /// `SO_REUSEPORT`: join (or start) the port's reuseport group.
    pub reuseport: bool,
    /// `SO_RCVBUF` in bytes (the kernel doubles it and caps it at `rmem_max`).
    pub rcvbuf: Option<usize>,
    /// `SO_SNDBUF` in bytes.
    pub sndbuf: Option<usize>,
    /// `O_NONBLOCK`.
    pub nonblocking: bool,
    /// `SO_RCVTIMEO` (blocking sockets).
    pub read_timeout: Option<Duration>,
    /// `SO_SNDTIMEO` (blocking sockets).
    pub write_timeout: Option<Duration>,
    /// `IP_PKTINFO` / `IPV6_RECVPKTINFO`: every datagram carries the local
    /// address it was sent to ([`Batch::local_ip`]); needed when bound to
    /// the wildcard address.
    pub pktinfo: bool,
}

fn ctx(e: io::Error, what: impl std::fmt::Display) -> io::Error {
    io::Error::new(e.kind(), format!("{what}: {e}"))
}

/// A UDP socket bound to `addr` with `opts`. IPv6 sockets are `IPV6_V6ONLY`
/// so that the IPv4 and IPv6 reuseport groups stay apart.
pub fn udp_socket(addr: SocketAddr, opts: &UdpOptions) -> io::Result<Socket> {
    let s = socket_for(addr, Type::DGRAM, Protocol::UDP)?;
    if opts.reuseport {
        s.set_reuse_port(true).map_err(|e| ctx(e, "SO_REUSEPORT"))?;
    }
    if let Some(n) = opts.rcvbuf {
        s.set_recv_buffer_size(n).map_err(|e| ctx(e, "SO_RCVBUF"))?;
    }
    if let Some(n) = opts.sndbuf {
        s.set_send_buffer_size(n).map_err(|e| ctx(e, "SO_SNDBUF"))?;
    }
    if opts.pktinfo {
        set_pktinfo(&s, addr.is_ipv6())?;
    }
    s.set_nonblocking(opts.nonblocking).map_err(|e| ctx(e, "O_NONBLOCK"))?;
    if opts.read_timeout.is_some() {
        s.set_read_timeout(opts.read_timeout).map_err(|e| ctx(e, "SO_RCVTIMEO"))?;
    }
    if opts.write_timeout.is_some() {
        s.set_write_timeout(opts.write_timeout).map_err(|e| ctx(e, "SO_SNDTIMEO"))?;
    }
    s.bind(&addr.into()).map_err(|e| ctx(e, format_args!("binding UDP {addr}")))?;
    Ok(s)
}

/// Options for [`tcp_listener`].
#[derive(Debug, Clone)]
pub struct TcpListenOptions {
    /// `SO_REUSEPORT`: join (or start) the port's reuseport group.
    pub reuseport: bool,
    /// `listen(2)` backlog (the kernel caps it at `net.core.somaxconn`).
    pub backlog: i32,
    /// `TCP_DEFER_ACCEPT`: wake the listener only once the client has sent data.
    pub defer_accept: bool,
}

impl Default for TcpListenOptions {
    fn default() -> Self {
        TcpListenOptions { reuseport: false, backlog: 4096, defer_accept: false }
    }
}

/// A socket of `addr`'s family (`IPV6_V6ONLY` for IPv6, so that the IPv4
/// and IPv6 reuseport groups stay apart).
fn socket_for(addr: SocketAddr, ty: Type, proto: Protocol) -> io::Result<Socket> {
    let domain = if addr.is_ipv4() { Domain::IPV4 } else { Domain::IPV6 };
    let name = if proto == Protocol::TCP { "TCP" } else { "UDP" };
    let s =
        Socket::new(domain, ty, Some(proto)).map_err(|e| ctx(e, format_args!("creating {name} socket")))?;
    if addr.is_ipv6() {
        s.set_only_v6(true).map_err(|e| ctx(e, "IPV6_V6ONLY"))?;
    }
    Ok(s)
}

/// A TCP socket bound to `addr` with `SO_REUSEADDR` (and `SO_REUSEPORT`
/// if asked), not listening. Binding fails (`AddrInUse`) where anything
/// listens already, unless both sides are in a reuseport group: a probe
/// for a free port.
pub fn tcp_bound(addr: SocketAddr, reuseport: bool) -> io::Result<Socket> {
    let s = socket_for(addr, Type::STREAM, Protocol::TCP)?;
    s.set_reuse_address(true).map_err(|e| ctx(e, "SO_REUSEADDR"))?;
    if reuseport {
        s.set_reuse_port(true).map_err(|e| ctx(e, "SO_REUSEPORT"))?;
    }
    s.bind(&addr.into()).map_err(|e| ctx(e, format_args!("binding TCP {addr}")))?;
    Ok(s)
}

/// A non-blocking TCP listener on `addr` ([`tcp_bound`], and the options
/// of `opts`). IPv6 listeners are `IPV6_V6ONLY`, as [`udp_socket`].
pub fn tcp_listener(addr: SocketAddr, opts: &TcpListenOptions) -> io::Result<Socket> {
    let s = tcp_bound(addr, opts.reuseport)?;
    s.set_nonblocking(true).map_err(|e| ctx(e, "O_NONBLOCK"))?;
    if opts.defer_accept {
        setsockopt_int(s.as_raw_fd(), libc::IPPROTO_TCP, libc::TCP_DEFER_ACCEPT, 1)
            .map_err(|e| ctx(e, "TCP_DEFER_ACCEPT"))?;
    }
    s.listen(opts.backlog).map_err(|e| ctx(e, format_args!("listening on {addr}")))?;
    Ok(s)
}

/// `setsockopt` of one `int` option.
pub fn setsockopt_int(fd: RawFd, level: libc::c_int, name: libc::c_int, v: libc::c_int) -> io::Result<()> {
    setsockopt(fd, level, name, &v)
}

/// `setsockopt` with a plain-data value (an `int` or a kernel C struct):
/// the one wrapper every module of this crate uses.
pub(crate) fn setsockopt<T: Copy>(fd: RawFd, level: libc::c_int, name: libc::c_int, v: &T) -> io::Result<()> {
    // SAFETY: `v` is a live, readable T and the length passed is its size.
    let rc = unsafe {
        libc::setsockopt(fd, level, name, (v as *const T).cast(), size_of::<T>() as libc::socklen_t)
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// `getsockopt` into `v`, which the caller initialised: only for plain
/// data (integers, kernel C structs of integers) where any bytes the
/// kernel writes make a valid value.
pub(crate) fn getsockopt_into<T: Copy>(
    fd: RawFd,
    level: libc::c_int,
    name: libc::c_int,
    v: &mut T,
) -> io::Result<()> {
    let mut len = size_of::<T>() as libc::socklen_t;
    // SAFETY: `v` is a writable T of `len` bytes; the kernel writes at most `len`.
    let rc = unsafe { libc::getsockopt(fd, level, name, (v as *mut T).cast(), &mut len) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

fn getsockopt_int(fd: RawFd, level: libc::c_int, name: libc::c_int) -> io::Result<libc::c_int> {
    let mut v: libc::c_int = 0;
    getsockopt_into(fd, level, name, &mut v)?;
    Ok(v)
}

/// Asks for `IP_PKTINFO` (IPv4) or `IPV6_RECVPKTINFO` (IPv6) control messages.
pub fn set_pktinfo(s: &impl AsRawFd, ipv6: bool) -> io::Result<()> {
    let (level, name) = if ipv6 {
        (libc::IPPROTO_IPV6, libc::IPV6_RECVPKTINFO)
    } else {
        (libc::IPPROTO_IP, libc::IP_PKTINFO)
    };
    setsockopt_int(s.as_raw_fd(), level, name, 1).map_err(|e| ctx(e, "IP_PKTINFO"))
}

/// `SO_INCOMING_CPU`: the CPU that processed the last datagram queued to
/// this socket, `None` before the first one. Linux records it for TCP and
/// for *connected* UDP sockets only: an unconnected UDP socket always says
/// `None`.
pub fn incoming_cpu(s: &impl AsRawFd) -> io::Result<Option<usize>> {
    let v = getsockopt_int(s.as_raw_fd(), libc::SOL_SOCKET, libc::SO_INCOMING_CPU)?;
    Ok((v >= 0).then_some(v as usize))
}

/// A `sockaddr_storage` as a `SocketAddr` (IPv4 or IPv6), `None` for other families.
pub fn sockaddr_to_std(ss: &libc::sockaddr_storage, len: libc::socklen_t) -> Option<SocketAddr> {
    match ss.ss_family as libc::c_int {
        libc::AF_INET if len as usize >= size_of::<libc::sockaddr_in>() => {
            // SAFETY: family is AF_INET and the length covers a sockaddr_in;
            // sockaddr_storage is aligned for every sockaddr type.
            let sin = unsafe { &*(ss as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            let ip = Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr));
            Some(SocketAddr::V4(SocketAddrV4::new(ip, u16::from_be(sin.sin_port))))
        }
        libc::AF_INET6 if len as usize >= size_of::<libc::sockaddr_in6>() => {
            // SAFETY: as above for AF_INET6 / sockaddr_in6.
            let sin6 = unsafe { &*(ss as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>() };
            Some(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(sin6.sin6_addr.s6_addr),
                u16::from_be(sin6.sin6_port),
                sin6.sin6_flowinfo,
                sin6.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

/// A `SocketAddr` as a `sockaddr_storage` and its length.
pub fn std_to_sockaddr(a: &SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: all-zero is a valid sockaddr_storage.
    let mut ss: libc::sockaddr_storage = unsafe { zeroed() };
    match a {
        SocketAddr::V4(v4) => {
            // SAFETY: sockaddr_storage is large and aligned enough for sockaddr_in.
            let sin = unsafe { &mut *(&mut ss as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            sin.sin_family = libc::AF_INET as libc::sa_family_t;
            sin.sin_port = v4.port().to_be();
            sin.sin_addr.s_addr = u32::from(*v4.ip()).to_be();
            (ss, size_of::<libc::sockaddr_in>() as libc::socklen_t)
        }
        SocketAddr::V6(v6) => {
            // SAFETY: as above for sockaddr_in6.
            let sin6 = unsafe { &mut *(&mut ss as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in6>() };
            sin6.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            sin6.sin6_port = v6.port().to_be();
            sin6.sin6_addr.s6_addr = v6.ip().octets();
            sin6.sin6_flowinfo = v6.flowinfo();
            sin6.sin6_scope_id = v6.scope_id();
            (ss, size_of::<libc::sockaddr_in6>() as libc::socklen_t)
        }
    }
}

/// Control buffer per message, 8-aligned: room for an `in6_pktinfo` cmsg
/// (40 bytes) and a `UDP_GRO`/`UDP_SEGMENT` one (24 bytes), with margin.
const CTRL_WORDS: usize = 12;
const CTRL_LEN: usize = CTRL_WORDS * 8;

/// Preallocated buffers for `recvmmsg`/`sendmmsg`: `cap` messages of up to
/// `buf_size` bytes each, their iovecs, addresses, control buffers and
/// `mmsghdr`s. Nothing is allocated after [`Batch::new`].
///
/// Receive: [`Batch::recv`] fills messages `0..len()`. Send: [`Batch::push`]
/// / [`Batch::push_from`] queue messages, [`Batch::send`] sends them all.
pub struct Batch {
    cap: usize,
    buf_size: usize,
    /// Distance between buffers: `buf_size` rounded up to a cache line, plus
    /// one line, so that large power-of-two buffers do not all start in the
    /// same cache set.
    stride: usize,
    len: usize,
    /// Bytes queued (send side).
    queued_bytes: usize,
    bufs: Vec<u8>,
    iovs: Vec<libc::iovec>,
    addrs: Vec<libc::sockaddr_storage>,
    ctrl: Vec<u64>,
    hdrs: Vec<libc::mmsghdr>,
    /// Send side: segment size of each queued message (0: one datagram;
    /// else a `UDP_SEGMENT` send of `len.div_ceil(seg)` datagrams).
    seg: Vec<u16>,
    /// Receive side: the `UDP_GRO` segment size of each received message
    /// (0: none), read from its control message once, in [`Batch::recv`]:
    /// the echo path asks for it twice per message (count, then reply).
    gro: Vec<u32>,
    with_ctrl: bool,
    /// Messages `0..dirty` may differ from their receive state (received
    /// into, or queued since the last reset): the next receive resets
    /// those only. After an echo's send of 2 coalesced buffers that is 2
    /// messages, not the whole batch of 32 (a reset of every message
    /// before each receive was ~15% of the GSO echo's user-space
    /// instructions).
    dirty: usize,
}

// SAFETY: the raw pointers inside `iovs` and `hdrs` point only into this
// Batch's own heap buffers (`bufs`, `addrs`, `ctrl`, `iovs`), which are never
// reallocated; moving the Batch to another thread moves their owner with them.
unsafe impl Send for Batch {}

impl Batch {
    /// `cap` messages of `buf_size` bytes; `with_ctrl` reserves a control
    /// buffer per message (for packet info).
    ///
    /// # Panics
    /// If `cap` or `buf_size` is 0.
    pub fn new(cap: usize, buf_size: usize, with_ctrl: bool) -> Batch {
        assert!(cap > 0 && buf_size > 0, "empty batch");
        let stride = buf_size.div_ceil(64) * 64 + 64;
        let bufs = vec![0u8; cap * stride];
        // SAFETY: all-zero iovec, sockaddr_storage and mmsghdr are valid values
        // (null pointers, zero lengths); they are filled in below.
        let (iov, addr, hdr) = unsafe {
            (zeroed::<libc::iovec>(), zeroed::<libc::sockaddr_storage>(), zeroed::<libc::mmsghdr>())
        };
        let (iovs, addrs, hdrs) = (vec![iov; cap], vec![addr; cap], vec![hdr; cap]);
        // Always allocated: a send batch needs it for `UDP_SEGMENT` even
        // without packet info.
        let ctrl = vec![0u64; cap * CTRL_WORDS];
        let mut b = Batch {
            cap,
            buf_size,
            stride,
            len: 0,
            queued_bytes: 0,
            bufs,
            iovs,
            addrs,
            ctrl,
            hdrs,
            seg: vec![0; cap],
            gro: vec![0; cap],
            with_ctrl,
            dirty: cap,
        };
        let base = b.bufs.as_mut_ptr();
        for i in 0..cap {
            // SAFETY: i * stride + buf_size <= cap * stride = bufs.len().
            b.iovs[i].iov_base = unsafe { base.add(i * stride) }.cast();
            b.iovs[i].iov_len = buf_size;
            let h = &mut b.hdrs[i].msg_hdr;
            h.msg_iov = &mut b.iovs[i];
            h.msg_iovlen = 1;
            h.msg_name = (&mut b.addrs[i] as *mut libc::sockaddr_storage).cast();
            h.msg_namelen = size_of::<libc::sockaddr_storage>() as u32;
            if with_ctrl {
                h.msg_control = (&mut b.ctrl[i * CTRL_WORDS] as *mut u64).cast();
                h.msg_controllen = CTRL_LEN;
            }
        }
        b
    }

    /// Message capacity.
    pub fn capacity(&self) -> usize {
        self.cap
    }

    /// Largest message.
    pub fn buf_size(&self) -> usize {
        self.buf_size
    }

    /// Messages received (or queued).
    pub fn len(&self) -> usize {
        self.len
    }

    /// No messages.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether no more can be queued.
    pub fn is_full(&self) -> bool {
        self.len == self.cap
    }

    /// Payload bytes queued for sending.
    pub fn queued_bytes(&self) -> usize {
        self.queued_bytes
    }

    /// Forgets all messages.
    pub fn clear(&mut self) {
        self.len = 0;
        self.queued_bytes = 0;
    }

    /// Restores the fields a previous `recvmmsg` (or queuing) changed, for
    /// the first `n` messages.
    fn reset_for_recv(&mut self, n: usize) {
        for i in 0..n {
            self.iovs[i].iov_len = self.buf_size;
            let h = &mut self.hdrs[i];
            h.msg_len = 0;
            h.msg_hdr.msg_namelen = size_of::<libc::sockaddr_storage>() as u32;
            h.msg_hdr.msg_flags = 0;
            h.msg_hdr.msg_controllen = if self.with_ctrl { CTRL_LEN } else { 0 };
            if self.with_ctrl {
                h.msg_hdr.msg_control = (&mut self.ctrl[i * CTRL_WORDS] as *mut u64).cast();
            }
        }
    }

    /// `recvmmsg` of up to `capacity()` datagrams. With `dontwait` the call
    /// never blocks (`MSG_DONTWAIT`): `Err(WouldBlock)` when nothing is
    /// queued. Otherwise it blocks for the first datagram (up to the
    /// socket's `SO_RCVTIMEO`) and takes whatever else is queued.
    pub fn recv(&mut self, s: &impl AsRawFd, dontwait: bool) -> io::Result<usize> {
        self.len = 0;
        self.queued_bytes = 0;
        self.reset_for_recv(self.dirty);
        // recvmmsg writes into the messages it fills only (set below).
        self.dirty = 0;
        let flags = libc::MSG_WAITFORONE | if dontwait { libc::MSG_DONTWAIT } else { 0 };
        // SAFETY: hdrs has `cap` entries, each pointing at this batch's own
        // iovec, buffer of `buf_size` bytes, sockaddr_storage and control
        // buffer of CTRL_LEN bytes, all live for the call.
        let n = unsafe {
            libc::recvmmsg(
                s.as_raw_fd(),
                self.hdrs.as_mut_ptr(),
                self.cap as u32,
                flags,
                std::ptr::null_mut(),
            )
        };
        if n < 0 {
            // Nothing received; reset everything next time all the same.
            self.dirty = self.cap;
            return Err(io::Error::last_os_error());
        }
        self.len = n as usize;
        self.dirty = self.len;
        if self.with_ctrl {
            for i in 0..self.len {
                self.gro[i] = self.read_gro(i);
            }
        }
        Ok(self.len)
    }

    /// Payload of message `i` (received length, or queued length).
    #[inline]
    pub fn data(&self, i: usize) -> &[u8] {
        assert!(i < self.len);
        let n = (self.hdrs[i].msg_len as usize).min(self.buf_size);
        &self.bufs[i * self.stride..i * self.stride + n]
    }

    /// Mutable payload of message `i`.
    #[inline]
    pub fn data_mut(&mut self, i: usize) -> &mut [u8] {
        assert!(i < self.len);
        let n = (self.hdrs[i].msg_len as usize).min(self.buf_size);
        &mut self.bufs[i * self.stride..i * self.stride + n]
    }

    /// Whether message `i` was longer than `buf_size` (`MSG_TRUNC`).
    #[inline]
    pub fn truncated(&self, i: usize) -> bool {
        assert!(i < self.len);
        self.hdrs[i].msg_hdr.msg_flags & libc::MSG_TRUNC != 0
    }

    /// Peer address of message `i` (source when received, destination when queued).
    #[inline]
    pub fn addr(&self, i: usize) -> Option<SocketAddr> {
        assert!(i < self.len);
        sockaddr_to_std(&self.addrs[i], self.hdrs[i].msg_hdr.msg_namelen)
    }

    /// The first control message of received message `i` that `pick`
    /// (given its level, type and data) turns into a value.
    #[inline]
    fn find_cmsg<T>(&self, i: usize, mut pick: impl FnMut(i32, i32, *const u8) -> Option<T>) -> Option<T> {
        assert!(i < self.len);
        if !self.with_ctrl {
            return None;
        }
        let h = &self.hdrs[i].msg_hdr;
        // SAFETY: msg_control/msg_controllen describe this message's own
        // control buffer as filled by the kernel; CMSG_* walk within it, and
        // each header read is one CMSG_* returned.
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(h);
            while !c.is_null() {
                if let Some(v) = pick((*c).cmsg_level, (*c).cmsg_type, libc::CMSG_DATA(c)) {
                    return Some(v);
                }
                c = libc::CMSG_NXTHDR(h, c);
            }
        }
        None
    }

    /// Local (destination) address of received message `i`, from its
    /// `IP_PKTINFO`/`IPV6_PKTINFO` control message, if any.
    pub fn local_ip(&self, i: usize) -> Option<IpAddr> {
        self.find_cmsg(i, |level, ty, data| match (level, ty) {
            (libc::IPPROTO_IP, libc::IP_PKTINFO) => {
                // SAFETY: the kernel's IP_PKTINFO data is one in_pktinfo; read unaligned.
                let pi = unsafe { std::ptr::read_unaligned(data.cast::<libc::in_pktinfo>()) };
                Some(IpAddr::V4(Ipv4Addr::from(u32::from_be(pi.ipi_addr.s_addr))))
            }
            (libc::IPPROTO_IPV6, libc::IPV6_PKTINFO) => {
                // SAFETY: the kernel's IPV6_PKTINFO data is one in6_pktinfo; read unaligned.
                let pi = unsafe { std::ptr::read_unaligned(data.cast::<libc::in6_pktinfo>()) };
                Some(IpAddr::V6(Ipv6Addr::from(pi.ipi6_addr.s6_addr)))
            }
            _ => None,
        })
    }

    /// Segment size of received message `i` when the kernel coalesced
    /// several datagrams of one flow into it (`UDP_GRO` on the socket, see
    /// [`set_gro`]): its `UDP_GRO` control message. `None`: one datagram.
    /// [`segments`] splits the payload into its datagrams.
    #[inline]
    pub fn segment_size(&self, i: usize) -> Option<usize> {
        assert!(i < self.len);
        (self.gro[i] > 0).then_some(self.gro[i] as usize)
    }

    /// The `UDP_GRO` control message of received message `i` (0: none).
    fn read_gro(&self, i: usize) -> u32 {
        self.find_cmsg(i, |level, ty, data| {
            if (level, ty) != (libc::SOL_UDP, libc::UDP_GRO) {
                return None;
            }
            // SAFETY: the kernel's UDP_GRO data is one int; read unaligned.
            let g = unsafe { std::ptr::read_unaligned(data.cast::<libc::c_int>()) };
            Some(u32::try_from(g).unwrap_or(0))
        })
        .unwrap_or(0)
    }

    /// Queues `data` for `to`. Returns `false` (queuing nothing) when the
    /// batch is full or `data` is longer than `buf_size`.
    pub fn push(&mut self, data: &[u8], to: &SocketAddr) -> bool {
        self.push_segments(data, 0, to)
    }

    /// Queues `data` as consecutive datagrams of `segment` bytes each (the
    /// last may be shorter) for `to`, sent with one `UDP_SEGMENT` message
    /// (GSO); `segment` 0 or at least `data.len()`: one datagram. Returns
    /// `false` (queuing nothing) when full, too long, or `segment` is above
    /// 65535.
    pub fn push_segments(&mut self, data: &[u8], segment: usize, to: &SocketAddr) -> bool {
        if self.is_full() || data.len() > self.buf_size || segment > u16::MAX as usize {
            return false;
        }
        let i = self.len;
        let (ss, len) = std_to_sockaddr(to);
        self.addrs[i] = ss;
        let seg = gso_segment(data.len(), segment);
        let ctrl_len = send_ctrl(self.ctrl_of(i), 0, seg);
        self.set_queued(i, data, len, ctrl_len, seg);
        true
    }

    /// Queues a reply to received message `i` of `rx`: its payload, sent
    /// back to its source; with packet info on both batches, from the local
    /// address it was sent to; a coalesced message (`UDP_GRO`) goes back as
    /// one GSO send of the same segments. Returns `false` when full or too
    /// long.
    pub fn push_from(&mut self, rx: &Batch, i: usize) -> bool {
        let data = rx.data(i);
        if self.is_full() || data.len() > self.buf_size {
            return false;
        }
        let j = self.len;
        self.addrs[j] = rx.addrs[i];
        let mut ctrl_len = 0;
        if self.with_ctrl && rx.with_ctrl {
            ctrl_len = (rx.hdrs[i].msg_hdr.msg_controllen).min(CTRL_LEN);
            self.ctrl[j * CTRL_WORDS..(j + 1) * CTRL_WORDS]
                .copy_from_slice(&rx.ctrl[i * CTRL_WORDS..(i + 1) * CTRL_WORDS]);
        }
        let gro = rx.segment_size(i);
        let seg = gso_segment(data.len(), gro.unwrap_or(0));
        if gro.is_some() {
            // The kernel refuses a UDP_GRO cmsg on send: packet info, then UDP_SEGMENT.
            ctrl_len = send_ctrl(self.ctrl_of(j), ctrl_len, seg);
        }
        self.set_queued(j, data, rx.hdrs[i].msg_hdr.msg_namelen, ctrl_len, seg);
        true
    }

    /// Turns the messages just received into replies queued in place: each
    /// is sent back to its source with its (possibly rewritten) payload and,
    /// with packet info, from the local address it arrived on, as
    /// [`push_from`](Self::push_from) would queue it (a coalesced one as one
    /// GSO send), without copying. An echo loop swaps this batch with its
    /// empty send batch: the C echo floor sends its receive buffers back the
    /// same way. Every message must be whole (none
    /// [`truncated`](Self::truncated)).
    pub fn queue_received(&mut self) {
        self.queued_bytes = 0;
        for i in 0..self.len {
            let n = (self.hdrs[i].msg_len as usize).min(self.buf_size);
            self.iovs[i].iov_len = n;
            self.queued_bytes += n;
            let gro = if self.with_ctrl { self.segment_size(i) } else { None };
            let seg = gso_segment(n, gro.unwrap_or(0));
            self.seg[i] = seg;
            let h = &mut self.hdrs[i].msg_hdr;
            h.msg_flags = 0;
            let mut ctrl_len = if self.with_ctrl { h.msg_controllen.min(CTRL_LEN) } else { 0 };
            if gro.is_some() {
                // The kernel refuses a UDP_GRO cmsg on send: packet info, then UDP_SEGMENT.
                ctrl_len = send_ctrl(self.ctrl_of(i), ctrl_len, seg);
            }
            let h = &mut self.hdrs[i].msg_hdr;
            h.msg_controllen = ctrl_len;
            if ctrl_len == 0 {
                h.msg_control = std::ptr::null_mut();
            }
        }
    }

    fn ctrl_of(&mut self, i: usize) -> &mut [u64] {
        &mut self.ctrl[i * CTRL_WORDS..(i + 1) * CTRL_WORDS]
    }

    fn set_queued(&mut self, i: usize, data: &[u8], namelen: libc::socklen_t, ctrl_len: usize, seg: u16) {
        let off = i * self.stride;
        self.bufs[off..off + data.len()].copy_from_slice(data);
        self.iovs[i].iov_len = data.len();
        self.seg[i] = seg;
        self.gro[i] = 0;
        self.dirty = self.dirty.max(i + 1);
        let h = &mut self.hdrs[i];
        h.msg_len = data.len() as u32;
        h.msg_hdr.msg_namelen = namelen;
        h.msg_hdr.msg_flags = 0;
        h.msg_hdr.msg_controllen = ctrl_len;
        if ctrl_len == 0 {
            h.msg_hdr.msg_control = std::ptr::null_mut();
        } else {
            h.msg_hdr.msg_control = (&mut self.ctrl[i * CTRL_WORDS] as *mut u64).cast();
        }
        self.len += 1;
        self.queued_bytes += data.len();
    }

    /// Datagrams queued message `i` carries.
    fn datagrams(&self, i: usize) -> usize {
        segment_count(self.iovs[i].iov_len, usize::from(self.seg[i]))
    }

    /// Datagrams queued (a GSO message counts as its segments).
    pub fn queued_datagrams(&self) -> usize {
        (0..self.len).map(|i| self.datagrams(i)).sum()
    }

    /// Sends every queued message with as few `sendmmsg` calls as the kernel
    /// allows, then clears the batch. A message the kernel refuses (e.g.
    /// unreachable destination) is skipped and counted in `failed`; the
    /// first such error is returned alongside. A GSO message the kernel
    /// refuses is sent again one datagram at a time (a device or route
    /// without UDP segmentation). Counts are datagrams, not messages.
    /// Blocks if the socket is blocking and its send buffer is full.
    pub fn send(&mut self, s: &impl AsRawFd) -> SendResult {
        let mut r = SendResult::default();
        let mut at = 0;
        while at < self.len {
            // SAFETY: hdrs[at..len] are initialised messages pointing into this
            // batch's own buffers (set by push/push_from), live for the call.
            let n = unsafe {
                libc::sendmmsg(s.as_raw_fd(), self.hdrs.as_mut_ptr().add(at), (self.len - at) as u32, 0)
            };
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                if self.seg[at] > 0 && e.kind() != io::ErrorKind::WouldBlock {
                    self.send_split(s, at, &mut r);
                } else {
                    r.failed += self.datagrams(at);
                    r.first_error.get_or_insert(e);
                }
                at += 1;
            } else {
                r.sent += (at..at + n as usize).map(|i| self.datagrams(i)).sum::<usize>();
                at += n as usize;
            }
        }
        // Restore the control pointers a push may have nulled.
        if self.with_ctrl {
            for i in 0..self.len {
                self.hdrs[i].msg_hdr.msg_control = (&mut self.ctrl[i * CTRL_WORDS] as *mut u64).cast();
            }
        }
        self.clear();
        r
    }

    /// Sends GSO message `i` one datagram at a time, with its packet info
    /// but without `UDP_SEGMENT` (which [`send_ctrl`] puts last).
    fn send_split(&mut self, s: &impl AsRawFd, i: usize, r: &mut SendResult) {
        let len = self.iovs[i].iov_len;
        let seg = usize::from(self.seg[i]);
        let ctrl_len = self.hdrs[i].msg_hdr.msg_controllen.saturating_sub(udp_segment_space());
        let base = i * self.stride;
        for part in segments(len, seg) {
            let mut iov = libc::iovec {
                iov_base: self.bufs[base + part.start..].as_mut_ptr().cast(),
                iov_len: part.len(),
            };
            let mut h = self.hdrs[i].msg_hdr;
            h.msg_iov = &mut iov;
            h.msg_iovlen = 1;
            h.msg_controllen = ctrl_len;
            if ctrl_len == 0 {
                h.msg_control = std::ptr::null_mut();
            }
            let rc = loop {
                // SAFETY: `h` points at this batch's own address and control
                // buffer of message `i` and at `iov`, a slice of its buffer;
                // all live for the call.
                let rc = unsafe { libc::sendmsg(s.as_raw_fd(), &h, 0) };
                // A signal (e.g. a readiness SIGIO) while waiting for buffer space: again.
                if rc >= 0 || io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
                    break rc;
                }
            };
            if rc < 0 {
                r.failed += 1;
                r.first_error.get_or_insert(io::Error::last_os_error());
            } else {
                r.sent += 1;
            }
        }
    }
}

/// The `UDP_SEGMENT` size for `len` bytes in segments of `segment`: 0 (a
/// plain datagram) when that is one segment.
fn gso_segment(len: usize, segment: usize) -> u16 {
    if segment == 0 || len <= segment {
        0
    } else {
        segment as u16
    }
}

/// Bytes a `UDP_SEGMENT` cmsg (a u16) takes in a control buffer.
fn udp_segment_space() -> usize {
    // SAFETY: CMSG_SPACE is arithmetic only.
    unsafe { libc::CMSG_SPACE(size_of::<u16>() as u32) as usize }
}

/// Rewrites a control buffer for sending: keeps the cmsgs of its first
/// `len` bytes other than `SOL_UDP` ones (packet info; the kernel refuses a
/// received `UDP_GRO` on send), then appends `UDP_SEGMENT` = `seg` unless
/// `seg` is 0. Returns the new `msg_controllen`. `UDP_SEGMENT` goes last so
/// that [`Batch::send_split`] can drop it by length.
#[inline]
fn send_ctrl(ctrl: &mut [u64], len: usize, seg: u16) -> usize {
    if only_udp_cmsg(ctrl, len) {
        // Nothing to keep (no packet info: the echo path's common case):
        // UDP_SEGMENT alone, written in place, without the copy below.
        // Inlined into the echo loop: as a call it was ~45 instructions
        // per coalesced buffer, most of them saving registers.
        if seg == 0 || udp_segment_space() > ctrl.len() * 8 {
            return 0;
        }
        // SAFETY: `ctrl` is 8-aligned and holds at least udp_segment_space()
        // bytes (checked): one cmsghdr and its u16, written at offset 0.
        unsafe {
            let c = ctrl.as_mut_ptr().cast::<libc::cmsghdr>();
            (*c).cmsg_len = libc::CMSG_LEN(size_of::<u16>() as u32) as usize;
            (*c).cmsg_level = libc::SOL_UDP;
            (*c).cmsg_type = libc::UDP_SEGMENT;
            std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<u16>(), seg);
        }
        return udp_segment_space();
    }
    send_ctrl_keeping(ctrl, len, seg)
}

/// [`send_ctrl`] when the buffer holds cmsgs to keep (packet info).
#[inline(never)]
fn send_ctrl_keeping(ctrl: &mut [u64], len: usize, seg: u16) -> usize {
    let mut out = [0u64; CTRL_WORDS];
    let cap = CTRL_LEN;
    let mut used = 0usize;
    // SAFETY: `h` describes `ctrl[..len]` (len <= ctrl's bytes), a control
    // buffer laid out by the kernel or by this function; CMSG_* walk within
    // it. Each kept cmsg is copied whole (cmsg_len bytes, checked to fit)
    // into `out`, 8-aligned like `ctrl`, at CMSG_ALIGN'ed offsets; the new
    // UDP_SEGMENT header is written at such an offset too, inside `out`.
    unsafe {
        let mut h: libc::msghdr = zeroed();
        h.msg_control = ctrl.as_mut_ptr().cast();
        h.msg_controllen = len.min(ctrl.len() * 8);
        let mut c = libc::CMSG_FIRSTHDR(&h);
        while !c.is_null() {
            let clen = (*c).cmsg_len;
            let hdr = libc::CMSG_LEN(0) as usize;
            if (*c).cmsg_level != libc::SOL_UDP && clen >= hdr {
                let space = libc::CMSG_SPACE((clen - hdr) as u32) as usize;
                if used + space <= cap {
                    std::ptr::copy_nonoverlapping(
                        c.cast::<u8>(),
                        out.as_mut_ptr().cast::<u8>().add(used),
                        clen,
                    );
                    used += space;
                }
            }
            c = libc::CMSG_NXTHDR(&h, c);
        }
        if seg > 0 && used + udp_segment_space() <= cap {
            let c = out.as_mut_ptr().cast::<u8>().add(used).cast::<libc::cmsghdr>();
            (*c).cmsg_len = libc::CMSG_LEN(size_of::<u16>() as u32) as usize;
            (*c).cmsg_level = libc::SOL_UDP;
            (*c).cmsg_type = libc::UDP_SEGMENT;
            std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<u16>(), seg);
            used += udp_segment_space();
        }
    }
    ctrl[..CTRL_WORDS].copy_from_slice(&out);
    used
}

/// Whether the first `len` bytes of a control buffer hold no cmsg that
/// [`send_ctrl`] keeps: none at all, or one `SOL_UDP` cmsg filling them (a
/// received `UDP_GRO` alone).
#[inline]
fn only_udp_cmsg(ctrl: &[u64], len: usize) -> bool {
    if len == 0 {
        return true;
    }
    if len > ctrl.len() * 8 || len < size_of::<libc::cmsghdr>() {
        return false;
    }
    // SAFETY: `ctrl` is 8-aligned and holds at least one cmsghdr (checked);
    // CMSG_LEN and CMSG_SPACE are arithmetic only.
    unsafe {
        let c = &*ctrl.as_ptr().cast::<libc::cmsghdr>();
        let hdr = libc::CMSG_LEN(0) as usize;
        c.cmsg_level == libc::SOL_UDP
            && c.cmsg_len >= hdr
            && c.cmsg_len <= len
            && libc::CMSG_SPACE((c.cmsg_len - hdr) as u32) as usize == len
    }
}

/// How many datagrams a coalesced buffer of `len` bytes in segments of
/// `segment` bytes holds (`segment` 0: one). An empty buffer is one empty
/// datagram.
pub fn segment_count(len: usize, segment: usize) -> usize {
    if segment == 0 || len <= segment {
        1
    } else {
        len.div_ceil(segment)
    }
}

/// The datagrams of a coalesced buffer of `len` bytes: byte ranges of
/// `segment` bytes each, the last one possibly shorter (`segment` 0: the
/// whole buffer, one datagram). Sans-I/O: what `UDP_GRO` receive and
/// `UDP_SEGMENT` send both mean by segments.
pub fn segments(len: usize, segment: usize) -> impl Iterator<Item = std::ops::Range<usize>> {
    let step = if segment == 0 || len <= segment { len.max(1) } else { segment };
    let n = segment_count(len, segment);
    (0..n).map(move |k| k * step..((k + 1) * step).min(len))
}

/// `UDP_GRO` on (or off): the kernel then queues the datagrams of one flow
/// that arrive together (a GSO send on loopback, NAPI GRO on a NIC) as one
/// coalesced buffer, with a `UDP_GRO` control message giving the segment
/// size ([`Batch::segment_size`]). The receive buffer must hold a whole
/// coalesced buffer (64 KiB), or the tail is lost.
pub fn set_gro(s: &impl AsRawFd, on: bool) -> io::Result<()> {
    setsockopt_int(s.as_raw_fd(), libc::SOL_UDP, libc::UDP_GRO, libc::c_int::from(on))
        .map_err(|e| ctx(e, "UDP_GRO"))
}

/// Sends `data` on connected socket `s` as datagrams of `segment` bytes
/// (the last may be shorter) with one `sendmsg` carrying `UDP_SEGMENT`
/// (GSO); `segment` 0 or at least `data.len()`: one plain datagram. Returns
/// the datagrams sent (all or none: the kernel takes a GSO send whole).
pub fn send_segments(s: &impl AsRawFd, data: &[u8], segment: usize) -> io::Result<usize> {
    sendmsg_segments(s, data, segment, None)
}

/// As [`send_segments`], to `to` (an unconnected socket).
pub fn send_segments_to(s: &impl AsRawFd, data: &[u8], segment: usize, to: &SocketAddr) -> io::Result<usize> {
    sendmsg_segments(s, data, segment, Some(to))
}

fn sendmsg_segments(
    s: &impl AsRawFd,
    data: &[u8],
    segment: usize,
    to: Option<&SocketAddr>,
) -> io::Result<usize> {
    if segment > u16::MAX as usize {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "GSO segment above 65535 bytes"));
    }
    let seg = gso_segment(data.len(), segment);
    let mut ctrl = [0u64; CTRL_WORDS];
    let ctrl_len = send_ctrl(&mut ctrl, 0, seg);
    let mut iov = libc::iovec { iov_base: data.as_ptr() as *mut libc::c_void, iov_len: data.len() };
    // SAFETY: all-zero msghdr is valid (no name, no control).
    let mut h: libc::msghdr = unsafe { zeroed() };
    h.msg_iov = &mut iov;
    h.msg_iovlen = 1;
    let mut name = to.map(std_to_sockaddr);
    if let Some((ss, len)) = name.as_mut() {
        h.msg_name = (ss as *mut libc::sockaddr_storage).cast();
        h.msg_namelen = *len;
    }
    if ctrl_len > 0 {
        h.msg_control = ctrl.as_mut_ptr().cast();
        h.msg_controllen = ctrl_len;
    }
    // SAFETY: `h` points at `iov` (over `data`, only read by the kernel),
    // `name` and `ctrl`, all live for the call.
    let rc = unsafe { libc::sendmsg(s.as_raw_fd(), &h, 0) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(segment_count(data.len(), usize::from(seg)))
}

/// What this kernel offers for UDP offload, probed once on loopback.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UdpOffload {
    /// `setsockopt(SOL_UDP, UDP_GRO, 1)` succeeds.
    pub gro: bool,
    /// A two-segment `UDP_SEGMENT` send succeeds.
    pub gso: bool,
    /// Why one of them is missing (the kernel's error), if so.
    pub why_not: Option<String>,
}

/// Probes `UDP_GRO` and `UDP_SEGMENT` once per process: a loopback socket
/// sends itself one GSO message of two 8-byte datagrams (never off the
/// host) and reads them back before it is closed. Read back, because
/// loopback delivers in a softirq: a socket closed at once would let the
/// datagrams land later on a closed port, and a caller's UDP counters
/// (`NoPorts`, taken around its own traffic) would count them as its drops.
pub fn udp_offload() -> &'static UdpOffload {
    static PROBE: std::sync::OnceLock<UdpOffload> = std::sync::OnceLock::new();
    PROBE.get_or_init(|| {
        let probe = || -> io::Result<UdpOffload> {
            let s = udp_socket("127.0.0.1:0".parse().expect("literal"), &UdpOptions::default())?;
            let gro = set_gro(&s, true);
            s.connect(&s.local_addr()?)?;
            let gso = send_segments(&s, &[0u8; 16], 8);
            if gso.is_ok() {
                drain_own_probe(&s, 16);
            }
            let why_not = match (&gro, &gso) {
                (Err(e), _) => Some(e.to_string()),
                (_, Err(e)) => Some(format!("UDP_SEGMENT: {e}")),
                _ => None,
            };
            Ok(UdpOffload { gro: gro.is_ok(), gso: gso.is_ok(), why_not })
        };
        probe().unwrap_or_else(|e| UdpOffload { gro: false, gso: false, why_not: Some(e.to_string()) })
    })
}

/// Reads up to `bytes` back from `s` (waiting at most 200 ms in all), so
/// nothing it sent itself is still in flight when it is closed.
fn drain_own_probe(s: &Socket, bytes: usize) {
    let deadline = std::time::Instant::now() + Duration::from_millis(200);
    let mut got = 0;
    let mut buf = [std::mem::MaybeUninit::<u8>::uninit(); 64];
    while got < bytes {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() || !matches!(wait_readable(s, left), Ok(true)) {
            return;
        }
        match s.recv(&mut buf) {
            Ok(n) => got += n.max(1),
            Err(_) => return,
        }
    }
}

/// Outcome of [`Batch::send`].
#[derive(Debug, Default)]
pub struct SendResult {
    /// Messages the kernel took.
    pub sent: usize,
    /// Messages it refused.
    pub failed: usize,
    /// Why the first refused one was refused.
    pub first_error: Option<io::Error>,
}

/// Waits up to `timeout` for `s` to become readable (`poll`). `Ok(false)` on timeout.
pub fn wait_readable(s: &impl AsRawFd, timeout: Duration) -> io::Result<bool> {
    let mut p = libc::pollfd { fd: s.as_raw_fd(), events: libc::POLLIN, revents: 0 };
    // SAFETY: one valid pollfd.
    let rc = unsafe { libc::poll(&mut p, 1, poll_timeout_ms(timeout)) };
    if rc < 0 {
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::Interrupted {
            return Ok(false);
        }
        return Err(e);
    }
    Ok(rc > 0)
}

/// `poll`'s timeout for `timeout`, rounded up to a whole millisecond: rounded
/// down, a caller waiting for a moment less than 1 ms away would spin
/// through zero-timeout polls until it came.
fn poll_timeout_ms(timeout: Duration) -> libc::c_int {
    timeout.as_nanos().div_ceil(1_000_000).min(i32::MAX as u128) as libc::c_int
}

/// `accept4(listener, SOCK_NONBLOCK | SOCK_CLOEXEC)`: the next pending
/// connection, non-blocking. `EAGAIN` (`WouldBlock`) when there is none;
/// other errors as the kernel gave them (`EMFILE`, `ECONNABORTED`, ...).
pub fn accept4(listener: &impl AsRawFd) -> io::Result<std::net::TcpStream> {
    // SAFETY: null address pointers are allowed; the result is checked.
    let fd = unsafe {
        libc::accept4(
            listener.as_raw_fd(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a fresh connected socket we now own.
    Ok(unsafe { <std::net::TcpStream as std::os::fd::FromRawFd>::from_raw_fd(fd) })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(ip: &str) -> (Socket, Socket, SocketAddr) {
        let a: SocketAddr = format!("{ip}:0").parse().unwrap();
        let opts = UdpOptions { read_timeout: Some(Duration::from_secs(2)), ..Default::default() };
        let srv = udp_socket(a, &opts).unwrap();
        let cli = udp_socket(a, &opts).unwrap();
        let at = srv.local_addr().unwrap().as_socket().unwrap();
        (srv, cli, at)
    }

    #[test]
    fn segments_split_a_coalesced_buffer() {
        let r: Vec<_> = segments(1000, 100).collect();
        assert_eq!(r.len(), 10);
        assert!(r.iter().enumerate().all(|(k, x)| *x == (k * 100..k * 100 + 100)));
        let r: Vec<_> = segments(1037, 100).collect();
        assert_eq!(r.len(), 11);
        assert_eq!(r[10], 1000..1037, "the last segment is shorter");
        assert_eq!(segment_count(1037, 100), 11);
        assert_eq!(segments(50, 100).collect::<Vec<_>>(), vec![0..50], "shorter than a segment: one");
        assert_eq!(segments(100, 100).collect::<Vec<_>>(), vec![0..100]);
        assert_eq!(segments(300, 0).collect::<Vec<_>>(), vec![0..300], "0: not coalesced");
        assert_eq!(segments(0, 8).collect::<Vec<_>>(), vec![0..0], "an empty datagram is a datagram");
        assert_eq!((segment_count(0, 0), segment_count(100, 0), segment_count(101, 100)), (1, 1, 2));
        assert_eq!((gso_segment(100, 100), gso_segment(101, 100), gso_segment(5, 0)), (0, 100, 0));
    }

    #[test]
    fn offload_probe_matches_the_socket_calls() {
        let o = udp_offload();
        assert_eq!(o.why_not.is_none(), o.gro && o.gso, "{o:?}");
        let (srv, _, _) = pair("127.0.0.1");
        assert_eq!(set_gro(&srv, true).is_ok(), o.gro);
    }

    /// The datagrams `cli` (connected to `at`) sent as GSO, as `srv` sees
    /// them: one coalesced message with GRO on, else one each.
    fn gso_echo(ip: &str, pktinfo: bool, in_place: bool) {
        if !udp_offload().gro || !udp_offload().gso {
            panic!("this kernel lacks UDP GRO/GSO: {:?}", udp_offload());
        }
        let (srv, cli, at) = pair(ip);
        set_gro(&srv, true).unwrap();
        if pktinfo {
            set_pktinfo(&srv, at.is_ipv6()).unwrap();
        }
        cli.connect(&at.into()).unwrap();
        // 16 datagrams of 100 bytes, the last one 37.
        let data: Vec<u8> = (0..1537u32).map(|i| (i / 100) as u8).collect();
        assert_eq!(send_segments(&cli, &data, 100).unwrap(), 16);
        let mut rx = Batch::new(4, 65536, true);
        assert_eq!(rx.recv(&srv, false).unwrap(), 1, "one coalesced buffer");
        assert_eq!(rx.data(0), &data[..]);
        assert_eq!(rx.segment_size(0), Some(100));
        assert_eq!(rx.local_ip(0).is_some(), pktinfo);
        for r in segments(rx.data(0).len(), 100) {
            rx.data_mut(0)[r.start] ^= 0xff; // a stamp per datagram
        }
        let sent = if in_place {
            rx.queue_received();
            assert_eq!(rx.queued_datagrams(), 16);
            rx.send(&srv)
        } else {
            let mut tx = Batch::new(4, 65536, pktinfo);
            assert!(tx.push_from(&rx, 0));
            tx.send(&srv)
        };
        assert_eq!((sent.sent, sent.failed), (16, 0), "{:?}", sent.first_error);
        // The client has no GRO: the kernel splits the GSO reply.
        let mut back = Batch::new(32, 2048, false);
        let mut got = Vec::new();
        while got.len() < 16 {
            let n = back.recv(&cli, false).unwrap();
            for i in 0..n {
                assert_eq!(back.segment_size(i), None);
                got.push(back.data(i).to_vec());
            }
        }
        for (k, d) in got.iter().enumerate() {
            let mut want = data[k * 100..(k * 100 + 100).min(data.len())].to_vec();
            want[0] ^= 0xff;
            assert_eq!(d, &want, "datagram {k}");
        }
        assert_eq!(got[15].len(), 37);
    }

    #[test]
    fn gro_receive_and_gso_reply_v4_v6_in_place_and_copied() {
        for ip in ["127.0.0.1", "[::1]"] {
            for pktinfo in [false, true] {
                for in_place in [false, true] {
                    gso_echo(ip, pktinfo, in_place);
                }
            }
        }
    }

    #[test]
    fn a_gso_message_the_kernel_refuses_goes_one_datagram_at_a_time() {
        let (srv, cli, at) = pair("127.0.0.1");
        // More segments than UDP_MAX_SEGMENTS (64 or 128): EINVAL for GSO.
        let data = vec![7u8; 8 * 200];
        let mut tx = Batch::new(2, 4096, false);
        assert!(tx.push_segments(&data, 8, &at));
        assert!(tx.push(b"plain", &at));
        assert_eq!(tx.queued_datagrams(), 201);
        let r = tx.send(&cli);
        assert_eq!((r.sent, r.failed), (201, 0), "{:?}", r.first_error);
        let mut rx = Batch::new(64, 2048, false);
        let mut n = 0;
        while n < 201 {
            let k = rx.recv(&srv, false).unwrap();
            for i in 0..k {
                assert_eq!(rx.data(i).len(), if n + i == 200 { 5 } else { 8 });
            }
            n += k;
        }
        assert!(!tx.push_segments(&data, 70_000, &at), "segment above 65535");
    }

    #[test]
    fn tcp_listeners_share_a_port_only_with_reuseport() {
        let opts = TcpListenOptions { reuseport: true, defer_accept: true, ..Default::default() };
        let a = tcp_listener("127.0.0.1:0".parse().unwrap(), &opts).unwrap();
        let at = a.local_addr().unwrap().as_socket().unwrap();
        let b = tcp_listener(at, &opts).unwrap();
        assert_eq!(b.local_addr().unwrap().as_socket(), Some(at));
        assert!(getsockopt_int(a.as_raw_fd(), libc::IPPROTO_TCP, libc::TCP_DEFER_ACCEPT).unwrap() > 0);
        let e = tcp_listener(at, &TcpListenOptions::default()).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AddrInUse);
        assert!(e.to_string().contains("binding TCP 127.0.0.1:"), "{e}");
        let v6 = tcp_listener("[::1]:0".parse().unwrap(), &TcpListenOptions::default()).unwrap();
        assert!(v6.only_v6().unwrap());
        let _ = std::net::TcpStream::connect(at).unwrap();
    }

    fn batch_round_trip(ip: &str) {
        let (srv, cli, at) = pair(ip);
        let cli_addr = cli.local_addr().unwrap().as_socket().unwrap();
        let mut tx = Batch::new(8, 2048, false);
        for i in 0..5u8 {
            assert!(tx.push(&vec![i; 100 + i as usize], &at));
        }
        assert_eq!(tx.queued_bytes(), 510);
        let r = tx.send(&cli);
        assert_eq!((r.sent, r.failed), (5, 0));
        assert!(tx.is_empty());
        let mut rx = Batch::new(8, 2048, true);
        set_pktinfo(&srv, at.is_ipv6()).unwrap();
        let mut got = Vec::new();
        while got.len() < 5 {
            let n = rx.recv(&srv, false).unwrap();
            for i in 0..n {
                assert_eq!(rx.addr(i), Some(cli_addr));
                assert_eq!(rx.local_ip(i), Some(at.ip()));
                assert!(!rx.truncated(i));
                got.push(rx.data(i).to_vec());
            }
        }
        for (i, d) in got.iter().enumerate() {
            assert_eq!(d, &vec![i as u8; 100 + i]);
        }
        // Echo the last batch back with push_from (packet info copied).
        let mut echo = Batch::new(8, 2048, true);
        for i in 0..rx.len() {
            assert!(echo.push_from(&rx, i));
        }
        let k = rx.len();
        assert_eq!(echo.send(&srv).sent, k);
        let mut back = Batch::new(8, 2048, false);
        let mut n = 0;
        while n < k {
            n += back.recv(&cli, false).unwrap();
        }
        assert_eq!(back.addr(0), Some(at), "reply comes from the address the client sent to");
        assert!(matches!(back.recv(&cli, true), Err(e) if e.kind() == io::ErrorKind::WouldBlock));
    }

    #[test]
    fn round_trip_v4() {
        batch_round_trip("127.0.0.1");
    }

    #[test]
    fn round_trip_v6() {
        batch_round_trip("[::1]");
    }

    /// `queue_received` answers every datagram in place, to its own source,
    /// with its (rewritten) payload, from the address it was sent to; the
    /// batch then receives again as if fresh.
    fn echo_in_place(ip: &str, pktinfo: bool) {
        let (srv, cli, at) = pair(ip);
        if pktinfo {
            set_pktinfo(&srv, at.is_ipv6()).unwrap();
        }
        let mut rx = Batch::new(8, 2048, pktinfo);
        for round in 0..3u8 {
            let k = [5usize, 8, 1][round as usize];
            let mut tx = Batch::new(8, 2048, false);
            for i in 0..k {
                assert!(tx.push(&vec![round * 16 + i as u8; 60 + 37 * i], &at));
            }
            assert_eq!(tx.send(&cli).sent, k);
            let mut n = 0;
            while n < k {
                // One recvmmsg may return fewer: echo what came, then read on.
                let got = rx.recv(&srv, false).unwrap();
                for i in 0..got {
                    rx.data_mut(i)[0] ^= 0xff; // a stamp written in place
                }
                rx.queue_received();
                assert_eq!(rx.queued_bytes(), (n..n + got).map(|i| 60 + 37 * i).sum::<usize>());
                assert_eq!(rx.send(&srv).sent, got);
                n += got;
            }
            let mut back = Batch::new(8, 2048, false);
            let mut seen = Vec::new();
            while seen.len() < k {
                let m = back.recv(&cli, false).unwrap();
                for i in 0..m {
                    assert_eq!(back.addr(i), Some(at), "reply from the address the client sent to");
                    seen.push(back.data(i).to_vec());
                }
            }
            for (i, d) in seen.iter().enumerate() {
                let mut want = vec![round * 16 + i as u8; 60 + 37 * i];
                want[0] ^= 0xff;
                assert_eq!(d, &want, "round {round} datagram {i}");
            }
        }
    }

    #[test]
    fn echo_in_place_v4_and_v6_with_and_without_pktinfo() {
        for ip in ["127.0.0.1", "[::1]"] {
            for pktinfo in [false, true] {
                echo_in_place(ip, pktinfo);
            }
        }
    }

    #[test]
    fn batches_of_varying_size_reuse_cleanly() {
        let (srv, cli, at) = pair("127.0.0.1");
        let mut rx = Batch::new(4, 256, true);
        let mut tx = Batch::new(4, 256, false);
        for round in 0..6usize {
            let k = [4, 1, 3, 4, 2, 1][round];
            for i in 0..k {
                assert!(tx.push(&vec![round as u8; 10 + 50 * i], &at));
            }
            assert_eq!(tx.send(&cli).sent, k);
            let mut got = 0;
            while got < k {
                let n = rx.recv(&srv, false).unwrap();
                for i in 0..n {
                    assert_eq!(rx.data(i), &vec![round as u8; 10 + 50 * (got + i)][..]);
                    assert_eq!(rx.local_ip(i), None, "no pktinfo asked for");
                }
                got += n;
            }
            // Reuse the receive batch as a send batch and back again.
            if round == 2 {
                rx.clear();
                assert!(rx.push(b"ping", &cli.local_addr().unwrap().as_socket().unwrap()));
                assert_eq!(rx.send(&srv).sent, 1);
                let mut b = [0u8; 8];
                let c: &std::net::UdpSocket = &cli.try_clone().unwrap().into();
                assert_eq!(c.recv(&mut b).unwrap(), 4);
            }
        }
    }

    /// The receive after a send resets every message the send batch
    /// queued, also past the last receive's count (only messages that were
    /// touched are reset, see `Batch::dirty`).
    #[test]
    fn a_receive_resets_every_message_queued_since() {
        let (srv, cli, at) = pair("127.0.0.1");
        let back = cli.local_addr().unwrap().as_socket().unwrap();
        let mut b = Batch::new(4, 256, true);
        assert_eq!(cli.send_to(&[1u8; 100], &at.into()).unwrap(), 100);
        assert_eq!(b.recv(&srv, false).unwrap(), 1);
        // Queued since: 3 short messages (iov_len 4, no control buffer).
        b.clear();
        for _ in 0..3 {
            assert!(b.push(b"ping", &back));
        }
        assert_eq!(b.send(&srv).sent, 3);
        let c: &std::net::UdpSocket = &cli.try_clone().unwrap().into();
        let mut got = [0u8; 8];
        for _ in 0..3 {
            assert_eq!(c.recv(&mut got).unwrap(), 4);
        }
        for _ in 0..3 {
            assert_eq!(cli.send_to(&[7u8; 200], &at.into()).unwrap(), 200);
        }
        let mut n = 0;
        while n < 3 {
            let k = b.recv(&srv, false).unwrap();
            for i in 0..k {
                assert_eq!(b.data(i), &[7u8; 200][..], "message {} of the receive: whole", n + i);
                assert!(!b.truncated(i));
                assert_eq!(b.addr(i), Some(back));
            }
            n += k;
        }
    }

    /// `send_ctrl`'s in-place path (nothing to keep) and its copying path
    /// (packet info kept) both end with one `UDP_SEGMENT` of the segment size.
    #[test]
    fn send_ctrl_replaces_a_received_gro_cmsg_with_udp_segment() {
        fn cmsgs(ctrl: &[u64], len: usize) -> Vec<(i32, i32, usize)> {
            let mut out = Vec::new();
            // SAFETY: walks ctrl[..len] with CMSG_*, as the kernel would.
            unsafe {
                let mut h: libc::msghdr = zeroed();
                h.msg_control = ctrl.as_ptr() as *mut libc::c_void;
                h.msg_controllen = len;
                let mut c = libc::CMSG_FIRSTHDR(&h);
                while !c.is_null() {
                    out.push(((*c).cmsg_level, (*c).cmsg_type, (*c).cmsg_len));
                    c = libc::CMSG_NXTHDR(&h, c);
                }
            }
            out
        }
        fn put(ctrl: &mut [u64], at: usize, level: i32, ty: i32, data: &[u8]) -> usize {
            // SAFETY: writes one cmsghdr and its data at `at` (8-aligned, within ctrl: checked).
            unsafe {
                let space = libc::CMSG_SPACE(data.len() as u32) as usize;
                assert!(at.is_multiple_of(8) && at + space <= ctrl.len() * 8);
                let c = ctrl.as_mut_ptr().cast::<u8>().add(at).cast::<libc::cmsghdr>();
                (*c).cmsg_len = libc::CMSG_LEN(data.len() as u32) as usize;
                (*c).cmsg_level = level;
                (*c).cmsg_type = ty;
                std::ptr::copy_nonoverlapping(data.as_ptr(), libc::CMSG_DATA(c), data.len());
                at + space
            }
        }
        let seg_len = |ctrl: &[u64]| -> u16 {
            // SAFETY: the first cmsg's data is the u16 written by send_ctrl.
            unsafe { std::ptr::read_unaligned(libc::CMSG_DATA(ctrl.as_ptr().cast()).cast::<u16>()) }
        };
        // SAFETY: CMSG_LEN is arithmetic only.
        let segment = (libc::SOL_UDP, libc::UDP_SEGMENT, unsafe { libc::CMSG_LEN(2) } as usize);
        // A received UDP_GRO alone: replaced in place.
        let mut ctrl = [0u64; CTRL_WORDS];
        let len = put(&mut ctrl, 0, libc::SOL_UDP, libc::UDP_GRO, &510i32.to_ne_bytes());
        assert!(only_udp_cmsg(&ctrl, len));
        let n = send_ctrl(&mut ctrl, len, 510);
        assert_eq!(cmsgs(&ctrl, n), vec![segment]);
        assert_eq!(seg_len(&ctrl), 510);
        // Nothing to send as one datagram: no control message at all.
        let mut ctrl = [0u64; CTRL_WORDS];
        let len = put(&mut ctrl, 0, libc::SOL_UDP, libc::UDP_GRO, &510i32.to_ne_bytes());
        assert_eq!(send_ctrl(&mut ctrl, len, 0), 0);
        // Packet info first, then UDP_GRO: packet info kept, UDP_SEGMENT after it.
        let mut ctrl = [0u64; CTRL_WORDS];
        // SAFETY: an all-zero in_pktinfo is a valid value.
        let pi: libc::in_pktinfo = unsafe { zeroed() };
        // SAFETY: in_pktinfo is plain data; viewed as its bytes.
        let pi_bytes = unsafe {
            std::slice::from_raw_parts(
                (&pi as *const libc::in_pktinfo).cast::<u8>(),
                size_of::<libc::in_pktinfo>(),
            )
        };
        let at = put(&mut ctrl, 0, libc::IPPROTO_IP, libc::IP_PKTINFO, pi_bytes);
        let len = put(&mut ctrl, at, libc::SOL_UDP, libc::UDP_GRO, &510i32.to_ne_bytes());
        assert!(!only_udp_cmsg(&ctrl, len));
        let n = send_ctrl(&mut ctrl, len, 510);
        let got = cmsgs(&ctrl, n);
        assert_eq!(got.len(), 2, "{got:?}");
        assert_eq!((got[0].0, got[0].1), (libc::IPPROTO_IP, libc::IP_PKTINFO));
        assert_eq!(got[1], segment);
    }

    #[test]
    fn truncation_and_limits() {
        let (srv, cli, at) = pair("127.0.0.1");
        let mut tx = Batch::new(2, 64, false);
        assert!(!tx.push(&[0; 65], &at), "too long");
        cli.send_to(&[7u8; 100], &at.into()).unwrap();
        let mut rx = Batch::new(2, 64, false);
        assert_eq!(rx.recv(&srv, false).unwrap(), 1);
        assert!(rx.truncated(0));
        assert_eq!(rx.data(0).len(), 64);
        assert!(tx.push(&[1], &at) && tx.push(&[2], &at));
        assert!(!tx.push(&[3], &at), "full");
    }

    #[test]
    fn incoming_cpu_after_traffic() {
        let (srv, cli, at) = pair("127.0.0.1");
        assert_eq!(incoming_cpu(&srv).unwrap(), None);
        cli.send_to(b"x", &at.into()).unwrap();
        let mut b = [std::mem::MaybeUninit::new(0u8); 8];
        srv.recv(&mut b).unwrap();
        // Linux only records it for connected UDP sockets.
        assert_eq!(incoming_cpu(&srv).unwrap(), None, "unconnected: not recorded");
        srv.connect(&cli.local_addr().unwrap()).unwrap();
        cli.send_to(b"x", &at.into()).unwrap();
        srv.recv(&mut b).unwrap();
        let c = incoming_cpu(&srv).unwrap().expect("set after a datagram on a connected socket");
        assert!(crate::cpulist::online().contains(&c));
    }

    #[test]
    fn reuseport_and_port_in_use() {
        let opts = UdpOptions { reuseport: true, ..Default::default() };
        let a = udp_socket("127.0.0.1:0".parse().unwrap(), &opts).unwrap();
        let at = a.local_addr().unwrap().as_socket().unwrap();
        let _b = udp_socket(at, &opts).expect("second reuseport socket");
        let e = udp_socket(at, &UdpOptions::default()).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AddrInUse);
        assert!(e.to_string().contains(&at.to_string()), "{e}");
    }

    #[test]
    fn sockaddr_conversions() {
        for s in ["1.2.3.4:5", "[fe80::1%3]:80", "[::1]:65535"] {
            let a: SocketAddr = s.parse().unwrap();
            let (ss, len) = std_to_sockaddr(&a);
            assert_eq!(sockaddr_to_std(&ss, len), Some(a));
        }
    }

    #[test]
    fn poll_timeouts_round_up_to_a_millisecond() {
        assert_eq!(poll_timeout_ms(Duration::ZERO), 0);
        assert_eq!(poll_timeout_ms(Duration::from_nanos(1)), 1);
        assert_eq!(poll_timeout_ms(Duration::from_micros(900)), 1);
        assert_eq!(poll_timeout_ms(Duration::from_millis(5)), 5);
        assert_eq!(poll_timeout_ms(Duration::from_micros(5001)), 6);
        assert_eq!(poll_timeout_ms(Duration::from_secs(1 << 40)), i32::MAX);
    }

    #[test]
    fn wait_readable_times_out() {
        let (srv, cli, at) = pair("127.0.0.1");
        assert!(!wait_readable(&srv, Duration::from_millis(10)).unwrap());
        cli.send_to(b"x", &at.into()).unwrap();
        assert!(wait_readable(&srv, Duration::from_millis(1000)).unwrap());
    }

    #[test]
    fn accept4_nonblocking() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.set_nonblocking(true).unwrap();
        assert_eq!(accept4(&l).unwrap_err().kind(), io::ErrorKind::WouldBlock);
        let _c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let mut s = None;
        for _ in 0..100 {
            match accept4(&l) {
                Ok(x) => {
                    s = Some(x);
                    break;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    std::thread::sleep(Duration::from_millis(10))
                }
                Err(e) => panic!("accept4: {e}"),
            }
        }
        let s = s.expect("no connection accepted within 1 s");
        let mut buf = [0u8; 4];
        use std::io::Read;
        assert_eq!((&s).read(&mut buf).unwrap_err().kind(), io::ErrorKind::WouldBlock, "non-blocking");
    }
}
