//! A handler's failure as the wire sees it, and the one error text rules match.

use std::fmt;

/// An error type and message, as a handler (or the host, for `Trap`,
/// `Timeout`, `MemoryLimit`) reports a failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// A short, stable name, e.g. `PartnerUnavailable`.
    pub error_type: String,
    /// The human-readable message.
    pub message: String,
}

impl Failure {
    /// A failure of this type with this message.
    pub fn new(error_type: impl Into<String>, message: impl Into<String>) -> Self {
        Failure {
            error_type: error_type.into(),
            message: message.into(),
        }
    }

    /// The error text retry rules match on and dead-letter descriptions show:
    /// exactly `"{type}: {message}"`. Pinned here once (F18): upstream matched
    /// on `Exception.ToString()`, stack traces included, which made rules
    /// match method names by accident.
    pub fn text(&self) -> String {
        self.to_string()
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.error_type, self.message)
    }
}
