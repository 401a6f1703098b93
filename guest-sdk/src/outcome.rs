//! What a handler did with an event that did not fail.

use std::time::Duration;

use crate::bindings::nimbus::handler::types as wit;
use crate::duration_ms;

/// What the handler did with the event.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Outcome {
    /// The event was handled.
    #[default]
    Completed,
    /// The event was handed off to a long-running external job. It is settled
    /// later by an operator or the external system, never by running the
    /// handler again; its session stays blocked until then.
    PendingHandoff(PendingHandoff),
}

impl From<()> for Outcome {
    fn from((): ()) -> Self {
        Self::Completed
    }
}

impl From<PendingHandoff> for Outcome {
    fn from(handoff: PendingHandoff) -> Self {
        Self::PendingHandoff(handoff)
    }
}

/// Starts a pending handoff with the reason the operator will see, e.g.
/// `"DMF import in flight"`. Add the external job id and the expected
/// duration with the builder methods, then `.into()` an [`Outcome`].
pub fn pending_handoff(reason: impl Into<String>) -> PendingHandoff {
    PendingHandoff {
        reason: reason.into(),
        external_job_id: None,
        expected_within: None,
    }
}

/// A handed-off event: see [`Outcome::PendingHandoff`] and [`pending_handoff`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingHandoff {
    reason: String,
    external_job_id: Option<String>,
    expected_within: Option<Duration>,
}

impl PendingHandoff {
    /// The id of the external job. Derive it from the event (e.g. from its
    /// event id) so that a retry reports the same job.
    #[must_use]
    pub fn external_job_id(mut self, id: impl Into<String>) -> Self {
        self.external_job_id = Some(id.into());
        self
    }

    /// How long from now the job is expected to take. The host records the
    /// absolute deadline (`ExpectedBy`) when it settles the outcome.
    /// Millisecond precision; longer than `u64::MAX` ms saturates.
    #[must_use]
    pub fn expected_within(mut self, duration: Duration) -> Self {
        self.expected_within = Some(duration);
        self
    }

    /// Why the event is pending.
    pub fn reason(&self) -> &str {
        &self.reason
    }

    /// The external job id, if set.
    pub fn job_id(&self) -> Option<&str> {
        self.external_job_id.as_deref()
    }

    /// The expected duration, if set.
    pub fn expected_duration(&self) -> Option<Duration> {
        self.expected_within
    }
}

impl From<Outcome> for wit::Outcome {
    fn from(outcome: Outcome) -> Self {
        match outcome {
            Outcome::Completed => Self::Completed,
            Outcome::PendingHandoff(h) => Self::PendingHandoff(wit::PendingHandoff {
                reason: h.reason,
                external_job_id: h.external_job_id,
                expected_by: h.expected_within.map(duration_ms),
            }),
        }
    }
}
