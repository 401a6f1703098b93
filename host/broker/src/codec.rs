//! How a message is stored: postcard (compact, length-prefixed serde) of
//! [`Message`]. A stored blob is only ever read back by this module.

use nimbus_transport::Message;

/// Encodes a message for storage.
pub(crate) fn encode(message: &Message) -> Vec<u8> {
    // Serializing plain data into a Vec cannot fail; an error here is a bug
    // in the message type's serde derive, so store nothing rather than panic.
    postcard::to_allocvec(message).unwrap_or_else(|error| {
        tracing::error!(%error, "encoding a message failed");
        Vec::new()
    })
}

/// Decodes a stored message.
pub(crate) fn decode(bytes: &[u8]) -> Result<Message, postcard::Error> {
    postcard::from_bytes(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, SystemTime};

    #[test]
    fn a_message_with_every_field_survives_encoding() {
        let mut message = Message::new(vec![1, 2, 3]);
        message.message_id = Some("m-1".into());
        message.session_id = Some("s".into());
        message.time_to_live = Some(Duration::from_millis(1500));
        message.scheduled_enqueue_time = Some(SystemTime::UNIX_EPOCH + Duration::from_secs(9));
        message.properties.insert("n".into(), 7i64.into());
        message
            .properties
            .insert("f".into(), nimbus_transport::PropertyValue::Float(0.5));
        message.properties.insert("b".into(), true.into());
        let decoded = decode(&encode(&message)).expect("decodes");
        assert_eq!(decoded, message);
    }

    #[test]
    fn a_truncated_blob_is_an_error_not_a_panic() {
        let bytes = encode(&Message::new(vec![9; 40]));
        assert!(decode(&bytes[..bytes.len() / 2]).is_err());
    }
}
