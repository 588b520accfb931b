//! The one RSS policy: everything above the core asks this object "which
//! worker, on which CPU, owns this flow", as FreeBSD asks
//! `sys/net/rss_config.c`.
//!
//! It holds the key (and its precomputed Toeplitz tables), the enabled hash
//! types, the bucket bits, the bucket -> worker table and, separately, the
//! worker -> CPU table. Worker indices and CPU ids are different types
//! ([`WorkerId`], [`CpuId`]) so one cannot be passed for the other: a
//! worker index is a position in the worker list, a CPU id is the kernel's
//! CPU number, and the two differ as soon as workers run on a CPU subset.

use crate::cbpf::{self, BpfError, Program};
use crate::hashtype::HashInput;
use crate::rss::{default_bits, RssError, MAX_BITS};
use crate::{FlowTuple, HashConfig, HashType, InputXfrm, L4Proto, RssKey, Toeplitz};
use alloc::vec::Vec;
use core::fmt;

/// A worker's index in the worker list (socket `i` of a steered group,
/// netisr worker `i`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize), serde(transparent))]
pub struct WorkerId(pub u32);

/// A CPU number as the kernel counts it (`/sys/devices/system/cpu/cpuN`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize), serde(transparent))]
pub struct CpuId(pub u32);

impl WorkerId {
    /// As an index into per-worker vectors.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl CpuId {
    /// As the `usize` the affinity calls take.
    pub fn as_usize(self) -> usize {
        self.0 as usize
    }
}

impl fmt::Display for WorkerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "worker {}", self.0)
    }
}

impl fmt::Display for CpuId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cpu {}", self.0)
    }
}

/// Key, hash types, buckets, bucket -> worker, worker -> CPU.
#[derive(Debug, Clone)]
pub struct RssPolicy {
    /// Built once: the table backend precomputes per-byte windows (~10 µs),
    /// far more than a hash.
    toeplitz: Toeplitz,
    hash: HashConfig,
    /// What the NIC does to the fields before hashing (`input_xfrm`).
    xfrm: InputXfrm,
    bits: u32,
    bucket_worker: Vec<WorkerId>,
    worker_cpu: Vec<CpuId>,
}

/// How a policy's buckets are laid out over its workers ([`RssPolicy::build`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Buckets<'a> {
    /// `2^bits` buckets round-robin over the workers (FreeBSD's
    /// `rss_getcpu`); `None`: [`default_bits`] of the worker count.
    RoundRobin(Option<u32>),
    /// A NIC's indirection table: bucket `b` (of `len`, a power of two up to
    /// 128) is owned by the worker on CPU `table[b]`.
    Table(&'a [CpuId]),
}

impl RssPolicy {
    /// The one constructor: one worker per entry of `worker_cpus` (worker
    /// `i` runs on `worker_cpus[i]`), buckets laid out as `buckets` says.
    /// [`new`](Self::new), [`with_workers`](Self::with_workers) and
    /// [`from_table`](Self::from_table) are shorthands for it.
    pub fn build(
        key: RssKey,
        hash: HashConfig,
        worker_cpus: &[CpuId],
        buckets: Buckets<'_>,
    ) -> Result<Self, RssError> {
        let (bits, table) = match buckets {
            Buckets::RoundRobin(bits) => (bits, None),
            Buckets::Table(t) => {
                let n = t.len();
                if !n.is_power_of_two() || n > 1 << MAX_BITS {
                    return Err(RssError::BadTableLen(n));
                }
                (Some(n.trailing_zeros()), Some(t))
            }
        };
        if worker_cpus.is_empty() {
            return Err(RssError::NoCpus);
        }
        let bits = bits.unwrap_or_else(|| default_bits(worker_cpus.len()));
        if bits == 0 || bits > MAX_BITS {
            return Err(RssError::BadBits(bits));
        }
        let n = worker_cpus.len() as u32;
        let mut p = RssPolicy {
            toeplitz: Toeplitz::new(&key),
            hash,
            xfrm: InputXfrm::None,
            bits,
            bucket_worker: (0..1u32 << bits).map(|b| WorkerId(b % n)).collect(),
            worker_cpu: worker_cpus.to_vec(),
        };
        for (b, &cpu) in table.unwrap_or_default().iter().enumerate() {
            let w = p.worker_on(cpu).ok_or(RssError::NoWorkerOnCpu { entry: b as u32, cpu: cpu.0 })?;
            p.assign(b as u32, w)?;
        }
        Ok(p)
    }

    /// One worker per entry of `worker_cpus` (worker `i` runs on
    /// `worker_cpus[i]`), buckets round-robin over the workers (FreeBSD's
    /// `rss_getcpu`), `bits` bucket bits (default: [`default_bits`] of the
    /// worker count).
    pub fn new(
        key: RssKey,
        hash: HashConfig,
        worker_cpus: &[CpuId],
        bits: Option<u32>,
    ) -> Result<Self, RssError> {
        Self::build(key, hash, worker_cpus, Buckets::RoundRobin(bits))
    }

    /// `workers` workers whose CPUs are not known or do not matter (the
    /// data plane's software workers, a simulation): worker `i` is said to
    /// run on CPU `i`.
    pub fn with_workers(
        key: RssKey,
        hash: HashConfig,
        workers: usize,
        bits: Option<u32>,
    ) -> Result<Self, RssError> {
        Self::new(key, hash, &Self::numbered_cpus(workers), bits)
    }

    /// CPUs `0..workers`: where [`with_workers`](Self::with_workers) says
    /// its workers run.
    pub fn numbered_cpus(workers: usize) -> Vec<CpuId> {
        (0..workers.min(u32::MAX as usize) as u32).map(CpuId).collect()
    }

    /// A policy whose buckets follow a NIC's indirection table: bucket `b`
    /// (of `bucket_cpus.len()`, a power of two up to 128) is owned by the
    /// worker on CPU `bucket_cpus[b]`, so software steering and the NIC
    /// agree on every flow.
    pub fn from_table(
        key: RssKey,
        hash: HashConfig,
        worker_cpus: &[CpuId],
        bucket_cpus: &[CpuId],
    ) -> Result<Self, RssError> {
        Self::build(key, hash, worker_cpus, Buckets::Table(bucket_cpus))
    }

    /// Moves `bucket` to `worker` (bucket rebalancing).
    pub fn assign(&mut self, bucket: u32, worker: WorkerId) -> Result<(), RssError> {
        let buckets = self.buckets();
        if worker.index() >= self.worker_cpu.len() {
            return Err(RssError::NoSuchWorker { worker: worker.0, workers: self.worker_cpu.len() as u32 });
        }
        let slot =
            self.bucket_worker.get_mut(bucket as usize).ok_or(RssError::NoSuchBucket { bucket, buckets })?;
        *slot = worker;
        Ok(())
    }

    /// The key.
    pub fn key(&self) -> &RssKey {
        self.toeplitz.key()
    }

    /// The same policy for a NIC that transforms the fields first
    /// (`input_xfrm`: symmetric-xor, symmetric-or-xor).
    pub fn with_xfrm(mut self, xfrm: InputXfrm) -> Self {
        self.xfrm = xfrm;
        self
    }

    /// The NIC's input transform ([`InputXfrm::None`] unless [`with_xfrm`](Self::with_xfrm)).
    pub fn xfrm(&self) -> InputXfrm {
        self.xfrm
    }

    /// The hash of an input as the NIC computes it: transformed, then Toeplitz.
    pub fn hash_input(&self, input: &HashInput) -> u32 {
        self.toeplitz.hash(self.xfrm.apply(input).as_bytes())
    }

    /// The Toeplitz hasher for the key (for batch hashing; it does not
    /// apply [`xfrm`](Self::xfrm): callers that hash raw inputs check it).
    pub fn toeplitz(&self) -> &Toeplitz {
        &self.toeplitz
    }

    /// Enabled hash types.
    pub fn hash_config(&self) -> HashConfig {
        self.hash
    }

    /// Bucket bits.
    pub fn bits(&self) -> u32 {
        self.bits
    }

    /// Number of buckets (`2^bits`).
    pub fn buckets(&self) -> u32 {
        1 << self.bits
    }

    /// `buckets - 1`.
    pub fn mask(&self) -> u32 {
        self.buckets() - 1
    }

    /// Number of workers.
    pub fn workers(&self) -> usize {
        self.worker_cpu.len()
    }

    /// The hash type for a packet of this family and protocol.
    pub fn hash_type(&self, ipv6: bool, proto: L4Proto, is_fragment: bool) -> HashType {
        self.hash.pick(ipv6, proto, is_fragment)
    }

    /// The hash the NIC computes for an unfragmented packet of `t`.
    pub fn hash_tuple(&self, t: &FlowTuple) -> u32 {
        let ht = self.hash_type(t.is_ipv6(), t.proto, false);
        self.hash_tuple_as(t, ht)
    }

    /// The hash of `t` with hash type `ht` (0 if the families disagree,
    /// which [`FlowTuple::new`] callers rule out).
    pub fn hash_tuple_as(&self, t: &FlowTuple, ht: HashType) -> u32 {
        t.input(ht).map_or(0, |i| self.hash_input(&i))
    }

    /// The bucket of a hash: its low `bits` bits.
    #[inline]
    pub fn bucket(&self, hash: u32) -> u32 {
        hash & self.mask()
    }

    /// The worker owning a bucket (`bucket` is taken modulo the bucket count).
    #[inline]
    pub fn worker_of_bucket(&self, bucket: u32) -> WorkerId {
        self.bucket_worker[(bucket & self.mask()) as usize]
    }

    /// The worker owning a hash.
    #[inline]
    pub fn worker_of_hash(&self, hash: u32) -> WorkerId {
        self.worker_of_bucket(self.bucket(hash))
    }

    /// The worker owning a flow.
    pub fn worker_of(&self, t: &FlowTuple) -> WorkerId {
        self.worker_of_hash(self.hash_tuple(t))
    }

    /// The CPU a worker runs on.
    pub fn cpu_of(&self, w: WorkerId) -> Option<CpuId> {
        self.worker_cpu.get(w.index()).copied()
    }

    /// The worker running on `cpu`, if any (the first, if several).
    pub fn worker_on(&self, cpu: CpuId) -> Option<WorkerId> {
        self.worker_cpu.iter().position(|&c| c == cpu).map(|i| WorkerId(i as u32))
    }

    /// Worker -> CPU, in worker order.
    pub fn worker_cpus(&self) -> &[CpuId] {
        &self.worker_cpu
    }

    /// Bucket -> worker, in bucket order.
    pub fn bucket_workers(&self) -> &[WorkerId] {
        &self.bucket_worker
    }

    /// Buckets owned by `w`.
    pub fn buckets_of(&self, w: WorkerId) -> Vec<u32> {
        (0..self.buckets()).filter(|&b| self.bucket_worker[b as usize] == w).collect()
    }

    /// Bucket -> socket index of a steered group whose socket `i` belongs to
    /// worker `i`: the table the classic BPF program looks up.
    pub fn socket_table(&self) -> Vec<u32> {
        self.bucket_worker.iter().map(|w| w.0).collect()
    }

    /// The NIC indirection table (`len` entries, a power of two): entry `i`
    /// holds bucket `i & mask`, so the NIC's `hash & (len - 1)` lookup and
    /// `hash & mask` agree whenever `len >= buckets`.
    pub fn indirection_table(&self, len: usize) -> Vec<u32> {
        (0..len).map(|i| (i as u32) & self.mask()).collect()
    }

    /// The classic BPF program computing this policy's socket for hash type
    /// `ht` in the kernel (a reuseport group of this family).
    pub fn toeplitz_program(&self, ht: HashType) -> Result<Program, BpfError> {
        if self.xfrm != InputXfrm::None {
            return Err(BpfError::InputXfrm(self.xfrm));
        }
        cbpf::toeplitz_program(self.key(), ht, &self.socket_table())
    }

    /// The classic BPF program picking the socket of the processing CPU
    /// (socket `i` for worker `i`'s CPU).
    pub fn cpu_program(&self) -> Result<Program, BpfError> {
        let cpus: Vec<usize> = self.worker_cpu.iter().map(|c| c.as_usize()).collect();
        cbpf::cpu_program(&cpus)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cbpf::{interpret, SkbView};
    use alloc::vec;
    use alloc::vec::Vec;
    use std::net::IpAddr;

    #[test]
    fn buckets_follow_the_table() {
        let cpus = [CpuId(3), CpuId(5)];
        let table = |t: &[u32]| t.iter().map(|&c| CpuId(c)).collect::<Vec<_>>();
        let from =
            |t: &[u32]| RssPolicy::from_table(RssKey::microsoft(), HashConfig::default(), &cpus, &table(t));
        let p = from(&[5, 5, 3, 5]).unwrap();
        assert_eq!(p.buckets(), 4);
        let owners: Vec<u32> = (0..4).map(|b| p.worker_of_bucket(b).0).collect();
        assert_eq!(owners, vec![1, 1, 0, 1]);
        assert_eq!(p.worker_of_bucket(2), WorkerId(0));
        let e = from(&[3, 4]).unwrap_err();
        assert!(e.to_string().contains("entry 1 goes to CPU 4"), "{e}");
        let e = from(&[3, 3, 3]).unwrap_err();
        assert!(e.to_string().contains("power of two"), "{e}");
    }

    fn cpus(c: &[u32]) -> Vec<CpuId> {
        c.iter().map(|&c| CpuId(c)).collect()
    }

    #[test]
    fn workers_and_cpus_are_separate() {
        let p = RssPolicy::new(RssKey::microsoft(), HashConfig::default(), &cpus(&[2, 5, 7]), None).unwrap();
        assert_eq!(p.buckets(), 8);
        assert_eq!(p.worker_of_bucket(4), WorkerId(1));
        assert_eq!(p.cpu_of(WorkerId(1)), Some(CpuId(5)));
        assert_eq!(p.worker_on(CpuId(7)), Some(WorkerId(2)));
        assert_eq!(p.worker_on(CpuId(1)), None);
        assert_eq!(p.buckets_of(WorkerId(2)), vec![2, 5]);
        assert_eq!(p.socket_table(), vec![0, 1, 2, 0, 1, 2, 0, 1]);
    }

    #[test]
    fn buckets_round_robin_like_freebsd() {
        // rss_getcpu: bucket b -> CPU b % ncpus, bucket = hash & mask.
        let p = RssPolicy::with_workers(RssKey::microsoft(), HashConfig::default(), 3, None).unwrap();
        assert_eq!(p.buckets(), 8);
        for h in [0u32, 1, 7, 0xdead_beef, 0xffff_fff9] {
            assert_eq!(p.worker_of_hash(h).0, (h & 7) % 3);
        }
    }

    #[test]
    fn microsoft_vector() {
        let p = RssPolicy::with_workers(RssKey::microsoft(), HashConfig::default(), 2, None).unwrap();
        let t = FlowTuple::new(
            "66.9.149.187".parse::<IpAddr>().unwrap(),
            2794,
            "161.142.100.80".parse().unwrap(),
            1766,
            L4Proto::Tcp,
        );
        assert_eq!(p.hash_tuple(&t), 0x51cc_c178);
        assert_eq!(p.worker_of(&t), p.worker_of_hash(0x51cc_c178));
    }

    #[test]
    fn rebalance_moves_one_bucket() {
        let mut p = RssPolicy::with_workers(RssKey::microsoft(), HashConfig::default(), 2, None).unwrap();
        p.assign(3, WorkerId(0)).unwrap();
        assert_eq!(p.socket_table(), vec![0, 1, 0, 0]);
        assert!(p.assign(4, WorkerId(0)).is_err());
        assert!(p.assign(0, WorkerId(2)).is_err());
    }

    proptest::proptest! {
        /// "Kernel program == software hash" for one policy object: any
        /// key, worker count, bucket bits, moved buckets, hash type and
        /// flow (IPv4 with options too).
        #[test]
        fn kernel_program_equals_software_policy(
            key in proptest::collection::vec(proptest::num::u8::ANY, 40..=52),
            workers in 1usize..6,
            bits in 1u32..=7,
            moves in proptest::collection::vec((0u32..128, 0u32..6), 0..8),
            ht in proptest::sample::select(HashType::ALL.to_vec()),
            addrs in proptest::array::uniform32(proptest::num::u8::ANY),
            ports in (proptest::num::u16::ANY, proptest::num::u16::ANY),
            opts in 0usize..3,
        ) {
            let key = RssKey::from_bytes(&key).unwrap();
            let mut p = RssPolicy::with_workers(key, HashConfig::all(), workers, Some(bits)).unwrap();
            for (b, w) in moves {
                let _ = p.assign(b & p.mask(), WorkerId(w % workers as u32));
            }
            let prog = p.toeplitz_program(ht).unwrap();
            let (src, dst): (IpAddr, IpAddr) = if ht.is_ipv6() {
                let s: [u8; 16] = addrs[..16].try_into().unwrap();
                let d: [u8; 16] = addrs[16..].try_into().unwrap();
                (s.into(), d.into())
            } else {
                let s: [u8; 4] = addrs[..4].try_into().unwrap();
                let d: [u8; 4] = addrs[4..8].try_into().unwrap();
                (s.into(), d.into())
            };
            let l4 = if matches!(ht, HashType::TcpIpv4 | HashType::TcpIpv6) { L4Proto::Tcp } else { L4Proto::Udp };
            let t = FlowTuple::new(src, ports.0, dst, ports.1, l4);
            let opts = if ht.is_ipv6() { 0 } else { opts };
            let (pkt, off) = crate::cbpf::tests::packet(&t, opts, 8);
            let got = interpret(&prog, &SkbView { net: &pkt, data_off: off, cpu: 0 }).unwrap();
            proptest::prop_assert_eq!(got, p.worker_of_hash(p.hash_tuple_as(&t, ht)).0);
        }
    }

    #[test]
    fn errors() {
        assert!(RssPolicy::new(RssKey::microsoft(), HashConfig::default(), &[], None).is_err());
        assert!(RssPolicy::with_workers(RssKey::microsoft(), HashConfig::default(), 2, Some(8)).is_err());
    }
}
