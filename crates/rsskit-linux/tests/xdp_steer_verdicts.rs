//! The XDP steering program's verdicts equal the software policy's: random
//! IPv4/IPv6 TCP/UDP/other tuples, with VLAN tags, IPv4 options, IPv6
//! extension headers and fragments, run once each in the kernel with
//! `BPF_PROG_TEST_RUN` (nothing attached, nothing sent); the CPU the program
//! chose is read from its per-target-CPU counter and must be the CPU the
//! policy gives the flow (the 2-tuple for fragments). Needs root (CAP_BPF);
//! fails loudly otherwise.

use rsskit_core::{CpuId, FlowTuple, HashConfig, L4Proto, RssKey, RssPolicy, WorkerId};
use rsskit_linux::xdp_steer::{Counters, XdpSteer};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

const XDP_PASS: u32 = 2;
const XDP_REDIRECT: u32 = 4;

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// Ethernet header, optionally one 802.1Q tag.
fn eth(ethertype: u16, vlan: Option<u16>) -> Vec<u8> {
    let mut f = vec![0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2];
    if let Some(v) = vlan {
        f.extend_from_slice(&0x8100u16.to_be_bytes());
        f.extend_from_slice(&v.to_be_bytes());
    }
    f.extend_from_slice(&ethertype.to_be_bytes());
    f
}

fn l4(proto: u8, sport: u16, dport: u16) -> Vec<u8> {
    let mut l = Vec::new();
    l.extend_from_slice(&sport.to_be_bytes());
    l.extend_from_slice(&dport.to_be_bytes());
    l.extend_from_slice(&[0; 16]);
    if proto == 6 {
        l[12] = 0x50;
    }
    l
}

struct Case {
    frame: Vec<u8>,
    tuple: FlowTuple,
    fragment: bool,
}

fn v4_case(r: &mut Rng) -> Case {
    let src = Ipv4Addr::from(r.next() as u32);
    let dst = Ipv4Addr::from(r.next() as u32);
    let proto = [6u8, 17, 1, 47][(r.next() % 4) as usize];
    let (sport, dport) = (r.next() as u16, r.next() as u16);
    let opts = (r.next() % 3) as usize * 4; // 0, 4 or 8 bytes of options
    let frag = match r.next() % 4 {
        0 => Some((true, 0u16)), // first fragment: has ports, still 2-tuple
        1 => Some((false, 185)), // last fragment
        _ => None,
    };
    let vlan = r.next().is_multiple_of(4).then_some(7);
    let mut f = eth(0x0800, vlan);
    let payload = l4(proto, sport, dport);
    let total = 20 + opts + payload.len();
    f.push(0x40 | ((20 + opts) / 4) as u8);
    f.push(0);
    f.extend_from_slice(&(total as u16).to_be_bytes());
    f.extend_from_slice(&[0x12, 0x34]);
    let fo = frag.map_or(0, |(mf, off)| (u16::from(mf) << 13) | off);
    f.extend_from_slice(&fo.to_be_bytes());
    f.extend_from_slice(&[64, proto, 0, 0]);
    f.extend_from_slice(&src.octets());
    f.extend_from_slice(&dst.octets());
    f.extend(std::iter::repeat_n(1u8, opts)); // NOP options
    f.extend_from_slice(&payload);
    let tuple = FlowTuple::new(IpAddr::V4(src), sport, IpAddr::V4(dst), dport, L4Proto::from_number(proto));
    Case { frame: f, tuple, fragment: frag.is_some() }
}

fn v6_case(r: &mut Rng) -> Case {
    let src = Ipv6Addr::from((u128::from(r.next()) << 64) | u128::from(r.next()));
    let dst = Ipv6Addr::from((u128::from(r.next()) << 64) | u128::from(r.next()));
    let proto = [6u8, 17, 58][(r.next() % 3) as usize];
    let (sport, dport) = (r.next() as u16, r.next() as u16);
    // Extension headers: none, destination options, hop-by-hop + fragment.
    let kind = r.next() % 4;
    let vlan = r.next().is_multiple_of(4).then_some(9);
    let mut ext = Vec::new();
    let mut fragment = false;
    let first = match kind {
        1 => {
            ext.extend_from_slice(&[proto, 1]); // dstopts, 16 bytes
            ext.extend_from_slice(&[1, 12]); // PadN
            ext.extend_from_slice(&[0; 12]);
            60
        }
        2 | 3 => {
            ext.extend_from_slice(&[44, 0, 1, 4, 0, 0, 0, 0]); // hop-by-hop, 8 bytes -> fragment
            let off: u16 = if kind == 2 { 1 } else { 0x100 << 3 }; // M set at 0, or a later one
            ext.extend_from_slice(&[proto, 0]);
            ext.extend_from_slice(&off.to_be_bytes());
            ext.extend_from_slice(&[0, 0, 0, 7]);
            fragment = true;
            0
        }
        _ => proto,
    };
    let payload = l4(proto, sport, dport);
    let mut f = eth(0x86dd, vlan);
    f.extend_from_slice(&[0x60, 0, 0, 0]);
    f.extend_from_slice(&((ext.len() + payload.len()) as u16).to_be_bytes());
    f.extend_from_slice(&[first, 64]);
    f.extend_from_slice(&src.octets());
    f.extend_from_slice(&dst.octets());
    f.extend_from_slice(&ext);
    f.extend_from_slice(&payload);
    let tuple = FlowTuple::new(IpAddr::V6(src), sport, IpAddr::V6(dst), dport, L4Proto::from_number(proto));
    Case { frame: f, tuple, fragment }
}

/// The target CPU whose counter went up by one between `a` and `b`.
fn chosen(a: &Counters, b: &Counters) -> Option<u32> {
    let up: Vec<u32> = a
        .cpus
        .iter()
        .zip(&b.cpus)
        .filter(|(x, y)| y.redirected != x.redirected)
        .map(|(x, y)| {
            assert_eq!(y.redirected, x.redirected + 1, "one frame, one count");
            x.cpu
        })
        .collect();
    assert!(up.len() <= 1, "several CPUs counted one frame: {up:?}");
    up.first().copied()
}

#[test]
#[cfg_attr(rsskit_no_clang, ignore = "built without clang: no eBPF objects")]
fn verdicts_equal_the_software_policy() {
    let ncpu = rsskit_linux::cpulist::online().len().min(256);
    assert!(ncpu >= 2, "needs 2 CPUs to tell CPUs apart (found {ncpu})");
    let cpus: Vec<CpuId> = (0..ncpu as u32).map(CpuId).collect();
    let mut r = Rng(0x9e37_79b9_7f4a_7c15);
    for (hc, key) in [(HashConfig::all(), RssKey::microsoft()), (HashConfig::default(), RssKey::symmetric())]
    {
        let mut policy = RssPolicy::new(key, hc, &cpus, Some(4)).unwrap();
        // A shuffled table, not the round robin.
        for b in 0..policy.buckets() {
            policy.assign(b, WorkerId((r.next() % ncpu as u64) as u32)).unwrap();
        }
        let mut steer = XdpSteer::load(&policy, 64).expect("load the XDP program (needs root / CAP_BPF)");
        let mut per_cpu = vec![0u32; ncpu];
        for i in 0..600 {
            let c = if i % 2 == 0 { v4_case(&mut r) } else { v6_case(&mut r) };
            let ht = policy.hash_type(c.tuple.is_ipv6(), c.tuple.proto, c.fragment);
            let want = policy.cpu_of(policy.worker_of_hash(policy.hash_tuple_as(&c.tuple, ht))).unwrap().0;
            let before = steer.counters().unwrap();
            let act = steer.test_run(&c.frame).unwrap();
            let after = steer.counters().unwrap();
            assert_eq!(act, XDP_REDIRECT, "case {i} {:?} ({ht}): action {act}", c.tuple);
            let got = chosen(&before, &after);
            assert_eq!(
                got,
                Some(want),
                "case {i} {:?} fragment {} ({ht}): program chose CPU {got:?}, policy CPU {want}",
                c.tuple,
                c.fragment
            );
            assert_eq!(after.frag_2tuple - before.frag_2tuple, u64::from(c.fragment), "case {i}");
            per_cpu[want as usize] += 1;
        }
        assert!(per_cpu.iter().filter(|&&n| n > 0).count() >= 2, "all cases on one CPU: {per_cpu:?}");

        // Non-IP passes, counted; a truncated IPv4 header passes as malformed.
        let before = steer.counters().unwrap();
        let mut arp = eth(0x0806, None);
        arp.extend_from_slice(&[0; 28]);
        assert_eq!(steer.test_run(&arp).unwrap(), XDP_PASS);
        let mut short = eth(0x0800, None);
        short.extend_from_slice(&[0x45, 0, 0, 20, 0, 0]);
        assert_eq!(steer.test_run(&short).unwrap(), XDP_PASS);
        let after = steer.counters().unwrap();
        assert_eq!(after.passed_non_ip - before.passed_non_ip, 1);
        assert_eq!(after.err_malformed - before.err_malformed, 1);
        assert_eq!(after.redirected(), before.redirected());
        assert_eq!(after.seen, after.redirected() + after.passed(), "every frame accounted for");
    }
}

/// The program's own cost per frame (kernel-timed `BPF_PROG_TEST_RUN`,
/// 1,000,000 runs per frame kind): `cargo test -p rsskit-linux --release
/// --test xdp_steer_verdicts -- --ignored --nocapture`.
#[test]
#[ignore = "benchmark: run by hand"]
fn program_cost_per_frame() {
    let ncpu = rsskit_linux::cpulist::online().len().min(256);
    let cpus: Vec<CpuId> = (0..ncpu as u32).map(CpuId).collect();
    let policy = RssPolicy::new(RssKey::microsoft(), HashConfig::all(), &cpus, None).unwrap();
    let mut steer = XdpSteer::load(&policy, 64).expect("load (needs root)");
    let mut r = Rng(42);
    let mut kinds: Vec<(&str, Vec<u8>)> = Vec::new();
    let mut arp = eth(0x0806, None);
    arp.extend_from_slice(&[0; 28]);
    kinds.push(("non-IP (pass)", arp));
    loop {
        let c = v4_case(&mut r);
        if c.tuple.proto == L4Proto::Udp && !c.fragment && c.frame.len() == 14 + 20 + 20 {
            kinds.push(("IPv4 UDP 4-tuple (12 bytes hashed)", c.frame));
            break;
        }
    }
    loop {
        let c = v6_case(&mut r);
        if c.tuple.proto == L4Proto::Udp && !c.fragment && c.frame.len() == 14 + 40 + 20 {
            kinds.push(("IPv6 UDP 4-tuple (36 bytes hashed)", c.frame));
            break;
        }
    }
    for (name, frame) in &kinds {
        let mut ns = Vec::new();
        for _ in 0..5 {
            ns.push(steer.test_run_repeat(frame, 1_000_000).unwrap().1);
        }
        ns.sort_unstable();
        println!("{name}: {} ns per frame (median of 5 x 1e6 runs; min {} max {})", ns[2], ns[0], ns[4]);
    }
}
