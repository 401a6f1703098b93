//! [`Broker`]: the public handle, implementing [`Transport`] (here: publish,
//! peek, accept a session, open a receiver) and [`Admin`](nimbus_transport::Admin)
//! (in `admin`).

use std::pin::pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nimbus_transport::{
    AcceptSessionError, CancelError, Message, OpenReceiverError, PublishError, ReceiveError,
    ReceivedMessage, SessionSelector, SubQueue, SubscriptionPath, TransientError, Transport,
};

use crate::broker::{self, BrokerOptions, Footprint, Inner};
use crate::commit::Wakeups;
use crate::error::OpenError;
use crate::handles::{BrokerReceiver, BrokerSession};
use crate::records::StoreOp;
use crate::timers::TimerEvent;

mod admin;

/// The embedded broker. Cheap to clone; all clones share one broker.
///
/// Open it on a data directory with [`Broker::open`]; it rebuilds its state
/// from disk. Dropping the last clone (and every session and receiver)
/// stops the writer after it committed everything acknowledged.
#[derive(Clone)]
pub struct Broker {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Broker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Broker").finish_non_exhaustive()
    }
}

impl Broker {
    /// Opens (or creates) the broker in `options`' data directory and
    /// starts its timer task. Must be called inside a tokio runtime.
    ///
    /// # Errors
    ///
    /// [`OpenError`] when the directory or its log cannot be opened or
    /// holds data this build cannot read.
    pub async fn open(options: BrokerOptions) -> Result<Broker, OpenError> {
        let inner = broker::open(options)?;
        Ok(Broker { inner })
    }

    async fn commit(&self, ops: Vec<StoreOp>) -> Result<(), TransientError> {
        self.inner
            .submit(ops)
            .committed()
            .await
            .map_err(TransientError::from)
    }
}

impl Transport for Broker {
    type Session = BrokerSession;
    type Receiver = BrokerReceiver;

    async fn peek(
        &self,
        path: &SubscriptionPath,
        queue: SubQueue,
        session_id: Option<&str>,
        from_sequence_number: i64,
        max: usize,
    ) -> Result<Vec<ReceivedMessage>, ReceiveError> {
        self.inner.healthy()?;
        let entity = path.to_string();
        let missing = || ReceiveError::NotFound {
            entity: entity.clone(),
        };
        let topic = self.inner.topic(&path.topic).ok_or_else(missing)?;
        let core = topic.lock();
        let sub = core.subs.get(&path.subscription).ok_or_else(missing)?;
        let q = match queue {
            SubQueue::Main => &sub.main,
            SubQueue::DeadLetter => &sub.dead_letter,
        };
        Ok(q.peek(session_id, from_sequence_number, max))
    }

    async fn inbox_contains(&self, scope: &str, key: &str) -> Result<bool, TransientError> {
        self.inner.healthy()?;
        let now = self.inner.now();
        Ok(self
            .inner
            .inbox
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .contains(scope, key, now))
    }

    async fn publish(&self, topic: &str, messages: Vec<Message>) -> Result<Vec<i64>, PublishError> {
        self.inner.publish(topic, messages).await
    }

    async fn cancel_scheduled(&self, topic: &str, sequence_number: i64) -> Result<(), CancelError> {
        self.inner.healthy()?;
        let missing = || CancelError::NotFound {
            topic: topic.to_owned(),
            sequence_number,
        };
        let state = self.inner.topic(topic).ok_or_else(missing)?;
        let ack = {
            let mut core = state.lock();
            if core.scheduled.remove(&sequence_number).is_none() {
                return Err(missing());
            }
            self.inner.submit(vec![StoreOp::DeleteScheduled {
                seq: sequence_number,
            }])
        };
        ack.committed().await.map_err(TransientError::from)?;
        Ok(())
    }

    async fn accept_session(
        &self,
        path: &SubscriptionPath,
        selector: SessionSelector,
        timeout: Duration,
    ) -> Result<BrokerSession, AcceptSessionError> {
        self.inner.healthy()?;
        let entity = path.to_string();
        let missing = || AcceptSessionError::NotFound {
            entity: entity.clone(),
        };
        let topic = self.inner.topic(&path.topic).ok_or_else(missing)?;
        let deadline = tokio::time::Instant::now() + timeout;
        let notify = {
            let core = topic.lock();
            let sub = core.subs.get(&path.subscription).ok_or_else(missing)?;
            let reason = if !sub.settings.requires_session {
                Some("the subscription does not require sessions; open a receiver")
            } else if sub.settings.forward_to.is_some() {
                Some("the subscription forwards its messages")
            } else {
                None
            };
            if let Some(reason) = reason {
                return Err(AcceptSessionError::NotSessionful {
                    entity: entity.clone(),
                    reason: reason.to_owned(),
                });
            }
            Arc::clone(&sub.main.notify)
        };
        loop {
            let mut notified = pin!(notify.notified());
            notified.as_mut().enable();
            let now = self.inner.now();
            let mut wake = Wakeups::default();
            let accepted = {
                let mut core = topic.lock();
                let sub = core.subs.get_mut(&path.subscription).ok_or_else(missing)?;
                let key = match &selector {
                    SessionSelector::NextAvailable => {
                        sub.main.next_ready_session().map(str::to_owned)
                    }
                    SessionSelector::Named(id) => {
                        sub.main.session_owner(id).is_none().then(|| id.clone())
                    }
                };
                key.map(|key| {
                    let holder = self.inner.new_holder();
                    let until = now + sub.settings.lock_duration;
                    let session_notify = sub.main.lock_session(&key, holder, until, &mut wake);
                    BrokerSession {
                        inner: Arc::clone(&self.inner),
                        topic: Arc::clone(&topic),
                        subscription: path.subscription.clone(),
                        incarnation: sub.incarnation,
                        session_id: key,
                        holder,
                        lock_duration: sub.settings.lock_duration,
                        notify: session_notify,
                        locked_until: Mutex::new(until),
                    }
                })
            };
            wake.fire();
            if let Some(session) = accepted {
                self.inner.timers.push(
                    nimbus_transport::SessionLock::locked_until(&session),
                    TimerEvent::SessionLock {
                        topic: path.topic.clone(),
                        subscription: path.subscription.clone(),
                        session: session.session_id.clone(),
                        holder: session.holder,
                    },
                );
                return Ok(session);
            }
            if !crate::wait::notified_before(deadline, notified).await {
                return Err(match selector {
                    SessionSelector::NextAvailable => {
                        AcceptSessionError::NoSessionAvailable { entity }
                    }
                    SessionSelector::Named(session_id) => {
                        AcceptSessionError::SessionCannotBeLocked { entity, session_id }
                    }
                });
            }
        }
    }

    async fn receiver(
        &self,
        path: &SubscriptionPath,
        queue: SubQueue,
    ) -> Result<BrokerReceiver, OpenReceiverError> {
        self.inner.healthy()?;
        let entity = path.to_string();
        let missing = || OpenReceiverError::NotFound {
            entity: entity.clone(),
        };
        let topic = self.inner.topic(&path.topic).ok_or_else(missing)?;
        let core = topic.lock();
        let sub = core.subs.get(&path.subscription).ok_or_else(missing)?;
        if queue == SubQueue::Main {
            let reason = if sub.settings.requires_session {
                Some("the subscription requires sessions; accept a session")
            } else if sub.settings.forward_to.is_some() {
                Some("the subscription forwards its messages")
            } else {
                None
            };
            if let Some(reason) = reason {
                return Err(OpenReceiverError::NotReceivable {
                    entity,
                    reason: reason.to_owned(),
                });
            }
        }
        let notify = match queue {
            SubQueue::Main => Arc::clone(&sub.main.notify),
            SubQueue::DeadLetter => Arc::clone(&sub.dead_letter.notify),
        };
        let receiver = BrokerReceiver {
            inner: Arc::clone(&self.inner),
            topic: Arc::clone(&topic),
            subscription: path.subscription.clone(),
            incarnation: sub.incarnation,
            queue,
            holder: self.inner.new_holder(),
            lock_duration: sub.settings.lock_duration,
            notify,
        };
        drop(core);
        Ok(receiver)
    }
}

impl Broker {
    /// Waits until everything acknowledged so far is committed (a no-op
    /// marker op through the writer). Useful before copying the data dir.
    ///
    /// # Errors
    ///
    /// A [`TransientError`] if the store has failed.
    pub async fn flush(&self) -> Result<(), TransientError> {
        self.commit(vec![StoreOp::SequenceHighWater(0)]).await
    }

    /// What the broker holds in memory, counted (for a soak's report and
    /// for tests that show a structure let go).
    pub fn footprint(&self) -> Footprint {
        self.inner.footprint()
    }

    /// Why the broker cannot take changes now, if it cannot: its log
    /// cannot be written (a full disk, an I/O error), which it retries by
    /// itself and recovers from once writes work again, or a failure for
    /// good that needs a restart. For a host's health check (decision 0130).
    pub fn write_failure(&self) -> Option<String> {
        self.inner.store.failure().map(|e| e.to_string())
    }

    /// While `failing`, every write of the broker's log fails as on a full
    /// disk (half a frame written, then `StorageFull`). For tests of how
    /// the broker and its host behave and recover.
    #[doc(hidden)]
    pub fn inject_write_failures(&self, failing: bool) {
        self.inner.store.inject_write_failures(failing);
    }

    /// Keeps the log's writer from committing until the returned hold is
    /// released: operations stay waiting for their acknowledgement, and the
    /// messages they queue are not handed out. For tests of what a consumer
    /// sees before a commit (decision 0107); release before dropping the
    /// broker, whose shutdown waits for the writer.
    #[doc(hidden)]
    pub fn hold_commits(&self) -> CommitHold {
        let gate = std::sync::Arc::clone(self.inner.store.commit_gate());
        gate.hold();
        CommitHold(gate)
    }
}

/// See [`Broker::hold_commits`]; dropping it releases the writer.
#[doc(hidden)]
#[derive(Debug)]
pub struct CommitHold(std::sync::Arc<crate::commit::CommitGate>);

impl Drop for CommitHold {
    fn drop(&mut self) {
        self.0.release();
    }
}
