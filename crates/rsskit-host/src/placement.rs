//! Which CPUs take a NIC's queues, on hosts of any size (no I/O): the
//! placement rules [`crate::plan`] follows, each printed as a named line in
//! the device's notes (`rule NAME: ...`) when it shapes the plan:
//!
//! - `isolated`: CPUs in `isolcpus=` or `nohz_full=` get no IRQ and no RPS
//!   unless `--cpus` names them.
//! - `app-cpus`: CPUs set aside for the application (`--app-cpus`) get no
//!   IRQ and no RPS; the plan's steering runs rsskit's servers there.
//! - `numa`: the NIC's own node first (its cores, then their SMT
//!   siblings), then the other nodes of its socket, then the rest (lowest
//!   node first): `check` flags queues off a node that has a CPU for each.
//! - `smt`: within those, one thread per physical core (package,
//!   `core_id`) first; SMT siblings only when the node's cores are fewer
//!   than the queues.
//! - `shared-node`: a NIC gets cores that no earlier NIC's queues use, while
//!   its node has enough of them.
//! - `size`: past 128 CPUs or queues DragonFly's model (the host looks at
//!   `hash & 127`) does not apply: queues are bound in order and the table
//!   spreads evenly over the bound queues ([`Bind::Direct`]).
//!
//! The ringmap ([`rsskit_core::ringmap`]) still binds queues on hosts it
//! fits, so small hosts keep their plans.

use rsskit_core::ringmap::Ringmap;
use rsskit_linux::cpulist;
use rsskit_linux::topology::Topology;
use std::collections::{BTreeMap, BTreeSet};

/// One physical core: its package and `core_id` (core ids repeat across
/// packages); a CPU without a `core_id` is a core of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CoreKey {
    package: Option<usize>,
    core: Option<usize>,
    /// The CPU, when its core id is unknown.
    lone_cpu: Option<usize>,
}

/// Where each online CPU sits, looked up once.
pub struct CpuMap {
    place: BTreeMap<usize, (CoreKey, Option<usize>)>,
}

impl CpuMap {
    /// Core and node of every CPU the topology describes.
    pub fn new(topo: &Topology) -> CpuMap {
        let mut node_of = BTreeMap::new();
        for n in &topo.nodes {
            for &c in &n.cpus {
                node_of.insert(c, n.node);
            }
        }
        let mut place = BTreeMap::new();
        for c in &topo.cpus {
            let key = CoreKey {
                package: c.package_id,
                core: c.core_id,
                lone_cpu: c.core_id.is_none().then_some(c.cpu),
            };
            place.insert(c.cpu, (key, c.node.or_else(|| node_of.get(&c.cpu).copied())));
        }
        for &c in &topo.online {
            place.entry(c).or_insert((
                CoreKey { package: None, core: None, lone_cpu: Some(c) },
                node_of.get(&c).copied(),
            ));
        }
        CpuMap { place }
    }

    /// The core of `cpu`.
    pub fn core(&self, cpu: usize) -> CoreKey {
        self.place.get(&cpu).map(|p| p.0).unwrap_or(CoreKey {
            package: None,
            core: None,
            lone_cpu: Some(cpu),
        })
    }

    /// The NUMA node of `cpu`, if known.
    pub fn node(&self, cpu: usize) -> Option<usize> {
        self.place.get(&cpu).and_then(|p| p.1)
    }
}

/// One core's CPUs among those allowed, ascending (the first is its
/// "primary" thread, the rest its SMT siblings).
#[derive(Debug, Clone)]
struct Core {
    key: CoreKey,
    node: Option<usize>,
    cpus: Vec<usize>,
}

/// The cores of `cpus`, by their first CPU.
fn cores_of(map: &CpuMap, cpus: &[usize]) -> Vec<Core> {
    let mut by: BTreeMap<CoreKey, Core> = BTreeMap::new();
    for &c in cpus {
        let key = map.core(c);
        by.entry(key).or_insert_with(|| Core { key, node: map.node(c), cpus: Vec::new() }).cpus.push(c);
    }
    let mut v: Vec<Core> = by.into_values().collect();
    for c in &mut v {
        c.cpus.sort_unstable();
    }
    v.sort_by_key(|c| c.cpus[0]);
    v
}

/// The CPUs chosen for one device and the rules that chose them.
#[derive(Debug, Clone, Default)]
pub struct Choice {
    /// The CPUs, ascending.
    pub cpus: Vec<usize>,
    /// `rule NAME: ...` lines.
    pub rules: Vec<String>,
}

/// The CPUs that may take IRQs when `--cpus` is not given: online, not
/// the application's (`app`), not isolated or `nohz_full` (all online
/// non-application ones, with a rule line saying so, when every CPU is).
fn eligible(topo: &Topology, app: &[usize], rules: &mut Vec<String>) -> Vec<usize> {
    let irq_side: Vec<usize> = topo.online.iter().copied().filter(|c| !app.contains(c)).collect();
    if !app.is_empty() {
        rules.push(format!(
            "rule app-cpus: CPUs {} are the application's: no IRQ or RPS there; rsskit's servers run on them",
            cpulist::format(app)
        ));
    }
    let topo = &Topology { online: irq_side, ..topo.clone() };
    let reserved = topo.reserved();
    let online_reserved: Vec<usize> = topo.online.iter().copied().filter(|c| reserved.contains(c)).collect();
    if online_reserved.is_empty() {
        return topo.online.clone();
    }
    let left: Vec<usize> = topo.online.iter().copied().filter(|c| !reserved.contains(c)).collect();
    if left.is_empty() {
        rules.push(
            "rule isolated: every online CPU is isolated or nohz_full: they take the IRQs, as no \
             other CPU can"
                .into(),
        );
        return topo.online.clone();
    }
    rules.push(format!(
        "rule isolated: CPUs {} (isolated {}, nohz_full {}) get no IRQ or RPS; name them in --cpus \
         to use them",
        cpulist::format(&online_reserved),
        list_or_none(&topo.isolated),
        list_or_none(&topo.nohz_full),
    ));
    left
}

fn list_or_none(v: &[usize]) -> String {
    if v.is_empty() {
        "none".into()
    } else {
        cpulist::format(v)
    }
}

/// Rule lines for CPUs named with `--cpus`: named isolated CPUs take IRQs.
pub fn named_rules(topo: &Topology, cpus: &[usize]) -> Vec<String> {
    let reserved = topo.reserved();
    let named: Vec<usize> = cpus.iter().copied().filter(|c| reserved.contains(c)).collect();
    if named.is_empty() {
        return Vec::new();
    }
    vec![format!(
        "rule isolated: CPUs {} are isolated or nohz_full but named in --cpus: they take IRQs",
        cpulist::format(&named)
    )]
}

/// The default CPUs of a device on NUMA node `node` with `nrx` RX queues.
/// With hardware RSS: the node's cores (one thread each) when it has enough
/// for the queues, free ones (no earlier NIC's queue on them, `used`) first;
/// else the node's cores and then their SMT siblings, then other nodes'
/// cores (same socket first), then their siblings. Without hardware RSS
/// (RPS spreads the flows): every allowed CPU of the node, else all of them.
pub fn default_choice(
    topo: &Topology,
    map: &CpuMap,
    node: Option<usize>,
    nrx: usize,
    hw: bool,
    used: &BTreeSet<CoreKey>,
    app: &[usize],
) -> Choice {
    let mut rules = Vec::new();
    let allowed = eligible(topo, app, &mut rules);
    let local_node = node.filter(|&n| allowed.iter().any(|&c| map.node(c) == Some(n)));
    let multi_node = topo.nodes.iter().filter(|n| !n.cpus.is_empty()).count() > 1;
    if !hw {
        let local: Vec<usize> = match local_node {
            Some(n) => allowed.iter().copied().filter(|&c| map.node(c) == Some(n)).collect(),
            None => allowed,
        };
        return Choice { cpus: local, rules };
    }
    let cores = cores_of(map, &allowed);
    let is_local = |c: &Core| local_node.is_none() || c.node == local_node;
    let nic_pkg = local_node.and_then(|n| cores.iter().find(|c| c.node == Some(n)).map(|c| c.key.package));
    let mut order: Vec<&Core> = cores.iter().collect();
    order.sort_by_key(|c| {
        (!is_local(c), used.contains(&c.key), nic_pkg.is_some_and(|p| p != c.key.package), c.node, c.cpus[0])
    });
    let local_total = order.iter().filter(|c| is_local(c)).count();
    let local_free = order.iter().filter(|c| is_local(c) && !used.contains(&c.key)).count();
    let (local, remote): (Vec<&Core>, Vec<&Core>) = order.iter().partition(|c| is_local(c));
    // Preference: the node's cores, then their siblings, then other
    // nodes' cores, then theirs (siblings round by round, in core order).
    let siblings_of = |group: &[&Core], pref: &mut Vec<usize>| {
        let mut round = 1;
        while group.iter().any(|c| c.cpus.len() > round) {
            pref.extend(group.iter().filter_map(|c| c.cpus.get(round).copied()));
            round += 1;
        }
    };
    let mut pref: Vec<usize> = local.iter().map(|c| c.cpus[0]).collect();
    siblings_of(&local, &mut pref);
    let local_threads = pref.len();
    pref.extend(remote.iter().map(|c| c.cpus[0]));
    siblings_of(&remote, &mut pref);
    let mut cpus: Vec<usize> = if local_free >= nrx {
        local.iter().filter(|c| !used.contains(&c.key)).map(|c| c.cpus[0]).collect()
    } else if local_total >= nrx {
        local.iter().map(|c| c.cpus[0]).collect()
    } else {
        pref[..nrx.min(pref.len())].to_vec()
    };
    let threads: usize = cores.iter().map(|c| c.cpus.len()).sum();
    if threads > cores.len() {
        let primaries: BTreeSet<usize> = cores.iter().map(|c| c.cpus[0]).collect();
        let siblings = cpus.iter().filter(|c| !primaries.contains(c)).count();
        let tail =
            if siblings > 0 { format!("; {siblings} siblings take queues here") } else { String::new() };
        rules.push(format!(
            "rule smt: one thread per physical core ({} cores, {threads} threads here); SMT siblings \
             only when a node's cores are fewer than the queues{tail}",
            cores.len()
        ));
    }
    if multi_node {
        rules.push(match local_node {
            Some(n) if nrx <= local_threads => {
                format!("rule numa: the NIC's node {n} first: its CPUs hold the {nrx} queues")
            }
            Some(n) => format!(
                "rule numa: the NIC's node {n} first; it has {local_threads} CPUs for {nrx} queues: \
                 topped up with other nodes' cores, same socket first"
            ),
            None => "rule numa: the NIC's node is unknown: cores of every node".into(),
        });
    }
    let local_used = local_total - local_free;
    if local_used > 0 {
        rules.push(if local_free >= nrx {
            format!(
                "rule shared-node: {local_used} cores already take an earlier NIC's queues: left out \
                 while this node has enough free ones"
            )
        } else {
            format!(
                "rule shared-node: {local_free} free cores here for {nrx} queues: some cores also take \
                 an earlier NIC's queues"
            )
        });
    }
    cpus.sort_unstable();
    Choice { cpus, rules }
}

/// The cores of `cpus`.
pub fn core_set(map: &CpuMap, cpus: impl IntoIterator<Item = usize>) -> BTreeSet<CoreKey> {
    cpus.into_iter().map(|c| map.core(c)).collect()
}

/// A device's queues bound to indices of its CPU list: DragonFly's ringmap
/// where it fits (at most 128 CPUs and queues), else in order.
#[derive(Debug, Clone)]
pub enum Bind {
    /// DragonFly's ringmap.
    Ring(Ringmap),
    /// Queue `q < count` on index `(offset + q) % n`.
    Direct {
        /// CPUs in the list.
        n: usize,
        /// Index of queue 0.
        offset: usize,
        /// Queues bound (at most one per CPU).
        count: usize,
    },
}

impl Bind {
    /// `rings` queues of device unit `unit` on `n` CPUs, in order: unit `u`
    /// starts after the queues of the units before it.
    pub fn direct(n: usize, rings: usize, unit: usize) -> Bind {
        let n = n.max(1);
        let count = rings.clamp(1, n);
        Bind::Direct { n, offset: unit.wrapping_mul(count) % n, count }
    }

    /// Queues bound.
    pub fn count(&self) -> usize {
        match self {
            Bind::Ring(r) => r.count(),
            Bind::Direct { count, .. } => *count,
        }
    }

    /// The CPU index of queue `q`.
    pub fn cpu(&self, q: usize) -> Option<usize> {
        match self {
            Bind::Ring(r) => r.cpu(q),
            Bind::Direct { n, offset, count } => (q < *count).then(|| (offset + q) % n),
        }
    }

    /// The CPU index of every bound queue.
    pub fn cpus(&self) -> Vec<usize> {
        (0..self.count()).filter_map(|q| self.cpu(q)).collect()
    }

    /// The ringmap's grid; the whole list in order.
    pub fn grid(&self) -> usize {
        match self {
            Bind::Ring(r) => r.grid(),
            Bind::Direct { n, .. } => *n,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rsskit_linux::topology::{CpuPlace, NumaNode};

    /// `sockets` x `cores` x `smt` threads, x86 numbering (all first
    /// threads, then all second threads), one node per socket.
    fn host(sockets: usize, cores: usize, smt: usize) -> Topology {
        let n = sockets * cores * smt;
        let place = |c: usize| {
            let core = c % (sockets * cores);
            (core / cores, core % cores)
        };
        Topology {
            online: (0..n).collect(),
            nodes: (0..sockets)
                .map(|s| NumaNode { node: s, cpus: (0..n).filter(|&c| place(c).0 == s).collect() })
                .collect(),
            cpus: (0..n)
                .map(|c| CpuPlace {
                    cpu: c,
                    core_id: Some(place(c).1),
                    package_id: Some(place(c).0),
                    node: Some(place(c).0),
                })
                .collect(),
            isolated: vec![],
            nohz_full: vec![],
        }
    }

    #[test]
    fn cores_before_siblings_and_node_first() {
        let t = host(2, 8, 2);
        let map = CpuMap::new(&t);
        let c = default_choice(&t, &map, Some(1), 4, true, &BTreeSet::new(), &[]);
        assert_eq!(c.cpus, (8..16).collect::<Vec<_>>(), "node 1's first threads");
        // 12 queues on a node of 8 cores / 16 threads: the node's cores, then 4 of their siblings.
        let c = default_choice(&t, &map, Some(1), 12, true, &BTreeSet::new(), &[]);
        assert_eq!(c.cpus, vec![8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27]);
        assert!(
            c.rules.iter().any(|r| r.starts_with("rule smt:") && r.contains("4 siblings")),
            "{:?}",
            c.rules
        );
        // 20 queues: node 1's 16 threads, then 4 cores of node 0 (first threads).
        let c = default_choice(&t, &map, Some(1), 20, true, &BTreeSet::new(), &[]);
        assert_eq!(c.cpus.len(), 20);
        let off: Vec<usize> = c.cpus.iter().copied().filter(|&x| map.node(x) != Some(1)).collect();
        assert_eq!(off, vec![0, 1, 2, 3], "{:?}", c.cpus);
    }

    #[test]
    fn used_cores_left_out_while_enough() {
        let t = host(1, 8, 2);
        let map = CpuMap::new(&t);
        let used = core_set(&map, [0, 1, 2, 3]);
        let c = default_choice(&t, &map, Some(0), 4, true, &used, &[]);
        assert_eq!(c.cpus, vec![4, 5, 6, 7]);
        let c = default_choice(&t, &map, Some(0), 6, true, &used, &[]);
        assert_eq!(c.cpus, (0..8).collect::<Vec<_>>(), "not enough free cores: the node's cores");
    }

    #[test]
    fn isolated_cpus_never_chosen() {
        let mut t = host(1, 16, 2);
        t.isolated = (4..12).collect();
        t.nohz_full = vec![12, 13];
        let map = CpuMap::new(&t);
        for nrx in [1, 4, 8, 30, 64] {
            for hw in [true, false] {
                let c = default_choice(&t, &map, Some(0), nrx, hw, &BTreeSet::new(), &[]);
                assert!(c.cpus.iter().all(|x| !t.reserved().contains(x)), "{nrx} {hw}: {:?}", c.cpus);
                assert!(c.rules.iter().any(|r| r.starts_with("rule isolated:")));
            }
        }
        assert!(named_rules(&t, &[4, 20])[0].contains("CPUs 4 are isolated"));
    }

    #[test]
    fn app_cpus_take_no_irq() {
        let t = host(1, 8, 2);
        let map = CpuMap::new(&t);
        let app: Vec<usize> = (4..8).chain(12..16).collect();
        let c = default_choice(&t, &map, Some(0), 8, true, &BTreeSet::new(), &app);
        assert!(c.cpus.iter().all(|x| !app.contains(x)), "{:?}", c.cpus);
        assert_eq!(c.cpus, vec![0, 1, 2, 3, 8, 9, 10, 11], "4 cores left: their siblings too");
        assert!(c.rules.iter().any(|r| r.starts_with("rule app-cpus: CPUs 4-7,12-15")), "{:?}", c.rules);
    }

    #[test]
    fn direct_binding_in_order() {
        let b = Bind::direct(300, 256, 1);
        assert_eq!(b.count(), 256);
        assert_eq!(b.cpu(0), Some(256));
        assert_eq!(b.cpu(100), Some(56));
        assert_eq!(b.cpu(256), None);
        let mut seen = b.cpus();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len(), 256, "one CPU per queue");
    }
}
