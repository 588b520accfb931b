//! CI's short mode of `bench/scale` (issue 36): the script runs every
//! comparison at 1 and 2 workers with this test's rsskit build and writes
//! JSON and an SVG whose shape and arithmetic are checked here. Not a timed
//! test: the figures only have to be real (above zero) and consistent.
//! Needs nginx and wrk (`scripts/install-deps.sh`); without them the HTTP
//! step is "not run", the script exits 1 and this test fails, loudly.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

const COMPARISONS: [&str; 6] = ["udp", "udp-gso", "pipeline", "firewall", "http-close", "http-keepalive"];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs())
}

fn median(mut xs: Vec<f64>) -> f64 {
    assert!(!xs.is_empty());
    xs.sort_by(f64::total_cmp);
    let n = xs.len();
    if n % 2 == 1 {
        xs[n / 2]
    } else {
        (xs[n / 2 - 1] + xs[n / 2]) / 2.0
    }
}

/// The throughput a point reports, recomputed from its raw figures.
fn from_raw(name: &str, workers: f64, raw: &Value, side: &str) -> f64 {
    let key = if side == "ours" { "rsskit" } else { "peer" };
    let list = |k: &str| -> Vec<f64> {
        raw[k]
            .as_array()
            .unwrap_or_else(|| panic!("{name}: raw {k}: {raw}"))
            .iter()
            .map(|x| x.as_f64().unwrap())
            .collect()
    };
    match name {
        // Capacity: W x 1 s / server CPU per echoed datagram, in k datagrams/s.
        "udp" | "udp-gso" => {
            let runs = raw[key].as_array().unwrap().iter().filter(|r| r["echoed"].as_u64() > Some(0));
            let ns = runs.map(|r| r["ns_schedstat"].as_f64().unwrap()).collect();
            workers * 1e6 / median(ns)
        }
        "pipeline" => median(list(&format!("{key}_mpps"))),
        // The benchmark's own figure: the median of its runs.
        "firewall" => {
            median(raw[key]["runs_mpps"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect())
        }
        _ => {
            let rps = raw[key].as_array().unwrap().iter().map(|r| r["req_per_s"].as_f64().unwrap()).collect();
            median(rps)
        }
    }
}

#[test]
fn short_mode_at_two_workers() {
    let ncpu = std::thread::available_parallelism().map_or(1, |n| n.get());
    assert!(ncpu >= 2, "bench/scale --max-workers 2 needs 2 online CPUs, this machine has {ncpu}");
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("bench_scale");
    std::fs::create_dir_all(&dir).unwrap();
    let (json, svg) = (dir.join("scale.json"), dir.join("scale.svg"));
    let _ = std::fs::remove_file(&json);
    let _ = std::fs::remove_file(&svg);
    let out = Command::new(root().join("bench/scale"))
        .args(["--short", "--max-workers", "2", "--rsskit", env!("CARGO_BIN_EXE_rsskit"), "--json"])
        .arg(&json)
        .arg("--svg")
        .arg(&svg)
        // The C peers are compiled here, not into the workspace's target/.
        .env("CARGO_TARGET_DIR", &dir)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "bench/scale: {}\n{stdout}\n{stderr}", out.status);

    let v: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(v["mode"], "short");
    assert_eq!(v["points"], serde_json::json!([1, 2]));
    assert!(v["machine_line"].as_str().is_some_and(|m| m.contains("CPUs")), "{}", v["machine_line"]);
    assert!(v["load_start"].as_str().is_some() && v["load_end"].as_str().is_some());
    let comps = v["comparisons"].as_array().unwrap();
    for name in COMPARISONS {
        let c = comps.iter().find(|c| c["name"] == name).unwrap_or_else(|| panic!("no {name} in {v}"));
        assert!(c["not_run"].is_null(), "{name}: {}", c["not_run"]);
        assert!(
            c["split"].as_str().is_some_and(|s| s.contains("CPU")),
            "{name}: no CPU split: {}",
            c["split"]
        );
        let pts = c["points"].as_array().unwrap();
        let workers: Vec<u64> = pts.iter().map(|p| p["workers"].as_u64().unwrap()).collect();
        assert_eq!(workers, [1, 2], "{name}");
        let at = |w: usize, k: &str| pts[w - 1][k].as_f64().unwrap_or_else(|| panic!("{name} {w}w {k}: {c}"));
        for w in [1, 2] {
            for side in ["ours", "peer"] {
                let x = at(w, side);
                assert!(x > 0.0 && x.is_finite(), "{name} {w}w {side}: {x}");
                let raw = from_raw(name, w as f64, &pts[w - 1]["raw"], side);
                assert!(close(x, raw), "{name} {w}w {side}: {x} but its raw figures give {raw}");
                // Efficiency as defined: throughput at W / (W x throughput at 1).
                let eff = x / (w as f64 * at(1, side));
                assert!(close(at(w, &format!("{side}_efficiency")), eff), "{name} {w}w {side} efficiency");
            }
            assert!(close(at(w, "ours_over_peer"), at(w, "ours") / at(w, "peer")), "{name} {w}w ours/peer");
        }
        // Every table is printed, with its split.
        assert!(stdout.contains(c["title"].as_str().unwrap()), "{name}: no table in\n{stdout}");
    }
    // On 2 CPUs the 2-worker HTTP point shares a CPU with the load: said, not hidden.
    let http = comps.iter().find(|c| c["name"] == "http-close").unwrap();
    assert_eq!(http["points"][1]["shares_cpus_with_load"], ncpu == 2, "{http}");
    if ncpu == 2 {
        assert!(stdout.contains("(shared with the servers)"), "{stdout}");
    }

    // The SVG: a panel per comparison with the three curves, whose data
    // are the JSON's figures (the ideal line: W x rsskit at 1 worker).
    let text = std::fs::read_to_string(&svg).unwrap();
    let doc = roxmltree::Document::parse(&text).unwrap_or_else(|e| panic!("SVG is not XML: {e}"));
    for name in COMPARISONS {
        let c = comps.iter().find(|c| c["name"] == name).unwrap();
        let one = c["points"][0]["ours"].as_f64().unwrap();
        let panel = doc
            .descendants()
            .find(|n| n.attribute("class") == Some("panel") && n.attribute("data-comparison") == Some(name))
            .unwrap_or_else(|| panic!("no SVG panel for {name}"));
        for (class, want) in [
            ("ours", [c["points"][0]["ours"].as_f64().unwrap(), c["points"][1]["ours"].as_f64().unwrap()]),
            ("peer", [c["points"][0]["peer"].as_f64().unwrap(), c["points"][1]["peer"].as_f64().unwrap()]),
            ("ideal", [one, 2.0 * one]),
        ] {
            let line = panel
                .descendants()
                .find(|n| n.has_tag_name("polyline") && n.attribute("class") == Some(class))
                .unwrap_or_else(|| panic!("{name}: no {class} curve"));
            assert_eq!(line.attribute("points").unwrap().split_whitespace().count(), 2, "{name} {class}");
            let data: Vec<f64> = line
                .attribute("data-points")
                .unwrap()
                .split_whitespace()
                .map(|p| p.split_once(':').unwrap().1.parse().unwrap())
                .collect();
            for (got, want) in data.iter().zip(want) {
                assert!((got - want).abs() <= 1e-5 * want, "{name} {class}: {got} vs {want}");
            }
        }
    }
}
