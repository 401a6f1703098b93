//! Resubmit, skip, complete and fail a handoff: find the event in the
//! Resolver store (or, for a session's blocker it has no record of, in the
//! broker's session state), check the operation makes sense, send the
//! control message to the endpoint's topic.

use std::sync::Arc;

use nimbus_resolver::{EventRecord, HANDOFF_SUB_STATUS, ResolverStore, Status};
use nimbus_transport::{Admin, Transport};
use nimbus_wire::{
    ControlKey, EventContent, Failure, MessageContent, MessageType, NimbusMessage, build,
    control_signature,
};
use serde::Serialize;

use crate::error::ManagerError;
use crate::rebuilt::{self, Found};

/// The ErrorType of a handoff failure when the operator gives none.
pub const DEFAULT_HANDOFF_ERROR_TYPE: &str = "HandoffFailed";

/// A control message the Manager sent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Sent {
    /// The endpoint it was sent to (its topic, `To`).
    pub endpoint: String,
    /// The event it is about.
    pub event_id: String,
    /// Its message type.
    pub message_type: &'static str,
    /// Its `MessageId`.
    pub message_id: String,
    /// The event's status when it was sent.
    pub status_before: Status,
    /// What the operator should know: the operation was allowed, but the
    /// event's status makes it unusual.
    pub notes: Vec<String>,
}

/// Operator operations on events, as control messages on the bus.
///
/// Every operation reads the event's coordinates from the Resolver store,
/// so it needs nothing but the event id (and the endpoint when the event is
/// at several). A session's blocker the store has no record of is rebuilt
/// from the broker's session state (decision 0140).
pub struct Manager<T> {
    pub(crate) transport: Arc<T>,
    pub(crate) store: Arc<dyn ResolverStore>,
    /// Seals every control message, so an endpoint can tell this Manager
    /// from any client that writes `From = Manager` (decision 0141).
    control_key: ControlKey,
}

impl<T> std::fmt::Debug for Manager<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Manager").finish_non_exhaustive()
    }
}

impl<T: Transport> Manager<T> {
    /// A Manager sending through `transport`, finding events in `store`,
    /// signing what it sends with `control_key` (the key every host on the
    /// bus verifies with).
    pub fn new(transport: Arc<T>, store: Arc<dyn ResolverStore>, control_key: ControlKey) -> Self {
        Manager {
            transport,
            store,
            control_key,
        }
    }
}

impl<T: Transport + Admin> Manager<T> {
    /// Runs the handler again on the event: with its recorded payload, or
    /// with `edited_payload` (JSON text). Allowed in any status; a note says
    /// when the status makes it unusual (e.g. already Completed).
    pub async fn resubmit(
        &self,
        event_id: &str,
        endpoint: Option<&str>,
        edited_payload: Option<&str>,
    ) -> Result<Sent, ManagerError> {
        if let Some(payload) = edited_payload {
            check_json("edited payload", payload)?;
        }
        let found = self.find_named(event_id, endpoint).await?;
        let record = &found.record;
        if found.rebuilt_note.is_some() && record.event_type.is_none() {
            return Err(ManagerError::BlockerOnlyNamed {
                event_id: record.event_id.clone(),
                endpoint: record.endpoint.clone(),
            });
        }
        let event = received_event(&found)?;
        if edited_payload.is_none() && event.event_json().is_none() {
            return Err(ManagerError::MissingPayload {
                event_id: record.event_id.clone(),
                endpoint: record.endpoint.clone(),
            });
        }
        let mut message = build::resubmission_request(&event, &record.endpoint, edited_payload);
        message.message_id = Some(fresh_id());
        let notes = rerun_notes(
            record,
            "resubmitting runs the handler on it again",
            "resubmitting runs the handler on it now, ahead of the events parked before it; if that completes it, hands it off or discards it, its parked copy is dropped without running when the session replays, and if it fails, the parked copy runs again in its turn",
        );
        self.send(&found, message, notes).await
    }

    /// Settles the event as skipped without running the handler, unblocking
    /// its session. Allowed in any status; a note says when it is unusual.
    pub async fn skip(&self, event_id: &str, endpoint: Option<&str>) -> Result<Sent, ManagerError> {
        let found = self.find_named(event_id, endpoint).await?;
        let record = &found.record;
        let event = received_event(&found)?;
        let mut message = build::skip_request(&event, &record.endpoint);
        message.message_id = Some(fresh_id());
        let consequence = if record.status == Status::Skipped {
            "skipping it again only adds to its history"
        } else {
            "skipping records it as Skipped instead"
        };
        let notes = rerun_notes(
            record,
            consequence,
            "skipping records it as Skipped, and its parked copy is dropped without running when the session replays",
        );
        self.send(&found, message, notes).await
    }

    /// Completes the external job of an event pending a handoff; `details`
    /// (JSON text) travel as the body's payload. The handler does not run.
    pub async fn complete_handoff(
        &self,
        event_id: &str,
        endpoint: Option<&str>,
        details: Option<&str>,
    ) -> Result<Sent, ManagerError> {
        if let Some(details) = details {
            check_json("handoff details", details)?;
        }
        let found = self.find_named(event_id, endpoint).await?;
        require_handoff(&found.record)?;
        let event = received_event(&found)?;
        let message =
            build::handoff_completed_request(&event, &found.record.endpoint, details, None);
        self.send(&found, message, Vec::new()).await
    }

    /// Fails the external job of an event pending a handoff: the event
    /// becomes Failed and its session stays blocked until a resubmit or skip.
    pub async fn fail_handoff(
        &self,
        event_id: &str,
        endpoint: Option<&str>,
        error_text: &str,
        error_type: Option<&str>,
    ) -> Result<Sent, ManagerError> {
        if error_text.trim().is_empty() {
            return Err(ManagerError::MissingErrorText);
        }
        let found = self.find_named(event_id, endpoint).await?;
        require_handoff(&found.record)?;
        let event = received_event(&found)?;
        let failure = Failure::new(
            error_type
                .filter(|t| !t.trim().is_empty())
                .unwrap_or(DEFAULT_HANDOFF_ERROR_TYPE),
            error_text,
        );
        let message = build::handoff_failed_request(&event, &found.record.endpoint, &failure, None);
        self.send(&found, message, Vec::new()).await
    }

    /// [`Manager::find`], or, when no event has the id, the one event whose
    /// history has a message with it (the message id `nimbus publish`
    /// printed, say): an operator may name an event either way. Failing
    /// both, the blocker of the session whose state names it, rebuilt from
    /// that state.
    async fn find_named(&self, id: &str, endpoint: Option<&str>) -> Result<Found, ManagerError> {
        match self.find(id, endpoint).await {
            Err(ManagerError::UnknownEvent { .. }) => {}
            found => return found.map(Found::recorded),
        }
        let store = Arc::clone(&self.store);
        let message_id = id.to_owned();
        let details = tokio::task::spawn_blocking(move || store.events_of_message(&message_id))
            .await
            .map_err(|join| nimbus_resolver::StoreError::Panicked(join.to_string()))??;
        let mut records: Vec<EventRecord> = details
            .into_iter()
            .map(|d| d.record)
            .filter(|r| endpoint.is_none_or(|e| r.endpoint == e))
            .collect();
        match records.len() {
            0 => rebuilt::blocker_from_session_state(&*self.transport, id, endpoint)
                .await?
                .ok_or_else(|| ManagerError::UnknownEvent {
                    event_id: id.to_owned(),
                }),
            1 => Ok(Found::recorded(records.remove(0))),
            _ => Err(ManagerError::AmbiguousMessage {
                message_id: id.to_owned(),
                events: records
                    .iter()
                    .map(|r| format!("'{}' at '{}'", r.event_id, r.endpoint))
                    .collect(),
            }),
        }
    }

    /// The event's record at one endpoint.
    pub(crate) async fn find(
        &self,
        event_id: &str,
        endpoint: Option<&str>,
    ) -> Result<EventRecord, ManagerError> {
        let store = Arc::clone(&self.store);
        let id = event_id.to_owned();
        let details = tokio::task::spawn_blocking(move || store.event(&id))
            .await
            .map_err(|join| nimbus_resolver::StoreError::Panicked(join.to_string()))??;
        let mut records: Vec<EventRecord> = details.into_iter().map(|d| d.record).collect();
        if records.is_empty() {
            return Err(ManagerError::UnknownEvent {
                event_id: event_id.to_owned(),
            });
        }
        let known = || {
            records
                .iter()
                .map(|r| r.endpoint.clone())
                .collect::<Vec<_>>()
        };
        match endpoint {
            Some(endpoint) => match records.iter().position(|r| r.endpoint == endpoint) {
                Some(at) => Ok(records.swap_remove(at)),
                None => Err(ManagerError::NotAtEndpoint {
                    event_id: event_id.to_owned(),
                    endpoint: endpoint.to_owned(),
                    known: known(),
                }),
            },
            None if records.len() == 1 => Ok(records.remove(0)),
            None => Err(ManagerError::AmbiguousEndpoint {
                event_id: event_id.to_owned(),
                endpoints: known(),
            }),
        }
    }

    async fn send(
        &self,
        found: &Found,
        message: NimbusMessage,
        mut notes: Vec<String>,
    ) -> Result<Sent, ManagerError> {
        let record = &found.record;
        if let Some(note) = &found.rebuilt_note {
            // Before the message: its copy and the answer to it are then
            // recorded on the rebuilt row, after the entry that says where
            // the row came from.
            let store = Arc::clone(&self.store);
            let (rebuilt, text) = (record.clone(), note.clone());
            tokio::task::spawn_blocking(move || store.record_rebuilt(&rebuilt, &text))
                .await
                .map_err(|join| nimbus_resolver::StoreError::Panicked(join.to_string()))??;
            tracing::warn!(
                endpoint = %record.endpoint,
                event_id = %record.event_id,
                session = record.session_id.as_deref().unwrap_or_default(),
                "manager: the Resolver had no record of the event; rebuilt it from the broker's \
                 session state, which names it as the session's blocker"
            );
            notes.push(format!("{note} (noted in its history)"));
        }
        let message_type = message.message_type.as_str();
        let mut message = message.to_transport();
        // Signed last, over exactly what travels; signing gives the message
        // its id if it had none.
        control_signature::sign(&self.control_key, &mut message);
        let message_id = message.message_id.clone().unwrap_or_default();
        // Upstream's Manager publishes straight to the endpoint's topic; the
        // topic's `to-E` rules deliver it to the endpoint and copy it to the
        // Resolver.
        self.transport
            .publish(&record.endpoint, vec![message])
            .await
            .map_err(|source| ManagerError::Publish {
                message_type,
                topic: record.endpoint.clone(),
                source,
            })?;
        tracing::info!(
            endpoint = %record.endpoint,
            event_id = %record.event_id,
            message_type,
            %message_id,
            "manager: control message sent"
        );
        Ok(Sent {
            endpoint: record.endpoint.clone(),
            event_id: record.event_id.clone(),
            message_type,
            message_id,
            status_before: record.status,
            notes,
        })
    }
}

fn fresh_id() -> String {
    uuid::Uuid::new_v4().to_string()
}

fn check_json(what: &'static str, text: &str) -> Result<(), ManagerError> {
    serde_json::from_str::<serde::de::IgnoredAny>(text)
        .map(drop)
        .map_err(|e| ManagerError::NotJson {
            what,
            reason: e.to_string(),
        })
}

fn require_handoff(record: &EventRecord) -> Result<(), ManagerError> {
    let pending_handoff = record.status == Status::Pending
        && record.sub_status.as_deref() == Some(HANDOFF_SUB_STATUS);
    if pending_handoff {
        Ok(())
    } else {
        Err(ManagerError::NotPendingHandoff {
            event_id: record.event_id.clone(),
            endpoint: record.endpoint.clone(),
            status: record.status,
            sub_status: record.sub_status.clone(),
        })
    }
}

/// Notes for a resubmit or skip of an event that is not blocking its
/// session: allowed (an operator may have reasons), but worth saying.
/// `when_parked` is what the operation does to an event parked (Deferred)
/// behind its session's block.
fn rerun_notes(record: &EventRecord, consequence: &str, when_parked: &str) -> Vec<String> {
    let status = record.status;
    let note = match status {
        Status::Completed | Status::Skipped => Some(format!(
            "event '{}' is already {status} at '{}': {consequence}",
            record.event_id, record.endpoint
        )),
        Status::Pending if record.sub_status.as_deref() == Some(HANDOFF_SUB_STATUS) => {
            Some(format!(
                "event '{}' is pending a handoff at '{}': its external job may still complete; {consequence}",
                record.event_id, record.endpoint
            ))
        }
        Status::Deferred => Some(format!(
            "event '{}' is parked (Deferred) at '{}' behind earlier events of its session: {when_parked}",
            record.event_id, record.endpoint
        )),
        Status::Pending => Some(format!(
            "event '{}' is {status} at '{}' (not yet settled): {consequence}",
            record.event_id, record.endpoint
        )),
        Status::Failed | Status::Unsupported | Status::DeadLettered => None,
    };
    note.into_iter().collect()
}

/// The event as the endpoint received it, rebuilt from the store: what the
/// wire builders take to address a control message. A record rebuilt from
/// an earlier build's session state lacks the type and the request's id:
/// a skip or a handoff needs neither (the engine checks them only where a
/// handler runs), and `resubmit` refuses it before this.
fn received_event(found: &Found) -> Result<NimbusMessage, ManagerError> {
    let record = &found.record;
    let missing = |field| ManagerError::MissingCoordinate {
        event_id: record.event_id.clone(),
        endpoint: record.endpoint.clone(),
        field,
    };
    let required = |value: &Option<String>, field| match value {
        None if found.rebuilt_note.is_none() => Err(missing(field)),
        value => Ok(value.clone()),
    };
    let session_id = record
        .session_id
        .clone()
        .ok_or_else(|| missing("SessionId"))?;
    let event_type = required(&record.event_type, "EventTypeId")?;
    let request_message_id = required(
        &record.request_message_id,
        "request MessageId (for ParentMessageId)",
    )?;
    let content = record
        .payload
        .as_ref()
        .zip(event_type.as_ref())
        .map(|(payload, event_type)| {
            MessageContent::event(EventContent::new(event_type.clone(), payload.clone()))
        });
    // What the store wrote itself; unreadable, the event still runs again,
    // without them, and the log says so.
    let properties = match record
        .properties
        .as_deref()
        .map(nimbus_wire::user_properties::from_json)
    {
        Some(Ok(properties)) => properties,
        Some(Err(error)) => {
            tracing::warn!(
                event_id = %record.event_id,
                endpoint = %record.endpoint,
                %error,
                "manager: the event's recorded user properties are unreadable; sending it without them"
            );
            Default::default()
        }
        None => Default::default(),
    };
    Ok(NimbusMessage {
        message_id: request_message_id,
        session_id: Some(session_id),
        correlation_id: record.correlation_id.clone(),
        to: Some(record.endpoint.clone()),
        from: record.request_from.clone(),
        message_type: MessageType::EventRequest,
        event_id: Some(record.event_id.clone()),
        event_type_id: event_type,
        originating_message_id: record.originating_message_id.clone(),
        originating_from: record.originating_from.clone(),
        content,
        properties,
        ..NimbusMessage::default()
    })
}
