//! netdevsim in the kernel 7.3 lab (`scripts/lab boot --kernel 7.3` loads
//! the netdevsim.ko that `scripts/lab setup --kernel 7.3` builds into the
//! lab's cache; `scripts/lab nsim` makes a device). One boot, steps in order:
//!
//! 1. `info` reads netdevsim as `ethtool` and the kernel's netdev family do:
//!    channels (`ethtool -l`), RSS refused (7.3's netdevsim implements no
//!    key or table: `ethtool -x` fails too), one NAPI per RX queue.
//! 2. RSS contexts: the device refuses `ethtool -X ... context new`, and
//!    `info` lists no context (what 7.3's netdevsim can prove of contexts).
//! 3. `plan` / `apply` / `check` / `apply --restore` on it: every queue file
//!    written as planned, then put back byte for byte; channels changed with
//!    `ethtool -L` and back are followed by `info` and `check`.
//! 4. Writes refused in the middle of an `apply` (a per-queue RFS table of
//!    2^30 entries, which 7.3 refuses with EINVAL, each right after its
//!    queue's RPS mask was written): exit 2, and the run names exactly the
//!    settings that remain written (each one's file says so, each refused
//!    one's file is unchanged); `apply --restore` puts every file back.
//! 5. netdevsim's debugfs error injection (`ethtool/set_err`, `get_err`):
//!    sticky, and only FEC obeys it in 7.3 (`docs/lab.md`): `--set-fec`
//!    fails with the errno armed until it is cleared, and an `apply`
//!    meanwhile is unaffected (rsskit sets no FEC).
//! 6. Rings, coalescing and channels through `rsskit_linux::ethtool` (the
//!    ioctl), in the guest (this test binary runs its ignored
//!    `in_guest_...` test there): each set read back by `ethtool`, a ring
//!    size above a maximum lowered in debugfs refused and named, the
//!    coalescing fields rsskit does not model kept, and everything put back
//!    until `ethtool -g/-c/-l` print what they printed before.
//!
//! Needs root, QEMU, /dev/net/tun, the 7.3 packages and a built netdevsim
//! in the lab's cache (fetched and built on first use: network then, and
//! mmdebstrap). Ignored with the reason only where QEMU cannot start
//! (`rsskit_no_qemu`); a failed netdevsim build fails it.
//! `RSSKIT_LAB_REUSE=1` uses a 7.3 lab already booted by hand.

mod common;

use common::lab::Lab;
use rsskit_linux::ethtool::params::Coalesce;
use rsskit_linux::ethtool::{Channels, Ethtool, Reported};
use serde_json::Value;
use std::collections::BTreeMap;
use std::process::Command;
use std::time::Instant;

const RSSKIT: &str = env!("CARGO_BIN_EXE_rsskit");
const NSIM: &str = "nsim0";
const QUEUES: usize = 4;

/// `scripts/lab nsim ARGS` (the helper the docs show); its stdout.
fn lab_nsim(args: &[&str]) -> (bool, String) {
    let o = Command::new(common::lab::script()).arg("nsim").args(args).output().expect("scripts/lab nsim");
    let text = String::from_utf8_lossy(&o.stdout).to_string();
    eprint!("{}", String::from_utf8_lossy(&o.stderr));
    (o.status.success(), text)
}

/// The device, made fresh (one left by a reused lab is deleted first); its
/// debugfs port directory.
fn new_device(lab: &Lab) -> String {
    if lab.run("test -e /sys/bus/netdevsim/devices/netdevsim1", 30).rc == 0 {
        assert!(lab_nsim(&["--del", "1"]).0, "deleting the device a reused lab left");
    }
    let (ok, out) = lab_nsim(&["--id", "1", "--queues", &QUEUES.to_string(), "--name", NSIM]);
    assert!(ok, "scripts/lab nsim: {out}");
    let mut f = out.split_whitespace();
    assert_eq!(f.next(), Some(NSIM), "{out}");
    f.next().unwrap_or_else(|| panic!("no debugfs directory in {out:?}")).to_string()
}

/// Every queue file `apply` may write and `threaded`, as `path value` lines
/// (read with `cat`, not by rsskit).
fn queue_files(lab: &Lab) -> BTreeMap<String, String> {
    let out = lab.ok(&format!(
        "cd /sys/class/net/{NSIM} && for f in threaded queues/rx-*/rps_cpus queues/rx-*/rps_flow_cnt \
         queues/tx-*/xps_cpus; do echo \"$f $(cat $f 2>&1)\"; done"
    ));
    out.lines()
        .filter_map(|l| l.split_once(' ').map(|(k, v)| (k.to_string(), v.trim().to_string())))
        .collect()
}

/// The combined channel count and its maximum, as `ethtool -l` prints them.
fn ethtool_channels(lab: &Lab) -> (u64, u64) {
    let out = lab.ok(&format!("ethtool -l {NSIM}"));
    let combined: Vec<u64> = out
        .lines()
        .filter_map(|l| l.trim().strip_prefix("Combined:").and_then(|v| v.trim().parse().ok()))
        .collect();
    assert_eq!(combined.len(), 2, "pre-set maximum and current: {out}");
    (combined[1], combined[0])
}

/// Step 1.
fn info_reads_netdevsim(lab: &Lab) {
    let v = lab.rsskit_json(&format!("info --iface {NSIM} --json"));
    let i = &v["interfaces"][0];
    assert_eq!(i["name"], NSIM, "{v}");
    assert_eq!(i["driver"], "netdevsim", "{i}");
    let (combined, max) = ethtool_channels(lab);
    assert_eq!((combined, max), (QUEUES as u64, QUEUES as u64), "the device was made with {QUEUES} queues");
    assert_eq!(i["channels"]["combined"], combined, "{}", i["channels"]);
    assert_eq!(i["channels"]["max_combined"], max, "{}", i["channels"]);
    assert_eq!(i["rx_queue_count"], QUEUES, "{i}");
    assert_eq!(i["tx_queue_count"], QUEUES, "{i}");
    // 7.3's netdevsim has no get_rxfh: both readers are refused.
    let x = lab.run(&format!("ethtool -x {NSIM}"), 60);
    assert_ne!(x.rc, 0, "ethtool -x on netdevsim: {}", x.text());
    assert_eq!(i["rss"]["supported"], false, "{}", i["rss"]);
    assert!(i["rss"]["reason"].as_str().is_some_and(|r| !r.is_empty()), "{}", i["rss"]);
    // The kernel's map, read independently: one NAPI per RX queue, no IRQ.
    let reader = format!("{}/tests/support/netdev_genl.py", env!("CARGO_MANIFEST_DIR"));
    let k: Value = serde_json::from_str(&lab.ok(&format!("python3 {reader} {NSIM}"))).expect("reader JSON");
    assert_eq!(i["queue_map"]["source"], "kernel netlink", "{}", i["queue_map"]);
    let mut rx_napis = 0;
    for q in k["queues"].as_array().expect("queues") {
        if q["type"] != "rx" {
            continue;
        }
        let id = q["id"].as_u64().unwrap() as usize;
        let mine = &i["rx_queues"][id];
        assert_eq!(
            mine["napi_id"],
            q.get("napi_id").cloned().unwrap_or(Value::Null),
            "rx-{id}: {mine} / {q}"
        );
        rx_napis += usize::from(!mine["napi_id"].is_null());
        assert!(mine["irq"].is_null(), "netdevsim has no IRQs: {mine}");
    }
    assert_eq!(rx_napis, QUEUES, "netdevsim links each RX queue to a NAPI instance: {k}");
    // Rings and coalescing where `info` shows them (added beside this test).
    for (field, cmd) in [("rings", "-g"), ("coalesce", "-c")] {
        match i.get(field) {
            Some(r) => eprintln!(
                "info shows {field}: {r}\nethtool {cmd}:\n{}",
                lab.ok(&format!("ethtool {cmd} {NSIM}"))
            ),
            None => eprintln!("info does not show {field} yet: not compared"),
        }
    }
    eprintln!("info reads {NSIM}: {QUEUES} combined channels of {max}, RSS refused, {rx_napis} RX NAPIs");
}

/// Step 2.
fn contexts_are_refused(lab: &Lab) {
    let c = lab.run(&format!("ethtool -X {NSIM} context new equal 2"), 60);
    assert_ne!(c.rc, 0, "7.3's netdevsim has no RSS contexts, yet: {}", c.text());
    let v = lab.rsskit_json(&format!("info --iface {NSIM} --json"));
    let rules = &v["interfaces"][0]["flow_rules"];
    let contexts = rules.get("contexts").and_then(|c| c.as_object()).map_or(0, |c| c.len());
    assert_eq!(contexts, 0, "no context exists: {rules}");
    assert!(rules["rules"].as_array().is_none_or(|r| r.is_empty()), "{rules}");
    eprintln!("context creation refused ({}); info lists none: {rules}", c.text().trim().replace('\n', " "));
}

/// Step 3.
fn plan_apply_check_restore(lab: &Lab) {
    let before = queue_files(lab);
    let plan = lab.rsskit_json(&format!("plan --iface {NSIM} --json"));
    lab.ok(&format!("{RSSKIT} plan --iface {NSIM} --json > /tmp/nsim-plan.json"));
    let d = &plan["devices"][0];
    assert_eq!(d["name"], NSIM, "{plan}");
    let a = lab.run(
        &format!("rm -f /tmp/nsim-save.json; {RSSKIT} apply /tmp/nsim-plan.json --save /tmp/nsim-save.json"),
        180,
    );
    assert_eq!(a.rc, 0, "{}", a.text());
    assert!(a.stdout.contains("settings applied and read back"), "{}", a.text());
    let after = queue_files(lab);
    let info = lab.rsskit_json(&format!("info --iface {NSIM} --json"));
    let i = &info["interfaces"][0];
    for q in d["rx"].as_array().expect("planned rx queues") {
        let n = q["queue"].as_u64().unwrap() as usize;
        assert_eq!(i["rx_queues"][n]["rps_cpus"], q["rps_cpus"], "rx-{n} as planned");
    }
    let written = before.iter().filter(|(k, v)| after.get(*k) != Some(v)).count();
    assert!(written > 0, "the plan changes queue files: {}", a.text());
    let c = lab.run(&format!("{RSSKIT} check --iface {NSIM}"), 180);
    assert_eq!(c.rc, 0, "check after apply: {}", c.text());
    let r = lab.run(&format!("{RSSKIT} apply --restore /tmp/nsim-save.json"), 180);
    assert!(r.rc == 0, "{}", r.text());
    assert_eq!(queue_files(lab), before, "restored byte for byte");
    eprintln!("plan/apply/check/restore: {written} queue files written, all put back");

    // Channels: the kernel's count changes the queues every reader sees.
    lab.ok(&format!("ethtool -L {NSIM} combined 2"));
    let v = lab.rsskit_json(&format!("info --iface {NSIM} --json"));
    assert_eq!(v["interfaces"][0]["channels"]["combined"], 2, "{}", v["interfaces"][0]["channels"]);
    assert_eq!(v["interfaces"][0]["rx_queue_count"], 2);
    let stale = lab.run(&format!("{RSSKIT} apply /tmp/nsim-plan.json --save /tmp/nsim-stale.json"), 180);
    assert_eq!(stale.rc, 1, "a plan for {QUEUES} queues on 2: refused, nothing written: {}", stale.text());
    lab.ok(&format!("ethtool -L {NSIM} combined {QUEUES}"));
    assert_eq!(ethtool_channels(lab).0, QUEUES as u64);
    let v = lab.rsskit_json(&format!("info --iface {NSIM} --json"));
    assert_eq!(v["interfaces"][0]["channels"]["combined"], QUEUES, "back");
    assert_eq!(queue_files(lab), before, "the stale plan wrote nothing, the queues are back as they were");
}

/// Step 4: `ok`/`REFUSED` lines of an apply, as (what, outcome ok).
fn outcomes(stdout: &str) -> Vec<(String, bool)> {
    stdout
        .lines()
        .filter_map(|l| {
            let l = l.trim_start();
            let (ok, rest) = match () {
                _ if l.starts_with("ok ") => (true, &l[3..]),
                _ if l.starts_with("REFUSED ") => (false, &l[8..]),
                _ if l.starts_with("CHANGED ") => (false, &l[8..]),
                _ => return None,
            };
            let rest = rest.trim_start().strip_prefix(NSIM)?.trim_start();
            let what =
                rest.split([' ', ':', '=']).next()?.to_string() + " " + rest.split_whitespace().nth(1)?;
            Some((what.trim_end_matches(':').to_string(), ok))
        })
        .collect()
}

/// The queue file a setting line names (`rx-0 rps_cpus` -> `queues/rx-0/rps_cpus`).
fn file_of(what: &str) -> String {
    match what.split_once(' ') {
        Some((q, f)) if q.starts_with("rx-") || q.starts_with("tx-") => format!("queues/{q}/{f}"),
        _ => what.split(' ').next().unwrap_or(what).to_string(),
    }
}

fn refused_mid_apply(lab: &Lab) {
    let before = queue_files(lab);
    // 2^30 entries per queue (rsskit's largest): 7.3 refuses the write.
    lab.ok(&format!("{RSSKIT} plan --iface {NSIM} --rps-flow-cnt 1073741824 --json > /tmp/nsim-rfs.json"));
    let a = lab.run(
        &format!(
            "rm -f /tmp/nsim-rfs-save.json; {RSSKIT} apply /tmp/nsim-rfs.json --save /tmp/nsim-rfs-save.json"
        ),
        180,
    );
    assert_eq!(a.rc, 2, "some settings not applied: {}", a.text());
    let got = outcomes(&a.stdout);
    let first_refused =
        got.iter().position(|(_, ok)| !ok).unwrap_or_else(|| panic!("none refused: {}", a.text()));
    assert!(got[..first_refused].iter().any(|(_, ok)| *ok), "refused in the middle, after writes: {got:?}");
    let applied = got.iter().filter(|(_, ok)| *ok).count();
    let refused = got.len() - applied;
    assert!(
        a.stdout.contains(&format!("{applied} of {} settings applied, {refused} not", got.len())),
        "the run counts what remains written: {got:?}\n{}",
        a.text()
    );
    assert!(
        got.iter().filter(|(_, ok)| !ok).all(|(w, _)| w.ends_with("rps_flow_cnt")),
        "only the RFS tables are refused: {got:?}"
    );
    assert!(
        a.stderr.contains(&format!("{refused} of {} settings not applied", got.len()))
            && a.stderr.contains("apply --restore /tmp/nsim-rfs-save.json"),
        "the error says what remains and how to put it back: {}",
        a.text()
    );
    let after = queue_files(lab);
    for (what, ok) in &got {
        let f = file_of(what);
        let (b, n) = (before.get(&f), after.get(&f));
        assert!(b.is_some(), "{what}: no file {f} among {before:?}");
        if !ok {
            assert_eq!(b, n, "{what} refused: its file keeps its value");
        }
    }
    // Everything that differs now was named as written.
    for (f, v) in &after {
        if before.get(f) != Some(v) {
            assert!(got.iter().any(|(w, ok)| *ok && file_of(w) == *f), "{f} changed unannounced: {got:?}");
        }
    }
    let r = lab.run(&format!("{RSSKIT} apply --restore /tmp/nsim-rfs-save.json"), 180);
    assert_eq!(r.rc, 0, "{}", r.text());
    assert_eq!(queue_files(lab), before, "restored byte for byte");
    eprintln!(
        "apply refused mid-way: {applied} written and named, {refused} refused; --restore put all back"
    );
}

/// Step 5.
fn debugfs_injection(lab: &Lab, ddir: &str) {
    let err = format!("{ddir}/ethtool/set_err");
    lab.ok(&format!("test -w {err} && test -w {ddir}/ethtool/get_err"));
    lab.ok(&format!("echo 5 > {err}"));
    let before = queue_files(lab);
    for _ in 0..2 {
        let f = lab.run(&format!("ethtool --set-fec {NSIM} encoding off"), 60);
        assert_ne!(f.rc, 0, "set_err 5 (EIO) fails FEC sets, each time: {}", f.text());
    }
    let a = lab.run(
        &format!("rm -f /tmp/nsim-e.json; {RSSKIT} apply /tmp/nsim-plan.json --save /tmp/nsim-e.json"),
        180,
    );
    assert_eq!(a.rc, 0, "set_err fails no setting rsskit writes: {}", a.text());
    lab.ok(&format!("{RSSKIT} apply --restore /tmp/nsim-e.json"));
    lab.ok(&format!("echo 0 > {err}"));
    lab.ok(&format!("ethtool --set-fec {NSIM} encoding off"));
    assert_eq!(queue_files(lab), before);
    eprintln!("set_err: sticky, FEC only; apply unaffected");
}

#[test]
#[cfg_attr(rsskit_no_qemu, ignore = "QEMU cannot start here (no qemu-system-x86_64 or /dev/net/tun)")]
fn netdevsim_on_kernel_73() {
    let t = Instant::now();
    let lab = Lab::boot_or_reuse(&["--kernel", "7.3"], 1200);
    let release = lab.say_kernel();
    assert!(release.starts_with("7.3"), "the 7.3 lab runs {release}");
    let ddir = new_device(&lab);
    let say = |n: u32, what: &str| {
        eprintln!("\n== netdevsim step {n} (at {:.0} s): {what}", t.elapsed().as_secs_f64())
    };
    say(1, "info reads netdevsim");
    info_reads_netdevsim(&lab);
    say(2, "RSS contexts");
    contexts_are_refused(&lab);
    say(3, "plan, apply, check, --restore; channels");
    plan_apply_check_restore(&lab);
    say(4, "a write refused mid-apply");
    refused_mid_apply(&lab);
    say(5, "debugfs error injection");
    debugfs_injection(&lab, &ddir);
    say(6, "rings, coalescing, channels through rsskit-linux's ioctl, in the guest");
    let me = std::env::current_exe().expect("this test binary");
    let o = lab.run(
        &format!(
            "RSSKIT_NSIM_IF={NSIM} RSSKIT_NSIM_DDIR={ddir} {} --ignored --exact --nocapture --test-threads 1 {IN_GUEST}",
            me.display()
        ),
        240,
    );
    eprintln!("{}", o.stderr.trim_end());
    assert_eq!(o.rc, 0, "in the guest: {}", o.text());
    assert!(o.stdout.contains("1 passed"), "the in-guest test ran: {}", o.text());
    assert!(lab_nsim(&["--del", "1"]).0, "scripts/lab nsim --del 1");
    eprintln!("netdevsim lab test done in {:.0} s (kernel {release})", t.elapsed().as_secs_f64());
}

const IN_GUEST: &str = "in_guest_rings_coalescing_channels_through_the_ioctl";

/// A shell command in the guest (where the in-guest test runs); its stdout.
fn sh(cmd: &str) -> String {
    let o = Command::new("sh").arg("-c").arg(cmd).output().expect("sh");
    assert!(o.status.success(), "`{cmd}`: {}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).to_string()
}

/// `NAME: value` lines of an `ethtool -g`/`-l` section (after HEADER).
fn section(text: &str, header: &str) -> BTreeMap<String, String> {
    text.lines()
        .skip_while(|l| !l.starts_with(header))
        .skip(1)
        .take_while(|l| !l.ends_with("settings:") && !l.ends_with("maximums:"))
        .filter_map(|l| l.split_once(':').map(|(k, v)| (k.trim().to_string(), v.trim().to_string())))
        .collect()
}

/// The fields of `ethtool -c` (`rx-usecs: 50`; `Adaptive RX: on  TX: off`).
fn coalesce_text(text: &str) -> BTreeMap<String, String> {
    let mut m = BTreeMap::new();
    for l in text.lines() {
        if let Some(rest) = l.strip_prefix("Adaptive RX:") {
            let mut w = rest.split_whitespace();
            m.insert("adaptive-rx".into(), w.next().unwrap_or("").into());
            m.insert("adaptive-tx".into(), w.nth(1).unwrap_or("").into());
        } else if let Some((k, v)) = l.split_once(':') {
            m.insert(k.trim().to_string(), v.trim().to_string());
        }
    }
    m
}

fn supported<T: std::fmt::Debug>(what: &str, r: Reported<T>) -> T {
    match r {
        Reported::Supported(t) => t,
        Reported::Unsupported { reason } => panic!("{what}: refused: {reason}"),
    }
}

/// Step 6, in the guest: `rsskit_linux::ethtool` against netdevsim, each
/// value read back by `ethtool`, everything put back as it was.
#[test]
#[ignore = "runs inside the 7.3 lab guest: netdevsim_on_kernel_73 starts it there"]
fn in_guest_rings_coalescing_channels_through_the_ioctl() {
    let nsim = std::env::var("RSSKIT_NSIM_IF").expect("RSSKIT_NSIM_IF: started by netdevsim_on_kernel_73");
    let ddir = std::env::var("RSSKIT_NSIM_DDIR").expect("RSSKIT_NSIM_DDIR: the port's debugfs directory");
    let eth = Ethtool::open(&nsim).expect("the netdevsim device");
    let (g0, c0, l0) = (
        sh(&format!("ethtool -g {nsim}")),
        sh(&format!("ethtool -c {nsim}")),
        sh(&format!("ethtool -l {nsim}")),
    );

    // Rings: read as ethtool reads them, set, read back by ethtool.
    let r = supported("rings", eth.rings().unwrap());
    let (max, cur) = (section(&g0, "Pre-set maximums:"), section(&g0, "Current hardware settings:"));
    assert_eq!(
        (r.rx.to_string(), r.tx.to_string(), r.rx_max.to_string(), r.tx_max.to_string()),
        (cur["RX"].clone(), cur["TX"].clone(), max["RX"].clone(), max["TX"].clone()),
        "{g0}"
    );
    let (rx, tx) = (r.rx_max / 4, r.tx_max / 16);
    supported("set_rings", eth.set_rings(rx, tx).unwrap());
    let g1 = section(&sh(&format!("ethtool -g {nsim}")), "Current hardware settings:");
    assert_eq!((g1["RX"].clone(), g1["TX"].clone()), (rx.to_string(), tx.to_string()));
    assert_eq!((&g1["RX Mini"], &g1["RX Jumbo"]), (&cur["RX Mini"], &cur["RX Jumbo"]), "mini and jumbo kept");
    // A maximum lowered through debugfs: rsskit reads it, and a size above it is refused by name.
    let maxf = format!("{ddir}/ethtool/ring/rx_max_pending");
    let max0 = sh(&format!("cat {maxf}")).trim().to_string();
    sh(&format!("echo {} > {maxf}", rx));
    assert_eq!(supported("rings", eth.rings().unwrap()).rx_max, rx, "the lowered maximum");
    match eth.set_rings(rx * 2, tx).unwrap() {
        Reported::Unsupported { reason } => {
            assert!(reason.contains("SRINGPARAM") && reason.contains("Invalid argument"), "{reason}")
        }
        Reported::Supported(()) => panic!("{} RX descriptors above the maximum {rx} were taken", rx * 2),
    }
    assert_eq!(supported("rings", eth.rings().unwrap()).rx, rx, "the refused set changed nothing");
    sh(&format!("echo {max0} > {maxf}"));
    supported("set_rings", eth.set_rings(r.rx, r.tx).unwrap());
    assert_eq!(sh(&format!("ethtool -g {nsim}")), g0, "rings put back");

    // Coalescing: fields rsskit does not model, set with ethtool, survive rsskit's set.
    sh(&format!("ethtool -C {nsim} rx-usecs-irq 7 tx-frames-irq 9 pkt-rate-low 100 rx-frames-low 3"));
    let c1 = coalesce_text(&sh(&format!("ethtool -c {nsim}")));
    let before = supported("coalesce", eth.coalesce().unwrap());
    let want = Coalesce {
        adaptive_rx: true,
        adaptive_tx: false,
        rx_usecs: 50,
        rx_frames: 32,
        tx_usecs: 25,
        tx_frames: 16,
    };
    assert_ne!(before, want);
    supported("set_coalesce", eth.set_coalesce(&want).unwrap());
    assert_eq!(supported("coalesce", eth.coalesce().unwrap()), want, "read back through the ioctl");
    let c2 = coalesce_text(&sh(&format!("ethtool -c {nsim}")));
    for (k, v) in [
        ("adaptive-rx", "on"),
        ("adaptive-tx", "off"),
        ("rx-usecs", "50"),
        ("rx-frames", "32"),
        ("tx-usecs", "25"),
        ("tx-frames", "16"),
    ] {
        assert_eq!(c2.get(k).map(String::as_str), Some(v), "{k} as ethtool reads it: {c2:?}");
    }
    for k in ["rx-usecs-irq", "tx-frames-irq", "pkt-rate-low", "rx-frames-low"] {
        assert_eq!(c2.get(k), c1.get(k), "{k}: not modelled, kept ({c1:?} -> {c2:?})");
    }
    assert_eq!(c1["rx-usecs-irq"], "7", "{c1:?}");
    supported("set_coalesce", eth.set_coalesce(&before).unwrap());
    sh(&format!("ethtool -C {nsim} rx-usecs-irq 0 tx-frames-irq 0 pkt-rate-low 0 rx-frames-low 0"));
    assert_eq!(sh(&format!("ethtool -c {nsim}")), c0, "coalescing put back");

    // Channels: the queues follow the count.
    let ch = supported("channels", eth.channels().unwrap());
    supported("set_channels", eth.set_channels(Channels { combined_count: 2, ..ch }).unwrap());
    assert_eq!(section(&sh(&format!("ethtool -l {nsim}")), "Current hardware settings:")["Combined"], "2");
    let queues = sh(&format!("ls /sys/class/net/{nsim}/queues"));
    assert_eq!(queues.split_whitespace().collect::<Vec<_>>(), ["rx-0", "rx-1", "tx-0", "tx-1"], "{queues}");
    supported("set_channels", eth.set_channels(ch).unwrap());
    assert_eq!(sh(&format!("ethtool -l {nsim}")), l0, "channels put back");
    eprintln!(
        "in the guest: rings {}/{} -> {rx}/{tx} and back, {} refused above a debugfs maximum of {rx}; \
         coalescing set with 4 unmodelled fields kept; channels {} -> 2 -> {}",
        r.rx,
        r.tx,
        rx * 2,
        ch.combined_count,
        ch.combined_count
    );
}
