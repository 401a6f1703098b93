//! The engine on the real embedded broker, with a scripted native handler:
//! the procedure end to end through real sessions, settlements, parking,
//! replay and scheduled retries. (The same procedure with real wasm
//! components is the runtime crate's scenario suite.)

#![allow(clippy::unwrap_used, reason = "tests")]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nimbus_broker::{Broker, BrokerOptions, Durability};
use nimbus_engine::Classifier;
use nimbus_engine::{
    Endpoint, HandlerCall, Handlers, Policies, ProcessorSettings, RetryPolicies, RetryPolicy,
    Retrying, TransientBackoff, run_endpoint, run_replayer,
};
use nimbus_handler::{ErrorKind, Event, FollowUp, HandlerError, Outcome, PendingHandoff, Report};
use nimbus_transport::{
    Admin, Message, Receiver, RuleDescription, SubQueue, SubscriptionPath, SubscriptionSettings,
    TopicSettings, Transport,
};
use nimbus_wire::{ControlKey, MessageContent, MessageType, NimbusMessage, SessionState};
use tokio_util::sync::CancellationToken;

use crate::support;

use support::{E, event_request, signed};

/// The event type of the follow-ups the `follow-ups-N-BYTES` action
/// publishes.
const FOLLOW_UP_TYPE: &str = "OrderShipped";

/// How long the `"slow"` action runs.
const SLOW_HANDLER: Duration = Duration::from_millis(1500);

/// A native handler whose behaviour each test scripts per event payload.
#[derive(Default)]
struct Scripted {
    /// Payload `"Action"` → result; payload order of invocations recorded.
    seen: Mutex<Vec<String>>,
    /// How many times each payload id failed so far (for "fail once").
    failures: Mutex<HashMap<String, u32>>,
}

impl Handlers for Scripted {
    fn invoke<'a>(&'a self, _endpoint: &'a str, event: Event) -> HandlerCall<'a> {
        // Before any future exists, as a handler that panics while it sets
        // up its call would.
        assert!(
            !event.payload.contains("panic-on-call"),
            "scripted panic on call"
        );
        Box::pin(self.run(event))
    }
}

impl Scripted {
    async fn run(&self, event: Event) -> Option<Report> {
        let payload: serde_json::Value = serde_json::from_str(&event.payload).unwrap();
        let id = payload["Id"].as_str().unwrap_or_default().to_owned();
        self.seen.lock().unwrap().push(id.clone());
        let action = payload["Action"].as_str().unwrap_or("complete");
        let count = {
            let mut failures = self.failures.lock().unwrap();
            let count = failures.entry(id.clone()).or_default();
            *count += 1;
            *count
        };
        let failure =
            |kind: ErrorKind, t: &str| Err(HandlerError::new(kind, t, format!("scripted {t}")));
        let result = match action {
            "fail" => failure(ErrorKind::Failed, "Scripted"),
            "fail-once" if count == 1 => failure(ErrorKind::Failed, "Scripted"),
            "transient" => failure(ErrorKind::Transient, "Flaky"),
            "transient-once" if count == 1 => failure(ErrorKind::Transient, "Flaky"),
            "permanent" => failure(ErrorKind::Permanent, "Validation"),
            "fail-then-permanent" if count == 1 => failure(ErrorKind::Failed, "Scripted"),
            "fail-then-permanent" => failure(ErrorKind::Permanent, "Validation"),
            // Issue 28: durations a hostile guest may return.
            "fail-retry-after-forever" => Err(HandlerError {
                retry_after: Some(Duration::from_millis(u64::MAX)),
                ..HandlerError::failed("Scripted", "scripted Scripted".to_owned())
            }),
            "handoff-forever" => Ok(Outcome::PendingHandoff(PendingHandoff {
                reason: "external job".into(),
                external_job_id: Some("job-1".into()),
                expected_by: Some(Duration::from_millis(u64::MAX)),
            })),
            "handoff" => Ok(Outcome::PendingHandoff(PendingHandoff {
                reason: "external job".into(),
                external_job_id: Some("job-1".into()),
                expected_by: Some(Duration::from_secs(60)),
            })),
            "unknown-type" => return None,
            "slow" => {
                tokio::time::sleep(SLOW_HANDLER).await;
                Ok(Outcome::Completed)
            }
            "panic" => panic!("scripted panic"),
            _ => Ok(Outcome::Completed),
        };
        // `follow-ups-N-BYTES`: completes, publishing N follow-ups whose
        // payloads are strings of BYTES characters.
        let follow_ups = match action.strip_prefix("follow-ups-") {
            Some(shape) => {
                let (n, bytes) = shape.split_once('-').unwrap();
                let (n, bytes): (usize, usize) = (n.parse().unwrap(), bytes.parse().unwrap());
                (0..n)
                    .map(|i| FollowUp {
                        event_type: FOLLOW_UP_TYPE.to_owned(),
                        message_id: format!("{id}-follow-up-{i}"),
                        payload: serde_json::json!("x".repeat(bytes)).to_string(),
                        ..FollowUp::default()
                    })
                    .collect()
            }
            None => Vec::new(),
        };
        Some(Report {
            result,
            follow_ups,
            version: "sha256:test".into(),
        })
    }
}

struct Harness {
    _dir: tempfile::TempDir,
    broker: Arc<Broker>,
    handler: Arc<Scripted>,
    responses: nimbus_broker::BrokerReceiver,
    retrying: Arc<Retrying>,
    pause: nimbus_engine::PauseSwitch,
    shutdown: CancellationToken,
}

async fn provision(broker: &Broker, max_delivery_count: u32, lock_duration: Option<Duration>) {
    broker
        .create_topic(E, TopicSettings::default())
        .await
        .unwrap();
    let sub = |name: &str| SubscriptionPath::new(E, name);
    let mut session = SubscriptionSettings::sessions().with_max_delivery_count(max_delivery_count);
    if let Some(lock) = lock_duration {
        session = session.with_lock_duration(lock);
    }
    broker
        .create_subscription(&sub(E), session.clone())
        .await
        .unwrap();
    broker.delete_rule(&sub(E), "$Default").await.unwrap();
    broker
        .create_rule(
            &sub(E),
            RuleDescription::new("to-billing", "user.To = 'billing'"),
        )
        .await
        .unwrap();
    broker
        .create_rule(
            &sub(E),
            RuleDescription::new("retry", "user.To = 'Retry'")
                .with_action("SET user.To = 'billing'; SET user.From = 'Retry'"),
        )
        .await
        .unwrap();
    broker
        .create_subscription(&sub("Deferred"), SubscriptionSettings::sessions())
        .await
        .unwrap();
    broker
        .delete_rule(&sub("Deferred"), "$Default")
        .await
        .unwrap();
    broker
        .create_rule(
            &sub("Deferred"),
            RuleDescription::new(
                "parked",
                "user.To = 'Deferred' AND user.OriginalSessionId IS NOT NULL",
            ),
        )
        .await
        .unwrap();
    broker
        .create_subscription(&sub("DeferredProcessor"), SubscriptionSettings::default())
        .await
        .unwrap();
    broker
        .delete_rule(&sub("DeferredProcessor"), "$Default")
        .await
        .unwrap();
    broker
        .create_rule(
            &sub("DeferredProcessor"),
            RuleDescription::new("trigger", "user.To = 'DeferredProcessor'"),
        )
        .await
        .unwrap();
    broker
        .create_subscription(&sub("responses"), SubscriptionSettings::default())
        .await
        .unwrap();
    broker
        .delete_rule(&sub("responses"), "$Default")
        .await
        .unwrap();
    broker
        .create_rule(
            &sub("responses"),
            RuleDescription::new("from-billing", "user.To = 'Resolver'"),
        )
        .await
        .unwrap();
}

async fn start(retry: RetryPolicies, max_delivery_count: u32) -> Harness {
    start_with_inbox(retry, max_delivery_count, None).await
}

async fn start_with_inbox(
    retry: RetryPolicies,
    max_delivery_count: u32,
    inbox_retention: Option<Duration>,
) -> Harness {
    start_with(retry, max_delivery_count, inbox_retention, |_| {}).await
}

/// What a test may change beyond the policies: the session processor's
/// settings and the endpoint's lock timing.
struct Tuning {
    processor: ProcessorSettings,
    /// The endpoint subscription's lock duration; the broker's default when
    /// `None`.
    lock_duration: Option<Duration>,
    renew_every: Duration,
    /// How long the session waits after a transient failure.
    transient_backoff: TransientBackoff,
    /// The broker's limit on one request's messages; its default when
    /// `None`.
    max_request_bytes: Option<usize>,
    /// Sessions whose next settlements panic, with how many do: the engine
    /// then runs on [`Panicky`], as on a host bug in the settle path.
    settle_panics: Option<Arc<Mutex<HashMap<String, u32>>>>,
}

async fn start_with(
    retry: RetryPolicies,
    max_delivery_count: u32,
    inbox_retention: Option<Duration>,
    tune: impl FnOnce(&mut Tuning),
) -> Harness {
    let mut tuning = Tuning {
        processor: ProcessorSettings {
            max_concurrent_sessions: 8,
            session_idle_timeout: Duration::from_millis(200),
            session_max_hold: Duration::from_secs(5),
            accept_timeout: Duration::from_millis(500),
        },
        lock_duration: None,
        renew_every: Duration::from_secs(5),
        transient_backoff: TransientBackoff {
            base: Duration::from_millis(5),
            max: Duration::from_millis(20),
        },
        max_request_bytes: None,
        settle_panics: None,
    };
    tune(&mut tuning);
    let dir = tempfile::tempdir().unwrap();
    let mut options = BrokerOptions::new(dir.path()).durability(Durability::Os);
    if let Some(bytes) = tuning.max_request_bytes {
        options = options.max_request_bytes(bytes);
    }
    let broker = Arc::new(Broker::open(options).await.unwrap());
    provision(&broker, max_delivery_count, tuning.lock_duration).await;
    let handler = Arc::new(Scripted::default());
    let retrying = Arc::new(Retrying::default());
    let (pause, paused) = nimbus_engine::pause_switch(false);
    let endpoint = Arc::new(Endpoint {
        name: E.to_owned(),
        handlers: handler.clone(),
        policies: Arc::new(Policies::new(
            retry,
            Classifier::default(),
            tuning.transient_backoff,
        )),
        max_delivery_count,
        renew_every: tuning.renew_every,
        sdk_version: "test".into(),
        inbox_retention,
        retrying: Arc::clone(&retrying),
        paused,
        control_key: support::control_key(),
    });
    let shutdown = CancellationToken::new();
    match tuning.settle_panics {
        Some(panics) => tokio::spawn(run_endpoint(
            Arc::new(Panicky {
                broker: broker.clone(),
                panics,
            }),
            endpoint,
            tuning.processor,
            shutdown.clone(),
        )),
        None => tokio::spawn(run_endpoint(
            broker.clone(),
            endpoint,
            tuning.processor,
            shutdown.clone(),
        )),
    };
    tokio::spawn(run_replayer(broker.clone(), E.to_owned(), shutdown.clone()));
    let responses = broker
        .receiver(&SubscriptionPath::new(E, "responses"), SubQueue::Main)
        .await
        .unwrap();
    Harness {
        _dir: dir,
        broker,
        handler,
        responses,
        retrying,
        pause,
        shutdown,
    }
}

fn event(session: &str, event_id: &str, id: &str, action: &str) -> Message {
    let payload = serde_json::json!({ "Id": id, "Action": action });
    event_request(session, event_id, &payload).to_transport()
}

/// A control request as the Manager sends it: signed.
fn control(kind: MessageType, session: &str, event_id: &str) -> Message {
    signed(unsigned_control(kind, session, event_id))
}

/// A control request as anyone may write it: `From = Manager`, no signature.
fn unsigned_control(kind: MessageType, session: &str, event_id: &str) -> Message {
    NimbusMessage {
        session_id: Some(session.to_owned()),
        to: Some(E.to_owned()),
        from: Some("Manager".to_owned()),
        message_type: kind,
        event_id: Some(event_id.to_owned()),
        event_type_id: Some("OrderPlaced".to_owned()),
        content: Some(MessageContent::default()),
        ..NimbusMessage::default()
    }
    .to_transport()
}

impl Harness {
    /// The next response to the Resolver: (MessageType, EventId).
    async fn response(&self) -> (String, String, NimbusMessage) {
        let received = self
            .responses
            .receive(Duration::from_secs(10))
            .await
            .unwrap()
            .expect("a response within 10 s");
        let message = NimbusMessage::from_received(&received).unwrap();
        self.responses.complete(received).await.unwrap();
        (
            message.message_type.to_string(),
            message.event_id.clone().unwrap_or_default(),
            message,
        )
    }

    async fn responses(&self, n: usize) -> Vec<(String, String)> {
        let mut out = Vec::new();
        for _ in 0..n {
            let (kind, event_id, _) = self.response().await;
            out.push((kind, event_id));
        }
        out
    }

    async fn publish(&self, message: Message) {
        self.broker.publish(E, vec![message]).await.unwrap();
    }

    async fn session_state(&self, session: &str) -> SessionState {
        let lock = self
            .broker
            .accept_session(
                &SubscriptionPath::new(E, E),
                nimbus_transport::SessionSelector::Named(session.to_owned()),
                Duration::from_secs(10),
            )
            .await
            .unwrap();
        use nimbus_transport::SessionLock;
        let blob = lock.get_state().await.unwrap();
        lock.close().await;
        SessionState::from_bytes(blob.as_deref().unwrap_or_default()).unwrap()
    }

    fn seen(&self) -> Vec<String> {
        self.handler.seen.lock().unwrap().clone()
    }

    /// The endpoint subscription's (active, dead-lettered) message counts.
    async fn endpoint_counts(&self) -> (u64, u64) {
        let sub = self
            .broker
            .get_subscription(&SubscriptionPath::new(E, E))
            .await
            .unwrap()
            .expect("the endpoint subscription exists");
        (sub.active_message_count, sub.dead_letter_message_count)
    }

    /// The next message in the endpoint subscription's dead-letter queue,
    /// taken off it: (dead-letter reason, MessageId).
    async fn next_dead_letter(&self) -> (Option<String>, Option<String>) {
        let dlq = self
            .broker
            .receiver(&SubscriptionPath::new(E, E), SubQueue::DeadLetter)
            .await
            .unwrap();
        let dead = dlq
            .receive(Duration::from_secs(10))
            .await
            .unwrap()
            .expect("dead-lettered within 10 s");
        let seen = (
            dead.dead_letter_reason.clone(),
            dead.message.message_id.clone(),
        );
        dlq.complete(dead).await.unwrap();
        seen
    }
}

fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
        .collect()
}

/// One session slot; session `a` has ten events waiting and `b` one,
/// published between `a`'s fifth and sixth: (handler order).
async fn one_slot_two_sessions(max_hold: Duration) -> Vec<String> {
    let h = start_with(RetryPolicies::default(), 10, None, |tuning| {
        tuning.processor.max_concurrent_sessions = 1;
        tuning.processor.session_max_hold = max_hold;
    })
    .await;
    let mut messages: Vec<Message> = (1..=5)
        .map(|i| event("a", &format!("a{i}"), &format!("a{i}"), "complete"))
        .collect();
    messages.push(event("b", "b1", "b1", "complete"));
    messages.extend((6..=10).map(|i| event("a", &format!("a{i}"), &format!("a{i}"), "complete")));
    // One publish: every message is waiting before the slot takes a session.
    h.broker.publish(E, messages).await.unwrap();
    h.responses(11).await;
    let seen = h.seen();
    h.shutdown.cancel();
    seen
}

/// A busy session is released after its hold time, and the next accept
/// takes the session whose oldest message waited longest: with a zero hold
/// the one slot serves the events in the order they were published, across
/// sessions; with a long hold, `b` waits until `a` has nothing left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_session_is_released_after_its_hold_so_waiting_sessions_get_a_turn() {
    let expected: Vec<String> = [
        "a1", "a2", "a3", "a4", "a5", "b1", "a6", "a7", "a8", "a9", "a10",
    ]
    .map(String::from)
    .into();
    assert_eq!(one_slot_two_sessions(Duration::ZERO).await, expected);
    let starved: Vec<String> = [
        "a1", "a2", "a3", "a4", "a5", "a6", "a7", "a8", "a9", "a10", "b1",
    ]
    .map(String::from)
    .into();
    assert_eq!(
        one_slot_two_sessions(Duration::from_secs(3600)).await,
        starved
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_session_hands_its_slot_to_a_session_with_a_waiting_message() {
    // One slot, and idle and hold times far beyond the test's waits: only
    // the hand-over lets `b` in while `a` is held.
    let h = start_with(RetryPolicies::default(), 10, None, |tuning| {
        tuning.processor.max_concurrent_sessions = 1;
        tuning.processor.session_idle_timeout = Duration::from_secs(600);
        tuning.processor.session_max_hold = Duration::from_secs(600);
    })
    .await;
    h.publish(event("a", "a1", "a1", "complete")).await;
    assert_eq!(h.responses(1).await, pairs(&[("ResolutionResponse", "a1")]));
    h.publish(event("b", "b1", "b1", "complete")).await;
    assert_eq!(h.responses(1).await, pairs(&[("ResolutionResponse", "b1")]));
    // And back: `a` gets the slot from the now idle `b`.
    h.publish(event("a", "a2", "a2", "complete")).await;
    assert_eq!(h.responses(1).await, pairs(&[("ResolutionResponse", "a2")]));
    assert_eq!(h.seen(), ["a1", "b1", "a2"]);
    h.shutdown.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_that_outlives_the_lock_keeps_its_session_by_renewal() {
    // The lock would lapse three times over while the handler runs; only
    // the renewals while it runs keep the session and the message.
    let h = start_with(RetryPolicies::default(), 10, None, |tuning| {
        tuning.lock_duration = Some(Duration::from_millis(500));
        tuning.renew_every = Duration::from_millis(150);
    })
    .await;
    h.publish(event("s1", "e1", "A", "slow")).await;
    h.publish(event("s1", "e2", "B", "complete")).await;
    assert_eq!(
        h.responses(2).await,
        pairs(&[("ResolutionResponse", "e1"), ("ResolutionResponse", "e2")])
    );
    assert_eq!(h.seen(), ["A", "B"], "each handler ran once, in order");
    h.shutdown.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_that_panics_fails_its_event_and_blocks_the_session_like_any_failure() {
    // The handler runs on the session's task. Its panic, while it runs or
    // before its call is even set up, is a `failed` outcome of type
    // `Panic`: the session blocks and parks what follows, an operator can
    // act on it, and nothing is redelivered in a loop.
    let h = start(RetryPolicies::default(), 10).await;
    h.publish(event("s1", "e1", "A", "panic")).await;
    h.publish(event("s1", "e2", "B", "complete")).await;
    h.publish(event("s2", "e3", "C", "panic-on-call")).await;
    let mut responses = Vec::new();
    for _ in 0..3 {
        let (kind, event_id, message) = h.response().await;
        let error_type = message
            .content
            .and_then(|c| c.error_content)
            .and_then(|e| e.error_type);
        responses.push((kind, event_id, error_type));
    }
    responses.sort_by(|a, b| a.1.cmp(&b.1));
    let panic = Some("Panic".to_owned());
    assert_eq!(
        responses,
        [
            ("ErrorResponse".to_owned(), "e1".to_owned(), panic.clone()),
            (
                "DeferralResponse".to_owned(),
                "e2".to_owned(),
                Some("SessionBlockedException".to_owned())
            ),
            ("ErrorResponse".to_owned(), "e3".to_owned(), panic),
        ]
    );
    assert_eq!(h.session_state("s1").await.blocked_by(), Some("e1"));
    assert_eq!(
        h.seen(),
        ["A"],
        "each panicking handler ran once: no redelivery loop"
    );
    h.shutdown.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handled_event_is_resolved_and_completed() {
    let h = start(RetryPolicies::default(), 10).await;
    h.publish(event("s1", "e1", "A", "complete")).await;
    let (kind, event_id, response) = h.response().await;
    assert_eq!(
        (kind.as_str(), event_id.as_str()),
        ("ResolutionResponse", "e1")
    );
    assert_eq!(
        response.correlation_id.as_deref(),
        Some("corr-1"),
        "business correlation kept (F25)"
    );
    assert_eq!(
        response
            .properties
            .get("HandlerVersion")
            .and_then(|v| v.as_str()),
        Some("sha256:test")
    );
    assert!(h.session_state("s1").await.is_empty());
    h.shutdown.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failure_blocks_session_parks_followers_and_skip_replays_them_in_order() {
    let h = start(RetryPolicies::default(), 10).await;
    h.publish(event("s1", "e1", "A", "fail")).await;
    h.publish(event("s1", "e2", "B", "complete")).await;
    h.publish(event("s1", "e3", "C", "complete")).await;
    assert_eq!(
        h.responses(3).await,
        pairs(&[
            ("ErrorResponse", "e1"),
            ("DeferralResponse", "e2"),
            ("DeferralResponse", "e3")
        ])
    );
    let state = h.session_state("s1").await;
    assert_eq!(state.blocked_by(), Some("e1"));
    assert_eq!(state.deferred_count, 2);
    // The blocker, as an operator needs it should the Resolver lose its
    // record (decision 0140).
    let kept = state.blocking_event.expect("the blocker is kept");
    assert_eq!(kept.message_id.as_deref(), Some("msg-e1"));
    assert_eq!(kept.event_type_id.as_deref(), Some("OrderPlaced"));
    let payload: serde_json::Value =
        serde_json::from_str(kept.event_json.as_deref().unwrap_or_default()).unwrap();
    assert_eq!(payload, serde_json::json!({ "Id": "A", "Action": "fail" }));
    assert!(!kept.handoff);
    // Another session is not blocked.
    h.publish(event("s2", "f1", "X", "complete")).await;
    assert_eq!(h.responses(1).await, pairs(&[("ResolutionResponse", "f1")]));

    h.publish(control(MessageType::SkipRequest, "s1", "e1"))
        .await;
    assert_eq!(
        h.responses(3).await,
        pairs(&[
            ("SkipResponse", "e1"),
            ("ResolutionResponse", "e2"),
            ("ResolutionResponse", "e3")
        ])
    );
    assert_eq!(h.seen(), ["A", "X", "B", "C"]);
    assert!(
        h.session_state("s1").await.is_empty(),
        "state back to zero bytes (F8)"
    );
    h.shutdown.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_policy_schedules_a_retry_that_unblocks_and_replays() {
    let retry = every_failure_retried(2, Duration::from_millis(200));
    let h = start(retry, 10).await;
    h.publish(event("s1", "e1", "A", "fail-once")).await;
    h.publish(event("s1", "e2", "B", "complete")).await;
    assert_eq!(
        h.responses(4).await,
        pairs(&[
            ("ErrorResponse", "e1"),
            ("DeferralResponse", "e2"),
            ("ResolutionResponse", "e1"),
            ("ResolutionResponse", "e2"),
        ])
    );
    assert_eq!(h.seen(), ["A", "A", "B"]);
    h.shutdown.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transient_failure_is_redelivered_then_dead_lettered_at_max_delivery_count_and_reported() {
    let h = start(RetryPolicies::default(), 3).await;
    h.publish(event("s1", "e1", "A", "transient")).await;
    let (kind, event_id, response) = h.response().await;
    assert_eq!((kind.as_str(), event_id.as_str()), ("ErrorResponse", "e1"));
    assert_eq!(
        response.dead_letter_reason.as_deref(),
        Some("MaxDeliveryCountExceeded")
    );
    assert_eq!(h.seen(), ["A", "A", "A"], "three deliveries, in place");
    let dlq = h
        .broker
        .receiver(&SubscriptionPath::new(E, E), SubQueue::DeadLetter)
        .await
        .unwrap();
    let dead = dlq
        .receive(Duration::from_secs(5))
        .await
        .unwrap()
        .expect("dead-lettered");
    assert_eq!(
        dead.dead_letter_reason.as_deref(),
        Some("MaxDeliveryCountExceeded")
    );
    assert!(
        h.session_state("s1").await.is_empty(),
        "a transient failure never blocks"
    );
    h.shutdown.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_delivered_again_after_a_transient_failure_is_noted_until_it_settles() {
    // A transient failure sends the Resolver nothing (SEMANTICS §3): the
    // operator API learns from this note why the event is still Pending.
    // The backoff is long enough to look while the session waits.
    let backoff = Duration::from_secs(1);
    for (action, max_deliveries, settles_as) in [
        ("transient-once", 10, "ResolutionResponse"),
        ("transient", 2, "ErrorResponse"),
    ] {
        let h = start_with(RetryPolicies::default(), max_deliveries, None, |t| {
            t.transient_backoff = TransientBackoff {
                base: backoff,
                max: backoff,
            };
        })
        .await;
        h.publish(event("s1", "e1", "A", action)).await;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        let noted = loop {
            if let Some(noted) = h.retrying.of(E, "e1") {
                break noted;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{action}: the transient failure was never noted"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        };
        assert_eq!(
            (noted.delivery, noted.max_deliveries),
            (1, max_deliveries),
            "{action}"
        );
        assert_eq!(
            (noted.error_type.as_str(), noted.error.as_str()),
            ("Flaky", "scripted Flaky"),
            "{action}"
        );
        assert_eq!(
            noted
                .next_delivery_after
                .duration_since(noted.failed_at)
                .ok(),
            Some(backoff),
            "{action}: the next delivery comes after the backoff"
        );
        let (kind, event_id, _) = h.response().await;
        assert_eq!((kind.as_str(), event_id.as_str()), (settles_as, "e1"));
        assert_eq!(
            h.retrying.of(E, "e1"),
            None,
            "{action}: settled, so no longer retrying"
        );
        h.shutdown.cancel();
    }
}

/// Shutdown lets handlers finish (SEMANTICS §8), but a transient backoff
/// runs no handler: the session lets its message go at once instead of
/// holding it for the rest of the backoff, so a host stopping is not held
/// up for as long as `transient_backoff_max`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_cuts_a_transient_backoff_short_and_abandons_the_message() {
    use nimbus_transport::SessionLock as _;
    let h = start_with(RetryPolicies::default(), 10, None, |t| {
        t.transient_backoff = TransientBackoff {
            base: Duration::from_secs(600),
            max: Duration::from_secs(600),
        };
    })
    .await;
    h.publish(event("s1", "e1", "A", "transient")).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while h.retrying.of(E, "e1").is_none() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the transient failure was never noted"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    h.shutdown.cancel();
    // Held for its backoff, the session could not be taken for 600 s.
    let session = h
        .broker
        .accept_session(
            &SubscriptionPath::new(E, E),
            nimbus_transport::SessionSelector::Named("s1".to_owned()),
            Duration::from_secs(30),
        )
        .await
        .expect("the session is let go at shutdown");
    let message = session
        .receive(Duration::from_secs(5))
        .await
        .unwrap()
        .expect("the message is back");
    assert_eq!(
        message.delivery_count, 2,
        "abandoned: the failed delivery counts"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permanent_failure_dead_letters_without_blocking() {
    let h = start(RetryPolicies::default(), 10).await;
    h.publish(event("s1", "e1", "A", "permanent")).await;
    h.publish(event("s1", "e2", "B", "complete")).await;
    let (kind, _, response) = h.response().await;
    assert_eq!(kind, "ErrorResponse");
    assert_eq!(
        response.dead_letter_reason.as_deref(),
        Some("Permanent failure: Validation: scripted Validation")
    );
    assert_eq!(h.responses(1).await, pairs(&[("ResolutionResponse", "e2")]));
    h.shutdown.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pending_handoff_blocks_until_completed_without_rerunning_the_handler() {
    let h = start(RetryPolicies::default(), 10).await;
    h.publish(event("s1", "e1", "A", "handoff")).await;
    h.publish(event("s1", "e2", "B", "complete")).await;
    let (kind, _, response) = h.response().await;
    assert_eq!(kind, "PendingHandoffResponse");
    assert_eq!(response.external_job_id.as_deref(), Some("job-1"));
    assert!(response.expected_by.is_some());
    assert_eq!(h.responses(1).await, pairs(&[("DeferralResponse", "e2")]));
    let kept = h.session_state("s1").await.blocking_event;
    assert!(kept.is_some_and(|kept| kept.handoff), "kept as a handoff");
    h.publish(control(MessageType::HandoffCompletedRequest, "s1", "e1"))
        .await;
    assert_eq!(
        h.responses(2).await,
        pairs(&[("ResolutionResponse", "e1"), ("ResolutionResponse", "e2")])
    );
    assert_eq!(
        h.seen(),
        ["A", "B"],
        "the handed-off event never runs again"
    );
    h.shutdown.cancel();
}

/// Issue 40: on a namespace any client with a Send key can write
/// `From = Manager`. A control request the hosts' Manager did not sign (or
/// not from the Manager at all) is dead-lettered naming why, the handler
/// does not run, the Resolver hears nothing (so the event is not marked
/// DeadLettered), the block stays, and the operator's own command works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_control_request_not_from_this_hosts_manager_is_dead_lettered_and_changes_nothing() {
    let h = start(RetryPolicies::default(), 10).await;
    h.publish(event("s1", "e1", "A", "handoff")).await;
    h.publish(event("s1", "e2", "B", "complete")).await;
    assert_eq!(
        h.responses(2).await,
        pairs(&[("PendingHandoffResponse", "e1"), ("DeferralResponse", "e2")])
    );

    let mut forged: Vec<(Message, &str)> = Vec::new();
    for kind in [
        MessageType::ResubmissionRequest,
        MessageType::SkipRequest,
        MessageType::HandoffCompletedRequest,
        MessageType::HandoffFailedRequest,
    ] {
        let mut message = unsigned_control(kind, "s1", "e1");
        if kind == MessageType::ResubmissionRequest {
            message.body = event("s1", "e1", "forged", "complete").body;
        }
        forged.push((message, "carries no NimbusControlSignature"));
    }
    let other_host = ControlKey::new("another-namespace-key-0123456789ab").unwrap();
    let mut foreign = unsigned_control(MessageType::SkipRequest, "s1", "e1");
    nimbus_wire::control_signature::sign(&other_host, &mut foreign);
    forged.push((foreign, "does not match"));
    let mut edited = control(MessageType::HandoffFailedRequest, "s1", "e1");
    edited.body = br#"{"ErrorContent":{"ErrorText":"forged","ErrorType":"X"}}"#.to_vec();
    forged.push((edited, "does not match"));
    let mut not_manager = unsigned_control(MessageType::HandoffCompletedRequest, "s1", "e1");
    not_manager
        .properties
        .insert("From".into(), "storefront".into());
    forged.push((signed(not_manager), "must come from Manager"));

    let dlq = h
        .broker
        .receiver(&SubscriptionPath::new(E, E), SubQueue::DeadLetter)
        .await
        .unwrap();
    for (message, why) in forged {
        h.publish(message).await;
        let dead = dlq
            .receive(Duration::from_secs(10))
            .await
            .unwrap()
            .expect("dead-lettered within 10 s");
        assert_eq!(
            dead.dead_letter_reason.as_deref(),
            Some(nimbus_wire::dead_letter::UNAUTHORIZED_CONTROL)
        );
        let description = dead.dead_letter_description.clone().unwrap_or_default();
        assert!(
            description.contains(why) && description.contains("'e1'"),
            "{description}"
        );
        dlq.complete(dead).await.unwrap();
    }
    let state = h.session_state("s1").await;
    assert_eq!(state.blocked_by(), Some("e1"), "the block stays");
    assert_eq!(state.deferred_count, 1);
    assert_eq!(h.seen(), ["A"], "no forged request ran the handler");

    // The operator's own completion: the next responses are its, so none
    // went to the Resolver for the forged ones.
    h.publish(control(MessageType::HandoffCompletedRequest, "s1", "e1"))
        .await;
    assert_eq!(
        h.responses(2).await,
        pairs(&[("ResolutionResponse", "e1"), ("ResolutionResponse", "e2")])
    );
    assert_eq!(h.seen(), ["A", "B"]);
    assert!(h.session_state("s1").await.is_empty());
    h.shutdown.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_message_is_dead_lettered_with_the_defect_named_and_the_resolver_told() {
    // SEMANTICS §2.1: validated before anything runs; dead-lettered with a
    // reason naming the defect, and the Resolver told (DeadLettered: an
    // ErrorResponse carrying the dead-letter reason) with what could be read.
    let h = start(RetryPolicies::default(), 10).await;
    let mut bad = event("s1", "e1", "A", "complete");
    bad.properties
        .insert("MessageType".into(), "NoSuchType".into());
    h.publish(bad).await;
    let reason = "Validation failed: MessageType 'NoSuchType' is not a known NimBus message type";
    let (dead_reason, message_id) = h.next_dead_letter().await;
    assert_eq!(dead_reason.as_deref(), Some(reason));
    assert_eq!(message_id.as_deref(), Some("msg-e1"));

    let (kind, event_id, notice) = h.response().await;
    assert_eq!((kind.as_str(), event_id.as_str()), ("ErrorResponse", "e1"));
    assert_eq!(notice.dead_letter_reason.as_deref(), Some(reason));
    let description = notice.dead_letter_error_description.clone().unwrap();
    assert!(
        description.contains(reason) && description.contains("msg-e1"),
        "the description names the defect and the message: {description}"
    );
    assert_eq!(notice.session_id.as_deref(), Some("s1"));
    assert_eq!(notice.correlation_id.as_deref(), Some("corr-1"));
    assert_eq!(notice.event_type_id.as_deref(), Some("OrderPlaced"));
    assert_eq!(
        notice.parent_message_id.as_deref(),
        Some("msg-e1"),
        "lineage points at the dead-lettered message"
    );
    let payload = notice
        .content
        .and_then(|c| c.event_content)
        .and_then(|e| e.event_json);
    assert_eq!(
        payload,
        Some(serde_json::json!({ "Id": "A", "Action": "complete" }).to_string()),
        "the readable event content travels with the notice"
    );
    assert!(
        h.seen().is_empty(),
        "the handler never runs on an invalid message"
    );
    h.shutdown.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_undecodable_body_is_dead_lettered_and_the_resolver_still_told() {
    // F31: upstream loses the notification when the body is not a
    // MessageContent; nimbus tells the Resolver with what it could read
    // (the properties), without content.
    let h = start(RetryPolicies::default(), 10).await;
    let mut bad = event("s1", "e1", "A", "complete");
    bad.body = b"this is not json".to_vec();
    h.publish(bad).await;
    let (reason, _) = h.next_dead_letter().await;
    let reason = reason.unwrap();
    assert!(reason.starts_with("Validation failed: "), "{reason}");
    let (kind, event_id, notice) = h.response().await;
    assert_eq!((kind.as_str(), event_id.as_str()), ("ErrorResponse", "e1"));
    assert_eq!(notice.dead_letter_reason.as_deref(), Some(reason.as_str()));
    assert_eq!(notice.event_type_id.as_deref(), Some("OrderPlaced"));
    assert!(
        notice.content.and_then(|c| c.event_content).is_none(),
        "nothing of the body could be read"
    );
    assert!(h.seen().is_empty(), "the handler never runs");
    h.shutdown.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_without_an_event_id_is_dead_lettered_and_the_session_goes_on() {
    // SEMANTICS §2.1: a missing EventId is a defect named in the reason;
    // the handler never runs. The Resolver tracks events by EventId and
    // cannot record a notice without one (it would dead-letter it as
    // `ResolverCannotRecord`, decision 0070), so none is sent: the next
    // Resolver-bound message is the resolution of the event published
    // right behind it in the same session, which also shows the session
    // is not blocked.
    let h = start(RetryPolicies::default(), 10).await;
    let mut bad = event("s1", "e1", "A", "complete");
    bad.properties.remove("EventId");
    h.broker
        .publish(E, vec![bad, event("s1", "e2", "B", "complete")])
        .await
        .unwrap();
    let (reason, message_id) = h.next_dead_letter().await;
    assert_eq!(
        reason.as_deref(),
        Some("Validation failed: EventId is required")
    );
    assert_eq!(message_id.as_deref(), Some("msg-e1"));
    assert_eq!(
        h.responses(1).await,
        pairs(&[("ResolutionResponse", "e2")]),
        "no notice for a message the Resolver cannot track"
    );
    assert_eq!(h.seen(), ["B"], "the handler never ran on the invalid one");

    // A blank EventId is the same defect.
    let mut blank = event("s1", "e3", "C", "complete");
    blank.properties.insert("EventId".into(), "  ".into());
    h.publish(blank).await;
    let (reason, message_id) = h.next_dead_letter().await;
    assert_eq!(
        reason.as_deref(),
        Some("Validation failed: EventId is required")
    );
    assert_eq!(message_id.as_deref(), Some("msg-e3"));
    assert_eq!(h.seen(), ["B"]);
    h.shutdown.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inbox_skips_a_redelivered_message_id_as_a_duplicate() {
    let h = start_with_inbox(
        RetryPolicies::default(),
        10,
        Some(Duration::from_secs(3600)),
    )
    .await;
    h.publish(event("s1", "e1", "A", "complete")).await;
    assert_eq!(h.responses(1).await, pairs(&[("ResolutionResponse", "e1")]));
    // The publisher re-sends the same message (same MessageId).
    h.publish(event("s1", "e1", "A", "complete")).await;
    let (kind, event_id, response) = h.response().await;
    assert_eq!((kind.as_str(), event_id.as_str()), ("SkipResponse", "e1"));
    let error = response
        .content
        .and_then(|c| c.error_content)
        .and_then(|e| e.error_text);
    assert_eq!(error.as_deref(), Some("DuplicateDetected"));
    assert_eq!(h.seen(), ["A"], "the handler ran once");
    h.shutdown.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_an_inbox_a_redelivered_message_id_runs_again() {
    let h = start(RetryPolicies::default(), 10).await;
    h.publish(event("s1", "e1", "A", "complete")).await;
    h.publish(event("s1", "e1", "A", "complete")).await;
    assert_eq!(
        h.responses(2).await,
        pairs(&[("ResolutionResponse", "e1"), ("ResolutionResponse", "e1")])
    );
    h.shutdown.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replayed_message_dead_lettered_after_transient_failures_leaves_the_parked_set() {
    let h = start(RetryPolicies::default(), 3).await;
    h.publish(event("s1", "e1", "A", "fail")).await;
    h.publish(event("s1", "e2", "B", "transient")).await;
    assert_eq!(
        h.responses(2).await,
        pairs(&[("ErrorResponse", "e1"), ("DeferralResponse", "e2")])
    );
    h.publish(control(MessageType::SkipRequest, "s1", "e1"))
        .await;
    let (kind, event_id, response) = {
        h.responses(1).await;
        h.response().await
    };
    assert_eq!((kind.as_str(), event_id.as_str()), ("ErrorResponse", "e2"));
    assert_eq!(
        response.dead_letter_reason.as_deref(),
        Some("MaxDeliveryCountExceeded")
    );
    // Nothing is parked any more, so a new event of the session runs at once.
    h.publish(event("s1", "e3", "C", "complete")).await;
    assert_eq!(h.responses(1).await, pairs(&[("ResolutionResponse", "e3")]));
    assert!(h.session_state("s1").await.is_empty());
    h.shutdown.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transient_failure_is_redelivered_before_the_next_event_of_its_session() {
    // SEMANTICS §3 (F1, OR-07): after a transient failure the host holds
    // the session through the backoff and abandons, so the broker hands the
    // same message back first in its session; the event behind it in the
    // session cannot overtake it. One publish: B is waiting behind A before
    // A is first delivered.
    let h = start(RetryPolicies::default(), 10).await;
    h.broker
        .publish(
            E,
            vec![
                event("s1", "e1", "A", "transient-once"),
                event("s1", "e2", "B", "complete"),
            ],
        )
        .await
        .unwrap();
    assert_eq!(
        h.responses(2).await,
        pairs(&[("ResolutionResponse", "e1"), ("ResolutionResponse", "e2")]),
        "a transient failure sends no response; both events then resolve, A first"
    );
    assert_eq!(
        h.seen(),
        ["A", "A", "B"],
        "A redelivered in place, before B"
    );
    assert_eq!(
        h.endpoint_counts().await,
        (0, 0),
        "both completed: nothing left in the subscription, nothing dead-lettered"
    );
    assert!(
        h.session_state("s1").await.is_empty(),
        "a transient failure never blocks"
    );
    h.shutdown.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_inbox_records_no_failed_attempt_so_the_redelivery_runs_and_only_a_later_copy_is_a_duplicate()
 {
    // TR-04 / IB-05: with an inbox, a transient failure records nothing,
    // so its redelivery (same MessageId) runs the handler again and
    // completes; only then is the message id recorded, and a copy
    // re-published after that is skipped as a duplicate.
    let h = start_with_inbox(
        RetryPolicies::default(),
        10,
        Some(Duration::from_secs(3600)),
    )
    .await;
    h.publish(event("s1", "e1", "A", "transient-once")).await;
    assert_eq!(h.responses(1).await, pairs(&[("ResolutionResponse", "e1")]));
    assert_eq!(
        h.seen(),
        ["A", "A"],
        "the redelivery ran the handler, not the duplicate skip"
    );
    // The publisher re-sends the same message (same MessageId).
    h.publish(event("s1", "e1", "A", "transient-once")).await;
    let (kind, event_id, response) = h.response().await;
    assert_eq!((kind.as_str(), event_id.as_str()), ("SkipResponse", "e1"));
    let error = response
        .content
        .and_then(|c| c.error_content)
        .and_then(|e| e.error_text);
    assert_eq!(error.as_deref(), Some("DuplicateDetected"));
    assert_eq!(
        h.seen(),
        ["A", "A"],
        "the duplicate did not run the handler"
    );
    h.shutdown.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_inbox_records_no_permanent_failure_so_a_re_sent_copy_runs_again() {
    // IB-05: a permanent failure is dead-lettered and not recorded, so the
    // same MessageId sent again is not a duplicate: the handler runs again.
    let h = start_with_inbox(
        RetryPolicies::default(),
        10,
        Some(Duration::from_secs(3600)),
    )
    .await;
    h.publish(event("s1", "e1", "A", "permanent")).await;
    let (kind, _, first) = h.response().await;
    assert_eq!(kind, "ErrorResponse");
    assert!(first.dead_letter_reason.is_some(), "{first:?}");
    h.publish(event("s1", "e1", "A", "permanent")).await;
    let (kind, event_id, second) = h.response().await;
    assert_eq!(
        (kind.as_str(), event_id.as_str()),
        ("ErrorResponse", "e1"),
        "not a SkipResponse: the failed attempt left no inbox record"
    );
    assert_eq!(
        second.dead_letter_reason.as_deref(),
        Some("Permanent failure: Validation: scripted Validation")
    );
    assert_eq!(h.seen(), ["A", "A"], "the handler ran for each copy");
    h.shutdown.cancel();
}

/// A valid NimBus response (`kind`) addressed to the endpoint, as if a
/// misrouted Resolver-bound message reached its subscription.
fn response_to_endpoint(kind: MessageType, session: &str, event_id: &str) -> Message {
    let mut message = event(session, event_id, "R", "complete");
    message
        .properties
        .insert("MessageType".into(), kind.as_str().into());
    message
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_valid_message_type_the_endpoint_does_not_handle_is_dead_lettered_as_unsupported() {
    // DL-07: an ErrorResponse (or another response type) on the endpoint's
    // subscription is a valid NimBus message the endpoint has no entry
    // point for: dead-lettered with a reason naming the type, the Resolver
    // told, the handler never run. The session is not blocked: the next
    // event of the same session is handled normally.
    let h = start(RetryPolicies::default(), 10).await;
    h.broker
        .publish(
            E,
            vec![
                response_to_endpoint(MessageType::ErrorResponse, "s1", "e1"),
                event("s1", "e2", "B", "complete"),
            ],
        )
        .await
        .unwrap();
    let (reason, message_id) = h.next_dead_letter().await;
    assert_eq!(
        reason.as_deref(),
        Some("Unsupported MessageType: 'ErrorResponse'")
    );
    assert_eq!(message_id.as_deref(), Some("msg-e1"));
    let (kind, event_id, notice) = h.response().await;
    assert_eq!((kind.as_str(), event_id.as_str()), ("ErrorResponse", "e1"));
    assert_eq!(
        notice.dead_letter_reason.as_deref(),
        Some("Unsupported MessageType: 'ErrorResponse'")
    );
    assert_eq!(h.responses(1).await, pairs(&[("ResolutionResponse", "e2")]));
    assert_eq!(h.seen(), ["B"], "the handler never ran on the response");

    // Another response type takes the same path.
    h.publish(response_to_endpoint(
        MessageType::ResolutionResponse,
        "s2",
        "e3",
    ))
    .await;
    let (reason, message_id) = h.next_dead_letter().await;
    assert_eq!(
        reason.as_deref(),
        Some("Unsupported MessageType: 'ResolutionResponse'")
    );
    assert_eq!(message_id.as_deref(), Some("msg-e3"));
    let (kind, event_id, notice) = h.response().await;
    assert_eq!((kind.as_str(), event_id.as_str()), ("ErrorResponse", "e3"));
    assert_eq!(
        notice.dead_letter_reason.as_deref(),
        Some("Unsupported MessageType: 'ResolutionResponse'")
    );
    assert_eq!(h.seen(), ["B"], "the handler never ran on the response");
    assert!(h.session_state("s1").await.is_empty(), "nothing blocked");
    h.shutdown.cancel();
}

/// Session `s1` blocked by `e1` (A fails) with `e2` (B) and `e3` (C)
/// parked behind it, in that order; the parked session held by the test,
/// as a replayer would hold it.
async fn blocked_with_two_parked(h: &Harness) -> nimbus_broker::BrokerSession {
    h.publish(event("s1", "e1", "A", "fail")).await;
    h.publish(event("s1", "e2", "B", "complete")).await;
    h.publish(event("s1", "e3", "C", "complete")).await;
    assert_eq!(
        h.responses(3).await,
        pairs(&[
            ("ErrorResponse", "e1"),
            ("DeferralResponse", "e2"),
            ("DeferralResponse", "e3")
        ])
    );
    h.broker
        .accept_session(
            &SubscriptionPath::new(E, "Deferred"),
            nimbus_transport::SessionSelector::Named("s1".to_owned()),
            Duration::from_secs(10),
        )
        .await
        .unwrap()
}

/// A replayed copy that reaches the endpoint after an unblock, while a
/// lower parked message still waits in `Deferred`, does not run ahead of it
/// (decision 0050, rule 4). The interleaving is the one a busy session
/// makes: a replay that ran while the session was blocked left a copy in
/// flight behind the operator's skip, and the lower copy was parked again
/// in the meantime. Here the test is that replay: it holds the parked
/// session, republishes `e3` behind the skip, and lets `e2` go only after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replayed_copy_that_comes_back_before_a_lower_parked_one_waits_for_it() {
    use nimbus_transport::{SessionLock as _, Settlement};
    let h = start(RetryPolicies::default(), 10).await;
    let parked = blocked_with_two_parked(&h).await;
    let lower = parked
        .receive(Duration::from_secs(10))
        .await
        .unwrap()
        .unwrap();
    let higher = parked
        .receive(Duration::from_secs(10))
        .await
        .unwrap()
        .unwrap();
    let higher_copy = NimbusMessage::from_received(&higher).unwrap();
    assert_eq!(higher_copy.event_id.as_deref(), Some("e3"));

    h.publish(control(MessageType::SkipRequest, "s1", "e1"))
        .await;
    let replayed = nimbus_wire::build::replay_from_parked(&higher_copy, E);
    parked
        .settle(Settlement::complete(higher).publish(E.to_owned(), replayed.to_transport()))
        .await
        .unwrap();
    assert_eq!(h.responses(1).await, pairs(&[("SkipResponse", "e1")]));
    // Let the replayer have `e2` (and `e3`, parked again) only now: closing
    // releases what the lock holds.
    drop(lower);
    parked.close().await;

    assert_eq!(
        h.responses(2).await,
        pairs(&[("ResolutionResponse", "e2"), ("ResolutionResponse", "e3")])
    );
    assert_eq!(h.seen(), ["A", "B", "C"]);
    assert!(h.session_state("s1").await.is_empty());
    h.shutdown.cancel();
}

/// A parked message that never comes back (dead-lettered in `Deferred`,
/// say) does not hold up its session for ever: after several whole replays
/// without it, the session goes on from the next one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parked_message_that_never_comes_back_is_given_up_after_several_replays() {
    use nimbus_transport::SessionLock as _;
    let h = start(RetryPolicies::default(), 10).await;
    let parked = blocked_with_two_parked(&h).await;
    let lost = parked
        .receive(Duration::from_secs(10))
        .await
        .unwrap()
        .unwrap();
    parked
        .dead_letter(lost, "MaxDeliveryCountExceeded".into(), "test".into())
        .await
        .unwrap();
    parked.close().await;

    h.publish(control(MessageType::SkipRequest, "s1", "e1"))
        .await;
    assert_eq!(
        h.responses(2).await,
        pairs(&[("SkipResponse", "e1"), ("ResolutionResponse", "e3")])
    );
    assert_eq!(h.seen(), ["A", "C"]);
    assert!(h.session_state("s1").await.is_empty());
    h.shutdown.cancel();
}

/// One policy for every failure: `max_retries` retries, `base_delay` apart.
fn every_failure_retried(max_retries: u32, base_delay: Duration) -> RetryPolicies {
    RetryPolicies {
        default: Some(RetryPolicy {
            max_retries,
            base_delay,
            ..RetryPolicy::default()
        }),
        ..RetryPolicies::default()
    }
}

/// A ResubmissionRequest as the Manager sends it: the event (payload `Id`,
/// `Action`) as its content.
fn resubmission(session: &str, event_id: &str, id: &str, action: &str) -> Message {
    let mut resubmission = event_request(
        session,
        event_id,
        &serde_json::json!({ "Id": id, "Action": action }),
    );
    resubmission.message_type = MessageType::ResubmissionRequest;
    resubmission.message_id = Some(format!("resubmission-{event_id}"));
    resubmission.from = Some("Manager".to_owned());
    signed(resubmission.to_transport())
}

/// A resubmission that fails while a retry of its event is scheduled starts
/// a fresh budget (F14), and the retry scheduled before it is stale: the
/// handler runs once per attempt of the fresh budget, not once more for
/// each retry of the older chain as well.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_scheduled_before_a_failed_resubmission_is_stale() {
    let retry = every_failure_retried(2, Duration::from_millis(300));
    let h = start(retry, 10).await;
    h.publish(event("s1", "e1", "A", "fail")).await;
    assert_eq!(h.responses(1).await, pairs(&[("ErrorResponse", "e1")]));
    h.publish(resubmission("s1", "e1", "A", "fail")).await;
    // The resubmission, then the fresh budget's two retries.
    assert_eq!(
        h.responses(3).await,
        pairs(&[
            ("ErrorResponse", "e1"),
            ("ErrorResponse", "e1"),
            ("ErrorResponse", "e1")
        ])
    );
    let more = h.responses.receive(Duration::from_secs(2)).await.unwrap();
    assert!(
        more.is_none(),
        "the older chain ran on: {:?}",
        more.map(|m| NimbusMessage::from_received(&m).map(|m| m.message_type))
    );
    assert_eq!(h.seen(), ["A", "A", "A", "A"]);
    let state = h.session_state("s1").await;
    assert_eq!(state.blocked_by(), Some("e1"));
    assert_eq!(
        state.pending_retry_message_id.as_deref(),
        Some(""),
        "the budget is spent: the block waits for no retry"
    );
    h.shutdown.cancel();
}

/// A retry that runs and schedules no other (here it fails permanently and
/// is dead-lettered; the block stays, as upstream) leaves the block waiting
/// for no retry, so the operator is told to act rather than to wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_that_schedules_no_other_leaves_the_block_waiting_for_none() {
    let retry = every_failure_retried(3, Duration::from_millis(100));
    let h = start(retry, 10).await;
    h.publish(event("s1", "e1", "A", "fail-then-permanent"))
        .await;
    assert_eq!(
        h.responses(2).await,
        pairs(&[("ErrorResponse", "e1"), ("ErrorResponse", "e1")])
    );
    let state = h.session_state("s1").await;
    assert_eq!(state.blocked_by(), Some("e1"));
    assert_eq!(state.awaits_retry(), Some(false), "{state:?}");
    assert_eq!(state.pending_retry_at_ms, None);
    h.shutdown.cancel();
}

/// However a resubmission of the owner ends (handed off, failed for good),
/// the retry scheduled before it is stale: it neither runs the handler
/// again on the old payload nor rolls the outcome back, and a handoff's
/// external job is not started twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_scheduled_before_a_resubmission_that_hands_off_or_dead_letters_is_stale() {
    let retry = every_failure_retried(2, Duration::from_millis(300));
    let h = start(retry, 10).await;
    for (session, id, resubmitted, response) in [
        ("s1", "A", "handoff", "PendingHandoffResponse"),
        ("s2", "B", "permanent", "ErrorResponse"),
    ] {
        let event_id = format!("e-{session}");
        h.publish(event(session, &event_id, id, "fail")).await;
        assert_eq!(h.responses(1).await, pairs(&[("ErrorResponse", &event_id)]));
        h.publish(resubmission(session, &event_id, id, resubmitted))
            .await;
        assert_eq!(h.responses(1).await, pairs(&[(response, &event_id)]));
    }
    let more = h.responses.receive(Duration::from_secs(2)).await.unwrap();
    assert!(
        more.is_none(),
        "an older retry ran: {:?}",
        more.map(|m| NimbusMessage::from_received(&m).map(|m| m.message_type))
    );
    assert_eq!(h.seen(), ["A", "A", "B", "B"]);
    for session in ["s1", "s2"] {
        let state = h.session_state(session).await;
        assert_eq!(state.awaits_retry(), Some(false), "{session}: {state:?}");
    }
    h.shutdown.cancel();
}

/// What the follow-ups subscription (every `OrderShipped` published on the
/// endpoint's topic) holds: their message ids, taken off it.
async fn follow_ups_published(receiver: &nimbus_broker::BrokerReceiver) -> Vec<String> {
    let mut ids = Vec::new();
    while let Some(received) = receiver.receive(Duration::from_millis(300)).await.unwrap() {
        ids.push(received.message.message_id.clone().unwrap_or_default());
        receiver.complete(received).await.unwrap();
    }
    ids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follow_ups_the_broker_refuses_fail_the_event_once_instead_of_running_it_again_and_again() {
    // 64 KiB a request: three follow-ups of 30 KB pass it, two of 100 bytes
    // do not.
    let h = start_with(RetryPolicies::default(), 10, None, |t| {
        t.max_request_bytes = Some(64 << 10);
    })
    .await;
    let shipped = SubscriptionPath::new(E, "shipped");
    h.broker
        .create_subscription(&shipped, SubscriptionSettings::default())
        .await
        .unwrap();
    h.broker.delete_rule(&shipped, "$Default").await.unwrap();
    h.broker
        .create_rule(
            &shipped,
            RuleDescription::new("shipped", format!("user.To = '{FOLLOW_UP_TYPE}'")),
        )
        .await
        .unwrap();
    let follow_ups = h.broker.receiver(&shipped, SubQueue::Main).await.unwrap();

    // Within the limit, the follow-ups go out with the completion.
    h.publish(event("s0", "e0", "Z", "follow-ups-2-100")).await;
    assert_eq!(h.responses(1).await, pairs(&[("ResolutionResponse", "e0")]));
    assert_eq!(
        follow_ups_published(&follow_ups).await,
        ["Z-follow-up-0", "Z-follow-up-1"]
    );

    h.publish(event("s1", "e1", "A", "follow-ups-3-30000"))
        .await;
    h.publish(event("s1", "e2", "B", "complete")).await;
    let (kind, event_id, error) = h.response().await;
    assert_eq!((kind.as_str(), event_id.as_str()), ("ErrorResponse", "e1"));
    let content = error
        .content
        .as_ref()
        .expect("an error response has content");
    let text = serde_json::to_string(content).unwrap();
    assert!(
        text.contains(nimbus_handler::error_type::FOLLOW_UPS_REFUSED)
            && text.contains("3 follow-up(s)")
            && text.contains("more than the 65536 bytes a request may hold"),
        "the error names the follow-ups and the broker's limit: {text}"
    );
    assert_eq!(
        error
            .properties
            .get("HandlerVersion")
            .and_then(|v| v.as_str()),
        Some("sha256:test"),
        "the version that produced the follow-ups is recorded"
    );
    assert_eq!(h.responses(1).await, pairs(&[("DeferralResponse", "e2")]));
    assert_eq!(h.session_state("s1").await.blocked_by(), Some("e1"));
    assert!(
        follow_ups_published(&follow_ups).await.is_empty(),
        "no follow-up of the failed event is sent"
    );
    assert_eq!(
        h.seen(),
        ["Z", "A"],
        "the handler ran once: the message is not handed back to run again"
    );

    // The operator skips it, and the session goes on.
    h.publish(control(MessageType::SkipRequest, "s1", "e1"))
        .await;
    assert_eq!(
        h.responses(2).await,
        pairs(&[("SkipResponse", "e1"), ("ResolutionResponse", "e2")])
    );
    assert_eq!(h.seen(), ["Z", "A", "B"]);
    h.shutdown.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_endpoint_lets_go_of_its_sessions_and_runs_nothing_until_resumed() {
    // Sessions are held as long as they could be, so a pause must let go
    // of the one in hand rather than wait for it to idle out.
    let h = start_with(RetryPolicies::default(), 10, None, |t| {
        t.processor.session_idle_timeout = Duration::from_secs(600);
        t.processor.session_max_hold = Duration::from_secs(600);
    })
    .await;
    h.publish(event("s1", "e1", "A", "complete")).await;
    assert_eq!(h.responses(1).await, pairs(&[("ResolutionResponse", "e1")]));

    assert!(h.pause.set(true));
    h.publish(event("s1", "e2", "B", "complete")).await;
    h.publish(event("s2", "e3", "C", "complete")).await;
    let ran = h.responses.receive(Duration::from_secs(2)).await.unwrap();
    assert!(
        ran.is_none(),
        "an event ran while paused: {:?}",
        ran.map(|m| NimbusMessage::from_received(&m).map(|m| m.message_type))
    );
    assert_eq!(h.seen(), ["A"], "the handler ran nothing while paused");

    assert!(h.pause.set(false));
    let mut ran = h.responses(2).await;
    ran.sort();
    assert_eq!(
        ran,
        pairs(&[("ResolutionResponse", "e2"), ("ResolutionResponse", "e3")])
    );
    h.shutdown.cancel();
}

/// The embedded broker, except that a session's settlement panics (before
/// reaching the broker) while its count of panics lasts.
struct Panicky {
    broker: Arc<Broker>,
    panics: Arc<Mutex<HashMap<String, u32>>>,
}

#[derive(Debug)]
struct PanickySession {
    inner: <Broker as Transport>::Session,
    panics: Arc<Mutex<HashMap<String, u32>>>,
}

impl Transport for Panicky {
    type Session = PanickySession;
    type Receiver = <Broker as Transport>::Receiver;

    async fn publish(
        &self,
        topic: &str,
        messages: Vec<Message>,
    ) -> Result<Vec<i64>, nimbus_transport::PublishError> {
        self.broker.publish(topic, messages).await
    }

    async fn cancel_scheduled(
        &self,
        topic: &str,
        sequence_number: i64,
    ) -> Result<(), nimbus_transport::CancelError> {
        self.broker.cancel_scheduled(topic, sequence_number).await
    }

    async fn accept_session(
        &self,
        path: &SubscriptionPath,
        selector: nimbus_transport::SessionSelector,
        timeout: Duration,
    ) -> Result<PanickySession, nimbus_transport::AcceptSessionError> {
        Ok(PanickySession {
            inner: self.broker.accept_session(path, selector, timeout).await?,
            panics: Arc::clone(&self.panics),
        })
    }

    async fn receiver(
        &self,
        path: &SubscriptionPath,
        queue: SubQueue,
    ) -> Result<Self::Receiver, nimbus_transport::OpenReceiverError> {
        self.broker.receiver(path, queue).await
    }

    async fn inbox_contains(
        &self,
        scope: &str,
        key: &str,
    ) -> Result<bool, nimbus_transport::TransientError> {
        self.broker.inbox_contains(scope, key).await
    }

    async fn peek(
        &self,
        path: &SubscriptionPath,
        queue: SubQueue,
        session_id: Option<&str>,
        from_sequence_number: i64,
        max: usize,
    ) -> Result<Vec<nimbus_transport::ReceivedMessage>, nimbus_transport::ReceiveError> {
        self.broker
            .peek(path, queue, session_id, from_sequence_number, max)
            .await
    }
}

impl nimbus_transport::SessionLock for PanickySession {
    fn session_id(&self) -> &str {
        self.inner.session_id()
    }

    fn locked_until(&self) -> std::time::SystemTime {
        self.inner.locked_until()
    }

    async fn receive(
        &self,
        max_wait: Duration,
    ) -> Result<Option<nimbus_transport::ReceivedMessage>, nimbus_transport::ReceiveError> {
        self.inner.receive(max_wait).await
    }

    async fn get_state(&self) -> Result<Option<Vec<u8>>, nimbus_transport::SessionStateError> {
        self.inner.get_state().await
    }

    async fn set_state(
        &self,
        state: Option<Vec<u8>>,
    ) -> Result<(), nimbus_transport::SessionStateError> {
        self.inner.set_state(state).await
    }

    async fn renew(&self) -> Result<std::time::SystemTime, nimbus_transport::RenewError> {
        self.inner.renew().await
    }

    async fn release(
        &self,
        message: nimbus_transport::ReceivedMessage,
    ) -> Result<(), nimbus_transport::SettleError> {
        self.inner.release(message).await
    }

    async fn settle(
        &self,
        settlement: nimbus_transport::Settlement,
    ) -> Result<nimbus_transport::SettleReceipt, nimbus_transport::SettleError> {
        let panic_now = {
            let mut panics = self.panics.lock().unwrap();
            match panics.get_mut(self.inner.session_id()) {
                Some(left) if *left > 0 => {
                    *left -= 1;
                    true
                }
                _ => false,
            }
        };
        assert!(!panic_now, "scripted panic while settling");
        self.inner.settle(settlement).await
    }

    async fn close(self) {
        self.inner.close().await;
    }
}

fn panicking_settles(session: &str, times: u32) -> impl FnOnce(&mut Tuning) {
    let panics = HashMap::from([(session.to_owned(), times)]);
    move |tuning| tuning.settle_panics = Some(Arc::new(Mutex::new(panics)))
}

/// Issue 28: a panic in the host's own code on the event path ended the
/// session's task with the message unsettled, and the broker handed it
/// back without counting a delivery, to panic again, for ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_panic_while_settling_fails_the_event_as_panic_instead_of_redelivering_it() {
    let h = start_with(
        RetryPolicies::default(),
        10,
        None,
        panicking_settles("s1", 1),
    )
    .await;
    h.publish(event("s1", "e1", "A", "complete")).await;
    h.publish(event("s1", "e2", "B", "complete")).await;
    let (kind, event_id, message) = h.response().await;
    let error_type = message
        .content
        .and_then(|c| c.error_content)
        .and_then(|e| e.error_type);
    assert_eq!(
        (kind.as_str(), event_id.as_str(), error_type.as_deref()),
        ("ErrorResponse", "e1", Some("Panic"))
    );
    assert_eq!(h.responses(1).await, pairs(&[("DeferralResponse", "e2")]));
    assert_eq!(h.session_state("s1").await.blocked_by(), Some("e1"));
    assert_eq!(h.seen(), ["A"], "the handler ran once: no redelivery");
    h.shutdown.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_the_host_panics_on_twice_is_dead_lettered_with_the_reason_panic() {
    let h = start_with(
        RetryPolicies::default(),
        10,
        None,
        panicking_settles("s1", 2),
    )
    .await;
    h.publish(event("s1", "e1", "A", "complete")).await;
    let (reason, message_id) = h.next_dead_letter().await;
    assert_eq!(message_id.as_deref(), Some("msg-e1"));
    assert!(
        reason.as_deref().unwrap_or("").starts_with("Panic: "),
        "{reason:?}"
    );
    // The Resolver is told: an ErrorResponse carrying the reason.
    let (kind, event_id, notice) = h.response().await;
    assert_eq!((kind.as_str(), event_id.as_str()), ("ErrorResponse", "e1"));
    assert_eq!(notice.dead_letter_reason, reason);
    assert_eq!(h.seen(), ["A"], "the handler ran once");
    h.publish(event("s1", "e2", "B", "complete")).await;
    assert_eq!(h.responses(1).await, pairs(&[("ResolutionResponse", "e2")]));
    h.shutdown.cancel();
}

/// Issue 28: `now + d` with a handler's `u64::MAX` ms overflowed the
/// timestamp formatter; the event was redelivered to panic again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handoff_expected_within_forever_is_expected_by_the_max_delay() {
    let h = start(RetryPolicies::default(), 10).await;
    let before = std::time::SystemTime::now();
    h.publish(event("s1", "e1", "A", "handoff-forever")).await;
    let (kind, _, response) = h.response().await;
    let after = std::time::SystemTime::now();
    assert_eq!(kind, "PendingHandoffResponse");
    let expected_by = response.expected_by.expect("an ExpectedBy");
    // Written with 100 ns ticks, so up to one tick earlier than computed.
    assert!(
        expected_by + Duration::from_micros(1) >= before + nimbus_engine::MAX_DELAY
            && expected_by <= after + nimbus_engine::MAX_DELAY,
        "{}",
        nimbus_wire::format_round_trip(expected_by)
    );
    assert_eq!(h.session_state("s1").await.blocked_by(), Some("e1"));
    assert_eq!(h.seen(), ["A"]);
    h.shutdown.cancel();
}

/// Issue 28: a retry scheduled by a handler's `u64::MAX` ms retry-after
/// panicked the engine and, from its session state, the operator API.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_after_forever_schedules_the_retry_at_the_max_delay() {
    let h = start(every_failure_retried(3, Duration::from_secs(1)), 10).await;
    let before = std::time::SystemTime::now();
    h.publish(event("s1", "e1", "A", "fail-retry-after-forever"))
        .await;
    assert_eq!(h.responses(1).await, pairs(&[("ErrorResponse", "e1")]));
    let after = std::time::SystemTime::now();
    let state = h.session_state("s1").await;
    assert_eq!(state.blocked_by(), Some("e1"));
    let retry_at = state.retry_at().expect("a retry is scheduled");
    // Kept in whole milliseconds.
    assert!(
        retry_at + Duration::from_millis(1) >= before + nimbus_engine::MAX_DELAY
            && retry_at <= after + nimbus_engine::MAX_DELAY,
        "{}",
        nimbus_wire::format_round_trip(retry_at)
    );
    h.publish(event("s1", "e2", "B", "complete")).await;
    assert_eq!(h.responses(1).await, pairs(&[("DeferralResponse", "e2")]));
    assert_eq!(h.seen(), ["A"]);
    h.shutdown.cancel();
}
