//! [`Admin`] on the embedded broker: topics, subscriptions and their rules
//! created, listed and deleted, names and settings checked first. Each
//! change is one commit, acknowledged once it is on disk.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use nimbus_transport::{
    Admin, AdminError, DEFAULT_RULE_FILTER, DEFAULT_RULE_NAME, RuleDescription, SessionInfo,
    SubscriptionDescription, SubscriptionPath, SubscriptionSettings, TopicDescription,
    TopicSettings, TransientError,
};

use super::Broker;
use crate::broker::TopicState;
use crate::commit::Wakeups;
use crate::records::StoreOp;
use crate::rules::CompiledRule;
use crate::state::{SubCore, TopicCore};

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

    /// Checks a new subscription's settings.
    fn validate_subscription(&self, settings: &SubscriptionSettings) -> Result<(), AdminError> {
        if settings.max_delivery_count == 0 {
            return Err(AdminError::InvalidSetting {
                reason: "max_delivery_count must be at least 1".to_owned(),
            });
        }
        if settings.lock_duration < Duration::from_millis(1) {
            return Err(AdminError::InvalidSetting {
                reason: "lock_duration must be positive".to_owned(),
            });
        }
        if let Some(target) = &settings.forward_to
            && self.inner.topic(target).is_none()
        {
            return Err(AdminError::NotFound {
                entity: format!("forward_to topic '{target}'"),
            });
        }
        Ok(())
    }

    /// Validates a topic setting set.
    fn validate_topic(settings: &TopicSettings) -> Result<(), AdminError> {
        if settings.duplicate_detection_window == Some(Duration::ZERO) {
            return Err(AdminError::InvalidSetting {
                reason: "duplicate_detection_window must be positive when set".to_owned(),
            });
        }
        Ok(())
    }

    /// The set of topics (for admin listing).
    fn topic_names(&self) -> BTreeSet<String> {
        self.inner
            .topics
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .keys()
            .cloned()
            .collect()
    }
}

impl Admin for Broker {
    async fn create_topic(&self, name: &str, settings: TopicSettings) -> Result<(), AdminError> {
        self.inner.healthy()?;
        check_name("topic", name)?;
        Self::validate_topic(&settings)?;
        let ack = {
            let mut topics = self
                .inner
                .topics
                .write()
                .unwrap_or_else(PoisonError::into_inner);
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
        for name in self.topic_names() {
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
            .unwrap_or_else(PoisonError::into_inner)
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
        self.validate_subscription(&settings)?;
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
