//! `--plot FILE` is checked when the arguments are parsed, before any run
//! (it used to be written only at the end, so a typo lost a long run's
//! data): a usage error (exit 2) naming the path, for every command that
//! takes it. No file is left behind when the run then fails, an existing
//! chart is untouched until a new one is written, and a symlink (root
//! writing in a shared directory) is refused.

use assert_cmd::Command;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

struct Dir(PathBuf);

impl Dir {
    fn new(tag: &str) -> Dir {
        let d = std::env::temp_dir().join(format!("rsskit-plot-arg-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        Dir(d)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// Each command with arguments for a run that would take a while.
fn commands() -> Vec<Vec<&'static str>> {
    vec![
        vec!["top", "--interval", "1", "--count", "30"],
        vec!["udp-echo", "--bind", "127.0.0.1:0", "--duration", "30"],
        vec!["udp-load", "--target", "127.0.0.1:9", "--duration", "30"],
        vec!["http-load", "--url", "http://127.0.0.1:9/", "--duration", "30"],
        vec!["pipeline", "--in", "pcap:/nonexistent.pcap"],
    ]
}

fn rsskit(dir: &Path, args: &[&str], plot: &Path) -> std::process::Output {
    Command::cargo_bin("rsskit")
        .unwrap()
        .timeout(Duration::from_secs(20))
        .current_dir(dir)
        .args(args)
        .arg("--plot")
        .arg(plot)
        .output()
        .unwrap()
}

#[test]
fn a_bad_plot_path_is_a_usage_error_before_any_run() {
    let d = Dir::new("bad");
    let missing = d.0.join("no-such-dir/run.svg");
    fs::create_dir(d.0.join("a-dir")).unwrap();
    std::os::unix::fs::symlink(d.0.join("elsewhere"), d.0.join("link.svg")).unwrap();
    let cases = [
        (missing.clone(), "does not exist"),
        (d.0.join("a-dir"), "Is a directory"),
        (d.0.join("link.svg"), "symlink"),
    ];
    for args in commands() {
        for (plot, why) in &cases {
            let t = Instant::now();
            let out = rsskit(&d.0, &args, plot);
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{args:?} {}: {err}", plot.display());
            assert!(err.contains("--plot") && err.contains(&plot.display().to_string()), "{args:?}: {err}");
            assert!(err.contains(why), "{args:?}: want '{why}' in {err}");
            // Refused at parse time, not after the 30 s run.
            assert!(t.elapsed() < Duration::from_secs(15), "{args:?}: {:?}", t.elapsed());
        }
    }
    assert!(!d.0.join("no-such-dir").exists());
    assert!(!d.0.join("elsewhere").exists(), "nothing written through the symlink");
}

#[test]
fn the_check_leaves_no_file_and_keeps_an_existing_chart() {
    let d = Dir::new("keep");
    // A run that fails after the arguments are accepted.
    let fails = ["top", "--iface", "nope0", "--count", "1"];
    let out = rsskit(&d.0, &fails, Path::new("new.svg"));
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(!d.0.join("new.svg").exists(), "no empty chart left behind");
    fs::write(d.0.join("old.svg"), "<svg>earlier run</svg>").unwrap();
    let out = rsskit(&d.0, &fails, Path::new("old.svg"));
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(fs::read_to_string(d.0.join("old.svg")).unwrap(), "<svg>earlier run</svg>");
}
