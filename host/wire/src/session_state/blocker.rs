//! What the session state keeps of the event that blocks it, a nimbus
//! addition (decision 0140). The blocked message itself leaves the broker
//! once it is settled, so without this only the Resolver's record could
//! address an operator's resubmit, skip or handoff; with it, an operator
//! can still act on a blocked session whose Resolver store was lost.

use serde::{Deserialize, Serialize};

use crate::message::NimbusMessage;
use crate::message_type::MessageType;
use crate::user_properties;

/// The most payload and user properties, together, that the state keeps of
/// a blocker. The state is written again with every message parked behind
/// the block, and on Service Bus it shares the message size limit (256 KB
/// on the standard tier): a larger event is kept without them, and
/// resubmitting it then needs an edited payload.
pub const MAX_KEPT_EVENT_BYTES: usize = 64 * 1024;

/// The event that owns a session's block, as the endpoint received it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlockingEvent {
    /// Its `EventTypeId`.
    #[serde(
        rename = "EventTypeId",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub event_type_id: Option<String>,
    /// The `MessageId` of the message that blocked the session (a control
    /// message's `ParentMessageId`).
    #[serde(rename = "MessageId", default, skip_serializing_if = "Option::is_none")]
    pub message_id: Option<String>,
    /// Its business correlation id.
    #[serde(
        rename = "CorrelationId",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub correlation_id: Option<String>,
    /// That message's `From` (none for an external publish).
    #[serde(rename = "From", default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// Its `OriginatingMessageId` (`None` for `self`).
    #[serde(
        rename = "OriginatingMessageId",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub originating_message_id: Option<String>,
    /// Its `OriginatingFrom` (`None` for `self`).
    #[serde(
        rename = "OriginatingFrom",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub originating_from: Option<String>,
    /// The payload its latest run had (a resubmission may have edited it);
    /// `None` when left out for its size.
    #[serde(rename = "EventJson", default, skip_serializing_if = "Option::is_none")]
    pub event_json: Option<String>,
    /// Its user properties as a JSON object's text
    /// ([`user_properties::to_json`]), when it had any and they were kept.
    #[serde(
        rename = "UserProperties",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub user_properties: Option<String>,
    /// How many bytes of payload and user properties were left out for
    /// passing [`MAX_KEPT_EVENT_BYTES`]; 0 when they were kept.
    #[serde(rename = "OmittedBytes", default, skip_serializing_if = "is_zero")]
    pub omitted_bytes: u64,
    /// Whether the block is a pending handoff (an external job has the
    /// event) rather than a failure.
    #[serde(rename = "Handoff", default, skip_serializing_if = "is_false")]
    pub handoff: bool,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

fn is_false(b: &bool) -> bool {
    !*b
}

impl BlockingEvent {
    /// The event `message` carries (an EventRequest, a retry, a
    /// resubmission), or what a message about it says of it.
    pub(crate) fn of(message: &NimbusMessage) -> BlockingEvent {
        let mut event = BlockingEvent {
            event_type_id: message.event_type().map(str::to_owned),
            message_id: message.message_id.clone(),
            correlation_id: message.correlation_id.clone(),
            from: message.from.clone(),
            originating_message_id: message.originating_message_id.clone(),
            originating_from: message.originating_from.clone(),
            ..BlockingEvent::default()
        };
        event.keep_payload(message);
        event
    }

    /// Whether `message` runs the handler on the event, so carries its
    /// payload (as run: a resubmission's may be edited).
    pub(crate) fn carries_event(message: &NimbusMessage) -> bool {
        matches!(
            message.message_type,
            MessageType::EventRequest
                | MessageType::RetryRequest
                | MessageType::ResubmissionRequest
        ) && message.event_json().is_some()
    }

    /// Keeps `message`'s payload and user properties, or, together over
    /// [`MAX_KEPT_EVENT_BYTES`], how large they were.
    pub(crate) fn keep_payload(&mut self, message: &NimbusMessage) {
        let payload = message.event_json();
        let properties =
            (!message.properties.is_empty()).then(|| user_properties::to_json(&message.properties));
        let bytes = payload.map_or(0, str::len) + properties.as_ref().map_or(0, String::len);
        if bytes > MAX_KEPT_EVENT_BYTES {
            self.event_json = None;
            self.user_properties = None;
            self.omitted_bytes = u64::try_from(bytes).unwrap_or(u64::MAX);
        } else {
            self.event_json = payload.map(str::to_owned);
            self.user_properties = properties;
            self.omitted_bytes = 0;
        }
    }
}
