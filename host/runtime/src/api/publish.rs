//! `POST /api/publish`: an original publish, as an external producer would
//! send it, to a producer topic.

use std::collections::BTreeMap;

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use nimbus_transport::{
    Admin as _, AdminError, Properties, PublishError, SubscriptionPath, Transport as _,
};
use nimbus_wire::build::{self, Publish};
use nimbus_wire::topology::forwarder_name;
use serde::{Deserialize, Serialize};

use crate::api::body::{given, json, optional_id};
use crate::api::{ApiError, ApiState};
use crate::config::DEFAULT_PRODUCER;

/// The request body.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PublishRequest {
    event_type: String,
    /// Kept as the text sent: the payload travels as it was written (large
    /// numbers, decimals, key order), never through a parsed value.
    data: Option<Box<serde_json::value::RawValue>>,
    session_id: Option<String>,
    correlation_id: Option<String>,
    message_id: Option<String>,
    from: Option<String>,
    /// User (application) properties: a string, an integer, a number or a
    /// boolean each. Handlers read them (`ctx.properties()`); forwarding
    /// rules could filter on them.
    properties: Option<BTreeMap<String, serde_json::Value>>,
}

/// The user properties of a publish, each checked: no NimBus envelope name
/// (nimbus sets those), no empty name, a value the bus can carry.
fn user_properties(
    given: Option<BTreeMap<String, serde_json::Value>>,
) -> Result<Properties, ApiError> {
    let mut properties = Properties::new();
    for (name, value) in given.unwrap_or_default() {
        if name.trim().is_empty() {
            return Err(ApiError::bad_request(
                "properties: a name must not be empty",
            ));
        }
        if nimbus_wire::prop::is_envelope(&name) {
            return Err(ApiError::bad_request(format!(
                "properties.{name}: a NimBus envelope property, set by nimbus; choose another name"
            )));
        }
        let value = nimbus_wire::user_properties::from_json_value(&value)
            .map_err(|why| ApiError::bad_request(format!("properties.{name}: {why}")))?;
        properties.insert(name, value);
    }
    Ok(properties)
}

/// The answer: where the event went and who consumes its type now.
#[derive(Debug, Serialize)]
pub(crate) struct Published {
    message_id: String,
    session_id: String,
    correlation_id: String,
    topic: String,
    /// Endpoints whose handlers consume the event type now; empty means
    /// nothing will handle it (it is accepted all the same, as on the bus).
    consumed_by: Vec<String>,
    /// Endpoints with a handler file that does not load: their forwarding
    /// is kept as it was.
    not_loading: Vec<String>,
    /// Those of `not_loading` whose kept forwarding from this topic carries
    /// the event type and where no handler runs: the event waits in their
    /// queue until the handler is fixed. Any other gets nothing of this
    /// event, even once fixed.
    waiting_at: Vec<String>,
    /// Those whose kept forwarding carries it but where other handlers run:
    /// the event fails there (`HandlerNotLoaded`) and blocks its session,
    /// to be resubmitted once the handler is fixed.
    fails_at: Vec<String>,
    /// Those of `consumed_by` an operator paused: the event waits in their
    /// queue until `nimbus resume`.
    paused_at: Vec<String>,
}

pub(crate) async fn publish(
    State(state): State<ApiState>,
    body: Bytes,
) -> Result<Json<Published>, ApiError> {
    let request: PublishRequest = json(&body, false)?;
    let event_type = request.event_type.trim();
    if event_type.is_empty() {
        return Err(ApiError::bad_request("event_type must not be empty"));
    }
    let Some(data) = request.data else {
        return Err(ApiError::bad_request(
            "data is missing: give the event as JSON (any JSON value)",
        ));
    };
    let snapshot = state.registry.snapshot();
    let topic = given(request.from).unwrap_or_else(|| DEFAULT_PRODUCER.to_owned());
    if !state.producers.contains(&topic) && !snapshot.endpoints().any(|e| e == topic) {
        let mut known: Vec<String> = state.producers.iter().cloned().collect();
        known.extend(snapshot.endpoints().map(str::to_owned));
        return Err(ApiError::bad_request(format!(
            "unknown producer '{topic}': publish from one of {} (or add it to [host] producers)",
            known.join(", ")
        )));
    }
    let message = build::original_publish(&Publish {
        event_type_id: event_type.to_owned(),
        payload: data.get().to_owned(),
        session_id: optional_id("session_id", request.session_id)?,
        correlation_id: given(request.correlation_id),
        message_id: optional_id("message_id", request.message_id)?,
        publisher: Some(topic.clone()),
        properties: user_properties(request.properties)?,
    });
    let mut published = Published {
        message_id: message.message_id.clone().unwrap_or_default(),
        session_id: message.session_id.clone().unwrap_or_default(),
        correlation_id: message.correlation_id.clone().unwrap_or_default(),
        consumed_by: snapshot
            .endpoints_for(event_type)
            .into_iter()
            .map(str::to_owned)
            .collect(),
        not_loading: snapshot
            .endpoints_not_loading()
            .into_iter()
            .map(str::to_owned)
            .collect(),
        waiting_at: Vec::new(),
        fails_at: Vec::new(),
        paused_at: Vec::new(),
        topic,
    };
    published.paused_at = published
        .consumed_by
        .iter()
        .filter(|endpoint| state.pauses.paused_since(endpoint).is_some())
        .cloned()
        .collect();
    for endpoint in &published.not_loading {
        // Served there by a handler that loads: nothing waits.
        if published.consumed_by.contains(endpoint) {
            continue;
        }
        if forwards(&state, &published.topic, endpoint, event_type).await? {
            if snapshot.endpoint_runs(endpoint) {
                published.fails_at.push(endpoint.clone());
            } else {
                published.waiting_at.push(endpoint.clone());
            }
        }
    }
    state
        .bus
        .publish(&published.topic, vec![message.to_transport()])
        .await
        .map_err(|e| match e {
            PublishError::TopicNotFound { .. } => ApiError::bad_request(format!(
                "producer topic '{}' is not provisioned yet: {e}",
                published.topic
            )),
            PublishError::InvalidMessage { .. } => {
                ApiError::bad_request(format!("the message is not valid: {e}"))
            }
            // Not taken for now: a dropped connection to the namespace, a
            // broker that cannot write. Nothing failed in the host, and a
            // publish again may go through: 503, naming the bus's own
            // failure when it knows one (issue 40).
            PublishError::Transient(e) => {
                ApiError::unavailable(state.bus.failure().unwrap_or_else(|| {
                    format!(
                        "the bus did not take the publish to '{}' for now ({e}); publish again",
                        published.topic
                    )
                }))
            }
            other => ApiError::internal(format!("publishing to '{}': {other}", published.topic)),
        })?;
    tracing::info!(
        message_id = %published.message_id,
        topic = %published.topic,
        event_type,
        "event published through the API"
    );
    Ok(Json(published))
}

/// Whether `topic` forwards original publishes of `event_type` to
/// `endpoint`: its forwarder there has the type's rule.
async fn forwards(
    state: &ApiState,
    topic: &str,
    endpoint: &str,
    event_type: &str,
) -> Result<bool, ApiError> {
    let forwarder = SubscriptionPath::new(topic, forwarder_name(topic, endpoint).as_str());
    match state.bus.list_rules(&forwarder).await {
        Ok(rules) => Ok(rules.iter().any(|rule| rule.name == event_type)),
        // Rules are not listed on Service Bus: nothing is known to wait.
        Err(AdminError::NotFound { .. } | AdminError::Unsupported { .. }) => Ok(false),
        Err(e) => Err(ApiError::internal(format!(
            "reading the rules of {forwarder}: {e}"
        ))),
    }
}
