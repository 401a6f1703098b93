//! `nimbus bench`: runs the load generator of `nimbus_runtime::bench` and
//! prints its report (progress on stderr, the report on stdout).

use std::path::PathBuf;
use std::process::ExitCode;

use crate::output::{errln, out};
use anyhow::Context as _;
use clap::{Args, ValueEnum};
use nimbus_runtime::bench::{
    self, BenchOptions, Durability, HandlerChoice, Mode, OnFailure, ResolverStoreChoice,
};

/// Load options, with the defaults of the target (noop handler, 64
/// sessions, 300-byte payloads, durable).
#[derive(Debug, Args)]
pub(crate) struct BenchArgs {
    /// Sessions the load spreads over.
    #[arg(long, default_value_t = 64)]
    sessions: usize,
    /// Events in each measured phase (closed loop, then open loop).
    #[arg(long, default_value_t = 20_000)]
    events: u64,
    /// Events to warm up with (not measured).
    #[arg(long, default_value_t = 2_000)]
    warmup: u64,
    /// Payload size in bytes.
    #[arg(long, value_name = "BYTES", default_value_t = 300)]
    payload: usize,
    /// `noop`, `orders`, or the path of a component (`.wasm`).
    #[arg(long, value_name = "noop|orders|FILE", default_value = "noop")]
    handler: String,
    /// Where `noop.wasm` and `orders.wasm` are [default: $NIMBUS_GUESTS_DIR,
    /// else ${CARGO_TARGET_DIR:-target}/wasm32-wasip2/release].
    #[arg(long, value_name = "DIR")]
    guests_dir: Option<PathBuf>,
    /// Fraction of events whose handler fails (orders only: its fail switch).
    #[arg(long, value_name = "FRACTION", default_value_t = 0.0)]
    failure_rate: f64,
    /// What becomes of a failed event: skipped through the Manager (its
    /// session goes on) or left blocking its session (later events park).
    #[arg(long, value_enum, default_value_t = OnFailureArg::Skip)]
    on_failure: OnFailureArg,
    /// The broker's durability.
    #[arg(long, value_enum, default_value_t = DurabilityArg::Fsync)]
    durability: DurabilityArg,
    /// Also run the same load through a native Rust handler and print the
    /// wasm/native ratios.
    #[arg(long)]
    native: bool,
    /// Run only the native handler.
    #[arg(long, conflicts_with = "native")]
    native_only: bool,
    /// Events each session keeps in flight in the closed loop.
    #[arg(long, default_value_t = 1)]
    window: usize,
    /// Open-loop rate in events/s [default: half the closed-loop throughput].
    #[arg(long, value_name = "EVENTS_PER_S")]
    rate: Option<f64>,
    /// Sessions the endpoint processes at once [default: --sessions].
    #[arg(long)]
    engine_sessions: Option<usize>,
    /// Where the Resolver's records go: `discard` writes none (the Resolver
    /// still consumes and settles every message), to compare with a run on
    /// SQLite for what the audit store costs. Not a host configuration.
    #[arg(long, value_enum, default_value_t = ResolverStoreArg::Sqlite)]
    resolver_store: ResolverStoreArg,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum ResolverStoreArg {
    /// SQLite, as the host runs it.
    Sqlite,
    /// Nowhere: no audit trail is written.
    Discard,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum OnFailureArg {
    Skip,
    Block,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum DurabilityArg {
    /// An acknowledged write survives power loss.
    Fsync,
    /// An acknowledged write survives a killed process.
    Os,
}

impl BenchArgs {
    fn options(&self) -> BenchOptions {
        let handler = match self.handler.as_str() {
            "noop" => HandlerChoice::Noop,
            "orders" => HandlerChoice::Orders,
            path => HandlerChoice::Component(PathBuf::from(path)),
        };
        let modes = if self.native_only {
            vec![Mode::Native]
        } else if self.native {
            vec![Mode::Wasm, Mode::Native]
        } else {
            vec![Mode::Wasm]
        };
        BenchOptions {
            sessions: self.sessions,
            events: self.events,
            warmup: self.warmup,
            payload_bytes: self.payload,
            handler,
            guests_dir: self.guests_dir.clone().unwrap_or_else(default_guests_dir),
            failure_rate: self.failure_rate,
            on_failure: match self.on_failure {
                OnFailureArg::Skip => OnFailure::Skip,
                OnFailureArg::Block => OnFailure::Block,
            },
            durability: match self.durability {
                DurabilityArg::Fsync => Durability::Fsync,
                DurabilityArg::Os => Durability::Os,
            },
            modes,
            window: self.window,
            rate: self.rate,
            engine_sessions: self.engine_sessions,
            resolver_store: match self.resolver_store {
                ResolverStoreArg::Sqlite => ResolverStoreChoice::Sqlite,
                ResolverStoreArg::Discard => ResolverStoreChoice::Discard,
            },
        }
    }
}

fn default_guests_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("NIMBUS_GUESTS_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    std::env::var_os("CARGO_TARGET_DIR")
        .filter(|d| !d.is_empty())
        .map_or_else(|| PathBuf::from("target"), PathBuf::from)
        .join("wasm32-wasip2/release")
}

pub(crate) fn run(args: &BenchArgs) -> anyhow::Result<ExitCode> {
    let options = args.options();
    options.validate()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let report = runtime.block_on(bench::run(&options, &|line: &str| errln!("{line}")))?;
    out!("{report}");
    Ok(ExitCode::SUCCESS)
}
