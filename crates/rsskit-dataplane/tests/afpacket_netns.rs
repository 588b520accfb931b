//! AF_PACKET end to end in a network namespace of our own: a veth pair
//! vA <-> vB; frames injected on vA (AF_PACKET sendmmsg) are received on vB
//! by the TPACKET_V3 ring (2 workers, PACKET_FANOUT), dispatched, a
//! fragmented datagram reassembled, and everything written to a pcap, which
//! we then check frame by frame.
//!
//! Needs root and `ip` (iproute2): we run as root here and in CI, and the
//! test fails loudly if either is missing. The namespace is removed by a
//! Drop guard even when an assertion fails; every wait is bounded.

use rsskit_dataplane::craft::{eth, fragment_v4, ipv4, udp, V4};
use rsskit_dataplane::io::afpacket::{AfPacketSink, AfPacketSource, RingConfig};
use rsskit_dataplane::io::pcap::{read_all, PcapSink};
use rsskit_dataplane::io::Source;
use rsskit_dataplane::netisr::{default_policy, FlowCounter, Mbuf, Netisr, NetisrConfig};
use rsskit_dataplane::output::Sink;
use rsskit_dataplane::wire::ip::proto;
use rsskit_dataplane::wire::{ethertype, parse_ethernet, ParseConfig, Transport};
use std::net::Ipv4Addr;
use std::os::fd::AsRawFd;
use std::process::Command;
use std::time::Duration;

struct Netns(String);

impl Netns {
    fn new(tag: &str) -> Netns {
        let name = format!("rsskit-{tag}-{}", std::process::id());
        let _ = Command::new("ip").args(["netns", "del", &name]).output();
        run(&["ip", "netns", "add", &name]);
        let ns = Netns(name);
        // No IPv6 noise (router solicitations, MLD) on the new links.
        run(&["ip", "netns", "exec", &ns.0, "sysctl", "-q", "-w", "net.ipv6.conf.default.disable_ipv6=1"]);
        run(&["ip", "netns", "exec", &ns.0, "sysctl", "-q", "-w", "net.ipv6.conf.all.disable_ipv6=1"]);
        run(&["ip", "-n", &ns.0, "link", "add", "vA", "type", "veth", "peer", "name", "vB"]);
        run(&["ip", "-n", &ns.0, "link", "set", "vA", "up"]);
        run(&["ip", "-n", &ns.0, "link", "set", "vB", "up"]);
        ns
    }

    /// Runs `f` on a thread that entered the namespace (sockets opened there
    /// stay bound to it).
    fn enter<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> T {
        let path = format!("/run/netns/{}", self.0);
        std::thread::spawn(move || {
            let fd = std::fs::File::open(&path).unwrap_or_else(|e| panic!("open {path}: {e}"));
            // SAFETY: setns on the calling thread with a namespace fd we hold.
            let rc = unsafe { libc::setns(fd.as_raw_fd(), libc::CLONE_NEWNET) };
            assert_eq!(rc, 0, "setns: {}", std::io::Error::last_os_error());
            f()
        })
        .join()
        .expect("namespace thread")
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).output();
    }
}

fn run(args: &[&str]) {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .unwrap_or_else(|e| panic!("{} is needed for this test (run as root with iproute2): {e}", args[0]));
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

fn broadcast(mut f: Vec<u8>) -> Vec<u8> {
    f[..6].copy_from_slice(&[0xff; 6]);
    f
}

#[test]
fn veth_afpacket_to_pcap() {
    // SAFETY: geteuid has no preconditions.
    assert_eq!(unsafe { libc::geteuid() }, 0, "this test needs root (network namespaces, AF_PACKET)");
    let ns = Netns::new("afp");
    let dir = std::env::temp_dir().join(format!("rsskit-afp-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out_path = dir.join("out.pcap");

    // Traffic: 300 UDP datagrams (ids in the payload) over 60 flows, and
    // one 3000-byte datagram in three fragments.
    let (a, b) = (Ipv4Addr::new(10, 9, 0, 1), Ipv4Addr::new(10, 9, 0, 2));
    let mut frames = Vec::new();
    for i in 0u32..300 {
        let mut pl = b"RSSKIT".to_vec();
        pl.extend_from_slice(&i.to_be_bytes());
        let ip = ipv4(&V4::new(a, b, proto::UDP), &udp(2000 + (i % 60) as u16, 7, &pl));
        frames.push(broadcast(eth(ethertype::IPV4, &[], &ip)));
    }
    let big: Vec<u8> = (0..3000u32).map(|i| (i * 7) as u8).collect();
    let u = udp(5555, 6666, &big);
    let mut h = V4::new(a, b, proto::UDP);
    h.id = 4242;
    for f in fragment_v4(&h, &u, &[1000, 2000]) {
        frames.push(broadcast(eth(ethertype::IPV4, &[], &f)));
    }
    let whole = ipv4(&h, &u); // id 4242, no flags: what reassembly must rebuild

    let out2 = out_path.clone();
    let (report, sent) = ns.enter(move || {
        let workers = 2;
        let inputs: Vec<(usize, Box<dyn Source>)> = (0..workers)
            .map(|w| {
                let s = AfPacketSource::open("vB", RingConfig::default(), Some(0x5151))
                    .expect("AF_PACKET ring on vB");
                (w, Box::new(s) as Box<dyn Source>)
            })
            .collect();
        let pcap = PcapSink::create(&out2).unwrap();
        let sinks: Vec<Box<dyn Sink>> =
            (0..workers).map(|_| Box::new(pcap.clone()) as Box<dyn Sink>).collect();
        let cfg = NetisrConfig { policy: default_policy(workers).into(), batch: 8, ..Default::default() };
        let netisr =
            Netisr::start(cfg, inputs, sinks, (0..workers).map(|_| FlowCounter::new(1024)).collect())
                .unwrap();
        let mut tx = AfPacketSink::open("vA").expect("AF_PACKET transmit on vA");
        let mbufs: Vec<Mbuf> = frames.into_iter().map(|f| Mbuf::heap(f, 0, 0, 0)).collect();
        let mut sent = 0;
        for chunk in mbufs.chunks(16) {
            sent += tx.send(chunk).expect("sendmmsg on vA");
        }
        // The sources are live: stop them after a bounded wait.
        let report =
            netisr.wait(Some(Duration::from_secs(2)), Duration::from_secs(10), None, |_, _| ()).unwrap();
        pcap.close().unwrap();
        (report, sent)
    });
    assert_eq!(sent, 303);

    let t = report.total();
    let got = read_all(&out_path).unwrap();
    // Our frames, by payload marker; nothing else should be on this private link.
    let mut ids = Vec::new();
    let mut reassembled = 0;
    for (_, f) in &got {
        let p = parse_ethernet(f, &ParseConfig::default()).expect("output frames parse");
        if let Transport::Udp { payload, src_port, .. } = p.l4 {
            if payload.starts_with(b"RSSKIT") {
                ids.push(u32::from_be_bytes(payload[6..10].try_into().unwrap()));
                assert_eq!(src_port, 2000 + (ids.last().unwrap() % 60) as u16);
            } else if src_port == 5555 {
                assert!(f[14..] == whole[..], "reassembled datagram differs from the original");
                reassembled += 1;
            }
        }
    }
    ids.sort_unstable();
    assert_eq!(ids, (0..300).collect::<Vec<u32>>(), "every injected datagram exactly once");
    assert_eq!(reassembled, 1);
    assert_eq!(t.counters.reassembled, 1);
    assert!(t.counters.input >= 303, "{:?}", t.counters);
    assert_eq!(t.counters.input, t.counters.dispatched + t.queued + t.counters.drops.total());
    assert_eq!(t.qdrops, 0);
    // Both fanout members saw traffic (60 flows over two sockets).
    assert!(report.workers.iter().all(|w| w.counters.input > 0), "fanout spread the flows");
    std::fs::remove_dir_all(&dir).unwrap();
}
