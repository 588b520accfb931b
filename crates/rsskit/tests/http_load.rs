//! `rsskit http-load` against real servers on loopback: nginx (Debian's,
//! started by the test with a throwaway config, killed on drop) and
//! `rsskit http-serve`; request counts must agree with the server's own
//! counters. Also: tuple-finder source ports against the server's in-kernel
//! Toeplitz steering, CPU steering, the --rate schedule, bad inputs.

mod common;

use common::http::{one_line_error, Server};
use common::netns::rsskit;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Runs `rsskit http-load ARGS --json` (bounded) and returns its summary.
fn load(args: &[&str]) -> serde_json::Value {
    let mut child = Command::new(rsskit())
        .arg("http-load")
        .args(args)
        .args(["--json", "--quiet"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if t.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            panic!("http-load {args:?} ran over 60 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "http-load {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn n(v: &serde_json::Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}

#[test]
fn counts_agree_with_http_serve_keep_alive_and_close() {
    for mode in ["--keep-alive", "--close"] {
        let srv = Server::start(&["--quiet", "--steer", "kernel"]);
        let url = format!("http://{}/", srv.addr);
        let r = load(&["--url", &url, "--connections", "40", "--duration", "2", mode]);
        let (_, v) = srv.stop();
        let e = &r["errors"];
        for k in ["refused", "timeout", "reset", "bad_status", "short_body", "other"] {
            assert_eq!(e[k], 0, "{mode}: {k} errors: {r}");
        }
        assert!(n(&r["responses"]) > 500, "{mode}: {r}");
        assert_eq!(r["responses"], r["sent"], "{mode}");
        assert_eq!(r["sent"], v["total"]["requests"], "{mode}: client sent vs server parsed");
        assert_eq!(r["responses"], v["total"]["status"]["200"], "{mode}: client answers vs server 200s");
        assert_eq!(n(&r["bytes_in"]), n(&v["total"]["bytes_out"]), "{mode}: bytes");
        if mode == "--close" {
            assert_eq!(r["connects"], r["responses"], "one request per connection");
            assert_eq!(v["total"]["accepted"], r["connects"]);
        } else {
            assert!(n(&r["connects"]) <= 40, "keep-alive reuses connections: {r}");
        }
        let lat = &r["latency_us"];
        assert!(lat["p50"].as_f64().unwrap() > 0.0);
        assert!(lat["p50"].as_f64() <= lat["p99"].as_f64() && lat["p99"].as_f64() <= lat["max"].as_f64());
        assert!(lat["stddev"].as_f64().unwrap() >= 0.0);
    }
}

#[test]
#[cfg_attr(rsskit_one_cpu, ignore = "needs 2 CPUs")]
fn finder_ports_match_toeplitz_steering_and_cpu_steering_matches_cpus() {
    // Two workers on CPUs 0 and 1.
    let online = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap();
    assert_ne!(online.trim(), "0", "needs CPUs 0 and 1 online");
    // toeplitz: each client worker aims its source ports at the server
    // worker of the same index; the kernel's BPF program (run on the SYN)
    // must agree, over IPv4 and IPv6.
    for (bind, sources) in [("127.0.0.1:0", Some("127.0.0.0/8")), ("[::1]:0", None)] {
        let srv = Server::start_at(bind, &["--quiet", "--cpus", "0,1", "--steer", "toeplitz"]);
        let url = format!("http://{}/", srv.addr);
        let mut args = vec![
            "--url",
            &url,
            "--connections",
            "16",
            "--duration",
            "1.5",
            "--close",
            "--cpus",
            "0,1",
            "--src-ports",
            "server",
            "--server-cpus",
            "0,1",
        ];
        if let Some(net) = sources {
            args.extend(["--sources", net]);
        }
        let r = load(&args);
        let (_, v) = srv.stop();
        let (cw, sw) = (r["workers"].as_array().unwrap(), v["workers"].as_array().unwrap());
        for i in 0..2 {
            assert!(n(&cw[i]["connects"]) > 50, "{r}");
            assert_eq!(
                cw[i]["connects"], sw[i]["accepted"],
                "{bind} worker {i}: finder vs in-kernel Toeplitz\n{r}\n{v}"
            );
        }
    }
    // cpu: the SYN is processed on the CPU of the (pinned) client thread.
    let srv = Server::start(&["--quiet", "--cpus", "0,1", "--steer", "cpu"]);
    let url = format!("http://{}/", srv.addr);
    let r = load(&["--url", &url, "--connections", "16", "--duration", "1.5", "--close", "--cpus", "0,1"]);
    let (_, v) = srv.stop();
    let (cw, sw) = (r["workers"].as_array().unwrap(), v["workers"].as_array().unwrap());
    for i in 0..2 {
        assert_eq!(cw[i]["connects"], sw[i]["accepted"], "worker {i}: CPU steering\n{r}\n{v}");
    }
}

#[test]
fn rate_schedule_is_kept() {
    let srv = Server::start(&["--quiet"]);
    let url = format!("http://{}/", srv.addr);
    let r = load(&["--url", &url, "--connections", "20", "--duration", "2", "--rate", "1000"]);
    let (_, v) = srv.stop();
    let got = n(&r["responses"]);
    assert!((1900..=2000).contains(&got), "2 s at 1000/s: {got}");
    assert_eq!(r["sent"], v["total"]["requests"]);
    // A 1,000/s schedule on a loopback server: no backlog builds up (loose bound: shared CI machines).
    assert!(r["latency_us"]["p50"].as_f64().unwrap() < 50_000.0, "{r}");
}

#[test]
fn sigint_stops_early_with_progress_and_a_summary() {
    let srv = Server::start(&["--quiet", "--steer", "kernel"]);
    let url = format!("http://{}/", srv.addr);
    let mut load = common::proc::Running::spawn(&[
        "http-load",
        "--url",
        &url,
        "--connections",
        "8",
        "--duration",
        "30",
        "--rate",
        "2000",
        "--json",
    ]);
    // One progress line a second, on stderr with --json.
    load.wait_for(" req/s (total ", Duration::from_secs(10));
    let t = Instant::now();
    let (st, out, _) = load.signal_and_wait(libc::SIGINT, Duration::from_secs(5));
    assert!(st.success(), "{st:?}");
    assert!(t.elapsed() < Duration::from_secs(5));
    let r: serde_json::Value = serde_json::from_str(&out).expect("one JSON object on stdout");
    let resp = n(&r["responses"]);
    assert!((1000..30 * 2000).contains(&resp), "stopped early: {r}");
    let (_, v) = srv.stop();
    let served = n(&v["total"]["requests"]);
    // Requests in flight at the signal are served but never read back.
    assert!(served >= resp && served <= resp + 8, "server {served} vs client {resp}");
}

#[test]
fn refused_and_bad_inputs() {
    // Nothing listens on this port (bound, never listening).
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    drop(l);
    let out = Command::new(rsskit())
        .args(["http-load", "--url", &format!("http://127.0.0.1:{port}/"), "--connections", "2"])
        .args(["--duration", "0.5", "--json", "--quiet"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("refused"), "{err}");
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(n(&r["errors"]["refused"]) > 0);
    for args in [
        &["--url", "https://127.0.0.1/"][..],
        &["--url", "http://127.0.0.1:99999/"],
        &["--url", "http://127.0.0.1/", "--connections", "0"],
        &["--url", "http://127.0.0.1/", "--duration=0"],
        &["--url", "http://127.0.0.1/", "--rate", "0"],
        &["--url", "http://127.0.0.1/", "--threads", "0"],
        &["--url", "http://127.0.0.1/", "--sources", "::1/128"],
        &["--url", "http://127.0.0.1/", "--cpus", "99999"],
    ] {
        one_line_error(&[&["http-load"][..], args].concat());
    }
}

/// nginx with a throwaway config in a temp dir; the whole process group
/// is terminated (then killed) on drop.
struct Nginx {
    child: Child,
    dir: PathBuf,
    addr: SocketAddr,
}

impl Nginx {
    fn start() -> Nginx {
        let bin = ["/usr/sbin/nginx", "/usr/local/sbin/nginx", "/usr/bin/nginx"]
            .into_iter()
            .map(PathBuf::from)
            .find(|p| p.exists())
            .expect("nginx is not installed: `apt-get install -y nginx` (these tests need it)");
        let dir = std::env::temp_dir().join(format!("rsskit-nginx-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("www")).unwrap();
        std::fs::write(dir.join("www/obj"), vec![b'x'; 1024]).unwrap();
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let d = dir.display();
        let conf = format!(
            "daemon off;\nworker_processes 2;\npid {d}/nginx.pid;\nerror_log {d}/error.log;\n\
             events {{ worker_connections 4096; }}\n\
             http {{\n access_log off;\n client_body_temp_path {d}/tmp-body;\n proxy_temp_path {d}/tmp-proxy;\n\
             fastcgi_temp_path {d}/tmp-fcgi;\n uwsgi_temp_path {d}/tmp-uwsgi;\n scgi_temp_path {d}/tmp-scgi;\n\
             server {{\n  listen {addr} reuseport;\n  root {d}/www;\n  location = /status {{ stub_status; }}\n }}\n}}\n"
        );
        std::fs::write(dir.join("nginx.conf"), conf).unwrap();
        let child = Command::new(&bin)
            .args(["-p", &format!("{d}/"), "-e", &format!("{d}/error.log"), "-c", &format!("{d}/nginx.conf")])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .process_group(0)
            .spawn()
            .expect("starting nginx");
        let mut ng = Nginx { child, dir, addr };
        let t = Instant::now();
        while TcpStream::connect(addr).is_err() {
            if let Some(st) = ng.child.try_wait().unwrap() {
                let log = std::fs::read_to_string(ng.dir.join("error.log")).unwrap_or_default();
                panic!("nginx exited ({st}): {log}");
            }
            assert!(t.elapsed() < Duration::from_secs(10), "nginx did not start listening on {addr}");
            std::thread::sleep(Duration::from_millis(20));
        }
        ng
    }

    /// stub_status "requests" (counts this request too).
    fn requests(&self) -> u64 {
        let mut s = TcpStream::connect(self.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.write_all(b"GET /status HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        // "server accepts handled requests\n A H R"
        let line =
            out.lines().skip_while(|l| !l.starts_with("server accepts")).nth(1).expect("stub_status body");
        line.split_whitespace().nth(2).unwrap().parse().unwrap()
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        common::proc::stop_group(&mut self.child);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[test]
fn counts_agree_with_nginx() {
    let ng = Nginx::start();
    let url = format!("http://{}/obj", ng.addr);
    for mode in ["--keep-alive", "--close"] {
        let before = ng.requests();
        let r = load(&["--url", &url, "--connections", "40", "--duration", "2", mode]);
        let after = ng.requests();
        let e = &r["errors"];
        for k in ["refused", "timeout", "reset", "bad_status", "short_body", "other"] {
            assert_eq!(e[k], 0, "{mode}: {k} errors against nginx: {r}");
        }
        assert!(n(&r["responses"]) > 500, "{r}");
        // nginx counted our requests plus the second status request.
        assert_eq!(after - before, n(&r["sent"]) + 1, "{mode}: nginx stub_status vs http-load");
        assert_eq!(r["sent"], r["responses"]);
        assert!(n(&r["bytes_in"]) > 1024 * n(&r["responses"]));
    }
}

#[test]
fn rate_mode_does_not_hide_a_stall() {
    // The server is frozen (SIGSTOP) for 0.5 s of a 3 s run at 1,000 req/s
    // over 10 connections. Measured from the scheduled starts, the ~500
    // requests due during the stall all wait for it (coordinated omission
    // corrected); timed from the actual sends only the 10 in flight would.
    let srv = Server::start(&["--quiet"]);
    let pid = srv.pid();
    let url = format!("http://{}/", srv.addr);
    let stall = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(1200));
        // SAFETY: signalling our own child process.
        unsafe { libc::kill(pid, libc::SIGSTOP) };
        std::thread::sleep(Duration::from_millis(500));
        // SAFETY: as above.
        unsafe { libc::kill(pid, libc::SIGCONT) };
    });
    let r = load(&["--url", &url, "--connections", "10", "--duration", "3", "--rate", "1000", "--cpus", "0"]);
    stall.join().unwrap();
    let _ = srv.stop();
    let lat = &r["latency_us"];
    assert_eq!(n(&r["errors"]["timeout"]), 0, "{r}");
    assert!(lat["max"].as_f64().unwrap() > 400_000.0, "the stall shows in max: {lat}");
    // ~1/6 of the requests were due during the stall: p90 must see it.
    assert!(lat["p90"].as_f64().unwrap() > 50_000.0, "the stall shows in p90: {lat}");
    assert!(lat["p50"].as_f64().unwrap() < 100_000.0, "but not in the median: {lat}");
}
