//! `rsskit http-load`: HTTP/1.1 load tester (pinned worker per CPU, tens of
//! thousands of connections, scheduled-start latency with `--rate`).

use crate::cmd::common::{
    cpu_list_arg, float_in, int_in, print_json, seconds, seconds_arg, stop_on_signals, worker_cpus,
};
use crate::cmd::common::{KeyCheck, PolicyArgs, Workers};
use anyhow::{anyhow, bail, Context, Result};
use rsskit_core::{CpuId, HashConfig, L4Proto};
use rsskit_runtime::http::load::{self, LoadConfig, LoadError, LoadReport, SrcPorts};
use rsskit_runtime::udp_load::IpNet;
use std::sync::Arc;

#[derive(clap::Args, Debug)]
#[command(
    after_help = "One line a second on stderr (--quiet: none); the summary at the end on stdout (--json: one \
object). SIGINT or SIGTERM ends the run early and still reports. Exit status 1 when no response came \
back.\n\nExample:\n  rsskit http-load --url http://127.0.0.1:8080/ --connections 1000 --duration 10 --close"
)]
#[command(mut_args(PolicyArgs::key(|a| a.help("RSS key for the tuple finder: default (Microsoft), symmetric, or hex"))))]
pub struct Args {
    /// Target: http://HOST[:PORT]/PATH.
    #[arg(long)]
    url: String,
    /// Concurrent connections, spread over the workers (1-10000000).
    #[arg(long, default_value_t = 100, value_parser = int_in(1usize, 10_000_000))]
    connections: usize,
    /// Seconds to run (above 0, below 10^7).
    #[arg(long, default_value_t = 10.0, value_parser = seconds_arg)]
    duration: f64,
    /// Requests per second over all connections, on a fixed schedule;
    /// latency counts from the scheduled start (coordinated omission corrected).
    /// Above 0, at most 10^9.
    #[arg(long, value_parser = float_in(0.0, 1e9, "requests per second"))]
    rate: Option<f64>,
    /// One request per connection (Connection: close).
    #[arg(long, conflicts_with = "keep_alive")]
    close: bool,
    /// Reuse connections (the default).
    #[arg(long)]
    keep_alive: bool,
    /// Worker threads, 1-4096 (default: one per CPU of --cpus, or per online CPU).
    #[arg(long, value_parser = int_in(1usize, 4096))]
    threads: Option<usize>,
    /// CPUs the workers are pinned to (round-robin; ids 0-8191; default: online CPUs).
    #[arg(long, value_parser = cpu_list_arg)]
    cpus: Option<String>,
    /// Leave the workers unpinned.
    #[arg(long)]
    no_pin: bool,
    /// Keep the default scheduling policy instead of SCHED_BATCH (with
    /// SCHED_BATCH a worker woken by an answer does not preempt a server
    /// sharing its CPU after every response).
    #[arg(long)]
    no_sched_batch: bool,
    /// Source addresses: a CIDR such as 127.0.0.0/8 (connections spread over
    /// up to 256 of its addresses).
    #[arg(long)]
    sources: Option<IpNet>,
    /// Seconds before a request counts as timed out (above 0, below 10^7).
    #[arg(long, default_value_t = 5.0, value_parser = seconds_arg)]
    timeout: f64,
    /// Source ports: kernel (ephemeral), server (tuple finder: the request's
    /// Toeplitz hash lands on the paired server worker's bucket; for a server
    /// with --steer toeplitz), reply (tuple finder: replies hash to this
    /// worker's CPU under the client's RSS table).
    #[arg(long, default_value = "kernel")]
    src_ports: SrcPorts,
    #[command(flatten)]
    policy: PolicyArgs,
    /// The server's worker CPUs (--src-ports server; ids 0-8191), default: ours.
    #[arg(long, value_parser = cpu_list_arg)]
    server_cpus: Option<String>,
    /// No per-second lines.
    #[arg(long)]
    quiet: bool,
    /// Print the summary as one JSON object on stdout.
    #[arg(long)]
    json: bool,
    /// Write responses/s per worker over time and the latency distribution as an SVG chart.
    #[arg(long, value_name = "FILE.svg", value_parser = crate::plot::path_arg)]
    plot: Option<std::path::PathBuf>,
}

/// The configuration, and the worker CPUs as asked (printed as given, even
/// when fewer connections than threads leave some of them out).
fn config(a: &Args, allow_weak_key: bool) -> Result<(LoadConfig, Vec<usize>)> {
    let url = load::parse_url(&a.url)?;
    let base = worker_cpus(a.cpus.as_deref())?;
    if base.is_empty() {
        bail!("no CPUs to run on");
    }
    let threads = match a.threads {
        Some(0) => bail!("--threads must be at least 1"),
        Some(t) if t > 4096 => bail!("--threads {t} is too many"),
        Some(t) => t,
        None => base.len(),
    };
    let cpus: Vec<usize> = (0..threads).map(|i| base[i % base.len()]).collect();
    let server_cpus = match &a.server_cpus {
        Some(s) => rsskit_linux::cpulist::parse(s).map_err(|e| anyhow!("--server-cpus: {e}"))?,
        None => base.clone(),
    };
    if a.connections > 10_000_000 {
        bail!("--connections {} is too many", a.connections);
    }
    let duration = seconds("--duration", a.duration)?;
    let timeout = seconds("--timeout", a.timeout)?;
    if a.connections == 0 {
        return Err(LoadError::NoConnections.into());
    }
    // The two policies, TCP hashed on the 4-tuple, one key: the client's
    // (worker i on CPU i, at most one worker per connection) and the
    // server's, whose buckets --src-ports server aims at.
    // The key is judged once, for TCP to the target's family over the
    // server's buckets.
    let over = |cpus: &[usize], which: &'static str, check: KeyCheck| {
        let cpus: Vec<CpuId> = cpus.iter().map(|&c| CpuId(c as u32)).collect();
        (a.policy)
            .build(HashConfig::default(), Workers::On(&cpus), None, None, check, allow_weak_key)
            .map(Arc::new)
            .map_err(|e| e.policy_as(|source| LoadError::Table { which, source }.into()))
    };
    let policy = over(&cpus[..threads.min(a.connections)], "client", KeyCheck::None)?;
    let server_policy = over(&server_cpus, "server", KeyCheck::Proto(L4Proto::Tcp, url.addr.is_ipv6()))?;
    let cfg = LoadConfig {
        url,
        connections: a.connections,
        duration,
        rate: a.rate,
        close: a.close,
        policy,
        pin: !a.no_pin,
        sources: a.sources,
        timeout,
        src_ports: a.src_ports,
        server_policy,
        sched_batch: !a.no_sched_batch,
    };
    cfg.validate()?;
    Ok((cfg, cpus))
}

pub fn run(a: Args, allow_weak_key: bool) -> Result<()> {
    let (cfg, cpus) = config(&a, allow_weak_key)?;
    let stop = stop_on_signals()?;
    eprintln!(
        "http-load: {} ({}) {} connections, {} threads on CPUs {}, {}{}, {}s",
        a.url,
        cfg.url.addr,
        cfg.connections,
        cfg.policy.workers(),
        rsskit_linux::cpulist::format(&cpus),
        if cfg.close { "one request per connection" } else { "keep-alive" },
        cfg.rate.map_or(String::new(), |r| format!(", {r} req/s scheduled")),
        a.duration
    );
    let quiet = a.quiet;
    let mut last = 0u64;
    let report = load::run(&cfg, &stop, |resp, fail, open, t| {
        if !quiet {
            eprintln!(
                "http-load: {:>5.1}s {} req/s (total {resp}) failures {fail} open {open}",
                t.as_secs_f64(),
                resp - last
            );
        }
        last = resp;
    })?;
    if let Some(p) = &a.plot {
        crate::plot::http_load(p, &report)?;
    }
    if a.json {
        print_json(&serde_json::to_value(&report).context("encoding the report")?)?;
    } else {
        print_report(&report);
    }
    check(&report)
}

fn print_report(r: &LoadReport) {
    println!(
        "{} {} connections {} threads {}: {} responses ({} ok) in {:.2}s = {:.0} req/s",
        r.url, r.connections, r.threads, r.mode, r.responses, r.ok, r.elapsed_s, r.requests_per_s
    );
    println!("latency {}", r.latency_us);
    if r.connects > 0 {
        println!("connect {}", r.connect_us);
    }
    let e = &r.errors;
    println!(
        "errors: refused {} timeout {} reset {} bad_status {} short_body {} other {}",
        e.refused, e.timeout, e.reset, e.bad_status, e.short_body, e.other
    );
    println!(
        "sent {} connects {} bytes_in {} source addresses {} ({:?} ports)",
        r.sent, r.connects, r.bytes_in, r.source_addresses, r.src_ports
    );
}

fn check(r: &LoadReport) -> Result<()> {
    if r.responses == 0 {
        let e = &r.errors;
        if e.refused > 0 {
            bail!(
                "no response from {}: {} connections refused (is a server listening?)",
                r.target,
                e.refused
            );
        }
        bail!("no response from {} ({} failures)", r.target, e.failures());
    }
    Ok(())
}
