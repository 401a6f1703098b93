//! Arguments of the commands that run the host (`run`, `check`) and of the
//! client commands that talk to a running host over its HTTP API.

use std::path::PathBuf;

use clap::{Args, Subcommand};

/// Where the running host's API is.
#[derive(Debug, Args, Clone)]
pub(crate) struct ApiArgs {
    /// The running host's API [default: NIMBUS_API, else `[api] listen` of
    /// ./nimbus.toml, else http://127.0.0.1:7300].
    #[arg(long, global = true, value_name = "URL", env = "NIMBUS_API")]
    pub(crate) api: Option<String>,
}

#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    /// The configuration file [default: ./nimbus.toml if present, else
    /// built-in defaults rooted at the current directory].
    #[arg(long, value_name = "FILE")]
    pub(crate) config: Option<PathBuf>,
    /// Start a new, empty Resolver store where the data directory's one
    /// was lost or moved aside (damaged): the status and history of earlier
    /// events are gone; blocked sessions are still listed and operated from
    /// the broker's session state. Refused where a store is there.
    #[arg(long)]
    pub(crate) new_resolver_store: bool,
}

#[derive(Debug, Args)]
pub(crate) struct CheckConfigArgs {
    /// The configuration file [default: ./nimbus.toml if present, else
    /// built-in defaults rooted at the current directory].
    #[arg(long, value_name = "FILE")]
    pub(crate) config: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub(crate) struct PublishArgs {
    /// The event type (the handlers that consume it receive the event).
    #[arg(long, value_name = "TYPE")]
    pub(crate) event_type: String,
    /// The event as JSON, or `@path` to read it from a file (`@-` for stdin).
    #[arg(long, value_name = "JSON|@FILE")]
    pub(crate) data: String,
    /// The session (events of one session are handled in order) [default: a
    /// fresh one].
    #[arg(long, value_name = "ID")]
    pub(crate) session: Option<String>,
    /// The correlation id [default: a fresh one].
    #[arg(long, value_name = "ID")]
    pub(crate) correlation_id: Option<String>,
    /// The message id [default: a fresh one].
    #[arg(long, value_name = "ID")]
    pub(crate) message_id: Option<String>,
    /// The producer topic to publish to [default: publisher].
    #[arg(long, value_name = "PRODUCER")]
    pub(crate) from: Option<String>,
    /// A user (application) property, as a string; repeat for more.
    /// Handlers read them (`ctx.properties()`). Typed values (numbers,
    /// booleans) go through the API's `properties`.
    #[arg(long = "property", value_name = "NAME=VALUE", value_parser = name_value)]
    pub(crate) properties: Vec<(String, String)>,
    /// Print the whole answer as JSON instead of the message id.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct EventsArgs {
    /// Only events at this endpoint.
    #[arg(long, value_name = "NAME")]
    pub(crate) endpoint: Option<String>,
    /// Only events with this status (Pending, Completed, Failed, Deferred,
    /// Skipped, Unsupported, DeadLettered), or Pending/Handoff for the
    /// events waiting on an external job.
    #[arg(long, value_name = "STATUS")]
    pub(crate) status: Option<String>,
    /// Only events of this session.
    #[arg(long, value_name = "ID")]
    pub(crate) session: Option<String>,
    /// At most this many events, most recently updated first [default:
    /// 1000]; a note on stderr says when more match.
    #[arg(long, value_name = "N")]
    pub(crate) limit: Option<usize>,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct EventArgs {
    /// The event id, or the id of a message recorded in an event's history
    /// (e.g. the message id `nimbus publish` printed: its event at every
    /// consuming endpoint).
    #[arg(value_name = "ID", value_parser = an_id)]
    pub(crate) id: String,
    /// Print JSON instead of text.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct EndpointsArgs {
    /// Print JSON instead of a table.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct EndpointArgs {
    /// The endpoint (its name, as `nimbus endpoints` lists it).
    #[arg(value_name = "ENDPOINT", value_parser = an_id)]
    pub(crate) endpoint: String,
    /// Print the API's answer as JSON instead of one line.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct ResubmitArgs {
    /// The event id, or the id of a message of one event (e.g. the one
    /// `nimbus publish` printed).
    #[arg(value_name = "ID", value_parser = an_id, required_unless_present = "all")]
    pub(crate) id: Option<String>,
    /// An edited event replacing the recorded one: JSON, `@path` (a file)
    /// or `@-` (stdin).
    #[arg(long, value_name = "JSON|@FILE", conflicts_with = "all")]
    pub(crate) data: Option<String>,
    /// The endpoint, when the event is at several; with `--all`, only
    /// events at this endpoint.
    #[arg(long, value_name = "NAME")]
    pub(crate) endpoint: Option<String>,
    #[command(flatten)]
    pub(crate) bulk: BulkArgs,
    /// Print the API's answer as JSON instead of text.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct SkipArgs {
    /// The event id, or the id of a message of one event (e.g. the one
    /// `nimbus publish` printed).
    #[arg(value_name = "ID", value_parser = an_id, required_unless_present = "all")]
    pub(crate) id: Option<String>,
    /// The endpoint, when the event is at several; with `--all`, only
    /// events at this endpoint.
    #[arg(long, value_name = "NAME")]
    pub(crate) endpoint: Option<String>,
    #[command(flatten)]
    pub(crate) bulk: BulkArgs,
    /// Print the API's answer as JSON instead of text.
    #[arg(long)]
    pub(crate) json: bool,
}

/// `--all` and the filters that narrow it, shared by `resubmit` and `skip`.
#[derive(Debug, Args)]
pub(crate) struct BulkArgs {
    /// Every Failed event (narrowed by the options below and `--endpoint`),
    /// oldest first, instead of one ID. An event whose session waits for a
    /// scheduled retry is left out unless `--include-awaiting-retry`.
    #[arg(long, conflicts_with = "id")]
    pub(crate) all: bool,
    /// With `--all`: only events of this session.
    #[arg(long, value_name = "ID", requires = "all")]
    pub(crate) session: Option<String>,
    /// With `--all`: only events of this type.
    #[arg(long, value_name = "TYPE", requires = "all")]
    pub(crate) event_type: Option<String>,
    /// With `--all`: only events whose recorded error has this type.
    #[arg(long, value_name = "TYPE", requires = "all")]
    pub(crate) error_type: Option<String>,
    /// With `--all`: only events whose status has not changed for this
    /// long (e.g. `10m`, `2h`).
    #[arg(long, value_name = "DURATION", requires = "all")]
    pub(crate) older_than: Option<String>,
    /// With `--all`: also events whose session waits for a scheduled retry
    /// (the retry would run them too).
    #[arg(long, requires = "all")]
    pub(crate) include_awaiting_retry: bool,
    /// With `--all`: act on at most this many events [default: 1000].
    #[arg(long, value_name = "N", requires = "all")]
    pub(crate) limit: Option<usize>,
    /// With `--all`: list the events it would act on, and send nothing.
    #[arg(long, requires = "all")]
    pub(crate) dry_run: bool,
}

#[derive(Debug, Subcommand)]
pub(crate) enum HandoffCommand {
    /// The external job of an event pending a handoff finished: the event
    /// becomes Completed and its session moves on.
    Complete(HandoffCompleteArgs),
    /// The external job failed: the event becomes Failed and its session
    /// stays blocked until a resubmit or skip.
    Fail(HandoffFailArgs),
}

#[derive(Debug, Args)]
pub(crate) struct HandoffCompleteArgs {
    /// The event id, or the id of a message of one event (e.g. the one
    /// `nimbus publish` printed).
    #[arg(value_name = "ID", value_parser = an_id)]
    pub(crate) id: String,
    /// What the job reported: JSON, `@path` (a file) or `@-` (stdin).
    /// Recorded in the event's history; the event's payload stays as it was.
    #[arg(long, value_name = "JSON|@FILE")]
    pub(crate) details: Option<String>,
    /// The endpoint, when the event is at several.
    #[arg(long, value_name = "NAME")]
    pub(crate) endpoint: Option<String>,
    /// Print the API's answer as JSON instead of one line.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct HandoffFailArgs {
    /// The event id, or the id of a message of one event (e.g. the one
    /// `nimbus publish` printed).
    #[arg(value_name = "ID", value_parser = an_id)]
    pub(crate) id: String,
    /// Why the job failed.
    #[arg(long, value_name = "TEXT")]
    pub(crate) error: String,
    /// The job's error type, recorded with this request in the event's
    /// history [default: HandoffFailed]. The event's own error type becomes
    /// `HandoffFailedException`, as upstream NimBus answers a failed handoff.
    #[arg(long, value_name = "TYPE")]
    pub(crate) error_type: Option<String>,
    /// The endpoint, when the event is at several.
    #[arg(long, value_name = "NAME")]
    pub(crate) endpoint: Option<String>,
    /// Print the API's answer as JSON instead of one line.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct SessionsArgs {
    /// Only this endpoint's sessions.
    #[arg(long, value_name = "NAME")]
    pub(crate) endpoint: Option<String>,
    /// Only sessions blocked by a failed or handed-off event.
    #[arg(long)]
    pub(crate) blocked: bool,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Subcommand)]
pub(crate) enum DlqCommand {
    /// List dead-lettered messages (nothing is removed).
    List(DlqListArgs),
    /// Move dead-lettered messages back to their subscription.
    Replay(DlqReplayArgs),
    /// Remove dead-lettered messages for good: those whose event has since
    /// been fixed by a resubmission or skipped (`--settled`), or one named
    /// message. A message whose event is still open is kept unless forced.
    Remove(DlqRemoveArgs),
}

#[derive(Debug, Args)]
pub(crate) struct DlqListArgs {
    /// Only this endpoint's dead letters, its topic's forwarders' included
    /// (a producer's topic: its forwarders'; `Resolver`: only what the
    /// Resolver could not record).
    #[arg(long, value_name = "NAME")]
    pub(crate) endpoint: Option<String>,
    /// At most this many dead letters per endpoint, in queue order (a
    /// replayed message dead-lettered again comes after the others)
    /// [default: 1000]; a note on stderr names an endpoint that has more.
    #[arg(long, value_name = "N")]
    pub(crate) limit: Option<usize>,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub(crate) json: bool,
}

/// Where the dead letters of a replay or removal are, and which one.
#[derive(Debug, Args)]
pub(crate) struct DlqTargetArgs {
    /// The endpoint whose dead-letter queues hold the message (`Resolver`
    /// for the Resolver's own queue, of copies it could not record).
    #[arg(long, value_name = "NAME")]
    pub(crate) endpoint: String,
    /// The dead-lettered message's sequence number (see `nimbus dlq list`).
    #[arg(long, value_name = "N")]
    pub(crate) sequence: Option<i64>,
    /// The dead-lettered message's message id.
    #[arg(long, value_name = "ID")]
    pub(crate) message_id: Option<String>,
    /// Only this subscription's dead-letter queue (the endpoint's own,
    /// `Resolver`, `Deferred`, `DeferredProcessor`, or a forwarder of its
    /// topic, named after the consumer: removed with --force, never
    /// replayed).
    #[arg(long, value_name = "NAME")]
    pub(crate) subscription: Option<String>,
}

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("which").required(true).args(["sequence", "message_id", "settled"])))]
pub(crate) struct DlqRemoveArgs {
    #[command(flatten)]
    pub(crate) target: DlqTargetArgs,
    /// Every message of the endpoint's own, `Deferred` and
    /// `DeferredProcessor` dead-letter queues whose event the Resolver shows
    /// Completed or Skipped; the others are kept, and named.
    #[arg(long, conflicts_with_all = ["force", "subscription"])]
    pub(crate) settled: bool,
    /// Remove the named message even if its event is not settled, or it is
    /// the Resolver's copy: it is gone for good.
    #[arg(long)]
    pub(crate) force: bool,
    /// Print JSON instead of text.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("which").required(true).args(["sequence", "message_id", "all"])))]
pub(crate) struct DlqReplayArgs {
    #[command(flatten)]
    pub(crate) target: DlqTargetArgs,
    /// Every dead-lettered message of the endpoint.
    #[arg(long)]
    pub(crate) all: bool,
    /// Replay even a message whose event the Resolver has since recorded as
    /// Completed or Skipped; it runs again. Without it such a message is
    /// refused (one) or left in place (--all).
    #[arg(long)]
    pub(crate) force: bool,
    /// Print JSON instead of text.
    #[arg(long)]
    pub(crate) json: bool,
}

/// An event or message id as typed: not blank (an empty one would reach
/// the API as a path with no id, answered "no route").
pub(crate) fn an_id(text: &str) -> Result<String, String> {
    if text.trim().is_empty() {
        return Err("must not be empty".to_owned());
    }
    Ok(text.to_owned())
}

/// `NAME=VALUE`, split at the first `=`.
pub(crate) fn name_value(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((name, value)) if !name.trim().is_empty() => {
            Ok((name.trim().to_owned(), value.to_owned()))
        }
        _ => Err(format!("`{text}` is not NAME=VALUE")),
    }
}
