//! What the Resolver's test suites share: messages as the bus delivers
//! them to the Resolver.

use nimbus_wire::{EventContent, MessageContent, MessageType, NimbusMessage};

/// The copy of a publish by `storefront` that endpoint `billing` receives
/// (wire vector 02).
pub(crate) fn forwarded(event_id: &str, session: &str, message_id: &str) -> NimbusMessage {
    NimbusMessage {
        message_id: Some(message_id.into()),
        session_id: Some(session.into()),
        correlation_id: Some("corr-7".into()),
        to: Some("billing".into()),
        from: Some("storefront".into()),
        message_type: MessageType::EventRequest,
        event_id: Some(event_id.into()),
        event_type_id: Some("OrderPlaced".into()),
        originating_from: Some("storefront".into()),
        content: Some(MessageContent::event(EventContent::new(
            "OrderPlaced",
            r#"{"OrderId":"o-1001"}"#,
        ))),
        ..NimbusMessage::default()
    }
}
