//! Captures of real host shapes, written in `rsskit capture`'s format at
//! test time (a generator, not thousands of committed files). Where a
//! capture could not be taken from a real host, the shape follows the
//! vendors' published topology:
//!
//! - [`epyc_384`]: 2 x AMD EPYC 9654 (Genoa, 96 cores / 192 threads per
//!   socket, AMD's EPYC 9004 product brief), NPS4 (4 NUMA nodes per socket,
//!   AMD's "EPYC 9004 BIOS and workload tuning guide"), Linux numbering (all
//!   first threads, socket by socket, then all siblings), an mlx5 NIC
//!   (ConnectX-6 Dx) with 63 channels and a 512-entry table (mlx5e's RQT
//!   size for 63 channels) named `mlx5_compN@pci:...` as mlx5 names them.
//! - [`xeon_224`]: 2 x Intel Xeon Platinum 8480+ (Sapphire Rapids, 56 cores
//!   / 112 threads per socket, Intel ARK), SNC off (one node per socket),
//!   two E810 (ice) NICs, one per socket (48 and 64 queues: the second has
//!   more queues than its node has cores), 2048-entry PF tables (ice's
//!   `ICE_LUT_PF_SIZE`), 52-byte keys, vectors `ice-IF-TxRx-N`.
//! - [`isolated_64`]: 1 socket, 32 cores / 64 threads, `isolcpus=8-31
//!   nohz_full=8-31` (first threads only, as often written), two i40e NICs
//!   in `bond0`, and VLAN `bond0.100` on the bond.
//! - [`vm_4`]: a 4-vCPU guest, no SMT, one virtio-net NIC with 4 queue
//!   pairs and no RSS table (virtio without the RSS feature), its IRQs on
//!   the virtio PCI function (`device/..`).
//! - [`huge_1024`]: the size limit the issue names: 1,024 threads, a NIC of
//!   256 queues and a 2,048-entry table whose node is unknown.

#![allow(dead_code)]

use rsskit_host::capture::{self, Answer, ChannelFacts, EthtoolFacts, Manifest, RssFacts};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};

/// How a NIC names its vectors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Vectors {
    /// `PREFIX-IF-TxRx-N` (ice, i40e, ixgbe).
    TxRx(&'static str),
    /// `mlx5_compN@pci:BDF` plus `mlx5_async0`.
    Mlx5,
    /// `virtioK-input.N` / `virtioK-output.N` on the parent PCI function.
    Virtio,
}

/// One NIC of a shape.
#[derive(Clone, Debug)]
pub struct Nic {
    pub name: String,
    pub driver: &'static str,
    pub queues: usize,
    /// NUMA node (`None`: the platform says -1).
    pub node: Option<usize>,
    /// Table entries; 0 = no RSS reported.
    pub table: usize,
    pub key_len: usize,
    pub vectors: Vectors,
}

/// A host shape.
#[derive(Clone, Debug)]
pub struct Shape {
    pub sockets: usize,
    pub cores_per_socket: usize,
    pub threads_per_core: usize,
    pub nodes_per_socket: usize,
    pub isolated: Vec<usize>,
    pub nohz_full: Vec<usize>,
    pub nics: Vec<Nic>,
    /// Bonds and VLANs: name and the interfaces below it (`lower_*`).
    pub bonds: Vec<(String, Vec<String>)>,
}

impl Shape {
    pub fn cpus(&self) -> usize {
        self.sockets * self.cores_per_socket * self.threads_per_core
    }

    /// Linux's x86 numbering: CPU c is thread `c / cores` of core `c % cores`.
    /// Returns (socket, core_id, node).
    pub fn place(&self, cpu: usize) -> (usize, usize, usize) {
        let cores = self.sockets * self.cores_per_socket;
        let g = cpu % cores;
        let (socket, core) = (g / self.cores_per_socket, g % self.cores_per_socket);
        let per_node = self.cores_per_socket / self.nodes_per_socket;
        (socket, core, socket * self.nodes_per_socket + core / per_node)
    }
}

fn nic(
    name: &str,
    driver: &'static str,
    queues: usize,
    node: Option<usize>,
    table: usize,
    key_len: usize,
    v: Vectors,
) -> Nic {
    Nic { name: name.into(), driver, queues, node, table, key_len, vectors: v }
}

pub fn epyc_384() -> Shape {
    Shape {
        sockets: 2,
        cores_per_socket: 96,
        threads_per_core: 2,
        nodes_per_socket: 4,
        isolated: vec![],
        nohz_full: vec![],
        nics: vec![nic("enp65s0f0np0", "mlx5_core", 63, Some(2), 512, 40, Vectors::Mlx5)],
        bonds: vec![],
    }
}

pub fn xeon_224() -> Shape {
    Shape {
        sockets: 2,
        cores_per_socket: 56,
        threads_per_core: 2,
        nodes_per_socket: 1,
        isolated: vec![],
        nohz_full: vec![],
        nics: vec![
            nic("ens1f0", "ice", 48, Some(0), 2048, 52, Vectors::TxRx("ice")),
            nic("ens7f0", "ice", 64, Some(1), 2048, 52, Vectors::TxRx("ice")),
        ],
        bonds: vec![],
    }
}

pub fn isolated_64() -> Shape {
    Shape {
        sockets: 1,
        cores_per_socket: 32,
        threads_per_core: 2,
        nodes_per_socket: 1,
        isolated: (8..32).collect(),
        nohz_full: (8..32).collect(),
        nics: vec![
            nic("eth0", "i40e", 16, Some(0), 512, 52, Vectors::TxRx("i40e")),
            nic("eth1", "i40e", 16, Some(0), 512, 52, Vectors::TxRx("i40e")),
        ],
        // A VLAN on the bond: its one lower link is the bond.
        bonds: vec![
            ("bond0".into(), vec!["eth0".into(), "eth1".into()]),
            ("bond0.100".into(), vec!["bond0".into()]),
        ],
    }
}

pub fn vm_4() -> Shape {
    Shape {
        sockets: 1,
        cores_per_socket: 4,
        threads_per_core: 1,
        nodes_per_socket: 1,
        isolated: vec![],
        nohz_full: vec![],
        nics: vec![nic("ens3", "virtio_net", 4, None, 0, 0, Vectors::Virtio)],
        bonds: vec![],
    }
}

pub fn huge_1024() -> Shape {
    Shape {
        sockets: 2,
        cores_per_socket: 256,
        threads_per_core: 2,
        nodes_per_socket: 4,
        isolated: vec![],
        nohz_full: vec![],
        nics: vec![nic("eth0", "mlx5_core", 256, None, 2048, 40, Vectors::Mlx5)],
        bonds: vec![],
    }
}

/// `n` NICs of `queues` queues on the EPYC, spread over its nodes (the cost benchmark).
pub fn epyc_384_with(n: usize, queues: usize) -> Shape {
    let mut s = epyc_384();
    s.nics = (0..n)
        .map(|i| {
            nic(&format!("enp{i}s0"), "mlx5_core", queues, Some(i * 8 / n.max(1)), 512, 40, Vectors::Mlx5)
        })
        .collect();
    s
}

fn list(v: &[usize]) -> String {
    v.iter().map(usize::to_string).collect::<Vec<_>>().join(",")
}

/// A directory removed when dropped.
pub struct Dir(pub PathBuf);

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn put(root: &Path, rel: &str, text: &str) {
    let p = root.join(rel);
    fs::create_dir_all(p.parent().unwrap()).unwrap();
    fs::write(p, text).unwrap();
}

/// Writes the capture of `shape` into a fresh directory named after `tag`.
pub fn write(shape: &Shape, tag: &str) -> Dir {
    let dir = std::env::temp_dir().join(format!("rsskit-bighost-{tag}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    let n = shape.cpus();
    let sys = "sys/devices/system";
    put(&dir, &format!("{sys}/cpu/online"), &format!("0-{}\n", n - 1));
    put(&dir, &format!("{sys}/cpu/isolated"), &format!("{}\n", list(&shape.isolated)));
    let nohz = if shape.nohz_full.is_empty() { "(null)".to_string() } else { list(&shape.nohz_full) };
    put(&dir, &format!("{sys}/cpu/nohz_full"), &format!("{nohz}\n"));
    let mut nodes: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for c in 0..n {
        let (socket, core, node) = shape.place(c);
        put(&dir, &format!("{sys}/cpu/cpu{c}/topology/core_id"), &format!("{core}\n"));
        put(&dir, &format!("{sys}/cpu/cpu{c}/topology/physical_package_id"), &format!("{socket}\n"));
        nodes.entry(node).or_default().push(c);
    }
    for (node, cpus) in &nodes {
        put(&dir, &format!("{sys}/node/node{node}/cpulist"), &format!("{}\n", list(cpus)));
    }
    // /proc/interrupts: a header of n CPU columns, then each vector.
    let mut interrupts = String::new();
    for c in 0..n {
        let _ = write!(interrupts, "       CPU{c}");
    }
    interrupts.push('\n');
    let zeros = " 0".repeat(n);
    let mut irq = 100u32;
    let mut names = Vec::new();
    for (k, nic) in shape.nics.iter().enumerate() {
        let base = format!("sys/class/net/{}", nic.name);
        put(&dir, &format!("{base}/operstate"), "up\n");
        put(&dir, &format!("{base}/mtu"), "1500\n");
        let node = nic.node.map_or("-1".to_string(), |x| x.to_string());
        put(&dir, &format!("{base}/device/numa_node"), &format!("{node}\n"));
        for q in 0..nic.queues {
            put(&dir, &format!("{base}/queues/rx-{q}/rps_cpus"), "0\n");
            put(&dir, &format!("{base}/queues/rx-{q}/rps_flow_cnt"), "0\n");
            put(&dir, &format!("{base}/queues/tx-{q}/xps_cpus"), "0\n");
        }
        let bdf = format!("0000:{:02x}:00.0", 0x41 + k);
        let mut vectors: Vec<String> = Vec::new();
        match nic.vectors {
            Vectors::TxRx(p) => {
                vectors.push(format!("{p}-{}:misc", bdf));
                vectors.extend((0..nic.queues).map(|q| format!("{p}-{}-TxRx-{q}", nic.name)));
            }
            Vectors::Mlx5 => {
                vectors.push(format!("mlx5_async0@pci:{bdf}"));
                vectors.extend((0..nic.queues).map(|q| format!("mlx5_comp{q}@pci:{bdf}")));
            }
            Vectors::Virtio => {
                vectors.push(format!("virtio{k}-config"));
                for q in 0..nic.queues {
                    vectors.push(format!("virtio{k}-input.{q}"));
                    vectors.push(format!("virtio{k}-output.{q}"));
                }
            }
        }
        // virtio's vectors belong to the PCI function above the device: `device/..`.
        let msi = if nic.vectors == Vectors::Virtio { "msi_irqs" } else { "device/msi_irqs" };
        for v in vectors {
            put(&dir, &format!("{base}/{msi}/{irq}"), "");
            names.push((irq, format!("IR-PCI-MSIX-{bdf} 0-edge {v}")));
            irq += 1;
        }
        let rss = if nic.table == 0 {
            Answer::Unsupported("ETHTOOL_GRSSH: Operation not supported (os error 95)".into())
        } else {
            Answer::Supported(RssFacts {
                key: (0..nic.key_len).map(|i| format!("{:02x}", (i * 37 + 11) % 251)).collect(),
                table: (0..nic.table).map(|i| (i % nic.queues) as u32).collect(),
                hfunc: vec!["toeplitz".into()],
                input_xfrm: vec![],
                source: "ETHTOOL_GRSSH".into(),
            })
        };
        let facts = EthtoolFacts {
            driver: Some(nic.driver.into()),
            channels: Answer::Supported(ChannelFacts {
                combined: nic.queues as u32,
                rx: 0,
                tx: 0,
                other: 1,
                max_combined: nic.queues as u32,
                max_rx: 0,
                max_tx: 0,
                max_other: 1,
            }),
            rss,
            hash: Answer::Unsupported("ETHTOOL_GRXFH: Operation not supported (os error 95)".into()),
        };
        capture::write_ethtool(&dir, &nic.name, &facts).unwrap();
    }
    for (irq, desc) in &names {
        let _ = writeln!(interrupts, "{irq:>4}:{zeros} {desc}");
        put(&dir, &format!("proc/irq/{irq}/smp_affinity_list"), &format!("0-{}\n", n - 1));
        put(&dir, &format!("proc/irq/{irq}/effective_affinity_list"), "0\n");
    }
    put(&dir, "proc/interrupts", &interrupts);
    put(&dir, "proc/sys/net/core/rps_sock_flow_entries", "0\n");
    for (bond, members) in &shape.bonds {
        let base = format!("sys/class/net/{bond}");
        put(&dir, &format!("{base}/operstate"), "up\n");
        put(&dir, &format!("{base}/mtu"), "1500\n");
        for m in members {
            fs::create_dir_all(dir.join(&base).join(format!("lower_{m}"))).unwrap();
        }
    }
    fs::create_dir_all(dir.join("sys/class/net")).unwrap();
    let mut ifaces: Vec<String> = shape.nics.iter().map(|x| x.name.clone()).collect();
    ifaces.extend(shape.bonds.iter().map(|b| b.0.clone()));
    capture::write_manifest(
        &dir,
        &Manifest {
            format: capture::FORMAT,
            rsskit_version: "generated".into(),
            kernel: None,
            taken_unix: 0,
            interfaces: ifaces,
            skipped: vec![],
        },
    )
    .unwrap();
    capture::set_modes(&dir).unwrap();
    Dir(dir)
}
