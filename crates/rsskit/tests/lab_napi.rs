//! Threaded NAPI in the 7.3 lab (`scripts/lab boot --kernel 7.3`; issue 37
//! item 4), on igb (eth1) and virtio-net (eth0), where netdev netlink says
//! which NAPI thread polls which queue:
//!
//! 1. With `threaded` on, `plan` keeps threading and pins each
//!    `napi/IF-ID` thread to its queue IRQ's CPUs; `apply --persist` writes
//!    the pins and the NAPI settings (`--napi-defer-hard-irqs`,
//!    `--gro-flush-timeout`); an independent reader (`ps`, `taskset -pc`)
//!    finds every thread on its planned CPUs; `check` passes.
//! 2. A thread moved with `taskset`: `check` exits 1 naming it, and
//!    `agent --once` puts it back. `threaded` turned off and on (new
//!    threads, new PIDs, floating): `agent --once` pins them again.
//! 3. `apply --restore` puts every thread's CPUs and both settings back.
//!
//! The guest's root is the host's, read-only: /etc is copied to a tmpfs in
//! the guest for the persisted plan. Needs root, QEMU and /dev/net/tun;
//! ignored with the reason only where QEMU cannot start (`rsskit_no_qemu`).
//! `RSSKIT_LAB_REUSE=1` uses a 7.3 lab already booted by hand.

mod common;

use common::lab::Lab;
use rsskit_runtime::proto::{self, Probe};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::time::Instant;

const RSSKIT: &str = env!("CARGO_BIN_EXE_rsskit");
const QUEUES: usize = 4;

/// One lab per checkout: the two tests take turns.
static ONE_LAB: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// NAPI id -> (PID, CPU list) of `nic`'s NAPI threads, read with `ps` and
/// `taskset` (not rsskit).
fn threads(lab: &Lab, nic: &str) -> BTreeMap<u32, (u32, String)> {
    let o = lab.ok(&format!(
        "for p in $(ps -eo pid=,comm= | awk '$2 ~ /^napi\\/{nic}-/ {{print $1}}'); do \
         echo $p $(cat /proc/$p/comm) $(taskset -pc $p | sed 's/.*: //'); done"
    ));
    o.lines()
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            let id = w.get(1)?.strip_prefix(&format!("napi/{nic}-"))?.parse().ok()?;
            Some((id, (w[0].parse().ok()?, w.get(2)?.to_string())))
        })
        .collect()
}

fn cpus_text(v: &Value) -> String {
    let c: Vec<usize> = v.as_array().unwrap().iter().map(|c| c.as_u64().unwrap() as usize).collect();
    rsskit_linux::cpulist::format(&c)
}

/// Every thread `plan` pinned is on its planned CPUs now.
fn pinned_as_planned(lab: &Lab, nic: &str, pins: &[Value]) {
    let now = threads(lab, nic);
    for p in pins {
        let id = p["napi_id"].as_u64().unwrap() as u32;
        let (pid, cpus) = now.get(&id).unwrap_or_else(|| panic!("{nic}: no thread napi/{nic}-{id}: {now:?}"));
        assert_eq!(cpus, &cpus_text(&p["cpus"]), "{nic}: napi/{nic}-{id} (PID {pid}) on its queue's CPUs");
    }
}

/// 200 UDP flows from outside to `addr`:9000 on `nic`, one probe each, to
/// `udp-echo --steer cpu` on the plan's CPUs: each datagram is received by
/// the worker of the CPU the kernel processed it on (its NAPI thread's,
/// threaded), and udp-echo counts it misdirected if not. Each worker must
/// receive exactly the flows `hash --iface` puts on queues planned on its
/// CPU: 200 of 200 processed on the planned CPU.
fn flows_processed_on_planned_cpus(lab: &Lab, nic: &str, addr: &str, plan: &Value) {
    let cpus = cpus_text(&plan["cpus"]);
    let o = lab.run(
        &format!(
            "{RSSKIT} udp-echo --bind {addr}:9000 --steer cpu --cpus {cpus} --duration 120 --json \
             > /tmp/echo.json 2> /tmp/echo.err & echo $! > /tmp/echo.pid; \
             for i in $(seq 1 600); do grep -q ready /tmp/echo.err && exit 0; kill -0 $(cat /tmp/echo.pid) || break; sleep 0.1; done; \
             cat /tmp/echo.err; exit 1"
        ),
        120,
    );
    assert_eq!(o.rc, 0, "{nic}: udp-echo did not get ready: {}", o.text());
    let mut r: u64 = 0x9e37_79b9_7f4a_7c15 ^ nic.len() as u64;
    let flows: Vec<Value> = (0..200u32)
        .map(|i| {
            r ^= r << 13;
            r ^= r >> 7;
            r ^= r << 17;
            let src = format!("10.{}.{}.{}", 100 + (r & 0x3f), (r >> 8) & 0xff, 1 + (r >> 16) % 254);
            let mut buf = vec![0u8; proto::HEADER_LEN];
            assert!(proto::encode_probe(&mut buf, &Probe { stream: i, seq: 0, sent_ns: 0 }));
            let payload: String = buf.iter().map(|b| format!("{b:02x}")).collect();
            json!({"src": src, "dst": addr, "sport": 1024 + (r >> 24) % 60000, "dport": 9000, "proto": "udp", "count": 1, "payload": payload})
        })
        .collect();
    let lines: String = flows
        .iter()
        .map(|f| format!("{}:{} {}:9000 udp\n", f["src"].as_str().unwrap(), f["sport"], addr))
        .collect();
    lab.ok(&format!("cat > /tmp/napi-flows.txt <<'EOF'\n{lines}EOF"));
    let o = lab.run(&format!("{RSSKIT} hash --iface {nic} --flows /tmp/napi-flows.txt --json"), 180);
    assert_eq!(o.rc, 0, "{nic}: hash --iface: {}", o.text());
    let mut want: BTreeMap<u64, u64> = BTreeMap::new();
    for l in o.stdout.lines() {
        let q = serde_json::from_str::<Value>(l).unwrap()["queue"].as_u64().expect("queue") as usize;
        let cpu = plan["rx"][q]["cpu"].as_u64().unwrap_or_else(|| panic!("{nic}: rx-{q} has a planned CPU"));
        *want.entry(cpu).or_default() += 1;
    }
    let input: String = flows.iter().map(|f| f.to_string() + "\n").collect();
    let sent = lab.send_counted_to(nic, &input, 0.0);
    assert_eq!((sent.frames, sent.tap_dropped), (200, 0), "{nic}: the host's tap dropped frames");
    std::thread::sleep(std::time::Duration::from_secs(2));
    let stop = lab.run(
        "kill -INT $(cat /tmp/echo.pid); for i in $(seq 1 300); do kill -0 $(cat /tmp/echo.pid) 2>/dev/null || break; sleep 0.1; done; cat /tmp/echo.json",
        60,
    );
    let report: Value = serde_json::from_str(&stop.stdout)
        .unwrap_or_else(|e| panic!("{nic}: udp-echo --json ({e}): {}", stop.text()));
    let mut got: BTreeMap<u64, u64> = BTreeMap::new();
    for w in report["workers"].as_array().unwrap() {
        let n = w["received"].as_u64().unwrap();
        if n > 0 {
            *got.entry(w["cpu"].as_u64().unwrap()).or_default() += n;
        }
    }
    assert_eq!(report["totals"]["misdirected"], 0, "{nic}: each processed on its worker's CPU: {report}");
    assert_eq!(
        got, want,
        "{nic}: datagrams per processing CPU vs the plan's CPU of each flow's queue: {report}"
    );
    eprintln!("{nic}: 200 of 200 flows processed on their queue's planned CPU (per CPU {got:?})");
}

fn napi_on_nic(lab: &Lab, nic: &str, addr: &str, kernel_irqs: bool) {
    let t = Instant::now();
    let was_threaded = lab.ok(&format!("cat /sys/class/net/{nic}/threaded")).trim().to_string();
    let settings = |lab: &Lab| {
        lab.ok(&format!(
            "cat /sys/class/net/{nic}/napi_defer_hard_irqs /sys/class/net/{nic}/gro_flush_timeout"
        ))
    };
    let settings_before = settings(lab);
    // Fresh threads (a reused lab may hold pinned ones from a run before).
    lab.ok(&format!("echo 0 > /sys/class/net/{nic}/threaded; echo 1 > /sys/class/net/{nic}/threaded"));
    let before = threads(lab, nic);
    // igb: one NAPI instance per RX and per TX vector; virtio-net: per queue pair.
    assert!(before.len() >= QUEUES, "{nic}: a NAPI thread per RX queue at least: {before:?}");

    // 1. The plan: threading kept, each thread pinned to its queue IRQ's CPUs.
    let plan = lab.rsskit_json_rc(&format!("plan --iface {nic} --json"), &[0, 1]);
    let d = &plan["devices"][0];
    assert!(d["napi_threaded"].is_null(), "{nic}: threading kept on with the map: {d}");
    if kernel_irqs {
        assert_eq!(d["queue_map"], "kernel netlink", "{nic}: {d}");
    }
    let pins = d["napi_threads"].as_array().unwrap_or_else(|| panic!("{nic}: no napi_threads: {d}")).clone();
    let rx_pins = pins.iter().filter(|p| p["tx"] != true).count();
    assert_eq!(rx_pins, QUEUES, "{nic}: a thread per RX queue: {d}");
    // Every thread with a NAPI id (igb's TX ones too); virtio-net's TX NAPI
    // threads are `napi/eth0-0`: no id, in no map, TX completions only.
    let with_id = before.keys().filter(|&&k| k != 0).count();
    assert_eq!(pins.len(), with_id, "{nic}: every NAPI thread with an id pinned: {d} {before:?}");
    for p in &pins {
        let q = p["queue"].as_u64().unwrap() as usize;
        let side = if p["tx"] == true { "tx" } else { "rx" };
        let irq = &d[side][q]["irq"];
        let x = d["irqs"].as_array().unwrap().iter().find(|x| &x["irq"] == irq).unwrap();
        assert_eq!(p["cpus"], x["cpus"], "{nic} {side}-{q}: its thread goes with its IRQ");
    }
    let o = lab.run(
        &format!(
            "rm -f /tmp/napi-{nic}.json; {RSSKIT} apply --iface {nic} --persist --save /tmp/napi-{nic}.json \
             --napi-defer-hard-irqs 2 --gro-flush-timeout 200000"
        ),
        180,
    );
    assert_eq!(o.rc, 0, "{nic}: apply: {}", o.text());
    assert!(lab.run(&format!("test -s /tmp/napi-{nic}.json"), 30).rc == 0, "{nic}: saved: {}", o.text());
    pinned_as_planned(lab, nic, &pins);
    assert_eq!(settings(lab).split_whitespace().collect::<Vec<_>>(), ["2", "200000"], "{nic}");
    let info = lab.rsskit_json_rc(&format!("info --iface {nic} --json"), &[0, 1]);
    let n = &info["interfaces"][0]["napi"];
    assert_eq!(
        (n["napi_defer_hard_irqs"].as_u64(), n["gro_flush_timeout"].as_u64()),
        (Some(2), Some(200_000)),
        "{n}"
    );
    // 7.3's napi-get reports each instance's settings: the device's files set them all.
    let inst = n["instances"].as_array().unwrap_or_else(|| panic!("{nic}: per-NAPI settings: {n}"));
    assert!(inst.len() >= QUEUES, "{n}");
    for x in inst {
        assert_eq!(
            (x["defer_hard_irqs"].as_u64(), x["gro_flush_timeout"].as_u64()),
            (Some(2), Some(200_000)),
            "{x}"
        );
    }
    let c = lab.run(&format!("{RSSKIT} check --iface {nic}"), 180);
    assert_eq!(c.rc, 0, "{nic}: pinned, so aligned: {}", c.text());
    flows_processed_on_planned_cpus(lab, nic, addr, d);

    // 2. A thread moved: check names it, the agent puts it back.
    // The thread of an RX queue (TX-only NAPI threads are not judged).
    let id = pins[1]["napi_id"].as_u64().unwrap() as u32;
    let pid = threads(lab, nic)[&id].0;
    lab.ok(&format!("taskset -pc 0-3 {pid}"));
    let c = lab.run(&format!("{RSSKIT} check --iface {nic}"), 180);
    assert_eq!(c.rc, 1, "{nic}: a moved thread: {}", c.text());
    assert!(
        c.stdout.contains(&format!("thread napi/{nic}-{id} (PID {pid}), allowed on CPUs 0-3")),
        "{}",
        c.text()
    );
    let a = lab.run(&format!("{RSSKIT} agent --once"), 180);
    assert_eq!(a.rc, 0, "{nic}: agent --once: {}", a.text());
    assert!(a.stderr.contains(&format!("thread napi/{nic}-{id} CPUs")), "the agent says it: {}", a.text());
    pinned_as_planned(lab, nic, &pins);
    // threaded off and on: new threads, new PIDs, floating; pinned again.
    lab.ok(&format!("echo 0 > /sys/class/net/{nic}/threaded; echo 1 > /sys/class/net/{nic}/threaded"));
    let fresh = threads(lab, nic);
    assert_ne!(fresh.get(&id).map(|t| t.0), Some(pid), "{nic}: a new thread for NAPI {id}: {fresh:?}");
    let a = lab.run(&format!("{RSSKIT} agent --once"), 180);
    assert_eq!(a.rc, 0, "{nic}: agent --once after re-threading: {}", a.text());
    pinned_as_planned(lab, nic, &pins);
    assert_eq!(lab.run(&format!("{RSSKIT} check --iface {nic}"), 180).rc, 0, "{nic}: aligned again");

    // 3. Restore: every thread's CPUs and both settings as they were.
    let o = lab.run(&format!("{RSSKIT} apply --restore /tmp/napi-{nic}.json"), 180);
    assert_eq!(o.rc, 0, "{nic}: restore: {}", o.text());
    let after = threads(lab, nic);
    let cpus =
        |m: &BTreeMap<u32, (u32, String)>| m.iter().map(|(k, v)| (*k, v.1.clone())).collect::<Vec<_>>();
    assert_eq!(cpus(&after), cpus(&before), "{nic}: threads' CPUs restored");
    assert_eq!(settings(lab), settings_before, "{nic}: settings restored");
    lab.ok(&format!("echo {was_threaded} > /sys/class/net/{nic}/threaded"));
    eprintln!(
        "{nic}: threaded NAPI pinned, checked, repaired and restored ({:.0} s)",
        t.elapsed().as_secs_f64()
    );
}

#[test]
#[cfg_attr(
    rsskit_no_qemu,
    ignore = "QEMU cannot start here: no qemu-system-x86_64 or no /dev/net/tun (scripts/install-deps.sh installs QEMU)"
)]
fn lab_napi_threads_pinned_checked_repaired_restored() {
    let _one = ONE_LAB.lock().unwrap_or_else(|e| e.into_inner());
    let t = Instant::now();
    let lab = Lab::boot_or_reuse(&["--kernel", "7.3"], 1200);
    let release = lab.say_kernel();
    assert!(release.starts_with("7.3."), "the 7.3 lab runs 7.3: {release}");
    // The persisted plan needs a writable /etc (the guest's root is the host's, read-only).
    lab.ok("mountpoint -q /etc || { mkdir -p /tmp/etc && cp -a /etc/. /tmp/etc/ && mount --bind /tmp/etc /etc; }");
    // No persisted plan of a run before (the copy is the guest's own).
    lab.ok("rm -rf /etc/rsskit");
    napi_on_nic(&lab, "eth1", "10.77.1.2", true);
    napi_on_nic(&lab, "eth0", "10.77.0.2", false);
    eprintln!("lab_napi done in {:.0} s", t.elapsed().as_secs_f64());
}

/// On 6.1 (no netdev netlink: which thread polls which queue is unknown),
/// with `threaded` on: `check` does not call the floating threads aligned,
/// `plan`/`apply` turn threading off (said) so no NAPI thread floats, and
/// `--restore` turns it back on.
#[test]
#[cfg_attr(
    rsskit_no_qemu,
    ignore = "QEMU cannot start here: no qemu-system-x86_64 or no /dev/net/tun (scripts/install-deps.sh installs QEMU)"
)]
fn lab_napi_61_threads_off_without_the_map() {
    let _one = ONE_LAB.lock().unwrap_or_else(|e| e.into_inner());
    let t = Instant::now();
    let lab = Lab::boot_or_reuse(&["--kernel", "6.1"], 1200);
    let release = lab.say_kernel();
    assert!(release.starts_with("6.1."), "the default lab runs 6.1: {release}");
    let nic = "eth0";
    lab.ok(&format!("echo 1 > /sys/class/net/{nic}/threaded"));
    let floating = threads(&lab, nic);
    assert!(floating.len() >= QUEUES, "{floating:?}");
    let c = lab.run(&format!("{RSSKIT} check --iface {nic}"), 180);
    assert_eq!(c.rc, 1, "floating threads are not aligned: {}", c.text());
    assert!(c.stdout.contains("not one known queue's CPU"), "{}", c.text());
    let plan = lab.rsskit_json_rc(&format!("plan --iface {nic} --json"), &[0, 1]);
    let d = &plan["devices"][0];
    assert_eq!(d["napi_threaded"], 0, "{d}");
    assert!(d["napi_threads"].is_null(), "nothing pinned without the map: {d}");
    assert!(d["queue_map"].is_null(), "IRQ names on 6.1: {d}");
    let o = lab
        .run(&format!("rm -f /tmp/napi61.json; {RSSKIT} apply --iface {nic} --save /tmp/napi61.json"), 180);
    assert_eq!(o.rc, 0, "{}", o.text());
    assert_eq!(lab.ok(&format!("cat /sys/class/net/{nic}/threaded")).trim(), "0");
    // threaded 0: no queue is polled by a thread any more (6.1 may keep the
    // idle kthreads; they poll nothing).
    eprintln!("6.1: {} napi/{nic}-N kthread(s) left, idle", threads(&lab, nic).len());
    assert_eq!(lab.run(&format!("{RSSKIT} check --iface {nic}"), 180).rc, 0, "aligned");
    let o = lab.run(&format!("{RSSKIT} apply --restore /tmp/napi61.json"), 180);
    assert_eq!(o.rc, 0, "{}", o.text());
    assert_eq!(lab.ok(&format!("cat /sys/class/net/{nic}/threaded")).trim(), "1", "restored");
    lab.ok(&format!("echo 0 > /sys/class/net/{nic}/threaded"));
    eprintln!("6.1: threaded NAPI judged, turned off and restored ({:.0} s)", t.elapsed().as_secs_f64());
}
