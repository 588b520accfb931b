//! eBPF `SK_REUSEPORT` steering with maps (`bpf/reuseport.bpf.c`): the
//! program computes the policy's Toeplitz bucket in the kernel and picks
//! the socket through two maps, bucket -> worker (`buckets`) and worker ->
//! socket (`socks`, a `REUSEPORT_SOCKARRAY`). Moving a bucket, adding or
//! removing a worker are map updates: no re-attach, and no datagram is
//! steered to a closed socket (a worker's buckets move away before its
//! socket leaves the map; the kernel also drops a closing socket from the
//! map itself, and the program then lets the kernel's hash pick).
//!
//! aya 0.13 creates the maps, fills and reads them; it has no
//! `SK_REUSEPORT` program type, so the program is relocated with aya-obj
//! against aya's map descriptors and loaded here with `BPF_PROG_LOAD`, and
//! attached with `SO_ATTACH_REUSEPORT_EBPF`. Those three calls are the only
//! unsafe code.

use super::EbpfError;
use aya::maps::{Array, Map, MapData, PerCpuArray};
use rsskit_core::{L4Proto, RssPolicy, WorkerId};
use std::collections::HashSet;
use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use thiserror::Error;

/// Most sockets (workers) of one group (`RSSKIT_RP_MAX_SOCKS`).
pub const MAX_SOCKETS: u32 = 256;
/// Most buckets (`RSSKIT_RP_MAX_BUCKETS`, 2^`rsskit_core::rss::MAX_BITS`).
pub const MAX_BUCKETS: u32 = 128;
/// The program's name in the object.
const PROGRAM: &str = "rsskit_reuseport";
const V4_PORTS: u32 = 1;
const V6_PORTS: u32 = 2;
const WINDOWS: u32 = 4;
const MAX_BITS: usize = 7;
const MAX_WORDS: usize = 9;

/// `struct rsskit_rp_config` (bpf/reuseport.h).
#[derive(Debug, Clone, Copy, Default)]
#[repr(C)]
struct Config {
    mask: u32,
    flags: u32,
    bits: u32,
    _pad: u32,
    win: [[u32; MAX_WORDS]; MAX_BITS],
}

/// How the program computes the bucket; both give the policy's bucket bit
/// for bit (docs/BENCHMARKS.md compares their cost).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BucketMethod {
    /// Only the `bits` bucket bits, each the parity of the input ANDed with
    /// its key windows (as the classic BPF program): no table.
    #[default]
    Windows,
    /// The whole 32-bit hash from the byte table of `bpf/toeplitz.h`
    /// (one lookup per input byte), then masked.
    Table,
}
// SAFETY: plain integers, no padding.
unsafe impl aya::Pod for Config {}

/// `struct rsskit_tpz_table` (bpf/toeplitz.h).
#[derive(Clone, Copy)]
#[repr(C)]
struct TpzTable {
    t: [[u32; 256]; 36],
}
// SAFETY: plain integers, no padding.
unsafe impl aya::Pod for TpzTable {}

/// Why eBPF reuseport steering could not be set up or changed.
#[derive(Debug, Error)]
pub enum ReuseportError {
    /// The object could not be had or its maps created (no root/`CAP_BPF`, ...).
    #[error(transparent)]
    Ebpf(#[from] EbpfError),
    /// The object lacks something the loader needs (a stale build).
    #[error("reuseport eBPF object: {0}")]
    Object(String),
    /// A map of the object could not be used or updated.
    #[error("reuseport eBPF map {map}: {source}")]
    Map {
        /// The map's name.
        map: &'static str,
        /// What aya said.
        #[source]
        source: aya::maps::MapError,
    },
    /// The kernel refused the program (verifier log attached).
    #[error("loading the SK_REUSEPORT program: {source}{log}")]
    ProgLoad {
        /// The `bpf()` error.
        #[source]
        source: io::Error,
        /// The verifier log's last lines, if any.
        log: String,
    },
    /// A socket could not be put in (or taken out of) the socket map.
    #[error("worker {worker}'s socket in the reuseport map: {source}")]
    Socket {
        /// The worker.
        worker: u32,
        /// What the kernel said.
        #[source]
        source: io::Error,
    },
    /// `SO_ATTACH_REUSEPORT_EBPF` failed.
    #[error("SO_ATTACH_REUSEPORT_EBPF: {0}")]
    Attach(#[source] io::Error),
    /// `BPF_OBJ_GET_INFO_BY_FD` failed.
    #[error("reading the SK_REUSEPORT program's info: {0}")]
    Info(#[source] io::Error),
    /// More workers or buckets than the maps hold, or none.
    #[error("{0}")]
    Limits(String),
    /// A bucket or worker out of range, or a worker without a socket.
    #[error("{0}")]
    Bad(String),
}

/// The program's per-CPU counters, summed over CPUs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Counters {
    /// A socket was selected.
    pub steered: u64,
    /// The bucket's worker had no socket in the map: the kernel's hash picked.
    pub no_socket: u64,
    /// Not hashable here (another family, another IPv6 next header): the kernel's hash picked.
    pub fallback: u64,
    /// Header load, map lookup or selection failed: the kernel's hash picked.
    pub errors: u64,
}

/// A loaded reuseport steering program and its maps.
pub struct ReuseportSteering {
    prog: OwnedFd,
    insns: usize,
    socks: MapData,
    buckets: Array<MapData, u32>,
    counters: PerCpuArray<MapData, u64>,
    bucket_hits: PerCpuArray<MapData, u64>,
    /// Bucket -> worker, as in the map.
    owner: Vec<u32>,
    /// Which workers have a socket in the map.
    present: Vec<bool>,
    /// Kept for its lifetime only (the program's other maps).
    _ebpf: aya::Ebpf,
}

impl std::fmt::Debug for ReuseportSteering {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReuseportSteering")
            .field("owner", &self.owner)
            .field("present", &self.present)
            .finish()
    }
}

impl ReuseportSteering {
    /// Loads the program for `policy` (key, bucket bits, bucket -> worker,
    /// and the 2- or 4-tuple choice of each family for `proto`, the group's
    /// protocol). Sockets are added with [`Self::insert_socket`], then the
    /// program is attached with [`Self::attach`].
    pub fn load(policy: &RssPolicy, proto: L4Proto) -> Result<Self, ReuseportError> {
        Self::load_with(policy, proto, BucketMethod::default())
    }

    /// [`Self::load`] with the bucket computed by `method`.
    pub fn load_with(
        policy: &RssPolicy,
        proto: L4Proto,
        method: BucketMethod,
    ) -> Result<Self, ReuseportError> {
        let workers = policy.workers() as u32;
        if workers == 0 || workers > MAX_SOCKETS {
            return Err(ReuseportError::Limits(format!(
                "{workers} workers: eBPF reuseport steering takes 1..={MAX_SOCKETS}"
            )));
        }
        if policy.buckets() > MAX_BUCKETS {
            return Err(ReuseportError::Limits(format!(
                "{} buckets: eBPF reuseport steering takes up to {MAX_BUCKETS}",
                policy.buckets()
            )));
        }
        let mut ebpf = super::load_with("reuseport", aya::EbpfLoader::new().allow_unsupported_maps())?;
        let (prog, insns) = load_program(&ebpf)?;
        let mut take = |name: &'static str| {
            ebpf.take_map(name).ok_or_else(|| ReuseportError::Object(format!("no map {name:?}")))
        };
        let socks = match take("socks")? {
            Map::Unsupported(m) => m,
            _ => return Err(ReuseportError::Object("map \"socks\" is not a REUSEPORT_SOCKARRAY".into())),
        };
        let map_err = |map: &'static str| move |source| ReuseportError::Map { map, source };
        let mut buckets: Array<MapData, u32> =
            Array::try_from(take("buckets")?).map_err(map_err("buckets"))?;
        let mut config: Array<MapData, Config> =
            Array::try_from(take("config")?).map_err(map_err("config"))?;
        let mut tpz: Array<MapData, TpzTable> = Array::try_from(take("tpz")?).map_err(map_err("tpz"))?;
        let counters = PerCpuArray::try_from(take("counters")?).map_err(map_err("counters"))?;
        let bucket_hits = PerCpuArray::try_from(take("bucket_hits")?).map_err(map_err("bucket_hits"))?;

        let tables = policy.toeplitz().byte_tables();
        let mut table = TpzTable { t: [[0; 256]; 36] };
        for (dst, src) in table.t.iter_mut().zip(tables) {
            *dst = *src;
        }
        tpz.set(0, table, 0).map_err(map_err("tpz"))?;
        let owner: Vec<u32> = policy.bucket_workers().iter().map(|w| w.0).collect();
        for (b, &w) in owner.iter().enumerate() {
            buckets.set(b as u32, w, 0).map_err(map_err("buckets"))?;
        }
        let mut flags = 0;
        if policy.hash_type(false, proto, false).has_ports() {
            flags |= V4_PORTS;
        }
        if policy.hash_type(true, proto, false).has_ports() {
            flags |= V6_PORTS;
        }
        let mut win = [[0u32; MAX_WORDS]; MAX_BITS];
        let key = policy.key().as_bytes();
        for (j, row) in win.iter_mut().enumerate().take(policy.bits() as usize) {
            for (w, x) in row.iter_mut().enumerate() {
                *x = rsskit_core::toeplitz::key_window(key, 32 * w + 31 - j);
            }
        }
        if method == BucketMethod::Windows {
            flags |= WINDOWS;
        }
        let cfg = Config { mask: policy.mask(), flags, bits: policy.bits(), _pad: 0, win };
        config.set(0, cfg, 0).map_err(map_err("config"))?;
        Ok(ReuseportSteering {
            prog,
            insns,
            socks,
            buckets,
            counters,
            bucket_hits,
            owner,
            present: vec![false; workers as usize],
            _ebpf: ebpf,
        })
    }

    /// Puts worker `worker`'s socket (bound, with `SO_REUSEPORT`; a TCP
    /// socket must listen) in the socket map, replacing any previous one.
    /// `worker` may be one past the last (adding a worker); it owns no
    /// bucket until [`Self::move_bucket`] gives it some.
    pub fn insert_socket(&mut self, worker: u32, sock: BorrowedFd<'_>) -> Result<(), ReuseportError> {
        if worker as usize > self.present.len() || worker >= MAX_SOCKETS {
            return Err(ReuseportError::Bad(format!(
                "worker {worker}: workers are 0..={} (one more adds a worker)",
                self.present.len()
            )));
        }
        let value = sock.as_raw_fd() as u64;
        map_update(self.socks.fd().as_fd(), &worker, &value)
            .map_err(|source| ReuseportError::Socket { worker, source })?;
        if worker as usize == self.present.len() {
            self.present.push(true);
        } else {
            self.present[worker as usize] = true;
        }
        Ok(())
    }

    /// Attaches the program to `sock`'s reuseport group: from now on it
    /// steers for every socket of the group.
    pub fn attach(&self, sock: BorrowedFd<'_>) -> Result<(), ReuseportError> {
        crate::socket::setsockopt_int(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_ATTACH_REUSEPORT_EBPF,
            self.prog.as_raw_fd(),
        )
        .map_err(ReuseportError::Attach)?;
        Ok(())
    }

    /// Instructions of the loaded program.
    pub fn insns(&self) -> usize {
        self.insns
    }

    /// The program's descriptor (to attach it elsewhere, or inspect it).
    pub fn prog_fd(&self) -> BorrowedFd<'_> {
        self.prog.as_fd()
    }

    /// Bucket -> worker, as in the map.
    pub fn owners(&self) -> &[u32] {
        &self.owner
    }

    /// Workers known to the map (with or without a socket now).
    pub fn workers(&self) -> usize {
        self.present.len()
    }

    /// Whether `worker` has a socket in the map.
    pub fn has_socket(&self, worker: u32) -> bool {
        self.present.get(worker as usize).copied().unwrap_or(false)
    }

    /// Moves `bucket` to `worker` (which must have a socket): one map
    /// update, effective for the next datagram or SYN.
    pub fn move_bucket(&mut self, bucket: u32, worker: u32) -> Result<(), ReuseportError> {
        if bucket as usize >= self.owner.len() {
            return Err(ReuseportError::Bad(format!(
                "bucket {bucket}: there are {} buckets",
                self.owner.len()
            )));
        }
        if !self.has_socket(worker) {
            return Err(ReuseportError::Bad(format!(
                "worker {worker} has no socket: refusing to steer to it"
            )));
        }
        self.buckets
            .set(bucket, worker, 0)
            .map_err(|source| ReuseportError::Map { map: "buckets", source })?;
        self.owner[bucket as usize] = worker;
        Ok(())
    }

    /// Takes `worker` out: its buckets first go round robin to the workers
    /// that remain (returned as `(bucket, new worker)`), then its socket
    /// leaves the map, so no datagram is steered to it once this returns
    /// and the caller may close it. Refuses the last worker.
    pub fn remove_worker(&mut self, worker: u32) -> Result<Vec<(u32, u32)>, ReuseportError> {
        if !self.has_socket(worker) {
            return Err(ReuseportError::Bad(format!("worker {worker} has no socket")));
        }
        let rest: Vec<u32> =
            (0..self.present.len() as u32).filter(|&w| w != worker && self.has_socket(w)).collect();
        if rest.is_empty() {
            return Err(ReuseportError::Bad(format!(
                "worker {worker} is the last one: nothing to move its buckets to"
            )));
        }
        let mine: Vec<u32> =
            (0..self.owner.len() as u32).filter(|&b| self.owner[b as usize] == worker).collect();
        let mut moves = Vec::with_capacity(mine.len());
        for (i, b) in mine.into_iter().enumerate() {
            let to = rest[i % rest.len()];
            self.move_bucket(b, to)?;
            moves.push((b, to));
        }
        map_delete(self.socks.fd().as_fd(), &worker)
            .map_err(|source| ReuseportError::Socket { worker, source })?;
        self.present[worker as usize] = false;
        Ok(moves)
    }

    /// The counters, summed over CPUs.
    pub fn counters(&self) -> Result<Counters, ReuseportError> {
        let get = |i: u32| -> Result<u64, ReuseportError> {
            let v =
                self.counters.get(&i, 0).map_err(|source| ReuseportError::Map { map: "counters", source })?;
            Ok(v.iter().sum())
        };
        Ok(Counters { steered: get(0)?, no_socket: get(1)?, fallback: get(2)?, errors: get(3)? })
    }

    /// Datagrams (UDP) or SYNs (TCP) hashed into each bucket so far.
    pub fn bucket_hits(&self) -> Result<Vec<u64>, ReuseportError> {
        (0..self.owner.len() as u32)
            .map(|b| {
                let v = self
                    .bucket_hits
                    .get(&b, 0)
                    .map_err(|source| ReuseportError::Map { map: "bucket_hits", source })?;
                Ok(v.iter().sum())
            })
            .collect()
    }

    /// The kernel's run statistics of the program, `(total ns, runs)`:
    /// counted only while some [`enable_run_stats`] descriptor is open.
    pub fn run_stats(&self) -> Result<(u64, u64), ReuseportError> {
        // SAFETY: bpf_prog_info is plain integers; all-zero is valid.
        let mut info: aya_obj::generated::bpf_prog_info = unsafe { std::mem::zeroed() };
        let mut a = InfoAttr {
            bpf_fd: self.prog.as_raw_fd() as u32,
            info_len: std::mem::size_of_val(&info) as u32,
            info: &mut info as *mut _ as u64,
        };
        sys_bpf(BPF_OBJ_GET_INFO_BY_FD, &mut a).map_err(ReuseportError::Info)?;
        Ok((info.run_time_ns, info.run_cnt))
    }

    /// The worker owning `bucket` now.
    pub fn owner_of(&self, bucket: u32) -> Option<WorkerId> {
        self.owner.get(bucket as usize).map(|&w| WorkerId(w))
    }
}

/// Relocates the program against `ebpf`'s maps (aya created them) and
/// loads it as `BPF_PROG_TYPE_SK_REUSEPORT`.
fn load_program(ebpf: &aya::Ebpf) -> Result<(OwnedFd, usize), ReuseportError> {
    let bytes = super::object("reuseport")?;
    let mut obj = aya_obj::Object::parse(bytes).map_err(|e| ReuseportError::Object(e.to_string()))?;
    let mut fds: Vec<(String, RawFd, aya_obj::Map)> = Vec::new();
    for (name, m) in &obj.maps {
        let fd = match ebpf.map(name) {
            Some(Map::Array(d)) | Some(Map::PerCpuArray(d)) | Some(Map::Unsupported(d)) => {
                d.fd().as_fd().as_raw_fd()
            }
            _ => return Err(ReuseportError::Object(format!("map {name:?} was not created"))),
        };
        fds.push((name.clone(), fd, m.clone()));
    }
    let text: HashSet<usize> = obj.functions.keys().map(|(s, _)| *s).collect();
    obj.relocate_maps(fds.iter().map(|(n, fd, m)| (n.as_str(), *fd, m)), &text)
        .map_err(|e| ReuseportError::Object(e.to_string()))?;
    obj.relocate_calls(&text).map_err(|e| ReuseportError::Object(e.to_string()))?;
    let p =
        obj.programs.get(PROGRAM).ok_or_else(|| ReuseportError::Object(format!("no program {PROGRAM:?}")))?;
    let f = obj
        .functions
        .get(&p.function_key())
        .ok_or_else(|| ReuseportError::Object(format!("no code for {PROGRAM:?}")))?;
    let license = obj.license.clone();
    Ok((prog_load(&f.instructions, &license)?, f.instructions.len()))
}

/// `union bpf_attr` for `BPF_PROG_LOAD`, up to `expected_attach_type`.
#[repr(C)]
#[derive(Default)]
struct ProgLoadAttr {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
    kern_version: u32,
    prog_flags: u32,
    prog_name: [u8; 16],
    prog_ifindex: u32,
    expected_attach_type: u32,
}

/// `union bpf_attr` for the map element commands.
#[repr(C)]
struct MapElemAttr {
    map_fd: u32,
    _pad: u32,
    key: u64,
    value: u64,
    flags: u64,
}

/// `union bpf_attr` for `BPF_OBJ_GET_INFO_BY_FD`.
#[repr(C)]
struct InfoAttr {
    bpf_fd: u32,
    info_len: u32,
    info: u64,
}

/// Turns on the kernel's per-program run-time statistics while the
/// returned descriptor is open (`BPF_ENABLE_STATS`, kernel >= 5.8), for
/// measuring [`ReuseportSteering::run_stats`].
pub fn enable_run_stats() -> io::Result<OwnedFd> {
    aya::sys::enable_stats(aya::sys::Stats::RunTime).map_err(|e| io::Error::other(e.to_string()))
}

const BPF_OBJ_GET_INFO_BY_FD: libc::c_long = 15;
const BPF_MAP_UPDATE_ELEM: libc::c_long = 2;
const BPF_MAP_DELETE_ELEM: libc::c_long = 3;
const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_PROG_TYPE_SK_REUSEPORT: u32 = 21;
const BPF_SK_REUSEPORT_SELECT: u32 = 39;

fn sys_bpf<T>(cmd: libc::c_long, attr: &mut T) -> io::Result<libc::c_long> {
    // SAFETY: `attr` is a live, initialised bpf_attr prefix of the size
    // passed; the kernel reads (and for PROG_LOAD writes the log into the
    // buffer the attr points at, owned by the caller) only within it.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            (attr as *mut T).cast::<libc::c_void>(),
            std::mem::size_of::<T>() as u32,
        )
    };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

fn prog_load(insns: &[aya_obj::generated::bpf_insn], license: &CString) -> Result<OwnedFd, ReuseportError> {
    let mut name = [0u8; 16];
    name[..PROGRAM.len().min(15)].copy_from_slice(&PROGRAM.as_bytes()[..PROGRAM.len().min(15)]);
    let attr = |log: &mut Vec<u8>| ProgLoadAttr {
        prog_type: BPF_PROG_TYPE_SK_REUSEPORT,
        insn_cnt: insns.len() as u32,
        insns: insns.as_ptr() as u64,
        license: license.as_ptr() as u64,
        log_level: u32::from(!log.is_empty()),
        log_size: log.len() as u32,
        log_buf: if log.is_empty() { 0 } else { log.as_mut_ptr() as u64 },
        prog_name: name,
        expected_attach_type: BPF_SK_REUSEPORT_SELECT,
        ..Default::default()
    };
    let mut none = Vec::new();
    match sys_bpf(BPF_PROG_LOAD, &mut attr(&mut none)) {
        // SAFETY: BPF_PROG_LOAD returns a new descriptor we now own.
        Ok(fd) => Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) }),
        Err(source) => {
            // Once more with the verifier log, to say why.
            let mut log = vec![0u8; 1 << 20];
            let _ = sys_bpf(BPF_PROG_LOAD, &mut attr(&mut log));
            let end = log.iter().position(|&b| b == 0).unwrap_or(0);
            let text = String::from_utf8_lossy(&log[..end]);
            let tail: Vec<&str> = text.lines().rev().take(4).collect();
            let log = if tail.is_empty() {
                String::new()
            } else {
                format!(" (verifier: {})", tail.into_iter().rev().collect::<Vec<_>>().join(" | "))
            };
            Err(ReuseportError::ProgLoad { source, log })
        }
    }
}

fn map_update(map: BorrowedFd<'_>, key: &u32, value: &u64) -> io::Result<()> {
    let mut a = MapElemAttr {
        map_fd: map.as_raw_fd() as u32,
        _pad: 0,
        key: key as *const u32 as u64,
        value: value as *const u64 as u64,
        flags: 0, // BPF_ANY
    };
    sys_bpf(BPF_MAP_UPDATE_ELEM, &mut a).map(drop)
}

fn map_delete(map: BorrowedFd<'_>, key: &u32) -> io::Result<()> {
    let mut a = MapElemAttr {
        map_fd: map.as_raw_fd() as u32,
        _pad: 0,
        key: key as *const u32 as u64,
        value: 0,
        flags: 0,
    };
    sys_bpf(BPF_MAP_DELETE_ELEM, &mut a).map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::socket::{udp_socket, UdpOptions};
    use rsskit_core::{CpuId, HashConfig, RssKey};

    fn policy(workers: u32, bits: u32) -> RssPolicy {
        let cpus: Vec<CpuId> = (0..workers).map(|_| CpuId(0)).collect();
        RssPolicy::new(RssKey::microsoft(), HashConfig::default(), &cpus, Some(bits)).unwrap()
    }

    /// Loads, verifies and attaches; bad moves are refused. Needs root
    /// (CAP_BPF); fails loudly otherwise.
    #[test]
    #[cfg_attr(rsskit_no_clang, ignore = "built without clang: no eBPF objects")]
    fn loads_attaches_and_refuses_bad_moves() {
        let p = policy(2, 3);
        let mut st = ReuseportSteering::load(&p, L4Proto::Udp).expect("load (needs root / CAP_BPF)");
        let opts = UdpOptions { reuseport: true, ..Default::default() };
        let a = udp_socket("127.0.0.1:0".parse().unwrap(), &opts).unwrap();
        let local = a.local_addr().unwrap().as_socket().unwrap();
        let b = udp_socket(local, &opts).unwrap();
        st.insert_socket(0, a.as_fd()).unwrap();
        st.insert_socket(1, b.as_fd()).unwrap();
        st.attach(a.as_fd()).unwrap();
        assert_eq!(st.owners(), &[0, 1, 0, 1, 0, 1, 0, 1]);
        st.move_bucket(0, 1).unwrap();
        assert_eq!(st.owner_of(0), Some(WorkerId(1)));
        assert!(st.move_bucket(8, 0).unwrap_err().to_string().contains("bucket 8"));
        assert!(st.move_bucket(0, 2).unwrap_err().to_string().contains("no socket"));
        let moves = st.remove_worker(1).unwrap();
        assert_eq!(moves.len(), 5);
        assert!(st.owners().iter().all(|&w| w == 0));
        assert!(st.remove_worker(0).unwrap_err().to_string().contains("last"));
        assert_eq!(st.counters().unwrap(), Counters::default());
    }

    /// Which of `socks` received each datagram sent from `srcs` (one per
    /// source address), waiting up to 2 s for each.
    fn receivers(
        socks: &[socket2::Socket],
        srcs: &[std::net::UdpSocket],
        to: std::net::SocketAddr,
    ) -> Vec<usize> {
        for s in socks {
            s.set_read_timeout(Some(std::time::Duration::from_millis(5))).unwrap();
        }
        let mut got = Vec::new();
        for (i, src) in srcs.iter().enumerate() {
            src.send_to(&(i as u32).to_be_bytes(), to).unwrap();
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
            let owner = 'wait: loop {
                for (w, s) in socks.iter().enumerate() {
                    let mut buf = [std::mem::MaybeUninit::<u8>::uninit(); 16];
                    if let Ok(n) = s.recv(&mut buf) {
                        assert_eq!(n, 4);
                        break 'wait w;
                    }
                }
                assert!(std::time::Instant::now() < deadline, "datagram {i} never arrived");
            };
            got.push(owner);
        }
        got
    }

    /// 4 bytes of IPv4 options (NOP NOP NOP EOL): IHL 6, the ports are
    /// past them.
    fn set_ip_options(s: &impl AsRawFd) {
        let opts = [1u8, 1, 1, 0];
        // SAFETY: `opts` is live for the call and its length is passed.
        let rc = unsafe {
            libc::setsockopt(s.as_raw_fd(), libc::IPPROTO_IP, libc::IP_OPTIONS, opts.as_ptr().cast(), 4)
        };
        assert_eq!(rc, 0, "IP_OPTIONS: {}", io::Error::last_os_error());
    }

    /// The program's verdicts are the software policy's, through real
    /// sockets (BPF_PROG_TEST_RUN does not run SK_REUSEPORT programs):
    /// IPv4 (every other sender with IP options) and IPv6, 2- and 4-tuple,
    /// and again after a live bucket move.
    #[test]
    #[cfg_attr(rsskit_no_clang, ignore = "built without clang: no eBPF objects")]
    fn verdicts_equal_the_policy_on_loopback() {
        use rsskit_core::FlowTuple;
        let cases = [(false, true), (false, false), (true, true), (true, false)];
        for (method, (ipv6, four)) in
            [BucketMethod::Windows, BucketMethod::Table].into_iter().flat_map(|m| cases.map(|c| (m, c)))
        {
            let cpus = [CpuId(0), CpuId(0), CpuId(0)];
            let hc = HashConfig::default().with_udp_4tuple(four);
            let mut p = RssPolicy::new(RssKey::microsoft(), hc, &cpus, Some(4)).unwrap();
            let mut st =
                ReuseportSteering::load_with(&p, L4Proto::Udp, method).expect("load (needs root / CAP_BPF)");
            let opts = UdpOptions { reuseport: true, ..Default::default() };
            let bind: std::net::SocketAddr = if ipv6 { "[::1]:0" } else { "127.0.0.1:0" }.parse().unwrap();
            let first = udp_socket(bind, &opts).unwrap();
            let local = first.local_addr().unwrap().as_socket().unwrap();
            let mut socks = vec![first];
            for _ in 1..3 {
                socks.push(udp_socket(local, &opts).unwrap());
            }
            for (w, s) in socks.iter().enumerate() {
                st.insert_socket(w as u32, s.as_fd()).unwrap();
            }
            st.attach(socks[0].as_fd()).unwrap();
            // 2-tuple: vary the source address (IPv6 loopback has one
            // address, so its 2-tuple case checks all land on one owner).
            let srcs: Vec<std::net::UdpSocket> = (0..48)
                .map(|i| {
                    let a = if ipv6 || four {
                        bind.ip().to_string()
                    } else {
                        format!("127.0.{}.{}", i / 200, 1 + i % 200)
                    };
                    let a = if ipv6 { format!("[{a}]:0") } else { format!("{a}:0") };
                    let s = std::net::UdpSocket::bind(a.as_str()).unwrap();
                    if !ipv6 && i % 2 == 1 {
                        set_ip_options(&s);
                    }
                    s
                })
                .collect();
            let want = |p: &RssPolicy| -> Vec<usize> {
                srcs.iter()
                    .map(|s| {
                        let t = FlowTuple::new(
                            s.local_addr().unwrap().ip(),
                            s.local_addr().unwrap().port(),
                            local.ip(),
                            local.port(),
                            L4Proto::Udp,
                        );
                        p.worker_of(&t).index()
                    })
                    .collect()
            };
            let w0 = want(&p);
            if four || !ipv6 {
                assert!(w0.iter().any(|&w| w != w0[0]), "the flows should spread: {w0:?}");
            }
            assert_eq!(receivers(&socks, &srcs, local), w0, "{method:?} ipv6={ipv6} 4-tuple={four}");
            // Live: every bucket to worker (b + 1) % 3.
            for b in 0..p.buckets() {
                let w = (p.worker_of_bucket(b).0 + 1) % 3;
                st.move_bucket(b, w).unwrap();
                p.assign(b, WorkerId(w)).unwrap();
            }
            assert_eq!(
                receivers(&socks, &srcs, local),
                want(&p),
                "after the move: ipv6={ipv6} 4-tuple={four}"
            );
            let c = st.counters().unwrap();
            assert_eq!((c.steered, c.no_socket, c.errors, c.fallback), (96, 0, 0, 0), "{c:?}");
            assert_eq!(st.bucket_hits().unwrap().iter().sum::<u64>(), 96);
        }
    }

    /// Removing a worker moves its buckets first, so once its socket is
    /// closed nothing is steered to it (no datagram left to the kernel's
    /// hash either); a worker added later (a new socket joining the group)
    /// gets buckets by map updates alone.
    #[test]
    #[cfg_attr(rsskit_no_clang, ignore = "built without clang: no eBPF objects")]
    fn remove_then_add_a_worker_live() {
        let hc = HashConfig::default().with_udp_4tuple(true);
        let p = RssPolicy::new(RssKey::microsoft(), hc, &[CpuId(0), CpuId(0), CpuId(0)], Some(3)).unwrap();
        let mut st = ReuseportSteering::load(&p, L4Proto::Udp).expect("load (needs root / CAP_BPF)");
        let opts = UdpOptions { reuseport: true, ..Default::default() };
        let first = udp_socket("127.0.0.1:0".parse().unwrap(), &opts).unwrap();
        let local = first.local_addr().unwrap().as_socket().unwrap();
        let mut socks = vec![first, udp_socket(local, &opts).unwrap(), udp_socket(local, &opts).unwrap()];
        for (w, s) in socks.iter().enumerate() {
            st.insert_socket(w as u32, s.as_fd()).unwrap();
        }
        st.attach(socks[0].as_fd()).unwrap();
        let srcs: Vec<std::net::UdpSocket> =
            (0..32).map(|_| std::net::UdpSocket::bind("127.0.0.1:0").unwrap()).collect();
        let moves = st.remove_worker(2).unwrap();
        assert!(moves.iter().all(|&(_, to)| to < 2) && !moves.is_empty(), "{moves:?}");
        drop(socks.pop()); // worker 2's socket closes
        let got = receivers(&socks, &srcs, local);
        assert!(got.iter().all(|&w| w < 2));
        let c = st.counters().unwrap();
        assert_eq!((c.steered, c.no_socket, c.fallback, c.errors), (32, 0, 0, 0), "{c:?}");
        // A new worker 2: a new socket in the group, then its buckets.
        socks.push(udp_socket(local, &opts).unwrap());
        st.insert_socket(2, socks[2].as_fd()).unwrap();
        for (b, _) in &moves {
            st.move_bucket(*b, 2).unwrap();
        }
        let got = receivers(&socks, &srcs, local);
        let owners = st.owners().to_vec();
        for (s, w) in srcs.iter().zip(&got) {
            let a = s.local_addr().unwrap();
            let t = rsskit_core::FlowTuple::new(a.ip(), a.port(), local.ip(), local.port(), L4Proto::Udp);
            let b = p.bucket(p.hash_tuple(&t));
            assert_eq!(*w as u32, owners[b as usize], "from {a}");
        }
        assert!(got.contains(&2), "the new worker got its buckets' datagrams: {got:?}");
        assert_eq!(st.counters().unwrap().steered, 64);
    }

    #[test]
    fn too_many_buckets_or_workers_is_named() {
        let p = policy(300, 2);
        let e = ReuseportSteering::load(&p, L4Proto::Udp).unwrap_err();
        assert!(e.to_string().contains("300 workers"), "{e}");
    }
}
