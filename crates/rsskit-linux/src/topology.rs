//! CPU and NUMA topology from sysfs: online CPUs, NUMA nodes and their CPU
//! lists (`/sys/devices/system/node/nodeN/cpulist`), and each CPU's core and
//! package ids (`/sys/devices/system/cpu/cpuN/topology/`).
//!
//! Every reader takes the sysfs root as a parameter so tests can point it at a
//! fake tree; [`Topology::read`] uses the real `/sys`.

use crate::cpulist;
use serde::Serialize;
use std::fs;
use std::path::Path;

/// One NUMA node and the CPUs it holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NumaNode {
    /// NUMA node id.
    pub node: usize,
    /// CPUs on this node.
    pub cpus: Vec<usize>,
}

/// Where one CPU sits: its core and package (socket) ids, when sysfs tells.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CpuPlace {
    /// CPU number.
    pub cpu: usize,
    /// Core id (`topology/core_id`).
    pub core_id: Option<usize>,
    /// Package (socket) id (`topology/physical_package_id`).
    pub package_id: Option<usize>,
    /// NUMA node holding the CPU.
    pub node: Option<usize>,
}

/// The host's CPUs and NUMA nodes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Topology {
    /// Online CPUs, sorted.
    pub online: Vec<usize>,
    /// NUMA nodes, sorted by id; empty when the kernel has no NUMA support
    /// (no `/sys/devices/system/node`).
    pub nodes: Vec<NumaNode>,
    /// One entry per online CPU.
    pub cpus: Vec<CpuPlace>,
    /// CPUs isolated from the scheduler's domains (`isolcpus=`,
    /// `/sys/devices/system/cpu/isolated`); empty when none or unknown.
    pub isolated: Vec<usize>,
    /// CPUs running without the tick (`nohz_full=`,
    /// `/sys/devices/system/cpu/nohz_full`); empty when none or unknown.
    pub nohz_full: Vec<usize>,
}

fn read_trim(p: &Path) -> Option<String> {
    fs::read_to_string(p).ok().map(|s| s.trim().to_string())
}

fn read_usize(p: &Path) -> Option<usize> {
    read_trim(p)?.parse().ok()
}

impl Topology {
    /// Reads the live topology from `/sys`.
    pub fn read() -> Topology {
        Topology::read_from(Path::new("/sys"))
    }

    /// Reads the topology from a sysfs tree rooted at `sys`.
    pub fn read_from(sys: &Path) -> Topology {
        let online = read_trim(&sys.join("devices/system/cpu/online"))
            .and_then(|s| cpulist::parse(&s).ok())
            .unwrap_or_else(cpulist::online);
        let nodes = numa_nodes(sys);
        let cpus = online
            .iter()
            .map(|&cpu| {
                let t = sys.join(format!("devices/system/cpu/cpu{cpu}/topology"));
                CpuPlace {
                    cpu,
                    core_id: read_usize(&t.join("core_id")),
                    package_id: read_usize(&t.join("physical_package_id")),
                    node: nodes.iter().find(|n| n.cpus.contains(&cpu)).map(|n| n.node),
                }
            })
            .collect();
        let cpu_list = |f: &str| {
            // "(null)" is what the kernel prints for an empty nohz_full mask.
            read_trim(&sys.join("devices/system/cpu").join(f))
                .filter(|s| !s.is_empty() && s != "(null)")
                .and_then(|s| cpulist::parse(&s).ok())
                .unwrap_or_default()
        };
        Topology { online, nodes, cpus, isolated: cpu_list("isolated"), nohz_full: cpu_list("nohz_full") }
    }

    /// CPUs that take no IRQ unless named: isolated or `nohz_full`, sorted.
    pub fn reserved(&self) -> Vec<usize> {
        let mut v: Vec<usize> = self.isolated.iter().chain(&self.nohz_full).copied().collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    /// The NUMA node holding `cpu`, if known.
    pub fn node_of(&self, cpu: usize) -> Option<usize> {
        self.nodes.iter().find(|n| n.cpus.contains(&cpu)).map(|n| n.node)
    }
}

/// NUMA nodes under `sys/devices/system/node/nodeN`, sorted by id. A node
/// without CPUs (memory only) is listed with an empty CPU list.
pub fn numa_nodes(sys: &Path) -> Vec<NumaNode> {
    let dir = sys.join("devices/system/node");
    let Ok(entries) = fs::read_dir(&dir) else { return Vec::new() };
    let mut nodes: Vec<NumaNode> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let node = name.strip_prefix("node")?.parse::<usize>().ok()?;
            let cpus = read_trim(&e.path().join("cpulist"))
                .filter(|s| !s.is_empty())
                .and_then(|s| cpulist::parse(&s).ok())
                .unwrap_or_default();
            Some(NumaNode { node, cpus })
        })
        .collect();
    nodes.sort_by_key(|n| n.node);
    nodes
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    struct TempTree(PathBuf);
    impl TempTree {
        fn new(tag: &str) -> TempTree {
            let p = std::env::temp_dir().join(format!("rsskit-topo-{tag}-{}", std::process::id()));
            let _ = fs::remove_dir_all(&p);
            fs::create_dir_all(&p).unwrap();
            TempTree(p)
        }
        fn put(&self, rel: &str, text: &str) {
            let p = self.0.join(rel);
            fs::create_dir_all(p.parent().unwrap()).unwrap();
            fs::write(p, text).unwrap();
        }
    }
    impl Drop for TempTree {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn two_nodes_and_a_memory_only_node() {
        let t = TempTree::new("two");
        t.put("devices/system/cpu/online", "0-3\n");
        t.put("devices/system/node/node0/cpulist", "0-1\n");
        t.put("devices/system/node/node1/cpulist", "2-3\n");
        t.put("devices/system/node/node2/cpulist", "\n");
        t.put("devices/system/node/possible", "0-2\n");
        t.put("devices/system/cpu/cpu2/topology/core_id", "5\n");
        t.put("devices/system/cpu/cpu2/topology/physical_package_id", "1\n");
        t.put("devices/system/cpu/isolated", "2-3\n");
        t.put("devices/system/cpu/nohz_full", "1,3\n");
        let topo = Topology::read_from(&t.0);
        assert_eq!(topo.online, vec![0, 1, 2, 3]);
        assert_eq!(
            topo.nodes,
            vec![
                NumaNode { node: 0, cpus: vec![0, 1] },
                NumaNode { node: 1, cpus: vec![2, 3] },
                NumaNode { node: 2, cpus: vec![] },
            ]
        );
        assert_eq!(topo.cpus[2], CpuPlace { cpu: 2, core_id: Some(5), package_id: Some(1), node: Some(1) });
        assert_eq!(topo.cpus[0].core_id, None);
        assert_eq!(topo.node_of(3), Some(1));
        assert_eq!(topo.node_of(9), None);
        assert_eq!((topo.isolated.clone(), topo.nohz_full.clone()), (vec![2, 3], vec![1, 3]));
        assert_eq!(topo.reserved(), vec![1, 2, 3]);
    }

    #[test]
    fn no_numa_directory() {
        let t = TempTree::new("flat");
        t.put("devices/system/cpu/online", "0\n");
        let topo = Topology::read_from(&t.0);
        assert_eq!(topo.online, vec![0]);
        assert!(topo.nodes.is_empty());
        assert!(topo.reserved().is_empty(), "no isolated or nohz_full file: none reserved");
    }

    #[test]
    fn live_host_has_cpus() {
        let topo = Topology::read();
        assert!(!topo.online.is_empty());
        assert_eq!(topo.cpus.len(), topo.online.len());
    }
}
