//! Generates the C header from the crate's `extern "C"` items into
//! `OUT_DIR/rsskit.h`; the committed copy is `include/rsskit.h`, and the
//! test `header_is_fresh` fails when the two differ.
fn main() {
    println!("cargo::rerun-if-changed=src");
    println!("cargo::rerun-if-changed=cbindgen.toml");
    let dir = std::env::var("CARGO_MANIFEST_DIR").expect("set by cargo");
    let out = std::env::var("OUT_DIR").expect("set by cargo");
    let config = cbindgen::Config::from_file(format!("{dir}/cbindgen.toml")).expect("cbindgen.toml");
    cbindgen::generate_with_config(&dir, config)
        .expect("generating the C header")
        .write_to_file(format!("{out}/rsskit.h"));
}
