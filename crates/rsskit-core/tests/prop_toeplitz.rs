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

macro_rules! every_length {
    ($t:ident, $s:ident, $seed:ident, $count:ident; $($n:literal)*) => {
        $(check_batch::<$n>(&$t, &$s, $seed, $count)?;)*
    };
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
        // Every length a 60-byte key allows (longer than the key: skipped).
        every_length!(t, s, seed, count; 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27
            28 29 30 31 32 33 34 35 36 37 38 39 40 41 42 43 44 45 46 47 48 49 50 51 52 53 54 55 56);
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
