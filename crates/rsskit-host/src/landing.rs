//! Where a flow lands on this host, as the NIC steers it: the device's RSS
//! key and indirection table (read as `info` reads them), its input
//! transform (symmetric-xor, symmetric-or-xor), the fields it hashes per
//! flow type, and for each RX queue the CPU its IRQ runs on and the queue's
//! RPS CPUs. Used by `rsskit hash --iface IF` and by
//! `--key nic:IF` / `--table nic:IF`.

use crate::nic_rules::{NicRules, Route};
use crate::sysroot::{Sysroot, SysrootError};
use rsskit_core::flowrule::FlowRule;
use rsskit_core::FlowTuple;
use rsskit_core::{HashInput, InputXfrm, RssKey, Toeplitz};
use rsskit_linux::ethtool::FlowHash;
use rsskit_linux::netdev;
use serde::Serialize;

/// Errors reading the device's steering.
#[derive(Debug, thiserror::Error)]
pub enum NicError {
    /// The interface or its sysfs/ethtool facts could not be read.
    #[error(transparent)]
    Sysroot(#[from] SysrootError),
    /// The driver does not report its key or table, so flows cannot be placed.
    #[error("{iface}: the driver{driver} reports no RSS {what} ({reason})")]
    NoRss {
        /// The interface.
        iface: String,
        /// ` NAME` (with its leading space) when sysfs names the driver, else empty.
        driver: String,
        /// What is missing: `key or table`, or `indirection table`.
        what: &'static str,
        /// The driver's answer (the errno).
        reason: String,
    },
    /// The driver transforms the hash input in a way rsskit does not model:
    /// any prediction would be wrong.
    #[error(
        "{iface}: the driver{driver} reports RSS input transform 0x{bits:02x} ({names}), which rsskit \
         does not model (it knows symmetric-xor 0x01 and symmetric-or-xor 0x02): it cannot predict \
         where flows land"
    )]
    UnknownXfrm {
        /// The interface.
        iface: String,
        /// ` NAME` (with its leading space) when sysfs names the driver, else empty.
        driver: String,
        /// The `input_xfrm` bits the driver reports.
        bits: u8,
        /// Their names as `info` prints them.
        names: String,
    },
}

/// One RX queue's CPUs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct QueueCpus {
    /// The RX queue number.
    pub queue: usize,
    /// The queue's IRQ, if one was found by name.
    pub irq: Option<u32>,
    /// Where the queue's IRQ runs: `effective_affinity_list`, else `smp_affinity_list`.
    pub irq_cpus: Vec<usize>,
    /// `rps_cpus` (empty: RPS off).
    pub rps_cpus: Vec<usize>,
    /// napi: threaded NAPI with the kernel's map: the CPUs the queue's
    /// `napi/IF-ID` thread may run on (it polls the queue there, not on
    /// the IRQ's CPU); `None` otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub napi_thread_cpus: Option<Vec<usize>>,
}

impl QueueCpus {
    /// napi: the CPU the queue is polled on: its thread's when threaded
    /// (known only when the thread may run on one CPU), else its IRQ's.
    fn poll_cpu(&self) -> Option<usize> {
        match &self.napi_thread_cpus {
            Some(c) if c.len() == 1 => Some(c[0]),
            Some(_) => None,
            None => self.irq_cpus.first().copied(),
        }
    }
}

/// The NIC's steering state.
#[derive(Debug, Clone, Serialize)]
pub struct NicSteering {
    /// The interface.
    pub iface: String,
    /// Its driver, if sysfs names one.
    pub driver: Option<String>,
    /// The RSS key the driver reports.
    pub key: Vec<u8>,
    /// The indirection table: hash bucket -> RX queue.
    pub table: Vec<u32>,
    /// Hash function(s) the driver reports in use (`toeplitz`, `xor`...).
    pub hfunc: Vec<String>,
    /// What the NIC does to the fields before hashing (`input_xfrm`),
    /// serialized by its ethtool name.
    #[serde(serialize_with = "xfrm_name")]
    pub xfrm: InputXfrm,
    /// Hashed fields per flow type; `None` when the driver does not report them.
    pub hash_fields: Option<Vec<FlowHash>>,
    /// Per RX queue, where its packets are processed.
    pub queues: Vec<QueueCpus>,
    /// Threaded NAPI is on: a kernel thread, not the IRQ's softirq, polls
    /// each queue, on whatever CPU it runs ([`crate::napi`]).
    pub napi_threaded: bool,
    /// The NIC's flow rules and the contexts they reach: looked at before the table.
    pub rules: NicRules,
}

/// Where one flow lands: the rule that took it, if any, and the queue and CPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FlowLanding {
    /// No rule: the main key and table.
    Table {
        /// The NIC's hash.
        hash: u32,
        /// Where it lands.
        landing: Landing,
    },
    /// A rule sent it to one queue (no hash involved).
    RuleQueue {
        /// The rule.
        rule: FlowRule,
        /// Where it lands (`index` is not used).
        landing: Landing,
    },
    /// A rule sent it into an RSS context: that context's key, transform and table, plus the rule's offset.
    RuleContext {
        /// The rule.
        rule: FlowRule,
        /// The context id (0: the main table, with an offset).
        context: u32,
        /// The hash under the context's key.
        hash: u32,
        /// Where it lands: `index` is the context table's entry, `queue` includes the offset.
        landing: Landing,
    },
    /// A rule keeps it from this device's queues (drop, wake-on-LAN, a VF).
    RuleNoQueue {
        /// The rule.
        rule: FlowRule,
    },
    /// rsskit cannot know.
    Unknown {
        /// Why.
        reason: String,
    },
}

/// An input transform serialized by its ethtool name.
pub(crate) fn xfrm_name<S: serde::Serializer>(x: &InputXfrm, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(x.name())
}

/// Where one hash lands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Landing {
    /// Indirection table index: hash modulo the table size (the low bits
    /// for the power-of-two tables NICs use).
    pub index: usize,
    /// The RX queue the table entry names.
    pub queue: u32,
    /// That queue's IRQ, if known.
    pub irq: Option<u32>,
    /// The CPU the queue's IRQ (and so its NAPI poll) runs on, if known.
    pub irq_cpu: Option<usize>,
    /// With RPS on the queue: the CPU RPS hands the packet to
    /// (`rps_cpus[(hash * len) >> 32]`, the kernel's `reciprocal_scale`;
    /// without RFS overriding it).
    pub rps_cpu: Option<usize>,
    /// The CPU the stack processes the packet on: the RPS CPU, else the IRQ's.
    pub cpu: Option<usize>,
}

impl NicSteering {
    /// Reads `iface`'s key, table, hash fields and queue CPUs. An error
    /// when the driver reports no table or key (veth, lo, virtio without RSS).
    pub fn read(root: &Sysroot, iface: &str) -> Result<NicSteering, NicError> {
        let d = root.device(iface)?;
        let no = |what, reason: &str| NicError::NoRss {
            iface: iface.to_string(),
            driver: d.driver.as_ref().map_or(String::new(), |n| format!(" {n}")),
            what,
            reason: reason.to_string(),
        };
        let rss = match d.rss.ok() {
            Some(r) => r.clone(),
            None => return Err(no("key or table", d.rss.reason().unwrap_or("not reported"))),
        };
        if rss.indir.is_empty() {
            return Err(no("indirection table", "empty table"));
        }
        if rss.key.is_empty() {
            return Err(no("key", "empty key"));
        }
        let unknown = |bits: u8| NicError::UnknownXfrm {
            iface: iface.to_string(),
            driver: d.driver.as_ref().map_or(String::new(), |n| format!(" {n}")),
            bits,
            names: rss.input_xfrm.join(","),
        };
        // A name `xfrm_names` never gives reads as all bits: refused too.
        let bits = rsskit_linux::ethtool::xfrm_bits(&rss.input_xfrm).unwrap_or(0xff);
        let xfrm = InputXfrm::from_bits(bits).map_err(|e| unknown(e.0))?;
        let queues =
            d.rx.iter()
                .map(|q| {
                    let irq = netdev::rx_irq(&d.irqs, q.queue);
                    let irq_cpus = irq
                        .and_then(|i| {
                            i.effective_cpus.clone().filter(|c| !c.is_empty()).or_else(|| i.cpus.clone())
                        })
                        .unwrap_or_default();
                    QueueCpus {
                        queue: q.queue,
                        irq: irq.map(|i| i.irq),
                        irq_cpus,
                        rps_cpus: q.rps_cpus.clone().unwrap_or_default(),
                        napi_thread_cpus: d
                            .napi
                            .is_threaded()
                            .then(|| d.napi.thread_of(q.queue).and_then(|t| t.cpus.clone()))
                            .flatten(),
                    }
                })
                .collect();
        Ok(NicSteering {
            iface: iface.to_string(),
            driver: d.driver.clone(),
            key: rss.key,
            table: rss.indir,
            hfunc: rss.hfunc,
            xfrm,
            hash_fields: d.hash.ok().cloned(),
            queues,
            napi_threaded: d.napi.is_threaded(),
            rules: NicRules::read(root, iface)?,
        })
    }

    /// The hashed fields of a flow type (`tcp4`, `udp6`...): `4-tuple`,
    /// `2-tuple`, ..., or `None` when not reported.
    pub fn tuple(&self, flow: &str) -> Option<&'static str> {
        self.hash_fields.as_ref()?.iter().find(|f| f.flow == flow).map(|f| f.tuple())
    }

    /// Table entry -> the CPU its queue's IRQ runs on (`--table nic:IF`).
    /// An error when a queue's CPU is unknown, or RPS is on for a queue (the
    /// CPU then depends on more of the hash than the table entry).
    pub fn bucket_cpus(&self) -> Result<Vec<usize>, String> {
        self.table
            .iter()
            .map(|&q| {
                let Some(qc) = self.queues.iter().find(|x| x.queue == q as usize) else {
                    return Err(format!("{}: the table names queue {q}, which has no rx-{q}", self.iface));
                };
                if !qc.rps_cpus.is_empty() {
                    return Err(format!(
                        "{}: RPS is on for rx-{q}: its CPU depends on more of the hash than the table entry \
                         (turn RPS off for the queue)",
                        self.iface
                    ));
                }
                qc.poll_cpu().ok_or_else(|| match qc.napi_thread_cpus {
                    Some(_) => format!(
                        "{}: rx-{q} is polled by a NAPI thread allowed on several CPUs (rsskit plan/apply pin it)",
                        self.iface
                    ),
                    None => format!("{}: the CPU of rx-{q} is unknown (no IRQ named for it)", self.iface),
                })
            })
            .collect()
    }

    /// The hash the NIC computes for `input`: its transform, then Toeplitz
    /// with its key (an error when the key is shorter than Toeplitz needs).
    pub fn hash(&self, input: &HashInput) -> Result<u32, rsskit_core::key::KeyError> {
        let key = RssKey::from_bytes(&self.key)?;
        Ok(Toeplitz::new(&key).hash(self.xfrm.apply(input).as_bytes()))
    }

    /// Where `flow` lands: the NIC's rules first, then the main table or
    /// the context a rule names. `input` is the flow's hash input (the
    /// fields the NIC hashes for its type; a context is assumed to hash the
    /// same fields as the main table).
    pub fn land_flow(
        &self,
        flow: &FlowTuple,
        input: &HashInput,
    ) -> Result<FlowLanding, rsskit_core::key::KeyError> {
        Ok(match self.rules.route(flow) {
            Route::Main => {
                let hash = self.hash(input)?;
                FlowLanding::Table { hash, landing: self.land(hash) }
            }
            Route::Queue { rule, queue } => {
                FlowLanding::RuleQueue { rule: *rule, landing: self.land_queue(0, queue, None) }
            }
            Route::Context { rule, context, offset } => {
                let (id, key, table, xfrm) = match context {
                    Some(c) => (c.id, c.key.as_slice(), c.table.as_slice(), c.xfrm),
                    None => (0, self.key.as_slice(), self.table.as_slice(), self.xfrm),
                };
                let key = RssKey::from_bytes(key)?;
                let hash = Toeplitz::new(&key).hash(xfrm.apply(input).as_bytes());
                let index = hash as usize % table.len();
                let queue = table[index].wrapping_add(offset);
                FlowLanding::RuleContext {
                    rule: *rule,
                    context: id,
                    hash,
                    landing: self.land_queue(index, queue, Some(hash)),
                }
            }
            Route::NoQueue { rule } => FlowLanding::RuleNoQueue { rule: *rule },
            Route::Unknown { reason } => FlowLanding::Unknown { reason },
        })
    }

    /// Where `hash` lands.
    pub fn land(&self, hash: u32) -> Landing {
        let index = hash as usize % self.table.len();
        self.land_queue(index, self.table[index], Some(hash))
    }

    /// Queue `queue` reached through table entry `index`; RPS needs the hash.
    fn land_queue(&self, index: usize, queue: u32, hash: Option<u32>) -> Landing {
        let q = self.queues.iter().find(|q| q.queue == queue as usize);
        let irq_cpu = q.and_then(|q| q.irq_cpus.first().copied());
        // A queue a rule picks has no hash rsskit can vouch for (the NIC may
        // or may not compute one): RPS's CPU is then unknown, not guessed.
        let rps_cpu = q.filter(|q| !q.rps_cpus.is_empty()).and_then(|q| {
            let i = ((u64::from(hash?) * q.rps_cpus.len() as u64) >> 32) as usize;
            Some(q.rps_cpus[i])
        });
        let rps_on = q.is_some_and(|q| !q.rps_cpus.is_empty());
        // With RPS on, the CPU is RPS's pick: unknown without the hash;
        // else where the queue is polled (its NAPI thread's, threaded).
        let cpu = if rps_on { rps_cpu } else { q.and_then(QueueCpus::poll_cpu) };
        Landing { index, queue, irq: q.and_then(|q| q.irq), irq_cpu, rps_cpu, cpu }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nic(rps: Vec<usize>) -> NicSteering {
        NicSteering {
            iface: "eth0".into(),
            driver: None,
            key: vec![0; 40],
            table: (0..8).map(|i| i % 2).collect(),
            hfunc: vec![],
            xfrm: InputXfrm::None,
            hash_fields: None,
            napi_threaded: false,
            rules: NicRules::default(),
            queues: vec![
                QueueCpus {
                    queue: 0,
                    irq: Some(40),
                    irq_cpus: vec![2],
                    rps_cpus: vec![],
                    napi_thread_cpus: None,
                },
                QueueCpus {
                    queue: 1,
                    irq: Some(41),
                    irq_cpus: vec![5, 6],
                    rps_cpus: rps,
                    napi_thread_cpus: None,
                },
            ],
        }
    }

    #[test]
    fn hash_to_queue_to_cpu() {
        let n = nic(vec![]);
        let l = n.land(0x10);
        assert_eq!((l.index, l.queue, l.irq, l.cpu), (0, 0, Some(40), Some(2)));
        let l = n.land(0xffff_fff7);
        assert_eq!((l.index, l.queue, l.irq_cpu, l.rps_cpu, l.cpu), (7, 1, Some(5), None, Some(5)));
        // RPS on queue 1 over CPUs 0,1,3,4: the top bits of the hash pick one.
        let n = nic(vec![0, 1, 3, 4]);
        assert_eq!(n.land(0xffff_fff7).rps_cpu, Some(4));
        assert_eq!(n.land(0x4000_0001).cpu, Some(1));
        assert_eq!(n.land(0x10).rps_cpu, None, "queue 0 has no RPS");
        assert!(n.bucket_cpus().unwrap_err().contains("RPS is on for rx-1"));
        assert_eq!(nic(vec![]).bucket_cpus().unwrap(), vec![2, 5, 2, 5, 2, 5, 2, 5]);
    }

    /// napi: threaded, a queue is processed where its thread runs: pinned,
    /// that CPU (not the IRQ's); allowed on several, unknown.
    #[test]
    fn a_threaded_queue_lands_on_its_thread_cpu() {
        let mut n = nic(vec![]);
        n.queues[1].napi_thread_cpus = Some(vec![7]);
        let l = n.land(0xffff_fff7);
        assert_eq!((l.queue, l.irq_cpu, l.cpu), (1, Some(5), Some(7)));
        assert_eq!(n.bucket_cpus().unwrap(), vec![2, 7, 2, 7, 2, 7, 2, 7]);
        n.queues[1].napi_thread_cpus = Some(vec![0, 1, 2, 3]);
        assert_eq!(n.land(0xffff_fff7).cpu, None);
        assert!(n.bucket_cpus().unwrap_err().contains("allowed on several CPUs"));
    }
}
