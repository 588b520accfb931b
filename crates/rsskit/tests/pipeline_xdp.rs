//! `pipeline --in xdp:IF` / `--out xdp:IF` on a veth pair in a network
//! namespace (created here, removed on drop): frames injected through
//! AF_XDP TX on one end arrive through the XSKMAP redirect program and
//! AF_XDP RX on the other with exact counts, 1 and 2 workers; and the
//! bad-input errors. Needs root; fails loudly otherwise.

mod common;

use common::netns::{self, Netns, Proc};
use rsskit_dataplane::craft::{eth, ipv4, udp, V4};
use rsskit_dataplane::io::pcap::{PcapSink, PcapSource};
use rsskit_dataplane::io::{Recv, Source};
use rsskit_dataplane::netisr::Mbuf;
use rsskit_dataplane::output::Sink;
use serde_json::Value;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("rsskit-pipeline-xdp-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d.join(name)
}

/// A namespace with veth vA <-> vB, 2 RX/TX queues each, no IPv6 (no
/// stray neighbour discovery frames), both up.
fn veth_ns() -> Netns {
    netns::require_root_and_ip();
    let ns = Netns::new("rskx");
    ns.sysctl("net.ipv6.conf.all.disable_ipv6", "1");
    ns.sysctl("net.ipv6.conf.default.disable_ipv6", "1");
    netns::veth(("vA", &ns), ("vB", &ns), Some(2));
    ns.ip(&["link", "set", "vA", "up"]);
    ns.ip(&["link", "set", "vB", "up"]);
    ns
}

/// `n` UDP frames from distinct sources (so they hash to both workers).
fn inject_capture(n: u32) -> (PathBuf, Vec<Vec<u8>>) {
    let path = tmp(&format!("inject-{n}.pcap"));
    let mut w = PcapSink::create(&path).unwrap();
    let frames: Vec<Mbuf> = (0..n)
        .map(|i| {
            let mut pl = b"XDP".to_vec();
            pl.extend_from_slice(&i.to_be_bytes());
            let src = [10, 9, (i >> 8) as u8, i as u8].into();
            let ip = ipv4(&V4::new(src, [10, 8, 0, 2].into(), 17), &udp(3000 + (i % 7) as u16, 9, &pl));
            let mut f = eth(0x0800, &[], &ip);
            f[..6].copy_from_slice(&[0xff; 6]);
            Mbuf::heap(f, 0, 1_000_000_000 + u64::from(i), 0)
        })
        .collect();
    assert_eq!(w.send(&frames).unwrap(), n as usize);
    w.close().unwrap();
    (path, frames.iter().map(|f| f.data().to_vec()).collect())
}

fn run_json(out: std::process::Output) -> Value {
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "pipeline failed: {err}");
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("json ({e}): {err}"))
}

fn xdp_attached(ns: &Netns, dev: &str) -> bool {
    let out = Command::new("ip").args(["-n", &ns.name, "link", "show", dev]).output().unwrap();
    String::from_utf8_lossy(&out.stdout).contains("xdp")
}

/// Receives on vB through AF_XDP with `workers` workers while a second
/// pipeline sends the capture out of vA through AF_XDP.
fn xdp_to_xdp(workers: &str, out_spec: &str, n: u32) -> (Value, Value, String) {
    receive_while_injecting(&["pipeline"], workers, out_spec, n)
}

/// `cmd --in xdp:vB --workers W --out OUT` receiving what a pipeline
/// sends out of vA through AF_XDP.
fn receive_while_injecting(cmd0: &[&str], workers: &str, out_spec: &str, n: u32) -> (Value, Value, String) {
    let ns = veth_ns();
    let (capture, _) = inject_capture(n);
    let mut cmd = ns.command(&netns::rsskit());
    cmd.args(cmd0)
        .args(["--in", "xdp:vB", "--workers", workers, "--duration", "6", "--json"])
        .args(["--out", out_spec]);
    let rx = Proc::spawn(cmd);
    assert!(
        netns::wait_until(Duration::from_secs(20), || xdp_attached(&ns, "vB")),
        "the receiver did not attach its XDP program"
    );
    // Sockets are registered right after the attach.
    std::thread::sleep(Duration::from_millis(500));
    let tx = ns
        .command(&netns::rsskit())
        .args(["pipeline", "--out", "xdp:vA", "--workers", "2", "--json", "--quiet", "--in"])
        .arg(format!("pcap:{}", capture.display()))
        .output()
        .unwrap();
    let tx = run_json(tx);
    let out = rx.wait(Duration::from_secs(60));
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    (tx, run_json(out), stderr)
    // ns dropped here: namespace and veth removed.
}

fn assert_balanced(v: &Value) {
    let a = &v["accounting"];
    let dropped: u64 = a["dropped"].as_object().unwrap().values().map(|x| x.as_u64().unwrap()).sum();
    assert_eq!(
        a["in"].as_u64().unwrap(),
        a["out"].as_u64().unwrap() + dropped + a["held"].as_u64().unwrap(),
        "{a}"
    );
}

#[test]
fn xdp_in_null_out_one_and_two_workers() {
    let n = 3000u32;
    for workers in ["1", "2"] {
        let (tx, rx, stderr) = xdp_to_xdp(workers, "null", n);
        assert!(stderr.contains("input xdp:vB: 2 AF_XDP socket(s) on queue(s) 0,1, copy mode"), "{stderr}");
        assert_eq!(tx["total"]["output"]["packets"], u64::from(n), "sender: {}", tx["accounting"]);
        assert_balanced(&tx);
        let t = &rx["total"];
        assert_eq!(t["input"], u64::from(n), "every frame arrived once: {}", rx["accounting"]);
        assert_eq!(t["source_drops"], 0);
        assert_eq!(t["handled"], u64::from(n));
        assert_eq!(t["output"]["packets"], u64::from(n));
        assert_balanced(&rx);
        assert_eq!(rx["accounting"]["in"], u64::from(n));
        if workers == "2" {
            // The sender's two workers use TX queues 0 and 1, so both RX
            // queues, hence both receiving workers, read frames.
            for w in rx["workers"].as_array().unwrap() {
                assert!(w["input"].as_u64().unwrap() > 0, "each worker reads its queue: {w}");
            }
        }
    }
}

#[test]
fn xdp_in_frames_arrive_intact() {
    let n = 500u32;
    let out = tmp("received.pcap");
    let (_, rx, _) = xdp_to_xdp("1", &format!("pcap:{}", out.display()), n);
    assert_eq!(rx["total"]["output"]["packets"], u64::from(n));
    let (_, mut sent) = inject_capture(n);
    let mut src = PcapSource::open(&out, 1, false).unwrap();
    let mut got = Vec::new();
    while let Recv::Frame { data, .. } = src.recv() {
        got.push(data.to_vec());
    }
    sent.sort();
    got.sort();
    assert_eq!(got.len(), sent.len());
    assert!(got == sent, "the frames received through AF_XDP are the frames sent");
}

#[test]
fn firewall_on_xdp_input() {
    let n = 2100u32;
    let rules = tmp("deny3000.rules");
    std::fs::write(&rules, "deny udp from any 3000 to any\ndefault allow\n").unwrap();
    let r = rules.display().to_string();
    let (_, fw, stderr) = receive_while_injecting(&["firewall", "--rules", &r], "2", "null", n);
    assert!(stderr.contains("input xdp:vB: 2 AF_XDP socket(s) on queue(s) 0,1, copy mode"), "{stderr}");
    let a = &fw["accounting"];
    // Source port 3000 + i % 7: one frame in seven is denied.
    assert_eq!(a["in"], u64::from(n), "{a} {stderr}");
    assert_eq!(a["dropped"]["firewall_deny"], u64::from(n / 7), "{a}");
    assert_eq!(a["out"], u64::from(n - n / 7), "{a}");
    assert_balanced(&fw);
}

fn fails_in_ns(ns: &Netns, args: &[&str], needle: &str) {
    let out = ns.command(&netns::rsskit()).args(args).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
    assert!(err.contains(needle), "{args:?}: wanted {needle:?} in {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "one clear line: {err}");
}

#[test]
fn xdp_bad_inputs() {
    let ns = veth_ns();
    fails_in_ns(&ns, &["pipeline", "--in", "xdp:nosuchif0xyz"], "no such interface: nosuchif0xyz");
    fails_in_ns(
        &ns,
        &["pipeline", "--in", "gen", "--out", "xdp:nosuchif0xyz"],
        "no such interface: nosuchif0xyz",
    );
    fails_in_ns(&ns, &["pipeline", "--in", "xdp:lo"], "lo: the driver has no native XDP support");
    let out = ns.command(&netns::rsskit()).args(["pipeline", "--in", "xdp:lo"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.matches("(os error").count(), 1, "the kernel's reason once: {err}");
    fails_in_ns(&ns, &["pipeline", "--in", "xdp:vB:5"], "vB has 2 RX queue(s): no queue 5");
    // The firewall's own engine has no AF_XDP: refused before anything opens.
    for args in [
        &["firewall", "--rules", "/dev/null", "--engine", "own", "--in", "xdp:vB"][..],
        &["firewall", "--rules", "/dev/null", "--engine", "own", "--in", "afpacket:vB", "--out", "xdp:vA"],
    ] {
        fails_in_ns(&ns, args, "xdp: input and output need --engine netisr (the default)");
    }
    assert!(!xdp_attached(&ns, "vB"), "a failed start leaves no XDP program behind");
    // As nobody: one clear error about the privileges.
    let out = ns
        .command(std::path::Path::new("setpriv"))
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all"])
        .arg(netns::rsskit())
        .args(["pipeline", "--in", "xdp:vB", "--duration", "1"])
        .output()
        .expect("setpriv (util-linux) is needed for this test");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("AF_XDP needs root"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    // clap's errors: exit 2.
    for (args, needle) in [
        (&["pipeline", "--in", "xdp:"][..], "needs an interface"),
        (&["pipeline", "--in", "xdp:vB:x"], "bad queue list"),
        (&["pipeline", "--in", "gen", "--out", "xdp:"], "is not an output"),
        (&["firewall", "--rules", "/dev/null", "--in", "xdp:"], "needs an interface"),
    ] {
        let out = Command::new(netns::rsskit()).args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(String::from_utf8_lossy(&out.stderr).contains(needle), "{args:?}");
    }
}
