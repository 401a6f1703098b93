//! `nimbus:handler/delivery`: what the host knows of the delivery being
//! handled, read-only.

use crate::bindings::delivery::Host;
use crate::state::DeliveryView;

impl Host for DeliveryView<'_> {
    fn count(&mut self) -> u32 {
        self.delivery.count
    }

    fn message_type(&mut self) -> String {
        self.delivery.message_type.clone()
    }

    fn from(&mut self) -> Option<String> {
        self.delivery.from.clone()
    }
}
