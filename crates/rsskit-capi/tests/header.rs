//! The committed header is what cbindgen generates from the sources now.

#[test]
fn header_is_fresh() {
    let generated = concat!(env!("OUT_DIR"), "/rsskit.h");
    let committed = concat!(env!("CARGO_MANIFEST_DIR"), "/include/rsskit.h");
    let want = std::fs::read_to_string(generated).unwrap();
    let have = std::fs::read_to_string(committed).unwrap_or_default();
    assert!(
        want == have,
        "include/rsskit.h is stale: the C API changed; update it with\n  cp {generated} {committed}"
    );
}
