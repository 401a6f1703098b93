//! The Resolver consumer on the real embedded broker: NimBus messages sent
//! the way the engine sends them, through the forwarding rules of the
//! endpoint topology, recorded in a real SQLite store.

#![allow(clippy::unwrap_used, reason = "tests")]

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nimbus_broker::{Broker, BrokerOptions};
use nimbus_resolver::{
    Consumed, EventDetail, EventFilter, EventRecord, Heartbeat, Observation, Progress, Recorded,
    ResolverError, ResolverSettings, ResolverStore, SqliteResolverStore, Status, StoreError,
    UNRECORDABLE_REASON, run_resolver,
};
use nimbus_transport::{
    Admin, PropertyValue, Receiver, RuleDescription, SessionLock, SessionSelector, SubQueue,
    SubscriptionPath, SubscriptionSettings, TopicSettings, Transport,
};
use nimbus_wire::build::{self, Handoff, ResponseTimes};
use nimbus_wire::{EventContent, Failure, MessageContent, NimbusMessage};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// A safety net so a broken consumer fails the test instead of hanging it;
/// nothing asserts on time.
const PATIENCE: Duration = Duration::from_secs(60);

use crate::support;
use support::forwarded;

/// The Resolver topic and the topology of endpoint `endpoint`, as
/// nimbus-platform.md §2.3 provisions them (only what these tests use).
async fn provision(broker: &Broker, endpoints: &[&str]) {
    let resolver = SubscriptionPath::new("Resolver", "Resolver");
    broker
        .create_topic("Resolver", TopicSettings::default())
        .await
        .unwrap();
    broker
        .create_subscription(&resolver, SubscriptionSettings::sessions())
        .await
        .unwrap();
    for endpoint in endpoints {
        broker
            .create_topic(endpoint, TopicSettings::default())
            .await
            .unwrap();
        let own = SubscriptionPath::new(*endpoint, *endpoint);
        broker
            .create_subscription(&own, SubscriptionSettings::sessions())
            .await
            .unwrap();
        broker.delete_rule(&own, "$Default").await.unwrap();
        broker
            .create_rule(
                &own,
                RuleDescription::new("to-E", format!("user.To = '{endpoint}'")),
            )
            .await
            .unwrap();
        let forward = SubscriptionPath::new(*endpoint, "Resolver");
        broker
            .create_subscription(&forward, SubscriptionSettings::forwarding_to("Resolver"))
            .await
            .unwrap();
        broker.delete_rule(&forward, "$Default").await.unwrap();
        broker
            .create_rule(
                &forward,
                RuleDescription::new("from-E", "user.To = 'Resolver'")
                    .with_action(format!("SET user.From = '{endpoint}'")),
            )
            .await
            .unwrap();
        broker
            .create_rule(
                &forward,
                RuleDescription::new("to-E", format!("user.To = '{endpoint}'")),
            )
            .await
            .unwrap();
    }
}

struct Harness {
    _dir: tempfile::TempDir,
    broker: Arc<Broker>,
    store: Arc<SqliteResolverStore>,
    progress: mpsc::UnboundedReceiver<Progress>,
    shutdown: CancellationToken,
    consumer: tokio::task::JoinHandle<Result<(), ResolverError>>,
}

impl Harness {
    /// Active and dead-lettered messages left on `Resolver/Resolver`.
    async fn resolver_counts(&self) -> (u64, u64) {
        let resolver = self
            .broker
            .get_subscription(&SubscriptionPath::new("Resolver", "Resolver"))
            .await
            .unwrap()
            .unwrap();
        (
            resolver.active_message_count,
            resolver.dead_letter_message_count,
        )
    }

    async fn start(endpoints: &[&str]) -> Harness {
        Harness::start_with(endpoints, |store| store).await
    }

    async fn start_with(
        endpoints: &[&str],
        wrap: impl FnOnce(Arc<SqliteResolverStore>) -> Arc<dyn ResolverStore>,
    ) -> Harness {
        Harness::start_tuned(endpoints, wrap, |_| {}).await
    }

    async fn start_tuned(
        endpoints: &[&str],
        wrap: impl FnOnce(Arc<SqliteResolverStore>) -> Arc<dyn ResolverStore>,
        tune: impl FnOnce(&mut ResolverSettings),
    ) -> Harness {
        let dir = tempfile::tempdir().unwrap();
        let broker = Arc::new(
            Broker::open(BrokerOptions::new(dir.path().join("broker")))
                .await
                .unwrap(),
        );
        provision(&broker, endpoints).await;
        let store = Arc::new(SqliteResolverStore::open(&dir.path().join("resolver.db")).unwrap());
        let (tx, progress) = mpsc::unbounded_channel();
        let mut settings = ResolverSettings {
            max_concurrent_sessions: 8,
            accept_timeout: Duration::from_millis(200),
            session_idle_timeout: Duration::from_millis(50),
            store_backoff: Duration::ZERO,
            progress: Some(tx),
            ..ResolverSettings::default()
        };
        tune(&mut settings);
        let shutdown = CancellationToken::new();
        let consumer = tokio::spawn(run_resolver(
            Arc::clone(&broker),
            wrap(Arc::clone(&store)),
            settings,
            shutdown.clone(),
        ));
        Harness {
            _dir: dir,
            broker,
            store,
            progress,
            shutdown,
            consumer,
        }
    }

    async fn send(&self, topic: &str, message: &NimbusMessage) {
        self.broker
            .publish(topic, vec![message.to_transport()])
            .await
            .unwrap();
    }

    /// Publishes `messages` as one unit: they are all in the session before
    /// the consumer can take any of them.
    async fn send_all(&self, topic: &str, messages: &[NimbusMessage]) {
        self.broker
            .publish(
                topic,
                messages.iter().map(NimbusMessage::to_transport).collect(),
            )
            .await
            .unwrap();
    }

    async fn next(&mut self) -> Progress {
        tokio::time::timeout(PATIENCE, self.progress.recv())
            .await
            .expect("the consumer reports every message")
            .expect("the consumer is running")
    }

    async fn outcomes(&mut self, n: usize) -> Vec<Consumed> {
        let mut got = Vec::with_capacity(n);
        for _ in 0..n {
            got.push(self.next().await.outcome);
        }
        got
    }

    fn event(&self, event_id: &str) -> EventDetail {
        let mut found = self.store.event(event_id).unwrap();
        assert_eq!(found.len(), 1, "{event_id} at one endpoint");
        found.remove(0)
    }

    async fn stop(self) {
        self.shutdown.cancel();
        self.consumer.await.unwrap().unwrap();
    }
}

/// A response as the engine sends it: on the endpoint's own topic, `To =
/// Resolver`, no `From` (the forwarding rule stamps it), `HandlerVersion`.
fn as_engine_sends(mut response: NimbusMessage) -> NimbusMessage {
    response.from = None;
    response.properties.insert(
        "HandlerVersion".into(),
        PropertyValue::String("sha256:v1".into()),
    );
    response
}

fn recorded(outcome: &Consumed) -> (&str, &str, &Recorded) {
    match outcome {
        Consumed::Recorded {
            endpoint,
            event_id,
            recorded,
        } => (endpoint, event_id, recorded),
        other => panic!("expected a recorded message, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_copy_and_error_response_arrive_through_the_rules_and_are_recorded() {
    let mut h = Harness::start(&["billing"]).await;
    let request = forwarded("e1", "order-1", "msg-pub-1");
    h.send("billing", &request).await;
    let failure = Failure::new("PartnerUnavailable", "credit check said 503");
    let times = ResponseTimes {
        queue_time_ms: Some(12),
        processing_time_ms: Some(3),
    };
    h.send(
        "billing",
        &as_engine_sends(build::error_response(&request, times, &failure)),
    )
    .await;

    let outcomes = h.outcomes(2).await;
    assert_eq!(
        recorded(&outcomes[0]),
        (
            "billing",
            "e1",
            &Recorded::Applied {
                status: Status::Pending
            }
        )
    );
    assert_eq!(
        recorded(&outcomes[1]),
        (
            "billing",
            "e1",
            &Recorded::Applied {
                status: Status::Failed
            }
        )
    );

    let detail = h.event("e1");
    let record = &detail.record;
    assert_eq!(record.status, Status::Failed);
    assert_eq!(record.error_type.as_deref(), Some("PartnerUnavailable"));
    assert_eq!(record.error_text.as_deref(), Some("credit check said 503"));
    assert_eq!(record.handler_version.as_deref(), Some("sha256:v1"));
    assert_eq!(
        (record.queue_time_ms, record.processing_time_ms),
        (Some(12), Some(3))
    );
    assert_eq!(record.session_id.as_deref(), Some("order-1"));
    assert_eq!(record.correlation_id.as_deref(), Some("corr-7"));
    assert_eq!(record.payload.as_deref(), Some(r#"{"OrderId":"o-1001"}"#));
    // The coordinates a control message needs.
    assert_eq!(record.request_message_id.as_deref(), Some("msg-pub-1"));
    assert_eq!(record.request_from.as_deref(), Some("storefront"));
    assert_eq!(record.originating_message_id, None);
    assert_eq!(record.originating_from.as_deref(), Some("storefront"));
    let history: Vec<_> = detail
        .history
        .iter()
        .map(|e| (e.message_type.as_str(), e.from.as_deref()))
        .collect();
    assert_eq!(
        history,
        [
            ("EventRequest", Some("storefront")),
            ("ErrorResponse", Some("billing"))
        ],
        "the response's From was stamped by the forwarding rule"
    );

    // The endpoint received its own copy of the request, untouched.
    let session = h
        .broker
        .accept_session(
            &SubscriptionPath::new("billing", "billing"),
            SessionSelector::Named("order-1".into()),
            PATIENCE,
        )
        .await
        .unwrap();
    let own = session.receive(PATIENCE).await.unwrap().unwrap();
    assert_eq!(own.message.message_id.as_deref(), Some("msg-pub-1"));
    drop(session);
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn coordinates_come_from_a_response_when_no_request_copy_was_seen() {
    let mut h = Harness::start(&["billing"]).await;
    let request = forwarded("e2", "order-2", "msg-pub-2");
    h.send(
        "billing",
        &as_engine_sends(build::resolution_response(
            &request,
            ResponseTimes::default(),
        )),
    )
    .await;
    h.outcomes(1).await;
    let record = h.event("e2").record;
    assert_eq!(record.status, Status::Completed);
    assert_eq!(record.request_message_id.as_deref(), Some("msg-pub-2"));
    assert_eq!(record.request_from.as_deref(), Some("storefront"));

    // The request copy, arriving late, is refused as a status but is the
    // authority on coordinates.
    h.send("billing", &request).await;
    let outcomes = h.outcomes(1).await;
    assert!(matches!(
        recorded(&outcomes[0]).2,
        Recorded::Refused {
            current: Status::Completed,
            ..
        }
    ));
    let record = h.event("e2").record;
    assert_eq!(record.status, Status::Completed);
    assert_eq!(record.request_message_id.as_deref(), Some("msg-pub-2"));
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pending_handoff_and_dead_letter_notification_set_their_statuses() {
    let mut h = Harness::start(&["billing"]).await;
    let request = forwarded("e3", "order-3", "msg-pub-3");
    h.send("billing", &request).await;
    let handoff = Handoff {
        reason: "DMF import".into(),
        external_job_id: Some("job-42".into()),
        expected_by: None,
    };
    h.send(
        "billing",
        &as_engine_sends(build::pending_handoff_response(
            &request,
            ResponseTimes::default(),
            &handoff,
        )),
    )
    .await;
    h.outcomes(2).await;
    let record = h.event("e3").record;
    assert_eq!(record.status, Status::Pending);
    assert_eq!(record.sub_status.as_deref(), Some("Handoff"));
    assert_eq!(record.handoff_reason.as_deref(), Some("DMF import"));
    assert_eq!(record.external_job_id.as_deref(), Some("job-42"));

    let other = forwarded("e4", "order-4", "msg-pub-4");
    h.send(
        "billing",
        &as_engine_sends(build::dead_letter_notification(
            &other,
            ResponseTimes::default(),
            "MaxDeliveryCountExceeded",
            "delivered 10 times",
            None,
        )),
    )
    .await;
    h.outcomes(1).await;
    let record = h.event("e4").record;
    assert_eq!(record.status, Status::DeadLettered);
    assert_eq!(
        record.dead_letter_reason.as_deref(),
        Some("MaxDeliveryCountExceeded")
    );
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_that_cannot_be_recorded_are_dead_lettered_with_the_defect_named() {
    let mut h = Harness::start(&["billing"]).await;
    let mut garbage = forwarded("e5", "s-bad", "bad-body").to_transport();
    garbage.body = b"{not json".to_vec();
    h.broker.publish("Resolver", vec![garbage]).await.unwrap();
    let mut anonymous = forwarded("e6", "s-bad", "no-event-id");
    anonymous.event_id = None;
    h.send("Resolver", &anonymous).await;
    let mut nowhere = build::resolution_response(
        &forwarded("e7", "s-bad", "no-from"),
        ResponseTimes::default(),
    );
    nowhere.from = None;
    nowhere.message_id = Some("no-from".into());
    h.send("Resolver", &nowhere).await;

    let outcomes = h.outcomes(3).await;
    for outcome in &outcomes {
        assert!(matches!(outcome, Consumed::DeadLettered(_)), "{outcome:?}");
    }
    assert!(h.store.events(&EventFilter::default()).unwrap().is_empty());

    let dlq = h
        .broker
        .receiver(
            &SubscriptionPath::new("Resolver", "Resolver"),
            SubQueue::DeadLetter,
        )
        .await
        .unwrap();
    let mut descriptions = Vec::new();
    while let Some(m) = dlq.receive(Duration::from_millis(100)).await.unwrap() {
        assert_eq!(m.dead_letter_reason.as_deref(), Some(UNRECORDABLE_REASON));
        descriptions.push((
            m.message.message_id.clone().unwrap(),
            m.dead_letter_description.clone().unwrap(),
        ));
    }
    descriptions.sort();
    assert_eq!(descriptions.len(), 3, "{descriptions:?}");
    assert_eq!(descriptions[0].0, "bad-body");
    assert!(
        descriptions[0].1.contains("cannot be decoded"),
        "{descriptions:?}"
    );
    assert_eq!(descriptions[1].0, "no-event-id");
    assert!(
        descriptions[1].1.contains("EventId is required"),
        "{descriptions:?}"
    );
    assert_eq!(descriptions[2].0, "no-from");
    assert!(
        descriptions[2].1.contains("without From"),
        "{descriptions:?}"
    );
    drop(dlq);
    h.stop().await;
}

/// The `ResolverStore` methods a test store passes straight to its `inner`
/// SQLite store (reads and heartbeats); the write path is what each test
/// store scripts.
macro_rules! forward_reads_to_inner {
    () => {
        fn event(&self, event_id: &str) -> Result<Vec<EventDetail>, StoreError> {
            self.inner.event(event_id)
        }
        fn events_of_message(&self, message_id: &str) -> Result<Vec<EventDetail>, StoreError> {
            self.inner.events_of_message(message_id)
        }
        fn events(&self, filter: &EventFilter) -> Result<Vec<EventRecord>, StoreError> {
            self.inner.events(filter)
        }
        fn record_heartbeat(&self, heartbeat: &Heartbeat) -> Result<(), StoreError> {
            self.inner.record_heartbeat(heartbeat)
        }
        fn heartbeats(&self) -> Result<Vec<Heartbeat>, StoreError> {
            self.inner.heartbeats()
        }
    };
}

/// A store that fails its first `failures` records, then works.
struct FlakyStore {
    inner: Arc<SqliteResolverStore>,
    failures: AtomicU32,
}

impl ResolverStore for FlakyStore {
    fn record(&self, observation: &Observation) -> Result<Recorded, StoreError> {
        let left = self.failures.load(Ordering::SeqCst);
        if left > 0 {
            self.failures.store(left - 1, Ordering::SeqCst);
            return Err(StoreError::Corrupt("injected failure".into()));
        }
        self.inner.record(observation)
    }
    forward_reads_to_inner!();
    fn refused_writes(&self) -> u64 {
        self.inner.refused_writes()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_failure_abandons_the_message_and_its_redelivery_is_recorded_before_the_next() {
    let mut h = Harness::start_with(&["billing"], |store| {
        Arc::new(FlakyStore {
            inner: store,
            failures: AtomicU32::new(2),
        })
    })
    .await;
    let request = forwarded("e8", "order-8", "msg-pub-8");
    let response = as_engine_sends(build::resolution_response(
        &request,
        ResponseTimes::default(),
    ));
    // Published together, so the consumer takes both in one pipelined run
    // and the two injected failures (the batch, then the request alone)
    // land on the first delivery.
    h.send_all("billing", &[request, response]).await;
    let outcomes = h.outcomes(4).await;
    assert!(
        matches!(outcomes[0], Consumed::Abandoned(_)),
        "{outcomes:?}"
    );
    assert!(
        matches!(outcomes[1], Consumed::Abandoned(_)),
        "{outcomes:?}"
    );
    assert_eq!(
        recorded(&outcomes[2]).2,
        &Recorded::Applied {
            status: Status::Pending
        },
        "the abandoned request is redelivered first in its session"
    );
    assert_eq!(
        recorded(&outcomes[3]).2,
        &Recorded::Applied {
            status: Status::Completed
        }
    );
    let detail = h.event("e8");
    assert_eq!(detail.history.len(), 2);
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeat_answers_are_noted_per_endpoint_and_probe_copies_are_not_events() {
    let mut h = Harness::start(&["billing"]).await;
    let probe = NimbusMessage {
        session_id: Some("Heartbeat".into()),
        event_type_id: Some("NimBus.Platform.Heartbeat".into()),
        from: Some("Manager".into()),
        content: Some(MessageContent::event(EventContent::new(
            "NimBus.Platform.Heartbeat",
            "{}",
        ))),
        ..forwarded("hb-1", "Heartbeat", "probe-1")
    };
    h.send("billing", &probe).await;
    h.send(
        "billing",
        &as_engine_sends(build::heartbeat_response(
            &probe,
            ResponseTimes::default(),
            std::time::SystemTime::now(),
            "nimbus-test",
        )),
    )
    .await;
    let outcomes = h.outcomes(2).await;
    assert!(matches!(outcomes[0], Consumed::Ignored(_)), "{outcomes:?}");
    assert_eq!(
        outcomes[1],
        Consumed::Heartbeat {
            endpoint: "billing".into()
        }
    );
    assert!(h.store.event("hb-1").unwrap().is_empty());
    let beats = h.store.heartbeats().unwrap();
    assert_eq!(beats.len(), 1);
    assert_eq!(beats[0].endpoint, "billing");
    assert_eq!(beats[0].message_type, "ResolutionResponse");
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_holding_an_idle_session_lets_it_go_for_a_session_with_a_message() {
    // One worker, and idle and hold times far beyond the test's patience:
    // only the hand-over lets `b`, then `a` again, in while the other is
    // held idle.
    let mut h = Harness::start_tuned(
        &["billing"],
        |store| store,
        |settings| {
            settings.max_concurrent_sessions = 1;
            settings.session_idle_timeout = Duration::from_secs(600);
            settings.session_max_hold = Duration::from_secs(600);
        },
    )
    .await;
    for (event, session) in [("e1", "a"), ("e2", "b"), ("e3", "a")] {
        h.send("billing", &forwarded(event, session, &format!("m-{event}")))
            .await;
        let outcome = h.next().await.outcome;
        assert_eq!(recorded(&outcome).1, event);
    }
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_sessions_at_once_keep_each_sessions_order() {
    let mut h = Harness::start(&["billing", "shipping"]).await;
    const SESSIONS: usize = 40;
    for s in 0..SESSIONS {
        let request = forwarded(&format!("ev-{s}"), &format!("s-{s}"), &format!("m-{s}"));
        let failure = Failure::new("Boom", "first attempt failed");
        let mut resubmit = build::resubmission_request(&request, "billing", None);
        resubmit.message_id = Some(format!("resubmit-{s}"));
        // Request, failure, resubmit, success: any reordering inside the
        // session would leave a different status or history.
        h.send("billing", &request).await;
        h.send(
            "billing",
            &as_engine_sends(build::error_response(
                &request,
                ResponseTimes::default(),
                &failure,
            )),
        )
        .await;
        h.send("billing", &resubmit).await;
        h.send(
            "billing",
            &as_engine_sends(build::resolution_response(
                &resubmit,
                ResponseTimes::default(),
            )),
        )
        .await;
    }
    // And one event at a second endpoint, with the same id as one above.
    let mut elsewhere = forwarded("ev-0", "s-0", "m-x");
    elsewhere.to = Some("shipping".into());
    h.send("shipping", &elsewhere).await;

    let outcomes = h.outcomes(SESSIONS * 4 + 1).await;
    assert!(
        outcomes
            .iter()
            .all(|o| matches!(o, Consumed::Recorded { .. }))
    );
    for s in 1..SESSIONS {
        let detail = h.event(&format!("ev-{s}"));
        assert_eq!(detail.record.status, Status::Completed, "session {s}");
        let kinds: Vec<_> = detail
            .history
            .iter()
            .map(|e| e.message_type.as_str())
            .collect();
        assert_eq!(
            kinds,
            [
                "EventRequest",
                "ErrorResponse",
                "ResubmissionRequest",
                "ResolutionResponse"
            ],
            "session {s}"
        );
        assert!(
            detail.history.iter().all(|e| e.refused.is_none()),
            "session {s}"
        );
    }
    let both = h.store.event("ev-0").unwrap();
    let endpoints: Vec<_> = both.iter().map(|d| d.record.endpoint.as_str()).collect();
    assert_eq!(endpoints, ["billing", "shipping"]);
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_resolver_subscription_stops_the_consumer_with_a_named_error() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Arc::new(
        Broker::open(BrokerOptions::new(dir.path().join("broker")))
            .await
            .unwrap(),
    );
    let store = Arc::new(SqliteResolverStore::open_in_memory().unwrap());
    let result = tokio::time::timeout(
        PATIENCE,
        run_resolver(
            broker,
            store,
            ResolverSettings::default(),
            CancellationToken::new(),
        ),
    )
    .await
    .expect("stops on its own");
    let error = result.expect_err("no subscription");
    assert!(matches!(error, ResolverError::Subscription { .. }));
    assert!(error.to_string().contains("Resolver/Resolver"), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_shutdown_messages_wait_on_the_bus_and_the_next_run_records_them() {
    let h = Harness::start(&["billing"]).await;
    h.shutdown.cancel();
    let broker = Arc::clone(&h.broker);
    let store = Arc::clone(&h.store);
    h.consumer.await.unwrap().expect("a clean stop");
    broker
        .publish(
            "billing",
            vec![forwarded("e9", "order-9", "msg-9").to_transport()],
        )
        .await
        .unwrap();
    let waiting = broker
        .get_subscription(&SubscriptionPath::new("Resolver", "Resolver"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(waiting.active_message_count, 1);
    assert!(store.event("e9").unwrap().is_empty());

    let (tx, mut progress) = mpsc::unbounded_channel();
    let shutdown = CancellationToken::new();
    let rerun = tokio::spawn(run_resolver(
        Arc::clone(&broker),
        Arc::clone(&store) as Arc<dyn ResolverStore>,
        ResolverSettings {
            progress: Some(tx),
            session_idle_timeout: Duration::from_millis(50),
            ..ResolverSettings::default()
        },
        shutdown.clone(),
    ));
    let got = tokio::time::timeout(PATIENCE, progress.recv())
        .await
        .unwrap()
        .unwrap();
    assert!(matches!(got.outcome, Consumed::Recorded { .. }), "{got:?}");
    assert_eq!(store.event("e9").unwrap()[0].record.status, Status::Pending);
    shutdown.cancel();
    rerun.await.unwrap().unwrap();
}

/// A store that always fails, and says when it was asked.
struct DownStore {
    inner: Arc<SqliteResolverStore>,
    asked: mpsc::UnboundedSender<()>,
}

impl ResolverStore for DownStore {
    fn record(&self, _: &Observation) -> Result<Recorded, StoreError> {
        let _ = self.asked.send(());
        Err(StoreError::Corrupt("the database is down".into()))
    }
    forward_reads_to_inner!();
    fn refused_writes(&self) -> u64 {
        0
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_during_a_store_backoff_releases_the_message_without_counting_a_delivery() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Arc::new(
        Broker::open(BrokerOptions::new(dir.path().join("broker")))
            .await
            .unwrap(),
    );
    provision(&broker, &["billing"]).await;
    let (asked, mut was_asked) = mpsc::unbounded_channel();
    let store = Arc::new(DownStore {
        inner: Arc::new(SqliteResolverStore::open_in_memory().unwrap()),
        asked,
    });
    let shutdown = CancellationToken::new();
    let consumer = tokio::spawn(run_resolver(
        Arc::clone(&broker),
        store,
        ResolverSettings {
            // Far longer than the test may take: only shutdown ends it.
            store_backoff: Duration::from_secs(3600),
            max_store_backoff: Duration::from_secs(3600),
            ..ResolverSettings::default()
        },
        shutdown.clone(),
    ));
    broker
        .publish(
            "billing",
            vec![forwarded("e10", "order-10", "msg-10").to_transport()],
        )
        .await
        .unwrap();
    tokio::time::timeout(PATIENCE, was_asked.recv())
        .await
        .unwrap()
        .unwrap();
    shutdown.cancel();
    tokio::time::timeout(PATIENCE, consumer)
        .await
        .expect("shutdown does not wait for the backoff")
        .unwrap()
        .unwrap();

    let session = broker
        .accept_session(
            &SubscriptionPath::new("Resolver", "Resolver"),
            SessionSelector::Named("order-10".into()),
            PATIENCE,
        )
        .await
        .unwrap();
    let kept = session.receive(PATIENCE).await.unwrap().unwrap();
    assert_eq!(kept.message.message_id.as_deref(), Some("msg-10"));
    assert_eq!(kept.delivery_count, 1, "released, not abandoned");
}

/// A store that fails every record of one message (a batch holding it fails
/// whole, as its transaction would) until `failures` ran out, and logs what
/// it committed.
struct Scripted {
    inner: Arc<SqliteResolverStore>,
    poisoned: String,
    failures: AtomicU32,
    /// Message ids whose record changed the store, in commit order.
    committed: Mutex<Vec<String>>,
    /// The size of every committed batch.
    batches: Mutex<Vec<usize>>,
    /// When set, the first batch holding the poisoned message says so on
    /// the first channel and waits on the second before it goes on.
    hold: Mutex<Option<(std::sync::mpsc::Sender<()>, std::sync::mpsc::Receiver<()>)>>,
}

impl Scripted {
    fn new(inner: Arc<SqliteResolverStore>, poisoned: &str, failures: u32) -> Scripted {
        Scripted {
            inner,
            poisoned: poisoned.to_owned(),
            failures: AtomicU32::new(failures),
            committed: Mutex::new(Vec::new()),
            batches: Mutex::new(Vec::new()),
            hold: Mutex::new(None),
        }
    }

    fn committed(&self) -> Vec<String> {
        self.committed.lock().unwrap().clone()
    }

    fn batches(&self) -> Vec<usize> {
        self.batches.lock().unwrap().clone()
    }
}

impl ResolverStore for Scripted {
    fn record(&self, observation: &Observation) -> Result<Recorded, StoreError> {
        self.record_batch(std::slice::from_ref(observation))
            .map(|mut outcomes| outcomes.remove(0))
    }
    fn record_batch(&self, batch: &[Observation]) -> Result<Vec<Recorded>, StoreError> {
        let holds_poison = batch
            .iter()
            .any(|o| o.message_id.as_deref() == Some(self.poisoned.as_str()));
        if holds_poison {
            let hold = self.hold.lock().unwrap().take();
            if let Some((entered, release)) = hold {
                entered.send(()).unwrap();
                release.recv().unwrap();
            }
        }
        if holds_poison
            && self
                .failures
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok()
        {
            return Err(StoreError::Corrupt(format!(
                "injected failure on {}",
                self.poisoned
            )));
        }
        let outcomes = self.inner.record_batch(batch)?;
        let mut committed = self.committed.lock().unwrap();
        for (observation, outcome) in batch.iter().zip(&outcomes) {
            if *outcome != Recorded::AlreadyRecorded {
                committed.push(observation.message_id.clone().unwrap());
            }
        }
        self.batches.lock().unwrap().push(batch.len());
        Ok(outcomes)
    }
    forward_reads_to_inner!();
    fn refused_writes(&self) -> u64 {
        self.inner.refused_writes()
    }
}

/// Starts a harness over a [`Scripted`] store, and hands that store out.
async fn scripted_harness(
    poisoned: &str,
    failures: u32,
    tune: impl FnOnce(&mut ResolverSettings),
) -> (Harness, Arc<Scripted>) {
    let mut handle = None;
    let h = Harness::start_tuned(
        &["billing"],
        |inner| {
            let scripted = Arc::new(Scripted::new(inner, poisoned, failures));
            handle = Some(Arc::clone(&scripted));
            scripted
        },
        tune,
    )
    .await;
    (h, handle.unwrap())
}

/// The request copies `m-0`, `m-1`, ... of events `ev-0`, `ev-1`, ... in one
/// session.
fn requests(session: &str, n: usize) -> Vec<NimbusMessage> {
    (0..n)
        .map(|i| forwarded(&format!("ev-{i}"), session, &format!("m-{i}")))
        .collect()
}

fn ids(outcomes: &[Progress]) -> Vec<String> {
    outcomes
        .iter()
        .map(|p| p.message_id.clone().unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sessions_waiting_messages_share_one_commit_and_are_recorded_in_order() {
    let (mut h, store) = scripted_harness("none", 0, |_| {}).await;
    const EVENTS: usize = 30;
    // Request then resolution per event: recorded out of order, a request
    // would be refused as stale behind its own resolution.
    let mut messages = Vec::new();
    for request in requests("order-p", EVENTS) {
        let mut resolution = as_engine_sends(build::resolution_response(
            &request,
            ResponseTimes::default(),
        ));
        resolution.message_id = Some(format!(
            "r-{}",
            &request.message_id.as_deref().unwrap()[2..]
        ));
        messages.push(request);
        messages.push(resolution);
    }
    let sent: Vec<String> = messages
        .iter()
        .map(|m| m.message_id.clone().unwrap())
        .collect();
    h.send_all("billing", &messages).await;

    let mut progress = Vec::new();
    for _ in 0..2 * EVENTS {
        let p = h.next().await;
        assert!(
            store.committed().contains(p.message_id.as_ref().unwrap()),
            "{p:?} was settled before its record committed"
        );
        progress.push(p);
    }
    assert!(
        progress
            .iter()
            .all(|p| matches!(p.outcome, Consumed::Recorded { .. })),
        "{progress:?}"
    );
    assert_eq!(ids(&progress), sent, "settled in session order");
    assert_eq!(store.committed(), sent, "recorded in session order");
    // One session, so only pipelining puts more than one of its messages
    // in a commit: all 60 were waiting, and the consumer took them at once.
    assert_eq!(store.batches(), [2 * EVENTS]);
    for i in 0..EVENTS {
        let detail = h.event(&format!("ev-{i}"));
        assert_eq!(detail.record.status, Status::Completed, "ev-{i}");
        let kinds: Vec<_> = detail
            .history
            .iter()
            .map(|e| (e.message_type.as_str(), e.refused.is_some()))
            .collect();
        assert_eq!(
            kinds,
            [("EventRequest", false), ("ResolutionResponse", false)],
            "ev-{i}"
        );
    }
    assert_eq!(
        h.resolver_counts().await.0,
        0,
        "every message was completed"
    );
    h.stop().await;
}

/// One worker, one message per batch; session `a` has ten request copies
/// waiting and `b` one, published between `a`'s fifth and sixth: the order
/// the store recorded them in.
async fn one_worker_two_sessions(max_hold: Duration) -> Vec<String> {
    let (mut h, store) = scripted_harness("none", 0, |settings| {
        settings.max_concurrent_sessions = 1;
        settings.max_in_flight_per_session = 1;
        settings.session_max_hold = max_hold;
    })
    .await;
    let a = |i: usize| forwarded(&format!("a{i}"), "a", &format!("a{i}"));
    let mut messages: Vec<NimbusMessage> = (1..=5).map(a).collect();
    messages.push(forwarded("b1", "b", "b1"));
    messages.extend((6..=10).map(a));
    // One publish: every message is waiting before the worker takes a
    // session.
    h.send_all("billing", &messages).await;
    for _ in 0..messages.len() {
        h.next().await;
    }
    h.stop().await;
    store.committed()
}

/// A busy session is released after its hold time, and the next accept
/// takes the session whose oldest message waited longest: with a zero hold
/// the one worker records in publish order across sessions; with a long
/// hold, `b` waits until `a` has nothing left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_session_is_released_after_its_hold_so_waiting_sessions_get_recorded() {
    let in_publish_order = [
        "a1", "a2", "a3", "a4", "a5", "b1", "a6", "a7", "a8", "a9", "a10",
    ];
    assert_eq!(
        one_worker_two_sessions(Duration::ZERO).await,
        in_publish_order
    );
    let starved = [
        "a1", "a2", "a3", "a4", "a5", "a6", "a7", "a8", "a9", "a10", "b1",
    ];
    assert_eq!(
        one_worker_two_sessions(Duration::from_secs(3600)).await,
        starved
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_in_flight_per_session_records_one_message_per_commit() {
    let (mut h, store) = scripted_harness("none", 0, |settings| {
        settings.max_in_flight_per_session = 1;
    })
    .await;
    h.send_all("billing", &requests("order-1", 5)).await;
    let progress: Vec<Progress> = {
        let mut got = Vec::new();
        for _ in 0..5 {
            got.push(h.next().await);
        }
        got
    };
    assert_eq!(ids(&progress), ["m-0", "m-1", "m-2", "m-3", "m-4"]);
    assert_eq!(store.batches(), [1, 1, 1, 1, 1]);
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_failure_inside_a_pipelined_run_abandons_it_and_the_rest_follow_in_order() {
    // Two failures: the run's batch, then `m-5` on its own in the retry one
    // by one; its redelivery is recorded.
    let (mut h, store) = scripted_harness("m-5", 2, |_| {}).await;
    h.send_all("billing", &requests("order-f", 10)).await;

    let mut progress = Vec::new();
    while progress
        .iter()
        .filter(|p: &&Progress| matches!(p.outcome, Consumed::Recorded { .. }))
        .count()
        < 10
    {
        let p = h.next().await;
        if matches!(p.outcome, Consumed::Recorded { .. }) {
            assert!(
                store.committed().contains(p.message_id.as_ref().unwrap()),
                "{p:?} was completed before its record committed"
            );
        }
        progress.push(p);
    }
    let summary: Vec<(String, &str)> = progress
        .iter()
        .map(|p| {
            let kind = match &p.outcome {
                Consumed::Recorded { .. } => "recorded",
                Consumed::Abandoned(why) if why.contains("released") => "released",
                Consumed::Abandoned(why) => {
                    assert!(why.contains("injected failure on m-5"), "{why}");
                    "abandoned"
                }
                other => panic!("unexpected {other:?}"),
            };
            (p.message_id.clone().unwrap(), kind)
        })
        .collect();
    let expected: Vec<(String, &str)> = (0..5)
        .map(|i| (format!("m-{i}"), "recorded"))
        .chain([("m-5".to_owned(), "abandoned")])
        .chain((6..10).map(|i| (format!("m-{i}"), "released")))
        .chain((5..10).map(|i| (format!("m-{i}"), "recorded")))
        .collect();
    assert_eq!(summary, expected);
    let in_order: Vec<String> = (0..10).map(|i| format!("m-{i}")).collect();
    assert_eq!(store.committed(), in_order, "nothing overtook m-5");

    assert_eq!(h.resolver_counts().await, (0, 0));
    h.stop().await;
}

/// A session's next message is received and its record submitted while
/// the last one's record is still committing. When that commit fails, the
/// next record must not reach the store ahead of the failed one's
/// redelivery: nothing of the session overtakes a failed record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_submitted_behind_a_failing_one_does_not_overtake_it() {
    let (mut h, store) = scripted_harness("m-0", 1, |_| {}).await;
    let (entered_tx, entered) = std::sync::mpsc::channel();
    let (release, release_rx) = std::sync::mpsc::channel();
    *store.hold.lock().unwrap() = Some((entered_tx, release_rx));
    let mut messages = requests("order-h", 2).into_iter();
    h.send_all("billing", &[messages.next().unwrap()]).await;
    tokio::task::spawn_blocking(move || entered.recv_timeout(PATIENCE).unwrap())
        .await
        .unwrap();
    // `m-0`'s commit is held; `m-1` arrives behind it and is received and
    // submitted meanwhile (the pause gives the worker the time to).
    h.send_all("billing", &[messages.next().unwrap()]).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    release.send(()).unwrap();

    let mut progress = Vec::new();
    while progress
        .iter()
        .filter(|p: &&Progress| matches!(p.outcome, Consumed::Recorded { .. }))
        .count()
        < 2
    {
        progress.push(h.next().await);
    }
    assert!(
        matches!(&progress[0].outcome, Consumed::Abandoned(why) if why.contains("injected failure on m-0")),
        "{progress:?}"
    );
    assert_eq!(
        store.committed(),
        ["m-0", "m-1"],
        "m-1 did not overtake m-0"
    );
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_behind_a_failing_record_is_completed_and_shutdown_releases_it_all() {
    // `m-3` never records; the backoff outlasts the test, so only shutdown
    // ends it.
    let (mut h, store) = scripted_harness("m-3", u32::MAX, |settings| {
        settings.store_backoff = Duration::from_secs(3600);
        settings.max_store_backoff = Duration::from_secs(3600);
    })
    .await;
    h.send_all("billing", &requests("order-s", 6)).await;
    let recorded = h.outcomes(3).await;
    assert!(
        recorded
            .iter()
            .all(|o| matches!(o, Consumed::Recorded { .. })),
        "{recorded:?}"
    );
    assert_eq!(store.committed(), ["m-0", "m-1", "m-2"]);
    for i in 3..6 {
        assert!(
            h.store.event(&format!("ev-{i}")).unwrap().is_empty(),
            "ev-{i}"
        );
    }
    let resolver = SubscriptionPath::new("Resolver", "Resolver");
    let held = h.broker.get_subscription(&resolver).await.unwrap().unwrap();
    assert_eq!(
        held.active_message_count, 3,
        "m-3 and the two behind it are held, not completed"
    );

    h.shutdown.cancel();
    let mut released = Vec::new();
    for _ in 0..3 {
        let p = h.next().await;
        assert!(
            matches!(&p.outcome, Consumed::Abandoned(why) if why.contains("shutdown")),
            "{p:?}"
        );
        released.push(p.message_id.unwrap());
    }
    assert_eq!(released, ["m-3", "m-4", "m-5"]);
    tokio::time::timeout(PATIENCE, h.consumer)
        .await
        .expect("shutdown does not wait for the backoff")
        .unwrap()
        .unwrap();

    let session = h
        .broker
        .accept_session(
            &resolver,
            SessionSelector::Named("order-s".into()),
            PATIENCE,
        )
        .await
        .unwrap();
    for i in 3..6 {
        let kept = session.receive(PATIENCE).await.unwrap().unwrap();
        assert_eq!(kept.message.message_id, Some(format!("m-{i}")));
        assert_eq!(kept.delivery_count, 1, "m-{i} released, not abandoned");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pipelined_batch_settles_heartbeats_and_defects_in_their_place() {
    let (mut h, store) = scripted_harness("none", 0, |_| {}).await;
    let mut events = requests("mixed", 3).into_iter();
    let mut garbage = forwarded("ev-bad", "mixed", "garbage").to_transport();
    garbage.body = b"{not json".to_vec();
    let probe = NimbusMessage {
        event_type_id: Some("NimBus.Platform.Heartbeat".into()),
        from: Some("Manager".into()),
        content: Some(MessageContent::event(EventContent::new(
            "NimBus.Platform.Heartbeat",
            "{}",
        ))),
        ..forwarded("hb-mixed", "mixed", "probe-mixed")
    };
    let mut answer = as_engine_sends(build::heartbeat_response(
        &probe,
        ResponseTimes::default(),
        std::time::SystemTime::now(),
        "nimbus-test",
    ));
    answer.message_id = Some("answer".into());
    let batch = vec![
        events.next().unwrap().to_transport(),
        garbage,
        events.next().unwrap().to_transport(),
        answer.to_transport(),
        events.next().unwrap().to_transport(),
    ];
    h.broker.publish("billing", batch).await.unwrap();

    let progress: Vec<Progress> = {
        let mut got = Vec::new();
        for _ in 0..5 {
            got.push(h.next().await);
        }
        got
    };
    assert_eq!(ids(&progress), ["m-0", "garbage", "m-1", "answer", "m-2"]);
    assert!(matches!(progress[0].outcome, Consumed::Recorded { .. }));
    assert!(
        matches!(&progress[1].outcome, Consumed::DeadLettered(why) if why.contains("cannot be decoded")),
        "{progress:?}"
    );
    assert!(matches!(progress[2].outcome, Consumed::Recorded { .. }));
    assert_eq!(
        progress[3].outcome,
        Consumed::Heartbeat {
            endpoint: "billing".into()
        }
    );
    assert!(matches!(progress[4].outcome, Consumed::Recorded { .. }));
    // The three events were one run, in one commit.
    assert_eq!(store.batches(), [3]);
    assert_eq!(store.committed(), ["m-0", "m-1", "m-2"]);
    assert_eq!(h.store.heartbeats().unwrap().len(), 1);
    assert_eq!(h.resolver_counts().await, (0, 1));
    h.stop().await;
}
