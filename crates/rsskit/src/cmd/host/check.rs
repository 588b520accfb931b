//! `rsskit check`: does this host keep every flow on one CPU? A verdict per
//! device with the reasons; exit 0 when aligned, 1 when not.

use crate::cmd::common::{int_in, positive, print_json, seconds_arg};
use crate::cmd::host::{devices, source};
use anyhow::{bail, Context, Result};
use rsskit_host::hostcheck::{check_device, check_rules, DeviceVerdict};
use rsskit_host::nic_rules::NicRules;
use rsskit_linux::cpulist;
use rsskit_runtime::proto::{self, Probe, CPU_UNKNOWN};
use serde::Serialize;
use serde_json::json;
use std::collections::BTreeSet;
use std::io::Write as _;
use std::net::{SocketAddr, UdpSocket};
use std::path::PathBuf;
use std::time::{Duration, Instant};

mod live;

const AFTER_HELP: &str = "\
Problems (each makes the device 'not aligned'): a key that fails the key check
random keys get, table entries naming queues the device lacks, a queue whose
IRQ may run on several CPUs, queues on CPUs off the device's NUMA node while it
has enough CPUs, XPS off or mapping a CPU to several queues or across another
queue's IRQ CPU, RPS on a device with hardware RSS (double steering), queue
IRQs irqbalance will move. Notes do not change the verdict.

--probe ADDR:PORT checks end to end against a running `rsskit udp-echo`
(best with --steer cpu): N UDP flows (--probe-flows) of 8 datagrams each, sent
in rounds 20 ms apart; every flow must be answered by one worker CPU, on the
CPU the kernel processed it on, by the worker owning its bucket.

Exit status: 0 every device aligned, 1 not (or an error).

--live checks one NIC against its own traffic for --seconds (or --packets):
one AF_PACKET ring per RX queue (PACKET_FANOUT_QM) tells each received
frame's queue and the kernel's rxhash; rsskit predicts the queue from the key,
hashed fields and table the driver reports and counts, per packet and per
flow, how many agree. It only observes (the rings get copies) and needs root.
Every frame seen is counted: seen = agreed + disagreed + not checked (by
reason: not_ip, fragment, queue_not_recorded, ...); frames the kernel dropped
on full capture rings are shown too. Exit status: 0 the NIC follows its
reported table, 1 it does not (or an error), 2 nothing could be verified (no
table, one queue without a reported hash, no checkable traffic). SIGINT stops
early and still prints the summary.

Examples:
  rsskit check
  rsskit check --iface eth0 --json
  rsskit check --iface eth0 --probe 10.0.0.1:9000
  rsskit check --live --iface eth0 --seconds 10";

#[derive(clap::Args, Debug)]
#[command(after_help = AFTER_HELP)]
pub struct Args {
    /// Interface to check (repeat for several); default: every interface on a device.
    #[arg(long = "iface", value_name = "IF")]
    ifaces: Vec<String>,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
    /// Also probe a running `rsskit udp-echo` at ADDR:PORT end to end.
    #[arg(long, value_name = "ADDR:PORT")]
    probe: Option<SocketAddr>,
    /// Flows the probe sends (each from its own source port), 1-1024.
    #[arg(long, default_value_t = 32, value_parser = positive)]
    probe_flows: usize,
    /// Check the host captured in DIR (`rsskit capture DIR`) instead of this one, offline.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["live", "probe"])]
    from: Option<PathBuf>,
    /// Read a tree shaped like /sys and /proc under DIR instead (tests).
    #[arg(long, value_name = "DIR", hide = true, conflicts_with = "live")]
    sysroot: Option<PathBuf>,
    /// Verify the NIC against its own received traffic (see below).
    #[arg(long, conflicts_with = "probe")]
    live: bool,
    /// With --live: how long to watch, above 0 and below 10^7 (default 5).
    #[arg(long, value_name = "S", value_parser = seconds_arg, requires = "live")]
    seconds: Option<f64>,
    /// With --live: stop after this many frames, 1-1000000000000.
    #[arg(long, value_name = "N", value_parser = int_in(1u64, 1_000_000_000_000), requires = "live")]
    packets: Option<u64>,
}

pub fn run(a: Args) -> Result<()> {
    if a.live {
        return live::run(live::LiveArgs {
            ifaces: &a.ifaces,
            seconds: a.seconds.unwrap_or(5.0),
            packets: a.packets,
            json: a.json,
        });
    }
    // clap drops `requires` when a conflicting flag (--sysroot) is given.
    if a.seconds.is_some() || a.packets.is_some() {
        bail!("--seconds and --packets go with --live");
    }
    let root = source(a.from.as_ref(), a.sysroot.as_ref())?;
    let topo = root.topology();
    let devs = devices(&root, &a.ifaces)?;
    // nicres: the NIC's drop counters at the start; compared at the end.
    // Only a warning in the notes when they grew: the counters themselves
    // are live values a capture cannot hold (check --from must say what
    // check says).
    let drops = |d: &rsskit_host::sysroot::DeviceState| {
        rsskit_host::softnet::nic_drop_counters(&root.roots, &d.name, root.is_live()).ok().flatten()
    };
    let drops_before: Vec<_> = devs.iter().map(drops).collect();
    let ib = root.irqbalance();
    let mut verdicts: Vec<DeviceVerdict> = devs.iter().map(|d| check_device(&topo, d, ib.as_ref())).collect();
    for (d, v) in devs.iter().zip(&mut verdicts) {
        let rules =
            NicRules::read(&root, &d.name).with_context(|| format!("reading {}'s flow rules", d.name))?;
        check_rules(d, &rules, v);
    }
    if a.probe_flows > 1024 {
        bail!("--probe-flows: at most 1024");
    }
    let probe = match a.probe {
        Some(at) => Some(probe(at, a.probe_flows, PROBES_PER_FLOW, Duration::from_secs(3))?),
        None => None,
    };
    // nicres
    for ((d, v), before) in devs.iter().zip(&mut verdicts).zip(&drops_before) {
        rsskit_host::hostcheck::note_drops(v, before.as_ref(), drops(d).as_ref());
    }
    let aligned = verdicts.iter().all(|v| v.aligned) && probe.as_ref().is_none_or(|p| p.problems.is_empty());
    if a.json {
        print_json(&json!({ "aligned": aligned, "irqbalance": ib, "devices": verdicts, "probe": probe }))?;
    } else {
        for v in &verdicts {
            println!("{}: {}", v.name, if v.aligned { "aligned" } else { "NOT aligned" });
            for p in &v.problems {
                println!("  - {p}");
            }
            for n in &v.notes {
                println!("  note: {n}");
            }
        }
        if let Some(p) = &probe {
            println!("{}", p.summary);
            for x in &p.problems {
                println!("  - {x}");
            }
            for n in &p.notes {
                println!("  note: {n}");
            }
        }
        let bad = verdicts.iter().filter(|v| !v.aligned).count();
        if aligned {
            println!("verdict: aligned: every flow stays on one CPU");
        } else {
            println!(
                "verdict: not aligned: {} problem(s) on {bad} of {} device(s){} (rsskit plan / rsskit apply fix most)",
                verdicts.iter().map(|v| v.problems.len()).sum::<usize>(),
                verdicts.len(),
                probe.as_ref().map_or(String::new(), |p| format!(", {} from the probe", p.problems.len()))
            );
        }
    }
    if !aligned {
        let _ = std::io::stdout().flush();
        std::process::exit(1);
    }
    Ok(())
}

const PROBES_PER_FLOW: usize = 8;

/// What the probe saw.
#[derive(Debug, Serialize)]
pub struct ProbeReport {
    pub target: SocketAddr,
    pub flows: usize,
    pub sent: usize,
    pub replies: usize,
    /// Flows answered from more than one worker CPU.
    pub split_flows: usize,
    /// Worker CPUs that answered.
    pub cpus: Vec<usize>,
    pub summary: String,
    pub problems: Vec<String>,
    pub notes: Vec<String>,
}

#[derive(Default)]
struct FlowSeen {
    replies: usize,
    cpus: BTreeSet<u16>,
    off_cpu: usize,
    misdirected: usize,
}

/// Sends `flows` UDP flows of `per_flow` probes each to an rsskit echo
/// server and judges, per flow, whether one CPU served it.
fn probe(at: SocketAddr, flows: usize, per_flow: usize, wait: Duration) -> Result<ProbeReport> {
    let local: SocketAddr = if at.is_ipv4() { "0.0.0.0:0".parse()? } else { "[::]:0".parse()? };
    let socks: Vec<UdpSocket> = (0..flows)
        .map(|_| {
            let s = UdpSocket::bind(local).context("--probe: binding a UDP socket")?;
            s.connect(at).with_context(|| format!("--probe: no route to {at}"))?;
            s.set_nonblocking(true).context("--probe: non-blocking socket")?;
            Ok(s)
        })
        .collect::<Result<_>>()?;
    let mut seen: Vec<FlowSeen> = (0..flows).map(|_| FlowSeen::default()).collect();
    let mut buf = [0u8; 2048];
    let mut sent = 0;
    let start = Instant::now();
    let mut refused = false;
    for round in 0..per_flow {
        for (i, s) in socks.iter().enumerate() {
            let mut d = [0u8; proto::HEADER_LEN];
            let p = Probe { stream: i as u32, seq: round as u64, sent_ns: start.elapsed().as_nanos() as u64 };
            proto::encode_probe(&mut d, &p);
            match s.send(&d) {
                Ok(_) => sent += 1,
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                    bail!("--probe {at}: connection refused: is `rsskit udp-echo --bind {at}` running there?")
                }
                Err(e) => return Err(e).with_context(|| format!("--probe {at}: sending")),
            }
        }
        std::thread::sleep(Duration::from_millis(20));
        refused |= drain(&socks, &mut seen, &mut buf);
    }
    let deadline = Instant::now() + wait;
    while seen.iter().map(|f| f.replies).sum::<usize>() < sent && Instant::now() < deadline && !refused {
        std::thread::sleep(Duration::from_millis(10));
        refused |= drain(&socks, &mut seen, &mut buf);
    }
    let replies: usize = seen.iter().map(|f| f.replies).sum();
    if replies == 0 && refused {
        bail!("--probe {at}: connection refused: is `rsskit udp-echo --bind {at}` running there?");
    }
    if replies == 0 {
        bail!("--probe {at}: no reply within {wait:?}: is `rsskit udp-echo --bind {at}` running there?");
    }
    let split: Vec<String> = seen
        .iter()
        .zip(&socks)
        .filter(|(f, _)| f.cpus.len() > 1)
        .map(|(f, s)| {
            let c: Vec<usize> = f.cpus.iter().map(|&c| c as usize).collect();
            format!(
                "{} (CPUs {})",
                s.local_addr().map_or("?".into(), |a| a.port().to_string()),
                cpulist::format(&c)
            )
        })
        .collect();
    let mut problems = Vec::new();
    if !split.is_empty() {
        problems.push(format!(
            "probe: {} of {flows} flows were answered from several CPUs (source port: CPUs): {}",
            split.len(),
            split.iter().take(8).cloned().collect::<Vec<_>>().join(", ")
        ));
    }
    let off = seen.iter().filter(|f| f.off_cpu > 0).count();
    if off > 0 {
        problems.push(format!(
            "probe: {off} flows were processed by the kernel on another CPU than their worker's"
        ));
    }
    let mis = seen.iter().filter(|f| f.misdirected > 0).count();
    if mis > 0 {
        problems.push(format!("probe: {mis} flows reached a worker that does not own their bucket"));
    }
    let mut notes = Vec::new();
    if replies < sent {
        notes.push(format!("probe: {} of {sent} datagrams got no reply", sent - replies));
    }
    let cpus: Vec<usize> = seen
        .iter()
        .flat_map(|f| f.cpus.iter().map(|&c| c as usize))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let one = seen.iter().filter(|f| f.cpus.len() == 1).count();
    let summary = format!(
        "probe {at}: {flows} flows x {per_flow} datagrams, {replies} replies; {one} flows each answered from one CPU \
         (worker CPUs seen: {})",
        cpulist::format(&cpus)
    );
    Ok(ProbeReport {
        target: at,
        flows,
        sent,
        replies,
        split_flows: split.len(),
        cpus,
        summary,
        problems,
        notes,
    })
}

/// Reads every reply waiting on the flows' sockets; true when a socket
/// reports the port unreachable (nothing listens there).
fn drain(socks: &[UdpSocket], seen: &mut [FlowSeen], buf: &mut [u8]) -> bool {
    let mut refused = false;
    for (f, s) in seen.iter_mut().zip(socks) {
        loop {
            let n = match s.recv(buf) {
                Ok(n) => n,
                Err(e) => {
                    refused |= e.kind() == std::io::ErrorKind::ConnectionRefused;
                    break;
                }
            };
            if let Some((_, st)) = proto::decode(&buf[..n]) {
                f.replies += 1;
                f.cpus.insert(st.cpu);
                if st.kernel_cpu != CPU_UNKNOWN && st.kernel_cpu != st.cpu {
                    f.off_cpu += 1;
                }
                if st.misdirected() {
                    f.misdirected += 1;
                }
            }
        }
    }
    refused
}
