//! Fuzz the reassembler.
//!
//! Input byte 0 picks the mode:
//! - even: a raw stream of packets `[len_hi len_lo dt payload...]` pushed
//!   with small limits; the bounds (bytes, datagrams) must hold after every
//!   push and a completed datagram must fit in 65535 bytes.
//! - odd: a datagram of fuzzer-chosen size, cut at fuzzer-chosen offsets and
//!   pushed in a fuzzer-chosen order: it must come out byte-identical.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rsskit_dataplane::craft::{self, V4};
use rsskit_dataplane::reass::{ReassConfig, ReassOutcome, Reassembler};
use rsskit_dataplane::wire::{ip::proto, ParseConfig};

fn raw(data: &[u8]) {
    let cfg = ReassConfig {
        timeout_v4_ns: 300,
        timeout_v6_ns: 600,
        max_datagrams: 4,
        max_frags_per_datagram: 8,
        max_bytes: 4096,
    };
    let parse = ParseConfig { verify_ipv4_checksum: false, ..ParseConfig::default() };
    let mut r = Reassembler::new(cfg);
    let mut rest = data;
    let mut now = 0u64;
    while rest.len() >= 3 {
        let len = usize::from(u16::from_be_bytes([rest[0], rest[1]])).min(rest.len() - 3);
        now += u64::from(rest[2]);
        let pkt = &rest[3..3 + len];
        rest = &rest[3 + len..];
        if let ReassOutcome::Complete(out) = r.push_bytes(pkt, &parse, now) {
            assert!(out.len() <= 65535 + 40);
        }
        assert!(r.bytes_in_use() <= cfg.max_bytes);
        assert!(r.in_progress() <= cfg.max_datagrams);
    }
    r.expire(u64::MAX);
    assert_eq!(r.bytes_in_use(), 0);
}

fn structured(data: &[u8]) {
    if data.len() < 4 {
        return;
    }
    let v6 = data[0] & 1 == 1;
    let n = 8 + usize::from(u16::from_be_bytes([data[1], data[2]]) % 4000);
    let body: Vec<u8> = (0..n).map(|i| i as u8 ^ data[3]).collect();
    let payload = craft::udp(1, 2, &body);
    let len = payload.len();
    // Cut points from the remaining bytes.
    let mut cuts: Vec<usize> = data[4..].iter().map(|b| (usize::from(*b) * 8 * len / 2048) & !7).collect();
    cuts.retain(|&c| c > 0 && c < len);
    cuts.sort_unstable();
    cuts.dedup();
    let (orig, frags) = if v6 {
        let (s, d) = ("2001:db8::1".parse().unwrap(), "2001:db8::2".parse().unwrap());
        (
            craft::ipv6(s, d, proto::UDP, &payload),
            craft::fragment_v6(s, d, 0, &[], proto::UDP, 7, &payload, &cuts),
        )
    } else {
        let h = V4::new("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap(), proto::UDP);
        (craft::ipv4(&h, &payload), craft::fragment_v4(&h, &payload, &cuts))
    };
    if frags.len() < 2 {
        return;
    }
    // Order: rotate and reverse by input bits.
    let mut order: Vec<usize> = (0..frags.len()).collect();
    order.rotate_left(usize::from(data[3]) % frags.len());
    if data[0] & 2 != 0 {
        order.reverse();
    }
    let mut r = Reassembler::new(ReassConfig { max_frags_per_datagram: 1024, ..ReassConfig::default() });
    let mut done = 0;
    for i in order {
        match r.push_bytes(&frags[i], &ParseConfig::default(), 0) {
            ReassOutcome::Complete(out) => {
                assert_eq!(out, orig);
                done += 1;
            }
            ReassOutcome::Held => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(done, 1);
    assert_eq!(r.bytes_in_use(), 0);
}

fuzz_target!(|data: &[u8]| {
    match data.first() {
        Some(b) if b & 1 == 0 => raw(&data[1..]),
        Some(_) => structured(data),
        None => {}
    }
});
