//! The QEMU lab (`scripts/lab`) as tests/lab.rs and tests/lab_system.rs
//! drive it: boot, commands in the guest, frames from the host, the
//! `check --live` read-back, and the stop on drop (also when a step panics;
//! the lab's watcher stops it if the test process dies).

use serde_json::Value;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Instant;

pub fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scripts/lab")
}

/// A command's result in the guest.
pub struct Out {
    pub rc: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Out {
    pub fn text(&self) -> String {
        format!("exit {}\nstdout:\n{}\nstderr:\n{}", self.rc, self.stdout, self.stderr)
    }
}

/// What `scripts/lab send` did.
pub struct Sent {
    /// Frames written into the host's tap.
    pub frames: u64,
    /// Of those, the frames the tap dropped (never reached the guest).
    pub tap_dropped: u64,
    /// The UDP datagrams the guest sent back (with a capture time).
    pub replies: Vec<Value>,
}

/// The booted lab; stopped on drop unless it was already running.
pub struct Lab {
    reused: bool,
}

impl Lab {
    /// `scripts/lab boot BOOT_ARGS`, watched by this process for at most
    /// `max_seconds`. A failed boot fails the test (the console is above).
    pub fn boot(boot_args: &[&str], max_seconds: u32) -> Lab {
        assert_root();
        let t = Instant::now();
        let st = Command::new(script())
            .arg("boot")
            .args(boot_args)
            .args(["--owner-pid", &std::process::id().to_string()])
            .args(["--max-seconds", &max_seconds.to_string()])
            .stdin(Stdio::null())
            .status()
            .expect("running scripts/lab boot");
        // From here on the guard exists: a failed boot still stops QEMU.
        let lab = Lab { reused: false };
        assert!(
            st.success(),
            "scripts/lab boot {boot_args:?} failed ({st}): the guest did not come up (console above)"
        );
        eprintln!("lab: booted in {:.0} s", t.elapsed().as_secs_f64());
        lab.say_kernel();
        lab
    }

    /// The lab booted by hand when `RSSKIT_LAB_REUSE` is set and one is
    /// running, else a new [`Lab::boot`].
    pub fn boot_or_reuse(boot_args: &[&str], max_seconds: u32) -> Lab {
        if std::env::var_os("RSSKIT_LAB_REUSE").is_some() {
            if let Some(lab) = Lab::running() {
                eprintln!("lab: reusing the running lab (RSSKIT_LAB_REUSE)");
                return lab;
            }
        }
        Lab::boot(boot_args, max_seconds)
    }

    /// `rsskit ARGS` (this build) in the guest, its stdout as JSON; an exit
    /// status other than 0 fails the test.
    pub fn rsskit_json(&self, args: &str) -> Value {
        self.rsskit_json_rc(args, &[0])
    }

    /// As [`Lab::rsskit_json`], accepting the exit statuses in `ok`.
    pub fn rsskit_json_rc(&self, args: &str, ok: &[i32]) -> Value {
        let o = self.run(&format!("{} {args}", env!("CARGO_BIN_EXE_rsskit")), 180);
        assert!(ok.contains(&o.rc), "rsskit {args}: exit {}: {}", o.rc, o.text());
        serde_json::from_str(&o.stdout)
            .unwrap_or_else(|e| panic!("rsskit {args}: not JSON ({e}): {}", o.text()))
    }

    /// Prints the guest's kernel (`uname -r`): every lab test says which
    /// kernel it ran on.
    pub fn say_kernel(&self) -> String {
        // Asked up to 3 times: a command run just after a boot once came
        // back with exit 1 and no output (the failure is printed).
        let mut o = self.run("uname -r", 30);
        for _ in 0..2 {
            if o.rc == 0 && !o.stdout.trim().is_empty() {
                break;
            }
            eprintln!("lab: uname -r in the guest failed (exit {}): {}; asking again", o.rc, o.text().trim());
            std::thread::sleep(std::time::Duration::from_secs(2));
            o = self.run("uname -r", 30);
        }
        let release = o.stdout.trim().to_string();
        eprintln!("lab: the guest runs kernel {release} (uname -r, exit {})", o.rc);
        release
    }

    /// A lab already booted by hand (`scripts/lab boot`), left running.
    pub fn running() -> Option<Lab> {
        assert_root();
        let st = Command::new(script()).arg("status").output().expect("running scripts/lab status");
        let lab = st.status.success().then_some(Lab { reused: true })?;
        lab.say_kernel();
        Some(lab)
    }

    /// `sh -c CMD` in the guest (cwd /tmp).
    pub fn run(&self, cmd: &str, timeout_s: u32) -> Out {
        let out = Command::new(script())
            .args(["run", "--timeout", &timeout_s.to_string(), "--", cmd])
            .stdin(Stdio::null())
            .output()
            .expect("running scripts/lab run");
        Out {
            rc: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// CMD must succeed; its stdout.
    pub fn ok(&self, cmd: &str) -> String {
        let o = self.run(cmd, 120);
        assert_eq!(o.rc, 0, "`{cmd}` in the guest failed: {}", o.text());
        o.stdout
    }

    /// `scripts/lab send`: FLOWS (its JSON lines) into the guest's eth0;
    /// with `capture_s`, the UDP datagrams the guest sends back within that
    /// time. Returns the frames sent and those datagrams.
    pub fn send_json(&self, flows: &str, capture_s: f64) -> (u64, Vec<Value>) {
        let s = self.send_counted(flows, capture_s);
        assert_eq!(
            s.tap_dropped, 0,
            "the host's tap dropped {} of {} frames before they reached the guest's NIC (QEMU, in TCG on a \
             loaded host, did not read it in time): the frames the test counts on never arrived",
            s.tap_dropped, s.frames
        );
        (s.frames, s.replies)
    }

    /// [`Lab::send_json`], with the frames the host's tap dropped counted
    /// instead of failing on them (for a caller that can send again).
    pub fn send_counted(&self, flows: &str, capture_s: f64) -> Sent {
        self.send_counted_to("eth0", flows, capture_s)
    }

    /// [`Lab::send_counted`] to the guest's NIC `nic` (eth1: the 7.3
    /// guest's igb, through tap1).
    pub fn send_counted_to(&self, nic: &str, flows: &str, capture_s: f64) -> Sent {
        let mut child = Command::new(script())
            .args(["send", "--nic", nic, "--capture", &capture_s.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("running scripts/lab send");
        std::io::Write::write_all(child.stdin.as_mut().unwrap(), flows.as_bytes()).unwrap();
        drop(child.stdin.take());
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "scripts/lab send failed");
        let mut lines = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).expect("send prints JSON lines"))
            .collect::<Vec<_>>();
        let first = lines.remove(0);
        let frames = first["sent"].as_u64().expect("send's first line: {\"sent\": N, \"tap_dropped\": D}");
        let tap_dropped = first["tap_dropped"].as_u64().expect("send's first line: {\"tap_dropped\": D}");
        Sent { frames, tap_dropped, replies: lines }
    }

    /// `RSSKIT check --live --iface eth0 --json` in the guest, in the
    /// background for `seconds`, while `send` sends from the host (it
    /// returns the frames and flows sent): its exit status and JSON.
    /// Checks what holds whatever the verdict: the accounting identity,
    /// every frame sent seen (other guest traffic, as the JSON counts it,
    /// comes on top) and checked (our frames are TCP/UDP without options),
    /// every flow sent checked, no frame lost on the capture rings.
    pub fn check_live(&self, rsskit: &str, seconds: u32, send: impl FnOnce() -> (u64, u64)) -> (i32, Value) {
        let o = self.run(
            &format!(
                "rm -f /tmp/live.*; ({rsskit} check --live --iface eth0 --seconds {seconds} --json \
                 > /tmp/live.json 2> /tmp/live.err; echo $? > /tmp/live.rc) </dev/null >/dev/null 2>&1 & \
                 for i in $(seq 1 300); do grep -q watching /tmp/live.err 2>/dev/null && exit 0; \
                 test -e /tmp/live.rc && break; sleep 0.1; done; cat /tmp/live.err; exit 1"
            ),
            60,
        );
        assert_eq!(o.rc, 0, "check --live did not start watching: {}", o.text());
        let (sent, flows) = send();
        let o = self.run(
            "for i in $(seq 1 300); do test -s /tmp/live.rc && break; sleep 0.1; done; \
             cat /tmp/live.rc; echo ==; cat /tmp/live.json; echo ==; cat /tmp/live.err",
            60,
        );
        let parts: Vec<&str> = o.stdout.split("==\n").collect();
        assert_eq!(parts.len(), 3, "check --live did not finish: {}", o.text());
        let rc: i32 =
            parts[0].trim().parse().unwrap_or_else(|_| panic!("check --live's exit status: {}", o.text()));
        let v: Value = serde_json::from_str(parts[1])
            .unwrap_or_else(|e| panic!("check --live --json ({e}), exit {rc}: {}", o.stdout));
        let p = &v["packets"];
        let n = |k: &str| p[k].as_u64().unwrap_or_else(|| panic!("packets.{k} in {v:#}"));
        let reasons: u64 =
            p["unchecked_by_reason"].as_object().unwrap().values().map(|x| x.as_u64().unwrap()).sum();
        eprintln!(
            "check --live: exit {rc}; sent {sent}; seen {} = agreed {} + disagreed {} + unchecked {} {}; \
             ring drops {}; flows {}; {}",
            n("seen"),
            n("agreed"),
            n("disagreed"),
            n("unchecked"),
            p["unchecked_by_reason"],
            n("ring_drops"),
            v["flows"],
            v["verdict"]["text"]
        );
        assert_eq!(n("seen"), n("agreed") + n("disagreed") + n("unchecked"), "the identity: {v:#}");
        assert_eq!(n("unchecked"), reasons, "unchecked = the sum of its reasons: {v:#}");
        assert_eq!(n("ring_drops"), 0, "no frame lost on the capture rings: {v:#}");
        assert!(n("seen") >= sent, "every frame sent was seen ({sent} sent): {v:#}");
        assert!(n("agreed") + n("disagreed") >= sent, "every frame sent was checked: {v:#}");
        assert!(v["flows"]["checked"].as_u64().unwrap() >= flows, "every flow sent checked: {v:#}");
        (rc, v)
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        if !self.reused {
            let _ = Command::new(script()).arg("stop").stdin(Stdio::null()).status();
        }
    }
}

/// An indirection table of `entries` whose queues get entries in the
/// ratio of `weights` (queue `q` the `q`-th share, in order): no driver's
/// default, so a table that was never written cannot pass for it.
pub fn uneven_table(weights: &[usize], entries: usize) -> Vec<usize> {
    let total: usize = weights.iter().sum();
    (0..entries)
        .map(|i| {
            let slot = i * total / entries;
            let mut acc = 0;
            weights
                .iter()
                .position(|w| {
                    acc += w;
                    slot < acc
                })
                .expect("slot < total")
        })
        .collect()
}

fn assert_root() {
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    assert_eq!(euid, 0, "the lab needs root (namespace, tap devices); CI runs as root");
}

/// `s` as one single-quoted shell word (a plan's notes may hold a `'`).
pub fn sq(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}
