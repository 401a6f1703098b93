//! What a handler that did not fail says about the event.

use std::time::Duration;

/// What the handler did with the event (the `ok` side of its answer).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The event was handled.
    Completed,
    /// The event was handed off to an external job; its session waits
    /// until an operator completes or fails the handoff.
    PendingHandoff(PendingHandoff),
}

/// A handed-off event (the WIT `pending-handoff` record).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingHandoff {
    /// Why the event is pending, for the operator.
    pub reason: String,
    /// The id of the external job, if any.
    pub external_job_id: Option<String>,
    /// How long from now the job is expected to take.
    pub expected_by: Option<Duration>,
}
