//! `rsskit top` and the `--plot` SVGs: on the fixture tree (tests/fixtures/host6cpu, copied to a
//! temp dir; counters moved between two samples, so every rate is known
//! exactly), bad input, and on a veth under load from `udp-load` (needs
//! root and `ip`; fails loudly without them).

mod common;

use common::netns::{self, Pair, Proc};
use serde_json::Value;
use std::fs;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

/// A temp copy of the fixture tree, removed on drop.
use common::fixture::HostTree as Tree;

fn f(v: &Value, k: &str) -> f64 {
    v[k].as_f64().unwrap_or_else(|| panic!("no number '{k}' in {v}"))
}

#[test]
fn fixture_static_counters_give_zero_rates() {
    let t = Tree::new("static");
    let out = Command::new(netns::rsskit())
        .args(["top", "--sysroot"])
        .arg(&t.0)
        .args(["--iface", "eth0", "--interval", "0.2", "--count", "2", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let lines: Vec<Value> =
        String::from_utf8_lossy(&out.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 2, "--count 2: two JSON lines");
    for v in &lines {
        let cpus = v["cpus"].as_array().unwrap();
        assert_eq!(cpus.len(), 6, "six CPUs in softnet_stat: {v}");
        assert!(cpus.iter().all(|c| f(c, "processed") == 0.0 && f(c, "net_rx_softirqs") == 0.0), "{v}");
        assert_eq!(f(v, "imbalance"), 0.0, "no packets: no imbalance figure");
        assert_eq!(f(&v["iface"], "rx_packets"), 0.0);
        let irqs: Vec<u64> =
            v["irqs"].as_array().unwrap().iter().map(|i| i["irq"].as_u64().unwrap()).collect();
        assert_eq!(irqs, vec![40, 41, 42, 43, 44], "eth0's IRQs: {v}");
        assert_eq!(v["irqs"][3]["queue"], 3);
        assert!(v["iface"]["nic_dropped"].is_null(), "the fixture's driver exposes no NIC drop counter: {v}");
    }
    // With rx_missed_errors exposed, a static counter is a rate of 0, shown in the text form.
    fs::write(t.0.join("sys/class/net/eth0/statistics/rx_missed_errors"), "5\n").unwrap();
    let out = Command::new(netns::rsskit())
        .args(["top", "--sysroot"])
        .arg(&t.0)
        .args(["--iface", "eth0", "--interval", "0.2", "--count", "1"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && text.contains("nic-drop 0/s"), "{text}");
}

/// Softnet line for CPU `cpu` (15 columns, CPU number in column 12).
fn softnet_line(processed: u64, dropped: u64, squeeze: u64, rps: u64, cpu: u64) -> String {
    let mut c = [0u64; 15];
    c[0] = processed;
    c[1] = dropped;
    c[2] = squeeze;
    c[9] = rps;
    c[12] = cpu;
    c.iter().map(|x| format!("{x:08x}")).collect::<Vec<_>>().join(" ")
}

#[test]
fn fixture_rates_are_counter_deltas_over_time() {
    let t = Tree::new("moving");
    let mut child = Command::new(netns::rsskit())
        .args(["top", "--sysroot"])
        .arg(&t.0)
        .args(["--iface", "eth0", "--interval", "2", "--count", "2", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut rd = BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    rd.read_line(&mut first).unwrap();
    // Between the 1st and 2nd sample (2 s apart): CPU 3 processes 3000
    // more packets (7 dropped, 2 squeezed, 50 RPS IPIs), CPU 0 1000 more;
    // NET_RX +600 on CPU 3; eth0 receives 4000 packets / 600000 bytes; IRQ 43
    // fires 500 more times on CPU 3.
    let sn: Vec<String> = (0..6u64)
        .map(|c| match c {
            0 => softnet_line(0x1000 + 1000, 0, 0, 4, 0),
            3 => softnet_line(0x8000 + 3000, 3 + 7, 7 + 2, 50, 3),
            _ => softnet_line(0x100, 0, 0, 0, c),
        })
        .collect();
    fs::write(t.0.join("proc/net/softnet_stat"), sn.join("\n") + "\n").unwrap();
    let si = fs::read_to_string(t.0.join("proc/softirqs")).unwrap().replace(" 2000 ", " 2600 ");
    fs::write(t.0.join("proc/softirqs"), si).unwrap();
    let st = t.0.join("sys/class/net/eth0/statistics");
    fs::write(st.join("rx_packets"), "44000\n").unwrap();
    fs::write(st.join("rx_bytes"), "6600000\n").unwrap();
    let irq = fs::read_to_string(t.0.join("proc/interrupts")).unwrap().replace(" 600 ", " 1100 ");
    fs::write(t.0.join("proc/interrupts"), irq).unwrap();
    let mut second = String::new();
    rd.read_line(&mut second).unwrap();
    let st = child.wait().unwrap();
    assert!(st.success());
    let a: Value = serde_json::from_str(&first).unwrap();
    let b: Value = serde_json::from_str(&second).unwrap();
    assert!(a["cpus"].as_array().unwrap().iter().all(|c| f(c, "processed") == 0.0), "{a}");
    let secs = f(&b, "seconds");
    assert!(secs > 0.5, "{b}");
    let near = |rate: f64, count: f64| (rate * secs - count).abs() < 1e-6 * count.max(1.0);
    let c3 = &b["cpus"][3];
    assert!(near(f(c3, "processed"), 3000.0), "{b}");
    assert!(near(f(c3, "dropped"), 7.0) && near(f(c3, "time_squeeze"), 2.0), "{b}");
    assert!(near(f(c3, "rps_ipis"), 50.0) && near(f(c3, "net_rx_softirqs"), 600.0), "{b}");
    assert!(near(f(&b["cpus"][0], "processed"), 1000.0), "{b}");
    assert!(near(f(&b["cpus"][1], "processed"), 0.0), "{b}");
    // mean of (1000, 0, 0, 3000, 0, 0) = 4000/6; max 3000 -> 4.5.
    assert!((f(&b, "imbalance") - 4.5).abs() < 1e-9, "{b}");
    assert!(near(f(&b["iface"], "rx_packets"), 4000.0) && near(f(&b["iface"], "rx_bytes"), 600000.0), "{b}");
    let i43 = b["irqs"].as_array().unwrap().iter().find(|i| i["irq"] == 43).unwrap();
    assert!(near(f(i43, "per_sec"), 500.0), "{b}");
}

#[test]
fn bad_input_is_refused_by_name() {
    let t = Tree::new("bad");
    for (args, msg) in [
        (vec!["--iface", "eth9"], "interface 'eth9' does not exist"),
        (vec!["--interval", "0"], "is not a number of seconds above 0"),
        (vec!["--count", "0"], "--count"),
        (vec!["--cpus", "x"], "--cpus"),
    ] {
        let out =
            Command::new(netns::rsskit()).args(["top", "--sysroot"]).arg(&t.0).args(&args).output().unwrap();
        assert!(!out.status.success(), "{args:?} must fail");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(msg) && !err.contains("panicked"), "{args:?}: {err}");
    }
    // A tree without the counter files: a clear error naming the file.
    fs::remove_file(t.0.join("proc/net/softnet_stat")).unwrap();
    let out = Command::new(netns::rsskit())
        .args(["top", "--sysroot"])
        .arg(&t.0)
        .args(["--count", "1"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("softnet_stat"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The SVG parses as XML with an `<svg>` root and one drawn line per series.
fn check_svg(path: &Path, lines_at_least: usize) {
    let text = fs::read_to_string(path).unwrap_or_else(|e| panic!("no plot at {}: {e}", path.display()));
    let doc =
        roxmltree::Document::parse(&text).unwrap_or_else(|e| panic!("{}: not XML: {e}", path.display()));
    assert_eq!(doc.root_element().tag_name().name(), "svg");
    let polylines = doc.descendants().filter(|n| n.tag_name().name() == "polyline").count();
    assert!(polylines >= lines_at_least, "{polylines} polylines, want >= {lines_at_least}");
}

/// The text of every `<text>` element.
fn svg_texts(path: &Path) -> Vec<String> {
    let text = fs::read_to_string(path).unwrap();
    let doc = roxmltree::Document::parse(&text).unwrap();
    doc.descendants()
        .filter(|n| n.tag_name().name() == "text")
        .map(|n| n.text().unwrap_or_default().trim().to_string())
        .collect()
}

/// `top` in the server's namespace while `udp-load` sends a known number of
/// datagrams over the veth: the veth's received packets summed over top's
/// samples equal udp-load's `sent` within 2% + 20 (neighbour discovery and
/// ARP also cross the veth); the per-CPU softnet `processed` counters are
/// host-wide (other namespaces and hosts' tests count too), so their sum over
/// CPUs is checked as a lower bound: at least 98% of `sent`.
#[test]
fn top_on_a_veth_matches_udp_load() {
    let pair = Pair::new(0);
    let ls = pair.server.command(Path::new("ls")).arg("/sys/class/net").output().unwrap();
    let veth = String::from_utf8_lossy(&ls.stdout)
        .split_whitespace()
        .find(|n| *n != "lo")
        .expect("the server's veth")
        .to_string();
    let port = 30000 + (std::process::id() % 20000) as u16;
    let bind = format!("{}:{port}", netns::SERVER_V4);
    let mut cmd = pair.server.command(&netns::rsskit());
    cmd.args(["udp-echo", "--bind", &bind, "--duration", "40", "--json"]);
    let server = Proc::spawn(cmd);
    let hex = format!(":{port:04X} ");
    assert!(
        netns::wait_until(Duration::from_secs(10), || pair.server.read("/proc/net/udp").contains(&hex)),
        "udp-echo did not bind"
    );
    let svg = std::env::temp_dir().join(format!("rsskit-top-veth-{}.svg", std::process::id()));
    let mut cmd = pair.server.command(&netns::rsskit());
    // No --count: stopped by SIGINT once the load is over (whatever the
    // machine's speed), after at least two more samples.
    cmd.args(["top", "--iface", &veth, "--interval", "1", "--json", "--plot"]).arg(&svg);
    let mut top = Proc::spawn(cmd);
    // Lines as they come: the load starts only once top printed a sample
    // (its baseline read is then certainly before the first datagram).
    let stdout = top.0.as_mut().unwrap().stdout.take().unwrap();
    let (tx, rx_lines) = std::sync::mpsc::channel::<String>();
    let reader = std::thread::spawn(move || {
        for l in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(l);
        }
    });
    let first = rx_lines.recv_timeout(Duration::from_secs(30)).expect("top printed a first sample");
    // 4 streams x 1500 datagrams at 3000/s: about 2 s of load.
    let mut cmd = pair.client.command(&netns::rsskit());
    cmd.args(["udp-load", "--target", &bind, "--streams", "4", "--count", "1500", "--rate", "3000"]);
    let load_svg = std::env::temp_dir().join(format!("rsskit-udp-load-{}.svg", std::process::id()));
    cmd.args(["--client-cpus", "none", "--json", "--plot"]).arg(&load_svg);
    let out = Proc::spawn(cmd).wait(Duration::from_secs(60));
    assert!(out.status.success(), "udp-load: {}", String::from_utf8_lossy(&out.stderr));
    let load: Value = serde_json::from_slice(&out.stdout).expect("udp-load JSON");
    let sent = load["sent"].as_u64().unwrap() as f64;
    assert_eq!(sent, 6000.0, "{load}");
    std::thread::sleep(Duration::from_millis(2500));
    top.signal(libc::SIGINT);
    let out = top.wait(Duration::from_secs(60));
    assert!(out.status.success(), "top: {}", String::from_utf8_lossy(&out.stderr));
    reader.join().unwrap();
    server.signal(libc::SIGTERM);
    let _ = server.wait(Duration::from_secs(10));
    let samples: Vec<Value> = std::iter::once(first)
        .chain(rx_lines.try_iter())
        .map(|l| serde_json::from_str(&l).unwrap())
        .collect();
    assert!(samples.len() >= 4, "top sampled before, during and after the load: {samples:?}");
    let total = |get: &dyn Fn(&Value) -> f64| samples.iter().map(|s| get(s) * f(s, "seconds")).sum::<f64>();
    let rx = total(&|s| f(&s["iface"], "rx_packets") + f(&s["iface"], "rx_dropped"));
    assert!(
        (rx - sent).abs() <= sent * 0.02 + 20.0,
        "veth received {rx:.0} over top's samples, udp-load sent {sent}: {samples:?}"
    );
    let processed = total(&|s| s["cpus"].as_array().unwrap().iter().map(|c| f(c, "processed")).sum());
    assert!(processed >= sent * 0.98, "softnet processed {processed:.0} < 98% of sent {sent}");
    eprintln!("udp-load sent {sent}; veth rx over top's samples {rx:.0}; softnet processed (host-wide) {processed:.0}");
    let peak = samples.iter().map(|s| f(&s["iface"], "rx_packets")).fold(0.0, f64::max);
    assert!(peak > 1000.0, "a sample saw the load (~3000/s): peak {peak}");
    let ncpu = samples[0]["cpus"].as_array().unwrap().len();
    check_svg(&svg, ncpu);
    let _ = fs::remove_file(&svg);
    // udp-load's chart: sent and echoed lines, RTT bars.
    check_svg(&load_svg, 2);
    let texts = svg_texts(&load_svg);
    for want in ["sent", "echoed", "latency distribution"] {
        assert!(texts.iter().any(|t| t == want), "no '{want}' label in {texts:?}");
    }
    let _ = fs::remove_file(&load_svg);
}

#[test]
fn sigint_stops_top_cleanly_and_still_plots() {
    let t = Tree::new("sigint");
    let svg = t.0.join("top.svg");
    let mut cmd = Command::new(netns::rsskit());
    cmd.args(["top", "--sysroot"]).arg(&t.0).args(["--interval", "0.2", "--lines", "--plot"]).arg(&svg);
    let mut p = Proc::spawn(cmd);
    // Signal only once a sample is out (the handler is installed by then).
    let mut stdout = BufReader::new(p.0.as_mut().unwrap().stdout.take().unwrap());
    let mut first = String::new();
    stdout.read_line(&mut first).unwrap();
    assert!(first.contains("imbalance"), "a sample: {first}");
    p.signal(libc::SIGINT);
    let out = p.wait(Duration::from_secs(10));
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    check_svg(&svg, 6);
}

/// http-load's chart: one line per worker and the latency bars, from a run
/// against `rsskit http-serve` on loopback.
#[test]
fn http_load_plot_is_svg_with_a_line_per_worker() {
    let srv = common::http::Server::start(&["--quiet", "--steer", "kernel"]);
    let svg = std::env::temp_dir().join(format!("rsskit-http-load-{}.svg", std::process::id()));
    let mut cmd = Command::new(netns::rsskit());
    cmd.args(["http-load", "--url", &format!("http://{}/", srv.addr), "--connections", "8"]);
    cmd.args(["--duration", "2.5", "--threads", "2", "--json", "--quiet", "--plot"]).arg(&svg);
    let out = Proc::spawn(cmd).wait(Duration::from_secs(60));
    let _ = srv.stop();
    assert!(out.status.success(), "http-load: {}", String::from_utf8_lossy(&out.stderr));
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    let workers = r["workers"].as_array().unwrap().len();
    assert!(workers >= 1);
    check_svg(&svg, workers);
    let texts = svg_texts(&svg);
    assert!(texts.iter().any(|t| t.starts_with("worker 0 (CPU")), "{texts:?}");
    assert!(texts.iter().any(|t| t == "latency distribution"), "{texts:?}");
    let text = fs::read_to_string(&svg).unwrap();
    let doc = roxmltree::Document::parse(&text).unwrap();
    let bars = doc.descendants().filter(|n| n.tag_name().name() == "rect").count();
    assert!(bars >= 2, "background and at least one latency bar: {bars}");
    let _ = fs::remove_file(&svg);
}

/// udp-echo's chart: one line per worker, from a loopback run under load.
#[test]
fn udp_echo_plot_has_a_line_per_worker() {
    let svg = std::env::temp_dir().join(format!("rsskit-udp-echo-{}.svg", std::process::id()));
    let mut cmd = Command::new(netns::rsskit());
    cmd.args(["udp-echo", "--bind", "127.0.0.1:0", "--duration", "4", "--json", "--plot"]).arg(&svg);
    let mut server = Proc::spawn(cmd);
    // The banner names the port; "ready" follows once the workers run.
    let mut err = BufReader::new(server.0.as_mut().unwrap().stderr.take().unwrap());
    let mut bind = String::new();
    loop {
        let mut line = String::new();
        assert!(err.read_line(&mut line).unwrap() > 0, "udp-echo ended before it was ready");
        if let Some(rest) = line.split(" on ").nth(1).filter(|_| bind.is_empty()) {
            bind = rest.split([',', ' ']).next().unwrap().to_string();
        }
        if line.trim() == "ready" {
            break;
        }
    }
    let out = Command::new(netns::rsskit())
        .args(["udp-load", "--target", &bind, "--streams", "2", "--rate", "2000", "--duration", "2"])
        .args(["--client-cpus", "none", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "udp-load: {}", String::from_utf8_lossy(&out.stderr));
    let out = server.wait(Duration::from_secs(30));
    assert!(out.status.success(), "udp-echo: {}", String::from_utf8_lossy(&out.stderr));
    let s: Value = serde_json::from_slice(&out.stdout).unwrap();
    let workers = s["workers"].as_array().unwrap().len();
    check_svg(&svg, workers);
    let texts = svg_texts(&svg);
    assert!(texts.iter().any(|t| t.starts_with("worker 0 (CPU")), "{texts:?}");
    let _ = fs::remove_file(&svg);
}

/// pipeline's chart: one line per worker over a bounded generated run.
#[test]
fn pipeline_plot_has_a_line_per_worker() {
    let svg = std::env::temp_dir().join(format!("rsskit-pipeline-{}.svg", std::process::id()));
    let mut cmd = Command::new(netns::rsskit());
    cmd.args(["pipeline", "--in", "gen", "--packets", "1000000000", "--duration", "2.5", "--workers", "2"]);
    cmd.args(["--quiet", "--json", "--plot"]).arg(&svg);
    let out = Proc::spawn(cmd).wait(Duration::from_secs(60));
    assert!(out.status.success(), "pipeline: {}", String::from_utf8_lossy(&out.stderr));
    check_svg(&svg, 2);
    let texts = svg_texts(&svg);
    for w in ["worker 0", "worker 1"] {
        assert!(texts.iter().any(|t| t.starts_with(w)), "no '{w}' line in {texts:?}");
    }
    let _ = fs::remove_file(&svg);
}
