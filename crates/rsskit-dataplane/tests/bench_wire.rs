//! Throughput of the wire layer, the packet hash and reassembly, one core.
//! Ignored by default (timing, not correctness); run in release:
//!
//!     cargo test --release -p rsskit-dataplane --test bench_wire -- --ignored --nocapture
//!
//! Prints medians of 7 runs; the figures go in docs/BENCHMARKS.md.

use rsskit_core::{HashConfig, RssKey};
use rsskit_dataplane::craft::{self, V4};
use rsskit_dataplane::hash::PacketHasher;
use rsskit_dataplane::reass::{ReassConfig, ReassOutcome, Reassembler};
use rsskit_dataplane::wire::{self, ethertype, ip::proto, ParseConfig};
use std::hint::black_box;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::time::Instant;

/// Median over `runs` of the rate (items per second) of `f`, which
/// processes `items` items per call.
fn rate(runs: usize, items: usize, mut f: impl FnMut()) -> f64 {
    f(); // warm-up
    let mut v: Vec<f64> = (0..runs)
        .map(|_| {
            let t = Instant::now();
            f();
            items as f64 / t.elapsed().as_secs_f64()
        })
        .collect();
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn frames64(n: usize) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| {
            craft::udp4_frame(
                Ipv4Addr::new(10, (i >> 8) as u8, i as u8, 1),
                1024 + i as u16,
                Ipv4Addr::new(192, 168, 0, 1),
                53,
                64,
            )
        })
        .collect()
}

#[test]
#[ignore = "benchmark: run by hand with --ignored --nocapture (docs/BENCHMARKS.md)"]
fn bench_parse_and_hash() {
    let frames = frames64(4096);
    let reps = 500;
    let n = frames.len() * reps;
    let cfg = ParseConfig::default();
    let hasher = PacketHasher::new(&RssKey::microsoft(), HashConfig::all());

    let ours = rate(7, n, || {
        for _ in 0..reps {
            for f in &frames {
                black_box(&wire::parse_ethernet(black_box(f), &cfg));
            }
        }
    });
    let etherparse = rate(7, n, || {
        for _ in 0..reps {
            for f in &frames {
                black_box(&etherparse::SlicedPacket::from_ethernet(black_box(f)));
            }
        }
    });
    let nocsum = ParseConfig { verify_ipv4_checksum: false, ..cfg };
    let ours_nocsum = rate(7, n, || {
        for _ in 0..reps {
            for f in &frames {
                black_box(&wire::parse_ethernet(black_box(f), &nocsum));
            }
        }
    });
    let parse_hash = rate(7, n, || {
        for _ in 0..reps {
            for f in &frames {
                if let Ok(p) = wire::parse_ethernet(black_box(f), &cfg) {
                    black_box(hasher.nic(&p).hash);
                }
            }
        }
    });
    println!("64-byte UDP/IPv4 frames, one core, median of 7 (Mpps):");
    println!("  etherparse SlicedPacket::from_ethernet      {:6.1}", etherparse / 1e6);
    println!("  rsskit wire::parse_ethernet (checksum on)   {:6.1}", ours / 1e6);
    println!("  rsskit wire::parse_ethernet (checksum off)  {:6.1}", ours_nocsum / 1e6);
    println!("  rsskit parse + PacketHasher::nic (UDP 4-t.) {:6.1}", parse_hash / 1e6);
    println!("  ratio rsskit(checksum on) / etherparse       {:6.2}", ours / etherparse);
    assert!(parse_hash > 0.0);
}

#[test]
#[ignore = "benchmark: run by hand with --ignored --nocapture (docs/BENCHMARKS.md)"]
fn bench_reassembly() {
    // 9000-byte UDP datagrams in 1500-byte (MTU) fragments.
    let datagrams = 512;
    let mut v4 = Vec::new();
    let mut v6 = Vec::new();
    let body = vec![0x5au8; 9000];
    for i in 0..datagrams {
        let mut h =
            V4::new(Ipv4Addr::new(10, 0, (i >> 8) as u8, i as u8), Ipv4Addr::new(10, 9, 9, 9), proto::UDP);
        h.id = i as u16;
        let udp = craft::udp(1000, 2000, &body);
        let cuts: Vec<usize> = (1..).map(|k| k * 1480).take_while(|&c| c < udp.len()).collect();
        for f in craft::fragment_v4(&h, &udp, &cuts) {
            v4.push(craft::eth(ethertype::IPV4, &[], &f));
        }
        let (s, d) = (
            Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, (i >> 8) as u16, i as u16),
            Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 9),
        );
        let cuts: Vec<usize> = (1..).map(|k| k * 1448).take_while(|&c| c < udp.len()).collect();
        for f in craft::fragment_v6(s, d, 0, &[], proto::UDP, i as u32, &udp, &cuts) {
            v6.push(craft::eth(ethertype::IPV6, &[], &f));
        }
    }
    let cfg = ParseConfig::default();
    let mut results = Vec::new();
    for (name, frames) in [("IPv4", &v4), ("IPv6", &v6)] {
        for reverse in [false, true] {
            let per = frames.len() / datagrams;
            let order: Vec<usize> = if reverse {
                (0..datagrams).flat_map(|d| (0..per).rev().map(move |k| d * per + k)).collect()
            } else {
                (0..frames.len()).collect()
            };
            let mut done = 0usize;
            let r = rate(7, frames.len(), || {
                let mut re = Reassembler::new(ReassConfig::default());
                for &i in &order {
                    let p = wire::parse_ethernet(&frames[i], &cfg).unwrap();
                    if let ReassOutcome::Complete(out) = re.push(&p.outer, 0) {
                        done += 1;
                        black_box(out);
                    }
                }
            });
            assert_eq!(done % datagrams, 0);
            let dps = r / per as f64;
            results.push(format!(
                "  {name} {:<8} {per} frags/datagram: {:5.2} M fragments/s, {:7.0} k datagrams/s, {:5.1} Gbit/s of datagrams",
                if reverse { "reverse" } else { "in order" },
                r / 1e6,
                dps / 1e3,
                dps * 9008.0 * 8.0 / 1e9
            ));
        }
    }
    println!(
        "Reassembly of 9000-byte UDP datagrams from 1500-byte fragments (parse + reassemble), median of 7:"
    );
    for l in results {
        println!("{l}");
    }
}

#[test]
#[ignore = "benchmark: run by hand with --ignored --nocapture (docs/BENCHMARKS.md)"]
fn bench_split() {
    use rsskit_core::{FlowTuple, HashType, L4Proto};
    println!(
        "size_of Packet {} IpLayer {}",
        std::mem::size_of::<wire::Packet>(),
        std::mem::size_of::<wire::IpLayer>()
    );
    let hasher = PacketHasher::new(&RssKey::microsoft(), HashConfig::all());
    let t = FlowTuple::new("10.0.0.1".parse().unwrap(), 1, "10.0.0.2".parse().unwrap(), 2, L4Proto::Udp);
    let n = 10_000_000;
    let r = rate(5, n, || {
        for i in 0..n {
            let mut t2 = t;
            t2.src_port = i as u16;
            black_box(hasher.tuple(black_box(&t2), HashType::UdpIpv4).hash);
        }
    });
    println!("hash only {:.1} Mpps", r / 1e6);
    let tz = rsskit_core::Toeplitz::new(&RssKey::microsoft());
    let r = rate(5, n, || {
        let mut inp = [1u8; 12];
        for i in 0..n {
            inp[8] = i as u8;
            black_box(tz.hash(black_box(&inp)));
        }
    });
    println!("toeplitz.hash(12 bytes) only {:.1} Mpps", r / 1e6);
    let r = rate(5, n, || {
        let mut inp = [1u8; 12];
        for i in 0..n {
            inp[8] = i as u8;
            black_box(tz.hash_array::<12>(black_box(&inp)));
        }
    });
    println!("toeplitz.hash_array::<12> only {:.1} Mpps", r / 1e6);
    let frames = frames64(4096);
    let r = rate(5, 4096 * 500, || {
        for _ in 0..500 {
            for f in &frames {
                black_box(rsskit_dataplane::wire::ip::ipv4_checksum_ok(black_box(&f[14..34])));
            }
        }
    });
    println!("checksum only {:.1} Mpps", r / 1e6);
}

/// For instruction counts under `valgrind --tool=callgrind` (stable under
/// machine load, unlike wall-clock rates): BENCH_WHAT=parse|parse_hash|etherparse|none.
#[test]
#[ignore = "benchmark: run by hand with --ignored --nocapture (docs/BENCHMARKS.md)"]
fn instructions() {
    let what = std::env::var("BENCH_WHAT").unwrap_or_default();
    if what.starts_with("reass") {
        // 9000-byte UDP datagrams in 1500-byte fragments, 100 datagrams;
        // "reass_build" only builds them (the baseline to subtract).
        let body = vec![0x5au8; 9000];
        let udp = craft::udp(1000, 2000, &body);
        let v6 = what.ends_with('6');
        let mut frames = Vec::new();
        for i in 0..100u16 {
            let frags = if v6 {
                let cuts: Vec<usize> = (1..).map(|k| k * 1448).take_while(|&c| c < udp.len()).collect();
                let (s, d) = (Ipv6Addr::LOCALHOST, Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 9));
                craft::fragment_v6(s, d, 0, &[], proto::UDP, u32::from(i), &udp, &cuts)
            } else {
                let mut h = V4::new(Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 9, 9, 9), proto::UDP);
                h.id = i;
                let cuts: Vec<usize> = (1..).map(|k| k * 1480).take_while(|&c| c < udp.len()).collect();
                craft::fragment_v4(&h, &udp, &cuts)
            };
            let et = if v6 { ethertype::IPV6 } else { ethertype::IPV4 };
            frames.extend(frags.iter().map(|f| craft::eth(et, &[], f)));
        }
        if what.starts_with("reass_build") {
            black_box(&frames);
            return;
        }
        let cfg = ParseConfig::default();
        let mut re = Reassembler::new(ReassConfig::default());
        let mut done = 0;
        for f in &frames {
            let p = wire::parse_ethernet(f, &cfg).unwrap();
            if let ReassOutcome::Complete(out) = re.push(&p.outer, 0) {
                done += 1;
                black_box(out);
            }
        }
        assert_eq!(done, 100);
        return;
    }
    let frames = frames64(1024);
    let cfg = ParseConfig::default();
    let hasher = PacketHasher::new(&RssKey::microsoft(), HashConfig::all());
    for _ in 0..100 {
        for f in &frames {
            match what.as_str() {
                "parse" => {
                    black_box(&wire::parse_ethernet(black_box(f), &cfg));
                }
                "parse_hash" => {
                    if let Ok(p) = wire::parse_ethernet(black_box(f), &cfg) {
                        black_box(hasher.nic(&p).hash);
                    }
                }
                "etherparse" => {
                    black_box(&etherparse::SlicedPacket::from_ethernet(black_box(f)));
                }
                _ => {
                    black_box(f);
                }
            }
        }
    }
}
