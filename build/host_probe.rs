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
