//! The DaemonSet's pod, run without a container runtime (this machine
//! cannot start OCI containers: docs/DEPLOY.md). `scripts/pod-emulate`
//! reads `deploy/kubernetes/rsskit-agent.yaml` and runs its container as a
//! runtime would: a bookworm minbase root (mmdebstrap, cached under
//! target/pkgtest like the package test's) with the `rsskit` that `cargo
//! test` built copied to /usr/bin/rsskit where the .deb puts it (not the
//! .deb: that needs a release build), pivot_root'ed into, read-only; its own
//! PID namespace (the agent is PID 1) and mount namespace; the manifest's
//! hostPath mounts taken from a scratch "node" tree (so nothing of this
//! machine's /etc or /run is written), except /sys, a fresh sysfs of the
//! node's network namespace; the user and capabilities the manifest grants
//! (setpriv); and the node's network: a namespace this test makes, with a
//! 4-queue veth whose plan `rsskit apply --persist` stored in the node tree.
//!
//! As the manifest says (privileged): the agent starts, reads the node's
//! plan, puts back drift found at start and by the periodic check, answers
//! the liveness probe's GET /metrics, shares the node's lock (a check waits
//! while the node's side holds /run/rsskit.lock), stays under the memory
//! limit, and stops on SIGTERM to PID 1. With docs/DEPLOY.md's
//! capability-only securityContext: the same corrections with exactly its
//! capabilities and /proc/irq and /proc/sys read-only; with those
//! capabilities taken away too, the RPS write is refused (the drop is real).
//! The agent gets `--interval 2` after the manifest's args (30 s is too long
//! to wait for). Needs root; ignored with the reason where unshare, setpriv
//! or mmdebstrap is missing or not permitted (build/host_probe.rs).

mod common;

use common::agent::{get_in_netns, sample, Agent};
use common::netns::{require_root_and_ip, rsskit, unique, Netns, TempDir};
use common::proc::output_text as out;
use std::io::Write as _;
use std::os::fd::AsRawFd as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

const QUEUES: &str = "4";
const MAC: &str = "02:72:73:6b:00:35";
/// The extra agent argument: re-check every 2 s instead of the default 30 s.
const INTERVAL: &str = "2";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A field of /proc/PID/status.
fn status_field(pid: u32, field: &str) -> String {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
        .trim()
        .to_string()
}

fn caps(pid: u32, field: &str) -> u64 {
    u64::from_str_radix(&status_field(pid, field), 16).unwrap()
}

/// The mask of capability names (CAP_ prefix optional).
fn cap_bits(names: &[String]) -> u64 {
    names
        .iter()
        .map(|n| match n.trim_start_matches("CAP_") {
            "NET_ADMIN" => 12,
            "NET_RAW" => 13,
            "IPC_LOCK" => 14,
            "SYS_PTRACE" => 19,
            "SYS_ADMIN" => 21,
            "SYS_NICE" => 23,
            "SYS_RESOURCE" => 24,
            "PERFMON" => 38,
            "BPF" => 39,
            other => panic!("capability {other}: add its number here"),
        })
        .fold(0, |m, b| m | 1u64 << b)
}

/// The topmost mount at `point` in /proc/PID/mountinfo: (its options, fs type).
fn mount_at(pid: u32, point: &str) -> Option<(String, String)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/mountinfo")).unwrap();
    text.lines().rev().find_map(|l| {
        let (a, b) = l.split_once(" - ")?;
        let f: Vec<&str> = a.split(' ').collect();
        let fs = b.split(' ').next()?;
        (f.get(4) == Some(&point)).then(|| (f[5].to_string(), fs.to_string()))
    })
}

fn read_only(opts: &str) -> bool {
    opts.split(',').any(|o| o == "ro")
}

/// A pod run by scripts/pod-emulate: its log (stderr), and its PID 1 (the
/// agent) once it is up.
struct Pod {
    agent: Agent,
    pid1: u32,
}

impl Pod {
    /// Starts the pod (the agent with `--interval 2` after the manifest's
    /// args) and waits until the agent says it is ready.
    fn start(ns: &Netns, host: &Path, work: &Path, secctx: Option<&Path>) -> Pod {
        let mut c = Command::new(repo().join("scripts/pod-emulate"));
        c.arg("--netns").arg(&ns.name).arg("--host").arg(host).arg("--work").arg(work);
        c.arg("--binary").arg(rsskit());
        if let Some(f) = secctx {
            c.arg("--security-context").arg(f);
        }
        c.args(["--", "--interval", INTERVAL]);
        let agent = Agent::spawn(c);
        // The first run makes the bookworm root (mmdebstrap): minutes.
        let cached = repo().join("target/pkgtest/bookworm-minbase.tar").exists();
        let within = Duration::from_secs(if cached { 120 } else { 900 });
        let (_, l) = agent.wait_for(0, &["pod-emulate: pid "], within);
        let outer: u32 = l["pod-emulate: pid ".len()..].split(':').next().unwrap().parse().unwrap();
        let ready = format!("ready: re-checking every {INTERVAL}.0 s and on link events");
        agent.wait_for(0, &[&ready], within);
        // PID 1 of the pod: the only child of unshare (the script's pid).
        let mut pid1 = None;
        assert!(
            common::netns::wait_until(Duration::from_secs(10), || {
                pid1 = child_of(outer);
                pid1.is_some()
            }),
            "no child of the pod's unshare (pid {outer}); log:\n{}",
            agent.text()
        );
        Pod { agent, pid1: pid1.unwrap() }
    }

    /// SIGTERM to PID 1, as the kubelet stops a container; its exit status.
    fn terminate(self) -> std::process::ExitStatus {
        let n = self.agent.lines();
        // SAFETY: kill on the pod's PID 1, a process this test started.
        unsafe { libc::kill(self.pid1 as i32, libc::SIGTERM) };
        self.agent.wait_for(n, &["stopping (signal)"], Duration::from_secs(30));
        self.agent.stop()
    }
}

fn child_of(pid: u32) -> Option<u32> {
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let p: u32 = e.file_name().to_str()?.parse().ok()?;
        let st = std::fs::read_to_string(format!("/proc/{p}/stat")).ok()?;
        // pid (comm) state ppid ...: comm may hold spaces, so after the last ')'.
        let ppid: u32 = st.rsplit_once(')')?.1.split_whitespace().nth(1)?.parse().ok()?;
        (ppid == pid).then_some(p)
    })
}

/// docs/DEPLOY.md's capability-only `securityContext`, as YAML.
fn capability_only_variant() -> String {
    let doc = std::fs::read_to_string(repo().join("docs/DEPLOY.md")).unwrap();
    let from = doc.find("**The capability-only variant**").expect("DEPLOY.md's capability-only variant");
    let block = doc[from..].split("```yaml\n").nth(1).and_then(|b| b.split("```").next()).unwrap();
    let indent = block.lines().filter(|l| !l.trim().is_empty()).map(|l| l.len() - l.trim_start().len()).min();
    let text: String =
        block.lines().map(|l| format!("{}\n", l.get(indent.unwrap()..).unwrap_or(""))).collect();
    assert!(text.contains("privileged: false") && text.contains("add: ["), "{text}");
    text
}

/// The names in the variant's `add: [...]`.
fn added_caps(yaml: &str) -> Vec<String> {
    let line = yaml.lines().find_map(|l| l.trim().strip_prefix("add:")).unwrap();
    line.trim().trim_matches(['[', ']']).split(',').map(|s| s.trim().trim_matches('"').to_string()).collect()
}

/// The manifest's memory limit, in bytes (`memory: NMi` under `limits:`).
fn memory_limit() -> u64 {
    let yaml = std::fs::read_to_string(repo().join("deploy/kubernetes/rsskit-agent.yaml")).unwrap();
    let after = &yaml[yaml.find("limits:").expect("resources.limits in the manifest")..];
    let mi = after.lines().find_map(|l| l.trim().strip_prefix("memory:")).unwrap().trim();
    mi.strip_suffix("Mi").expect("a limit in Mi").parse::<u64>().unwrap() << 20
}

#[test]
#[cfg_attr(
    rsskit_no_pod_emulation,
    ignore = "scripts/pod-emulate cannot run here: unshare, nsenter, setpriv, pivot_root or mmdebstrap missing, or unshare not permitted (build/host_probe.rs)"
)]
fn daemonset_pod_runs_the_agent_which_keeps_the_nodes_plan() {
    require_root_and_ip();
    assert!(
        rsskit_linux::cpulist::online().len() > 1,
        "needs 2+ CPUs: RPS/XPS over one CPU cannot drift visibly"
    );
    let dir = TempDir(std::env::temp_dir().join(format!("rsskit-pod-emulation-{}", unique("d"))));
    let host = dir.0.join("node");
    std::fs::create_dir_all(&host).unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    for d in [&dir.0, &host] {
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let ns = Netns::new("rspod");
    let (a, b) = (unique("vp"), unique("vq"));
    ns.veth_with_mac(&a, &b, MAC, QUEUES);

    // The node's operator: a plan, applied and persisted in the node tree.
    let run = |args: &[&str]| -> Output {
        let mut c = ns.command(&rsskit());
        c.current_dir(&dir.0).args(args);
        common::netns::Proc::spawn(c).wait(Duration::from_secs(60))
    };
    let o = run(&["plan", "--iface", &a, "--json"]);
    assert!(o.status.success(), "{}", out(&o));
    std::fs::write(dir.0.join("plan.json"), &o.stdout).unwrap();
    let plan: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let nums = |v: &serde_json::Value| -> Vec<usize> {
        v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as usize).collect()
    };
    let rps_plan = nums(&plan["devices"][0]["rx"][1]["rps_cpus"]);
    let rps2_plan = nums(&plan["devices"][0]["rx"][2]["rps_cpus"]);
    let xps_plan = nums(&plan["devices"][0]["tx"][0]["xps_cpus"]);
    assert!(!rps_plan.is_empty() && !rps2_plan.is_empty() && !xps_plan.is_empty(), "RPS/XPS planned: {plan}");
    let hosts = host.display().to_string();
    let o = run(&["apply", "plan.json", "--save", "saved.json", "--persist", "--root", &hosts]);
    assert!(o.status.success(), "{}", out(&o));
    let rps = format!("/sys/class/net/{a}/queues/rx-1/rps_cpus");
    let rps2 = format!("/sys/class/net/{a}/queues/rx-2/rps_cpus");
    let xps = format!("/sys/class/net/{a}/queues/tx-0/xps_cpus");

    // 1. The manifest as it is (privileged).
    ns.write(&rps, "0");
    let pod = Pod::start(&ns, &host, &dir.0.join("pod1"), None);
    let log = &pod.agent;
    log.wait_for(0, &["1 plan(s) loaded from /etc/rsskit/devices"], Duration::from_secs(1));
    log.wait_for(
        0,
        &[&format!("{a}: corrected rx-1 rps_cpus: "), "(cause: found at start)"],
        Duration::from_secs(1),
    );
    assert_eq!(ns.mask(&rps), rps_plan);
    let p = pod.pid1;
    let cmdline = std::fs::read_to_string(format!("/proc/{p}/cmdline")).unwrap().replace('\0', " ");
    assert_eq!(cmdline.trim_end(), "/usr/bin/rsskit agent --metrics 0.0.0.0:9477 --interval 2");
    assert!(
        status_field(p, "NSpid").ends_with("\t1"),
        "PID 1 in its namespace: {}",
        status_field(p, "NSpid")
    );
    assert_eq!(status_field(p, "Uid").split_whitespace().next(), Some("0"));
    let all = caps(std::process::id(), "CapBnd");
    assert_eq!((caps(p, "CapEff"), caps(p, "CapBnd")), (all, all), "privileged: every capability");
    let (root_opts, _) = mount_at(p, "/").unwrap();
    assert!(read_only(&root_opts), "readOnlyRootFilesystem: / is {root_opts}");
    let (plans_opts, _) = mount_at(p, "/etc/rsskit").expect("the plans hostPath");
    assert!(read_only(&plans_opts), "/etc/rsskit is {plans_opts}");
    let (lock_opts, _) = mount_at(p, "/run/rsskit.lock").expect("the lock hostPath");
    assert!(!read_only(&lock_opts), "/run/rsskit.lock is {lock_opts}");
    let (sys_opts, sys_fs) = mount_at(p, "/sys").unwrap();
    assert!(sys_fs == "sysfs" && !read_only(&sys_opts), "/sys: {sys_fs} {sys_opts}");
    assert!(mount_at(p, "/proc/irq").is_none(), "privileged: /proc/irq not made read-only");

    // Drift found by the periodic check.
    let n = log.lines();
    ns.write(&xps, "0");
    log.wait_for(
        n,
        &[&format!("{a}: corrected tx-0 xps_cpus: "), "(cause: found by the periodic re-check)"],
        Duration::from_secs(20),
    );
    assert_eq!(ns.mask(&xps), xps_plan);

    // The liveness probe's GET /metrics on the node's address (hostNetwork).
    let (status, body) = get_in_netns(&ns.name, "127.0.0.1:9477", "/metrics");
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert_eq!(sample(&body, &format!("rsskit_device_aligned{{device=\"{a}\"}}")), Some(1.0), "{body}");
    let hwm: u64 = status_field(p, "VmHWM").trim_end_matches(" kB").trim().parse::<u64>().unwrap() << 10;
    assert!(hwm < memory_limit(), "peak RSS {hwm} bytes over the manifest's limit {}", memory_limit());

    // The node's lock is the pod's: held on the node, the agent's check waits.
    let lock = std::fs::OpenOptions::new().read(true).write(true).open(host.join("run/rsskit.lock")).unwrap();
    assert!(
        common::netns::wait_until(Duration::from_secs(10), || {
            // SAFETY: flock on a descriptor we hold open.
            unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) == 0 }
        }),
        "cannot take the node's lock"
    );
    lock.set_len(0).unwrap();
    (&lock)
        .write_all(format!("pid {}: pod_emulation test (the node side)", std::process::id()).as_bytes())
        .unwrap();
    let n = log.lines();
    ns.write(&rps2, "0");
    log.wait_for(n, &["check skipped", "/run/rsskit.lock", "pod_emulation test"], Duration::from_secs(30));
    assert!(ns.mask(&rps2).is_empty(), "written while the node held the lock");
    lock.set_len(0).unwrap();
    drop(lock);
    log.wait_for(n, &[&format!("{a}: corrected rx-2 rps_cpus: ")], Duration::from_secs(30));
    assert_eq!(ns.mask(&rps2), rps2_plan);
    let st = pod.terminate();
    assert!(st.success(), "the pod's exit: {st:?}");

    // 2. docs/DEPLOY.md's capability-only variant: exactly its capabilities.
    let variant = capability_only_variant();
    let want = cap_bits(&added_caps(&variant));
    let secctx = dir.0.join("capability-only.yaml");
    std::fs::write(&secctx, &variant).unwrap();
    ns.write(&rps, "0");
    let pod = Pod::start(&ns, &host, &dir.0.join("pod2"), Some(&secctx));
    let log = &pod.agent;
    log.wait_for(
        0,
        &[&format!("{a}: corrected rx-1 rps_cpus: "), "(cause: found at start)"],
        Duration::from_secs(1),
    );
    let p = pod.pid1;
    for f in ["CapEff", "CapPrm", "CapBnd", "CapInh", "CapAmb"] {
        assert_eq!(caps(p, f), want, "{f} of the capability-only pod: {:x}", caps(p, f));
    }
    assert_eq!(status_field(p, "NoNewPrivs"), "1", "allowPrivilegeEscalation: false");
    for ro in ["/", "/proc/irq", "/proc/sys"] {
        let (opts, _) = mount_at(p, ro).unwrap_or_else(|| panic!("no mount at {ro}"));
        assert!(read_only(&opts), "{ro} is {opts}");
    }
    let (sys_opts, _) = mount_at(p, "/sys").unwrap();
    assert!(!read_only(&sys_opts), "the hostPath /sys over the runtime's read-only one: {sys_opts}");
    let n = log.lines();
    ns.write(&xps, "0");
    log.wait_for(n, &[&format!("{a}: corrected tx-0 xps_cpus: ")], Duration::from_secs(20));
    assert_eq!(ns.mask(&xps), xps_plan);
    let st = pod.terminate();
    assert!(st.success(), "the pod's exit: {st:?}");

    // 3. Those capabilities taken away as well: the RPS write is refused.
    let none = dir.0.join("no-capabilities.yaml");
    let stripped: String = variant
        .lines()
        .map(|l| match l.trim_start().strip_prefix("add:") {
            Some(_) => format!("{}add: []\n", &l[..l.len() - l.trim_start().len()]),
            None => format!("{l}\n"),
        })
        .collect();
    std::fs::write(&none, stripped).unwrap();
    ns.write(&rps, "0");
    let mut c = Command::new(repo().join("scripts/pod-emulate"));
    c.arg("--netns").arg(&ns.name).arg("--host").arg(&host).arg("--work").arg(dir.0.join("pod3"));
    c.arg("--binary").arg(rsskit()).arg("--security-context").arg(&none).args(["--", "--once"]);
    let o = common::netns::Proc::spawn(c).wait(Duration::from_secs(120));
    let text = out(&o);
    assert_eq!(o.status.code(), Some(1), "--once with no capabilities: {text}");
    assert!(text.contains(&format!("{a}: cannot apply rx-1 rps_cpus")), "{text}");
    assert!(text.contains("not aligned after one check"), "{text}");
    assert!(ns.mask(&rps).is_empty(), "written without CAP_NET_ADMIN: {text}");
}
