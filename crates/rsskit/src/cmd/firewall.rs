//! `rsskit firewall`: the per-CPU stateful firewall of
//! `rsskit_dataplane::firewall` on captured or live traffic.
//!
//! Frames are steered to workers by the RSS hash of their outer header
//! (symmetric key by default, so both directions of a flow meet their
//! state), filtered, and written out. Inputs and outputs are the data
//! plane's pcap and AF_PACKET I/O. With AF_PACKET on
//! both sides the command bridges the two interfaces: a frame received on
//! the `--in` interface is filtered as `in` and sent on the `--out`
//! interface, and the other way round as `out`. From a capture, a frame
//! whose source is one of `--me` is `out`, any other `in`; capture
//! timestamps drive the state clock.
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

use super::common::{int_in, key_arg, print_json, seconds_arg};
use anyhow::{anyhow, bail, Context, Result};
use rsskit_core::RssKey;
use rsskit_dataplane::firewall::netisr_handler::FwHandler;
use rsskit_dataplane::firewall::order::{self, Gate, Order, OrderStats, OrderedSource};
use rsskit_dataplane::firewall::run::{self, direction, Input};
use rsskit_dataplane::firewall::{self, Config, Dir, Firewall, Snapshot};
use rsskit_dataplane::io::afpacket::{AfPacketSink, AfPacketSource, RingConfig};
use rsskit_dataplane::io::afxdp;
use rsskit_dataplane::io::pcap::{PcapSink, PcapSource};
use rsskit_dataplane::io::{Recv, Source};
use rsskit_dataplane::netisr::{Accounting, Netisr, NetisrConfig, FLAG_PORT_B};
use rsskit_dataplane::output::NullSink;
use rsskit_dataplane::output::Sink;
use rsskit_dataplane::pool::Mbuf;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Where frames come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InSpec {
    Pcap(PathBuf),
    AfPacket(String),
    /// AF_XDP on an interface: its queues (default: all).
    Xdp(String, Option<Vec<u32>>),
}

/// Where passed frames go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OutSpec {
    Pcap(PathBuf),
    AfPacket(String),
    Xdp(String),
    Null,
}

fn parse_in(s: &str) -> Result<InSpec, String> {
    match s.split_once(':') {
        Some(("pcap", f)) if !f.is_empty() => Ok(InSpec::Pcap(f.into())),
        Some(("afpacket", i)) if !i.is_empty() => Ok(InSpec::AfPacket(i.into())),
        Some(("xdp", rest)) => afxdp::parse_in_spec(rest).map(|(i, q)| InSpec::Xdp(i, q)),
        _ => Err(format!("'{s}' is not an input: use pcap:FILE, afpacket:IFNAME or xdp:IFNAME[:QUEUES]")),
    }
}

fn parse_out(s: &str) -> Result<OutSpec, String> {
    match s.split_once(':') {
        Some(("pcap", f)) if !f.is_empty() => Ok(OutSpec::Pcap(f.into())),
        Some(("afpacket", i)) if !i.is_empty() => Ok(OutSpec::AfPacket(i.into())),
        Some(("xdp", i)) if !i.is_empty() && !i.contains(':') => Ok(OutSpec::Xdp(i.into())),
        None if s == "null" => Ok(OutSpec::Null),
        _ => Err(format!("'{s}' is not an output: use pcap:FILE, afpacket:IFNAME, xdp:IFNAME or null")),
    }
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
    /// RSS key steering flows to workers: symmetric (default), microsoft, random or hex.
    #[arg(long, value_parser = key_arg)]
    pub key: Option<RssKey>,
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
    #[arg(long, value_enum, default_value_t = Engine::Netisr)]
    pub engine: Engine,
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
            (Some(OrderArg::Causal), InSpec::AfPacket(_) | InSpec::Xdp(..)) => {
                bail!("--order causal needs a capture input (pcap:FILE): live traffic has no recorded order")
            }
            (Some(OrderArg::None), _) | (None, InSpec::AfPacket(_) | InSpec::Xdp(..)) => Ok(Order::None),
            (Some(OrderArg::Causal), InSpec::Pcap(_)) | (None, InSpec::Pcap(_)) => Ok(Order::Causal),
        }
    }
}

/// Which dispatcher runs the workers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Engine {
    Own,
    Netisr,
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

/// Output side: one sink, or two for a bridge (by direction).
struct Out {
    to_out: Option<Box<dyn Sink>>,
    to_in: Option<Box<dyn Sink>>,
    pcap: Option<PcapSink>,
    sent: u64,
    errors: u64,
}

impl Out {
    fn send(&mut self, frame: Vec<u8>, dir: Dir) {
        let sink = match dir {
            Dir::In => self.to_out.as_mut(),
            Dir::Out => self.to_in.as_mut().or(self.to_out.as_mut()),
        };
        match sink {
            Some(s) => {
                let m = [Mbuf::heap(frame, 0, 0, 0)];
                match s.send(&m) {
                    Ok(1) => self.sent += 1,
                    _ => self.errors += 1,
                }
            }
            // `--out null`: passed is out.
            None => self.sent += 1,
        }
    }
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

pub fn run(a: Args) -> Result<()> {
    let text = read_rules(&a.rules)?;
    let opts = firewall::rules::ParseOptions { me_defined: !a.me.is_empty() };
    let rules =
        firewall::rules::parse_bytes(&text, opts).with_context(|| format!("{}", a.rules.display()))?;
    if a.batch == 0 || a.batch > 4096 {
        bail!("--batch must be 1..=4096");
    }
    let order = a.order()?;
    let cfg = Config {
        workers: a.workers,
        states_max: a.states_max,
        key: a.key.clone().unwrap_or_else(RssKey::symmetric),
        locked: a.locked,
        me: a.me.clone(),
        ..Config::default()
    };
    let pc = cfg.parse;
    let me = cfg.me.clone();
    // Open everything before starting so bad names fail first.
    let mut out = Out { to_out: None, to_in: None, pcap: None, sent: 0, errors: 0 };
    match &a.output {
        OutSpec::Null => {}
        OutSpec::Pcap(p) => {
            let s = PcapSink::create(p)?;
            out.to_out = Some(Box::new(s.clone()));
            out.pcap = Some(s);
        }
        OutSpec::AfPacket(i) => {
            out.to_out =
                Some(Box::new(AfPacketSink::open(i).with_context(|| format!("output afpacket:{i}"))?));
        }
        // Opened by the netisr engine, one socket per TX queue.
        OutSpec::Xdp(_) => {}
    }
    if a.engine != Engine::Netisr
        && (matches!(a.input, InSpec::Xdp(..)) || matches!(a.output, OutSpec::Xdp(_)))
    {
        bail!("xdp: input and output need --engine netisr (the default)");
    }
    let interrupted = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, interrupted.clone()).context("installing the signal handler")?;
    }
    let fw = Firewall::new(cfg, rules);
    if a.engine == Engine::Netisr {
        return run_netisr(&a, &fw, out, &interrupted, order);
    }
    let start = Instant::now();
    let done = Arc::new(AtomicBool::new(false));
    // Status thread: one line per second.
    let status = (!a.quiet).then(|| {
        let fw = fw.clone();
        let done = done.clone();
        std::thread::spawn(move || {
            let mut next = Instant::now() + Duration::from_secs(1);
            while !done.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(50));
                if Instant::now() >= next {
                    next += Duration::from_secs(1);
                    eprintln!("{}", status_line(&fw.snapshot(), start.elapsed().as_secs_f64()));
                }
            }
        })
    });
    // What the capture source could not deliver, and why it ended early.
    let src_drops = Arc::new(AtomicU64::new(0));
    let src_failure: Arc<Mutex<Option<String>>> = Arc::default();
    let report = match &a.input {
        InSpec::Pcap(p) => {
            if !p.exists() {
                bail!("input capture {} does not exist", p.display());
            }
            let mut src = PcapSource::open(p, 1, false)?;
            if a.stop_at_bad_record {
                src = src.lenient();
            }
            let intr = interrupted.clone();
            let (drops, failure) = (src_drops.clone(), src_failure.clone());
            let inputs = std::iter::from_fn(move || loop {
                if intr.load(Ordering::Relaxed) {
                    return None;
                }
                match src.recv() {
                    Recv::Frame { data, ts_ns } => {
                        let ts_ms =
                            if ts_ns == 0 { start.elapsed().as_millis() as u64 } else { ts_ns / 1_000_000 };
                        let dir = direction(data, &me, &pc);
                        return Some(Input { frame: data.to_vec(), dir, ts_ms });
                    }
                    Recv::Idle => std::thread::sleep(Duration::from_micros(100)),
                    Recv::Done => {
                        drops.store(src.drops(), Ordering::Relaxed);
                        if let Some(e) = src.failure() {
                            *failure.lock().unwrap_or_else(|e| e.into_inner()) = Some(e);
                        }
                        return None;
                    }
                }
            });
            run::run(&fw, inputs, a.batch, None, order, |f, d| out.send(f, d), None, |_| {})
        }
        InSpec::AfPacket(ifname) => {
            let mut sources: Vec<(Box<dyn Source>, Dir)> = vec![(
                Box::new(
                    AfPacketSource::open(ifname, RingConfig::default(), None)
                        .with_context(|| format!("input afpacket:{ifname}"))?,
                ),
                Dir::In,
            )];
            if let OutSpec::AfPacket(other) = &a.output {
                // Bridge: the other side's frames are 'out' and go back to the input interface.
                sources.push((
                    Box::new(
                        AfPacketSource::open(other, RingConfig::default(), None)
                            .with_context(|| format!("input afpacket:{other}"))?,
                    ),
                    Dir::Out,
                ));
                out.to_in = Some(Box::new(
                    AfPacketSink::open(ifname).with_context(|| format!("output afpacket:{ifname}"))?,
                ));
            }
            let intr = interrupted.clone();
            let deadline = a.duration.map(|d| start + Duration::from_secs_f64(d));
            let mut turn = 0usize;
            let drops = src_drops.clone();
            let inputs = std::iter::from_fn(move || {
                let mut idle = 0usize;
                loop {
                    if intr.load(Ordering::Relaxed) || deadline.is_some_and(|d| Instant::now() >= d) {
                        // The kernel's ring drops, for the accounting.
                        drops.store(sources.iter().map(|(s, _)| s.drops()).sum(), Ordering::Relaxed);
                        return None;
                    }
                    let k = sources.len();
                    let (s, dir) = &mut sources[turn % k];
                    let dir = *dir;
                    turn = turn.wrapping_add(1);
                    match s.recv() {
                        Recv::Frame { data, .. } => {
                            return Some(Input {
                                frame: data.to_vec(),
                                dir,
                                ts_ms: start.elapsed().as_millis() as u64,
                            });
                        }
                        Recv::Idle | Recv::Done => {
                            idle += 1;
                            if idle >= k {
                                idle = 0;
                                std::thread::sleep(Duration::from_micros(200));
                            }
                        }
                    }
                }
            });
            // Live: small batches so a lone packet is not held back.
            run::run(&fw, inputs, 1, Some(start), Order::None, |f, d| out.send(f, d), None, |_| {})
        }
        InSpec::Xdp(..) => bail!("xdp: input needs --engine netisr (the default)"),
    };
    done.store(true, Ordering::Relaxed);
    if let Some(h) = status {
        let _ = h.join();
    }
    if let Some(p) = out.pcap.take() {
        drop(out.to_out.take());
        p.close()?;
    }
    // Every input frame passed (sent or a send error) or dropped by the
    // firewall; a redirected frame is resumed by its new worker and
    // counted there.
    let t = &report.snapshot.total;
    let source = src_drops.load(Ordering::Relaxed);
    let mut acct = Accounting { input: report.inputs + source, out: out.sent, ..Default::default() };
    acct.add_drop("source", source);
    acct.add_drop("firewall_unparsable", t.parse_drops);
    acct.add_drop("firewall_deny", t.dropped.saturating_sub(t.parse_drops));
    acct.add_drop("output_error", out.errors);
    let failure = src_failure.lock().unwrap_or_else(|e| e.into_inner()).take();
    let failures: Vec<String> = failure.into_iter().collect();
    summary(
        &a,
        &report.snapshot,
        report.inputs,
        report.elapsed,
        out.sent,
        out.errors,
        &acct,
        (order, report.order),
    )?;
    super::pipeline::input_errors(&failures)
}

#[allow(clippy::too_many_arguments)]
fn summary(
    a: &Args,
    s: &Snapshot,
    inputs: u64,
    elapsed: Duration,
    sent: u64,
    errors: u64,
    acct: &Accounting,
    (order, ostats): (Order, OrderStats),
) -> Result<()> {
    if ostats.timeouts > 0 {
        eprintln!(
            "rsskit: warning: {} ordering barrier(s) gave up waiting; the replay order is not guaranteed",
            ostats.timeouts
        );
    }
    if a.json {
        print_json(&serde_json::json!({
            "engine": if a.engine == Engine::Netisr { "netisr" } else { "own" },
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

/// The two sides of a bridge: frames read on the `--out` interface (port B)
/// go back out on the `--in` one, all others on `--out`.
struct BridgeSink {
    to_out: AfPacketSink,
    to_in: AfPacketSink,
}

impl Sink for BridgeSink {
    fn send(&mut self, frames: &[Mbuf]) -> std::io::Result<usize> {
        let port_b = |m: &Mbuf| m.flags & FLAG_PORT_B != 0;
        let mut sent = 0;
        let mut rest = frames;
        while let Some(first) = rest.first() {
            let b = port_b(first);
            let k = rest.iter().position(|m| port_b(m) != b).unwrap_or(rest.len());
            let (run, tail) = rest.split_at(k);
            sent += if b { self.to_in.send(run)? } else { self.to_out.send(run)? };
            rest = tail;
        }
        Ok(sent)
    }

    fn finish(&mut self) -> std::io::Result<()> {
        self.to_out.finish()?;
        self.to_in.finish()
    }
}

/// `--engine netisr`: the firewall workers as netisr protocol handlers.
fn run_netisr(a: &Args, fw: &Arc<Firewall>, out: Out, interrupted: &AtomicBool, order: Order) -> Result<()> {
    let n = a.workers;
    // One worker, or no rule that creates cross-worker state: no frame waits.
    let gate = (order == Order::Causal && order::needed(fw)).then(|| Gate::new(n));
    let bridge = match (&a.input, &a.output) {
        (InSpec::AfPacket(_), OutSpec::AfPacket(o)) => Some(o.clone()),
        _ => None,
    };
    let handlers = (0..n)
        .map(|i| {
            FwHandler::new(fw, i).map(|h| {
                let h = if matches!(a.input, InSpec::AfPacket(_) | InSpec::Xdp(..)) { h.live() } else { h };
                let h = match &gate {
                    Some(g) => h.ordered(g.clone()),
                    None => h,
                };
                if bridge.is_some() {
                    h.bridged()
                } else {
                    h
                }
            })
        })
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| anyhow!(e))?;
    let ncfg = NetisrConfig {
        workers: n,
        batch: a.batch.min(256),
        key: fw.config.key.clone(),
        hash_config: fw.config.hash,
        // The rules see the outer header (as with the own engine).
        decap: false,
        // A capture waits for the workers (nothing lost to a full queue;
        // an ordered replay counts every frame to its completion); live
        // input cannot wait, its full queues drop (counted).
        backpressure: matches!(a.input, InSpec::Pcap(_)) || gate.is_some(),
        ..Default::default()
    };
    let mut inputs: Vec<(usize, u8, Box<dyn Source>)> = Vec::new();
    match &a.input {
        InSpec::Pcap(p) => {
            if !p.exists() {
                bail!("input capture {} does not exist", p.display());
            }
            let src = PcapSource::open(p, 1, false)?;
            let src: Box<dyn Source> = Box::new(if a.stop_at_bad_record { src.lenient() } else { src });
            let src = match &gate {
                Some(g) => Box::new(OrderedSource::new(src, fw, g.clone(), ncfg.parse)),
                None => src,
            };
            inputs.push((0, 0, src));
        }
        InSpec::AfPacket(i) => {
            // A bridge also reads the other interface (its frames are
            // `out`, marked as port B); one fanout group per interface.
            let mut ports = vec![(i.clone(), 0u8, 0u16)];
            if let Some(o) = &bridge {
                ports.push((o.clone(), FLAG_PORT_B, 0x8000));
            }
            for (ifname, flags, salt) in ports {
                let fanout = (n > 1).then(|| (std::process::id() as u16 & 0x7fff) ^ salt);
                for w in 0..n {
                    inputs.push((
                        w,
                        flags,
                        Box::new(
                            AfPacketSource::open(&ifname, RingConfig::default(), fanout)
                                .with_context(|| format!("input afpacket:{ifname}"))?,
                        ),
                    ));
                }
            }
        }
        InSpec::Xdp(i, queues) => {
            let (srcs, setup) = afxdp::open_sources(i, queues.as_deref(), n, 1920)
                .with_context(|| format!("input xdp:{i}"))?;
            if !a.quiet {
                eprintln!("{}", setup.line(i, "input"));
            }
            inputs.extend(srcs.into_iter().map(|(w, s)| (w, 0u8, s)));
        }
    }
    let mut xdp_sinks = match &a.output {
        OutSpec::Xdp(o) => {
            let (s, setup) = afxdp::open_sinks(o, n, 1920).with_context(|| format!("output xdp:{o}"))?;
            if !a.quiet {
                eprintln!("{}", setup.line(o, "output"));
            }
            s
        }
        _ => Vec::new(),
    }
    .into_iter();
    let mut sinks: Vec<Box<dyn Sink>> = Vec::new();
    let pcap = out.pcap.clone();
    for _ in 0..n {
        sinks.push(match (&a.output, &pcap) {
            (OutSpec::Pcap(_), Some(p)) => Box::new(p.clone()),
            (OutSpec::AfPacket(o), _) if bridge.is_some() => {
                let InSpec::AfPacket(i) = &a.input else { unreachable!("a bridge reads an interface") };
                Box::new(BridgeSink {
                    to_out: AfPacketSink::open(o).with_context(|| format!("output afpacket:{o}"))?,
                    to_in: AfPacketSink::open(i).with_context(|| format!("output afpacket:{i}"))?,
                })
            }
            (OutSpec::AfPacket(i), _) => {
                Box::new(AfPacketSink::open(i).with_context(|| format!("output afpacket:{i}"))?)
            }
            (OutSpec::Xdp(_), _) => xdp_sinks.next().expect("one AF_XDP sink per worker"),
            _ => Box::new(NullSink::default()),
        });
    }
    drop(out);
    let netisr = Netisr::start_ports(ncfg, inputs, sinks, handlers)?;
    let quiet = a.quiet;
    let report = netisr.wait(
        a.duration.map(Duration::from_secs_f64),
        Duration::from_secs(1),
        Some(interrupted),
        |_, t| {
            if !quiet {
                eprintln!("{}", status_line(&fw.snapshot(), t.as_secs_f64()));
            }
        },
    )?;
    for h in &report.handlers {
        h.worker().publish();
    }
    if let Some(p) = pcap {
        p.close()?;
    }
    let t = report.total();
    summary(
        a,
        &fw.snapshot(),
        t.counters.input,
        report.elapsed,
        t.counters.output.packets,
        t.counters.output.errors,
        &report.accounting(),
        (order, gate.map(|g| g.stats()).unwrap_or_default()),
    )?;
    super::pipeline::input_errors(&report.input_errors)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs() {
        assert_eq!(parse_in("pcap:a.pcap"), Ok(InSpec::Pcap("a.pcap".into())));
        assert_eq!(parse_in("afpacket:veth0"), Ok(InSpec::AfPacket("veth0".into())));
        assert_eq!(parse_in("xdp:veth0:1"), Ok(InSpec::Xdp("veth0".into(), Some(vec![1]))));
        assert_eq!(parse_out("xdp:veth0"), Ok(OutSpec::Xdp("veth0".into())));
        assert!(parse_in("gen").is_err());
        assert_eq!(parse_out("null"), Ok(OutSpec::Null));
        assert!(parse_out("pcap:").is_err());
        assert!(workers_arg("0").is_err() && workers_arg("65").is_err());
    }
}
