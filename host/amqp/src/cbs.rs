//! The `$cbs` node: a client puts a shared access signature there before
//! it attaches a link to an entity, and the endpoint answers on the same
//! session's `$cbs` receiver link (spec §A.4). A token is checked against
//! the configured keys ([`crate::sas`]); what it grants is kept for the
//! connection, and each publish and management request is checked against
//! it.

use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::SystemTime;

use fe2o3_amqp::link::Receiver;
use fe2o3_amqp::types::messaging::{
    AmqpValue, ApplicationProperties, Body, Message as AmqpMessage, MessageId, Properties,
};
use fe2o3_amqp::types::primitives::{SimpleValue, Value};
use tokio::sync::watch;
use tracing::debug;

use crate::log_limit::{Cause, LogLimit};
use crate::reply::ReplyLink;
use crate::sas::{Grant, Right, SharedAccessKey};

/// What the tokens put on one connection grant.
#[derive(Debug)]
pub(crate) struct Grants {
    grants: Mutex<Vec<Grant>>,
    /// The host the client named in its `open`: a token's audience must
    /// be for it.
    host: OnceLock<String>,
    /// Whether a valid token has been put at all: until then the
    /// connection is held to the bounds of one without a token.
    authenticated: watch::Sender<bool>,
}

impl Default for Grants {
    fn default() -> Self {
        Grants {
            grants: Mutex::default(),
            host: OnceLock::new(),
            authenticated: watch::Sender::new(false),
        }
    }
}

impl Grants {
    /// Keeps `grant`, dropping those expired and the one it renews (the
    /// SDKs put a fresh token for the same audience before the last
    /// expires), so a long connection holds a handful, not one per renewal.
    pub(crate) fn add(&self, grant: Grant) {
        let now = SystemTime::now();
        let mut grants = self.grants.lock().unwrap_or_else(PoisonError::into_inner);
        grants.retain(|kept| kept.expires() > now && !kept.renewed_by(&grant));
        grants.push(grant);
        self.authenticated.send_replace(true);
    }

    /// Whether a token put on this connection gives `right` on
    /// `entity_path` now.
    pub(crate) fn allow(&self, right: Right, entity_path: &str) -> bool {
        let now = SystemTime::now();
        self.grants
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .any(|grant| grant.allows(right, entity_path, now))
    }

    /// `Ok` if a token gives `right` on `entity_path` now, else why not, as
    /// the refusal's description.
    pub(crate) fn check(&self, right: Right, entity_path: &str) -> Result<(), String> {
        if self.allow(right, entity_path) {
            return Ok(());
        }
        Err(format!(
            "no token put on $cbs on this connection gives {right} on '{entity_path}' now: put \
             one whose audience covers it, signed with a configured key that has {right} rights"
        ))
    }

    /// Whether a valid token has been put on this connection.
    pub(crate) fn authenticated(&self) -> bool {
        *self.authenticated.borrow()
    }

    /// Tells when a first valid token is put.
    pub(crate) fn watch_authenticated(&self) -> watch::Receiver<bool> {
        self.authenticated.subscribe()
    }

    /// The host the client connected to, from its `open`.
    pub(crate) fn set_host(&self, host: &str) {
        let _ = self.host.set(host.to_owned());
    }

    #[cfg(test)]
    pub(crate) fn host_for_tests(&self) -> Option<&str> {
        self.host.get().map(String::as_str)
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
    while let Some(delivery) = crate::publish::next_delivery(&mut requests).await {
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
            let host = grants.host.get().map(String::as_str);
            match Grant::from_token(token, keys, SystemTime::now(), host) {
                Ok(grant) => {
                    debug!(key = grant.key_name(), audience = ?property("name"), "a client put a token");
                    grants.add(grant);
                    (202, "Accepted".to_owned())
                }
                Err(refused) => {
                    LogLimit::global().info(Cause::TokenRefused(refused.kind()), || {
                        format!(
                            "a client's token was refused: {refused} (audience {:?})",
                            property("name")
                        )
                    });
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use fe2o3_amqp::types::primitives::Uuid;

    use super::*;

    const KEY: &str = "SAS_KEY_VALUE";

    fn keys() -> Vec<SharedAccessKey> {
        vec![SharedAccessKey::new("Root", KEY)]
    }

    /// A token as Service Bus defines it, for `audience`, expiring an hour
    /// from now.
    fn token(audience: &str, key: &str) -> String {
        use base64::Engine as _;
        use hmac::Mac as _;
        let encoded: String =
            percent_encoding::utf8_percent_encode(audience, percent_encoding::NON_ALPHANUMERIC)
                .to_string();
        let expiry = SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs()
            + 3600;
        let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(key.as_bytes()).unwrap();
        mac.update(format!("{encoded}\n{expiry}").as_bytes());
        let signature =
            base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes());
        let signature: String =
            percent_encoding::utf8_percent_encode(&signature, percent_encoding::NON_ALPHANUMERIC)
                .to_string();
        format!("SharedAccessSignature sr={encoded}&sig={signature}&se={expiry}&skn=Root")
    }

    fn request(operation: &str, body: Body<Value>) -> AmqpMessage<Body<Value>> {
        let mut properties = Properties::builder().build();
        properties.message_id = Some(MessageId::Uuid(Uuid::from([7; 16])));
        AmqpMessage::builder()
            .properties(properties)
            .application_properties(
                ApplicationProperties::builder()
                    .insert("operation", operation)
                    .insert("name", "sb://localhost:5672/orders")
                    .build(),
            )
            .body(body)
            .build()
    }

    fn status(reply: &AmqpMessage<AmqpValue<Value>>) -> (SimpleValue, String) {
        let properties = &reply.application_properties.as_ref().unwrap().0;
        let description = match properties.get("status-description") {
            Some(SimpleValue::String(text)) => text.clone(),
            other => panic!("a string description: {other:?}"),
        };
        (properties.get("status-code").unwrap().clone(), description)
    }

    fn put(token: String) -> AmqpMessage<Body<Value>> {
        request("put-token", Body::Value(AmqpValue(Value::String(token))))
    }

    #[test]
    fn a_valid_token_is_answered_202_as_an_int_with_the_request_id_and_granted() {
        let grants = Grants::default();
        let reply = answer(
            put(token("sb://localhost:5672/orders", KEY)),
            &keys(),
            &grants,
        );
        assert_eq!(status(&reply).0, SimpleValue::Int(202));
        assert_eq!(
            reply.properties.as_ref().unwrap().correlation_id,
            Some(MessageId::Uuid(Uuid::from([7; 16]))),
            "the same id, and the same AMQP type"
        );
        assert!(grants.allow(Right::Listen, "orders/Subscriptions/billing"));
        assert!(!grants.allow(Right::Send, "payments"));
        assert!(grants.authenticated());
    }

    #[test]
    fn a_refused_or_malformed_request_says_why_with_its_status() {
        let grants = Grants::default();
        let wrong = answer(
            put(token("sb://localhost:5672/orders", "not it")),
            &keys(),
            &grants,
        );
        let (code, why) = status(&wrong);
        assert_eq!(code, SimpleValue::Int(401));
        assert!(why.contains("signature does not match key 'Root'"), "{why}");
        assert!(!grants.allow(Right::Send, "orders"), "nothing granted");
        assert!(!grants.authenticated());

        let not_a_string = answer(
            request("put-token", Body::Value(AmqpValue(Value::Int(1)))),
            &keys(),
            &grants,
        );
        assert_eq!(status(&not_a_string).0, SimpleValue::Int(400));
        let other = answer(
            request("delete-token", Body::Value(AmqpValue(Value::Null))),
            &keys(),
            &grants,
        );
        let (code, why) = status(&other);
        assert_eq!(code, SimpleValue::Int(501));
        assert!(why.contains("delete-token"), "{why}");
    }

    #[test]
    fn renewing_a_token_replaces_its_grant() {
        let grants = Grants::default();
        for _ in 0..5 {
            answer(
                put(token("sb://localhost:5672/orders", KEY)),
                &keys(),
                &grants,
            );
        }
        answer(
            put(token("sb://localhost:5672/payments", KEY)),
            &keys(),
            &grants,
        );
        assert_eq!(grants.grants.lock().unwrap().len(), 2);
    }
}
