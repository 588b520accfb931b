//! The kernel's own queue -> NAPI -> IRQ map, from the `netdev` generic
//! netlink family (`queue-get` and `napi-get` since Linux 6.8): each queue
//! (RX or TX) names its NAPI instance, each NAPI instance its IRQ and, when
//! NAPI is threaded, its kthread's PID. Older kernels give
//! [`NetdevNlError::NotAvailable`]: callers then fall back to guessing
//! from IRQ names (`netdev::iface_irqs`) and say so.
//!
//! Hand-written over libc/socket2 like `rtnl` (the generic netlink plumbing
//! is shared with the ethtool family in [`crate::genl`]): two dump requests
//! and one controller lookup with flat u32 attributes. The netlink crates
//! (`netlink-packet-generic` with its `netlink-sys`, `neli`) would bring a
//! message model and (for the former) a tokio-oriented stack for that; the
//! parsing here is pure ([`parse_messages`], [`decode_queues`],
//! [`decode_napis`], [`decode_family`]), bounds-checked on every length,
//! and fuzzed (`fuzz/fuzz_targets/netdev_nl.rs`): the kernel's bytes are
//! treated as untrusted like any other input.

use crate::genl::{attr_u32, Genl, GenlError, NLM_F_DUMP};
pub use crate::genl::{decode_family, parse_attrs, parse_messages, Message, ParseError};
use std::io;

// include/uapi/linux/netdev.h
const NETDEV_CMD_QUEUE_GET: u8 = 10;
const NETDEV_CMD_NAPI_GET: u8 = 11;
const NETDEV_A_QUEUE_ID: u16 = 1;
const NETDEV_A_QUEUE_IFINDEX: u16 = 2;
const NETDEV_A_QUEUE_TYPE: u16 = 3;
const NETDEV_A_QUEUE_NAPI_ID: u16 = 4;
const NETDEV_A_NAPI_IFINDEX: u16 = 1;
const NETDEV_A_NAPI_ID: u16 = 2;
const NETDEV_A_NAPI_IRQ: u16 = 3;
const NETDEV_A_NAPI_PID: u16 = 4;

/// A queue's direction (`NETDEV_QUEUE_TYPE_RX`/`_TX`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum QueueType {
    /// A receive queue.
    Rx,
    /// A transmit queue.
    Tx,
}

/// One queue as `queue-get` reports it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Queue {
    /// Queue index (rx-N / tx-N).
    pub id: u32,
    /// RX or TX.
    pub kind: QueueType,
    /// The interface.
    pub ifindex: u32,
    /// Its NAPI instance; `None` when the driver did not link one.
    pub napi_id: Option<u32>,
}

/// One NAPI instance as `napi-get` reports it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Napi {
    /// NAPI id (also what `SO_INCOMING_NAPI_ID` returns).
    pub id: u32,
    /// The interface.
    pub ifindex: u32,
    /// Its IRQ; `None` when the driver did not link one.
    pub irq: Option<u32>,
    /// The NAPI kthread's PID, when NAPI is threaded.
    pub pid: Option<u32>,
}

/// The kernel's map for one interface.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct QueueMap {
    /// Its queues, sorted by (type, id).
    pub queues: Vec<Queue>,
    /// Its NAPI instances, sorted by id.
    pub napis: Vec<Napi>,
}

impl QueueMap {
    /// Queue `id` of type `kind`.
    pub fn queue(&self, kind: QueueType, id: u32) -> Option<&Queue> {
        self.queues.iter().find(|q| q.kind == kind && q.id == id)
    }

    /// NAPI instance `id`.
    pub fn napi(&self, id: u32) -> Option<&Napi> {
        self.napis.iter().find(|n| n.id == id)
    }

    /// The NAPI instance of queue `id` of type `kind`, if it has one.
    pub fn napi_of(&self, kind: QueueType, id: u32) -> Option<&Napi> {
        self.queue(kind, id).and_then(|q| q.napi_id).and_then(|n| self.napi(n))
    }
}

/// Why the kernel's map could not be read.
#[derive(Debug, thiserror::Error)]
pub enum NetdevNlError {
    /// The kernel has no such map: no `netdev` family (before 6.2) or no
    /// `queue-get`/`napi-get` in it (before 6.8).
    #[error("the kernel's queue -> NAPI -> IRQ map is not available: {reason}")]
    NotAvailable {
        /// What is missing.
        reason: String,
    },
    /// The interface name is unknown to the kernel.
    #[error("interface '{0}' does not exist")]
    NoSuchInterface(String),
    /// A netlink socket call failed.
    #[error("netlink ({what})")]
    Io {
        /// The step that failed.
        what: &'static str,
        /// The system's error.
        #[source]
        source: io::Error,
    },
    /// The kernel answered a request with an error.
    #[error("the kernel refused {what}")]
    Kernel {
        /// The request.
        what: &'static str,
        /// The errno it answered.
        #[source]
        source: io::Error,
    },
    /// The reply did not parse.
    #[error("{what}")]
    Parse {
        /// The request.
        what: &'static str,
        /// What was wrong with it.
        #[source]
        source: ParseError,
    },
}

fn need(v: Option<u32>, what: &str) -> Result<u32, ParseError> {
    v.ok_or_else(|| ParseError(format!("{what} missing")))
}

/// The queues of a `queue-get` dump (messages of other commands skipped).
pub fn decode_queues(msgs: &[Message]) -> Result<Vec<Queue>, ParseError> {
    let mut out = Vec::new();
    for m in msgs {
        let Message::Genl { cmd: NETDEV_CMD_QUEUE_GET, attrs, .. } = m else { continue };
        let kind = match need(attr_u32(attrs, NETDEV_A_QUEUE_TYPE, "queue type")?, "queue type")? {
            0 => QueueType::Rx,
            1 => QueueType::Tx,
            // Newer kinds of queue are not RX/TX queues rsskit maps.
            _ => continue,
        };
        out.push(Queue {
            id: need(attr_u32(attrs, NETDEV_A_QUEUE_ID, "queue id")?, "queue id")?,
            kind,
            ifindex: need(attr_u32(attrs, NETDEV_A_QUEUE_IFINDEX, "queue ifindex")?, "queue ifindex")?,
            napi_id: attr_u32(attrs, NETDEV_A_QUEUE_NAPI_ID, "queue napi-id")?,
        });
    }
    Ok(out)
}

/// The NAPI instances of a `napi-get` dump.
pub fn decode_napis(msgs: &[Message]) -> Result<Vec<Napi>, ParseError> {
    let mut out = Vec::new();
    for m in msgs {
        let Message::Genl { cmd: NETDEV_CMD_NAPI_GET, attrs, .. } = m else { continue };
        out.push(Napi {
            id: need(attr_u32(attrs, NETDEV_A_NAPI_ID, "napi id")?, "napi id")?,
            ifindex: need(attr_u32(attrs, NETDEV_A_NAPI_IFINDEX, "napi ifindex")?, "napi ifindex")?,
            irq: attr_u32(attrs, NETDEV_A_NAPI_IRQ, "napi irq")?,
            pid: attr_u32(attrs, NETDEV_A_NAPI_PID, "napi pid")?,
        });
    }
    Ok(out)
}

impl From<GenlError> for NetdevNlError {
    fn from(e: GenlError) -> NetdevNlError {
        match e {
            GenlError::Io { what, source } => NetdevNlError::Io { what, source },
            GenlError::Parse { what, source } => NetdevNlError::Parse { what, source },
        }
    }
}

/// Interface `name`'s index and an open socket on the netdev family (its
/// id and the commands it offers): what every request here starts with.
fn open_netdev(name: &str) -> Result<(Genl, u32, u16, Vec<u32>), NetdevNlError> {
    let cname = std::ffi::CString::new(name).map_err(|_| NetdevNlError::NoSuchInterface(name.into()))?;
    // SAFETY: cname is a valid NUL-terminated string for the call's duration.
    let ifindex = unsafe { libc::if_nametoindex(cname.as_ptr()) };
    if ifindex == 0 {
        return Err(NetdevNlError::NoSuchInterface(name.into()));
    }
    let mut g = Genl::open()?;
    match g.family("the netdev family lookup", "netdev") {
        Ok(Some((fam, ops))) => Ok((g, ifindex, fam, ops)),
        Ok(None) => Err(NetdevNlError::NotAvailable {
            reason: "the kernel has no netdev generic netlink family (Linux 6.2+; queue-get 6.8+)".into(),
        }),
        Err(crate::genl::FamilyError::Genl(e)) => Err(e.into()),
        Err(crate::genl::FamilyError::Refused(r)) => Err(NetdevNlError::Kernel {
            what: "the netdev family lookup",
            source: io::Error::from_raw_os_error(r.errno),
        }),
    }
}

/// The kernel's queue -> NAPI -> IRQ map of interface `name`.
pub fn queue_map(name: &str) -> Result<QueueMap, NetdevNlError> {
    let (mut g, ifindex, fam, ops) = open_netdev(name)?;
    for (op, name) in [(NETDEV_CMD_QUEUE_GET, "queue-get"), (NETDEV_CMD_NAPI_GET, "napi-get")] {
        if !ops.contains(&u32::from(op)) {
            return Err(NetdevNlError::NotAvailable {
                reason: format!("the kernel's netdev family has no {name} (Linux 6.8+)"),
            });
        }
    }
    let idx = ifindex.to_ne_bytes();
    let mut dump = |what: &'static str, cmd: u8, attr: u16| -> Result<Vec<Message>, NetdevNlError> {
        match g.transact(what, fam, NLM_F_DUMP, cmd, &[(attr, &idx)])? {
            Ok(m) => Ok(m),
            Err(r) if r.errno == libc::EOPNOTSUPP => Err(NetdevNlError::NotAvailable {
                reason: format!("the kernel refused {what} (not supported)"),
            }),
            Err(r) => Err(NetdevNlError::Kernel { what, source: io::Error::from_raw_os_error(r.errno) }),
        }
    };
    let qm = dump("queue-get", NETDEV_CMD_QUEUE_GET, NETDEV_A_QUEUE_IFINDEX)?;
    let nm = dump("napi-get", NETDEV_CMD_NAPI_GET, NETDEV_A_NAPI_IFINDEX)?;
    let parse = |what, source| NetdevNlError::Parse { what, source };
    // The request filters by ifindex; entries of another interface are not
    // trusted to be this one's.
    let mut queues: Vec<Queue> = decode_queues(&qm)
        .map_err(|e| parse("queue-get", e))?
        .into_iter()
        .filter(|q| q.ifindex == ifindex)
        .collect();
    let mut napis: Vec<Napi> = decode_napis(&nm)
        .map_err(|e| parse("napi-get", e))?
        .into_iter()
        .filter(|n| n.ifindex == ifindex)
        .collect();
    queues.sort_by_key(|q| (q.kind, q.id));
    queues.dedup_by_key(|q| (q.kind, q.id));
    napis.sort_by_key(|n| n.id);
    napis.dedup_by_key(|n| n.id);
    Ok(QueueMap { queues, napis })
}

// napi: the per-NAPI settings of `napi-get` (include/uapi/linux/netdev.h:
// defer-hard-irqs and gro-flush-timeout since 6.13, irq-suspend-timeout
// since 6.14; `uint` attributes are 4 or 8 bytes).
const NETDEV_A_NAPI_DEFER_HARD_IRQS: u16 = 5;
const NETDEV_A_NAPI_GRO_FLUSH_TIMEOUT: u16 = 6;
const NETDEV_A_NAPI_IRQ_SUSPEND_TIMEOUT: u16 = 7;

/// One NAPI instance's settings as `napi-get` reports them; `None` where
/// the kernel does not report the attribute (older kernels).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct NapiSettings {
    /// NAPI id.
    pub id: u32,
    /// `defer-hard-irqs`: empty polls before the IRQ is unmasked again.
    pub defer_hard_irqs: Option<u32>,
    /// `gro-flush-timeout`, nanoseconds.
    pub gro_flush_timeout: Option<u64>,
    /// `irq-suspend-timeout`, nanoseconds.
    pub irq_suspend_timeout: Option<u64>,
}

fn attr_uint(attrs: &[(u16, Vec<u8>)], ty: u16, what: &str) -> Result<Option<u64>, ParseError> {
    match attrs.iter().find(|(t, _)| *t == ty) {
        None => Ok(None),
        Some((_, v)) => uint_bytes(v)
            .map(Some)
            .ok_or_else(|| ParseError(format!("{what}: {} bytes, not a uint", v.len()))),
    }
}

/// The NAPI settings of a `napi-get` dump.
pub fn decode_napi_settings(msgs: &[Message]) -> Result<Vec<NapiSettings>, ParseError> {
    let mut out = Vec::new();
    for m in msgs {
        let Message::Genl { cmd: NETDEV_CMD_NAPI_GET, attrs, .. } = m else { continue };
        out.push(NapiSettings {
            id: need(attr_u32(attrs, NETDEV_A_NAPI_ID, "napi id")?, "napi id")?,
            defer_hard_irqs: attr_u32(attrs, NETDEV_A_NAPI_DEFER_HARD_IRQS, "napi defer-hard-irqs")?,
            gro_flush_timeout: attr_uint(attrs, NETDEV_A_NAPI_GRO_FLUSH_TIMEOUT, "napi gro-flush-timeout")?,
            irq_suspend_timeout: attr_uint(
                attrs,
                NETDEV_A_NAPI_IRQ_SUSPEND_TIMEOUT,
                "napi irq-suspend-timeout",
            )?,
        });
    }
    Ok(out)
}

// nicres: the kernel's standard per-device statistics (`qstats-get`,
// Linux 6.9+; the drop counters 6.10+), summed over the queues by the
// kernel when no scope is asked. Only the drop counters are kept.

const NETDEV_CMD_QSTATS_GET: u8 = 12;
const NETDEV_A_QSTATS_IFINDEX: u16 = 1;

/// The drop counters of `qstats-get` rsskit reads: attribute and name as
/// the netdev spec (`Documentation/netlink/specs/netdev.yaml`) spells it.
pub const QSTATS_DROPS: [(u16, &str); 4] =
    [(12, "rx-alloc-fail"), (13, "rx-hw-drops"), (14, "rx-hw-drop-overruns"), (23, "rx-hw-drop-ratelimits")];

/// A `uint` attribute's value: 4 or 8 bytes (the kernel picks by the value).
fn uint_bytes(v: &[u8]) -> Option<u64> {
    match v.len() {
        4 => crate::genl::u32_at(v, 0).map(u64::from),
        8 => Some(u64::from_ne_bytes(v.try_into().ok()?)),
        _ => None,
    }
}

/// The drop counters of interface `ifindex` in a `qstats-get` reply (the
/// names of [`QSTATS_DROPS`] the driver filled; other interfaces skipped).
/// `Ok(empty)` when the driver reports none of them.
pub fn decode_qstats_drops(msgs: &[Message], ifindex: u32) -> Result<Vec<(&'static str, u64)>, ParseError> {
    let mut out: Vec<(&'static str, u64)> = Vec::new();
    for m in msgs {
        let Message::Genl { cmd: NETDEV_CMD_QSTATS_GET, attrs, .. } = m else { continue };
        if need(attr_u32(attrs, NETDEV_A_QSTATS_IFINDEX, "qstats ifindex")?, "qstats ifindex")? != ifindex {
            continue;
        }
        for (ty, name) in QSTATS_DROPS {
            let Some((_, v)) = attrs.iter().find(|(t, _)| *t == ty) else { continue };
            let n =
                uint_bytes(v).ok_or_else(|| ParseError(format!("{name}: {} bytes, not a uint", v.len())))?;
            match out.iter_mut().find(|(k, _)| *k == name) {
                Some(e) => e.1 = e.1.saturating_add(n),
                None => out.push((name, n)),
            }
        }
    }
    Ok(out)
}

/// The settings of interface `name`'s NAPI instances (`napi-get`, 6.8+;
/// the settings themselves 6.13+), sorted by id.
pub fn napi_settings(name: &str) -> Result<Vec<NapiSettings>, NetdevNlError> {
    let (mut g, ifindex, fam, ops) = open_netdev(name)?;
    if !ops.contains(&u32::from(NETDEV_CMD_NAPI_GET)) {
        return Err(NetdevNlError::NotAvailable {
            reason: "the kernel's netdev family has no napi-get (Linux 6.8+)".into(),
        });
    }
    let msgs = match g.transact(
        "napi-get",
        fam,
        NLM_F_DUMP,
        NETDEV_CMD_NAPI_GET,
        &[(NETDEV_A_NAPI_IFINDEX, &ifindex.to_ne_bytes())],
    )? {
        Ok(m) => m,
        Err(r) => {
            return Err(NetdevNlError::Kernel {
                what: "napi-get",
                source: io::Error::from_raw_os_error(r.errno),
            })
        }
    };
    // Only this interface's instances (the request filters; the reply is not trusted to).
    let ours: Vec<u32> = decode_napis(&msgs)
        .map_err(|source| NetdevNlError::Parse { what: "napi-get", source })?
        .into_iter()
        .filter(|n| n.ifindex == ifindex)
        .map(|n| n.id)
        .collect();
    let mut out: Vec<NapiSettings> = decode_napi_settings(&msgs)
        .map_err(|source| NetdevNlError::Parse { what: "napi-get", source })?
        .into_iter()
        .filter(|n| ours.contains(&n.id))
        .collect();
    out.sort_by_key(|n| n.id);
    out.dedup_by_key(|n| n.id);
    Ok(out)
}

/// The NIC drop counters of interface `name` from `qstats-get`:
/// `NotAvailable` on kernels without it or drivers that report no
/// statistics through it.
pub fn qstats_drops(name: &str) -> Result<Vec<(&'static str, u64)>, NetdevNlError> {
    let (mut g, ifindex, fam, ops) = open_netdev(name)?;
    if !ops.contains(&u32::from(NETDEV_CMD_QSTATS_GET)) {
        return Err(NetdevNlError::NotAvailable {
            reason: "the kernel's netdev family has no qstats-get (Linux 6.9+)".into(),
        });
    }
    let idx = ifindex.to_ne_bytes();
    let what = "qstats-get";
    let msgs =
        match g.transact(what, fam, NLM_F_DUMP, NETDEV_CMD_QSTATS_GET, &[(NETDEV_A_QSTATS_IFINDEX, &idx)])? {
            Ok(m) => m,
            Err(r) if r.errno == libc::EOPNOTSUPP => {
                return Err(NetdevNlError::NotAvailable { reason: "the driver reports no qstats".into() })
            }
            Err(r) => {
                return Err(NetdevNlError::Kernel { what, source: io::Error::from_raw_os_error(r.errno) })
            }
        };
    decode_qstats_drops(&msgs, ifindex).map_err(|source| NetdevNlError::Parse { what, source })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::genl::tests::{attr, msg, u32a};
    use crate::genl::{request, GENL_HDR, GENL_ID_CTRL, NLMSG_HDR};
    const NLMSG_ERROR: u16 = 2;
    const NLMSG_DONE: u16 = 3;
    const CTRL_ATTR_FAMILY_ID: u16 = 1;
    const CTRL_ATTR_FAMILY_NAME: u16 = 2;
    const CTRL_ATTR_OPS: u16 = 6;
    const CTRL_ATTR_OP_ID: u16 = 1;

    fn done() -> Vec<u8> {
        let mut m = msg(NLMSG_DONE, 0, &[]);
        m.truncate(NLMSG_HDR);
        m[0..4].copy_from_slice(&(NLMSG_HDR as u32).to_ne_bytes());
        m
    }

    #[test]
    fn queues_and_napis_decode() {
        let mut b = msg(
            30,
            NETDEV_CMD_QUEUE_GET,
            &[
                u32a(NETDEV_A_QUEUE_ID, 1),
                u32a(NETDEV_A_QUEUE_IFINDEX, 3),
                u32a(NETDEV_A_QUEUE_TYPE, 0),
                u32a(NETDEV_A_QUEUE_NAPI_ID, 8193),
            ],
        );
        b.extend(msg(
            30,
            NETDEV_CMD_QUEUE_GET,
            &[u32a(NETDEV_A_QUEUE_ID, 0), u32a(NETDEV_A_QUEUE_IFINDEX, 3), u32a(NETDEV_A_QUEUE_TYPE, 1)],
        ));
        // A queue type this reader does not know (e.g. a future kind): skipped.
        b.extend(msg(
            30,
            NETDEV_CMD_QUEUE_GET,
            &[u32a(NETDEV_A_QUEUE_ID, 0), u32a(NETDEV_A_QUEUE_IFINDEX, 3), u32a(NETDEV_A_QUEUE_TYPE, 7)],
        ));
        b.extend(done());
        let m = parse_messages(&b).unwrap();
        assert_eq!(m.last(), Some(&Message::Done));
        assert_eq!(
            decode_queues(&m).unwrap(),
            vec![
                Queue { id: 1, kind: QueueType::Rx, ifindex: 3, napi_id: Some(8193) },
                Queue { id: 0, kind: QueueType::Tx, ifindex: 3, napi_id: None },
            ]
        );
        let n = msg(
            30,
            NETDEV_CMD_NAPI_GET,
            &[
                u32a(NETDEV_A_NAPI_ID, 8193),
                u32a(NETDEV_A_NAPI_IFINDEX, 3),
                u32a(NETDEV_A_NAPI_IRQ, 37),
                u32a(NETDEV_A_NAPI_PID, 412),
            ],
        );
        let napis = decode_napis(&parse_messages(&n).unwrap()).unwrap();
        assert_eq!(napis, vec![Napi { id: 8193, ifindex: 3, irq: Some(37), pid: Some(412) }]);
        let map = QueueMap { queues: decode_queues(&m).unwrap(), napis };
        assert_eq!(map.napi_of(QueueType::Rx, 1).and_then(|n| n.irq), Some(37));
        assert_eq!(map.napi_of(QueueType::Tx, 0), None);
    }

    #[test]
    fn family_lookup_reads_id_and_ops() {
        let op = |id: u32| attr(1, &[u32a(CTRL_ATTR_OP_ID, id), u32a(2, 0xe)].concat());
        let ops = attr(CTRL_ATTR_OPS | 0x8000, &[op(1), op(10), op(11)].concat());
        let b = msg(
            GENL_ID_CTRL,
            1,
            &[attr(CTRL_ATTR_FAMILY_ID, &30u16.to_ne_bytes()), attr(CTRL_ATTR_FAMILY_NAME, b"netdev\0"), ops],
        );
        let m = parse_messages(&b).unwrap();
        assert_eq!(decode_family(&m, "netdev").unwrap(), (30, vec![1, 10, 11]));
        assert!(decode_family(&m, "ethtool").is_err());
    }

    #[test]
    fn errors_and_bad_lengths_are_typed_not_panics() {
        let mut e = msg(NLMSG_ERROR, 0, &[]);
        e.truncate(NLMSG_HDR);
        e.extend_from_slice(&(-libc::EOPNOTSUPP).to_ne_bytes());
        let n = e.len() as u32;
        e[0..4].copy_from_slice(&n.to_ne_bytes());
        assert_eq!(parse_messages(&e).unwrap(), vec![Message::Error(-libc::EOPNOTSUPP)]);
        // An IRQ attribute of 2 bytes, a length past the end, a short header.
        let bad = msg(
            30,
            NETDEV_CMD_NAPI_GET,
            &[u32a(NETDEV_A_NAPI_ID, 1), u32a(NETDEV_A_NAPI_IFINDEX, 1), attr(NETDEV_A_NAPI_IRQ, &[1, 2])],
        );
        assert!(decode_napis(&parse_messages(&bad).unwrap()).unwrap_err().0.contains("napi irq: 2 bytes"));
        let missing = msg(30, NETDEV_CMD_NAPI_GET, &[u32a(NETDEV_A_NAPI_IFINDEX, 1)]);
        assert_eq!(decode_napis(&parse_messages(&missing).unwrap()).unwrap_err().0, "napi id missing");
        let mut long = bad.clone();
        long[0] = 0xff;
        assert!(parse_messages(&long).is_err());
        for n in 0..bad.len() {
            let _ = parse_messages(&bad[..n]).map(|m| decode_napis(&m));
        }
    }

    #[test]
    fn requests_are_well_formed() {
        let r = request(
            30,
            NLM_F_DUMP,
            7,
            NETDEV_CMD_QUEUE_GET,
            &[(NETDEV_A_QUEUE_IFINDEX, &3u32.to_ne_bytes())],
        );
        assert_eq!(r.len(), NLMSG_HDR + GENL_HDR + 8);
        let m = parse_messages(&r).unwrap();
        assert_eq!(
            m,
            vec![Message::Genl {
                family: 30,
                cmd: NETDEV_CMD_QUEUE_GET,
                attrs: vec![(NETDEV_A_QUEUE_IFINDEX, 3u32.to_ne_bytes().to_vec())]
            }]
        );
    }

    /// On the machine running the tests: a map with consistent links, or
    /// "not available" on a kernel without it; never another error for `lo`.
    #[test]
    fn loopback_map_or_not_available() {
        match queue_map("lo") {
            Ok(map) => {
                for q in &map.queues {
                    assert_eq!(q.ifindex, 1, "{q:?}");
                }
            }
            Err(NetdevNlError::NotAvailable { reason }) => assert!(!reason.is_empty()),
            Err(e) => panic!("lo: {e}"),
        }
        assert!(matches!(queue_map("no-such-if0"), Err(NetdevNlError::NoSuchInterface(_))));
    }

    #[test]
    fn napi_settings_decode_u32_and_u64_uints() {
        let n = msg(
            30,
            NETDEV_CMD_NAPI_GET,
            &[
                u32a(NETDEV_A_NAPI_ID, 8193),
                u32a(NETDEV_A_NAPI_IFINDEX, 3),
                u32a(NETDEV_A_NAPI_DEFER_HARD_IRQS, 2),
                attr(NETDEV_A_NAPI_GRO_FLUSH_TIMEOUT, &(5_000_000_000u64).to_ne_bytes()),
                u32a(NETDEV_A_NAPI_IRQ_SUSPEND_TIMEOUT, 20_000),
            ],
        );
        let old =
            msg(30, NETDEV_CMD_NAPI_GET, &[u32a(NETDEV_A_NAPI_ID, 8194), u32a(NETDEV_A_NAPI_IFINDEX, 3)]);
        let got = decode_napi_settings(&parse_messages(&[n, old].concat()).unwrap()).unwrap();
        assert_eq!(
            got,
            vec![
                NapiSettings {
                    id: 8193,
                    defer_hard_irqs: Some(2),
                    gro_flush_timeout: Some(5_000_000_000),
                    irq_suspend_timeout: Some(20_000)
                },
                NapiSettings { id: 8194, ..NapiSettings::default() },
            ]
        );
        let bad = msg(
            30,
            NETDEV_CMD_NAPI_GET,
            &[u32a(NETDEV_A_NAPI_ID, 1), attr(NETDEV_A_NAPI_GRO_FLUSH_TIMEOUT, &[1, 2])],
        );
        assert!(decode_napi_settings(&parse_messages(&bad).unwrap())
            .unwrap_err()
            .0
            .contains("2 bytes, not a uint"));
    }

    // nicres
    #[test]
    fn qstats_drops_decode() {
        let mut b = msg(
            30,
            NETDEV_CMD_QSTATS_GET,
            &[
                u32a(NETDEV_A_QSTATS_IFINDEX, 3),
                attr(8, &5u64.to_ne_bytes()),
                u32a(13, 7),
                attr(14, &(1u64 << 40).to_ne_bytes()),
            ],
        );
        // Another interface's totals are not this one's.
        b.extend(msg(30, NETDEV_CMD_QSTATS_GET, &[u32a(NETDEV_A_QSTATS_IFINDEX, 4), u32a(13, 99)]));
        b.extend(done());
        let m = parse_messages(&b).unwrap();
        assert_eq!(
            decode_qstats_drops(&m, 3).unwrap(),
            vec![("rx-hw-drops", 7), ("rx-hw-drop-overruns", 1 << 40)]
        );
        assert_eq!(decode_qstats_drops(&m, 5).unwrap(), vec![]);
        let bad = parse_messages(&msg(
            30,
            NETDEV_CMD_QSTATS_GET,
            &[u32a(NETDEV_A_QSTATS_IFINDEX, 3), attr(13, &[1, 2])],
        ))
        .unwrap();
        assert!(decode_qstats_drops(&bad, 3).unwrap_err().0.contains("rx-hw-drops: 2 bytes"));
        let no_index = parse_messages(&msg(30, NETDEV_CMD_QSTATS_GET, &[u32a(13, 1)])).unwrap();
        assert!(decode_qstats_drops(&no_index, 3).is_err());
    }

    #[test]
    fn loopback_qstats_or_not_available() {
        match qstats_drops("lo") {
            Ok(d) => assert!(d.iter().all(|(n, _)| QSTATS_DROPS.iter().any(|(_, k)| k == n))),
            Err(NetdevNlError::NotAvailable { reason }) => assert!(!reason.is_empty()),
            Err(e) => panic!("lo: {e}"),
        }
    }
}
