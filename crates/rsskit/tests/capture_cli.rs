//! `rsskit capture DIR` and `--from DIR` end to end: this machine captured
//! and planned, checked and shown offline gives what the live host gives;
//! a capture is read-only and checked as untrusted input; a generated
//! big-host capture (crates/rsskit-host/tests/bighost) plans from the CLI.

#[path = "../../rsskit-host/tests/bighost/mod.rs"]
mod bighost;

use assert_cmd::Command;
use serde_json::Value;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

static SEQ: AtomicU32 = AtomicU32::new(0);

fn rsskit(args: &[&str]) -> std::process::Output {
    let mut c = Command::cargo_bin("rsskit").unwrap();
    c.timeout(Duration::from_secs(60));
    c.args(args).output().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A fresh path (not created) removed on drop.
fn fresh(tag: &str) -> bighost::Dir {
    let p = std::env::temp_dir().join(format!(
        "rsskit-capture-{tag}-{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = fs::remove_dir_all(&p);
    bighost::Dir(p)
}

fn s(p: &Path) -> String {
    p.display().to_string()
}

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            files(&e.path(), out);
        } else {
            out.push(e.path());
        }
    }
}

/// The same command live and on the capture: the same output and exit status.
fn same(dir: &Path, args: &[&str]) {
    let live = rsskit(args);
    let mut with: Vec<&str> = args.to_vec();
    let d = s(dir);
    with.extend(["--from", &d]);
    let from = rsskit(&with);
    assert_eq!(live.status.code(), from.status.code(), "{args:?}: {}", text(&from.stderr));
    assert_eq!(text(&live.stdout), text(&from.stdout), "{args:?} live vs --from");
}

#[test]
fn this_machine_planned_offline_as_live() {
    let dir = fresh("here");
    let out = rsskit(&["capture", &s(&dir.0)]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("captured"), "{}", text(&out.stdout));
    same(&dir.0, &["plan", "--json"]);
    same(&dir.0, &["plan"]);
    same(&dir.0, &["check", "--json"]);
    // info: the same, but for the queue -> NAPI -> IRQ map, which the live
    // kernel answers over netdev netlink, and the NIC's flow rules: a capture
    // holds neither yet, and says so; every queue's IRQ agrees.
    let live: serde_json::Value = serde_json::from_slice(&rsskit(&["info", "--json"]).stdout).unwrap();
    let from: serde_json::Value =
        serde_json::from_slice(&rsskit(&["info", "--json", "--from", &s(&dir.0)]).stdout).unwrap();
    let strip = |mut v: serde_json::Value| {
        for i in v["interfaces"].as_array_mut().unwrap() {
            i.as_object_mut().unwrap().remove("queue_map");
            i.as_object_mut().unwrap().remove("flow_rules");
            // Asked of the running kernel only: which interface answered,
            // rings, coalescing, context and rule support.
            for k in ["channels_via", "rss_via", "rings", "coalesce", "isolation"] {
                i.as_object_mut().unwrap().remove(k);
            }
            // The per-NAPI settings are netlink answers too (napi-get).
            i["napi"].as_object_mut().unwrap().remove("instances");
            for side in ["rx_queues", "tx_queues"] {
                for q in i[side].as_array_mut().unwrap() {
                    let q = q.as_object_mut().unwrap();
                    for k in ["napi_id", "napi_pid", "irq_source"] {
                        q.remove(k);
                    }
                }
            }
        }
        v
    };
    for i in from["interfaces"].as_array().unwrap() {
        assert_eq!(i["queue_map"]["kernel_unavailable"], "a capture holds no netdev netlink map", "{i}");
        assert_eq!(i["flow_rules"]["unreadable"], "a capture holds no flow rules", "{i}");
        assert_eq!(i["napi"]["instances"]["unavailable"], "a capture holds no per-NAPI settings", "{i}");
        for k in ["channels_via", "rss_via", "rings", "coalesce"] {
            assert!(i[k].is_null(), "a capture says nothing of {k}: {i}");
        }
        assert_eq!(i["isolation"]["unreadable"], "a capture holds no RSS contexts or flow rules", "{i}");
    }
    assert_eq!(strip(live), strip(from), "info --json live vs --from, the netlink map aside");
    // Only what rsskit reads: no address, statistics or process file.
    let mut all = Vec::new();
    files(&dir.0, &mut all);
    let allowed = [
        "sys/devices/system/",
        "sys/class/net/",
        "proc/interrupts",
        "proc/irq/",
        "proc/sys/net/core/",
        "ethtool/",
        "netdev_nl/",
        "capture.json",
    ];
    for f in &all {
        let rel = f.strip_prefix(&dir.0).unwrap().display().to_string();
        assert!(allowed.iter().any(|a| rel.starts_with(a)), "{rel} copied");
        assert!(
            !["address", "statistics", "phys_port", "uevent"].iter().any(|w| rel.contains(w)),
            "{rel} copied"
        );
    }
    let m: Value = serde_json::from_slice(&fs::read(dir.0.join("capture.json")).unwrap()).unwrap();
    assert_eq!(m["format"], 1);
    assert!(m["skipped"].is_array());
    // A capture goes into a new directory only.
    let again = rsskit(&["capture", &s(&dir.0)]);
    assert_eq!(again.status.code(), Some(1));
    assert!(text(&again.stderr).contains("already exists"), "{}", text(&again.stderr));
}

#[test]
fn a_capture_is_read_only_and_checked() {
    let cap = bighost::write(&bighost::vm_4(), &format!("ro{}", SEQ.fetch_add(1, Ordering::Relaxed)));
    let d = s(&cap.0);
    let before = fs::read(cap.0.join("ethtool/ens3.json")).unwrap();
    let out = rsskit(&["apply", "--from", &d]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("a capture is read-only"), "{}", text(&out.stderr));
    assert_eq!(fs::read(cap.0.join("ethtool/ens3.json")).unwrap(), before);
    let out = rsskit(&["check", "--from", &d, "--live"]);
    assert_eq!(out.status.code(), Some(2), "clap refuses --live with --from: {}", text(&out.stderr));

    // A malformed ethtool file: an error naming it, no panic.
    fs::write(cap.0.join("ethtool/ens3.json"), "{\"driver\": 7}").unwrap();
    let out = rsskit(&["plan", "--from", &d, "--iface", "ens3"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("ens3.json"), "{}", text(&out.stderr));
    fs::write(cap.0.join("ethtool/ens3.json"), &before).unwrap();

    // A symlink anywhere in it: refused before anything is read.
    std::os::unix::fs::symlink("/etc/passwd", cap.0.join("sys/class/net/ens3/mtu2")).unwrap();
    let out = rsskit(&["plan", "--from", &d]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("a symbolic link"), "{}", text(&out.stderr));
    fs::remove_file(cap.0.join("sys/class/net/ens3/mtu2")).unwrap();

    // Another format version.
    let m = fs::read_to_string(cap.0.join("capture.json")).unwrap();
    fs::write(cap.0.join("capture.json"), m.replace("\"format\": 1", "\"format\": 99")).unwrap();
    let out = rsskit(&["info", "--from", &d]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("capture format 99"), "{}", text(&out.stderr));
    fs::write(cap.0.join("capture.json"), m).unwrap();
    let out = rsskit(&["info", "--from", &d, "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
}

#[test]
fn bond_capture_plans_both_members_from_the_cli() {
    let cap =
        bighost::write(&bighost::isolated_64(), &format!("bond{}", SEQ.fetch_add(1, Ordering::Relaxed)));
    let out = rsskit(&["plan", "--from", &s(&cap.0), "--iface", "bond0", "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("bond0 is carried by eth0, eth1"), "{}", text(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let names: Vec<&str> =
        v["devices"].as_array().unwrap().iter().map(|d| d["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["eth0", "eth1"]);
    let out = rsskit(&["plan", "--from", &s(&cap.0), "--iface", "bond0"]);
    let t = text(&out.stdout);
    assert!(t.contains("note: rule isolated: CPUs 8-31"), "{t}");
    // An IRQ/application split: no IRQ on the application's CPUs, the servers run there.
    let out =
        rsskit(&["plan", "--from", &s(&cap.0), "--iface", "bond0", "--app-cpus", "0-3,32-35", "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let app = [0, 1, 2, 3, 32, 33, 34, 35];
    for d in v["devices"].as_array().unwrap() {
        for x in d["irqs"].as_array().unwrap() {
            let c = x["cpus"][0].as_u64().unwrap() as usize;
            assert!(!app.contains(&c) && !(8..32).contains(&c), "{}: IRQ on {c}", d["name"]);
        }
        assert_eq!(d["steering"]["mode"], "toeplitz");
        assert_eq!(d["steering"]["cpus"], serde_json::json!(app));
    }
    let out = rsskit(&["plan", "--from", &s(&cap.0), "--cpus", "0-7", "--app-cpus", "4-9"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("CPUs 4-7 are named both"), "{}", text(&out.stderr));
}
