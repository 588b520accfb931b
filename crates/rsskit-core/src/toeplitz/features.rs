// The CPU features each vector backend needs: one list per backend, read
// by the backend's run-time check (`clmul.rs`, `gfni.rs`) and by
// `build/host_probe.rs`, which `include!`s this file to report the tests
// this machine cannot run as ignored. Plain macros only (no `use`, no
// items), so the file compiles in both places.

/// Calls `$m!` with the features of the VPCLMULQDQ single-hash backend.
#[allow(unused_macros)]
macro_rules! clmul_features {
    ($m:ident) => {
        $m!("avx512f", "avx512bw", "avx512vl", "gfni", "vpclmulqdq", "pclmulqdq")
    };
}

/// Calls `$m!` with the features of the GFNI batch backend.
#[allow(unused_macros)]
macro_rules! gfni_features {
    ($m:ident) => {
        $m!("avx512f", "avx512bw", "avx512vl", "avx512vbmi", "gfni")
    };
}

/// Whether the running CPU has every listed feature.
#[allow(unused_macros)]
macro_rules! cpu_has {
    ($($f:tt),*) => {
        true $(&& std::is_x86_feature_detected!($f))*
    };
}

/// Whether the build targets every listed feature (no `std`: no run-time check).
#[allow(unused_macros)]
macro_rules! target_has {
    ($($f:tt),*) => {
        cfg!(all($(target_feature = $f),*))
    };
}
