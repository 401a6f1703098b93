//! Running a handler natively in a unit test, against a recording host.
//!
//! The SDK compiles for the host too (the imports are never called there), so
//! a handler crate can test its logic with plain `cargo test`, without
//! building a component or starting a host. [`TestHost::handle`] decodes the
//! payload and calls the handler exactly as the component's `dispatch` export
//! does, and records what the handler logged and published:
//!
//! ```
//! use nimbus_guest::testing::{TestEvent, TestHost};
//! use nimbus_guest::{Context, Error, Event, Handler, Outcome};
//!
//! #[derive(serde::Deserialize)]
//! struct Ping { n: u32 }
//! impl Event for Ping { const EVENT_TYPE: &'static str = "Ping"; }
//!
//! struct Pinger;
//! impl Handler<Ping> for Pinger {
//!     fn handle(&self, ping: Ping, ctx: &Context) -> Result<Outcome, Error> {
//!         nimbus_guest::info!(ctx, "ping {}", ping.n);
//!         Ok(Outcome::Completed)
//!     }
//! }
//!
//! let run = TestHost::new().handle(&Pinger, TestEvent::new("Ping", r#"{"n":7}"#));
//! assert_eq!(run.result, Ok(Outcome::Completed));
//! assert_eq!(run.logs[0].message, "ping 7");
//!
//! let run = TestHost::new().handle(&Pinger, TestEvent::new("Ping", r#"{"n":"x"}"#));
//! assert_eq!(run.result.unwrap_err().error_type(), "InvalidPayload");
//! ```
//!
//! What a component does beyond that — traps, limits, the real host's
//! validation of follow-ups — only the host's tests with built components can
//! show.

use std::cell::RefCell;

use serde::de::DeserializeOwned;

use crate::bindings::nimbus::handler::types as wit;
use crate::host::Host;
use crate::{Context, Error, Event, Handler, Level, Outcome, Property, PropertyValue};

/// An event for [`TestHost::handle`], with test defaults for its metadata:
/// event id `test-event`, message id `test-message`, session `test-session`,
/// no correlation or lineage, retry count 0, enqueued at 0 ms, first
/// delivery of an `EventRequest` from no named endpoint.
#[derive(Debug, Clone)]
pub struct TestEvent {
    event: wit::Event,
    delivery: TestDelivery,
}

/// What [`Context::delivery_count`], [`Context::message_type`] and
/// [`Context::sender`] answer in a test.
#[derive(Debug, Clone)]
struct TestDelivery {
    count: u32,
    message_type: String,
    from: Option<String>,
}

impl Default for TestDelivery {
    fn default() -> Self {
        Self {
            count: 1,
            message_type: "EventRequest".to_owned(),
            from: None,
        }
    }
}

impl TestEvent {
    /// An event of `event_type` carrying the JSON text `payload`.
    pub fn new(event_type: impl Into<String>, payload: impl Into<String>) -> Self {
        Self {
            event: wit::Event {
                event_id: "test-event".to_owned(),
                event_type: event_type.into(),
                message_id: "test-message".to_owned(),
                session_id: "test-session".to_owned(),
                correlation_id: None,
                parent_message_id: None,
                originating_message_id: None,
                retry_count: 0,
                enqueued_time: 0,
                payload: payload.into(),
                properties: Vec::new(),
            },
            delivery: TestDelivery::default(),
        }
    }

    /// Sets the broker's delivery count (1 is the first delivery).
    #[must_use]
    pub fn delivery_count(mut self, count: u32) -> Self {
        self.delivery.count = count;
        self
    }

    /// Sets the message type (`EventRequest`, `RetryRequest`,
    /// `ResubmissionRequest`).
    #[must_use]
    pub fn message_type(mut self, message_type: impl Into<String>) -> Self {
        self.delivery.message_type = message_type.into();
        self
    }

    /// Sets the NimBus `From` of the message (`Context::sender`).
    #[must_use]
    pub fn sender(mut self, endpoint: impl Into<String>) -> Self {
        self.delivery.from = Some(endpoint.into());
        self
    }

    /// Sets the event id.
    #[must_use]
    pub fn event_id(mut self, id: impl Into<String>) -> Self {
        self.event.event_id = id.into();
        self
    }

    /// Sets the message id.
    #[must_use]
    pub fn message_id(mut self, id: impl Into<String>) -> Self {
        self.event.message_id = id.into();
        self
    }

    /// Sets the session id.
    #[must_use]
    pub fn session_id(mut self, id: impl Into<String>) -> Self {
        self.event.session_id = id.into();
        self
    }

    /// Sets the correlation id.
    #[must_use]
    pub fn correlation_id(mut self, id: impl Into<String>) -> Self {
        self.event.correlation_id = Some(id.into());
        self
    }

    /// Sets the parent and originating message ids.
    #[must_use]
    pub fn lineage(mut self, parent: impl Into<String>, originating: impl Into<String>) -> Self {
        self.event.parent_message_id = Some(parent.into());
        self.event.originating_message_id = Some(originating.into());
        self
    }

    /// Sets the retry count.
    #[must_use]
    pub fn retry_count(mut self, count: u32) -> Self {
        self.event.retry_count = count;
        self
    }

    /// Sets the enqueued time, in milliseconds since the Unix epoch.
    #[must_use]
    pub fn enqueued_time_ms(mut self, ms: u64) -> Self {
        self.event.enqueued_time = ms;
        self
    }

    /// Adds a user property.
    #[must_use]
    pub fn property(mut self, name: impl Into<String>, value: impl Into<PropertyValue>) -> Self {
        let value: PropertyValue = value.into();
        self.event.properties.push(wit::Property {
            name: name.into(),
            value: value.into(),
        });
        self
    }
}

/// A refusal the test host answers every publish with, to test how a
/// handler copes with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// `host-error.invalid-argument` with this text.
    InvalidArgument(String),
    /// `host-error.limit-exceeded` with this text.
    LimitExceeded(String),
}

/// A host for native tests: serves configuration, records logs and
/// follow-ups, and can refuse publishing.
#[derive(Debug, Clone, Default)]
pub struct TestHost {
    config: Vec<(String, String)>,
    refusal: Option<Refusal>,
}

/// One log record a handler wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogRecord {
    /// Its level.
    pub level: Level,
    /// Its message.
    pub message: String,
    /// Its structured fields, in order.
    pub fields: Vec<(String, String)>,
}

/// One follow-up a handler published (and the host accepted).
#[derive(Debug, Clone, PartialEq)]
pub struct Published {
    /// Its event type.
    pub event_type: String,
    /// Its message id.
    pub message_id: String,
    /// Its JSON payload.
    pub payload: String,
    /// Its session, if not the inbound one.
    pub session_id: Option<String>,
    /// Its user properties.
    pub properties: Vec<Property>,
}

/// What one [`TestHost::handle`] call produced.
#[derive(Debug, Clone, PartialEq)]
pub struct TestRun {
    /// The handler's answer (or the SDK's, for a payload that did not decode).
    pub result: Result<Outcome, Error>,
    /// The log records written, in order.
    pub logs: Vec<LogRecord>,
    /// The follow-ups published, in order. A real host drops them when the
    /// result is an error; they are kept here so a test can see them.
    pub follow_ups: Vec<Published>,
}

#[derive(Default)]
struct Recording {
    host: TestHost,
    delivery: TestDelivery,
    logs: Vec<LogRecord>,
    follow_ups: Vec<Published>,
}

thread_local! {
    // The host of the `TestHost::handle` call running on this thread. A
    // thread-local rather than a reference in `Context` keeps the real
    // component's `Context` free of lifetimes and allocation.
    static RECORDING: RefCell<Option<Recording>> = const { RefCell::new(None) };
}

/// Forwards to this thread's [`RECORDING`].
struct ThreadRecorder;

fn with_recording<T>(f: impl FnOnce(&mut Recording) -> T) -> T {
    RECORDING.with(|cell| {
        let mut slot = cell.borrow_mut();
        let recording = slot.get_or_insert_with(Recording::default);
        f(recording)
    })
}

impl Host for ThreadRecorder {
    fn log(&self, level: Level, message: &str, fields: &[(String, String)]) {
        with_recording(|r| {
            r.logs.push(LogRecord {
                level,
                message: message.to_owned(),
                fields: fields.to_vec(),
            });
        });
    }

    fn panicked(&self, _: &str) {}

    fn publish(&self, follow_up: &wit::FollowUp) -> Result<(), wit::HostError> {
        with_recording(|r| {
            match &r.host.refusal {
                Some(Refusal::InvalidArgument(text)) => {
                    return Err(wit::HostError::InvalidArgument(text.clone()));
                }
                Some(Refusal::LimitExceeded(text)) => {
                    return Err(wit::HostError::LimitExceeded(text.clone()));
                }
                None => {}
            }
            r.follow_ups.push(Published {
                event_type: follow_up.event_type.clone(),
                message_id: follow_up.message_id.clone(),
                payload: follow_up.payload.clone(),
                session_id: follow_up.session_id.clone(),
                properties: follow_up
                    .properties
                    .iter()
                    .map(|p| Property {
                        name: p.name.clone(),
                        value: p.value.clone().into(),
                    })
                    .collect(),
            });
            Ok(())
        })
    }

    fn config(&self, key: &str) -> Option<String> {
        with_recording(|r| {
            r.host
                .config
                .iter()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.clone())
        })
    }

    fn config_all(&self) -> Vec<(String, String)> {
        with_recording(|r| {
            let mut all = r.host.config.clone();
            all.sort();
            all
        })
    }

    fn delivery_count(&self) -> u32 {
        with_recording(|r| r.delivery.count)
    }

    fn message_type(&self) -> String {
        with_recording(|r| r.delivery.message_type.clone())
    }

    fn sender(&self) -> Option<String> {
        with_recording(|r| r.delivery.from.clone())
    }
}

impl TestHost {
    /// A host with no configuration that accepts every follow-up.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets one configuration key, as the handler's manifest `[config]` would.
    #[must_use]
    pub fn config(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        let key = key.into();
        self.config.retain(|(k, _)| *k != key);
        self.config.push((key, value.into()));
        self
    }

    /// Refuses every publish with `refusal`.
    #[must_use]
    pub fn refuse_publish(mut self, refusal: Refusal) -> Self {
        self.refusal = Some(refusal);
        self
    }

    /// Runs `handler` on `event` as the component would: checks the event
    /// type, decodes the payload into `E`, calls the handler, and returns what
    /// it answered, logged and published.
    pub fn handle<H, E>(&self, handler: &H, event: TestEvent) -> TestRun
    where
        H: Handler<E>,
        E: Event + DeserializeOwned,
    {
        RECORDING.with(|cell| {
            *cell.borrow_mut() = Some(Recording {
                host: self.clone(),
                delivery: event.delivery.clone(),
                ..Recording::default()
            });
        });
        let ctx = Context::new(event.event, &ThreadRecorder);
        let result = if ctx.event_type() == E::EVENT_TYPE {
            crate::dispatch::decode::<E>(ctx.payload()).and_then(|e| handler.handle(e, &ctx))
        } else {
            Err(crate::dispatch::unknown_event_type_error(
                ctx.event_type(),
                &[E::EVENT_TYPE],
            ))
        };
        let recording = RECORDING
            .with(|cell| cell.borrow_mut().take())
            .unwrap_or_default();
        TestRun {
            result,
            logs: recording.logs,
            follow_ups: recording.follow_ups,
        }
    }
}
