//! The server's configuration, its limits and defaults, and its errors.

use crate::config::ConfigError;
use crate::proto::{self};
use crate::steer::{Steer, SteerError};
use crate::worker::WorkerError;
use rsskit_core::rss::RssError;
use rsskit_core::{HashType, L4Proto, RssPolicy};
pub use rsskit_linux::affinity::ThreadPolicy;
use rsskit_linux::ebpf::reuseport::ReuseportError;
use rsskit_linux::socket::{self as sock};
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// Largest [`EchoConfig::batch`] (the kernel's `UIO_MAXIOV`).
pub const MAX_BATCH: usize = 1024;
/// How long a worker blocks in a read before it looks at the stop flag (and at its other sockets).
pub const POLL_INTERVAL: Duration = Duration::from_millis(100);

/// Why the server did not start, or a worker failed.
#[derive(Debug, thiserror::Error)]
pub enum EchoError {
    /// An empty CPU list.
    #[error("no CPUs to run workers on")]
    NoCpus,
    /// A config field refused (`batch`, `flush_packets`, `flush_bytes`,
    /// `rcvbuf`, or `steer` for a live bucket move).
    #[error(transparent)]
    Config(Box<ConfigError>),
    /// A receive buffer that cannot hold a probe header, or over 1 MiB.
    #[error("datagram buffer of {0} bytes: must be {min}..=1048576", min = proto::HEADER_LEN)]
    DatagramBuffer(usize),
    /// The same CPU twice in the list.
    #[error("a CPU is listed twice")]
    DuplicateCpu,
    /// A CPU id that does not fit the probe stamp.
    #[error("CPU ids must be below 65535")]
    CpuTooLarge,
    /// Bucket bits or the bucket table refused by the policy.
    #[error(transparent)]
    Policy(#[from] RssError),
    /// Binding and steering the sockets.
    #[error(transparent)]
    Steer(#[from] SteerError),
    /// Reading back the granted `SO_RCVBUF`.
    #[error("getsockopt SO_RCVBUF")]
    RcvBuf(#[source] io::Error),
    /// `dup` of the sockets kept open for the final drop counts.
    #[error("duplicating the sockets")]
    Duplicate(#[source] io::Error),
    /// Starting, pinning or joining the workers.
    #[error(transparent)]
    Workers(#[from] WorkerError),
    /// Reading or updating the eBPF bucket map (`ebpf` steering).
    #[error("{what}")]
    Ebpf {
        /// What was being done with the map.
        what: String,
        /// What the map operation said.
        #[source]
        source: ReuseportError,
    },
    /// A worker's socket failed while it ran.
    #[error("worker {index}")]
    Worker {
        /// The worker's index.
        index: usize,
        /// The socket error that ended it.
        #[source]
        source: io::Error,
    },
}

impl From<ConfigError> for EchoError {
    fn from(e: ConfigError) -> Self {
        EchoError::Config(Box::new(e))
    }
}

/// Shorthand for this module's results.
pub type Result<T, E = EchoError> = std::result::Result<T, E>;

/// Server configuration.
#[derive(Debug, Clone)]
pub struct EchoConfig {
    /// Address and port to bind (port 0: the kernel picks one).
    pub bind: SocketAddr,
    /// The RSS policy, built once by the caller: one worker per CPU of
    /// [`RssPolicy::worker_cpus`] (worker `i` on the `i`-th), the key, the
    /// hash types (UDP 2-tuple by default, as FreeBSD) and bucket -> worker
    /// (round-robin, or a NIC's table through
    /// [`RssPolicy::from_table`]). The server keeps its own copy:
    /// live bucket moves change that one.
    pub policy: Arc<RssPolicy>,
    /// How datagrams reach workers.
    pub steer: Steer,
    /// Count only, never reply.
    pub sink: bool,
    /// Datagrams per `recvmmsg`.
    pub batch: usize,
    /// Flush queued replies at this many packets...
    pub flush_packets: usize,
    /// ...or at this many bytes, or else when the receive queue is drained
    /// (see [`DEFAULT_FLUSH_PACKETS`]).
    pub flush_bytes: usize,
    /// `SO_RCVBUF` per socket, bytes ([`DEFAULT_RCVBUF`]; `None`: the
    /// kernel's default, `net.core.rmem_default`).
    pub rcvbuf: Option<usize>,
    /// `SO_SNDBUF` per socket.
    pub sndbuf: Option<usize>,
    /// Receive buffer per datagram; longer ones are truncated and dropped.
    pub max_datagram: usize,
    /// UDP GRO on receive and GSO on reply where the kernel has both (see
    /// [`Offload`]); `false`: one datagram per system-call message.
    pub offload: bool,
    /// Scheduling policy of the workers: `Batch` (the default) lets a
    /// datagram's wake-up wait until the task running on the worker's CPU
    /// blocks or ends its slice, so one wake-up finds more queued (with GSO
    /// bursts on loopback, ~20% less server CPU per datagram,
    /// docs/BENCHMARKS.md); `Normal` wakes the worker at once.
    pub sched: ThreadPolicy,
}

/// UDP offload in force: with `gro`, the kernel hands a worker the
/// datagrams of one flow that arrive together as one coalesced buffer (one
/// `recvmmsg` message), and the worker answers it with one GSO send of the
/// same segments. Counters, stamps and misdirection checks stay per
/// datagram: a buffer of N segments is N datagrams received and N sent.
/// The flush thresholds count reply messages: a coalesced reply is one.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Offload {
    /// `UDP_GRO` on the workers' sockets.
    pub gro: bool,
    /// Coalesced buffers answered with one `UDP_SEGMENT` send.
    pub gso: bool,
    /// Why offload is off, when it is.
    pub off_because: Option<String>,
}

impl Offload {
    /// `gro+gso`, or `off (why)`.
    pub fn describe(&self) -> String {
        match (&self.off_because, self.gro) {
            (_, true) => "gro+gso".into(),
            (Some(why), false) => format!("off ({why})"),
            (None, false) => "off".into(),
        }
    }

    /// What `want` gives on this kernel with receive buffers of
    /// `max_datagram` bytes (a coalesced buffer is up to 64 KiB).
    pub fn resolve(want: bool, max_datagram: usize) -> Offload {
        let k = sock::udp_offload();
        let off = |why: String| Offload { gro: false, gso: false, off_because: Some(why) };
        if !want {
            off("--no-offload".into())
        } else if !(k.gro && k.gso) {
            off(format!("kernel: {}", k.why_not.as_deref().unwrap_or("no UDP_GRO/UDP_SEGMENT")))
        } else if max_datagram < GRO_BUFFER {
            off(format!("datagram buffer {max_datagram} < {GRO_BUFFER} bytes"))
        } else {
            Offload { gro: true, gso: true, off_because: None }
        }
    }
}

/// Smallest receive buffer with GRO: a coalesced buffer holds up to a
/// whole UDP payload (65535 bytes), so none is ever truncated.
pub const GRO_BUFFER: usize = 65536;

/// Default `--flush-packets`: one `sendmmsg` per full `recvmmsg` batch.
///
/// DragonFly flushes replies at 16 packets or ~1500 bytes: a NIC doorbell
/// rule, where a flush is a register write. In user space a flush is a
/// system call: 1500 bytes meant one `sendmmsg` per three 510-byte
/// datagrams, ~5x the calls of the plain C loop and most of the cost above
/// it (bench/LOG.md, "Issue 15 analysis"). Replies are flushed when
/// the receive queue is drained (a `recvmmsg` returns less than a batch),
/// so a reply waits at most for the rest of its own batch, as in the C
/// loop; the thresholds only bound a queue that never drains.
pub const DEFAULT_FLUSH_PACKETS: usize = 32;
/// Default `--flush-bytes`: 64 KiB, a bound for large datagrams (one
/// `sendmmsg` stays well inside the default send buffer), not reached by
/// 32 datagrams of up to 2 KiB.
pub const DEFAULT_FLUSH_BYTES: usize = 64 << 10;

/// Default `SO_RCVBUF` request: 4 MiB. The kernel default (208 KiB) lets
/// a worker that is briefly descheduled on a shared machine overflow
/// (0.1-0.7% `RcvbufErrors` under load); the C floor of the benchmark asks
/// for 4 MiB too. The kernel caps the request at `net.core.rmem_max`.
pub const DEFAULT_RCVBUF: usize = 4 << 20;
/// Largest `SO_RCVBUF` request (the option is a C `int`, which the kernel
/// doubles).
pub const MAX_RCVBUF: usize = i32::MAX as usize / 2;

impl EchoConfig {
    /// Defaults for everything but the address and the policy: `toeplitz`,
    /// batch 32, flush when the queue drains or at [`DEFAULT_FLUSH_PACKETS`]
    /// packets or [`DEFAULT_FLUSH_BYTES`] bytes, `SO_RCVBUF` of
    /// [`DEFAULT_RCVBUF`].
    pub fn new(bind: SocketAddr, policy: Arc<RssPolicy>) -> Self {
        EchoConfig {
            bind,
            policy,
            steer: Steer::Toeplitz,
            sink: false,
            batch: 32,
            flush_packets: DEFAULT_FLUSH_PACKETS,
            flush_bytes: DEFAULT_FLUSH_BYTES,
            rcvbuf: Some(DEFAULT_RCVBUF),
            sndbuf: None,
            max_datagram: 65536,
            offload: true,
            sched: ThreadPolicy::Batch,
        }
    }

    /// The hash type of this server's datagrams.
    pub fn hash_type(&self) -> HashType {
        self.policy.hash_type(self.bind.is_ipv6(), L4Proto::Udp, false)
    }

    pub(super) fn validate(&self) -> Result<()> {
        let cpus = self.policy.worker_cpus();
        if cpus.is_empty() {
            return Err(EchoError::NoCpus);
        }
        if self.batch == 0 || self.batch > MAX_BATCH {
            return Err(ConfigError::range("batch", self.batch as u64, 1, MAX_BATCH as u64).into());
        }
        if self.flush_packets == 0 || self.flush_packets > MAX_BATCH {
            return Err(
                ConfigError::range("flush_packets", self.flush_packets as u64, 1, MAX_BATCH as u64).into()
            );
        }
        if self.flush_bytes == 0 {
            return Err(ConfigError::at_least_one("flush_bytes", self.flush_bytes).into());
        }
        if let Some(n) = self.rcvbuf.filter(|&n| n > MAX_RCVBUF) {
            return Err(ConfigError::value(
                "rcvbuf",
                n,
                format!(" is above the largest SO_RCVBUF request ({MAX_RCVBUF} bytes)"),
            )
            .into());
        }
        if self.max_datagram < proto::HEADER_LEN || self.max_datagram > 1 << 20 {
            return Err(EchoError::DatagramBuffer(self.max_datagram));
        }
        let mut seen = cpus.to_vec();
        seen.sort_unstable();
        seen.dedup();
        if seen.len() != cpus.len() {
            return Err(EchoError::DuplicateCpu);
        }
        if cpus.iter().any(|c| c.0 >= u16::MAX as u32) {
            return Err(EchoError::CpuTooLarge);
        }
        Ok(())
    }
}
