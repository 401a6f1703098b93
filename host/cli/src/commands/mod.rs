//! One module per subcommand; `run` dispatches.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use nimbus_sandbox::{Sandbox, SandboxConfig};

use crate::cli::{CacheArgs, Cli, Command, HandlersCommand};

pub(crate) mod bench;
mod client;
mod handlers;
mod invoke;
mod run;

pub(crate) fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let api = cli.api;
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
        command => client::run(&api, command),
    }
}

/// The sandbox every command uses: defaults, plus the cache choice.
fn sandbox(cache: &CacheArgs) -> anyhow::Result<Sandbox> {
    let cache_dir = if cache.no_cache {
        None
    } else {
        cache.cache_dir.clone().or_else(default_cache_dir)
    };
    let config = SandboxConfig {
        cache_dir,
        ..SandboxConfig::default()
    };
    Sandbox::new(config).context("cannot start the sandbox")
}

fn default_cache_dir() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cache")))?;
    Some(base.join("nimbus").join("compiled"))
}
