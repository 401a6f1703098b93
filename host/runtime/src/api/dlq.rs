//! Dead letters: list an endpoint's, replay one or all.

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use nimbus_manager::{DeadLetter, DeadLetterId, ManagerError};
use serde::{Deserialize, Serialize};

use crate::api::body::{ApiQuery, given, json};
use crate::api::{ApiError, ApiState};

/// Filters.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct DlqQuery {
    endpoint: Option<String>,
    limit: Option<usize>,
}

pub(crate) async fn list(
    State(state): State<ApiState>,
    ApiQuery(query): ApiQuery<DlqQuery>,
) -> Result<Json<Vec<DeadLetter>>, ApiError> {
    let endpoints = match given(query.endpoint) {
        Some(endpoint) => vec![endpoint],
        None => state
            .registry
            .snapshot()
            .endpoints()
            .map(str::to_owned)
            .collect(),
    };
    let mut listed = Vec::new();
    for endpoint in endpoints {
        listed.extend(state.manager.dead_letters(&endpoint, query.limit).await?);
    }
    Ok(Json(listed))
}

/// `POST /api/dlq/replay`: one message (by sequence number or message id)
/// or every dead-lettered message of the endpoint.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ReplayRequest {
    endpoint: Option<String>,
    /// `E` (the endpoint's own queue) or `Resolver`; needed only when the
    /// message is in both.
    subscription: Option<String>,
    sequence_number: Option<i64>,
    message_id: Option<String>,
    #[serde(default)]
    all: bool,
    /// Replay even a message whose event has since been Completed or
    /// Skipped (it runs again).
    #[serde(default)]
    force: bool,
}

/// What was moved back, and (with `all`) what was left because its event
/// has since been settled.
#[derive(Debug, Serialize)]
pub(crate) struct ReplayedView {
    replayed: Vec<DeadLetter>,
    left: Vec<LeftView>,
}

/// A dead-lettered message left where it is, and why.
#[derive(Debug, Serialize)]
pub(crate) struct LeftView {
    message: DeadLetter,
    why: String,
}

pub(crate) async fn replay(
    State(state): State<ApiState>,
    body: Bytes,
) -> Result<Json<ReplayedView>, ApiError> {
    let request: ReplayRequest = json(&body, false)?;
    let Some(endpoint) = given(request.endpoint) else {
        return Err(ApiError::bad_request("endpoint is missing"));
    };
    let subscription = given(request.subscription);
    if let Some(subscription) = &subscription {
        nimbus_manager::check_dead_letter_queue(&endpoint, subscription)?;
    }
    let which = match (
        request.sequence_number,
        given(request.message_id),
        request.all,
    ) {
        (Some(n), None, false) => Some(DeadLetterId::SequenceNumber(n)),
        (None, Some(id), false) => Some(DeadLetterId::MessageId(id)),
        (None, None, true) => None,
        _ => {
            return Err(ApiError::bad_request(
                "name exactly one of sequence_number, message_id or all: true",
            ));
        }
    };
    let mut replayed = Vec::new();
    let mut left = Vec::new();
    match which {
        Some(which) => {
            let done = state
                .manager
                .replay_dead_letter(&endpoint, subscription.as_deref(), &which, request.force)
                .await?;
            replayed.push(done.message);
        }
        None => {
            let listed = state.manager.dead_letters(&endpoint, None).await?;
            for message in listed {
                if subscription
                    .as_deref()
                    .is_some_and(|s| s != message.subscription)
                {
                    continue;
                }
                let which = DeadLetterId::SequenceNumber(message.sequence_number);
                let done = state
                    .manager
                    .replay_dead_letter(
                        &endpoint,
                        Some(message.subscription.as_str()),
                        &which,
                        request.force,
                    )
                    .await;
                match done {
                    Ok(done) => replayed.push(done.message),
                    Err(settled @ ManagerError::EventAlreadySettled { .. }) => {
                        left.push(LeftView {
                            message,
                            why: settled.to_string(),
                        })
                    }
                    Err(other) => return Err(other.into()),
                }
            }
        }
    }
    Ok(Json(ReplayedView { replayed, left }))
}
