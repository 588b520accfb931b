//! FreeBSD's RSS model (`sys/net/rss_config.c`): a power-of-two number of
//! buckets, `bucket = hash & mask`, buckets assigned to CPUs round-robin,
//! and the NIC's indirection table mapping `hash & (len - 1)` to a bucket.

use alloc::vec::Vec;
use core::fmt;

/// Most bucket bits FreeBSD allows (`RSS_MAXBITS`): 128 buckets.
pub const MAX_BITS: u32 = 7;

/// Entries in the NIC indirection table (`RSS_TABLE_MAXLEN`).
pub const INDIRECTION_LEN: usize = 128;

/// Why an RSS configuration was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RssError {
    /// No CPUs given.
    NoCpus,
    /// More than [`MAX_BITS`] bucket bits, or zero.
    BadBits(u32),
    /// A bucket index past the last bucket.
    NoSuchBucket { bucket: u32, buckets: u32 },
    /// A worker index past the last worker.
    NoSuchWorker { worker: u32, workers: u32 },
    /// A bucket table whose length is not a power of two up to 128.
    BadTableLen(usize),
    /// A table entry sends its bucket to a CPU where no worker runs.
    NoWorkerOnCpu { entry: u32, cpu: u32 },
}

impl fmt::Display for RssError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RssError::NoCpus => f.write_str("at least one CPU is needed"),
            RssError::BadBits(b) => write!(f, "bucket bits must be 1..={MAX_BITS}, not {b}"),
            RssError::NoSuchBucket { bucket, buckets } => {
                write!(f, "bucket {bucket} does not exist (there are {buckets} buckets: 0..={})", buckets - 1)
            }
            RssError::NoSuchWorker { worker, workers } => {
                write!(f, "worker {worker} does not exist (there are {workers} workers)")
            }
            RssError::BadTableLen(n) => write!(
                f,
                "a table of {n} entries: rsskit's buckets need a power of two up to {}",
                1u32 << MAX_BITS
            ),
            RssError::NoWorkerOnCpu { entry, cpu } => {
                write!(f, "table entry {entry} goes to CPU {cpu}, where no worker runs (add it to --cpus)")
            }
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for RssError {}

/// `fls`: position of the most significant set bit, 1-based; 0 for 0.
fn fls(x: u32) -> u32 {
    32 - x.leading_zeros()
}

/// FreeBSD's default bucket bits for `ncpus` CPUs: `fls(ncpus - 1) + 1`,
/// i.e. twice as many buckets as CPUs rounded up to a power of two, so
/// buckets can later be rebalanced; capped at [`MAX_BITS`].
pub fn default_bits(ncpus: usize) -> u32 {
    let n = ncpus.max(1).min(u32::MAX as usize) as u32;
    (fls(n - 1) + 1).min(MAX_BITS)
}

/// The bucket layout: bits, and which CPU owns each bucket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RssConfig {
    bits: u32,
    /// `bucket_cpu[b]`: CPU id that owns bucket `b`.
    bucket_cpu: Vec<usize>,
}

impl RssConfig {
    /// Buckets spread round-robin over `cpus` (CPU ids, in order), with
    /// `bits` bucket bits (default: [`default_bits`] of the CPU count).
    pub fn new(cpus: &[usize], bits: Option<u32>) -> Result<Self, RssError> {
        if cpus.is_empty() {
            return Err(RssError::NoCpus);
        }
        let bits = bits.unwrap_or_else(|| default_bits(cpus.len()));
        if bits == 0 || bits > MAX_BITS {
            return Err(RssError::BadBits(bits));
        }
        let bucket_cpu = (0..1usize << bits).map(|b| cpus[b % cpus.len()]).collect();
        Ok(RssConfig { bits, bucket_cpu })
    }

    /// CPUs `0..ncpus`.
    pub fn with_ncpus(ncpus: usize, bits: Option<u32>) -> Result<Self, RssError> {
        let cpus: Vec<usize> = (0..ncpus).collect();
        Self::new(&cpus, bits)
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

    /// The bucket of a hash: its low `bits` bits.
    #[inline]
    pub fn bucket(&self, hash: u32) -> u32 {
        hash & self.mask()
    }

    /// The CPU owning `bucket`.
    pub fn bucket_cpu(&self, bucket: u32) -> Result<usize, RssError> {
        self.bucket_cpu
            .get(bucket as usize)
            .copied()
            .ok_or(RssError::NoSuchBucket { bucket, buckets: self.buckets() })
    }

    /// The CPU a hash is processed on.
    #[inline]
    pub fn cpu(&self, hash: u32) -> usize {
        self.bucket_cpu[self.bucket(hash) as usize]
    }

    /// Bucket -> CPU for every bucket.
    pub fn bucket_cpus(&self) -> &[usize] {
        &self.bucket_cpu
    }

    /// Buckets owned by `cpu`.
    pub fn buckets_of_cpu(&self, cpu: usize) -> Vec<u32> {
        (0..self.buckets()).filter(|&b| self.bucket_cpu[b as usize] == cpu).collect()
    }

    /// The NIC indirection table (`len` entries, `len` a power of two):
    /// entry `i` holds bucket `i & mask`, so the NIC's `hash & (len - 1)`
    /// lookup and our `hash & mask` agree whenever `len >= buckets`.
    pub fn indirection_table(&self, len: usize) -> Vec<u32> {
        (0..len).map(|i| (i as u32) & self.mask()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_bits_like_freebsd() {
        assert_eq!(default_bits(1), 1);
        assert_eq!(default_bits(2), 2);
        assert_eq!(default_bits(3), 3);
        assert_eq!(default_bits(4), 3);
        assert_eq!(default_bits(5), 4);
        assert_eq!(default_bits(64), 7);
        assert_eq!(default_bits(1000), 7);
    }

    #[test]
    fn round_robin() {
        let c = RssConfig::new(&[2, 5, 7], None).unwrap();
        assert_eq!(c.buckets(), 8);
        assert_eq!(c.bucket_cpus(), &[2, 5, 7, 2, 5, 7, 2, 5]);
        assert_eq!(c.cpu(0xffff_fff9), 5);
        assert_eq!(c.buckets_of_cpu(7), vec![2, 5]);
        assert!(c.bucket_cpu(8).is_err());
    }

    #[test]
    fn errors() {
        assert_eq!(RssConfig::new(&[], None), Err(RssError::NoCpus));
        assert_eq!(RssConfig::with_ncpus(2, Some(8)), Err(RssError::BadBits(8)));
        assert_eq!(RssConfig::with_ncpus(2, Some(0)), Err(RssError::BadBits(0)));
    }
}
