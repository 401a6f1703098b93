//! Native handlers: the same work as the wasm `noop` and `orders`, as plain
//! Rust behind the engine's [`Handlers`] trait, so a run through them and a
//! run through the sandbox differ only by the sandbox.

use nimbus_engine::{
    HandlerCall, HandlerEvent, HandlerFailure, HandlerReport, HandlerResult, Handlers,
};
use serde::de::IgnoredAny;

/// The version digest native runs report (there is no component).
const NATIVE_VERSION: &str = "native";

/// Completes every event without looking at it, as `tests/guests/noop`
/// does (it skips the payload with serde's `IgnoredAny`, so does this).
#[derive(Debug, Default)]
pub(crate) struct NativeNoop;

impl Handlers for NativeNoop {
    fn invoke<'a>(&'a self, _endpoint: &'a str, event: HandlerEvent) -> HandlerCall<'a> {
        let result = match serde_json::from_str::<IgnoredAny>(&event.payload) {
            Ok(_) => HandlerResult::Completed,
            Err(e) => HandlerResult::Permanent(failure("InvalidPayload", e.to_string())),
        };
        Box::pin(std::future::ready(Some(report(result))))
    }
}

/// The deserialize-and-decide logic of `examples/orders`, natively: its
/// payload type and decision, from the source file the dispatch benchmark's
/// `order-decision` guest is built from.
#[derive(Debug, Default)]
pub(crate) struct NativeOrders;

#[path = "../../../../tests/guests/order-decision/src/decision.rs"]
#[allow(
    dead_code,
    unreachable_pub,
    reason = "orders' public items; fields are deserialized to cost what the guest's parse costs, not read"
)]
mod decision;

use decision::{Decision, OrderPlaced, decide};

impl Handlers for NativeOrders {
    fn invoke<'a>(&'a self, _endpoint: &'a str, event: HandlerEvent) -> HandlerCall<'a> {
        let result = match serde_json::from_str::<OrderPlaced>(&event.payload) {
            Err(e) => HandlerResult::Permanent(failure("InvalidPayload", e.to_string())),
            Ok(order) => match decide(&order, None) {
                Decision::Completed => HandlerResult::Completed,
                Decision::Permanent(error_type, message) => {
                    HandlerResult::Permanent(failure(error_type, message))
                }
                Decision::Failed(error_type, message) => {
                    HandlerResult::Failed(failure(error_type, message))
                }
            },
        };
        Box::pin(std::future::ready(Some(report(result))))
    }
}

fn failure(error_type: &str, message: String) -> HandlerFailure {
    HandlerFailure {
        error_type: error_type.to_owned(),
        message,
        retry_after: None,
    }
}

fn report(result: HandlerResult) -> HandlerReport {
    HandlerReport {
        result,
        follow_ups: Vec::new(),
        version: NATIVE_VERSION.to_owned(),
    }
}
