//! A request too large for one log frame is refused up front, with a reason
//! that says why, and the broker goes on (these tests lower the limit to
//! 1 MiB).

use std::time::Duration;

use nimbus_transport::{
    Admin, Message, PublishError, Receiver, SessionLock, SessionSelector, SettleError, Settlement,
    SubQueue, SubscriptionPath, SubscriptionSettings, TopicSettings, Transport,
};

use crate::{Broker, BrokerOptions, Durability};

/// The limit these tests set, small so a test can cross it without a large
/// load.
const LIMIT: usize = 1 << 20;

fn options(dir: &std::path::Path) -> BrokerOptions {
    BrokerOptions::new(dir)
        .durability(Durability::Os)
        .max_request_bytes(LIMIT)
}

const SUBSCRIPTIONS: usize = 20;
const ARRIVES: Duration = Duration::from_secs(10);
const ABSENT: Duration = Duration::from_millis(100);

/// Topic `t` with [`SUBSCRIPTIONS`] subscriptions taking everything, and a
/// session queue `work/q` to settle from.
async fn broker(dir: &std::path::Path) -> Broker {
    let broker = Broker::open(options(dir)).await.expect("open");
    for topic in ["t", "work"] {
        broker
            .create_topic(topic, TopicSettings::default())
            .await
            .expect("topic");
    }
    for n in 0..SUBSCRIPTIONS {
        broker
            .create_subscription(
                &SubscriptionPath::new("t", format!("s{n:02}")),
                SubscriptionSettings::default(),
            )
            .await
            .expect("subscription");
    }
    broker
        .create_subscription(
            &SubscriptionPath::new("work", "q"),
            SubscriptionSettings::default().with_requires_session(true),
        )
        .await
        .expect("queue");
    broker
}

/// A message whose copies to every subscription of `t` cross the limit,
/// though the message alone is far under it.
fn fans_out_too_far() -> Message {
    let body = vec![b'x'; LIMIT / SUBSCRIPTIONS + 1024];
    Message::new(body)
}

async fn bodies(broker: &Broker, subscription: &str) -> Vec<Vec<u8>> {
    let receiver = broker
        .receiver(&SubscriptionPath::new("t", subscription), SubQueue::Main)
        .await
        .expect("receiver");
    let mut got = Vec::new();
    let mut wait = ARRIVES;
    while let Some(m) = receiver.receive(wait).await.expect("receive") {
        got.push(m.message.body.clone());
        wait = ABSENT;
    }
    got
}

fn assert_names_the_limit(reason: &str) {
    assert!(
        reason.contains(&format!("{SUBSCRIPTIONS} message copies"))
            && reason.contains("more than the 1.0 MiB a request may hold"),
        "{reason}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publish_whose_copies_outgrow_one_request_is_refused_and_the_broker_goes_on() {
    let dir = tempfile::tempdir().expect("dir");
    let broker = broker(dir.path()).await;
    let refused = broker
        .publish("t", vec![fans_out_too_far()])
        .await
        .expect_err("too large");
    let PublishError::InvalidMessage { reason } = refused else {
        panic!("not an invalid message: {refused:?}");
    };
    assert_names_the_limit(&reason);

    // Nothing of it was placed, and the next publish goes through, then
    // and after a restart.
    broker
        .publish("t", vec![Message::new(b"small".to_vec())])
        .await
        .expect("a small publish");
    drop(broker);
    let broker = Broker::open(options(dir.path())).await.expect("reopen");
    for n in [0, SUBSCRIPTIONS - 1] {
        assert_eq!(
            bodies(&broker, &format!("s{n:02}")).await,
            [b"small".to_vec()]
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scheduled_message_that_would_outgrow_one_request_when_due_is_refused_at_publish() {
    let dir = tempfile::tempdir().expect("dir");
    let broker = broker(dir.path()).await;
    let mut scheduled = fans_out_too_far();
    scheduled.scheduled_enqueue_time =
        Some(std::time::SystemTime::now() + Duration::from_secs(3600));
    let refused = broker
        .publish("t", vec![scheduled])
        .await
        .expect_err("too large when due");
    let PublishError::InvalidMessage { reason } = refused else {
        panic!("not an invalid message: {refused:?}");
    };
    assert!(reason.starts_with("when it falls due, "), "{reason}");
    assert_names_the_limit(&reason);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_settlement_whose_publishes_outgrow_one_request_is_refused_and_the_message_stays_locked()
{
    let dir = tempfile::tempdir().expect("dir");
    let broker = broker(dir.path()).await;
    let mut work = Message::new(b"work".to_vec());
    work.session_id = Some("s-1".into());
    broker.publish("work", vec![work]).await.expect("publish");
    let session = broker
        .accept_session(
            &SubscriptionPath::new("work", "q"),
            SessionSelector::NextAvailable,
            ARRIVES,
        )
        .await
        .expect("session");
    let received = session
        .receive(ARRIVES)
        .await
        .expect("receive")
        .expect("a message");
    let refused = session
        .settle(Settlement::complete(received.clone()).publish("t", fans_out_too_far()))
        .await
        .expect_err("too large");
    let SettleError::Invalid { reason } = refused else {
        panic!("not invalid: {refused:?}");
    };
    assert!(
        reason.starts_with("its messages were refused: "),
        "{reason}"
    );
    assert_names_the_limit(&reason);
    // Nothing took effect: the message is still ours to settle.
    session
        .settle(Settlement::complete(received).publish("t", Message::new(b"small".to_vec())))
        .await
        .expect("a small settlement");
    assert_eq!(bodies(&broker, "s00").await, [b"small".to_vec()]);
}
