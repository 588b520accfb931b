//! UDP GSO bursts across a veth between two network namespaces: `rsskit
//! udp-load --gso 16` in the client namespace, `rsskit udp-echo` (GRO + GSO
//! by default, and with --no-offload) in the server one. Every datagram is
//! accounted for and served by its bucket's owner, with offload on or off.
//! Needs root and `ip` (fails loudly without them); namespaces and processes
//! are removed on drop, every run is bounded by --count and wait limits.

mod common;

use common::netns::{self, all_cpus, bracket, json_of, u, Pair, Proc};
use serde_json::Value;
use std::time::Duration;

const BITS: &str = "2";

fn run(v6: bool, server_extra: &[&str]) -> (Value, Value) {
    let pair = Pair::new(24);
    let (srv, net) =
        if v6 { (netns::SERVER_V6, netns::EXTRA_V6_NET) } else { (netns::SERVER_V4, netns::EXTRA_V4_NET) };
    let port = netns::test_port(20000, 20000);
    let bind = bracket(srv, port);
    let mut cmd = pair.server.command(&netns::rsskit());
    cmd.args(["udp-echo", "--bind", &bind, "--cpus", &all_cpus(), "--steer", "toeplitz", "--json"]);
    cmd.args(["--bits", BITS, "--duration", "30"]);
    cmd.args(server_extra);
    let server = Proc::spawn(cmd);
    let hex = format!(":{port:04X} ");
    let sockets = std::thread::available_parallelism().map_or(1, |n| n.get());
    let up = netns::wait_until(Duration::from_secs(10), || {
        pair.server.read(if v6 { "/proc/net/udp6" } else { "/proc/net/udp" }).matches(&hex).count() >= sockets
    });
    assert!(up, "udp-echo did not bind {sockets} socket(s) on {bind} within 10 s");
    std::thread::sleep(Duration::from_millis(200));
    let mut cmd = pair.client.command(&netns::rsskit());
    cmd.args([
        "udp-load",
        "--target",
        &bind,
        "--spread-buckets",
        "--src-net",
        net,
        "--server-cpus",
        &all_cpus(),
    ]);
    cmd.args(["--client-cpus", "none", "--bits", BITS, "--json"]);
    cmd.args(["--streams", "4", "--count", "320", "--window", "32", "--gso", "16", "--drain", "1"]);
    let out = Proc::spawn(cmd).wait(Duration::from_secs(30));
    assert!(out.status.success(), "udp-load failed: {}", String::from_utf8_lossy(&out.stderr));
    let c = json_of(&out, "udp-load");
    server.signal(libc::SIGTERM);
    let out = server.wait(Duration::from_secs(10));
    assert_eq!(out.status.code(), Some(0), "udp-echo: {}", String::from_utf8_lossy(&out.stderr));
    (c, json_of(&out, "udp-echo"))
}

fn check(c: &Value, s: &Value) {
    assert_eq!(c["offload"]["gso"], 16, "{}", c["offload"]);
    let sent = u(c, "sent");
    assert_eq!(sent, 4 * 320, "every stream sends its --count");
    assert_eq!(u(c, "echoed") + u(c, "lost"), sent, "client: sent == echoed + lost");
    assert_eq!((u(c, "invalid"), u(c, "duplicates")), (0, 0));
    for st in c["streams"].as_array().unwrap() {
        assert_eq!(st["match"], Value::Bool(true), "served by the worker owning its bucket: {st}");
        assert_eq!(u(st, "flagged_misdirected"), 0, "{st}");
    }
    let t = &s["totals"];
    let k = &s["kernel"];
    let drops = ["rcvbuf_errors", "in_errors"].iter().filter_map(|key| k[*key].as_u64()).max().unwrap_or(0);
    assert_eq!(sent, u(t, "received") + drops, "client sent == server received + kernel drops: {s}");
    assert_eq!(u(t, "received"), u(t, "sent") + u(t, "dropped"), "server: in == out + dropped: {t}");
    assert_eq!(u(t, "misdirected"), 0, "{t}");
}

fn scenario(v6: bool) {
    let (c, s) = run(v6, &[]);
    check(&c, &s);
    assert_eq!(s["offload"]["gro"], true, "GRO + GSO by default: {}", s["offload"]);
    // The GSO bursts cross the veth whole and reach the GRO socket coalesced.
    assert!(u(&s["totals"], "coalesced") > 0, "{}", s["totals"]);
    let (c, s) = run(v6, &["--no-offload"]);
    check(&c, &s);
    assert_eq!(s["offload"]["gro"], false);
    assert_eq!(u(&s["totals"], "coalesced"), 0, "{}", s["totals"]);
}

#[test]
fn gso_bursts_across_a_veth_ipv4() {
    scenario(false);
}

#[test]
fn gso_bursts_across_a_veth_ipv6() {
    scenario(true);
}
