//! The Manager on the real embedded broker and a real Resolver (consumer and
//! SQLite store): each operation publishes exactly the control message of
//! its wire vector, received on `E/E`; refusals send nothing; dead letters
//! are listed without loss and replayed back to their subscription.

#![allow(clippy::unwrap_used, reason = "tests")]

use std::sync::Arc;
use std::time::Duration;

use nimbus_broker::{Broker, BrokerOptions};
use nimbus_manager::{BulkAction, BulkSelection, Chosen, DeadLetterId, Manager, ManagerError};
use nimbus_resolver::{
    Consumed, EventDetail, EventFilter, EventRecord, Heartbeat, MessageKind, Observation, Progress,
    REBUILT_FROM_BROKER, Recorded, ResolverError, ResolverSettings, ResolverStore,
    SqliteResolverStore, Status, StoreError, run_resolver,
};
use nimbus_transport::{
    Admin, PropertyValue, ReceivedMessage, RuleDescription, SessionLock, SessionSelector,
    SubscriptionPath, SubscriptionSettings, TopicSettings, Transport,
};
use nimbus_wire::build::{self, Handoff, ResponseTimes};
use nimbus_wire::{
    ControlKey, EventContent, Failure, MessageContent, MessageType, NimbusMessage, SessionState,
    control_signature, prop,
};
use serde_json::Value;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// A safety net so a broken test fails instead of hanging; nothing asserts
/// on time.
const PATIENCE: Duration = Duration::from_secs(60);

const EVENT_ID: &str = "2f0e6c1e-6a2b-4c1e-9d57-1c3a7a0b5e11";

/// The hosts' control key in these tests.
fn control_key() -> ControlKey {
    ControlKey::new("test-control-key-0123456789abcdef").unwrap()
}

/// Checks that the Manager signed `control` with the key, then takes the
/// signature off: the rest is upstream's wire vector.
fn unsealed(mut control: ReceivedMessage) -> ReceivedMessage {
    assert_eq!(
        control_signature::verify(&control_key(), &control.message),
        Ok(()),
        "every control message the Manager sends is signed"
    );
    control.message.properties.remove(prop::CONTROL_SIGNATURE);
    control
}
const SESSION: &str = "order-o-1001";

/// The Resolver topic and endpoint topologies as nimbus-platform.md §2.3
/// provisions them (the parts the Manager's traffic crosses).
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
        // Parking, as the topology provisions it.
        let deferred = SubscriptionPath::new(*endpoint, "Deferred");
        broker
            .create_subscription(&deferred, SubscriptionSettings::sessions())
            .await
            .unwrap();
        broker.delete_rule(&deferred, "$Default").await.unwrap();
        broker
            .create_rule(
                &deferred,
                RuleDescription::new(
                    "DeferredFilter",
                    "user.To = 'Deferred' AND user.OriginalSessionId IS NOT NULL",
                ),
            )
            .await
            .unwrap();
    }
}

type ResolverRun = (
    mpsc::UnboundedReceiver<Progress>,
    CancellationToken,
    tokio::task::JoinHandle<Result<(), ResolverError>>,
);

/// A Resolver consumer on `store`: its progress reports, its shutdown, its
/// task.
fn spawn_resolver(broker: &Arc<Broker>, store: &Arc<SqliteResolverStore>) -> ResolverRun {
    let (tx, progress) = mpsc::unbounded_channel();
    let shutdown = CancellationToken::new();
    let resolver = tokio::spawn(run_resolver(
        Arc::clone(broker),
        Arc::clone(store) as Arc<dyn ResolverStore>,
        ResolverSettings {
            max_concurrent_sessions: 4,
            accept_timeout: Duration::from_millis(200),
            session_idle_timeout: Duration::from_millis(50),
            progress: Some(tx),
            // As the host runs it: the Manager's copies are recorded only
            // because they are signed.
            control_key: Some(control_key()),
            ..ResolverSettings::default()
        },
        shutdown.clone(),
    ));
    (progress, shutdown, resolver)
}

struct Harness {
    _dir: tempfile::TempDir,
    broker: Arc<Broker>,
    store: Arc<SqliteResolverStore>,
    manager: Manager<Broker>,
    progress: mpsc::UnboundedReceiver<Progress>,
    shutdown: CancellationToken,
    resolver: tokio::task::JoinHandle<Result<(), ResolverError>>,
}

impl Harness {
    async fn start(endpoints: &[&str]) -> Harness {
        let dir = tempfile::tempdir().unwrap();
        let broker = Arc::new(
            Broker::open(BrokerOptions::new(dir.path().join("broker")))
                .await
                .unwrap(),
        );
        provision(&broker, endpoints).await;
        let store = Arc::new(SqliteResolverStore::open(&dir.path().join("resolver.db")).unwrap());
        let manager = Manager::new(
            Arc::clone(&broker),
            Arc::clone(&store) as Arc<dyn ResolverStore>,
            control_key(),
        );
        let (progress, shutdown, resolver) = spawn_resolver(&broker, &store);
        Harness {
            _dir: dir,
            broker,
            store,
            manager,
            progress,
            shutdown,
            resolver,
        }
    }

    /// Starts the Resolver consumer again, after a test stopped it.
    fn restart_resolver(&mut self) {
        (self.progress, self.shutdown, self.resolver) = spawn_resolver(&self.broker, &self.store);
    }

    /// Sends as the engine (or a forwarding rule) would, and waits until the
    /// Resolver has recorded it.
    async fn send_and_record(&mut self, topic: &str, message: &NimbusMessage) {
        self.broker
            .publish(topic, vec![message.to_transport()])
            .await
            .unwrap();
        self.resolved(1).await;
    }

    /// Waits for the Resolver to record `n` more messages.
    async fn resolved(&mut self, n: usize) {
        for _ in 0..n {
            let got = tokio::time::timeout(PATIENCE, self.progress.recv())
                .await
                .expect("the resolver reports every message")
                .expect("the resolver is running");
            assert!(matches!(got.outcome, Consumed::Recorded { .. }), "{got:?}");
        }
    }

    /// The messages of `session` on `E/E`, in order (completed, so the next
    /// read starts after them).
    async fn endpoint_receives(&self, endpoint: &str, session: &str) -> Vec<ReceivedMessage> {
        let lock = self
            .broker
            .accept_session(
                &SubscriptionPath::new(endpoint, endpoint),
                SessionSelector::Named(session.into()),
                PATIENCE,
            )
            .await
            .unwrap();
        let mut got = Vec::new();
        while let Some(message) = lock.receive(Duration::from_millis(100)).await.unwrap() {
            lock.complete(message.clone()).await.unwrap();
            got.push(message);
        }
        got
    }

    async fn active(&self, endpoint: &str) -> u64 {
        self.broker
            .get_subscription(&SubscriptionPath::new(endpoint, endpoint))
            .await
            .unwrap()
            .unwrap()
            .active_message_count
    }

    async fn stop(self) {
        self.shutdown.cancel();
        self.resolver.await.unwrap().unwrap();
    }
}

/// Wire vector 02: the copy of storefront's publish that `endpoint` receives.
fn forwarded(endpoint: &str) -> NimbusMessage {
    NimbusMessage {
        message_id: Some("msg-pub-1".into()),
        session_id: Some(SESSION.into()),
        correlation_id: Some("corr-7".into()),
        to: Some(endpoint.into()),
        from: Some("storefront".into()),
        message_type: MessageType::EventRequest,
        event_id: Some(EVENT_ID.into()),
        event_type_id: Some("OrderPlaced".into()),
        originating_from: Some("storefront".into()),
        content: Some(MessageContent::event(EventContent::new(
            "OrderPlaced",
            r#"{"OrderId":"o-1001","Customer":"acme","Total":150.0}"#,
        ))),
        ..NimbusMessage::default()
    }
}

/// As the engine sends a response: `To = Resolver`, no `From`.
fn as_engine_sends(mut response: NimbusMessage) -> NimbusMessage {
    response.from = None;
    response
}

/// The event failed at `billing`: request copy and ErrorResponse recorded.
async fn failed_at_billing(h: &mut Harness) {
    failed_at_billing_from(h, forwarded("billing")).await;
}

/// The event of `request` failed at `billing`.
async fn failed_at_billing_from(h: &mut Harness, request: NimbusMessage) {
    h.send_and_record("billing", &request).await;
    let failure = Failure::new("PartnerUnavailable", "credit check said 503");
    h.send_and_record(
        "billing",
        &as_engine_sends(build::error_response(
            &request,
            ResponseTimes::default(),
            &failure,
        )),
    )
    .await;
}

/// The event was handed off at `billing`.
async fn handed_off_at_billing(h: &mut Harness) {
    let request = forwarded("billing");
    h.send_and_record("billing", &request).await;
    let handoff = Handoff {
        reason: "DMF import".into(),
        external_job_id: Some("job-42".into()),
        expected_by: None,
    };
    h.send_and_record(
        "billing",
        &as_engine_sends(build::pending_handoff_response(
            &request,
            ResponseTimes::default(),
            &handoff,
        )),
    )
    .await;
}

fn vector(name: &str) -> Value {
    let path = format!(
        "{}/../wire/tests/fixtures/wire/{name}.json",
        env!("CARGO_MANIFEST_DIR")
    );
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

fn property_json(value: &PropertyValue) -> Value {
    match value {
        PropertyValue::String(s) => Value::from(s.as_str()),
        PropertyValue::Int(i) => Value::from(*i),
        PropertyValue::Float(f) => Value::from(*f),
        PropertyValue::Bool(b) => Value::from(*b),
    }
}

/// The received message has exactly the vector's application properties
/// (names, values and types), body, session and correlation id.
fn assert_is_vector(received: &ReceivedMessage, name: &str) {
    let vector = vector(name);
    let properties: serde_json::Map<String, Value> = received
        .message
        .properties
        .iter()
        .map(|(k, v)| (k.clone(), property_json(v)))
        .collect();
    assert_eq!(
        Value::Object(properties),
        vector["application_properties"],
        "{name}: properties"
    );
    let body: Value = serde_json::from_slice(&received.message.body).unwrap();
    assert_eq!(body, vector["body"], "{name}: body");
    assert_eq!(
        received.message.session_id.as_deref(),
        vector["broker"]["session_id"].as_str()
    );
    assert_eq!(
        received.message.correlation_id.as_deref(),
        vector["broker"]["correlation_id"].as_str()
    );
}

/// The one control message after the original request on `billing/billing`.
async fn control_message(h: &Harness, sent_id: &str) -> ReceivedMessage {
    let mut got = h.endpoint_receives("billing", SESSION).await;
    assert_eq!(got.len(), 2, "the request, then the control message");
    assert_eq!(got[0].message.message_id.as_deref(), Some("msg-pub-1"));
    let control = got.remove(1);
    assert_eq!(control.message.message_id.as_deref(), Some(sent_id));
    unsealed(control)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resubmit_sends_the_resubmission_request_of_vector_08() {
    let mut h = Harness::start(&["billing"]).await;
    failed_at_billing(&mut h).await;
    let sent = h.manager.resubmit(EVENT_ID, None, None).await.unwrap();
    assert_eq!(sent.endpoint, "billing");
    assert_eq!(sent.message_type, "ResubmissionRequest");
    assert_eq!(sent.status_before, Status::Failed);
    assert!(sent.notes.is_empty(), "{:?}", sent.notes);
    assert_is_vector(
        &control_message(&h, &sent.message_id).await,
        "08-resubmission-request",
    );
    // The Resolver records the request copy: the event is Pending again,
    // with the Manager in its history.
    h.resolved(1).await;
    let detail = &h.store.event(EVENT_ID).unwrap()[0];
    assert_eq!(detail.record.status, Status::Pending);
    let last = detail.history.last().unwrap();
    assert_eq!(last.message_type, "ResubmissionRequest");
    assert_eq!(last.from.as_deref(), Some("Manager"));
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resubmit_with_an_edited_payload_carries_it_and_the_next_resubmit_reuses_it() {
    let mut h = Harness::start(&["billing"]).await;
    failed_at_billing(&mut h).await;
    let edited = r#"{"OrderId":"o-1001","Customer":"acme","Total":149.0}"#;
    let sent = h
        .manager
        .resubmit(EVENT_ID, Some("billing"), Some(edited))
        .await
        .unwrap();
    let control = control_message(&h, &sent.message_id).await;
    let body: Value = serde_json::from_slice(&control.message.body).unwrap();
    assert_eq!(body["EventContent"]["EventJson"], edited);
    assert_eq!(body["EventContent"]["EventTypeId"], "OrderPlaced");
    h.resolved(1).await;
    assert_eq!(
        h.store.event(EVENT_ID).unwrap()[0]
            .record
            .payload
            .as_deref(),
        Some(edited),
        "the newest request's payload is the one a later resubmit sends"
    );
    h.stop().await;
}

/// A publisher's user properties reach the handler on a resubmission too:
/// the Resolver keeps the published message's, and the Manager sends them
/// again. A response after the request does not clear them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resubmit_carries_the_published_messages_user_properties() {
    let mut h = Harness::start(&["billing"]).await;
    let mut request = forwarded("billing");
    request
        .properties
        .insert("Tenant".into(), PropertyValue::String("acme".into()));
    request
        .properties
        .insert("Priority".into(), PropertyValue::Int(2));
    failed_at_billing_from(&mut h, request).await;
    assert_eq!(
        h.store.event(EVENT_ID).unwrap()[0]
            .record
            .properties
            .as_deref(),
        Some(r#"{"Priority":2,"Tenant":"acme"}"#)
    );

    let sent = h.manager.resubmit(EVENT_ID, None, None).await.unwrap();
    let control = control_message(&h, &sent.message_id).await;
    assert_eq!(
        control.message.properties.get("Tenant"),
        Some(&PropertyValue::String("acme".into()))
    );
    assert_eq!(
        control.message.properties.get("Priority"),
        Some(&PropertyValue::Int(2))
    );
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skip_sends_the_skip_request_of_vector_09() {
    let mut h = Harness::start(&["billing"]).await;
    failed_at_billing(&mut h).await;
    let sent = h.manager.skip(EVENT_ID, None).await.unwrap();
    assert_eq!(sent.message_type, "SkipRequest");
    assert_is_vector(
        &control_message(&h, &sent.message_id).await,
        "09-skip-request",
    );
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn complete_handoff_sends_the_request_of_vector_11() {
    let mut h = Harness::start(&["billing"]).await;
    handed_off_at_billing(&mut h).await;
    let sent = h
        .manager
        .complete_handoff(EVENT_ID, None, Some(r#"{"imported":true}"#))
        .await
        .unwrap();
    assert_eq!(sent.message_type, "HandoffCompletedRequest");
    assert_is_vector(
        &control_message(&h, &sent.message_id).await,
        "11-handoff-completed-request",
    );
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fail_handoff_sends_the_request_of_vector_12() {
    let mut h = Harness::start(&["billing"]).await;
    handed_off_at_billing(&mut h).await;
    let sent = h
        .manager
        .fail_handoff(EVENT_ID, None, "DMF rejected 3 lines", Some("DmfRejected"))
        .await
        .unwrap();
    assert_eq!(sent.message_type, "HandoffFailedRequest");
    assert_is_vector(
        &control_message(&h, &sent.message_id).await,
        "12-handoff-failed-request",
    );
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_name_the_problem_and_send_nothing() {
    let mut h = Harness::start(&["billing", "shipping"]).await;
    failed_at_billing(&mut h).await;
    h.send_and_record("shipping", &forwarded("shipping")).await;
    let before = (h.active("billing").await, h.active("shipping").await);

    let error = h.manager.skip("no-such-event", None).await.unwrap_err();
    assert!(
        matches!(error, ManagerError::UnknownEvent { .. }),
        "{error}"
    );
    assert!(error.to_string().contains("no-such-event"), "{error}");

    let error = h.manager.resubmit(EVENT_ID, None, None).await.unwrap_err();
    assert!(
        matches!(error, ManagerError::AmbiguousEndpoint { .. }),
        "{error}"
    );
    assert!(error.to_string().contains("billing, shipping"), "{error}");

    let error = h.manager.skip(EVENT_ID, Some("orders")).await.unwrap_err();
    assert!(
        matches!(error, ManagerError::NotAtEndpoint { .. }),
        "{error}"
    );

    let error = h
        .manager
        .complete_handoff(EVENT_ID, Some("billing"), None)
        .await
        .unwrap_err();
    assert!(
        matches!(
            error,
            ManagerError::NotPendingHandoff {
                status: Status::Failed,
                ..
            }
        ),
        "{error}"
    );
    assert!(
        error
            .to_string()
            .contains("not pending a handoff (status Failed)")
            && error.to_string().contains("resubmit or skip it"),
        "{error}"
    );

    let error = h
        .manager
        .fail_handoff(EVENT_ID, Some("shipping"), "no", None)
        .await
        .unwrap_err();
    assert!(
        matches!(
            error,
            ManagerError::NotPendingHandoff {
                status: Status::Pending,
                ..
            }
        ),
        "{error}"
    );
    // Pending without the handoff sub-status: a request for it is on its
    // way, e.g. a second `complete` racing the first.
    assert!(
        error.to_string().contains("a request for it is on its way"),
        "{error}"
    );

    let error = h
        .manager
        .resubmit(EVENT_ID, Some("billing"), Some("{\"OrderId\": "))
        .await
        .unwrap_err();
    assert!(
        matches!(
            error,
            ManagerError::NotJson {
                what: "edited payload",
                ..
            }
        ),
        "{error}"
    );
    assert!(error.to_string().contains("line 1"), "{error}");

    let error = h
        .manager
        .fail_handoff(EVENT_ID, Some("billing"), "  ", None)
        .await
        .unwrap_err();
    assert!(matches!(error, ManagerError::MissingErrorText), "{error}");

    assert_eq!(
        (h.active("billing").await, h.active("shipping").await),
        before,
        "no refused operation sent anything"
    );
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resubmit_and_skip_of_a_completed_event_are_sent_with_a_note() {
    let mut h = Harness::start(&["billing"]).await;
    let request = forwarded("billing");
    h.send_and_record("billing", &request).await;
    h.send_and_record(
        "billing",
        &as_engine_sends(build::resolution_response(
            &request,
            ResponseTimes::default(),
        )),
    )
    .await;
    let sent = h.manager.skip(EVENT_ID, None).await.unwrap();
    assert_eq!(sent.status_before, Status::Completed);
    assert_eq!(sent.notes.len(), 1);
    assert!(
        sent.notes[0].contains("already Completed"),
        "{:?}",
        sent.notes
    );
    h.resolved(1).await;
    let sent = h.manager.resubmit(EVENT_ID, None, None).await.unwrap();
    assert!(
        sent.notes.iter().any(|n| n.contains("not yet settled")),
        "{:?}",
        sent.notes
    );
    h.resolved(1).await;
    let mut skipped = Observation::new("billing", EVENT_ID, MessageKind::SkipResponse, 10);
    skipped.message_id = Some("skip-response".into());
    h.store.record(&skipped).unwrap();
    let sent = h.manager.skip(EVENT_ID, None).await.unwrap();
    assert_eq!(sent.status_before, Status::Skipped);
    assert!(
        sent.notes.iter().any(|n| n.contains("already Skipped")
            && n.contains("skipping it again only adds to its history")),
        "{:?}",
        sent.notes
    );
    h.stop().await;
}

/// Dead-letters the next message of `session` on `billing/billing`.
async fn dead_letter_one(h: &Harness, session: &str, reason: &str) -> ReceivedMessage {
    let lock = h
        .broker
        .accept_session(
            &SubscriptionPath::new("billing", "billing"),
            SessionSelector::Named(session.into()),
            PATIENCE,
        )
        .await
        .unwrap();
    let message = lock.receive(PATIENCE).await.unwrap().unwrap();
    lock.dead_letter(
        message.clone(),
        reason.into(),
        "handler kept crashing".into(),
    )
    .await
    .unwrap();
    message
}

/// Publishes `message` to `topic` and dead-letters it from `path`, as the
/// bus does at the last delivery that failed.
async fn publish_and_dead_letter(
    h: &Harness,
    topic: &str,
    path: SubscriptionPath,
    message: &NimbusMessage,
    description: &str,
) {
    h.broker
        .publish(topic, vec![message.to_transport()])
        .await
        .unwrap();
    let lock = h
        .broker
        .accept_session(&path, SessionSelector::Named(SESSION.into()), PATIENCE)
        .await
        .unwrap();
    let message = lock.receive(PATIENCE).await.unwrap().unwrap();
    lock.dead_letter(
        message,
        "MaxDeliveryCountExceeded".into(),
        description.into(),
    )
    .await
    .unwrap();
    lock.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_letters_are_listed_without_loss_and_replayed_back_to_the_endpoint() {
    let mut h = Harness::start(&["billing"]).await;
    h.send_and_record("billing", &forwarded("billing")).await;
    let mut second = forwarded("billing");
    second.message_id = Some("msg-pub-2".into());
    second.session_id = Some("order-o-1002".into());
    second.event_id = Some("second-event".into());
    h.send_and_record("billing", &second).await;
    let first = dead_letter_one(&h, SESSION, "MaxDeliveryCountExceeded").await;
    dead_letter_one(&h, "order-o-1002", "Failed to handle message.").await;

    let listed = h.manager.dead_letters("billing", None).await.unwrap();
    let relisted = h.manager.dead_letters("billing", None).await.unwrap();
    assert_eq!(
        listed, relisted,
        "listing neither removes nor counts a delivery"
    );
    assert_eq!(listed.len(), 2);
    let one = listed
        .iter()
        .find(|d| d.message_id.as_deref() == Some("msg-pub-1"))
        .unwrap();
    assert_eq!(one.subscription, "billing");
    assert_eq!(one.reason.as_deref(), Some("MaxDeliveryCountExceeded"));
    assert_eq!(one.description.as_deref(), Some("handler kept crashing"));
    assert_eq!(one.event_id.as_deref(), Some(EVENT_ID));
    assert_eq!(one.message_type.as_deref(), Some("EventRequest"));
    assert_eq!(one.session_id.as_deref(), Some(SESSION));
    assert_eq!(one.sequence_number, first.sequence_number);
    let limited = h.manager.dead_letters("billing", Some(1)).await.unwrap();
    assert_eq!(limited.len(), 1);

    let replayed = h
        .manager
        .replay_dead_letter(
            "billing",
            None,
            &DeadLetterId::MessageId("msg-pub-1".into()),
            false,
        )
        .await
        .unwrap();
    assert_eq!(replayed.message.event_id.as_deref(), Some(EVENT_ID));
    let left = h.manager.dead_letters("billing", None).await.unwrap();
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].message_id.as_deref(), Some("msg-pub-2"));

    // Back on the endpoint's session, as it was, with a fresh delivery count.
    let back = h.endpoint_receives("billing", SESSION).await;
    assert_eq!(back.len(), 1);
    assert_eq!(back[0].message.message_id.as_deref(), Some("msg-pub-1"));
    assert_eq!(back[0].message.properties, first.message.properties);
    assert_eq!(back[0].message.body, first.message.body);
    assert_eq!(back[0].delivery_count, 1);
    assert_eq!(back[0].dead_letter_reason, None);

    let by_sequence = DeadLetterId::SequenceNumber(left[0].sequence_number);
    h.manager
        .replay_dead_letter("billing", Some("billing"), &by_sequence, false)
        .await
        .unwrap();
    assert!(
        h.manager
            .dead_letters("billing", None)
            .await
            .unwrap()
            .is_empty()
    );
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_letter_operations_name_what_is_missing() {
    let h = Harness::start(&["billing"]).await;
    let error = h.manager.dead_letters("nobody", None).await.unwrap_err();
    assert!(
        matches!(error, ManagerError::UnknownEndpoint { .. }),
        "{error}"
    );
    assert!(error.to_string().contains("'nobody'"), "{error}");

    let error = h
        .manager
        .replay_dead_letter(
            "billing",
            None,
            &DeadLetterId::MessageId("ghost".into()),
            false,
        )
        .await
        .unwrap_err();
    assert!(
        matches!(error, ManagerError::DeadLetterNotFound { .. }),
        "{error}"
    );
    let text = error.to_string();
    assert!(
        text.contains("'ghost'")
            && text.contains("billing/billing")
            && text.contains("billing/Resolver"),
        "{text}"
    );
    h.stop().await;
}

/// A broker in a temp dir with the real provisioning of `billing`
/// consuming `OrderPlaced` from the producer topic `storefront`, and an
/// empty Resolver store beside it.
async fn storefront_to_billing() -> (tempfile::TempDir, Arc<Broker>, Arc<SqliteResolverStore>) {
    use nimbus_wire::topology::{Endpoint, Topology, provision};

    let dir = tempfile::tempdir().unwrap();
    let broker = Arc::new(
        Broker::open(BrokerOptions::new(dir.path().join("broker")))
            .await
            .unwrap(),
    );
    let topology = Topology::new()
        .endpoint(Endpoint::new("billing").consumes(["OrderPlaced"]))
        .producer_topic("storefront");
    provision(&*broker, &topology).await.unwrap();
    let store = Arc::new(SqliteResolverStore::open(&dir.path().join("resolver.db")).unwrap());
    (dir, broker, store)
}

/// The whole path with the real provisioning: storefront publishes, the
/// forwarder gives billing's copy a fresh EventId, the Resolver records it,
/// and the Manager resubmits it by that id alone, with the shape of vector
/// 08 (the EventId aside: the forwarding rule chose it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_routed_by_the_provisioned_topology_is_resubmitted_by_its_id_alone() {
    let (_dir, broker, store) = storefront_to_billing().await;
    let (tx, mut progress) = mpsc::unbounded_channel();
    let shutdown = CancellationToken::new();
    let resolver = tokio::spawn(run_resolver(
        Arc::clone(&broker),
        Arc::clone(&store) as Arc<dyn ResolverStore>,
        ResolverSettings {
            session_idle_timeout: Duration::from_millis(50),
            progress: Some(tx),
            ..ResolverSettings::default()
        },
        shutdown.clone(),
    ));

    let publish = build::original_publish(&build::Publish {
        event_type_id: "OrderPlaced".into(),
        payload: r#"{"OrderId":"o-1001","Customer":"acme","Total":150.0}"#.into(),
        session_id: Some(SESSION.into()),
        correlation_id: Some("corr-7".into()),
        message_id: Some("msg-pub-1".into()),
        publisher: Some("storefront".into()),
        ..build::Publish::default()
    });
    broker
        .publish("storefront", vec![publish.to_transport()])
        .await
        .unwrap();
    let recorded = tokio::time::timeout(PATIENCE, progress.recv())
        .await
        .unwrap()
        .unwrap();
    let Consumed::Recorded {
        endpoint, event_id, ..
    } = recorded.outcome
    else {
        panic!("expected the request copy recorded, got {recorded:?}");
    };
    assert_eq!(endpoint, "billing");

    let manager = Manager::new(
        Arc::clone(&broker),
        Arc::clone(&store) as Arc<dyn ResolverStore>,
        control_key(),
    );
    let sent = manager.resubmit(&event_id, None, None).await.unwrap();

    let lock = broker
        .accept_session(
            &SubscriptionPath::new("billing", "billing"),
            SessionSelector::Named(SESSION.into()),
            PATIENCE,
        )
        .await
        .unwrap();
    let original = lock.receive(PATIENCE).await.unwrap().unwrap();
    assert_eq!(original.message.message_id.as_deref(), Some("msg-pub-1"));
    lock.complete(original).await.unwrap();
    let mut control = unsealed(lock.receive(PATIENCE).await.unwrap().unwrap());
    assert_eq!(
        control.message.message_id.as_deref(),
        Some(sent.message_id.as_str())
    );
    assert_eq!(
        control.message.properties.remove("EventId"),
        Some(PropertyValue::String(event_id.clone()))
    );
    control
        .message
        .properties
        .insert("EventId".into(), PropertyValue::String(EVENT_ID.into()));
    assert_is_vector(&control, "08-resubmission-request");
    drop(lock);
    shutdown.cancel();
    resolver.await.unwrap().unwrap();
}

/// A message dead-lettered before its event was settled another way (a
/// resubmission that failed, then a later one that fixed the event) would
/// run the event again: it is left in place unless forced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_letter_whose_event_is_since_completed_is_replayed_only_when_forced() {
    let mut h = Harness::start(&["billing"]).await;
    h.send_and_record("billing", &forwarded("billing")).await;
    dead_letter_one(&h, SESSION, "Failed to handle message.").await;
    let mut completed = Observation::new("billing", EVENT_ID, MessageKind::ResolutionResponse, 9);
    completed.message_id = Some("resolution-later".into());
    h.store.record(&completed).unwrap();

    let which = DeadLetterId::MessageId("msg-pub-1".into());
    let error = h
        .manager
        .replay_dead_letter("billing", None, &which, false)
        .await
        .unwrap_err();
    assert!(
        matches!(
            &error,
            ManagerError::EventAlreadySettled { status: Status::Completed, event_id, .. }
                if event_id == EVENT_ID
        ),
        "{error}"
    );
    let still = h.manager.dead_letters("billing", None).await.unwrap();
    assert_eq!(still.len(), 1, "left in place");
    assert_eq!(still[0].delivery_count, 1, "and no delivery counted");

    let replays = |h: &Harness| -> Vec<nimbus_resolver::HistoryEntry> {
        h.store.event(EVENT_ID).unwrap()[0]
            .history
            .iter()
            .filter(|e| e.message_type == nimbus_resolver::DEAD_LETTER_REPLAY)
            .cloned()
            .collect()
    };
    assert!(replays(&h).is_empty(), "a refused replay is not noted");

    let replayed = h
        .manager
        .replay_dead_letter("billing", None, &which, true)
        .await
        .unwrap();
    assert_eq!(replayed.message.event_id.as_deref(), Some(EVENT_ID));
    assert_eq!(
        replayed.message.event_status,
        Some(Status::Completed),
        "the result says what the Resolver shows"
    );
    assert!(
        h.manager
            .dead_letters("billing", None)
            .await
            .unwrap()
            .is_empty()
    );
    // The audit trail says the operator sent it back, and the status is
    // left to the run it causes.
    let noted = replays(&h);
    assert_eq!(noted.len(), 1, "{noted:#?}");
    assert_eq!(noted[0].status, Status::Completed);
    assert_eq!(noted[0].from.as_deref(), Some("Manager"));
    assert_eq!(
        noted[0].error_text.as_deref(),
        Some(
            "replayed from the dead-letter queue (message msg-pub-1, dead-lettered: Failed to \
             handle message.)"
        )
    );
    h.stop().await;
}

/// A dead letter whose event was since fixed is clutter an operator
/// removes; one whose event is still open may be the only copy of it, so it
/// is kept unless forced, and nothing removed is ever run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_dead_letters_of_settled_events_are_removed_unless_forced() {
    let mut h = Harness::start(&["billing"]).await;
    h.send_and_record("billing", &forwarded("billing")).await;
    let mut open = forwarded("billing");
    open.message_id = Some("msg-pub-2".into());
    open.session_id = Some("order-o-1002".into());
    open.event_id = Some("open-event".into());
    h.send_and_record("billing", &open).await;
    dead_letter_one(&h, SESSION, "Failed to handle message.").await;
    dead_letter_one(&h, "order-o-1002", "Failed to handle message.").await;

    let open_one = DeadLetterId::MessageId("msg-pub-2".into());
    let error = h
        .manager
        .remove_dead_letter("billing", None, &open_one, false)
        .await
        .unwrap_err();
    assert!(
        matches!(&error, ManagerError::DeadLetterStillNeeded { why, .. }
            if why.contains("'open-event' is Pending")),
        "{error}"
    );
    assert!(
        error.to_string().contains("force removes it anyway"),
        "{error}"
    );
    let listed = h.manager.dead_letters("billing", None).await.unwrap();
    assert_eq!(listed.len(), 2, "kept");
    assert!(
        listed.iter().all(|d| d.delivery_count == 1),
        "no delivery counted"
    );
    assert!(
        listed
            .iter()
            .all(|d| d.event_status == Some(Status::Pending)),
        "{listed:?}"
    );

    // The first event is fixed (say, by a resubmission): its dead letter
    // goes, the open one stays.
    let mut completed = Observation::new("billing", EVENT_ID, MessageKind::ResolutionResponse, 9);
    completed.message_id = Some("resolution-later".into());
    h.store.record(&completed).unwrap();
    let fixed = h.manager.dead_letters("billing", None).await.unwrap();
    assert!(
        fixed.iter().any(|d| d.event_id.as_deref() == Some(EVENT_ID)
            && d.event_status == Some(Status::Completed)),
        "{fixed:?}"
    );
    let done = h
        .manager
        .remove_settled_dead_letters("billing")
        .await
        .unwrap();
    assert!(done.stopped.is_none());
    assert_eq!(done.removed.len(), 1);
    assert_eq!(done.removed[0].event_id.as_deref(), Some(EVENT_ID));
    // What was removed and what was kept say the status that decided it.
    assert_eq!(done.removed[0].event_status, Some(Status::Completed));
    assert_eq!(done.kept.len(), 1);
    assert_eq!(done.kept[0].0.event_id.as_deref(), Some("open-event"));
    assert!(done.kept[0].0.event_status.is_some(), "{:?}", done.kept[0]);
    let left = h.manager.dead_letters("billing", None).await.unwrap();
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].message_id.as_deref(), Some("msg-pub-2"));
    assert_eq!(left[0].delivery_count, 1, "kept without a delivery counted");

    // Forced, the open one goes too; nothing reaches the endpoint.
    let removed = h
        .manager
        .remove_dead_letter("billing", Some("billing"), &open_one, true)
        .await
        .unwrap();
    assert_eq!(removed.event_id.as_deref(), Some("open-event"));
    assert!(
        h.manager
            .dead_letters("billing", None)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(h.endpoint_receives("billing", SESSION).await.is_empty());
    assert!(
        h.endpoint_receives("billing", "order-o-1002")
            .await
            .is_empty()
    );

    let error = h
        .manager
        .remove_dead_letter("billing", None, &open_one, true)
        .await
        .unwrap_err();
    assert!(
        matches!(error, ManagerError::DeadLetterNotFound { .. }),
        "{error}"
    );
    h.stop().await;
}

/// A parked copy the replayer dead-lettered (it failed it over and over) is
/// an event an operator must see: it is listed with its event's status, but
/// not replayed, even forced (it would wait among the parked messages with
/// nothing to replay it); once its event is settled it is removed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_lettered_parked_copy_is_listed_not_replayed_and_removed_once_settled() {
    let mut h = Harness::start(&["billing"]).await;
    h.send_and_record("billing", &forwarded("billing")).await;
    publish_and_dead_letter(
        &h,
        "billing",
        SubscriptionPath::new("billing", "Deferred"),
        &build::parked_copy(&forwarded("billing"), 1),
        "the replayer kept failing",
    )
    .await;

    let listed = h.manager.dead_letters("billing", None).await.unwrap();
    let copy = listed
        .iter()
        .find(|d| d.subscription == "Deferred")
        .unwrap_or_else(|| panic!("the parked copy is listed: {listed:?}"));
    assert_eq!(copy.event_id.as_deref(), Some(EVENT_ID));
    assert_eq!(copy.event_status, Some(Status::Pending));
    let which = DeadLetterId::SequenceNumber(copy.sequence_number);
    let error = h
        .manager
        .replay_dead_letter("billing", None, &which, true)
        .await
        .unwrap_err();
    assert!(
        matches!(error, ManagerError::NotReplayable { .. }),
        "{error}"
    );
    assert!(
        error.to_string().contains("resubmit or skip its event"),
        "{error}"
    );
    let all = h
        .manager
        .replay_all_dead_letters("billing", None, true)
        .await
        .unwrap();
    assert!(all.replayed.is_empty(), "{:?}", all.replayed);
    assert!(
        matches!(
            all.left.as_slice(),
            [(_, ManagerError::NotReplayable { .. })]
        ),
        "{:?}",
        all.left
    );

    let kept = h
        .manager
        .remove_settled_dead_letters("billing")
        .await
        .unwrap();
    assert!(kept.removed.is_empty() && kept.kept.len() == 1, "{kept:?}");
    let mut skipped = Observation::new("billing", EVENT_ID, MessageKind::SkipResponse, 9);
    skipped.message_id = Some("skip-response".into());
    h.store.record(&skipped).unwrap();
    let done = h
        .manager
        .remove_settled_dead_letters("billing")
        .await
        .unwrap();
    assert_eq!(done.removed.len(), 1, "{done:?}");
    assert_eq!(done.removed[0].subscription, "Deferred");
    assert!(
        h.manager
            .dead_letters("billing", None)
            .await
            .unwrap()
            .is_empty()
    );
    h.stop().await;
}

/// Replaying a whole queue has no cap (more than a listing's default
/// limit), moves the messages back in their order, and leaves in place,
/// with the reason, one whose event has since been settled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replaying_every_dead_letter_moves_them_all_back_in_order_but_a_settled_event() {
    let mut h = Harness::start(&["billing"]).await;
    let count = nimbus_manager::DEFAULT_DEAD_LETTER_LIMIT + 1;
    let mut sent = vec![forwarded("billing")];
    for i in 0..count {
        let mut message = forwarded("billing");
        message.message_id = Some(format!("msg-all-{i}"));
        message.event_id = Some(format!("event-all-{i}"));
        sent.push(message);
    }
    h.broker
        .publish(
            "billing",
            sent.iter().map(NimbusMessage::to_transport).collect(),
        )
        .await
        .unwrap();
    // Every event is known to the Resolver (an unknown one is refused).
    h.resolved(sent.len()).await;
    let lock = h
        .broker
        .accept_session(
            &SubscriptionPath::new("billing", "billing"),
            SessionSelector::Named(SESSION.into()),
            PATIENCE,
        )
        .await
        .unwrap();
    for _ in 0..sent.len() {
        let message = lock.receive(PATIENCE).await.unwrap().unwrap();
        lock.dead_letter(message, "Failed to handle message.".into(), "boom".into())
            .await
            .unwrap();
    }
    drop(lock);
    let mut completed = Observation::new("billing", EVENT_ID, MessageKind::ResolutionResponse, 9);
    completed.message_id = Some("resolution-later".into());
    h.store.record(&completed).unwrap();

    let done = h
        .manager
        .replay_all_dead_letters("billing", None, false)
        .await
        .unwrap();
    assert_eq!(done.replayed.len(), count);
    assert_eq!(done.left.len(), 1);
    let noted = |event_id: &str| {
        h.store.event(event_id).unwrap()[0]
            .history
            .iter()
            .filter(|e| e.message_type == nimbus_resolver::DEAD_LETTER_REPLAY)
            .count()
    };
    assert_eq!(noted("event-all-0"), 1, "each replay is noted");
    assert_eq!(noted(EVENT_ID), 0, "the one left is not");
    let (left, why) = &done.left[0];
    assert_eq!(left.message_id.as_deref(), Some("msg-pub-1"));
    assert!(
        matches!(
            why,
            ManagerError::EventAlreadySettled {
                status: Status::Completed,
                ..
            }
        ),
        "{why}"
    );
    let still = h.manager.dead_letters("billing", None).await.unwrap();
    assert_eq!(still.len(), 1, "the settled one stays dead-lettered");
    assert_eq!(still[0].message_id.as_deref(), Some("msg-pub-1"));

    let back: Vec<String> = h
        .endpoint_receives("billing", SESSION)
        .await
        .into_iter()
        .filter_map(|m| m.message.message_id)
        .collect();
    let expected: Vec<String> = sent[1..]
        .iter()
        .filter_map(|m| m.message_id.clone())
        .collect();
    assert_eq!(
        back, expected,
        "every one back once, in the session's order"
    );

    // Once retention has removed the settled event, the Resolver cannot
    // say it is settled: still left, for another reason.
    let pruned = h
        .store
        .prune_expendable(i64::MAX, 10, &std::collections::BTreeSet::new())
        .unwrap();
    assert!(pruned >= 1, "the completed event is pruned");
    let unknown = h
        .manager
        .replay_all_dead_letters("billing", None, false)
        .await
        .unwrap();
    assert!(unknown.replayed.is_empty());
    assert!(
        matches!(
            &unknown.left[..],
            [(left, ManagerError::EventNotRecorded { event_id, .. })]
                if left.message_id.as_deref() == Some("msg-pub-1") && event_id == EVENT_ID
        ),
        "{:?}",
        unknown.left
    );

    let forced = h
        .manager
        .replay_all_dead_letters("billing", Some("billing"), true)
        .await
        .unwrap();
    assert_eq!(forced.replayed.len(), 1);
    assert!(forced.left.is_empty());
    assert!(
        h.manager
            .dead_letters("billing", None)
            .await
            .unwrap()
            .is_empty()
    );
    let error = h
        .manager
        .replay_all_dead_letters("billing", Some("elsewhere"), false)
        .await
        .unwrap_err();
    assert!(
        matches!(error, ManagerError::UnknownDeadLetterQueue { .. }),
        "{error}"
    );
    h.stop().await;
}

/// An operator may name an event by a message of it (the published
/// message's id, which each consuming endpoint's event shares): one event
/// is acted on; several must be told apart by endpoint or event id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_named_by_its_message_id_is_acted_on_when_that_is_one_event() {
    let mut h = Harness::start(&["billing", "shipping"]).await;
    h.send_and_record("billing", &forwarded("billing")).await;
    let mut at_shipping = forwarded("shipping");
    at_shipping.event_id = Some("shipping-event".into());
    h.send_and_record("shipping", &at_shipping).await;

    let error = h.manager.skip("msg-pub-1", None).await.unwrap_err();
    assert!(
        matches!(&error, ManagerError::AmbiguousMessage { events, .. }
            if events.len() == 2 && events.iter().any(|e| e.contains("'shipping-event' at 'shipping'"))),
        "{error}"
    );
    let sent = h.manager.skip("msg-pub-1", Some("shipping")).await.unwrap();
    assert_eq!(
        (sent.event_id.as_str(), sent.endpoint.as_str()),
        ("shipping-event", "shipping")
    );
    let error = h.manager.skip("no-such-message", None).await.unwrap_err();
    assert!(
        matches!(error, ManagerError::UnknownEvent { .. }),
        "{error}"
    );
    h.stop().await;
}

/// A replay of a whole queue replays a message id once: a second entry
/// with it (a message that failed again during the pass, or a reused id)
/// is left and named.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replaying_every_dead_letter_replays_a_message_id_once_per_pass() {
    let mut h = Harness::start(&["billing"]).await;
    let mut second = forwarded("billing");
    second.event_id = Some("second-event".into());
    h.send_and_record("billing", &forwarded("billing")).await;
    h.send_and_record("billing", &second).await;
    dead_letter_one(&h, SESSION, "Failed to handle message.").await;
    dead_letter_one(&h, SESSION, "Failed to handle message.").await;

    let done = h
        .manager
        .replay_all_dead_letters("billing", None, false)
        .await
        .unwrap();
    assert_eq!(done.replayed.len(), 1);
    assert!(
        matches!(
            &done.left[..],
            [(_, ManagerError::SeenInThisPass { message_id, .. })] if message_id == "msg-pub-1"
        ),
        "{:?}",
        done.left
    );
    let still = h.manager.dead_letters("billing", None).await.unwrap();
    assert_eq!(still.len(), 1, "the second stays dead-lettered");
    h.stop().await;
}

/// A Resolver store whose event lookups fail from the `fail_from`th on
/// (counting from 1), as a store gone bad part-way through a pass would.
struct LookupsFailFrom {
    inner: Arc<SqliteResolverStore>,
    lookups: std::sync::atomic::AtomicUsize,
    fail_from: usize,
}

impl ResolverStore for LookupsFailFrom {
    fn record(&self, observation: &Observation) -> Result<Recorded, StoreError> {
        self.inner.record(observation)
    }
    fn event(&self, event_id: &str) -> Result<Vec<EventDetail>, StoreError> {
        let n = 1 + self
            .lookups
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        if n >= self.fail_from {
            return Err(StoreError::Corrupt(format!("lookup {n} fails on purpose")));
        }
        self.inner.event(event_id)
    }
    fn events_of_message(&self, message_id: &str) -> Result<Vec<EventDetail>, StoreError> {
        self.inner.events_of_message(message_id)
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

/// A replay of a whole queue that fails part-way (here the Resolver store)
/// answers what it moved and why it stopped; what it had not reached stays
/// dead-lettered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_of_every_dead_letter_that_fails_part_way_says_what_it_moved_and_loses_nothing() {
    let mut h = Harness::start(&["billing"]).await;
    let mut second = forwarded("billing");
    second.event_id = Some("second-event".into());
    second.message_id = Some("msg-pub-2".into());
    h.send_and_record("billing", &forwarded("billing")).await;
    h.send_and_record("billing", &second).await;
    dead_letter_one(&h, SESSION, "Failed to handle message.").await;
    dead_letter_one(&h, SESSION, "Failed to handle message.").await;

    let failing = Manager::new(
        Arc::clone(&h.broker),
        Arc::new(LookupsFailFrom {
            inner: Arc::clone(&h.store),
            lookups: std::sync::atomic::AtomicUsize::new(0),
            fail_from: 2,
        }) as Arc<dyn ResolverStore>,
        control_key(),
    );
    let done = failing
        .replay_all_dead_letters("billing", None, false)
        .await
        .unwrap();
    assert_eq!(done.replayed.len(), 1, "the first was moved");
    assert_eq!(done.replayed[0].message_id.as_deref(), Some("msg-pub-1"));
    assert!(done.left.is_empty(), "{:?}", done.left);
    assert!(
        matches!(&done.stopped, Some(ManagerError::Store(_))),
        "{:?}",
        done.stopped
    );
    assert!(
        done.stopped
            .as_ref()
            .is_some_and(|why| why.to_string().contains("fails on purpose")),
        "{:?}",
        done.stopped
    );
    let still = h.manager.dead_letters("billing", None).await.unwrap();
    assert_eq!(
        still
            .iter()
            .map(|m| m.message_id.as_deref())
            .collect::<Vec<_>>(),
        vec![Some("msg-pub-2")],
        "the one not reached stays dead-lettered"
    );
    h.stop().await;
}

/// What the Resolver could not record lands in its own subscription's
/// dead-letter queue: a message it cannot decode, and one the bus
/// dead-lettered after the store failed it at every delivery. The Manager
/// lists them under `Resolver`, keeps them from removal unless forced (each
/// is what the audit trail lacks), and replays one without force, so the
/// Resolver records it once the store is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_resolvers_own_dead_letters_are_listed_kept_and_replayed_to_record_them() {
    let mut h = Harness::start(&["billing"]).await;
    let request = forwarded("billing");
    h.send_and_record("billing", &request).await;

    // Not a NimBus message: the Resolver dead-letters it as unrecordable.
    let mut junk = request.to_transport();
    junk.message_id = Some("junk-1".into());
    junk.body = b"not json".to_vec();
    junk.properties.remove(nimbus_wire::prop::MESSAGE_TYPE);
    h.broker.publish("Resolver", vec![junk]).await.unwrap();
    let got = tokio::time::timeout(PATIENCE, h.progress.recv())
        .await
        .unwrap()
        .unwrap();
    assert!(matches!(got.outcome, Consumed::DeadLettered(_)), "{got:?}");

    // The response, dead-lettered as the bus does at the last delivery a
    // failing store abandoned; the Resolver is stopped so it cannot take it.
    h.shutdown.cancel();
    (&mut h.resolver).await.unwrap().unwrap();
    let mut response = build::resolution_response(&request, ResponseTimes::default());
    response.message_id = Some("response-1".into());
    response.from = Some("billing".into());
    publish_and_dead_letter(
        &h,
        "Resolver",
        SubscriptionPath::new("Resolver", "Resolver"),
        &response,
        "the store kept failing",
    )
    .await;
    assert_eq!(
        h.store.event(EVENT_ID).unwrap()[0].record.status,
        Status::Pending,
        "the response is not recorded yet"
    );

    let listed = h.manager.dead_letters("Resolver", None).await.unwrap();
    let ids: Vec<_> = listed.iter().map(|d| d.message_id.as_deref()).collect();
    assert_eq!(ids, [Some("junk-1"), Some("response-1")], "{listed:?}");
    assert!(
        listed
            .iter()
            .all(|d| d.endpoint == "Resolver" && d.subscription == "Resolver")
    );
    assert_eq!(listed[1].event_id.as_deref(), Some(EVENT_ID));
    assert_eq!(
        listed[1].reason.as_deref(),
        Some("MaxDeliveryCountExceeded")
    );

    let which = DeadLetterId::MessageId("response-1".into());
    let error = h
        .manager
        .remove_dead_letter("Resolver", None, &which, false)
        .await
        .unwrap_err();
    assert!(
        matches!(error, ManagerError::DeadLetterStillNeeded { .. }),
        "{error}"
    );
    let settled = h
        .manager
        .remove_settled_dead_letters("Resolver")
        .await
        .unwrap();
    assert!(settled.removed.is_empty(), "{settled:?}");
    assert_eq!(
        h.manager
            .dead_letters("Resolver", None)
            .await
            .unwrap()
            .len(),
        2
    );

    // The store is back: the replayed response is recorded.
    h.restart_resolver();
    h.manager
        .replay_dead_letter("Resolver", None, &which, false)
        .await
        .unwrap();
    h.resolved(1).await;
    assert_eq!(
        h.store.event(EVENT_ID).unwrap()[0].record.status,
        Status::Completed
    );
    let left = h.manager.dead_letters("Resolver", None).await.unwrap();
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].message_id.as_deref(), Some("junk-1"));
    h.manager
        .remove_dead_letter(
            "Resolver",
            Some("Resolver"),
            &DeadLetterId::MessageId("junk-1".into()),
            true,
        )
        .await
        .unwrap();
    assert!(
        h.manager
            .dead_letters("Resolver", None)
            .await
            .unwrap()
            .is_empty()
    );
    h.stop().await;
}

/// A publish a producer's forwarder cannot forward (here: the consumer's
/// topic is gone) dead-letters on the forwarder, where no endpoint and no
/// Resolver sees it: `dead_letters` lists it under the producer's topic, a
/// replay is refused with what to do instead, and it is removed only by
/// force.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_a_forwarder_could_not_forward_is_listed_and_removed_only_by_force() {
    let (_dir, broker, store) = storefront_to_billing().await;
    broker.delete_topic("billing").await.unwrap();
    let manager = Manager::new(
        Arc::clone(&broker),
        Arc::clone(&store) as Arc<dyn ResolverStore>,
        control_key(),
    );
    assert!(
        manager
            .dead_letters("storefront", None)
            .await
            .unwrap()
            .is_empty(),
        "a producer's topic lists, though it has no endpoint subscription"
    );

    let publish = build::original_publish(&build::Publish {
        event_type_id: "OrderPlaced".into(),
        payload: r#"{"OrderId":"o-1001"}"#.into(),
        session_id: Some(SESSION.into()),
        message_id: Some("msg-lost-1".into()),
        publisher: Some("storefront".into()),
        ..build::Publish::default()
    });
    broker
        .publish("storefront", vec![publish.to_transport()])
        .await
        .unwrap();

    let listed = manager.dead_letters("storefront", None).await.unwrap();
    assert_eq!(listed.len(), 1, "{listed:?}");
    let lost = &listed[0];
    assert_eq!(
        (
            lost.endpoint.as_str(),
            lost.subscription.as_str(),
            lost.message_id.as_deref(),
            lost.reason.as_deref(),
            lost.event_type.as_deref(),
            lost.event_status,
        ),
        (
            "storefront",
            "billing",
            Some("msg-lost-1"),
            Some(nimbus_broker::REASON_FORWARD_TARGET_MISSING),
            Some("OrderPlaced"),
            None,
        )
    );
    let which = DeadLetterId::MessageId("msg-lost-1".into());

    let refused = manager
        .replay_dead_letter("storefront", None, &which, true)
        .await
        .unwrap_err();
    assert!(
        matches!(refused, ManagerError::NotForwarded { .. })
            && refused.to_string().contains("publish the event again"),
        "{refused}"
    );
    let refused = manager
        .replay_all_dead_letters("storefront", Some("billing"), false)
        .await
        .unwrap_err();
    assert!(
        matches!(refused, ManagerError::NotForwarded { .. }),
        "{refused}"
    );
    let kept = manager
        .remove_dead_letter("storefront", Some("billing"), &which, false)
        .await
        .unwrap_err();
    assert!(
        kept.to_string().contains("never forwarded"),
        "kept unless forced: {kept}"
    );
    let unknown = manager
        .remove_dead_letter("storefront", Some("shipping"), &which, true)
        .await
        .unwrap_err();
    assert!(
        matches!(unknown, ManagerError::UnknownDeadLetterQueue { .. }),
        "{unknown}"
    );
    assert_eq!(
        manager
            .dead_letters("storefront", None)
            .await
            .unwrap()
            .len(),
        1,
        "refusals change nothing"
    );

    let removed = manager
        .remove_dead_letter("storefront", None, &which, true)
        .await
        .unwrap();
    assert_eq!(removed.subscription, "billing");
    assert!(
        manager
            .dead_letters("storefront", None)
            .await
            .unwrap()
            .is_empty()
    );
}

/// Three events failed at `billing`, in sessions `s-0`, `s-1`, `s-2`, in
/// that order: their event ids.
async fn three_failed_at_billing(h: &mut Harness) -> Vec<String> {
    let mut ids = Vec::new();
    for n in 0..3 {
        let mut request = forwarded("billing");
        request.session_id = Some(format!("s-{n}"));
        request.event_id = Some(format!("event-{n}"));
        request.message_id = Some(format!("msg-pub-{n}"));
        failed_at_billing_from(h, request).await;
        ids.push(format!("event-{n}"));
        // Each fails a clock tick after the last, so "oldest first" has
        // one answer.
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    ids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_failed_event_is_resubmitted_oldest_first_up_to_the_limit() {
    let mut h = Harness::start(&["billing"]).await;
    let ids = three_failed_at_billing(&mut h).await;
    let ids_of = |events: &[Chosen]| {
        events
            .iter()
            .map(|c| c.event_id.clone())
            .collect::<Vec<_>>()
    };
    // The requests themselves wait on `billing/billing`: no engine runs.
    let waiting = h.active("billing").await;

    let preview = h
        .manager
        .act_on_failed(
            BulkAction::Resubmit,
            &BulkSelection {
                dry_run: true,
                ..BulkSelection::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(ids_of(&preview.chosen), ids);
    assert!(preview.sent.is_empty() && !preview.more, "{preview:?}");
    assert_eq!(
        h.active("billing").await,
        waiting,
        "a dry run sends nothing"
    );

    let aged = |age| BulkSelection {
        not_updated_for: Some(age),
        dry_run: true,
        ..BulkSelection::default()
    };
    let none = h
        .manager
        .act_on_failed(BulkAction::Skip, &aged(Duration::from_secs(3600)))
        .await
        .unwrap();
    assert!(none.chosen.is_empty(), "{none:?}");
    tokio::time::sleep(Duration::from_millis(20)).await;
    let all = h
        .manager
        .act_on_failed(BulkAction::Skip, &aged(Duration::from_millis(10)))
        .await
        .unwrap();
    assert_eq!(ids_of(&all.chosen), ids);

    let two = h
        .manager
        .act_on_failed(
            BulkAction::Resubmit,
            &BulkSelection {
                endpoint: Some("billing".into()),
                limit: Some(2),
                ..BulkSelection::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(ids_of(&two.chosen), ids[..2]);
    assert!(two.more, "a third matched beyond the limit");
    assert_eq!(
        two.sent
            .iter()
            .map(|s| (s.event_id.as_str(), s.message_type))
            .collect::<Vec<_>>(),
        [
            ("event-0", "ResubmissionRequest"),
            ("event-1", "ResubmissionRequest")
        ]
    );
    for (n, sent) in two.sent.iter().enumerate() {
        let received = h.endpoint_receives("billing", &format!("s-{n}")).await;
        let ids: Vec<_> = received
            .iter()
            .map(|m| m.message.message_id.clone().unwrap_or_default())
            .collect();
        assert!(ids.contains(&sent.message_id), "{ids:?} lacks {sent:?}");
    }
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bulk_operation_stops_at_a_refused_publish_and_names_what_it_did_not_send() {
    let mut h = Harness::start(&["billing"]).await;
    let ids = three_failed_at_billing(&mut h).await;
    let refused = h
        .manager
        .act_on_failed(
            BulkAction::Skip,
            &BulkSelection {
                endpoint: Some("billings".into()),
                ..BulkSelection::default()
            },
        )
        .await
        .unwrap_err();
    assert!(
        matches!(refused, ManagerError::NoSuchEndpoint { ref endpoint } if endpoint == "billings"),
        "{refused:?}"
    );
    let refused = h
        .manager
        .act_on_failed(
            BulkAction::Resubmit,
            &BulkSelection {
                limit: Some(0),
                ..BulkSelection::default()
            },
        )
        .await
        .unwrap_err();
    assert_eq!(
        refused.to_string(),
        "invalid selection: the limit must be at least 1"
    );
    // The endpoint's topic is gone: the first publish is refused, and the
    // rest are not attempted.
    h.broker.delete_topic("billing").await.unwrap();
    let done = h
        .manager
        .act_on_failed(BulkAction::Skip, &BulkSelection::default())
        .await
        .unwrap();
    assert!(done.sent.is_empty(), "{done:?}");
    assert_eq!(
        done.not_sent
            .iter()
            .map(|n| n.event.event_id.clone())
            .collect::<Vec<_>>(),
        ids
    );
    assert!(
        done.not_sent[0].error.contains("sending the SkipRequest"),
        "{done:?}"
    );
    assert!(
        done.not_sent[1..].iter().all(|n| n
            .error
            .starts_with("not attempted: sending the SkipRequest")),
        "{done:?}"
    );
    h.stop().await;
}

/// Leaves `SESSION` at `billing` blocked by `EVENT_ID` as the engine does,
/// with what it kept of the blocker from `kept` (none: as an earlier build
/// left it), and nothing of the event in the Resolver: its store was lost.
async fn blocked_without_a_record(h: &Harness, kept: Option<&NimbusMessage>, handoff: bool) {
    let mut state = SessionState::default();
    state.block(EVENT_ID);
    if let Some(message) = kept {
        state.note_blocker(message, handoff);
    }
    let lock = h
        .broker
        .accept_session(
            &SubscriptionPath::new("billing", "billing"),
            SessionSelector::Named(SESSION.into()),
            PATIENCE,
        )
        .await
        .unwrap();
    lock.set_state(Some(state.to_bytes())).await.unwrap();
    assert!(h.store.event(EVENT_ID).unwrap().is_empty());
}

/// Issue 40, item 5: a session whose blocker the Resolver had lost could
/// never be unblocked ("no event is known to the Resolver").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocker_the_resolver_lost_gets_the_control_messages_its_record_would_give() {
    for (handoff, vector) in [
        (false, "08-resubmission-request"),
        (false, "09-skip-request"),
        (true, "11-handoff-completed-request"),
        (true, "12-handoff-failed-request"),
    ] {
        let mut h = Harness::start(&["billing"]).await;
        blocked_without_a_record(&h, Some(&forwarded("billing")), handoff).await;
        let sent = match vector {
            "08-resubmission-request" => h.manager.resubmit(EVENT_ID, None, None).await,
            // By the id `nimbus publish` printed, as an operator may.
            "09-skip-request" => h.manager.skip("msg-pub-1", None).await,
            "11-handoff-completed-request" => {
                h.manager
                    .complete_handoff(EVENT_ID, None, Some(r#"{"imported":true}"#))
                    .await
            }
            _ => {
                h.manager
                    .fail_handoff(EVENT_ID, None, "DMF rejected 3 lines", Some("DmfRejected"))
                    .await
            }
        }
        .unwrap_or_else(|e| panic!("{vector}: {e}"));
        assert!(
            sent.notes
                .iter()
                .any(|n| n.contains("rebuilt from the broker's state of session")),
            "{vector}: {:?}",
            sent.notes
        );
        let mut got = h.endpoint_receives("billing", SESSION).await;
        assert_eq!(got.len(), 1, "{vector}: the control message alone");
        let control = unsealed(got.remove(0));
        assert_eq!(
            control.message.message_id.as_deref(),
            Some(sent.message_id.as_str())
        );
        assert_is_vector(&control, vector);

        // The store has the event now, its history saying once, first,
        // where its record came from; the control message is recorded on it.
        h.resolved(1).await;
        let detail = &h.store.event(EVENT_ID).unwrap()[0];
        let types: Vec<&str> = detail
            .history
            .iter()
            .map(|e| e.message_type.as_str())
            .collect();
        assert_eq!(types, [REBUILT_FROM_BROKER, sent.message_type], "{vector}");
        assert_eq!(
            detail.history[0].status,
            if handoff {
                Status::Pending
            } else {
                Status::Failed
            }
        );
        h.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_blocker_an_earlier_build_named_only_by_id_is_skipped_but_not_resubmitted() {
    let mut h = Harness::start(&["billing"]).await;
    blocked_without_a_record(&h, None, false).await;
    let refused = h.manager.resubmit(EVENT_ID, None, None).await.unwrap_err();
    assert!(
        matches!(refused, ManagerError::BlockerOnlyNamed { .. }),
        "{refused}"
    );
    assert!(refused.to_string().contains("skip it"), "{refused}");
    let refused = h
        .manager
        .complete_handoff(EVENT_ID, None, None)
        .await
        .unwrap_err();
    assert!(
        matches!(refused, ManagerError::NotPendingHandoff { .. }),
        "{refused}"
    );
    let unknown = h.manager.skip("no-such-event", None).await.unwrap_err();
    assert!(
        matches!(unknown, ManagerError::UnknownEvent { .. }),
        "{unknown}"
    );
    assert!(
        h.store.event(EVENT_ID).unwrap().is_empty(),
        "refusals record nothing"
    );
    assert_eq!(h.active("billing").await, 0, "refusals send nothing");

    let sent = h.manager.skip(EVENT_ID, None).await.unwrap();
    let got = h.endpoint_receives("billing", SESSION).await;
    assert_eq!(got.len(), 1);
    let skip = NimbusMessage::from_transport(&got[0].message).unwrap();
    assert_eq!(skip.message_type, MessageType::SkipRequest);
    assert_eq!(skip.event_id.as_deref(), Some(EVENT_ID));
    assert_eq!(skip.session_id.as_deref(), Some(SESSION));
    assert!(skip.is_from_manager());
    assert_eq!(skip.validate(), Ok(()));
    h.resolved(1).await;
    let detail = &h.store.event(EVENT_ID).unwrap()[0];
    assert_eq!(detail.history[0].message_type, REBUILT_FROM_BROKER);
    assert!(
        detail.history[0]
            .error_text
            .as_deref()
            .is_some_and(|note| note.contains("written by an earlier build")),
        "{:?}",
        detail.history[0]
    );
    assert_eq!(
        detail.history.last().unwrap().message_type,
        sent.message_type
    );
    h.stop().await;
}
