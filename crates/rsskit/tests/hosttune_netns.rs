//! `rsskit plan`, `apply`, `check` with real writes: a 4-queue veth pair in
//! a network namespace this test creates (needs root and `ip`; fails loudly
//! without). Writes `rps_cpus`, `xps_cpus`, `rps_flow_cnt` there, reads them
//! back, and `--restore` puts them back byte for byte. The ethtool SRSSH
//! write on the veth must come back as the driver's "not supported", per
//! setting. `net.core.rps_sock_flow_entries` is global (not per namespace),
//! so it is never written here: the fixture-tree test covers it.

mod common;

use common::proc::output_text as out_text;

use common::netns::{require_root_and_ip, rsskit, unique, veth, Netns};
use serde_json::{json, Value};
use std::process::Output;

const QUEUES: usize = 4;

struct Veth {
    ns: Netns,
    dev: String,
    dir: std::path::PathBuf,
}

impl Veth {
    fn new() -> Veth {
        require_root_and_ip();
        let ns = Netns::new("rskt");
        let (a, b) = (unique("vt"), unique("vu"));
        veth((&a, &ns), (&b, &ns), Some(QUEUES));
        ns.ip(&["link", "set", &a, "up"]);
        ns.ip(&["link", "set", &b, "up"]);
        let dir = std::env::temp_dir().join(format!("rsskit-hosttune-netns-{}", unique("d")));
        std::fs::create_dir_all(&dir).unwrap();
        Veth { ns, dev: a, dir }
    }

    fn run(&self, args: &[&str]) -> Output {
        let mut c = self.ns.command(&rsskit());
        c.current_dir(&self.dir).args(args);
        let child = common::netns::Proc::spawn(c);
        child.wait(std::time::Duration::from_secs(60))
    }

    fn queue_file(&self, q: &str, file: &str) -> String {
        format!("/sys/class/net/{}/queues/{q}/{file}", self.dev)
    }

    /// Every RPS/RFS/XPS file of the veth, as the kernel prints it.
    fn snapshot(&self) -> Vec<(String, String)> {
        let mut v = Vec::new();
        for q in 0..QUEUES {
            for (dir, file) in [("rx", "rps_cpus"), ("rx", "rps_flow_cnt"), ("tx", "xps_cpus")] {
                let p = self.queue_file(&format!("{dir}-{q}"), file);
                v.push((p.clone(), self.ns.read(&p)));
            }
        }
        v
    }
}

impl Drop for Veth {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn cpus() -> Vec<usize> {
    rsskit_linux::cpulist::online()
}

#[test]
fn veth_apply_check_restore() {
    let v = Veth::new();
    let before = v.snapshot();
    assert!(before.iter().all(|(_, x)| !x.is_empty()), "every file readable: {before:?}");

    // The fresh veth has RPS and XPS off: check says not aligned (when
    // there is more than one CPU to spread over).
    let out = v.run(&["check", "--iface", &v.dev]);
    let s = String::from_utf8_lossy(&out.stdout).to_string();
    if cpus().len() > 1 {
        assert_eq!(out.status.code(), Some(1), "{}", out_text(&out));
        assert!(s.contains("XPS is off on every TX queue"), "{s}");
    }

    let out = v.run(&["plan", "--iface", &v.dev, "--rps-flow-cnt", "100", "--json"]);
    assert!(out.status.success(), "{}", out_text(&out));
    let plan: Value = serde_json::from_slice(&out.stdout).unwrap();
    let d = &plan["devices"][0];
    assert_eq!(d["hardware_rss"], false, "veth has no RSS");
    assert_eq!(d["table"], Value::Null);
    assert_eq!(plan["rps_sock_flow_entries"], Value::Null, "never the global table here");
    std::fs::write(v.dir.join("plan.json"), &out.stdout).unwrap();

    let out = v.run(&["apply", "plan.json", "--save", "saved.json"]);
    assert!(out.status.success(), "{}", out_text(&out));
    // The save names kinds and queues of the veth, never a path; root's only.
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::metadata(v.dir.join("saved.json")).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    let saved: Value = serde_json::from_slice(&std::fs::read(v.dir.join("saved.json")).unwrap()).unwrap();
    assert_eq!(saved["version"], 2);
    for e in saved["settings"].as_array().unwrap() {
        assert_eq!(e["device"], v.dev.as_str(), "{e}");
        assert!(e.get("path").is_none(), "{e}");
        assert!(["rps_cpus", "rps_flow_cnt", "xps_cpus"].contains(&e["kind"].as_str().unwrap()), "{e}");
    }
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("settings applied and read back"),
        "{}",
        out_text(&out)
    );
    for q in 0..QUEUES {
        let rps =
            rsskit_linux::netdev::parse_hex_mask(&v.ns.read(&v.queue_file(&format!("rx-{q}"), "rps_cpus")))
                .unwrap();
        let want: Vec<usize> =
            d["rx"][q]["rps_cpus"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as usize).collect();
        assert_eq!(rps, want, "rx-{q} rps_cpus");
        if cpus().len() > 1 {
            assert_eq!(rps, cpus(), "RPS over every CPU of a device without RSS");
        }
        assert_eq!(v.ns.read(&v.queue_file(&format!("rx-{q}"), "rps_flow_cnt")), "128", "100 rounded up");
        let xps =
            rsskit_linux::netdev::parse_hex_mask(&v.ns.read(&v.queue_file(&format!("tx-{q}"), "xps_cpus")))
                .unwrap();
        let want: Vec<usize> =
            d["tx"][q]["xps_cpus"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as usize).collect();
        assert_eq!(xps, want, "tx-{q} xps_cpus");
    }
    let out = v.run(&["check", "--iface", &v.dev]);
    assert_eq!(out.status.code(), Some(0), "{}", out_text(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains(&format!("{}: aligned", v.dev)));

    let out = v.run(&["apply", "--restore", "saved.json"]);
    assert!(out.status.success(), "{}", out_text(&out));
    assert_eq!(v.snapshot(), before, "restore puts every file back byte for byte");
}

#[test]
fn veth_refuses_srssh_per_setting() {
    let v = Veth::new();
    let before = v.snapshot();
    let out = v.run(&["plan", "--iface", &v.dev, "--json"]);
    assert!(out.status.success(), "{}", out_text(&out));
    // A plan as for a NIC with RSS: table and key for the veth.
    let mut plan: Value = serde_json::from_slice(&out.stdout).unwrap();
    plan["devices"][0]["table"] = json!((0..128).map(|i| i % QUEUES).collect::<Vec<_>>());
    plan["devices"][0]["key"] = json!("6d5a".repeat(20));
    plan["devices"][0]["hash_fields"] =
        json!([{"flow": "udp4", "fields": ["ip_src", "ip_dst", "l4_src_port", "l4_dst_port"]}]);
    std::fs::write(v.dir.join("plan.json"), serde_json::to_string(&plan).unwrap()).unwrap();

    let out = v.run(&["apply", "plan.json", "--save", "saved.json"]);
    let s = String::from_utf8_lossy(&out.stdout).to_string();
    assert_eq!(out.status.code(), Some(2), "{}", out_text(&out));
    let refused: Vec<&str> = s.lines().filter(|l| l.contains("REFUSED")).collect();
    assert_eq!(refused.len(), 3, "{s}");
    // Hashed fields first: virtio_net takes them to the device only with the
    // SRSSH that follows (see tune::settings).
    assert!(
        refused[0].contains("udp4 hashed fields: ETHTOOL_SRXFH: operation not supported by the driver"),
        "{s}"
    );
    // RSS_SET through ethtool netlink where the kernel has it (its errno for
    // veth's key is EINVAL: the key's length is checked against the
    // driver's, 0, first), else the ioctl.
    for (line, what) in [(refused[1], "RSS indirection table"), (refused[2], "RSS key")] {
        assert!(
            line.contains(&format!("{what}: ETHTOOL_SRSSH: operation not supported by the driver"))
                || line.contains(&format!("{what}: ETHTOOL_MSG_RSS_SET: ")),
            "{s}"
        );
    }
    assert!(s.contains("settings applied, 3 not: the device is partly tuned"), "{s}");
    // The sysfs settings went in regardless.
    assert!(s.lines().any(|l| l.contains("ok") && l.contains("tx-0 xps_cpus")), "{s}");

    let out = v.run(&["apply", "--restore", "saved.json"]);
    assert!(out.status.success(), "{}", out_text(&out));
    assert_eq!(v.snapshot(), before);
}
