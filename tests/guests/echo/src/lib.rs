//! `echo`: claims `Echo` and does whatever its payload asks, so the host can
//! round-trip every outcome, error kind, follow-up, log record, config read
//! and stdio write. Every field is optional (`{}` completes and does nothing
//! else) and unknown fields are refused (`permanent`/`InvalidPayload` naming
//! the field). In order, it:
//!
//! 0. runs `Churn` (`{"Sizes":[24,1000],"Rounds":1000,"KeepAll":false}`):
//!    allocates a block of each size per round, freeing it at once unless
//!    `KeepAll`, and logs `churned <total> bytes` with field `bytes`;
//! 1. writes `Stdout` / `Stderr` (strings) to its standard output / error;
//! 2. writes each of `Logs` (`[{"Level":"Info","Message":"..","Fields":{"k":"v"}}]`);
//! 3. looks up each key of `ReadConfig` (`["key"]`) and logs
//!    `config <key> = <value or None>` at `Info` with fields `key`, `value`;
//! 4. publishes `Publish` (a number) follow-ups of type `EchoFollowUp`, message
//!    id `{event id}:echo:{i}` (i from 0), payload `{"Index":i,"EventId":..}`,
//!    user property `Index` = i, session `PublishSession` if given;
//! 5. publishes each of `FollowUps`
//!    (`[{"EventType":..,"MessageId":..,"Payload":<any JSON>,"SessionId":..,"Properties":{"name":<string|int|float|bool>}}]`),
//!    as given (so an empty message id reaches the host); a follow-up the host
//!    refuses makes the handler return `failed`/`PublishRejected`;
//! 6. with `"Describe":true`, publishes an `EchoDescribed` follow-up (message id
//!    `{event id}:described`) carrying everything it saw: `EventId`,
//!    `EventType`, `MessageId`, `SessionId`, `CorrelationId`,
//!    `ParentMessageId`, `OriginatingMessageId`, `RetryCount`,
//!    `EnqueuedTimeMs`, `Properties` (name → JSON value), `Config` (all
//!    keys), `Payload` (the raw text), and the delivery facts
//!    `DeliveryCount`, `MessageType`, `From`;
//! 7. with `"TransientBeforeDelivery":n`, returns `transient`/`NotYet`
//!    while the broker's delivery count is below n (a partner that answers
//!    on the n-th try);
//! 8. returns `Outcome`: `"Completed"` (the default), `"PendingHandoff"`
//!    (with `Reason`, `JobId`, `ExpectedWithinMs`), or `"Failed"`,
//!    `"Transient"`, `"Permanent"` (with `ErrorType`, `Message`,
//!    `RetryAfterMs`; the defaults are `EchoError` and `echo was asked to fail`).

use std::collections::BTreeMap;
use std::io::Write;
use std::time::Duration;

use nimbus_guest::{
    Context, Error, ErrorKind, Event, FollowUp, Handler, Level, Outcome, PropertyValue,
    pending_handoff,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The `Echo` payload: a script of what to do.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
pub struct Echo {
    /// Written to standard output.
    pub stdout: Option<String>,
    /// Written to standard error.
    pub stderr: Option<String>,
    /// Log records to write.
    #[serde(default)]
    pub logs: Vec<LogLine>,
    /// Config keys to look up and log.
    #[serde(default)]
    pub read_config: Vec<String>,
    /// How many numbered `EchoFollowUp` events to publish.
    #[serde(default)]
    pub publish: u32,
    /// The session for the numbered follow-ups.
    pub publish_session: Option<String>,
    /// Follow-ups to publish as given.
    #[serde(default)]
    pub follow_ups: Vec<RawFollowUp>,
    /// Publish an `EchoDescribed` follow-up with the event's metadata.
    #[serde(default)]
    pub describe: bool,
    /// Return `transient`/`NotYet` while the delivery count is below this.
    pub transient_before_delivery: Option<u32>,
    /// The outcome to return.
    #[serde(default)]
    pub outcome: EchoOutcome,
    /// Pending handoff: the reason.
    pub reason: Option<String>,
    /// Pending handoff: the external job id.
    pub job_id: Option<String>,
    /// Pending handoff: the expected duration in milliseconds.
    pub expected_within_ms: Option<u64>,
    /// Error: the error type.
    pub error_type: Option<String>,
    /// Error: the message.
    pub message: Option<String>,
    /// Error: the earliest retry in milliseconds.
    pub retry_after_ms: Option<u64>,
    /// Allocation churn to run before anything else.
    pub churn: Option<Churn>,
}

/// Allocates and frees blocks in a loop, the way a handler that builds and
/// drops buffers per item does, to show the SDK's allocator reuses freed
/// memory instead of growing with the number of iterations.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
pub struct Churn {
    /// The block sizes of one round, in bytes.
    pub sizes: Vec<usize>,
    /// How many rounds.
    pub rounds: u32,
    /// Keep every block alive instead of freeing it (a leak, for contrast).
    #[serde(default)]
    pub keep_all: bool,
}

impl Event for Echo {
    const EVENT_TYPE: &'static str = "Echo";
}

/// Which outcome to return.
#[derive(Debug, Default, Clone, Copy, Deserialize)]
pub enum EchoOutcome {
    /// `Ok(Completed)`.
    #[default]
    Completed,
    /// `Ok(PendingHandoff)`.
    PendingHandoff,
    /// `Err(Failed)`.
    Failed,
    /// `Err(Transient)`.
    Transient,
    /// `Err(Permanent)`.
    Permanent,
}

/// One log record to write.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
pub struct LogLine {
    /// `Trace`, `Debug`, `Info`, `Warn` or `Error`.
    pub level: EchoLevel,
    /// The message.
    pub message: String,
    /// Structured fields.
    #[serde(default)]
    pub fields: BTreeMap<String, String>,
}

/// A log level, as written in the payload.
#[derive(Debug, Clone, Copy, Deserialize)]
#[expect(missing_docs, reason = "the names say it")]
pub enum EchoLevel {
    Trace,
    Debug,
    Info,
    Warn,
    Error,
}

impl From<EchoLevel> for Level {
    fn from(level: EchoLevel) -> Self {
        match level {
            EchoLevel::Trace => Level::Trace,
            EchoLevel::Debug => Level::Debug,
            EchoLevel::Info => Level::Info,
            EchoLevel::Warn => Level::Warn,
            EchoLevel::Error => Level::Error,
        }
    }
}

/// A follow-up to publish exactly as given.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
pub struct RawFollowUp {
    /// Its event type.
    pub event_type: String,
    /// Its message id (may be empty, to test the host's refusal).
    pub message_id: String,
    /// Its payload.
    #[serde(default)]
    pub payload: Value,
    /// Its session, if not the inbound one.
    pub session_id: Option<String>,
    /// Its user properties.
    #[serde(default)]
    pub properties: BTreeMap<String, Value>,
}

/// The numbered follow-ups' payload.
#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct EchoFollowUp<'a> {
    index: u32,
    event_id: &'a str,
}

/// What `Describe` publishes.
#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct EchoDescribed<'a> {
    event_id: &'a str,
    event_type: &'a str,
    message_id: &'a str,
    session_id: &'a str,
    correlation_id: Option<&'a str>,
    parent_message_id: Option<&'a str>,
    originating_message_id: Option<&'a str>,
    retry_count: u32,
    enqueued_time_ms: u64,
    properties: BTreeMap<&'a str, Value>,
    config: BTreeMap<String, String>,
    payload: &'a str,
    delivery_count: u32,
    message_type: String,
    from: Option<String>,
}

fn json_property(value: &PropertyValue) -> Value {
    match value {
        PropertyValue::Str(s) => Value::from(s.as_str()),
        PropertyValue::Int(i) => Value::from(*i),
        PropertyValue::Float(f) => Value::from(*f),
        PropertyValue::Bool(b) => Value::from(*b),
    }
}

fn property_value(name: &str, value: &Value) -> Result<PropertyValue, Error> {
    match value {
        Value::String(s) => Ok(PropertyValue::Str(s.clone())),
        Value::Bool(b) => Ok(PropertyValue::Bool(*b)),
        Value::Number(n) => match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => Ok(PropertyValue::Int(i)),
            (None, Some(f)) => Ok(PropertyValue::Float(f)),
            (None, None) => Err(Error::permanent(
                "InvalidPayload",
                format!("property `{name}`: {n} fits neither i64 nor f64"),
            )),
        },
        other => Err(Error::permanent(
            "InvalidPayload",
            format!("property `{name}` must be a string, number or boolean, not {other}"),
        )),
    }
}

/// Follows the script.
pub struct EchoHandler;

impl Handler<Echo> for EchoHandler {
    fn handle(&self, echo: Echo, ctx: &Context) -> Result<Outcome, Error> {
        if let Some(churn) = &echo.churn {
            let bytes = run_churn(churn);
            nimbus_guest::info!(ctx, { bytes: bytes }, "churned {bytes} bytes");
        }
        write_stdio(&echo);
        for line in &echo.logs {
            let fields: Vec<(&str, &dyn std::fmt::Display)> = line
                .fields
                .iter()
                .map(|(k, v)| (k.as_str(), v as &dyn std::fmt::Display))
                .collect();
            ctx.log(line.level.into(), &line.message, &fields);
        }
        for key in &echo.read_config {
            let value = ctx.config(key);
            let shown = format!("{value:?}");
            nimbus_guest::info!(ctx, { key: key, value: shown }, "config {key} = {shown}");
        }
        for index in 0..echo.publish {
            let mut follow_up = FollowUp::new(
                "EchoFollowUp",
                format!("{}:echo:{index}", ctx.event_id()),
                &EchoFollowUp {
                    index,
                    event_id: ctx.event_id(),
                },
            )
            .property("Index", i64::from(index));
            if let Some(session) = &echo.publish_session {
                follow_up = follow_up.session_id(session.clone());
            }
            ctx.publish(follow_up)?;
        }
        for raw in &echo.follow_ups {
            let mut follow_up = FollowUp::new(&raw.event_type, &raw.message_id, &raw.payload);
            if let Some(session) = &raw.session_id {
                follow_up = follow_up.session_id(session.clone());
            }
            for (name, value) in &raw.properties {
                follow_up = follow_up.property(name.clone(), property_value(name, value)?);
            }
            ctx.publish(follow_up)?;
        }
        if echo.describe {
            ctx.publish(FollowUp::new(
                "EchoDescribed",
                format!("{}:described", ctx.event_id()),
                &describe(ctx),
            ))?;
        }
        if let Some(wanted) = echo.transient_before_delivery {
            let count = ctx.delivery_count();
            if count < wanted {
                return Err(Error::transient(
                    "NotYet",
                    format!("delivery {count}: answers from delivery {wanted} on"),
                ));
            }
        }
        outcome(echo)
    }
}

/// Runs `churn`; returns the bytes allocated in total.
fn run_churn(churn: &Churn) -> usize {
    let mut kept: Vec<Vec<u8>> = Vec::new();
    let mut total = 0usize;
    for round in 0..churn.rounds {
        for &size in &churn.sizes {
            // Written through, so the block is really used, and kept opaque
            // to the optimizer, so the allocation is not elided.
            let mut block = std::hint::black_box(vec![0u8; size]);
            if let Some(last) = block.last_mut() {
                *last = round.to_le_bytes()[0];
            }
            total = total.saturating_add(std::hint::black_box(&block).len());
            if churn.keep_all {
                kept.push(block);
            }
        }
    }
    total
}

fn write_stdio(echo: &Echo) {
    // Failing to write is part of what a host test may want to see, not a
    // reason to fail the event: ignore the result.
    if let Some(text) = &echo.stdout {
        let mut out = std::io::stdout();
        let _ = out.write_all(text.as_bytes()).and_then(|()| out.flush());
    }
    if let Some(text) = &echo.stderr {
        let mut err = std::io::stderr();
        let _ = err.write_all(text.as_bytes()).and_then(|()| err.flush());
    }
}

fn describe(ctx: &Context) -> EchoDescribed<'_> {
    EchoDescribed {
        event_id: ctx.event_id(),
        event_type: ctx.event_type(),
        message_id: ctx.message_id(),
        session_id: ctx.session_id(),
        correlation_id: ctx.correlation_id(),
        parent_message_id: ctx.parent_message_id(),
        originating_message_id: ctx.originating_message_id(),
        retry_count: ctx.retry_count(),
        enqueued_time_ms: ctx.enqueued_time_ms(),
        properties: ctx
            .properties()
            .iter()
            .map(|p| (p.name.as_str(), json_property(&p.value)))
            .collect(),
        config: ctx.config_all().into_iter().collect(),
        payload: ctx.payload(),
        delivery_count: ctx.delivery_count(),
        message_type: ctx.message_type(),
        from: ctx.sender(),
    }
}

fn outcome(echo: Echo) -> Result<Outcome, Error> {
    let kind = match echo.outcome {
        EchoOutcome::Completed => return Ok(Outcome::Completed),
        EchoOutcome::PendingHandoff => {
            let mut handoff =
                pending_handoff(echo.reason.unwrap_or_else(|| "echo handoff".to_owned()));
            if let Some(job) = echo.job_id {
                handoff = handoff.external_job_id(job);
            }
            if let Some(ms) = echo.expected_within_ms {
                handoff = handoff.expected_within(Duration::from_millis(ms));
            }
            return Ok(handoff.into());
        }
        EchoOutcome::Failed => ErrorKind::Failed,
        EchoOutcome::Transient => ErrorKind::Transient,
        EchoOutcome::Permanent => ErrorKind::Permanent,
    };
    let mut error = Error::new(
        kind,
        echo.error_type.unwrap_or_else(|| "EchoError".to_owned()),
        echo.message
            .unwrap_or_else(|| "echo was asked to fail".to_owned()),
    );
    if let Some(ms) = echo.retry_after_ms {
        error = error.retry_after(Duration::from_millis(ms));
    }
    Err(error)
}

nimbus_guest::export!(EchoHandler => Echo);
