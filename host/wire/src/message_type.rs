//! The NimBus `MessageType`: upstream's enum, its names and numeric values.

use std::fmt;
use std::str::FromStr;

/// What a NimBus message is. Sent on the wire as the variant name; the
/// numeric value is upstream's declaration order, which upstream also accepts
/// as a numeric string (nimbus-semantics.md §2.3).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum MessageType {
    /// Not a valid message: dead-lettered on receipt.
    #[default]
    Unknown = 0,
    /// An event for a handler (publish, forward, replay, heartbeat probe).
    EventRequest = 1,
    /// The handler failed, or a dead-letter notification.
    ErrorResponse = 2,
    /// The event was handled.
    ResolutionResponse = 3,
    /// The event was parked behind a blocked session.
    DeferralResponse = 4,
    /// The event was skipped (operator, duplicate or discard).
    SkipResponse = 5,
    /// The operator resubmits an event.
    ResubmissionRequest = 6,
    /// The operator skips an event.
    SkipRequest = 7,
    /// An automatic retry scheduled by the host.
    RetryRequest = 8,
    /// Legacy in-session deferral drain.
    ContinuationRequest = 9,
    /// No handler for the event type.
    UnsupportedResponse = 10,
    /// Asks the deferred processor to replay a session's parked messages.
    ProcessDeferredRequest = 11,
    /// The handler handed the event off to an external job.
    PendingHandoffResponse = 12,
    /// The external job finished: settle the pending event.
    HandoffCompletedRequest = 13,
    /// The external job failed.
    HandoffFailedRequest = 14,
}

/// Every message type, in declaration order.
const ALL: [MessageType; 15] = [
    MessageType::Unknown,
    MessageType::EventRequest,
    MessageType::ErrorResponse,
    MessageType::ResolutionResponse,
    MessageType::DeferralResponse,
    MessageType::SkipResponse,
    MessageType::ResubmissionRequest,
    MessageType::SkipRequest,
    MessageType::RetryRequest,
    MessageType::ContinuationRequest,
    MessageType::UnsupportedResponse,
    MessageType::ProcessDeferredRequest,
    MessageType::PendingHandoffResponse,
    MessageType::HandoffCompletedRequest,
    MessageType::HandoffFailedRequest,
];

impl MessageType {
    /// Every message type, in declaration (numeric) order.
    pub fn all() -> &'static [MessageType] {
        &ALL
    }

    /// The name as sent on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            MessageType::Unknown => "Unknown",
            MessageType::EventRequest => "EventRequest",
            MessageType::ErrorResponse => "ErrorResponse",
            MessageType::ResolutionResponse => "ResolutionResponse",
            MessageType::DeferralResponse => "DeferralResponse",
            MessageType::SkipResponse => "SkipResponse",
            MessageType::ResubmissionRequest => "ResubmissionRequest",
            MessageType::SkipRequest => "SkipRequest",
            MessageType::RetryRequest => "RetryRequest",
            MessageType::ContinuationRequest => "ContinuationRequest",
            MessageType::UnsupportedResponse => "UnsupportedResponse",
            MessageType::ProcessDeferredRequest => "ProcessDeferredRequest",
            MessageType::PendingHandoffResponse => "PendingHandoffResponse",
            MessageType::HandoffCompletedRequest => "HandoffCompletedRequest",
            MessageType::HandoffFailedRequest => "HandoffFailedRequest",
        }
    }

    /// Upstream's numeric value.
    pub fn value(self) -> u8 {
        self as u8
    }

    /// The type with this numeric value.
    pub fn from_value(value: i64) -> Option<MessageType> {
        usize::try_from(value)
            .ok()
            .and_then(|i| ALL.get(i))
            .copied()
    }

    /// Whether a message of this type must carry an `EventId`: every type the
    /// endpoint subscription handles for one event, and every response about
    /// one (`ProcessDeferredRequest` names a session, not an event).
    pub fn requires_event_id(self) -> bool {
        !matches!(
            self,
            MessageType::Unknown | MessageType::ProcessDeferredRequest
        )
    }

    /// Whether receiving this type may run a handler, so the message must name
    /// its event type and carry a decodable event payload.
    /// (`UnsupportedResponse` is upstream's odd route into the EventRequest
    /// procedure, F12.)
    pub fn runs_handler(self) -> bool {
        matches!(
            self,
            MessageType::EventRequest
                | MessageType::RetryRequest
                | MessageType::ResubmissionRequest
                | MessageType::UnsupportedResponse
        )
    }

    /// Whether this is an operator control request that must come from the Manager.
    pub fn is_control_request(self) -> bool {
        matches!(
            self,
            MessageType::ResubmissionRequest
                | MessageType::SkipRequest
                | MessageType::HandoffCompletedRequest
                | MessageType::HandoffFailedRequest
        )
    }

    /// Whether this is a response sent to the Resolver.
    pub fn is_response(self) -> bool {
        matches!(
            self,
            MessageType::ErrorResponse
                | MessageType::ResolutionResponse
                | MessageType::DeferralResponse
                | MessageType::SkipResponse
                | MessageType::UnsupportedResponse
                | MessageType::PendingHandoffResponse
        )
    }
}

impl fmt::Display for MessageType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A `MessageType` value that is neither a known name nor a known number.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("MessageType '{0}' is not a known NimBus message type")]
pub struct UnknownMessageType(pub String);

impl FromStr for MessageType {
    type Err = UnknownMessageType;

    /// Parses a name (case-sensitive, as upstream's `Enum.TryParse` with
    /// `ignoreCase: false`) or a numeric string such as `"8"`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if let Some(found) = ALL.iter().find(|t| t.as_str() == s) {
            return Ok(*found);
        }
        // .NET's Enum.TryParse also takes the numeric value as text.
        s.trim()
            .parse::<i64>()
            .ok()
            .and_then(MessageType::from_value)
            .ok_or_else(|| UnknownMessageType(s.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_values_match_upstream_declaration_order() {
        for (i, t) in MessageType::all().iter().enumerate() {
            assert_eq!(usize::from(t.value()), i);
            assert_eq!(t.as_str().parse::<MessageType>(), Ok(*t));
            assert_eq!(i.to_string().parse::<MessageType>(), Ok(*t));
        }
        assert_eq!(MessageType::RetryRequest.value(), 8);
        assert_eq!(MessageType::HandoffFailedRequest.value(), 14);
    }

    #[test]
    fn names_are_case_sensitive_and_unknown_values_are_errors() {
        assert!("eventrequest".parse::<MessageType>().is_err());
        assert!("EVENTREQUEST".parse::<MessageType>().is_err());
        assert!("15".parse::<MessageType>().is_err());
        assert!("-1".parse::<MessageType>().is_err());
        assert!("".parse::<MessageType>().is_err());
        assert!("Bogus".parse::<MessageType>().is_err());
        let err = "Bogus".parse::<MessageType>().unwrap_err();
        assert_eq!(
            err.to_string(),
            "MessageType 'Bogus' is not a known NimBus message type"
        );
    }
}
