//! What the transport hands out: a session lock and a peek-lock receiver,
//! each a receive link, with session state, renewal and settlement through
//! the subscription's `$management` node and the link (decision 0137).

use std::sync::{Arc, Mutex as StdMutex, PoisonError};
use std::time::{Duration, SystemTime};

use fe2o3_amqp::types::primitives::{Array, Value};
use nimbus_dialect::convert::time_of;
use nimbus_dialect::management::{key, lock_tokens};
use nimbus_dialect::{Outcome, address};
use nimbus_transport::{
    Delivery, Disposition, ReceiveError, ReceivedMessage, Receiver, RenewError, SessionLock,
    SessionStateError, SettleError, SettleReceipt, Settlement, TransientError,
};

use crate::ServiceBus;
use crate::client::CallError;
use crate::link::Link;
use crate::management::{GetSessionState, RenewLock, RenewSessionLock, SetSessionState};
use crate::session_state::{InboxRecord, Stored};

/// A session of a session-enabled subscription, locked by this client.
pub struct ServiceBusSession {
    pub(crate) bus: ServiceBus,
    pub(crate) link: Link,
    pub(crate) session_id: String,
    pub(crate) locked_until: StdMutex<SystemTime>,
    /// The session's state as last read or written (the lock is ours: no
    /// one else writes it meanwhile).
    pub(crate) stored: Arc<StdMutex<Stored>>,
}

impl std::fmt::Debug for ServiceBusSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServiceBusSession")
            .field("entity", &self.link.entity)
            .field("session_id", &self.session_id)
            .finish_non_exhaustive()
    }
}

impl Drop for ServiceBusSession {
    fn drop(&mut self) {
        let key = (
            self.link.entity.to_ascii_lowercase(),
            self.session_id.clone(),
        );
        let mut held = self
            .bus
            .inner
            .held
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        // Only this lock's: a newer lock on the same session keeps its own.
        if held
            .get(&key)
            .is_some_and(|stored| Arc::ptr_eq(stored, &self.stored))
        {
            held.remove(&key);
        }
    }
}

/// The stored state of `session_id` on `entity`, read when it is accepted.
pub(crate) async fn read_state(
    bus: &ServiceBus,
    link: &Link,
    session_id: &str,
) -> Result<Stored, SessionStateError> {
    let entity = link.entity.as_str();
    let answer = bus
        .inner
        .call_on(
            link.live(),
            entity,
            GetSessionState(vec![(
                key::SESSION_ID,
                Value::String(session_id.to_owned()),
            )]),
        )
        .await
        .map_err(|error| state_error(entity, session_id, &error))?;
    let bytes = match answer.get(key::SESSION_STATE) {
        Some(Value::Binary(bytes)) => Some(bytes.to_vec()),
        _ => None,
    };
    Stored::read(bytes.as_deref()).map_err(|damaged| {
        SessionStateError::Transient(TransientError::new(format!(
            "session '{session_id}' of '{entity}': {damaged}"
        )))
    })
}

fn state_error(entity: &str, session_id: &str, error: &CallError) -> SessionStateError {
    match error.lock_lost() {
        true => SessionStateError::SessionLockLost {
            session_id: session_id.to_owned(),
        },
        false => SessionStateError::Transient(TransientError::new(format!(
            "the state of session '{session_id}' of '{entity}': {error}"
        ))),
    }
}

impl ServiceBusSession {
    fn stored(&self) -> Stored {
        self.stored
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Writes `stored` as the session's state, and keeps it on success.
    async fn write(&self, mut stored: Stored) -> Result<(), SessionStateError> {
        stored.forget_expired(SystemTime::now());
        let value = stored
            .write()
            .map_or(Value::Null, |bytes| Value::Binary(bytes.into()));
        self.bus
            .inner
            .call_on(
                self.link.live(),
                &self.link.entity,
                SetSessionState(vec![
                    (key::SESSION_ID, Value::String(self.session_id.clone())),
                    (key::SESSION_STATE, value),
                ]),
            )
            .await
            .map_err(|error| state_error(&self.link.entity, &self.session_id, &error))?;
        *self.stored.lock().unwrap_or_else(PoisonError::into_inner) = stored;
        Ok(())
    }
}

impl SessionLock for ServiceBusSession {
    fn session_id(&self) -> &str {
        &self.session_id
    }

    fn locked_until(&self) -> SystemTime {
        *self
            .locked_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    async fn receive(&self, max_wait: Duration) -> Result<Option<ReceivedMessage>, ReceiveError> {
        self.link.receive(max_wait, self.locked_until()).await
    }

    async fn get_state(&self) -> Result<Option<Vec<u8>>, SessionStateError> {
        if self.locked_until() <= SystemTime::now() {
            return Err(SessionStateError::SessionLockLost {
                session_id: self.session_id.clone(),
            });
        }
        Ok(self.stored().engine)
    }

    async fn set_state(&self, state: Option<Vec<u8>>) -> Result<(), SessionStateError> {
        let mut stored = self.stored();
        stored.engine = state;
        self.write(stored).await
    }

    async fn renew(&self) -> Result<SystemTime, RenewError> {
        let answer = self
            .bus
            .inner
            .call_on(
                self.link.live(),
                &self.link.entity,
                RenewSessionLock(vec![(
                    key::SESSION_ID,
                    Value::String(self.session_id.clone()),
                )]),
            )
            .await
            .map_err(|error| match error.lock_lost() {
                true => RenewError::SessionLockLost {
                    session_id: self.session_id.clone(),
                },
                false => RenewError::Transient(TransientError::new(format!(
                    "renewing session '{}' of '{}': {error}",
                    self.session_id, self.link.entity
                ))),
            })?;
        let until = time_of(answer.get(key::EXPIRATION)).ok_or_else(|| {
            RenewError::Transient(TransientError::new(
                "renew-session-lock answered no expiration".to_owned(),
            ))
        })?;
        *self
            .locked_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = until;
        Ok(until)
    }

    /// Service Bus cannot apply a settlement as one unit: its steps go in
    /// the order that makes a crash between any two harmless (decision
    /// 0137). Publishes first; then the session state with the inbox
    /// records, in one write; then the message's outcome. A crash after the
    /// publishes redelivers the message, which is handled again (its
    /// follow-ups are sent again: at least once); a crash after the state
    /// redelivers it and the inbox says it was handled. An error leaves
    /// the message unsettled and the state as it was, but what was
    /// published stays published.
    async fn settle(&self, settlement: Settlement) -> Result<SettleReceipt, SettleError> {
        let parts = settlement.into_parts();
        self.link.still_held(parts.outcome.as_ref())?;
        let sequence_numbers = publish_all(&self.bus, parts.publishes).await?;
        if parts.session_state.is_some() || !parts.inbox.is_empty() {
            let mut stored = self.stored();
            if let Some(state) = parts.session_state {
                stored.engine = state;
            }
            stored
                .inbox
                .extend(parts.inbox.into_iter().map(|record| InboxRecord {
                    scope: record.scope,
                    key: record.key,
                    expires_at: record.expires_at,
                }));
            self.write(stored).await.map_err(|error| match error {
                SessionStateError::SessionLockLost { session_id } => {
                    SettleError::SessionLockLost { session_id }
                }
                SessionStateError::Transient(error) => SettleError::Transient(error),
                other => SettleError::Transient(TransientError::new(other.to_string())),
            })?;
        }
        if let Some((message, disposition)) = parts.outcome {
            self.link.settle(&message, outcome(disposition)).await?;
        }
        Ok(SettleReceipt::new(sequence_numbers))
    }

    async fn release(&self, message: ReceivedMessage) -> Result<(), SettleError> {
        self.link
            .settle(&Delivery::from(&message), Outcome::Release)
            .await
    }
}

/// Publishes a settlement's messages, in order, each on its own (Service
/// Bus has no unit across topics); their sequence numbers.
async fn publish_all(
    bus: &ServiceBus,
    publishes: Vec<(String, nimbus_transport::Message)>,
) -> Result<Vec<i64>, SettleError> {
    let mut sequence_numbers = Vec::new();
    for (topic, message) in publishes {
        sequence_numbers.extend(
            bus.publish(&topic, vec![message])
                .await
                .map_err(settle_error)?,
        );
    }
    Ok(sequence_numbers)
}

/// A publish's error as a settlement's: a missing topic or a refused
/// message is not worth retrying, the rest is.
fn settle_error(error: nimbus_transport::PublishError) -> SettleError {
    match error {
        nimbus_transport::PublishError::TopicNotFound { topic } => {
            SettleError::TopicNotFound { topic }
        }
        nimbus_transport::PublishError::InvalidMessage { reason } => {
            SettleError::Invalid { reason }
        }
        nimbus_transport::PublishError::Transient(error) => SettleError::Transient(error),
        other => SettleError::Transient(TransientError::new(other.to_string())),
    }
}

fn outcome(disposition: Disposition) -> Outcome {
    match disposition {
        Disposition::Complete => Outcome::Complete,
        Disposition::Abandon { properties } => Outcome::Abandon(properties),
        Disposition::DeadLetter {
            reason,
            description,
        } => Outcome::DeadLetter {
            reason,
            description,
        },
    }
}

/// A peek-lock receiver on a subscription without sessions or on a
/// dead-letter queue.
pub struct ServiceBusReceiver {
    pub(crate) bus: ServiceBus,
    pub(crate) link: Link,
    /// The subscription's topic, where a replayed message goes.
    pub(crate) topic: String,
}

impl std::fmt::Debug for ServiceBusReceiver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServiceBusReceiver")
            .field("entity", &self.link.entity)
            .finish_non_exhaustive()
    }
}

impl Receiver for ServiceBusReceiver {
    async fn receive(&self, max_wait: Duration) -> Result<Option<ReceivedMessage>, ReceiveError> {
        self.link.receive(max_wait, SystemTime::now()).await
    }

    async fn renew_lock(&self, message: &mut ReceivedMessage) -> Result<SystemTime, RenewError> {
        let message_id = message.message.message_id.clone().unwrap_or_default();
        let answer = self
            .bus
            .inner
            .call_on(
                self.link.live(),
                &self.link.entity,
                RenewLock(vec![(key::LOCK_TOKENS, lock_tokens([message.lock_token]))]),
            )
            .await
            .map_err(|error| match error.lock_lost() {
                true => RenewError::LockLost {
                    message_id: message_id.clone(),
                },
                false => RenewError::Transient(TransientError::new(format!(
                    "renewing the lock of '{message_id}' on '{}': {error}",
                    self.link.entity
                ))),
            })?;
        let until = match answer.get(key::EXPIRATIONS) {
            Some(Value::Array(Array(times))) => time_of(times.first()),
            _ => None,
        }
        .ok_or_else(|| {
            RenewError::Transient(TransientError::new(
                "renew-lock answered no expiration".to_owned(),
            ))
        })?;
        message.locked_until = until;
        Ok(until)
    }

    async fn settle(&self, settlement: Settlement) -> Result<SettleReceipt, SettleError> {
        let parts = settlement.into_parts();
        if parts.session_state.is_some() || !parts.inbox.is_empty() {
            return Err(SettleError::Invalid {
                reason: "a receiver without a session has no session state or inbox".to_owned(),
            });
        }
        self.link.still_held(parts.outcome.as_ref())?;
        let sequence_numbers = publish_all(&self.bus, parts.publishes).await?;
        if let Some((message, disposition)) = parts.outcome {
            self.link.settle(&message, outcome(disposition)).await?;
        }
        Ok(SettleReceipt::new(sequence_numbers))
    }

    async fn release(&self, message: ReceivedMessage) -> Result<(), SettleError> {
        self.link
            .settle(&Delivery::from(&message), Outcome::Release)
            .await
    }

    /// Service Bus cannot move a message out of a dead-letter queue: a copy
    /// is published to the topic, where the subscription's rules take it
    /// again (and those of any other subscription that match it: NimBus
    /// routes by `To`, so that is the endpoint it was for), then the
    /// dead-lettered one is completed. A crash between the two leaves both
    /// (at least once).
    async fn replay_dead_letter(&self, message: ReceivedMessage) -> Result<(), SettleError> {
        if !address::is_dead_letter_queue(&self.link.entity) {
            return Err(SettleError::Invalid {
                reason: "replay is only possible from a dead-letter queue receiver".to_owned(),
            });
        }
        if !self.link.holds(message.lock_token) {
            return Err(SettleError::LockLost {
                message_id: message.message.message_id.clone().unwrap_or_default(),
            });
        }
        self.bus
            .publish(&self.topic, vec![message.message.clone()])
            .await
            .map_err(settle_error)?;
        self.link
            .settle(&Delivery::from(&message), Outcome::Complete)
            .await
    }
}
