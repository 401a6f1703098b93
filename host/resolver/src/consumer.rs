//! The Resolver consumer: reads `Resolver/Resolver` and records every
//! message in the store.
//!
//! Sessions are processed concurrently (each worker holds one session at a
//! time), messages one at a time per session, so the Resolver sees each
//! session's messages in the order the engine sent them. Records of
//! different sessions share store commits (see `recorder`). A message is
//! completed only after the store has committed it; a store failure abandons
//! it after a backoff, so the bus redelivers it (and, at the subscription's
//! max delivery count, dead-letters it: never lost, never looping). A message
//! that cannot be recorded is dead-lettered at once with the defect named.

use std::sync::Arc;
use std::time::Duration;

use nimbus_transport::{
    AcceptSessionError, ErrorKind, Properties, ReceivedMessage, SessionLock, SessionSelector,
    SubscriptionPath, Transport,
};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::decode::{Decoded, UNRECORDABLE_REASON, decode};
use crate::recorder::Recorder;
use crate::store::{Recorded, ResolverStore, StoreError};

/// How the consumer runs.
#[derive(Debug, Clone)]
pub struct ResolverSettings {
    /// The session subscription to read (`Resolver/Resolver`).
    pub subscription: SubscriptionPath,
    /// How many sessions are processed at once.
    pub max_concurrent_sessions: usize,
    /// How long an idle worker waits for a session before asking again.
    pub accept_timeout: Duration,
    /// How long a worker waits for the next message of its session before
    /// releasing it for other sessions.
    pub session_idle_timeout: Duration,
    /// The first backoff before abandoning a message the store failed to
    /// record; doubled per delivery, capped at [`Self::max_store_backoff`].
    pub store_backoff: Duration,
    /// The cap of the store backoff (keep it well under the lock duration).
    pub max_store_backoff: Duration,
    /// At most this many messages (of different sessions) share one store
    /// commit.
    pub max_batch: usize,
    /// Where to report each settled message (tests, metrics); `None` for
    /// nowhere.
    pub progress: Option<mpsc::UnboundedSender<Progress>>,
}

impl Default for ResolverSettings {
    fn default() -> Self {
        ResolverSettings {
            subscription: SubscriptionPath::new(
                nimbus_wire::addr::RESOLVER,
                nimbus_wire::addr::RESOLVER,
            ),
            max_concurrent_sessions: 64,
            accept_timeout: Duration::from_secs(5),
            session_idle_timeout: Duration::from_secs(1),
            store_backoff: Duration::from_millis(500),
            max_store_backoff: Duration::from_secs(10),
            max_batch: 256,
            progress: None,
        }
    }
}

/// What the consumer did with one message.
#[derive(Debug, Clone, PartialEq)]
pub struct Progress {
    /// The message's broker `MessageId`.
    pub message_id: Option<String>,
    /// Its sequence number on the Resolver subscription.
    pub sequence_number: i64,
    /// What happened.
    pub outcome: Outcome,
}

/// What happened to one message.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Recorded for this event and completed.
    Recorded {
        /// The endpoint.
        endpoint: String,
        /// The event id.
        event_id: String,
        /// What the store did.
        recorded: Recorded,
    },
    /// A heartbeat answer noted for this endpoint, and completed.
    Heartbeat {
        /// The endpoint that answered.
        endpoint: String,
    },
    /// Completed without recording (why).
    Ignored(&'static str),
    /// Dead-lettered: it cannot be recorded (the description).
    DeadLettered(String),
    /// The store failed; the message was abandoned for redelivery.
    Abandoned(String),
    /// Settling failed (the lock was lost); the bus redelivers the message
    /// and the store recognises it.
    SettleFailed(String),
}

/// Why the consumer stopped before shutdown.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ResolverError {
    /// The Resolver subscription cannot be read (it does not exist, or is
    /// not session-enabled): provisioning is missing.
    #[error("resolver: cannot read {subscription}: {source}")]
    Subscription {
        /// The subscription.
        subscription: SubscriptionPath,
        /// The transport's answer.
        #[source]
        source: AcceptSessionError,
    },
    /// A worker task panicked.
    #[error("resolver: a worker failed: {0}")]
    Worker(String),
}

/// Consumes the Resolver subscription until `shutdown` is cancelled,
/// recording every message in `store`.
///
/// Returns `Ok(())` on shutdown, after each worker finished the message in
/// hand; an error when the subscription cannot be read at all.
pub async fn run_resolver<T: Transport>(
    transport: Arc<T>,
    store: Arc<dyn ResolverStore>,
    settings: ResolverSettings,
    shutdown: CancellationToken,
) -> Result<(), ResolverError> {
    let stop = shutdown.child_token();
    let workers = settings.max_concurrent_sessions.max(1);
    let recorder = Recorder::start(Arc::clone(&store), settings.max_batch);
    let context = Arc::new(Context {
        transport,
        store,
        recorder,
        settings,
    });
    let mut tasks = JoinSet::new();
    for _ in 0..workers {
        tasks.spawn(worker(Arc::clone(&context), stop.clone()));
    }
    tracing::info!(
        subscription = %context.settings.subscription,
        workers,
        "resolver: consuming"
    );
    let mut result = Ok(());
    while let Some(joined) = tasks.join_next().await {
        let failed = match joined {
            Ok(Ok(())) => None,
            Ok(Err(error)) => Some(error),
            Err(join) => Some(ResolverError::Worker(join.to_string())),
        };
        if let Some(error) = failed {
            stop.cancel();
            if result.is_ok() {
                result = Err(error);
            }
        }
    }
    result
}

/// The least pause before asking the transport for a session again after a
/// failure, so a failing transport is not spun on.
const MIN_ACCEPT_RETRY: Duration = Duration::from_millis(100);

struct Context<T> {
    transport: Arc<T>,
    store: Arc<dyn ResolverStore>,
    recorder: Recorder,
    settings: ResolverSettings,
}

async fn worker<T: Transport>(
    context: Arc<Context<T>>,
    stop: CancellationToken,
) -> Result<(), ResolverError> {
    let settings = &context.settings;
    loop {
        let accepted = tokio::select! {
            () = stop.cancelled() => return Ok(()),
            accepted = context.transport.accept_session(
                &settings.subscription,
                SessionSelector::NextAvailable,
                settings.accept_timeout,
            ) => accepted,
        };
        match accepted {
            Ok(session) => drain(&context, session, &stop).await,
            Err(e) => match e.kind() {
                ErrorKind::NoSessionAvailable | ErrorKind::SessionCannotBeLocked => {}
                ErrorKind::NotFound | ErrorKind::Invalid => {
                    return Err(ResolverError::Subscription {
                        subscription: settings.subscription.clone(),
                        source: e,
                    });
                }
                _ => {
                    tracing::warn!(error = %e, "resolver: accepting a session failed; retrying");
                    tokio::select! {
                        () = stop.cancelled() => return Ok(()),
                        () = tokio::time::sleep(settings.store_backoff.max(MIN_ACCEPT_RETRY)) => {}
                    }
                }
            },
        }
    }
}

/// Processes one session's messages in order until it is idle, the lock is
/// lost, or shutdown.
async fn drain<T: Transport>(context: &Context<T>, session: T::Session, stop: &CancellationToken) {
    loop {
        let next = tokio::select! {
            () = stop.cancelled() => break,
            next = session.receive(context.settings.session_idle_timeout) => next,
        };
        match next {
            Ok(Some(message)) => {
                if !handle(context, &session, message, stop).await {
                    break;
                }
            }
            Ok(None) => break,
            Err(e) => {
                tracing::warn!(session = session.session_id(), error = %e, "resolver: receive failed; releasing the session");
                break;
            }
        }
    }
    session.close().await;
}

/// Records and settles one message. `false` when the session should be
/// released (its lock is gone).
async fn handle<T: Transport>(
    context: &Context<T>,
    session: &T::Session,
    message: ReceivedMessage,
    stop: &CancellationToken,
) -> bool {
    let message_id = message.message.message_id.clone();
    let sequence_number = message.sequence_number;
    let (outcome, settled) = match decode(&message) {
        Err(unrecordable) => {
            let description =
                nimbus_wire::dead_letter::truncate_description(&unrecordable.0).into_owned();
            tracing::warn!(
                message_id = message_id.as_deref().unwrap_or_default(),
                reason = %unrecordable.0,
                "resolver: dead-lettering a message it cannot record"
            );
            let settled = session
                .dead_letter(message, UNRECORDABLE_REASON.to_owned(), description.clone())
                .await;
            (Outcome::DeadLettered(description), settled)
        }
        Ok(Decoded::Skip(why)) => (Outcome::Ignored(why), session.complete(message).await),
        Ok(Decoded::Heartbeat(heartbeat)) => {
            let store = Arc::clone(&context.store);
            let endpoint = heartbeat.endpoint.clone();
            match blocking(move || store.record_heartbeat(&heartbeat)).await {
                Ok(()) => (
                    Outcome::Heartbeat { endpoint },
                    session.complete(message).await,
                ),
                Err(e) => abandon(context, session, message, e, stop).await,
            }
        }
        Ok(Decoded::Event(observation)) => {
            let endpoint = observation.endpoint.clone();
            let event_id = observation.event_id.clone();
            match context.recorder.record(*observation).await {
                Ok(recorded) => (
                    Outcome::Recorded {
                        endpoint,
                        event_id,
                        recorded,
                    },
                    session.complete(message).await,
                ),
                Err(e) => abandon(context, session, message, e, stop).await,
            }
        }
    };
    let keep_session = match settled {
        Ok(()) => true,
        Err(e) => {
            tracing::warn!(error = %e, "resolver: settling failed; the message will be redelivered");
            let lost = matches!(e.kind(), ErrorKind::SessionLockLost);
            report(
                context,
                message_id,
                sequence_number,
                Outcome::SettleFailed(e.to_string()),
            );
            return !lost;
        }
    };
    report(context, message_id, sequence_number, outcome);
    keep_session
}

async fn abandon<T: Transport>(
    context: &Context<T>,
    session: &T::Session,
    message: ReceivedMessage,
    error: StoreError,
    stop: &CancellationToken,
) -> (Outcome, Result<(), nimbus_transport::SettleError>) {
    let settings = &context.settings;
    let doublings = message.delivery_count.saturating_sub(1).min(16);
    let backoff = settings
        .store_backoff
        .saturating_mul(1 << doublings)
        .min(settings.max_store_backoff);
    tracing::warn!(
        error = %error,
        delivery = message.delivery_count,
        backoff_ms = backoff.as_millis(),
        "resolver: the store failed; abandoning the message for redelivery"
    );
    // Holding the message through the backoff keeps the session's order:
    // nothing behind it is recorded first.
    tokio::select! {
        () = stop.cancelled() => {
            // Shutting down: leave it unsettled. Closing the session
            // releases it without counting a delivery.
            drop(message);
            return (Outcome::Abandoned(format!("{error} (released at shutdown)")), Ok(()));
        }
        () = tokio::time::sleep(backoff) => {}
    }
    let settled = session.abandon(message, Properties::new()).await;
    (Outcome::Abandoned(error.to_string()), settled)
}

/// Runs a synchronous store call off the async workers.
async fn blocking<R: Send + 'static>(
    call: impl FnOnce() -> Result<R, StoreError> + Send + 'static,
) -> Result<R, StoreError> {
    tokio::task::spawn_blocking(call)
        .await
        .unwrap_or_else(|join| Err(StoreError::Panicked(join.to_string())))
}

fn report<T>(
    context: &Context<T>,
    message_id: Option<String>,
    sequence_number: i64,
    outcome: Outcome,
) {
    if let Some(progress) = &context.settings.progress {
        // A dropped receiver only means nobody is watching.
        let _ = progress.send(Progress {
            message_id,
            sequence_number,
            outcome,
        });
    }
}
