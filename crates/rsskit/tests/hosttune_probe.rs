//! `rsskit check --probe`: against a real `rsskit udp-echo --steer cpu` on
//! loopback (the checker pinned to one CPU, so every flow is processed on
//! that CPU and must come back from it), against a fake server that answers
//! one flow from alternating CPUs, and against a closed port.

mod common;

use rsskit_runtime::proto::{self, ServerStamp};
use std::net::UdpSocket;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

fn check(args: &[&str]) -> std::process::Output {
    // Pinned: on loopback a datagram is processed on the sender's CPU.
    let mut c = Command::new("taskset");
    c.args(["-c", "0"]).arg(common::netns::rsskit()).args(["check", "--iface", "lo"]).args(args);
    c.output().expect("running taskset (util-linux)")
}

fn text(o: &std::process::Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

#[test]
fn probe_of_a_cpu_steered_echo_server() {
    let mut srv = common::proc::Running::spawn(&[
        "udp-echo",
        "--bind",
        "127.0.0.1:0",
        "--steer",
        "cpu",
        "--cpus",
        "0",
        "--duration",
        "60",
    ]);
    let banner = srv.wait_for("udp-echo: echo on ", Duration::from_secs(20));
    let at = banner.split("echo on ").nth(1).unwrap().split(',').next().unwrap().to_string();
    srv.wait_for("ready", Duration::from_secs(20));
    let out = check(&["--probe", &at, "--probe-flows", "16"]);
    let s = text(&out);
    assert_eq!(out.status.code(), Some(0), "{s}");
    assert!(s.contains(&format!("probe {at}: 16 flows x 8 datagrams, 128 replies; 16 flows each answered from one CPU (worker CPUs seen: 0)")), "{s}");
    let out = check(&["--probe", &at, "--probe-flows", "4", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["probe"]["replies"], 32, "{v}");
    assert_eq!(v["probe"]["split_flows"], 0);
    assert_eq!(v["aligned"], true);
    let _ = srv.signal_and_wait(libc::SIGINT, Duration::from_secs(10));
}

#[test]
fn probe_names_flows_answered_from_several_cpus() {
    // A fake server: echoes probes, stamping worker CPU 1 or 2 alternately
    // for the flow from the lowest source port seen, CPU 1 for the others.
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    sock.set_read_timeout(Some(Duration::from_millis(100))).unwrap();
    let at = sock.local_addr().unwrap().to_string();
    let stop = Arc::new(AtomicBool::new(false));
    let st = stop.clone();
    let server = std::thread::spawn(move || {
        let mut buf = [0u8; 2048];
        let mut n_seen = 0u32;
        let mut first: Option<u16> = None;
        while !st.load(Ordering::Relaxed) {
            let Ok((n, from)) = sock.recv_from(&mut buf) else { continue };
            let port = from.port();
            let odd = *first.get_or_insert(port) == port;
            n_seen += 1;
            let cpu = if odd && n_seen.is_multiple_of(2) { 2 } else { 1 };
            proto::write_stamp(
                &mut buf[..n],
                &ServerStamp { worker: 0, cpu, kernel_cpu: cpu, ..Default::default() },
            );
            let _ = sock.send_to(&buf[..n], from);
        }
    });
    let out = check(&["--probe", &at, "--probe-flows", "1"]);
    let s = text(&out);
    assert_eq!(out.status.code(), Some(1), "{s}");
    assert!(s.contains("probe: 1 of 1 flows were answered from several CPUs"), "{s}");
    assert!(s.contains("(CPUs 1-2)"), "{s}");
    stop.store(true, Ordering::Relaxed);
    server.join().unwrap();
}

#[test]
fn probe_of_a_closed_port_is_a_clear_error() {
    let port = {
        let s = UdpSocket::bind("127.0.0.1:0").unwrap();
        s.local_addr().unwrap().port()
    };
    let out = check(&["--probe", &format!("127.0.0.1:{port}")]);
    assert_eq!(out.status.code(), Some(1));
    let s = text(&out);
    assert!(s.contains("is `rsskit udp-echo --bind 127.0.0.1:"), "{s}");
    assert!(!s.contains("panicked"), "{s}");
}
