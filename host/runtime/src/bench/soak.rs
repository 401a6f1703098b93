//! The soak: the open loop held at one rate for a duration, read once a
//! window (a minute by default), so what grows over a long run shows while
//! it runs rather than as one average at the end (issue 41).
//!
//! Each window takes the bench's own samples and starts afresh, so the
//! bench keeps a window's latencies, not the run's: over an hour at 1,000
//! events/s the run's would be some 170 MB of the very memory the soak
//! watches. The run ends with the least-squares slope of the resident set
//! over its second half.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use nimbus_broker::{Broker, Footprint};
use nimbus_resolver::{ResolverStore, StoreRows};

use super::load::{self, EventSource, Tracker};
use super::stats::Percentiles;

/// How long to soak, and how often to read the stack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SoakOptions {
    /// How long the open loop runs.
    pub duration: Duration,
    /// How often a line is read and printed.
    pub every: Duration,
}

/// The stack read at the end of one window.
#[derive(Debug, Clone)]
pub struct SoakWindow {
    /// Since the soak began.
    pub at: Duration,
    /// Events that ended in the window, per second.
    pub throughput: f64,
    /// Latency of the events completed in the window.
    pub completed: Percentiles,
    /// The process's resident set, bytes (Linux).
    pub rss_bytes: Option<u64>,
    /// The process's open file descriptors (Linux).
    pub open_fds: Option<usize>,
    /// The broker's log on disk, bytes.
    pub broker_log_bytes: u64,
    /// The Resolver's SQLite store on disk (with its WAL), bytes.
    pub resolver_store_bytes: u64,
    /// The Resolver's rows written, when its store says.
    pub resolver_rows: Option<StoreRows>,
    /// What the broker holds in memory.
    pub broker: Footprint,
}

impl SoakWindow {
    /// The column heads of [`SoakWindow::row`].
    pub const HEADER: &'static str = "  minute  events/s   p50 ms   p99 ms   max ms   RSS MB  fds  log MB  store MB  history rows  partitions  held  state  deadlines";

    /// The window as one line under [`SoakWindow::HEADER`].
    pub fn row(&self) -> String {
        let mb = |bytes: u64| bytes as f64 / 1e6;
        format!(
            "{:>8.1}{:>10.0}{:>9.1}{:>9.1}{:>9.1}{:>9}{:>5}{:>8.1}{:>10.1}{:>14}{:>12}{:>6}{:>7}{:>11}",
            self.at.as_secs_f64() / 60.0,
            self.throughput,
            self.completed.p50.as_secs_f64() * 1e3,
            self.completed.p99.as_secs_f64() * 1e3,
            self.completed.max.as_secs_f64() * 1e3,
            self.rss_bytes
                .map_or_else(|| "-".to_owned(), |b| format!("{:.1}", mb(b))),
            self.open_fds
                .map_or_else(|| "-".to_owned(), |n| n.to_string()),
            mb(self.broker_log_bytes),
            mb(self.resolver_store_bytes),
            self.resolver_rows
                .map_or_else(|| "-".to_owned(), |r| r.history.to_string()),
            self.broker.partitions,
            self.broker.sessions_held,
            self.broker.sessions_with_state,
            self.broker.deadlines,
        )
    }
}

/// A whole soak.
#[derive(Debug, Clone)]
pub struct SoakReport {
    /// The rate offered, events/s.
    pub rate: f64,
    /// One per window, in order.
    pub windows: Vec<SoakWindow>,
}

impl SoakReport {
    /// The resident set's slope over the second half of the run, in MB per
    /// ten minutes (least squares); `None` with fewer than two readings.
    pub fn rss_slope_mb_per_10min(&self) -> Option<f64> {
        let half = self.windows.last()?.at / 2;
        let points: Vec<(f64, f64)> = self
            .windows
            .iter()
            .filter(|w| w.at >= half)
            .filter_map(|w| Some((w.at.as_secs_f64(), w.rss_bytes? as f64 / 1e6)))
            .collect();
        slope(&points).map(|per_second| per_second * 600.0)
    }

    /// The median of the windows' p99 in the last tenth of the run (at
    /// least one window) over that in the first: how much the tail grew.
    /// The median, so one stalled minute (a shared disk's) does not stand
    /// for its whole tenth.
    pub fn p99_growth(&self) -> Option<f64> {
        let tenth = (self.windows.len() / 10).max(1);
        let median_p99 = |windows: &[SoakWindow]| {
            let mut p99: Vec<Duration> = windows.iter().map(|w| w.completed.p99).collect();
            p99.sort_unstable();
            p99.get(p99.len() / 2)
                .copied()
                .unwrap_or_default()
                .as_secs_f64()
        };
        let first = median_p99(self.windows.get(..tenth)?);
        let last = median_p99(self.windows.get(self.windows.len() - tenth..)?);
        (first > 0.0).then(|| last / first)
    }
}

/// The least-squares slope of `points` (x, y), `None` with fewer than two
/// distinct x.
fn slope(points: &[(f64, f64)]) -> Option<f64> {
    let n = points.len() as f64;
    if points.len() < 2 {
        return None;
    }
    let mean_x = points.iter().map(|p| p.0).sum::<f64>() / n;
    let mean_y = points.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = points.iter().map(|p| (p.0 - mean_x).powi(2)).sum();
    let sxy: f64 = points.iter().map(|p| (p.0 - mean_x) * (p.1 - mean_y)).sum();
    (sxx > 0.0).then(|| sxy / sxx)
}

/// Runs the open loop at `rate` for `soak.duration`, reading the stack in
/// `dir` every `soak.every`; `line` hears each window as it ends.
#[expect(
    clippy::too_many_arguments,
    reason = "the soak reads the rig's parts, spelled out"
)]
pub(crate) async fn run(
    broker: &Arc<Broker>,
    store: &dyn ResolverStore,
    tracker: &Arc<Tracker>,
    source: &Arc<EventSource>,
    dir: &Path,
    rate: f64,
    soak: SoakOptions,
    line: &dyn Fn(&SoakWindow),
) -> anyhow::Result<SoakReport> {
    let events = (rate * soak.duration.as_secs_f64()).ceil() as u64;
    let start = Instant::now();
    let mut open_loop = std::pin::pin!(load::open_loop(
        broker, tracker, source, "soak", events, rate
    ));
    let mut windows = Vec::new();
    let mut window_start = Instant::now();
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + soak.every, soak.every);
    let ended = loop {
        tokio::select! {
            ended = &mut open_loop => break ended,
            _ = tick.tick() => {
                let window = read(broker, store, tracker, dir, start, window_start);
                window_start = Instant::now();
                line(&window);
                windows.push(window);
            }
        }
    };
    ended.context("the soak's open loop")?;
    // The drain after the last event is due: a window of its own only when
    // it is long enough for its rate to mean something.
    if window_start.elapsed() >= soak.every / 2 || windows.is_empty() {
        let last = read(broker, store, tracker, dir, start, window_start);
        line(&last);
        windows.push(last);
    }
    Ok(SoakReport { rate, windows })
}

fn read(
    broker: &Broker,
    store: &dyn ResolverStore,
    tracker: &Tracker,
    dir: &Path,
    start: Instant,
    window_start: Instant,
) -> SoakWindow {
    let samples = tracker.take();
    let ended = samples.completed.len() + samples.skipped.len() + samples.lost.len();
    let seconds = window_start.elapsed().as_secs_f64();
    SoakWindow {
        at: start.elapsed(),
        throughput: if seconds > 0.0 {
            ended as f64 / seconds
        } else {
            0.0
        },
        completed: Percentiles::of(samples.completed),
        rss_bytes: rss_bytes(),
        open_fds: std::fs::read_dir("/proc/self/fd").ok().map(Iterator::count),
        broker_log_bytes: bytes_under(&dir.join("broker")),
        resolver_store_bytes: ["resolver.db", "resolver.db-wal", "resolver.db-shm"]
            .iter()
            .filter_map(|name| std::fs::metadata(dir.join(name)).ok())
            .map(|m| m.len())
            .sum(),
        // A failed read leaves the column empty rather than ending the soak.
        resolver_rows: store.rows_written().ok().flatten(),
        broker: broker.footprint(),
    }
}

/// The resident set, from `/proc/self/status` (Linux).
fn rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// The bytes of the files under `dir` (recursively); 0 when unreadable.
fn bytes_under(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .filter_map(Result::ok)
        .map(|entry| match entry.metadata() {
            Ok(m) if m.is_dir() => bytes_under(&entry.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;

    fn window(minute: u64, rss_mb: u64, p99_ms: u64) -> SoakWindow {
        SoakWindow {
            at: Duration::from_secs(60 * minute),
            throughput: 1000.0,
            completed: Percentiles {
                count: 1,
                p50: Duration::from_millis(1),
                p99: Duration::from_millis(p99_ms),
                max: Duration::from_millis(p99_ms),
            },
            rss_bytes: Some(rss_mb * 1_000_000),
            open_fds: Some(20),
            broker_log_bytes: 0,
            resolver_store_bytes: 0,
            resolver_rows: None,
            broker: Footprint::default(),
        }
    }

    #[test]
    fn the_slope_reads_the_second_half_only() {
        // Growing 10 MB a minute for the first half, flat after.
        let windows: Vec<_> = (1..=10)
            .map(|m| window(m, 100 + 10 * m.min(5), 10))
            .collect();
        let report = SoakReport {
            rate: 1000.0,
            windows,
        };
        assert!(report.rss_slope_mb_per_10min().unwrap().abs() < 1e-9);
        let growing: Vec<_> = (1..=10).map(|m| window(m, 100 + m, 10)).collect();
        let report = SoakReport {
            rate: 1000.0,
            windows: growing,
        };
        let slope = report.rss_slope_mb_per_10min().unwrap();
        assert!((slope - 10.0).abs() < 1e-6, "{slope}");
    }

    #[test]
    fn p99_growth_compares_the_last_tenth_with_the_first() {
        // One stalled minute in the first tenth does not set it.
        let windows: Vec<_> = (1..=30)
            .map(|m| {
                let p99 = match m {
                    2 => 400,
                    28.. => 30,
                    _ => 10,
                };
                window(m, 100, p99)
            })
            .collect();
        let report = SoakReport {
            rate: 1000.0,
            windows,
        };
        assert!((report.p99_growth().unwrap() - 3.0).abs() < 1e-9);
    }

    #[test]
    fn the_process_reads_on_linux() {
        if cfg!(target_os = "linux") {
            assert!(rss_bytes().unwrap() > 0);
        }
    }
}
