//! The final figures of a run and their `--json` summary.

use super::{Offload, RcvBuf, ThreadPolicy, WorkerInfo};
use crate::rebalance::Round;
use crate::stats::Counters;
use crate::steer::Steer;
use rsskit_core::HashType;
use rsskit_linux::ebpf::reuseport::Counters as EbpfCounters;
use rsskit_linux::snmp::{SocketDrops, UdpCounters};
use serde_json::json;
use std::net::SocketAddr;
use std::time::Duration;

/// Final figures of a run.
#[derive(Debug, Clone)]
pub struct EchoReport {
    /// How datagrams reached the workers.
    pub steer: Steer,
    /// The hash type used for buckets.
    pub hash_type: HashType,
    /// The bound address.
    pub local: SocketAddr,
    /// How long the server ran.
    pub duration: Duration,
    /// Each worker and its final counters, in worker order.
    pub workers: Vec<(WorkerInfo, Counters)>,
    /// The kernel's UDP counter deltas (this network namespace, whole family).
    pub kernel: Option<UdpCounters>,
    /// The kernel's per-socket figures for our port, read just before stopping.
    pub socket_drops: Option<SocketDrops>,
    /// `SO_RCVBUF` asked for and granted.
    pub rcvbuf: RcvBuf,
    /// `ebpf` steering asked for, classic `toeplitz` in force: why.
    pub fallback: Option<String>,
    /// `ebpf` steering: the program's counters at the end.
    pub ebpf: Option<EbpfCounters>,
    /// Bucket moves made live (rebalancing rounds that moved something).
    pub rebalance: Vec<Round>,
    /// GRO/GSO in force.
    pub offload: Offload,
    /// The workers' scheduling policy.
    pub sched: ThreadPolicy,
}

impl EchoReport {
    /// All workers summed.
    pub fn totals(&self) -> Counters {
        Counters::total(self.workers.iter().map(|w| &w.1))
    }

    /// The `--json` summary.
    pub fn to_json(&self) -> serde_json::Value {
        let workers: Vec<serde_json::Value> = self
            .workers
            .iter()
            .map(|(i, c)| {
                json!({
                    "worker": i.worker,
                    "cpu": i.cpu,
                    "buckets": i.buckets,
                    "extra_cpus": i.extra_cpus,
                    "received": c.received,
                    "sent": c.sent,
                    "bytes": c.bytes,
                    "batches": c.batches,
                    "misdirected": c.misdirected,
                    "unowned": c.unowned,
                    "dropped": c.dropped,
                    "foreign": c.foreign,
                    "coalesced": c.coalesced,
                    "flushes": c.flushes,
                })
            })
            .collect();
        json!({
            "bind": self.local.to_string(),
            "steer": self.steer.name(),
            "hash_type": self.hash_type.name(),
            "duration_s": self.duration.as_secs_f64(),
            "workers": workers,
            "totals": self.totals(),
            "kernel": self.kernel,
            "socket": self.socket_drops,
            "rcvbuf": self.rcvbuf,
            "steer_fallback": self.fallback,
            "ebpf": self.ebpf,
            "rebalance": self.rebalance,
            "offload": self.offload,
            "sched": self.sched.name(),
        })
    }
}
