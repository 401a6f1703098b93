//! A connection the namespace drops (an upgrade, a network fault) is opened
//! again: what was on it is lost (a session lock held there cannot settle;
//! its message comes back), and what comes next works on the new one,
//! without restarting the host.

#![allow(clippy::unwrap_used, reason = "tests")]

use std::time::Duration;

use nimbus_servicebus::ServiceBus;
use nimbus_transport::{Admin, ErrorKind, Message, SessionLock, SessionSelector, Transport};

use crate::common;

use common::Served;

fn message(session: &str, body: &str) -> Message {
    let mut message = Message::new(body.as_bytes().to_vec());
    message.session_id = Some(session.to_owned());
    message
}

/// Retries `publish` as the engine retries a transient failure; the first
/// call after the drop may be the one that finds the connection gone.
async fn publish_eventually(client: &ServiceBus, message: Message) {
    for _ in 0..50 {
        match client.publish("orders", vec![message.clone()]).await {
            Ok(_) => return,
            Err(error) => assert_eq!(error.kind(), ErrorKind::Transient, "{error}"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("never published after the connection dropped");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_connection_is_opened_again_and_what_was_held_on_it_comes_back() {
    let mut served = Served::start().await;
    let path = served.orders_with_billing().await;
    let client = ServiceBus::connect(&served.connection_string())
        .await
        .unwrap();
    client
        .publish("orders", vec![message("s", "first")])
        .await
        .unwrap();
    let held = client
        .accept_session(
            &path,
            SessionSelector::Named("s".into()),
            Duration::from_secs(5),
        )
        .await
        .unwrap();
    let first = held.receive(Duration::from_secs(5)).await.unwrap().unwrap();

    served.restart_endpoint().await;
    // The old connection's tasks end a moment after the endpoint's: once
    // the broker has the session back, nothing of it is left.
    let mut released = false;
    for _ in 0..250 {
        let sessions = served.broker.list_sessions(&path).await.unwrap();
        released = sessions.iter().all(|s| !s.locked);
        if released {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        released,
        "the broker still holds the old connection's session"
    );

    // The lock held on the old connection cannot settle: it went with it.
    let error = held.complete(first).await.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::SessionLockLost, "{error}");

    // The client carries on over a new connection.
    publish_eventually(&client, message("s", "second")).await;
    let again = client
        .accept_session(
            &path,
            SessionSelector::Named("s".into()),
            Duration::from_secs(5),
        )
        .await
        .unwrap();
    again
        .set_state(Some(b"the new holder's".to_vec()))
        .await
        .unwrap();
    // The old lock, still in hand, writes nothing over the new holder's
    // state, nor renews it: its requests do not go on the new connection.
    let error = held.set_state(Some(b"stale".to_vec())).await.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::SessionLockLost, "{error}");
    let error = held.renew().await.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::SessionLockLost, "{error}");
    drop(held);
    assert_eq!(
        again.get_state().await.unwrap().as_deref(),
        Some(&b"the new holder's"[..])
    );
    let redelivered = again
        .receive(Duration::from_secs(5))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(redelivered.message.body, b"first");
    again.complete(redelivered).await.unwrap();
    let second = again
        .receive(Duration::from_secs(5))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(second.message.body, b"second");
    again.complete(second).await.unwrap();
}
