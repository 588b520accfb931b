//! Dispatch configuration and its errors: [`NetisrConfig`] (the RSS policy
//! the caller built: workers, their CPUs, key, hash types and bucket table;
//! whether to pin, batch and [`Prefetch`], rings, pools) with its range
//! checks, and [`NetisrError`], why dispatch could not start or ended in
//! error. Kept apart so what the CLI builds and validates can be read
//! without the worker and controller code.

use crate::hash::PacketHasher;
use crate::output::FlushPolicy;
use crate::pool::DEFAULT_STRIDE;
use crate::reass::ReassConfig;
use crate::wire::ParseConfig;
use rsskit_core::{CpuId, HashConfig, RssKey, RssPolicy, WorkerId};
use serde::Serialize;
use std::sync::Arc;
// Only named in the docs' links.
#[cfg(doc)]
use super::{Handler, Netisr};

/// Why dispatch could not start or ended in error.
#[derive(Debug, thiserror::Error)]
pub enum NetisrError {
    /// The policy's worker count ([`NetisrConfig::workers`]) out of range.
    #[error("workers must be 1..=64, not {0}")]
    Workers(usize),
    /// [`NetisrConfig::batch`] out of range.
    #[error("batch must be 1..=256, not {0}")]
    Batch(usize),
    /// [`NetisrConfig::stride`] too small for a frame's headers.
    #[error("buffer stride must be at least 128 bytes, not {0}")]
    Stride(usize),
    /// [`NetisrConfig::ring_capacity`] below 2.
    #[error("ring capacity must be at least 2")]
    RingCapacity,
    /// [`Netisr::start`] needs exactly one sink and one handler per worker.
    #[error("need one sink and one handler per worker ({workers}), got {sinks} and {handlers}")]
    PerWorker {
        /// Workers configured.
        workers: usize,
        /// Sinks given.
        sinks: usize,
        /// Handlers given.
        handlers: usize,
    },
    /// An input homed on a worker that does not exist.
    #[error("input homed on worker {worker}, but there are only {workers} workers")]
    InputHome {
        /// The home asked for.
        worker: usize,
        /// Workers configured.
        workers: usize,
    },
    /// A worker thread could not be started or pinned to its CPU.
    #[error("starting netisr worker {worker}")]
    Spawn {
        /// The worker.
        worker: usize,
        /// What the system said (names the CPU for a pinning error).
        #[source]
        source: std::io::Error,
    },
    /// A worker's sink failed when flushed at the end.
    #[error("netisr worker {worker}: finishing its output")]
    Output {
        /// The worker.
        worker: usize,
        /// What the sink said.
        #[source]
        source: std::io::Error,
    },
    /// A worker thread panicked (a bug in a handler or the data plane).
    #[error("a netisr worker panicked")]
    Panicked,
}

pub(super) type Result<T, E = NetisrError> = std::result::Result<T, E>;

/// What to prefetch in a batch (Adrian Chadd's 2015 packet-classification
/// experiment: header, then hash bucket).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Prefetch {
    #[default]
    /// No prefetch.
    None,
    /// Packet headers.
    Header,
    /// Flow-table buckets.
    Bucket,
    /// Both.
    Both,
}

impl Prefetch {
    /// All four, in table order.
    pub const ALL: [Prefetch; 4] = [Prefetch::None, Prefetch::Header, Prefetch::Bucket, Prefetch::Both];

    /// Prefetch headers?
    pub fn header(self) -> bool {
        matches!(self, Prefetch::Header | Prefetch::Both)
    }

    /// Prefetch buckets?
    pub fn bucket(self) -> bool {
        matches!(self, Prefetch::Bucket | Prefetch::Both)
    }

    /// Name as on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Prefetch::None => "none",
            Prefetch::Header => "header",
            Prefetch::Bucket => "bucket",
            Prefetch::Both => "both",
        }
    }
}

impl std::str::FromStr for Prefetch {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Prefetch::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| format!("prefetch must be none, header, bucket or both, not {s:?}"))
    }
}

/// Dispatch configuration.
#[derive(Debug, Clone)]
pub struct NetisrConfig {
    /// Who owns a frame: the key and hash types of the NIC-style hash, the
    /// bucket -> worker table (a NIC's table, `--table nic:IF`, or
    /// FreeBSD's round robin) and the workers (1..=64) with their CPUs. The
    /// caller builds it once ([`RssPolicy::with_workers`] when the CPUs do
    /// not matter); dispatch only reads it.
    pub policy: Arc<RssPolicy>,
    /// Pin worker `i` to the policy's CPU of worker `i`; unpinned, the
    /// policy's CPUs only name the workers.
    pub pin: bool,
    /// Batch size, 1..=256.
    pub batch: usize,
    /// What to prefetch in a batch.
    pub prefetch: Prefetch,
    /// Slots of each (worker, worker) ring (netisr's queue limit).
    pub ring_capacity: usize,
    /// Buffers in each worker's pool (0 = enough for every ring to fill).
    pub pool_buffers: usize,
    /// Buffer stride (default 1920).
    pub stride: usize,
    /// How frames are parsed.
    pub parse: ParseConfig,
    /// Reassembly limits; `None` turns reassembly off (fragments are handled as they are).
    pub reass: Option<ReassConfig>,
    /// Decapsulate tunnels and re-inject the inner packet.
    pub decap: bool,
    /// When output groups are sent.
    pub flush: FlushPolicy,
    /// When the ring to a packet's owner is full, the input stage holds the
    /// packet and stops reading its sources until there is room (a NIC
    /// sending pause frames) instead of dropping it (netisr's QDrops).
    /// Re-injected packets wait in the stage too. Without it, what does not
    /// fit is dropped and counted (`queue_full`).
    pub backpressure: bool,
}

impl Default for NetisrConfig {
    fn default() -> Self {
        NetisrConfig {
            policy: Arc::new(default_policy(1)),
            pin: false,
            batch: 32,
            prefetch: Prefetch::None,
            ring_capacity: 1024,
            pool_buffers: 0,
            stride: DEFAULT_STRIDE,
            parse: ParseConfig::default(),
            reass: Some(ReassConfig::default()),
            decap: true,
            flush: FlushPolicy::default(),
            backpressure: false,
        }
    }
}

/// `workers` unpinned workers with the Microsoft key and the default hash
/// types (what a [`NetisrConfig`] dispatches with unless told otherwise).
pub fn default_policy(workers: usize) -> RssPolicy {
    RssPolicy::with_workers(RssKey::microsoft(), HashConfig::default(), workers.max(1), None)
        .expect("one or more workers and the default bits make a valid policy")
}

impl NetisrConfig {
    /// Workers: the policy's.
    pub fn workers(&self) -> usize {
        self.policy.workers()
    }

    /// The CPU worker `w` is pinned to (`None` unpinned).
    pub fn pinned_cpu(&self, w: usize) -> Option<CpuId> {
        if self.pin {
            self.policy.cpu_of(WorkerId(w as u32))
        } else {
            None
        }
    }

    /// Checks the ranges.
    pub fn validate(&self) -> Result<()> {
        if !(1..=64).contains(&self.workers()) {
            return Err(NetisrError::Workers(self.workers()));
        }
        if !(1..=256).contains(&self.batch) {
            return Err(NetisrError::Batch(self.batch));
        }
        if self.stride < 128 {
            return Err(NetisrError::Stride(self.stride));
        }
        if self.ring_capacity < 2 {
            return Err(NetisrError::RingCapacity);
        }
        Ok(())
    }

    /// The frame hasher of the policy (owners included); each worker keeps
    /// its own copy of the key's tables.
    pub fn hasher(&self) -> PacketHasher {
        PacketHasher::from_policy(RssPolicy::clone(&self.policy))
    }
}
