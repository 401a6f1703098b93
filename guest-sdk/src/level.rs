//! How important a log record is: what a handler passes to
//! [`Context::log`](crate::Context::log) and the host's log receives.

/// How important a log record is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Level {
    /// Very detailed diagnostics.
    Trace,
    /// Diagnostics.
    Debug,
    /// Normal operation.
    Info,
    /// Something unexpected that the handler coped with.
    Warn,
    /// Something failed.
    Error,
}
