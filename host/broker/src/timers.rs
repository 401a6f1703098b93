//! Deadlines: lock expiry, session-lock expiry, scheduled activation, TTL.
//!
//! One task per broker sleeps until the earliest deadline in a heap (on the
//! injected [`Clock`](crate::Clock)), then hands every due event to the
//! broker. Nothing is scanned periodically; an event that is stale by the
//! time it fires (the lock was renewed, the message settled) is ignored by
//! its handler, which re-checks against current state.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::{Mutex, PoisonError};
use std::time::SystemTime;

use nimbus_transport::{LockToken, SubQueue};
use tokio::sync::Notify;

use crate::state::EntryId;

/// What is due.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum TimerEvent {
    MessageLock {
        topic: String,
        subscription: String,
        queue: SubQueue,
        token: LockToken,
    },
    SessionLock {
        topic: String,
        subscription: String,
        session: String,
        holder: u64,
    },
    Scheduled {
        topic: String,
        seq: i64,
    },
    Expiry {
        topic: String,
        subscription: String,
        key: String,
        id: EntryId,
    },
}

#[derive(Debug)]
struct Due {
    at: SystemTime,
    order: u64,
    event: TimerEvent,
}

impl PartialEq for Due {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.order) == (other.at, other.order)
    }
}
impl Eq for Due {}
impl PartialOrd for Due {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Due {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.at, self.order).cmp(&(other.at, other.order))
    }
}

/// The deadline heap shared by the broker and its timer task.
#[derive(Debug, Default)]
pub(crate) struct Timers {
    heap: Mutex<(BinaryHeap<Reverse<Due>>, u64)>,
    /// Signals the timer task that the earliest deadline may have changed.
    pub(crate) changed: Notify,
}

impl Timers {
    /// Adds `event`, due at `at`.
    pub(crate) fn push(&self, at: SystemTime, event: TimerEvent) {
        let mut guard = self.heap.lock().unwrap_or_else(PoisonError::into_inner);
        let (heap, counter) = &mut *guard;
        *counter += 1;
        let earliest = heap.peek().map(|Reverse(d)| d.at);
        heap.push(Reverse(Due {
            at,
            order: *counter,
            event,
        }));
        drop(guard);
        if earliest.is_none_or(|e| at < e) {
            self.changed.notify_one();
        }
    }

    /// Deadlines waiting, stale ones included.
    pub(crate) fn len(&self) -> usize {
        self.heap
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .0
            .len()
    }

    /// The earliest deadline.
    pub(crate) fn next_deadline(&self) -> Option<SystemTime> {
        let guard = self.heap.lock().unwrap_or_else(PoisonError::into_inner);
        guard.0.peek().map(|Reverse(d)| d.at)
    }

    /// Removes and returns every event due at `now`, in deadline order.
    pub(crate) fn pop_due(&self, now: SystemTime) -> Vec<TimerEvent> {
        let mut guard = self.heap.lock().unwrap_or_else(PoisonError::into_inner);
        let mut due = Vec::new();
        while guard.0.peek().is_some_and(|Reverse(d)| d.at <= now) {
            if let Some(Reverse(d)) = guard.0.pop() {
                due.push(d.event);
            }
        }
        due
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn only_due_events_pop_and_in_deadline_order() {
        let timers = Timers::default();
        let t0 = SystemTime::UNIX_EPOCH;
        let ev = |seq| TimerEvent::Scheduled {
            topic: "t".into(),
            seq,
        };
        timers.push(t0 + Duration::from_secs(3), ev(3));
        timers.push(t0 + Duration::from_secs(1), ev(1));
        timers.push(t0 + Duration::from_secs(2), ev(2));
        assert_eq!(timers.next_deadline(), Some(t0 + Duration::from_secs(1)));
        assert_eq!(
            timers.pop_due(t0 + Duration::from_secs(2)),
            vec![ev(1), ev(2)]
        );
        assert_eq!(timers.pop_due(t0 + Duration::from_secs(2)), vec![]);
        assert_eq!(timers.pop_due(t0 + Duration::from_secs(5)), vec![ev(3)]);
    }
}
