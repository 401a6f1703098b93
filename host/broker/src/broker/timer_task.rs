//! The timer task: sleeps until the earliest deadline on the heap
//! ([`crate::timers`]), then acts on each that is due: a message lock or a
//! session lock that lapsed (the delivery counted), a scheduled message
//! activated (routed then), a message whose time to live ended
//! (dead-lettered or dropped). Each re-checks the current state first, so a
//! deadline made stale by a renewal or a settlement does nothing. Its
//! changes are committed without waiting: losing one in a crash is harmless.

use std::sync::{Arc, Weak};

use nimbus_transport::SubQueue;

use super::Inner;
use super::dead_letter::move_to_dead_letter;
use super::plan::Plan;
use crate::commit::{OnCommit, Wakeups};
use crate::records::StoreOp;
use crate::state::EntryStatus;
use crate::timers::{TimerEvent, Timers};

/// Dead-letter reason for an expired message.
pub const REASON_EXPIRED: &str = "TTLExpiredException";

/// Runs until the broker is dropped (its `Drop` wakes this task to notice).
pub(super) async fn timer_task(inner: Weak<Inner>, timers: Arc<Timers>) {
    loop {
        let changed = timers.changed.notified();
        let (clock, next) = {
            let Some(strong) = inner.upgrade() else {
                return;
            };
            (Arc::clone(&strong.clock), timers.next_deadline())
        };
        match next {
            None => changed.await,
            Some(at) => {
                tokio::select! {
                    () = clock.sleep_until(at) => {}
                    () = changed => {}
                }
            }
        }
        let Some(strong) = inner.upgrade() else {
            return;
        };
        let due = timers.pop_due(strong.now());
        for event in due {
            strong.on_timer(event);
        }
    }
}

impl Inner {
    fn on_timer(&self, event: TimerEvent) {
        let now = self.now();
        let mut wake = Wakeups::default();
        match event {
            TimerEvent::MessageLock {
                topic,
                subscription,
                queue,
                token,
            } => {
                let Some(state) = self.topic(&topic) else {
                    return;
                };
                let mut core = state.lock();
                let Some(sub) = core.subs.get_mut(&subscription) else {
                    return;
                };
                let q = match queue {
                    SubQueue::Main => &mut sub.main,
                    SubQueue::DeadLetter => &mut sub.dead_letter,
                };
                let expired = q.locked(token).is_some_and(
                    |e| matches!(e.status, EntryStatus::Locked { until, .. } if until <= now),
                );
                if !expired {
                    return;
                }
                let key = q
                    .locked(token)
                    .map(|e| q.partition_key(&e.message))
                    .unwrap_or_default();
                if let Some(id) = q.release_locked(token, &mut wake) {
                    let mut ops = Vec::new();
                    let mut on_commit = OnCommit::default();
                    self.count_failure(
                        &topic,
                        &subscription,
                        sub,
                        queue,
                        &key,
                        id,
                        None,
                        now,
                        &mut ops,
                        &mut wake,
                        &mut on_commit,
                    );
                    self.store.submit_detached(ops, on_commit);
                }
            }
            TimerEvent::SessionLock {
                topic,
                subscription,
                session,
                holder,
            } => {
                let Some(state) = self.topic(&topic) else {
                    return;
                };
                let mut core = state.lock();
                let Some(sub) = core.subs.get_mut(&subscription) else {
                    return;
                };
                let expired = sub
                    .main
                    .session_owner(&session)
                    .is_some_and(|o| o.holder == holder && o.until <= now);
                if !expired {
                    return;
                }
                tracing::debug!(%topic, %subscription, %session, "session lock expired");
                let released = sub.main.unlock_session(&session, &mut wake);
                let mut ops = Vec::new();
                let mut on_commit = OnCommit::default();
                for id in released {
                    self.count_failure(
                        &topic,
                        &subscription,
                        sub,
                        SubQueue::Main,
                        &session,
                        id,
                        None,
                        now,
                        &mut ops,
                        &mut wake,
                        &mut on_commit,
                    );
                }
                self.store.submit_detached(ops, on_commit);
            }
            TimerEvent::Scheduled { topic, seq } => {
                let result = self.with_topics(&[topic.as_str()], |locked| {
                    let Some(core) = locked.get_mut(&topic) else {
                        return;
                    };
                    let Some(scheduled) = core.scheduled.remove(&seq) else {
                        return;
                    };
                    let mut plan = Plan::default();
                    let mut ops = vec![StoreOp::DeleteScheduled { seq }];
                    let mut on_commit = OnCommit::default();
                    // Activation routes with a fresh sequence number, so the
                    // message queues after everything enqueued before now.
                    let active_seq = self.alloc();
                    match self.route(
                        locked,
                        &topic,
                        scheduled.message,
                        active_seq,
                        now,
                        0,
                        &mut plan,
                    ) {
                        Ok(()) => self.apply_plan(locked, plan, now, &mut ops, &mut on_commit),
                        Err(error) => tracing::error!(
                            %topic, seq, %error,
                            "scheduled message can no longer be routed; dropped"
                        ),
                    }
                    self.store.submit_detached(ops, on_commit);
                });
                if result.is_err() {
                    tracing::debug!(%topic, seq, "scheduled message's topic is gone");
                }
            }
            TimerEvent::Expiry {
                topic,
                subscription,
                key,
                id,
            } => {
                let Some(state) = self.topic(&topic) else {
                    return;
                };
                let mut core = state.lock();
                let Some(sub) = core.subs.get_mut(&subscription) else {
                    return;
                };
                let Some(entry) = sub.main.get_mut(&key, id) else {
                    return;
                };
                if entry.expires.is_none_or(|x| x > now) {
                    return;
                }
                if let EntryStatus::Locked { until, .. } = entry.status {
                    // A locked message expires once its lock ends (settled,
                    // released or lapsed); look again then.
                    self.timers.push(
                        until.max(now),
                        TimerEvent::Expiry {
                            topic,
                            subscription,
                            key,
                            id,
                        },
                    );
                    return;
                }
                let mut ops = Vec::new();
                let mut on_commit = OnCommit::default();
                if let Some(entry) = sub.main.remove_id(&key, id, &mut wake) {
                    if sub.settings.dead_letter_on_expiry {
                        move_to_dead_letter(
                            sub,
                            entry,
                            REASON_EXPIRED,
                            "The message expired and was dead-lettered.",
                            &mut ops,
                            &mut on_commit,
                        );
                    } else {
                        ops.push(StoreOp::DeleteEntry { id });
                    }
                }
                self.store.submit_detached(ops, on_commit);
            }
        }
        wake.fire();
    }
}
