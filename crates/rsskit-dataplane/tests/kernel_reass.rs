//! Reassembly checked against the Linux kernel.
//!
//! Two network namespaces joined by a veth. Namespace A sends hand-built
//! fragmented UDP datagrams (IPv4 and IPv6, several sizes and orders,
//! duplicates and overlaps) as raw Ethernet frames on its end (AF_PACKET).
//! Namespace B captures the frames with AF_PACKET on its end and, at the
//! same time, receives what the kernel reassembled on UDP sockets. rsskit
//! reassembles the captured frames; the test compares:
//! - ordinary trains: both deliver, with the same bytes (the payload sent);
//! - partial overlaps: the kernel drops the datagram and so does rsskit;
//! - overlaps Linux tolerates (a fragment inside data it already holds, or
//!   the same range with other bytes, which Linux ignores as a "duplicate"):
//!   rsskit's documented policy is stricter and drops them; whatever rsskit
//!   does deliver is byte-identical to what the kernel delivered.
//!
//! Needs root and iproute2; fails loudly without them. Bounded (a few
//! seconds), namespaces removed on drop even when the test fails.

use rsskit_dataplane::craft::{self, V4};
use rsskit_dataplane::reass::{ReassConfig, ReassOutcome, Reassembler};
use rsskit_dataplane::wire::{self, ethertype, ip::proto, ParseConfig, Transport};
use std::collections::HashMap;
use std::ffi::CString;
use std::net::{Ipv4Addr, Ipv6Addr, UdpSocket};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const A4: Ipv4Addr = Ipv4Addr::new(10, 210, 0, 1);
const B4: Ipv4Addr = Ipv4Addr::new(10, 210, 0, 2);
const A6: &str = "fd00:210::1";
const B6: &str = "fd00:210::2";
const MAC_A: [u8; 6] = [0x02, 0, 0, 0, 0xaa, 0x01];
const MAC_B: [u8; 6] = [0x02, 0, 0, 0, 0xbb, 0x01];
const PORT: u16 = 5999;

fn ip(args: &[&str]) {
    let out = Command::new("ip")
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run `ip` ({e}): this test needs iproute2 and root"));
    assert!(
        out.status.success(),
        "`ip {}` failed: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr).trim()
    );
}

/// A namespace, deleted (with its veth end) on drop.
struct Ns(String);

impl Ns {
    fn new(tag: &str) -> Ns {
        let name = format!("rskdp{tag}{}", std::process::id());
        ip(&["netns", "add", &name]);
        Ns(name)
    }
    fn ip(&self, args: &[&str]) {
        let mut v = vec!["-n", self.0.as_str()];
        v.extend_from_slice(args);
        ip(&v);
    }
    fn sysctl(&self, kv: &str) {
        let ok = Command::new("ip")
            .args(["netns", "exec", &self.0, "sysctl", "-qw", kv])
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        assert!(ok, "sysctl {kv} in {}", self.0);
    }
    /// Runs `f` on a thread that has entered this namespace.
    fn run<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> std::thread::JoinHandle<T> {
        let path = format!("/var/run/netns/{}", self.0);
        std::thread::spawn(move || {
            let file = std::fs::File::open(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
            // SAFETY: setns on a valid namespace fd; affects this thread only
            // (network namespaces are per thread).
            let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
            assert_eq!(rc, 0, "setns: {}", std::io::Error::last_os_error());
            f()
        })
    }
}

impl Drop for Ns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).stderr(Stdio::null()).status();
    }
}

/// An AF_PACKET socket bound to `ifname` in the calling thread's namespace.
fn packet_socket(ifname: &str) -> OwnedFd {
    let proto_be = (libc::ETH_P_ALL as u16).to_be();
    // SAFETY: plain socket(2); the fd is owned right away.
    let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW, i32::from(proto_be)) };
    assert!(fd >= 0, "AF_PACKET socket: {}", std::io::Error::last_os_error());
    // SAFETY: fd is a fresh, valid descriptor we own.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let name = CString::new(ifname).unwrap();
    // SAFETY: valid NUL-terminated string.
    let idx = unsafe { libc::if_nametoindex(name.as_ptr()) };
    assert!(idx > 0, "no interface {ifname}");
    // SAFETY: sockaddr_ll is plain data; zero is a valid initial value.
    let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    sll.sll_family = libc::AF_PACKET as u16;
    sll.sll_protocol = proto_be;
    sll.sll_ifindex = idx as i32;
    // SAFETY: sll is a valid sockaddr_ll of the given size.
    let rc = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            &sll as *const libc::sockaddr_ll as *const libc::sockaddr,
            std::mem::size_of::<libc::sockaddr_ll>() as u32,
        )
    };
    assert_eq!(rc, 0, "bind AF_PACKET: {}", std::io::Error::last_os_error());
    let tv = libc::timeval { tv_sec: 0, tv_usec: 20_000 };
    // SAFETY: setting SO_RCVTIMEO with a valid timeval.
    unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            &tv as *const libc::timeval as *const libc::c_void,
            std::mem::size_of::<libc::timeval>() as u32,
        );
    }
    fd
}

/// One incoming frame (not our own outgoing ones), or None on timeout.
fn recv_frame(fd: &OwnedFd, buf: &mut [u8]) -> Option<Vec<u8>> {
    // SAFETY: zeroed sockaddr_ll is valid; recvfrom writes at most its size.
    let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_ll>() as u32;
    // SAFETY: buf and sll are valid for the given lengths.
    let n = unsafe {
        libc::recvfrom(
            fd.as_raw_fd(),
            buf.as_mut_ptr() as *mut libc::c_void,
            buf.len(),
            0,
            &mut sll as *mut libc::sockaddr_ll as *mut libc::sockaddr,
            &mut len,
        )
    };
    if n < 0 {
        return None;
    }
    if sll.sll_pkttype == libc::PACKET_OUTGOING {
        return Some(Vec::new());
    }
    Some(buf[..n as usize].to_vec())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    /// Kernel and rsskit both deliver the payload.
    Both,
    /// Kernel and rsskit both drop (partial overlap).
    BothDrop,
    /// Linux tolerates it, rsskit's policy drops it.
    RsskitStricter,
}

struct Case {
    name: String,
    tag: u32,
    payload: Vec<u8>,
    frames: Vec<Vec<u8>>,
    expect: Expect,
}

fn body(tag: u32, len: usize) -> Vec<u8> {
    let mut b: Vec<u8> =
        (0..len).map(|i| (i as u32).wrapping_mul(2654435761).wrapping_add(tag) as u8).collect();
    b[..4].copy_from_slice(&tag.to_be_bytes());
    b
}

/// Fragments of a UDP datagram as (offset, data, more) over the UDP bytes.
fn pieces(udp: &[u8], cuts: &[usize]) -> Vec<(usize, Vec<u8>, bool)> {
    let mut out = Vec::new();
    let mut start = 0;
    for &end in cuts.iter().chain(std::iter::once(&udp.len())) {
        out.push((start, udp[start..end].to_vec(), end != udp.len()));
        start = end;
    }
    out
}

fn frame4(id: u16, off: usize, data: &[u8], more: bool) -> Vec<u8> {
    let mut h = V4::new(A4, B4, proto::UDP);
    h.id = id;
    h.frag_off = off as u16;
    h.mf = more;
    eth(ethertype::IPV4, &craft::ipv4(&h, data))
}

fn frame6(id: u32, off: usize, data: &[u8], more: bool) -> Vec<u8> {
    let (s, d): (Ipv6Addr, Ipv6Addr) = (A6.parse().unwrap(), B6.parse().unwrap());
    let mut rest = craft::frag_header(proto::UDP, off as u16, more, id).to_vec();
    rest.extend_from_slice(data);
    eth(ethertype::IPV6, &craft::ipv6(s, d, proto::FRAGMENT, &rest))
}

fn eth(et: u16, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(14 + payload.len());
    f.extend_from_slice(&MAC_B);
    f.extend_from_slice(&MAC_A);
    f.extend_from_slice(&et.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

fn cases() -> Vec<Case> {
    let mut out = Vec::new();
    let mut tag = 0x5253_0000u32;
    for v6 in [false, true] {
        let fam = if v6 { "v6" } else { "v4" };
        let max = if v6 { 1448 } else { 1480 };
        let (src, dst): (Vec<u8>, Vec<u8>) = if v6 {
            (
                A6.parse::<Ipv6Addr>().unwrap().octets().to_vec(),
                B6.parse::<Ipv6Addr>().unwrap().octets().to_vec(),
            )
        } else {
            (A4.octets().to_vec(), B4.octets().to_vec())
        };
        let mk = |id: u32, off: usize, d: &[u8], m: bool| {
            if v6 {
                frame6(id, off, d, m)
            } else {
                frame4(id as u16, off, d, m)
            }
        };
        // (name, body length, cut step, order, expectation, mutation)
        type Order = fn(usize) -> Vec<usize>;
        let plain: [(&str, usize, usize, Order); 6] = [
            ("inorder-2000", 2000, max, |n| (0..n).collect()),
            ("reverse-4000", 4000, max, |n| (0..n).rev().collect()),
            ("lastfirst-9000", 9000, max, |n| std::iter::once(n - 1).chain(0..n - 1).collect()),
            ("shuffle-dup-3000", 3000, 1024, |n| {
                let mut v: Vec<usize> = (0..n).collect();
                v.swap(0, n - 1);
                v.insert(1, n - 1); // exact duplicate
                v
            }),
            ("small-frags-200", 200, 16, |n| (0..n).map(|i| (i * 7) % n).collect()),
            ("inorder-1200", 1200, 512, |n| (0..n).collect()),
        ];
        for (name, len, step, order) in plain {
            tag += 1;
            let payload = body(tag, len);
            let udp = craft::udp_checksummed(&src, &dst, 40000, PORT, &payload);
            let cuts: Vec<usize> = (1..).map(|i| i * step).take_while(|&c| c < udp.len()).collect();
            let p = pieces(&udp, &cuts);
            let id = tag;
            let frames = order(p.len())
                .into_iter()
                .map(|i| {
                    let (off, d, m) = &p[i];
                    mk(id, *off, d, *m)
                })
                .collect();
            out.push(Case { name: format!("{fam}-{name}"), tag, payload, frames, expect: Expect::Both });
        }
        // Overlaps of an 1800-byte datagram, as (offset, data, more) pieces.
        type Overlap = fn(&[u8]) -> Vec<(usize, Vec<u8>, bool)>;
        let overlaps: [(&str, Expect, Overlap); 4] = [
            // Partial overlap: [0,1000) then [992,end).
            ("partial-overlap", Expect::BothDrop, |u| {
                vec![(0, u[..1000].to_vec(), true), (992, u[992..].to_vec(), false)]
            }),
            // Partial overlap the other way round, last fragment first.
            ("overlap-lastfirst", Expect::BothDrop, |u| {
                vec![
                    (1200, u[1200..].to_vec(), false),
                    (0, u[..1000].to_vec(), true),
                    (800, u[800..1208].to_vec(), true),
                ]
            }),
            // Contained fragment (inside held data, not an exact duplicate).
            ("contained", Expect::RsskitStricter, |u| {
                vec![
                    (0, u[..1024].to_vec(), true),
                    (8, u[8..512].to_vec(), true),
                    (1024, u[1024..].to_vec(), false),
                ]
            }),
            // Same range, other bytes.
            ("rewrite", Expect::RsskitStricter, |u| {
                let mut evil = u[..1024].to_vec();
                evil[100] ^= 0x55;
                vec![(0, u[..1024].to_vec(), true), (0, evil, true), (1024, u[1024..].to_vec(), false)]
            }),
        ];
        for (name, expect, split) in overlaps {
            tag += 1;
            let payload = body(tag, 1800);
            let udp = craft::udp_checksummed(&src, &dst, 40000, PORT, &payload);
            let frames = split(&udp).iter().map(|(off, d, m)| mk(tag, *off, d, *m)).collect();
            out.push(Case { name: format!("{fam}-{name}"), tag, payload, frames, expect });
        }
    }
    out
}

#[test]
fn reassembly_matches_the_kernel() {
    // SAFETY: geteuid has no preconditions.
    assert_eq!(unsafe { libc::geteuid() }, 0, "this test needs root (CI runs as root)");
    let a = Ns::new("a");
    let b = Ns::new("b");
    let (va, vb) =
        (format!("rdpa{}", std::process::id() % 100000), format!("rdpb{}", std::process::id() % 100000));
    ip(&["link", "add", &va, "netns", &a.0, "type", "veth", "peer", "name", &vb, "netns", &b.0]);
    for (ns, dev, mac) in [(&a, &va, "02:00:00:00:aa:01"), (&b, &vb, "02:00:00:00:bb:01")] {
        ns.sysctl("net.ipv6.conf.all.disable_ipv6=0");
        ns.sysctl("net.ipv6.conf.default.accept_dad=0");
        ns.ip(&["link", "set", dev, "address", mac]);
        ns.ip(&["link", "set", dev, "up"]);
        ns.ip(&["link", "set", "lo", "up"]);
    }
    a.ip(&["addr", "add", "10.210.0.1/24", "dev", &va]);
    b.ip(&["addr", "add", "10.210.0.2/24", "dev", &vb]);
    a.ip(&["-6", "addr", "add", &format!("{A6}/64"), "dev", &va, "nodad"]);
    b.ip(&["-6", "addr", "add", &format!("{B6}/64"), "dev", &vb, "nodad"]);

    let cases = cases();
    let all_frames: Vec<Vec<Vec<u8>>> = cases.iter().map(|c| c.frames.clone()).collect();

    // Receiver in B: capture + UDP sockets, until 1.5 s after the sender is done.
    let (ready_tx, ready_rx) = mpsc::channel::<()>();
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let vb2 = vb.clone();
    let rx = b.run(move || {
        let cap = packet_socket(&vb2);
        let s4 = UdpSocket::bind((B4, PORT)).expect("bind v4");
        let s6 = UdpSocket::bind((B6.parse::<Ipv6Addr>().unwrap(), PORT)).expect("bind v6");
        for s in [&s4, &s6] {
            s.set_nonblocking(true).unwrap();
        }
        ready_tx.send(()).unwrap();
        let mut frames = Vec::new();
        let mut delivered: Vec<Vec<u8>> = Vec::new();
        let mut buf = vec![0u8; 65536];
        let hard_stop = Instant::now() + Duration::from_secs(20);
        let mut quiet_until: Option<Instant> = None;
        loop {
            if let Some(f) = recv_frame(&cap, &mut buf) {
                if !f.is_empty() {
                    frames.push(f);
                }
            }
            for s in [&s4, &s6] {
                while let Ok(n) = s.recv(&mut buf) {
                    delivered.push(buf[..n].to_vec());
                }
            }
            if quiet_until.is_none() && done_rx.try_recv().is_ok() {
                quiet_until = Some(Instant::now() + Duration::from_millis(1500));
            }
            let now = Instant::now();
            if quiet_until.is_some_and(|t| now >= t) || now >= hard_stop {
                break;
            }
        }
        (frames, delivered)
    });
    ready_rx.recv_timeout(Duration::from_secs(10)).expect("receiver ready");

    // Sender in A.
    let va2 = va.clone();
    let tx = a.run(move || {
        let s = packet_socket(&va2);
        for group in all_frames {
            for f in group {
                // SAFETY: sending a valid buffer on a bound packet socket.
                let n = unsafe { libc::send(s.as_raw_fd(), f.as_ptr() as *const libc::c_void, f.len(), 0) };
                assert_eq!(n as usize, f.len(), "send: {}", std::io::Error::last_os_error());
                std::thread::sleep(Duration::from_micros(300));
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    });
    tx.join().expect("sender");
    done_tx.send(()).unwrap();
    let (frames, delivered) = rx.join().expect("receiver");

    // What the kernel delivered, by tag.
    let mut kernel: HashMap<u32, Vec<Vec<u8>>> = HashMap::new();
    for d in delivered {
        assert!(d.len() >= 4);
        kernel.entry(u32::from_be_bytes(d[..4].try_into().unwrap())).or_default().push(d);
    }
    // What rsskit reassembles from the captured frames, by tag.
    let cfg = ParseConfig::default();
    let mut r = Reassembler::new(ReassConfig::default());
    let mut ours: HashMap<u32, Vec<Vec<u8>>> = HashMap::new();
    let mut captured_frags = 0;
    for (i, f) in frames.iter().enumerate() {
        let Ok(p) = wire::parse_ethernet(f, &cfg) else { continue };
        if !p.outer.is_fragment() {
            continue;
        }
        captured_frags += 1;
        if let ReassOutcome::Complete(ip) = r.push(&p.outer, i as u64 * 1000) {
            let whole = wire::parse_ip(&ip, &cfg).expect("reassembled datagram parses");
            let Transport::Udp { payload, .. } = whole.l4 else { panic!("not UDP") };
            ours.entry(u32::from_be_bytes(payload[..4].try_into().unwrap()))
                .or_default()
                .push(payload.to_vec());
        }
    }
    let sent: usize = cases.iter().map(|c| c.frames.len()).sum();
    assert_eq!(captured_frags, sent, "AF_PACKET captured every fragment sent");

    let mut report = Vec::new();
    for c in &cases {
        let k = kernel.get(&c.tag).cloned().unwrap_or_default();
        let o = ours.get(&c.tag).cloned().unwrap_or_default();
        report.push(format!("{:<24} {:?}: kernel {} rsskit {}", c.name, c.expect, k.len(), o.len()));
        match c.expect {
            Expect::Both => {
                assert_eq!(k, vec![c.payload.clone()], "{}: kernel delivery", c.name);
                assert_eq!(o, k, "{}: rsskit differs from the kernel", c.name);
            }
            Expect::BothDrop => {
                assert!(k.is_empty(), "{}: the kernel delivered an overlapping datagram", c.name);
                assert!(o.is_empty(), "{}: rsskit delivered what the kernel dropped", c.name);
            }
            Expect::RsskitStricter => {
                assert!(o.is_empty(), "{}: rsskit's policy drops overlaps", c.name);
                for d in &k {
                    assert_eq!(d, &c.payload, "{}: kernel delivered other bytes", c.name);
                }
            }
        }
    }
    eprintln!("{}", report.join("\n"));
}
