//! The ethtool netlink family in the lab (issue 37 item 2). One test, two
//! boots:
//!
//! 1. Kernel 7.3 (`scripts/lab boot --kernel 7.3`: eth0 a 4-queue
//!    virtio-net with RSS, eth1 an igb): on both NICs rsskit's netlink reads
//!    (RSS, channels, rings, coalescing) equal its ioctl reads and what
//!    `ethtool` prints, and `info` says netlink answered each. Writes go
//!    through netlink and are read back through the ioctl and `ethtool`,
//!    then restored through the ioctl and read back through netlink:
//!    channels on virtio-net; rings, coalescing and the RSS table on igb.
//!    An `input_xfrm` igb cannot do is refused with the kernel's reason.
//! 2. Kernel 6.1 (the default lab): the family answers channels, rings and
//!    coalescing, but has no RSS_GET (6.2+): `info` says RSS came through
//!    the ioctl, and the rest through netlink.
//!
//! The guest runs the host's ethtool (Debian 12's 6.1): its `-l`, `-g`,
//! `-c` ask through netlink, its `-x` through the ioctl (checked here with
//! strace where the host has it). The cross-reads go through a test helper,
//! `examples/ethtool_nl_probe.rs`.
//!
//! Needs root, QEMU and /dev/net/tun, and the 7.3 packages in the lab's
//! cache. Ignored with the reason only where QEMU cannot start
//! (`rsskit_no_qemu`).

mod common;

use common::lab::Lab;
use serde_json::Value;
use std::time::Instant;

const RSSKIT: &str = env!("CARGO_BIN_EXE_rsskit");

/// The helper, built by `cargo test` beside the binary.
fn probe() -> String {
    let bin = std::path::Path::new(RSSKIT);
    let p = bin.parent().unwrap().join("examples").join("ethtool_nl_probe");
    assert!(p.exists(), "{} missing: `cargo build -p rsskit --example ethtool_nl_probe` (or a `cargo test -p rsskit` of all targets) builds it", p.display());
    p.display().to_string()
}

fn json(lab: &Lab, cmd: &str) -> Value {
    let o = lab.run(cmd, 180);
    assert_eq!(o.rc, 0, "{cmd}: {}", o.text());
    serde_json::from_str(&o.stdout).unwrap_or_else(|e| panic!("{cmd}: not JSON ({e}): {}", o.text()))
}

fn read(lab: &Lab, nic: &str) -> Value {
    json(lab, &format!("{} read {nic}", probe()))
}

fn set(lab: &Lab, nic: &str, via: &str, what: &str) -> Value {
    json(lab, &format!("{} set {nic} {via} {what}", probe()))
}

/// The numbers after `label` in the "Current hardware settings" part of an
/// `ethtool -l`/`-g` listing.
fn current(text: &str, label: &str) -> u64 {
    let cur = text.split("Current hardware settings:").nth(1).unwrap_or_else(|| panic!("{text}"));
    cur.lines()
        .find_map(|l| l.strip_prefix(label).map(|v| v.trim().parse::<u64>()))
        .and_then(Result::ok)
        .unwrap_or_else(|| panic!("{label} in {text}"))
}

/// `ethtool -x`'s table entries.
fn ethtool_table(text: &str) -> Vec<u64> {
    let part = text.split("RSS hash key:").next().unwrap();
    part.lines()
        .filter_map(|l| l.split_once(':').filter(|(a, _)| a.trim().parse::<u64>().is_ok()).map(|(_, b)| b))
        .flat_map(|b| b.split_whitespace().map(|x| x.parse::<u64>().unwrap()))
        .collect()
}

/// Netlink and ioctl answers agree for every query; returns how many were supported.
fn reads_agree(probe: &Value, nic: &str) -> usize {
    let (nl, io) = (&probe["netlink"], &probe["ioctl"]);
    assert!(nl.get("unavailable").is_none(), "{nic}: 7.3 has the ethtool family: {probe}");
    let mut supported = 0;
    for q in ["channels", "rings", "coalesce", "rss"] {
        assert_eq!(nl[q]["supported"], io[q]["supported"], "{nic} {q}: netlink {} vs ioctl {}", nl[q], io[q]);
        if nl[q]["supported"] != true {
            continue;
        }
        supported += 1;
        if q == "rss" {
            for f in ["key", "indir", "hfunc", "input_xfrm"] {
                assert_eq!(nl[q]["value"][f], io[q]["value"][f], "{nic} rss {f}");
            }
            assert_eq!(nl[q]["value"]["source"], "ETHTOOL_MSG_RSS_GET");
        } else {
            assert_eq!(nl[q]["value"], io[q]["value"], "{nic} {q}");
        }
    }
    supported
}

fn info_says_netlink(lab: &Lab, nic: &str, probe: &Value) {
    let v = json(lab, &format!("{RSSKIT} info --iface {nic} --json"));
    let i = &v["interfaces"][0];
    assert!(i["ethtool_netlink_unavailable"].is_null(), "{i}");
    for (field, q) in [("channels_via", "channels"), ("rss_via", "rss")] {
        if probe["netlink"][q]["supported"] == true {
            assert_eq!(i[field], "netlink", "{nic}: {field}");
        }
    }
    for q in ["rings", "coalesce"] {
        if probe["netlink"][q]["supported"] == true {
            assert_eq!(i[q]["via"], "netlink", "{nic}: {}", i[q]);
        }
    }
    if probe["netlink"]["rss"]["supported"] == true {
        assert_eq!(i["rss"]["table"], probe["ioctl"]["rss"]["value"]["indir"], "{nic}");
    }
}

fn ethtool_agrees(lab: &Lab, nic: &str, p: &Value) {
    let io = &p["ioctl"];
    if io["channels"]["supported"] == true {
        let l = lab.ok(&format!("ethtool -l {nic}"));
        assert_eq!(current(&l, "Combined:"), io["channels"]["value"]["combined_count"], "{nic}: {l}");
    }
    if io["rings"]["supported"] == true {
        let g = lab.ok(&format!("ethtool -g {nic}"));
        assert_eq!(current(&g, "RX:"), io["rings"]["value"]["rx"], "{nic}: {g}");
        assert_eq!(current(&g, "TX:"), io["rings"]["value"]["tx"], "{nic}: {g}");
    }
    if io["coalesce"]["supported"] == true {
        let c = lab.ok(&format!("ethtool -c {nic}"));
        let us = c.lines().find_map(|l| l.strip_prefix("rx-usecs:")).map(|v| v.trim().to_string());
        if let Some(Ok(us)) = us.map(|u| u.parse::<u64>()) {
            assert_eq!(us, io["coalesce"]["value"]["rx_usecs"], "{nic}: {c}");
        }
    }
    if io["rss"]["supported"] == true {
        let x = lab.ok(&format!("ethtool -x {nic}"));
        let t: Vec<Value> = ethtool_table(&x).into_iter().map(Value::from).collect();
        assert_eq!(Value::from(t), io["rss"]["value"]["indir"], "{nic}: {x}");
    }
}

fn ok(v: &Value, what: &str) {
    assert_eq!(v["supported"], true, "{what}: {v}");
}

/// Which of ethtool 6.1's commands open a netlink socket (strace, where the host has it).
fn ethtool_interfaces(lab: &Lab) {
    for opt in ["-l", "-g", "-c", "-x"] {
        let o = lab.run(&format!("strace -f -e trace=socket ethtool {opt} eth0 2>&1 >/dev/null"), 60);
        if o.rc != 0 {
            eprintln!("strace not usable in the guest: {}", o.text().trim());
            return;
        }
        let nl = o.stdout.contains("NETLINK_GENERIC");
        eprintln!("ethtool {opt}: {}", if nl { "netlink" } else { "ioctl" });
    }
}

fn kernel73(lab: &Lab) {
    ethtool_interfaces(lab);
    for nic in ["eth0", "eth1"] {
        let p = read(lab, nic);
        let n = reads_agree(&p, nic);
        assert!(n >= 3, "{nic}: channels, rings or coalescing and RSS answered: {p}");
        assert_eq!(p["netlink"]["rss"]["supported"], true, "{nic}: RSS over netlink: {p}");
        info_says_netlink(lab, nic, &p);
        ethtool_agrees(lab, nic, &p);
        eprintln!("{nic}: netlink = ioctl = ethtool for {n} queries");
    }

    // virtio-net: channels through netlink, read back through the ioctl and ethtool.
    let before = read(lab, "eth0");
    let ch = before["ioctl"]["channels"]["value"]["combined_count"].as_u64().unwrap();
    ok(&set(lab, "eth0", "netlink", "channels 2"), "eth0 channels 2 via netlink");
    let p = read(lab, "eth0");
    assert_eq!(p["ioctl"]["channels"]["value"]["combined_count"], 2, "{p}");
    assert_eq!(current(&lab.ok("ethtool -l eth0"), "Combined:"), 2);
    ok(&set(lab, "eth0", "ioctl", &format!("channels {ch}")), "eth0 channels restored via ioctl");
    assert_eq!(read(lab, "eth0")["netlink"]["channels"]["value"]["combined_count"], ch);

    // igb: rings, coalescing and the table through netlink; restored through the ioctl.
    let before = read(lab, "eth1");
    let r = &before["ioctl"]["rings"]["value"];
    let (rx, tx) = (r["rx"].as_u64().unwrap(), r["tx"].as_u64().unwrap());
    let (nrx, ntx) = (if rx == 512 { 1024 } else { 512 }, if tx == 512 { 1024 } else { 512 });
    ok(&set(lab, "eth1", "netlink", &format!("rings {nrx} {ntx}")), "eth1 rings via netlink");
    let g = lab.ok("ethtool -g eth1");
    assert_eq!((current(&g, "RX:"), current(&g, "TX:")), (nrx, ntx), "{g}");
    let p = read(lab, "eth1");
    assert_eq!(
        (&p["ioctl"]["rings"]["value"]["rx"], &p["ioctl"]["rings"]["value"]["tx"]),
        (&nrx.into(), &ntx.into())
    );
    ok(&set(lab, "eth1", "ioctl", &format!("rings {rx} {tx}")), "eth1 rings restored via ioctl");
    let p = read(lab, "eth1");
    assert_eq!(
        (&p["netlink"]["rings"]["value"]["rx"], &p["netlink"]["rings"]["value"]["tx"]),
        (&rx.into(), &tx.into())
    );

    let us = before["ioctl"]["coalesce"]["value"]["rx_usecs"].as_u64().unwrap();
    let nus = if us == 50 { 60 } else { 50 };
    ok(&set(lab, "eth1", "netlink", &format!("coalesce {nus}")), "eth1 coalesce via netlink");
    assert_eq!(read(lab, "eth1")["ioctl"]["coalesce"]["value"]["rx_usecs"], nus);
    assert!(lab.ok("ethtool -c eth1").lines().any(|l| l.trim() == format!("rx-usecs: {nus}")));
    ok(&set(lab, "eth1", "ioctl", &format!("coalesce {us}")), "eth1 coalesce restored via ioctl");
    assert_eq!(read(lab, "eth1")["netlink"]["coalesce"]["value"]["rx_usecs"], us);

    let table: Vec<u64> = before["ioctl"]["rss"]["value"]["indir"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap())
        .collect();
    if before["netlink"]["has_rss_set"] == true {
        // An uneven table: queue 3 twice as often as in the default.
        let uneven: Vec<u64> = (0..table.len() as u64).map(|i| [0, 1, 2, 3, 3][i as usize % 5]).collect();
        let text = |t: &[u64]| t.iter().map(u64::to_string).collect::<Vec<_>>().join(",");
        ok(&set(lab, "eth1", "netlink", &format!("table {}", text(&uneven))), "eth1 table via netlink");
        let p = read(lab, "eth1");
        assert_eq!(p["ioctl"]["rss"]["value"]["indir"], Value::from(uneven.clone()));
        assert_eq!(ethtool_table(&lab.ok("ethtool -x eth1")), uneven);
        // An input transform igb does not offer: refused, said, nothing changed.
        let x = set(lab, "eth1", "netlink", "xfrm 1");
        assert_eq!(x["supported"], false, "igb has no input_xfrm: {x}");
        assert!(x["reason"].as_str().unwrap().starts_with("ETHTOOL_MSG_RSS_SET: "), "{x}");
        eprintln!("eth1 input_xfrm sym-xor refused: {}", x["reason"]);
        let p = read(lab, "eth1");
        assert_eq!(p["netlink"]["rss"]["value"]["input_xfrm"], serde_json::json!([]), "{p}");
        ok(&set(lab, "eth1", "ioctl", &format!("table {}", text(&table))), "eth1 table restored via ioctl");
        assert_eq!(read(lab, "eth1")["netlink"]["rss"]["value"]["indir"], Value::from(table));
    } else {
        eprintln!("this 7.3 kernel's ethtool family has no RSS_SET: table writes take the ioctl");
    }
}

fn kernel61(lab: &Lab) {
    let p = read(lab, "eth0");
    let nl = &p["netlink"];
    assert!(nl.get("unavailable").is_none(), "6.1 has the ethtool family: {p}");
    assert!(nl["rss"]["unavailable"].as_str().is_some_and(|r| r.contains("RSS_GET")), "6.1: no RSS_GET: {p}");
    assert_eq!(nl["channels"], p["ioctl"]["channels"], "{p}");
    let v = json(lab, &format!("{RSSKIT} info --iface eth0 --json"));
    let i = &v["interfaces"][0];
    assert_eq!(i["rss_via"], "ioctl", "{i}");
    assert_eq!(i["rss"]["supported"], true, "virtio-net with RSS: {}", i["rss"]);
    assert_eq!(i["channels_via"], "netlink", "{i}");
    let t = lab.ok(&format!("{RSSKIT} info --iface eth0"));
    assert!(t.contains("Answered by: channels netlink, RSS ioctl"), "{t}");
}

#[test]
#[cfg_attr(
    rsskit_no_qemu,
    ignore = "QEMU cannot start here: no qemu-system-x86_64 or no /dev/net/tun (scripts/install-deps.sh installs QEMU)"
)]
fn lab_ethtool_netlink_73_and_61() {
    let t = Instant::now();
    {
        let lab = Lab::boot(&["--kernel", "7.3"], 1200);
        assert!(lab.say_kernel().starts_with("7.3"), "the 7.3 lab");
        kernel73(&lab);
        eprintln!("7.3 part done at {:.0} s", t.elapsed().as_secs_f64());
    }
    let lab = Lab::boot(&[], 1200);
    assert!(lab.say_kernel().starts_with("6.1"), "the 6.1 lab");
    kernel61(&lab);
    eprintln!("ethtool netlink lab test done in {:.0} s", t.elapsed().as_secs_f64());
}
