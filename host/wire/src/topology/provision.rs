//! Making a transport carry a [`Topology`] through its `Admin`, changing
//! only what differs, and recording every change.

use std::fmt;

use nimbus_transport::{
    Admin, AdminError, DEFAULT_RULE_NAME, RuleDescription, SubscriptionPath, SubscriptionSettings,
    TopicSettings,
};

use crate::addr::RESOLVER;
use crate::topology::layout::{ExpectedSubscription, Topology, forwarder_name};
use crate::topology::naming::TopologyError;

/// Why provisioning or pruning stopped.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ProvisionError {
    /// The description is invalid; nothing was changed.
    #[error(transparent)]
    Invalid(#[from] TopologyError),
    /// An admin operation failed. The mutations applied before it are in
    /// `applied`; running again resumes where it stopped.
    #[error("{step} failed after {} mutation(s): {source}", applied.len())]
    Admin {
        /// The operation that failed, e.g. `create rule 'to-billing' on billing/billing`.
        step: String,
        /// The transport's error.
        source: AdminError,
        /// What was changed before the failure.
        applied: Vec<Mutation>,
    },
}

/// One change made to the transport's topology.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Mutation {
    /// A topic was created.
    TopicCreated {
        /// The topic.
        topic: String,
    },
    /// A subscription was created, with its rules in the same step.
    SubscriptionCreated {
        /// The subscription.
        path: SubscriptionPath,
    },
    /// A subscription was deleted and created again (its messages are gone).
    SubscriptionRecreated {
        /// The subscription.
        path: SubscriptionPath,
        /// Which setting differed.
        reason: String,
    },
    /// A subscription was deleted (by [`prune`] only).
    SubscriptionDeleted {
        /// The subscription.
        path: SubscriptionPath,
    },
    /// A rule was added.
    RuleCreated {
        /// The subscription.
        path: SubscriptionPath,
        /// The rule name.
        rule: String,
    },
    /// A rule whose filter or action text differed was replaced.
    RuleReplaced {
        /// The subscription.
        path: SubscriptionPath,
        /// The rule name.
        rule: String,
    },
    /// A rule was deleted: `$Default` where it must not be, or by [`prune`].
    RuleDeleted {
        /// The subscription.
        path: SubscriptionPath,
        /// The rule name.
        rule: String,
    },
}

impl fmt::Display for Mutation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Mutation::TopicCreated { topic } => write!(f, "created topic {topic}"),
            Mutation::SubscriptionCreated { path } => write!(f, "created subscription {path}"),
            Mutation::SubscriptionRecreated { path, reason } => {
                write!(f, "re-created subscription {path} ({reason})")
            }
            Mutation::SubscriptionDeleted { path } => write!(f, "deleted subscription {path}"),
            Mutation::RuleCreated { path, rule } => write!(f, "created rule {rule} on {path}"),
            Mutation::RuleReplaced { path, rule } => write!(f, "replaced rule {rule} on {path}"),
            Mutation::RuleDeleted { path, rule } => write!(f, "deleted rule {rule} on {path}"),
        }
    }
}

/// A setting of an existing subscription that differs from the topology
/// and was left as it is (changing it would mean re-creating the
/// subscription and losing its messages).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SettingsDrift {
    /// The subscription.
    pub path: SubscriptionPath,
    /// The setting's name.
    pub setting: &'static str,
    /// What the topology asks for.
    pub expected: String,
    /// What the subscription has.
    pub actual: String,
}

impl fmt::Display for SettingsDrift {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {} is {} (topology says {}); left unchanged",
            self.path, self.setting, self.actual, self.expected
        )
    }
}

/// What [`provision`] or [`prune`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProvisionReport {
    /// Every mutation, in the order made.
    pub mutations: Vec<Mutation>,
    /// Settings that differ and were left alone.
    pub drift: Vec<SettingsDrift>,
}

impl ProvisionReport {
    /// True when nothing was changed.
    pub fn is_unchanged(&self) -> bool {
        self.mutations.is_empty()
    }
}

/// Applies mutations through an [`Admin`], recording each one, so that a
/// failure can hand back what was already applied.
struct Applier<'a, A> {
    admin: &'a A,
    report: ProvisionReport,
}

impl<'a, A: Admin> Applier<'a, A> {
    fn new(admin: &'a A) -> Self {
        Applier {
            admin,
            report: ProvisionReport::default(),
        }
    }

    fn fail(&mut self, step: String, source: AdminError) -> ProvisionError {
        ProvisionError::Admin {
            step,
            source,
            applied: std::mem::take(&mut self.report.mutations),
        }
    }

    async fn ensure_topic(&mut self, topic: &str) -> Result<(), ProvisionError> {
        match self.admin.get_topic(topic).await {
            Ok(Some(_)) => return Ok(()),
            Ok(None) => {}
            Err(e) => return Err(self.fail(format!("get topic '{topic}'"), e)),
        }
        match self
            .admin
            .create_topic(topic, TopicSettings::default())
            .await
        {
            Ok(()) => {
                self.report.mutations.push(Mutation::TopicCreated {
                    topic: topic.to_owned(),
                });
                Ok(())
            }
            // Created concurrently by another provisioner: what we wanted.
            Err(AdminError::AlreadyExists { .. }) => Ok(()),
            Err(e) => Err(self.fail(format!("create topic '{topic}'"), e)),
        }
    }

    async fn ensure_subscription(
        &mut self,
        expected: &ExpectedSubscription,
    ) -> Result<(), ProvisionError> {
        let path = &expected.path;
        let existing = match self.admin.get_subscription(path).await {
            Ok(existing) => existing,
            Err(e) => return Err(self.fail(format!("get subscription {path}"), e)),
        };
        match existing {
            None => self.create_subscription(expected, None).await,
            Some(actual) => {
                if let Some(reason) = structural_difference(&expected.settings, &actual.settings) {
                    if let Err(e) = self.admin.delete_subscription(path).await {
                        return Err(self.fail(format!("delete subscription {path}"), e));
                    }
                    self.create_subscription(expected, Some(reason)).await
                } else {
                    self.report
                        .drift
                        .extend(drift(path, &expected.settings, &actual.settings));
                    self.ensure_rules(path, &expected.rules).await
                }
            }
        }
    }

    /// Creates the subscription with its rules in one step: a subscription
    /// created bare and given its rules afterwards would, in between, match
    /// everything (`$Default`) or nothing, misrouting or dropping what is
    /// published meanwhile (say, while a handler for a new event type is
    /// being swapped in).
    ///
    /// `recreated` says why an existing one was deleted first, if it was.
    async fn create_subscription(
        &mut self,
        expected: &ExpectedSubscription,
        recreated: Option<String>,
    ) -> Result<(), ProvisionError> {
        let path = &expected.path;
        match self
            .admin
            .create_subscription_with_rules(path, expected.settings.clone(), expected.rules.clone())
            .await
        {
            Ok(()) => {
                self.report.mutations.push(match recreated {
                    None => Mutation::SubscriptionCreated { path: path.clone() },
                    Some(reason) => Mutation::SubscriptionRecreated {
                        path: path.clone(),
                        reason,
                    },
                });
                Ok(())
            }
            Err(e) => Err(self.fail(format!("create subscription {path}"), e)),
        }
    }

    /// Deletes `$Default` unless expected (first, so that the subscription
    /// briefly matches nothing rather than everything), then adds missing
    /// rules and replaces differing ones. Other rules are left alone.
    async fn ensure_rules(
        &mut self,
        path: &SubscriptionPath,
        expected: &[RuleDescription],
    ) -> Result<(), ProvisionError> {
        let actual = match self.admin.list_rules(path).await {
            Ok(rules) => rules,
            Err(e) => return Err(self.fail(format!("list rules of {path}"), e)),
        };
        let keeps_default = expected.iter().any(|r| r.name == DEFAULT_RULE_NAME);
        if !keeps_default && actual.iter().any(|r| r.name == DEFAULT_RULE_NAME) {
            self.delete_rule(path, DEFAULT_RULE_NAME).await?;
        }
        for rule in expected {
            match actual.iter().find(|r| r.name == rule.name) {
                Some(existing) if same_rule(existing, rule) => {}
                Some(_) => {
                    // Admin has no atomic update: for a moment the rule is
                    // absent, which drops rather than misroutes.
                    if let Err(e) = self.admin.delete_rule(path, &rule.name).await {
                        return Err(self.fail(format!("delete rule '{}' of {path}", rule.name), e));
                    }
                    self.create_rule(path, rule).await?;
                    self.report.mutations.push(Mutation::RuleReplaced {
                        path: path.clone(),
                        rule: rule.name.clone(),
                    });
                }
                None => {
                    self.create_rule(path, rule).await?;
                    self.report.mutations.push(Mutation::RuleCreated {
                        path: path.clone(),
                        rule: rule.name.clone(),
                    });
                }
            }
        }
        Ok(())
    }

    async fn create_rule(
        &mut self,
        path: &SubscriptionPath,
        rule: &RuleDescription,
    ) -> Result<(), ProvisionError> {
        match self.admin.create_rule(path, rule.clone()).await {
            Ok(()) => Ok(()),
            Err(e) => Err(self.fail(format!("create rule '{}' on {path}", rule.name), e)),
        }
    }

    async fn delete_rule(
        &mut self,
        path: &SubscriptionPath,
        rule: &str,
    ) -> Result<(), ProvisionError> {
        match self.admin.delete_rule(path, rule).await {
            Ok(()) => {
                self.report.mutations.push(Mutation::RuleDeleted {
                    path: path.clone(),
                    rule: rule.to_owned(),
                });
                Ok(())
            }
            Err(e) => Err(self.fail(format!("delete rule '{rule}' of {path}"), e)),
        }
    }
}

/// Makes the transport carry `topology`, changing only what differs.
///
/// Topics are created if missing and never changed. Each expected
/// subscription is created if missing, or deleted and re-created if its
/// session flag or forward target differs; `$Default` is deleted where the
/// topology does not keep it; each rule is added if missing or replaced if
/// its filter or action text differs. Nothing else is deleted. Run twice,
/// the second report is empty.
///
/// # Errors
///
/// [`ProvisionError::Invalid`] before any change for a bad description;
/// [`ProvisionError::Admin`] when the transport refuses an operation, with
/// the mutations applied before it.
pub async fn provision<A: Admin>(
    admin: &A,
    topology: &Topology,
) -> Result<ProvisionReport, ProvisionError> {
    topology.validate()?;
    let mut applier = Applier::new(admin);
    // Forwarders need their target topics, so all topics come first.
    applier.ensure_topic(RESOLVER).await?;
    for topic in topology.all_producer_topics() {
        applier.ensure_topic(topic).await?;
    }
    for expected in topology.expected() {
        applier.ensure_subscription(&expected).await?;
    }
    Ok(applier.report)
}

/// Removes forwarding the topology no longer asks for: on every producer
/// topic, rules of forwarders for event types their consumer no longer
/// consumes, and whole forwarders to endpoints that consume nothing or are
/// no longer in the topology.
///
/// A forwarder is recognised by its shape: a non-session subscription that
/// forwards to a topic other than `Resolver` and is named after that topic
/// (or `fwd-{topic}` on the topic itself). Every other subscription is left
/// alone, and so are the forwarders to the endpoints in `keep` (compared
/// ignoring case): what those consume is not known now. `topology` must
/// list every consumer the transport serves.
///
/// # Errors
///
/// As [`provision`].
pub async fn prune<A: Admin>(
    admin: &A,
    topology: &Topology,
    keep: &[&str],
) -> Result<ProvisionReport, ProvisionError> {
    topology.validate()?;
    let mut applier = Applier::new(admin);
    for producer in topology.all_producer_topics() {
        let subscriptions = match admin.list_subscriptions(producer).await {
            Ok(subscriptions) => subscriptions,
            Err(AdminError::NotFound { .. }) => continue,
            Err(e) => return Err(applier.fail(format!("list subscriptions of {producer}"), e)),
        };
        for subscription in subscriptions {
            let settings = &subscription.settings;
            let Some(target) = settings.forward_to.as_deref() else {
                continue;
            };
            if settings.requires_session
                || target.eq_ignore_ascii_case(RESOLVER)
                || subscription.name != forwarder_name(producer, target)
                || keep.iter().any(|k| k.eq_ignore_ascii_case(target))
            {
                continue;
            }
            let path = SubscriptionPath::new(producer, subscription.name.as_str());
            let consumed = topology
                .endpoints
                .iter()
                .find(|e| e.name == target)
                .map(|e| &e.consumes)
                .filter(|consumes| !consumes.is_empty());
            let Some(consumed) = consumed else {
                if let Err(e) = admin.delete_subscription(&path).await {
                    return Err(applier.fail(format!("delete subscription {path}"), e));
                }
                applier
                    .report
                    .mutations
                    .push(Mutation::SubscriptionDeleted { path });
                continue;
            };
            let rules = match admin.list_rules(&path).await {
                Ok(rules) => rules,
                Err(e) => return Err(applier.fail(format!("list rules of {path}"), e)),
            };
            for rule in rules.iter().filter(|r| !consumed.contains(&r.name)) {
                applier.delete_rule(&path, &rule.name).await?;
            }
        }
    }
    Ok(applier.report)
}

/// The endpoints the transport has queues for: every topic with a session
/// subscription of its own name (`E/E`), the Resolver's aside. A producer's
/// topic has only forwarders. An endpoint whose handler was deleted keeps
/// its queues, so this is what lists their blocked sessions and dead
/// letters.
///
/// # Errors
///
/// What the admin calls answer, except a topic deleted meanwhile.
pub async fn endpoint_topics<A: Admin>(admin: &A) -> Result<Vec<String>, AdminError> {
    let mut endpoints = Vec::new();
    for topic in admin.list_topics().await? {
        if topic.name.eq_ignore_ascii_case(RESOLVER) {
            continue;
        }
        let own = SubscriptionPath::new(topic.name.as_str(), topic.name.as_str());
        match admin.get_subscription(&own).await {
            Ok(Some(subscription)) if subscription.settings.requires_session => {
                endpoints.push(topic.name);
            }
            Ok(_) | Err(AdminError::NotFound { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(endpoints)
}

/// Why an existing subscription must be re-created: its session flag or
/// forward target differs (compared on the last path segment, ignoring
/// case, as upstream does).
fn structural_difference(
    expected: &SubscriptionSettings,
    actual: &SubscriptionSettings,
) -> Option<String> {
    if expected.requires_session != actual.requires_session {
        return Some(format!(
            "requires_session is {}, expected {}",
            actual.requires_session, expected.requires_session
        ));
    }
    let last = |t: &Option<String>| {
        t.as_deref()
            .map(|t| t.rsplit('/').next().unwrap_or(t).to_ascii_lowercase())
    };
    if last(&expected.forward_to) != last(&actual.forward_to) {
        return Some(format!(
            "forward_to is {:?}, expected {:?}",
            actual.forward_to, expected.forward_to
        ));
    }
    None
}

fn drift(
    path: &SubscriptionPath,
    expected: &SubscriptionSettings,
    actual: &SubscriptionSettings,
) -> Vec<SettingsDrift> {
    let mut drift = Vec::new();
    let mut check = |setting: &'static str, expected: String, actual: String| {
        if expected != actual {
            drift.push(SettingsDrift {
                path: path.clone(),
                setting,
                expected,
                actual,
            });
        }
    };
    check(
        "lock_duration",
        format!("{:?}", expected.lock_duration),
        format!("{:?}", actual.lock_duration),
    );
    check(
        "max_delivery_count",
        expected.max_delivery_count.to_string(),
        actual.max_delivery_count.to_string(),
    );
    check(
        "default_message_ttl",
        format!("{:?}", expected.default_message_ttl),
        format!("{:?}", actual.default_message_ttl),
    );
    check(
        "dead_letter_on_expiry",
        expected.dead_letter_on_expiry.to_string(),
        actual.dead_letter_on_expiry.to_string(),
    );
    drift
}

/// Filter and action compared ordinally, an absent action equal to an empty one.
fn same_rule(a: &RuleDescription, b: &RuleDescription) -> bool {
    a.filter == b.filter && a.action.as_deref().unwrap_or("") == b.action.as_deref().unwrap_or("")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forward_targets_compare_on_the_last_segment_ignoring_case() {
        let expected = SubscriptionSettings::forwarding_to("billing");
        let same = SubscriptionSettings::forwarding_to("sb://ns/Billing");
        assert_eq!(structural_difference(&expected, &same), None);
        let other = SubscriptionSettings::forwarding_to("orders");
        assert!(structural_difference(&expected, &other).is_some());
        assert!(structural_difference(&expected, &SubscriptionSettings::sessions()).is_some());
    }

    #[test]
    fn absent_and_empty_actions_are_the_same_rule() {
        let plain = RuleDescription::new("r", "1=1");
        assert!(same_rule(
            &plain,
            &RuleDescription::new("r", "1=1").with_action("")
        ));
        assert!(!same_rule(&plain, &RuleDescription::new("r", "1 = 1")));
    }
}
