//! The load generator: publishes bench events through the producer topic
//! (as an external publisher would) and hears back from the Resolver probe.
//!
//! Two shapes, as `pgbench` and `redis-benchmark` offer: **closed loop**
//! (every session keeps a bounded number of events in flight and publishes
//! the next when one settles: the throughput the stack sustains) and
//! **open loop** at a fixed rate (events are due on a schedule whatever the
//! stack does, and latency is measured from when each was due, so a stack
//! that falls behind shows it instead of slowing the generator down).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use nimbus_broker::Broker;
use nimbus_manager::Manager;
use nimbus_resolver::Status;
use nimbus_transport::{Message, Transport as _};
use nimbus_wire::build::{Publish, original_publish};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinSet;

use super::rig::ENDPOINT;
use super::watch::Settled;
use crate::DEFAULT_PRODUCER;

/// How long the bench waits without a single event settling before it gives
/// up and says so (it never hangs).
pub(crate) const STALL: Duration = Duration::from_secs(30);

/// What becomes of an event whose handler fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnFailure {
    /// The bench skips it through the Manager, as an operator would; its
    /// session goes on.
    Skip,
    /// It stays failed and blocks its session; later events of the session
    /// are parked.
    Block,
}

/// How an event ended, for the bench.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum End {
    Completed,
    /// Failed, then skipped through the Manager.
    Skipped,
    /// Failed and left blocking its session.
    Blocked,
    /// Parked behind a blocked event.
    Parked,
    /// Dead-lettered or unsupported: the bench's load is wrong.
    Lost(Status),
}

struct Pending {
    due: Instant,
    session: usize,
    done: Option<oneshot::Sender<End>>,
}

/// The samples of one phase.
#[derive(Debug, Default)]
pub(crate) struct Samples {
    pub(crate) completed: Vec<Duration>,
    /// When each completed event was due, after the phase's first, in the
    /// order of `completed`.
    pub(crate) completed_due: Vec<Duration>,
    pub(crate) skipped: Vec<Duration>,
    pub(crate) blocked: usize,
    pub(crate) parked: usize,
    pub(crate) lost: Vec<(String, Status)>,
    pub(crate) queue_ms: Vec<i64>,
    pub(crate) processing_ms: Vec<i64>,
    pub(crate) first_due: Option<Instant>,
    pub(crate) last_end: Option<Instant>,
}

/// Shared between the generator and the collector.
pub(crate) struct Tracker {
    pending: Mutex<HashMap<String, Pending>>,
    samples: Mutex<Samples>,
    blocked_sessions: Mutex<HashSet<usize>>,
    on_failure: OnFailure,
}

impl Tracker {
    pub(crate) fn new(on_failure: OnFailure) -> Arc<Tracker> {
        Arc::new(Tracker {
            pending: Mutex::new(HashMap::new()),
            samples: Mutex::new(Samples::default()),
            blocked_sessions: Mutex::new(HashSet::new()),
            on_failure,
        })
    }

    fn expect(&self, key: String, due: Instant, session: usize) -> oneshot::Receiver<End> {
        let (tx, rx) = oneshot::channel();
        lock(&self.pending).insert(
            key,
            Pending {
                due,
                session,
                done: Some(tx),
            },
        );
        let mut samples = lock(&self.samples);
        samples.first_due.get_or_insert(due);
        rx
    }

    fn in_flight(&self) -> usize {
        lock(&self.pending).len()
    }

    fn is_blocked(&self, session: usize) -> bool {
        lock(&self.blocked_sessions).contains(&session)
    }

    /// Ends the phase: its samples, and a fresh set for the next.
    pub(crate) fn take(&self) -> Samples {
        lock(&self.blocked_sessions).clear();
        std::mem::take(&mut *lock(&self.samples))
    }

    /// Applies one settled status; a failed event to skip goes to `skips`.
    fn settle(&self, settled: Settled, skips: &mpsc::UnboundedSender<String>) {
        let end = match settled.status {
            Status::Completed => End::Completed,
            Status::Skipped => End::Skipped,
            Status::Failed => match self.on_failure {
                OnFailure::Skip => {
                    // Not over yet: the skip will settle it.
                    let _ = skips.send(settled.event_id);
                    return;
                }
                OnFailure::Block => End::Blocked,
            },
            Status::Deferred => match self.on_failure {
                // Replayed once the blocking event is skipped.
                OnFailure::Skip => return,
                OnFailure::Block => End::Parked,
            },
            Status::Pending => return,
            other => End::Lost(other),
        };
        let Some(mut pending) = lock(&self.pending).remove(&settled.key) else {
            // Not a bench event of this phase (or settled before).
            return;
        };
        if end == End::Blocked {
            lock(&self.blocked_sessions).insert(pending.session);
        }
        let latency = settled.at.saturating_duration_since(pending.due);
        let mut samples = lock(&self.samples);
        match end {
            End::Completed => {
                samples.completed.push(latency);
                let first = samples.first_due.unwrap_or(pending.due);
                samples
                    .completed_due
                    .push(pending.due.saturating_duration_since(first));
            }
            End::Skipped => samples.skipped.push(latency),
            End::Blocked => samples.blocked += 1,
            End::Parked => samples.parked += 1,
            End::Lost(status) => samples.lost.push((settled.key.clone(), status)),
        }
        if end == End::Completed {
            samples.queue_ms.extend(settled.queue_time_ms);
            samples.processing_ms.extend(settled.processing_time_ms);
        }
        samples.last_end = Some(settled.at);
        drop(samples);
        if let Some(done) = pending.done.take() {
            let _ = done.send(end);
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Runs until the channel closes: applies settled statuses, and skips
/// failed events through the Manager when told to.
pub(crate) async fn collect(
    tracker: Arc<Tracker>,
    mut settled: mpsc::UnboundedReceiver<Settled>,
    manager: Arc<Manager<Broker>>,
) {
    let (skips, mut to_skip) = mpsc::unbounded_channel::<String>();
    let skipper = tokio::spawn(async move {
        while let Some(event_id) = to_skip.recv().await {
            if let Err(e) = manager.skip(&event_id, Some(ENDPOINT)).await {
                tracing::error!(error = %e, %event_id, "the bench could not skip a failed event");
            }
        }
    });
    while let Some(s) = settled.recv().await {
        tracker.settle(s, &skips);
    }
    drop(skips);
    let _ = skipper.await;
}

/// How to make the `n`th event.
pub(crate) struct EventSource {
    pub(crate) run: String,
    pub(crate) event_type: String,
    pub(crate) sessions: usize,
    pub(crate) payload: Arc<dyn Fn(u64, bool) -> String + Send + Sync>,
    pub(crate) failure_rate: f64,
}

impl EventSource {
    /// Whether event `n` is one that fails: exactly `rate` of every run of
    /// events, evenly spread (no randomness, so runs compare).
    fn fails(&self, n: u64) -> bool {
        let (a, b) = (
            (n as f64) * self.failure_rate,
            ((n + 1) as f64) * self.failure_rate,
        );
        b.floor() > a.floor()
    }

    fn message(&self, phase: &str, n: u64, session: usize) -> (String, Message) {
        let key = format!("{}-{phase}-{n}", self.run);
        let publish = Publish {
            event_type_id: self.event_type.clone(),
            payload: (self.payload)(n, self.fails(n)),
            session_id: Some(format!("{phase}-s{session:04}")),
            correlation_id: Some(key.clone()),
            ..Publish::default()
        };
        (key, original_publish(&publish).to_transport())
    }
}

/// Publishes `events` events closed-loop: each session keeps `window`
/// events in flight. Returns when every event has ended.
pub(crate) async fn closed_loop(
    broker: &Arc<Broker>,
    tracker: &Arc<Tracker>,
    source: &Arc<EventSource>,
    phase: &str,
    events: u64,
    window: usize,
) -> anyhow::Result<()> {
    let next = Arc::new(AtomicUsize::new(0));
    let failed = Arc::new(AtomicBool::new(false));
    let mut workers = JoinSet::new();
    for session in 0..source.sessions {
        for _ in 0..window {
            let (broker, tracker, source, next, failed) = (
                Arc::clone(broker),
                Arc::clone(tracker),
                Arc::clone(source),
                Arc::clone(&next),
                Arc::clone(&failed),
            );
            let phase = phase.to_owned();
            workers.spawn(async move {
                loop {
                    if failed.load(Ordering::Relaxed) || tracker.is_blocked(session) {
                        return Ok(());
                    }
                    let n = next.fetch_add(1, Ordering::Relaxed) as u64;
                    if n >= events {
                        return Ok(());
                    }
                    let (key, message) = source.message(&phase, n, session);
                    let done = tracker.expect(key.clone(), Instant::now(), session);
                    broker
                        .publish(DEFAULT_PRODUCER, vec![message])
                        .await
                        .context("publishing a bench event")?;
                    match tokio::time::timeout(STALL, done).await {
                        Ok(Ok(_)) => {}
                        Ok(Err(_)) => bail!("the bench's collector stopped"),
                        Err(_) => {
                            failed.store(true, Ordering::Relaxed);
                            bail!(
                                "event {key} did not settle within {STALL:?}: the stack is stuck \
                                 ({} events in flight)",
                                tracker.in_flight()
                            );
                        }
                    }
                }
            });
        }
    }
    while let Some(joined) = workers.join_next().await {
        joined.context("a load worker panicked")??;
    }
    Ok(())
}

/// Publishes `events` events open-loop at `rate` events/s, round-robin over
/// the sessions, then waits for every one to end.
pub(crate) async fn open_loop(
    broker: &Arc<Broker>,
    tracker: &Arc<Tracker>,
    source: &Arc<EventSource>,
    phase: &str,
    events: u64,
    rate: f64,
) -> anyhow::Result<()> {
    if !(rate.is_finite() && rate > 0.0) {
        bail!("the open-loop rate must be a positive number of events/s, not {rate}");
    }
    // One publisher task, fed in order: events of a session reach the
    // broker in the order they fell due, and batches that pile up while a
    // commit is in progress go out together in the next publish.
    let (batches, mut to_publish) = mpsc::unbounded_channel::<Vec<Message>>();
    let publisher = {
        let broker = Arc::clone(broker);
        tokio::spawn(async move {
            while let Some(mut batch) = to_publish.recv().await {
                while let Ok(more) = to_publish.try_recv() {
                    batch.extend(more);
                }
                broker
                    .publish(DEFAULT_PRODUCER, batch)
                    .await
                    .context("publishing bench events")?;
            }
            anyhow::Ok(())
        })
    };
    let start = Instant::now();
    let mut sent = 0u64;
    // Tokio's timer ticks in milliseconds: each tick releases every event
    // that fell due since the last, each stamped with the instant it fell
    // due, so a late tick (or a late publisher) counts in the latency.
    let mut tick = tokio::time::interval(Duration::from_millis(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    while sent < events {
        tick.tick().await;
        let released = fallen_due(start, Instant::now(), rate, sent, events);
        if released.is_empty() {
            continue;
        }
        let mut batch = Vec::with_capacity(released.len());
        for (n, due) in released {
            let session = (n % source.sessions as u64) as usize;
            let (key, message) = source.message(phase, n, session);
            drop(tracker.expect(key, due, session));
            batch.push(message);
            sent = n + 1;
        }
        if batches.send(batch).is_err() {
            break;
        }
    }
    drop(batches);
    publisher.await.context("the publish task panicked")??;
    drain(tracker).await
}

/// The events after the first `sent` that have fallen due by `now` at
/// `rate` events/s from `start` (at most `events` in all), each with the
/// instant it fell due: event `n` falls due at `start + n / rate`.
fn fallen_due(
    start: Instant,
    now: Instant,
    rate: f64,
    sent: u64,
    events: u64,
) -> Vec<(u64, Instant)> {
    let due = (((now - start).as_secs_f64() * rate) as u64 + 1).min(events);
    (sent..due)
        .map(|n| (n, start + Duration::from_secs_f64(n as f64 / rate)))
        .collect()
}

/// Waits until no event is in flight, failing after [`STALL`] without progress.
async fn drain(tracker: &Tracker) -> anyhow::Result<()> {
    let mut last = (tracker.in_flight(), Instant::now());
    loop {
        let now = tracker.in_flight();
        if now == 0 {
            return Ok(());
        }
        if now != last.0 {
            last = (now, Instant::now());
        } else if last.1.elapsed() > STALL {
            bail!("{now} events did not settle within {STALL:?}: the stack is stuck");
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;

    fn source(failure_rate: f64) -> EventSource {
        EventSource {
            run: "t".into(),
            event_type: "Noop".into(),
            sessions: 4,
            payload: Arc::new(|_, _| "{}".to_owned()),
            failure_rate,
        }
    }

    #[test]
    fn open_loop_events_released_late_carry_the_instant_they_fell_due() {
        let start = Instant::now();
        // A tick 5.5 ms in at 1,000 events/s: events 0 to 5 fell due at 0,
        // 1, ... 5 ms, not at the tick.
        let released = fallen_due(start, start + Duration::from_micros(5_500), 1000.0, 0, 100);
        let offsets: Vec<(u64, Duration)> =
            released.iter().map(|&(n, at)| (n, at - start)).collect();
        assert_eq!(
            offsets,
            (0..6)
                .map(|n| (n, Duration::from_millis(n)))
                .collect::<Vec<_>>()
        );
        // The next tick releases only what fell due since, and never more
        // than the phase's events.
        let next = fallen_due(start, start + Duration::from_micros(7_200), 1000.0, 6, 7);
        assert_eq!(next.iter().map(|&(n, _)| n).collect::<Vec<_>>(), [6]);
    }

    #[test]
    fn failures_are_exactly_the_rate_and_evenly_spread() {
        let s = source(0.01);
        let failing: Vec<u64> = (0..1000).filter(|n| s.fails(*n)).collect();
        assert_eq!(failing.len(), 10);
        assert!(
            failing.windows(2).all(|w| w[1] - w[0] == 100),
            "{failing:?}"
        );
        assert!(!(0..1000).any(|n| source(0.0).fails(n)));
        assert!((0..1000).all(|n| source(1.0).fails(n)));
    }

    #[test]
    fn events_carry_their_key_as_correlation_and_their_session() {
        let s = source(0.0);
        let (key, message) = s.message("warmup", 7, 3);
        assert_eq!(key, "t-warmup-7");
        assert_eq!(message.correlation_id.as_deref(), Some("t-warmup-7"));
        assert_eq!(message.session_id.as_deref(), Some("warmup-s0003"));
    }
}
