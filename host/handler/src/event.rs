//! One event as a handler sees it.

use std::time::{SystemTime, UNIX_EPOCH};

use nimbus_transport::Properties;

/// One event to run through a handler (the WIT `event` record, plus what
/// the WIT `delivery` interface answers).
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// The logical event id (`EventId` at this endpoint); stable across
    /// retries and resubmissions.
    pub event_id: String,
    /// The event type (`EventTypeId`), e.g. `OrderPlaced`; selects the
    /// handler.
    pub event_type: String,
    /// The broker message id of this delivery.
    pub message_id: String,
    /// The session (ordering key).
    pub session_id: String,
    /// The business correlation id.
    pub correlation_id: Option<String>,
    /// The message that caused this one (`None` for `self`).
    pub parent_message_id: Option<String>,
    /// The first message of this lineage (`None` for `self`).
    pub originating_message_id: Option<String>,
    /// The automatic retry count: 0 on the first attempt.
    pub retry_count: u32,
    /// When the broker enqueued this delivery.
    pub enqueued_time: SystemTime,
    /// The JSON payload (`EventJson`), as text.
    pub payload: String,
    /// The user properties: the message's application properties other
    /// than the NimBus envelope's.
    pub properties: Properties,
    /// How the event was delivered.
    pub delivery: Delivery,
}

impl Default for Event {
    /// An empty event, first delivered at the Unix epoch: tests and tools
    /// fill in what they need.
    fn default() -> Self {
        Event {
            event_id: String::new(),
            event_type: String::new(),
            message_id: String::new(),
            session_id: String::new(),
            correlation_id: None,
            parent_message_id: None,
            originating_message_id: None,
            retry_count: 0,
            enqueued_time: UNIX_EPOCH,
            payload: String::new(),
            properties: Properties::new(),
            delivery: Delivery::default(),
        }
    }
}

/// How the event was delivered (the WIT `delivery` interface): kept apart
/// from the `event` record, which components compiled before the interface
/// was added receive unchanged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    /// The broker's delivery count, this delivery included (1 the first
    /// time).
    pub count: u32,
    /// The NimBus message type that brought the event (`EventRequest`,
    /// `RetryRequest`, `ResubmissionRequest`): one of the wire's names,
    /// borrowed, so no event pays for a copy the handler may never ask for.
    pub message_type: &'static str,
    /// The message's `From`: the publishing endpoint, `Retry` or `Manager`.
    pub from: Option<String>,
}

impl Default for Delivery {
    /// A first delivery of a published event: also what the `delivery`
    /// interface answers outside an event (the WIT contract says so).
    fn default() -> Self {
        Delivery {
            count: 1,
            message_type: "EventRequest",
            from: None,
        }
    }
}
