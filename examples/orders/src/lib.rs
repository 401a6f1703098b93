//! `orders`: handles `OrderPlaced`, the event NimBus publishes when a customer
//! places an order (payload: [`OrderPlaced`]).
//!
//! 1. The payload deserializes into [`OrderPlaced`] (else the SDK answers
//!    `permanent`/`InvalidPayload`, naming the field).
//! 2. The config key `reject_over_total`, when set, is the highest total
//!    accepted.
//! 3. [`decide`] accepts or rejects the order: `permanent`/`EmptyOrder` for an
//!    order with no lines; `failed`/`OrderRejected` when the payload asks to
//!    fail (`"Fail": true` or a `Customer` of `"fail"`, so an operator can be
//!    shown block → fix (drop a new version) → resubmit) or the total is over
//!    the limit.
//! 4. An accepted order is logged and the event completed.
//!
//! The decision lives in `decision.rs`, free of the SDK, which the host's
//! dispatch benchmark also compiles natively to compare like with like.

use nimbus_guest::{Context, Error, Event, Handler, Outcome};

mod decision;

pub use decision::{Decision, OrderLine, OrderPlaced, decide};

impl Event for OrderPlaced {
    const EVENT_TYPE: &'static str = "OrderPlaced";
}

/// Accepts or rejects placed orders.
pub struct Orders;

impl Handler<OrderPlaced> for Orders {
    fn handle(&self, order: OrderPlaced, ctx: &Context) -> Result<Outcome, Error> {
        let limit = ctx.config_parse::<f64>("reject_over_total")?;
        match decide(&order, limit) {
            Decision::Completed => {}
            Decision::Permanent(error_type, message) => {
                return Err(Error::permanent(error_type, message));
            }
            Decision::Failed(error_type, message) => {
                return Err(Error::failed(error_type, message));
            }
        }
        nimbus_guest::info!(ctx, {
            order_id: order.order_id,
            customer: order.customer,
            total: order.total,
            lines: order.lines.len(),
        }, "order {} accepted", order.order_id);
        Ok(Outcome::Completed)
    }
}

nimbus_guest::export!(Orders => OrderPlaced);

#[cfg(test)]
mod tests;
