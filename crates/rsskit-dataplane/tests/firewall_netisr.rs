//! The firewall as a netisr handler (`rsskit firewall --engine netisr`) on
//! the crafted captures of scripts/gen-firewall-pcaps.py: the same
//! verdicts, rewritten addresses and exact per-rule counters as the
//! firewall's own driver (tests/firewall_pcap.rs), redirect included (the
//! hand-over to the worker of the translated flow and the slave deletion
//! travel as netisr messages), with 1 and 2 workers; non-IP frames (ARP)
//! pass; once every worker's clock moves past the timeouts, no state or
//! track is left (slave deletions delivered over the message rings).

use rsskit_dataplane::craft::udp4_frame;
use rsskit_dataplane::firewall::netisr_handler::FwHandler;
use rsskit_dataplane::firewall::{parse, symmetric_policy, Config, Firewall, FlowOwners};
use rsskit_dataplane::io::pcap::read_all;
use rsskit_dataplane::io::{Recv, Source};
use rsskit_dataplane::netisr::{Mbuf, Netisr, NetisrConfig};
use rsskit_dataplane::output::Sink;
use rsskit_dataplane::wire::{parse_ethernet, DropReason, ParseConfig};
use serde_json::Value;
use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Frames released one at a time by the test (a client that waits for the
/// answer before sending on).
struct Gated {
    frames: Vec<(u64, Vec<u8>)>,
    pos: usize,
    released: Arc<AtomicUsize>,
}

impl Source for Gated {
    fn recv(&mut self) -> Recv<'_> {
        if self.pos == self.frames.len() {
            return Recv::Done;
        }
        if self.pos >= self.released.load(Ordering::Acquire) {
            return Recv::Idle;
        }
        let (ts, f) = &self.frames[self.pos];
        self.pos += 1;
        Recv::Frame { data: f, ts_ns: *ts }
    }
}

/// Keeps every frame sent.
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<Vec<u8>>>>);
impl Sink for Capture {
    fn send(&mut self, frames: &[Mbuf]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend(frames.iter().map(|m| m.data().to_vec()));
        Ok(frames.len())
    }
}

fn replay(name: &str, workers: usize) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("testdata/firewall");
    let json: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join(format!("{name}.json"))).unwrap()).unwrap();
    let mut frames = read_all(&dir.join(format!("{name}.pcap"))).expect("scenario pcap");
    // An ARP request first: a bridge passes it.
    let mut arp = vec![0xff; 6];
    arp.extend_from_slice(&[2, 0, 0, 0, 0, 1, 0x08, 0x06]);
    arp.extend_from_slice(&[0, 1, 8, 0, 6, 4, 0, 1]);
    arp.resize(60, 0);
    let t0 = frames.first().map(|f| f.0).unwrap_or(0);
    frames.insert(0, (t0, arp.clone()));
    let cfg = Config {
        policy: symmetric_policy(workers),
        states_max: json["states_max"].as_u64().unwrap(),
        me: json["me"].as_array().unwrap().iter().map(|a| a.as_str().unwrap().parse().unwrap()).collect(),
        ..Config::default()
    };
    let fw = Firewall::new(cfg, parse(json["rules"].as_str().unwrap()).expect("rules parse"));
    // After the capture, 400 s later, one frame to each worker (denied by
    // every scenario's rules): each worker's clock advances, every state
    // expires, the masters' slave deletions travel over the message rings.
    let last = frames.last().map(|f| f.0).unwrap_or(0) + 400_000_000_000;
    let steer = FlowOwners::new(&fw.config.policy);
    let pcap_frames = frames.len();
    for w in 0..workers {
        // (UDP may hash on addresses only: vary the source address.)
        let dst = Ipv4Addr::new(192, 0, 2, 200);
        let src = (1..=254u8)
            .map(|k| Ipv4Addr::new(192, 0, 2, k))
            .find(|&a| steer.worker_of(a.into(), 1000, dst.into(), 9, 17) == w)
            .expect("an address for every worker");
        frames.push((last, udp4_frame(src, 1000, dst, 9, 64)));
    }
    let released = Arc::new(AtomicUsize::new(0));
    let cap = Capture::default();
    let ncfg = NetisrConfig { policy: fw.config.policy.clone(), ..Default::default() };
    let handlers = (0..workers).map(|i| FwHandler::new(&fw, i)).collect();
    let sinks = (0..workers).map(|_| Box::new(cap.clone()) as Box<dyn Sink>).collect();
    let src = Gated { frames: frames.clone(), pos: 0, released: released.clone() };
    let netisr = Netisr::start(ncfg, vec![(0, Box::new(src) as Box<dyn Source>)], sinks, handlers).unwrap();
    let want = json["packets"].as_array().unwrap();
    assert_eq!(want.len() + 1, pcap_frames, "{name}: expectations per frame");
    let pc = ParseConfig::default();
    let mut passed = 0;
    let mut rules_snap = None;
    for i in 0..frames.len() {
        if i == pcap_frames {
            rules_snap = Some(fw.snapshot().rules);
        }
        released.store(i + 1, Ordering::Release);
        // Wait for the frame's fate: passed or dropped, and a passed frame sent.
        let deadline = Instant::now() + Duration::from_secs(10);
        let pass = loop {
            let t = fw.snapshot().total;
            let sent = cap.0.lock().unwrap().len();
            if t.passed + t.dropped == i as u64 + 1 && sent as u64 == t.passed {
                break t.passed > passed;
            }
            assert!(Instant::now() < deadline, "{name} ({workers} workers) frame {i}: no verdict");
            std::thread::sleep(Duration::from_micros(200));
        };
        passed += u64::from(pass);
        if i >= pcap_frames {
            assert!(!pass, "{name}: late frame {i} denied");
            continue;
        }
        if i == 0 {
            assert!(pass, "ARP passes");
            assert_eq!(cap.0.lock().unwrap()[0], arp);
            continue;
        }
        let w = &want[i - 1];
        let why = w["why"].as_str().unwrap();
        assert_eq!(pass, w["pass"].as_bool().unwrap(), "{name} ({workers} workers) frame {i}: {why}");
        if let (Some(out), true) = (w.get("out"), pass) {
            let f = cap.0.lock().unwrap().last().unwrap().clone();
            let p = parse_ethernet(&f, &pc).expect("sent frame parses");
            let (sp, dp) = p.l4.ports().expect("not tcp/udp");
            let ip_of = |k: &str| out[k].as_str().unwrap().parse::<IpAddr>().unwrap();
            assert_eq!(
                (p.outer.src, sp, p.outer.dst, dp),
                (
                    ip_of("src"),
                    out["sport"].as_u64().unwrap() as u16,
                    ip_of("dst"),
                    out["dport"].as_u64().unwrap() as u16
                ),
                "{name} ({workers} workers) frame {i}: {why}"
            );
        }
    }
    // No state leaks: everything expired and deleted, on every worker.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let snap = fw.snapshot();
        if snap.states == 0 && snap.tracks == 0 && snap.total.states == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "{name} ({workers} workers): states left: {snap:?}");
        std::thread::sleep(Duration::from_millis(1));
    }
    let report = netisr.join().unwrap();
    for h in &report.handlers {
        h.worker().publish();
    }
    let snap = fw.snapshot();
    let want: BTreeMap<u16, (u64, u64)> = json["counters"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.parse().unwrap(), (v[0].as_u64().unwrap(), v[1].as_u64().unwrap())))
        .collect();
    for r in rules_snap.as_ref().unwrap() {
        let exp = want.get(&r.number).copied().unwrap_or((0, 0));
        assert_eq!((r.packets, r.bytes), exp, "{name} ({workers} workers): counters of rule {}", r.number);
    }
    let non_ip =
        frames.iter().filter(|(_, f)| matches!(parse_ethernet(f, &pc), Err(DropReason::NotIp))).count()
            as u64;
    assert!(non_ip >= 1);
    assert_eq!(snap.total.non_ip, non_ip, "{name}: the ARP frames");
    assert!(
        snap.total.installs > 0 && snap.total.expired > 0,
        "{name}: states came and went: {:?}",
        snap.total
    );
    if name.starts_with("redirect") && workers == 2 {
        // The scenario puts the translated flow on the other worker: the
        // frames went through the hand-over (message) path.
        assert!(
            snap.total.resumed > 0 && snap.total.controls > 0,
            "{name} ({workers} workers): {:?}",
            snap.total
        );
    }
    let t = report.total();
    assert_eq!(t.counters.output.packets, snap.total.passed, "{name}: every passed frame sent");
    // Per frame: each input frame sent or denied (a redirected one handed
    // over between workers and accounted for where it ended), none left.
    let a = report.accounting();
    assert!(a.balanced(), "{name} ({workers} workers): {}", a.line());
    assert_eq!(a.input, t.counters.input, "{name}: {}", a.line());
    assert_eq!(a.out, snap.total.passed, "{name}: {}", a.line());
    assert_eq!(
        a.dropped.get("firewall_deny").copied().unwrap_or(0),
        snap.total.dropped,
        "{name}: {}",
        a.line()
    );
    assert_eq!(a.held, 0, "{name}: {}", a.line());
}

#[test]
fn redirect_out_and_back_on_netisr() {
    for w in [1, 2] {
        replay("redirect", w);
    }
}

#[test]
fn redirect_continues_rules_after_translation_on_netisr() {
    for w in [1, 2] {
        replay("redirect_deny", w);
    }
}

#[test]
fn basic_deny_limit_on_netisr() {
    for name in ["basic", "deny", "limit"] {
        for w in [1, 2] {
            replay(name, w);
        }
    }
}
