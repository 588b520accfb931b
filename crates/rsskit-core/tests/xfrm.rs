//! Symmetric input transforms (`input_xfrm`): rsskit's policy against
//! vectors from an independent reference, and the symmetry property over
//! 10,000 flows, with plain Toeplitz as the control.

use rsskit_core::rng::SplitMix64;
use rsskit_core::{CpuId, FlowTuple, HashConfig, HashType, InputXfrm, L4Proto, RssKey, RssPolicy};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// From `tests/data/xfrm_vectors.py` (Python: the kernel's field layout from
/// `Documentation/networking/scaling.rst` and a bit-at-a-time Toeplitz, no
/// rsskit code), Microsoft's key: (source, destination, source port,
/// destination port, transform, TCP 4-tuple hash, 2-tuple hash).
const VECTORS: [(&str, &str, u16, u16, &str, u32, u32); 10] = [
    ("66.9.149.187", "161.142.100.80", 2794, 1766, "sym-xor", 0xac2b58ca, 0x887bd7bc),
    ("66.9.149.187", "161.142.100.80", 2794, 1766, "sym-or-xor", 0xa65524fa, 0x277806fe),
    ("199.92.111.2", "65.69.140.83", 14230, 4739, "sym-xor", 0x231ac402, 0xb8a48b2d),
    ("199.92.111.2", "65.69.140.83", 14230, 4739, "sym-or-xor", 0x69d9c235, 0x0efd860b),
    ("24.19.198.95", "12.22.207.184", 12898, 38024, "sym-xor", 0xf4298103, 0x24308e2d),
    ("24.19.198.95", "12.22.207.184", 12898, 38024, "sym-or-xor", 0x886967e2, 0x53494126),
    ("3ffe:2501:200:1fff::7", "3ffe:2501:200:3::1", 2794, 1766, "sym-xor", 0x5ae081f3, 0x93faa660),
    ("3ffe:2501:200:1fff::7", "3ffe:2501:200:3::1", 2794, 1766, "sym-or-xor", 0xaea5d07d, 0x97d97493),
    ("ff02::1", "3ffe:501:8::260:97ff:fe40:efab", 14230, 4739, "sym-xor", 0x3d12f676, 0x36e6bcbb),
    ("ff02::1", "3ffe:501:8::260:97ff:fe40:efab", 14230, 4739, "sym-or-xor", 0xb7ea4926, 0x91dfa0cc),
];

fn policy(xfrm: InputXfrm) -> RssPolicy {
    let cpus: Vec<CpuId> = (0..8).map(CpuId).collect();
    RssPolicy::new(RssKey::microsoft(), HashConfig::default(), &cpus, Some(7)).unwrap().with_xfrm(xfrm)
}

#[test]
fn policy_hashes_match_the_independent_reference() {
    for (src, dst, sp, dp, x, four, two) in VECTORS {
        let xfrm = if x == "sym-xor" { InputXfrm::SymXor } else { InputXfrm::SymOrXor };
        let p = policy(xfrm);
        let (s, d): (IpAddr, IpAddr) = (src.parse().unwrap(), dst.parse().unwrap());
        let t = FlowTuple::new(s, sp, d, dp, L4Proto::Tcp);
        let (ht4, ht2) = if t.is_ipv6() {
            (HashType::TcpIpv6, HashType::Ipv6)
        } else {
            (HashType::TcpIpv4, HashType::Ipv4)
        };
        assert_eq!(p.hash_tuple_as(&t, ht4), four, "{src} {dst} {x} 4-tuple");
        assert_eq!(p.hash_tuple_as(&t, ht2), two, "{src} {dst} {x} 2-tuple");
        // And the reverse direction hashes the same.
        assert_eq!(p.hash_tuple_as(&t.reversed(), ht4), four, "{dst} {src} {x} 4-tuple reversed");
        assert_eq!(p.hash_tuple_as(&t.reversed(), ht2), two, "{dst} {src} {x} 2-tuple reversed");
    }
}

/// A random flow of either family.
fn flow(r: &mut SplitMix64) -> FlowTuple {
    let (s, d): (IpAddr, IpAddr) = if r.below(2) == 0 {
        (Ipv4Addr::from(r.next_u64() as u32).into(), Ipv4Addr::from(r.next_u64() as u32).into())
    } else {
        let a = (u128::from(r.next_u64()) << 64) | u128::from(r.next_u64());
        let b = (u128::from(r.next_u64()) << 64) | u128::from(r.next_u64());
        (Ipv6Addr::from(a).into(), Ipv6Addr::from(b).into())
    };
    FlowTuple::new(s, r.next_u64() as u16, d, r.next_u64() as u16, L4Proto::Udp)
}

/// 10,000 random flows: (a, b) and (b, a) land in the same bucket of 128
/// (the NIC's queue for any table) under both transforms and both tuple
/// sizes; without a transform most do not.
#[test]
fn ten_thousand_flows_and_their_reverse_share_a_queue() {
    let mut r = SplitMix64(0x5eed_0037);
    let flows: Vec<FlowTuple> = (0..10_000).map(|_| flow(&mut r)).collect();
    let same = |p: &RssPolicy, four: bool| {
        flows
            .iter()
            .filter(|t| {
                let ht = match (t.is_ipv6(), four) {
                    (false, true) => HashType::UdpIpv4,
                    (true, true) => HashType::UdpIpv6,
                    (false, false) => HashType::Ipv4,
                    (true, false) => HashType::Ipv6,
                };
                p.bucket(p.hash_tuple_as(t, ht)) == p.bucket(p.hash_tuple_as(&t.reversed(), ht))
            })
            .count()
    };
    for xfrm in [InputXfrm::SymXor, InputXfrm::SymOrXor] {
        let p = policy(xfrm);
        assert_eq!(same(&p, true), flows.len(), "{xfrm} 4-tuple");
        assert_eq!(same(&p, false), flows.len(), "{xfrm} 2-tuple");
    }
    // Control: plain Toeplitz puts a flow and its reverse in one bucket of
    // 128 about 1 time in 128 (78 of 10,000 expected); allow up to 2%.
    let plain = policy(InputXfrm::None);
    for four in [true, false] {
        let n = same(&plain, four);
        assert!(n < 200, "without a transform {n} of 10000 flows share a bucket with their reverse");
    }
}

/// The transforms do not collapse the spread: 10,000 flows still reach
/// every one of 128 buckets under each.
#[test]
fn symmetric_hashes_still_spread() {
    let mut r = SplitMix64(7);
    for xfrm in [InputXfrm::SymXor, InputXfrm::SymOrXor] {
        let p = policy(xfrm);
        let mut hit = [0u32; 128];
        for _ in 0..10_000 {
            let t = flow(&mut r);
            let ht = if t.is_ipv6() { HashType::UdpIpv6 } else { HashType::UdpIpv4 };
            hit[p.bucket(p.hash_tuple_as(&t, ht)) as usize] += 1;
        }
        assert!(hit.iter().all(|&n| n > 20), "{xfrm}: {hit:?}");
    }
}

/// The classic BPF Toeplitz program does not compute a transform: refused.
#[test]
fn steering_program_refuses_a_transform() {
    let e = policy(InputXfrm::SymXor).toeplitz_program(HashType::UdpIpv4).unwrap_err();
    assert!(e.to_string().contains("input transform symmetric-xor"), "{e}");
    assert!(policy(InputXfrm::None).toeplitz_program(HashType::UdpIpv4).is_ok());
}
