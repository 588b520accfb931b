//! `rsskit bench firewall`: short-lived TCP flows through the firewall,
//! per-worker state tables vs the locked global table, 1..N workers.
//!
//! Each flow is SYN, SYN-ACK, ACK, one request, one response, FIN, FIN,
//! ACK (8 frames), client addresses and ports from splitmix64, server
//! 10.0.0.1:80, rules `check-state` + `allow tcp from any to me 80 setup
//! keep-state` (default deny): DragonFly's section 5.3 setup. Frames are
//! built once, steered to their worker by the symmetric RSS key (what the
//! NIC's queues would hold), and each worker thread replays its own frames
//! from memory ROUNDS times: parse, rule walk, state lookup/install, TCP
//! tracking, expiry (a shared clock advances 1 ms per batch of 32 per
//! worker, so each closed state expires 1 s later, during the same round).
//! Frames should all pass; a run dropping more than 0.1% is an error.
//!
//! Then the cost of an ordered capture replay (`rsskit firewall --order`,
//! `firewall::order`): `--replay-flows` flows replayed in file order
//! through each engine's dispatcher (the own driver: a dispatcher thread
//! and channels; netisr: the capture read by worker 0, software RSS over
//! the rings), with `--order none` and `--order causal`, under two rule
//! sets: the keep-state rules above (no rule creates cross-worker state:
//! causal holds nothing) and the same with `limit src-addr 1000` instead
//! of `keep-state` (every SYN, 1 frame in 8, may touch a shared track:
//! an epoch barrier each).

use crate::cmd::common::{int_in, median, print_json, SplitMix};
use anyhow::{bail, Result};
use rsskit_dataplane::craft;
use rsskit_dataplane::firewall::netisr_handler::FwHandler;
use rsskit_dataplane::firewall::order::{self, Gate, Order, OrderedSource};
use rsskit_dataplane::firewall::run::{self, replay_partitioned, Input};
use rsskit_dataplane::firewall::{parse, symmetric_policy, Config, Dir, Firewall, FlowOwners};
use rsskit_dataplane::io::{Recv, Source};
use rsskit_dataplane::netisr::{Netisr, NetisrConfig};
use rsskit_dataplane::output::{NullSink, Sink};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::Duration;

pub const RULES: &str = "check-state\nallow tcp from any to me 80 setup keep-state\n";
/// The replay comparison's rules whose SYNs need a barrier.
pub const LIMIT_RULES: &str = "check-state\nallow tcp from any to me 80 setup limit src-addr 1000\n";

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Distinct flows (8 frames each) per round (1-2000000).
    #[arg(long, default_value_t = 50_000, value_parser = int_in(1u32, 2_000_000))]
    flows: u32,
    /// Times every worker replays its frames per run (1-1000).
    #[arg(long, default_value_t = 4, value_parser = int_in(1u32, 1000))]
    rounds: u32,
    /// Runs per configuration (1-101); the median is reported.
    #[arg(long, default_value_t = 5, value_parser = int_in(1u32, 101))]
    runs: u32,
    /// Worker counts to measure, comma-separated (each 1-64).
    #[arg(long, value_delimiter = ',', default_value = "1,2", value_parser = int_in(1usize, 64))]
    workers: Vec<usize>,
    /// Frames per batch (1-4096).
    #[arg(long, default_value_t = 32, value_parser = int_in(1usize, 4096))]
    batch: usize,
    /// Seed of the flow generator (0-18446744073709551615).
    #[arg(long, default_value_t = 1, value_parser = int_in(0u64, u64::MAX))]
    seed: u64,
    /// Flows of the ordered vs unordered replay comparison, 0-2000000 (0: skip it).
    #[arg(long, default_value_t = 20_000, value_parser = int_in(0u32, 2_000_000))]
    replay_flows: u32,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Clone, serde::Serialize)]
struct ReplayRow {
    rules: &'static str,
    engine: &'static str,
    workers: usize,
    order: Order,
    /// Median frames per second (wall time of the whole replay).
    mpps: f64,
    runs_mpps: Vec<f64>,
    /// Frames held at a barrier per run.
    barriers: u64,
    /// Median time the dispatcher held a frame, per barrier (µs).
    us_per_barrier: f64,
}

/// Frames with capture timestamps, from memory.
struct Stamped {
    frames: Arc<Vec<Vec<u8>>>,
    pos: usize,
}

impl Source for Stamped {
    fn recv(&mut self) -> Recv<'_> {
        let Some(f) = self.frames.get(self.pos) else { return Recv::Done };
        let ts_ns = stamp_ms(self.pos) * 1_000_000;
        self.pos += 1;
        Recv::Frame { data: f, ts_ns }
    }
}

/// The capture time of frame `i`: 100 frames per ms.
fn stamp_ms(i: usize) -> u64 {
    1_000 + i as u64 / 100
}

/// One replay of `frames`; (elapsed, passed, barriers, held ns).
fn replay_once(
    frames: &Arc<Vec<Vec<u8>>>,
    rules: &str,
    engine: &str,
    workers: usize,
    order: Order,
    batch: usize,
) -> Result<(Duration, u64, u64, u64)> {
    let me = vec![IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1))];
    let cfg = Config { policy: symmetric_policy(workers), me, states_max: 0, ..Config::default() };
    let fw = Firewall::new(cfg, parse(rules)?);
    if engine == "own" {
        let inputs = frames.iter().enumerate().map(|(i, f)| Input {
            frame: f.clone(),
            dir: Dir::In,
            ts_ms: stamp_ms(i),
        });
        let mut passed = 0u64;
        let r = run::run(&fw, inputs, batch, None, order, |_, _| passed += 1, None, |_| {});
        return Ok((r.elapsed, passed, r.order.barriers, r.order.wait_ns));
    }
    let gate = (order == Order::Causal && order::needed(&fw)).then(|| Gate::new(workers));
    let ncfg = NetisrConfig {
        policy: fw.config.policy.clone(),
        batch: batch.min(256),
        decap: false,
        backpressure: true,
        ..Default::default()
    };
    let handlers = (0..workers)
        .map(|i| {
            let h = FwHandler::new(&fw, i);
            match &gate {
                Some(g) => h.ordered(g.clone()),
                None => h,
            }
        })
        .collect();
    let sinks = (0..workers).map(|_| Box::new(NullSink::default()) as Box<dyn Sink>).collect();
    let src: Box<dyn Source> = Box::new(Stamped { frames: frames.clone(), pos: 0 });
    let src = match &gate {
        Some(g) => Box::new(OrderedSource::new(src, &fw, g.clone(), ncfg.parse)),
        None => src,
    };
    let report = Netisr::start(ncfg, vec![(0, src)], sinks, handlers)?.join()?;
    for h in &report.handlers {
        h.worker().publish();
    }
    let st = gate.map(|g| g.stats()).unwrap_or_default();
    Ok((report.elapsed, fw.snapshot().total.passed, st.barriers, st.wait_ns))
}

/// Ordered vs unordered replay, every rule set, engine, worker count.
fn replay_rows(a: &Args) -> Result<Vec<ReplayRow>> {
    let frames = Arc::new(flows(a.replay_flows, a.seed));
    let mut rows = Vec::new();
    for (rules_name, rules) in [("keep-state", RULES), ("limit", LIMIT_RULES)] {
        for engine in ["own", "netisr"] {
            for &n in &a.workers {
                for order in [Order::None, Order::Causal] {
                    let mut mpps = Vec::new();
                    let mut per_barrier = Vec::new();
                    let mut barriers = 0;
                    for _ in 0..a.runs {
                        let (elapsed, passed, b, held_ns) =
                            replay_once(&frames, rules, engine, n, order, a.batch)?;
                        if passed != frames.len() as u64 {
                            bail!(
                                "replay {rules_name} {engine} x{n} {order:?}: {passed} of {} frames passed",
                                frames.len()
                            );
                        }
                        barriers = b;
                        mpps.push(frames.len() as f64 / elapsed.as_secs_f64() / 1e6);
                        per_barrier.push(if b > 0 { held_ns as f64 / b as f64 / 1e3 } else { 0.0 });
                    }
                    rows.push(ReplayRow {
                        rules: rules_name,
                        engine,
                        workers: n,
                        order,
                        mpps: median(mpps.clone()),
                        runs_mpps: mpps,
                        barriers,
                        us_per_barrier: median(per_barrier),
                    });
                }
            }
        }
    }
    Ok(rows)
}

fn tcp(src: Ipv4Addr, sp: u16, dst: Ipv4Addr, dp: u16, flags: u8, payload: usize) -> Vec<u8> {
    let mut t = craft::tcp(sp, dp, &vec![b'x'; payload]);
    t[13] = flags;
    craft::eth(0x0800, &[], &craft::ipv4(&craft::V4::new(src, dst, 6), &t))
}

/// The frames of `flows` short TCP flows, flow after flow.
pub fn flows(flows: u32, seed: u64) -> Vec<Vec<u8>> {
    let server = Ipv4Addr::new(10, 0, 0, 1);
    let mut rng = SplitMix(seed);
    let mut out = Vec::with_capacity(flows as usize * 8);
    for _ in 0..flows {
        let r = rng.next_u64();
        let c = Ipv4Addr::from(0xac10_0000 | (r as u32 & 0x000f_ffff));
        let p = 1024 + ((r >> 32) as u16 % 64000);
        out.push(tcp(c, p, server, 80, 0x02, 0));
        out.push(tcp(server, 80, c, p, 0x12, 0));
        out.push(tcp(c, p, server, 80, 0x10, 0));
        out.push(tcp(c, p, server, 80, 0x18, 64));
        out.push(tcp(server, 80, c, p, 0x18, 256));
        out.push(tcp(c, p, server, 80, 0x11, 0));
        out.push(tcp(server, 80, c, p, 0x11, 0));
        out.push(tcp(c, p, server, 80, 0x10, 0));
    }
    out
}

#[derive(Debug, Clone, serde::Serialize)]
struct Row {
    table: &'static str,
    workers: usize,
    /// Median frames per second over the runs.
    mpps: f64,
    /// Median flows (8 frames) per second.
    kflows_per_s: f64,
    runs_mpps: Vec<f64>,
    /// Median CPU nanoseconds per frame (summed worker CPU time / frames):
    /// the cost independent of how much CPU the machine gave us.
    cpu_ns_per_frame: f64,
    /// Most states seen alive at the end of a run.
    states_end: i64,
    /// Frames dropped over all runs (a late packet of a flow whose state
    /// was expired: the shared clock moved on while its worker was
    /// descheduled); must stay below 0.1%.
    drops: u64,
}

pub fn run(a: Args) -> Result<()> {
    if a.workers.is_empty() || a.workers.iter().any(|&w| w == 0 || w > 64) {
        bail!("--workers needs counts from 1 to 64");
    }
    if a.batch == 0 || a.batch > 4096 {
        bail!("--batch must be 1..=4096");
    }
    let frames = flows(a.flows, a.seed);
    let me = vec![IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1))];
    let mut rows = Vec::new();
    for &n in &a.workers {
        let policy = symmetric_policy(n);
        let steer = FlowOwners::new(&policy);
        let pc = Config::default().parse;
        let mut owned: Vec<Vec<usize>> = vec![Vec::new(); n];
        for (i, f) in frames.iter().enumerate() {
            owned[steer.worker_of_frame(f, &pc)].push(i);
        }
        // Each worker's frames are copied worker by worker, so they lie in
        // one run of memory as a NIC queue's buffers would. Copied in frame
        // order they would interleave: every cache line and page a worker
        // read would be half the other worker's frames.
        let per: Vec<Vec<Vec<u8>>> =
            owned.iter().map(|ix| ix.iter().map(|&i| frames[i].clone()).collect()).collect();
        for (table, locked) in [("per-worker", false), ("locked", true)] {
            let mut results = Vec::new();
            let mut cpu_ns = Vec::new();
            let mut states_end = 0;
            let mut drops = 0;
            // Interleave nothing else: one configuration's runs back to back.
            for _ in 0..a.runs {
                let cfg = Config {
                    policy: policy.clone(),
                    locked,
                    me: me.clone(),
                    states_max: 0,
                    ..Config::default()
                };
                let fw = Firewall::new(cfg, parse(RULES)?);
                let r = replay_partitioned(&fw, &per, a.rounds as usize, a.batch, 1);
                let (elapsed, processed) = (r.elapsed, r.frames);
                cpu_ns
                    .push(r.cpu.iter().map(|c| c.as_secs_f64()).sum::<f64>() * 1e9 / processed.max(1) as f64);
                let s = fw.snapshot();
                if s.total.passed + s.total.dropped != processed || s.total.dropped * 1000 > processed {
                    bail!(
                        "{table} x{n}: {} of {processed} frames dropped: benchmark flows must pass",
                        s.total.dropped
                    );
                }
                drops += s.total.dropped;
                states_end = states_end.max(s.states);
                results.push(processed as f64 / elapsed.as_secs_f64() / 1e6);
            }
            let mpps = median(results.clone());
            let cpu_ns_per_frame = median(cpu_ns);
            rows.push(Row {
                table,
                workers: n,
                mpps,
                kflows_per_s: mpps * 1e3 / 8.0,
                runs_mpps: results,
                cpu_ns_per_frame,
                states_end,
                drops,
            });
        }
    }
    let find = |t: &str, w: usize| rows.iter().find(|r| r.table == t && r.workers == w).map(|r| r.mpps);
    let max_w = *a.workers.iter().max().unwrap_or(&1);
    let min_w = *a.workers.iter().min().unwrap_or(&1);
    let ratio_tables = find("per-worker", max_w).zip(find("locked", max_w)).map(|(p, l)| p / l);
    let ratio_scaling = find("per-worker", max_w).zip(find("per-worker", min_w)).map(|(x, y)| x / y);
    let ratio_scaling_locked = find("locked", max_w).zip(find("locked", min_w)).map(|(x, y)| x / y);
    let replay = if a.replay_flows > 0 { replay_rows(&a)? } else { Vec::new() };
    let causal_vs_none = |r: &ReplayRow| {
        replay
            .iter()
            .find(|x| {
                x.rules == r.rules && x.engine == r.engine && x.workers == r.workers && x.order == Order::None
            })
            .map(|x| r.mpps / x.mpps)
    };
    if a.json {
        print_json(&serde_json::json!({
            "flows": a.flows, "rounds": a.rounds, "runs": a.runs, "batch": a.batch,
            "rules": RULES, "cpus": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
            "results": rows,
            "per_worker_vs_locked_at_max_workers": ratio_tables,
            "per_worker_scaling": ratio_scaling,
            "locked_scaling": ratio_scaling_locked,
            "replay_flows": a.replay_flows,
            "replay_limit_rules": LIMIT_RULES,
            "replay": replay.iter().map(|r| {
                let mut v = serde_json::to_value(r).unwrap_or_default();
                v["causal_vs_none"] = serde_json::json!(causal_vs_none(r));
                v
            }).collect::<Vec<_>>(),
        }))?;
    } else {
        println!(
            "{:>10} {:>7} {:>8} {:>10} {:>12} {:>8} {:>6}",
            "table", "workers", "Mpps", "kflows/s", "cpu ns/frame", "states", "drops"
        );
        for r in &rows {
            println!(
                "{:>10} {:>7} {:>8.3} {:>10.1} {:>12.1} {:>8} {:>6}",
                r.table, r.workers, r.mpps, r.kflows_per_s, r.cpu_ns_per_frame, r.states_end, r.drops
            );
        }
        if let Some(x) = ratio_tables {
            println!("per-worker / locked at {max_w} workers: {x:.2}x");
        }
        if let Some(x) = ratio_scaling {
            println!("per-worker {max_w} / {min_w} workers: {x:.2}x");
        }
        if let Some(x) = ratio_scaling_locked {
            println!("locked {max_w} / {min_w} workers: {x:.2}x");
        }
        if !replay.is_empty() {
            println!(
                "\nreplay of {} flows ({} frames) in file order, median of {} runs:",
                a.replay_flows,
                a.replay_flows as u64 * 8,
                a.runs
            );
            println!(
                "{:>10} {:>7} {:>7} {:>7} {:>8} {:>9} {:>10} {:>9}",
                "rules", "engine", "workers", "order", "Mpps", "barriers", "us/barrier", "vs none"
            );
            for r in &replay {
                let order = if r.order == Order::Causal { "causal" } else { "none" };
                let vs = causal_vs_none(r).map_or(String::new(), |x| format!("{x:.2}x"));
                println!(
                    "{:>10} {:>7} {:>7} {:>7} {:>8.3} {:>9} {:>10.1} {:>9}",
                    r.rules, r.engine, r.workers, order, r.mpps, r.barriers, r.us_per_barrier, vs
                );
            }
        }
    }
    Ok(())
}
