//! Settling under a lock: complete, abandon or dead-letter the received
//! message, set the session's state, record inbox keys, and publish the
//! follow-ups, all validated before anything changes and committed as one
//! request (one frame of the log). The checks are the lock's: the message
//! lock still held, the session lock still the caller's.

use std::sync::{Arc, PoisonError};
use std::time::SystemTime;

use nimbus_transport::{
    Delivery, Disposition, Message, PublishError, SettleError, SettleReceipt, SettlementParts,
    SubQueue, TransientError,
};

use super::dead_letter::move_to_dead_letter;
use super::locking::Locked;
use super::plan::Plan;
use super::{Inner, TopicState};
use crate::codec;
use crate::commit::{OnCommit, Wakeups};
use crate::error::StoreError;
use crate::records::StoreOp;
use crate::state::{EntryStatus, SubCore};
use crate::store::Ack;

impl Inner {
    /// Applies a settlement on `topic/subscription` (queue `queue`), with
    /// `session` = (session id, holder) when done under a session lock.
    pub(crate) async fn settle(
        &self,
        topic: &Arc<TopicState>,
        subscription: &str,
        incarnation: u64,
        queue: SubQueue,
        session: Option<(&str, u64)>,
        mut parts: SettlementParts,
    ) -> Result<SettleReceipt, SettleError> {
        self.healthy()?;
        let now = self.now();
        // The publishes are moved into the plan, not cloned: the settlement
        // is consumed here either way.
        let publishes = std::mem::take(&mut parts.publishes);
        let publish_topics: Vec<String> = publishes.iter().map(|(t, _)| t.clone()).collect();
        let mut roots: Vec<&str> = vec![topic.name.as_str()];
        for t in &publish_topics {
            if !roots.contains(&t.as_str()) {
                roots.push(t);
            }
        }
        let mut wake = Wakeups::default();
        let result = self.with_topics(&roots, |locked| {
            self.settle_locked(
                locked,
                &topic.name,
                subscription,
                incarnation,
                queue,
                session,
                &parts,
                publishes,
                now,
                &mut wake,
            )
        });
        let (receipt, ack) = match result {
            Ok(r) => r?,
            Err(missing) if missing == topic.name => {
                return Err(match session {
                    Some((id, _)) => SettleError::SessionLockLost {
                        session_id: id.to_owned(),
                    },
                    None => SettleError::LockLost {
                        message_id: outcome_id(&parts),
                    },
                });
            }
            Err(missing) => return Err(SettleError::TopicNotFound { topic: missing }),
        };
        wake.fire();
        ack.committed().await.map_err(TransientError::from)?;
        Ok(receipt)
    }

    #[expect(
        clippy::too_many_arguments,
        reason = "the settlement context is spelled out rather than bundled"
    )]
    fn settle_locked(
        &self,
        locked: &mut Locked<'_>,
        topic: &str,
        subscription: &str,
        incarnation: u64,
        queue: SubQueue,
        session: Option<(&str, u64)>,
        parts: &SettlementParts,
        publishes: Vec<(String, Message)>,
        now: SystemTime,
        wake: &mut Wakeups,
    ) -> Result<(SettleReceipt, Ack), SettleError> {
        let mut on_commit = OnCommit::default();
        let lost = || match session {
            Some((id, _)) => SettleError::SessionLockLost {
                session_id: id.to_owned(),
            },
            None => SettleError::LockLost {
                message_id: outcome_id(parts),
            },
        };
        // 1. Validate everything before changing anything.
        {
            let core = locked.get(topic).ok_or_else(lost)?;
            let sub = core
                .subs
                .get(subscription)
                .filter(|s| s.incarnation == incarnation)
                .ok_or_else(lost)?;
            if let Some((id, holder)) = session {
                let owner = sub.main.session_owner(id);
                if !owner.is_some_and(|o| o.holder == holder && o.until > now) {
                    return Err(lost());
                }
            } else if parts.session_state.is_some() {
                return Err(SettleError::Invalid {
                    reason: "session state can only be set under a session lock".to_owned(),
                });
            }
            if let Some((message, disposition)) = &parts.outcome {
                let q = match queue {
                    SubQueue::Main => &sub.main,
                    SubQueue::DeadLetter => &sub.dead_letter,
                };
                let lock_lost = || SettleError::LockLost {
                    message_id: message.message_id.clone(),
                };
                let entry = q.locked(message.lock_token).ok_or_else(lock_lost)?;
                match entry.status {
                    EntryStatus::Locked { until, .. } if until > now => {}
                    _ => return Err(lock_lost()),
                }
                if let Some((id, _)) = session
                    && entry.message.session_id.as_deref() != Some(id)
                {
                    return Err(SettleError::Invalid {
                        reason: format!(
                            "message '{}' was not received in session '{id}'",
                            message.message_id
                        ),
                    });
                }
                if queue == SubQueue::DeadLetter
                    && matches!(disposition, Disposition::DeadLetter { .. })
                {
                    return Err(SettleError::Invalid {
                        reason: "the message is in the dead-letter queue already".to_owned(),
                    });
                }
            }
        }
        let mut plan = Plan::default();
        for (t, message) in publishes {
            self.plan_publish(locked, &t, message, now, &mut plan)
                .map_err(|e| match e {
                    PublishError::TopicNotFound { topic } => SettleError::TopicNotFound { topic },
                    PublishError::Transient(t) => SettleError::Transient(t),
                    other => SettleError::Invalid {
                        reason: other.to_string(),
                    },
                })?;
        }
        plan.check_size(self.max_request_bytes)
            .map_err(|reason| SettleError::Invalid {
                reason: format!("its messages were refused: {reason}"),
            })?;
        // 2. Apply.
        let mut ops = Vec::new();
        let sequence_numbers = std::mem::take(&mut plan.sequence_numbers);
        {
            let core = locked.get_mut(topic).ok_or_else(lost)?;
            let sub = core.subs.get_mut(subscription).ok_or_else(lost)?;
            if let Some((message, disposition)) = &parts.outcome {
                self.apply_disposition(
                    topic,
                    subscription,
                    sub,
                    queue,
                    message,
                    disposition,
                    now,
                    &mut ops,
                    wake,
                    &mut on_commit,
                );
            }
            if let (Some((id, _)), Some(state)) = (session, &parts.session_state) {
                sub.main.set_state(id, state.clone(), wake);
                ops.push(StoreOp::SetSessionState {
                    topic: topic.to_owned(),
                    subscription: subscription.to_owned(),
                    session: id.to_owned(),
                    state: state.clone(),
                });
            }
        }
        if !parts.inbox.is_empty() {
            self.inbox
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .record(&parts.inbox, now, &mut ops);
        }
        self.apply_plan(locked, plan, now, &mut ops, &mut on_commit);
        Ok((
            SettleReceipt::new(sequence_numbers),
            self.submit_with(ops, on_commit),
        ))
    }

    #[expect(
        clippy::too_many_arguments,
        reason = "the settlement context is spelled out rather than bundled"
    )]
    fn apply_disposition(
        &self,
        topic: &str,
        subscription: &str,
        sub: &mut SubCore,
        queue: SubQueue,
        message: &Delivery,
        disposition: &Disposition,
        now: SystemTime,
        ops: &mut Vec<StoreOp>,
        wake: &mut Wakeups,
        on_commit: &mut OnCommit,
    ) {
        let token = message.lock_token;
        match disposition {
            Disposition::Complete => {
                let q = match queue {
                    SubQueue::Main => &mut sub.main,
                    SubQueue::DeadLetter => &mut sub.dead_letter,
                };
                if let Some(entry) = q.remove_locked(token, wake) {
                    ops.push(StoreOp::DeleteEntry { id: entry.id });
                }
            }
            Disposition::Abandon { properties } => {
                let q = match queue {
                    SubQueue::Main => &mut sub.main,
                    SubQueue::DeadLetter => &mut sub.dead_letter,
                };
                let Some(entry) = q.locked_mut(token) else {
                    return;
                };
                if !properties.is_empty() {
                    for (k, v) in properties {
                        entry.message.properties.insert(k.clone(), v.clone());
                    }
                }
                let changed = (!properties.is_empty()).then(|| codec::encode(&entry.message));
                let id = entry.id;
                let session = entry.message.session_id.clone();
                let key = if q.sessionful {
                    session.unwrap_or_default()
                } else {
                    crate::state::NO_SESSION.to_owned()
                };
                if let Some(id) = q.release_locked(token, wake) {
                    self.count_failure(
                        topic,
                        subscription,
                        sub,
                        queue,
                        &key,
                        id,
                        changed,
                        now,
                        ops,
                        wake,
                        on_commit,
                    );
                } else {
                    tracing::warn!(id, "abandoned message vanished while settling");
                }
            }
            Disposition::DeadLetter {
                reason,
                description,
            } => {
                if let Some(entry) = sub.main.remove_locked(token, wake) {
                    move_to_dead_letter(sub, entry, reason, description, ops, on_commit);
                }
            }
        }
    }
}

fn outcome_id(parts: &SettlementParts) -> String {
    parts
        .outcome
        .as_ref()
        .map(|(delivery, _)| delivery.message_id.clone())
        .unwrap_or_default()
}

impl From<StoreError> for SettleError {
    fn from(value: StoreError) -> Self {
        SettleError::Transient(value.into())
    }
}
