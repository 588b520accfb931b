//! Parsing and reassembly of captures made by an independent tool (scapy):
//! `scripts/gen-pcaps.py` writes `testdata/*.pcap` and, from scapy's own
//! dissection and a Python bit-by-bit Toeplitz, the `*.expect` facts these
//! tests compare against.

use rsskit_core::{HashConfig, RssKey};
use rsskit_dataplane::hash::PacketHasher;
use rsskit_dataplane::reass::{ReassConfig, ReassOutcome, Reassembler};
use rsskit_dataplane::wire::{self, IpLayer, Packet, ParseConfig, Transport};
use std::collections::HashMap;
use std::path::PathBuf;

fn testdata(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("testdata").join(name)
}

/// Minimal classic-pcap reader (microsecond or nanosecond magic, either
/// byte order): the records' bytes.
fn read_pcap(name: &str) -> Vec<Vec<u8>> {
    let d = std::fs::read(testdata(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
    assert!(d.len() >= 24, "{name}: short file");
    let magic = u32::from_le_bytes(d[0..4].try_into().unwrap());
    let le = match magic {
        0xa1b2_c3d4 | 0xa1b2_3c4d => true,
        0xd4c3_b2a1 | 0x4d3c_b2a1 => false,
        m => panic!("{name}: not a pcap file (magic {m:#x})"),
    };
    let u32at = |o: usize| {
        let b: [u8; 4] = d[o..o + 4].try_into().unwrap();
        if le {
            u32::from_le_bytes(b)
        } else {
            u32::from_be_bytes(b)
        }
    };
    assert_eq!(u32at(20), 1, "{name}: link type must be Ethernet");
    let mut out = Vec::new();
    let mut o = 24;
    while o + 16 <= d.len() {
        let incl = u32at(o + 8) as usize;
        o += 16;
        assert!(o + incl <= d.len(), "{name}: truncated record");
        out.push(d[o..o + incl].to_vec());
        o += incl;
    }
    out
}

/// `.expect` lines: (first field, second field, key=value map).
fn read_expect(name: &str) -> Vec<(String, String, HashMap<String, String>)> {
    let s = std::fs::read_to_string(testdata(name)).unwrap();
    s.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let mut it = l.split(' ');
            let a = it.next().unwrap().to_string();
            let b = it.next().unwrap().to_string();
            let kv = it
                .map(|f| {
                    let (k, v) = f.split_once('=').unwrap();
                    (k.to_string(), v.to_string())
                })
                .collect();
            (a, b, kv)
        })
        .collect()
}

fn l3(ip: &IpLayer<'_>) -> String {
    let v = if ip.is_ipv6() { 6 } else { 4 };
    format!("{v}:{}>{}:{}", ip.src, ip.dst, ip.proto)
}

fn describe(p: &Packet<'_>) -> HashMap<String, String> {
    let mut m = HashMap::new();
    let vl: Vec<String> = p.vlans().iter().map(|v| v.id().to_string()).collect();
    m.insert("vlans".into(), if vl.is_empty() { "-".into() } else { vl.join(",") });
    m.insert("outer".into(), l3(&p.outer));
    let frag = match p.outer.frag {
        Some(f) => format!("{}:{}:{}", f.id, f.offset, if f.more { "more" } else { "last" }),
        None => "-".into(),
    };
    m.insert("frag".into(), frag);
    m.insert("inner".into(), p.inner.as_ref().map(l3).unwrap_or_else(|| "-".into()));
    let l4 = match p.l4 {
        Transport::Udp { src_port, dst_port, payload } => {
            format!("udp:{src_port}>{dst_port}:{}", payload.len())
        }
        Transport::Tcp { src_port, dst_port, .. } => format!("tcp:{src_port}>{dst_port}"),
        Transport::Icmpv4 { icmp_type, code } => format!("icmp:{icmp_type}:{code}"),
        Transport::Icmpv6 { icmp_type, code } => format!("icmp6:{icmp_type}:{code}"),
        Transport::Fragment => "frag".into(),
        Transport::Other(n) => format!("other:{n}"),
    };
    m.insert("l4".into(), l4);
    let key = RssKey::microsoft();
    let def = PacketHasher::new(&key, HashConfig::default());
    let all = PacketHasher::new(&key, HashConfig::all());
    m.insert("rss_default".into(), format!("{:#010x}", def.nic(p).hash));
    m.insert("rss_all".into(), format!("{:#010x}", all.nic(p).hash));
    m.insert("flow_all".into(), format!("{:#010x}", all.flow(p).hash));
    m
}

#[test]
fn scapy_parse_capture_matches_scapy_facts() {
    let frames = read_pcap("parse.pcap");
    let expect = read_expect("parse.expect");
    assert_eq!(frames.len(), expect.len());
    assert!(frames.len() >= 30, "the capture has all cases");
    let cfg = ParseConfig::default();
    let (mut ok, mut dropped) = (0, 0);
    for (i, (idx, verdict, facts)) in expect.iter().enumerate() {
        assert_eq!(idx.parse::<usize>().unwrap(), i);
        let res = wire::parse_ethernet(&frames[i], &cfg);
        match verdict.as_str() {
            "ok" => {
                let p = res.unwrap_or_else(|r| panic!("frame {i}: dropped {r}, scapy: {facts:?}"));
                let got = describe(&p);
                for (k, v) in facts {
                    assert_eq!(got.get(k), Some(v), "frame {i} field {k}");
                }
                ok += 1;
            }
            "drop" => {
                let r = res.err().unwrap_or_else(|| panic!("frame {i}: parsed, expected a drop"));
                assert_eq!(r.name(), facts["reason"], "frame {i}");
                dropped += 1;
            }
            other => panic!("bad verdict {other}"),
        }
    }
    assert!(ok >= 15 && dropped >= 10, "{ok} ok, {dropped} dropped");
}

#[test]
fn scapy_fragment_trains_reassemble_as_expected() {
    let frames = read_pcap("frags.pcap");
    let expect = read_expect("frags.expect");
    let cfg = ParseConfig::default();
    let mut checked = 0;
    for (name, verdict, facts) in &expect {
        let idx: Vec<usize> = facts["frames"].split(',').map(|s| s.parse().unwrap()).collect();
        let mut r = Reassembler::new(ReassConfig::default());
        let mut completed = Vec::new();
        for (n, &i) in idx.iter().enumerate() {
            // The data-plane path: parse the frame; fragments that fail the
            // parser's checks (tiny first fragment) never reach reassembly.
            let Ok(p) = wire::parse_ethernet(&frames[i], &cfg) else { continue };
            match r.push(&p.outer, n as u64) {
                ReassOutcome::Complete(ip) => completed.push(ip),
                ReassOutcome::NotFragment => panic!("{name}: frame {i} is not a fragment"),
                _ => {}
            }
        }
        match verdict.as_str() {
            "complete" => {
                assert_eq!(completed.len(), 1, "{name}");
                let want = hex(&facts["ip"]);
                assert_eq!(completed[0], want, "{name}: reassembled bytes differ from scapy's original");
                // The reassembled datagram parses, with its full transport header.
                let p = wire::parse_ip(&completed[0], &cfg).unwrap();
                assert!(p.l4.ports().is_some(), "{name}");
            }
            "drop" => assert!(completed.is_empty(), "{name}: reassembled, expected a drop"),
            other => panic!("bad verdict {other}"),
        }
        checked += 1;
    }
    assert!(checked >= 14);
}

#[test]
fn tunnelled_fragments_rehash_to_the_inner_flow() {
    let frames = read_pcap("frags.pcap");
    let expect = read_expect("frags.expect");
    let (_, _, facts) = expect.iter().find(|(n, _, _)| n == "v4-gre-frags").unwrap();
    let idx: Vec<usize> = facts["frames"].split(',').map(|s| s.parse().unwrap()).collect();
    let cfg = ParseConfig::default();
    let h = PacketHasher::new(&RssKey::microsoft(), HashConfig::all());
    let mut r = Reassembler::new(ReassConfig::default());
    let mut nic_hashes = Vec::new();
    let mut out = None;
    for &i in &idx {
        let p = wire::parse_ethernet(&frames[i], &cfg).unwrap();
        nic_hashes.push(h.nic(&p).hash);
        if let ReassOutcome::Complete(ip) = r.push(&p.outer, 0) {
            out = Some(ip);
        }
    }
    // The NIC hashed every fragment on the outer addresses: one value.
    assert!(nic_hashes.windows(2).all(|w| w[0] == w[1]));
    let ip = out.expect("reassembled");
    let p = wire::parse_ip(&ip, &cfg).unwrap();
    assert_eq!(p.l4.ports(), Some((5555, 6666)));
    let flow = h.flow(&p);
    assert_eq!(flow.hash_type, rsskit_core::HashType::UdpIpv4);
    assert_ne!(flow.hash, nic_hashes[0], "the inner flow hashes elsewhere");
    assert_eq!(flow.tuple.src.to_string(), "10.6.0.1");
}

fn hex(s: &str) -> Vec<u8> {
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
}
