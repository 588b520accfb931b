//! `rsskit pipeline`: the user-space data plane. Frames come from a capture,
//! an AF_PACKET ring, AF_XDP sockets or memory; each is hashed as the NIC would, handed to
//! the worker owning its bucket (netisr dispatch), reassembled / decapsulated
//! and re-injected where needed, counted in a per-worker flow table, and
//! sent on with aggregated flushes.

use crate::cmd::common::{int_in, print_json, seconds_arg, stop_on_signals};
use crate::cmd::common::{KeyCheck, PolicyArgs, Workers};
use crate::cmd::dataplane::io_args::{self, input_errors, InSpec, OutSpec};
use anyhow::{bail, Result};
use rsskit_core::{CpuId, HashConfig};
use rsskit_dataplane::netisr::{drop_reasons, FlowCounter, NetisrConfig, Prefetch, RunReport, WorkerReport};
use rsskit_dataplane::output::FlushPolicy;
use rsskit_dataplane::pipeline::{GenSpec, PipelineSpec};
use rsskit_dataplane::reass::{ReassConfig, NS};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;

fn parse_in(s: &str) -> Result<InSpec, String> {
    io_args::parse_in(s, io_args::InKinds { pcapng: true, gen: true })
}

fn parse_out(s: &str) -> Result<OutSpec, String> {
    io_args::parse_out(s, io_args::OutKinds { pcapng: true })
}

/// `--cpus 0-3,5`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpuList(pub Vec<usize>);

fn parse_cpus(s: &str) -> Result<CpuList, String> {
    rsskit_linux::cpulist::parse(s).map(CpuList).map_err(|e| format!("{e}"))
}

#[derive(clap::Args, Debug)]
#[command(
    after_help = "Inputs: pcap:FILE (pcap or pcapng; Ethernet or raw IP), afpacket:IFNAME (TPACKET_V3 \
ring, one socket per worker in a PACKET_FANOUT group; needs CAP_NET_RAW), xdp:IFNAME[:QUEUES] (AF_XDP: \
an XDP program redirects each RX queue into its own socket, queue i read by worker i mod --workers; QUEUES \
like 0-3 or 0,2, default all; zero-copy where the driver supports it, else copy; needs root and a driver \
with native XDP), gen[:SIZE] (synthetic UDP \
frames of SIZE bytes, default 64, from memory; one input per worker). Outputs: pcap:FILE, \
pcapng:FILE, afpacket:IFNAME, xdp:IFNAME (AF_XDP TX, worker w on TX queue w mod queues), null. A status line per second goes to stderr; the final counters (like netstat -Q) \
to stdout, with the per-frame accounting: in = out + dropped by reason + held at exit. A corrupt capture record \
ends the input with an error naming it (exit 1) unless --stop-at-bad-record."
)]
#[command(mut_args(PolicyArgs::key(|a| a.help("RSS key of the NIC-style hash: default (Microsoft), symmetric, nic:IF, or hex"))))]
pub struct Args {
    /// Input: pcap:FILE | afpacket:IFNAME | xdp:IFNAME[:QUEUES] | gen[:SIZE].
    #[arg(long = "in", value_parser = parse_in)]
    input: InSpec,
    /// Output: pcap:FILE | pcapng:FILE | afpacket:IFNAME | xdp:IFNAME | null.
    #[arg(long = "out", value_parser = parse_out, default_value = "null")]
    output: OutSpec,
    /// Worker threads (1-64).
    #[arg(long, default_value_t = 1, value_parser = int_in(1u32, 64))]
    workers: u32,
    /// Pin worker i to the i-th CPU of this list (e.g. 0-3 or 0,2).
    #[arg(long, value_parser = parse_cpus)]
    cpus: Option<CpuList>,
    /// Packets per batch (1-256).
    #[arg(long, default_value_t = 32, value_parser = int_in(1u32, 256))]
    batch: u32,
    /// Prefetch: none, header, bucket or both.
    #[arg(long, default_value = "none")]
    prefetch: Prefetch,
    /// Packet buffer stride in bytes, 128-65536 (1920 avoids 2048-byte cache aliasing).
    #[arg(long, default_value_t = 1920, value_parser = int_in(128u32, 65536))]
    stride: u32,
    /// Slots in each worker-to-worker queue, 2-1048576 (netisr queue limit).
    #[arg(long, default_value_t = 1024, value_parser = int_in(2u32, 1 << 20))]
    queue: u32,
    /// Fragment reassembly timeout in seconds, above 0 and below 10^7 (IPv4
    /// and IPv6; default 30 and 60).
    #[arg(long, value_parser = seconds_arg)]
    frag_timeout: Option<f64>,
    /// Flush output after this many packets, 1-1024 (1 = no aggregation).
    #[arg(long, default_value_t = 16, value_parser = int_in(1u32, 1024))]
    flush_packets: u32,
    /// Flush output after this many bytes (1-4294967295).
    #[arg(long, default_value_t = 1500, value_parser = int_in(1u32, u32::MAX))]
    flush_bytes: u32,
    /// When a queue to another worker is full, hold the packet and pause the
    /// input (a NIC sending pause frames) instead of dropping it (QDrops).
    /// The default for capture input (nothing is lost); see --drop-when-full.
    #[arg(long)]
    backpressure: bool,
    /// Capture input: drop a packet whose queue is full (counted as
    /// queue_full) instead of pausing the input.
    #[arg(long, conflicts_with = "backpressure")]
    drop_when_full: bool,
    /// Capture input: a corrupt record ends the input quietly (exit 0)
    /// instead of with an error naming the record.
    #[arg(long)]
    stop_at_bad_record: bool,
    /// Hash UDP on the 4-tuple (FreeBSD's default is addresses only).
    #[arg(long)]
    udp_4tuple: bool,
    /// Play a capture this many times (1-18446744073709551615).
    #[arg(long = "loop", default_value_t = 1, value_parser = int_in(1u64, u64::MAX))]
    loops: u64,
    /// Replay a capture with its timing (default: as fast as possible).
    #[arg(long)]
    timing: bool,
    /// Stop after this many seconds (above 0, below 10^7).
    #[arg(long, value_parser = seconds_arg)]
    duration: Option<f64>,
    /// gen: frames per worker, 1-18446744073709551615 (with --gen-frag: rounded up to whole datagrams).
    #[arg(long, default_value_t = 10_000_000, value_parser = int_in(1u64, u64::MAX))]
    packets: u64,
    /// gen: distinct flows (1-16777216).
    #[arg(long, default_value_t = 4096, value_parser = int_in(1u32, 1 << 24))]
    flows: u32,
    /// gen: each worker's generator makes only flows that worker owns (as
    /// if a NIC had already steered them: all direct dispatch). Default:
    /// random flows, so with N workers (N-1)/N of them are queued to
    /// another worker (software steering, like RPS).
    #[arg(long)]
    gen_owned: bool,
    /// gen: send UDP datagrams of this many IP bytes cut into fragments of
    /// at most 1500 bytes, 1501-65535 (the reassembly benchmark: 9000 gives 7 fragments).
    #[arg(long, value_parser = int_in(1501u32, 65535))]
    gen_frag: Option<u32>,
    /// Print the summary as one JSON object.
    #[arg(long)]
    json: bool,
    /// No status lines.
    #[arg(long)]
    quiet: bool,
    #[command(flatten)]
    policy: PolicyArgs,
    /// Buckets follow a NIC's table: nic:IF (each entry owned by the worker
    /// pinned to its queue's IRQ CPU; needs --cpus); use with --key nic:IF.
    #[arg(long, value_name = "nic:IF", value_parser = crate::cmd::common::table_arg)]
    table: Option<crate::cmd::common::BucketCpus>,
    /// Write packets/s handled per worker over time as an SVG chart at the end.
    #[arg(long, value_name = "FILE.svg", value_parser = crate::plot::path_arg)]
    plot: Option<std::path::PathBuf>,
}

pub fn run(a: Args, allow_weak_key: bool) -> Result<()> {
    let n = a.workers as usize;
    let cpus: Option<Vec<CpuId>> = match &a.cpus {
        Some(c) => {
            if c.0.len() < n {
                bail!("--cpus lists {} CPUs but --workers is {n}", c.0.len());
            }
            let online = rsskit_linux::cpulist::online();
            if let Some(bad) = c.0.iter().take(n).find(|c| !online.contains(c)) {
                bail!("CPU {bad} is not online (online: {})", rsskit_linux::cpulist::format(&online));
            }
            Some(c.0[..n].iter().map(|&c| CpuId(c as u32)).collect())
        }
        None => None,
    };
    // The one policy of the run: workers, their CPUs (pinned when listed),
    // key, hash types and the bucket table.
    let hash = HashConfig::default().with_udp_4tuple(a.udp_4tuple);
    let workers = cpus.as_deref().map_or(Workers::Count(n), Workers::On);
    let policy = a.policy.build(hash, workers, None, a.table.as_ref(), KeyCheck::Policy, allow_weak_key)?;
    let mut reass = ReassConfig::default();
    if let Some(t) = a.frag_timeout {
        let ns = (t * NS as f64) as u64;
        reass.timeout_v4_ns = ns;
        reass.timeout_v6_ns = ns;
    }
    let cfg = NetisrConfig {
        policy: Arc::new(policy),
        pin: cpus.is_some(),
        batch: a.batch as usize,
        prefetch: a.prefetch,
        ring_capacity: a.queue as usize,
        stride: a.stride as usize,
        reass: Some(reass),
        flush: FlushPolicy {
            max_packets: a.flush_packets as usize,
            max_bytes: a.flush_bytes as usize,
            on_idle: true,
        },
        // File input loses nothing by default: the file waits for the workers.
        backpressure: a.backpressure || (matches!(a.input, InSpec::Pcap(_)) && !a.drop_when_full),
        ..Default::default()
    };
    let interrupted = stop_on_signals()?;
    let spec = PipelineSpec {
        input: a.input.clone(),
        output: a.output.clone(),
        netisr: cfg,
        loops: a.loops,
        timing: a.timing,
        stop_at_bad_record: a.stop_at_bad_record,
        gen: GenSpec { packets: a.packets, flows: a.flows, owned: a.gen_owned, frag: a.gen_frag },
    };
    let pipeline = spec.start()?;
    let quiet = a.quiet;
    if !quiet {
        // The AF_XDP mode (copy / zero-copy), queues and frame size.
        for line in pipeline.notes() {
            eprintln!("{line}");
        }
    }
    let mut last: Vec<u64> = vec![0; n];
    let mut last_t = Duration::ZERO;
    let mut series = Vec::new();
    let report = pipeline.wait(
        a.duration.map(Duration::from_secs_f64),
        Duration::from_secs(1),
        Some(&interrupted),
        |ws, t| {
            let dt = (t - last_t).as_secs_f64().max(1e-9);
            last_t = t;
            let mut line = format!("[{:>4.0}s]", t.as_secs_f64());
            let mut total = 0.0;
            for w in ws {
                let pps = (w.counters.handled - last[w.worker]) as f64 / dt;
                last[w.worker] = w.counters.handled;
                let name = format!(
                    "worker {}{}",
                    w.worker,
                    w.cpu.map_or(String::new(), |c| format!(" (CPU {})", c.0))
                );
                crate::plot::Series::push(&mut series, &name, t.as_secs_f64(), pps);
                total += pps;
                line.push_str(&format!(
                    " w{}: {:.3} Mpps q {} drops {} |",
                    w.worker,
                    pps / 1e6,
                    w.queue_len,
                    w.total_drops()
                ));
            }
            line.push_str(&format!(" total {:.3} Mpps", total / 1e6));
            if !quiet {
                eprintln!("{line}");
            }
        },
    )?;
    if let Some(p) = &a.plot {
        crate::plot::lines(p, "pipeline: packets handled per worker", "seconds", "packets/s", &series)?;
    }
    if a.json {
        print_json(&summary_json(&report))?;
    } else {
        print_table(&report);
    }
    input_errors(&report.input_errors)
}

/// Packets per CPU-second of the worker thread, in millions.
fn cpu_mpps(handled: u64, cpu_ns: u64) -> f64 {
    if cpu_ns == 0 {
        0.0
    } else {
        handled as f64 / (cpu_ns as f64 / 1e9) / 1e6
    }
}

fn worker_json(w: &WorkerReport) -> Value {
    let c = &w.counters;
    let drops: serde_json::Map<String, Value> =
        drop_reasons(c).into_iter().map(|(k, v)| (k, json!(v))).collect();
    json!({
        "worker": w.worker,
        "cpu": w.cpu,
        "input": c.input,
        "dispatched": c.dispatched,
        "queued": w.queued,
        "queue_drops": w.qdrops,
        "queue_high_water": w.high_water,
        "queue_len": w.queue_len,
        "handled": c.handled,
        "reinjected": c.reinjected,
        "reinjected_direct": c.reinjected_direct,
        "reassembled": c.reassembled,
        "decapsulated": c.decapsulated,
        "forwarded": c.forwarded,
        "pool_stalls": c.pool_stalls,
        "source_drops": w.source_drops,
        "cpu_s": c.cpu_ns as f64 / 1e9,
        "mpps_per_cpu_second": cpu_mpps(c.handled, c.cpu_ns),
        "drops": w.total_drops(),
        "drops_by_reason": drops,
        "output": c.output,
    })
}

fn summary_json(r: &RunReport<FlowCounter>) -> Value {
    let t = r.total();
    let secs = r.elapsed.as_secs_f64().max(1e-9);
    json!({
        "elapsed_s": secs,
        "mpps": t.counters.handled as f64 / secs / 1e6,
        "mpps_per_worker": r.workers.iter().map(|w| w.counters.handled as f64 / secs / 1e6).collect::<Vec<_>>(),
        "mpps_per_cpu_second": r.workers.iter().map(|w| cpu_mpps(w.counters.handled, w.counters.cpu_ns)).collect::<Vec<_>>(),
        "flows": r.handlers.iter().map(|h| h.flows).sum::<usize>(),
        "workers": r.workers.iter().map(worker_json).collect::<Vec<_>>(),
        "total": worker_json(&t),
        "accounting": r.accounting(),
        "input_errors": r.input_errors,
    })
}

fn print_table(r: &RunReport<FlowCounter>) {
    let secs = r.elapsed.as_secs_f64().max(1e-9);
    println!("Workstreams ({:.2} s):", secs);
    println!(
        "{:>4} {:>4} {:>10} {:>10} {:>10} {:>8} {:>6} {:>10} {:>7} {:>7} {:>7} {:>10} {:>8} {:>8} {:>10}",
        "WSID",
        "CPU",
        "Input",
        "Disp'd",
        "Queued",
        "QDrops",
        "WMark",
        "Handled",
        "Reinj",
        "Reass",
        "Decap",
        "Forwarded",
        "Drops",
        "Mpps",
        "Mpps/CPU-s"
    );
    let t = r.total();
    let rows: Vec<(String, &WorkerReport)> = r
        .workers
        .iter()
        .map(|w| (w.worker.to_string(), w))
        .chain(std::iter::once(("all".to_string(), &t)))
        .collect();
    for (name, w) in rows {
        let c = &w.counters;
        println!(
            "{:>4} {:>4} {:>10} {:>10} {:>10} {:>8} {:>6} {:>10} {:>7} {:>7} {:>7} {:>10} {:>8} {:>8.3} {:>10.3}",
            name,
            w.cpu.map(|c| c.0.to_string()).unwrap_or_else(|| "-".into()),
            c.input,
            c.dispatched,
            w.queued,
            w.qdrops,
            w.high_water,
            c.handled,
            c.reinjected,
            c.reassembled,
            c.decapsulated,
            c.forwarded,
            w.total_drops(),
            c.handled as f64 / secs / 1e6,
            // For "all": packets over the summed CPU time = mean per worker.
            cpu_mpps(c.handled, c.cpu_ns)
        );
    }
    for w in &r.workers {
        let d = drop_reasons(&w.counters);
        if !d.is_empty() {
            let s: Vec<String> = d.iter().map(|(k, v)| format!("{k}={v}")).collect();
            println!("drops w{}: {}", w.worker, s.join(" "));
        }
    }
    let o = t.counters.output;
    println!(
        "output: {} packets, {} bytes in {} flushes (16 packets: {}, bytes: {}, idle: {}, final: {}), {} errors",
        o.packets,
        o.bytes,
        o.flushes(),
        o.flush_packets,
        o.flush_bytes,
        o.flush_idle,
        o.flush_final,
        o.errors
    );
    if t.source_drops > 0 {
        println!("source drops (kernel ring, unreadable records): {}", t.source_drops);
    }
    println!("accounting (frames): {}", r.accounting().line());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs() {
        assert_eq!(parse_in("pcap:a.pcap"), Ok(InSpec::Pcap("a.pcap".into())));
        assert_eq!(parse_in("afpacket:eth0"), Ok(InSpec::AfPacket("eth0".into())));
        assert_eq!(parse_in("gen"), Ok(InSpec::Gen(64)));
        assert_eq!(parse_in("gen:128"), Ok(InSpec::Gen(128)));
        assert!(parse_in("gen:10").is_err());
        assert!(parse_in("pcap:").is_err());
        assert!(parse_in("eth0").is_err());
        assert_eq!(parse_out("null"), Ok(OutSpec::Null));
        assert_eq!(parse_out("pcapng:x"), Ok(OutSpec::PcapNg("x".into())));
        assert!(parse_out("nul").is_err());
        assert_eq!(parse_in("xdp:veth0"), Ok(InSpec::Xdp("veth0".into(), None)));
        assert_eq!(parse_in("xdp:veth0:0-2"), Ok(InSpec::Xdp("veth0".into(), Some(vec![0, 1, 2]))));
        assert!(parse_in("xdp:").is_err());
        assert!(parse_in("xdp:veth0:x").is_err());
        assert_eq!(parse_out("xdp:veth1"), Ok(OutSpec::Xdp("veth1".into())));
        assert!(parse_out("xdp:").is_err());
    }
}
