//! `rsskit firewall`: the per-CPU stateful firewall of
//! `rsskit_dataplane::firewall` on captured or live traffic.
//!
//! Frames are steered to workers by the RSS hash of their outer header
//! (symmetric key by default, so both directions of a flow meet their
//! state), filtered, and written out. The command maps its arguments to a
//! `firewall::FirewallSpec`, which opens the data plane's pcap, AF_PACKET
//! and AF_XDP I/O and runs the engine (AF_XDP: netisr engine only). With AF_PACKET on both sides the
//! command bridges the two interfaces: a frame received on the `--in`
//! interface is filtered as `in` and sent on the `--out` interface, and the
//! other way round as `out`. From a capture, a frame whose source is one of
//! `--me` is `out`, any other `in`; capture timestamps drive the state clock.
//!
//! The default engine, `netisr`, runs the firewall workers as protocol
//! handlers of the data plane's netisr dispatch (`firewall::netisr_handler`):
//! software RSS to per-worker SPSC rings, fragments reassembled before the
//! rules see them (tunnels are not decapsulated: the rules filter the outer
//! header, like ipfw), non-IP frames (ARP) pass, a `redirect` hands the
//! rewritten frame to the worker of the translated flow as a netisr message
//! (FIFO per sender over the worker-to-worker rings, with the
//! slave-deletion messages), send aggregation on output. `--engine own`
//! selects the firewall's own threaded driver (`firewall::run`: a
//! dispatcher thread and channels), the same rules and counters.
//!
//! A capture replay keeps the capture's causal order across workers by
//! default (`--order causal`, `firewall::order`): a frame that may touch
//! another worker's state (a redirected flow, a `limit` track) waits at an
//! epoch barrier until every earlier frame is done and every worker's
//! clock reached its time; the other frames never wait. The per-rule
//! counters then equal the single-threaded simulation's for any worker
//! count and either engine. `--order none` dispatches as frames come (the
//! only mode for live input).

use crate::cmd::common::{int_in, print_json, seconds_arg, stop_on_signals};
use crate::cmd::common::{KeyCheck, PolicyArgs, Workers};
use crate::cmd::dataplane::io_args::{self, input_errors, InSpec, OutSpec};
use anyhow::{bail, Context, Result};
use rsskit_core::HashConfig;
use rsskit_dataplane::firewall::order::Order;
use rsskit_dataplane::firewall::{self, Config, Engine, Firewall, FirewallOutcome, FirewallSpec, Snapshot};
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

fn parse_in(s: &str) -> Result<InSpec, String> {
    io_args::parse_in(s, io_args::InKinds { pcapng: false, gen: false })
}

fn parse_out(s: &str) -> Result<OutSpec, String> {
    io_args::parse_out(s, io_args::OutKinds { pcapng: false })
}

fn workers_arg(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if (1..=64).contains(&n) => Ok(n),
        _ => Err(format!("'{s}' is not a worker count 1..=64")),
    }
}

#[derive(clap::Args, Debug)]
#[command(after_help = "Rules (one per line, '#' comments): check-state | [NUM] allow|deny PROTO from SRC \
[[port] PORTS] to DST [[port] PORTS] [in|out] [setup] [keep-state] [limit src-addr|dst-addr|src-port|dst-port... N] \
| [NUM] redirect tcp|udp ADDR:PORT -> NEWADDR:NEWPORT | default allow|deny. Example (DragonFly's): \
'check-state' and 'allow tcp from any to me 80 setup keep-state', default deny. A status line per second \
goes to stderr; the final per-rule counters and per-worker states to stdout.")]
#[command(mut_args(PolicyArgs::key(|a| {
    a.help("RSS key steering flows to workers: symmetric (default), microsoft, random or hex")
        .default_value("symmetric")
        .hide_default_value(true)
})))]
pub struct Args {
    /// Rule file (at most 65536 rules, 64 MiB).
    #[arg(long)]
    pub rules: PathBuf,
    /// Input: pcap:FILE | afpacket:IFNAME | xdp:IFNAME[:QUEUES] (AF_XDP, --engine netisr).
    #[arg(long = "in", value_parser = parse_in)]
    pub input: InSpec,
    /// Output of passed frames: pcap:FILE | afpacket:IFNAME | xdp:IFNAME (--engine netisr) | null.
    #[arg(long = "out", value_parser = parse_out, default_value = "null")]
    pub output: OutSpec,
    /// Worker threads, 1-64 (each with its own state table).
    #[arg(long, default_value_t = 1, value_parser = workers_arg)]
    pub workers: usize,
    /// Most states over all workers (loose global counter, <= 5% over); 0 = no limit,
    /// else at most 4294967296.
    #[arg(long, default_value_t = 100_000, value_parser = int_in(0u64, 1 << 32))]
    pub states_max: u64,
    /// One global state table behind a read-write lock (the baseline).
    #[arg(long)]
    pub locked: bool,
    /// Addresses 'me' stands for, comma-separated (or repeated).
    #[arg(long, value_delimiter = ',')]
    pub me: Vec<IpAddr>,
    #[command(flatten)]
    pub policy: PolicyArgs,
    /// Stop a live run after this many seconds, above 0 and below 10^7
    /// (default: until SIGINT/SIGTERM).
    #[arg(long, value_parser = seconds_arg)]
    pub duration: Option<f64>,
    /// Frames per batch handed to a worker (1-4096).
    #[arg(long, default_value_t = 32, value_parser = int_in(1usize, 4096))]
    pub batch: usize,
    /// No per-second status lines.
    #[arg(long)]
    pub quiet: bool,
    /// Print the summary as one JSON object.
    #[arg(long)]
    pub json: bool,
    /// Dispatch engine: `netisr` (the data plane's netisr dispatch with
    /// reassembly and send aggregation; the default) or `own` (the
    /// firewall's own threaded driver).
    #[arg(long, value_enum, default_value_t = EngineArg::Netisr)]
    pub engine: EngineArg,
    /// Capture input: a corrupt record ends the input quietly (exit 0)
    /// instead of with an error naming the record.
    #[arg(long)]
    pub stop_at_bad_record: bool,
    /// Cross-worker order of a capture replay: `causal` (default for
    /// pcap input) holds a frame that may touch another worker's state (a
    /// redirected flow, a `limit` track) until every earlier frame is done
    /// and every worker's clock reached its capture time; other frames
    /// never wait. `none` dispatches as frames come (live input: always).
    #[arg(long, value_enum)]
    pub order: Option<OrderArg>,
}

/// `--order`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OrderArg {
    Causal,
    None,
}

impl Args {
    /// The replay order: causal by default for a capture, none live.
    fn order(&self) -> Result<Order> {
        match (self.order, &self.input) {
            (Some(OrderArg::Causal), i) if !i.is_capture() => {
                bail!("--order causal needs a capture input (pcap:FILE): live traffic has no recorded order")
            }
            (Some(OrderArg::None), _) => Ok(Order::None),
            (None, i) if !i.is_capture() => Ok(Order::None),
            (Some(OrderArg::Causal), _) | (None, _) => Ok(Order::Causal),
        }
    }
}

/// `--engine`: which dispatcher runs the workers ([`Engine`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum EngineArg {
    Own,
    Netisr,
}

impl From<EngineArg> for Engine {
    fn from(e: EngineArg) -> Engine {
        match e {
            EngineArg::Own => Engine::Own,
            EngineArg::Netisr => Engine::Netisr,
        }
    }
}

fn status_line(s: &Snapshot, t: f64) -> String {
    let states: Vec<String> = s.workers.iter().map(|w| w.states.to_string()).collect();
    format!(
        "t={t:.0}s packets={} pass={} drop={} states=[{}] total={} gc={} expired={} limit_hits={} track_hits={} forwarded={}",
        s.total.packets,
        s.total.passed,
        s.total.dropped,
        states.join(" "),
        s.states,
        s.total.gc_runs,
        s.total.expired,
        s.total.limit_hits,
        s.total.track_hits,
        s.total.forwarded,
    )
}

/// Largest rule file read (65536 rules of a long line each fit).
const MAX_RULE_FILE: u64 = 64 << 20;

/// The rule file, read at most [`MAX_RULE_FILE`] bytes (a FIFO or a huge
/// file cannot make the read unbounded).
fn read_rules(path: &std::path::Path) -> Result<Vec<u8>> {
    use std::io::Read;
    // Bytes: the parser names a non-UTF-8 byte by line and column.
    let mut text = Vec::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX_RULE_FILE + 1).read_to_end(&mut text))
        .with_context(|| format!("cannot read rule file {}", path.display()))?;
    if text.len() as u64 > MAX_RULE_FILE {
        bail!("rule file {} is larger than {} MiB", path.display(), MAX_RULE_FILE >> 20);
    }
    Ok(text)
}

pub fn run(a: Args, allow_weak_key: bool) -> Result<()> {
    let text = read_rules(&a.rules)?;
    let opts = firewall::rules::ParseOptions { me_defined: !a.me.is_empty() };
    let rules =
        firewall::rules::parse_bytes(&text, opts).with_context(|| format!("{}", a.rules.display()))?;
    if a.batch == 0 || a.batch > 4096 {
        bail!("--batch must be 1..=4096");
    }
    let order = a.order()?;
    let xdp = matches!(a.input, InSpec::Xdp(..)) || matches!(a.output, OutSpec::Xdp(..));
    if xdp && a.engine == EngineArg::Own {
        bail!("xdp: input and output need --engine netisr (the default)");
    }
    // The one policy of the run: the firewall steers and redirects with it
    // and the netisr engine dispatches with it.
    let workers = Workers::Count(a.workers);
    let policy =
        a.policy.build(HashConfig::default(), workers, None, None, KeyCheck::Policy, allow_weak_key)?;
    let cfg = Config {
        policy: Arc::new(policy),
        states_max: a.states_max,
        locked: a.locked,
        me: a.me.clone(),
        ..Config::default()
    };
    let interrupted = stop_on_signals()?;
    let fw = Firewall::new(cfg, rules);
    let spec = FirewallSpec {
        input: a.input.clone(),
        output: a.output.clone(),
        engine: a.engine.into(),
        order,
        batch: a.batch,
        stop_at_bad_record: a.stop_at_bad_record,
        duration: a.duration.map(Duration::from_secs_f64),
    };
    let status = |s: &Snapshot, t: Duration| eprintln!("{}", status_line(s, t.as_secs_f64()));
    // The AF_XDP mode (copy / zero-copy), queues and frame size.
    let note = |line: &str| {
        if !a.quiet {
            eprintln!("{line}");
        }
    };
    let o = spec.run_with_notes(&fw, &interrupted, (!a.quiet).then_some(&status as _), &note)?;
    summary(&a, &o, order)?;
    input_errors(&o.input_errors)
}

fn summary(a: &Args, o: &FirewallOutcome, order: Order) -> Result<()> {
    let (s, inputs, elapsed, sent, errors) = (&o.snapshot, o.inputs, o.elapsed, o.sent, o.send_errors);
    let (acct, ostats) = (&o.accounting, o.order);
    if ostats.timeouts > 0 {
        eprintln!(
            "rsskit: warning: {} ordering barrier(s) gave up waiting; the replay order is not guaranteed",
            ostats.timeouts
        );
    }
    if a.json {
        print_json(&serde_json::json!({
            "engine": if a.engine == EngineArg::Netisr { "netisr" } else { "own" },
            "inputs": inputs,
            "elapsed_s": elapsed.as_secs_f64(),
            "workers": a.workers,
            "locked": a.locked,
            "states_max": a.states_max,
            "rules": s.rules,
            "per_worker": s.workers,
            "total": s.total,
            "states": s.states,
            "resyncs": s.resyncs,
            "gc_broadcasts": s.gc_broadcasts,
            "tracks": s.tracks,
            "sent": sent,
            "send_errors": errors,
            "accounting": acct,
            "order": { "mode": order, "barriers": ostats.barriers, "timeouts": ostats.timeouts,
                       "wait_ms": ostats.wait_ns as f64 / 1e6 },
        }))?;
    } else {
        println!("{:>6} {:>12} {:>14}  rule", "number", "packets", "bytes");
        for r in &s.rules {
            println!("{:>6} {:>12} {:>14}  {}", r.number, r.packets, r.bytes, r.text);
        }
        for (i, w) in s.workers.iter().enumerate() {
            println!(
                "worker {i}: packets {} pass {} drop {} states {} installs {} expired {} gc_runs {} limit_hits {} track_hits {} forwarded {} resumed {}",
                w.packets, w.passed, w.dropped, w.states, w.installs, w.expired, w.gc_runs, w.limit_hits, w.track_hits, w.forwarded, w.resumed
            );
        }
        // Before the last line, which scripts read for the states.
        println!("accounting (frames): {}", acct.line());
        println!(
            "order {}: {} barriers ({} timed out), {:.3} ms held",
            if order == Order::Causal { "causal" } else { "none" },
            ostats.barriers,
            ostats.timeouts,
            ostats.wait_ns as f64 / 1e6
        );
        println!(
            "{} frames in {:.3} s; states {} (resyncs {}, gc broadcasts {}); sent {} ({} errors)",
            inputs,
            elapsed.as_secs_f64(),
            s.states,
            s.resyncs,
            s.gc_broadcasts,
            sent,
            errors
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs() {
        assert_eq!(parse_in("pcap:a.pcap"), Ok(InSpec::Pcap("a.pcap".into())));
        assert_eq!(parse_in("afpacket:veth0"), Ok(InSpec::AfPacket("veth0".into())));
        assert!(parse_in("gen").is_err());
        assert_eq!(parse_in("xdp:veth0:1"), Ok(InSpec::Xdp("veth0".into(), Some(vec![1]))));
        assert_eq!(parse_out("xdp:veth0"), Ok(OutSpec::Xdp("veth0".into())));
        assert_eq!(parse_out("null"), Ok(OutSpec::Null));
        assert!(parse_out("pcap:").is_err());
        assert!(workers_arg("0").is_err() && workers_arg("65").is_err());
    }
}
