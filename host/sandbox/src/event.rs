//! The public, wasm-free shapes of what goes into a handler and what comes
//! out: the engine and the CLI work with these, never with the generated
//! bindings. Conversions to and from the bindings live in `host/convert.rs`.

use std::borrow::Cow;
use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The SHA-256 digest of a handler component's bytes: the version identity
/// recorded with every outcome.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Digest([u8; 32]);

impl Digest {
    /// The digest of `bytes`.
    pub fn of(bytes: &[u8]) -> Self {
        use sha2::Digest as _;
        Self(sha2::Sha256::digest(bytes).into())
    }

    /// The raw 32 bytes.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// The lowercase hex form, without the `sha256:` prefix.
    pub fn hex(&self) -> String {
        use fmt::Write as _;
        let mut out = String::with_capacity(64);
        for byte in self.0 {
            // Writing to a String cannot fail.
            let _ = write!(out, "{byte:02x}");
        }
        out
    }

    /// The first 12 hex digits, enough to tell versions apart in logs.
    pub fn short(&self) -> String {
        let mut hex = self.hex();
        hex.truncate(12);
        hex
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sha256:{}", self.hex())
    }
}

impl fmt::Debug for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Digest(sha256:{})", self.short())
    }
}

impl Serialize for Digest {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// The value of one user (application) property.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum PropertyValue {
    /// A string property.
    Str(String),
    /// A signed integer property.
    Int(i64),
    /// A floating-point property.
    Float(f64),
    /// A boolean property.
    Boolean(bool),
}

/// One user (application) property of a message.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Property {
    /// The property name, case-sensitive.
    pub name: String,
    /// The property value.
    pub value: PropertyValue,
}

/// One event to run through a handler (the WIT `event` record).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Event {
    /// The logical event id; stable across retries and resubmissions.
    pub event_id: String,
    /// The event type, e.g. `OrderPlaced`; selects the handler.
    pub event_type: String,
    /// The broker message id of this delivery.
    pub message_id: String,
    /// The session (ordering key).
    pub session_id: String,
    /// The business correlation id.
    pub correlation_id: Option<String>,
    /// The message that caused this one.
    pub parent_message_id: Option<String>,
    /// The first message of this lineage.
    pub originating_message_id: Option<String>,
    /// 0 on the first attempt.
    pub retry_count: u32,
    /// When the broker enqueued the message, in ms since the Unix epoch.
    pub enqueued_time_ms: u64,
    /// The JSON payload, as text.
    pub payload: String,
    /// User properties other than the NimBus envelope properties.
    pub properties: Vec<Property>,
    /// What the WIT `delivery` interface answers.
    pub delivery: Delivery,
}

/// How the event was delivered (the WIT `delivery` interface): not part of
/// the `event` record, which components compiled before it was added
/// receive unchanged.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Delivery {
    /// The broker's delivery count, this delivery included (1 the first
    /// time).
    pub count: u32,
    /// The NimBus message type that brought the event (`EventRequest`,
    /// `RetryRequest`, `ResubmissionRequest`): borrowed from the wire's
    /// names on the engine's path, so no event pays for a copy the handler
    /// may never ask for.
    pub message_type: Cow<'static, str>,
    /// The message's `From`: the publishing endpoint, `Retry` or `Manager`.
    pub from: Option<String>,
}

impl Default for Delivery {
    /// A first delivery of a published event.
    fn default() -> Self {
        Delivery {
            count: 1,
            message_type: Cow::Borrowed("EventRequest"),
            from: None,
        }
    }
}

/// A handed-off event (see the WIT `pending-handoff` record).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PendingHandoff {
    /// Why the event is pending, for the operator.
    pub reason: String,
    /// The id of the external job, if any.
    pub external_job_id: Option<String>,
    /// How long from now the job is expected to take, in ms.
    pub expected_by_ms: Option<u64>,
}

/// What the handler did with the event.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Outcome {
    /// The event was handled.
    Completed,
    /// The event was handed off to an external job.
    PendingHandoff(PendingHandoff),
}

/// The details carried by every error kind.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ErrorDetail {
    /// A short, stable name for the failure, e.g. `PartnerUnavailable`, or
    /// one of the sandbox's own: `Trap`, `Timeout`, `MemoryLimit`, `Panic`,
    /// `SandboxBusy`.
    pub error_type: String,
    /// A human-readable message for the operator.
    pub message: String,
    /// The earliest the handler wants a retry, in ms.
    pub retry_after_ms: Option<u64>,
}

/// Which of the three error kinds a [`HandlerError`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// An ordinary failure: blocks the session; retry policy may apply.
    Failed,
    /// A passing infrastructure problem: redeliver after a backoff.
    Transient,
    /// The event can never succeed: dead-letter now.
    Permanent,
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Failed => "failed",
            Self::Transient => "transient",
            Self::Permanent => "permanent",
        })
    }
}

/// Why the handler could not handle the event: what the handler returned,
/// or what the sandbox made of a trap, deadline overrun or memory overrun
/// (always [`ErrorKind::Failed`] then).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct HandlerError {
    /// Failed, transient or permanent.
    pub kind: ErrorKind,
    /// Error type, message and retry-after.
    #[serde(flatten)]
    pub detail: ErrorDetail,
}

impl HandlerError {
    /// A `failed` error raised by the sandbox itself (no retry-after).
    pub(crate) fn sandbox_failed(error_type: &str, message: String) -> Self {
        Self {
            kind: ErrorKind::Failed,
            detail: ErrorDetail {
                error_type: error_type.to_owned(),
                message,
                retry_after_ms: None,
            },
        }
    }
}

impl fmt::Display for HandlerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} ({}): {}",
            self.kind, self.detail.error_type, self.detail.message
        )
    }
}

impl std::error::Error for HandlerError {}

/// A follow-up event the handler asked to publish; held until settlement.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FollowUp {
    /// The event type of the follow-up.
    pub event_type: String,
    /// The caller-chosen, deterministic broker message id.
    pub message_id: String,
    /// The JSON payload, as text (validated as JSON by the sandbox).
    pub payload: String,
    /// The session; `None` keeps the inbound event's session.
    pub session_id: Option<String>,
    /// Extra user properties.
    pub properties: Vec<Property>,
}

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
#[derive(Clone, Debug, Serialize)]
pub struct Invocation {
    /// The handler's outcome, or its error (including the sandbox's `Trap`,
    /// `Timeout`, `MemoryLimit` and `Panic`).
    pub result: Result<Outcome, HandlerError>,
    /// Follow-up events to publish at settlement if the result is `Ok`; the
    /// engine drops them on an error.
    pub follow_ups: Vec<FollowUp>,
    /// Log records written by the handler (log import, stdout, stderr).
    pub logs: Vec<LogRecord>,
    /// The digest of the handler version that ran the event.
    pub digest: Digest,
    /// The name of the handler that ran the event.
    pub handler: String,
    /// Wall-clock time from instantiation to the end of the call.
    #[serde(serialize_with = "serialize_duration_us")]
    pub duration: Duration,
}

fn serialize_duration_us<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_u128(d.as_micros())
}
