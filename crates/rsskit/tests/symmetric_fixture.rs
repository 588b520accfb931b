//! `plan --symmetric` against the fixture tree (tests/fixtures/host6cpu,
//! its fake driver given here a name and the transforms it takes): the
//! NIC's input transform where the driver takes one (plan, apply with
//! read-back, `hash --iface` puts a flow and its reverse on one queue,
//! `--restore` byte for byte), else the symmetric key, said; a transform
//! the driver refuses is reported, not dropped.

mod common;

use common::fixture::{files, HostTree};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::fs;
use std::path::Path;
use std::process::{Command, Output};

struct Host(HostTree);

fn s(p: &Path) -> String {
    p.display().to_string()
}

fn out(o: &Output) -> String {
    format!("{}\n{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

impl Host {
    /// The fixture with `extra` merged into its driver file.
    fn new(tag: &str, extra: Value) -> Host {
        let h = Host(HostTree::new(tag));
        let mut d = h.driver();
        for (k, v) in extra.as_object().unwrap() {
            d[k] = v.clone();
        }
        fs::write(h.0 .0.join("ethtool/eth0.json"), serde_json::to_string_pretty(&d).unwrap()).unwrap();
        h
    }
    fn driver(&self) -> Value {
        serde_json::from_str(&fs::read_to_string(self.0 .0.join("ethtool/eth0.json")).unwrap()).unwrap()
    }
    fn run(&self, args: &[&str]) -> Output {
        let root = self.0 .0.join("hostroot");
        fs::create_dir_all(&root).unwrap();
        Command::new(common::netns::rsskit())
            .current_dir(&self.0 .0)
            .args(args)
            .args(["--sysroot", &s(&self.0 .0)])
            .args(if args[0] == "plan" || args[0] == "check" {
                vec![]
            } else {
                vec!["--root".into(), s(&root)]
            })
            .output()
            .unwrap()
    }
    /// The queue `hash --iface eth0` predicts for a TCP flow.
    fn queue(&self, src: &str, dst: &str) -> u64 {
        let o = Command::new(common::netns::rsskit())
            .env("RSSKIT_SYSROOT", &self.0 .0)
            .args(["hash", "--iface", "eth0", "--src", src, "--dst", dst, "--proto", "tcp", "--json"])
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", out(&o));
        let v: Value = serde_json::from_slice(&o.stdout).unwrap();
        v["queue"].as_u64().unwrap_or_else(|| panic!("no queue: {v}"))
    }
    fn snapshot(&self) -> (BTreeMap<String, Vec<u8>>, Value) {
        let mut m = BTreeMap::new();
        files(&self.0 .0.join("sys"), &self.0 .0, &mut m);
        files(&self.0 .0.join("proc"), &self.0 .0, &mut m);
        (m, self.driver())
    }
}

/// Flows (client, server) of which some land on another queue than their
/// reverse without a transform (checked below, so the test can fail).
fn flows() -> Vec<(String, String)> {
    (0..24).map(|i| (format!("10.1.{i}.7:{}", 40000 + 37 * i), format!("192.0.2.{}:443", 1 + i))).collect()
}

#[test]
fn auto_on_a_driver_with_the_transform_applies_it_and_restores() {
    let h = Host::new("sym-xfrm", json!({"driver": "ice", "input_xfrm_supported": 1}));
    let before = h.snapshot();
    let split = flows().iter().filter(|(a, b)| h.queue(a, b) != h.queue(b, a)).count();
    assert!(split > 0, "without a transform some flows and their reverses part");

    let o = h.run(&["plan", "--iface", "eth0", "--symmetric"]);
    assert!(o.status.success(), "{}", out(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("input_xfrm: sym-xor"), "{text}");
    assert!(text.contains("symmetric hashing by input_xfrm sym-xor (driver ice takes it)"), "{text}");
    let o = h.run(&["plan", "--iface", "eth0", "--symmetric", "auto", "--json"]);
    assert!(o.status.success(), "{}", out(&o));
    fs::write(h.0 .0.join("plan.json"), &o.stdout).unwrap();
    let p: Value = serde_json::from_slice(&o.stdout).unwrap();
    let d = &p["devices"][0];
    assert_eq!((d["input_xfrm"].clone(), d["key_source"].clone()), (json!("sym-xor"), json!("keep")), "{d}");

    let o = h.run(&["apply", "plan.json", "--save", "saved.json"]);
    assert!(o.status.success(), "{}", out(&o));
    assert!(out(&o).contains("RSS input transform (input_xfrm)"), "{}", out(&o));
    assert_eq!(h.driver()["rss"]["input_xfrm"], json!(1), "read back as written");
    let saved = fs::read_to_string(h.0 .0.join("saved.json")).unwrap();
    assert!(saved.contains("\"input_xfrm\"") && saved.contains("\"none\""), "{saved}");
    for (a, b) in flows() {
        assert_eq!(h.queue(&a, &b), h.queue(&b, &a), "{a} <-> {b} on one queue under sym-xor");
    }
    let o = h.run(&["check", "--iface", "eth0"]);
    assert_eq!(o.status.code(), Some(0), "{}", out(&o));
    assert!(out(&o).contains("and the key check judges the key under it"), "{}", out(&o));
    let o = h.run(&["apply", "plan.json", "--save", "again.json"]);
    assert!(String::from_utf8_lossy(&o.stdout).contains("nothing to do"), "{}", out(&o));

    let o = h.run(&["apply", "--restore", "saved.json"]);
    assert!(o.status.success(), "{}", out(&o));
    let after = h.snapshot();
    assert_eq!(after.0, before.0, "sysfs/procfs byte for byte");
    assert_eq!(after.1, before.1, "the driver's transform, key and table as before");
}

#[test]
fn a_driver_without_it_gets_the_key_said_and_a_refusal_is_reported() {
    // ixgbe: no transform known; auto falls back to the symmetric key.
    let h = Host::new("sym-key", json!({}));
    let o = h.run(&["plan", "--iface", "eth0", "--symmetric", "--json"]);
    assert!(o.status.success(), "{}", out(&o));
    let p: Value = serde_json::from_slice(&o.stdout).unwrap();
    let d = &p["devices"][0];
    assert!(d["input_xfrm"].is_null(), "{d}");
    assert_eq!(d["key_source"], json!("symmetric"));
    assert_eq!(d["key"], json!("6d5a".repeat(20)));
    let notes = d["notes"].to_string();
    assert!(notes.contains("symmetric key: driver ixgbe is not known to take an input transform"), "{notes}");
    let o = h.run(&["apply", "--iface", "eth0", "--symmetric", "--save", "s.json"]);
    assert!(o.status.success(), "{}", out(&o));
    for (a, b) in flows() {
        assert_eq!(h.queue(&a, &b), h.queue(&b, &a), "{a} <-> {b} on one queue with the symmetric key");
    }

    // Asked of a driver that refuses it: reported, nothing dropped silently.
    let h = Host::new("sym-refused", json!({"driver": "ice"}));
    let o = h.run(&["apply", "--iface", "eth0", "--symmetric", "xfrm", "--save", "s.json"]);
    let log = out(&o);
    assert!(!o.status.success(), "{log}");
    assert!(log.contains("input_xfrm") && log.contains("Operation not supported"), "{log}");
    assert!(h.driver()["rss"]["input_xfrm"].is_null(), "the transform not set: {}", h.driver());

    let o = h.run(&["plan", "--iface", "eth0", "--symmetric", "--key", "random"]);
    assert!(!o.status.success() && o.stdout.is_empty(), "{}", out(&o));
    assert!(out(&o).contains("with --key, use --symmetric xfrm"), "{}", out(&o));
}

/// The key is judged under the transform: the symmetric key (a 2-byte
/// pattern) under symmetric-xor cancels every address and port bit (all
/// flows hash to 0), so a plan that would leave them together is refused,
/// and `check` of a NIC already so set names the problem.
#[test]
fn the_symmetric_key_under_sym_xor_is_refused_and_checked() {
    let sym_key = "6d5a".repeat(20);
    let h = Host::new("sym-both", json!({"driver": "ice", "input_xfrm_supported": 1}));
    let mut d = h.driver();
    d["rss"]["key"] = json!(sym_key);
    fs::write(h.0 .0.join("ethtool/eth0.json"), serde_json::to_string_pretty(&d).unwrap()).unwrap();
    // auto: the key already makes hashing symmetric; nothing to write.
    let o = h.run(&["plan", "--iface", "eth0", "--symmetric", "--json"]);
    assert!(o.status.success(), "{}", out(&o));
    let p: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(p["devices"][0]["input_xfrm"].is_null() && p["devices"][0]["key"].is_null(), "{p}");
    assert!(p["devices"][0]["notes"].to_string().contains("already on: the symmetric key"), "{p}");
    // xfrm over that key: refused, naming why and what to do.
    let o = h.run(&["plan", "--iface", "eth0", "--symmetric", "xfrm"]);
    assert!(!o.status.success(), "{}", out(&o));
    let e = out(&o);
    assert!(e.contains("eth0: the RSS key cannot reach every bucket under input_xfrm sym-xor"), "{e}");
    assert!(!e.contains("panicked"), "{e}");
    let o = h.run(&["plan", "--iface", "eth0", "--symmetric", "xfrm", "--key", "random", "--json"]);
    assert!(o.status.success(), "{}", out(&o));
    let p: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        (p["devices"][0]["input_xfrm"].clone(), p["devices"][0]["key_source"].clone()),
        (json!("sym-xor"), json!("random"))
    );

    // check on a NIC running both: the key check under the transform fails.
    d["rss"]["input_xfrm"] = json!(1);
    fs::write(h.0 .0.join("ethtool/eth0.json"), serde_json::to_string_pretty(&d).unwrap()).unwrap();
    let o = h.run(&["check", "--iface", "eth0"]);
    assert!(!o.status.success(), "{}", out(&o));
    assert!(out(&o).contains("the RSS key fails the key check"), "{}", out(&o));
}

/// A persisted plan owns the transform: the agent puts a drifted one back.
#[test]
fn the_agent_puts_a_drifted_transform_back() {
    let h = Host::new("sym-agent", json!({"driver": "mlx5_core", "input_xfrm_supported": 2}));
    // A stable identity, to persist its plan: a MAC set by the administrator.
    let dev = h.0 .0.join("sys/class/net/eth0");
    fs::write(dev.join("address"), "00:1b:21:aa:bb:cc\n").unwrap();
    fs::write(dev.join("addr_assign_type"), "0\n").unwrap();
    let o = h.run(&["plan", "--iface", "eth0", "--symmetric", "--json"]);
    assert!(o.status.success(), "{}", out(&o));
    fs::write(h.0 .0.join("plan.json"), &o.stdout).unwrap();
    let o = h.run(&["apply", "plan.json", "--persist"]);
    assert!(o.status.success(), "{}", out(&o));
    assert_eq!(h.driver()["rss"]["input_xfrm"], json!(2), "sym-or-xor for mlx5_core");
    let o = h.run(&["agent", "--once"]);
    assert!(o.status.success(), "nothing drifted yet: {}", out(&o));

    let mut d = h.driver();
    d["rss"].as_object_mut().unwrap().remove("input_xfrm");
    fs::write(h.0 .0.join("ethtool/eth0.json"), serde_json::to_string_pretty(&d).unwrap()).unwrap();
    let o = h.run(&["agent", "--once"]);
    let log = out(&o);
    assert!(o.status.success(), "put back, so aligned: {log}");
    assert!(log.contains("eth0: corrected RSS input transform (input_xfrm): none -> sym-or-xor"), "{log}");
    assert_eq!(h.driver()["rss"]["input_xfrm"], json!(2));
}
