//! What a handler can see of its event and ask of the host while handling it.

use std::fmt;
use std::str::FromStr;
use std::time::{Duration, SystemTime};

use crate::bindings::nimbus::handler::types as wit;
use crate::host::Host;
use crate::level::Level;
use crate::{Error, FollowUp, Property, PropertyValue, PublishError};

/// The event's metadata and the host's services for one [`Handler::handle`](crate::Handler::handle) call.
///
/// Logging, publishing and configuration go to the host, which ties each to
/// this event (endpoint, handler version, event id, session).
pub struct Context {
    event_id: String,
    event_type: String,
    message_id: String,
    session_id: String,
    correlation_id: Option<String>,
    parent_message_id: Option<String>,
    originating_message_id: Option<String>,
    retry_count: u32,
    enqueued_time_ms: u64,
    payload: String,
    properties: Vec<Property>,
    host: &'static dyn Host,
}

impl fmt::Debug for Context {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Context")
            .field("event_id", &self.event_id)
            .field("event_type", &self.event_type)
            .field("message_id", &self.message_id)
            .field("session_id", &self.session_id)
            .field("retry_count", &self.retry_count)
            .finish_non_exhaustive()
    }
}

impl Context {
    pub(crate) fn new(event: wit::Event, host: &'static dyn Host) -> Self {
        Self {
            event_id: event.event_id,
            event_type: event.event_type,
            message_id: event.message_id,
            session_id: event.session_id,
            correlation_id: event.correlation_id,
            parent_message_id: event.parent_message_id,
            originating_message_id: event.originating_message_id,
            retry_count: event.retry_count,
            enqueued_time_ms: event.enqueued_time,
            payload: event.payload,
            properties: event
                .properties
                .into_iter()
                .map(|p| Property {
                    name: p.name,
                    value: p.value.into(),
                })
                .collect(),
            host,
        }
    }

    /// The logical id of this event for this endpoint (`EventId`). It stays the
    /// same across retries, resubmissions and replays: derive follow-up message
    /// ids and external job ids from it.
    pub fn event_id(&self) -> &str {
        &self.event_id
    }

    /// The event type (`EventTypeId`).
    pub fn event_type(&self) -> &str {
        &self.event_type
    }

    /// The broker message id of the delivery being handled.
    pub fn message_id(&self) -> &str {
        &self.message_id
    }

    /// The session (ordering key) the event belongs to.
    pub fn session_id(&self) -> &str {
        &self.session_id
    }

    /// The business correlation id, kept end to end.
    pub fn correlation_id(&self) -> Option<&str> {
        self.correlation_id.as_deref()
    }

    /// The message that caused this one; `None` for the first of its lineage.
    pub fn parent_message_id(&self) -> Option<&str> {
        self.parent_message_id.as_deref()
    }

    /// The first message of this lineage; `None` when this is it.
    pub fn originating_message_id(&self) -> Option<&str> {
        self.originating_message_id.as_deref()
    }

    /// Which automatic retry this is: 0 on the first attempt.
    pub fn retry_count(&self) -> u32 {
        self.retry_count
    }

    /// How many times the broker has delivered this message, this time
    /// included: 1 the first time, more after a `transient` error or a lost
    /// session lock (a host that stopped mid-handler may not have counted
    /// its delivery). Check here whether an earlier attempt's side effect
    /// already happened before repeating it. A retry or a resubmission is a
    /// new message and counts from 1 again: see [`Self::retry_count`] and
    /// [`Self::message_type`].
    pub fn delivery_count(&self) -> u32 {
        self.host.delivery_count()
    }

    /// The NimBus message type that brought the event: `EventRequest` when
    /// it was published (or replayed after its session was unblocked),
    /// `RetryRequest` for an automatic retry, `ResubmissionRequest` when an
    /// operator resubmitted it (possibly with an edited payload).
    pub fn message_type(&self) -> String {
        self.host.message_type()
    }

    /// The NimBus `From` of the message that brought the event: the endpoint
    /// that published it for an `EventRequest`, `Retry` for a `RetryRequest`,
    /// `Manager` for a `ResubmissionRequest`.
    pub fn sender(&self) -> Option<String> {
        self.host.sender()
    }

    /// When the broker enqueued the message, in milliseconds since the Unix
    /// epoch (UTC).
    pub fn enqueued_time_ms(&self) -> u64 {
        self.enqueued_time_ms
    }

    /// When the broker enqueued the message.
    pub fn enqueued_time(&self) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_millis(self.enqueued_time_ms)
    }

    /// The raw JSON payload, as delivered.
    pub fn payload(&self) -> &str {
        &self.payload
    }

    /// The user properties other than the NimBus envelope properties.
    ///
    /// They travel with the published message and its copies: a retry, a
    /// parked event's replay, a dead-letter replay, and a resubmission (the
    /// Resolver keeps the published message's, and the Manager sends them
    /// again; an edited resubmission changes the payload only).
    pub fn properties(&self) -> &[Property] {
        &self.properties
    }

    /// The value of one user property (case-sensitive name).
    pub fn property(&self, name: &str) -> Option<&PropertyValue> {
        self.properties
            .iter()
            .find(|p| p.name == name)
            .map(|p| &p.value)
    }

    /// Writes a log record with structured fields. The host truncates an
    /// over-long message or field; it never refuses one.
    ///
    /// ```no_run
    /// # fn f(ctx: &nimbus_guest::Context) {
    /// ctx.log(nimbus_guest::Level::Info, "order accepted", &[("order_id", &"o-1"), ("total", &150.0)]);
    /// # }
    /// ```
    pub fn log(&self, level: Level, message: &str, fields: &[(&str, &dyn fmt::Display)]) {
        let fields: Vec<(String, String)> = fields
            .iter()
            .map(|(name, value)| ((*name).to_owned(), value.to_string()))
            .collect();
        self.host.log(level, message, &fields);
    }

    /// Logs at [`Level::Trace`].
    pub fn trace(&self, message: &str) {
        self.log(Level::Trace, message, &[]);
    }

    /// Logs at [`Level::Debug`].
    pub fn debug(&self, message: &str) {
        self.log(Level::Debug, message, &[]);
    }

    /// Logs at [`Level::Info`].
    pub fn info(&self, message: &str) {
        self.log(Level::Info, message, &[]);
    }

    /// Logs at [`Level::Warn`].
    pub fn warn(&self, message: &str) {
        self.log(Level::Warn, message, &[]);
    }

    /// Logs at [`Level::Error`].
    pub fn error(&self, message: &str) {
        self.log(Level::Error, message, &[]);
    }

    /// Publishes a follow-up event, sent by the host with the outcome (see
    /// [`FollowUp`]).
    ///
    /// # Errors
    ///
    /// When the payload cannot be serialized or the host refuses the follow-up
    /// (invalid argument, per-event limit). `?` turns it into a `failed`
    /// handler error with error type `PublishRejected`.
    pub fn publish(&self, follow_up: FollowUp) -> Result<(), PublishError> {
        let follow_up = follow_up.into_wit()?;
        self.host.publish(&follow_up).map_err(PublishError::from)
    }

    /// The value of one key of the handler's configuration (the `[config]`
    /// table of its manifest), if set.
    pub fn config(&self, key: &str) -> Option<String> {
        self.host.config(key)
    }

    /// Every configuration key and value, sorted by key.
    pub fn config_all(&self) -> Vec<(String, String)> {
        self.host.config_all()
    }

    /// One configuration value parsed as `T`, or `None` when the key is unset.
    ///
    /// # Errors
    ///
    /// A value that does not parse is `failed` with error type
    /// `InvalidConfig`, naming the key, the value and the expected type: the
    /// operator fixes the manifest and resubmits.
    pub fn config_parse<T>(&self, key: &str) -> Result<Option<T>, Error>
    where
        T: FromStr,
        T::Err: fmt::Display,
    {
        let Some(raw) = self.config(key) else {
            return Ok(None);
        };
        raw.parse::<T>().map(Some).map_err(|e| {
            Error::failed(
                "InvalidConfig",
                format!(
                    "config key `{key}` = {raw:?} is not a valid {}: {e}",
                    std::any::type_name::<T>()
                ),
            )
        })
    }
}
