//! The agent's Prometheus text exposition (format 0.0.4), rendered from a
//! snapshot with no I/O. Labels are few and bounded: device (persisted
//! devices only), setting class, cause, problem kind, RX queue, CPU.

use crate::softnet::Softnet;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// One persisted device as the last check saw it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DeviceMetrics {
    /// Interface name.
    pub device: String,
    /// Every planned setting in place.
    pub aligned: bool,
    /// Problems by kind (`drifted`, `refused`, `contested`, `queues_differ`, `missing`...): count.
    pub problems: BTreeMap<&'static str, u64>,
    /// RX queue -> packets, where the driver's statistics name queues.
    pub rx_queue_packets: BTreeMap<usize, u64>,
    /// Busiest RX queue over the mean, over the last interval (packets).
    pub imbalance: Option<f64>,
    /// Frames the NIC itself lost, by statistics file (`rx_missed_errors`...), those the driver exposes.
    pub nic_drops: BTreeMap<&'static str, u64>,
}

/// Everything `/metrics` shows.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snapshot {
    /// Persisted devices present on the host.
    pub devices: Vec<DeviceMetrics>,
    /// Corrections by (device, setting class, cause).
    pub corrections: BTreeMap<(String, &'static str, &'static str), u64>,
    /// Per CPU softnet counters.
    pub softnet: Vec<(usize, Softnet)>,
    /// Valid persisted plans loaded.
    pub plans: usize,
    /// Persisted plan files refused as invalid.
    pub invalid_plans: usize,
}

fn esc(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

fn head(out: &mut String, name: &str, ty: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {ty}");
}

/// The problem kinds always exported per device (0 when absent), so a
/// query sees them go back to zero.
pub const PROBLEM_KINDS: [&str; 5] = ["drifted", "refused", "contested", "queues_differ", "cpus_offline"];

/// Renders the exposition.
pub fn render(s: &Snapshot) -> String {
    let mut o = String::new();
    head(&mut o, "rsskit_plans", "gauge", "Persisted plans loaded (valid files).");
    let _ = writeln!(o, "rsskit_plans {}", s.plans);
    head(
        &mut o,
        "rsskit_plans_invalid",
        "gauge",
        "Persisted plan files refused as invalid (nothing of them is used).",
    );
    let _ = writeln!(o, "rsskit_plans_invalid {}", s.invalid_plans);
    head(&mut o, "rsskit_device_aligned", "gauge", "1 when every planned setting of the device is in place.");
    for d in &s.devices {
        let _ = writeln!(o, "rsskit_device_aligned{{device=\"{}\"}} {}", esc(&d.device), u8::from(d.aligned));
    }
    head(
        &mut o,
        "rsskit_device_problems",
        "gauge",
        "Settings of the device not as planned at the last check, by kind.",
    );
    for d in &s.devices {
        let mut kinds: BTreeMap<&str, u64> = PROBLEM_KINDS.iter().map(|k| (*k, 0)).collect();
        kinds.extend(d.problems.iter().map(|(k, v)| (*k, *v)));
        for (k, v) in kinds {
            let _ = writeln!(o, "rsskit_device_problems{{device=\"{}\",kind=\"{k}\"}} {v}", esc(&d.device));
        }
    }
    head(
        &mut o,
        "rsskit_corrections_total",
        "counter",
        "Settings the agent put back, by setting and the cause of the check.",
    );
    for ((dev, class, cause), n) in &s.corrections {
        let _ = writeln!(
            o,
            "rsskit_corrections_total{{device=\"{}\",setting=\"{class}\",cause=\"{cause}\"}} {n}",
            esc(dev)
        );
    }
    head(
        &mut o,
        "rsskit_rx_queue_packets_total",
        "counter",
        "Packets received per RX queue, where the driver's statistics name queues.",
    );
    for d in &s.devices {
        for (q, n) in &d.rx_queue_packets {
            let _ = writeln!(
                o,
                "rsskit_rx_queue_packets_total{{device=\"{}\",queue=\"{q}\"}} {n}",
                esc(&d.device)
            );
        }
    }
    head(
        &mut o,
        "rsskit_nic_rx_dropped_total",
        "counter",
        "Frames the NIC lost before the kernel saw them, by statistics counter (rx_missed_errors, rx_fifo_errors, rx_over_errors).",
    );
    for d in &s.devices {
        for (c, n) in &d.nic_drops {
            let _ = writeln!(
                o,
                "rsskit_nic_rx_dropped_total{{device=\"{}\",counter=\"{c}\"}} {n}",
                esc(&d.device)
            );
        }
    }
    head(
        &mut o,
        "rsskit_rx_queue_imbalance_ratio",
        "gauge",
        "Busiest RX queue over the mean over the last check interval (1 = even).",
    );
    for d in &s.devices {
        if let Some(x) = d.imbalance {
            let _ = writeln!(o, "rsskit_rx_queue_imbalance_ratio{{device=\"{}\"}} {x}", esc(&d.device));
        }
    }
    type Field = fn(&Softnet) -> u64;
    let cols: [(&str, &str, Field); 3] = [
        (
            "rsskit_softnet_processed_packets_total",
            "Packets processed by NET_RX per CPU (/proc/net/softnet_stat).",
            |x| x.processed,
        ),
        (
            "rsskit_softnet_dropped_packets_total",
            "Packets dropped per CPU: backlog full (netdev_max_backlog).",
            |x| x.dropped,
        ),
        (
            "rsskit_softnet_time_squeeze_total",
            "Times NET_RX ran out of budget or time with work left, per CPU.",
            |x| x.time_squeeze,
        ),
    ];
    for (name, help, f) in cols {
        head(&mut o, name, "counter", help);
        for (cpu, x) in &s.softnet {
            let _ = writeln!(o, "{name}{{cpu=\"{cpu}\"}} {}", f(x));
        }
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exposition_has_help_type_and_values() {
        let mut s = Snapshot { plans: 1, ..Snapshot::default() };
        s.devices.push(DeviceMetrics {
            device: "veth\"0".into(),
            aligned: false,
            problems: [("refused", 2)].into_iter().collect(),
            rx_queue_packets: [(0, 10), (1, 30)].into_iter().collect(),
            nic_drops: [("rx_missed_errors", 7)].into_iter().collect(),
            imbalance: Some(1.5),
        });
        s.corrections.insert(("veth\"0".into(), "rps_cpus", "periodic"), 3);
        s.softnet.push((1, Softnet { processed: 7, dropped: 1, time_squeeze: 2, ..Softnet::default() }));
        let t = render(&s);
        for want in [
            "# TYPE rsskit_device_aligned gauge\nrsskit_device_aligned{device=\"veth\\\"0\"} 0\n",
            "rsskit_device_problems{device=\"veth\\\"0\",kind=\"refused\"} 2\n",
            "rsskit_device_problems{device=\"veth\\\"0\",kind=\"contested\"} 0\n",
            "# TYPE rsskit_corrections_total counter\n",
            "rsskit_corrections_total{device=\"veth\\\"0\",setting=\"rps_cpus\",cause=\"periodic\"} 3\n",
            "rsskit_rx_queue_packets_total{device=\"veth\\\"0\",queue=\"1\"} 30\n",
            "rsskit_nic_rx_dropped_total{device=\"veth\\\"0\",counter=\"rx_missed_errors\"} 7\n",
            "rsskit_rx_queue_imbalance_ratio{device=\"veth\\\"0\"} 1.5\n",
            "rsskit_softnet_processed_packets_total{cpu=\"1\"} 7\n",
            "rsskit_softnet_dropped_packets_total{cpu=\"1\"} 1\n",
            "rsskit_softnet_time_squeeze_total{cpu=\"1\"} 2\n",
        ] {
            assert!(t.contains(want), "{want}\n---\n{t}");
        }
        // Every sample line belongs to a metric with HELP and TYPE.
        for l in t.lines().filter(|l| !l.starts_with('#')) {
            let name = l.split(['{', ' ']).next().unwrap();
            assert!(t.contains(&format!("# TYPE {name} ")), "{name}");
            assert!(t.contains(&format!("# HELP {name} ")), "{name}");
        }
    }
}
