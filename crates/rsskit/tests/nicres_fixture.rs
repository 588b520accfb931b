//! NIC resources against the fixture tree (tests/fixtures/host6cpu, its
//! fake driver given ring sizes and coalescing here): `plan` with
//! `--rx-ring`, `--tx-ring`, `--coalesce` and `--channels`, `apply` with
//! read-back (a driver that rounds ring sizes is named), `check` aligned,
//! `--restore` byte for byte, and the agent putting drifted rings and
//! coalescing back.

mod common;

use common::fixture::{files, HostTree};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::fs;
use std::path::Path;
use std::process::{Command, Output};

const MAC: &str = "00:1b:21:aa:bb:cc";

struct Host(HostTree);

fn s(p: &Path) -> String {
    p.display().to_string()
}

fn out(o: &Output) -> String {
    format!("{}\n{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

impl Host {
    /// The fixture with rings (256/256 of 4096/1024), adaptive coalescing
    /// and up to 8 combined channels; `extra` merged into its driver file.
    fn new(tag: &str, extra: Value) -> Host {
        let h = Host(HostTree::new(tag));
        let dev = h.0 .0.join("sys/class/net/eth0");
        fs::write(dev.join("address"), format!("{MAC}\n")).unwrap();
        fs::write(dev.join("addr_assign_type"), "0\n").unwrap();
        let mut d = h.driver();
        d["rings"] = json!({"rx": 256, "tx": 256, "rx_max": 4096, "tx_max": 1024});
        d["coalesce"] = json!({"adaptive_rx": true, "adaptive_tx": true, "rx_usecs": 3, "rx_frames": 0,
                               "tx_usecs": 48, "tx_frames": 0});
        d["max_combined"] = json!(8);
        for (k, v) in extra.as_object().unwrap() {
            d[k] = v.clone();
        }
        h.set_driver(&d);
        h
    }
    fn driver(&self) -> Value {
        serde_json::from_str(&fs::read_to_string(self.0 .0.join("ethtool/eth0.json")).unwrap()).unwrap()
    }
    fn set_driver(&self, v: &Value) {
        // Written whole at once, as the kernel's answer changes.
        let p = self.0 .0.join("ethtool/eth0.json");
        fs::write(p.with_extension("tmp"), serde_json::to_string_pretty(v).unwrap()).unwrap();
        fs::rename(p.with_extension("tmp"), p).unwrap();
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
    fn snapshot(&self) -> (BTreeMap<String, Vec<u8>>, Value) {
        let mut m = BTreeMap::new();
        files(&self.0 .0.join("sys"), &self.0 .0, &mut m);
        files(&self.0 .0.join("proc"), &self.0 .0, &mut m);
        (m, self.driver())
    }
}

#[test]
fn rings_and_coalescing_planned_applied_read_back_and_restored() {
    let h = Host::new("nicres-apply", json!({}));
    let before = h.snapshot();
    let o = h.run(&[
        "plan",
        "--iface",
        "eth0",
        "--rx-ring",
        "4096",
        "--tx-ring",
        "512",
        "--coalesce",
        "fixed:50,32",
    ]);
    assert!(o.status.success(), "{}", out(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("rings: rx 4096, tx 512"), "{text}");
    assert!(text.contains("coalescing: adaptive_rx=0,rx_usecs=50,rx_frames=32"), "{text}");
    assert!(text.contains("channels 4: kept (--channels keep, the default)"), "{text}");
    let o = h.run(&[
        "plan",
        "--iface",
        "eth0",
        "--rx-ring",
        "4096",
        "--tx-ring",
        "512",
        "--coalesce",
        "fixed:50,32",
        "--json",
    ]);
    assert!(o.status.success(), "{}", out(&o));
    fs::write(h.0 .0.join("plan.json"), &o.stdout).unwrap();
    let p: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        (p["devices"][0]["rx_ring"].clone(), p["devices"][0]["tx_ring"].clone()),
        (json!(4096), json!(512))
    );

    let o = h.run(&["apply", "plan.json", "--save", "saved.json"]);
    assert!(o.status.success(), "{}", out(&o));
    let log = out(&o);
    assert!(log.contains("RX ring size") && log.contains("interrupt coalescing"), "{log}");
    let d = h.driver();
    assert_eq!((d["rings"]["rx"].clone(), d["rings"]["tx"].clone()), (json!(4096), json!(512)));
    assert_eq!(d["coalesce"]["adaptive_rx"], json!(false));
    assert_eq!(
        (d["coalesce"]["rx_usecs"].clone(), d["coalesce"]["rx_frames"].clone()),
        (json!(50), json!(32))
    );
    assert_eq!(d["coalesce"]["adaptive_tx"], json!(true), "a field not asked for is kept");
    assert_eq!(d["coalesce"]["tx_usecs"], json!(48));
    let saved = fs::read_to_string(h.0 .0.join("saved.json")).unwrap();
    assert!(saved.contains("\"rx_ring\"") && saved.contains("\"coalesce\""), "{saved}");
    assert!(
        saved.contains("adaptive_rx=1,adaptive_tx=1,rx_usecs=3,rx_frames=0,tx_usecs=48,tx_frames=0"),
        "every modelled field saved: {saved}"
    );

    let o = h.run(&["check", "--iface", "eth0"]);
    assert_eq!(o.status.code(), Some(0), "{}", out(&o));
    let o = h.run(&["apply", "plan.json", "--save", "again.json"]);
    assert!(String::from_utf8_lossy(&o.stdout).contains("nothing to do"), "{}", out(&o));

    let o = h.run(&["apply", "--restore", "saved.json"]);
    assert!(o.status.success(), "{}", out(&o));
    let after = h.snapshot();
    assert_eq!(after.0, before.0, "sysfs/procfs byte for byte");
    assert_eq!(after.1, before.1, "rings, coalescing, key and table as before");
}

#[test]
fn a_driver_that_rounds_a_ring_says_so_and_limits_are_named() {
    let h = Host::new("nicres-round", json!({"ring_align": 64}));
    let o = h.run(&["apply", "--iface", "eth0", "--rx-ring", "1000", "--save", "saved.json"]);
    let log = out(&o);
    assert!(!o.status.success(), "a setting read back otherwise is not applied: {log}");
    assert!(log.contains("1024") && log.contains("the driver rounded the ring size"), "{log}");
    assert_eq!(h.driver()["rings"]["rx"], json!(1024));

    let o = h.run(&["plan", "--iface", "eth0", "--tx-ring", "2048"]);
    assert!(!o.status.success());
    let log = out(&o);
    assert!(log.contains("eth0: tx_ring 2048 is out of range: the device takes 1 to 1024"), "{log}");
    for bad in [["--rx-ring", "0"], ["--coalesce", "fast"], ["--channels", "lots"]] {
        let o = h.run(&["plan", "--iface", "eth0", bad[0], bad[1]]);
        assert_eq!(o.status.code(), Some(2), "{bad:?}: {}", out(&o));
        assert!(String::from_utf8_lossy(&o.stderr).contains(bad[0]), "{bad:?}: {}", out(&o));
    }
    // A driver that refuses adaptive moderation: refused, named, the rest applied.
    let h = Host::new(
        "nicres-noadaptive",
        json!({"no_adaptive": true, "coalesce": {"adaptive_rx": false,
        "adaptive_tx": false, "rx_usecs": 3, "rx_frames": 0, "tx_usecs": 0, "tx_frames": 0}}),
    );
    let o = h.run(&["apply", "--iface", "eth0", "--coalesce", "adaptive", "--save", "saved.json"]);
    let log = out(&o);
    assert!(!o.status.success() && log.contains("Operation not supported"), "{log}");
    assert_eq!(h.driver()["coalesce"]["rx_usecs"], json!(3));
}

#[test]
fn channels_are_chosen_one_per_planned_cpu_with_the_reason() {
    let h = Host::new("nicres-channels", json!({}));
    let o = h.run(&["plan", "--iface", "eth0", "--cpus", "0-5", "--channels", "auto", "--json"]);
    assert!(o.status.success(), "{}", out(&o));
    let p: Value = serde_json::from_slice(&o.stdout).unwrap();
    let c = &p["devices"][0]["channels"];
    assert_eq!((c["now"].clone(), c["chosen"].clone(), c["max"].clone()), (json!(4), json!(6), json!(8)));
    assert_eq!(c["reason"], json!("channels 4 -> 6: one queue per planned CPU (6 CPUs, device max 8)"));
    let o = h.run(&["plan", "--iface", "eth0", "--channels", "9"]);
    assert!(!o.status.success());
    assert!(out(&o).contains("eth0: channels 9 is out of range: the device takes 1 to 8"), "{}", out(&o));
}

#[test]
fn the_agent_puts_drifted_rings_and_coalescing_back() {
    let h = Host::new("nicres-agent", json!({}));
    let o = h.run(&["plan", "--iface", "eth0", "--rx-ring", "2048", "--coalesce", "fixed:20", "--json"]);
    assert!(o.status.success(), "{}", out(&o));
    fs::write(h.0 .0.join("plan.json"), &o.stdout).unwrap();
    let o = h.run(&["apply", "plan.json", "--persist"]);
    assert!(o.status.success(), "{}", out(&o));
    let o = h.run(&["agent", "--once"]);
    assert!(o.status.success(), "nothing drifted yet: {}", out(&o));

    let mut d = h.driver();
    d["rings"]["rx"] = json!(512);
    d["coalesce"]["adaptive_rx"] = json!(true);
    h.set_driver(&d);
    let o = h.run(&["agent", "--once"]);
    let log = out(&o);
    assert!(o.status.success(), "put back, so aligned: {log}");
    assert!(log.contains("eth0: corrected RX ring size: 512 -> 2048"), "{log}");
    assert!(log.contains("eth0: corrected interrupt coalescing"), "{log}");
    let d = h.driver();
    assert_eq!((d["rings"]["rx"].clone(), d["coalesce"]["adaptive_rx"].clone()), (json!(2048), json!(false)));
    assert_eq!(d["coalesce"]["rx_usecs"], json!(20));
}

#[test]
fn check_warns_when_nic_drops_grow_during_it() {
    let h = Host::new("nicres-drops", json!({}));
    let file = h.0 .0.join("sys/class/net/eth0/statistics/rx_missed_errors");
    fs::write(&file, "5\n").unwrap();
    // Steady counters: no warning.
    let steady = h.run(&["check", "--iface", "eth0", "--json"]);
    assert!(!out(&steady).contains("dropped frames during the check"), "{}", out(&steady));
    // A NIC losing frames while rsskit checks: the counter grows under it
    // (a writer bumping it as fast as it can; a check takes milliseconds,
    // so a few runs may fall between two bumps).
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (stop, file) = (stop.clone(), file.clone());
        std::thread::spawn(move || {
            let mut n = 5u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                n += 1;
                let tmp = file.with_extension("tmp");
                fs::write(&tmp, format!("{n}\n")).unwrap();
                fs::rename(&tmp, &file).unwrap();
            }
        })
    };
    let mut seen = None;
    for _ in 0..50 {
        let o = h.run(&["check", "--iface", "eth0"]);
        let log = out(&o);
        if log.contains("dropped frames during the check") {
            seen = Some((o, log));
            break;
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    writer.join().unwrap();
    let (o, log) = seen.expect("a check saw the counter grow");
    assert!(log.contains("rx_missed_errors +") && log.contains("from statistics"), "{log}");
    assert_eq!(o.status.code(), steady.status.code(), "a warning, the verdict stands: {log}");
}

/// The queue directories and `eth0-TxRx-N` IRQs of the tree.
fn queues_and_irqs(h: &Host) -> (usize, Vec<(u32, String)>) {
    let q = fs::read_dir(h.0 .0.join("sys/class/net/eth0/queues"))
        .unwrap()
        .filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().starts_with("rx-"))
        .count();
    let irqs = fs::read_to_string(h.0 .0.join("proc/interrupts"))
        .unwrap()
        .lines()
        .filter(|l| l.contains("eth0-TxRx-"))
        .map(|l| {
            (
                l.split(':').next().unwrap().trim().parse().unwrap(),
                l.split_whitespace().last().unwrap().into(),
            )
        })
        .collect();
    (q, irqs)
}

#[test]
fn channels_set_first_then_the_new_queues_planned_pinned_and_all_restored() {
    let h = Host::new("nicres-chapply", json!({}));
    let before = h.snapshot();
    let o = h.run(&[
        "plan",
        "--iface",
        "eth0",
        "--cpus",
        "0-5",
        "--channels",
        "auto",
        "--rx-ring",
        "1024",
        "--json",
    ]);
    assert!(o.status.success(), "{}", out(&o));
    fs::write(h.0 .0.join("plan.json"), &o.stdout).unwrap();
    let p: Value = serde_json::from_slice(&o.stdout).unwrap();
    let d = &p["devices"][0];
    assert_eq!(d["rx"].as_array().unwrap().len(), 6, "planned for the chosen count: {d}");
    let table: Vec<u64> = d["table"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap()).collect();
    assert!(table.contains(&5), "the table spreads over the new queues");
    assert!(d["rx"][5]["irq"].is_null(), "a queue that does not exist yet has no IRQ number");

    let o = h.run(&["apply", "plan.json", "--save", "saved.json"]);
    let log = out(&o);
    assert!(o.status.success(), "{log}");
    assert!(
        log.find("combined channels").unwrap() < log.find("RX ring size").unwrap(),
        "channels first: {log}"
    );
    let (nq, irqs) = queues_and_irqs(&h);
    assert_eq!(nq, 6);
    assert_eq!(
        irqs.iter().map(|(_, n)| n.as_str()).collect::<Vec<_>>(),
        (0..6).map(|q| format!("eth0-TxRx-{q}")).collect::<Vec<_>>()
    );
    for (q, (irq, _)) in irqs.iter().enumerate() {
        let cpus = fs::read_to_string(h.0 .0.join(format!("proc/irq/{irq}/smp_affinity_list"))).unwrap();
        assert_eq!(
            cpus.trim(),
            d["rx"][q]["cpu"].to_string(),
            "IRQ {irq} of rx-{q} (new ones found after the change)"
        );
    }
    let drv = h.driver();
    assert_eq!((drv["combined"].clone(), drv["rings"]["rx"].clone()), (json!(6), json!(1024)));
    assert_eq!(drv["rss"]["table"], d["table"]);
    let o = h.run(&["check", "--iface", "eth0"]);
    assert_eq!(o.status.code(), Some(0), "{}", out(&o));
    let saved: Value = serde_json::from_str(&fs::read_to_string(h.0 .0.join("saved.json")).unwrap()).unwrap();
    let kinds: Vec<&str> =
        saved["settings"].as_array().unwrap().iter().map(|e| e["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds[0], "channels", "{saved}");
    let table_saved =
        saved["settings"].as_array().unwrap().iter().find(|e| e["kind"] == "rss_table").unwrap();
    assert_eq!(
        table_saved["value"],
        before.1["rss"]["table"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.to_string())
            .collect::<Vec<_>>()
            .join(","),
        "the table as it was before the channel change"
    );

    let o = h.run(&["apply", "--restore", "saved.json"]);
    assert!(o.status.success(), "{}", out(&o));
    let after = h.snapshot();
    assert_eq!(after.0, before.0, "sysfs/procfs byte for byte: queues and IRQs as they were");
    assert_eq!(after.1, before.1, "channels, rings, key and table as before");

    // Fewer queues than the table names now: the table goes first.
    let o = h.run(&["apply", "--iface", "eth0", "--cpus", "0", "--channels", "auto", "--save", "fewer.json"]);
    assert!(o.status.success(), "{}", out(&o));
    assert_eq!(queues_and_irqs(&h).0, 1);
    let o = h.run(&["apply", "--restore", "fewer.json"]);
    assert!(o.status.success(), "{}", out(&o));
    // The driver numbers the IRQs of queues it creates again anew (as
    // MSI-X drivers do): every other file as before.
    let (now, drv) = h.snapshot();
    let same = |(k, _): (&String, &Vec<u8>)| {
        !k.starts_with("proc/irq/") && !k.contains("interrupts") && !k.contains("msi_irqs")
    };
    let (a, b): (Vec<_>, Vec<_>) =
        (now.iter().filter(|x| same(*x)).collect(), before.0.iter().filter(|x| same(*x)).collect());
    assert!(a == b, "queues, RPS, XPS as before");
    assert_eq!(drv, before.1, "channels, key and table as before");
    assert_eq!(queues_and_irqs(&h).1.len(), 4);
}

#[test]
fn a_persisted_channel_plan_is_kept_by_the_agent() {
    let h = Host::new("nicres-chpersist", json!({}));
    let o = h.run(&["plan", "--iface", "eth0", "--cpus", "0-5", "--channels", "6", "--json"]);
    assert!(o.status.success(), "{}", out(&o));
    fs::write(h.0 .0.join("plan.json"), &o.stdout).unwrap();
    let o = h.run(&["apply", "plan.json", "--persist"]);
    assert!(o.status.success(), "{}", out(&o));
    let o = h.run(&["agent", "--once"]);
    assert!(o.status.success(), "the new queues' IRQs found and in place: {}", out(&o));
    // Someone moves a new queue's IRQ: the agent puts it back.
    let (_, irqs) = queues_and_irqs(&h);
    let (irq, _) = irqs.iter().find(|(_, n)| n == "eth0-TxRx-5").unwrap().clone();
    let f = h.0 .0.join(format!("proc/irq/{irq}/smp_affinity_list"));
    let want = fs::read_to_string(&f).unwrap();
    fs::write(&f, "0-5\n").unwrap();
    let o = h.run(&["agent", "--once"]);
    let log = out(&o);
    assert!(o.status.success(), "{log}");
    assert!(log.contains(&format!("IRQ {irq} (eth0-TxRx-5) affinity: 0-5 -> {}", want.trim())), "{log}");
    assert_eq!(fs::read_to_string(&f).unwrap(), want);
}
