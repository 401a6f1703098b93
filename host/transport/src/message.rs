//! The message shape every transport carries: a Service Bus message.
//!
//! This is the shared contract between the engine's wire model (`nimbus-wire`),
//! the embedded broker and, later, the Azure Service Bus adapter. It holds the
//! broker ("system") properties a sender may set, the typed application
//! properties, and the body as bytes. What the broker stamps on delivery
//! (sequence number, enqueued time, delivery count, lock) lives in
//! [`ReceivedMessage`](crate::ReceivedMessage) instead, so a sender can never
//! set it.

use std::collections::BTreeMap;
use std::fmt;
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

/// The value of one application (user) property.
///
/// Service Bus carries more AMQP types than this; these are the ones NimBus
/// writes and SQL filters compare. Integers of every width map to `Int`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum PropertyValue {
    /// A string.
    String(String),
    /// A signed integer (Service Bus `int` and `long`).
    Int(i64),
    /// A floating-point number.
    Float(f64),
    /// A boolean.
    Bool(bool),
}

impl PropertyValue {
    /// The string inside, if this is a string.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            PropertyValue::String(s) => Some(s),
            _ => None,
        }
    }

    /// The integer inside, if this is an integer, or a string holding one.
    pub fn as_i64(&self) -> Option<i64> {
        match self {
            PropertyValue::Int(i) => Some(*i),
            PropertyValue::String(s) => s.trim().parse().ok(),
            _ => None,
        }
    }
}

impl From<&str> for PropertyValue {
    fn from(value: &str) -> Self {
        PropertyValue::String(value.to_owned())
    }
}

impl From<String> for PropertyValue {
    fn from(value: String) -> Self {
        PropertyValue::String(value)
    }
}

impl From<i64> for PropertyValue {
    fn from(value: i64) -> Self {
        PropertyValue::Int(value)
    }
}

impl From<bool> for PropertyValue {
    fn from(value: bool) -> Self {
        PropertyValue::Bool(value)
    }
}

/// Application properties, by exact (case-sensitive) name.
pub type Properties = BTreeMap<String, PropertyValue>;

/// A message as a sender builds it.
///
/// Every field but `body` and `properties` is optional, as on Service Bus. A
/// transport assigns a fresh unique `message_id` when the sender leaves it
/// empty.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Message {
    /// The broker message id; `None` lets the transport assign a fresh one.
    pub message_id: Option<String>,
    /// The session (ordering key). Required by session-enabled subscriptions.
    pub session_id: Option<String>,
    /// The correlation id.
    pub correlation_id: Option<String>,
    /// Where a reply should go (a topic name).
    pub reply_to: Option<String>,
    /// The session a reply should carry.
    pub reply_to_session_id: Option<String>,
    /// The broker-level `To` (distinct from NimBus's `To` application property).
    pub to: Option<String>,
    /// The broker-level subject (label).
    pub subject: Option<String>,
    /// The MIME type of the body.
    pub content_type: Option<String>,
    /// How long the message lives once enqueued; `None` means the entity's
    /// default.
    pub time_to_live: Option<Duration>,
    /// When set and in the future, the message is enqueued only at that time.
    pub scheduled_enqueue_time: Option<SystemTime>,
    /// Application (user) properties.
    pub properties: Properties,
    /// The body.
    #[serde(with = "serde_bytes")]
    pub body: Vec<u8>,
}

impl Message {
    /// A message with this body and nothing else set.
    pub fn new(body: impl Into<Vec<u8>>) -> Self {
        Message {
            body: body.into(),
            ..Message::default()
        }
    }

    /// The application property `name` as a string, if it is one.
    pub fn property_str(&self, name: &str) -> Option<&str> {
        self.properties.get(name).and_then(PropertyValue::as_str)
    }
}

/// The application property a dead-lettered message carries its reason in,
/// as Service Bus sets it (and a `rejected` outcome's error `info` key);
/// NimBus's dead-letter notification uses the same name.
pub const DEAD_LETTER_REASON: &str = "DeadLetterReason";
/// The application property a dead-lettered message carries its
/// description in, as [`DEAD_LETTER_REASON`] its reason.
pub const DEAD_LETTER_ERROR_DESCRIPTION: &str = "DeadLetterErrorDescription";

/// A message as a receiver gets it: the sender's message plus what the broker
/// stamped on it.
///
/// Generic over its content so a message keeps one received shape from
/// the broker to its settlement: a transport hands out
/// `ReceivedMessage<Message>`, and a reader that decodes the content
/// (the engine and the Resolver, into NimBus's model) [`map`s](Self::map)
/// it, keeping the stamps and the lock beside the decoded content.
#[derive(Debug, Clone, PartialEq)]
pub struct ReceivedMessage<M = Message> {
    /// The message as sent, after any rule actions of the subscription. Its
    /// `message_id` is always set.
    pub message: M,
    /// The broker-assigned sequence number, unique and increasing per entity.
    pub sequence_number: i64,
    /// When the message was enqueued (for a scheduled message: when it became
    /// active).
    pub enqueued_time: SystemTime,
    /// How many times this message has been delivered, this delivery included
    /// (1 on the first delivery).
    pub delivery_count: u32,
    /// Set on messages read from a dead-letter queue.
    pub dead_letter_reason: Option<String>,
    /// Set on messages read from a dead-letter queue.
    pub dead_letter_description: Option<String>,
    /// The peek-lock on this delivery: settle with it before `locked_until`.
    pub lock_token: LockToken,
    /// When the lock lapses unless renewed. For a message received inside a
    /// session, the session lock's expiry (the session lock covers it).
    pub locked_until: SystemTime,
}

impl<M> ReceivedMessage<M> {
    /// The same delivery with its content changed by `f` (decoded, say):
    /// the stamps and the lock stay.
    pub fn map<N>(self, f: impl FnOnce(M) -> N) -> ReceivedMessage<N> {
        ReceivedMessage {
            message: f(self.message),
            sequence_number: self.sequence_number,
            enqueued_time: self.enqueued_time,
            delivery_count: self.delivery_count,
            dead_letter_reason: self.dead_letter_reason,
            dead_letter_description: self.dead_letter_description,
            lock_token: self.lock_token,
            locked_until: self.locked_until,
        }
    }
}

/// Content that names itself: what a [`Delivery`] needs of a received
/// message's content besides the lock.
pub trait Identified {
    /// The broker message id, when it is set (it always is on a received
    /// message).
    fn message_id(&self) -> Option<&str>;
}

impl Identified for Message {
    fn message_id(&self) -> Option<&str> {
        self.message_id.as_deref()
    }
}

/// The delivery a settlement settles: its lock, and the message id errors
/// name it by. Taken from a [`ReceivedMessage`] of any content, so a
/// settlement holds a handle on the message and not the message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    /// The peek-lock to settle.
    pub lock_token: LockToken,
    /// The message's id (empty when it had none).
    pub message_id: String,
}

impl<M: Identified> From<&ReceivedMessage<M>> for Delivery {
    fn from(received: &ReceivedMessage<M>) -> Self {
        Delivery {
            lock_token: received.lock_token,
            message_id: received.message.message_id().unwrap_or_default().to_owned(),
        }
    }
}

impl<M: Identified> From<ReceivedMessage<M>> for Delivery {
    fn from(received: ReceivedMessage<M>) -> Self {
        Delivery::from(&received)
    }
}

/// The token of one peek-lock delivery.
///
/// Random (a v4 UUID), so a token from before a broker restart or from a
/// lapsed lock never matches a later delivery of the same message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LockToken(uuid::Uuid);

impl LockToken {
    /// A fresh random token.
    pub fn new() -> Self {
        LockToken(uuid::Uuid::new_v4())
    }

    /// The token as a UUID (how Service Bus represents it on the wire).
    pub fn as_uuid(&self) -> uuid::Uuid {
        self.0
    }

    /// A token from its UUID form.
    pub fn from_uuid(uuid: uuid::Uuid) -> Self {
        LockToken(uuid)
    }
}

impl Default for LockToken {
    fn default() -> Self {
        LockToken::new()
    }
}

impl fmt::Display for LockToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}
