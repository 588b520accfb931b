//! Plans of big (and small) host shapes, read from generated captures
//! (`tests/bighost`): the placement rules hold, not a copy of today's output.

mod bighost;

use bighost::Shape;
use rsskit_host::placement::{core_set, CpuMap};
use rsskit_host::plan::{self, Plan, PlanOptions};
use rsskit_host::sysroot::{DeviceState, Sysroot};
use rsskit_linux::topology::Topology;
use std::collections::BTreeSet;
use std::path::Path;

/// Reads the capture and plans `names` (a bond: its members), as `rsskit plan --from` does.
fn plan_capture(dir: &Path, names: &[&str]) -> (Topology, Vec<DeviceState>, Plan) {
    let (root, _) = Sysroot::capture(dir).expect("a capture rsskit reads");
    let topo = root.topology();
    let mut devs: Vec<DeviceState> = Vec::new();
    for n in names {
        let members = root.members(n);
        let each = if members.is_empty() { vec![n.to_string()] } else { members };
        for m in each {
            devs.push(root.device(&m).unwrap());
        }
    }
    let p = plan::plan(&topo, &devs, &PlanOptions::default()).unwrap();
    (topo, devs, p)
}

/// The rules every default plan keeps, whatever the host.
fn assert_rules(topo: &Topology, devs: &[DeviceState], p: &Plan) {
    let map = CpuMap::new(topo);
    let reserved = topo.reserved();
    let eligible: Vec<usize> = topo.online.iter().copied().filter(|c| !reserved.contains(c)).collect();
    let mut earlier: Vec<(Option<usize>, usize, BTreeSet<_>)> = Vec::new();
    for (d, s) in p.devices.iter().zip(devs) {
        let n = &d.name;
        // No IRQ and no RPS on an isolated or nohz_full CPU.
        for x in &d.irqs {
            assert!(x.cpus.iter().all(|c| !reserved.contains(c)), "{n}: IRQ {} on {:?}", x.irq, x.cpus);
        }
        for q in &d.rx {
            assert!(q.rps_cpus.iter().all(|c| !reserved.contains(c)), "{n}: rx-{} RPS", q.queue);
        }
        if !d.hardware_rss {
            continue;
        }
        let bound: Vec<usize> = d.rx.iter().filter_map(|q| q.cpu).collect();
        let cores = core_set(&map, bound.iter().copied());
        let node_cpus: Vec<usize> = match d.numa_node {
            Some(node) => eligible.iter().copied().filter(|&c| map.node(c) == Some(node)).collect(),
            None => eligible.clone(),
        };
        let node_cores = core_set(&map, node_cpus.iter().copied()).len();
        // At most one queue IRQ per physical core while the queues do not
        // outnumber the NIC node's cores (the host's when the node is unknown).
        if s.rx.len() <= node_cores {
            assert_eq!(cores.len(), bound.len(), "{n}: two queues share a core: {bound:?}");
            assert_eq!(bound.len(), s.rx.len(), "{n}: every queue bound");
        }
        if let Some(node) = d.numa_node {
            // Every queue on the NIC's node while it has a CPU for each (what `check` asks).
            if s.rx.len() <= node_cpus.len() {
                assert!(
                    bound.iter().all(|&c| map.node(c) == Some(node)),
                    "{n}: a queue off node {node}: {bound:?}"
                );
            }
            // Two NICs on one node: disjoint cores while the node has enough.
            for (other_node, other_q, other_cores) in &earlier {
                if *other_node == Some(node) && other_q + s.rx.len() <= node_cores {
                    assert!(cores.is_disjoint(other_cores), "{n}: shares cores with an earlier NIC");
                }
            }
        }
        // The table names exactly the bound queues.
        let table: BTreeSet<u32> = d.table.as_ref().expect("a table").iter().copied().collect();
        let planned: BTreeSet<u32> =
            d.rx.iter().filter(|q| q.cpu.is_some()).map(|q| q.queue as u32).collect();
        assert_eq!(table, planned, "{n}: the table covers exactly the planned queues");
        assert_eq!(
            d.table.as_ref().unwrap().len(),
            s.rss.ok().unwrap().indir.len(),
            "{n}: the device's table size"
        );
        // Each queue IRQ on its queue's CPU.
        for q in d.rx.iter().filter(|q| q.cpu.is_some()) {
            if let Some(irq) = q.irq {
                let x = d.irqs.iter().find(|x| x.irq == irq).unwrap();
                assert_eq!(x.cpus, vec![q.cpu.unwrap()], "{n}: rx-{} IRQ", q.queue);
            }
        }
        earlier.push((d.numa_node, s.rx.len(), cores));
    }
}

/// The topology a generated capture describes.
fn topo_of(shape: &Shape) -> Topology {
    let dir = bighost::write(shape, "topo");
    Sysroot::capture(&dir.0).unwrap().0.topology()
}

/// The device as it would read after `apply` wrote the plan.
fn as_applied(d: &DeviceState, p: &rsskit_host::plan::DevicePlan) -> DeviceState {
    use rsskit_linux::ethtool::Reported;
    let mut d = d.clone();
    for x in &mut d.irqs {
        if let Some(i) = p.irqs.iter().find(|i| i.irq == x.irq) {
            x.cpus = Some(i.cpus.clone());
            x.effective_cpus = Some(i.cpus[..1].to_vec());
        }
    }
    if let (Reported::Supported(r), Some(t)) = (&mut d.rss, &p.table) {
        r.indir = t.clone();
    }
    for (q, pq) in d.rx.iter_mut().zip(&p.rx) {
        q.rps_cpus = Some(pq.rps_cpus.clone());
    }
    for (q, pq) in d.tx.iter_mut().zip(&p.tx) {
        q.xps_cpus = pq.xps_cpus.clone();
    }
    d
}

/// What `rsskit check` would say once each plan is applied: aligned, so
/// the placement rules and `check` agree (queues on the NIC's node while
/// it has a CPU for each, one CPU per queue IRQ, XPS, RPS).
fn assert_checks_aligned(topo: &Topology, devs: &[DeviceState], p: &Plan) {
    for (d, pd) in devs.iter().zip(&p.devices) {
        let v = rsskit_host::hostcheck::check_device(topo, &as_applied(d, pd), None);
        assert!(v.aligned, "{}: check after the plan: {:?}", d.name, v.problems);
    }
}

fn check(shape: &Shape, tag: &str, names: &[&str]) -> Plan {
    let dir = bighost::write(shape, tag);
    let (topo, devs, p) = plan_capture(&dir.0, names);
    assert_eq!(topo.online.len(), shape.cpus());
    assert_rules(&topo, &devs, &p);
    assert_checks_aligned(&topo, &devs, &p);
    // The same capture planned twice gives the same plan.
    let (_, _, again) = plan_capture(&dir.0, names);
    assert_eq!(p, again);
    p
}

fn has_rule(p: &Plan, dev: usize, rule: &str) -> bool {
    p.devices[dev].notes.iter().any(|n| n.starts_with(&format!("rule {rule}:")))
}

#[test]
fn epyc_384_threads_nps4_mlx5() {
    let s = bighost::epyc_384();
    let p = check(&s, "epyc", &["enp65s0f0np0"]);
    let d = &p.devices[0];
    assert_eq!(d.rx.iter().filter(|q| q.cpu.is_some()).count(), 63, "all 63 channels bound");
    // 63 queues, 24 cores / 48 threads on node 2: all of node 2, then 15
    // cores of socket 0's other nodes, first threads only.
    let on_node = d.rx.iter().filter_map(|q| q.cpu).filter(|&c| s.place(c).2 == 2).count();
    assert_eq!(on_node, 48, "{:?}", d.cpus);
    let off: Vec<usize> = d.rx.iter().filter_map(|q| q.cpu).filter(|&c| s.place(c).2 != 2).collect();
    assert!(off.iter().all(|&c| s.place(c).0 == 0 && c < 192), "socket 0, first threads: {off:?}");
    assert_eq!(core_set(&CpuMap::new(&topo_of(&s)), off.iter().copied()).len(), 15);
    assert!(has_rule(&p, 0, "smt") && has_rule(&p, 0, "numa"), "{:?}", d.notes);
}

#[test]
fn xeon_224_threads_two_ice_nics_one_per_socket() {
    let s = bighost::xeon_224();
    let p = check(&s, "xeon", &["ens1f0", "ens7f0"]);
    // 48 queues on 56 cores: first threads; 64 on 56 cores / 112 threads:
    // every core of the node, then 8 of its siblings, never the other socket.
    for (i, node, siblings) in [(0, 0, 0), (1, 1, 8)] {
        let d = &p.devices[i];
        assert!(d.rx.iter().all(|q| q.cpu.is_some_and(|c| s.place(c).2 == node)), "{:?}", d.cpus);
        assert_eq!(d.rx.iter().filter(|q| q.cpu.is_some_and(|c| c >= 112)).count(), siblings, "{:?}", d.cpus);
        assert_eq!(d.table.as_ref().unwrap().len(), 2048);
    }
}

#[test]
fn isolated_64_threads_bond_of_two() {
    let s = bighost::isolated_64();
    let p = check(&s, "iso", &["bond0"]);
    let names: Vec<&str> = p.devices.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(names, vec!["eth0", "eth1"], "both bond members planned");
    assert!(has_rule(&p, 0, "isolated"), "{:?}", p.devices[0].notes);
    assert!(has_rule(&p, 1, "shared-node"), "{:?}", p.devices[1].notes);
    // A VLAN on the bond resolves through it to the same NICs.
    let (_, _, vlan) = plan_capture(&bighost::write(&s, "vlan").0, &["bond0.100"]);
    assert_eq!(vlan, p, "bond0.100 plans as bond0");
}

#[test]
fn vm_4_vcpus_virtio() {
    let s = bighost::vm_4();
    let p = check(&s, "vm", &["ens3"]);
    let d = &p.devices[0];
    assert!(!d.hardware_rss, "virtio without an RSS table");
    assert!(d.rx.iter().all(|q| q.rps_cpus == vec![0, 1, 2, 3]), "RPS over every vCPU");
    assert!(d.notes.iter().all(|n| !n.starts_with("rule ")), "no topology rule applies: {:?}", d.notes);
    assert_eq!(d.steering.mode, "cpu");
}

#[test]
fn huge_1024_threads_256_queues_2048_entries() {
    let s = bighost::huge_1024();
    let p = check(&s, "huge", &["eth0"]);
    let d = &p.devices[0];
    assert_eq!(d.rx.iter().filter(|q| q.cpu.is_some()).count(), 256, "no 128-CPU cap");
    assert!(has_rule(&p, 0, "size"), "{:?}", d.notes);
    assert_eq!(d.table_mismatches, None, "DragonFly's host model is not Linux's");
    // `apply` reads the plan file back whole: 1,024 CPUs and a 2,048-entry table pass its checks.
    let back = Plan::from_json(&serde_json::to_string(&p).unwrap()).unwrap();
    assert_eq!(back, p);
}

/// The cost of `plan` on a big host: 4 NICs of 128 queues on the 384-thread
/// EPYC capture. A benchmark, not a timed test: it prints the figures
/// (docs/BENCHMARKS.md). `cargo test -p rsskit-host --release --test
/// big_hosts -- --ignored --nocapture plan_cost`
#[test]
#[ignore = "benchmark: run with --ignored --nocapture"]
fn plan_cost_4_nics_128_queues_384_threads() {
    let s = bighost::epyc_384_with(4, 128);
    let dir = bighost::write(&s, "cost");
    let names: Vec<String> = s.nics.iter().map(|n| n.name.clone()).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let runs = 20;
    let t = std::time::Instant::now();
    let mut read = std::time::Duration::ZERO;
    let mut planned = std::time::Duration::ZERO;
    for _ in 0..runs {
        let t0 = std::time::Instant::now();
        let (root, _) = Sysroot::capture(&dir.0).unwrap();
        let topo = root.topology();
        let devs: Vec<DeviceState> = refs.iter().map(|n| root.device(n).unwrap()).collect();
        let t1 = std::time::Instant::now();
        let p = plan::plan(&topo, &devs, &PlanOptions::default()).unwrap();
        planned += t1.elapsed();
        read += t1 - t0;
        assert_eq!(p.devices.len(), 4);
    }
    println!(
        "plan, 4 NICs x 128 queues, 384 threads: plan {:.2} ms, reading the capture {:.2} ms (mean of {runs}; {:.2} s in all)",
        planned.as_secs_f64() * 1e3 / runs as f64,
        read.as_secs_f64() * 1e3 / runs as f64,
        t.elapsed().as_secs_f64()
    );
}

/// Draws one big host's plan as the SVG in docs/host-tuning.md: the EPYC
/// capture with two mlx5 NICs (63 queues on node 2, 16 on node 6) and node
/// 7 isolated. `RSSKIT_PLAN_SVG=docs/img/plan-epyc-384.svg cargo test -p
/// rsskit-host --test big_hosts -- --ignored plan_picture`
#[test]
#[ignore = "writes the docs picture: set RSSKIT_PLAN_SVG"]
fn plan_picture() {
    let Some(out) = std::env::var_os("RSSKIT_PLAN_SVG") else { panic!("set RSSKIT_PLAN_SVG") };
    let mut s = bighost::epyc_384();
    s.nics.push(bighost::epyc_384_with(8, 16).nics[6].clone());
    s.nics[1].name = "enp66s0f0np0".into();
    s.isolated = (168..192).chain(360..384).collect();
    s.nohz_full = s.isolated.clone();
    let dir = bighost::write(&s, "picture");
    let (topo, devs, p) = plan_capture(&dir.0, &["enp65s0f0np0", "enp66s0f0np0"]);
    assert_rules(&topo, &devs, &p);
    let colors = ["#3b75af", "#ef8636"];
    let (cw, ch, gap) = (10usize, 16usize, 14usize);
    let per_node = s.cores_per_socket / s.nodes_per_socket;
    let node_w = per_node * cw + gap;
    let width = s.nodes_per_socket * node_w + 40;
    let height = s.sockets * (2 * ch + 46) + 90;
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" font-family=\"sans-serif\" font-size=\"11\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n<text x=\"20\" y=\"18\" font-size=\"13\">rsskit plan: 2 x EPYC 9654, NPS4 (384 threads, 8 nodes); CPUs 168-191,360-383 isolated</text>\n"
    );
    for c in 0..s.cpus() {
        let (socket, core, node) = s.place(c);
        let thread = c / (s.sockets * s.cores_per_socket);
        let x = 20 + (node % s.nodes_per_socket) * node_w + (core % per_node) * cw;
        let y = 50 + socket * (2 * ch + 46) + thread * ch;
        let owner = p
            .devices
            .iter()
            .enumerate()
            .find_map(|(i, d)| d.rx.iter().find(|q| q.cpu == Some(c)).map(|q| (i, q.queue)));
        let fill = match owner {
            Some((i, _)) => colors[i],
            None if topo.reserved().contains(&c) => "#bbbbbb",
            None => "#f4f4f4",
        };
        svg += &format!(
            "<rect x=\"{x}\" y=\"{y}\" width=\"{}\" height=\"{}\" fill=\"{fill}\" stroke=\"white\"><title>CPU {c}{}</title></rect>\n",
            cw,
            ch,
            owner.map(|(i, q)| format!(": {} rx-{q}", p.devices[i].name)).unwrap_or_default()
        );
        if core % per_node == 0 && thread == 0 {
            svg += &format!("<text x=\"{x}\" y=\"{}\">node {node}</text>\n", y - 4);
        }
    }
    for socket in 0..s.sockets {
        let y = 50 + socket * (2 * ch + 46) + 2 * ch + 14;
        svg += &format!("<text x=\"20\" y=\"{y}\" fill=\"#555\">socket {socket}: first threads (top row), SMT siblings (bottom row)</text>\n");
    }
    let ly = height - 28;
    for (i, d) in p.devices.iter().enumerate() {
        let x = 20 + i * 330;
        svg += &format!(
            "<rect x=\"{x}\" y=\"{}\" width=\"12\" height=\"12\" fill=\"{}\"/><text x=\"{}\" y=\"{ly}\">{}: {} queues, NUMA node {}</text>\n",
            ly - 10,
            colors[i],
            x + 16,
            d.name,
            d.rx.len(),
            d.numa_node.unwrap()
        );
    }
    svg += &format!(
        "<rect x=\"680\" y=\"{}\" width=\"12\" height=\"12\" fill=\"#bbbbbb\"/><text x=\"696\" y=\"{ly}\">isolated: no IRQ</text>\n</svg>\n",
        ly - 10
    );
    std::fs::write(out, svg).unwrap();
}

/// Writes every generated capture under `$RSSKIT_CAPTURES` (to try the CLI
/// on them: `rsskit plan --from $RSSKIT_CAPTURES/epyc`).
#[test]
#[ignore = "writes captures: set RSSKIT_CAPTURES"]
fn write_captures() {
    let Some(out) = std::env::var_os("RSSKIT_CAPTURES") else { panic!("set RSSKIT_CAPTURES") };
    let out = std::path::PathBuf::from(out);
    for (name, shape) in [
        ("epyc", bighost::epyc_384()),
        ("xeon", bighost::xeon_224()),
        ("isolated", bighost::isolated_64()),
        ("vm", bighost::vm_4()),
        ("huge", bighost::huge_1024()),
    ] {
        let dir = bighost::write(&shape, name);
        let to = out.join(name);
        let _ = std::fs::remove_dir_all(&to);
        std::fs::create_dir_all(&out).unwrap();
        // Renamed away, the drop guard finds nothing to remove.
        std::fs::rename(&dir.0, &to).unwrap();
    }
}
