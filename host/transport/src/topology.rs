//! Topology descriptions: what an [`Admin`](crate::Admin) creates and lists.

use std::time::Duration;

/// The default peek-lock duration (Service Bus's default).
pub const DEFAULT_LOCK_DURATION: Duration = Duration::from_secs(30);
/// The default max delivery count (Service Bus's default).
pub const DEFAULT_MAX_DELIVERY_COUNT: u32 = 10;
/// The dead-letter reason Service Bus gives a message delivered
/// [`max_delivery_count`](SubscriptionSettings::max_delivery_count) times
/// without being settled; NimBus writes the same when the engine
/// dead-letters an event at its last delivery.
pub const MAX_DELIVERY_COUNT_EXCEEDED: &str = "MaxDeliveryCountExceeded";
/// The name of the rule every new subscription gets.
pub const DEFAULT_RULE_NAME: &str = "$Default";
/// The filter of the `$Default` rule: everything.
pub const DEFAULT_RULE_FILTER: &str = "1=1";

/// Settings of a topic.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TopicSettings {
    /// The TTL of messages that set none (the smallest of message,
    /// subscription and topic TTL applies).
    pub default_message_ttl: Option<Duration>,
    /// When set, a message whose `message_id` was seen on this topic within
    /// this window is accepted but dropped.
    pub duplicate_detection_window: Option<Duration>,
}

impl TopicSettings {
    /// Sets the default message TTL.
    pub fn with_default_message_ttl(mut self, ttl: Duration) -> Self {
        self.default_message_ttl = Some(ttl);
        self
    }

    /// Turns on duplicate detection with this window.
    pub fn with_duplicate_detection(mut self, window: Duration) -> Self {
        self.duplicate_detection_window = Some(window);
        self
    }
}

/// Settings of a subscription.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SubscriptionSettings {
    /// Messages are received through session locks only, in order per
    /// session; every message must carry a session id.
    pub requires_session: bool,
    /// How long a peek-lock (or session lock) lasts before it must be renewed.
    pub lock_duration: Duration,
    /// Deliveries after which a message is dead-lettered with reason
    /// `MaxDeliveryCountExceeded`.
    pub max_delivery_count: u32,
    /// The TTL of messages in this subscription (the smallest applies).
    pub default_message_ttl: Option<Duration>,
    /// Expired messages go to the dead-letter queue (reason
    /// `TTLExpiredException`) instead of being dropped.
    pub dead_letter_on_expiry: bool,
    /// Every matching copy is forwarded to this topic instead of being kept.
    pub forward_to: Option<String>,
}

impl Default for SubscriptionSettings {
    fn default() -> Self {
        SubscriptionSettings {
            requires_session: false,
            lock_duration: DEFAULT_LOCK_DURATION,
            max_delivery_count: DEFAULT_MAX_DELIVERY_COUNT,
            default_message_ttl: None,
            dead_letter_on_expiry: false,
            forward_to: None,
        }
    }
}

impl SubscriptionSettings {
    /// Settings of a session-enabled subscription.
    pub fn sessions() -> Self {
        SubscriptionSettings {
            requires_session: true,
            ..SubscriptionSettings::default()
        }
    }

    /// Settings of a subscription that forwards to `topic`.
    pub fn forwarding_to(topic: impl Into<String>) -> Self {
        SubscriptionSettings {
            forward_to: Some(topic.into()),
            ..SubscriptionSettings::default()
        }
    }

    /// Sets whether messages are received through session locks.
    pub fn with_requires_session(mut self, on: bool) -> Self {
        self.requires_session = on;
        self
    }

    /// Forwards every matching copy to `topic` (or stops forwarding).
    pub fn with_forward_to(mut self, topic: Option<String>) -> Self {
        self.forward_to = topic;
        self
    }

    /// Sets the lock duration.
    pub fn with_lock_duration(mut self, duration: Duration) -> Self {
        self.lock_duration = duration;
        self
    }

    /// Sets the max delivery count.
    pub fn with_max_delivery_count(mut self, count: u32) -> Self {
        self.max_delivery_count = count;
        self
    }

    /// Sets the default message TTL.
    pub fn with_default_message_ttl(mut self, ttl: Duration) -> Self {
        self.default_message_ttl = Some(ttl);
        self
    }

    /// Dead-letters expired messages instead of dropping them.
    pub fn with_dead_letter_on_expiry(mut self, on: bool) -> Self {
        self.dead_letter_on_expiry = on;
        self
    }
}

/// A subscription rule: a SQL filter and an optional action.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RuleDescription {
    /// The rule name, unique within the subscription.
    pub name: String,
    /// The SQL filter text, kept verbatim (provisioning compares it).
    pub filter: String,
    /// The SQL action text (`SET ...; REMOVE ...`), kept verbatim.
    pub action: Option<String>,
}

impl RuleDescription {
    /// A rule with a filter and no action.
    pub fn new(name: impl Into<String>, filter: impl Into<String>) -> Self {
        RuleDescription {
            name: name.into(),
            filter: filter.into(),
            action: None,
        }
    }

    /// Adds an action.
    pub fn with_action(mut self, action: impl Into<String>) -> Self {
        self.action = Some(action.into());
        self
    }
}

/// A topic as listed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TopicDescription {
    /// The name.
    pub name: String,
    /// The settings.
    pub settings: TopicSettings,
    /// Messages scheduled and not yet enqueued.
    pub scheduled_message_count: u64,
}

impl TopicDescription {
    /// A description of topic `name`.
    pub fn new(name: impl Into<String>, settings: TopicSettings, scheduled: u64) -> Self {
        TopicDescription {
            name: name.into(),
            settings,
            scheduled_message_count: scheduled,
        }
    }
}

/// A subscription as listed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SubscriptionDescription {
    /// The topic.
    pub topic: String,
    /// The name.
    pub name: String,
    /// The settings.
    pub settings: SubscriptionSettings,
    /// Messages waiting or locked (not dead-lettered).
    pub active_message_count: u64,
    /// Messages in the dead-letter queue.
    pub dead_letter_message_count: u64,
}

impl SubscriptionDescription {
    /// A description of subscription `topic/name`.
    pub fn new(
        topic: impl Into<String>,
        name: impl Into<String>,
        settings: SubscriptionSettings,
        active: u64,
        dead_letter: u64,
    ) -> Self {
        SubscriptionDescription {
            topic: topic.into(),
            name: name.into(),
            settings,
            active_message_count: active,
            dead_letter_message_count: dead_letter,
        }
    }
}
