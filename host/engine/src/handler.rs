//! How the engine reaches handlers: one small trait, so the engine knows
//! nothing of wasm. The host adapts the sandbox's registry to it; `nimbus
//! bench` plugs in a native handler through the same seam to measure what
//! the sandbox costs. What crosses it is the handler's vocabulary,
//! `nimbus_handler`'s [`Event`] and [`Report`], defined once for the host.

use std::future::Future;
use std::pin::Pin;

use nimbus_handler::{Event, Report};

/// One handler run in progress; `None` when the endpoint has no handler for
/// the event's type.
pub type HandlerCall<'a> = Pin<Box<dyn Future<Output = Option<Report>> + Send + 'a>>;

/// The handlers an engine dispatches to.
///
/// The engine polls the call on the session's own task, beside the lock
/// renewal: no thread hand-off per event (decision 0106). So a call must not
/// block its thread for long: CPU-bound work yields now and then (the
/// sandbox yields at every epoch tick), and waiting is awaited, not slept.
pub trait Handlers: Send + Sync + 'static {
    /// Runs `event` on the handler that `endpoint` serves its event type
    /// with, start to finish on one version.
    fn invoke<'a>(&'a self, endpoint: &'a str, event: Event) -> HandlerCall<'a>;
}
