//! What the engine's integration tests share.

use nimbus_transport::Message;
use nimbus_wire::{ControlKey, EventContent, MessageContent, MessageType, NimbusMessage};

/// The endpoint every test runs.
pub(crate) const E: &str = "billing";

/// The hosts' control key in these tests.
pub(crate) fn control_key() -> ControlKey {
    ControlKey::new("test-control-key-0123456789abcdef").expect("a valid key")
}

/// `message` as the Manager sends it: signed with [`control_key`].
pub(crate) fn signed(mut message: Message) -> Message {
    nimbus_wire::control_signature::sign(&control_key(), &mut message);
    message
}

/// An `OrderPlaced` EventRequest as the forwarder delivers it to [`E`]:
/// message id `msg-{event_id}`, correlation id `corr-1`, from `storefront`,
/// with `payload` as the event.
pub(crate) fn event_request(
    session: &str,
    event_id: &str,
    payload: &serde_json::Value,
) -> NimbusMessage {
    NimbusMessage {
        message_id: Some(format!("msg-{event_id}")),
        session_id: Some(session.to_owned()),
        correlation_id: Some("corr-1".to_owned()),
        to: Some(E.to_owned()),
        from: Some("storefront".to_owned()),
        message_type: MessageType::EventRequest,
        event_id: Some(event_id.to_owned()),
        event_type_id: Some("OrderPlaced".to_owned()),
        content: Some(MessageContent::event(EventContent::new(
            "OrderPlaced".to_owned(),
            payload.to_string(),
        ))),
        ..NimbusMessage::default()
    }
}
