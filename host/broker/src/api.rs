//! [`Broker`]: the public handle, implementing [`Transport`] and [`Admin`].

use std::pin::pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nimbus_transport::{
    AcceptSessionError, Admin, AdminError, CancelError, DEFAULT_RULE_FILTER, DEFAULT_RULE_NAME,
    Message, OpenReceiverError, PublishError, ReceiveError, ReceivedMessage, RuleDescription,
    SessionInfo, SessionSelector, SubQueue, SubscriptionDescription, SubscriptionPath,
    SubscriptionSettings, TopicDescription, TopicSettings, TransientError, Transport,
};

use crate::broker::{self, BrokerOptions, Inner, TopicState};
use crate::commit::Wakeups;
use crate::error::OpenError;
use crate::handles::{BrokerReceiver, BrokerSession};
use crate::records::StoreOp;
use crate::rules::CompiledRule;
use crate::state::{SubCore, TopicCore};
use crate::timers::TimerEvent;

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

fn not_found(entity: &str) -> AdminError {
    AdminError::NotFound {
        entity: entity.to_owned(),
    }
}

fn check_name(kind: &str, name: &str) -> Result<(), AdminError> {
    if name.is_empty() || name.len() > 260 || name.contains('/') || name.contains('\0') {
        return Err(AdminError::InvalidSetting {
            reason: format!("{kind} name '{name}' must be 1 to 260 characters without '/' or NUL"),
        });
    }
    Ok(())
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

    fn sub_description(topic: &str, name: &str, sub: &SubCore) -> SubscriptionDescription {
        SubscriptionDescription::new(
            topic,
            name,
            sub.settings.clone(),
            sub.main.len() as u64,
            sub.dead_letter.len() as u64,
        )
    }

    fn topic_description(name: &str, core: &TopicCore) -> TopicDescription {
        TopicDescription::new(name, core.settings.clone(), core.scheduled.len() as u64)
    }

    fn topic_or_admin(&self, name: &str) -> Result<Arc<TopicState>, AdminError> {
        self.inner
            .topic(name)
            .ok_or_else(|| not_found(&format!("topic '{name}'")))
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

impl Admin for Broker {
    async fn create_topic(&self, name: &str, settings: TopicSettings) -> Result<(), AdminError> {
        self.inner.healthy()?;
        check_name("topic", name)?;
        Inner::validate_topic(&settings)?;
        let ack = {
            let mut topics = self
                .inner
                .topics
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if topics.contains_key(name) {
                return Err(AdminError::AlreadyExists {
                    entity: format!("topic '{name}'"),
                });
            }
            topics.insert(
                name.to_owned(),
                Arc::new(TopicState {
                    id: self.inner.new_topic_id(),
                    name: name.to_owned(),
                    core: Mutex::new(TopicCore::new(settings.clone())),
                }),
            );
            self.inner.submit(vec![StoreOp::PutTopic {
                name: name.to_owned(),
                settings,
            }])
        };
        ack.committed().await.map_err(TransientError::from)?;
        Ok(())
    }

    async fn get_topic(&self, name: &str) -> Result<Option<TopicDescription>, AdminError> {
        Ok(self
            .inner
            .topic(name)
            .map(|t| Self::topic_description(name, &t.lock())))
    }

    async fn list_topics(&self) -> Result<Vec<TopicDescription>, AdminError> {
        let mut out = Vec::new();
        for name in self.inner.topic_names() {
            if let Some(t) = self.inner.topic(&name) {
                out.push(Self::topic_description(&name, &t.lock()));
            }
        }
        Ok(out)
    }

    async fn delete_topic(&self, name: &str) -> Result<(), AdminError> {
        self.inner.healthy()?;
        let mut wake = Wakeups::default();
        // Release the map's write lock before taking the topic's mutex:
        // publishers hold topic mutexes while reading the map.
        let state = self
            .inner
            .topics
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(name)
            .ok_or_else(|| not_found(&format!("topic '{name}'")))?;
        let ack = {
            let mut core = state.lock();
            core.deleted = true;
            for sub in core.subs.values() {
                wake.add(&sub.main.notify);
                wake.add(&sub.dead_letter.notify);
            }
            core.subs.clear();
            core.scheduled.clear();
            self.inner.submit(vec![StoreOp::DeleteTopic {
                name: name.to_owned(),
            }])
        };
        wake.fire();
        ack.committed().await.map_err(TransientError::from)?;
        Ok(())
    }

    async fn create_subscription(
        &self,
        path: &SubscriptionPath,
        settings: SubscriptionSettings,
    ) -> Result<(), AdminError> {
        self.create_subscription_with_rules(
            path,
            settings,
            vec![RuleDescription::new(DEFAULT_RULE_NAME, DEFAULT_RULE_FILTER)],
        )
        .await
    }

    async fn create_subscription_with_rules(
        &self,
        path: &SubscriptionPath,
        settings: SubscriptionSettings,
        rules: Vec<RuleDescription>,
    ) -> Result<(), AdminError> {
        self.inner.healthy()?;
        check_name("subscription", &path.subscription)?;
        self.inner.validate_subscription(&settings)?;
        let mut compiled = Vec::with_capacity(rules.len());
        for rule in rules {
            if rule.name.is_empty() {
                return Err(AdminError::InvalidSetting {
                    reason: "a rule needs a name".to_owned(),
                });
            }
            if compiled
                .iter()
                .any(|c: &CompiledRule| c.description.name == rule.name)
            {
                return Err(AdminError::InvalidSetting {
                    reason: format!("rule '{}' is listed twice for '{path}'", rule.name),
                });
            }
            compiled.push(CompiledRule::compile(rule)?);
        }
        let topic = self.topic_or_admin(&path.topic)?;
        let ack = {
            let mut core = topic.lock();
            if core.subs.contains_key(&path.subscription) {
                return Err(AdminError::AlreadyExists {
                    entity: format!("subscription '{path}'"),
                });
            }
            let incarnation = u64::try_from(self.inner.alloc()).unwrap_or_default();
            let mut sub = SubCore::new(settings.clone(), incarnation);
            let mut ops = vec![StoreOp::PutSubscription {
                topic: path.topic.clone(),
                name: path.subscription.clone(),
                settings,
            }];
            for rule in compiled {
                let description = &rule.description;
                ops.push(StoreOp::PutRule {
                    topic: path.topic.clone(),
                    subscription: path.subscription.clone(),
                    name: description.name.clone(),
                    filter: description.filter.clone(),
                    action: description.action.clone(),
                    order: self.inner.alloc(),
                });
                sub.rules.push(rule);
            }
            core.subs.insert(path.subscription.clone(), sub);
            self.inner.submit(ops)
        };
        ack.committed().await.map_err(TransientError::from)?;
        Ok(())
    }

    async fn get_subscription(
        &self,
        path: &SubscriptionPath,
    ) -> Result<Option<SubscriptionDescription>, AdminError> {
        Ok(self.inner.topic(&path.topic).and_then(|t| {
            t.lock()
                .subs
                .get(&path.subscription)
                .map(|s| Self::sub_description(&path.topic, &path.subscription, s))
        }))
    }

    async fn list_subscriptions(
        &self,
        topic: &str,
    ) -> Result<Vec<SubscriptionDescription>, AdminError> {
        let state = self.topic_or_admin(topic)?;
        let core = state.lock();
        Ok(core
            .subs
            .iter()
            .map(|(name, s)| Self::sub_description(topic, name, s))
            .collect())
    }

    async fn delete_subscription(&self, path: &SubscriptionPath) -> Result<(), AdminError> {
        self.inner.healthy()?;
        let topic = self.topic_or_admin(&path.topic)?;
        let mut wake = Wakeups::default();
        let ack = {
            let mut core = topic.lock();
            let sub = core
                .subs
                .remove(&path.subscription)
                .ok_or_else(|| not_found(&format!("subscription '{path}'")))?;
            wake.add(&sub.main.notify);
            wake.add(&sub.dead_letter.notify);
            for partition in sub.main.partitions.values() {
                wake.add(&partition.notify);
            }
            self.inner.submit(vec![StoreOp::DeleteSubscription {
                topic: path.topic.clone(),
                name: path.subscription.clone(),
            }])
        };
        wake.fire();
        ack.committed().await.map_err(TransientError::from)?;
        Ok(())
    }

    async fn create_rule(
        &self,
        path: &SubscriptionPath,
        rule: RuleDescription,
    ) -> Result<(), AdminError> {
        self.inner.healthy()?;
        if rule.name.is_empty() {
            return Err(AdminError::InvalidSetting {
                reason: "a rule needs a name".to_owned(),
            });
        }
        let compiled = CompiledRule::compile(rule.clone())?;
        let topic = self.topic_or_admin(&path.topic)?;
        let ack = {
            let mut core = topic.lock();
            let sub = core
                .subs
                .get_mut(&path.subscription)
                .ok_or_else(|| not_found(&format!("subscription '{path}'")))?;
            if sub.rules.iter().any(|r| r.description.name == rule.name) {
                return Err(AdminError::AlreadyExists {
                    entity: format!("rule '{}' on '{path}'", rule.name),
                });
            }
            sub.rules.push(compiled);
            self.inner.submit(vec![StoreOp::PutRule {
                topic: path.topic.clone(),
                subscription: path.subscription.clone(),
                name: rule.name,
                filter: rule.filter,
                action: rule.action,
                order: self.inner.alloc(),
            }])
        };
        ack.committed().await.map_err(TransientError::from)?;
        Ok(())
    }

    async fn delete_rule(&self, path: &SubscriptionPath, rule: &str) -> Result<(), AdminError> {
        self.inner.healthy()?;
        let topic = self.topic_or_admin(&path.topic)?;
        let ack = {
            let mut core = topic.lock();
            let sub = core
                .subs
                .get_mut(&path.subscription)
                .ok_or_else(|| not_found(&format!("subscription '{path}'")))?;
            let before = sub.rules.len();
            sub.rules.retain(|r| r.description.name != rule);
            if sub.rules.len() == before {
                return Err(not_found(&format!("rule '{rule}' on '{path}'")));
            }
            self.inner.submit(vec![StoreOp::DeleteRule {
                topic: path.topic.clone(),
                subscription: path.subscription.clone(),
                name: rule.to_owned(),
            }])
        };
        ack.committed().await.map_err(TransientError::from)?;
        Ok(())
    }

    async fn list_rules(
        &self,
        path: &SubscriptionPath,
    ) -> Result<Vec<RuleDescription>, AdminError> {
        let topic = self.topic_or_admin(&path.topic)?;
        let core = topic.lock();
        let sub = core
            .subs
            .get(&path.subscription)
            .ok_or_else(|| not_found(&format!("subscription '{path}'")))?;
        Ok(sub.rules.iter().map(|r| r.description.clone()).collect())
    }

    async fn list_sessions(&self, path: &SubscriptionPath) -> Result<Vec<SessionInfo>, AdminError> {
        let topic = self.topic_or_admin(&path.topic)?;
        let now = self.inner.now();
        let core = topic.lock();
        let sub = core
            .subs
            .get(&path.subscription)
            .ok_or_else(|| not_found(&format!("subscription '{path}'")))?;
        if !sub.main.sessionful {
            return Err(AdminError::InvalidSetting {
                reason: format!("subscription '{path}' does not require sessions"),
            });
        }
        // A message counts once its publish has committed, as it is handed
        // out only then (decision 0107): a crash can still take it back.
        let mut sessions: Vec<SessionInfo> = sub
            .main
            .partitions
            .iter()
            .map(|(id, p)| {
                let committed = p.entries.values().filter(|e| e.is_committed()).count();
                (id, p, committed)
            })
            .filter(|(_, p, committed)| *committed > 0 || p.state.is_some() || p.owner.is_some())
            .map(|(id, p, committed)| SessionInfo {
                session_id: id.clone(),
                state: p.state.clone(),
                active_messages: committed as u64,
                locked: p.owner.is_some_and(|o| o.until > now),
            })
            .collect();
        sessions.sort_by(|a, b| a.session_id.cmp(&b.session_id));
        Ok(sessions)
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
