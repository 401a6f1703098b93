//! Why a handler could not handle an event, and how the host should react.

use std::fmt;
use std::time::Duration;

use crate::bindings::nimbus::handler::types as wit;
use crate::duration_ms;

/// How the host treats a failed event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// An ordinary failure: the host reports it, blocks the session so later
    /// events of the session wait, and retries if a retry policy matches.
    Failed,
    /// A passing infrastructure problem: nothing is reported, the host
    /// redelivers the same event after a backoff, ahead of its session.
    Transient,
    /// The event can never succeed: the host dead-letters it now and does not
    /// block the session.
    Permanent,
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Failed => "failed",
            Self::Transient => "transient",
            Self::Permanent => "permanent",
        })
    }
}

/// A handler failure: its kind, a stable error type, a message for the
/// operator and an optional earliest retry.
///
/// ```
/// use std::time::Duration;
/// use nimbus_guest::Error;
///
/// let err = Error::transient("PartnerUnavailable", "ERP answered 503")
///     .retry_after(Duration::from_secs(30));
/// assert_eq!(err.error_type(), "PartnerUnavailable");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    kind: ErrorKind,
    error_type: String,
    message: String,
    retry_after: Option<Duration>,
}

impl Error {
    /// An error of the given kind.
    ///
    /// `error_type` is a short, stable name such as `PartnerUnavailable`:
    /// retry rules and the failure classifier match on it, so keep it the same
    /// across versions. `message` is for the operator.
    pub fn new(kind: ErrorKind, error_type: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            kind,
            error_type: error_type.into(),
            message: message.into(),
            retry_after: None,
        }
    }

    /// An ordinary failure ([`ErrorKind::Failed`]).
    pub fn failed(error_type: impl Into<String>, message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Failed, error_type, message)
    }

    /// A passing infrastructure problem ([`ErrorKind::Transient`]).
    pub fn transient(error_type: impl Into<String>, message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Transient, error_type, message)
    }

    /// An event that can never succeed ([`ErrorKind::Permanent`]).
    pub fn permanent(error_type: impl Into<String>, message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Permanent, error_type, message)
    }

    /// The earliest the handler wants a retry, e.g. from an HTTP
    /// `Retry-After`; the host waits the longer of this and its policy delay,
    /// up to the cap the host is configured with: the retry policy's
    /// `max_delay` for a failed event, `[engine] transient_backoff_max` for
    /// a transient one (whose wait holds the session). Millisecond
    /// precision; longer than `u64::MAX` ms saturates.
    #[must_use]
    pub fn retry_after(mut self, delay: Duration) -> Self {
        self.retry_after = Some(delay);
        self
    }

    /// How the host treats this error.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The stable error type.
    pub fn error_type(&self) -> &str {
        &self.error_type
    }

    /// The message for the operator.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The requested earliest retry, if any.
    pub fn retry_delay(&self) -> Option<Duration> {
        self.retry_after
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}: {}", self.kind, self.error_type, self.message)
    }
}

impl std::error::Error for Error {}

impl From<Error> for wit::Error {
    fn from(error: Error) -> Self {
        let detail = wit::ErrorDetail {
            error_type: error.error_type,
            message: error.message,
            retry_after: error.retry_after.map(duration_ms),
        };
        match error.kind {
            ErrorKind::Failed => Self::Failed(detail),
            ErrorKind::Transient => Self::Transient(detail),
            ErrorKind::Permanent => Self::Permanent(detail),
        }
    }
}

/// Turns any other error into a handler [`Error`] with `?`, naming its kind
/// and error type; the message is the original error's text.
///
/// ```
/// use nimbus_guest::{Error, ResultExt};
///
/// fn parse(limit: &str) -> Result<u32, Error> {
///     limit.parse::<u32>().or_failed("InvalidLimit")
/// }
/// assert_eq!(parse("x").unwrap_err().message(), "invalid digit found in string");
/// ```
pub trait ResultExt<T> {
    /// Maps the error to [`Error::failed`] with this error type.
    ///
    /// # Errors
    ///
    /// When `self` is an error.
    fn or_failed(self, error_type: &str) -> Result<T, Error>;
    /// Maps the error to [`Error::transient`] with this error type.
    ///
    /// # Errors
    ///
    /// When `self` is an error.
    fn or_transient(self, error_type: &str) -> Result<T, Error>;
    /// Maps the error to [`Error::permanent`] with this error type.
    ///
    /// # Errors
    ///
    /// When `self` is an error.
    fn or_permanent(self, error_type: &str) -> Result<T, Error>;
}

impl<T, E: fmt::Display> ResultExt<T> for Result<T, E> {
    fn or_failed(self, error_type: &str) -> Result<T, Error> {
        self.map_err(|e| Error::failed(error_type, e.to_string()))
    }

    fn or_transient(self, error_type: &str) -> Result<T, Error> {
        self.map_err(|e| Error::transient(error_type, e.to_string()))
    }

    fn or_permanent(self, error_type: &str) -> Result<T, Error> {
        self.map_err(|e| Error::permanent(error_type, e.to_string()))
    }
}
