//! Where Service Bus cannot apply a settlement as one unit, the transport
//! takes its steps in an order that makes a crash between any two harmless
//! (decision 0137): publishes, then session state with the inbox, then the
//! message's outcome. Each window is reached here by settling the steps
//! before it on their own and then dropping the client, as a crashed host
//! drops its connection; a new client then sees what the engine would.
//!
//! Against nimbus's AMQP endpoint in process over an embedded broker.

#![allow(clippy::unwrap_used, reason = "tests")]

use std::time::{Duration, SystemTime};

use nimbus_broker::Broker;
use nimbus_servicebus::{ServiceBus, ServiceBusSession};
use nimbus_transport::{
    Admin, Message, Receiver, SessionLock, SessionSelector, Settlement, SubQueue, SubscriptionPath,
    SubscriptionSettings, TopicSettings, Transport,
};

use crate::common;

use common::Served;

const WAIT: Duration = Duration::from_secs(10);

/// An endpoint with topic `in` (a session subscription, one message `m-1`)
/// and topic `out` (duplicate detection, one plain subscription).
async fn host() -> Served {
    let served = Served::start().await;
    let broker = &served.broker;
    broker
        .create_topic("in", TopicSettings::default())
        .await
        .unwrap();
    broker
        .create_subscription(
            &SubscriptionPath::new("in", "s"),
            SubscriptionSettings::sessions(),
        )
        .await
        .unwrap();
    // The host provisions its topics with duplicate detection: a replay's
    // copies of what a crashed settlement published are dropped.
    let dedup = TopicSettings::default().with_duplicate_detection(Duration::from_secs(600));
    broker.create_topic("out", dedup).await.unwrap();
    broker
        .create_subscription(
            &SubscriptionPath::new("out", "all"),
            SubscriptionSettings::default(),
        )
        .await
        .unwrap();
    broker
        .publish("in", vec![event("order-1", "m-1")])
        .await
        .unwrap();
    served
}

fn event(session: &str, id: &str) -> Message {
    let mut message = Message::new(id.as_bytes().to_vec());
    message.message_id = Some(id.to_owned());
    message.session_id = Some(session.to_owned());
    message
}

/// The follow-up the handler of m-1 publishes: its id derived from m-1's,
/// so a replay's copy is the same message.
fn follow_up() -> Message {
    let mut message = Message::new(b"shipped".to_vec());
    message.message_id = Some("m-1/follow-up".to_owned());
    message
}

fn session() -> SubscriptionPath {
    SubscriptionPath::new("in", "s")
}

/// A new client (a host starting) and its lock on session `order-1`.
async fn hold_order_1(host: &Served) -> (ServiceBus, ServiceBusSession) {
    let bus = ServiceBus::connect(&host.connection_string())
        .await
        .unwrap();
    let lock = bus
        .accept_session(&session(), SessionSelector::Named("order-1".into()), WAIT)
        .await
        .unwrap();
    (bus, lock)
}

async fn out_bodies(broker: &Broker) -> Vec<String> {
    let receiver = broker
        .receiver(&SubscriptionPath::new("out", "all"), SubQueue::Main)
        .await
        .unwrap();
    let mut bodies = Vec::new();
    while let Some(message) = receiver.receive(Duration::from_millis(200)).await.unwrap() {
        bodies.push(String::from_utf8_lossy(&message.message.body).into_owned());
        receiver.complete(message).await.unwrap();
    }
    bodies
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_after_the_publishes_redelivers_and_the_replay_publishes_nothing_twice() {
    let host = host().await;
    {
        let (_crashed, lock) = hold_order_1(&host).await;
        let m = lock.receive(WAIT).await.unwrap().expect("m-1");
        lock.settle(Settlement::new().publish("out", follow_up()))
            .await
            .unwrap();
        drop(m);
        // The host dies here: its connection goes with it.
    }
    let (bus, lock) = hold_order_1(&host).await;
    let again = lock.receive(WAIT).await.unwrap().expect("m-1 again");
    assert_eq!(again.message.message_id.as_deref(), Some("m-1"));
    // Not recorded as handled: the engine handles it again...
    assert!(!bus.inbox_contains("billing", "m-1").await.unwrap());
    let expires = SystemTime::now() + Duration::from_secs(3600);
    lock.settle(
        Settlement::complete(again)
            .publish("out", follow_up())
            .set_session_state(Some(b"after m-1".to_vec()))
            .record_inbox("billing", "m-1", expires),
    )
    .await
    .unwrap();
    // ...and what it published is there once.
    assert_eq!(out_bodies(&host.broker).await, ["shipped"]);
    assert_eq!(
        lock.get_state().await.unwrap().as_deref(),
        Some(&b"after m-1"[..])
    );
    assert!(
        lock.receive(Duration::from_millis(200))
            .await
            .unwrap()
            .is_none()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_after_the_state_redelivers_and_the_inbox_says_it_was_handled() {
    let host = host().await;
    let expires = SystemTime::now() + Duration::from_secs(3600);
    {
        let (_crashed, lock) = hold_order_1(&host).await;
        let m = lock.receive(WAIT).await.unwrap().expect("m-1");
        lock.settle(Settlement::new().publish("out", follow_up()))
            .await
            .unwrap();
        lock.settle(
            Settlement::new()
                .set_session_state(Some(b"after m-1".to_vec()))
                .record_inbox("billing", "m-1", expires),
        )
        .await
        .unwrap();
        drop(m);
    }
    let (bus, lock) = hold_order_1(&host).await;
    let again = lock.receive(WAIT).await.unwrap().expect("m-1 again");
    // The state and the inbox were written as one: both say m-1 is done,
    // so the engine completes it without running the handler.
    assert_eq!(
        lock.get_state().await.unwrap().as_deref(),
        Some(&b"after m-1"[..])
    );
    assert!(bus.inbox_contains("billing", "m-1").await.unwrap());
    assert!(!bus.inbox_contains("shipping", "m-1").await.unwrap());
    lock.complete(again).await.unwrap();
    assert_eq!(out_bodies(&host.broker).await, ["shipped"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_settlement_that_completes_leaves_nothing_to_redeliver() {
    let host = host().await;
    {
        let (_bus, lock) = hold_order_1(&host).await;
        let m = lock.receive(WAIT).await.unwrap().expect("m-1");
        lock.settle(
            Settlement::complete(m)
                .publish("out", follow_up())
                .set_session_state(Some(b"after m-1".to_vec())),
        )
        .await
        .unwrap();
    }
    let (_bus, lock) = hold_order_1(&host).await;
    assert!(
        lock.receive(Duration::from_millis(300))
            .await
            .unwrap()
            .is_none()
    );
    assert_eq!(
        lock.get_state().await.unwrap().as_deref(),
        Some(&b"after m-1"[..])
    );
    assert_eq!(out_bodies(&host.broker).await, ["shipped"]);
}
