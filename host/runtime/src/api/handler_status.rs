//! `GET /api/handlers`: what the registry serves now.

use std::time::SystemTime;

use axum::Json;
use axum::extract::State;
use serde::Serialize;

use crate::api::{ApiError, ApiState};

/// Every handler and what is wrong in the handlers directory.
#[derive(Debug, Serialize)]
pub(crate) struct HandlersView {
    /// Increases with every change the registry saw.
    generation: u64,
    handlers: Vec<HandlerView>,
    /// Problems with the directory layout itself (not one handler's).
    problems: Vec<String>,
}

/// One handler.
#[derive(Debug, Serialize)]
pub(crate) struct HandlerView {
    endpoint: String,
    handler: String,
    path: String,
    /// `serving`, `serving-previous` (a newer file failed to load),
    /// `removing` (its file was deleted; see `removing_at`) or `failed` (no
    /// version of it loaded).
    status: &'static str,
    /// The SHA-256 digest (hex) of the version serving, if any loaded; the
    /// same text the Resolver records as an event's handler version.
    version: Option<String>,
    event_types: Vec<String>,
    /// When the serving version was swapped in (RFC 3339).
    last_swap: Option<String>,
    swaps: u64,
    /// Why the last load failed; the version before it keeps serving.
    load_error: Option<String>,
    /// Its file was deleted: it serves until then, and is unregistered
    /// unless a file for it comes back first (RFC 3339).
    #[serde(skip_serializing_if = "Option::is_none")]
    removing_at: Option<String>,
}

fn rfc3339(at: SystemTime) -> String {
    humantime::format_rfc3339_millis(at).to_string()
}

pub(crate) async fn list(State(state): State<ApiState>) -> Result<Json<HandlersView>, ApiError> {
    let snapshot = state.registry.snapshot();
    let handlers = snapshot
        .handlers()
        .map(|h| HandlerView {
            endpoint: h.key.endpoint.clone(),
            handler: h.key.handler.clone(),
            path: h.path.display().to_string(),
            status: h.state(),
            version: h.serving.as_ref().map(|v| v.id().to_owned()),
            event_types: h
                .serving
                .as_ref()
                .map(|v| v.event_types().to_vec())
                .unwrap_or_default(),
            last_swap: h.last_swap.map(rfc3339),
            swaps: h.swaps,
            load_error: h.last_error.clone(),
            removing_at: h.removing_at.map(rfc3339),
        })
        .collect();
    Ok(Json(HandlersView {
        generation: snapshot.generation(),
        handlers,
        problems: snapshot.problems().to_vec(),
    }))
}
