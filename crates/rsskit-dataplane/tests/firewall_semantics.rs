//! Firewall properties on frames built in Rust: symmetric steering, a
//! redirect whose halves live on different workers, the run-time rule swap,
//! and no state leaks after many flows.

use proptest::prelude::*;
use rsskit_core::{HashConfig, RssKey, RssPolicy};
use rsskit_dataplane::craft;
use rsskit_dataplane::firewall::sim::Cluster;
use rsskit_dataplane::firewall::{parse, Config, Dir, FlowOwners};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

const SYN: u8 = 0x02;
const ACK: u8 = 0x10;
const FIN: u8 = 0x01;

fn tcp_frame(src: IpAddr, sp: u16, dst: IpAddr, dp: u16, flags: u8) -> Vec<u8> {
    let mut t = craft::tcp(sp, dp, b"");
    t[13] = flags;
    match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => craft::eth(0x0800, &[], &craft::ipv4(&craft::V4::new(s, d, 6), &t)),
        (IpAddr::V6(s), IpAddr::V6(d)) => craft::eth(0x86dd, &[], &craft::ipv6(s, d, 6, &t)),
        _ => unreachable!(),
    }
}

fn v4(a: [u8; 4]) -> IpAddr {
    IpAddr::V4(Ipv4Addr::from(a))
}

proptest! {
    /// The symmetric key sends both directions of every flow to one worker.
    #[test]
    fn symmetric_key_keeps_both_directions_together(
        a in any::<[u8; 4]>(), b in any::<[u8; 4]>(), a6 in any::<[u8; 16]>(), b6 in any::<[u8; 16]>(),
        sp in any::<u16>(), dp in any::<u16>(), udp in any::<bool>(), workers in 2usize..8,
    ) {
        let s = FlowOwners::new(&policy(RssKey::symmetric(), HashConfig::all(), workers));
        let proto = if udp { 17 } else { 6 };
        prop_assert_eq!(s.worker_of(v4(a), sp, v4(b), dp, proto), s.worker_of(v4(b), dp, v4(a), sp, proto));
        let (x, y) = (IpAddr::V6(Ipv6Addr::from(a6)), IpAddr::V6(Ipv6Addr::from(b6)));
        prop_assert_eq!(s.worker_of(x, sp, y, dp, proto), s.worker_of(y, dp, x, sp, proto));
    }
}

const RULES: &str = "check-state\nallow tcp from any to me 80 setup keep-state\n";

/// `workers` workers steered with `key` and `hash`.
fn policy(key: RssKey, hash: HashConfig, workers: usize) -> RssPolicy {
    RssPolicy::with_workers(key, hash, workers, None).unwrap()
}

fn cfg(workers: usize, key: RssKey) -> Config {
    Config {
        policy: Arc::new(policy(key, HashConfig::default(), workers)),
        me: vec![v4([10, 0, 0, 1])],
        ..Config::default()
    }
}

#[test]
fn microsoft_key_loses_replies_symmetric_key_does_not() {
    let me = v4([10, 0, 0, 1]);
    let ms = FlowOwners::new(&policy(RssKey::microsoft(), HashConfig::default(), 2));
    // A client port whose reply hashes to the other worker under the Microsoft key.
    let c = v4([192, 168, 1, 10]);
    let port =
        (1024..u16::MAX).find(|&p| ms.worker_of(c, p, me, 80, 6) != ms.worker_of(me, 80, c, p, 6)).unwrap();
    for (key, reply_passes) in [(RssKey::microsoft(), false), (RssKey::symmetric(), true)] {
        let mut cl = Cluster::new(cfg(2, key), parse(RULES).unwrap());
        let o = cl.feed(&tcp_frame(c, port, me, 80, SYN), Dir::In, 1);
        assert!(o.pass);
        let r = cl.feed(&tcp_frame(me, 80, c, port, SYN | ACK), Dir::Out, 2);
        assert_eq!(r.pass, reply_passes, "hops {:?} vs {:?}", o.hops, r.hops);
        assert_eq!(o.hops[0] == r.hops[0], reply_passes);
    }
}

#[test]
fn redirect_across_workers_and_master_led_deletion() {
    let orig = v4([10, 0, 0, 1]);
    let new = v4([10, 0, 0, 2]);
    let c = v4([192, 168, 1, 10]);
    let s = FlowOwners::new(&policy(RssKey::symmetric(), HashConfig::default(), 2));
    let port = (1024..u16::MAX)
        .find(|&p| s.worker_of(c, p, orig, 8080, 6) != s.worker_of(c, p, new, 80, 6))
        .unwrap();
    let (m, sl) = (s.worker_of(c, port, orig, 8080, 6), s.worker_of(c, port, new, 80, 6));
    let rules =
        parse("check-state\nredirect tcp 10.0.0.1:8080 -> 10.0.0.2:80\nallow tcp from any to 10.0.0.2 80\n")
            .unwrap();
    let mut cl = Cluster::new(cfg(2, RssKey::symmetric()), rules);
    let o = cl.feed(&tcp_frame(c, port, orig, 8080, SYN), Dir::In, 1);
    assert!(o.pass);
    assert_eq!(o.hops, vec![m, sl], "master's worker, then the slave's");
    let mut st = [0; 2];
    st[m] += 1;
    st[sl] += 1;
    assert_eq!(cl.states(), st.to_vec(), "one master, one slave");
    let r = cl.feed(&tcp_frame(new, 80, c, port, SYN | ACK), Dir::Out, 2);
    assert!(r.pass);
    assert_eq!(r.hops, vec![sl, m], "reply: slave translates, master tracks");
    assert_eq!(&r.frame[26..30], &[10, 0, 0, 1], "source translated back");
    // Close both ways.
    for (f, t) in [
        (tcp_frame(c, port, orig, 8080, ACK), 3),
        (tcp_frame(c, port, orig, 8080, FIN | ACK), 4),
        (tcp_frame(new, 80, c, port, FIN | ACK), 5),
        (tcp_frame(c, port, orig, 8080, ACK), 6),
    ] {
        assert!(cl.feed(&f, Dir::In, t).pass);
    }
    // The slave never expires alone: before the master's closed lifetime
    // ends, both states are there.
    cl.tick(900);
    assert_eq!(cl.states(), st.to_vec());
    // The master expires (1 s after both FINs) and deletes the slave by message.
    cl.tick(1_007);
    assert_eq!(cl.states(), vec![0, 0]);
    let snap = cl.fw.snapshot();
    assert_eq!(snap.workers[sl].controls, 1, "slave removed by the master's message");
    assert_eq!(snap.states, 0);
    // A late packet of the flow matches the redirect rule again (it takes
    // any packet to 10.0.0.1:8080) and sets up a fresh master and slave.
    assert!(cl.feed(&tcp_frame(c, port, orig, 8080, ACK), Dir::In, 1_008).pass);
    assert_eq!(cl.states(), st.to_vec());
}

#[test]
fn rule_swap_at_run_time_keeps_states() {
    let me = v4([10, 0, 0, 1]);
    let c = v4([192, 168, 1, 10]);
    let mut cl = Cluster::new(cfg(2, RssKey::symmetric()), parse(RULES).unwrap());
    assert!(cl.feed(&tcp_frame(c, 1000, me, 80, SYN), Dir::In, 1).pass);
    // New rules: check-state kept, no new connections accepted.
    // (States keep the number of their rule, 200 here: a state hit counts on
    // whichever rule has that number in the current set, none here.)
    cl.fw.swap_rules(parse("100 check-state\n300 deny ip from any to any\n").unwrap());
    assert!(!cl.feed(&tcp_frame(c, 1001, me, 80, SYN), Dir::In, 2).pass, "new rule set in force");
    assert!(
        cl.feed(&tcp_frame(me, 80, c, 1000, SYN | ACK), Dir::Out, 3).pass,
        "existing state survives the swap"
    );
    let snap = cl.fw.snapshot();
    assert_eq!(snap.total.rule_swaps, 2, "every worker took the new set at its next batch");
    // Counters belong to the new set: the deny rule has the dropped SYN.
    assert_eq!(snap.rules[1].packets, 1);
}

#[test]
fn thousands_of_flows_leave_no_state() {
    let me = v4([10, 0, 0, 1]);
    for locked in [false, true] {
        let mut cl = Cluster::new(Config { locked, ..cfg(2, RssKey::symmetric()) }, parse(RULES).unwrap());
        let mut t = 1;
        for i in 0..3000u32 {
            let c = IpAddr::V4(Ipv4Addr::from(0xc0a8_0000 + i));
            // Ports uncorrelated with the addresses: with the 16-bit periodic
            // symmetric key, address and port bits at equal offsets mod 16 cancel.
            let p = 1024 + (i.wrapping_mul(7919) % 50000) as u16;
            for (f, d) in [
                (tcp_frame(c, p, me, 80, SYN), Dir::In),
                (tcp_frame(me, 80, c, p, SYN | ACK), Dir::Out),
                (tcp_frame(c, p, me, 80, ACK), Dir::In),
                (tcp_frame(c, p, me, 80, FIN | ACK), Dir::In),
                (tcp_frame(me, 80, c, p, FIN | ACK), Dir::Out),
                (tcp_frame(c, p, me, 80, ACK), Dir::In),
            ] {
                assert!(cl.feed(&f, d, t).pass);
            }
            t += 1;
        }
        // Flows closed over 3 s: the early ones are gone already.
        cl.tick(t);
        let snap = cl.fw.snapshot();
        assert!(snap.states < 1100, "{:?}", snap.workers);
        assert!(snap.workers.iter().all(|w| w.installs > 1000), "both workers used: {:?}", snap.workers);
        cl.tick(t + 1_000);
        assert_eq!(cl.states(), vec![0, 0], "locked={locked}");
        let snap = cl.fw.snapshot();
        assert_eq!(snap.total.installs, 3000);
        assert_eq!(snap.total.removed, 3000);
        assert_eq!(snap.states, 0);
        assert_eq!(snap.rules[1].packets, 18_000, "every packet counted on the keep-state rule");
    }
}

#[test]
fn ipv6_keep_state_and_redirect() {
    let me: IpAddr = "2001:db8::1".parse().unwrap();
    let new: IpAddr = "2001:db8::2".parse().unwrap();
    let c: IpAddr = "2001:db8:1::10".parse().unwrap();
    let rules = parse(
        "check-state\nallow tcp from any to me 80 setup keep-state\nredirect tcp [2001:db8::1]:8080 -> [2001:db8::2]:80\n\
         allow tcp from any to 2001:db8::2 80\n",
    )
    .unwrap();
    for locked in [false, true] {
        let mut cl =
            Cluster::new(Config { me: vec![me], locked, ..cfg(2, RssKey::symmetric()) }, rules.clone());
        assert!(cl.feed(&tcp_frame(c, 5000, me, 80, SYN), Dir::In, 1).pass);
        assert!(cl.feed(&tcp_frame(me, 80, c, 5000, SYN | ACK), Dir::Out, 2).pass);
        assert!(!cl.feed(&tcp_frame(me, 80, c, 5001, SYN | ACK), Dir::Out, 3).pass, "no state");
        let o = cl.feed(&tcp_frame(c, 5002, me, 8080, SYN), Dir::In, 4);
        assert!(o.pass);
        // IPv6 destination address at 14 + 24, destination port at 14 + 40 + 2.
        assert_eq!(&o.frame[38..54], &"2001:db8::2".parse::<Ipv6Addr>().unwrap().octets());
        assert_eq!(u16::from_be_bytes([o.frame[56], o.frame[57]]), 80);
        let r = cl.feed(&tcp_frame(new, 80, c, 5002, SYN | ACK), Dir::Out, 5);
        assert!(r.pass);
        assert_eq!(&r.frame[22..38], &"2001:db8::1".parse::<Ipv6Addr>().unwrap().octets());
        assert_eq!(u16::from_be_bytes([r.frame[54], r.frame[55]]), 8080);
        cl.tick(400_000);
        assert_eq!(cl.fw.snapshot().states, 0, "locked={locked}");
    }
}

/// Client ports whose flow to me:80 lands on worker `w` of `s`.
fn ports_on(s: &FlowOwners, c: IpAddr, me: IpAddr, w: usize, n: usize) -> Vec<u16> {
    (1024..u16::MAX).filter(|&p| s.worker_of(c, p, me, 80, 6) == w).take(n).collect()
}

#[test]
fn limit_hit_resyncs_collects_own_then_asks_the_others_once_per_second() {
    let me = v4([10, 0, 0, 1]);
    let c = v4([192, 168, 7, 7]);
    let s = FlowOwners::new(&policy(RssKey::symmetric(), HashConfig::default(), 2));
    // No expiry per batch: states go only when a collection is asked for.
    let config = Config { states_max: 100, expire_budget: 0, ..cfg(2, RssKey::symmetric()) };
    let mut cl = Cluster::new(config, parse(RULES).unwrap());
    // 100 opening states, all on worker 1.
    for p in ports_on(&s, c, me, 1, 100) {
        assert!(cl.feed(&tcp_frame(c, p, me, 80, SYN), Dir::In, 1_000).pass);
    }
    let on0 = ports_on(&s, c, me, 0, 3);
    // At the limit (the loose total may lag by the pending delta; resync makes it exact).
    assert!(!cl.feed(&tcp_frame(c, on0[0], me, 80, SYN), Dir::In, 2_000).pass, "limit holds");
    cl.tick(2_000);
    let snap = cl.fw.snapshot();
    assert_eq!(snap.states, 100);
    assert!(snap.resyncs >= 1);
    assert_eq!(snap.workers[0].limit_hits, 1);
    // Nothing expired yet: worker 0 collected its own (none), asked worker 1.
    assert_eq!(snap.gc_broadcasts, 1);
    assert_eq!(snap.workers[1].gc_runs, 1, "worker 1 answered at its next batch");
    assert_eq!(snap.workers[1].expired, 0, "states 1 s old do not expire");
    // 21 s later the states have expired, but worker 1 only collects when
    // asked; the last request was 20 s ago, so worker 0 asks again.
    assert!(
        !cl.feed(&tcp_frame(c, on0[1], me, 80, SYN), Dir::In, 22_000).pass,
        "refused while worker 1 holds them"
    );
    cl.tick(22_000);
    let snap = cl.fw.snapshot();
    assert_eq!(snap.gc_broadcasts, 2);
    assert_eq!(snap.workers[1].expired, 100, "worker 1 collected on request");
    assert!(cl.feed(&tcp_frame(c, on0[2], me, 80, SYN), Dir::In, 22_001).pass, "room again");
    // A second limit hit within the second does not broadcast again.
    let config = Config { states_max: 1, expire_budget: 0, ..cfg(2, RssKey::symmetric()) };
    let mut cl = Cluster::new(config, parse(RULES).unwrap());
    let on1 = ports_on(&s, c, me, 1, 1);
    assert!(cl.feed(&tcp_frame(c, on1[0], me, 80, SYN), Dir::In, 5_000).pass);
    for (i, t) in [5_100, 5_500, 5_999].into_iter().enumerate() {
        assert!(!cl.feed(&tcp_frame(c, on0[i], me, 80, SYN), Dir::In, t).pass);
    }
    assert_eq!(cl.fw.snapshot().gc_broadcasts, 1, "at most once per second");
    assert!(!cl.feed(&tcp_frame(c, on0[0], me, 80, SYN), Dir::In, 6_100).pass);
    assert_eq!(cl.fw.snapshot().gc_broadcasts, 2);
}

#[test]
fn rule_swap_while_threaded_workers_run() {
    use rsskit_dataplane::firewall::run::{run, Input, Order};
    use rsskit_dataplane::firewall::Firewall;
    use std::collections::HashMap;
    let me = v4([10, 0, 0, 1]);
    let fw = Firewall::new(cfg(2, RssKey::symmetric()), parse(RULES).unwrap());
    let fw2 = fw.clone();
    let addr = |i: u32| IpAddr::V4(Ipv4Addr::from(0x0a01_0000 + i.wrapping_mul(7919)));
    let index: HashMap<[u8; 4], u32> =
        (0..1000).map(|i| (Ipv4Addr::from(0x0a01_0000 + i * 7919).octets(), i)).collect();
    let mut i = 0u32;
    let inputs = std::iter::from_fn(move || {
        if i == 1000 {
            return None;
        }
        if i == 500 {
            fw2.swap_rules(parse("100 check-state\n300 deny ip from any to any\n").unwrap());
        }
        let f = tcp_frame(addr(i), 1024 + (i.wrapping_mul(104_729) % 60_000) as u16, me, 80, SYN);
        i += 1;
        Some(Input { frame: f, dir: Dir::In, ts_ms: u64::from(i) })
    });
    let mut passed = Vec::new();
    let r = run(
        &fw,
        inputs,
        32,
        None,
        Order::None,
        |f, _| passed.push(index[&[f[26], f[27], f[28], f[29]]]),
        None,
        |_| {},
    );
    let s = r.snapshot;
    assert_eq!(r.inputs, 1000);
    assert_eq!(s.total.packets, 1000, "no frame lost across the swap");
    assert_eq!(s.total.rule_swaps, 2, "both workers took the new set without stopping");
    assert_eq!(s.total.passed, passed.len() as u64);
    // A frame dispatched before the swap may meet either set (its worker
    // takes the new one at its next batch); frames after it, only the new
    // set, except within the one partial batch per worker that straddled it.
    let late = passed.iter().filter(|&&i| i >= 500 + 32).count();
    assert_eq!(late, 0, "frames well after the swap passed: {passed:?}");
    let deny = s.rules.iter().find(|r| r.number == 300).unwrap();
    assert_eq!(deny.packets, 1000 - passed.len() as u64);
}
