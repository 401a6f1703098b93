//! Handing a session slot over: how a consumer that holds as many sessions
//! as it may ask one holder with nothing in hand to let its session go,
//! because another session has messages waiting (decision 0105).
//!
//! Without it, a held session is released only when it idles out or its
//! hold ends. With more active sessions than slots and a few events per
//! session at a time, each held session's next event arrives before it idles
//! out, and the other sessions wait for the whole hold.

use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::Notify;
use tokio::sync::futures::Notified;

/// An open request for one session slot, shared by the consumer that posts
/// it and the holders that answer it.
///
/// A holder, each time it turns to its session's next message: registers
/// for [`SlotRequests::posted`] (and enables it), then [`claims`]. If it
/// claimed, it takes only what its session already has and lets the
/// session go when that is nothing, or [`post`]s the request again when a
/// message was there after all. If it did not claim, it waits for its next
/// message or for a request, whichever comes first. Registering before
/// claiming means no request falls between the two.
///
/// [`claims`]: SlotRequests::claim
/// [`post`]: SlotRequests::post
#[derive(Debug, Default)]
pub struct SlotRequests {
    open: AtomicBool,
    posted: Notify,
}

impl SlotRequests {
    /// Opens a request and wakes the holders waiting for a request (the
    /// idle ones, which can answer it). A busy holder sees it when it turns
    /// to its next message.
    pub fn post(&self) {
        self.open.store(true, Ordering::SeqCst);
        self.posted.notify_waiters();
    }

    /// Closes the request: a slot came free, handed over or otherwise.
    pub fn withdraw(&self) {
        self.open.store(false, Ordering::SeqCst);
    }

    /// Takes the open request, if there is one; only one holder gets it.
    pub fn claim(&self) -> bool {
        self.open
            .compare_exchange(true, false, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
    }

    /// Completes when a request is posted after this was enabled.
    pub fn posted(&self) -> Notified<'_> {
        self.posted.notified()
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
    fn a_holder_registered_before_a_post_is_woken() {
        let requests = SlotRequests::default();
        let mut posted = std::pin::pin!(requests.posted());
        posted.as_mut().enable();
        let mut context = std::task::Context::from_waker(std::task::Waker::noop());
        assert!(std::future::Future::poll(posted.as_mut(), &mut context).is_pending());
        requests.post();
        assert!(std::future::Future::poll(posted.as_mut(), &mut context).is_ready());
    }
}
