//! The Resolver consumer on the real embedded broker: NimBus messages sent
//! the way the engine sends them, through the forwarding rules of the
//! endpoint topology, recorded in a real SQLite store.

#![allow(clippy::unwrap_used, reason = "tests")]

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use nimbus_broker::{Broker, BrokerOptions};
use nimbus_resolver::{
    EventDetail, EventFilter, EventRecord, Heartbeat, Observation, Outcome, Progress, Recorded,
    ResolverError, ResolverSettings, ResolverStore, SqliteResolverStore, Status, StoreError,
    UNRECORDABLE_REASON, run_resolver,
};
use nimbus_transport::{
    Admin, PropertyValue, Receiver, RuleDescription, SessionLock, SessionSelector, SubQueue,
    SubscriptionPath, SubscriptionSettings, TopicSettings, Transport,
};
use nimbus_wire::build::{self, Handoff, ResponseTimes};
use nimbus_wire::{EventContent, Failure, MessageContent, MessageType, NimbusMessage};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// A safety net so a broken consumer fails the test instead of hanging it;
/// nothing asserts on time.
const PATIENCE: Duration = Duration::from_secs(60);

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
    async fn start(endpoints: &[&str]) -> Harness {
        Harness::start_with(endpoints, |store| store).await
    }

    async fn start_with(
        endpoints: &[&str],
        wrap: impl FnOnce(Arc<SqliteResolverStore>) -> Arc<dyn ResolverStore>,
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
        let settings = ResolverSettings {
            max_concurrent_sessions: 8,
            accept_timeout: Duration::from_millis(200),
            session_idle_timeout: Duration::from_millis(50),
            store_backoff: Duration::ZERO,
            progress: Some(tx),
            ..ResolverSettings::default()
        };
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

    async fn next(&mut self) -> Progress {
        tokio::time::timeout(PATIENCE, self.progress.recv())
            .await
            .expect("the consumer reports every message")
            .expect("the consumer is running")
    }

    async fn outcomes(&mut self, n: usize) -> Vec<Outcome> {
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

/// The copy of a publish by `storefront` that endpoint `billing` receives
/// (wire vector 02).
fn forwarded(event_id: &str, session: &str, message_id: &str) -> NimbusMessage {
    NimbusMessage {
        message_id: Some(message_id.into()),
        session_id: Some(session.into()),
        correlation_id: Some("corr-7".into()),
        to: Some("billing".into()),
        from: Some("storefront".into()),
        message_type: MessageType::EventRequest,
        event_id: Some(event_id.into()),
        event_type_id: Some("OrderPlaced".into()),
        originating_from: Some("storefront".into()),
        content: Some(MessageContent::event(EventContent::new(
            "OrderPlaced",
            r#"{"OrderId":"o-1001"}"#,
        ))),
        ..NimbusMessage::default()
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

fn recorded(outcome: &Outcome) -> (&str, &str, &Recorded) {
    match outcome {
        Outcome::Recorded {
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
        assert!(matches!(outcome, Outcome::DeadLettered(_)), "{outcome:?}");
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
    fn event(&self, event_id: &str) -> Result<Vec<EventDetail>, StoreError> {
        self.inner.event(event_id)
    }
    fn events(&self, filter: &EventFilter) -> Result<Vec<EventRecord>, StoreError> {
        self.inner.events(filter)
    }
    fn refused_writes(&self) -> u64 {
        self.inner.refused_writes()
    }
    fn record_heartbeat(&self, heartbeat: &Heartbeat) -> Result<(), StoreError> {
        self.inner.record_heartbeat(heartbeat)
    }
    fn heartbeats(&self) -> Result<Vec<Heartbeat>, StoreError> {
        self.inner.heartbeats()
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
    h.send("billing", &request).await;
    h.send(
        "billing",
        &as_engine_sends(build::resolution_response(
            &request,
            ResponseTimes::default(),
        )),
    )
    .await;
    let outcomes = h.outcomes(4).await;
    assert!(matches!(outcomes[0], Outcome::Abandoned(_)), "{outcomes:?}");
    assert!(matches!(outcomes[1], Outcome::Abandoned(_)), "{outcomes:?}");
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
    assert!(matches!(outcomes[0], Outcome::Ignored(_)), "{outcomes:?}");
    assert_eq!(
        outcomes[1],
        Outcome::Heartbeat {
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
            .all(|o| matches!(o, Outcome::Recorded { .. }))
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
    assert!(matches!(got.outcome, Outcome::Recorded { .. }), "{got:?}");
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
    fn event(&self, event_id: &str) -> Result<Vec<EventDetail>, StoreError> {
        self.inner.event(event_id)
    }
    fn events(&self, filter: &EventFilter) -> Result<Vec<EventRecord>, StoreError> {
        self.inner.events(filter)
    }
    fn refused_writes(&self) -> u64 {
        0
    }
    fn record_heartbeat(&self, heartbeat: &Heartbeat) -> Result<(), StoreError> {
        self.inner.record_heartbeat(heartbeat)
    }
    fn heartbeats(&self) -> Result<Vec<Heartbeat>, StoreError> {
        self.inner.heartbeats()
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
