//! `notifier`: when an order ships (`OrderShipped`), asks for the customer to
//! be notified by publishing a `CustomerNotified` follow-up event, then
//! completes. Payload:
//!
//! ```json
//! {"OrderId":"o-1001","Customer":"acme","Carrier":"DHL","TrackingNumber":"JD0001"}
//! ```
//!
//! The follow-up's message id is `{event id}:customer-notified`: derived from
//! the inbound event, so a resubmission publishes the same id, and an
//! endpoint with the inbox (`[engine] inbox = true`) skips the second copy
//! as a duplicate. It keeps the inbound
//! event's session, correlation id and lineage (the host adds them). The
//! channel comes from the config key `channel` (default `email`).

use nimbus_guest::{Context, Error, Event, FollowUp, Handler, Outcome};
use serde::{Deserialize, Serialize};

/// The payload of an `OrderShipped` event.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct OrderShipped {
    /// The order's id.
    pub order_id: String,
    /// The customer's account name.
    pub customer: String,
    /// Who carries the parcel.
    pub carrier: String,
    /// The carrier's tracking number.
    pub tracking_number: String,
}

impl Event for OrderShipped {
    const EVENT_TYPE: &'static str = "OrderShipped";
}

/// The payload of the `CustomerNotified` follow-up.
#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct CustomerNotified {
    /// The order the notification is about.
    pub order_id: String,
    /// Who is notified.
    pub customer: String,
    /// How: `email`, `sms`, ...
    pub channel: String,
    /// The text sent.
    pub text: String,
}

impl Event for CustomerNotified {
    const EVENT_TYPE: &'static str = "CustomerNotified";
}

/// Publishes a notification for each shipped order.
pub struct Notifier;

impl Handler<OrderShipped> for Notifier {
    fn handle(&self, shipped: OrderShipped, ctx: &Context) -> Result<Outcome, Error> {
        let channel = ctx.config("channel").unwrap_or_else(|| "email".to_owned());
        let notice = CustomerNotified {
            text: format!(
                "Your order {} is on its way with {} (tracking {}).",
                shipped.order_id, shipped.carrier, shipped.tracking_number
            ),
            order_id: shipped.order_id,
            customer: shipped.customer,
            channel,
        };
        let message_id = format!("{}:customer-notified", ctx.event_id());
        nimbus_guest::info!(ctx, { order_id: notice.order_id, message_id: message_id },
            "notifying {} by {}", notice.customer, notice.channel);
        ctx.publish(FollowUp::event(message_id, &notice))?;
        Ok(Outcome::Completed)
    }
}

nimbus_guest::export!(Notifier => OrderShipped);

#[cfg(test)]
mod tests;
