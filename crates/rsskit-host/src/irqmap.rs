//! Which IRQ serves which queue, for every host workflow (plan, check,
//! apply, the agent): the kernel's own map (netdev netlink `queue-get` /
//! `napi-get`, Linux 6.8+) where it links queues to IRQs, the IRQ names
//! (`netdev::iface_irqs`) otherwise. [`link`] is the one place the two
//! meet; no I/O (the caller reads both).

use rsskit_linux::netdev::{IfaceIrq, IrqKind};
use rsskit_linux::netdev_nl::{QueueMap, QueueType};
use serde::Serialize;

/// Where a device's queue -> IRQ links came from.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct MapSource {
    /// `kernel netlink` or `guessed from IRQ names`.
    pub source: &'static str,
    /// Why the kernel's map was not used (`None` when it was).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fallback_reason: Option<String>,
}

/// The kernel's map was used.
pub const KERNEL: &str = "kernel netlink";
/// The IRQ names were used.
pub const NAMES: &str = "guessed from IRQ names";

impl MapSource {
    /// The names, for `why`.
    pub fn names(why: impl Into<String>) -> MapSource {
        MapSource { source: NAMES, fallback_reason: Some(why.into()) }
    }

    /// Whether the kernel's map was used.
    pub fn is_kernel(&self) -> bool {
        self.source == KERNEL
    }

    /// One line for plan and check notes.
    pub fn note(&self) -> String {
        match &self.fallback_reason {
            None => "queue -> IRQ links from the kernel's map (netdev netlink: queue -> NAPI -> IRQ)".into(),
            Some(why) => format!("queue -> IRQ links guessed from IRQ names ({why})"),
        }
    }
}

/// The device's IRQs with what each serves: the kernel's links where `map`
/// has any (an IRQ it names for no queue then serves none: `Other`), the
/// names' guess otherwise. `by_name` are the IRQs found by name or device;
/// `extra` reads an IRQ the map names that was not found so (its line in
/// `/proc/interrupts`, its CPUs). Sorted by IRQ.
pub fn link(
    by_name: Vec<IfaceIrq>,
    map: Option<&QueueMap>,
    extra: impl Fn(u32) -> Option<IfaceIrq>,
) -> (Vec<IfaceIrq>, MapSource) {
    let Some(map) = map else {
        return (by_name, MapSource::names("no kernel map read"));
    };
    // IRQ -> (lowest RX queue, lowest TX queue) its NAPI instance polls.
    let mut served: std::collections::BTreeMap<u32, (Option<usize>, Option<usize>)> = Default::default();
    for q in &map.queues {
        let Some(irq) = q.napi_id.and_then(|n| map.napi(n)).and_then(|n| n.irq) else { continue };
        let e = served.entry(irq).or_default();
        let slot = if q.kind == QueueType::Rx { &mut e.0 } else { &mut e.1 };
        let id = q.id as usize;
        *slot = Some(slot.map_or(id, |s: usize| s.min(id)));
    }
    if served.is_empty() {
        let why = if map.queues.is_empty() {
            "the kernel's map lists no queues"
        } else {
            "the kernel's map links no queue to an IRQ (the driver does not say)"
        };
        return (by_name, MapSource::names(why));
    }
    let mut out = by_name;
    for &irq in served.keys() {
        if !out.iter().any(|x| x.irq == irq) {
            if let Some(x) = extra(irq) {
                out.push(x);
            }
        }
    }
    for x in &mut out {
        (x.kind, x.queue) = match served.get(&x.irq) {
            Some((Some(r), Some(t))) if r == t => (IrqKind::RxTx, Some(*r)),
            // An RX and a TX queue of different numbers: the RX one decides
            // where flows are processed.
            Some((Some(r), _)) => (IrqKind::Rx, Some(*r)),
            Some((None, Some(t))) => (IrqKind::Tx, Some(*t)),
            _ => (IrqKind::Other, None),
        };
    }
    out.sort_by_key(|x| x.irq);
    (out, MapSource { source: KERNEL, fallback_reason: None })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rsskit_linux::netdev_nl::{Napi, Queue};

    fn irq(irq: u32, name: &str) -> IfaceIrq {
        let (kind, queue) = rsskit_linux::netdev::classify_irq(name);
        IfaceIrq { irq, name: name.into(), kind, queue, cpus: Some(vec![0]), effective_cpus: None }
    }

    fn q(kind: QueueType, id: u32, napi: Option<u32>) -> Queue {
        Queue { id, kind, ifindex: 3, napi_id: napi }
    }

    fn napi(id: u32, irq: Option<u32>) -> Napi {
        Napi { id, ifindex: 3, irq, pid: None }
    }

    #[test]
    fn the_kernel_map_wins_over_names() {
        // Names that lie: "TxRx-0" is really queue 1's vector, and the
        // kernel names an IRQ the name match did not find.
        let by_name = vec![irq(40, "eth1"), irq(41, "eth1-TxRx-0"), irq(42, "eth1-TxRx-1")];
        let map = QueueMap {
            queues: vec![
                q(QueueType::Rx, 0, Some(1)),
                q(QueueType::Rx, 1, Some(2)),
                q(QueueType::Tx, 0, Some(1)),
                q(QueueType::Tx, 1, Some(3)),
            ],
            napis: vec![napi(1, Some(42)), napi(2, Some(41)), napi(3, Some(50))],
        };
        let (got, src) = link(by_name, Some(&map), |n| Some(irq(n, "pci-msix")));
        assert!(src.is_kernel(), "{src:?}");
        let view: Vec<(u32, IrqKind, Option<usize>)> = got.iter().map(|x| (x.irq, x.kind, x.queue)).collect();
        assert_eq!(
            view,
            vec![
                (40, IrqKind::Other, None),
                (41, IrqKind::Rx, Some(1)),
                (42, IrqKind::RxTx, Some(0)),
                (50, IrqKind::Tx, Some(1)),
            ]
        );
    }

    #[test]
    fn names_when_the_map_links_no_irq() {
        let by_name = vec![irq(30, "virtio0-input.0"), irq(31, "virtio0-output.0")];
        let map = QueueMap { queues: vec![q(QueueType::Rx, 0, Some(9))], napis: vec![napi(9, None)] };
        let (got, src) = link(by_name.clone(), Some(&map), |_| None);
        assert_eq!(got, by_name);
        assert!(!src.is_kernel());
        assert!(src.note().contains("links no queue to an IRQ"), "{}", src.note());
        let (got, src) = link(by_name.clone(), None, |_| None);
        assert_eq!((got, src.source), (by_name, NAMES));
    }
}
