//! The examples, built and run: real per-CPU servers on loopback, driven
//! by flows whose owner the test computes itself from the policy.

mod common;

use common::{check, policy, stamp, Server};
use rsskit_app::{FlowTuple, L4Proto};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::Command;
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

fn start(name: &str, bind: &str, mode: &str) -> Server {
    Server::start(Command::new(example(name)).args([bind, mode]))
}

fn udp_flows(bind: &str, mode: &str) {
    common::udp_flows(&start("udp_echo", bind, mode), mode);
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
    let server = start("tcp_server", bind, mode);
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
