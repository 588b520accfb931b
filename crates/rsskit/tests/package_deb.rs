//! The Debian package and the fleet manifest, checked as an operator meets
//! them: `scripts/package` builds the .deb (release build + cargo-deb), and
//! `scripts/test-package.sh` runs lintian, installs it into a clean minbase
//! bookworm root, runs `rsskit --version`, `man rsskit-plan`, bash completion
//! of `rsskit pl<TAB>`, and checks `dpkg --purge` leaves nothing behind. The
//! DaemonSet is validated against the Kubernetes schema.
//! Needs root and what scripts/install-deps.sh installs; fails loudly without.

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn run(script: &str, args: &[&str]) {
    let st = Command::new(repo().join(script))
        .args(args)
        .current_dir(repo())
        .status()
        .unwrap_or_else(|e| panic!("running {script}: {e}"));
    assert!(st.success(), "{script} {args:?} failed ({st}); its output is above");
}

#[test]
fn debian_package_builds_installs_and_purges_cleanly() {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let euid = unsafe { libc::geteuid() };
    assert_eq!(euid, 0, "needs root: the install test chroots into a scratch Debian root");
    run("scripts/package", &[]);
    run("scripts/test-package.sh", &[]);
}

#[test]
fn daemonset_manifest_is_valid_kubernetes() {
    let validator = repo().join("target/tools/venv/bin/kubernetes-validate");
    assert!(
        validator.exists(),
        "{} missing: run scripts/install-deps.sh (PyPI kubernetes-validate in a venv)",
        validator.display()
    );
    let manifest = repo().join("deploy/kubernetes/rsskit-agent.yaml");
    let out = Command::new(&validator).arg("--strict").arg(&manifest).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "kubernetes-validate --strict rejected the manifest:\n{text}");
    for kind in ["namespace/rsskit", "daemonset/rsskit-agent"] {
        assert!(text.contains(&format!("passed for resource {kind}")), "{kind} not validated:\n{text}");
    }
    // The validator itself rejects a wrong type (it is not a no-op).
    let bad = Path::new(env!("CARGO_TARGET_TMPDIR")).join("rsskit-agent-bad.yaml");
    let yaml = std::fs::read_to_string(&manifest).unwrap();
    assert!(yaml.contains("hostPort: 9477"));
    std::fs::write(&bad, yaml.replace("hostPort: 9477", "hostPort: nine")).unwrap();
    let out = Command::new(&validator).arg("--strict").arg(&bad).output().unwrap();
    assert!(!out.status.success(), "kubernetes-validate accepted a string hostPort");
}

/// packaging/deb/copyright (Debian's format) carries LICENSE-MIT's text
/// word for word and names both licences of the workspace.
#[test]
fn debian_copyright_matches_the_licence_files() {
    let copyright = std::fs::read_to_string(repo().join("packaging/deb/copyright")).unwrap();
    let words = |s: &str| s.split_whitespace().filter(|w| *w != ".").collect::<Vec<_>>().join(" ");
    let mit = std::fs::read_to_string(repo().join("LICENSE-MIT")).unwrap();
    // The licence's text from "Permission" on (the header lines are fields).
    let mit_body = &mit[mit.find("Permission is hereby granted").expect("LICENSE-MIT text")..];
    assert!(
        words(&copyright).contains(&words(mit_body)),
        "packaging/deb/copyright's MIT text differs from LICENSE-MIT"
    );
    let holder = mit.lines().find(|l| l.starts_with("Copyright (c) ")).unwrap();
    assert!(
        copyright.contains(&format!("Copyright: {}", holder.trim_start_matches("Copyright (c) "))),
        "packaging/deb/copyright does not name {holder:?}"
    );
    let workspace = std::fs::read_to_string(repo().join("Cargo.toml")).unwrap();
    assert!(workspace.contains("license = \"MIT OR Apache-2.0\""));
    assert!(copyright.contains("License: MIT or Apache-2.0\n"));
    assert!(std::fs::read_to_string(repo().join("LICENSE-APACHE"))
        .unwrap()
        .contains("Version 2.0, January 2004"));
}
