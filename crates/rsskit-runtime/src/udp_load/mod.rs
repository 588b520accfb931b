//! The UDP load generator (`rsskit udp-load`, FreeBSD's `udp-clt` done right):
//! N streams, each its own connected socket and source, spread over the
//! server's RSS buckets with the tuple finder; pinned sender threads; sent,
//! echoed, lost, out of order; RTT histogram; per-stream check, from the
//! server's echo stamps, that each stream was served by the worker owning its
//! bucket.
//!
//! The protocol parts do no I/O and take the time passed in: [`sources`] (which
//! source lands in which bucket), [`stream`] (sequence, echo, loss, reorder,
//! duplicate, RTT, refusal state of one stream), [`pacing`] (rate schedule
//! and run phases) and [`report`]. This file is the socket loop around them.

pub mod pacing;
pub mod report;
pub mod sources;
pub mod stream;

pub use report::{LoadReport, RttSummary, StreamReport};
/// CLOCK_MONOTONIC in nanoseconds (the probe's timestamp clock).
pub use rsskit_linux::clock::monotonic_ns;
pub use sources::{plan_streams, IpNet, ServerTable, Stream};

use crate::config::{ConfigError, Namer};
use crate::proto;
use hdrhistogram::Histogram;
use pacing::{Pacer, Phase, Schedule};
use report::StreamInfo;
use rsskit_linux::poll::PollSet;
use rsskit_linux::socket::{self as sock, segments, Batch};
use socket2::Socket;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use stream::{classify, Echo, IoClass, SendLimits, StreamTracker};

/// Largest UDP payload over IPv4.
pub const MAX_SIZE: usize = 65507;
/// Smallest datagram: the probe header.
pub const MIN_SIZE: usize = proto::HEADER_LEN;

/// What can go wrong planning or running the load. Variants with a
/// `source` say it through [`std::error::Error::source`] (shown after the
/// message as `: cause` by the CLI), not in their own message.
#[derive(Debug, thiserror::Error)]
pub enum UdpLoadError {
    /// A setting out of range (the message names the config field).
    #[error(transparent)]
    Config(Box<ConfigError>),
    /// The server table could not be built (the message says why).
    #[error("server table: {0}")]
    Table(String),
    /// A socket call failed (`what` names it).
    #[error("{what}")]
    Io {
        /// The call and its object.
        what: String,
        /// Its error.
        source: std::io::Error,
    },
    /// No route to the target.
    #[error("target {target} is unreachable: no route to it")]
    Unreachable {
        /// The target.
        target: SocketAddr,
        /// The routing error.
        source: std::io::Error,
    },
    /// `connect` of a stream's socket failed.
    #[error("cannot connect a UDP socket to {target}")]
    Connect {
        /// The target.
        target: SocketAddr,
        /// The error.
        source: std::io::Error,
    },
    /// A source address could not be bound.
    #[error("binding a UDP socket to {src}")]
    Bind {
        /// The source address.
        src: SocketAddr,
        /// The error.
        source: std::io::Error,
    },
    /// A bound socket reported a non-IP address.
    #[error("socket has no IP address")]
    NoIpAddress,
    /// Every port was in use.
    #[error("no free UDP port to bind")]
    NoFreePort,
    /// The tuple finder could not search a bucket.
    #[error("finding a source for bucket {bucket}: {msg}")]
    Finder {
        /// The bucket.
        bucket: u32,
        /// The finder's reason.
        msg: String,
    },
    /// No source lands in a bucket (the message says what to do).
    #[error("{0}")]
    NoSource(String),
    /// No source address (of `net`, else of this host) lands in a bucket:
    /// UDP is hashed on addresses only (the message says what to do).
    #[error("{}", no_source_address(*bucket, net.as_ref(), *ipv6, &|f| f))]
    NoSourceAddress {
        /// The bucket.
        bucket: u32,
        /// The addresses tried: [`LoadConfig::src_net`], else this host's.
        net: Option<IpNet>,
        /// Of the IPv6 family.
        ipv6: bool,
    },
    /// A send failed for a reason other than back-pressure.
    #[error("sending to {target}")]
    Send {
        /// The target.
        target: SocketAddr,
        /// The error.
        source: std::io::Error,
    },
    /// `poll` for echoes failed.
    #[error("waiting for echoes: {0}")]
    Poll(std::io::Error),
    /// A bucket of the table has no worker.
    #[error("bucket {0} has no owner")]
    NoOwner(u32),
    /// `--pin-owner` needs the server's CPUs online here.
    #[error("cannot pin a sender to server CPU {0}: not online here")]
    CpuOffline(usize),
    /// A sender thread could not be pinned.
    #[error("pinning a sender thread: {0}")]
    Pin(String),
    /// A sender thread panicked.
    #[error("a sender thread panicked")]
    SenderPanicked,
}

type Result<T, E = UdpLoadError> = std::result::Result<T, E>;

fn no_source_address(bucket: u32, net: Option<&IpNet>, ipv6: bool, name: Namer) -> String {
    let (src_net, udp_4tuple) = (name("src_net"), name("udp_4tuple"));
    match net {
        Some(net) => format!(
            "no local address in {net} lands in bucket {bucket} (UDP is hashed on addresses only: \
             add addresses of {net} to an interface, or for IPv4 make the whole network local \
             with `ip route add local {net} dev lo`, or use {udp_4tuple})"
        ),
        None => format!(
            "none of this host's {} addresses lands in bucket {bucket} (UDP is hashed on addresses \
             only: give {src_net} with addresses assigned here, or use {udp_4tuple})",
            if ipv6 { "IPv6" } else { "IPv4" }
        ),
    }
}

impl UdpLoadError {
    /// The message with each config field called `name(field)`, for the
    /// errors that name one.
    pub fn message_with(&self, name: Namer) -> Option<String> {
        match self {
            UdpLoadError::Config(c) => Some(c.render(name)),
            UdpLoadError::NoSourceAddress { bucket, net, ipv6 } => {
                Some(no_source_address(*bucket, net.as_ref(), *ipv6, name))
            }
            _ => None,
        }
    }
}

/// What to run.
#[derive(Debug, Clone)]
pub struct LoadConfig {
    /// The echo server's address.
    pub target: SocketAddr,
    /// Streams (distinct source tuples) to send on.
    pub streams: usize,
    /// Datagram size (payload bytes), `MIN_SIZE..=MAX_SIZE`.
    pub size: usize,
    /// Total datagrams per second over all streams; `None`: as fast as possible.
    pub rate: Option<u64>,
    /// Stop sending after this long (default 5 s when `count` is unset too).
    pub duration: Option<Duration>,
    /// Datagrams per stream.
    pub count: Option<u64>,
    /// Most datagrams outstanding per stream (closed loop).
    pub window: Option<u32>,
    /// With `rate`: send in bursts of this many datagrams (round-robin over
    /// the thread's streams), like a NIC coalescing interrupts; 1: evenly paced.
    pub burst: u32,
    /// Pick sources so the streams land in distinct buckets.
    pub spread: bool,
    /// Source network to pick addresses from (address-only hashing).
    pub src_net: Option<IpNet>,
    /// Sender threads.
    pub threads: usize,
    /// CPUs the sender threads are pinned to (round-robin); empty: unpinned.
    pub pin: Vec<usize>,
    /// One sender thread per server CPU owning some stream's bucket, pinned
    /// to that CPU (overrides `threads` and `pin`): on loopback the kernel
    /// then processes each datagram on the CPU of the worker owning it, as a
    /// NIC with RSS would deliver it.
    pub pin_owner: bool,
    /// How long to wait for the last echoes after sending stops.
    pub drain: Duration,
    /// The server's policy, as the client assumes it: which bucket each stream lands in and who owns it.
    pub table: ServerTable,
    /// Datagrams of one stream per send: above 1, one `UDP_SEGMENT` (GSO)
    /// send of up to this many consecutive probes (1..=[`MAX_GSO`]).
    pub gso: u32,
    /// `UDP_GRO` on the streams' sockets where the kernel has it: coalesced
    /// echoes are split into their datagrams here (else the kernel splits them).
    pub gro: bool,
}

/// Most datagrams per GSO send (the kernel's UDP GRO limit, 64 segments).
pub const MAX_GSO: u32 = 64;

impl LoadConfig {
    /// One stream of 64-byte datagrams to `target`, as fast as possible,
    /// from one unpinned thread, one datagram per send, `UDP_GRO` on, 500 ms
    /// of drain; bounded by the 5 s default unless `duration` or `count` is
    /// set. Callers set what they need on top (`..LoadConfig::new(..)`).
    pub fn new(target: SocketAddr, table: ServerTable) -> LoadConfig {
        LoadConfig {
            target,
            streams: 1,
            size: 64,
            rate: None,
            duration: None,
            count: None,
            window: None,
            burst: 1,
            spread: false,
            src_net: None,
            threads: 1,
            pin: Vec::new(),
            pin_owner: false,
            drain: Duration::from_millis(500),
            table,
            gso: 1,
            gro: true,
        }
    }

    /// Checks the numbers that need no socket.
    pub fn validate(&self) -> Result<()> {
        self.check().map_err(|e| UdpLoadError::Config(Box::new(e)))
    }

    fn check(&self) -> Result<(), ConfigError> {
        let zero = |field, v: u64| if v == 0 { Err(ConfigError::at_least_one(field, 0)) } else { Ok(()) };
        zero("streams", self.streams as u64)?;
        if self.size < MIN_SIZE || self.size > MAX_SIZE {
            return Err(ConfigError::value(
                "size",
                self.size,
                format!(" is out of range: a probe datagram is {MIN_SIZE}..={MAX_SIZE} bytes"),
            ));
        }
        if self.target.port() == 0 {
            return Err(ConfigError::value("target", self.target, ": port 0 cannot be a destination"));
        }
        if self.target.ip().is_unspecified() {
            return Err(ConfigError::value(
                "target",
                self.target,
                ": the unspecified address cannot be a destination",
            ));
        }
        zero("threads", self.threads as u64)?;
        if self.rate == Some(0) {
            return Err(ConfigError::Must {
                field: "rate",
                value: "0".into(),
                need: "at least 1 datagram per second",
            });
        }
        zero("count", self.count.unwrap_or(1))?;
        if self.burst == 0 || self.burst > 4096 {
            return Err(ConfigError::range("burst", self.burst.into(), 1, 4096));
        }
        if self.gso == 0 || self.gso > MAX_GSO {
            return Err(ConfigError::range("gso", self.gso.into(), 1, MAX_GSO.into()));
        }
        if self.gso > 1 && self.size * self.gso as usize > MAX_SIZE {
            return Err(ConfigError::Pair {
                field: "gso",
                value: self.gso.to_string(),
                join: " with ",
                other: "size",
                other_value: self.size.to_string(),
                why: format!(
                    ": a GSO send of {} bytes is above the largest UDP payload ({MAX_SIZE})",
                    self.size * self.gso as usize
                ),
            });
        }
        if self.gso > 1 && !rsskit_linux::socket::udp_offload().gso {
            return Err(ConfigError::value(
                "gso",
                self.gso,
                format!(
                    ": this kernel refuses UDP_SEGMENT ({})",
                    rsskit_linux::socket::udp_offload().why_not.as_deref().unwrap_or("unknown")
                ),
            ));
        }
        zero("window", self.window.unwrap_or(1).into())?;
        if let Some(net) = self.src_net {
            if net.addr.is_ipv4() != self.target.is_ipv4() {
                return Err(ConfigError::Pair {
                    field: "src_net",
                    value: net.to_string(),
                    join: " and ",
                    other: "target",
                    other_value: self.target.to_string(),
                    why: " are of different address families".into(),
                });
            }
        }
        Ok(())
    }

    /// How long to send: `duration`, else until `count`, else 5 s.
    fn send_for(&self) -> Option<Duration> {
        match (self.duration, self.count) {
            (Some(d), _) => Some(d),
            (None, Some(_)) => None,
            (None, None) => Some(Duration::from_secs(5)),
        }
    }
}

/// Progress totals, updated by the sender threads.
#[derive(Debug, Default)]
pub struct Progress {
    /// Datagrams sent so far, over every thread.
    pub sent: AtomicU64,
    /// Echoes received so far.
    pub echoed: AtomicU64,
}

/// Splits the streams over sender threads: (streams, CPU to pin to) each.
fn group_streams(cfg: &LoadConfig, streams: Vec<Stream>) -> Result<Vec<(Vec<Stream>, Option<usize>)>> {
    if cfg.pin_owner {
        let mut by_cpu: BTreeMap<usize, Vec<Stream>> = BTreeMap::new();
        for s in streams {
            let cpu = cfg.table.owner_cpu(s.bucket).ok_or(UdpLoadError::NoOwner(s.bucket))?.as_usize();
            by_cpu.entry(cpu).or_default().push(s);
        }
        let online = rsskit_linux::cpulist::online();
        return by_cpu
            .into_iter()
            .map(
                |(cpu, g)| {
                    if online.contains(&cpu) {
                        Ok((g, Some(cpu)))
                    } else {
                        Err(UdpLoadError::CpuOffline(cpu))
                    }
                },
            )
            .collect();
    }
    let nthreads = cfg.threads.min(streams.len()).max(1);
    let mut groups: Vec<(Vec<Stream>, Option<usize>)> = (0..nthreads)
        .map(|t| (Vec::new(), (!cfg.pin.is_empty()).then(|| cfg.pin[t % cfg.pin.len()])))
        .collect();
    for (i, s) in streams.into_iter().enumerate() {
        groups[i % nthreads].0.push(s);
    }
    Ok(groups)
}

/// Runs the load: sends until `duration`/`count` (or `stop`), drains the
/// echoes, and reports. `on_second` is called about once a second with the
/// running totals and the elapsed time.
pub fn run(
    cfg: &LoadConfig,
    streams: Vec<Stream>,
    stop: &AtomicBool,
    mut on_second: impl FnMut(u64, u64, Duration),
) -> Result<LoadReport> {
    cfg.validate()?;
    let infos: Vec<StreamInfo> = streams
        .iter()
        .map(|s| StreamInfo { id: s.id, src: s.src, hash: s.hash, bucket: s.bucket, owner: s.owner })
        .collect();
    let groups = group_streams(cfg, streams)?;
    let progress = Arc::new(Progress::default());
    let start = Instant::now();
    let start_ns = monotonic_ns();
    let mut per_second = Vec::new();
    let results: Vec<Result<ThreadResult>> = std::thread::scope(|sc| {
        let mut handles = Vec::new();
        for (g, pin) in groups {
            let sender = Sender {
                cfg,
                pacer: Pacer::new(
                    Pacer::share(cfg.rate, g.len(), infos.len()),
                    cfg.burst,
                    cfg.window.is_some(),
                ),
                schedule: Schedule::new(cfg.send_for(), cfg.drain),
                stop,
                progress: &progress,
                start_ns,
            };
            handles.push(sc.spawn(move || sender.run(g, pin)));
        }
        let mut last = Instant::now();
        while handles.iter().any(|h| !h.is_finished()) {
            std::thread::sleep(Duration::from_millis(20));
            if last.elapsed() >= Duration::from_secs(1) {
                last += Duration::from_secs(1);
                let (sent, echoed) =
                    (progress.sent.load(Ordering::Relaxed), progress.echoed.load(Ordering::Relaxed));
                per_second.push((start.elapsed().as_secs_f64(), sent, echoed));
                on_second(sent, echoed, start.elapsed());
            }
        }
        handles.into_iter().map(|h| h.join().unwrap_or(Err(UdpLoadError::SenderPanicked))).collect()
    });
    let elapsed = start.elapsed();
    let mut hist = report::rtt_histogram();
    let mut trackers = Vec::new();
    let mut invalid = 0;
    for r in results {
        let r = r?;
        let _ = hist.add(&r.hist);
        invalid += r.invalid;
        trackers.extend(r.trackers);
    }
    trackers.sort_by_key(|s| s.id);
    let mut report = LoadReport::new(
        &cfg.table,
        cfg.target.is_ipv6(),
        &infos,
        &trackers,
        &hist,
        invalid,
        elapsed.as_secs_f64(),
    );
    report.per_second = per_second;
    Ok(report)
}

struct ThreadResult {
    trackers: Vec<StreamTracker>,
    hist: Histogram<u64>,
    invalid: u64,
}

/// One sender thread: its settings; the loop is [`Sender::run`].
struct Sender<'a> {
    cfg: &'a LoadConfig,
    pacer: Pacer,
    schedule: Schedule,
    stop: &'a AtomicBool,
    progress: &'a Progress,
    start_ns: u64,
}

/// A window's datagrams are written off when nothing came back for this long.
const WINDOW_TIMEOUT_NS: u64 = 200_000_000;
/// Batches read from one socket per pass (fairness among streams).
const READS_PER_PASS: usize = 4;

impl Sender<'_> {
    /// The socket loop: send what is due, read what is there, wait when
    /// neither; the protocol decisions are the trackers', pacer's and
    /// schedule's.
    fn run(mut self, streams: Vec<Stream>, pin: Option<usize>) -> Result<ThreadResult> {
        if let Some(cpu) = pin {
            rsskit_linux::affinity::pin_current_thread(cpu).map_err(|e| UdpLoadError::Pin(e.to_string()))?;
        }
        let cfg = self.cfg;
        let count = cfg.count;
        let limits = SendLimits { count, window: cfg.window, window_timeout_ns: WINDOW_TIMEOUT_NS };
        let now = monotonic_ns();
        let gro = cfg.gro && sock::udp_offload().gro;
        let (socks, mut trackers): (Vec<Socket>, Vec<StreamTracker>) = streams
            .into_iter()
            .map(|s| {
                let _ = s.socket.set_nonblocking(true);
                (s.socket, StreamTracker::new(s.id, now))
            })
            .unzip();
        if gro {
            for s in &socks {
                sock::set_gro(s, true).map_err(|source| UdpLoadError::Io {
                    what: "UDP_GRO on a stream's socket".into(),
                    source,
                })?;
            }
        }
        let mut hist = report::rtt_histogram();
        let gso = u64::from(cfg.gso.max(1));
        let mut buf = vec![0u8; (cfg.size * gso as usize).max(2048)];
        // Echoes come back at the size sent; anything longer is not ours.
        // With GRO a buffer holds a whole coalesced echo (up to 64 KiB).
        let mut rx = if gro {
            Batch::new(16, 65536, true)
        } else {
            Batch::new(64, cfg.size.max(proto::HEADER_LEN), false)
        };
        let mut polls = PollSet::of(&socks);
        let (mut invalid, mut thread_sent, mut next) = (0u64, 0u64, 0usize);
        loop {
            let now = monotonic_ns();
            let elapsed = now.saturating_sub(self.start_ns);
            let all_done = trackers.iter().all(|t| t.done_sending(count));
            let phase = self.schedule.step(elapsed, self.stop.load(Ordering::Relaxed), all_done, || {
                trackers.iter().all(StreamTracker::all_in)
            });
            if phase == Phase::Finished {
                break;
            }
            let sending = phase == Phase::Sending;
            let mut did = false;
            // Send what is due, round-robin over the streams that may send.
            if sending {
                let due = self.pacer.due(elapsed, thread_sent);
                let size = cfg.size;
                let sent_now = stream::send_pass_bursts(
                    &mut trackers,
                    &mut next,
                    due,
                    now,
                    limits,
                    gso,
                    |i, probe, k| {
                        // Stamped at the send itself, not at the pass's start.
                        let sent_ns = monotonic_ns();
                        for j in 0..k as usize {
                            let p = proto::Probe { sent_ns, seq: probe.seq + j as u64, ..*probe };
                            proto::encode_probe(&mut buf[j * size..(j + 1) * size], &p);
                        }
                        if k == 1 {
                            socks[i].send(&buf[..size]).map(drop)
                        } else {
                            sock::send_segments(&socks[i], &buf[..k as usize * size], size).map(drop)
                        }
                    },
                )
                .map_err(|(_, source)| UdpLoadError::Send { target: cfg.target, source })?;
                thread_sent += sent_now;
                did |= sent_now > 0;
                self.progress.sent.fetch_add(sent_now, Ordering::Relaxed);
            }
            // Read what is there.
            let mut got = 0u64;
            for (st, sock) in trackers.iter_mut().zip(&socks) {
                for _ in 0..READS_PER_PASS {
                    let k = match rx.recv(sock, true) {
                        Ok(k) => k,
                        Err(e) if classify(&e) == IoClass::Refused => {
                            st.on_refused(sending, count);
                            continue;
                        }
                        // Nothing there (or a receive error: the echoes are then lost).
                        Err(_) => break,
                    };
                    let now_ns = monotonic_ns();
                    for j in 0..k {
                        let data = rx.data(j);
                        // A coalesced echo (GRO) is checked datagram by datagram.
                        for r in segments(data.len(), rx.segment_size(j).unwrap_or(0)) {
                            let d = &data[r];
                            let truncated = rx.truncated(j) || d.len() > cfg.size;
                            match st.on_datagram(d, truncated, now_ns) {
                                Echo::Fresh { rtt_ns } => {
                                    got += 1;
                                    let _ = hist.record(rtt_ns);
                                }
                                Echo::Duplicate => {}
                                Echo::Invalid => invalid += 1,
                            }
                        }
                    }
                    st.on_read(monotonic_ns());
                    if k < rx.capacity() {
                        break;
                    }
                }
            }
            if got > 0 {
                self.progress.echoed.fetch_add(got, Ordering::Relaxed);
                did = true;
            }
            if !did {
                // Nothing to do: wait for an echo or the next send slot.
                let wait =
                    self.pacer.idle_wait(monotonic_ns().saturating_sub(self.start_ns), thread_sent, !sending);
                if !wait.is_zero() {
                    polls.wait(wait).map_err(UdpLoadError::Poll)?;
                }
            }
        }
        Ok(ThreadResult { trackers, hist, invalid })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rsskit_core::{CpuId, HashConfig, RssKey, RssPolicy};
    use std::collections::BTreeSet;
    use std::net::IpAddr;

    pub(super) fn table(udp4: bool) -> ServerTable {
        let hash = HashConfig::default().with_udp_4tuple(udp4);
        ServerTable::from_policy(
            RssPolicy::new(RssKey::microsoft(), hash, &[CpuId(0), CpuId(1)], None).unwrap(),
        )
    }

    pub(super) fn cfg(streams: usize, udp4: bool) -> LoadConfig {
        LoadConfig {
            streams,
            rate: Some(1000),
            duration: Some(Duration::from_millis(100)),
            spread: true,
            drain: Duration::from_millis(100),
            ..LoadConfig::new("127.0.0.1:9".parse().unwrap(), table(udp4))
        }
    }

    /// A one-thread echo server that stamps like worker `owner(bucket)` would,
    /// except for streams from `liar`, which it stamps as worker 7.
    fn echo_server(t: ServerTable, drop_every: u64, liar: Option<IpAddr>) -> (SocketAddr, Arc<AtomicBool>) {
        echo_server_late(t, drop_every, 0, liar)
    }

    /// As [`echo_server`], echoing every `late_every`-th datagram 300 ms late.
    fn echo_server_late(
        t: ServerTable,
        drop_every: u64,
        late_every: u64,
        liar: Option<IpAddr>,
    ) -> (SocketAddr, Arc<AtomicBool>) {
        let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        s.set_read_timeout(Some(Duration::from_millis(20))).unwrap();
        let addr = s.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let st = stop.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 2048];
            let mut n_in = 0u64;
            let mut late: Vec<(Instant, Vec<u8>, SocketAddr)> = Vec::new();
            while !st.load(Ordering::Relaxed) {
                late.retain(|(at, d, to)| {
                    if at.elapsed() < Duration::from_millis(300) {
                        return true;
                    }
                    let _ = s.send_to(d, to);
                    false
                });
                let Ok((n, from)) = s.recv_from(&mut buf) else { continue };
                n_in += 1;
                if drop_every > 0 && n_in.is_multiple_of(drop_every) {
                    continue;
                }
                let is_late = late_every > 0 && n_in.is_multiple_of(late_every);
                let h = t.hash(from, addr);
                let b = t.policy().bucket(h);
                let w = if Some(from.ip()) == liar { 7 } else { t.owner(b).unwrap().0 as u16 };
                let stamp = proto::ServerStamp {
                    worker: w,
                    cpu: t.cpus().get(w as usize).map_or(99, |c| c.0 as u16),
                    bucket: b as u16,
                    kernel_cpu: proto::CPU_UNKNOWN,
                    hash: h,
                    flags: 0,
                };
                proto::write_stamp(&mut buf[..n], &stamp);
                if is_late {
                    late.push((Instant::now(), buf[..n].to_vec(), from));
                    continue;
                }
                let _ = s.send_to(&buf[..n], from);
            }
        });
        (addr, stop)
    }

    #[test]
    fn counts_every_datagram_and_checks_the_owner() {
        let mut c = cfg(4, false);
        let (addr, stop) = echo_server(c.table.clone(), 10, None);
        c.target = addr;
        c.count = Some(200);
        c.duration = None;
        c.rate = None;
        c.window = Some(4);
        c.drain = Duration::from_millis(300);
        let streams = plan_streams(&c).unwrap();
        let r = run(&c, streams, &AtomicBool::new(false), |_, _, _| {}).unwrap();
        stop.store(true, Ordering::Relaxed);
        assert_eq!(r.sent, 800, "every stream sends its --count");
        assert_eq!(r.echoed + r.lost, r.sent);
        assert_eq!(r.lost, 80, "the server dropped every 10th datagram");
        for s in &r.streams {
            assert!(s.matched, "stream {} served by {:?}", s.stream, s.served_by_workers);
            assert_eq!(s.served_by_workers, vec![s.owner_worker.unwrap().0 as u16]);
            assert_eq!(s.server_buckets, vec![s.bucket as u16]);
        }
        assert!(r.rtt_us.p50 > 0.0 && r.rtt_us.max >= r.rtt_us.p99);
    }

    #[test]
    fn late_echoes_after_a_window_write_off_are_still_counted() {
        let mut c = cfg(2, false);
        let (addr, stop) = echo_server_late(c.table.clone(), 0, 7, None);
        c.target = addr;
        c.count = Some(100);
        c.duration = None;
        c.rate = None;
        c.window = Some(2);
        c.drain = Duration::from_millis(800);
        let streams = plan_streams(&c).unwrap();
        let r = run(&c, streams, &AtomicBool::new(false), |_, _, _| {}).unwrap();
        stop.store(true, Ordering::Relaxed);
        assert_eq!(r.sent, 200);
        assert_eq!(r.echoed, 200, "late echoes arrive within the drain and are counted");
        assert_eq!(r.lost, 0);
        assert!(r.out_of_order > 0, "late echoes come back out of order");
        assert!(r.rtt_us.max >= 300_000.0, "the late ones took 300 ms: {:?}", r.rtt_us);
    }

    #[test]
    fn a_wrong_worker_is_a_mismatch() {
        let mut c = cfg(2, false);
        let streams = {
            c.target = "127.0.0.1:9".parse().unwrap();
            plan_streams(&c).unwrap()
        };
        let liar = streams[1].src.ip();
        drop(streams);
        let (addr, stop) = echo_server(c.table.clone(), 0, Some(liar));
        c.target = addr;
        c.count = Some(50);
        c.duration = None;
        c.window = Some(2);
        let streams = plan_streams(&c).unwrap();
        assert_eq!(streams[1].src.ip(), liar, "plan is deterministic");
        let r = run(&c, streams, &AtomicBool::new(false), |_, _, _| {}).unwrap();
        stop.store(true, Ordering::Relaxed);
        assert_eq!(r.echoed, 100);
        assert!(r.streams[0].matched);
        assert!(!r.streams[1].matched);
        assert_eq!(r.streams[1].served_by_workers, vec![7]);
    }

    #[test]
    fn refused_target_is_seen() {
        // Bind and drop a socket to get a port with nothing on it, and aim
        // at an odd loopback address no other test binds, so a parallel test
        // that happens to get the same ephemeral port cannot answer.
        let port = std::net::UdpSocket::bind("127.213.7.9:0").unwrap().local_addr().unwrap().port();
        let mut c = cfg(1, false);
        c.spread = false;
        c.target = SocketAddr::new("127.213.7.9".parse().unwrap(), port);
        c.duration = Some(Duration::from_millis(200));
        let streams = plan_streams(&c).unwrap();
        let r = run(&c, streams, &AtomicBool::new(false), |_, _, _| {}).unwrap();
        assert_eq!(r.echoed, 0);
        assert!(r.refused > 0 && r.cut_short, "{} {}", r.refused, r.cut_short);
        assert_eq!(r.streams[0].refused, r.refused);
    }

    #[test]
    fn server_going_away_cuts_the_run_short() {
        // Echoes for a while, then the server closes its socket: the kernel
        // answers ICMP port unreachable and the streams are refused.
        let mut c = cfg(2, false);
        let (addr, stop) = echo_server(c.table.clone(), 0, None);
        c.target = addr;
        c.duration = Some(Duration::from_secs(3));
        let streams = plan_streams(&c).unwrap();
        let t = Instant::now();
        let r = std::thread::scope(|sc| {
            sc.spawn(|| {
                std::thread::sleep(Duration::from_millis(500));
                stop.store(true, Ordering::Relaxed);
            });
            run(&c, streams, &AtomicBool::new(false), |_, _, _| {}).unwrap()
        });
        assert!(r.echoed > 0, "echoed before the server went away");
        assert!(r.refused > 0, "refusals counted");
        assert!(r.cut_short, "the run stopped before --duration 3");
        assert!(t.elapsed() < Duration::from_millis(2900), "{:?}", t.elapsed());
        assert_eq!(r.refused, r.streams.iter().map(|s| s.refused).sum::<u64>());
        let j = serde_json::to_value(&r).unwrap();
        assert_eq!(j["refused"], r.refused);
        assert_eq!(j["cut_short"], true);
    }

    #[test]
    fn ipnet_parses() {
        let n: IpNet = "10.1.0.0/16".parse().unwrap();
        assert_eq!(n.prefix_len, 16);
        assert!("10.1.0.0/33".parse::<IpNet>().is_err());
        assert!("10.1.0.0".parse::<IpNet>().is_err());
        assert!("fd00::/64".parse::<IpNet>().is_ok());
    }

    #[test]
    fn validation() {
        let mut c = cfg(1, false);
        assert!(c.validate().is_ok());
        c.size = MAX_SIZE + 1;
        assert!(c.validate().unwrap_err().to_string().contains("65507"));
        c.size = MIN_SIZE - 1;
        assert!(matches!(c.validate(), Err(UdpLoadError::Config(m)) if m.to_string().contains("size 39")));
        c.size = 64;
        c.streams = 0;
        assert!(c.validate().is_err());
    }

    #[test]
    fn spread_by_address_on_loopback_hits_distinct_buckets() {
        let c = cfg(4, false);
        let s = plan_streams(&c).unwrap();
        let buckets: BTreeSet<u32> = s.iter().map(|s| s.bucket).collect();
        assert_eq!(buckets.len(), 4);
        let addrs: BTreeSet<IpAddr> = s.iter().map(|s| s.src.ip()).collect();
        assert_eq!(addrs.len(), 4, "address-only hashing needs distinct addresses");
        for st in &s {
            assert_eq!(c.table.policy().bucket(c.table.hash(st.src, c.target)), st.bucket);
        }
    }

    #[test]
    fn spread_by_port_with_4tuple() {
        let c = cfg(4, true);
        let s = plan_streams(&c).unwrap();
        let buckets: BTreeSet<u32> = s.iter().map(|s| s.bucket).collect();
        assert_eq!(buckets.len(), 4);
        for st in &s {
            assert!(st.src.ip().is_loopback());
            assert_eq!(c.table.policy().bucket(c.table.hash(st.src, c.target)), st.bucket);
        }
    }
}
