//! `rsskit udp-echo`: the per-CPU UDP echo (or sink) server.

use crate::cmd::common::{
    cpu_list_arg, int_in, print_json, seconds, seconds_arg, stop_on_signals, worker_cpu_ids, UdpHashArgs,
};
use crate::cmd::common::{KeyCheck, Workers};
use anyhow::{anyhow, bail, Context, Result};
use rsskit_core::L4Proto;
use rsskit_runtime::rebalance::{round_line, worth_printing, DEFAULT_TARGET, MIN_SAMPLE};
use rsskit_runtime::stats::Counters;
use rsskit_runtime::steer::Steer;
use rsskit_runtime::udp_echo::{
    EchoConfig, EchoReport, EchoServer, RcvBuf, DEFAULT_FLUSH_BYTES, DEFAULT_FLUSH_PACKETS, DEFAULT_RCVBUF,
    MAX_BATCH, MAX_RCVBUF,
};
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::os::unix::net::UnixStream;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug)]
#[command(
    after_help = "Steering modes:\n  toeplitz  in-kernel Toeplitz hash (classic BPF) -> the bucket's worker \
(default)\n  ebpf      the same bucket computed by an eBPF SK_REUSEPORT program, socket picked through \
maps that change live (--rebalance); needs root or CAP_BPF, kernel >= 4.19, else classic toeplitz with the \
reason printed\n  cpu       the worker of the CPU the kernel processes the datagram on\n  kernel    plain \
SO_REUSEPORT (the kernel's own hash)\n  shared    one socket read by every worker\n\nPrints the bucket table \
and \"ready\" on stderr once serving; one line per second; totals and the kernel's UDP counter deltas on \
exit (SIGINT, SIGTERM or --duration).\n\nExample:\n  rsskit udp-echo --bind 127.0.0.1:9000 --steer \
toeplitz --duration 10"
)]
pub struct Args {
    /// Address and port to serve: ADDR:PORT or [IPV6]:PORT (port 0: any free port).
    #[arg(long)]
    bind: String,
    /// CPUs to run one worker each on, e.g. 0-3,6 (ids 0-8191; default: every online CPU).
    #[arg(long, value_parser = cpu_list_arg)]
    cpus: Option<String>,
    /// How datagrams reach the workers: cpu, toeplitz, ebpf, kernel or shared.
    #[arg(long, default_value = "toeplitz")]
    steer: Steer,
    /// Count only, never reply.
    #[arg(long)]
    sink: bool,
    /// Datagrams per recvmmsg call (1-1024).
    #[arg(long, default_value_t = 32, value_parser = int_in(1usize, MAX_BATCH))]
    batch: usize,
    /// Flush queued replies once this many are pending (1-1024); they are
    /// flushed anyway when the receive queue drains.
    #[arg(long, default_value_t = DEFAULT_FLUSH_PACKETS, value_parser = int_in(1usize, MAX_BATCH))]
    flush_packets: usize,
    /// Flush queued replies once this many bytes are pending (1-16777216).
    #[arg(long, default_value_t = DEFAULT_FLUSH_BYTES, value_parser = int_in(1usize, 1 << 24))]
    flush_bytes: usize,
    #[command(flatten)]
    hash: UdpHashArgs,
    /// SO_RCVBUF per socket, bytes (0: the kernel default,
    /// net.core.rmem_default); the kernel caps it at net.core.rmem_max. The
    /// size granted is printed at start and in the summary. At most 1073741823.
    #[arg(long, default_value_t = DEFAULT_RCVBUF, value_parser = int_in(0usize, MAX_RCVBUF))]
    rcvbuf: usize,
    /// Stop after this many seconds, above 0 and below 10^7 (default: run until SIGINT/SIGTERM).
    #[arg(long, value_parser = seconds_arg)]
    duration: Option<f64>,
    /// Print one JSON summary on stdout at exit (per-second lines go to stderr).
    #[arg(long)]
    json: bool,
    /// Buckets follow a NIC's table: nic:IF (IF's indirection table, each
    /// entry owned by the worker on its queue's IRQ CPU); use with --key nic:IF.
    #[arg(long, value_name = "nic:IF", value_parser = crate::cmd::common::table_arg)]
    table: Option<crate::cmd::common::BucketCpus>,
    /// Move buckets live from the busiest worker to the least busy one
    /// (each worker's datagrams over --rebalance-every); needs --steer ebpf.
    /// Every move is printed (and listed under "rebalance" in --json).
    #[arg(long)]
    rebalance: bool,
    /// Seconds between rebalancing rounds, above 0 and below 10^7.
    #[arg(long, default_value_t = 2.0, value_parser = seconds_arg)]
    rebalance_every: f64,
    /// No UDP offload: by default, where the kernel has UDP_GRO and
    /// UDP_SEGMENT, a worker receives the datagrams of one flow that arrive
    /// together as one coalesced buffer and answers them with one GSO send
    /// (counters and stamps stay per datagram). The mode is printed at start.
    #[arg(long)]
    no_offload: bool,
    /// Scheduling policy of the workers: batch (SCHED_BATCH: a datagram's
    /// wake-up waits until the task running on the worker's CPU blocks or
    /// ends its slice, so one wake-up finds more queued; less CPU per
    /// datagram, up to a slice of added latency on a CPU shared with a busy
    /// task) or normal (SCHED_OTHER: woken at once). Printed at start.
    #[arg(long, default_value = "batch", value_parser = ["batch", "normal"])]
    sched: String,
    /// Write datagrams/s received per worker over time as an SVG chart at the end.
    #[arg(long, value_name = "FILE.svg", value_parser = crate::plot::path_arg)]
    plot: Option<std::path::PathBuf>,
}

fn parse_bind(s: &str) -> Result<SocketAddr> {
    s.parse::<SocketAddr>()
        .map_err(|_| anyhow!("--bind '{s}' is not ADDR:PORT or [IPV6]:PORT with PORT 0-65535"))
}

pub fn run(a: Args, allow_weak_key: bool) -> Result<()> {
    let bind = parse_bind(&a.bind)?;
    let cpus = worker_cpu_ids(a.cpus.as_deref())?;
    if a.batch == 0 {
        bail!("--batch must be at least 1");
    }
    let duration = a.duration.map(|d| seconds("--duration", d)).transpose()?;
    if a.rebalance && a.steer != Steer::Ebpf {
        bail!("--rebalance needs --steer ebpf (bucket maps that change live), not --steer {}", a.steer);
    }
    let rebalance_every = seconds("--rebalance-every", a.rebalance_every)?;

    // The one RSS policy: worker i on CPU i of --cpus, buckets round-robin
    // (--bits) or following the NIC's table.
    let hash = a.hash.hash_config(a.table.as_ref().map(|t| &t.1), bind.is_ipv6())?;
    // The key is judged for the UDP hash types of the bound family and the
    // server's buckets, before anything is bound.
    let check = KeyCheck::Proto(L4Proto::Udp, bind.is_ipv6());
    let policy = (a.hash.policy)
        .build(hash, Workers::On(&cpus), a.hash.bits, a.table.as_ref(), check, allow_weak_key)
        .map_err(|e| e.policy_as(|e| anyhow!("{e}")))?;
    let mut cfg = EchoConfig::new(bind, Arc::new(policy));
    cfg.steer = a.steer;
    cfg.sink = a.sink;
    cfg.batch = a.batch;
    cfg.flush_packets = a.flush_packets;
    cfg.flush_bytes = a.flush_bytes;
    cfg.rcvbuf = (a.rcvbuf > 0).then_some(a.rcvbuf);
    cfg.offload = !a.no_offload;
    cfg.sched = a.sched.parse().map_err(|e: String| anyhow!("--sched: {e}"))?;
    let stop = stop_on_signals()?;
    // After the flag: a signal sets the flag first, then wakes the loop.
    let mut waker = stop_waker()?;
    let mut srv = EchoServer::start_with_stop(cfg, stop.clone())?;
    if let Some(why) = srv.fallback() {
        eprintln!("udp-echo: {why}");
    }
    let rebalance = a.rebalance && srv.can_rebalance();
    if a.rebalance && !rebalance {
        eprintln!("udp-echo: --rebalance off: eBPF steering is not in force");
    }
    banner(&srv, &a);
    let mut next_rebalance = Instant::now() + rebalance_every;
    let mut last_reason = None;

    let deadline = duration.map(|d| Instant::now() + d);
    let mut last = srv.snapshot();
    let mut series = Vec::new();
    let mut last_t = Instant::now();
    let mut next_tick = last_t + Duration::from_secs(1);
    while !stop.load(Ordering::Relaxed) {
        let now = Instant::now();
        if deadline.is_some_and(|d| now >= d) {
            break;
        }
        if now >= next_tick {
            let cur = srv.snapshot();
            let line = rate_line(&srv, &last, &cur, now.duration_since(last_t));
            let (t, secs) = (srv.elapsed().as_secs_f64(), now.duration_since(last_t).as_secs_f64().max(1e-9));
            for (w, (x, y)) in last.iter().zip(&cur).enumerate() {
                let name = format!("worker {w} (CPU {})", srv.workers()[w].cpu.0);
                crate::plot::Series::push(&mut series, &name, t, y.delta(x).received as f64 / secs);
            }
            if a.json {
                eprintln!("{line}");
            } else {
                println!("{line}");
                let _ = std::io::stdout().flush();
            }
            last = cur;
            last_t = now;
            next_tick += Duration::from_secs(1);
        }
        if rebalance && now >= next_rebalance {
            next_rebalance += rebalance_every;
            let r = srv.rebalance(DEFAULT_TARGET, MIN_SAMPLE)?;
            if let Some(r) = r.filter(|r| worth_printing(r, &mut last_reason)) {
                let line = round_line(&r);
                if a.json {
                    eprintln!("{line}");
                } else {
                    println!("{line}");
                }
            }
        }
        // Asleep until the next line, rebalancing round or the deadline; a
        // signal wakes it at once.
        let mut wake = next_tick;
        if rebalance {
            wake = wake.min(next_rebalance);
        }
        if let Some(d) = deadline {
            wake = wake.min(d);
        }
        if rsskit_linux::socket::wait_readable(&waker, wake.saturating_duration_since(Instant::now()))? {
            let mut drain = [0u8; 16];
            while matches!(waker.read(&mut drain), Ok(n) if n > 0) {}
        }
    }
    if let Some(p) = &a.plot {
        crate::plot::lines(
            p,
            &format!("udp-echo {}: received per worker", srv.local_addr()),
            "seconds",
            "datagrams/s",
            &series,
        )?;
    }
    let report = srv.stop()?;
    if a.json {
        print_json(&report.to_json())
    } else {
        print_summary(&report);
        Ok(())
    }
}

fn banner(srv: &EchoServer, a: &Args) {
    let prog = srv.program_len().map(|n| format!(" (BPF program: {n} instructions)")).unwrap_or_default();
    eprintln!(
        "udp-echo: {} on {}, steer {}{prog}, hash {} (UDP {}), key {}, {} buckets, {} workers, offload {}, sched {}",
        if a.sink { "sink" } else { "echo" },
        srv.local_addr(),
        srv.steer(),
        srv.hash_type(),
        if srv.hash_type().has_ports() { "4-tuple: addresses and ports" } else { "2-tuple: addresses only" },
        if a.hash.policy.key.key == rsskit_core::RssKey::microsoft() {
            "microsoft".to_string()
        } else {
            a.hash.policy.key.key.to_hex()
        },
        srv.policy().buckets(),
        srv.workers().len(),
        srv.offload().describe(),
        srv.sched(),
    );
    for w in srv.workers() {
        let buckets: Vec<String> = w.buckets.iter().map(|b| b.to_string()).collect();
        let extra = if w.extra_cpus.is_empty() {
            String::new()
        } else {
            format!(
                "  (also reads CPUs {} that have no worker)",
                rsskit_linux::cpulist::format(&w.extra_cpus.iter().map(|c| c.as_usize()).collect::<Vec<_>>())
            )
        };
        eprintln!("  worker {:>2}  cpu {:>3}  buckets {}{extra}", w.worker, w.cpu.0, buckets.join(","));
    }
    eprintln!("  {}", rcvbuf_line(&srv.rcvbuf()));
    eprintln!("ready");
}

/// The read end of a socket pair that SIGINT and SIGTERM write to, so that
/// the main loop sleeps until its next event instead of waking every 50 ms
/// to look at the stop flag: those wake-ups were ~90 ns of server CPU per
/// echoed datagram at 20,000 datagrams/s (schedstat of the main thread,
/// issue 24), a tenth of the whole cost of a GSO/GRO echo.
fn stop_waker() -> Result<UnixStream> {
    let (rx, tx) = UnixStream::pair().context("creating the signal wake-up socket pair")?;
    rx.set_nonblocking(true).context("signal wake-up socket")?;
    for sig in [libc::SIGINT, libc::SIGTERM] {
        let tx = tx.try_clone().context("signal wake-up socket")?;
        signal_hook::low_level::pipe::register(sig, tx).context("installing a signal handler")?;
    }
    Ok(rx)
}

fn rate_line(srv: &EchoServer, last: &[Counters], cur: &[Counters], dt: Duration) -> String {
    let secs = dt.as_secs_f64().max(1e-9);
    let mut total = 0u64;
    let mut parts = Vec::new();
    for (w, (a, b)) in last.iter().zip(cur).enumerate() {
        let d = b.delta(a);
        total += d.received;
        parts.push(format!("w{w}/cpu{} {:.0}", srv.workers()[w].cpu.0, d.received as f64 / secs));
    }
    let mis: u64 = cur.iter().map(|c| c.misdirected).sum();
    format!(
        "{:>6.1}s  {:>9.0} pps  [{}]  misdirected {mis}",
        srv.elapsed().as_secs_f64(),
        total as f64 / secs,
        parts.join("  ")
    )
}

/// `SO_RCVBUF asked 4194304, granted 8388608 ...` (and why, when capped).
fn rcvbuf_line(r: &RcvBuf) -> String {
    let Some(asked) = r.requested else {
        return format!("SO_RCVBUF: the kernel default, {} bytes per socket", r.granted);
    };
    let capped = if r.capped() { " (capped by net.core.rmem_max)" } else { "" };
    format!(
        "SO_RCVBUF: asked {asked} bytes, granted {} bytes per socket{capped} (getsockopt: the kernel doubles the \
         request for its bookkeeping)",
        r.granted
    )
}

fn print_summary(r: &EchoReport) {
    println!(
        "udp-echo {} on {}: {:.1}s, hash {}, sched {}",
        r.steer,
        r.local,
        r.duration.as_secs_f64(),
        r.hash_type,
        r.sched
    );
    println!(
        "{:>6} {:>4} {:>12} {:>12} {:>12} {:>9} {:>11} {:>8} {:>8}  flushes count/bytes/idle",
        "worker", "cpu", "received", "sent", "bytes", "batches", "misdirected", "dropped", "foreign"
    );
    let row = |name: &str, cpu: &str, c: &Counters| {
        println!(
            "{name:>6} {cpu:>4} {:>12} {:>12} {:>12} {:>9} {:>11} {:>8} {:>8}  {}/{}/{}",
            c.received,
            c.sent,
            c.bytes,
            c.batches,
            c.misdirected,
            c.dropped,
            c.foreign,
            c.flushes.count,
            c.flushes.bytes,
            c.flushes.idle
        )
    };
    for (w, c) in &r.workers {
        row(&w.worker.to_string(), &w.cpu.0.to_string(), c);
    }
    row("total", "", &r.totals());
    match &r.kernel {
        Some(k) => println!(
            "kernel UDP{}: InDatagrams {} NoPorts {} InErrors {} OutDatagrams {} RcvbufErrors {} SndbufErrors {} \
             InCsumErrors {}",
            if r.local.is_ipv6() { "6" } else { "" },
            k.in_datagrams,
            k.no_ports,
            k.in_errors,
            k.out_datagrams,
            k.rcvbuf_errors,
            k.sndbuf_errors,
            k.in_csum_errors
        ),
        None => println!("kernel UDP counters: unavailable"),
    }
    if let Some(s) = &r.socket_drops {
        println!("kernel, our {} sockets: drops {} queued bytes {}", s.sockets, s.drops, s.rx_queue);
    }
    println!("{}", rcvbuf_line(&r.rcvbuf));
    println!(
        "offload {}: {} of {} datagrams arrived coalesced",
        r.offload.describe(),
        r.totals().coalesced,
        r.totals().received
    );
    if let Some(why) = &r.fallback {
        println!("{why}");
    }
    if let Some(e) = &r.ebpf {
        println!("{}", crate::cmd::common::ebpf_line(e, r.rebalance.iter().map(|x| x.moves.len()).sum()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bind_addresses() {
        assert_eq!(parse_bind("127.0.0.1:9").unwrap().port(), 9);
        assert!(parse_bind("[::1]:0").unwrap().is_ipv6());
        for bad in ["127.0.0.1", "1.2.3:80", "::1:80", "127.0.0.1:70000", ""] {
            let e = parse_bind(bad).unwrap_err().to_string();
            assert!(e.contains("--bind"), "{e}");
        }
    }
}
