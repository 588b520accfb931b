//! The UDP offload mode on the command line: printed in udp-echo's
//! startup line and --json, turned off by --no-offload; udp-load's --gso
//! limits give one clear error line. Loopback only, bounded by --duration.

mod common;

use assert_cmd::Command;

fn rsskit() -> Command {
    let mut c = Command::cargo_bin("rsskit").unwrap();
    c.timeout(std::time::Duration::from_secs(20));
    c
}

fn echo(extra: &[&str]) -> (String, serde_json::Value) {
    let out = rsskit()
        .args(["udp-echo", "--bind", "127.0.0.1:0", "--cpus", "0", "--duration", "0.3", "--json"])
        .args(extra)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let j = serde_json::from_slice(&out.stdout).expect("udp-echo --json");
    (String::from_utf8_lossy(&out.stderr).into_owned(), j)
}

#[test]
fn echo_prints_the_offload_mode() {
    let (err, j) = echo(&[]);
    let startup = err.lines().next().unwrap_or_default();
    assert!(startup.contains(", offload gro+gso"), "startup line: {startup}");
    assert_eq!(j["offload"]["gro"], true);
    assert_eq!(j["offload"]["gso"], true);
    let (err, j) = echo(&["--no-offload"]);
    assert!(err.lines().next().unwrap_or_default().contains("offload off (--no-offload)"), "{err}");
    assert_eq!(j["offload"]["gro"], false);
    assert_eq!(j["offload"]["off_because"], "--no-offload");
}

#[test]
fn load_gso_limits() {
    for (args, needle) in [
        (&["--gso", "0"][..], "--gso"),
        (&["--gso", "65"][..], "--gso"),
        (&["--gso", "16", "--size", "5000"][..], "above the largest UDP payload"),
    ] {
        let out = rsskit().args(["udp-load", "--target", "127.0.0.1:9"]).args(args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_ne!(out.status.code(), Some(0), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{err}");
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}

/// The scheduling policy (field 41 of /proc/PID/task/TID/stat: 0 SCHED_OTHER,
/// 3 SCHED_BATCH) of udp-echo's worker thread, and its `sched` in --json.
fn worker_policy(extra: &[&str]) -> (u32, serde_json::Value) {
    let bin = assert_cmd::cargo::cargo_bin("rsskit");
    let child = std::process::Command::new(bin)
        .args(["udp-echo", "--bind", "127.0.0.1:0", "--cpus", "0", "--duration", "1.5", "--json"])
        .args(extra)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let policy = common::proc::thread_policy(child.id(), "rsskit-w0");
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let err = String::from_utf8_lossy(&out.stderr);
    let want = extra.last().copied().unwrap_or("batch");
    assert!(err.lines().next().unwrap_or_default().ends_with(&format!(", sched {want}")), "{err}");
    (policy, serde_json::from_slice(&out.stdout).expect("udp-echo --json"))
}

#[test]
fn echo_workers_run_sched_batch_unless_told_otherwise() {
    let (policy, j) = worker_policy(&[]);
    assert_eq!(policy, 3, "SCHED_BATCH by default");
    assert_eq!(j["sched"], "batch");
    let (policy, j) = worker_policy(&["--sched", "normal"]);
    assert_eq!(policy, 0, "SCHED_OTHER with --sched normal");
    assert_eq!(j["sched"], "normal");
    let out = rsskit().args(["udp-echo", "--bind", "127.0.0.1:0", "--sched", "fifo"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("possible values: batch, normal"));
}
