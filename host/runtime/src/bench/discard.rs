//! A Resolver store that keeps nothing, for `nimbus bench --resolver-store
//! discard`: the Resolver still consumes, decodes and settles every message
//! and the bench still hears each status, but no SQLite write is made. Run
//! beside the real store, it prices the audit trail's store the way the
//! native handler prices the sandbox (docs/decisions/0127). The host never
//! offers it: an audit trail that keeps nothing is not one.

use nimbus_resolver::{
    EventDetail, EventFilter, EventRecord, Heartbeat, Observation, Recorded, ResolverStore,
    StoreError,
};

/// Answers every record as applied with the status it asks for, and every
/// read as empty.
pub(crate) struct DiscardingStore;

impl ResolverStore for DiscardingStore {
    fn record(&self, observation: &Observation) -> Result<Recorded, StoreError> {
        Ok(Recorded::Applied {
            status: observation.status().0,
        })
    }

    fn record_batch(&self, observations: &[Observation]) -> Result<Vec<Recorded>, StoreError> {
        observations.iter().map(|o| self.record(o)).collect()
    }

    fn event(&self, _event_id: &str) -> Result<Vec<EventDetail>, StoreError> {
        Ok(Vec::new())
    }

    fn events_of_message(&self, _message_id: &str) -> Result<Vec<EventDetail>, StoreError> {
        Ok(Vec::new())
    }

    fn events(&self, _filter: &EventFilter) -> Result<Vec<EventRecord>, StoreError> {
        Ok(Vec::new())
    }

    fn refused_writes(&self) -> u64 {
        0
    }

    fn record_heartbeat(&self, _heartbeat: &Heartbeat) -> Result<(), StoreError> {
        Ok(())
    }

    fn heartbeats(&self) -> Result<Vec<Heartbeat>, StoreError> {
        Ok(Vec::new())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use nimbus_resolver::{MessageKind, Status};

    use super::*;

    #[test]
    fn each_record_is_answered_with_the_status_it_asks_for() {
        let response = Observation::new("bench", "e-1", MessageKind::ResolutionResponse, 1);
        let request = Observation::new("bench", "e-1", MessageKind::EventRequest, 1);
        let answers = DiscardingStore.record_batch(&[request, response]).unwrap();
        assert_eq!(
            answers,
            vec![
                Recorded::Applied {
                    status: Status::Pending
                },
                Recorded::Applied {
                    status: Status::Completed
                }
            ]
        );
        assert!(DiscardingStore.event("e-1").unwrap().is_empty());
    }
}
