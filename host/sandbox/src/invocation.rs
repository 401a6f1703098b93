//! What one event's run through a handler produced: the handler's report
//! (`nimbus_handler`'s, what the engine settles by) and what the sandbox
//! saw around it (logs, timing, the component that ran).

use std::time::Duration;

use nimbus_handler::Report;
use serde::Serialize;

use crate::digest::Digest;

/// How important a log record is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LogLevel {
    /// Very detailed diagnostics.
    Trace,
    /// Diagnostics.
    Debug,
    /// Normal operation.
    Info,
    /// Something unexpected that the handler coped with.
    Warn,
    /// Something failed.
    Error,
}

/// Where a captured log record came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LogSource {
    /// The `log.write` import.
    Handler,
    /// A line the guest wrote to stdout.
    Stdout,
    /// A line the guest wrote to stderr.
    Stderr,
    /// A note from the sandbox about this invocation (e.g. records dropped).
    Sandbox,
}

/// One log record captured during an invocation (also emitted to `tracing`
/// under the target `nimbus::handler`, tagged with handler, version, event
/// and session).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct LogRecord {
    /// The level.
    pub level: LogLevel,
    /// Where it came from.
    pub source: LogSource,
    /// The message, truncated to the sandbox's bound.
    pub message: String,
    /// Structured fields, name and value, in the order written (serialized
    /// as a JSON object).
    #[serde(serialize_with = "serialize_fields")]
    pub fields: Vec<(String, String)>,
}

fn serialize_fields<S: serde::Serializer>(
    fields: &[(String, String)],
    s: S,
) -> Result<S::Ok, S::Error> {
    s.collect_map(fields.iter().map(|(k, v)| (k, v)))
}

/// Everything one event's run through a handler produced.
#[derive(Clone, Debug)]
pub struct Invocation {
    /// What the handler answered, the follow-ups it asked for, and the
    /// version that ran it: what the engine settles by.
    pub report: Report,
    /// Log records written by the handler (log import, stdout, stderr).
    pub logs: Vec<LogRecord>,
    /// The digest of the handler version that ran the event.
    pub digest: Digest,
    /// The name of the handler that ran the event.
    pub handler: String,
    /// Wall-clock time from instantiation to the end of the call.
    pub duration: Duration,
}
