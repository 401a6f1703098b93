//! The deferred-message replayer (`run_replayer`) on the real embedded
//! broker, on its own: parked copies and `ProcessDeferredRequest` triggers
//! are published to the endpoint topic exactly as the engine (or NimBus
//! tooling) publishes them, and what the replayer does is read back from the
//! subscriptions — the replays on `E/E`, the dead-letter queues of
//! `E/Deferred` and `E/DeferredProcessor`, and a tap that sees every trigger
//! published to the topic. No session processor runs, so nothing consumes
//! the replays but the test (SEMANTICS.md §4; scenarios DR-05, DR-10, DR-11).

#![allow(clippy::unwrap_used, reason = "tests")]

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use nimbus_broker::{Broker, BrokerOptions, BrokerSession, Durability};
use nimbus_engine::run_replayer;
use nimbus_transport::{
    Admin, Message, PropertyValue, ReceivedMessage, Receiver, RuleDescription, SessionLock,
    SessionSelector, SubQueue, SubscriptionPath, SubscriptionSettings, TopicSettings, Transport,
};
use nimbus_wire::{MessageContent, MessageType, NimbusMessage, build};
use tokio_util::sync::CancellationToken;

use crate::support;

use support::{E, event_request};
/// A non-session subscription that receives a copy of every trigger
/// published to the topic (`To = 'DeferredProcessor'`), so a test can see
/// the triggers the replayer itself publishes.
const TAP: &str = "trigger-tap";
/// Generous deadline for anything the replayer should do.
const DEADLINE: Duration = Duration::from_secs(30);

/// How the subscriptions the replayer reads are set up.
struct Topology {
    /// `E/Deferred`.
    deferred: SubscriptionSettings,
    /// `E/DeferredProcessor`.
    triggers: SubscriptionSettings,
}

impl Default for Topology {
    fn default() -> Self {
        Topology {
            deferred: SubscriptionSettings::sessions(),
            triggers: SubscriptionSettings::default(),
        }
    }
}

fn sub(name: &str) -> SubscriptionPath {
    SubscriptionPath::new(E, name)
}

async fn subscription(broker: &Broker, name: &str, settings: SubscriptionSettings, filter: &str) {
    broker
        .create_subscription_with_rules(
            &sub(name),
            settings,
            vec![RuleDescription::new("only", filter)],
        )
        .await
        .unwrap();
}

/// The endpoint topology of `engine_on_broker.rs` (minus the Resolver
/// side), plus the trigger tap.
async fn provision(broker: &Broker, topology: Topology) {
    broker
        .create_topic(E, TopicSettings::default())
        .await
        .unwrap();
    subscription(
        broker,
        E,
        SubscriptionSettings::sessions(),
        "user.To = 'billing'",
    )
    .await;
    subscription(
        broker,
        "Deferred",
        topology.deferred,
        "user.To = 'Deferred' AND user.OriginalSessionId IS NOT NULL",
    )
    .await;
    subscription(
        broker,
        "DeferredProcessor",
        topology.triggers,
        "user.To = 'DeferredProcessor'",
    )
    .await;
    subscription(
        broker,
        TAP,
        SubscriptionSettings::default(),
        "user.To = 'DeferredProcessor'",
    )
    .await;
}

struct Harness {
    _dir: tempfile::TempDir,
    broker: Arc<Broker>,
    shutdown: CancellationToken,
}

impl Drop for Harness {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

async fn start(topology: Topology) -> Harness {
    let dir = tempfile::tempdir().unwrap();
    let broker = Arc::new(
        Broker::open(BrokerOptions::new(dir.path()).durability(Durability::Os))
            .await
            .unwrap(),
    );
    provision(&broker, topology).await;
    let shutdown = CancellationToken::new();
    tokio::spawn(run_replayer(broker.clone(), E.to_owned(), shutdown.clone()));
    Harness {
        _dir: dir,
        broker,
        shutdown,
    }
}

/// The event as it reached the endpoint (before it met a blocked session).
fn event(session: &str, event_id: &str) -> NimbusMessage {
    event_request(session, event_id, &serde_json::json!({ "Id": event_id }))
}

/// The parked copy the engine publishes for `event_id` with `sequence`.
fn parked(session: &str, event_id: &str, sequence: u32) -> Message {
    build::parked_copy(&event(session, event_id), sequence).to_transport()
}

/// A trigger as nimbus's engine builds it when a settlement unblocks
/// `session` with messages parked, with a known `MessageId`.
fn trigger(session: &str, message_id: &str) -> Message {
    let mut cause = event(session, "cause");
    cause.from = Some("Manager".to_owned());
    cause.message_type = MessageType::SkipRequest;
    NimbusMessage {
        message_id: Some(message_id.to_owned()),
        ..build::process_deferred_request(&cause)
    }
    .to_transport()
}

impl Harness {
    async fn publish(&self, messages: Vec<Message>) {
        self.broker.publish(E, messages).await.unwrap();
    }

    /// Locks `session` on the subscription `E/subscription`, as another
    /// receiver would.
    async fn lock(&self, subscription: &str, session: &str) -> BrokerSession {
        self.broker
            .accept_session(
                &sub(subscription),
                SessionSelector::Named(session.to_owned()),
                DEADLINE,
            )
            .await
            .unwrap()
    }

    /// The next `n` messages of `session` on the endpoint subscription `E/E`
    /// (where the replays land), completed, in the order received.
    async fn replays(&self, session: &str, n: usize) -> Vec<ReceivedMessage> {
        let lock = self.lock(E, session).await;
        let mut out = Vec::new();
        for i in 0..n {
            let received = lock
                .receive(DEADLINE)
                .await
                .unwrap()
                .unwrap_or_else(|| panic!("replay {} of {n} of session {session}", i + 1));
            lock.complete(received.clone()).await.unwrap();
            out.push(received);
        }
        lock.close().await;
        out
    }

    /// The next message in the dead-letter queue of `E/{name}`.
    async fn dead_lettered(&self, name: &str) -> ReceivedMessage {
        let dlq = self
            .broker
            .receiver(&sub(name), SubQueue::DeadLetter)
            .await
            .unwrap();
        let dead = dlq
            .receive(DEADLINE)
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("a dead-lettered message in {E}/{name}"));
        dlq.complete(dead.clone()).await.unwrap();
        dead
    }

    /// Messages waiting or locked in `E/{name}` (dead-lettered not counted).
    async fn active(&self, name: &str) -> u64 {
        self.broker
            .get_subscription(&sub(name))
            .await
            .unwrap()
            .unwrap()
            .active_message_count
    }

    /// Waits (polling, up to [`DEADLINE`]) until `E/{name}` holds `count`
    /// active messages; panics with what it held last otherwise.
    async fn await_active(&self, name: &str, count: u64, why: &str) {
        let deadline = tokio::time::Instant::now() + DEADLINE;
        loop {
            let now = self.active(name).await;
            if now == count {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{E}/{name} holds {now} active messages, expected {count}: {why}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

fn decode(received: &ReceivedMessage) -> NimbusMessage {
    NimbusMessage::from_received(received).unwrap()
}

fn event_ids(replays: &[ReceivedMessage]) -> Vec<String> {
    replays
        .iter()
        .map(|r| decode(r).event_id.unwrap_or_default())
        .collect()
}

/// DR-05 / SEMANTICS §4: the parked set is replayed sorted by
/// `DeferralSequence`, whatever order the parked copies arrived in; each
/// replay is the parked copy back on the endpoint (DR-07, F7).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parked_copies_are_replayed_in_deferral_sequence_order_not_arrival_order() {
    let h = start(Topology::default()).await;
    // Arrival order 3, 1, 2 (as in DR-05). Sequence 2 is written as a
    // numeric string, which upstream's deferred processor accepts too.
    let mut two = parked("s1", "e2", 2);
    two.properties
        .insert("DeferralSequence".into(), PropertyValue::from("2"));
    let arrivals = vec![parked("s1", "e3", 3), parked("s1", "e1", 1), two];
    let bodies: Vec<Vec<u8>> = arrivals.iter().map(|m| m.body.clone()).collect();
    h.publish(arrivals).await;
    h.await_active("Deferred", 3, "three parked copies").await;

    h.publish(vec![trigger("s1", "trigger-1")]).await;
    let replays = h.replays("s1", 3).await;

    assert_eq!(
        event_ids(&replays),
        ["e1", "e2", "e3"],
        "replayed in DeferralSequence order, not arrival order (3, 1, 2)"
    );
    let decoded: Vec<NimbusMessage> = replays.iter().map(decode).collect();
    assert_eq!(
        decoded
            .iter()
            .map(|m| m.deferral_sequence)
            .collect::<Vec<_>>(),
        [Some(1), Some(2), Some(3)]
    );
    for (replay, body) in decoded.iter().zip([&bodies[1], &bodies[2], &bodies[0]]) {
        let event_id = replay.event_id.clone().unwrap();
        assert_eq!(replay.to.as_deref(), Some(E), "To = endpoint (DR-07)");
        assert_eq!(replay.message_type, MessageType::EventRequest);
        assert_eq!(replay.session_id.as_deref(), Some("s1"));
        assert_eq!(replay.original_session_id, None, "DR-07");
        assert_eq!(
            replay.message_id,
            Some(format!("msg-{event_id}")),
            "the original MessageId is kept (F7)"
        );
        assert_eq!(replay.correlation_id.as_deref(), Some("corr-1"), "F25");
        assert_eq!(replay.from.as_deref(), Some("storefront"));
        assert_eq!(&replay.to_transport().body, body, "body kept (DR-07)");
    }
    // Each replay is committed with the completion of its parked copy, and
    // the trigger is completed after the pass.
    h.await_active("Deferred", 0, "every parked copy completed")
        .await;
    h.await_active("DeferredProcessor", 0, "the trigger completed")
        .await;
}

/// DR-10 / F10 as SEMANTICS keeps it (parked messages never wait
/// silently): a trigger whose parked session another receiver holds is not
/// completed as "nothing to do" (upstream) nor replayed alongside the
/// holder; the replayer completes it and publishes a copy of it, with a
/// fresh MessageId, scheduled a little later, and that copy replays the
/// session once it is free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trigger_for_a_locked_parked_session_is_rescheduled_and_replays_once_it_is_free() {
    let h = start(Topology::default()).await;
    let tap = h.broker.receiver(&sub(TAP), SubQueue::Main).await.unwrap();
    h.publish(vec![parked("s1", "e1", 0)]).await;
    h.await_active("Deferred", 1, "one parked copy").await;
    // Another replayer's hold on the parked session.
    let held = h.lock("Deferred", "s1").await;

    h.publish(vec![trigger("s1", "trigger-1")]).await;
    let original = tap.receive(DEADLINE).await.unwrap().expect("the trigger");
    tap.complete(original.clone()).await.unwrap();
    assert_eq!(original.message.message_id.as_deref(), Some("trigger-1"));

    let again = tap
        .receive(DEADLINE)
        .await
        .unwrap()
        .expect("the busy trigger is published again (re-scheduled), not dropped");
    tap.complete(again.clone()).await.unwrap();
    let (first, second) = (decode(&original), decode(&again));
    assert_eq!(second.message_type, MessageType::ProcessDeferredRequest);
    assert_eq!(second.to.as_deref(), Some("DeferredProcessor"));
    assert_eq!(second.session_id.as_deref(), Some("s1"));
    assert_eq!(second.event_id, first.event_id);
    assert_eq!(second.correlation_id, first.correlation_id);
    assert!(
        second.message_id.is_some() && second.message_id != first.message_id,
        "a fresh MessageId, so duplicate detection cannot drop it: {:?}",
        second.message_id
    );
    let at = second
        .scheduled_enqueue_time
        .expect("the copy is scheduled");
    assert!(
        at > original.enqueued_time,
        "scheduled after the original trigger"
    );
    // While the session is held nothing was replayed, and the parked copy
    // is still parked.
    assert_eq!(h.active(E).await, 0, "nothing replayed while held");
    assert_eq!(h.active("Deferred").await, 1, "still parked");
    held.close().await;

    let replays = h.replays("s1", 1).await;
    assert_eq!(event_ids(&replays), ["e1"]);
    h.await_active("Deferred", 0, "the parked copy completed")
        .await;
    h.await_active("DeferredProcessor", 0, "every trigger completed")
        .await;
}

/// A trigger that names no session (no broker SessionId, no `SessionId`
/// property, or a blank one) cannot be acted on: it is dead-lettered with
/// reason `No SessionId` (upstream's DeferredMessageDispatcher), not
/// completed or redelivered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trigger_without_a_session_id_is_dead_lettered_as_no_session_id() {
    let h = start(Topology::default()).await;
    let mut none = trigger("s1", "no-session");
    none.session_id = None;
    let mut blank = trigger("s1", "blank-session");
    blank.session_id = Some("  ".to_owned());
    h.publish(vec![none, blank]).await;

    let mut dead = Vec::new();
    for _ in 0..2 {
        let message = h.dead_lettered("DeferredProcessor").await;
        dead.push((
            message.message.message_id.clone().unwrap(),
            message.dead_letter_reason.clone(),
            message.dead_letter_description.clone(),
        ));
    }
    dead.sort();
    let description = Some("a ProcessDeferredRequest must name the session to replay".to_owned());
    assert_eq!(
        dead,
        [
            (
                "blank-session".to_owned(),
                Some("No SessionId".to_owned()),
                description.clone()
            ),
            (
                "no-session".to_owned(),
                Some("No SessionId".to_owned()),
                description
            ),
        ]
    );
    h.await_active("DeferredProcessor", 0, "nothing left to redeliver")
        .await;
}

/// A parked copy the replayer cannot decode is not dropped nor kept: it goes
/// back to the endpoint in its place in the order, as it is (`To` the
/// endpoint, no `OriginalSessionId`), where the engine dead-letters it naming
/// the defect and counts it out of the session's parked messages (the
/// end-to-end test below). The others replay around it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_undecodable_parked_copy_goes_back_to_the_endpoint_in_its_place() {
    let h = start(Topology::default()).await;
    let mut bad_type = parked("s1", "bad-type", 1);
    bad_type
        .properties
        .insert("MessageType".into(), PropertyValue::from("NoSuchType"));
    let mut bad_body = parked("s1", "bad-body", 2);
    bad_body.body = b"not json".to_vec();
    h.publish(vec![
        parked("s1", "e3", 3),
        bad_type,
        parked("s1", "e0", 0),
        bad_body,
    ])
    .await;
    h.await_active("Deferred", 4, "four parked copies").await;
    h.publish(vec![trigger("s1", "trigger-1")]).await;

    let replays = h.replays("s1", 4).await;
    let ids: Vec<&str> = replays
        .iter()
        .map(|r| r.message.message_id.as_deref().unwrap_or_default())
        .collect();
    assert_eq!(ids, ["msg-e0", "msg-bad-type", "msg-bad-body", "msg-e3"]);
    for back in &replays[1..3] {
        let properties = &back.message.properties;
        assert_eq!(
            properties.get("To").and_then(PropertyValue::as_str),
            Some(E),
            "{properties:?}"
        );
        assert!(
            !properties.contains_key("OriginalSessionId"),
            "{properties:?}"
        );
        assert!(
            properties.contains_key("DeferralSequence"),
            "{properties:?}"
        );
    }
    assert_eq!(replays[2].message.body, b"not json", "sent back as it is");
    h.await_active("Deferred", 0, "nothing left parked").await;
    h.await_active("DeferredProcessor", 0, "the trigger completed")
        .await;
    let deferred = h
        .broker
        .get_subscription(&sub("Deferred"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(deferred.dead_letter_message_count, 0, "none dropped there");
}

/// SEMANTICS §4, last bullet: a ProcessDeferredRequest as NimBus tooling
/// sends it is accepted. NimBus sets no MessageId, no `From`,
/// `CorrelationId = ParentMessageId =` the unblocking message's id, copies
/// SessionId, EventId and EventTypeId, writes `RetryCount` as an integer and
/// lineage `self` markers, an empty `MessageContent` body, and a scheduled
/// time of "now"; a trigger may also name its session only in a
/// `SessionId` application property (nimbus-semantics.md §2.1, §2.2, §6.3).
/// nimbus's own builder (`build::process_deferred_request`) is accepted
/// too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_deferred_request_built_as_nimbus_builds_it_is_accepted() {
    let h = start(Topology::default()).await;
    h.publish(vec![
        parked("s1", "a1", 0),
        parked("s2", "b1", 0),
        parked("s3", "c1", 0),
    ])
    .await;
    h.await_active("Deferred", 3, "three parked copies").await;

    let nimbus = |session: Option<&str>| {
        let mut properties = nimbus_transport::Properties::new();
        for (name, value) in [
            ("To", "DeferredProcessor"),
            ("MessageType", "ProcessDeferredRequest"),
            ("EventId", "cause-event"),
            ("OriginatingMessageId", "self"),
            ("ParentMessageId", "msg-skip-1"),
            ("OriginatingFrom", "self"),
            ("EventTypeId", "OrderPlaced"),
        ] {
            properties.insert(name.to_owned(), PropertyValue::from(value));
        }
        properties.insert("RetryCount".to_owned(), PropertyValue::Int(0));
        Message {
            message_id: None,
            session_id: session.map(str::to_owned),
            correlation_id: Some("msg-skip-1".to_owned()),
            scheduled_enqueue_time: Some(SystemTime::now()),
            properties,
            body: br#"{"EventContent":null,"ErrorContent":null}"#.to_vec(),
            ..Message::default()
        }
    };
    let mut by_property = nimbus(None);
    by_property
        .properties
        .insert("SessionId".to_owned(), PropertyValue::from("s3"));
    let built = build::process_deferred_request(&event("s2", "cause")).to_transport();
    h.publish(vec![nimbus(Some("s1")), built, by_property])
        .await;

    assert_eq!(event_ids(&h.replays("s1", 1).await), ["a1"]);
    assert_eq!(event_ids(&h.replays("s2", 1).await), ["b1"]);
    assert_eq!(
        event_ids(&h.replays("s3", 1).await),
        ["c1"],
        "the SessionId application property names the session"
    );
    h.await_active("Deferred", 0, "every parked copy completed")
        .await;
    h.await_active("DeferredProcessor", 0, "every trigger completed")
        .await;
    assert_eq!(
        h.broker
            .get_subscription(&sub("DeferredProcessor"))
            .await
            .unwrap()
            .unwrap()
            .dead_letter_message_count,
        0,
        "no trigger was refused"
    );
}

/// DR-11: when receiving the parked session fails mid-replay (here its
/// lock lapses: `E/Deferred` has a 1 ms lock), the trigger is neither
/// completed nor dead-lettered by the replayer; it is left to the broker,
/// which redelivers it until its max delivery count and then dead-letters
/// it (`MaxDeliveryCountExceeded`). Nothing is replayed, and the parked copy
/// stays parked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trigger_is_left_unsettled_when_receiving_the_parked_session_fails() {
    let h = start(Topology {
        deferred: SubscriptionSettings::sessions()
            .with_lock_duration(Duration::from_millis(1))
            .with_max_delivery_count(1_000),
        triggers: SubscriptionSettings::default()
            .with_lock_duration(Duration::from_millis(200))
            .with_max_delivery_count(3),
    })
    .await;
    h.publish(vec![parked("s1", "e1", 0)]).await;
    h.await_active("Deferred", 1, "one parked copy").await;
    h.publish(vec![trigger("s1", "trigger-1")]).await;

    let dead = h.dead_lettered("DeferredProcessor").await;
    assert_eq!(dead.message.message_id.as_deref(), Some("trigger-1"));
    assert_eq!(
        dead.dead_letter_reason.as_deref(),
        Some("MaxDeliveryCountExceeded"),
        "left unsettled on every delivery, never completed nor dead-lettered by the replayer"
    );
    assert_eq!(h.active(E).await, 0, "nothing replayed");
    assert_eq!(h.active("Deferred").await, 1, "the parked copy is kept");
}

/// A handler for the end-to-end test below: fails the event whose payload
/// `Id` is `"fail"`, completes every other one.
struct FailOne;

impl nimbus_engine::Handlers for FailOne {
    fn invoke<'a>(
        &'a self,
        _endpoint: &'a str,
        event: nimbus_handler::Event,
    ) -> nimbus_engine::HandlerCall<'a> {
        Box::pin(async move {
            let result = if event.payload.contains("\"fail\"") {
                Err(nimbus_handler::HandlerError::failed(
                    "Scripted",
                    "scripted failure".into(),
                ))
            } else {
                Ok(nimbus_handler::Outcome::Completed)
            };
            Some(nimbus_handler::Report {
                result,
                follow_ups: Vec::new(),
                version: "sha256:test".into(),
            })
        })
    }
}

/// SEMANTICS §4 (F8): `DeferredCount` counts the messages *currently*
/// parked, and the session state returns to empty when nothing is blocked
/// or parked. A parked copy that cannot be decoded is dead-lettered by the
/// endpoint when the replayer sends it back, which counts it out of the
/// parked set. (When the replayer dead-lettered it itself, nothing told the
/// session: its count stayed at 1 for ever and every later event was parked
/// behind a message that no longer existed.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parked_copy_that_cannot_be_decoded_is_dead_lettered_and_no_longer_counts_as_parked() {
    let h = start(Topology::default()).await;
    subscription(
        &h.broker,
        "responses",
        SubscriptionSettings::default(),
        "user.To = 'Resolver'",
    )
    .await;
    let responses = h
        .broker
        .receiver(&sub("responses"), SubQueue::Main)
        .await
        .unwrap();
    let endpoint = Arc::new(nimbus_engine::Endpoint {
        name: E.to_owned(),
        handlers: Arc::new(FailOne),
        policies: Arc::new(nimbus_engine::Policies::new(
            nimbus_engine::RetryPolicies::default(),
            nimbus_engine::Classifier::default(),
            nimbus_engine::TransientBackoff {
                base: Duration::from_millis(5),
                max: Duration::from_millis(20),
            },
        )),
        max_delivery_count: 10,
        renew_every: Duration::from_secs(5),
        sdk_version: "test".into(),
        inbox_retention: None,
        retrying: Arc::default(),
        paused: nimbus_engine::Paused::default(),
        control_key: support::control_key(),
    });
    tokio::spawn(nimbus_engine::run_endpoint(
        h.broker.clone(),
        endpoint,
        nimbus_engine::ProcessorSettings {
            max_concurrent_sessions: 8,
            session_idle_timeout: Duration::from_millis(200),
            session_max_hold: Duration::from_secs(5),
            accept_timeout: Duration::from_millis(500),
        },
        h.shutdown.clone(),
    ));
    let response = || async {
        let received = responses
            .receive(DEADLINE)
            .await
            .unwrap()
            .expect("a response");
        responses.complete(received.clone()).await.unwrap();
        let message = decode(&received);
        (
            message.message_type.to_string(),
            message.event_id.unwrap_or_default(),
        )
    };
    let pair = |kind: &str, event_id: &str| (kind.to_owned(), event_id.to_owned());
    let mut failing = event("s1", "e1");
    failing.content = Some(MessageContent::event(nimbus_wire::EventContent::new(
        "OrderPlaced".to_owned(),
        serde_json::json!({ "Id": "fail" }).to_string(),
    )));
    h.publish(vec![failing.to_transport()]).await;
    assert_eq!(response().await, pair("ErrorResponse", "e1"));
    h.publish(vec![event("s1", "e2").to_transport()]).await;
    assert_eq!(response().await, pair("DeferralResponse", "e2"));

    // The parked copy of e2 is damaged in place (as corruption, or a
    // foreign writer, would leave it): same session and sequence, a
    // MessageType nobody knows.
    let lock = h.lock("Deferred", "s1").await;
    let copy = lock.receive(DEADLINE).await.unwrap().expect("e2 parked");
    let mut damaged = copy.message.clone();
    damaged
        .properties
        .insert("MessageType".into(), PropertyValue::from("NoSuchType"));
    lock.settle(nimbus_transport::Settlement::complete(copy).publish(E, damaged))
        .await
        .unwrap();
    lock.close().await;

    let mut skip = event("s1", "e1");
    skip.message_id = None;
    skip.from = Some("Manager".to_owned());
    skip.message_type = MessageType::SkipRequest;
    skip.content = Some(MessageContent::default());
    h.publish(vec![support::signed(skip.to_transport())]).await;
    assert_eq!(response().await, pair("SkipResponse", "e1"));
    // Sent back to the endpoint, which dead-letters it naming the defect
    // and tells the Resolver.
    assert_eq!(response().await, pair("ErrorResponse", "e2"));
    let dead = h.dead_lettered(E).await;
    assert_eq!(dead.message.message_id.as_deref(), Some("msg-e2"));
    assert_eq!(
        dead.dead_letter_reason.as_deref(),
        Some("Validation failed: MessageType 'NoSuchType' is not a known NimBus message type")
    );

    // Nothing is blocked and nothing is parked any more: a new event runs
    // at once, and the session state is empty again.
    h.publish(vec![event("s1", "e3").to_transport()]).await;
    assert_eq!(
        response().await,
        pair("ResolutionResponse", "e3"),
        "nothing is parked, so e3 must not wait behind anything"
    );
    let lock = h.lock(E, "s1").await;
    let state = lock.get_state().await.unwrap();
    lock.close().await;
    let state =
        nimbus_wire::SessionState::from_bytes(state.as_deref().unwrap_or_default()).unwrap();
    assert!(
        state.is_empty(),
        "session state back to empty (F8): {state:?}"
    );
}

/// Triggers queued together for one session are answered by one replay:
/// the replayer takes them all before it reads the parked set (each was
/// committed with its park, so that read sees every one of those parks).
/// One replay per trigger re-parked a blocked session's whole set again
/// and again. Here the parked session is held, so the replayer waits with
/// the triggers it took: none is left for another receiver.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn triggers_queued_for_one_session_are_answered_by_one_replay() {
    let h = start(Topology::default()).await;
    let tap = h.broker.receiver(&sub(TAP), SubQueue::Main).await.unwrap();
    h.publish(vec![parked("s1", "e1", 0)]).await;
    h.await_active("Deferred", 1, "one parked copy").await;
    let held = h.lock("Deferred", "s1").await;

    h.publish(vec![
        trigger("s1", "trigger-1"),
        trigger("s1", "trigger-2"),
        trigger("s1", "trigger-3"),
    ])
    .await;
    for _ in 0..3 {
        let seen = tap.receive(DEADLINE).await.unwrap().expect("a trigger");
        tap.complete(seen).await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let other = h
        .broker
        .receiver(&sub("DeferredProcessor"), SubQueue::Main)
        .await
        .unwrap();
    let left = other.receive(Duration::from_millis(200)).await.unwrap();
    assert!(
        left.is_none(),
        "the replayer took every queued trigger of the session: {:?}",
        left.map(|m| m.message.message_id)
    );
    other.close().await;
    held.close().await;

    let replays = h.replays("s1", 1).await;
    assert_eq!(event_ids(&replays), ["e1"]);
    h.await_active("Deferred", 0, "the parked copy completed")
        .await;
    h.await_active("DeferredProcessor", 0, "every trigger completed")
        .await;
}
