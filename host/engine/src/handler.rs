//! How the engine reaches handlers: one small trait, so the engine knows
//! nothing of wasm. The host adapts the sandbox's registry to it; `nimbus
//! bench` plugs in a native handler through the same seam to measure what
//! the sandbox costs.

use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, SystemTime};

use nimbus_transport::Properties;
use nimbus_wire::build::FollowUp;

/// One event as a handler sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct HandlerEvent {
    /// The event's `EventId` at this endpoint.
    pub event_id: String,
    /// Its `EventTypeId`.
    pub event_type: String,
    /// The broker message id of this delivery.
    pub message_id: String,
    /// The session.
    pub session_id: String,
    /// The business correlation id.
    pub correlation_id: Option<String>,
    /// The immediate parent message (`None` for `self`).
    pub parent_message_id: Option<String>,
    /// The first message of the lineage (`None` for `self`).
    pub originating_message_id: Option<String>,
    /// The automatic retry count.
    pub retry_count: u32,
    /// When the broker enqueued this delivery.
    pub enqueued_time: SystemTime,
    /// The payload (`EventJson`).
    pub payload: String,
    /// The user properties that are not NimBus envelope properties.
    pub properties: Properties,
    /// The broker's delivery count, this delivery included.
    pub delivery_count: u32,
    /// The NimBus message type that brought the event.
    pub message_type: &'static str,
    /// The message's `From`: the publishing endpoint, `Retry` or `Manager`.
    pub from: Option<String>,
}

/// An error a handler reported (or the sandbox reported for it: `Trap`,
/// `Timeout`, `MemoryLimit`, `Panic`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HandlerFailure {
    /// The error type.
    pub error_type: String,
    /// The message.
    pub message: String,
    /// The handler's retry-after hint.
    pub retry_after: Option<Duration>,
}

/// What the handler said about the event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HandlerResult {
    /// Handled.
    Completed,
    /// Handed off to an external job.
    PendingHandoff {
        /// Why.
        reason: String,
        /// The external job's id.
        external_job_id: Option<String>,
        /// How long from now the job is expected to take.
        expected_by: Option<Duration>,
    },
    /// An ordinary failure.
    Failed(HandlerFailure),
    /// A passing infrastructure problem.
    Transient(HandlerFailure),
    /// The event can never succeed.
    Permanent(HandlerFailure),
}

/// One handler run: its result, the follow-ups it asked for (held until the
/// outcome is known), and the version that ran.
#[derive(Debug, Clone, PartialEq)]
pub struct HandlerReport {
    /// The result.
    pub result: HandlerResult,
    /// Follow-up events, in the order the handler published them.
    pub follow_ups: Vec<FollowUp>,
    /// The digest (or other identity) of the handler version that ran.
    pub version: String,
}

/// One handler run in progress; `None` when the endpoint has no handler for
/// the event's type.
pub type HandlerCall<'a> = Pin<Box<dyn Future<Output = Option<HandlerReport>> + Send + 'a>>;

/// The handlers an engine dispatches to.
///
/// The engine polls the call on the session's own task, beside the lock
/// renewal: no thread hand-off per event (decision 0106). So a call must not
/// block its thread for long: CPU-bound work yields now and then (the
/// sandbox yields at every epoch tick), and waiting is awaited, not slept.
pub trait Handlers: Send + Sync + 'static {
    /// Runs `event` on the handler that `endpoint` serves its event type
    /// with, start to finish on one version.
    fn invoke<'a>(&'a self, endpoint: &'a str, event: HandlerEvent) -> HandlerCall<'a>;
}
