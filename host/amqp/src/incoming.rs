//! What a client sends on a link the endpoint receives on (a publish, a
//! `$cbs` or `$management` request), one delivery at a time.

use fe2o3_amqp::link::{Receiver, RecvError};
use fe2o3_amqp::types::messaging::Body;
use fe2o3_amqp::types::primitives::Value;
use tracing::debug;

use crate::log_limit::{Cause, LogLimit};

/// The next delivery on `receiver`, or `None` once the link is gone. A
/// delivery that does not decode is skipped (logged): the link goes on.
pub(crate) async fn next_delivery(
    receiver: &mut Receiver,
) -> Option<fe2o3_amqp::link::delivery::Delivery<Body<Value>>> {
    loop {
        match receiver.recv::<Body<Value>>().await {
            Ok(delivery) => return Some(delivery),
            Err(RecvError::MessageDecode(error)) => {
                LogLimit::global().warn(Cause::NotAMessage, || {
                    format!("a delivery that is not an AMQP message was skipped: {error}")
                });
            }
            Err(error) => {
                debug!(%error, "a link ended");
                return None;
            }
        }
    }
}
