//! Issue 20's proofs in a real system with systemd: the lab's Debian guest
//! (`scripts/lab boot --system`: an mmdebstrap bookworm image with systemd,
//! udev, irqbalance and ethtool, this build's rsskit as /usr/bin/rsskit,
//! systemd as init, the same 4-queue RSS virtio-net NIC as tests/lab.rs).
//! One test, in order: `apply --persist` then reboot: the planned key,
//! table and IRQs are back (`check`, and `check --live` with traffic from
//! the host: the device follows the table); a virtio_net unbind + bind: the
//! plan is back (udev rule -> rsskit-apply@.service; where the time goes is
//! printed); 30 s of irqbalance leave rsskit's IRQs alone; `rsskit agent`
//! as the systemd service of deploy/systemd (Type=notify): IRQ affinity,
//! RPS, XPS, the table and udp4's hashed fields changed behind its back are
//! put back with the cause in the journal, and after an unbind + bind the
//! agent (rtnetlink: new link) restores the plan before the udev unit, and
//! `check --live` agrees; `persist remove` then reboot: the device keeps its
//! driver defaults.
//!
//! Needs root, QEMU, /dev/net/tun and mmdebstrap (`scripts/install-deps.sh`);
//! ignored with the reason only where QEMU cannot start (`rsskit_no_qemu`,
//! build/host_probe.rs). QEMU and the lab's namespace are stopped on drop
//! and by the lab's watcher if this process dies. Everything rsskit changes
//! is the guest's own NIC, IRQs, irqbalance and systemd.

mod common;

use common::lab::{self, sq, Lab};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::time::Instant;

const RSSKIT: &str = env!("CARGO_BIN_EXE_rsskit");
const QUEUES: usize = 4;
/// The agent's --interval in the lab (the unit's 30 s, shortened by a drop-in).
const AGENT_INTERVAL_S: u32 = 5;

fn lines(j: &[(f64, String)]) -> String {
    j.iter().map(|(_, l)| l.as_str()).collect::<Vec<_>>().join("\n")
}

/// The system guest, settled.
fn boot() -> Lab {
    let lab = Lab::boot(&["--system", "--rsskit", RSSKIT, "--timeout", "400"], 1200);
    lab.settle();
    lab
}

/// What this file asks of the system guest (systemd is its init).
impl Lab {
    /// Until systemd has finished starting up (rsskit-apply@ included).
    fn settle(&self) {
        let o = self.run("systemctl is-system-running --wait; systemctl --failed --no-legend", 180);
        eprintln!("guest: {}", o.stdout.trim());
    }

    fn reboot(&self) {
        let t = Instant::now();
        let st = Command::new(lab::script())
            .args(["reboot", "--timeout", "400"])
            .stdin(Stdio::null())
            .status()
            .expect("running scripts/lab reboot");
        assert!(st.success(), "scripts/lab reboot failed ({st}): console above");
        self.settle();
        eprintln!("lab: rebooted and settled in {:.0} s", t.elapsed().as_secs_f64());
    }
}

/// The guest's eth0 as rsskit sets it, read with ethtool and /proc: the key,
/// the table, and each queue IRQ's CPUs by the IRQ's name (`input.0`,
/// `output.0`, ...), since a driver rebind may renumber the IRQs.
const STATE: &str = r#"ethtool -x eth0 | awk '/RSS hash key/ {getline; gsub(":", ""); print "key " $1}
/^ *[0-9]+:/ {sub(/^ *[0-9]+: */, ""); t = t " " $0} END {print "table" t}'
for q in 0 1 2 3; do for k in input output; do
  i=$(awk -v n="-$k.$q\$" '$NF ~ n {sub(":", "", $1); print $1}' /proc/interrupts)
  echo "$k.$q $(cat /proc/irq/$i/smp_affinity_list)"
done; done"#;

#[derive(Debug, PartialEq, Clone)]
struct State {
    key: String,
    table: Vec<usize>,
    /// "input.0" -> "2" (smp_affinity_list).
    irqs: BTreeMap<String, String>,
}

fn state(lab: &Lab) -> State {
    parse_state(&lab.ok(STATE))
}

fn parse_state(text: &str) -> State {
    let mut s = State { key: String::new(), table: Vec::new(), irqs: BTreeMap::new() };
    for line in text.lines() {
        let (what, rest) = line.split_once(' ').unwrap_or((line, ""));
        match what {
            "key" => s.key = rest.trim().to_string(),
            "table" => s.table = rest.split_whitespace().map(|x| x.parse().expect("table entry")).collect(),
            _ => {
                s.irqs.insert(what.to_string(), rest.trim().to_string());
            }
        }
    }
    assert_eq!(s.irqs.len(), 2 * QUEUES, "every queue IRQ found in /proc/interrupts: {text}");
    s
}

/// What the plan sets: its key, table and each queue IRQ's CPU.
fn planned(plan: &Value) -> State {
    let d = &plan["devices"][0];
    let mut irqs = BTreeMap::new();
    for (kind, list) in [("input", "rx"), ("output", "tx")] {
        for q in d[list].as_array().unwrap() {
            irqs.insert(format!("{kind}.{}", q["queue"]), q["cpu"].to_string());
        }
    }
    State {
        key: d["key"].as_str().unwrap().to_string(),
        table: d["table"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as usize).collect(),
        irqs,
    }
}

/// `rsskit check --live` in the guest while the host sends 32 flows
/// (IPv4/IPv6, TCP/UDP, 2 frames each): its exit status and JSON, checked
/// as `Lab::check_live` says.
fn check_live(lab: &Lab) -> (i32, Value) {
    lab.check_live("rsskit", 6, || {
        let flows: String = (0..32u16)
            .map(|i| {
                let proto = if i % 4 < 2 { "udp" } else { "tcp" };
                let (src, dst) = if i % 2 == 1 {
                    (format!("fd77:99::{:x}", i + 1), "fd77:77::2".to_string())
                } else {
                    (format!("10.9.{i}.{}", i + 1), "10.77.0.2".to_string())
                };
                let f = json!({"src": src, "dst": dst, "sport": 1000 + i * 7, "dport": 2000 + i * 13, "proto": proto, "count": 2});
                format!("{f}\n")
            })
            .collect();
        let (sent, _) = lab.send_json(&flows, 0.0);
        assert_eq!(sent, 64, "64 frames sent");
        (sent, 32)
    })
}

/// The guest's monotonic clock (seconds since boot), as the journal's
/// `short-monotonic` stamps count.
fn uptime(lab: &Lab) -> f64 {
    lab.ok("cut -d' ' -f1 /proc/uptime").trim().parse().expect("/proc/uptime")
}

/// Journal lines after `since` (guest monotonic seconds) matching `grep`:
/// (stamp, line).
fn journal_since(lab: &Lab, since: f64, grep: &str) -> Vec<(f64, String)> {
    let text = lab.ok(&format!("journalctl -b -o short-monotonic --no-pager | grep -E -- '{grep}' || true"));
    text.lines()
        .filter_map(|l| {
            let t: f64 = l.strip_prefix('[')?.split(']').next()?.trim().parse().ok()?;
            (t >= since).then(|| (t, l.to_string()))
        })
        .collect()
}

/// Unbinds and binds eth0's virtio device, waits until `expect` (STATE's
/// output) is back, and returns the bind's guest monotonic time and what
/// `udevadm monitor` saw (KERNEL/UDEV stamps of the net device's `add`).
fn rebind(lab: &Lab, expect: &str) -> (f64, String) {
    let script = format!(
        r#"cat > /root/expect <<'EOF'
{expect}EOF
st() {{ {STATE}
}}
rm -f /tmp/udevmon; (timeout 120 udevadm monitor --kernel --udev --subsystem-match=net > /tmp/udevmon 2>&1 &)
sleep 1
dev=$(basename "$(readlink -f /sys/class/net/eth0/device)")
t0=$(cut -d' ' -f1 /proc/uptime)
echo "$dev" > /sys/bus/virtio/drivers/virtio_net/unbind
echo "$dev" > /sys/bus/virtio/drivers/virtio_net/bind
s=$(date +%s)
while :; do
  if [ -e /sys/class/net/eth0 ] && st 2>/dev/null | cmp -s - /root/expect; then break; fi
  [ $(( $(date +%s) - s )) -gt 60 ] && {{ echo "not back after 60 s"; st; exit 1; }}
  sleep 0.1
done
echo "bind_at $t0"
grep ' add ' /tmp/udevmon"#
    );
    let o = lab.run(&script, 90);
    assert_eq!(o.rc, 0, "the plan came back after the rebind: {}", o.text());
    let t0: f64 = o
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("bind_at "))
        .and_then(|x| x.trim().parse().ok())
        .expect("bind_at T");
    (t0, o.stdout)
}

/// The stamp in `udevadm monitor`'s line for `who` (KERNEL or UDEV) of the add.
fn uevent_at(monitor: &str, who: &str) -> Option<f64> {
    monitor
        .lines()
        .find(|l| l.starts_with(who) && l.contains(" add ") && l.contains("/net/eth0"))
        .and_then(|l| l.split('[').nth(1)?.split(']').next()?.parse().ok())
}

fn step(n: u32, what: &str) {
    eprintln!("\n=== step {n}: {what}");
}

#[test]
#[cfg_attr(
    rsskit_no_qemu,
    ignore = "QEMU cannot start here: no qemu-system-x86_64 or no /dev/net/tun (scripts/install-deps.sh installs QEMU)"
)]
fn lab_system_keeps_the_plan() {
    let lab = boot();
    let started = Instant::now();

    step(1, "apply --persist (random key, uneven table, IRQs), reboot: check says aligned with the plan");
    let base = state(&lab);
    eprintln!("driver defaults: {base:?}");
    let plan_out = lab.run("rsskit plan --iface eth0 --key random --json", 120);
    assert_eq!(plan_out.rc, 0, "plan: {}", plan_out.text());
    let mut plan: Value = serde_json::from_str(&plan_out.stdout).expect("plan --json");
    // An uneven table (1:2:3:6) and the queue CPUs reversed: neither is a
    // driver default, so a table or IRQ that was never set cannot pass.
    let weights = [1usize, 2, 3, 6];
    let table = lab::uneven_table(&weights, 128);
    plan["devices"][0]["table"] = json!(table);
    for list in ["rx", "tx"] {
        for q in plan["devices"][0][list].as_array_mut().unwrap() {
            let cpu = QUEUES as u64 - 1 - q["queue"].as_u64().unwrap();
            q["cpu"] = json!(cpu);
            if list == "tx" {
                q["xps_cpus"] = json!([cpu]);
            }
        }
    }
    for irq in plan["devices"][0]["irqs"].as_array_mut().unwrap() {
        let name = irq["name"].as_str().unwrap().to_string();
        let q: u64 = name.rsplit('.').next().and_then(|q| q.parse().ok()).expect("IRQ name ends in .QUEUE");
        irq["cpus"] = json!([QUEUES as u64 - 1 - q]);
    }
    // udp4 on the 4-tuple: the agent's step changes it behind its back.
    plan["devices"][0]["hash_fields"] =
        json!([{"flow": "udp4", "fields": ["ip_src", "ip_dst", "l4_src_port", "l4_dst_port"]}]);
    let want = planned(&plan);
    assert_ne!(want.key, base.key);
    assert_ne!(want.table, base.table);
    lab.ok(&format!("echo {} > /root/plan.json", sq(&plan.to_string())));
    let o = lab.run("rsskit apply /root/plan.json --persist", 120);
    assert_eq!(o.rc, 0, "apply --persist: {}", o.text());
    eprintln!("apply --persist:\n{}", o.stdout);
    assert!(o.stdout.contains("Persisted the plan of eth0"), "{}", o.text());
    // irqbalance runs in the guest: restarted with the bans before the IRQs
    // are written (after, it once moved 4 of 8 in between).
    let ban = o.stdout.find("irqbalance: added").expect("apply --persist bans the IRQs");
    assert!(ban < o.stdout.find("Writing:").expect("Writing:"), "bans before writes: {}", o.text());
    assert_eq!(state(&lab), want, "apply itself set the plan");
    let listed = lab.ok("rsskit persist list");
    assert!(listed.contains("eth0"), "persist list names eth0: {listed}");
    lab.reboot();
    let after_boot = state(&lab);
    assert_ne!(after_boot.key, "", "ethtool -x shows a key");
    assert_eq!(after_boot, want, "after the reboot the planned key, table and IRQs are back");
    let unit = lab.ok("systemctl show -p Result -p ExecMainStatus rsskit-apply@eth0.service");
    assert!(
        unit.contains("Result=success") && unit.contains("ExecMainStatus=0"),
        "rsskit-apply@eth0: {unit}"
    );
    let c = lab.run("rsskit check --iface eth0", 120);
    eprintln!("check after reboot:\n{}", c.stdout);
    assert_eq!(c.rc, 0, "check says aligned after the reboot: {}", c.text());
    // The device itself follows the table (not only what the driver reports).
    let (rc, live) = check_live(&lab);
    assert_eq!(rc, 0, "check --live after the reboot: eth0 follows its reported table: {live:#}");

    step(
        2,
        "virtio_net unbind + bind: the udev rule and rsskit-apply@ put the plan back (where the time goes)",
    );
    let expect = lab.ok(STATE);
    let (t0, monitor) = rebind(&lab, &expect);
    let unit = journal_since(&lab, t0, "rsskit-apply@eth0|rsskit\\[");
    eprintln!("udev path after the bind at {t0:.2}:\n{monitor}\n{}", lines(&unit));
    let at = |pat: &str| unit.iter().find(|(_, l)| l.contains(pat)).map(|(t, _)| *t);
    let starting = at("Starting rsskit-apply@eth0").expect("rsskit-apply@eth0 started after the bind");
    let first = at("settings to put back").expect("rsskit persist apply eth0 ran");
    let last_write = unit.iter().filter(|(_, l)| l.contains(" ok ")).map(|(t, _)| *t).fold(first, f64::max);
    let finished = at("Finished rsskit-apply@eth0").expect("rsskit-apply@eth0 finished");
    let (kernel, udev) = (uevent_at(&monitor, "KERNEL"), uevent_at(&monitor, "UDEV"));
    let udev_path_s = last_write - t0;
    eprintln!(
        "udev path (guest clock, TCG): uevent +{:.2} s, udev done +{:.2} s, unit starting +{:.2} s, \
         rsskit's first line +{:.2} s, last write +{udev_path_s:.2} s, unit finished +{:.2} s",
        kernel.map_or(f64::NAN, |k| k - t0),
        udev.map_or(f64::NAN, |u| u - t0),
        starting - t0,
        first - t0,
        finished - t0
    );

    step(3, "irqbalance running for 30 s leaves rsskit's IRQs where rsskit put them");
    let pid0 = lab.ok("systemctl show -p MainPID --value irqbalance.service").trim().to_string();
    assert_ne!(pid0, "0", "irqbalance runs in the guest");
    let opts = lab.ok("cat /etc/default/irqbalance");
    let now_irqs =
        lab.ok("awk '$NF ~ /-(input|output)\\.[0-9]+$/ {sub(\":\", \"\", $1); print $1}' /proc/interrupts");
    for irq in now_irqs.split_whitespace() {
        assert!(
            opts.contains(&format!("--banirq={irq}")),
            "IRQ {irq} banned in /etc/default/irqbalance: {opts}"
        );
    }
    lab.ok("sleep 30");
    let pid1 = lab.ok("systemctl show -p MainPID --value irqbalance.service").trim().to_string();
    assert_eq!(pid0, pid1, "irqbalance kept running for the 30 s");
    assert_eq!(state(&lab), want, "rsskit's IRQs are where rsskit put them after 30 s of irqbalance");

    step(4, "rsskit agent as the systemd service (deploy/systemd, Type=notify) puts drift back and restores the plan after a rebind");
    let unit_file = include_str!("../../../deploy/systemd/rsskit-agent.service");
    lab.ok(&format!(
        "cat > /etc/systemd/system/rsskit-agent.service <<'EOF'\n{unit_file}EOF\n\
         mkdir -p /etc/systemd/system/rsskit-agent.service.d\n\
         printf '[Service]\\nExecStart=\\nExecStart=/usr/bin/rsskit agent --interval {AGENT_INTERVAL_S}\\n' \
         > /etc/systemd/system/rsskit-agent.service.d/lab.conf\n\
         systemctl daemon-reload && systemctl start rsskit-agent"
    ));
    // `systemctl start` of a Type=notify unit returns once READY=1 came.
    let st = lab.ok("systemctl show -p ActiveState -p SubState -p Type -p StatusText rsskit-agent");
    assert!(st.contains("ActiveState=active") && st.contains("Type=notify"), "{st}");
    assert!(st.contains("StatusText=keeping 1 plan(s)"), "READY=1 with its status: {st}");
    const SYSFS: &str =
        "cat /sys/class/net/eth0/queues/rx-1/rps_cpus /sys/class/net/eth0/queues/tx-1/xps_cpus";
    let sysfs0 = lab.ok(SYSFS);
    let t0 = uptime(&lab);
    // The guest's clock when the last of them changed.
    let drifted: f64 = lab
        .ok("i=$(awk '$NF ~ /-input.1$/ {sub(\":\", \"\", $1); print $1}' /proc/interrupts); \
         echo 0-3 > /proc/irq/$i/smp_affinity_list; echo f > /sys/class/net/eth0/queues/rx-1/rps_cpus; \
         echo f > /sys/class/net/eth0/queues/tx-1/xps_cpus; ethtool -X eth0 equal 2; cut -d' ' -f1 /proc/uptime")
        .trim()
        .parse()
        .expect("/proc/uptime");
    let wait_journal = |since: f64, pats: &[&str]| -> Vec<(f64, String)> {
        for _ in 0..60 {
            let j = journal_since(&lab, since, "rsskit agent: ");
            if pats.iter().all(|p| j.iter().any(|(_, l)| l.contains(p))) {
                return j;
            }
            lab.ok("sleep 1");
        }
        panic!("the agent did not log {pats:?}: {}", lines(&journal_since(&lab, since, "rsskit")));
    };
    let j = wait_journal(
        t0,
        &[
            "corrected RSS indirection table",
            "-input.1) affinity: 0-3 ->",
            "corrected rx-1 rps_cpus: f ->",
            "corrected tx-1 xps_cpus: f ->",
        ],
    );
    eprintln!("agent journal:\n{}", lines(&j));
    for (_, l) in j.iter().filter(|(_, l)| l.contains("corrected")) {
        assert!(l.ends_with("(cause: found by the periodic re-check)"), "the cause is logged: {l}");
    }
    let fixed_s = j.iter().map(|(t, _)| *t).fold(drifted, f64::max) - drifted;
    eprintln!("the agent put 4 drifted settings back {fixed_s:.1} s after they changed (interval {AGENT_INTERVAL_S} s)");
    assert_eq!(state(&lab), want, "key, table and IRQs as planned again");
    assert_eq!(lab.ok(SYSFS), sysfs0, "RPS and XPS as planned again");

    // udp4's hashed fields: put back, then the key written again after them.
    let t1 = uptime(&lab);
    lab.ok("ethtool -N eth0 rx-flow-hash udp4 sd");
    let j = wait_journal(
        t1,
        &[
            "corrected udp4 hashed fields: ip_src,ip_dst -> ip_src,ip_dst,l4_src_port,l4_dst_port",
            "RSS key written again (the device takes hashed fields with it) after the hashed fields",
        ],
    );
    eprintln!("agent journal:\n{}", lines(&j));
    let fields = lab.ok("ethtool -n eth0 rx-flow-hash udp4");
    assert!(
        fields.contains("L4 bytes 0 & 1") && fields.contains("L4 bytes 2 & 3"),
        "udp4 on the 4-tuple: {fields}"
    );

    // A rebind with the agent running: it reacts to the new link.
    let (t2, _) = rebind(&lab, &expect);
    let j = wait_journal(t2, &["(cause: the device appeared (new link))"]);
    eprintln!("agent journal after the rebind:\n{}", lines(&j));
    let agent_s = j.iter().filter(|(_, l)| l.contains("new link")).map(|(t, _)| *t).fold(t2, f64::max) - t2;
    let unit = journal_since(&lab, t2, "rsskit-apply@eth0|settings to put back");
    eprintln!("rsskit-apply@eth0 after the rebind:\n{}", lines(&unit));
    eprintln!(
        "plan back after a rebind (guest clock, TCG): the agent {agent_s:.2} s, the udev unit alone {udev_path_s:.2} s"
    );
    // The device follows the table the agent wrote (the probe's own
    // writes did not undo it): the lab's addresses again, then traffic.
    lab.ok("/usr/local/sbin/lab-net");
    let (rc, live) = check_live(&lab);
    assert_eq!(rc, 0, "check --live after the agent's restore: {live:#}");
    lab.ok("systemctl stop rsskit-agent && rm -rf /etc/systemd/system/rsskit-agent.service \
         /etc/systemd/system/rsskit-agent.service.d && systemctl daemon-reload");
    let stopped = journal_since(&lab, t2, "rsskit agent: stopping");
    assert_eq!(stopped.len(), 1, "SIGTERM stopped it cleanly: {}", lines(&stopped));

    step(5, "persist remove, reboot: the device keeps its driver defaults");
    let o = lab.run("rsskit persist remove", 120);
    assert_eq!(o.rc, 0, "persist remove: {}", o.text());
    eprintln!("persist remove:\n{}", o.stdout);
    lab.reboot();
    let after = state(&lab);
    assert_ne!(after.key, want.key, "the planned key is not written again");
    assert_eq!(after.table, base.table, "the driver's default table");
    let left = lab.ok(
        "ls /etc/rsskit/devices 2>/dev/null; ls /etc/udev/rules.d/90-rsskit.rules /etc/systemd/system/rsskit-apply@.service 2>/dev/null; \
         grep -c -- --banirq /etc/default/irqbalance; systemctl show -p ExecMainStartTimestampMonotonic --value rsskit-apply@eth0.service",
    );
    let lines: Vec<&str> = left.lines().collect();
    assert_eq!(
        lines,
        ["0", "0"],
        "no plan, rule, unit or irqbalance ban left, and rsskit-apply@eth0 never ran: {left}"
    );
    eprintln!("lab_system: {:.0} s after the first boot", started.elapsed().as_secs_f64());
}
