//! Turns whatever stopped an invocation early into the ordinary handler error
//! the engine settles: `failed` with `MemoryLimit`, `Timeout`, `Panic` or
//! `Trap`, or `transient`/`SandboxBusy` when the pool is full (not the
//! handler's fault: redeliver).

use nimbus_handler::error_type::{MEMORY_LIMIT, PANIC, SANDBOX_BUSY, TIMEOUT, TRAP};
use nimbus_handler::{ErrorKind, HandlerError};
use wasmtime::{PoolConcurrencyLimitError, Trap};

use crate::config::Limits;
use crate::state::InvocationState;

/// Classifies `error` from instantiation or the call. Order matters: a
/// refused memory growth usually surfaces as a trap (the guest's allocator
/// aborts), and a panic hook's message is better than the trap it causes.
pub(crate) fn classify(
    error: &wasmtime::Error,
    state: &InvocationState,
    limits: &Limits,
) -> HandlerError {
    if error.downcast_ref::<PoolConcurrencyLimitError>().is_some() {
        return HandlerError::new(
            ErrorKind::Transient,
            SANDBOX_BUSY,
            format!("every sandbox instance slot is busy: {error}"),
        );
    }
    let trap = error.downcast_ref::<Trap>().copied();
    if trap == Some(Trap::Interrupt) {
        return HandlerError::failed(
            TIMEOUT,
            format!(
                "handler ran past its deadline of {} and was stopped",
                humantime::format_duration(limits.timeout)
            ),
        );
    }
    if let Some(desired) = state.limiter.memory_refused_at() {
        return HandlerError::failed(
            MEMORY_LIMIT,
            format!(
                "handler tried to grow its memory to {desired} bytes, over its limit of {} bytes",
                limits.memory_bytes
            ),
        );
    }
    if let Some(message) = &state.panic_message {
        return HandlerError::failed(PANIC, message.clone());
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
    HandlerError::failed(TRAP, message)
}
