//! A message as an SDK sends it, read into the broker's [`Message`].
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
use nimbus_transport::{Message, PropertyValue};

/// The message annotation a scheduled message carries.
const SCHEDULED_ENQUEUE_TIME: &str = "x-opt-scheduled-enqueue-time";

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
            .and_then(|(_, value)| match value {
                Value::Timestamp(at) => u64::try_from(at.milliseconds())
                    .ok()
                    .and_then(|ms| UNIX_EPOCH.checked_add(Duration::from_millis(ms))),
                _ => None,
            })
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

/// Reads a batch (format `0x80013700`): each data section of the outer
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
}
