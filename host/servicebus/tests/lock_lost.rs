//! The broker's refusal of a settlement reaches the caller: a message whose
//! lock lapsed is lock lost, a session whose lock lapsed is session lock
//! lost, and the message comes back. The conformance suite reaches these by
//! moving the broker's clock, which it cannot do over AMQP; here the locks
//! are one second long and the test waits them out.

#![allow(clippy::unwrap_used, reason = "tests")]

use std::sync::Arc;
use std::time::Duration;

use nimbus_amqp::{Endpoint, SharedAccessKey};
use nimbus_broker::{Broker, BrokerOptions};
use nimbus_servicebus::{ConnectionString, ServiceBus};
use nimbus_transport::{
    Admin, ErrorKind, Message, Receiver, SessionLock, SessionSelector, SubQueue, SubscriptionPath,
    SubscriptionSettings, TopicSettings, Transport,
};

const KEY_NAME: &str = "RootManageSharedAccessKey";
const KEY: &str = "lock lost";
const LOCK: Duration = Duration::from_secs(1);
const WAIT: Duration = Duration::from_secs(10);

async fn connected() -> (
    ServiceBus,
    Arc<Broker>,
    tokio::sync::oneshot::Sender<()>,
    tempfile::TempDir,
) {
    let dir = tempfile::tempdir().unwrap();
    let broker = Arc::new(
        Broker::open(BrokerOptions::new(dir.path().join("b")))
            .await
            .unwrap(),
    );
    broker
        .create_topic("t", TopicSettings::default())
        .await
        .unwrap();
    broker
        .create_subscription(
            &SubscriptionPath::new("t", "sessions"),
            SubscriptionSettings::sessions().with_lock_duration(LOCK),
        )
        .await
        .unwrap();
    broker
        .create_subscription(
            &SubscriptionPath::new("t", "plain"),
            SubscriptionSettings::default().with_lock_duration(LOCK),
        )
        .await
        .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let endpoint = Endpoint::new(
        Arc::clone(&broker),
        vec![SharedAccessKey::new(KEY_NAME, KEY)],
        1 << 20,
    );
    tokio::spawn(endpoint.serve(listener, async {
        let _ = stopped.await;
    }));
    let cs: ConnectionString = format!(
        "Endpoint=sb://localhost:{port};SharedAccessKeyName={KEY_NAME};SharedAccessKey={KEY};\
         UseDevelopmentEmulator=true;"
    )
    .parse()
    .unwrap();
    let mut message = Message::new(b"late".to_vec());
    message.session_id = Some("k".to_owned());
    broker.publish("t", vec![message]).await.unwrap();
    (ServiceBus::connect(&cs).await.unwrap(), broker, stop, dir)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settling_after_a_message_lock_lapsed_is_lock_lost_and_it_comes_back() {
    let (bus, _broker, _stop, _dir) = connected().await;
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
    let (bus, _broker, _stop, _dir) = connected().await;
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
