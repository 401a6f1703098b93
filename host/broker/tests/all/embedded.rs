//! Behaviours specific to the embedded broker (beyond the shared
//! conformance suite): restart of timers, durability levels, refusing data
//! it cannot read, entity deletion under live handles, zero waits.

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use nimbus_broker::{Broker, BrokerOptions, Clock, Durability, ManualClock, OpenError};
use nimbus_transport::{
    AcceptSessionError, Admin, ErrorKind, Message, Receiver, SessionLock, SessionSelector,
    SubQueue, SubscriptionPath, SubscriptionSettings, TopicSettings, Transport,
};

const fn assert_send_sync<T: Send + Sync>() {}
const _: () = {
    assert_send_sync::<Broker>();
    assert_send_sync::<nimbus_broker::BrokerSession>();
    assert_send_sync::<nimbus_broker::BrokerReceiver>();
};

const ARRIVES: Duration = Duration::from_secs(10);
const ABSENT: Duration = Duration::from_millis(100);

async fn open(dir: &std::path::Path, clock: &ManualClock, durability: Durability) -> Broker {
    Broker::open(
        BrokerOptions::new(dir)
            .durability(durability)
            .clock(Arc::new(clock.clone())),
    )
    .await
    .expect("open")
}

async fn with_sub(broker: &Broker, settings: SubscriptionSettings) -> SubscriptionPath {
    broker
        .create_topic("t", TopicSettings::default())
        .await
        .expect("topic");
    let path = SubscriptionPath::new("t", "s");
    broker
        .create_subscription(&path, settings)
        .await
        .expect("sub");
    path
}

fn body(m: &nimbus_transport::ReceivedMessage) -> &[u8] {
    &m.message.body
}

/// Polls `future` once, with a waker that does nothing.
fn first_poll<F: Future>(future: F) -> Poll<F::Output> {
    let mut future = pin!(future);
    future
        .as_mut()
        .poll(&mut Context::from_waker(Waker::noop()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scheduled_message_still_arrives_after_a_restart() {
    let dir = tempfile::tempdir().expect("dir");
    let clock = ManualClock::at_fixed_start();
    let broker = open(dir.path(), &clock, Durability::Fsync).await;
    let path = with_sub(&broker, SubscriptionSettings::default()).await;
    let mut m = Message::new(b"later".to_vec());
    m.scheduled_enqueue_time = Some(clock.now() + Duration::from_secs(60));
    broker.publish("t", vec![m]).await.expect("schedule");
    drop(broker);

    let broker = open(dir.path(), &clock, Durability::Fsync).await;
    let topic = broker.get_topic("t").await.expect("get").expect("topic");
    assert_eq!(topic.scheduled_message_count, 1);
    clock.advance(Duration::from_secs(61));
    let r = broker
        .receiver(&path, SubQueue::Main)
        .await
        .expect("receiver");
    let got = r.receive(ARRIVES).await.expect("receive").expect("arrived");
    assert_eq!(body(&got), b"later");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sequence_numbers_keep_increasing_across_restarts_even_when_queues_empty() {
    let dir = tempfile::tempdir().expect("dir");
    let clock = ManualClock::at_fixed_start();
    let broker = open(dir.path(), &clock, Durability::Os).await;
    let path = with_sub(&broker, SubscriptionSettings::default()).await;
    let first = broker
        .publish("t", vec![Message::new(b"a".to_vec())])
        .await
        .expect("publish")[0];
    {
        let r = broker
            .receiver(&path, SubQueue::Main)
            .await
            .expect("receiver");
        let m = r.receive(ARRIVES).await.expect("receive").expect("a");
        r.complete(m).await.expect("complete");
    }
    drop(broker);
    let broker = open(dir.path(), &clock, Durability::Os).await;
    let second = broker
        .publish("t", vec![Message::new(b"b".to_vec())])
        .await
        .expect("publish")[0];
    assert!(second > first, "{second} after {first}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delivery_counts_survive_a_restart_but_locks_do_not() {
    let dir = tempfile::tempdir().expect("dir");
    let clock = ManualClock::at_fixed_start();
    let broker = open(dir.path(), &clock, Durability::Fsync).await;
    let path = with_sub(&broker, SubscriptionSettings::sessions()).await;
    let mut m = Message::new(b"x".to_vec());
    m.session_id = Some("k".into());
    broker.publish("t", vec![m]).await.expect("publish");
    let lock = broker
        .accept_session(&path, SessionSelector::NextAvailable, ARRIVES)
        .await
        .expect("accept");
    let m = lock.receive(ARRIVES).await.expect("receive").expect("x");
    lock.abandon(m, Default::default()).await.expect("abandon");
    let m = lock.receive(ARRIVES).await.expect("receive").expect("x");
    assert_eq!(m.delivery_count, 2);
    // Held (locked) at the restart: the lock is gone, the count is kept.
    let _unsettled = m;
    drop(lock);
    drop(broker);
    let broker = open(dir.path(), &clock, Durability::Fsync).await;
    let lock = broker
        .accept_session(&path, SessionSelector::NextAvailable, ARRIVES)
        .await
        .expect("accept after restart");
    let m = lock.receive(ARRIVES).await.expect("receive").expect("x");
    assert_eq!(
        m.delivery_count, 2,
        "one abandon counted, the restart did not count"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_from_another_format_version_is_refused_by_name() {
    let dir = tempfile::tempdir().expect("dir");
    let clock = ManualClock::at_fixed_start();
    drop(open(dir.path(), &clock, Durability::Fsync).await);
    let segment = log_files(dir.path())
        .into_iter()
        .find(|p| p.extension().is_some_and(|e| e == "log"))
        .expect("a segment");
    let mut bytes = std::fs::read(&segment).expect("read");
    bytes[8..12].copy_from_slice(&99u32.to_le_bytes());
    std::fs::write(&segment, bytes).expect("write");
    let error = Broker::open(BrokerOptions::new(dir.path()))
        .await
        .expect_err("refused");
    assert!(matches!(error, OpenError::Corrupt { .. }), "{error}");
    assert!(
        error.to_string().contains("log format version 99"),
        "{error}"
    );
    assert!(
        error.to_string().contains(&segment.display().to_string()),
        "{error}"
    );
}

/// The files of the broker's log, sorted.
fn log_files(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut files: Vec<_> = std::fs::read_dir(dir.join("broker-log"))
        .expect("log dir")
        .map(|e| e.expect("entry").path())
        .collect();
    files.sort();
    files
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_subscription_loses_the_locks_on_it() {
    let dir = tempfile::tempdir().expect("dir");
    let clock = ManualClock::at_fixed_start();
    let broker = open(dir.path(), &clock, Durability::Fsync).await;
    let path = with_sub(&broker, SubscriptionSettings::sessions()).await;
    let mut m = Message::new(b"x".to_vec());
    m.session_id = Some("k".into());
    broker.publish("t", vec![m]).await.expect("publish");
    let lock = broker
        .accept_session(&path, SessionSelector::NextAvailable, ARRIVES)
        .await
        .expect("accept");
    let m = lock.receive(ARRIVES).await.expect("receive").expect("x");
    broker.delete_subscription(&path).await.expect("delete");
    broker
        .create_subscription(&path, SubscriptionSettings::sessions())
        .await
        .expect("re-create");
    let error = lock.complete(m).await.expect_err("old incarnation");
    assert_eq!(error.kind(), ErrorKind::SessionLockLost);
    assert_eq!(
        lock.receive(ABSENT).await.expect_err("lost").kind(),
        ErrorKind::SessionLockLost
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_name_or_setting_is_refused_with_what_is_wrong() {
    let dir = tempfile::tempdir().expect("dir");
    let clock = ManualClock::at_fixed_start();
    let broker = open(dir.path(), &clock, Durability::Fsync).await;
    let error = broker
        .create_topic("a/b", TopicSettings::default())
        .await
        .expect_err("slash");
    assert!(error.to_string().contains("a/b"), "{error}");
    broker
        .create_topic("t", TopicSettings::default())
        .await
        .expect("topic");
    let error = broker
        .create_subscription(
            &SubscriptionPath::new("t", "s"),
            SubscriptionSettings::default().with_max_delivery_count(0),
        )
        .await
        .expect_err("zero");
    assert_eq!(error.kind(), ErrorKind::Invalid);
    assert!(error.to_string().contains("max_delivery_count"), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_that_expires_while_locked_is_dead_lettered_once_released() {
    let dir = tempfile::tempdir().expect("dir");
    let clock = ManualClock::at_fixed_start();
    let broker = open(dir.path(), &clock, Durability::Fsync).await;
    let path = with_sub(
        &broker,
        SubscriptionSettings::sessions().with_dead_letter_on_expiry(true),
    )
    .await;
    let mut m = Message::new(b"x".to_vec());
    m.session_id = Some("k".into());
    m.time_to_live = Some(Duration::from_secs(10));
    broker.publish("t", vec![m]).await.expect("publish");
    let lock = broker
        .accept_session(&path, SessionSelector::NextAvailable, ARRIVES)
        .await
        .expect("accept");
    let held = lock.receive(ARRIVES).await.expect("receive").expect("x");
    clock.advance(Duration::from_secs(11));
    let dlq = broker
        .receiver(&path, SubQueue::DeadLetter)
        .await
        .expect("dlq");
    assert!(
        dlq.receive(ABSENT).await.expect("receive").is_none(),
        "still locked, so not expired yet"
    );
    drop(held);
    lock.close().await;
    clock.advance(Duration::from_secs(20));
    let dead = dlq
        .receive(ARRIVES)
        .await
        .expect("receive")
        .expect("expired");
    assert_eq!(body(&dead), b"x");
    assert_eq!(
        dead.dead_letter_reason.as_deref(),
        Some(nimbus_broker::REASON_EXPIRED)
    );
}

// A commit that cannot be written is held and retried, not a poison:
// tests/write_failures.rs (decision 0130).

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_log_is_compacted_while_the_broker_runs_and_keeps_exactly_what_is_live() {
    let dir = tempfile::tempdir().expect("dir");
    let clock = ManualClock::at_fixed_start();
    let options = || {
        BrokerOptions::new(dir.path())
            .clock(Arc::new(clock.clone()))
            .log_segment_bytes(64 * 1024)
    };
    let broker = Broker::open(options()).await.expect("open");
    let path = with_sub(&broker, SubscriptionSettings::default()).await;
    let receiver = broker
        .receiver(&path, SubQueue::Main)
        .await
        .expect("receiver");
    // 4 MiB through the log, of which the last message stays live.
    for n in 0..1000u32 {
        let mut body = vec![0u8; 4096];
        body[..4].copy_from_slice(&n.to_le_bytes());
        broker
            .publish("t", vec![Message::new(body)])
            .await
            .expect("publish");
        if n < 999 {
            let m = receiver
                .receive(ARRIVES)
                .await
                .expect("receive")
                .expect("m");
            receiver.complete(m).await.expect("complete");
        }
    }
    let deadline = std::time::Instant::now() + ARRIVES;
    loop {
        let files = log_files(dir.path());
        let bytes: u64 = files
            .iter()
            .map(|f| std::fs::metadata(f).map(|m| m.len()).unwrap_or(0))
            .sum();
        if bytes < 512 * 1024 {
            assert!(
                files
                    .iter()
                    .any(|f| f.extension().is_some_and(|e| e == "snapshot")),
                "{files:?}"
            );
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the log still holds {bytes} bytes in {files:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop(receiver);
    drop(broker);

    let broker = Broker::open(options()).await.expect("reopen");
    let receiver = broker
        .receiver(&path, SubQueue::Main)
        .await
        .expect("receiver");
    let m = receiver
        .receive(ARRIVES)
        .await
        .expect("receive")
        .expect("the live one");
    assert_eq!(&m.message.body[..4], &999u32.to_le_bytes());
    receiver.complete(m).await.expect("complete");
    assert!(receiver.receive(ABSENT).await.expect("receive").is_none());
    assert!(
        broker.get_topic("t").await.expect("get").is_some(),
        "the topic is in the snapshot"
    );
}

// A zero wait means "only what is already there": a receive or accept with
// `Duration::ZERO` and nothing to hand out answers on its first poll,
// without going through tokio's timer (which would hold it until the
// timer's next millisecond tick; decision 0104).

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_receive_with_zero_wait_answers_none_on_its_first_poll() {
    let dir = tempfile::tempdir().expect("dir");
    let broker = open(dir.path(), &ManualClock::at_fixed_start(), Durability::Os).await;
    let path = with_sub(&broker, SubscriptionSettings::sessions()).await;
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
    let dir = tempfile::tempdir().expect("dir");
    let broker = open(dir.path(), &ManualClock::at_fixed_start(), Durability::Os).await;
    let path = with_sub(&broker, SubscriptionSettings::default()).await;
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
    let dir = tempfile::tempdir().expect("dir");
    let broker = open(dir.path(), &ManualClock::at_fixed_start(), Durability::Os).await;
    let path = with_sub(&broker, SubscriptionSettings::sessions()).await;
    match first_poll(broker.accept_session(&path, SessionSelector::NextAvailable, Duration::ZERO)) {
        Poll::Ready(Err(AcceptSessionError::NoSessionAvailable { .. })) => {}
        other => panic!(
            "no session available at once, got {:?}",
            other.map(|r| r.map(|s| s.session_id().to_owned()))
        ),
    }
}

// A message is handed out only once the transaction that put it in its
// queue has committed (decision 0107). Before, a receiver could take a
// message whose publish a crash then took back: the host crash test found a
// Resolver that had recorded an event the broker no longer had. These tests
// hold the log's writer (`Broker::hold_commits`), so the broker's commits
// wait while they look.

fn in_session(body: &[u8], session: &str) -> Message {
    let mut m = Message::new(body.to_vec());
    m.session_id = Some(session.into());
    m
}

/// Publishes `message` on a task of its own: with the write lock held, the
/// publish is applied and queued, and then waits for its commit.
fn publish_in_background(
    broker: &Broker,
    message: Message,
) -> tokio::task::JoinHandle<Result<Vec<i64>, nimbus_transport::PublishError>> {
    let broker = broker.clone();
    tokio::spawn(async move { broker.publish("t", vec![message]).await })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_published_message_is_handed_out_only_once_its_publish_has_committed() {
    let dir = tempfile::tempdir().expect("dir");
    let clock = ManualClock::at_fixed_start();
    let broker = open(dir.path(), &clock, Durability::Os).await;
    let queue = with_sub(&broker, SubscriptionSettings::default()).await;
    let sessions = SubscriptionPath::new("t", "sessions");
    broker
        .create_subscription(&sessions, SubscriptionSettings::sessions())
        .await
        .expect("session sub");
    let receiver = broker
        .receiver(&queue, SubQueue::Main)
        .await
        .expect("receiver");
    let named = broker
        .accept_session(&sessions, SessionSelector::Named("k".into()), ARRIVES)
        .await
        .expect("named session");

    let held = broker.hold_commits();
    let publishing = publish_in_background(&broker, in_session(b"m", "k"));
    // Give the publish time to be applied in memory and queued.
    tokio::time::sleep(ABSENT).await;
    assert!(
        !publishing.is_finished(),
        "the publish waits for its commit"
    );
    assert!(
        receiver.receive(ABSENT).await.expect("receive").is_none(),
        "a queue receiver got a message whose publish is not committed"
    );
    assert!(
        named.receive(ABSENT).await.expect("receive").is_none(),
        "a session receiver got a message whose publish is not committed"
    );
    let next = broker
        .accept_session(&sessions, SessionSelector::NextAvailable, ABSENT)
        .await;
    assert!(
        matches!(next, Err(AcceptSessionError::NoSessionAvailable { .. })),
        "a session was offered for a message whose publish is not committed"
    );

    // Receivers already waiting get it when the commit happens.
    let waiting = tokio::spawn(async move { receiver.receive(ARRIVES).await });
    tokio::time::sleep(ABSENT).await;
    drop(held);
    publishing.await.expect("join").expect("publish");
    let got = waiting.await.expect("join").expect("receive");
    assert_eq!(got.as_ref().map(body), Some(&b"m"[..]));
    let got = named.receive(ARRIVES).await.expect("receive");
    assert_eq!(got.as_ref().map(body), Some(&b"m"[..]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_lettered_message_is_in_the_dead_letter_queue_only_once_that_is_committed() {
    let dir = tempfile::tempdir().expect("dir");
    let clock = ManualClock::at_fixed_start();
    let broker = open(dir.path(), &clock, Durability::Os).await;
    let queue = with_sub(&broker, SubscriptionSettings::default()).await;
    broker
        .publish("t", vec![Message::new(b"poison".to_vec())])
        .await
        .expect("publish");
    let receiver = broker
        .receiver(&queue, SubQueue::Main)
        .await
        .expect("receiver");
    let dead = broker
        .receiver(&queue, SubQueue::DeadLetter)
        .await
        .expect("dead-letter receiver");
    let message = receiver
        .receive(ARRIVES)
        .await
        .expect("receive")
        .expect("arrived");

    let held = broker.hold_commits();
    let settling = tokio::spawn(async move {
        receiver
            .dead_letter(message, "Poison".into(), "cannot be read".into())
            .await
    });
    tokio::time::sleep(ABSENT).await;
    assert!(
        dead.receive(ABSENT).await.expect("receive").is_none(),
        "the dead-letter queue handed out a move that is not committed"
    );
    drop(held);
    settling.await.expect("join").expect("dead-letter");
    let got = dead.receive(ARRIVES).await.expect("receive").expect("dead");
    assert_eq!(got.dead_letter_reason.as_deref(), Some("Poison"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duplicate_is_acknowledged_only_once_its_original_is_committed() {
    let dir = tempfile::tempdir().expect("dir");
    let clock = ManualClock::at_fixed_start();
    let broker = open(dir.path(), &clock, Durability::Os).await;
    broker
        .create_topic(
            "t",
            TopicSettings::default().with_duplicate_detection(Duration::from_secs(600)),
        )
        .await
        .expect("topic");
    let path = SubscriptionPath::new("t", "s");
    broker
        .create_subscription(&path, SubscriptionSettings::default())
        .await
        .expect("sub");
    let with_id = || {
        let mut m = Message::new(b"once".to_vec());
        m.message_id = Some("m-1".into());
        m
    };

    let held = broker.hold_commits();
    let original = publish_in_background(&broker, with_id());
    tokio::time::sleep(ABSENT).await;
    assert!(!original.is_finished(), "the original waits for its commit");
    // Acknowledging the duplicate now would promise a message a crash can
    // still take back.
    let duplicate = tokio::time::timeout(ABSENT, broker.publish("t", vec![with_id()])).await;
    assert!(
        duplicate.is_err(),
        "the duplicate was acknowledged before its original was committed: {duplicate:?}"
    );
    drop(held);
    let first = original.await.expect("join").expect("publish");
    let again = broker
        .publish("t", vec![with_id()])
        .await
        .expect("duplicate");
    assert_eq!(
        again, first,
        "the duplicate answers the original's sequence number"
    );
    let receiver = broker
        .receiver(&path, SubQueue::Main)
        .await
        .expect("receiver");
    let got = receiver.receive(ARRIVES).await.expect("receive");
    assert_eq!(got.as_ref().map(body), Some(&b"once"[..]));
    assert!(receiver.receive(ABSENT).await.expect("receive").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_released_before_its_message_commits_is_offered_once_it_commits() {
    let dir = tempfile::tempdir().expect("dir");
    let clock = ManualClock::at_fixed_start();
    let broker = open(dir.path(), &clock, Durability::Os).await;
    let path = with_sub(&broker, SubscriptionSettings::sessions()).await;
    // The session is held while its message arrives, and let go before
    // that message's commit: the message became the session's first while
    // nobody could accept it.
    let held_session = broker
        .accept_session(&path, SessionSelector::Named("k".into()), ARRIVES)
        .await
        .expect("named session");
    let held = broker.hold_commits();
    let publishing = publish_in_background(&broker, in_session(b"m", "k"));
    tokio::time::sleep(ABSENT).await;
    held_session.close().await;
    let accepting = tokio::spawn({
        let broker = broker.clone();
        let path = path.clone();
        async move {
            broker
                .accept_session(&path, SessionSelector::NextAvailable, ARRIVES)
                .await
        }
    });
    tokio::time::sleep(ABSENT).await;
    assert!(!accepting.is_finished(), "offered before the commit");
    drop(held);
    publishing.await.expect("join").expect("publish");
    let session = accepting
        .await
        .expect("join")
        .expect("the waiting accept is woken by the commit");
    assert_eq!(session.session_id(), "k");
    let got = session.receive(ARRIVES).await.expect("receive");
    assert_eq!(got.as_ref().map(body), Some(&b"m"[..]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_listing_counts_a_message_only_once_its_publish_has_committed() {
    let dir = tempfile::tempdir().expect("dir");
    let clock = ManualClock::at_fixed_start();
    let broker = open(dir.path(), &clock, Durability::Os).await;
    let path = with_sub(&broker, SubscriptionSettings::sessions()).await;
    broker
        .publish("t", vec![in_session(b"first", "k")])
        .await
        .expect("publish");

    let held = broker.hold_commits();
    let to_k = publish_in_background(&broker, in_session(b"second", "k"));
    let to_new = publish_in_background(&broker, in_session(b"only", "new"));
    tokio::time::sleep(ABSENT).await;
    assert!(!to_k.is_finished(), "the publish waits for its commit");
    let listed = broker.list_sessions(&path).await.expect("list");
    let counts: Vec<(&str, u64)> = listed
        .iter()
        .map(|s| (s.session_id.as_str(), s.active_messages))
        .collect();
    assert_eq!(
        counts,
        [("k", 1)],
        "messages a crash can still take back are counted"
    );

    drop(held);
    to_k.await.expect("join").expect("publish");
    to_new.await.expect("join").expect("publish");
    let listed = broker.list_sessions(&path).await.expect("list");
    let counts: Vec<(&str, u64)> = listed
        .iter()
        .map(|s| (s.session_id.as_str(), s.active_messages))
        .collect();
    assert_eq!(counts, [("k", 2), ("new", 1)]);
}
