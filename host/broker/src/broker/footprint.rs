//! What the broker holds in memory, counted: for `nimbus bench`'s soak and
//! for tests that show each structure let go of what it no longer needs.
//!
//! Every structure here is bounded by something outside the broker's
//! control or released on its own: messages and their lock tokens by what
//! is queued and not yet settled; a session's partition lives while it has
//! messages, an owner or a state (docs/architecture.md, "What stays in
//! memory"); deadlines until they fall due (at most a lock duration for a
//! lock's); duplicate-detection ids for their window; inbox records until
//! they expire.

use std::sync::PoisonError;

use crate::broker::Inner;

/// Counts of what the broker holds in memory, over every topic.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Footprint {
    /// Topics.
    pub topics: usize,
    /// Messages in main and dead-letter queues, available or locked.
    pub messages: usize,
    /// Session partitions kept (a session with messages, an owner or a
    /// state; one partition per non-session queue with messages).
    pub partitions: usize,
    /// Sessions whose lock is held now.
    pub sessions_held: usize,
    /// Sessions with a state set.
    pub sessions_with_state: usize,
    /// Message lock tokens outstanding.
    pub lock_tokens: usize,
    /// Scheduled messages not yet due.
    pub scheduled: usize,
    /// Message ids kept for duplicate detection.
    pub duplicate_ids: usize,
    /// Deadlines waiting in the timer heap (stale ones included, until due).
    pub deadlines: usize,
    /// Consumers' inbox records.
    pub inbox_records: usize,
}

impl Inner {
    pub(crate) fn footprint(&self) -> Footprint {
        let topics: Vec<_> = self
            .topics
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .cloned()
            .collect();
        let mut counted = Footprint {
            topics: topics.len(),
            deadlines: self.timers.len(),
            inbox_records: self
                .inbox
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .len(),
            ..Footprint::default()
        };
        // One topic's lock at a time, as every operation takes it.
        for topic in topics {
            let core = topic.lock();
            counted.scheduled += core.scheduled.len();
            counted.duplicate_ids += core.dedup.len();
            for sub in core.subs.values() {
                for queue in [&sub.main, &sub.dead_letter] {
                    counted.messages += queue.len();
                    counted.lock_tokens += queue.lock_tokens();
                    for partition in queue.partitions.values() {
                        counted.partitions += 1;
                        counted.sessions_held += usize::from(partition.owner.is_some());
                        counted.sessions_with_state += usize::from(partition.state.is_some());
                    }
                }
            }
        }
        counted
    }
}
