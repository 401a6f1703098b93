//! `orders`: handles `OrderPlaced`, the event NimBus publishes when a customer
//! places an order, e.g. (PascalCase, as NimBus writes it):
//!
//! ```json
//! {"OrderId":"o-1001","Customer":"acme","Total":150.0,
//!  "Lines":[{"Sku":"A-1","Quantity":2,"UnitPrice":50.0},{"Sku":"B-7","Quantity":1,"UnitPrice":50.0}]}
//! ```
//!
//! The whole deserialize-and-decide logic, which the host's benchmark mirrors
//! natively:
//!
//! 1. the payload deserializes into [`OrderPlaced`] (else the SDK answers
//!    `permanent`/`InvalidPayload`, naming the field);
//! 2. an order with no lines can never succeed: `permanent`/`EmptyOrder`;
//! 3. `"Fail": true` or a `Customer` of `"fail"` is `failed`/`OrderRejected`,
//!    so an operator can be shown block → fix (drop a new version) → resubmit;
//! 4. when the config key `reject_over_total` is set, a `Total` above it is
//!    `failed`/`OrderRejected`;
//! 5. otherwise the order is logged and the event completed.

use nimbus_guest::{Context, Error, Event, Handler, Outcome};
use serde::Deserialize;

/// The payload of an `OrderPlaced` event.
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

impl Event for OrderPlaced {
    const EVENT_TYPE: &'static str = "OrderPlaced";
}

/// Accepts or rejects placed orders.
pub struct Orders;

impl Handler<OrderPlaced> for Orders {
    fn handle(&self, order: OrderPlaced, ctx: &Context) -> Result<Outcome, Error> {
        let limit = ctx.config_parse::<f64>("reject_over_total")?;
        decide(&order, limit)?;
        nimbus_guest::info!(ctx, {
            order_id: order.order_id,
            customer: order.customer,
            total: order.total,
            lines: order.lines.len(),
        }, "order {} accepted", order.order_id);
        Ok(Outcome::Completed)
    }
}

/// Steps 2 to 4 above: whether to accept the order.
///
/// # Errors
///
/// `permanent`/`EmptyOrder` or `failed`/`OrderRejected`, as described above.
pub fn decide(order: &OrderPlaced, reject_over_total: Option<f64>) -> Result<(), Error> {
    if order.lines.is_empty() {
        return Err(Error::permanent(
            "EmptyOrder",
            format!("order {} has no lines", order.order_id),
        ));
    }
    if order.fail || order.customer == "fail" {
        return Err(Error::failed(
            "OrderRejected",
            format!(
                "order {} rejected: the payload asked to fail",
                order.order_id
            ),
        ));
    }
    if let Some(limit) = reject_over_total
        && order.total > limit
    {
        return Err(Error::failed(
            "OrderRejected",
            format!(
                "order {} rejected: total {} is over reject_over_total {limit}",
                order.order_id, order.total
            ),
        ));
    }
    Ok(())
}

nimbus_guest::export!(Orders => OrderPlaced);

#[cfg(test)]
mod tests;
