//! # rsskit for applications
//!
//! The one entry point an application embeds to do receive-side scaling
//! the FreeBSD way on Linux: every flow has a Toeplitz hash, the hash a
//! bucket, the bucket a worker, the worker a CPU, and the application keeps
//! each flow on the worker (and CPU) that owns it.
//!
//! - the RSS policy: [`RssPolicy`] (key, hash types, buckets,
//!   bucket -> [`WorkerId`] -> [`CpuId`]); [`per_cpu_policy`] builds the
//!   usual one;
//! - steered socket groups: [`UdpGroup`] and [`TcpGroup`] bind one socket
//!   per worker in one `SO_REUSEPORT` group and attach the [`Steer`] mode's
//!   classic BPF program;
//! - per-datagram RSS metadata ([`RecvMeta`]: flow hash, bucket, owner, the
//!   CPU the kernel processed it on, misdirected or not), as FreeBSD's
//!   `IP_RECVFLOWID` / `IP_RECVRSSBUCKETID`; per-connection metadata
//!   ([`ConnMeta`]) for TCP; UDP GRO receive ([`RssUdpSocket::set_gro`],
//!   still one datagram and its [`Segment`] per `recv_meta`) and GSO send
//!   ([`RssUdpSocket::send_segments`]);
//! - pinned workers: [`run_pinned`];
//! - outgoing flows whose replies land on the calling worker:
//!   [`connect_tcp`], [`connect_udp`], [`reply_ports`] (the tuple finder,
//!   [`finder`]).
//!
//! Every fallible call returns [`Error`], an enum to match on.
//!
//! ```no_run
//! use rsskit_app::{per_cpu_policy, run_pinned, Steer, UdpGroup};
//!
//! # fn main() -> Result<(), rsskit_app::Error> {
//! let policy = per_cpu_policy(&rsskit_app::online_cpus())?;
//! let group = UdpGroup::bind(&policy, Steer::Cpu, "0.0.0.0:9000".parse().unwrap())?;
//! run_pinned(&policy, group.into_sockets(), |_worker, _cpu, mut sock| {
//!     let mut buf = [0u8; 2048];
//!     while let Ok((n, meta)) = sock.recv_meta(&mut buf) {
//!         let _ = sock.send_to(&buf[..n], meta.from);
//!     }
//! })?;
//! # Ok(()) }
//! ```
//!
//! ## Transmit side
//!
//! Linux picks a TX queue per CPU with XPS (`xps_cpus`): with `rsskit apply`
//! giving CPU `c` its own TX queue, a worker pinned to `c` sends on it. FreeBSD
//! can also stamp an outgoing packet with a pre-computed flow id
//! (`m_pkthdr.flowid`, `inp_flowid`) so the driver picks the matching ring;
//! Linux has no counterpart an application can set: the kernel's own
//! `sk_txhash` is random and only XPS (or `SO_INCOMING_CPU`-driven RFS on
//! the receive side) keeps locality.
#![warn(unreachable_pub)]
#![warn(missing_docs)]

mod connect;
mod error;
mod policy;
mod sockets;
mod workers;

pub use connect::{connect_tcp, connect_udp, reply_ports, ConnectOptions};
pub use error::Error;
pub use policy::{online_cpus, per_cpu_policy};
pub use sockets::{ConnMeta, RecvMeta, RssTcpListener, RssUdpSocket, Segment, TcpGroup, UdpGroup};
pub use workers::run_pinned;

pub use rsskit_core::finder;
pub use rsskit_core::finder::FindError;
pub use rsskit_core::key::KeyError;
pub use rsskit_core::rss::RssError;
pub use rsskit_core::{CpuId, FlowTuple, HashConfig, HashType, L4Proto, RssKey, RssPolicy, WorkerId};
pub use rsskit_runtime::steer::Steer;
