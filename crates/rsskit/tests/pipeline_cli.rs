//! `rsskit pipeline` end to end: bad input gives one clear error and exit 1
//! (clap's own errors exit 2); a capture of fragments goes through
//! reassembly and comes out whole; generated traffic is counted exactly.

use assert_cmd::Command;
use rsskit_dataplane::io::pcap::read_all;
use rsskit_dataplane::wire::{parse_ethernet, ParseConfig};
use serde_json::Value;
use std::path::PathBuf;
use std::time::Duration;

fn rsskit() -> Command {
    let mut c = Command::cargo_bin("rsskit").unwrap();
    c.timeout(Duration::from_secs(60));
    c
}

fn testdata(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../rsskit-dataplane/testdata").join(name)
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("rsskit-pipeline-cli-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d.join(name)
}

/// Runs and expects exit `code` with `needle` in stderr; stderr must be one line for code 1.
fn fails(args: &[&str], code: i32, needle: &str) {
    let out = rsskit().args(args).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "{args:?}: {err}");
    assert!(err.contains(needle), "{args:?}: expected {needle:?} in {err:?}");
    assert!(!err.contains("panicked"), "{err}");
    if code == 1 {
        assert_eq!(err.trim_end().lines().count(), 1, "one clear error line: {err:?}");
        assert!(err.starts_with("rsskit: error: "), "{err:?}");
    }
}

#[test]
fn bad_inputs() {
    fails(&["pipeline", "--in", "pcap:/nonexistent/capture.pcap"], 1, "does not exist");
    fails(&["pipeline", "--in", "afpacket:nosuchif0xyz"], 1, "no such interface: nosuchif0xyz");
    fails(&["pipeline", "--in", "afpacket:bad/name"], 1, "bad interface name");
    fails(&["pipeline", "--in", "gen", "--out", "afpacket:nosuchif0xyz"], 1, "no such interface");
    fails(&["pipeline", "--in", "gen", "--out", "pcap:/nonexistent/dir/o.pcap"], 1, "cannot create");
    fails(&["pipeline", "--in", "gen", "--workers", "2", "--cpus", "0"], 1, "--cpus lists 1 CPUs");
    fails(&["pipeline", "--in", "gen", "--cpus", "4000"], 1, "not online");
    let garbage = tmp("garbage.pcap");
    std::fs::write(&garbage, b"this is not a capture file at all").unwrap();
    fails(&["pipeline", "--in", &format!("pcap:{}", garbage.display())], 1, "not a pcap");
    // clap's errors: exit 2.
    fails(&["pipeline", "--in", "eth0"], 2, "is not an input");
    fails(&["pipeline", "--in", "gen", "--out", "nul"], 2, "is not an output");
    fails(&["pipeline", "--in", "gen", "--batch", "0"], 2, "batch");
    fails(&["pipeline", "--in", "gen", "--batch", "257"], 2, "batch");
    fails(&["pipeline", "--in", "gen", "--prefetch", "all"], 2, "prefetch");
    fails(&["pipeline", "--in", "gen", "--workers", "0"], 2, "workers");
    fails(&["pipeline", "--in", "gen", "--frag-timeout=-1"], 2, "seconds");
    fails(&["pipeline", "--in", "gen", "--frag-timeout", "0"], 2, "seconds");
}

#[test]
fn afpacket_without_permission() {
    // As nobody (no CAP_NET_RAW): one clear error about the permission.
    let bin = assert_cmd::cargo::cargo_bin("rsskit");
    let out = std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all"])
        .arg(&bin)
        .args(["pipeline", "--in", "afpacket:lo", "--duration", "1"])
        .output()
        .expect("setpriv (util-linux) is needed for this test");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("CAP_NET_RAW"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
}

#[test]
fn generated_traffic_counted_exactly() {
    for workers in ["1", "2"] {
        let out = rsskit()
            .args(["pipeline", "--in", "gen", "--packets", "20000", "--workers", workers, "--queue", "65536"])
            .args(["--batch", "16", "--prefetch", "both", "--json", "--quiet"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        let n: u64 = workers.parse().unwrap();
        let t = &v["total"];
        assert_eq!(t["input"], 20000 * n);
        assert_eq!(t["queue_drops"], 0);
        assert_eq!(t["handled"], 20000 * n, "{t}");
        assert_eq!(t["forwarded"], 20000 * n);
        assert_eq!(t["output"]["packets"], 20000 * n);
        assert_eq!(
            t["dispatched"].as_u64().unwrap() + t["queued"].as_u64().unwrap(),
            20000 * n,
            "every packet dispatched directly or queued"
        );
        assert_eq!(v["workers"].as_array().unwrap().len() as u64, n);
        assert!(v["mpps"].as_f64().unwrap() > 0.0);
    }
}

#[test]
fn fragments_capture_reassembled_into_pcap() {
    let out_path = tmp("reassembled.pcap");
    let out = rsskit()
        .args(["pipeline", "--in"])
        .arg(format!("pcap:{}", testdata("frags.pcap").display()))
        .arg("--out")
        .arg(format!("pcap:{}", out_path.display()))
        .args(["--workers", "2", "--udp-4tuple", "--json", "--quiet"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let t = &v["total"];
    // frags.expect: the datagrams marked "complete" (reassembled; GRE ones decapsulated too).
    let expect = std::fs::read_to_string(testdata("frags.expect")).unwrap();
    let complete: Vec<&str> =
        expect.lines().filter(|l| l.split_whitespace().nth(1) == Some("complete")).collect();
    assert!(!complete.is_empty());
    assert_eq!(t["reassembled"].as_u64().unwrap(), complete.len() as u64, "{t}");
    assert!(t["drops"].as_u64().unwrap() > 0, "the capture's overlaps are dropped");
    let frames = read_all(&out_path).unwrap();
    assert_eq!(frames.len() as u64, t["forwarded"].as_u64().unwrap());
    // Every written datagram is whole and matches one of the expected IP packets.
    let wanted: Vec<Vec<u8>> = complete
        .iter()
        .filter_map(|l| l.split_whitespace().find_map(|w| w.strip_prefix("ip=")))
        .map(|h| (0..h.len() / 2).map(|i| u8::from_str_radix(&h[2 * i..2 * i + 2], 16).unwrap()).collect())
        .collect();
    for (_, f) in &frames {
        let p = parse_ethernet(f, &ParseConfig::default()).unwrap();
        assert!(!p.outer.is_fragment());
        let ip = &f[14..];
        assert!(
            wanted.iter().any(|w| w == ip) || p.inner.is_none(),
            "output datagram not among the expected ones"
        );
    }
    let reassembled_out = frames.iter().filter(|(_, f)| wanted.iter().any(|w| w == &f[14..])).count();
    assert!(
        reassembled_out >= complete.len() - 1,
        "{reassembled_out} of {} reassembled datagrams written",
        complete.len()
    );
}

#[test]
fn pcap_loop_and_duration() {
    let out = rsskit()
        .args(["pipeline", "--in"])
        .arg(format!("pcap:{}", testdata("parse.pcap").display()))
        .args(["--loop", "3", "--json", "--quiet"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let once = read_all(&testdata("parse.pcap")).unwrap().len() as u64;
    assert_eq!(v["total"]["input"].as_u64().unwrap(), 3 * once);
    // A live-like source stopped by --duration: capture timing of a looped file.
    let t0 = std::time::Instant::now();
    let out = rsskit()
        .args([
            "pipeline",
            "--in",
            "gen",
            "--packets",
            "1000000000000",
            "--duration",
            "1",
            "--json",
            "--quiet",
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    let el = t0.elapsed();
    assert!(el < Duration::from_secs(10), "{el:?}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["elapsed_s"].as_f64().unwrap() >= 1.0);
}
