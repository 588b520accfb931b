//! `rsskit top`: per CPU NET_RX softirqs/s and packets/s (processed,
//! dropped, time squeezed, RPS IPIs), per queue IRQs/s and the interface's
//! packets and bytes, and the imbalance (max/mean of packets/s) across CPUs,
//! every --interval seconds.

use crate::plot::{self, Series};
use anyhow::{anyhow, bail, Context, Result};
use rsskit_host::softnet::{self, Rates};
use rsskit_linux::netdev;
use serde_json::json;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

const AFTER_HELP: &str = "\
Counters: /proc/softirqs (NET_RX), /proc/net/softnet_stat (processed, dropped, time_squeeze, \
received_rps = RPS IPIs), /proc/interrupts (the interface's IRQs), /sys/class/net/IF/statistics, and \
per RX queue packets/bytes from the driver's statistics (ethtool -S) where it names them. \
The per-CPU counters are host-wide (every namespace); the interface's are its own. Imbalance is the \
busiest CPU's packets/s over the mean of the CPUs shown (1.00 = even, 0 = no packets).

Output: text lines per sample (a full-screen table when stdout is a terminal, unless --lines), or one \
JSON object per line with --json. SIGINT/SIGTERM stop cleanly (the --plot file is still written).

Example:
  rsskit top --iface eth0 --interval 1 --count 10 --plot top.svg";

#[derive(clap::Args, Debug)]
#[command(after_help = AFTER_HELP)]
pub struct Args {
    /// Also show this interface's packets/bytes and its queue IRQs/s.
    #[arg(long, value_name = "IF")]
    pub iface: Option<String>,
    /// Seconds between samples (above 0, below 10^7).
    #[arg(long, value_name = "S", default_value_t = 1.0, value_parser = crate::cmd::common::seconds_arg)]
    pub interval: f64,
    /// Stop after N samples, 1-1073741824 (default: until SIGINT/SIGTERM).
    #[arg(long, value_name = "N", value_parser = crate::cmd::common::int_in(1usize, 1 << 30))]
    pub count: Option<usize>,
    /// Stop after this many seconds, above 0 and below 10^7 (default: until SIGINT/SIGTERM).
    #[arg(long, value_name = "S", value_parser = crate::cmd::common::seconds_arg)]
    pub duration: Option<f64>,
    /// Only these CPUs (a list such as 0-3,8), default every CPU in the counters.
    #[arg(long, value_name = "LIST")]
    pub cpus: Option<String>,
    /// One JSON object per sample, one per line.
    #[arg(long)]
    pub json: bool,
    /// Plain text lines even on a terminal (no full-screen redraw).
    #[arg(long)]
    pub lines: bool,
    /// Write packets/s per CPU over time as an SVG chart at the end.
    #[arg(long, value_name = "FILE.svg", value_parser = crate::plot::path_arg)]
    pub plot: Option<PathBuf>,
    /// Read a tree shaped like /sys and /proc under DIR instead (tests).
    #[arg(long, value_name = "DIR", hide = true)]
    pub sysroot: Option<PathBuf>,
}

pub fn run(a: Args) -> Result<()> {
    let interval = crate::cmd::common::seconds("--interval", a.interval)?;
    let root = crate::cmd::host::sysroot(a.sysroot.as_ref())?;
    let roots = root.roots.clone();
    let cpus = match &a.cpus {
        Some(s) => rsskit_linux::cpulist::parse(s).map_err(|e| anyhow!("--cpus: {e}"))?,
        None => Vec::new(),
    };
    let irqs = match &a.iface {
        Some(name) => {
            if !root.exists(name) {
                bail!("--iface: interface '{name}' does not exist");
            }
            netdev::iface_irqs(&roots, name, &netdev::interrupts(&roots))
        }
        None => Vec::new(),
    };
    let iface = a.iface.as_deref().map(|n| (n, irqs.as_slice()));
    let stop = crate::cmd::common::stop_on_signals()?;
    let screen = !a.json && !a.lines && std::io::stdout().is_terminal();
    let start = Instant::now();
    // Per-queue packets/bytes from the driver's statistics (`ethtool -S`), live only.
    let eth = a
        .iface
        .as_deref()
        .filter(|_| root.is_live())
        .and_then(|i| rsskit_linux::ethtool::Ethtool::open(i).ok());
    let take = || -> Result<softnet::Sample> {
        let mut s = softnet::sample(&roots, iface).context("reading the counters")?;
        if let Some(Ok(rsskit_linux::ethtool::Reported::Supported(st))) = eth.as_ref().map(|e| e.stats()) {
            s.queues = softnet::rx_queue_stats(&st);
        }
        Ok(s)
    };
    let mut prev = take()?;
    let mut series: Vec<Series> = Vec::new();
    let mut n = 0usize;
    let mut out = std::io::stdout().lock();
    let started = Instant::now();
    let deadline = a.duration.map(|d| started + Duration::from_secs_f64(d));
    'outer: while a.count.is_none_or(|c| n < c) {
        // Sleep in short slices so a signal ends the wait promptly.
        let until = prev.at + interval;
        loop {
            if stop.load(Ordering::Relaxed) || deadline.is_some_and(|d| Instant::now() >= d) {
                break 'outer;
            }
            let now = Instant::now();
            if now >= until {
                break;
            }
            std::thread::sleep((until - now).min(Duration::from_millis(50)));
        }
        let cur = take()?;
        let r = softnet::rates(&prev, &cur, &cpus);
        let t = cur.at.duration_since(start).as_secs_f64();
        n += 1;
        for c in &r.cpus {
            Series::push(&mut series, &format!("cpu{}", c.cpu), t, c.processed);
        }
        let text = if a.json {
            let mut v = serde_json::to_value(&r).context("encoding JSON")?;
            v["t"] = json!(t);
            v["sample"] = json!(n);
            if let Some(name) = &a.iface {
                v["iface_name"] = json!(name);
            }
            format!("{}\n", serde_json::to_string(&v).context("encoding JSON")?)
        } else {
            render(&r, t, a.iface.as_deref())
        };
        if screen {
            // Home + clear: redraw the table in place.
            write!(out, "\x1b[H\x1b[2J")?;
        }
        out.write_all(text.as_bytes())?;
        out.flush()?;
        prev = cur;
    }
    if let Some(p) = &a.plot {
        let title = match &a.iface {
            Some(i) => format!("packets processed per CPU (softnet), {i} on this host"),
            None => "packets processed per CPU (softnet)".into(),
        };
        plot::lines(p, &title, "seconds", "packets/s", &series)?;
    }
    Ok(())
}

fn human(v: f64) -> String {
    if v >= 1e9 {
        format!("{:.2}G", v / 1e9)
    } else if v >= 1e6 {
        format!("{:.2}M", v / 1e6)
    } else if v >= 1e4 {
        format!("{:.1}k", v / 1e3)
    } else {
        format!("{v:.0}")
    }
}

/// The text form of one sample.
fn render(r: &Rates, t: f64, iface: Option<&str>) -> String {
    let mut s =
        format!("t={t:.1}s  interval {:.2}s  imbalance {:.2} (max/mean packets/s)\n", r.seconds, r.imbalance);
    s += &format!(
        "{:>5} {:>10} {:>10} {:>10} {:>10} {:>10}\n",
        "CPU", "NET_RX/s", "pkts/s", "drop/s", "squeeze/s", "rps_ipi/s"
    );
    for c in &r.cpus {
        s += &format!(
            "{:>5} {:>10} {:>10} {:>10} {:>10} {:>10}\n",
            c.cpu,
            human(c.net_rx_softirqs),
            human(c.processed),
            human(c.dropped),
            human(c.time_squeeze),
            human(c.rps_ipis)
        );
    }
    if let (Some(name), Some(i)) = (iface, &r.iface) {
        s += &format!(
            "{name}: rx {} pkt/s {}B/s drop {}/s nic-drop {}  tx {} pkt/s {}B/s\n",
            human(i.rx_packets),
            human(i.rx_bytes),
            human(i.rx_dropped),
            i.nic_dropped.map_or("n/a".to_string(), |d| format!("{}/s", human(d))),
            human(i.tx_packets),
            human(i.tx_bytes)
        );
        for q in &r.queues {
            s += &format!("  rx-{:<3} {:>10} pkt/s {:>10}B/s\n", q.queue, human(q.packets), human(q.bytes));
        }
        for q in &r.irqs {
            let queue = q.queue.map_or("-".to_string(), |q| q.to_string());
            s += &format!("  irq {:>5} queue {queue:>3} {:>10}/s  {}\n", q.irq, human(q.per_sec), q.name);
        }
    }
    s
}
