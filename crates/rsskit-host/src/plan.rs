//! The tuning plan: from what [`crate::sysroot`] reads (queues, IRQs, the
//! device's NUMA node, online CPUs, their cores and nodes, isolated CPUs,
//! key and table), the layout that keeps each flow on one CPU. No I/O:
//! `rsskit plan` prints it, `rsskit apply` writes it.
//!
//! - CPUs: `--cpus`, else [`crate::placement`]'s rules (isolated CPUs
//!   left out, one thread per core first, the NIC's node first, cores of
//!   earlier NICs left out while there are enough), each printed as a
//!   `rule NAME:` note; ascending.
//! - Queue -> CPU: DragonFly's ringmap ([`rsskit_core::ringmap`]) over those
//!   CPUs, device unit `unit` (several NICs start on different CPU sets);
//!   past 128 CPUs or queues, in order ([`Bind::Direct`]: the `size` rule);
//!   RX and TX aligned when the IRQs serve both (combined channels),
//!   matched otherwise.
//! - Table: the ringmap's redirect table of the device's size: the fewest
//!   entries whose ring sits on another CPU than `(hash & 127) % N`; past
//!   the ringmap, the bound queues spread evenly.
//! - Key: kept, or the one asked for (random keys are checked by the caller).
//! - IRQ affinity: each queue IRQ on its queue's CPU. XPS: every CPU sends
//!   on the TX queue bound to it (round robin for CPUs without one).
//! - RPS over the CPUs for devices without hardware RSS (veth, single-queue
//!   virtio); off where hardware RSS spreads (no double steering). With
//!   [`SoftwareRss::Xdp`] such devices get rsskit's XDP Toeplitz steering
//!   (`rsskit xdp-steer`) over the CPUs instead, and RPS off.
//! - RFS sizes (`rps_flow_cnt`, `rps_sock_flow_entries`) only when asked,
//!   rounded up to a power of two as the kernel does.
//! - Steering for rsskit's servers: `cpu` when each flow arrives on one CPU
//!   (aligned per-queue IRQs, or RPS), `toeplitz` with the NIC's key
//!   otherwise.

use crate::placement::{self, Bind, CoreKey, CpuMap};
use crate::sysroot::DeviceState;
use crate::tune::setting::{hex, printable, quoted, valid_value, Kind, MAX_TABLE_ENTRIES};
use rsskit_core::ringmap::{Ringmap, HOST_TABLE_LEN, MAX_CPUS};
use rsskit_linux::cpulist;
use rsskit_linux::netdev::IrqKind;
use rsskit_linux::topology::Topology;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

/// Why no plan was made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    /// No CPU was given or found online.
    #[error("no CPUs to use")]
    NoCpus,
    /// A CPU asked for is not online.
    #[error("CPU {cpu} is not online (online CPUs: {online})")]
    OfflineCpu {
        /// The CPU asked for.
        cpu: usize,
        /// The online CPUs, as a CPU list.
        online: String,
    },
    /// CPUs named both for IRQs (`cpus`) and for the application (`app_cpus`).
    #[error("CPUs {cpus} are named both for IRQs (cpus) and for the application (app_cpus)")]
    AppOverlap {
        /// The CPUs in both, as a CPU list.
        cpus: String,
    },
    /// A key of another length than the device's.
    #[error("{device}: the key is {given} bytes but the device's key is {device_len} bytes")]
    KeyLength {
        /// The interface.
        device: String,
        /// Bytes in the key given.
        given: usize,
        /// Bytes in the device's key.
        device_len: usize,
    },
    /// The device lists no RX queues, so there is nothing to spread.
    #[error("{device}: has no RX queues in sysfs")]
    NoQueues {
        /// The interface.
        device: String,
    },
    /// The ringmap could not be laid out for the device.
    #[error("{device}: {msg}")]
    Ringmap {
        /// The interface.
        device: String,
        /// The ringmap's reason.
        msg: String,
    },
    // napi:
    /// A NAPI setting's value the kernel would refuse.
    #[error("{field} {value} is out of range (at most {max})")]
    NapiValue {
        /// The option's field: `napi_defer_hard_irqs` or `gro_flush_timeout`.
        field: &'static str,
        /// The value given.
        value: u64,
        /// The largest the kernel accepts.
        max: u64,
    },
    // nicres: NIC resources.
    /// A ring size (`rx_ring`, `tx_ring`) or channel count (`channels`)
    /// past the device's maximum, or 0.
    #[error("{device}: {field} {asked} is out of range: the device takes 1 to {max}")]
    OutOfRange {
        /// The interface.
        device: String,
        /// The option: `rx_ring`, `tx_ring` or `channels`.
        field: &'static str,
        /// The value asked for.
        asked: u32,
        /// The device's maximum.
        max: u32,
    },
    // symplan: symmetric hashing (issue 37 item 3).
    /// The key in place after the plan cannot reach every bucket under the
    /// input transform in place after it (the symmetric key under
    /// symmetric-xor hashes every flow to 0).
    #[error(
        "{device}: the RSS key cannot reach every bucket under input_xfrm {xfrm} ({why}): flows would \
         pile into few queues; plan another key (a random one)"
    )]
    KeyUnderXfrm {
        /// The interface.
        device: String,
        /// The transform: `sym-xor` or `sym-or-xor`.
        xfrm: String,
        /// The key check's first problem.
        why: String,
    },
}

/// The key to plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyChoice {
    /// Keep the NIC's key.
    Keep,
    /// Set this key. `fit`: a pattern or random bytes that may be cut to
    /// the device's key length (symmetric, random); otherwise the length
    /// must be the device's.
    Set {
        /// The key bytes.
        bytes: Vec<u8>,
        /// How they were chosen (`random`, `symmetric`, `microsoft`, `given`): the plan's `key_source`.
        source: String,
        /// Whether they may be cut to the device's key length.
        fit: bool,
    },
}

// symplan
impl KeyChoice {
    /// The symmetric key (`--key symmetric`): 0x6d5a repeated, cut to the
    /// device's key length.
    pub fn symmetric() -> KeyChoice {
        KeyChoice::Set { bytes: vec![0x6d, 0x5a], source: "symmetric".into(), fit: true }
    }
}

/// How to spread a device without hardware RSS over its CPUs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SoftwareRss {
    /// The kernel's RPS (its own hash, after the packet entered the stack).
    #[default]
    Rps,
    /// rsskit's XDP program: Toeplitz with rsskit's key, cpumap redirect
    /// before the stack (`rsskit xdp-steer`).
    Xdp,
}

/// XDP software RSS for a device: what `rsskit xdp-steer` must run with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct XdpSteerPlan {
    /// CPUs the buckets are spread over.
    pub cpus: Vec<usize>,
    /// The command that attaches it (the program lives with that process).
    pub command: String,
}

/// What the user asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanOptions {
    /// CPUs to use, in this order; `None` = NUMA-local first.
    pub cpus: Option<Vec<usize>>,
    /// Device unit of the first device with hardware RSS; the next ones
    /// take the following units.
    pub unit: usize,
    /// The key to keep or write.
    pub key: KeyChoice,
    /// RFS flow table size per RX queue.
    pub rps_flow_cnt: Option<u64>,
    /// Global RFS socket flow table size.
    pub rps_sock_flow_entries: Option<u64>,
    /// Hashed fields to set (`ETHTOOL_SRXFH`): flow type name and `RXH_*` mask.
    pub hash_fields: Vec<(String, u64)>,
    /// Software RSS for devices without hardware RSS.
    pub software_rss: SoftwareRss,
    /// CPUs set aside for the application: no IRQ or RPS there, and the
    /// steering advice runs rsskit's servers on them (`None`: no split).
    pub app_cpus: Option<Vec<usize>>,
    // napi:
    /// `napi_defer_hard_irqs` for every planned device (`None`: keep).
    pub napi_defer_hard_irqs: Option<u64>,
    /// `gro_flush_timeout` (ns) for every planned device (`None`: keep).
    pub gro_flush_timeout: Option<u64>,
    // nicres: NIC resources.
    /// Descriptors per RX ring to set (`None`: kept).
    pub rx_ring: Option<u32>,
    /// Descriptors per TX ring to set (`None`: kept).
    pub tx_ring: Option<u32>,
    /// Interrupt coalescing to set (`None`: kept).
    pub coalesce: Option<crate::nicres::CoalesceChoice>,
    /// The channel count: kept, one per planned CPU, or a number.
    pub channels: crate::nicres::ChannelChoice,
    // symplan: symmetric hashing (issue 37 item 3).
    /// Make both directions of a flow hash alike (`None`: as `key` says).
    pub symmetric: Option<crate::symmetric::SymmetricChoice>,
}

impl Default for PlanOptions {
    fn default() -> Self {
        PlanOptions {
            cpus: None,
            unit: 0,
            key: KeyChoice::Keep,
            rps_flow_cnt: None,
            rps_sock_flow_entries: None,
            hash_fields: Vec::new(),
            software_rss: SoftwareRss::Rps,
            app_cpus: None,
            napi_defer_hard_irqs: None,
            gro_flush_timeout: None,
            // nicres
            rx_ring: None,
            tx_ring: None,
            coalesce: None,
            channels: crate::nicres::ChannelChoice::Keep,
            // symplan
            symmetric: None,
        }
    }
}

/// The whole plan (`rsskit plan --json`, the input of `rsskit apply`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    /// [`PLAN_VERSION`] when written; `apply` refuses other versions.
    pub version: u32,
    /// The CPUs online when the plan was made; `apply` checks they still are.
    pub online_cpus: Vec<usize>,
    /// `net.core.rps_sock_flow_entries` to set, if asked.
    pub rps_sock_flow_entries: Option<u64>,
    /// One plan per device.
    pub devices: Vec<DevicePlan>,
}

/// The plan format written and accepted by this build.
pub const PLAN_VERSION: u32 = 1;

/// Why a plan file was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanReadError {
    /// Not JSON of a plan.
    #[error("not a plan from `rsskit plan --json`: {0}")]
    Format(String),
    /// Another format version.
    #[error("plan version {0} (this rsskit reads version {PLAN_VERSION})")]
    Version(u32),
    /// A value no plan of rsskit's holds.
    #[error("{0}")]
    Invalid(String),
}

/// Largest plan read (bytes).
pub const MAX_PLAN_BYTES: usize = 16 << 20;

impl Plan {
    /// Reads a plan file's text: the format, the version and every value
    /// `apply` would use (interface names as the kernel accepts them, CPU
    /// numbers below [`cpulist::MAX_CPUS`], keys, tables, flow types and
    /// hashed fields). Whether the devices, queues, IRQs and CPUs are the
    /// host's is checked by `tune::settings`.
    pub fn from_json(text: &str) -> Result<Plan, PlanReadError> {
        if text.len() > MAX_PLAN_BYTES {
            return Err(PlanReadError::Format(format!("larger than {MAX_PLAN_BYTES} bytes")));
        }
        let plan: Plan =
            serde_json::from_str(text).map_err(|e| PlanReadError::Format(printable(&e.to_string())))?;
        if plan.version != PLAN_VERSION {
            return Err(PlanReadError::Version(plan.version));
        }
        plan.validate().map_err(PlanReadError::Invalid)?;
        Ok(plan)
    }

    fn validate(&self) -> Result<(), String> {
        let cpus_ok = |what: &str, dev: &str, c: &[usize]| match c.iter().find(|&&c| c >= cpulist::MAX_CPUS) {
            Some(c) => {
                Err(format!("{dev}: {what} names CPU {c} (CPU numbers are below {})", cpulist::MAX_CPUS))
            }
            None => Ok(()),
        };
        cpus_ok("online_cpus", "plan", &self.online_cpus)?;
        for (i, d) in self.devices.iter().enumerate() {
            if !rsskit_linux::netdev::valid_name(&d.name) {
                return Err(format!("device {}: {} is not an interface name", i + 1, quoted(&d.name)));
            }
            if self.devices[..i].iter().any(|x| x.name == d.name) {
                return Err(format!("{}: named twice", d.name));
            }
            let n = &printable(&d.name);
            cpus_ok("cpus", n, &d.cpus)?;
            for q in &d.rx {
                cpus_ok(&format!("rx-{} rps_cpus", q.queue), n, &q.rps_cpus)?;
            }
            for q in &d.tx {
                cpus_ok(&format!("tx-{} xps_cpus", q.queue), n, q.xps_cpus.as_deref().unwrap_or(&[]))?;
            }
            for x in &d.irqs {
                cpus_ok(&format!("IRQ {} cpus", x.irq), n, &x.cpus)?;
                if x.cpus.is_empty() {
                    return Err(format!("{n}: IRQ {} gets no CPU", x.irq));
                }
            }
            if let Some(x) = &d.xdp_steer {
                cpus_ok("xdp_steer cpus", n, &x.cpus)?;
            }
            if d.napi_threaded.is_some_and(|t| t != 0) {
                return Err(format!("{n}: napi_threaded is only ever planned 0 (off)"));
            }
            // napi:
            for t in &d.napi_threads {
                cpus_ok(&format!("NAPI {} thread cpus", t.napi_id), n, &t.cpus)?;
                if t.cpus.is_empty() {
                    return Err(format!("{n}: NAPI {} thread gets no CPU", t.napi_id));
                }
            }
            if d.napi_defer_hard_irqs.is_some_and(|v| v > MAX_DEFER_HARD_IRQS) {
                return Err(format!("{n}: napi_defer_hard_irqs above {MAX_DEFER_HARD_IRQS}"));
            }
            if d.gro_flush_timeout.is_some_and(|v| v > MAX_GRO_FLUSH_TIMEOUT_NS) {
                return Err(format!("{n}: gro_flush_timeout above {MAX_GRO_FLUSH_TIMEOUT_NS}"));
            }
            if let Some(k) = &d.key {
                valid_value(Kind::RssKey, k).map_err(|e| format!("{n}: the key is {e}"))?;
            }
            if let Some(t) = &d.table {
                if t.is_empty() || t.len() > MAX_TABLE_ENTRIES {
                    return Err(format!("{n}: a table of {} entries", t.len()));
                }
            }
            for iso in &d.isolation {
                iso.validate(d)?;
            }
            for h in &d.hash_fields {
                if !rsskit_linux::ethtool::FLOW_TYPES.iter().any(|f| f.name == h.flow) {
                    return Err(format!("{n}: {} is not a flow type", quoted(&h.flow)));
                }
                valid_value(Kind::HashFields, &h.fields.join(","))
                    .map_err(|e| format!("{n}: {} hashed fields: {e}", h.flow))?;
            }
            // nicres
            crate::nicres::validate(d).map_err(|e| format!("{n}: {e}"))?;
            // symplan
            if let Some(x) = &d.input_xfrm {
                valid_value(Kind::InputXfrm, x).map_err(|e| format!("{n}: input_xfrm is {e}"))?;
            }
        }
        Ok(())
    }
}

/// The settings planned for one device.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DevicePlan {
    /// Interface name.
    pub name: String,
    /// Its driver, if known.
    pub driver: Option<String>,
    /// Its NUMA node, if the platform says.
    pub numa_node: Option<usize>,
    /// The CPUs used, in ringmap order (ringmap CPU index i = `cpus[i]`).
    pub cpus: Vec<usize>,
    /// Its ringmap device unit (which CPUs its rings start on).
    pub unit: usize,
    /// Hardware RSS (a table and more than one RX queue).
    pub hardware_rss: bool,
    /// Ringmap grid of the RX rings.
    pub grid: usize,
    /// Per RX queue: CPU, IRQ and RPS.
    pub rx: Vec<RxPlan>,
    /// Per TX queue: CPU, IRQ and XPS.
    pub tx: Vec<TxPlan>,
    /// IRQ -> CPUs to write (`smp_affinity_list`).
    pub irqs: Vec<IrqPlan>,
    /// The redirect table to write; `None` = no table (no hardware RSS).
    pub table: Option<Vec<u32>>,
    /// Entries of `table` (and of the current table) whose ring runs on
    /// another CPU than `(hash & 127) % N` picks, and the fewest possible.
    pub table_mismatches: Option<usize>,
    /// The same count for the table in place now.
    pub current_table_mismatches: Option<usize>,
    /// The fewest mismatches any table can reach with these rings and CPUs.
    pub min_mismatches: Option<usize>,
    /// The key to write (hex); `None` = keep the NIC's.
    pub key: Option<String>,
    /// `keep`, `random`, `symmetric` or `given`.
    pub key_source: String,
    /// Hashed fields to set per flow type (`ETHTOOL_SRXFH`), when asked.
    #[serde(default)]
    pub hash_fields: Vec<HashFieldPlan>,
    /// XDP software RSS instead of RPS (`--software-rss xdp`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub xdp_steer: Option<XdpSteerPlan>,
    /// `/sys/class/net/IF/threaded` to write: `Some(0)` turns threaded
    /// NAPI off when its threads cannot be pinned to their queues' CPUs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub napi_threaded: Option<u32>,
    /// What rsskit's servers should use on this host.
    pub steering: SteeringAdvice,
    /// What could not be planned, or should be known, in words.
    pub notes: Vec<String>,
    // nicres: NIC resources.
    /// Descriptors per RX ring to write (`ETHTOOL_SRINGPARAM`), when asked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rx_ring: Option<u32>,
    /// Descriptors per TX ring to write, when asked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tx_ring: Option<u32>,
    /// Interrupt coalescing to write (`field=N,...`: the fields it sets), when asked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub coalesce: Option<String>,
    /// The channel count decided, and why (also when kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channels: Option<crate::nicres::ChannelPlan>,
    // Service isolation (issue 33 item 3, `--isolate`).
    /// Services given their own queues: an RSS context each and the rules into it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub isolation: Vec<crate::isolate::IsolationPlan>,
    // napi:
    /// Threaded NAPI kept on: each NAPI thread pinned to its queue's CPU
    /// (only where the kernel's map says which thread polls which queue).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub napi_threads: Vec<NapiThreadPlan>,
    /// `/sys/class/net/IF/napi_defer_hard_irqs` to write.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub napi_defer_hard_irqs: Option<u64>,
    /// `/sys/class/net/IF/gro_flush_timeout` (ns) to write.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gro_flush_timeout: Option<u64>,
    /// `kernel netlink` when the queue -> IRQ links came from the kernel's
    /// map; absent when from IRQ names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_map: Option<String>,
    // symplan: symmetric hashing (issue 37 item 3).
    /// The RSS input transform to write (`sym-xor`, `sym-or-xor`), when
    /// `--symmetric` chose it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_xfrm: Option<String>,
}

/// napi: one NAPI thread pinned to the CPU of the queue it polls.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NapiThreadPlan {
    /// Its NAPI id (the thread is `napi/IF-ID`).
    pub napi_id: u32,
    /// The lowest RX queue it polls (with `tx`: the TX queue).
    pub queue: usize,
    /// A TX queue's own NAPI instance (no RX queue's): pinned with its IRQ.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub tx: bool,
    /// The CPUs it may run on: its queue IRQ's.
    pub cpus: Vec<usize>,
}

/// Largest `napi_defer_hard_irqs` the kernel takes (`S32_MAX`).
pub const MAX_DEFER_HARD_IRQS: u64 = i32::MAX as u64;
/// Largest `gro_flush_timeout` planned (ns): one hour; the kernel takes
/// any unsigned long, but a larger one is a typo.
pub const MAX_GRO_FLUSH_TIMEOUT_NS: u64 = 3_600_000_000_000;

/// napi: checks the NAPI settings asked for (each error names its field).
pub fn check_napi_values(opts: &PlanOptions) -> Result<(), PlanError> {
    for (field, v, max) in [
        ("napi_defer_hard_irqs", opts.napi_defer_hard_irqs, MAX_DEFER_HARD_IRQS),
        ("gro_flush_timeout", opts.gro_flush_timeout, MAX_GRO_FLUSH_TIMEOUT_NS),
    ] {
        if let Some(value) = v.filter(|v| *v > max) {
            return Err(PlanError::NapiValue { field, value, max });
        }
    }
    Ok(())
}

/// What to do with one RX queue.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RxPlan {
    /// The queue number.
    pub queue: usize,
    /// The CPU the queue is bound to (`None`: more queues than CPUs, the
    /// table never names it).
    pub cpu: Option<usize>,
    /// Its IRQ, if one was found by name.
    pub irq: Option<u32>,
    /// `rps_cpus` to write ([] = off).
    pub rps_cpus: Vec<usize>,
    /// Its `rps_flow_cnt` (RFS table size), if asked.
    pub rps_flow_cnt: Option<u64>,
}

/// What to do with one TX queue.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TxPlan {
    /// The queue number.
    pub queue: usize,
    /// The CPU whose sends go to this queue (its IRQ goes there too).
    pub cpu: Option<usize>,
    /// Its IRQ, if one was found by name.
    pub irq: Option<u32>,
    /// `xps_cpus` to write; `None` on single-queue devices (the kernel
    /// refuses XPS there).
    pub xps_cpus: Option<Vec<usize>>,
}

/// Hashed fields to set for one flow type.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HashFieldPlan {
    /// Flow type: `tcp4`, `udp4`, `tcp6`, `udp6`...
    pub flow: String,
    /// Field names as `rsskit info` shows them (`ip_src`, `l4_dst_port`...).
    pub fields: Vec<String>,
}

/// Where one IRQ should run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IrqPlan {
    /// The IRQ number.
    pub irq: u32,
    /// Its action name in `/proc/interrupts`.
    pub name: String,
    /// The CPUs to allow (`smp_affinity_list`).
    pub cpus: Vec<usize>,
}

/// What rsskit's servers should use on this host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SteeringAdvice {
    /// `cpu` or `toeplitz`.
    pub mode: String,
    /// The CPUs to run the workers on.
    pub cpus: Vec<usize>,
    /// For `toeplitz`: the key (hex) to hash with, if the NIC reports one.
    pub key: Option<String>,
    /// Why this mode and these CPUs, in words.
    pub reason: String,
}

/// Rounds up to a power of two, as the kernel does for RFS sizes.
pub fn pow2_up(n: u64) -> u64 {
    n.max(1).checked_next_power_of_two().unwrap_or(1 << 63)
}

/// Plans every device in `devices` (in order; units count up over the
/// devices with hardware RSS).
pub fn plan(topo: &Topology, devices: &[DeviceState], opts: &PlanOptions) -> Result<Plan, PlanError> {
    if let Some(cpus) = &opts.cpus {
        if cpus.is_empty() {
            return Err(PlanError::NoCpus);
        }
        if let Some(&cpu) = cpus.iter().find(|c| !topo.online.contains(c)) {
            return Err(PlanError::OfflineCpu { cpu, online: cpulist::format(&topo.online) });
        }
    }
    if let Some(app) = &opts.app_cpus {
        if app.is_empty() {
            return Err(PlanError::NoCpus);
        }
        if let Some(&cpu) = app.iter().find(|c| !topo.online.contains(c)) {
            return Err(PlanError::OfflineCpu { cpu, online: cpulist::format(&topo.online) });
        }
        let both: Vec<usize> = opts.cpus.iter().flatten().copied().filter(|c| app.contains(c)).collect();
        if !both.is_empty() {
            return Err(PlanError::AppOverlap { cpus: cpulist::format(&sorted(&both)) });
        }
        if app.len() >= topo.online.len() {
            return Err(PlanError::NoCpus);
        }
    }
    check_napi_values(opts)?;
    let map = CpuMap::new(topo);
    let mut unit = opts.unit;
    // The queue cores of each device planned so far (hardware RSS only).
    let mut taken: Vec<BTreeSet<CoreKey>> = Vec::new();
    let mut out = Vec::new();
    for d in devices {
        let used: BTreeSet<CoreKey> = taken.iter().flatten().copied().collect();
        let choice = device_cpus(topo, &map, d, opts, &used)?;
        // Units count the NICs before this one on the same CPUs: with
        // --cpus every NIC shares them; by default only those whose
        // queues it could not avoid.
        let dev_unit = if opts.cpus.is_some() {
            unit
        } else {
            let mine = placement::core_set(&map, choice.cpus.iter().copied());
            opts.unit.saturating_add(taken.iter().filter(|t| !t.is_disjoint(&mine)).count())
        };
        let p = plan_device_on(topo, d, opts, dev_unit, choice)?;
        if p.hardware_rss {
            unit = unit.saturating_add(1);
            taken.push(placement::core_set(&map, p.rx.iter().filter_map(|q| q.cpu)));
        }
        out.push(p);
    }
    Ok(Plan {
        version: PLAN_VERSION,
        online_cpus: topo.online.clone(),
        rps_sock_flow_entries: opts.rps_sock_flow_entries.map(pow2_up),
        devices: out,
    })
}

/// Threaded NAPI on: its `napi/IF-N` threads run wherever the scheduler
/// puts them. Pinning each to its queue's CPU needs the queue -> thread map
/// (netdev netlink); without it no pinning holds for every queue, so
/// threading is turned off and the queues are polled in the softirq of
/// their IRQ's CPU again (`--restore` writes the old value back).
fn plan_napi_threaded(
    d: &DeviceState,
    rx: &[RxPlan],
    tx: &[TxPlan],
    irqs: &[IrqPlan],
    notes: &mut Vec<String>,
) -> (Option<u32>, Vec<NapiThreadPlan>) {
    if !d.napi.is_threaded() {
        return (None, Vec::new());
    }
    let why = match pin_napi_threads(d, rx, tx, irqs) {
        Ok(pins) => {
            notes.push(format!(
                "threaded NAPI is on (threaded={}): kept on, each of its {} napi/{}-ID thread(s) pinned to \
                 its queue IRQ's CPU (the kernel's map says which thread polls which queue); --restore \
                 puts their CPUs back",
                d.napi.threaded.unwrap_or(1),
                pins.len(),
                d.name
            ));
            return (None, pins);
        }
        Err(why) => why,
    };
    notes.push(format!(
        "threaded NAPI is on (threaded={}, {} thread(s)): {why}; threading is turned off (threaded=0) so \
         each queue is polled on its IRQ's CPU; --restore turns it back on",
        d.napi.threaded.unwrap_or(1),
        d.napi.threads.len()
    ));
    (Some(0), Vec::new())
}

/// napi: the stated rule where the kernel's map is known: each RX queue's
/// NAPI thread runs only where the queue's IRQ is planned (that IRQ's CPUs,
/// else the queue's CPU). A thread polling several queues goes with the
/// lowest. `Err` says why no pinning holds (then threading goes off).
pub fn pin_napi_threads(
    d: &DeviceState,
    rx: &[RxPlan],
    tx: &[TxPlan],
    irqs: &[IrqPlan],
) -> Result<Vec<NapiThreadPlan>, String> {
    if d.napi.map.is_none() {
        return Err("this kernel does not say which queue each napi/IF-N thread polls (no netdev netlink \
                    map), so no thread can be pinned to its queue's CPU"
            .into());
    }
    let mut out: Vec<NapiThreadPlan> = Vec::new();
    for q in rx {
        let Some(t) = d.napi.thread_of(q.queue) else {
            return Err(format!(
                "no napi/{}-ID thread is found for rx-{} (its name cut, or gone)",
                d.name, q.queue
            ));
        };
        let Some(napi_id) = t.napi_id else { continue };
        if out.iter().any(|p| p.napi_id == napi_id) {
            continue;
        }
        let cpus = match q.irq.and_then(|i| irqs.iter().find(|x| x.irq == i)) {
            Some(x) => x.cpus.clone(),
            None => q.cpu.into_iter().collect(),
        };
        if cpus.is_empty() {
            return Err(format!("rx-{} has no planned CPU to pin its thread to", q.queue));
        }
        out.push(NapiThreadPlan { napi_id, queue: q.queue, tx: false, cpus });
    }
    // A TX queue's own thread (completions) goes with its IRQ too, so that
    // no thread is left floating; one not found is left alone.
    for q in tx {
        let Some(napi_id) = d.napi.tx_thread_of(q.queue).and_then(|t| t.napi_id) else { continue };
        if out.iter().any(|p| p.napi_id == napi_id) {
            continue;
        }
        let cpus: Vec<usize> = match q.irq.and_then(|i| irqs.iter().find(|x| x.irq == i)) {
            Some(x) => x.cpus.clone(),
            None => q.cpu.into_iter().collect(),
        };
        if !cpus.is_empty() {
            out.push(NapiThreadPlan { napi_id, queue: q.queue, tx: true, cpus });
        }
    }
    Ok(out)
}

/// Plans one device as unit `unit`, alone on the host.
pub fn plan_device(
    topo: &Topology,
    d: &DeviceState,
    opts: &PlanOptions,
    unit: usize,
) -> Result<DevicePlan, PlanError> {
    let choice = device_cpus(topo, &CpuMap::new(topo), d, opts, &BTreeSet::new())?;
    plan_device_on(topo, d, opts, unit, choice)
}

/// Plans one device as unit `unit` on the CPUs chosen for it.
fn plan_device_on(
    topo: &Topology,
    d: &DeviceState,
    opts: &PlanOptions,
    unit: usize,
    choice: placement::Choice,
) -> Result<DevicePlan, PlanError> {
    let mut notes = choice.rules;
    // nicres: the channel count first; the rest is planned for that count.
    let channels =
        crate::nicres::choose_channels(&d.name, &d.channels, choice.cpus.len(), opts.channels, &mut notes)?;
    let resized;
    let d = match channels.as_ref().filter(|c| c.changes()) {
        Some(c) => {
            resized = crate::nicres::resized(d, c.chosen, &mut notes);
            &resized
        }
        None => d,
    };
    let hw = d.hardware_rss();
    let cpus = choice.cpus;
    let dev_unit = if hw { unit } else { 0 };
    let rings = Rings::bind(d, cpus, dev_unit, &mut notes)?;
    let table = plan_table(d, &rings.rx, &mut notes)?;
    let dev_key = d.rss.ok().map(|r| r.key.clone()).unwrap_or_default();
    // symplan: --symmetric picks the transform or the symmetric key.
    let sym = opts.symmetric.map(|c| {
        let rss = d.rss.ok();
        let current = rss.map(|r| r.input_xfrm.as_slice()).unwrap_or_default();
        let key_sym = !dev_key.is_empty() && dev_key.iter().enumerate().all(|(i, b)| *b == dev_key[i % 2]);
        let dev = crate::symmetric::Device {
            driver: d.driver.as_deref(),
            current,
            rss: hw && !dev_key.is_empty(),
            key_sym,
        };
        crate::symmetric::choose(c, &dev, &mut notes)
    });
    let key_choice = match &sym {
        Some(s) if s.key => KeyChoice::symmetric(),
        _ => opts.key.clone(),
    };
    let (key, key_source) = plan_key(d, &key_choice, &dev_key, &mut notes)?;
    if opts.symmetric.is_some() || key.is_some() {
        let planned = sym.as_ref().and_then(|s| s.input_xfrm.as_deref());
        key_under_xfrm(d, planned, key.as_deref(), &dev_key)?;
    }
    let spread = Spread::of(d, rings.cpus.len(), opts.software_rss);
    let xdp_steer = spread.xdp.then(|| XdpSteerPlan {
        cpus: sorted(&rings.cpus),
        command: format!(
            "rsskit xdp-steer --iface {} --cpus {}",
            d.name,
            cpulist::format(&sorted(&rings.cpus))
        ),
    });
    let rx = plan_rx(d, &rings, spread, opts.rps_flow_cnt.map(pow2_up));
    let tx = plan_tx(topo, d, &rings);
    let irqs = plan_irqs(d, &rings);
    if hw && !spread.queue_irqs {
        notes.push("no per-queue IRQs found (named after the device or in its msi_irqs): their affinity is not planned".into());
    }
    let nic_key = (!dev_key.is_empty()).then(|| key.clone().unwrap_or_else(|| hex(&dev_key)));
    let steering = match &opts.app_cpus {
        Some(app) => SteeringAdvice {
            mode: "toeplitz".into(),
            cpus: sorted(app),
            key: nic_key,
            reason: "IRQ and application CPUs are split: flows arrive on the IRQ CPUs, so the workers on \
                     the application CPUs pick their flows by the NIC's hash"
                .into(),
        },
        None => steering_advice(spread, &rings.cpus, d.rx.len(), &rx, nic_key),
    };
    let hash_fields = plan_hash_fields(opts, hw, &mut notes);
    let (napi_threaded, mut napi_threads) = plan_napi_threaded(d, &rx, &tx, &irqs, &mut notes);
    // A channel change re-creates the NAPI instances under new ids: the
    // threads of today's map are not the ones that will poll the queues.
    if channels.as_ref().is_some_and(|c| c.changes()) && !napi_threads.is_empty() {
        napi_threads.clear();
        notes.push(
            "NAPI threads are not pinned by this plan: the channel change re-creates them under new ids; \
             plan again after apply to pin them"
                .into(),
        );
    }
    if d.queue_map.is_kernel() {
        notes.push(d.queue_map.note());
    }
    // nicres
    let res = crate::nicres::plan_resources(d, opts, &mut notes)?;
    if !hw && d.rss.ok().is_some() && d.rx.len() <= 1 {
        let by = if spread.xdp { "rsskit's XDP program" } else { "RPS" };
        notes.push(format!("one RX queue: {by} spreads its flows instead of the NIC"));
    }
    let Rings { cpus, rx: rxb, .. } = rings;
    Ok(DevicePlan {
        name: d.name.clone(),
        driver: d.driver.clone(),
        numa_node: d.facts.numa_node,
        cpus,
        unit: dev_unit,
        hardware_rss: hw,
        grid: rxb.grid(),
        rx,
        tx,
        irqs,
        table: table.table,
        table_mismatches: table.mismatches,
        current_table_mismatches: table.current_mismatches,
        min_mismatches: table.min_mismatches,
        key,
        key_source,
        hash_fields,
        xdp_steer,
        napi_threaded,
        steering,
        notes,
        // nicres
        rx_ring: res.rx_ring,
        tx_ring: res.tx_ring,
        coalesce: res.coalesce,
        channels,
        isolation: Vec::new(),
        napi_threads,
        napi_defer_hard_irqs: opts.napi_defer_hard_irqs,
        gro_flush_timeout: opts.gro_flush_timeout,
        queue_map: d.queue_map.is_kernel().then(|| crate::irqmap::KERNEL.to_string()),
        // symplan
        input_xfrm: sym.and_then(|s| s.input_xfrm),
    })
}

/// The device's CPUs, ascending: `--cpus`, else [`placement::default_choice`].
fn device_cpus(
    topo: &Topology,
    map: &CpuMap,
    d: &DeviceState,
    opts: &PlanOptions,
    used: &BTreeSet<CoreKey>,
) -> Result<placement::Choice, PlanError> {
    let choice = match &opts.cpus {
        Some(c) => placement::Choice { cpus: sorted(c), rules: placement::named_rules(topo, c) },
        None => placement::default_choice(
            topo,
            map,
            d.facts.numa_node,
            d.rx.len(),
            d.hardware_rss(),
            used,
            &sorted(opts.app_cpus.as_deref().unwrap_or_default()),
        ),
    };
    if choice.cpus.is_empty() {
        return Err(PlanError::NoCpus);
    }
    Ok(choice)
}

fn ringmap_err(d: &DeviceState) -> impl Fn(rsskit_core::ringmap::RingmapError) -> PlanError + '_ {
    move |e| PlanError::Ringmap { device: d.name.clone(), msg: e.to_string() }
}

/// Whether the device has IRQs of its own per queue.
fn has_queue_irqs(d: &DeviceState) -> bool {
    d.irqs.iter().any(|x| x.kind != IrqKind::Other && x.queue.is_some())
}

/// A device's queues bound to its CPUs: DragonFly's ringmaps, RX and TX,
/// or past them in order.
struct Rings {
    /// The CPUs, ascending; ringmap index i is the i-th.
    cpus: Vec<usize>,
    rx: Bind,
    tx: Bind,
}

impl Rings {
    /// RX and TX rings over `cpus`: aligned when the IRQs serve both
    /// (combined channels), matched otherwise.
    fn bind(
        d: &DeviceState,
        cpus: Vec<usize>,
        unit: usize,
        notes: &mut Vec<String>,
    ) -> Result<Rings, PlanError> {
        let (n, nrx, ntx) = (cpus.len(), d.rx.len(), d.tx.len());
        if nrx == 0 {
            return Err(PlanError::NoQueues { device: d.name.clone() });
        }
        let rm_err = ringmap_err(d);
        let combined = d.irqs.iter().any(|x| x.kind == IrqKind::RxTx)
            || (!has_queue_irqs(d) && d.channels.ok().is_some_and(|c| c.combined_count > 0));
        let (rx, tx) = if n > MAX_CPUS || nrx > MAX_CPUS || ntx > MAX_CPUS {
            notes.push(format!(
                "rule size: {n} CPUs, {nrx} RX queues: past DragonFly's 128-CPU model (the host there \
                 looks at hash & 127), queues are bound to the CPUs in order and the table spreads \
                 evenly over the bound queues"
            ));
            // Same list, unit and order: RX and TX queue q share a CPU.
            (Bind::direct(n, nrx, unit), Bind::direct(n, ntx.max(1), unit))
        } else {
            let mut rx = Ringmap::alloc(n, nrx, unit).map_err(&rm_err)?;
            let mut tx = Ringmap::alloc(n, ntx.max(1), unit).map_err(&rm_err)?;
            if combined {
                Ringmap::align(&mut rx, &mut tx).map_err(&rm_err)?;
            } else {
                Ringmap::match_rings(&mut rx, &mut tx).map_err(&rm_err)?;
            }
            (Bind::Ring(rx), Bind::Ring(tx))
        };
        if nrx > rx.count() {
            let what = if d.hardware_rss() {
                "get no table entries (one queue per CPU is enough)"
            } else {
                "have no CPU of their own"
            };
            notes.push(format!("{nrx} RX queues on {n} CPUs: queues {}-{} {what}", rx.count(), nrx - 1));
        }
        Ok(Rings { cpus, rx, tx })
    }

    fn rx_cpu(&self, q: usize) -> Option<usize> {
        self.rx.cpu(q).map(|i| self.cpus[i])
    }

    fn tx_cpu(&self, q: usize) -> Option<usize> {
        self.tx.cpu(q).map(|i| self.cpus[i])
    }
}

/// The planned table and how it lines up with the host's pick.
#[derive(Default)]
struct TablePlan {
    table: Option<Vec<u32>>,
    mismatches: Option<usize>,
    current_mismatches: Option<usize>,
    min_mismatches: Option<usize>,
}

/// The table (hardware RSS only): the ringmap's redirect table when its
/// size is a multiple of [`HOST_TABLE_LEN`], else the rings spread evenly.
fn plan_table(d: &DeviceState, rxb: &Bind, notes: &mut Vec<String>) -> Result<TablePlan, PlanError> {
    let Some(r) = d.rss.ok().filter(|_| d.hardware_rss()) else { return Ok(TablePlan::default()) };
    let len = r.indir.len();
    let Bind::Ring(rxm) = rxb else {
        let count = rxb.count();
        if len < count {
            notes.push(format!(
                "the device's table has {len} entries for {count} bound queues: queues {len}-{} get none",
                count - 1
            ));
        }
        let table = Some((0..len).map(|i| (i % count) as u32).collect());
        return Ok(TablePlan { table, ..TablePlan::default() });
    };
    if !len.is_multiple_of(HOST_TABLE_LEN) {
        notes.push(format!(
            "the device's table has {len} entries, not a multiple of {HOST_TABLE_LEN}: it cannot line up \
             with (hash & 127) % N; the rings are spread evenly instead"
        ));
        let table = Some((0..len).map(|i| (i % rxm.count()) as u32).collect());
        return Ok(TablePlan { table, ..TablePlan::default() });
    }
    let t = rxm.rdrtable(len).map_err(ringmap_err(d))?;
    let cur: Vec<usize> = r.indir.iter().map(|&x| x as usize).collect();
    Ok(TablePlan {
        mismatches: Some(rxm.mismatches(&t)),
        min_mismatches: Some(rxm.min_mismatches(len)),
        current_mismatches: Some(rxm.mismatches(&cur)),
        table: Some(t.iter().map(|&x| x as u32).collect()),
    })
}

/// The key to write (hex) and where it comes from: kept, or the one asked
/// for, cycled to the device's length when `fit`.
fn plan_key(
    d: &DeviceState,
    choice: &KeyChoice,
    dev_key: &[u8],
    notes: &mut Vec<String>,
) -> Result<(Option<String>, String), PlanError> {
    Ok(match choice {
        KeyChoice::Keep => (None, "keep".to_string()),
        KeyChoice::Set { .. } if dev_key.is_empty() => {
            notes.push("no RSS key to replace: the driver reports none".into());
            (None, "keep".to_string())
        }
        KeyChoice::Set { bytes, source, fit } => {
            let k: Vec<u8> = if *fit {
                bytes.iter().copied().cycle().take(dev_key.len()).collect()
            } else if bytes.len() == dev_key.len() {
                bytes.clone()
            } else {
                return Err(PlanError::KeyLength {
                    device: d.name.clone(),
                    given: bytes.len(),
                    device_len: dev_key.len(),
                });
            };
            (Some(hex(&k)), source.clone())
        }
    })
}

/// symplan: the key in place after the plan (`key`, else the device's),
/// judged under the transform in place after it (`planned`, else the
/// device's): refused when buckets are unreachable.
fn key_under_xfrm(
    d: &DeviceState,
    planned: Option<&str>,
    key: Option<&str>,
    dev_key: &[u8],
) -> Result<(), PlanError> {
    use rsskit_core::{keycheck, InputXfrm, RssKey};
    let bits = match planned {
        Some(t) => crate::tune::input_xfrm_bits(t),
        None => d.rss.ok().and_then(|r| rsskit_linux::ethtool::xfrm_bits(&r.input_xfrm)),
    };
    let Some(xfrm) = bits.and_then(|b| InputXfrm::from_bits(b).ok()).filter(|x| x.is_symmetric()) else {
        return Ok(());
    };
    let k = match key {
        Some(h) => RssKey::from_hex(h),
        None => RssKey::from_bytes(dev_key),
    };
    let Ok(k) = k else { return Ok(()) };
    let rep = keycheck::check_under(&k, keycheck::KeyUse::full(), xfrm);
    match rep.problems.iter().find(|p| p.unreachable_buckets()) {
        Some(p) => Err(PlanError::KeyUnderXfrm {
            device: d.name.clone(),
            xfrm: crate::symmetric::xfrm_text(xfrm),
            why: p.to_string(),
        }),
        None => Ok(()),
    }
}

/// What spreads a device's flows over its CPUs.
#[derive(Clone, Copy)]
struct Spread {
    /// Hardware RSS.
    hw: bool,
    /// IRQs of its own per queue.
    queue_irqs: bool,
    /// rsskit's XDP program (no hardware RSS, several CPUs, asked for).
    xdp: bool,
    /// RPS (no hardware RSS, several CPUs, no XDP).
    rps: bool,
}

impl Spread {
    fn of(d: &DeviceState, ncpus: usize, software_rss: SoftwareRss) -> Spread {
        let hw = d.hardware_rss();
        let software = !hw && ncpus > 1;
        let xdp = software && software_rss == SoftwareRss::Xdp;
        Spread { hw, queue_irqs: has_queue_irqs(d), xdp, rps: software && !xdp }
    }
}

/// Each RX queue's CPU (when hardware RSS or an IRQ binds it), RPS and RFS.
fn plan_rx(d: &DeviceState, rings: &Rings, spread: Spread, flow_cnt: Option<u64>) -> Vec<RxPlan> {
    d.rx.iter()
        .map(|q| {
            let irq = rsskit_linux::netdev::rx_irq(&d.irqs, q.queue).map(|x| x.irq);
            RxPlan {
                queue: q.queue,
                // Without hardware RSS or an IRQ nothing binds the queue to a CPU.
                cpu: if spread.hw || irq.is_some() { rings.rx_cpu(q.queue) } else { None },
                irq,
                rps_cpus: if spread.rps { sorted(&rings.cpus) } else { Vec::new() },
                rps_flow_cnt: flow_cnt,
            }
        })
        .collect()
}

/// Each TX queue's CPU and, with several queues, its XPS CPUs.
fn plan_tx(topo: &Topology, d: &DeviceState, rings: &Rings) -> Vec<TxPlan> {
    let ntx = d.tx.len();
    let xps = xps_cpus(topo, rings, ntx);
    d.tx.iter()
        .map(|q| TxPlan {
            queue: q.queue,
            cpu: rings.tx_cpu(q.queue),
            irq: rsskit_linux::netdev::tx_irq(&d.irqs, q.queue).map(|x| x.irq),
            xps_cpus: (ntx > 1).then(|| sorted(xps.get(q.queue).map_or(&[][..], |v| v))),
        })
        .collect()
}

/// XPS: CPU index i sends on the TX ring bound to it, else ring i % count;
/// online CPUs outside the set still send, so they are spread too.
fn xps_cpus(topo: &Topology, rings: &Rings, ntx: usize) -> Vec<Vec<usize>> {
    let txm = &rings.tx;
    // CPU index -> the TX ring bound to it.
    let mut bound: Vec<Option<usize>> = vec![None; rings.cpus.len()];
    for (r, i) in txm.cpus().into_iter().enumerate() {
        if let Some(b) = bound.get_mut(i) {
            b.get_or_insert(r);
        }
    }
    let mut xps: Vec<Vec<usize>> = vec![Vec::new(); ntx];
    for (i, &cpu) in rings.cpus.iter().enumerate() {
        let ring = bound[i].unwrap_or(i % txm.count());
        if ring < ntx {
            xps[ring].push(cpu);
        }
    }
    for (j, &cpu) in topo.online.iter().filter(|c| !rings.cpus.contains(c)).enumerate() {
        let ring = j % txm.count();
        if ring < ntx {
            xps[ring].push(cpu);
        }
    }
    xps
}

/// IRQs: each queue IRQ on its queue's CPU; queues past the ringmap on
/// the CPUs round robin.
fn plan_irqs(d: &DeviceState, rings: &Rings) -> Vec<IrqPlan> {
    let (n, nrx, ntx) = (rings.cpus.len(), d.rx.len(), d.tx.len());
    let mut irqs = Vec::new();
    for x in d.irqs.iter().filter(|x| x.kind != IrqKind::Other) {
        let Some(q) = x.queue else { continue };
        let cpu = if x.kind.serves_rx() && q < nrx {
            rings.rx_cpu(q)
        } else if x.kind.serves_tx() && q < ntx {
            rings.tx_cpu(q)
        } else {
            None
        }
        .unwrap_or(rings.cpus[q % n]);
        irqs.push(IrqPlan { irq: x.irq, name: x.name.clone(), cpus: vec![cpu] });
    }
    irqs
}

/// Steering for rsskit's servers: `cpu` when each flow arrives on one CPU,
/// `toeplitz` with the NIC's key otherwise.
fn steering_advice(
    spread: Spread,
    cpus: &[usize],
    nrx: usize,
    rx: &[RxPlan],
    nic_key: Option<String>,
) -> SteeringAdvice {
    let cpu_mode = |cpus: Vec<usize>, reason: &str| SteeringAdvice {
        mode: "cpu".into(),
        cpus,
        key: None,
        reason: reason.into(),
    };
    if spread.hw && spread.queue_irqs {
        let queue_cpus: Vec<usize> = sorted(&rx.iter().filter_map(|q| q.cpu).collect::<Vec<_>>());
        cpu_mode(
            queue_cpus,
            "hardware RSS with one IRQ per queue on one CPU: each flow arrives on the CPU of its \
             queue; run a worker on each of those CPUs",
        )
    } else if spread.xdp {
        cpu_mode(
            sorted(cpus),
            "rsskit's XDP program redirects each flow to its Toeplitz bucket's CPU before the stack, \
             which runs the socket lookup there",
        )
    } else if spread.rps {
        cpu_mode(sorted(cpus), "RPS picks one CPU per flow and the stack runs the socket lookup there")
    } else if cpus.len() == 1 || (nrx == 1 && !spread.hw) {
        cpu_mode(sorted(cpus), "one CPU: every flow is on it")
    } else {
        SteeringAdvice {
            mode: "toeplitz".into(),
            cpus: sorted(cpus),
            key: nic_key,
            reason: "the IRQs cannot be aligned per queue: compute the NIC's hash with its own key and \
                     table in the workers"
                .into(),
        }
    }
}

/// Hashed fields as asked, for devices with hardware RSS only.
fn plan_hash_fields(opts: &PlanOptions, hw: bool, notes: &mut Vec<String>) -> Vec<HashFieldPlan> {
    if !hw {
        if !opts.hash_fields.is_empty() {
            notes.push("hashed fields not planned: the device has no hardware RSS".into());
        }
        return Vec::new();
    }
    opts.hash_fields
        .iter()
        .map(|(flow, raw)| HashFieldPlan {
            flow: flow.clone(),
            fields: rsskit_linux::ethtool::rxh_fields(*raw).iter().map(|s| s.to_string()).collect(),
        })
        .collect()
}

fn sorted(v: &[usize]) -> Vec<usize> {
    let mut v = v.to_vec();
    v.sort_unstable();
    v.dedup();
    v
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use rsskit_core::key::MICROSOFT_KEY;
    use rsskit_core::ringmap::{PlanSpec, RingmapPlan};
    use rsskit_linux::ethtool::{Channels, Reported, Rss};
    use rsskit_linux::netdev::{IfaceFacts, IfaceIrq, RxQueue, TxQueue};
    use rsskit_linux::topology::{CpuPlace, NumaNode};

    /// `ncpus` CPUs in two equal NUMA nodes.
    pub(crate) fn topo(ncpus: usize) -> Topology {
        let half = ncpus / 2;
        Topology {
            online: (0..ncpus).collect(),
            nodes: vec![
                NumaNode { node: 0, cpus: (0..half).collect() },
                NumaNode { node: 1, cpus: (half..ncpus).collect() },
            ],
            cpus: (0..ncpus)
                .map(|c| CpuPlace {
                    cpu: c,
                    core_id: Some(c),
                    package_id: Some(c / half),
                    node: Some(c / half),
                })
                .collect(),
            isolated: vec![],
            nohz_full: vec![],
        }
    }

    /// A NIC with `q` combined queues named `NAME-TxRx-N` on IRQs 100+, RSS
    /// with a 40-byte key and a `table_len` table.
    pub(crate) fn nic(name: &str, q: usize, node: Option<usize>, table_len: usize) -> DeviceState {
        DeviceState {
            name: name.into(),
            driver: Some("ixgbe".into()),
            facts: IfaceFacts {
                operstate: Some("up".into()),
                mtu: Some(1500),
                numa_node: node,
                has_device: true,
            },
            channels: Reported::Supported(Channels { combined_count: q as u32, ..Channels::default() }),
            rss: Reported::Supported(Rss {
                key: MICROSOFT_KEY.to_vec(),
                indir: (0..table_len as u32).map(|i| i % q as u32).collect(),
                hfunc: vec!["toeplitz".into()],
                input_xfrm: vec![],
                source: "ETHTOOL_GRSSH",
            }),
            hash: Reported::Unsupported { reason: "not asked".into() },
            rx: (0..q)
                .map(|i| RxQueue {
                    queue: i,
                    rps_mask: Some("0".into()),
                    rps_cpus: Some(vec![]),
                    rps_flow_cnt: Some(0),
                })
                .collect(),
            tx: (0..q)
                .map(|i| TxQueue { queue: i, xps_mask: Some("0".into()), xps_cpus: Some(vec![]) })
                .collect(),
            irqs: (0..q)
                .map(|i| IfaceIrq {
                    irq: 100 + i as u32,
                    name: format!("{name}-TxRx-{i}"),
                    kind: IrqKind::RxTx,
                    queue: Some(i),
                    cpus: Some(vec![0]),
                    effective_cpus: Some(vec![0]),
                })
                .collect(),
            napi: Default::default(),
            // nicres
            rings: Reported::Unsupported { reason: "not in this test".into() },
            coalesce: Reported::Unsupported { reason: "not in this test".into() },
            // ethtool netlink (issue 37 item 2): not a live read.
            via: Default::default(),
            queue_map: crate::irqmap::MapSource::names("a test NIC"),
        }
    }

    #[test]
    fn units_spread_several_nics() {
        let t = topo(8);
        let opts = PlanOptions { cpus: Some((0..8).collect()), ..PlanOptions::default() };
        let p = plan(&t, &[nic("eth0", 2, None, 128), nic("eth1", 2, None, 128)], &opts).unwrap();
        assert_eq!((p.devices[0].unit, p.devices[1].unit), (0, 1));
        let cpus = |d: &DevicePlan| d.rx.iter().map(|q| q.cpu.unwrap()).collect::<Vec<_>>();
        assert_eq!(cpus(&p.devices[0]), vec![0, 1]);
        assert_eq!(cpus(&p.devices[1]), vec![2, 3], "unit 1 starts on the next CPU set");
        for (u, d) in p.devices.iter().enumerate() {
            let rp = RingmapPlan::new(PlanSpec {
                ncpus: 8,
                rings: 2,
                unit: u,
                pow2: false,
                tx_rings: None,
                table_len: 128,
            })
            .unwrap();
            assert_eq!(d.table.as_ref().unwrap().iter().map(|&x| x as usize).collect::<Vec<_>>(), rp.table);
            assert_eq!(d.irqs.iter().map(|x| x.cpus[0]).collect::<Vec<_>>(), rp.rx.cpus());
        }
        // --unit shifts the first NIC.
        let p = plan(&t, &[nic("eth0", 2, None, 128)], &PlanOptions { unit: 2, ..opts }).unwrap();
        assert_eq!(cpus(&p.devices[0]), vec![4, 5]);
    }

    #[test]
    fn numa_local_cpus_by_default() {
        let t = topo(8);
        let p = plan_device(&t, &nic("eth0", 4, Some(1), 128), &PlanOptions::default(), 0).unwrap();
        assert_eq!(p.cpus, vec![4, 5, 6, 7]);
        assert_eq!(p.irqs.iter().map(|x| x.cpus[0]).collect::<Vec<_>>(), vec![4, 5, 6, 7]);
        assert_eq!(p.table_mismatches, Some(0));
        // Fewer local CPUs than queues: topped up with the lowest others.
        let p = plan_device(&t, &nic("eth0", 6, Some(1), 128), &PlanOptions::default(), 0).unwrap();
        assert_eq!(p.cpus, vec![0, 1, 4, 5, 6, 7]);
        // No node: every CPU.
        let p = plan_device(&t, &nic("eth0", 2, None, 128), &PlanOptions::default(), 0).unwrap();
        assert_eq!(p.cpus, (0..8).collect::<Vec<_>>());
    }

    #[test]
    fn keys_and_sizes() {
        let t = topo(4);
        let mut d = nic("eth0", 4, None, 512);
        let sym = KeyChoice::Set { bytes: vec![0x6d, 0x5a], source: "symmetric".into(), fit: true };
        let p = plan_device(&t, &d, &PlanOptions { key: sym, ..PlanOptions::default() }, 0).unwrap();
        assert_eq!(p.key.as_deref(), Some("6d5a".repeat(20).as_str()));
        assert_eq!(p.table.as_ref().unwrap().len(), 512);
        assert_eq!(p.table.as_ref().unwrap()[128..256], p.table.as_ref().unwrap()[..128]);
        let given = KeyChoice::Set { bytes: vec![1; 52], source: "given".into(), fit: false };
        let e = plan_device(&t, &d, &PlanOptions { key: given, ..PlanOptions::default() }, 0).unwrap_err();
        assert_eq!(e, PlanError::KeyLength { device: "eth0".into(), given: 52, device_len: 40 });
        // A table size that is not a multiple of 128: rings spread evenly, with a note.
        if let Reported::Supported(r) = &mut d.rss {
            r.indir.truncate(64);
        }
        let p = plan_device(&t, &d, &PlanOptions::default(), 0).unwrap();
        assert_eq!(p.table.as_ref().unwrap().len(), 64);
        assert!(p.notes.iter().any(|n| n.contains("not a multiple of 128")), "{:?}", p.notes);
        // RFS sizes rounded up as the kernel does.
        let opts = PlanOptions {
            rps_flow_cnt: Some(1000),
            rps_sock_flow_entries: Some(5000),
            ..PlanOptions::default()
        };
        let p = plan(&t, &[nic("eth0", 2, None, 128)], &opts).unwrap();
        assert_eq!(p.rps_sock_flow_entries, Some(8192));
        assert!(p.devices[0].rx.iter().all(|q| q.rps_flow_cnt == Some(1024)));
        assert_eq!(pow2_up(0), 1);
        assert_eq!(pow2_up(4096), 4096);
    }

    #[test]
    fn software_rss_xdp_replaces_rps() {
        let t = topo(4);
        let mut d = nic("veth0", 1, None, 128);
        d.rss = Reported::Unsupported { reason: "no".into() };
        d.irqs.clear();
        d.facts.has_device = false;
        let opts = PlanOptions { software_rss: SoftwareRss::Xdp, ..PlanOptions::default() };
        let p = plan_device(&t, &d, &opts, 0).unwrap();
        assert!(p.rx.iter().all(|q| q.rps_cpus.is_empty()), "no RPS under XDP steering");
        let x = p.xdp_steer.as_ref().expect("an XDP steering plan");
        assert_eq!(x.cpus, vec![0, 1, 2, 3]);
        assert_eq!(x.command, "rsskit xdp-steer --iface veth0 --cpus 0-3");
        assert_eq!(p.steering.mode, "cpu");
        // Over hardware RSS: nothing to do in software.
        let p = plan_device(&t, &nic("eth0", 4, None, 128), &opts, 0).unwrap();
        assert!(p.xdp_steer.is_none());
        // The default stays RPS.
        let p = plan_device(&t, &d, &PlanOptions::default(), 0).unwrap();
        assert!(p.xdp_steer.is_none() && !p.rx[0].rps_cpus.is_empty());
    }

    #[test]
    fn without_hardware_rss_rps_spreads() {
        let t = topo(4);
        let mut d = nic("veth0", 1, None, 128);
        d.rss = Reported::Unsupported { reason: "no".into() };
        d.irqs.clear();
        d.facts.has_device = false;
        let p = plan_device(&t, &d, &PlanOptions::default(), 0).unwrap();
        assert!(!p.hardware_rss);
        assert_eq!(p.rx[0].rps_cpus, vec![0, 1, 2, 3]);
        assert_eq!(p.rx[0].cpu, None, "no IRQ, no RSS: RPS picks the CPU");
        assert_eq!(p.tx[0].xps_cpus, None, "no XPS on a single TX queue");
        assert_eq!(p.steering.mode, "cpu");
        assert!(p.table.is_none());
        // Hardware RSS but no per-queue IRQs: toeplitz with the NIC's key.
        let mut d = nic("eth0", 4, None, 128);
        d.irqs.clear();
        let p = plan_device(&t, &d, &PlanOptions::default(), 0).unwrap();
        assert_eq!(p.steering.mode, "toeplitz");
        assert_eq!(p.steering.key.as_deref(), Some(hex(&MICROSOFT_KEY).as_str()));
        assert!(p.rx.iter().all(|q| q.rps_cpus.is_empty()), "no RPS over hardware RSS");
    }

    #[test]
    fn app_cpus_split_irqs_from_the_servers() {
        let t = topo(8);
        let opts = PlanOptions { app_cpus: Some(vec![2, 3, 6, 7]), ..PlanOptions::default() };
        let p = plan(&t, &[nic("eth0", 4, None, 128)], &opts).unwrap();
        let d = &p.devices[0];
        assert_eq!(d.cpus, vec![0, 1, 4, 5]);
        assert!(d.irqs.iter().all(|x| !x.cpus.iter().any(|c| [2, 3, 6, 7].contains(c))));
        assert_eq!((d.steering.mode.as_str(), d.steering.cpus.clone()), ("toeplitz", vec![2, 3, 6, 7]));
        assert!(d.notes.iter().any(|n| n.starts_with("rule app-cpus:")), "{:?}", d.notes);
        let both = PlanOptions { cpus: Some(vec![0, 1, 2]), ..opts.clone() };
        let e = plan(&t, &[nic("eth0", 4, None, 128)], &both).unwrap_err();
        assert_eq!(e, PlanError::AppOverlap { cpus: "2".into() });
        let all = PlanOptions { app_cpus: Some((0..8).collect()), ..PlanOptions::default() };
        assert_eq!(plan(&t, &[nic("eth0", 4, None, 128)], &all).unwrap_err(), PlanError::NoCpus);
    }

    #[test]
    fn bad_cpus() {
        let t = topo(4);
        let e = plan(
            &t,
            &[nic("eth0", 2, None, 128)],
            &PlanOptions { cpus: Some(vec![9]), ..PlanOptions::default() },
        );
        assert_eq!(e.unwrap_err(), PlanError::OfflineCpu { cpu: 9, online: "0-3".into() });
        let e = plan(
            &t,
            &[nic("eth0", 2, None, 128)],
            &PlanOptions { cpus: Some(vec![]), ..PlanOptions::default() },
        );
        assert_eq!(e.unwrap_err(), PlanError::NoCpus);
    }

    // napi:
    fn threaded_nic(map: bool, threads: &[u32]) -> DeviceState {
        use crate::napi::{NapiLink, NapiMap, NapiState, NapiThread};
        let mut d = nic("eth1", 4, None, 128);
        d.napi = NapiState {
            threaded: Some(1),
            threads: threads
                .iter()
                .map(|&id| NapiThread {
                    pid: 500 + id,
                    name: format!("napi/eth1-{id}"),
                    napi_id: Some(id),
                    cpus: Some((0..8).collect()),
                })
                .collect(),
            // rx-q is polled by NAPI 8196 - q: not in queue order, as the
            // kernel numbers them.
            map: map.then(|| NapiMap {
                rx: (0..4).map(|q| (q, NapiLink { napi_id: 8196 - q as u32, pid: None })).collect(),
                // TX completions on NAPI instances of their own (as igb's).
                tx: (0..4).map(|q| (q, NapiLink { napi_id: 8197 + q as u32, pid: None })).collect(),
            }),
        };
        d
    }

    #[test]
    fn threaded_napi_with_the_map_pins_each_thread_to_its_queue_irq_cpu() {
        let t = topo(8);
        let opts = PlanOptions { cpus: Some(vec![1, 3, 5, 7]), ..PlanOptions::default() };
        let d = plan_device(&t, &threaded_nic(true, &[8193, 8194, 8195, 8196]), &opts, 0).unwrap();
        assert_eq!(d.napi_threaded, None, "threading kept as the host has it");
        assert_eq!(d.napi_threads.len(), 4, "TX threads not found are left alone");
        for p in &d.napi_threads {
            let q = &d.rx[p.queue];
            assert_eq!(p.napi_id, 8196 - p.queue as u32, "the map's thread for rx-{}", p.queue);
            let irq = d.irqs.iter().find(|x| Some(x.irq) == q.irq).unwrap();
            assert_eq!(p.cpus, irq.cpus, "rx-{}: its IRQ's CPUs", p.queue);
            assert_eq!(p.cpus, vec![q.cpu.unwrap()]);
        }
        let cpus: BTreeSet<usize> = d.napi_threads.iter().flat_map(|p| p.cpus.clone()).collect();
        assert_eq!(cpus, [1, 3, 5, 7].into_iter().collect(), "one thread per queue CPU");
        // With the TX queues' own threads: each goes with its TX queue's IRQ.
        let all = (8193..=8200).collect::<Vec<u32>>();
        let d8 = plan_device(&t, &threaded_nic(true, &all), &opts, 0).unwrap();
        assert_eq!(d8.napi_threads.len(), 8);
        for p in d8.napi_threads.iter().filter(|p| p.tx) {
            assert_eq!(p.napi_id, 8197 + p.queue as u32);
            let irq = d8.irqs.iter().find(|x| Some(x.irq) == d8.tx[p.queue].irq).unwrap();
            assert_eq!(p.cpus, irq.cpus, "tx-{}: its IRQ's CPUs", p.queue);
        }
        assert!(d.notes.iter().any(|n| n.contains("kept on, each of its 4 napi/eth1-ID thread(s) pinned")));
        // The plan file carries them and is read back.
        let plan = Plan {
            version: PLAN_VERSION,
            online_cpus: t.online.clone(),
            rps_sock_flow_entries: None,
            devices: vec![d.clone()],
        };
        let back = Plan::from_json(&serde_json::to_string(&plan).unwrap()).unwrap();
        assert_eq!(back.devices[0].napi_threads, d.napi_threads);
        let mut bad = plan.clone();
        bad.devices[0].napi_threads[0].cpus = vec![];
        assert!(Plan::from_json(&serde_json::to_string(&bad).unwrap())
            .unwrap_err()
            .to_string()
            .contains("gets no CPU"));
    }

    // symplan
    #[test]
    fn symmetric_picks_the_transform_or_the_key_and_plan_files_check_it() {
        use crate::symmetric::SymmetricChoice;
        let t = topo(8);
        let mut d = nic("eth0", 4, None, 128);
        d.driver = Some("ice".into());
        let opts = PlanOptions { symmetric: Some(SymmetricChoice::Auto), ..PlanOptions::default() };
        let p = plan_device(&t, &d, &opts, 0).unwrap();
        assert_eq!((p.input_xfrm.as_deref(), p.key.as_deref()), (Some("sym-xor"), None));
        d.driver = Some("igb".into());
        let p = plan_device(&t, &d, &opts, 0).unwrap();
        assert_eq!((p.input_xfrm, p.key_source.as_str()), (None, "symmetric"));
        // The transform over a key repeating every 4 bytes: refused.
        let xfrm = PlanOptions {
            symmetric: Some(SymmetricChoice::Xfrm),
            key: KeyChoice::Set { bytes: vec![1, 2, 3, 4], source: "given".into(), fit: true },
            ..PlanOptions::default()
        };
        let e = plan_device(&t, &d, &xfrm, 0).unwrap_err();
        assert!(matches!(&e, PlanError::KeyUnderXfrm { xfrm, .. } if xfrm == "sym-xor"), "{e}");
        let mut p =
            plan_device(&t, &d, &PlanOptions { symmetric: Some(SymmetricChoice::Xfrm), ..opts }, 0).unwrap();
        p.input_xfrm = Some("sym-and".into());
        let plan = Plan {
            version: PLAN_VERSION,
            online_cpus: t.online.clone(),
            rps_sock_flow_entries: None,
            devices: vec![p],
        };
        let e = Plan::from_json(&serde_json::to_string(&plan).unwrap()).unwrap_err().to_string();
        assert!(e.contains("eth0: input_xfrm is not an input transform"), "{e}");
    }

    #[test]
    fn threaded_napi_without_the_map_or_a_thread_is_turned_off() {
        let t = topo(8);
        let opts = PlanOptions { cpus: Some(vec![1, 3, 5, 7]), ..PlanOptions::default() };
        for (map, threads, why) in [
            (false, &[8193, 8194, 8195, 8196][..], "no netdev netlink map"),
            (true, &[8193, 8194, 8196][..], "no napi/eth1-ID thread is found for rx-1"),
        ] {
            let d = plan_device(&t, &threaded_nic(map, threads), &opts, 0).unwrap();
            assert_eq!(d.napi_threaded, Some(0), "{why}");
            assert!(d.napi_threads.is_empty());
            assert!(
                d.notes.iter().any(|n| n.contains(why) && n.contains("threading is turned off")),
                "{:?}",
                d.notes
            );
        }
        // Not threaded: neither.
        let d = plan_device(&t, &nic("eth1", 4, None, 128), &opts, 0).unwrap();
        assert_eq!((d.napi_threaded, d.napi_threads.len()), (None, 0));
    }

    #[test]
    fn napi_settings_are_checked_naming_their_field() {
        let t = topo(4);
        let ok = PlanOptions {
            napi_defer_hard_irqs: Some(100),
            gro_flush_timeout: Some(200_000),
            ..PlanOptions::default()
        };
        let p = plan(&t, &[nic("eth0", 2, None, 128)], &ok).unwrap();
        assert_eq!(
            (p.devices[0].napi_defer_hard_irqs, p.devices[0].gro_flush_timeout),
            (Some(100), Some(200_000))
        );
        let big = PlanOptions { napi_defer_hard_irqs: Some(1 << 31), ..PlanOptions::default() };
        let e = plan(&t, &[nic("eth0", 2, None, 128)], &big).unwrap_err();
        assert_eq!(
            e,
            PlanError::NapiValue { field: "napi_defer_hard_irqs", value: 1 << 31, max: MAX_DEFER_HARD_IRQS }
        );
        assert_eq!(e.to_string(), "napi_defer_hard_irqs 2147483648 is out of range (at most 2147483647)");
        let long = PlanOptions { gro_flush_timeout: Some(u64::MAX), ..PlanOptions::default() };
        assert!(matches!(
            plan(&t, &[nic("eth0", 2, None, 128)], &long),
            Err(PlanError::NapiValue { field: "gro_flush_timeout", .. })
        ));
    }
}
