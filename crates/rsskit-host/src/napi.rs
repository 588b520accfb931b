//! Threaded NAPI: with `/sys/class/net/IF/threaded` on, each NAPI instance
//! is polled by a kernel thread `napi/IF-ID` that runs wherever its CPU
//! mask lets the scheduler put it, not on the queue IRQ's CPU. `check` and
//! `plan` read it here: [`read`] (files only, through the sysroot's
//! `/sys` and `/proc`) and [`judge`] (no I/O).
//!
//! The thread name carries the NAPI id, not the queue, and nothing in
//! sysfs or procfs maps one to the other: the map is known only from netdev
//! netlink (6.8+, `queue-get` / `napi-get`), which `Sysroot::device` reads
//! into [`NapiState::map`] ([`NapiMap::from_kernel`]). Where it is `None`
//! (6.1) a thread is judged aligned only by a rule that holds for any map,
//! and `plan` turns threading off; where it is known, `plan` pins each
//! thread to its queue's CPU and `check` judges each queue by its thread.

use rsskit_linux::cpulist;
use rsskit_linux::netdev::Roots;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fs;
use std::io::Read;
use std::path::Path;

/// One NAPI kernel thread of a device.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NapiThread {
    /// Its process id.
    pub pid: u32,
    /// Its name (`napi/eth0-8193`; the kernel cuts names at 15 bytes).
    pub name: String,
    /// The NAPI id from the name, when the name is whole.
    pub napi_id: Option<u32>,
    /// `Cpus_allowed_list` of `/proc/PID/status`; `None` when unreadable.
    pub cpus: Option<Vec<usize>>,
}

/// RX queue -> the NAPI instance polling it (netdev netlink).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct NapiMap {
    /// Queue number -> its NAPI instance.
    pub rx: BTreeMap<usize, NapiLink>,
    /// TX queue -> its NAPI instance, where no RX queue shares it (drivers
    /// with a vector per TX queue, like igb).
    pub tx: BTreeMap<usize, NapiLink>,
}

/// The NAPI instance of one queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct NapiLink {
    /// The NAPI id (the `ID` of its thread's name `napi/IF-ID`).
    pub napi_id: u32,
    /// Its thread's PID as the kernel reports it, when threaded.
    pub pid: Option<u32>,
}

impl NapiMap {
    /// The RX queues' NAPI instances in the kernel's map; `None` when it
    /// links no RX queue to one.
    pub fn from_kernel(map: &rsskit_linux::netdev_nl::QueueMap) -> Option<NapiMap> {
        use rsskit_linux::netdev_nl::QueueType;
        let links = |kind: QueueType| -> BTreeMap<usize, NapiLink> {
            map.queues
                .iter()
                .filter(|q| q.kind == kind)
                .filter_map(|q| {
                    let id = q.napi_id?;
                    Some((q.id as usize, NapiLink { napi_id: id, pid: map.napi(id).and_then(|n| n.pid) }))
                })
                .collect()
        };
        let rx = links(QueueType::Rx);
        let mut tx = links(QueueType::Tx);
        tx.retain(|_, l| !rx.values().any(|r| r.napi_id == l.napi_id));
        (!rx.is_empty()).then_some(NapiMap { rx, tx })
    }
}

impl NapiState {
    /// The thread polling RX queue `q`, by the map's NAPI id (the name the
    /// kernel gave the thread, not a PID that toggling `threaded` changes).
    pub fn thread_of(&self, q: usize) -> Option<&NapiThread> {
        let id = self.map.as_ref()?.rx.get(&q)?.napi_id;
        self.threads.iter().find(|t| t.napi_id == Some(id))
    }

    /// The thread of TX queue `q`, where its NAPI instance is its own (no
    /// RX queue's).
    pub fn tx_thread_of(&self, q: usize) -> Option<&NapiThread> {
        let id = self.map.as_ref()?.tx.get(&q)?.napi_id;
        self.threads.iter().find(|t| t.napi_id == Some(id))
    }
}

/// A device's threaded NAPI.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct NapiState {
    /// `/sys/class/net/IF/threaded` (0 off, 1 on); `None` when the file is
    /// missing (kernel before 5.12) or unreadable.
    pub threaded: Option<u32>,
    /// Its `napi/IF-ID` kernel threads.
    pub threads: Vec<NapiThread>,
    /// Which thread polls which queue, when a source knows (none yet).
    pub map: Option<NapiMap>,
}

impl NapiState {
    /// Whether the device's NAPI is threaded.
    pub fn is_threaded(&self) -> bool {
        self.threaded.is_some_and(|t| t != 0)
    }
}

/// The kernel's `TASK_COMM_LEN` less its NUL.
const COMM_MAX: usize = 15;
/// Bytes read from a `/proc/PID/status` at most.
const MAX_STATUS: u64 = 16 * 1024;

fn read_small(p: &Path, max: u64) -> Option<String> {
    let mut s = String::new();
    fs::File::open(p).ok()?.take(max).read_to_string(&mut s).ok()?;
    Some(s)
}

/// Reads `iface`'s `threaded` file and its NAPI threads.
pub fn read(roots: &Roots, iface: &str) -> NapiState {
    let threaded = read_small(&roots.sys.join(format!("class/net/{iface}/threaded")), 64)
        .and_then(|t| t.trim().parse::<u32>().ok());
    NapiState { threaded, threads: threads(&roots.proc, iface), map: None }
}

/// The `napi/IF-ID` threads under `proc`. Only kernel threads count (parent
/// `kthreadd`, PID 2): any process can name itself `napi/eth0-1`.
fn threads(proc: &Path, iface: &str) -> Vec<NapiThread> {
    let full = format!("napi/{iface}-");
    let Ok(entries) = fs::read_dir(proc) else { return Vec::new() };
    let mut out = Vec::new();
    for e in entries.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
        let Some(comm) = read_small(&e.path().join("comm"), 64) else { continue };
        let name = comm.trim_end_matches('\n');
        if !name.starts_with(&full[..full.len().min(COMM_MAX)]) {
            continue;
        }
        let napi_id = if name.len() < COMM_MAX {
            // Whole: the prefix and the id.
            match name.strip_prefix(&full).and_then(|id| id.parse::<u32>().ok()) {
                Some(id) => Some(id),
                None => continue,
            }
        } else if full.starts_with(name) || cut_ours(name, &full) {
            // 15 bytes: cut, the id (or part of the name) lost. A longer
            // interface name sharing the prefix cannot be told apart.
            None
        } else {
            continue;
        };
        let Some(status) = read_small(&e.path().join("status"), MAX_STATUS) else { continue };
        let field = |k: &str| status.lines().find_map(|l| l.strip_prefix(k)).map(str::trim);
        if field("PPid:") != Some("2") {
            continue;
        }
        let cpus = field("Cpus_allowed_list:").and_then(|c| cpulist::parse(c).ok());
        out.push(NapiThread { pid, name: name.to_string(), napi_id, cpus });
    }
    out.sort_by_key(|t| (t.napi_id, t.pid));
    out
}

/// napi: a device's NAPI settings in sysfs (`/sys/class/net/IF/...`);
/// `None` where the file is missing or not a number.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct DeviceNapiSettings {
    /// `napi_defer_hard_irqs`.
    pub napi_defer_hard_irqs: Option<u64>,
    /// `gro_flush_timeout` (ns).
    pub gro_flush_timeout: Option<u64>,
}

/// Reads `iface`'s `napi_defer_hard_irqs` and `gro_flush_timeout`.
pub fn device_settings(roots: &Roots, iface: &str) -> DeviceNapiSettings {
    let num = |f: &str| {
        read_small(&roots.sys.join(format!("class/net/{iface}/{f}")), 64)
            .and_then(|t| t.trim().parse::<u64>().ok())
    };
    DeviceNapiSettings {
        napi_defer_hard_irqs: num("napi_defer_hard_irqs"),
        gro_flush_timeout: num("gro_flush_timeout"),
    }
}

/// A 15-byte name that is `full` (ending in `-`) followed by digits, cut.
fn cut_ours(name: &str, full: &str) -> bool {
    name.len() == COMM_MAX && name.starts_with(full) && name[full.len()..].bytes().all(|b| b.is_ascii_digit())
}

/// What threaded NAPI does to a device's alignment: problems (each breaks
/// it) and notes. `queue_cpu`: each RX queue's planned CPU (its IRQ's),
/// `None` when unknown.
pub fn judge(dev: &str, napi: &NapiState, queue_cpu: &[Option<usize>]) -> (Vec<String>, Vec<String>) {
    let (mut problems, mut notes) = (Vec::new(), Vec::new());
    if !napi.is_threaded() {
        return (problems, notes);
    }
    let allowed = |t: &NapiThread| t.cpus.as_deref().map_or("unknown CPUs".into(), cpulist::format);
    let shown = |t: &NapiThread| format!("thread {} (PID {}), allowed on CPUs {}", t.name, t.pid, allowed(t));
    if napi.threads.is_empty() {
        problems.push(format!(
            "threaded NAPI is on (threaded={}) but no napi/{dev}-N kernel thread was found: where its \
             queues are polled is unknown",
            napi.threaded.unwrap_or(1)
        ));
        return (problems, notes);
    }
    if let Some(map) = &napi.map {
        for (q, cpu) in queue_cpu.iter().enumerate() {
            let Some(t) =
                map.rx.get(&q).and_then(|l| napi.threads.iter().find(|t| t.napi_id == Some(l.napi_id)))
            else {
                problems.push(format!("rx-{q}: threaded NAPI, and no thread is known to poll it"));
                continue;
            };
            match cpu {
                Some(c) if t.cpus.as_deref() == Some(&[*c]) => {
                    notes.push(format!("rx-{q} processed by {}, its IRQ's CPU", shown(t)))
                }
                Some(c) => problems.push(format!(
                    "rx-{q} processed by {}, not only on CPU {c} (its IRQ's): its flows are processed \
                     elsewhere",
                    shown(t)
                )),
                None => problems.push(format!("rx-{q} processed by {}; its IRQ's CPU is unknown", shown(t))),
            }
        }
        return (problems, notes);
    }
    // Without the map a thread may poll any queue: it is in place only
    // when every queue is on one CPU and the thread may run there alone.
    let mut cpus: Vec<usize> = queue_cpu.iter().flatten().copied().collect();
    cpus.sort_unstable();
    cpus.dedup();
    let only = (cpus.len() == 1 && queue_cpu.iter().all(Option::is_some)).then(|| cpus[0]);
    let before = problems.len();
    for t in &napi.threads {
        match only {
            Some(c) if t.cpus.as_deref() == Some(&[c]) => {
                notes.push(format!("a queue is processed by {}, the CPU of every queue", shown(t)))
            }
            _ => problems.push(format!("a queue is processed by {}, not one known queue's CPU", shown(t))),
        }
    }
    if problems.len() > before {
        notes.push(format!(
            "threaded NAPI is on: which queue each napi/{dev}-N thread polls is not known on this kernel \
             (thread names carry the NAPI id, not the queue; no netdev netlink map), so a thread is in \
             place only when every queue is on one CPU and the thread may run only there; rsskit \
             plan/apply turn threading off"
        ));
    }
    (problems, notes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn thread(pid: u32, cpus: &[usize]) -> NapiThread {
        NapiThread {
            pid,
            name: format!("napi/eth0-{}", 8192 + pid),
            napi_id: Some(8192 + pid),
            cpus: Some(cpus.to_vec()),
        }
    }

    #[test]
    fn off_is_fine_and_floating_threads_are_not() {
        let q = [Some(2), Some(3)];
        let off = NapiState { threaded: Some(0), threads: vec![thread(1, &[0, 1, 2, 3])], map: None };
        assert_eq!(judge("eth0", &off, &q), (vec![], vec![]));
        let on = NapiState {
            threaded: Some(1),
            threads: vec![thread(1, &[0, 1, 2, 3]), thread(2, &[3])],
            map: None,
        };
        let (p, _) = judge("eth0", &on, &q);
        assert_eq!(p.len(), 2, "{p:?}");
        assert!(p[0].contains("thread napi/eth0-8193 (PID 1), allowed on CPUs 0-3"), "{p:?}");
        // Pinned to one queue's CPU is no better without the map: two queue CPUs.
        assert!(p[1].contains("(PID 2), allowed on CPUs 3, not one known queue's CPU"), "{p:?}");
        // One queue CPU, every thread there: holds for any map.
        let one = NapiState { threaded: Some(1), threads: vec![thread(1, &[3]), thread(2, &[3])], map: None };
        let (p, n) = judge("eth0", &one, &[Some(3), Some(3)]);
        assert!(p.is_empty() && n.len() == 2, "{p:?} {n:?}");
        let none = NapiState { threaded: Some(1), threads: vec![], map: None };
        assert!(judge("eth0", &none, &q).0[0].contains("no napi/eth0-N kernel thread"));
    }

    #[test]
    fn with_a_map_each_queue_is_judged_by_its_thread() {
        let link = |n: u32| NapiLink { napi_id: 8192 + n, pid: Some(n) };
        let map = NapiMap { rx: [(0, link(1)), (1, link(2))].into_iter().collect(), ..NapiMap::default() };
        let s = NapiState {
            threaded: Some(1),
            threads: vec![thread(1, &[2]), thread(2, &[0, 1])],
            map: Some(map),
        };
        let (p, n) = judge("eth0", &s, &[Some(2), Some(3)]);
        assert_eq!(
            n,
            vec!["rx-0 processed by thread napi/eth0-8193 (PID 1), allowed on CPUs 2, its IRQ's CPU"]
        );
        assert_eq!(p.len(), 1);
        assert!(
            p[0].starts_with(
                "rx-1 processed by thread napi/eth0-8194 (PID 2), allowed on CPUs 0-1, not only on CPU 3"
            ),
            "{p:?}"
        );
    }

    #[test]
    fn threads_are_read_from_proc_kernel_threads_only() {
        let d = std::env::temp_dir().join(format!("rsskit-napi-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        let put = |pid: u32, comm: &str, ppid: u32, cpus: &str| {
            let p = d.join(format!("proc/{pid}"));
            fs::create_dir_all(&p).unwrap();
            fs::write(p.join("comm"), format!("{comm}\n")).unwrap();
            fs::write(
                p.join("status"),
                format!("Name:\t{comm}\nPPid:\t{ppid}\nCpus_allowed_list:\t{cpus}\n"),
            )
            .unwrap();
        };
        put(812, "napi/eth0-8193", 2, "0-3");
        put(813, "napi/eth0-8194", 2, "1");
        put(900, "napi/eth0-8195", 1, "0"); // a user process naming itself so
        put(814, "napi/eth1-8195", 2, "0"); // another device
        put(815, "napi/enp59s0f0n", 2, "0-7"); // napi/enp59s0f0np0-8193 cut at 15 bytes
        fs::create_dir_all(d.join("sys/class/net/eth0")).unwrap();
        fs::write(d.join("sys/class/net/eth0/threaded"), "1\n").unwrap();
        let roots = Roots { sys: d.join("sys"), proc: d.join("proc") };
        let s = read(&roots, "eth0");
        assert_eq!(s.threaded, Some(1));
        let got: Vec<(u32, Option<u32>, Option<Vec<usize>>)> =
            s.threads.iter().map(|t| (t.pid, t.napi_id, t.cpus.clone())).collect();
        assert_eq!(got, vec![(812, Some(8193), Some(vec![0, 1, 2, 3])), (813, Some(8194), Some(vec![1]))]);
        let long = read(&roots, "enp59s0f0np0");
        assert_eq!(long.threaded, None, "no threaded file");
        assert_eq!(long.threads.iter().map(|t| (t.pid, t.napi_id)).collect::<Vec<_>>(), vec![(815, None)]);
        let _ = fs::remove_dir_all(&d);
    }
}
