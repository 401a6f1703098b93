//! The events this host is delivering again after a transient failure.
//!
//! A transient failure sends no response (SEMANTICS.md §3): the Resolver
//! still says `Pending` while the session waits through the backoff and the
//! broker delivers the event again, up to the max delivery count. The
//! engine notes each such failure here, so the operator API can show, beside
//! the Resolver's record, that the event is failing and why, instead of an
//! unexplained `Pending`. Memory only, and this host's own deliveries only:
//! what the Resolver records stays the audit trail.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::SystemTime;

/// At most this many events are remembered; the oldest failure goes first.
/// Far more than a host has sessions, so only events whose last delivery
/// ended another way than through the engine (a session dropped with its
/// host's broker, say) are ever pushed out.
const MOST_REMEMBERED: usize = 10_000;

/// One event's last transient failure at one endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransientAttempt {
    /// The delivery that failed (1 for the first).
    pub delivery: u32,
    /// The delivery at which a transient failure dead-letters the event.
    pub max_deliveries: u32,
    /// The failure's type, as the handler reported it.
    pub error_type: String,
    /// The failure's message.
    pub error: String,
    /// When the delivery failed.
    pub failed_at: SystemTime,
    /// When the session lets the event go to be delivered again (the end of
    /// the backoff).
    pub next_delivery_after: SystemTime,
}

/// The transient failures in progress, by endpoint and event id. Shared by
/// every endpoint of a host; cheap to read.
#[derive(Debug, Default)]
pub struct Retrying {
    events: Mutex<HashMap<(String, String), TransientAttempt>>,
}

impl Retrying {
    /// The event `event_id` failed transiently at `endpoint` and will be
    /// delivered again.
    pub(crate) fn note(&self, endpoint: &str, event_id: &str, attempt: TransientAttempt) {
        let mut events = self.events();
        if events.len() >= MOST_REMEMBERED
            && !events.contains_key(&(endpoint.to_owned(), event_id.to_owned()))
            && let Some(oldest) = events
                .iter()
                .min_by_key(|(_, a)| a.failed_at)
                .map(|(key, _)| key.clone())
        {
            events.remove(&oldest);
        }
        events.insert((endpoint.to_owned(), event_id.to_owned()), attempt);
    }

    /// The event's delivery at `endpoint` ended another way (completed,
    /// failed, handed off, dead-lettered): it is no longer retrying.
    pub(crate) fn clear(&self, endpoint: &str, event_id: &str) {
        let mut events = self.events();
        if !events.is_empty() {
            events.remove(&(endpoint.to_owned(), event_id.to_owned()));
        }
    }

    /// The event's transient failure in progress at `endpoint`, if any.
    pub fn of(&self, endpoint: &str, event_id: &str) -> Option<TransientAttempt> {
        self.events()
            .get(&(endpoint.to_owned(), event_id.to_owned()))
            .cloned()
    }

    /// How many events are retrying at each endpoint.
    pub fn counts(&self) -> HashMap<String, usize> {
        let mut counts = HashMap::new();
        for (endpoint, _) in self.events().keys() {
            *counts.entry(endpoint.clone()).or_insert(0) += 1;
        }
        counts
    }

    fn events(&self) -> MutexGuard<'_, HashMap<(String, String), TransientAttempt>> {
        self.events.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn attempt(delivery: u32, failed_at: SystemTime) -> TransientAttempt {
        TransientAttempt {
            delivery,
            max_deliveries: 10,
            error_type: "TimeoutError".to_owned(),
            error: "partner down".to_owned(),
            failed_at,
            next_delivery_after: failed_at + Duration::from_secs(1),
        }
    }

    #[test]
    fn the_last_failure_of_an_event_is_kept_per_endpoint_until_cleared() {
        let retrying = Retrying::default();
        let now = SystemTime::now();
        retrying.note("billing", "e1", attempt(1, now));
        retrying.note("billing", "e1", attempt(2, now));
        retrying.note("audit", "e1", attempt(1, now));
        assert_eq!(retrying.of("billing", "e1").map(|a| a.delivery), Some(2));
        assert_eq!(retrying.of("audit", "e1").map(|a| a.delivery), Some(1));
        assert_eq!(retrying.counts().get("billing"), Some(&1));
        retrying.clear("billing", "e1");
        assert_eq!(retrying.of("billing", "e1"), None);
        assert!(retrying.of("audit", "e1").is_some());
    }

    #[test]
    fn the_oldest_failure_goes_when_the_memory_is_full() {
        let retrying = Retrying::default();
        let start = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        for n in 0..MOST_REMEMBERED {
            let at = start + Duration::from_secs(u64::try_from(n).unwrap());
            retrying.note("e", &format!("event-{n}"), attempt(1, at));
        }
        retrying.note(
            "e",
            "newest",
            attempt(1, start + Duration::from_secs(1 << 30)),
        );
        assert_eq!(retrying.of("e", "event-0"), None);
        assert!(retrying.of("e", "event-1").is_some());
        assert!(retrying.of("e", "newest").is_some());
        assert_eq!(retrying.counts().get("e"), Some(&MOST_REMEMBERED));
    }
}
