//! Waiting for a queue's notification, up to a deadline.

use std::pin::Pin;

use tokio::sync::futures::Notified;
use tokio::time::Instant;

/// Waits for `notified` until `deadline`; `false` when the deadline came
/// first.
///
/// A deadline already reached returns `false` at once, without a timer.
/// Tokio's timer rounds a deadline up to its next millisecond tick, so
/// `timeout_at` with a deadline of "now" (a zero wait: a receive that only
/// gathers what is already queued) held its caller up to a millisecond
/// every time (decision 0104).
pub(crate) async fn notified_before(deadline: Instant, notified: Pin<&mut Notified<'_>>) -> bool {
    if Instant::now() >= deadline {
        return false;
    }
    tokio::time::timeout_at(deadline, notified).await.is_ok()
}
