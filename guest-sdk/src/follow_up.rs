//! Follow-up events a handler publishes, and user properties.

use serde::Serialize;

use crate::Error;
use crate::bindings::nimbus::handler::types as wit;
use crate::event::Event;

/// The value of one user (application) property.
#[derive(Debug, Clone, PartialEq)]
pub enum PropertyValue {
    /// A string property.
    Str(String),
    /// A signed integer property (Service Bus `int` and `long`).
    Int(i64),
    /// A floating-point property.
    Float(f64),
    /// A boolean property.
    Bool(bool),
}

impl PropertyValue {
    /// The value if it is a string.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Self::Str(s) => Some(s),
            _ => None,
        }
    }
}

impl From<&str> for PropertyValue {
    fn from(v: &str) -> Self {
        Self::Str(v.to_owned())
    }
}

impl From<String> for PropertyValue {
    fn from(v: String) -> Self {
        Self::Str(v)
    }
}

impl From<i64> for PropertyValue {
    fn from(v: i64) -> Self {
        Self::Int(v)
    }
}

impl From<i32> for PropertyValue {
    fn from(v: i32) -> Self {
        Self::Int(v.into())
    }
}

impl From<f64> for PropertyValue {
    fn from(v: f64) -> Self {
        Self::Float(v)
    }
}

impl From<bool> for PropertyValue {
    fn from(v: bool) -> Self {
        Self::Bool(v)
    }
}

impl From<wit::PropertyValue> for PropertyValue {
    fn from(v: wit::PropertyValue) -> Self {
        match v {
            wit::PropertyValue::Str(s) => Self::Str(s),
            wit::PropertyValue::Int(i) => Self::Int(i),
            wit::PropertyValue::Float(f) => Self::Float(f),
            wit::PropertyValue::Boolean(b) => Self::Bool(b),
        }
    }
}

impl From<PropertyValue> for wit::PropertyValue {
    fn from(v: PropertyValue) -> Self {
        match v {
            PropertyValue::Str(s) => Self::Str(s),
            PropertyValue::Int(i) => Self::Int(i),
            PropertyValue::Float(f) => Self::Float(f),
            PropertyValue::Bool(b) => Self::Boolean(b),
        }
    }
}

/// One user property of the inbound event.
#[derive(Debug, Clone, PartialEq)]
pub struct Property {
    /// The property name, as on the wire (case-sensitive).
    pub name: String,
    /// The property value.
    pub value: PropertyValue,
}

/// A follow-up event to publish with [`Context::publish`](crate::Context::publish).
///
/// It keeps the inbound event's correlation id and lineage and, unless
/// [`session_id`](Self::session_id) names another, its session. The host
/// sends it only when the handler's outcome is completed or pending handoff,
/// in the same settlement; on an error it is dropped, and a retry publishes
/// it again. So derive the message id from the inbound event and the step
/// (e.g. `format!("{}:notify", ctx.event_id())`): a resubmission then
/// publishes the same id, which a receiving endpoint with the inbox
/// (`[engine] inbox = true`) answers as a duplicate without running its
/// handler. Broker duplicate detection is not on (nor is it in NimBus).
#[derive(Debug, Clone, PartialEq)]
#[must_use = "a follow-up does nothing until it is passed to `ctx.publish`"]
pub struct FollowUp {
    event_type: String,
    message_id: String,
    payload: Result<String, String>,
    session_id: Option<String>,
    properties: Vec<Property>,
}

impl FollowUp {
    /// A follow-up of `event_type` whose payload is `payload` as JSON.
    ///
    /// A payload that cannot be serialized (e.g. a map with non-string keys)
    /// is reported by [`Context::publish`](crate::Context::publish).
    pub fn new<P: Serialize + ?Sized>(
        event_type: impl Into<String>,
        message_id: impl Into<String>,
        payload: &P,
    ) -> Self {
        Self {
            event_type: event_type.into(),
            message_id: message_id.into(),
            payload: serde_json::to_string(payload).map_err(|e| e.to_string()),
            session_id: None,
            properties: Vec::new(),
        }
    }

    /// A follow-up whose event type is `E::EVENT_TYPE`.
    pub fn event<E: Event + Serialize>(message_id: impl Into<String>, payload: &E) -> Self {
        Self::new(E::EVENT_TYPE, message_id, payload)
    }

    /// Publishes the follow-up to another session instead of the inbound one.
    pub fn session_id(mut self, session_id: impl Into<String>) -> Self {
        self.session_id = Some(session_id.into());
        self
    }

    /// Adds a user property.
    pub fn property(mut self, name: impl Into<String>, value: impl Into<PropertyValue>) -> Self {
        self.properties.push(Property {
            name: name.into(),
            value: value.into(),
        });
        self
    }

    /// The event type.
    pub fn event_type(&self) -> &str {
        &self.event_type
    }

    /// The message id.
    pub fn message_id(&self) -> &str {
        &self.message_id
    }

    pub(crate) fn into_wit(self) -> Result<wit::FollowUp, PublishError> {
        let payload = self.payload.map_err(|reason| PublishError::Serialize {
            event_type: self.event_type.clone(),
            reason,
        })?;
        Ok(wit::FollowUp {
            event_type: self.event_type,
            message_id: self.message_id,
            payload,
            session_id: self.session_id,
            properties: self
                .properties
                .into_iter()
                .map(|p| wit::Property {
                    name: p.name,
                    value: p.value.into(),
                })
                .collect(),
        })
    }
}

/// Why a follow-up was not accepted for publishing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PublishError {
    /// The payload could not be serialized to JSON.
    #[error("the payload of follow-up `{event_type}` could not be serialized to JSON: {reason}")]
    Serialize {
        /// The follow-up's event type.
        event_type: String,
        /// What serde_json said.
        reason: String,
    },
    /// The host refused an argument (e.g. an empty message id); the text says
    /// which and why.
    #[error("the host refused the follow-up: {0}")]
    InvalidArgument(String),
    /// A per-event limit was reached (e.g. too many follow-ups); the text
    /// names the limit.
    #[error("the host refused the follow-up, a limit was reached: {0}")]
    LimitExceeded(String),
}

impl From<wit::HostError> for PublishError {
    fn from(e: wit::HostError) -> Self {
        match e {
            wit::HostError::InvalidArgument(s) => Self::InvalidArgument(s),
            wit::HostError::LimitExceeded(s) => Self::LimitExceeded(s),
        }
    }
}

/// A refused follow-up is a bug in the handler or its limits, not in the
/// event: `failed` blocks the session so an operator can fix the handler and
/// resubmit, rather than losing the event to the dead-letter queue.
impl From<PublishError> for Error {
    fn from(e: PublishError) -> Self {
        Error::failed("PublishRejected", e.to_string())
    }
}
