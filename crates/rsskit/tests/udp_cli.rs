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

#[test]
fn load_size_out_of_range() {
    fails(&["udp-load", "--target", "127.0.0.1:9", "--size", "65508"], 1, "65507");
    fails(&["udp-load", "--target", "127.0.0.1:9", "--size", "39"], 1, "--size 39");
}

#[test]
fn load_zero_streams() {
    fails(&["udp-load", "--target", "127.0.0.1:9", "--streams", "0"], 1, "--streams must be at least 1");
}

#[test]
fn load_bad_addresses() {
    fails(&["udp-load", "--target", "300.1.1.1:9"], 1, "not an address");
    fails(&["udp-load", "--target", "127.0.0.1"], 1, "no port");
    fails(&["udp-load", "--target", "127.0.0.1:70000"], 1, "not an address");
    fails(&["udp-load", "--target", "0.0.0.0:9"], 1, "unspecified");
    fails(&["udp-load", "--target", "[::1]:9", "--src-net", "10.0.0.0/8", "--spread-buckets"], 1, "families");
    fails(&["udp-load", "--target", "127.0.0.1:9", "--src-net", "10.0.0.0/40"], 2, "prefix length");
}

#[test]
fn load_nonexistent_cpus() {
    fails(&["udp-load", "--target", "127.0.0.1:9", "--client-cpus", "4000"], 1, "does not exist");
    fails(&["udp-load", "--target", "127.0.0.1:9", "--server-cpus", "0-x"], 1, "--server-cpus");
}

#[test]
fn load_refused_target() {
    // A port with nothing on it: the kernel answers ICMP port unreachable.
    let port = std::net::UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let target = format!("127.0.0.1:{port}");
    fails(&["udp-load", "--target", &target, "--duration", "0.5", "--rate", "100"], 1, "ECONNREFUSED");
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
