//! The stack's parts as the configuration wires them: the engine's
//! policies and processor settings, the base topology, an endpoint and its
//! tasks, the Resolver's task. `Host::start` and `nimbus bench`'s rig both
//! build from here, so the bench measures exactly what the host runs.

use std::sync::Arc;

use nimbus_engine::{Endpoint, Handlers, Policies, ProcessorSettings, Retrying, TransientBackoff};
use nimbus_resolver::{ResolverSettings, ResolverStore, StoreDurability};
use nimbus_transport::Transport;
use nimbus_wire::ControlKey;
use nimbus_wire::topology::Topology;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::{DEFAULT_PRODUCER, ValidConfig};
use crate::metrics::Metrics;
use crate::observed_store::ObservedStore;

/// Retry policies, classifier and transient backoff from the configuration.
pub(crate) fn policies(config: &ValidConfig) -> Policies {
    let engine = &config.config.engine;
    Policies::new(
        config.retry.clone(),
        config.classifier.clone(),
        TransientBackoff {
            base: engine.transient_backoff,
            max: engine.transient_backoff_max,
        },
    )
}

/// The Resolver store promises what the broker promises: its records are
/// what let the bus complete the messages they record.
pub(crate) fn resolver_durability(config: &ValidConfig) -> StoreDurability {
    store_durability(config.config.broker.durability.into())
}

/// The Resolver store's durability for a broker durability.
pub(crate) fn store_durability(broker: nimbus_broker::Durability) -> StoreDurability {
    match broker {
        nimbus_broker::Durability::Fsync => StoreDurability::PowerLoss,
        nimbus_broker::Durability::Os => StoreDurability::ProcessCrash,
    }
}

/// How each endpoint's session processor runs.
pub(crate) fn processor_settings(config: &ValidConfig) -> ProcessorSettings {
    let engine = &config.config.engine;
    ProcessorSettings {
        max_concurrent_sessions: engine.max_concurrent_sessions,
        session_idle_timeout: engine.session_idle_timeout,
        session_max_hold: engine.session_max_hold,
        ..ProcessorSettings::default()
    }
}

/// The topology without endpoints: subscription settings and the producer
/// topics (the default one and those configured).
pub(crate) fn base_topology(config: &ValidConfig) -> Topology {
    let mut topology = Topology::new()
        .lock_duration(config.config.broker.lock_duration)
        .max_delivery_count(config.config.broker.max_delivery_count)
        .producer_topic(DEFAULT_PRODUCER);
    for producer in &config.config.host.producers {
        topology = topology.producer_topic(producer.clone());
    }
    topology
}

/// The endpoint `name`, running `handlers`.
#[expect(
    clippy::too_many_arguments,
    reason = "each is a part the host hands every endpoint; the host and the bench rig both \
              build endpoints here, so the list is written once"
)]
pub(crate) fn endpoint(
    config: &ValidConfig,
    name: &str,
    handlers: Arc<dyn Handlers>,
    policies: Arc<Policies>,
    sdk_version: String,
    retrying: Arc<Retrying>,
    paused: nimbus_engine::Paused,
    control_key: ControlKey,
) -> Endpoint {
    let engine = &config.config.engine;
    Endpoint {
        name: name.to_owned(),
        handlers,
        policies,
        max_delivery_count: config.config.broker.max_delivery_count,
        renew_every: config.config.broker.lock_duration / 3,
        sdk_version,
        inbox_retention: engine.inbox.then_some(engine.inbox_retention),
        retrying,
        paused,
        control_key,
    }
}

/// Spawns the endpoint's session processor and its replayer on `tasks`.
pub(crate) fn spawn_endpoint<T: Transport>(
    tasks: &TaskTracker,
    transport: &Arc<T>,
    endpoint: Arc<Endpoint>,
    settings: ProcessorSettings,
    shutdown: &CancellationToken,
) {
    let name = endpoint.name.clone();
    tasks.spawn(nimbus_engine::run_endpoint(
        Arc::clone(transport),
        endpoint,
        settings,
        shutdown.clone(),
    ));
    tasks.spawn(nimbus_engine::run_replayer(
        Arc::clone(transport),
        name,
        shutdown.clone(),
    ));
}

/// Spawns the Resolver's consumer, recording into `store` and counting
/// what it records into `metrics`, on `tasks`.
pub(crate) fn spawn_resolver<T: Transport>(
    tasks: &TaskTracker,
    transport: &Arc<T>,
    store: Arc<dyn ResolverStore>,
    metrics: Arc<Metrics>,
    config: &ValidConfig,
    control_key: ControlKey,
    shutdown: &CancellationToken,
) {
    let store: Arc<dyn ResolverStore> = Arc::new(ObservedStore::new(store, metrics));
    let settings = ResolverSettings {
        max_concurrent_sessions: config.config.engine.resolver_sessions,
        session_max_hold: config.config.engine.session_max_hold,
        control_key: Some(control_key),
        ..ResolverSettings::default()
    };
    let transport = Arc::clone(transport);
    let shutdown = shutdown.clone();
    tasks.spawn(async move {
        if let Err(e) = nimbus_resolver::run_resolver(transport, store, settings, shutdown).await {
            tracing::error!(error = %e, "the Resolver stopped");
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_resolver_store_promises_what_the_broker_promises() {
        assert_eq!(
            store_durability(nimbus_broker::Durability::Fsync),
            StoreDurability::PowerLoss
        );
        assert_eq!(
            store_durability(nimbus_broker::Durability::Os),
            StoreDurability::ProcessCrash
        );
    }
}
