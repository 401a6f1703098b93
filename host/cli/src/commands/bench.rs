//! `nimbus bench`: runs the load generator of `nimbus_runtime::bench` and
//! prints its report (progress on stderr, the report on stdout).

use std::path::PathBuf;
use std::process::ExitCode;

use crate::cli::{BenchArgs, DurabilityArg, OnFailureArg, ResolverStoreArg};
use crate::output::{errln, out};
use anyhow::Context as _;
use nimbus_runtime::bench::{
    self, BenchOptions, Durability, HandlerChoice, Mode, OnFailure, ResolverStoreChoice,
    SoakOptions,
};

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
            soak: self.duration.map(|duration| SoakOptions {
                duration,
                every: self.every,
            }),
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
