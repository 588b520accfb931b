//! Shared by the Rust examples' test (`examples.rs`) and the C example's
//! test (`rsskit-capi/tests/c_program.rs` includes this file by path): a
//! server process that says `listening on ADDR`, and the checks of its echo
//! stamps against a policy the test computes itself.

use rsskit_app::{online_cpus, CpuId, FlowTuple, HashConfig, L4Proto, RssKey, RssPolicy, WorkerId};
use std::collections::{BTreeSet, HashMap};
use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, UdpSocket};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A running example server, killed on drop.
pub struct Server {
    child: Child,
    /// Where it listens (its first line of output).
    pub addr: SocketAddr,
}

impl Server {
    /// Starts `cmd` and waits for its `listening on ADDR` line.
    pub fn start(cmd: &mut Command) -> Server {
        let mut child =
            cmd.stdout(Stdio::piped()).stderr(Stdio::inherit()).spawn().expect("starting the example");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let addr = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .parse()
            .unwrap();
        Server { child, addr }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The examples' policy: every online CPU, Microsoft key, UDP hashed on
/// ports too when `udp4`.
pub fn policy(udp4: bool) -> RssPolicy {
    let cpus: Vec<CpuId> = online_cpus().into_iter().map(|c| CpuId(c as u32)).collect();
    RssPolicy::new(RssKey::microsoft(), HashConfig::default().with_udp_4tuple(udp4), &cpus, None).unwrap()
}

/// `key=value` pairs of a reply's stamp.
pub fn stamp(s: &str) -> HashMap<String, String> {
    s.split_whitespace().filter_map(|kv| kv.split_once('=')).map(|(k, v)| (k.into(), v.into())).collect()
}

/// Checks one reply against the test's own policy: the owner, bucket and
/// hash it computes for the flow, and the mode's promise (toeplitz: the
/// owner serves it; cpu: the worker runs on the CPU that processed it).
pub fn check(st: &HashMap<String, String>, p: &RssPolicy, flow: &FlowTuple, mode: &str) {
    let hash = p.hash_tuple(flow);
    let owner = p.worker_of_hash(hash);
    assert_eq!(st["hash"], format!("{hash:08x}"), "{st:?}");
    assert_eq!(st["bucket"], p.bucket(hash).to_string(), "{st:?}");
    assert_eq!(st["owner"], owner.0.to_string(), "{st:?}");
    let worker: u32 = st["worker"].parse().unwrap();
    assert_eq!(st["cpu"], p.cpu_of(WorkerId(worker)).unwrap().0.to_string(), "{st:?}");
    match mode {
        "toeplitz" => {
            assert_eq!(worker, owner.0, "served by the bucket's owner: {st:?}");
            assert_eq!(st["misdirected"], "false");
        }
        "cpu" => assert_eq!(st["kernel_cpu"], st["cpu"], "served on the CPU that processed it: {st:?}"),
        other => panic!("no check for mode {other}"),
    }
}

/// 24 UDP flows from fresh ports to a UDP echo example in `mode`, each
/// reply checked with [`check`]; in `toeplitz` mode on several CPUs they
/// must not all land on one worker.
pub fn udp_flows(server: &Server, mode: &str) {
    let p = policy(true);
    let mut workers_seen = BTreeSet::new();
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
        let st = stamp(rest);
        let local = c.local_addr().unwrap();
        let flow =
            FlowTuple::new(local.ip(), local.port(), server.addr.ip(), server.addr.port(), L4Proto::Udp);
        check(&st, &p, &flow, mode);
        workers_seen.insert(st["worker"].clone());
    }
    if mode == "toeplitz" && p.workers() > 1 {
        assert!(workers_seen.len() > 1, "24 flows all on one worker: {workers_seen:?}");
    }
}
