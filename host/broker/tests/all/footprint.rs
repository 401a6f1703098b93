//! What the broker holds in memory is let go: a session's partition once it
//! has no messages, owner or state; lock tokens once settled; deadlines once
//! due; duplicate-detection ids after their window. Each is driven past
//! what a long run would leave behind and shown released (issue 41).

use std::sync::Arc;
use std::time::Duration;

use nimbus_broker::{Broker, BrokerOptions, Durability, Footprint, ManualClock};
use nimbus_transport::{
    Admin, Message, SessionLock, SessionSelector, Settlement, SubscriptionPath,
    SubscriptionSettings, TopicSettings, Transport,
};

const SESSIONS: usize = 200;
const WAIT: Duration = Duration::from_secs(10);

async fn broker(dir: &std::path::Path, clock: &ManualClock) -> Broker {
    Broker::open(
        BrokerOptions::new(dir)
            .durability(Durability::Os)
            .clock(Arc::new(clock.clone())),
    )
    .await
    .expect("open")
}

async fn session_sub(broker: &Broker, topic: TopicSettings) -> SubscriptionPath {
    broker.create_topic("t", topic).await.expect("topic");
    let path = SubscriptionPath::new("t", "s");
    broker
        .create_subscription(&path, SubscriptionSettings::sessions())
        .await
        .expect("sub");
    path
}

fn in_session(session: usize, n: usize) -> Message {
    let mut message = Message::new(format!("{session}-{n}").into_bytes());
    message.session_id = Some(format!("s{session}"));
    message.message_id = Some(format!("m-{session}-{n}"));
    message
}

/// Receives and completes every message of `SESSIONS` sessions, setting
/// each session's state to `state`.
async fn drain_sessions(broker: &Broker, path: &SubscriptionPath, state: Option<Vec<u8>>) {
    for session in 0..SESSIONS {
        let lock = broker
            .accept_session(
                path,
                SessionSelector::Named(format!("s{session}")),
                Duration::ZERO,
            )
            .await
            .expect("accept");
        let mut settlement = Settlement::new().set_session_state(state.clone());
        while let Some(message) = lock.receive(Duration::ZERO).await.expect("receive") {
            lock.settle(Settlement::complete(&message))
                .await
                .expect("complete");
            settlement = Settlement::new().set_session_state(state.clone());
        }
        lock.settle(settlement).await.expect("state");
        lock.close().await;
    }
}

/// Polls the footprint until `done` holds, for the broker's timer task.
async fn until(broker: &Broker, done: impl Fn(&Footprint) -> bool) -> Footprint {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let footprint = broker.footprint();
        if done(&footprint) || tokio::time::Instant::now() > deadline {
            return footprint;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_that_go_idle_leave_nothing_behind_once_their_locks_are_due() {
    let dir = tempfile::tempdir().expect("dir");
    let clock = ManualClock::at_fixed_start();
    let broker = broker(dir.path(), &clock).await;
    let path = session_sub(&broker, TopicSettings::default()).await;
    for session in 0..SESSIONS {
        let batch = (0..3).map(|n| in_session(session, n)).collect();
        broker.publish("t", batch).await.expect("publish");
    }
    let loaded = broker.footprint();
    assert_eq!(loaded.messages, SESSIONS * 3);
    assert_eq!(loaded.partitions, SESSIONS);

    drain_sessions(&broker, &path, None).await;
    let drained = broker.footprint();
    assert_eq!(drained.messages, 0, "{drained:?}");
    assert_eq!(drained.partitions, 0, "{drained:?}");
    assert_eq!(drained.sessions_held, 0, "{drained:?}");
    assert_eq!(drained.lock_tokens, 0, "{drained:?}");
    assert!(
        drained.deadlines >= SESSIONS,
        "each lock taken left a deadline until due: {drained:?}"
    );

    // Past every lock's duration the stale deadlines fall due and go.
    clock.advance(SubscriptionSettings::default().lock_duration * 2);
    let due = until(&broker, |f| f.deadlines == 0).await;
    assert_eq!(due.deadlines, 0, "{due:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_state_keeps_its_session_until_it_is_cleared() {
    let dir = tempfile::tempdir().expect("dir");
    let clock = ManualClock::at_fixed_start();
    let broker = broker(dir.path(), &clock).await;
    let path = session_sub(&broker, TopicSettings::default()).await;
    for session in 0..SESSIONS {
        broker
            .publish("t", vec![in_session(session, 0)])
            .await
            .expect("publish");
    }
    drain_sessions(&broker, &path, Some(b"blocked".to_vec())).await;
    let kept = broker.footprint();
    assert_eq!(kept.sessions_with_state, SESSIONS, "{kept:?}");
    assert_eq!(kept.partitions, SESSIONS, "{kept:?}");

    drain_sessions(&broker, &path, None).await;
    let cleared = broker.footprint();
    assert_eq!(cleared.sessions_with_state, 0, "{cleared:?}");
    assert_eq!(cleared.partitions, 0, "{cleared:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicate_detection_ids_are_let_go_after_their_window() {
    let dir = tempfile::tempdir().expect("dir");
    let clock = ManualClock::at_fixed_start();
    let broker = broker(dir.path(), &clock).await;
    let window = Duration::from_secs(60);
    session_sub(
        &broker,
        TopicSettings::default().with_duplicate_detection(window),
    )
    .await;
    for session in 0..SESSIONS {
        broker
            .publish("t", vec![in_session(session, 0)])
            .await
            .expect("publish");
    }
    assert_eq!(broker.footprint().duplicate_ids, SESSIONS);

    clock.advance(window * 2);
    broker
        .publish("t", vec![in_session(SESSIONS, 0)])
        .await
        .expect("publish after the window");
    let after = broker.footprint();
    assert_eq!(after.duplicate_ids, 1, "{after:?}");
}
