//! Steered socket groups and what each datagram or connection carries.

use crate::Error;
use rsskit_core::{CpuId, FlowTuple, L4Proto, RssPolicy, WorkerId};
use rsskit_linux::socket::{incoming_cpu, segment_count, segments, Batch, TcpListenOptions, UdpOptions};
use rsskit_runtime::steer::{self, Steer, SteerError, SteerSpec, Transport};
use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::Arc;

/// RSS metadata of one received datagram: FreeBSD's `IP_RECVFLOWID` and
/// `IP_RECVRSSBUCKETID`, computed with the policy.
///
/// Linux hands no per-datagram hash or CPU to user space, so the hash is the
/// policy's Toeplitz hash of the datagram's tuple: what a NIC programmed
/// with the policy (`rsskit apply`) computes. The kernel's processing CPU is
/// known exactly in [`Steer::Cpu`] mode (the kernel picked this socket
/// because it processed the datagram on that CPU), not in the others.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecvMeta {
    /// Bytes copied into the caller's buffer.
    pub len: usize,
    /// Whether the datagram was longer than the buffer (the rest is lost).
    pub truncated: bool,
    /// The sender.
    pub from: SocketAddr,
    /// The local address it was sent to (`IP_PKTINFO`).
    pub to: SocketAddr,
    /// The flow's Toeplitz hash under the policy.
    pub hash: u32,
    /// The hash's bucket.
    pub bucket: u32,
    /// The worker owning the bucket.
    pub owner: WorkerId,
    /// The worker of the socket that received it.
    pub worker: WorkerId,
    /// The CPU the kernel processed it on, where known ([`Steer::Cpu`]).
    pub kernel_cpu: Option<CpuId>,
    /// The datagram reached a worker that does not own its bucket.
    pub misdirected: bool,
    /// With [`RssUdpSocket::set_gro`]: the datagram arrived coalesced with
    /// others of its flow, and is this segment of them.
    pub segment: Option<Segment>,
}

/// Where a datagram sat in a coalesced (`UDP_GRO`) buffer: the kernel
/// hands the datagrams of one flow that arrive together as one buffer of
/// `count` segments of `size` bytes (the last may be shorter);
/// [`RssUdpSocket::recv_meta`] still returns them one by one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    /// This datagram's index, `0..count`.
    pub index: usize,
    /// Datagrams in the buffer.
    pub count: usize,
    /// Segment size (every datagram but the last is this long).
    pub size: usize,
}

/// RSS metadata of an accepted TCP connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnMeta {
    /// The client.
    pub peer: SocketAddr,
    /// The local address.
    pub local: SocketAddr,
    /// The flow's Toeplitz hash under the policy.
    pub hash: u32,
    /// The hash's bucket.
    pub bucket: u32,
    /// The worker owning the bucket.
    pub owner: WorkerId,
    /// The worker of the listener that accepted it.
    pub worker: WorkerId,
    /// The CPU the kernel processed the connection's last segment on
    /// (`SO_INCOMING_CPU`).
    pub kernel_cpu: Option<CpuId>,
    /// The connection reached a worker that does not own its bucket.
    pub misdirected: bool,
}

fn flow_meta(policy: &RssPolicy, from: SocketAddr, to: SocketAddr, proto: L4Proto) -> (u32, u32, WorkerId) {
    let hash = policy.hash_tuple(&FlowTuple::new(from.ip(), from.port(), to.ip(), to.port(), proto));
    let bucket = policy.bucket(hash);
    (hash, bucket, policy.worker_of_bucket(bucket))
}

fn build(
    policy: &RssPolicy,
    mode: Steer,
    bind: SocketAddr,
    transport: Transport,
) -> Result<steer::SteeredGroup, Error> {
    steer::build(&SteerSpec { mode, bind, policy, transport }).map_err(|e| match e {
        SteerError::UdpPortInUse { .. } | SteerError::TcpPortInUse { .. } => Error::PortInUse { bind },
        SteerError::Socket(e) if e.kind() == std::io::ErrorKind::AddrInUse => Error::PortInUse { bind },
        e => Error::Group { mode, bind, message: rsskit_runtime::error_chain(&e) },
    })
}

/// One UDP socket of a steered group, owned by one worker.
pub struct RssUdpSocket {
    sock: UdpSocket,
    policy: Arc<RssPolicy>,
    worker: WorkerId,
    kernel_cpu: Option<CpuId>,
    local: SocketAddr,
    batch: Batch,
    /// The coalesced buffer in `batch` being handed out: next segment index.
    next_segment: usize,
}

impl RssUdpSocket {
    /// The socket, for sending and for options.
    pub fn socket(&self) -> &UdpSocket {
        &self.sock
    }

    /// The worker this socket belongs to.
    pub fn worker(&self) -> WorkerId {
        self.worker
    }

    /// The plain socket (for an event loop of the caller's own).
    pub fn into_socket(self) -> UdpSocket {
        self.sock
    }

    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Turns `UDP_GRO` on (or off), where the kernel has it
    /// ([`rsskit_linux::socket::udp_offload`]): datagrams of one flow that
    /// arrive together then cost one system call for all of them.
    /// [`recv_meta`](Self::recv_meta) still returns one datagram per call
    /// (the rest of a coalesced buffer without a system call), each with
    /// its [`Segment`]. Off by default: an application reading the plain
    /// socket ([`into_socket`](Self::into_socket)) would get coalesced
    /// buffers it does not expect.
    pub fn set_gro(&mut self, on: bool) -> Result<(), Error> {
        rsskit_linux::socket::set_gro(&self.sock, on).map_err(|e| Error::io("UDP_GRO", e))
    }

    /// Receives one datagram (blocking, up to the socket's read timeout)
    /// into `buf` with its RSS metadata. With [`set_gro`](Self::set_gro),
    /// one datagram of a coalesced buffer at a time.
    pub fn recv_meta(&mut self, buf: &mut [u8]) -> io::Result<(usize, RecvMeta)> {
        let pending = !self.batch.is_empty() && self.next_segment > 0;
        if !pending {
            self.batch.recv(&self.sock, false)?;
            self.next_segment = 0;
        }
        let whole = self.batch.data(0);
        let size = self.batch.segment_size(0).unwrap_or(0);
        let count = segment_count(whole.len(), size);
        let index = self.next_segment;
        let data = &whole[segments(whole.len(), size).nth(index).expect("index < count")];
        self.next_segment = if index + 1 < count { index + 1 } else { 0 };
        let n = data.len().min(buf.len());
        buf[..n].copy_from_slice(&data[..n]);
        let from = self.batch.addr(0).ok_or_else(|| io::Error::other("datagram without an IP source"))?;
        let to = SocketAddr::new(self.batch.local_ip(0).unwrap_or(self.local.ip()), self.local.port());
        let (hash, bucket, owner) = flow_meta(&self.policy, from, to, L4Proto::Udp);
        let meta = RecvMeta {
            len: n,
            truncated: self.batch.truncated(0) || n < data.len(),
            from,
            to,
            hash,
            bucket,
            owner,
            worker: self.worker,
            kernel_cpu: self.kernel_cpu,
            misdirected: owner != self.worker,
            segment: (count > 1).then_some(Segment { index, count, size }),
        };
        Ok((n, meta))
    }

    /// Sends `buf` to `to`.
    pub fn send_to(&self, buf: &[u8], to: SocketAddr) -> io::Result<usize> {
        self.sock.send_to(buf, to)
    }

    /// Sends `buf` to `to` as datagrams of `segment` bytes each (the last
    /// may be shorter): one `UDP_SEGMENT` (GSO) send where the kernel takes
    /// it, else one `send_to` per datagram. Returns the datagrams sent.
    pub fn send_segments(&self, buf: &[u8], segment: usize, to: SocketAddr) -> io::Result<usize> {
        match rsskit_linux::socket::send_segments_to(&self.sock, buf, segment, &to) {
            Ok(n) => Ok(n),
            Err(e) if matches!(e.raw_os_error(), Some(libc::EIO) | Some(libc::EINVAL)) && segment > 0 => {
                // No segmentation on this route or device: one at a time.
                for r in segments(buf.len(), segment) {
                    self.sock.send_to(&buf[r], to)?;
                }
                Ok(segment_count(buf.len(), segment))
            }
            Err(e) => Err(e),
        }
    }
}

/// A steered group of UDP sockets: socket `i` belongs to worker `i`.
pub struct UdpGroup {
    local: SocketAddr,
    sockets: Vec<RssUdpSocket>,
    extra: Vec<RssUdpSocket>,
}

impl UdpGroup {
    /// Binds one UDP socket per worker of `policy` on `bind` (port 0: one
    /// port for the whole group) and attaches `mode`'s program.
    ///
    /// ```
    /// use rsskit_app::{per_cpu_policy, Error, Steer, UdpGroup};
    /// let policy = per_cpu_policy(&[0])?;
    /// let g = UdpGroup::bind(&policy, Steer::Toeplitz, "127.0.0.1:0".parse().unwrap())?;
    /// // The port is now taken: a second group is refused, with a matchable error.
    /// let again = UdpGroup::bind(&policy, Steer::Toeplitz, g.local_addr());
    /// assert!(matches!(again, Err(Error::PortInUse { .. })));
    /// # Ok::<(), Error>(())
    /// ```
    pub fn bind(policy: &RssPolicy, mode: Steer, bind: SocketAddr) -> Result<UdpGroup, Error> {
        let st =
            build(policy, mode, bind, Transport::Udp(UdpOptions { pktinfo: true, ..Default::default() }))?;
        let policy = Arc::new(policy.clone());
        let cpu_known = mode == Steer::Cpu;
        let n = st.sockets.len();
        let wrap = |s: socket2::Socket, worker: usize, cpu: Option<CpuId>| RssUdpSocket {
            sock: s.into(),
            policy: policy.clone(),
            worker: WorkerId(worker as u32),
            kernel_cpu: cpu,
            local: st.local,
            batch: Batch::new(1, 65536, true),
            next_segment: 0,
        };
        let sockets = st
            .sockets
            .into_iter()
            .enumerate()
            .map(|(i, s)| wrap(s, i, policy.cpu_of(WorkerId(i as u32)).filter(|_| cpu_known)))
            .collect();
        let extra = st
            .extra
            .into_iter()
            .enumerate()
            .map(|(j, (cpu, s))| wrap(s, j % n, Some(CpuId(cpu as u32))))
            .collect();
        Ok(UdpGroup { local: st.local, sockets, extra })
    }

    /// The bound address (with the port picked for port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// The sockets in worker order. Drops the extra sockets of
    /// [`UdpGroup::split`]: use this only when the policy has a worker on
    /// every online CPU or the mode is not [`Steer::Cpu`].
    pub fn into_sockets(self) -> Vec<RssUdpSocket> {
        self.sockets
    }

    /// The sockets in worker order, and the [`Steer::Cpu`] group's extra
    /// sockets for online CPUs without a worker (each already assigned to a
    /// worker, see [`RssUdpSocket::worker`]; that worker must read it too).
    pub fn split(self) -> (Vec<RssUdpSocket>, Vec<RssUdpSocket>) {
        (self.sockets, self.extra)
    }
}

/// One TCP listener of a steered group, owned by one worker.
pub struct RssTcpListener {
    listener: TcpListener,
    policy: Arc<RssPolicy>,
    worker: WorkerId,
}

impl RssTcpListener {
    /// The listener.
    pub fn listener(&self) -> &TcpListener {
        &self.listener
    }

    /// The worker this listener belongs to.
    pub fn worker(&self) -> WorkerId {
        self.worker
    }

    /// The plain listener.
    pub fn into_listener(self) -> TcpListener {
        self.listener
    }

    /// Accepts a connection (blocking) with its RSS metadata.
    pub fn accept_meta(&self) -> io::Result<(TcpStream, ConnMeta)> {
        let (stream, peer) = self.listener.accept()?;
        let local = stream.local_addr()?;
        let (hash, bucket, owner) = flow_meta(&self.policy, peer, local, L4Proto::Tcp);
        let kernel_cpu = incoming_cpu(&stream)?.map(|c| CpuId(c as u32));
        let meta = ConnMeta {
            peer,
            local,
            hash,
            bucket,
            owner,
            worker: self.worker,
            kernel_cpu,
            misdirected: owner != self.worker,
        };
        Ok((stream, meta))
    }
}

/// A steered group of TCP listeners: listener `i` belongs to worker `i`.
pub struct TcpGroup {
    local: SocketAddr,
    listeners: Vec<RssTcpListener>,
}

impl TcpGroup {
    /// Binds one blocking TCP listener per worker of `policy` on `bind` and
    /// attaches `mode`'s program (it sees the SYN).
    ///
    /// ```
    /// use rsskit_app::{per_cpu_policy, Steer, TcpGroup};
    /// let policy = per_cpu_policy(&[0, 0])?;
    /// let g = TcpGroup::bind(&policy, Steer::Kernel, "127.0.0.1:0".parse().unwrap())?;
    /// let c = std::net::TcpStream::connect(g.local_addr()).unwrap();
    /// assert_eq!(g.into_listeners().len(), 2);
    /// # drop(c);
    /// # Ok::<(), rsskit_app::Error>(())
    /// ```
    pub fn bind(policy: &RssPolicy, mode: Steer, bind: SocketAddr) -> Result<TcpGroup, Error> {
        let st = build(policy, mode, bind, Transport::Tcp(TcpListenOptions::default()))?;
        let policy = Arc::new(policy.clone());
        let mut listeners = Vec::with_capacity(st.sockets.len());
        for (i, s) in st.sockets.into_iter().enumerate() {
            s.set_nonblocking(false).map_err(|e| Error::io("clearing O_NONBLOCK", e))?;
            listeners.push(RssTcpListener {
                listener: s.into(),
                policy: policy.clone(),
                worker: WorkerId(i as u32),
            });
        }
        Ok(TcpGroup { local: st.local, listeners })
    }

    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// The listeners in worker order.
    pub fn into_listeners(self) -> Vec<RssTcpListener> {
        self.listeners
    }
}
