//! The committed man pages (`docs/man/`) and completion scripts
//! (`completions/`) are what the CLI's clap definitions generate now: a
//! changed flag or help text without regenerating them fails here, as the C
//! header's `header_is_fresh` does for the C API.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_rsskit");

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let Ok(entries) = std::fs::read_dir(dir) else { return BTreeMap::new() };
    entries
        .map(|e| {
            let e = e.unwrap();
            (e.file_name().into_string().unwrap(), std::fs::read(e.path()).unwrap())
        })
        .collect()
}

const REGENERATE: &str = "regenerate them from the repository root with\n  \
     rm -rf docs/man completions && cargo run -p rsskit -- __gen-docs --man docs/man --completions completions";

#[test]
fn man_pages_and_completions_are_fresh() {
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("docs_fresh");
    let _ = std::fs::remove_dir_all(&out);
    let st = Command::new(BIN)
        .arg("__gen-docs")
        .arg("--man")
        .arg(out.join("man"))
        .arg("--completions")
        .arg(out.join("completions"))
        .status()
        .unwrap();
    assert!(st.success(), "rsskit __gen-docs failed");
    for (generated, committed) in [("man", "docs/man"), ("completions", "completions")] {
        let want = files(&out.join(generated));
        let have = files(&repo().join(committed));
        assert!(!want.is_empty(), "nothing generated into {generated}");
        let names = |m: &BTreeMap<String, Vec<u8>>| m.keys().cloned().collect::<Vec<_>>();
        assert_eq!(names(&have), names(&want), "{committed}/ holds other files than generated; {REGENERATE}");
        for (name, text) in &want {
            assert!(have[name] == *text, "{committed}/{name} is stale; {REGENERATE}");
        }
    }
}

#[test]
fn every_subcommand_has_a_man_page() {
    let pages = files(&repo().join("docs/man"));
    let help = Command::new(BIN).arg("--help").output().unwrap();
    let help = String::from_utf8(help.stdout).unwrap();
    // The "Commands:" block of --help: one indented name per subcommand.
    let commands: Vec<&str> = help
        .split("Commands:")
        .nth(1)
        .expect("--help lists commands")
        .lines()
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert!(["plan", "completions", "help"].iter().all(|c| commands.contains(c)), "{commands:?}");
    assert!(pages.contains_key("rsskit.8"));
    for c in commands {
        assert!(pages.contains_key(&format!("rsskit-{c}.8")), "no man page for rsskit {c}");
    }
}

#[test]
fn completions_subcommand_prints_the_committed_scripts() {
    for (shell, file) in [("bash", "rsskit.bash"), ("zsh", "_rsskit"), ("fish", "rsskit.fish")] {
        let out = Command::new(BIN).args(["completions", shell]).output().unwrap();
        assert!(out.status.success(), "{shell}");
        let committed = std::fs::read(repo().join("completions").join(file)).unwrap();
        assert!(
            out.stdout == committed,
            "rsskit completions {shell} differs from completions/{file}; {REGENERATE}"
        );
    }
    let out = Command::new(BIN).args(["completions", "tcsh"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("invalid value 'tcsh'"));
}

#[test]
fn every_page_a_man_page_names_exists() {
    let pages = files(&repo().join("docs/man"));
    let mut named = 0;
    for text in pages.values() {
        let text = String::from_utf8_lossy(text);
        // Subcommand references are lines `rsskit\-plan(8)` in the roff source.
        for line in text.lines().filter(|l| l.starts_with("rsskit\\-") && l.ends_with("(8)")) {
            let page = format!("{}.8", line.trim_end_matches("(8)").replace("\\-", "-"));
            assert!(pages.contains_key(&page), "a man page names {page}, which is not in docs/man");
            named += 1;
        }
    }
    assert!(named >= 20, "only {named} references found: the reference format changed");
}
