//! `GET /api/sessions`: each endpoint's sessions with their state, so an
//! operator sees which event blocks a session and how much is parked.

use axum::Json;
use axum::extract::State;
use nimbus_transport::{Admin as _, AdminError, SessionInfo, SubscriptionPath};
use nimbus_wire::SessionState;
use serde::{Deserialize, Serialize};

use crate::api::body::{ApiQuery, given};
use crate::api::endpoints::known_endpoints;
use crate::api::{ApiError, ApiState};

/// Filters.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SessionsQuery {
    endpoint: Option<String>,
    /// Only sessions blocked by an event.
    #[serde(default)]
    blocked: Option<bool>,
}

/// One session of one endpoint.
#[derive(Debug, Serialize, PartialEq)]
pub(crate) struct SessionView {
    endpoint: String,
    session_id: String,
    /// The event that blocks the session (its owner: resubmit or skip it to
    /// unblock), or `None`.
    blocked_by: Option<String>,
    /// The blocker's status as the Resolver shows it (`Failed`: resubmit
    /// or skip it; `Pending/Handoff`: an external job has it), when known.
    blocker_status: Option<String>,
    /// Whether the block waits for a scheduled retry (`false`: its owner's
    /// retries are spent, or no policy applies, so an operator must act);
    /// `None` when not blocked by a failure this build recorded.
    awaits_retry: Option<bool>,
    /// When that retry is due (ISO 8601 UTC).
    retry_at: Option<String>,
    /// How many events are parked behind the block.
    parked: u32,
    /// Parked events the operator already settled (skipped, or resubmitted
    /// out of turn): their parked copies, counted in `parked`, are dropped
    /// without running when the session replays (decision 0110).
    settled_while_parked: Vec<String>,
    /// Messages in the endpoint's subscription for this session.
    active_messages: u64,
    /// Whether a session processor holds the session now.
    locked: bool,
    /// Set when the state blob is not NimBus session state (shown raw).
    #[serde(skip_serializing_if = "Option::is_none")]
    state_error: Option<String>,
}

impl SessionView {
    fn new(endpoint: &str, info: SessionInfo) -> SessionView {
        let (state, state_error) = match info.state.as_deref() {
            None | Some([]) => (SessionState::default(), None),
            Some(blob) => match SessionState::from_bytes(blob) {
                Ok(state) => (state, None),
                Err(e) => (
                    SessionState::default(),
                    Some(format!("{e}: {}", String::from_utf8_lossy(blob))),
                ),
            },
        };
        SessionView {
            endpoint: endpoint.to_owned(),
            session_id: info.session_id,
            blocked_by: state.blocked_by().map(str::to_owned),
            blocker_status: None,
            awaits_retry: state.awaits_retry(),
            retry_at: state.retry_at().map(nimbus_wire::format_round_trip),
            parked: state.deferred_count,
            settled_while_parked: state
                .settled_parked_events
                .into_iter()
                .map(|settled| settled.event_id)
                .collect(),
            active_messages: info.active_messages,
            locked: info.locked,
            state_error,
        }
    }
}

pub(crate) async fn list(
    State(state): State<ApiState>,
    ApiQuery(query): ApiQuery<SessionsQuery>,
) -> Result<Json<Vec<SessionView>>, ApiError> {
    let endpoints = match given(query.endpoint) {
        Some(endpoint) => vec![endpoint],
        None => known_endpoints(&state).await?,
    };
    let only_blocked = query.blocked.unwrap_or(false);
    let mut sessions = Vec::new();
    for endpoint in endpoints {
        let path = SubscriptionPath::new(endpoint.as_str(), endpoint.as_str());
        let listed = state.bus.list_sessions(&path).await.map_err(|e| match e {
            AdminError::NotFound { .. } => {
                ApiError::not_found(format!("no endpoint '{endpoint}' (no subscription {path})"))
            }
            unsupported @ AdminError::Unsupported { .. } => {
                ApiError::not_implemented(unsupported.to_string())
            }
            other => ApiError::internal(format!("listing the sessions of {path}: {other}")),
        })?;
        sessions.extend(
            listed
                .into_iter()
                .map(|info| SessionView::new(&endpoint, info))
                .filter(|s| !only_blocked || s.blocked_by.is_some()),
        );
    }
    // Why each session is blocked: a failure the operator must act on, or
    // a handoff an external job will settle. One read for every blocker.
    let blockers: Vec<(String, String)> = sessions
        .iter()
        .filter_map(|s| Some((s.endpoint.clone(), s.blocked_by.clone()?)))
        .collect();
    if !blockers.is_empty() {
        let statuses = state
            .read_store(move |store| store.statuses(&blockers))
            .await?;
        for session in &mut sessions {
            let Some(blocker) = &session.blocked_by else {
                continue;
            };
            session.blocker_status = statuses
                .get(&(session.endpoint.clone(), blocker.clone()))
                .map(|known| match &known.sub_status {
                    Some(sub) => format!("{}/{sub}", known.status),
                    None => known.status.to_string(),
                });
        }
    }
    Ok(Json(sessions))
}
