//! `rsskit http-serve` as a test fixture, and the one-line error check
//! shared by the HTTP tests.

use super::netns::rsskit;
use super::proc::Running;
use std::net::SocketAddr;
use std::process::{Command, ExitStatus};
use std::time::Duration;

/// A running `rsskit http-serve --json`, killed on drop.
pub struct Server {
    /// The process; its stderr after the ready line is read from here.
    pub proc: Running,
    pub addr: SocketAddr,
}

impl Server {
    /// Serves on 127.0.0.1, any free port.
    pub fn start(extra: &[&str]) -> Server {
        Server::start_at("127.0.0.1:0", extra)
    }

    /// Serves on `bind` with `extra` arguments; returns once it printed
    /// its ready line (at most 20 s).
    pub fn start_at(bind: &str, extra: &[&str]) -> Server {
        let mut proc = Running::spawn(&[&["http-serve", "--bind", bind, "--json"][..], extra].concat());
        let line = proc.wait_for("http-serve: ready on ", Duration::from_secs(20));
        let rest = line.split("http-serve: ready on ").nth(1).unwrap();
        let addr = rest.split_whitespace().next().unwrap().parse().unwrap();
        Server { proc, addr }
    }

    pub fn pid(&self) -> i32 {
        self.proc.pid()
    }

    /// SIGTERM, wait (at most 10 s, else kill and fail), and the final
    /// JSON summary.
    pub fn stop(self) -> (ExitStatus, serde_json::Value) {
        self.stop_with(libc::SIGTERM)
    }

    /// As [`Server::stop`] with signal `sig`.
    pub fn stop_with(self, sig: i32) -> (ExitStatus, serde_json::Value) {
        let (status, out, _) = self.proc.signal_and_wait(sig, Duration::from_secs(10));
        let v: serde_json::Value =
            serde_json::from_str(&out).unwrap_or_else(|e| panic!("bad JSON summary ({e}): {out}"));
        (status, v)
    }
}

/// Runs `rsskit ARGS` and checks it failed with exit status 1 and exactly
/// one line `rsskit: error: ...` on stderr; returns that line.
pub fn one_line_error(args: &[&str]) -> String {
    let out = Command::new(rsskit()).args(args).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    if out.status.code() == Some(2) {
        // Refused by the argument parser (a flag's range): clap's one error
        // line, then only its usage hint.
        let mut lines = err.trim().lines().filter(|l| !l.trim().is_empty());
        assert!(lines.next().is_some_and(|l| l.starts_with("error: ")), "{args:?}: {err}");
        assert!(
            lines.all(|l| l.starts_with("For more information") || l.starts_with("Usage:")),
            "{args:?}: {err}"
        );
        return err;
    }
    assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
    assert_eq!(err.trim().lines().count(), 1, "{args:?}: {err}");
    assert!(err.starts_with("rsskit: error: "), "{args:?}: {err}");
    err
}
