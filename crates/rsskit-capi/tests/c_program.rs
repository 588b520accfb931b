//! The C example (`examples/udp_echo.c`), compiled with the system's `cc`
//! against the static library and the committed header, run as a per-CPU
//! UDP echo server and checked with the flows of the Rust example.

// The Rust examples' server handle and stamp checks, shared.
#[path = "../../rsskit-app/tests/common/mod.rs"]
mod common;

use common::Server;
use std::net::UdpSocket;
use std::path::{Path, PathBuf};
use std::process::Command;

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

/// Compiles `tests/c/NAME.c` against the library and the committed header.
fn compile_c(name: &str) -> PathBuf {
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("c_{name}"));
    let lib = lib_dir().join("librsskit_capi.a");
    assert!(lib.exists(), "{} missing: the crate's staticlib was not built", lib.display());
    let st = Command::new("cc")
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-O1", "-o"])
        .arg(&out)
        .arg(format!("{CRATE}/tests/c/{name}.c"))
        .arg(format!("-I{CRATE}/include"))
        .arg(&lib)
        .args(["-lpthread", "-ldl", "-lm"])
        .status()
        .expect("running cc (the C compiler every Rust toolchain needs as linker)");
    assert!(st.success(), "compiling tests/c/{name}.c failed");
    out
}

/// Issue 22: the C API refuses, from C, what the command line refuses: an
/// all-zero key, keys longer than `RSS_KEY_MAX_LEN` (64, 1,000 bytes),
/// `from` without `from_len` (nothing received), a reversed port range and
/// the range 0-0 (`RSS_E_INVAL`, not "no port" or success).
#[test]
fn c_api_is_as_strict_as_the_cli() {
    let out = Command::new(compile_c("strict")).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("0 failure(s)") && !text.contains("FAIL"), "{text}");
}

fn udp_flows(host: &str, mode: &str) {
    common::udp_flows(&Server::start(Command::new(c_echo()).args([host, "0", mode])), mode);
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

/// Sends `len` bytes to the C example started with `args`; returns the
/// echoed payload and the reply's stamp.
fn echo_of(args: &[&str], len: usize) -> (Vec<u8>, std::collections::HashMap<String, String>) {
    let srv = Server::start(Command::new(c_echo()).args(args));
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    sock.set_read_timeout(Some(std::time::Duration::from_secs(5))).unwrap();
    let payload: Vec<u8> = (0..len).map(|i| b'a' + (i % 26) as u8).collect();
    sock.send_to(&payload, srv.addr).unwrap();
    let mut buf = vec![0u8; 70_000];
    let n = sock.recv(&mut buf).expect("an echo");
    let bar = buf[..n].iter().rposition(|&b| b == b'|').expect("a stamp");
    let stamp = common::stamp(std::str::from_utf8(&buf[bar + 1..n]).unwrap());
    (buf[..bar].to_vec(), stamp)
}

/// Issue 22: the example cut a 1,500-byte datagram to 1,024 bytes and said
/// nothing. Now whole (up to 65,535 bytes), and a datagram longer than the
/// receive length (MAXLEN) is reported truncated.
#[test]
fn c_udp_echo_never_truncates_silently() {
    for len in [1500, 9000, 65_000] {
        let (echo, stamp) = echo_of(&["127.0.0.1", "0", "toeplitz"], len);
        assert_eq!(echo.len(), len, "{stamp:?}");
        assert!(echo.iter().enumerate().all(|(i, &b)| b == b'a' + (i % 26) as u8));
        assert_eq!(stamp["truncated"], "false", "{stamp:?}");
    }
    let (echo, stamp) = echo_of(&["127.0.0.1", "0", "toeplitz", "1024"], 1500);
    assert_eq!(echo.len(), 1024);
    assert_eq!(stamp["truncated"], "true", "{stamp:?}");
    let (_, stamp) = echo_of(&["127.0.0.1", "0", "toeplitz", "1024"], 1024);
    assert_eq!(stamp["truncated"], "false", "{stamp:?}");
}

#[test]
fn c_udp_echo_refuses_bad_arguments() {
    let bad: [&[&str]; 6] = [
        &["nowhere", "0"],
        &["127.0.0.1", "0", "rss"],
        &[],
        &["127.0.0.1", "0", "cpu", "0"],
        &["127.0.0.1", "0", "cpu", "65536"],
        &["127.0.0.1", "0", "cpu", "12x"],
    ];
    for args in bad {
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
