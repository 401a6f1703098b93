//! A zero wait means "only what is already there": a receive or accept with
//! `Duration::ZERO` and nothing to hand out answers on its first poll,
//! without going through tokio's timer (which would hold it until the
//! timer's next millisecond tick; decision 0104).

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use nimbus_broker::{Broker, BrokerOptions, Durability, ManualClock};
use nimbus_transport::{
    AcceptSessionError, Admin, Message, Receiver, SessionLock, SessionSelector, SubQueue,
    SubscriptionPath, SubscriptionSettings, TopicSettings, Transport,
};

/// Polls `future` once, with a waker that does nothing.
fn first_poll<F: Future>(future: F) -> Poll<F::Output> {
    let mut future = pin!(future);
    future
        .as_mut()
        .poll(&mut Context::from_waker(Waker::noop()))
}

async fn broker_with(
    settings: SubscriptionSettings,
) -> (tempfile::TempDir, Broker, SubscriptionPath) {
    let dir = tempfile::tempdir().expect("dir");
    let broker = Broker::open(
        BrokerOptions::new(dir.path())
            .durability(Durability::Os)
            .clock(Arc::new(ManualClock::at_fixed_start())),
    )
    .await
    .expect("open");
    broker
        .create_topic("t", TopicSettings::default())
        .await
        .expect("topic");
    let path = SubscriptionPath::new("t", "s");
    broker
        .create_subscription(&path, settings)
        .await
        .expect("subscription");
    (dir, broker, path)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_receive_with_zero_wait_answers_none_on_its_first_poll() {
    let (_dir, broker, path) = broker_with(SubscriptionSettings::sessions()).await;
    let mut message = Message::new(b"only".to_vec());
    message.session_id = Some("k".into());
    broker.publish("t", vec![message]).await.expect("publish");
    let lock = broker
        .accept_session(
            &path,
            SessionSelector::Named("k".into()),
            Duration::from_secs(10),
        )
        .await
        .expect("accept");

    match first_poll(lock.receive(Duration::ZERO)) {
        Poll::Ready(Ok(Some(m))) => assert_eq!(m.message.body, b"only"),
        other => panic!("the queued message on the first poll, got {other:?}"),
    }
    match first_poll(lock.receive(Duration::ZERO)) {
        Poll::Ready(Ok(None)) => {}
        other => panic!("an empty session answers None at once, got {other:?}"),
    }
    // A wait that is not zero still waits.
    assert!(first_poll(lock.receive(Duration::from_secs(10))).is_pending());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_receive_with_zero_wait_answers_none_on_its_first_poll() {
    let (_dir, broker, path) = broker_with(SubscriptionSettings::default()).await;
    let receiver = broker
        .receiver(&path, SubQueue::Main)
        .await
        .expect("receiver");
    match first_poll(receiver.receive(Duration::ZERO)) {
        Poll::Ready(Ok(None)) => {}
        other => panic!("an empty queue answers None at once, got {other:?}"),
    }
    assert!(first_poll(receiver.receive(Duration::from_secs(10))).is_pending());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn accepting_with_zero_wait_and_no_session_fails_on_its_first_poll() {
    let (_dir, broker, path) = broker_with(SubscriptionSettings::sessions()).await;
    match first_poll(broker.accept_session(&path, SessionSelector::NextAvailable, Duration::ZERO)) {
        Poll::Ready(Err(AcceptSessionError::NoSessionAvailable { .. })) => {}
        other => panic!(
            "no session available at once, got {:?}",
            other.map(|r| r.map(|s| s.session_id().to_owned()))
        ),
    }
}
