//! The UDP echo / sink server: one pinned worker per CPU, each with its own
//! socket of a steered reuseport group ([`crate::steer`]), batched
//! `recvmmsg`/`sendmmsg`, DragonFly-style reply aggregation, and per
//! datagram the software RSS bucket, so misdirected datagrams are counted.
//!
//! Every probe ([`crate::proto`]) is stamped before it is echoed: worker,
//! worker CPU, bucket, kernel CPU, hash, flags.

use crate::config::ConfigError;
use crate::proto::CPU_UNKNOWN;
use crate::rebalance::{LiveBuckets, Round};
use crate::stats::Counters;
use crate::steer::{self, Steer, SteerSpec, Transport};
use crate::worker::Workers;
use rsskit_core::{CpuId, HashType, RssPolicy, WorkerId};
use rsskit_linux::ebpf::reuseport::Counters as EbpfCounters;
use rsskit_linux::snmp::{self, UdpCounters};
use rsskit_linux::socket::{self as sock, UdpOptions};
use socket2::Socket;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::AtomicU32;
use std::sync::Arc;
use std::time::{Duration, Instant};

mod config;
mod report;
mod worker;

pub use config::*;
pub use report::EchoReport;
use worker::run_worker;

/// A worker as reported: index, CPU, owned buckets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerInfo {
    /// The worker's index (also its socket's index in the group).
    pub worker: usize,
    /// The CPU it is pinned to.
    pub cpu: CpuId,
    /// The buckets it owns.
    pub buckets: Vec<u32>,
    /// CPUs (without a worker of their own) whose datagrams this worker also reads (`cpu` mode).
    pub extra_cpus: Vec<CpuId>,
}

/// Everything a worker needs, cloned into it.
#[derive(Clone)]
struct Plan {
    local: SocketAddr,
    hash_type: HashType,
    /// Key, buckets and their owners; each worker clones it after pinning.
    policy: RssPolicy,
    mode: Steer,
    sink: bool,
    batch: usize,
    flush_packets: usize,
    flush_bytes: usize,
    max_datagram: usize,
    pktinfo: bool,
    /// `UDP_GRO` on the sockets: messages may be coalesced.
    gro: bool,
    /// Set by each worker on itself, after pinning.
    sched: ThreadPolicy,
    /// `ebpf` steering: bucket -> worker as it is now (buckets move live).
    owners: Option<Arc<[AtomicU32]>>,
}

/// One socket a worker reads, and what the kernel CPU of its datagrams is
/// known to be (`cpu` mode: the CPU the BPF program mapped to it).
struct RxSocket {
    sock: Socket,
    kernel_cpu: u16,
}

/// A running server.
pub struct EchoServer {
    workers: Workers<io::Result<Counters>>,
    info: Vec<WorkerInfo>,
    policy: RssPolicy,
    local: SocketAddr,
    steer: Steer,
    hash_type: HashType,
    program_len: Option<usize>,
    started: Instant,
    kernel_before: Option<UdpCounters>,
    rcvbuf: RcvBuf,
    /// A duplicate of every socket: a worker that stops (the stop flag is
    /// often set by a signal well before [`EchoServer::stop`]) closes its
    /// own descriptors, and a closed socket's drop count leaves
    /// `/proc/net/udp` with it. These keep them all listed until the final
    /// counts are read.
    held: Vec<Socket>,
    /// `ebpf` steering: the program's live maps.
    live: Option<LiveBuckets>,
    /// `ebpf` asked for, classic `toeplitz` in force: why.
    fallback: Option<String>,
    /// Rebalancing rounds that moved something.
    rounds: Vec<Round>,
    /// GRO/GSO in force.
    offload: Offload,
    sched: ThreadPolicy,
}

/// `SO_RCVBUF`: what was asked and what the kernel granted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct RcvBuf {
    /// Bytes asked for (`None`: the kernel default was kept).
    pub requested: Option<usize>,
    /// What `getsockopt(SO_RCVBUF)` reports on the workers' sockets: the
    /// kernel doubles a request (for its bookkeeping overhead) after
    /// capping it at `net.core.rmem_max`.
    pub granted: usize,
}

impl RcvBuf {
    /// Whether the kernel granted less than asked (`rmem_max` capped it).
    pub fn capped(&self) -> bool {
        self.requested.is_some_and(|r| self.granted < r.saturating_mul(2))
    }
}

impl EchoServer {
    /// Binds, steers, and starts the workers. Returns once every worker is
    /// pinned and its socket is in place (datagrams sent from then on are
    /// received).
    pub fn start(cfg: EchoConfig) -> Result<EchoServer> {
        Self::start_with_stop(cfg, Arc::new(AtomicBool::new(false)))
    }

    /// As [`EchoServer::start`], with a caller's stop flag (e.g. set by a
    /// signal handler).
    pub fn start_with_stop(cfg: EchoConfig, stop: Arc<AtomicBool>) -> Result<EchoServer> {
        cfg.validate()?;
        // The server's own copy: live bucket moves are recorded in it.
        let policy = RssPolicy::clone(&cfg.policy);
        let cpus: Vec<CpuId> = policy.worker_cpus().to_vec();
        let n = cpus.len();
        let hash_type = cfg.hash_type();
        let ipv6 = cfg.bind.is_ipv6();
        let pktinfo = cfg.bind.ip().is_unspecified();
        // Probes the kernel's offload (a loopback round trip of its own)
        // before the UDP counters are taken: they cover only our traffic.
        let mut offload = Offload::resolve(cfg.offload, cfg.max_datagram);
        let kernel_before = snmp::udp(ipv6).ok();
        // Blocking sockets with timeouts: workers sleep in recvmmsg and
        // still see the stop flag every POLL_INTERVAL; a full send buffer
        // applies back-pressure instead of dropping replies.
        let opts = UdpOptions {
            nonblocking: false,
            read_timeout: Some(POLL_INTERVAL),
            write_timeout: Some(POLL_INTERVAL),
            rcvbuf: cfg.rcvbuf,
            sndbuf: cfg.sndbuf,
            pktinfo,
            ..Default::default()
        };
        let st = steer::build(&SteerSpec {
            mode: cfg.steer,
            bind: cfg.bind,
            policy: &policy,
            transport: Transport::Udp(opts),
        })?;
        let live = st
            .ebpf
            .map(LiveBuckets::new)
            .transpose()
            .map_err(|source| EchoError::Ebpf { what: "reading the eBPF bucket counters".into(), source })?;
        let rcvbuf = RcvBuf {
            requested: cfg.rcvbuf,
            granted: st.sockets[0].recv_buffer_size().map_err(EchoError::RcvBuf)?,
        };
        let mut info: Vec<WorkerInfo> = (0..n)
            .map(|w| WorkerInfo {
                worker: w,
                cpu: cpus[w],
                buckets: policy.buckets_of(WorkerId(w as u32)),
                extra_cpus: Vec::new(),
            })
            .collect();
        if offload.gro {
            if let Err(e) = st
                .sockets
                .iter()
                .chain(st.extra.iter().map(|(_, s)| s))
                .try_for_each(|s| sock::set_gro(s, true))
            {
                offload = Offload { gro: false, gso: false, off_because: Some(e.to_string()) };
                for s in st.sockets.iter().chain(st.extra.iter().map(|(_, s)| s)) {
                    let _ = sock::set_gro(s, false);
                }
            }
        }
        let held = st
            .sockets
            .iter()
            .chain(st.extra.iter().map(|(_, s)| s))
            .map(|s| s.try_clone())
            .collect::<io::Result<Vec<Socket>>>()
            .map_err(EchoError::Duplicate)?;
        let mut per_worker: Vec<Vec<RxSocket>> = Vec::with_capacity(n);
        for (w, sock) in st.sockets.into_iter().enumerate() {
            // validate() keeps every worker CPU below u16::MAX.
            let kernel_cpu = if cfg.steer == Steer::Cpu { cpus[w].0 as u16 } else { CPU_UNKNOWN };
            per_worker.push(vec![RxSocket { sock, kernel_cpu }]);
        }
        for (j, (cpu, sock)) in st.extra.into_iter().enumerate() {
            let kernel_cpu = u16::try_from(cpu).unwrap_or(CPU_UNKNOWN);
            per_worker[j % n].push(RxSocket { sock, kernel_cpu });
            info[j % n].extra_cpus.push(CpuId(cpu as u32));
        }
        let plan = Plan {
            local: st.local,
            hash_type,
            policy: policy.clone(),
            mode: st.mode,
            sink: cfg.sink,
            batch: cfg.batch,
            flush_packets: cfg.flush_packets,
            flush_bytes: cfg.flush_bytes,
            max_datagram: cfg.max_datagram,
            pktinfo,
            gro: offload.gro,
            sched: cfg.sched,
            owners: live.as_ref().map(|l| l.owners()),
        };
        let workers =
            Workers::spawn(&cpus, per_worker, stop, move |ctx, socks| run_worker(&ctx, plan.clone(), socks))?;
        Ok(EchoServer {
            workers,
            info,
            policy,
            local: st.local,
            steer: st.mode,
            hash_type,
            program_len: st.program_len,
            started: Instant::now(),
            kernel_before,
            rcvbuf,
            held,
            live,
            fallback: st.fallback,
            rounds: Vec::new(),
            offload,
            sched: cfg.sched,
        })
    }

    /// The bound address (with the real port).
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Workers, their CPUs and buckets.
    pub fn workers(&self) -> &[WorkerInfo] {
        &self.info
    }

    /// The RSS policy: key, hash types, bucket -> worker -> CPU.
    pub fn policy(&self) -> &RssPolicy {
        &self.policy
    }

    /// Steering mode.
    pub fn steer(&self) -> Steer {
        self.steer
    }

    /// GRO/GSO in force.
    pub fn offload(&self) -> &Offload {
        &self.offload
    }

    /// The workers' scheduling policy.
    pub fn sched(&self) -> ThreadPolicy {
        self.sched
    }

    /// `ebpf` steering asked for but classic `toeplitz` in force: why.
    pub fn fallback(&self) -> Option<&str> {
        self.fallback.as_deref()
    }

    /// `ebpf` steering: the program's counters.
    pub fn ebpf_counters(&self) -> Option<EbpfCounters> {
        self.live.as_ref().and_then(|l| l.counters().ok())
    }

    /// Whether buckets can move live (`ebpf` steering in force).
    pub fn can_rebalance(&self) -> bool {
        self.live.is_some()
    }

    /// One rebalancing round ([`crate::rebalance`]): measures each
    /// bucket's datagrams since the last round and moves buckets from the
    /// busiest worker to the least busy one. `None` without `ebpf` steering.
    pub fn rebalance(&mut self, target: f64, min_sample: u64) -> Result<Option<Round>> {
        let Some(live) = self.live.as_mut() else { return Ok(None) };
        let r = live
            .rebalance(target, min_sample)
            .map_err(|source| EchoError::Ebpf { what: "rebalancing the eBPF bucket map".into(), source })?;
        self.apply_moves(&r);
        Ok(Some(r))
    }

    /// Moves `bucket` to `worker` live (`ebpf` steering only).
    pub fn move_bucket(&mut self, bucket: u32, worker: u32) -> Result<()> {
        let Some(live) = self.live.as_mut() else {
            return Err(ConfigError::Said {
                before: "moving a bucket live needs ".into(),
                field: "steer",
                join: " ",
                value: "ebpf".into(),
                after: String::new(),
            }
            .into());
        };
        let from = self.policy.worker_of_bucket(bucket).0;
        live.move_bucket(bucket, worker).map_err(|source| EchoError::Ebpf {
            what: format!("moving bucket {bucket} to worker {worker}"),
            source,
        })?;
        let m = crate::rebalance::BucketMove { bucket, from, to: worker, load: 0 };
        let r = Round {
            t_s: self.started.elapsed().as_secs_f64(),
            interval_s: 0.0,
            loads: Vec::new(),
            imbalance_before: 0.0,
            imbalance_after: 0.0,
            moves: vec![m],
            no_move: None,
        };
        self.apply_moves(&r);
        Ok(())
    }

    /// Records `r`'s moves in the policy and the worker table.
    fn apply_moves(&mut self, r: &Round) {
        if r.moves.is_empty() {
            return;
        }
        for m in &r.moves {
            let _ = self.policy.assign(m.bucket, WorkerId(m.to));
        }
        for w in &mut self.info {
            w.buckets = self.policy.buckets_of(WorkerId(w.worker as u32));
        }
        self.rounds.push(r.clone());
    }

    /// Hash type in force.
    pub fn hash_type(&self) -> HashType {
        self.hash_type
    }

    /// Instructions of the steering BPF program, if any.
    pub fn program_len(&self) -> Option<usize> {
        self.program_len
    }

    /// `SO_RCVBUF` asked for and granted.
    pub fn rcvbuf(&self) -> RcvBuf {
        self.rcvbuf
    }

    /// Seconds since start.
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// The stop flag: setting it makes every worker return within ~100 ms.
    pub fn stop_flag(&self) -> Arc<AtomicBool> {
        self.workers.stop_flag().clone()
    }

    /// Current counters, in worker order.
    pub fn snapshot(&self) -> Vec<Counters> {
        self.workers.stats().iter().map(|s| s.snapshot()).collect()
    }

    /// Stops every worker, joins them, and reports.
    pub fn stop(self) -> Result<EchoReport> {
        let duration = self.started.elapsed();
        let results = self.workers.join()?;
        // Per-socket drops: read once no worker reads any more (final
        // counts) and before the sockets close (`held` keeps them open).
        let socket_drops = snmp::socket_drops(self.local.port(), self.local.is_ipv6()).ok();
        let ebpf = self.live.as_ref().and_then(|l| l.counters().ok());
        drop(self.held);
        let mut counters = Vec::with_capacity(results.len());
        for (i, r) in results.into_iter().enumerate() {
            counters.push(r.map_err(|source| EchoError::Worker { index: i, source })?);
        }
        let kernel = match (self.kernel_before, snmp::udp(self.local.is_ipv6()).ok()) {
            (Some(a), Some(b)) => Some(b.delta(&a)),
            _ => None,
        };
        Ok(EchoReport {
            steer: self.steer,
            hash_type: self.hash_type,
            local: self.local,
            duration,
            workers: self.info.into_iter().zip(counters).collect(),
            kernel,
            socket_drops,
            rcvbuf: self.rcvbuf,
            fallback: self.fallback,
            ebpf,
            rebalance: self.rounds,
            offload: self.offload,
            sched: self.sched,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto;
    use rsskit_core::rss::RssError;
    use rsskit_core::{FlowTuple, L4Proto};
    use rsskit_core::{HashConfig, RssKey};
    use std::net::UdpSocket;

    fn probe(stream: u32, seq: u64, len: usize) -> Vec<u8> {
        let mut b = vec![0x5au8; len];
        proto::encode_probe(&mut b, &proto::Probe { stream, seq, sent_ns: 1 });
        b
    }

    /// Microsoft key, one worker per CPU of `cpus`, buckets round-robin.
    fn policy(cpus: &[usize], hash: HashConfig, bits: Option<u32>) -> Result<Arc<RssPolicy>, RssError> {
        let cpus: Vec<CpuId> = cpus.iter().map(|&c| CpuId(c as u32)).collect();
        RssPolicy::new(RssKey::microsoft(), hash, &cpus, bits).map(Arc::new)
    }

    /// The defaults on `cpus`, UDP hashed on addresses.
    fn config_on(bind: &str, cpus: &[usize]) -> EchoConfig {
        EchoConfig::new(bind.parse().unwrap(), policy(cpus, HashConfig::default(), None).unwrap())
    }

    /// The defaults on every online CPU.
    fn config(bind: &str) -> EchoConfig {
        config_on(bind, &rsskit_linux::cpulist::online())
    }

    fn sysctl(name: &str) -> usize {
        std::fs::read_to_string(format!("/proc/sys/net/core/{name}")).unwrap().trim().parse().unwrap()
    }

    #[test]
    fn rcvbuf_default_is_4_mib_and_the_grant_is_reported() {
        let cfg = config("127.0.0.1:0");
        assert_eq!(cfg.rcvbuf, Some(4 << 20));
        let srv = EchoServer::start(cfg).unwrap();
        let r = srv.rcvbuf();
        assert_eq!(r.requested, Some(DEFAULT_RCVBUF));
        // The kernel caps at rmem_max, then doubles.
        assert_eq!(r.granted, 2 * DEFAULT_RCVBUF.min(sysctl("rmem_max")));
        assert_eq!(r.capped(), sysctl("rmem_max") < DEFAULT_RCVBUF);
        let j = srv.stop().unwrap().to_json();
        assert_eq!(j["rcvbuf"]["requested"], DEFAULT_RCVBUF);
        assert_eq!(j["rcvbuf"]["granted"], r.granted);
        // None: the kernel default, reported as is.
        let mut cfg = config("127.0.0.1:0");
        cfg.rcvbuf = None;
        let srv = EchoServer::start(cfg).unwrap();
        assert_eq!(srv.rcvbuf(), RcvBuf { requested: None, granted: sysctl("rmem_default") });
        assert!(!srv.rcvbuf().capped());
        assert!(srv.stop().unwrap().to_json()["rcvbuf"]["requested"].is_null());
    }

    fn echo_round(steer: Steer, bind: &str, hash: HashConfig, sources: &[&str]) -> EchoReport {
        let mut cfg = config(bind);
        cfg.steer = steer;
        cfg.policy = policy(&rsskit_linux::cpulist::online(), hash, None).unwrap();
        let srv = EchoServer::start(cfg).unwrap();
        let mut at = srv.local_addr();
        if at.ip().is_unspecified() {
            at.set_ip(if at.is_ipv4() { "127.0.0.1".parse().unwrap() } else { "::1".parse().unwrap() });
        }
        let key = RssKey::microsoft();
        let t = rsskit_core::Toeplitz::new(&key);
        let mut expected = 0;
        for (si, src) in sources.iter().enumerate() {
            let s = UdpSocket::bind(src).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
            for seq in 0..20u64 {
                s.send_to(&probe(si as u32, seq, 100), at).unwrap();
            }
            s.send_to(b"hello", at).unwrap();
            let mut buf = [0u8; 2048];
            let mut probes = 0;
            for _ in 0..21 {
                let (n, from) = s.recv_from(&mut buf).unwrap();
                assert_eq!(from, at);
                if n == 5 {
                    assert_eq!(&buf[..5], b"hello", "foreign datagram echoed unchanged");
                    continue;
                }
                assert_eq!(n, 100);
                let (p, st) = proto::decode(&buf[..n]).unwrap();
                assert_eq!(p.stream, si as u32);
                assert!(buf[40..100].iter().all(|&b| b == 0x5a), "padding echoed as is");
                let me = s.local_addr().unwrap();
                let ft = FlowTuple::new(me.ip(), me.port(), at.ip(), at.port(), L4Proto::Udp);
                let h = t.hash(ft.input(srv.hash_type()).unwrap().as_bytes());
                assert_eq!(st.hash, h);
                assert_eq!(st.bucket as u32, srv.policy().bucket(h));
                let owner = srv.workers().iter().find(|w| w.buckets.contains(&(st.bucket as u32))).unwrap();
                assert_eq!(u32::from(st.cpu), srv.workers()[st.worker as usize].cpu.0);
                if steer == Steer::Toeplitz {
                    assert_eq!(st.worker as usize, owner.worker, "served by the bucket's owner");
                    assert!(!st.misdirected());
                } else {
                    assert_eq!(st.misdirected(), st.worker as usize != owner.worker);
                }
                if steer == Steer::Cpu {
                    assert_eq!(st.kernel_cpu, st.cpu, "loopback: processed on the worker's CPU");
                } else {
                    assert_eq!(st.kernel_cpu, CPU_UNKNOWN);
                }
                probes += 1;
            }
            assert_eq!(probes, 20);
            expected += 21;
        }
        let r = srv.stop().unwrap();
        let tot = r.totals();
        assert_eq!(tot.received, expected);
        assert_eq!(tot.sent, expected);
        assert_eq!(tot.foreign, sources.len() as u64);
        assert_eq!(tot.dropped, 0);
        assert!(tot.flushes.total() > 0);
        r
    }

    /// Each source sends `bursts` GSO bursts of 16 probes of 510 bytes (the
    /// last burst's last one 200 bytes) with one `UDP_SEGMENT` send each;
    /// every echo is checked against the policy. Returns the server's totals.
    fn gso_round(offload: bool, sources: &[&str], bursts: u64) -> (Counters, Offload) {
        let mut cfg = config("127.0.0.1:0");
        cfg.offload = offload;
        let srv = EchoServer::start(cfg).unwrap();
        let at = srv.local_addr();
        let t = rsskit_core::Toeplitz::new(&RssKey::microsoft());
        let mut expected = 0u64;
        for (si, src) in sources.iter().enumerate() {
            let s = UdpSocket::bind(src).unwrap();
            s.connect(at).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
            let me = s.local_addr().unwrap();
            let ft = FlowTuple::new(me.ip(), me.port(), at.ip(), at.port(), L4Proto::Udp);
            let h = t.hash(ft.input(srv.hash_type()).unwrap().as_bytes());
            let bucket = srv.policy().bucket(h);
            let owner = srv.workers().iter().find(|w| w.buckets.contains(&bucket)).unwrap().worker;
            let mut seen = std::collections::BTreeSet::new();
            for b in 0..bursts {
                let last_short = b == bursts - 1;
                let mut burst = Vec::new();
                for k in 0..16u64 {
                    let len = if last_short && k == 15 { 200 } else { 510 };
                    burst.extend(probe(si as u32, b * 16 + k, len));
                }
                assert_eq!(sock::send_segments(&s, &burst, 510).unwrap(), 16);
                for _ in 0..16 {
                    let mut buf = [0u8; 2048];
                    let n = s.recv(&mut buf).unwrap();
                    let (p, st) = proto::decode(&buf[..n]).unwrap();
                    assert_eq!(p.stream, si as u32);
                    assert_eq!(n, if last_short && p.seq % 16 == 15 { 200 } else { 510 }, "seq {}", p.seq);
                    assert!(buf[40..n].iter().all(|&x| x == 0x5a), "padding echoed as is");
                    assert_eq!((st.hash, st.bucket as u32), (h, bucket));
                    assert_eq!(st.worker as usize, owner, "served by the bucket's owner");
                    assert_eq!(u32::from(st.cpu), srv.workers()[owner].cpu.0);
                    assert!(!st.misdirected());
                    assert!(seen.insert(p.seq), "seq {} echoed twice", p.seq);
                }
            }
            assert_eq!(seen.len() as u64, 16 * bursts, "every datagram echoed once");
            expected += 16 * bursts;
        }
        let offload = srv.offload().clone();
        let r = srv.stop().unwrap();
        let tot = r.totals();
        assert_eq!(r.to_json()["offload"]["gro"], offload.gro);
        assert_eq!(tot.received, expected);
        assert_eq!(tot.sent, expected);
        assert_eq!(tot.received, tot.sent + tot.dropped, "in == out + dropped (nothing held)");
        assert_eq!((tot.dropped, tot.misdirected, tot.foreign), (0, 0, 0));
        (tot, offload)
    }

    #[test]
    fn gso_bursts_echo_per_datagram_with_gro_and_without() {
        let sources = ["127.0.0.2:0", "127.0.0.3:0", "127.0.0.4:0"];
        let (on, mode) = gso_round(true, &sources, 4);
        assert!(mode.gro && mode.gso, "this kernel has UDP GRO/GSO: {mode:?}");
        assert_eq!(mode.describe(), "gro+gso");
        // On loopback a GSO send reaches a GRO socket whole.
        assert!(on.coalesced >= 16, "{on:?}");
        assert!(on.batches < on.received, "fewer messages than datagrams: {on:?}");
        let (off, mode) = gso_round(false, &sources, 4);
        assert_eq!(mode.describe(), "off (--no-offload)");
        assert_eq!(off.coalesced, 0, "the kernel splits GSO sends for a socket without GRO");
        let per_datagram =
            |c: &Counters| (c.received, c.sent, c.bytes, c.dropped, c.misdirected, c.unowned, c.foreign);
        assert_eq!(per_datagram(&on), per_datagram(&off), "GRO on and off count the same datagrams");
    }

    #[test]
    fn small_buffers_turn_offload_off_with_the_reason() {
        let o = Offload::resolve(true, 2048);
        assert!(!o.gro && !o.gso);
        assert!(o.describe().contains("2048"), "{}", o.describe());
    }

    #[test]
    fn toeplitz_echo_v4_addresses() {
        let r = echo_round(
            Steer::Toeplitz,
            "127.0.0.1:0",
            HashConfig::default(),
            &["127.0.0.2:0", "127.0.0.3:0", "127.0.0.4:0", "127.0.0.5:0", "127.1.2.3:0"],
        );
        assert_eq!(r.totals().misdirected, 0);
        assert_eq!(r.hash_type, HashType::Ipv4);
        let j = r.to_json();
        assert_eq!(j["steer"], "toeplitz");
        assert!(j["workers"][0]["buckets"].is_array());
        assert!(j["kernel"]["in_datagrams"].as_u64().unwrap() >= 105);
    }

    #[test]
    fn toeplitz_echo_v6_four_tuple() {
        let r = echo_round(
            Steer::Toeplitz,
            "[::1]:0",
            HashConfig::default().with_udp_4tuple(true),
            &["[::1]:0", "[::1]:0", "[::1]:0", "[::1]:0"],
        );
        assert_eq!(r.totals().misdirected, 0);
        assert_eq!(r.hash_type, HashType::UdpIpv6);
    }

    #[test]
    fn other_modes_echo() {
        for m in [Steer::Cpu, Steer::Kernel, Steer::Shared] {
            let r = echo_round(m, "127.0.0.1:0", HashConfig::default(), &["127.0.0.9:0", "127.0.0.10:0"]);
            if m == Steer::Cpu {
                assert_eq!(r.totals().misdirected, 0);
            }
        }
    }

    #[test]
    fn wildcard_bind_uses_packet_info() {
        let r =
            echo_round(Steer::Toeplitz, "0.0.0.0:0", HashConfig::default(), &["127.0.0.7:0", "127.0.0.8:0"]);
        assert_eq!(r.totals().misdirected, 0);
        let r = echo_round(Steer::Toeplitz, "[::]:0", HashConfig::all(), &["[::1]:0", "[::1]:0"]);
        assert_eq!(r.totals().misdirected, 0);
    }

    #[test]
    #[cfg_attr(rsskit_one_cpu, ignore = "needs 2 CPUs")]
    fn cpu_mode_with_a_cpu_subset_knows_the_kernel_cpu() {
        let online = rsskit_linux::cpulist::online();
        assert!(online.len() >= 2, "needs 2 online CPUs, have {online:?}");
        let mut cfg = config_on("127.0.0.1:0", &online[..1]);
        cfg.steer = Steer::Cpu;
        let srv = EchoServer::start(cfg).unwrap();
        assert_eq!(
            srv.workers()[0].extra_cpus,
            online[1..].iter().map(|&c| CpuId(c as u32)).collect::<Vec<_>>()
        );
        let at = srv.local_addr();
        let mut seen = Vec::new();
        for &cpu in &online[..2] {
            let (kcpu, flags) = std::thread::spawn(move || {
                rsskit_linux::affinity::pin_current_thread(cpu).unwrap();
                let s = UdpSocket::bind("127.0.0.1:0").unwrap();
                s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
                s.send_to(&probe(0, 0, 64), at).unwrap();
                let mut b = [0u8; 128];
                let n = s.recv(&mut b).unwrap();
                let st = proto::read_stamp(&b[..n]).unwrap();
                (st.kernel_cpu, st.worker)
            })
            .join()
            .unwrap();
            seen.push((cpu, kcpu, flags));
        }
        assert_eq!(seen[0].1 as usize, online[0], "own CPU");
        assert_eq!(seen[1].1 as usize, online[1], "the kernel CPU of a CPU without a worker is known");
        assert!(seen.iter().all(|s| s.2 == 0), "both served by worker 0");
        // The worker blocks on its own socket; the other CPU's socket wakes
        // it with a signal. Were it found only when the blocking read times
        // out (POLL_INTERVAL, 100 ms), 20 round trips would take 2 s.
        let other = online[1];
        let (elapsed, kcpus) = std::thread::spawn(move || {
            rsskit_linux::affinity::pin_current_thread(other).unwrap();
            let s = UdpSocket::bind("127.0.0.1:0").unwrap();
            s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
            let t = std::time::Instant::now();
            let mut kcpus = Vec::new();
            for i in 0..20 {
                s.send_to(&probe(0, i, 64), at).unwrap();
                let mut b = [0u8; 128];
                let n = s.recv(&mut b).unwrap();
                kcpus.push(proto::read_stamp(&b[..n]).unwrap().kernel_cpu);
            }
            (t.elapsed(), kcpus)
        })
        .join()
        .unwrap();
        assert!(kcpus.iter().all(|&k| k as usize == other), "{kcpus:?}");
        assert!(
            elapsed < Duration::from_secs(1),
            "20 round trips via the other CPU's socket took {elapsed:?}"
        );
        let r = srv.stop().unwrap();
        assert_eq!(r.totals().received, 22);
        assert_eq!(r.totals().misdirected, 21, "the ones processed on the other CPU");
    }

    #[test]
    fn sink_counts_without_replying() {
        let mut cfg = config("127.0.0.1:0");
        cfg.sink = true;
        let srv = EchoServer::start(cfg).unwrap();
        let s = UdpSocket::bind("127.0.0.1:0").unwrap();
        for i in 0..50 {
            s.send_to(&probe(0, i, 64), srv.local_addr()).unwrap();
        }
        let deadline = Instant::now() + Duration::from_secs(3);
        while srv.snapshot().iter().map(|c| c.received).sum::<u64>() < 50 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        let r = srv.stop().unwrap();
        assert_eq!(r.totals().received, 50);
        assert_eq!(r.totals().sent, 0);
        s.set_nonblocking(true).unwrap();
        assert!(s.recv(&mut [0u8; 64]).is_err(), "no reply in sink mode");
    }

    #[test]
    fn flush_reasons() {
        let online = rsskit_linux::cpulist::online();
        let mut cfg = config_on("127.0.0.1:0", &online[..1]);
        cfg.flush_packets = 4;
        cfg.flush_bytes = 1_000_000;
        let srv = EchoServer::start(cfg).unwrap();
        let s = UdpSocket::bind("127.0.0.1:0").unwrap();
        s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
        // Queue 64 datagrams before the worker wakes up is not guaranteed,
        // but every reply must come back and every flush has a reason.
        for i in 0..64 {
            s.send_to(&probe(0, i, 64), srv.local_addr()).unwrap();
        }
        for _ in 0..64 {
            s.recv(&mut [0u8; 128]).unwrap();
        }
        let r = srv.stop().unwrap();
        let t = r.totals();
        assert_eq!(t.sent, 64);
        assert_eq!(t.flushes.bytes, 0, "byte threshold never reached");
        assert!(t.flushes.count * 4 + t.flushes.idle * 4 >= 64);
        assert!(t.flushes.count <= 16);
    }

    /// The default policy: at most one flush (`sendmmsg`) per `recvmmsg`
    /// that returned data, for 510-byte datagrams too (the old 1500-byte
    /// rule flushed every third one), on one socket (toeplitz) and on
    /// several (cpu steering with a worker on one CPU of two).
    #[test]
    fn default_flush_at_most_once_per_batch() {
        let online = rsskit_linux::cpulist::online();
        for steer in [Steer::Toeplitz, Steer::Cpu] {
            let mut cfg = config_on("127.0.0.1:0", &online[..1]);
            cfg.steer = steer;
            let srv = EchoServer::start(cfg).unwrap();
            let at = srv.local_addr();
            let senders: Vec<_> = online
                .iter()
                .take(2)
                .map(|&cpu| {
                    std::thread::spawn(move || {
                        rsskit_linux::affinity::pin_current_thread(cpu).unwrap();
                        let s = UdpSocket::bind("127.0.0.1:0").unwrap();
                        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                        let mut got = 0;
                        for burst in 0..8u64 {
                            for i in 0..20 {
                                s.send_to(&probe(0, burst * 20 + i, 510), at).unwrap();
                            }
                            for _ in 0..20 {
                                s.recv(&mut [0u8; 1024]).unwrap();
                                got += 1;
                            }
                        }
                        got
                    })
                })
                .collect();
            let got: u64 = senders.into_iter().map(|t| t.join().unwrap()).sum();
            let t = srv.stop().unwrap().totals();
            assert_eq!(got, t.received, "{steer:?}: every datagram echoed");
            assert_eq!(t.sent, t.received, "{steer:?}");
            assert_eq!(t.flushes.bytes, 0, "{steer:?}: 64 KiB never pending");
            let flushes = t.flushes.count + t.flushes.idle + t.flushes.bytes;
            assert!(
                flushes <= t.batches,
                "{steer:?}: {flushes} flushes for {} recvmmsg batches with data",
                t.batches
            );
        }
    }

    #[test]
    fn bad_configs() {
        let base = config("127.0.0.1:0");
        let mut c = base.clone();
        c.batch = 0;
        assert!(EchoServer::start(c).err().unwrap().to_string().contains("batch must be"));
        // No CPUs and too many bucket bits: no policy to start with.
        assert!(matches!(policy(&[], HashConfig::default(), None), Err(RssError::NoCpus)));
        assert!(policy(&[0], HashConfig::default(), Some(9)).is_err());
        let mut c = base.clone();
        c.policy = policy(&[0, 0], HashConfig::default(), None).unwrap();
        assert!(matches!(EchoServer::start(c), Err(EchoError::DuplicateCpu)));
        // No such CPU to pin to.
        let mut c = base.clone();
        c.policy = policy(&[4000], HashConfig::default(), None).unwrap();
        assert!(EchoServer::start(c).is_err());
        let mut c = base;
        c.policy = policy(&[70_000], HashConfig::default(), None).unwrap();
        assert!(matches!(EchoServer::start(c), Err(EchoError::CpuTooLarge)));
    }

    #[test]
    fn socket_drops_are_read_while_the_sockets_are_open() {
        // The stop flag is set (as a signal does) and the workers have
        // closed their descriptors before stop() reads /proc/net/udp.
        let mut c = config_on("127.0.0.1:0", &[0]);
        c.steer = Steer::Kernel;
        c.rcvbuf = Some(4096);
        let stop = Arc::new(AtomicBool::new(false));
        let srv = EchoServer::start_with_stop(c, stop.clone()).unwrap();
        let sockets = srv.held.len();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        std::thread::sleep(POLL_INTERVAL * 5);
        // Nobody reads now: a burst overflows the small receive buffer.
        let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let sent = 500u64;
        for i in 0..sent {
            tx.send_to(&probe(0, i, 1000), srv.local_addr()).unwrap();
        }
        let r = srv.stop().unwrap();
        let received = r.totals().received;
        let d = r.socket_drops.expect("per-socket drops read");
        assert_eq!(d.sockets, sockets, "every socket still listed");
        assert!(d.drops > 0, "{d:?}");
        assert!(d.drops + received <= sent, "{d:?} received {received}");
    }

    #[test]
    fn stop_is_prompt() {
        let srv = EchoServer::start(config("127.0.0.1:0")).unwrap();
        std::thread::sleep(Duration::from_millis(50));
        let t = Instant::now();
        srv.stop().unwrap();
        assert!(t.elapsed() < Duration::from_millis(1000), "{:?}", t.elapsed());
    }
}
