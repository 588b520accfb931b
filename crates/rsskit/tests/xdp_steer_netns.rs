//! End to end: `rsskit xdp-steer` on the server end of a veth between two
//! namespaces. UDP flows (IPv4 and IPv6, several source addresses and
//! ports) are sent one datagram at a time; each is read on the server and
//! its `SO_INCOMING_CPU` (the CPU the stack ran on) must be the CPU the
//! rsskit policy maps its bucket to: the 4-tuple bucket for whole
//! datagrams, the 2-tuple bucket for fragmented ones (a fragment has no
//! ports). The program's per-CPU counters must account for every frame.
//!
//! Needs root and iproute2. RPS is off on the server's veth (it would move
//! packets again after the cpumap). Transmit checksum offload is off on the
//! client's veth: a frame redirected by XDP reaches the stack without the
//! "checksum left to the NIC" mark. Bounded: every wait has a deadline;
//! namespaces and the rsskit process are removed on drop, also on failure.

mod common;

use common::netns::{
    in_netns, require_root_and_ip, rsskit, unique, wait_until, Netns, Pair, Proc, CLIENT_V4, CLIENT_V6,
    SERVER_V4, SERVER_V6,
};
use rsskit_core::{CpuId, FlowTuple, HashConfig, L4Proto, RssKey, RssPolicy};
use serde_json::Value;
use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::process::Command;
use std::time::Duration;

const EXTRA: u8 = 6;
const PORT: u16 = 7000;

struct Setup {
    server: Netns,
    client: Netns,
    vs: String,
}

fn setup() -> Setup {
    // One queue: a device without hardware RSS, RPS off.
    let Pair { server, client, vs, vc } = Pair::with(EXTRA, None, false);
    client.tx_csum_off(&vc);
    Setup { server, client, vs }
}

/// One datagram of `size` bytes from `src` to the server's `dst`; returns
/// the CPU the server's stack received it on.
fn send_one(tx: &UdpSocket, rx: &UdpSocket, dst: SocketAddr, size: usize, seq: u32) -> u32 {
    let mut msg = vec![0u8; size];
    msg[..4].copy_from_slice(&seq.to_be_bytes());
    tx.send_to(&msg, dst).expect("send");
    let mut buf = vec![0u8; 65536];
    loop {
        let (n, _) = rx.recv_from(&mut buf).unwrap_or_else(|e| panic!("datagram {seq} to {dst} lost: {e}"));
        // A late duplicate of an earlier datagram cannot happen on a veth,
        // but check the sequence number anyway.
        if n == size && buf[..4] == seq.to_be_bytes() {
            let cpu = rsskit_linux::socket::incoming_cpu(rx).expect("SO_INCOMING_CPU");
            return cpu.expect("SO_INCOMING_CPU recorded for a received datagram") as u32;
        }
    }
}

#[test]
fn every_flow_is_processed_on_its_buckets_cpu_native() {
    flows_on_their_cpus("native");
}

/// Generic (SKB) mode: the same steering after the skb is built (what a
/// driver without native XDP gets).
#[test]
fn every_flow_is_processed_on_its_buckets_cpu_generic() {
    flows_on_their_cpus("generic");
}

fn flows_on_their_cpus(mode: &str) {
    let s = setup();
    let ncpu = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1).min(64);
    assert!(ncpu >= 2, "this test needs at least 2 CPUs to tell steering from chance (found {ncpu})");
    let cpus: Vec<CpuId> = (0..ncpu as u32).map(CpuId).collect();
    let cpu_list = format!("0-{}", ncpu - 1);
    let policy = RssPolicy::new(RssKey::microsoft(), HashConfig::all(), &cpus, None).unwrap();

    let mut cmd = s.server.command(&rsskit());
    cmd.args(["xdp-steer", "--iface", &s.vs, "--cpus", &cpu_list, "--hash-types", "all", "--json"]);
    cmd.args(["--duration", "120", "--queue-size", "256", "--mode", mode]);
    let proc = Proc::spawn(cmd);
    let vs = s.vs.clone();
    let sname = s.server.name.clone();
    let attached = wait_until(Duration::from_secs(20), || {
        let out = Command::new("ip").args(["-n", &sname, "link", "show", &vs]).output().unwrap();
        String::from_utf8_lossy(&out.stdout).contains("rsskit_xdp_cpum")
    });
    assert!(attached, "the XDP program did not show up on {} within 20 s", s.vs);

    // SO_INCOMING_CPU is kept for connected UDP sockets only: one receiver
    // per flow (own port, connected to the flow's source) in the server
    // namespace; one sender per flow in the client's.
    let mut sources: Vec<IpAddr> = vec![CLIENT_V4.parse().unwrap(), CLIENT_V6.parse().unwrap()];
    for i in 1..=EXTRA {
        sources.push(format!("198.18.1.{i}").parse().unwrap());
        sources.push(format!("fd77:1::{i:x}").parse().unwrap());
    }
    let mut dport = PORT;
    let mut seq = 0u32;
    let mut checked = 0;
    let mut per_cpu_frames: BTreeMap<u32, u64> = BTreeMap::new();
    let mut four_vs_two_differs = [0usize; 2];
    let mut seen_cpus = [std::collections::BTreeSet::new(), std::collections::BTreeSet::new()];
    for src in &sources {
        let v6 = src.is_ipv6();
        let dst_ip: IpAddr = if v6 { SERVER_V6.parse().unwrap() } else { SERVER_V4.parse().unwrap() };
        for sport in [20000u16, 20001, 20002, 20003] {
            dport += 1;
            let dst = SocketAddr::new(dst_ip, dport);
            let src_addr = *src;
            let tx =
                in_netns(&s.client.name, move || UdpSocket::bind((src_addr, sport)).expect("bind sender"));
            let rx = in_netns(&s.server.name, move || {
                let r = UdpSocket::bind(dst).expect("bind receiver");
                r.connect((src_addr, sport)).expect("connect receiver");
                r
            });
            rx.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let rx = &rx;
            let t = FlowTuple::new(*src, sport, dst_ip, dport, L4Proto::Udp);
            let want4 = policy.cpu_of(policy.worker_of(&t)).unwrap().0;
            let ht2 = policy.hash_type(v6, L4Proto::Udp, true);
            let want2 = policy.cpu_of(policy.worker_of_hash(policy.hash_tuple_as(&t, ht2))).unwrap().0;
            // Whole datagrams: the 4-tuple bucket's CPU.
            for _ in 0..3 {
                seq += 1;
                let got = send_one(&tx, rx, dst, 64, seq);
                assert_eq!(
                    got, want4,
                    "{t:?}: 64-byte datagram processed on CPU {got}, its 4-tuple bucket is on CPU {want4}"
                );
                *per_cpu_frames.entry(want4).or_default() += 1;
                checked += 1;
            }
            seen_cpus[v6 as usize].insert(want4);
            // 3000 bytes over a 1500 MTU: fragments, the 2-tuple bucket's CPU
            // (the datagram is reassembled where its fragments were processed).
            seq += 1;
            let got = send_one(&tx, rx, dst, 3000, seq);
            assert_eq!(
                got, want2,
                "{t:?}: fragmented datagram processed on CPU {got}, its 2-tuple bucket is on CPU {want2}"
            );
            *per_cpu_frames.entry(want2).or_default() += 3;
            if want2 != want4 {
                four_vs_two_differs[v6 as usize] += 1;
            }
            checked += 1;
        }
    }
    for (fam, name) in [(0, "IPv4"), (1, "IPv6")] {
        assert!(seen_cpus[fam].len() >= 2, "{name}: all flows mapped to one CPU, the test proves nothing");
        assert!(four_vs_two_differs[fam] > 0, "{name}: no flow whose 2-tuple and 4-tuple CPUs differ");
    }

    // Stop rsskit (SIGINT): it prints the final counters and detaches.
    std::thread::sleep(Duration::from_millis(300));
    proc.signal(libc::SIGINT);
    let out = proc.wait(Duration::from_secs(20));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "rsskit xdp-steer failed: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    let first: Value = serde_json::from_str(stdout.lines().next().unwrap_or("")).unwrap_or(Value::Null);
    assert_eq!(first["mode"], mode, "attached in the mode asked for: {stdout}");
    let last: Value = stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| v["final"] == true)
        .unwrap_or_else(|| panic!("no final counters in:\n{stdout}"));
    let n = |k: &str| last[k].as_u64().unwrap_or_else(|| panic!("{k} missing: {last}"));
    // Every frame accounted for: redirected + passed = seen; every
    // redirected frame delivered on its CPU.
    assert_eq!(
        n("seen"),
        n("redirected") + n("passed_non_ip") + n("err_malformed") + n("err_redirect"),
        "counters do not add up: {last}"
    );
    assert_eq!(n("err_malformed"), 0, "{last}");
    assert_eq!(n("err_redirect"), 0, "{last}");
    assert_eq!(n("not_delivered"), 0, "cpumap dropped frames: {last}");
    assert!(n("frag_2tuple") >= (sources.len() * 4 * 2) as u64, "fragments not counted: {last}");
    for c in last["cpus"].as_array().unwrap() {
        let cpu = c["cpu"].as_u64().unwrap() as u32;
        let red = c["redirected"].as_u64().unwrap();
        let want = per_cpu_frames.get(&cpu).copied().unwrap_or(0);
        // Neighbour discovery frames are IP too: at least, not exactly.
        assert!(red >= want, "CPU {cpu}: {red} frames redirected, at least {want} sent there: {last}");
        assert_eq!(c["delivered"], c["redirected"], "CPU {cpu}: {last}");
    }
    eprintln!("{checked} datagrams each on their bucket's CPU; counters {last}");

    // Detached on exit.
    let o = Command::new("ip").args(["-n", &s.server.name, "link", "show", &s.vs]).output().unwrap();
    let link = String::from_utf8_lossy(&o.stdout);
    assert!(!link.contains("xdp"), "program still attached after exit: {link}");
}

/// A missing interface is one clear error, non-zero exit, nothing attached.
#[test]
fn missing_interface_is_one_error_line() {
    let out = Command::new(rsskit())
        .args(["xdp-steer", "--iface", "rsskit-none9", "--duration", "1"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim(), "rsskit: error: no network interface \"rsskit-none9\"");
}

/// `--detach` removes an rsskit program attached the netlink way (as
/// `ip link set dev IF xdp` does) and refuses a foreign one.
#[test]
fn detach_removes_a_program_left_attached() {
    require_root_and_ip();
    let ns = Netns::new("xstd");
    let dev = unique("xd");
    let peer = unique("xp");
    ns.ip(&["link", "add", &dev, "type", "veth", "peer", "name", &peer]);
    ns.ip(&["link", "set", &dev, "up"]);
    let detach = || {
        let o = ns
            .command(&rsskit())
            .args(["xdp-steer", "--iface", &dev, "--detach", "--json"])
            .output()
            .unwrap();
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stdout).to_string(),
            String::from_utf8_lossy(&o.stderr).to_string(),
        )
    };
    // Nothing attached: says so, exit 0.
    let (code, out, err) = detach();
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("\"detached\": false"), "{out}");

    let show = || {
        let o = Command::new("ip").args(["-n", &ns.name, "link", "show", &dev]).output().unwrap();
        String::from_utf8_lossy(&o.stdout).to_string()
    };

    // Held by a running xdp-steer (a BPF link): refused, with the reason;
    // stopping that process removes it.
    let mut c = ns.command(&rsskit());
    c.args(["xdp-steer", "--iface", &dev, "--duration", "60"]);
    let running = Proc::spawn(c);
    assert!(wait_until(Duration::from_secs(20), || show().contains("rsskit_xdp_cpum")), "{}", show());
    let (code, _, err) = detach();
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("BPF link held by a running process"), "{err}");
    // A second xdp-steer on the same interface: one clear error.
    let o = ns.command(&rsskit()).args(["xdp-steer", "--iface", &dev, "--duration", "1"]).output().unwrap();
    let e2 = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{e2}");
    assert!(e2.contains("already has an XDP program attached"), "{e2}");
    // Its advice works (issue 22 §6: it used to suggest --detach, which
    // refuses a linked program): it names the process to stop, and
    // stopping it (below) removes the program.
    assert!(
        e2.contains(&format!("held through a BPF link by running process {} (", running.pid()))
            && e2.contains(&format!("kill {}", running.pid())),
        "{e2}"
    );
    assert!(!e2.contains("--detach` removes"), "suggests --detach, which refuses a linked program: {e2}");
    running.signal(libc::SIGTERM);
    let out = running.wait(Duration::from_secs(20));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(!show().contains("xdp"), "{}", show());

    // Attach rsskit's program with iproute2 (netlink, no BPF link), from the
    // object the build embedded: write it out first.
    let obj = std::env::temp_dir().join(format!("{}.o", unique("xsobj")));
    let bytes = rsskit_linux::ebpf::object("xdp_cpumap").expect("xdp_cpumap object (built with clang)");
    std::fs::write(&obj, bytes).unwrap();
    let objs = obj.to_string_lossy().to_string();
    let r = Command::new("ip")
        .args(["-n", &ns.name, "link", "set", "dev", &dev, "xdpgeneric", "obj", &objs, "sec", "xdp"])
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&obj);
    assert!(r.status.success(), "ip link set xdpgeneric obj: {}", String::from_utf8_lossy(&r.stderr));
    assert!(show().contains("rsskit_xdp_cpum"), "{}", show());
    let (code, out, err) = detach();
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("\"detached\": true"), "{out}");
    assert!(!show().contains("xdp"), "{}", show());
}

/// Without privileges (uid nobody, no capabilities): one error line that
/// names the permission problem, exit 1, nothing attached.
#[test]
fn no_permission_is_one_error_line() {
    require_root_and_ip();
    let ns = Netns::new("xstp");
    let dev = unique("xn");
    let peer = unique("xo");
    ns.ip(&["link", "add", &dev, "type", "veth", "peer", "name", &peer]);
    let o = Command::new("ip")
        .args(["netns", "exec", &ns.name, "setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(rsskit())
        .args(["xdp-steer", "--iface", &dev, "--duration", "1"])
        .output()
        .expect("setpriv (util-linux)");
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("rsskit: error: ") && err.contains("permission denied"), "{err}");
    assert!(err.contains("CAP_BPF"), "{err}");
}

/// A driver without native XDP (the namespace's own loopback): `--mode
/// native` is one clear error; `auto` falls back to generic mode and says
/// why.
#[test]
fn driver_without_native_xdp() {
    require_root_and_ip();
    let ns = Netns::new("xstn");
    let dev = "lo".to_string();
    let o = ns
        .command(&rsskit())
        .args(["xdp-steer", "--iface", &dev, "--mode", "native", "--duration", "1"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("no native XDP support"), "{err}");

    let o = ns
        .command(&rsskit())
        .args(["xdp-steer", "--iface", &dev, "--duration", "0.5", "--json"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = String::from_utf8_lossy(&o.stdout);
    let first: Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
    assert_eq!(first["mode"], "generic", "{out}");
    assert!(first["fallback"].as_str().is_some_and(|r| r.contains("no native XDP")), "{out}");
}
