//! The facade's one error type.

use rsskit_core::finder::FindError;
use rsskit_core::hashtype::TupleError;
use rsskit_core::key::KeyError;
use rsskit_core::rss::RssError;
use rsskit_runtime::steer::Steer;
use std::io;
use std::net::SocketAddr;

/// Everything that can go wrong, as a caller can match it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The policy refused its parameters (no CPUs, bad bucket bits, ...).
    #[error("RSS policy: {0}")]
    Policy(#[from] RssError),
    /// A key of the wrong length or bad hex.
    #[error("RSS key: {0}")]
    Key(#[from] KeyError),
    /// Addresses of mixed families.
    #[error("flow tuple: {0}")]
    Tuple(#[from] TupleError),
    /// The port of a new socket group is already used by another socket.
    #[error("{bind}: the port is already in use")]
    PortInUse {
        /// The address asked for.
        bind: SocketAddr,
    },
    /// Building the steered group failed otherwise.
    #[error("building the {mode} socket group on {bind}: {message}")]
    Group {
        /// The steering mode.
        mode: Steer,
        /// The address asked for.
        bind: SocketAddr,
        /// What failed.
        message: String,
    },
    /// A worker index the policy does not have.
    #[error("worker {worker} does not exist (the policy has {workers} workers)")]
    NoSuchWorker {
        /// The worker asked for.
        worker: u32,
        /// How many the policy has.
        workers: usize,
    },
    /// No port in the range makes the replies land in the worker's buckets.
    #[error("no source port in {lo}-{hi} makes the replies from {remote} land in a bucket of worker {worker}: {reason}")]
    NoPortInBucket {
        /// The calling worker.
        worker: u32,
        /// The peer.
        remote: SocketAddr,
        /// The port range searched.
        lo: u16,
        /// The port range searched.
        hi: u16,
        /// The finder's answer.
        reason: FindError,
    },
    /// Ports land in the worker's buckets, but every one was in use.
    #[error("no free source port in {lo}-{hi} whose replies from {remote} land in a bucket of worker {worker}: all {candidates} candidate ports are in use")]
    NoFreePort {
        /// The calling worker.
        worker: u32,
        /// The peer.
        remote: SocketAddr,
        /// The port range searched.
        lo: u16,
        /// The port range searched.
        hi: u16,
        /// How many ports land there.
        candidates: usize,
    },
    /// A system call failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// A worker thread could not be pinned to its CPU.
    #[error("pinning worker {worker} to CPU {cpu}: {source}")]
    Pin {
        /// The worker.
        worker: u32,
        /// Its CPU.
        cpu: u32,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// A worker's closure panicked.
    #[error("worker {0} panicked")]
    WorkerPanicked(u32),
    /// A per-worker vector of the wrong length.
    #[error("{what}: {got} given for {workers} workers")]
    WrongCount {
        /// What was counted.
        what: &'static str,
        /// How many were given.
        got: usize,
        /// How many workers the policy has.
        workers: usize,
    },
}

impl Error {
    pub(crate) fn io(what: impl Into<String>, source: io::Error) -> Error {
        Error::Io { what: what.into(), source }
    }
}
