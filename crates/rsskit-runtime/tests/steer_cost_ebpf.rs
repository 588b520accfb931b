//! Steering program cost per datagram, side by side in one run: no
//! program (the kernel's reuseport hash), the classic BPF `toeplitz`
//! program, and the eBPF `SK_REUSEPORT` program (`--steer ebpf`), for the
//! same hash types. The method of `steer_loopback.rs`'s `steering_cost`
//! (docs/BENCHMARKS.md, "Steering program cost"): on loopback the receive
//! path, reuseport selection and its program included, runs in the
//! sender's softirq and is charged to the sending thread; one pinned thread
//! sends N datagrams of 64 bytes with `sendmmsg` (32 per call) to a
//! 2-socket group, two threads drain it (at most 256 in flight, so nothing
//! is dropped), and the sender's `CLOCK_THREAD_CPUTIME_ID` per datagram is
//! compared; setups interleaved, median over the repetitions. For the eBPF
//! program the kernel's own run-time statistics (`BPF_ENABLE_STATS`) also
//! give its cost alone, ns per run. Runs in a private network namespace
//! (root).
//!
//! `STEER_COST_REPS=9 cargo test --release -p rsskit-runtime --test steer_cost_ebpf -- --ignored --nocapture`

use rsskit_core::{CpuId, HashConfig, HashType, L4Proto, RssKey, RssPolicy};
use rsskit_linux::bpf::attach_reuseport;
use rsskit_linux::ebpf::reuseport::{enable_run_stats, BucketMethod, ReuseportSteering};
use std::os::fd::AsFd;

mod common;
use common::{group, median};

#[derive(Clone, Copy)]
enum Prog {
    None,
    Classic(HashType),
    Ebpf(HashType, BucketMethod),
}

#[test]
#[ignore = "benchmark: run by hand with --ignored --nocapture (docs/BENCHMARKS.md)"]
fn steering_cost_ebpf_vs_classic() {
    common::in_private_netns(|| {
        let _stats = enable_run_stats().expect("BPF_ENABLE_STATS (kernel >= 5.8, root)");
        let cpus = rsskit_linux::cpulist::online();
        rsskit_linux::affinity::pin_current_thread(*cpus.last().unwrap()).unwrap();
        // 8 buckets over 2 sockets, as the classic benchmark.
        let policy = |four: bool| {
            RssPolicy::new(
                RssKey::microsoft(),
                HashConfig::default().with_udp_4tuple(four),
                &[CpuId(0), CpuId(0)],
                Some(3),
            )
            .unwrap()
        };
        use BucketMethod::{Table, Windows};
        let setups: [(&str, &str, Prog); 11] = [
            ("none, IPv4", "127.0.0.1", Prog::None),
            ("classic toeplitz ipv4", "127.0.0.1", Prog::Classic(HashType::Ipv4)),
            ("eBPF ipv4 (windows)", "127.0.0.1", Prog::Ebpf(HashType::Ipv4, Windows)),
            ("eBPF ipv4 (table)", "127.0.0.1", Prog::Ebpf(HashType::Ipv4, Table)),
            ("classic toeplitz udp-ipv4", "127.0.0.1", Prog::Classic(HashType::UdpIpv4)),
            ("eBPF udp-ipv4 (windows)", "127.0.0.1", Prog::Ebpf(HashType::UdpIpv4, Windows)),
            ("eBPF udp-ipv4 (table)", "127.0.0.1", Prog::Ebpf(HashType::UdpIpv4, Table)),
            ("none, IPv6", "[::1]", Prog::None),
            ("classic toeplitz udp-ipv6", "[::1]", Prog::Classic(HashType::UdpIpv6)),
            ("eBPF udp-ipv6 (windows)", "[::1]", Prog::Ebpf(HashType::UdpIpv6, Windows)),
            ("eBPF udp-ipv6 (table)", "[::1]", Prog::Ebpf(HashType::UdpIpv6, Table)),
        ];
        let n = 200_000usize;
        let reps: usize = std::env::var("STEER_COST_REPS").ok().and_then(|v| v.parse().ok()).unwrap_or(5);
        let mut results: Vec<Vec<f64>> = vec![Vec::new(); setups.len()];
        let mut prog_ns: Vec<Vec<f64>> = vec![Vec::new(); setups.len()];
        let mut lens = vec![0usize; setups.len()];
        for _ in 0..reps {
            for (k, (_, ip, prog)) in setups.iter().enumerate() {
                let (socks, at) = group(ip, 2);
                let mut ebpf = None;
                match *prog {
                    Prog::None => {}
                    Prog::Classic(ht) => {
                        let p = policy(ht.has_ports()).toeplitz_program(ht).unwrap();
                        lens[k] = p.len();
                        attach_reuseport(&p, &socks[0]).unwrap();
                    }
                    Prog::Ebpf(ht, method) => {
                        let mut s =
                            ReuseportSteering::load_with(&policy(ht.has_ports()), L4Proto::Udp, method)
                                .unwrap();
                        for (w, sock) in socks.iter().enumerate() {
                            s.insert_socket(w as u32, sock.as_fd()).unwrap();
                        }
                        s.attach(socks[0].as_fd()).unwrap();
                        lens[k] = s.insns();
                        ebpf = Some(s);
                    }
                }
                let before = ebpf.as_ref().map(|s| s.run_stats().unwrap());
                let (ns, sent) = common::sender_cpu_per_datagram(socks, at, n);
                results[k].push(ns);
                if let (Some(s), Some((t0, c0))) = (&ebpf, before) {
                    let (t1, c1) = s.run_stats().unwrap();
                    assert_eq!(c1 - c0, sent as u64, "the program ran once per datagram");
                    prog_ns[k].push((t1 - t0) as f64 / (c1 - c0) as f64);
                    let c = s.counters().unwrap();
                    assert_eq!(c.steered, c1, "every run steered: {c:?}");
                }
            }
        }
        let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
        println!("\nsender CPU ns per datagram (64 B, sendmmsg x32, median of {reps}, {n} datagrams each; loadavg {})", load.trim());
        let base4 = median(&results[0]);
        let base6 = median(&results[7]);
        for (k, (name, ip, _)) in setups.iter().enumerate() {
            let m = median(&results[k]);
            let base = if ip.starts_with('[') { base6 } else { base4 };
            let alone = if prog_ns[k].is_empty() {
                String::new()
            } else {
                format!("  program alone {:.0} ns/run", median(&prog_ns[k]))
            };
            println!(
                "  {name:<27} {:>5} insns  {m:>7.0} ns  ({:+.0} ns, {:.3}x vs no program){alone}",
                lens[k],
                m - base,
                m / base
            );
        }
    });
}
