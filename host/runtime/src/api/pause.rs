//! `GET /api/endpoints` and `POST /api/endpoints/{endpoint}/pause|resume`:
//! which endpoints an operator paused, and the switch. A paused endpoint's
//! processor takes no session; its events wait in its queue (decision
//! 0126).

use axum::Json;
use axum::extract::{Path, State};
use serde::Serialize;

use crate::PauseState;
use crate::api::endpoints::known_endpoints;
use crate::api::{ApiError, ApiState};

/// One endpoint in `GET /api/endpoints`.
#[derive(Debug, Serialize)]
pub(crate) struct EndpointPause {
    endpoint: String,
    paused: bool,
    paused_since_ms: Option<i64>,
}

pub(crate) async fn list(
    State(state): State<ApiState>,
) -> Result<Json<Vec<EndpointPause>>, ApiError> {
    let endpoints = known_endpoints(&state).await?;
    Ok(Json(
        endpoints
            .into_iter()
            .map(|endpoint| {
                let paused_since_ms = state.pauses.paused_since(&endpoint);
                EndpointPause {
                    paused: paused_since_ms.is_some(),
                    paused_since_ms,
                    endpoint,
                }
            })
            .collect(),
    ))
}

pub(crate) async fn pause(
    State(state): State<ApiState>,
    Path(endpoint): Path<String>,
) -> Result<Json<PauseState>, ApiError> {
    set(&state, &endpoint, true).await
}

pub(crate) async fn resume(
    State(state): State<ApiState>,
    Path(endpoint): Path<String>,
) -> Result<Json<PauseState>, ApiError> {
    set(&state, &endpoint, false).await
}

async fn set(state: &ApiState, named: &str, paused: bool) -> Result<Json<PauseState>, ApiError> {
    let known = known_endpoints(state).await?;
    // Endpoint names are unique ignoring case: the switch is keyed by the
    // name the endpoint runs under.
    let Some(endpoint) = known.iter().find(|e| e.eq_ignore_ascii_case(named)) else {
        return Err(ApiError::not_found(format!(
            "there is no endpoint '{named}' (known: {})",
            if known.is_empty() {
                "none".to_owned()
            } else {
                known.join(", ")
            }
        )));
    };
    let changed = state
        .pauses
        .set(endpoint, paused)
        .map_err(|e| ApiError::internal(format!("{e:#}")))?;
    if changed.changed {
        tracing::warn!(
            endpoint = %endpoint,
            "{}",
            if paused {
                "endpoint paused by an operator: it takes no sessions; its events wait in its queue"
            } else {
                "endpoint resumed by an operator"
            }
        );
    }
    Ok(Json(changed))
}
