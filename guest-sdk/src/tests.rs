//! The SDK's own logic, run natively against a recording host: everything
//! up to the WIT boundary. The boundary itself is exercised by the host's
//! tests with the components built from `examples/` and `tests/guests/`.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::bindings::nimbus::handler::types as wit;
use crate::dispatch::{HandlerRoute, Route, assert_registrations, decode, route};
use crate::host::Host;
use crate::{
    Context, Error, ErrorKind, Event, FollowUp, Handler, Level, Outcome, PropertyValue,
    PublishError, ResultExt, pending_handoff,
};

/// One log record: level, message, fields.
type LogRecord = (Level, String, Vec<(String, String)>);

#[derive(Default)]
struct Recorder {
    logs: Mutex<Vec<LogRecord>>,
    published: Mutex<Vec<wit::FollowUp>>,
    config: Vec<(String, String)>,
    refuse_with: Option<wit::HostError>,
}

impl Host for Recorder {
    fn log(&self, level: Level, message: &str, fields: &[(String, String)]) {
        self.logs
            .lock()
            .unwrap()
            .push((level, message.to_owned(), fields.to_vec()));
    }

    fn panicked(&self, _: &str) {}

    fn publish(&self, follow_up: &wit::FollowUp) -> Result<(), wit::HostError> {
        if let Some(refusal) = &self.refuse_with {
            return Err(refusal.clone());
        }
        self.published.lock().unwrap().push(follow_up.clone());
        Ok(())
    }

    fn config(&self, key: &str) -> Option<String> {
        self.config
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.clone())
    }

    fn config_all(&self) -> Vec<(String, String)> {
        self.config.clone()
    }

    fn delivery_count(&self) -> u32 {
        3
    }

    fn message_type(&self) -> String {
        "ResubmissionRequest".to_owned()
    }

    fn sender(&self) -> Option<String> {
        Some("shop".to_owned())
    }
}

fn host(recorder: Recorder) -> &'static Recorder {
    Box::leak(Box::new(recorder))
}

fn event(event_type: &str, payload: &str) -> wit::Event {
    wit::Event {
        event_id: "ev-1".to_owned(),
        event_type: event_type.to_owned(),
        message_id: "msg-1".to_owned(),
        session_id: "s-1".to_owned(),
        correlation_id: Some("corr-1".to_owned()),
        parent_message_id: Some("parent-1".to_owned()),
        originating_message_id: None,
        retry_count: 2,
        enqueued_time: 1_700_000_000_123,
        payload: payload.to_owned(),
        properties: vec![wit::Property {
            name: "Tenant".to_owned(),
            value: wit::PropertyValue::Str("acme".to_owned()),
        }],
    }
}

#[derive(Debug, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "PascalCase")]
struct OrderPlaced {
    order_id: String,
    lines: Vec<Line>,
}

#[derive(Debug, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "PascalCase")]
struct Line {
    sku: String,
    quantity: u32,
}

impl Event for OrderPlaced {
    const EVENT_TYPE: &'static str = "OrderPlaced";
}

#[derive(Debug, Deserialize)]
struct Ping {}

impl Event for Ping {
    const EVENT_TYPE: &'static str = "Ping";
}

/// Answers from the payload's `OrderId`, so each outcome kind is reachable.
struct Orders;

impl Handler<OrderPlaced> for Orders {
    fn handle(&self, order: OrderPlaced, ctx: &Context) -> Result<Outcome, Error> {
        crate::info!(ctx, { order_id: order.order_id, lines: order.lines.len() }, "order {}", order.order_id);
        match order.order_id.as_str() {
            "handoff" => Ok(pending_handoff("DMF import in flight")
                .external_job_id(format!("job-{}", ctx.event_id()))
                .expected_within(Duration::from_secs(90))
                .into()),
            "transient" => Err(Error::transient("PartnerUnavailable", "503")
                .retry_after(Duration::from_millis(1500))),
            "publish" => {
                ctx.publish(
                    FollowUp::new(
                        "OrderAccepted",
                        format!("{}:accepted", ctx.event_id()),
                        &order,
                    )
                    .session_id("other-session")
                    .property("Priority", 3)
                    .property("Express", true),
                )?;
                Ok(().into())
            }
            _ => Ok(Outcome::Completed),
        }
    }
}

impl Handler<Ping> for Orders {
    fn handle(&self, _: Ping, _: &Context) -> Result<Outcome, Error> {
        Ok(Outcome::Completed)
    }
}

fn dispatch(host: &'static Recorder, event: wit::Event) -> Result<wit::Outcome, wit::Error> {
    route(
        event,
        &[
            &HandlerRoute::<_, _, OrderPlaced>::new(|| Orders) as &dyn Route,
            &HandlerRoute::<_, _, Ping>::new(|| Orders),
        ],
        host,
    )
}

fn detail(error: wit::Error) -> (&'static str, wit::ErrorDetail) {
    match error {
        wit::Error::Failed(d) => ("failed", d),
        wit::Error::Transient(d) => ("transient", d),
        wit::Error::Permanent(d) => ("permanent", d),
    }
}

#[test]
fn dispatches_by_event_type_and_completes() {
    let host = host(Recorder::default());
    let outcome = dispatch(
        host,
        event(
            "OrderPlaced",
            r#"{"OrderId":"o-1","Lines":[{"Sku":"A","Quantity":2}]}"#,
        ),
    );
    assert_eq!(outcome, Ok(wit::Outcome::Completed));
    let logs = host.logs.lock().unwrap();
    assert_eq!(logs.len(), 1);
    assert_eq!(logs[0].0, Level::Info);
    assert_eq!(logs[0].1, "order o-1");
    assert_eq!(
        logs[0].2,
        vec![
            ("order_id".to_owned(), "o-1".to_owned()),
            ("lines".to_owned(), "1".to_owned())
        ]
    );
    assert_eq!(
        dispatch(host, event("Ping", "{}")),
        Ok(wit::Outcome::Completed)
    );
}

#[test]
fn pending_handoff_carries_reason_job_id_and_expected_duration() {
    let outcome = dispatch(
        host(Recorder::default()),
        event("OrderPlaced", r#"{"OrderId":"handoff","Lines":[]}"#),
    );
    assert_eq!(
        outcome,
        Ok(wit::Outcome::PendingHandoff(wit::PendingHandoff {
            reason: "DMF import in flight".to_owned(),
            external_job_id: Some("job-ev-1".to_owned()),
            expected_by: Some(90_000),
        }))
    );
}

#[test]
fn errors_keep_kind_type_message_and_retry_after() {
    let outcome = dispatch(
        host(Recorder::default()),
        event("OrderPlaced", r#"{"OrderId":"transient","Lines":[]}"#),
    );
    let (kind, d) = detail(outcome.unwrap_err());
    assert_eq!(kind, "transient");
    assert_eq!(d.error_type, "PartnerUnavailable");
    assert_eq!(d.message, "503");
    assert_eq!(d.retry_after, Some(1500));

    for (error, expected) in [
        (Error::failed("A", "a"), "failed"),
        (Error::transient("B", "b"), "transient"),
        (Error::permanent("C", "c"), "permanent"),
    ] {
        let (kind, d) = detail(error.into());
        assert_eq!(kind, expected);
        assert_eq!(d.retry_after, None);
    }
}

#[test]
fn an_unregistered_event_type_is_permanent_and_lists_the_handled_types() {
    let (kind, d) =
        detail(dispatch(host(Recorder::default()), event("OrderCancelled", "{}")).unwrap_err());
    assert_eq!(kind, "permanent");
    assert_eq!(d.error_type, "UnknownEventType");
    assert!(d.message.contains("`OrderCancelled`"), "{}", d.message);
    assert!(d.message.contains("OrderPlaced, Ping"), "{}", d.message);
}

#[test]
fn a_payload_of_the_wrong_shape_is_permanent_and_names_the_nested_field() {
    let (kind, d) = detail(
        dispatch(
            host(Recorder::default()),
            event(
                "OrderPlaced",
                r#"{"OrderId":"o-1","Lines":[{"Sku":"A","Quantity":"two"}]}"#,
            ),
        )
        .unwrap_err(),
    );
    assert_eq!(kind, "permanent");
    assert_eq!(d.error_type, "InvalidPayload");
    assert!(d.message.contains("`Lines[0].Quantity`"), "{}", d.message);
    assert!(d.message.contains("`OrderPlaced`"), "{}", d.message);
}

#[test]
fn a_missing_field_is_named() {
    let err = decode::<OrderPlaced>(r#"{"OrderId":"o-1","Lines":[{"Sku":"A"}]}"#).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Permanent);
    assert!(
        err.message().contains("missing field `Quantity`"),
        "{}",
        err.message()
    );
    assert!(err.message().contains("`Lines[0]`"), "{}", err.message());

    let err = decode::<OrderPlaced>(r#"{"Lines":[]}"#).unwrap_err();
    assert!(
        err.message().contains("missing field `OrderId`"),
        "{}",
        err.message()
    );
}

#[test]
fn a_payload_that_is_not_json_says_so() {
    for payload in ["", "{\"OrderId\":", "not json"] {
        let err = decode::<OrderPlaced>(payload).unwrap_err();
        assert_eq!(err.error_type(), "InvalidPayload");
        assert!(
            err.message().contains("is not valid JSON"),
            "{payload:?}: {}",
            err.message()
        );
    }
    let err = decode::<OrderPlaced>(r#"{"OrderId":"o","Lines":[]} {}"#).unwrap_err();
    assert!(
        err.message().contains("trailing characters"),
        "{}",
        err.message()
    );
}

#[test]
fn a_decoded_payload_equals_the_original() {
    let order = OrderPlaced {
        order_id: "o-7".to_owned(),
        lines: vec![Line {
            sku: "Z".to_owned(),
            quantity: 9,
        }],
    };
    let json = serde_json::to_string(&order).unwrap();
    assert_eq!(decode::<OrderPlaced>(&json).unwrap(), order);
}

#[test]
fn follow_ups_reach_the_host_with_session_and_properties() {
    let host = host(Recorder::default());
    let outcome = dispatch(
        host,
        event("OrderPlaced", r#"{"OrderId":"publish","Lines":[]}"#),
    );
    assert_eq!(outcome, Ok(wit::Outcome::Completed));
    let published = host.published.lock().unwrap();
    assert_eq!(
        *published,
        vec![wit::FollowUp {
            event_type: "OrderAccepted".to_owned(),
            message_id: "ev-1:accepted".to_owned(),
            payload: r#"{"OrderId":"publish","Lines":[]}"#.to_owned(),
            session_id: Some("other-session".to_owned()),
            properties: vec![
                wit::Property {
                    name: "Priority".to_owned(),
                    value: wit::PropertyValue::Int(3),
                },
                wit::Property {
                    name: "Express".to_owned(),
                    value: wit::PropertyValue::Boolean(true),
                },
            ],
        }]
    );
}

#[test]
fn a_refused_follow_up_fails_the_event_with_the_hosts_reason() {
    let host = host(Recorder {
        refuse_with: Some(wit::HostError::LimitExceeded(
            "at most 100 follow-ups per event".to_owned(),
        )),
        ..Recorder::default()
    });
    let (kind, d) = detail(
        dispatch(
            host,
            event("OrderPlaced", r#"{"OrderId":"publish","Lines":[]}"#),
        )
        .unwrap_err(),
    );
    assert_eq!(kind, "failed");
    assert_eq!(d.error_type, "PublishRejected");
    assert!(
        d.message.contains("at most 100 follow-ups per event"),
        "{}",
        d.message
    );
}

#[test]
fn a_payload_that_cannot_be_serialized_is_reported_at_publish() {
    let ctx = Context::new(event("Ping", "{}"), host(Recorder::default()));
    let mut unserializable = BTreeMap::new();
    unserializable.insert((1, 2), "tuple keys are not JSON");
    let err = ctx
        .publish(FollowUp::new("Bad", "ev-1:bad", &unserializable))
        .unwrap_err();
    assert!(matches!(err, PublishError::Serialize { ref event_type, .. } if event_type == "Bad"));
    assert!(err.to_string().contains("`Bad`"), "{err}");
}

#[test]
fn context_exposes_the_event_metadata() {
    let ctx = Context::new(event("Ping", "{\"x\":1}"), host(Recorder::default()));
    assert_eq!(ctx.event_id(), "ev-1");
    assert_eq!(ctx.event_type(), "Ping");
    assert_eq!(ctx.message_id(), "msg-1");
    assert_eq!(ctx.session_id(), "s-1");
    assert_eq!(ctx.correlation_id(), Some("corr-1"));
    assert_eq!(ctx.parent_message_id(), Some("parent-1"));
    assert_eq!(ctx.originating_message_id(), None);
    assert_eq!(ctx.retry_count(), 2);
    assert_eq!(ctx.enqueued_time_ms(), 1_700_000_000_123);
    assert_eq!(
        ctx.enqueued_time(),
        std::time::UNIX_EPOCH + Duration::from_millis(1_700_000_000_123)
    );
    assert_eq!(ctx.payload(), "{\"x\":1}");
    assert_eq!(
        ctx.property("Tenant"),
        Some(&PropertyValue::Str("acme".to_owned()))
    );
    assert_eq!(ctx.property("tenant"), None);
    // Asked of the host, not carried in the event record.
    assert_eq!(ctx.delivery_count(), 3);
    assert_eq!(ctx.message_type(), "ResubmissionRequest");
    assert_eq!(ctx.sender().as_deref(), Some("shop"));
}

#[test]
fn config_values_parse_or_fail_naming_key_and_value() {
    let ctx = Context::new(
        event("Ping", "{}"),
        host(Recorder {
            config: vec![
                ("limit".to_owned(), "250.5".to_owned()),
                ("retries".to_owned(), "many".to_owned()),
            ],
            ..Recorder::default()
        }),
    );
    assert_eq!(ctx.config("limit").as_deref(), Some("250.5"));
    assert_eq!(ctx.config_parse::<f64>("limit"), Ok(Some(250.5)));
    assert_eq!(ctx.config_parse::<f64>("absent"), Ok(None));
    let err = ctx.config_parse::<u32>("retries").unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Failed);
    assert_eq!(err.error_type(), "InvalidConfig");
    assert!(
        err.message().contains("`retries` = \"many\""),
        "{}",
        err.message()
    );
    assert!(err.message().contains("u32"), "{}", err.message());
    assert_eq!(ctx.config_all().len(), 2);
}

#[test]
fn log_levels_and_macro_fields_reach_the_host() {
    let recorder = host(Recorder::default());
    let ctx = Context::new(event("Ping", "{}"), recorder);
    ctx.trace("t");
    ctx.debug("d");
    ctx.warn("w");
    ctx.error("e");
    crate::warn!(ctx, "retry {} of {}", 2, 5);
    crate::error!(&ctx, { code: 503, partner: "erp" }, "partner down");
    let logs = recorder.logs.lock().unwrap();
    let levels: Vec<Level> = logs.iter().map(|l| l.0).collect();
    assert_eq!(
        levels,
        [
            Level::Trace,
            Level::Debug,
            Level::Warn,
            Level::Error,
            Level::Warn,
            Level::Error
        ]
    );
    assert_eq!(logs[4].1, "retry 2 of 5");
    assert_eq!(
        logs[5].2,
        vec![
            ("code".to_owned(), "503".to_owned()),
            ("partner".to_owned(), "erp".to_owned())
        ]
    );
}

#[test]
fn result_ext_maps_any_error_with_its_text() {
    let err = "x".parse::<u8>().or_transient("Parse").unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Transient);
    assert_eq!(err.message(), "invalid digit found in string");
    let err = "x".parse::<u8>().or_permanent("Parse").unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Permanent);
    assert_eq!(
        err.to_string(),
        "permanent Parse: invalid digit found in string"
    );
}

#[test]
fn durations_saturate_instead_of_wrapping() {
    let (_, d) = detail(Error::failed("A", "a").retry_after(Duration::MAX).into());
    assert_eq!(d.retry_after, Some(u64::MAX));
}

#[test]
fn distinct_registrations_pass() {
    assert_registrations(&["OrderPlaced", "Ping"]);
}

#[test]
#[should_panic(expected = "registered twice")]
fn a_duplicate_registration_is_refused() {
    assert_registrations(&["OrderPlaced", "Ping", "OrderPlaced"]);
}

#[test]
#[should_panic(expected = "empty EVENT_TYPE")]
fn an_empty_event_type_is_refused() {
    assert_registrations(&["OrderPlaced", ""]);
}

#[derive(Debug, Deserialize)]
struct Nested {
    #[expect(dead_code, reason = "only decoded")]
    data: serde_json::Value,
}

impl Event for Nested {
    const EVENT_TYPE: &'static str = "Nested";
}

#[test]
fn a_payload_nested_beyond_serde_json_limit_says_so() {
    let nested = |depth: usize| format!(r#"{{"data":{}{}}}"#, "[".repeat(depth), "]".repeat(depth));
    assert!(decode::<Nested>(&nested(100)).is_ok());
    let err = decode::<Nested>(&nested(200)).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Permanent);
    assert!(
        err.message().contains("nested too deeply"),
        "{}",
        err.message()
    );
}

#[test]
fn only_the_handler_of_the_arriving_event_type_is_built() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static ORDERS_BUILT: AtomicUsize = AtomicUsize::new(0);
    static PINGS_BUILT: AtomicUsize = AtomicUsize::new(0);
    let outcome = route(
        event("Ping", "{}"),
        &[
            &HandlerRoute::<_, _, OrderPlaced>::new(|| {
                ORDERS_BUILT.fetch_add(1, Ordering::Relaxed);
                Orders
            }) as &dyn Route,
            &HandlerRoute::<_, _, Ping>::new(|| {
                PINGS_BUILT.fetch_add(1, Ordering::Relaxed);
                Orders
            }),
        ],
        host(Recorder::default()),
    );
    assert_eq!(outcome, Ok(wit::Outcome::Completed));
    assert_eq!(ORDERS_BUILT.load(Ordering::Relaxed), 0);
    assert_eq!(PINGS_BUILT.load(Ordering::Relaxed), 1);
}

/// A handler that gives up on a partner after three deliveries, as the
/// delivery count lets one.
struct PatientCaller;

#[derive(Deserialize)]
struct Call {}

impl Event for Call {
    const EVENT_TYPE: &'static str = "Call";
}

impl Handler<Call> for PatientCaller {
    fn handle(&self, _: Call, ctx: &Context) -> Result<Outcome, Error> {
        if ctx.delivery_count() < 3 {
            return Err(Error::transient("PartnerBusy", "try again"));
        }
        let from = ctx.sender().unwrap_or_default();
        Err(Error::failed(
            "GaveUp",
            format!("{} from {from} after 3 deliveries", ctx.message_type()),
        ))
    }
}

#[test]
fn the_test_host_answers_the_delivery_facts_of_its_event() {
    use crate::testing::{TestEvent, TestHost};

    let first = TestHost::new().handle(&PatientCaller, TestEvent::new("Call", "{}"));
    assert_eq!(first.result.unwrap_err().kind(), ErrorKind::Transient);

    let third = TestHost::new().handle(
        &PatientCaller,
        TestEvent::new("Call", "{}")
            .delivery_count(3)
            .message_type("RetryRequest")
            .sender("shop"),
    );
    let error = third.result.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Failed);
    assert_eq!(error.message(), "RetryRequest from shop after 3 deliveries");
}
