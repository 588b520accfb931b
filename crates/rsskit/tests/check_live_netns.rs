//! `rsskit check --live` on a 4-queue veth between two namespaces this test
//! creates (needs root and `ip`; fails loudly without).
//!
//! What veth offers (measured, and in drivers/net/veth.c): no RSS (`ethtool
//! -x` is not supported), but the receiving end keeps the sender's
//! `queue_mapping`, the TX queue `t` its stack picked (XPS on the sender
//! picks it), which the kernel reads as RX queue `t - 1` (`skb_get_rx_queue`;
//! `t = 0`: no queue recorded). So the client's veth has one TX queue more
//! than the server's RX queues, the test sets XPS so that every CPU sends
//! on TX queue q + 1, sends a burst, and knows the RX queue q of every frame
//! the server's veth receives.
//! IPv6 is off and the neighbours are static: the bursts are the only frames.
//!
//! - without an RSS setup: `check --live` counts every frame of the bursts
//!   on the queue it was sent to, explains that nothing can be predicted, and
//!   exits 2;
//! - with a reported setup from a fixture tree (`RSSKIT_SYSROOT`, a fake
//!   driver with a key and a table for the server's veth) the frames are real
//!   and so are their queues: sent on the queues that table predicts, the
//!   verdict is "follows" (exit 0); with some flows sent elsewhere, exactly
//!   those flows are reported, predicted and observed queue each (exit 1).

mod common;

use common::netns::{require_root_and_ip, rsskit, unique, wait_until, Netns, Proc};
use rsskit_core::{FlowTuple, HashType, L4Proto, RssKey, Toeplitz};
use serde_json::Value;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::time::Duration;

const QUEUES: usize = 4;
const SERVER: Ipv4Addr = Ipv4Addr::new(198, 19, 0, 1);
const CLIENT: Ipv4Addr = Ipv4Addr::new(198, 19, 0, 2);
const PORT: u16 = 9000;
const PER_FLOW: usize = 3;

struct Lab {
    server: Netns,
    client: Netns,
    vs: String,
    vc: String,
}

impl Lab {
    fn new() -> Lab {
        require_root_and_ip();
        let server = Netns::new("rsklv");
        let client = Netns::new("rsklc");
        let (vs, vc) = (unique("lvs"), unique("lvc"));
        // The client's end with QUEUES + 1 TX queues (see the module's comment).
        let (n, n1) = (QUEUES.to_string(), (QUEUES + 1).to_string());
        let st = std::process::Command::new("ip")
            .args(["link", "add", &vs, "numtxqueues", &n, "numrxqueues", &n, "netns", &server.name])
            .args(["type", "veth", "peer", "name", &vc, "numtxqueues", &n1, "numrxqueues", &n1])
            .args(["netns", &client.name])
            .status()
            .expect("running ip");
        assert!(st.success(), "ip link add (veth) failed");
        for (ns, dev, addr) in [(&server, &vs, SERVER), (&client, &vc, CLIENT)] {
            // No router solicitations, MLD or neighbour discovery on the wire.
            ns.sysctl("net.ipv6.conf.all.disable_ipv6", "1");
            ns.sysctl("net.ipv6.conf.default.disable_ipv6", "1");
            ns.ip(&["addr", "add", &format!("{addr}/24"), "dev", dev]);
            ns.ip(&["link", "set", dev, "up"]);
        }
        let mac = |ns: &Netns, dev: &str| ns.read(&format!("/sys/class/net/{dev}/address"));
        let (ms, mc) = (mac(&server, &vs), mac(&client, &vc));
        // Static neighbours: no ARP frames.
        client.ip(&["neigh", "replace", &SERVER.to_string(), "lladdr", &ms, "dev", &vc, "nud", "permanent"]);
        server.ip(&["neigh", "replace", &CLIENT.to_string(), "lladdr", &mc, "dev", &vs, "nud", "permanent"]);
        Lab { server, client, vs, vc }
    }

    /// Every CPU of the client sends on TX queue `q + 1` (XPS), so the
    /// server's veth receives those frames on its RX queue `q`.
    fn send_on_queue(&self, q: usize) {
        let online = rsskit_linux::cpulist::online();
        let all = rsskit_linux::netdev::format_hex_mask(&online);
        for t in 0..=QUEUES {
            let mask = if t == q + 1 { all.as_str() } else { "0" };
            self.client.write(&format!("/sys/class/net/{}/queues/tx-{t}/xps_cpus", self.vc), mask);
        }
    }

    /// Sends `PER_FLOW` datagrams from each source port in `ports`, from
    /// inside the client's namespace, on TX queue `q`.
    fn burst(&self, q: usize, ports: &[u16]) {
        self.send_on_queue(q);
        let ports = ports.to_vec();
        in_netns(&self.client, move || {
            let to = SocketAddr::new(IpAddr::V4(SERVER), PORT);
            for p in ports {
                let s =
                    UdpSocket::bind(SocketAddr::new(IpAddr::V4(CLIENT), p)).expect("binding a client port");
                for _ in 0..PER_FLOW {
                    s.send_to(b"check --live", to).expect("sending");
                }
            }
        })
        .join()
        .expect("the sender thread");
    }

    /// A UDP socket on the server's port in its namespace, counting the
    /// datagrams it receives until `want` came or 10 s passed.
    fn listen(&self, want: usize) -> std::thread::JoinHandle<usize> {
        let (tx, rx) = std::sync::mpsc::channel();
        let h = in_netns(&self.server, move || {
            let s =
                UdpSocket::bind(SocketAddr::new(IpAddr::V4(SERVER), PORT)).expect("binding the server port");
            s.set_read_timeout(Some(Duration::from_millis(100))).unwrap();
            tx.send(()).unwrap();
            let (mut got, t) = (0, std::time::Instant::now());
            let mut buf = [0u8; 64];
            while got < want && t.elapsed() < Duration::from_secs(10) {
                if s.recv(&mut buf).is_ok() {
                    got += 1;
                }
            }
            got
        });
        rx.recv().expect("the listener is bound");
        h
    }

    /// Starts `rsskit check --live --json ARGS` on the server's veth and
    /// waits until its capture is open.
    fn start_check(&self, tree: Option<&Tree>, args: &[&str]) -> Proc {
        let mut c = self.server.command(&rsskit());
        c.args(["check", "--live", "--iface", &self.vs, "--json"]).args(args);
        if let Some(t) = tree {
            c.env("RSSKIT_SYSROOT", &t.0);
        }
        let p = Proc::spawn(c);
        // Its packet sockets appear in the namespace's /proc/net/packet
        // (5 for 4 queues, see `qm_members`).
        let ready =
            wait_until(Duration::from_secs(20), || self.server.read("/proc/net/packet").lines().count() > 5);
        assert!(ready, "check --live did not open its capture within 20 s");
        // The rings are resumed right after the last socket joins.
        std::thread::sleep(Duration::from_millis(300));
        p
    }
}

/// Runs `f` on a thread inside namespace `ns` (its sockets are made there).
fn in_netns<T: Send + 'static>(
    ns: &Netns,
    f: impl FnOnce() -> T + Send + 'static,
) -> std::thread::JoinHandle<T> {
    let path = format!("/run/netns/{}", ns.name);
    std::thread::spawn(move || {
        let ns = std::fs::File::open(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        // SAFETY: setns moves this thread only, which ends after `f`; the
        // descriptor is open for the call.
        let rc = unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) };
        assert_eq!(rc, 0, "setns into {path}: {}", std::io::Error::last_os_error());
        f()
    })
}

/// A fixture tree whose fake driver reports `table` and a 4-tuple UDP
/// hash for `dev`, with its 4 RX queues in sysfs; removed on drop.
struct Tree(PathBuf);

impl Tree {
    fn new(dev: &str, table: &[u32]) -> Tree {
        let d = std::env::temp_dir().join(format!("rsskit-check-live-{}", unique("t")));
        for q in 0..QUEUES {
            std::fs::create_dir_all(d.join(format!("sys/class/net/{dev}/queues/rx-{q}"))).unwrap();
        }
        std::fs::create_dir_all(d.join("proc")).unwrap();
        std::fs::create_dir_all(d.join("ethtool")).unwrap();
        let key: String = RssKey::microsoft().as_bytes().iter().map(|b| format!("{b:02x}")).collect();
        let all4 = 0xf0; // RXH_IP_SRC | RXH_IP_DST | RXH_L4_B_0_1 | RXH_L4_B_2_3
        let fake = serde_json::json!({
            "driver": "veth",
            "combined": QUEUES,
            "rss": { "key": key, "table": table },
            "hash": { "tcp4": all4, "udp4": all4, "tcp6": all4, "udp6": all4 },
        });
        std::fs::write(d.join(format!("ethtool/{dev}.json")), fake.to_string()).unwrap();
        Tree(d)
    }
}

impl Drop for Tree {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The queue `table` predicts for the client's flow from `sport`
/// (computed here from the core's tuple input, not by the command).
fn predicted(table: &[u32], sport: u16) -> usize {
    let t = FlowTuple::new(IpAddr::V4(CLIENT), sport, IpAddr::V4(SERVER), PORT, L4Proto::Udp);
    let h = Toeplitz::new(&RssKey::microsoft()).hash(t.input(HashType::UdpIpv4).unwrap().as_bytes());
    table[h as usize % table.len()] as usize
}

fn finish(p: Proc) -> (i32, Value) {
    let out = p.wait(Duration::from_secs(60));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let v: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| {
        panic!(
            "check --live --json printed no JSON ({e}): {stdout}\nstderr: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code().expect("exited"), v)
}

fn per_queue(v: &Value) -> Vec<u64> {
    let mut seen = vec![0; QUEUES];
    for q in v["per_queue"].as_array().unwrap() {
        seen[q["queue"].as_u64().unwrap() as usize] = q["packets"].as_u64().unwrap();
    }
    seen
}

fn balanced(v: &Value) {
    let p = &v["packets"];
    let by: u64 = p["unchecked_by_reason"].as_object().unwrap().values().map(|x| x.as_u64().unwrap()).sum();
    assert_eq!(p["unchecked"].as_u64().unwrap(), by, "{p}");
    assert_eq!(
        p["seen"].as_u64().unwrap(),
        p["agreed"].as_u64().unwrap() + p["disagreed"].as_u64().unwrap() + by,
        "{p}"
    );
    assert_eq!(p["ring_drops"], 0, "a few hundred frames fit the rings: {p}");
}

#[test]
fn without_rss_every_frame_is_counted_on_its_queue_and_nothing_is_predicted() {
    let lab = Lab::new();
    // A bounded time, not a packet count: nothing beyond the bursts may arrive.
    let p = lab.start_check(None, &["--seconds", "3"]);
    // The capture only observes: a socket on the server still gets every datagram.
    let listener = lab.listen(10 * PER_FLOW);
    let mut want = [0u64; QUEUES];
    for (q, ports) in [(1, 20000..20005), (3, 20100..20103), (0, 20200..20202)] {
        let ports: Vec<u16> = ports.collect();
        lab.burst(q, &ports);
        want[q] += (ports.len() * PER_FLOW) as u64;
    }
    assert_eq!(listener.join().unwrap(), 10 * PER_FLOW, "the stack got every datagram");
    let (code, v) = finish(p);
    assert_eq!(code, 2, "no RSS: cannot verify: {v:#}");
    balanced(&v);
    let sent: u64 = want.iter().sum();
    assert_eq!(v["packets"]["seen"], sent, "exactly the bursts' frames: {v:#}");
    assert_eq!(v["packets"]["unchecked_by_reason"]["no_rss_table"], sent, "{v:#}");
    assert_eq!(per_queue(&v), want, "each frame on the queue it was sent to: {v:#}");
    assert_eq!(v["verdict"]["status"], "cannot_verify");
    let text = v["verdict"]["text"].as_str().unwrap();
    assert!(text.contains("reports no RSS indirection table"), "{text}");
    assert!(
        v["notes"][0].as_str().unwrap().contains("reports no RSS key or table"),
        "the driver's refusal is named: {v:#}"
    );
    assert_eq!(v["table_size"], 0);
    assert!(v["fields"].is_null(), "nothing predicted, no fields: {v:#}");
    assert_eq!(v["queues"], QUEUES);
}

#[test]
fn a_reported_table_is_followed_or_the_flows_off_it_are_named() {
    let lab = Lab::new();
    // An uneven table over all 4 queues.
    let table: Vec<u32> = (0..128u32).map(|i| [0, 1, 1, 2, 3, 3, 3, 0][i as usize % 8]).collect();
    let tree = Tree::new(&lab.vs, &table);
    let ports: Vec<u16> = (21000..21024).collect();
    let by_queue = |ports: &[u16], wrong: &[u16]| {
        let mut m: Vec<Vec<u16>> = vec![Vec::new(); QUEUES];
        for &p in ports {
            let q = predicted(&table, p);
            m[if wrong.contains(&p) { (q + 1) % QUEUES } else { q }].push(p);
        }
        m
    };
    let frames = (ports.len() * PER_FLOW).to_string();

    // Every flow on its predicted queue.
    let p = lab.start_check(Some(&tree), &["--seconds", "20", "--packets", &frames]);
    for (q, ps) in by_queue(&ports, &[]).iter().enumerate() {
        lab.burst(q, ps);
    }
    let (code, v) = finish(p);
    balanced(&v);
    assert_eq!(code, 0, "{v:#}");
    assert_eq!(v["verdict"]["status"], "follows");
    assert_eq!(v["fields"]["udp4"], "4-tuple", "{v:#}");
    assert_eq!(v["packets"]["agreed"], ports.len() * PER_FLOW, "{v:#}");
    assert_eq!((v["flows"]["checked"].as_u64(), v["flows"]["agreed"].as_u64()), (Some(24), Some(24)));
    assert!(v["disagreements"].as_array().unwrap().is_empty());
    assert_eq!(
        v["verdict"]["text"],
        format!(
            "{} follows its reported RSS table: 24 of 24 flows (72 packets) on the predicted queue",
            lab.vs
        )
    );

    // Five flows sent one queue further: exactly those are reported.
    let wrong = [21001, 21004, 21007, 21010, 21013];
    let p = lab.start_check(Some(&tree), &["--seconds", "20", "--packets", &frames]);
    for (q, ps) in by_queue(&ports, &wrong).iter().enumerate() {
        lab.burst(q, ps);
    }
    let (code, v) = finish(p);
    balanced(&v);
    assert_eq!(code, 1, "{v:#}");
    assert_eq!(v["verdict"]["status"], "does_not_follow");
    assert_eq!((v["flows"]["agreed"].as_u64(), v["flows"]["disagreed"].as_u64()), (Some(19), Some(5)));
    assert_eq!(v["packets"]["disagreed"], 5 * PER_FLOW, "{v:#}");
    let mut named: Vec<(u16, u64, u64)> = v["disagreements"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            let flow = d["flow"].as_str().unwrap();
            let sport = flow.split(['.', ':', ' ']).nth(5).unwrap().parse().unwrap();
            let observed = d["observed"].as_array().unwrap();
            assert_eq!(observed.len(), 1, "{d}");
            (sport, d["predicted_queue"].as_u64().unwrap(), observed[0]["queue"].as_u64().unwrap())
        })
        .collect();
    named.sort();
    let want: Vec<(u16, u64, u64)> = wrong
        .iter()
        .map(|&p| {
            let q = predicted(&table, p) as u64;
            (p, q, (q + 1) % QUEUES as u64)
        })
        .collect();
    assert_eq!(named, want, "{v:#}");
    let text = v["verdict"]["text"].as_str().unwrap();
    assert!(
        text.contains("does not follow its reported RSS table: 19 of 24 flows on the predicted queue"),
        "{text}"
    );
}

#[test]
fn bad_requests_get_a_clear_error() {
    require_root_and_ip();
    let run = |pre: &[&str], args: &[&str]| {
        let mut c = if pre.is_empty() {
            std::process::Command::new(rsskit())
        } else {
            let mut c = std::process::Command::new(pre[0]);
            c.args(&pre[1..]).arg(rsskit());
            c
        };
        let out = c.args(args).output().expect("running rsskit");
        (out.status.code(), String::from_utf8_lossy(&out.stderr).to_string())
    };
    let (code, err) = run(&[], &["check", "--live", "--iface", "nosuchif0q", "--seconds", "1"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("interface 'nosuchif0q' does not exist"), "{err}");
    let (code, err) = run(&[], &["check", "--seconds", "1"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--live"), "--seconds belongs to --live: {err}");
    // Not root: the capture cannot open, and the error says why.
    let nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"];
    let (code, err) = run(&nobody, &["check", "--live", "--iface", "lo", "--seconds", "1"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("need CAP_NET_RAW: run it as root"), "{err}");
}

#[test]
fn sigint_stops_early_and_still_reports() {
    let lab = Lab::new();
    let p = lab.start_check(None, &["--seconds", "120"]);
    lab.burst(2, &[22000, 22001]);
    // Frames reach the rings' blocks within their 2 ms timeout.
    std::thread::sleep(Duration::from_millis(200));
    let t = std::time::Instant::now();
    p.signal(libc::SIGINT);
    let (code, v) = finish(p);
    assert!(t.elapsed() < Duration::from_secs(30), "SIGINT ends the check");
    assert_eq!(code, 2, "{v:#}");
    balanced(&v);
    assert_eq!(v["packets"]["seen"], 2 * PER_FLOW, "{v:#}");
    assert_eq!(per_queue(&v), [0, 0, 2 * PER_FLOW as u64, 0]);
    assert!(v["seconds"].as_f64().unwrap() < 60.0, "{v:#}");
    assert!(
        v["notes"].as_array().unwrap().iter().any(|n| n.as_str().unwrap().starts_with("interrupted after")),
        "{v:#}"
    );
}
