//! Latency samples and what a phase reports from them.

use std::fmt;
use std::time::Duration;

/// p50, p99 and max of a set of latencies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Percentiles {
    /// How many samples.
    pub count: usize,
    /// The median.
    pub p50: Duration,
    /// The 99th percentile.
    pub p99: Duration,
    /// The largest.
    pub max: Duration,
}

impl Percentiles {
    /// Summarises `samples` (in any order); all zero when empty.
    pub fn of(mut samples: Vec<Duration>) -> Percentiles {
        if samples.is_empty() {
            return Percentiles::default();
        }
        samples.sort_unstable();
        Percentiles {
            count: samples.len(),
            p50: nearest_rank(&samples, 0.50),
            p99: nearest_rank(&samples, 0.99),
            max: samples[samples.len() - 1],
        }
    }
}

/// The nearest-rank percentile of sorted, non-empty `samples`.
fn nearest_rank(sorted: &[Duration], p: f64) -> Duration {
    let rank = (p * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// A duration as milliseconds with two decimals.
pub(crate) struct Ms(pub(crate) Duration);

impl fmt::Display for Ms {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.2}", self.0.as_secs_f64() * 1000.0)
    }
}

/// The median of whole-millisecond figures the engine reports.
pub(crate) fn median_ms(mut values: Vec<i64>) -> Option<i64> {
    if values.is_empty() {
        return None;
    }
    values.sort_unstable();
    Some(values[(values.len() - 1) / 2])
}

/// The process's user + system CPU time so far (Linux; `None` elsewhere).
pub(crate) fn process_cpu() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name (which may hold spaces) start at ')'.
    let rest = stat.get(stat.rfind(')')? + 2..)?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line (11 and 12 here).
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    // USER_HZ is 100 on every Linux this runs on.
    Some(Duration::from_millis((utime + stime) * 10))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;

    fn ms(values: &[u64]) -> Vec<Duration> {
        values.iter().map(|v| Duration::from_millis(*v)).collect()
    }

    #[test]
    fn percentiles_by_nearest_rank() {
        let p = Percentiles::of(ms(&(1..=100).rev().collect::<Vec<_>>()));
        assert_eq!(p.count, 100);
        assert_eq!(p.p50, Duration::from_millis(50));
        assert_eq!(p.p99, Duration::from_millis(99));
        assert_eq!(p.max, Duration::from_millis(100));
    }

    #[test]
    fn one_sample_is_every_percentile() {
        let p = Percentiles::of(ms(&[7]));
        assert_eq!(
            (p.p50, p.p99, p.max),
            (ms(&[7])[0], ms(&[7])[0], ms(&[7])[0])
        );
    }

    #[test]
    fn no_samples_is_all_zero() {
        assert_eq!(Percentiles::of(Vec::new()), Percentiles::default());
    }

    #[test]
    fn median_of_engine_figures() {
        assert_eq!(median_ms(vec![5, 1, 3]), Some(3));
        assert_eq!(median_ms(vec![4, 1]), Some(1));
        assert_eq!(median_ms(Vec::new()), None);
    }

    #[test]
    fn process_cpu_reads_on_linux() {
        if cfg!(target_os = "linux") {
            assert!(process_cpu().is_some(), "/proc/self/stat unreadable");
        }
    }
}
