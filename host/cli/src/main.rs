//! The `nimbus` command: the operator's and handler author's entry point.
//!
//! `main` only parses, runs and maps the result to an exit code; each
//! subcommand lives in its own module under `commands/`, so later commands
//! (`run`, `publish`, `events`, ...) slot in beside `handlers` and `invoke`.
//! Errors are `anyhow` here, at the edge, with context naming the file,
//! directory or event type involved.

mod api_client;
mod cli;
mod cli_ops;
mod commands;
mod escape;
mod output;

use std::process::ExitCode;

use crate::output::{EXIT_ERROR, errln};

use clap::{CommandFactory as _, FromArgMatches as _};

/// The broker and engine allocate per message; mimalloc cuts the CPU per
/// message by about a third against glibc's allocator (decision record 0022).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let matches = cli::Cli::command().get_matches();
    // `--api` is global so every client command takes it, but only a value
    // typed on the command line (not NIMBUS_API) is a mistake elsewhere.
    let api_typed = matches.value_source("api") == Some(clap::parser::ValueSource::CommandLine);
    let cli = cli::Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    // Held to the end of `main`: dropping it writes out what is queued.
    // What a command reports itself is held back from the log, where it
    // would be said twice: the bench's failures are asked for
    // (`--failure-rate`), and `handlers list` prints every load error and
    // layout problem it finds.
    let quiet = match &cli.command {
        cli::Command::Bench(_) => Some("nimbus_engine::delivery=error"),
        cli::Command::Handlers(cli::HandlersArgs {
            command: Some(cli::HandlersCommand::List(_)),
            ..
        }) => Some("nimbus_sandbox::registry=error"),
        _ => None,
    };
    let _log_writer = init_tracing(cli.verbose, quiet);
    match commands::run(cli, api_typed) {
        Ok(code) => code,
        Err(error) => {
            errln!("error: {error:#}");
            ExitCode::from(EXIT_ERROR)
        }
    }
}

/// Logs go to stderr so stdout stays clean JSON; `RUST_LOG` overrides.
///
/// Lines are written by a thread of their own: a handler's log records are
/// emitted from the engine's async workers, which must not wait on a slow
/// stderr (a pipe into a log shipper that stalls). Nothing is dropped: past
/// its queue of lines the writer makes the logger wait, as a direct write
/// would.
fn init_tracing(verbose: u8, quiet: Option<&str>) -> tracing_appender::non_blocking::WorkerGuard {
    let level = match verbose {
        0 => "warn",
        1 => "info",
        _ => "debug",
    };
    // `quiet` holds back what a command expects, at the default level only.
    let default = match quiet {
        Some(quiet) if verbose == 0 => format!("{level},{quiet}"),
        _ => level.to_owned(),
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let (writer, guard) = tracing_appender::non_blocking::NonBlockingBuilder::default()
        .lossy(false)
        .thread_name("nimbus-log")
        .finish(std::io::stderr());
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer)
        .init();
    guard
}
