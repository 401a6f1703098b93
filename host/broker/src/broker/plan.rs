//! What routing decided, before anything is applied ([`Plan`]): the
//! copies to place, the messages to schedule, the duplicate-detection
//! records. It is checked against the request limit, then applied to
//! memory and turned into the ops of one commit.

use std::time::SystemTime;

use super::Inner;
use super::locking::Locked;
use crate::codec;
use crate::commit::OnCommit;
use crate::records::{EntryRow, StoreOp};
use crate::state::{Entry, Scheduled};
use crate::timers::TimerEvent;

/// The most bytes of messages one request may store: a publish with every
/// copy its routing makes, or a settlement with its publishes. A request is
/// one frame of the log, never split, and a frame over the log's 1 GiB limit
/// fails the write and with it every later one (a 2 MiB message reaching
/// ~500 subscriptions was enough); refused up front, the sender gets an
/// error that says why and the broker goes on. Also the most
/// [`BrokerOptions::max_request_bytes`](crate::BrokerOptions::max_request_bytes)
/// may set.
pub const DEFAULT_MAX_REQUEST_BYTES: usize = 256 << 20;

/// Headroom per copy for everything but the body (ids, user properties), so
/// the exact size is computed only for a request that may be near the limit.
const NON_BODY_ALLOWANCE: usize = 64 << 10;

/// What routing one publish decided, before anything is applied.
#[derive(Default)]
pub(crate) struct Plan {
    /// (topic, subscription, dead-letter queue?, entry)
    pub(super) placements: Vec<(String, String, bool, Entry)>,
    pub(super) scheduled: Vec<(String, i64, Scheduled)>,
    pub(super) dedup: Vec<(String, String, i64)>,
    /// The sequence number per published message.
    pub(crate) sequence_numbers: Vec<i64>,
}

impl Plan {
    /// Refuses a plan whose messages would make the request larger than
    /// `limit` bytes, saying why.
    pub(crate) fn check_size(&self, limit: usize) -> Result<(), String> {
        let messages = || {
            self.placements
                .iter()
                .map(|(_, _, _, entry)| &entry.message)
                .chain(self.scheduled.iter().map(|(_, _, s)| &s.message))
        };
        let copies = self.placements.len() + self.scheduled.len();
        let bodies: usize = messages().map(|m| m.body.len()).sum();
        if bodies.saturating_add(copies.saturating_mul(NON_BODY_ALLOWANCE)) <= limit {
            return Ok(());
        }
        let (total, largest) = messages()
            .map(|m| postcard::experimental::serialized_size(m).unwrap_or(usize::MAX))
            .fold((0usize, 0usize), |(total, largest), size| {
                (total.saturating_add(size), largest.max(size))
            });
        if total <= limit {
            return Ok(());
        }
        Err(format!(
            "it would store {copies} message copies ({} in all, the largest {}) in one request, \
             more than the {} a request may hold; send smaller messages, or fewer at once, or \
             route them to fewer subscriptions",
            mib(total),
            mib(largest),
            mib(limit),
        ))
    }
}

/// `bytes` for a person: MiB with one decimal, or bytes below 1 MiB.
fn mib(bytes: usize) -> String {
    if bytes < 1 << 20 {
        format!("{bytes} bytes")
    } else {
        format!("{:.1} MiB", bytes as f64 / f64::from(1u32 << 20))
    }
}

impl Inner {
    /// Applies a plan to memory; returns the store ops. The messages it
    /// places are delivered once `on_commit` runs.
    pub(crate) fn apply_plan(
        &self,
        locked: &mut Locked<'_>,
        plan: Plan,
        now: SystemTime,
        ops: &mut Vec<StoreOp>,
        on_commit: &mut OnCommit,
    ) {
        for (topic, sub, dead, entry) in plan.placements {
            let Some(core) = locked.get_mut(&topic) else {
                continue;
            };
            let Some(sub_core) = core.subs.get_mut(&sub) else {
                continue;
            };
            ops.push(StoreOp::InsertEntry(Box::new(row(
                &topic, &sub, dead, &entry,
            ))));
            if let Some(expires) = entry.expires
                && !dead
            {
                self.timers.push(
                    expires,
                    TimerEvent::Expiry {
                        topic: topic.clone(),
                        subscription: sub.clone(),
                        key: sub_core.main.partition_key(&entry.message),
                        id: entry.id,
                    },
                );
            }
            let queue = if dead {
                &mut sub_core.dead_letter
            } else {
                &mut sub_core.main
            };
            queue.insert_uncommitted(entry, on_commit);
        }
        for (topic, seq, scheduled) in plan.scheduled {
            let Some(core) = locked.get_mut(&topic) else {
                continue;
            };
            ops.push(StoreOp::InsertScheduled {
                seq,
                topic: topic.clone(),
                at: scheduled.at,
                message: codec::encode(&scheduled.message),
            });
            self.timers.push(
                scheduled.at,
                TimerEvent::Scheduled {
                    topic: topic.clone(),
                    seq,
                },
            );
            core.scheduled.insert(seq, scheduled);
        }
        for (topic, message_id, seq) in plan.dedup {
            let Some(core) = locked.get_mut(&topic) else {
                continue;
            };
            let Some(window) = core.settings.duplicate_detection_window else {
                continue;
            };
            let cutoff = now.checked_sub(window).unwrap_or(SystemTime::UNIX_EPOCH);
            let mut pruned = false;
            while core.dedup_order.front().is_some_and(|(at, _)| *at < cutoff) {
                if let Some((at, id)) = core.dedup_order.pop_front()
                    && core.dedup.get(&id).is_some_and(|(a, _)| *a == at)
                {
                    core.dedup.remove(&id);
                }
                pruned = true;
            }
            if pruned {
                ops.push(StoreOp::PruneDedup {
                    topic: topic.clone(),
                    before: cutoff,
                });
            }
            core.dedup.insert(message_id.clone(), (now, seq));
            core.dedup_order.push_back((now, message_id.clone()));
            ops.push(StoreOp::PutDedup {
                topic,
                message_id,
                at: now,
                seq,
            });
        }
    }
}

/// The log's row of `entry`, placed in `topic/sub` (its dead-letter queue
/// when `dead`).
pub(crate) fn row(topic: &str, sub: &str, dead: bool, entry: &Entry) -> EntryRow {
    EntryRow {
        id: entry.id,
        topic: topic.to_owned(),
        subscription: sub.to_owned(),
        dead_letter: dead,
        seq: entry.seq,
        enqueued: entry.enqueued,
        expires: entry.expires,
        failures: entry.failures,
        dead_letter_reason: entry.dead_letter_reason.clone(),
        dead_letter_description: entry.dead_letter_description.clone(),
        message: codec::encode(&entry.message),
    }
}
