//! `rsskit bench toeplitz`: output shape (a short run; this is not a timed test).

use assert_cmd::Command;
use serde_json::Value;

fn rsskit() -> Command {
    Command::cargo_bin("rsskit").unwrap()
}

#[test]
fn json_has_every_impl_and_input() {
    let out = rsskit()
        .args(["bench", "toeplitz", "--json", "--iters", "4096", "--rounds", "1", "--count", "64"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let results = v["results"].as_array().unwrap();
    for imp in ["reference", "fast", "batch"] {
        for input in ["ipv4-4tuple", "ipv6-4tuple"] {
            let r = results
                .iter()
                .find(|r| r["impl"] == imp && r["input"] == input)
                .unwrap_or_else(|| panic!("no {imp}/{input} in {v}"));
            let ns = r["ns_per_hash"].as_f64().unwrap();
            assert!(ns > 0.0 && ns.is_finite(), "{imp}/{input}: {ns}");
        }
    }
    // The backend the run-time detection must pick on this CPU.
    assert_eq!(v["batch_backend"], expected_batch_backend(), "{v}");
    assert!(["clmul", "avx2-clmul", "scalar"].contains(&v["fast_backend"].as_str().unwrap()), "{v}");
    // The default key hashes the spec vector to 0x51ccc178.
    assert_eq!(v["check"]["spec_vector_tcp_ipv4"], 0x51ccc178u32);
}

/// What `Toeplitz::backend` must pick on this CPU (its run-time detection).
fn expected_batch_backend() -> &'static str {
    #[cfg(target_arch = "x86_64")]
    {
        use std::is_x86_feature_detected as has;
        if has!("avx512f") && has!("avx512bw") && has!("avx512vl") && has!("avx512vbmi") && has!("gfni") {
            return "gfni";
        }
        if has!("avx2") && has!("pclmulqdq") && has!("vpclmulqdq") {
            return "avx2-clmul";
        }
    }
    "scalar"
}

#[test]
fn peers_must_agree() {
    let dir = std::env::temp_dir().join(format!("rsskit-bench-peers-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("peers.json");
    // A peer that hashed something else is refused.
    std::fs::write(
        &f,
        r#"{"results": [{"impl": "x", "input": "ipv4-4tuple", "ns_per_hash": 1.0}],
            "check": {"spec_vector_tcp_ipv4": 1, "xor_ipv4-4tuple": 0, "xor_ipv6-4tuple": 0}}"#,
    )
    .unwrap();
    let out = rsskit()
        .args(["bench", "toeplitz", "--json", "--iters", "2048", "--rounds", "1", "--count", "64"])
        .arg("--peers")
        .arg(&f)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("disagrees on spec_vector_tcp_ipv4"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_count_is_refused() {
    let out = rsskit().args(["bench", "toeplitz", "--count", "100"]).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("power of two"));
}
