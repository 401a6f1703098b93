//! The replayer of one endpoint: on a `ProcessDeferredRequest`, republish the
//! session's parked messages to the endpoint, sorted by `DeferralSequence`
//! (decision 0050, rule 3). Each republish completes its parked copy in the
//! same commit, so a crash never replays a message twice or loses one.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use nimbus_transport::{
    AcceptSessionError, FailureLog, PropertyValue, ReceivedMessage, Receiver, RetryBackoff,
    SessionLock, SessionSelector, Settlement, SubQueue, SubscriptionPath, Transport,
};
use nimbus_wire::{NimbusMessage, addr, build, prop};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

/// How long to wait for the parked session's lock before trying again later.
const ACCEPT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long the replayer waits for one more parked message before it
/// concludes it has them all.
const DRAIN_WAIT: Duration = Duration::from_millis(50);
/// How much later a trigger is retried when the parked session is busy.
const BUSY_RETRY: Duration = Duration::from_secs(1);
/// The most parked messages of one session replayed in one sorted pass.
const MAX_PASS: usize = 100_000;
/// The most queued triggers answered together.
const MAX_COALESCED: usize = 256;

/// Runs the replayer of `endpoint` until `shutdown` is cancelled.
pub async fn run_replayer<T: Transport>(
    transport: Arc<T>,
    endpoint: String,
    shutdown: CancellationToken,
) {
    let triggers = SubscriptionPath::new(endpoint.clone(), addr::DEFERRED_PROCESSOR);
    // A call that keeps failing (a broker that cannot write, a namespace
    // out of reach) is retried less and less often, and logged once a
    // minute, not every second (issue 40).
    let mut backoff = RetryBackoff::new(Duration::from_secs(1), RetryBackoff::MAX);
    let failures = FailureLog::default();
    let receiver = loop {
        match transport.receiver(&triggers, SubQueue::Main).await {
            Ok(receiver) => break receiver,
            Err(e) => {
                let wait = backoff.failed();
                if let Some(line) = failures.failed(std::time::Instant::now()) {
                    warn!(%endpoint, error = %e, held_back = line.held_back, next_attempt_in = %humantime::format_duration(wait), "opening the replay trigger subscription failed; retrying, less often while it fails (one line a minute)");
                }
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    () = tokio::time::sleep(wait) => {}
                }
            }
        }
    };
    backoff.succeeded();
    if let Some(line) = failures.succeeded(std::time::Instant::now()) {
        warn!(%endpoint, failures = line.failures, failed_for = %humantime::format_duration(line.failed_for), "the replay trigger subscription opened after all");
    }
    while !shutdown.is_cancelled() {
        let trigger = tokio::select! {
            () = shutdown.cancelled() => break,
            trigger = receiver.receive(Duration::from_secs(5)) => trigger,
        };
        if trigger.is_ok() {
            backoff.succeeded();
            if let Some(line) = failures.succeeded(std::time::Instant::now()) {
                warn!(%endpoint, failures = line.failures, failed_for = %humantime::format_duration(line.failed_for), "the replay trigger subscription works again");
            }
        }
        match trigger {
            Ok(Some(trigger)) => {
                for (session, triggers) in with_queued(&receiver, trigger).await {
                    if let Err(e) =
                        replay(&*transport, &endpoint, &receiver, session, triggers).await
                    {
                        warn!(%endpoint, error = %e, "replay failed; the trigger will be redelivered");
                    }
                }
            }
            Ok(None) => {}
            Err(e) => {
                let wait = backoff.failed();
                if let Some(line) = failures.failed(std::time::Instant::now()) {
                    warn!(%endpoint, error = %e, held_back = line.held_back, next_attempt_in = %humantime::format_duration(wait), "receiving replay triggers failed; retrying, less often while it fails (one line a minute)");
                }
                tokio::select! {
                    () = shutdown.cancelled() => break,
                    () = tokio::time::sleep(wait) => {}
                }
            }
        }
    }
    receiver.close().await;
}

/// A replay that did not finish; its trigger is redelivered.
#[derive(Debug, thiserror::Error)]
enum ReplayError {
    #[error("{0}")]
    Accept(AcceptSessionError),
    #[error("{0}")]
    Receive(nimbus_transport::ReceiveError),
    #[error("{0}")]
    Settle(nimbus_transport::SettleError),
}

/// The session a trigger names, if it names one.
fn trigger_session(trigger: &ReceivedMessage) -> Option<String> {
    trigger
        .message
        .session_id
        .clone()
        .or_else(|| {
            trigger
                .message
                .property_str(prop::SESSION_ID)
                .map(str::to_owned)
        })
        .filter(|s| !s.trim().is_empty())
}

/// `first` and the triggers queued behind it (up to [`MAX_COALESCED`]),
/// grouped by the session they name, in the order each session first
/// appears (`None`: no session named). One replay per session answers all
/// of its triggers: each was committed with its park, so a replay that
/// reads the parked set after receiving them sees every one of those parks.
/// A busy session sent a trigger per event parked behind the gate, and
/// replaying once per trigger re-parked the whole set again and again
/// while the session was blocked.
async fn with_queued<R: Receiver>(
    receiver: &R,
    first: ReceivedMessage,
) -> Vec<(Option<String>, Vec<ReceivedMessage>)> {
    let mut grouped: Vec<(Option<String>, Vec<ReceivedMessage>)> = Vec::new();
    let mut next = Some(first);
    let mut taken = 0;
    while let Some(trigger) = next.take() {
        taken += 1;
        let session = trigger_session(&trigger);
        match grouped
            .iter_mut()
            .find(|(s, _)| session.is_some() && *s == session)
        {
            Some((_, triggers)) => triggers.push(trigger),
            None => grouped.push((session, vec![trigger])),
        }
        if taken < MAX_COALESCED {
            // A failed receive is left to the next loop, which reports it.
            next = receiver.receive(Duration::ZERO).await.ok().flatten();
        }
    }
    grouped
}

/// Replays `session`'s parked messages once for all of its `triggers`, and
/// settles them.
async fn replay<T: Transport>(
    transport: &T,
    endpoint: &str,
    receiver: &T::Receiver,
    session: Option<String>,
    mut triggers: Vec<ReceivedMessage>,
) -> Result<(), ReplayError> {
    let Some(session_id) = session else {
        for trigger in triggers {
            let settlement = Settlement::dead_letter(
                trigger,
                "No SessionId",
                "a ProcessDeferredRequest must name the session to replay",
            );
            receiver
                .settle(settlement)
                .await
                .map_err(ReplayError::Settle)?;
        }
        return Ok(());
    };
    // Non-empty by construction; the rest are answered with it.
    let trigger = triggers.remove(0);
    let parked_path = SubscriptionPath::new(endpoint, addr::DEFERRED);
    let lock = match transport
        .accept_session(
            &parked_path,
            SessionSelector::Named(session_id.clone()),
            ACCEPT_TIMEOUT,
        )
        .await
    {
        Ok(lock) => lock,
        Err(AcceptSessionError::SessionCannotBeLocked { .. }) => {
            // Another replayer holds it; it may have read the parked set
            // before the park that sent this trigger, so try again shortly
            // rather than assume there is nothing to do (upstream F10).
            debug!(%endpoint, session = %session_id, "parked session busy; retrying the trigger later");
            let mut again = trigger.message.clone();
            again.message_id = None;
            again.scheduled_enqueue_time = Some(SystemTime::now() + BUSY_RETRY);
            let settlement = Settlement::complete(trigger).publish(endpoint.to_owned(), again);
            receiver
                .settle(settlement)
                .await
                .map_err(ReplayError::Settle)?;
            return complete_all(receiver, triggers).await;
        }
        Err(e) => return Err(ReplayError::Accept(e)),
    };
    let mut parked = Vec::new();
    while parked.len() < MAX_PASS {
        match lock
            .receive(DRAIN_WAIT)
            .await
            .map_err(ReplayError::Receive)?
        {
            Some(message) => parked.push(message),
            None => break,
        }
    }
    parked.sort_by_key(deferral_sequence);
    let count = parked.len();
    for message in parked {
        let settlement = match NimbusMessage::from_received(&message) {
            Ok(decoded) => {
                let replayed = build::replay_from_parked(&decoded, endpoint);
                Settlement::complete(message).publish(endpoint.to_owned(), replayed.to_transport())
            }
            Err(e) => {
                // Sent back as it is, like any replay: the endpoint
                // dead-letters it naming the defect, tells the Resolver, and
                // counts it out of the session's parked messages. Dead-
                // lettering it here left the session counting it as parked
                // for ever, so every later event of it was parked too.
                warn!(%endpoint, session = %session_id, defect = %e.defect, "a parked message cannot be decoded; sending it back to the endpoint to be dead-lettered");
                let mut back = message.message.clone();
                back.properties.insert(
                    prop::TO.to_owned(),
                    PropertyValue::String(endpoint.to_owned()),
                );
                back.properties.remove(prop::ORIGINAL_SESSION_ID);
                back.scheduled_enqueue_time = None;
                Settlement::complete(message).publish(endpoint.to_owned(), back)
            }
        };
        lock.settle(settlement).await.map_err(ReplayError::Settle)?;
    }
    lock.close().await;
    if count > 0 {
        info!(%endpoint, session = %session_id, count, "replayed parked messages");
    }
    receiver
        .complete(trigger)
        .await
        .map_err(ReplayError::Settle)?;
    complete_all(receiver, triggers).await
}

async fn complete_all<R: Receiver>(
    receiver: &R,
    triggers: Vec<ReceivedMessage>,
) -> Result<(), ReplayError> {
    for trigger in triggers {
        receiver
            .complete(trigger)
            .await
            .map_err(ReplayError::Settle)?;
    }
    Ok(())
}

/// A parked copy's place in the order, read from its property alone, so a
/// copy whose body or other properties cannot be decoded still keeps its
/// place. An integer or a numeric string, as NimBus writes either.
fn deferral_sequence(message: &ReceivedMessage) -> i64 {
    message
        .message
        .properties
        .get(prop::DEFERRAL_SEQUENCE)
        .and_then(PropertyValue::as_i64)
        .unwrap_or(0)
}
