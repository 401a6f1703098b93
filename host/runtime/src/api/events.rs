//! Events: the Resolver's records, and the operator operations on one
//! event (resubmit, skip, complete or fail its handoff) through the Manager.

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue};
use nimbus_manager::{ManagerError, Sent};
use nimbus_resolver::{
    EventDetail, EventFilter, EventRecord, HANDOFF_SUB_STATUS, ResolverStore as _, Status,
};
use nimbus_transport::{Admin as _, AdminError, SubscriptionPath};
use nimbus_wire::SessionState;
use serde::{Deserialize, Serialize};

use nimbus_engine::Retrying;
use nimbus_sandbox::Snapshot;

use crate::api::body::{self, ApiQuery, given, json};
use crate::api::{ApiError, ApiState};
use crate::config::Retention;

/// The most records one listing returns when the caller sets no limit.
const DEFAULT_LIMIT: usize = 1000;

/// The response header saying a listing was cut at its limit while more
/// matched: on `/api/events`, `true`; on `/api/dlq`, the endpoints (comma
/// separated) that have more dead letters than listed. A header, so the
/// body stays the plain JSON array scripts already read.
pub const TRUNCATED_HEADER: &str = "x-nimbus-truncated";

/// `GET /api/events` filters.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct EventsQuery {
    endpoint: Option<String>,
    status: Option<String>,
    session: Option<String>,
    limit: Option<usize>,
}

/// One listed event: its record; while this host delivers it again after
/// a transient failure, that failure; and for a `Pending` event at an
/// endpoint where no handler serves, why it waits.
#[derive(Debug, Serialize)]
pub(crate) struct ListedEvent {
    #[serde(flatten)]
    record: EventRecord,
    #[serde(skip_serializing_if = "Option::is_none")]
    transient_failure: Option<TransientFailureView>,
    #[serde(skip_serializing_if = "Option::is_none")]
    waiting_for_handler: Option<String>,
    /// Since when its endpoint is paused (milliseconds since the Unix
    /// epoch), while it is: nothing of the endpoint runs until resumed.
    #[serde(skip_serializing_if = "Option::is_none")]
    endpoint_paused_since_ms: Option<i64>,
}

pub(crate) async fn list(
    State(state): State<ApiState>,
    ApiQuery(query): ApiQuery<EventsQuery>,
) -> Result<(HeaderMap, Json<Vec<ListedEvent>>), ApiError> {
    let (status, sub_status) = match given(query.status) {
        None => (None, None),
        Some(asked) => {
            let (status, sub_status) =
                status_filter(&asked).map_err(|e| ApiError::bad_request(format!("status: {e}")))?;
            (Some(status), sub_status)
        }
    };
    let limit = body::limit(query.limit, DEFAULT_LIMIT)?;
    let endpoint = given(query.endpoint);
    let filter = EventFilter {
        endpoint: endpoint.clone(),
        status,
        sub_status,
        session_id: given(query.session),
        // One more than the limit tells "exactly the limit" from "more".
        limit: Some(limit.saturating_add(1)),
    };
    let mut records = state.read_store(move |store| store.events(&filter)).await?;
    let mut headers = HeaderMap::new();
    if records.len() > limit {
        records.truncate(limit);
        headers.insert(TRUNCATED_HEADER, HeaderValue::from_static("true"));
    }
    if records.is_empty()
        && let Some(endpoint) = endpoint
    {
        check_endpoint_exists(&state, &endpoint).await?;
    }
    let handlers = state.registry.snapshot();
    let listed = records
        .into_iter()
        .map(|record| ListedEvent {
            transient_failure: TransientFailureView::of(&state.retrying, &record),
            waiting_for_handler: waiting_for_handler(&handlers, &record),
            endpoint_paused_since_ms: state.pauses.paused_since(&record.endpoint),
            record,
        })
        .collect();
    Ok((headers, Json(listed)))
}

/// Why a `Pending` event is not running, when no handler at its endpoint
/// serves now: its file does not load (with the load error), or none is
/// installed. The event waits in the endpoint's queue until one does.
fn waiting_for_handler(handlers: &Snapshot, record: &EventRecord) -> Option<String> {
    if record.status != Status::Pending || record.sub_status.is_some() {
        return None;
    }
    if handlers.endpoint_runs(&record.endpoint) {
        return None;
    }
    let errors: Vec<&str> = handlers
        .handlers()
        .filter(|h| h.key.endpoint == record.endpoint)
        .filter_map(|h| h.last_error.as_deref())
        .collect();
    Some(if errors.is_empty() {
        format!(
            "no handler is installed at '{}': the event waits in its queue until one is",
            record.endpoint
        )
    } else {
        format!(
            "no handler at '{}' loads ({}): the event waits in its queue until one does",
            record.endpoint,
            errors.join("; ")
        )
    })
}

/// A status filter as the table shows statuses: a status, or
/// `Pending/Handoff` (also `Handoff`) for the events waiting on an external
/// job, which `nimbus events` shows as `Pending/Handoff`.
fn status_filter(asked: &str) -> Result<(Status, Option<String>), String> {
    let handoff = format!("Pending/{HANDOFF_SUB_STATUS}");
    if asked.eq_ignore_ascii_case(&handoff) || asked.eq_ignore_ascii_case(HANDOFF_SUB_STATUS) {
        return Ok((Status::Pending, Some(HANDOFF_SUB_STATUS.to_owned())));
    }
    asked
        .parse::<Status>()
        .map(|status| (status, None))
        .map_err(|e| format!("{e}, or {handoff} for events waiting on a handoff"))
}

/// Tells a mistyped endpoint from one with nothing to list: an endpoint
/// the Resolver has no record of, the registry has no handler file for and
/// the broker has no subscription for is unknown. (One retired since keeps
/// its records, so it lists them.) The registry counts a handler that does
/// not load: `nimbus handlers` lists it, and a host that never served it
/// has no subscription for it yet.
async fn check_endpoint_exists(state: &ApiState, endpoint: &str) -> Result<(), ApiError> {
    if state
        .registry
        .snapshot()
        .handlers()
        .any(|h| h.key.endpoint == endpoint)
    {
        return Ok(());
    }
    let path = SubscriptionPath::new(endpoint, endpoint);
    match state.bus.get_subscription(&path).await {
        Ok(Some(_)) => return Ok(()),
        // Not listed on Service Bus: the records decide.
        Ok(None) | Err(AdminError::NotFound { .. } | AdminError::Unsupported { .. }) => {}
        Err(other) => {
            return Err(ApiError::internal(format!(
                "looking up the subscription {path}: {other}"
            )));
        }
    }
    // A retired endpoint keeps its records: only the other filters
    // matched nothing.
    let any = EventFilter {
        endpoint: Some(endpoint.to_owned()),
        limit: Some(1),
        ..EventFilter::default()
    };
    if !state
        .read_store(move |store| store.events(&any))
        .await?
        .is_empty()
    {
        return Ok(());
    }
    // Endpoint names are the broker's entity names, which ignore case on
    // Service Bus: one differing only in case is what was meant.
    let same_ignoring_case = state
        .registry
        .snapshot()
        .endpoints()
        .find(|known| known.eq_ignore_ascii_case(endpoint))
        .map(|known| format!("; did you mean '{known}'?"))
        .unwrap_or_default();
    Err(ApiError::not_found(format!(
        "no endpoint '{endpoint}' (no handler file, no subscription {path} and no events \
         recorded for it){same_ignoring_case}"
    )))
}

/// One event at every endpoint that has it, or the events of one message.
#[derive(Debug, Serialize)]
pub(crate) struct EventView {
    /// The event; `null` for a message whose events at several endpoints
    /// have different ids (each record names its own).
    event_id: Option<String>,
    /// The message id asked for, when the id named no event but a message
    /// the Resolver recorded.
    #[serde(skip_serializing_if = "Option::is_none")]
    message_id: Option<String>,
    endpoints: Vec<EndpointView>,
}

/// The event at one endpoint: the Resolver's record and history; while
/// this host is delivering it again after a transient failure, that failure
/// (the Resolver is sent nothing for one); and while it blocks its session
/// as `Failed`, whether a retry is scheduled (the session state knows).
#[derive(Debug, Serialize)]
pub(crate) struct EndpointView {
    #[serde(flatten)]
    detail: EventDetail,
    #[serde(skip_serializing_if = "Option::is_none")]
    transient_failure: Option<TransientFailureView>,
    /// Whether its block waits for a scheduled retry (`false`: an operator
    /// must resubmit or skip it); only while it blocks its session.
    #[serde(skip_serializing_if = "Option::is_none")]
    awaits_retry: Option<bool>,
    /// When that retry is due (ISO 8601 UTC).
    #[serde(skip_serializing_if = "Option::is_none")]
    retry_at: Option<String>,
    /// Why a `Pending` event is not running: no handler at its endpoint
    /// serves now (its file does not load, or none is installed), so the
    /// event waits in the endpoint's queue until one does.
    #[serde(skip_serializing_if = "Option::is_none")]
    waiting_for_handler: Option<String>,
    /// Since when its endpoint is paused, while it is.
    #[serde(skip_serializing_if = "Option::is_none")]
    endpoint_paused_since_ms: Option<i64>,
}

/// [`TransientAttempt`] as the API shows it.
#[derive(Debug, Serialize)]
pub(crate) struct TransientFailureView {
    delivery: u32,
    max_deliveries: u32,
    error_type: String,
    error: String,
    failed_at: String,
    next_delivery_after: String,
}

impl TransientFailureView {
    /// The record's event's transient failure in progress, if any. Whatever
    /// the record says: a dead-lettered event replayed from the dead-letter
    /// queue may be failing transiently again.
    fn of(retrying: &Retrying, record: &EventRecord) -> Option<TransientFailureView> {
        retrying
            .of(&record.endpoint, &record.event_id)
            .map(|a| TransientFailureView {
                delivery: a.delivery,
                max_deliveries: a.max_deliveries,
                error_type: a.error_type,
                error: a.error,
                failed_at: humantime::format_rfc3339_millis(a.failed_at).to_string(),
                next_delivery_after: humantime::format_rfc3339_millis(a.next_delivery_after)
                    .to_string(),
            })
    }
}

impl EndpointView {
    fn of(detail: EventDetail, retrying: &Retrying) -> EndpointView {
        EndpointView {
            transient_failure: TransientFailureView::of(retrying, &detail.record),
            detail,
            awaits_retry: None,
            retry_at: None,
            waiting_for_handler: None,
            endpoint_paused_since_ms: None,
        }
    }

    /// Reads, from its session's state, whether the event's block waits for
    /// a retry; for a `Failed` event only.
    async fn add_block_retry(&mut self, state: &ApiState) -> Result<(), ApiError> {
        let record = &self.detail.record;
        let Some(session_id) = record
            .session_id
            .as_deref()
            .filter(|_| record.status == Status::Failed)
        else {
            return Ok(());
        };
        let path = SubscriptionPath::new(record.endpoint.as_str(), record.endpoint.as_str());
        let sessions = match state.bus.list_sessions(&path).await {
            Ok(sessions) => sessions,
            // Not listed on Service Bus: the detail goes without it.
            Err(AdminError::NotFound { .. } | AdminError::Unsupported { .. }) => return Ok(()),
            Err(e) => {
                return Err(ApiError::internal(format!(
                    "listing the sessions of {path}: {e}"
                )));
            }
        };
        let Some(session) = sessions
            .into_iter()
            .filter(|s| s.session_id == session_id)
            .find_map(|s| SessionState::from_bytes(s.state.as_deref()?).ok())
            .filter(|s| s.blocked_by() == Some(record.event_id.as_str()))
        else {
            return Ok(());
        };
        self.awaits_retry = session.awaits_retry();
        self.retry_at = session.retry_at().map(nimbus_wire::format_round_trip);
        Ok(())
    }
}

/// `GET /api/events/{id}`: by event id; failing that, by the id of any
/// message recorded in an event's history (a published message's id, as
/// `nimbus publish` prints it).
pub(crate) async fn detail(
    State(state): State<ApiState>,
    Path(id): Path<String>,
) -> Result<Json<EventView>, ApiError> {
    let key = id.clone();
    let endpoints = state.read_store(move |store| store.event(&key)).await?;
    if !endpoints.is_empty() {
        return Ok(Json(EventView {
            event_id: Some(id),
            message_id: None,
            endpoints: views(&state, endpoints).await?,
        }));
    }
    let key = id.clone();
    let endpoints = state
        .read_store(move |store| store.events_of_message(&key))
        .await?;
    let Some(first) = endpoints.first() else {
        return Err(ApiError::not_found(format!(
            "no event '{id}' is known to the Resolver (nor a message with that id): it may have \
             reached no endpoint (no handler consumed its type when it was published){}",
            pruned_hint(state.retention)
        )));
    };
    let first_id = &first.record.event_id;
    let event_id = endpoints
        .iter()
        .all(|d| &d.record.event_id == first_id)
        .then(|| first_id.clone());
    Ok(Json(EventView {
        event_id,
        message_id: Some(id),
        endpoints: views(&state, endpoints).await?,
    }))
}

/// Each endpoint's record with what the host knows beyond it.
async fn views(state: &ApiState, details: Vec<EventDetail>) -> Result<Vec<EndpointView>, ApiError> {
    let mut views = Vec::with_capacity(details.len());
    let handlers = state.registry.snapshot();
    for detail in details {
        let mut view = EndpointView::of(detail, &state.retrying);
        view.add_block_retry(state).await?;
        view.waiting_for_handler = waiting_for_handler(&handlers, &view.detail.record);
        view.endpoint_paused_since_ms = state.pauses.paused_since(&view.detail.record.endpoint);
        views.push(view);
    }
    Ok(views)
}

/// Why an id the operator saw may be unknown now: the Resolver removes an
/// event that needs nothing more once `[resolver] retention` has passed.
/// Nothing to say when it keeps every event.
fn pruned_hint(retention: Retention) -> String {
    match retention {
        Retention::Forever => String::new(),
        Retention::For(period) => format!(
            "; an event that needs nothing more (Completed, Skipped, Unsupported) is removed \
             {} after its last update ([resolver] retention)",
            period_text(period)
        ),
    }
}

/// A Manager refusal as the API answers it; an unknown event id gets the
/// same hint as `GET /api/events/{id}`, since the operator may hold an id
/// the Resolver has since pruned.
fn or_pruned(state: &ApiState, error: ManagerError) -> ApiError {
    match error {
        ManagerError::UnknownEvent { .. } => {
            ApiError::not_found(format!("{error}{}", pruned_hint(state.retention)))
        }
        other => other.into(),
    }
}

/// A retention period as an operator reads it: whole days as days
/// (humantime writes `30days`, and `90d` as months, hours and seconds).
fn period_text(period: std::time::Duration) -> String {
    const DAY: u64 = 24 * 60 * 60;
    match period.as_secs() {
        secs if secs >= DAY && secs % DAY == 0 && period.subsec_nanos() == 0 => {
            let days = secs / DAY;
            format!("{days} day{}", if days == 1 { "" } else { "s" })
        }
        _ => humantime::format_duration(period).to_string(),
    }
}

/// `POST .../resubmit`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ResubmitRequest {
    endpoint: Option<String>,
    /// The edited event, as JSON (any value), replacing the recorded one;
    /// kept as the text sent, as a publish's is.
    data: Option<Box<serde_json::value::RawValue>>,
}

pub(crate) async fn resubmit(
    State(state): State<ApiState>,
    Path(event_id): Path<String>,
    body: Bytes,
) -> Result<Json<Sent>, ApiError> {
    let request: ResubmitRequest = json(&body, true)?;
    let edited = request.data.map(|d| d.get().to_owned());
    let sent = state
        .manager
        .resubmit(
            &event_id,
            given(request.endpoint).as_deref(),
            edited.as_deref(),
        )
        .await
        .map_err(|e| or_pruned(&state, e))?;
    let mut sent = sent;
    if let Some(note) = no_handler_note(&state, &sent).await? {
        sent.notes.push(note);
    }
    Ok(Json(sent))
}

/// Said when a resubmission goes to an endpoint where no loaded handler
/// serves its event type (deleted, or not loading): it cannot succeed, and
/// the session stays blocked, so the operator should fix the handler first.
async fn no_handler_note(state: &ApiState, sent: &Sent) -> Result<Option<String>, ApiError> {
    let (event_id, endpoint) = (sent.event_id.clone(), sent.endpoint.clone());
    let event_type = state
        .read_store(move |store| store.event(&event_id))
        .await?
        .into_iter()
        .find(|detail| detail.record.endpoint == endpoint)
        .and_then(|detail| detail.record.event_type);
    let Some(event_type) = event_type else {
        return Ok(None);
    };
    if state.registry.lookup(&sent.endpoint, &event_type).is_some() {
        return Ok(None);
    }
    Ok(Some(format!(
        "no handler at '{}' serves {event_type} now (`nimbus handlers`): the resubmission will \
         not run it, and the session stays blocked; fix or drop in the handler, then resubmit",
        sent.endpoint
    )))
}

/// `POST .../skip`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SkipRequest {
    endpoint: Option<String>,
}

pub(crate) async fn skip(
    State(state): State<ApiState>,
    Path(event_id): Path<String>,
    body: Bytes,
) -> Result<Json<Sent>, ApiError> {
    let request: SkipRequest = json(&body, true)?;
    let sent = state
        .manager
        .skip(&event_id, given(request.endpoint).as_deref())
        .await
        .map_err(|e| or_pruned(&state, e))?;
    Ok(Json(sent))
}

/// `POST .../handoff/complete`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CompleteHandoffRequest {
    endpoint: Option<String>,
    /// What the external job reported, as JSON (any value), kept as the
    /// text sent.
    details: Option<Box<serde_json::value::RawValue>>,
}

pub(crate) async fn complete_handoff(
    State(state): State<ApiState>,
    Path(event_id): Path<String>,
    body: Bytes,
) -> Result<Json<Sent>, ApiError> {
    let request: CompleteHandoffRequest = json(&body, true)?;
    let details = request.details.map(|d| d.get().to_owned());
    let sent = state
        .manager
        .complete_handoff(
            &event_id,
            given(request.endpoint).as_deref(),
            details.as_deref(),
        )
        .await
        .map_err(|e| or_pruned(&state, e))?;
    Ok(Json(sent))
}

/// `POST .../handoff/fail`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FailHandoffRequest {
    endpoint: Option<String>,
    error: Option<String>,
    error_type: Option<String>,
}

pub(crate) async fn fail_handoff(
    State(state): State<ApiState>,
    Path(event_id): Path<String>,
    body: Bytes,
) -> Result<Json<Sent>, ApiError> {
    let request: FailHandoffRequest = json(&body, false)?;
    let Some(error) = given(request.error) else {
        return Err(ApiError::bad_request(
            "error is missing: failing a handoff needs a text saying why",
        ));
    };
    let sent = state
        .manager
        .fail_handoff(
            &event_id,
            given(request.endpoint).as_deref(),
            &error,
            given(request.error_type).as_deref(),
        )
        .await
        .map_err(|e| or_pruned(&state, e))?;
    Ok(Json(sent))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{Status, period_text, status_filter};

    #[test]
    fn a_status_filter_takes_the_handoff_sub_status_as_the_table_shows_it() {
        let handoff = (Status::Pending, Some("Handoff".to_owned()));
        assert_eq!(status_filter("Pending/Handoff"), Ok(handoff.clone()));
        assert_eq!(status_filter("handoff"), Ok(handoff));
        assert_eq!(status_filter("pending"), Ok((Status::Pending, None)));
        let error = status_filter("Done").expect_err("Done is no status");
        assert!(
            error.contains("unknown status 'Done'") && error.contains("Pending/Handoff"),
            "{error}"
        );
    }

    #[test]
    fn a_retention_period_reads_as_days_or_as_written() {
        assert_eq!(period_text(Duration::from_secs(30 * 86_400)), "30 days");
        assert_eq!(period_text(Duration::from_secs(90 * 86_400)), "90 days");
        assert_eq!(period_text(Duration::from_secs(86_400)), "1 day");
        assert_eq!(period_text(Duration::from_secs(12 * 3_600)), "12h");
        assert_eq!(period_text(Duration::from_secs(36 * 3_600)), "1day 12h");
    }
}
