//! `rsskit hash --iface IF` and `--key nic:IF` on the fixture tree
//! (tests/fixtures/host6cpu, copied and edited per test; read through
//! `RSSKIT_SYSROOT`). Expected hashes are the Microsoft RSS verification
//! vectors (the fixture's key is Microsoft's), not rsskit's own output.

mod common;

use common::fixture::{copy_dir, FIXTURE};

use serde_json::Value;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A temp copy of the fixture with a table of queues `i % 4`, the queue
/// IRQs 40..43 on CPUs 5, 4, 2, 1 and RPS on rx-1 over CPUs 0-1.
struct Tree(PathBuf);

impl Tree {
    fn new(tag: &str) -> Tree {
        let d = std::env::temp_dir().join(format!("rsskit-hashnic-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        copy_dir(Path::new(FIXTURE), &d);
        let t = Tree(d);
        t.edit_driver(|j| j["rss"]["table"] = (0..128).map(|i| i % 4).collect::<Vec<u32>>().into());
        t.irq_cpus(&[(40, 5), (41, 4), (42, 2), (43, 1)]);
        t.rps_cpus_rx1("00000003");
        t
    }

    /// Edits the fake driver file `ethtool/eth0.json`.
    fn edit_driver(&self, f: impl FnOnce(&mut Value)) {
        let eth = self.0.join("ethtool/eth0.json");
        let mut j: Value = serde_json::from_str(&fs::read_to_string(&eth).unwrap()).unwrap();
        f(&mut j);
        fs::write(&eth, j.to_string()).unwrap();
    }

    /// Where each `(irq, cpu)` IRQ runs (`effective_affinity_list`).
    fn irq_cpus(&self, irqs: &[(u32, usize)]) {
        for (irq, cpu) in irqs {
            fs::write(self.0.join(format!("proc/irq/{irq}/effective_affinity_list")), format!("{cpu}\n"))
                .unwrap();
        }
    }

    /// rx-1's `rps_cpus` mask.
    fn rps_cpus_rx1(&self, mask: &str) {
        fs::write(self.0.join("sys/class/net/eth0/queues/rx-1/rps_cpus"), format!("{mask}\n")).unwrap();
    }

    fn hash(&self, args: &[&str]) -> std::process::Output {
        Command::new(assert_cmd::cargo::cargo_bin("rsskit"))
            .env("RSSKIT_SYSROOT", &self.0)
            .arg("hash")
            .args(args)
            .output()
            .unwrap()
    }

    fn json(&self, args: &[&str]) -> Value {
        let out = self.hash(&[args, &["--json"]].concat());
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).unwrap()
    }

    /// `hash --iface eth0 --src SRC --dst DST --proto PROTO --json`.
    fn on_eth0(&self, src: &str, dst: &str, proto: &str) -> Value {
        self.json(&["--iface", "eth0", "--src", src, "--dst", dst, "--proto", proto])
    }
}

impl Drop for Tree {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

#[test]
fn flows_land_on_the_queue_and_cpu_of_the_devices_table() {
    let t = Tree::new("land");
    // TCP: the fixture hashes tcp4 on the 4-tuple. 0x51ccc178: entry 120, queue 0, IRQ 40 on CPU 5.
    let v = t.on_eth0("66.9.149.187:2794", "161.142.100.80:1766", "tcp");
    assert_eq!(v["hash_hex"], "0x51ccc178", "{v}");
    assert_eq!((v["table_index"].as_u64(), v["queue"].as_u64()), (Some(120), Some(0)), "{v}");
    assert_eq!((v["irq"].as_u64(), v["cpu"].as_u64()), (Some(40), Some(5)), "{v}");
    assert!(v["rps_cpu"].is_null());
    // 0xafc7327f: entry 127, queue 3, IRQ 43 on CPU 1.
    let v = t.on_eth0("38.27.205.30:48228", "209.142.163.6:2217", "tcp");
    assert_eq!(v["hash_hex"], "0xafc7327f");
    assert_eq!((v["queue"].as_u64(), v["cpu"].as_u64()), (Some(3), Some(1)), "{v}");
    // UDP: the fixture hashes udp4 on addresses only (2-tuple): 0x323e8fc2, entry 66, queue 2, CPU 2.
    let v = t.on_eth0("66.9.149.187:2794", "161.142.100.80:1766", "udp");
    assert_eq!((v["hash_hex"].as_str(), v["hash_type"].as_str()), (Some("0x323e8fc2"), Some("ipv4")), "{v}");
    assert_eq!((v["queue"].as_u64(), v["cpu"].as_u64()), (Some(2), Some(2)), "{v}");
    // 0x5d1809c5: entry 69, queue 1 (IRQ 41 on CPU 4) with RPS over CPUs 0-1:
    // (hash * 2) >> 32 = 0 -> CPU 0 processes it.
    let v = t.json(&["--iface", "eth0", "--src", "153.39.163.191", "--dst", "202.188.127.2"]);
    assert_eq!(v["hash_hex"], "0x5d1809c5");
    assert_eq!((v["queue"].as_u64(), v["irq_cpu"].as_u64()), (Some(1), Some(4)), "{v}");
    assert_eq!((v["rps_cpu"].as_u64(), v["cpu"].as_u64()), (Some(0), Some(0)), "{v}");
    // The text form says the same.
    let out = t.hash(&["--iface", "eth0", "--src", "153.39.163.191", "--dst", "202.188.127.2"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("queue 1") && text.contains("rps     CPU 0") && text.contains("cpu     0"),
        "{text}"
    );
}

/// `--flows FILE`: the same answers as one call per flow, one JSON object
/// per line; a bad line is refused with its number.
#[test]
fn flows_file_answers_each_flow_as_one_call_would() {
    let t = Tree::new("flows");
    let file = t.0.join("flows.txt");
    fs::write(
        &file,
        "# Microsoft RSS vectors\n66.9.149.187:2794 161.142.100.80:1766 tcp\n\n\
         38.27.205.30:48228 209.142.163.6:2217 TCP  # upper case too\n\
         66.9.149.187:2794 161.142.100.80:1766 udp\n153.39.163.191 202.188.127.2\n",
    )
    .unwrap();
    let out = t.hash(&["--iface", "eth0", "--flows", file.to_str().unwrap(), "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let lines: Vec<Value> =
        String::from_utf8_lossy(&out.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let one = [
        t.on_eth0("66.9.149.187:2794", "161.142.100.80:1766", "tcp"),
        t.on_eth0("38.27.205.30:48228", "209.142.163.6:2217", "tcp"),
        t.on_eth0("66.9.149.187:2794", "161.142.100.80:1766", "udp"),
        t.json(&["--iface", "eth0", "--src", "153.39.163.191", "--dst", "202.188.127.2"]),
    ];
    assert_eq!(lines, one);
    assert_eq!(lines[0]["hash_hex"], "0x51ccc178");
    // Text: one line per flow.
    let out = t.hash(&["--iface", "eth0", "--flows", file.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(text.lines().count(), 4, "{text}");
    assert!(
        text.lines().next().unwrap().contains("hash 0x51ccc178 (tcp-ipv4) entry 120 queue 0 cpu 5"),
        "{text}"
    );
    for (bad, msg) in [
        ("1.1.1.1:1 2.2.2.2:2 sctp\n", "line 1: protocol sctp: say tcp or udp"),
        (
            "1.1.1.1 2.2.2.2\n1.1.1.1 ::1\n",
            "line 2: --src 1.1.1.1 and --dst ::1 are of different address families",
        ),
        ("1.1.1.1\n", "line 1: expected SRC DST [tcp|udp], got 1 words"),
        ("1.1.1.x 2.2.2.2\n", "line 1: source 1.1.1.x"),
    ] {
        fs::write(&file, bad).unwrap();
        let out = t.hash(&["--iface", "eth0", "--flows", file.to_str().unwrap(), "--json"]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(msg) && !err.contains("panicked"), "{bad:?}: {err}");
    }
    // --flows needs --iface and replaces --src/--dst.
    let out = t.hash(&["--flows", "-"]);
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("--iface"));
}

#[test]
fn hash_fields_not_reported_are_assumed_and_said() {
    let t = Tree::new("nofields");
    t.edit_driver(|j| {
        j.as_object_mut().unwrap().remove("hash");
    });
    let v = t.on_eth0("66.9.149.187:2794", "161.142.100.80:1766", "udp");
    assert_eq!(v["hash_type"], "udp-ipv4", "{v}");
    assert!(v["note"].as_str().unwrap().contains("assumed 4-tuple"), "{v}");
}

/// Issue 22: a NIC's own key is judged for the command's use, and is never
/// refused without `--allow-weak-key` being offered.
#[test]
fn key_nic_is_judged_for_its_use_and_can_be_forced() {
    let t = Tree::new("weakkey");
    // Microsoft's key with the IPv6 source-port windows dead on 7 bucket
    // bits (key bits 281..303, beyond every IPv4 input's windows).
    let mut k = rsskit_core::key::MICROSOFT_KEY;
    for i in 281..304 {
        k[i / 8] &= !(0x80u8 >> (i % 8));
    }
    let hex: String = k.iter().map(|b| format!("{b:02x}")).collect();
    t.edit_driver(|j| j["rss"]["key"] = hex.clone().into());
    let out =
        t.hash(&["--key", "nic:eth0", "--src", "10.0.0.1", "--dst", "10.0.0.2", "--cpus", "64", "--json"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "an IPv4 2-tuple does not use those bits: {err}");
    assert!(err.is_empty(), "{err}");
    // An all-zero key: refused, offering the override, which works.
    t.edit_driver(|j| j["rss"]["key"] = "00".repeat(40).into());
    let args = ["--key", "nic:eth0", "--src", "10.0.0.1", "--dst", "10.0.0.2"];
    let out = t.hash(&args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("weak RSS key") && err.contains("use --allow-weak-key to use it anyway"), "{err}");
    let out = Command::new(assert_cmd::cargo::cargo_bin("rsskit"))
        .env("RSSKIT_SYSROOT", &t.0)
        .args(["--allow-weak-key", "hash"])
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn key_nic_reads_the_devices_key() {
    let t = Tree::new("key");
    let v = t.json(&["--key", "nic:eth0", "--src", "66.9.149.187", "--dst", "161.142.100.80"]);
    assert_eq!(v["key"], "6d5a56da255b0ec24167253d43a38fb0d0ca2bcbae7b30b477cb2da38030f20c6a42b73bbeac01fa");
    assert_eq!(v["hash_hex"], "0x323e8fc2");
    // A key the device does not have, or no device: refused by name.
    t.edit_driver(|j| {
        j.as_object_mut().unwrap().remove("rss");
    });
    for (args, msg) in [
        (vec!["--key", "nic:eth0"], "eth0: the driver ixgbe reports no RSS key or table"),
        (vec!["--iface", "eth0"], "eth0: the driver ixgbe reports no RSS key or table"),
        (vec!["--key", "nic:eth9"], "interface 'eth9' does not exist"),
        (vec!["--iface", "eth9"], "interface 'eth9' does not exist"),
        (vec!["--key", "nic:a/b"], "'a/b' is not an interface name"),
        (vec!["--iface", "eth0", "--key", "default"], "cannot be used with"),
    ] {
        let out = t.hash(&[&args[..], &["--src", "1.1.1.1", "--dst", "2.2.2.2"]].concat());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(msg) && !err.contains("panicked"), "{args:?}: {err}");
    }
}

/// `udp-echo --table nic:eth0`: 128 buckets, each owned by the worker on
/// its queue's IRQ CPU; refused by name when RPS makes the CPU depend on
/// more than the table entry, or a CPU has no worker.
#[test]
#[cfg_attr(rsskit_one_cpu, ignore = "needs 2 CPUs for 2 workers")]
fn udp_echo_buckets_follow_the_nic_table() {
    let t = Tree::new("echo");
    let run = |extra: &[&str]| {
        Command::new(assert_cmd::cargo::cargo_bin("rsskit"))
            .env("RSSKIT_SYSROOT", &t.0)
            .args(["udp-echo", "--bind", "127.0.0.1:0", "--duration", "0.5", "--json"])
            .args(extra)
            .output()
            .unwrap()
    };
    // RPS on rx-1 (the tree's default): refused.
    let out = run(&["--table", "nic:eth0", "--cpus", "0-1"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("RPS is on for rx-1"), "{err}");
    t.rps_cpus_rx1("00000000");
    // Queues 0,2 -> CPU 0 and 1,3 -> CPU 1: table i % 4 puts even buckets on CPU 0.
    t.irq_cpus(&[(40, 0), (41, 1), (42, 0), (43, 1)]);
    let out = run(&["--table", "nic:eth0", "--key", "nic:eth0", "--cpus", "0-1"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("128 buckets"), "{err}");
    let even: Vec<String> = (0..128).step_by(2).map(|b: u32| b.to_string()).collect();
    let odd: Vec<String> = (1..128).step_by(2).map(|b: u32| b.to_string()).collect();
    assert!(err.contains(&format!("cpu   0  buckets {}", even.join(","))), "{err}");
    assert!(err.contains(&format!("cpu   1  buckets {}", odd.join(","))), "{err}");
    // A queue on a CPU without a worker.
    let out = run(&["--table", "nic:eth0", "--cpus", "0"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("goes to CPU 1, where no worker runs"), "{err}");
}

/// `http-serve --table nic:eth0`: starts with the table's buckets (the
/// policy itself is checked by the runtime's unit test and by udp-echo's
/// listing above), refused by name with RPS on a queue.
#[test]
#[cfg_attr(rsskit_one_cpu, ignore = "needs 2 CPUs for 2 workers")]
fn http_serve_takes_the_nic_table() {
    let t = Tree::new("http");
    let run = || {
        Command::new(assert_cmd::cargo::cargo_bin("rsskit"))
            .env("RSSKIT_SYSROOT", &t.0)
            .args(["http-serve", "--bind", "127.0.0.1:0", "--cpus", "0-1", "--steer", "toeplitz"])
            .args(["--table", "nic:eth0", "--key", "nic:eth0", "--duration", "0.5", "--quiet", "--json"])
            .output()
            .unwrap()
    };
    let out = run();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("RPS is on for rx-1"), "{err}");
    t.rps_cpus_rx1("00000000");
    t.irq_cpus(&[(40, 0), (41, 1), (42, 0), (43, 1)]);
    let out = run();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && err.contains("http-serve: ready on"), "{err}");
}

/// `pipeline --table nic:eth0`: with every queue IRQ on CPU 0 the worker
/// pinned there owns every bucket and handles every packet; with the queues
/// alternating over CPUs 0 and 1 both workers do. Needs --cpus.
#[test]
#[cfg_attr(rsskit_one_cpu, ignore = "needs 2 CPUs for 2 workers")]
fn pipeline_buckets_follow_the_nic_table() {
    let t = Tree::new("pipe");
    t.rps_cpus_rx1("00000000");
    let run = |cpus: &[usize], extra: &[&str]| {
        let irqs: Vec<(u32, usize)> =
            (40..44).enumerate().map(|(k, irq)| (irq, cpus[k % cpus.len()])).collect();
        t.irq_cpus(&irqs);
        Command::new(assert_cmd::cargo::cargo_bin("rsskit"))
            .env("RSSKIT_SYSROOT", &t.0)
            .args(["pipeline", "--in", "gen", "--packets", "20000", "--workers", "2", "--queue", "65536"])
            .args(["--table", "nic:eth0", "--key", "nic:eth0", "--json", "--quiet"])
            .args(extra)
            .output()
            .unwrap()
    };
    let handled = |out: &std::process::Output| -> Vec<u64> {
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        v["workers"].as_array().unwrap().iter().map(|w| w["handled"].as_u64().unwrap()).collect()
    };
    let h = handled(&run(&[0], &["--cpus", "0-1"]));
    assert!(h[0] > 0 && h[1] == 0, "every bucket on CPU 0's worker: {h:?}");
    let h = handled(&run(&[0, 1], &["--cpus", "0-1"]));
    assert!(h[0] > 0 && h[1] > 0, "buckets on both workers: {h:?}");
    let out = run(&[0, 1], &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("needs --cpus"), "{err}");
}

/// `udp-echo --table nic:eth0` / `--key nic:eth0` hash UDP on the fields
/// the NIC hashes, per family (the fixture's udp4 edited to 4-tuple, its
/// udp6 left on 2-tuple), without `--udp-4tuple`; a `--udp-4tuple` that
/// contradicts the NIC, and fields the policy cannot express, are refused
/// by name.
#[test]
#[cfg_attr(rsskit_one_cpu, ignore = "needs 2 CPUs for 2 workers")]
fn udp_echo_takes_the_nics_udp_hashed_fields() {
    let t = Tree::new("echofields");
    t.rps_cpus_rx1("00000000");
    t.irq_cpus(&[(40, 0), (41, 1), (42, 0), (43, 1)]);
    let run = |bind: &str, extra: &[&str]| {
        Command::new(assert_cmd::cargo::cargo_bin("rsskit"))
            .env("RSSKIT_SYSROOT", &t.0)
            .args(["udp-echo", "--bind", bind, "--cpus", "0-1", "--duration", "0.3", "--json"])
            .args(extra)
            .output()
            .unwrap()
    };
    let hash_type = |out: &std::process::Output| -> String {
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{err}");
        let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {err}"));
        v["hash_type"].as_str().unwrap().to_string()
    };
    let nic = ["--table", "nic:eth0", "--key", "nic:eth0"];
    // The fixture hashes udp4 and udp6 on addresses (0x30).
    assert_eq!(hash_type(&run("127.0.0.1:0", &nic)), "ipv4");
    let out = run("127.0.0.1:0", &[&nic[..], &["--udp-4tuple"]].concat());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success()
            && err.contains("--udp-4tuple, but eth0 hashes udp4 on addresses only (2-tuple)")
            && !err.contains("panicked"),
        "{err}"
    );
    // udp4 on 4-tuple (0xf0), udp6 still 2-tuple: per family.
    t.edit_driver(|j| j["hash"]["udp4"] = 0xf0.into());
    let out = run("127.0.0.1:0", &nic);
    assert_eq!(hash_type(&out), "udp-ipv4", "the NIC's udp4 4-tuple, no --udp-4tuple");
    assert!(String::from_utf8_lossy(&out.stderr).contains("UDP 4-tuple"));
    assert_eq!(hash_type(&run("127.0.0.1:0", &["--key", "nic:eth0"])), "udp-ipv4", "--key nic:IF alone");
    assert_eq!(hash_type(&run("127.0.0.1:0", &["--table", "nic:eth0"])), "udp-ipv4", "--table nic:IF alone");
    assert_eq!(hash_type(&run("127.0.0.1:0", &[&nic[..], &["--udp-4tuple"]].concat())), "udp-ipv4");
    if std::net::UdpSocket::bind("[::1]:0").is_ok() {
        assert_eq!(hash_type(&run("[::1]:0", &nic)), "ipv6", "udp6 stays on the NIC's 2-tuple");
    }
    // Source port only: not a field set the policy has.
    t.edit_driver(|j| j["hash"]["udp4"] = 0x70.into());
    let out = run("127.0.0.1:0", &nic);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success()
            && err.contains(
                "eth0 hashes udp4 on ip_src,ip_dst,l4_src_port, which rsskit's policy cannot express"
            )
            && !err.contains("panicked"),
        "{err}"
    );
}

/// Issue 37: a NIC reporting `input_xfrm` symmetric-xor (ice) or
/// symmetric-or-xor (mlx5) hashes a flow and its reverse alike: `hash
/// --iface` predicts the one queue for both, with the hashes of the
/// independent reference (rsskit-core/tests/data/xfrm_vectors.py); a
/// transform rsskit does not know is refused with exit 2.
#[test]
fn symmetric_transform_puts_a_flow_and_its_reverse_on_one_queue() {
    let t = Tree::new("sym");
    let (a, b) = ("66.9.149.187:2794", "161.142.100.80:1766");
    // Without a transform the two directions differ (Microsoft's vector one way).
    let fwd = t.on_eth0(a, b, "tcp");
    let rev = t.on_eth0(b, a, "tcp");
    assert_eq!(fwd["hash_hex"], "0x51ccc178");
    assert_eq!(fwd["input_xfrm"], "none");
    assert_ne!(fwd["hash_hex"], rev["hash_hex"]);
    for (bits, name, want) in [(1, "symmetric-xor", "0xac2b58ca"), (2, "symmetric-or-xor", "0xa65524fa")] {
        t.edit_driver(|j| j["rss"]["input_xfrm"] = bits.into());
        let fwd = t.on_eth0(a, b, "tcp");
        let rev = t.on_eth0(b, a, "tcp");
        assert_eq!((fwd["hash_hex"].as_str(), fwd["input_xfrm"].as_str()), (Some(want), Some(name)), "{fwd}");
        assert_eq!(rev["hash_hex"], fwd["hash_hex"], "{name}: {rev}");
        // 0x...ca / 0x...fa: entry 74 / 122 of the i % 4 table: queue 2.
        assert_eq!((fwd["queue"].as_u64(), rev["queue"].as_u64()), (Some(2), Some(2)), "{name}");
        assert_eq!((fwd["cpu"].as_u64(), rev["cpu"].as_u64()), (Some(2), Some(2)), "{name}");
        let out = t.hash(&["--iface", "eth0", "--src", b, "--dst", a, "--proto", "tcp"]);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains(&format!("input {name}: the reverse flow lands alike")), "{text}");
    }
    for bits in [4, 3, 0x80] {
        t.edit_driver(|j| j["rss"]["input_xfrm"] = bits.into());
        let out = t.hash(&["--iface", "eth0", "--src", a, "--dst", b, "--proto", "tcp"]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "input_xfrm {bits}: {err}");
        assert!(
            err.contains(&format!("eth0: the driver ixgbe reports RSS input transform 0x{bits:02x}"))
                && err.contains("does not model")
                && !err.contains("panicked"),
            "{err}"
        );
        assert!(out.stdout.is_empty(), "no prediction printed");
    }
}

/// Threaded NAPI on: the IRQ's CPU is not where the queue is polled; the
/// answer says so instead of naming it with confidence.
#[test]
fn threaded_napi_is_said() {
    let t = Tree::new("threaded");
    let v = t.on_eth0("66.9.149.187:2794", "161.142.100.80:1766", "tcp");
    assert!(v["note"].is_null(), "{v}");
    fs::write(t.0.join("sys/class/net/eth0/threaded"), "1\n").unwrap();
    let v = t.on_eth0("66.9.149.187:2794", "161.142.100.80:1766", "tcp");
    assert!(v["note"].as_str().unwrap().contains("threaded NAPI is on for eth0"), "{v}");
}

/// `udp-echo --key nic:eth0` on a symmetric-xor NIC: its workers own
/// buckets by the NIC's hash (the policy's transform), and the steering
/// programs that compute plain Toeplitz are refused by name rather than
/// steer datagrams to workers the NIC does not send them to.
#[test]
#[cfg_attr(rsskit_one_cpu, ignore = "needs 2 CPUs for 2 workers")]
fn udp_echo_on_a_symmetric_nic_refuses_plain_toeplitz_steering() {
    let t = Tree::new("echosym");
    t.rps_cpus_rx1("00000000");
    t.irq_cpus(&[(40, 0), (41, 1), (42, 0), (43, 1)]);
    t.edit_driver(|j| j["rss"]["input_xfrm"] = 1.into());
    let run = |steer: &str| {
        Command::new(assert_cmd::cargo::cargo_bin("rsskit"))
            .env("RSSKIT_SYSROOT", &t.0)
            .args(["udp-echo", "--bind", "127.0.0.1:0", "--cpus", "0-1", "--duration", "0.3", "--json"])
            .args(["--table", "nic:eth0", "--key", "nic:eth0", "--steer", steer])
            .output()
            .unwrap()
    };
    for steer in ["toeplitz", "ebpf"] {
        let out = run(steer);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success()
                && err.contains(
                    "input transform symmetric-xor, which the Toeplitz steering program does not compute"
                )
                && !err.contains("panicked"),
            "{steer}: {err}"
        );
    }
    let out = run("cpu");
    assert!(
        out.status.success(),
        "steering by CPU follows the NIC: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `hash --key nic:eth0` takes the NIC's transform with its key (both
/// directions: the reference's 0xa65524fa on symmetric-or-xor); `find`,
/// which solves plain Toeplitz, refuses such a NIC by name.
#[test]
fn key_nic_takes_the_transform_and_find_refuses_it() {
    let t = Tree::new("keysym");
    t.edit_driver(|j| j["rss"]["input_xfrm"] = 2.into());
    let (a, b) = ("66.9.149.187:2794", "161.142.100.80:1766");
    for (src, dst) in [(a, b), (b, a)] {
        let v = t.json(&["--key", "nic:eth0", "--src", src, "--dst", dst, "--proto", "tcp"]);
        assert_eq!(v["hash_hex"], "0xa65524fa", "{src} -> {dst}: {v}");
    }
    let out = Command::new(assert_cmd::cargo::cargo_bin("rsskit"))
        .env("RSSKIT_SYSROOT", &t.0)
        .args(["find", "--key", "nic:eth0", "--dst", "10.0.0.1:80", "--proto", "tcp"])
        .args(["--src-ports", "1000-2000", "--bucket", "3"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("eth0 hashes with input transform symmetric-or-xor"),
        "{err}"
    );
}

/// The NIC's flow rules come before its table (issue 33). Ground truth from
/// ethtool.h's semantics, by hand: the lowest location takes the flow; a
/// context rule hashes with the context's key and table and adds the
/// rule's offset; `drop` reaches no queue; a rule on a field a tuple lacks
/// makes the answer unknown. The main key is all zero here (every main
/// hash is 0: entry 0, queue 0), the context's key is Microsoft's, so the
/// Microsoft vectors give the context hashes.
#[test]
fn rules_and_contexts_come_before_the_table() {
    let t = Tree::new("rules");
    t.edit_driver(|j| {
        j["rss"]["key"] = "00".repeat(40).into();
        // Listed out of order: the locations decide.
        j["rules"] = serde_json::json!([
            "udp4 dst-port 1766 queue 1 loc 5",
            "udp4 src-ip 66.9.149.0/24 context 1 offset 2 loc 2",
            "tcp4 dst-port 1766 drop loc 3",
            "tcp4 dst-port 22 queue 3 loc 4",
            "udp4 dst-ip 202.188.127.2 vlan 0x2000/0xe000 queue 0 loc 0",
            "udp4 dst-port 53 context 7 loc 6",
        ]);
        j["contexts"] = serde_json::json!({"1": {
            "key": "6d5a56da255b0ec24167253d43a38fb0d0ca2bcbae7b30b477cb2da38030f20c6a42b73bbeac01fa",
            "table": [0, 0, 1, 0, 0, 0, 0, 0],
        }});
    });
    // Rules 2 and 5 both take it; 2 is first. udp4 hashes addresses only:
    // 0x323e8fc2 under context 1's key, entry 0xc2 % 8 = 2 -> 1, + 2 = queue 3
    // (IRQ 43 on CPU 1). The zero main key would have given entry 0 -> queue 2.
    let v = t.on_eth0("66.9.149.187:2794", "161.142.100.80:1766", "udp");
    assert_eq!((v["route"].as_str(), v["context"].as_u64()), (Some("rule-context"), Some(1)), "{v}");
    assert_eq!(v["rule"]["location"], 2, "{v}");
    assert_eq!(v["hash_hex"], "0x323e8fc2", "{v}");
    assert_eq!((v["table_index"].as_u64(), v["table_size"].as_u64()), (Some(2), Some(8)), "{v}");
    assert_eq!(
        (v["queue"].as_u64(), v["irq"].as_u64(), v["cpu"].as_u64()),
        (Some(3), Some(43), Some(1)),
        "{v}"
    );
    assert_eq!(v["path"], "rule 2 -> context 1 -> queue 3 -> IRQ 43 -> CPU 1", "{v}");
    // Another source: rule 2 passes, rule 5 sends it to queue 1, where RPS
    // (CPUs 0-1) picks the CPU from a hash rsskit cannot vouch for: unknown.
    let v = t.on_eth0("10.0.0.1:2794", "161.142.100.80:1766", "udp");
    assert_eq!((v["route"].as_str(), v["rule"]["location"].as_u64()), (Some("rule-queue"), Some(5)), "{v}");
    assert_eq!((v["queue"].as_u64(), v["irq_cpu"].as_u64()), (Some(1), Some(4)), "{v}");
    assert!(v["cpu"].is_null() && v["hash"].is_null(), "{v}");
    // Rule 3 drops TCP to port 1766: no queue.
    let v = t.on_eth0("66.9.149.187:2794", "161.142.100.80:1766", "tcp");
    assert_eq!(
        (v["route"].as_str(), v["rule"]["action"].as_str()),
        (Some("rule-no-queue"), Some("drop")),
        "{v}"
    );
    assert!(v["queue"].is_null() && v["cpu"].is_null(), "{v}");
    // Rule 4: TCP to port 22 goes to queue 3 (IRQ 43 on CPU 1).
    let v = t.on_eth0("38.27.205.30:48228", "209.142.163.6:22", "tcp");
    assert_eq!(v["path"], "rule 4 -> queue 3 -> IRQ 43 -> CPU 1", "{v}");
    // No rule: the main table, whose zero key hashes everything to 0 -> queue 0 (CPU 5).
    let v = t.on_eth0("38.27.205.30:48228", "209.142.163.6:2217", "tcp");
    assert_eq!(
        (v["route"].as_str(), v["hash"].as_u64(), v["queue"].as_u64()),
        (Some("table"), Some(0), Some(0)),
        "{v}"
    );
    assert!(v["rule"].is_null() && v["context"].is_null(), "{v}");
    // Rule 0 compares a VLAN tag: rsskit cannot know, and says so (exit 1, nothing on stdout).
    let out =
        t.hash(&["--iface", "eth0", "--src", "1.2.3.4:5", "--dst", "202.188.127.2:6", "--proto", "udp"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("cannot tell") && err.contains("rule 0") && err.contains("VLAN tag"), "{err}");
    assert!(out.stdout.is_empty());
    // Rule 6 names context 7, which the driver does not show: unknown, not the main table.
    let out = t.hash(&["--iface", "eth0", "--src", "1.2.3.4:5", "--dst", "10.9.9.9:53", "--proto", "udp"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("context 7") && err.contains("could not be read"), "{err}");
    // --flows: an unknown line is printed as such, the others answered, exit 1 at the end.
    let flows = t.0.join("flows.txt");
    fs::write(&flows, "1.2.3.4:5 202.188.127.2:6 udp\n38.27.205.30:48228 209.142.163.6:22 tcp\n").unwrap();
    let out = t.hash(&["--iface", "eth0", "--flows", flows.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert!(lines[0].contains("unknown") && lines[0].contains("VLAN"), "{text}");
    assert!(lines[1].ends_with("rule 4 -> queue 3 -> IRQ 43 -> CPU 1"), "{text}");
    // The text form of one flow names the rule, the context and the offset.
    let out = t.hash(&[
        "--iface",
        "eth0",
        "--src",
        "66.9.149.187:2794",
        "--dst",
        "161.142.100.80:1766",
        "--proto",
        "udp",
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("rule    2 (udp4 src-ip 66.9.149.0/24 context 1 offset 2 loc 2)"), "{text}");
    assert!(text.contains("context 1's key") && text.contains("queue 1 + offset 2 = queue 3"), "{text}");
}
