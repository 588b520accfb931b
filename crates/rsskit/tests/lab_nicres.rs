//! NIC resources on real drivers, in the kernel 7.3 lab (`scripts/lab boot
//! --kernel 7.3`: eth0 a 4-queue virtio-net, eth1 an igb, QEMU's 82576):
//!
//! 1. igb: `apply --rx-ring --tx-ring --coalesce fixed:USECS` writes what
//!    `ethtool -g` and `ethtool -c` then show in the guest, and
//!    `apply --restore` puts back exactly what they showed before.
//! 2. virtio-net: `--channels 2` sets two combined channels (`ethtool -l`),
//!    the plan's table over them and every queue IRQ pinned; the restore
//!    gives four channels and the table back.
//!
//! Needs root, QEMU and /dev/net/tun, and the 7.3 packages in the lab's
//! cache. Ignored with the reason only where QEMU cannot start
//! (`rsskit_no_qemu`). `RSSKIT_LAB_REUSE=1` uses a 7.3 lab already booted.

mod common;

use common::lab::Lab;
use serde_json::Value;
use std::time::Instant;

const RSSKIT: &str = env!("CARGO_BIN_EXE_rsskit");

/// `NAME: VALUE` lines of `ethtool -g/-c/-l`, in order (a name repeats:
/// maxima first, then current settings, under `ethtool -g` and `-l`).
fn fields(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(':')?;
            Some((k.trim().to_string(), v.trim().to_string()))
        })
        .collect()
}

/// The value of the `nth` (0: maximum, 1: current) `name` line.
fn nth(text: &str, name: &str, n: usize) -> String {
    fields(text)
        .into_iter()
        .filter(|(k, _)| k == name)
        .nth(n)
        .map(|(_, v)| v)
        .unwrap_or_else(|| panic!("no {name} #{n} in:\n{text}"))
}

fn igb_rings_and_coalescing(lab: &Lab) {
    let g0 = lab.ok("ethtool -g eth1");
    let c0 = lab.ok("ethtool -c eth1");
    let (rx_max, rx0, tx0) = (nth(&g0, "RX", 0), nth(&g0, "RX", 1), nth(&g0, "TX", 1));
    eprintln!("igb before: rings rx {rx0} tx {tx0} (rx max {rx_max}), rx-usecs {}", nth(&c0, "rx-usecs", 0));
    let (rx, tx) = if rx0 == "1024" { ("2048", "1024") } else { ("1024", "512") };
    let o = lab.run(
        &format!(
            "{RSSKIT} apply --iface eth1 --rx-ring {rx} --tx-ring {tx} --coalesce fixed:50 --save /tmp/nicres-igb.json"
        ),
        300,
    );
    eprintln!("{}", o.text());
    assert_eq!(o.rc, 0, "apply on igb: {}", o.text());
    let g1 = lab.ok("ethtool -g eth1");
    let c1 = lab.ok("ethtool -c eth1");
    assert_eq!((nth(&g1, "RX", 1), nth(&g1, "TX", 1)), (rx.to_string(), tx.to_string()), "{g1}");
    assert_eq!(nth(&c1, "rx-usecs", 0), "50", "{c1}");
    eprintln!("igb after apply: ethtool -g shows rx {rx} tx {tx}, ethtool -c rx-usecs 50");
    let o = lab.run(&format!("{RSSKIT} apply --restore /tmp/nicres-igb.json"), 300);
    assert_eq!(o.rc, 0, "restore on igb: {}", o.text());
    let g2 = lab.ok("ethtool -g eth1");
    let c2 = lab.ok("ethtool -c eth1");
    assert_eq!((nth(&g2, "RX", 1), nth(&g2, "TX", 1)), (rx0, tx0), "restored rings: {g2}");
    assert_eq!(fields(&c2), fields(&c0), "every coalescing value as before:\n{c0}\n{c2}");
    eprintln!("igb restored: ethtool -g and ethtool -c as before");
}

/// Each virtio-net queue IRQ and its CPUs (`smp_affinity_list`).
const VIRTIO_IRQS: &str =
    "for i in $(awk '/-(input|output)\\./ {sub(\":\", \"\", $1); print $1}' /proc/interrupts); \
                           do echo $i $(cat /proc/irq/$i/smp_affinity_list); done";

fn virtio_channels(lab: &Lab) {
    let irqs0 = lab.ok(VIRTIO_IRQS);
    assert!(irqs0.lines().count() >= 8, "virtio-net's queue IRQs: {irqs0}");
    let l0 = lab.ok("ethtool -l eth0");
    let x0 = lab.ok("ethtool -x eth0");
    let combined0 = nth(&l0, "Combined", 1);
    let plan: Value =
        serde_json::from_str(&lab.ok(&format!("{RSSKIT} plan --iface eth0 --cpus 2-3 --channels 2 --json")))
            .unwrap();
    let d = &plan["devices"][0];
    assert_eq!(d["channels"]["chosen"], 2, "{}", d["channels"]);
    eprintln!("virtio-net: {}", d["channels"]["reason"]);
    lab.ok(&format!("{RSSKIT} plan --iface eth0 --cpus 2-3 --channels 2 --json > /tmp/nicres-plan.json"));
    let o = lab.run(&format!("{RSSKIT} apply /tmp/nicres-plan.json --save /tmp/nicres-virtio.json"), 300);
    eprintln!("{}", o.text());
    assert_eq!(o.rc, 0, "apply --channels 2 on virtio-net: {}", o.text());
    let l1 = lab.ok("ethtool -l eth0");
    assert_eq!(nth(&l1, "Combined", 1), "2", "{l1}");
    let c = lab.run(&format!("{RSSKIT} check --iface eth0"), 120);
    eprintln!("{}", c.text());
    assert_eq!(c.rc, 0, "aligned on the 2 queues: {}", c.text());
    let o = lab.run(&format!("{RSSKIT} apply --restore /tmp/nicres-virtio.json"), 300);
    assert_eq!(o.rc, 0, "restore: {}", o.text());
    let l2 = lab.ok("ethtool -l eth0");
    assert_eq!(nth(&l2, "Combined", 1), combined0, "{l2}");
    assert_eq!(lab.ok("ethtool -x eth0"), x0, "the table and key as before");
    assert_eq!(lab.ok(VIRTIO_IRQS), irqs0, "every queue IRQ on its CPUs as before");
    eprintln!("virtio-net: channels {combined0} -> 2 -> {combined0}, table and key restored");
}

#[test]
#[cfg_attr(
    rsskit_no_qemu,
    ignore = "QEMU cannot start here: no qemu-system-x86_64 or no /dev/net/tun (scripts/install-deps.sh installs QEMU)"
)]
fn lab_nicres_igb_rings_coalescing_and_virtio_channels() {
    let t = Instant::now();
    let lab = Lab::boot_or_reuse(&["--kernel", "7.3"], 900);
    // Save files of an earlier run in a reused guest are never overwritten.
    lab.ok("rm -f /tmp/nicres-igb.json /tmp/nicres-virtio.json /tmp/nicres-plan.json");
    assert!(lab.say_kernel().starts_with("7.3."), "the 7.3 lab");
    assert_eq!(lab.ok("basename $(readlink /sys/class/net/eth1/device/driver)").trim(), "igb");
    igb_rings_and_coalescing(&lab);
    eprintln!("igb done at {:.0} s", t.elapsed().as_secs_f64());
    virtio_channels(&lab);
    eprintln!("lab_nicres done in {:.0} s", t.elapsed().as_secs_f64());
}
