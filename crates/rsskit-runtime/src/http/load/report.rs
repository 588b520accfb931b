//! Results: per-worker counters and histograms, the run's summary (JSON
//! through serde), the live counters of the per-second line. No I/O.

use super::conn::{Fail, Outcome};
use super::sources::SrcPorts;
use super::LoadConfig;
use crate::hist::{Latency, LatencySummary};
use rsskit_core::{CpuId, WorkerId};
use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering};

/// Errors by kind.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq, Eq)]
pub struct Errors {
    /// Connection refused (nothing listening, or the backlog overflowed).
    pub refused: u64,
    /// No complete answer within the timeout.
    pub timeout: u64,
    /// Connection reset (or broken pipe).
    pub reset: u64,
    /// Answers with a status outside 2xx (counted as responses too).
    pub bad_status: u64,
    /// The connection ended before the whole answer.
    pub short_body: u64,
    /// Anything else: unparsable answers, no local address or port left...
    pub other: u64,
}

impl Errors {
    /// Failed requests (`bad_status` answers are answers, not counted).
    pub fn failures(&self) -> u64 {
        self.refused + self.timeout + self.reset + self.short_body + self.other
    }

    /// Adds another worker's counts.
    pub fn add(&mut self, o: &Errors) {
        self.refused += o.refused;
        self.timeout += o.timeout;
        self.reset += o.reset;
        self.bad_status += o.bad_status;
        self.short_body += o.short_body;
        self.other += o.other;
    }

    /// Counts one failed request.
    pub fn count(&mut self, why: Fail) {
        match why {
            Fail::Refused => self.refused += 1,
            Fail::Timeout => self.timeout += 1,
            Fail::Reset => self.reset += 1,
            Fail::Short => self.short_body += 1,
            Fail::Other => self.other += 1,
        }
    }
}

/// One worker's results.
#[derive(Debug, Clone, Serialize)]
pub struct WorkerReport {
    /// The worker.
    pub worker: WorkerId,
    /// Its CPU.
    pub cpu: CpuId,
    /// Connections it ran.
    pub connections: usize,
    /// Requests written in full.
    pub sent: u64,
    /// Answers received in full (any status).
    pub responses: u64,
    /// Connections opened (connect completed).
    pub connects: u64,
    /// Bytes of answers received.
    pub bytes_in: u64,
    /// Failed requests by reason.
    pub errors: Errors,
    /// Request latencies, nanoseconds.
    #[serde(skip)]
    pub latency: Latency,
    /// Connect (to established) latencies, nanoseconds.
    #[serde(skip)]
    pub connect: Latency,
}

impl WorkerReport {
    /// An empty report for worker `worker` on `cpu` running `connections` connections.
    pub fn new(worker: WorkerId, cpu: CpuId, connections: usize) -> WorkerReport {
        WorkerReport {
            worker,
            cpu,
            connections,
            sent: 0,
            responses: 0,
            connects: 0,
            bytes_in: 0,
            errors: Errors::default(),
            latency: Latency::new(),
            connect: Latency::new(),
        }
    }

    /// Counts the end of one exchange.
    pub fn record(&mut self, outcome: Outcome) {
        match outcome {
            Outcome::Answer { status, latency_ns } => {
                self.latency.record(latency_ns);
                self.responses += 1;
                if !(200..300).contains(&status) {
                    self.errors.bad_status += 1;
                }
            }
            Outcome::Failed(why) => self.errors.count(why),
        }
    }
}

/// The run's summary.
#[derive(Debug, Clone, Serialize)]
pub struct LoadReport {
    /// The URL as given.
    pub url: String,
    /// The resolved target address.
    pub target: String,
    /// `keep-alive` or `close` (one request per connection).
    pub mode: &'static str,
    /// Connections over all workers.
    pub connections: usize,
    /// Worker threads.
    pub threads: usize,
    /// Their CPUs.
    pub cpus: Vec<CpuId>,
    /// Requests per second asked for; `None`: closed loop.
    pub rate: Option<f64>,
    /// How source ports were chosen.
    pub src_ports: SrcPorts,
    /// Distinct source addresses used.
    pub source_addresses: usize,
    /// The duration asked for, seconds.
    pub duration_s: f64,
    /// From the first scheduled start to the last worker's end, seconds.
    pub elapsed_s: f64,
    /// Requests written in full.
    pub sent: u64,
    /// Answers received in full (any status).
    pub responses: u64,
    /// Answers with a success status.
    pub ok: u64,
    /// Answers per second of `elapsed_s`.
    pub requests_per_s: f64,
    /// Connections established.
    pub connects: u64,
    /// Bytes of answers received.
    pub bytes_in: u64,
    /// Latency in microseconds (from the scheduled start with `rate`).
    pub latency_us: LatencySummary,
    /// Connection setup (connect to established), microseconds.
    pub connect_us: LatencySummary,
    /// Failed requests by reason, summed.
    pub errors: Errors,
    /// Per worker, in worker order.
    pub workers: Vec<WorkerReport>,
    /// Once a second: (seconds since the start, each worker's responses so
    /// far), for `--plot`.
    #[serde(skip)]
    pub per_second: Vec<(f64, Vec<u64>)>,
    /// `RLIMIT_NOFILE` in force.
    pub nofile: u64,
}

/// What the run looked like, besides the workers' results.
#[derive(Debug, Clone)]
pub struct RunInfo {
    /// The workers' CPUs.
    pub cpus: Vec<CpuId>,
    /// Distinct source addresses used.
    pub source_addresses: usize,
    /// `RLIMIT_NOFILE` in force.
    pub nofile: u64,
    /// From the first scheduled start to the last worker's end.
    pub elapsed_ns: u64,
    /// Each worker's responses so far, once a second (for `--plot`).
    pub per_second: Vec<(f64, Vec<u64>)>,
}

impl LoadReport {
    /// Totals over the workers' reports.
    pub fn summarize(cfg: &LoadConfig, run: RunInfo, workers: Vec<WorkerReport>) -> LoadReport {
        let mut latency = Latency::new();
        let mut connect = Latency::new();
        let mut errors = Errors::default();
        for w in &workers {
            latency.merge(&w.latency);
            connect.merge(&w.connect);
            errors.add(&w.errors);
        }
        let responses: u64 = workers.iter().map(|w| w.responses).sum();
        // Requests/s over the measured window (the drain adds a few ms at most).
        let window = (run.elapsed_ns as f64 / 1e9).max(1e-9);
        LoadReport {
            url: format!("http://{}{}", cfg.url.host, cfg.url.path),
            target: cfg.url.addr.to_string(),
            mode: if cfg.close { "close" } else { "keep-alive" },
            connections: cfg.connections,
            threads: run.cpus.len(),
            cpus: run.cpus,
            rate: cfg.rate,
            src_ports: cfg.src_ports,
            source_addresses: run.source_addresses,
            duration_s: cfg.duration.as_secs_f64(),
            elapsed_s: window,
            sent: workers.iter().map(|w| w.sent).sum(),
            responses,
            ok: responses - errors.bad_status,
            requests_per_s: responses as f64 / window,
            connects: workers.iter().map(|w| w.connects).sum(),
            bytes_in: workers.iter().map(|w| w.bytes_in).sum(),
            latency_us: latency.summary(),
            connect_us: connect.summary(),
            errors,
            workers,
            per_second: run.per_second,
            nofile: run.nofile,
        }
    }
}

/// Live counters of one worker, for the per-second line.
#[derive(Debug, Default)]
pub struct Live {
    /// Answers received so far.
    pub responses: AtomicU64,
    /// Failed requests so far.
    pub failures: AtomicU64,
    /// Connections open now.
    pub open: AtomicU64,
}

impl Live {
    /// Publishes the owner's counters (relaxed: only read for display).
    pub fn publish(&self, r: &WorkerReport, open: u64) {
        self.responses.store(r.responses, Ordering::Relaxed);
        self.failures.store(r.errors.failures(), Ordering::Relaxed);
        self.open.store(open, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::config;
    use super::*;

    #[test]
    fn typed_worker_and_cpu_serialize_as_their_numbers() {
        // The JSON of the reports did not change when worker and CPU became
        // WorkerId and CpuId (serde(transparent) in rsskit-core).
        let w = WorkerReport::new(WorkerId(2), CpuId(3), 10);
        let j = serde_json::to_string(&w).unwrap();
        assert!(j.starts_with(r#"{"worker":2,"cpu":3,"connections":10,"#), "{j}");
        assert_eq!(serde_json::to_string(&[Some(CpuId(7)), None]).unwrap(), "[7,null]");
        assert_eq!(serde_json::to_string(&vec![CpuId(0), CpuId(1)]).unwrap(), "[0,1]");
    }

    #[test]
    fn outcomes_are_counted_by_kind() {
        let mut w = WorkerReport::new(WorkerId(0), CpuId(3), 10);
        w.record(Outcome::Answer { status: 200, latency_ns: 1_000_000 });
        w.record(Outcome::Answer { status: 503, latency_ns: 3_000_000 });
        for f in [Fail::Refused, Fail::Timeout, Fail::Reset, Fail::Reset, Fail::Short, Fail::Other] {
            w.record(Outcome::Failed(f));
        }
        assert_eq!(w.responses, 2);
        let want = Errors { refused: 1, timeout: 1, reset: 2, bad_status: 1, short_body: 1, other: 1 };
        assert_eq!(w.errors, want);
        assert_eq!(w.errors.failures(), 6, "a bad status is an answer, not a failure");
        assert_eq!(w.latency.summary().count, 2);
    }

    #[test]
    fn totals_over_workers_and_json() {
        let cfg = config();
        let mut a = WorkerReport::new(WorkerId(0), CpuId(0), 2);
        let mut b = WorkerReport::new(WorkerId(1), CpuId(1), 2);
        for (w, n) in [(&mut a, 300u64), (&mut b, 100)] {
            for k in 0..n {
                w.sent += 1;
                w.bytes_in += 100;
                w.record(Outcome::Answer {
                    status: if k == 0 { 404 } else { 200 },
                    latency_ns: 1_000 * (k + 1),
                });
            }
            w.connects += 2;
            w.connect.record(50_000);
            w.record(Outcome::Failed(Fail::Timeout));
        }
        let run = RunInfo {
            cpus: vec![CpuId(0), CpuId(1)],
            source_addresses: 0,
            nofile: 4096,
            elapsed_ns: 2_000_000_000,
            per_second: Vec::new(),
        };
        let r = LoadReport::summarize(&cfg, run, vec![a, b]);
        assert_eq!((r.sent, r.responses, r.ok, r.connects, r.bytes_in), (400, 400, 398, 4, 40_000));
        assert_eq!(r.errors.timeout, 2);
        assert_eq!(r.errors.bad_status, 2);
        assert!((r.requests_per_s - 200.0).abs() < 1e-9, "{}", r.requests_per_s);
        assert_eq!(r.latency_us.count, 400);
        assert_eq!(r.connect_us.count, 2);
        assert_eq!(r.threads, 2);
        let j = serde_json::to_value(&r).unwrap();
        assert_eq!(j["mode"], "keep-alive");
        assert_eq!(j["src_ports"], "kernel");
        assert_eq!(j["errors"]["timeout"], 2);
        assert_eq!(j["workers"][1]["responses"], 100);
        assert_eq!(j["url"], format!("http://{}{}", cfg.url.host, cfg.url.path));
        assert!(j["workers"][0].get("latency").is_none(), "histograms are not dumped");
    }
}
