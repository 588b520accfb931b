//! The steering BPF programs in the real kernel, over loopback: every
//! datagram must arrive on the socket the software hash (or the sending
//! CPU) predicts. No root needed.

use rsskit_core::cbpf::{cpu_program, toeplitz_program};
use rsskit_core::{FlowTuple, HashType, L4Proto, RssKey, Toeplitz};
use rsskit_linux::bpf::attach_reuseport;
use rsskit_linux::socket::{udp_socket, wait_readable, UdpOptions};
use std::net::UdpSocket as Socket;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

mod common;
use common::{group, median};

/// `n` reuseport sockets on one port of `ip`, in bind order.
/// Receives until `want` datagrams have arrived (or 5 s pass); returns
/// (socket index, source address, payload) for each.
fn collect(socks: &[Socket], want: usize) -> Vec<(usize, SocketAddr, Vec<u8>)> {
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    while got.len() < want && Instant::now() < deadline {
        let mut any = false;
        for (i, s) in socks.iter().enumerate() {
            let mut buf = [0u8; 64];
            while let Ok((n, from)) = s.recv_from(&mut buf) {
                got.push((i, from, buf[..n].to_vec()));
                any = true;
            }
        }
        if !any {
            wait_readable(&socks[0], Duration::from_millis(5)).ok();
        }
    }
    assert_eq!(got.len(), want, "datagrams lost on loopback");
    got
}

/// Gives the sender's datagrams 4 bytes of IPv4 options (NOP NOP NOP EOL),
/// so their IHL is 6: the program must find the ports past them.
fn set_ip_options(s: &impl AsRawFd) {
    let opts = [1u8, 1, 1, 0];
    // SAFETY: `opts` is live for the call and its length is passed.
    let rc = unsafe {
        libc::setsockopt(s.as_raw_fd(), libc::IPPROTO_IP, libc::IP_OPTIONS, opts.as_ptr().cast(), 4)
    };
    assert_eq!(rc, 0, "IP_OPTIONS: {}", std::io::Error::last_os_error());
}

fn check_toeplitz(ip: &str, sources: &[SocketAddr], ht: HashType, nsocks: usize, bits: u32) {
    let key = RssKey::microsoft();
    let table: Vec<u32> = (0..1u32 << bits).map(|b| b % nsocks as u32).collect();
    let (socks, at) = group(ip, nsocks);
    let prog = toeplitz_program(&key, ht, &table).unwrap();
    attach_reuseport(&prog, &socks[0]).unwrap();
    let soft = Toeplitz::new(&key);
    let mut senders = Vec::new();
    for (i, src) in sources.iter().enumerate() {
        let s = udp_socket(*src, &UdpOptions::default()).unwrap();
        if src.is_ipv4() && i % 2 == 1 {
            set_ip_options(&s);
        }
        s.send_to(&(i as u32).to_be_bytes(), &at.into()).unwrap();
        senders.push(s);
    }
    let got = collect(&socks, sources.len());
    let mut per_sock = vec![0usize; nsocks];
    for (sock, from, data) in got {
        let t = FlowTuple::new(from.ip(), from.port(), at.ip(), at.port(), L4Proto::Udp);
        let h = soft.hash(t.input(ht).unwrap().as_bytes());
        let want = table[(h & ((1 << bits) - 1)) as usize] as usize;
        assert_eq!(
            sock, want,
            "{ht}: datagram {data:?} from {from} (hash {h:08x}) on socket {sock}, expected {want}"
        );
        per_sock[sock] += 1;
    }
    assert!(per_sock.iter().all(|&n| n > 0), "every socket got some flows: {per_sock:?}");
}

#[test]
fn toeplitz_ipv4_addresses_only() {
    // UDP hashed on addresses (FreeBSD default): vary the source address.
    let sources: Vec<SocketAddr> = (0..200u32)
        .map(|i| SocketAddr::new(IpAddr::from([127, 1 + (i / 250) as u8, (i % 250) as u8, 7]), 0))
        .collect();
    check_toeplitz("127.0.0.1", &sources, HashType::Ipv4, 4, 3);
}

#[test]
fn toeplitz_ipv4_four_tuple() {
    let sources: Vec<SocketAddr> =
        (0..200).map(|i| SocketAddr::new(IpAddr::from([127, 0, 0, 1 + i % 3]), 0)).collect();
    check_toeplitz("127.0.0.1", &sources, HashType::UdpIpv4, 3, 4);
}

#[test]
fn toeplitz_ipv6_four_tuple() {
    let sources: Vec<SocketAddr> = (0..200).map(|_| "[::1]:0".parse().unwrap()).collect();
    check_toeplitz("[::1]", &sources, HashType::UdpIpv6, 2, 2);
}

#[test]
fn cpu_steering_follows_the_sending_cpu() {
    // On loopback the datagram is processed on the sender's CPU (no RPS on lo).
    let cpus = rsskit_linux::cpulist::online();
    let allowed = rsskit_linux::affinity::current_affinity().unwrap();
    let cpus: Vec<usize> = cpus.into_iter().filter(|c| allowed.contains(c)).collect();
    let (socks, at) = group("127.0.0.1", cpus.len());
    attach_reuseport(&cpu_program(&cpus).unwrap(), &socks[0]).unwrap();
    let per_cpu = 50;
    for (i, &cpu) in cpus.iter().enumerate() {
        std::thread::spawn(move || {
            rsskit_linux::affinity::pin_current_thread(cpu).unwrap();
            let s = udp_socket("127.0.0.1:0".parse().unwrap(), &UdpOptions::default()).unwrap();
            for _ in 0..per_cpu {
                s.send_to(&[i as u8], &at.into()).unwrap();
            }
        })
        .join()
        .unwrap();
    }
    let got = collect(&socks, per_cpu * cpus.len());
    for (sock, _, data) in got {
        assert_eq!(
            sock, data[0] as usize,
            "datagram sent on CPU {} landed on socket {sock}",
            cpus[data[0] as usize]
        );
    }
}

/// What the steering program costs the kernel per datagram.
///
/// On loopback the receive path (reuseport selection and its BPF program
/// included) runs in the sender's softirq and, without IRQ time
/// accounting, is charged to the sending thread. So: one pinned thread
/// sends N datagrams with `sendmmsg` to a 2-socket group under each program,
/// two threads drain the sockets, and the sender's thread CPU time per
/// datagram is compared. Runs in a private network namespace (needs root,
/// `ip`), so the host's UDP counters are not disturbed.
///
/// `cargo test --release -p rsskit-runtime --test steer_loopback -- --ignored --nocapture steering_cost`
#[test]
#[ignore = "benchmark: run by hand with --ignored --nocapture (docs/BENCHMARKS.md)"]
fn steering_cost() {
    common::in_private_netns(|| {
        let cpus = rsskit_linux::cpulist::online();
        let send_cpu = *cpus.last().unwrap();
        rsskit_linux::affinity::pin_current_thread(send_cpu).unwrap();
        let key = RssKey::microsoft();
        let table: Vec<u32> = (0..8).map(|b| b % 2).collect();
        type Setup = (&'static str, &'static str, Option<HashType>, bool);
        let setups: [Setup; 6] = [
            ("kernel (no program)", "127.0.0.1", None, false),
            ("cpu (ld #cpu)", "127.0.0.1", None, true),
            ("toeplitz ipv4", "127.0.0.1", Some(HashType::Ipv4), false),
            ("toeplitz udp-ipv4", "127.0.0.1", Some(HashType::UdpIpv4), false),
            ("kernel ipv6 (no program)", "[::1]", None, false),
            ("toeplitz udp-ipv6", "[::1]", Some(HashType::UdpIpv6), false),
        ];
        let n = 200_000usize;
        let reps: usize = std::env::var("STEER_COST_REPS").ok().and_then(|v| v.parse().ok()).unwrap_or(5);
        let mut results: Vec<Vec<f64>> = vec![Vec::new(); setups.len()];
        let mut lens = vec![0usize; setups.len()];
        for _ in 0..reps {
            for (k, (_, ip, ht, cpu)) in setups.iter().enumerate() {
                let (socks, at) = group(ip, 2);
                if let Some(ht) = ht {
                    let p = toeplitz_program(&key, *ht, &table).unwrap();
                    lens[k] = p.len();
                    attach_reuseport(&p, &socks[0]).unwrap();
                } else if *cpu {
                    let p = cpu_program(&cpus).unwrap();
                    lens[k] = p.len();
                    attach_reuseport(&p, &socks[0]).unwrap();
                }
                results[k].push(common::sender_cpu_per_datagram(socks, at, n).0);
            }
        }
        println!("\nsender CPU ns per datagram (64 B payload, sendmmsg x32, median of {reps}, {n} datagrams each):");
        let base4 = median(&results[0]);
        let base6 = median(&results[4]);
        for (k, (name, ip, _, _)) in setups.iter().enumerate() {
            let m = median(&results[k]);
            let base = if ip.starts_with('[') { base6 } else { base4 };
            println!("  {name:<26} {:>5} insns  {m:>7.0} ns  ({:+.0} ns vs no program)", lens[k], m - base);
        }
    });
}
