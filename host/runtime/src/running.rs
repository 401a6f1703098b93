//! What `nimbus run` runs, assembled in one place: the [`Host`] (bus,
//! endpoints, Resolver, Manager), its HTTP API and, when `[amqp] listen`
//! is set, its AMQP endpoint; started in an order that refuses early, and
//! stopped in two stages (STYLE habit 19).
//!
//! The order matters and is the one thing to keep: the data directory's
//! lock first, so a second host on it is refused naming the first rather
//! than for the port they share; then both listeners, so a taken port
//! stops the host before anything starts; the open-file limit raised
//! before the endpoint and the API take connections (each is a file); then
//! the host; then the servers. The caller (the CLI) only listens for
//! signals, prints the banner, and says when to stop.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::{JoinError, JoinHandle};

use crate::api::{ApiState, router, serve};
use crate::config::ValidConfig;
use crate::data_lock::{DataLock, DataLockError};
use crate::host::Host;
use crate::resolver_store::ResolverStoreStart;
use crate::{amqp_endpoint, open_files};

/// What [`Host::run`] needs beyond the configuration.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// How errors name the configuration: its file, or the defaults.
    pub config_source: String,
    /// The operator's word on a Resolver store that is not there
    /// (`nimbus run --new-resolver-store`).
    pub resolver_start: ResolverStoreStart,
}

/// Why `nimbus run` could not start, or its API stopped serving.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunError {
    /// The data directory is another host's, or cannot be locked.
    #[error(transparent)]
    DataLock(#[from] DataLockError),
    /// A listener could not be bound.
    #[error("cannot listen on {address} ({key} in {config})")]
    Listen {
        /// The address configured.
        address: SocketAddr,
        /// The key that configures it (`[api] listen`, `[amqp] listen`).
        key: &'static str,
        /// The configuration, as [`RunOptions::config_source`] names it.
        config: String,
        /// Why.
        source: io::Error,
    },
    /// A bound listener's address could not be read.
    #[error("reading the {server}'s bound address")]
    BoundAddress {
        /// `API` or `AMQP endpoint`.
        server: &'static str,
        /// Why.
        source: io::Error,
    },
    /// `[amqp] listen` on a host without an embedded broker (validation
    /// refuses it with `[broker] kind = "servicebus"`).
    #[error("[amqp] listen serves the embedded broker, and this host has none")]
    NoEmbeddedBroker,
    /// The host itself did not start (broker, stores, handlers, topology).
    #[error(transparent)]
    Start(#[from] anyhow::Error),
    /// The API's task panicked or was cancelled.
    #[error("the API task failed")]
    ApiTask(#[source] JoinError),
    /// The API stopped serving with an error.
    #[error("serving the API")]
    Api(#[source] io::Error),
}

impl Host {
    /// Starts everything `nimbus run` runs: the host on its bus, the HTTP
    /// API on `[api] listen`, and the AMQP endpoint on `[amqp] listen`.
    ///
    /// # Errors
    ///
    /// [`RunError`] naming what did not start; nothing is left running.
    pub async fn run(config: ValidConfig, options: RunOptions) -> Result<Running, RunError> {
        let listen = config.config.api.listen;
        let mut data_lock = DataLock::take(&config.config.host.data_dir, listen)?;
        let api_listener = bind(listen, "[api] listen", &options.config_source).await?;
        let api_address = bound_address(&api_listener, "API")?;
        data_lock.record_api(api_address);
        let amqp_listener = match config.config.amqp.listen {
            Some(listen) => Some(bind(listen, "[amqp] listen", &options.config_source).await?),
            None => None,
        };
        let open_files = open_files::raise();
        // Beyond loopback, the configuration was refused without a token.
        let host = Host::start_locked(config, data_lock, options.resolver_start).await?;

        let amqp = match amqp_listener {
            Some(listener) => {
                let address = bound_address(&listener, "AMQP endpoint")?;
                let broker = host.broker().ok_or(RunError::NoEmbeddedBroker)?;
                let endpoint = amqp_endpoint::endpoint(
                    host.config(),
                    Arc::clone(broker),
                    host.control_key().clone(),
                    open_files,
                );
                let server = Server::spawn(|stop| endpoint.serve(listener, stop.wait()));
                Some((address, server))
            }
            None => None,
        };
        let idle_timeout = host.config().config.api.idle_timeout;
        let routes = router(ApiState::new(&host).listening_on(api_address));
        let api = Server::spawn(|stop| serve(api_listener, routes, idle_timeout, stop.wait()));
        Ok(Running {
            host,
            api,
            api_address,
            amqp,
        })
    }
}

/// Everything `nimbus run` runs, running. Stop it with
/// [`Running::stop_taking_work`], then [`Running::drain`].
pub struct Running {
    host: Host,
    api: Server<io::Result<()>>,
    api_address: SocketAddr,
    amqp: Option<(SocketAddr, Server<()>)>,
}

impl std::fmt::Debug for Running {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Running")
            .field("api_address", &self.api_address)
            .finish_non_exhaustive()
    }
}

impl Running {
    /// The host under the servers.
    pub fn host(&self) -> &Host {
        &self.host
    }

    /// Where the API listens (with `[api] listen` on port 0, the port
    /// chosen).
    pub fn api_address(&self) -> SocketAddr {
        self.api_address
    }

    /// The AMQP endpoint's URL (`amqps://` with TLS), when one is served.
    pub fn amqp_url(&self) -> Option<String> {
        let scheme = if self.host.config().amqp_tls.is_some() {
            "amqps"
        } else {
            "amqp"
        };
        self.amqp
            .as_ref()
            .map(|(address, _)| format!("{scheme}://{address}"))
    }

    /// Resolves if the API stops serving by itself. Cancel-safe: waiting
    /// again after it was dropped misses nothing.
    pub async fn api_ended(&mut self) {
        self.api.ended().await;
    }

    /// Stage one: the API stops taking requests and lets those in flight
    /// finish; then the AMQP endpoint stops, so the drain meets no new
    /// publishes. Answers how the API ended.
    ///
    /// # Errors
    ///
    /// [`RunError::Api`] or [`RunError::ApiTask`] when the API failed.
    pub async fn stop_taking_work(&mut self) -> Result<(), RunError> {
        let api = self.api.stop().await;
        if let Some((_, amqp)) = &mut self.amqp {
            let _ = amqp.stop().await;
        }
        match api {
            Some(Ok(served)) => served.map_err(RunError::Api),
            Some(Err(failed)) => Err(RunError::ApiTask(failed)),
            None => Ok(()),
        }
    }

    /// Stage two: the host stops taking sessions and drains its in-flight
    /// deliveries within `[engine] shutdown_grace` ([`Host::shutdown`]).
    pub async fn drain(self) {
        self.host.shutdown().await;
    }
}

/// A server on a task of its own, running until told to stop.
struct Server<T> {
    stop: Option<oneshot::Sender<()>>,
    task: Task<T>,
}

/// Where a server's task is: a finished `JoinHandle` must not be awaited
/// again, so what it returned is kept until asked for.
enum Task<T> {
    Running(JoinHandle<T>),
    Ended(Result<T, JoinError>),
    Answered,
}

impl<T: Send + 'static> Server<T> {
    /// Spawns what `serve` makes of the stop signal it is handed.
    fn spawn<F>(serve: impl FnOnce(StopSignal) -> F) -> Server<T>
    where
        F: Future<Output = T> + Send + 'static,
    {
        let (stop, stopped) = oneshot::channel();
        Server {
            stop: Some(stop),
            task: Task::Running(tokio::spawn(serve(StopSignal(stopped)))),
        }
    }

    /// Resolves once the task has ended; cancel-safe.
    async fn ended(&mut self) {
        if let Task::Running(handle) = &mut self.task {
            let ended = handle.await;
            self.task = Task::Ended(ended);
        }
    }

    /// Tells the server to stop, waits for it, and answers what it
    /// returned (`None` when that was answered before).
    async fn stop(&mut self) -> Option<Result<T, JoinError>> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.ended().await;
        match std::mem::replace(&mut self.task, Task::Answered) {
            Task::Ended(ended) => Some(ended),
            Task::Running(_) | Task::Answered => None,
        }
    }
}

/// The future a server is handed to know when to stop.
struct StopSignal(oneshot::Receiver<()>);

impl StopSignal {
    /// Resolves when the server is to stop (or its [`Server`] is gone).
    async fn wait(self) {
        let _ = self.0.await;
    }
}

async fn bind(
    address: SocketAddr,
    key: &'static str,
    config: &str,
) -> Result<TcpListener, RunError> {
    TcpListener::bind(address)
        .await
        .map_err(|source| RunError::Listen {
            address,
            key,
            config: config.to_owned(),
            source,
        })
}

fn bound_address(listener: &TcpListener, server: &'static str) -> Result<SocketAddr, RunError> {
    listener
        .local_addr()
        .map_err(|source| RunError::BoundAddress { server, source })
}
