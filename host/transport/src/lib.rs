//! The one trait the engine talks to, shaped like Azure Service Bus.
//!
//! The engine publishes, accepts sessions, receives, settles and keeps
//! session state only through [`Transport`], [`SessionLock`] and
//! [`Receiver`]; the NimBus topology is laid out through [`Admin`] (by
//! `nimbus-wire`, which knows NimBus's names; this crate does not).
//! Implementations (the embedded broker in `nimbus-broker`, later Azure
//! Service Bus) live in their own crates and only implement these traits;
//! the engine never names one.
//!
//! Key decisions:
//! - Settling consumes the [`ReceivedMessage`] (STYLE habit 11), and
//!   everything the engine settles for one delivery goes in one
//!   [`Settlement`] that the transport commits atomically.
//! - Each operation has its own error type; all convert into [`Error`] and
//!   answer [`ErrorKind`] (lock lost, session lock lost, not found, session
//!   cannot be locked, transient, ...).
//! - With the `conformance` feature, the `conformance` module holds the
//!   Service Bus behaviours as test bodies written once against the traits;
//!   the `transport_conformance!` macro stamps them out for a backend. (Plain
//!   names, not links: both exist only with the feature.)

mod error;
mod message;
mod retry;
mod settlement;
mod slots;
mod topology;
mod transport;

#[cfg(feature = "conformance")]
pub mod conformance;

pub use error::{
    AcceptSessionError, AdminError, CancelError, Error, ErrorKind, OpenReceiverError, PublishError,
    ReceiveError, RenewError, SessionStateError, SettleError, TransientError,
};
pub use message::{
    DEAD_LETTER_ERROR_DESCRIPTION, DEAD_LETTER_REASON, Delivery, Identified, LockToken, Message,
    Properties, PropertyValue, ReceivedMessage,
};
pub use retry::{FailureLine, FailureLog, RecoveryLine, RetryBackoff};
pub use settlement::{Disposition, InboxRecord, SettleReceipt, Settlement, SettlementParts};
pub use slots::SlotRequests;
pub use topology::{
    DEFAULT_LOCK_DURATION, DEFAULT_MAX_DELIVERY_COUNT, DEFAULT_RULE_FILTER, DEFAULT_RULE_NAME,
    MAX_DELIVERY_COUNT_EXCEEDED, RuleDescription, SubscriptionDescription, SubscriptionSettings,
    TopicDescription, TopicSettings,
};
pub use transport::{
    Admin, Receiver, SessionInfo, SessionLock, SessionSelector, SubQueue, SubscriptionPath,
    Transport,
};
