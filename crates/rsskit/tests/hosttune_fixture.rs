//! `rsskit plan`, `apply` and `check` against a directory tree shaped like
//! `/sys` and `/proc` of a 6-CPU, 2-node machine with a 4-queue NIC
//! (tests/fixtures/host6cpu, copied to a temp dir per test; the ethtool
//! answers come from its ethtool/eth0.json, written through the SRSSH
//! request bytes). This is also the only place `net.core.rps_sock_flow_entries`
//! is written: it is global, never written on the real host by tests.

mod common;

use common::fixture::{copy_dir, files, FIXTURE};

use assert_cmd::Command;
use rsskit_core::ringmap::{PlanSpec, RingmapPlan};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

/// A copy of the fixture, removed on drop.
struct Tree(PathBuf);

static SEQ: AtomicU32 = AtomicU32::new(0);

impl Tree {
    fn new() -> Tree {
        let p = std::env::temp_dir().join(format!(
            "rsskit-hosttune-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = fs::remove_dir_all(&p);
        copy_dir(Path::new(FIXTURE), &p.join("root"));
        Tree(p)
    }
    fn root(&self) -> String {
        self.0.join("root").display().to_string()
    }
    fn path(&self, rel: &str) -> PathBuf {
        self.0.join("root").join(rel)
    }
    fn put(&self, rel: &str, text: &str) {
        let p = self.path(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, text).unwrap();
    }
    fn get(&self, rel: &str) -> String {
        fs::read_to_string(self.path(rel)).unwrap().trim().to_string()
    }
    /// sysfs/procfs files byte for byte (the fake driver file is compared
    /// by value: rsskit rewrites it).
    fn snapshot(&self) -> (BTreeMap<String, Vec<u8>>, Value) {
        let mut m = BTreeMap::new();
        files(&self.0.join("root"), &self.0.join("root"), &mut m);
        // rsskit's own lock file (run/rsskit.lock under a fixture tree) is no host setting.
        m.retain(|k, _| !k.starts_with("run/"));
        let eth = m.remove("ethtool/eth0.json").unwrap();
        (m, serde_json::from_slice(&eth).unwrap())
    }
    fn driver(&self) -> Value {
        serde_json::from_str(&fs::read_to_string(self.path("ethtool/eth0.json")).unwrap()).unwrap()
    }
    fn set_driver(&self, v: &Value) {
        fs::write(self.path("ethtool/eth0.json"), serde_json::to_string_pretty(v).unwrap()).unwrap();
    }
    fn rsskit(&self, args: &[&str]) -> std::process::Output {
        let mut c = Command::cargo_bin("rsskit").unwrap();
        c.timeout(Duration::from_secs(60)).current_dir(&self.0).args(args).args(["--sysroot", &self.root()]);
        c.output().unwrap()
    }
}

impl Drop for Tree {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// The output with runs of spaces squashed to one (the tables pad columns).
fn text(b: &[u8]) -> String {
    let s = String::from_utf8_lossy(b);
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if !(c == ' ' && out.ends_with(' ')) {
            out.push(c);
        }
    }
    out
}

/// The ringmap `plan` should follow for the fixture's 4-queue NIC
/// (unit 0, 128-entry table) over `ncpus` CPUs.
fn ringmap(ncpus: usize) -> RingmapPlan {
    RingmapPlan::new(PlanSpec { ncpus, rings: 4, unit: 0, pow2: false, tx_rings: None, table_len: 128 })
        .unwrap()
}

fn json_of(out: &std::process::Output) -> Value {
    assert!(out.status.success() || out.status.code() == Some(1), "{}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {}", text(&out.stdout)))
}

fn nums(v: &Value) -> Vec<usize> {
    v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as usize).collect()
}

#[test]
fn default_plan_uses_the_nic_node_topped_up_and_matches_the_ringmap() {
    let t = Tree::new();
    let v = json_of(&t.rsskit(&["plan", "--iface", "eth0", "--json"]));
    let d = &v["devices"][0];
    // Node 1 holds CPUs 3-5, the NIC has 4 queues: node 1 plus CPU 0.
    assert_eq!(nums(&d["cpus"]), vec![0, 3, 4, 5], "{d}");
    assert_eq!(d["hardware_rss"], true);
    let rp = ringmap(4);
    assert_eq!(nums(&d["table"]), rp.table);
    assert_eq!(d["table_mismatches"], rp.mismatches);
    assert_eq!(d["table_mismatches"], 0);
    // The fixture's table names rings 0 and 1 only: half its entries are off.
    assert_eq!(d["current_table_mismatches"], 64);
    let cpus = [0, 3, 4, 5];
    for q in 0..4 {
        assert_eq!(d["rx"][q]["cpu"], cpus[rp.rx.cpus()[q]]);
        assert_eq!(d["rx"][q]["irq"], 40 + q);
        assert_eq!(d["rx"][q]["rps_cpus"], json!([]), "hardware RSS: RPS off");
        assert_eq!(d["tx"][q]["cpu"], d["rx"][q]["cpu"], "combined channels: TX with RX");
        assert_eq!(d["irqs"][q]["irq"], 40 + q);
        assert_eq!(d["irqs"][q]["cpus"], json!([cpus[q]]));
    }
    assert_eq!(d["irqs"].as_array().unwrap().len(), 4, "the link IRQ 44 is left alone");
    // XPS: each queue CPU on its own queue; CPUs 1 and 2 (outside the set) spread.
    let mut all: Vec<usize> = (0..4).flat_map(|q| nums(&d["tx"][q]["xps_cpus"])).collect();
    all.sort_unstable();
    assert_eq!(all, vec![0, 1, 2, 3, 4, 5]);
    for (q, c) in cpus.iter().enumerate() {
        assert!(nums(&d["tx"][q]["xps_cpus"]).contains(c));
    }
    assert_eq!(d["steering"]["mode"], "cpu");
    assert_eq!(nums(&d["steering"]["cpus"]), vec![0, 3, 4, 5]);
    assert_eq!(d["key"], Value::Null);

    let out = t.rsskit(&["plan", "--iface", "eth0"]);
    assert!(out.status.success());
    let s = text(&out.stdout);
    assert!(s.contains("eth0 (ixgbe, NUMA node 1): hardware RSS, 4 RX / 4 TX queues, unit 0"), "{s}");
    assert!(s.contains("rx-1 3 41 eth0-TxRx-1"), "{s}");
    assert!(s.contains("mismatches 0 (now 64, fewest possible 0)"), "{s}");
    assert!(s.contains("--steer cpu --cpus 0,3-5"), "{s}");
}

#[test]
fn six_cpu_plan_is_the_ringmap_of_six_cpus() {
    let t = Tree::new();
    let v = json_of(&t.rsskit(&["plan", "--iface", "eth0", "--cpus", "0-5", "--json"]));
    let d = &v["devices"][0];
    let rp = ringmap(6);
    assert_eq!(d["grid"], rp.rx.grid());
    assert_eq!(d["grid"], 6);
    assert_eq!(nums(&d["table"]), rp.table);
    assert_eq!(d["table_mismatches"], rp.mismatches);
    assert_eq!(d["min_mismatches"], rp.min_mismatches);
    assert!(rp.mismatches < rp.replicate_mismatches, "the ringmap beats the replicated table");
    for q in 0..4 {
        assert_eq!(d["rx"][q]["cpu"], rp.rx.cpus()[q]);
    }
}

#[test]
fn bad_input_is_a_clear_error() {
    let t = Tree::new();
    let cases: [(&[&str], &str); 6] = [
        (&["plan", "--iface", "nope0"], "interface 'nope0' does not exist"),
        (&["plan", "--iface", "eth0", "--cpus", "0-9"], "CPU 6 is not online"),
        (&["plan", "--iface", "eth0", "--cpus", "5-1"], "--cpus"),
        (&["plan", "--iface", "eth0", "--key", "abcd"], "--key"),
        (&["plan", "--iface", "eth0", "--key", &"00".repeat(40)], "weak RSS key"),
        (&["apply", "--restore", "/nonexistent/save.json"], "/nonexistent/save.json"),
    ];
    for (args, want) in cases {
        let out = t.rsskit(args);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {}", text(&out.stdout));
        let err = text(&out.stderr);
        assert!(err.contains(want), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
    fs::write(t.0.join("notaplan.json"), "{\"hello\": 1}").unwrap();
    let out = t.rsskit(&["apply", "notaplan.json"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("is not a plan"), "{}", text(&out.stderr));
    let out = t.rsskit(&["apply", "notaplan.json", "--iface", "eth0"]);
    assert!(text(&out.stderr).contains("not both"), "{}", text(&out.stderr));
}

#[test]
fn dry_run_writes_nothing() {
    let t = Tree::new();
    let before = t.snapshot();
    let out = t.rsskit(&["apply", "--iface", "eth0", "--key", "symmetric", "--dry-run"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let s = text(&out.stdout);
    assert!(s.contains("IRQ 41 (eth0-TxRx-1) affinity 0-5 -> 3"), "{s}");
    assert!(s.contains("RSS key 6d5a56da255b0ec2..(40 bytes) -> 6d5a6d5a6d5a6d5a"), "{s}");
    assert!(s.contains("RSS indirection table"), "{s}");
    assert!(s.contains("64 entries change"), "{s}");
    assert!(s.contains("dry run: nothing written"), "{s}");
    assert_eq!(t.snapshot(), before);
    // The plan may come on stdin.
    let plan = t.rsskit(&["plan", "--iface", "eth0", "--json"]);
    let out = Command::cargo_bin("rsskit")
        .unwrap()
        .timeout(Duration::from_secs(60))
        .current_dir(&t.0)
        .args(["apply", "-", "--dry-run", "--sysroot", &t.root()])
        .write_stdin(plan.stdout)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("IRQ 43 (eth0-TxRx-3) affinity 0-5 -> 5"), "{}", text(&out.stdout));
    assert_eq!(t.snapshot(), before);
    assert!(fs::read_dir(&t.0).unwrap().count() == 1, "no save file on a dry run");
}

#[test]
fn apply_reads_back_check_says_aligned_restore_puts_it_back() {
    let t = Tree::new();
    let before = t.snapshot();
    let out = t.rsskit(&["check", "--json"]);
    assert_eq!(out.status.code(), Some(1), "the fixture starts misaligned");
    let plan = t.rsskit(&[
        "plan",
        "--iface",
        "eth0",
        "--key",
        "random",
        "--rps-flow-cnt",
        "1000",
        "--rps-sock-flow-entries",
        "30000",
        "--hash-fields",
        "udp4=4-tuple",
        "--json",
    ]);
    assert!(plan.status.success(), "{}", text(&plan.stderr));
    fs::write(t.0.join("plan.json"), &plan.stdout).unwrap();
    let p: Value = serde_json::from_slice(&plan.stdout).unwrap();
    let out = t.rsskit(&["apply", "plan.json", "--save", "saved.json"]);
    assert!(out.status.success(), "{}\n{}", text(&out.stdout), text(&out.stderr));
    let s = text(&out.stdout);
    assert!(s.contains("All 16 settings applied and read back."), "{s}");

    // Every value is where the plan says.
    for q in 0..4 {
        assert_eq!(
            t.get(&format!("proc/irq/{}/smp_affinity_list", 40 + q)),
            p["devices"][0]["rx"][q]["cpu"].to_string()
        );
        assert_eq!(t.get(&format!("sys/class/net/eth0/queues/rx-{q}/rps_flow_cnt")), "1024", "rounded up");
        assert_eq!(t.get(&format!("sys/class/net/eth0/queues/rx-{q}/rps_cpus")), "00000000");
        let xps = rsskit_linux::netdev::parse_hex_mask(
            &t.get(&format!("sys/class/net/eth0/queues/tx-{q}/xps_cpus")),
        )
        .unwrap();
        assert_eq!(xps, nums(&p["devices"][0]["tx"][q]["xps_cpus"]));
    }
    assert_eq!(t.get("proc/irq/44/smp_affinity_list"), "0-5", "the link IRQ is untouched");
    assert_eq!(t.get("proc/sys/net/core/rps_sock_flow_entries"), "32768");
    let drv = t.driver();
    assert_eq!(drv["rss"]["table"], p["devices"][0]["table"]);
    assert_eq!(drv["rss"]["key"], p["devices"][0]["key"]);
    assert_ne!(drv["rss"]["key"], before.1["rss"]["key"]);
    assert_eq!(drv["hash"]["udp4"], 0xf0, "udp4 now hashes ports too (ETHTOOL_SRXFH)");
    assert_eq!(drv["hash"]["udp6"], 0x30, "udp6 not asked for: unchanged");

    let out = t.rsskit(&["check", "--iface", "eth0"]);
    let s = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{s}");
    assert!(s.contains("eth0: aligned") && s.contains("verdict: aligned"), "{s}");

    // Applying again changes nothing.
    let out = t.rsskit(&["apply", "plan.json", "--save", "again.json"]);
    assert!(text(&out.stdout).contains("nothing to do"), "{}", text(&out.stdout));

    let out = t.rsskit(&["apply", "--restore", "saved.json"]);
    assert!(out.status.success(), "{}\n{}", text(&out.stdout), text(&out.stderr));
    assert!(text(&out.stdout).contains("All 16 settings applied"), "{}", text(&out.stdout));
    let after = t.snapshot();
    assert_eq!(after.0, before.0, "sysfs/procfs byte for byte");
    assert_eq!(after.1, before.1, "key and table as before");
}

fn mode(p: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777
}

#[test]
fn default_save_goes_to_a_private_state_dir_with_mode_0600() {
    let t = Tree::new();
    let out = t.rsskit(&["apply", "--iface", "eth0"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    // Not the current directory (it may be shared): the host's state dir,
    // here the tree's var/lib/rsskit.
    assert!(!fs::read_dir(&t.0).unwrap().any(|e| e
        .unwrap()
        .file_name()
        .to_string_lossy()
        .starts_with("rsskit-saved")));
    let dir = t.path("var/lib/rsskit");
    assert_eq!(mode(&dir), 0o700, "the save directory is private");
    let saved: Vec<String> = fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.starts_with("rsskit-saved-"))
        .collect();
    assert_eq!(saved.len(), 1, "{saved:?}");
    let name = &saved[0];
    assert!(name.ends_with("Z.json") && name.len() == "rsskit-saved-20260101T000000Z.json".len(), "{name}");
    assert_eq!(mode(&dir.join(name)), 0o600, "save files are root's only");
    let shown = dir.join(name).display().to_string();
    assert!(text(&out.stdout).contains(&format!("rsskit apply --restore {shown}")), "{}", text(&out.stdout));
    // A second apply in the same second takes another name, never overwrites.
    let out = t.rsskit(&["apply", "--iface", "eth0", "--key", "symmetric"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(fs::read_dir(&dir).unwrap().count(), 2);

    // An existing state dir others can write to is refused, nothing applied.
    let t = Tree::new();
    fs::create_dir_all(t.path("var/lib/rsskit")).unwrap();
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(t.path("var/lib/rsskit"), fs::Permissions::from_mode(0o777)).unwrap();
    let before = t.snapshot();
    let out = t.rsskit(&["apply", "--iface", "eth0"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));
    assert!(text(&out.stderr).contains("writable by no one else"), "{}", text(&out.stderr));
    assert_eq!(t.snapshot(), before);
}

#[test]
fn an_explicit_save_is_a_new_0600_file_never_a_symlink_or_an_old_save() {
    let t = Tree::new();
    let out = t.rsskit(&["apply", "--iface", "eth0", "--save", "s.json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(mode(&t.0.join("s.json")), 0o600);
    let saved = fs::read_to_string(t.0.join("s.json")).unwrap();
    assert!(saved.contains("\"version\": 2") && !saved.contains("path") && !saved.contains('/'), "{saved}");
    assert!(saved.contains("\"kind\": \"irq_affinity\"") && saved.contains("\"irq\": 41"), "{saved}");

    // A symlink planted where the save goes (a shared directory) is not
    // followed, and an earlier save is not overwritten.
    let t = Tree::new();
    fs::write(t.0.join("victim"), "precious\n").unwrap();
    std::os::unix::fs::symlink(t.0.join("victim"), t.0.join("link.json")).unwrap();
    fs::write(t.0.join("old.json"), "an earlier save\n").unwrap();
    let before = t.snapshot();
    for name in ["link.json", "old.json"] {
        let out = t.rsskit(&["apply", "--iface", "eth0", "--save", name]);
        assert_eq!(out.status.code(), Some(1), "{name}: {}", text(&out.stdout));
        assert!(text(&out.stderr).contains(name), "{name}: {}", text(&out.stderr));
        assert_eq!(t.snapshot(), before, "{name}: nothing applied");
    }
    assert_eq!(fs::read_to_string(t.0.join("victim")).unwrap(), "precious\n");
    assert_eq!(fs::read_to_string(t.0.join("old.json")).unwrap(), "an earlier save\n");
}

const SECRET: &str = "root:SECRET-HASH:0:0:root:/root:/bin/bash";

/// A save file of version 2 with these entries.
fn save_v2(entries: &[Value]) -> String {
    serde_json::to_string_pretty(&json!({"version": 2, "saved_at": 1, "settings": entries})).unwrap()
}

/// Runs `apply --restore` on `save`: must exit 1, change nothing, never
/// show the secret, and name `want` in its error.
fn refused(t: &Tree, name: &str, save: &str, want: &str) {
    fs::write(t.0.join("bad.json"), save).unwrap();
    let before = t.snapshot();
    let secret_before = fs::read_to_string(t.0.join("passwd")).unwrap();
    let out = t.rsskit(&["apply", "--restore", "bad.json"]);
    let (so, se) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "{name}: {so}\n{se}");
    assert!(se.contains(want), "{name}: want '{want}' in\n{se}");
    assert!(!so.contains("SECRET") && !se.contains("SECRET"), "{name}: a file's contents shown:\n{so}\n{se}");
    assert!(!so.contains("ok ") && !so.contains("Writing"), "{name}: {so}");
    assert_eq!(t.snapshot(), before, "{name}: nothing written");
    assert_eq!(fs::read_to_string(t.0.join("passwd")).unwrap(), secret_before, "{name}");
}

#[test]
fn restore_refuses_a_save_naming_a_file_outside_sysfs() {
    let t = Tree::new();
    // Stands for /etc/passwd (never the real one).
    fs::write(t.0.join("passwd"), format!("{SECRET}\n")).unwrap();
    let target = t.0.join("passwd").display().to_string();
    // The old format, as the probe edited it.
    let v1 = json!({"version": 1, "saved_at": 1, "settings": [{
        "device": "host", "what": "net.core.rps_sock_flow_entries", "kind": "count",
        "path": target, "old": "32768", "new": "0"}]});
    refused(&t, "version 1 naming a path", &v1.to_string(), "version 1");
    // Version 2 with a path smuggled in.
    let p = json!({"kind": "rps_sock_flow_entries", "value": "0", "path": target});
    refused(&t, "v2 with a path", &save_v2(&[p]), "entry 1 (rps_sock_flow_entries): unknown field `path`");
    // A device name that walks out of /sys/class/net.
    let up = json!({"kind": "rps_cpus", "device": "../../../../..", "queue": 0, "value": "0"});
    refused(&t, "traversal", &save_v2(&[up]), "is not an interface name");
    let up = json!({"kind": "rps_cpus", "device": "eth0/../../..", "queue": 0, "value": "0"});
    refused(&t, "traversal 2", &save_v2(&[up]), "is not an interface name");
    // Not JSON at all (the secret itself as a save file): not shown.
    refused(&t, "passwd as save", SECRET, "not an rsskit save file");
    let out = t.rsskit(&["apply", "--restore", &target]);
    assert_eq!(out.status.code(), Some(1));
    assert!(!text(&out.stderr).contains("SECRET"), "{}", text(&out.stderr));
}

#[test]
fn restore_writes_nothing_when_any_entry_is_bad() {
    let t = Tree::new();
    fs::write(t.0.join("passwd"), format!("{SECRET}\n")).unwrap();
    let good = vec![
        json!({"kind": "rps_cpus", "device": "eth0", "queue": 0, "value": "0000000f"}),
        json!({"kind": "xps_cpus", "device": "eth0", "queue": 3, "value": "00000030"}),
        json!({"kind": "irq_affinity", "device": "eth0", "irq": 41, "value": "1"}),
        json!({"kind": "rps_flow_cnt", "device": "eth0", "queue": 1, "value": "256"}),
        json!({"kind": "rss_key", "device": "eth0", "value": "6d5a".repeat(20)}),
        json!({"kind": "hash_fields", "device": "eth0", "flow": "udp4", "value": "ip_src,ip_dst,l4_src_port,l4_dst_port"}),
        json!({"kind": "rps_sock_flow_entries", "value": "4096"}),
    ];
    let bad: Vec<(&str, Value, &str)> = vec![
        (
            "bad kind",
            json!({"kind": "sysctl", "device": "eth0", "value": "1"}),
            "entry 4 (\"sysctl\" eth0): unknown kind",
        ),
        (
            "bad mask",
            json!({"kind": "rps_cpus", "device": "eth0", "queue": 2, "value": "0-5"}),
            "entry 4 (rps_cpus eth0 queue 2): the value is not a CPU mask",
        ),
        (
            "bad list",
            json!({"kind": "irq_affinity", "device": "eth0", "irq": 42, "value": "all"}),
            "entry 4 (irq_affinity eth0 IRQ 42): the value is not a CPU list",
        ),
        (
            "bad count",
            json!({"kind": "rps_flow_cnt", "device": "eth0", "queue": 2, "value": "-1"}),
            "not a count",
        ),
        ("bad key", json!({"kind": "rss_key", "device": "eth1", "value": "xyz"}), "not an RSS key"),
        (
            "no such device",
            json!({"kind": "rps_cpus", "device": "nope0", "queue": 0, "value": "0"}),
            "entry 4 (rps_cpus rx-0 rps_cpus) of nope0: interface 'nope0' does not exist",
        ),
        (
            "no such queue",
            json!({"kind": "xps_cpus", "device": "eth0", "queue": 9, "value": "1"}),
            "entry 4 (xps_cpus tx-9 xps_cpus): eth0 has no TX queue 9",
        ),
        (
            "another device's IRQ",
            json!({"kind": "irq_affinity", "device": "eth0", "irq": 9, "value": "1"}),
            "IRQ 9 is not one of eth0's IRQs",
        ),
        (
            "whitespace",
            json!({"kind": "rss_table", "device": "eth 0", "value": "0,1"}),
            "\"eth 0\" is not an interface name",
        ),
        (
            "duplicate",
            json!({"kind": "rps_cpus", "device": "eth0", "queue": 0, "value": "1"}),
            "same setting as an earlier entry",
        ),
    ];
    for (name, b, want) in bad {
        let mut entries = good.clone();
        entries.insert(3, b);
        refused(&t, name, &save_v2(&entries), want);
    }
    // The good ones alone restore (the check is not simply refusing all).
    fs::write(t.0.join("good.json"), save_v2(&good)).unwrap();
    let out = t.rsskit(&["apply", "--restore", "good.json"]);
    assert!(out.status.success(), "{}\n{}", text(&out.stdout), text(&out.stderr));
    // 7, and the key written again after the udp4 fields (the save lists the key first).
    assert!(text(&out.stdout).contains("All 8 settings applied"), "{}", text(&out.stdout));
    assert_eq!(t.get("sys/class/net/eth0/queues/rx-0/rps_cpus"), "0000000f");
    assert_eq!(t.get("proc/irq/41/smp_affinity_list"), "1");
    assert_eq!(t.get("proc/sys/net/core/rps_sock_flow_entries"), "4096");
    assert_eq!(t.driver()["rss"]["key"], "6d5a".repeat(20));
}

#[test]
fn restore_never_writes_through_or_shows_a_symlinked_setting_file() {
    let t = Tree::new();
    fs::write(t.0.join("passwd"), format!("{SECRET}\n")).unwrap();
    // The tree's rps_cpus file of rx-0 replaced by a link to the secret.
    let f = t.path("sys/class/net/eth0/queues/rx-0/rps_cpus");
    fs::remove_file(&f).unwrap();
    std::os::unix::fs::symlink(t.0.join("passwd"), &f).unwrap();
    let save = save_v2(&[
        json!({"kind": "rps_cpus", "device": "eth0", "queue": 0, "value": "00000003"}),
        json!({"kind": "rps_cpus", "device": "eth0", "queue": 1, "value": "00000003"}),
    ]);
    fs::write(t.0.join("s.json"), save).unwrap();
    let out = t.rsskit(&["apply", "--restore", "s.json"]);
    let (so, se) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(2), "{so}\n{se}");
    assert!(!so.contains("SECRET") && !se.contains("SECRET"), "{so}\n{se}");
    assert!(so.contains("rx-0 rps_cpus (unreadable) -> 00000003"), "{so}");
    assert!(so.contains("REFUSED eth0 rx-0 rps_cpus: write failed") && so.contains("symlink"), "{so}");
    assert!(so.contains("ok eth0 rx-1 rps_cpus = 00000003"), "{so}");
    assert_eq!(fs::read_to_string(t.0.join("passwd")).unwrap(), format!("{SECRET}\n"));
}

#[test]
fn a_driver_refusing_srssh_is_reported_per_setting() {
    let t = Tree::new();
    let mut d = t.driver();
    d["refuse_set"] = json!("operation not supported by the driver");
    t.set_driver(&d);
    let out = t.rsskit(&["apply", "--iface", "eth0", "--key", "symmetric", "--save", "s.json"]);
    let s = text(&out.stdout);
    assert_eq!(out.status.code(), Some(2), "{s}\n{}", text(&out.stderr));
    assert!(s.contains("REFUSED eth0 RSS indirection table: ETHTOOL_SRSSH: operation not supported"), "{s}");
    assert!(s.contains("REFUSED eth0 RSS key: ETHTOOL_SRSSH"), "{s}");
    assert!(s.contains("ok eth0 IRQ 40 (eth0-TxRx-0) affinity = 0"), "{s}");
    assert!(s.contains("eth0: 8 of 10 settings applied, 2 not: the device is partly tuned"), "{s}");
    assert!(text(&out.stderr).contains("2 of 10 settings not applied"), "{}", text(&out.stderr));
    assert_eq!(t.get("proc/irq/43/smp_affinity_list"), "5", "the other settings are in place");
    assert_eq!(t.driver()["rss"]["table"], d["rss"]["table"]);
}

#[test]
fn a_write_the_kernel_refuses_is_reported_and_the_rest_applies() {
    let t = Tree::new();
    // An affinity file that cannot be written (here: a directory in its place).
    fs::remove_file(t.path("proc/irq/42/smp_affinity_list")).unwrap();
    fs::create_dir(t.path("proc/irq/42/smp_affinity_list")).unwrap();
    let out = t.rsskit(&["apply", "--iface", "eth0", "--save", "s.json"]);
    let s = text(&out.stdout);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{s}\n{err}");
    assert!(s.contains("REFUSED eth0 IRQ 42 (eth0-TxRx-2) affinity: write failed:"), "{s}");
    assert!(s.contains("ok eth0 IRQ 43 (eth0-TxRx-3) affinity = 5"), "{s}");
    assert!(s.contains("eth0: 8 of 9 settings applied, 1 not: the device is partly tuned"), "{s}");
    assert!(
        err.contains("IRQ 42 (eth0-TxRx-2) affinity: current value unreadable, cannot be saved"),
        "{err}"
    );
    assert!(err.contains("1 of 9 settings not applied"), "{err}");
    assert_eq!(t.get("proc/irq/43/smp_affinity_list"), "5");
}

#[test]
fn apply_warns_about_irqbalance_and_stale_plans() {
    let t = Tree::new();
    t.put("proc/4242/comm", "irqbalance\n");
    t.put("proc/4242/cmdline", "/usr/sbin/irqbalance\0--foreground\0--banirq=40\0");
    let out = t.rsskit(&["apply", "--iface", "eth0", "--dry-run"]);
    assert!(out.status.success());
    let err = text(&out.stderr);
    assert!(err.contains("irqbalance is running (pid 4242)"), "{err}");
    assert!(err.contains("`--banirq=41 --banirq=42 --banirq=43` to IRQBALANCE_ARGS"), "{err}");
    // A plan made for another queue count is refused before anything is written.
    let plan = t.rsskit(&["plan", "--iface", "eth0", "--json"]);
    let mut p: Value = serde_json::from_slice(&plan.stdout).unwrap();
    p["devices"][0]["rx"].as_array_mut().unwrap().pop();
    fs::write(t.0.join("stale.json"), serde_json::to_string(&p).unwrap()).unwrap();
    let before = t.snapshot();
    let out = t.rsskit(&["apply", "stale.json"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("the plan was made for 3 / 4: plan again"), "{}", text(&out.stderr));
    assert_eq!(t.snapshot(), before);
}

/// Applies the default plan, then breaks one thing; `check` must name it.
#[test]
fn check_names_each_misalignment() {
    type Break = fn(&Tree);
    let cases: Vec<(&str, Break, &str)> = vec![
        (
            "irq spans CPUs",
            |t| t.put("proc/irq/41/smp_affinity_list", "3-4\n"),
            "rx-1: IRQ 41 (eth0-TxRx-1) may run on CPUs 3-4",
        ),
        (
            "rps on hw",
            |t| t.put("sys/class/net/eth0/queues/rx-2/rps_cpus", "00000030\n"),
            "RPS is on for rx-2 although the NIC spreads flows itself",
        ),
        (
            "xps off",
            |t| {
                for q in 0..4 {
                    t.put(&format!("sys/class/net/eth0/queues/tx-{q}/xps_cpus"), "00000000\n");
                }
            },
            "XPS is off on every TX queue",
        ),
        (
            "xps crossing",
            |t| t.put("sys/class/net/eth0/queues/tx-0/xps_cpus", "0000000b\n"),
            "XPS crosses: CPU 3 sends on tx-0 but tx-1's IRQ 41 runs on CPU 3",
        ),
        (
            "table ring missing",
            |t| {
                let mut d = t.driver();
                d["rss"]["table"][5] = json!(7);
                t.set_driver(&d);
            },
            "the indirection table names ring(s) 7 but the device has 4 RX queue(s)",
        ),
        (
            "bad key",
            |t| {
                let mut d = t.driver();
                d["rss"]["key"] = json!("00".repeat(40));
                t.set_driver(&d);
            },
            "the RSS key fails the key check",
        ),
        (
            "irqbalance",
            |t| {
                t.put("proc/4242/comm", "irqbalance\n");
                t.put("proc/4242/cmdline", "/usr/sbin/irqbalance\0--foreground\0--banirq=40\0");
            },
            "irqbalance (pid 4242) owns the affinity of IRQ(s) 41,42,43",
        ),
    ];
    for (name, brk, want) in cases {
        let t = Tree::new();
        let out = t.rsskit(&["apply", "--iface", "eth0", "--save", "s.json"]);
        assert!(out.status.success(), "{name}: {}", text(&out.stderr));
        assert_eq!(t.rsskit(&["check"]).status.code(), Some(0), "{name}: aligned after apply");
        brk(&t);
        let out = t.rsskit(&["check", "--iface", "eth0"]);
        let s = text(&out.stdout);
        assert_eq!(out.status.code(), Some(1), "{name}: {s}");
        assert!(s.contains("eth0: NOT aligned"), "{name}: {s}");
        assert!(s.contains(want), "{name}: want '{want}' in\n{s}");
        let v = json_of(&t.rsskit(&["check", "--json"]));
        assert_eq!(v["aligned"], false);
        assert!(
            v["devices"][0]["problems"]
                .as_array()
                .unwrap()
                .iter()
                .any(|p| p.as_str().unwrap().contains(want)),
            "{name}: {v}"
        );
    }
}

/// A plan file is untrusted too: every device, queue, IRQ and CPU it names
/// must be the host's, every value valid, or nothing is written.
#[test]
fn apply_refuses_a_plan_naming_what_the_host_does_not_have() {
    let t = Tree::new();
    let plan = t.rsskit(&["plan", "--iface", "eth0", "--json"]);
    let p: Value = serde_json::from_slice(&plan.stdout).unwrap();
    type Edit = fn(&mut Value);
    let cases: Vec<(&str, Edit, &str)> = vec![
        ("another IRQ", |p| p["devices"][0]["irqs"][0]["irq"] = json!(9), "IRQ 9 is not one of eth0's IRQs"),
        (
            "huge CPU",
            |p| p["devices"][0]["rx"][0]["rps_cpus"] = json!([1u64 << 60]),
            "CPU numbers are below 8192",
        ),
        ("offline CPU", |p| p["devices"][0]["irqs"][0]["cpus"] = json!([7]), "CPU 7, which is not online"),
        ("traversal", |p| p["devices"][0]["name"] = json!("../../.."), "is not an interface name"),
        ("bad key", |p| p["devices"][0]["key"] = json!("6d5"), "not an RSS key"),
        (
            "bad flow",
            |p| p["devices"][0]["hash_fields"] = json!([{"flow": "x", "fields": ["ip_src"]}]),
            "is not a flow type",
        ),
        ("queue renumbered", |p| p["devices"][0]["tx"][3]["queue"] = json!(7), "eth0 has no TX queue 7"),
    ];
    for (name, edit, want) in cases {
        let mut q = p.clone();
        edit(&mut q);
        fs::write(t.0.join("p.json"), serde_json::to_string(&q).unwrap()).unwrap();
        let before = t.snapshot();
        let out = t.rsskit(&["apply", "p.json", "--save", "s.json"]);
        assert_eq!(out.status.code(), Some(1), "{name}: {}", text(&out.stdout));
        assert!(text(&out.stderr).contains(want), "{name}: want '{want}' in {}", text(&out.stderr));
        assert_eq!(t.snapshot(), before, "{name}");
        assert!(!t.0.join("s.json").exists(), "{name}: no save either");
    }
}

/// A plan that changes only hashed fields: apply writes them, then the
/// device's current key again (virtio_net passes fields to the device only
/// with ETHTOOL_SRSSH; see tune::push_hash_fields), which is not saved
/// (nothing to restore); --restore of those fields does the same.
#[test]
fn a_fields_only_apply_writes_the_key_again_after_them() {
    let t = Tree::new();
    let plan = t.rsskit(&["plan", "--iface", "eth0", "--json"]);
    assert!(plan.status.success(), "{}", text(&plan.stderr));
    fs::write(t.0.join("plan.json"), &plan.stdout).unwrap();
    let out = t.rsskit(&["apply", "plan.json", "--save", "first.json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let key = t.driver()["rss"]["key"].clone();
    let mut p: Value = serde_json::from_slice(&plan.stdout).unwrap();
    p["devices"][0]["hash_fields"] =
        serde_json::json!([{"flow": "udp4", "fields": ["ip_src", "ip_dst", "l4_src_port", "l4_dst_port"]}]);
    fs::write(t.0.join("fields.json"), p.to_string()).unwrap();
    let out = t.rsskit(&["apply", "fields.json", "--save", "fields-saved.json"]);
    let s = text(&out.stdout);
    assert!(out.status.success(), "{s}\n{}", text(&out.stderr));
    let ok: Vec<&str> = s.lines().filter(|l| l.trim_start().starts_with("ok ")).collect();
    assert_eq!(ok.len(), 2, "{s}");
    assert!(ok[0].contains("udp4 hashed fields"), "{s}");
    assert!(ok[1].contains("RSS key written again (the device takes hashed fields with it)"), "{s}");
    assert_eq!(t.driver()["hash"]["udp4"], 0xf0);
    assert_eq!(t.driver()["rss"]["key"], key, "the same key");
    let saved = fs::read_to_string(t.0.join("fields-saved.json")).unwrap();
    assert!(saved.contains("hash_fields") && !saved.contains("rss_key"), "only the fields saved: {saved}");
    let out = t.rsskit(&["apply", "--restore", "fields-saved.json"]);
    let s = text(&out.stdout);
    assert!(out.status.success() && s.contains("RSS key written again"), "{s}");
    assert_eq!(t.driver()["hash"]["udp4"], 0x30);
}

/// Issue 37, threaded NAPI on a kernel without netdev netlink (6.1): the
/// `napi/eth0-N` threads carry NAPI ids, not queues. `check` does not call
/// floating threads aligned; `plan` turns threading off (it cannot pin a
/// thread to a queue it cannot name) and says why; `apply` writes
/// `threaded` 0 with read-back; `--restore` writes the old 1 back.
#[test]
fn threaded_napi_is_checked_turned_off_and_restored() {
    let t = Tree::new();
    let out = t.rsskit(&["apply", "--iface", "eth0", "--save", "first.json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(t.rsskit(&["check"]).status.code(), Some(0), "aligned before threading");
    t.put("sys/class/net/eth0/threaded", "1\n");
    for (i, pid) in (812..816).enumerate() {
        t.put(&format!("proc/{pid}/comm"), &format!("napi/eth0-{}\n", 8193 + i));
        t.put(
            &format!("proc/{pid}/status"),
            &format!("Name:\tnapi/eth0-{}\nPPid:\t2\nCpus_allowed_list:\t0-5\n", 8193 + i),
        );
    }
    let out = t.rsskit(&["check", "--iface", "eth0"]);
    let s = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{s}");
    assert!(s.contains("eth0: NOT aligned"), "{s}");
    assert!(s.contains("processed by thread napi/eth0-8193 (PID 812), allowed on CPUs 0-5"), "{s}");
    assert!(s.contains("which queue each napi/eth0-N thread polls is not known on this kernel"), "{s}");
    // Pinned to one CPU each is no better: which queue each polls is unknown.
    for pid in 812..816 {
        let st = t.get(&format!("proc/{pid}/status")).replace("0-5", &(pid - 812).to_string());
        t.put(&format!("proc/{pid}/status"), &st);
    }
    let out = t.rsskit(&["check", "--iface", "eth0"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));

    let plan = json_of(&t.rsskit(&["plan", "--iface", "eth0", "--json"]));
    let d = &plan["devices"][0];
    assert_eq!(d["napi_threaded"], 0, "{d}");
    let notes: Vec<&str> = d["notes"].as_array().unwrap().iter().map(|n| n.as_str().unwrap()).collect();
    assert!(
        notes.iter().any(|n| n.contains("threaded NAPI is on (threaded=1, 4 thread(s))")
            && n.contains("threading is turned off (threaded=0)")
            && n.contains("--restore turns it back on")),
        "{notes:?}"
    );
    let out = t.rsskit(&["plan", "--iface", "eth0"]);
    assert!(
        text(&out.stdout).contains("threaded NAPI is on"),
        "the text plan says it: {}",
        text(&out.stdout)
    );

    let out = t.rsskit(&["apply", "--iface", "eth0", "--save", "s.json"]);
    let s = text(&out.stdout);
    assert!(out.status.success(), "{s}\n{}", text(&out.stderr));
    assert!(s.contains("threaded NAPI"), "{s}");
    assert_eq!(t.get("sys/class/net/eth0/threaded"), "0");
    let out = t.rsskit(&["check", "--iface", "eth0"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));

    let out = t.rsskit(&["apply", "--restore", "s.json"]);
    assert!(out.status.success(), "{}\n{}", text(&out.stdout), text(&out.stderr));
    assert_eq!(t.get("sys/class/net/eth0/threaded"), "1", "restored");
    assert_eq!(t.rsskit(&["check"]).status.code(), Some(1), "floating again");
}

/// Issue 37, threaded NAPI where the kernel's map is known (netdev netlink,
/// 6.8+; here the tree's `netdev_nl/eth0.json`): the map, not the IRQ
/// names, links queues to IRQs (it swaps rx-0's and rx-1's vectors here);
/// `plan` keeps threading on and pins each `napi/eth0-ID` thread to its
/// queue IRQ's CPUs; `apply` writes them (read back), `check` then passes
/// and fails again naming a thread moved; `--restore` puts every thread's
/// CPUs back. The NAPI settings are planned, written and restored beside.
#[test]
fn threaded_napi_with_the_kernel_map_is_pinned_checked_and_restored() {
    let t = Tree::new();
    t.put("sys/class/net/eth0/threaded", "1\n");
    t.put("sys/class/net/eth0/napi_defer_hard_irqs", "0\n");
    t.put("sys/class/net/eth0/gro_flush_timeout", "0\n");
    // rx-q is polled by NAPI 8196-q (thread PID 812 + id - 8193).
    let irq_of = [41, 40, 42, 43];
    let mut queues = Vec::new();
    let mut napis = Vec::new();
    for q in 0..4u32 {
        let id = 8196 - q;
        let pid = 812 + id - 8193;
        for kind in ["rx", "tx"] {
            queues.push(serde_json::json!({"id": q, "kind": kind, "ifindex": 2, "napi_id": id}));
        }
        napis.push(serde_json::json!({"id": id, "ifindex": 2, "irq": irq_of[q as usize], "pid": pid}));
        t.put(&format!("proc/{pid}/comm"), &format!("napi/eth0-{id}\n"));
        t.put(
            &format!("proc/{pid}/status"),
            &format!("Name:\tnapi/eth0-{id}\nPPid:\t2\nCpus_allowed_list:\t0-5\n"),
        );
    }
    t.put("netdev_nl/eth0.json", &serde_json::json!({"queues": queues, "napis": napis}).to_string());
    let floating = t.rsskit(&["check", "--iface", "eth0"]);
    let s = text(&floating.stdout);
    assert_eq!(floating.status.code(), Some(1), "{s}");
    assert!(s.contains("rx-0 processed by thread napi/eth0-8196 (PID 815), allowed on CPUs 0-5"), "{s}");
    assert!(s.contains("queue -> IRQ links from the kernel's map"), "{s}");

    let plan = json_of(&t.rsskit(&[
        "plan",
        "--iface",
        "eth0",
        "--json",
        "--napi-defer-hard-irqs",
        "2",
        "--gro-flush-timeout",
        "200000",
    ]));
    let d = &plan["devices"][0];
    assert_eq!(d["queue_map"], "kernel netlink", "{d}");
    assert!(d["napi_threaded"].is_null(), "threading kept: {d}");
    assert_eq!(d["rx"][0]["irq"], 41, "the kernel's map, not the name eth0-TxRx-0: {d}");
    assert_eq!(d["rx"][1]["irq"], 40, "{d}");
    let pins = d["napi_threads"].as_array().unwrap();
    assert_eq!(pins.len(), 4, "{d}");
    let mut want = BTreeMap::new();
    for p in pins {
        let q = p["queue"].as_u64().unwrap() as usize;
        assert_eq!(p["napi_id"], 8196 - q as u64, "{p}");
        let irq = d["irqs"].as_array().unwrap().iter().find(|x| x["irq"] == d["rx"][q]["irq"]).unwrap();
        assert_eq!(p["cpus"], irq["cpus"], "rx-{q}: its IRQ's CPUs");
        let cpus: Vec<String> = p["cpus"].as_array().unwrap().iter().map(|c| c.to_string()).collect();
        want.insert(812 + 8196 - 8193 - q, cpus.join(","));
    }
    assert_eq!(
        (d["napi_defer_hard_irqs"].as_u64(), d["gro_flush_timeout"].as_u64()),
        (Some(2), Some(200_000))
    );
    let out = t.rsskit(&["plan", "--iface", "eth0", "--napi-defer-hard-irqs", "2147483648"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("2147483647"), "{}", text(&out.stderr));

    let out = t.rsskit(&[
        "apply",
        "--iface",
        "eth0",
        "--save",
        "s.json",
        "--napi-defer-hard-irqs",
        "2",
        "--gro-flush-timeout",
        "200000",
    ]);
    let s = text(&out.stdout);
    assert!(out.status.success(), "{s}\n{}", text(&out.stderr));
    assert!(s.contains("thread napi/eth0-8196 CPUs"), "{s}");
    for (pid, cpus) in &want {
        let st = t.get(&format!("proc/{pid}/status"));
        assert!(st.ends_with(&format!("Cpus_allowed_list:\t{cpus}")), "PID {pid}: {st}");
    }
    assert_eq!(t.get("sys/class/net/eth0/threaded"), "1", "threading kept on");
    assert_eq!(t.get("sys/class/net/eth0/napi_defer_hard_irqs"), "2");
    assert_eq!(t.get("sys/class/net/eth0/gro_flush_timeout"), "200000");
    let out = t.rsskit(&["check", "--iface", "eth0"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));

    // A thread moved (taskset): check names it.
    t.put("proc/813/status", "Name:\tnapi/eth0-8194\nPPid:\t2\nCpus_allowed_list:\t0-5\n");
    let out = t.rsskit(&["check", "--iface", "eth0"]);
    let s = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{s}");
    assert!(s.contains("rx-2 processed by thread napi/eth0-8194 (PID 813), allowed on CPUs 0-5"), "{s}");

    let out = t.rsskit(&["apply", "--restore", "s.json"]);
    assert!(out.status.success(), "{}\n{}", text(&out.stdout), text(&out.stderr));
    for pid in 812..816 {
        assert!(
            t.get(&format!("proc/{pid}/status")).ends_with("Cpus_allowed_list:\t0-5"),
            "PID {pid} restored"
        );
    }
    assert_eq!(t.get("sys/class/net/eth0/napi_defer_hard_irqs"), "0");
    assert_eq!(t.get("sys/class/net/eth0/gro_flush_timeout"), "0");
    let saved = fs::read_to_string(t.0.join("s.json")).unwrap();
    assert!(saved.contains("\"napi_thread_cpus\"") && saved.contains("\"napi\": 8196"), "{saved}");
}

/// The NIC's flow rules (issue 33): `check` lists them (they bypass the
/// table), fails a rule or context entry naming a queue the device does not
/// have (4 RX queues here), and says where it cannot know.
#[test]
fn check_judges_the_nics_flow_rules() {
    let t = Tree::new();
    let ok = t.rsskit(&["apply", "--iface", "eth0", "--save", "first.json"]);
    assert!(ok.status.success(), "{}", text(&ok.stderr));
    assert_eq!(t.rsskit(&["check"]).status.code(), Some(0), "aligned, no rules");
    let mut d = t.driver();
    d["rules"] = json!(["udp4 dst-port 443 context 1 offset 2 loc 1", "tcp4 dst-port 22 queue 3 loc 2"]);
    d["contexts"] = json!({"1": {"key": "6d".repeat(40), "table": [0, 1]}});
    t.set_driver(&d);
    let out = t.rsskit(&["check", "--iface", "eth0"]);
    assert_eq!(out.status.code(), Some(0), "queues 2-3 and 3 exist: {}", text(&out.stdout));
    assert!(text(&out.stdout).contains("2 flow rule(s), 1 into RSS contexts"), "{}", text(&out.stdout));
    // Offset 3 over a table of queues 0-1 reaches queue 4; queue 7 does not exist either.
    d["rules"] = json!([
        "udp4 dst-port 443 context 1 offset 3 loc 1",
        "tcp4 dst-port 22 queue 7 loc 2",
        "udp4 dst-port 53 context 9 loc 3"
    ]);
    t.set_driver(&d);
    let out = t.rsskit(&["check", "--json"]);
    assert_eq!(out.status.code(), Some(1));
    let v = json_of(&out);
    let problems: Vec<String> = v["devices"][0]["problems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap().to_string())
        .collect();
    assert_eq!(problems.len(), 2, "{problems:?}");
    assert!(problems[0].contains("rule 1") && problems[0].contains("queue 4"), "{problems:?}");
    assert!(problems[1].contains("rule 2") && problems[1].contains("queue 7"), "{problems:?}");
    let notes = v["devices"][0]["notes"].to_string();
    assert!(notes.contains("RSS context 9 could not be read"), "{notes}");
}
