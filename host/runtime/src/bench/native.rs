//! Native handlers: the same work as the wasm `noop` and `orders`, as plain
//! Rust behind the engine's [`Handlers`] trait, so a run through them and a
//! run through the sandbox differ only by the sandbox.

use nimbus_engine::{HandlerEvent, HandlerFailure, HandlerReport, HandlerResult, Handlers};
use serde::Deserialize;
use serde::de::IgnoredAny;

/// The version digest native runs report (there is no component).
const NATIVE_VERSION: &str = "native";

/// Completes every event without looking at it, as `tests/guests/noop`
/// does (it skips the payload with serde's `IgnoredAny`, so does this).
#[derive(Debug, Default)]
pub(crate) struct NativeNoop;

impl Handlers for NativeNoop {
    fn invoke(&self, _endpoint: &str, event: HandlerEvent) -> Option<HandlerReport> {
        let result = match serde_json::from_str::<IgnoredAny>(&event.payload) {
            Ok(_) => HandlerResult::Completed,
            Err(e) => HandlerResult::Permanent(failure("InvalidPayload", e.to_string())),
        };
        Some(report(result))
    }
}

/// The deserialize-and-decide logic of `examples/orders`, natively: the same
/// payload shape and the same decisions (empty order permanent, a payload
/// asking to fail is `failed`/`OrderRejected`).
#[derive(Debug, Default)]
pub(crate) struct NativeOrders;

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct OrderPlaced {
    order_id: String,
    customer: String,
    #[expect(
        dead_code,
        reason = "deserialized to cost what the guest's parse costs"
    )]
    total: f64,
    lines: Vec<OrderLine>,
    #[serde(default)]
    fail: bool,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
#[expect(
    dead_code,
    reason = "deserialized to cost what the guest's parse costs"
)]
struct OrderLine {
    sku: String,
    quantity: u32,
    unit_price: f64,
}

impl Handlers for NativeOrders {
    fn invoke(&self, _endpoint: &str, event: HandlerEvent) -> Option<HandlerReport> {
        let result = match serde_json::from_str::<OrderPlaced>(&event.payload) {
            Err(e) => HandlerResult::Permanent(failure("InvalidPayload", e.to_string())),
            Ok(order) if order.lines.is_empty() => HandlerResult::Permanent(failure(
                "EmptyOrder",
                format!("order {} has no lines", order.order_id),
            )),
            Ok(order) if order.fail || order.customer == "fail" => HandlerResult::Failed(failure(
                "OrderRejected",
                format!(
                    "order {} rejected: the payload asked to fail",
                    order.order_id
                ),
            )),
            Ok(_) => HandlerResult::Completed,
        };
        Some(report(result))
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
