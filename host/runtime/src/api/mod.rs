//! The operator HTTP API: JSON in and out, built in one function
//! ([`router`]) that `nimbus run` serves and tests drive in-process
//! (STYLE habit 18).
//!
//! Every route is a thin adapter over a part that already exists: publishes
//! go through the wire builder to a producer topic, reads come from the
//! Resolver store, operator operations go through the Manager as control
//! messages, session listings come from the transport's `Admin`. Errors
//! split in two (decision 0080): bad input is a 4xx whose `{"error": ...}`
//! names the problem and is not logged as an error; an internal failure is
//! a generic 5xx, logged with its cause by the middleware and never shown.
//!
//! Before any route, the guard ([`guard`]) refuses what a web page or a
//! stranger could send: a `Host` or `Origin` that is not this API's, a
//! body that is not `application/json`, a missing token when one is set
//! (decision 0131). Every request is bounded in time ([`timeout`]), every
//! connection in idle time ([`serve`]), every listing in length
//! ([`MAX_LIMIT`]).

mod body;
mod dlq;
mod endpoints;
mod error;
mod events;
mod failed;
mod guard;
mod handler_status;
mod health;
mod metrics;
mod pause;
mod publish;
mod server;
mod sessions;
mod state;
mod timeout;

#[cfg(test)]
mod tests;

use axum::Router;
use axum::routing::{get, post};

pub use error::ApiError;
pub use events::TRUNCATED_HEADER;
pub use server::serve;
pub use state::ApiState;

/// The largest request body the API takes: a published event's data, an
/// edited payload or handoff details, with the JSON around them.
pub const MAX_REQUEST_BODY: usize = 2 * 1024 * 1024;

/// The largest `limit` a listing takes (`/api/events`, `/api/dlq`,
/// `/api/failed/*`), which is also their default: a larger one is refused
/// naming `limit`, so a few parallel listings cannot take the host's
/// memory.
pub const MAX_LIMIT: usize = 1000;

/// The API's routes over `state`, behind its guard and request timeout.
pub fn router(state: ApiState) -> Router {
    let guard = std::sync::Arc::clone(&state.guard);
    let request_timeout = state.request_timeout;
    let bus = std::sync::Arc::clone(&state.bus);
    Router::new()
        .route("/health", get(health::health))
        .route("/api/publish", post(publish::publish))
        .route("/api/events", get(events::list))
        .route("/api/events/{event_id}", get(events::detail))
        .route("/api/events/{event_id}/resubmit", post(events::resubmit))
        .route("/api/events/{event_id}/skip", post(events::skip))
        .route(
            "/api/events/{event_id}/handoff/complete",
            post(events::complete_handoff),
        )
        .route(
            "/api/events/{event_id}/handoff/fail",
            post(events::fail_handoff),
        )
        .route("/api/failed/resubmit", post(failed::resubmit))
        .route("/api/failed/skip", post(failed::skip))
        .route("/api/endpoints", get(pause::list))
        .route("/api/endpoints/{endpoint}/pause", post(pause::pause))
        .route("/api/endpoints/{endpoint}/resume", post(pause::resume))
        .route("/api/sessions", get(sessions::list))
        .route("/api/dlq", get(dlq::list))
        .route("/api/dlq/replay", post(dlq::replay))
        .route("/api/dlq/remove", post(dlq::remove))
        .route("/api/handlers", get(handler_status::list))
        .route("/metrics", get(metrics::metrics))
        .fallback(error::not_found)
        .method_not_allowed_fallback(error::method_not_allowed)
        .layer(axum::middleware::from_fn_with_state(
            request_timeout,
            timeout::limit,
        ))
        .layer(axum::middleware::from_fn_with_state(
            bus,
            health::unavailable_while_unwritable,
        ))
        .layer(axum::middleware::from_fn_with_state(guard, guard::check))
        .layer(axum::middleware::from_fn_with_state(
            std::sync::Arc::new(error::ServerErrorLog::default()),
            error::log_internal_errors,
        ))
        .layer(axum::extract::DefaultBodyLimit::max(MAX_REQUEST_BODY))
        .with_state(state)
}
