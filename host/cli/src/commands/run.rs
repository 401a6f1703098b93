//! `nimbus run` and `nimbus check`: load and validate the configuration
//! (nothing starts when a key is wrong), then run what [`Host::run`]
//! assembles until Ctrl-C or SIGTERM, shutting down in two stages: stop
//! taking work, then drain in-flight deliveries within the configured grace.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context as _, anyhow};
use nimbus_runtime::{
    Bus, Config, Host, ResolverStoreStart, RunOptions, Running, VERSION, ValidConfig,
};

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
    let options = RunOptions {
        config_source: source,
        resolver_start: if args.new_resolver_store {
            ResolverStoreStart::New
        } else {
            ResolverStoreStart::Existing
        },
    };
    runtime.block_on(serve(config, options))?;
    Ok(ExitCode::SUCCESS)
}

/// Runs the host until a signal, then stops it in its two stages.
async fn serve(config: ValidConfig, options: RunOptions) -> anyhow::Result<()> {
    // Listening from the start: a supervisor that stops the host while it
    // starts, or just after its banner, would otherwise meet the default
    // action and kill it without the drain. A signal that comes while it
    // starts is taken once it runs.
    let mut signals = Signals::listen()?;
    let source = options.config_source.clone();
    let mut running = Host::run(config, options).await?;
    print_banner(&running, &source);

    tokio::select! {
        signal = signals.next() => {
            let grace = running.host().config().config.engine.shutdown_grace;
            let _ = writeln!(
                std::io::stderr(),
                "{signal}; shutting down: events in flight have up to {} to finish \
                 ({signal} again stops at once)",
                humantime::format_duration(grace)
            );
        }
        () = running.api_ended() => {}
    }
    // Stage one, however the API ended: no more requests, nor publishes
    // over AMQP, so the drain meets no new work.
    let outcome = running.stop_taking_work().await;
    // Stage two: the host stops taking sessions and drains within its grace;
    // a second signal stops at once, as a killed process would: what was
    // in flight is not settled, and the broker delivers it again.
    tokio::select! {
        () = running.drain() => {}
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
    Ok(outcome?)
}

/// For whoever started the host: where it listens and what it runs on. A
/// stdout nobody reads (closed, or a pipe to a process that exited) must not
/// stop the host, as a panicking `println!` would.
fn print_banner(running: &Running, source: &str) {
    let host = running.host();
    let amqp_line = running
        .amqp_url()
        .map(|url| format!("AMQP:     {url}\n"))
        .unwrap_or_default();
    let bus_line = match host.bus().as_ref() {
        Bus::Embedded(_) => String::new(),
        Bus::ServiceBus(namespace) => {
            format!("bus:      Service Bus namespace {}\n", namespace.host())
        }
    };
    let dirs = &host.config().config.host;
    let banner = format!(
        "nimbus {VERSION} running ({source})\n\
         API:      http://{}\n\
         {amqp_line}\
         {bus_line}\
         data:     {}\n\
         handlers: {}\n\
         Stop with Ctrl-C or SIGTERM: in-flight deliveries finish first.\n",
        running.api_address(),
        dirs.data_dir.display(),
        dirs.handlers_dir.display()
    );
    let mut stdout = std::io::stdout();
    let _ = stdout
        .write_all(banner.as_bytes())
        .and_then(|()| stdout.flush());
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
