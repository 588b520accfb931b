use super::*;
use crate::craft::*;
use crate::wire::{ethertype, ip::proto};
use core::net::{Ipv4Addr, Ipv6Addr};
use rsskit_core::Toeplitz;

const A: Ipv4Addr = Ipv4Addr::new(10, 1, 0, 1);
const B: Ipv4Addr = Ipv4Addr::new(10, 1, 0, 2);

fn spec(table: Vec<u32>, queues: usize) -> LiveSpec {
    LiveSpec {
        iface: "eth0".into(),
        key: RssKey::microsoft(),
        table,
        fields: FlowFields { udp4: Fields::FourTuple, ..FlowFields::ALL_FOUR },
        xfrm: rsskit_core::InputXfrm::None,
        queues,
    }
}

/// The reported table: queue `i % 4` at entry `i`.
fn round_robin() -> Vec<u32> {
    (0..128).map(|i| i % 4).collect()
}

/// Where an independent computation (the core's tuple input and
/// Toeplitz, not the data plane's fast path) puts a UDP flow.
fn index_of(sport: u16) -> usize {
    let t = FlowTuple::new(IpAddr::V4(A), sport, IpAddr::V4(B), 9000, L4Proto::Udp);
    let input = t.input(HashType::UdpIpv4).unwrap();
    Toeplitz::new(&RssKey::microsoft()).hash(input.as_bytes()) as usize % 128
}

fn feed(c: &mut LiveCheck, sport: u16, queue: Option<u16>, times: usize) -> Outcome {
    let f = udp4_frame(A, sport, B, 9000, 64);
    let mut last = None;
    for _ in 0..times {
        last = Some(c.observe(&Observation { queue, rxhash: None, frame: &f, wire_len: f.len() }));
    }
    last.unwrap()
}

#[test]
fn a_nic_that_follows_its_table_agrees_on_every_flow() {
    let table = round_robin();
    let mut c = LiveCheck::new(spec(table.clone(), 4));
    for sport in 5000..5024 {
        let q = table[index_of(sport)] as u16;
        assert_eq!(feed(&mut c, sport, Some(q), 3), Outcome::Agreed);
    }
    let r = c.report(0);
    assert!(r.balanced());
    assert_eq!((r.packets.seen, r.packets.agreed, r.packets.disagreed), (72, 72, 0));
    assert_eq!((r.flows.checked, r.flows.agreed, r.flows.disagreed, r.flows.split), (24, 24, 0, 0));
    assert_eq!(r.verdict.status, VerdictStatus::Follows);
    assert_eq!(
        r.verdict.text,
        "eth0 follows its reported RSS table: 24 of 24 flows (72 packets) on the predicted queue"
    );
    assert!(r.disagreements.is_empty());
    assert_eq!(r.per_queue.iter().map(|q| q.packets).sum::<u64>(), 72);
    assert!(r.per_queue.iter().all(|q| q.packets == q.predicted));
}

#[test]
fn a_nic_that_follows_another_table_is_caught_flow_by_flow() {
    // The virtio_net boot state: the driver reports one table, the device
    // steers by another (here: entry i -> queue (i / 2) % 4).
    let reported = round_robin();
    let real: Vec<u32> = (0..128).map(|i| (i / 2) % 4).collect();
    let mut c = LiveCheck::new(spec(reported.clone(), 4));
    let mut want_agree = 0;
    let mut first_miss = None;
    for sport in 5000..5024 {
        let i = index_of(sport);
        let same = reported[i] == real[i];
        want_agree += usize::from(same);
        if !same && first_miss.is_none() {
            first_miss = Some((sport, i));
        }
        let out = feed(&mut c, sport, Some(real[i] as u16), 2);
        assert_eq!(out, if same { Outcome::Agreed } else { Outcome::Disagreed });
    }
    assert!(want_agree < 24, "the two tables must differ on some of these flows");
    let r = c.report(7);
    assert!(r.balanced());
    assert_eq!(r.verdict.status, VerdictStatus::DoesNotFollow);
    assert_eq!((r.flows.agreed, r.flows.disagreed), (want_agree, 24 - want_agree));
    assert_eq!(r.packets.disagreed, 2 * (24 - want_agree) as u64);
    assert_eq!(r.packets.ring_drops, 7);
    assert_eq!(
        r.verdict.text,
        format!(
            "eth0 does not follow its reported RSS table: {want_agree} of 24 flows on the predicted queue \
             ({} of 48 packets); `rsskit apply` writes the table and makes it",
            2 * want_agree
        )
    );
    let (sport, i) = first_miss.unwrap();
    let d = &r.disagreements[0];
    assert_eq!(d.flow, format!("udp 10.1.0.1:{sport} -> 10.1.0.2:9000"));
    assert_eq!((d.table_index, d.predicted_queue, d.packets), (i, reported[i], 2));
    assert_eq!(d.observed, vec![QueuePackets { queue: real[i] as u16, packets: 2 }]);
    assert_eq!(r.disagreements.len(), (24 - want_agree).min(MAX_SHOWN));
}

#[test]
fn every_frame_is_counted_once_by_reason() {
    let mut c = LiveCheck::new(spec(round_robin(), 4));
    let ok = udp4_frame(A, 5000, B, 9000, 64);
    let q = round_robin()[index_of(5000)] as u16;
    let arp = eth(0x0806, &[], &[0u8; 28]);
    let frags = fragment_v4(&V4::new(A, B, proto::UDP), &udp(1, 2, &[0u8; 64]), &[24]);
    let a6: Ipv6Addr = "fd00::1".parse().unwrap();
    let b6: Ipv6Addr = "fd00::2".parse().unwrap();
    let ext = eth(
        ethertype::IPV6,
        &[],
        &ipv6(a6, b6, proto::DSTOPTS, &[&ext_header(17, &[])[..], &udp(1, 2, b"e")[..]].concat()),
    );
    let sctp = eth(ethertype::IPV4, &[], &ipv4(&V4::new(A, B, 132), &[0u8; 16]));
    let mut bad = ok.clone();
    bad[14] = 0x44; // IHL 4
    let obs = |frame: &[u8], queue: Option<u16>| (frame.to_vec(), queue, frame.len());
    let mut cut = ok.clone();
    cut.truncate(30);
    let cases: Vec<(Vec<u8>, Option<u16>, usize)> = vec![
        obs(&ok, Some(q)),
        obs(&ok, Some((q + 1) % 4)),
        obs(&ok, None),
        obs(&arp, Some(0)),
        obs(&eth(ethertype::IPV4, &[], &frags[0]), Some(0)),
        obs(&eth(ethertype::IPV4, &[], &frags[1]), Some(1)),
        obs(&ext, Some(2)),
        obs(&sctp, Some(3)),
        obs(&bad, Some(0)),
        (cut, Some(0), ok.len()),
    ];
    for (f, queue, wire_len) in &cases {
        c.observe(&Observation { queue: *queue, rxhash: None, frame: f, wire_len: *wire_len });
    }
    let r = c.report(3);
    assert!(r.balanced());
    assert_eq!((r.packets.seen, r.packets.agreed, r.packets.disagreed, r.packets.unchecked), (10, 1, 1, 8));
    let by: Vec<(&str, u64)> = r.packets.unchecked_by_reason.iter().map(|(k, &v)| (k.as_str(), v)).collect();
    assert_eq!(
        by,
        vec![
            ("cut_short", 1),
            ("fragment", 2),
            ("ipv6_extension_headers", 1),
            ("malformed_ipv4_bad_ihl", 1),
            ("not_ip", 1),
            ("queue_not_recorded", 1),
            ("sctp", 1),
        ]
    );
    assert_eq!(r.packets.ring_drops, 3);
    // One flow, one packet on and one off its queue: it disagrees, and is split.
    assert_eq!((r.flows.checked, r.flows.agreed, r.flows.disagreed, r.flows.split), (1, 0, 1, 1));
    // Every frame with a queue is on the per-queue counts.
    assert_eq!(r.per_queue.iter().map(|q| q.packets).sum::<u64>(), 9);
}

#[test]
fn no_table_one_queue_and_no_traffic_cannot_verify() {
    let mut c = LiveCheck::new(spec(vec![], 4));
    assert_eq!(feed(&mut c, 5000, Some(1), 5), Outcome::Unchecked(Unchecked::NoRssTable));
    let r = c.report(0);
    assert!(r.balanced());
    assert_eq!(r.verdict.status, VerdictStatus::CannotVerify);
    assert!(r.verdict.text.contains("reports no RSS indirection table"), "{}", r.verdict.text);
    assert!(r.verdict.text.contains("5 packets seen on 1 queue(s)"), "{}", r.verdict.text);

    let r = LiveCheck::new(spec(round_robin(), 4)).report(0);
    assert_eq!(r.verdict.status, VerdictStatus::CannotVerify);
    assert!(r.verdict.text.contains("none of the 0 packets"), "{}", r.verdict.text);

    // One queue: the queue says nothing, the NIC's hash does.
    let one = || LiveCheck::new(spec(vec![0; 128], 1));
    let f = udp4_frame(A, 5000, B, 9000, 64);
    let t = FlowTuple::new(IpAddr::V4(A), 5000, IpAddr::V4(B), 9000, L4Proto::Udp);
    let h = Toeplitz::new(&RssKey::microsoft()).hash(t.input(HashType::UdpIpv4).unwrap().as_bytes());
    let mut c = one();
    c.observe(&Observation { queue: Some(0), rxhash: Some(h), frame: &f, wire_len: f.len() });
    let r = c.report(0);
    assert_eq!(r.verdict.status, VerdictStatus::Follows, "{}", r.verdict.text);
    assert_eq!((r.rxhash.compared, r.rxhash.equal), (1, 1));
    let mut c = one();
    c.observe(&Observation { queue: Some(0), rxhash: Some(h ^ 1), frame: &f, wire_len: f.len() });
    let r = c.report(0);
    assert_eq!(r.verdict.status, VerdictStatus::CannotVerify);
    assert!(r.verdict.text.contains("equals rsskit's hash on 0 of 1 packets"), "{}", r.verdict.text);
}

#[test]
fn microsoft_vector_and_the_nics_own_hash() {
    // Microsoft's RSS verification suite: 66.9.149.187:2794 -> 161.142.100.80:1766
    // TCP/IPv4 hashes to 0x51ccc178; entry 0x78 = 120 of a 128-entry table.
    let mut table = vec![0u32; 128];
    table[120] = 3;
    let mut c = LiveCheck::new(spec(table, 4));
    let (s, d) = (Ipv4Addr::new(66, 9, 149, 187), Ipv4Addr::new(161, 142, 100, 80));
    let f = eth(ethertype::IPV4, &[], &ipv4(&V4::new(s, d, proto::TCP), &tcp(2794, 1766, b"x")));
    let o = |q, h| Observation { queue: Some(q), rxhash: Some(h), frame: &f, wire_len: f.len() };
    assert_eq!(c.observe(&o(3, 0x51cc_c178)), Outcome::Agreed);
    assert_eq!(c.observe(&o(2, 0x1234_5678)), Outcome::Disagreed);
    let r = c.report(0);
    assert_eq!((r.rxhash.compared, r.rxhash.equal), (2, 1));
    let d = &r.disagreements[0];
    assert_eq!((d.hash, d.hash_type, d.table_index, d.predicted_queue), (0x51cc_c178, "tcp-ipv4", 120, 3));
    assert_eq!(d.rxhash, Some(0x51cc_c178), "the first rxhash seen for the flow");
    // 2-tuple for TCP when the NIC says so: another hash, the suite's 0x323e8fc2.
    let mut c = LiveCheck::new(LiveSpec {
        fields: FlowFields { tcp4: Fields::TwoTuple, ..FlowFields::ALL_FOUR },
        ..spec(vec![0; 128], 4)
    });
    c.observe(&o(0, 0x323e_8fc2));
    assert_eq!(c.report(0).rxhash.equal, 1);
    // Fields rsskit does not model: not checked.
    let mut c = LiveCheck::new(LiveSpec {
        fields: FlowFields { tcp4: Fields::NotModeled, ..FlowFields::ALL_FOUR },
        ..spec(vec![0; 128], 4)
    });
    assert_eq!(c.observe(&o(0, 0)), Outcome::Unchecked(Unchecked::FieldsNotModeled));
}

#[test]
fn flows_beyond_the_cap_are_counted_per_packet() {
    let mut c = LiveCheck::new(spec(vec![0; 128], 2));
    let mut n = 0u64;
    'outer: for sport in 1..=2 {
        for a in 0..=65535u16 {
            let [x, y] = a.to_be_bytes();
            let f = udp4_frame(Ipv4Addr::new(10, 2, x, y), sport, B, 2, 64);
            c.observe(&Observation { queue: Some(0), rxhash: None, frame: &f, wire_len: f.len() });
            n += 1;
            if n == MAX_FLOWS as u64 + 10 {
                break 'outer;
            }
        }
    }
    let r = c.report(0);
    assert!(r.balanced());
    assert_eq!((r.flows.checked, r.flows.untracked_packets, r.packets.agreed), (MAX_FLOWS, 10, n));
}

/// A symmetric-xor NIC (ice): both directions of the Microsoft vector flow
/// hash to the reference's 0xac2b58ca (rsskit-core/tests/data/xfrm_vectors.py),
/// entry 74; a plain Toeplitz prediction would put the reverse elsewhere.
#[test]
fn symmetric_xor_nic_is_predicted_both_ways() {
    let mut table = vec![0u32; 128];
    table[74] = 2;
    let mut c = LiveCheck::new(LiveSpec { xfrm: rsskit_core::InputXfrm::SymXor, ..spec(table, 4) });
    let (s, d) = (Ipv4Addr::new(66, 9, 149, 187), Ipv4Addr::new(161, 142, 100, 80));
    let fwd = eth(ethertype::IPV4, &[], &ipv4(&V4::new(s, d, proto::TCP), &tcp(2794, 1766, b"x")));
    let rev = eth(ethertype::IPV4, &[], &ipv4(&V4::new(d, s, proto::TCP), &tcp(1766, 2794, b"x")));
    for f in [&fwd, &rev] {
        let o = Observation { queue: Some(2), rxhash: Some(0xac2b_58ca), frame: f, wire_len: f.len() };
        assert_eq!(c.observe(&o), Outcome::Agreed);
    }
    let r = c.report(0);
    assert_eq!((r.rxhash.compared, r.rxhash.equal), (2, 2));
}
