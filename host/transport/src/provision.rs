//! NimBus topology provisioning, written against [`Admin`] only.
//!
//! The host calls [`provision`] at start-up (and whenever a handler is
//! added) with a [`Topology`]: the endpoints, the event types each consumes
//! and any extra producer topics. It makes the transport carry the NimBus
//! topology of `reference/nimbus-platform.md` §2: the `Resolver` topic, each
//! endpoint's topic with its session inbox, Resolver forwarder, `Deferred`
//! parking and `DeferredProcessor` subscriptions, and on every producer
//! topic one forwarding subscription per consumer with one rule per event
//! type it consumes. [`prune`] is the separate, explicit removal of
//! forwarders for event types no longer consumed (the host calls it when a
//! handler is deleted).
//!
//! Key decisions (`docs/decisions/0060-topology-provisioning.md`):
//! - **Zero churn.** Provisioning compares before it mutates and returns a
//!   [`ProvisionReport`] of every mutation; applied twice, the second report
//!   is empty. It never deletes what it does not recognise; only a
//!   subscription whose session flag or forward target differs is deleted
//!   and re-created, as upstream does. Other settings that differ (lock
//!   duration, TTL, ...) are reported as [`SettingsDrift`], never "fixed",
//!   because the only fix is to re-create the subscription and lose its
//!   messages.
//! - **An endpoint consumes its own follow-ups.** Upstream skips the
//!   forwarder from a topic to itself; in nimbus every handler publishes
//!   to its own endpoint's topic, so an endpoint consuming a type it also
//!   publishes would silently never receive it. The self-forwarder is named
//!   `fwd-{E}` because `E` is taken by the endpoint's inbox; endpoint names
//!   may not start with `fwd-`, nor be one of NimBus's fixed ids, so names
//!   never collide.
//! - **Parked messages never expire silently** (SEMANTICS.md §4, F9): the
//!   `Deferred` subscription has no TTL and dead-letters on expiry should a
//!   message carry its own TTL.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::time::Duration;

use crate::{
    Admin, AdminError, DEFAULT_LOCK_DURATION, DEFAULT_MAX_DELIVERY_COUNT, DEFAULT_RULE_FILTER,
    DEFAULT_RULE_NAME, RuleDescription, SubscriptionPath, SubscriptionSettings, TopicSettings,
};

/// The Resolver's topic and its session subscription.
pub const RESOLVER: &str = "Resolver";
/// The `To` of a scheduled retry, rewritten to the endpoint by its inbox.
pub const RETRY: &str = "Retry";
/// The `To` of a continuation, rewritten to the endpoint by its inbox.
pub const CONTINUATION: &str = "Continuation";
/// The parking subscription of an endpoint topic.
pub const DEFERRED: &str = "Deferred";
/// The replay-trigger subscription of an endpoint topic.
pub const DEFERRED_PROCESSOR: &str = "DeferredProcessor";
/// The `From` of operator (Manager) messages.
pub const MANAGER: &str = "Manager";
/// The prefix of a forwarder whose consumer is the producer itself.
pub const SELF_FORWARDER_PREFIX: &str = "fwd-";

/// NimBus's fixed ids: an endpoint or producer topic may not be named so,
/// because the rules route on them (`To = 'Retry'`, ...). `self` is
/// upstream's placeholder for "this message".
const RESERVED_NAMES: [&str; 7] = [
    RESOLVER,
    MANAGER,
    CONTINUATION,
    RETRY,
    DEFERRED_PROCESSOR,
    DEFERRED,
    "self",
];

/// Service Bus's limit on subscription and rule names. An endpoint name is
/// also a subscription name, and `fwd-{name}` must fit too.
const MAX_ENTITY_NAME: usize = 50;
/// The longest endpoint name, so that `fwd-{name}` is a valid subscription name.
pub const MAX_ENDPOINT_NAME: usize = MAX_ENTITY_NAME - SELF_FORWARDER_PREFIX.len();
/// The longest event type id (it names a rule).
pub const MAX_EVENT_TYPE: usize = MAX_ENTITY_NAME;

/// One endpoint: its name (also its topic's and inbox's) and the event
/// types its handlers consume.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    name: String,
    consumes: BTreeSet<String>,
}

impl Endpoint {
    /// An endpoint named `name` that consumes nothing yet.
    pub fn new(name: impl Into<String>) -> Self {
        Endpoint {
            name: name.into(),
            consumes: BTreeSet::new(),
        }
    }

    /// Adds event types this endpoint consumes.
    pub fn consumes<I, S>(mut self, event_types: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.consumes
            .extend(event_types.into_iter().map(Into::into));
        self
    }

    /// The endpoint name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The event types it consumes, sorted.
    pub fn consumed(&self) -> &BTreeSet<String> {
        &self.consumes
    }
}

/// What to provision: endpoints, extra producer topics, subscription settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topology {
    endpoints: Vec<Endpoint>,
    producer_topics: BTreeSet<String>,
    lock_duration: Duration,
    max_delivery_count: u32,
}

impl Default for Topology {
    fn default() -> Self {
        Topology::new()
    }
}

impl Topology {
    /// An empty topology with upstream's settings (lock 30 s, max delivery
    /// count 10).
    pub fn new() -> Self {
        Topology {
            endpoints: Vec::new(),
            producer_topics: BTreeSet::new(),
            lock_duration: DEFAULT_LOCK_DURATION,
            max_delivery_count: DEFAULT_MAX_DELIVERY_COUNT,
        }
    }

    /// Adds an endpoint (its topic is a producer topic too).
    pub fn endpoint(mut self, endpoint: Endpoint) -> Self {
        self.endpoints.push(endpoint);
        self
    }

    /// Adds a topic something outside the endpoints publishes to; it gets
    /// forwarders to every consumer. An endpoint's own topic need not be
    /// listed.
    pub fn producer_topic(mut self, topic: impl Into<String>) -> Self {
        self.producer_topics.insert(topic.into());
        self
    }

    /// Sets the lock duration of every subscription.
    pub fn lock_duration(mut self, duration: Duration) -> Self {
        self.lock_duration = duration;
        self
    }

    /// Sets the max delivery count of every subscription.
    pub fn max_delivery_count(mut self, count: u32) -> Self {
        self.max_delivery_count = count;
        self
    }

    /// The endpoints, in the order added.
    pub fn endpoints(&self) -> &[Endpoint] {
        &self.endpoints
    }

    /// Checks names and settings; [`provision`] and [`prune`] call it first.
    ///
    /// # Errors
    ///
    /// [`TopologyError`] naming the first bad name or setting.
    pub fn validate(&self) -> Result<(), TopologyError> {
        if self.max_delivery_count == 0 {
            return Err(TopologyError::InvalidSetting {
                reason: "max delivery count must be at least 1".to_owned(),
            });
        }
        if self.lock_duration < Duration::from_secs(1) {
            return Err(TopologyError::InvalidSetting {
                reason: format!(
                    "lock duration must be at least 1 s, got {:?}",
                    self.lock_duration
                ),
            });
        }
        // Service Bus entity names are case-insensitive: two endpoints that
        // differ only in case would be one topic there.
        let mut seen: BTreeMap<String, &str> = BTreeMap::new();
        for endpoint in &self.endpoints {
            check_name("endpoint", &endpoint.name, MAX_ENDPOINT_NAME, false)?;
            if let Some(first) = seen.insert(endpoint.name.to_ascii_lowercase(), &endpoint.name) {
                return Err(TopologyError::DuplicateEndpoint {
                    first: first.to_owned(),
                    second: endpoint.name.clone(),
                });
            }
            for event_type in &endpoint.consumes {
                check_event_type(event_type)?;
            }
        }
        for topic in &self.producer_topics {
            check_name("producer topic", topic, MAX_ENTITY_NAME, false)?;
        }
        Ok(())
    }

    /// Every producer topic: the endpoints' topics and the extra ones,
    /// without duplicates, endpoints first.
    fn all_producer_topics(&self) -> Vec<&str> {
        let mut topics: Vec<&str> = self.endpoints.iter().map(|e| e.name.as_str()).collect();
        for extra in &self.producer_topics {
            if !topics.iter().any(|t| t.eq_ignore_ascii_case(extra)) {
                topics.push(extra);
            }
        }
        topics
    }

    fn settings(&self) -> SubscriptionSettings {
        SubscriptionSettings::default()
            .with_lock_duration(self.lock_duration)
            .with_max_delivery_count(self.max_delivery_count)
    }

    fn session_settings(&self) -> SubscriptionSettings {
        SubscriptionSettings {
            requires_session: true,
            ..self.settings()
        }
    }

    /// The full expected layout, topic by topic.
    fn expected(&self) -> Vec<ExpectedSubscription> {
        let mut subscriptions = vec![ExpectedSubscription {
            path: SubscriptionPath::new(RESOLVER, RESOLVER),
            settings: self.session_settings(),
            rules: vec![RuleDescription::new(DEFAULT_RULE_NAME, DEFAULT_RULE_FILTER)],
        }];
        for endpoint in &self.endpoints {
            subscriptions.extend(self.endpoint_subscriptions(&endpoint.name));
        }
        for producer in self.all_producer_topics() {
            for consumer in self.endpoints.iter().filter(|c| !c.consumes.is_empty()) {
                subscriptions.push(self.forwarder(producer, consumer));
            }
        }
        subscriptions
    }

    fn endpoint_subscriptions(&self, e: &str) -> [ExpectedSubscription; 4] {
        let inbox = ExpectedSubscription {
            path: SubscriptionPath::new(e, e),
            settings: self.session_settings(),
            rules: vec![
                RuleDescription::new(format!("to-{e}"), format!("user.To = '{e}'")),
                RuleDescription::new("retry", format!("user.To = '{RETRY}'"))
                    .with_action(format!("SET user.To = '{e}'; SET user.From = '{RETRY}'")),
                RuleDescription::new("continuation", format!("user.To = '{CONTINUATION}'"))
                    .with_action(format!(
                        "SET user.To = '{e}'; SET user.From = '{CONTINUATION}'"
                    )),
            ],
        };
        let resolver = ExpectedSubscription {
            path: SubscriptionPath::new(e, RESOLVER),
            settings: SubscriptionSettings {
                forward_to: Some(RESOLVER.to_owned()),
                ..self.settings()
            },
            rules: vec![
                RuleDescription::new(format!("from-{e}"), format!("user.To = '{RESOLVER}'"))
                    .with_action(format!("SET user.From = '{e}'")),
                RuleDescription::new(format!("to-{e}"), format!("user.To = '{e}'")),
            ],
        };
        let deferred = ExpectedSubscription {
            path: SubscriptionPath::new(e, DEFERRED),
            // No TTL, and dead-letter on expiry for messages that carry
            // their own: a parked event never disappears silently (F9).
            settings: SubscriptionSettings {
                dead_letter_on_expiry: true,
                ..self.session_settings()
            },
            rules: vec![RuleDescription::new(
                "DeferredFilter",
                format!("user.To = '{DEFERRED}' AND user.OriginalSessionId IS NOT NULL"),
            )],
        };
        let processor = ExpectedSubscription {
            path: SubscriptionPath::new(e, DEFERRED_PROCESSOR),
            settings: self.settings(),
            rules: vec![RuleDescription::new(
                "DeferredProcessorFilter",
                format!("user.To = '{DEFERRED_PROCESSOR}'"),
            )],
        };
        [inbox, resolver, deferred, processor]
    }

    fn forwarder(&self, producer: &str, consumer: &Endpoint) -> ExpectedSubscription {
        let c = &consumer.name;
        ExpectedSubscription {
            path: SubscriptionPath::new(producer, forwarder_name(producer, c)),
            settings: SubscriptionSettings {
                forward_to: Some(c.clone()),
                ..self.settings()
            },
            rules: consumer
                .consumes
                .iter()
                .map(|et| forwarding_rule(producer, c, et))
                .collect(),
        }
    }
}

/// The name of the forwarder on `producer`'s topic to `consumer`'s topic:
/// the consumer's name, or `fwd-{consumer}` when that is the producer's own
/// inbox.
pub fn forwarder_name(producer: &str, consumer: &str) -> String {
    if producer.eq_ignore_ascii_case(consumer) {
        format!("{SELF_FORWARDER_PREFIX}{consumer}")
    } else {
        consumer.to_owned()
    }
}

/// The rule on `producer`'s forwarder to `consumer` for one event type. It
/// matches only original publishes (no `From`), so a forwarded copy is never
/// forwarded again, and gives each consumer's copy a fresh EventId.
pub fn forwarding_rule(producer: &str, consumer: &str, event_type: &str) -> RuleDescription {
    RuleDescription::new(
        event_type,
        format!(
            "user.EventTypeId = '{event_type}' AND user.MessageType = 'EventRequest' AND user.From IS NULL"
        ),
    )
    .with_action(format!(
        "SET user.From = '{producer}'; SET user.EventId = newid(); SET user.To = '{consumer}'"
    ))
}

/// Checks one endpoint name as [`Topology::validate`] does (length,
/// characters, fixed ids, the `fwd-` prefix), so a caller that discovers
/// endpoints (the handlers directory) can refuse a name before it reaches a
/// topology, where it would fail the whole provisioning. Uniqueness ignoring
/// case needs every name; the caller checks that.
///
/// # Errors
///
/// [`TopologyError::InvalidName`] with the reason.
pub fn check_endpoint_name(name: &str) -> Result<(), TopologyError> {
    check_name("endpoint", name, MAX_ENDPOINT_NAME, false)
}

/// Checks an event type against the topology's rules: it names a
/// forwarding rule and goes into its filter, so a handler declaring one the
/// topology refuses is refused when it loads, not when provisioning.
///
/// # Errors
///
/// [`TopologyError::InvalidName`] with the reason.
pub fn check_event_type(event_type: &str) -> Result<(), TopologyError> {
    check_name("event type", event_type, MAX_EVENT_TYPE, true)
}

/// Checks an entity or rule name; `reservable` names (event types, which
/// only name rules) may also be a fixed id or start with `fwd-`.
fn check_name(
    what: &'static str,
    name: &str,
    max: usize,
    reservable: bool,
) -> Result<(), TopologyError> {
    let invalid = |reason: String| TopologyError::InvalidName {
        what,
        name: name.to_owned(),
        reason,
    };
    if name.is_empty() || name.len() > max {
        return Err(invalid(format!("must be 1 to {max} characters")));
    }
    if !name.starts_with(|c: char| c.is_ascii_alphanumeric()) {
        return Err(invalid("must start with a letter or digit".to_owned()));
    }
    // The name goes verbatim into SQL string literals and entity paths.
    if let Some(bad) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_')))
    {
        return Err(invalid(format!(
            "contains '{bad}'; only letters, digits, '.', '-' and '_' are allowed"
        )));
    }
    if !reservable {
        if let Some(reserved) = RESERVED_NAMES.iter().find(|r| r.eq_ignore_ascii_case(name)) {
            return Err(invalid(format!("'{reserved}' is a NimBus fixed id")));
        }
        let prefix = name.get(..SELF_FORWARDER_PREFIX.len());
        if prefix.is_some_and(|p| p.eq_ignore_ascii_case(SELF_FORWARDER_PREFIX)) {
            return Err(invalid(format!(
                "the prefix '{SELF_FORWARDER_PREFIX}' is reserved for self-forwarders"
            )));
        }
    }
    Ok(())
}

/// One subscription as the topology expects it.
#[derive(Debug, Clone)]
struct ExpectedSubscription {
    path: SubscriptionPath,
    settings: SubscriptionSettings,
    /// Every rule it must have; `$Default` is deleted unless listed here.
    rules: Vec<RuleDescription>,
}

/// Why a topology cannot be provisioned.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TopologyError {
    /// A name cannot be used.
    #[error("{what} name '{name}' is invalid: {reason}")]
    InvalidName {
        /// What the name names (`endpoint`, `event type`, `producer topic`).
        what: &'static str,
        /// The name.
        name: String,
        /// Why it is invalid.
        reason: String,
    },
    /// Two endpoints share a name (ignoring case, as Service Bus does).
    #[error("endpoints '{first}' and '{second}' have the same name (names ignore case)")]
    DuplicateEndpoint {
        /// The first.
        first: String,
        /// The second.
        second: String,
    },
    /// A setting is out of range.
    #[error("invalid topology setting: {reason}")]
    InvalidSetting {
        /// What is wrong.
        reason: String,
    },
}

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

/// One entity a namespace must hold for a topology: what
/// [`requirements`] lists for a transport that cannot create entities.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Requirement {
    /// A topic.
    Topic {
        /// Its name.
        name: String,
    },
    /// A subscription, with the settings and rules it must have.
    Subscription {
        /// Where it is.
        path: SubscriptionPath,
        /// Its settings.
        settings: SubscriptionSettings,
        /// Every rule it must have; no `$Default` unless listed.
        rules: Vec<RuleDescription>,
    },
}

impl fmt::Display for Requirement {
    /// What an operator creating it by hand (portal, Bicep, `az`) needs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Requirement::Topic { name } => write!(f, "topic {name}"),
            Requirement::Subscription {
                path,
                settings,
                rules,
            } => {
                write!(f, "subscription {path}")?;
                if settings.requires_session {
                    f.write_str(", requires sessions")?;
                }
                if let Some(target) = &settings.forward_to {
                    write!(f, ", forwards to {target}")?;
                }
                write!(
                    f,
                    ", lock duration {}s, max delivery count {}",
                    settings.lock_duration.as_secs(),
                    settings.max_delivery_count
                )?;
                if settings.dead_letter_on_expiry {
                    f.write_str(", dead-letters on expiry")?;
                }
                if let Some(ttl) = settings.default_message_ttl {
                    write!(f, ", message TTL {}s", ttl.as_secs())?;
                }
                f.write_str("; rules:")?;
                for rule in rules {
                    write!(f, " [{}: {}", rule.name, rule.filter)?;
                    if let Some(action) = &rule.action {
                        write!(f, " / {action}")?;
                    }
                    f.write_str("]")?;
                }
                Ok(())
            }
        }
    }
}

/// Every topic and subscription `topology` needs, topics first: what
/// [`provision`] would create, for a transport that cannot (Service Bus
/// reached over AMQP alone, where entities are made through the
/// namespace's management API or by an operator).
///
/// # Errors
///
/// [`TopologyError`] for a bad description.
pub fn requirements(topology: &Topology) -> Result<Vec<Requirement>, TopologyError> {
    topology.validate()?;
    let mut needed = vec![Requirement::Topic {
        name: RESOLVER.to_owned(),
    }];
    needed.extend(
        topology
            .all_producer_topics()
            .into_iter()
            .map(|topic| Requirement::Topic {
                name: topic.to_owned(),
            }),
    );
    needed.extend(
        topology
            .expected()
            .into_iter()
            .map(|expected| Requirement::Subscription {
                path: expected.path,
                settings: expected.settings,
                rules: expected.rules,
            }),
    );
    Ok(needed)
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

    fn names(subscriptions: &[ExpectedSubscription]) -> Vec<String> {
        subscriptions.iter().map(|s| s.path.to_string()).collect()
    }

    #[test]
    fn layout_has_every_entity_and_a_self_forwarder() {
        let topology = Topology::new()
            .endpoint(Endpoint::new("orders").consumes(["OrderPaid"]))
            .endpoint(Endpoint::new("billing").consumes(["OrderPlaced"]))
            .endpoint(Endpoint::new("audit"));
        let expected = topology.expected();
        assert_eq!(
            names(&expected),
            [
                "Resolver/Resolver",
                "orders/orders",
                "orders/Resolver",
                "orders/Deferred",
                "orders/DeferredProcessor",
                "billing/billing",
                "billing/Resolver",
                "billing/Deferred",
                "billing/DeferredProcessor",
                "audit/audit",
                "audit/Resolver",
                "audit/Deferred",
                "audit/DeferredProcessor",
                "orders/fwd-orders",
                "orders/billing",
                "billing/orders",
                "billing/fwd-billing",
                "audit/orders",
                "audit/billing",
            ]
        );
        let deferred = &expected[3];
        assert!(deferred.settings.requires_session);
        assert_eq!(deferred.settings.default_message_ttl, None);
        assert!(deferred.settings.dead_letter_on_expiry);
        let forwarder = &expected[14];
        assert_eq!(forwarder.settings.forward_to.as_deref(), Some("billing"));
        assert_eq!(
            forwarder.rules,
            [forwarding_rule("orders", "billing", "OrderPlaced")]
        );
    }

    #[test]
    fn extra_producer_topics_get_forwarders_only_once() {
        let topology = Topology::new()
            .endpoint(Endpoint::new("billing").consumes(["OrderPlaced"]))
            .producer_topic("shop")
            .producer_topic("billing");
        assert_eq!(topology.all_producer_topics(), ["billing", "shop"]);
        assert!(names(&topology.expected()).contains(&"shop/billing".to_owned()));
    }

    #[test]
    fn forwarding_rule_matches_only_original_publishes() {
        let rule = forwarding_rule("orders", "billing", "OrderPlaced");
        assert_eq!(rule.name, "OrderPlaced");
        assert_eq!(
            rule.filter,
            "user.EventTypeId = 'OrderPlaced' AND user.MessageType = 'EventRequest' AND user.From IS NULL"
        );
        assert_eq!(
            rule.action.as_deref(),
            Some("SET user.From = 'orders'; SET user.EventId = newid(); SET user.To = 'billing'")
        );
    }

    #[test]
    fn the_endpoint_name_check_is_the_one_validate_applies() {
        for name in [
            "billing", "a.b_c-1", "", "Resolver", "retry", "fwd-x", "it's",
        ] {
            let alone = check_endpoint_name(name).map_err(|e| e.to_string());
            let in_topology = Topology::new()
                .endpoint(Endpoint::new(name))
                .validate()
                .map_err(|e| e.to_string());
            assert_eq!(alone, in_topology, "{name:?}");
        }
        assert!(check_endpoint_name(&"a".repeat(MAX_ENDPOINT_NAME)).is_ok());
        assert!(check_endpoint_name(&"a".repeat(MAX_ENDPOINT_NAME + 1)).is_err());
    }

    #[test]
    fn bad_names_are_rejected_with_the_reason() {
        let bad = |name: &str| {
            Topology::new()
                .endpoint(Endpoint::new(name))
                .validate()
                .expect_err(name)
                .to_string()
        };
        assert!(bad("").contains("1 to 46 characters"));
        assert!(bad(&"a".repeat(47)).contains("1 to 46 characters"));
        assert!(bad("it's").contains("contains '''"));
        assert!(bad("-x").contains("must start with a letter or digit"));
        assert!(bad("retry").contains("'Retry' is a NimBus fixed id"));
        assert!(bad("Resolver").contains("fixed id"));
        assert!(bad("FWD-x").contains("reserved for self-forwarders"));
        let event = Topology::new()
            .endpoint(Endpoint::new("billing").consumes(["Order Placed"]))
            .validate()
            .expect_err("space");
        assert!(event.to_string().contains("event type name 'Order Placed'"));
        // An event type may share a fixed id's name: it only names a rule.
        Topology::new()
            .endpoint(Endpoint::new("billing").consumes(["Retry"]))
            .validate()
            .expect("event type named Retry");
    }

    #[test]
    fn duplicate_endpoints_and_bad_settings_are_rejected() {
        let duplicate = Topology::new()
            .endpoint(Endpoint::new("Billing"))
            .endpoint(Endpoint::new("billing"))
            .validate();
        assert_eq!(
            duplicate,
            Err(TopologyError::DuplicateEndpoint {
                first: "Billing".to_owned(),
                second: "billing".to_owned()
            })
        );
        assert!(Topology::new().max_delivery_count(0).validate().is_err());
        assert!(
            Topology::new()
                .lock_duration(Duration::from_millis(10))
                .validate()
                .is_err()
        );
    }

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
