//! Bad input to `rsskit udp-load` / `rsskit udp-echo`: one clear line on
//! stderr, non-zero exit, no panic.

mod common;

use assert_cmd::Command;
use common::netns::{self, Netns};

fn rsskit() -> Command {
    let mut c = Command::cargo_bin("rsskit").unwrap();
    c.timeout(std::time::Duration::from_secs(20));
    c
}

/// Runs, expects exit status `code` and an stderr line containing `needle`
/// (case-insensitive), and no panic.
fn fails(args: &[&str], code: i32, needle: &str) {
    let out = rsskit().args(args).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "rsskit {}: stderr: {err}", args.join(" "));
    assert!(!err.contains("panicked"), "panic: {err}");
    assert!(
        err.to_lowercase().contains(&needle.to_lowercase()),
        "rsskit {}: stderr lacks '{needle}': {err}",
        args.join(" ")
    );
}

/// Refused before anything is sent: numbers out of range, bad addresses,
/// CPUs that do not exist (`--target` the discard port where it is not the
/// point).
#[test]
fn load_bad_input() {
    let to_discard = |args: &[&'static str]| [&["udp-load", "--target", "127.0.0.1:9"], args].concat();
    let cases: Vec<(Vec<&str>, i32, &str)> = vec![
        (to_discard(&["--size", "65508"]), 2, "at most 65507"),
        (to_discard(&["--size", "39"]), 2, "at least 40"),
        (to_discard(&["--streams", "0"]), 2, "at least 1 (range 1-65536)"),
        (vec!["udp-load", "--target", "300.1.1.1:9"], 1, "not an address"),
        (vec!["udp-load", "--target", "127.0.0.1"], 1, "no port"),
        (vec!["udp-load", "--target", "127.0.0.1:70000"], 1, "not an address"),
        (vec!["udp-load", "--target", "0.0.0.0:9"], 1, "unspecified"),
        (
            vec!["udp-load", "--target", "[::1]:9", "--src-net", "10.0.0.0/8", "--spread-buckets"],
            1,
            "families",
        ),
        (to_discard(&["--src-net", "10.0.0.0/40"]), 2, "prefix length"),
        // Only --spread-buckets picks sources: without it --src-net was silently ignored (issue 22 §6).
        (to_discard(&["--src-net", "127.0.0.0/8"]), 2, "--spread-buckets"),
        (to_discard(&["--client-cpus", "4000"]), 1, "does not exist"),
        (to_discard(&["--server-cpus", "0-x"]), 2, "--server-cpus"),
    ];
    for (args, code, needle) in cases {
        fails(&args, code, needle);
    }
}

/// `udp-echo --bind 127.0.0.1:0 --cpus 0 ARGS` running, and the address
/// its banner names.
fn echo_on_loopback(args: &[&str]) -> (common::proc::Running, String) {
    let mut echo =
        common::proc::Running::spawn(&[&["udp-echo", "--bind", "127.0.0.1:0", "--cpus", "0"], args].concat());
    let line = echo.wait_for("udp-echo: echo on ", std::time::Duration::from_secs(20));
    let addr = line.split("echo on ").nth(1).unwrap().split(',').next().unwrap().to_string();
    (echo, addr)
}

#[test]
fn load_refused_target() {
    // A port with nothing on it: the kernel answers ICMP port unreachable.
    let port = std::net::UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let target = format!("127.0.0.1:{port}");
    fails(&["udp-load", "--target", &target, "--duration", "0.5", "--rate", "100"], 1, "ECONNREFUSED");
    // The count is reported, in text and in JSON, and the exit is non-zero.
    let out = rsskit()
        .args(["udp-load", "--target", &target, "--duration", "0.5", "--rate", "100"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stdout);
    let n: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("refused "))
        .and_then(|r| r.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no refused line: {text}"));
    assert!(n > 0, "{text}");
    let out = rsskit()
        .args(["udp-load", "--target", &target, "--duration", "0.5", "--rate", "100", "--json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["refused"].as_u64().unwrap() > 0, "{v}");
    assert_eq!(v["cut_short"], true, "{v}");
}

#[test]
fn paced_gso_bursts_share_the_rate_evenly_over_the_streams() {
    // --burst 16 --gso 16 over 2 streams: whole bursts, each stream its
    // turn. A late pass once sent a burst plus a stray remainder, which went
    // to the other stream as a short burst: 18,624 / 1,371 datagrams.
    let (_echo, addr) = echo_on_loopback(&[]);
    let out = rsskit()
        .args(["udp-load", "--target", &addr, "--streams", "2", "--rate", "20000", "--burst", "16"])
        .args(["--gso", "16", "--duration", "1", "--drain", "0.5", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let sent: Vec<u64> =
        v["streams"].as_array().unwrap().iter().map(|s| s["sent"].as_u64().unwrap()).collect();
    assert_eq!(sent.len(), 2, "{v}");
    assert!(sent[0].abs_diff(sent[1]) <= 16, "each stream gets half, within one burst: {sent:?}");
    assert!(sent.iter().all(|n| n % 16 == 0), "whole GSO sends of 16 only: {sent:?}");
    assert!(sent[0] + sent[1] > 10_000, "{sent:?}");
}

#[test]
fn load_server_going_away_is_an_error() {
    // The echo server stops after 1 s of a 4 s run: udp-load reports the
    // refusals and exits non-zero instead of ending early with status 0.
    let (_echo, addr) = echo_on_loopback(&["--duration", "1"]);
    let t = std::time::Instant::now();
    let out = rsskit()
        .args(["udp-load", "--target", &addr, "--duration", "4", "--rate", "200", "--json"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("went away") && stderr.contains("cut short"), "{stderr}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["echoed"].as_u64().unwrap() > 0, "{v}");
    assert!(v["refused"].as_u64().unwrap() > 0, "{v}");
    assert!(t.elapsed() < std::time::Duration::from_millis(3900), "{:?}", t.elapsed());
}

#[test]
fn load_unroutable_target() {
    // A namespace with only loopback (down): no route anywhere.
    netns::require_root_and_ip();
    let ns = Netns::new("rskn");
    ns.ip(&["link", "set", "lo", "down"]);
    let out = ns
        .command(&netns::rsskit())
        .args(["udp-load", "--target", "198.18.9.9:9", "--duration", "0.5"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "stderr: {err}");
    assert!(err.contains("unreachable"), "stderr: {err}");
    assert!(!err.contains("panicked"), "stderr: {err}");
}

#[test]
fn echo_port_in_use() {
    let holder = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let bind = holder.local_addr().unwrap().to_string();
    fails(&["udp-echo", "--bind", &bind, "--duration", "1"], 1, "in use");
}

#[test]
fn echo_bad_address() {
    fails(&["udp-echo", "--bind", "300.0.0.1:9", "--duration", "1"], 1, "--bind");
    fails(&["udp-echo", "--bind", "127.0.0.1", "--duration", "1"], 1, "--bind");
}

#[test]
fn echo_nonexistent_cpus() {
    fails(&["udp-echo", "--bind", "127.0.0.1:0", "--cpus", "4000", "--duration", "1"], 1, "does not exist");
    fails(&["demo", "--cpus", "4000"], 1, "does not exist");
}

#[test]
fn demo_every_stream_served_by_its_owner() {
    // No root, no setup: loopback only.
    let out = rsskit().args(["demo", "--duration", "1", "--json"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "demo failed: {err}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("demo --json");
    let streams = v["load"]["streams"].as_array().unwrap();
    let workers = v["server"]["workers"].as_array().unwrap();
    assert_eq!(streams.len(), 2 * workers.len(), "default: two streams per worker");
    let mut buckets: Vec<u64> = streams.iter().map(|s| s["bucket"].as_u64().unwrap()).collect();
    buckets.sort_unstable();
    buckets.dedup();
    assert_eq!(buckets.len(), streams.len(), "streams in distinct buckets");
    for s in streams {
        assert_eq!(s["match"], serde_json::Value::Bool(true), "{s}");
        assert!(s["echoed"].as_u64().unwrap() > 0);
    }
    assert_eq!(v["mismatched_streams"], serde_json::json!([]));
    for w in workers {
        assert_eq!(w["misdirected"].as_u64(), Some(0), "{w}");
        assert!(w["received"].as_u64().unwrap() > 0, "every worker served something: {w}");
    }
}

/// Paced by default, so every worker shows its share of the streams (the
/// load generator shares a CPU with one of them; unpaced, that one served
/// 7-14 times fewer datagrams here), and unpaced the text says why.
#[test]
fn demo_paces_streams_so_workers_serve_alike_and_says_why_when_not() {
    let out = rsskit().args(["demo", "--duration", "2", "--json"]).output().unwrap();
    assert!(out.status.success(), "demo failed: {}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("demo --json");
    assert_eq!(v["rate_per_stream"].as_u64(), Some(5000), "{v}");
    let got: Vec<u64> =
        v["server"]["workers"].as_array().unwrap().iter().map(|w| w["received"].as_u64().unwrap()).collect();
    let (lo, hi) = (*got.iter().min().unwrap(), *got.iter().max().unwrap());
    assert!(lo > 0 && (hi as f64) / (lo as f64) < 1.25, "workers served {got:?}: not alike");
    let out = rsskit().args(["demo", "--duration", "0.5", "--rate", "0"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    // The generator runs on the last online CPU, which is always a worker's by default.
    assert!(text.contains("note: the load generator ran unpaced on CPU"), "{text}");
}

#[test]
fn demo_text_ends_with_a_verdict() {
    let out = rsskit().args(["demo", "--duration", "0.5"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.lines().last().unwrap_or("").starts_with("verdict: OK"), "{text}");
    assert!(text.contains("worker 0 on CPU"), "{text}");
}

#[test]
fn echo_rcvbuf_defaults_to_4_mib_and_reports_the_grant() {
    let rmem_max: u64 =
        std::fs::read_to_string("/proc/sys/net/core/rmem_max").unwrap().trim().parse().unwrap();
    let run = |extra: &[&str]| {
        let out = rsskit()
            .args(["udp-echo", "--bind", "127.0.0.1:0", "--cpus", "0", "--duration", "0.3", "--json"])
            .args(extra)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "{err}");
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
        (v, err)
    };
    let (v, err) = run(&[]);
    assert_eq!(v["rcvbuf"]["requested"], 4 << 20);
    assert_eq!(v["rcvbuf"]["granted"].as_u64(), Some(2 * (4u64 << 20).min(rmem_max)), "{v}");
    assert!(err.contains("SO_RCVBUF: asked 4194304 bytes, granted"), "{err}");
    let (v, _) = run(&["--rcvbuf", "1000000"]);
    assert_eq!(v["rcvbuf"]["requested"], 1_000_000);
    assert_eq!(v["rcvbuf"]["granted"].as_u64(), Some(2 * 1_000_000u64.min(rmem_max)));
    let (v, err) = run(&["--rcvbuf", "0"]);
    assert!(v["rcvbuf"]["requested"].is_null(), "{v}");
    assert!(err.contains("SO_RCVBUF: the kernel default"), "{err}");
}

/// Refused by the argument parser: exit 2, the first stderr line names
/// the flag and its range, nothing but clap's hint after it.
fn range_error(args: &[&str], flag: &str) {
    let out = rsskit().args(args).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "rsskit {}: stderr: {err}", args.join(" "));
    let first = err.lines().next().unwrap_or("");
    assert!(
        first.starts_with("error: invalid value") && first.contains(flag),
        "rsskit {}: {err}",
        args.join(" ")
    );
    assert!(["range", "at most", "below"].iter().any(|w| first.contains(w)), "no range named: {first}");
    assert!(!err.contains("panicked") && !err.contains("udp-echo:"), "{err}");
}

#[test]
fn out_of_range_numbers_are_refused_at_parse_time() {
    // 1e300 s used to reach Duration::from_secs_f64 and panic.
    range_error(&["udp-echo", "--bind", "127.0.0.1:0", "--duration", "1e300"], "--duration");
    range_error(&["udp-echo", "--bind", "127.0.0.1:0", "--duration", "nan"], "--duration");
    // Above a C int: used to be truncated silently by setsockopt.
    range_error(&["udp-echo", "--bind", "127.0.0.1:0", "--rcvbuf", "99999999999999"], "--rcvbuf");
    // The demo used to print its banner before refusing the size.
    range_error(&["demo", "--size", "1"], "--size");
    range_error(&["demo", "--streams", "0"], "--streams");
}

#[test]
fn echo_sigint_prints_progress_and_exact_final_counters() {
    use std::time::Duration;
    let (mut srv, at) = echo_on_loopback(&["--json"]);
    let at: std::net::SocketAddr = at.parse().unwrap();
    srv.wait_for("ready", Duration::from_secs(20));
    let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut buf = [0u8; 2048];
    for i in 0..50u8 {
        s.send_to(&[i; 100], at).unwrap();
        let (n, _) = s.recv_from(&mut buf).unwrap();
        assert_eq!(&buf[..n], &[i; 100][..]);
    }
    // One progress line a second, on stderr with --json.
    srv.wait_for(" pps ", Duration::from_secs(3));
    let (st, out, _) = srv.signal_and_wait(libc::SIGINT, Duration::from_secs(3));
    assert!(st.success(), "exit status on SIGINT: {st:?}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("one JSON object on stdout");
    assert_eq!(v["totals"]["received"], 50, "{v}");
    assert_eq!(v["totals"]["sent"], 50, "{v}");
    assert_eq!(v["workers"][0]["received"], 50, "{v}");
}

#[test]
fn load_sigint_stops_early_with_a_summary() {
    use std::time::{Duration, Instant};
    let (mut srv, at) = echo_on_loopback(&["--duration", "30", "--json"]);
    srv.wait_for("ready", Duration::from_secs(20));
    let mut load = common::proc::Running::spawn(&[
        "udp-load",
        "--target",
        &at,
        "--streams",
        "2",
        "--rate",
        "2000",
        "--duration",
        "30",
        "--server-cpus",
        "1",
        "--drain",
        "0.3",
        "--json",
    ]);
    load.wait_for(" sent ", Duration::from_secs(10));
    let t = Instant::now();
    let (st, out, _) = load.signal_and_wait(libc::SIGINT, Duration::from_secs(5));
    assert!(t.elapsed() < Duration::from_secs(5));
    assert!(st.success(), "{st:?}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("one JSON object on stdout");
    let (sent, echoed, lost) =
        (v["sent"].as_u64().unwrap(), v["echoed"].as_u64().unwrap(), v["lost"].as_u64().unwrap());
    assert!((1000..30_000).contains(&sent), "stopped early: {v}");
    assert_eq!(echoed + lost, sent, "{v}");
    let (st, out, _) = srv.signal_and_wait(libc::SIGINT, Duration::from_secs(3));
    assert!(st.success());
    let s: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(s["totals"]["sent"].as_u64(), Some(echoed), "server echoes = client echoes: {s}");
}

#[test]
fn demo_sigint_stops_early_and_still_reports() {
    use std::time::Duration;
    let mut demo = common::proc::Running::spawn(&["demo", "--duration", "60", "--json"]);
    // One line a second, on stderr with --json.
    demo.wait_for(" pps per worker: ", Duration::from_secs(20));
    let (st, out, _) = demo.signal_and_wait(libc::SIGINT, Duration::from_secs(5));
    assert!(st.success(), "{st:?}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("one JSON object on stdout");
    assert!(v["load"]["elapsed_s"].as_f64().unwrap() < 30.0, "stopped early: {v}");
    let (sent, echoed, lost) = (
        v["load"]["sent"].as_u64().unwrap(),
        v["load"]["echoed"].as_u64().unwrap(),
        v["load"]["lost"].as_u64().unwrap(),
    );
    assert!(echoed > 0 && echoed + lost == sent, "{v}");
    // Every echo the client counted was sent by the server; an echo the
    // server sent after the client's 500 ms drain (a loaded host) is in the
    // client's `lost`, so the server's sent lies between the two.
    let server_sent = v["server"]["totals"]["sent"].as_u64().unwrap();
    assert!(
        echoed <= server_sent && server_sent <= echoed + lost,
        "echoed <= server sent <= echoed + lost: {v}"
    );
}

/// Context switches of thread `tid` of process `pid` so far (voluntary and
/// not, from /proc/PID/task/TID/status).
fn context_switches(pid: i32, tid: i32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/status")).unwrap();
    status
        .lines()
        .filter(|l| l.starts_with("voluntary_ctxt_switches:") || l.starts_with("nonvoluntary_ctxt_switches:"))
        .map(|l| l.split(':').nth(1).unwrap().trim().parse::<u64>().unwrap())
        .sum()
}

/// The main thread sleeps until its next per-second line (a signal wakes it
/// at once) instead of waking every 50 ms to look at the stop flag: those
/// wake-ups cost the server CPU per datagram (issue 24). A count, not a
/// timing: ~40 switches in 2 s before, ~2 now.
#[test]
fn echo_main_thread_sleeps_until_its_next_line_and_wakes_on_sigterm() {
    use std::time::Duration;
    let mut srv =
        common::proc::Running::spawn(&["udp-echo", "--bind", "127.0.0.1:0", "--cpus", "0", "--json"]);
    srv.wait_for("ready", Duration::from_secs(20));
    let pid = srv.pid();
    let before = context_switches(pid, pid);
    std::thread::sleep(Duration::from_secs(2));
    let woke = context_switches(pid, pid) - before;
    assert!(woke <= 10, "main thread switched {woke} times in 2 s while idle (one line a second expected)");
    let (st, out, _) = srv.signal_and_wait(libc::SIGTERM, Duration::from_secs(3));
    assert!(st.success(), "exit status on SIGTERM: {st:?}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("one JSON object on stdout");
    assert_eq!(v["totals"]["received"], 0, "{v}");
}
