//! The inbox (consumer-side dedup) key, computed exactly as upstream so a
//! nimbus host and a NimBus host can share an inbox store (nimbus-semantics.md §10).

use sha2::{Digest, Sha256};

use crate::dead_letter::utf16_len;

/// The longest message id the inbox records, in UTF-16 units; longer ids bypass it.
pub const MAX_MESSAGE_ID_UTF16: usize = 512;
/// The longest endpoint id the inbox records, in UTF-16 units; longer ids bypass it.
pub const MAX_ENDPOINT_UTF16: usize = 260;

/// The store key of one (endpoint, message id) pair: SHA-256 of the UTF-8
/// bytes of `"{L}\u{1F}{endpoint}\u{1F}{messageId}"`, `L` the endpoint's
/// length in UTF-16 code units.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct InboxKey(pub [u8; 32]);

impl InboxKey {
    /// The key for this pair, or `None` when the inbox is bypassed (no check,
    /// no record, the handler still runs): a blank id or endpoint, a message
    /// id over 512 UTF-16 units, an endpoint over 260.
    pub fn new(endpoint: &str, message_id: &str) -> Option<InboxKey> {
        if endpoint.trim().is_empty() || message_id.trim().is_empty() {
            return None;
        }
        let endpoint_len = utf16_len(endpoint);
        if endpoint_len > MAX_ENDPOINT_UTF16 || utf16_len(message_id) > MAX_MESSAGE_ID_UTF16 {
            return None;
        }
        let material = format!("{endpoint_len}\u{1F}{endpoint}\u{1F}{message_id}");
        Some(InboxKey(Sha256::digest(material.as_bytes()).into()))
    }

    /// The key as 64 lowercase hex digits.
    pub fn to_hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_is_sha256_of_the_length_prefixed_pair() {
        let key = InboxKey::new("billing", "msg-1").expect("recorded");
        let expected: [u8; 32] = Sha256::digest("7\u{1F}billing\u{1F}msg-1".as_bytes()).into();
        assert_eq!(key.0, expected);
        assert_eq!(key.to_hex().len(), 64);
        // The length prefix keeps ("a\u1Fb", "c") and ("a", "b\u1Fc") apart.
        assert_ne!(
            InboxKey::new("a\u{1F}b", "c"),
            InboxKey::new("a", "b\u{1F}c")
        );
    }

    #[test]
    fn length_prefix_counts_utf16_units() {
        // "é" is 2 UTF-8 bytes but 1 UTF-16 unit; "😀" is 2 units.
        let key = InboxKey::new("é😀", "m").expect("recorded");
        let expected: [u8; 32] = Sha256::digest("3\u{1F}é😀\u{1F}m".as_bytes()).into();
        assert_eq!(key.0, expected);
    }

    #[test]
    fn blank_or_oversized_ids_bypass_the_inbox() {
        assert_eq!(InboxKey::new("", "m"), None);
        assert_eq!(InboxKey::new("billing", "  "), None);
        assert_eq!(InboxKey::new(" ", "m"), None);
        assert!(InboxKey::new("billing", &"m".repeat(512)).is_some());
        assert_eq!(InboxKey::new("billing", &"m".repeat(513)), None);
        assert_eq!(InboxKey::new("billing", &"😀".repeat(257)), None);
        assert!(InboxKey::new(&"e".repeat(260), "m").is_some());
        assert_eq!(InboxKey::new(&"e".repeat(261), "m"), None);
    }
}
