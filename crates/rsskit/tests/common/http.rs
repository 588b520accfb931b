//! `rsskit http-serve` as a test fixture, and the one-line error check
//! shared by the HTTP tests.

use super::netns::rsskit;
use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// A running `rsskit http-serve --json`, killed on drop.
pub struct Server {
    child: Option<Child>,
    pub addr: SocketAddr,
    /// Its stderr, line by line (after the ready line).
    pub stderr: mpsc::Receiver<String>,
}

impl Server {
    /// Serves on 127.0.0.1, any free port.
    pub fn start(extra: &[&str]) -> Server {
        Server::start_at("127.0.0.1:0", extra)
    }

    /// Serves on `bind` with `extra` arguments; returns once it printed
    /// its ready line (at most 20 s).
    pub fn start_at(bind: &str, extra: &[&str]) -> Server {
        let mut child = Command::new(rsskit())
            .args(["http-serve", "--bind", bind, "--json"])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawning rsskit http-serve");
        let (tx, rx) = mpsc::channel();
        let err = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut s = Server { child: Some(child), addr: "0.0.0.0:0".parse().unwrap(), stderr: rx };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = s.stderr.recv_timeout(left).expect("http-serve printed no ready line");
            if let Some(rest) = line.strip_prefix("http-serve: ready on ") {
                s.addr = rest.split_whitespace().next().unwrap().parse().unwrap();
                return s;
            }
        }
    }

    pub fn pid(&self) -> i32 {
        self.child.as_ref().unwrap().id() as i32
    }

    /// SIGTERM, wait (at most 10 s, else kill and fail), and the final
    /// JSON summary.
    pub fn stop(self) -> (ExitStatus, serde_json::Value) {
        self.stop_with(libc::SIGTERM)
    }

    /// As [`Server::stop`] with signal `sig`.
    pub fn stop_with(mut self, sig: i32) -> (ExitStatus, serde_json::Value) {
        // SAFETY: signalling our own child process.
        unsafe { libc::kill(self.pid(), sig) };
        let mut child = self.child.take().unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        let status = loop {
            if let Some(st) = child.try_wait().unwrap() {
                break st;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("http-serve did not exit within 10 s of signal {sig}");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let mut out = String::new();
        child.stdout.take().unwrap().read_to_string(&mut out).unwrap();
        let v: serde_json::Value =
            serde_json::from_str(&out).unwrap_or_else(|e| panic!("bad JSON summary ({e}): {out}"));
        (status, v)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Runs `rsskit ARGS` and checks it failed with exit status 1 and exactly
/// one line `rsskit: error: ...` on stderr; returns that line.
pub fn one_line_error(args: &[&str]) -> String {
    let out = Command::new(rsskit()).args(args).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
    assert_eq!(err.trim().lines().count(), 1, "{args:?}: {err}");
    assert!(err.starts_with("rsskit: error: "), "{args:?}: {err}");
    err
}
