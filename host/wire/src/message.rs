//! The typed NimBus message and its mapping to and from the transport shape.
//!
//! Decoding is tolerant where upstream is tolerant (absent lineage fields
//! read as `self`, an unreadable `RetryCount` as 0, non-string values of
//! string properties as their text) and strict where SEMANTICS.md §2.1 asks
//! for validation: an unknown `MessageType` or a body that is not a
//! `MessageContent` fails [`NimbusMessage::from_transport`] with a
//! [`DecodeError`] that still carries everything that could be read, so the
//! engine can dead-letter *and* tell the Resolver; [`NimbusMessage::validate`]
//! names the remaining defects (EventId, EventTypeId, payload).

use std::time::{Duration, SystemTime};

use nimbus_transport::{Identified, Message, Properties, PropertyValue, ReceivedMessage};

use crate::content::{BodyError, MessageContent};
use crate::message_type::MessageType;
use crate::names::{addr, prop};
use crate::timestamp::{format_round_trip, parse_timestamp};

/// A NimBus message: the broker envelope, the NimBus application properties
/// as typed fields, the remaining user properties, and the body.
///
/// Lineage fields (`ParentMessageId`, `OriginatingMessageId`,
/// `OriginatingFrom`) are `None` for upstream's `"self"` marker; they are
/// written as `"self"` and `"self"` (any case) reads back as `None`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NimbusMessage {
    /// Broker `MessageId`; `None` lets the transport assign a fresh one.
    pub message_id: Option<String>,
    /// Broker `SessionId`: the ordering key.
    pub session_id: Option<String>,
    /// Broker `CorrelationId`: the business correlation id, kept end to end.
    pub correlation_id: Option<String>,
    /// Broker `ReplyTo` (request/reply).
    pub reply_to: Option<String>,
    /// Broker `ReplyToSessionId` (request/reply).
    pub reply_to_session_id: Option<String>,
    /// Broker scheduled enqueue time (retries).
    pub scheduled_enqueue_time: Option<SystemTime>,
    /// Broker time to live (replies).
    pub time_to_live: Option<Duration>,
    /// Broker-level `To` (not NimBus's `To` property); carried through.
    pub broker_to: Option<String>,
    /// Broker subject (label); carried through.
    pub subject: Option<String>,
    /// Broker content type; carried through.
    pub content_type: Option<String>,

    /// `To`: the routing address.
    pub to: Option<String>,
    /// `From`: who sent it; absent on an original publish.
    pub from: Option<String>,
    /// `MessageType`.
    pub message_type: MessageType,
    /// `EventId`: the logical event id per consumer, the session-block key.
    pub event_id: Option<String>,
    /// `EventTypeId` as the property says (see [`NimbusMessage::event_type`]
    /// for the effective value).
    pub event_type_id: Option<String>,
    /// `OriginatingMessageId`; `None` is `self`.
    pub originating_message_id: Option<String>,
    /// `ParentMessageId`; `None` is `self`.
    pub parent_message_id: Option<String>,
    /// `RetryCount`: the automatic-retry attempt (0 when absent).
    pub retry_count: u32,
    /// `OriginatingFrom`; `None` is `self`.
    pub originating_from: Option<String>,
    /// `OriginalSessionId` (parked copies).
    pub original_session_id: Option<String>,
    /// `DeferralSequence` (parked copies).
    pub deferral_sequence: Option<u32>,
    /// `QueueTimeMs` (responses).
    pub queue_time_ms: Option<u64>,
    /// `ProcessingTimeMs` (responses).
    pub processing_time_ms: Option<u64>,
    /// `DeadLetterReason` (dead-letter notifications).
    pub dead_letter_reason: Option<String>,
    /// `DeadLetterErrorDescription` (dead-letter notifications).
    pub dead_letter_error_description: Option<String>,
    /// `HandoffReason` (PendingHandoffResponse).
    pub handoff_reason: Option<String>,
    /// `ExternalJobId` (PendingHandoffResponse).
    pub external_job_id: Option<String>,
    /// `ExpectedBy` (PendingHandoffResponse); written with 100 ns precision.
    pub expected_by: Option<SystemTime>,

    /// Every other application property, as-is. Names of the typed fields
    /// above are ignored here when encoding: the typed field wins.
    pub properties: Properties,
    /// The body; `None` is a zero-byte body ("no content").
    pub content: Option<MessageContent>,
}

impl Identified for NimbusMessage {
    fn message_id(&self) -> Option<&str> {
        self.message_id.as_deref()
    }
}

/// What is wrong with a message, named so it can be the dead-letter reason.
///
/// The `Display` text is the reason the engine dead-letters with; the
/// EventId/EventTypeId ones are upstream's exact `ValidationMiddleware`
/// strings (nimbus-semantics.md §4.10).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Defect {
    /// No `MessageType` property.
    #[error("Validation failed: MessageType is required")]
    MissingMessageType,
    /// `MessageType` is not a known name or number.
    #[error("Validation failed: MessageType '{0}' is not a known NimBus message type")]
    UnknownMessageType(String),
    /// `MessageType` is `Unknown`.
    #[error("Validation failed: MessageType 'Unknown' cannot be handled")]
    UnhandledMessageType,
    /// No (or a blank) `EventId` on a type that needs one.
    #[error("Validation failed: EventId is required")]
    MissingEventId,
    /// An operator control request whose `From` is not `Manager`.
    #[error("Validation failed: {0} must come from Manager")]
    NotFromManager(MessageType),
    /// No (or a blank) `SessionId` on a type that runs a handler.
    #[error("Validation failed: SessionId is required")]
    MissingSessionId,
    /// No event type in the property nor in the body.
    #[error("Validation failed: EventTypeId is required for {0}")]
    MissingEventTypeId(MessageType),
    /// The property and the body name different event types.
    #[error("Validation failed: EventTypeId mismatch: property '{property}', body '{body}'")]
    EventTypeMismatch {
        /// The `EventTypeId` property.
        property: String,
        /// The body's `EventContent.EventTypeId`.
        body: String,
    },
    /// The body is not a `MessageContent`.
    #[error("Validation failed: {0}")]
    Body(#[from] BodyError),
    /// The body has no event payload where a handler needs one.
    #[error("Validation failed: {0} has no EventContent.EventJson in its body")]
    MissingEventJson(MessageType),
    /// `EventJson` is not JSON.
    #[error("Validation failed: EventJson is not valid JSON: {0}")]
    EventJsonNotJson(String),
}

/// A message that could not be decoded, with everything that could be read.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{defect}")]
pub struct DecodeError {
    /// What is wrong.
    pub defect: Defect,
    /// The message as far as it could be read: `message_type` is `Unknown`
    /// when the type was the problem, `content` is `None` when the body was.
    pub partial: Box<NimbusMessage>,
}

/// The envelope properties of a transport message ([`prop::ENVELOPE`]),
/// as found.
#[derive(Default)]
struct Envelope {
    to: Option<PropertyValue>,
    from: Option<PropertyValue>,
    message_type: Option<PropertyValue>,
    event_id: Option<PropertyValue>,
    event_type_id: Option<PropertyValue>,
    originating_message_id: Option<PropertyValue>,
    parent_message_id: Option<PropertyValue>,
    retry_count: Option<PropertyValue>,
    originating_from: Option<PropertyValue>,
    original_session_id: Option<PropertyValue>,
    deferral_sequence: Option<PropertyValue>,
    queue_time_ms: Option<PropertyValue>,
    processing_time_ms: Option<PropertyValue>,
    dead_letter_reason: Option<PropertyValue>,
    dead_letter_error_description: Option<PropertyValue>,
    handoff_reason: Option<PropertyValue>,
    external_job_id: Option<PropertyValue>,
    expected_by: Option<PropertyValue>,
}

impl Envelope {
    /// Splits `properties` into the envelope and the user properties in one
    /// pass: removing each envelope name from the map instead cost a search
    /// and a rebalance per name, on every message decoded.
    fn split(properties: Properties) -> (Envelope, Properties) {
        let mut envelope = Envelope::default();
        let mut user = Properties::new();
        for (name, value) in properties {
            let slot = match name.as_str() {
                prop::TO => &mut envelope.to,
                prop::FROM => &mut envelope.from,
                prop::MESSAGE_TYPE => &mut envelope.message_type,
                prop::EVENT_ID => &mut envelope.event_id,
                prop::EVENT_TYPE_ID => &mut envelope.event_type_id,
                prop::ORIGINATING_MESSAGE_ID => &mut envelope.originating_message_id,
                prop::PARENT_MESSAGE_ID => &mut envelope.parent_message_id,
                prop::RETRY_COUNT => &mut envelope.retry_count,
                prop::ORIGINATING_FROM => &mut envelope.originating_from,
                prop::ORIGINAL_SESSION_ID => &mut envelope.original_session_id,
                prop::DEFERRAL_SEQUENCE => &mut envelope.deferral_sequence,
                prop::QUEUE_TIME_MS => &mut envelope.queue_time_ms,
                prop::PROCESSING_TIME_MS => &mut envelope.processing_time_ms,
                prop::DEAD_LETTER_REASON => &mut envelope.dead_letter_reason,
                prop::DEAD_LETTER_ERROR_DESCRIPTION => &mut envelope.dead_letter_error_description,
                prop::HANDOFF_REASON => &mut envelope.handoff_reason,
                prop::EXTERNAL_JOB_ID => &mut envelope.external_job_id,
                prop::EXPECTED_BY => &mut envelope.expected_by,
                // Checked on the transport message before decoding; the
                // model never carries it (see `prop::ENVELOPE`).
                prop::CONTROL_SIGNATURE => continue,
                _ => {
                    user.insert(name, value);
                    continue;
                }
            };
            *slot = Some(value);
        }
        (envelope, user)
    }
}

/// The `MessageType` a property value names: a name, a number, or a
/// number as text (upstream accepts all three).
pub(crate) fn message_type_of(value: &PropertyValue) -> Result<MessageType, Defect> {
    match value {
        PropertyValue::Int(i) => {
            MessageType::from_value(*i).ok_or_else(|| Defect::UnknownMessageType(i.to_string()))
        }
        other => property_text(other)
            .parse::<MessageType>()
            .map_err(|e| Defect::UnknownMessageType(e.0)),
    }
}

pub(crate) fn property_text(value: &PropertyValue) -> String {
    match value {
        PropertyValue::String(s) => s.clone(),
        other => property_into_text(other.clone()),
    }
}

fn property_into_text(value: PropertyValue) -> String {
    match value {
        PropertyValue::String(s) => s,
        PropertyValue::Int(i) => i.to_string(),
        PropertyValue::Float(f) => f.to_string(),
        PropertyValue::Bool(b) => b.to_string(),
    }
}

fn property_int<T: TryFrom<i64>>(value: &PropertyValue) -> Option<T> {
    value.as_i64().and_then(|i| T::try_from(i).ok())
}

/// `None` for upstream's `"self"` marker (compared ignoring case, as upstream).
fn lineage(value: Option<String>) -> Option<String> {
    value.filter(|v| !v.eq_ignore_ascii_case(addr::SELF))
}

fn non_blank(value: Option<&str>) -> Option<&str> {
    value.filter(|v| !v.trim().is_empty())
}

fn saturating_i64(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

impl NimbusMessage {
    /// Decodes a transport message. See the module doc for what is tolerated.
    pub fn from_transport(message: &Message) -> Result<NimbusMessage, DecodeError> {
        NimbusMessage::from_owned(message.clone())
    }

    /// As [`NimbusMessage::from_transport`], taking the message: its strings
    /// move into the model instead of being copied. A consumer that settles
    /// by lock token decodes every message it receives this way.
    pub fn from_owned(message: Message) -> Result<NimbusMessage, DecodeError> {
        let Message {
            message_id,
            session_id,
            correlation_id,
            reply_to,
            reply_to_session_id,
            to: broker_to,
            subject,
            content_type,
            time_to_live,
            scheduled_enqueue_time,
            properties,
            body,
        } = message;
        let (envelope, user) = Envelope::split(properties);

        let type_value = envelope.message_type;
        let mut decoded = NimbusMessage {
            message_id,
            session_id,
            correlation_id,
            reply_to,
            reply_to_session_id,
            scheduled_enqueue_time,
            time_to_live,
            broker_to,
            subject,
            content_type,
            to: envelope.to.map(property_into_text),
            from: envelope.from.map(property_into_text),
            message_type: MessageType::Unknown,
            event_id: envelope.event_id.map(property_into_text),
            event_type_id: envelope.event_type_id.map(property_into_text),
            originating_message_id: lineage(
                envelope.originating_message_id.map(property_into_text),
            ),
            parent_message_id: lineage(envelope.parent_message_id.map(property_into_text)),
            retry_count: envelope
                .retry_count
                .as_ref()
                .and_then(property_int)
                .unwrap_or(0),
            originating_from: lineage(envelope.originating_from.map(property_into_text)),
            original_session_id: envelope.original_session_id.map(property_into_text),
            deferral_sequence: envelope.deferral_sequence.as_ref().and_then(property_int),
            queue_time_ms: envelope.queue_time_ms.as_ref().and_then(property_int),
            processing_time_ms: envelope.processing_time_ms.as_ref().and_then(property_int),
            dead_letter_reason: envelope.dead_letter_reason.map(property_into_text),
            dead_letter_error_description: envelope
                .dead_letter_error_description
                .map(property_into_text),
            handoff_reason: envelope.handoff_reason.map(property_into_text),
            external_job_id: envelope.external_job_id.map(property_into_text),
            expected_by: envelope
                .expected_by
                .map(property_into_text)
                .as_deref()
                .and_then(parse_timestamp),
            properties: Properties::new(),
            content: None,
        };
        decoded.properties = user;

        let type_result = match &type_value {
            None => Err(Defect::MissingMessageType),
            Some(value) => message_type_of(value),
        };
        let body_result = MessageContent::from_json_bytes(&body);

        match (type_result, body_result) {
            (Ok(message_type), Ok(content)) => {
                decoded.message_type = message_type;
                decoded.content = content;
                Ok(decoded)
            }
            (Err(defect), body) => {
                decoded.content = body.ok().flatten();
                Err(DecodeError {
                    defect,
                    partial: Box::new(decoded),
                })
            }
            (Ok(message_type), Err(body)) => {
                decoded.message_type = message_type;
                Err(DecodeError {
                    defect: Defect::Body(body),
                    partial: Box::new(decoded),
                })
            }
        }
    }

    /// Decodes a received message (the broker's stamps are not part of the model).
    pub fn from_received(received: &ReceivedMessage) -> Result<NimbusMessage, DecodeError> {
        NimbusMessage::from_transport(&received.message)
    }

    /// Decodes the content of a received message in place of its transport
    /// form: the broker's stamps and the lock stay, so the message keeps one
    /// received shape up to its settlement, and nothing is copied. A
    /// message that cannot be decoded comes back read as far as it could be
    /// ([`DecodeError::partial`]), with its defect beside it, so the engine
    /// can dead-letter it *and* tell the Resolver.
    pub fn decode_received(
        received: ReceivedMessage,
    ) -> (ReceivedMessage<NimbusMessage>, Option<Defect>) {
        let mut defect = None;
        let decoded = received.map(|content| match NimbusMessage::from_owned(content) {
            Ok(message) => message,
            Err(error) => {
                defect = Some(error.defect);
                *error.partial
            }
        });
        (decoded, defect)
    }

    /// Encodes to the transport shape: properties with upstream's names and
    /// types (integers stay integers), lineage `self` markers, the body as
    /// Newtonsoft-compatible JSON (zero bytes when there is no content).
    pub fn to_transport(&self) -> Message {
        let mut properties = self.properties.clone();
        properties.retain(|name, _| !prop::is_envelope(name));
        let mut put = |name: &str, value: PropertyValue| {
            properties.insert(name.to_owned(), value);
        };
        let string = |v: &str| PropertyValue::String(v.to_owned());
        let or_self = |v: &Option<String>| string(v.as_deref().unwrap_or(addr::SELF));

        if let Some(to) = &self.to {
            put(prop::TO, string(to));
        }
        if let Some(from) = self.from.as_deref().filter(|f| !f.is_empty()) {
            put(prop::FROM, string(from));
        }
        put(prop::MESSAGE_TYPE, string(self.message_type.as_str()));
        if let Some(v) = &self.event_id {
            put(prop::EVENT_ID, string(v));
        }
        put(
            prop::ORIGINATING_MESSAGE_ID,
            or_self(&self.originating_message_id),
        );
        put(prop::PARENT_MESSAGE_ID, or_self(&self.parent_message_id));
        put(
            prop::RETRY_COUNT,
            PropertyValue::Int(i64::from(self.retry_count)),
        );
        put(prop::ORIGINATING_FROM, or_self(&self.originating_from));
        if let Some(v) = &self.event_type_id {
            put(prop::EVENT_TYPE_ID, string(v));
        }
        if let Some(v) = &self.original_session_id {
            put(prop::ORIGINAL_SESSION_ID, string(v));
        }
        if let Some(v) = self.deferral_sequence {
            put(prop::DEFERRAL_SEQUENCE, PropertyValue::Int(i64::from(v)));
        }
        if let Some(v) = self.queue_time_ms {
            put(prop::QUEUE_TIME_MS, PropertyValue::Int(saturating_i64(v)));
        }
        if let Some(v) = self.processing_time_ms {
            put(
                prop::PROCESSING_TIME_MS,
                PropertyValue::Int(saturating_i64(v)),
            );
        }
        let strings = [
            (prop::DEAD_LETTER_REASON, &self.dead_letter_reason),
            (
                prop::DEAD_LETTER_ERROR_DESCRIPTION,
                &self.dead_letter_error_description,
            ),
            (prop::HANDOFF_REASON, &self.handoff_reason),
            (prop::EXTERNAL_JOB_ID, &self.external_job_id),
        ];
        for (name, value) in strings {
            if let Some(v) = value {
                put(name, string(v));
            }
        }
        if let Some(at) = self.expected_by {
            put(
                prop::EXPECTED_BY,
                PropertyValue::String(format_round_trip(at)),
            );
        }

        Message {
            message_id: self.message_id.clone(),
            session_id: self.session_id.clone(),
            correlation_id: self.correlation_id.clone(),
            reply_to: self.reply_to.clone(),
            reply_to_session_id: self.reply_to_session_id.clone(),
            to: self.broker_to.clone(),
            subject: self.subject.clone(),
            content_type: self.content_type.clone(),
            time_to_live: self.time_to_live,
            scheduled_enqueue_time: self.scheduled_enqueue_time,
            properties,
            body: self
                .content
                .as_ref()
                .map(MessageContent::to_json_bytes)
                .unwrap_or_default(),
        }
    }

    /// The effective event type: the `EventTypeId` property if non-empty,
    /// else the body's `EventContent.EventTypeId` if non-empty (upstream's read rule).
    pub fn event_type(&self) -> Option<&str> {
        non_blank(self.event_type_id.as_deref()).or_else(|| {
            non_blank(
                self.content
                    .as_ref()
                    .and_then(MessageContent::event_type_id),
            )
        })
    }

    /// The event payload (JSON text) from the body, if any.
    pub fn event_json(&self) -> Option<&str> {
        self.content.as_ref().and_then(MessageContent::event_json)
    }

    /// The lineage origin for messages this one causes: its
    /// `OriginatingMessageId`, or its own `MessageId` when that is `self`.
    pub fn lineage_origin(&self) -> Option<String> {
        self.originating_message_id
            .clone()
            .or_else(|| self.message_id.clone())
    }

    /// Whether this is a heartbeat probe: the effective event type is
    /// `NimBus.Platform.Heartbeat`, ignoring case (nimbus-semantics.md §12).
    pub fn is_heartbeat(&self) -> bool {
        self.event_type()
            .is_some_and(|t| t.eq_ignore_ascii_case(addr::HEARTBEAT_EVENT_TYPE))
    }

    /// The `DeferralSequence` of a replayed copy of a parked message (one
    /// that is back on the endpoint, not the parked copy itself), so the
    /// engine can let it run ahead of new arrivals (decision 0050).
    pub fn replayed_sequence(&self) -> Option<u32> {
        let parked_copy = self
            .to
            .as_deref()
            .is_some_and(|to| to.eq_ignore_ascii_case(addr::DEFERRED));
        self.deferral_sequence.filter(|_| !parked_copy)
    }

    /// Whether `From` is `Manager` (ignoring case, as upstream's authorization).
    pub fn is_from_manager(&self) -> bool {
        self.from
            .as_deref()
            .is_some_and(|f| f.eq_ignore_ascii_case(addr::MANAGER))
    }

    /// Checks what must hold before anything runs (SEMANTICS.md §1, §2.1),
    /// and names the first defect: MessageType handled, EventId present where
    /// the type needs one, control requests from the Manager, a session where
    /// a handler runs, EventTypeId present
    /// and consistent between property and body, and a JSON event payload
    /// where a handler runs. Heartbeat probes need no payload: the host
    /// answers a blank one with a fresh heartbeat.
    pub fn validate(&self) -> Result<(), Defect> {
        let kind = self.message_type;
        if kind == MessageType::Unknown {
            return Err(Defect::UnhandledMessageType);
        }
        if kind.requires_event_id() && non_blank(self.event_id.as_deref()).is_none() {
            return Err(Defect::MissingEventId);
        }
        if kind.is_control_request() && !self.is_from_manager() {
            return Err(Defect::NotFromManager(kind));
        }
        let property_type = non_blank(self.event_type_id.as_deref());
        let body_type = non_blank(
            self.content
                .as_ref()
                .and_then(MessageContent::event_type_id),
        );
        if let (Some(property), Some(body)) = (property_type, body_type)
            && property != body
        {
            return Err(Defect::EventTypeMismatch {
                property: property.to_owned(),
                body: body.to_owned(),
            });
        }
        if !kind.runs_handler() {
            return Ok(());
        }
        if non_blank(self.session_id.as_deref()).is_none() {
            return Err(Defect::MissingSessionId);
        }
        if self.event_type().is_none() {
            return Err(Defect::MissingEventTypeId(kind));
        }
        if self.is_heartbeat() {
            return Ok(());
        }
        let Some(json) = self.event_json() else {
            return Err(Defect::MissingEventJson(kind));
        };
        serde_json::from_str::<serde::de::IgnoredAny>(json)
            .map(|_| ())
            .map_err(|e| Defect::EventJsonNotJson(e.to_string()))
    }
}
