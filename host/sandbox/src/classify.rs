//! Turns whatever stopped an invocation early into the ordinary handler error
//! the engine settles: `failed` with `MemoryLimit`, `Timeout`, `Panic` or
//! `Trap`, or `transient`/`SandboxBusy` when the pool is full (not the
//! handler's fault: redeliver).

use wasmtime::{PoolConcurrencyLimitError, Trap};

use crate::config::Limits;
use crate::event::{ErrorDetail, ErrorKind, HandlerError};
use crate::state::InvocationState;

/// Error type for a trap (panic without a message, `unreachable`, stack
/// overflow, out-of-bounds access...).
pub(crate) const TRAP: &str = "Trap";
/// Error type for a deadline overrun.
pub(crate) const TIMEOUT: &str = "Timeout";
/// Error type for a memory overrun.
pub(crate) const MEMORY_LIMIT: &str = "MemoryLimit";
/// Error type for a panic the guest reported through `log.panicked`.
pub(crate) const PANIC: &str = "Panic";
/// Error type when every pool slot is busy.
pub(crate) const SANDBOX_BUSY: &str = "SandboxBusy";

/// Classifies `error` from instantiation or the call. Order matters: a
/// refused memory growth usually surfaces as a trap (the guest's allocator
/// aborts), and a panic hook's message is better than the trap it causes.
pub(crate) fn classify(
    error: &wasmtime::Error,
    state: &InvocationState,
    limits: &Limits,
) -> HandlerError {
    if error.downcast_ref::<PoolConcurrencyLimitError>().is_some() {
        return HandlerError {
            kind: ErrorKind::Transient,
            detail: ErrorDetail {
                error_type: SANDBOX_BUSY.to_owned(),
                message: format!("every sandbox instance slot is busy: {error}"),
                retry_after_ms: None,
            },
        };
    }
    let trap = error.downcast_ref::<Trap>().copied();
    if trap == Some(Trap::Interrupt) {
        return HandlerError::sandbox_failed(
            TIMEOUT,
            format!(
                "handler ran past its deadline of {} and was stopped",
                humantime::format_duration(limits.timeout)
            ),
        );
    }
    if let Some(desired) = state.limiter.memory_refused_at() {
        return HandlerError::sandbox_failed(
            MEMORY_LIMIT,
            format!(
                "handler tried to grow its memory to {desired} bytes, over its limit of {} bytes",
                limits.memory_bytes
            ),
        );
    }
    if let Some(message) = &state.panic_message {
        return HandlerError::sandbox_failed(PANIC, message.clone());
    }
    let message = match trap {
        Some(Trap::StackOverflow) => "wasm trap: call stack exhausted (stack overflow)".to_owned(),
        // Rust guests keep their stack at the bottom of linear memory, so a
        // deep recursion runs the stack pointer below address 0 and shows as
        // an out-of-bounds access rather than as wasmtime's stack overflow.
        Some(Trap::MemoryOutOfBounds) => format!(
            "{} (in a Rust guest this is usually a stack overflow: its stack sits at the \
             bottom of linear memory)",
            Trap::MemoryOutOfBounds
        ),
        Some(trap) => trap.to_string(),
        None => format!("{error:#}"),
    };
    HandlerError::sandbox_failed(TRAP, message)
}
