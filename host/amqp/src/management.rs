//! A topic's `$management` node: `schedule-message` and
//! `cancel-scheduled-message` (spec §A.10, §A.11), which the SDKs'
//! `schedule_messages` and `cancel_scheduled_messages` call. A request is a
//! map with string keys; the answer carries `statusCode` (an AMQP int),
//! `statusDescription`, and on failure `errorCondition` (a symbol), with the
//! request's message id as its correlation id.

use std::sync::Arc;

use fe2o3_amqp::link::Receiver;
use fe2o3_amqp::types::messaging::message::DecodeIntoMessage as _;
use fe2o3_amqp::types::messaging::{
    AmqpValue, ApplicationProperties, Body, Message as AmqpMessage, MessageId, Properties,
};
use fe2o3_amqp::types::primitives::{Array, OrderedMap, SimpleValue, Symbol, Value};
use nimbus_transport::{Admin, CancelError, Transport};
use tracing::debug;

use crate::cbs::Grants;
use crate::convert;
use crate::publish::{next_delivery, resolve_topic};
use crate::reply::ReplyLink;

const SCHEDULE: &str = "com.microsoft:schedule-message";
const CANCEL: &str = "com.microsoft:cancel-scheduled-message";

/// An answer: status, description, error condition, body.
struct Answer {
    status: i32,
    description: String,
    condition: Option<&'static str>,
    body: Value,
}

impl Answer {
    fn ok(body: Value) -> Answer {
        Answer {
            status: 200,
            description: "OK".to_owned(),
            condition: None,
            body,
        }
    }

    fn refused(status: i32, condition: &'static str, description: String) -> Answer {
        Answer {
            status,
            description,
            condition: Some(condition),
            body: Value::Null,
        }
    }
}

/// Answers the requests on one `$management` sender link of the topic the
/// client named as `written`, until it detaches.
pub(crate) async fn serve<T: Transport + Admin>(
    mut requests: Receiver,
    replies: Arc<ReplyLink>,
    transport: Arc<T>,
    written: String,
    grants: Arc<Grants>,
) {
    while let Some(delivery) = next_delivery(&mut requests).await {
        let (delivery, request) = delivery.into_parts();
        if let Err(error) = requests.accept(delivery).await {
            debug!(%error, "settling a $management request failed");
        }
        let correlation = request
            .properties
            .as_ref()
            .and_then(|p| p.message_id.clone());
        let answer = answer(transport.as_ref(), &written, &grants, request).await;
        replies.send(envelope(correlation, answer)).await;
    }
    let _ = requests.close().await;
}

async fn answer<T: Transport + Admin>(
    transport: &T,
    written: &str,
    grants: &Grants,
    request: AmqpMessage<Body<Value>>,
) -> Answer {
    let operation = request
        .application_properties
        .as_ref()
        .and_then(|p| p.0.get("operation"))
        .and_then(text);
    if !grants.cover(written) {
        return Answer::refused(
            401,
            "com.microsoft:unauthorized-access",
            format!(
                "no token put on $cbs on this connection grants '{written}' now: put one whose \
                 audience covers it, signed with a configured key"
            ),
        );
    }
    let topic = match resolve_topic(transport, written).await {
        Ok(topic) => topic,
        Err(error) => {
            return Answer::refused(404, "amqp:not-found", error.description.unwrap_or_default());
        }
    };
    let body = match request.body {
        Body::Value(AmqpValue(Value::Map(map))) => map,
        _ => {
            return Answer::refused(
                400,
                "com.microsoft:argument-error",
                "a $management request's body is a map".to_owned(),
            );
        }
    };
    match operation.as_deref() {
        Some(SCHEDULE) => schedule(transport, &topic, &body).await,
        Some(CANCEL) => cancel(transport, &topic, &body).await,
        other => Answer::refused(
            501,
            "com.microsoft:not-implemented",
            format!(
                "'{}' is not an operation this endpoint serves on a topic's $management yet \
                 (it serves schedule-message and cancel-scheduled-message)",
                other.unwrap_or("(no operation)")
            ),
        ),
    }
}

/// Publishes the messages of the request at once, each at the time its
/// `x-opt-scheduled-enqueue-time` says; answers their sequence numbers, in
/// order (an AMQP array of longs).
async fn schedule<T: Transport>(
    transport: &T,
    topic: &str,
    body: &OrderedMap<Value, Value>,
) -> Answer {
    let argument = |why: String| Answer::refused(400, "com.microsoft:argument-error", why);
    let entries = match field(body, "messages") {
        Some(Value::List(entries)) => entries.clone(),
        Some(Value::Array(entries)) => entries.0.clone(),
        _ => return argument("schedule-message needs `messages`, a list".to_owned()),
    };
    let mut messages = Vec::with_capacity(entries.len());
    for (index, entry) in entries.iter().enumerate() {
        let encoded = match entry {
            Value::Map(entry) => match field(entry, "message") {
                Some(Value::Binary(bytes)) => bytes.clone(),
                _ => return argument(format!("messages[{index}] has no `message` (binary)")),
            },
            _ => return argument(format!("messages[{index}] is not a map")),
        };
        let reader = serde_amqp::read::SliceReader::new(&encoded);
        let decoded = match <Body<Value>>::decode_message_from_reader(reader) {
            Ok(decoded) => decoded,
            Err(error) => {
                return argument(format!("messages[{index}] does not decode: {error}"));
            }
        };
        match convert::message(decoded) {
            Ok(message) => messages.push(message),
            Err(refused) => return argument(format!("messages[{index}]: {refused}")),
        }
    }
    if messages.is_empty() {
        return argument("schedule-message needs at least one message".to_owned());
    }
    match transport.publish(topic, messages).await {
        Ok(sequence_numbers) => {
            let numbers = Array(sequence_numbers.into_iter().map(Value::Long).collect());
            Answer::ok(map([("sequence-numbers", Value::Array(numbers))]))
        }
        Err(error) => Answer::refused(500, "com.microsoft:server-busy", error.to_string()),
    }
}

/// Cancels each scheduled message named, in order; the first that is not
/// (or no longer) scheduled is answered `message-not-found`.
async fn cancel<T: Transport>(
    transport: &T,
    topic: &str,
    body: &OrderedMap<Value, Value>,
) -> Answer {
    let numbers: Vec<i64> = match field(body, "sequence-numbers") {
        Some(Value::Array(numbers)) => numbers.0.iter().filter_map(long).collect(),
        Some(Value::List(numbers)) => numbers.iter().filter_map(long).collect(),
        _ => {
            return Answer::refused(
                400,
                "com.microsoft:argument-error",
                "cancel-scheduled-message needs `sequence-numbers`, an array of longs".to_owned(),
            );
        }
    };
    for number in numbers {
        match transport.cancel_scheduled(topic, number).await {
            Ok(()) => {}
            Err(CancelError::NotFound { .. }) => {
                return Answer::refused(
                    404,
                    "com.microsoft:message-not-found",
                    format!("no message of '{topic}' is scheduled with sequence number {number}"),
                );
            }
            Err(error) => {
                return Answer::refused(500, "com.microsoft:server-busy", error.to_string());
            }
        }
    }
    Answer::ok(Value::Null)
}

fn envelope(correlation: Option<MessageId>, answer: Answer) -> AmqpMessage<AmqpValue<Value>> {
    let mut properties = Properties::builder().build();
    properties.correlation_id = correlation;
    let mut application = ApplicationProperties::builder()
        .insert("statusCode", SimpleValue::Int(answer.status))
        .insert("statusDescription", SimpleValue::String(answer.description));
    if let Some(condition) = answer.condition {
        application = application.insert(
            "errorCondition",
            SimpleValue::Symbol(Symbol::from(condition)),
        );
    }
    AmqpMessage::builder()
        .properties(properties)
        .application_properties(application.build())
        .value(answer.body)
        .build()
}

/// A map with string keys, as the SDKs read answers.
fn map<const N: usize>(entries: [(&str, Value); N]) -> Value {
    Value::Map(
        entries
            .into_iter()
            .map(|(key, value)| (Value::String(key.to_owned()), value))
            .collect(),
    )
}

/// The value under `key`, written as a string or a symbol.
fn field<'a>(map: &'a OrderedMap<Value, Value>, key: &str) -> Option<&'a Value> {
    map.iter()
        .find(|(k, _)| text_value(k).as_deref() == Some(key))
        .map(|(_, value)| value)
}

fn text(value: &SimpleValue) -> Option<String> {
    match value {
        SimpleValue::String(text) => Some(text.clone()),
        SimpleValue::Symbol(symbol) => Some(symbol.0.clone()),
        SimpleValue::Binary(bytes) => String::from_utf8(bytes.to_vec()).ok(),
        _ => None,
    }
}

fn text_value(value: &Value) -> Option<String> {
    match value {
        Value::String(text) => Some(text.clone()),
        Value::Symbol(symbol) => Some(symbol.0.clone()),
        _ => None,
    }
}

fn long(value: &Value) -> Option<i64> {
    match value {
        Value::Long(n) => Some(*n),
        Value::Int(n) => Some(i64::from(*n)),
        _ => None,
    }
}
