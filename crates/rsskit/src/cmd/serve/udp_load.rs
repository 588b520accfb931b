//! `rsskit udp-load`: the UDP load generator (FreeBSD's `udp-clt`, with the
//! sources solved by the tuple finder instead of trial and error).

use crate::cmd::common::{
    cpu_count_or_list_arg, cpu_list_arg, int_in, print_json, seconds, seconds_arg, stop_on_signals,
    UdpHashArgs,
};
use crate::cmd::common::{KeyCheck, Workers};
use anyhow::{anyhow, bail, Context, Result};
use rsskit_core::{CpuId, L4Proto, WorkerId};
use rsskit_runtime::udp_load::{
    self, IpNet, LoadConfig, LoadReport, ServerTable, UdpLoadError, MAX_SIZE, MIN_SIZE,
};
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::atomic::AtomicBool;

#[derive(clap::Args, Debug)]
#[command(after_help = "Prints the hash configuration in force and the streams on stderr, one line a \
second on stderr, and the per-stream summary on stdout (--json: one object). SIGINT or SIGTERM stops \
sending early, waits --drain for the last echoes and still reports. Datagrams refused by the target \
(ICMP port unreachable) are counted (refused); exit status 1 when nothing came back, when refusals \
cut the run short, or when a stream was not served by its bucket's owner (match NO; match moved: the server \
moved the bucket, udp-echo --rebalance; --no-owner-check for a server that does not steer by bucket).\n\nExample (loopback, echo server on 127.0.0.1:9000):\n  rsskit udp-load --target \
127.0.0.1:9000 --streams 4 --spread-buckets --rate 20000 --duration 3")]
pub struct Args {
    /// Echo server: ADDR:PORT ([IPV6]:PORT).
    #[arg(long)]
    target: String,
    /// Streams: each its own socket and source (1-65536).
    #[arg(long, default_value_t = 1, value_parser = int_in(1usize, MAX_STREAMS))]
    streams: usize,
    /// Datagram size in bytes (40-65507).
    #[arg(long, default_value_t = 510, value_parser = int_in(MIN_SIZE, MAX_SIZE))]
    size: usize,
    /// Total datagrams per second over all streams (1-1000000000).
    #[arg(long, conflicts_with = "max", value_parser = int_in(1u64, 1_000_000_000))]
    rate: Option<u64>,
    /// Send as fast as possible (the default when --rate is not given).
    #[arg(long)]
    max: bool,
    /// Seconds to send for, above 0 and below 10^7 (default 5 unless --count is given).
    #[arg(long, value_parser = seconds_arg)]
    duration: Option<f64>,
    /// Datagrams per stream (1-2^40); every one is accounted for (echoed or lost).
    #[arg(long, value_parser = int_in(1u64, 1 << 40))]
    count: Option<u64>,
    /// Most datagrams outstanding per stream, 1-1048576 (closed loop).
    #[arg(long, value_parser = int_in(1u32, 1 << 20))]
    window: Option<u32>,
    /// With --rate: send in bursts of N datagrams (round-robin over the
    /// streams) instead of evenly paced, like a NIC coalescing interrupts.
    /// 1-4096.
    #[arg(long, default_value_t = 1, value_parser = int_in(1u32, 4096))]
    burst: u32,
    /// Datagrams of one stream per send (1-64): above 1, one UDP_SEGMENT
    /// (GSO) send carries up to N consecutive datagrams of a stream (within
    /// --count and --window); N x --size must stay within 65507 bytes.
    #[arg(long, default_value_t = 1, value_parser = int_in(1u32, udp_load::MAX_GSO))]
    gso: u32,
    /// No UDP_GRO on the streams' sockets (by default on where the kernel
    /// has it: a coalesced echo is split into its datagrams here; without
    /// it the kernel splits it); --gso is separate.
    #[arg(long)]
    no_offload: bool,
    /// Pick the sources with the tuple finder so that the streams land in
    /// distinct buckets of the server's table.
    #[arg(long)]
    spread_buckets: bool,
    /// The server's hash configuration (the same flags as udp-echo's).
    #[command(flatten)]
    hash: UdpHashArgs,
    /// The server's worker CPUs: a count N (CPUs 0..N-1) or a LIST like 0-3,6
    /// (N 1-8192, ids 0-8191; default: this machine's online CPUs).
    #[arg(long, value_parser = cpu_count_or_list_arg)]
    server_cpus: Option<String>,
    /// Network to pick source addresses from (address-only hashing); default
    /// 127.0.0.0/8 for an IPv4 loopback target, else this host's addresses.
    /// Addresses assigned here are preferred; for IPv4 a whole network can be
    /// made bindable with `ip route add local NET dev lo`. Needs
    /// --spread-buckets (without it the kernel picks the source).
    #[arg(long, requires = "spread_buckets")]
    src_net: Option<IpNet>,
    /// Sender threads (1-1024).
    #[arg(long, default_value_t = 1, value_parser = int_in(1usize, 1024))]
    threads: usize,
    /// CPUs the sender threads are pinned to, round-robin (a list, ids
    /// 0-8191; default: the last online CPU); "none": unpinned; "owner": one sender thread per server
    /// CPU owning some stream's bucket, pinned there (on loopback the kernel
    /// then processes each datagram on its owner's CPU, as NIC RSS would).
    #[arg(long, value_parser = client_cpus_arg)]
    client_cpus: Option<String>,
    /// Seconds to wait for the last echoes once sending stops (above 0, below 10^7).
    #[arg(long, default_value_t = 1.0, value_parser = seconds_arg)]
    drain: f64,
    /// The server does not steer by bucket (udp-echo --steer cpu, reuseport
    /// or shared): the per-stream owner check (the match column) does not
    /// apply; it is shown as "-" and does not set the exit status (which
    /// is 1 when a stream's match is NO).
    #[arg(long)]
    no_owner_check: bool,
    /// Print one JSON object (the summary) on stdout.
    #[arg(long)]
    json: bool,
    /// Write datagrams/s (sent, echoed) over time and the RTT distribution as an SVG chart.
    #[arg(long, value_name = "FILE.svg", value_parser = crate::plot::path_arg)]
    plot: Option<std::path::PathBuf>,
}

/// Most `--streams` (each is a socket).
const MAX_STREAMS: usize = 1 << 16;

/// `--client-cpus`: none, owner or a CPU list.
fn client_cpus_arg(s: &str) -> Result<String, String> {
    match s {
        "none" | "owner" => Ok(s.to_string()),
        _ => cpu_list_arg(s).map_err(|e| format!("{e}; or none, owner")),
    }
}

/// `N` (CPUs 0..N-1) or a CPU list.
pub fn parse_server_cpus(s: &str) -> Result<Vec<usize>> {
    if let Ok(n) = s.trim().parse::<usize>() {
        if n == 0 {
            bail!("--server-cpus 0: a count must be at least 1 (for CPU 0 alone say --server-cpus 1 or 0-0)");
        }
        return Ok((0..n).collect());
    }
    rsskit_linux::cpulist::parse(s).map_err(|e| anyhow!("--server-cpus: {e}"))
}

fn resolve(target: &str) -> Result<SocketAddr> {
    if let Ok(sa) = target.parse::<SocketAddr>() {
        return Ok(sa);
    }
    if !target.contains(':') {
        bail!("--target '{target}' has no port: expected ADDR:PORT or [IPV6]:PORT");
    }
    target
        .to_socket_addrs()
        .map_err(|e| anyhow!("--target '{target}' is not an address: {e}"))?
        .next()
        .ok_or_else(|| anyhow!("--target '{target}' resolves to no address"))
}

/// Builds the run configuration from the arguments.
fn config(a: &Args, allow_weak_key: bool) -> Result<LoadConfig> {
    let target = resolve(&a.target)?;
    let cpus = match &a.server_cpus {
        Some(s) => parse_server_cpus(s)?,
        None => rsskit_linux::cpulist::online(),
    };
    // The server's policy as the client must assume it.
    let cpus: Vec<CpuId> = cpus.into_iter().map(|c| CpuId(c as u32)).collect();
    let hash = a.hash.hash_config(None, target.is_ipv6())?;
    let check = KeyCheck::Proto(L4Proto::Udp, target.is_ipv6());
    let policy = (a.hash.policy)
        .build(hash, Workers::On(&cpus), a.hash.bits, None, check, allow_weak_key)
        .map_err(|e| e.policy_as(|e| UdpLoadError::Table(e.to_string()).into()))?;
    let table = ServerTable::from_policy(policy);
    let online = rsskit_linux::cpulist::online();
    let pin = match a.client_cpus.as_deref() {
        Some("none") | Some("owner") => vec![],
        Some(s) => rsskit_linux::cpulist::parse_online(s).map_err(|e| anyhow!("--client-cpus: {e}"))?,
        None => online.last().map(|&c| vec![c]).unwrap_or_default(),
    };
    let cfg = LoadConfig {
        target,
        streams: a.streams,
        size: a.size,
        rate: if a.max { None } else { a.rate },
        duration: a.duration.map(|d| seconds("--duration", d)).transpose()?,
        count: a.count,
        window: a.window,
        burst: a.burst,
        spread: a.spread_buckets,
        src_net: a.src_net,
        threads: a.threads,
        pin,
        pin_owner: a.client_cpus.as_deref() == Some("owner"),
        drain: seconds("--drain", a.drain)?,
        table,
        gso: a.gso,
        gro: !a.no_offload,
    };
    cfg.validate()?;
    Ok(cfg)
}

pub fn run(a: Args, allow_weak_key: bool) -> Result<()> {
    let cfg = config(&a, allow_weak_key)?;
    let stop = stop_on_signals()?;
    let mut report = run_load(&cfg, &stop, !a.json)?;
    report.owner_check = !a.no_owner_check;
    if let Some(p) = &a.plot {
        crate::plot::udp_load(p, &cfg.target.to_string(), &report)?;
    }
    if a.json {
        let mut j = serde_json::to_value(&report).context("encoding the report")?;
        j["offload"] = offload_json(&cfg);
        print_json(&j)?;
    } else {
        print_report(&cfg, &report);
    }
    check(&cfg, &report)
}

/// Plans and runs, printing the plan and one progress line a second on stderr.
pub fn run_load(cfg: &LoadConfig, stop: &AtomicBool, verbose: bool) -> Result<LoadReport> {
    let streams = udp_load::plan_streams(cfg)?;
    eprintln!(
        "udp-load: {} -> {}, offload {}",
        cfg.table.describe(cfg.target.is_ipv6()),
        cfg.target,
        offload_mode(cfg)
    );
    if verbose {
        for s in &streams {
            eprintln!(
                "  stream {:>3} from {:<22} hash {:08x} bucket {:>3} owner worker {}",
                s.id,
                s.src,
                s.hash,
                s.bucket,
                s.owner.map_or("-".into(), |w| w.0.to_string())
            );
        }
    }
    let mut last = (0u64, 0u64);
    udp_load::run(cfg, streams, stop, |sent, echoed, t| {
        eprintln!(
            "udp-load: {:>5.1}s sent {sent} ({} pps) echoed {echoed} ({} pps)",
            t.as_secs_f64(),
            sent - last.0,
            echoed - last.1
        );
        last = (sent, echoed);
    })
    .map_err(Into::into)
}

/// Whether the streams' sockets get `UDP_GRO` (asked for and available).
fn gro_in_force(cfg: &LoadConfig) -> bool {
    cfg.gro && rsskit_linux::socket::udp_offload().gro
}

/// `gso 16 + gro`, `gro`, `off (...)`: the offload of this run.
fn offload_mode(cfg: &LoadConfig) -> String {
    let gso = (cfg.gso > 1).then(|| format!("gso {}", cfg.gso));
    let gro = gro_in_force(cfg).then(|| "gro".to_string());
    match (gso, gro) {
        (Some(s), Some(r)) => format!("{s} + {r}"),
        (Some(s), None) | (None, Some(s)) => s,
        (None, None) if !cfg.gro => "off (--no-offload)".into(),
        (None, None) => format!(
            "off (kernel: {})",
            rsskit_linux::socket::udp_offload().why_not.as_deref().unwrap_or("no UDP_GRO")
        ),
    }
}

fn offload_json(cfg: &LoadConfig) -> serde_json::Value {
    serde_json::json!({ "gso": cfg.gso, "gro": gro_in_force(cfg), "mode": offload_mode(cfg) })
}

fn opt(v: Option<usize>) -> String {
    v.map_or("-".into(), |v| v.to_string())
}

fn list(v: &[u16]) -> String {
    if v.is_empty() {
        "-".into()
    } else {
        v.iter().map(|x| x.to_string()).collect::<Vec<_>>().join(",")
    }
}

/// The human summary.
pub fn print_report(cfg: &LoadConfig, r: &LoadReport) {
    println!("{}", cfg.table.describe(cfg.target.is_ipv6()));
    println!(
        "{:>6}  {:<24} {:>6} {:>6} {:>9} {:>10} {:>10} {:>8} {:>5}",
        "stream", "source", "bucket", "owner", "served_by", "sent", "echoed", "lost", "match"
    );
    for s in &r.streams {
        println!(
            "{:>6}  {:<24} {:>6} {:>6} {:>9} {:>10} {:>10} {:>8} {:>5}",
            s.stream,
            s.src,
            s.bucket,
            opt(s.owner_worker.map(WorkerId::index)),
            list(&s.served_by_workers),
            s.sent,
            s.echoed,
            s.lost,
            if r.owner_check { super::verdict(s) } else { "-" }
        );
    }
    if r.owner_check && r.streams.iter().any(|s| s.moved) {
        println!(
            "match moved: served first by the bucket's owner, then by the worker the server moved the bucket to \
             (its stamps say that worker owned it then: udp-echo --rebalance)"
        );
    }
    let pct = if r.sent > 0 { 100.0 * r.lost as f64 / r.sent as f64 } else { 0.0 };
    println!(
        "sent {} echoed {} lost {} ({pct:.3}%) out-of-order {} duplicates {} in {:.2}s ({:.0} pps echoed while sending)",
        r.sent,
        r.echoed,
        r.lost,
        r.out_of_order,
        r.duplicates,
        r.elapsed_s,
        r.echoed as f64 / cfg.duration.map_or(r.elapsed_s, |d| d.as_secs_f64().min(r.elapsed_s)).max(1e-9)
    );
    println!(
        "rtt us: p50 {:.1} p99 {:.1} p99.9 {:.1} max {:.1}",
        r.rtt_us.p50, r.rtt_us.p99, r.rtt_us.p999, r.rtt_us.max
    );
    println!(
        "refused {} (ECONNREFUSED: ICMP port unreachable from the target){}",
        r.refused,
        if r.cut_short { "; the run was cut short" } else { "" }
    );
}

/// Exit status: an error when nothing came back, or when a stream was
/// not served by its bucket's owner (match NO).
pub fn check(cfg: &LoadConfig, r: &LoadReport) -> Result<()> {
    if r.echoed == 0 {
        if r.refused > 0 {
            bail!("target {} refused the datagrams (ECONNREFUSED): nothing is listening there", cfg.target);
        }
        bail!(
            "no datagram came back from {} (sent {}): is an echo server running there?",
            cfg.target,
            r.sent
        );
    }
    if r.cut_short {
        bail!(
            "target {} went away: {} datagrams refused (ECONNREFUSED) after {} echoes; the run was cut short at {:.1}s",
            cfg.target,
            r.refused,
            r.echoed,
            r.elapsed_s
        );
    }
    let wrong: Vec<String> = r.streams.iter().filter(|s| !s.matched).map(|s| s.stream.to_string()).collect();
    if r.owner_check && !wrong.is_empty() {
        bail!(
            "{} of {} streams (match NO: {}) were not served only by their bucket's owner in the table above \
             (the server's --cpus/--bits/--key/--udp-4tuple differ, or nothing came back for them; a server \
             that does not steer by bucket, udp-echo --steer cpu/reuseport/shared: pass --no-owner-check)",
            wrong.len(),
            r.streams.len(),
            wrong.join(",")
        );
    }
    Ok(())
}
