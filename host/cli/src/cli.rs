//! The command line, declared with clap's derive API.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::cli_ops::{
    ApiArgs, CheckConfigArgs, DlqCommand, EndpointArgs, EndpointsArgs, EventArgs, EventsArgs,
    HandoffCommand, PublishArgs, ResubmitArgs, RunArgs, SessionsArgs, SkipArgs,
};

/// nimbus: event handlers as sandboxed WebAssembly components, with NimBus
/// delivery semantics.
#[derive(Debug, Parser)]
#[command(name = "nimbus", version, long_about = None)]
pub(crate) struct Cli {
    /// More log output on stderr (-v info, -vv debug); RUST_LOG overrides.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub(crate) verbose: u8,

    #[command(flatten)]
    pub(crate) api: ApiArgs,

    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Run the host: embedded broker, handlers with hot swap, session
    /// processors, Resolver, the HTTP API and, with `[amqp] listen`, the
    /// AMQP endpoint Service Bus SDKs publish to, until Ctrl-C or SIGTERM.
    Run(RunArgs),
    /// Validate a configuration file without starting anything.
    Check(CheckConfigArgs),
    /// Publish an event to the running host; prints its message id.
    Publish(PublishArgs),
    /// List events from the running host's Resolver.
    Events(EventsArgs),
    /// Show one event (by event id or message id): status, error, handler version, full history.
    Event(EventArgs),
    /// Run the handler on an event again (its recorded or an edited payload).
    /// A parked event runs now, out of turn; if that settles it, its parked
    /// copy is dropped when the session replays. `--all` resubmits every
    /// Failed event a filter names (`--dry-run` first to see which).
    Resubmit(ResubmitArgs),
    /// Settle an event as Skipped without running the handler, unblocking
    /// its session; a parked event's copy is dropped when the session
    /// replays. `--all` skips every Failed event a filter names.
    Skip(SkipArgs),
    /// Complete or fail the external job of an event pending a handoff.
    #[command(subcommand)]
    Handoff(HandoffCommand),
    /// List sessions with their state: which event blocks them and why
    /// (Failed, or Pending/Handoff), how many events are parked, and how many of those the operator already settled
    /// (dropped, not run, when the session replays).
    Sessions(SessionsArgs),
    /// Dead-lettered messages: list, replay, and remove those whose event
    /// has since been settled.
    #[command(subcommand)]
    Dlq(DlqCommand),
    /// The running host's handlers (versions serving, last swap, load
    /// errors); `handlers check` and `handlers list` inspect files instead.
    Handlers(HandlersArgs),
    /// The running host's endpoints, and which an operator paused.
    Endpoints(EndpointsArgs),
    /// Pause an endpoint: it takes no new sessions and lets go of those in
    /// hand after the message each is on, so its events wait in its queue
    /// (e.g. while a system its handlers call is down) instead of failing
    /// and blocking their sessions. It stays paused across restarts.
    Pause(EndpointArgs),
    /// Resume a paused endpoint: its waiting events run, in order.
    Resume(EndpointArgs),
    /// Run one event through its handler in the sandbox and print the result
    /// as JSON. Exit code 0 when the handler completed or handed off, 3 when
    /// it returned an error (including Trap, Timeout, MemoryLimit, Panic),
    /// 1 when the event could not be run at all.
    Invoke(InvokeArgs),
    /// Load-test the whole stack (embedded broker, engine, handler, Resolver)
    /// in a temp dir: events/s and end-to-end latency p50/p99/max, closed
    /// loop then open loop at half the throughput; `--native` adds the same
    /// load through a native handler for the sandbox's cost as a ratio.
    Bench(BenchArgs),
    /// The embedded broker's files, offline: `broker verify` checks the log
    /// of a data directory no host is running on.
    #[command(subcommand)]
    Broker(BrokerCommand),
}

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub(crate) struct HandlersArgs {
    #[command(subcommand)]
    pub(crate) command: Option<HandlersCommand>,
    /// Print JSON instead of a table (the running host's handlers).
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Subcommand)]
pub(crate) enum HandlersCommand {
    /// Validate one component: compile it, instantiate it, ask for its event
    /// types; print them with its imports, exports, digest and limits.
    Check(CheckArgs),
    /// List the handlers of a handlers directory (one subdirectory per
    /// endpoint) with their status; exits 1 when a handler does not load,
    /// or none is found (a deploy's pre-check).
    List(ListArgs),
}

/// Where compiled components are cached.
#[derive(Debug, Args)]
pub(crate) struct CacheArgs {
    /// Compile cache directory [default: $XDG_CACHE_HOME/nimbus/compiled or
    /// ~/.cache/nimbus/compiled].
    #[arg(long, value_name = "DIR", conflicts_with = "no_cache")]
    pub(crate) cache_dir: Option<PathBuf>,
    /// Compile every component, neither reading nor writing the cache.
    #[arg(long)]
    pub(crate) no_cache: bool,
    /// The host's `nimbus.toml`: its `[sandbox]` defaults (memory, timeout,
    /// instances) apply, as in `nimbus run`, so a limit behaves here as it
    /// will there [default: the sandbox's own defaults].
    #[arg(long, value_name = "FILE")]
    pub(crate) config: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub(crate) struct CheckArgs {
    /// The component (`.wasm`); its manifest `<name>.toml` beside it is read too.
    #[arg(value_name = "FILE")]
    pub(crate) file: PathBuf,
    /// Print JSON instead of text.
    #[arg(long)]
    pub(crate) json: bool,
    #[command(flatten)]
    pub(crate) cache: CacheArgs,
}

#[derive(Debug, Args)]
pub(crate) struct ListArgs {
    /// The handlers directory.
    #[arg(long, value_name = "DIR")]
    pub(crate) handlers: PathBuf,
    /// Print JSON instead of text.
    #[arg(long)]
    pub(crate) json: bool,
    #[command(flatten)]
    pub(crate) cache: CacheArgs,
}

#[derive(Debug, Args)]
pub(crate) struct InvokeArgs {
    /// The handlers directory.
    #[arg(long, value_name = "DIR")]
    pub(crate) handlers: PathBuf,
    /// The event type; selects the handler.
    #[arg(long, value_name = "TYPE")]
    pub(crate) event_type: String,
    /// The JSON payload, or `@path` to read it from a file (`@-` for stdin).
    #[arg(long, value_name = "JSON|@FILE")]
    pub(crate) data: String,
    /// The session id [default: the event id].
    #[arg(long, value_name = "ID")]
    pub(crate) session: Option<String>,
    /// The endpoint whose handler runs the event; needed only when several
    /// endpoints handle the event type.
    #[arg(long, value_name = "NAME")]
    pub(crate) endpoint: Option<String>,
    /// The event id [default: a fresh one].
    #[arg(long, value_name = "ID")]
    pub(crate) event_id: Option<String>,
    /// The correlation id.
    #[arg(long, value_name = "ID")]
    pub(crate) correlation_id: Option<String>,
    /// Which retry this is (0 = first attempt).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub(crate) retry_count: u32,
    /// The broker's delivery count the handler sees (1 = first delivery),
    /// to run its redelivery branch (`ctx.delivery_count()`).
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) delivery_count: u32,
    /// The message type the handler sees (`ctx.message_type()`).
    #[arg(long, value_enum, default_value_t = InvokedMessageType::EventRequest)]
    pub(crate) message_type: InvokedMessageType,
    /// A user (application) property, as a string, as `nimbus publish`
    /// sets it; repeat for more. The handler reads them
    /// (`ctx.properties()`).
    #[arg(long = "property", value_name = "NAME=VALUE", value_parser = crate::cli_ops::name_value)]
    pub(crate) properties: Vec<(String, String)>,
    #[command(flatten)]
    pub(crate) cache: CacheArgs,
}

/// The message types that bring an event to a handler.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
#[value(rename_all = "PascalCase")]
#[allow(
    clippy::enum_variant_names,
    reason = "the wire's names, as an operator reads them in `nimbus event`"
)]
pub(crate) enum InvokedMessageType {
    /// A published event (or its replay from a parked copy).
    EventRequest,
    /// An automatic retry.
    RetryRequest,
    /// An operator's resubmission.
    ResubmissionRequest,
}

impl InvokedMessageType {
    /// The wire name, and the `From` such a message carries.
    pub(crate) fn wire(self) -> (&'static str, Option<&'static str>) {
        use nimbus_wire::{MessageType, addr};
        let (message_type, from) = match self {
            InvokedMessageType::EventRequest => (MessageType::EventRequest, None),
            InvokedMessageType::RetryRequest => (MessageType::RetryRequest, Some(addr::RETRY)),
            InvokedMessageType::ResubmissionRequest => {
                (MessageType::ResubmissionRequest, Some(addr::MANAGER))
            }
        };
        (message_type.as_str(), from)
    }
}

/// Load options, with the defaults of the target (noop handler, 64
/// sessions, 300-byte payloads, durable).
#[derive(Debug, Args)]
pub(crate) struct BenchArgs {
    /// Sessions the load spreads over.
    #[arg(long, default_value_t = 64)]
    pub(crate) sessions: usize,
    /// Events in each measured phase (closed loop, then open loop).
    #[arg(long, default_value_t = 20_000)]
    pub(crate) events: u64,
    /// Events to warm up with (not measured).
    #[arg(long, default_value_t = 2_000)]
    pub(crate) warmup: u64,
    /// Payload size in bytes.
    #[arg(long, value_name = "BYTES", default_value_t = 300)]
    pub(crate) payload: usize,
    /// `noop`, `orders`, or the path of a component (`.wasm`).
    #[arg(long, value_name = "noop|orders|FILE", default_value = "noop")]
    pub(crate) handler: String,
    /// Where `noop.wasm` and `orders.wasm` are [default: $NIMBUS_GUESTS_DIR,
    /// else ${CARGO_TARGET_DIR:-target}/wasm32-wasip2/release].
    #[arg(long, value_name = "DIR")]
    pub(crate) guests_dir: Option<PathBuf>,
    /// Fraction of events whose handler fails (orders only: its fail switch).
    #[arg(long, value_name = "FRACTION", default_value_t = 0.0)]
    pub(crate) failure_rate: f64,
    /// What becomes of a failed event: skipped through the Manager (its
    /// session goes on) or left blocking its session (later events park).
    #[arg(long, value_enum, default_value_t = OnFailureArg::Skip)]
    pub(crate) on_failure: OnFailureArg,
    /// The broker's durability.
    #[arg(long, value_enum, default_value_t = DurabilityArg::Fsync)]
    pub(crate) durability: DurabilityArg,
    /// Also run the same load through a native Rust handler and print the
    /// wasm/native ratios.
    #[arg(long)]
    pub(crate) native: bool,
    /// Run only the native handler.
    #[arg(long, conflicts_with = "native")]
    pub(crate) native_only: bool,
    /// Events each session keeps in flight in the closed loop.
    #[arg(long, default_value_t = 1)]
    pub(crate) window: usize,
    /// Open-loop rate in events/s [default: half the closed-loop throughput].
    #[arg(long, value_name = "EVENTS_PER_S")]
    pub(crate) rate: Option<f64>,
    /// Sessions the endpoint processes at once [default: --sessions].
    #[arg(long)]
    pub(crate) engine_sessions: Option<usize>,
    /// Where the Resolver's records go: `discard` writes none (the Resolver
    /// still consumes and settles every message), to compare with a run on
    /// SQLite for what the audit store costs. Not a host configuration.
    #[arg(long, value_enum, default_value_t = ResolverStoreArg::Sqlite)]
    pub(crate) resolver_store: ResolverStoreArg,
    /// Soak: after the two phases, hold the open loop's rate this long
    /// (`90s`, `1h`), printing a line a window: events/s, latency, RSS,
    /// open files, the broker log's and the Resolver store's bytes, and
    /// what the broker holds in memory; then the RSS slope.
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    pub(crate) duration: Option<std::time::Duration>,
    /// The soak's window: how often it prints a line.
    #[arg(long, value_name = "DURATION", default_value = "1m", value_parser = humantime::parse_duration, requires = "duration")]
    pub(crate) every: std::time::Duration,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub(crate) enum ResolverStoreArg {
    /// SQLite, as the host runs it.
    Sqlite,
    /// Nowhere: no audit trail is written.
    Discard,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub(crate) enum OnFailureArg {
    Skip,
    Block,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub(crate) enum DurabilityArg {
    /// An acknowledged write survives power loss.
    Fsync,
    /// An acknowledged write survives a killed process.
    Os,
}

#[derive(Debug, Subcommand)]
pub(crate) enum BrokerCommand {
    /// Check the broker log of a data directory without opening a host on
    /// it: each file's state, and whether `nimbus run` would start (exit 0)
    /// or refuse it (exit 1, naming the file and byte). Nothing is changed,
    /// not even the repairs open would make; refused while a host runs on
    /// the directory.
    Verify(VerifyArgs),
}

#[derive(Debug, Args)]
pub(crate) struct VerifyArgs {
    /// The data directory (`[host] data_dir`), or the broker's directory
    /// in it [default: that of --config, else of ./nimbus.toml, else
    /// ./.nimbus].
    #[arg(value_name = "DATA_DIR", conflicts_with = "config")]
    pub(crate) data_dir: Option<PathBuf>,
    /// The configuration file whose `[host] data_dir` to check.
    #[arg(long, value_name = "FILE")]
    pub(crate) config: Option<PathBuf>,
}
