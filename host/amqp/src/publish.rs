//! A link a client sends on, to a topic: each delivery (one message, or a
//! batch in format `0x80013700`) is published as one atomic unit and
//! settled `accepted`, or `rejected` with the Service Bus condition an SDK
//! maps to its exception (spec §A.6).

use std::sync::Arc;

use fe2o3_amqp::link::Receiver;
use fe2o3_amqp::types::definitions::{AmqpError, Error as AmqpErrorBody, ErrorCondition};
use fe2o3_amqp::types::messaging::{Body, Message as AmqpMessage};
use fe2o3_amqp::types::primitives::Value;
use nimbus_dialect::condition::{self, SERVER_BUSY};
use nimbus_dialect::convert::{self, BATCH_FORMAT, ConvertError};
use nimbus_dialect::{EntityAddress, Right};
use nimbus_transport::{Admin, PublishError, Transport};
use tracing::debug;

use crate::grants::Grants;
use crate::incoming::next_delivery;

/// A check on each message a client publishes, beyond its token: the
/// host's (NimBus control messages only from its Manager). `Err` says why
/// the message is refused.
pub type PublishCheck = Arc<dyn Fn(&nimbus_transport::Message) -> Result<(), String> + Send + Sync>;

/// Publishes what the client sends on `receiver` to the topic it named as
/// `written` until it detaches. Each delivery is checked on its own: a
/// token that covers the topic, put on this connection and not expired, and
/// a topic that exists (its name compared ignoring case, as Service Bus
/// does). A refusal is the delivery's `rejected` outcome, which the SDKs
/// raise as the matching exception; a refused attach only says "unknown
/// error" to a sender that already sent.
pub(crate) async fn serve<T: Transport + Admin>(
    mut receiver: Receiver,
    transport: Arc<T>,
    written: String,
    grants: Arc<Grants>,
    check: Option<PublishCheck>,
) {
    let mut topic: Option<String> = None;
    while let Some(delivery) = next_delivery(&mut receiver).await {
        let format = delivery.message_format().unwrap_or(0);
        let (delivery, message) = delivery.into_parts();
        let outcome = publish(
            transport.as_ref(),
            (&written, &mut topic),
            &grants,
            check.as_ref(),
            format,
            message,
        )
        .await;
        let settled = match outcome {
            Ok(()) => receiver.accept(delivery).await,
            Err(error) => {
                debug!(topic = %written, error = ?error.description, "a delivery was rejected");
                receiver.reject(delivery, error).await
            }
        };
        if let Err(error) = settled {
            debug!(topic = %written, %error, "settling a delivery failed");
        }
    }
    let _ = receiver.close().await;
}

async fn publish<T: Transport + Admin>(
    transport: &T,
    (written, topic): (&str, &mut Option<String>),
    grants: &Grants,
    check: Option<&PublishCheck>,
    format: u32,
    message: AmqpMessage<Body<Value>>,
) -> Result<(), AmqpErrorBody> {
    grants
        .check(Right::Send, written)
        .map_err(|why| condition::error(AmqpError::UnauthorizedAccess, why))?;
    let messages = if format == BATCH_FORMAT {
        convert::batch(message)
    } else {
        convert::message(message).map(|m| vec![m])
    }
    .map_err(|refused| converted_error(&refused))?;
    checked(check, &messages)?;
    let name = match topic.as_ref() {
        Some(name) => name.clone(),
        None => {
            let name = resolve_topic(transport, written).await?;
            *topic = Some(name.clone());
            name
        }
    };
    transport
        .publish(&name, messages)
        .await
        .map(|_| ())
        .map_err(|error| {
            if matches!(error, PublishError::TopicNotFound { .. }) {
                // Deleted since: looked up again next time.
                *topic = None;
            }
            published_error(&error)
        })
}

/// Each of `messages` past the host's check, or the first refusal as
/// `amqp:unauthorized-access`.
pub(crate) fn checked(
    check: Option<&PublishCheck>,
    messages: &[nimbus_transport::Message],
) -> Result<(), AmqpErrorBody> {
    let Some(check) = check else {
        return Ok(());
    };
    for message in messages {
        check(message).map_err(|why| condition::error(AmqpError::UnauthorizedAccess, why))?;
    }
    Ok(())
}

/// The broker's name of the topic `written`, or `amqp:not-found`.
pub(crate) async fn resolve_topic<T: Admin>(
    admin: &T,
    written: &str,
) -> Result<String, AmqpErrorBody> {
    let topics = admin.list_topics().await.map_err(|error| {
        condition::error(
            condition::named(SERVER_BUSY),
            format!("the broker's topics cannot be listed: {error}"),
        )
    })?;
    topics
        .into_iter()
        .map(|topic| topic.name)
        .find(|name| name.eq_ignore_ascii_case(written))
        .ok_or_else(|| {
            condition::error(
                AmqpError::NotFound,
                format!("the messaging entity '{written}' could not be found"),
            )
        })
}

/// The subscription `entity` names, its names resolved ignoring case, and
/// its description.
pub(crate) async fn resolve_subscription<T: Admin>(
    admin: &T,
    entity: &EntityAddress,
) -> Result<
    (
        nimbus_transport::SubscriptionPath,
        nimbus_transport::SubscriptionDescription,
    ),
    AmqpErrorBody,
> {
    let topic = resolve_topic(admin, &entity.topic).await?;
    let wanted = entity.subscription.as_deref().unwrap_or_default();
    let subscription = admin
        .list_subscriptions(&topic)
        .await
        .map_err(|error| {
            condition::error(
                condition::named(SERVER_BUSY),
                format!("the subscriptions of '{topic}' cannot be listed: {error}"),
            )
        })?
        .into_iter()
        .find(|s| s.name.eq_ignore_ascii_case(wanted))
        .ok_or_else(|| {
            condition::error(
                AmqpError::NotFound,
                format!(
                    "the messaging entity '{}' could not be found",
                    entity.entity_path()
                ),
            )
        })?;
    let path = nimbus_transport::SubscriptionPath::new(topic, subscription.name.clone());
    Ok((path, subscription))
}

fn published_error(error: &PublishError) -> AmqpErrorBody {
    let condition = match error {
        PublishError::TopicNotFound { topic } => {
            return condition::error(
                AmqpError::NotFound,
                format!("the messaging entity '{topic}' could not be found"),
            );
        }
        PublishError::InvalidMessage { .. } => ErrorCondition::AmqpError(AmqpError::InvalidField),
        // Python maps it to a retryable busy error.
        _ => condition::named(SERVER_BUSY),
    };
    condition::error(condition, error.to_string())
}

fn converted_error(error: &ConvertError) -> AmqpErrorBody {
    let condition = match error {
        ConvertError::BatchEntry { .. } => AmqpError::DecodeError,
        ConvertError::PropertyType { .. } | ConvertError::Body(_) => AmqpError::NotImplemented,
        // Only a received message has a tag and the broker's stamps.
        ConvertError::Tag(_) | ConvertError::Missing(_) => AmqpError::InvalidField,
    };
    condition::error(condition, error.to_string())
}
