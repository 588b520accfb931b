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
//! - `rsskit_one_cpu`: fewer than two CPUs are available to this process.
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

    if !avx512_clmul() {
        println!("cargo::rustc-cfg=rsskit_no_avx512_clmul");
    }
    if !avx512_gfni() {
        println!("cargo::rustc-cfg=rsskit_no_avx512_gfni");
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

#[cfg(not(target_arch = "x86_64"))]
fn avx512_clmul() -> bool {
    false
}

#[cfg(not(target_arch = "x86_64"))]
fn avx512_gfni() -> bool {
    false
}
