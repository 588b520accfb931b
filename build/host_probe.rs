//! Build script shared by the crates whose tests depend on the machine
//! (`build = "../../build/host_probe.rs"`): it probes the build host and sets
//! cfgs that tests use as `#[cfg_attr(rsskit_..., ignore = "reason")]`, so
//! a check this machine cannot run shows up as *ignored, with the reason* in
//! `cargo test` output instead of passing silently.
//!
//! - `rsskit_no_avx512_clmul`: the CPU lacks AVX-512 (F/BW/VL), GFNI or
//!   VPCLMULQDQ, so the VPCLMULQDQ single-hash backend cannot run;
//! - `rsskit_no_avx512_gfni`: the CPU lacks AVX-512 (F/BW/VL/VBMI) or GFNI,
//!   so the GFNI batch backend cannot run.
//! - `rsskit_no_avx2_clmul`: the CPU lacks AVX2, PCLMULQDQ or VPCLMULQDQ,
//!   so the AVX2 carry-less multiplication backend cannot run.
//! - `rsskit_no_pmull`: an aarch64 build host without PMULL (cross builds
//!   for aarch64 run their tests under `qemu-aarch64`, which has it).
//! - `rsskit_one_cpu`: fewer than two CPUs are available to this process.
//! - `rsskit_no_qemu`: QEMU cannot start here (no `qemu-system-x86_64`, or
//!   no `/dev/net/tun` for its tap), so the lab (`scripts/lab`) cannot run.
//!   `scripts/install-deps.sh` installs QEMU; only a machine without it or
//!   without tun skips the lab tests.
//! - `rsskit_no_pod_emulation` (package `rsskit` only): `scripts/pod-emulate`
//!   cannot run here: `unshare`, `nsenter`, `setpriv` or `pivot_root`
//!   missing, `unshare --mount --pid --fork` not permitted (not root, or a
//!   sandbox without CAP_SYS_ADMIN), or no mmdebstrap to make the bookworm
//!   root and none cached (`target/pkgtest/bookworm-minbase.tar`). A build
//!   warning names which.
//!
//! Tests run on the machine that built them (no cross-compiled test runs).

// The backends' feature lists (the same the vector backends check at run time).
include!("../crates/rsskit-core/src/toeplitz/features.rs");

fn main() {
    println!("cargo::rerun-if-changed=../../build/host_probe.rs");
    println!("cargo::rerun-if-changed=../rsskit-core/src/toeplitz/features.rs");
    println!("cargo::rustc-check-cfg=cfg(rsskit_no_avx512_clmul)");
    println!("cargo::rustc-check-cfg=cfg(rsskit_no_avx512_gfni)");
    println!("cargo::rustc-check-cfg=cfg(rsskit_one_cpu)");
    println!("cargo::rustc-check-cfg=cfg(rsskit_no_avx2_clmul)");
    println!("cargo::rustc-check-cfg=cfg(rsskit_no_pmull)");
    println!("cargo::rustc-check-cfg=cfg(rsskit_no_qemu)");
    println!("cargo::rustc-check-cfg=cfg(rsskit_no_pod_emulation)");
    if std::env::var("CARGO_PKG_NAME").as_deref() == Ok("rsskit") {
        pod_emulation_probe();
    }
    // A missing file counts as changed: the probe reruns until QEMU is there.
    println!("cargo::rerun-if-changed=/usr/bin/qemu-system-x86_64");
    println!("cargo::rerun-if-changed=/dev/net/tun");
    if !std::path::Path::new("/usr/bin/qemu-system-x86_64").exists()
        || !std::path::Path::new("/dev/net/tun").exists()
    {
        println!("cargo::rustc-cfg=rsskit_no_qemu");
    }

    if !avx512_clmul() {
        println!("cargo::rustc-cfg=rsskit_no_avx512_clmul");
    }
    if !avx512_gfni() {
        println!("cargo::rustc-cfg=rsskit_no_avx512_gfni");
    }
    if !avx2_clmul() {
        println!("cargo::rustc-cfg=rsskit_no_avx2_clmul");
    }
    if !pmull() {
        println!("cargo::rustc-cfg=rsskit_no_pmull");
    }
    if std::thread::available_parallelism().map_or(1, |n| n.get()) < 2 {
        println!("cargo::rustc-cfg=rsskit_one_cpu");
    }
}

/// Whether `scripts/pod-emulate` (tests/pod_emulation.rs) can run here.
fn pod_emulation_probe() {
    use std::path::{Path, PathBuf};
    let find = |t: &str| -> Option<PathBuf> {
        ["/usr/bin", "/usr/sbin", "/bin", "/sbin"].iter().map(|d| Path::new(d).join(t)).find(|p| p.exists())
    };
    // A tool found is watched where it is; a missing one where Debian puts
    // it (a missing file counts as changed: the probe reruns until it is
    // there). The user too: unshare is permitted to root only.
    let mut missing = None;
    for t in ["unshare", "nsenter", "setpriv", "pivot_root", "mmdebstrap"] {
        match find(t) {
            Some(p) => println!("cargo::rerun-if-changed={}", p.display()),
            None => {
                println!("cargo::rerun-if-changed=/usr/bin/{t}");
                missing = missing.or(Some(t));
            }
        }
    }
    println!("cargo::rerun-if-env-changed=USER");
    println!("cargo::rerun-if-env-changed=SUDO_UID");
    let root_tar = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/pkgtest/bookworm-minbase.tar");
    let why = match missing {
        Some("mmdebstrap") if root_tar.exists() => None,
        Some("mmdebstrap") => {
            println!("cargo::rerun-if-changed={}", root_tar.display());
            Some(format!("no mmdebstrap and no cached root {}", root_tar.display()))
        }
        Some(t) => Some(format!("no `{t}` (util-linux)")),
        None => None,
    };
    let why = why.or_else(|| {
        let ok = std::process::Command::new("unshare")
            .args(["--mount", "--pid", "--fork", "--propagation", "private", "true"])
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        (!ok).then(|| {
            "`unshare --mount --pid --fork` is not permitted (needs root, CAP_SYS_ADMIN)".to_string()
        })
    });
    if let Some(why) = why {
        println!("cargo::rustc-cfg=rsskit_no_pod_emulation");
        println!("cargo::warning=tests/pod_emulation.rs is ignored here: {why}");
    }
}

#[cfg(target_arch = "x86_64")]
fn avx512_clmul() -> bool {
    clmul_features!(cpu_has)
}

#[cfg(target_arch = "x86_64")]
fn avx512_gfni() -> bool {
    gfni_features!(cpu_has)
}

/// PMULL for aarch64 targets: the host's when it is the target, else assumed
/// (cross-built tests run under `qemu-aarch64`, which emulates it).
fn pmull() -> bool {
    if std::env::var("CARGO_CFG_TARGET_ARCH").as_deref() != Ok("aarch64") {
        return true; // no such tests on other targets
    }
    #[cfg(target_arch = "aarch64")]
    {
        std::arch::is_aarch64_feature_detected!("pmull")
    }
    #[cfg(not(target_arch = "aarch64"))]
    {
        true
    }
}

#[cfg(target_arch = "x86_64")]
fn avx2_clmul() -> bool {
    std::is_x86_feature_detected!("avx2")
        && std::is_x86_feature_detected!("pclmulqdq")
        && std::is_x86_feature_detected!("vpclmulqdq")
}

#[cfg(not(target_arch = "x86_64"))]
fn avx2_clmul() -> bool {
    false
}

#[cfg(not(target_arch = "x86_64"))]
fn avx512_clmul() -> bool {
    false
}

#[cfg(not(target_arch = "x86_64"))]
fn avx512_gfni() -> bool {
    false
}
