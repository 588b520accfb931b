//! `rsskit check --live`: does the NIC steer its own traffic by the RSS
//! setup its driver reports? One AF_PACKET ring per RX queue in a
//! `PACKET_FANOUT_QM` group tells each frame's queue (and the kernel's
//! rxhash); `rsskit_dataplane::livecheck` predicts the queue from the
//! reported key, hashed fields and table and counts agreement. Passive:
//! the rings get copies, the stack still gets every frame.

use crate::cmd::common::{print_json, steering_root, stop_on_signals};
use crate::cmd::host::devices;
use anyhow::{anyhow, bail, Context, Result};
use rsskit_core::RssKey;
use rsskit_dataplane::livecheck::{
    Fields, FlowFields, LiveCheck, LiveReport, LiveSpec, Observation, VerdictStatus,
};
use rsskit_host::landing::{NicError, NicSteering};
use rsskit_linux::netdev::{self, Roots};
use rsskit_linux::packet::{PacketError, QueueCapture, RingConfig};
use rsskit_linux::poll::PollSet;
use std::io::Write as _;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// Exit status when nothing could be compared.
pub const CANNOT_VERIFY: i32 = 2;

/// What `--live` was asked.
pub struct LiveArgs<'a> {
    pub ifaces: &'a [String],
    pub seconds: f64,
    pub packets: Option<u64>,
    pub json: bool,
}

pub fn run(a: LiveArgs<'_>) -> Result<()> {
    let root = steering_root()?;
    let iface = match a.ifaces {
        [one] => one.clone(),
        [] => {
            let rss: Vec<String> =
                devices(&root, &[])?.into_iter().filter(|d| d.hardware_rss()).map(|d| d.name).collect();
            match rss.as_slice() {
                [one] => one.clone(),
                [] => bail!("--live: no interface with hardware RSS found: name one with --iface"),
                many => bail!("--live checks one interface: name it with --iface ({})", many.join(", ")),
            }
        }
        _ => bail!("--live checks one interface at a time: give --iface once"),
    };
    let mut notes = Vec::new();
    let (spec, steering) = spec(&root, &iface, &mut notes)?;
    let table_queues = spec.table.iter().map(|&q| q as usize + 1).max().unwrap_or(0);
    if table_queues > spec.queues {
        notes.push(format!(
            "the table names queue {} but {iface} has {} RX queue(s): those entries cannot be followed",
            table_queues - 1,
            spec.queues
        ));
    }
    // Blocks of 256 KiB hold a GRO-merged 64 KiB frame whole.
    let ring = RingConfig { block_size: 1 << 18, block_count: 8, frame_size: 2048, block_timeout_ms: 2 };
    let mut cap = QueueCapture::open(&iface, spec.queues, ring).map_err(|e| match e {
        PacketError::NotPermitted(_) => {
            anyhow!("check --live captures with AF_PACKET sockets, which need CAP_NET_RAW: run it as root")
        }
        e => anyhow!("{iface}: opening the capture: {e}"),
    })?;
    let _ = cap.take_drops();
    let stop = stop_on_signals()?;
    eprintln!(
        "rsskit: watching {iface}'s {} RX queue(s) for {} s{} (Ctrl-C stops and prints the summary)",
        cap.queues(),
        a.seconds,
        a.packets.map_or(String::new(), |n| format!(" or {n} frames"))
    );
    let mut check = LiveCheck::new(spec);
    let start = Instant::now();
    let deadline = start + Duration::from_secs_f64(a.seconds);
    let limit = a.packets.unwrap_or(u64::MAX);
    let mut poll = PollSet::readable(cap.fds());
    let mut interrupted = false;
    loop {
        drain(&mut cap, &mut check, limit);
        let now = Instant::now();
        if check.seen() >= limit || now >= deadline {
            break;
        }
        if stop.load(Ordering::Relaxed) {
            interrupted = true;
            break;
        }
        poll.wait((deadline - now).min(Duration::from_millis(100))).context("waiting for frames")?;
    }
    let elapsed = start.elapsed();
    // Frames the kernel already handed over still count; a part-filled
    // block is handed over within the ring's block timeout.
    if check.seen() < limit {
        std::thread::sleep(Duration::from_millis(u64::from(ring.block_timeout_ms) * 5));
        drain(&mut cap, &mut check, limit);
    }
    let drops = cap.take_drops();
    if interrupted {
        notes.push(format!("interrupted after {:.1} s", elapsed.as_secs_f64()));
    }
    if let Some(before) = steering {
        match NicSteering::read(&root, &iface) {
            Ok(after) if after.key != before.key || after.table != before.table => notes.push(format!(
                "{iface}'s key or table changed during the check: flows may disagree for that reason alone"
            )),
            _ => {}
        }
    }
    let report = check.report(drops);
    debug_assert!(report.balanced());
    if a.json {
        let mut v = serde_json::to_value(&report).context("encoding JSON")?;
        v["seconds"] = serde_json::json!(elapsed.as_secs_f64());
        v["notes"] = serde_json::json!(notes);
        print_json(&v)?;
    } else {
        print_text(&report, elapsed, &notes);
    }
    let code = match report.verdict.status {
        VerdictStatus::Follows => 0,
        VerdictStatus::DoesNotFollow => 1,
        VerdictStatus::CannotVerify => CANNOT_VERIFY,
    };
    if code != 0 {
        let _ = std::io::stdout().flush();
        std::process::exit(code);
    }
    Ok(())
}

/// Feeds every frame the rings hold now (up to `limit` seen in all).
fn drain(cap: &mut QueueCapture, check: &mut LiveCheck, limit: u64) {
    for i in 0..cap.rings_mut().len() {
        let queue = cap.queue_of(i);
        let ring = &mut cap.rings_mut()[i];
        while check.seen() < limit {
            let Some(f) = ring.next_rx() else { break };
            check.observe(&Observation {
                queue,
                rxhash: Some(f.rxhash),
                frame: f.data,
                wire_len: f.wire_len as usize,
            });
        }
    }
}

/// The spec from what the driver reports (no table: every frame is
/// counted but none checked), and the steering read (to compare at the end).
fn spec(
    root: &rsskit_host::sysroot::Sysroot,
    iface: &str,
    notes: &mut Vec<String>,
) -> Result<(LiveSpec, Option<NicSteering>)> {
    // The capture is on the real device: its RX queues, from the live sysfs.
    let queues = netdev::rx_queues(&Roots::default(), iface).len();
    if queues == 0 {
        bail!("interface '{iface}' does not exist (or has no RX queue in /sys/class/net/{iface}/queues)");
    }
    let n = match NicSteering::read(root, iface) {
        Ok(n) => n,
        Err(e @ NicError::NoRss { .. }) => {
            notes.push(format!("{e}: the check counts {iface}'s frames per queue but cannot predict them"));
            let spec = LiveSpec {
                iface: iface.to_string(),
                key: RssKey::microsoft(),
                table: Vec::new(),
                fields: FlowFields::ALL_FOUR,
                xfrm: rsskit_core::InputXfrm::None,
                queues,
            };
            return Ok((spec, None));
        }
        Err(e) => return Err(e).with_context(|| format!("reading {iface}'s RSS setup")),
    };
    if !n.hfunc.is_empty() && !n.hfunc.iter().any(|h| h == "toeplitz") {
        bail!("{iface} hashes with {} (not Toeplitz): rsskit cannot compute its hash", n.hfunc.join(","));
    }
    let key = RssKey::from_bytes(&n.key).map_err(|e| anyhow!("{iface}'s key: {e}"))?;
    let mut assumed = Vec::new();
    let mut field = |flow: &'static str| match n.tuple(flow) {
        Some("4-tuple") => Fields::FourTuple,
        Some("2-tuple") => Fields::TwoTuple,
        Some(_) => Fields::NotModeled,
        None => {
            assumed.push(flow);
            Fields::FourTuple
        }
    };
    let fields =
        FlowFields { tcp4: field("tcp4"), udp4: field("udp4"), tcp6: field("tcp6"), udp6: field("udp6") };
    if !assumed.is_empty() {
        notes.push(format!(
            "{iface} does not report the fields it hashes for {}: assumed 4-tuple",
            assumed.join(", ")
        ));
    }
    if n.xfrm.is_symmetric() {
        notes.push(format!("{iface} hashes with input transform {}: predicted as the NIC does", n.xfrm));
    }
    let spec =
        LiveSpec { iface: iface.to_string(), key, table: n.table.clone(), fields, xfrm: n.xfrm, queues };
    Ok((spec, Some(n)))
}

fn print_text(r: &LiveReport, elapsed: Duration, notes: &[String]) {
    let p = &r.packets;
    let name = |x: Fields| serde_json::to_value(x).ok().and_then(|v| v.as_str().map(String::from));
    let setup = match &r.fields {
        None => "no RSS table reported".to_string(),
        Some(f) => {
            let fields = [("tcp4", f.tcp4), ("udp4", f.udp4), ("tcp6", f.tcp6), ("udp6", f.udp6)]
                .iter()
                .map(|(k, v)| format!("{k} {}", name(*v).unwrap_or_default()))
                .collect::<Vec<_>>()
                .join(", ");
            format!("table {} entries; hashed fields {fields}", r.table_size)
        }
    };
    println!("{}: {} RX queue(s) captured for {:.1} s; {setup}", r.iface, r.queues, elapsed.as_secs_f64());
    let reasons =
        p.unchecked_by_reason.iter().map(|(k, v)| format!("{k} {v}")).collect::<Vec<_>>().join(", ");
    println!(
        "packets: {} seen = {} agreed + {} disagreed + {} not checked{}; {} dropped by the kernel on full \
         capture rings (not seen)",
        p.seen,
        p.agreed,
        p.disagreed,
        p.unchecked,
        if reasons.is_empty() { String::new() } else { format!(" ({reasons})") },
        p.ring_drops
    );
    let fl = &r.flows;
    println!(
        "flows:   {} checked: {} on the predicted queue, {} not ({} seen on several queues){}",
        fl.checked,
        fl.agreed,
        fl.disagreed,
        fl.split,
        if fl.untracked_packets > 0 {
            format!("; {} packets of further flows counted per packet only", fl.untracked_packets)
        } else {
            String::new()
        }
    );
    println!(
        "rxhash:  equal to rsskit's hash on {} of {} checked packets (all: the driver reports the NIC's hash \
         with this key; none: it reports none, or another)",
        r.rxhash.equal, r.rxhash.compared
    );
    println!("queue  seen  predicted");
    for q in r.per_queue.iter().filter(|q| q.packets > 0 || q.predicted > 0) {
        println!("{:>5} {:>5} {:>10}", q.queue, q.packets, q.predicted);
    }
    if !r.disagreements.is_empty() {
        println!("first disagreements (flow: rsskit's hash, table entry -> predicted queue; seen on):");
        for d in &r.disagreements {
            let seen = d
                .observed
                .iter()
                .map(|o| format!("queue {} x{}", o.queue, o.packets))
                .collect::<Vec<_>>()
                .join(", ");
            println!(
                "  {}: 0x{:08x} ({}), entry {} -> queue {}; seen on {seen}{}",
                d.flow,
                d.hash,
                d.hash_type,
                d.table_index,
                d.predicted_queue,
                d.rxhash.map_or(String::new(), |h| format!("; rxhash 0x{h:08x}"))
            );
        }
    }
    for n in notes {
        println!("note: {n}");
    }
    println!("verdict: {}", r.verdict.text);
}
