//! The running host: starts every part in order, keeps the topology in step
//! with the handlers directory, and shuts down in two stages (stop taking
//! work, then drain; SEMANTICS.md §8, STYLE habit 19).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use anyhow::Context as _;
use nimbus_broker::{Broker, BrokerOptions};
use nimbus_engine::{Policies, ProcessorSettings, Retrying};
use nimbus_resolver::SqliteResolverStore;
use nimbus_sandbox::{Limits, Registry, Sandbox, SandboxConfig, Snapshot, WatchGuard};
use nimbus_servicebus::ServiceBus;
use nimbus_wire::ControlKey;
use nimbus_wire::topology::Topology;
use tokio::sync::Mutex;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{error, info, warn};

use crate::bus::Bus;
use crate::config::{BrokerKind, Retention, ValidConfig};
use crate::data_lock::DataLock;
use crate::handlers::SandboxHandlers;
use crate::metrics::Metrics;
use crate::pauses::Pauses;
use crate::resolver_store::{self, ResolverStoreStart};
use crate::wiring;

/// The version the host reports (heartbeats, `nimbus --version`).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The embedded broker's directory inside `[host] data_dir`.
pub const BROKER_DIR: &str = "broker";

/// The Resolver store's file inside `[host] data_dir`.
pub const RESOLVER_STORE_FILE: &str = "resolver.db";

/// A running host.
pub struct Host {
    config: ValidConfig,
    bus: Arc<Bus>,
    registry: Arc<Registry>,
    resolver: Arc<SqliteResolverStore>,
    metrics: Arc<Metrics>,
    retrying: Arc<Retrying>,
    /// The endpoints an operator paused.
    pauses: Arc<Pauses>,
    /// What the Manager signs control messages with, and the endpoints and
    /// the Resolver check them with.
    control_key: ControlKey,
    /// Handler calls in progress, across every endpoint.
    handler_calls: Arc<AtomicUsize>,
    shutdown: CancellationToken,
    tasks: TaskTracker,
    _watch: WatchGuard,
    // Last, so it is released after this host's handles on the broker
    // and the stores it guards are dropped.
    _data_lock: DataLock,
}

impl Host {
    /// Opens the broker and the stores, loads the handlers, provisions the
    /// topology, and starts the endpoints and the Resolver. Any failure here
    /// stops the start with the reason.
    pub async fn start(config: ValidConfig) -> anyhow::Result<Host> {
        let data_lock = DataLock::take(&config.config.host.data_dir, config.config.api.listen)?;
        Host::start_locked(config, data_lock, ResolverStoreStart::Existing).await
    }

    /// [`Host::start`] with the data directory's lock already taken (by
    /// [`Host::run`], before it binds the API, so that a second host on the
    /// same directory is refused naming the first rather than for its
    /// port), and the operator's word on a Resolver store that is not there
    /// (`nimbus run --new-resolver-store`).
    pub(crate) async fn start_locked(
        config: ValidConfig,
        data_lock: DataLock,
        resolver_start: ResolverStoreStart,
    ) -> anyhow::Result<Host> {
        let host = &config.config.host;
        anyhow::ensure!(
            data_lock.dir() == host.data_dir,
            "the lock taken is on {}, not on the data directory {}",
            data_lock.dir().display(),
            host.data_dir.display()
        );
        // A fresh data directory gets a handlers directory made for it. One
        // a host has run on must find its handlers directory: a mistyped
        // path would start with no handlers, unregister every endpoint the
        // real one served, and publishes would reach nothing.
        let broker_dir = host.data_dir.join(BROKER_DIR);
        let resolver_path = host.data_dir.join(RESOLVER_STORE_FILE);
        anyhow::ensure!(
            host.handlers_dir.is_dir() || !(broker_dir.exists() || resolver_path.exists()),
            "[host] handlers_dir: {} does not exist, but a host has run on the data directory \
             {} before: starting without handlers would unregister every endpoint it served. \
             Fix the path, or create the directory if an empty one is meant",
            host.handlers_dir.display(),
            host.data_dir.display()
        );
        std::fs::create_dir_all(&host.handlers_dir).with_context(|| {
            format!(
                "creating the handlers directory {}",
                host.handlers_dir.display()
            )
        })?;
        let control_key = crate::control::host_key(&config)?;
        // Looked at before the broker opens, which writes a segment: a log
        // there already is the history of earlier runs. On Service Bus the
        // namespace's history cannot be told from here.
        let broker_history = (config.config.broker.kind == BrokerKind::Embedded
            && resolver_store::broker_holds_history(&broker_dir))
        .then_some(broker_dir.as_path());
        let bus = Arc::new(open_bus(&config, &broker_dir).await?);
        let resolver = Arc::new(resolver_store::open(
            &resolver_path,
            wiring::resolver_durability(&config),
            resolver_start,
            broker_history,
        )?);
        let sandbox = Sandbox::new(SandboxConfig {
            default_limits: Limits {
                memory_bytes: config.sandbox_memory_bytes,
                timeout: config.config.sandbox.timeout,
                ..Limits::default()
            },
            max_concurrent_instances: config.config.sandbox.max_concurrent_instances,
            cache_dir: Some(host.data_dir.join("cache")),
            removal_grace: host.removal_grace,
            ..SandboxConfig::default()
        })
        .context("starting the wasm sandbox")?;
        let registry = Registry::open(sandbox, &host.handlers_dir)
            .with_context(|| format!("loading handlers from {}", host.handlers_dir.display()))?;
        let watch = registry
            .watch()
            .context("watching the handlers directory")?;
        let pauses = Arc::new(Pauses::open(&host.data_dir)?);

        let shutdown = CancellationToken::new();
        let tasks = TaskTracker::new();
        let host = Host {
            config,
            bus,
            registry,
            resolver,
            metrics: Arc::new(Metrics::default()),
            retrying: Arc::default(),
            pauses,
            control_key,
            handler_calls: Arc::default(),
            shutdown,
            tasks,
            _watch: watch,
            _data_lock: data_lock,
        };
        let supervisor = Supervisor::new(&host);
        supervisor
            .sync(host.registry.snapshot())
            .await
            .context("setting up the topology the handlers need")?;
        host.spawn_resolver();
        host.spawn_retention();
        host.spawn_supervisor(supervisor);
        info!(
            data_dir = %host.config.config.host.data_dir.display(),
            handlers_dir = %host.config.config.host.handlers_dir.display(),
            "nimbus host started"
        );
        Ok(host)
    }

    /// The endpoints an operator paused.
    pub fn pauses(&self) -> &Arc<Pauses> {
        &self.pauses
    }

    /// The key control messages are signed and checked with.
    pub fn control_key(&self) -> &ControlKey {
        &self.control_key
    }

    /// The embedded broker, when the host runs on it (`[broker] kind`).
    pub fn broker(&self) -> Option<&Arc<Broker>> {
        self.bus.embedded()
    }

    /// What the host runs on.
    pub fn bus(&self) -> &Arc<Bus> {
        &self.bus
    }

    /// The handler registry.
    pub fn registry(&self) -> &Arc<Registry> {
        &self.registry
    }

    /// The Resolver store.
    pub fn resolver(&self) -> &Arc<SqliteResolverStore> {
        &self.resolver
    }

    /// The events this host's endpoints are delivering again after a
    /// transient failure.
    pub fn retrying(&self) -> &Arc<Retrying> {
        &self.retrying
    }

    /// The counters and histograms of what the Resolver records.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// The configuration the host runs with.
    pub fn config(&self) -> &ValidConfig {
        &self.config
    }

    /// A token cancelled when shutdown begins.
    pub fn shutdown_token(&self) -> CancellationToken {
        self.shutdown.clone()
    }

    /// Stops taking new sessions, lets in-flight deliveries finish and settle
    /// (up to `engine.shutdown_grace`), then returns. A delivery cut off by
    /// the grace period is not settled: the broker redelivers it.
    pub async fn shutdown(self) {
        info!("shutting down: no new sessions; draining in-flight deliveries");
        self.shutdown.cancel();
        self.tasks.close();
        let grace = self.config.config.engine.shutdown_grace;
        if tokio::time::timeout(grace, self.tasks.wait())
            .await
            .is_err()
        {
            let cut_off = self.handler_calls.load(Ordering::Relaxed);
            warn!(
                ?grace,
                handler_calls = cut_off,
                "shutdown grace elapsed with {cut_off} handler call(s) still running; unsettled deliveries will be redelivered"
            );
        }
        if let Err(e) = self.bus.flush().await {
            warn!(error = %e, "flushing the broker on shutdown failed");
        }
        info!("nimbus host stopped");
    }

    fn spawn_resolver(&self) {
        wiring::spawn_resolver(
            &self.tasks,
            &self.bus,
            self.resolver.clone(),
            Arc::clone(&self.metrics),
            &self.config,
            self.control_key.clone(),
            &self.shutdown,
        );
    }

    /// Prunes the Resolver store past `[resolver] retention`, unless it
    /// keeps everything.
    fn spawn_retention(&self) {
        if let Retention::For(keep_for) = self.config.config.resolver.retention {
            if self.bus.embedded().is_none() {
                // Pruning keeps the records of blocked sessions' events,
                // and which sessions are blocked is listed only by the
                // namespace's management API.
                warn!(
                    "[resolver] retention: nothing is pruned on Service Bus (the blocked \
                     sessions whose records must stay cannot be listed over AMQP); the \
                     Resolver store keeps every event"
                );
                return;
            }
            self.tasks.spawn(nimbus_resolver::run_retention(
                Arc::clone(&self.bus),
                Arc::clone(&self.resolver),
                keep_for,
                self.shutdown.clone(),
            ));
        }
    }

    fn spawn_supervisor(&self, supervisor: Supervisor) {
        let mut changes = self.registry.subscribe();
        let shutdown = self.shutdown.clone();
        self.tasks.spawn(async move {
            loop {
                tokio::select! {
                    () = shutdown.cancelled() => break,
                    changed = changes.changed() => {
                        if changed.is_err() {
                            break;
                        }
                    }
                }
                let snapshot = changes.borrow_and_update().clone();
                if let Err(e) = supervisor.sync(snapshot).await {
                    // `{e:#}`: the whole chain, or the log says only "provisioning".
                    error!(
                        error = %format_args!("{e:#}"),
                        "updating the topology after a handler change failed"
                    );
                }
            }
        });
    }
}

/// Keeps the broker topology and the running endpoints in step with the
/// handlers the registry serves.
struct Supervisor {
    bus: Arc<Bus>,
    registry: Arc<Registry>,
    config: ValidConfig,
    policies: Arc<Policies>,
    retrying: Arc<Retrying>,
    pauses: Arc<Pauses>,
    control_key: ControlKey,
    handler_calls: Arc<AtomicUsize>,
    processor: ProcessorSettings,
    shutdown: CancellationToken,
    tasks: TaskTracker,
    running: Mutex<BTreeSet<String>>,
}

impl Supervisor {
    fn new(host: &Host) -> Supervisor {
        Supervisor {
            bus: Arc::clone(&host.bus),
            registry: Arc::clone(&host.registry),
            config: host.config.clone(),
            policies: Arc::new(wiring::policies(&host.config)),
            retrying: Arc::clone(&host.retrying),
            pauses: Arc::clone(&host.pauses),
            control_key: host.control_key.clone(),
            handler_calls: Arc::clone(&host.handler_calls),
            processor: wiring::processor_settings(&host.config),
            shutdown: host.shutdown.clone(),
            tasks: host.tasks.clone(),
            running: Mutex::new(BTreeSet::new()),
        }
    }

    /// The topology the snapshot's handlers need.
    fn topology(&self, snapshot: &Snapshot) -> Topology {
        let mut topology = wiring::base_topology(&self.config);
        for endpoint in snapshot.endpoints() {
            let consumed: Vec<String> = snapshot
                .event_types(endpoint)
                .into_iter()
                .map(str::to_owned)
                .collect();
            topology = topology
                .endpoint(nimbus_wire::topology::Endpoint::new(endpoint).consumes(consumed));
        }
        topology
    }

    /// Provisions what the snapshot needs (on Service Bus: checks it is
    /// there), and starts endpoints not yet running.
    async fn sync(&self, snapshot: Arc<Snapshot>) -> anyhow::Result<()> {
        let topology = self.topology(&snapshot);
        match &*self.bus {
            Bus::Embedded(broker) => provision_embedded(broker, &topology, &snapshot).await?,
            Bus::ServiceBus(namespace) => self.check_namespace(namespace, &topology).await?,
        }
        let mut running = self.running.lock().await;
        for endpoint in snapshot.endpoints() {
            if running.insert(endpoint.to_owned()) {
                self.start_endpoint(endpoint);
            }
        }
        Ok(())
    }

    /// On Service Bus the namespace's entities are made outside nimbus
    /// (decision 0138): refuses, naming each one, when any the handlers
    /// need is missing, so no endpoint starts to fail on it.
    async fn check_namespace(
        &self,
        namespace: &ServiceBus,
        topology: &Topology,
    ) -> anyhow::Result<()> {
        let missing = self
            .bus
            .missing(topology)
            .await
            .context("checking the namespace's topics and subscriptions")?;
        if missing.is_empty() {
            info!(
                namespace = %namespace.host(),
                "every topic and subscription the handlers need is on the namespace (their \
                 settings and forwarding rules are not checked over AMQP)"
            );
            return Ok(());
        }
        let list: Vec<String> = missing.iter().map(|m| format!("  - {m}")).collect();
        anyhow::bail!(
            "the Service Bus namespace {} lacks {} of the topics and subscriptions the handlers \
             need, and nimbus cannot create them over AMQP (it does not call the namespace's \
             management API yet). Create them (Azure portal, Bicep, `az servicebus`), topics \
             first, then start again:\n{}\nEach subscription must have exactly the rules listed: \
             the portal and `az` give a new one a `$Default` rule (1=1) that matches everything; \
             delete it where it is not listed. Turn on duplicate detection on every topic (a window \
             of 10 minutes or more): where Service Bus cannot settle in one step, a message \
             handled again after a crash republishes its follow-ups with the same ids, and \
             duplicate detection drops them (decision 0137).",
            namespace.host(),
            missing.len(),
            list.join("\n")
        )
    }

    fn start_endpoint(&self, name: &str) {
        let endpoint = wiring::endpoint(
            &self.config,
            name,
            Arc::new(
                SandboxHandlers::new(Arc::clone(&self.registry))
                    .counting_calls_in(Arc::clone(&self.handler_calls)),
            ),
            Arc::clone(&self.policies),
            format!("nimbus {VERSION}"),
            Arc::clone(&self.retrying),
            self.pauses.reader(name),
            self.control_key.clone(),
        );
        if self.pauses.paused_since(name).is_some() {
            warn!(
                endpoint = name,
                "endpoint started paused: its events wait in its queue until `nimbus resume {name}`"
            );
        }
        info!(endpoint = name, "endpoint started");
        wiring::spawn_endpoint(
            &self.tasks,
            &self.bus,
            Arc::new(endpoint),
            self.processor,
            &self.shutdown,
        );
    }
}

/// Opens what `[broker] kind` names: the broker in `broker_dir`, or a
/// connection to the namespace.
async fn open_bus(config: &ValidConfig, broker_dir: &std::path::Path) -> anyhow::Result<Bus> {
    let broker = &config.config.broker;
    match broker.kind {
        BrokerKind::Embedded => {
            let opened = Broker::open(
                BrokerOptions::new(broker_dir)
                    .durability(broker.durability.into())
                    .max_request_bytes(config.broker_max_request_bytes),
            )
            .await
            .with_context(|| format!("opening the broker in {}", broker_dir.display()))?;
            Ok(Bus::Embedded(Arc::new(opened)))
        }
        BrokerKind::ServiceBus => {
            let Some(connection_string) = &config.connection_string else {
                anyhow::bail!(
                    "broker.connection_string: broker.kind is \"servicebus\" and no connection \
                     string is given"
                );
            };
            let connected = match &config.namespace_roots {
                None => ServiceBus::connect(connection_string).await,
                Some(roots) => ServiceBus::connect_trusting(connection_string, roots).await,
            };
            let namespace = connected
                .context("connecting to the Service Bus namespace (broker.connection_string)")?;
            info!(namespace = %namespace.host(), "connected to the Service Bus namespace");
            Ok(Bus::ServiceBus(namespace))
        }
    }
}

/// Provisions the embedded broker for `topology` and prunes forwarding for
/// event types no longer handled.
///
/// An endpoint with a handler file that has never loaded (broken at
/// start-up, so no earlier version serves) keeps its forwarding as it was:
/// that handler's event types are unknown, and pruning would have the
/// broker drop its events until it is fixed. They wait in the endpoint's
/// queue instead.
async fn provision_embedded(
    broker: &Broker,
    topology: &Topology,
    snapshot: &Snapshot,
) -> anyhow::Result<()> {
    let report = nimbus_wire::topology::provision(broker, topology)
        .await
        .context("provisioning")?;
    let unknown = snapshot.endpoints_not_loading();
    for endpoint in &unknown {
        warn!(
            endpoint,
            "a handler of this endpoint does not load; its forwarding is kept as it was \
             (the handler's event types are unknown until it loads), so its events are not \
             dropped: they wait in the endpoint's queue while no handler of it runs, and \
             fail (HandlerNotLoaded), blocking their sessions, while others do; fix it, then \
             resubmit those"
        );
    }
    let pruned = nimbus_wire::topology::prune(broker, topology, &unknown)
        .await
        .context("pruning forwarding for removed event types")?;
    for mutation in report.mutations.iter().chain(&pruned.mutations) {
        info!(%mutation, "topology updated");
    }
    for drift in &report.drift {
        warn!(%drift, "a subscription's settings differ from the configuration; left as it is");
    }
    Ok(())
}
