//! The `$cbs` node: a client puts a shared access signature there before
//! it attaches a link to an entity, and the endpoint answers on the same
//! session's `$cbs` receiver link (spec §A.4). A token is checked against
//! the configured keys ([`crate::sas`]); what it grants is kept for the
//! connection, and each entity link is checked against it at attach.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use fe2o3_amqp::Sendable;
use fe2o3_amqp::link::{Receiver, Sender};
use fe2o3_amqp::types::messaging::{
    AmqpValue, ApplicationProperties, Body, Message as AmqpMessage, MessageId, Properties,
};
use fe2o3_amqp::types::primitives::{SimpleValue, Value};
use tokio::sync::Notify;
use tracing::{debug, info};

use crate::sas::{Grant, SharedAccessKey};

/// How long an answer waits for the client's `$cbs` receiver link: the
/// SDKs attach it before they put a token.
const REPLY_LINK_WAIT: Duration = Duration::from_secs(10);

/// What the tokens put on one connection grant.
#[derive(Debug, Default)]
pub(crate) struct Grants(Mutex<Vec<Grant>>);

impl Grants {
    fn add(&self, grant: Grant) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(grant);
    }

    /// Whether a token put on this connection covers `entity_path` now.
    pub(crate) fn cover(&self, entity_path: &str) -> bool {
        let now = SystemTime::now();
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .any(|grant| grant.covers(entity_path, now))
    }
}

/// The session's `$cbs` receiver link, where answers go, once attached.
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

    async fn send(&self, reply: AmqpMessage<AmqpValue<Value>>) {
        let waited = tokio::time::timeout(REPLY_LINK_WAIT, async {
            loop {
                let mut slot = self.sender.lock().await;
                if let Some(sender) = slot.as_mut() {
                    let sendable = Sendable::builder().message(reply).settled(true).build();
                    // Pre-settled: the outcome is not waited for.
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

/// Answers the put-token requests of one `$cbs` sender link until the
/// client detaches it.
pub(crate) async fn serve(
    mut requests: Receiver,
    replies: Arc<ReplyLink>,
    keys: Arc<[SharedAccessKey]>,
    grants: Arc<Grants>,
) {
    while let Ok(delivery) = requests.recv::<Body<Value>>().await {
        let (delivery, request) = delivery.into_parts();
        if let Err(error) = requests.accept(delivery).await {
            debug!(%error, "settling a $cbs request failed");
        }
        let reply = answer(request, &keys, &grants);
        replies.send(reply).await;
    }
    let _ = requests.close().await;
}

/// The answer to one request: 202 with the grant kept, or the status and
/// the reason it was refused.
fn answer(
    request: AmqpMessage<Body<Value>>,
    keys: &[SharedAccessKey],
    grants: &Grants,
) -> AmqpMessage<AmqpValue<Value>> {
    let message_id = request
        .properties
        .as_ref()
        .and_then(|p| p.message_id.clone());
    let property = |name: &str| match request
        .application_properties
        .as_ref()
        .and_then(|p| p.0.get(name))
    {
        Some(SimpleValue::String(text)) => Some(text.clone()),
        _ => None,
    };
    let (status, description) = match (property("operation").as_deref(), &request.body) {
        (Some("put-token"), Body::Value(AmqpValue(Value::String(token)))) => {
            match Grant::from_token(token, keys, SystemTime::now()) {
                Ok(grant) => {
                    info!(key = grant.key_name(), audience = ?property("name"), "a client put a token");
                    grants.add(grant);
                    (202, "Accepted".to_owned())
                }
                Err(refused) => {
                    info!(%refused, audience = ?property("name"), "a client's token was refused");
                    (401, refused.to_string())
                }
            }
        }
        (Some("put-token"), _) => (
            400,
            "the body of put-token is the token, as a string".to_owned(),
        ),
        (operation, _) => (
            501,
            format!(
                "$cbs takes put-token only, not {}",
                operation.unwrap_or("a request without `operation`")
            ),
        ),
    };
    reply(message_id, status, description)
}

fn reply(
    correlation: Option<MessageId>,
    status: i32,
    description: String,
) -> AmqpMessage<AmqpValue<Value>> {
    let mut properties = Properties::builder().build();
    // The same id and the same AMQP type: Python compares uuid to uuid.
    properties.correlation_id = correlation;
    AmqpMessage::builder()
        .properties(properties)
        .application_properties(
            ApplicationProperties::builder()
                .insert("status-code", SimpleValue::Int(status))
                .insert("status-description", SimpleValue::String(description))
                .build(),
        )
        .value(Value::Null)
        .build()
}
