//! Dead letters: list an endpoint's, replay one or all, remove one or those
//! of settled events.

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue};
use nimbus_manager::{DeadLetter, DeadLetterId, ManagerError};
use serde::{Deserialize, Serialize};

use crate::api::body::{ApiQuery, given, json};
use crate::api::endpoints::known_topics;
use crate::api::events::TRUNCATED_HEADER;
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
) -> Result<(HeaderMap, Json<Vec<DeadLetter>>), ApiError> {
    let limit = crate::api::body::limit(query.limit, nimbus_manager::DEFAULT_DEAD_LETTER_LIMIT)?;
    let only = given(query.endpoint);
    let filtered = only.is_some();
    let endpoints = match only {
        Some(endpoint) => vec![endpoint],
        None => {
            // The endpoints, then the producers' topics (what their
            // forwarders could not forward).
            let mut all = known_topics(&state).await?;
            // Last: what the Resolver could not record.
            all.push(nimbus_wire::addr::RESOLVER.to_owned());
            all
        }
    };
    // The limit caps each endpoint's listing, not the whole: one busy
    // endpoint must not hide every endpoint after it in the listing.
    let mut listed = Vec::new();
    let mut truncated = Vec::new();
    for endpoint in endpoints {
        // One more than the limit tells "exactly the limit" from "more".
        let read = state
            .manager
            .dead_letters(&endpoint, Some(limit.saturating_add(1)))
            .await;
        let mut held = match read {
            Ok(held) => held,
            // Unfiltered, a topic not (or no longer) on the broker has
            // nothing to list: an endpoint added a moment ago, a producer
            // nothing provisioned.
            Err(ManagerError::UnknownEndpoint { .. }) if !filtered => continue,
            Err(e) => return Err(e.into()),
        };
        if held.len() > limit {
            held.truncate(limit);
            truncated.push(endpoint);
        }
        listed.extend(held);
    }
    let mut headers = HeaderMap::new();
    // The body stays a plain array (what scripts already read); which
    // endpoints have more than they show travels beside it. Endpoint names
    // are plain ASCII (the broker's entity names), so the value is valid.
    if !truncated.is_empty()
        && let Ok(value) = HeaderValue::from_str(&truncated.join(", "))
    {
        headers.insert(TRUNCATED_HEADER, value);
    }
    Ok((headers, Json(listed)))
}

/// `POST /api/dlq/replay`: one message (by sequence number or message id)
/// or every dead-lettered message of the endpoint.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ReplayRequest {
    endpoint: Option<String>,
    /// `E` (the endpoint's own queue), `Resolver`, `Deferred`,
    /// `DeferredProcessor` or a forwarder (refused: publish again); needed
    /// only when the message is in more than one.
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
    /// Why an `all` pass stopped before the end (what it moved until then
    /// is in `replayed`).
    #[serde(skip_serializing_if = "Option::is_none")]
    stopped: Option<String>,
}

/// A dead-lettered message left where it is, and why.
#[derive(Debug, Serialize)]
pub(crate) struct LeftView {
    message: DeadLetter,
    why: String,
    /// `why` for programs. A replay leaves `settled` and `not_recorded`
    /// (forcing replays it), `replayed_in_this_pass` and `parked_copy` (a
    /// parked event: resubmit or skip it); a removal keeps
    /// `still_needed` (its event is not settled, or it is the Resolver's
    /// copy); either leaves `lock_lost` (another pass may move it).
    reason: &'static str,
}

/// The kind of `why`, so a client need not parse the text.
fn reason(why: &ManagerError) -> &'static str {
    match why {
        ManagerError::EventAlreadySettled { .. } => "settled",
        ManagerError::EventNotRecorded { .. } => "not_recorded",
        ManagerError::SeenInThisPass { .. } => "replayed_in_this_pass",
        ManagerError::Replay { .. } | ManagerError::Remove { .. } => "lock_lost",
        ManagerError::DeadLetterStillNeeded { .. } => "still_needed",
        ManagerError::NotReplayable { .. } => "parked_copy",
        ManagerError::NotForwarded { .. } => "not_forwarded",
        _ => "other",
    }
}

/// Which dead letters a replay or removal is about: one named message, or
/// (`which` is `None`) the whole pass the request's own flag (`all`,
/// `settled`) asks for.
struct Target {
    endpoint: String,
    subscription: Option<String>,
    which: Option<DeadLetterId>,
}

impl Target {
    fn of(
        endpoint: Option<String>,
        subscription: Option<String>,
        sequence_number: Option<i64>,
        message_id: Option<String>,
        (whole_field, whole): (&str, bool),
    ) -> Result<Target, ApiError> {
        let Some(endpoint) = given(endpoint) else {
            return Err(ApiError::bad_request("endpoint is missing"));
        };
        // The Manager checks the name: besides the endpoint's own queues it
        // may be one of its topic's forwarders, which it looks up.
        let subscription = given(subscription);
        let which = match (sequence_number, given(message_id), whole) {
            (Some(n), None, false) => Some(DeadLetterId::SequenceNumber(n)),
            (None, Some(id), false) => Some(DeadLetterId::MessageId(id)),
            (None, None, true) => None,
            _ => {
                return Err(ApiError::bad_request(format!(
                    "name exactly one of sequence_number, message_id or {whole_field}: true"
                )));
            }
        };
        Ok(Target {
            endpoint,
            subscription,
            which,
        })
    }
}

/// The messages a whole pass left where they were, each with why.
fn left_views(left: Vec<(DeadLetter, ManagerError)>) -> Vec<LeftView> {
    left.into_iter()
        .map(|(message, why)| LeftView {
            message,
            reason: reason(&why),
            why: why.to_string(),
        })
        .collect()
}

pub(crate) async fn replay(
    State(state): State<ApiState>,
    body: Bytes,
) -> Result<Json<ReplayedView>, ApiError> {
    let request: ReplayRequest = json(&body, false)?;
    let Target {
        endpoint,
        subscription,
        which,
    } = Target::of(
        request.endpoint,
        request.subscription,
        request.sequence_number,
        request.message_id,
        ("all", request.all),
    )?;
    let view = match which {
        Some(which) => {
            let done = state
                .manager
                .replay_dead_letter(&endpoint, subscription.as_deref(), &which, request.force)
                .await?;
            ReplayedView {
                replayed: vec![done.message],
                left: Vec::new(),
                stopped: None,
            }
        }
        None => {
            let done = state
                .manager
                .replay_all_dead_letters(&endpoint, subscription.as_deref(), request.force)
                .await?;
            if let Some(stopped) = &done.stopped {
                tracing::warn!(%endpoint, error = %stopped, replayed = done.replayed.len(), "dlq replay --all stopped part-way");
            }
            ReplayedView {
                replayed: done.replayed,
                left: left_views(done.left),
                stopped: done.stopped.map(|e| e.to_string()),
            }
        }
    };
    Ok(Json(view))
}

/// `POST /api/dlq/remove`: one message (by sequence number or message id),
/// or with `settled: true` every message of the endpoint's own queue whose
/// event has since been Completed or Skipped.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RemoveRequest {
    endpoint: Option<String>,
    /// `E` (the endpoint's own queue), `Resolver`, `Deferred`,
    /// `DeferredProcessor` or a forwarder of the endpoint's topic (named
    /// after its consumer); needed only when the message is in more than
    /// one.
    subscription: Option<String>,
    sequence_number: Option<i64>,
    message_id: Option<String>,
    #[serde(default)]
    settled: bool,
    /// Remove a message even if its event is not settled (one message
    /// only).
    #[serde(default)]
    force: bool,
}

/// What was removed, and (with `settled`) what was kept and why.
#[derive(Debug, Serialize)]
pub(crate) struct RemovedView {
    removed: Vec<DeadLetter>,
    kept: Vec<LeftView>,
    /// Why a `settled` pass stopped before the end (what it removed until
    /// then is in `removed`).
    #[serde(skip_serializing_if = "Option::is_none")]
    stopped: Option<String>,
}

pub(crate) async fn remove(
    State(state): State<ApiState>,
    body: Bytes,
) -> Result<Json<RemovedView>, ApiError> {
    let request: RemoveRequest = json(&body, false)?;
    let Target {
        endpoint,
        subscription,
        which,
    } = Target::of(
        request.endpoint,
        request.subscription,
        request.sequence_number,
        request.message_id,
        ("settled", request.settled),
    )?;
    let view = match which {
        Some(which) => {
            let removed = state
                .manager
                .remove_dead_letter(&endpoint, subscription.as_deref(), &which, request.force)
                .await?;
            RemovedView {
                removed: vec![removed],
                kept: Vec::new(),
                stopped: None,
            }
        }
        None => {
            if request.force {
                return Err(ApiError::bad_request(
                    "force removes one named message; settled: true removes only what is settled",
                ));
            }
            if subscription.is_some() {
                return Err(ApiError::bad_request(format!(
                    "settled: true reads the endpoint's own queue ('{endpoint}'), 'Deferred' and \
                     'DeferredProcessor', and names no subscription; a message of the \
                     Resolver's is removed by name, with force"
                )));
            }
            let done = state.manager.remove_settled_dead_letters(&endpoint).await?;
            if let Some(stopped) = &done.stopped {
                tracing::warn!(%endpoint, error = %stopped, removed = done.removed.len(), "dlq remove --settled stopped part-way");
            }
            RemovedView {
                removed: done.removed,
                kept: left_views(done.kept),
                stopped: done.stopped.map(|e| e.to_string()),
            }
        }
    };
    Ok(Json(view))
}
