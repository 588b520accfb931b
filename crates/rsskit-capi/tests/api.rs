//! The C API called from Rust: null pointers, short buffers and bad values
//! are error codes; results agree with the Rust policy.

use rsskit_app::{FlowTuple, HashConfig, L4Proto, RssKey, RssPolicy, WorkerId};
use rsskit_capi::*;
use rsskit_linux::socket::std_to_sockaddr;
use std::ffi::CStr;
use std::net::{SocketAddr, UdpSocket};
use std::ptr::{null, null_mut};
use std::time::Duration;

fn sa(a: &str) -> (libc::sockaddr_storage, libc::socklen_t) {
    std_to_sockaddr(&a.parse::<SocketAddr>().unwrap())
}

fn p(ss: &libc::sockaddr_storage) -> *const libc::sockaddr {
    (ss as *const libc::sockaddr_storage).cast()
}

fn last_error() -> String {
    // SAFETY: rss_last_error returns a valid C string.
    unsafe { CStr::from_ptr(rss_last_error()) }.to_string_lossy().into_owned()
}

/// A configuration of workers on CPUs 0, 0, 0 (3 workers, 8 buckets), UDP 4-tuple.
fn config() -> *mut RssConfig {
    let mut c = null_mut();
    let types = RSS_HASHTYPE_RSS_IPV4
        | RSS_HASHTYPE_RSS_TCP_IPV4
        | RSS_HASHTYPE_RSS_IPV6
        | RSS_HASHTYPE_RSS_TCP_IPV6
        | RSS_HASHTYPE_RSS_UDP_IPV4
        | RSS_HASHTYPE_RSS_UDP_IPV6;
    // SAFETY: valid pointers of the lengths passed.
    assert_eq!(unsafe { rss_config_new([0u32, 0, 0].as_ptr(), 3, -1, null(), 0, types, &mut c) }, RSS_OK);
    c
}

fn policy() -> RssPolicy {
    let cpus = [rsskit_app::CpuId(0); 3];
    RssPolicy::new(RssKey::microsoft(), HashConfig::default().with_udp_4tuple(true), &cpus, None).unwrap()
}

#[test]
fn config_getters_and_buffers() {
    let c = config();
    let mut n = 0u32;
    // SAFETY: every pointer is live or deliberately null.
    unsafe {
        assert_eq!(rss_getnumbuckets(c, &mut n), RSS_OK);
        assert_eq!(n, 8);
        assert_eq!(rss_getnumbuckets(null(), &mut n), RSS_E_NULL);
        assert_eq!(rss_getnumbuckets(c, null_mut()), RSS_E_NULL);
        let mut needed = 0usize;
        let mut map = [9u32; 7];
        assert_eq!(rss_get_bucket_map(c, map.as_mut_ptr(), 7, &mut needed), RSS_E_SHORT_BUFFER);
        assert_eq!((needed, map), (8, [9; 7]));
        assert!(last_error().contains("needs 8 entries"), "{}", last_error());
        let mut map = [9u32; 8];
        assert_eq!(rss_get_bucket_map(c, map.as_mut_ptr(), 8, &mut needed), RSS_OK);
        assert_eq!(map, [0; 8]);
        assert_eq!(rss_get_bucket_map(c, null_mut(), 8, &mut needed), RSS_E_NULL);
        let mut key = [0u8; 64];
        let mut klen = 0usize;
        assert_eq!(rss_get_key(c, key.as_mut_ptr(), 39, &mut klen), RSS_E_SHORT_BUFFER);
        assert_eq!(rss_get_key(c, key.as_mut_ptr(), 64, &mut klen), RSS_OK);
        assert_eq!(&key[..klen], RssKey::microsoft().as_bytes());
        let mut types = 0u32;
        assert_eq!(rss_get_hash_types(c, &mut types), RSS_OK);
        assert_eq!(types & RSS_HASHTYPE_RSS_UDP_IPV4, RSS_HASHTYPE_RSS_UDP_IPV4);
        let mut cpu = 0u32;
        assert_eq!(rss_getcpu(c, 7, &mut cpu), RSS_OK);
        assert_eq!(rss_getcpu(c, 8, &mut cpu), RSS_E_INVAL);
        assert_eq!(rss_worker_cpu(c, 3, &mut cpu), RSS_E_INVAL);
        rss_config_free(c);
        rss_config_free(null_mut());
    }
}

#[test]
fn bad_configurations() {
    let mut c = null_mut();
    // SAFETY: every pointer is live or deliberately null.
    unsafe {
        assert_eq!(rss_config_new(null(), 1, -1, null(), 0, 0, &mut c), RSS_E_NULL);
        assert_eq!(rss_config_new([0u32].as_ptr(), 0, -1, null(), 0, 0, &mut c), RSS_E_INVAL);
        assert_eq!(rss_config_new([0u32].as_ptr(), 1, 9, null(), 0, 0, &mut c), RSS_E_INVAL);
        assert_eq!(rss_config_new([0u32].as_ptr(), 1, 0, null(), 0, 0, &mut c), RSS_E_INVAL);
        assert_eq!(rss_config_new([0u32].as_ptr(), 1, -1, [1u8; 8].as_ptr(), 8, 0, &mut c), RSS_E_INVAL);
        assert!(last_error().contains("key"), "{}", last_error());
        assert_eq!(rss_config_new([0u32].as_ptr(), 1, -1, null(), 0, 1, &mut c), RSS_E_INVAL);
        assert_eq!(rss_config_new([0u32].as_ptr(), 1, -1, null(), 0, 0, null_mut()), RSS_E_NULL);
        assert!(c.is_null());
        assert!(CStr::from_ptr(rss_strerror(RSS_E_NO_FREE_PORT)).to_str().unwrap().contains("in use"));
        assert!(CStr::from_ptr(rss_strerror(-100)).to_str().unwrap().contains("unknown"));
    }
}

#[test]
fn hash_tuple_agrees_with_the_policy() {
    let c = config();
    let pol = policy();
    for (s, d, proto, l4) in [
        ("66.9.149.187:2794", "161.142.100.80:1766", libc::IPPROTO_TCP, L4Proto::Tcp),
        ("10.0.0.1:5000", "10.0.0.2:53", libc::IPPROTO_UDP, L4Proto::Udp),
        ("[fd00::1]:5000", "[fd00::2]:443", libc::IPPROTO_TCP, L4Proto::Tcp),
    ] {
        let ((ss, sl), (ds, dl)) = (sa(s), sa(d));
        let mut out = RssFlowInfo::default();
        // SAFETY: live pointers of the lengths passed.
        assert_eq!(unsafe { rss_hash_tuple(c, proto, p(&ss), sl, p(&ds), dl, &mut out) }, RSS_OK);
        let (s, d): (SocketAddr, SocketAddr) = (s.parse().unwrap(), d.parse().unwrap());
        let h = pol.hash_tuple(&FlowTuple::new(s.ip(), s.port(), d.ip(), d.port(), l4));
        assert_eq!(
            (out.hash, out.bucket, out.worker, out.cpu),
            (h, pol.bucket(h), pol.worker_of_hash(h).0, 0)
        );
    }
    let ((ss, sl), (ds, dl)) = (sa("1.2.3.4:1"), sa("[::1]:2"));
    let mut out = RssFlowInfo::default();
    // SAFETY: live pointers, or deliberately null or too short.
    unsafe {
        assert_eq!(rss_hash_tuple(c, libc::IPPROTO_TCP, p(&ss), sl, p(&ds), dl, &mut out), RSS_E_INVAL);
        assert_eq!(rss_hash_tuple(c, libc::IPPROTO_TCP, p(&ss), 4, p(&ss), sl, &mut out), RSS_E_INVAL);
        assert_eq!(rss_hash_tuple(c, 47, p(&ss), sl, p(&ss), sl, &mut out), RSS_E_INVAL);
        assert_eq!(rss_hash_tuple(c, libc::IPPROTO_TCP, null(), sl, p(&ss), sl, &mut out), RSS_E_NULL);
        rss_config_free(c);
    }
}

#[test]
fn group_receive_metadata_and_connect() {
    let c = config();
    let pol = policy();
    let (bs, bl) = sa("127.0.0.1:0");
    let mut fds = [-1; 8];
    let mut n = 0usize;
    // SAFETY: every pointer is live or deliberately null or short.
    unsafe {
        assert_eq!(
            rss_group_open(c, libc::SOCK_DGRAM, 9, p(&bs), bl, fds.as_mut_ptr(), 8, &mut n),
            RSS_E_INVAL
        );
        assert_eq!(
            rss_group_open(c, 77, RSS_STEER_TOEPLITZ, p(&bs), bl, fds.as_mut_ptr(), 8, &mut n),
            RSS_E_INVAL
        );
        assert_eq!(
            rss_group_open(c, libc::SOCK_DGRAM, RSS_STEER_TOEPLITZ, p(&bs), bl, fds.as_mut_ptr(), 2, &mut n),
            RSS_E_SHORT_BUFFER
        );
        assert_eq!(n, 3);
        assert_eq!(
            rss_group_open(c, libc::SOCK_DGRAM, RSS_STEER_TOEPLITZ, p(&bs), bl, fds.as_mut_ptr(), 8, &mut n),
            RSS_OK
        );
        let std_fds: Vec<UdpSocket> =
            fds[..n].iter().map(|&fd| std::os::fd::FromRawFd::from_raw_fd(fd)).collect();
        let server = std_fds[0].local_addr().unwrap();
        for s in &std_fds {
            s.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
        }
        // Flows to the group: each one read by its owner, with its bucket.
        for i in 0..12 {
            let cl = UdpSocket::bind("127.0.0.1:0").unwrap();
            cl.send_to(format!("d{i}").as_bytes(), server).unwrap();
            let me = cl.local_addr().unwrap();
            let owner =
                pol.worker_of(&FlowTuple::new(me.ip(), me.port(), server.ip(), server.port(), L4Proto::Udp));
            let fd = std::os::fd::AsRawFd::as_raw_fd(&std_fds[owner.index()]);
            let mut buf = [0u8; 2];
            let mut from: libc::sockaddr_storage = std::mem::zeroed();
            let mut fl: libc::socklen_t = 0;
            let mut info = RssRecvInfo::default();
            let got = rss_recvfrom(c, fd, owner.0, buf.as_mut_ptr(), 2, &mut from, &mut fl, &mut info);
            assert_eq!(got, 2, "{}", last_error());
            assert_eq!(&buf[..], &format!("d{i}").as_bytes()[..2]);
            assert_eq!(rsskit_linux::socket::sockaddr_to_std(&from, fl), Some(me));
            assert_eq!((info.flow.worker, info.misdirected), (owner.0, 0));
            assert_eq!(info.truncated, i32::from(i >= 10));
        }
        let mut buf = [0u8; 4];
        assert_eq!(
            rss_recvfrom(c, -1, 0, buf.as_mut_ptr(), 4, null_mut(), null_mut(), null_mut()),
            RSS_E_INVAL as isize
        );
        assert_eq!(
            rss_recvfrom(c, fds[0], 7, buf.as_mut_ptr(), 4, null_mut(), null_mut(), null_mut()),
            RSS_E_INVAL as isize
        );
        assert_eq!(
            rss_recvfrom(c, fds[0], 0, null_mut(), 4, null_mut(), null_mut(), null_mut()),
            RSS_E_NULL as isize
        );
        // A timeout is a system error with errno set.
        assert_eq!(
            rss_recvfrom(c, fds[0], 0, buf.as_mut_ptr(), 4, null_mut(), null_mut(), null_mut()),
            RSS_E_SYSTEM as isize
        );

        // Outgoing flows: the port's replies are owned by the caller.
        let (ls, ll) = sa("127.0.0.1:0");
        let (rs, rl) = std_to_sockaddr(&server);
        let mut port = 0u16;
        for w in 0..3u32 {
            assert_eq!(
                rss_pick_source_port(
                    c,
                    w,
                    libc::IPPROTO_UDP,
                    p(&ls),
                    ll,
                    p(&rs),
                    rl,
                    40000,
                    60000,
                    &mut port
                ),
                RSS_OK
            );
            let reply =
                FlowTuple::new(server.ip(), server.port(), "127.0.0.1".parse().unwrap(), port, L4Proto::Udp);
            assert_eq!(pol.worker_of(&reply), WorkerId(w));
            let mut fd = -1;
            assert_eq!(rss_connect(c, w, libc::SOCK_DGRAM, p(&rs), rl, 40000, 60000, &mut fd), RSS_OK);
            let s: UdpSocket = std::os::fd::FromRawFd::from_raw_fd(fd);
            let local = s.local_addr().unwrap();
            let reply = FlowTuple::new(server.ip(), server.port(), local.ip(), local.port(), L4Proto::Udp);
            assert_eq!(pol.worker_of(&reply), WorkerId(w));
        }
        // A one-port range owned by another worker: no port.
        let other = (40000u16..41000)
            .find(|&x| {
                let t =
                    FlowTuple::new(server.ip(), server.port(), "127.0.0.1".parse().unwrap(), x, L4Proto::Udp);
                pol.worker_of(&t) != WorkerId(0)
            })
            .unwrap();
        let mut fd = -1;
        assert_eq!(rss_connect(c, 0, libc::SOCK_DGRAM, p(&rs), rl, other, other, &mut fd), RSS_E_NO_PORT);
        assert!(last_error().contains("no source port"), "{}", last_error());
        assert_eq!(rss_connect(c, 0, libc::SOCK_DGRAM, p(&rs), rl, 1, 2, null_mut()), RSS_E_NULL);
        rss_config_free(c);
    }
}
