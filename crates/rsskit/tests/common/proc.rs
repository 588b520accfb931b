//! A long-running `rsskit` command under test: its stderr read line by line
//! as it comes, signalled, waited for (bounded), killed on drop.

use super::netns::rsskit;
use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

pub struct Running {
    child: Option<Child>,
    lines: mpsc::Receiver<String>,
    /// Every stderr line read so far.
    pub stderr: Vec<String>,
}

impl Running {
    /// Starts `rsskit ARGS` with stdout and stderr piped.
    pub fn spawn(args: &[&str]) -> Running {
        let mut child = Command::new(rsskit())
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawning rsskit");
        let (tx, rx) = mpsc::channel();
        let err = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Running { child: Some(child), lines: rx, stderr: Vec::new() }
    }

    pub fn pid(&self) -> i32 {
        self.child.as_ref().unwrap().id() as i32
    }

    /// Waits (at most `within`) for a stderr line containing `needle`.
    pub fn wait_for(&mut self, needle: &str, within: Duration) -> String {
        let deadline = Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) => {
                    self.stderr.push(l.clone());
                    if l.contains(needle) {
                        return l;
                    }
                }
                Err(_) => panic!(
                    "no stderr line with {needle:?} within {within:?}; stderr so far:\n{}",
                    self.stderr.join("\n")
                ),
            }
        }
    }

    /// Sends `sig`, waits at most `within` for the exit (else kills it and
    /// fails), and returns the status, stdout and every stderr line.
    pub fn signal_and_wait(mut self, sig: i32, within: Duration) -> (ExitStatus, String, Vec<String>) {
        // SAFETY: signalling our own child process.
        unsafe { libc::kill(self.pid(), sig) };
        let mut child = self.child.take().unwrap();
        let t = Instant::now();
        let status = loop {
            if let Some(st) = child.try_wait().unwrap() {
                break st;
            }
            if t.elapsed() > within {
                let _ = child.kill();
                let _ = child.wait();
                panic!("rsskit did not exit within {within:?} of signal {sig}");
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        let mut out = String::new();
        child.stdout.take().unwrap().read_to_string(&mut out).unwrap();
        // The reader thread ends at EOF: collect the rest.
        while let Ok(l) = self.lines.recv_timeout(Duration::from_secs(2)) {
            self.stderr.push(l);
        }
        (status, out, std::mem::take(&mut self.stderr))
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Stops a child started as the leader of its own process group (a server
/// such as nginx with its workers): SIGTERM to the group, up to 5 s for the
/// leader to exit, then SIGKILL to whatever is left, and reaps it.
pub fn stop_group(child: &mut Child) {
    let pg = child.id() as i32;
    // SAFETY: signalling the process group the test created.
    unsafe { libc::kill(-pg, libc::SIGTERM) };
    let t = Instant::now();
    while child.try_wait().ok().flatten().is_none() && t.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(20));
    }
    // SAFETY: as above, whatever is left of the group.
    unsafe { libc::kill(-pg, libc::SIGKILL) };
    let _ = child.wait();
}

/// A finished command's exit status, stdout and stderr, for a failed assertion.
pub fn output_text(o: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The scheduling policy (0 SCHED_OTHER, 3 SCHED_BATCH: field 41 of
/// /proc/PID/task/TID/stat) of `pid`'s first thread whose name starts with
/// `comm_prefix`, waiting for it to appear for up to 10 s.
pub fn thread_policy(pid: u32, comm_prefix: &str) -> u32 {
    let deadline = Instant::now() + Duration::from_secs(10);
    let policy_of = |task: &std::path::Path| -> Option<u32> {
        let stat = std::fs::read_to_string(task.join("stat")).ok()?;
        // Fields after the command (which may hold spaces): state is field 3.
        let rest = &stat[stat.rfind(')')? + 2..];
        rest.split(' ').nth(41 - 3)?.parse::<u32>().ok()
    };
    loop {
        let found = std::fs::read_dir(format!("/proc/{pid}/task")).ok().and_then(|tasks| {
            tasks.flatten().find_map(|t| {
                let comm = std::fs::read_to_string(t.path().join("comm")).ok()?;
                comm.starts_with(comm_prefix).then(|| t.path())
            })
        });
        if let Some(task) = found.as_deref().and_then(|t| policy_of(t).map(|p| (t.to_path_buf(), p))) {
            // The thread sets its own policy once it runs: read it again a
            // moment later, not as it was at its birth.
            std::thread::sleep(Duration::from_millis(500));
            return policy_of(&task.0).unwrap_or(task.1);
        }
        assert!(Instant::now() < deadline, "no thread {comm_prefix}* in /proc/{pid}/task");
        std::thread::sleep(Duration::from_millis(20));
    }
}
