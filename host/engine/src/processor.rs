//! The session processor of one endpoint: up to N sessions at once, one
//! message at a time per session, in order.
//!
//! Exclusivity comes from the broker's session lock, never from an
//! in-process mutex, so several hosts can share one namespace.
//!
//! Slots are handed over, not only timed out: while every slot is held, the
//! processor keeps one accept open, and when it finds a session with a
//! message waiting, a held session with nothing in hand gives up its slot at
//! once instead of idling out [`ProcessorSettings::session_idle_timeout`].
//! Without that, more active sessions than slots with sparse traffic each
//! (the usual shape: many orders, a few events apiece) starved: a held
//! session's next event kept arriving within the idle timeout, so the
//! others waited for [`ProcessorSettings::session_max_hold`] (decision
//! 0105).

use std::sync::Arc;
use std::time::Duration;

use nimbus_transport::{
    AcceptSessionError, ErrorKind, FailureLog, ReceiveError, RetryBackoff, SessionLock,
    SessionSelector, SlotRequests, SubscriptionPath, Transport,
};
use nimbus_wire::SessionState;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, error, info, warn};

use crate::delivery::{Delivery, Endpoint};

/// How an endpoint's session processor runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcessorSettings {
    /// At most this many sessions are held at once.
    pub max_concurrent_sessions: usize,
    /// A held session with no message for this long is released; at once
    /// when another session is waiting for its slot.
    pub session_idle_timeout: Duration,
    /// A session that has been held this long is released after the
    /// message in hand, even while it still has messages, and the next
    /// accept takes the session with the oldest waiting message (which may
    /// be the same one). Without it, sessions beyond
    /// [`Self::max_concurrent_sessions`] wait as long as the held ones stay
    /// busy.
    pub session_max_hold: Duration,
    /// How long one accept waits for a session with messages.
    pub accept_timeout: Duration,
}

impl Default for ProcessorSettings {
    fn default() -> Self {
        ProcessorSettings {
            max_concurrent_sessions: 8,
            session_idle_timeout: Duration::from_secs(1),
            session_max_hold: Duration::from_secs(5),
            accept_timeout: Duration::from_secs(5),
        }
    }
}

/// Runs the session processor of `endpoint` until `shutdown` is cancelled,
/// then lets the sessions in hand finish the message they are on (each
/// delivery settles in full) and returns. Messages not started stay on the
/// broker.
pub async fn run_endpoint<T: Transport>(
    transport: Arc<T>,
    endpoint: Arc<Endpoint>,
    settings: ProcessorSettings,
    shutdown: CancellationToken,
) {
    let path = SubscriptionPath::new(endpoint.name.clone(), endpoint.name.clone());
    let slots = Arc::new(Semaphore::new(settings.max_concurrent_sessions.max(1)));
    let waiting = Arc::new(SlotRequests::default());
    let sessions = TaskTracker::new();
    // A failing accept (a broker that cannot write, a namespace out of
    // reach) is asked less and less often, and logged once a minute, not
    // twice a second (issue 40).
    let mut backoff = RetryBackoff::default();
    let failures = FailureLog::default();
    loop {
        if endpoint.paused.is_paused() {
            info!(endpoint = %endpoint.name, "endpoint paused: taking no sessions until it is resumed");
            tokio::select! {
                () = shutdown.cancelled() => break,
                () = endpoint.paused.resumed() => {}
            }
            info!(endpoint = %endpoint.name, "endpoint resumed");
            continue;
        }
        // A free slot, or (every slot held) an accept that looks for a
        // session to take the next slot that is handed over.
        let free = Arc::clone(&slots).try_acquire_owned().ok();
        let accepted = tokio::select! {
            // A slot that comes free wins over the standby accept: it is
            // filled by a plain accept, with nobody asked to hand over.
            biased;
            () = shutdown.cancelled() => break,
            () = endpoint.paused.paused() => continue,
            permit = Arc::clone(&slots).acquire_owned(), if free.is_none() => match permit {
                Ok(_) => continue,
                Err(_) => break,
            },
            accepted = transport.accept_session(&path, SessionSelector::NextAvailable, settings.accept_timeout) => accepted,
        };
        if matches!(
            accepted,
            Ok(_) | Err(AcceptSessionError::NoSessionAvailable { .. })
        ) {
            backoff.succeeded();
            if let Some(line) = failures.succeeded(std::time::Instant::now()) {
                warn!(
                    endpoint = %endpoint.name,
                    failures = line.failures,
                    failed_for = %humantime::format_duration(line.failed_for),
                    "accepting sessions works again"
                );
            }
        }
        match accepted {
            // Paused while the accept was on its way: let the session go.
            Ok(lock) if endpoint.paused.is_paused() => lock.close().await,
            Ok(lock) => {
                let Some(permit) = free else {
                    // Every slot is held and a session has a message
                    // waiting. Let it go again: the slot that comes free
                    // goes to whichever session's message waited longest,
                    // as any accept does. Then ask a holder with nothing in
                    // hand to hand its slot over.
                    lock.close().await;
                    if Arc::clone(&slots).try_acquire_owned().is_ok() {
                        continue;
                    }
                    waiting.post();
                    tokio::select! {
                        () = shutdown.cancelled() => break,
                        permit = Arc::clone(&slots).acquire_owned() => if permit.is_err() { break },
                    }
                    waiting.withdraw();
                    continue;
                };
                let endpoint = Arc::clone(&endpoint);
                let shutdown = shutdown.clone();
                let transport = Arc::clone(&transport);
                let waiting = Arc::clone(&waiting);
                sessions.spawn(async move {
                    process_session(&*transport, &endpoint, lock, settings, &waiting, &shutdown)
                        .await;
                    drop(permit);
                });
            }
            Err(AcceptSessionError::NoSessionAvailable { .. }) => {}
            Err(e) => {
                let wait = backoff.failed();
                if let Some(line) = failures.failed(std::time::Instant::now()) {
                    let kind = nimbus_transport::Error::from(e.clone()).kind();
                    let held_back = line.held_back;
                    let next_attempt_in = humantime::format_duration(wait);
                    if kind == ErrorKind::NotFound {
                        error!(endpoint = %endpoint.name, error = %e, held_back, %next_attempt_in, "the endpoint's subscription is missing; is the topology provisioned?");
                    } else {
                        warn!(endpoint = %endpoint.name, error = %e, held_back, %next_attempt_in, "accepting a session failed; retrying, less often while it fails (one line a minute)");
                    }
                }
                tokio::select! {
                    () = shutdown.cancelled() => break,
                    () = tokio::time::sleep(wait) => {}
                }
            }
        }
    }
    sessions.close();
    sessions.wait().await;
}

/// Handles the messages of one session in order until it idles, it has
/// been held for its time, its lock is lost, or shutdown begins.
async fn process_session<T: Transport>(
    transport: &T,
    endpoint: &Endpoint,
    lock: T::Session,
    settings: ProcessorSettings,
    waiting: &SlotRequests,
    shutdown: &CancellationToken,
) {
    let held_since = tokio::time::Instant::now();
    let session_id = lock.session_id().to_owned();
    let mut state = match lock.get_state().await {
        Ok(blob) => match SessionState::from_bytes(blob.as_deref().unwrap_or_default()) {
            Ok(state) => state,
            Err(e) => {
                // Never guess: a state we cannot read may hold a block.
                error!(endpoint = %endpoint.name, session = %session_id, error = %e, "unreadable session state; leaving the session alone");
                return;
            }
        },
        Err(e) => {
            warn!(endpoint = %endpoint.name, session = %session_id, error = %e, "reading session state failed");
            return;
        }
    };
    while !shutdown.is_cancelled() {
        let received = tokio::select! {
            // A pause or a shutdown wins over a message that arrives at the
            // same moment: an unbiased select picked either.
            biased;
            () = shutdown.cancelled() => break,
            // The message in hand (if any) was settled: let the session go.
            () = endpoint.paused.paused() => {
                debug!(endpoint = %endpoint.name, session = %session_id, "endpoint paused; releasing the session");
                break;
            }
            received = waiting.next_or_hand_over(&lock, settings.session_idle_timeout) => received,
        };
        match received {
            // Paused while this message was on its way: it goes back as it
            // came (its delivery count unchanged), and the session with it.
            Ok(Some(message)) if endpoint.paused.is_paused() => {
                debug!(endpoint = %endpoint.name, session = %session_id, "endpoint paused as a message arrived; giving it back and releasing the session");
                if let Err(e) = lock.release(message).await {
                    warn!(endpoint = %endpoint.name, session = %session_id, error = %e, "giving back a message that arrived as the endpoint paused failed; the broker will redeliver it");
                }
                break;
            }
            Ok(Some(message)) => {
                let mut delivery = Delivery::new(endpoint, transport, &lock, &mut state, shutdown);
                if let Err(e) = delivery.run_guarded(message).await {
                    if e.lost_session() {
                        warn!(endpoint = %endpoint.name, session = %session_id, error = %e, "session lock lost; the broker will redeliver");
                    } else {
                        warn!(endpoint = %endpoint.name, session = %session_id, error = %e, "delivery not settled; releasing the session");
                    }
                    break;
                }
                if held_since.elapsed() >= settings.session_max_hold {
                    debug!(endpoint = %endpoint.name, session = %session_id, "held for its time; releasing the session for others");
                    break;
                }
            }
            Ok(None) => {
                debug!(endpoint = %endpoint.name, session = %session_id, "nothing in hand (idle, or another session waits); releasing the session");
                break;
            }
            Err(ReceiveError::SessionLockLost { .. }) => {
                debug!(endpoint = %endpoint.name, session = %session_id, "session lock lost while idle");
                break;
            }
            Err(e) => {
                warn!(endpoint = %endpoint.name, session = %session_id, error = %e, "receive failed");
                break;
            }
        }
    }
    lock.close().await;
}
