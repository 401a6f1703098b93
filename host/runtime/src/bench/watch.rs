//! The bench's two probes: an observer of the Resolver's store that tells the load
//! generator the moment the Resolver has committed an event's status (the
//! end of "end to end"), and a [`Handlers`] wrapper that times the handler
//! call (the sandbox's share of the time).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use nimbus_engine::{HandlerCall, Handlers};
use nimbus_handler::Event;
use nimbus_resolver::{Observation, Recorded, Status};
use tokio::sync::mpsc;

use crate::observed_store::RecordObserver;

/// A status the Resolver committed for a bench event.
#[derive(Debug, Clone)]
pub(crate) struct Settled {
    /// The bench's key for the event (its correlation id).
    pub(crate) key: String,
    /// The event's id at the endpoint (what the Manager's skip takes).
    pub(crate) event_id: String,
    /// The status now.
    pub(crate) status: Status,
    /// When the store returned.
    pub(crate) at: Instant,
    /// Enqueue to handler entry, as the engine reported it.
    pub(crate) queue_time_ms: Option<i64>,
    /// Handler entry to response, as the engine reported it.
    pub(crate) processing_time_ms: Option<i64>,
}

/// Reports each applied status of interest of the Resolver's store (as an
/// [`ObservedStore`]'s observer).
pub(crate) struct SettledWatch {
    events: mpsc::UnboundedSender<Settled>,
}

impl SettledWatch {
    pub(crate) fn new(events: mpsc::UnboundedSender<Settled>) -> Self {
        SettledWatch { events }
    }
}

impl RecordObserver for SettledWatch {
    fn observe(&self, observation: &Observation, recorded: &Recorded) {
        let Recorded::Applied { status } = recorded else {
            return;
        };
        // The request copy's Pending says nothing about the outcome.
        if *status == Status::Pending {
            return;
        }
        let Some(key) = observation.correlation_id.clone() else {
            return;
        };
        // A closed receiver means the run is over; nothing to tell.
        let _ = self.events.send(Settled {
            key,
            event_id: observation.event_id.clone(),
            status: *status,
            at: Instant::now(),
            queue_time_ms: observation.queue_time_ms,
            processing_time_ms: observation.processing_time_ms,
        });
    }
}

/// Time spent inside handler calls, summed.
#[derive(Debug, Default)]
pub(crate) struct HandlerClock {
    calls: AtomicU64,
    nanos: AtomicU64,
}

impl HandlerClock {
    /// Calls so far and their total time in nanoseconds.
    pub(crate) fn read(&self) -> (u64, u64) {
        (
            self.calls.load(Ordering::Relaxed),
            self.nanos.load(Ordering::Relaxed),
        )
    }
}

/// Handlers, timed.
pub(crate) struct Timed {
    inner: Arc<dyn Handlers>,
    clock: Arc<HandlerClock>,
}

impl Timed {
    pub(crate) fn new(inner: Arc<dyn Handlers>, clock: Arc<HandlerClock>) -> Self {
        Timed { inner, clock }
    }
}

impl Handlers for Timed {
    fn invoke<'a>(&'a self, endpoint: &'a str, event: Event) -> HandlerCall<'a> {
        Box::pin(async move {
            let start = Instant::now();
            let report = self.inner.invoke(endpoint, event).await;
            let nanos = u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX);
            self.clock.calls.fetch_add(1, Ordering::Relaxed);
            self.clock.nanos.fetch_add(nanos, Ordering::Relaxed);
            report
        })
    }
}
