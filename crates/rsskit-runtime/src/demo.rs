//! `rsskit demo`: the whole point on one screen, with no setup and no root.
//! An echo server on loopback with one pinned worker per CPU and `toeplitz`
//! steering, and the load generator with its streams spread over the
//! buckets; then each stream, its bucket, the worker owning it and the worker
//! that actually served it (from the echo stamps).

use crate::steer::Steer;
use crate::udp_echo::{EchoConfig, EchoError, EchoReport, EchoServer};
use crate::udp_load::{self, LoadConfig, LoadReport, ServerTable, UdpLoadError};
use rsskit_core::RssPolicy;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

/// Datagrams per second per stream by default: well within what one
/// worker serves while sharing its CPU with the load generator (~25,000
/// datagrams/s on the 2-vCPU machine where the demo is developed), so each
/// worker's rate shows its share of the streams, not its share of a CPU.
pub const DEFAULT_RATE_PER_STREAM: u64 = 5_000;

/// Why the demo did not run.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    /// No stream to send on.
    #[error("streams must be at least 1")]
    NoStreams,
    /// A datagram size the load generator cannot send.
    #[error(
        "size {0} is out of range: a probe datagram is {min}..={max} bytes",
        min = udp_load::MIN_SIZE,
        max = udp_load::MAX_SIZE
    )]
    Size(usize),
    /// The echo server did not start.
    #[error("starting the echo server")]
    Start(#[source] EchoError),
    /// The echo server failed while stopping.
    #[error(transparent)]
    Stop(EchoError),
    /// Planning or running the load.
    #[error(transparent)]
    Load(#[from] UdpLoadError),
}

/// Shorthand for this module's results.
pub type Result<T, E = DemoError> = std::result::Result<T, E>;

/// What to run.
#[derive(Debug, Clone)]
pub struct DemoConfig {
    /// Server port on 127.0.0.1 (0: ephemeral).
    pub port: u16,
    /// The one policy server and client share: its workers and their
    /// CPUs, key, hash types and buckets.
    pub policy: Arc<RssPolicy>,
    /// Streams (default: twice the workers).
    pub streams: usize,
    /// Load duration.
    pub duration: Duration,
    /// Datagram size.
    pub size: usize,
    /// Outstanding datagrams per stream (closed loop, so nothing is lost to overload).
    pub window: u32,
    /// Datagrams per second each stream sends; `None`: as fast as it can.
    /// Paced, every worker gets the same share, whichever CPU the load
    /// generator shares with a worker; unpaced, that worker gets less CPU
    /// for itself and shows fewer datagrams per second.
    pub rate_per_stream: Option<u64>,
}

impl DemoConfig {
    /// Defaults for `policy`: two streams per worker, 3 s of 510-byte
    /// datagrams, window 32, [`DEFAULT_RATE_PER_STREAM`] datagrams/s each.
    pub fn new(policy: Arc<RssPolicy>) -> Self {
        DemoConfig {
            port: 0,
            streams: 2 * policy.workers(),
            policy,
            duration: Duration::from_secs(3),
            size: 510,
            window: 32,
            rate_per_stream: Some(DEFAULT_RATE_PER_STREAM),
        }
    }
}

impl DemoConfig {
    /// Refuses what the run would refuse, before anything starts.
    pub fn validate(&self) -> Result<()> {
        if self.streams == 0 {
            return Err(DemoError::NoStreams);
        }
        if self.size < udp_load::MIN_SIZE || self.size > udp_load::MAX_SIZE {
            return Err(DemoError::Size(self.size));
        }
        Ok(())
    }
}

/// Per-second server figures: datagrams received per worker in that second.
#[derive(Debug, Clone)]
pub struct Second {
    /// Seconds since the load started.
    pub t: f64,
    /// Datagrams each worker received in that second, in worker order.
    pub per_worker: Vec<u64>,
}

/// Everything the demo saw.
pub struct DemoOutcome {
    /// The echo server's final report.
    pub server: EchoReport,
    /// The load generator's report (per stream: bucket, owner, who served it).
    pub load: LoadReport,
    /// The per-second figures, in order.
    pub seconds: Vec<Second>,
    /// The server policy the streams were planned against.
    pub table: ServerTable,
    /// Streams served by a worker other than the owner of their bucket (or never echoed).
    pub mismatched: Vec<u32>,
    /// The CPU the load generator was pinned to.
    pub load_cpu: Option<usize>,
    /// The pace each stream was held to (`None`: as fast as it could).
    pub rate_per_stream: Option<u64>,
}

/// Runs the server and the load; `on_second` sees each second's figures.
pub fn run(cfg: &DemoConfig, stop: &AtomicBool, mut on_second: impl FnMut(&Second)) -> Result<DemoOutcome> {
    cfg.validate()?;
    let mut ec =
        EchoConfig::new(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), cfg.port), cfg.policy.clone());
    ec.steer = Steer::Toeplitz;
    let server = EchoServer::start(ec).map_err(DemoError::Start)?;
    // The client assumes exactly the server's policy.
    let table = ServerTable::from_policy(server.policy().clone());
    let online = rsskit_linux::cpulist::online();
    let lc = LoadConfig {
        streams: cfg.streams,
        size: cfg.size,
        duration: Some(cfg.duration),
        window: Some(cfg.window),
        rate: cfg.rate_per_stream.map(|r| r.saturating_mul(cfg.streams as u64)),
        spread: true,
        pin: online.last().map(|&c| vec![c]).unwrap_or_default(),
        ..LoadConfig::new(server.local_addr(), table.clone())
    };
    let result = (|| {
        let streams = udp_load::plan_streams(&lc)?;
        let mut seconds = Vec::new();
        let mut last: Vec<u64> = server.snapshot().iter().map(|c| c.received).collect();
        let load = udp_load::run(&lc, streams, stop, |_, _, t| {
            let now: Vec<u64> = server.snapshot().iter().map(|c| c.received).collect();
            let s = Second {
                t: t.as_secs_f64(),
                per_worker: now.iter().zip(&last).map(|(a, b)| a - b).collect(),
            };
            last = now;
            on_second(&s);
            seconds.push(s);
        })?;
        Ok::<_, DemoError>((load, seconds))
    })();
    let report = server.stop().map_err(DemoError::Stop)?;
    let (load, seconds) = result?;
    let mismatched = load.streams.iter().filter(|s| !s.matched).map(|s| s.stream).collect();
    Ok(DemoOutcome {
        server: report,
        load,
        seconds,
        table,
        mismatched,
        load_cpu: online.last().copied(),
        rate_per_stream: cfg.rate_per_stream,
    })
}
