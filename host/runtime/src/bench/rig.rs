//! The stack under test: the same parts `Host::start` wires, through the
//! same `wiring` functions (embedded broker, provisioned topology, one
//! endpoint's session processor and replayer, the Resolver on SQLite, the
//! Manager), in a temp dir, with the handlers given
//! — the sandbox's registry or a native implementation — and the two probes
//! of [`super::watch`] in place.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use nimbus_broker::{Broker, BrokerOptions, Durability};
use nimbus_engine::{Handlers, ProcessorSettings};
use nimbus_manager::Manager;
use nimbus_resolver::{ResolverSettings, ResolverStore, SqliteResolverStore};

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::discard::DiscardingStore;
use super::watch::{HandlerClock, Settled, SettledWatch, Timed};
use crate::observed_store::ObservedStore;
use crate::{Config, wiring};

/// Where the Resolver's records go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResolverStoreChoice {
    /// SQLite in the data directory, as the host runs it.
    Sqlite,
    /// Nowhere: the Resolver consumes and settles every message but writes
    /// nothing, to price the store beside a run with it (never a host
    /// configuration).
    Discard,
}

/// The endpoint the bench's events go to.
pub(crate) const ENDPOINT: &str = "bench";

/// What the rig needs to start.
pub(crate) struct RigSpec<'a> {
    pub(crate) dir: &'a Path,
    pub(crate) durability: Durability,
    pub(crate) event_type: &'a str,
    pub(crate) handlers: Arc<dyn Handlers>,
    pub(crate) engine_sessions: usize,
    pub(crate) resolver_store: ResolverStoreChoice,
}

/// A running stack.
pub(crate) struct Rig {
    pub(crate) broker: Arc<Broker>,
    pub(crate) manager: Arc<Manager<Broker>>,
    /// The Resolver's store, for a soak's row counts.
    pub(crate) store: Arc<dyn ResolverStore>,
    pub(crate) clock: Arc<HandlerClock>,
    /// How long the engine and the Resolver hold a session that has gone
    /// quiet: each phase publishes to sessions of its own, and until the
    /// last phase's sessions are released they hold every worker.
    pub(crate) session_release: Duration,
    shutdown: CancellationToken,
    tasks: TaskTracker,
}

/// Where the Resolver's records go: SQLite in `dir`, as the host keeps
/// them, or nowhere.
fn records_store(
    choice: ResolverStoreChoice,
    dir: &Path,
    durability: Durability,
) -> anyhow::Result<Arc<dyn ResolverStore>> {
    Ok(match choice {
        ResolverStoreChoice::Sqlite => Arc::new(
            SqliteResolverStore::open_with(
                &dir.join("resolver.db"),
                wiring::store_durability(durability),
            )
            .context("opening the resolver store")?,
        ),
        ResolverStoreChoice::Discard => Arc::new(DiscardingStore),
    })
}

impl Rig {
    /// Starts everything; `settled` hears each status the Resolver commits.
    pub(crate) async fn start(
        spec: RigSpec<'_>,
        settled: mpsc::UnboundedSender<Settled>,
    ) -> anyhow::Result<Rig> {
        let broker = Arc::new(
            Broker::open(BrokerOptions::new(spec.dir.join("broker")).durability(spec.durability))
                .await
                .context("opening the embedded broker")?,
        );
        // The host's defaults and the host's wiring, so the bench runs what
        // `nimbus run` runs with an empty configuration.
        let config = Config::defaults(spec.dir).context("the default configuration")?;
        let topology = wiring::base_topology(&config).endpoint(
            nimbus_wire::topology::Endpoint::new(ENDPOINT)
                .consumes(vec![spec.event_type.to_owned()]),
        );
        nimbus_wire::topology::provision(&*broker, &topology)
            .await
            .context("provisioning the bench topology")?;

        let records = records_store(spec.resolver_store, spec.dir, spec.durability)?;
        let store: Arc<dyn ResolverStore> =
            Arc::new(ObservedStore::new(records, SettledWatch::new(settled)));
        let clock = Arc::new(HandlerClock::default());
        // One key for the rig's Manager, endpoint and Resolver, as a host has.
        let control_key = nimbus_wire::ControlKey::new(&crate::control::new_key_text()?)
            .map_err(|why| anyhow::anyhow!("a made control key: {why}"))?;
        let endpoint = wiring::endpoint(
            &config,
            ENDPOINT,
            Arc::new(Timed::new(spec.handlers, Arc::clone(&clock))),
            Arc::new(wiring::policies(&config)),
            format!("nimbus {} (bench)", crate::VERSION),
            Arc::default(),
            nimbus_engine::Paused::default(),
            control_key.clone(),
        );
        let shutdown = CancellationToken::new();
        let tasks = TaskTracker::new();
        wiring::spawn_endpoint(
            &tasks,
            &broker,
            Arc::new(endpoint),
            ProcessorSettings {
                max_concurrent_sessions: spec.engine_sessions,
                ..wiring::processor_settings(&config)
            },
            &shutdown,
        );
        // Metered as the host meters it; nothing reads these here.
        wiring::spawn_resolver(
            &tasks,
            &broker,
            Arc::clone(&store),
            Arc::new(crate::Metrics::default()),
            &config,
            control_key.clone(),
            &shutdown,
        );
        let session_release = config
            .config
            .engine
            .session_idle_timeout
            .max(ResolverSettings::default().session_idle_timeout);
        let manager = Arc::new(Manager::new(
            Arc::clone(&broker),
            Arc::clone(&store),
            control_key,
        ));
        Ok(Rig {
            broker,
            manager,
            store,
            clock,
            session_release,
            shutdown,
            tasks,
        })
    }

    /// Stops every part and waits for it (bounded: a stuck part is left
    /// behind with a warning rather than hanging the bench).
    pub(crate) async fn stop(self) {
        self.shutdown.cancel();
        self.tasks.close();
        if tokio::time::timeout(Duration::from_secs(10), self.tasks.wait())
            .await
            .is_err()
        {
            tracing::warn!("the bench stack did not stop within 10s");
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use nimbus_resolver::{MessageKind, Observation};

    use super::*;

    #[test]
    fn a_discarded_store_writes_no_file_and_a_sqlite_one_keeps_the_record() {
        let dir = tempfile::tempdir().unwrap();
        let request = Observation::new("bench", "e-1", MessageKind::EventRequest, 1);

        let discard =
            records_store(ResolverStoreChoice::Discard, dir.path(), Durability::Os).unwrap();
        discard.record(&request).unwrap();
        assert!(!dir.path().join("resolver.db").exists());
        assert!(discard.event("e-1").unwrap().is_empty());

        let sqlite =
            records_store(ResolverStoreChoice::Sqlite, dir.path(), Durability::Os).unwrap();
        sqlite.record(&request).unwrap();
        assert!(dir.path().join("resolver.db").exists());
        assert_eq!(sqlite.event("e-1").unwrap().len(), 1);
    }
}
