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

use super::common::{int_in, median, print_json, SplitMix};
use anyhow::{bail, Result};
use rsskit_core::RssKey;
use rsskit_dataplane::build;
use rsskit_dataplane::firewall::run::replay_partitioned;
use rsskit_dataplane::firewall::{parse, Config, Firewall, Steering};
use std::net::{IpAddr, Ipv4Addr};

pub const RULES: &str = "check-state\nallow tcp from any to me 80 setup keep-state\n";

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
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
}

fn tcp(src: Ipv4Addr, sp: u16, dst: Ipv4Addr, dp: u16, flags: u8, payload: usize) -> Vec<u8> {
    let mut t = build::tcp(sp, dp, &vec![b'x'; payload]);
    t[13] = flags;
    build::eth(0x0800, &[], &build::ipv4(&build::V4::new(src, dst, 6), &t))
}

/// The frames of `flows` short TCP flows, flow after flow.
pub fn flows(flows: u32, seed: u64) -> Vec<Vec<u8>> {
    let server = Ipv4Addr::new(10, 0, 0, 1);
    let mut rng = SplitMix(seed);
    let mut out = Vec::with_capacity(flows as usize * 8);
    for _ in 0..flows {
        let r = rng.next();
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
        let steer = Steering::new(&RssKey::symmetric(), Default::default(), n);
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
                let cfg = Config { workers: n, locked, me: me.clone(), states_max: 0, ..Config::default() };
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
    if a.json {
        print_json(&serde_json::json!({
            "flows": a.flows, "rounds": a.rounds, "runs": a.runs, "batch": a.batch,
            "rules": RULES, "cpus": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
            "results": rows,
            "per_worker_vs_locked_at_max_workers": ratio_tables,
            "per_worker_scaling": ratio_scaling,
            "locked_scaling": ratio_scaling_locked,
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
    }
    Ok(())
}
