//! `nimbus run` and `nimbus check`: load and validate the configuration
//! (nothing starts when a key is wrong), then run the host and its API
//! until Ctrl-C or SIGTERM, shutting down in two stages: stop taking work,
//! then drain in-flight deliveries within the configured grace.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context as _, anyhow};
use nimbus_runtime::{ApiState, Config, DataLock, Host, ResolverStoreStart, VERSION, ValidConfig};

use crate::cli_ops::{CheckConfigArgs, RunArgs};
use crate::output::outln;

/// The configuration file read when `--config` is not given.
const DEFAULT_CONFIG: &str = "nimbus.toml";

/// Loads `path`, or `./nimbus.toml` when present, else the defaults rooted
/// at the current directory, with what the environment adds. The error
/// names the file and the key.
pub(super) fn load(path: Option<&Path>) -> anyhow::Result<(ValidConfig, String)> {
    load_config(path, true)
}

/// [`load`] without the environment's part (`NIMBUS_API_TOKEN`, the token
/// an API beyond loopback needs): for commands that read the files of a
/// data directory and start no API.
pub(super) fn load_offline(path: Option<&Path>) -> anyhow::Result<(ValidConfig, String)> {
    load_config(path, false)
}

fn load_config(path: Option<&Path>, environment: bool) -> anyhow::Result<(ValidConfig, String)> {
    let cwd = std::env::current_dir().context("reading the current directory")?;
    let file: Option<PathBuf> = match path {
        Some(path) => Some(cwd.join(path)),
        None => Some(cwd.join(DEFAULT_CONFIG)).filter(|p| p.is_file()),
    };
    let (config, source, shown) = match file {
        Some(file) => (
            Config::load(&file),
            file.clone(),
            file.display().to_string(),
        ),
        None => (
            Config::defaults(&cwd),
            PathBuf::from("(defaults)"),
            format!(
                "built-in defaults (no {DEFAULT_CONFIG} in {})",
                cwd.display()
            ),
        ),
    };
    let config = if environment {
        config.and_then(|config| config.with_environment(&source))
    } else {
        config
    };
    Ok((config.map_err(|e| anyhow!("{e}"))?, shown))
}

pub(crate) fn check(args: &CheckConfigArgs) -> anyhow::Result<ExitCode> {
    let (config, source) = load(args.config.as_deref())?;
    let host = &config.config.host;
    // A damaged key file stops `run`, so it fails the check too.
    let key =
        nimbus_runtime::control::key_source(&config).map_err(|e| anyhow!("{source}: {e:#}"))?;
    outln!("{source}: valid");
    outln!("  api:      http://{}", config.config.api.listen);
    if let Some(amqp) = config.config.amqp.listen {
        outln!("  amqp:     amqp://{amqp}");
    }
    outln!("  data:     {}", host.data_dir.display());
    outln!("  handlers: {}", host.handlers_dir.display());
    outln!("  control key: {key}");
    Ok(ExitCode::SUCCESS)
}

pub(crate) fn run(args: &RunArgs) -> anyhow::Result<ExitCode> {
    let (config, source) = load(args.config.as_deref())?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let resolver_start = if args.new_resolver_store {
        ResolverStoreStart::New
    } else {
        ResolverStoreStart::Existing
    };
    runtime.block_on(serve(config, source, resolver_start))?;
    Ok(ExitCode::SUCCESS)
}

async fn serve(
    config: ValidConfig,
    source: String,
    resolver_start: ResolverStoreStart,
) -> anyhow::Result<()> {
    let listen = config.config.api.listen;
    let data_dir = config.config.host.data_dir.clone();
    let handlers_dir = config.config.host.handlers_dir.clone();
    let grace = config.config.engine.shutdown_grace;
    let idle_timeout = config.config.api.idle_timeout;
    // Listening from the start: a supervisor that stops the host while it
    // starts, or just after its banner, would otherwise meet the default
    // action and kill it without the drain. A signal that comes while it
    // starts is taken once it runs.
    let mut signals = Signals::listen()?;
    // The data directory first: a second host on it is refused naming the
    // first, not for the port they share.
    let mut data_lock = DataLock::take(&data_dir, listen)?;
    // Bind before anything starts: a taken port stops the host cleanly.
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("cannot listen on {listen} ([api] listen in {source})"))?;
    let address = listener
        .local_addr()
        .context("reading the API's bound address")?;
    data_lock.record_api(address);
    let amqp =
        match config.config.amqp.listen {
            Some(listen) => Some(tokio::net::TcpListener::bind(listen).await.with_context(
                || format!("cannot listen on {listen} ([amqp] listen in {source})"),
            )?),
            None => None,
        };
    let amqp_keys: Vec<_> = config
        .config
        .amqp
        .keys
        .iter()
        .map(nimbus_runtime::config::AmqpKey::shared_access_key)
        .collect();
    let max_message_bytes = config.config.amqp.max_message_bytes();
    let config_max_connections = config.config.amqp.max_connections;
    // Before the endpoint and the API take connections: each is a file.
    let open_files = nimbus_runtime::open_files::raise();
    let amqp_tls = config.amqp_tls.clone();
    let amqp_scheme = if amqp_tls.is_some() { "amqps" } else { "amqp" };
    // Beyond loopback, `load` made sure there is a token.
    let host = Host::start_locked(config, data_lock, resolver_start).await?;
    let (stop_amqp, amqp_stopped) = tokio::sync::oneshot::channel::<()>();
    let (amqp_address, amqp_task) = match amqp {
        Some(listener) => {
            let bound = listener
                .local_addr()
                .context("reading the AMQP endpoint's bound address")?;
            // Validation refuses `[amqp] listen` with broker.kind = "servicebus".
            let broker = host
                .broker()
                .context("[amqp] listen serves the embedded broker, and this host has none")?;
            let configured = config_max_connections;
            let connections = open_files.amqp_connections(configured);
            if connections < configured {
                tracing::warn!(
                    configured,
                    serving = connections,
                    open_file_limit = ?open_files.soft,
                    "the process may open too few files for [amqp] max_connections: the endpoint \
                     serves fewer, keeping {} for the API and the data files (raise the hard \
                     limit, e.g. `ulimit -Hn`, LimitNOFILE= in a systemd unit)",
                    nimbus_runtime::open_files::RESERVE
                );
            }
            // SDK clients may not claim the Manager's authority: a control
            // request or `From = Manager` needs the Manager's signature
            // (another host's Manager publishing here has it).
            let mut endpoint = nimbus_amqp::Endpoint::new(
                std::sync::Arc::clone(broker),
                amqp_keys,
                max_message_bytes,
            )
            .with_max_connections(connections)
            .with_publish_check(nimbus_runtime::control::publish_check(
                host.control_key().clone(),
            ));
            if let Some(tls) = amqp_tls {
                endpoint = endpoint.with_tls(tls);
            }
            let task = tokio::spawn(endpoint.serve(listener, async move {
                let _ = amqp_stopped.await;
            }));
            (Some(bound), Some(task))
        }
        None => (None, None),
    };

    let (stop_api, api_stopped) = tokio::sync::oneshot::channel::<()>();
    let router = nimbus_runtime::router(ApiState::new(&host).listening_on(address));
    let mut api = tokio::spawn(nimbus_runtime::serve(
        listener,
        router,
        idle_timeout,
        async move {
            let _ = api_stopped.await;
        },
    ));

    // For whoever started the host: a stdout nobody reads (closed, or a
    // pipe to a process that exited) must not stop the host, as a panicking
    // `println!` would.
    let amqp_line = amqp_address
        .map(|a| format!("AMQP:     {amqp_scheme}://{a}\n"))
        .unwrap_or_default();
    let bus_line = match host.bus().as_ref() {
        nimbus_runtime::Bus::Embedded(_) => String::new(),
        nimbus_runtime::Bus::ServiceBus(namespace) => {
            format!("bus:      Service Bus namespace {}\n", namespace.host())
        }
    };
    let banner = format!(
        "nimbus {VERSION} running ({source})\n\
         API:      http://{address}\n\
         {amqp_line}\
         {bus_line}\
         data:     {}\n\
         handlers: {}\n\
         Stop with Ctrl-C or SIGTERM: in-flight deliveries finish first.\n",
        data_dir.display(),
        handlers_dir.display()
    );
    let mut stdout = std::io::stdout();
    let _ = stdout
        .write_all(banner.as_bytes())
        .and_then(|()| stdout.flush());

    let outcome = tokio::select! {
        signal = signals.next() => {
            let _ = writeln!(
                std::io::stderr(),
                "{signal}; shutting down: events in flight have up to {} to finish \
                 ({signal} again stops at once)",
                humantime::format_duration(grace)
            );
            let _ = stop_api.send(());
            api.await.context("the API task failed")?.context("serving the API")
        }
        served = &mut api => {
            served.context("the API task failed")?.context("serving the API")
        }
    };
    // No more publishes over AMQP either, however the API ended: the drain
    // must not meet new work.
    let _ = stop_amqp.send(());
    if let Some(task) = amqp_task {
        let _ = task.await;
    }
    // Stage two: the host stops taking sessions and drains within its grace;
    // a second signal stops at once, as a killed process would: what was
    // in flight is not settled, and the broker delivers it again.
    tokio::select! {
        () = host.shutdown() => {}
        again = signals.next() => {
            let _ = writeln!(
                std::io::stderr(),
                "{} again: stopping now; the events still in flight are delivered again \
                 when the host next runs",
                again
            );
            std::process::exit(130);
        }
    }
    let _ = writeln!(std::io::stderr(), "nimbus stopped");
    outcome
}

/// Ctrl-C (SIGINT) and SIGTERM, listened for from the moment this is made.
struct Signals {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
}

impl Signals {
    fn listen() -> anyhow::Result<Signals> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Signals {
            interrupt: signal(SignalKind::interrupt()).context("listening for Ctrl-C")?,
            terminate: signal(SignalKind::terminate()).context("listening for SIGTERM")?,
        })
    }

    /// Waits for the next one; says which.
    async fn next(&mut self) -> &'static str {
        tokio::select! {
            _ = self.interrupt.recv() => "Ctrl-C",
            _ = self.terminate.recv() => "SIGTERM",
        }
    }
}
