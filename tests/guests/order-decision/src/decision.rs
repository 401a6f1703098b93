//! The deserialize-and-decide work of the dispatch benchmark
//! (`host/sandbox/benches/dispatch.rs`), written once and compiled twice:
//! into the `order-decision` guest, and natively into the benchmark (and
//! into `nimbus bench`'s native `orders`), all by `#[path]`, so the wasm
//! side and the native side run the same source.
//!
//! It is `examples/orders`' payload type and decision, without what that
//! example does around them (reading `reject_over_total` from its config and
//! logging the accepted order: host calls, measured separately on `orders`
//! itself). The example keeps its own copy because the SDK's crate docs show
//! it whole, as one file; `host/sandbox/tests/all/bench_workload.rs` checks the
//! two decide every kind of payload alike. Only `serde` here, no SDK, so the
//! native builds need nothing a host provides.

use serde::Deserialize;

/// The payload of an `OrderPlaced` event, e.g. (PascalCase, as NimBus writes
/// it):
///
/// ```json
/// {"OrderId":"o-1001","Customer":"acme","Total":150.0,
///  "Lines":[{"Sku":"A-1","Quantity":2,"UnitPrice":50.0},{"Sku":"B-7","Quantity":1,"UnitPrice":50.0}]}
/// ```
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct OrderPlaced {
    /// The order's id, e.g. `o-1001`.
    pub order_id: String,
    /// The customer's account name.
    pub customer: String,
    /// The order total.
    pub total: f64,
    /// The order lines.
    pub lines: Vec<OrderLine>,
    /// Asks the handler to fail (for demonstrating block, fix and resubmit).
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

/// The decision:
///
/// 1. an order with no lines can never succeed: `EmptyOrder`, permanent;
/// 2. `"Fail": true` or a `Customer` of `"fail"` is rejected (`OrderRejected`,
///    failed), so an operator can be shown block → fix → resubmit;
/// 3. with `reject_over_total`, a `Total` above it is rejected the same way;
/// 4. otherwise the order is accepted.
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
