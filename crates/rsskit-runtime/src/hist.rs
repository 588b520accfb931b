//! Latency histograms (HdrHistogram, nanoseconds, 3 significant digits) and
//! their summary: percentiles, mean and standard deviation in microseconds.

use hdrhistogram::Histogram;
use serde::Serialize;

/// Highest trackable latency: one hour.
const MAX_NS: u64 = 3_600_000_000_000;

/// A latency histogram.
#[derive(Clone)]
pub struct Latency {
    h: Histogram<u64>,
}

impl std::fmt::Debug for Latency {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Latency({} samples)", self.h.len())
    }
}

impl Default for Latency {
    fn default() -> Self {
        Self::new()
    }
}

impl Latency {
    /// An empty histogram, 1 ns to its largest trackable latency, 3 significant digits.
    pub fn new() -> Latency {
        Latency { h: Histogram::new_with_bounds(1, MAX_NS, 3).expect("valid histogram bounds") }
    }

    /// Records one latency (clamped into the trackable range).
    #[inline]
    pub fn record(&mut self, ns: u64) {
        let _ = self.h.record(ns.clamp(1, MAX_NS));
    }

    /// Adds another histogram's counts.
    pub fn merge(&mut self, o: &Latency) {
        let _ = self.h.add(&o.h);
    }

    /// Latencies recorded.
    pub fn count(&self) -> u64 {
        self.h.len()
    }

    /// The distribution in powers of two (for `--plot`): see [`log2_buckets`].
    pub fn log2_buckets(&self) -> Vec<(f64, u64)> {
        log2_buckets(&self.h)
    }

    /// Count, mean, deviation and quantiles, in microseconds.
    pub fn summary(&self) -> LatencySummary {
        let us = |ns: f64| (ns / 1000.0 * 1000.0).round() / 1000.0;
        if self.h.is_empty() {
            return LatencySummary::default();
        }
        let q = |p: f64| us(self.h.value_at_quantile(p) as f64);
        LatencySummary {
            count: self.h.len(),
            mean: us(self.h.mean()),
            stddev: us(self.h.stdev()),
            p50: q(0.50),
            p90: q(0.90),
            p99: q(0.99),
            p999: q(0.999),
            max: us(self.h.max() as f64),
        }
    }
}

/// A nanosecond histogram in powers of two from 1 µs: (bucket's upper
/// bound in microseconds, count in it); the first bucket holds everything
/// up to 1 µs. Empty for an empty histogram.
pub fn log2_buckets(h: &Histogram<u64>) -> Vec<(f64, u64)> {
    if h.is_empty() {
        return Vec::new();
    }
    h.iter_log(1000, 2.0)
        .map(|v| (v.value_iterated_to() as f64 / 1000.0, v.count_since_last_iteration()))
        .collect()
}

/// Latency summary in microseconds.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct LatencySummary {
    /// Samples.
    pub count: u64,
    /// Mean.
    pub mean: f64,
    /// Standard deviation.
    pub stddev: f64,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
    /// Largest.
    pub max: f64,
}

impl std::fmt::Display for LatencySummary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "p50 {:.1} p90 {:.1} p99 {:.1} p99.9 {:.1} max {:.1} mean {:.1} stddev {:.1} (us)",
            self.p50, self.p90, self.p99, self.p999, self.max, self.mean, self.stddev
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_of_known_values() {
        let mut a = Latency::new();
        for i in 1..=1000u64 {
            a.record(i * 1000); // 1..1000 us
        }
        let mut b = Latency::new();
        b.record(2_000_000);
        a.merge(&b);
        let s = a.summary();
        assert_eq!(s.count, 1001);
        assert!((s.p50 - 500.0).abs() < 2.0, "{s:?}");
        assert!((s.p99 - 990.0).abs() < 1.5, "{s:?}");
        assert!((s.max - 2000.0).abs() < 2.0, "{s:?}");
        assert!(s.stddev > 285.0 && s.stddev < 300.0, "{s:?}");
        assert_eq!(Latency::new().summary(), LatencySummary::default());
    }
}
