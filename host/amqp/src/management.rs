//! The `$management` nodes (spec §A.10, §A.11). A topic's serves
//! `schedule-message` and `cancel-scheduled-message`, which the SDKs'
//! `schedule_messages` and `cancel_scheduled_messages` call; a
//! subscription's serves a held session's state and lock
//! (`get-session-state`, `set-session-state`, `renew-session-lock`). A request is a
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
use nimbus_transport::{Admin, CancelError, LockToken, SessionLock, Transport};
use tokio::sync::oneshot;
use tracing::debug;

use crate::address::{EntityAddress, SubQueue};
use crate::bounds;
use crate::cbs::Grants;
use crate::convert;
use crate::endpoint::PublishCheck;
use crate::held::{HeldDeliveries, HeldSessions, LinkCommand, Outcome, SettleFailure};
use crate::publish::{checked, next_delivery, resolve_topic};
use crate::receive::property;
use crate::reply::ReplyLink;
use crate::sas::Right;

const SCHEDULE: &str = "com.microsoft:schedule-message";
const CANCEL: &str = "com.microsoft:cancel-scheduled-message";
const GET_SESSION_STATE: &str = "com.microsoft:get-session-state";
const SET_SESSION_STATE: &str = "com.microsoft:set-session-state";
const RENEW_SESSION_LOCK: &str = "com.microsoft:renew-session-lock";
const RENEW_LOCK: &str = "com.microsoft:renew-lock";
const UPDATE_DISPOSITION: &str = "com.microsoft:update-disposition";
const PEEK: &str = "com.microsoft:peek-message";

/// The most messages one peek answers: Service Bus's own page.
const PEEK_MAX: usize = 250;

/// Which entity a `$management` node belongs to.
pub(crate) enum Managed<S> {
    /// A topic, as the client wrote it.
    Topic(String),
    /// A subscription, and the session locks this connection holds.
    Subscription {
        entity: EntityAddress,
        sessions: Arc<HeldSessions<S>>,
        deliveries: Arc<HeldDeliveries>,
    },
}

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

/// The right a client needs on `entity`'s `$management` node: a topic's
/// schedules messages (Send), a subscription's and its dead-letter queue's
/// read and settle them (Listen).
pub(crate) fn right_for(entity: &EntityAddress) -> Right {
    if entity.subscription.is_some() || entity.sub_queue != SubQueue::Main {
        Right::Listen
    } else {
        Right::Send
    }
}

/// Answers the requests on one `$management` sender link of `node` until
/// the client detaches it.
pub(crate) async fn serve<T: Transport + Admin>(
    mut requests: Receiver,
    replies: Arc<ReplyLink>,
    transport: Arc<T>,
    node: Managed<T::Session>,
    grants: Arc<Grants>,
    check: Option<PublishCheck>,
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
        let answer = match &node {
            Managed::Topic(written) => {
                answer(
                    transport.as_ref(),
                    written,
                    (&grants, check.as_ref()),
                    request,
                )
                .await
            }
            Managed::Subscription {
                entity,
                sessions,
                deliveries,
            } => {
                let held = Held {
                    sessions,
                    deliveries,
                };
                subscription_answer(transport.as_ref(), entity, held, &grants, request).await
            }
        };
        replies.send(envelope(correlation, answer)).await;
    }
    let _ = requests.close().await;
}

async fn answer<T: Transport + Admin>(
    transport: &T,
    written: &str,
    (grants, check): (&Grants, Option<&PublishCheck>),
    request: AmqpMessage<Body<Value>>,
) -> Answer {
    let operation = request
        .application_properties
        .as_ref()
        .and_then(|p| p.0.get("operation"))
        .and_then(text);
    if let Err(why) = grants.check(Right::Send, written) {
        return Answer::refused(401, "com.microsoft:unauthorized-access", why);
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
        Some(SCHEDULE) => schedule(transport, &topic, &body, check).await,
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
    check: Option<&PublishCheck>,
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
        // A message inside a message: bounded as the frames are.
        if let Err(refused) = bounds::check_values(&encoded, bounds::MAX_DEPTH) {
            return Answer::refused(
                400,
                "amqp:decode-error",
                format!("messages[{index}] does not decode: {refused}"),
            );
        }
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
    if let Err(refused) = checked(check, &messages) {
        return Answer::refused(
            401,
            "com.microsoft:unauthorized-access",
            refused.description.unwrap_or_default(),
        );
    }
    match transport.publish(topic, messages).await {
        Ok(sequence_numbers) => {
            let numbers = Array(sequence_numbers.into_iter().map(Value::Long).collect());
            Answer::ok(map([("sequence-numbers", Value::Array(numbers))]))
        }
        Err(error @ nimbus_transport::PublishError::TopicNotFound { .. }) => {
            Answer::refused(404, "amqp:not-found", error.to_string())
        }
        Err(error @ nimbus_transport::PublishError::InvalidMessage { .. }) => {
            Answer::refused(400, "com.microsoft:argument-error", error.to_string())
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

/// Answers a request to a subscription's node: only on a session a link of
/// this connection holds; any other is `session-lock-lost` (410), as
/// Service Bus answers for a lock that is not the caller's.
/// What a connection's receive links hold.
struct Held<'a, S> {
    sessions: &'a HeldSessions<S>,
    deliveries: &'a HeldDeliveries,
}

async fn subscription_answer<T: Transport + Admin>(
    transport: &T,
    entity: &EntityAddress,
    held: Held<'_, T::Session>,
    grants: &Grants,
    request: AmqpMessage<Body<Value>>,
) -> Answer {
    let Held {
        sessions,
        deliveries,
    } = held;
    let operation = request
        .application_properties
        .as_ref()
        .and_then(|p| p.0.get("operation"))
        .and_then(text);
    if let Err(why) = grants.check(right_for(entity), &entity.queue_path()) {
        return Answer::refused(401, "com.microsoft:unauthorized-access", why);
    }
    // Sessions are the subscription's; its dead-letter queue has none.
    let path = entity.entity_path();
    let Body::Value(AmqpValue(Value::Map(body))) = request.body else {
        return Answer::refused(
            400,
            "com.microsoft:argument-error",
            "a $management request's body is a map".to_owned(),
        );
    };
    let operation = operation.unwrap_or_default();
    match operation.as_str() {
        RENEW_LOCK => return renew_locks(deliveries, &body).await,
        PEEK => return peek(transport, entity, &body).await,
        UPDATE_DISPOSITION => return update_disposition(deliveries, &body).await,
        GET_SESSION_STATE | SET_SESSION_STATE | RENEW_SESSION_LOCK => {}
        _ => {
            return Answer::refused(
                501,
                "com.microsoft:not-implemented",
                format!(
                    "'{operation}' is not an operation this endpoint serves on a subscription's \
                     $management (it serves get-session-state, set-session-state, \
                     renew-session-lock, renew-lock, update-disposition and peek-message)"
                ),
            );
        }
    }
    let Some(session_id) = field(&body, "session-id").and_then(text_value) else {
        return Answer::refused(
            400,
            "com.microsoft:argument-error",
            format!("'{operation}' needs `session-id`, a string"),
        );
    };
    let Some(lock) = sessions.get(&path, &session_id) else {
        return session_lock_lost(&path, &session_id);
    };
    match operation.as_str() {
        GET_SESSION_STATE => match lock.get_state().await {
            Ok(state) => Answer::ok(map([(
                "session-state",
                state.map_or(Value::Null, |bytes| Value::Binary(bytes.into())),
            )])),
            Err(error) => state_error(&path, &session_id, &error.to_string(), error.kind()),
        },
        SET_SESSION_STATE => {
            let state = match field(&body, "session-state") {
                None | Some(Value::Null) => None,
                Some(Value::Binary(bytes)) => Some(bytes.to_vec()).filter(|b| !b.is_empty()),
                Some(_) => {
                    return Answer::refused(
                        400,
                        "com.microsoft:argument-error",
                        "`session-state` is binary or null".to_owned(),
                    );
                }
            };
            match lock.set_state(state).await {
                Ok(()) => Answer::ok(map([])),
                Err(error) => state_error(&path, &session_id, &error.to_string(), error.kind()),
            }
        }
        _ => match lock.renew().await {
            Ok(until) => Answer::ok(map([("expiration", convert::timestamp(until))])),
            Err(error) => state_error(&path, &session_id, &error.to_string(), error.kind()),
        },
    }
}

/// Answers `peek-message`: up to `message-count` messages from
/// `from-sequence-number` on (of `session-id`'s session, when given), each
/// whole as the broker would send it; 204 when there are none.
async fn peek<T: Transport + Admin>(
    transport: &T,
    entity: &EntityAddress,
    body: &OrderedMap<Value, Value>,
) -> Answer {
    let argument = |why: &str| Answer::refused(400, "com.microsoft:argument-error", why.to_owned());
    let Some(from) = field(body, "from-sequence-number").and_then(long) else {
        return argument("peek-message needs `from-sequence-number`, a long");
    };
    let Some(count) = field(body, "message-count").and_then(long) else {
        return argument("peek-message needs `message-count`, an int");
    };
    let Ok(count) = usize::try_from(count) else {
        return argument("`message-count` is negative");
    };
    let session = field(body, "session-id").and_then(text_value);
    let (path, _) = match crate::publish::resolve_subscription(transport, entity).await {
        Ok(found) => found,
        Err(error) => {
            return Answer::refused(404, "amqp:not-found", error.description.unwrap_or_default());
        }
    };
    let queue = match entity.sub_queue {
        crate::address::SubQueue::DeadLetter => nimbus_transport::SubQueue::DeadLetter,
        _ => nimbus_transport::SubQueue::Main,
    };
    let peeked = match transport
        .peek(&path, queue, session.as_deref(), from, count.min(PEEK_MAX))
        .await
    {
        Ok(peeked) => peeked,
        Err(error) => return Answer::refused(500, "com.microsoft:server-busy", error.to_string()),
    };
    if peeked.is_empty() {
        return Answer {
            status: 204,
            description: "No messages to peek".to_owned(),
            condition: Some("com.microsoft:message-not-found"),
            body: Value::Null,
        };
    }
    let mut messages = Vec::with_capacity(peeked.len());
    for message in &peeked {
        match convert::encode_received(message) {
            Ok(bytes) => messages.push(map([("message", Value::Binary(bytes.into()))])),
            Err(error) => {
                return Answer::refused(500, "com.microsoft:server-busy", error.to_string());
            }
        }
    }
    Answer::ok(map([("messages", Value::List(messages))]))
}

/// The lock tokens of a request: an array (or list) of uuids, in RFC
/// order (spec §A.10).
fn lock_tokens(body: &OrderedMap<Value, Value>) -> Option<Vec<LockToken>> {
    let values = match field(body, "lock-tokens")? {
        Value::Array(values) => values.0.clone(),
        Value::List(values) => values.clone(),
        _ => return None,
    };
    values
        .into_iter()
        .map(|value| match value {
            Value::Uuid(uuid) => Some(LockToken::from_uuid(uuid::Uuid::from_bytes(
                uuid.into_inner(),
            ))),
            _ => None,
        })
        .collect()
}

fn failed(failure: SettleFailure) -> Answer {
    match failure {
        SettleFailure::LockLost => Answer::refused(
            410,
            "com.microsoft:message-lock-lost",
            "the message's lock was lost (or it was settled already): it will be delivered \
             again"
                .to_owned(),
        ),
        SettleFailure::SessionLockLost => Answer::refused(
            410,
            "com.microsoft:session-lock-lost",
            "the session lock was lost: its messages will be delivered again".to_owned(),
        ),
        SettleFailure::Invalid(why) => Answer::refused(400, "com.microsoft:argument-error", why),
        SettleFailure::Busy(why) => Answer::refused(500, "com.microsoft:server-busy", why),
    }
}

/// Renews each message's lock through the link that holds it; answers the
/// new expiry of each, in order.
async fn renew_locks(deliveries: &HeldDeliveries, body: &OrderedMap<Value, Value>) -> Answer {
    let Some(tokens) = lock_tokens(body) else {
        return Answer::refused(
            400,
            "com.microsoft:argument-error",
            "renew-lock needs `lock-tokens`, an array of uuids".to_owned(),
        );
    };
    let mut expirations = Vec::with_capacity(tokens.len());
    for token in tokens {
        let Some(link) = deliveries.link(token) else {
            return failed(SettleFailure::LockLost);
        };
        let (reply, answer) = oneshot::channel();
        let renewed = match link.send(LinkCommand::Renew { token, reply }) {
            Ok(()) => answer.await.unwrap_or(Err(SettleFailure::LockLost)),
            Err(_) => Err(SettleFailure::LockLost),
        };
        match renewed {
            Ok(until) => expirations.push(convert::timestamp(until)),
            Err(failure) => return failed(failure),
        }
    }
    Answer::ok(map([("expirations", Value::Array(Array(expirations)))]))
}

/// Settles each message by lock token through the link that holds it: the
/// way Python settles once the link that received a message is gone (it is
/// then always lock lost), and .NET when a link's settlement fails.
async fn update_disposition(
    deliveries: &HeldDeliveries,
    body: &OrderedMap<Value, Value>,
) -> Answer {
    let argument = |why: &str| Answer::refused(400, "com.microsoft:argument-error", why.to_owned());
    let Some(tokens) = lock_tokens(body) else {
        return argument("update-disposition needs `lock-tokens`, an array of uuids");
    };
    let session = field(body, "session-id").and_then(text_value).is_some();
    let text_field = |key: &str| field(body, key).and_then(text_value).unwrap_or_default();
    let outcome = match text_field("disposition-status").as_str() {
        "completed" => Outcome::Complete,
        "abandoned" => Outcome::Abandon(match field(body, "properties-to-modify") {
            Some(Value::Map(properties)) => properties
                .iter()
                .filter_map(|(key, value)| Some((text_value(key)?, property(value)?)))
                .collect(),
            _ => Default::default(),
        }),
        "suspended" => Outcome::DeadLetter {
            reason: text_field("deadletter-reason"),
            description: text_field("deadletter-description"),
        },
        "defered" | "deferred" => {
            return Answer::refused(
                501,
                "com.microsoft:not-implemented",
                "deferring a message is not supported by nimbus; abandon or dead-letter it"
                    .to_owned(),
            );
        }
        other => {
            return argument(&format!(
                "`disposition-status` '{other}' is not completed, abandoned or suspended"
            ));
        }
    };
    let lost = if session {
        SettleFailure::SessionLockLost
    } else {
        SettleFailure::LockLost
    };
    for token in tokens {
        let Some(link) = deliveries.link(token) else {
            return failed(lost);
        };
        let (reply, answer) = oneshot::channel();
        let settled = match link.send(LinkCommand::Settle {
            token,
            outcome: outcome.clone(),
            reply,
        }) {
            Ok(()) => answer.await.unwrap_or(Err(lost.clone())),
            Err(_) => Err(lost.clone()),
        };
        if let Err(failure) = settled {
            return failed(failure);
        }
    }
    Answer::ok(map([]))
}

fn session_lock_lost(path: &str, session_id: &str) -> Answer {
    Answer::refused(
        410,
        "com.microsoft:session-lock-lost",
        format!(
            "session '{session_id}' of '{path}' is not locked by a receiver on this connection \
             (its lock lapsed, or another receiver holds it)"
        ),
    )
}

fn state_error(
    path: &str,
    session_id: &str,
    description: &str,
    kind: nimbus_transport::ErrorKind,
) -> Answer {
    match kind {
        nimbus_transport::ErrorKind::SessionLockLost | nimbus_transport::ErrorKind::LockLost => {
            session_lock_lost(path, session_id)
        }
        _ => Answer::refused(500, "com.microsoft:server-busy", description.to_owned()),
    }
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
