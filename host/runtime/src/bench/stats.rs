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

/// How the slowest 1 % of a phase's events (those at or above its p99)
/// spread over the phase: a few bursts mean the p99 is set by a few stalls
/// (a slow fsync on a shared disk, a descheduled thread), many mean it is
/// the steady state's tail (decision 0116).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TailBursts {
    /// Events at or above the p99.
    pub events: usize,
    /// Bursts they fall into: runs of such events due less than
    /// [`BURST_GAP`] apart.
    pub bursts: usize,
    /// Events in the largest burst.
    pub largest: usize,
    /// From the first to the last event due in the largest burst.
    pub largest_span: Duration,
}

/// Slow events due closer together than this belong to one burst.
pub const BURST_GAP: Duration = Duration::from_millis(100);

impl TailBursts {
    /// The bursts of the events of `samples` (when each was due, its
    /// latency) whose latency is at least `p99`.
    pub fn of(samples: &[(Duration, Duration)], p99: Duration) -> TailBursts {
        let mut due: Vec<Duration> = samples
            .iter()
            .filter(|(_, latency)| *latency >= p99)
            .map(|(due, _)| *due)
            .collect();
        due.sort_unstable();
        let mut tail = TailBursts {
            events: due.len(),
            ..TailBursts::default()
        };
        let mut start = 0;
        for end in 1..=due.len() {
            let burst_ends = end == due.len() || due[end] - due[end - 1] >= BURST_GAP;
            if !burst_ends {
                continue;
            }
            tail.bursts += 1;
            if end - start > tail.largest {
                tail.largest = end - start;
                tail.largest_span = due[end - 1] - due[start];
            }
            start = end;
        }
        tail
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

    /// (due, latency) pairs in milliseconds.
    fn due_and_latency(pairs: &[(u64, u64)]) -> Vec<(Duration, Duration)> {
        pairs
            .iter()
            .map(|&(due, latency)| (Duration::from_millis(due), Duration::from_millis(latency)))
            .collect()
    }

    #[test]
    fn slow_events_due_close_together_are_one_burst() {
        // Two stalls (at 1 s and at 3 s) and fast events everywhere else.
        let mut pairs: Vec<(u64, u64)> = (0..4000).map(|i| (i, 2)).collect();
        pairs.extend([(1000, 40), (1030, 35), (1099, 30), (3000, 50), (3050, 45)]);
        let tail = TailBursts::of(&due_and_latency(&pairs), Duration::from_millis(30));
        assert_eq!(
            tail,
            TailBursts {
                events: 5,
                bursts: 2,
                largest: 3,
                largest_span: Duration::from_millis(99),
            }
        );
    }

    #[test]
    fn slow_events_spread_out_are_bursts_of_their_own() {
        let pairs: Vec<(u64, u64)> = (0..10).map(|i| (i * 100, 20)).collect();
        let tail = TailBursts::of(&due_and_latency(&pairs), Duration::from_millis(20));
        assert_eq!((tail.events, tail.bursts, tail.largest), (10, 10, 1));
        assert_eq!(tail.largest_span, Duration::ZERO);
        assert_eq!(TailBursts::of(&[], Duration::ZERO), TailBursts::default());
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
