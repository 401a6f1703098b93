//! Native handlers: the same work as the wasm `noop` and `orders`, as plain
//! Rust behind the engine's [`Handlers`] trait, so a run through them and a
//! run through the sandbox differ only by the sandbox.

use nimbus_engine::{HandlerCall, Handlers};
use nimbus_handler::{ErrorKind, Event, HandlerError, Outcome, Report};
use serde::de::IgnoredAny;

/// The version digest native runs report (there is no component).
const NATIVE_VERSION: &str = "native";

/// Completes every event without looking at it, as `tests/guests/noop`
/// does (it skips the payload with serde's `IgnoredAny`, so does this).
#[derive(Debug, Default)]
pub(crate) struct NativeNoop;

impl Handlers for NativeNoop {
    fn invoke<'a>(&'a self, _endpoint: &'a str, event: Event) -> HandlerCall<'a> {
        let result = match serde_json::from_str::<IgnoredAny>(&event.payload) {
            Ok(_) => Ok(Outcome::Completed),
            Err(e) => Err(permanent("InvalidPayload", e.to_string())),
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
    fn invoke<'a>(&'a self, _endpoint: &'a str, event: Event) -> HandlerCall<'a> {
        let result = match serde_json::from_str::<OrderPlaced>(&event.payload) {
            Err(e) => Err(permanent("InvalidPayload", e.to_string())),
            Ok(order) => match decide(&order, None) {
                Decision::Completed => Ok(Outcome::Completed),
                Decision::Permanent(error_type, message) => Err(permanent(error_type, message)),
                Decision::Failed(error_type, message) => {
                    Err(HandlerError::failed(error_type, message))
                }
            },
        };
        Box::pin(std::future::ready(Some(report(result))))
    }
}

fn permanent(error_type: &str, message: String) -> HandlerError {
    HandlerError::new(ErrorKind::Permanent, error_type, message)
}

fn report(result: Result<Outcome, HandlerError>) -> Report {
    Report {
        result,
        follow_ups: Vec::new(),
        version: NATIVE_VERSION.to_owned(),
    }
}
