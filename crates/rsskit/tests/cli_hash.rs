//! `rsskit hash` end to end: the spec vectors, and every class of bad input
//! exits non-zero with a one-line message naming the problem (never a panic).

use assert_cmd::Command;
use serde_json::Value;

fn rsskit() -> Command {
    Command::cargo_bin("rsskit").unwrap()
}

fn json(args: &[&str]) -> Value {
    let out = rsskit().args(args).arg("--json").output().unwrap();
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Runs a failing command; returns its stderr, checked to be a short message
/// and not a panic.
fn fails(args: &[&str]) -> String {
    let out = rsskit().args(args).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "{args:?} should fail");
    assert!(matches!(out.status.code(), Some(1) | Some(2)), "{args:?}: exit {:?}", out.status.code());
    assert!(!err.contains("panicked"), "{args:?} panicked: {err}");
    assert!(out.stdout.is_empty(), "{args:?} printed to stdout");
    err
}

#[test]
fn spec_vector_tcp_ipv4() {
    let v = json(&["hash", "--src", "66.9.149.187:2794", "--dst", "161.142.100.80:1766", "--proto", "tcp"]);
    assert_eq!(v["hash"], 1372373368u32); // 0x51ccc178
    assert_eq!(v["hash_type"], "tcp-ipv4");
}

#[test]
fn spec_vectors_two_tuple_and_ipv6() {
    let v = json(&["hash", "--src", "66.9.149.187", "--dst", "161.142.100.80"]);
    assert_eq!(v["hash"], 0x323e8fc2u32);
    let v = json(&[
        "hash",
        "--src",
        "[3ffe:2501:200:1fff::7]:2794",
        "--dst",
        "[3ffe:2501:200:3::1]:1766",
        "--proto",
        "tcp",
    ]);
    assert_eq!(v["hash"], 0x40207d3du32);
    assert_eq!(v["hash_type"], "tcp-ipv6");
    let v = json(&["hash", "--src", "3ffe:2501:200:1fff::7", "--dst", "3ffe:2501:200:3::1"]);
    assert_eq!(v["hash"], 0x2cc18cd5u32);
    assert_eq!(v["hash_type"], "ipv6");
}

#[test]
fn text_output_has_hex_hash() {
    let out = rsskit()
        .args(["hash", "--src", "66.9.149.187:2794", "--dst", "161.142.100.80:1766", "--proto", "tcp"])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("0x51ccc178"));
}

#[test]
fn bucket_and_cpu_follow_bits() {
    let v = json(&[
        "hash",
        "--src",
        "66.9.149.187:2794",
        "--dst",
        "161.142.100.80:1766",
        "--proto",
        "tcp",
        "--bits",
        "3",
        "--cpus",
        "3",
    ]);
    let h = v["hash"].as_u64().unwrap();
    assert_eq!(v["bucket"].as_u64().unwrap(), h & 7);
    assert_eq!(v["buckets"], 8);
    assert_eq!(v["cpu"].as_u64().unwrap(), (h & 7) % 3);
}

#[test]
fn symmetric_and_random_keys() {
    let udp = |src: &str, dst: &str, key: &str| {
        json(&["hash", "--src", src, "--dst", dst, "--proto", "udp", "--key", key])
    };
    let a = udp("10.0.0.1:1000", "10.0.0.2:80", "symmetric");
    let b = udp("10.0.0.2:80", "10.0.0.1:1000", "symmetric");
    assert_eq!(a["hash"], b["hash"]);
    let r1 = udp("10.0.0.1:1000", "10.0.0.2:80", "random");
    let r2 = udp("10.0.0.1:1000", "10.0.0.2:80", "random");
    assert_eq!(r1["key"].as_str().unwrap().len(), 80);
    assert_ne!(r1["key"], r2["key"]);
    // The printed key reproduces the hash.
    let k = r1["key"].as_str().unwrap();
    let again = udp("10.0.0.1:1000", "10.0.0.2:80", k);
    assert_eq!(again["hash"], r1["hash"]);
}

#[test]
fn malformed_address() {
    for bad in ["300.1.1.1", "1.2.3", "66.9.149.187:99999", "nonsense", "[::1"] {
        let e = fails(&["hash", "--src", bad, "--dst", "161.142.100.80"]);
        assert!(e.contains("is not an address"), "{bad}: {e}");
        assert!(e.contains(bad), "message names the input: {e}");
    }
}

#[test]
fn key_wrong_length_or_not_hex() {
    let e = fails(&["hash", "--src", "1.2.3.4", "--dst", "5.6.7.8", "--key", "6d5a56da"]);
    assert!(e.contains("4 bytes") && e.contains("40"), "{e}");
    let e = fails(&["hash", "--src", "1.2.3.4", "--dst", "5.6.7.8", "--key", "6d5a56d"]);
    assert!(e.contains("odd number of hex digits"), "{e}");
    let e = fails(&["hash", "--src", "1.2.3.4", "--dst", "5.6.7.8", "--key", &"zz".repeat(40)]);
    assert!(e.contains("not hex"), "{e}");
}

#[test]
fn port_without_proto() {
    let e = fails(&["hash", "--src", "1.2.3.4:1000", "--dst", "5.6.7.8:80"]);
    assert!(e.contains("--proto"), "{e}");
    assert_eq!(e.lines().count(), 1, "one line: {e}");
    let e = fails(&["hash", "--src", "1.2.3.4:1000", "--dst", "5.6.7.8", "--proto", "tcp"]);
    assert!(e.contains("port"), "{e}");
}

#[test]
fn mixed_families() {
    let e = fails(&["hash", "--src", "1.2.3.4", "--dst", "::1"]);
    assert!(e.contains("different address families"), "{e}");
    assert_eq!(e.lines().count(), 1, "one line: {e}");
}

#[test]
fn bad_bits_and_cpus() {
    let e = fails(&["hash", "--src", "1.2.3.4", "--dst", "5.6.7.8", "--bits", "9"]);
    assert!(e.contains("bits"), "{e}");
    let e = fails(&["hash", "--src", "1.2.3.4", "--dst", "5.6.7.8", "--cpus", "0"]);
    assert!(e.contains("at least 1"), "{e}");
}

/// The Microsoft key with key bits `bits` cleared, as hex.
fn microsoft_without(bits: std::ops::Range<usize>) -> String {
    let mut b = rsskit_core::key::MICROSOFT_KEY;
    for i in bits {
        b[i / 8] &= !(0x80u8 >> (i % 8));
    }
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[test]
fn weak_keys_are_refused_everywhere_unless_allowed() {
    let zero = "00".repeat(40);
    let rules = std::env::temp_dir().join(format!("rsskit-weakkey-rules-{}", std::process::id()));
    std::fs::write(&rules, "").unwrap();
    let rules = rules.to_str().unwrap().to_string();
    // Every command that takes --key checks it, before it starts anything.
    let cmds: &[&[&str]] = &[
        &["hash", "--src", "10.0.0.1", "--dst", "10.0.0.2"],
        &["find", "--dst", "10.0.0.1:80", "--src-ports", "1024-2000", "--proto", "tcp", "--bucket", "1"],
        &["udp-echo", "--bind", "127.0.0.1:0"],
        &["udp-load", "--target", "127.0.0.1:9"],
        &["http-serve", "--bind", "127.0.0.1:0"],
        &["http-load", "--url", "http://127.0.0.1:9/"],
        &["firewall", "--rules", &rules, "--in", "pcap:/nonexistent"],
        &["pipeline", "--in", "pcap:/nonexistent"],
        &["bench", "toeplitz"],
        &["steer", "--pid", "1", "--steer", "toeplitz"],
        &["run", "--steer", "toeplitz", "--", "/bin/false"],
    ];
    for args in cmds {
        // --key before the rest: `run` passes what follows `--` to its command.
        let split = if args[0] == "bench" { 2 } else { 1 };
        let out = rsskit().args(&args[..split]).args(["--key", &zero]).args(&args[split..]).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}: {err}");
        assert!(err.contains("weak RSS key: it cannot reach every one of the"), "{args:?}: {err}");
        assert!(err.contains("reaches only 2^0 of 2^"), "{args:?}: {err}");
        assert!(err.contains("--allow-weak-key"), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
    let _ = std::fs::remove_file(&rules);
    // Overridden: used (every flow lands in bucket 0), with the reasons as warnings.
    let out = rsskit()
        .args([
            "hash",
            "--src",
            "10.0.0.1",
            "--dst",
            "10.0.0.2",
            "--json",
            "--allow-weak-key",
            "--key",
            &zero,
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["hash"], 0);
    assert!(err.contains("warning: --key: ipv4: varying the source address reaches only 2^0 of 2^"), "{err}");
}

#[test]
fn key_is_judged_for_the_hash_type_and_buckets_in_use() {
    // IPv6 source-port windows dead on the low 7 bucket bits (key bits
    // 281..303; no IPv4 input reaches them): a property of the IPv6
    // 4-tuple only. Issue 22: this was refused even when hashing IPv4.
    let v6_port_dead = microsoft_without(281..304);
    let v4 = ["hash", "--src", "10.0.0.1:1000", "--dst", "10.0.0.2:80", "--proto", "tcp", "--cpus", "64"];
    let out = rsskit().args(v4).args(["--key", &v6_port_dead]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.is_empty(), "nothing to say for tcp-ipv4: {err}");
    // Hashing the IPv6 4-tuple: accepted (the address still reaches every
    // bucket), warned naming the field.
    let v6 = [
        "hash",
        "--src",
        "[2001:db8::1]:1000",
        "--dst",
        "[2001:db8::2]:80",
        "--proto",
        "tcp",
        "--cpus",
        "64",
    ];
    let out = rsskit().args(v6).args(["--key", &v6_port_dead]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains(
            "warning: --key: tcp-ipv6: varying the source port alone reaches only 2^0 of 2^7 buckets"
        ),
        "{err}"
    );
    // IPv4 source-address windows alive on 2 bucket bits only (key bits
    // 25..63 alternating): refused for 128 buckets, fine for 4.
    let mut b = rsskit_core::key::MICROSOFT_KEY;
    b[3..8].fill(0x55);
    let two_bits: String = b.iter().map(|x| format!("{x:02x}")).collect();
    let e = fails(&["hash", "--src", "10.0.0.1", "--dst", "10.0.0.2", "--bits", "7", "--key", &two_bits]);
    assert!(e.contains("ipv4: varying the source address reaches only 2^2 of 2^7 buckets"), "{e}");
    assert!(e.contains("every one of the 128 buckets in use"), "{e}");
    let out = rsskit()
        .args(["hash", "--src", "10.0.0.1", "--dst", "10.0.0.2", "--bits", "2", "--key", &two_bits])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn uneven_key_warns() {
    // Full rank (every bucket reachable) but the low 10 source-port bits are
    // ignored on the bucket bits: consecutive ports pile up. Accepted, warned.
    let hex = microsoft_without(95..111);
    let out = rsskit()
        .args(["hash", "--src", "10.0.0.1:1", "--dst", "10.0.0.2:2", "--proto", "udp", "--bits", "7"])
        .args(["--key", &hex])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("rsskit: warning: --key: udp-ipv4: 8192 consecutive source ports reach only 2^"),
        "{err}"
    );
    // A good key says nothing.
    let out = rsskit().args(["hash", "--src", "10.0.0.1", "--dst", "10.0.0.2"]).output().unwrap();
    assert!(out.stderr.is_empty(), "{}", String::from_utf8_lossy(&out.stderr));
}
