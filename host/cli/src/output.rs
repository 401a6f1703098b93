//! What the commands print: serializable views (for `--json`) with a text
//! rendering for people.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use nimbus_handler::{FollowUp, HandlerError, Outcome};
use nimbus_sandbox::{ArtifactSource, HandlerVersion, Invocation, Limits, LogRecord, Snapshot};
use nimbus_transport::PropertyValue;
use serde::Serialize;

/// Exit code when the command itself failed (bad input, unreadable file,
/// invalid component, a stdout that cannot be written).
pub(crate) const EXIT_ERROR: u8 = 1;

/// `print!` for what a command answers. A closed pipe (`nimbus events |
/// head`) ends the process quietly with success, as a pipeline expects,
/// where `print!` would panic; any other write error is an error exit.
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::output::write_stdout(format_args!($($arg)*))
    };
}

/// [`out!`] with a newline.
macro_rules! outln {
    ($($arg:tt)*) => {
        $crate::output::write_stdout(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// A line on stderr (notes, errors). A stderr nobody reads any more
/// (`2>&1 | head -1` once `head` exited) loses the line rather than
/// panicking, as `eprintln!` would: the exit code must still say what
/// happened.
macro_rules! errln {
    ($($arg:tt)*) => {
        $crate::output::write_stderr(format_args!("{}\n", format_args!($($arg)*)))
    };
}

pub(crate) use {errln, out, outln};

/// What a command writes, with control characters written out: much of it
/// (session ids, event types, error texts, handler logs) comes from whoever
/// published or whatever a handler returned (see [`crate::escape`]).
fn terminal_text(args: std::fmt::Arguments<'_>) -> String {
    let text = args
        .as_str()
        .map_or_else(|| args.to_string(), str::to_owned);
    match crate::escape::for_terminal(&text) {
        std::borrow::Cow::Borrowed(_) => text,
        std::borrow::Cow::Owned(escaped) => escaped,
    }
}

pub(crate) fn write_stderr(args: std::fmt::Arguments<'_>) {
    use std::io::Write as _;
    let _ = std::io::stderr()
        .lock()
        .write_all(terminal_text(args).as_bytes());
}

pub(crate) fn write_stdout(args: std::fmt::Arguments<'_>) {
    use std::io::Write as _;
    let text = terminal_text(args);
    let mut stdout = std::io::stdout().lock();
    if let Err(e) = stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        errln!("error: writing to stdout: {e}");
        std::process::exit(i32::from(EXIT_ERROR));
    }
}

pub(crate) fn print_json(value: &impl Serialize) -> anyhow::Result<()> {
    let json = serde_json::to_string_pretty(value)?;
    outln!("{}", crate::escape::for_json(&json));
    Ok(())
}

/// One handler version, as `handlers check` and `handlers list` show it.
#[derive(Serialize)]
pub(crate) struct VersionView<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    file: Option<String>,
    name: &'a str,
    /// What outcomes record (the digest, plus the settings' if a manifest
    /// changes them).
    version: &'a str,
    digest: String,
    event_types: &'a [String],
    imports: &'a [String],
    exports: &'a [String],
    limits: LimitsView,
    config: &'a BTreeMap<String, String>,
    artifact: ArtifactSource,
}

#[derive(Serialize)]
struct LimitsView {
    memory_bytes: u64,
    timeout_ms: u128,
    instances: u32,
    tables: u32,
}

impl From<&Limits> for LimitsView {
    fn from(limits: &Limits) -> Self {
        Self {
            memory_bytes: limits.memory_bytes,
            timeout_ms: limits.timeout.as_millis(),
            instances: limits.instances,
            tables: limits.tables,
        }
    }
}

impl<'a> VersionView<'a> {
    pub(crate) fn new(version: &'a HandlerVersion, file: Option<&Path>) -> Self {
        Self {
            file: file.map(|f| f.display().to_string()),
            name: version.name(),
            version: version.id(),
            digest: version.digest().to_string(),
            event_types: version.event_types(),
            imports: version.imports(),
            exports: version.exports(),
            limits: version.limits().into(),
            config: version.config(),
            artifact: version.artifact_source(),
        }
    }

    pub(crate) fn text(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "handler:     {}", self.name);
        if let Some(file) = &self.file {
            let _ = writeln!(out, "file:        {file}");
        }
        let _ = writeln!(out, "version:     {}", self.version);
        let _ = writeln!(out, "digest:      {}", self.digest);
        let _ = writeln!(out, "event types: {}", self.event_types.join(", "));
        let _ = writeln!(
            out,
            "limits:      memory {} bytes, timeout {} ms, {} instances, {} tables",
            self.limits.memory_bytes,
            self.limits.timeout_ms,
            self.limits.instances,
            self.limits.tables
        );
        let keys: Vec<&str> = self.config.keys().map(String::as_str).collect();
        let keys = if keys.is_empty() {
            "none (a manifest's [config] sets them)".to_owned()
        } else {
            keys.join(", ")
        };
        let _ = writeln!(out, "config keys: {keys}");
        let _ = writeln!(out, "imports:");
        for import in self.imports {
            let _ = writeln!(out, "  {import}");
        }
        let _ = writeln!(out, "exports:");
        for export in self.exports {
            let _ = writeln!(out, "  {export}");
        }
        out
    }
}

/// A handlers directory, as `handlers list` shows it.
#[derive(Serialize)]
pub(crate) struct ListView<'a> {
    handlers: Vec<StatusView<'a>>,
    problems: &'a [String],
}

#[derive(Serialize)]
struct StatusView<'a> {
    endpoint: &'a str,
    handler: &'a str,
    path: String,
    status: &'static str,
    serving: Option<VersionView<'a>>,
    last_error: Option<&'a str>,
}

impl<'a> ListView<'a> {
    pub(crate) fn new(snapshot: &'a Snapshot) -> Self {
        let handlers = snapshot
            .handlers()
            .map(|status| StatusView {
                endpoint: &status.key.endpoint,
                handler: &status.key.handler,
                path: status.path.display().to_string(),
                status: status.state(),
                serving: status.serving.as_deref().map(|v| VersionView::new(v, None)),
                last_error: status.last_error.as_deref(),
            })
            .collect();
        Self {
            handlers,
            problems: snapshot.problems(),
        }
    }

    pub(crate) fn text(&self) -> String {
        let mut out = String::new();
        if self.handlers.is_empty() {
            out.push_str("no handlers\n");
        }
        for status in &self.handlers {
            let _ = writeln!(
                out,
                "{}/{}  {}",
                status.endpoint, status.handler, status.status
            );
            if let Some(version) = &status.serving {
                let _ = writeln!(out, "  version:     {}", version.version);
                let _ = writeln!(out, "  event types: {}", version.event_types.join(", "));
            }
            if let Some(error) = status.last_error {
                let _ = writeln!(out, "  last error:  {error}");
            }
        }
        for problem in self.problems {
            let _ = writeln!(out, "problem: {problem}");
        }
        out
    }
}

/// One invocation, as `invoke` prints it.
#[derive(Serialize)]
pub(crate) struct InvocationView<'a> {
    endpoint: &'a str,
    handler: &'a str,
    /// What outcomes record for the version that ran ([`HandlerVersion::id`]).
    version: &'a str,
    result: ResultView<'a>,
    follow_ups: Vec<FollowUpView<'a>>,
    logs: &'a [LogRecord],
    duration_us: u128,
    invoked_at_ms: u128,
}

/// The handler's answer; durations in whole milliseconds, as the handler
/// gave them.
#[derive(Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
enum ResultView<'a> {
    Completed,
    PendingHandoff {
        reason: &'a str,
        external_job_id: Option<&'a str>,
        expected_by_ms: Option<u64>,
    },
    Error {
        kind: &'static str,
        error_type: &'a str,
        message: &'a str,
        retry_after_ms: Option<u64>,
    },
}

impl<'a> ResultView<'a> {
    fn new(result: &'a Result<Outcome, HandlerError>) -> Self {
        match result {
            Ok(Outcome::Completed) => ResultView::Completed,
            Ok(Outcome::PendingHandoff(handoff)) => ResultView::PendingHandoff {
                reason: &handoff.reason,
                external_job_id: handoff.external_job_id.as_deref(),
                expected_by_ms: handoff.expected_by.map(whole_ms),
            },
            Err(error) => ResultView::Error {
                kind: error.kind.as_str(),
                error_type: &error.error_type,
                message: &error.message,
                retry_after_ms: error.retry_after.map(whole_ms),
            },
        }
    }
}

/// A handler's duration in ms (it gave whole ms, so nothing is lost).
fn whole_ms(duration: std::time::Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// A follow-up the handler published (printed, not sent).
#[derive(Serialize)]
struct FollowUpView<'a> {
    event_type: &'a str,
    message_id: &'a str,
    payload: &'a str,
    session_id: Option<&'a str>,
    properties: Vec<PropertyView<'a>>,
}

impl<'a> FollowUpView<'a> {
    fn new(follow_up: &'a FollowUp) -> Self {
        Self {
            event_type: &follow_up.event_type,
            message_id: &follow_up.message_id,
            payload: &follow_up.payload,
            session_id: follow_up.session_id.as_deref(),
            properties: follow_up
                .properties
                .iter()
                .map(|(name, value)| PropertyView {
                    name,
                    value: ValueView::new(value),
                })
                .collect(),
        }
    }
}

#[derive(Serialize)]
struct PropertyView<'a> {
    name: &'a str,
    value: ValueView<'a>,
}

/// A property's value as plain JSON: a string, a number or a boolean.
#[derive(Serialize)]
#[serde(untagged)]
enum ValueView<'a> {
    Str(&'a str),
    Int(i64),
    Float(f64),
    Boolean(bool),
}

impl<'a> ValueView<'a> {
    fn new(value: &'a PropertyValue) -> Self {
        match value {
            PropertyValue::String(s) => ValueView::Str(s),
            PropertyValue::Int(i) => ValueView::Int(*i),
            PropertyValue::Float(f) => ValueView::Float(*f),
            PropertyValue::Bool(b) => ValueView::Boolean(*b),
        }
    }
}

impl<'a> InvocationView<'a> {
    pub(crate) fn new(endpoint: &'a str, invocation: &'a Invocation) -> Self {
        let report = &invocation.report;
        Self {
            endpoint,
            handler: &invocation.handler,
            version: &report.version,
            result: ResultView::new(&report.result),
            follow_ups: report.follow_ups.iter().map(FollowUpView::new).collect(),
            logs: &invocation.logs,
            duration_us: invocation.duration.as_micros(),
            invoked_at_ms: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_millis())
                .unwrap_or(0),
        }
    }
}
