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
use rsskit_core::finder::{TupleQuery, Vary};
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
    /// Without `daemon off;`: nginx goes to the background (the master
    /// is then known by its pid file).
    daemon: bool,
    /// The IPv6 listener without `reuseport` (one socket shared by the workers).
    v6_shared: bool,
}

const STEERED: Conf =
    Conf { affinity: true, reuseport: true, via_run: false, daemon: false, v6_shared: false };

/// nginx (or `rsskit run -- nginx`) in its own process group, killed on drop.
struct Nginx {
    child: Child,
    dir: PathBuf,
    port: u16,
    master: i32,
    daemon: bool,
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
        let rp6 = if c.v6_shared { "" } else { rp };
        let aff = if c.affinity { "worker_cpu_affinity auto;\n" } else { "" };
        let daemon = if c.daemon { "" } else { "daemon off;\n" };
        let conf = format!(
            "{daemon}worker_processes 2;\n{aff}pid {d}/nginx.pid;\nerror_log {d}/error.log;\n\
             events {{ worker_connections 1024; }}\n\
             http {{\n access_log off;\n client_body_temp_path {d}/tmp-body;\n proxy_temp_path {d}/tmp-proxy;\n\
             fastcgi_temp_path {d}/tmp-fcgi;\n uwsgi_temp_path {d}/tmp-uwsgi;\n scgi_temp_path {d}/tmp-scgi;\n\
             server {{\n  listen 127.0.0.1:{port}{rp};\n  listen [::1]:{port}{rp6};\n\
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
        let mut ng = Nginx { master: child.id() as i32, child, dir, port, daemon: c.daemon };
        if c.daemon {
            // The daemon writes its pid file once it runs in the background.
            let t = Instant::now();
            ng.master = loop {
                let pid = std::fs::read_to_string(ng.dir.join("nginx.pid"))
                    .ok()
                    .and_then(|p| p.trim().parse().ok());
                if let Some(p) = pid.filter(|&p: &i32| rsskit_linux::procnet::exists(p)) {
                    break p;
                }
                assert!(t.elapsed() < Duration::from_secs(10), "nginx wrote no pid file");
                std::thread::sleep(Duration::from_millis(20));
            };
        } else if c.via_run {
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
            if let Some(st) = ng.child.try_wait().unwrap().filter(|_| !c.daemon || c.via_run) {
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
        if self.daemon {
            // It left our process group (setsid): its master and workers by pid.
            let left = || [vec![self.master], children(self.master)].concat();
            let pids = left();
            let gone = || {
                !std::fs::read_to_string(format!("/proc/{}/stat", self.master))
                    .is_ok_and(|s| !s.contains(") Z"))
            };
            // SAFETY: signalling the nginx master this test started.
            unsafe { libc::kill(self.master, libc::SIGTERM) };
            let t = Instant::now();
            while !gone() && t.elapsed() < Duration::from_secs(5) {
                std::thread::sleep(Duration::from_millis(20));
            }
            for p in pids {
                // SAFETY: the master and workers this test started (SIGCONT: in case they were left stopped).
                unsafe {
                    libc::kill(p, libc::SIGCONT);
                    libc::kill(p, libc::SIGKILL);
                }
            }
        }
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
            let ports = TupleQuery::new(policy.key(), ht, src, 0, dst.ip(), dst.port())
                .vary(Vary::SrcPort(20000..=60999))
                .bucket(policy.mask(), bucket)
                .max(4)
                .find()
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

/// State letter of `pid` (`/proc/PID/stat`; '-' when gone).
fn proc_state(pid: i32) -> char {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    s.rfind(')')
        .and_then(|i| s[i + 1..].split_whitespace().next())
        .and_then(|f| f.chars().next())
        .unwrap_or('-')
}

/// The workers answering `n` connections from each CPU (a thread pinned
/// there): with a probe program (`ret k`) all go to one worker; with none
/// (the kernel's hash) or rsskit's cpu program both workers answer.
fn answering(ng: &Nginx, v6: bool, n: usize) -> std::collections::BTreeSet<u32> {
    let dst = ng.addr(v6);
    let mut seen = std::collections::BTreeSet::new();
    for cpu in cpus() {
        let got: Vec<u32> = std::thread::spawn(move || {
            rsskit_linux::affinity::pin_current_thread(cpu).unwrap();
            (0..n).map(|_| x_pid(dst, None)).collect()
        })
        .join()
        .unwrap();
        seen.extend(got);
    }
    seen
}

/// A small deterministic generator (xorshift64*) for the kill points.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n.max(1)
    }
}

/// Issue 22 §2: `rsskit steer` SIGKILLed at random points, most of them
/// while it holds the workers stopped for its order probe (killed just
/// after a worker is seen stopped): afterwards no worker stays stopped
/// and no probe program (every connection to one worker) is left; the
/// group has no program, or rsskit's final one.
#[test]
fn sigkill_during_the_probe_leaves_workers_running_and_no_probe_program() {
    need_two_cpus();
    let ng = Nginx::start(STEERED, "sigkill");
    let workers = children(ng.master);
    assert_eq!(workers.len(), 2);
    let seed =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64 | 1;
    let mut rng = Rng(seed);
    let started = Instant::now();
    let (mut while_stopped, mut iterations) = (0, 0);
    for i in 0..40 {
        let mut child = Command::new(rsskit())
            .args(["steer", "--pid", &ng.master.to_string(), "--port", &ng.port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let t = Instant::now();
        if i % 4 == 3 {
            // Anywhere in the run (one takes some 50 ms here).
            std::thread::sleep(Duration::from_micros(rng.below(80_000)));
        } else {
            // Just after the stop: the probe window.
            let seen = loop {
                if workers.iter().any(|&w| proc_state(w) == 'T') {
                    break true;
                }
                if child.try_wait().unwrap().is_some() || t.elapsed() > Duration::from_secs(5) {
                    break false;
                }
                std::hint::spin_loop();
            };
            while_stopped += seen as usize;
            std::thread::sleep(Duration::from_micros(rng.below(if i % 2 == 0 { 300 } else { 3000 })));
        }
        let _ = child.kill();
        child.wait().unwrap();
        iterations += 1;
        // The watchdog acts within a moment of the death: then nobody may stay stopped.
        let t = Instant::now();
        let stopped = loop {
            std::thread::sleep(Duration::from_millis(50));
            let s: Vec<(i32, char)> = [ng.master]
                .iter()
                .chain(&workers)
                .map(|&p| (p, proc_state(p)))
                .filter(|x| x.1 == 'T')
                .collect();
            if s.is_empty() || t.elapsed() > Duration::from_secs(5) {
                break s;
            }
        };
        assert!(
            stopped.is_empty(),
            "iteration {i} (seed {seed}): processes left stopped 5 s after rsskit steer was killed: {stopped:?}"
        );
        for v6 in [false, true] {
            let seen = answering(&ng, v6, 10);
            assert_eq!(
                seen.len(),
                2,
                "iteration {i} (seed {seed}), ipv6={v6}: every connection answered by {seen:?}: a probe program was \
                 left attached"
            );
        }
    }
    assert!(
        while_stopped >= 10,
        "only {while_stopped} of {iterations} kills fell while the workers were stopped"
    );
    assert!(started.elapsed() < Duration::from_secs(120), "bounded: {:?}", started.elapsed());
}

/// Reads a child's stderr lines on a thread; waits (bounded) for one.
struct Lines {
    rx: std::sync::mpsc::Receiver<String>,
    all: String,
}

impl Lines {
    fn of(child: &mut Child) -> Lines {
        let err = child.stderr.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for l in std::io::BufReader::new(err).lines().map_while(Result::ok) {
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        Lines { rx, all: String::new() }
    }

    fn wait_for(&mut self, needle: &str, within: Duration) -> String {
        let end = Instant::now() + within;
        loop {
            match self.rx.recv_timeout(end.saturating_duration_since(Instant::now())) {
                Ok(l) => {
                    self.all.push_str(&l);
                    self.all.push('\n');
                    if l.contains(needle) {
                        return l;
                    }
                }
                Err(_) => panic!("no line with {needle:?} within {within:?}; stderr:\n{}", self.all),
            }
        }
    }
}

/// Issue 22 §3: nginx without `daemon off;` under `rsskit run`: its parent
/// exits 0 and the daemon lives on; rsskit run says so, follows the daemon
/// (steers it), forwards SIGTERM to it and exits with its status.
#[test]
fn run_follows_nginx_that_daemonises() {
    need_two_cpus();
    let mut ng = Nginx::start(Conf { via_run: true, daemon: true, ..STEERED }, "daemon");
    let mut err = Lines::of(&mut ng.child);
    let l = err.wait_for("went to the background", Duration::from_secs(30));
    assert!(l.contains(&format!("following pid {}", ng.master)) && l.contains("daemon off;"), "{l}");
    err.wait_for("  socket 1 ", Duration::from_secs(30));
    for v6 in [false, true] {
        let (n, local) = locality(&ng, v6);
        assert_eq!(local, n, "ipv6={v6}: {local}/{n} local: the daemon was not steered");
    }
    // SAFETY: signalling our own child (rsskit run).
    unsafe { libc::kill(ng.child.id() as i32, libc::SIGTERM) };
    let t = Instant::now();
    let st = loop {
        if let Some(st) = ng.child.try_wait().unwrap() {
            break st;
        }
        assert!(t.elapsed() < Duration::from_secs(10), "rsskit run did not exit after SIGTERM: {}", err.all);
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(st.success(), "rsskit run exit: {st}");
    assert!(!rsskit_linux::procnet::exists(ng.master), "the daemon {} outlived rsskit run", ng.master);
}

/// Issue 22 §3: a reload from 2 workers to 1 (and back) under `rsskit run`
/// is reported with the counts.
#[test]
fn run_reports_a_reload_to_one_worker() {
    need_two_cpus();
    let mut ng = Nginx::start(Conf { via_run: true, ..STEERED }, "shrink");
    let mut err = Lines::of(&mut ng.child);
    err.wait_for("  socket 1 ", Duration::from_secs(30));
    let conf = ng.dir.join("nginx.conf");
    let text = std::fs::read_to_string(&conf).unwrap();
    std::fs::write(&conf, text.replace("worker_processes 2;", "worker_processes 1;")).unwrap();
    // SAFETY: signalling our own child (rsskit run forwards SIGHUP to nginx).
    unsafe { libc::kill(ng.child.id() as i32, libc::SIGHUP) };
    let l = err.wait_for("workers changed", Duration::from_secs(30));
    assert!(
        l.contains(&format!("tcp 127.0.0.1:{}: 1 socket", ng.port))
            && l.contains(&format!("was tcp 127.0.0.1:{}: 2 sockets", ng.port))
            && l.contains("nothing to steer"),
        "{l}"
    );
    std::fs::write(&conf, text).unwrap();
    // SAFETY: as above.
    unsafe { libc::kill(ng.child.id() as i32, libc::SIGHUP) };
    let l = err.wait_for("workers changed", Duration::from_secs(30));
    assert!(
        l.contains(&format!("tcp 127.0.0.1:{}: 2 sockets", ng.port)) && l.contains("steering again"),
        "{l}"
    );
}

/// Issue 22 §3: `steer` that fails (here `--pid 1`: on this machine its
/// namespace cannot be read; elsewhere it may steer the same group) must
/// leave the group's program in force: every connection stays local.
#[test]
fn failing_steer_leaves_the_previous_program() {
    need_two_cpus();
    let ng = Nginx::start(STEERED, "keep");
    let out = steer(&["--pid", &ng.master.to_string(), "--port", &ng.port.to_string()]);
    assert!(out.status.success(), "steer: {}", String::from_utf8_lossy(&out.stderr));
    let out = steer(&["--pid", "1", "--port", &ng.port.to_string()]);
    let err = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        assert!(err.contains("nothing was changed"), "{err}");
    }
    for v6 in [false, true] {
        let (n, local) = locality(&ng, v6);
        assert_eq!(
            local, n,
            "ipv6={v6}: {local}/{n} local after `steer --pid 1` ({err}): the program was removed"
        );
    }
}

/// Issue 22 §2 for `rsskit run`: SIGKILLed just after it stopped the
/// workers to steer them (at start, or again after a reload), the workers
/// run again and no probe program is left. nginx outlives it (its process
/// group is removed on drop).
#[test]
fn sigkill_of_run_during_its_probe_leaves_workers_running() {
    need_two_cpus();
    let mut hits = 0;
    for i in 0..5 {
        let mut ng = Nginx::start(Conf { via_run: true, ..STEERED }, &format!("runkill{i}"));
        let stopped_seen = |ng: &Nginx, within: Duration| {
            let t = Instant::now();
            while t.elapsed() < within {
                if children(ng.master).iter().any(|&w| proc_state(w) == 'T') {
                    return true;
                }
                std::hint::spin_loop();
            }
            false
        };
        let mut seen = stopped_seen(&ng, Duration::from_secs(3));
        if !seen {
            // Already steered: a reload makes it steer (and stop) again.
            // SAFETY: signalling the nginx master this test started.
            unsafe { libc::kill(ng.master, libc::SIGHUP) };
            seen = stopped_seen(&ng, Duration::from_secs(10));
        }
        hits += seen as usize;
        std::thread::sleep(Duration::from_micros(200 * i as u64));
        ng.child.kill().unwrap();
        ng.child.wait().unwrap();
        let t = Instant::now();
        let stuck = loop {
            std::thread::sleep(Duration::from_millis(50));
            let s: Vec<i32> = [ng.master]
                .into_iter()
                .chain(children(ng.master))
                .filter(|&p| proc_state(p) == 'T')
                .collect();
            if s.is_empty() || t.elapsed() > Duration::from_secs(5) {
                break s;
            }
        };
        assert!(stuck.is_empty(), "iteration {i}: left stopped after rsskit run was killed: {stuck:?}");
        // Old workers of a reload may still be leaving: wait for two.
        let t = Instant::now();
        while children(ng.master).len() != 2 && t.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(20));
        }
        for v6 in [false, true] {
            let seen = answering(&ng, v6, 10);
            assert_eq!(
                seen.len(),
                2,
                "iteration {i}, ipv6={v6}: every connection to {seen:?}: a probe program was left"
            );
        }
    }
    assert!(hits >= 3, "only {hits} of 5 kills fell while the workers were stopped");
}

/// Issue 22 §3: a steer that fails on one group changes no other: the
/// IPv6 listener is not a reuseport group (refused, --port named), so the
/// IPv4 group (checked first) must keep the kernel's hash. The previous
/// code steered it before failing on the IPv6 one.
#[test]
fn a_refused_group_leaves_the_others_unchanged() {
    need_two_cpus();
    let ng = Nginx::start(Conf { v6_shared: true, ..STEERED }, "partial");
    let out = steer(&["--pid", &ng.master.to_string(), "--port", &ng.port.to_string()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains(&format!("tcp [::1]:{}: not a reuseport group", ng.port)), "{err}");
    // The kernel's hash: not every connection local (2^-24 odds by chance).
    let (n, local) = locality(&ng, false);
    assert!(
        local < n,
        "all {n} IPv4 connections local: the IPv4 group was steered though the command failed"
    );
}
