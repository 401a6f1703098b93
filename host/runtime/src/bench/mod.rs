//! `nimbus bench`: a load generator against the whole stack on the embedded
//! broker, in the manner of `pgbench` or `redis-benchmark`.
//!
//! Each run starts a fresh stack in a temp dir — embedded broker, topology,
//! the endpoint's session processor and replayer, the Resolver on SQLite,
//! the Manager, all with the host's default configuration — publishes bench
//! events to the producer topic as an external publisher does, and measures
//! **end to end**: from the moment an event was published (closed loop) or
//! fell due (open loop) to the moment the Resolver has committed its final
//! status. So every stage a production event passes is in the figure:
//! broker publish and forwarding, session accept, the handler, settlement
//! with the response, forwarding to the Resolver, the Resolver's commit.
//!
//! The key decision: the same load runs through the sandbox and through a
//! native Rust implementation of the engine's [`nimbus_engine::Handlers`]
//! seam, in one invocation, so the sandbox's cost is a ratio measured on the
//! same machine at the same moment, not a figure compared across runs. The
//! throughput the stack sustains is measured closed loop (bounded in-flight
//! per session); latency at half that rate open loop, from when each event
//! was due, so falling behind shows (docs/decisions/0100).

mod discard;
mod load;
mod native;
mod report;
mod rig;
mod soak;
mod stats;
mod threads;
mod watch;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, bail};
use nimbus_engine::Handlers;
use nimbus_sandbox::{Registry, Sandbox, SandboxConfig};
use tokio::sync::mpsc;

pub use load::OnFailure;
pub use nimbus_broker::Durability;
pub use report::{BenchReport, ModeReport, PhaseReport};
pub use rig::ResolverStoreChoice;
pub use soak::{SoakOptions, SoakReport, SoakWindow};
pub use stats::{BURST_GAP, Percentiles, TailBursts};
pub use threads::{BusiestThread, ThreadShare};

use crate::handlers::SandboxHandlers;
use load::{EventSource, Tracker};
use rig::{ENDPOINT, Rig, RigSpec};

/// Which handler the load runs through.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HandlerChoice {
    /// `tests/guests/noop`: completes without decoding the payload.
    Noop,
    /// `examples/orders`: deserializes an order and decides; its fail switch
    /// makes the failing events.
    Orders,
    /// Any component; the bench sends it the first event type it claims.
    Component(PathBuf),
}

/// Through what the handler runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// The wasm component in the sandbox.
    Wasm,
    /// The native Rust mirror of the handler.
    Native,
}

impl Mode {
    /// Its name in the report.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Wasm => "wasm",
            Mode::Native => "native",
        }
    }
}

/// What to run.
#[derive(Debug, Clone)]
pub struct BenchOptions {
    /// Sessions the load spreads over.
    pub sessions: usize,
    /// Events in each measured phase.
    pub events: u64,
    /// Events of the warm-up (not measured).
    pub warmup: u64,
    /// The size of each event's JSON payload, in bytes.
    pub payload_bytes: usize,
    /// The handler.
    pub handler: HandlerChoice,
    /// Where the built guest components are (`noop.wasm`, `orders.wasm`).
    pub guests_dir: PathBuf,
    /// The fraction of events whose handler fails (0 to 1).
    pub failure_rate: f64,
    /// What happens to a failed event.
    pub on_failure: OnFailure,
    /// The broker's durability.
    pub durability: Durability,
    /// The runs to make, in order (wasm, native, or both for the ratio).
    pub modes: Vec<Mode>,
    /// Events each session keeps in flight in the closed loop.
    pub window: usize,
    /// The open-loop rate in events/s; half the closed-loop throughput when
    /// `None`.
    pub rate: Option<f64>,
    /// Sessions the endpoint processes at once; `sessions` when `None`.
    pub engine_sessions: Option<usize>,
    /// Where the Resolver's records go.
    pub resolver_store: ResolverStoreChoice,
    /// After the two phases, hold the open loop's rate this long, read
    /// once a window.
    pub soak: Option<SoakOptions>,
}

impl Default for BenchOptions {
    fn default() -> Self {
        BenchOptions {
            sessions: 64,
            events: 20_000,
            warmup: 2_000,
            payload_bytes: 300,
            handler: HandlerChoice::Noop,
            guests_dir: PathBuf::from("target/wasm32-wasip2/release"),
            failure_rate: 0.0,
            on_failure: OnFailure::Skip,
            durability: Durability::Fsync,
            modes: vec![Mode::Wasm, Mode::Native],
            window: 1,
            rate: None,
            engine_sessions: None,
            resolver_store: ResolverStoreChoice::Sqlite,
            soak: None,
        }
    }
}

impl BenchOptions {
    /// Checks the options, naming each bad one.
    pub fn validate(&self) -> anyhow::Result<()> {
        let mut problems = Vec::new();
        if self.sessions == 0 {
            problems.push("sessions: must be at least 1".to_owned());
        }
        if self.events == 0 {
            problems.push("events: must be at least 1".to_owned());
        }
        if self.window == 0 {
            problems.push("window: must be at least 1".to_owned());
        }
        if self.engine_sessions == Some(0) {
            problems.push("engine-sessions: must be at least 1".to_owned());
        }
        if !(0.0..1.0).contains(&self.failure_rate) {
            problems.push(format!(
                "failure-rate: {} is not a fraction from 0 up to (not including) 1",
                self.failure_rate
            ));
        }
        if self.failure_rate > 0.0 && self.handler != HandlerChoice::Orders {
            problems.push(
                "failure-rate: only the orders handler has a fail switch; use --handler orders"
                    .to_owned(),
            );
        }
        if let Some(rate) = self.rate
            && !(rate.is_finite() && rate > 0.0)
        {
            problems.push(format!("rate: {rate} is not a positive number of events/s"));
        }
        if self.resolver_store == ResolverStoreChoice::Discard && self.failure_rate > 0.0 {
            problems.push(
                "resolver-store: discard keeps no failed event for the Manager to skip; use a \
                 failure rate of 0"
                    .to_owned(),
            );
        }
        if self.modes.is_empty() {
            problems.push("no run selected (wasm, native or both)".to_owned());
        }
        if matches!(self.handler, HandlerChoice::Component(_)) && self.modes.contains(&Mode::Native)
        {
            problems.push(
                "native: there is a native mirror only of noop and orders, not of a component path"
                    .to_owned(),
            );
        }
        if let Some(soak) = self.soak {
            if soak.duration.is_zero() {
                problems.push("duration: the soak must last longer than 0 s".to_owned());
            }
            if soak.every.is_zero() {
                problems.push("every: the soak's window must be longer than 0 s".to_owned());
            }
        }
        if problems.is_empty() {
            Ok(())
        } else {
            bail!("invalid bench options:\n{}", problems.join("\n"))
        }
    }
}

/// Runs every selected mode, one after the other, each on a fresh stack;
/// `progress` hears what is happening (for stderr).
pub async fn run(options: &BenchOptions, progress: &dyn Fn(&str)) -> anyhow::Result<BenchReport> {
    options.validate()?;
    let mut modes = Vec::new();
    for mode in &options.modes {
        modes.push(run_mode(options, *mode, progress).await?);
    }
    Ok(BenchReport {
        options: options.clone(),
        machine: report::machine(),
        modes,
    })
}

async fn run_mode(
    options: &BenchOptions,
    mode: Mode,
    progress: &dyn Fn(&str),
) -> anyhow::Result<ModeReport> {
    let dir = tempfile::Builder::new()
        .prefix("nimbus-bench-")
        .tempdir()
        .context("creating the bench's temp dir")?;
    let (event_type, handlers) = handlers_for(options, mode, dir.path())?;
    let (settled_tx, settled_rx) = mpsc::unbounded_channel();
    let rig = Rig::start(
        RigSpec {
            dir: dir.path(),
            durability: options.durability,
            event_type: &event_type,
            handlers,
            engine_sessions: options.engine_sessions.unwrap_or(options.sessions),
            resolver_store: options.resolver_store,
        },
        settled_tx,
    )
    .await?;
    let tracker = Tracker::new(options.on_failure);
    let collector = tokio::spawn(load::collect(
        Arc::clone(&tracker),
        settled_rx,
        Arc::clone(&rig.manager),
    ));
    let source = Arc::new(EventSource {
        run: mode.name().to_owned(),
        event_type,
        sessions: options.sessions,
        payload: payload_maker(&options.handler, options.payload_bytes),
        failure_rate: options.failure_rate,
    });
    let result = phases(options, mode, &rig, &tracker, &source, progress).await;
    let result = match (result, options.soak) {
        (Ok(mut report), Some(soak)) => {
            between_phases(&rig, progress).await;
            let rate = report.open.offered_rate.unwrap_or(1.0);
            progress(&format!(
                "{}: soak at {rate:.0} events/s for {}, a line every {}\n{}",
                mode.name(),
                humantime::format_duration(soak.duration),
                humantime::format_duration(soak.every),
                SoakWindow::HEADER
            ));
            let soaked = soak::run(
                &rig.broker,
                &*rig.store,
                &tracker,
                &source,
                dir.path(),
                rate,
                soak,
                &|window| progress(&window.row()),
            )
            .await;
            soaked.map(|soaked| {
                report.soak = Some(soaked);
                report
            })
        }
        (result, _) => result,
    };
    rig.stop().await;
    collector.abort();
    result
}

async fn phases(
    options: &BenchOptions,
    mode: Mode,
    rig: &Rig,
    tracker: &Arc<Tracker>,
    source: &Arc<EventSource>,
    progress: &dyn Fn(&str),
) -> anyhow::Result<ModeReport> {
    let name = mode.name();
    if options.warmup > 0 {
        progress(&format!("{name}: warming up ({} events)", options.warmup));
        load::closed_loop(
            &rig.broker,
            tracker,
            source,
            "warmup",
            options.warmup,
            options.window,
        )
        .await
        .context("warm-up")?;
        tracker.take();
        between_phases(rig, progress).await;
    }
    progress(&format!("{name}: closed loop ({} events)", options.events));
    let start = report::Probe::now(rig);
    load::closed_loop(
        &rig.broker,
        tracker,
        source,
        "closed",
        options.events,
        options.window,
    )
    .await
    .context("closed loop")?;
    let closed = start.finish(rig, tracker.take(), None);
    between_phases(rig, progress).await;
    let rate = options.rate.unwrap_or(closed.throughput / 2.0);
    progress(&format!(
        "{name}: open loop at {rate:.0} events/s ({} events)",
        options.events
    ));
    let start = report::Probe::now(rig);
    load::open_loop(&rig.broker, tracker, source, "open", options.events, rate)
        .await
        .context("open loop")?;
    let open = start.finish(rig, tracker.take(), Some(rate));
    Ok(ModeReport {
        mode,
        closed,
        open,
        soak: None,
    })
}

/// Waits until the stack has let go of the last phase's sessions. Each
/// phase publishes to sessions of its own (a session left blocked by one
/// phase must not park the next one's events); a worker holds a session
/// until it has been quiet for the idle timeout, so without this pause the
/// next phase's first events would wait for that timeout and its latency
/// would measure the phase change, not the stack.
async fn between_phases(rig: &Rig, progress: &dyn Fn(&str)) {
    let pause = rig.session_release + Duration::from_millis(250);
    progress(&format!(
        "letting the last phase's sessions go ({} ms)",
        pause.as_millis()
    ));
    tokio::time::sleep(pause).await;
}

/// The event type and the handlers of a mode.
fn handlers_for(
    options: &BenchOptions,
    mode: Mode,
    dir: &Path,
) -> anyhow::Result<(String, Arc<dyn Handlers>)> {
    let (component, event_type): (PathBuf, Option<&str>) = match &options.handler {
        HandlerChoice::Noop => (options.guests_dir.join("noop.wasm"), Some("Noop")),
        HandlerChoice::Orders => (options.guests_dir.join("orders.wasm"), Some("OrderPlaced")),
        HandlerChoice::Component(path) => (path.clone(), None),
    };
    if mode == Mode::Native {
        let handlers: Arc<dyn Handlers> = match options.handler {
            HandlerChoice::Orders => Arc::new(native::NativeOrders),
            _ => Arc::new(native::NativeNoop),
        };
        let event_type = event_type.context("no native mirror of a component path")?;
        return Ok((event_type.to_owned(), handlers));
    }
    let handlers_dir = dir.join("handlers");
    let endpoint_dir = handlers_dir.join(ENDPOINT);
    std::fs::create_dir_all(&endpoint_dir)
        .with_context(|| format!("creating {}", endpoint_dir.display()))?;
    let file_name = component
        .file_name()
        .with_context(|| format!("{} names no file", component.display()))?;
    std::fs::copy(&component, endpoint_dir.join(file_name)).with_context(|| {
        format!(
            "reading the component {} (build the guests with scripts/build-guests.sh, or point \
             --guests-dir at where they are)",
            component.display()
        )
    })?;
    let sandbox = Sandbox::new(SandboxConfig {
        cache_dir: Some(dir.join("cache")),
        ..SandboxConfig::default()
    })
    .context("starting the sandbox")?;
    let registry = Registry::open(sandbox, &handlers_dir)
        .with_context(|| format!("loading {}", component.display()))?;
    let claimed: Vec<String> = registry
        .snapshot()
        .event_types(ENDPOINT)
        .into_iter()
        .map(str::to_owned)
        .collect();
    let event_type = match event_type {
        Some(expected) if claimed.iter().any(|t| t == expected) => expected.to_owned(),
        Some(expected) => bail!(
            "{} does not handle {expected} (it claims {claimed:?}); is it the right build?",
            component.display()
        ),
        None => claimed.into_iter().next().with_context(|| {
            format!(
                "{} did not load or claims no event type (see `nimbus handlers check`)",
                component.display()
            )
        })?,
    };
    Ok((event_type, Arc::new(SandboxHandlers::new(registry))))
}

/// Payloads of about `bytes` bytes: the JSON the handler expects, padded.
fn payload_maker(
    handler: &HandlerChoice,
    bytes: usize,
) -> Arc<dyn Fn(u64, bool) -> String + Send + Sync> {
    let orders = *handler == HandlerChoice::Orders;
    Arc::new(move |n, fail| {
        let head = if orders {
            format!(
                r#"{{"OrderId":"o-{n}","Customer":"acme","Total":150.0,"Lines":[{{"Sku":"A-1","Quantity":2,"UnitPrice":75.0}}],"Fail":{fail},"Note":""#
            )
        } else {
            format!(r#"{{"Seq":{n},"Pad":""#)
        };
        let pad = bytes.saturating_sub(head.len() + 2);
        format!("{head}{}\"}}", "x".repeat(pad))
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;

    #[test]
    fn payloads_have_the_size_asked_and_parse() {
        for handler in [HandlerChoice::Noop, HandlerChoice::Orders] {
            let make = payload_maker(&handler, 300);
            let text = make(42, false);
            assert_eq!(text.len(), 300, "{handler:?}: {text}");
            let value: serde_json::Value = serde_json::from_str(&text).unwrap();
            assert!(value.is_object());
        }
        let order: serde_json::Value =
            serde_json::from_str(&payload_maker(&HandlerChoice::Orders, 10)(1, true)).unwrap();
        assert_eq!(order["Fail"], serde_json::Value::Bool(true));
    }

    #[test]
    fn bad_options_are_named() {
        let options = BenchOptions {
            sessions: 0,
            failure_rate: 0.1,
            rate: Some(-1.0),
            ..BenchOptions::default()
        };
        let err = options.validate().unwrap_err().to_string();
        for name in ["sessions", "failure-rate", "rate"] {
            assert!(err.contains(name), "{name} missing from: {err}");
        }
        let discard_with_failures = BenchOptions {
            handler: HandlerChoice::Orders,
            failure_rate: 0.1,
            resolver_store: ResolverStoreChoice::Discard,
            ..BenchOptions::default()
        };
        assert!(
            discard_with_failures
                .validate()
                .unwrap_err()
                .to_string()
                .contains("resolver-store")
        );
        let native_component = BenchOptions {
            handler: HandlerChoice::Component("x.wasm".into()),
            ..BenchOptions::default()
        };
        assert!(
            native_component
                .validate()
                .unwrap_err()
                .to_string()
                .contains("native")
        );
        assert!(BenchOptions::default().validate().is_ok());
    }

    /// `examples/nimbus.toml` is the configuration the demo runs with: it
    /// must pass the host's own validation, with the values it documents.
    #[test]
    fn example_configuration_is_valid() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/nimbus.toml");
        let valid = crate::Config::load(&path).unwrap();
        assert!(valid.config.host.handlers_dir.ends_with("handlers"));
        assert_eq!(
            valid.config.broker.durability,
            crate::config::DurabilityConfig::Fsync
        );
        assert_eq!(valid.config.api.listen.to_string(), "127.0.0.1:7300");
        assert!(
            valid.retry.default.is_none(),
            "a rejected order must block at once"
        );
    }
}
