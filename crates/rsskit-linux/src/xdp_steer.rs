//! Software RSS in XDP: loads `bpf/xdp_cpumap.bpf.c`, fills its maps from
//! an [`RssPolicy`] (Toeplitz tables of the key, hash types, bucket -> CPU)
//! and attaches it to an interface, native (driver) mode first, generic
//! (SKB) mode as the fallback, and says which. Each IPv4/IPv6 frame is
//! redirected through a `BPF_MAP_TYPE_CPUMAP` to the CPU its bucket maps
//! to, so the stack processes it there (the kernel's `xdp_redirect_cpu`
//! pattern, with rsskit's hash instead of the kernel's).
//!
//! The program is attached through a BPF link (kernel >= 5.9), owned by
//! [`XdpSteer`]: dropping it, or the process ending in any way (even
//! SIGKILL), detaches it. [`detach_left`] removes a program left attached
//! the old way (netlink, e.g. `ip link set dev IF xdp ...` or a kernel
//! before 5.9), found by its name.

use crate::ebpf::{self, EbpfError};
use aya::maps::{Array, CpuMap, MapData, PerCpuArray};
use aya::programs::{Xdp, XdpFlags};
use rsskit_core::{HashType, RssPolicy};
use std::io;
use thiserror::Error;

/// The object name (`bpf/xdp_cpumap.bpf.c`).
pub const OBJECT: &str = "xdp_cpumap";
/// The steering program's name (what `ip link` and `bpftool` show, cut to
/// 15 characters by the kernel: `rsskit_xdp_cpum`).
pub const PROGRAM: &str = "rsskit_xdp_cpumap";
const RX_PROGRAM: &str = "rsskit_xdp_cpumap_rx";
/// Most target CPUs (`RSSKIT_XS_MAX_CPUS` in `bpf/xdp_cpumap.h`): CPU ids
/// 0..256.
pub const MAX_CPUS: u32 = 256;
const MAX_BUCKETS: u32 = 128;
const SLOT_SEEN: u32 = MAX_CPUS;
const SLOT_PASS_NON_IP: u32 = MAX_CPUS + 1;
const SLOT_ERR_MALFORMED: u32 = MAX_CPUS + 2;
const SLOT_ERR_REDIRECT: u32 = MAX_CPUS + 3;
const SLOT_FRAG_2TUPLE: u32 = MAX_CPUS + 4;
/// Default cpumap queue size per CPU (the kernel sample's default).
pub const DEFAULT_QUEUE_SIZE: u32 = 2048;
/// Largest cpumap queue size accepted (the kernel caps it at 16 Ki frames).
pub const MAX_QUEUE_SIZE: u32 = 16384;

/// `struct rsskit_xs_config` of `bpf/xdp_cpumap.h`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
struct XsConfig {
    hash_types: u32,
    bucket_mask: u32,
}

// SAFETY: plain old data, two u32, no padding.
unsafe impl aya::Pod for XsConfig {}

/// The Toeplitz tables as `struct rsskit_tpz_table` of `bpf/toeplitz.h`.
type TpzTable = [[u32; 256]; 36];

/// Which XDP mode to attach in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModeRequest {
    /// Native if the driver has it, else generic (reported).
    Auto,
    /// Native only: an error on a driver without XDP.
    Native,
    /// Generic (SKB) mode only.
    Generic,
}

/// The mode the program runs in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XdpMode {
    /// In the driver, before an skb is built.
    Native,
    /// Generic (SKB) mode: after the skb is built, works on any device.
    Generic,
}

impl XdpMode {
    /// `native` or `generic`.
    pub fn name(self) -> &'static str {
        match self {
            XdpMode::Native => "native",
            XdpMode::Generic => "generic",
        }
    }
}

/// Why XDP steering could not be set up, read or removed.
#[derive(Debug, Error)]
pub enum XdpSteerError {
    /// No such network interface.
    #[error("no network interface {0:?}")]
    NoInterface(String),
    /// Loading or attaching needs root (`CAP_BPF` + `CAP_NET_ADMIN`).
    #[error("{what}: permission denied (XDP needs root, or CAP_BPF and CAP_NET_ADMIN)")]
    Permission {
        /// What was refused.
        what: String,
    },
    /// The driver has no native XDP (and native mode was required).
    #[error("interface {iface:?}: the driver has no native XDP support ({source}); use generic mode")]
    NoNativeXdp {
        /// The interface.
        iface: String,
        /// What the kernel said.
        #[source]
        source: io::Error,
    },
    /// Another XDP program is already attached to the interface.
    #[error("interface {iface:?} already has an XDP program attached{hint}")]
    Busy {
        /// The interface.
        iface: String,
        /// How to remove it.
        hint: String,
    },
    /// A CPU of the policy cannot be a cpumap target.
    #[error("CPU {cpu} cannot be a target: the XDP program counts CPUs 0-{max} and the system has {possible} possible CPUs")]
    BadCpu {
        /// The CPU id.
        cpu: u32,
        /// Largest id the counters have a slot for.
        max: u32,
        /// Possible CPUs of this system.
        possible: u32,
    },
    /// The policy has more buckets than the program's table.
    #[error("{0} buckets: the XDP program's table holds at most {MAX_BUCKETS}")]
    TooManyBuckets(u32),
    /// The cpumap queue size is out of range.
    #[error("cpumap queue size {0} is not 1-{MAX_QUEUE_SIZE}")]
    BadQueueSize(u32),
    /// The program could not be had or loaded.
    #[error(transparent)]
    Ebpf(#[from] EbpfError),
    /// Loading, attaching or a map operation failed otherwise.
    #[error("{what}: {detail}")]
    Kernel {
        /// What was being done.
        what: String,
        /// aya's or the kernel's message (with its causes).
        detail: String,
    },
}

/// The first `io::Error` in an error's source chain.
fn io_cause<'a>(e: &'a (dyn std::error::Error + 'static)) -> Option<&'a io::Error> {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = cur {
        if let Some(io) = c.downcast_ref::<io::Error>() {
            return Some(io);
        }
        cur = c.source();
    }
    None
}

/// The error and its causes on one line.
fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let t = c.to_string();
        if !s.contains(&t) {
            s.push_str(": ");
            s.push_str(&t);
        }
        cur = c.source();
    }
    s
}

fn is_perm(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EPERM) | Some(libc::EACCES))
}

/// A kernel error, as [`XdpSteerError::Permission`] when it is EPERM.
fn kernel(what: &str, e: &(dyn std::error::Error + 'static)) -> XdpSteerError {
    match io_cause(e) {
        Some(io) if is_perm(io) => XdpSteerError::Permission { what: what.to_owned() },
        _ => XdpSteerError::Kernel { what: what.to_owned(), detail: chain(e) },
    }
}

/// The interface index of `iface` (the one lookup, `packet::ifindex`; a
/// malformed name is no interface either).
pub fn ifindex(iface: &str) -> Result<u32, XdpSteerError> {
    crate::packet::ifindex(iface).map_err(|_| XdpSteerError::NoInterface(iface.to_owned()))
}

/// The policy's enabled hash types as the program's `RSSKIT_HT_*` bits.
pub fn hash_type_bits(policy: &RssPolicy) -> u32 {
    let hc = policy.hash_config();
    HashType::ALL.iter().enumerate().filter(|(_, t)| hc.contains(**t)).fold(0, |b, (i, _)| b | 1 << i)
}

/// Bucket -> CPU id: the policy's bucket -> worker -> CPU, flattened.
pub fn bucket_cpus(policy: &RssPolicy) -> Vec<u32> {
    (0..policy.buckets())
        .map(|b| policy.cpu_of(policy.worker_of_bucket(b)).map_or(u32::MAX, |c| c.0))
        .collect()
}

/// Counters of one target CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct CpuCounters {
    /// The CPU id.
    pub cpu: u32,
    /// Frames the program redirected to this CPU (summed over the CPUs
    /// that received them).
    pub redirected: u64,
    /// Frames this CPU's cpumap thread handed to the stack (on this CPU).
    pub delivered: u64,
}

/// The program's counters, summed over receiving CPUs.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Counters {
    /// Per target CPU, in CPU order.
    pub cpus: Vec<CpuCounters>,
    /// Every frame the program saw.
    pub seen: u64,
    /// Non-IP frames, passed.
    pub passed_non_ip: u64,
    /// Truncated IPv4/IPv6 headers, passed.
    pub err_malformed: u64,
    /// Frames whose CPU had no cpumap entry (or no table), passed.
    pub err_redirect: u64,
    /// IP fragments, hashed on the 2-tuple (a fragment has no ports).
    pub frag_2tuple: u64,
}

impl Counters {
    /// Frames redirected to any CPU.
    pub fn redirected(&self) -> u64 {
        self.cpus.iter().map(|c| c.redirected).sum()
    }

    /// Frames delivered on any CPU.
    pub fn delivered(&self) -> u64 {
        self.cpus.iter().map(|c| c.delivered).sum()
    }

    /// Redirected but not (yet) delivered: dropped at a full cpumap queue,
    /// or in flight while traffic runs.
    pub fn not_delivered(&self) -> u64 {
        self.redirected().saturating_sub(self.delivered())
    }

    /// Frames passed to the stack on the receiving CPU.
    pub fn passed(&self) -> u64 {
        self.passed_non_ip + self.err_malformed + self.err_redirect
    }
}

/// The XDP steering program, loaded, filled and attached; detached on drop.
pub struct XdpSteer {
    bpf: aya::Ebpf,
    iface: String,
    /// `None`: loaded only ([`XdpSteer::load`]).
    mode: Option<XdpMode>,
    cpus: Vec<u32>,
    fallback: Option<String>,
}

impl std::fmt::Debug for XdpSteer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("XdpSteer").field("iface", &self.iface).field("mode", &self.mode).finish()
    }
}

impl XdpSteer {
    /// Loads the program, fills its maps from `policy` (cpumap queues of
    /// `queue_size` frames) and attaches it to `iface` in `mode`.
    pub fn attach(
        iface: &str,
        policy: &RssPolicy,
        queue_size: u32,
        mode: ModeRequest,
    ) -> Result<XdpSteer, XdpSteerError> {
        let idx = ifindex(iface)?;
        let mut s = Self::load(policy, queue_size)?;
        let prog: &mut Xdp = program(&mut s.bpf, PROGRAM)?;
        let (mode, fallback) = match mode {
            ModeRequest::Generic => {
                attach_in(prog, iface, idx, XdpMode::Generic)?;
                (XdpMode::Generic, None)
            }
            ModeRequest::Native => {
                attach_in(prog, iface, idx, XdpMode::Native)?;
                (XdpMode::Native, None)
            }
            ModeRequest::Auto => match attach_in(prog, iface, idx, XdpMode::Native) {
                Ok(()) => (XdpMode::Native, None),
                Err(XdpSteerError::NoNativeXdp { source, .. }) => {
                    attach_in(prog, iface, idx, XdpMode::Generic)?;
                    (XdpMode::Generic, Some(format!("no native XDP in the driver ({source})")))
                }
                Err(e) => return Err(e),
            },
        };
        s.iface = iface.to_owned();
        s.mode = Some(mode);
        s.fallback = fallback;
        Ok(s)
    }

    /// Loads the program and fills its maps from `policy`, without
    /// attaching it anywhere: for [`XdpSteer::test_run`].
    pub fn load(policy: &RssPolicy, queue_size: u32) -> Result<XdpSteer, XdpSteerError> {
        if queue_size == 0 || queue_size > MAX_QUEUE_SIZE {
            return Err(XdpSteerError::BadQueueSize(queue_size));
        }
        if policy.buckets() > MAX_BUCKETS {
            return Err(XdpSteerError::TooManyBuckets(policy.buckets()));
        }
        let possible = aya::util::nr_cpus().map_err(|(what, e)| kernel(what, &e))? as u32;
        let table = bucket_cpus(policy);
        let mut cpus: Vec<u32> = table.clone();
        cpus.sort_unstable();
        cpus.dedup();
        if let Some(&cpu) = cpus.iter().find(|&&c| c >= MAX_CPUS.min(possible)) {
            return Err(XdpSteerError::BadCpu { cpu, max: MAX_CPUS.min(possible) - 1, possible });
        }

        let mut loader = aya::EbpfLoader::new();
        loader.set_max_entries("cpu_map", possible);
        let mut bpf = ebpf::load_with(OBJECT, &mut loader).map_err(|e| match e {
            EbpfError::Load { source, .. } => kernel("loading the XDP program's maps", &*source),
            e => e.into(),
        })?;

        // Maps first, so the program never sees an empty table.
        let mut tables: TpzTable = [[0; 256]; 36];
        for (dst, src) in tables.iter_mut().zip(policy.toeplitz().byte_tables()) {
            *dst = *src;
        }
        set_array(&mut bpf, "tpz_table", 0, tables)?;
        let cfg = XsConfig { hash_types: hash_type_bits(policy), bucket_mask: policy.mask() };
        set_array(&mut bpf, "xs_config", 0, cfg)?;
        for (b, cpu) in table.iter().enumerate() {
            set_array(&mut bpf, "bucket_cpu", b as u32, *cpu)?;
        }

        let rx_fd = {
            let rx: &mut Xdp = program(&mut bpf, RX_PROGRAM)?;
            rx.load().map_err(|e| kernel("loading the cpumap program", &e))?;
            let fd = rx.fd().map_err(|e| kernel("the cpumap program's fd", &e))?;
            fd.try_clone().map_err(|e| kernel("duplicating the cpumap program's fd", &e))?
        };
        {
            let map = bpf.map_mut("cpu_map").ok_or_else(|| missing("cpu_map"))?;
            let mut cm: CpuMap<&mut MapData> =
                CpuMap::try_from(map).map_err(|e| kernel("opening cpu_map", &e))?;
            for &cpu in &cpus {
                cm.set(cpu, queue_size, Some(&rx_fd), 0)
                    .map_err(|e| kernel(&format!("adding CPU {cpu} to the cpumap"), &e))?;
            }
        }

        let prog: &mut Xdp = program(&mut bpf, PROGRAM)?;
        prog.load().map_err(|e| kernel("loading the XDP program", &e))?;
        Ok(XdpSteer { bpf, iface: String::new(), mode: None, cpus, fallback: None })
    }

    /// Runs the steering program once on `frame` in the kernel
    /// (`BPF_PROG_TEST_RUN`, nothing attached or sent) and returns its XDP
    /// action (`XDP_PASS` = 2, `XDP_REDIRECT` = 4).
    pub fn test_run(&mut self, frame: &[u8]) -> Result<u32, XdpSteerError> {
        self.test_run_repeat(frame, 1).map(|(act, _)| act)
    }

    /// [`XdpSteer::test_run`] `repeat` times in the kernel: the action and
    /// the mean run time in ns the kernel measured (the program's cost per
    /// frame, without the driver or the stack).
    pub fn test_run_repeat(&mut self, frame: &[u8], repeat: u32) -> Result<(u32, u32), XdpSteerError> {
        use std::os::fd::{AsFd, AsRawFd};
        let prog: &mut Xdp = program(&mut self.bpf, PROGRAM)?;
        let fd = prog.fd().map_err(|e| kernel("the XDP program's fd", &e))?.as_fd().as_raw_fd();
        // union bpf_attr, the `test` member (linux/bpf.h), zero padded.
        #[repr(C)]
        #[derive(Default)]
        struct TestAttr {
            prog_fd: u32,
            retval: u32,
            data_size_in: u32,
            data_size_out: u32,
            data_in: u64,
            data_out: u64,
            repeat: u32,
            duration: u32,
            ctx_size_in: u32,
            ctx_size_out: u32,
            ctx_in: u64,
            ctx_out: u64,
            flags: u32,
            cpu: u32,
            batch_size: u32,
            _pad: [u32; 5],
        }
        const BPF_PROG_TEST_RUN: libc::c_long = 10;
        let mut attr = TestAttr {
            prog_fd: fd as u32,
            data_size_in: frame.len() as u32,
            data_in: frame.as_ptr() as u64,
            repeat: repeat.max(1),
            ..Default::default()
        };
        // SAFETY: bpf(2) with a zero-padded bpf_attr of the size given; the
        // kernel reads `frame` (alive for the call) and writes `retval`.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_bpf,
                BPF_PROG_TEST_RUN,
                &mut attr as *mut TestAttr,
                std::mem::size_of::<TestAttr>() as u32,
            )
        };
        if rc < 0 {
            return Err(kernel("BPF_PROG_TEST_RUN", &io::Error::last_os_error()));
        }
        Ok((attr.retval, attr.duration))
    }

    /// The mode the program was attached in (generic when only loaded).
    pub fn mode(&self) -> XdpMode {
        self.mode.unwrap_or(XdpMode::Generic)
    }

    /// Why native mode was not used, when [`ModeRequest::Auto`] fell back.
    pub fn fallback_reason(&self) -> Option<&str> {
        self.fallback.as_deref()
    }

    /// The interface.
    pub fn iface(&self) -> &str {
        &self.iface
    }

    /// Target CPUs, sorted.
    pub fn cpus(&self) -> &[u32] {
        &self.cpus
    }

    /// The program's counters now.
    pub fn counters(&self) -> Result<Counters, XdpSteerError> {
        let map = self.bpf.map("xs_counters").ok_or_else(|| missing("xs_counters"))?;
        let c: PerCpuArray<&MapData, u64> =
            PerCpuArray::try_from(map).map_err(|e| kernel("opening xs_counters", &e))?;
        let sum = |slot: u32| -> Result<u64, XdpSteerError> {
            let v = c.get(&slot, 0).map_err(|e| kernel("reading xs_counters", &e))?;
            Ok(v.iter().copied().fold(0u64, u64::wrapping_add))
        };
        let dmap = self.bpf.map("xs_delivered").ok_or_else(|| missing("xs_delivered"))?;
        let d: PerCpuArray<&MapData, u64> =
            PerCpuArray::try_from(dmap).map_err(|e| kernel("opening xs_delivered", &e))?;
        let delivered = d.get(&0, 0).map_err(|e| kernel("reading xs_delivered", &e))?;
        let mut cpus = Vec::with_capacity(self.cpus.len());
        for &cpu in &self.cpus {
            cpus.push(CpuCounters {
                cpu,
                redirected: sum(cpu)?,
                delivered: delivered.get(cpu as usize).copied().unwrap_or(0),
            });
        }
        Ok(Counters {
            cpus,
            seen: sum(SLOT_SEEN)?,
            passed_non_ip: sum(SLOT_PASS_NON_IP)?,
            err_malformed: sum(SLOT_ERR_MALFORMED)?,
            err_redirect: sum(SLOT_ERR_REDIRECT)?,
            frag_2tuple: sum(SLOT_FRAG_2TUPLE)?,
        })
    }

    /// Detaches now (as dropping does), reporting a failure.
    pub fn detach(mut self) -> Result<(), XdpSteerError> {
        let prog: &mut Xdp = program(&mut self.bpf, PROGRAM)?;
        // Dropping the program's links detaches them; unload does that and
        // reports an error.
        prog.unload().map_err(|e| kernel("detaching the XDP program", &e))
    }
}

fn missing(name: &str) -> XdpSteerError {
    XdpSteerError::Kernel { what: format!("the XDP object has no map {name:?}"), detail: "rebuild".into() }
}

fn program<'a>(bpf: &'a mut aya::Ebpf, name: &str) -> Result<&'a mut Xdp, XdpSteerError> {
    let p = bpf.program_mut(name).ok_or_else(|| XdpSteerError::Kernel {
        what: format!("the XDP object has no program {name:?}"),
        detail: "rebuild".into(),
    })?;
    p.try_into().map_err(|e| kernel(&format!("program {name:?}"), &e))
}

fn set_array<V: aya::Pod>(bpf: &mut aya::Ebpf, name: &str, index: u32, v: V) -> Result<(), XdpSteerError> {
    let map = bpf.map_mut(name).ok_or_else(|| missing(name))?;
    let mut a: Array<&mut MapData, V> =
        Array::try_from(map).map_err(|e| kernel(&format!("opening {name}"), &e))?;
    a.set(index, v, 0).map_err(|e| kernel(&format!("writing {name}[{index}]"), &e))
}

fn attach_in(prog: &mut Xdp, iface: &str, idx: u32, mode: XdpMode) -> Result<(), XdpSteerError> {
    let flags = match mode {
        XdpMode::Native => XdpFlags::DRV_MODE,
        XdpMode::Generic => XdpFlags::SKB_MODE,
    };
    match prog.attach_to_if_index(idx, flags) {
        Ok(_) => Ok(()),
        Err(e) => {
            let io = io_cause(&e);
            match io.and_then(|i| i.raw_os_error()) {
                Some(libc::EPERM) | Some(libc::EACCES) => {
                    Err(XdpSteerError::Permission { what: format!("attaching XDP to {iface:?}") })
                }
                Some(libc::EBUSY) | Some(libc::EEXIST) => {
                    Err(XdpSteerError::Busy { iface: iface.to_owned(), hint: busy_hint(iface, idx) })
                }
                Some(libc::EOPNOTSUPP) | Some(libc::EINVAL) if mode == XdpMode::Native => {
                    Err(XdpSteerError::NoNativeXdp {
                        iface: iface.to_owned(),
                        source: io::Error::from_raw_os_error(io.and_then(|i| i.raw_os_error()).unwrap_or(0)),
                    })
                }
                _ => Err(kernel(&format!("attaching XDP to {iface:?} in {} mode", mode.name()), &e)),
            }
        }
    }
}

/// What to do about the program already on `iface`: a running process
/// holding it through a BPF link (a running `rsskit xdp-steer`: stop it;
/// `--detach` cannot remove a linked program), an rsskit program left
/// attached (`--detach` removes it), or another program (left alone).
fn busy_hint(iface: &str, idx: u32) -> String {
    let Some((id, _)) = Rtnl::open().and_then(|rt| attached(&rt, idx)).ok().flatten() else {
        return " (in another mode, or just detached: try again)".into();
    };
    let name = aya::programs::loaded_programs()
        .filter_map(|p| p.ok())
        .find(|p| p.id() == id)
        .and_then(|p| p.name_as_str().map(str::to_owned))
        .unwrap_or_default();
    let me = std::process::id() as i32;
    let holders: Vec<i32> = crate::procnet::bpf_link_holders(id).into_iter().filter(|&p| p != me).collect();
    let ours = !name.is_empty() && PROGRAM.starts_with(&name) && name.len() >= 8;
    match (holders.as_slice(), ours) {
        ([], true) => format!(
            ": rsskit's program id {id}, left attached; `rsskit xdp-steer --iface {iface} --detach` removes it"
        ),
        ([], false) => format!(
            ": program id {id} {name:?}, not rsskit's, left in place (remove it with the tool that attached it, \
             e.g. `ip link set dev {iface} xdp off`)"
        ),
        (pids, _) => {
            let list: Vec<String> = pids
                .iter()
                .map(|p| {
                    let comm = std::fs::read_to_string(format!("/proc/{p}/comm")).unwrap_or_default();
                    format!("{p} ({})", comm.trim())
                })
                .collect();
            let who = if ours { "rsskit's program" } else { "program" };
            format!(
                ": {who} id {id} {name:?}, held through a BPF link by running process {}: stop it (SIGINT or \
                 SIGTERM, e.g. `kill {}`) and its program goes (--detach cannot remove a program a running \
                 process holds)",
                list.join(", "),
                pids[0]
            )
        }
    }
}

/// A program [`detach_left`] removed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Detached {
    /// Its kernel id.
    pub prog_id: u32,
    /// Its name as the kernel keeps it.
    pub name: String,
    /// `native` or `generic`.
    pub mode: &'static str,
}

// rtnetlink numbers (linux/if_link.h, linux/rtnetlink.h).
const IFLA_XDP: u16 = 43;
const IFLA_XDP_FD: u16 = 1;
const IFLA_XDP_ATTACHED: u16 = 2;
const IFLA_XDP_FLAGS: u16 = 3;
const IFLA_XDP_PROG_ID: u16 = 4;
const XDP_ATTACHED_DRV: u8 = 1;
const XDP_ATTACHED_SKB: u8 = 2;
const NLA_F_NESTED: u16 = 1 << 15;

/// A route netlink socket, closed on drop.
struct Rtnl(std::os::fd::OwnedFd);

impl Rtnl {
    fn open() -> Result<Rtnl, XdpSteerError> {
        // SAFETY: plain socket(2) call; the fd is owned right away.
        let fd = unsafe {
            libc::socket(libc::AF_NETLINK, libc::SOCK_RAW | libc::SOCK_CLOEXEC, libc::NETLINK_ROUTE)
        };
        if fd < 0 {
            return Err(kernel("opening a netlink socket", &io::Error::last_os_error()));
        }
        // SAFETY: fd is a fresh descriptor nobody else owns.
        Ok(Rtnl(unsafe { std::os::fd::FromRawFd::from_raw_fd(fd) }))
    }

    /// Sends one request, returns the first reply message (header included).
    fn request(&self, msg: &[u8]) -> Result<Vec<u8>, XdpSteerError> {
        use std::os::fd::AsRawFd;
        // SAFETY: msg is a valid buffer of msg.len() bytes; the socket is ours.
        let n = unsafe { libc::send(self.0.as_raw_fd(), msg.as_ptr().cast(), msg.len(), 0) };
        if n < 0 {
            return Err(kernel("netlink send", &io::Error::last_os_error()));
        }
        let mut buf = vec![0u8; 65536];
        // SAFETY: buf is writable for buf.len() bytes.
        let n = unsafe { libc::recv(self.0.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
        if n < 0 {
            return Err(kernel("netlink recv", &io::Error::last_os_error()));
        }
        buf.truncate(n as usize);
        Ok(buf)
    }
}

fn nlmsg(ty: u16, flags: u16, ifindex: u32, attrs: &[u8]) -> Vec<u8> {
    let mut m = Vec::with_capacity(32 + attrs.len());
    let len = 16 + 16 + attrs.len();
    m.extend_from_slice(&(len as u32).to_ne_bytes());
    m.extend_from_slice(&ty.to_ne_bytes());
    m.extend_from_slice(&(flags | libc::NLM_F_REQUEST as u16).to_ne_bytes());
    m.extend_from_slice(&1u32.to_ne_bytes()); // seq
    m.extend_from_slice(&0u32.to_ne_bytes()); // pid: the kernel fills it
                                              // struct ifinfomsg: family, pad, type, index, flags, change.
    m.extend_from_slice(&[libc::AF_UNSPEC as u8, 0, 0, 0]);
    m.extend_from_slice(&(ifindex as i32).to_ne_bytes());
    m.extend_from_slice(&0u32.to_ne_bytes());
    m.extend_from_slice(&0u32.to_ne_bytes());
    m.extend_from_slice(attrs);
    m
}

fn nla(ty: u16, payload: &[u8]) -> Vec<u8> {
    let len = 4 + payload.len();
    let mut a = Vec::with_capacity((len + 3) & !3);
    a.extend_from_slice(&(len as u16).to_ne_bytes());
    a.extend_from_slice(&ty.to_ne_bytes());
    a.extend_from_slice(payload);
    a.resize((len + 3) & !3, 0);
    a
}

/// Attributes in `b`: (type without flags, payload).
fn attrs(mut b: &[u8]) -> Vec<(u16, &[u8])> {
    let mut v = Vec::new();
    while b.len() >= 4 {
        let len = u16::from_ne_bytes([b[0], b[1]]) as usize;
        let ty = u16::from_ne_bytes([b[2], b[3]]) & 0x3fff;
        if len < 4 || len > b.len() {
            break;
        }
        v.push((ty, &b[4..len]));
        b = &b[((len + 3) & !3).min(b.len())..];
    }
    v
}

/// The netlink error code of an NLMSG_ERROR reply (0 = ack), if it is one.
fn nl_error(reply: &[u8]) -> Option<i32> {
    if reply.len() >= 20 && u16::from_ne_bytes([reply[4], reply[5]]) == libc::NLMSG_ERROR as u16 {
        return Some(i32::from_ne_bytes([reply[16], reply[17], reply[18], reply[19]]));
    }
    None
}

/// The XDP program attached to `ifindex`: (prog id, IFLA_XDP_ATTACHED mode).
fn attached(rt: &Rtnl, ifindex: u32) -> Result<Option<(u32, u8)>, XdpSteerError> {
    let reply = rt.request(&nlmsg(libc::RTM_GETLINK, 0, ifindex, &[]))?;
    if let Some(e) = nl_error(&reply) {
        return Err(kernel("reading the interface (RTM_GETLINK)", &io::Error::from_raw_os_error(-e)));
    }
    if reply.len() < 32 {
        return Err(XdpSteerError::Kernel { what: "RTM_GETLINK".into(), detail: "short reply".into() });
    }
    let len = (u32::from_ne_bytes([reply[0], reply[1], reply[2], reply[3]]) as usize).min(reply.len());
    let (mut id, mut mode) = (0, 0);
    for (ty, p) in attrs(&reply[32..len]) {
        if ty == IFLA_XDP {
            for (t, q) in attrs(p) {
                match t {
                    IFLA_XDP_PROG_ID if q.len() >= 4 => id = u32::from_ne_bytes([q[0], q[1], q[2], q[3]]),
                    IFLA_XDP_ATTACHED if !q.is_empty() => mode = q[0],
                    _ => {}
                }
            }
        }
    }
    Ok((id != 0).then_some((id, mode)))
}

/// Removes an rsskit XDP steering program left attached to `iface` (found
/// by name; any other program is refused). `Ok(None)`: nothing attached.
/// A program held by a running `rsskit xdp-steer` (a BPF link) cannot be
/// removed this way: the error says to stop that process.
pub fn detach_left(iface: &str) -> Result<Option<Detached>, XdpSteerError> {
    let idx = ifindex(iface)?;
    let rt = Rtnl::open()?;
    let Some((id, mode)) = attached(&rt, idx)? else { return Ok(None) };
    let name = aya::programs::loaded_programs()
        .filter_map(|p| p.ok())
        .find(|p| p.id() == id)
        .and_then(|p| p.name_as_str().map(str::to_owned))
        .unwrap_or_default();
    // The kernel keeps 15 characters of a program's name.
    if name.is_empty() || !PROGRAM.starts_with(&name) || name.len() < 8 {
        return Err(XdpSteerError::Kernel {
            what: format!("interface {iface:?} has XDP program id {id} named {name:?}"),
            detail: "not rsskit's; left in place".into(),
        });
    }
    let (flags, mode_name) = match mode {
        XDP_ATTACHED_SKB => (XdpFlags::SKB_MODE.bits(), "generic"),
        XDP_ATTACHED_DRV => (XdpFlags::DRV_MODE.bits(), "native"),
        _ => (0, "other"),
    };
    let mut inner = nla(IFLA_XDP_FD, &(-1i32).to_ne_bytes());
    inner.extend(nla(IFLA_XDP_FLAGS, &flags.to_ne_bytes()));
    let msg = nlmsg(libc::RTM_SETLINK, libc::NLM_F_ACK as u16, idx, &nla(IFLA_XDP | NLA_F_NESTED, &inner));
    let reply = rt.request(&msg)?;
    match nl_error(&reply) {
        Some(0) => Ok(Some(Detached { prog_id: id, name, mode: mode_name })),
        Some(e) if -e == libc::EBUSY => Err(XdpSteerError::Busy {
            iface: iface.to_owned(),
            hint: format!(
                " (program id {id} through a BPF link held by a running process, e.g. `rsskit xdp-steer`: stop it and the program goes)"
            ),
        }),
        Some(e) if -e == libc::EPERM => Err(XdpSteerError::Permission { what: format!("detaching XDP from {iface:?}") }),
        Some(e) => Err(kernel("detaching (RTM_SETLINK)", &io::Error::from_raw_os_error(-e))),
        None => Err(XdpSteerError::Kernel { what: "RTM_SETLINK".into(), detail: "no acknowledgement".into() }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rsskit_core::{CpuId, HashConfig, RssKey};

    #[test]
    fn hash_type_bits_follow_the_header() {
        let p = RssPolicy::new(RssKey::microsoft(), HashConfig::default(), &[CpuId(0)], Some(1)).unwrap();
        // IPv4, TCP/IPv4, IPv6, TCP/IPv6 = bits 0, 1, 3, 4.
        assert_eq!(hash_type_bits(&p), 0b11011);
        let p = RssPolicy::new(RssKey::microsoft(), HashConfig::all(), &[CpuId(0)], Some(1)).unwrap();
        assert_eq!(hash_type_bits(&p), 0b111111);
    }

    #[test]
    fn bucket_table_maps_through_workers_to_cpus() {
        let p = RssPolicy::new(RssKey::microsoft(), HashConfig::default(), &[CpuId(5), CpuId(2)], Some(2))
            .unwrap();
        assert_eq!(bucket_cpus(&p), vec![5, 2, 5, 2]);
    }

    #[test]
    fn missing_interface_is_named() {
        let p = RssPolicy::new(RssKey::microsoft(), HashConfig::default(), &[CpuId(0)], Some(1)).unwrap();
        let e = XdpSteer::attach("rsskit-nope0", &p, 64, ModeRequest::Auto).unwrap_err();
        assert!(matches!(e, XdpSteerError::NoInterface(_)), "{e}");
        assert!(e.to_string().contains("rsskit-nope0"), "{e}");
        let e = detach_left("rsskit-nope0").unwrap_err();
        assert!(matches!(e, XdpSteerError::NoInterface(_)), "{e}");
    }

    #[test]
    fn netlink_attributes_round_trip() {
        let mut inner = nla(IFLA_XDP_FD, &(-1i32).to_ne_bytes());
        inner.extend(nla(IFLA_XDP_ATTACHED, &[2]));
        let outer = nla(IFLA_XDP | NLA_F_NESTED, &inner);
        let a = attrs(&outer);
        assert_eq!(a.len(), 1);
        assert_eq!(a[0].0, IFLA_XDP);
        let b = attrs(a[0].1);
        assert_eq!(b, vec![(IFLA_XDP_FD, &(-1i32).to_ne_bytes()[..]), (IFLA_XDP_ATTACHED, &[2u8][..])]);
    }
}
