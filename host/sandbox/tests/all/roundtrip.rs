//! Every outcome and error kind, and every event, follow-up and log field,
//! crosses the host/guest boundary intact (through `tests/guests/echo`,
//! whose payload is a script of what to do). Also: the probe sees no file,
//! no variable and no socket.

use crate::support;

use std::collections::BTreeMap;
use std::sync::OnceLock;
use std::time::{Duration, UNIX_EPOCH};

use nimbus_handler::{Delivery, ErrorKind, Event, HandlerError, Outcome, PendingHandoff};
use nimbus_sandbox::{HandlerVersion, Invocation, Limits, LogLevel, LogSource, Sandbox};
use nimbus_transport::{Properties, PropertyValue};
use support::{event, guest, sandbox};

fn load(sandbox: &Sandbox, crate_name: &str, config: &[(&str, &str)]) -> HandlerVersion {
    let bytes = std::fs::read(guest(crate_name)).expect("read guest");
    let config: BTreeMap<String, String> = config
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    sandbox
        .load_bytes(crate_name, &bytes, Limits::default(), config)
        .expect("guest loads")
}

/// One compiled `echo` shared by the tests of this file (compiling it per
/// test would dominate their run time); every invocation is still a fresh
/// instance.
fn echo(script: &str) -> Invocation {
    static ECHO: OnceLock<HandlerVersion> = OnceLock::new();
    ECHO.get_or_init(|| load(&sandbox(), "echo", &[]))
        .invoke(event("Echo", script))
}

fn error(
    kind: ErrorKind,
    error_type: &str,
    message: &str,
    retry_after_ms: Option<u64>,
) -> HandlerError {
    HandlerError {
        kind,
        error_type: error_type.to_owned(),
        message: message.to_owned(),
        retry_after: retry_after_ms.map(Duration::from_millis),
    }
}

#[test]
fn completed_round_trips() {
    assert_eq!(echo("{}").report.result, Ok(Outcome::Completed));
    assert_eq!(
        echo(r#"{"Outcome":"Completed"}"#).report.result,
        Ok(Outcome::Completed)
    );
}

#[test]
fn pending_handoff_round_trips_with_every_field() {
    let full = echo(
        r#"{"Outcome":"PendingHandoff","Reason":"DMF import","JobId":"job-7","ExpectedWithinMs":90000}"#,
    );
    assert_eq!(
        full.report.result,
        Ok(Outcome::PendingHandoff(PendingHandoff {
            reason: "DMF import".to_owned(),
            external_job_id: Some("job-7".to_owned()),
            expected_by: Some(Duration::from_millis(90_000)),
        }))
    );
    let bare = echo(r#"{"Outcome":"PendingHandoff","Reason":"waiting"}"#);
    assert_eq!(
        bare.report.result,
        Ok(Outcome::PendingHandoff(PendingHandoff {
            reason: "waiting".to_owned(),
            external_job_id: None,
            expected_by: None,
        }))
    );
}

#[test]
fn every_error_kind_round_trips_with_every_field() {
    for (outcome, kind) in [
        ("Failed", ErrorKind::Failed),
        ("Transient", ErrorKind::Transient),
        ("Permanent", ErrorKind::Permanent),
    ] {
        let with_retry = echo(&format!(
            r#"{{"Outcome":"{outcome}","ErrorType":"PartnerUnavailable","Message":"503 from partner","RetryAfterMs":1500}}"#
        ));
        assert_eq!(
            with_retry.report.result,
            Err(error(
                kind,
                "PartnerUnavailable",
                "503 from partner",
                Some(1500)
            ))
        );
        let without = echo(&format!(
            r#"{{"Outcome":"{outcome}","ErrorType":"Nope","Message":"no"}}"#
        ));
        assert_eq!(without.report.result, Err(error(kind, "Nope", "no", None)));
    }
}

#[test]
fn follow_ups_are_held_even_when_the_outcome_is_an_error() {
    // The engine drops them on an error; the sandbox reports what was asked.
    let invocation = echo(
        r#"{"Outcome":"Transient","ErrorType":"PartnerUnavailable","Message":"503","RetryAfterMs":1500,"Publish":2}"#,
    );
    assert!(invocation.report.result.is_err());
    assert_eq!(invocation.report.follow_ups.len(), 2);
}

#[test]
fn every_event_field_reaches_the_handler() {
    let sandbox = sandbox();
    let echo = load(&sandbox, "echo", &[("region", "eu"), ("tier", "gold")]);
    let payload = r#"{"Describe":true}"#;
    let invocation = echo.invoke(Event {
        event_id: "evt-1".to_owned(),
        event_type: "Echo".to_owned(),
        message_id: "msg-1".to_owned(),
        session_id: "sess-1".to_owned(),
        correlation_id: Some("corr-1".to_owned()),
        parent_message_id: Some("parent-1".to_owned()),
        originating_message_id: Some("origin-1".to_owned()),
        retry_count: 3,
        enqueued_time: UNIX_EPOCH + Duration::from_millis(1_700_000_000_123),
        payload: payload.to_owned(),
        properties: Properties::from([
            ("S".to_owned(), PropertyValue::String("text".to_owned())),
            ("I".to_owned(), PropertyValue::Int(-42)),
            ("F".to_owned(), PropertyValue::Float(1.5)),
            ("B".to_owned(), PropertyValue::Bool(true)),
        ]),
        delivery: Delivery {
            count: 4,
            message_type: "ResubmissionRequest",
            from: Some("Manager".to_owned()),
        },
    });
    assert_eq!(invocation.report.result, Ok(Outcome::Completed));
    let described = invocation
        .report
        .follow_ups
        .iter()
        .find(|f| f.event_type == "EchoDescribed")
        .expect("EchoDescribed follow-up");
    assert_eq!(described.message_id, "evt-1:described");
    let seen: serde_json::Value = serde_json::from_str(&described.payload).expect("JSON");
    let expected = serde_json::json!({
        "EventId": "evt-1", "EventType": "Echo", "MessageId": "msg-1", "SessionId": "sess-1",
        "CorrelationId": "corr-1", "ParentMessageId": "parent-1",
        "OriginatingMessageId": "origin-1", "RetryCount": 3, "EnqueuedTimeMs": 1_700_000_000_123u64,
        "Properties": {"S": "text", "I": -42, "F": 1.5, "B": true},
        "Config": {"region": "eu", "tier": "gold"},
        "Payload": payload,
        "DeliveryCount": 4, "MessageType": "ResubmissionRequest", "From": "Manager",
    });
    assert_eq!(seen, expected);
}

#[test]
fn absent_event_ids_reach_the_handler_as_none() {
    let invocation = echo(r#"{"Describe":true}"#);
    let described = &invocation.report.follow_ups[0];
    let seen: serde_json::Value = serde_json::from_str(&described.payload).expect("JSON");
    assert!(seen["CorrelationId"].is_null());
    assert!(seen["ParentMessageId"].is_null());
    assert!(seen["OriginatingMessageId"].is_null());
    // An event built without delivery facts is a first delivery of a publish.
    assert_eq!(seen["DeliveryCount"], 1);
    assert_eq!(seen["MessageType"], "EventRequest");
    assert!(seen["From"].is_null());
}

#[test]
fn follow_up_fields_round_trip() {
    let invocation = echo(
        r#"{"FollowUps":[{"EventType":"OrderShipped","MessageId":"e:ship","Payload":{"A":[1,2]},"SessionId":"other","Properties":{"P":"str","N":7,"X":2.5,"T":false}}],"Publish":1,"PublishSession":"s-2"}"#,
    );
    assert_eq!(invocation.report.result, Ok(Outcome::Completed));
    let shipped = invocation
        .report
        .follow_ups
        .iter()
        .find(|f| f.event_type == "OrderShipped")
        .expect("follow-up");
    assert_eq!(shipped.message_id, "e:ship");
    assert_eq!(shipped.session_id.as_deref(), Some("other"));
    let payload: serde_json::Value = serde_json::from_str(&shipped.payload).expect("JSON");
    assert_eq!(payload, serde_json::json!({"A": [1, 2]}));
    assert_eq!(
        shipped.properties,
        Properties::from([
            ("N".to_owned(), PropertyValue::Int(7)),
            ("P".to_owned(), PropertyValue::String("str".to_owned())),
            ("T".to_owned(), PropertyValue::Bool(false)),
            ("X".to_owned(), PropertyValue::Float(2.5)),
        ])
    );
    let numbered = invocation
        .report
        .follow_ups
        .iter()
        .find(|f| f.event_type == "EchoFollowUp")
        .expect("numbered follow-up");
    assert_eq!(numbered.message_id, "evt-Echo:echo:0");
    assert_eq!(numbered.session_id.as_deref(), Some("s-2"));
    assert_eq!(
        numbered.properties,
        Properties::from([("Index".to_owned(), PropertyValue::Int(0))])
    );
}

#[test]
fn an_empty_follow_up_message_id_is_refused_by_the_host() {
    let invocation = echo(r#"{"FollowUps":[{"EventType":"X","MessageId":"","Payload":{}}]}"#);
    let error = invocation.report.result.expect_err("refused");
    assert_eq!(error.kind, ErrorKind::Failed);
    assert_eq!(error.error_type, "PublishRejected");
    assert!(error.message.contains("message-id"), "{error}");
    assert!(invocation.report.follow_ups.is_empty());
}

#[test]
fn too_many_follow_ups_hit_the_host_bound() {
    let count = nimbus_sandbox::MAX_FOLLOW_UPS_PER_EVENT + 1;
    let invocation = echo(&format!(r#"{{"Publish":{count}}}"#));
    let error = invocation.report.result.expect_err("refused");
    assert_eq!(error.error_type, "PublishRejected");
    assert!(error.message.contains("at most"), "{error}");
    assert_eq!(
        invocation.report.follow_ups.len(),
        nimbus_sandbox::MAX_FOLLOW_UPS_PER_EVENT
    );
}

#[test]
fn logs_stdout_and_stderr_are_captured_with_level_source_and_fields() {
    let invocation = echo(
        r#"{"Stdout":"to stdout\n","Stderr":"to stderr\n","Logs":[{"Level":"Warn","Message":"careful","Fields":{"k":"v"}},{"Level":"Debug","Message":"detail"}]}"#,
    );
    assert_eq!(invocation.report.result, Ok(Outcome::Completed));
    let find = |message: &str| {
        invocation
            .logs
            .iter()
            .find(|r| r.message == message)
            .unwrap_or_else(|| panic!("{message:?} in {:?}", invocation.logs))
    };
    let careful = find("careful");
    assert_eq!(careful.level, LogLevel::Warn);
    assert_eq!(careful.source, LogSource::Handler);
    assert_eq!(careful.fields, [("k".to_owned(), "v".to_owned())]);
    assert_eq!(find("detail").level, LogLevel::Debug);
    assert_eq!(find("to stdout").source, LogSource::Stdout);
    assert_eq!(find("to stderr").source, LogSource::Stderr);
}

#[test]
fn called_asynchronously_stdout_and_stderr_are_captured_through_async_wasi() {
    let sandbox = sandbox();
    let echo = load(&sandbox, "echo", &[]);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime");
    let invocation = runtime.block_on(echo.invoke_async(event(
        "Echo",
        r#"{"Stdout":"async out\n","Stderr":"async err\n"}"#,
    )));
    assert_eq!(invocation.report.result, Ok(Outcome::Completed));
    let source_of = |message: &str| {
        invocation
            .logs
            .iter()
            .find(|r| r.message == message)
            .map(|r| r.source)
    };
    assert_eq!(
        source_of("async out"),
        Some(LogSource::Stdout),
        "{:?}",
        invocation.logs
    );
    assert_eq!(
        source_of("async err"),
        Some(LogSource::Stderr),
        "{:?}",
        invocation.logs
    );
}

#[test]
fn log_records_past_the_per_event_bound_are_counted_not_kept() {
    let logs: Vec<String> = (0..1005)
        .map(|n| format!(r#"{{"Level":"Info","Message":"line {n}"}}"#))
        .collect();
    let invocation = echo(&format!(r#"{{"Logs":[{}]}}"#, logs.join(",")));
    assert_eq!(invocation.report.result, Ok(Outcome::Completed));
    let handler_records = invocation
        .logs
        .iter()
        .filter(|r| r.source == LogSource::Handler)
        .count();
    assert_eq!(handler_records, 1000);
    let note = invocation.logs.last().expect("the sandbox's note");
    assert_eq!(note.source, LogSource::Sandbox);
    assert!(
        note.message.starts_with("5 more log records were dropped"),
        "{}",
        note.message
    );
}

#[test]
fn config_is_read_from_the_manifest_table() {
    let sandbox = sandbox();
    let echo = load(&sandbox, "echo", &[("reject_over_total", "100")]);
    let invocation = echo.invoke(event(
        "Echo",
        r#"{"ReadConfig":["reject_over_total","missing"]}"#,
    ));
    assert_eq!(invocation.report.result, Ok(Outcome::Completed));
    let messages: Vec<&str> = invocation.logs.iter().map(|r| r.message.as_str()).collect();
    assert!(
        messages.contains(&r#"config reject_over_total = Some("100")"#),
        "{messages:?}"
    );
    assert!(messages.contains(&"config missing = None"), "{messages:?}");
}

#[test]
fn the_probe_sees_no_file_no_variable_and_no_socket() {
    let sandbox = sandbox();
    let probe = load(&sandbox, "probe", &[]);
    let invocation = probe.invoke(event("Probe", "{}"));
    assert_eq!(invocation.report.result, Ok(Outcome::Completed));
    let result = invocation
        .report
        .follow_ups
        .iter()
        .find(|f| f.event_type == "ProbeResult")
        .expect("ProbeResult");
    let seen: serde_json::Value = serde_json::from_str(&result.payload).expect("JSON");
    for denied in ["file", "dir", "socket"] {
        assert!(
            seen[denied]
                .as_str()
                .is_some_and(|s| s.starts_with("denied: ")),
            "{denied}: {seen}"
        );
    }
    assert!(seen["env"].is_null(), "{seen}");
    assert!(seen["path"].is_null(), "{seen}");
    assert_eq!(seen["env_count"], 0, "{seen}");
}

/// A component built against the contract as first released (no `delivery`
/// interface; `tests/guests/legacy-abi` binds a frozen copy of the WIT) loads
/// and runs on this host: an interface added to the package must not strand
/// the components already deployed (decision 0128).
#[test]
fn a_component_built_before_the_delivery_interface_still_runs() {
    let sandbox = sandbox();
    let legacy = load(&sandbox, "legacy-abi", &[]);
    assert!(
        !legacy.imports().iter().any(|i| i.contains("delivery")),
        "the legacy component must not import `delivery`: {:?}",
        legacy.imports()
    );
    assert!(
        legacy
            .imports()
            .iter()
            .any(|i| i == "nimbus:handler/log@0.1.0"),
        "{:?}",
        legacy.imports()
    );
    let invocation = legacy.invoke(Event {
        event_id: "evt-legacy".to_owned(),
        ..event("Legacy", "{}")
    });
    assert_eq!(invocation.report.result, Ok(Outcome::Completed));
    assert_eq!(invocation.logs.len(), 1, "{:?}", invocation.logs);
    assert_eq!(
        invocation.logs[0].message,
        "legacy component handled evt-legacy"
    );
    // The current SDK's components do import it.
    let current = load(&sandbox, "noop", &[]);
    assert!(
        current
            .imports()
            .iter()
            .any(|i| i == "nimbus:handler/delivery@0.1.0"),
        "{:?}",
        current.imports()
    );
}
