//! Outgoing flows whose replies land on the calling worker: the source
//! port chosen with the tuple finder, IPv4 and IPv6, TCP and connected UDP,
//! and the errors when the range has no (free) port in the worker's buckets.

use rsskit_app::{
    connect_tcp, connect_udp, reply_ports, ConnectOptions, Error, FindError, FlowTuple, HashConfig, L4Proto,
    RssKey, RssPolicy, WorkerId,
};
use std::net::{IpAddr, SocketAddr, TcpListener, UdpSocket};
use std::time::Duration;

fn policy(workers: usize, hash: HashConfig) -> RssPolicy {
    RssPolicy::with_workers(RssKey::microsoft(), hash, workers, None).unwrap()
}

/// The worker owning the replies `remote -> local`.
fn reply_owner(p: &RssPolicy, local: SocketAddr, remote: SocketAddr, proto: L4Proto) -> WorkerId {
    p.worker_of(&FlowTuple::new(remote.ip(), remote.port(), local.ip(), local.port(), proto))
}

#[test]
fn tcp_replies_owned_by_the_caller_v4_and_v6() {
    let p = policy(4, HashConfig::default());
    for host in ["127.0.0.1", "::1"] {
        let ip: IpAddr = host.parse().unwrap();
        let l = TcpListener::bind(SocketAddr::new(ip, 0)).unwrap();
        let remote = l.local_addr().unwrap();
        for w in 0..4 {
            let s = connect_tcp(&p, WorkerId(w), remote, &ConnectOptions::default()).unwrap();
            let local = s.local_addr().unwrap();
            let (_acc, peer) = l.accept().unwrap();
            assert_eq!(peer, local);
            assert!((32768..=60999).contains(&local.port()));
            assert_eq!(reply_owner(&p, local, remote, L4Proto::Tcp), WorkerId(w), "{host} {local}");
        }
    }
}

#[test]
fn udp_replies_owned_by_the_caller_v4_and_v6() {
    let p = policy(4, HashConfig::default().with_udp_4tuple(true));
    for host in ["127.0.0.1", "::1"] {
        let ip: IpAddr = host.parse().unwrap();
        let server = UdpSocket::bind(SocketAddr::new(ip, 0)).unwrap();
        server.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let remote = server.local_addr().unwrap();
        for w in 0..4 {
            let c = connect_udp(&p, WorkerId(w), remote, &ConnectOptions::default()).unwrap();
            c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            let local = c.local_addr().unwrap();
            assert_eq!(reply_owner(&p, local, remote, L4Proto::Udp), WorkerId(w), "{host} {local}");
            c.send(b"hi").unwrap();
            let mut buf = [0u8; 16];
            let (n, from) = server.recv_from(&mut buf).unwrap();
            assert_eq!((&buf[..n], from), (&b"hi"[..], local));
            server.send_to(b"back", from).unwrap();
            assert_eq!(c.recv(&mut buf).unwrap(), 4);
        }
    }
}

#[test]
fn reply_ports_are_exactly_the_owned_ones() {
    // Brute force over a range: the finder lists every port whose replies
    // the worker owns, and nothing else.
    let p = policy(3, HashConfig::default());
    let local: IpAddr = "10.1.2.3".parse().unwrap();
    let remote: SocketAddr = "10.9.8.7:443".parse().unwrap();
    for w in 0..3 {
        let got =
            reply_ports(&p, WorkerId(w), local, remote, L4Proto::Tcp, 50000..=50999, usize::MAX).unwrap();
        let want: Vec<u16> = (50000..=50999)
            .filter(|&port| {
                reply_owner(&p, SocketAddr::new(local, port), remote, L4Proto::Tcp) == WorkerId(w)
            })
            .collect();
        assert_eq!(got, want);
    }
}

#[test]
fn no_port_in_the_bucket_is_a_clear_error() {
    let p = policy(4, HashConfig::default());
    let local: IpAddr = "127.0.0.1".parse().unwrap();
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let remote = l.local_addr().unwrap();
    let owned = reply_ports(&p, WorkerId(1), local, remote, L4Proto::Tcp, 40000..=41000, usize::MAX).unwrap();
    // A one-port range holding a port another worker owns.
    let other = (40000..=41000).find(|x| !owned.contains(x)).unwrap();
    let opts = ConnectOptions { local_ip: Some(local), ports: other..=other, timeout: None };
    let e = connect_tcp(&p, WorkerId(1), remote, &opts).unwrap_err();
    assert!(
        matches!(
            e,
            Error::NoPortInBucket { worker: 1, reason: FindError::NoSolution { reachable: true, .. }, .. }
        ),
        "{e:?}"
    );
    assert!(e.to_string().contains("no source port in"), "{e}");
    // A range whose only owned port is taken.
    let port = owned[0];
    let range = owned[0]..=owned[1] - 1;
    let _busy = TcpListener::bind(SocketAddr::new(local, port)).unwrap();
    let opts = ConnectOptions { local_ip: Some(local), ports: range, timeout: None };
    let e = connect_tcp(&p, WorkerId(1), remote, &opts).unwrap_err();
    assert!(matches!(e, Error::NoFreePort { worker: 1, candidates: 1, .. }), "{e:?}");
    assert!(e.to_string().contains("in use"), "{e}");
}

#[test]
fn two_tuple_udp_is_all_or_nothing() {
    // UDP hashed on the addresses only: the port cannot choose the bucket.
    let p = policy(2, HashConfig::default());
    let local: IpAddr = "127.0.0.1".parse().unwrap();
    let remote: SocketAddr = "127.0.0.1:9".parse().unwrap();
    let owner = reply_owner(&p, SocketAddr::new(local, 1), remote, L4Proto::Udp);
    let all = reply_ports(&p, owner, local, remote, L4Proto::Udp, 1000..=1009, usize::MAX).unwrap();
    assert_eq!(all, (1000..=1009).collect::<Vec<_>>());
    let other = WorkerId(1 - owner.0);
    let e = reply_ports(&p, other, local, remote, L4Proto::Udp, 1000..=1009, usize::MAX).unwrap_err();
    assert!(matches!(
        e,
        Error::NoPortInBucket { reason: FindError::NoSolution { reachable: false, .. }, .. }
    ));
}

#[test]
fn bad_worker_and_mixed_families() {
    let p = policy(2, HashConfig::default());
    let remote: SocketAddr = "127.0.0.1:9".parse().unwrap();
    let e = reply_ports(&p, WorkerId(2), "127.0.0.1".parse().unwrap(), remote, L4Proto::Tcp, 1..=2, 1);
    assert!(matches!(e, Err(Error::NoSuchWorker { worker: 2, workers: 2 })));
    let e = reply_ports(&p, WorkerId(0), "::1".parse().unwrap(), remote, L4Proto::Tcp, 1..=2, 1);
    assert!(matches!(e, Err(Error::Tuple(_))), "{e:?}");
    #[allow(clippy::reversed_empty_ranges)]
    let e = reply_ports(&p, WorkerId(0), "127.0.0.1".parse().unwrap(), remote, L4Proto::Tcp, 5..=1, 1);
    assert!(matches!(e, Err(Error::NoPortInBucket { reason: FindError::EmptyRange, .. })));
}

/// Both reply-port pickers (the library's `reply_ports` and the HTTP load
/// generator's) agree with a brute-force search over every port of small
/// ranges: the ports whose reply `remote -> local:port` the worker owns.
#[test]
fn reply_port_pickers_agree_with_brute_force() {
    // The Microsoft key, the symmetric one and a fixed pseudo-random one.
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mixed: Vec<u8> = (0..52)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    let keys = [RssKey::microsoft(), RssKey::symmetric(), RssKey::from_bytes(&mixed).unwrap()];
    let flows: [(&str, &str); 3] = [
        ("10.0.0.2", "10.0.0.1:80"),
        ("192.0.2.77", "198.51.100.3:8443"),
        ("2001:db8::2", "[2001:db8::1]:80"),
    ];
    for key in keys {
        for workers in [1usize, 3, 4] {
            let p = RssPolicy::with_workers(key.clone(), HashConfig::default(), workers, None).unwrap();
            for (local, remote) in flows {
                let local: IpAddr = local.parse().unwrap();
                let remote: SocketAddr = remote.parse().unwrap();
                for range in [40000..=40255u16, 1..=300, 65400..=65535] {
                    for w in (0..workers as u32).map(WorkerId) {
                        let brute: Vec<u16> = range
                            .clone()
                            .filter(|&port| {
                                reply_owner(&p, SocketAddr::new(local, port), remote, L4Proto::Tcp) == w
                            })
                            .collect();
                        let app = match reply_ports(
                            &p,
                            w,
                            local,
                            remote,
                            L4Proto::Tcp,
                            range.clone(),
                            usize::MAX,
                        ) {
                            Ok(ports) => ports,
                            Err(Error::NoPortInBucket { reason: FindError::NoSolution { .. }, .. }) => {
                                Vec::new()
                            }
                            Err(e) => panic!("unexpected error {e}"),
                        };
                        let load = rsskit_runtime::http::load::reply_ports(
                            &key,
                            remote,
                            local,
                            p.mask(),
                            &p.buckets_of(w),
                            range.clone(),
                        );
                        assert_eq!(
                            app, brute,
                            "library picker, worker {w:?} of {workers}, {local} <- {remote}"
                        );
                        assert_eq!(
                            load, brute,
                            "load picker, worker {w:?} of {workers}, {local} <- {remote}"
                        );
                    }
                }
            }
        }
    }
}
