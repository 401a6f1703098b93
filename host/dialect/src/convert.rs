//! Messages between the wire and the broker's model, both ways: a message
//! as an SDK sends it, read into the broker's [`Message`] ([`message`],
//! [`batch`]); a broker message as a client sends it ([`outgoing`]); a
//! received message as the broker sends it ([`received`]) and as a client
//! reads it back ([`delivered`]).
//!
//! The broker's model keeps string ids and four property types (string,
//! integer, float, boolean), which is all a NimBus event carries. What does
//! not fit is refused by name rather than changed: a uuid, ulong or binary
//! message id is written as text (as Service Bus shows it), a null
//! application property is taken as absent, but a property of another
//! type, or a body that is not bytes, is refused with the property or
//! section named.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fe2o3_amqp::types::messaging::{Body, Message as AmqpMessage, MessageId};
use fe2o3_amqp::types::primitives::{SimpleValue, Value};
use nimbus_transport::{LockToken, Message, PropertyValue};

use crate::outcome::{DEAD_LETTER_ERROR_DESCRIPTION, DEAD_LETTER_REASON};

/// The message annotation a scheduled message carries.
const SCHEDULED_ENQUEUE_TIME: &str = "x-opt-scheduled-enqueue-time";

/// The message format of a batch: one data section per encoded message.
pub const BATCH_FORMAT: u32 = 0x8001_3700;

/// Why a message cannot be taken as it is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConvertError {
    /// An application property whose type the broker does not keep.
    #[error(
        "application property '{name}' is {kind}; nimbus keeps string, integer, floating-point \
         and boolean properties"
    )]
    PropertyType {
        /// The property.
        name: String,
        /// Its AMQP type.
        kind: &'static str,
    },
    /// A body that is not one data section.
    #[error("the body is {0}; nimbus takes a body of one data section (bytes)")]
    Body(&'static str),
    /// A delivery tag that is not a 16-byte lock token.
    #[error("the delivery tag is {0} bytes; a Service Bus lock token is 16")]
    Tag(usize),
    /// An annotation the broker always stamps, missing.
    #[error("the message has no {0} annotation, which Service Bus always stamps")]
    Missing(&'static str),
    /// A message inside a batch that does not decode.
    #[error("message {index} of the batch does not decode: {why}")]
    BatchEntry {
        /// Its place in the batch, from 0.
        index: usize,
        /// The decoder's words.
        why: String,
    },
}

/// Reads one message (format 0).
///
/// # Errors
///
/// [`ConvertError`] naming what the broker cannot keep.
pub fn message(amqp: AmqpMessage<Body<Value>>) -> Result<Message, ConvertError> {
    let mut message = Message {
        body: body(amqp.body)?,
        ..Message::default()
    };
    if let Some(properties) = amqp.properties {
        message.message_id = properties.message_id.map(id_text);
        message.correlation_id = properties.correlation_id.map(id_text);
        message.session_id = properties.group_id;
        message.reply_to = properties.reply_to;
        message.reply_to_session_id = properties.reply_to_group_id;
        message.to = properties.to;
        message.subject = properties.subject;
        message.content_type = properties.content_type.map(|c| c.0);
    }
    if let Some(ttl) = amqp.header.and_then(|h| h.ttl) {
        message.time_to_live = Some(Duration::from_millis(u64::from(ttl)));
    }
    if let Some(annotations) = amqp.message_annotations {
        message.scheduled_enqueue_time = annotations
            .0
            .iter()
            .find(|(key, _)| {
                matches!(key, fe2o3_amqp::types::messaging::annotations::OwnedKey::Symbol(s)
                    if s.as_str() == SCHEDULED_ENQUEUE_TIME)
            })
            .and_then(|(_, value)| time_of(Some(value)))
            .filter(|at| *at > SystemTime::now());
    }
    if let Some(application) = amqp.application_properties {
        for (name, value) in application.0 {
            // A null property reads as an absent one, as NimBus writes an
            // unset `EventId`.
            if value == SimpleValue::Null {
                continue;
            }
            let value = property(&name, value)?;
            message.properties.insert(name, value);
        }
    }
    Ok(message)
}

/// Reads a batch (format [`BATCH_FORMAT`]): each data section of the outer
/// message is one whole encoded message.
///
/// # Errors
///
/// [`ConvertError`] for the first entry that does not decode or convert.
pub fn batch(amqp: AmqpMessage<Body<Value>>) -> Result<Vec<Message>, ConvertError> {
    use fe2o3_amqp::types::messaging::message::DecodeIntoMessage as _;
    let Body::Data(sections) = amqp.body else {
        return Err(ConvertError::Body("not data sections, in a batch"));
    };
    sections
        .into_iter()
        .enumerate()
        .map(|(index, section)| {
            // A message inside a message: bounded as the frames are.
            crate::bounds::check_values(&section.0, crate::bounds::MAX_DEPTH).map_err(|e| {
                ConvertError::BatchEntry {
                    index,
                    why: e.to_string(),
                }
            })?;
            let reader = serde_amqp::read::SliceReader::new(&section.0);
            let inner = <Body<Value>>::decode_message_from_reader(reader).map_err(|e| {
                ConvertError::BatchEntry {
                    index,
                    why: e.to_string(),
                }
            })?;
            message(inner)
        })
        .collect()
}

fn body(body: Body<Value>) -> Result<Vec<u8>, ConvertError> {
    match body {
        Body::Data(sections) => {
            let mut sections = sections.into_iter();
            match (sections.next(), sections.next()) {
                (Some(data), None) => Ok(data.0.into_vec()),
                (None, _) => Ok(Vec::new()),
                (Some(_), Some(_)) => Err(ConvertError::Body("several data sections")),
            }
        }
        Body::Empty => Ok(Vec::new()),
        Body::Value(_) => Err(ConvertError::Body("an amqp-value section")),
        Body::Sequence(_) => Err(ConvertError::Body("amqp-sequence sections")),
    }
}

/// A message id as text: a uuid hyphenated, a number in decimal, bytes in
/// hex.
fn id_text(id: MessageId) -> String {
    match id {
        MessageId::String(text) => text,
        MessageId::Uuid(uuid) => uuid::Uuid::from_bytes(uuid.into_inner())
            .hyphenated()
            .to_string(),
        MessageId::Ulong(number) => number.to_string(),
        MessageId::Binary(bytes) => bytes.iter().map(|b| format!("{b:02x}")).collect(),
    }
}

fn property(name: &str, value: SimpleValue) -> Result<PropertyValue, ConvertError> {
    let refused = |kind| ConvertError::PropertyType {
        name: name.to_owned(),
        kind,
    };
    Ok(match value {
        SimpleValue::String(text) => PropertyValue::String(text),
        SimpleValue::Symbol(symbol) => PropertyValue::String(symbol.0),
        SimpleValue::Bool(flag) => PropertyValue::Bool(flag),
        SimpleValue::Byte(n) => PropertyValue::Int(n.into()),
        SimpleValue::Short(n) => PropertyValue::Int(n.into()),
        SimpleValue::Int(n) => PropertyValue::Int(n.into()),
        SimpleValue::Long(n) => PropertyValue::Int(n),
        SimpleValue::Ubyte(n) => PropertyValue::Int(n.into()),
        SimpleValue::Ushort(n) => PropertyValue::Int(n.into()),
        SimpleValue::Uint(n) => PropertyValue::Int(n.into()),
        SimpleValue::Ulong(n) => {
            PropertyValue::Int(i64::try_from(n).map_err(|_| refused("a ulong past i64"))?)
        }
        SimpleValue::Float(f) => PropertyValue::Float(f64::from(f.into_inner())),
        SimpleValue::Double(f) => PropertyValue::Float(f.into_inner()),
        SimpleValue::Null => return Err(refused("null")),
        SimpleValue::Timestamp(_) => return Err(refused("a timestamp")),
        SimpleValue::Uuid(_) => return Err(refused("a uuid")),
        SimpleValue::Binary(_) => return Err(refused("binary")),
        SimpleValue::Char(_) => return Err(refused("a char")),
        SimpleValue::Decimal32(_) | SimpleValue::Decimal64(_) | SimpleValue::Decimal128(_) => {
            return Err(refused("a decimal"));
        }
        SimpleValue::Described(_) => return Err(refused("a described value")),
    })
}

/// The header of a message the broker sends: durable, its TTL, and the
/// number of earlier deliveries.
fn header(received: &nimbus_transport::ReceivedMessage) -> fe2o3_amqp::types::messaging::Header {
    fe2o3_amqp::types::messaging::Header {
        durable: true,
        ttl: received
            .message
            .time_to_live
            .map(|ttl| u32::try_from(ttl.as_millis()).unwrap_or(u32::MAX)),
        delivery_count: received.delivery_count.saturating_sub(1),
        ..Default::default()
    }
}

/// The header with every field written. fe2o3 leaves fields at their
/// default off the end of the list, so a first delivery's count of 0 is
/// not sent, and Python reads a missing count as `None`, not 0.
#[derive(serde_amqp::SerializeComposite)]
#[amqp_contract(
    name = "amqp:header:list",
    code = "0x0000_0000:0x0000_0070",
    encoding = "list",
    rename_all = "kebab-case"
)]
struct WholeHeader {
    durable: bool,
    priority: u8,
    ttl: Option<u32>,
    first_acquirer: bool,
    delivery_count: u32,
}

/// The header bytes fe2o3 writes at the start of `received`'s message, and
/// the whole header to write in their place; `None` when they are the same.
pub fn header_patch(received: &nimbus_transport::ReceivedMessage) -> Option<HeaderPatch> {
    let header = header(received);
    let written = serde_amqp::to_vec(&header).ok()?;
    let whole = serde_amqp::to_vec(&WholeHeader {
        durable: header.durable,
        priority: header.priority.0,
        ttl: header.ttl,
        first_acquirer: header.first_acquirer,
        delivery_count: header.delivery_count,
    })
    .ok()?;
    (written != whole).then_some(HeaderPatch { written, whole })
}

/// A message's first bytes as fe2o3 writes them, and what goes instead.
#[derive(Debug, Clone)]
pub struct HeaderPatch {
    /// The header as fe2o3 encodes it.
    pub written: Vec<u8>,
    /// The header with every field written.
    pub whole: Vec<u8>,
}

/// An AMQP timestamp as a time (`None` for anything else, or a time
/// before 1970).
pub fn time_of(value: Option<&Value>) -> Option<SystemTime> {
    match value {
        Some(Value::Timestamp(at)) => u64::try_from(at.milliseconds())
            .ok()
            .and_then(|ms| UNIX_EPOCH.checked_add(Duration::from_millis(ms))),
        _ => None,
    }
}

/// .NET ticks (100 ns since 0001-01-01) at the Unix epoch.
const TICKS_AT_UNIX_EPOCH: i64 = 621_355_968_000_000_000;

/// `at` in .NET ticks, as `com.microsoft:locked-until-utc` carries it.
pub fn ticks(at: SystemTime) -> i64 {
    let ms = at.duration_since(UNIX_EPOCH).map_or(0, |d| {
        i64::try_from(d.as_millis()).unwrap_or(i64::MAX / 10_000)
    });
    ms.saturating_mul(10_000)
        .saturating_add(TICKS_AT_UNIX_EPOCH)
}

/// .NET ticks as a time (to the millisecond): the inverse of [`ticks`].
pub fn from_ticks(ticks: i64) -> SystemTime {
    let ms = ticks.saturating_sub(TICKS_AT_UNIX_EPOCH) / 10_000;
    UNIX_EPOCH + Duration::from_millis(u64::try_from(ms).unwrap_or(0))
}

/// `at` as an AMQP timestamp (ms since the Unix epoch).
pub fn timestamp(at: SystemTime) -> Value {
    let ms = at
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
    Value::Timestamp(fe2o3_amqp::types::primitives::Timestamp::from_milliseconds(
        ms,
    ))
}

/// A received (or peeked) message encoded whole as the broker sends it,
/// its header written whole (see [`header_patch`]): what a `$management`
/// answer carries.
///
/// # Errors
///
/// When the encoder fails (it does not for the types [`received`] writes).
pub fn encode_received(
    message: &nimbus_transport::ReceivedMessage,
) -> Result<Vec<u8>, serde_amqp::Error> {
    let mut bytes = encode(received(message, false))?;
    if let Some(patch) = header_patch(message)
        && bytes.starts_with(&patch.written)
    {
        bytes.splice(..patch.written.len(), patch.whole);
    }
    Ok(bytes)
}

/// A message a client received, as the broker's [`ReceivedMessage`]: the
/// inverse of [`received`]. `tag` is the delivery tag, the lock token in
/// .NET order (a peeked message has none: its token is nil); `locked_until`
/// stands where the message states none (a session's lock covers it).
///
/// Only a message `from_dead_letter_queue` has its `DeadLetterReason` and
/// `DeadLetterErrorDescription` properties read as the broker's reason for
/// dead-lettering it: on any other they are the sender's (a NimBus
/// dead-letter notification carries them for the Resolver).
///
/// [`ReceivedMessage`]: nimbus_transport::ReceivedMessage
///
/// # Errors
///
/// [`ConvertError`] naming what does not read.
pub fn delivered(
    mut amqp: AmqpMessage<Body<Value>>,
    tag: Option<&[u8]>,
    locked_until: SystemTime,
    from_dead_letter_queue: bool,
) -> Result<nimbus_transport::ReceivedMessage, ConvertError> {
    let lock_token = match tag {
        None => LockToken::from_uuid(uuid::Uuid::nil()),
        Some(tag) => lock_token_of(tag).ok_or(ConvertError::Tag(tag.len()))?,
    };
    let annotation = |key: &str| {
        amqp.message_annotations.as_ref().and_then(|annotations| {
            annotations
                .0
                .iter()
                .find(|(k, _)| {
                    matches!(k, fe2o3_amqp::types::messaging::annotations::OwnedKey::Symbol(s)
                        if s.as_str() == key)
                })
                .map(|(_, value)| value.clone())
        })
    };
    let at = |value: Option<Value>| time_of(value.as_ref());
    let sequence_number = match annotation("x-opt-sequence-number") {
        Some(Value::Long(n)) => n,
        _ => return Err(ConvertError::Missing("x-opt-sequence-number")),
    };
    let enqueued_time = at(annotation("x-opt-enqueued-time"))
        .ok_or(ConvertError::Missing("x-opt-enqueued-time"))?;
    let locked_until = at(annotation("x-opt-locked-until")).unwrap_or(locked_until);
    let delivery_count = amqp
        .header
        .as_ref()
        .map_or(0, |header| header.delivery_count)
        .saturating_add(1);
    let mut take = |key: &str| {
        if !from_dead_letter_queue {
            return None;
        }
        let application = amqp.application_properties.as_mut()?;
        match application.0.swap_remove(key) {
            Some(SimpleValue::String(text)) => Some(text),
            _ => None,
        }
    };
    let dead_letter_reason = take(DEAD_LETTER_REASON);
    let dead_letter_description = take(DEAD_LETTER_ERROR_DESCRIPTION);
    // What the broker stamped is not the sender's message.
    amqp.message_annotations = None;
    Ok(nimbus_transport::ReceivedMessage {
        message: message(amqp)?,
        sequence_number,
        enqueued_time,
        delivery_count,
        dead_letter_reason,
        dead_letter_description,
        lock_token,
        locked_until,
    })
}

/// The delivery tag a message goes with: its lock token, in .NET's byte
/// order (as the SDKs read a tag into a `Guid`).
pub fn delivery_tag(token: LockToken) -> [u8; 16] {
    token.as_uuid().to_bytes_le()
}

/// The lock token a delivery tag carries: the inverse of [`delivery_tag`];
/// `None` for a tag that is not 16 bytes.
pub fn lock_token_of(tag: &[u8]) -> Option<LockToken> {
    let bytes: [u8; 16] = tag.try_into().ok()?;
    Some(LockToken::from_uuid(uuid::Uuid::from_bytes_le(bytes)))
}

/// A broker message as a client sends it: the inverse of [`message`]
/// (ids as strings, properties as their AMQP types, the TTL in the header,
/// a scheduled time as `x-opt-scheduled-enqueue-time`, the body one data
/// section).
pub fn outgoing(message: &Message) -> AmqpMessage<Body<Value>> {
    use fe2o3_amqp::types::messaging::{
        ApplicationProperties, Batch, Data, Header, MessageAnnotations,
    };
    use fe2o3_amqp::types::primitives::{Binary, Symbol};

    let properties = amqp_properties(message);
    let mut application = ApplicationProperties::builder();
    for (name, value) in &message.properties {
        application = application.insert(name.clone(), simple(value));
    }
    let mut built = AmqpMessage::builder()
        .properties(properties)
        .application_properties(application.build());
    if let Some(ttl) = message.time_to_live {
        built = built.header(Header {
            durable: true,
            ttl: Some(u32::try_from(ttl.as_millis()).unwrap_or(u32::MAX)),
            ..Header::default()
        });
    }
    if let Some(at) = message.scheduled_enqueue_time {
        built = built.message_annotations(
            MessageAnnotations::builder()
                .insert(Symbol::from(SCHEDULED_ENQUEUE_TIME), timestamp(at))
                .build(),
        );
    }
    built
        .body(Body::Data(Batch::new(vec![Data(Binary::from(
            message.body.clone(),
        ))])))
        .build()
}

/// `message` encoded whole, as `schedule-message` carries each message.
///
/// # Errors
///
/// When the encoder fails (it does not for the types [`outgoing`] writes).
pub fn encode(message: AmqpMessage<Body<Value>>) -> Result<Vec<u8>, serde_amqp::Error> {
    use fe2o3_amqp::types::messaging::message::__private::Serializable;
    serde_amqp::to_vec(&Serializable(message))
}

/// A message's ids, session and addressing as AMQP properties (ids as
/// strings).
fn amqp_properties(message: &Message) -> fe2o3_amqp::types::messaging::Properties {
    fe2o3_amqp::types::messaging::Properties {
        message_id: message.message_id.clone().map(MessageId::String),
        correlation_id: message.correlation_id.clone().map(MessageId::String),
        group_id: message.session_id.clone(),
        reply_to: message.reply_to.clone(),
        reply_to_group_id: message.reply_to_session_id.clone(),
        to: message.to.clone(),
        subject: message.subject.clone(),
        content_type: message.content_type.clone().map(Into::into),
        ..Default::default()
    }
}

fn simple(value: &PropertyValue) -> SimpleValue {
    match value {
        PropertyValue::String(text) => SimpleValue::String(text.clone()),
        PropertyValue::Int(n) => SimpleValue::Long(*n),
        PropertyValue::Float(f) => SimpleValue::Double((*f).into()),
        PropertyValue::Bool(flag) => SimpleValue::Bool(*flag),
    }
}

/// A broker message as the broker sends it to a receiver (spec §A.7.3):
/// the header's delivery count is the number of earlier deliveries, the
/// broker's facts are message annotations of the exact types the SDKs
/// cast to, and `locked_until` is stated only for a message locked on its
/// own (a session's messages are under the session's lock).
pub fn received(
    received: &nimbus_transport::ReceivedMessage,
    locked_alone: bool,
) -> AmqpMessage<Body<Value>> {
    use fe2o3_amqp::types::messaging::{ApplicationProperties, Batch, Data, MessageAnnotations};
    use fe2o3_amqp::types::primitives::Binary;

    let message = &received.message;
    let header = header(received);
    let properties = amqp_properties(message);

    let mut annotations = MessageAnnotations::builder()
        .insert(
            fe2o3_amqp::types::primitives::Symbol::from("x-opt-sequence-number"),
            Value::Long(received.sequence_number),
        )
        .insert(
            fe2o3_amqp::types::primitives::Symbol::from("x-opt-enqueued-time"),
            timestamp(received.enqueued_time),
        );
    if locked_alone {
        annotations = annotations.insert(
            fe2o3_amqp::types::primitives::Symbol::from("x-opt-locked-until"),
            timestamp(received.locked_until),
        );
    }

    let mut application = ApplicationProperties::builder();
    for (name, value) in &message.properties {
        application = application.insert(name.clone(), simple(value));
    }
    if let Some(reason) = &received.dead_letter_reason {
        application = application.insert(DEAD_LETTER_REASON, reason.as_str());
    }
    if let Some(description) = &received.dead_letter_description {
        application = application.insert(DEAD_LETTER_ERROR_DESCRIPTION, description.as_str());
    }
    AmqpMessage::builder()
        .header(header)
        .properties(properties)
        .message_annotations(annotations.build())
        .application_properties(application.build())
        .body(Body::Data(Batch::new(vec![Data(Binary::from(
            message.body.clone(),
        ))])))
        .build()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use fe2o3_amqp::types::messaging::message::__private::Serializable;
    use fe2o3_amqp::types::messaging::{
        AmqpValue, ApplicationProperties, Batch, Data, Header, Properties,
    };
    use fe2o3_amqp::types::primitives::Binary;

    use super::*;

    fn with_body(body: &[u8]) -> AmqpMessage<Body<Value>> {
        AmqpMessage::builder()
            .body(Body::Data(Batch::new(vec![Data(Binary::from(
                body.to_vec(),
            ))])))
            .build()
    }

    #[test]
    fn an_sdk_message_keeps_its_ids_session_ttl_and_properties() {
        let mut amqp = with_body(b"{\"OrderId\":\"o-1\"}");
        amqp.header = Some(Header {
            ttl: Some(60_000),
            ..Header::default()
        });
        let mut properties = Properties::builder()
            .message_id(MessageId::Uuid(fe2o3_amqp::types::primitives::Uuid::from(
                [0x11; 16],
            )))
            .correlation_id(MessageId::String("corr-1".to_owned()))
            .group_id("order-1".to_owned())
            .build();
        properties.content_type = Some("application/json".into());
        amqp.properties = Some(properties);
        amqp.application_properties = Some(
            ApplicationProperties::builder()
                .insert("EventTypeId", "OrderPlaced")
                .insert("RetryCount", SimpleValue::Int(2))
                .insert("Sequence", SimpleValue::Long(1 << 40))
                .insert("Urgent", SimpleValue::Bool(true))
                .insert("Total", SimpleValue::Double(10.5.into()))
                .insert("EventId", SimpleValue::Null)
                .build(),
        );
        let message = message(amqp).unwrap();
        assert_eq!(message.body, b"{\"OrderId\":\"o-1\"}");
        assert_eq!(
            message.message_id.as_deref(),
            Some("11111111-1111-1111-1111-111111111111")
        );
        assert_eq!(message.correlation_id.as_deref(), Some("corr-1"));
        assert_eq!(message.session_id.as_deref(), Some("order-1"));
        assert_eq!(message.content_type.as_deref(), Some("application/json"));
        assert_eq!(message.time_to_live, Some(Duration::from_secs(60)));
        assert_eq!(
            message.properties.get("EventTypeId"),
            Some(&PropertyValue::String("OrderPlaced".to_owned()))
        );
        assert_eq!(
            message.properties.get("RetryCount"),
            Some(&PropertyValue::Int(2))
        );
        assert_eq!(
            message.properties.get("Sequence"),
            Some(&PropertyValue::Int(1 << 40))
        );
        assert_eq!(
            message.properties.get("Urgent"),
            Some(&PropertyValue::Bool(true))
        );
        assert_eq!(
            message.properties.get("Total"),
            Some(&PropertyValue::Float(10.5))
        );
        assert!(
            !message.properties.contains_key("EventId"),
            "null is absent"
        );
    }

    #[test]
    fn what_the_broker_cannot_keep_is_refused_by_name() {
        let mut amqp = with_body(b"x");
        amqp.application_properties = Some(
            ApplicationProperties::builder()
                .insert(
                    "CorrelationGuid",
                    SimpleValue::Uuid(fe2o3_amqp::types::primitives::Uuid::from([1; 16])),
                )
                .build(),
        );
        let refused = message(amqp).unwrap_err();
        assert!(
            refused.to_string().contains("'CorrelationGuid' is a uuid"),
            "{refused}"
        );

        let value_body: AmqpMessage<Body<Value>> = AmqpMessage::builder()
            .body(Body::Value(AmqpValue(Value::String("text".to_owned()))))
            .build();
        assert_eq!(
            message(value_body).unwrap_err(),
            ConvertError::Body("an amqp-value section")
        );
    }

    #[test]
    fn a_batch_is_read_entry_by_entry_and_a_broken_entry_is_named() {
        let encode = |body: &[u8], session: &str| {
            let mut entry = with_body(body);
            entry.properties = Some(Properties::builder().group_id(session.to_owned()).build());
            Data(Binary::from(
                serde_amqp::to_vec(&Serializable(entry)).unwrap(),
            ))
        };
        let outer = |sections: Vec<Data>| -> AmqpMessage<Body<Value>> {
            AmqpMessage::builder()
                .body(Body::Data(Batch::new(sections)))
                .build()
        };
        let read = batch(outer(vec![encode(b"one", "s-1"), encode(b"two", "s-2")])).unwrap();
        let read: Vec<_> = read
            .iter()
            .map(|m| (m.body.as_slice(), m.session_id.as_deref()))
            .collect();
        assert_eq!(
            read,
            vec![(&b"one"[..], Some("s-1")), (&b"two"[..], Some("s-2"))]
        );

        let broken = batch(outer(vec![
            encode(b"one", "s-1"),
            Data(Binary::from(vec![0xff, 0x00])),
        ]))
        .unwrap_err();
        assert!(
            matches!(broken, ConvertError::BatchEntry { index: 1, .. }),
            "{broken}"
        );
    }

    fn stamped(delivery_count: u32) -> nimbus_transport::ReceivedMessage {
        let mut message = Message::new(b"body".to_vec());
        message.message_id = Some("m-1".to_owned());
        message.session_id = Some("s-1".to_owned());
        message
            .properties
            .insert("Step".to_owned(), PropertyValue::Int(2));
        nimbus_transport::ReceivedMessage {
            message,
            sequence_number: 42,
            enqueued_time: UNIX_EPOCH + Duration::from_secs(1_000),
            delivery_count,
            dead_letter_reason: Some("BadData".to_owned()),
            dead_letter_description: None,
            lock_token: nimbus_transport::LockToken::new(),
            locked_until: UNIX_EPOCH + Duration::from_secs(2_000),
        }
    }

    #[test]
    fn a_delivered_message_carries_the_brokers_facts_in_the_types_the_sdks_cast_to() {
        let amqp = received(&stamped(3), true);
        assert_eq!(amqp.header.as_ref().map(|h| h.delivery_count), Some(2));
        let annotations = amqp.message_annotations.expect("annotations").0;
        let annotation = |key: &str| {
            annotations
                .iter()
                .find(|(k, _)| {
                    matches!(k, fe2o3_amqp::types::messaging::annotations::OwnedKey::Symbol(s)
                        if s.as_str() == key)
                })
                .map(|(_, value)| value.clone())
        };
        assert_eq!(annotation("x-opt-sequence-number"), Some(Value::Long(42)));
        assert_eq!(
            annotation("x-opt-enqueued-time"),
            Some(timestamp(UNIX_EPOCH + Duration::from_secs(1_000)))
        );
        assert_eq!(
            annotation("x-opt-locked-until"),
            Some(timestamp(UNIX_EPOCH + Duration::from_secs(2_000)))
        );
        let application = amqp.application_properties.expect("properties").0;
        assert_eq!(application.get("Step"), Some(&SimpleValue::Long(2)));
        assert_eq!(
            application.get("DeadLetterReason"),
            Some(&SimpleValue::String("BadData".to_owned()))
        );
        assert_eq!(
            amqp.properties.and_then(|p| p.group_id).as_deref(),
            Some("s-1")
        );
        // A session's message is under the session's lock: no lock of its own.
        let in_session = received(&stamped(1), false)
            .message_annotations
            .expect("annotations");
        assert!(in_session.0.len() == 2, "{in_session:?}");
    }

    #[test]
    fn a_first_delivery_s_header_is_written_whole_so_its_count_of_zero_is_sent() {
        let patch = header_patch(&stamped(1)).expect("fe2o3 leaves the 0 off");
        assert!(patch.whole.len() > patch.written.len());
        let read: fe2o3_amqp::types::messaging::Header =
            serde_amqp::from_slice(&patch.whole).expect("a header");
        assert_eq!((read.durable, read.delivery_count), (true, 0));
        // The whole header is a list of all five fields.
        assert_eq!(&patch.whole[..3], b"\x00\x53\x70");
        assert_eq!(patch.whole[5], 5, "{:x?}", patch.whole);
    }

    #[test]
    fn a_message_sent_by_the_client_reads_back_as_it_was() {
        let mut sent = Message::new(b"{\"OrderId\":\"o-1\"}".to_vec());
        sent.message_id = Some("m-1".to_owned());
        sent.correlation_id = Some("c-1".to_owned());
        sent.session_id = Some("order-1".to_owned());
        sent.to = Some("billing".to_owned());
        sent.time_to_live = Some(Duration::from_secs(60));
        sent.scheduled_enqueue_time = Some(SystemTime::now() + Duration::from_secs(3600));
        sent.properties.insert(
            "EventTypeId".to_owned(),
            PropertyValue::String("OrderPlaced".to_owned()),
        );
        sent.properties
            .insert("RetryCount".to_owned(), PropertyValue::Int(2));
        sent.properties
            .insert("Total".to_owned(), PropertyValue::Float(10.5));
        sent.properties
            .insert("Urgent".to_owned(), PropertyValue::Bool(true));
        let bytes = encode(outgoing(&sent)).unwrap();
        let reader = serde_amqp::read::SliceReader::new(&bytes);
        use fe2o3_amqp::types::messaging::message::DecodeIntoMessage as _;
        let decoded = <Body<Value>>::decode_message_from_reader(reader).unwrap();
        let mut read = message(decoded).unwrap();
        // Timestamps travel in milliseconds.
        let at =
            |t: Option<SystemTime>| t.map(|t| t.duration_since(UNIX_EPOCH).unwrap().as_millis());
        assert_eq!(
            at(read.scheduled_enqueue_time),
            at(sent.scheduled_enqueue_time)
        );
        read.scheduled_enqueue_time = sent.scheduled_enqueue_time;
        assert_eq!(read, sent);
    }

    #[test]
    fn a_delivered_message_reads_back_as_the_broker_sent_it() {
        let sent = delivered_fixture();
        let amqp = received(&sent, true);
        let tag = delivery_tag(sent.lock_token);
        let read = super::delivered(amqp, Some(&tag), UNIX_EPOCH, true).unwrap();
        assert_eq!(read, sent);
        assert!(matches!(
            super::delivered(received(&sent, true), Some(&[1, 2, 3, 4]), UNIX_EPOCH, true),
            Err(ConvertError::Tag(4))
        ));
    }

    /// A NimBus dead-letter notification on its way to the Resolver
    /// carries `DeadLetterReason` and `DeadLetterErrorDescription` as its
    /// own properties: read from a subscription, they stay the message's.
    #[test]
    fn dead_letter_properties_are_the_brokers_only_from_a_dead_letter_queue() {
        let mut sent = stamped(1);
        sent.dead_letter_reason = None;
        sent.dead_letter_description = None;
        for (name, text) in [
            ("DeadLetterReason", "Permanent failure"),
            ("DeadLetterErrorDescription", "order o-9 has no lines"),
        ] {
            sent.message
                .properties
                .insert(name.to_owned(), PropertyValue::String(text.to_owned()));
        }
        let tag = delivery_tag(sent.lock_token);
        let read = super::delivered(received(&sent, true), Some(&tag), UNIX_EPOCH, false).unwrap();
        assert_eq!(read, sent);
        let dead = super::delivered(received(&sent, true), Some(&tag), UNIX_EPOCH, true).unwrap();
        assert_eq!(
            dead.dead_letter_reason.as_deref(),
            Some("Permanent failure")
        );
        assert!(!dead.message.properties.contains_key("DeadLetterReason"));
    }

    fn delivered_fixture() -> nimbus_transport::ReceivedMessage {
        let mut fixture = stamped(3);
        fixture.dead_letter_description = Some("why".to_owned());
        fixture
    }

    #[test]
    fn ticks_count_from_the_dotnet_epoch_and_read_back() {
        assert_eq!(ticks(UNIX_EPOCH), TICKS_AT_UNIX_EPOCH);
        // 2026-12-06T00:00:00Z, as .NET's DateTime.Ticks gives it.
        let at = UNIX_EPOCH + Duration::from_secs(1_796_515_200);
        assert_eq!(ticks(at), 639_321_120_000_000_000);
        assert_eq!(from_ticks(ticks(at)), at);
    }
}
