//! One module per subcommand; `run` dispatches.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use nimbus_sandbox::{Limits, Sandbox, SandboxConfig};

use crate::cli::{CacheArgs, Cli, Command, HandlersCommand};

pub(crate) mod bench;
pub(crate) mod broker;
mod client;
mod handlers;
mod invoke;
mod run;

/// Runs the command; `api_typed` says `--api` was given on the command
/// line, which only the commands that talk to a running host use.
pub(crate) fn run(cli: Cli, api_typed: bool) -> anyhow::Result<ExitCode> {
    let api = cli.api;
    if api_typed && let Some(name) = local_command(&cli.command) {
        anyhow::bail!(
            "--api names the running host the client commands (publish, events, ...) talk to; \
             `nimbus {name}` does not take it. The host listens on `[api] listen` of its \
             configuration"
        );
    }
    match cli.command {
        Command::Run(args) => run::run(&args),
        Command::Check(args) => run::check(&args),
        Command::Handlers(args) => match args.command {
            Some(HandlersCommand::Check(args)) => handlers::check(&args),
            Some(HandlersCommand::List(args)) => handlers::list(&args),
            None => client::handlers(&api, args.json),
        },
        Command::Invoke(args) => invoke::run(&args),
        Command::Bench(args) => bench::run(&args),
        Command::Broker(command) => broker::run(&command),
        command => client::run(&api, command),
    }
}

/// The name of a command that does not talk to a running host.
fn local_command(command: &Command) -> Option<&'static str> {
    match command {
        Command::Run(_) => Some("run"),
        Command::Check(_) => Some("check"),
        Command::Handlers(args) => match args.command {
            Some(HandlersCommand::Check(_)) => Some("handlers check"),
            Some(HandlersCommand::List(_)) => Some("handlers list"),
            None => None,
        },
        Command::Invoke(_) => Some("invoke"),
        Command::Bench(_) => Some("bench"),
        Command::Broker(_) => Some("broker verify"),
        _ => None,
    }
}

/// The sandbox every command uses: defaults, plus the cache choice.
fn sandbox(cache: &CacheArgs) -> anyhow::Result<Sandbox> {
    let cache_dir = if cache.no_cache {
        None
    } else {
        cache.cache_dir.clone().or_else(default_cache_dir)
    };
    let mut config = SandboxConfig {
        cache_dir,
        ..SandboxConfig::default()
    };
    if let Some(path) = &cache.config {
        let host = nimbus_runtime::Config::load(path)?;
        config.default_limits = Limits {
            memory_bytes: host.sandbox_memory_bytes,
            timeout: host.config.sandbox.timeout,
            ..Limits::default()
        };
        config.max_concurrent_instances = host.config.sandbox.max_concurrent_instances;
    }
    Sandbox::new(config).context("cannot start the sandbox")
}

fn default_cache_dir() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cache")))?;
    Some(base.join("nimbus").join("compiled"))
}
