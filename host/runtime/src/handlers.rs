//! The seam between the engine and the sandbox: the engine's [`Handlers`]
//! implemented over the sandbox's handler [`Registry`]. Neither knows the
//! other; this adapter is the only place both meet.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, UNIX_EPOCH};

use nimbus_engine::{
    HandlerCall, HandlerEvent, HandlerFailure, HandlerReport, HandlerResult, Handlers,
};
use nimbus_sandbox::{
    Delivery, ErrorKind, Event, Invocation, Outcome, Property, PropertyValue, Registry,
};
use nimbus_transport::PropertyValue as WireValue;
use nimbus_wire::build::FollowUp;

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
    fn invoke<'a>(&'a self, endpoint: &'a str, event: HandlerEvent) -> HandlerCall<'a> {
        Box::pin(async move {
            let Some(version) = self.registry.lookup(endpoint, &event.event_type) else {
                return self.not_loaded(endpoint, &event.event_type);
            };
            let _counted = CallInProgress::start(&self.calls);
            let invocation = version.invoke_async(to_sandbox_event(event)).await;
            Some(report(invocation, version.id()))
        })
    }
}

/// The error type of an event no handler serves while a handler of its
/// endpoint does not load.
pub const HANDLER_NOT_LOADED: &str = "HandlerNotLoaded";

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
    fn not_loaded(&self, endpoint: &str, event_type: &str) -> Option<HandlerReport> {
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
        Some(HandlerReport {
            result: HandlerResult::Failed(HandlerFailure {
                error_type: HANDLER_NOT_LOADED.to_owned(),
                message: format!(
                    "no loaded handler of endpoint '{endpoint}' serves '{event_type}', and a \
                     handler of it does not load, so the event may be its: {}; fix the handler \
                     (`nimbus handlers`), then resubmit this event",
                    broken.join("; ")
                ),
                retry_after: None,
            }),
            follow_ups: Vec::new(),
            version: String::new(),
        })
    }
}

/// The engine's report of a sandbox invocation by the version `version_id`.
fn report(invocation: Invocation, version_id: &str) -> HandlerReport {
    let result = match invocation.result {
        Ok(Outcome::Completed) => HandlerResult::Completed,
        Ok(Outcome::PendingHandoff(handoff)) => HandlerResult::PendingHandoff {
            reason: handoff.reason,
            external_job_id: handoff.external_job_id,
            expected_by: handoff.expected_by_ms.map(Duration::from_millis),
        },
        Err(error) => {
            let failure = HandlerFailure {
                error_type: error.detail.error_type,
                message: error.detail.message,
                retry_after: error.detail.retry_after_ms.map(Duration::from_millis),
            };
            match error.kind {
                ErrorKind::Failed => HandlerResult::Failed(failure),
                ErrorKind::Transient => HandlerResult::Transient(failure),
                ErrorKind::Permanent => HandlerResult::Permanent(failure),
            }
        }
    };
    let follow_ups = invocation
        .follow_ups
        .into_iter()
        .map(|f| FollowUp {
            event_type_id: f.event_type,
            message_id: f.message_id,
            payload: f.payload,
            session_id: f.session_id,
            properties: f
                .properties
                .into_iter()
                .map(|p| (p.name, from_sandbox_value(p.value)))
                .collect(),
        })
        .collect();
    HandlerReport {
        result,
        follow_ups,
        version: version_id.to_owned(),
    }
}

fn to_sandbox_event(event: HandlerEvent) -> Event {
    let enqueued_time_ms = event
        .enqueued_time
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    Event {
        event_id: event.event_id,
        event_type: event.event_type,
        message_id: event.message_id,
        session_id: event.session_id,
        correlation_id: event.correlation_id,
        parent_message_id: event.parent_message_id,
        originating_message_id: event.originating_message_id,
        retry_count: event.retry_count,
        enqueued_time_ms,
        payload: event.payload,
        properties: event
            .properties
            .into_iter()
            .map(|(name, value)| Property {
                name,
                value: to_sandbox_value(value),
            })
            .collect(),
        delivery: Delivery {
            count: event.delivery_count,
            message_type: event.message_type.into(),
            from: event.from,
        },
    }
}

fn to_sandbox_value(value: WireValue) -> PropertyValue {
    match value {
        WireValue::String(s) => PropertyValue::Str(s),
        WireValue::Int(i) => PropertyValue::Int(i),
        WireValue::Float(f) => PropertyValue::Float(f),
        WireValue::Bool(b) => PropertyValue::Boolean(b),
    }
}

fn from_sandbox_value(value: PropertyValue) -> WireValue {
    match value {
        PropertyValue::Str(s) => WireValue::String(s),
        PropertyValue::Int(i) => WireValue::Int(i),
        PropertyValue::Float(f) => WireValue::Float(f),
        PropertyValue::Boolean(b) => WireValue::Bool(b),
    }
}
