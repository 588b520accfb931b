//! FreeBSD's RSS arithmetic (`sys/net/rss_config.c`): a power-of-two number
//! of buckets (`bucket = hash & mask`), the default bucket bits, the limits,
//! and the errors of a bucket layout. The layout itself, buckets assigned to
//! workers round-robin and workers to CPUs, is [`crate::RssPolicy`].

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
    NoSuchBucket {
        /// The bucket index asked for.
        bucket: u32,
        /// How many buckets there are.
        buckets: u32,
    },
    /// A worker index past the last worker.
    NoSuchWorker {
        /// The worker index asked for.
        worker: u32,
        /// How many workers there are.
        workers: u32,
    },
    /// A bucket table whose length is not a power of two up to 128.
    BadTableLen(usize),
    /// A table entry sends its bucket to a CPU where no worker runs.
    NoWorkerOnCpu {
        /// Index of the table entry (its bucket).
        entry: u32,
        /// The CPU that entry sends to.
        cpu: u32,
    },
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
                write!(
                    f,
                    "table entry {entry} goes to CPU {cpu}, where no worker runs (add it to the worker CPUs)"
                )
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
}
