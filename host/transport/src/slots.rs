//! Handing a session slot over: how a consumer that holds as many sessions
//! as it may ask one holder with nothing in hand to let its session go,
//! because another session has messages waiting (decision 0105).
//!
//! Without it, a held session is released only when it idles out or its
//! hold ends. With more active sessions than slots and a few events per
//! session at a time, each held session's next event arrives before it idles
//! out, and the other sessions wait for the whole hold.

use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::{ReceiveError, ReceivedMessage, SessionLock};

/// No request.
const IDLE: u8 = 0;
/// A request waits for a holder to claim it.
const OPEN: u8 = 1;
/// A holder took the request and is looking at its session.
const CLAIMED: u8 = 2;

/// An open request for one session slot, shared by the consumer that posts
/// it and the holders that answer it through
/// [`SlotRequests::next_or_hand_over`].
#[derive(Debug, Default)]
pub struct SlotRequests {
    state: AtomicU8,
    posted: Notify,
}

impl SlotRequests {
    /// Opens a request and wakes the holders waiting for their next
    /// message (the idle ones, which can answer it). A busy holder sees it
    /// when it turns to its next message.
    pub fn post(&self) {
        self.state.store(OPEN, Ordering::SeqCst);
        self.posted.notify_waiters();
    }

    /// Closes the request: a slot came free, handed over or otherwise.
    pub fn withdraw(&self) {
        self.state.store(IDLE, Ordering::SeqCst);
    }

    /// Takes the open request, if there is one; only one holder gets it.
    fn claim(&self) -> bool {
        self.state
            .compare_exchange(OPEN, CLAIMED, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
    }

    /// Gives a claimed request back to the other holders, unless it was
    /// withdrawn meanwhile (a slot came free some other way).
    fn unclaim(&self) {
        if self
            .state
            .compare_exchange(CLAIMED, OPEN, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
        {
            self.posted.notify_waiters();
        }
    }

    /// The next message of `session`, waiting up to `idle_timeout` for it;
    /// `Ok(None)` when the holder should let the session go: it idled out,
    /// or another session waits for a slot and this one has nothing in hand.
    ///
    /// Registering for the wake before claiming means no request falls
    /// between the two. A wake does not restart the idle clock.
    pub async fn next_or_hand_over<S: SessionLock>(
        &self,
        session: &S,
        idle_timeout: Duration,
    ) -> Result<Option<ReceivedMessage>, ReceiveError> {
        let idle_until = Instant::now() + idle_timeout;
        loop {
            let posted = self.posted.notified();
            let mut posted = std::pin::pin!(posted);
            posted.as_mut().enable();
            if self.claim() {
                let next = session.receive(Duration::ZERO).await;
                if matches!(next, Ok(Some(_))) {
                    // Busy after all: leave the request to another holder.
                    self.unclaim();
                }
                return next;
            }
            let left = idle_until.saturating_duration_since(Instant::now());
            tokio::select! {
                next = session.receive(left) => return next,
                () = posted => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_one_holder_claims_a_request() {
        let requests = SlotRequests::default();
        assert!(!requests.claim(), "nothing posted");
        requests.post();
        assert!(requests.claim());
        assert!(!requests.claim(), "already taken");
        requests.post();
        requests.withdraw();
        assert!(!requests.claim(), "withdrawn");
    }

    #[test]
    fn a_busy_claimer_gives_the_request_back_unless_it_was_withdrawn() {
        let requests = SlotRequests::default();
        requests.post();
        assert!(requests.claim());
        requests.unclaim();
        assert!(requests.claim(), "given back: another holder can take it");
        // A slot came free some other way while the claimer looked.
        requests.withdraw();
        requests.unclaim();
        assert!(!requests.claim(), "a withdrawn request is not reopened");
    }

    #[test]
    fn a_holder_registered_before_a_post_is_woken() {
        let requests = SlotRequests::default();
        let mut posted = std::pin::pin!(requests.posted.notified());
        posted.as_mut().enable();
        let mut context = std::task::Context::from_waker(std::task::Waker::noop());
        assert!(std::future::Future::poll(posted.as_mut(), &mut context).is_pending());
        requests.post();
        assert!(std::future::Future::poll(posted.as_mut(), &mut context).is_ready());
    }
}
