//! `rsskit table` and `rsskit find` end to end: JSON output checked against
//! the core, and every bad-input class exits non-zero with a one-line message.

use assert_cmd::Command;
use rsskit_core::{FlowTuple, HashType, L4Proto, RssKey, Toeplitz};
use serde_json::Value;
use std::net::SocketAddr;

fn rsskit(args: &[&str]) -> std::process::Output {
    Command::cargo_bin("rsskit").unwrap().args(args).output().unwrap()
}

/// [`json`] of a command line without quoting (words split at white space).
fn json_of(command_line: &str) -> Value {
    json(&command_line.split_whitespace().collect::<Vec<_>>())
}

fn json(args: &[&str]) -> Value {
    let out = rsskit(args);
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Exit code `code`, nothing on stdout, and for our own errors (code 1) one
/// stderr line `rsskit: error: ...` containing `needle`; never a panic.
fn fails(args: &[&str], code: i32, needle: &str) {
    let out = rsskit(args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "{args:?}: {err}");
    assert!(!err.contains("panicked"), "{args:?} panicked: {err}");
    assert!(err.contains(needle), "{args:?}: {err:?} lacks {needle:?}");
    if code == 1 {
        assert_eq!(err.lines().count(), 1, "{args:?}: not one line: {err}");
        assert!(err.starts_with("rsskit: error: "), "{err}");
    }
}

fn usizes(v: &Value) -> Vec<usize> {
    v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as usize).collect()
}

fn mismatches(table: &[usize], ring_cpus: &[usize], ncpus: usize, entries: usize) -> usize {
    (0..entries).filter(|&i| ring_cpus[table[i]] != (i & 127) % ncpus).count()
}

#[test]
fn table_paper_example() {
    let v = json(&["table", "--cpus", "24", "--rings", "16", "--json"]);
    assert_eq!(v["grid"], 24);
    assert_eq!(v["rings"], 16);
    let ring_cpus = usizes(&v["ring_cpus"]);
    assert_eq!(ring_cpus, (0..16).collect::<Vec<_>>());
    let table = usizes(&v["table"]);
    assert_eq!(table.len(), 128);
    assert_eq!(mismatches(&table, &ring_cpus, 24, 48), 16);
    let replicated: Vec<usize> = (0..128).map(|i| i % 16).collect();
    assert_eq!(mismatches(&replicated, &ring_cpus, 24, 48), 32);
    assert_eq!(v["mismatches"], mismatches(&table, &ring_cpus, 24, 128));
    assert_eq!(v["mismatches"], 40);
    assert_eq!(v["replicate_mismatches"], mismatches(&replicated, &ring_cpus, 24, 128));
    assert!(v.get("tx_ring_cpus").is_none());
    assert_eq!(usizes(&v["histogram"]).iter().sum::<usize>(), 128);
    // The text table marks exactly those entries.
    let out = rsskit(&["table", "--cpus", "24", "--rings", "16"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(text.matches('*').count(), 40 + 1, "40 marks and the legend's: {text}");
    assert!(text.contains("mismatches: 40 of 128"), "{text}");
}

#[test]
fn table_options() {
    let v = json(&["table", "--cpus", "12", "--rings", "4", "--tx-rings", "2", "--unit", "3", "--json"]);
    assert_eq!(usizes(&v["ring_cpus"]), [0, 1, 2, 3]);
    assert_eq!(usizes(&v["tx_ring_cpus"]), [2, 3]);
    let v = json(&["table", "--cpus", "24", "--rings", "12", "--pow2", "--size", "512", "--json"]);
    assert_eq!((v["rings"].as_u64(), v["grid"].as_u64()), (Some(8), Some(8)));
    let table = usizes(&v["table"]);
    assert_eq!(table.len(), 512);
    assert_eq!(&table[128..256], &table[..128]);
    // More rings than CPUs: capped, and said so in the text output.
    let out = rsskit(&["table", "--cpus", "4", "--rings", "8"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("8 rings asked for, 4 used"), "{text}");
    assert!(text.contains("mismatches: 0 of 128"), "{text}");
}

#[test]
fn table_bad_input() {
    fails(&["table", "--cpus", "0", "--rings", "4"], 2, "at least 1");
    fails(&["table", "--cpus", "4", "--rings", "0"], 2, "at least 1");
    fails(&["table", "--cpus", "4", "--rings", "x"], 2, "not a whole number");
    fails(&["table", "--cpus", "4", "--rings", "4", "--tx-rings", "0"], 2, "at least 1");
    fails(
        &["table", "--cpus", "200", "--rings", "200"],
        1,
        "200 rings do not fit a redirect table of 128 entries",
    );
    fails(
        &["table", "--cpus", "4", "--rings", "4", "--size", "100"],
        2,
        "not a multiple of 128 from 128 to 65536",
    );
    fails(&["table", "--cpus", "4", "--rings", "4", "--size", "0"], 2, "not a multiple of 128");
    fails(&["table", "--cpus", "4", "--rings", "4", "--size", "1073741824"], 2, "to 65536");
    fails(&["table", "--rings", "4"], 2, "--cpus");
}

fn hash(ht: HashType, src: SocketAddr, dst: SocketAddr) -> u32 {
    let t = FlowTuple::new(src.ip(), src.port(), dst.ip(), dst.port(), L4Proto::Tcp);
    Toeplitz::new(&RssKey::microsoft()).hash(t.input(ht).unwrap().as_bytes())
}

#[test]
fn find_ports_bucket() {
    let v = json_of(
        "find --dst 127.0.0.1:9000 --src-ports 1024-65535 --bucket 3 --proto udp --cpus 4 --count 20 --json",
    );
    assert_eq!(v["hash_type"], "udp-ipv4");
    assert_eq!(v["buckets"], 8);
    let tuples = v["tuples"].as_array().unwrap();
    assert_eq!(tuples.len(), 20);
    let dst: SocketAddr = "127.0.0.1:9000".parse().unwrap();
    let mut last = 0;
    for t in tuples {
        let src: SocketAddr = t["src"].as_str().unwrap().parse().unwrap();
        assert_eq!(src.ip().to_string(), "127.0.0.1");
        assert!(src.port() >= 1024 && src.port() > last);
        last = src.port();
        let h = hash(HashType::UdpIpv4, src, dst);
        assert_eq!(t["hash"], h);
        assert_eq!(t["bucket"], 3);
        assert_eq!(h & 7, 3);
    }
    // The same answer from `rsskit hash` for the first tuple.
    let first = tuples[0]["src"].as_str().unwrap();
    let h =
        json(&["hash", "--src", first, "--dst", "127.0.0.1:9000", "--proto", "udp", "--cpus", "4", "--json"]);
    assert_eq!(h["hash"], tuples[0]["hash"]);
    assert_eq!(h["bucket"], 3);
}

#[test]
fn find_net_cpu_ipv6() {
    let v = json_of("find --dst [2001:db8::1]:443 --src-net 2001:db8:1::/64 --src-port 4000 --cpu 1 --proto tcp --cpus 3 --json");
    assert_eq!(v["hash_type"], "tcp-ipv6");
    assert_eq!(v["cpu"], 1);
    let buckets = usizes(&v["target_buckets"]);
    assert_eq!(buckets, [1, 4, 7]); // 8 buckets round-robin over 3 CPUs
    let dst: SocketAddr = "[2001:db8::1]:443".parse().unwrap();
    let tuples = v["tuples"].as_array().unwrap();
    assert_eq!(tuples.len(), 8);
    for t in tuples {
        let s = t["src"].as_str().unwrap();
        assert!(s.starts_with("[2001:db8:1::") && s.ends_with("]:4000"), "{s}");
        let src: SocketAddr = s.parse().unwrap();
        let h = hash(HashType::TcpIpv6, src, dst);
        assert_eq!(t["hash"], h);
        assert!(buckets.contains(&((h & 7) as usize)));
        assert_eq!(t["cpu"], 1);
    }
    // Without --proto: the 2-tuple, the source port plays no part.
    let v = json_of("find --dst 10.0.0.1:80 --src-net 10.0.1.0/24 --bucket 0 --cpus 2 --json");
    assert_eq!(v["hash_type"], "ipv4");
    assert!(!v["tuples"].as_array().unwrap().is_empty());
}

/// --ring: tuples whose redirect table entry (DragonFly ringmap) holds the ring.
#[test]
fn find_ring() {
    let table = json(&["table", "--cpus", "24", "--rings", "16", "--json"]);
    let entries = usizes(&table["table"]);
    let v = json_of("find --dst 127.0.0.1:80 --src-ports 1024-65535 --ring 13 --rings 16 --cpus 24 --proto tcp --count 30 --json");
    assert_eq!(v["ring"], 13);
    let want: Vec<usize> = (0..128).filter(|&i| entries[i] == 13).collect();
    assert_eq!(usizes(&v["target_buckets"]), want);
    let dst: SocketAddr = "127.0.0.1:80".parse().unwrap();
    let tuples = v["tuples"].as_array().unwrap();
    assert_eq!(tuples.len(), 30);
    for t in tuples {
        let h = hash(HashType::TcpIpv4, t["src"].as_str().unwrap().parse().unwrap(), dst);
        assert_eq!(t["hash"], h);
        assert_eq!(entries[(h & 127) as usize], 13);
        assert_eq!(
            (t["ring"].as_u64(), t["cpu"].as_u64(), t["bucket"].as_u64()),
            (Some(13), Some(13), Some((h & 127) as u64))
        );
    }
    let base = ["find", "--dst", "127.0.0.1:80", "--src-ports", "1-65535", "--proto", "tcp", "--cpus", "24"];
    let with = |extra: &[&'static str]| -> Vec<&'static str> { base.iter().chain(extra).copied().collect() };
    fails(&with(&["--ring", "16", "--rings", "16"]), 1, "--ring 16 does not exist");
    fails(&with(&["--ring", "1"]), 2, "--rings");
    fails(&with(&["--ring", "1", "--rings", "4", "--bits", "3"]), 1, "--bits is for --bucket/--cpu");
    fails(&with(&["--ring", "1", "--rings", "200"]), 1, "do not fit a redirect table");
    fails(&with(&["--ring", "1", "--rings", "4", "--bucket", "2"]), 2, "cannot be used");
}

#[test]
fn find_text_names_hash_type() {
    let out = rsskit(&[
        "find",
        "--dst",
        "127.0.0.1:80",
        "--src-ports",
        "1-65535",
        "--cpu",
        "0",
        "--proto",
        "tcp",
        "--cpus",
        "2",
    ]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("tcp-ipv4 hash"), "{text}");
    assert_eq!(text.lines().count(), 9);
}

#[test]
fn find_bad_input() {
    let base = ["find", "--dst", "127.0.0.1:80", "--proto", "tcp", "--cpus", "4"];
    let with = |extra: &[&'static str]| -> Vec<&'static str> { base.iter().chain(extra).copied().collect() };
    fails(&with(&["--src-ports", "1-100", "--bucket", "8"]), 1, "bucket 8 does not exist");
    fails(&with(&["--src-ports", "1-100", "--bucket", "1", "--bits", "9"]), 2, "at most 7 (range 1-7)");
    fails(&with(&["--src-ports", "1-100", "--cpu", "4"]), 1, "--cpu 4 does not exist");
    fails(
        &[
            "find",
            "--dst",
            "127.0.0.1:80",
            "--src-ports",
            "1-9",
            "--cpu",
            "150",
            "--cpus",
            "200",
            "--proto",
            "tcp",
        ],
        1,
        "owns no bucket",
    );
    fails(&with(&["--src-ports", "2000-1000", "--bucket", "1"]), 2, "empty");
    fails(&with(&["--src-ports", "1-70000", "--bucket", "1"]), 2, "not a port");
    fails(&with(&["--src-net", "10.0.0.0/33", "--src-port", "1", "--bucket", "1"]), 2, "not 0-32");
    fails(&with(&["--src-net", "10.0.0/8", "--src-port", "1", "--bucket", "1"]), 2, "not an IP address");
    fails(&with(&["--src-net", "10.0.0.0/8", "--bucket", "1"]), 1, "needs --src-port");
    fails(
        &with(&["--src-net", "::/64", "--src-port", "1", "--bucket", "1"]),
        1,
        "different address families",
    );
    fails(&with(&["--src-ports", "1-100", "--src", "::1", "--bucket", "1"]), 1, "different address families");
    fails(&with(&["--src-ports", "1-100"]), 2, "--bucket");
    fails(&with(&["--bucket", "1"]), 2, "--src-ports");
    fails(&with(&["--src-ports", "1-100", "--src-net", "10.0.0.0/8", "--bucket", "1"]), 2, "cannot be used");
    fails(&with(&["--src-ports", "1-100", "--bucket", "1", "--key", "6d5a"]), 2, "at least 40 bytes");
    fails(&with(&["--src-ports", "1-100", "--bucket", "1", "--count", "0"]), 2, "at least 1");
    fails(
        &["find", "--dst", "127.0.0.1", "--src-ports", "1-100", "--bucket", "1", "--proto", "tcp"],
        1,
        "needs a port",
    );
    fails(&["find", "--dst", "127.0.0.1:80", "--src-ports", "1-100", "--bucket", "1"], 1, "needs --proto");
    // No solution in the range: a single port that lands elsewhere.
    let dst: SocketAddr = "127.0.0.1:80".parse().unwrap();
    let b = hash(HashType::TcpIpv4, "127.0.0.1:5000".parse().unwrap(), dst) & 127;
    let other = ((b + 1) % 128).to_string();
    let bucket_elsewhere = |sources: &str, needle: &str| {
        let line = format!("find --dst 127.0.0.1:80 {sources} --bucket {other} --proto tcp --bits 7");
        fails(&line.split_whitespace().collect::<Vec<_>>(), 1, needle);
    };
    bucket_elsewhere("--src-ports 5000", "no source port in the given range lands there");
    // A /32 whose only address lands elsewhere.
    bucket_elsewhere("--src-net 127.0.0.1/32 --src-port 5000", "no source address lands there");
}
