//! Why a handler could not handle an event.

use std::fmt;
use std::time::Duration;

/// Which of the three error kinds a [`HandlerError`] is (SEMANTICS.md §3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// An ordinary failure: blocks the session; retry policy may apply.
    Failed,
    /// A passing infrastructure problem: redeliver after a backoff.
    Transient,
    /// The event can never succeed: dead-letter now.
    Permanent,
}

impl ErrorKind {
    /// The kind as the WIT contract and `nimbus invoke` spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Failed => "failed",
            Self::Transient => "transient",
            Self::Permanent => "permanent",
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why the handler could not handle the event: what the handler returned,
/// or what the host made of a trap, deadline overrun, memory overrun or
/// panic (always [`ErrorKind::Failed`] then; see [`crate::error_type`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HandlerError {
    /// Failed, transient or permanent.
    pub kind: ErrorKind,
    /// A short, stable name for the failure, e.g. `PartnerUnavailable`:
    /// classifier rules and operators match on it.
    pub error_type: String,
    /// A human-readable message for the operator.
    pub message: String,
    /// The earliest the handler wants a retry.
    pub retry_after: Option<Duration>,
}

impl HandlerError {
    /// An error of `kind` without a retry-after hint.
    pub fn new(kind: ErrorKind, error_type: &str, message: String) -> Self {
        HandlerError {
            kind,
            error_type: error_type.to_owned(),
            message,
            retry_after: None,
        }
    }

    /// A `failed` error without a retry-after hint: what the host reports
    /// for a handler it stopped or could not run.
    pub fn failed(error_type: &str, message: String) -> Self {
        Self::new(ErrorKind::Failed, error_type, message)
    }
}

impl fmt::Display for HandlerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({}): {}", self.kind, self.error_type, self.message)
    }
}

impl std::error::Error for HandlerError {}
