//! The C API of rsskit: what FreeBSD's librss and `sys/net/rss_config.h`
//! give applications, on Linux.
//!
//! - the RSS configuration ([`RssConfig`]): buckets, bucket -> CPU map,
//!   key, hash types ([`rss_config_new`], [`rss_getnumbuckets`],
//!   [`rss_get_bucket_map`], [`rss_get_key`], [`rss_get_hash_types`]);
//! - hashing a tuple to hash, bucket, worker and CPU ([`rss_hash_tuple`]);
//! - a steered group of per-worker UDP sockets or TCP listeners
//!   ([`rss_group_open`]);
//! - the bucket of each received datagram ([`rss_recvfrom`]);
//! - a source port for an outgoing flow whose replies the calling worker
//!   owns ([`rss_pick_source_port`], [`rss_connect`]).
//!
//! Every function returns `RSS_OK` (0) or a negative `RSS_E_*` code: null
//! pointers, short buffers and bad values are errors, never crashes, and a
//! panic never crosses into C ([`rss_last_error`] says what went wrong).
#![warn(missing_docs)]

use rsskit_app::{Error, HashConfig, HashType, L4Proto, RssKey, RssPolicy, Steer, WorkerId};
use rsskit_linux::socket::{sockaddr_to_std, std_to_sockaddr, Batch};
use std::cell::RefCell;
use std::ffi::{c_char, c_int, CString};
use std::mem::size_of;
use std::net::SocketAddr;
use std::os::fd::{BorrowedFd, IntoRawFd};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// Success.
pub const RSS_OK: c_int = 0;
/// A required pointer argument is null.
pub const RSS_E_NULL: c_int = -1;
/// An argument is out of range or malformed (bad CPU list, key, bucket,
/// worker, address family, protocol, steering mode).
pub const RSS_E_INVAL: c_int = -2;
/// The output buffer is too short; the needed length was stored.
pub const RSS_E_SHORT_BUFFER: c_int = -3;
/// No port in the range makes the replies land in the worker's buckets.
pub const RSS_E_NO_PORT: c_int = -4;
/// Ports land there, but all of them are in use.
pub const RSS_E_NO_FREE_PORT: c_int = -5;
/// The group's port is already in use.
pub const RSS_E_ADDR_IN_USE: c_int = -6;
/// A system call failed (`errno` is set where the OS gave one).
pub const RSS_E_SYSTEM: c_int = -7;
/// An internal error (a caught panic).
pub const RSS_E_INTERNAL: c_int = -8;

/// Hash type bits, FreeBSD's `RSS_HASHTYPE_RSS_*` values.
pub const RSS_HASHTYPE_RSS_IPV4: u32 = 1 << 1;
/// TCP over IPv4, 4-tuple.
pub const RSS_HASHTYPE_RSS_TCP_IPV4: u32 = 1 << 2;
/// IPv6, 2-tuple.
pub const RSS_HASHTYPE_RSS_IPV6: u32 = 1 << 3;
/// TCP over IPv6, 4-tuple.
pub const RSS_HASHTYPE_RSS_TCP_IPV6: u32 = 1 << 5;
/// UDP over IPv4, 4-tuple.
pub const RSS_HASHTYPE_RSS_UDP_IPV4: u32 = 1 << 7;
/// UDP over IPv6, 4-tuple.
pub const RSS_HASHTYPE_RSS_UDP_IPV6: u32 = 1 << 9;

/// Shortest Toeplitz key [`rss_config_new`] takes (the hash of an IPv6
/// 4-tuple reads 36 + 4 bytes of key).
pub const RSS_KEY_MIN_LEN: usize = 40;
/// Longest Toeplitz key [`rss_config_new`] takes (the 52-byte keys of some
/// NICs).
pub const RSS_KEY_MAX_LEN: usize = 52;

/// Steering: the socket of the CPU the kernel processed the packet on.
pub const RSS_STEER_CPU: c_int = 0;
/// Steering: the socket of the bucket owner (Toeplitz hash in the kernel).
pub const RSS_STEER_TOEPLITZ: c_int = 1;
/// Steering: the kernel's own reuseport hash.
pub const RSS_STEER_KERNEL: c_int = 2;
/// Steering: one socket shared by every worker.
pub const RSS_STEER_SHARED: c_int = 3;

const HASH_BITS: [(u32, HashType); 6] = [
    (RSS_HASHTYPE_RSS_IPV4, HashType::Ipv4),
    (RSS_HASHTYPE_RSS_TCP_IPV4, HashType::TcpIpv4),
    (RSS_HASHTYPE_RSS_IPV6, HashType::Ipv6),
    (RSS_HASHTYPE_RSS_TCP_IPV6, HashType::TcpIpv6),
    (RSS_HASHTYPE_RSS_UDP_IPV4, HashType::UdpIpv4),
    (RSS_HASHTYPE_RSS_UDP_IPV6, HashType::UdpIpv6),
];

/// An RSS configuration (opaque): key, hash types, buckets, bucket ->
/// worker -> CPU. Worker `i` runs on the `i`-th CPU given.
pub struct RssConfig {
    policy: RssPolicy,
}

/// Where a flow lands.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct RssFlowInfo {
    /// Toeplitz hash.
    pub hash: u32,
    /// Bucket (`hash & (buckets - 1)`).
    pub bucket: u32,
    /// Owning worker.
    pub worker: u32,
    /// The owner's CPU.
    pub cpu: u32,
}

/// RSS metadata of a received datagram (FreeBSD's `IP_RECVFLOWID`,
/// `IP_RECVRSSBUCKETID`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct RssRecvInfo {
    /// Where the datagram's flow lands.
    pub flow: RssFlowInfo,
    /// 1 if the owner is not the worker that received it.
    pub misdirected: c_int,
    /// 1 if the datagram was longer than the buffer.
    pub truncated: c_int,
}

struct Fail {
    code: c_int,
    msg: String,
}

fn fail(code: c_int, msg: impl Into<String>) -> Fail {
    Fail { code, msg: msg.into() }
}

impl From<Error> for Fail {
    fn from(e: Error) -> Fail {
        let code = match &e {
            Error::NoPortInBucket { .. } => RSS_E_NO_PORT,
            Error::NoFreePort { .. } => RSS_E_NO_FREE_PORT,
            Error::PortInUse { .. } => RSS_E_ADDR_IN_USE,
            Error::Io { source, .. } | Error::Pin { source, .. } => {
                set_errno(source.raw_os_error());
                RSS_E_SYSTEM
            }
            Error::Group { .. } => RSS_E_SYSTEM,
            Error::Policy(_) | Error::Key(_) | Error::Tuple(_) | Error::NoSuchWorker { .. } => RSS_E_INVAL,
            _ => RSS_E_INTERNAL,
        };
        fail(code, e.to_string())
    }
}

fn set_errno(e: Option<i32>) {
    if let Some(e) = e {
        // SAFETY: __errno_location returns the calling thread's errno slot.
        unsafe { *libc::__errno_location() = e };
    }
}

thread_local! {
    static LAST: RefCell<CString> = RefCell::new(CString::default());
    /// Receive buffer of [`rss_recvfrom`], per thread (one datagram, pktinfo).
    static RX: RefCell<Batch> = RefCell::new(Batch::new(1, 65536, true));
}

/// Runs `f`, turning its error into a code (recorded for
/// [`rss_last_error`]) and a panic into `RSS_E_INTERNAL`.
fn ffi(f: impl FnOnce() -> Result<isize, Fail>) -> isize {
    let r = catch_unwind(AssertUnwindSafe(f))
        .unwrap_or_else(|_| Err(fail(RSS_E_INTERNAL, "internal error (panic caught at the C boundary)")));
    match r {
        Ok(v) => v,
        Err(e) => {
            let msg = CString::new(e.msg.replace('\0', " ")).unwrap_or_default();
            LAST.with(|l| *l.borrow_mut() = msg);
            e.code as isize
        }
    }
}

fn ffi_int(f: impl FnOnce() -> Result<(), Fail>) -> c_int {
    ffi(|| f().map(|()| 0)) as c_int
}

/// The configuration behind `p`.
fn cfg<'a>(p: *const RssConfig) -> Result<&'a RssConfig, Fail> {
    // SAFETY: non-null pointers come from rss_config_new* and stay valid
    // until rss_config_free (the API contract).
    unsafe { p.as_ref() }.ok_or_else(|| fail(RSS_E_NULL, "null configuration"))
}

/// Stores `v` through `p`.
fn put<T>(p: *mut T, v: T, what: &str) -> Result<(), Fail> {
    if p.is_null() {
        return Err(fail(RSS_E_NULL, format!("null {what}")));
    }
    // SAFETY: non-null, and the caller passes a pointer to a writable T.
    unsafe { p.write(v) };
    Ok(())
}

/// A C socket address as a Rust one.
fn addr_in(p: *const libc::sockaddr, len: libc::socklen_t, what: &str) -> Result<SocketAddr, Fail> {
    if p.is_null() {
        return Err(fail(RSS_E_NULL, format!("null {what} address")));
    }
    // SAFETY: all-zero is a valid sockaddr_storage.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let n = (len as usize).min(size_of::<libc::sockaddr_storage>());
    // SAFETY: the caller's `p` is readable for `len` bytes (we read at most
    // that, and at most the storage's size).
    unsafe {
        std::ptr::copy_nonoverlapping(p.cast::<u8>(), (&mut ss as *mut libc::sockaddr_storage).cast(), n)
    };
    sockaddr_to_std(&ss, n as libc::socklen_t)
        .ok_or_else(|| fail(RSS_E_INVAL, format!("{what} address is not a whole IPv4 or IPv6 address")))
}

fn proto_of(p: c_int) -> Result<L4Proto, Fail> {
    match p {
        libc::IPPROTO_TCP => Ok(L4Proto::Tcp),
        libc::IPPROTO_UDP => Ok(L4Proto::Udp),
        _ => Err(fail(RSS_E_INVAL, format!("protocol {p} is neither IPPROTO_TCP nor IPPROTO_UDP"))),
    }
}

/// A source port range `lo..=hi`: 1 <= lo <= hi (port 0 is no port).
fn port_range(lo: u16, hi: u16) -> Result<std::ops::RangeInclusive<u16>, Fail> {
    if lo == 0 || lo > hi {
        return Err(fail(RSS_E_INVAL, format!("source port range {lo}-{hi}: give 1 <= lo <= hi")));
    }
    Ok(lo..=hi)
}

fn worker_of(c: &RssConfig, w: u32) -> Result<WorkerId, Fail> {
    if (w as usize) < c.policy.workers() {
        Ok(WorkerId(w))
    } else {
        Err(fail(RSS_E_INVAL, format!("worker {w} does not exist ({} workers)", c.policy.workers())))
    }
}

fn flow_info(p: &RssPolicy, hash: u32) -> RssFlowInfo {
    let bucket = p.bucket(hash);
    let worker = p.worker_of_bucket(bucket);
    RssFlowInfo { hash, bucket, worker: worker.0, cpu: p.cpu_of(worker).map_or(u32::MAX, |c| c.0) }
}

/// Creates a configuration: one worker per entry of `cpus` (worker `i` on
/// CPU `cpus[i]`), buckets round-robin over the workers.
///
/// `bits`: bucket bits (1..=7), or -1 for the default. `key`/`key_len`:
/// the Toeplitz key ([`RSS_KEY_MIN_LEN`] to [`RSS_KEY_MAX_LEN`] bytes), or
/// null for the Microsoft key. A key that cannot reach every bucket for
/// these hash types (the all-zero key: every flow in bucket 0) is refused
/// with `RSS_E_INVAL`, as the command line refuses it.
/// `hash_types`: `RSS_HASHTYPE_RSS_*` bits, or 0 for FreeBSD's default
/// (IPv4, TCP/IPv4, IPv6, TCP/IPv6). The result goes to `*out`; free it
/// with [`rss_config_free`].
///
/// # Safety
/// `cpus` points to `ncpus` integers, `key` (if not null) to `key_len`
/// bytes, `out` to writable storage for a pointer.
#[no_mangle]
pub unsafe extern "C" fn rss_config_new(
    cpus: *const u32,
    ncpus: usize,
    bits: c_int,
    key: *const u8,
    key_len: usize,
    hash_types: u32,
    out: *mut *mut RssConfig,
) -> c_int {
    ffi_int(|| {
        if cpus.is_null() {
            return Err(fail(RSS_E_NULL, "null CPU list"));
        }
        if out.is_null() {
            return Err(fail(RSS_E_NULL, "null output pointer"));
        }
        if ncpus == 0 || ncpus > 4096 {
            return Err(fail(RSS_E_INVAL, format!("{ncpus} CPUs: give 1 to 4096")));
        }
        // SAFETY: the caller's `cpus` holds `ncpus` integers.
        let cpus = unsafe { std::slice::from_raw_parts(cpus, ncpus) };
        let key = if key.is_null() {
            RssKey::microsoft()
        } else {
            if !(RSS_KEY_MIN_LEN..=RSS_KEY_MAX_LEN).contains(&key_len) {
                return Err(fail(
                    RSS_E_INVAL,
                    format!("a {key_len}-byte key: give {RSS_KEY_MIN_LEN} to {RSS_KEY_MAX_LEN} bytes"),
                ));
            }
            // SAFETY: the caller's `key` holds `key_len` bytes (at most 52).
            RssKey::from_bytes(unsafe { std::slice::from_raw_parts(key, key_len) }).map_err(Error::from)?
        };
        if hash_types & !HASH_BITS.iter().fold(0, |a, b| a | b.0) != 0 {
            return Err(fail(RSS_E_INVAL, format!("unknown hash type bits in {hash_types:#x}")));
        }
        let hash = if hash_types == 0 {
            HashConfig::default()
        } else {
            HASH_BITS.iter().filter(|b| hash_types & b.0 != 0).fold(HashConfig::empty(), |h, b| h.with(b.1))
        };
        let bits = match bits {
            -1 => None,
            b if b > 0 => Some(b as u32),
            b => return Err(fail(RSS_E_INVAL, format!("bucket bits {b}: give 1 to 7, or -1"))),
        };
        let cpus: Vec<rsskit_app::CpuId> = cpus.iter().map(|&c| rsskit_app::CpuId(c)).collect();
        let policy = RssPolicy::new(key, hash, &cpus, bits).map_err(Error::from)?;
        // The command line's check, for these hash types and buckets; C has
        // no --allow-weak-key: a weak key is an error.
        let key_use = rsskit_core::keycheck::KeyUse::of_policy(&policy);
        rsskit_core::keycheck::vet(policy.key(), key_use, false)
            .map_err(|e| fail(RSS_E_INVAL, e.to_string()))?;
        put(out, Box::into_raw(Box::new(RssConfig { policy })), "output pointer")
    })
}

/// As [`rss_config_new`] with one worker per online CPU, the Microsoft key
/// and default bucket bits.
///
/// # Safety
/// `out` points to writable storage for a pointer.
#[no_mangle]
pub unsafe extern "C" fn rss_config_new_online(hash_types: u32, out: *mut *mut RssConfig) -> c_int {
    let cpus: Vec<u32> = rsskit_app::online_cpus().into_iter().map(|c| c as u32).collect();
    // SAFETY: `cpus` is a live vector of `len` integers; `out` as promised by our caller.
    unsafe { rss_config_new(cpus.as_ptr(), cpus.len(), -1, std::ptr::null(), 0, hash_types, out) }
}

/// Frees a configuration (null is a no-op).
///
/// # Safety
/// `c` comes from [`rss_config_new`] and is not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn rss_config_free(c: *mut RssConfig) {
    if !c.is_null() {
        // SAFETY: allocated by Box::into_raw in rss_config_new, freed once.
        drop(unsafe { Box::from_raw(c) });
    }
}

/// The number of buckets (`rss_getnumbuckets`).
///
/// # Safety
/// `c` is a live configuration, `out` writable.
#[no_mangle]
pub unsafe extern "C" fn rss_getnumbuckets(c: *const RssConfig, out: *mut u32) -> c_int {
    ffi_int(|| put(out, cfg(c)?.policy.buckets(), "output"))
}

/// The number of workers (`rss_getnumcpus`).
///
/// # Safety
/// `c` is a live configuration, `out` writable.
#[no_mangle]
pub unsafe extern "C" fn rss_getnumworkers(c: *const RssConfig, out: *mut u32) -> c_int {
    ffi_int(|| put(out, cfg(c)?.policy.workers() as u32, "output"))
}

/// The CPU of a bucket (`rss_getcpu`).
///
/// # Safety
/// `c` is a live configuration, `cpu` writable.
#[no_mangle]
pub unsafe extern "C" fn rss_getcpu(c: *const RssConfig, bucket: u32, cpu: *mut u32) -> c_int {
    ffi_int(|| {
        let p = &cfg(c)?.policy;
        if bucket >= p.buckets() {
            return Err(fail(
                RSS_E_INVAL,
                format!("bucket {bucket} does not exist ({} buckets)", p.buckets()),
            ));
        }
        put(cpu, flow_info(p, bucket).cpu, "output")
    })
}

/// The CPU worker `worker` runs on.
///
/// # Safety
/// `c` is a live configuration, `cpu` writable.
#[no_mangle]
pub unsafe extern "C" fn rss_worker_cpu(c: *const RssConfig, worker: u32, cpu: *mut u32) -> c_int {
    ffi_int(|| {
        let c = cfg(c)?;
        let w = worker_of(c, worker)?;
        put(cpu, c.policy.cpu_of(w).map_or(u32::MAX, |x| x.0), "output")
    })
}

/// The bucket -> CPU map (`rss_get_bucket_map`): `cpus[b]` for every
/// bucket. `*needed` gets the bucket count; `RSS_E_SHORT_BUFFER` when
/// `len` is smaller (nothing written to `cpus`).
///
/// # Safety
/// `c` is a live configuration, `cpus` holds `len` integers, `needed` writable.
#[no_mangle]
pub unsafe extern "C" fn rss_get_bucket_map(
    c: *const RssConfig,
    cpus: *mut u32,
    len: usize,
    needed: *mut usize,
) -> c_int {
    ffi_int(|| {
        let p = &cfg(c)?.policy;
        let n = p.buckets() as usize;
        put(needed, n, "length output")?;
        if len < n {
            return Err(fail(RSS_E_SHORT_BUFFER, format!("bucket map needs {n} entries, {len} given")));
        }
        if cpus.is_null() {
            return Err(fail(RSS_E_NULL, "null bucket map"));
        }
        for b in 0..n {
            // SAFETY: b < n <= len, the caller's buffer length.
            unsafe { cpus.add(b).write(flow_info(p, b as u32).cpu) };
        }
        Ok(())
    })
}

/// The Toeplitz key (`rss_getkey`): `*key_len` gets its length;
/// `RSS_E_SHORT_BUFFER` when `len` is smaller.
///
/// # Safety
/// `c` is a live configuration, `buf` holds `len` bytes, `key_len` writable.
#[no_mangle]
pub unsafe extern "C" fn rss_get_key(
    c: *const RssConfig,
    buf: *mut u8,
    len: usize,
    key_len: *mut usize,
) -> c_int {
    ffi_int(|| {
        let k = cfg(c)?.policy.key().as_bytes();
        put(key_len, k.len(), "length output")?;
        if len < k.len() {
            return Err(fail(RSS_E_SHORT_BUFFER, format!("the key has {} bytes, {len} given", k.len())));
        }
        if buf.is_null() {
            return Err(fail(RSS_E_NULL, "null key buffer"));
        }
        // SAFETY: the caller's buffer holds len >= k.len() bytes.
        unsafe { std::ptr::copy_nonoverlapping(k.as_ptr(), buf, k.len()) };
        Ok(())
    })
}

/// The enabled hash types as `RSS_HASHTYPE_RSS_*` bits (`rss_gethashconfig`).
///
/// # Safety
/// `c` is a live configuration, `out` writable.
#[no_mangle]
pub unsafe extern "C" fn rss_get_hash_types(c: *const RssConfig, out: *mut u32) -> c_int {
    ffi_int(|| {
        let h = cfg(c)?.policy.hash_config();
        put(out, HASH_BITS.iter().filter(|b| h.contains(b.1)).fold(0, |a, b| a | b.0), "output")
    })
}

/// Where the flow `src -> dst` (`IPPROTO_TCP` or `IPPROTO_UDP`) lands: the
/// hash a NIC with this configuration computes, its bucket, worker and CPU.
///
/// # Safety
/// `c` is a live configuration, `src`/`dst` readable for their lengths,
/// `out` writable.
#[no_mangle]
pub unsafe extern "C" fn rss_hash_tuple(
    c: *const RssConfig,
    proto: c_int,
    src: *const libc::sockaddr,
    src_len: libc::socklen_t,
    dst: *const libc::sockaddr,
    dst_len: libc::socklen_t,
    out: *mut RssFlowInfo,
) -> c_int {
    ffi_int(|| {
        let p = &cfg(c)?.policy;
        let (s, d) = (addr_in(src, src_len, "source")?, addr_in(dst, dst_len, "destination")?);
        if s.is_ipv6() != d.is_ipv6() {
            return Err(fail(RSS_E_INVAL, "source and destination are of different address families"));
        }
        let t = rsskit_app::FlowTuple::new(s.ip(), s.port(), d.ip(), d.port(), proto_of(proto)?);
        put(out, flow_info(p, p.hash_tuple(&t)), "output")
    })
}

/// Opens a steered group on `bind`: one socket per worker, `sock_type`
/// `SOCK_DGRAM` (blocking UDP sockets) or `SOCK_STREAM` (blocking
/// listeners), `steer` an `RSS_STEER_*` mode. `fds[i]` belongs to worker
/// `i`; in `RSS_STEER_CPU` UDP mode with workers on only some CPUs, extra
/// sockets follow (one per online CPU without a worker; `fds[workers + j]`
/// belongs to worker `j % workers`, which must read it too). `*nfds` gets
/// the count; `RSS_E_SHORT_BUFFER` (nothing opened) when `cap` is smaller.
/// The caller closes the descriptors.
///
/// # Safety
/// `c` is a live configuration, `bind` readable for `bind_len`, `fds`
/// holds `cap` ints, `nfds` writable.
#[no_mangle]
pub unsafe extern "C" fn rss_group_open(
    c: *const RssConfig,
    sock_type: c_int,
    steer: c_int,
    bind: *const libc::sockaddr,
    bind_len: libc::socklen_t,
    fds: *mut c_int,
    cap: usize,
    nfds: *mut usize,
) -> c_int {
    ffi_int(|| {
        let p = &cfg(c)?.policy;
        let bind = addr_in(bind, bind_len, "bind")?;
        let mode = match steer {
            RSS_STEER_CPU => Steer::Cpu,
            RSS_STEER_TOEPLITZ => Steer::Toeplitz,
            RSS_STEER_KERNEL => Steer::Kernel,
            RSS_STEER_SHARED => Steer::Shared,
            m => return Err(fail(RSS_E_INVAL, format!("steering mode {m} is not an RSS_STEER_* value"))),
        };
        if nfds.is_null() || fds.is_null() {
            return Err(fail(RSS_E_NULL, "null descriptor array or count"));
        }
        let got: Vec<std::os::fd::OwnedFd> = match sock_type {
            libc::SOCK_DGRAM => {
                let (a, b) = rsskit_app::UdpGroup::bind(p, mode, bind)?.split();
                a.into_iter().chain(b).map(|s| s.into_socket().into()).collect()
            }
            libc::SOCK_STREAM => rsskit_app::TcpGroup::bind(p, mode, bind)?
                .into_listeners()
                .into_iter()
                .map(|l| l.into_listener().into())
                .collect(),
            t => {
                return Err(fail(
                    RSS_E_INVAL,
                    format!("socket type {t} is neither SOCK_DGRAM nor SOCK_STREAM"),
                ))
            }
        };
        put(nfds, got.len(), "count")?;
        if cap < got.len() {
            return Err(fail(
                RSS_E_SHORT_BUFFER,
                format!("the group has {} sockets, room for {cap}", got.len()),
            ));
        }
        for (i, fd) in got.into_iter().enumerate() {
            // SAFETY: i < got.len() <= cap, the caller's array length.
            unsafe { fds.add(i).write(fd.into_raw_fd()) };
        }
        Ok(())
    })
}

/// Receives one datagram on `fd` (a socket of [`rss_group_open`], owned by
/// worker `worker`) into `buf` with its RSS metadata. Returns the bytes
/// stored (at most `len`) or a negative `RSS_E_*` code. `from`/`from_len`
/// (both or neither: one without the other is `RSS_E_NULL`, and nothing
/// is received) get the sender; `info` may be null.
///
/// # Safety
/// `c` is a live configuration, `buf` holds `len` bytes, `from` (if not
/// null) is a `sockaddr_storage`, `from_len` and `info` writable if not null.
#[no_mangle]
pub unsafe extern "C" fn rss_recvfrom(
    c: *const RssConfig,
    fd: c_int,
    worker: u32,
    buf: *mut u8,
    len: usize,
    from: *mut libc::sockaddr_storage,
    from_len: *mut libc::socklen_t,
    info: *mut RssRecvInfo,
) -> isize {
    ffi(|| {
        let c = cfg(c)?;
        let me = worker_of(c, worker)?;
        if buf.is_null() && len > 0 {
            return Err(fail(RSS_E_NULL, "null buffer"));
        }
        if from.is_null() != from_len.is_null() {
            return Err(fail(RSS_E_NULL, "from and from_len: give both or neither"));
        }
        if fd < 0 {
            return Err(fail(RSS_E_INVAL, format!("bad descriptor {fd}")));
        }
        // SAFETY: fd >= 0; if it is not an open socket the calls below fail with EBADF/ENOTSOCK.
        let sock = unsafe { BorrowedFd::borrow_raw(fd) };
        let local = local_addr(fd)?;
        RX.with(|rx| {
            let mut rx = rx.borrow_mut();
            rx.recv(&sock, false).map_err(|e| {
                set_errno(e.raw_os_error());
                fail(RSS_E_SYSTEM, format!("receiving on {fd}: {e}"))
            })?;
            let data = rx.data(0);
            let n = data.len().min(len);
            if n > 0 {
                // SAFETY: the caller's buffer holds len >= n bytes.
                unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), buf, n) };
            }
            let peer = rx.addr(0).ok_or_else(|| fail(RSS_E_SYSTEM, "datagram without an IP source"))?;
            let to = SocketAddr::new(rx.local_ip(0).unwrap_or(local.ip()), local.port());
            let p = &c.policy;
            let flow = flow_info(
                p,
                p.hash_tuple(&rsskit_app::FlowTuple::new(
                    peer.ip(),
                    peer.port(),
                    to.ip(),
                    to.port(),
                    L4Proto::Udp,
                )),
            );
            if !info.is_null() {
                let i = RssRecvInfo {
                    flow,
                    misdirected: c_int::from(flow.worker != me.0),
                    truncated: c_int::from(rx.truncated(0) || n < data.len()),
                };
                put(info, i, "info")?;
            }
            if !from.is_null() && !from_len.is_null() {
                let (ss, sl) = std_to_sockaddr(&peer);
                put(from, ss, "source")?;
                put(from_len, sl, "source length")?;
            }
            Ok(n as isize)
        })
    })
}

fn local_addr(fd: c_int) -> Result<SocketAddr, Fail> {
    // SAFETY: all-zero is a valid sockaddr_storage.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut sl = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    // SAFETY: `ss`/`sl` are live and `sl` is the size of `ss`.
    let rc = unsafe { libc::getsockname(fd, (&mut ss as *mut libc::sockaddr_storage).cast(), &mut sl) };
    if rc != 0 {
        let e = std::io::Error::last_os_error();
        return Err(fail(RSS_E_SYSTEM, format!("getsockname({fd}): {e}")));
    }
    sockaddr_to_std(&ss, sl).ok_or_else(|| fail(RSS_E_INVAL, format!("descriptor {fd} is not an IP socket")))
}

/// The first source port in `lo..=hi` (1 <= lo <= hi, else `RSS_E_INVAL`)
/// for which the replies of the flow
/// `local:port <-> remote` land in a bucket `worker` owns (the tuple
/// finder; the port is not checked to be free: [`rss_connect`] does that).
///
/// # Safety
/// `c` is a live configuration, the addresses readable for their lengths,
/// `port` writable.
#[no_mangle]
pub unsafe extern "C" fn rss_pick_source_port(
    c: *const RssConfig,
    worker: u32,
    proto: c_int,
    local: *const libc::sockaddr,
    local_len: libc::socklen_t,
    remote: *const libc::sockaddr,
    remote_len: libc::socklen_t,
    lo: u16,
    hi: u16,
    port: *mut u16,
) -> c_int {
    ffi_int(|| {
        let c = cfg(c)?;
        let w = worker_of(c, worker)?;
        let (l, r) = (addr_in(local, local_len, "local")?, addr_in(remote, remote_len, "remote")?);
        let range = port_range(lo, hi)?;
        let ports = rsskit_app::reply_ports(&c.policy, w, l.ip(), r, proto_of(proto)?, range, 1)?;
        put(port, ports[0], "port output")
    })
}

/// Opens a connected socket (`SOCK_STREAM`: TCP connect, `SOCK_DGRAM`:
/// connected UDP) to `remote` from a free source port in `lo..=hi` (1 <=
/// lo <= hi, else `RSS_E_INVAL`) whose
/// replies land in a bucket `worker` owns. `RSS_E_NO_PORT` when no port of
/// the range lands there, `RSS_E_NO_FREE_PORT` when all that do are in use.
///
/// # Safety
/// `c` is a live configuration, `remote` readable for `remote_len`, `fd` writable.
#[no_mangle]
pub unsafe extern "C" fn rss_connect(
    c: *const RssConfig,
    worker: u32,
    sock_type: c_int,
    remote: *const libc::sockaddr,
    remote_len: libc::socklen_t,
    lo: u16,
    hi: u16,
    fd: *mut c_int,
) -> c_int {
    ffi_int(|| {
        let c = cfg(c)?;
        let w = worker_of(c, worker)?;
        let r = addr_in(remote, remote_len, "remote")?;
        if fd.is_null() {
            return Err(fail(RSS_E_NULL, "null descriptor output"));
        }
        let opts = rsskit_app::ConnectOptions { ports: port_range(lo, hi)?, ..Default::default() };
        let raw = match sock_type {
            libc::SOCK_STREAM => rsskit_app::connect_tcp(&c.policy, w, r, &opts)?.into_raw_fd(),
            libc::SOCK_DGRAM => rsskit_app::connect_udp(&c.policy, w, r, &opts)?.into_raw_fd(),
            t => {
                return Err(fail(
                    RSS_E_INVAL,
                    format!("socket type {t} is neither SOCK_DGRAM nor SOCK_STREAM"),
                ))
            }
        };
        put(fd, raw, "descriptor output")
    })
}

/// A static description of an `RSS_E_*` code.
#[no_mangle]
pub extern "C" fn rss_strerror(code: c_int) -> *const c_char {
    let s: &'static [u8] = match code {
        RSS_OK => b"success\0",
        RSS_E_NULL => b"null pointer argument\0",
        RSS_E_INVAL => b"invalid argument\0",
        RSS_E_SHORT_BUFFER => b"buffer too short\0",
        RSS_E_NO_PORT => b"no port in the range lands in the worker's buckets\0",
        RSS_E_NO_FREE_PORT => b"every port landing in the worker's buckets is in use\0",
        RSS_E_ADDR_IN_USE => b"address already in use\0",
        RSS_E_SYSTEM => b"system call failed\0",
        RSS_E_INTERNAL => b"internal error\0",
        _ => b"unknown error code\0",
    };
    s.as_ptr().cast()
}

/// The message of the calling thread's last error (empty if none); valid
/// until the thread's next failing call.
#[no_mangle]
pub extern "C" fn rss_last_error() -> *const c_char {
    LAST.with(|l| l.borrow().as_ptr())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CStr;

    /// A panic inside a call is caught at the boundary: an error code and a
    /// message, never an unwind into C.
    #[test]
    fn panics_become_error_codes() {
        let code = ffi_int(|| panic!("boom"));
        assert_eq!(code, RSS_E_INTERNAL);
        // SAFETY: rss_last_error returns a valid C string.
        let msg = unsafe { CStr::from_ptr(rss_last_error()) }.to_string_lossy().into_owned();
        assert!(msg.contains("panic caught"), "{msg}");
        assert_eq!(ffi_int(|| Ok(())), RSS_OK);
    }
}
