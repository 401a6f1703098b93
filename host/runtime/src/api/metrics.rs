//! `GET /metrics`: the Prometheus text format. Counters and histograms of
//! what the Resolver recorded (throughput, latency, outcomes), and gauges
//! read at scrape time: each endpoint's queue depths, blocked sessions and
//! parked events from the broker, whether an operator paused it, each
//! handler's state from the registry.

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use nimbus_transport::{Admin as _, AdminError, SubscriptionPath};
use nimbus_wire::SessionState;

use crate::api::endpoints::known_topics;
use crate::api::{ApiError, ApiState};
use crate::metrics::{CONTENT_TYPE, Text};

/// One endpoint's gauges.
#[derive(Debug, Default)]
struct Depths {
    /// Whether the broker's gauges were read: Service Bus does not list
    /// its subscriptions and sessions over AMQP (Azure Monitor has them).
    from_broker: bool,
    active: u64,
    dead_letter: u64,
    blocked_sessions: u64,
    parked: u64,
    retrying: u64,
    paused: u64,
}

/// A gauge of [`Depths`]: its name, help and reading, if there is one.
type Gauge = (&'static str, &'static str, fn(&Depths) -> Option<u64>);

async fn depths(state: &ApiState, endpoint: &str) -> Result<Depths, ApiError> {
    let path = SubscriptionPath::new(endpoint, endpoint);
    let mut depths = Depths {
        from_broker: true,
        ..Depths::default()
    };
    let subscriptions = match state.bus.list_subscriptions(endpoint).await {
        Ok(subscriptions) => subscriptions,
        Err(AdminError::NotFound { .. }) => Vec::new(),
        Err(AdminError::Unsupported { .. }) => return Ok(Depths::default()),
        Err(e) => {
            return Err(ApiError::internal(format!(
                "listing the subscriptions of {endpoint}: {e}"
            )));
        }
    };
    // Every dead-letter queue `nimbus dlq list` reads: a Resolver copy, a
    // parked event dead-lettered elsewhere, or a publish that no forwarder
    // could forward (it reached no endpoint, so this gauge is all that
    // shows it) must not be missed by an alert.
    let read_by_dlq_list = |name: &str, forwards: bool| {
        forwards
            || [
                endpoint,
                nimbus_wire::addr::RESOLVER,
                nimbus_wire::addr::DEFERRED,
                nimbus_wire::addr::DEFERRED_PROCESSOR,
            ]
            .contains(&name)
    };
    for subscription in &subscriptions {
        if subscription.name == endpoint {
            depths.active = subscription.active_message_count;
        }
        if read_by_dlq_list(
            &subscription.name,
            subscription.settings.forward_to.is_some(),
        ) {
            depths.dead_letter += subscription.dead_letter_message_count;
        }
    }
    // The Resolver's own subscription holds no session state.
    if endpoint == nimbus_wire::addr::RESOLVER {
        return Ok(depths);
    }
    let sessions = match state.bus.list_sessions(&path).await {
        Ok(sessions) => sessions,
        Err(AdminError::NotFound { .. }) => Vec::new(),
        Err(e) => {
            return Err(ApiError::internal(format!(
                "listing the sessions of {path}: {e}"
            )));
        }
    };
    for session in sessions {
        let Some(blob) = session.state.as_deref().filter(|b| !b.is_empty()) else {
            continue;
        };
        // A state that is not NimBus session state blocks nothing we know
        // of; `GET /api/sessions` shows it raw.
        if let Ok(state) = SessionState::from_bytes(blob) {
            depths.blocked_sessions += u64::from(state.is_blocked());
            depths.parked += u64::from(state.deferred_count);
        }
    }
    Ok(depths)
}

pub(crate) async fn metrics(State(state): State<ApiState>) -> Result<impl IntoResponse, ApiError> {
    let mut text = Text::default();
    state.metrics.render(&mut text);

    let mut endpoints = Vec::new();
    let mut watched = known_topics(&state).await?;
    watched.push(nimbus_wire::addr::RESOLVER.to_owned());
    let retrying = state.retrying.counts();
    for endpoint in watched {
        let mut depths = depths(&state, &endpoint).await?;
        depths.retrying = retrying
            .get(&endpoint)
            .map_or(0, |&n| u64::try_from(n).unwrap_or(u64::MAX));
        depths.paused = u64::from(state.pauses.paused_since(&endpoint).is_some());
        endpoints.push((endpoint, depths));
    }
    let gauges: [Gauge; 6] = [
        (
            "nimbus_active_messages",
            "Messages waiting or locked in the endpoint's subscription (endpoint=\"Resolver\": the Resolver's backlog).",
            |d| d.from_broker.then_some(d.active),
        ),
        (
            "nimbus_dead_letter_messages",
            "Messages in the endpoint's dead-letter queues (its own, Resolver, Deferred, DeferredProcessor; endpoint=\"Resolver\": what the Resolver could not record).",
            |d| d.from_broker.then_some(d.dead_letter),
        ),
        (
            "nimbus_blocked_sessions",
            "Sessions blocked by a failed or pending event.",
            |d| d.from_broker.then_some(d.blocked_sessions),
        ),
        (
            "nimbus_parked_events",
            "Events parked (deferred) behind a session's block.",
            |d| d.from_broker.then_some(d.parked),
        ),
        (
            "nimbus_retrying_events",
            "Events this host is delivering again after a transient failure (none is reported to the Resolver, whose status does not show it).",
            |d| Some(d.retrying),
        ),
        (
            "nimbus_endpoint_paused",
            "1 while an operator has paused the endpoint (`nimbus pause`): it runs nothing, and its events wait.",
            |d| Some(d.paused),
        ),
    ];
    for (name, help, value) in gauges {
        text.family(name, help, "gauge");
        for (endpoint, depths) in &endpoints {
            if let Some(value) = value(depths) {
                text.sample(name, &[("endpoint", endpoint)], value);
            }
        }
    }

    text.family(
        "nimbus_handlers",
        "Each handler, by its state (serving, serving-previous, failed).",
        "gauge",
    );
    let snapshot = state.registry.snapshot();
    for h in snapshot.handlers() {
        text.sample(
            "nimbus_handlers",
            &[
                ("endpoint", &h.key.endpoint),
                ("handler", &h.key.handler),
                ("status", h.state()),
            ],
            1,
        );
    }
    Ok(([(header::CONTENT_TYPE, CONTENT_TYPE)], text.finish()))
}
