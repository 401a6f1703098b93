//! The broker's refusal of a settlement reaches the caller: a message whose
//! lock lapsed is lock lost, a session whose lock lapsed is session lock
//! lost, and the message comes back. The conformance suite reaches these by
//! moving the broker's clock, which it cannot do over AMQP; here the locks
//! are one second long and the test waits them out.

#![allow(clippy::unwrap_used, reason = "tests")]

use std::time::Duration;

use nimbus_servicebus::ServiceBus;
use nimbus_transport::{
    Admin, ErrorKind, Message, Receiver, SessionLock, SessionSelector, SubQueue, SubscriptionPath,
    SubscriptionSettings, TopicSettings, Transport,
};

use crate::common;

use common::Served;

const LOCK: Duration = Duration::from_secs(1);
const WAIT: Duration = Duration::from_secs(10);

/// A client of an endpoint whose topic `t` has a session subscription and a
/// plain one, both with one-second locks, and one message in each.
async fn connected() -> (ServiceBus, Served) {
    let served = Served::start().await;
    let broker = &served.broker;
    broker
        .create_topic("t", TopicSettings::default())
        .await
        .unwrap();
    for (name, settings) in [
        ("sessions", SubscriptionSettings::sessions()),
        ("plain", SubscriptionSettings::default()),
    ] {
        broker
            .create_subscription(
                &SubscriptionPath::new("t", name),
                settings.with_lock_duration(LOCK),
            )
            .await
            .unwrap();
    }
    let mut message = Message::new(b"late".to_vec());
    message.session_id = Some("k".to_owned());
    broker.publish("t", vec![message]).await.unwrap();
    let bus = ServiceBus::connect(&served.connection_string())
        .await
        .unwrap();
    (bus, served)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settling_after_a_message_lock_lapsed_is_lock_lost_and_it_comes_back() {
    let (bus, _served) = connected().await;
    let path = SubscriptionPath::new("t", "plain");
    let receiver = bus.receiver(&path, SubQueue::Main).await.unwrap();
    let message = receiver.receive(WAIT).await.unwrap().expect("late");
    tokio::time::sleep(LOCK + Duration::from_millis(500)).await;
    let refused = receiver
        .complete(message)
        .await
        .expect_err("the lock lapsed");
    assert_eq!(refused.kind(), ErrorKind::LockLost, "{refused}");
    let again = receiver
        .receive(WAIT)
        .await
        .unwrap()
        .expect("delivered again");
    assert_eq!(again.delivery_count, 2);
    receiver.complete(again).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settling_after_the_session_lock_lapsed_is_session_lock_lost() {
    let (bus, _served) = connected().await;
    let path = SubscriptionPath::new("t", "sessions");
    let lock = bus
        .accept_session(&path, SessionSelector::Named("k".into()), WAIT)
        .await
        .unwrap();
    let message = lock.receive(WAIT).await.unwrap().expect("late");
    tokio::time::sleep(LOCK + Duration::from_millis(500)).await;
    let refused = lock.complete(message).await.expect_err("the lock lapsed");
    assert_eq!(refused.kind(), ErrorKind::SessionLockLost, "{refused}");
    assert_eq!(
        lock.get_state().await.expect_err("lapsed").kind(),
        ErrorKind::SessionLockLost
    );
    drop(lock);
    let lock = bus
        .accept_session(&path, SessionSelector::Named("k".into()), WAIT)
        .await
        .unwrap();
    let again = lock.receive(WAIT).await.unwrap().expect("delivered again");
    assert_eq!(again.delivery_count, 2);
    lock.complete(again).await.unwrap();
}
