//! The C example (`examples/udp_echo.c`), compiled with the system's `cc`
//! against the static library and the committed header, run as a per-CPU
//! UDP echo server and checked with the flows of the Rust example.

use rsskit_app::{online_cpus, CpuId, FlowTuple, HashConfig, L4Proto, RssKey, RssPolicy, WorkerId};
use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const CRATE: &str = env!("CARGO_MANIFEST_DIR");

/// The directory holding `librsskit_capi.a` (built with this test's crate):
/// `target/PROFILE/deps` under `cargo test` (cargo copies it up to
/// `target/PROFILE` only for `cargo build -p rsskit-capi`).
fn lib_dir() -> PathBuf {
    let mut p = std::env::current_exe().unwrap();
    p.pop();
    if p.join("librsskit_capi.a").exists() {
        return p;
    }
    if p.ends_with("deps") {
        p.pop();
    }
    p
}

/// Compiles the C example once per test binary run.
fn c_echo() -> PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("c_udp_echo");
            let lib = lib_dir().join("librsskit_capi.a");
            assert!(lib.exists(), "{} missing: the crate's staticlib was not built", lib.display());
            let st = Command::new("cc")
                .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-O1", "-o"])
                .arg(&out)
                .arg(format!("{CRATE}/examples/udp_echo.c"))
                .arg(format!("-I{CRATE}/include"))
                .arg(&lib)
                .args(["-lpthread", "-ldl", "-lm"])
                .status()
                .expect("running cc (the C compiler every Rust toolchain needs as linker)");
            assert!(st.success(), "compiling examples/udp_echo.c failed");
            out
        })
        .clone()
}

struct Server {
    child: Child,
    addr: SocketAddr,
}

impl Server {
    fn start(host: &str, mode: &str) -> Server {
        let mut child = Command::new(c_echo())
            .args([host, "0", mode])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let addr =
            line.trim().strip_prefix("listening on ").unwrap_or_else(|| panic!("{line:?}")).parse().unwrap();
        Server { child, addr }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn udp_flows(host: &str, mode: &str) {
    let server = Server::start(host, mode);
    let cpus: Vec<CpuId> = online_cpus().into_iter().map(|c| CpuId(c as u32)).collect();
    let p = RssPolicy::new(RssKey::microsoft(), HashConfig::default().with_udp_4tuple(true), &cpus, None)
        .unwrap();
    let mut workers = std::collections::BTreeSet::new();
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
        let st: HashMap<&str, &str> = rest.split_whitespace().filter_map(|kv| kv.split_once('=')).collect();
        let me = c.local_addr().unwrap();
        let hash = p.hash_tuple(&FlowTuple::new(
            me.ip(),
            me.port(),
            server.addr.ip(),
            server.addr.port(),
            L4Proto::Udp,
        ));
        let owner = p.worker_of_hash(hash);
        assert_eq!(st["hash"], format!("{hash:08x}"), "{st:?}");
        assert_eq!(st["bucket"], p.bucket(hash).to_string(), "{st:?}");
        assert_eq!(st["owner"], owner.0.to_string(), "{st:?}");
        let worker: u32 = st["worker"].parse().unwrap();
        assert_eq!(st["cpu"], p.cpu_of(WorkerId(worker)).unwrap().0.to_string(), "{st:?}");
        match mode {
            "toeplitz" => {
                assert_eq!(worker, owner.0, "served by the owner: {st:?}");
                assert_eq!(st["misdirected"], "false");
            }
            "cpu" => assert_eq!(st["kernel_cpu"], st["cpu"], "{st:?}"),
            _ => unreachable!(),
        }
        workers.insert(worker);
    }
    if mode == "toeplitz" && p.workers() > 1 {
        assert!(workers.len() > 1, "24 flows all on one worker");
    }
}

#[test]
fn c_udp_echo_toeplitz_ipv4() {
    udp_flows("127.0.0.1", "toeplitz");
}

#[test]
fn c_udp_echo_toeplitz_ipv6() {
    udp_flows("::1", "toeplitz");
}

#[test]
fn c_udp_echo_cpu() {
    udp_flows("127.0.0.1", "cpu");
}

#[test]
fn c_udp_echo_refuses_bad_arguments() {
    for args in [&["nowhere", "0"][..], &["127.0.0.1", "0", "rss"], &[]] {
        let out = Command::new(c_echo()).args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(String::from_utf8_lossy(&out.stderr).contains("usage"), "{args:?}");
    }
    // A port in use: the library's error, named.
    let busy = UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = busy.local_addr().unwrap().port().to_string();
    let out = Command::new(c_echo()).args(["127.0.0.1", &port, "toeplitz"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("address already in use") && err.contains(&port), "{err}");
}

#[test]
fn pkg_config_file() {
    let pc = std::fs::read_to_string(format!("{CRATE}/rsskit.pc")).unwrap();
    assert!(pc.lines().any(|l| l.starts_with("Libs:") && l.contains("-lrsskit_capi")), "{pc}");
    assert!(pc.lines().any(|l| l.starts_with("Cflags:") && l.contains("-I${includedir}")), "{pc}");
    // Where pkg-config is installed, it parses the file and gives the flags.
    match Command::new("pkg-config").arg("--version").output() {
        Ok(_) => {
            let out = Command::new("pkg-config")
                .env("PKG_CONFIG_PATH", CRATE)
                .args(["--define-variable=prefix=/opt/rsskit", "--cflags", "--libs", "rsskit"])
                .output()
                .unwrap();
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
            let flags = String::from_utf8_lossy(&out.stdout);
            assert!(flags.contains("-I/opt/rsskit/include") && flags.contains("-lrsskit_capi"), "{flags}");
        }
        Err(_) => eprintln!("note: pkg-config not installed: only the file's fields were checked"),
    }
}
