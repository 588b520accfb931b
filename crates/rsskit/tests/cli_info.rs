//! `rsskit info` end to end: loopback, a missing interface, and a 4-queue
//! veth pair in a network namespace of its own (needs root and `ip`; we run
//! as root here and in CI, and the test fails loudly if either is missing).

use assert_cmd::Command;
use serde_json::Value;
use std::process::Command as Proc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

fn rsskit() -> Command {
    let mut c = Command::cargo_bin("rsskit").unwrap();
    c.timeout(Duration::from_secs(30));
    c
}

fn json_of(out: &[u8]) -> Value {
    serde_json::from_slice(out).unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(out)))
}

#[test]
fn loopback_json() {
    let out = rsskit().args(["info", "--iface", "lo", "--json"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v = json_of(&out.stdout);
    let cpus = v["cpus"].as_array().expect("cpus");
    assert!(!cpus.is_empty());
    assert_eq!(
        cpus.len(),
        std::thread::available_parallelism().unwrap().get(),
        "online CPUs vs. this process's parallelism"
    );
    assert!(v["numa_nodes"].is_array());
    assert!(v["default_key"]["len"].as_u64().unwrap() >= 40, "{}", v["default_key"]);
    let ifs = v["interfaces"].as_array().unwrap();
    assert_eq!(ifs.len(), 1);
    let lo = &ifs[0];
    assert_eq!(lo["name"], "lo");
    assert_eq!(lo["virtual"], true);
    assert_eq!(lo["rss"]["supported"], false);
    assert!(lo["rss"]["reason"].as_str().unwrap().contains("not supported"), "{}", lo["rss"]);
    assert_eq!(lo["hash_fields"]["supported"], false);
    assert_eq!(lo["rx_queue_count"].as_u64(), Some(lo["rx_queues"].as_array().unwrap().len() as u64));
    assert!(lo["rx_queue_count"].as_u64().unwrap() >= 1);
    assert_eq!(lo["irqs"].as_array().unwrap().len(), 0);
    // lo has neither RSS contexts nor flow rules: --isolate would be refused, and info says why.
    let iso = &lo["isolation"];
    assert_eq!(iso["possible"], false, "{iso}");
    assert_eq!(iso["rss_contexts"]["supported"], false, "{iso}");
    assert!(iso["rss_contexts"]["reason"].as_str().unwrap().contains("ETHTOOL_GRSSH"), "{iso}");
    assert_eq!(iso["flow_rules"]["supported"], false, "{iso}");
    assert!(iso["flow_rules"]["reason"].as_str().unwrap().contains("ETHTOOL_GRXCLSRLCNT"), "{iso}");
}

#[test]
fn loopback_text_says_not_reported() {
    let out = rsskit().args(["info", "--iface", "lo"]).output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("Interface lo"), "{text}");
    assert!(text.contains("RSS key and indirection table: not reported by driver"), "{text}");
    assert!(text.contains("rx-0"), "{text}");
    assert!(text.starts_with("CPUs: "), "{text}");
}

#[test]
fn all_interfaces_include_loopback() {
    let out = rsskit().args(["info", "--json"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v = json_of(&out.stdout);
    let names: Vec<&str> =
        v["interfaces"].as_array().unwrap().iter().map(|i| i["name"].as_str().unwrap()).collect();
    assert!(names.contains(&"lo"), "{names:?}");
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(names, sorted);
}

#[test]
fn missing_interface_is_one_line_error() {
    for name in ["doesnotexist", "../lo", "x-far-too-long-name"] {
        let out = rsskit().args(["info", "--iface", name]).output().unwrap();
        assert_eq!(out.status.code(), Some(1), "{name}");
        let err = String::from_utf8(out.stderr).unwrap();
        assert_eq!(err, format!("rsskit: error: interface '{name}' does not exist\n"));
        assert!(out.stdout.is_empty());
    }
}

#[test]
fn help_documents_json_fields() {
    let out = rsskit().args(["info", "--help"]).output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    for field in ["rx_queue_count", "rps_cpus", "irq_cpus", "hash_fields", "default_key", "numa_nodes"] {
        assert!(text.contains(field), "--help lacks {field}");
    }
}

// ---------------------------------------------------------------- namespace

/// A network namespace deleted on drop, even when the test fails.
struct Netns(String);

impl Netns {
    fn new() -> Netns {
        static N: AtomicUsize = AtomicUsize::new(0);
        let name = format!("rsskit-info-{}-{}", std::process::id(), N.fetch_add(1, Ordering::Relaxed));
        run(&["ip", "netns", "add", &name]);
        Netns(name)
    }
    fn exec(&self, args: &[&str]) {
        let mut v = vec!["ip", "netns", "exec", &self.0];
        v.extend_from_slice(args);
        run(&v);
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        // Deleting the namespace also deletes the veth pair inside it.
        let _ = Proc::new("ip").args(["netns", "del", &self.0]).status();
    }
}

fn run(args: &[&str]) {
    let out = Proc::new(args[0])
        .args(&args[1..])
        .output()
        .unwrap_or_else(|e| panic!("cannot run {args:?}: {e} (this test needs iproute2's `ip` and root)"));
    assert!(
        out.status.success(),
        "{args:?} failed (this test needs root and iproute2): {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn veth_with_four_queues_in_a_namespace() {
    let ns = Netns::new();
    ns.exec(&[
        "ip",
        "link",
        "add",
        "rkv0",
        "numtxqueues",
        "4",
        "numrxqueues",
        "4",
        "type",
        "veth",
        "peer",
        "name",
        "rkv1",
        "numtxqueues",
        "4",
        "numrxqueues",
        "4",
    ]);
    ns.exec(&["ip", "link", "set", "rkv0", "up"]);
    ns.exec(&["ip", "link", "set", "rkv1", "up"]);
    // RPS on rx-2: CPU 0, and CPU 1 when the machine has it.
    let two = std::thread::available_parallelism().unwrap().get() >= 2;
    let (mask, want): (&str, Vec<u64>) = if two { ("3", vec![0, 1]) } else { ("1", vec![0]) };
    ns.exec(&["sh", "-c", &format!("echo {mask} > /sys/class/net/rkv0/queues/rx-2/rps_cpus")]);
    ns.exec(&["sh", "-c", "echo 256 > /sys/class/net/rkv0/queues/rx-2/rps_flow_cnt"]);

    let bin = env!("CARGO_BIN_EXE_rsskit");
    let out = Command::new("ip")
        .args(["netns", "exec", &ns.0, bin, "info", "--iface", "rkv0", "--json"])
        .timeout(Duration::from_secs(30))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v = json_of(&out.stdout);
    let i = &v["interfaces"][0];
    assert_eq!(i["name"], "rkv0");
    assert_eq!(i["driver"], "veth");
    assert_eq!(i["virtual"], true);
    assert_eq!(i["rx_queue_count"], 4);
    assert_eq!(i["tx_queue_count"], 4);
    let rx = i["rx_queues"].as_array().unwrap();
    let tx = i["tx_queues"].as_array().unwrap();
    assert_eq!(rx.iter().map(|q| q["queue"].as_u64().unwrap()).collect::<Vec<_>>(), vec![0, 1, 2, 3]);
    assert_eq!(tx.len(), 4);
    // The mask we set, decoded; the other queues have RPS off.
    let got: Vec<u64> = rx[2]["rps_cpus"].as_array().unwrap().iter().map(|c| c.as_u64().unwrap()).collect();
    assert_eq!(got, want, "{}", rx[2]);
    assert_eq!(rx[2]["rps_flow_cnt"], 256);
    for q in [0, 1, 3] {
        assert_eq!(rx[q]["rps_cpus"].as_array().unwrap().len(), 0, "rx-{q}: {}", rx[q]);
    }
    // veth has no RSS: key, table and hashed fields are unsupported, said so.
    assert_eq!(i["rss"]["supported"], false, "{}", i["rss"]);
    assert!(i["rss"]["reason"].as_str().unwrap().contains("not supported"), "{}", i["rss"]);
    assert!(i["rss"].get("table").is_none());
    assert_eq!(i["hash_fields"]["supported"], false);
    // veth reports its channels (queue counts) through ETHTOOL_GCHANNELS.
    assert_eq!(i["channels"]["supported"], true, "{}", i["channels"]);
    assert_eq!(i["channels"]["rx"], 4);
    assert_eq!(i["channels"]["tx"], 4);
    // Through ethtool netlink where the kernel has the family (5.6+), said.
    let via = if i["ethtool_netlink_unavailable"].is_null() { "netlink" } else { "ioctl" };
    assert_eq!(i["channels_via"], via, "{i}");
    assert_eq!(i["rings"]["via"], via, "{i}");
    assert!(i["rings"]["supported"].is_boolean() && i["coalesce"]["supported"].is_boolean(), "{i}");
    // The kernel shows its default key in the initial namespace only.
    let dk = v["default_key"]["error"].as_str().unwrap_or_else(|| panic!("{}", v["default_key"]));
    assert!(dk.contains("network namespace"), "{dk}");
    // A virtual device has no IRQs.
    assert_eq!(i["irqs"].as_array().unwrap().len(), 0);
    assert!(rx[0]["irq"].is_null());

    // The human form says the same, plainly.
    let out = Command::new("ip")
        .args(["netns", "exec", &ns.0, bin, "info", "--iface", "rkv0"])
        .timeout(Duration::from_secs(30))
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("Queues: 4 RX, 4 TX"), "{text}");
    assert!(text.contains("RSS key and indirection table: not reported by driver veth:"), "{text}");
    let rps_line = if two { "RPS CPUs 0-1" } else { "RPS CPUs 0" };
    assert!(text.contains(rps_line), "{text}");

    // The host's interfaces are not visible inside the namespace.
    let out = Command::new("ip")
        .args(["netns", "exec", &ns.0, bin, "info", "--json"])
        .timeout(Duration::from_secs(30))
        .output()
        .unwrap();
    assert!(out.status.success());
    let v = json_of(&out.stdout);
    let mut names: Vec<&str> =
        v["interfaces"].as_array().unwrap().iter().map(|i| i["name"].as_str().unwrap()).collect();
    names.sort();
    assert_eq!(names, vec!["lo", "rkv0", "rkv1"]);
}
