//! `nimbus:handler/delivery`: what the host knows of the delivery being
//! handled, read-only. Asked outside an event (from `subscriptions`), it
//! answers as for a first delivery of a published event.

use nimbus_handler::Delivery;

use crate::bindings::delivery::Host;
use crate::state::DeliveryView;

impl Host for DeliveryView<'_> {
    fn count(&mut self) -> u32 {
        self.delivery.map_or(1, |d| d.count)
    }

    fn message_type(&mut self) -> String {
        self.delivery
            .map_or(Delivery::default().message_type, |d| d.message_type)
            .to_owned()
    }

    fn from(&mut self) -> Option<String> {
        self.delivery.and_then(|d| d.from.clone())
    }
}
