//! `nimbus:handler/log`: log records become `tracing` events tagged with
//! handler, version, event and session, and are captured into the
//! invocation. `panicked` remembers the panic message for the error report.

use std::fmt;

use crate::bindings::log::{Host, Level};
use crate::digest::Digest;
use crate::invocation::{LogLevel, LogRecord, LogSource};
use crate::state::{InvocationTags, LogCapture, LogView};

/// Longest kept log message, in bytes; longer ones are truncated, never
/// refused (the WIT promises the handler that).
pub(crate) const MAX_LOG_MESSAGE_BYTES: usize = 8 << 10;
/// Longest kept field name or value, in bytes.
pub(crate) const MAX_LOG_FIELD_BYTES: usize = 1 << 10;
/// Fields kept per record.
pub(crate) const MAX_LOG_FIELDS: usize = 32;
/// Records kept per event; the rest are counted and reported as one note.
pub(crate) const MAX_LOG_RECORDS_PER_EVENT: usize = 1_000;

impl Host for LogView<'_> {
    fn write(&mut self, level: Level, message: String, fields: Vec<(String, String)>) {
        let fields = fields
            .into_iter()
            .take(MAX_LOG_FIELDS)
            .map(|(name, value)| {
                (
                    truncate(name, MAX_LOG_FIELD_BYTES),
                    truncate(value, MAX_LOG_FIELD_BYTES),
                )
            })
            .collect();
        self.capture.push(LogRecord {
            level: level.into(),
            source: LogSource::Handler,
            message: truncate(message, MAX_LOG_MESSAGE_BYTES),
            fields,
        });
    }

    fn panicked(&mut self, message: String) {
        let message = truncate(message, MAX_LOG_MESSAGE_BYTES);
        self.capture.push(LogRecord {
            level: LogLevel::Error,
            source: LogSource::Handler,
            message: format!("handler panicked: {message}"),
            fields: Vec::new(),
        });
        self.panic_message.get_or_insert(message);
    }
}

impl From<Level> for LogLevel {
    fn from(level: Level) -> Self {
        match level {
            Level::Trace => Self::Trace,
            Level::Debug => Self::Debug,
            Level::Info => Self::Info,
            Level::Warn => Self::Warn,
            Level::Error => Self::Error,
        }
    }
}

impl LogCapture {
    /// Emits `record` to tracing and keeps it, within the per-event bound;
    /// past it, only counts it. (The handler runs on an engine worker: a
    /// guest writing log lines in a loop must not also flood the host's
    /// log writer from there.)
    pub(crate) fn push(&mut self, record: LogRecord) {
        if self.records.len() < MAX_LOG_RECORDS_PER_EVENT {
            emit(&self.tags, &record);
            self.records.push(record);
        } else {
            self.dropped += 1;
        }
    }
}

/// A handler's structured fields as a log line shows them: `key=value`,
/// comma-separated, a value quoted only when it needs it.
fn key_values(fields: &[(String, String)]) -> String {
    fields
        .iter()
        .map(|(key, value)| {
            if value.is_empty() || value.contains([' ', ',', '=', '"']) {
                format!("{key}={value:?}")
            } else {
                format!("{key}={value}")
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Emits one handler log record as a tracing event.
pub(crate) fn emit(tags: &InvocationTags, record: &LogRecord) {
    // Field values that need formatting are built inside `event!`, which
    // evaluates them only when a subscriber wants the record: with none, a
    // handler that logs per event paid for hex-formatting the digest anyway.
    let endpoint = tags.endpoint.as_deref();
    let handler = &*tags.handler;
    let event_id = tags.event_id.as_str();
    let session_id = tags.session_id.as_str();
    let source = match record.source {
        LogSource::Handler => "log",
        LogSource::Stdout => "stdout",
        LogSource::Stderr => "stderr",
        LogSource::Sandbox => "sandbox",
    };
    let message = record.message.as_str();
    macro_rules! at {
        ($level:expr) => {
            tracing::event!(
                target: "nimbus::handler",
                $level,
                endpoint,
                handler,
                version = %ShortId { digest: &tags.digest, id: &tags.version_id },
                event_id,
                session_id,
                source,
                fields = (!record.fields.is_empty())
                    .then(|| key_values(&record.fields))
                    .as_deref(),
                "{message}"
            )
        };
    }
    match record.level {
        LogLevel::Trace => at!(tracing::Level::TRACE),
        LogLevel::Debug => at!(tracing::Level::DEBUG),
        LogLevel::Info => at!(tracing::Level::INFO),
        LogLevel::Warn => at!(tracing::Level::WARN),
        LogLevel::Error => at!(tracing::Level::ERROR),
    }
}

/// Cuts `text` to at most `max` bytes on a character boundary, marking the cut.
pub(crate) fn truncate(mut text: String, max: usize) -> String {
    if text.len() <= max {
        return text;
    }
    let mut cut = max;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    text.truncate(cut);
    text.push_str("…[truncated]");
    text
}

/// A version as log lines name it: the digest's short form and the
/// settings suffix (`+…`) when there is one, which is what tells a
/// manifest-only fix from the version before it. Formatted only when a
/// line is written.
pub(crate) struct ShortId<'a> {
    pub(crate) digest: &'a Digest,
    /// The whole version id ([`HandlerVersion::id`](crate::HandlerVersion::id)).
    pub(crate) id: &'a str,
}

impl fmt::Display for ShortId<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.digest.short())?;
        match self.id.split_once('+') {
            Some((_, settings)) => write!(f, "+{settings}"),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::{Arc, Mutex};

    use super::{emit, key_values, truncate};
    use crate::digest::Digest;
    use crate::invocation::{LogLevel, LogRecord, LogSource};
    use crate::state::InvocationTags;

    /// Records every event's fields as strings.
    #[derive(Clone, Default)]
    struct Recorder(Arc<Mutex<Vec<BTreeMap<String, String>>>>);

    struct Fields<'a>(&'a mut BTreeMap<String, String>);

    impl tracing::field::Visit for Fields<'_> {
        fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
            self.0.insert(field.name().to_owned(), value.to_owned());
        }

        fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
            self.0.insert(field.name().to_owned(), format!("{value:?}"));
        }
    }

    impl tracing::Subscriber for Recorder {
        fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
            true
        }
        fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
            tracing::span::Id::from_u64(1)
        }
        fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
        fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
        fn event(&self, event: &tracing::Event<'_>) {
            let mut fields = BTreeMap::new();
            event.record(&mut Fields(&mut fields));
            self.0.lock().expect("recorder lock").push(fields);
        }
        fn enter(&self, _: &tracing::span::Id) {}
        fn exit(&self, _: &tracing::span::Id) {}
    }

    fn record(fields: Vec<(String, String)>) -> LogRecord {
        LogRecord {
            level: LogLevel::Info,
            source: LogSource::Handler,
            message: "order accepted".to_owned(),
            fields,
        }
    }

    // The version and fields are formatted lazily inside `event!`: a
    // subscriber that listens must still get them.
    #[test]
    fn emitted_records_carry_version_and_fields() {
        let digest = Digest::of(b"component");
        let tags = InvocationTags {
            endpoint: Some(Arc::from("billing")),
            handler: Arc::from("orders"),
            digest,
            version_id: Arc::from(format!("{digest}+0123456789ab").as_str()),
            event_id: "e-1".to_owned(),
            session_id: "s-1".to_owned(),
        };
        let recorder = Recorder::default();
        tracing::subscriber::with_default(recorder.clone(), || {
            emit(&tags, &record(vec![("order".to_owned(), "o-1".to_owned())]));
            emit(&tags, &record(Vec::new()));
        });
        let events = recorder.0.lock().expect("recorder lock").clone();
        assert_eq!(events.len(), 2);
        // A manifest-only fix is told from the version before it.
        let short = format!("{}+0123456789ab", digest.short());
        assert_eq!(events[0]["version"], short);
        assert_eq!(events[0]["endpoint"], "billing");
        assert_eq!(events[0]["handler"], "orders");
        assert_eq!(events[0]["event_id"], "e-1");
        assert_eq!(events[0]["message"], "order accepted");
        assert_eq!(events[0]["fields"], "order=o-1", "{events:?}");
        assert_eq!(events[1]["version"], short);
        assert!(!events[1].contains_key("fields"), "{events:?}");
    }

    #[test]
    fn fields_read_as_key_values_quoted_only_when_needed() {
        let fields = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect()
        };
        assert_eq!(
            key_values(&fields(&[("order", "o-1"), ("channel", "email")])),
            "order=o-1, channel=email"
        );
        assert_eq!(
            key_values(&fields(&[("note", "two words"), ("empty", "")])),
            "note=\"two words\", empty=\"\""
        );
    }

    #[test]
    fn truncation_respects_char_boundaries() {
        let text = "é".repeat(10); // 20 bytes
        let cut = truncate(text, 5);
        assert!(cut.starts_with("éé"));
        assert!(cut.ends_with("[truncated]"));
        assert_eq!(truncate("short".to_owned(), 10), "short");
    }
}
