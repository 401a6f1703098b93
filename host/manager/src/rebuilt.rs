//! An event the Resolver has no record of, found as a session's blocker in
//! the broker's session state (decision 0140).
//!
//! A Resolver store that was lost, or started anew after damage, knows none
//! of the events before it, while the broker's sessions still name their
//! blockers and hold the events parked behind them. Without this the
//! operator could neither skip nor resubmit those blockers, and the
//! sessions would stay blocked for good. The engine keeps the blocker's
//! event in the session state ([`nimbus_wire::BlockingEvent`]); the Manager
//! reads it through the broker's session listing, as an operator's tool
//! reads session state, and still acts only by sending a control message.
//! The rebuilt record is written to the store, with one history entry
//! saying so, just before the message is sent.

use nimbus_resolver::{EventRecord, HANDOFF_SUB_STATUS, MessageKind, Status};
use nimbus_transport::{Admin, AdminError, SubscriptionPath};
use nimbus_wire::topology::endpoint_topics;
use nimbus_wire::{BlockingEvent, SessionState};

use crate::error::ManagerError;

/// An event's record as the Manager found it.
#[derive(Debug)]
pub(crate) struct Found {
    /// The record to address the control message from.
    pub(crate) record: EventRecord,
    /// Set when the record was rebuilt from the broker's session state:
    /// the history entry that says so, written when the message is sent.
    pub(crate) rebuilt_note: Option<String>,
}

impl Found {
    /// A record the Resolver holds.
    pub(crate) fn recorded(record: EventRecord) -> Found {
        Found {
            record,
            rebuilt_note: None,
        }
    }
}

/// A blocked session whose state names the event asked for.
struct Blocked {
    endpoint: String,
    session_id: String,
    state: SessionState,
}

/// The blocker of the one session whose state names `id` (the event's
/// id, or the `MessageId` it came in with, as `nimbus publish` printed
/// it), at `endpoint` or at any endpoint; `None` when no session's
/// state names it, or the broker cannot list sessions (Service Bus over
/// AMQP).
pub(crate) async fn blocker_from_session_state<A: Admin>(
    admin: &A,
    id: &str,
    endpoint: Option<&str>,
) -> Result<Option<Found>, ManagerError> {
    let endpoints = match endpoint {
        Some(endpoint) => vec![endpoint.to_owned()],
        None => match endpoint_topics(admin).await {
            Ok(endpoints) => endpoints,
            Err(AdminError::Unsupported { .. }) => return Ok(None),
            Err(source) => {
                return Err(ManagerError::ReadEndpoint {
                    endpoint: "(every endpoint)".to_owned(),
                    source,
                });
            }
        },
    };
    let mut blocked = Vec::new();
    for endpoint in endpoints {
        let path = SubscriptionPath::new(endpoint.as_str(), endpoint.as_str());
        let sessions = match admin.list_sessions(&path).await {
            Ok(sessions) => sessions,
            Err(AdminError::NotFound { .. } | AdminError::Unsupported { .. }) => continue,
            Err(source) => return Err(ManagerError::ReadEndpoint { endpoint, source }),
        };
        for session in sessions {
            let Some(state) = session
                .state
                .as_deref()
                .and_then(|bytes| SessionState::from_bytes(bytes).ok())
            else {
                continue;
            };
            if names(&state, id) {
                blocked.push(Blocked {
                    endpoint: endpoint.clone(),
                    session_id: session.session_id,
                    state,
                });
            }
        }
    }
    match blocked.len() {
        0 => Ok(None),
        1 => Ok(blocked.pop().map(rebuild)),
        _ => Err(ManagerError::AmbiguousEndpoint {
            event_id: id.to_owned(),
            endpoints: blocked.into_iter().map(|b| b.endpoint).collect(),
        }),
    }
}

/// Whether `state` is blocked by the event `id` names: its event id, or the
/// message id it came in with (ids ignoring case, as the engine compares
/// them).
fn names(state: &SessionState, id: &str) -> bool {
    state.is_blocked_by(id)
        || state.is_blocked()
            && state
                .blocking_event
                .as_ref()
                .and_then(|event| event.message_id.as_deref())
                .is_some_and(|message_id| message_id.eq_ignore_ascii_case(id))
}

/// The record the Resolver would hold of the blocker, from what the state
/// kept. A state written by an earlier build names the blocker but keeps
/// none of its event: enough to skip it, not to resubmit it.
fn rebuild(blocked: Blocked) -> Found {
    let Blocked {
        endpoint,
        session_id,
        state,
    } = blocked;
    let event_id = state.blocked_by().unwrap_or_default().to_owned();
    let kept = state.blocking_event.clone().unwrap_or_default();
    // As the response that left it so would have set it, so the
    // stale-write guard judges the messages that follow as it would have.
    let (status, sub_status, source) = if kept.handoff {
        (
            Status::Pending,
            Some(HANDOFF_SUB_STATUS.to_owned()),
            MessageKind::PendingHandoffResponse,
        )
    } else {
        (Status::Failed, None, MessageKind::ErrorResponse)
    };
    let now = nimbus_wire::unix_millis(std::time::SystemTime::now());
    let note = note(&session_id, &endpoint, state.blocking_event.as_ref());
    let BlockingEvent {
        event_type_id,
        message_id,
        correlation_id,
        from,
        originating_message_id,
        originating_from,
        event_json,
        user_properties,
        ..
    } = kept;
    let record = EventRecord {
        endpoint,
        event_id,
        session_id: Some(session_id),
        status,
        sub_status,
        status_source: source.as_str().to_owned(),
        event_type: event_type_id,
        correlation_id,
        last_message_id: None,
        request_message_id: message_id,
        request_from: from,
        originating_message_id,
        originating_from,
        retry_count: 0,
        error_type: None,
        error_text: None,
        dead_letter_reason: None,
        dead_letter_description: None,
        handoff_reason: None,
        external_job_id: None,
        expected_by: None,
        handler_version: None,
        queue_time_ms: None,
        processing_time_ms: None,
        payload: event_json,
        first_seen_ms: now,
        updated_ms: now,
        properties: user_properties,
    };
    Found {
        record,
        rebuilt_note: Some(note),
    }
}

/// The history entry of a rebuilt event: where its facts came from, and
/// what they lack.
fn note(session_id: &str, endpoint: &str, kept: Option<&BlockingEvent>) -> String {
    let source = format!(
        "the Resolver had no record of this event (its store was lost or started anew): \
         rebuilt from the broker's state of session '{session_id}' at '{endpoint}', which it blocks"
    );
    match kept {
        None => format!(
            "{source}; that state (written by an earlier build) names the event but not its type, \
             payload or earlier history"
        ),
        Some(kept) if kept.omitted_bytes > 0 => format!(
            "{source}, without its payload ({} bytes, over what the state keeps) or earlier history",
            kept.omitted_bytes
        ),
        Some(_) => format!("{source}, without its earlier history"),
    }
}
