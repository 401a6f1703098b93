//! Builders for every message the engine and the Manager send.
//!
//! Each takes the inbound message it answers (and the times it needs) and
//! returns a [`NimbusMessage`]; nothing reads a clock, so tests are exact.
//! Shapes follow upstream's `ResponseService` (nimbus-semantics.md §2.6)
//! with SEMANTICS.md §1's changes:
//!
//! - `CorrelationId` is the business correlation id everywhere (F25);
//! - `ReplyTo`/`ReplyToSessionId` survive parking, replay and retry (F21);
//! - a parked copy and its replay keep the original `MessageId` (F7);
//! - responses, retries, resubmits and skips carry no `MessageId`, so the
//!   transport assigns a fresh one.
//!
//! User properties of the inbound event travel with the event itself
//! (retry, parked copy, replay, resubmission), not with responses about it.

use std::time::SystemTime;

use nimbus_handler::FollowUp;
use nimbus_transport::Properties;

use crate::content::{ErrorContent, EventContent, MessageContent};
use crate::failure::Failure;
use crate::heartbeat::stamp_heartbeat;
use crate::message::NimbusMessage;
use crate::message_type::MessageType;
use crate::names::addr;

/// The timings a response reports (nimbus-semantics.md §2.2).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ResponseTimes {
    /// Enqueue → handler entry, in whole milliseconds.
    pub queue_time_ms: Option<u64>,
    /// Handler entry → response, in milliseconds.
    pub processing_time_ms: Option<u64>,
}

/// The common part of every Resolver-bound response.
fn response(inbound: &NimbusMessage, kind: MessageType, times: ResponseTimes) -> NimbusMessage {
    NimbusMessage {
        session_id: inbound.session_id.clone(),
        correlation_id: inbound.correlation_id.clone(),
        to: Some(addr::RESOLVER.to_owned()),
        message_type: kind,
        event_id: inbound.event_id.clone(),
        event_type_id: inbound.event_type().map(str::to_owned),
        originating_message_id: inbound.lineage_origin(),
        parent_message_id: inbound.message_id.clone(),
        retry_count: inbound.retry_count,
        originating_from: originating_from(inbound),
        queue_time_ms: times.queue_time_ms,
        processing_time_ms: times.processing_time_ms,
        ..NimbusMessage::default()
    }
}

/// Upstream writes the inbound `From`; an external publish has none, so
/// nimbus falls back to the lineage's own `OriginatingFrom`.
fn originating_from(inbound: &NimbusMessage) -> Option<String> {
    inbound
        .from
        .clone()
        .filter(|f| !f.is_empty())
        .or_else(|| inbound.originating_from.clone())
}

fn inbound_event(inbound: &NimbusMessage) -> Option<EventContent> {
    inbound
        .content
        .as_ref()
        .and_then(|c| c.event_content.clone())
}

fn with_error(inbound: &NimbusMessage, error: ErrorContent) -> Option<MessageContent> {
    Some(MessageContent {
        event_content: inbound_event(inbound),
        error_content: Some(error),
    })
}

/// The inbound content as-is; an empty `MessageContent` when it had none,
/// since every NimBus message carries a JSON object body (F31's interop rule).
fn verbatim(inbound: &NimbusMessage) -> Option<MessageContent> {
    Some(inbound.content.clone().unwrap_or_default())
}

/// ResolutionResponse: the event was handled (or a handoff completed, or a
/// stale request surfaced as resolved). Body: the inbound content verbatim.
pub fn resolution_response(inbound: &NimbusMessage, times: ResponseTimes) -> NimbusMessage {
    NimbusMessage {
        content: verbatim(inbound),
        ..response(inbound, MessageType::ResolutionResponse, times)
    }
}

/// ErrorResponse: the handler failed (Retry disposition).
pub fn error_response(
    inbound: &NimbusMessage,
    times: ResponseTimes,
    failure: &Failure,
) -> NimbusMessage {
    NimbusMessage {
        content: with_error(
            inbound,
            ErrorContent::new(
                Some(failure.message.clone()),
                Some(failure.error_type.clone()),
            ),
        ),
        ..response(inbound, MessageType::ErrorResponse, times)
    }
}

/// The ErrorType of the ErrorResponse answering a HandoffFailedRequest
/// (upstream does not carry the operator's type over).
pub const HANDOFF_FAILED_ERROR_TYPE: &str = "HandoffFailedException";

/// ErrorResponse answering a HandoffFailedRequest for the blocking event:
/// the operator's text (or `Handoff failed.`), ErrorType `HandoffFailedException`.
pub fn handoff_failed_response(request: &NimbusMessage, times: ResponseTimes) -> NimbusMessage {
    let text = request
        .content
        .as_ref()
        .and_then(|c| c.error_content.as_ref())
        .and_then(|e| e.error_text.clone())
        .filter(|t| !t.is_empty())
        .unwrap_or_else(|| "Handoff failed.".to_owned());
    error_response(
        request,
        times,
        &Failure::new(HANDOFF_FAILED_ERROR_TYPE, text),
    )
}

/// The ErrorType of a DeferralResponse.
pub const SESSION_BLOCKED_ERROR_TYPE: &str = "SessionBlockedException";

/// DeferralResponse: the event is parked behind `blocked_by` (an EventId).
pub fn deferral_response(
    inbound: &NimbusMessage,
    times: ResponseTimes,
    blocked_by: &str,
) -> NimbusMessage {
    let session = inbound.session_id.as_deref().unwrap_or_default();
    NimbusMessage {
        content: with_error(
            inbound,
            ErrorContent::new(
                Some(format!("Session {session} is blocked by {blocked_by}")),
                Some(SESSION_BLOCKED_ERROR_TYPE.to_owned()),
            ),
        ),
        ..response(inbound, MessageType::DeferralResponse, times)
    }
}

/// DeferralResponse for an event parked only because earlier events of its
/// session are still parked (no event blocks the session; decision 0050's
/// gate): same shape, text naming the wait instead of a blocker.
pub fn deferral_response_behind_parked(
    inbound: &NimbusMessage,
    times: ResponseTimes,
    parked: u32,
) -> NimbusMessage {
    let session = inbound.session_id.as_deref().unwrap_or_default();
    NimbusMessage {
        content: with_error(
            inbound,
            ErrorContent::new(
                Some(format!(
                    "Session {session} is waiting behind {parked} parked message(s)"
                )),
                Some(SESSION_BLOCKED_ERROR_TYPE.to_owned()),
            ),
        ),
        ..response(inbound, MessageType::DeferralResponse, times)
    }
}

/// SkipResponse for an operator skip: an empty `MessageContent`.
pub fn skip_response(inbound: &NimbusMessage, times: ResponseTimes) -> NimbusMessage {
    NimbusMessage {
        content: Some(MessageContent::default()),
        ..response(inbound, MessageType::SkipResponse, times)
    }
}

/// The ErrorText of a duplicate's SkipResponse.
pub const DUPLICATE_DETECTED: &str = "DuplicateDetected";

/// SkipResponse for an inbox duplicate: ErrorText `DuplicateDetected`.
pub fn duplicate_response(inbound: &NimbusMessage, times: ResponseTimes) -> NimbusMessage {
    NimbusMessage {
        content: with_error(
            inbound,
            ErrorContent::new(Some(DUPLICATE_DETECTED.to_owned()), None),
        ),
        ..response(inbound, MessageType::SkipResponse, times)
    }
}

/// SkipResponse for a failure the classifier discards: ErrorText
/// `"{type}: {message} Classified as Discard by {classified_by}."`, ErrorType the failure's type.
pub fn discard_response(
    inbound: &NimbusMessage,
    times: ResponseTimes,
    failure: &Failure,
    classified_by: &str,
) -> NimbusMessage {
    NimbusMessage {
        content: with_error(
            inbound,
            ErrorContent::new(
                Some(format!(
                    "{failure} Classified as Discard by {classified_by}."
                )),
                Some(failure.error_type.clone()),
            ),
        ),
        ..response(inbound, MessageType::SkipResponse, times)
    }
}

/// UnsupportedResponse: no handler for the event type. Body: the inbound content.
pub fn unsupported_response(inbound: &NimbusMessage, times: ResponseTimes) -> NimbusMessage {
    NimbusMessage {
        content: verbatim(inbound),
        ..response(inbound, MessageType::UnsupportedResponse, times)
    }
}

/// What a pending-handoff outcome reports.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Handoff {
    /// Why the event is pending.
    pub reason: String,
    /// The external job id, if any.
    pub external_job_id: Option<String>,
    /// The absolute deadline (now + the handler's duration), if any.
    pub expected_by: Option<SystemTime>,
}

/// PendingHandoffResponse: the handler handed the event off. Body: the inbound content.
pub fn pending_handoff_response(
    inbound: &NimbusMessage,
    times: ResponseTimes,
    handoff: &Handoff,
) -> NimbusMessage {
    NimbusMessage {
        content: verbatim(inbound),
        handoff_reason: Some(handoff.reason.clone()).filter(|r| !r.is_empty()),
        external_job_id: handoff.external_job_id.clone().filter(|j| !j.is_empty()),
        expected_by: handoff.expected_by,
        ..response(inbound, MessageType::PendingHandoffResponse, times)
    }
}

/// The dead-letter notification: an ErrorResponse carrying
/// `DeadLetterReason` and `DeadLetterErrorDescription` (the Resolver reads
/// the latter as DeadLettered). With a failure the body carries its
/// ErrorContent; the description is cut as the broker's would be.
pub fn dead_letter_notification(
    inbound: &NimbusMessage,
    times: ResponseTimes,
    reason: &str,
    description: &str,
    failure: Option<&Failure>,
) -> NimbusMessage {
    let content = match failure {
        Some(f) => with_error(
            inbound,
            ErrorContent::new(Some(f.message.clone()), Some(f.error_type.clone())),
        ),
        None => Some(MessageContent {
            event_content: inbound_event(inbound),
            error_content: None,
        }),
    };
    NimbusMessage {
        content,
        dead_letter_reason: Some(reason.to_owned()),
        dead_letter_error_description: Some(
            crate::dead_letter::truncate_description(description).into_owned(),
        ),
        ..response(inbound, MessageType::ErrorResponse, times)
    }
}

/// The heartbeat answer: a ResolutionResponse whose body is the probe's
/// heartbeat stamped with `now` (ForwardReceivedTime = BackwardSendTime),
/// `Endpoint` = the probe's `To` and the host's `sdk_version`; `From` is the
/// endpoint (nimbus-semantics.md §12).
pub fn heartbeat_response(
    probe: &NimbusMessage,
    times: ResponseTimes,
    now: SystemTime,
    sdk_version: &str,
) -> NimbusMessage {
    let endpoint = probe.to.clone();
    let stamped = stamp_heartbeat(probe.event_json(), now, endpoint.as_deref(), sdk_version);
    NimbusMessage {
        from: endpoint,
        content: Some(MessageContent::event(EventContent::new(
            addr::HEARTBEAT_EVENT_TYPE,
            stamped,
        ))),
        ..response(probe, MessageType::ResolutionResponse, times)
    }
}

/// The event itself, re-sent: envelope, lineage, body and user properties kept.
fn event_copy(inbound: &NimbusMessage) -> NimbusMessage {
    NimbusMessage {
        session_id: inbound.session_id.clone(),
        correlation_id: inbound.correlation_id.clone(),
        reply_to: inbound.reply_to.clone(),
        reply_to_session_id: inbound.reply_to_session_id.clone(),
        message_type: inbound.message_type,
        event_id: inbound.event_id.clone(),
        event_type_id: inbound.event_type().map(str::to_owned),
        originating_message_id: inbound.lineage_origin(),
        parent_message_id: inbound.message_id.clone(),
        retry_count: inbound.retry_count,
        originating_from: originating_from(inbound),
        properties: inbound.properties.clone(),
        content: verbatim(inbound),
        ..NimbusMessage::default()
    }
}

/// RetryRequest: the failed event again, scheduled at `at`, `To = Retry`,
/// `RetryCount + 1`. The endpoint subscription's rule rewrites it to
/// `To = endpoint, From = Retry` on arrival.
pub fn retry_request(inbound: &NimbusMessage, at: SystemTime) -> NimbusMessage {
    NimbusMessage {
        to: Some(addr::RETRY.to_owned()),
        message_type: MessageType::RetryRequest,
        retry_count: inbound.retry_count.saturating_add(1),
        scheduled_enqueue_time: Some(at),
        ..event_copy(inbound)
    }
}

/// The parked copy of an event that met a blocked session: `To = Deferred`,
/// `OriginalSessionId`, `DeferralSequence = sequence`, `From` and the
/// original `MessageId` kept.
pub fn parked_copy(inbound: &NimbusMessage, sequence: u32) -> NimbusMessage {
    NimbusMessage {
        message_id: inbound.message_id.clone(),
        to: Some(addr::DEFERRED.to_owned()),
        from: inbound.from.clone(),
        original_session_id: inbound.session_id.clone(),
        deferral_sequence: Some(sequence),
        ..event_copy(inbound)
    }
}

/// The replay of a parked copy onto the endpoint: every property but
/// `OriginalSessionId` and `To` kept, `To = endpoint`, same `MessageId`
/// (F7), `ReplyTo` kept (F21).
///
/// Unlike upstream, the replay keeps its `DeferralSequence`: it is how the
/// engine tells a replayed copy (which may run while parked messages remain)
/// from a new arrival (which must wait behind them), and the place a
/// replayed copy keeps if it meets a block again (decision 0050).
pub fn replay_from_parked(parked: &NimbusMessage, endpoint: &str) -> NimbusMessage {
    NimbusMessage {
        to: Some(endpoint.to_owned()),
        original_session_id: None,
        deferral_sequence: Some(parked.deferral_sequence.unwrap_or(0)),
        scheduled_enqueue_time: None,
        content: verbatim(parked),
        ..parked.clone()
    }
}

/// ProcessDeferredRequest: asks the endpoint's deferred processor to replay
/// the session's parked messages. Sent in the settlement that leaves the
/// session unblocked with messages parked. Session, EventId and EventTypeId
/// of `cause` (the message whose settlement sent it); empty content.
pub fn process_deferred_request(cause: &NimbusMessage) -> NimbusMessage {
    NimbusMessage {
        session_id: cause.session_id.clone(),
        correlation_id: cause.correlation_id.clone(),
        to: Some(addr::DEFERRED_PROCESSOR.to_owned()),
        message_type: MessageType::ProcessDeferredRequest,
        event_id: cause.event_id.clone(),
        event_type_id: cause.event_type().map(str::to_owned),
        originating_message_id: cause.lineage_origin(),
        parent_message_id: cause.message_id.clone(),
        originating_from: originating_from(cause),
        content: Some(MessageContent::default()),
        ..NimbusMessage::default()
    }
}

/// A Manager control message about `event` (the event as the endpoint
/// received it), addressed to `endpoint`.
fn control(event: &NimbusMessage, endpoint: &str, kind: MessageType) -> NimbusMessage {
    NimbusMessage {
        session_id: event.session_id.clone(),
        correlation_id: event.correlation_id.clone(),
        to: Some(endpoint.to_owned()),
        from: Some(addr::MANAGER.to_owned()),
        message_type: kind,
        event_id: event.event_id.clone(),
        event_type_id: event.event_type().map(str::to_owned),
        originating_message_id: event.lineage_origin(),
        parent_message_id: event.message_id.clone(),
        retry_count: 0,
        originating_from: originating_from(event),
        ..NimbusMessage::default()
    }
}

/// ResubmissionRequest: run the handler again on `event`, with its original
/// payload or `edited_payload` (JSON text), and its user properties (the
/// event itself, run again, as a retry is).
pub fn resubmission_request(
    event: &NimbusMessage,
    endpoint: &str,
    edited_payload: Option<&str>,
) -> NimbusMessage {
    let content = match edited_payload {
        None => verbatim(event),
        Some(payload) => Some(MessageContent::event(EventContent {
            event_type_id: event.event_type().map(str::to_owned),
            event_json: Some(payload.to_owned()),
        })),
    };
    NimbusMessage {
        content,
        properties: event.properties.clone(),
        ..control(event, endpoint, MessageType::ResubmissionRequest)
    }
}

/// SkipRequest: settle `event` as skipped without running the handler.
pub fn skip_request(event: &NimbusMessage, endpoint: &str) -> NimbusMessage {
    NimbusMessage {
        content: Some(MessageContent::default()),
        ..control(event, endpoint, MessageType::SkipRequest)
    }
}

fn fresh_id(given: Option<String>) -> Option<String> {
    Some(given.unwrap_or_else(new_message_id))
}

/// A fresh `MessageId`, for a message whose id must be known before it is
/// sent (the engine records which RetryRequest a block waits for).
pub fn new_message_id() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// HandoffCompletedRequest: the external job finished. Body: the details
/// (JSON text) as the event payload, or an empty content. A fresh
/// `MessageId` unless one is given.
pub fn handoff_completed_request(
    event: &NimbusMessage,
    endpoint: &str,
    details: Option<&str>,
    message_id: Option<String>,
) -> NimbusMessage {
    let content = match details {
        None => MessageContent::default(),
        Some(details) => MessageContent::event(EventContent {
            event_type_id: event.event_type().map(str::to_owned),
            event_json: Some(details.to_owned()),
        }),
    };
    NimbusMessage {
        message_id: fresh_id(message_id),
        originating_from: None,
        content: Some(content),
        ..control(event, endpoint, MessageType::HandoffCompletedRequest)
    }
}

/// HandoffFailedRequest: the external job failed. Body: the ErrorContent.
/// A fresh `MessageId` unless one is given.
pub fn handoff_failed_request(
    event: &NimbusMessage,
    endpoint: &str,
    failure: &Failure,
    message_id: Option<String>,
) -> NimbusMessage {
    NimbusMessage {
        message_id: fresh_id(message_id),
        originating_from: None,
        content: Some(MessageContent {
            event_content: None,
            error_content: Some(ErrorContent::new(
                Some(failure.message.clone()),
                Some(failure.error_type.clone()),
            )),
        }),
        ..control(event, endpoint, MessageType::HandoffFailedRequest)
    }
}

/// An original publish, as a producer sends it to its own topic.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Publish {
    /// The event type; also the `To` the forwarding rules match.
    pub event_type_id: String,
    /// The event (JSON text).
    pub payload: String,
    /// The session; a fresh one (no ordering) when `None`, as upstream.
    pub session_id: Option<String>,
    /// The correlation id; a fresh one when `None`.
    pub correlation_id: Option<String>,
    /// The message id; a fresh unique one when `None` (SEMANTICS.md §1, F16).
    pub message_id: Option<String>,
    /// The publishing endpoint, written as `OriginatingFrom` (`self` when `None`).
    pub publisher: Option<String>,
    /// Extra user properties.
    pub properties: Properties,
}

/// The original publish: `To = EventTypeId`, no `From` and no `EventId`
/// (the forwarding rules set them per consumer), lineage `self`.
pub fn original_publish(publish: &Publish) -> NimbusMessage {
    NimbusMessage {
        message_id: fresh_id(publish.message_id.clone()),
        session_id: fresh_id(publish.session_id.clone()),
        correlation_id: fresh_id(publish.correlation_id.clone()),
        to: Some(publish.event_type_id.clone()),
        message_type: MessageType::EventRequest,
        event_type_id: Some(publish.event_type_id.clone()),
        originating_from: publish.publisher.clone(),
        properties: publish.properties.clone(),
        content: Some(MessageContent::event(EventContent::new(
            publish.event_type_id.clone(),
            publish.payload.clone(),
        ))),
        ..NimbusMessage::default()
    }
}

/// The publish of a follow-up the handler at `endpoint` published while
/// handling `inbound`: session (unless the follow-up names one),
/// correlation id and lineage of `inbound` kept, the handler's message id.
pub fn follow_up_publish(
    inbound: &NimbusMessage,
    follow_up: &FollowUp,
    endpoint: &str,
) -> NimbusMessage {
    NimbusMessage {
        message_id: Some(follow_up.message_id.clone()),
        session_id: follow_up
            .session_id
            .clone()
            .or_else(|| inbound.session_id.clone()),
        correlation_id: inbound.correlation_id.clone(),
        to: Some(follow_up.event_type.clone()),
        message_type: MessageType::EventRequest,
        event_type_id: Some(follow_up.event_type.clone()),
        originating_message_id: inbound.lineage_origin(),
        parent_message_id: inbound.message_id.clone(),
        originating_from: Some(endpoint.to_owned()),
        properties: follow_up.properties.clone(),
        content: Some(MessageContent::event(EventContent::new(
            follow_up.event_type.clone(),
            follow_up.payload.clone(),
        ))),
        ..NimbusMessage::default()
    }
}
