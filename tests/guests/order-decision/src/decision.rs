//! The deserialize-and-decide work of the dispatch benchmark
//! (`host/sandbox/benches/dispatch.rs`), written once and compiled twice:
//! into the `order-decision` guest, and natively into the benchmark, so the
//! wasm side and the native side run the same source.
//!
//! It is `examples/orders`' payload type and decision without what that
//! example does around them (reading `reject_over_total` from its config, and
//! logging the accepted order): those are host calls, which the benchmark
//! measures separately on `orders` itself. Only `serde` here, no SDK, so the
//! native build needs nothing the guest's host provides.

use serde::Deserialize;

/// The payload of an `OrderPlaced` event, as `examples/orders` declares it.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct OrderPlaced {
    /// The order's id.
    pub order_id: String,
    /// The customer's account name.
    pub customer: String,
    /// The order total.
    pub total: f64,
    /// The order lines.
    pub lines: Vec<OrderLine>,
    /// Asks the handler to fail.
    #[serde(default)]
    pub fail: bool,
}

/// One line of an order.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct OrderLine {
    /// The product's stock-keeping unit.
    pub sku: String,
    /// How many units.
    pub quantity: u32,
    /// The price of one unit.
    pub unit_price: f64,
}

/// What became of an order.
#[derive(Debug, PartialEq)]
pub enum Decision {
    /// Accepted.
    Completed,
    /// Can never succeed: `(error type, message)`.
    Permanent(&'static str, String),
    /// Rejected, so its session blocks: `(error type, message)`.
    Failed(&'static str, String),
}

/// `examples/orders`' decision, with its messages.
pub fn decide(order: &OrderPlaced, reject_over_total: Option<f64>) -> Decision {
    if order.lines.is_empty() {
        return Decision::Permanent(
            "EmptyOrder",
            format!("order {} has no lines", order.order_id),
        );
    }
    if order.fail || order.customer == "fail" {
        return Decision::Failed(
            "OrderRejected",
            format!(
                "order {} rejected: the payload asked to fail",
                order.order_id
            ),
        );
    }
    if let Some(limit) = reject_over_total
        && order.total > limit
    {
        return Decision::Failed(
            "OrderRejected",
            format!(
                "order {} rejected: total {} is over reject_over_total {limit}",
                order.order_id, order.total
            ),
        );
    }
    Decision::Completed
}
