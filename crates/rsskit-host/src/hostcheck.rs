//! `rsskit check`: does this host keep every flow on one CPU? Per device,
//! the problems that break it (each makes the verdict "not aligned") and
//! notes that do not. No I/O: it judges what [`crate::sysroot`] read.

use crate::nic_rules::NicRules;
use crate::sysroot::{DeviceState, IrqBalance};
use rsskit_core::flowrule::RuleAction;
use rsskit_core::keycheck;
use rsskit_core::ringmap::{is_mismatch, HOST_TABLE_LEN};
use rsskit_core::RssKey;
use rsskit_linux::cpulist;
use rsskit_linux::netdev::{self, IrqKind};
use rsskit_linux::topology::Topology;
use serde::Serialize;

/// The verdict on one device.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DeviceVerdict {
    /// Interface name.
    pub name: String,
    /// Whether the device passed every check (`problems` is empty).
    pub aligned: bool,
    /// Why not (empty when aligned).
    pub problems: Vec<String>,
    /// Worth knowing, not misaligned.
    pub notes: Vec<String>,
}

/// A 2-byte pattern repeated (as DragonFly's 0x6d5a), not all zeros or ones.
fn key_is_symmetric(key: &[u8]) -> bool {
    key.len() >= 4
        && key.iter().enumerate().all(|(i, b)| *b == key[i % 2])
        && ![[0, 0], [0xff, 0xff]].contains(&[key[0], key[1]])
}

/// Problems (each breaks alignment) and notes, in the order found.
#[derive(Default)]
struct Findings {
    problems: Vec<String>,
    notes: Vec<String>,
}

/// Judges one device.
pub fn check_device(topo: &Topology, d: &DeviceState, irqbalance: Option<&IrqBalance>) -> DeviceVerdict {
    let mut f = Findings::default();
    input_transform(d, &mut f);
    key_quality(d, &mut f);
    if d.queue_map.is_kernel() {
        f.notes.push(d.queue_map.note());
    }
    let queue_cpu = queue_cpus_from_irqs(topo, d, irqbalance, &mut f);
    // Threaded NAPI polls a queue where its thread runs, not on the IRQ's CPU.
    let (problems, notes) = crate::napi::judge(&d.name, &d.napi, &queue_cpu);
    f.problems.extend(problems);
    f.notes.extend(notes);
    table_against_queues(topo, d, &queue_cpu, &mut f);
    udp_hashed_on_addresses(d, &mut f);
    rps_against_hardware_rss(topo, d, &mut f);
    if d.tx.len() > 1 {
        xps_per_cpu(topo, d, &mut f);
    }
    if let Some(ib) = irqbalance {
        irqbalance_owned_irqs(d, ib, &mut f);
    }
    let Findings { problems, notes } = f;
    DeviceVerdict { name: d.name.clone(), aligned: problems.is_empty(), problems, notes }
}

/// The NIC's flow rules and the RSS contexts they reach ([`NicRules`]): a
/// rule or context entry naming a queue the device does not have is a
/// problem (its flows go nowhere rsskit can place); a rule not understood
/// or a context not shown is a note (predictions through it are unknown);
/// the rules themselves are listed as notes, since they bypass the table.
pub fn check_rules(d: &DeviceState, rules: &NicRules, v: &mut DeviceVerdict) {
    let queues = d.rx.len() as u64;
    let missing = |q: u64| queues > 0 && q >= queues;
    for r in &rules.rules {
        match r.action {
            RuleAction::Queue(q) if missing(q.into()) => v.problems.push(format!(
                "rule {} ({r}) sends flows to queue {q}, which {} does not have ({queues} RX queues)",
                r.location, d.name
            )),
            RuleAction::Context { context, offset } => {
                let table = if context == 0 {
                    d.rss.ok().map(|x| x.indir.clone())
                } else {
                    rules.contexts.get(&context).map(|c| c.table.clone())
                };
                let Some(table) = table else { continue };
                let top = table.iter().map(|&e| u64::from(e) + u64::from(offset)).max();
                if let Some(top) = top.filter(|&t| missing(t)) {
                    v.problems.push(format!(
                        "rule {} ({r}) reaches queue {top} through context {context} plus offset {offset}, \
                         which {} does not have ({queues} RX queues)",
                        r.location, d.name
                    ));
                }
            }
            _ => {}
        }
    }
    if rules.any() {
        let into = rules.rules.iter().filter(|r| matches!(r.action, RuleAction::Context { .. })).count();
        v.notes.push(format!(
            "{} flow rule(s), {into} into RSS contexts: the flows they take bypass the main table \
             (rsskit hash --iface {} shows where a flow goes)",
            rules.rules.len() + rules.opaque.len(),
            d.name
        ));
    }
    for o in &rules.opaque {
        v.notes.push(format!(
            "rule {} not understood ({}): where its flows land is unknown",
            o.location, o.reason
        ));
    }
    for (id, why) in &rules.unreadable_contexts {
        v.notes.push(format!("RSS context {id} could not be read ({why}): where its flows land is unknown"));
    }
    queues_served_by_rules(d, rules, v);
    v.aligned = v.problems.is_empty();
}

// --- RSS contexts (isolate2): queues the main table leaves out on purpose ---

/// The RX queues the main table never names (none when it is not read).
fn queues_off_table(d: &DeviceState) -> Vec<usize> {
    let Some(r) = d.rss.ok().filter(|r| !r.indir.is_empty()) else { return Vec::new() };
    let nrings = match d.channels.ok() {
        Some(c) if c.rx_count + c.combined_count > 0 => (c.rx_count + c.combined_count) as usize,
        _ => d.rx.len(),
    };
    (0..nrings.min(d.rx.len())).filter(|q| !r.indir.contains(&(*q as u32))).collect()
}

fn off_table_note(queues: &[usize]) -> String {
    format!("RX queue(s) {} get no RSS traffic: the table never names them", cpulist::format(queues))
}

/// A queue the main table leaves out still gets traffic when a rule sends
/// flows there, directly or through an RSS context's table (plus the
/// rule's offset): `check_device` said "no RSS traffic" before the rules
/// were read, so that note is replaced by what serves each such queue.
fn queues_served_by_rules(d: &DeviceState, rules: &NicRules, v: &mut DeviceVerdict) {
    let unused = queues_off_table(d);
    let reached = rules.reaching(&unused);
    if reached.is_empty() {
        return;
    }
    let old = off_table_note(&unused);
    v.notes.retain(|n| *n != old);
    for (qs, how) in &reached {
        v.notes.push(format!(
            "RX queue(s) {} are left out of the main table: they get the flows of {how}",
            cpulist::format(qs)
        ));
    }
    let rest: Vec<usize> =
        unused.iter().copied().filter(|q| !reached.iter().any(|(qs, _)| qs.contains(q))).collect();
    if !rest.is_empty() {
        v.notes.push(off_table_note(&rest));
    }
}

/// The NIC's input transform (`input_xfrm`): a symmetric one is said (both
/// directions of a flow on one queue); one rsskit does not model breaks
/// every prediction of where a flow lands.
fn input_transform(d: &DeviceState, f: &mut Findings) {
    let Some(r) = d.rss.ok().filter(|r| !r.input_xfrm.is_empty()) else { return };
    let bits = rsskit_linux::ethtool::xfrm_bits(&r.input_xfrm).unwrap_or(0xff);
    match rsskit_core::InputXfrm::from_bits(bits) {
        Ok(x) if x.is_symmetric() => f.notes.push(format!(
            "input transform {x}: both directions of a flow land on one queue (rsskit predicts with it, \
             and the key check judges the key under it)"
        )),
        Ok(_) => {}
        Err(e) => f.problems.push(format!(
            "RSS input transform 0x{:02x} ({}) is not one rsskit models: where flows land cannot be predicted",
            e.0,
            r.input_xfrm.join(",")
        )),
    }
}

/// Key quality: the check random keys get.
fn key_quality(d: &DeviceState, f: &mut Findings) {
    let Some(r) = d.rss.ok().filter(|r| !r.key.is_empty()) else { return };
    // symplan: the key is judged under the NIC's transform (said by
    // `input_transform`; one rsskit does not model is a problem there).
    let xfrm = match rsskit_linux::ethtool::xfrm_bits(&r.input_xfrm).map(rsskit_core::InputXfrm::from_bits) {
        Some(Ok(x)) => x,
        _ => return,
    };
    // Under a symmetric transform every key is symmetric: the pattern
    // key's note is about the plain hash only.
    if !xfrm.is_symmetric() && key_is_symmetric(&r.key) {
        f.notes.push(
            "symmetric key (a 2-byte pattern): both directions of a flow hash alike; it uses only 16 \
             independent hash bits, by design"
                .into(),
        );
        return;
    }
    let Ok(k) = RssKey::from_bytes(&r.key) else {
        f.notes.push(format!("the {}-byte key is too short to check (40 needed)", r.key.len()));
        return;
    };
    // Refused only when buckets are unreachable; the rest
    // (a field that alone falls short, piling ports) is a note.
    let rep = keycheck::check_under(&k, keycheck::KeyUse::full(), xfrm);
    let (weak, other): (Vec<_>, Vec<_>) = rep.problems.iter().partition(|p| p.unreachable_buckets());
    if !weak.is_empty() {
        let why: Vec<String> = weak.iter().take(3).map(|p| p.to_string()).collect();
        f.problems.push(format!(
            "the RSS key fails the key check ({} problem(s): {}): flows pile into few \
             buckets; plan with --key random",
            weak.len(),
            why.join("; ")
        ));
    }
    if !other.is_empty() {
        let why: Vec<String> = other.iter().take(3).map(|p| p.to_string()).collect();
        f.notes.push(format!("the RSS key reaches every bucket, but: {}", why.join("; ")));
    }
}

/// Queue -> CPU from the IRQs: each RX queue's CPU when its IRQ is pinned
/// to one (hardware RSS with per-queue IRQs only).
fn queue_cpus_from_irqs(
    topo: &Topology,
    d: &DeviceState,
    irqbalance: Option<&IrqBalance>,
    f: &mut Findings,
) -> Vec<Option<usize>> {
    let hw = d.hardware_rss();
    let mut queue_cpu: Vec<Option<usize>> = vec![None; d.rx.len()];
    let queue_irqs = d.irqs.iter().any(|x| x.kind != IrqKind::Other && x.queue.is_some());
    if !hw {
        return queue_cpu;
    }
    if !queue_irqs {
        f.notes.push("no per-queue IRQs found: cannot tell which CPU each queue runs on".into());
        return queue_cpu;
    }
    for (q, slot) in queue_cpu.iter_mut().enumerate() {
        match netdev::rx_irq(&d.irqs, q) {
            None => f.problems.push(format!("rx-{q} has no IRQ of its own: its flows land wherever")),
            Some(x) => match &x.cpus {
                Some(c) if c.len() == 1 => *slot = Some(c[0]),
                Some(c) => f.problems.push(format!(
                    "rx-{q}: IRQ {} ({}) may run on CPUs {}: one queue's flows move between CPUs{}",
                    x.irq,
                    x.name,
                    cpulist::format(c),
                    if irqbalance.is_some() { "" } else { "; pin it to one CPU (rsskit apply)" }
                )),
                // Not checked is not aligned: the verdict says so.
                None => f.problems.push(format!("rx-{q}: IRQ {} affinity unreadable: not checked", x.irq)),
            },
        }
    }
    let mut seen: Vec<usize> = queue_cpu.iter().flatten().copied().collect();
    seen.sort_unstable();
    let dup: Vec<usize> = seen.windows(2).filter(|w| w[0] == w[1]).map(|w| w[0]).collect();
    if !dup.is_empty() {
        f.notes.push(format!("CPU(s) {} serve several RX queues", cpulist::format(&dup)));
    }
    let idle: Vec<usize> = topo.online.iter().copied().filter(|c| !seen.contains(c)).collect();
    if !idle.is_empty() && !seen.is_empty() {
        f.notes.push(format!(
            "CPU(s) {} have no RX queue: with steering cpu they get no flows of this device",
            cpulist::format(&idle)
        ));
    }
    queue_cpu
}

/// The table: rings it names that do not exist, queues it never names, and
/// how it lines up with the queue CPUs (host-side pick, NUMA node).
fn table_against_queues(topo: &Topology, d: &DeviceState, queue_cpu: &[Option<usize>], f: &mut Findings) {
    let Some(r) = d.rss.ok().filter(|r| !r.indir.is_empty()) else { return };
    let nrx = d.rx.len();
    let nrings = match d.channels.ok() {
        Some(c) if c.rx_count + c.combined_count > 0 => (c.rx_count + c.combined_count) as usize,
        _ => nrx,
    };
    let bad: Vec<usize> = r.indir.iter().map(|&x| x as usize).filter(|&x| x >= nrings).collect();
    if !bad.is_empty() {
        f.problems.push(format!(
            "the indirection table names ring(s) {} but the device has {nrings} RX queue(s)",
            cpulist::format(&bad)
        ));
    }
    let unused = queues_off_table(d);
    if !unused.is_empty() {
        f.notes.push(off_table_note(&unused));
    }
    let mut qcpus: Vec<usize> = queue_cpu.iter().flatten().copied().collect();
    qcpus.sort_unstable();
    qcpus.dedup();
    if d.hardware_rss() && !qcpus.is_empty() && queue_cpu.iter().all(Option::is_some) {
        table_against_host_pick(&r.indir, queue_cpu, &qcpus, f);
    }
    queue_cpus_off_node(topo, d, &qcpus, f);
}

/// Against the host-side pick (hash & 127) % N over the queue CPUs.
fn table_against_host_pick(indir: &[u32], queue_cpu: &[Option<usize>], qcpus: &[usize], f: &mut Findings) {
    let n = qcpus.len();
    let mism = indir
        .iter()
        .enumerate()
        .filter(|&(i, &ring)| is_mismatch(i, ring as usize, queue_cpu, qcpus))
        .count();
    if mism > 0 {
        f.notes.push(format!(
            "{mism} of {} table entries send a hash to another CPU than (hash & {}) % {n} picks over \
             CPUs {}: only steering toeplitz cares",
            indir.len(),
            HOST_TABLE_LEN - 1,
            cpulist::format(qcpus)
        ));
    }
}

/// NUMA: queue CPUs off the device's node (a problem when the node has a
/// CPU for every queue).
fn queue_cpus_off_node(topo: &Topology, d: &DeviceState, qcpus: &[usize], f: &mut Findings) {
    let Some(node) = d.facts.numa_node.filter(|_| topo.nodes.len() > 1) else { return };
    let local: Vec<usize> =
        topo.nodes.iter().find(|n| n.node == node).map(|n| n.cpus.clone()).unwrap_or_default();
    let far: Vec<usize> = qcpus.iter().copied().filter(|c| !local.contains(c)).collect();
    if far.is_empty() {
        return;
    }
    let text = format!(
        "table entries go to queues on CPU(s) {} off the device's NUMA node {node} (CPUs {})",
        cpulist::format(&far),
        cpulist::format(&local)
    );
    // Isolated and nohz_full CPUs take no IRQ unless named: no room for queues.
    let reserved = topo.reserved();
    let room = local.iter().filter(|c| !reserved.contains(c)).count();
    if room >= d.rx.len() {
        f.problems.push(format!("{text}, which has a CPU for every queue"));
    } else {
        f.notes.push(format!("{text}: node {node} has fewer CPUs than queues (isolated ones not counted)"));
    }
}

/// Hashed fields: UDP on addresses only puts every flow between two hosts on one queue.
fn udp_hashed_on_addresses(d: &DeviceState, f: &mut Findings) {
    let Some(flows) = d.hash.ok().filter(|_| d.hardware_rss()) else { return };
    for x in flows.iter().filter(|x| x.flow.starts_with("udp") && x.tuple() == "2-tuple") {
        f.notes.push(format!(
            "{} hashes addresses only: all {} flows between two hosts share one queue (rsskit plan \
             --hash-fields {}=4-tuple)",
            x.flow, x.flow, x.flow
        ));
    }
}

/// RPS: on where the NIC spreads (double steering), or off where nothing
/// else spreads.
fn rps_against_hardware_rss(topo: &Topology, d: &DeviceState, f: &mut Findings) {
    let hw = d.hardware_rss();
    let rps: Vec<usize> =
        d.rx.iter().filter(|q| q.rps_cpus.as_ref().is_some_and(|c| !c.is_empty())).map(|q| q.queue).collect();
    if hw && !rps.is_empty() {
        f.problems.push(format!(
            "RPS is on for rx-{} although the NIC spreads flows itself: double steering moves every packet \
             to another CPU",
            cpulist::format(&rps)
        ));
    }
    if !hw && topo.online.len() > 1 && rps.is_empty() {
        f.notes.push("no hardware RSS and RPS off: each RX queue's packets are processed on one CPU".into());
    }
}

/// XPS (several TX queues): off everywhere, a CPU on several queues, CPUs
/// on none, and queues whose IRQ runs on a CPU that sends elsewhere.
fn xps_per_cpu(topo: &Topology, d: &DeviceState, f: &mut Findings) {
    let off: Vec<usize> =
        d.tx.iter().filter(|q| q.xps_cpus.as_ref().is_none_or(|c| c.is_empty())).map(|q| q.queue).collect();
    let any_on = off.len() < d.tx.len();
    if !any_on {
        f.problems.push(
            "XPS is off on every TX queue: a sender's packets go out on a queue picked by hash, whose \
             completions run on another CPU"
                .into(),
        );
    }
    let mut owner: Vec<(usize, usize)> = Vec::new();
    for q in &d.tx {
        for &c in q.xps_cpus.iter().flatten() {
            owner.push((c, q.queue));
        }
    }
    owner.sort_unstable();
    let multi: Vec<usize> = owner.windows(2).filter(|w| w[0].0 == w[1].0).map(|w| w[0].0).collect();
    if !multi.is_empty() {
        f.problems.push(format!("XPS maps CPU(s) {} to several TX queues", cpulist::format(&multi)));
    }
    if any_on {
        let uncovered: Vec<usize> =
            topo.online.iter().copied().filter(|c| !owner.iter().any(|(o, _)| o == c)).collect();
        if !uncovered.is_empty() {
            f.notes.push(format!("XPS maps no TX queue for CPU(s) {}", cpulist::format(&uncovered)));
        }
    }
    xps_crossing_irqs(d, &owner, f);
}

/// Crossing: a TX queue whose IRQ runs on CPU c while c sends on another queue.
fn xps_crossing_irqs(d: &DeviceState, owner: &[(usize, usize)], f: &mut Findings) {
    for q in &d.tx {
        let Some(x) = netdev::tx_irq(&d.irqs, q.queue) else { continue };
        let Some(c) = x.cpus.as_ref().filter(|c| c.len() == 1).map(|c| c[0]) else { continue };
        if let Some((_, other)) = owner.iter().find(|(o, t)| *o == c && *t != q.queue) {
            f.problems.push(format!(
                "XPS crosses: CPU {c} sends on tx-{other} but tx-{}'s IRQ {} runs on CPU {c}",
                q.queue, x.irq
            ));
        }
    }
}

/// irqbalance: the device's IRQs it has not been told to leave alone.
fn irqbalance_owned_irqs(d: &DeviceState, ib: &IrqBalance, f: &mut Findings) {
    let owned: Vec<u32> = d
        .irqs
        .iter()
        .filter(|x| x.kind != IrqKind::Other && !ib.banned_irqs.contains(&x.irq))
        .map(|x| x.irq)
        .collect();
    if !owned.is_empty() {
        f.problems.push(format!(
            "irqbalance (pid {}) owns the affinity of IRQ(s) {}: it will move them; add {} to its \
             arguments (IRQBALANCE_ARGS in /etc/default/irqbalance or /etc/sysconfig/irqbalance) and \
             restart it, or stop it",
            ib.pid,
            owned.iter().map(u32::to_string).collect::<Vec<_>>().join(","),
            owned.iter().map(|i| format!("--banirq={i}")).collect::<Vec<_>>().join(" ")
        ));
    }
}

// nicres: NIC drops during the check.

/// Notes `v` with a warning when the NIC's drop counters grew between the
/// check's start (`before`) and its end (`after`): each counter named with
/// its growth and the source that answered. Frames lost now are not a
/// misalignment, so the verdict stands. Returns whether any grew.
pub fn note_drops(
    v: &mut DeviceVerdict,
    before: Option<&crate::softnet::NicDrops>,
    after: Option<&crate::softnet::NicDrops>,
) -> bool {
    let (Some(a), Some(b)) = (before, after) else { return false };
    let grown = crate::softnet::drops_grown(a, b);
    if grown.is_empty() {
        return false;
    }
    let list: Vec<String> = grown.iter().map(|(k, d)| format!("{k} +{d}")).collect();
    v.notes.push(format!(
        "warning: the NIC dropped frames during the check ({}, from {}): out of RX buffers or overrun; \
         larger rings (plan --rx-ring) or more queues may help",
        list.join(", "),
        b.source
    ));
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::tests::{nic, topo};

    fn pin(d: &mut DeviceState, cpus: &[usize]) {
        for (x, &c) in d.irqs.iter_mut().zip(cpus) {
            x.cpus = Some(vec![c]);
        }
        for (q, &c) in d.tx.iter_mut().zip(cpus) {
            q.xps_cpus = Some(vec![c]);
        }
    }

    #[test]
    fn aligned_nic() {
        let t = topo(4);
        let mut d = nic("eth0", 2, Some(1), 128);
        pin(&mut d, &[2, 3]);
        let v = check_device(&t, &d, None);
        assert!(v.aligned, "{v:?}");
        assert!(v.notes.iter().any(|n| n.contains("CPU(s) 0-1 have no RX queue")), "{v:?}");
    }

    #[test]
    fn an_unreadable_irq_affinity_is_no_aligned_verdict() {
        let t = topo(4);
        let mut d = nic("eth0", 2, Some(1), 128);
        pin(&mut d, &[2, 3]);
        d.irqs[1].cpus = None;
        let v = check_device(&t, &d, None);
        assert!(!v.aligned, "{v:?}");
        assert!(v.problems.iter().any(|p| p.ends_with("affinity unreadable: not checked")), "{v:?}");
    }

    #[test]
    fn table_entries_against_the_host_pick() {
        // Table i -> ring i % 2. Rings on CPUs 2, 3: entry i's ring runs on
        // (i & 127) % 2 over CPUs 2-3, the host's pick: no mismatch.
        let t = topo(4);
        let mut d = nic("eth0", 2, Some(1), 256);
        pin(&mut d, &[2, 3]);
        let v = check_device(&t, &d, None);
        assert!(!v.notes.iter().any(|n| n.contains("table entries send")), "{v:?}");
        // Rings swapped: every entry goes to the other CPU.
        pin(&mut d, &[3, 2]);
        let v = check_device(&t, &d, None);
        assert!(v.notes.iter().any(|n| n.starts_with("256 of 256 table entries send")), "{v:?}");
    }

    #[test]
    fn off_node_when_the_node_has_room() {
        let t = topo(4);
        let mut d = nic("eth0", 2, Some(1), 128);
        pin(&mut d, &[0, 3]);
        let v = check_device(&t, &d, None);
        assert!(!v.aligned);
        assert!(
            v.problems.iter().any(|p| p.contains(
                "CPU(s) 0 off the device's NUMA node 1 (CPUs 2-3), which has a CPU for every queue"
            )),
            "{v:?}"
        );
        // A node too small for the queues: a note only.
        let mut d = nic("eth0", 4, Some(1), 128);
        pin(&mut d, &[0, 1, 2, 3]);
        let v = check_device(&t, &d, None);
        assert!(v.aligned, "{v:?}");
        assert!(v.notes.iter().any(|n| n.contains("fewer CPUs than queues")), "{v:?}");
        // Node 1's CPU 3 isolated: 2 queues no longer fit its one free CPU,
        // so a queue on node 0 is a note, not a problem (the plan puts it there).
        let mut t = topo(4);
        t.isolated = vec![3];
        let mut d = nic("eth0", 2, Some(1), 128);
        pin(&mut d, &[0, 2]);
        let v = check_device(&t, &d, None);
        assert!(v.aligned, "{v:?}");
        assert!(v.notes.iter().any(|n| n.contains("isolated ones not counted")), "{v:?}");
    }

    #[test]
    fn input_transforms() {
        let t = topo(4);
        let mut d = nic("eth0", 2, Some(1), 128);
        pin(&mut d, &[2, 3]);
        let set = |d: &mut DeviceState, bits: u8| {
            if let rsskit_linux::ethtool::Reported::Supported(r) = &mut d.rss {
                r.input_xfrm = rsskit_linux::ethtool::xfrm_names(bits);
            }
        };
        set(&mut d, 1);
        let v = check_device(&t, &d, None);
        assert!(v.aligned && v.notes.iter().any(|n| n.starts_with("input transform symmetric-xor")), "{v:?}");
        set(&mut d, 0x84);
        let v = check_device(&t, &d, None);
        assert!(!v.aligned, "{v:?}");
        assert_eq!(
            v.problems,
            vec!["RSS input transform 0x84 (bit2,bit7) is not one rsskit models: where flows land cannot be predicted"]
        );
    }

    #[test]
    fn keys() {
        assert!(key_is_symmetric(&[0x6d, 0x5a].repeat(20)));
        assert!(!key_is_symmetric(&[0; 40]));
        let t = topo(4);
        let mut d = nic("eth0", 2, None, 128);
        pin(&mut d, &[0, 1]);
        if let rsskit_linux::ethtool::Reported::Supported(r) = &mut d.rss {
            r.key = vec![0; 40];
        }
        let v = check_device(&t, &d, None);
        assert!(v.problems.iter().any(|p| p.contains("fails the key check")), "{v:?}");
        let ib = IrqBalance { pid: 9, banned_irqs: vec![100, 101] };
        if let rsskit_linux::ethtool::Reported::Supported(r) = &mut d.rss {
            r.key = rsskit_core::key::MICROSOFT_KEY.to_vec();
        }
        assert!(check_device(&t, &d, Some(&ib)).aligned, "banned IRQs are not irqbalance's");
        let ib = IrqBalance { pid: 9, banned_irqs: vec![100] };
        let v = check_device(&t, &d, Some(&ib));
        assert!(v.problems.iter().any(|p| p.contains("IRQ(s) 101") && p.contains("--banirq=101")), "{v:?}");
    }

    // nicres
    #[test]
    fn drops_during_the_check_are_a_warning_naming_the_counter() {
        use crate::softnet::NicDrops;
        let mut v = DeviceVerdict { name: "eth0".into(), aligned: true, problems: vec![], notes: vec![] };
        let a = NicDrops { source: "ethtool -S", counters: [("rx_out_of_buffer", 3)].into() };
        assert!(!note_drops(&mut v, Some(&a), Some(&a)));
        let b = NicDrops { source: "ethtool -S", counters: [("rx_out_of_buffer", 10)].into() };
        assert!(note_drops(&mut v, Some(&a), Some(&b)));
        assert!(v.aligned, "a warning, not a misalignment");
        assert!(v.notes[0].contains("rx_out_of_buffer +7, from ethtool -S"), "{:?}", v.notes);
        assert!(!note_drops(&mut v, None, Some(&b)));
    }
}
