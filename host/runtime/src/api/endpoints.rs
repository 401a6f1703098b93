//! Which endpoints (and producers' topics) a listing covers when the caller
//! names none.

use std::collections::BTreeSet;

use crate::api::{ApiError, ApiState};

/// The endpoints, then the producers' topics that are not endpoints: every
/// topic whose forwarders can dead-letter what was published to it.
pub(crate) async fn known_topics(state: &ApiState) -> Result<Vec<String>, ApiError> {
    let mut topics = known_endpoints(state).await?;
    let producers: Vec<String> = state
        .producers
        .iter()
        .filter(|p| !topics.iter().any(|e| e.eq_ignore_ascii_case(p)))
        .cloned()
        .collect();
    topics.extend(producers);
    Ok(topics)
}

/// Every endpoint with queues on the broker, and every endpoint with a
/// handler now. A handler deleted, or not loading since the host started,
/// leaves its endpoint's topic and session subscription in place, with
/// their blocked sessions and dead letters: an operator still has to see
/// them when listing everything.
pub(crate) async fn known_endpoints(state: &ApiState) -> Result<Vec<String>, ApiError> {
    let mut endpoints: BTreeSet<String> = state
        .registry
        .snapshot()
        .endpoints()
        .map(str::to_owned)
        .collect();
    let on_the_broker = match nimbus_wire::topology::endpoint_topics(&*state.bus).await {
        Ok(endpoints) => endpoints,
        // On Service Bus the namespace's topics are not listed over AMQP:
        // the endpoints known are the handlers'.
        Err(nimbus_transport::AdminError::Unsupported { .. }) => Vec::new(),
        Err(e) => {
            return Err(ApiError::internal(format!(
                "listing the broker's endpoints: {e}"
            )));
        }
    };
    endpoints.extend(on_the_broker);
    Ok(endpoints.into_iter().collect())
}
