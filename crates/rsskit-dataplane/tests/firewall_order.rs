//! Ordered (causal) replays of the crafted captures on both threaded
//! engines: the own driver (`run::run`) and netisr with an
//! `order::OrderedSource` input; free-running (no lock-step), 1 to 4
//! workers, several runs, exact per-rule counters and pass counts of the
//! fixture. Also: `limit` admits exactly N states however unordered
//! workers interleave, and the own driver judges each frame at its own
//! timestamp whatever the batch. And beyond the fixtures: random captures
//! mixing redirected, `limit`ed and UDP flows with expiry gaps replay to
//! the single-threaded simulation's counters on 2-4 workers (unordered,
//! they do not).

use rsskit_core::rng::SplitMix64 as Rng;
use rsskit_dataplane::craft;
use rsskit_dataplane::firewall::netisr_handler::FwHandler;
use rsskit_dataplane::firewall::order::{Classifier, Gate, OrderStats, OrderedSource};
use rsskit_dataplane::firewall::run::{self, direction, Input, Order};
use rsskit_dataplane::firewall::{parse, symmetric_policy, Config, Dir, Firewall};
use rsskit_dataplane::io::pcap::read_all;
use rsskit_dataplane::io::{Recv, Source};
use rsskit_dataplane::netisr::{Mbuf, Netisr, NetisrConfig};
use rsskit_dataplane::output::Sink;
use rsskit_dataplane::wire::ParseConfig;
use serde_json::Value;
use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

const SCENARIOS: [&str; 5] = ["basic", "deny", "limit", "redirect", "redirect_deny"];

struct Fixture {
    json: Value,
    frames: Vec<(u64, Vec<u8>)>,
}

fn load(name: &str) -> Fixture {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("testdata/firewall");
    let json =
        serde_json::from_str(&std::fs::read_to_string(dir.join(format!("{name}.json"))).unwrap()).unwrap();
    let frames = read_all(&dir.join(format!("{name}.pcap"))).unwrap();
    Fixture { json, frames }
}

fn firewall(f: &Fixture, workers: usize) -> Arc<Firewall> {
    let cfg = Config {
        policy: symmetric_policy(workers),
        states_max: f.json["states_max"].as_u64().unwrap(),
        me: f.json["me"].as_array().unwrap().iter().map(|a| a.as_str().unwrap().parse().unwrap()).collect(),
        ..Config::default()
    };
    Firewall::new(cfg, parse(f.json["rules"].as_str().unwrap()).unwrap())
}

fn want(f: &Fixture) -> (BTreeMap<u16, (u64, u64)>, u64) {
    let c = f.json["counters"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.parse().unwrap(), (v[0].as_u64().unwrap(), v[1].as_u64().unwrap())))
        .collect();
    let passes = f.json["packets"].as_array().unwrap().iter().filter(|p| p["pass"] == true).count() as u64;
    (c, passes)
}

fn got(fw: &Firewall) -> BTreeMap<u16, (u64, u64)> {
    fw.snapshot().rules.iter().filter(|r| r.packets > 0).map(|r| (r.number, (r.packets, r.bytes))).collect()
}

fn own(f: &Fixture, workers: usize, batch: usize, order: Order) -> (Arc<Firewall>, u64, run::RunTotals) {
    let fw = firewall(f, workers);
    let me = fw.config.me.clone();
    let pc = ParseConfig::default();
    let inputs: Vec<Input> = f
        .frames
        .iter()
        .map(|(ts, fr)| Input { frame: fr.clone(), dir: direction(fr, &me, &pc), ts_ms: ts / 1_000_000 })
        .collect();
    let mut passed = 0u64;
    let r = run::run(&fw, inputs.into_iter(), batch, None, order, |_, _| passed += 1, None, |_| {});
    (fw, passed, r)
}

#[test]
fn own_engine_causal_replay_is_exact_for_any_worker_count_and_batch() {
    for name in SCENARIOS {
        let f = load(name);
        let (counters, passes) = want(&f);
        for workers in 1..=4 {
            for batch in [1, 32] {
                for run in 0..3 {
                    let (fw, passed, r) = own(&f, workers, batch, Order::Causal);
                    let at = format!("{name}: {workers} workers, batch {batch}, run {run}");
                    assert_eq!(got(&fw), counters, "{at}");
                    assert_eq!(passed, passes, "{at}: passed frames");
                    assert_eq!(r.order.timeouts, 0, "{at}");
                }
            }
        }
    }
}

#[test]
fn own_engine_judges_each_frame_at_its_own_time() {
    // One worker, no cross-worker order involved: limit.pcap's "room again"
    // SYN comes 1.5 s after the RST, in the same batch of 32 as the frames
    // before it. Stamped with the batch's latest time, the state refused at
    // the limit would be judged after the RST's state expired.
    let f = load("limit");
    let (counters, passes) = want(&f);
    for batch in [1, 4, 32, 256] {
        let (fw, passed, _) = own(&f, 1, batch, Order::None);
        assert_eq!(got(&fw), counters, "batch {batch}");
        assert_eq!(passed, passes, "batch {batch}");
    }
}

/// Frames from memory, as fast as the netisr worker takes them.
struct Frames {
    frames: Vec<(u64, Vec<u8>)>,
    pos: usize,
}

impl Source for Frames {
    fn recv(&mut self) -> Recv<'_> {
        let Some((ts, f)) = self.frames.get(self.pos) else { return Recv::Done };
        self.pos += 1;
        Recv::Frame { data: f, ts_ns: *ts }
    }
}

#[derive(Clone)]
struct Count(Arc<AtomicU64>);
impl Sink for Count {
    fn send(&mut self, frames: &[Mbuf]) -> std::io::Result<usize> {
        self.0.fetch_add(frames.len() as u64, Ordering::Relaxed);
        Ok(frames.len())
    }
}

/// One causal netisr replay of `frames` through `fw` on `workers` workers
/// (the handlers behind one gate, every pass counted by the sinks): the
/// gate's statistics and the frames sent.
fn netisr_replay(fw: &Arc<Firewall>, frames: &[(u64, Vec<u8>)], workers: usize) -> (OrderStats, u64) {
    let gate = Gate::new(workers);
    let ncfg = NetisrConfig {
        policy: fw.config.policy.clone(),
        decap: false,
        backpressure: true,
        ..Default::default()
    };
    let handlers = (0..workers).map(|i| FwHandler::new(fw, i).ordered(gate.clone())).collect();
    let sent = Arc::new(AtomicU64::new(0));
    let sinks = (0..workers).map(|_| Box::new(Count(sent.clone())) as Box<dyn Sink>).collect();
    let src = Frames { frames: frames.to_vec(), pos: 0 };
    let src = OrderedSource::new(Box::new(src), fw, gate.clone(), ncfg.parse);
    let report = Netisr::start(ncfg, vec![(0, Box::new(src) as Box<dyn Source>)], sinks, handlers)
        .unwrap()
        .join()
        .unwrap();
    for h in &report.handlers {
        h.worker().publish();
    }
    (gate.stats(), sent.load(Ordering::Relaxed))
}

#[test]
fn netisr_causal_replay_is_exact_for_any_worker_count() {
    for name in SCENARIOS {
        let f = load(name);
        let (counters, passes) = want(&f);
        for workers in 1..=4 {
            for run in 0..3 {
                let fw = firewall(&f, workers);
                let (st, sent) = netisr_replay(&fw, &f.frames, workers);
                let at = format!("{name}: {workers} workers, run {run}");
                assert_eq!(got(&fw), counters, "{at}");
                assert_eq!(fw.snapshot().total.passed, passes, "{at}: passed");
                assert_eq!(sent, passes, "{at}: sent");
                assert_eq!(st.timeouts, 0, "{at}");
                let cls = Classifier::new(&fw);
                let shared = f.frames.iter().filter(|(_, fr)| cls.needs_barrier(fr)).count() as u64;
                assert_eq!(st.barriers, shared, "{at}: one barrier per shared frame");
            }
        }
    }
}

#[test]
fn classifier_holds_only_frames_touching_cross_worker_state() {
    let f = load("redirect");
    let fw = firewall(&f, 2);
    let cls = Classifier::new(&fw);
    // Every frame of the redirected flow, both directions, and the stray
    // server packet (it may meet a slave).
    assert!(f.frames.iter().all(|(_, fr)| cls.needs_barrier(fr)));
    let f = load("limit");
    let fw = firewall(&f, 2);
    let cls = Classifier::new(&fw);
    let held: Vec<bool> = f.frames.iter().map(|(_, fr)| cls.needs_barrier(fr)).collect();
    // The SYNs (they match the limit rule); not the reply, not the RST.
    assert_eq!(held, [true, true, true, true, true, true, false, false, true, true]);
    let f = load("basic");
    assert!(Classifier::new(&firewall(&f, 2)).trivial());
}

#[test]
fn unordered_limit_admits_exactly_n_whatever_the_interleaving() {
    // 400 SYNs from one source on distinct ports spread over 4 workers,
    // dispatched without order: the track admits exactly 10 every run.
    let me = Ipv4Addr::new(10, 0, 0, 1);
    let client = Ipv4Addr::new(192, 168, 7, 7);
    let frames: Vec<Vec<u8>> = (0..400u16)
        .map(|i| {
            let mut t = craft::tcp(20000 + i, 80, b"");
            t[13] = 0x02;
            craft::eth(0x0800, &[], &craft::ipv4(&craft::V4::new(client, me, 6), &t))
        })
        .collect();
    for run in 0..20 {
        let cfg = Config { policy: symmetric_policy(4), me: vec![me.into()], ..Config::default() };
        let fw = Firewall::new(
            cfg,
            parse("check-state\nallow tcp from any to me 80 setup limit src-addr 10\n").unwrap(),
        );
        let inputs = frames.iter().map(|f| Input { frame: f.clone(), dir: Dir::In, ts_ms: 1 });
        let mut passed = 0u64;
        let r = run::run(&fw, inputs, 8, None, Order::None, |_, _| passed += 1, None, |_| {});
        let t = r.snapshot.total;
        let busy = r.snapshot.workers.iter().filter(|w| w.packets > 0).count();
        assert!(busy >= 2, "run {run}: the SYNs spread over workers");
        assert_eq!((t.installs, t.track_hits, passed), (10, 390, 10), "run {run}: {t:?}");
    }
}

fn tcp4(src: Ipv4Addr, sp: u16, dst: Ipv4Addr, dp: u16, flags: u8, payload: usize) -> Vec<u8> {
    let mut t = craft::tcp(sp, dp, &vec![b'x'; payload]);
    t[13] = flags;
    craft::eth(0x0800, &[], &craft::ipv4(&craft::V4::new(src, dst, 6), &t))
}

fn udp4(src: Ipv4Addr, sp: u16, dst: Ipv4Addr, dp: u16) -> Vec<u8> {
    craft::eth(0x0800, &[], &craft::ipv4(&craft::V4::new(src, dst, 17), &craft::udp(sp, dp, b"q")))
}

const MIXED_RULES: &str = "check-state\n\
    redirect tcp 10.0.0.1:8080 -> 10.0.0.2:80\n\
    allow tcp from any to 10.0.0.2 80\n\
    allow tcp from any to me 80 setup limit src-addr 2\n\
    allow udp from any to me 53 keep-state\n";

/// A random capture interleaving redirected flows, `limit`ed flows from a
/// few sources (some reset), UDP queries and stray server packets, with
/// time gaps that let reset, opening and UDP states expire mid-capture.
fn mixed_capture(seed: u64, steps: usize) -> Vec<(u64, Vec<u8>)> {
    let me = Ipv4Addr::new(10, 0, 0, 1);
    let new = Ipv4Addr::new(10, 0, 0, 2);
    let mut rng = Rng(seed);
    let mut active: Vec<std::collections::VecDeque<Vec<u8>>> = Vec::new();
    let mut out = Vec::new();
    let mut ts_ms = 1_000u64;
    let mut port = 30_000u16;
    for _ in 0..steps {
        ts_ms += rng.below(5);
        match rng.below(100) {
            0..=1 => ts_ms += 1_500,
            2 => ts_ms += 25_000,
            _ => {}
        }
        if active.is_empty() || rng.below(4) == 0 {
            port += 1;
            let c = Ipv4Addr::new(192, 168, 1, 1 + rng.below(3) as u8);
            let script: Vec<Vec<u8>> = match rng.below(4) {
                0 => vec![
                    tcp4(c, port, me, 8080, 0x02, 0),
                    tcp4(new, 80, c, port, 0x12, 0),
                    tcp4(c, port, me, 8080, 0x10, 0),
                    tcp4(c, port, me, 8080, 0x18, 32),
                    tcp4(new, 80, c, port, 0x18, 100),
                    tcp4(c, port, me, 8080, 0x11, 0),
                    tcp4(new, 80, c, port, 0x11, 0),
                    tcp4(c, port, me, 8080, 0x10, 0),
                ],
                1 => {
                    let mut v = vec![tcp4(c, port, me, 80, 0x02, 0), tcp4(me, 80, c, port, 0x12, 0)];
                    if rng.below(2) == 0 {
                        v.push(tcp4(c, port, me, 80, 0x04, 0));
                    } else {
                        v.push(tcp4(c, port, me, 80, 0x10, 0));
                    }
                    v
                }
                2 => vec![udp4(c, port, me, 53), udp4(me, 53, c, port)],
                _ => vec![tcp4(new, 80, c, port, 0x12, 0)],
            };
            active.push(script.into());
        }
        let k = rng.below(active.len() as u64) as usize;
        if let Some(f) = active[k].pop_front() {
            out.push((ts_ms * 1_000_000, f));
        }
        if active[k].is_empty() {
            active.swap_remove(k);
        }
    }
    out
}

#[test]
fn causal_replays_of_random_mixed_captures_equal_the_simulation() {
    use rsskit_dataplane::firewall::sim::Cluster;
    let me: Vec<std::net::IpAddr> = vec![Ipv4Addr::new(10, 0, 0, 1).into()];
    let pc = ParseConfig::default();
    for seed in 1..=4u64 {
        let frames = mixed_capture(seed, 400);
        for workers in [2, 3, 4] {
            let cfg = Config {
                policy: symmetric_policy(workers),
                me: me.clone(),
                states_max: 0,
                ..Config::default()
            };
            // The reference: one thread, each frame to completion, every
            // worker's clock at the frame's time.
            let mut sim = Cluster::new(cfg.clone(), parse(MIXED_RULES).unwrap());
            let mut passes = 0u64;
            for (ts, f) in &frames {
                passes += u64::from(sim.feed(f, direction(f, &me, &pc), ts / 1_000_000).pass);
            }
            let want = got(&sim.fw);
            let busy = sim.workers.iter().filter(|w| w.counters().packets > 0).count();
            assert!(busy >= 2, "seed {seed}: frames on several workers");
            assert!(
                sim.fw.snapshot().total.track_hits > 0 && sim.fw.snapshot().total.resumed > 0,
                "seed {seed}: the capture exercises limit refusals and redirect hops"
            );
            let f = Fixture { json: Value::Null, frames: frames.clone() };
            for run in 0..2 {
                let at = format!("seed {seed}, {workers} workers, run {run}");
                // Own driver.
                let fw = Firewall::new(cfg.clone(), parse(MIXED_RULES).unwrap());
                let inputs = f.frames.iter().map(|(ts, fr)| Input {
                    frame: fr.clone(),
                    dir: direction(fr, &me, &pc),
                    ts_ms: ts / 1_000_000,
                });
                let mut passed = 0u64;
                let r = run::run(&fw, inputs, 32, None, Order::Causal, |_, _| passed += 1, None, |_| {});
                assert_eq!(r.order.timeouts, 0, "{at}");
                assert_eq!(got(&fw), want, "{at}: own driver");
                assert_eq!(passed, passes, "{at}: own driver passes");
                // netisr.
                let fw = Firewall::new(cfg.clone(), parse(MIXED_RULES).unwrap());
                let (st, sent) = netisr_replay(&fw, &f.frames, workers);
                assert_eq!(st.timeouts, 0, "{at}");
                assert_eq!(got(&fw), want, "{at}: netisr");
                assert_eq!(sent, passes, "{at}: netisr passes");
            }
        }
    }
}
