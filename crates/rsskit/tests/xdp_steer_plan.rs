//! `rsskit plan`/`apply --software-rss xdp` on a veth (no hardware RSS) in
//! a namespace: the plan puts XDP steering where RPS would go (RPS off),
//! apply writes RPS off and names the command, and that command attaches.
//! Needs root and iproute2; the namespace is removed on drop.

mod common;

use common::proc::output_text as text;

use common::netns::{ip, require_root_and_ip, rsskit, unique, Netns, Proc};
use serde_json::Value;
use std::time::Duration;

#[test]
fn plan_and_apply_choose_xdp_over_rps() {
    require_root_and_ip();
    let ncpu = rsskit_linux::cpulist::online().len();
    assert!(ncpu >= 2, "software RSS needs 2 CPUs to plan anything (found {ncpu})");
    let ns = Netns::new("xspl");
    let (a, b) = (unique("xv"), unique("xw"));
    ip(&["link", "add", &a, "netns", &ns.name, "type", "veth", "peer", "name", &b, "netns", &ns.name]);
    ns.ip(&["link", "set", &a, "up"]);
    ns.ip(&["link", "set", &b, "up"]);
    let dir = std::env::temp_dir().join(unique("rsskit-xdpplan"));
    std::fs::create_dir_all(&dir).unwrap();
    let run = |args: &[&str]| {
        let mut c = ns.command(&rsskit());
        c.current_dir(&dir).args(args);
        Proc::spawn(c).wait(Duration::from_secs(60))
    };

    // Default: RPS.
    let out = run(&["plan", "--iface", &a, "--json"]);
    assert!(out.status.success(), "{}", text(&out));
    let p: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(p["devices"][0].get("xdp_steer").is_none(), "{p}");
    assert_ne!(p["devices"][0]["rx"][0]["rps_cpus"], serde_json::json!([]));

    // --software-rss xdp: XDP steering over the CPUs, RPS off.
    let out = run(&["plan", "--iface", &a, "--software-rss", "xdp", "--json"]);
    assert!(out.status.success(), "{}", text(&out));
    let p: Value = serde_json::from_slice(&out.stdout).unwrap();
    let d = &p["devices"][0];
    assert_eq!(d["hardware_rss"], false);
    assert_eq!(d["rx"][0]["rps_cpus"], serde_json::json!([]), "RPS off under XDP steering: {d}");
    let cmd = d["xdp_steer"]["command"].as_str().unwrap_or_else(|| panic!("no xdp_steer: {d}")).to_string();
    assert!(cmd.starts_with(&format!("rsskit xdp-steer --iface {a} --cpus ")), "{cmd}");

    // apply: RPS written off, the command named.
    let out = run(&["apply", "--iface", &a, "--software-rss", "xdp", "--save", "saved.json"]);
    assert!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains(&cmd), "{}", text(&out));
    let rps = ns.read(&format!("/sys/class/net/{a}/queues/rx-0/rps_cpus"));
    assert!(rps.chars().all(|c| c == '0' || c == ','), "rps_cpus {rps}");

    // The planned command attaches (briefly) and detaches.
    let args: Vec<&str> = cmd.split_whitespace().skip(1).collect();
    let mut full = args.clone();
    full.extend(["--duration", "1", "--json"]);
    let out = run(&full);
    assert!(out.status.success(), "{}", text(&out));
    let first: Value =
        serde_json::from_str(String::from_utf8_lossy(&out.stdout).lines().next().unwrap()).unwrap();
    assert_eq!(first["mode"], "native", "veth runs XDP natively: {first}");
    let _ = std::fs::remove_dir_all(&dir);
}
