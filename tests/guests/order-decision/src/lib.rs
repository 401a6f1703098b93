//! `order-decision`: claims `OrderPlaced`, deserializes it and decides, as
//! `examples/orders` does, and nothing else: no config lookup, no log line.
//! The dispatch benchmark's per-event workload (issue target (a)), run side
//! by side with the same source compiled natively.

use nimbus_guest::{Context, Error, Event, Handler, Outcome};

/// `orders`' payload type and decision, shared with the benchmark's native side.
pub mod decision;

use decision::{Decision, OrderPlaced, decide};

impl Event for OrderPlaced {
    const EVENT_TYPE: &'static str = "OrderPlaced";
}

/// Accepts or rejects orders, without config and without logging.
pub struct OrderDecision;

impl Handler<OrderPlaced> for OrderDecision {
    fn handle(&self, order: OrderPlaced, _: &Context) -> Result<Outcome, Error> {
        match decide(&order, None) {
            Decision::Completed => Ok(Outcome::Completed),
            Decision::Permanent(error_type, message) => Err(Error::permanent(error_type, message)),
            Decision::Failed(error_type, message) => Err(Error::failed(error_type, message)),
        }
    }
}

nimbus_guest::export!(OrderDecision => OrderPlaced);
