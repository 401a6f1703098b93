//! What a caller holds: a session lock ([`BrokerSession`]) and a peek-lock
//! receiver ([`BrokerReceiver`]). Both release what they hold on drop,
//! without counting a delivery (a clean close, as on Service Bus).

use std::pin::pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use nimbus_transport::{
    ReceiveError, ReceivedMessage, Receiver, RenewError, SessionLock, SessionStateError,
    SettleError, SettleReceipt, Settlement, SubQueue, TransientError,
};
use tokio::sync::Notify;

use crate::broker::{Inner, TopicState};
use crate::commit::OnCommit;
use crate::commit::Wakeups;
use crate::records::StoreOp;
use crate::state::EntryStatus;
use crate::timers::TimerEvent;

/// An exclusive lock on one session of a session-enabled subscription of
/// the embedded broker.
pub struct BrokerSession {
    pub(crate) inner: Arc<Inner>,
    pub(crate) topic: Arc<TopicState>,
    pub(crate) subscription: String,
    pub(crate) incarnation: u64,
    pub(crate) session_id: String,
    pub(crate) holder: u64,
    pub(crate) lock_duration: Duration,
    pub(crate) notify: Arc<Notify>,
    pub(crate) locked_until: Mutex<SystemTime>,
}

impl std::fmt::Debug for BrokerSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BrokerSession")
            .field("topic", &self.topic.name)
            .field("subscription", &self.subscription)
            .field("session_id", &self.session_id)
            .finish_non_exhaustive()
    }
}

impl BrokerSession {
    fn lost(&self) -> String {
        self.session_id.clone()
    }

    /// Runs `f` on the subscription if this lock is still current.
    fn with_owned<R>(
        &self,
        f: impl FnOnce(&mut crate::state::SubCore, SystemTime, &mut Wakeups) -> R,
    ) -> Option<R> {
        let now = self.inner.now();
        let mut wake = Wakeups::default();
        let result = {
            let mut core = self.topic.lock();
            if core.deleted {
                return None;
            }
            let sub = core
                .subs
                .get_mut(&self.subscription)
                .filter(|s| s.incarnation == self.incarnation)?;
            let owner = sub.main.session_owner(&self.session_id)?;
            if owner.holder != self.holder || owner.until <= now {
                return None;
            }
            f(sub, now, &mut wake)
        };
        wake.fire();
        Some(result)
    }
}

impl SessionLock for BrokerSession {
    fn session_id(&self) -> &str {
        &self.session_id
    }

    fn locked_until(&self) -> SystemTime {
        *self
            .locked_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    async fn receive(&self, max_wait: Duration) -> Result<Option<ReceivedMessage>, ReceiveError> {
        self.inner.healthy()?;
        let deadline = tokio::time::Instant::now() + max_wait;
        loop {
            let mut notified = pin!(self.notify.notified());
            notified.as_mut().enable();
            let taken = self.with_owned(|sub, now, wake| {
                let until = sub
                    .main
                    .session_owner(&self.session_id)
                    .map_or(now, |o| o.until);
                sub.main
                    .take_next(&self.session_id, self.holder, until, now, wake)
            });
            match taken {
                None => {
                    return Err(ReceiveError::SessionLockLost {
                        session_id: self.lost(),
                    });
                }
                Some(Some(message)) => return Ok(Some(message)),
                Some(None) => {}
            }
            if !crate::wait::notified_before(deadline, notified).await {
                return Ok(None);
            }
        }
    }

    async fn get_state(&self) -> Result<Option<Vec<u8>>, SessionStateError> {
        self.inner.healthy()?;
        self.with_owned(|sub, _, _| {
            sub.main
                .partition(&self.session_id)
                .and_then(|p| p.state.clone())
        })
        .ok_or_else(|| SessionStateError::SessionLockLost {
            session_id: self.lost(),
        })
    }

    async fn set_state(&self, state: Option<Vec<u8>>) -> Result<(), SessionStateError> {
        self.inner.healthy()?;
        let ack = self
            .with_owned(|sub, _, wake| {
                sub.main.set_state(&self.session_id, state.clone(), wake);
                self.inner.submit(vec![StoreOp::SetSessionState {
                    topic: self.topic.name.clone(),
                    subscription: self.subscription.clone(),
                    session: self.session_id.clone(),
                    state,
                }])
            })
            .ok_or_else(|| SessionStateError::SessionLockLost {
                session_id: self.lost(),
            })?;
        ack.committed().await.map_err(TransientError::from)?;
        Ok(())
    }

    async fn renew(&self) -> Result<SystemTime, RenewError> {
        self.inner.healthy()?;
        let until = self
            .with_owned(|sub, now, _| {
                let until = now + self.lock_duration;
                sub.main.renew_session(&self.session_id, until);
                until
            })
            .ok_or_else(|| RenewError::SessionLockLost {
                session_id: self.lost(),
            })?;
        self.inner.timers.push(
            until,
            TimerEvent::SessionLock {
                topic: self.topic.name.clone(),
                subscription: self.subscription.clone(),
                session: self.session_id.clone(),
                holder: self.holder,
            },
        );
        *self
            .locked_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = until;
        Ok(until)
    }

    async fn settle(&self, settlement: Settlement) -> Result<SettleReceipt, SettleError> {
        self.inner
            .settle(
                &self.topic,
                &self.subscription,
                self.incarnation,
                SubQueue::Main,
                Some((&self.session_id, self.holder)),
                settlement.into_parts(),
            )
            .await
    }

    async fn release(&self, message: ReceivedMessage) -> Result<(), SettleError> {
        self.inner.healthy()?;
        // Locks live in memory only: giving one back writes nothing.
        match self.with_owned(|sub, _, wake| sub.main.release_locked(message.lock_token, wake)) {
            None => Err(SettleError::SessionLockLost {
                session_id: self.lost(),
            }),
            Some(None) => Err(SettleError::LockLost {
                message_id: message.message.message_id.unwrap_or_default(),
            }),
            Some(Some(_)) => Ok(()),
        }
    }
}

impl Drop for BrokerSession {
    fn drop(&mut self) {
        let mut wake = Wakeups::default();
        {
            let mut core = self.topic.lock();
            if let Some(sub) = core
                .subs
                .get_mut(&self.subscription)
                .filter(|s| s.incarnation == self.incarnation)
                && sub
                    .main
                    .session_owner(&self.session_id)
                    .is_some_and(|o| o.holder == self.holder)
            {
                let released = sub.main.unlock_session(&self.session_id, &mut wake);
                if !released.is_empty() {
                    tracing::debug!(
                        session = %self.session_id,
                        released = released.len(),
                        "session closed with unsettled messages; they return uncounted"
                    );
                }
            }
        }
        wake.fire();
    }
}

/// A peek-lock receiver on a non-session subscription or a dead-letter queue
/// of the embedded broker.
pub struct BrokerReceiver {
    pub(crate) inner: Arc<Inner>,
    pub(crate) topic: Arc<TopicState>,
    pub(crate) subscription: String,
    pub(crate) incarnation: u64,
    pub(crate) queue: SubQueue,
    pub(crate) holder: u64,
    pub(crate) lock_duration: Duration,
    pub(crate) notify: Arc<Notify>,
}

impl std::fmt::Debug for BrokerReceiver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BrokerReceiver")
            .field("topic", &self.topic.name)
            .field("subscription", &self.subscription)
            .field("queue", &self.queue)
            .finish_non_exhaustive()
    }
}

impl BrokerReceiver {
    fn entity(&self) -> String {
        format!("{}/{}", self.topic.name, self.subscription)
    }
}

impl Receiver for BrokerReceiver {
    async fn receive(&self, max_wait: Duration) -> Result<Option<ReceivedMessage>, ReceiveError> {
        self.inner.healthy()?;
        let deadline = tokio::time::Instant::now() + max_wait;
        loop {
            let mut notified = pin!(self.notify.notified());
            notified.as_mut().enable();
            let now = self.inner.now();
            let until = now + self.lock_duration;
            let mut wake = Wakeups::default();
            let taken = {
                let mut core = self.topic.lock();
                match core
                    .subs
                    .get_mut(&self.subscription)
                    .filter(|s| s.incarnation == self.incarnation)
                {
                    None => None,
                    Some(sub) => {
                        let q = match self.queue {
                            SubQueue::Main => &mut sub.main,
                            SubQueue::DeadLetter => &mut sub.dead_letter,
                        };
                        Some(q.take_any(self.holder, until, now, &mut wake))
                    }
                }
            };
            wake.fire();
            match taken {
                None => {
                    return Err(ReceiveError::NotFound {
                        entity: self.entity(),
                    });
                }
                Some(Some(message)) => {
                    self.inner.timers.push(
                        until,
                        TimerEvent::MessageLock {
                            topic: self.topic.name.clone(),
                            subscription: self.subscription.clone(),
                            queue: self.queue,
                            token: message.lock_token,
                        },
                    );
                    return Ok(Some(message));
                }
                Some(None) => {}
            }
            if !crate::wait::notified_before(deadline, notified).await {
                return Ok(None);
            }
        }
    }

    async fn renew_lock(&self, message: &mut ReceivedMessage) -> Result<SystemTime, RenewError> {
        self.inner.healthy()?;
        let now = self.inner.now();
        let until = now + self.lock_duration;
        let renewed = {
            let mut core = self.topic.lock();
            core.subs
                .get_mut(&self.subscription)
                .filter(|s| s.incarnation == self.incarnation)
                .and_then(|sub| {
                    let q = match self.queue {
                        SubQueue::Main => &mut sub.main,
                        SubQueue::DeadLetter => &mut sub.dead_letter,
                    };
                    let entry = q.locked_mut(message.lock_token)?;
                    match &mut entry.status {
                        EntryStatus::Locked { until: u, .. } if *u > now => {
                            *u = until;
                            Some(())
                        }
                        _ => None,
                    }
                })
        };
        if renewed.is_none() {
            return Err(RenewError::LockLost {
                message_id: message.message.message_id.clone().unwrap_or_default(),
            });
        }
        self.inner.timers.push(
            until,
            TimerEvent::MessageLock {
                topic: self.topic.name.clone(),
                subscription: self.subscription.clone(),
                queue: self.queue,
                token: message.lock_token,
            },
        );
        message.locked_until = until;
        Ok(until)
    }

    async fn settle(&self, settlement: Settlement) -> Result<SettleReceipt, SettleError> {
        self.inner
            .settle(
                &self.topic,
                &self.subscription,
                self.incarnation,
                self.queue,
                None,
                settlement.into_parts(),
            )
            .await
    }

    async fn release(&self, message: ReceivedMessage) -> Result<(), SettleError> {
        self.inner.healthy()?;
        let now = self.inner.now();
        let mut wake = Wakeups::default();
        let released = {
            let mut core = self.topic.lock();
            core.subs
                .get_mut(&self.subscription)
                .filter(|s| s.incarnation == self.incarnation)
                .and_then(|sub| {
                    let q = match self.queue {
                        SubQueue::Main => &mut sub.main,
                        SubQueue::DeadLetter => &mut sub.dead_letter,
                    };
                    // A lapsed lock is the timer's to count; it is not
                    // this receiver's to give back.
                    let held = q.locked(message.lock_token).is_some_and(|e| {
                        matches!(e.status, EntryStatus::Locked { holder, until, .. }
                            if holder == self.holder && until > now)
                    });
                    if held {
                        q.release_locked(message.lock_token, &mut wake)
                    } else {
                        None
                    }
                })
        };
        wake.fire();
        match released {
            Some(_) => Ok(()),
            None => Err(SettleError::LockLost {
                message_id: message.message.message_id.unwrap_or_default(),
            }),
        }
    }

    async fn replay_dead_letter(&self, message: ReceivedMessage) -> Result<(), SettleError> {
        self.inner.healthy()?;
        if self.queue != SubQueue::DeadLetter {
            return Err(SettleError::Invalid {
                reason: "replay is only possible from a dead-letter queue receiver".to_owned(),
            });
        }
        let now = self.inner.now();
        let message_id = message.message.message_id.clone().unwrap_or_default();
        let lock_lost = || SettleError::LockLost {
            message_id: message_id.clone(),
        };
        let mut wake = Wakeups::default();
        let ack = {
            let mut core = self.topic.lock();
            let sub = core
                .subs
                .get_mut(&self.subscription)
                .filter(|s| s.incarnation == self.incarnation)
                .ok_or_else(lock_lost)?;
            let live = sub.dead_letter.locked(message.lock_token).is_some_and(
                |e| matches!(e.status, EntryStatus::Locked { until, .. } if until > now),
            );
            if !live {
                return Err(lock_lost());
            }
            if sub.main.sessionful && message.message.session_id.is_none() {
                return Err(SettleError::Invalid {
                    reason: format!(
                        "message '{message_id}' has no session id and '{}' requires one",
                        self.entity()
                    ),
                });
            }
            let Some(mut entry) = sub.dead_letter.remove_locked(message.lock_token, &mut wake)
            else {
                return Err(lock_lost());
            };
            let old_id = entry.id;
            entry.id = self.inner.alloc();
            entry.failures = 0;
            entry.dead_letter_reason = None;
            entry.dead_letter_description = None;
            entry.status = EntryStatus::Available;
            let row = crate::broker::row(&self.topic.name, &self.subscription, false, &entry);
            let mut on_commit = OnCommit::default();
            sub.main.insert_uncommitted(entry, &mut on_commit);
            self.inner.submit_with(
                vec![
                    StoreOp::DeleteEntry { id: old_id },
                    StoreOp::InsertEntry(Box::new(row)),
                ],
                on_commit,
            )
        };
        wake.fire();
        ack.committed().await.map_err(TransientError::from)?;
        Ok(())
    }
}

impl Drop for BrokerReceiver {
    fn drop(&mut self) {
        let mut wake = Wakeups::default();
        {
            let mut core = self.topic.lock();
            if let Some(sub) = core
                .subs
                .get_mut(&self.subscription)
                .filter(|s| s.incarnation == self.incarnation)
            {
                let q = match self.queue {
                    SubQueue::Main => &mut sub.main,
                    SubQueue::DeadLetter => &mut sub.dead_letter,
                };
                q.release_holder(self.holder, &mut wake);
            }
        }
        wake.fire();
    }
}
