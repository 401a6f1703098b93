//! What the Resolver records: the status of an event, and which message kind
//! sets which status.

use std::fmt;
use std::str::FromStr;

use serde::Serialize;

/// The status of one event at one endpoint (SEMANTICS.md §7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum Status {
    /// Received or being worked on; with sub-status `Handoff` while an
    /// external job runs.
    Pending,
    /// Handled.
    Completed,
    /// The handler failed; the event blocks its session until it is retried,
    /// resubmitted or skipped.
    Failed,
    /// Parked behind the event that blocks its session.
    Deferred,
    /// Skipped by an operator, as a duplicate, or by the failure classifier.
    Skipped,
    /// No handler serves the event type.
    Unsupported,
    /// Dead-lettered.
    DeadLettered,
}

impl Status {
    /// Every status, in the order operators read them.
    pub const ALL: [Status; 7] = [
        Status::Pending,
        Status::Completed,
        Status::Failed,
        Status::Deferred,
        Status::Skipped,
        Status::Unsupported,
        Status::DeadLettered,
    ];

    /// The name as stored and shown.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Pending => "Pending",
            Status::Completed => "Completed",
            Status::Failed => "Failed",
            Status::Deferred => "Deferred",
            Status::Skipped => "Skipped",
            Status::Unsupported => "Unsupported",
            Status::DeadLettered => "DeadLettered",
        }
    }

    /// Whether an event with this status needs nothing more from anyone
    /// (unless its session is blocked or has parked events, which the
    /// retention checks too): Completed, Skipped, Unsupported. The Resolver's
    /// retention removes only these; a Failed or DeadLettered event waits for
    /// an operator.
    pub fn is_expendable(self) -> bool {
        matches!(
            self,
            Status::Completed | Status::Skipped | Status::Unsupported
        )
    }

    /// Whether the event has reached an outcome (anything but Pending and
    /// Deferred).
    pub fn is_settled(self) -> bool {
        !matches!(self, Status::Pending | Status::Deferred)
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A status name that is not one of [`Status::ALL`].
#[derive(Debug, thiserror::Error)]
#[error(
    "unknown status '{0}' (expected one of Pending, Completed, Failed, Deferred, Skipped, Unsupported, DeadLettered)"
)]
pub struct UnknownStatus(pub String);

impl FromStr for Status {
    type Err = UnknownStatus;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Status::ALL
            .into_iter()
            .find(|status| status.as_str().eq_ignore_ascii_case(s))
            .ok_or_else(|| UnknownStatus(s.to_owned()))
    }
}

/// The NimBus message types the Resolver sees, by what they mean for status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MessageKind {
    /// An event request (the copy of every request addressed to an endpoint).
    EventRequest,
    /// An operator resubmission.
    ResubmissionRequest,
    /// An operator skip.
    SkipRequest,
    /// An automatic retry.
    RetryRequest,
    /// A legacy continuation.
    ContinuationRequest,
    /// A handoff completed by an operator or external system.
    HandoffCompletedRequest,
    /// A handoff failed by an operator or external system.
    HandoffFailedRequest,
    /// The event was handled.
    ResolutionResponse,
    /// The handler failed (or, with dead-letter properties, the message was
    /// dead-lettered).
    ErrorResponse,
    /// The event was parked.
    DeferralResponse,
    /// The event was skipped.
    SkipResponse,
    /// No handler for the event type.
    UnsupportedResponse,
    /// The event was handed off.
    PendingHandoffResponse,
}

impl MessageKind {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            MessageKind::EventRequest => "EventRequest",
            MessageKind::ResubmissionRequest => "ResubmissionRequest",
            MessageKind::SkipRequest => "SkipRequest",
            MessageKind::RetryRequest => "RetryRequest",
            MessageKind::ContinuationRequest => "ContinuationRequest",
            MessageKind::HandoffCompletedRequest => "HandoffCompletedRequest",
            MessageKind::HandoffFailedRequest => "HandoffFailedRequest",
            MessageKind::ResolutionResponse => "ResolutionResponse",
            MessageKind::ErrorResponse => "ErrorResponse",
            MessageKind::DeferralResponse => "DeferralResponse",
            MessageKind::SkipResponse => "SkipResponse",
            MessageKind::UnsupportedResponse => "UnsupportedResponse",
            MessageKind::PendingHandoffResponse => "PendingHandoffResponse",
        }
    }

    const ALL: [MessageKind; 13] = [
        MessageKind::EventRequest,
        MessageKind::ResubmissionRequest,
        MessageKind::SkipRequest,
        MessageKind::RetryRequest,
        MessageKind::ContinuationRequest,
        MessageKind::HandoffCompletedRequest,
        MessageKind::HandoffFailedRequest,
        MessageKind::ResolutionResponse,
        MessageKind::ErrorResponse,
        MessageKind::DeferralResponse,
        MessageKind::SkipResponse,
        MessageKind::UnsupportedResponse,
        MessageKind::PendingHandoffResponse,
    ];

    /// Whether this is operator or manager intent, which may reopen a settled
    /// row.
    pub fn is_control_request(self) -> bool {
        matches!(
            self,
            MessageKind::ResubmissionRequest
                | MessageKind::SkipRequest
                | MessageKind::RetryRequest
                | MessageKind::ContinuationRequest
                | MessageKind::HandoffCompletedRequest
                | MessageKind::HandoffFailedRequest
        )
    }

    /// Whether a message of this kind addresses the endpoint (so the endpoint
    /// is its `To`) rather than answering for it (its `From`).
    pub fn is_request(self) -> bool {
        self == MessageKind::EventRequest || self.is_control_request()
    }
}

/// A MessageType the Resolver does not record (e.g. `ProcessDeferredRequest`).
#[derive(Debug, thiserror::Error)]
#[error("the Resolver does not record messages of type '{0}'")]
pub struct UnrecordedKind(pub String);

impl FromStr for MessageKind {
    type Err = UnrecordedKind;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        MessageKind::ALL
            .into_iter()
            .find(|kind| kind.as_str() == s)
            .ok_or_else(|| UnrecordedKind(s.to_owned()))
    }
}

/// The sub-status of a Pending event whose handler handed it off.
pub const HANDOFF_SUB_STATUS: &str = "Handoff";
