//! A [`ResolverStore`] that tells an observer what each recording applied:
//! the one wrapper behind `/metrics` and `nimbus bench`'s end-to-end probe.

use std::sync::Arc;

use nimbus_resolver::{
    EventDetail, EventFilter, EventRecord, Heartbeat, Observation, Recorded, ReplayNote,
    ResolverStore, Status, StoreError, StoreRows,
};

/// What an [`ObservedStore`] reports each committed record to. Called on
/// the recorder's thread after the commit: keep it short.
pub trait RecordObserver: Send + Sync {
    /// `observation` was recorded with `recorded`.
    fn observe(&self, observation: &Observation, recorded: &Recorded);
}

/// `inner`, reporting every record to `observer` once it returns.
pub struct ObservedStore<O> {
    inner: Arc<dyn ResolverStore>,
    observer: O,
}

impl<O: RecordObserver> ObservedStore<O> {
    /// `inner`, observed by `observer`.
    pub fn new(inner: Arc<dyn ResolverStore>, observer: O) -> Self {
        ObservedStore { inner, observer }
    }
}

impl<O: RecordObserver> ResolverStore for ObservedStore<O> {
    fn record(&self, observation: &Observation) -> Result<Recorded, StoreError> {
        let recorded = self.inner.record(observation)?;
        self.observer.observe(observation, &recorded);
        Ok(recorded)
    }

    fn record_batch(&self, observations: &[Observation]) -> Result<Vec<Recorded>, StoreError> {
        let recorded = self.inner.record_batch(observations)?;
        for (observation, recorded) in observations.iter().zip(&recorded) {
            self.observer.observe(observation, recorded);
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

    fn rows_written(&self) -> Result<Option<StoreRows>, StoreError> {
        self.inner.rows_written()
    }

    fn record_heartbeat(&self, heartbeat: &Heartbeat) -> Result<(), StoreError> {
        self.inner.record_heartbeat(heartbeat)
    }

    fn heartbeats(&self) -> Result<Vec<Heartbeat>, StoreError> {
        self.inner.heartbeats()
    }

    fn record_replay(&self, replay: &ReplayNote) -> Result<Option<Status>, StoreError> {
        self.inner.record_replay(replay)
    }

    fn record_rebuilt(&self, rebuilt: &EventRecord, note: &str) -> Result<bool, StoreError> {
        self.inner.record_rebuilt(rebuilt, note)
    }
}
