//! A broker whose log cannot be written (a full disk, an I/O error) says so,
//! refuses changes with an error naming the cause, holds the commit it has,
//! and goes on by itself once writes work again (decision 0130).

use std::future::Future;
use std::path::Path;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Waker};
use std::time::{Duration, Instant};

use nimbus_broker::{Broker, BrokerOptions, Durability, Finding};
use nimbus_transport::{
    Admin, Message, Receiver, SubQueue, SubscriptionPath, SubscriptionSettings, TopicSettings,
    Transport,
};

async fn open(dir: &Path, segment_bytes: u64) -> Broker {
    Broker::open(
        BrokerOptions::new(dir)
            .durability(Durability::Fsync)
            .log_segment_bytes(segment_bytes),
    )
    .await
    .expect("open")
}

async fn with_sub(broker: &Broker) {
    broker
        .create_topic("t", TopicSettings::default())
        .await
        .expect("topic");
    broker
        .create_subscription(
            &SubscriptionPath::new("t", "s"),
            SubscriptionSettings::default(),
        )
        .await
        .expect("subscription");
}

async fn publish(broker: &Broker, body: &str) -> Result<(), String> {
    broker
        .publish("t", vec![Message::new(body.as_bytes().to_vec())])
        .await
        .map(drop)
        .map_err(|e| e.to_string())
}

/// Waits until the broker reports a write failure, and returns it.
async fn unhealthy(broker: &Broker) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(reason) = broker.write_failure() {
            return reason;
        }
        assert!(
            Instant::now() < deadline,
            "the broker never said it cannot write"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

async fn bodies(dir: &Path) -> Vec<String> {
    let broker = open(dir, 64 << 20).await;
    let receiver = broker
        .receiver(&SubscriptionPath::new("t", "s"), SubQueue::Main)
        .await
        .expect("receiver");
    let mut seen = Vec::new();
    while let Some(m) = receiver
        .receive(Duration::from_millis(100))
        .await
        .expect("receive")
    {
        seen.push(String::from_utf8_lossy(&m.message.body).into_owned());
        receiver.complete(m).await.expect("complete");
    }
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_makes_the_broker_unhealthy_and_it_recovers_once_writes_work() {
    let dir = tempfile::tempdir().expect("dir");
    let broker = Arc::new(open(dir.path(), 64 << 20).await);
    with_sub(&broker).await;
    publish(&broker, "before").await.expect("publish");
    assert_eq!(broker.write_failure(), None);

    broker.inject_write_failures(true);
    let held = tokio::spawn({
        let broker = Arc::clone(&broker);
        async move { publish(&broker, "held").await }
    });
    let reason = unhealthy(&broker).await;
    assert!(reason.contains("No space left on device"), "{reason}");
    let refused = publish(&broker, "refused")
        .await
        .expect_err("changes are refused while the log cannot be written");
    assert!(refused.contains("cannot write its log"), "{refused}");
    assert!(refused.contains("No space left on device"), "{refused}");
    assert!(
        !held.is_finished(),
        "a commit that is not on disk is not acknowledged"
    );

    broker.inject_write_failures(false);
    held.await
        .expect("task")
        .expect("the held commit is written once it can be");
    assert_eq!(broker.write_failure(), None, "healthy again");
    publish(&broker, "after")
        .await
        .expect("publish after recovery");
    drop(Arc::into_inner(broker).expect("the only handle"));

    // The half frame the failed write left was cut before the retry.
    let verification = nimbus_broker::verify(dir.path());
    assert!(verification.is_ok(), "{:?}", verification.outcome);
    assert!(
        verification
            .files
            .iter()
            .all(|f| matches!(f.finding, Finding::Whole { .. })),
        "{:?}",
        verification.files
    );
    assert_eq!(bodies(dir.path()).await, ["before", "held", "after"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_segment_that_cannot_be_created_is_retried_until_it_can() {
    let dir = tempfile::tempdir().expect("dir");
    // Every commit starts a new segment.
    let broker = Arc::new(open(dir.path(), 1).await);
    with_sub(&broker).await;
    publish(&broker, "before").await.expect("publish");
    let log_dir = dir.path().join("broker-log");
    let newest = std::fs::read_dir(&log_dir)
        .expect("log dir")
        .filter_map(|e| {
            let path = e.expect("entry").path();
            (path.extension()? == "log")
                .then(|| path.file_stem()?.to_str()?.parse::<u64>().ok())
                .flatten()
        })
        .max()
        .expect("a segment");
    // A directory in the way of the next segment: a real failure of the
    // file system, not an injected one.
    let next = log_dir.join(format!("{:020}.log", newest + 1));
    std::fs::create_dir(&next).expect("in the way");

    let held = tokio::spawn({
        let broker = Arc::clone(&broker);
        async move { publish(&broker, "held").await }
    });
    let reason = unhealthy(&broker).await;
    assert!(reason.contains("cannot write its log"), "{reason}");
    assert!(publish(&broker, "refused").await.is_err());

    std::fs::remove_dir(&next).expect("out of the way");
    held.await
        .expect("task")
        .expect("written once the segment can be created");
    assert_eq!(broker.write_failure(), None);
    publish(&broker, "after").await.expect("publish");
    drop(Arc::into_inner(broker).expect("the only handle"));
    assert_eq!(bodies(dir.path()).await, ["before", "held", "after"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutting_down_while_the_log_cannot_be_written_gives_up_the_held_commit() {
    let dir = tempfile::tempdir().expect("dir");
    let broker = open(dir.path(), 64 << 20).await;
    with_sub(&broker).await;
    publish(&broker, "before").await.expect("publish");
    broker.inject_write_failures(true);
    {
        // Submitted at its first poll; never acknowledged.
        let mut pending = pin!(publish(&broker, "never acknowledged"));
        let first = pending
            .as_mut()
            .poll(&mut Context::from_waker(Waker::noop()));
        assert!(first.is_pending());
        unhealthy(&broker).await;
    }
    // Shutdown stops the retries instead of waiting for a disk that may
    // never free up.
    drop(broker);
    assert_eq!(bodies(dir.path()).await, ["before"]);
}
