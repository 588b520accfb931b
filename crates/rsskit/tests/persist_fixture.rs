//! Keeping a host tuned, against the fixture tree (tests/fixtures/host6cpu:
//! a 4-queue NIC with a fake ethtool driver) and a fixture root for rsskit's
//! own files (etc/rsskit, run/rsskit.lock, the udev rule and units,
//! irqbalance's options): `apply --persist`, `persist list/remove`, the
//! irqbalance bans and their exact undo, the host lock, `rsskit agent`
//! correcting drift with its cause, refused-once, contested, its metrics
//! (checked by promtool), and the units through `systemd-analyze verify`.
//! Nothing here touches the machine's own /etc, /run, irqbalance or systemd.

mod common;

use common::proc::output_text as out;

use common::agent::{get, promtool_check, sample, Agent};
use common::fixture::HostTree;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

const MAC: &str = "00:1b:21:aa:bb:cc";
const PLAN_FILE: &str = "etc/rsskit/devices/mac-001b21aabbcc.json";
const DEBIAN_IRQB: &str =
    "# Options to the irqbalance daemon\n#IRQBALANCE_ONESHOT=\nIRQBALANCE_ARGS=\"--banirq=7\"\n";

struct Host {
    tree: HostTree,
    /// The fixture root for rsskit's own files.
    root: PathBuf,
}

impl Host {
    fn new(tag: &str) -> Host {
        let tree = HostTree::new(tag);
        let dev = tree.0.join("sys/class/net/eth0");
        fs::write(dev.join("address"), format!("{MAC}\n")).unwrap();
        fs::write(dev.join("addr_assign_type"), "0\n").unwrap();
        let root = tree.0.join("hostroot");
        fs::create_dir_all(root.join("etc/default")).unwrap();
        fs::write(root.join("etc/default/irqbalance"), DEBIAN_IRQB).unwrap();
        Host { tree, root }
    }

    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(common::netns::rsskit());
        c.current_dir(&self.tree.0).args(args).args([
            "--sysroot",
            &s(&self.tree.0),
            "--root",
            &s(&self.root),
        ]);
        c
    }

    fn run(&self, args: &[&str]) -> Output {
        common::netns::Proc::spawn(self.cmd(args)).wait(Duration::from_secs(60))
    }

    fn sys(&self, rel: &str) -> PathBuf {
        self.tree.0.join(rel)
    }

    fn plan(&self, extra: &[&str]) {
        let mut args = vec!["plan", "--iface", "eth0", "--json"];
        args.extend(extra);
        let mut c = Command::new(common::netns::rsskit());
        c.args(&args).args(["--sysroot", &s(&self.tree.0)]);
        let o = c.output().unwrap();
        assert!(o.status.success(), "{}", out(&o));
        fs::write(self.tree.0.join("plan.json"), &o.stdout).unwrap();
    }
}

fn s(p: &Path) -> String {
    p.display().to_string()
}

/// Writes as the kernel's files change: at once (the agent never reads half a write).
fn put(p: &Path, text: &str) {
    let tmp = p.with_extension("tmp");
    fs::write(&tmp, text).unwrap();
    fs::rename(&tmp, p).unwrap();
}

fn read(p: &Path) -> String {
    fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display())).trim().to_string()
}

#[test]
fn apply_persist_stores_installs_bans_and_remove_undoes_exactly_that() {
    use std::os::unix::fs::PermissionsExt as _;
    let h = Host::new("persist");
    h.plan(&["--key", "random"]);
    let o = h.run(&["apply", "plan.json", "--save", "saved.json", "--persist"]);
    assert!(o.status.success(), "{}", out(&o));
    let text = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(text.contains(&format!("Persisted the plan of eth0 (permanent MAC {MAC})")), "{text}");
    let plan_path = h.root.join(PLAN_FILE);
    assert_eq!(fs::metadata(&plan_path).unwrap().permissions().mode() & 0o777, 0o600, "it holds the key");
    let rule = h.root.join("etc/udev/rules.d/90-rsskit.rules");
    let unit = h.root.join("etc/systemd/system/rsskit-apply@.service");
    assert!(read(&rule).contains("ENV{SYSTEMD_WANTS}+=\"rsskit-apply@$name.service\""));
    assert!(read(&unit).contains("ExecStart=/usr/bin/rsskit persist apply %i"));
    // irqbalance: the 4 queue IRQs (40-43) banned next to the operator's own ban of 7; not restarted (a fixture root).
    let irqb = read(&h.root.join("etc/default/irqbalance"));
    assert!(
        irqb.contains("IRQBALANCE_ARGS=\"--banirq=7 --banirq=40 --banirq=41 --banirq=42 --banirq=43\""),
        "{irqb}"
    );
    assert!(text.contains("irqbalance: added --banirq for IRQs 40,41,42,43"), "{text}");
    assert!(text.contains("not restarted"), "{text}");
    // Banned before any IRQ is written: an irqbalance without the bans could move one in between.
    let (ban, writing) = (text.find("irqbalance: added").unwrap(), text.find("Writing:").expect("Writing:"));
    assert!(ban < writing, "the bans come before the writes: {text}");

    let o = h.run(&["persist", "list"]);
    let l = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(o.status.success(), "{}", out(&o));
    assert!(
        l.contains("1 persisted plan(s)")
            && l.contains("mac-001b21aabbcc.json")
            && l.contains("present as eth0"),
        "{l}"
    );
    assert!(l.contains("irqbalance: rsskit banned IRQs 40,41,42,43"), "{l}");

    // Drift, then `persist apply eth0` (what the udev rule's unit runs) puts it back.
    let rps = h.sys("sys/class/net/eth0/queues/rx-1/rps_cpus");
    let irq = h.sys("proc/irq/42/smp_affinity_list");
    let (rps0, irq0) = (read(&rps), read(&irq));
    fs::write(&rps, "3f\n").unwrap();
    fs::write(&irq, "0-5\n").unwrap();
    let o = h.run(&["persist", "apply", "eth0"]);
    assert!(o.status.success(), "{}", out(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("2 of"), "{}", out(&o));
    assert_eq!((read(&rps), read(&irq)), (rps0, irq0));

    // A tampered plan file is refused, and nothing of it is written.
    let good = fs::read_to_string(&plan_path).unwrap();
    fs::write(&plan_path, good.replace("\"cpus\": [", "\"cpus\": [99999, ")).unwrap();
    fs::write(&rps, "3f\n").unwrap();
    let o = h.run(&["persist", "apply", "eth0"]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("CPUs out of range"), "{}", out(&o));
    assert_eq!(read(&rps), "3f", "nothing written from a bad file");
    fs::write(&plan_path, good).unwrap();

    let o = h.run(&["persist", "remove"]);
    assert!(o.status.success(), "{}", out(&o));
    assert!(!plan_path.exists() && !rule.exists() && !unit.exists(), "{}", out(&o));
    assert_eq!(
        fs::read_to_string(h.root.join("etc/default/irqbalance")).unwrap(),
        DEBIAN_IRQB,
        "exactly as before"
    );
    assert!(!h.root.join("etc/rsskit/irqbalance.json").exists());
    let o = h.run(&["persist", "remove", "eth0"]);
    assert_eq!(o.status.code(), Some(1), "{}", out(&o));
    assert!(String::from_utf8_lossy(&o.stderr).contains("no persisted plan matches it"), "{}", out(&o));
}

#[test]
fn a_device_without_a_stable_identity_is_not_persisted() {
    let h = Host::new("noid");
    fs::write(h.sys("sys/class/net/eth0/addr_assign_type"), "1\n").unwrap();
    h.plan(&[]);
    let irq = read(&h.sys("proc/irq/41/smp_affinity_list"));
    let o = h.run(&["apply", "plan.json", "--save", "saved.json", "--persist"]);
    assert_eq!(o.status.code(), Some(1), "{}", out(&o));
    assert!(String::from_utf8_lossy(&o.stderr).contains("eth0 has no stable identity"), "{}", out(&o));
    assert!(!h.root.join("etc/rsskit/devices").exists());
    assert_eq!(read(&h.sys("proc/irq/41/smp_affinity_list")), irq, "refused before anything is written");
}

#[test]
fn a_held_lock_makes_a_writer_wait_then_refuse_naming_the_holder() {
    let h = Host::new("lock");
    h.plan(&[]);
    let before = read(&h.sys("proc/irq/41/smp_affinity_list"));
    let held = rsskit_host::lock::acquire(&h.root, Duration::ZERO, "the test holding the lock").unwrap();
    let o = h.run(&["apply", "plan.json", "--save", "saved.json", "--lock-wait", "0.3"]);
    assert_eq!(o.status.code(), Some(1), "{}", out(&o));
    let e = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(e.contains(&format!("pid {}: the test holding the lock", std::process::id())), "{e}");
    assert!(e.contains("rsskit: hint: --lock-wait S waits longer"), "{e}");
    assert_eq!(read(&h.sys("proc/irq/41/smp_affinity_list")), before, "nothing written");
    assert!(!h.tree.0.join("saved.json").exists());
    // Released while the next writer waits: it goes ahead.
    let waiter = common::netns::Proc::spawn(h.cmd(&[
        "apply",
        "plan.json",
        "--save",
        "saved.json",
        "--lock-wait",
        "30",
    ]));
    std::thread::sleep(Duration::from_millis(500));
    drop(held);
    let o = waiter.wait(Duration::from_secs(60));
    assert!(o.status.success(), "{}", out(&o));
}

#[test]
fn two_concurrent_applies_are_serialised() {
    // Two plans that differ in every IRQ; both run at once. Serialised, the
    // second reads (and saves) what the first wrote, so restoring the saves
    // in reverse order gives back the original host. Interleaved, both would
    // save the original values and the host would end up half one, half other.
    let h = Host::new("serial");
    let irqs: Vec<PathBuf> = (40..=43).map(|i| h.sys(&format!("proc/irq/{i}/smp_affinity_list"))).collect();
    let orig: Vec<String> = irqs.iter().map(|p| read(p)).collect();
    h.plan(&["--cpus", "0-3"]);
    fs::rename(h.tree.0.join("plan.json"), h.tree.0.join("a.json")).unwrap();
    h.plan(&["--cpus", "2-5"]);
    fs::rename(h.tree.0.join("plan.json"), h.tree.0.join("b.json")).unwrap();
    let a = common::netns::Proc::spawn(h.cmd(&["apply", "a.json", "--save", "sa.json", "--lock-wait", "60"]));
    let b = common::netns::Proc::spawn(h.cmd(&["apply", "b.json", "--save", "sb.json", "--lock-wait", "60"]));
    let (oa, ob) = (a.wait(Duration::from_secs(90)), b.wait(Duration::from_secs(90)));
    assert!(oa.status.success(), "{}", out(&oa));
    assert!(ob.status.success(), "{}", out(&ob));
    let saved = |f: &str| -> Vec<(String, String)> {
        let v: serde_json::Value =
            serde_json::from_str(&fs::read_to_string(h.tree.0.join(f)).unwrap()).unwrap();
        v["settings"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| s["kind"] == "irq_affinity")
            .map(|s| (s["irq"].to_string(), s["value"].as_str().unwrap().to_string()))
            .collect()
    };
    let now: Vec<String> = irqs.iter().map(|p| read(p)).collect();
    let sa = saved("sa.json");
    let olds = |v: &[(String, String)]| v.iter().map(|x| x.1.clone()).collect::<Vec<_>>();
    // The one that ran first saved the original; the other saved the first one's values.
    let (first, second) = if olds(&sa) == orig {
        (("sa.json", "a.json"), "sb.json")
    } else {
        (("sb.json", "b.json"), "sa.json")
    };
    let plan_irqs = |f: &str| -> Vec<String> {
        let v: serde_json::Value =
            serde_json::from_str(&fs::read_to_string(h.tree.0.join(f)).unwrap()).unwrap();
        v["devices"][0]["irqs"].as_array().unwrap().iter().map(|x| x["cpus"][0].to_string()).collect()
    };
    assert_eq!(olds(&saved(first.0)), orig, "the first writer saved the original host");
    let second_saved = olds(&saved(second));
    assert_eq!(second_saved, plan_irqs(first.1), "the second writer saved what the first one wrote");
    assert_ne!(now, orig);
    for f in [second, first.0] {
        let o = h.run(&["apply", "--restore", f]);
        assert!(o.status.success(), "{}", out(&o));
    }
    assert_eq!(
        irqs.iter().map(|p| read(p)).collect::<Vec<_>>(),
        orig,
        "restoring in reverse order gives the original"
    );
}

fn metrics_addr(a: &Agent) -> String {
    let (_, l) = a.wait_for(0, &["metrics at http://"], Duration::from_secs(20));
    l.split("http://").nth(1).unwrap().trim_end_matches("/metrics").to_string()
}

#[test]
fn agent_puts_back_drift_reports_refused_once_and_contested_and_serves_metrics() {
    let h = Host::new("agent");
    h.plan(&[]);
    let o = h.run(&["apply", "plan.json", "--save", "saved.json", "--persist"]);
    assert!(o.status.success(), "{}", out(&o));
    let rps = h.sys("sys/class/net/eth0/queues/rx-2/rps_cpus");
    let irq = h.sys("proc/irq/43/smp_affinity_list");
    let (rps0, irq0) = (read(&rps), read(&irq));
    // Drift before it starts: found at start.
    put(&irq, "0-5\n");
    let a = Agent::spawn(h.cmd(&["agent", "--interval", "1", "--metrics", "127.0.0.1:0"]));
    let addr = metrics_addr(&a);
    a.wait_for(
        0,
        &["eth0: corrected IRQ 43 (eth0-TxRx-3) affinity: 0-5 ->", "(cause: found at start)"],
        Duration::from_secs(20),
    );
    a.wait_for(0, &["ready: re-checking every 1.0 s"], Duration::from_secs(20));
    assert_eq!(read(&irq), irq0);

    // Behind its back: the periodic re-check puts it back.
    put(&rps, "3f\n");
    a.wait_for(
        0,
        &["eth0: corrected rx-2 rps_cpus: 3f ->", "(cause: found by the periodic re-check)"],
        Duration::from_secs(20),
    );
    assert_eq!(read(&rps), rps0);

    // Flipped back twice more: contested, then left alone.
    for _ in 0..2 {
        let n = a.lines();
        put(&rps, "3f\n");
        a.wait_for(n, &["eth0: corrected rx-2 rps_cpus: 3f"], Duration::from_secs(20));
    }
    a.wait_for(
        0,
        &["eth0: rx-2 rps_cpus is contested: put back 3 times", "left alone for 60 s"],
        Duration::from_secs(20),
    );
    put(&rps, "3f\n");
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(read(&rps), "3f", "contested: left alone during the back-off");

    // The driver starts refusing SRSSH: reported once, not retried in a loop.
    let drv = h.sys("ethtool/eth0.json");
    let mut v: serde_json::Value = serde_json::from_str(&fs::read_to_string(&drv).unwrap()).unwrap();
    v["rss"]["table"] = serde_json::json!(vec![0; 128]);
    v["refuse_set"] = serde_json::json!("operation not supported by the driver");
    put(&drv, &serde_json::to_string(&v).unwrap());
    let (i, _) = a.wait_for(
        0,
        &["eth0: cannot apply RSS indirection table: ETHTOOL_SRSSH: operation not supported"],
        Duration::from_secs(20),
    );
    std::thread::sleep(Duration::from_millis(2500));
    let again =
        a.log.lock().unwrap().iter().skip(i + 1).filter(|l| l.contains("RSS indirection table")).count();
    assert_eq!(again, 0, "reported once:\n{}", a.text());

    let (status, body) = get(&addr, "/metrics");
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert_eq!(sample(&body, "rsskit_plans "), Some(1.0), "{body}");
    assert_eq!(sample(&body, "rsskit_device_aligned{device=\"eth0\"}"), Some(0.0), "{body}");
    assert_eq!(
        sample(&body, "rsskit_device_problems{device=\"eth0\",kind=\"contested\"}"),
        Some(1.0),
        "{body}"
    );
    assert_eq!(
        sample(&body, "rsskit_device_problems{device=\"eth0\",kind=\"refused\"}"),
        Some(1.0),
        "{body}"
    );
    assert_eq!(
        sample(&body, "rsskit_corrections_total{device=\"eth0\",setting=\"rps_cpus\",cause=\"periodic\"}"),
        Some(3.0),
        "{body}"
    );
    assert_eq!(
        sample(&body, "rsskit_corrections_total{device=\"eth0\",setting=\"irq_affinity\",cause=\"start\"}"),
        Some(1.0),
        "{body}"
    );
    assert!(sample(&body, "rsskit_softnet_processed_packets_total{cpu=\"0\"}").is_some(), "{body}");
    let (ok, why) = promtool_check(&body);
    assert!(ok, "promtool check metrics: {why}\n{body}");
    assert_eq!(get(&addr, "/").0, "HTTP/1.1 404 Not Found");

    // SIGHUP reloads (refusals get one new try), SIGTERM stops cleanly.
    let n = a.lines();
    a.signal(libc::SIGHUP);
    a.wait_for(n, &["SIGHUP: reloading the plans"], Duration::from_secs(20));
    a.wait_for(n, &["1 plan(s) loaded"], Duration::from_secs(20));
    let st = a.stop();
    assert!(st.success(), "{st:?}");
}

/// `ethtool -N eth0 rx-flow-hash udp4 sd` behind the agent's back: it
/// puts the planned 4-tuple back and then writes the device's key again
/// (virtio_net takes hashed fields only with ETHTOOL_SRSSH; see
/// tune::push_hash_fields), the key unchanged.
#[test]
fn agent_puts_back_hashed_fields_and_writes_the_key_again() {
    let h = Host::new("fields");
    h.plan(&[]);
    let mut plan: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(h.sys("plan.json")).unwrap()).unwrap();
    plan["devices"][0]["hash_fields"] =
        serde_json::json!([{"flow": "udp4", "fields": ["ip_src", "ip_dst", "l4_src_port", "l4_dst_port"]}]);
    fs::write(h.sys("plan.json"), plan.to_string()).unwrap();
    let o = h.run(&["apply", "plan.json", "--persist"]);
    assert!(o.status.success(), "{}", out(&o));
    let drv = h.sys("ethtool/eth0.json");
    let driver =
        || -> serde_json::Value { serde_json::from_str(&fs::read_to_string(&drv).unwrap()).unwrap() };
    assert_eq!(driver()["hash"]["udp4"], 0xf0, "apply set the 4-tuple");
    let key = driver()["rss"]["key"].clone();
    let o = h.run(&["agent", "--once"]);
    assert!(o.status.success(), "nothing drifted yet: {}", out(&o));
    assert!(!String::from_utf8_lossy(&o.stderr).contains("written again"), "{}", out(&o));

    let mut v = driver();
    v["hash"]["udp4"] = serde_json::json!(0x30);
    put(&drv, &serde_json::to_string(&v).unwrap());
    let o = h.run(&["agent", "--once"]);
    let log = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(o.status.success(), "put back, so aligned: {}", out(&o));
    let fixed = log.find("eth0: corrected udp4 hashed fields: ip_src,ip_dst -> ip_src,ip_dst,l4_src_port,l4_dst_port (cause: found at start)");
    let again = log
        .find("eth0: RSS key written again (the device takes hashed fields with it) after the hashed fields");
    assert!(fixed.is_some() && again.is_some() && fixed < again, "fields put back, then the key: {log}");
    assert_eq!(driver()["hash"]["udp4"], 0xf0);
    assert_eq!(driver()["rss"]["key"], key, "the same key written");
}

#[test]
fn units_pass_systemd_analyze_verify() {
    // systemd-analyze checks that ExecStart exists: verify copies whose
    // /usr/bin/rsskit is the binary under test. Never installed or started.
    let analyze = Path::new("/usr/bin/systemd-analyze");
    assert!(
        analyze.exists(),
        "systemd-analyze missing: scripts/install-deps.sh installs Debian's systemd package"
    );
    let dir = std::env::temp_dir().join(format!("rsskit-units-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    let bin = common::netns::rsskit();
    let deploy = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/systemd");
    for f in ["rsskit-apply@.service", "rsskit-agent.service"] {
        let t = fs::read_to_string(deploy.join(f)).unwrap().replace("/usr/bin/rsskit", &s(&bin));
        fs::write(dir.join(f), t).unwrap();
    }
    fs::copy(dir.join("rsskit-apply@.service"), dir.join("rsskit-apply@eth0.service")).unwrap();
    for u in ["rsskit-apply@eth0.service", "rsskit-agent.service"] {
        let o = Command::new(analyze).args(["verify", "--man=no"]).arg(dir.join(u)).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr).to_string();
        // Lines about other units of this machine are not ours to judge.
        let ours: Vec<&str> = err.lines().filter(|l| l.contains("rsskit")).collect();
        assert!(o.status.success() && ours.is_empty(), "{u}: {}", out(&o));
    }
    let _ = fs::remove_dir_all(&dir);
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

#[test]
fn a_real_prometheus_scrapes_the_agent_and_answers_a_query() {
    // Debian's prometheus binary (extracted by scripts/install-deps.sh, not
    // installed as a service), bound to 127.0.0.1, killed on drop.
    let prom = common::agent::promtool().with_file_name("prometheus");
    assert!(prom.is_file(), "{} missing: run scripts/install-deps.sh", prom.display());
    let h = Host::new("prom");
    h.plan(&[]);
    let o = h.run(&["apply", "plan.json", "--save", "saved.json", "--persist"]);
    assert!(o.status.success(), "{}", out(&o));
    let rps = h.sys("sys/class/net/eth0/queues/rx-0/rps_cpus");
    put(&rps, "3f\n");
    let a = Agent::spawn(h.cmd(&["agent", "--interval", "1", "--metrics", "127.0.0.1:0"]));
    let target = metrics_addr(&a);
    a.wait_for(0, &["eth0: corrected rx-0 rps_cpus"], Duration::from_secs(20));
    let dir = h.tree.0.join("prometheus");
    fs::create_dir_all(&dir).unwrap();
    fs::write(
        dir.join("prometheus.yml"),
        format!("global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: rsskit\n    static_configs:\n      - targets: ['{target}']\n"),
    )
    .unwrap();
    let web = format!("127.0.0.1:{}", free_port());
    let mut c = Command::new(&prom);
    c.arg(format!("--config.file={}", s(&dir.join("prometheus.yml"))))
        .arg(format!("--storage.tsdb.path={}", s(&dir.join("data"))))
        .arg(format!("--web.listen-address={web}"));
    let server = common::netns::Proc::spawn(c);
    let query =
        "/api/v1/query?query=rsskit_corrections_total%7Bsetting%3D%22rps_cpus%22%2Ccause%3D%22start%22%7D";
    let mut last = String::new();
    let found = common::netns::wait_until(Duration::from_secs(60), || {
        if std::net::TcpStream::connect(&web).is_err() {
            return false;
        }
        last = get(&web, query).1;
        let v: serde_json::Value = serde_json::from_str(&last).unwrap_or_default();
        v["data"]["result"][0]["value"][1] == "1"
    });
    drop(server);
    assert!(found, "Prometheus did not return rsskit_corrections_total = 1 within 60 s; last answer: {last}\nagent log:\n{}", a.text());
    let v: serde_json::Value = serde_json::from_str(&last).unwrap();
    assert_eq!(v["data"]["result"][0]["metric"]["device"], "eth0");
    assert!(a.stop().success());
}

#[test]
fn apply_persist_with_irqbalance_running_bans_instead_of_advising_a_ban() {
    let h = Host::new("persist-irqb-running");
    fs::create_dir_all(h.sys("proc/4242")).unwrap();
    fs::write(h.sys("proc/4242/comm"), "irqbalance\n").unwrap();
    fs::write(h.sys("proc/4242/cmdline"), "/usr/sbin/irqbalance\0--foreground\0").unwrap();
    h.plan(&[]);
    let o = h.run(&["apply", "plan.json", "--save", "saved.json", "--persist"]);
    assert!(o.status.success(), "{}", out(&o));
    let (text, err) = (String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    // The old text told the operator to add the bans by hand, right before rsskit added them itself.
    assert!(!err.contains("Exclude the IRQs"), "{}", out(&o));
    assert!(text.contains("irqbalance is running (pid 4242): --persist bans the IRQs pinned here"), "{text}");
    assert!(text.contains("irqbalance: added --banirq for IRQs 40,41,42,43"), "{text}");
}

/// `cmd` as user nobody (uid/gid 65534, no groups), through setpriv.
fn as_nobody(cmd: &[&str]) -> Command {
    let mut c = Command::new("setpriv");
    c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"]).args(cmd);
    c
}

/// A FIFO, a world-writable plan, a writable directory and a plan owned by
/// another user, each among rsskit's plans: refused by name, never read,
/// never blocking; `persist apply` and `agent --once` fail rather than say
/// "no plan" or "all aligned".
#[test]
fn odd_plan_files_are_refused_by_name_and_block_nothing() {
    use std::os::unix::fs::PermissionsExt as _;
    let h = Host::new("oddplans");
    h.plan(&[]);
    let o = h.run(&["apply", "plan.json", "--save", "saved.json", "--persist"]);
    assert!(o.status.success(), "{}", out(&o));
    let dir = h.root.join("etc/rsskit/devices");
    let plan = h.root.join(PLAN_FILE);
    // A FIFO with no writer: open() without O_NONBLOCK would block forever.
    let fifo = dir.join("mac-0a0b0c0d0e0f.json");
    assert!(Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let o = h.run(&["persist", "list"]);
    assert!(o.status.success(), "{}", out(&o));
    let text = out(&o);
    assert!(text.contains(&format!("INVALID {}: a FIFO, not a regular file", fifo.display())), "{text}");
    assert!(text.contains("1 persisted plan(s)"), "{text}");
    let o = h.run(&["persist", "apply", "eth0"]);
    assert!(o.status.success(), "its own plan is readable: {}", out(&o));
    let o = h.run(&["agent", "--once"]);
    assert_eq!(o.status.code(), Some(1), "{}", out(&o));
    assert!(out(&o).contains("plan not read"), "{}", out(&o));
    fs::remove_file(&fifo).unwrap();
    let o = h.run(&["agent", "--once"]);
    assert!(o.status.success(), "{}", out(&o));
    assert!(out(&o).contains("1 persisted device(s) present and checked, all aligned"), "{}", out(&o));

    // Anyone could have written these: refused, and with no other plan for
    // eth0, `persist apply` fails instead of saying there is none.
    let drifted = h.sys("sys/class/net/eth0/queues/rx-1/rps_cpus");
    /// What is spoiled, how, how it is mended, and the refusal expected.
    type Case<'a> = (&'a str, Box<dyn Fn() + 'a>, Box<dyn Fn() + 'a>, String);
    let cases: Vec<Case> = vec![
        (
            "a world-writable plan",
            Box::new(|| fs::set_permissions(&plan, fs::Permissions::from_mode(0o666)).unwrap()),
            Box::new(|| fs::set_permissions(&plan, fs::Permissions::from_mode(0o600)).unwrap()),
            format!("{}: mode 0666: writable by group or others", plan.display()),
        ),
        (
            "a world-writable directory",
            Box::new(|| fs::set_permissions(&dir, fs::Permissions::from_mode(0o777)).unwrap()),
            Box::new(|| fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).unwrap()),
            format!("{}: mode 0777: writable by group or others", dir.display()),
        ),
        (
            "a plan owned by nobody",
            Box::new(|| std::os::unix::fs::chown(&plan, Some(65534), Some(65534)).unwrap()),
            Box::new(|| std::os::unix::fs::chown(&plan, Some(0), Some(0)).unwrap()),
            format!("{}: owned by uid 65534: rsskit reads only root's files here", plan.display()),
        ),
    ];
    for (what, spoil, mend, why) in cases {
        put(&drifted, "3f\n");
        spoil();
        let o = h.run(&["persist", "apply", "eth0"]);
        assert_eq!(o.status.code(), Some(1), "{what}: {}", out(&o));
        assert!(out(&o).contains(&why), "{what}: {}", out(&o));
        assert!(out(&o).contains("no readable persisted plan"), "{what}: {}", out(&o));
        let o = h.run(&["agent", "--once"]);
        assert_eq!(o.status.code(), Some(1), "{what}: {}", out(&o));
        assert!(out(&o).contains(&why) && !out(&o).contains("all aligned"), "{what}: {}", out(&o));
        assert_eq!(read(&drifted), "3f", "{what}: nothing of it applied");
        mend();
    }
    let o = h.run(&["persist", "apply", "eth0"]);
    assert!(o.status.success(), "{}", out(&o));
    assert_ne!(read(&drifted), "3f", "a trusted plan is applied again");
}

/// The host lock is root's alone: user nobody cannot open it (so cannot
/// `flock` it and stall root's writers), while the same user can lock a
/// file of the old mode in the same place. A busy lock makes `agent
/// --once` fail naming what it did not check, never "all aligned".
#[test]
fn the_lock_is_root_only_and_a_busy_lock_is_no_success() {
    use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
    if rsskit_linux::process::effective_uid() != 0 {
        panic!("this test needs root (it runs commands as user nobody)");
    }
    let h = Host::new("lockmode");
    h.plan(&[]);
    let o = h.run(&["apply", "plan.json", "--save", "saved.json", "--persist"]);
    assert!(o.status.success(), "{}", out(&o));
    let lock = h.root.join("run/rsskit.lock");
    let m = fs::metadata(&lock).unwrap();
    assert_eq!((m.mode() & 0o777, m.uid()), (0o600, 0), "a root-only lock file");
    // nobody reaches the directory (the control below proves it) but not the lock.
    for d in [&h.tree.0, &h.root, &h.root.join("run")] {
        fs::set_permissions(d, fs::Permissions::from_mode(0o755)).unwrap();
    }
    let old = h.root.join("run/old-mode.lock");
    fs::write(&old, "").unwrap();
    fs::set_permissions(&old, fs::Permissions::from_mode(0o644)).unwrap();
    let o = as_nobody(&["flock", "-n", &s(&old), "true"]).output().unwrap();
    assert!(o.status.success(), "control: nobody can lock a 0644 file here: {}", out(&o));
    let o = as_nobody(&["flock", "-n", &s(&lock), "true"]).output().unwrap();
    assert!(!o.status.success(), "nobody took rsskit's lock: {}", out(&o));
    assert!(out(&o).contains("Permission denied"), "{}", out(&o));

    let held = rsskit_host::lock::acquire(&h.root, Duration::ZERO, "the test holding the lock").unwrap();
    let o = h.run(&["agent", "--once", "--lock-wait", "0.2"]);
    assert_eq!(o.status.code(), Some(1), "{}", out(&o));
    let text = out(&o);
    assert!(text.contains("eth0: not checked: another rsskit writer holds"), "{text}");
    assert!(!text.contains("all aligned"), "{text}");
    drop(held);
    let o = h.run(&["agent", "--once", "--lock-wait", "0.2"]);
    assert!(o.status.success(), "{}", out(&o));
}

/// A non-root writer is told once why it failed, with the hint.
#[test]
fn a_non_root_apply_gets_the_cause_once_and_the_hint() {
    use std::os::unix::fs::PermissionsExt as _;
    if rsskit_linux::process::effective_uid() != 0 {
        panic!("this test needs root (it runs commands as user nobody)");
    }
    let h = Host::new("nonroot");
    h.plan(&[]);
    for d in [&h.tree.0, &h.root] {
        fs::set_permissions(d, fs::Permissions::from_mode(0o755)).unwrap();
    }
    fs::create_dir_all(h.root.join("run")).unwrap();
    let bin = common::netns::rsskit();
    let plan = s(&h.tree.0.join("plan.json"));
    let (sys, root) = (s(&h.tree.0), s(&h.root));
    let o = as_nobody(&[&s(&bin), "apply", &plan, "--sysroot", &sys, "--root", &root]).output().unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", out(&o));
    let e = String::from_utf8_lossy(&o.stderr).to_string();
    assert_eq!(e.matches("Permission denied").count(), 1, "the cause once: {e}");
    assert!(e.contains("rsskit: hint: this needs root"), "{e}");
}

/// `apply -` waits for its plan on stdin without holding the host lock.
#[test]
fn apply_from_stdin_reads_the_plan_before_taking_the_lock() {
    use std::io::Write as _;
    let h = Host::new("stdin");
    h.plan(&[]);
    let mut c = h.cmd(&["apply", "-", "--save", "saved.json", "--lock-wait", "0"]);
    c.stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = c.spawn().unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let l = rsskit_host::lock::acquire(&h.root, Duration::from_secs(2), "the test");
    assert!(l.is_ok(), "apply - holds the lock while waiting for stdin: {:?}", l.err());
    drop(l);
    let text = fs::read(h.tree.0.join("plan.json")).unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(&text).unwrap();
    drop(stdin);
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", out(&o));
}

/// `/metrics` answers within a second beside a client sending a byte a
/// second and 2,000 idle connections, and SIGTERM stops the agent within
/// 5 s while they are connected.
#[test]
fn metrics_answer_beside_slow_and_idle_clients_and_sigterm_is_quick() {
    use std::io::Write as _;
    rsskit_linux::process::raise_nofile(8192).expect("raising RLIMIT_NOFILE for 2,000 connections");
    let h = Host::new("slowclients");
    h.plan(&[]);
    let o = h.run(&["apply", "plan.json", "--save", "saved.json", "--persist"]);
    assert!(o.status.success(), "{}", out(&o));
    let a = Agent::spawn(h.cmd(&["agent", "--interval", "600", "--metrics", "127.0.0.1:0"]));
    let addr = metrics_addr(&a);
    a.wait_for(0, &["ready: re-checking every"], Duration::from_secs(20));
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (st, at) = (stop.clone(), addr.clone());
    let slow = std::thread::spawn(move || {
        // A byte a second for as long as the test runs (each new connection
        // once the agent cuts the last one).
        let mut conns = 0;
        while !st.load(std::sync::atomic::Ordering::Relaxed) {
            let mut c = std::net::TcpStream::connect(&at).unwrap();
            conns += 1;
            for b in b"GET /metrics HTTP/1.1\r\nHost: slow\r\n".iter().cycle() {
                if st.load(std::sync::atomic::Ordering::Relaxed) || c.write_all(&[*b]).is_err() {
                    break;
                }
                std::thread::sleep(Duration::from_secs(1));
            }
        }
        conns
    });
    let idle: Vec<std::net::TcpStream> =
        (0..2000).map(|_| std::net::TcpStream::connect(&addr).expect("an idle connection")).collect();
    // Long enough for the slow client to be cut off once and come back.
    std::thread::sleep(Duration::from_secs(5));
    for _ in 0..3 {
        let t = std::time::Instant::now();
        let (status, body) = get(&addr, "/metrics");
        assert_eq!(status, "HTTP/1.1 200 OK");
        assert_eq!(sample(&body, "rsskit_plans "), Some(1.0), "{body}");
        assert!(t.elapsed() < Duration::from_secs(1), "a scrape took {:?}", t.elapsed());
    }
    let t = std::time::Instant::now();
    let st = a.stop();
    assert!(st.success(), "{st:?}");
    assert!(t.elapsed() < Duration::from_secs(5), "SIGTERM took {:?} with clients connected", t.elapsed());
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    assert!(slow.join().unwrap() >= 2, "the slow client was cut off at least once");
    drop(idle);
}

/// A re-check interval below a second is refused before anything runs (at
/// 0.000001 s the agent burnt 20% of a CPU re-taking the lock).
#[test]
fn agent_interval_has_a_floor_of_one_second() {
    let h = Host::new("interval");
    for bad in ["0.000001", "0.5", "0"] {
        let o = h.run(&["agent", "--once", "--interval", bad]);
        assert_eq!(o.status.code(), Some(2), "{bad}: {}", out(&o));
        assert!(out(&o).contains("is not a number of seconds from 1 to 86400"), "{bad}: {}", out(&o));
    }
    let o = h.run(&["agent", "--once", "--interval", "1"]);
    assert!(o.status.success(), "{}", out(&o));
}
