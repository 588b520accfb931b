//! `rsskit steer` and `rsskit run` on real nginx (Debian's): `worker_processes
//! 2; worker_cpu_affinity auto; listen ... reuseport;` with the worker's pid in
//! an `X-Pid` response header, checked per connection from the client side,
//! for IPv4 and IPv6:
//! - `--steer cpu`: a client thread pinned to CPU c (loopback processes the
//!   SYN on the sending CPU) is always answered by the worker pinned to c;
//! - `--steer toeplitz`: source ports chosen by the tuple finder for each
//!   bucket b are answered by the worker pinned (per /proc) to the (b mod
//!   n)-th CPU, as `rsskit find --cpu` counts; rsskit builds the bucket ->
//!   socket table from the socket order it measured, so this fails if that
//!   order is wrong.

mod common;

use common::netns::rsskit;
use common::steer::steer;
use rsskit_core::finder::find_src_ports;
use rsskit_core::{CpuId, FlowTuple, HashConfig, L4Proto, RssKey, RssPolicy, WorkerId};
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const CONNS: usize = 12;

#[derive(Clone, Copy)]
struct Conf {
    affinity: bool,
    reuseport: bool,
    /// Started through `rsskit run --steer cpu`.
    via_run: bool,
}

const STEERED: Conf = Conf { affinity: true, reuseport: true, via_run: false };

/// nginx (or `rsskit run -- nginx`) in its own process group, killed on drop.
struct Nginx {
    child: Child,
    dir: PathBuf,
    port: u16,
    master: i32,
}

fn nginx_bin() -> PathBuf {
    ["/usr/sbin/nginx", "/usr/local/sbin/nginx", "/usr/bin/nginx"]
        .into_iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
        .expect("nginx is not installed: `apt-get install -y nginx` (these tests need it)")
}

fn cpus() -> Vec<usize> {
    rsskit_linux::cpulist::online()
}

/// Children of `pid` (`/proc/PID/task/PID/children`).
fn children(pid: i32) -> Vec<i32> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .unwrap_or_default()
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect()
}

/// `Cpus_allowed_list` of `pid`.
fn allowed(pid: i32) -> String {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    s.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:")).unwrap_or("").trim().to_string()
}

impl Nginx {
    fn start(c: Conf, tag: &str) -> Nginx {
        let dir = std::env::temp_dir().join(format!("rsskit-steer-nginx-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let d = dir.display();
        let rp = if c.reuseport { " reuseport" } else { "" };
        let aff = if c.affinity { "worker_cpu_affinity auto;\n" } else { "" };
        let conf = format!(
            "daemon off;\nworker_processes 2;\n{aff}pid {d}/nginx.pid;\nerror_log {d}/error.log;\n\
             events {{ worker_connections 1024; }}\n\
             http {{\n access_log off;\n client_body_temp_path {d}/tmp-body;\n proxy_temp_path {d}/tmp-proxy;\n\
             fastcgi_temp_path {d}/tmp-fcgi;\n uwsgi_temp_path {d}/tmp-uwsgi;\n scgi_temp_path {d}/tmp-scgi;\n\
             server {{\n  listen 127.0.0.1:{port}{rp};\n  listen [::1]:{port}{rp};\n\
             location / {{ add_header X-Pid $pid always; return 200 \"ok\\n\"; }}\n }}\n}}\n"
        );
        std::fs::write(dir.join("nginx.conf"), conf).unwrap();
        let bin = nginx_bin();
        let ng_args = [
            "-p".to_string(),
            format!("{d}/"),
            "-e".into(),
            format!("{d}/error.log"),
            "-c".into(),
            format!("{d}/nginx.conf"),
        ];
        let mut cmd = if c.via_run {
            let mut r = Command::new(rsskit());
            r.args(["run", "--port", &port.to_string(), "--steer", "cpu", "--"]).arg(&bin).args(&ng_args);
            r
        } else {
            let mut r = Command::new(&bin);
            r.args(&ng_args);
            r
        };
        let child = cmd
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .process_group(0)
            .spawn()
            .expect("starting nginx");
        let mut ng = Nginx { master: child.id() as i32, child, dir, port };
        if c.via_run {
            // rsskit run's child is the master.
            let t = Instant::now();
            ng.master = loop {
                if let Some(&m) = children(ng.child.id() as i32).first() {
                    break m;
                }
                assert!(t.elapsed() < Duration::from_secs(10), "rsskit run started no nginx");
                std::thread::sleep(Duration::from_millis(20));
            };
        }
        // Up: both families answer, two workers (pinned if configured).
        let t = Instant::now();
        loop {
            if let Some(st) = ng.child.try_wait().unwrap() {
                let mut err = String::new();
                ng.child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
                let log = std::fs::read_to_string(ng.dir.join("error.log")).unwrap_or_default();
                panic!("nginx exited ({st}): {err} {log}");
            }
            let w = children(ng.master);
            let pinned = w.iter().all(|&p| !allowed(p).contains([',', '-']));
            if w.len() == 2
                && (pinned || !c.affinity)
                && TcpStream::connect(("127.0.0.1", port)).is_ok()
                && TcpStream::connect(("::1", port)).is_ok()
            {
                break;
            }
            assert!(t.elapsed() < Duration::from_secs(10), "nginx did not come up on port {port}");
            std::thread::sleep(Duration::from_millis(20));
        }
        ng
    }

    /// The worker pinned to `cpu`, from /proc (not from rsskit).
    fn worker_on(&self, cpu: usize) -> u32 {
        let w: Vec<i32> =
            children(self.master).into_iter().filter(|&p| allowed(p) == cpu.to_string()).collect();
        assert_eq!(w.len(), 1, "workers pinned to CPU {cpu}: {w:?}");
        w[0] as u32
    }

    fn addr(&self, v6: bool) -> SocketAddr {
        SocketAddr::new(if v6 { "::1".parse().unwrap() } else { "127.0.0.1".parse().unwrap() }, self.port)
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        common::proc::stop_group(&mut self.child);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// One request on a fresh connection (from `src` if given): the X-Pid header.
fn x_pid(dst: SocketAddr, src: Option<SocketAddr>) -> u32 {
    let mut s: TcpStream = match src {
        None => TcpStream::connect_timeout(&dst, Duration::from_secs(5)).unwrap(),
        Some(src) => {
            let sock =
                socket2::Socket::new(socket2::Domain::for_address(dst), socket2::Type::STREAM, None).unwrap();
            sock.set_reuse_address(true).unwrap();
            sock.bind(&src.into()).unwrap_or_else(|e| panic!("binding {src}: {e}"));
            sock.connect_timeout(&dst.into(), Duration::from_secs(5)).unwrap();
            sock.into()
        }
    };
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(b"GET / HTTP/1.0\r\nHost: x\r\n\r\n").unwrap();
    let mut r = String::new();
    s.read_to_string(&mut r).unwrap();
    let v = r.lines().find_map(|l| l.strip_prefix("X-Pid: ")).unwrap_or_else(|| panic!("no X-Pid in {r:?}"));
    v.trim().parse().unwrap()
}

/// Per CPU, CONNS connections from a thread pinned there: (connections,
/// those answered by the worker pinned to the same CPU).
fn locality(ng: &Nginx, v6: bool) -> (usize, usize) {
    let dst = ng.addr(v6);
    common::steer::locality(&cpus(), CONNS, |cpu| ng.worker_on(cpu), || {}, move || x_pid(dst, None))
}

fn need_two_cpus() {
    assert_eq!(cpus().len(), 2, "these tests use nginx with 2 workers and need exactly 2 online CPUs");
}

#[test]
fn cpu_steering_ipv4_and_ipv6() {
    need_two_cpus();
    let ng = Nginx::start(STEERED, "cpu");
    // The kernel's hash first: the check can fail (2^-24 odds of all local by chance).
    let (n, local) = locality(&ng, false);
    assert!(local < n, "all {n} connections local before steering: the check proves nothing");
    let out = steer(&["--pid", &ng.master.to_string(), "--port", &ng.port.to_string()]);
    assert!(out.status.success(), "steer: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains(&format!("tcp 127.0.0.1:{}: 2 sockets, steer cpu", ng.port)), "{text}");
    assert!(text.contains(&format!("tcp [::1]:{}: 2 sockets, steer cpu", ng.port)), "{text}");
    for v6 in [false, true] {
        let (n, local) = locality(&ng, v6);
        assert_eq!(local, n, "ipv6={v6}: {local}/{n} connections accepted by the worker of the SYN's CPU");
    }
    let out = steer(&["--pid", &ng.master.to_string(), "--port", &ng.port.to_string(), "--detach"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let (n, local) = locality(&ng, false);
    assert!(local < n, "still all {n} connections local after --detach");
}

#[test]
fn toeplitz_steering_with_finder_ports() {
    need_two_cpus();
    let ng = Nginx::start(STEERED, "toeplitz");
    let out =
        steer(&["--pid", &ng.master.to_string(), "--port", &ng.port.to_string(), "--steer", "toeplitz"]);
    assert!(out.status.success(), "steer: {}", String::from_utf8_lossy(&out.stderr));
    // Bucket b -> CPU b mod 2 (`rsskit find` counting), whichever socket serves it.
    let policy =
        RssPolicy::new(RssKey::microsoft(), HashConfig::default(), &[CpuId(0), CpuId(1)], None).unwrap();
    for v6 in [false, true] {
        let dst = ng.addr(v6);
        let src: IpAddr = dst.ip();
        let ht = policy.hash_type(v6, L4Proto::Tcp, false);
        let mut checked = 0;
        for bucket in 0..policy.buckets() {
            let ports = find_src_ports(
                policy.key(),
                ht,
                src,
                dst.ip(),
                dst.port(),
                20000..=60999,
                policy.mask(),
                bucket,
                4,
            )
            .unwrap();
            for f in ports {
                let sport = f.src_port;
                let t = FlowTuple::new(src, sport, dst.ip(), dst.port(), L4Proto::Tcp);
                let w: WorkerId = policy.worker_of(&t);
                assert_eq!(policy.bucket(policy.hash_tuple(&t)), bucket);
                let want = ng.worker_on(policy.cpu_of(w).unwrap().as_usize());
                let got = x_pid(dst, Some(SocketAddr::new(src, sport)));
                assert_eq!(
                    got, want,
                    "ipv6={v6} source port {sport} (bucket {bucket}, {w}) answered by {got}"
                );
                checked += 1;
            }
        }
        assert!(checked >= 8, "only {checked} flows checked");
    }
}

#[test]
fn unpinned_workers_are_refused_with_the_fix() {
    let ng = Nginx::start(Conf { affinity: false, ..STEERED }, "unpinned");
    let out = steer(&["--pid", &ng.master.to_string(), "--port", &ng.port.to_string()]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("is not pinned to one CPU") && err.contains("worker_cpu_affinity auto"), "{err}");
}

#[test]
fn shared_listener_is_not_a_reuseport_group() {
    let ng = Nginx::start(Conf { reuseport: false, ..STEERED }, "noreuseport");
    let out = steer(&["--pid", &ng.master.to_string(), "--port", &ng.port.to_string()]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("not a reuseport group") && err.contains("reuseport;"), "{err}");
    // Without --port: such listeners are skipped (said so), and nothing is left to steer.
    let out = steer(&["--pid", &ng.master.to_string()]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("rsskit: skipping tcp 127.0.0.1:") && err.contains("have no SO_REUSEPORT group"),
        "{err}"
    );
}

#[test]
fn run_steers_nginx_it_starts() {
    need_two_cpus();
    let mut ng = Nginx::start(Conf { via_run: true, ..STEERED }, "run");
    // rsskit run steers once the group is complete: wait for its report.
    let mut err = ng.child.stderr.take().unwrap();
    let t = Instant::now();
    let mut seen = String::new();
    let mut buf = [0u8; 4096];
    while !seen.contains("socket 1") {
        let n = err.read(&mut buf).unwrap();
        assert!(n > 0 && t.elapsed() < Duration::from_secs(30), "rsskit run said: {seen}");
        seen.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
    for v6 in [false, true] {
        let (n, local) = locality(&ng, v6);
        assert_eq!(local, n, "ipv6={v6}: {local}/{n} local under rsskit run");
    }
    // A reload (SIGHUP, forwarded to nginx): new workers, steered again.
    let old = children(ng.master);
    // SAFETY: signalling our own child.
    unsafe { libc::kill(ng.child.id() as i32, libc::SIGHUP) };
    let from = seen.len();
    // The report after "steered again" ends with socket 1 of both groups (IPv4, IPv6).
    while !seen[from..].contains("steered again") || seen[from..].matches("  socket 1 ").count() < 2 {
        let n = err.read(&mut buf).unwrap();
        assert!(n > 0 && t.elapsed() < Duration::from_secs(60), "rsskit run said: {seen}");
        seen.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
    let t2 = Instant::now();
    loop {
        let now = children(ng.master);
        if now.len() == 2 && now.iter().all(|p| !old.contains(p)) {
            break;
        }
        assert!(t2.elapsed() < Duration::from_secs(20), "old workers {old:?} still there: {now:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
    let (n, local) = locality(&ng, false);
    assert_eq!(local, n, "{local}/{n} local after the reload");
    // SIGTERM to rsskit run reaches nginx; both exit.
    // SAFETY: signalling our own child.
    unsafe { libc::kill(ng.child.id() as i32, libc::SIGTERM) };
    let t = Instant::now();
    let st = loop {
        if let Some(st) = ng.child.try_wait().unwrap() {
            break st;
        }
        assert!(t.elapsed() < Duration::from_secs(10), "rsskit run did not exit after SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(st.success(), "rsskit run exit: {st} ({seen})");
    assert!(
        !std::path::Path::new(&format!("/proc/{}", ng.master)).exists() || children(ng.master).is_empty()
    );
}
