//! `nimbus:handler/publish`: follow-up events are validated and held, never
//! sent; the engine sends them at settlement (SEMANTICS.md §9).

use nimbus_handler::FollowUp;

use crate::bindings::publish::Host;
use crate::bindings::types::{FollowUp as WitFollowUp, HostError};
use crate::host::convert::property_from_wit;
use crate::state::PublishView;

/// Follow-up events one invocation may publish: a fan-out larger than this
/// belongs in a batch job, and the whole set is sent in one settlement.
pub const MAX_FOLLOW_UPS_PER_EVENT: usize = 100;
/// Largest follow-up payload, in bytes: Service Bus standard tier's message
/// size limit.
pub const MAX_FOLLOW_UP_PAYLOAD_BYTES: usize = 256 << 10;
/// Total follow-up bytes (payloads, ids, properties) per invocation: bounds
/// the host memory one event can pin until settlement.
pub const MAX_FOLLOW_UP_BYTES_PER_EVENT: usize = 1 << 20;
/// Longest message id or session id: Service Bus's limit for both.
pub const MAX_MESSAGE_ID_LEN: usize = 128;
/// Longest event type name.
pub(crate) const MAX_EVENT_TYPE_LEN: usize = 256;
/// User properties per follow-up.
pub(crate) const MAX_PROPERTIES: usize = 64;

impl Host for PublishView<'_> {
    fn send(&mut self, event: WitFollowUp) -> Result<(), HostError> {
        let size = validate(&event)?;
        if self.outbox.follow_ups.len() >= MAX_FOLLOW_UPS_PER_EVENT {
            return Err(HostError::LimitExceeded(format!(
                "at most {MAX_FOLLOW_UPS_PER_EVENT} follow-up events per event"
            )));
        }
        if self.outbox.bytes + size > MAX_FOLLOW_UP_BYTES_PER_EVENT {
            return Err(HostError::LimitExceeded(format!(
                "follow-up events of one event may total at most {MAX_FOLLOW_UP_BYTES_PER_EVENT} bytes"
            )));
        }
        self.outbox.bytes += size;
        self.outbox.follow_ups.push(FollowUp {
            event_type: event.event_type,
            message_id: event.message_id,
            payload: event.payload,
            session_id: event.session_id,
            properties: event
                .properties
                .into_iter()
                .map(property_from_wit)
                .collect(),
        });
        Ok(())
    }
}

/// Checks one follow-up; returns its size in bytes.
fn validate(event: &WitFollowUp) -> Result<usize, HostError> {
    let invalid = |text: String| Err(HostError::InvalidArgument(text));
    if event.event_type.trim().is_empty() {
        return invalid("event-type is empty".to_owned());
    }
    if event.event_type.len() > MAX_EVENT_TYPE_LEN {
        return Err(HostError::LimitExceeded(format!(
            "event-type is longer than {MAX_EVENT_TYPE_LEN} bytes"
        )));
    }
    if event.message_id.trim().is_empty() {
        return invalid(
            "message-id is empty: derive it from the inbound event, e.g. \"{event-id}:step\""
                .to_owned(),
        );
    }
    if event.message_id.len() > MAX_MESSAGE_ID_LEN {
        return Err(HostError::LimitExceeded(format!(
            "message-id is longer than {MAX_MESSAGE_ID_LEN} bytes"
        )));
    }
    if let Some(session) = &event.session_id {
        if session.trim().is_empty() {
            return invalid(
                "session-id is empty: pass none to keep the inbound session".to_owned(),
            );
        }
        if session.len() > MAX_MESSAGE_ID_LEN {
            return Err(HostError::LimitExceeded(format!(
                "session-id is longer than {MAX_MESSAGE_ID_LEN} bytes"
            )));
        }
    }
    if event.payload.len() > MAX_FOLLOW_UP_PAYLOAD_BYTES {
        return Err(HostError::LimitExceeded(format!(
            "payload is {} bytes, over the limit of {MAX_FOLLOW_UP_PAYLOAD_BYTES}",
            event.payload.len()
        )));
    }
    if let Err(error) = serde_json::from_str::<serde::de::IgnoredAny>(&event.payload) {
        return invalid(format!("payload is not JSON: {error}"));
    }
    if event.properties.len() > MAX_PROPERTIES {
        return Err(HostError::LimitExceeded(format!(
            "at most {MAX_PROPERTIES} properties per follow-up"
        )));
    }
    if event.properties.iter().any(|p| p.name.trim().is_empty()) {
        return invalid("a property name is empty".to_owned());
    }
    let properties: usize = event
        .properties
        .iter()
        .map(|p| p.name.len() + 16)
        .sum::<usize>();
    Ok(event.event_type.len()
        + event.message_id.len()
        + event.payload.len()
        + event.session_id.as_ref().map_or(0, String::len)
        + properties)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::Outbox;

    fn follow_up(message_id: &str, payload: &str) -> WitFollowUp {
        WitFollowUp {
            event_type: "OrderShipped".to_owned(),
            message_id: message_id.to_owned(),
            payload: payload.to_owned(),
            session_id: None,
            properties: Vec::new(),
        }
    }

    fn send(outbox: &mut Outbox, event: WitFollowUp) -> Result<(), HostError> {
        PublishView { outbox }.send(event)
    }

    #[test]
    fn a_valid_follow_up_is_held() {
        let mut outbox = Outbox::default();
        send(&mut outbox, follow_up("e1:ship", r#"{"a":1}"#)).expect("valid");
        assert_eq!(outbox.follow_ups.len(), 1);
        assert_eq!(outbox.follow_ups[0].message_id, "e1:ship");
    }

    #[test]
    fn an_empty_message_id_is_refused() {
        let mut outbox = Outbox::default();
        let error = send(&mut outbox, follow_up("  ", "{}")).expect_err("empty id");
        assert!(matches!(error, HostError::InvalidArgument(ref m) if m.contains("message-id")));
        assert!(outbox.follow_ups.is_empty());
    }

    #[test]
    fn a_payload_that_is_not_json_is_refused() {
        let mut outbox = Outbox::default();
        let error = send(&mut outbox, follow_up("id", "{not json")).expect_err("bad json");
        assert!(matches!(error, HostError::InvalidArgument(ref m) if m.contains("not JSON")));
    }

    #[test]
    fn the_follow_up_count_is_bounded() {
        let mut outbox = Outbox::default();
        for i in 0..MAX_FOLLOW_UPS_PER_EVENT {
            send(&mut outbox, follow_up(&format!("id{i}"), "1")).expect("within bound");
        }
        let error = send(&mut outbox, follow_up("one-too-many", "1")).expect_err("over bound");
        assert!(matches!(error, HostError::LimitExceeded(_)));
        assert_eq!(outbox.follow_ups.len(), MAX_FOLLOW_UPS_PER_EVENT);
    }

    #[test]
    fn payload_size_is_bounded() {
        let mut outbox = Outbox::default();
        let big = format!("\"{}\"", "x".repeat(MAX_FOLLOW_UP_PAYLOAD_BYTES));
        let error = send(&mut outbox, follow_up("id", &big)).expect_err("too big");
        assert!(matches!(error, HostError::LimitExceeded(_)));
    }

    #[test]
    fn total_follow_up_bytes_are_bounded() {
        let mut outbox = Outbox::default();
        let payload = format!("\"{}\"", "x".repeat(200 << 10));
        let mut accepted = 0;
        for i in 0..10 {
            if send(&mut outbox, follow_up(&format!("id{i}"), &payload)).is_ok() {
                accepted += 1;
            }
        }
        assert_eq!(accepted, 5, "1 MiB holds five 200 KiB payloads");
        assert!(outbox.bytes <= MAX_FOLLOW_UP_BYTES_PER_EVENT);
    }
}
