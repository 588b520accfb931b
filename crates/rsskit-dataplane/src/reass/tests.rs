use super::*;
use crate::craft::{self, V4};
use core::net::{Ipv4Addr, Ipv6Addr};

fn a4(s: &str) -> Ipv4Addr {
    s.parse().unwrap()
}
fn a6(s: &str) -> Ipv6Addr {
    s.parse().unwrap()
}
fn pc() -> ParseConfig {
    ParseConfig::default()
}

/// Every fragment offered is reassembled, dropped (timeouts included) or
/// still held, exactly.
fn balanced(r: &Reassembler) {
    let c = r.counters();
    assert_eq!(c.fragments, c.reassembled_frames + c.dropped() + c.timeout_frames + c.held, "{c:?}");
}

fn v4h(id: u16) -> V4 {
    let mut h = V4::new(a4("10.0.0.1"), a4("10.0.0.2"), proto::UDP);
    h.id = id;
    h
}

fn payload(n: usize, seed: u8) -> Vec<u8> {
    let body: Vec<u8> = (0..n).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect();
    craft::udp(4000, 53, &body)
}

/// Original datagram and its fragments at `cuts`.
fn v4(id: u16, n: usize, cuts: &[usize]) -> (Vec<u8>, Vec<Vec<u8>>) {
    let p = payload(n, id as u8);
    (craft::ipv4(&v4h(id), &p), craft::fragment_v4(&v4h(id), &p, cuts))
}

fn v6(id: u32, n: usize, cuts: &[usize]) -> (Vec<u8>, Vec<Vec<u8>>) {
    let p = payload(n, id as u8);
    let (s, d) = (a6("2001:db8::1"), a6("2001:db8::2"));
    (craft::ipv6(s, d, proto::UDP, &p), craft::fragment_v6(s, d, 0, &[], proto::UDP, id, &p, cuts))
}

fn feed(r: &mut Reassembler, frags: &[&Vec<u8>], now: u64) -> Vec<ReassOutcome> {
    frags.iter().map(|f| r.push_bytes(f, &pc(), now)).collect()
}

#[test]
fn in_order_reverse_last_first() {
    for order in [[0usize, 1, 2, 3], [3, 2, 1, 0], [3, 0, 2, 1], [1, 3, 0, 2]] {
        let (orig, fr) = v4(7, 200, &[64, 128, 176]);
        let mut r = Reassembler::new(ReassConfig::default());
        let outs = feed(&mut r, &order.iter().map(|&i| &fr[i]).collect::<Vec<_>>(), 0);
        assert!(outs[..3].iter().all(|o| *o == ReassOutcome::Held), "{outs:?}");
        assert_eq!(outs[3], ReassOutcome::Complete(orig.clone()));
        assert_eq!(r.bytes_in_use(), 0);
        assert_eq!(r.in_progress(), 0);
        assert_eq!(r.counters().reassembled, 1);

        let (orig, fr) = v6(0x1234_5678, 300, &[96, 200, 264]);
        let outs = feed(&mut r, &order.iter().map(|&i| &fr[i]).collect::<Vec<_>>(), 0);
        assert_eq!(outs[3], ReassOutcome::Complete(orig));
        assert_eq!(r.bytes_in_use(), 0);
    }
}

#[test]
fn output_header_is_fixed_up() {
    // IPv4 with options: first fragment's header kept, flags/offset cleared.
    let mut h = v4h(9);
    h.options = vec![0x94, 0x04, 0, 0];
    h.ttl = 17;
    let p = payload(100, 1);
    let fr = craft::fragment_v4(&h, &p, &[48]);
    let mut r = Reassembler::new(ReassConfig::default());
    r.push_bytes(&fr[1], &pc(), 0);
    let ReassOutcome::Complete(out) = r.push_bytes(&fr[0], &pc(), 0) else { panic!() };
    assert_eq!(out, craft::ipv4(&h, &p));
    let parsed = wire::parse_ip(&out, &pc()).unwrap();
    assert!(parsed.outer.frag.is_none());
    assert_eq!(parsed.outer.header_len, 24);
    assert_eq!(parsed.l4.ports(), Some((4000, 53)));

    // IPv6 with a destination options header before the fragment header and
    // another one after it (in the fragmentable part).
    let (s, d) = (a6("fd00::1"), a6("fd00::2"));
    let unfrag = craft::ext_header(proto::FRAGMENT, &[]);
    let mut fragmentable = craft::ext_header(proto::UDP, &[1, 2]);
    fragmentable.extend(payload(120, 3));
    let fr = craft::fragment_v6(s, d, proto::DSTOPTS, &unfrag, proto::DSTOPTS, 77, &fragmentable, &[64]);
    let mut rest = craft::ext_header(proto::DSTOPTS, &[]);
    rest.extend(&fragmentable);
    let orig = craft::ipv6(s, d, proto::DSTOPTS, &rest);
    r.push_bytes(&fr[1], &pc(), 0);
    assert_eq!(r.push_bytes(&fr[0], &pc(), 0), ReassOutcome::Complete(orig.clone()));
    let parsed = wire::parse_ip(&orig, &pc()).unwrap();
    assert_eq!(parsed.l4.ports(), Some((4000, 53)));
}

#[test]
fn exact_duplicates_are_dropped_alone() {
    let (orig, fr) = v4(1, 100, &[56]);
    let mut r = Reassembler::new(ReassConfig::default());
    assert_eq!(r.push_bytes(&fr[0], &pc(), 0), ReassOutcome::Held);
    assert_eq!(r.push_bytes(&fr[0], &pc(), 0), ReassOutcome::Dropped(ReassDrop::Duplicate));
    assert_eq!(r.push_bytes(&fr[1], &pc(), 0), ReassOutcome::Complete(orig));
    assert_eq!(r.counters().duplicates, 1);
}

#[test]
fn ipv4_overlap_drops_datagram_and_forgets() {
    let p = payload(100, 0);
    let h = v4h(5);
    let a = craft::fragment_v4(&h, &p, &[56]); // [0,56) [56,108)
    let b = craft::fragment_v4(&h, &p, &[48]); // [0,48) [48,108)
    let mut r = Reassembler::new(ReassConfig::default());
    assert_eq!(r.push_bytes(&a[0], &pc(), 0), ReassOutcome::Held);
    assert_eq!(r.push_bytes(&b[1], &pc(), 0), ReassOutcome::Dropped(ReassDrop::Overlap));
    assert_eq!(r.in_progress(), 0);
    assert_eq!(r.bytes_in_use(), 0);
    // Same range, different bytes: an overlap too.
    let mut evil = a[1].clone();
    let n = evil.len();
    evil[n - 1] ^= 0xff;
    let evil = craft::ipv4(
        &{
            let mut h2 = h.clone();
            h2.frag_off = 56;
            h2
        },
        &evil[20..],
    );
    assert_eq!(r.push_bytes(&a[1], &pc(), 0), ReassOutcome::Held);
    assert_eq!(r.push_bytes(&evil, &pc(), 0), ReassOutcome::Dropped(ReassDrop::Overlap));
    // IPv4: no tombstone, the next complete set reassembles.
    assert_eq!(r.push_bytes(&a[0], &pc(), 0), ReassOutcome::Held);
    assert!(matches!(r.push_bytes(&a[1], &pc(), 0), ReassOutcome::Complete(_)));
    // Per frame: each kill dropped the held fragment and the overlapping one.
    assert_eq!(r.counters().overlaps, 4);
    assert_eq!(r.counters().reassembled_frames, 2);
    balanced(&r);
}

#[test]
fn ipv6_overlap_tombstone_until_timeout() {
    let (orig, a) = v6(42, 100, &[56]);
    let (_, b) = v6(42, 100, &[48]);
    let mut r = Reassembler::new(ReassConfig::default());
    assert_eq!(r.push_bytes(&a[0], &pc(), 0), ReassOutcome::Held);
    assert_eq!(r.push_bytes(&b[1], &pc(), NS), ReassOutcome::Dropped(ReassDrop::Overlap));
    // RFC 5722: fragments not yet received are dropped too.
    assert_eq!(r.push_bytes(&a[0], &pc(), 2 * NS), ReassOutcome::Dropped(ReassDrop::DeadDatagram));
    assert_eq!(r.push_bytes(&a[1], &pc(), 2 * NS), ReassOutcome::Dropped(ReassDrop::DeadDatagram));
    assert_eq!(r.bytes_in_use(), DATAGRAM_OVERHEAD);
    // The tombstone lives 60 s from the first fragment.
    assert_eq!(r.push_bytes(&a[0], &pc(), 60 * NS), ReassOutcome::Held);
    assert_eq!(r.push_bytes(&a[1], &pc(), 60 * NS), ReassOutcome::Complete(orig));
    assert_eq!(r.counters().timeouts, 0, "tombstones are not timeouts");
    assert_eq!(r.counters().overlaps, 2);
    assert_eq!(r.counters().dead, 2);
    balanced(&r);
}

#[test]
fn contained_fragment_is_an_overlap() {
    let (_, a) = v4(3, 200, &[64, 128]);
    let (_, b) = v4(3, 200, &[64, 96]); // b[1] = [64,96) inside a[1] = [64,128)
    let mut r = Reassembler::new(ReassConfig::default());
    r.push_bytes(&a[1], &pc(), 0);
    assert_eq!(r.push_bytes(&b[1], &pc(), 0), ReassOutcome::Dropped(ReassDrop::Overlap));
}

#[test]
fn inconsistent_lengths() {
    let (_, a) = v4(3, 200, &[64]);
    let mut r = Reassembler::new(ReassConfig::default());
    assert_eq!(r.push_bytes(&a[1], &pc(), 0), ReassOutcome::Held);
    // A second last fragment ending elsewhere, not overlapping anything.
    let mut h = v4h(3);
    h.frag_off = 16;
    let other_last = craft::ipv4(&h, &[0u8; 32]);
    assert_eq!(r.push_bytes(&other_last, &pc(), 0), ReassOutcome::Dropped(ReassDrop::Inconsistent));
    assert_eq!(r.in_progress(), 0);
    // A non-last fragment past the end.
    let (_, c) = v4(4, 300, &[64, 128, 200]);
    let (_, e) = v4(4, 100, &[64]);
    assert_eq!(r.push_bytes(&e[1], &pc(), 0), ReassOutcome::Held);
    assert_eq!(r.push_bytes(&c[2], &pc(), 0), ReassOutcome::Dropped(ReassDrop::Inconsistent));
    assert_eq!(r.counters().inconsistent, 4, "held fragment + offending one, twice");
    balanced(&r);
}

#[test]
fn timeouts() {
    let (orig, fr) = v4(11, 100, &[56]);
    let cfg = ReassConfig { timeout_v4_ns: 30 * NS, ..ReassConfig::default() };
    let mut r = Reassembler::new(cfg);
    assert_eq!(r.push_bytes(&fr[0], &pc(), 0), ReassOutcome::Held);
    assert_eq!(r.next_deadline(), Some(30 * NS));
    r.expire(30 * NS - 1);
    assert_eq!(r.in_progress(), 1);
    // The second fragment arrives too late: the first expired, it starts anew.
    assert_eq!(r.push_bytes(&fr[1], &pc(), 30 * NS), ReassOutcome::Held);
    assert_eq!(r.counters().timeouts, 1);
    assert_eq!(r.push_bytes(&fr[0], &pc(), 31 * NS), ReassOutcome::Complete(orig));
    // IPv6 default 60 s.
    let (_, f6) = v6(1, 100, &[56]);
    r.push_bytes(&f6[0], &pc(), 100 * NS);
    r.expire(159 * NS);
    assert_eq!(r.in_progress(), 1);
    r.expire(160 * NS);
    assert_eq!(r.in_progress(), 0);
    assert_eq!(r.counters().timeouts, 2);
    assert_eq!(r.counters().timeout_frames, 2);
    assert_eq!(r.bytes_in_use(), 0);
    balanced(&r);
}

#[test]
fn tiny_fragments() {
    // RFC 1858: TCP first fragment with 8 bytes of header.
    let mut h = v4h(1);
    h.proto = proto::TCP;
    let seg = craft::tcp(1, 2, &[0; 64]);
    let fr = craft::fragment_v4(&h, &seg, &[8]);
    let mut r = Reassembler::new(ReassConfig::default());
    assert_eq!(r.push_bytes(&fr[0], &pc(), 0), ReassOutcome::Dropped(ReassDrop::TinyFragment));
    // RFC 3128: TCP fragment at offset 8 (could rewrite the flags).
    assert_eq!(r.push_bytes(&fr[1], &pc(), 0), ReassOutcome::Dropped(ReassDrop::TinyFragment));
    // A later fragment overlapping a 20-byte TCP header is an overlap.
    let ok = craft::fragment_v4(&h, &seg, &[24]);
    let over = craft::fragment_v4(&h, &seg, &[16]);
    assert_eq!(r.push_bytes(&ok[0], &pc(), 0), ReassOutcome::Held);
    assert_eq!(r.push_bytes(&over[1], &pc(), 0), ReassOutcome::Dropped(ReassDrop::Overlap));
    // IPv6 (RFC 7112): UDP header not in the first fragment.
    let (s, d) = (a6("::1"), a6("::2"));
    let mut fragmentable = craft::ext_header(proto::UDP, &[]);
    fragmentable.extend(craft::udp(1, 2, &[0; 40]));
    let fr = craft::fragment_v6(s, d, 0, &[], proto::DSTOPTS, 9, &fragmentable, &[8]);
    assert_eq!(r.push_bytes(&fr[0], &pc(), 0), ReassOutcome::Dropped(ReassDrop::TinyFragment));
    assert_eq!(r.counters().tiny, 3);
}

#[test]
fn max_datagrams() {
    let cfg = ReassConfig { max_datagrams: 3, ..ReassConfig::default() };
    let mut r = Reassembler::new(cfg);
    for id in 0..3 {
        assert_eq!(r.push_bytes(&v4(id, 100, &[56]).1[0], &pc(), 0), ReassOutcome::Held);
    }
    let (_, f) = v4(3, 100, &[56]);
    assert_eq!(r.push_bytes(&f[0], &pc(), 0), ReassOutcome::Dropped(ReassDrop::TooManyDatagrams));
    // Held ones still complete (no eviction).
    let (orig, f0) = v4(0, 100, &[56]);
    assert_eq!(r.push_bytes(&f0[1], &pc(), 0), ReassOutcome::Complete(orig));
    assert_eq!(r.push_bytes(&f[0], &pc(), 0), ReassOutcome::Held);
    assert_eq!(r.counters().held, 3, "datagrams 1, 2, 3 hold one fragment each");
    balanced(&r);
}

#[test]
fn weighted_pushes_carry_their_frames() {
    let (orig, fr) = v4(21, 100, &[56]);
    let mut r = Reassembler::new(ReassConfig::default());
    let p0 = wire::parse_ip(&fr[0], &pc()).unwrap();
    let p1 = wire::parse_ip(&fr[1], &pc()).unwrap();
    assert_eq!(r.push_frames(&p0.outer, 0, 3), ReassOutcome::Held);
    assert_eq!(r.counters().held, 3);
    assert_eq!(r.push_frames(&p1.outer, 0, 2), ReassOutcome::Complete(orig));
    assert_eq!(r.last_complete_frames(), 5);
    assert_eq!(r.counters().reassembled_frames, 5);
    balanced(&r);
}

#[test]
fn max_fragments_per_datagram() {
    let cfg = ReassConfig { max_frags_per_datagram: 4, ..ReassConfig::default() };
    let mut r = Reassembler::new(cfg);
    let cuts: Vec<usize> = (1..6).map(|i| i * 16).collect();
    let (_, fr) = v4(1, 200, &cuts);
    for f in &fr[..4] {
        assert_eq!(r.push_bytes(f, &pc(), 0), ReassOutcome::Held);
    }
    assert_eq!(r.push_bytes(&fr[4], &pc(), 0), ReassOutcome::Dropped(ReassDrop::TooManyFragments));
    assert_eq!(r.counters().too_many_fragments, 5, "the 4 held fragments and the fifth");
    assert_eq!(r.counters().held, 0);
    balanced(&r);
    assert_eq!(r.in_progress(), 0);
    assert_eq!(r.bytes_in_use(), 0);
}

#[test]
fn max_bytes() {
    let cfg = ReassConfig { max_bytes: 2000, ..ReassConfig::default() };
    let mut r = Reassembler::new(cfg);
    let (_, a) = v4(1, 1000, &[800]);
    assert_eq!(r.push_bytes(&a[0], &pc(), 0), ReassOutcome::Held);
    let used = r.bytes_in_use();
    // Overhead + buffer (20-byte header gap + 800 bytes; the 8-fragment
    // head start does not fit in 2000) + header copy + range list.
    assert_eq!(used, DATAGRAM_OVERHEAD + 20 + 800 + 20 + PREALLOC_RANGES * 8);
    let (_, b) = v4(2, 1200, &[1000]);
    assert_eq!(r.push_bytes(&b[0], &pc(), 0), ReassOutcome::Dropped(ReassDrop::MemoryLimit));
    assert_eq!(r.bytes_in_use(), used, "the refused datagram left nothing behind");
    // The held one still completes.
    assert!(matches!(r.push_bytes(&a[1], &pc(), 0), ReassOutcome::Complete(_)));
    assert!(r.counters().bytes_high_water <= 2000);
}

#[test]
fn not_fragments_and_garbage() {
    let mut r = Reassembler::new(ReassConfig::default());
    let whole = craft::ipv4(&v4h(1), &payload(10, 0));
    assert_eq!(r.push_bytes(&whole, &pc(), 0), ReassOutcome::NotFragment);
    assert_eq!(
        r.push_bytes(&[0x45, 0, 0], &pc(), 0),
        ReassOutcome::Dropped(ReassDrop::Malformed(DropReason::Ipv4Truncated))
    );
}

mod props {
    use super::*;
    use proptest::prelude::*;

    /// Cut points (multiples of 8) for a payload of `len`.
    fn cuts_strategy(len: usize) -> impl Strategy<Value = Vec<usize>> {
        let units = (len - 1) / 8;
        proptest::collection::btree_set(1..=units.max(1), 0..12)
            .prop_map(move |s| s.into_iter().map(|u| u * 8).filter(|&c| c > 0 && c < len).collect())
    }

    fn case() -> impl Strategy<Value = (bool, usize, Vec<usize>, Vec<usize>, Vec<usize>)> {
        (any::<bool>(), 16usize..3000).prop_flat_map(|(v6, n)| {
            let len = n + 8; // UDP header
            cuts_strategy(len).prop_flat_map(move |cuts| {
                let k = cuts.len() + 1;
                (
                    Just(v6),
                    Just(n),
                    Just(cuts),
                    Just((0..k).collect::<Vec<_>>()).prop_shuffle(),
                    proptest::collection::vec(0..k, 0..4),
                )
            })
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        /// Any fragmentation, any order, with exact duplicates mixed in,
        /// reassembles to the original exactly once, at the last new fragment.
        #[test]
        fn any_fragmentation_and_order((is_v6, n, cuts, order, dups) in case()) {
            let (orig, fr) = if is_v6 { v6(99, n, &cuts) } else { v4(99, n, &cuts) };
            let mut seq: Vec<usize> = order.clone();
            // Duplicates go right after their original's first appearance.
            for d in dups {
                let at = seq.iter().position(|&x| x == d).unwrap() + 1;
                if at < seq.len() { seq.insert(at, d); }
            }
            let mut r = Reassembler::new(ReassConfig::default());
            let mut completed = 0;
            for (i, &f) in seq.iter().enumerate() {
                match r.push_bytes(&fr[f], &pc(), i as u64) {
                    ReassOutcome::Complete(out) => {
                        prop_assert_eq!(&out, &orig);
                        completed += 1;
                    }
                    ReassOutcome::Held | ReassOutcome::Dropped(ReassDrop::Duplicate) => {}
                    ReassOutcome::NotFragment => prop_assert!(fr.len() == 1),
                    other => prop_assert!(false, "unexpected {:?}", other),
                }
            }
            prop_assert_eq!(completed, if fr.len() == 1 { 0 } else { 1 });
            prop_assert_eq!(r.bytes_in_use(), 0);
        }

        /// Several datagrams (both families, colliding IPv4/IPv6 ids) with
        /// their fragments interleaved at random: each completes to its own
        /// original, once.
        #[test]
        fn interleaved_datagrams(
            sizes in proptest::collection::vec((16usize..2000, 1usize..6), 2..5),
            seed in any::<u64>(),
        ) {
            let mut all: Vec<(usize, Vec<u8>)> = Vec::new();
            let mut origs = Vec::new();
            for (k, &(n, pieces)) in sizes.iter().enumerate() {
                let len = n + 8;
                let step = ((len / pieces) & !7).max(8);
                let cuts: Vec<usize> = (1..pieces).map(|i| i * step).filter(|&c| c < len).collect();
                // Ids 10, 10, 11, 11...: unique per family, equal across families.
                let id = 10 + k / 2;
                let (orig, fr) = if k % 2 == 0 {
                    v4(id as u16, n + k, &cuts)
                } else {
                    v6(id as u32, n + k, &cuts)
                };
                origs.push(orig);
                all.extend(fr.into_iter().map(|f| (k, f)));
            }
            // Deterministic shuffle from the seed.
            let mut x = seed | 1;
            for i in (1..all.len()).rev() {
                x ^= x << 13; x ^= x >> 7; x ^= x << 17;
                all.swap(i, (x % (i as u64 + 1)) as usize);
            }
            let mut r = Reassembler::new(ReassConfig::default());
            let mut got = vec![0usize; origs.len()];
            for (k, f) in &all {
                match r.push_bytes(f, &pc(), 0) {
                    ReassOutcome::Complete(out) => {
                        prop_assert_eq!(&out, &origs[*k]);
                        got[*k] += 1;
                    }
                    ReassOutcome::Held | ReassOutcome::NotFragment => {}
                    other => prop_assert!(false, "unexpected {:?}", other),
                }
            }
            for (k, (o, g)) in origs.iter().zip(&got).enumerate() {
                let whole = wire::parse_ip(o, &pc()).unwrap();
                let fragmented = all.iter().filter(|(j, _)| *j == k).count() > 1;
                prop_assert_eq!(*g, usize::from(fragmented), "datagram {} ({} bytes)", k, whole.outer.bytes.len());
            }
            prop_assert_eq!(r.bytes_in_use(), 0);
        }

        /// One extra fragment that overlaps the datagram anywhere but is not
        /// an exact duplicate: the datagram never completes.
        #[test]
        fn any_overlap_kills_the_datagram(
            is_v6 in any::<bool>(),
            n in 64usize..1500,
            start_units in 0usize..180,
            len_units in 1usize..40,
            // Before the last real fragment (after it the datagram completed).
            at in 0usize..2,
        ) {
            let len = n + 8;
            let cuts: Vec<usize> = vec![(len / 2) & !7];
            let (_, fr) = if is_v6 { v6(3, n, &cuts) } else { v4(3, n, &cuts) };
            let payload = payload(n, 3);
            let s = (start_units * 8).min((len - 8) & !7);
            let e = (s + len_units * 8).min(len);
            let more = e < len;
            let e = if more { e & !7 } else { e };
            prop_assume!(e > s);
            // Offset 0 without MF is a whole packet, not a fragment.
            prop_assume!(s != 0 || more);
            // Exactly a real fragment's range: arriving first it is that
            // fragment as far as anyone can tell (the real one then overlaps).
            prop_assume!(!((s == 0 && e == cuts[0]) || (s == cuts[0] && e == len)));
            let mut bad = payload[s..e].to_vec();
            bad[0] ^= 0xff;
            let extra = if is_v6 {
                let mut rest = craft::frag_header(proto::UDP, s as u16, more, 3).to_vec();
                rest.extend(&bad);
                craft::ipv6(a6("2001:db8::1"), a6("2001:db8::2"), proto::FRAGMENT, &rest)
            } else {
                let mut h = v4h(3);
                h.frag_off = s as u16;
                h.mf = more;
                craft::ipv4(&h, &bad)
            };
            let mut seq: Vec<&Vec<u8>> = fr.iter().collect();
            seq.insert(at, &extra);
            let mut r = Reassembler::new(ReassConfig::default());
            for f in seq {
                let out = r.push_bytes(f, &pc(), 0);
                prop_assert!(!matches!(out, ReassOutcome::Complete(_)), "completed despite an overlap");
            }
        }

        /// Random fragment floods: memory and datagram count stay bounded
        /// after every single fragment, and accounting returns to zero.
        #[test]
        fn limits_hold_under_floods(
            frags in proptest::collection::vec(
                (any::<bool>(), 0u16..6, 0u16..200, 1usize..180, any::<bool>(), 0u64..100),
                1..400),
            max_bytes in 500usize..20_000,
            max_datagrams in 1usize..8,
            max_frags in 1usize..10,
        ) {
            let cfg = ReassConfig {
                max_bytes, max_datagrams, max_frags_per_datagram: max_frags,
                timeout_v4_ns: 30, timeout_v6_ns: 60,
            };
            let mut r = Reassembler::new(cfg);
            let mut now = 0;
            for (is_v6, id, off_units, len, more, dt) in frags {
                now += dt;
                let len = if more { (len + 7) & !7 } else { len };
                let data: Vec<u8> = (0..len).map(|i| (i as u8) ^ (id as u8)).collect();
                let off = off_units * 8;
                let pkt = if is_v6 {
                    let mut rest = craft::frag_header(proto::UDP, off, more, u32::from(id)).to_vec();
                    rest.extend(&data);
                    craft::ipv6(a6("::1"), a6("::2"), proto::FRAGMENT, &rest)
                } else {
                    let mut h = v4h(id);
                    h.frag_off = off;
                    h.mf = more;
                    craft::ipv4(&h, &data)
                };
                let _ = r.push_bytes(&pkt, &pc(), now);
                prop_assert!(r.bytes_in_use() <= max_bytes);
                prop_assert!(r.in_progress() <= max_datagrams);
            }
            prop_assert!(r.counters().bytes_high_water <= max_bytes);
            let c = *r.counters();
            prop_assert_eq!(c.fragments, c.reassembled_frames + c.dropped() + c.timeout_frames + c.held);
            r.expire(u64::MAX);
            let c = *r.counters();
            prop_assert_eq!(c.held, 0);
            prop_assert_eq!(c.fragments, c.reassembled_frames + c.dropped() + c.timeout_frames);
            prop_assert_eq!(r.bytes_in_use(), 0);
            prop_assert_eq!(r.in_progress(), 0);
        }
    }
}
