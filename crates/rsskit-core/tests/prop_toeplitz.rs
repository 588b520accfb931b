//! Property tests: every Toeplitz path agrees with the bitwise reference,
//! for random keys and inputs of every length the key allows; the symmetric
//! key is symmetric.

use proptest::prelude::*;
use rsskit_core::toeplitz::reference;
use rsskit_core::{FlowTuple, HashType, L4Proto, RssKey, Toeplitz};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

fn key_strategy() -> impl Strategy<Value = RssKey> {
    (40usize..=60)
        .prop_flat_map(|n| proptest::collection::vec(any::<u8>(), n))
        .prop_map(|b| RssKey::from_bytes(&b).unwrap())
}

/// Batch of `count` inputs of N bytes from a seed.
fn batch_inputs<const N: usize>(seed: u64, count: usize) -> Vec<[u8; N]> {
    let mut s = seed | 1;
    (0..count)
        .map(|_| {
            std::array::from_fn(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                s as u8
            })
        })
        .collect()
}

fn check_batch<const N: usize>(
    t: &Toeplitz,
    s: &Toeplitz,
    seed: u64,
    count: usize,
) -> Result<(), TestCaseError> {
    if N > t.max_input_len() {
        return Ok(());
    }
    let ins = batch_inputs::<N>(seed, count);
    let mut a = vec![0u32; count];
    let mut b = vec![0u32; count];
    t.hash_batch(&ins, &mut a);
    s.hash_batch(&ins, &mut b);
    for (i, x) in ins.iter().enumerate() {
        let r = reference(t.key().as_bytes(), x);
        prop_assert_eq!(a[i], r, "batch ({:?}) N={} input {}", t.backend(), N, i);
        prop_assert_eq!(b[i], r, "scalar batch N={} input {}", N, i);
        prop_assert_eq!(t.hash(x), r, "fast N={}", N);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn fast_equals_reference_any_length(key in key_strategy(), seed in any::<u64>()) {
        let t = Toeplitz::new(&key);
        let s = Toeplitz::scalar(&key);
        let max = key.len() - 4;
        prop_assert_eq!(t.max_input_len(), max);
        let data = batch_inputs::<64>(seed, 1)[0];
        for n in 0..=max {
            let input: Vec<u8> = data.iter().cycle().take(n).copied().collect();
            let r = reference(key.as_bytes(), &input);
            prop_assert_eq!(t.hash(&input), r, "len {}", n);
            prop_assert_eq!(s.hash(&input), r, "scalar len {}", n);
        }
    }

    #[test]
    fn batch_equals_reference(key in key_strategy(), seed in any::<u64>(), count in 0usize..70) {
        let t = Toeplitz::new(&key);
        let s = Toeplitz::scalar(&key);
        check_batch::<1>(&t, &s, seed, count)?;
        check_batch::<3>(&t, &s, seed, count)?;
        check_batch::<5>(&t, &s, seed, count)?;
        check_batch::<8>(&t, &s, seed, count)?;
        check_batch::<11>(&t, &s, seed, count)?;
        check_batch::<12>(&t, &s, seed, count)?;
        check_batch::<15>(&t, &s, seed, count)?;
        check_batch::<16>(&t, &s, seed, count)?;
        check_batch::<17>(&t, &s, seed, count)?;
        check_batch::<20>(&t, &s, seed, count)?;
        check_batch::<23>(&t, &s, seed, count)?;
        check_batch::<25>(&t, &s, seed, count)?;
        check_batch::<32>(&t, &s, seed, count)?;
        check_batch::<33>(&t, &s, seed, count)?;
        check_batch::<36>(&t, &s, seed, count)?;
        check_batch::<40>(&t, &s, seed, count)?;
        check_batch::<47>(&t, &s, seed, count)?;
        check_batch::<56>(&t, &s, seed, count)?;
    }

    #[test]
    fn symmetric_key_is_symmetric_v4(a in any::<u32>(), b in any::<u32>(), pa in any::<u16>(), pb in any::<u16>()) {
        let t = Toeplitz::new(&RssKey::symmetric());
        let f = FlowTuple::new(IpAddr::V4(Ipv4Addr::from(a)), pa, IpAddr::V4(Ipv4Addr::from(b)), pb, L4Proto::Tcp);
        for ht in [HashType::Ipv4, HashType::TcpIpv4] {
            let fwd = f.input(ht).unwrap();
            let rev = f.reversed().input(ht).unwrap();
            prop_assert_eq!(t.hash_input(&fwd), t.hash_input(&rev));
            prop_assert_eq!(reference(t.key().as_bytes(), rev.as_bytes()), t.hash_input(&fwd));
        }
    }

    #[test]
    fn symmetric_key_is_symmetric_v6(a in any::<u128>(), b in any::<u128>(), pa in any::<u16>(), pb in any::<u16>()) {
        let t = Toeplitz::new(&RssKey::symmetric());
        let f = FlowTuple::new(IpAddr::V6(Ipv6Addr::from(a)), pa, IpAddr::V6(Ipv6Addr::from(b)), pb, L4Proto::Udp);
        for ht in [HashType::Ipv6, HashType::UdpIpv6] {
            let fwd = f.input(ht).unwrap();
            let rev = f.reversed().input(ht).unwrap();
            prop_assert_eq!(t.hash_input(&fwd), t.hash_input(&rev));
        }
        // And in a batch.
        let ins = [f.input(HashType::UdpIpv6).unwrap(), f.reversed().input(HashType::UdpIpv6).unwrap()];
        let mut out = [0u32; 2];
        t.hash_inputs(&ins, &mut out);
        prop_assert_eq!(out[0], out[1]);
    }
}

#[test]
fn microsoft_key_is_not_symmetric() {
    // The property above is not vacuous: with the default key the direction matters.
    let t = Toeplitz::new(&RssKey::microsoft());
    let f = FlowTuple::new("10.0.0.1".parse().unwrap(), 1000, "10.0.0.2".parse().unwrap(), 80, L4Proto::Tcp);
    let fwd = f.input(HashType::TcpIpv4).unwrap();
    let rev = f.reversed().input(HashType::TcpIpv4).unwrap();
    assert_ne!(t.hash_input(&fwd), t.hash_input(&rev));
}
