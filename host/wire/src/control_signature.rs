//! The signature that shows a control message comes from a nimbus host's
//! own Manager (issue 40, decision 0141).
//!
//! NimBus trusts `From = Manager`, but on a Service Bus namespace any
//! client with a Send key can write that property, and the broker cannot
//! tell senders apart. So the Manager seals every control message it sends
//! (ResubmissionRequest, SkipRequest, HandoffCompletedRequest,
//! HandoffFailedRequest) with an HMAC-SHA256 under a key only the hosts
//! hold, in the [`CONTROL_SIGNATURE`](crate::prop::CONTROL_SIGNATURE)
//! property, and the engine, the Resolver and the AMQP endpoint check it
//! before they act on one.
//!
//! The seal covers what decides what the message does: its type, its `To`
//! (the endpoint), its `EventId` and session, its `MessageId`, and a
//! SHA-256 digest of its body bytes exactly as they travel (the resubmitted
//! payload, the handoff's details or error). It works on the transport
//! message, not on the decoded model, so what is checked is the bytes the
//! broker carried. It does not stop a replay of the very same message
//! (same id, same body): that repeats an operator's own command, no more.
//! Properties it does not cover (`From` aside, which the engine checks on
//! its own) change nothing a control message does.

use std::fmt;

use hmac::{Hmac, KeyInit, Mac};
use nimbus_transport::{Message, PropertyValue};
use sha2::{Digest, Sha256};

use crate::message::{message_type_of, property_text};
use crate::message_type::MessageType;
use crate::names::{addr, prop};

/// The fewest characters a control key may have: 32 visible ASCII
/// characters carry at least the 128 bits a guess must not find.
pub const MIN_CONTROL_KEY_LEN: usize = 32;

/// The most characters a control key may have (it travels in an
/// environment variable or a TOML string; longer adds nothing).
pub const MAX_CONTROL_KEY_LEN: usize = 512;

/// What the signature property's value starts with: the layout of what the
/// MAC covers, so a later layout can be told from this one.
const VERSION: &str = "v1:";

/// What the MAC input starts with, so a MAC made for anything else under
/// the same key can never pass for a control signature.
const DOMAIN: &[u8] = b"nimbus-control-signature-v1\0";

/// The hosts' shared secret for signing control messages.
///
/// Never shown: `Debug` prints no part of it and no error quotes it.
#[derive(Clone)]
pub struct ControlKey {
    /// The MAC keyed once; each use clones it.
    keyed: Hmac<Sha256>,
}

impl ControlKey {
    /// The key `text` is, or why it is not one (never quoting it).
    ///
    /// # Errors
    ///
    /// Shorter than [`MIN_CONTROL_KEY_LEN`] or longer than
    /// [`MAX_CONTROL_KEY_LEN`] characters, or a character that is not
    /// visible ASCII (a key travels in TOML and the environment, where a
    /// stray space or newline would silently make it another key).
    pub fn new(text: &str) -> Result<ControlKey, ControlKeyError> {
        let length = text.chars().count();
        if length < MIN_CONTROL_KEY_LEN {
            return Err(ControlKeyError::TooShort { length });
        }
        if length > MAX_CONTROL_KEY_LEN {
            return Err(ControlKeyError::TooLong { length });
        }
        if let Some(at) = text.chars().position(|c| !c.is_ascii_graphic()) {
            return Err(ControlKeyError::NotVisibleAscii { at: at + 1 });
        }
        let keyed = <Hmac<Sha256> as KeyInit>::new_from_slice(text.as_bytes())
            .map_err(|_| ControlKeyError::TooShort { length })?;
        Ok(ControlKey { keyed })
    }

    fn mac(&self, message: &Message) -> Hmac<Sha256> {
        let mut mac = self.keyed.clone();
        mac.update(DOMAIN);
        let kind = control_type(message).map(MessageType::as_str);
        let to = text_property(message, prop::TO);
        let event_id = text_property(message, prop::EVENT_ID);
        for field in [
            kind,
            to.as_deref(),
            event_id.as_deref(),
            message.session_id.as_deref(),
            message.message_id.as_deref(),
        ] {
            // Presence and length first: no two different field lists feed
            // the MAC the same bytes.
            match field {
                None => mac.update(&[0]),
                Some(text) => {
                    mac.update(&[1]);
                    mac.update(&u64::try_from(text.len()).unwrap_or(u64::MAX).to_be_bytes());
                    mac.update(text.as_bytes());
                }
            }
        }
        mac.update(&Sha256::digest(&message.body));
        mac
    }
}

impl fmt::Debug for ControlKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ControlKey(<redacted>)")
    }
}

/// Why a text is not a control key. Never quotes the text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ControlKeyError {
    /// Too short to be a secret.
    #[error(
        "must be at least {MIN_CONTROL_KEY_LEN} characters (it has {length}); e.g. the output \
         of `openssl rand -hex 32`"
    )]
    TooShort {
        /// Its length in characters.
        length: usize,
    },
    /// Longer than any key needs to be.
    #[error("must be at most {MAX_CONTROL_KEY_LEN} characters (it has {length})")]
    TooLong {
        /// Its length in characters.
        length: usize,
    },
    /// A space, a control character or a non-ASCII character.
    #[error(
        "character {at} is not visible ASCII (letters, digits and punctuation only, no space \
         or newline)"
    )]
    NotVisibleAscii {
        /// Its position, from 1.
        at: usize,
    },
}

/// Why a control message's signature does not show it came from a nimbus
/// Manager. The text is the dead-letter reason's detail.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SignatureError {
    /// No signature property.
    #[error(
        "it carries no {} property, so no nimbus Manager sent it",
        prop::CONTROL_SIGNATURE
    )]
    Missing,
    /// A signature property that is not one.
    #[error(
        "its {name} property is malformed ({why}), so no nimbus Manager sent it",
        name = prop::CONTROL_SIGNATURE,
        why = .0
    )]
    Malformed(&'static str),
    /// A well-formed signature that this key did not make over this message.
    #[error(
        "its {} does not match: it was signed with another control key, or changed after \
         it was signed",
        prop::CONTROL_SIGNATURE
    )]
    Mismatch,
}

/// The control request type `message` names, if it names one: what only a
/// Manager may send.
pub fn control_type(message: &Message) -> Option<MessageType> {
    message
        .properties
        .get(prop::MESSAGE_TYPE)
        .and_then(|value| message_type_of(value).ok())
        .filter(|kind| kind.is_control_request())
}

/// Whether `message` says it comes from the Manager (`From`, ignoring case,
/// as upstream and [`NimbusMessage::is_from_manager`](crate::NimbusMessage::is_from_manager)).
pub fn claims_manager(message: &Message) -> bool {
    text_property(message, prop::FROM).is_some_and(|from| from.eq_ignore_ascii_case(addr::MANAGER))
}

/// Whether `message` claims the Manager's authority, by its type or its
/// `From`, and so must carry a valid signature to be let in.
pub fn needs_signature(message: &Message) -> bool {
    control_type(message).is_some() || claims_manager(message)
}

/// Seals `message` (built, about to be sent) with `key`. A message with no
/// `MessageId` is given a fresh one first: the id is signed, so the
/// transport must not choose it afterwards.
pub fn sign(key: &ControlKey, message: &mut Message) {
    if message.message_id.is_none() {
        message.message_id = Some(crate::build::new_message_id());
    }
    let tag = key.mac(message).finalize().into_bytes();
    let mut value = String::with_capacity(VERSION.len() + 2 * tag.len());
    value.push_str(VERSION);
    for byte in tag {
        value.push(char::from(HEX[usize::from(byte >> 4)]));
        value.push(char::from(HEX[usize::from(byte & 0x0f)]));
    }
    message.properties.insert(
        prop::CONTROL_SIGNATURE.to_owned(),
        PropertyValue::String(value),
    );
}

/// Checks that `key` sealed `message` as it is now. The comparison is in
/// constant time.
///
/// # Errors
///
/// The signature is missing, malformed, or does not match.
pub fn verify(key: &ControlKey, message: &Message) -> Result<(), SignatureError> {
    let value = match message.properties.get(prop::CONTROL_SIGNATURE) {
        None => return Err(SignatureError::Missing),
        Some(PropertyValue::String(value)) => value,
        Some(_) => return Err(SignatureError::Malformed("not a string")),
    };
    let hex = value
        .strip_prefix(VERSION)
        .ok_or(SignatureError::Malformed("not a v1 signature"))?;
    let tag = decode_hex(hex).ok_or(SignatureError::Malformed("not 64 hex digits"))?;
    key.mac(message)
        .verify_slice(&tag)
        .map_err(|_| SignatureError::Mismatch)
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// 64 hex digits (either case) as 32 bytes.
fn decode_hex(text: &str) -> Option<[u8; 32]> {
    let digits = text.as_bytes();
    if digits.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (byte, pair) in out.iter_mut().zip(digits.chunks_exact(2)) {
        let high = char::from(pair[0]).to_digit(16)?;
        let low = char::from(pair[1]).to_digit(16)?;
        *byte = u8::try_from(high * 16 + low).ok()?;
    }
    Some(out)
}

/// A property as text, as the decoder reads it (a forged message may write
/// an `EventId` as a number; the engine would act on its text).
fn text_property(message: &Message, name: &str) -> Option<String> {
    message.properties.get(name).map(property_text)
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "0123456789abcdef0123456789abcdef";

    fn key() -> ControlKey {
        ControlKey::new(KEY).unwrap()
    }

    fn skip_request() -> Message {
        let mut message = Message::new(br#"{"EventContent":null}"#.to_vec());
        message.session_id = Some("order-1".into());
        message.message_id = Some("m-1".into());
        for (name, value) in [
            (prop::MESSAGE_TYPE, "SkipRequest"),
            (prop::TO, "billing"),
            (prop::FROM, "Manager"),
            (prop::EVENT_ID, "e-1"),
        ] {
            message.properties.insert(name.into(), value.into());
        }
        message
    }

    fn signed() -> Message {
        let mut message = skip_request();
        sign(&key(), &mut message);
        message
    }

    #[test]
    fn a_signed_message_verifies() {
        let message = signed();
        assert_eq!(verify(&key(), &message), Ok(()));
        let value = message.property_str(prop::CONTROL_SIGNATURE).unwrap();
        assert!(value.starts_with("v1:") && value.len() == 3 + 64, "{value}");
    }

    #[test]
    fn an_unsigned_message_is_missing_its_signature() {
        assert_eq!(
            verify(&key(), &skip_request()),
            Err(SignatureError::Missing)
        );
    }

    #[test]
    fn each_signed_part_changed_is_a_mismatch() {
        type Tamper = fn(&mut Message);
        let tampers: [(&str, Tamper); 7] = [
            ("type", |m| {
                m.properties
                    .insert(prop::MESSAGE_TYPE.into(), "ResubmissionRequest".into());
            }),
            ("To", |m| {
                m.properties.insert(prop::TO.into(), "shipping".into());
            }),
            ("EventId", |m| {
                m.properties.insert(prop::EVENT_ID.into(), "e-2".into());
            }),
            ("session", |m| m.session_id = Some("order-2".into())),
            ("no session", |m| m.session_id = None),
            ("MessageId", |m| m.message_id = Some("m-2".into())),
            ("body", |m| m.body.push(b' ')),
        ];
        for (what, tamper) in tampers {
            let mut message = signed();
            tamper(&mut message);
            assert_eq!(
                verify(&key(), &message),
                Err(SignatureError::Mismatch),
                "{what} changed"
            );
        }
    }

    #[test]
    fn another_key_is_a_mismatch() {
        let other = ControlKey::new("fedcba9876543210fedcba9876543210").unwrap();
        assert_eq!(verify(&other, &signed()), Err(SignatureError::Mismatch));
    }

    #[test]
    fn a_numeric_type_is_the_same_type() {
        // Upstream accepts a MessageType as its number: signing binds the
        // type, not its spelling.
        let mut message = signed();
        message
            .properties
            .insert(prop::MESSAGE_TYPE.into(), PropertyValue::Int(7));
        assert_eq!(verify(&key(), &message), Ok(()));
    }

    #[test]
    fn malformed_signatures_are_named() {
        for (value, why) in [
            (PropertyValue::Int(1), "not a string"),
            ("v2:00".into(), "not a v1 signature"),
            ("v1:abc".into(), "not 64 hex digits"),
            (format!("v1:{}", "g".repeat(64)).into(), "not 64 hex digits"),
            (format!("v1:{}", "é".repeat(32)).into(), "not 64 hex digits"),
        ] {
            let mut message = skip_request();
            message
                .properties
                .insert(prop::CONTROL_SIGNATURE.into(), value);
            assert_eq!(
                verify(&key(), &message),
                Err(SignatureError::Malformed(why))
            );
        }
    }

    #[test]
    fn sign_gives_an_id_to_a_message_without_one() {
        let mut message = skip_request();
        message.message_id = None;
        sign(&key(), &mut message);
        assert!(message.message_id.is_some());
        assert_eq!(verify(&key(), &message), Ok(()));
    }

    #[test]
    fn control_types_and_manager_senders_need_a_signature() {
        assert_eq!(
            control_type(&skip_request()),
            Some(MessageType::SkipRequest)
        );
        let mut event = skip_request();
        event
            .properties
            .insert(prop::MESSAGE_TYPE.into(), "EventRequest".into());
        assert_eq!(control_type(&event), None);
        assert!(needs_signature(&event), "From = Manager");
        event.properties.insert(prop::FROM.into(), "mAnAgEr".into());
        assert!(needs_signature(&event), "From ignoring case");
        event.properties.remove(prop::FROM);
        assert!(!needs_signature(&event));
        event
            .properties
            .insert(prop::MESSAGE_TYPE.into(), PropertyValue::Int(14));
        assert_eq!(
            control_type(&event),
            Some(MessageType::HandoffFailedRequest)
        );
    }

    #[test]
    fn keys_are_long_visible_ascii_and_never_shown() {
        let key = key();
        assert!(!format!("{key:?}").contains("0123"));
        let short = ControlKey::new("secret").unwrap_err();
        assert_eq!(short, ControlKeyError::TooShort { length: 6 });
        assert!(!short.to_string().contains("secret"));
        assert!(ControlKey::new(&"k".repeat(MAX_CONTROL_KEY_LEN + 1)).is_err());
        assert_eq!(
            ControlKey::new(&format!("{KEY}\n")).unwrap_err(),
            ControlKeyError::NotVisibleAscii { at: 33 }
        );
    }
}
