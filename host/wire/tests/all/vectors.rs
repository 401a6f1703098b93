//! Every wire vector decodes into the model and encodes back to the same
//! properties and body, and every message the engine builds matches its
//! vector given the inbound message the vectors imply.
#![allow(clippy::unwrap_used, reason = "tests")]

use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use nimbus_handler::FollowUp;
use nimbus_transport::{Message, Properties, PropertyValue};
use nimbus_wire::build::{self, Handoff, Publish, ResponseTimes};
use nimbus_wire::{
    Failure, MessageContent, MessageType, NimbusMessage, SessionState, dead_letter, parse_timestamp,
};
use serde_json::Value;

fn fixture_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/wire")
}

fn vector(name: &str) -> Value {
    let path = fixture_dir().join(format!("{name}.json"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path:?}: {e}"))
}

fn all_vector_names() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(fixture_dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".json") && n != "session-states.json")
        .map(|n| n.trim_end_matches(".json").to_owned())
        .collect();
    names.sort();
    names
}

fn broker_str(v: &Value, key: &str) -> Option<String> {
    v["broker"][key].as_str().map(str::to_owned)
}

fn vector_properties(v: &Value) -> Properties {
    let mut props = Properties::new();
    for (name, value) in v["application_properties"].as_object().unwrap() {
        let value = match value {
            Value::Null => continue,
            Value::String(s) => PropertyValue::String(s.clone()),
            Value::Bool(b) => PropertyValue::Bool(*b),
            Value::Number(n) if n.is_i64() => PropertyValue::Int(n.as_i64().unwrap()),
            Value::Number(n) => PropertyValue::Float(n.as_f64().unwrap()),
            other => panic!("{name}: unexpected property value {other}"),
        };
        props.insert(name.clone(), value);
    }
    props
}

/// The transport message a vector describes.
fn vector_message(v: &Value) -> Message {
    Message {
        message_id: broker_str(v, "message_id"),
        session_id: broker_str(v, "session_id"),
        correlation_id: broker_str(v, "correlation_id"),
        reply_to: broker_str(v, "reply_to"),
        reply_to_session_id: broker_str(v, "reply_to_session_id"),
        scheduled_enqueue_time: broker_str(v, "scheduled_enqueue_time_utc")
            .map(|t| parse_timestamp(&t).unwrap()),
        properties: vector_properties(v),
        body: serde_json::to_vec(&v["body"]).unwrap(),
        ..Message::default()
    }
}

fn decode(name: &str) -> NimbusMessage {
    NimbusMessage::from_transport(&vector_message(&vector(name)))
        .unwrap_or_else(|e| panic!("{name} decodes: {e}"))
}

/// The body as Newtonsoft writes it: members in declaration order, nulls included.
fn newtonsoft_text(body: &Value) -> String {
    fn object(value: &Value, keys: &[&str]) -> String {
        if value.is_null() {
            return "null".into();
        }
        let members: Vec<String> = keys
            .iter()
            .map(|k| format!("{}:{}", Value::from(*k), value[*k]))
            .collect();
        format!("{{{}}}", members.join(","))
    }
    format!(
        r#"{{"EventContent":{},"ErrorContent":{}}}"#,
        object(&body["EventContent"], &["EventTypeId", "EventJson"]),
        object(
            &body["ErrorContent"],
            &[
                "ErrorText",
                "ErrorType",
                "ExceptionStackTrace",
                "ExceptionSource"
            ]
        )
    )
}

fn body_json(message: &Message) -> Value {
    serde_json::from_slice(&message.body).unwrap()
}

/// Asserts `built` is exactly the message of vector `name`: broker fields,
/// properties (names, values and types) and body (as JSON; `EventJson`
/// strings compared exactly).
fn assert_matches_vector(name: &str, built: &NimbusMessage) {
    let v = vector(name);
    let expected = vector_message(&v);
    let actual = built.to_transport();
    assert_eq!(actual.properties, expected.properties, "{name}: properties");
    assert_eq!(body_json(&actual), v["body"], "{name}: body");
    assert_eq!(
        String::from_utf8(actual.body.clone()).unwrap(),
        newtonsoft_text(&v["body"]),
        "{name}: body text (declaration order, nulls, EventJson string)"
    );
    assert_eq!(actual.message_id, expected.message_id, "{name}: MessageId");
    assert_eq!(actual.session_id, expected.session_id, "{name}: SessionId");
    assert_eq!(
        actual.correlation_id, expected.correlation_id,
        "{name}: CorrelationId"
    );
    assert_eq!(actual.reply_to, expected.reply_to, "{name}: ReplyTo");
    assert_eq!(
        actual.scheduled_enqueue_time, expected.scheduled_enqueue_time,
        "{name}: ScheduledEnqueueTime"
    );
}

#[test]
fn every_vector_decodes_and_encodes_back_to_the_same_properties_and_body() {
    let names = all_vector_names();
    assert_eq!(names.len(), 15, "all fifteen message vectors are present");
    for name in names {
        let v = vector(&name);
        let original = vector_message(&v);
        let decoded = NimbusMessage::from_transport(&original)
            .unwrap_or_else(|e| panic!("{name} decodes: {e}"));
        let encoded = decoded.to_transport();
        assert_eq!(
            encoded.properties, original.properties,
            "{name}: properties"
        );
        assert_eq!(body_json(&encoded), v["body"], "{name}: body");
        let expected_json = v["body"]["EventContent"]["EventJson"].as_str();
        let actual_json = decoded.event_json();
        assert_eq!(actual_json, expected_json, "{name}: EventJson string exact");
        assert_eq!(encoded.message_id, original.message_id, "{name}");
        assert_eq!(encoded.session_id, original.session_id, "{name}");
        assert_eq!(encoded.correlation_id, original.correlation_id, "{name}");
        assert_eq!(
            encoded.scheduled_enqueue_time, original.scheduled_enqueue_time,
            "{name}"
        );
        assert_eq!(
            NimbusMessage::from_transport(&encoded).unwrap(),
            decoded,
            "{name}: decode(encode(decode(v))) == decode(v)"
        );
    }
}

#[test]
fn integer_properties_stay_integers() {
    let encoded = decode("06-parked-copy").to_transport();
    assert_eq!(encoded.properties["RetryCount"], PropertyValue::Int(0));
    assert_eq!(
        encoded.properties["DeferralSequence"],
        PropertyValue::Int(0)
    );
    let encoded = decode("03-resolution-response").to_transport();
    assert_eq!(encoded.properties["QueueTimeMs"], PropertyValue::Int(12));
    assert_eq!(
        encoded.properties["ProcessingTimeMs"],
        PropertyValue::Int(3)
    );
}

#[test]
fn decoded_vectors_carry_typed_fields() {
    let forwarded = decode("02-forwarded");
    assert_eq!(forwarded.message_type, MessageType::EventRequest);
    assert_eq!(forwarded.from.as_deref(), Some("storefront"));
    assert_eq!(forwarded.parent_message_id, None, "self reads as None");
    assert_eq!(forwarded.event_type(), Some("OrderPlaced"));
    assert_eq!(forwarded.validate(), Ok(()));

    let publish = decode("01-publish");
    assert_eq!(publish.event_id, None, "a publish has no EventId");
    assert_eq!(publish.from, None);

    let handoff = decode("10-pending-handoff-response");
    assert_eq!(
        handoff.expected_by,
        parse_timestamp("2026-11-30T10:15:00Z"),
        "ExpectedBy parses"
    );
    let probe = decode("14-heartbeat-probe");
    assert!(probe.is_heartbeat());
    assert!(probe.is_from_manager());
    assert!(!forwarded.is_heartbeat());
}

#[test]
fn session_state_vectors_read_and_write() {
    let states: Value = serde_json::from_str(
        &std::fs::read_to_string(fixture_dir().join("session-states.json")).unwrap(),
    )
    .unwrap();
    for (name, case) in states.as_object().unwrap() {
        if let Some(bytes) = case.get("bytes") {
            assert_eq!(bytes, "", "{name}");
            let state = SessionState::from_bytes(b"").unwrap();
            assert!(state.is_empty(), "{name}");
            assert!(state.to_bytes().is_empty(), "{name}: written as zero bytes");
        } else {
            let json = &case["json"];
            let blob = serde_json::to_vec(json).unwrap();
            let state = SessionState::from_bytes(&blob).unwrap();
            assert_eq!(
                serde_json::from_slice::<Value>(&state.to_bytes()).unwrap(),
                *json,
                "{name}: round trip"
            );
        }
    }
}

#[test]
fn session_state_transitions_walk_the_vectors() {
    let states: Value = serde_json::from_str(
        &std::fs::read_to_string(fixture_dir().join("session-states.json")).unwrap(),
    )
    .unwrap();
    let as_json = |s: &SessionState| serde_json::from_slice::<Value>(&s.to_bytes()).unwrap();
    let mut state = SessionState::default();
    state.block("2f0e6c1e-6a2b-4c1e-9d57-1c3a7a0b5e11");
    assert_eq!(as_json(&state), states["blocked"]["json"]);
    assert_eq!(state.park(), 0);
    assert_eq!(state.park(), 1);
    assert_eq!(as_json(&state), states["blocked-with-parked"]["json"]);
    state.unblock();
    state.unpark();
    state.unpark();
    assert!(
        state.to_bytes().is_empty(),
        "unblocked-after-replay is zero bytes (F8)"
    );
}

fn times() -> ResponseTimes {
    ResponseTimes {
        queue_time_ms: Some(12),
        processing_time_ms: Some(3),
    }
}

/// The second published event (msg-pub-2) as billing receives it.
fn second_event() -> NimbusMessage {
    NimbusMessage {
        message_id: Some("msg-pub-2".into()),
        event_id: Some("7d1c2b54-0c0e-4f55-8a0e-5b8f0a6b2c33".into()),
        ..decode("02-forwarded")
    }
}

const BLOCKER: &str = "2f0e6c1e-6a2b-4c1e-9d57-1c3a7a0b5e11";

#[test]
fn original_publish_matches_its_vector() {
    let built = build::original_publish(&Publish {
        event_type_id: "OrderPlaced".into(),
        payload: r#"{"OrderId":"o-1001","Customer":"acme","Total":150.0}"#.into(),
        session_id: Some("order-o-1001".into()),
        correlation_id: Some("corr-7".into()),
        message_id: Some("msg-pub-1".into()),
        publisher: Some("storefront".into()),
        properties: Properties::new(),
    });
    assert_matches_vector("01-publish", &built);
}

#[test]
fn publish_without_ids_gets_fresh_unique_ones_and_self_origin() {
    let spec = Publish {
        event_type_id: "OrderPlaced".into(),
        payload: "{}".into(),
        ..Publish::default()
    };
    let a = build::original_publish(&spec);
    let b = build::original_publish(&spec);
    assert!(a.message_id.is_some());
    assert_ne!(
        a.message_id, b.message_id,
        "same payload, different ids (F16)"
    );
    assert_ne!(a.session_id, b.session_id);
    let props = a.to_transport().properties;
    assert_eq!(props["OriginatingFrom"], PropertyValue::from("self"));
    assert!(!props.contains_key("From"));
    assert!(!props.contains_key("EventId"));
}

#[test]
fn resolution_response_matches_its_vector() {
    let built = build::resolution_response(&decode("02-forwarded"), times());
    assert_matches_vector("03-resolution-response", &built);
}

#[test]
fn error_response_matches_its_vector() {
    let failure = Failure::new("PartnerUnavailable", "credit check service said 503");
    let built = build::error_response(&decode("02-forwarded"), times(), &failure);
    assert_matches_vector("04-error-response", &built);
}

#[test]
fn deferral_response_matches_its_vector() {
    let built = build::deferral_response(&second_event(), times(), BLOCKER);
    assert_matches_vector("05-deferral-response", &built);
}

#[test]
fn parked_copy_matches_its_vector_and_keeps_the_message_id() {
    let built = build::parked_copy(&second_event(), 0);
    assert_matches_vector("06-parked-copy", &built);
    assert_eq!(built.message_id.as_deref(), Some("msg-pub-2"), "F7");
}

#[test]
fn retry_request_matches_its_vector() {
    let at = parse_timestamp("2026-11-30T10:00:05Z").unwrap();
    let built = build::retry_request(&decode("02-forwarded"), at);
    assert_matches_vector("07-retry-request", &built);
    assert_eq!(built.message_id, None, "the transport assigns one");
}

#[test]
fn resubmission_request_matches_its_vector() {
    let built = build::resubmission_request(&decode("02-forwarded"), "billing", None);
    assert_matches_vector("08-resubmission-request", &built);
}

#[test]
fn resubmission_with_an_edited_payload_carries_it() {
    let edited = r#"{"OrderId":"o-1001","Customer":"acme","Total":15.0}"#;
    let built = build::resubmission_request(&decode("02-forwarded"), "billing", Some(edited));
    assert_eq!(built.event_json(), Some(edited));
    assert_eq!(built.event_type(), Some("OrderPlaced"));
    assert_eq!(built.validate(), Ok(()));
}

#[test]
fn skip_request_matches_its_vector() {
    let built = build::skip_request(&decode("02-forwarded"), "billing");
    assert_matches_vector("09-skip-request", &built);
}

#[test]
fn pending_handoff_response_matches_its_vector() {
    let handoff = Handoff {
        reason: "DMF import in flight".into(),
        external_job_id: Some("dmf-42".into()),
        expected_by: parse_timestamp("2026-11-30T10:15:00Z"),
    };
    let built = build::pending_handoff_response(&decode("02-forwarded"), times(), &handoff);
    assert_matches_vector("10-pending-handoff-response", &built);
}

#[test]
fn handoff_completed_request_matches_its_vector() {
    let built = build::handoff_completed_request(
        &decode("02-forwarded"),
        "billing",
        Some(r#"{"imported":true}"#),
        Some("b5c0f9a2-1d7e-4c55-9a1b-0e2f3c4d5e6f".into()),
    );
    assert_matches_vector("11-handoff-completed-request", &built);
    let without_details =
        build::handoff_completed_request(&decode("02-forwarded"), "billing", None, None);
    assert_eq!(without_details.content, Some(MessageContent::default()));
    assert!(without_details.message_id.is_some(), "a fresh id");
}

#[test]
fn handoff_failed_request_matches_its_vector() {
    let built = build::handoff_failed_request(
        &decode("02-forwarded"),
        "billing",
        &Failure::new("DmfRejected", "DMF rejected 3 lines"),
        Some("c6d1a0b3-2e8f-4d66-8b2c-1f3a4b5c6d7e".into()),
    );
    assert_matches_vector("12-handoff-failed-request", &built);
}

#[test]
fn handoff_failed_response_uses_the_operator_text_and_its_own_type() {
    let request = decode("12-handoff-failed-request");
    let response = build::handoff_failed_response(&request, times());
    let error = response.content.unwrap().error_content.unwrap();
    assert_eq!(error.error_text.as_deref(), Some("DMF rejected 3 lines"));
    assert_eq!(error.error_type.as_deref(), Some("HandoffFailedException"));
    assert_eq!(response.message_type, MessageType::ErrorResponse);
    assert_eq!(response.originating_from.as_deref(), Some("Manager"));
}

#[test]
fn dead_letter_notification_matches_its_vector() {
    let failure = Failure::new("Validation", "Total must be positive");
    let reason = dead_letter::permanent_failure_reason(&failure);
    let built = build::dead_letter_notification(
        &decode("02-forwarded"),
        times(),
        &reason,
        &failure.text(),
        Some(&failure),
    );
    assert_matches_vector("13-dead-letter-notification", &built);
}

#[test]
fn duplicate_skip_response_matches_its_vector() {
    let built = build::duplicate_response(&decode("02-forwarded"), times());
    assert_matches_vector("15-duplicate-skip-response", &built);
}

#[test]
fn heartbeat_response_is_answered_from_the_endpoint_with_stamped_times() {
    let probe = decode("14-heartbeat-probe");
    let now = parse_timestamp("2026-11-30T10:00:02Z").unwrap();
    let built = build::heartbeat_response(&probe, ResponseTimes::default(), now, "0.1.0");
    let props = built.to_transport().properties;
    assert_eq!(props["To"], PropertyValue::from("Resolver"));
    assert_eq!(
        props["From"],
        PropertyValue::from("billing"),
        "From = the probe's To"
    );
    assert_eq!(
        props["MessageType"],
        PropertyValue::from("ResolutionResponse")
    );
    assert_eq!(props["EventId"], PropertyValue::from("hb-1"));
    assert_eq!(props["ParentMessageId"], PropertyValue::from("hb-msg-1"));
    assert_eq!(built.session_id.as_deref(), Some("Heartbeat"));
    assert_eq!(built.correlation_id.as_deref(), Some("hb-corr"));
    let heartbeat: Value = serde_json::from_str(built.event_json().unwrap()).unwrap();
    assert_eq!(heartbeat["ForwardSendTime"], "2026-11-30T10:00:00Z");
    assert_eq!(heartbeat["ForwardReceivedTime"], "2026-11-30T10:00:02Z");
    assert_eq!(heartbeat["BackwardSendTime"], "2026-11-30T10:00:02Z");
    assert_eq!(heartbeat["Endpoint"], "billing");
    assert_eq!(heartbeat["SdkVersion"], "0.1.0");
    assert_eq!(built.event_type(), Some("NimBus.Platform.Heartbeat"));
}

#[test]
fn operator_skip_and_unsupported_and_discard_responses() {
    let inbound = decode("02-forwarded");
    let skip = build::skip_response(&inbound, times());
    assert_eq!(skip.message_type, MessageType::SkipResponse);
    assert_eq!(
        skip.content,
        Some(MessageContent::default()),
        "empty content"
    );

    let unsupported = build::unsupported_response(&inbound, times());
    assert_eq!(unsupported.message_type, MessageType::UnsupportedResponse);
    assert_eq!(unsupported.content, inbound.content);

    let failure = Failure::new("OutOfStock", "sku 7 is gone");
    let discard = build::discard_response(&inbound, times(), &failure, "classifier rule 'OutOf*'");
    let error = discard
        .content
        .as_ref()
        .unwrap()
        .error_content
        .clone()
        .unwrap();
    assert_eq!(
        error.error_text.as_deref(),
        Some("OutOfStock: sku 7 is gone Classified as Discard by classifier rule 'OutOf*'.")
    );
    assert_eq!(error.error_type.as_deref(), Some("OutOfStock"));
    assert_eq!(
        discard.dead_letter_error_description, None,
        "no dead-letter properties"
    );
    assert_eq!(
        discard.content.unwrap().event_content,
        inbound.content.unwrap().event_content
    );
}

#[test]
fn replay_of_a_parked_copy_returns_the_event_to_the_endpoint_with_its_id() {
    let parked = decode("06-parked-copy");
    let replay = build::replay_from_parked(&parked, "billing");
    let props = replay.to_transport().properties;
    assert_eq!(props["To"], PropertyValue::from("billing"));
    assert_eq!(props["From"], PropertyValue::from("storefront"));
    assert_eq!(
        props["EventId"],
        PropertyValue::from("7d1c2b54-0c0e-4f55-8a0e-5b8f0a6b2c33")
    );
    assert!(!props.contains_key("OriginalSessionId"));
    assert_eq!(
        props["DeferralSequence"],
        PropertyValue::Int(0),
        "kept: it marks a replay and its place (decision 0050)"
    );
    assert_eq!(replay.replayed_sequence(), Some(0));
    assert_eq!(
        parked.replayed_sequence(),
        None,
        "the parked copy itself is not a replay"
    );
    assert_eq!(decode("02-forwarded").replayed_sequence(), None);
    assert_eq!(replay.message_id.as_deref(), Some("msg-pub-2"), "F7");
    assert_eq!(replay.session_id, parked.session_id);
    assert_eq!(replay.correlation_id.as_deref(), Some("corr-7"));
    assert_eq!(replay.content, parked.content);
    assert_eq!(replay.validate(), Ok(()));
}

#[test]
fn reply_to_survives_parking_replay_and_retry() {
    let request = NimbusMessage {
        reply_to: Some("storefront".into()),
        reply_to_session_id: Some("reply-7".into()),
        ..decode("02-forwarded")
    };
    let parked = build::parked_copy(&request, 3);
    let replay = build::replay_from_parked(&parked, "billing");
    let retry = build::retry_request(&replay, SystemTime::UNIX_EPOCH);
    for (what, m) in [("parked", &parked), ("replay", &replay), ("retry", &retry)] {
        let t = m.to_transport();
        assert_eq!(t.reply_to.as_deref(), Some("storefront"), "{what}");
        assert_eq!(t.reply_to_session_id.as_deref(), Some("reply-7"), "{what}");
        assert_eq!(t.correlation_id.as_deref(), Some("corr-7"), "{what}: F25");
    }
    assert_eq!(retry.retry_count, 1);
}

#[test]
fn user_properties_travel_with_the_event_but_not_with_responses() {
    let mut inbound = decode("02-forwarded");
    inbound
        .properties
        .insert("Tenant".into(), PropertyValue::from("acme"));
    let parked = build::parked_copy(&inbound, 0).to_transport();
    assert_eq!(parked.properties["Tenant"], PropertyValue::from("acme"));
    let retry = build::retry_request(&inbound, SystemTime::UNIX_EPOCH).to_transport();
    assert_eq!(retry.properties["Tenant"], PropertyValue::from("acme"));
    let response = build::resolution_response(&inbound, times()).to_transport();
    assert!(!response.properties.contains_key("Tenant"));
}

#[test]
fn follow_up_publish_keeps_session_correlation_and_lineage() {
    let inbound = decode("02-forwarded");
    let follow_up = FollowUp {
        event_type: "InvoiceRequested".into(),
        message_id: "2f0e6c1e:invoice".into(),
        payload: r#"{"OrderId":"o-1001"}"#.into(),
        session_id: None,
        properties: Properties::new(),
    };
    let built = build::follow_up_publish(&inbound, &follow_up, "billing");
    let t = built.to_transport();
    assert_eq!(t.message_id.as_deref(), Some("2f0e6c1e:invoice"));
    assert_eq!(t.session_id.as_deref(), Some("order-o-1001"));
    assert_eq!(t.correlation_id.as_deref(), Some("corr-7"));
    assert_eq!(t.properties["To"], PropertyValue::from("InvoiceRequested"));
    assert_eq!(
        t.properties["EventTypeId"],
        PropertyValue::from("InvoiceRequested")
    );
    assert_eq!(
        t.properties["ParentMessageId"],
        PropertyValue::from("msg-pub-1")
    );
    assert_eq!(
        t.properties["OriginatingMessageId"],
        PropertyValue::from("msg-pub-1")
    );
    assert_eq!(
        t.properties["OriginatingFrom"],
        PropertyValue::from("billing")
    );
    assert!(
        !t.properties.contains_key("From"),
        "forwarding rules need From IS NULL"
    );
    assert!(!t.properties.contains_key("EventId"));
    let elsewhere = FollowUp {
        session_id: Some("other".into()),
        ..follow_up
    };
    let built = build::follow_up_publish(&inbound, &elsewhere, "billing");
    assert_eq!(built.session_id.as_deref(), Some("other"));
}

#[test]
fn dead_letter_description_is_truncated_in_the_notification() {
    let long = format!("line one\n{}\nlast", "x".repeat(5000));
    let built = build::dead_letter_notification(
        &decode("02-forwarded"),
        times(),
        dead_letter::FAILED_TO_HANDLE,
        &long,
        None,
    );
    let description = built.dead_letter_error_description.unwrap();
    assert!(description.ends_with("\n...[TRUNCATED]..."));
    assert!(description.len() <= 4096);
    assert_eq!(
        built.dead_letter_reason.as_deref(),
        Some("Failed to handle message.")
    );
    let content = built.content.unwrap();
    assert_eq!(
        content.error_content, None,
        "no failure: only the event content"
    );
    assert!(content.event_content.is_some());
}

#[test]
fn expected_by_is_written_in_the_round_trip_format() {
    let handoff = Handoff {
        reason: "r".into(),
        external_job_id: None,
        expected_by: Some(SystemTime::UNIX_EPOCH + Duration::from_nanos(1_764_497_700_123_456_700)),
    };
    let built = build::pending_handoff_response(&decode("02-forwarded"), times(), &handoff);
    let props = built.to_transport().properties;
    assert_eq!(
        props["ExpectedBy"],
        PropertyValue::from("2025-11-30T10:15:00.1234567Z")
    );
    assert!(!props.contains_key("ExternalJobId"), "only when non-empty");
}

#[test]
fn deferral_behind_parked_messages_says_why_it_waits() {
    let built = build::deferral_response_behind_parked(&second_event(), times(), 2);
    let error = built.content.unwrap().error_content.unwrap();
    assert_eq!(
        error.error_text.as_deref(),
        Some("Session order-o-1001 is waiting behind 2 parked message(s)")
    );
    assert_eq!(error.error_type.as_deref(), Some("SessionBlockedException"));
    assert_eq!(built.message_type, MessageType::DeferralResponse);
}

#[test]
fn process_deferred_request_names_the_session_to_replay() {
    let cause = decode("08-resubmission-request");
    let trigger = build::process_deferred_request(&cause).to_transport();
    assert_eq!(trigger.session_id.as_deref(), Some("order-o-1001"));
    assert_eq!(trigger.correlation_id.as_deref(), Some("corr-7"));
    assert_eq!(trigger.message_id, None);
    assert_eq!(
        trigger.properties["To"],
        PropertyValue::from("DeferredProcessor")
    );
    assert_eq!(
        trigger.properties["MessageType"],
        PropertyValue::from("ProcessDeferredRequest")
    );
    assert_eq!(
        trigger.properties["EventId"],
        PropertyValue::from("2f0e6c1e-6a2b-4c1e-9d57-1c3a7a0b5e11")
    );
    assert_eq!(
        String::from_utf8(trigger.body).unwrap(),
        r#"{"EventContent":null,"ErrorContent":null}"#
    );
}

#[test]
fn the_copied_vectors_match_the_shared_ones_when_present() {
    // CI lays `shared/` beside the clone; a plain checkout may not have it.
    let shared = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/fixtures/wire");
    let Ok(entries) = std::fs::read_dir(&shared) else {
        eprintln!("no {shared:?}: nothing to compare against");
        return;
    };
    let mut compared = 0;
    for entry in entries {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "json") {
            let name = path.file_name().unwrap();
            let copy = std::fs::read(fixture_dir().join(name))
                .unwrap_or_else(|e| panic!("{name:?} missing from the copy: {e}"));
            assert_eq!(
                copy,
                std::fs::read(&path).unwrap(),
                "{name:?} differs from shared/; copy it again"
            );
            compared += 1;
        }
    }
    assert_eq!(
        compared, 16,
        "fifteen message vectors and the session states"
    );
}
