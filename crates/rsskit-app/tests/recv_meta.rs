//! Per-datagram metadata: the destination from `IP_PKTINFO` on a wildcard
//! bind, misdirected datagrams, truncation, and the group errors.

use rsskit_app::{per_cpu_policy, Error, FlowTuple, L4Proto, Steer, UdpGroup, WorkerId};
use std::net::{SocketAddr, UdpSocket};
use std::time::Duration;

#[test]
fn shared_socket_sees_misdirected_flows_with_their_owner() {
    // Two workers, one shared socket: worker 0 reads everything, so the
    // flows worker 1 owns are reported misdirected.
    let cpu = rsskit_app::online_cpus()[0];
    let policy = per_cpu_policy(&[cpu, cpu]).unwrap();
    let group = UdpGroup::bind(&policy, Steer::Shared, "0.0.0.0:0".parse().unwrap()).unwrap();
    let port = group.local_addr().port();
    let mut socks = group.into_sockets();
    let s0 = &mut socks[0];
    s0.socket().set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let (mut own, mut other) = (0, 0);
    for i in 0..16 {
        let c = UdpSocket::bind("127.0.0.1:0").unwrap();
        let to: SocketAddr = format!("127.0.0.{}:{port}", 1 + i % 2).parse().unwrap();
        c.send_to(b"0123456789", to).unwrap();
        let mut buf = [0u8; 4];
        let (n, m) = s0.recv_meta(&mut buf).unwrap();
        assert_eq!((n, &buf, m.truncated), (4, b"0123", true));
        // The wildcard socket still knows where the datagram was sent.
        assert_eq!(m.to, to);
        assert_eq!(m.from, c.local_addr().unwrap());
        let owner =
            policy.worker_of(&FlowTuple::new(m.from.ip(), m.from.port(), to.ip(), port, L4Proto::Udp));
        assert_eq!((m.owner, m.worker, m.kernel_cpu), (owner, WorkerId(0), None));
        assert_eq!(m.misdirected, owner != WorkerId(0));
        if m.misdirected {
            other += 1
        } else {
            own += 1
        }
    }
    // UDP is hashed on the addresses by default: two destinations, and with
    // the Microsoft key 127.0.0.1 and 127.0.0.2 fall to different workers.
    assert!(own > 0 && other > 0, "own {own}, misdirected {other}");
}

#[test]
fn group_errors_are_matchable() {
    let policy = per_cpu_policy(&[0]).unwrap();
    let busy = UdpSocket::bind("127.0.0.1:0").unwrap();
    let e = UdpGroup::bind(&policy, Steer::Cpu, busy.local_addr().unwrap()).err().unwrap();
    assert!(matches!(e, Error::PortInUse { .. }), "{e:?}");
    // An address this host does not have.
    let e = UdpGroup::bind(&policy, Steer::Kernel, "192.0.2.77:0".parse().unwrap()).err().unwrap();
    assert!(matches!(e, Error::Group { mode: Steer::Kernel, .. }), "{e:?}");
    assert!(e.to_string().contains("192.0.2.77"), "{e}");
    assert!(matches!(per_cpu_policy(&[]), Err(Error::Policy(_))));
}

/// With GRO, a GSO burst of 16 datagrams (the last shorter) arrives as one
/// coalesced buffer; `recv_meta` still hands out one datagram per call, each
/// with its segment, and `send_segments` answers them with one GSO send.
#[test]
fn gro_receive_hands_out_segments_and_gso_answers_them() {
    let offload = rsskit_linux::socket::udp_offload();
    assert!(offload.gro && offload.gso, "this kernel lacks UDP GRO/GSO: {offload:?}");
    let cpu = rsskit_app::online_cpus()[0];
    let policy = per_cpu_policy(&[cpu]).unwrap();
    let group = UdpGroup::bind(&policy, Steer::Toeplitz, "127.0.0.1:0".parse().unwrap()).unwrap();
    let at = group.local_addr();
    let mut s = group.into_sockets().remove(0);
    s.set_gro(true).unwrap();
    s.socket().set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let c = UdpSocket::bind("127.0.0.1:0").unwrap();
    c.connect(at).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let burst: Vec<u8> = (0..15 * 100 + 37).map(|i: usize| (i / 100) as u8).collect();
    assert_eq!(rsskit_linux::socket::send_segments(&c, &burst, 100).unwrap(), 16);
    let mut got = Vec::new();
    for k in 0..16 {
        let mut buf = [0u8; 256];
        let (n, m) = s.recv_meta(&mut buf).unwrap();
        assert_eq!(&buf[..n], &burst[k * 100..(k * 100 + 100).min(burst.len())], "datagram {k}");
        assert_eq!(m.segment, Some(rsskit_app::Segment { index: k, count: 16, size: 100 }));
        assert_eq!((m.from, m.to, m.truncated), (c.local_addr().unwrap(), at, false));
        let owner =
            policy.worker_of(&FlowTuple::new(m.from.ip(), m.from.port(), at.ip(), at.port(), L4Proto::Udp));
        assert_eq!((m.owner, m.misdirected), (owner, owner != WorkerId(0)));
        got.extend_from_slice(&buf[..n]);
    }
    assert_eq!(got, burst);
    // A datagram on its own has no segment.
    c.send(b"single").unwrap();
    let mut buf = [0u8; 16];
    let (n, m) = s.recv_meta(&mut buf).unwrap();
    assert_eq!((&buf[..n], m.segment), (&b"single"[..], None));
    // One GSO reply of 16 datagrams; the client (no GRO) gets them apart.
    assert_eq!(s.send_segments(&burst, 100, c.local_addr().unwrap()).unwrap(), 16);
    for k in 0..16 {
        let mut b = [0u8; 256];
        let n = c.recv(&mut b).unwrap();
        assert_eq!(n, if k == 15 { 37 } else { 100 });
    }
}
