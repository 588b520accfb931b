//! `rsskit pipeline` on IPv6 packets with two fragment headers (the first an
//! atomic fragment, which once let the packet through as a whole one): each
//! is dropped and counted as `ipv6_bad_ext_header`, and only the good packet
//! comes out.

use assert_cmd::Command;
use rsskit_dataplane::craft::{eth, frag_header, ipv6, udp};
use rsskit_dataplane::io::pcap::{read_all, PcapSink};
use rsskit_dataplane::netisr::Mbuf;
use rsskit_dataplane::output::Sink;
use rsskit_dataplane::wire::ip::proto;
use serde_json::Value;
use std::net::Ipv6Addr;
use std::time::Duration;

#[test]
fn two_fragment_headers_are_dropped_with_their_reason() {
    let dir = std::env::temp_dir().join(format!("rsskit-double-frag-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (input, output) = (dir.join("in.pcap"), dir.join("out.pcap"));
    let (a, b): (Ipv6Addr, Ipv6Addr) = ("2001:db8::1".parse().unwrap(), "2001:db8::2".parse().unwrap());
    let double = |first: [u8; 8], second: [u8; 8]| {
        let mut rest = first.to_vec();
        rest.extend_from_slice(&second);
        rest.extend(udp(1000, 53, &[0x42; 16]));
        rest
    };
    let packets = [
        // Good: plain UDP.
        ipv6(a, b, proto::UDP, &udp(1000, 53, b"fine")),
        // Atomic fragment, then a real first fragment.
        ipv6(
            a,
            b,
            proto::FRAGMENT,
            &double(frag_header(proto::FRAGMENT, 0, false, 1), frag_header(proto::UDP, 0, true, 2)),
        ),
        // Two atomic fragment headers.
        ipv6(
            a,
            b,
            proto::FRAGMENT,
            &double(frag_header(proto::FRAGMENT, 0, false, 3), frag_header(proto::UDP, 0, false, 4)),
        ),
    ];
    let frames: Vec<Mbuf> = packets
        .iter()
        .enumerate()
        .map(|(i, p)| Mbuf::heap(eth(0x86dd, &[], p), 0, 1_000 + i as u64, 0))
        .collect();
    let mut w = PcapSink::create(&input).unwrap();
    assert_eq!(w.send(&frames).unwrap(), 3);
    w.close().unwrap();

    let out = Command::cargo_bin("rsskit")
        .unwrap()
        .timeout(Duration::from_secs(60))
        .args(["pipeline", "--workers", "1", "--json", "--quiet"])
        .arg("--in")
        .arg(format!("pcap:{}", input.display()))
        .arg("--out")
        .arg(format!("pcap:{}", output.display()))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let t = &v["total"];
    assert_eq!(t["input"], 3, "{t}");
    assert_eq!(t["drops_by_reason"]["ipv6_bad_ext_header"], 2, "{t}");
    assert_eq!(t["drops"], 2, "{t}");
    assert_eq!(read_all(&output).unwrap().len(), 1, "only the good packet is forwarded");
    let _ = std::fs::remove_dir_all(&dir);
}
