//! `rsskit http-serve` end to end on loopback: malformed and oversized
//! requests, pipelining, HEAD, path traversal, timeouts, 10,000 concurrent
//! connections, shutdown under load. Every server is killed on drop.

mod common;

use common::http::{one_line_error, Server};
use common::netns::rsskit;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

/// Sends `req` and reads until the server closes (bounded by the timeout).
fn exchange(addr: SocketAddr, req: &[u8]) -> Vec<u8> {
    let mut s = connect(addr);
    s.write_all(req).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    out
}

fn status_of(resp: &[u8]) -> u16 {
    let line = resp.split(|&b| b == b'\n').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    line.split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status in {line:?}"))
}

/// Splits a byte stream of responses (bodies by Content-Length; HEAD
/// responses flagged in `head`) into (status, headers, body).
fn split_responses(mut buf: &[u8], head: &[bool]) -> Vec<(u16, String, Vec<u8>)> {
    let mut out = Vec::new();
    for &is_head in head {
        let end = buf.windows(4).position(|w| w == b"\r\n\r\n").expect("a complete head") + 4;
        let h = String::from_utf8(buf[..end].to_vec()).unwrap();
        let len: usize = h
            .lines()
            .find_map(|l| {
                l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().parse().unwrap())
            })
            .expect("Content-Length");
        let blen = if is_head { 0 } else { len };
        out.push((status_of(&buf[..end]), h, buf[end..end + blen].to_vec()));
        buf = &buf[end + blen..];
    }
    assert!(buf.is_empty(), "{} unexpected trailing bytes", buf.len());
    out
}

fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| b'a' + (i % 26) as u8).collect()
}

#[test]
fn malformed_oversized_and_unsupported() {
    let srv = Server::start(&[]);
    let a = srv.addr;
    let mut big_header = b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: ".to_vec();
    big_header.resize(9000, b'a');
    big_header.extend_from_slice(b"\r\n\r\n");
    let mut many = b"GET / HTTP/1.1\r\nHost: x\r\n".to_vec();
    for i in 0..100 {
        many.extend_from_slice(format!("X-{i}: y\r\n").as_bytes());
    }
    many.extend_from_slice(b"\r\n");
    let cases: Vec<(&[u8], u16)> = vec![
        (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nBad Header\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\n\r\n", 400),
        (b"GET ../etc/passwd HTTP/1.1\r\nHost: x\r\n\r\n", 400),
        (&big_header, 431),
        (&many, 431),
        (b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n", 405),
        (b"DELETE / HTTP/1.1\r\nHost: x\r\n\r\n", 405),
        (b"BREW / HTTP/1.1\r\nHost: x\r\n\r\n", 501),
        (b"GET / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n", 501),
        (b"GET /bytes/12x HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 400),
        (b"GET /nothing-here HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 404),
    ];
    for (req, want) in &cases {
        let resp = exchange(a, req);
        assert!(!resp.is_empty(), "no answer to {:?}", String::from_utf8_lossy(&req[..req.len().min(40)]));
        assert_eq!(status_of(&resp), *want, "{:?}", String::from_utf8_lossy(&req[..req.len().min(40)]));
        let text = String::from_utf8_lossy(&resp);
        assert!(text.contains("Connection: close"), "refusals close the connection: {text}");
        if *want == 405 {
            assert!(text.contains("Allow: GET, HEAD"));
        }
    }
    // The connection of a refused request is closed: nothing more is answered.
    let resp = exchange(a, b"BREW / HTTP/1.1\r\nHost: x\r\n\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(String::from_utf8_lossy(&resp).matches("HTTP/1.1 ").count(), 1);
    let (st, v) = srv.stop();
    assert!(st.success());
    let t = &v["total"];
    assert_eq!(t["status"]["431"], 2);
    assert_eq!(t["status"]["501"], 3);
    assert_eq!(t["status"]["405"], 2);
    assert_eq!(t["status"]["400"], 5);
    assert_eq!(t["status"]["404"], 1);
    assert!(t["status"].get("200").is_none(), "{t}");
}

#[test]
fn pipelining_and_head() {
    let srv = Server::start(&["--object-size", "1000"]);
    let reqs = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n\
HEAD /bytes/5000 HTTP/1.1\r\nHost: x\r\n\r\n\
GET /bytes/70000 HTTP/1.1\r\nHost: x\r\n\r\n\
HEAD / HTTP/1.1\r\nHost: x\r\n\r\n\
GET /bytes/7 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    // One write, five requests, one of them streamed (70,000 bytes).
    let resp = exchange(srv.addr, reqs);
    let r = split_responses(&resp, &[false, true, false, true, false]);
    assert_eq!(r.len(), 5);
    assert!(r.iter().all(|x| x.0 == 200));
    assert_eq!(r[0].2, pattern(1000));
    assert!(r[1].1.contains("Content-Length: 5000"));
    assert_eq!(r[2].2, pattern(70000));
    assert!(r[3].1.contains("Content-Length: 1000"));
    assert_eq!(r[4].2, b"abcdefg");
    assert!(r[0].1.contains("Connection: keep-alive") && r[4].1.contains("Connection: close"));
    // Requests split at awkward places still parse.
    let mut s = connect(srv.addr);
    for part in [
        &b"GE"[..],
        b"T /bytes/3 HTTP/1.1\r",
        b"\nHost: x\r\n",
        b"\r\nGET /bytes/2 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    ] {
        s.write_all(part).unwrap();
        std::thread::sleep(Duration::from_millis(30));
    }
    let mut out = Vec::new();
    s.read_to_end(&mut out).unwrap();
    let r = split_responses(&out, &[false, false]);
    assert_eq!((r[0].2.as_slice(), r[1].2.as_slice()), (&b"abc"[..], &b"ab"[..]));
    let (st, v) = srv.stop();
    assert!(st.success());
    assert_eq!(v["total"]["requests"], 7);
    assert_eq!(v["total"]["status"]["200"], 7);
}

#[test]
fn path_traversal_is_refused() {
    let base = std::env::temp_dir().join(format!("rsskit-http-root-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    let root = base.join("www");
    std::fs::create_dir_all(root.join("sub")).unwrap();
    std::fs::write(root.join("hello.txt"), b"hello, world\n").unwrap();
    std::fs::write(root.join("sub/index.html"), b"<p>sub</p>").unwrap();
    std::fs::write(base.join("secret.txt"), b"TOP-SECRET").unwrap();
    std::os::unix::fs::symlink(base.join("secret.txt"), root.join("abs-link")).unwrap();
    std::os::unix::fs::symlink("../secret.txt", root.join("rel-link")).unwrap();
    std::os::unix::fs::symlink("..", root.join("up")).unwrap();
    std::os::unix::fs::symlink("hello.txt", root.join("inside-link")).unwrap();
    struct Cleanup(std::path::PathBuf);
    impl Drop for Cleanup {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
    let _cleanup = Cleanup(base.clone());
    let srv = Server::start(&["--root", root.to_str().unwrap()]);
    let get = |path: &str| {
        let req = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        let resp = exchange(srv.addr, req.as_bytes());
        assert!(!String::from_utf8_lossy(&resp).contains("TOP-SECRET"), "{path} leaked the secret");
        (status_of(&resp), resp)
    };
    let (st, body) = get("/hello.txt");
    assert_eq!(st, 200);
    assert!(body.ends_with(b"hello, world\n"));
    assert!(String::from_utf8_lossy(&body).contains("Content-Type: text/plain"));
    assert_eq!(get("/inside-link").0, 200);
    assert_eq!(get("/sub/").0, 200);
    for (path, want) in [
        ("/../secret.txt", 400),
        ("/sub/../../secret.txt", 400),
        ("/%2e%2e/secret.txt", 400),
        ("/%2E%2e%2Fsecret.txt", 400),
        ("/sub/%2e%2e/%2e%2e/secret.txt", 400),
        ("/..%2fsecret.txt", 400),
        ("/abs-link", 403),
        ("/rel-link", 403),
        ("/up/secret.txt", 403),
        ("/hello.txt%00", 400),
        ("/%zz", 400),
        ("/missing", 404),
    ] {
        assert_eq!(get(path).0, want, "{path}");
    }
    let (st, _) = srv.stop();
    assert!(st.success());
}

#[test]
fn file_cache_serves_a_copy_until_it_expires_and_can_be_turned_off() {
    let base = std::env::temp_dir().join(format!("rsskit-http-cache-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    std::fs::create_dir_all(&base).unwrap();
    struct Cleanup(std::path::PathBuf);
    impl Drop for Cleanup {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
    let _cleanup = Cleanup(base.clone());
    let obj = base.join("obj");
    let get = |srv: &Server| {
        let resp = exchange(srv.addr, b"GET /obj HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        assert_eq!(status_of(&resp), 200);
        let end = resp.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
        resp[end..].to_vec()
    };
    // `--steer kernel`: this one thread's connections may land on either
    // worker; each has its own copy, so both must hold the first version.
    let root = base.to_str().unwrap();
    let cached = Server::start(&["--root", root, "--steer", "kernel", "--file-cache-ms", "3600000"]);
    let fresh = Server::start(&["--root", root, "--file-cache-ms", "0"]);
    std::fs::write(&obj, b"first").unwrap();
    for _ in 0..20 {
        assert_eq!(get(&cached), b"first");
    }
    assert_eq!(get(&fresh), b"first");
    std::fs::write(&obj, b"second version").unwrap();
    for _ in 0..20 {
        assert_eq!(get(&cached), b"first", "served from the worker's copy for an hour");
    }
    assert_eq!(get(&fresh), b"second version", "--file-cache-ms 0 reads the file per request");
    let (st, v) = cached.stop();
    assert!(st.success());
    assert_eq!(
        (v["file_cache_ms"].as_u64(), v["defer_accept"].as_bool()),
        (Some(3_600_000), Some(true)),
        "{v}"
    );
    assert_eq!(v["total"]["status"]["200"], 40);
    let (st, v) = fresh.stop();
    assert!(st.success());
    assert_eq!(v["file_cache_ms"], 0, "{v}");
}

#[test]
fn no_defer_accept_accepts_a_connection_before_its_request() {
    // Without TCP_DEFER_ACCEPT the handshake alone reaches the server: the
    // progress line counts a connection that has sent nothing.
    let mut srv = Server::start(&["--no-defer-accept", "--header-timeout", "60"]);
    let _silent = connect(srv.addr);
    srv.proc.wait_for(" accepted 1 (+", Duration::from_secs(10));
    let (st, v) = srv.stop();
    assert!(st.success());
    assert_eq!((v["total"]["accepted"].as_u64(), v["defer_accept"].as_bool()), (Some(1), Some(false)), "{v}");
    assert_eq!(v["total"]["requests"], 0, "{v}");
}

#[test]
fn workers_run_sched_batch_unless_told_otherwise() {
    // The policy each worker set on itself, read from /proc; printed in the
    // ready line, the final line and --json.
    for (extra, want, code) in [(&[][..], "batch", 3), (&["--sched", "normal"][..], "normal", 0)] {
        let srv = Server::start(extra);
        let ready = srv.proc.stderr.last().cloned().unwrap_or_default();
        assert!(ready.contains(&format!(", sched {want}, ")), "{ready}");
        assert_eq!(common::proc::thread_policy(srv.pid() as u32, "rsskit-w0"), code, "{want}");
        let (st, v) = srv.stop();
        assert!(st.success());
        assert_eq!(v["sched"], want, "{v}");
    }
    let out = Command::new(rsskit())
        .args(["http-serve", "--bind", "127.0.0.1:0", "--sched", "fifo"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("possible values: batch, normal"));
}

#[test]
fn idle_and_slow_header_connections_time_out() {
    let srv = Server::start(&["--idle-timeout", "1", "--header-timeout", "1"]);
    let t = Instant::now();
    let mut idle = connect(srv.addr);
    let mut slow = connect(srv.addr);
    slow.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n").unwrap(); // never finished
                                                               // A keep-alive connection that served one request, then went quiet.
    let mut used = connect(srv.addr);
    used.write_all(b"GET /bytes/1 HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut b = [0u8; 4096];
    let n = used.read(&mut b).unwrap();
    assert_eq!(status_of(&b[..n]), 200);
    let mut out = Vec::new();
    // Never sent a byte: closed at the header timeout (without an answer).
    idle.read_to_end(&mut out).expect("closed by the server, not by our read timeout");
    assert!(out.is_empty());
    out.clear();
    slow.read_to_end(&mut out).unwrap();
    assert_eq!(status_of(&out), 408);
    out.clear();
    used.read_to_end(&mut out).unwrap();
    assert!(out.is_empty());
    let waited = t.elapsed();
    assert!(waited >= Duration::from_millis(900) && waited < Duration::from_secs(5), "{waited:?}");
    let (st, v) = srv.stop();
    assert!(st.success());
    assert_eq!(v["total"]["timeouts_idle"], 1, "{v}");
    assert_eq!(v["total"]["timeouts_header"], 2, "{v}");
    assert_eq!(v["total"]["status"]["408"], 1);
}

#[test]
fn silent_connection_closed_at_the_header_timeout() {
    // The idle timeout is far away: only the header timeout, counted from
    // accept, can close a connection that never sends a byte.
    let srv = Server::start(&["--idle-timeout", "60", "--header-timeout", "1"]);
    let t = Instant::now();
    let mut silent = connect(srv.addr);
    let mut out = Vec::new();
    silent.read_to_end(&mut out).expect("closed by the server, not by our 10 s read timeout");
    let waited = t.elapsed();
    assert!(out.is_empty());
    assert!(waited >= Duration::from_millis(900) && waited < Duration::from_secs(5), "{waited:?}");
    let (st, v) = srv.stop();
    assert!(st.success());
    assert_eq!(v["total"]["timeouts_header"], 1, "{v}");
    assert_eq!(v["total"]["timeouts_idle"], 0, "{v}");
    assert_eq!(v["total"]["requests"], 0, "{v}");
}

#[test]
fn fifo_and_device_under_root_do_not_wedge_the_worker() {
    let base = std::env::temp_dir().join(format!("rsskit-http-fifo-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    let root = base.join("www");
    std::fs::create_dir_all(&root).unwrap();
    struct Cleanup(std::path::PathBuf);
    impl Drop for Cleanup {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
    let _cleanup = Cleanup(base.clone());
    std::fs::write(root.join("hello.txt"), b"hello\n").unwrap();
    let c = |p: &std::path::Path| std::ffi::CString::new(p.to_str().unwrap()).unwrap();
    // SAFETY: valid C strings; results checked.
    assert_eq!(unsafe { libc::mkfifo(c(&root.join("fifo")).as_ptr(), 0o644) }, 0, "mkfifo");
    // A character device node with /dev/null's numbers (needs root; a
    // symlink to /dev/null itself is stopped earlier, by RESOLVE_BENEATH).
    // SAFETY: a valid C string; the result is checked.
    let dev =
        unsafe { libc::mknod(c(&root.join("null")).as_ptr(), libc::S_IFCHR | 0o666, libc::makedev(1, 3)) };
    assert_eq!(dev, 0, "mknod needs root: {}", std::io::Error::last_os_error());
    std::os::unix::fs::symlink("/dev/null", root.join("devnull")).unwrap();
    // One worker: every request below goes to the same one.
    let srv = Server::start(&["--root", root.to_str().unwrap(), "--cpus", "0"]);
    let get = |method: &str, path: &str| {
        let t = Instant::now();
        let req = format!("{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        let resp = exchange(srv.addr, req.as_bytes());
        assert!(!resp.is_empty(), "{method} {path}: no answer in {:?} (worker wedged?)", t.elapsed());
        assert!(t.elapsed() < Duration::from_secs(2), "{method} {path} took {:?}", t.elapsed());
        status_of(&resp)
    };
    for path in ["/fifo", "/null", "/devnull"] {
        assert_eq!(get("GET", path), 403, "{path}");
        assert_eq!(get("HEAD", path), 403, "{path}");
    }
    // The worker still serves.
    for _ in 0..3 {
        assert_eq!(get("GET", "/hello.txt"), 200);
    }
    let t = Instant::now();
    let (st, v) = srv.stop();
    assert!(st.success(), "{st:?}");
    assert!(t.elapsed() < Duration::from_secs(3), "SIGTERM took {:?}", t.elapsed());
    assert_eq!(v["total"]["status"]["403"], 6, "{v}");
    assert_eq!(v["total"]["status"]["200"], 3, "{v}");
}

/// Raises this process's descriptor limit (the test holds 10,000 sockets).
fn raise_nofile(want: u64) {
    let mut l = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: valid rlimit pointers.
    unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut l) };
    if l.rlim_cur >= want {
        return;
    }
    let mut n = libc::rlimit { rlim_cur: want, rlim_max: l.rlim_max.max(want) };
    // SAFETY: as above.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &n) } != 0 {
        n = libc::rlimit { rlim_cur: l.rlim_max, rlim_max: l.rlim_max };
        // SAFETY: as above.
        unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &n) };
    }
    // SAFETY: as above.
    unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut l) };
    assert!(
        l.rlim_cur >= want,
        "RLIMIT_NOFILE is {} (hard {}); this test needs {want}",
        l.rlim_cur,
        l.rlim_max
    );
}

#[test]
fn ten_thousand_concurrent_connections() {
    const N: usize = 10_000;
    raise_nofile(N as u64 + 500);
    // Kernel steering: this single client thread sends every SYN from one
    // CPU, so `cpu` steering would (rightly) give them all to one worker.
    let srv = Server::start(&["--idle-timeout", "60", "--steer", "kernel"]);
    let t = Instant::now();
    let mut conns = Vec::with_capacity(N);
    for i in 0..N {
        let s = TcpStream::connect(srv.addr).unwrap_or_else(|e| panic!("connection {i}: {e}"));
        conns.push(s);
    }
    // All open at once; now one request on each, then every answer.
    for s in &mut conns {
        s.write_all(b"GET /bytes/100 HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    }
    for (i, s) in conns.iter_mut().enumerate() {
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut got = Vec::new();
        let mut b = [0u8; 1024];
        while !(got.windows(4).any(|w| w == b"\r\n\r\n") && got.ends_with(&pattern(100)[74..])) {
            let n = s.read(&mut b).unwrap_or_else(|e| panic!("connection {i}: {e}"));
            assert!(n > 0, "connection {i} closed early");
            got.extend_from_slice(&b[..n]);
        }
        assert_eq!(status_of(&got), 200);
    }
    eprintln!("10,000 connections served in {:?}", t.elapsed());
    let (st, v) = srv.stop();
    drop(conns);
    assert!(st.success());
    assert_eq!(v["total"]["accepted"], N as u64);
    assert_eq!(v["total"]["requests"], N as u64);
    assert_eq!(v["total"]["status"]["200"], N as u64);
    // Every worker took a share of the kernel's reuseport hash.
    for w in v["workers"].as_array().unwrap() {
        if v["workers"].as_array().unwrap().len() > 1 {
            assert!(w["accepted"].as_u64().unwrap() > 0, "{v}");
        }
    }
}

#[test]
fn sigterm_during_load_exits_cleanly_with_counters() {
    let srv = Server::start(&["--steer", "kernel"]);
    let mut load = Command::new(rsskit())
        .args([
            "http-load",
            "--url",
            &format!("http://{}/", srv.addr),
            "--connections",
            "32",
            "--duration",
            "8",
        ])
        .args(["--timeout", "1", "--quiet", "--json"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    struct Kill<'a>(&'a mut Child);
    impl Drop for Kill<'_> {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let _guard = Kill(&mut load);
    std::thread::sleep(Duration::from_millis(1500));
    let t = Instant::now();
    let (st, v) = srv.stop();
    assert!(st.success(), "{st:?}");
    assert!(t.elapsed() < Duration::from_secs(3), "shutdown took {:?}", t.elapsed());
    assert_eq!(v["stopped_by"], "signal");
    let total = &v["total"];
    assert!(total["requests"].as_u64().unwrap() > 100, "{v}");
    assert_eq!(total["requests"], total["status"]["200"]);
    let per: u64 = v["workers"].as_array().unwrap().iter().map(|w| w["requests"].as_u64().unwrap()).sum();
    assert_eq!(per, total["requests"].as_u64().unwrap());
}

#[test]
fn sigint_prints_progress_and_exact_final_counters() {
    let mut srv = Server::start(&["--cpus", "0"]);
    for _ in 0..3 {
        let r = exchange(srv.addr, b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        assert_eq!(status_of(&r), 200);
    }
    // One progress line a second on stderr.
    let line = srv.proc.wait_for("http-serve: ", Duration::from_secs(3));
    assert!(line.contains("requests 3 "), "{line}");
    let t = Instant::now();
    let (st, v) = srv.stop_with(libc::SIGINT);
    assert!(st.success(), "{st:?}");
    assert!(t.elapsed() < Duration::from_secs(2), "shutdown took {:?}", t.elapsed());
    assert_eq!(v["stopped_by"], "signal");
    assert_eq!(v["total"]["requests"], 3, "{v}");
    assert_eq!(v["total"]["accepted"], 3, "{v}");
    assert_eq!(v["total"]["status"]["200"], 3, "{v}");
}

#[test]
fn bad_arguments_are_one_line_errors() {
    for args in [
        &["http-serve", "--bind", "127.0.0.1:0", "--cpus", "99999"][..],
        &["http-serve", "--bind", "127.0.0.1:0", "--idle-timeout", "0"],
        &["http-serve", "--bind", "127.0.0.1:0", "--accept-batch", "0"],
        &["http-serve", "--bind", "127.0.0.1:0", "--root", "/nonexistent/rsskit"],
    ] {
        one_line_error(args);
    }
    // A port in use is refused rather than silently shared.
    let srv = Server::start(&[]);
    let out = Command::new(rsskit())
        .args(["http-serve", "--bind", &srv.addr.to_string(), "--duration", "1"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("already in use"));
}
