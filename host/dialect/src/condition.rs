//! Service Bus's error conditions (spec §A.12), and how they read as the
//! transport's error kinds.
//!
//! The endpoint refuses with the condition an SDK maps to its exception;
//! the client reads the same condition back as the kind of error the
//! engine acts on. One table (`KINDS`) says which condition each kind
//! is, read one way by [`for_kind`] and the other by [`kind_of`], so the
//! two ends cannot drift apart.

use fe2o3_amqp::types::definitions::{AmqpError, Error, ErrorCondition, Fields};
use fe2o3_amqp::types::primitives::Symbol;
use nimbus_transport::ErrorKind;

/// The broker failed or is busy; the SDKs retry.
pub const SERVER_BUSY: &str = "com.microsoft:server-busy";
/// No session became available within the wait the attach asked for.
pub const TIMEOUT: &str = "com.microsoft:timeout";
/// The session asked for by name is held by another receiver.
pub const SESSION_CANNOT_BE_LOCKED: &str = "com.microsoft:session-cannot-be-locked";
/// The session's lock is gone.
pub const SESSION_LOCK_LOST: &str = "com.microsoft:session-lock-lost";
/// The message's lock is gone (or it was settled already).
pub const MESSAGE_LOCK_LOST: &str = "com.microsoft:message-lock-lost";
/// No message has that sequence number (or nothing is left to peek).
pub const MESSAGE_NOT_FOUND: &str = "com.microsoft:message-not-found";
/// A `$management` request that does not read.
pub const ARGUMENT_ERROR: &str = "com.microsoft:argument-error";
/// An operation the node does not serve.
pub const NOT_IMPLEMENTED: &str = "com.microsoft:not-implemented";
/// No token gives the right the request needs.
pub const UNAUTHORIZED_ACCESS: &str = "com.microsoft:unauthorized-access";
/// What a client's `rejected` carries to dead-letter a message.
pub const DEAD_LETTER: &str = "com.microsoft:dead-letter";

/// The entity (or the session's topic) does not exist: AMQP's own.
pub const NOT_FOUND: &str = "amqp:not-found";
/// The operation is not allowed on what it names: AMQP's own.
pub const NOT_ALLOWED: &str = "amqp:not-allowed";

/// The condition each kind of error is on the wire. A kind not here is
/// [`SERVER_BUSY`] when sent, and a condition not here reads as no kind
/// (a transient failure, to the client).
const KINDS: [(ErrorKind, &str); 6] = [
    (ErrorKind::NotFound, NOT_FOUND),
    // Receiving from what holds nothing to receive (a forwarding
    // subscription), or with a session where there are none.
    (ErrorKind::Invalid, NOT_ALLOWED),
    (ErrorKind::NoSessionAvailable, TIMEOUT),
    (ErrorKind::SessionCannotBeLocked, SESSION_CANNOT_BE_LOCKED),
    (ErrorKind::SessionLockLost, SESSION_LOCK_LOST),
    (ErrorKind::LockLost, MESSAGE_LOCK_LOST),
];

/// The condition `kind` is sent as: [`SERVER_BUSY`] for a kind the table
/// does not name (the SDKs retry it).
pub fn for_kind(kind: ErrorKind) -> ErrorCondition {
    named(
        KINDS
            .iter()
            .find(|(k, _)| *k == kind)
            .map_or(SERVER_BUSY, |(_, name)| name),
    )
}

/// The kind of error `condition` reads as; `None` for one the table does
/// not name.
pub fn kind_of(condition: &ErrorCondition) -> Option<ErrorKind> {
    let name = name(condition);
    KINDS
        .iter()
        .find(|(_, n)| *n == name)
        .map(|(kind, _)| *kind)
}

/// The condition called `name`: one of AMQP's own, or Service Bus's.
pub fn named(name: &str) -> ErrorCondition {
    match AmqpError::try_from(name) {
        Ok(amqp) => ErrorCondition::AmqpError(amqp),
        Err(_) => ErrorCondition::Custom(Symbol::from(name)),
    }
}

/// `condition` as AMQP names it on the wire (`amqp:not-found`,
/// `com.microsoft:server-busy`).
pub fn name(condition: &ErrorCondition) -> String {
    match serde_amqp::to_value(condition) {
        Ok(serde_amqp::Value::Symbol(symbol)) => symbol.0,
        _ => format!("{condition:?}"),
    }
}

/// An error as the SDKs read it: Python indexes `info`, so it is sent,
/// if empty, rather than left off the end of the list.
pub fn error(condition: impl Into<ErrorCondition>, description: String) -> Error {
    Error::new(condition, description, Some(Fields::default()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_sent_reads_back_as_itself() {
        for (kind, _) in KINDS {
            assert_eq!(kind_of(&for_kind(kind)), Some(kind), "{kind}");
        }
        assert_eq!(name(&for_kind(ErrorKind::Transient)), SERVER_BUSY);
        assert_eq!(kind_of(&named(SERVER_BUSY)), None);
    }

    #[test]
    fn amqp_s_own_conditions_are_its_own_variants_and_named_as_on_the_wire() {
        assert_eq!(
            for_kind(ErrorKind::NotFound),
            ErrorCondition::AmqpError(AmqpError::NotFound)
        );
        assert_eq!(
            for_kind(ErrorKind::SessionLockLost),
            ErrorCondition::Custom(Symbol::from(SESSION_LOCK_LOST))
        );
        assert_eq!(
            name(&ErrorCondition::AmqpError(AmqpError::NotAllowed)),
            NOT_ALLOWED
        );
        assert_eq!(
            name(&ErrorCondition::LinkError(
                fe2o3_amqp::types::definitions::LinkError::DetachForced
            )),
            "amqp:link:detach-forced"
        );
    }
}
