//! Throughput, latency and outcomes, as the Resolver records them: it sees
//! every message of every event, so its store, wrapped in an
//! [`ObservedStore`](crate::observed_store::ObservedStore), reports each
//! status it applies to [`Metrics`], which counts it and times each response
//! the engine sent. `GET /metrics` renders these with the gauges it reads
//! from the broker and the registry at scrape time, in the Prometheus text
//! format (written by hand: [`Text`]).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use nimbus_resolver::{MessageKind, Observation, Recorded, Status};

use crate::observed_store::RecordObserver;

/// Upper bounds of the latency histograms' buckets, in seconds (`+Inf`
/// follows).
pub const BUCKETS: [f64; 9] = [0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0];

/// A histogram with the fixed [`BUCKETS`].
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Histogram {
    /// Observations per bucket, not cumulative; the last is `+Inf`'s own.
    buckets: [u64; BUCKETS.len() + 1],
    sum: f64,
    count: u64,
}

impl Histogram {
    /// Adds one observation of `seconds`.
    pub fn observe(&mut self, seconds: f64) {
        let i = BUCKETS
            .iter()
            .position(|bound| seconds <= *bound)
            .unwrap_or(BUCKETS.len());
        self.buckets[i] += 1;
        self.sum += seconds;
        self.count += 1;
    }

    /// How many observations so far.
    pub fn count(&self) -> u64 {
        self.count
    }
}

/// What the Resolver applied at one endpoint.
#[derive(Debug, Default, Clone)]
struct EndpointStats {
    /// Applied status writes, indexed like [`Status::ALL`].
    statuses: [u64; Status::ALL.len()],
    processing: Histogram,
    queue_wait: Histogram,
}

/// The host's counters and histograms; shared by the Resolver's consumer
/// (through an [`ObservedStore`](crate::observed_store::ObservedStore)) and `GET /metrics`.
#[derive(Debug, Default)]
pub struct Metrics {
    endpoints: Mutex<BTreeMap<String, EndpointStats>>,
    refused_writes: AtomicU64,
}

impl Metrics {
    /// Counts what recording `observation` did.
    fn observe(&self, observation: &Observation, recorded: &Recorded) {
        let status = match recorded {
            Recorded::Applied { status } => *status,
            Recorded::Refused { .. } => {
                self.refused_writes.fetch_add(1, Ordering::Relaxed);
                return;
            }
            Recorded::AlreadyRecorded => return,
        };
        let index = Status::ALL
            .iter()
            .position(|s| *s == status)
            .unwrap_or_default();
        let seconds = |ms: Option<i64>| ms.map(|ms| ms.max(0) as f64 / 1000.0);
        // Only an outcome of a handler run times one: a parking, a skip or
        // an unsupported event carries times too, and under a blocked
        // session its re-parkings would outnumber the runs many times.
        let handler_ran = matches!(
            observation.kind,
            MessageKind::ResolutionResponse
                | MessageKind::ErrorResponse
                | MessageKind::PendingHandoffResponse
        );
        let (processing, queue_wait) = if handler_ran {
            (
                seconds(observation.processing_time_ms),
                seconds(observation.queue_time_ms),
            )
        } else {
            (None, None)
        };
        // A poisoned lock only means a panic mid-update of plain counters.
        let mut endpoints = self
            .endpoints
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let stats = match endpoints.get_mut(observation.endpoint.as_str()) {
            Some(stats) => stats,
            None => endpoints.entry(observation.endpoint.clone()).or_default(),
        };
        stats.statuses[index] += 1;
        if let Some(s) = processing {
            stats.processing.observe(s);
        }
        if let Some(s) = queue_wait {
            stats.queue_wait.observe(s);
        }
    }

    /// Renders the counters and histograms into `text`.
    pub fn render(&self, text: &mut Text) {
        let endpoints = self
            .endpoints
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        text.family(
            "nimbus_events_recorded_total",
            "Status writes the Resolver applied, by endpoint and the status written \
             (Pending: an event received).",
            "counter",
        );
        for (endpoint, stats) in &endpoints {
            for (status, n) in Status::ALL.iter().zip(stats.statuses) {
                if n > 0 {
                    text.sample(
                        "nimbus_events_recorded_total",
                        &[("endpoint", endpoint), ("status", status.as_str())],
                        n,
                    );
                }
            }
        }
        text.family(
            "nimbus_handler_processing_seconds",
            "Handler entry to response, as the engine reported it.",
            "histogram",
        );
        for (endpoint, stats) in &endpoints {
            text.histogram(
                "nimbus_handler_processing_seconds",
                &[("endpoint", endpoint)],
                &stats.processing,
            );
        }
        text.family(
            "nimbus_queue_wait_seconds",
            "Enqueue to handler entry, as the engine reported it.",
            "histogram",
        );
        for (endpoint, stats) in &endpoints {
            text.histogram(
                "nimbus_queue_wait_seconds",
                &[("endpoint", endpoint)],
                &stats.queue_wait,
            );
        }
        text.family(
            "nimbus_resolver_refused_writes_total",
            "Status writes the Resolver refused as stale.",
            "counter",
        );
        text.sample(
            "nimbus_resolver_refused_writes_total",
            &[],
            self.refused_writes.load(Ordering::Relaxed),
        );
    }
}

/// `/metrics` counts what the Resolver's store applied.
impl RecordObserver for Arc<Metrics> {
    fn observe(&self, observation: &Observation, recorded: &Recorded) {
        Metrics::observe(self, observation, recorded);
    }
}

/// A Prometheus text-format (0.0.4) document being written.
#[derive(Debug, Default)]
pub struct Text {
    out: String,
}

/// The `Content-Type` of a [`Text`] document.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

impl Text {
    /// Starts metric `name`'s family: its `# HELP` and `# TYPE` lines.
    pub fn family(&mut self, name: &str, help: &str, kind: &str) {
        let help = help.replace('\\', r"\\").replace('\n', r"\n");
        let _ = writeln!(self.out, "# HELP {name} {help}");
        let _ = writeln!(self.out, "# TYPE {name} {kind}");
    }

    /// One sample line.
    pub fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: impl std::fmt::Display) {
        self.out.push_str(name);
        if !labels.is_empty() {
            self.out.push('{');
            for (i, (label, value)) in labels.iter().enumerate() {
                if i > 0 {
                    self.out.push(',');
                }
                self.out.push_str(label);
                self.out.push_str("=\"");
                escape_into(&mut self.out, value);
                self.out.push('"');
            }
            self.out.push('}');
        }
        let _ = writeln!(self.out, " {value}");
    }

    /// A histogram's `_bucket` (cumulative, `le`), `_sum` and `_count`
    /// lines.
    pub fn histogram(&mut self, name: &str, labels: &[(&str, &str)], histogram: &Histogram) {
        let bucket = format!("{name}_bucket");
        let mut with_le: Vec<(&str, &str)> = labels.to_vec();
        let mut cumulative = 0;
        let bounds: Vec<String> = BUCKETS
            .iter()
            .map(f64::to_string)
            .chain(std::iter::once("+Inf".to_owned()))
            .collect();
        for (bound, n) in bounds.iter().zip(histogram.buckets) {
            cumulative += n;
            with_le.truncate(labels.len());
            with_le.push(("le", bound));
            self.sample(&bucket, &with_le, cumulative);
        }
        self.sample(&format!("{name}_sum"), labels, histogram.sum);
        self.sample(&format!("{name}_count"), labels, histogram.count);
    }

    /// The document.
    pub fn finish(self) -> String {
        self.out
    }
}

/// A label value escaped: backslash, double quote and newline.
fn escape_into(out: &mut String, value: &str) {
    for c in value.chars() {
        match c {
            '\\' => out.push_str(r"\\"),
            '"' => out.push_str(r#"\""#),
            '\n' => out.push_str(r"\n"),
            c => out.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_are_escaped() {
        let mut text = Text::default();
        text.sample("m", &[("a", "x\\y\"z\nw"), ("b", "plain")], 3);
        assert_eq!(text.finish(), "m{a=\"x\\\\y\\\"z\\nw\",b=\"plain\"} 3\n");
    }

    #[test]
    fn families_have_help_and_type() {
        let mut text = Text::default();
        text.family("m_total", "Counts\nthings.", "counter");
        text.sample("m_total", &[], 0);
        assert_eq!(
            text.finish(),
            "# HELP m_total Counts\\nthings.\n# TYPE m_total counter\nm_total 0\n"
        );
    }

    #[test]
    fn histogram_buckets_are_cumulative_with_sum_and_count() {
        let mut h = Histogram::default();
        for s in [0.0005, 0.003, 0.003, 0.2, 20.0] {
            h.observe(s);
        }
        let mut text = Text::default();
        text.histogram("h_seconds", &[("endpoint", "e")], &h);
        let out = text.finish();
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(
            lines,
            [
                "h_seconds_bucket{endpoint=\"e\",le=\"0.001\"} 1",
                "h_seconds_bucket{endpoint=\"e\",le=\"0.005\"} 3",
                "h_seconds_bucket{endpoint=\"e\",le=\"0.01\"} 3",
                "h_seconds_bucket{endpoint=\"e\",le=\"0.05\"} 3",
                "h_seconds_bucket{endpoint=\"e\",le=\"0.1\"} 3",
                "h_seconds_bucket{endpoint=\"e\",le=\"0.5\"} 4",
                "h_seconds_bucket{endpoint=\"e\",le=\"1\"} 4",
                "h_seconds_bucket{endpoint=\"e\",le=\"5\"} 4",
                "h_seconds_bucket{endpoint=\"e\",le=\"10\"} 4",
                "h_seconds_bucket{endpoint=\"e\",le=\"+Inf\"} 5",
                "h_seconds_sum{endpoint=\"e\"} 20.2065",
                "h_seconds_count{endpoint=\"e\"} 5",
            ]
        );
    }

    fn observation(endpoint: &str, processing_ms: Option<i64>) -> Observation {
        let mut observation = Observation::new(endpoint, "e-1", MessageKind::ResolutionResponse, 0);
        observation.processing_time_ms = processing_ms;
        observation.queue_time_ms = processing_ms;
        observation
    }

    #[test]
    fn applied_statuses_are_counted_and_timed_per_endpoint() {
        let metrics = Metrics::default();
        let completed = Recorded::Applied {
            status: Status::Completed,
        };
        metrics.observe(&observation("billing", Some(2)), &completed);
        metrics.observe(&observation("billing", None), &completed);
        metrics.observe(&observation("billing", Some(2)), &Recorded::AlreadyRecorded);
        // A parking carries times but is no handler run: counted, not timed.
        let mut parked = observation("billing", Some(2));
        parked.kind = MessageKind::DeferralResponse;
        metrics.observe(
            &parked,
            &Recorded::Applied {
                status: Status::Deferred,
            },
        );
        metrics.observe(
            &observation("erp", Some(2)),
            &Recorded::Refused {
                current: Status::Completed,
                reason: "stale".to_owned(),
            },
        );
        let mut text = Text::default();
        metrics.render(&mut text);
        let out = text.finish();
        assert!(
            out.contains(
                "nimbus_events_recorded_total{endpoint=\"billing\",status=\"Completed\"} 2\n"
            ),
            "{out}"
        );
        assert!(
            out.contains("nimbus_handler_processing_seconds_count{endpoint=\"billing\"} 1\n"),
            "{out}"
        );
        assert!(
            out.contains("nimbus_queue_wait_seconds_bucket{endpoint=\"billing\",le=\"0.005\"} 1\n"),
            "{out}"
        );
        assert!(!out.contains("endpoint=\"erp\""), "{out}");
        assert!(
            out.contains("nimbus_resolver_refused_writes_total 1\n"),
            "{out}"
        );
    }
}
