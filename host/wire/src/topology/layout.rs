//! The layout a [`Topology`] expects: every topic, subscription, setting
//! and rule NimBus needs for its endpoints, and the forwarding between them.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::time::Duration;

use nimbus_transport::{
    DEFAULT_LOCK_DURATION, DEFAULT_MAX_DELIVERY_COUNT, DEFAULT_RULE_FILTER, DEFAULT_RULE_NAME,
    RuleDescription, SubscriptionPath, SubscriptionSettings,
};

use crate::MessageType;
use crate::addr::{
    CONTINUATION, DEFERRED, DEFERRED_PROCESSOR, RESOLVER, RETRY, SELF_FORWARDER_PREFIX,
};
use crate::prop::{EVENT_ID, EVENT_TYPE_ID, FROM, MESSAGE_TYPE, ORIGINAL_SESSION_ID, TO};
use crate::topology::naming::{
    MAX_ENDPOINT_NAME, MAX_ENTITY_NAME, TopologyError, check_event_type, check_name,
};

/// One endpoint: its name (also its topic's and inbox's) and the event
/// types its handlers consume.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    pub(super) name: String,
    pub(super) consumes: BTreeSet<String>,
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
    pub(super) endpoints: Vec<Endpoint>,
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

    /// Checks names and settings; [`provision`](crate::topology::provision)
    /// and [`prune`](crate::topology::prune) call it first.
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
    pub(super) fn all_producer_topics(&self) -> Vec<&str> {
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
        self.settings().with_requires_session(true)
    }

    /// The full expected layout, topic by topic.
    pub(super) fn expected(&self) -> Vec<ExpectedSubscription> {
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
                RuleDescription::new(format!("to-{e}"), to_is(e)),
                RuleDescription::new("retry", to_is(RETRY)).with_action(format!(
                    "SET user.{TO} = '{e}'; SET user.{FROM} = '{RETRY}'"
                )),
                RuleDescription::new("continuation", to_is(CONTINUATION)).with_action(format!(
                    "SET user.{TO} = '{e}'; SET user.{FROM} = '{CONTINUATION}'"
                )),
            ],
        };
        let resolver = ExpectedSubscription {
            path: SubscriptionPath::new(e, RESOLVER),
            settings: self.settings().with_forward_to(Some(RESOLVER.to_owned())),
            rules: vec![
                RuleDescription::new(format!("from-{e}"), to_is(RESOLVER))
                    .with_action(format!("SET user.{FROM} = '{e}'")),
                RuleDescription::new(format!("to-{e}"), to_is(e)),
            ],
        };
        let deferred = ExpectedSubscription {
            path: SubscriptionPath::new(e, DEFERRED),
            // No TTL, and dead-letter on expiry for messages that carry
            // their own: a parked event never disappears silently (F9).
            settings: self.session_settings().with_dead_letter_on_expiry(true),
            rules: vec![RuleDescription::new(
                "DeferredFilter",
                format!(
                    "{} AND user.{ORIGINAL_SESSION_ID} IS NOT NULL",
                    to_is(DEFERRED)
                ),
            )],
        };
        let processor = ExpectedSubscription {
            path: SubscriptionPath::new(e, DEFERRED_PROCESSOR),
            settings: self.settings(),
            rules: vec![RuleDescription::new(
                "DeferredProcessorFilter",
                to_is(DEFERRED_PROCESSOR),
            )],
        };
        [inbox, resolver, deferred, processor]
    }

    fn forwarder(&self, producer: &str, consumer: &Endpoint) -> ExpectedSubscription {
        let c = &consumer.name;
        ExpectedSubscription {
            path: SubscriptionPath::new(producer, forwarder_name(producer, c)),
            settings: self.settings().with_forward_to(Some(c.clone())),
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
            "user.{EVENT_TYPE_ID} = '{event_type}' AND user.{MESSAGE_TYPE} = '{}' AND user.{FROM} IS NULL",
            MessageType::EventRequest.as_str()
        ),
    )
    .with_action(format!(
        "SET user.{FROM} = '{producer}'; SET user.{EVENT_ID} = newid(); SET user.{TO} = '{consumer}'"
    ))
}

/// The filter of a rule that routes on `To`.
fn to_is(address: &str) -> String {
    format!("user.{TO} = '{address}'")
}

/// One subscription as the topology expects it.
#[derive(Debug, Clone)]
pub(super) struct ExpectedSubscription {
    pub(super) path: SubscriptionPath,
    pub(super) settings: SubscriptionSettings,
    /// Every rule it must have; `$Default` is deleted unless listed here.
    pub(super) rules: Vec<RuleDescription>,
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
/// [`provision`](crate::topology::provision) would create, for a transport that cannot (Service Bus
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::naming::check_endpoint_name;

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
}
