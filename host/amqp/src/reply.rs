//! Where the answers of a request/response node (`$cbs`, an entity's
//! `$management`) go: the client's receiver link on the same session whose
//! source is the node, attached before it sends a request (spec §A.4,
//! §A.10). Answers go pre-settled: Python never settles them.

use std::time::Duration;

use fe2o3_amqp::Sendable;
use fe2o3_amqp::link::Sender;
use fe2o3_amqp::types::messaging::{AmqpValue, Message as AmqpMessage};
use fe2o3_amqp::types::primitives::Value;
use tokio::sync::Notify;
use tracing::debug;

/// How long an answer waits for the client's receiver link: the SDKs
/// attach it before they send a request.
const REPLY_LINK_WAIT: Duration = Duration::from_secs(10);

/// A node's receiver link on one session, once attached.
#[derive(Debug, Default)]
pub(crate) struct ReplyLink {
    sender: tokio::sync::Mutex<Option<Sender>>,
    attached: Notify,
}

impl ReplyLink {
    pub(crate) async fn attached(&self, sender: Sender) {
        *self.sender.lock().await = Some(sender);
        self.attached.notify_one();
    }

    pub(crate) async fn send(&self, reply: AmqpMessage<AmqpValue<Value>>) {
        let waited = tokio::time::timeout(REPLY_LINK_WAIT, async {
            loop {
                let mut slot = self.sender.lock().await;
                if let Some(sender) = slot.as_mut() {
                    let sendable = Sendable::builder().message(reply).settled(true).build();
                    // The link is pre-settled (see the acceptor): nothing
                    // comes back to wait for.
                    if let Err(error) = sender.send_batchable(sendable).await {
                        debug!(%error, "a $cbs answer was not sent");
                    }
                    return;
                }
                drop(slot);
                self.attached.notified().await;
            }
        })
        .await;
        if waited.is_err() {
            debug!("no $cbs receiver link to answer on; the answer is dropped");
        }
    }
}
