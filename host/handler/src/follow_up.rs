//! A follow-up event a handler publishes.

use nimbus_transport::Properties;

/// A follow-up event the handler asked to publish: held until the outcome
/// is known, then sent with the settlement or dropped (SEMANTICS.md §9).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FollowUp {
    /// The event type of the follow-up.
    pub event_type: String,
    /// The message id the handler chose (deterministic, so a replay
    /// repeats it).
    pub message_id: String,
    /// The JSON payload, as text (validated as JSON by the sandbox).
    pub payload: String,
    /// The session; `None` keeps the inbound event's session.
    pub session_id: Option<String>,
    /// Extra user properties: a name the handler gave twice keeps its last
    /// value, as the message it becomes can hold only one.
    pub properties: Properties,
}
