//! Fuzz the HTTP server's request path: the request head (request line,
//! headers, limits), then the target's percent-decoding and normalisation
//! and the file lookup against a document root. Must never panic; a request
//! taken lies within the input and the limits; a decoded path never climbs
//! out (`..`, absolute, NUL); a file opened is under the root, never the
//! `secret` beside it, even through the `escape` symlink planted inside.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rsskit_runtime::http::files::{percent_decode, relative_path, Root};
use rsskit_runtime::http::request::{parse, Parsed, MAX_BODY, MAX_HEAD_BYTES};
use rsskit_runtime::http::server::STATUS_CODES;
use std::os::fd::AsRawFd;
use std::path::{Component, PathBuf};
use std::sync::OnceLock;

/// `<tmp>/rsskit-fuzz-http-<pid>/{root/{a.txt,d/index.html,escape -> ../secret,up -> ..},secret}`.
fn root() -> &'static (Root, PathBuf) {
    static R: OnceLock<(Root, PathBuf)> = OnceLock::new();
    R.get_or_init(|| {
        let base = std::env::temp_dir().join(format!("rsskit-fuzz-http-{}", std::process::id()));
        let root = base.join("root");
        std::fs::create_dir_all(root.join("d")).unwrap();
        std::fs::write(root.join("a.txt"), "a").unwrap();
        std::fs::write(root.join("d/index.html"), "i").unwrap();
        std::fs::write(base.join("secret"), "s").unwrap();
        let _ = std::os::unix::fs::symlink("../secret", root.join("escape"));
        let _ = std::os::unix::fs::symlink("..", root.join("up"));
        let r = Root::open(&root).unwrap();
        let canon = r.path().to_path_buf();
        (r, canon)
    })
}

fn check_path(path: &str) {
    let Ok(decoded) = percent_decode(path) else { return };
    assert!(!decoded.contains(&0));
    assert!(decoded.len() <= path.len());
    let Ok(rel) = relative_path(&decoded) else { return };
    for c in rel.components() {
        assert!(matches!(c, Component::Normal(_)), "{rel:?} from {path:?}");
    }
    let (r, canon) = root();
    if let Ok(opened) = r.lookup(path) {
        let fd = opened.file.as_raw_fd();
        let real = std::fs::read_link(format!("/proc/self/fd/{fd}")).unwrap();
        assert!(real.starts_with(canon), "{path:?} opened {real:?} outside {canon:?}");
        assert!(opened.size <= 1);
    }
}

fuzz_target!(|data: &[u8]| {
    match parse(data) {
        Parsed::Partial => assert!(data.len() < MAX_HEAD_BYTES),
        Parsed::Refused(r) => {
            assert!(STATUS_CODES.contains(&r.status), "{}", r.status);
            assert!(r.status >= 400);
        }
        Parsed::Done(req) => {
            assert!(req.head_len <= data.len() && req.head_len <= MAX_HEAD_BYTES);
            assert!(req.body_len <= MAX_BODY);
            assert!(req.target.starts_with('/'));
            check_path(req.path());
        }
    }
    // The path machinery alone, on any text (a request target is one line).
    if let Ok(s) = std::str::from_utf8(data) {
        if s.len() <= 4096 {
            check_path(s);
        }
    }
});
