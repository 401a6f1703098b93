//! A receive link on a subscription, a session of one or its dead-letter
//! queue: credit one delivery at a time, and each settlement answered by
//! the broker (read off the wire by [`Outcomes`](crate::outcomes::Outcomes)).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex as StdMutex, PoisonError};
use std::time::{Duration, SystemTime};

use fe2o3_amqp::Receiver;
use fe2o3_amqp::link::delivery::DeliveryInfo;
use fe2o3_amqp::link::receiver::CreditMode;
use fe2o3_amqp::link::{LinkStateError, ReceiverAttachError, RecvError};
use fe2o3_amqp::session::SessionHandle;
use fe2o3_amqp::types::definitions::{
    Error as AmqpError, ErrorCondition, Fields, ReceiverSettleMode, SenderSettleMode,
};
use fe2o3_amqp::types::messaging::{Body, DeliveryState, Rejected, Released, Source};
use fe2o3_amqp::types::primitives::{OrderedMap, Value};
use nimbus_dialect::convert::{self, ConvertError};
use nimbus_dialect::{Outcome, address, attach, condition};
use nimbus_transport::{
    Delivery, ErrorKind, LockToken, ReceiveError, ReceivedMessage, SettleError, TransientError,
};
use tokio::sync::Mutex;

use crate::client::Inner;
use crate::connection::Live;

/// How long one wait on the link lasts before the link is let go of, so a
/// settlement is never held up behind a receive.
const RECEIVE_SLICE: Duration = Duration::from_millis(50);

/// How long a link without sessions waits, once attached, for the detach
/// of a broker that refused it.
const REFUSAL_WAIT: Duration = Duration::from_millis(50);

/// How long a settlement waits for the broker's answer.
const ANSWER_WAIT: Duration = Duration::from_secs(60);

/// How much longer than the wait it asked for an attach may take to be
/// answered.
const ATTACH_MARGIN: Duration = Duration::from_secs(30);

/// An open receive link.
pub(crate) struct Link {
    /// `topic/Subscriptions/name`, or its dead-letter queue's path.
    pub(crate) entity: String,
    receiver: Mutex<Receiver>,
    deliveries: StdMutex<HashMap<LockToken, DeliveryInfo>>,
    credit_out: AtomicBool,
    /// Whether a lost lock is the session's (else the message's).
    session: Option<String>,
    /// The connection the link is on (kept open while the link is), with
    /// the broker's answers read off it.
    live: Arc<Live>,
    // The AMQP session the link lives on, ended when the link goes.
    _amqp_session: Mutex<SessionHandle<()>>,
}

/// Why a receive link did not open.
pub(crate) enum OpenFailure {
    /// The broker detached it at once with this error.
    Refused(AmqpError),
    /// Anything else.
    Transient(TransientError),
}

/// The answer of an attach: the link, and what its source and properties
/// said (the session given; its lock's expiry).
pub(crate) struct Opened {
    pub(crate) link: Link,
    pub(crate) session_id: Option<String>,
    pub(crate) locked_until: Option<SystemTime>,
}

impl Link {
    /// Attaches a peek-lock receiver to `entity`, asking for a session when
    /// given one: `Some(id)` names it, `None` asks for the next available.
    pub(crate) async fn open(
        bus: Arc<Inner>,
        entity: String,
        session: Option<Option<String>>,
        timeout: Duration,
    ) -> Result<Opened, OpenFailure> {
        let live = bus.live().await.map_err(OpenFailure::Transient)?;
        let mut amqp_session = live
            .begin(&bus.connection_string.host)
            .await
            .map_err(OpenFailure::Transient)?;
        let mut source = Source::builder().address(entity.clone());
        let asked_session = session.is_some();
        if let Some(session) = session {
            let (key, value) = attach::session_filter(session.as_deref());
            let mut filters = OrderedMap::new();
            filters.insert(key, value);
            source = source.filter(filters);
        }
        let mut properties = Fields::new();
        let (key, wait) = attach::wait_property(timeout);
        properties.insert(key, wait);
        let attach = Receiver::builder()
            .name(format!("nimbus-receiver-{}", uuid::Uuid::new_v4().simple()))
            .source(source.build())
            .target(format!("nimbus-{}", uuid::Uuid::new_v4().simple()))
            .receiver_settle_mode(ReceiverSettleMode::Second)
            .sender_settle_mode(SenderSettleMode::Unsettled)
            .credit_mode(CreditMode::Manual)
            // The broker answers with the session it gave in the filter
            // (next available), or, refusing, without it: read below.
            .verify_incoming_source(false)
            .properties(properties)
            .attach(&mut amqp_session);
        // A next-available attach is answered within the wait it asked for;
        // past that and a margin, the broker is not answering.
        let attach = tokio::time::timeout(timeout + ATTACH_MARGIN, attach);
        let mut receiver = match live.unless_closed(attach).await {
            Ok(Ok(Ok(receiver))) => receiver,
            Err(closed) => {
                return Err(OpenFailure::Transient(TransientError::new(format!(
                    "attaching to '{entity}': {closed}"
                ))));
            }
            Ok(Err(_)) => {
                return Err(OpenFailure::Transient(TransientError::new(format!(
                    "'{entity}' did not answer the attach within {:?}",
                    timeout + ATTACH_MARGIN
                ))));
            }
            // Service Bus's refusal: the attach answered without a source,
            // then a detach saying why.
            Ok(Ok(Err(ReceiverAttachError::RemoteClosedWithError(error)))) => {
                return Err(OpenFailure::Refused(error));
            }
            Ok(Ok(Err(error))) => {
                return Err(OpenFailure::Transient(TransientError::new(format!(
                    "attaching to '{entity}': {error}"
                ))));
            }
        };
        let session_id = attach::session_in(
            receiver
                .source()
                .as_ref()
                .and_then(|source| source.filter.as_ref()),
        )
        .flatten();
        let locked_until =
            receiver.properties(|properties| attach::locked_until_in(properties.as_ref()));
        // nimbus's endpoint refuses a link by answering its attach as asked
        // and detaching at once, saying why. A session given comes
        // with its lock's expiry; a refused one without. A link without
        // sessions has no such sign: with no credit given, nothing but that
        // detach can come, so a short wait tells.
        let refused = asked_session && (session_id.is_none() || locked_until.is_none());
        let wait = match (refused, asked_session) {
            (true, _) => Duration::from_secs(10),
            (false, true) => Duration::ZERO,
            (false, false) => REFUSAL_WAIT,
        };
        if !wait.is_zero() {
            let why = tokio::time::timeout(wait, receiver.recv::<Body<Value>>()).await;
            match why {
                Err(_) if !refused => {}
                Ok(Err(RecvError::LinkStateError(
                    LinkStateError::RemoteClosedWithError(error)
                    | LinkStateError::RemoteDetachedWithError(error),
                ))) => return Err(OpenFailure::Refused(error)),
                other => {
                    return Err(OpenFailure::Transient(TransientError::new(format!(
                        "'{entity}' answered the attach and then {}",
                        match other {
                            Ok(Ok(_)) => "sent a message it had no credit for".to_owned(),
                            Ok(Err(error)) => error.to_string(),
                            Err(_) => "nothing, without the session asked for".to_owned(),
                        }
                    ))));
                }
            }
        }
        Ok(Opened {
            link: Link::new(live, entity, receiver, session_id.clone(), amqp_session),
            session_id,
            locked_until,
        })
    }

    fn new(
        live: Arc<Live>,
        entity: String,
        receiver: Receiver,
        session: Option<String>,
        amqp_session: SessionHandle<()>,
    ) -> Link {
        Link {
            entity,
            receiver: Mutex::new(receiver),
            deliveries: StdMutex::default(),
            credit_out: AtomicBool::new(false),
            session,
            live,
            _amqp_session: Mutex::new(amqp_session),
        }
    }

    /// The connection the link is on.
    pub(crate) fn live(&self) -> &Arc<Live> {
        &self.live
    }

    fn deliveries(&self) -> std::sync::MutexGuard<'_, HashMap<LockToken, DeliveryInfo>> {
        self.deliveries
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The next message, waiting up to `max_wait`; `locked_until` stands for
    /// a message whose lock is the session's.
    pub(crate) async fn receive(
        &self,
        max_wait: Duration,
        locked_until: SystemTime,
    ) -> Result<Option<ReceivedMessage>, ReceiveError> {
        let deadline = tokio::time::Instant::now() + max_wait;
        loop {
            let mut receiver = self.receiver.lock().await;
            if !self.credit_out.swap(true, Ordering::SeqCst)
                && let Err(error) = receiver.set_credit(1).await
            {
                self.credit_out.store(false, Ordering::SeqCst);
                return Err(self.link_error(&error.to_string()));
            }
            let slice =
                RECEIVE_SLICE.min(deadline.saturating_duration_since(tokio::time::Instant::now()));
            match tokio::time::timeout(slice, receiver.recv::<Body<Value>>()).await {
                Ok(Ok(delivery)) => {
                    self.credit_out.store(false, Ordering::SeqCst);
                    let info = DeliveryInfo::from(&delivery);
                    let tag = delivery.delivery_tag().to_vec();
                    match convert::delivered(
                        delivery.into_message(),
                        Some(&tag),
                        locked_until,
                        address::is_dead_letter_queue(&self.entity),
                    ) {
                        Ok(message) => {
                            self.deliveries().insert(message.lock_token, info);
                            return Ok(Some(message));
                        }
                        // A message the broker's model cannot hold (a
                        // property of another type, a body that is not
                        // bytes) goes to the dead-letter queue saying why,
                        // rather than block its session or be lost.
                        Err(error) => self.dead_letter_unreadable(&receiver, info, &error).await,
                    }
                }
                Ok(Err(RecvError::LinkStateError(
                    LinkStateError::RemoteClosedWithError(error)
                    | LinkStateError::RemoteDetachedWithError(error),
                ))) => return Err(self.detached(&error)),
                Ok(Err(
                    error @ RecvError::LinkStateError(
                        LinkStateError::RemoteClosed
                        | LinkStateError::RemoteDetached
                        | LinkStateError::SessionStopped(_),
                    ),
                )) => {
                    // Detached without a reason: for a session, its lock
                    // went with the link.
                    return Err(match &self.session {
                        Some(session_id) => ReceiveError::SessionLockLost {
                            session_id: session_id.clone(),
                        },
                        None => self.link_error(&error.to_string()),
                    });
                }
                Ok(Err(error)) => return Err(self.link_error(&error.to_string())),
                Err(_) => {}
            }
            drop(receiver);
            if tokio::time::Instant::now() >= deadline {
                return Ok(None);
            }
        }
    }

    /// Dead-letters a delivery that does not read, naming why.
    async fn dead_letter_unreadable(
        &self,
        receiver: &Receiver,
        info: DeliveryInfo,
        error: &ConvertError,
    ) {
        tracing::warn!(entity = %self.entity, %error, "a message that does not read is dead-lettered");
        let unreadable = Outcome::DeadLetter {
            reason: "MessageUnreadable".to_owned(),
            description: error.to_string(),
        };
        if let Err(error) = receiver
            .dispose(info, terminal(unreadable.delivery_state()))
            .await
        {
            tracing::warn!(entity = %self.entity, %error, "dead-lettering a message that does not read failed");
        }
    }

    fn detached(&self, error: &AmqpError) -> ReceiveError {
        let forced = matches!(
            error.condition,
            ErrorCondition::LinkError(fe2o3_amqp::types::definitions::LinkError::DetachForced)
        );
        let lost = condition::kind_of(&error.condition) == Some(ErrorKind::SessionLockLost);
        match &self.session {
            Some(session_id) if forced || lost => ReceiveError::SessionLockLost {
                session_id: session_id.clone(),
            },
            _ => self.link_error(&format!(
                "{}: {}",
                condition::name(&error.condition),
                error.description.as_deref().unwrap_or_default()
            )),
        }
    }

    fn link_error(&self, why: &str) -> ReceiveError {
        ReceiveError::Transient(TransientError::new(format!(
            "the receive link on '{}' failed: {why}",
            self.entity
        )))
    }

    /// Settles `message` as `outcome` and waits for the broker's answer.
    pub(crate) async fn settle(
        &self,
        message: &Delivery,
        outcome: Outcome,
    ) -> Result<(), SettleError> {
        let message_id = message.message_id.clone();
        let lost = || match &self.session {
            Some(session_id) => SettleError::SessionLockLost {
                session_id: session_id.clone(),
            },
            None => SettleError::LockLost {
                message_id: message_id.clone(),
            },
        };
        // A token this link does not hold (settled already, or never its)
        // is the message's lock lost, in a session too.
        let Some(info) = self.deliveries().remove(&message.lock_token) else {
            return Err(SettleError::LockLost {
                message_id: message_id.clone(),
            });
        };
        let state = outcome.delivery_state();
        let answer = self.live.outcomes.expect(message.lock_token);
        let sent = self
            .live
            .unless_closed(async {
                let receiver = self.receiver.lock().await;
                receiver.dispose(info.clone(), terminal(state)).await
            })
            .await;
        // fe2o3 refuses a disposition only on a link no longer usable
        // (detached, its session or connection stopped); the connection
        // may also have gone first. Either way the lock went with it.
        let refused = match sent {
            Ok(Ok(())) => None,
            Ok(Err(error)) => Some(error.to_string()),
            Err(closed) => Some(closed.to_string()),
        };
        if let Some(why) = refused {
            self.live.outcomes.forget(message.lock_token);
            tracing::debug!(entity = %self.entity, %message_id, %why, "a settlement could not be sent: the lock is lost");
            return Err(lost());
        }
        let answered = tokio::time::timeout(ANSWER_WAIT, answer).await;
        if answered.is_err() {
            self.live.outcomes.forget(message.lock_token);
        }
        match answered {
            Ok(Ok(DeliveryState::Rejected(Rejected { error: Some(error) }))) => {
                match condition::kind_of(&error.condition) {
                    Some(ErrorKind::LockLost | ErrorKind::SessionLockLost) => Err(lost()),
                    _ => Err(SettleError::Transient(TransientError::new(format!(
                        "'{}' refused settling '{message_id}': {}: {}",
                        self.entity,
                        condition::name(&error.condition),
                        error.description.unwrap_or_default()
                    )))),
                }
            }
            Ok(Ok(_applied)) => Ok(()),
            // The link or connection went before the answer came: the lock
            // went with it.
            Ok(Err(_)) => Err(lost()),
            Err(_) => Err(SettleError::Transient(TransientError::new(format!(
                "'{}' did not answer the settlement of '{message_id}' within {ANSWER_WAIT:?}",
                self.entity
            )))),
        }
    }

    /// Whether `token` is a delivery of this link not settled yet.
    pub(crate) fn holds(&self, token: LockToken) -> bool {
        self.deliveries().contains_key(&token)
    }

    /// Lock lost unless the message an outcome is for is one of this
    /// link's not settled yet (settled already, or never this link's).
    pub(crate) fn still_held<D>(&self, outcome: Option<&(Delivery, D)>) -> Result<(), SettleError> {
        match outcome {
            Some((message, _)) if !self.holds(message.lock_token) => Err(SettleError::LockLost {
                message_id: message.message_id.clone(),
            }),
            _ => Ok(()),
        }
    }
}

fn terminal(state: DeliveryState) -> fe2o3_amqp::link::receiver::TerminalDeliveryState {
    use fe2o3_amqp::link::receiver::TerminalDeliveryState;
    match state {
        DeliveryState::Accepted(accepted) => TerminalDeliveryState::Accepted(accepted),
        DeliveryState::Rejected(rejected) => TerminalDeliveryState::Rejected(rejected),
        DeliveryState::Modified(modified) => TerminalDeliveryState::Modified(modified),
        _ => TerminalDeliveryState::Released(Released {}),
    }
}
