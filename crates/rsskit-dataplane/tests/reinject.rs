//! Re-injection: a reassembled or decapsulated datagram is processed by the
//! worker that owns its *inner* flow's bucket (full hash type), asserted per
//! packet, while the NIC hash (addresses only for fragments, outer header for
//! tunnels) put its pieces elsewhere.

use rsskit_core::RssPolicy;
use rsskit_core::{HashConfig, RssKey};
use rsskit_dataplane::craft::{eth, fragment_v4, fragment_v6, gre, ipv4, ipv6, udp, V4};
use rsskit_dataplane::hash::PacketHasher;
use rsskit_dataplane::io::{MemSource, Source};
use rsskit_dataplane::netisr::{mbuf_flags, Disposition, Handler, Netisr, NetisrConfig, PacketCtx};
use rsskit_dataplane::output::{NullSink, Sink};
use rsskit_dataplane::wire::ip::proto;
use rsskit_dataplane::wire::{ethertype, parse_ethernet, Packet, ParseConfig, Transport};
use std::collections::HashMap;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

/// Records, per handled datagram: (id from the payload, worker, hash, flags).
#[derive(Default)]
struct Rec(Vec<(u32, usize, u32, u8)>);

impl Handler for Rec {
    fn handle(&mut self, ctx: &PacketCtx, pkt: &Packet<'_>) -> Disposition {
        let Transport::Udp { payload, .. } = pkt.l4 else { panic!("only UDP in this test") };
        let id = u32::from_be_bytes(payload[..4].try_into().unwrap());
        self.0.push((id, ctx.worker, ctx.hash, ctx.flags));
        Disposition::Drop
    }
}

fn cfg(workers: usize) -> NetisrConfig {
    // UDP 4-tuple hashing on: the reassembled datagram's hash differs from
    // its fragments' 2-tuple hash, so re-injection really moves it.
    let policy = RssPolicy::with_workers(RssKey::microsoft(), HashConfig::all(), workers, None).unwrap();
    NetisrConfig { policy: policy.into(), batch: 8, ..Default::default() }
}

fn payload(id: u32, len: usize) -> Vec<u8> {
    let mut p = id.to_be_bytes().to_vec();
    p.extend((0..len - 4).map(|i| (i as u8).wrapping_mul(7).wrapping_add(id as u8)));
    p
}

/// The worker that owns the whole (unfragmented, untunnelled) datagram,
/// computed independently from the dispatcher.
fn inner_owner(c: &NetisrConfig, rss: &RssPolicy, whole_frame: &[u8]) -> (usize, u32) {
    let h = PacketHasher::new(c.policy.key(), c.policy.hash_config());
    let p = parse_ethernet(whole_frame, &ParseConfig::default()).unwrap();
    assert!(p.inner.is_none() && !p.outer.is_fragment());
    let r = h.nic(&p);
    (rss.worker_of_hash(r.hash).index(), r.hash)
}

fn nic_owner(c: &NetisrConfig, rss: &RssPolicy, frame: &[u8]) -> usize {
    let h = PacketHasher::new(c.policy.key(), c.policy.hash_config());
    rss.worker_of_hash(h.nic(&parse_ethernet(frame, &ParseConfig::default()).unwrap()).hash).index()
}

struct Case {
    /// Frames as they arrive.
    frames: Vec<Vec<u8>>,
    /// id -> the whole datagram as an unfragmented, untunnelled frame.
    expect: HashMap<u32, Vec<u8>>,
}

fn v4_fragments(n: u32) -> Case {
    let mut frames = Vec::new();
    let mut expect = HashMap::new();
    let (src, dst) = (Ipv4Addr::new(198, 51, 100, 7), Ipv4Addr::new(203, 0, 113, 9));
    for id in 0..n {
        let sport = 1000 + id as u16 * 13;
        let data = payload(id, 1200);
        let u = udp(sport, 5353, &data);
        let mut h = V4::new(src, dst, proto::UDP);
        h.id = id as u16 + 1;
        let mut frags = fragment_v4(&h, &u, &[400, 800]);
        if id % 3 == 1 {
            frags.reverse(); // last fragment first
        }
        if id % 3 == 2 {
            frags.swap(0, 1);
        }
        frames.extend(frags.into_iter().map(|f| eth(ethertype::IPV4, &[], &f)));
        expect.insert(id, eth(ethertype::IPV4, &[], &ipv4(&V4::new(src, dst, proto::UDP), &u)));
    }
    Case { frames, expect }
}

fn v6_fragments(n: u32, base: u32) -> Case {
    let mut frames = Vec::new();
    let mut expect = HashMap::new();
    let src: Ipv6Addr = "2001:db8::1".parse().unwrap();
    let dst: Ipv6Addr = "2001:db8:ffff::2".parse().unwrap();
    for k in 0..n {
        let id = base + k;
        let u = udp(2000 + k as u16 * 7, 443, &payload(id, 1000));
        let mut frags = fragment_v6(src, dst, 0, &[], proto::UDP, id, &u, &[504]);
        if k % 2 == 1 {
            frags.reverse();
        }
        frames.extend(frags.into_iter().map(|f| eth(ethertype::IPV6, &[], &f)));
        expect.insert(id, eth(ethertype::IPV6, &[], &ipv6(src, dst, proto::UDP, &u)));
    }
    Case { frames, expect }
}

fn tunnels(n: u32, base: u32) -> Case {
    let mut frames = Vec::new();
    let mut expect = HashMap::new();
    // One outer address pair: the NIC puts every tunnel packet on one worker.
    let (os, od) = (Ipv4Addr::new(192, 0, 2, 1), Ipv4Addr::new(192, 0, 2, 2));
    for k in 0..n {
        let id = base + k;
        let is = Ipv4Addr::new(10, 1, (k >> 8) as u8, k as u8);
        let id_ = Ipv4Addr::new(10, 2, 0, 1);
        let inner = ipv4(&V4::new(is, id_, proto::UDP), &udp(3000 + k as u16, 80, &payload(id, 64)));
        let outer = if k % 2 == 0 {
            ipv4(&V4::new(os, od, proto::IPIP), &inner)
        } else {
            ipv4(&V4::new(os, od, proto::GRE), &gre(ethertype::IPV4, Some(k), &inner))
        };
        frames.push(eth(ethertype::IPV4, &[], &outer));
        expect.insert(id, eth(ethertype::IPV4, &[], &inner));
    }
    Case { frames, expect }
}

/// Fragmented inner datagrams inside IPIP: decapsulate, re-inject the
/// fragments (to the owner of the inner 2-tuple), reassemble there,
/// re-inject again (to the owner of the inner 4-tuple).
fn fragments_in_tunnel(n: u32, base: u32) -> Case {
    let mut frames = Vec::new();
    let mut expect = HashMap::new();
    let (os, od) = (Ipv4Addr::new(192, 0, 2, 11), Ipv4Addr::new(192, 0, 2, 12));
    let (is, idst) = (Ipv4Addr::new(172, 16, 0, 1), Ipv4Addr::new(172, 16, 0, 2));
    for k in 0..n {
        let id = base + k;
        let u = udp(4000 + k as u16 * 3, 9, &payload(id, 700));
        let mut h = V4::new(is, idst, proto::UDP);
        h.id = 500 + k as u16;
        for f in fragment_v4(&h, &u, &[360]) {
            frames.push(eth(ethertype::IPV4, &[], &ipv4(&V4::new(os, od, proto::IPIP), &f)));
        }
        expect.insert(id, eth(ethertype::IPV4, &[], &ipv4(&V4::new(is, idst, proto::UDP), &u)));
    }
    Case { frames, expect }
}

fn run_case(
    workers: usize,
    case: Case,
    inputs_on: &[usize],
) -> (NetisrConfig, Vec<Rec>, Vec<rsskit_dataplane::netisr::WorkerReport>) {
    let c = cfg(workers);
    let frames = Arc::new(case.frames);
    let srcs: Vec<(usize, Box<dyn Source>)> = inputs_on
        .iter()
        .take(1)
        .map(|&w| (w, Box::new(MemSource::new(frames.clone(), frames.len() as u64)) as Box<dyn Source>))
        .collect();
    let sinks: Vec<Box<dyn Sink>> =
        (0..workers).map(|_| Box::new(NullSink::default()) as Box<dyn Sink>).collect();
    let handlers = (0..workers).map(|_| Rec::default()).collect();
    let r = Netisr::start(c.clone(), srcs, sinks, handlers).unwrap().join().unwrap();
    let rss = c.policy.clone();
    // Per packet: handled exactly once, on the owner of its inner flow, with the full hash.
    let mut seen: HashMap<u32, usize> = HashMap::new();
    for h in &r.handlers {
        for &(id, w, hash, flags) in &h.0 {
            let whole = case.expect.get(&id).unwrap_or_else(|| panic!("unknown datagram {id}"));
            let (want_w, want_hash) = inner_owner(&c, &rss, whole);
            assert_eq!(hash, want_hash, "datagram {id}: handled with the full re-hash");
            assert_eq!(w, want_w, "datagram {id}: handled on the owner of its inner flow");
            assert_ne!(flags & mbuf_flags::REINJECTED, 0, "datagram {id} was re-injected");
            *seen.entry(id).or_default() += 1;
        }
    }
    assert_eq!(seen.len(), case.expect.len(), "every datagram handled");
    assert!(seen.values().all(|&n| n == 1), "exactly once");
    (c, r.handlers, r.workers)
}

#[test]
fn reassembled_ipv4_goes_to_inner_flow_owner() {
    for workers in [2usize, 4] {
        let case = v4_fragments(60);
        let c = cfg(workers);
        let rss = c.policy.clone();
        // All fragments share one address pair: the NIC sends them all to one worker.
        let frag_w = nic_owner(&c, &rss, &case.frames[0]);
        assert!(case.frames.iter().all(|f| nic_owner(&c, &rss, f) == frag_w));
        // ... while the datagrams' own flows are spread over every worker.
        let owners: std::collections::HashSet<usize> =
            case.expect.values().map(|f| inner_owner(&c, &rss, f).0).collect();
        assert_eq!(owners.len(), workers, "test traffic must cover every worker");
        let (_, handlers, reports) = run_case(workers, case, &[0]);
        let t: u64 = reports.iter().map(|r| r.counters.reassembled).sum();
        assert_eq!(t, 60);
        assert_eq!(reports[frag_w].counters.reassembled, 60, "reassembly on the fragments' worker");
        assert_eq!(reports[frag_w].counters.reinjected, 60);
        let direct = reports[frag_w].counters.reinjected_direct;
        assert_eq!(handlers[frag_w].0.len() as u64, direct, "the ones it owns it handled itself");
        let queued: u64 =
            reports.iter().enumerate().filter(|(w, _)| *w != frag_w).map(|(_, r)| r.queued).sum();
        assert!(direct > 0 && queued > 0);
    }
}

#[test]
fn reassembled_ipv6_goes_to_inner_flow_owner() {
    let (_, _, reports) = run_case(2, v6_fragments(40, 10_000), &[0]);
    assert_eq!(reports.iter().map(|r| r.counters.reassembled).sum::<u64>(), 40);
}

#[test]
fn decapsulated_goes_to_inner_flow_owner() {
    let case = tunnels(64, 20_000);
    let c = cfg(2);
    let rss = c.policy.clone();
    let outer_w = nic_owner(&c, &rss, &case.frames[0]);
    let (_, _, reports) = run_case(2, case, &[1]);
    assert_eq!(reports[outer_w].counters.decapsulated, 64);
    assert_eq!(reports[outer_w].counters.reinjected, 64);
    assert!(reports[1 - outer_w].counters.handled > 0, "some inner flows belong to the other worker");
}

#[test]
fn fragments_inside_tunnels() {
    let (_, _, reports) = run_case(2, fragments_in_tunnel(30, 30_000), &[0]);
    let t = |f: fn(&rsskit_dataplane::netisr::WorkerCounters) -> u64| {
        reports.iter().map(|r| f(&r.counters)).sum::<u64>()
    };
    assert_eq!(t(|c| c.decapsulated), 60);
    assert_eq!(t(|c| c.reassembled), 30);
    assert_eq!(t(|c| c.reinjected), 90);
}
