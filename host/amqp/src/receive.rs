//! Links a client receives on: a session of a session-enabled subscription,
//! or a dead-letter queue, in peek-lock (spec §A.7–A.9).
//!
//! Each link has two tasks. The fetcher takes a message from the broker
//! only while the client has credit for one (a message is locked only when
//! it is about to go); the link sends it with its lock token as the tag and
//! answers each disposition the client sends with what the broker did:
//! the outcome applied, or the lock it found lost.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use fe2o3_amqp::Sendable;
use fe2o3_amqp::link::Sender;
use fe2o3_amqp::types::definitions::{AmqpError, ErrorCondition};
use fe2o3_amqp::types::messaging::{DeliveryState, Rejected};
use nimbus_dialect::condition::{self, SERVER_BUSY, SESSION_LOCK_LOST};
use nimbus_dialect::convert;
use nimbus_dialect::outcome::{NotAnOutcome, Outcome};
use nimbus_transport::{
    ErrorKind, LockToken, Properties, ReceiveError, ReceivedMessage, Receiver, SessionLock,
    SettleError,
};
use tokio::sync::{mpsc, oneshot, watch};
use tracing::{debug, warn};

use crate::held::{HeldDeliveries, LinkCommand, SettleFailure};
use crate::log_limit::{Cause, LogLimit};
use crate::tap::{ClientDisposition, ClientEvent, LinkEvents, Tap};

/// How long the fetcher waits on the broker before it looks at the credit
/// again.
const FETCH_WAIT: Duration = Duration::from_secs(5);

/// How long a delivery may wait for the library to send it; past that the
/// client has taken its credit back (a drain), and the message is released.
const SEND_WAIT: Duration = Duration::from_secs(2);

/// What a receive link holds: a session lock or a peek-lock receiver.
pub(crate) trait Held: Send + Sync + 'static {
    /// The session lock's expiry, for a session; `None` for a queue.
    fn session_locked_until(&self) -> Option<SystemTime>;
    fn receive(
        &self,
        max_wait: Duration,
    ) -> impl Future<Output = Result<Option<ReceivedMessage>, ReceiveError>> + Send;
    fn complete(
        &self,
        message: ReceivedMessage,
    ) -> impl Future<Output = Result<(), SettleError>> + Send;
    fn abandon(
        &self,
        message: ReceivedMessage,
        properties: Properties,
    ) -> impl Future<Output = Result<(), SettleError>> + Send;
    fn dead_letter(
        &self,
        message: ReceivedMessage,
        reason: String,
        description: String,
    ) -> impl Future<Output = Result<(), SettleError>> + Send;
    fn release(
        &self,
        message: ReceivedMessage,
    ) -> impl Future<Output = Result<(), SettleError>> + Send;
    /// Renews `message`'s own lock (not possible in a session, whose lock
    /// covers its messages).
    fn renew(
        &self,
        message: &mut ReceivedMessage,
    ) -> impl Future<Output = Result<SystemTime, SettleFailure>> + Send;
}

/// A session lock, shared with the subscription's `$management` node.
pub(crate) struct SessionHeld<S>(pub Arc<S>);

impl<S: SessionLock> Held for SessionHeld<S> {
    fn session_locked_until(&self) -> Option<SystemTime> {
        Some(self.0.locked_until())
    }
    async fn renew(&self, _message: &mut ReceivedMessage) -> Result<SystemTime, SettleFailure> {
        Err(SettleFailure::Invalid(
            "a session's messages are locked by the session's lock: renew the session lock"
                .to_owned(),
        ))
    }
    fn receive(
        &self,
        max_wait: Duration,
    ) -> impl Future<Output = Result<Option<ReceivedMessage>, ReceiveError>> + Send {
        self.0.receive(max_wait)
    }
    fn complete(
        &self,
        message: ReceivedMessage,
    ) -> impl Future<Output = Result<(), SettleError>> + Send {
        self.0.complete(message)
    }
    fn abandon(
        &self,
        message: ReceivedMessage,
        properties: Properties,
    ) -> impl Future<Output = Result<(), SettleError>> + Send {
        self.0.abandon(message, properties)
    }
    fn dead_letter(
        &self,
        message: ReceivedMessage,
        reason: String,
        description: String,
    ) -> impl Future<Output = Result<(), SettleError>> + Send {
        self.0.dead_letter(message, reason, description)
    }
    fn release(
        &self,
        message: ReceivedMessage,
    ) -> impl Future<Output = Result<(), SettleError>> + Send {
        self.0.release(message)
    }
}

/// A peek-lock receiver (a dead-letter queue, or a subscription without
/// sessions).
pub(crate) struct QueueHeld<R>(pub R);

impl<R: Receiver> Held for QueueHeld<R> {
    fn session_locked_until(&self) -> Option<SystemTime> {
        None
    }
    async fn renew(&self, message: &mut ReceivedMessage) -> Result<SystemTime, SettleFailure> {
        self.0
            .renew_lock(message)
            .await
            .map_err(|error| match error.kind() {
                ErrorKind::LockLost | ErrorKind::NotFound => SettleFailure::LockLost,
                _ => SettleFailure::Busy(error.to_string()),
            })
    }
    fn receive(
        &self,
        max_wait: Duration,
    ) -> impl Future<Output = Result<Option<ReceivedMessage>, ReceiveError>> + Send {
        self.0.receive(max_wait)
    }
    fn complete(
        &self,
        message: ReceivedMessage,
    ) -> impl Future<Output = Result<(), SettleError>> + Send {
        self.0.complete(message)
    }
    fn abandon(
        &self,
        message: ReceivedMessage,
        properties: Properties,
    ) -> impl Future<Output = Result<(), SettleError>> + Send {
        self.0.abandon(message, properties)
    }
    fn dead_letter(
        &self,
        message: ReceivedMessage,
        reason: String,
        description: String,
    ) -> impl Future<Output = Result<(), SettleError>> + Send {
        self.0.dead_letter(message, reason, description)
    }
    fn release(
        &self,
        message: ReceivedMessage,
    ) -> impl Future<Output = Result<(), SettleError>> + Send {
        self.0.release(message)
    }
}

/// A message the fetcher took, and where to say it went out.
type Fetched = Result<(ReceivedMessage, oneshot::Sender<()>), ReceiveError>;

/// Serves one receive link until the client detaches it, the session lock
/// lapses, or the connection ends.
pub(crate) async fn serve<H: Held>(
    mut sender: Sender,
    held: Arc<H>,
    events: LinkEvents,
    tap: Tap,
    deliveries: Arc<HeldDeliveries>,
    mode: ReceiveMode,
) {
    let name = sender.name().to_owned();
    // Whatever ends this link, an abort included, the tap stops sending
    // on it and answers the client's late settlements itself.
    let mut unregister = Unregister {
        tap: tap.clone(),
        name: name.clone(),
        lost: Some(lock_lost(held.as_ref())),
    };
    let (commands, mut asked) = mpsc::unbounded_channel();
    let LinkEvents {
        credit,
        events: mut client,
    } = events;
    let (fetched_tx, mut fetched) = mpsc::channel::<Fetched>(1);
    let fetcher = tokio::spawn(fetch(Arc::clone(&held), credit.clone(), fetched_tx));
    let mut in_flight = InFlight {
        messages: HashMap::new(),
        index: deliveries,
        commands,
    };
    let link = Link {
        held: held.as_ref(),
        tap: &tap,
        name: &name,
        credit: &credit,
        mode,
    };
    let ending = loop {
        let lapse = held.session_locked_until();
        tokio::select! {
            event = client.recv() => match event {
                Some(ClientEvent::Settled(disposition)) => {
                    settle(held.as_ref(), &tap, &mut in_flight, disposition).await;
                }
                Some(ClientEvent::Detached) | None => break None,
            },
            Some(asked) = asked.recv() => command(held.as_ref(), &mut in_flight, asked).await,
            message = fetched.recv() => match message {
                Some(Ok((message, sent))) => {
                    let delivered = link.deliver(&mut sender, &mut in_flight, message).await;
                    let _ = sent.send(());
                    if let Err(error) = delivered {
                        break Some(error);
                    }
                }
                Some(Err(error)) => break Some(receive_error(&error)),
                None => break None,
            },
            () = sleep_until(lapse), if lapse.is_some() => {
                if held.session_locked_until().is_some_and(|until| until <= SystemTime::now()) {
                    break Some(condition::error(
                        condition::named(SESSION_LOCK_LOST),
                        "the session lock lapsed: renew it before it does".to_owned(),
                    ));
                }
            }
        }
    };
    fetcher.abort();
    // From here the tap answers what the client settles late.
    unregister.now();
    // Messages still out are given back by the lock or receiver as it is
    // dropped (uncounted, as Service Bus does on a clean close).
    drop(in_flight);
    let closed = match ending {
        Some(error) => sender.close_with_error(error).await,
        None => sender.close().await,
    };
    if let Err(error) = closed {
        debug!(%error, link = %name, "closing a receive link");
    }
}

async fn sleep_until(at: Option<SystemTime>) {
    let wait = at
        .and_then(|at| at.duration_since(SystemTime::now()).ok())
        .unwrap_or_default();
    tokio::time::sleep(wait).await;
}

/// Takes one message at a time from the broker, while the client has credit.
async fn fetch<H: Held>(
    held: Arc<H>,
    mut credit: watch::Receiver<u32>,
    out: mpsc::Sender<Fetched>,
) {
    loop {
        if credit.wait_for(|credit| *credit > 0).await.is_err() {
            return;
        }
        match held.receive(FETCH_WAIT).await {
            Ok(None) => {}
            Ok(Some(message)) => {
                let (sent, went) = oneshot::channel();
                if out.send(Ok((message, sent))).await.is_err() || went.await.is_err() {
                    return;
                }
            }
            Err(error) => {
                let _ = out.send(Err(error)).await;
                return;
            }
        }
    }
}

/// How a client receives on a link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReceiveMode {
    /// Locked until the client settles (snd-settle-mode unsettled).
    PeekLock,
    /// Sent settled and completed as it goes (snd-settle-mode settled).
    ReceiveAndDelete,
}

/// What a link's deliveries need.
struct Link<'a, H> {
    held: &'a H,
    tap: &'a Tap,
    name: &'a str,
    credit: &'a watch::Receiver<u32>,
    mode: ReceiveMode,
}

impl<H: Held> Link<'_, H> {
    /// Sends `message`, with its lock token as the tag, if the client still
    /// has credit; gives it back otherwise. An error ends the link: a
    /// delivery cut short, or one larger than the client takes.
    async fn deliver(
        &self,
        sender: &mut Sender,
        in_flight: &mut InFlight,
        message: ReceivedMessage,
    ) -> Result<(), fe2o3_amqp::types::definitions::Error> {
        if *self.credit.borrow() == 0 {
            give_back(self.held, message).await;
            return Ok(());
        }
        let amqp = convert::received(&message, self.held.session_locked_until().is_none());
        let settled = self.mode == ReceiveMode::ReceiveAndDelete;
        let sendable = Sendable::builder().message(amqp).settled(settled).build();
        let token = message.lock_token;
        self.tap
            .next_tag(self.name, token, convert::header_patch(&message));
        let failure = match tokio::time::timeout(SEND_WAIT, sender.send_batchable(sendable)).await {
            // The outcome comes through the tap, not the library.
            Ok(Ok(_outcome)) => {
                if settled {
                    // At most once, as the client asked: gone once sent.
                    if let Err(error) = self.held.complete(message).await {
                        warn!(%error, link = %self.name, "a message sent settled was not removed");
                    }
                } else {
                    in_flight.insert(message);
                }
                return Ok(());
            }
            Ok(Err(fe2o3_amqp::link::SendError::MessageSizeExceeded(_))) => {
                let id = message.message.message_id.clone().unwrap_or_default();
                let size = message.message.body.len();
                self.tap.forget_tag(self.name, token);
                give_back(self.held, message).await;
                // Given back uncounted it would come straight back: the link
                // ends, saying why, and the message waits for a client that
                // takes messages this large.
                return Err(condition::error(
                    ErrorCondition::LinkError(
                        fe2o3_amqp::types::definitions::LinkError::MessageSizeExceeded,
                    ),
                    format!(
                        "message '{id}' ({size} bytes of body) is larger than this link's \
                         max-message-size; receive it with a larger one"
                    ),
                ));
            }
            Ok(Err(error)) => error.to_string(),
            Err(_) => "it waited for credit the client took back (a drain)".to_owned(),
        };
        let went_out = !self.tap.forget_tag(self.name, token);
        give_back(self.held, message).await;
        if went_out {
            // The transfer began and did not finish: the client holds part
            // of a delivery that will not complete. Only a detach clears it.
            return Err(condition::error(
                ErrorCondition::LinkError(fe2o3_amqp::types::definitions::LinkError::DetachForced),
                format!("a delivery could not be finished ({failure}); attach again"),
            ));
        }
        debug!(link = %self.name, why = %failure, "a delivery was not sent; given back");
        Ok(())
    }
}

/// Unregisters a link from the tap once: when its loop ends, or when its
/// task is dropped (aborted with its connection or session).
struct Unregister {
    tap: Tap,
    name: String,
    lost: Option<DeliveryState>,
}

impl Unregister {
    fn now(&mut self) {
        if let Some(lost) = self.lost.take() {
            self.tap.unregister(&self.name, lost);
        }
    }
}

impl Drop for Unregister {
    fn drop(&mut self) {
        self.now();
    }
}

async fn give_back<H: Held>(held: &H, message: ReceivedMessage) {
    if let Err(error) = held.release(message).await {
        debug!(%error, "giving back a message not sent");
    }
}

/// Applies what the client did to the delivery and answers it (spec §A.8).
async fn settle<H: Held>(
    held: &H,
    tap: &Tap,
    in_flight: &mut InFlight,
    disposition: ClientDisposition,
) {
    let ClientDisposition {
        channel,
        delivery_id,
        lock_token,
        state,
        settled_by_client,
    } = disposition;
    let answer = |state: DeliveryState| {
        if !settled_by_client {
            tap.answer(channel, delivery_id, state);
        }
    };
    let (outcome, asked) = match (Outcome::asked_by(state.as_ref()), state) {
        (Ok(outcome), Some(asked)) => (outcome, asked),
        (Err(NotAnOutcome::Deferral), _) => {
            // Deferral needs receive-by-sequence-number, which this endpoint
            // does not serve: the message stays as it was.
            answer(rejected(
                ErrorCondition::AmqpError(AmqpError::NotImplemented),
                "deferring a message is not supported by nimbus; abandon or dead-letter it"
                    .to_owned(),
            ));
            return;
        }
        (_, state) => {
            LogLimit::global().warn(Cause::OddDisposition, || {
                format!("a disposition with no outcome ({state:?}); the message stays locked")
            });
            answer(rejected(
                ErrorCondition::AmqpError(AmqpError::NotImplemented),
                format!(
                    "a disposition needs an outcome (accepted, rejected, released or modified), \
                     not {state:?}; the message stays locked"
                ),
            ));
            return;
        }
    };
    // The client's own state is the answer, but a dead-letter is answered
    // without the error the client sent: Python takes an error in the
    // answer as a failure.
    let applied_state = match outcome {
        Outcome::DeadLetter { .. } => DeliveryState::Rejected(Rejected { error: None }),
        _ => asked,
    };
    match apply(held, in_flight, lock_token, outcome).await {
        Ok(()) => answer(applied_state),
        Err(SettleFailure::LockLost | SettleFailure::SessionLockLost) => answer(lock_lost(held)),
        Err(SettleFailure::Invalid(why) | SettleFailure::Busy(why)) => {
            answer(rejected(condition::named(SERVER_BUSY), why));
        }
    }
}

/// The deliveries a link sent and the client has not settled, and the
/// connection's index of them (for settling and renewing by lock token).
pub(crate) struct InFlight {
    messages: HashMap<LockToken, ReceivedMessage>,
    index: Arc<HeldDeliveries>,
    commands: mpsc::UnboundedSender<LinkCommand>,
}

impl InFlight {
    fn insert(&mut self, message: ReceivedMessage) {
        self.index.insert(message.lock_token, self.commands.clone());
        self.messages.insert(message.lock_token, message);
    }

    fn take(&mut self, token: LockToken) -> Option<ReceivedMessage> {
        self.index.remove(token);
        self.messages.remove(&token)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        for token in self.messages.keys() {
            self.index.remove(*token);
        }
    }
}

/// Settles the delivery locked with `token` as `outcome`; on an error that
/// left it unchanged, it stays in flight.
async fn apply<H: Held>(
    held: &H,
    in_flight: &mut InFlight,
    token: LockToken,
    outcome: Outcome,
) -> Result<(), SettleFailure> {
    let Some(message) = in_flight.take(token) else {
        return Err(if held.session_locked_until().is_some() {
            SettleFailure::SessionLockLost
        } else {
            SettleFailure::LockLost
        });
    };
    let kept = message.clone();
    let applied = match outcome {
        Outcome::Complete => held.complete(message).await,
        Outcome::Abandon(properties) => held.abandon(message, properties).await,
        Outcome::DeadLetter {
            reason,
            description,
        } => held.dead_letter(message, reason, description).await,
        Outcome::Release => held.release(message).await,
    };
    match applied {
        Ok(()) => Ok(()),
        Err(SettleError::LockLost { .. }) => Err(SettleFailure::LockLost),
        Err(SettleError::SessionLockLost { .. }) => Err(SettleFailure::SessionLockLost),
        Err(error) => {
            // Nothing took effect: the message is still locked and may be
            // settled again.
            in_flight.insert(kept);
            Err(SettleFailure::Busy(error.to_string()))
        }
    }
}

/// Answers what the `$management` node asks of this link.
async fn command<H: Held>(held: &H, in_flight: &mut InFlight, command: LinkCommand) {
    match command {
        LinkCommand::Settle {
            token,
            outcome,
            reply,
        } => {
            let _ = reply.send(apply(held, in_flight, token, outcome).await);
        }
        LinkCommand::Renew { token, reply } => {
            let renewed = match in_flight.messages.get_mut(&token) {
                None => Err(SettleFailure::LockLost),
                Some(message) => held.renew(message).await,
            };
            let _ = reply.send(renewed);
        }
    }
}

fn lock_lost<H: Held>(held: &H) -> DeliveryState {
    if held.session_locked_until().is_some() {
        rejected(
            condition::for_kind(ErrorKind::SessionLockLost),
            "the session lock was lost: the message will be delivered again".to_owned(),
        )
    } else {
        rejected(
            condition::for_kind(ErrorKind::LockLost),
            "the message's lock was lost: it will be delivered again".to_owned(),
        )
    }
}

fn rejected(refused: ErrorCondition, description: String) -> DeliveryState {
    DeliveryState::Rejected(Rejected {
        error: Some(condition::error(refused, description)),
    })
}

/// The detach a failed receive ends the link with.
fn receive_error(error: &ReceiveError) -> fe2o3_amqp::types::definitions::Error {
    condition::error(condition::for_kind(error.kind()), error.to_string())
}
