//! The error types the host reports on a handler's behalf, each a `failed`
//! [`HandlerError`](crate::HandlerError) unless it says otherwise. A
//! handler's own error types are its own; these names are the host's, so a
//! classifier rule or an operator can tell the two apart.

/// The handler trapped: a panic without a message, `unreachable`, a stack
/// overflow, an out-of-bounds access.
pub const TRAP: &str = "Trap";
/// The handler ran past its deadline and was stopped.
pub const TIMEOUT: &str = "Timeout";
/// The handler tried to grow its memory over its limit.
pub const MEMORY_LIMIT: &str = "MemoryLimit";
/// The handler panicked: a guest's panic it reported through
/// `log.panicked`, or a native handler's panic caught by the engine.
pub const PANIC: &str = "Panic";
/// Every sandbox instance slot was busy: `transient`, not the handler's
/// fault, so the event is delivered again.
pub const SANDBOX_BUSY: &str = "SandboxBusy";
/// The handler succeeded but the broker refused its settlement for good
/// because of its follow-ups (too large for one request): the event fails,
/// so nothing is half sent and an operator sees why, instead of the message
/// coming back to run again and again.
pub const FOLLOW_UPS_REFUSED: &str = "FollowUpsRefused";
/// No loaded handler serves the event's type while a handler of its
/// endpoint does not load: the event may be that handler's.
pub const HANDLER_NOT_LOADED: &str = "HandlerNotLoaded";
