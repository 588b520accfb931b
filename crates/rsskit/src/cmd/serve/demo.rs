//! `rsskit demo`: loopback echo server (one pinned worker per CPU, toeplitz
//! steering) + the load generator with its streams spread over the buckets;
//! shows that every stream is served by the worker owning its bucket.

use crate::cmd::common::{build_policy, KeyCheck, Workers};
use crate::cmd::common::{cpu_list_arg, float_in, int_in, print_json, stop_on_signals};
use anyhow::{anyhow, bail, Result};
use rsskit_core::{CpuId, HashConfig, RssKey};
use rsskit_runtime::demo::{self, DemoConfig};
use rsskit_runtime::udp_load;
use std::sync::Arc;
use std::time::Duration;

#[derive(clap::Args, Debug)]
#[command(
    after_help = "No setup, no root: everything runs on 127.0.0.1.\n\nExample:\n  rsskit demo --duration 3"
)]
pub struct Args {
    /// Seconds of load, above 0 and at most 3600.
    #[arg(long, default_value_t = 3.0, value_parser = float_in(0.0, 3600.0, "seconds"))]
    duration: f64,
    /// Streams, 1-65536 (default: twice the workers, so every bucket gets one).
    #[arg(long, value_parser = int_in(1usize, 1 << 16))]
    streams: Option<usize>,
    /// Worker CPUs (default: every online CPU), e.g. 0-3 (ids 0-8191).
    #[arg(long, value_parser = cpu_list_arg)]
    cpus: Option<String>,
    /// Server port on 127.0.0.1, 0-65535 (default 0: an ephemeral one).
    #[arg(long, default_value_t = 0, value_parser = int_in(0u16, u16::MAX))]
    port: u16,
    /// Datagram size in bytes (40-65507).
    #[arg(long, default_value_t = 510, value_parser = int_in(udp_load::MIN_SIZE, udp_load::MAX_SIZE))]
    size: usize,
    /// Hash UDP on the 4-tuple (streams spread by source port) instead of
    /// addresses only (spread by source address in 127.0.0.0/8).
    #[arg(long)]
    udp_4tuple: bool,
    /// Datagrams per second each stream sends, 0-10000000 (default 5000; 0:
    /// as fast as it can, when the worker sharing a CPU with the load
    /// generator shows fewer).
    #[arg(long, value_name = "N", default_value_t = demo::DEFAULT_RATE_PER_STREAM, value_parser = int_in(0u64, 10_000_000))]
    rate: u64,
    /// Print one JSON object: the server's and the load's summaries.
    #[arg(long)]
    json: bool,
}

pub fn run(a: Args) -> Result<()> {
    let cpus = match &a.cpus {
        Some(c) => rsskit_linux::cpulist::parse_online(c).map_err(|e| anyhow!("--cpus: {e}"))?,
        None => rsskit_linux::cpulist::online(),
    };
    // The demo's one policy, shared by server and client: the Microsoft
    // key, buckets round-robin over one worker per CPU.
    let worker_cpus: Vec<CpuId> = cpus.iter().map(|&c| CpuId(c as u32)).collect();
    let hash = HashConfig::default().with_udp_4tuple(a.udp_4tuple);
    let policy =
        build_policy(RssKey::microsoft(), hash, Workers::On(&worker_cpus), None, None, KeyCheck::None, false)
            .map_err(|e| e.policy_as(|e| anyhow!("--cpus: {e}")))?;
    let mut cfg = DemoConfig::new(Arc::new(policy));
    if let Some(s) = a.streams {
        cfg.streams = s;
    }
    if !(a.duration.is_finite() && a.duration > 0.0 && a.duration <= 3600.0) {
        bail!("--duration must be a number of seconds in (0, 3600], not {}", a.duration);
    }
    cfg.duration = Duration::from_secs_f64(a.duration);
    cfg.port = a.port;
    cfg.size = a.size;
    cfg.rate_per_stream = (a.rate > 0).then_some(a.rate);
    cfg.validate()?;
    let stop = stop_on_signals()?;
    let n = cpus.len();
    eprintln!(
        "demo: echo server on 127.0.0.1, {n} workers pinned to CPUs {}, toeplitz steering; {} streams for {:.1}s, {}",
        rsskit_linux::cpulist::format(&cpus),
        cfg.streams,
        a.duration,
        match cfg.rate_per_stream {
            Some(r) => format!("{r} datagrams/s each (--rate 0: as fast as they can)"),
            None => "each as fast as it can".into(),
        }
    );
    let out = demo::run(&cfg, &stop, |s| {
        let per: Vec<String> = s.per_worker.iter().enumerate().map(|(w, p)| format!("w{w} {p}")).collect();
        eprintln!("demo: {:>4.1}s pps per worker: {}", s.t, per.join("  "));
    })?;
    if a.json {
        print_json(&serde_json::json!({
            "server": out.server.to_json(),
            "load": out.load,
            "mismatched_streams": out.mismatched,
            "rate_per_stream": out.rate_per_stream,
            "load_cpu": out.load_cpu,
        }))?;
    } else {
        print(&out);
    }
    if !out.mismatched.is_empty() {
        bail!(
            "{} stream(s) not served (only) by the worker owning their bucket: {:?}",
            out.mismatched.len(),
            out.mismatched
        );
    }
    Ok(())
}

/// Why one worker's rate is lower, when the load ran unpaced on a worker's
/// CPU (the load generator takes that CPU's time from the worker).
fn shared_cpu_note(out: &demo::DemoOutcome) -> Option<String> {
    if out.rate_per_stream.is_some() {
        return None;
    }
    let cpu = out.load_cpu?;
    let (info, _) = out.server.workers.iter().find(|(i, _)| i.cpu.0 as usize == cpu)?;
    Some(format!(
        "the load generator ran unpaced on CPU {cpu}, worker {}'s CPU: that worker serves fewer datagrams/s because it shares its CPU, not because of steering",
        info.worker
    ))
}

fn print(out: &demo::DemoOutcome) {
    let t = &out.table;
    println!("{}", t.describe(false));
    println!();
    println!("workers (datagrams received per second, then in total):");
    let secs = out.seconds.len().max(1) as f64;
    for (info, c) in &out.server.workers {
        let avg = out.seconds.iter().map(|s| s.per_worker.get(info.worker).copied().unwrap_or(0)).sum::<u64>()
            as f64
            / secs;
        println!(
            "  worker {} on CPU {}  buckets {:?}  {:>9.0} pps  received {}  sent {}  misdirected {}",
            info.worker, info.cpu.0, info.buckets, avg, c.received, c.sent, c.misdirected
        );
    }
    println!();
    println!(
        "{:>6}  {:<22} {:>6} {:>12} {:>12} {:>10} {:>10} {:>5}",
        "stream", "source", "bucket", "owner", "served by", "sent", "echoed", "match"
    );
    for s in &out.load.streams {
        let owner = match (s.owner_worker, s.owner_cpu) {
            (Some(w), Some(c)) => format!("w{}/cpu{}", w.0, c.0),
            _ => "-".into(),
        };
        let served: Vec<String> = s
            .served_by_workers
            .iter()
            .zip(s.served_by_cpus.iter().chain(std::iter::repeat(&u16::MAX)))
            .map(|(w, c)| {
                if s.served_by_workers.len() == s.served_by_cpus.len() {
                    format!("w{w}/cpu{c}")
                } else {
                    format!("w{w}")
                }
            })
            .collect();
        println!(
            "{:>6}  {:<22} {:>6} {:>12} {:>12} {:>10} {:>10} {:>5}",
            s.stream,
            s.src,
            s.bucket,
            owner,
            if served.is_empty() { "-".into() } else { served.join(",") },
            s.sent,
            s.echoed,
            crate::cmd::serve::verdict(s)
        );
    }
    let l = &out.load;
    let tot = out.server.totals();
    println!();
    println!(
        "totals: sent {} echoed {} lost {} out-of-order {}; server received {} sent {} misdirected {}; rtt us p50 {:.1} p99 {:.1} max {:.1}",
        l.sent, l.echoed, l.lost, l.out_of_order, tot.received, tot.sent, tot.misdirected, l.rtt_us.p50, l.rtt_us.p99, l.rtt_us.max
    );
    let n = l.streams.len();
    if let Some(note) = shared_cpu_note(out) {
        println!("note: {note}");
    }
    if out.mismatched.is_empty() {
        println!("verdict: OK: all {n} streams were served only by the worker that owns their bucket");
    } else {
        println!(
            "verdict: FAIL: {} of {n} streams were served by another worker (or never echoed)",
            out.mismatched.len()
        );
    }
}
