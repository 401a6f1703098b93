//! The client against nimbus's own AMQP endpoint, in process on a loopback
//! port over an embedded broker: what it publishes is in the broker as it
//! was sent, scheduled messages can be cancelled, a wrong key and a
//! missing topic are each refused by name, and it can tell which entities
//! exist.

#![allow(clippy::unwrap_used, reason = "tests")]

use std::time::{Duration, SystemTime};

use nimbus_servicebus::{ConnectError, ServiceBus};
use nimbus_transport::{
    Admin, CancelError, Message, PropertyValue, PublishError, SessionLock, SessionSelector,
    SubscriptionPath, SubscriptionSettings, Transport,
};

use crate::common;

use common::Served;

/// An endpoint with topic `orders` and its session subscription `billing`.
async fn endpoint() -> Served {
    let served = Served::start().await;
    served.orders_with_billing().await;
    served
}

fn event(session: &str, id: &str) -> Message {
    let mut message = Message::new(format!("{{\"id\":\"{id}\"}}").into_bytes());
    message.message_id = Some(id.to_owned());
    message.session_id = Some(session.to_owned());
    message.correlation_id = Some(format!("corr-{id}"));
    message.to = Some("billing".to_owned());
    message.properties.insert(
        "EventTypeId".to_owned(),
        PropertyValue::String("OrderPlaced".to_owned()),
    );
    message
        .properties
        .insert("RetryCount".to_owned(), PropertyValue::Int(0));
    message
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_the_client_publishes_is_in_the_broker_as_it_was_sent() {
    let host = endpoint().await;
    let client = ServiceBus::connect(&host.connection_string())
        .await
        .unwrap();
    let numbers = client
        .publish("Orders", vec![event("order-1", "a"), event("order-1", "b")])
        .await
        .unwrap();
    assert_eq!(numbers.len(), 2);
    assert!(numbers[0] < numbers[1], "{numbers:?}");

    let lock = host
        .broker
        .accept_session(
            &SubscriptionPath::new("orders", "billing"),
            SessionSelector::Named("order-1".to_owned()),
            Duration::from_secs(5),
        )
        .await
        .unwrap();
    for (id, number) in ["a", "b"].into_iter().zip(&numbers) {
        let received = lock
            .receive(Duration::from_secs(5))
            .await
            .unwrap()
            .expect(id);
        assert_eq!(received.sequence_number, *number);
        let mut expected = event("order-1", id);
        // Published through the scheduler at "now": enqueued at once.
        expected.scheduled_enqueue_time = received.message.scheduled_enqueue_time;
        assert_eq!(received.message, expected);
        lock.complete(received).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scheduled_message_is_cancelled_once() {
    let host = endpoint().await;
    let client = ServiceBus::connect(&host.connection_string())
        .await
        .unwrap();
    let mut later = event("order-2", "later");
    later.scheduled_enqueue_time = Some(SystemTime::now() + Duration::from_secs(3600));
    let [number] = client.publish("orders", vec![later]).await.unwrap()[..] else {
        panic!("one number");
    };
    client.cancel_scheduled("orders", number).await.unwrap();
    assert!(matches!(
        client.cancel_scheduled("orders", number).await,
        Err(CancelError::NotFound { sequence_number, .. }) if sequence_number == number
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_are_named() {
    let host = endpoint().await;
    let client = ServiceBus::connect(&host.connection_string())
        .await
        .unwrap();
    let missing = client.publish("nowhere", vec![event("s", "x")]).await;
    assert!(
        matches!(&missing, Err(PublishError::TopicNotFound { topic }) if topic == "nowhere"),
        "{missing:?}"
    );

    let wrong = ServiceBus::connect(&host.connection_string_with("not the key")).await;
    let Err(error @ ConnectError::Token { .. }) = wrong else {
        panic!("a wrong key is refused at connect");
    };
    assert!(
        error.to_string().contains("RootManageSharedAccessKey"),
        "{error}"
    );
}

/// The client cannot create entities, so the host asks which are missing:
/// the endpoint refuses a link to one it does not have, as Service Bus
/// does, and an entity made afterwards is found (names ignore case).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn which_entities_exist_is_answered_by_the_broker() {
    let host = endpoint().await;
    let client = ServiceBus::connect(&host.connection_string())
        .await
        .unwrap();
    assert!(client.topic_exists("orders").await.unwrap());
    assert!(client.topic_exists("ORDERS").await.unwrap());
    assert!(!client.topic_exists("shipping").await.unwrap());
    let billing = SubscriptionPath::new("orders", "billing");
    let audit = SubscriptionPath::new("orders", "audit");
    assert!(client.subscription_exists(&billing).await.unwrap());
    assert!(!client.subscription_exists(&audit).await.unwrap());
    assert!(
        !client
            .subscription_exists(&SubscriptionPath::new("shipping", "billing"))
            .await
            .unwrap()
    );

    host.broker
        .create_subscription(&audit, SubscriptionSettings::default())
        .await
        .unwrap();
    assert!(client.subscription_exists(&audit).await.unwrap());
    // The refused links left the connection usable.
    client
        .publish("orders", vec![event("s", "after")])
        .await
        .unwrap();
}
