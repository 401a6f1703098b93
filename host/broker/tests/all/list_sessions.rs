//! `Admin::list_sessions`: what an operator sees of a subscription's
//! sessions (messages, state, lock), without locking or changing anything.

use std::time::Duration;

use nimbus_broker::{Broker, BrokerOptions};
use nimbus_transport::{
    Admin, ErrorKind, Message, SessionLock, SessionSelector, SubscriptionPath,
    SubscriptionSettings, TopicSettings, Transport,
};

const ARRIVES: Duration = Duration::from_secs(10);

fn in_session(session: &str, body: &[u8]) -> Message {
    let mut m = Message::new(body.to_vec());
    m.session_id = Some(session.to_owned());
    m
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_sessions_with_message_counts_state_and_lock() {
    let dir = tempfile::tempdir().expect("dir");
    let broker = Broker::open(BrokerOptions::new(dir.path()))
        .await
        .expect("open");
    broker
        .create_topic("t", TopicSettings::default())
        .await
        .expect("topic");
    let path = SubscriptionPath::new("t", "s");
    broker
        .create_subscription(&path, SubscriptionSettings::sessions())
        .await
        .expect("sub");
    assert!(broker.list_sessions(&path).await.expect("list").is_empty());

    broker
        .publish(
            "t",
            vec![
                in_session("b", b"1"),
                in_session("a", b"1"),
                in_session("b", b"2"),
            ],
        )
        .await
        .expect("publish");
    let session = broker
        .accept_session(&path, SessionSelector::Named("a".to_owned()), ARRIVES)
        .await
        .expect("accept a");
    let m = session.receive(ARRIVES).await.expect("rx").expect("msg");
    session
        .set_state(Some(b"blocked".to_vec()))
        .await
        .expect("state");
    session.complete(m).await.expect("complete");

    let listed = broker.list_sessions(&path).await.expect("list");
    let summary: Vec<(&str, u64, Option<&[u8]>, bool)> = listed
        .iter()
        .map(|s| {
            (
                s.session_id.as_str(),
                s.active_messages,
                s.state.as_deref(),
                s.locked,
            )
        })
        .collect();
    assert_eq!(
        summary,
        vec![("a", 0, Some(&b"blocked"[..]), true), ("b", 2, None, false)]
    );

    session.close().await;
    let listed = broker.list_sessions(&path).await.expect("list");
    assert!(!listed[0].locked, "a closed session is not locked");
    assert_eq!(listed[0].state.as_deref(), Some(&b"blocked"[..]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listing_an_unknown_or_sessionless_subscription_is_an_error() {
    let dir = tempfile::tempdir().expect("dir");
    let broker = Broker::open(BrokerOptions::new(dir.path()))
        .await
        .expect("open");
    broker
        .create_topic("t", TopicSettings::default())
        .await
        .expect("topic");
    let plain = SubscriptionPath::new("t", "plain");
    broker
        .create_subscription(&plain, SubscriptionSettings::default())
        .await
        .expect("sub");
    let err = broker.list_sessions(&plain).await.expect_err("no sessions");
    assert!(
        err.to_string().contains("does not require sessions"),
        "{err}"
    );
    let err = broker
        .list_sessions(&SubscriptionPath::new("t", "missing"))
        .await
        .expect_err("unknown");
    assert_eq!(err.kind(), ErrorKind::NotFound, "{err}");
}
