//! The NimBus wire model: what a NimBus message is on Service Bus, and every
//! message nimbus sends.
//!
//! The engine decodes each received transport message into a
//! [`NimbusMessage`], checks it with [`NimbusMessage::validate`], decides
//! what to do, and encodes what it sends with the builders in [`build`].
//! Session state ([`SessionState`]), the inbox key ([`InboxKey`]) and
//! dead-letter reasons ([`dead_letter`]) live here too because they are part
//! of what NimBus tooling reads, and so does the signature that shows a
//! control message comes from a nimbus Manager ([`control_signature`]), and
//! so does the topology that routes on these names ([`topology`]): which
//! topics, subscriptions and rules NimBus needs, laid out through the
//! transport's `Admin`. This crate knows the transport's message shape and
//! admin operations and nothing else of brokers, and nothing of wasm.
//!
//! Key decision: byte-for-byte compatibility with upstream NimBus v4 (names,
//! types, Newtonsoft-style JSON), so a NimBus publisher, Resolver or WebApp
//! can share a namespace with nimbus; the only deviations are SEMANTICS.md
//! §1's (business correlation id kept, `ReplyTo` and `MessageId` kept through
//! parking, replay and retry). The test vectors in `tests/fixtures/wire/`
//! pin both.
#![cfg_attr(test, allow(clippy::unwrap_used, reason = "tests"))]

pub mod build;
mod content;
pub mod control_signature;
pub mod dead_letter;
mod failure;
mod heartbeat;
mod inbox_key;
mod message;
mod message_type;
mod names;
mod session_state;
mod timestamp;
pub mod topology;
pub mod user_properties;

pub use content::{BodyError, ErrorContent, EventContent, MessageContent};
pub use control_signature::{ControlKey, ControlKeyError, SignatureError};
pub use failure::Failure;
pub use inbox_key::{InboxKey, MAX_ENDPOINT_UTF16, MAX_MESSAGE_ID_UTF16};
pub use message::{DecodeError, Defect, NimbusMessage};
pub use message_type::{MessageType, UnknownMessageType};
pub use names::{addr, prop};
pub use session_state::{
    BlockingEvent, MAX_KEPT_EVENT_BYTES, SessionState, SessionStateError, SettledParked,
};
pub use timestamp::{
    MAX_TIMESTAMP_TEXT, MIN_TIMESTAMP_TEXT, clamp_timestamp, format_newtonsoft, format_round_trip,
    max_timestamp, parse_timestamp, saturating_add, unix_millis,
};
