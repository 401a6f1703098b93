//! The seam between the engine and the sandbox: the engine's [`Handlers`]
//! implemented over the sandbox's handler [`Registry`]. It only looks the
//! handler version up and calls it: both sides speak `nimbus_handler`'s
//! vocabulary, so the event goes in and the report comes out as they are.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use nimbus_engine::{HandlerCall, Handlers};
use nimbus_handler::error_type::HANDLER_NOT_LOADED;
use nimbus_handler::{Event, HandlerError, Report};
use nimbus_sandbox::Registry;

/// The sandbox's registry, as the engine's handlers.
pub struct SandboxHandlers {
    registry: Arc<Registry>,
    calls: Arc<AtomicUsize>,
}

impl SandboxHandlers {
    /// Dispatches through `registry`.
    pub fn new(registry: Arc<Registry>) -> Self {
        SandboxHandlers {
            registry,
            calls: Arc::default(),
        }
    }

    /// Counts the handler calls in progress in `calls` (shared by every
    /// endpoint of a host, which says at shutdown how many the grace cut).
    pub fn counting_calls_in(mut self, calls: Arc<AtomicUsize>) -> Self {
        self.calls = calls;
        self
    }
}

/// One handler call in progress, counted until it ends or is dropped
/// unfinished.
struct CallInProgress<'a>(&'a AtomicUsize);

impl<'a> CallInProgress<'a> {
    fn start(calls: &'a AtomicUsize) -> Self {
        calls.fetch_add(1, Ordering::Relaxed);
        CallInProgress(calls)
    }
}

impl Drop for CallInProgress<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Handlers for SandboxHandlers {
    fn invoke<'a>(&'a self, endpoint: &'a str, event: Event) -> HandlerCall<'a> {
        Box::pin(async move {
            let Some(version) = self.registry.lookup(endpoint, &event.event_type) else {
                return self.not_loaded(endpoint, &event.event_type);
            };
            let _counted = CallInProgress::start(&self.calls);
            Some(version.invoke_async(event).await.report)
        })
    }
}

impl SandboxHandlers {
    /// What becomes of an event of a type no loaded handler of `endpoint`
    /// serves. `None` (the engine answers Unsupported: a terminal status)
    /// only when every handler of the endpoint loaded; while one does not,
    /// the type may be its (a component declares its types itself, so a
    /// handler that never loaded has told nobody), and answering
    /// Unsupported would settle for good an event the fix is meant to run.
    /// So it fails instead, blocking its session with the later events
    /// parked behind it in order, until the handler is fixed and the event
    /// resubmitted (or retried by its policy).
    fn not_loaded(&self, endpoint: &str, event_type: &str) -> Option<Report> {
        let snapshot = self.registry.snapshot();
        let broken: Vec<String> = snapshot
            .handlers()
            .filter(|h| h.key.endpoint == endpoint && h.last_error.is_some())
            .map(|h| {
                format!(
                    "'{}' ({})",
                    h.key.handler,
                    h.last_error.as_deref().unwrap_or_default()
                )
            })
            .collect();
        if broken.is_empty() {
            return None;
        }
        let error = HandlerError::failed(
            HANDLER_NOT_LOADED,
            format!(
                "no loaded handler of endpoint '{endpoint}' serves '{event_type}', and a handler \
                 of it does not load, so the event may be its: {}; fix the handler (`nimbus \
                 handlers`), then resubmit this event",
                broken.join("; ")
            ),
        );
        Some(Report::failed(error, String::new()))
    }
}
