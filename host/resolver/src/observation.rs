//! One message as the Resolver sees it: what the engine's Resolver consumer
//! decodes from a NimBus message before recording it.

use serde::{Deserialize, Serialize};

use crate::status::{HANDOFF_SUB_STATUS, MessageKind, Status};

/// What one message says about a handoff: a `PendingHandoffResponse` names
/// the external job (reason, id, deadline); a `HandoffCompletedRequest`
/// carries the job's details. The history keeps it per message, so the job
/// stays readable after the handoff is settled and the event's own handoff
/// columns are cleared. Absent fields are left out of the JSON (the history
/// column and the API alike): each message says only its part.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HandoffDetails {
    /// Why the event is pending.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The external job's id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external_job_id: Option<String>,
    /// The deadline, as the wire carries it (ISO-8601).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_by: Option<String>,
    /// A `HandoffCompletedRequest`'s details: the external job's result,
    /// JSON text as received (never the event's payload).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<String>,
}

impl HandoffDetails {
    /// Whether it says nothing (not worth a history note).
    pub fn is_empty(&self) -> bool {
        *self == HandoffDetails::default()
    }
}

/// One message about one event at one endpoint.
#[derive(Debug, Clone, PartialEq)]
pub struct Observation {
    /// The endpoint: a request's `To`, a response's `From`.
    pub endpoint: String,
    /// The event's `EventId` (per consumer).
    pub event_id: String,
    /// What kind of message this is.
    pub kind: MessageKind,
    /// The broker message id, if it had one.
    pub message_id: Option<String>,
    /// The session.
    pub session_id: Option<String>,
    /// The business correlation id.
    pub correlation_id: Option<String>,
    /// The event type.
    pub event_type: Option<String>,
    /// The message's `From`.
    pub from: Option<String>,
    /// `ParentMessageId` (`None` for `self`): on a response, the MessageId of
    /// the request it answers.
    pub parent_message_id: Option<String>,
    /// `OriginatingMessageId` (`None` for `self`).
    pub originating_message_id: Option<String>,
    /// `OriginatingFrom` (`None` for `self`).
    pub originating_from: Option<String>,
    /// The automatic retry count.
    pub retry_count: u32,
    /// `ErrorContent.ErrorType`, when the message carries an error.
    pub error_type: Option<String>,
    /// `ErrorContent.ErrorText`, when the message carries an error.
    pub error_text: Option<String>,
    /// `DeadLetterReason`: the message reports a dead-letter.
    pub dead_letter_reason: Option<String>,
    /// `DeadLetterErrorDescription`: its presence makes the status
    /// DeadLettered, whatever the message type.
    pub dead_letter_description: Option<String>,
    /// What a `PendingHandoffResponse` or a `HandoffCompletedRequest` says
    /// about the handoff.
    pub handoff: Option<HandoffDetails>,
    /// The digest of the handler version that produced a response.
    pub handler_version: Option<String>,
    /// Enqueue to handler entry, in ms.
    pub queue_time_ms: Option<i64>,
    /// Handler entry to response, in ms.
    pub processing_time_ms: Option<i64>,
    /// The event payload (`EventJson`), when the message carries one.
    pub payload: Option<String>,
    /// The published message's user properties as a JSON object
    /// ([`nimbus_wire::user_properties`]), on an `EventRequest` that has
    /// any: a resubmission, built from the record, carries them again.
    pub properties: Option<String>,
    /// When the message was enqueued, in ms since the Unix epoch.
    pub at_ms: i64,
}

impl Observation {
    /// A minimal observation; the other fields are filled in by the caller.
    pub fn new(endpoint: &str, event_id: &str, kind: MessageKind, at_ms: i64) -> Self {
        Observation {
            endpoint: endpoint.to_owned(),
            event_id: event_id.to_owned(),
            kind,
            message_id: None,
            session_id: None,
            correlation_id: None,
            event_type: None,
            from: None,
            parent_message_id: None,
            originating_message_id: None,
            originating_from: None,
            retry_count: 0,
            error_type: None,
            error_text: None,
            dead_letter_reason: None,
            dead_letter_description: None,
            handoff: None,
            handler_version: None,
            queue_time_ms: None,
            processing_time_ms: None,
            payload: None,
            properties: None,
            at_ms,
        }
    }

    /// The status this message asks for, and its sub-status.
    pub fn status(&self) -> (Status, Option<&'static str>) {
        if self.dead_letter_description.is_some() {
            return (Status::DeadLettered, None);
        }
        match self.kind {
            MessageKind::ResolutionResponse => (Status::Completed, None),
            MessageKind::ErrorResponse => (Status::Failed, None),
            MessageKind::DeferralResponse => (Status::Deferred, None),
            MessageKind::SkipResponse => (Status::Skipped, None),
            MessageKind::UnsupportedResponse => (Status::Unsupported, None),
            MessageKind::PendingHandoffResponse => (Status::Pending, Some(HANDOFF_SUB_STATUS)),
            MessageKind::EventRequest
            | MessageKind::ResubmissionRequest
            | MessageKind::SkipRequest
            | MessageKind::RetryRequest
            | MessageKind::ContinuationRequest
            | MessageKind::HandoffCompletedRequest
            | MessageKind::HandoffFailedRequest => (Status::Pending, None),
        }
    }
}
