//! `rsskit plan --rebalance` on the fixture tree (tests/fixtures/host6cpu,
//! copied to a temp dir): the queue IRQ counters are moved while it
//! measures, so the load per queue is known exactly.

mod common;

use serde_json::Value;
use std::fs;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Command, Stdio};

/// A temp copy of the fixture tree, removed on drop.
use common::fixture::{HostTree as Tree, FIXTURE};

/// Runs `plan --rebalance 2 --json`; once it says it is measuring, `during`
/// edits the tree. Returns eth0's plan.
fn plan(t: &Tree, during: impl FnOnce(&Path)) -> Value {
    let mut child = Command::new(assert_cmd::cargo::cargo_bin("rsskit"))
        .args(["plan", "--sysroot"])
        .arg(&t.0)
        .args(["--iface", "eth0", "--rebalance", "2", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    while !line.contains("measuring") {
        line.clear();
        assert!(err.read_line(&mut line).unwrap() > 0, "plan ended before measuring");
    }
    during(&t.0);
    let mut out = String::new();
    child.stdout.take().unwrap().read_to_string(&mut out).unwrap();
    assert!(child.wait().unwrap().success());
    let v: Value = serde_json::from_str(&out).unwrap();
    v["devices"][0].clone()
}

fn fixture_table() -> Vec<u64> {
    let j: Value =
        serde_json::from_str(&fs::read_to_string(Path::new(FIXTURE).join("ethtool/eth0.json")).unwrap())
            .unwrap();
    j["rss"]["table"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap()).collect()
}

fn note(d: &Value) -> String {
    d["notes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|n| n.as_str())
        .find(|n| n.starts_with("rebalance:"))
        .unwrap()
        .to_string()
}

#[test]
fn no_traffic_keeps_the_current_table() {
    let t = Tree::new("idle");
    let d = plan(&t, |_| {});
    let table: Vec<u64> = d["table"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap()).collect();
    assert_eq!(table, fixture_table());
    assert!(note(&d).contains("no traffic"), "{d}");
}

#[test]
fn entries_move_from_the_busiest_queue() {
    let t = Tree::new("busy");
    // Queue 0 (IRQ 40) takes 8000 interrupts, queues 1-3 1000 each: the
    // table (queues 0,1 alternating) gives queue 0's entries to the others.
    let d = plan(&t, |root| {
        let p = root.join("proc/interrupts");
        let s = fs::read_to_string(&p)
            .unwrap()
            .replace(" 900 ", " 8900 ")
            .replace(" 800 ", " 1800 ")
            .replace(" 700 ", " 1700 ")
            .replace(" 600 ", " 1600 ");
        fs::write(p, s).unwrap();
    });
    let before = fixture_table();
    let after: Vec<u64> = d["table"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap()).collect();
    assert_eq!(after.len(), before.len());
    let moved: Vec<usize> = (0..before.len()).filter(|&i| before[i] != after[i]).collect();
    assert!(!moved.is_empty(), "{d}");
    assert!(
        moved.iter().all(|&i| before[i] == 0 && after[i] != 0),
        "only the busiest queue's entries move: {after:?}"
    );
    for q in 1..4 {
        assert!(after.contains(&q), "queue {q} got entries: {after:?}");
    }
    let n = note(&d);
    assert!(n.contains("irqs/s") && n.contains("entries moved"), "{n}");
    // Queues loaded 8000:1000:1000:1000: imbalance before = 8000 / 2750 = 2.91.
    let nums: Vec<f64> = n
        .split("imbalance ")
        .nth(1)
        .unwrap()
        .split(" -> ")
        .take(2)
        .map(|x| x.split_whitespace().next().unwrap().parse().unwrap())
        .collect();
    assert!((nums[0] - 8000.0 / 2750.0).abs() < 0.01, "{n}");
    assert!(nums[1] < nums[0] && nums[1] <= 1.5, "{n}");
}
