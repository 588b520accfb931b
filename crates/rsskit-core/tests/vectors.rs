//! The verification vectors of the Microsoft RSS specification ("Verifying
//! the RSS Hash Calculation"; also Intel 82599 datasheet 7.1.2.8.3), default
//! key. The published tables list the destination first; the hash input puts
//! the source first, ports in network byte order.

use rsskit_core::toeplitz::reference;
use rsskit_core::{FlowTuple, HashInput, HashType, L4Proto, RssKey, Toeplitz};
use std::net::IpAddr;

/// (source, source port, destination, destination port, 2-tuple hash, TCP 4-tuple hash)
const IPV4: [(&str, u16, &str, u16, u32, u32); 5] = [
    ("66.9.149.187", 2794, "161.142.100.80", 1766, 0x323e8fc2, 0x51ccc178),
    ("199.92.111.2", 14230, "65.69.140.83", 4739, 0xd718262a, 0xc626b0ea),
    ("24.19.198.95", 12898, "12.22.207.184", 38024, 0xd2d0a5de, 0x5c2b394a),
    ("38.27.205.30", 48228, "209.142.163.6", 2217, 0x82989176, 0xafc7327f),
    ("153.39.163.191", 44251, "202.188.127.2", 1303, 0x5d1809c5, 0x10e828a2),
];

/// Same for IPv6 (the third row's source port is 44251 in the spec's table).
const IPV6: [(&str, u16, &str, u16, u32, u32); 3] = [
    ("3ffe:2501:200:1fff::7", 2794, "3ffe:2501:200:3::1", 1766, 0x2cc18cd5, 0x40207d3d),
    ("3ffe:501:8::260:97ff:fe40:efab", 14230, "ff02::1", 4739, 0x0f0c461c, 0xdde51bbf),
    ("3ffe:1900:4545:3:200:f8ff:fe21:67cf", 44251, "fe80::200:f8ff:fe21:67cf", 38024, 0x4b61e985, 0x02d1feef),
];

/// Every vector as (input, expected hash), built through `FlowTuple::input`.
fn vectors() -> Vec<(HashInput, u32)> {
    let mut v = Vec::new();
    for (rows, two, four) in
        [(&IPV4[..], HashType::Ipv4, HashType::TcpIpv4), (&IPV6[..], HashType::Ipv6, HashType::TcpIpv6)]
    {
        for &(src, sp, dst, dp, h2, h4) in rows {
            let t =
                FlowTuple::new(src.parse::<IpAddr>().unwrap(), sp, dst.parse().unwrap(), dp, L4Proto::Tcp);
            v.push((t.input(two).unwrap(), h2));
            v.push((t.input(four).unwrap(), h4));
        }
    }
    assert_eq!(v.len(), 16);
    v
}

#[test]
fn first_vector_bytes_are_source_first_network_order() {
    let (input, _) = vectors()[1];
    assert_eq!(
        input.as_bytes(),
        &[66, 9, 149, 187, 161, 142, 100, 80, 0x0a, 0xea, 0x06, 0xe6],
        "src addr, dst addr, src port 2794, dst port 1766"
    );
}

#[test]
fn reference_matches_spec() {
    let key = RssKey::microsoft();
    for (input, want) in vectors() {
        assert_eq!(reference(key.as_bytes(), input.as_bytes()), want, "{input:?}");
    }
}

#[test]
fn fast_matches_spec() {
    let key = RssKey::microsoft();
    for t in [Toeplitz::new(&key), Toeplitz::scalar(&key)] {
        for (input, want) in vectors() {
            assert_eq!(t.hash(input.as_bytes()), want, "{input:?}");
            assert_eq!(t.hash_input(&input), want, "{input:?}");
        }
    }
}

#[test]
fn batch_matches_spec() {
    let key = RssKey::microsoft();
    let vs = vectors();
    for t in [Toeplitz::new(&key), Toeplitz::scalar(&key)] {
        // Mixed lengths, repeated past one block of 16.
        let inputs: Vec<HashInput> = vs.iter().cycle().take(40).map(|v| v.0).collect();
        let mut out = vec![0u32; inputs.len()];
        t.hash_inputs(&inputs, &mut out);
        for (i, h) in out.iter().enumerate() {
            assert_eq!(*h, vs[i % vs.len()].1, "backend {:?} input {i}", t.backend());
        }
        // Fixed-size forms.
        let v4: Vec<[u8; 12]> = vs
            .iter()
            .filter(|v| v.0.as_bytes().len() == 12)
            .map(|v| v.0.as_bytes().try_into().unwrap())
            .collect();
        let v6: Vec<[u8; 36]> = vs
            .iter()
            .filter(|v| v.0.as_bytes().len() == 36)
            .map(|v| v.0.as_bytes().try_into().unwrap())
            .collect();
        let mut o4 = vec![0u32; v4.len()];
        let mut o6 = vec![0u32; v6.len()];
        t.hash_batch(&v4, &mut o4);
        t.hash_batch(&v6, &mut o6);
        assert_eq!(o4, IPV4.iter().map(|r| r.5).collect::<Vec<_>>());
        assert_eq!(o6, IPV6.iter().map(|r| r.5).collect::<Vec<_>>());
    }
}
