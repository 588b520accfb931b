//! `rsskit firewall` on the crafted captures: counters in --json, the
//! output capture, the locked baseline, and bad input (rule errors with
//! line and column, missing files, bad specs).

use assert_cmd::Command;
use serde_json::Value;
use std::path::PathBuf;

fn rsskit() -> Command {
    Command::cargo_bin("rsskit").unwrap()
}

fn testdata(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../rsskit-dataplane/testdata/firewall").join(name)
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("rsskit-fw-cli-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d.join(name)
}

fn rules_file(name: &str, scenario: &str) -> PathBuf {
    let j: Value =
        serde_json::from_str(&std::fs::read_to_string(testdata(&format!("{scenario}.json"))).unwrap())
            .unwrap();
    let p = tmp(name);
    std::fs::write(&p, j["rules"].as_str().unwrap()).unwrap();
    p
}

fn rule(v: &Value, number: u64) -> (u64, u64) {
    let r = v["rules"].as_array().unwrap().iter().find(|r| r["number"] == number).unwrap();
    (r["packets"].as_u64().unwrap(), r["bytes"].as_u64().unwrap())
}

#[test]
fn basic_capture_counters_and_output() {
    let rules = rules_file("basic.rules", "basic");
    let out_pcap = tmp("basic-out.pcap");
    for (workers, locked) in [("1", false), ("2", false), ("2", true)] {
        let mut cmd = rsskit();
        cmd.args(["firewall", "--rules"]).arg(&rules);
        cmd.arg("--in").arg(format!("pcap:{}", testdata("basic.pcap").display()));
        cmd.arg("--out").arg(format!("pcap:{}", out_pcap.display()));
        cmd.args(["--workers", workers, "--me", "10.0.0.1", "--json", "--quiet"]);
        if locked {
            cmd.arg("--locked");
        }
        let out = cmd.output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        let j: Value =
            serde_json::from_str(&std::fs::read_to_string(testdata("basic.json")).unwrap()).unwrap();
        for (num, c) in j["counters"].as_object().unwrap() {
            let n: u64 = num.parse().unwrap();
            assert_eq!(
                rule(&v, n),
                (c[0].as_u64().unwrap(), c[1].as_u64().unwrap()),
                "rule {n}, workers {workers}"
            );
        }
        let passes = j["packets"].as_array().unwrap().iter().filter(|p| p["pass"] == true).count() as u64;
        assert_eq!(v["total"]["passed"].as_u64().unwrap(), passes);
        assert_eq!(v["sent"].as_u64().unwrap(), passes);
        assert_eq!(v["inputs"].as_u64().unwrap(), j["packets"].as_array().unwrap().len() as u64);
        assert_eq!(v["per_worker"].as_array().unwrap().len(), workers.parse::<usize>().unwrap());
        // The output capture holds exactly the passed frames.
        let back = rsskit_dataplane::io::pcap::read_all(&out_pcap).unwrap();
        assert_eq!(back.len() as u64, passes);
    }
}

#[test]
fn synflood_limit_and_text_output() {
    let rules = rules_file("flood.rules", "synflood");
    let out = rsskit()
        .args(["firewall", "--rules"])
        .arg(&rules)
        .arg("--in")
        .arg(format!("pcap:{}", testdata("synflood.pcap").display()))
        .args(["--workers", "2", "--me", "10.0.0.1", "--states-max", "1000", "--quiet"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("allow tcp from any to me 80 setup keep-state"), "{text}");
    assert!(text.contains("worker 0:") && text.contains("worker 1:"), "{text}");
    let states: i64 = text
        .lines()
        .last()
        .unwrap()
        .split("states ")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no states in {text}"));
    assert!((950..=1050).contains(&states), "{states}");
}

#[test]
fn rule_errors_name_line_and_column() {
    let p = tmp("bad.rules");
    std::fs::write(&p, "check-state\nallow tcp from any to me 80 setup keep-stat\n").unwrap();
    let out = rsskit()
        .args(["firewall", "--me", "10.0.0.1", "--rules"])
        .arg(&p)
        .arg("--in")
        .arg(format!("pcap:{}", testdata("basic.pcap").display()))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.starts_with("rsskit: error: "), "{err}");
    assert!(err.contains("line 2, column 35: expected an option"), "{err}");
    assert!(err.contains("found 'keep-stat'"), "{err}");
}

#[test]
fn rule_file_errors_users_make() {
    // `me` without --me, and a file that is not UTF-8: line and column.
    let pcap = format!("pcap:{}", testdata("basic.pcap").display());
    let run = |body: &[u8], name: &str| {
        let p = tmp(name);
        std::fs::write(&p, body).unwrap();
        let out = rsskit().args(["firewall", "--rules"]).arg(&p).args(["--in", &pcap]).output().unwrap();
        assert_eq!(out.status.code(), Some(1));
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let err = run(b"check-state\nallow tcp from any to me 80 setup keep-state\n", "me.rules");
    assert!(err.contains("line 2, column 23: expected") && err.contains("--me"), "{err}");
    let err = run(b"check-state\n# r\xe9gles\nallow ip from any to any\n", "latin1.rules");
    assert!(err.contains("line 2, column 4: expected UTF-8 text, found byte 0xe9"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn bad_invocations() {
    let rules = rules_file("ok.rules", "basic");
    // Missing capture.
    let out = rsskit()
        .args(["firewall", "--rules"])
        .arg(&rules)
        .args(["--me", "10.0.0.1", "--in", "pcap:/nonexistent.pcap"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("does not exist"));
    // Missing rule file.
    let out =
        rsskit().args(["firewall", "--rules", "/nonexistent.rules", "--in", "pcap:x"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot read rule file"));
    // Bad specs and counts: clap errors.
    for args in [
        vec!["--in", "gen"],
        vec!["--in", "pcap:x", "--out", "tcp:1"],
        vec!["--in", "pcap:x", "--workers", "0"],
        vec!["--in", "pcap:x", "--me", "10.0.0.300"],
    ] {
        let out = rsskit().args(["firewall", "--rules"]).arg(&rules).args(&args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
}

#[test]
fn bench_firewall_shape() {
    let out = rsskit()
        .args([
            "bench",
            "firewall",
            "--flows",
            "300",
            "--rounds",
            "1",
            "--runs",
            "1",
            "--workers",
            "1,2",
            "--json",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = v["results"].as_array().unwrap();
    assert_eq!(rows.len(), 4);
    for r in rows {
        assert!(r["mpps"].as_f64().unwrap() > 0.0, "{r}");
        assert!(r["cpu_ns_per_frame"].as_f64().unwrap() > 0.0, "{r}");
    }
    assert!(v["per_worker_vs_locked_at_max_workers"].as_f64().is_some());
}

#[test]
fn both_engines_same_counters_netisr_runs_redirect() {
    // Both engines (netisr is the default), the same exact counters.
    let rules = rules_file("netisr.rules", "basic");
    for engine in [None, Some("netisr"), Some("own")] {
        let mut cmd = rsskit();
        cmd.arg("firewall");
        if let Some(e) = engine {
            cmd.args(["--engine", e]);
        }
        let out = cmd
            .arg("--rules")
            .arg(&rules)
            .arg("--in")
            .arg(format!("pcap:{}", testdata("basic.pcap").display()))
            .args(["--workers", "2", "--me", "10.0.0.1", "--json", "--quiet"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["engine"], engine.unwrap_or("netisr"));
        let j: Value =
            serde_json::from_str(&std::fs::read_to_string(testdata("basic.json")).unwrap()).unwrap();
        for (num, c) in j["counters"].as_object().unwrap() {
            let n: u64 = num.parse().unwrap();
            assert_eq!(rule(&v, n), (c[0].as_u64().unwrap(), c[1].as_u64().unwrap()), "{engine:?} rule {n}");
        }
    }
    // Redirect rules run on netisr too: the hand-over goes over its rings.
    let rules = rules_file("redirect.rules", "redirect");
    let out = rsskit()
        .args(["firewall", "--engine", "netisr", "--rules"])
        .arg(&rules)
        .arg("--in")
        .arg(format!("pcap:{}", testdata("redirect.pcap").display()))
        .args(["--workers", "2", "--me", "10.0.0.1", "--json", "--quiet"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["engine"], "netisr");
    assert!(rule(&v, 200).0 > 0, "the redirect rule matched: {v}");
}
