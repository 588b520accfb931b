//! Dispatch configuration and its errors: [`NetisrConfig`] (workers, CPUs,
//! batch and [`Prefetch`], rings, pools, the RSS key, hash types and
//! bucket table) with its range checks and the RSS policy it implies, and
//! [`NetisrError`], why dispatch could not start or ended in error. Kept
//! apart so what the CLI builds and validates can be read without the
//! worker and controller code.

use crate::hash::PacketHasher;
use crate::output::FlushPolicy;
use crate::pool::DEFAULT_STRIDE;
use crate::reass::ReassConfig;
use crate::wire::ParseConfig;
use rsskit_core::{HashConfig, RssKey, RssPolicy};
use serde::Serialize;
// Only named in the docs' links.
#[cfg(doc)]
use super::{Handler, Netisr};

/// Why dispatch could not start or ended in error.
#[derive(Debug, thiserror::Error)]
pub enum NetisrError {
    /// [`NetisrConfig::workers`] out of range.
    #[error("workers must be 1..=64, not {0}")]
    Workers(usize),
    /// [`NetisrConfig::batch`] out of range.
    #[error("batch must be 1..=256, not {0}")]
    Batch(usize),
    /// [`NetisrConfig::cpus`] shorter than the worker count.
    #[error("{workers} workers need {workers} CPUs, the CPU list has {cpus}")]
    TooFewCpus {
        /// Workers asked for.
        workers: usize,
        /// CPUs listed.
        cpus: usize,
    },
    /// [`NetisrConfig::stride`] too small for a frame's headers.
    #[error("buffer stride must be at least 128 bytes, not {0}")]
    Stride(usize),
    /// [`NetisrConfig::ring_capacity`] below 2.
    #[error("ring capacity must be at least 2")]
    RingCapacity,
    /// [`NetisrConfig::bucket_workers`] is not a power of two up to 128 entries.
    #[error("a table of {0} entries: buckets need a power of two up to 128")]
    BucketTable(usize),
    /// [`NetisrConfig::bucket_workers`] names a worker that does not exist.
    #[error("the bucket table names worker {worker}, there are {workers}")]
    BucketWorker {
        /// The worker named.
        worker: usize,
        /// Workers configured.
        workers: usize,
    },
    /// The RSS policy refused the key, hash types or bucket count.
    #[error(transparent)]
    Policy(#[from] rsskit_core::rss::RssError),
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
    /// Workers (1..=64).
    pub workers: usize,
    /// Pin worker i to `cpus[i]` (no pinning when `None`).
    pub cpus: Option<Vec<usize>>,
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
    /// RSS key of the NIC-style hash.
    pub key: RssKey,
    /// Hash types of the NIC-style hash.
    pub hash_config: HashConfig,
    /// Bucket bits (default: FreeBSD's for the worker count).
    pub bucket_bits: Option<u32>,
    /// Bucket -> worker index, one bucket per entry (a NIC's indirection
    /// table mapped through the workers' CPUs, `--table nic:IF`): a power
    /// of two of entries, at most 128. Overrides `bucket_bits`.
    pub bucket_workers: Option<Vec<usize>>,
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
            workers: 1,
            cpus: None,
            batch: 32,
            prefetch: Prefetch::None,
            ring_capacity: 1024,
            pool_buffers: 0,
            stride: DEFAULT_STRIDE,
            key: RssKey::microsoft(),
            hash_config: HashConfig::default(),
            bucket_bits: None,
            bucket_workers: None,
            parse: ParseConfig::default(),
            reass: Some(ReassConfig::default()),
            decap: true,
            flush: FlushPolicy::default(),
            backpressure: false,
        }
    }
}

impl NetisrConfig {
    /// Checks the ranges.
    pub fn validate(&self) -> Result<()> {
        if !(1..=64).contains(&self.workers) {
            return Err(NetisrError::Workers(self.workers));
        }
        if !(1..=256).contains(&self.batch) {
            return Err(NetisrError::Batch(self.batch));
        }
        if let Some(c) = &self.cpus {
            if c.len() < self.workers {
                return Err(NetisrError::TooFewCpus { workers: self.workers, cpus: c.len() });
            }
        }
        if self.stride < 128 {
            return Err(NetisrError::Stride(self.stride));
        }
        if self.ring_capacity < 2 {
            return Err(NetisrError::RingCapacity);
        }
        Ok(())
    }

    /// The RSS policy: this key and hash types, buckets round-robin over
    /// workers `0..workers`, or `bucket_workers` (a NIC's table) one bucket
    /// per entry (each worker's CPU is not part of the policy's answer
    /// here: netisr workers are addressed by index).
    pub fn policy(&self) -> Result<RssPolicy> {
        if let Some(t) = &self.bucket_workers {
            if !t.len().is_power_of_two() || t.len() > 1 << rsskit_core::rss::MAX_BITS {
                return Err(NetisrError::BucketTable(t.len()));
            }
            if let Some(w) = t.iter().find(|&&w| w >= self.workers) {
                return Err(NetisrError::BucketWorker { worker: *w, workers: self.workers });
            }
            let bits = Some(t.len().trailing_zeros());
            let mut p = RssPolicy::with_workers(self.key.clone(), self.hash_config, self.workers, bits)?;
            for (b, &w) in t.iter().enumerate() {
                p.assign(b as u32, rsskit_core::WorkerId(w as u32))?;
            }
            return Ok(p);
        }
        Ok(RssPolicy::with_workers(self.key.clone(), self.hash_config, self.workers, self.bucket_bits)?)
    }

    /// The frame hasher of [`NetisrConfig::policy`] (owners included).
    pub fn hasher(&self) -> Result<PacketHasher> {
        Ok(PacketHasher::from_policy(self.policy()?))
    }
}
