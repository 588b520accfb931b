//! Source planning: which source address/port each stream uses so that it
//! lands in the server bucket it is meant for (the tuple finder), with the
//! host (route lookup, local addresses, binding) behind [`Host`] so the
//! choice itself is tested without sockets.

use super::{LoadConfig, UdpLoadError};
use rsskit_core::{finder, CpuId, FlowTuple, HashType, L4Proto, RssPolicy, WorkerId};
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use std::collections::{BTreeMap, HashSet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

type Result<T, E = UdpLoadError> = std::result::Result<T, E>;

/// The server's RSS policy as the client must assume it (key, hash types,
/// buckets, worker `i` on CPU `cpus[i]`), with the UDP questions the load
/// generator asks of it.
#[derive(Debug, Clone)]
pub struct ServerTable {
    policy: RssPolicy,
}

impl ServerTable {
    /// The table of the server's policy, built once by the caller (the
    /// CLI from `--server-cpus`, `--key`, `--bits`; the demo from its own
    /// server).
    pub fn from_policy(policy: RssPolicy) -> Self {
        ServerTable { policy }
    }

    /// The policy.
    pub fn policy(&self) -> &RssPolicy {
        &self.policy
    }

    /// The hash type the server uses for UDP of this family.
    pub fn hash_type(&self, ipv6: bool) -> HashType {
        self.policy.hash_type(ipv6, L4Proto::Udp, false)
    }

    /// Hash of a datagram `src -> dst`, as the server computes it.
    pub fn hash(&self, src: SocketAddr, dst: SocketAddr) -> u32 {
        let t = FlowTuple::new(src.ip(), src.port(), dst.ip(), dst.port(), L4Proto::Udp);
        self.policy.hash_tuple_as(&t, self.hash_type(dst.is_ipv6()))
    }

    /// The worker owning `bucket`.
    pub fn owner(&self, bucket: u32) -> Option<WorkerId> {
        (bucket < self.policy.buckets()).then(|| self.policy.worker_of_bucket(bucket))
    }

    /// The CPU of the worker owning `bucket`.
    pub fn owner_cpu(&self, bucket: u32) -> Option<CpuId> {
        self.policy.cpu_of(self.owner(bucket)?)
    }

    /// Worker CPUs in worker order.
    pub fn cpus(&self) -> Vec<CpuId> {
        self.policy.worker_cpus().to_vec()
    }

    /// One line saying which hash configuration is in force.
    pub fn describe(&self, ipv6: bool) -> String {
        let ht = self.hash_type(ipv6);
        let how = if ht.has_ports() {
            "UDP 4-tuple hashing: streams are spread by source port"
        } else {
            "UDP hashed on addresses only (FreeBSD default): streams are spread by source address"
        };
        format!(
            "hash {ht} ({how}); {} buckets over server CPUs {}",
            self.policy.buckets(),
            rsskit_linux::cpulist::format(&self.cpus().iter().map(|c| c.as_usize()).collect::<Vec<_>>())
        )
    }
}

/// Where sources come from when spreading.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpNet {
    /// The network address.
    pub addr: IpAddr,
    /// Bits of the prefix.
    pub prefix_len: u8,
}

impl std::str::FromStr for IpNet {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let (a, l) = s.split_once('/').ok_or_else(|| format!("'{s}' is not a CIDR network (ADDR/LEN)"))?;
        let addr: IpAddr = a.parse().map_err(|_| format!("'{a}' in '{s}' is not an IP address"))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix_len: u8 = l
            .parse()
            .ok()
            .filter(|&n: &u8| n <= max)
            .ok_or_else(|| format!("prefix length '{l}' in '{s}' must be 0..={max}"))?;
        Ok(IpNet { addr, prefix_len })
    }
}

impl std::fmt::Display for IpNet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix_len)
    }
}

/// One planned stream: its socket (bound and connected) and where it lands.
#[derive(Debug)]
pub struct Stream<S = Socket> {
    /// Stream number (carried in every probe).
    pub id: u32,
    /// The bound source address and port.
    pub src: SocketAddr,
    /// The flow's Toeplitz hash, as the server computes it.
    pub hash: u32,
    /// Its bucket.
    pub bucket: u32,
    /// The server worker owning the bucket, if any.
    pub owner: Option<WorkerId>,
    pub(super) socket: S,
}

/// What planning needs from the host.
pub trait Host {
    /// The socket type the host hands out (a real `Socket`, or a test double).
    type Sock;
    /// The local address the kernel picks to reach `target`.
    fn route_source(&mut self, target: SocketAddr) -> Result<IpAddr>;
    /// Local addresses of one family, loopback first.
    fn local_addrs(&mut self, ipv6: bool) -> Vec<IpAddr>;
    /// A socket bound to `src` and connected to `target`; `None` if `src`
    /// cannot be bound (address not local, port in use).
    fn bind(&mut self, src: SocketAddr, target: SocketAddr) -> Result<Option<Self::Sock>>;
    /// The address the socket is bound to.
    fn local_addr(&self, s: &Self::Sock) -> Result<SocketAddr>;
}

/// The real host: UDP sockets with big buffers.
pub struct Sockets;

fn new_socket(target: SocketAddr) -> Result<Socket> {
    let dom = if target.is_ipv4() { Domain::IPV4 } else { Domain::IPV6 };
    let s = Socket::new(dom, Type::DGRAM, Some(Protocol::UDP))
        .map_err(|source| UdpLoadError::Io { what: "creating a UDP socket".into(), source })?;
    // Big buffers so that the client is not where datagrams get lost.
    let _ = s.set_recv_buffer_size(4 << 20);
    let _ = s.set_send_buffer_size(1 << 20);
    Ok(s)
}

fn connect_err(source: std::io::Error, target: SocketAddr) -> UdpLoadError {
    match source.raw_os_error() {
        Some(libc::ENETUNREACH) | Some(libc::EHOSTUNREACH) => UdpLoadError::Unreachable { target, source },
        _ => UdpLoadError::Connect { target, source },
    }
}

impl Host for Sockets {
    type Sock = Socket;

    fn route_source(&mut self, target: SocketAddr) -> Result<IpAddr> {
        let s = new_socket(target)?;
        s.connect(&SockAddr::from(target)).map_err(|e| connect_err(e, target))?;
        Ok(self.local_addr(&s)?.ip())
    }

    fn local_addrs(&mut self, ipv6: bool) -> Vec<IpAddr> {
        rsskit_linux::addrs::local_addrs(ipv6)
    }

    fn bind(&mut self, src: SocketAddr, target: SocketAddr) -> Result<Option<Socket>> {
        let s = new_socket(target)?;
        match s.bind(&SockAddr::from(src)) {
            Ok(()) => {}
            Err(e) if matches!(e.raw_os_error(), Some(libc::EADDRNOTAVAIL) | Some(libc::EADDRINUSE)) => {
                return Ok(None)
            }
            Err(source) => return Err(UdpLoadError::Bind { src, source }),
        }
        s.connect(&SockAddr::from(target)).map_err(|e| connect_err(e, target))?;
        Ok(Some(s))
    }

    fn local_addr(&self, s: &Socket) -> Result<SocketAddr> {
        s.local_addr()
            .map_err(|source| UdpLoadError::Io { what: "getsockname".into(), source })?
            .as_socket()
            .ok_or(UdpLoadError::NoIpAddress)
    }
}

/// Builds the streams: sockets bound and connected, sources chosen so the
/// streams land in distinct buckets when `cfg.spread`. Prints nothing.
pub fn plan_streams(cfg: &LoadConfig) -> Result<Vec<Stream>> {
    plan_with(cfg, &mut Sockets)
}

/// [`plan_streams`] on any host.
pub fn plan_with<H: Host>(cfg: &LoadConfig, host: &mut H) -> Result<Vec<Stream<H::Sock>>> {
    cfg.validate()?;
    let target = cfg.target;
    let t = &cfg.table;
    let mut streams = Vec::with_capacity(cfg.streams);
    let push = |host: &H, socket: H::Sock, streams: &mut Vec<Stream<H::Sock>>| -> Result<()> {
        let src = host.local_addr(&socket)?;
        let hash = t.hash(src, target);
        let bucket = t.policy().bucket(hash);
        let id = streams.len() as u32;
        streams.push(Stream { id, src, hash, bucket, owner: t.owner(bucket), socket });
        Ok(())
    };
    if !cfg.spread {
        let any: IpAddr =
            if target.is_ipv4() { Ipv4Addr::UNSPECIFIED.into() } else { Ipv6Addr::UNSPECIFIED.into() };
        for _ in 0..cfg.streams {
            let s = host.bind(SocketAddr::new(any, 0), target)?.ok_or(UdpLoadError::NoFreePort)?;
            push(host, s, &mut streams)?;
        }
        return Ok(streams);
    }
    let ipv6 = target.is_ipv6();
    let ht = t.hash_type(ipv6);
    let mask = t.policy().mask();
    let nb = t.policy().buckets();
    // Streams take the buckets in order, round-robin (bucket b is owned by
    // worker b % workers, so the workers are covered first).
    let bucket_of = |i: usize| (i as u32) % nb;
    let mut used_addrs: HashSet<IpAddr> = HashSet::new();
    if ht.has_ports() {
        // 4-tuple: one source address (the route's), distinct source ports.
        let src = host.route_source(target)?;
        for i in 0..cfg.streams {
            let bucket = bucket_of(i);
            let found = finder::TupleQuery::new(t.policy().key(), ht, src, 0, target.ip(), target.port())
                .vary(finder::Vary::SrcPort(1024..=65535))
                .bucket(mask, bucket)
                .max(256)
                .find()
                .map_err(|e| UdpLoadError::Finder { bucket, msg: e.to_string() })?;
            let mut ok = None;
            for f in found {
                if let Some(s) = host.bind(SocketAddr::new(f.src, f.src_port), target)? {
                    ok = Some(s);
                    break;
                }
            }
            let s = ok.ok_or_else(|| {
                UdpLoadError::NoSource(format!("no free source port of {src} lands in bucket {bucket}"))
            })?;
            push(host, s, &mut streams)?;
        }
        return Ok(streams);
    }
    // Address-only hashing: distinct source addresses.
    let net = match cfg.src_net {
        Some(n) => Some(n),
        None if target.ip().is_loopback() && !ipv6 => {
            Some(IpNet { addr: Ipv4Addr::new(127, 0, 0, 0).into(), prefix_len: 8 })
        }
        None => None,
    };
    match net {
        Some(net) => {
            let locals: HashSet<IpAddr> = host.local_addrs(ipv6).into_iter().collect();
            for i in 0..cfg.streams {
                let bucket = bucket_of(i);
                let found =
                    finder::TupleQuery::new(t.policy().key(), ht, net.addr, 0, target.ip(), target.port())
                        .vary(finder::Vary::SrcAddr { prefix_len: net.prefix_len })
                        .bucket(mask, bucket)
                        .max(4096)
                        .find()
                        .map_err(|e| UdpLoadError::Finder { bucket, msg: format!("in {net}: {e}") })?;
                // Addresses assigned here first, then any other (127/8 and
                // AnyIP routes make a whole prefix bindable).
                let (mine, others): (Vec<IpAddr>, Vec<IpAddr>) = found
                    .iter()
                    .map(|f| f.src)
                    .filter(|a| *a != target.ip() && !used_addrs.contains(a) && !is_special(*a))
                    .partition(|a| locals.contains(a));
                let mut ok = None;
                for a in mine.into_iter().chain(others.into_iter().take(64)) {
                    if let Some(s) = host.bind(SocketAddr::new(a, 0), target)? {
                        used_addrs.insert(a);
                        ok = Some(s);
                        break;
                    }
                }
                let s = ok.ok_or(UdpLoadError::NoSourceAddress { bucket, net: Some(net), ipv6 })?;
                push(host, s, &mut streams)?;
            }
        }
        None => {
            // No pool given: the machine's own addresses of the family.
            let mut by_bucket: BTreeMap<u32, Vec<IpAddr>> = BTreeMap::new();
            for a in host.local_addrs(ipv6) {
                if a == target.ip() && !a.is_loopback() {
                    continue;
                }
                let h = t.hash(SocketAddr::new(a, 0), target);
                by_bucket.entry(t.policy().bucket(h)).or_default().push(a);
            }
            for i in 0..cfg.streams {
                let bucket = bucket_of(i);
                let cands = by_bucket.get(&bucket).cloned().unwrap_or_default();
                let mut ok = None;
                for a in cands.iter().filter(|a| !used_addrs.contains(a)).chain(cands.iter()) {
                    if let Some(s) = host.bind(SocketAddr::new(*a, 0), target)? {
                        used_addrs.insert(*a);
                        ok = Some(s);
                        break;
                    }
                }
                let s = ok.ok_or(UdpLoadError::NoSourceAddress { bucket, net: None, ipv6 })?;
                push(host, s, &mut streams)?;
            }
        }
    }
    Ok(streams)
}

/// Network and broadcast-ish addresses we never bind.
fn is_special(a: IpAddr) -> bool {
    match a {
        IpAddr::V4(v) => {
            let o = v.octets();
            o[3] == 0 || o[3] == 255
        }
        IpAddr::V6(v) => v.is_unspecified() || v.is_multicast(),
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::cfg;
    use super::*;
    use std::collections::BTreeSet;

    /// A host with a given route source and local addresses, where every
    /// source in `bindable` (all when `None`) binds, and port 0 gets the
    /// next ephemeral port.
    struct FakeHost {
        route: IpAddr,
        locals: Vec<IpAddr>,
        bindable: Option<Box<dyn Fn(SocketAddr) -> bool>>,
        next_port: u16,
        tried: Vec<SocketAddr>,
        bound: HashSet<SocketAddr>,
    }

    impl FakeHost {
        fn new(route: &str) -> Self {
            FakeHost {
                route: route.parse().unwrap(),
                locals: vec![],
                bindable: None,
                next_port: 40000,
                tried: vec![],
                bound: HashSet::new(),
            }
        }
    }

    impl Host for FakeHost {
        type Sock = SocketAddr;
        fn route_source(&mut self, _: SocketAddr) -> Result<IpAddr> {
            Ok(self.route)
        }
        fn local_addrs(&mut self, _: bool) -> Vec<IpAddr> {
            self.locals.clone()
        }
        fn bind(&mut self, mut src: SocketAddr, _: SocketAddr) -> Result<Option<SocketAddr>> {
            self.tried.push(src);
            // Like the kernel: a taken address:port does not bind again.
            if self.bindable.as_ref().is_some_and(|f| !f(src))
                || (src.port() != 0 && self.bound.contains(&src))
            {
                return Ok(None);
            }
            if src.port() == 0 {
                src.set_port(self.next_port);
                self.next_port += 1;
            }
            self.bound.insert(src);
            Ok(Some(src))
        }
        fn local_addr(&self, s: &SocketAddr) -> Result<SocketAddr> {
            Ok(*s)
        }
    }

    fn check_landing(c: &LoadConfig, s: &[Stream<SocketAddr>]) {
        for (i, st) in s.iter().enumerate() {
            assert_eq!(st.id as usize, i);
            assert_eq!(st.socket, st.src);
            assert_eq!(st.bucket, i as u32 % c.table.policy().buckets(), "stream {i} takes bucket {i}");
            assert_eq!(c.table.policy().bucket(c.table.hash(st.src, c.target)), st.bucket);
            assert_eq!(st.owner, c.table.owner(st.bucket));
        }
    }

    #[test]
    fn four_tuple_picks_ports_of_the_route_source_landing_in_each_bucket() {
        let mut c = cfg(6, true);
        c.target = "10.0.0.1:9000".parse().unwrap();
        let mut h = FakeHost::new("10.0.0.2");
        let s = plan_with(&c, &mut h).unwrap();
        check_landing(&c, &s);
        assert!(s.iter().all(|s| s.src.ip() == h.route && s.src.port() >= 1024));
        let ports: BTreeSet<u16> = s.iter().map(|s| s.src.port()).collect();
        assert_eq!(ports.len(), 6);
    }

    #[test]
    fn four_tuple_skips_ports_in_use() {
        let mut c = cfg(2, true);
        c.target = "10.0.0.1:9000".parse().unwrap();
        let first = plan_with(&c, &mut FakeHost::new("10.0.0.2")).unwrap();
        let taken = first[0].src;
        let mut h = FakeHost::new("10.0.0.2");
        h.bindable = Some(Box::new(move |a| a != taken));
        let s = plan_with(&c, &mut h).unwrap();
        check_landing(&c, &s);
        assert_ne!(s[0].src, taken);
        assert!(h.tried.contains(&taken));
    }

    #[test]
    fn two_tuple_picks_distinct_addresses_of_the_source_net() {
        let mut c = cfg(4, false);
        c.target = "10.0.0.1:9000".parse().unwrap();
        c.src_net = Some("10.9.0.0/16".parse().unwrap());
        let mut h = FakeHost::new("10.0.0.2");
        let s = plan_with(&c, &mut h).unwrap();
        check_landing(&c, &s);
        let addrs: BTreeSet<IpAddr> = s.iter().map(|s| s.src.ip()).collect();
        assert_eq!(addrs.len(), 4, "address-only hashing needs distinct addresses");
        for st in &s {
            assert!(matches!(st.src.ip(), IpAddr::V4(v) if v.octets()[..2] == [10, 9]), "{}", st.src);
            assert!(!is_special(st.src.ip()));
        }
    }

    #[test]
    fn two_tuple_prefers_addresses_assigned_here() {
        let mut c = cfg(1, false);
        c.target = "10.0.0.1:9000".parse().unwrap();
        c.src_net = Some("10.9.0.0/16".parse().unwrap());
        // Find an address of the net in bucket 0, make it the only local one.
        let any = plan_with(&c, &mut FakeHost::new("10.0.0.2")).unwrap();
        let mut candidates = Vec::new();
        for a in 1..=254u8 {
            let ip: IpAddr = Ipv4Addr::new(10, 9, 0, a).into();
            if c.table.policy().bucket(c.table.hash(SocketAddr::new(ip, 0), c.target)) == 0 {
                candidates.push(ip);
            }
        }
        let local = *candidates
            .iter()
            .find(|a| **a != any[0].src.ip())
            .expect("some address of 10.9.0/24 in bucket 0");
        let mut h = FakeHost::new("10.0.0.2");
        h.locals = vec![local];
        let s = plan_with(&c, &mut h).unwrap();
        assert_eq!(s[0].src.ip(), local);
        assert_eq!(h.tried.len(), 1, "the local one is tried first");
    }

    #[test]
    fn two_tuple_without_a_net_uses_local_addresses_and_says_which_bucket_has_none() {
        let mut c = cfg(2, false);
        c.target = "10.0.0.1:9000".parse().unwrap();
        let mut h = FakeHost::new("10.0.0.2");
        // Only addresses in bucket 0: the stream for bucket 1 has none.
        h.locals = (2..60u8)
            .map(|a| IpAddr::from([10, 0, 0, a]))
            .filter(|&a| c.table.policy().bucket(c.table.hash(SocketAddr::new(a, 0), c.target)) == 0)
            .collect();
        assert!(!h.locals.is_empty());
        let e = plan_with(&c, &mut h).unwrap_err();
        assert!(matches!(e, UdpLoadError::NoSourceAddress { bucket: 1, net: None, .. }));
        assert!(e.to_string().contains("lands in bucket 1"), "{e}");
        c.streams = 1;
        let s = plan_with(&c, &mut h).unwrap();
        check_landing(&c, &s);
    }

    #[test]
    fn unbindable_pool_is_a_clear_error() {
        let mut c = cfg(1, false);
        c.target = "10.0.0.1:9000".parse().unwrap();
        c.src_net = Some("10.9.0.0/16".parse().unwrap());
        let mut h = FakeHost::new("10.0.0.2");
        h.bindable = Some(Box::new(|_| false));
        let e = plan_with(&c, &mut h).unwrap_err().to_string();
        assert!(e.contains("ip route add local 10.9.0.0/16 dev lo"), "{e}");
    }

    #[test]
    fn no_spread_binds_ephemeral_ports() {
        let mut c = cfg(3, false);
        c.spread = false;
        let mut h = FakeHost::new("127.0.0.1");
        let s = plan_with(&c, &mut h).unwrap();
        assert_eq!(s.len(), 3);
        assert!(h.tried.iter().all(|a| a.port() == 0 && a.ip().is_unspecified()));
        for st in &s {
            assert_eq!(c.table.policy().bucket(c.table.hash(st.src, c.target)), st.bucket);
        }
        h.bindable = Some(Box::new(|_| false));
        assert!(matches!(plan_with(&c, &mut h).unwrap_err(), UdpLoadError::NoFreePort));
    }
}
