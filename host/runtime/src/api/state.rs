//! What the routes share: handles on the running host's parts.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use nimbus_manager::Manager;
use nimbus_resolver::{ResolverStore, SqliteResolverStore};
use nimbus_sandbox::Registry;

use crate::api::guard::Guard;
use crate::bus::Bus;
use crate::config::{ApiConfig, DEFAULT_PRODUCER, Retention};
use crate::host::Host;

/// The state every route handler gets; cheap to clone.
#[derive(Clone)]
pub struct ApiState {
    /// What the host runs on.
    pub(crate) bus: Arc<Bus>,
    pub(crate) registry: Arc<Registry>,
    pub(crate) store: Arc<SqliteResolverStore>,
    /// What the Resolver recorded, counted.
    pub(crate) metrics: Arc<crate::Metrics>,
    /// The events this host is delivering again after a transient failure.
    pub(crate) retrying: Arc<nimbus_engine::Retrying>,
    /// The endpoints an operator paused.
    pub(crate) pauses: Arc<crate::Pauses>,
    pub(crate) manager: Arc<Manager<Bus>>,
    /// Producer topics named in the configuration (plus the default one);
    /// endpoint topics are producers too, looked up live.
    pub(crate) producers: Arc<BTreeSet<String>>,
    /// `[resolver] retention`: an unknown event id may be one pruned.
    pub(crate) retention: Retention,
    /// Who may call: `Host`, `Origin`, token.
    pub(crate) guard: Arc<Guard>,
    /// `[api] request_timeout`.
    pub(crate) request_timeout: Duration,
    /// `[api]` as configured, to rebuild the guard for the bound address.
    api: ApiConfig,
}

impl std::fmt::Debug for ApiState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiState")
            .field("producers", &self.producers)
            .finish_non_exhaustive()
    }
}

impl ApiState {
    /// The API over a running host.
    pub fn new(host: &Host) -> ApiState {
        let store: Arc<dyn ResolverStore> = host.resolver().clone();
        let api = host.config().config.api.clone();
        let mut producers: BTreeSet<String> = host
            .config()
            .config
            .host
            .producers
            .iter()
            .cloned()
            .collect();
        producers.insert(DEFAULT_PRODUCER.to_owned());
        ApiState {
            bus: Arc::clone(host.bus()),
            registry: Arc::clone(host.registry()),
            store: Arc::clone(host.resolver()),
            metrics: Arc::clone(host.metrics()),
            retrying: Arc::clone(host.retrying()),
            pauses: Arc::clone(host.pauses()),
            manager: Arc::new(Manager::new(
                Arc::clone(host.bus()),
                store,
                host.control_key().clone(),
            )),
            producers: Arc::new(producers),
            retention: host.config().config.resolver.retention,
            guard: Arc::new(Guard::new(
                api.listen,
                &api.allowed_hosts,
                api.token.clone(),
            )),
            request_timeout: api.request_timeout,
            api,
        }
    }

    /// The same API served on `address`, the listener's bound address: with
    /// `[api] listen` on port 0 the port clients name in `Host` is only
    /// known once bound.
    #[must_use]
    pub fn listening_on(mut self, address: SocketAddr) -> ApiState {
        self.guard = Arc::new(Guard::new(
            address,
            &self.api.allowed_hosts,
            self.api.token.clone(),
        ));
        self
    }

    /// Runs a blocking Resolver-store read off the async workers.
    pub(crate) async fn read_store<R: Send + 'static>(
        &self,
        read: impl FnOnce(&SqliteResolverStore) -> Result<R, nimbus_resolver::StoreError>
        + Send
        + 'static,
    ) -> Result<R, crate::api::ApiError> {
        let store = Arc::clone(&self.store);
        tokio::task::spawn_blocking(move || read(&store))
            .await
            .map_err(|e| {
                crate::api::ApiError::internal(format!("Resolver store read panicked: {e}"))
            })?
            .map_err(|e| crate::api::ApiError::internal(format!("reading the Resolver store: {e}")))
    }
}
