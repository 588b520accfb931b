//! `rsskit steer` on a reuseport server that is not rsskit
//! (`fixtures/reuseport_server.py`, TCP and UDP, IPv4 and IPv6) whose group
//! order is the reverse of its sockets' creation, fd, inode, worker and CPU
//! order: steering built on any of those assumptions sends every flow to
//! the wrong worker, so these tests check rsskit measured the order.

mod common;

use common::netns::rsskit;
use common::steer::steer;
use std::io::{BufRead, BufReader, Read};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const CONNS: usize = 12;

/// The fixture, in its own process group (killed on drop); worker pid per CPU.
struct Fixture {
    child: Child,
    addr: SocketAddr,
    /// (pid, CPU) per worker, as the workers report them.
    workers: Vec<(u32, usize)>,
}

fn cpus() -> Vec<usize> {
    rsskit_linux::cpulist::online()
}

impl Fixture {
    fn start(proto: &str, ip: &str) -> Fixture {
        Fixture::start_in(proto, ip, None)
    }

    /// In network namespace `ns` (`ip netns exec` keeps the pid).
    fn start_in(proto: &str, ip: &str, ns: Option<&str>) -> Fixture {
        let port = std::net::TcpListener::bind(format!("{ip}:0").replace("::1:0", "[::1]:0"))
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let addr = SocketAddr::new(ip.parse().unwrap(), port);
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/reuseport_server.py");
        let cpu_args: Vec<String> = cpus().iter().map(|c| c.to_string()).collect();
        let mut cmd = match ns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns, "python3"]);
                c
            }
            None => Command::new("python3"),
        };
        let mut child = cmd
            .arg(script)
            .args([proto, ip, &port.to_string()])
            .args(&cpu_args)
            .stdout(Stdio::piped())
            .process_group(0)
            .spawn()
            .expect("python3 is needed for these tests (the non-rsskit reuseport server)");
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut fx = Fixture { child, addr, workers: Vec::new() };
        for _ in &cpu_args {
            let mut l = String::new();
            out.read_line(&mut l).unwrap();
            let f: Vec<&str> = l.split_whitespace().collect();
            assert_eq!(f.first(), Some(&"ready"), "fixture said {l:?}");
            fx.workers.push((f[1].parse().unwrap(), f[2].parse().unwrap()));
        }
        fx
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn worker_on(&self, cpu: usize) -> u32 {
        self.workers.iter().find(|w| w.1 == cpu).unwrap().0
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        // SAFETY: signalling the process group we created for the fixture.
        unsafe { libc::kill(-(self.child.id() as i32), libc::SIGKILL) };
        let _ = self.child.wait();
    }
}

/// One flow from a fresh socket: the pid of the worker that answered.
fn ask(proto: &str, addr: SocketAddr) -> u32 {
    let mut reply = String::new();
    if proto == "tcp" {
        let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.read_to_string(&mut reply).unwrap();
    } else {
        let s = UdpSocket::bind(if addr.is_ipv4() { "127.0.0.1:0" } else { "[::1]:0" }).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.send_to(b"hi", addr).unwrap();
        let mut buf = [0u8; 64];
        let n = s.recv(&mut buf).expect("no reply from the fixture within 5 s");
        reply = String::from_utf8_lossy(&buf[..n]).into();
    }
    reply.trim().parse().unwrap_or_else(|_| panic!("reply {reply:?}"))
}

/// From a thread pinned to each CPU, CONNS flows; (flows, those answered by
/// the worker pinned to the sending CPU).
fn locality(fx: &Fixture, proto: &'static str) -> (usize, usize) {
    locality_in(fx, proto, false)
}

/// As [`locality`], from the fixture's network namespace if `netns`.
fn locality_in(fx: &Fixture, proto: &'static str, netns: bool) -> (usize, usize) {
    let (addr, pid) = (fx.addr, fx.pid() as i32);
    let enter = move || {
        if netns {
            rsskit_linux::procnet::enter_netns_of(pid).unwrap();
        }
    };
    common::steer::locality(&cpus(), CONNS, |cpu| fx.worker_on(cpu), enter, move || ask(proto, addr))
}

fn cpu_steering(proto: &'static str, ip: &str) {
    if cpus().len() < 2 {
        panic!("this test needs at least 2 online CPUs");
    }
    let fx = Fixture::start(proto, ip);
    // The kernel's hash first: the check can fail (2^-24 odds of all local by chance with 2 CPUs).
    let (n, local) = locality(&fx, proto);
    assert!(local < n, "{proto} {ip}: all {n} flows local before steering: the check proves nothing");
    let pid = fx.pid().to_string();
    let port = fx.addr.port().to_string();
    let out = steer(&["--pid", &pid, "--port", &port, "--proto", proto, "--json"]);
    assert!(out.status.success(), "steer failed: {}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let socks = v["groups"][0]["sockets"].as_array().unwrap().clone();
    // Socket 0 joined the group last-created: it is served by the worker of the last CPU argument.
    let last_cpu = *cpus().last().unwrap();
    assert_eq!(socks[0]["cpu"], last_cpu, "{proto} {ip}: measured order {socks:?}");
    assert_eq!(socks[0]["pid"], fx.worker_on(last_cpu), "{proto} {ip}: {socks:?}");
    assert!(socks.iter().all(|s| s["cookie"].as_u64().is_some_and(|c| c > 0)), "{socks:?}");
    assert_ne!(socks[0]["cookie"], socks[1]["cookie"]);
    let (n, local) = locality(&fx, proto);
    assert_eq!(local, n, "{proto} {ip}: {local}/{n} flows reached the worker of their CPU after steering");
    // Detach: the kernel's hash again.
    let out = steer(&["--pid", &pid, "--port", &port, "--proto", proto, "--detach"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("program detached"));
    let (n, local) = locality(&fx, proto);
    assert!(local < n, "{proto} {ip}: still all {n} flows local after --detach");
}

#[test]
fn udp_ipv4_reverse_join_order() {
    cpu_steering("udp", "127.0.0.1");
}

#[test]
fn udp_ipv6_reverse_join_order() {
    cpu_steering("udp", "::1");
}

#[test]
fn tcp_ipv4_reverse_join_order() {
    cpu_steering("tcp", "127.0.0.1");
}

#[test]
fn unpinned_workers_are_refused() {
    let fx = Fixture::start("udp", "127.0.0.1");
    let all = rsskit_linux::cpulist::format(&cpus());
    let w = fx.workers[0].0.to_string();
    let st = Command::new("taskset").args(["-a", "-p", "-c", &all, &w]).output().expect("taskset");
    assert!(st.status.success());
    let out = steer(&["--pid", &fx.pid().to_string(), "--port", &fx.addr.port().to_string()]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("worker {w} is not pinned to one CPU")) && err.contains("taskset"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
}

#[test]
fn bad_pid_and_port_are_refused() {
    // Past the largest pid the kernel can give: refused at parse time.
    let out = steer(&["--pid", "999999999"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("range 1-4194304"));
    let out = steer(&["--pid", "4194000"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("process 4194000 does not exist"));
    let fx = Fixture::start("udp", "127.0.0.1");
    let out = steer(&["--pid", &fx.pid().to_string(), "--port", "1"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("hold no listening TCP or bound UDP socket on port 1")
    );
    let out = steer(&["--pid", &fx.pid().to_string(), "--workers", "7"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--workers says 7"));
    // The group still answers (no probe program left behind).
    let t = Instant::now();
    assert!(ask("udp", fx.addr) > 0 && t.elapsed() < Duration::from_secs(5));
}

#[test]
fn tcp_ipv6_reverse_join_order() {
    cpu_steering("tcp", "::1");
}

/// `--steer toeplitz` over the reversed group: finder-chosen source ports
/// of bucket b are answered by the worker of the (b mod n)-th CPU.
#[test]
fn tcp_toeplitz_reverse_join_order() {
    use rsskit_core::{CpuId, FlowTuple, HashConfig, L4Proto, RssKey, RssPolicy};
    let fx = Fixture::start("tcp", "127.0.0.1");
    let out = steer(&[
        "--pid",
        &fx.pid().to_string(),
        "--port",
        &fx.addr.port().to_string(),
        "--steer",
        "toeplitz",
    ]);
    assert!(out.status.success(), "steer failed: {}", String::from_utf8_lossy(&out.stderr));
    let cpu_ids: Vec<CpuId> = cpus().iter().map(|&c| CpuId(c as u32)).collect();
    let policy = RssPolicy::new(RssKey::microsoft(), HashConfig::default(), &cpu_ids, None).unwrap();
    let ip = fx.addr.ip();
    let ht = policy.hash_type(false, L4Proto::Tcp, false);
    let mut checked = 0;
    for bucket in 0..policy.buckets() {
        let found = rsskit_core::finder::TupleQuery::new(policy.key(), ht, ip, 0, ip, fx.addr.port())
            .vary(rsskit_core::finder::Vary::SrcPort(20000..=60999))
            .bucket(policy.mask(), bucket)
            .max(3)
            .find()
            .unwrap();
        for f in found {
            let t = FlowTuple::new(ip, f.src_port, ip, fx.addr.port(), L4Proto::Tcp);
            let want = fx.worker_on(policy.cpu_of(policy.worker_of(&t)).unwrap().as_usize());
            let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
            sock.set_reuse_address(true).unwrap();
            sock.bind(&SocketAddr::new(ip, f.src_port).into()).unwrap();
            sock.connect_timeout(&fx.addr.into(), Duration::from_secs(5)).unwrap();
            let mut s: TcpStream = sock.into();
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let mut reply = String::new();
            s.read_to_string(&mut reply).unwrap();
            assert_eq!(reply.trim(), want.to_string(), "source port {} (bucket {bucket})", f.src_port);
            checked += 1;
        }
    }
    assert!(checked >= 6, "only {checked} flows checked");
}

fn run(args: &[&str]) -> std::process::Output {
    Command::new(rsskit()).arg("run").args(args).output().unwrap()
}

#[test]
fn run_refuses_clearly() {
    let out = run(&["--port", "1", "--", "/nonexistent/server"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("starting \"/nonexistent/server\""));
    let out = run(&["--port", "1", "--", "false"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("false exited (exit status: 1) before its reuseport group was complete"), "{err}");
    // A server that never opens the port: given up after --timeout, and stopped.
    let t = Instant::now();
    let out = run(&["--port", "1", "--timeout", "1", "--", "sleep", "30"]);
    assert!(!out.status.success());
    assert!(t.elapsed() < Duration::from_secs(20), "the server was not stopped");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("not ready within 1s, server stopped") && err.contains("on port 1"), "{err}");
    let out = run(&["--port", "1", "--timeout", "0", "--", "true"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("is not a number of seconds above 0"));
}

/// A server in another network namespace: rsskit sends its probes from
/// inside it (setns on the probe thread).
#[test]
fn udp_in_another_netns() {
    common::netns::require_root_and_ip();
    let ns = common::netns::Netns::new("rssteer");
    let fx = Fixture::start_in("udp", "127.0.0.1", Some(&ns.name));
    let (n, local) = locality_in(&fx, "udp", true);
    assert!(local < n, "all {n} flows local before steering: the check proves nothing");
    let out = steer(&["--pid", &fx.pid().to_string(), "--port", &fx.addr.port().to_string()]);
    assert!(out.status.success(), "steer failed: {}", String::from_utf8_lossy(&out.stderr));
    let (n, local) = locality_in(&fx, "udp", true);
    assert_eq!(local, n, "{local}/{n} flows reached the worker of their CPU after steering");
}
