//! Errors: one type per operation, each naming only what that operation can
//! fail with, all converging on [`Error`] (STYLE habit 9).
//!
//! Every type answers [`kind`](Error::kind), so the engine can decide what to
//! do (retry, drop the session, give up) without matching on variants that a
//! later transport may add.

use std::fmt;

/// What went wrong, in the terms the engine acts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The message lock lapsed or the message was settled already: the
    /// message will be (or was) redelivered; do not settle it again.
    LockLost,
    /// The session lock lapsed or was released: stop using this session.
    SessionLockLost,
    /// Another receiver holds the session.
    SessionCannotBeLocked,
    /// No session became available within the timeout.
    NoSessionAvailable,
    /// The topic, subscription, rule or scheduled message does not exist.
    NotFound,
    /// The entity exists already.
    AlreadyExists,
    /// The request itself is wrong (bad filter, message without a session
    /// id on a session entity, settling a message on the wrong receiver).
    Invalid,
    /// The transport failed (storage, network); the operation did not take
    /// effect and may be retried.
    Transient,
    /// The transport cannot do this at all; retrying will not help.
    Unsupported,
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = match self {
            ErrorKind::LockLost => "lock lost",
            ErrorKind::SessionLockLost => "session lock lost",
            ErrorKind::SessionCannotBeLocked => "session cannot be locked",
            ErrorKind::NoSessionAvailable => "no session available",
            ErrorKind::NotFound => "not found",
            ErrorKind::AlreadyExists => "already exists",
            ErrorKind::Invalid => "invalid request",
            ErrorKind::Transient => "transient failure",
            ErrorKind::Unsupported => "not supported by this transport",
        };
        f.write_str(text)
    }
}

/// A transport failure that did not take effect (storage I/O, a lost
/// connection). Retrying may succeed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("transient transport failure: {message}")]
pub struct TransientError {
    /// What failed, with the entity it concerned.
    pub message: String,
}

impl TransientError {
    /// A transient failure described by `message`.
    pub fn new(message: impl Into<String>) -> Self {
        TransientError {
            message: message.into(),
        }
    }
}

/// Why publishing (or scheduling) failed. Nothing of the batch was stored.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum PublishError {
    /// The topic does not exist.
    #[error("topic '{topic}' not found")]
    TopicNotFound {
        /// The topic named by the sender.
        topic: String,
    },
    /// The message cannot be accepted as it is (for example it has no
    /// session id but reaches a session-enabled subscription).
    #[error("message rejected: {reason}")]
    InvalidMessage {
        /// What is wrong, naming the entity that refuses it.
        reason: String,
    },
    /// The transport failed.
    #[error(transparent)]
    Transient(#[from] TransientError),
}

/// Why cancelling a scheduled message failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum CancelError {
    /// No scheduled message with that sequence number waits on that topic
    /// (never scheduled, cancelled already, or already enqueued).
    #[error("no scheduled message {sequence_number} on topic '{topic}'")]
    NotFound {
        /// The topic.
        topic: String,
        /// The sequence number given.
        sequence_number: i64,
    },
    /// The transport failed.
    #[error(transparent)]
    Transient(#[from] TransientError),
}

/// Why accepting a session failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum AcceptSessionError {
    /// The subscription does not exist.
    #[error("subscription '{entity}' not found")]
    NotFound {
        /// `topic/subscription`.
        entity: String,
    },
    /// The subscription does not require sessions (use a receiver), or
    /// forwards everything (nothing can be received from it).
    #[error("cannot accept sessions on '{entity}': {reason}")]
    NotSessionful {
        /// `topic/subscription`.
        entity: String,
        /// Why.
        reason: String,
    },
    /// Another receiver holds the named session (after waiting up to the
    /// timeout for it to be released).
    #[error("session '{session_id}' on '{entity}' is locked by another receiver")]
    SessionCannotBeLocked {
        /// `topic/subscription`.
        entity: String,
        /// The session asked for.
        session_id: String,
    },
    /// No session with messages became available within the timeout.
    #[error("no session available on '{entity}' within the timeout")]
    NoSessionAvailable {
        /// `topic/subscription`.
        entity: String,
    },
    /// The transport failed.
    #[error(transparent)]
    Transient(#[from] TransientError),
}

/// Why opening a (non-session) receiver failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum OpenReceiverError {
    /// The subscription does not exist.
    #[error("subscription '{entity}' not found")]
    NotFound {
        /// `topic/subscription`.
        entity: String,
    },
    /// The subscription cannot be read this way: it requires sessions, or it
    /// forwards everything.
    #[error("cannot receive from '{entity}': {reason}")]
    NotReceivable {
        /// `topic/subscription`.
        entity: String,
        /// Why.
        reason: String,
    },
    /// The transport failed.
    #[error(transparent)]
    Transient(#[from] TransientError),
}

/// Why receiving failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ReceiveError {
    /// The session lock lapsed or the session was released.
    #[error("session lock lost on session '{session_id}'")]
    SessionLockLost {
        /// The session.
        session_id: String,
    },
    /// The entity was deleted while receiving.
    #[error("entity '{entity}' not found")]
    NotFound {
        /// `topic/subscription`.
        entity: String,
    },
    /// The transport failed.
    #[error(transparent)]
    Transient(#[from] TransientError),
}

/// Why a settlement (complete, abandon, dead-letter, or an atomic
/// [`Settlement`](crate::Settlement) batch) failed. Nothing of it took
/// effect: the message stays locked until its lock lapses (or is lost
/// already), nothing was published, the session state is unchanged.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum SettleError {
    /// The message's lock lapsed, or it was settled already.
    #[error("lock lost on message '{message_id}'")]
    LockLost {
        /// The message id.
        message_id: String,
    },
    /// The session lock lapsed or was released.
    #[error("session lock lost on session '{session_id}'")]
    SessionLockLost {
        /// The session.
        session_id: String,
    },
    /// A topic the batch publishes to does not exist.
    #[error("topic '{topic}' not found")]
    TopicNotFound {
        /// The topic.
        topic: String,
    },
    /// The batch is wrong as a whole (a message received elsewhere, session
    /// state on a non-session receiver, a message rejected by a topic).
    #[error("invalid settlement: {reason}")]
    Invalid {
        /// What is wrong.
        reason: String,
    },
    /// The transport failed.
    #[error(transparent)]
    Transient(#[from] TransientError),
}

/// Why renewing a lock failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum RenewError {
    /// The message's lock lapsed or it was settled.
    #[error("lock lost on message '{message_id}'")]
    LockLost {
        /// The message id.
        message_id: String,
    },
    /// The session lock lapsed or was released.
    #[error("session lock lost on session '{session_id}'")]
    SessionLockLost {
        /// The session.
        session_id: String,
    },
    /// The transport failed.
    #[error(transparent)]
    Transient(#[from] TransientError),
}

/// Why reading or writing session state failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum SessionStateError {
    /// The session lock lapsed or was released.
    #[error("session lock lost on session '{session_id}'")]
    SessionLockLost {
        /// The session.
        session_id: String,
    },
    /// The transport failed.
    #[error(transparent)]
    Transient(#[from] TransientError),
}

/// Why a topology (admin) operation failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum AdminError {
    /// The entity does not exist.
    #[error("{entity} not found")]
    NotFound {
        /// What was looked for, e.g. `subscription 'orders/billing'`.
        entity: String,
    },
    /// The entity exists already.
    #[error("{entity} already exists")]
    AlreadyExists {
        /// What exists, e.g. `topic 'orders'`.
        entity: String,
    },
    /// A rule's filter or action does not parse.
    #[error("invalid rule '{rule}': {message} at position {position} of '{text}'")]
    InvalidRule {
        /// The rule name.
        rule: String,
        /// The filter or action text.
        text: String,
        /// Character offset of the error within `text`.
        position: usize,
        /// What the parser expected.
        message: String,
    },
    /// A setting or name is out of range.
    #[error("invalid setting: {reason}")]
    InvalidSetting {
        /// What is wrong.
        reason: String,
    },
    /// This transport cannot do it at all (not a failure that passes):
    /// Service Bus manages its entities through a management API the
    /// AMQP transport does not speak.
    #[error("{operation} is not available: {reason}")]
    Unsupported {
        /// The operation, e.g. `listing sessions`.
        operation: &'static str,
        /// Why, and what to use instead.
        reason: String,
    },
    /// The transport failed.
    #[error(transparent)]
    Transient(#[from] TransientError),
}

/// Any transport error: what every per-operation error converts into.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// From [`Transport::publish`](crate::Transport::publish).
    #[error(transparent)]
    Publish(#[from] PublishError),
    /// From [`Transport::cancel_scheduled`](crate::Transport::cancel_scheduled).
    #[error(transparent)]
    Cancel(#[from] CancelError),
    /// From [`Transport::accept_session`](crate::Transport::accept_session).
    #[error(transparent)]
    AcceptSession(#[from] AcceptSessionError),
    /// From [`Transport::receiver`](crate::Transport::receiver).
    #[error(transparent)]
    OpenReceiver(#[from] OpenReceiverError),
    /// From a `receive`.
    #[error(transparent)]
    Receive(#[from] ReceiveError),
    /// From a settlement.
    #[error(transparent)]
    Settle(#[from] SettleError),
    /// From a renewal.
    #[error(transparent)]
    Renew(#[from] RenewError),
    /// From session state get/set.
    #[error(transparent)]
    SessionState(#[from] SessionStateError),
    /// From an admin operation.
    #[error(transparent)]
    Admin(#[from] AdminError),
}

impl PublishError {
    /// What kind of failure this is.
    pub fn kind(&self) -> ErrorKind {
        match self {
            PublishError::TopicNotFound { .. } => ErrorKind::NotFound,
            PublishError::InvalidMessage { .. } => ErrorKind::Invalid,
            PublishError::Transient(_) => ErrorKind::Transient,
        }
    }
}

impl CancelError {
    /// What kind of failure this is.
    pub fn kind(&self) -> ErrorKind {
        match self {
            CancelError::NotFound { .. } => ErrorKind::NotFound,
            CancelError::Transient(_) => ErrorKind::Transient,
        }
    }
}

impl AcceptSessionError {
    /// What kind of failure this is.
    pub fn kind(&self) -> ErrorKind {
        match self {
            AcceptSessionError::NotFound { .. } => ErrorKind::NotFound,
            AcceptSessionError::NotSessionful { .. } => ErrorKind::Invalid,
            AcceptSessionError::SessionCannotBeLocked { .. } => ErrorKind::SessionCannotBeLocked,
            AcceptSessionError::NoSessionAvailable { .. } => ErrorKind::NoSessionAvailable,
            AcceptSessionError::Transient(_) => ErrorKind::Transient,
        }
    }
}

impl OpenReceiverError {
    /// What kind of failure this is.
    pub fn kind(&self) -> ErrorKind {
        match self {
            OpenReceiverError::NotFound { .. } => ErrorKind::NotFound,
            OpenReceiverError::NotReceivable { .. } => ErrorKind::Invalid,
            OpenReceiverError::Transient(_) => ErrorKind::Transient,
        }
    }
}

impl ReceiveError {
    /// What kind of failure this is.
    pub fn kind(&self) -> ErrorKind {
        match self {
            ReceiveError::SessionLockLost { .. } => ErrorKind::SessionLockLost,
            ReceiveError::NotFound { .. } => ErrorKind::NotFound,
            ReceiveError::Transient(_) => ErrorKind::Transient,
        }
    }
}

impl SettleError {
    /// What kind of failure this is.
    pub fn kind(&self) -> ErrorKind {
        match self {
            SettleError::LockLost { .. } => ErrorKind::LockLost,
            SettleError::SessionLockLost { .. } => ErrorKind::SessionLockLost,
            SettleError::TopicNotFound { .. } => ErrorKind::NotFound,
            SettleError::Invalid { .. } => ErrorKind::Invalid,
            SettleError::Transient(_) => ErrorKind::Transient,
        }
    }
}

impl RenewError {
    /// What kind of failure this is.
    pub fn kind(&self) -> ErrorKind {
        match self {
            RenewError::LockLost { .. } => ErrorKind::LockLost,
            RenewError::SessionLockLost { .. } => ErrorKind::SessionLockLost,
            RenewError::Transient(_) => ErrorKind::Transient,
        }
    }
}

impl SessionStateError {
    /// What kind of failure this is.
    pub fn kind(&self) -> ErrorKind {
        match self {
            SessionStateError::SessionLockLost { .. } => ErrorKind::SessionLockLost,
            SessionStateError::Transient(_) => ErrorKind::Transient,
        }
    }
}

impl AdminError {
    /// What kind of failure this is.
    pub fn kind(&self) -> ErrorKind {
        match self {
            AdminError::NotFound { .. } => ErrorKind::NotFound,
            AdminError::AlreadyExists { .. } => ErrorKind::AlreadyExists,
            AdminError::InvalidRule { .. } | AdminError::InvalidSetting { .. } => {
                ErrorKind::Invalid
            }
            AdminError::Transient(_) => ErrorKind::Transient,
            AdminError::Unsupported { .. } => ErrorKind::Unsupported,
        }
    }
}

impl Error {
    /// What kind of failure this is.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::Publish(e) => e.kind(),
            Error::Cancel(e) => e.kind(),
            Error::AcceptSession(e) => e.kind(),
            Error::OpenReceiver(e) => e.kind(),
            Error::Receive(e) => e.kind(),
            Error::Settle(e) => e.kind(),
            Error::Renew(e) => e.kind(),
            Error::SessionState(e) => e.kind(),
            Error::Admin(e) => e.kind(),
        }
    }
}
