//! Every flag that takes a value, of every subcommand, with the numbers a
//! user can type that break naive code: 0, -1, 2^32, 2^64-1 and 1e300.
//!
//! The flags are discovered from `rsskit --help` and each `SUB --help`
//! (nested command groups too), so a new flag is swept without touching this
//! file. Each subcommand has one or more small baseline invocations that run
//! quickly (short --duration, tiny counts, loopback only); the swept flag
//! replaces the baseline's value or is appended. Each run must:
//! - exit 0, 1 (a runtime error) or 2 (a usage error): never 101 (panic),
//!   134 (abort: allocation failure) or a signal;
//! - on failure, say why in one error line (`error: ...` from the argument
//!   parser, `rsskit: error: ...` from the command), never a panic message;
//!   a value the parser rejects is rejected with the limit named (a digit
//!   besides the ones of the value itself);
//! - finish within RUN_LIMIT, under an address-space limit of 4 GiB (a
//!   runaway allocation fails there instead of eating the machine).
//!
//! A subcommand without a baseline fails the test: add one below.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

const VALUES: [&str; 5] = ["0", "-1", "4294967296", "18446744073709551615", "1e300"];
/// A run longer than this is a runaway (baselines take well under a second).
const RUN_LIMIT: Duration = Duration::from_secs(10);
/// Address-space limit of every run.
const AS_LIMIT: u64 = 4 << 30;

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_rsskit")
}

/// `rsskit ARGS --help` (or `help`) output.
fn help(path: &[String]) -> String {
    let out = Command::new(bin()).args(path).arg("--help").output().expect("running rsskit --help");
    assert!(out.status.success(), "rsskit {path:?} --help failed");
    String::from_utf8(out.stdout).unwrap()
}

/// The `Commands:` section of a help text.
fn subcommands(help: &str) -> Vec<String> {
    let mut in_cmds = false;
    let mut v = Vec::new();
    for line in help.lines() {
        if line.starts_with("Commands:") {
            in_cmds = true;
            continue;
        }
        if in_cmds {
            match line.split_whitespace().next() {
                Some("help") => {}
                Some(name) if line.starts_with("  ") => v.push(name.to_string()),
                _ => in_cmds = false,
            }
        }
    }
    v
}

/// Long flags taking a value (`--name <VALUE>`) with their help text
/// (same line, or the lines below in clap's next-line layout), except
/// those with a fixed set of possible values (the parser refuses any
/// number by name).
fn value_flags(help: &str) -> Vec<(String, String)> {
    let lines: Vec<&str> = help.lines().collect();
    let mut v = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        let t = l.trim_start();
        let t = t.strip_prefix("-h, ").unwrap_or(t);
        let Some(t) = t.split_once(", --").map(|(_, r)| r).or_else(|| t.strip_prefix("--")) else { continue };
        let Some((name, rest)) = t.split_once(' ') else { continue };
        if !rest.starts_with('<') {
            continue;
        }
        let mut text = rest.split_once('>').map(|(_, t)| t.trim().to_string()).unwrap_or_default();
        for next in &lines[i + 1..] {
            let n = next.trim();
            if n.is_empty() || n.starts_with('-') {
                break;
            }
            text.push(' ');
            text.push_str(n);
        }
        if !text.contains("[possible values:") {
            v.push((format!("--{name}"), text));
        }
    }
    v
}

type Leaf = (Vec<String>, Vec<(String, String)>);

fn leaves(path: Vec<String>, out: &mut Vec<Leaf>) {
    let h = help(&path);
    let subs = subcommands(&h);
    if subs.is_empty() {
        let flags = value_flags(&h);
        out.push((path, flags));
        return;
    }
    for s in subs {
        let mut p = path.clone();
        p.push(s);
        leaves(p, out);
    }
}

struct Fixtures {
    dir: PathBuf,
    /// A process with no sockets, for `steer --pid` to look at and refuse.
    sleeper: std::process::Child,
}

impl Fixtures {
    /// A temp dir of its own per test (`name`), removed on drop.
    fn new(name: &str) -> Fixtures {
        let dir = std::env::temp_dir().join(format!("rsskit-numeric-sweep-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("fw.rules"),
            "check-state\nallow udp from any to any keep-state\nallow ip from any to any\n",
        )
        .unwrap();
        // A private copy of the fake host tree: `apply` runs with --dry-run,
        // but even a write would land here, never on this machine.
        let tree = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/host6cpu");
        let st =
            std::process::Command::new("cp").arg("-a").arg(&tree).arg(dir.join("host")).status().unwrap();
        assert!(st.success(), "copying the fixture host tree");
        let sleeper = std::process::Command::new("sleep").arg("120").spawn().unwrap();
        Fixtures { dir, sleeper }
    }
    fn path(&self, name: &str) -> String {
        self.dir.join(name).display().to_string()
    }
}

impl Drop for Fixtures {
    fn drop(&mut self) {
        let _ = self.sleeper.kill();
        let _ = self.sleeper.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn pcap_in() -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../rsskit-dataplane/testdata/firewall/basic.pcap");
    format!("pcap:{}", p.display())
}

/// Quick, harmless invocations of each subcommand (loopback only; servers
/// and loads with a short --duration; a load's target is a closed local
/// port so it fails or finishes fast).
fn baselines(cmd: &str, fx: &Fixtures) -> Option<Vec<Vec<String>>> {
    let pcap = pcap_in();
    let rules = fx.path("fw.rules");
    let out = format!("pcap:{}", fx.path("out.pcap"));
    let host = fx.path("host");
    let root = fx.path("root");
    let sleeper = fx.sleeper.id().to_string();
    let capture_dir = fx.path("capture");
    let b: Vec<Vec<&str>> = match cmd {
        "hash" => vec![vec!["--src", "10.0.0.1:1", "--dst", "10.0.0.2:2", "--proto", "tcp", "--cpus", "2"]],
        "table" => vec![vec!["--cpus", "4", "--rings", "2"]],
        "find" => vec![
            vec!["--dst", "127.0.0.1:9000", "--src-ports", "1024-2047", "--bucket", "1", "--proto", "udp"],
            vec!["--dst", "10.0.0.1:80", "--src-net", "10.0.1.0/24", "--src-port", "4000", "--cpu", "1"],
            vec![
                "--dst",
                "10.0.0.1:80",
                "--src-ports",
                "1024-4095",
                "--ring",
                "1",
                "--rings",
                "2",
                "--proto",
                "tcp",
            ],
        ],
        "info" => vec![vec!["--iface", "lo"]],
        // No value flags: only its baseline runs, into a new directory.
        "capture" => vec![vec![&capture_dir]],
        // No value flags: only its baseline runs (prints the script).
        "completions" => vec![vec!["bash"]],
        "udp-echo" => vec![vec!["--bind", "127.0.0.1:0", "--cpus", "0", "--duration", "0.3"]],
        "udp-load" => {
            vec![vec!["--target", "127.0.0.1:9", "--count", "2", "--drain", "0.2", "--server-cpus", "2"]]
        }
        "demo" => vec![vec!["--duration", "0.3", "--cpus", "0", "--streams", "2", "--size", "64"]],
        "http-serve" => vec![vec!["--bind", "127.0.0.1:0", "--cpus", "0", "--duration", "0.3", "--quiet"]],
        "http-load" => vec![vec![
            "--url",
            "http://127.0.0.1:9/",
            "--duration",
            "0.3",
            "--connections",
            "2",
            "--threads",
            "1",
            "--quiet",
        ]],
        "firewall" => vec![vec!["--rules", &rules, "--in", &pcap, "--quiet"]],
        "pipeline" => vec![
            vec!["--in", "gen", "--packets", "500", "--flows", "16", "--duration", "1", "--quiet"],
            vec!["--in", &pcap, "--out", &out, "--duration", "1", "--quiet"],
        ],
        "toeplitz" => vec![vec!["--iters", "1024", "--rounds", "1", "--count", "16"]],
        "firewall-bench" => {
            vec![vec![
                "--flows",
                "100",
                "--rounds",
                "1",
                "--runs",
                "1",
                "--workers",
                "1",
                "--replay-flows",
                "100",
            ]]
        }
        // Two quick samples of the host's counters (read only).
        "top" => {
            vec![vec!["--interval", "0.1", "--count", "2", "--duration", "1", "--lines", "--iface", "lo"]]
        }
        // Host tuning on the fake 6-CPU host (hidden --sysroot), apply as a dry run.
        "plan" => vec![vec!["--sysroot", &host, "--iface", "eth0"]],
        "apply" => vec![vec!["--sysroot", &host, "--iface", "eth0", "--dry-run"]],
        "check" => vec![vec!["--sysroot", &host, "--iface", "eth0"]],
        // Keeping it tuned, on the fake host with rsskit's files in a fixture root.
        "persist-list" => vec![vec!["--sysroot", &host, "--root", &root]],
        "persist-apply" => vec![vec!["eth0", "--sysroot", &host, "--root", &root]],
        "persist-remove" => vec![vec!["--sysroot", &host, "--root", &root]],
        "agent" => vec![vec![
            "--sysroot",
            &host,
            "--root",
            &root,
            "--once",
            "--interval",
            "1",
            "--metrics",
            "127.0.0.1:0",
        ]],
        // A process without sockets: refused before anything is touched.
        "steer" => {
            vec![vec!["--pid", &sleeper, "--port", "9", "--steer", "cpu", "--workers", "1", "--bits", "1"]]
        }
        // Every value flag before `--` (appended ones would go to the command).
        "run" => vec![vec![
            "--steer",
            "cpu",
            "--port",
            "9",
            "--workers",
            "1",
            "--bits",
            "1",
            "--timeout",
            "0.3",
            "--",
            "sleep",
            "5",
        ]],
        // No such interface: every flag is parsed and checked, nothing is
        // attached (the netns tests attach to a veth of their own).
        "xdp-steer" => {
            vec![vec!["--iface", "rsskit-none0", "--cpus", "0", "--duration", "0.3", "--queue-size", "64"]]
        }
        _ => return None,
    };
    Some(b.into_iter().map(|v| v.into_iter().map(String::from).collect()).collect())
}

/// The baseline key of a subcommand path: its leaf, except where leaves
/// collide (`bench firewall` / `firewall`, `persist apply` / `apply`).
fn key_of(path: &[String]) -> String {
    let leaf = path.last().unwrap().as_str();
    match (path.len() > 1, path[0].as_str()) {
        (true, "persist") => format!("persist-{leaf}"),
        (true, _) if leaf == "firewall" => "firewall-bench".into(),
        _ => leaf.into(),
    }
}

/// Baseline with `flag=value` in place of (or after) the baseline's own.
fn with_flag(base: &[String], flag: &str, value: &str) -> Vec<String> {
    let mut v = Vec::with_capacity(base.len() + 1);
    let mut i = 0;
    let mut replaced = false;
    while i < base.len() {
        if base[i] == flag {
            v.push(format!("{flag}={value}"));
            replaced = true;
            i += 2;
        } else {
            v.push(base[i].clone());
            i += 1;
        }
    }
    if !replaced {
        v.push(format!("{flag}={value}"));
    }
    v
}

struct Outcome {
    code: Option<i32>,
    signal: Option<i32>,
    stderr: String,
    took: Duration,
    killed: bool,
}

/// Where the swept commands run: file-valued flags given a number
/// (`--plot=0`, `--save=-1`) write there, inside the fixture dir.
static CWD: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

fn run(args: &[String]) -> Outcome {
    let mut cmd = Command::new(bin());
    if let Some(d) = CWD.get() {
        cmd.current_dir(d);
    }
    cmd.args(args).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped());
    // SAFETY: setrlimit is async-signal-safe and touches only the child.
    unsafe {
        cmd.pre_exec(|| {
            let lim = libc::rlimit { rlim_cur: AS_LIMIT, rlim_max: AS_LIMIT };
            if libc::setrlimit(libc::RLIMIT_AS, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let t = Instant::now();
    let mut child = cmd.spawn().expect("spawning rsskit");
    let mut err = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = Vec::new();
        // Bounded: a runaway printing without end is cut, not buffered.
        let _ = err.by_ref().take(1 << 20).read_to_end(&mut s);
        let _ = std::io::copy(&mut err, &mut std::io::sink());
        String::from_utf8_lossy(&s).into_owned()
    });
    let mut killed = false;
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if t.elapsed() > RUN_LIMIT {
            killed = true;
            let _ = child.kill();
            break child.wait().unwrap();
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let took = t.elapsed();
    use std::os::unix::process::ExitStatusExt;
    Outcome { code: status.code(), signal: status.signal(), stderr: reader.join().unwrap(), took, killed }
}

/// Marks of a rejected number in a parser's message (std's parse errors
/// and the CLI's own wording).
const NUMBER_ERRORS: [&str; 8] = [
    "invalid digit",
    "too large to fit",
    "too small to fit",
    "invalid float",
    "cannot parse",
    "whole number",
    "is not a number of",
    "not a CPU number",
];

/// Whether the argument parser refused the value of `flag` as a number.
fn rejected_number(o: &Outcome, flag: &str) -> bool {
    let first = o.stderr.lines().next().unwrap_or("");
    o.code == Some(2)
        && first.starts_with("error: invalid value")
        && first.contains(&format!("'{flag} "))
        && NUMBER_ERRORS.iter().any(|m| first.rsplit_once("': ").is_some_and(|(_, w)| w.contains(m)))
}

/// What is wrong with an outcome, if anything.
fn judge(o: &Outcome, flag: &str, value: &str) -> Option<String> {
    if o.killed {
        return Some(format!("still running after {RUN_LIMIT:?} (killed)"));
    }
    if let Some(s) = o.signal {
        return Some(format!("killed by signal {s}"));
    }
    if o.stderr.contains("panicked") || o.stderr.contains("memory allocation of") {
        return Some("panicked or aborted".into());
    }
    match o.code {
        Some(0) => None,
        Some(1) => {
            let errs: Vec<&str> = o.stderr.lines().filter(|l| l.starts_with("rsskit: error:")).collect();
            (errs.len() != 1)
                .then(|| format!("exit 1 without exactly one 'rsskit: error:' line ({} found)", errs.len()))
        }
        Some(2) => {
            let first = o.stderr.lines().next().unwrap_or("");
            if !first.starts_with("error: ") {
                return Some("exit 2 without an 'error: ' first line".into());
            }
            // A number the parser rejects: the error must name the limit
            // (say what is allowed), not only that the number is bad.
            // Flags of other kinds (addresses, files) say what they expect.
            if first.starts_with("error: invalid value") && first.contains(&format!("'{flag} ")) {
                let why = first.rsplit_once("': ").map(|(_, w)| w).unwrap_or("");
                let numeric = NUMBER_ERRORS.iter().any(|m| why.contains(m));
                let rest = why.replace(value, "");
                if numeric && !rest.chars().any(|c| c.is_ascii_digit()) {
                    return Some(format!("rejected without naming the allowed range: {why:?}"));
                }
            }
            None
        }
        Some(c) => Some(format!("exit code {c}")),
        None => Some("no exit code".into()),
    }
}

#[test]
fn every_value_flag_survives_hostile_numbers() {
    let fx = Fixtures::new("sweep");
    let cwd = fx.dir.join("cwd");
    std::fs::create_dir_all(&cwd).unwrap();
    CWD.set(cwd).unwrap();
    let mut cmds = Vec::new();
    leaves(Vec::new(), &mut cmds);
    assert!(cmds.len() >= 10, "found only {} subcommands: {cmds:?}", cmds.len());
    let mut jobs: Vec<(String, String, String, Vec<String>)> = Vec::new();
    let mut missing = Vec::new();
    let mut nflags = 0;
    for (path, flags) in &cmds {
        let key = key_of(path);
        let Some(bases) = baselines(&key, &fx) else {
            missing.push(path.join(" "));
            continue;
        };
        nflags += flags.len();
        for (flag, text) in flags {
            for base in &bases {
                for value in VALUES {
                    let mut args = path.clone();
                    args.extend(with_flag(base, flag, value));
                    jobs.push((flag.clone(), text.clone(), value.to_string(), args));
                }
            }
        }
    }
    assert!(missing.is_empty(), "subcommands without a baseline in this test: {missing:?}");
    assert!(nflags >= 60, "found only {nflags} value flags");

    // Sanity: every baseline itself succeeds, so the sweep exercises the
    // commands rather than one early error.
    for (path, _) in &cmds {
        let key = key_of(path);
        for base in baselines(&key, &fx).unwrap() {
            let mut args = path.clone();
            args.extend(base);
            let o = run(&args);
            // udp-load and http-load aim at a closed port, `check` finds the
            // fake host misaligned, `steer`/`run` find no sockets, `xdp-steer` no
            // interface: exit 1 is
            // their answer, with one error line; `persist apply` finds no
            // stable identity on the fake NIC.
            let ok = o.code == Some(0)
                || (matches!(
                    key.as_str(),
                    "udp-load" | "http-load" | "check" | "steer" | "run" | "xdp-steer" | "persist-apply"
                ) && o.code == Some(1));
            assert!(ok, "baseline `rsskit {}` failed ({:?}): {}", args.join(" "), o.code, o.stderr);
        }
    }

    let jobs = Mutex::new(jobs.into_iter());
    let failures = Mutex::new(Vec::new());
    let slowest = Mutex::new((Duration::ZERO, String::new()));
    let total = Mutex::new(0usize);
    std::thread::scope(|s| {
        for _ in 0..3 {
            s.spawn(|| loop {
                let Some((flag, text, value, args)) = jobs.lock().unwrap().next() else { break };
                let o = run(&args);
                *total.lock().unwrap() += 1;
                {
                    let mut sl = slowest.lock().unwrap();
                    if o.took > sl.0 {
                        *sl = (o.took, args.join(" "));
                    }
                }
                // A flag that takes a number states its range in --help.
                let undocumented = (rejected_number(&o, &flag) && !text.chars().any(|c| c.is_ascii_digit()))
                    .then(|| format!("--help of {flag} states no range: {text:?}"));
                if let Some(why) = judge(&o, &flag, &value).or(undocumented) {
                    let tail: String = o.stderr.lines().take(4).collect::<Vec<_>>().join("\n    ");
                    failures
                        .lock()
                        .unwrap()
                        .push(format!("rsskit {}\n  -> {why}\n    {tail}", args.join(" ")));
                }
            });
        }
    });
    let (t, cmd) = slowest.into_inner().unwrap();
    eprintln!("{} runs over {nflags} flags; slowest {t:.2?}: rsskit {cmd}", total.into_inner().unwrap());
    let failures = failures.into_inner().unwrap();
    assert!(failures.is_empty(), "{} bad outcomes:\n{}", failures.len(), failures.join("\n"));
}

#[test]
fn a_million_rules_with_one_number_is_refused_quickly() {
    let fx = Fixtures::new("rules");
    let rules = fx.path("million.rules");
    std::fs::write(&rules, "100 allow ip from any to any\n".repeat(1_000_000)).unwrap();
    let args: Vec<String> = ["firewall", "--rules", &rules, "--in", &pcap_in(), "--quiet"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let o = run(&args);
    assert!(o.took < Duration::from_secs(5), "took {:?}", o.took);
    assert_eq!(o.code, Some(1), "{}", o.stderr);
    assert_eq!(o.stderr.lines().count(), 1, "{}", o.stderr);
    assert!(o.stderr.contains("line 65537") && o.stderr.contains("at most 65536 rules"), "{}", o.stderr);
}
