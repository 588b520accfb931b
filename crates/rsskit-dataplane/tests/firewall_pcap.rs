//! Firewall semantics on the crafted captures of scripts/gen-firewall-pcaps.py
//! (testdata/firewall/NAME.pcap + NAME.json): per-packet verdicts, rewritten
//! addresses, exact per-rule counters, and empty tables at the end; each
//! scenario with per-worker tables and with the locked baseline.

use rsskit_dataplane::firewall::run::{self, direction, Input};
use rsskit_dataplane::firewall::sim::Cluster;
use rsskit_dataplane::firewall::{parse, symmetric_policy, Config, Firewall};
use rsskit_dataplane::io::pcap::read_all;
use rsskit_dataplane::wire::{internet_checksum, parse_ethernet, ParseConfig};
use serde_json::Value;
use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::PathBuf;

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("testdata/firewall")
}

struct Scenario {
    json: Value,
    frames: Vec<(u64, Vec<u8>)>,
}

fn load(name: &str) -> Scenario {
    let j = std::fs::read_to_string(dir().join(format!("{name}.json"))).expect("scenario json");
    let json: Value = serde_json::from_str(&j).unwrap();
    let frames = read_all(&dir().join(format!("{name}.pcap"))).expect("scenario pcap");
    Scenario { json, frames }
}

fn config(s: &Scenario, locked: bool) -> Config {
    Config {
        policy: symmetric_policy(s.json["workers"].as_u64().unwrap() as usize),
        states_max: s.json["states_max"].as_u64().unwrap(),
        me: s.json["me"].as_array().unwrap().iter().map(|a| a.as_str().unwrap().parse().unwrap()).collect(),
        locked,
        ..Config::default()
    }
}

fn replay(name: &str, locked: bool) {
    let s = load(name);
    let rules = parse(s.json["rules"].as_str().unwrap()).expect("rules parse");
    let cfg = config(&s, locked);
    let me = cfg.me.clone();
    let mut c = Cluster::new(cfg, rules);
    let want = s.json["packets"].as_array().unwrap();
    assert_eq!(want.len(), s.frames.len(), "{name}: expectations per frame");
    let pc = ParseConfig::default();
    let mut now = 0;
    for (i, ((ts, f), w)) in s.frames.iter().zip(want).enumerate() {
        now = ts / 1_000_000;
        let d = direction(f, &me, &pc);
        let o = c.feed(f, d, now);
        let why = w["why"].as_str().unwrap();
        assert_eq!(
            o.pass,
            w["pass"].as_bool().unwrap(),
            "{name} (locked={locked}) frame {i}: {why}; hops {:?}",
            o.hops
        );
        if let Some(out) = w.get("out") {
            let p = parse_ethernet(&o.frame, &pc).expect("rewritten frame parses");
            let ip = &o.frame[p.outer.offset..];
            assert_eq!(internet_checksum(&ip[..20]), 0, "{name} frame {i}: IPv4 checksum");
            assert!(
                rsskit_dataplane::wire::ipv4_l4_checksum_ok(ip),
                "{name} frame {i}: TCP checksum after rewrite"
            );
            let (sp, dp) = p.l4.ports().expect("not tcp/udp");
            let ip_of = |k: &str| out[k].as_str().unwrap().parse::<IpAddr>().unwrap();
            assert_eq!(
                (p.outer.src, sp),
                (ip_of("src"), out["sport"].as_u64().unwrap() as u16),
                "{name} frame {i}: {why}"
            );
            assert_eq!(
                (p.outer.dst, dp),
                (ip_of("dst"), out["dport"].as_u64().unwrap() as u16),
                "{name} frame {i}: {why}"
            );
        }
    }
    // Counters, summed over workers.
    c.tick(now);
    let snap = c.fw.snapshot();
    let want: BTreeMap<u16, (u64, u64)> = s.json["counters"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.parse().unwrap(), (v[0].as_u64().unwrap(), v[1].as_u64().unwrap())))
        .collect();
    for r in &snap.rules {
        let exp = want.get(&r.number).copied().unwrap_or((0, 0));
        assert_eq!(
            (r.packets, r.bytes),
            exp,
            "{name} (locked={locked}): counters of rule {} '{}'",
            r.number,
            r.text
        );
    }
    // Everything closes or expires: no state, no track left anywhere.
    c.tick(now + 400_000);
    assert_eq!(
        c.states().iter().sum::<usize>(),
        s.json["final_states"].as_u64().unwrap() as usize,
        "{name}: states left {:?}",
        c.states()
    );
    let snap = c.fw.snapshot();
    assert_eq!(snap.states, 0, "{name}: exact global count");
    assert_eq!(snap.tracks, 0, "{name}: shared track counters");
}

#[test]
fn basic_allow_keep_state_tcp_udp_both_directions() {
    replay("basic", false);
    replay("basic", true);
}

#[test]
fn deny_and_default_allow() {
    replay("deny", false);
    replay("deny", true);
}

#[test]
fn limit_src_addr() {
    replay("limit", false);
    replay("limit", true);
}

#[test]
fn redirect_out_and_back() {
    replay("redirect", false);
    replay("redirect", true);
}

#[test]
fn redirect_continues_rules_after_translation() {
    replay("redirect_deny", false);
    replay("redirect_deny", true);
}

fn flood(locked: bool) {
    let s = load("synflood");
    let rules = parse(s.json["rules"].as_str().unwrap()).unwrap();
    let cfg = config(&s, locked);
    let max = cfg.states_max as i64;
    let syns = s.json["syns"].as_u64().unwrap();
    assert_eq!(s.frames.len() as u64, syns);
    let me = cfg.me.clone();
    let fw = Firewall::new(cfg, rules);
    let pc = ParseConfig::default();
    let inputs = s.frames.iter().map(|(ts, f)| Input {
        frame: f.clone(),
        dir: direction(f, &me, &pc),
        ts_ms: ts / 1_000_000,
    });
    let mut passed = 0u64;
    let r = run::run(&fw, inputs, 32, None, run::Order::None, |_, _| passed += 1, None, |_| {});
    let snap = r.snapshot;
    assert_eq!(r.inputs, syns);
    assert!(snap.states <= max + max / 20, "{} states over the {max} limit by more than 5%", snap.states);
    assert!(snap.states >= max - max / 20, "limit refused too early: {} states", snap.states);
    assert_eq!(snap.total.installs as i64, snap.states, "no state removed during the flood");
    assert_eq!(snap.total.limit_hits + snap.total.installs, syns);
    assert_eq!(snap.total.dropped, snap.total.limit_hits);
    assert!(snap.resyncs > 0, "limit hits resync the total");
}

#[test]
fn synflood_global_limit_within_5_percent() {
    flood(false);
    flood(true);
}

#[test]
fn synflood_gc_frees_expired_states() {
    let s = load("synflood");
    let rules = parse(s.json["rules"].as_str().unwrap()).unwrap();
    let cfg = config(&s, false);
    let me = cfg.me.clone();
    let mut c = Cluster::new(cfg, rules);
    let pc = ParseConfig::default();
    let mut last = 0;
    for (ts, f) in &s.frames {
        last = ts / 1_000_000;
        c.feed(f, direction(f, &me, &pc), last);
    }
    let before: usize = c.states().iter().sum();
    assert!((950..=1050).contains(&before), "{before}");
    // Opening TCP states live 20 s: nothing expires before.
    c.tick(last + 19_000);
    assert_eq!(c.states().iter().sum::<usize>(), before);
    // Replay the flood 21 s later: the first SYN at the limit makes its
    // worker collect its own expired states and ask the other to collect.
    for (ts, f) in s.frames.iter().take(1) {
        let o = c.feed(f, direction(f, &me, &pc), ts / 1_000_000 + 21_000 + last);
        assert!(o.pass, "room after collection");
    }
    c.tick(last + 21_000 + last);
    let snap = c.fw.snapshot();
    assert!(snap.total.expired as usize >= before, "expired {} of {before}", snap.total.expired);
    assert_eq!(c.states().iter().sum::<usize>(), 1);
}
