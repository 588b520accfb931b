//! rsskit's host commands against real NIC drivers: the QEMU lab
//! (`scripts/lab`), a guest with a 4-queue virtio-net NIC that hashes with
//! the key and table rsskit writes (QEMU's software RSS), an e1000e without
//! RSS, 4 vCPUs in 2 NUMA nodes. One boot (~15 s under TCG) serves every
//! step, run in order by one test with named steps; the guest runs this
//! build's `rsskit` from the host's root (9p, read-only).
//!
//! Needs root, QEMU and /dev/net/tun (`scripts/install-deps.sh` installs
//! QEMU); ignored with the reason only where QEMU cannot start
//! (`rsskit_no_qemu`, build/host_probe.rs). A boot that fails otherwise
//! fails the test, with the guest's console. QEMU and the lab's namespace
//! are stopped on drop, and by the lab's watcher if this process dies.
//!
//! `RSSKIT_LAB_REUSE=1` uses (and leaves running) a lab already booted by
//! hand (`scripts/lab boot`): for working on these tests.

use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const RSSKIT: &str = env!("CARGO_BIN_EXE_rsskit");
const QUEUES: usize = 4;
const GUEST_V4: &str = "10.77.0.2";
const GUEST_V6: &str = "fd77:77::2";

fn lab_script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scripts/lab")
}

/// A command's result in the guest.
struct Out {
    rc: i32,
    stdout: String,
    stderr: String,
}

impl Out {
    fn text(&self) -> String {
        format!("exit {}\nstdout:\n{}\nstderr:\n{}", self.rc, self.stdout, self.stderr)
    }
}

/// The booted lab; stopped on drop (also when a step panics).
struct Lab {
    reused: bool,
}

impl Lab {
    fn boot() -> Lab {
        // SAFETY: geteuid has no preconditions.
        assert_eq!(
            unsafe { libc::geteuid() },
            0,
            "the lab needs root (namespace, tap devices); CI runs as root"
        );
        if std::env::var_os("RSSKIT_LAB_REUSE").is_some() {
            let st = Command::new(lab_script()).arg("status").output().expect("running scripts/lab");
            if st.status.success() {
                eprintln!("lab: reusing the running lab (RSSKIT_LAB_REUSE)");
                return Lab { reused: true };
            }
        }
        let t = Instant::now();
        let st = Command::new(lab_script())
            .args(["boot", "--owner-pid", &std::process::id().to_string(), "--max-seconds", "1500"])
            .stdin(Stdio::null())
            .status()
            .expect("running scripts/lab boot");
        // From here on the guard exists: a failed boot still stops QEMU.
        let lab = Lab { reused: false };
        assert!(st.success(), "scripts/lab boot failed ({st}): the guest did not come up (console above)");
        eprintln!("lab: booted in {:.0} s", t.elapsed().as_secs_f64());
        lab
    }

    /// `sh -c CMD` in the guest (chrooted into the host's root, cwd /tmp).
    fn run(&self, cmd: &str, timeout_s: u32) -> Out {
        let out = Command::new(lab_script())
            .args(["run", "--timeout", &timeout_s.to_string(), "--", cmd])
            .stdin(Stdio::null())
            .output()
            .expect("running scripts/lab run");
        Out {
            rc: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// CMD must succeed; its stdout.
    fn ok(&self, cmd: &str) -> String {
        let o = self.run(cmd, 120);
        assert_eq!(o.rc, 0, "`{cmd}` in the guest failed: {}", o.text());
        o.stdout
    }

    /// `rsskit ARGS` in the guest.
    fn rsskit(&self, args: &str) -> Out {
        self.run(&format!("{RSSKIT} {args}"), 180)
    }

    fn rsskit_json(&self, args: &str) -> Value {
        let o = self.rsskit(args);
        assert_eq!(o.rc, 0, "rsskit {args}: {}", o.text());
        serde_json::from_str(&o.stdout)
            .unwrap_or_else(|e| panic!("rsskit {args}: not JSON ({e}): {}", o.text()))
    }

    /// Raw frames into the guest's eth0; with `capture_s`, the UDP
    /// datagrams the guest sends back within that time.
    fn send(&self, flows: &[(Flow, u32, Option<Vec<u8>>)], capture_s: f64) -> (u64, Vec<Value>) {
        let mut input = String::new();
        for (f, count, payload) in flows {
            let mut v = f.json();
            v["count"] = json!(count);
            if let Some(p) = payload {
                v["payload"] = json!(hex(p));
            }
            input.push_str(&v.to_string());
            input.push('\n');
        }
        let mut child = Command::new(lab_script())
            .args(["send", "--capture", &capture_s.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("running scripts/lab send");
        {
            use std::io::Write;
            child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
        }
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "scripts/lab send failed");
        let mut lines = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).expect("send prints JSON lines"))
            .collect::<Vec<_>>();
        let sent = lines.remove(0)["sent"].as_u64().expect("send's first line: {\"sent\": N}");
        (sent, lines)
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        if !self.reused {
            let _ = Command::new(lab_script()).arg("stop").stdin(Stdio::null()).status();
        }
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// One flow as the host side sends it.
#[derive(Clone, Debug)]
struct Flow {
    src: String,
    dst: String,
    sport: u16,
    dport: u16,
    proto: &'static str,
}

impl Flow {
    fn v6(&self) -> bool {
        self.src.contains(':')
    }
    fn json(&self) -> Value {
        json!({"src": self.src, "dst": self.dst, "sport": self.sport, "dport": self.dport, "proto": self.proto})
    }
    /// The flow as a line of `hash --flows`.
    fn flows_line(&self) -> String {
        let ep = |a: &str, p: u16| if a.contains(':') { format!("[{a}]:{p}") } else { format!("{a}:{p}") };
        format!("{} {} {}", ep(&self.src, self.sport), ep(&self.dst, self.dport), self.proto)
    }
    fn kind(&self) -> String {
        format!("{}{}", self.proto, if self.v6() { 6 } else { 4 })
    }
}

/// Deterministic flows (xorshift): a failure is reproducible by its flow.
struct Gen(u64);

impl Gen {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn flow(&mut self, v6: bool, proto: &'static str) -> Flow {
        let r = self.next();
        // Half to the guest's own address, half to any address (dropped by
        // the guest's stack, but hashed and counted by the NIC all the same).
        let to_guest = r & 1 == 0;
        let (src, dst) = if v6 {
            let s =
                format!("fd00:{:x}:{:x}::{:x}", (r >> 8) & 0xffff, (r >> 24) & 0xffff, (r >> 40) & 0xffff);
            let d = if to_guest { GUEST_V6.to_string() } else { format!("fd99::{:x}", (r >> 12) & 0xffff) };
            (s, d)
        } else {
            let s = format!("10.{}.{}.{}", (r >> 8) & 0x3f, (r >> 16) & 0xff, 1 + (r >> 24) % 254);
            let d = if to_guest {
                GUEST_V4.to_string()
            } else {
                format!("172.16.{}.{}", (r >> 32) & 0xff, 1 + (r >> 40) % 254)
            };
            (s, d)
        };
        let p = self.next();
        Flow { src, dst, sport: 1024 + (p % 60000) as u16, dport: 1024 + ((p >> 20) % 60000) as u16, proto }
    }
}

/// `rsskit hash --iface eth0` for each flow (one guest command).
struct Prediction {
    queue: usize,
    cpu: u64,
    hash_type: String,
}

fn predict(lab: &Lab, flows: &[Flow]) -> Vec<Prediction> {
    let lines: String = flows.iter().map(|f| f.flows_line() + "\n").collect();
    lab.ok(&format!("cat > /tmp/flows.txt <<'EOF'\n{lines}EOF"));
    let o = lab.rsskit("hash --iface eth0 --flows /tmp/flows.txt --json");
    assert_eq!(o.rc, 0, "rsskit hash --iface eth0 --flows: {}", o.text());
    let v: Vec<Prediction> = o
        .stdout
        .lines()
        .map(|l| {
            let j: Value =
                serde_json::from_str(l).unwrap_or_else(|e| panic!("hash --iface: not JSON ({e}): {l}"));
            Prediction {
                queue: j["queue"].as_u64().expect("queue") as usize,
                cpu: j["cpu"].as_u64().expect("cpu"),
                hash_type: j["hash_type"].as_str().unwrap_or_default().to_string(),
            }
        })
        .collect();
    assert_eq!(v.len(), flows.len(), "one prediction per flow: {}", o.text());
    v
}

/// Counters read in one guest command.
#[derive(Clone, Debug, Default)]
struct Counters {
    rx_queue: Vec<u64>,
    rx_drops: u64,
    /// /proc/net/softnet_stat "processed", per CPU.
    processed: BTreeMap<u64, u64>,
    /// /proc/interrupts of each RX queue's IRQ, per CPU.
    irq: Vec<Vec<u64>>,
}

fn counters(lab: &Lab, rx_irqs: &[u64]) -> Counters {
    let o = lab.ok("ethtool -S eth0; echo ==; cat /proc/net/softnet_stat; echo ==; cat /proc/interrupts");
    let parts: Vec<&str> = o.split("==\n").collect();
    assert_eq!(parts.len(), 3, "counters: {o}");
    let mut c = Counters { rx_queue: vec![0; QUEUES], ..Default::default() };
    for line in parts[0].lines() {
        let Some((k, v)) = line.trim().split_once(": ") else { continue };
        let v: u64 = v.trim().parse().unwrap_or(0);
        if let Some(q) = k.strip_prefix("rx_queue_").and_then(|r| r.strip_suffix("_packets")) {
            if let Ok(q) = q.parse::<usize>() {
                if q < QUEUES {
                    c.rx_queue[q] = v;
                }
            }
        }
        if k.starts_with("rx_queue_") && k.ends_with("_drops") && !k.contains("xdp") {
            c.rx_drops += v;
        }
    }
    for line in parts[1].lines() {
        let f: Vec<u64> = line.split_whitespace().map(|x| u64::from_str_radix(x, 16).unwrap()).collect();
        // Since 5.10 the last column is the CPU.
        c.processed.insert(*f.last().unwrap(), f[0]);
    }
    for irq in rx_irqs {
        let line = parts[2]
            .lines()
            .find(|l| l.trim_start().starts_with(&format!("{irq}:")))
            .unwrap_or_else(|| panic!("IRQ {irq} not in /proc/interrupts"));
        c.irq.push(line.split_whitespace().skip(1).take(4).map(|x| x.parse().unwrap()).collect());
    }
    c
}

fn cpu_list(s: &str) -> Vec<u64> {
    let mut v = Vec::new();
    for part in s.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => v.extend(a.parse::<u64>().unwrap()..=b.parse::<u64>().unwrap()),
            None => v.push(part.parse().unwrap()),
        }
    }
    v
}

/// What `ethtool -x eth0` prints: (key hex, table).
fn ethtool_rss(lab: &Lab, dev: &str) -> (String, Vec<usize>) {
    let o = lab.ok(&format!("ethtool -x {dev}"));
    let mut table = Vec::new();
    let mut key = String::new();
    let mut lines = o.lines();
    while let Some(line) = lines.next() {
        if line.starts_with("RSS hash key") {
            key = lines.next().unwrap_or_default().trim().replace(':', "");
            continue;
        }
        if let Some((idx, rest)) = line.split_once(':') {
            if idx.trim().parse::<usize>().is_ok() {
                table.extend(rest.split_whitespace().map(|x| x.parse::<usize>().unwrap()));
            }
        }
    }
    (key, table)
}

/// Every value `apply` writes on eth0, read with tools other than rsskit.
fn eth0_state(lab: &Lab, rx_irqs: &[u64], tx_irqs: &[u64]) -> Value {
    let (key, table) = ethtool_rss(lab, "eth0");
    let mut irq_aff = Vec::new();
    for irq in rx_irqs.iter().chain(tx_irqs) {
        irq_aff.push(lab.ok(&format!("cat /proc/irq/{irq}/smp_affinity_list")).trim().to_string());
    }
    let xps: Vec<String> = (0..QUEUES)
        .map(|q| lab.ok(&format!("cat /sys/class/net/eth0/queues/tx-{q}/xps_cpus")).trim().to_string())
        .collect();
    let udp4 = lab.ok("ethtool -n eth0 rx-flow-hash udp4");
    json!({"key": key, "table": table, "irq_affinity": irq_aff, "xps": xps, "udp4": udp4.trim()})
}

fn irqs_of(info: &Value, kind: &str) -> Vec<u64> {
    let key = if kind == "rx" { "rx_queues" } else { "tx_queues" };
    info[key].as_array().unwrap().iter().map(|q| q["irq"].as_u64().expect("queue IRQ")).collect()
}

fn eth(info: &Value, name: &str) -> Value {
    info["interfaces"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["name"] == name)
        .cloned()
        .unwrap_or_else(|| panic!("{name} in info"))
}

static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();

fn step(n: u32, what: &str) {
    let t = START.get_or_init(Instant::now).elapsed().as_secs_f64();
    eprintln!("\n== lab step {n} (at {t:.0} s): {what}");
}

#[test]
#[cfg_attr(
    rsskit_no_qemu,
    ignore = "QEMU cannot start here: no qemu-system-x86_64 or no /dev/net/tun (scripts/install-deps.sh installs QEMU)"
)]
fn lab_real_nic_drivers() {
    let lab = Lab::boot();

    step(1, "info reads the real key, table, hashed fields and queue IRQs");
    let info = lab.rsskit_json("info --json");
    let e0 = eth(&info, "eth0");
    assert_eq!(e0["driver"], "virtio_net");
    assert_eq!(e0["numa_node"], 1, "the RSS NIC sits on NUMA node 1 (pxb-pcie)");
    assert_eq!(info["numa_nodes"].as_array().map(|n| n.len()), Some(2), "{}", info["numa_nodes"]);
    let (key0, table0) = ethtool_rss(&lab, "eth0");
    assert_eq!(key0.len(), 80, "a 40-byte key in ethtool -x");
    assert_eq!(e0["rss"]["key"].as_str().unwrap(), key0, "info's key is the driver's");
    let t: Vec<usize> =
        e0["rss"]["table"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as usize).collect();
    assert_eq!(t, table0, "info's table is the driver's (128 entries)");
    assert_eq!(t.len(), 128);
    let fields = lab.ok("ethtool -n eth0 rx-flow-hash tcp4");
    let tcp4 =
        e0["hash_fields"]["flows"].as_array().unwrap().iter().find(|f| f["flow"] == "tcp4").unwrap().clone();
    assert_eq!(tcp4["tuple"], "4-tuple", "{tcp4}");
    assert!(fields.contains("L4 bytes 0 & 1"), "ethtool agrees tcp4 hashes ports: {fields}");
    let rx_irqs = irqs_of(&e0, "rx");
    let tx_irqs = irqs_of(&e0, "tx");
    assert_eq!(rx_irqs.len(), QUEUES);
    let interrupts = lab.ok("cat /proc/interrupts");
    for (q, irq) in rx_irqs.iter().enumerate() {
        let line = interrupts.lines().find(|l| l.trim_start().starts_with(&format!("{irq}:"))).unwrap();
        assert!(
            line.ends_with(&format!("-input.{q}")),
            "rx-{q}'s IRQ {irq} is the driver's input.{q}: {line}"
        );
    }
    let e1 = eth(&info, "eth1");
    assert_eq!(e1["driver"], "e1000e");
    assert_eq!(e1["rss"]["supported"], false, "e1000e reports no key/table: {}", e1["rss"]);

    step(2, "plan on 4 CPUs over 2 nodes");
    // udp4 on 2-tuple first, so that apply's --hash-fields has something to change.
    lab.ok("ethtool -N eth0 rx-flow-hash udp4 sd");
    let plan = lab.rsskit_json("plan --iface eth0 --key random --hash-fields udp4=4-tuple --json");
    let dev = &plan["devices"][0];
    let mut cpus: Vec<u64> =
        dev["rx"].as_array().unwrap().iter().map(|q| q["cpu"].as_u64().unwrap()).collect();
    let queue_cpu = cpus.clone();
    cpus.sort();
    assert_eq!(
        cpus,
        vec![0, 1, 2, 3],
        "one queue per CPU over both nodes (node 1 has 2 CPUs for 4 queues): {dev}"
    );
    assert_eq!(dev["key"].as_str().map(str::len), Some(80), "a random 40-byte key: {dev}");
    assert_eq!(dev["table"].as_array().map(|t| t.len()), Some(128));

    step(3, "apply writes key, table, IRQ affinity, XPS, udp4 hashed fields; every value reads back");
    let before = eth0_state(&lab, &rx_irqs, &tx_irqs);
    lab.ok(&format!("echo '{}' > /tmp/plan.json", plan));
    let o = lab.rsskit("apply /tmp/plan.json --save /tmp/saved.json");
    assert_eq!(o.rc, 0, "apply: {}", o.text());
    let after = eth0_state(&lab, &rx_irqs, &tx_irqs);
    assert_eq!(after["key"], dev["key"], "the key reads back through ethtool -x");
    assert_eq!(after["table"], dev["table"], "the table reads back");
    let want_aff: Vec<String> = queue_cpu.iter().chain(&queue_cpu).map(|c| c.to_string()).collect();
    assert_eq!(after["irq_affinity"], json!(want_aff), "each queue's RX and TX IRQ on its CPU");
    for (q, x) in after["xps"].as_array().unwrap().iter().enumerate() {
        let mask = u64::from_str_radix(x.as_str().unwrap().replace(',', "").as_str(), 16).unwrap();
        assert_ne!(mask, 0, "tx-{q} XPS set: {after}");
    }
    assert!(after["udp4"].as_str().unwrap().contains("L4 bytes 0 & 1"), "udp4 hashes ports now: {after}");
    assert_ne!(before, after);

    step(4, "apply --restore puts every value back");
    let o = lab.rsskit("apply --restore /tmp/saved.json");
    assert_eq!(o.rc, 0, "restore: {}", o.text());
    let restored = eth0_state(&lab, &rx_irqs, &tx_irqs);
    assert_eq!(restored, before, "restore gives back every value apply replaced");

    step(5, "ground truth: 200 flows land on the queue hash --iface names, processed on its IRQ's CPU");
    ground_truth(&lab, &rx_irqs);

    // HOOK(issue 19 item 3): `rsskit check --live` is built on branch `live`;
    // once it is in main, a step here runs it before and after apply.
}

/// An uneven table (weights 1:2:3:6 over queues 0-3) and a random key
/// through apply (a plan whose table is edited), udp6 on 2-tuple: then each
/// of 200 flows (IPv4/IPv6, TCP/UDP) must land on the queue `rsskit hash
/// --iface` names and be processed on that queue's IRQ CPU.
fn ground_truth(lab: &Lab, rx_irqs: &[u64]) {
    let mut plan = lab.rsskit_json(
        "plan --iface eth0 --key random --hash-fields udp4=4-tuple --hash-fields udp6=2-tuple --json",
    );
    let weights = [1usize, 2, 3, 6];
    let total: usize = weights.iter().sum();
    let table: Vec<usize> = (0..128)
        .map(|i| {
            let mut acc = 0;
            let slot = i * total / 128;
            weights
                .iter()
                .position(|w| {
                    acc += w;
                    slot < acc
                })
                .unwrap()
        })
        .collect();
    plan["devices"][0]["table"] = json!(table);
    lab.ok(&format!("echo '{}' > /tmp/plan-uneven.json", plan));
    let o = lab.rsskit("apply /tmp/plan-uneven.json --save /tmp/saved-uneven.json");
    assert_eq!(o.rc, 0, "apply (uneven table): {}", o.text());
    assert_eq!(ethtool_rss(lab, "eth0").1, table, "the uneven table reads back");

    let mut g = Gen(0x9e37_79b9_7f4a_7c15);
    let mut flows = Vec::new();
    for i in 0..200 {
        flows.push(g.flow(i % 2 == 1, if i % 4 < 2 { "udp" } else { "tcp" }));
    }
    // Warm-up: an IRQ moves to its new CPU at its next interrupt.
    let c0 = counters(lab, rx_irqs);
    lab.send(&flows.iter().map(|f| (f.clone(), 1, None)).collect::<Vec<_>>(), 0.0);
    std::thread::sleep(Duration::from_millis(500));
    let c1 = counters(lab, rx_irqs);
    for q in 0..QUEUES {
        assert!(c1.rx_queue[q] > c0.rx_queue[q], "warm-up reached rx-{q}: {c0:?} -> {c1:?}");
    }
    let plan_cpu: Vec<u64> =
        plan["devices"][0]["rx"].as_array().unwrap().iter().map(|q| q["cpu"].as_u64().unwrap()).collect();
    for (q, irq) in rx_irqs.iter().enumerate() {
        let eff = cpu_list(&lab.ok(&format!("cat /proc/irq/{irq}/effective_affinity_list")));
        assert_eq!(eff, vec![plan_cpu[q]], "rx-{q} IRQ {irq} runs on its planned CPU after warm-up");
    }

    let t = Instant::now();
    let pred = predict(lab, &flows);
    eprintln!("200 predictions in {:.0} s", t.elapsed().as_secs_f64());
    for (f, p) in flows.iter().zip(&pred) {
        let two_tuple = f.kind() == "udp6";
        assert_eq!(
            !p.hash_type.contains(f.proto),
            two_tuple,
            "hash --iface follows the NIC's hashed fields ({} on {}): {f:?}",
            p.hash_type,
            f.kind()
        );
        assert_eq!(p.cpu, plan_cpu[p.queue], "hash --iface names the queue's IRQ CPU: {f:?}");
    }
    let mut per_queue = [0usize; QUEUES];
    pred.iter().for_each(|p| per_queue[p.queue] += 1);
    eprintln!("predicted flows per queue: {per_queue:?} (weights {weights:?})");

    // Groups of 8 flows, flow j sending 2^j frames: each queue's counter
    // delta is a sum of distinct powers of two, naming exactly its flows.
    let mut before = counters(lab, rx_irqs);
    let mut agreed = 0;
    for (gi, chunk) in flows.chunks(8).enumerate() {
        let base = gi * 8;
        let batch: Vec<_> = chunk.iter().enumerate().map(|(j, f)| (f.clone(), 1u32 << j, None)).collect();
        let want_total: u64 = batch.iter().map(|b| u64::from(b.1)).sum();
        let (sent, _) = lab.send(&batch, 0.0);
        assert_eq!(sent, want_total);
        let t = Instant::now();
        let after = loop {
            let c = counters(lab, rx_irqs);
            let got: u64 = (0..QUEUES).map(|q| c.rx_queue[q] - before.rx_queue[q]).sum();
            if got >= want_total || t.elapsed() > Duration::from_secs(20) {
                break c;
            }
            std::thread::sleep(Duration::from_millis(300));
        };
        assert_eq!(after.rx_drops, before.rx_drops, "no RX drops");
        let mut want_q = [0u64; QUEUES];
        let mut want_cpu: BTreeMap<u64, u64> = BTreeMap::new();
        for (j, b) in batch.iter().enumerate() {
            let p = &pred[base + j];
            want_q[p.queue] += u64::from(b.1);
            *want_cpu.entry(p.cpu).or_default() += u64::from(b.1);
        }
        for q in 0..QUEUES {
            let got = after.rx_queue[q] - before.rx_queue[q];
            if got != want_q[q] {
                let mut wrong = Vec::new();
                for (j, f) in chunk.iter().enumerate() {
                    let on_q = got & (1 << j) != 0;
                    if on_q != (pred[base + j].queue == q) {
                        wrong.push(format!("{f:?} predicted rx-{}", pred[base + j].queue));
                    }
                }
                panic!("group {gi}: rx-{q} got {got} frames, predicted {}; flows off: {wrong:#?}", want_q[q]);
            }
            // The queue's IRQ fired only on its CPU.
            for cpu in 0..4 {
                let d = after.irq[q][cpu] - before.irq[q][cpu];
                assert!(
                    d == 0 || cpu as u64 == plan_cpu[q],
                    "group {gi}: rx-{q} IRQ fired on CPU {cpu} (planned {})",
                    plan_cpu[q]
                );
            }
        }
        for (cpu, n) in &after.processed {
            let d = n - before.processed[cpu];
            let w = want_cpu.get(cpu).copied().unwrap_or(0);
            assert_eq!(d, w, "group {gi}: CPU {cpu} processed {d} packets, predicted {w} (softnet_stat)");
        }
        agreed += chunk.len();
        before = after;
    }
    assert_eq!(agreed, 200);
    eprintln!("200 of 200 flows on the predicted queue and CPU");
}
