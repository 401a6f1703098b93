//! What a bench run reports, and how it prints: one line per phase with
//! the figures side by side, then the wasm/native ratios.

use std::fmt;
use std::time::Duration;

use super::load::Samples;
use super::rig::Rig;
use super::soak::{SoakReport, SoakWindow};
use super::stats::{Ms, Percentiles, TailBursts, median_ms, process_cpu};
use super::threads::{self, BusiestThread, ThreadCpu, ThreadShare};
use super::{BenchOptions, Mode};

/// One measured phase.
#[derive(Debug, Clone)]
pub struct PhaseReport {
    /// The open-loop rate offered, events/s (`None`: closed loop).
    pub offered_rate: Option<f64>,
    /// Events that ended (completed, skipped, blocked, parked or lost).
    pub ended: usize,
    /// From the first event published to the last status committed.
    pub elapsed: Duration,
    /// `ended / elapsed`.
    pub throughput: f64,
    /// End-to-end latency of the completed events.
    pub completed: Percentiles,
    /// How the completed events at or above the p99 spread over the phase.
    pub tail: TailBursts,
    /// End-to-end latency of failed events, to their skip.
    pub skipped: Percentiles,
    /// Failed events left blocking their session.
    pub blocked: usize,
    /// Events parked behind a blocked one.
    pub parked: usize,
    /// Events that ended dead-lettered or unsupported (a broken setup).
    pub lost: usize,
    /// Median enqueue-to-handler time the engine reported, ms.
    pub queue_p50_ms: Option<i64>,
    /// Median handler-entry-to-response time the engine reported, ms.
    pub processing_p50_ms: Option<i64>,
    /// Mean time inside one handler call.
    pub handler_mean: Duration,
    /// Process CPU time per ended event (Linux).
    pub cpu_per_event: Option<Duration>,
    /// That CPU by group of threads, largest first (Linux).
    pub threads: Vec<ThreadShare>,
    /// The busiest thread with one job, whose share caps the throughput.
    pub busiest_thread: Option<BusiestThread>,
}

impl PhaseReport {
    /// Whether an open-loop phase kept up with the rate offered (ended at
    /// 95 % of it or more); `None` for the closed loop.
    pub fn kept_up(&self) -> Option<bool> {
        self.offered_rate.map(|rate| self.throughput >= 0.95 * rate)
    }
}

/// The two phases of one mode.
#[derive(Debug, Clone)]
pub struct ModeReport {
    /// Wasm or native.
    pub mode: Mode,
    /// Closed loop: the throughput sustained.
    pub closed: PhaseReport,
    /// Open loop at half that (or the rate asked).
    pub open: PhaseReport,
    /// The soak at the open loop's rate, when one was asked for.
    pub soak: Option<SoakReport>,
}

/// A whole run.
#[derive(Debug, Clone)]
pub struct BenchReport {
    /// What ran.
    pub options: BenchOptions,
    /// The machine it ran on, for the record.
    pub machine: String,
    /// One per mode, in the order run.
    pub modes: Vec<ModeReport>,
}

/// The counters at the start of a phase.
pub(crate) struct Probe {
    cpu: Option<Duration>,
    threads: ThreadCpu,
    handler: (u64, u64),
}

impl Probe {
    pub(crate) fn now(rig: &Rig) -> Probe {
        Probe {
            cpu: process_cpu(),
            threads: threads::snapshot(),
            handler: rig.clock.read(),
        }
    }

    pub(crate) fn finish(
        self,
        rig: &Rig,
        samples: Samples,
        offered_rate: Option<f64>,
    ) -> PhaseReport {
        let ended = samples.completed.len()
            + samples.skipped.len()
            + samples.blocked
            + samples.parked
            + samples.lost.len();
        let elapsed = match (samples.first_due, samples.last_end) {
            (Some(first), Some(last)) => last.saturating_duration_since(first),
            _ => Duration::ZERO,
        };
        let throughput = if elapsed.is_zero() {
            0.0
        } else {
            ended as f64 / elapsed.as_secs_f64()
        };
        let (calls, nanos) = rig.clock.read();
        let (calls, nanos) = (calls - self.handler.0, nanos - self.handler.1);
        let handler_mean = Duration::from_nanos(nanos.checked_div(calls).unwrap_or(0));
        let cpu_per_event = match (self.cpu, process_cpu(), u32::try_from(ended)) {
            (Some(before), Some(after), Ok(n)) if n > 0 => Some((after - before) / n),
            _ => None,
        };
        let (threads, busiest_thread) = threads::split(
            &self.threads,
            &threads::snapshot(),
            u32::try_from(ended).unwrap_or(u32::MAX),
        );
        for (key, status) in samples.lost.iter().take(3) {
            tracing::warn!(%key, status = status.as_str(), "a bench event ended neither completed nor failed");
        }
        let due_and_latency: Vec<(Duration, Duration)> = samples
            .completed_due
            .iter()
            .copied()
            .zip(samples.completed.iter().copied())
            .collect();
        let completed = Percentiles::of(samples.completed);
        PhaseReport {
            offered_rate,
            ended,
            elapsed,
            throughput,
            completed,
            tail: TailBursts::of(&due_and_latency, completed.p99),
            skipped: Percentiles::of(samples.skipped),
            blocked: samples.blocked,
            parked: samples.parked,
            lost: samples.lost.len(),
            queue_p50_ms: median_ms(samples.queue_ms),
            processing_p50_ms: median_ms(samples.processing_ms),
            handler_mean,
            cpu_per_event,
            threads,
            busiest_thread,
        }
    }
}

/// CPU count, model and load, as far as the system tells.
pub(crate) fn machine() -> String {
    let cpus = std::thread::available_parallelism().map_or(0, std::num::NonZero::get);
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".to_owned());
    let load = std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "?".to_owned());
    format!("{cpus} CPUs ({model}), load average {load} at the start")
}

fn opt_ms(value: Option<i64>) -> String {
    value.map_or_else(|| "-".to_owned(), |v| v.to_string())
}

fn write_phase(f: &mut fmt::Formatter<'_>, mode: Mode, phase: &PhaseReport) -> fmt::Result {
    let label = match phase.offered_rate {
        None => "closed loop".to_owned(),
        Some(rate) => format!("open @ {rate:.0}/s"),
    };
    let cpu = phase.cpu_per_event.map_or_else(
        || "-".to_owned(),
        |c| format!("{:.0}", c.as_secs_f64() * 1e6),
    );
    let kept_up = match phase.kept_up() {
        None => "",
        Some(true) => "  kept up",
        Some(false) => "  FELL BEHIND",
    };
    writeln!(
        f,
        "{:<7}{label:<18}{:>10.0}{:>9}{:>9}{:>9}{:>9}{:>12.1}{:>8}{:>8}{kept_up}",
        mode.name(),
        phase.throughput,
        Ms(phase.completed.p50).to_string(),
        Ms(phase.completed.p99).to_string(),
        Ms(phase.completed.max).to_string(),
        cpu,
        phase.handler_mean.as_secs_f64() * 1e6,
        opt_ms(phase.queue_p50_ms),
        opt_ms(phase.processing_p50_ms),
    )?;
    // Where the closed loop's CPU goes, and the thread that caps it.
    if phase.offered_rate.is_none() && !phase.threads.is_empty() {
        let shares: Vec<String> = phase
            .threads
            .iter()
            // A group under half a µs would print as 0.
            .filter(|t| t.per_event >= Duration::from_nanos(500))
            .map(|t| format!("{} {:.0}", t.group, t.per_event.as_secs_f64() * 1e6))
            .collect();
        write!(f, "{:<25}cpu µs by thread: {}", "", shares.join(", "))?;
        match phase
            .busiest_thread
            .as_ref()
            .and_then(|b| Some((b, b.saturates_at()?)))
        {
            Some((busiest, at)) => writeln!(
                f,
                "; {} alone would be busy all the time at ~{:.0} events/s",
                busiest.name, at
            )?,
            None => writeln!(f)?,
        }
    }
    // Where the open loop's p99 comes from: the target is set there.
    if phase.offered_rate.is_some() && phase.tail.events > 0 {
        writeln!(
            f,
            "{:<25}slowest 1 %: {} events, due in {} burst(s); the largest {} events within {} ms",
            "",
            phase.tail.events,
            phase.tail.bursts,
            phase.tail.largest,
            phase.tail.largest_span.as_millis(),
        )?;
    }
    if phase.skipped.count + phase.blocked + phase.parked + phase.lost > 0 {
        writeln!(
            f,
            "{:<25}failed then skipped: {} (p50 {} ms, p99 {} ms); left blocking: {}; parked behind them: {}; dead-lettered/unsupported: {}",
            "",
            phase.skipped.count,
            Ms(phase.skipped.p50),
            Ms(phase.skipped.p99),
            phase.blocked,
            phase.parked,
            phase.lost,
        )?;
    }
    Ok(())
}

impl fmt::Display for BenchReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let o = &self.options;
        writeln!(
            f,
            "nimbus bench: handler {}, {} sessions, {}-byte payloads, durability {}, {} events per phase (warm-up {}), window {}/session, failure rate {}{}",
            match &o.handler {
                super::HandlerChoice::Noop => "noop".to_owned(),
                super::HandlerChoice::Orders => "orders".to_owned(),
                super::HandlerChoice::Component(p) => p.display().to_string(),
            },
            o.sessions,
            o.payload_bytes,
            match o.durability {
                nimbus_broker::Durability::Fsync => "fsync",
                nimbus_broker::Durability::Os => "os",
            },
            o.events,
            o.warmup,
            o.window,
            o.failure_rate,
            match o.resolver_store {
                super::ResolverStoreChoice::Sqlite => "",
                super::ResolverStoreChoice::Discard =>
                    ", Resolver store DISCARDED (no audit trail written)",
            },
        )?;
        writeln!(f, "machine: {}", self.machine)?;
        writeln!(
            f,
            "latency: publish -> status committed by the Resolver (completed events only)\n"
        )?;
        writeln!(
            f,
            "{:<7}{:<18}{:>10}{:>9}{:>9}{:>9}{:>9}{:>12}{:>8}{:>8}",
            "run",
            "phase",
            "events/s",
            "p50 ms",
            "p99 ms",
            "max ms",
            "cpu µs",
            "handler µs",
            "queue",
            "proc"
        )?;
        for m in &self.modes {
            write_phase(f, m.mode, &m.closed)?;
            write_phase(f, m.mode, &m.open)?;
        }
        writeln!(
            f,
            "\ncpu µs: process CPU per event; handler µs: mean wall time in the handler call (on the session's task, so time spent yielded to other tasks counts); queue/proc: median ms the engine reports from enqueue to handler entry / handler entry to response"
        )?;
        let wasm = self.modes.iter().find(|m| m.mode == Mode::Wasm);
        let native = self.modes.iter().find(|m| m.mode == Mode::Native);
        for m in &self.modes {
            if let Some(soak) = &m.soak {
                write_soak(f, m.mode, soak)?;
            }
        }
        if let (Some(w), Some(n)) = (wasm, native) {
            let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { f64::NAN };
            writeln!(
                f,
                "wasm / native: throughput {:.2}x, open-loop p99 {:.2}x, handler time {:.1}x, CPU per event {:.2}x",
                ratio(w.closed.throughput, n.closed.throughput),
                ratio(
                    w.open.completed.p99.as_secs_f64(),
                    n.open.completed.p99.as_secs_f64()
                ),
                ratio(
                    w.closed.handler_mean.as_secs_f64(),
                    n.closed.handler_mean.as_secs_f64()
                ),
                ratio(
                    w.closed.cpu_per_event.map_or(0.0, |c| c.as_secs_f64()),
                    n.closed.cpu_per_event.map_or(0.0, |c| c.as_secs_f64())
                ),
            )?;
        }
        Ok(())
    }
}

fn write_soak(f: &mut fmt::Formatter<'_>, mode: Mode, soak: &SoakReport) -> fmt::Result {
    writeln!(f, "\n{} soak at {:.0} events/s:", mode.name(), soak.rate)?;
    writeln!(f, "{}", SoakWindow::HEADER)?;
    for window in &soak.windows {
        writeln!(f, "{}", window.row())?;
    }
    let slope = soak
        .rss_slope_mb_per_10min()
        .map_or_else(|| "-".to_owned(), |s| format!("{s:+.2}"));
    let growth = soak
        .p99_growth()
        .map_or_else(|| "-".to_owned(), |g| format!("{g:.2}x"));
    writeln!(
        f,
        "RSS slope over the second half: {slope} MB per 10 minutes; median window p99 of the last tenth over the first: {growth}"
    )?;
    writeln!(
        f,
        "partitions: session partitions the broker keeps in memory; held: sessions locked now; state: sessions with a state; deadlines: lock, TTL and schedule deadlines waiting"
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;

    fn phase(offered_rate: Option<f64>) -> PhaseReport {
        let latency = Percentiles {
            count: 1000,
            p50: Duration::from_micros(12_340),
            p99: Duration::from_micros(123_450),
            max: Duration::from_micros(1_234_560),
        };
        PhaseReport {
            offered_rate,
            ended: 1000,
            elapsed: Duration::from_millis(100),
            throughput: 12_345.0,
            completed: latency,
            tail: TailBursts {
                events: 10,
                bursts: 2,
                largest: 8,
                largest_span: Duration::from_millis(40),
            },
            skipped: Percentiles::default(),
            blocked: 0,
            parked: 0,
            lost: 0,
            queue_p50_ms: Some(1234),
            processing_p50_ms: Some(1234),
            handler_mean: Duration::from_nanos(123_456_700),
            cpu_per_event: Some(Duration::from_micros(123_456)),
            threads: Vec::new(),
            busiest_thread: None,
        }
    }

    /// Under the closed loop, the CPU by thread and the throughput at which
    /// the busiest thread with a job of its own would be saturated.
    #[test]
    fn the_closed_loop_says_where_its_cpu_went_and_which_thread_caps_it() {
        let closed = PhaseReport {
            threads: vec![
                ThreadShare {
                    group: "tokio workers",
                    per_event: Duration::from_micros(72),
                },
                ThreadShare {
                    group: "Resolver recorder",
                    per_event: Duration::from_micros(40),
                },
                ThreadShare {
                    group: "other",
                    per_event: Duration::from_nanos(400),
                },
            ],
            busiest_thread: Some(BusiestThread {
                name: "nimbus-recorder".into(),
                per_event: Duration::from_micros(40),
            }),
            ..phase(None)
        };
        let report = BenchReport {
            options: BenchOptions::default(),
            machine: "test".into(),
            modes: vec![ModeReport {
                mode: Mode::Wasm,
                closed,
                open: phase(Some(6172.0)),
                soak: None,
            }],
        };
        let text = report.to_string();
        let lines: Vec<&str> = text.lines().collect();
        let closed_row = lines
            .iter()
            .position(|l| l.starts_with("wasm   closed loop"))
            .unwrap();
        assert_eq!(
            lines[closed_row + 1].trim_start(),
            "cpu µs by thread: tokio workers 72, Resolver recorder 40; \
             nimbus-recorder alone would be busy all the time at ~25000 events/s"
        );
        assert!(
            lines[closed_row + 2].starts_with("wasm   open @ 6172/s"),
            "{text}"
        );
    }

    /// Where each whitespace-separated field of `line` ends, in characters
    /// (labels such as "p50 ms" hold one space, so the header is split on
    /// runs of two or more, after its first column).
    fn field_ends(line: &str, separator: &str) -> Vec<usize> {
        let mut ends = Vec::new();
        let mut at = 0;
        for field in line.split(separator) {
            let width = field.chars().count();
            if !field.trim().is_empty() {
                ends.push(at + width);
            }
            at += width + separator.chars().count();
        }
        ends
    }

    /// Wide figures, in every column at once, still leave a space between
    /// columns, and each figure ends under the end of its header label.
    #[test]
    fn every_figure_sits_under_its_header_with_a_space_between_columns() {
        let report = BenchReport {
            options: BenchOptions::default(),
            machine: "test".into(),
            modes: vec![ModeReport {
                mode: Mode::Native,
                closed: phase(None),
                open: phase(Some(6172.0)),
                soak: None,
            }],
        };
        let text = report.to_string();
        let lines: Vec<&str> = text.lines().collect();
        let header = lines.iter().position(|l| l.starts_with("run ")).unwrap();
        let header_line = lines[header];
        // The right-aligned columns are the ones after "run" and "phase".
        let header_ends = field_ends(header_line, "  ");
        let numeric_header_ends = &header_ends[header_ends.len() - 8..];
        for row in &lines[header + 1..header + 3] {
            let label_end = "native ".len() + 18;
            let figures = &row[label_end..];
            let ends: Vec<usize> = field_ends(figures.trim_end_matches("  kept up"), " ")
                .into_iter()
                .map(|end| end + label_end)
                .collect();
            assert_eq!(
                ends, numeric_header_ends,
                "header:\n{header_line}\nrow:\n{row}"
            );
        }
        for label in ["cpu µs", "handler µs", "queue", "proc"] {
            assert!(
                header_line.contains(&format!(" {label}")),
                "{label:?} runs into the column before it: {header_line}"
            );
        }
    }
}
