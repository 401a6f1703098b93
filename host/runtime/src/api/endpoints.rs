//! Which endpoints a listing covers when the caller names none.

use std::collections::BTreeSet;

use nimbus_transport::{Admin as _, AdminError, SubscriptionPath};

use crate::api::{ApiError, ApiState};

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
    let topics = state
        .broker
        .list_topics()
        .await
        .map_err(|e| ApiError::internal(format!("listing the broker's topics: {e}")))?;
    for topic in topics {
        if endpoints.contains(&topic.name)
            || topic.name.eq_ignore_ascii_case(nimbus_wire::addr::RESOLVER)
        {
            continue;
        }
        // An endpoint's topic has a session subscription of its own name; a
        // producer's topic has only forwarders.
        let own = SubscriptionPath::new(topic.name.as_str(), topic.name.as_str());
        match state.broker.get_subscription(&own).await {
            Ok(Some(subscription)) if subscription.settings.requires_session => {
                endpoints.insert(topic.name);
            }
            Ok(_) | Err(AdminError::NotFound { .. }) => {}
            Err(e) => {
                return Err(ApiError::internal(format!(
                    "looking up the subscription {own}: {e}"
                )));
            }
        }
    }
    Ok(endpoints.into_iter().collect())
}
