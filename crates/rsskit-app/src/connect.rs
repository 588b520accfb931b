//! Outgoing flows whose replies land on the calling worker (FreeBSD's
//! "later task": hash the outgoing flow once its source port is known).
//!
//! The NIC hashes the *replies*, `remote -> local`, so the source port we
//! choose is the replies' destination port. The Toeplitz hash is linear in
//! it, so the tuple finder ([`crate::finder::TupleQuery`], varying the
//! reply's destination port) lists
//! the ports whose replies land in any bucket the worker owns, without
//! trying them one by one; then the first one free to bind is used.

use crate::Error;
use rsskit_core::finder::{FindError, TupleQuery, Vary};
use rsskit_core::{FlowTuple, L4Proto, RssPolicy, WorkerId};
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use std::io;
use std::net::{IpAddr, SocketAddr, TcpStream, UdpSocket};
use std::ops::RangeInclusive;
use std::time::Duration;

/// Options for [`connect_tcp`] and [`connect_udp`].
#[derive(Debug, Clone)]
pub struct ConnectOptions {
    /// The local address; `None`: the one the routing table picks for the
    /// peer.
    pub local_ip: Option<IpAddr>,
    /// Source ports to choose from (default: Linux's ephemeral range,
    /// 32768-60999).
    pub ports: RangeInclusive<u16>,
    /// TCP connect timeout (`None`: the kernel's).
    pub timeout: Option<Duration>,
}

impl Default for ConnectOptions {
    fn default() -> Self {
        ConnectOptions { local_ip: None, ports: 32768..=60999, timeout: None }
    }
}

/// Source ports in `ports` (ascending, at most `max`) for which the
/// replies of the flow `local_ip:port <-> remote` hash into a bucket owned
/// by `worker`.
///
/// ```
/// use rsskit_app::{per_cpu_policy, reply_ports, FlowTuple, L4Proto, WorkerId};
/// let p = per_cpu_policy(&[0, 1, 2, 3])?;
/// let local = "10.0.0.1".parse().unwrap();
/// let remote = "10.0.0.2:80".parse().unwrap();
/// let ports = reply_ports(&p, WorkerId(3), local, remote, L4Proto::Tcp, 40000..=40100, 10)?;
/// assert!(!ports.is_empty());
/// for port in ports {
///     // The reply, remote -> local:port, is owned by worker 3.
///     let reply = FlowTuple::new(remote.ip(), 80, local, port, L4Proto::Tcp);
///     assert_eq!(p.worker_of(&reply), WorkerId(3));
/// }
/// # Ok::<(), rsskit_app::Error>(())
/// ```
pub fn reply_ports(
    policy: &RssPolicy,
    worker: WorkerId,
    local_ip: IpAddr,
    remote: SocketAddr,
    proto: L4Proto,
    ports: RangeInclusive<u16>,
    max: usize,
) -> Result<Vec<u16>, Error> {
    if worker.index() >= policy.workers() {
        return Err(Error::NoSuchWorker { worker: worker.0, workers: policy.workers() });
    }
    let (lo, hi) = (*ports.start(), *ports.end());
    let none = |reason| Error::NoPortInBucket { worker: worker.0, remote, lo, hi, reason };
    if lo > hi {
        return Err(none(FindError::EmptyRange));
    }
    let reply = FlowTuple::new(remote.ip(), remote.port(), local_ip, 0, proto);
    let ht = policy.hash_type(reply.is_ipv6(), proto, false);
    // Mixed families are the caller's tuple error, not "no port".
    reply.input(ht)?;
    // Our port is the reply's destination port.
    let found = TupleQuery::new(policy.key(), ht, remote.ip(), remote.port(), local_ip, 0)
        .vary(Vary::DstPort(ports))
        .buckets(policy.mask(), &policy.buckets_of(worker))
        .max(max)
        .find()
        .map_err(none)?;
    Ok(found.into_iter().map(|f| f.dst_port).collect())
}

/// The local address the routing table picks for `remote` (a UDP socket
/// connected, never sending).
fn route_source(remote: SocketAddr) -> Result<IpAddr, Error> {
    let any: SocketAddr =
        if remote.is_ipv6() { "[::]:0".parse() } else { "0.0.0.0:0".parse() }.expect("literal address");
    let s = UdpSocket::bind(any).map_err(|e| Error::io("route lookup socket", e))?;
    s.connect(remote).map_err(|e| Error::io(format!("no route to {remote}"), e))?;
    Ok(s.local_addr().map_err(|e| Error::io("getsockname", e))?.ip())
}

/// Binds a socket of `ty` to the first free port among the candidates and
/// hands it to `finish` (connect). `AddrInUse` moves on to the next port.
fn bind_owned<T>(
    policy: &RssPolicy,
    worker: WorkerId,
    remote: SocketAddr,
    opts: &ConnectOptions,
    proto: L4Proto,
    finish: impl Fn(Socket) -> Result<T, Error>,
) -> Result<T, Error> {
    let local_ip = match opts.local_ip {
        Some(ip) => ip,
        None => route_source(remote)?,
    };
    let candidates = reply_ports(policy, worker, local_ip, remote, proto, opts.ports.clone(), usize::MAX)?;
    let (domain, ty, p) = match proto {
        L4Proto::Tcp => (Domain::for_address(remote), Type::STREAM, Protocol::TCP),
        _ => (Domain::for_address(remote), Type::DGRAM, Protocol::UDP),
    };
    for &port in &candidates {
        let s = Socket::new(domain, ty, Some(p)).map_err(|e| Error::io("creating socket", e))?;
        let local = SocketAddr::new(local_ip, port);
        match s.bind(&SockAddr::from(local)) {
            Ok(()) => return finish(s),
            Err(e) if e.kind() == io::ErrorKind::AddrInUse => continue,
            Err(e) => return Err(Error::io(format!("binding {local}"), e)),
        }
    }
    let (lo, hi) = (*opts.ports.start(), *opts.ports.end());
    Err(Error::NoFreePort { worker: worker.0, remote, lo, hi, candidates: candidates.len() })
}

/// A TCP connection to `remote` from a source port whose replies land in
/// a bucket `worker` owns (IPv4 or IPv6).
pub fn connect_tcp(
    policy: &RssPolicy,
    worker: WorkerId,
    remote: SocketAddr,
    opts: &ConnectOptions,
) -> Result<TcpStream, Error> {
    bind_owned(policy, worker, remote, opts, L4Proto::Tcp, |s| {
        let to = SockAddr::from(remote);
        match opts.timeout {
            Some(t) => s.connect_timeout(&to, t),
            None => s.connect(&to),
        }
        .map_err(|e| Error::io(format!("connecting to {remote}"), e))?;
        Ok(s.into())
    })
}

/// A UDP socket connected to `remote` from a source port whose replies
/// land in a bucket `worker` owns (IPv4 or IPv6).
pub fn connect_udp(
    policy: &RssPolicy,
    worker: WorkerId,
    remote: SocketAddr,
    opts: &ConnectOptions,
) -> Result<UdpSocket, Error> {
    bind_owned(policy, worker, remote, opts, L4Proto::Udp, |s| {
        s.connect(&SockAddr::from(remote)).map_err(|e| Error::io(format!("connecting to {remote}"), e))?;
        Ok(s.into())
    })
}
