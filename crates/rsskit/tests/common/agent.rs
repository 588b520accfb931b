//! A running `rsskit agent` under test: its stderr log collected line by
//! line, waited on with bounds, stopped with SIGTERM, killed on drop; and a
//! `/metrics` scrape, also from inside a network namespace.

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub struct Agent {
    child: Option<Child>,
    pub log: Arc<Mutex<Vec<String>>>,
}

impl Agent {
    pub fn spawn(mut cmd: Command) -> Agent {
        let mut child =
            cmd.stdout(Stdio::null()).stderr(Stdio::piped()).spawn().expect("spawning rsskit agent");
        let err = child.stderr.take().unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        let l = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                l.lock().unwrap().push(line);
            }
        });
        Agent { child: Some(child), log }
    }

    pub fn text(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }

    /// Waits at most `within` for a log line with every one of `needles`
    /// after line `from`; returns its index and text, or fails with the log.
    pub fn wait_for(&self, from: usize, needles: &[&str], within: Duration) -> (usize, String) {
        let t = Instant::now();
        loop {
            {
                let l = self.log.lock().unwrap();
                if let Some((i, s)) =
                    l.iter().enumerate().skip(from).find(|(_, s)| needles.iter().all(|n| s.contains(n)))
                {
                    return (i, s.clone());
                }
            }
            if t.elapsed() > within {
                panic!("no agent log line with {needles:?} within {within:?}; log:\n{}", self.text());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn lines(&self) -> usize {
        self.log.lock().unwrap().len()
    }

    /// SIGTERM, then at most 10 s for the exit.
    pub fn stop(mut self) -> ExitStatus {
        let mut c = self.child.take().unwrap();
        // SAFETY: signalling our own child.
        unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
        let t = Instant::now();
        loop {
            if let Some(st) = c.try_wait().unwrap() {
                // Let the reader thread drain the last lines.
                std::thread::sleep(Duration::from_millis(100));
                return st;
            }
            if t.elapsed() > Duration::from_secs(10) {
                let _ = c.kill();
                let _ = c.wait();
                panic!("the agent did not stop within 10 s of SIGTERM; log:\n{}", self.text());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn signal(&self, sig: i32) {
        // SAFETY: signalling our own child.
        unsafe { libc::kill(self.child.as_ref().unwrap().id() as i32, sig) };
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// `GET path` on `addr`, bounded; returns (status line, body).
pub fn get(addr: &str, path: &str) -> (String, String) {
    let mut s = std::net::TcpStream::connect(addr).unwrap_or_else(|e| panic!("connecting to {addr}: {e}"));
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let (head, body) = out.split_once("\r\n\r\n").expect("an HTTP answer");
    (head.lines().next().unwrap().to_string(), body.to_string())
}

/// [`get`] from a thread that entered network namespace `ns` (setns
/// changes only the calling thread).
pub fn get_in_netns(ns: &str, addr: &str, path: &str) -> (String, String) {
    let (ns, addr, path) = (ns.to_string(), addr.to_string(), path.to_string());
    std::thread::spawn(move || {
        let f = std::fs::File::open(format!("/run/netns/{ns}")).expect("the namespace file");
        use std::os::fd::AsRawFd;
        // SAFETY: setns on a namespace fd we hold open; affects this thread only.
        let rc = unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) };
        assert_eq!(rc, 0, "setns: {}", std::io::Error::last_os_error());
        get(&addr, &path)
    })
    .join()
    .unwrap()
}

/// The value of the sample line starting with `prefix` (name and labels).
pub fn sample(body: &str, prefix: &str) -> Option<f64> {
    body.lines().find(|l| l.starts_with(prefix)).and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

/// promtool from PATH, $RSSKIT_PROMTOOL, or where scripts/install-deps.sh
/// extracts Debian's prometheus package.
pub fn promtool() -> std::path::PathBuf {
    let candidates = [
        std::env::var_os("RSSKIT_PROMTOOL").map(std::path::PathBuf::from),
        Some("/opt/rsskit-deps/prometheus/usr/bin/promtool".into()),
        Some("/usr/bin/promtool".into()),
    ];
    candidates.into_iter().flatten().find(|p| p.is_file()).unwrap_or_else(|| {
        panic!("promtool not found: run scripts/install-deps.sh (extracts Debian's prometheus package to /opt/rsskit-deps/prometheus)")
    })
}

/// `promtool check metrics` on `text`: (success, its output).
pub fn promtool_check(text: &str) -> (bool, String) {
    let mut c = Command::new(promtool())
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("running promtool");
    c.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    let o = c.wait_with_output().unwrap();
    (
        o.status.success(),
        format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr)),
    )
}
