//! A failed delivery (abandon, lock expiry) is counted; at the
//! subscription's max delivery count, or on expiry or a dead-letter
//! settlement, the message moves to the dead-letter queue, in place on
//! disk.

use std::time::SystemTime;

use nimbus_transport::SubQueue;

use super::Inner;
use crate::commit::{OnCommit, Wakeups};
use crate::records::StoreOp;
use crate::state::{Entry, EntryId, EntryStatus, SubCore};
use crate::timers::TimerEvent;

impl Inner {
    /// Counts a failed delivery of available message `id` (abandon or lock
    /// expiry): dead-letters it at the max delivery count, else persists the
    /// count. `changed` is the re-encoded message when abandon changed it.
    /// A dead-lettered message is delivered from there once `on_commit`
    /// runs.
    #[expect(
        clippy::too_many_arguments,
        reason = "the message's full address is needed for the store and timers"
    )]
    pub(crate) fn count_failure(
        &self,
        topic: &str,
        subscription: &str,
        sub: &mut SubCore,
        queue: SubQueue,
        key: &str,
        id: EntryId,
        changed: Option<Vec<u8>>,
        now: SystemTime,
        ops: &mut Vec<StoreOp>,
        wake: &mut Wakeups,
        on_commit: &mut OnCommit,
    ) {
        let max = sub.settings.max_delivery_count;
        let q = match queue {
            SubQueue::Main => &mut sub.main,
            SubQueue::DeadLetter => &mut sub.dead_letter,
        };
        let Some(entry) = q.get_mut(key, id) else {
            return;
        };
        entry.failures = entry.failures.saturating_add(1);
        let failures = entry.failures;
        let expires = entry.expires;
        if queue == SubQueue::Main && failures >= max {
            if let Some(entry) = q.remove_id(key, id, wake) {
                if let Some(message) = changed {
                    ops.push(StoreOp::UpdateEntry {
                        id,
                        failures,
                        message: Some(message),
                    });
                }
                let description =
                    format!("Message could not be consumed after {max} delivery attempts.");
                move_to_dead_letter(
                    sub,
                    entry,
                    nimbus_transport::MAX_DELIVERY_COUNT_EXCEEDED,
                    &description,
                    ops,
                    on_commit,
                );
            }
            return;
        }
        ops.push(StoreOp::UpdateEntry {
            id,
            failures,
            message: changed,
        });
        if queue == SubQueue::Main
            && let Some(expires) = expires
            && expires <= now
        {
            self.timers.push(
                now,
                TimerEvent::Expiry {
                    topic: topic.to_owned(),
                    subscription: subscription.to_owned(),
                    key: key.to_owned(),
                    id,
                },
            );
        }
    }
}

/// Moves a message (already removed from the main queue) into the
/// dead-letter queue, in place on disk; it is delivered from there once
/// `on_commit` runs.
pub(crate) fn move_to_dead_letter(
    sub: &mut SubCore,
    mut entry: Entry,
    reason: &str,
    description: &str,
    ops: &mut Vec<StoreOp>,
    on_commit: &mut OnCommit,
) {
    entry.status = EntryStatus::Available;
    entry.dead_letter_reason = Some(reason.to_owned());
    entry.dead_letter_description = Some(description.to_owned());
    ops.push(StoreOp::MoveToDeadLetter {
        id: entry.id,
        failures: entry.failures,
        reason: reason.to_owned(),
        description: description.to_owned(),
    });
    sub.dead_letter.insert_uncommitted(entry, on_commit);
}
