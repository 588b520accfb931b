//! The examples, built and run: real per-CPU servers on loopback, driven
//! by flows whose owner the test computes itself from the policy.

use rsskit_app::{online_cpus, CpuId, FlowTuple, HashConfig, L4Proto, RssKey, RssPolicy, WorkerId};
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// Builds the examples with this test's profile (a no-op when up to date)
/// and returns one's path.
fn example(name: &str) -> PathBuf {
    let mut dir = std::env::current_exe().unwrap();
    dir.pop(); // the test binary
    if dir.ends_with("deps") {
        dir.pop();
    }
    let profile = dir.file_name().unwrap().to_string_lossy().into_owned();
    let profile = if profile == "debug" { "dev".to_string() } else { profile };
    let st = Command::new(env!("CARGO"))
        .args(["build", "-q", "-p", "rsskit-app", "--examples", "--profile", &profile])
        .status()
        .expect("running cargo");
    assert!(st.success(), "building the examples failed");
    dir.join("examples").join(name)
}

/// A running example, killed on drop.
struct Server {
    child: Child,
    addr: SocketAddr,
}

impl Server {
    fn start(name: &str, bind: &str, mode: &str) -> Server {
        let mut child = Command::new(example(name))
            .args([bind, mode])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("starting the example");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let addr = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .parse()
            .unwrap();
        Server { child, addr }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `key=value` pairs of a reply's stamp.
fn stamp(s: &str) -> HashMap<String, String> {
    s.split_whitespace().filter_map(|kv| kv.split_once('=')).map(|(k, v)| (k.into(), v.into())).collect()
}

fn policy(udp4: bool) -> RssPolicy {
    let cpus: Vec<CpuId> = online_cpus().into_iter().map(|c| CpuId(c as u32)).collect();
    RssPolicy::new(RssKey::microsoft(), HashConfig::default().with_udp_4tuple(udp4), &cpus, None).unwrap()
}

/// Checks one reply against the test's own policy: the owner, bucket and
/// hash it computes for the flow, and the mode's promise (toeplitz: the
/// owner serves it; cpu: the worker runs on the CPU that processed it).
fn check(st: &HashMap<String, String>, p: &RssPolicy, flow: &FlowTuple, mode: &str) {
    let hash = p.hash_tuple(flow);
    let owner = p.worker_of_hash(hash);
    assert_eq!(st["hash"], format!("{hash:08x}"), "{st:?}");
    assert_eq!(st["bucket"], p.bucket(hash).to_string(), "{st:?}");
    assert_eq!(st["owner"], owner.0.to_string(), "{st:?}");
    let worker: u32 = st["worker"].parse().unwrap();
    assert_eq!(st["cpu"], p.cpu_of(WorkerId(worker)).unwrap().0.to_string(), "{st:?}");
    match mode {
        "toeplitz" => {
            assert_eq!(worker, owner.0, "served by the bucket's owner: {st:?}");
            assert_eq!(st["misdirected"], "false");
        }
        "cpu" => assert_eq!(st["kernel_cpu"], st["cpu"], "served on the CPU that processed it: {st:?}"),
        _ => {}
    }
}

fn udp_flows(bind: &str, mode: &str) {
    let server = Server::start("udp_echo", bind, mode);
    let p = policy(true);
    let mut workers_seen = std::collections::BTreeSet::new();
    for i in 0..24 {
        let c = UdpSocket::bind(SocketAddr::new(server.addr.ip(), 0)).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let msg = format!("ping-{i}");
        c.send_to(msg.as_bytes(), server.addr).unwrap();
        let mut buf = [0u8; 2048];
        let (n, from) = c.recv_from(&mut buf).expect("an echo within 10 s");
        assert_eq!(from, server.addr);
        let reply = std::str::from_utf8(&buf[..n]).unwrap();
        let (payload, rest) = reply.split_once('|').expect("payload|stamp");
        assert_eq!(payload, msg);
        let st = stamp(rest);
        let local = c.local_addr().unwrap();
        let flow =
            FlowTuple::new(local.ip(), local.port(), server.addr.ip(), server.addr.port(), L4Proto::Udp);
        check(&st, &p, &flow, mode);
        workers_seen.insert(st["worker"].clone());
    }
    if mode == "toeplitz" && p.workers() > 1 {
        assert!(workers_seen.len() > 1, "24 flows all on one worker: {workers_seen:?}");
    }
}

#[test]
fn udp_echo_toeplitz_ipv4() {
    udp_flows("127.0.0.1:0", "toeplitz");
}

#[test]
fn udp_echo_toeplitz_ipv6() {
    udp_flows("[::1]:0", "toeplitz");
}

#[test]
fn udp_echo_cpu() {
    udp_flows("127.0.0.1:0", "cpu");
}

fn tcp_flows(bind: &str, mode: &str) {
    let server = Server::start("tcp_server", bind, mode);
    let p = policy(false);
    for i in 0..16 {
        let mut c = TcpStream::connect(server.addr).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        writeln!(c, "hello-{i}").unwrap();
        let mut reply = String::new();
        c.read_to_string(&mut reply).expect("a reply within 10 s");
        let (payload, rest) = reply.trim_end().split_once('|').expect("line|stamp");
        assert_eq!(payload, format!("hello-{i}"));
        let local = c.local_addr().unwrap();
        let flow =
            FlowTuple::new(local.ip(), local.port(), server.addr.ip(), server.addr.port(), L4Proto::Tcp);
        check(&stamp(rest), &p, &flow, mode);
    }
}

#[test]
fn tcp_server_toeplitz_ipv4() {
    tcp_flows("127.0.0.1:0", "toeplitz");
}

#[test]
fn tcp_server_toeplitz_ipv6() {
    tcp_flows("[::1]:0", "toeplitz");
}

#[test]
fn tcp_server_cpu() {
    tcp_flows("127.0.0.1:0", "cpu");
}

#[test]
fn examples_refuse_bad_arguments() {
    for (name, args) in [("udp_echo", ["nowhere", "cpu"]), ("tcp_server", ["127.0.0.1:0", "rss"])] {
        let out = Command::new(example(name)).args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{name} {args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("error:") && (err.contains("nowhere") || err.contains("rss")), "{err}");
    }
}
