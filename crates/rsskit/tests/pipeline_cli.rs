//! `rsskit pipeline` end to end: bad input gives one clear error and exit 1
//! (clap's own errors exit 2); a capture of fragments goes through
//! reassembly and comes out whole; generated traffic is counted exactly.

use assert_cmd::Command;
use rsskit_dataplane::io::pcap::read_all;
use rsskit_dataplane::wire::{parse_ethernet, ParseConfig};
use serde_json::Value;
use std::path::PathBuf;
use std::time::Duration;

fn rsskit() -> Command {
    let mut c = Command::cargo_bin("rsskit").unwrap();
    c.timeout(Duration::from_secs(60));
    c
}

fn testdata(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../rsskit-dataplane/testdata").join(name)
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("rsskit-pipeline-cli-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d.join(name)
}

/// Runs and expects exit `code` with `needle` in stderr; stderr must be one line for code 1.
fn fails(args: &[&str], code: i32, needle: &str) {
    let out = rsskit().args(args).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "{args:?}: {err}");
    assert!(err.contains(needle), "{args:?}: expected {needle:?} in {err:?}");
    assert!(!err.contains("panicked"), "{err}");
    if code == 1 {
        assert_eq!(err.trim_end().lines().count(), 1, "one clear error line: {err:?}");
        assert!(err.starts_with("rsskit: error: "), "{err:?}");
    }
}

#[test]
fn bad_inputs() {
    fails(&["pipeline", "--in", "pcap:/nonexistent/capture.pcap"], 1, "does not exist");
    fails(&["pipeline", "--in", "afpacket:nosuchif0xyz"], 1, "no such interface: nosuchif0xyz");
    fails(&["pipeline", "--in", "afpacket:bad/name"], 1, "bad interface name");
    fails(&["pipeline", "--in", "gen", "--out", "afpacket:nosuchif0xyz"], 1, "no such interface");
    fails(&["pipeline", "--in", "gen", "--out", "pcap:/nonexistent/dir/o.pcap"], 1, "cannot create");
    fails(&["pipeline", "--in", "gen", "--workers", "2", "--cpus", "0"], 1, "--cpus lists 1 CPUs");
    fails(&["pipeline", "--in", "gen", "--cpus", "4000"], 1, "not online");
    let garbage = tmp("garbage.pcap");
    std::fs::write(&garbage, b"this is not a capture file at all").unwrap();
    fails(&["pipeline", "--in", &format!("pcap:{}", garbage.display())], 1, "not a pcap");
    // clap's errors: exit 2.
    fails(&["pipeline", "--in", "eth0"], 2, "is not an input");
    fails(&["pipeline", "--in", "gen", "--out", "nul"], 2, "is not an output");
    fails(&["pipeline", "--in", "gen", "--batch", "0"], 2, "batch");
    fails(&["pipeline", "--in", "gen", "--batch", "257"], 2, "batch");
    fails(&["pipeline", "--in", "gen", "--prefetch", "all"], 2, "prefetch");
    fails(&["pipeline", "--in", "gen", "--workers", "0"], 2, "workers");
    fails(&["pipeline", "--in", "gen", "--frag-timeout=-1"], 2, "seconds");
    fails(&["pipeline", "--in", "gen", "--frag-timeout", "0"], 2, "seconds");
}

#[test]
fn afpacket_without_permission() {
    // As nobody (no CAP_NET_RAW): one clear error about the permission.
    let bin = assert_cmd::cargo::cargo_bin("rsskit");
    let out = std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all"])
        .arg(&bin)
        .args(["pipeline", "--in", "afpacket:lo", "--duration", "1"])
        .output()
        .expect("setpriv (util-linux) is needed for this test");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("CAP_NET_RAW"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
}

#[test]
fn generated_traffic_counted_exactly() {
    for workers in ["1", "2"] {
        let out = rsskit()
            .args(["pipeline", "--in", "gen", "--packets", "20000", "--workers", workers, "--queue", "65536"])
            .args(["--batch", "16", "--prefetch", "both", "--json", "--quiet"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        let n: u64 = workers.parse().unwrap();
        let t = &v["total"];
        assert_eq!(t["input"], 20000 * n);
        assert_eq!(t["queue_drops"], 0);
        assert_eq!(t["handled"], 20000 * n, "{t}");
        assert_eq!(t["forwarded"], 20000 * n);
        assert_eq!(t["output"]["packets"], 20000 * n);
        assert_eq!(
            t["dispatched"].as_u64().unwrap() + t["queued"].as_u64().unwrap(),
            20000 * n,
            "every packet dispatched directly or queued"
        );
        assert_eq!(v["workers"].as_array().unwrap().len() as u64, n);
        assert!(v["mpps"].as_f64().unwrap() > 0.0);
    }
}

#[test]
fn backpressure_flag_avoids_queue_drops() {
    // A 2-slot queue: without backpressure some packets are dropped unless
    // the two workers keep perfect pace; with it none ever is.
    let out = rsskit()
        .args(["pipeline", "--in", "gen", "--packets", "50000", "--workers", "2", "--queue", "2"])
        .args(["--backpressure", "--json", "--quiet"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["total"]["queue_drops"], 0);
    assert_eq!(v["total"]["handled"], 100_000);
}

#[test]
fn fragments_capture_reassembled_into_pcap() {
    let out_path = tmp("reassembled.pcap");
    let out = rsskit()
        .args(["pipeline", "--in"])
        .arg(format!("pcap:{}", testdata("frags.pcap").display()))
        .arg("--out")
        .arg(format!("pcap:{}", out_path.display()))
        .args(["--workers", "2", "--udp-4tuple", "--json", "--quiet"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let t = &v["total"];
    // frags.expect: the datagrams marked "complete" (reassembled; GRE ones decapsulated too).
    let expect = std::fs::read_to_string(testdata("frags.expect")).unwrap();
    let complete: Vec<&str> =
        expect.lines().filter(|l| l.split_whitespace().nth(1) == Some("complete")).collect();
    assert!(!complete.is_empty());
    assert_eq!(t["reassembled"].as_u64().unwrap(), complete.len() as u64, "{t}");
    assert!(t["drops"].as_u64().unwrap() > 0, "the capture's overlaps are dropped");
    // Per frame: the capture's records, each written (inside its datagram),
    // dropped with a reason, or a fragment still held at exit.
    let a = &v["accounting"];
    let records = read_all(&testdata("frags.pcap")).unwrap().len() as u64;
    let dropped: u64 = a["dropped"].as_object().unwrap().values().map(|n| n.as_u64().unwrap()).sum();
    assert_eq!(a["in"], records, "{a}");
    assert_eq!(records, a["out"].as_u64().unwrap() + dropped + a["held"].as_u64().unwrap(), "{a}");
    assert!(a["dropped"]["frag_overlap"].as_u64().unwrap() > 0, "{a}");
    assert!(
        a["out"].as_u64().unwrap() > t["output"]["packets"].as_u64().unwrap(),
        "datagrams count their fragments"
    );
    let frames = read_all(&out_path).unwrap();
    assert_eq!(frames.len() as u64, t["forwarded"].as_u64().unwrap());
    // Every written datagram is whole and matches one of the expected IP packets.
    let wanted: Vec<Vec<u8>> = complete
        .iter()
        .filter_map(|l| l.split_whitespace().find_map(|w| w.strip_prefix("ip=")))
        .map(|h| (0..h.len() / 2).map(|i| u8::from_str_radix(&h[2 * i..2 * i + 2], 16).unwrap()).collect())
        .collect();
    for (_, f) in &frames {
        let p = parse_ethernet(f, &ParseConfig::default()).unwrap();
        assert!(!p.outer.is_fragment());
        let ip = &f[14..];
        assert!(
            wanted.iter().any(|w| w == ip) || p.inner.is_none(),
            "output datagram not among the expected ones"
        );
    }
    let reassembled_out = frames.iter().filter(|(_, f)| wanted.iter().any(|w| w == &f[14..])).count();
    assert!(
        reassembled_out >= complete.len() - 1,
        "{reassembled_out} of {} reassembled datagrams written",
        complete.len()
    );
}

#[test]
fn pcap_loop_and_duration() {
    let out = rsskit()
        .args(["pipeline", "--in"])
        .arg(format!("pcap:{}", testdata("parse.pcap").display()))
        .args(["--loop", "3", "--json", "--quiet"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let once = read_all(&testdata("parse.pcap")).unwrap().len() as u64;
    assert_eq!(v["total"]["input"].as_u64().unwrap(), 3 * once);
    // A live-like source stopped by --duration: capture timing of a looped file.
    let t0 = std::time::Instant::now();
    let out = rsskit()
        .args([
            "pipeline",
            "--in",
            "gen",
            "--packets",
            "1000000000000",
            "--duration",
            "1",
            "--json",
            "--quiet",
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    let el = t0.elapsed();
    assert!(el < Duration::from_secs(10), "{el:?}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["elapsed_s"].as_f64().unwrap() >= 1.0);
}

/// Removes the namespace (and anything left in it) even when an assertion fails.
struct Netns(String);
impl Drop for Netns {
    fn drop(&mut self) {
        let _ = std::process::Command::new("ip").args(["netns", "del", &self.0]).output();
    }
}

fn sh(args: &[&str]) {
    let out = std::process::Command::new(args[0])
        .args(&args[1..])
        .output()
        .unwrap_or_else(|e| panic!("{} is needed (root + iproute2): {e}", args[0]));
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// `pipeline --in afpacket:vB --out pcap:FILE` in a namespace with a veth
/// pair; the frames are injected on vA by a second `pipeline --in pcap:...
/// --out afpacket:vA`.
#[test]
fn afpacket_veth_cli() {
    use rsskit_dataplane::craft::{eth, ipv4, udp, V4};
    use rsskit_dataplane::io::pcap::PcapSink;
    use rsskit_dataplane::netisr::Mbuf;
    use rsskit_dataplane::output::Sink;
    // SAFETY: no preconditions.
    assert_eq!(unsafe { libc::geteuid() }, 0, "this test needs root (network namespaces, AF_PACKET)");
    let ns = Netns(format!("rsskit-plcli-{}", std::process::id()));
    let _ = std::process::Command::new("ip").args(["netns", "del", &ns.0]).output();
    sh(&["ip", "netns", "add", &ns.0]);
    sh(&["ip", "netns", "exec", &ns.0, "sysctl", "-q", "-w", "net.ipv6.conf.default.disable_ipv6=1"]);
    sh(&["ip", "-n", &ns.0, "link", "add", "vA", "type", "veth", "peer", "name", "vB"]);
    sh(&["ip", "-n", &ns.0, "link", "set", "vA", "up"]);
    sh(&["ip", "-n", &ns.0, "link", "set", "vB", "up"]);

    let input = tmp("inject.pcap");
    let output = tmp("received.pcap");
    let mut w = PcapSink::create(&input).unwrap();
    let frames: Vec<Mbuf> = (0u32..100)
        .map(|i| {
            let mut pl = b"CLI".to_vec();
            pl.extend_from_slice(&i.to_be_bytes());
            let ip =
                ipv4(&V4::new([10, 8, 0, 1].into(), [10, 8, 0, 2].into(), 17), &udp(3000 + i as u16, 9, &pl));
            let mut f = eth(0x0800, &[], &ip);
            f[..6].copy_from_slice(&[0xff; 6]);
            Mbuf::heap(f, 0, 1_000_000_000 + u64::from(i), 0)
        })
        .collect();
    assert_eq!(w.send(&frames).unwrap(), 100);
    w.close().unwrap();

    let bin = assert_cmd::cargo::cargo_bin("rsskit");
    let rx = std::process::Command::new("ip")
        .args(["netns", "exec", &ns.0])
        .arg(&bin)
        .args(["pipeline", "--in", "afpacket:vB", "--workers", "2", "--duration", "5", "--json", "--quiet"])
        .arg("--out")
        .arg(format!("pcap:{}", output.display()))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    struct Kill(Option<std::process::Child>);
    impl Drop for Kill {
        fn drop(&mut self) {
            if let Some(c) = &mut self.0 {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }
    let mut rx = Kill(Some(rx));
    std::thread::sleep(Duration::from_millis(1500));
    let tx = std::process::Command::new("ip")
        .args(["netns", "exec", &ns.0])
        .arg(&bin)
        .args(["pipeline", "--in"])
        .arg(format!("pcap:{}", input.display()))
        .args(["--out", "afpacket:vA", "--json", "--quiet"])
        .output()
        .unwrap();
    assert!(tx.status.success(), "{}", String::from_utf8_lossy(&tx.stderr));
    let txv: Value = serde_json::from_slice(&tx.stdout).unwrap();
    assert_eq!(txv["total"]["output"]["packets"], 100);
    let out = rx.0.take().unwrap().wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["total"]["input"].as_u64().unwrap() >= 100, "{}", v["total"]);
    let got = read_all(&output).unwrap();
    let mut ids: Vec<u32> = got
        .iter()
        .filter_map(|(_, f)| {
            let p = parse_ethernet(f, &ParseConfig::default()).ok()?;
            match p.l4 {
                rsskit_dataplane::wire::Transport::Udp { payload, .. } if payload.starts_with(b"CLI") => {
                    Some(u32::from_be_bytes(payload[3..7].try_into().unwrap()))
                }
                _ => None,
            }
        })
        .collect();
    ids.sort_unstable();
    assert_eq!(ids, (0..100).collect::<Vec<u32>>(), "every injected frame received once");
}
