//! [`Transport`] over Service Bus's AMQP dialect.

use std::sync::{Arc, Mutex as StdMutex, PoisonError};
use std::time::{Duration, SystemTime};

use fe2o3_amqp::types::definitions::{AmqpError, ErrorCondition};
use fe2o3_amqp::types::primitives::Value;
use nimbus_transport::{
    AcceptSessionError, CancelError, Message, OpenReceiverError, PublishError, ReceiveError,
    ReceivedMessage, SessionSelector, SubQueue, SubscriptionPath, TransientError, Transport,
};

use crate::ServiceBus;
use crate::client::CallError;
use crate::link::{Link, OpenFailure};
use crate::locks::{ServiceBusReceiver, ServiceBusSession, read_state};
use crate::management::{CancelScheduled, MapAnswer, Peek};

/// The longest a next-available attach may wait: Service Bus caps it at
/// 65 s.
const MAX_SESSION_WAIT: Duration = Duration::from_secs(65);

/// How often a named session held elsewhere is asked for again.
const NAMED_RETRY: Duration = Duration::from_millis(250);

/// What a dead-letter queue's address adds to its subscription's.
pub(crate) const DEAD_LETTER_SUFFIX: &str = "/$DeadLetterQueue";

fn subscription_entity(path: &SubscriptionPath) -> String {
    format!("{}/Subscriptions/{}", path.topic, path.subscription)
}

impl ServiceBus {
    /// Whether the namespace has `topic`. Without the namespace's
    /// management API this client cannot create entities, but it can tell
    /// which are missing: Service Bus refuses a `$management` link to one.
    /// The request made on it is a cancel of no scheduled messages, which
    /// changes nothing.
    ///
    /// # Errors
    ///
    /// A transient error when the namespace did not answer.
    pub async fn topic_exists(&self, topic: &str) -> Result<bool, TransientError> {
        let nothing = CancelScheduled {
            sequence_numbers: Vec::new(),
        };
        self.exists(topic, nothing).await
    }

    /// Whether the namespace has the subscription at `path` (the request
    /// made is a peek past its last message, which changes nothing).
    ///
    /// # Errors
    ///
    /// A transient error when the namespace did not answer.
    pub async fn subscription_exists(
        &self,
        path: &SubscriptionPath,
    ) -> Result<bool, TransientError> {
        let past_the_end = Peek(vec![
            ("from-sequence-number", Value::Long(i64::MAX)),
            ("message-count", Value::Int(1)),
        ]);
        self.exists(&subscription_entity(path), past_the_end).await
    }

    /// Whether `entity`'s `$management` link is taken: refused, it does
    /// not exist; any answer to `probe`, even a refusal, says it does.
    async fn exists<Req>(&self, entity: &str, probe: Req) -> Result<bool, TransientError>
    where
        Req: fe2o3_amqp_management::Request,
        Req::Response: fe2o3_amqp_management::Response<Error = fe2o3_amqp_management::error::Error>,
        for<'de> <Req::Response as fe2o3_amqp_management::Response>::Body:
            fe2o3_amqp::types::messaging::FromBody<'de> + std::fmt::Debug + Send,
    {
        match self.inner.call(entity, probe).await {
            Ok(_) | Err(CallError::Status(..)) => Ok(true),
            Err(CallError::Missing(_)) => Ok(false),
            Err(error) => Err(TransientError::new(format!(
                "asking {} whether '{entity}' exists: {error}",
                self.inner.connection_string.host
            ))),
        }
    }
}

fn queue_entity(path: &SubscriptionPath, queue: SubQueue) -> String {
    match queue {
        SubQueue::DeadLetter => format!("{}{DEAD_LETTER_SUFFIX}", subscription_entity(path)),
        _ => subscription_entity(path),
    }
}

fn condition(error: &fe2o3_amqp::types::definitions::Error) -> String {
    match &error.condition {
        ErrorCondition::Custom(symbol) => symbol.as_str().to_owned(),
        ErrorCondition::AmqpError(AmqpError::NotFound) => "amqp:not-found".to_owned(),
        ErrorCondition::AmqpError(AmqpError::NotAllowed) => "amqp:not-allowed".to_owned(),
        other => format!("{other:?}"),
    }
}

impl Transport for ServiceBus {
    type Session = ServiceBusSession;
    type Receiver = ServiceBusReceiver;

    async fn publish(&self, topic: &str, messages: Vec<Message>) -> Result<Vec<i64>, PublishError> {
        ServiceBus::publish(self, topic, messages).await
    }

    async fn cancel_scheduled(&self, topic: &str, sequence_number: i64) -> Result<(), CancelError> {
        ServiceBus::cancel_scheduled(self, topic, sequence_number).await
    }

    async fn accept_session(
        &self,
        path: &SubscriptionPath,
        selector: SessionSelector,
        timeout: Duration,
    ) -> Result<ServiceBusSession, AcceptSessionError> {
        let entity = subscription_entity(path);
        let (filter, wait) = match &selector {
            SessionSelector::Named(id) => (Value::String(id.clone()), timeout),
            _ => (Value::Null, timeout.min(MAX_SESSION_WAIT)),
        };
        let deadline = tokio::time::Instant::now() + timeout;
        let opened = loop {
            let attempt = Link::open(
                Arc::clone(&self.inner),
                entity.clone(),
                Some(filter.clone()),
                wait,
            )
            .await;
            // Service Bus refuses a named session held elsewhere at once; the
            // contract waits up to `timeout` for its release.
            if let Err(OpenFailure::Refused(error)) = &attempt
                && condition(error) == "com.microsoft:session-cannot-be-locked"
                && tokio::time::Instant::now() + NAMED_RETRY < deadline
            {
                tokio::time::sleep(NAMED_RETRY).await;
                continue;
            }
            break attempt;
        };
        let opened = match opened {
            Ok(opened) => opened,
            Err(OpenFailure::Refused(error)) => {
                let why = error.description.clone().unwrap_or_default();
                return Err(match condition(&error).as_str() {
                    "com.microsoft:timeout" => AcceptSessionError::NoSessionAvailable {
                        entity: path.to_string(),
                    },
                    "com.microsoft:session-cannot-be-locked" => {
                        AcceptSessionError::SessionCannotBeLocked {
                            entity: path.to_string(),
                            session_id: match selector {
                                SessionSelector::Named(id) => id,
                                _ => String::new(),
                            },
                        }
                    }
                    "amqp:not-found" => AcceptSessionError::NotFound {
                        entity: path.to_string(),
                    },
                    other => AcceptSessionError::Transient(TransientError::new(format!(
                        "accepting a session on '{entity}': {other}: {why}"
                    ))),
                });
            }
            Err(OpenFailure::Transient(error)) => return Err(AcceptSessionError::Transient(error)),
        };
        let session_id = opened.session_id.unwrap_or_default();
        let stored = read_state(self, &opened.link, &session_id)
            .await
            .map_err(|error| {
                AcceptSessionError::Transient(TransientError::new(error.to_string()))
            })?;
        let stored = Arc::new(StdMutex::new(stored));
        self.inner
            .held
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(
                (entity.to_ascii_lowercase(), session_id.clone()),
                Arc::clone(&stored),
            );
        Ok(ServiceBusSession {
            bus: self.clone(),
            link: opened.link,
            session_id,
            locked_until: StdMutex::new(opened.locked_until.unwrap_or_else(SystemTime::now)),
            stored,
        })
    }

    async fn receiver(
        &self,
        path: &SubscriptionPath,
        queue: SubQueue,
    ) -> Result<ServiceBusReceiver, OpenReceiverError> {
        let entity = queue_entity(path, queue);
        match Link::open(Arc::clone(&self.inner), entity, None, Duration::ZERO).await {
            Ok(opened) => Ok(ServiceBusReceiver {
                bus: self.clone(),
                link: opened.link,
                topic: path.topic.clone(),
            }),
            Err(OpenFailure::Refused(error)) if condition(&error) == "amqp:not-found" => {
                Err(OpenReceiverError::NotFound {
                    entity: path.to_string(),
                })
            }
            Err(OpenFailure::Refused(error)) if condition(&error) == "amqp:not-allowed" => {
                Err(OpenReceiverError::NotReceivable {
                    entity: path.to_string(),
                    reason: error.description.unwrap_or_default(),
                })
            }
            Err(OpenFailure::Refused(error)) => {
                Err(OpenReceiverError::Transient(TransientError::new(format!(
                    "opening a receiver on '{path}': {}: {}",
                    condition(&error),
                    error.description.unwrap_or_default()
                ))))
            }
            Err(OpenFailure::Transient(error)) => Err(OpenReceiverError::Transient(error)),
        }
    }

    async fn peek(
        &self,
        path: &SubscriptionPath,
        queue: SubQueue,
        session_id: Option<&str>,
        from_sequence_number: i64,
        max: usize,
    ) -> Result<Vec<ReceivedMessage>, ReceiveError> {
        let entity = queue_entity(path, queue);
        let mut body = vec![
            ("from-sequence-number", Value::Long(from_sequence_number)),
            (
                "message-count",
                Value::Int(i32::try_from(max).unwrap_or(i32::MAX)),
            ),
        ];
        if let Some(id) = session_id {
            body.push(("session-id", Value::String(id.to_owned())));
        }
        let answer: MapAnswer = match self.inner.call(&entity, Peek(body)).await {
            Ok(answer) => answer,
            Err(error) if matches!(error.status(), Some(204)) => return Ok(Vec::new()),
            Err(error) if matches!(error.status(), Some(404)) => {
                return Err(ReceiveError::NotFound {
                    entity: path.to_string(),
                });
            }
            Err(error) => {
                return Err(ReceiveError::Transient(TransientError::new(format!(
                    "peeking '{entity}': {error}"
                ))));
            }
        };
        let entries = match answer.get("messages") {
            Some(Value::List(entries)) => entries.clone(),
            Some(Value::Array(entries)) => entries.0.clone(),
            _ => Vec::new(),
        };
        entries
            .into_iter()
            .map(|entry| {
                let bytes = match entry {
                    Value::Map(map) => {
                        map.into_iter().find_map(|(key, value)| match (key, value) {
                            (Value::String(key), Value::Binary(bytes)) if key == "message" => {
                                Some(bytes.to_vec())
                            }
                            _ => None,
                        })
                    }
                    _ => None,
                };
                let unreadable = |why: String| {
                    ReceiveError::Transient(TransientError::new(format!(
                        "a peeked message of '{entity}' does not read: {why}"
                    )))
                };
                let bytes = bytes.ok_or_else(|| unreadable("no `message`".to_owned()))?;
                nimbus_amqp::bounds::check_values(&bytes, nimbus_amqp::bounds::MAX_DEPTH)
                    .map_err(|refused| unreadable(refused.to_string()))?;
                use fe2o3_amqp::types::messaging::message::DecodeIntoMessage as _;
                let reader = serde_amqp::read::SliceReader::new(&bytes);
                let amqp =
                    <fe2o3_amqp::types::messaging::Body<Value>>::decode_message_from_reader(reader)
                        .map_err(|error| unreadable(error.to_string()))?;
                nimbus_amqp::convert::delivered(
                    amqp,
                    None,
                    std::time::UNIX_EPOCH,
                    queue == SubQueue::DeadLetter,
                )
                .map_err(|error| unreadable(error.to_string()))
            })
            .collect()
    }

    async fn inbox_contains(&self, scope: &str, key: &str) -> Result<bool, TransientError> {
        Ok(self.inner.inbox_contains(scope, key))
    }
}
