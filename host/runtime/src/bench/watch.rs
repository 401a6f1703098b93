//! The bench's two probes: a [`ResolverStore`] wrapper that tells the load
//! generator the moment the Resolver has committed an event's status (the
//! end of "end to end"), and a [`Handlers`] wrapper that times the handler
//! call (the sandbox's share of the time).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use nimbus_engine::{HandlerCall, HandlerEvent, Handlers};
use nimbus_resolver::{
    EventDetail, EventFilter, EventRecord, Heartbeat, Observation, Recorded, ResolverStore, Status,
    StoreError,
};
use tokio::sync::mpsc;

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

/// The Resolver store, reporting each applied status of interest.
pub(crate) struct WatchingStore {
    inner: Arc<dyn ResolverStore>,
    events: mpsc::UnboundedSender<Settled>,
}

impl WatchingStore {
    pub(crate) fn new(
        inner: Arc<dyn ResolverStore>,
        events: mpsc::UnboundedSender<Settled>,
    ) -> Self {
        WatchingStore { inner, events }
    }

    fn notify(&self, observation: &Observation, recorded: &Recorded) {
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

impl ResolverStore for WatchingStore {
    fn record(&self, observation: &Observation) -> Result<Recorded, StoreError> {
        let recorded = self.inner.record(observation)?;
        self.notify(observation, &recorded);
        Ok(recorded)
    }

    fn record_batch(&self, observations: &[Observation]) -> Result<Vec<Recorded>, StoreError> {
        let recorded = self.inner.record_batch(observations)?;
        for (observation, recorded) in observations.iter().zip(&recorded) {
            self.notify(observation, recorded);
        }
        Ok(recorded)
    }

    fn event(&self, event_id: &str) -> Result<Vec<EventDetail>, StoreError> {
        self.inner.event(event_id)
    }

    fn events_of_message(&self, message_id: &str) -> Result<Vec<EventDetail>, StoreError> {
        self.inner.events_of_message(message_id)
    }

    fn events(&self, filter: &EventFilter) -> Result<Vec<EventRecord>, StoreError> {
        self.inner.events(filter)
    }

    fn refused_writes(&self) -> u64 {
        self.inner.refused_writes()
    }

    fn record_heartbeat(&self, heartbeat: &Heartbeat) -> Result<(), StoreError> {
        self.inner.record_heartbeat(heartbeat)
    }

    fn heartbeats(&self) -> Result<Vec<Heartbeat>, StoreError> {
        self.inner.heartbeats()
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
    fn invoke<'a>(&'a self, endpoint: &'a str, event: HandlerEvent) -> HandlerCall<'a> {
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
