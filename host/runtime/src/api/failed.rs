//! `POST /api/failed/resubmit` and `POST /api/failed/skip`: every Failed
//! event a selection names, at once, through the Manager (one control
//! message per event). What an operator runs once a downstream outage is
//! over and many sessions are blocked; `dry_run` shows what would be sent.

use std::collections::BTreeSet;

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use nimbus_manager::{BulkAction, BulkOutcome, BulkSelection};
use serde::{Deserialize, Serialize};

use crate::api::body::{given, json};
use crate::api::{ApiError, ApiState};

/// The request body: which Failed events, and whether only to look.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FailedRequest {
    endpoint: Option<String>,
    session: Option<String>,
    event_type: Option<String>,
    error_type: Option<String>,
    /// A duration (`10m`, `2h`): only events whose status has not changed
    /// for at least this long.
    not_updated_for: Option<String>,
    #[serde(default)]
    include_awaiting_retry: bool,
    limit: Option<usize>,
    #[serde(default)]
    dry_run: bool,
}

/// The answer: the Manager's outcome, and notes for the operator.
#[derive(Debug, Serialize)]
pub(crate) struct FailedResponse {
    #[serde(flatten)]
    outcome: BulkOutcome,
    notes: Vec<String>,
}

pub(crate) async fn resubmit(
    State(state): State<ApiState>,
    body: Bytes,
) -> Result<Json<FailedResponse>, ApiError> {
    act(state, BulkAction::Resubmit, &body).await
}

pub(crate) async fn skip(
    State(state): State<ApiState>,
    body: Bytes,
) -> Result<Json<FailedResponse>, ApiError> {
    act(state, BulkAction::Skip, &body).await
}

async fn act(
    state: ApiState,
    action: BulkAction,
    body: &Bytes,
) -> Result<Json<FailedResponse>, ApiError> {
    let request: FailedRequest = json(body, true)?;
    let not_updated_for = given(request.not_updated_for)
        .map(|text| {
            humantime::parse_duration(text.trim()).map_err(|e| {
                ApiError::bad_request(format!(
                    "not_updated_for: '{text}' is not a duration such as 10m or 2h: {e}"
                ))
            })
        })
        .transpose()?;
    let selection = BulkSelection {
        endpoint: given(request.endpoint),
        session_id: given(request.session),
        event_type: given(request.event_type),
        error_type: given(request.error_type),
        not_updated_for,
        include_awaiting_retry: request.include_awaiting_retry,
        limit: Some(crate::api::body::limit(
            request.limit,
            nimbus_manager::DEFAULT_BULK_LIMIT,
        )?),
        dry_run: request.dry_run,
    };
    let outcome = state.manager.act_on_failed(action, &selection).await?;
    let notes = match action {
        BulkAction::Resubmit => no_handler_notes(&state, &outcome),
        BulkAction::Skip => Vec::new(),
    };
    Ok(Json(FailedResponse { outcome, notes }))
}

/// One note per endpoint and event type among the chosen events that no
/// loaded handler serves now: resubmitting those fails them again.
fn no_handler_notes(state: &ApiState, outcome: &BulkOutcome) -> Vec<String> {
    let kinds: BTreeSet<(&str, &str)> = outcome
        .chosen
        .iter()
        .filter_map(|c| Some((c.endpoint.as_str(), c.event_type.as_deref()?)))
        .collect();
    kinds
        .into_iter()
        .filter(|(endpoint, event_type)| state.registry.lookup(endpoint, event_type).is_none())
        .map(|(endpoint, event_type)| {
            format!(
                "no handler at '{endpoint}' serves {event_type} now (`nimbus handlers`): its \
                 resubmissions will not run, and their sessions stay blocked; fix or drop in \
                 the handler, then resubmit"
            )
        })
        .collect()
}
