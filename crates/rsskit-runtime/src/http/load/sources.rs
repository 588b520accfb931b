//! Where connections come from: source addresses, source ports picked by
//! the tuple finder, and every worker's list of local addresses. No I/O
//! except [`plan_sources`] asking the kernel for its route's source address.

use super::{LoadConfig, LoadError};
use crate::udp_load::IpNet;
use rsskit_core::finder::{TupleQuery, Vary};
use rsskit_core::{HashType, RssKey, WorkerId};
use serde::Serialize;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::str::FromStr;

/// How source ports are chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SrcPorts {
    /// The kernel's ephemeral ports.
    Kernel,
    /// Tuple finder, forward direction: the flow's Toeplitz hash (TCP
    /// 4-tuple) lands in a bucket of the server worker paired with the
    /// opening client worker (a server with `--steer toeplitz`, or a NIC
    /// hashing the requests).
    Server,
    /// Tuple finder, reply direction: the server's packets to us hash into
    /// a bucket of the opening worker's CPU (the client host's RSS).
    Reply,
}

impl FromStr for SrcPorts {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "kernel" => Ok(SrcPorts::Kernel),
            "server" => Ok(SrcPorts::Server),
            "reply" => Ok(SrcPorts::Reply),
            _ => Err(format!("'{s}' is not a source-port mode: kernel, server or reply")),
        }
    }
}

/// The source addresses to use: up to 256 hosts of `net` (IPv4: not the
/// network address), or none (let the kernel choose).
pub fn source_addresses(net: Option<&IpNet>, connections: usize) -> Vec<IpAddr> {
    let Some(net) = net else { return Vec::new() };
    let bits: u32 = if net.addr.is_ipv4() { 32 } else { 128 };
    let host_bits = bits - u32::from(net.prefix_len);
    let hosts: u128 = if host_bits >= 127 { u128::MAX } else { 1u128 << host_bits };
    // Enough addresses for ~20,000 connections each, at least 4, at most 256.
    let want = (connections / 20_000 + 1).clamp(4, 256) as u128;
    let (base, first) = match net.addr {
        IpAddr::V4(a) => {
            let m = if host_bits == 32 { 0 } else { u32::MAX << host_bits };
            (u128::from(u32::from(a) & m), u128::from(host_bits >= 2))
        }
        IpAddr::V6(a) => {
            let m = if host_bits == 128 { 0 } else { u128::MAX << host_bits };
            (u128::from(a) & m, u128::from(host_bits >= 2))
        }
    };
    let n = want.min(hosts - first).max(1);
    (0..n)
        .map(|i| {
            let v = base + first + i;
            if net.addr.is_ipv4() {
                IpAddr::V4(Ipv4Addr::from(v as u32))
            } else {
                IpAddr::V6(Ipv6Addr::from(v))
            }
        })
        .collect()
}

/// Destination ports (our side, in the reply `server -> client`) whose
/// reply hash lands in one of `buckets` under `mask`: the tuple finder
/// varying the reply's destination port.
pub fn reply_ports(
    key: &RssKey,
    server: SocketAddr,
    client: IpAddr,
    mask: u32,
    buckets: &[u32],
    ports: std::ops::RangeInclusive<u16>,
) -> Vec<u16> {
    let ht = if server.is_ipv6() { HashType::TcpIpv6 } else { HashType::TcpIpv4 };
    let values: Vec<u32> = buckets.iter().map(|b| b & mask).collect();
    // No port (mixed families, no solution in the range): an empty list.
    TupleQuery::new(key, ht, server.ip(), server.port(), client, 0)
        .vary(Vary::DstPort(ports))
        .buckets(mask, &values)
        .find()
        .map(|found| found.into_iter().map(|f| f.dst_port).collect())
        .unwrap_or_default()
}

/// Where worker `w`'s connections come from.
#[derive(Debug, Clone, Default)]
pub struct SourcePlan {
    /// Local addresses to bind (port 0 = the kernel picks, at connect time).
    pub locals: Vec<SocketAddr>,
}

/// Plans every worker's local addresses. Without `--sources` the tuple
/// finder needs the address the kernel would use: asked with a connected
/// UDP socket (no packet sent).
pub fn plan_sources(cfg: &LoadConfig) -> Result<Vec<SourcePlan>, LoadError> {
    let mut addrs = source_addresses(cfg.sources.as_ref(), cfg.connections);
    let dst = cfg.url.addr;
    if cfg.src_ports != SrcPorts::Kernel && addrs.is_empty() {
        let probe = std::net::UdpSocket::bind(if dst.is_ipv4() { "0.0.0.0:0" } else { "[::]:0" })
            .and_then(|s| s.connect(dst).map(|_| s))
            .and_then(|s| s.local_addr())
            .map_err(LoadError::LocalAddress)?;
        addrs.push(probe.ip());
    }
    plan_sources_from(cfg, &addrs)
}

/// [`plan_sources`] over the given source addresses (no I/O).
pub fn plan_sources_from(cfg: &LoadConfig, addrs: &[IpAddr]) -> Result<Vec<SourcePlan>, LoadError> {
    let dst = cfg.url.addr;
    let key = cfg.policy.key();
    let mut plans = vec![SourcePlan::default(); cfg.policy.workers()];
    for (w, plan) in plans.iter_mut().enumerate() {
        match cfg.src_ports {
            SrcPorts::Kernel => plan.locals = addrs.iter().map(|&a| SocketAddr::new(a, 0)).collect(),
            SrcPorts::Server => {
                let server = &cfg.server_policy;
                // Client worker w aims at server worker w (mod their count).
                let buckets = server.buckets_of(WorkerId((w % server.workers()) as u32));
                let ht = if dst.is_ipv6() { HashType::TcpIpv6 } else { HashType::TcpIpv4 };
                let mut per_addr = Vec::new();
                for &a in addrs {
                    let found = TupleQuery::new(key, ht, a, 0, dst.ip(), dst.port())
                        .vary(Vary::SrcPort(1024..=65535))
                        .buckets(server.mask(), &buckets)
                        .find()
                        .map_err(|source| LoadError::Finder { src: a, dst, source })?;
                    per_addr
                        .push(found.into_iter().map(|f| SocketAddr::new(a, f.src_port)).collect::<Vec<_>>());
                }
                plan.locals = interleave(per_addr);
            }
            SrcPorts::Reply => {
                let client = &cfg.policy;
                let buckets = client.buckets_of(WorkerId(w as u32));
                let per_addr = addrs
                    .iter()
                    .map(|&a| {
                        reply_ports(key, dst, a, client.mask(), &buckets, 1024..=65535)
                            .into_iter()
                            .map(|p| SocketAddr::new(a, p))
                            .collect::<Vec<_>>()
                    })
                    .collect();
                plan.locals = interleave(per_addr);
            }
        }
        if cfg.src_ports != SrcPorts::Kernel && plan.locals.is_empty() {
            return Err(LoadError::NoSourcePort { worker: w });
        }
    }
    Ok(plans)
}

/// Round-robin over the lists: consecutive connections use different
/// source addresses.
fn interleave(lists: Vec<Vec<SocketAddr>>) -> Vec<SocketAddr> {
    let longest = lists.iter().map(Vec::len).max().unwrap_or(0);
    let mut out = Vec::with_capacity(lists.iter().map(Vec::len).sum());
    for i in 0..longest {
        for l in &lists {
            if let Some(&a) = l.get(i) {
                out.push(a);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::tests::{config, policy};
    use super::*;
    use rsskit_core::{FlowTuple, L4Proto, Toeplitz};

    #[test]
    fn sources() {
        let n: IpNet = "127.0.0.0/8".parse().unwrap();
        let a = source_addresses(Some(&n), 100_000);
        assert_eq!(a.len(), 6);
        assert_eq!(a[0], "127.0.0.1".parse::<IpAddr>().unwrap());
        let one: IpNet = "10.1.2.3/32".parse().unwrap();
        assert_eq!(source_addresses(Some(&one), 10), vec!["10.1.2.3".parse::<IpAddr>().unwrap()]);
        assert!(source_addresses(None, 10).is_empty());
    }

    #[test]
    fn reply_ports_land_in_the_buckets() {
        let key = RssKey::microsoft();
        let server: SocketAddr = "10.0.0.1:80".parse().unwrap();
        let client: IpAddr = "10.0.0.2".parse().unwrap();
        let t = Toeplitz::new(&key);
        for buckets in [vec![0u32], vec![1, 3, 5, 7]] {
            let ports = reply_ports(&key, server, client, 7, &buckets, 1024..=65535);
            assert!(ports.len() > 1000, "{}", ports.len());
            for &p in ports.iter().step_by(97) {
                let reply = FlowTuple::new(server.ip(), 80, client, p, L4Proto::Tcp);
                let h = t.hash(reply.input(HashType::TcpIpv4).unwrap().as_bytes());
                assert!(buckets.contains(&(h & 7)), "port {p} hash {h:08x}");
            }
            // Every port not returned is in another bucket.
            let set: std::collections::HashSet<u16> = ports.iter().copied().collect();
            for p in (1024..=65535u16).step_by(101).filter(|p| !set.contains(p)) {
                let reply = FlowTuple::new(server.ip(), 80, client, p, L4Proto::Tcp);
                let h = t.hash(reply.input(HashType::TcpIpv4).unwrap().as_bytes());
                assert!(!buckets.contains(&(h & 7)));
            }
        }
    }

    #[test]
    fn kernel_ports_bind_every_address_with_port_zero() {
        let mut cfg = config();
        cfg.policy = policy(&[0, 1]);
        let addrs: Vec<IpAddr> = vec!["10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap()];
        let plans = plan_sources_from(&cfg, &addrs).unwrap();
        assert_eq!(plans.len(), 2);
        for p in &plans {
            let want: Vec<SocketAddr> = addrs.iter().map(|&a| SocketAddr::new(a, 0)).collect();
            assert_eq!(p.locals, want);
        }
        // No --sources: the kernel picks the address too.
        assert!(plan_sources_from(&cfg, &[]).unwrap().iter().all(|p| p.locals.is_empty()));
    }

    #[test]
    fn server_ports_hash_to_the_paired_server_worker_and_alternate_addresses() {
        let mut cfg = config();
        cfg.policy = policy(&[0, 1]);
        cfg.server_policy = policy(&[0, 1, 2]);
        cfg.src_ports = SrcPorts::Server;
        let addrs: Vec<IpAddr> = vec!["10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap()];
        let plans = plan_sources_from(&cfg, &addrs).unwrap();
        let server = &cfg.server_policy;
        let t = Toeplitz::new(cfg.policy.key());
        let dst = cfg.url.addr;
        for (w, p) in plans.iter().enumerate() {
            assert!(p.locals.len() > 1000, "worker {w}: {}", p.locals.len());
            // Interleaved: consecutive connections change address.
            assert_ne!(p.locals[0].ip(), p.locals[1].ip());
            let buckets = server.buckets_of(WorkerId(w as u32));
            for l in p.locals.iter().step_by(211) {
                let f = FlowTuple::new(l.ip(), l.port(), dst.ip(), dst.port(), L4Proto::Tcp);
                let h = t.hash(f.input(HashType::TcpIpv4).unwrap().as_bytes());
                assert!(buckets.contains(&(h & server.mask())), "worker {w} {l}: {h:08x}");
            }
        }
    }
}
