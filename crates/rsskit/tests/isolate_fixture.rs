//! Service isolation and the flow-rule model on fixture trees (issue 33):
//! an mlx5-like NIC's contexts and 5-tuple rules against hand-derived
//! landings, and `plan --isolate` -> `apply` -> `hash --iface` ->
//! `apply --restore` end to end, beside a context and rules rsskit did
//! not create. QEMU's igb takes no ntuple rules, so these fixture trees
//! (tests/fixtures/host6cpu, copied per test) are the proof of the writes.

mod common;

use common::fixture::{copy_dir, FIXTURE};
use serde_json::{json, Value};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU32, Ordering};

struct Tree(PathBuf);

impl Tree {
    /// The fixture with queue IRQs 40..43 on CPUs 5, 4, 2, 1, RPS off and
    /// a main table of queues `i % 4`; the driver named mlx5_core, listing rules.
    fn new(tag: &str) -> Tree {
        static SEQ: AtomicU32 = AtomicU32::new(0);
        let n = SEQ.fetch_add(1, Ordering::Relaxed);
        let d = std::env::temp_dir().join(format!("rsskit-isolate-{tag}-{}-{n}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        copy_dir(Path::new(FIXTURE), &d);
        let t = Tree(d);
        t.edit_driver(|j| {
            j["driver"] = "mlx5_core".into();
            j["rss"]["table"] = (0..128).map(|i| i % 4).collect::<Vec<u32>>().into();
            j["rules"] = json!([]);
        });
        for (irq, cpu) in [(40, 5), (41, 4), (42, 2), (43, 1)] {
            for f in ["effective_affinity_list", "smp_affinity_list"] {
                fs::write(t.0.join(format!("proc/irq/{irq}/{f}")), format!("{cpu}\n")).unwrap();
            }
        }
        t
    }

    fn driver(&self) -> Value {
        serde_json::from_str(&fs::read_to_string(self.0.join("ethtool/eth0.json")).unwrap()).unwrap()
    }

    fn edit_driver(&self, f: impl FnOnce(&mut Value)) {
        let mut j = self.driver();
        f(&mut j);
        fs::write(self.0.join("ethtool/eth0.json"), j.to_string()).unwrap();
    }

    /// `rsskit ARGS --sysroot TREE`, run in the tree (save files land there).
    fn rsskit(&self, args: &[&str]) -> Output {
        Command::new(assert_cmd::cargo::cargo_bin("rsskit"))
            .current_dir(&self.0)
            .args(args)
            .args(["--sysroot", self.0.to_str().unwrap()])
            .output()
            .unwrap()
    }

    /// `rsskit hash --iface eth0 --src S --dst D --proto P --json`.
    fn land(&self, src: &str, dst: &str, proto: &str) -> Value {
        let out = Command::new(assert_cmd::cargo::cargo_bin("rsskit"))
            .env("RSSKIT_SYSROOT", &self.0)
            .args(["hash", "--iface", "eth0", "--src", src, "--dst", dst, "--proto", proto, "--json"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{src} {dst} {proto}: {}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).unwrap()
    }
}

impl Drop for Tree {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// stdout and stderr, runs of spaces squashed to one (the lines pad columns).
fn text(o: &Output) -> String {
    let s = format!("{}\n{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if !(c == ' ' && out.ends_with(' ')) {
            out.push(c);
        }
    }
    out
}

/// An mlx5-like host: two contexts (per-context keys, 128-entry tables as
/// the main one), 5-tuple rules listed out of order, a drop rule
/// (`RX_CLS_FLOW_DISC`), a context rule with a ring offset (`FLOW_RSS` +
/// `ring_cookie`). Every expectation is derived by hand:
/// - the kernel's order: the lowest location whose masked fields match wins;
/// - a context rule: hash with the context's key over the fields the flow
///   type hashes (tcp4 4-tuple 0xf0, udp4 addresses 0x30, from the fixture),
///   entry = hash mod 128, queue = table[entry] + offset;
/// - the hashes are the published Microsoft RSS verification vectors (both
///   keys are Microsoft's), not rsskit's output;
/// - queue -> IRQ 40 + q -> CPU: 5, 4, 2, 1.
#[test]
fn mlx5_like_rules_and_contexts_land_as_the_kernel_documents() {
    let t = Tree::new("mlx5");
    let ms = "6d5a56da255b0ec24167253d43a38fb0d0ca2bcbae7b30b477cb2da38030f20c6a42b73bbeac01fa";
    t.edit_driver(|j| {
        j["rules"] = json!([
            "tcp4 dst-port 2217 context 2 loc 10",
            "tcp4 src-ip 38.27.205.30 queue 1 loc 9",
            "udp4 dst-ip 12.22.207.184 context 2 offset 2 loc 7",
            "tcp4 dst-ip 65.69.140.83 dst-port 4739 context 1 loc 4",
            "tcp4 src-ip 66.9.149.0/24 context 1 loc 2",
            "tcp4 dst-port 1766 drop loc 1",
        ]);
        j["contexts"] = json!({
            // Entry i -> queue 2 + i % 2.
            "1": {"key": ms, "table": (0..128).map(|i| 2 + i % 2).collect::<Vec<u32>>()},
            // Entry i -> queue 1 - i % 2 (before the rule's offset).
            "2": {"key": ms, "table": (0..128).map(|i| 1 - i % 2).collect::<Vec<u32>>()},
        });
    });
    // TCP to port 1766 from 66.9.149.187: rules 1 (drop) and 2 both match;
    // location 1 is first: dropped, no queue.
    let v = t.land("66.9.149.187:2794", "161.142.100.80:1766", "tcp");
    assert_eq!(
        (v["route"].as_str(), v["rule"]["location"].as_u64()),
        (Some("rule-no-queue"), Some(1)),
        "{v}"
    );
    assert_eq!(v["rule"]["action"], "drop", "{v}");
    assert!(v["queue"].is_null() && v["cpu"].is_null(), "{v}");
    // TCP 199.92.111.2:14230 -> 65.69.140.83:4739: rules 1, 2 miss, rule 4
    // takes it into context 1. TCP vector 0xc626b0ea; 0xea mod 128 = 106
    // (even) -> queue 2 -> IRQ 42 -> CPU 2.
    let v = t.land("199.92.111.2:14230", "65.69.140.83:4739", "tcp");
    assert_eq!(v["hash_hex"], "0xc626b0ea", "{v}");
    assert_eq!(v["table_index"], 106, "{v}");
    assert_eq!(v["path"], "rule 4 -> context 1 -> queue 2 -> IRQ 42 -> CPU 2", "{v}");
    // UDP 24.19.198.95:12898 -> 12.22.207.184:38024: rule 7, context 2 plus
    // offset 2. udp4 hashes addresses: vector 0xd2d0a5de; 0xde mod 128 = 94
    // (even) -> table 1, + 2 = queue 3 -> IRQ 43 -> CPU 1.
    let v = t.land("24.19.198.95:12898", "12.22.207.184:38024", "udp");
    assert_eq!(v["hash_hex"], "0xd2d0a5de", "{v}");
    assert_eq!((v["table_index"].as_u64(), v["context"].as_u64()), (Some(94), Some(2)), "{v}");
    assert_eq!(v["path"], "rule 7 -> context 2 -> queue 3 -> IRQ 43 -> CPU 1", "{v}");
    // TCP 38.27.205.30:48228 -> 209.142.163.6:2217: rules 9 (queue 1) and
    // 10 (context 2) both match; 9 is first: queue 1 -> IRQ 41 -> CPU 4.
    let v = t.land("38.27.205.30:48228", "209.142.163.6:2217", "tcp");
    assert_eq!(v["path"], "rule 9 -> queue 1 -> IRQ 41 -> CPU 4", "{v}");
    assert!(v["context"].is_null(), "{v}");
    // TCP 153.39.163.191:44251 -> 202.188.127.2:1303: no rule matches: the
    // main table. Vector 0x10e828a2; 0xa2 mod 128 = 34; 34 mod 4 = 2 ->
    // queue 2 -> CPU 2.
    let v = t.land("153.39.163.191:44251", "202.188.127.2:1303", "tcp");
    assert_eq!((v["route"].as_str(), v["hash_hex"].as_str()), (Some("table"), Some("0x10e828a2")), "{v}");
    assert_eq!(
        (v["table_index"].as_u64(), v["queue"].as_u64(), v["cpu"].as_u64()),
        (Some(34), Some(2), Some(2))
    );
    // UDP 66.9.149.187:2794 -> 161.142.100.80:1766: the drop rule is TCP
    // only and rule 2 too: the main table. udp4 vector 0x323e8fc2; 0xc2 mod
    // 128 = 66; 66 mod 4 = 2 -> queue 2.
    let v = t.land("66.9.149.187:2794", "161.142.100.80:1766", "udp");
    assert_eq!(
        (v["route"].as_str(), v["table_index"].as_u64(), v["queue"].as_u64()),
        (Some("table"), Some(66), Some(2))
    );
}

/// `plan --isolate` -> `apply` -> `hash` -> `apply --restore`, beside a
/// context and a rule someone else made (ids 1 and location 5), which
/// nothing touches; a rule of rsskit's replaced by another is left as foreign.
#[test]
fn isolation_is_planned_applied_modelled_and_removed_exactly() {
    let t = Tree::new("e2e");
    t.edit_driver(|j| {
        j["rules"] = json!(["tcp4 dst-port 22 context 1 loc 5"]);
        j["contexts"] = json!({"1": {"key": "00".repeat(40), "table": vec![0u32; 128]}});
    });
    let before = t.driver();
    // Which CPUs serve rx-2 and rx-3 in the plan: the service gets those.
    let out = t.rsskit(&["plan", "--iface", "eth0", "--json"]);
    assert!(out.status.success(), "{}", text(&out));
    let p: Value = serde_json::from_slice(&out.stdout).unwrap();
    let cpu = |q: usize| p["devices"][0]["rx"][q]["cpu"].as_u64().unwrap();
    let (c2, c3) = (cpu(2), cpu(3));
    let spec = format!("udp:443={c2},{c3}");
    let out = t.rsskit(&["plan", "--iface", "eth0", "--isolate", &spec]);
    assert!(out.status.success(), "{}", text(&out));
    let s = text(&out);
    assert!(s.contains(&format!("isolate {spec}: new RSS context over queues 2-3")), "{s}");
    assert!(s.contains("rule: udp4 dst-port 443") && s.contains("rule: udp6 dst-port 443"), "{s}");
    let out = t.rsskit(&["plan", "--iface", "eth0", "--isolate", &spec, "--json"]);
    assert!(out.status.success(), "{}", text(&out));
    fs::write(t.0.join("plan.json"), &out.stdout).unwrap();
    let p: Value = serde_json::from_slice(&out.stdout).unwrap();
    let iso = &p["devices"][0]["isolation"][0];
    assert_eq!(iso["queues"], json!([2, 3]), "{iso}");
    let main: Vec<u64> =
        p["devices"][0]["table"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap()).collect();
    assert!(main.iter().all(|&q| q < 2) && main.contains(&0) && main.contains(&1), "{main:?}");

    let out = t.rsskit(&["apply", "plan.json", "--save", "s.json"]);
    assert!(out.status.success(), "{}", text(&out));
    let s = text(&out);
    assert!(s.contains("created eth0 RSS context 2"), "{s}");
    let d = t.driver();
    let ctx: Vec<u64> =
        d["contexts"]["2"]["table"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap()).collect();
    assert!(ctx.len() == 128 && ctx.iter().all(|&q| q == 2 || q == 3), "{ctx:?}");
    assert_eq!(d["contexts"]["1"], before["contexts"]["1"], "the foreign context is untouched");
    let rules: Vec<&str> = d["rules"].as_array().unwrap().iter().map(|r| r.as_str().unwrap()).collect();
    assert!(rules.contains(&"tcp4 dst-port 22 context 1 loc 5"), "{rules:?}");
    assert!(rules.contains(&"udp4 dst-port 443 context 2 loc 1023"), "{rules:?}");
    assert!(rules.contains(&"udp6 dst-port 443 context 2 loc 1022"), "{rules:?}");
    assert_eq!(d["rss"]["table"].as_array().unwrap().len(), 128);
    assert!(
        d["rss"]["table"].as_array().unwrap().iter().all(|q| q.as_u64().unwrap() < 2),
        "main table shrank"
    );
    let saved: Value = serde_json::from_str(&fs::read_to_string(t.0.join("s.json")).unwrap()).unwrap();
    let kinds: Vec<&str> =
        saved["created"].as_array().unwrap().iter().map(|c| c["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, vec!["rss_context", "flow_rule", "flow_rule"], "{saved}");

    // The model on the applied result: QUIC lands on the isolated CPUs, the
    // rest does not. A tree's effective affinity does not follow the written
    // one by itself: as the kernel would, it does here.
    for irq in 40..44 {
        let dir = t.0.join(format!("proc/irq/{irq}"));
        fs::copy(dir.join("smp_affinity_list"), dir.join("effective_affinity_list")).unwrap();
    }
    let v = t.land("66.9.149.187:2794", "161.142.100.80:443", "udp");
    let path = v["path"].as_str().unwrap();
    assert!(path.starts_with("rule 1023 -> context 2 -> queue "), "{v}");
    assert!([c2, c3].contains(&v["cpu"].as_u64().unwrap()), "{v}");
    let v = t.land("66.9.149.187:2794", "161.142.100.80:80", "tcp");
    assert_eq!(v["route"], "table", "{v}");
    assert!(v["queue"].as_u64().unwrap() < 2, "{v}");

    // check: still aligned; the rules into contexts (theirs and rsskit's two) are said.
    let out = t.rsskit(&["check", "--iface", "eth0"]);
    let s = text(&out);
    assert_eq!(out.status.code(), Some(0), "{s}");
    assert!(s.contains("3 flow rule(s), 3 into RSS contexts") && s.contains("verdict: aligned"), "{s}");
    // The queues the main table left out are served through rsskit's context, not idle.
    assert!(!s.contains("get no RSS traffic"), "{s}");
    assert!(
        s.contains("RX queue(s) 2-3 are left out of the main table: they get the flows of rule(s) 1022, 1023 through RSS context 2"),
        "{s}"
    );

    // Applying the same plan again: the isolation is in place, nothing new.
    let out = t.rsskit(&["apply", "plan.json", "--save", "again.json"]);
    assert!(out.status.success(), "{}", text(&out));
    let s = text(&out);
    assert!(s.contains("isolation udp:443") && s.contains("already in place"), "{s}");
    assert!(s.contains("nothing to do") && !s.contains("created "), "{s}");
    assert_eq!(t.driver()["rules"].as_array().unwrap().len(), 3);

    // Someone replaces rsskit's udp6 rule with their own at the same location.
    t.edit_driver(|j| {
        let r = j["rules"].as_array_mut().unwrap();
        r.retain(|x| x != "udp6 dst-port 443 context 2 loc 1022");
        r.push("udp6 dst-port 53 queue 0 loc 1022".into());
    });
    let out = t.rsskit(&["apply", "--restore", "s.json"]);
    assert!(out.status.success(), "{}", text(&out));
    let s = text(&out);
    assert!(s.contains("deleted eth0 flow rule 1023"), "{s}");
    assert!(s.contains("FOREIGN eth0 flow rule 1022") && s.contains("left alone"), "{s}");
    assert!(s.contains("deleted eth0 RSS context 2"), "{s}");
    let d = t.driver();
    assert_eq!(d["rss"]["table"], before["rss"]["table"], "the main table is back");
    assert_eq!(d["contexts"], before["contexts"], "only rsskit's context is gone");
    assert_eq!(
        d["rules"],
        json!(["tcp4 dst-port 22 context 1 loc 5", "udp6 dst-port 53 queue 0 loc 1022"]),
        "only rsskit's rules are gone"
    );
}

#[test]
fn isolation_is_refused_by_name() {
    let t = Tree::new("refuse");
    let refused = |args: &[&str], says: &[&str]| {
        let out = t.rsskit(&[&["plan", "--iface", "eth0"], args].concat());
        let s = text(&out);
        assert!(!out.status.success(), "{args:?}: {s}");
        for w in says {
            assert!(s.contains(w), "{args:?} should say {w:?}: {s}");
        }
    };
    refused(&["--isolate", "udp:443=99"], &["CPUs 99 serve no RX queue"]);
    refused(&["--isolate", "udp:443"], &["--isolate", "no '=CPUS'"]);
    refused(&["--isolate", "udp:443=0-5"], &["main table would be empty"]);
    t.edit_driver(|j| j["no_contexts"] = true.into());
    refused(&["--isolate", "udp:443=1"], &["no RSS contexts", "not supported"]);
    t.edit_driver(|j| {
        j["no_contexts"] = false.into();
        j.as_object_mut().unwrap().remove("rules");
    });
    refused(&["--isolate", "udp:443=1"], &["no flow rules", "ETHTOOL_GRXCLSRLCNT"]);
}

/// A driver that refuses the second rule: the first rule and the context
/// this run created are removed again, and nothing is saved as created.
#[test]
fn a_refusal_in_the_middle_rolls_back_what_this_run_created() {
    let t = Tree::new("rollback");
    let out = t.rsskit(&["plan", "--iface", "eth0", "--json"]);
    let p: Value = serde_json::from_slice(&out.stdout).unwrap();
    let c3 = p["devices"][0]["rx"][3]["cpu"].as_u64().unwrap();
    let out = t.rsskit(&["plan", "--iface", "eth0", "--isolate", &format!("udp:443={c3}"), "--json"]);
    assert!(out.status.success(), "{}", text(&out));
    fs::write(t.0.join("plan.json"), &out.stdout).unwrap();
    // Locations 0-1022 taken: the udp4 rule gets 1023, the udp6 one finds none.
    t.edit_driver(|j| {
        j["rules"] = (0..1023)
            .map(|l| format!("tcp4 dst-port {} queue 0 loc {l}", 1000 + l))
            .collect::<Vec<_>>()
            .into();
    });
    let before = t.driver();
    let out = t.rsskit(&["apply", "plan.json", "--save", "s.json"]);
    let s = text(&out);
    assert!(!out.status.success(), "{s}");
    assert!(s.contains("rule 'udp6 dst-port 443") && s.contains("nothing this run created is left"), "{s}");
    assert_eq!(t.driver(), before, "context and first rule rolled back, main table untouched");
    assert!(!t.0.join("s.json").exists(), "nothing written, nothing saved");
}

/// `apply --persist` and the agent own only what rsskit created: a foreign
/// context and rule beside rsskit's are never touched through drift
/// repairs; rsskit's rule deleted by someone is put back and logged; a
/// location of rsskit's taken over by someone else's rule is left to them.
#[test]
fn the_agent_keeps_rsskits_isolation_and_never_touches_anyone_elses() {
    let t = Tree::new("agent");
    let dev = t.0.join("sys/class/net/eth0");
    fs::write(dev.join("address"), "00:1b:21:aa:bb:cc\n").unwrap();
    fs::write(dev.join("addr_assign_type"), "0\n").unwrap();
    let root = t.0.join("hostroot");
    fs::create_dir_all(root.join("etc/default")).unwrap();
    fs::write(root.join("etc/default/irqbalance"), "IRQBALANCE_ARGS=\"\"\n").unwrap();
    let foreign_rule = "tcp4 dst-port 22 context 1 loc 5";
    t.edit_driver(|j| {
        j["rules"] = json!([foreign_rule]);
        j["contexts"] = json!({"1": {"key": "00".repeat(40), "table": vec![0u32; 128]}});
    });
    let foreign_ctx = t.driver()["contexts"]["1"].clone();
    let out = t.rsskit(&["plan", "--iface", "eth0", "--json"]);
    let p: Value = serde_json::from_slice(&out.stdout).unwrap();
    let c3 = p["devices"][0]["rx"][3]["cpu"].as_u64().unwrap();
    let out = t.rsskit(&["plan", "--iface", "eth0", "--isolate", &format!("udp:443={c3}"), "--json"]);
    assert!(out.status.success(), "{}", text(&out));
    fs::write(t.0.join("plan.json"), &out.stdout).unwrap();
    let r = root.to_str().unwrap();
    let run = |args: &[&str]| t.rsskit(&[args, &["--root", r]].concat());
    let out = run(&["apply", "plan.json", "--persist", "--save", "s.json"]);
    assert!(out.status.success(), "{}", text(&out));
    let record: Value = serde_json::from_str(
        &fs::read_to_string(root.join("var/lib/rsskit/isolation/mac-001b21aabbcc.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(record.as_array().unwrap().len(), 3, "context 2 and two rules: {record}");
    let rules = |t: &Tree| -> Vec<String> {
        t.driver()["rules"].as_array().unwrap().iter().map(|r| r.as_str().unwrap().to_string()).collect()
    };
    let untouched = |t: &Tree| {
        assert!(rules(t).contains(&foreign_rule.to_string()), "{:?}", rules(t));
        assert_eq!(t.driver()["contexts"]["1"], foreign_ctx);
    };
    let out = run(&["agent", "--once"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(!text(&out).contains("isolation:"), "nothing to do yet: {}", text(&out));
    untouched(&t);

    // Someone deletes rsskit's udp4 rule: put back at its location, logged.
    t.edit_driver(|j| {
        j["rules"].as_array_mut().unwrap().retain(|x| x != "udp4 dst-port 443 context 2 loc 1023")
    });
    let out = run(&["agent", "--once"]);
    let s = text(&out);
    assert!(s.contains("eth0: isolation: flow rule 1023 (udp4 dst-port 443 context 2 loc 1023) was deleted by someone else: put back"), "{s}");
    assert!(rules(&t).contains(&"udp4 dst-port 443 context 2 loc 1023".to_string()), "{:?}", rules(&t));
    untouched(&t);

    // Someone puts their own rule where rsskit's udp6 rule was: theirs now.
    t.edit_driver(|j| {
        let r = j["rules"].as_array_mut().unwrap();
        r.retain(|x| x != "udp6 dst-port 443 context 2 loc 1022");
        r.push("udp6 dst-port 53 queue 0 loc 1022".into());
    });
    let out = run(&["agent", "--once"]);
    let s = text(&out);
    assert!(
        s.contains("flow rule 1022 (udp6 dst-port 443 context 2 loc 1022) is foreign now")
            && s.contains("left alone"),
        "{s}"
    );
    assert!(
        s.contains("created flow rule 1021 (udp6 dst-port 443 context 2 loc 1021)"),
        "rsskit's rule made anew: {s}"
    );
    let now = rules(&t);
    assert!(now.contains(&"udp6 dst-port 53 queue 0 loc 1022".to_string()), "{now:?}");
    untouched(&t);
    // A quiet pass: nothing more to do, and the foreign ones stay.
    let out = run(&["agent", "--once"]);
    assert!(!text(&out).contains("isolation:"), "{}", text(&out));
    untouched(&t);
    // persist remove takes rsskit's away with the plan, and only those.
    let out = run(&["persist", "remove", "eth0"]);
    let s = text(&out);
    assert!(out.status.success(), "{s}");
    assert!(s.contains("eth0: deleted flow rule 1021") && s.contains("eth0: deleted RSS context 2"), "{s}");
    assert_eq!(
        rules(&t),
        vec![foreign_rule.to_string(), "udp6 dst-port 53 queue 0 loc 1022".to_string()],
        "only theirs are left"
    );
    untouched(&t);
    assert!(!root.join("var/lib/rsskit/isolation/mac-001b21aabbcc.json").exists());
    assert_eq!(rules(&t).len(), 2, "theirs at 5 and 1022: {:?}", rules(&t));
}

/// isolate2: a rule of rsskit's that someone deletes on every pass is put
/// back, then reported contested and left alone for the back-off (the
/// agent's default policy: 3 put-backs within 5 minutes, then 60 s), as a
/// contested setting is. A running agent (`--interval 1`) against a tree
/// the test edits between its passes (atomic renames, so a pass never
/// reads half a file).
#[test]
fn the_agent_backs_off_a_rule_someone_keeps_deleting() {
    use std::time::{Duration, Instant};
    let t = Tree::new("contest");
    let dev = t.0.join("sys/class/net/eth0");
    fs::write(dev.join("address"), "00:1b:21:aa:bb:cd\n").unwrap();
    fs::write(dev.join("addr_assign_type"), "0\n").unwrap();
    let root = t.0.join("hostroot");
    fs::create_dir_all(root.join("etc/default")).unwrap();
    fs::write(root.join("etc/default/irqbalance"), "IRQBALANCE_ARGS=\"\"\n").unwrap();
    let out = t.rsskit(&["plan", "--iface", "eth0", "--json"]);
    let p: Value = serde_json::from_slice(&out.stdout).unwrap();
    let c3 = p["devices"][0]["rx"][3]["cpu"].as_u64().unwrap();
    let out = t.rsskit(&["plan", "--iface", "eth0", "--isolate", &format!("udp4:443={c3}"), "--json"]);
    assert!(out.status.success(), "{}", text(&out));
    fs::write(t.0.join("plan.json"), &out.stdout).unwrap();
    let r = root.to_str().unwrap().to_string();
    let out = t.rsskit(&["apply", "plan.json", "--persist", "--save", "s.json", "--root", &r]);
    assert!(out.status.success(), "{}", text(&out));
    let ours = "udp4 dst-port 443 context 1 loc 1023";
    let drv = t.0.join("ethtool/eth0.json");
    // The driver file as the agent last wrote it (it writes in place: retry a torn read).
    let read = || loop {
        if let Ok(v) = serde_json::from_str::<Value>(&fs::read_to_string(&drv).unwrap()) {
            return v;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let present = |v: &Value| v["rules"].as_array().unwrap().iter().any(|x| x == ours);
    assert!(present(&read()), "{}", read());
    let delete = || {
        let mut v = read();
        v["rules"].as_array_mut().unwrap().retain(|x| x != ours);
        let tmp = t.0.join("ethtool/.eth0.json.tmp");
        fs::write(&tmp, v.to_string()).unwrap();
        fs::rename(&tmp, &drv).unwrap();
    };
    let log = t.0.join("agent.log");
    let mut agent = Command::new(assert_cmd::cargo::cargo_bin("rsskit"))
        .current_dir(&t.0)
        .args(["agent", "--interval", "1", "--root", &r, "--sysroot", t.0.to_str().unwrap()])
        .stdout(fs::File::create(&log).unwrap())
        .stderr(fs::File::create(t.0.join("agent.err")).unwrap())
        .spawn()
        .unwrap();
    let logged = || {
        format!(
            "{}{}",
            fs::read_to_string(&log).unwrap_or_default(),
            fs::read_to_string(t.0.join("agent.err")).unwrap_or_default()
        )
    };
    // Delete it whenever it is back, until the agent calls it contested.
    let start = Instant::now();
    let mut deletions = 0;
    while !logged().contains("is contested") && start.elapsed() < Duration::from_secs(60) {
        if present(&read()) {
            delete();
            deletions += 1;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let s = logged();
    assert!(
        s.contains(&format!(
            "eth0: isolation flow rule 1023 ({ours}) is contested: put back 3 times, something else keeps \
             writing it; left alone for 60 s"
        )),
        "after {deletions} deletions: {s}"
    );
    assert_eq!(s.matches("was deleted by someone else: put back").count(), 3, "{s}");
    // Deleted once more: held back for the back-off, passes go on.
    if present(&read()) {
        delete();
    }
    // Three passes or more at --interval 1, the agent still running.
    std::thread::sleep(Duration::from_millis(3500));
    let alive = agent.try_wait().unwrap().is_none();
    let _ = agent.kill();
    let _ = agent.wait();
    assert!(alive, "the agent stopped: {}", logged());
    assert!(!present(&read()), "left alone during the back-off: {}", logged());
    assert_eq!(logged().matches("was deleted by someone else: put back").count(), 3, "{}", logged());
}
