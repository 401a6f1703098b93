//! Which sessions retention leaves alone, read from the real embedded
//! broker: those whose NimBus session state says blocked or parked.

#![allow(clippy::unwrap_used, reason = "tests")]

use std::collections::BTreeSet;
use std::time::Duration;

use nimbus_broker::{Broker, BrokerOptions};
use nimbus_resolver::sessions_in_use;
use nimbus_transport::{
    Admin, SessionLock, SessionSelector, SubscriptionPath, SubscriptionSettings, TopicSettings,
    Transport,
};
use nimbus_wire::SessionState;

async fn set_state(broker: &Broker, path: &SubscriptionPath, session: &str, state: Vec<u8>) {
    let lock = broker
        .accept_session(
            path,
            SessionSelector::Named(session.into()),
            Duration::from_secs(30),
        )
        .await
        .unwrap();
    lock.set_state(Some(state)).await.unwrap();
    lock.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocked_and_parked_sessions_of_every_endpoint_are_in_use() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::open(BrokerOptions::new(dir.path().join("broker")))
        .await
        .unwrap();
    for endpoint in ["billing", "shipping"] {
        broker
            .create_topic(endpoint, TopicSettings::default())
            .await
            .unwrap();
        broker
            .create_subscription(
                &SubscriptionPath::new(endpoint, endpoint),
                SubscriptionSettings::sessions(),
            )
            .await
            .unwrap();
    }
    // A producer topic (no session subscription of its own) is no endpoint.
    broker
        .create_topic("publisher", TopicSettings::default())
        .await
        .unwrap();

    let billing = SubscriptionPath::new("billing", "billing");
    let shipping = SubscriptionPath::new("shipping", "shipping");
    let mut blocked = SessionState::default();
    blocked.block("e-1");
    set_state(&broker, &billing, "s-blocked", blocked.to_bytes()).await;
    let mut parked = SessionState::default();
    parked.park();
    set_state(&broker, &shipping, "s-draining", parked.to_bytes()).await;
    let mut drained = SessionState::default();
    drained.park();
    drained.unpark();
    set_state(&broker, &billing, "s-idle", drained.to_bytes()).await;
    set_state(
        &broker,
        &billing,
        "s-garbled",
        b"not session state".to_vec(),
    )
    .await;

    let in_use = sessions_in_use(&broker).await.unwrap();
    let expected: BTreeSet<(String, String)> = [
        ("billing", "s-blocked"),
        ("billing", "s-garbled"),
        ("shipping", "s-draining"),
    ]
    .into_iter()
    .map(|(e, s)| (e.to_owned(), s.to_owned()))
    .collect();
    assert_eq!(in_use, expected);
}
