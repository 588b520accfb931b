//! Per-stream and whole-run reports (and their JSON), from the streams'
//! trackers: no I/O.

use super::sources::ServerTable;
use super::stream::StreamTracker;
use hdrhistogram::Histogram;
use rsskit_core::{CpuId, WorkerId};
use std::net::SocketAddr;

/// Per-stream results.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct StreamReport {
    /// Stream number.
    pub stream: u32,
    /// Source address and port.
    pub src: String,
    /// The flow's Toeplitz hash.
    pub hash: u32,
    /// Its bucket.
    pub bucket: u32,
    /// The worker owning `bucket` in the assumed server table.
    pub owner_worker: Option<WorkerId>,
    /// The CPU of that worker.
    pub owner_cpu: Option<CpuId>,
    /// Workers that served it (from the echo stamps).
    pub served_by_workers: Vec<u16>,
    /// Their CPUs.
    pub served_by_cpus: Vec<u16>,
    /// CPUs the server's kernel processed the datagrams on (when known).
    pub kernel_cpus: Vec<u16>,
    /// Buckets the server computed (should be just `bucket`).
    pub server_buckets: Vec<u16>,
    /// Probes sent.
    pub sent: u64,
    /// Probes echoed.
    pub echoed: u64,
    /// Probes never echoed.
    pub lost: u64,
    /// Echoes that arrived after a later one.
    pub out_of_order: u64,
    /// Echoes received more than once.
    pub duplicates: u64,
    /// ECONNREFUSED errors (ICMP port unreachable: nothing listens at the
    /// target any more); the stream stops sending at the first.
    pub refused: u64,
    /// Echoes the server flagged as misdirected (bucket not owned by the worker).
    pub flagged_misdirected: u64,
    /// Echoes whose kernel CPU differs from the serving worker's CPU.
    pub kernel_cpu_mismatch: u64,
    /// Every echo served by the owner worker, with the bucket we expected,
    /// or `moved`.
    #[serde(rename = "match")]
    pub matched: bool,
    /// Served first by the owner, then also by other workers that (the
    /// server's stamps say) owned the bucket then: the server moved it
    /// (`udp-echo --rebalance`).
    pub moved: bool,
}

/// Whole-run results.
#[derive(Debug, Clone, serde::Serialize)]
pub struct LoadReport {
    /// Probes sent, all streams.
    pub sent: u64,
    /// Probes echoed.
    pub echoed: u64,
    /// Probes never echoed.
    pub lost: u64,
    /// Echoes that arrived after a later one.
    pub out_of_order: u64,
    /// Echoes received more than once.
    pub duplicates: u64,
    /// Datagrams that were not our probes (bad magic, wrong stream).
    pub invalid: u64,
    /// Round-trip time quantiles, microseconds.
    pub rtt_us: RttSummary,
    /// The RTT distribution (for `--plot`): see [`crate::hist::log2_buckets`].
    #[serde(skip)]
    pub rtt_log2_us: Vec<(f64, u64)>,
    /// Once a second: (seconds since the start, sent so far, echoed so far), for `--plot`.
    #[serde(skip)]
    pub per_second: Vec<(f64, u64, u64)>,
    /// Seconds the run took, draining included.
    pub elapsed_s: f64,
    /// Per stream, in stream order.
    pub streams: Vec<StreamReport>,
    /// The hash configuration the streams were planned for.
    pub hash_config: serde_json::Value,
    /// ECONNREFUSED errors over all streams (the target went away or was
    /// never there).
    pub refused: u64,
    /// Some stream stopped sending before its `duration`/`count` because
    /// the target refused: the run was cut short.
    pub cut_short: bool,
    /// Whether the per-stream owner check (`match`) applies: false when
    /// the server does not steer by bucket (the caller says so).
    pub owner_check: bool,
}

/// Round-trip time quantiles, microseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct RttSummary {
    /// Median.
    pub p50: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
    /// Largest.
    pub max: f64,
}

/// An RTT histogram in nanoseconds, 1 ns to 60 s.
pub fn rtt_histogram() -> Histogram<u64> {
    Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).expect("valid histogram bounds")
}

impl RttSummary {
    /// Quantiles of a nanosecond histogram, in microseconds (zeros if empty).
    pub fn of(h: &Histogram<u64>) -> Self {
        if h.is_empty() {
            return RttSummary::default();
        }
        let us = |ns: u64| ns as f64 / 1000.0;
        RttSummary {
            p50: us(h.value_at_quantile(0.5)),
            p99: us(h.value_at_quantile(0.99)),
            p999: us(h.value_at_quantile(0.999)),
            max: us(h.max()),
        }
    }
}

/// Where a stream was planned to land.
#[derive(Debug, Clone, Copy)]
pub struct StreamInfo {
    /// Stream number.
    pub id: u32,
    /// Source address and port.
    pub src: SocketAddr,
    /// The flow's Toeplitz hash.
    pub hash: u32,
    /// Its bucket.
    pub bucket: u32,
    /// The server worker owning it, if any.
    pub owner: Option<WorkerId>,
}

impl StreamReport {
    /// The report of one stream from its plan, its tracker and the server table.
    pub fn new(info: &StreamInfo, st: &StreamTracker, table: &ServerTable) -> Self {
        let owner_cpu = table.owner_cpu(info.bucket);
        StreamReport {
            stream: info.id,
            src: info.src.to_string(),
            hash: info.hash,
            bucket: info.bucket,
            owner_worker: info.owner,
            owner_cpu,
            served_by_workers: st.workers.keys().copied().collect(),
            served_by_cpus: st.cpus.iter().copied().collect(),
            kernel_cpus: st.kcpus.iter().copied().collect(),
            server_buckets: st.buckets.iter().copied().collect(),
            sent: st.sent,
            echoed: st.echoed,
            lost: st.lost(),
            out_of_order: st.out_of_order,
            duplicates: st.duplicates,
            refused: st.refused,
            flagged_misdirected: st.flagged,
            kernel_cpu_mismatch: st.kcpu_mismatch,
            matched: st.served_by_owner(info.owner, owner_cpu, info.bucket)
                || st.moved_by_server(info.owner, info.bucket),
            moved: st.moved_by_server(info.owner, info.bucket),
        }
    }
}

impl LoadReport {
    /// The run's report: `infos` and `trackers` in the same (stream id) order.
    pub fn new(
        table: &ServerTable,
        ipv6: bool,
        infos: &[StreamInfo],
        trackers: &[StreamTracker],
        rtt: &Histogram<u64>,
        invalid: u64,
        elapsed_s: f64,
    ) -> Self {
        let streams: Vec<StreamReport> =
            infos.iter().zip(trackers).map(|(i, st)| StreamReport::new(i, st, table)).collect();
        let sum = |f: fn(&StreamReport) -> u64| streams.iter().map(f).sum::<u64>();
        let ht = table.hash_type(ipv6);
        let p = table.policy();
        LoadReport {
            sent: sum(|s| s.sent),
            echoed: sum(|s| s.echoed),
            lost: sum(|s| s.lost),
            out_of_order: sum(|s| s.out_of_order),
            duplicates: sum(|s| s.duplicates),
            invalid,
            rtt_us: RttSummary::of(rtt),
            rtt_log2_us: crate::hist::log2_buckets(rtt),
            per_second: Vec::new(),
            elapsed_s,
            refused: sum(|s| s.refused),
            cut_short: trackers.iter().any(|t| t.cut_short),
            owner_check: true,
            hash_config: serde_json::json!({
                "hash_type": ht.name(),
                "udp_4tuple": ht.has_ports(),
                "spread_by": if ht.has_ports() { "source port" } else { "source address" },
                "key": p.key().to_hex(),
                "bits": p.bits(),
                "buckets": p.buckets(),
                "server_cpus": table.cpus(),
            }),
            streams,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::table;
    use super::*;
    use crate::proto;

    fn echo(t: &mut StreamTracker, seq: u64, s: &proto::ServerStamp, rtt_ns: u64, h: &mut Histogram<u64>) {
        let mut b = vec![0u8; 64];
        proto::encode_probe(&mut b, &proto::Probe { stream: t.id, seq, sent_ns: 1_000_000 });
        proto::write_stamp(&mut b, s);
        if let super::super::stream::Echo::Fresh { rtt_ns } = t.on_datagram(&b, false, 1_000_000 + rtt_ns) {
            h.record(rtt_ns).unwrap();
        }
    }

    #[test]
    fn report_sums_streams_and_checks_owners() {
        let t = table(false);
        let infos: Vec<StreamInfo> = (0..2u32)
            .map(|i| {
                let src: SocketAddr = format!("127.0.0.{}:5000", 10 + i).parse().unwrap();
                let dst: SocketAddr = "127.0.0.1:9".parse().unwrap();
                let hash = t.hash(src, dst);
                let bucket = t.policy().bucket(hash);
                StreamInfo { id: i, src, hash, bucket, owner: t.owner(bucket) }
            })
            .collect();
        let mut h = rtt_histogram();
        let mut trackers: Vec<StreamTracker> = (0..2).map(|i| StreamTracker::new(i, 0)).collect();
        for (info, tr) in infos.iter().zip(&mut trackers) {
            for _ in 0..4 {
                tr.on_sent(0);
            }
            let w = info.owner.unwrap().0 as u16;
            let cpu = t.owner_cpu(info.bucket).unwrap().0 as u16;
            let good = proto::ServerStamp {
                worker: w,
                cpu,
                bucket: info.bucket as u16,
                kernel_cpu: proto::CPU_UNKNOWN,
                hash: info.hash,
                flags: 0,
            };
            echo(tr, 0, &good, 10_000, &mut h);
            echo(tr, 2, &good, 30_000, &mut h);
            echo(tr, 1, &good, 20_000, &mut h);
            if info.id == 1 {
                // Served once by the other worker, which says it does not own the bucket.
                let bad = proto::ServerStamp {
                    worker: 1 - w,
                    cpu: t.cpus()[1 - w as usize].0 as u16,
                    flags: proto::FLAG_MISDIRECTED,
                    ..good
                };
                echo(tr, 3, &bad, 40_000, &mut h);
                tr.on_refused(true, None);
            }
        }
        let r = LoadReport::new(&t, false, &infos, &trackers, &h, 5, 1.5);
        assert_eq!((r.sent, r.echoed, r.lost, r.out_of_order, r.invalid), (8, 7, 1, 2, 5));
        assert_eq!((r.refused, r.cut_short), (1, true));
        assert!(r.streams[0].matched && !r.streams[1].matched);
        assert!(!r.streams[0].moved && !r.streams[1].moved);
        assert_eq!(r.streams[0].lost, 1);
        assert_eq!(r.streams[1].served_by_workers.len(), 2);
        assert!((39.9..=40.1).contains(&r.rtt_us.max), "{:?}", r.rtt_us);
        assert!((19.9..=20.1).contains(&r.rtt_us.p50), "{:?}", r.rtt_us);
        let j = serde_json::to_value(&r).unwrap();
        assert_eq!(j["streams"][1]["match"], false);
        assert_eq!(j["streams"][1]["moved"], false);
        assert_eq!(j["hash_config"]["udp_4tuple"], false);
        assert_eq!(j["hash_config"]["server_cpus"], serde_json::json!([0, 1]));
        assert_eq!(j["refused"], 1);
        assert_eq!(RttSummary::of(&rtt_histogram()), RttSummary::default());
    }

    /// A bucket the server moved (`--rebalance`): first the owner, then the
    /// new owner, neither flagging it: "moved", a match. Served from the
    /// start by another worker (a server with another table): no match.
    #[test]
    fn a_stream_the_server_moved_matches_as_moved() {
        let t = table(false);
        let src: SocketAddr = "127.0.0.10:5000".parse().unwrap();
        let dst: SocketAddr = "127.0.0.1:9".parse().unwrap();
        let hash = t.hash(src, dst);
        let bucket = t.policy().bucket(hash);
        let info = StreamInfo { id: 0, src, hash, bucket, owner: t.owner(bucket) };
        let w = info.owner.unwrap().0 as u16;
        let at = |worker: u16| proto::ServerStamp {
            worker,
            cpu: t.cpus()[worker as usize].0 as u16,
            bucket: bucket as u16,
            kernel_cpu: proto::CPU_UNKNOWN,
            hash,
            flags: 0,
        };
        let mut h = rtt_histogram();
        let run = |order: [u16; 4], h: &mut Histogram<u64>| {
            let mut tr = StreamTracker::new(0, 0);
            (0..4).for_each(|_| tr.on_sent(0));
            for (seq, worker) in order.into_iter().enumerate() {
                echo(&mut tr, seq as u64, &at(worker), 1000, h);
            }
            LoadReport::new(&t, false, std::slice::from_ref(&info), &[tr], h, 0, 1.0).streams[0].clone()
        };
        let moved = run([w, w, 1 - w, 1 - w], &mut h);
        assert!(moved.moved && moved.matched, "{moved:?}");
        let elsewhere = run([1 - w, 1 - w, w, w], &mut h);
        assert!(!elsewhere.moved && !elsewhere.matched, "{elsewhere:?}");
        let stayed = run([w; 4], &mut h);
        assert!(!stayed.moved && stayed.matched);
    }
}
