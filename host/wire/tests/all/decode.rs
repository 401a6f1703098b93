//! Decoding is tolerant where upstream is, strict where SEMANTICS.md §2.1
//! asks for validation, names each defect, and never panics.
#![allow(clippy::unwrap_used, reason = "tests")]

use std::time::{Duration, SystemTime};

use nimbus_transport::{Delivery, LockToken, Message, Properties, PropertyValue, ReceivedMessage};
use nimbus_wire::{
    Defect, ErrorContent, EventContent, MessageContent, MessageType, NimbusMessage, prop,
};
use proptest::prelude::*;

fn event_request() -> Message {
    let mut properties = Properties::new();
    properties.insert("To".into(), "billing".into());
    properties.insert("From".into(), "storefront".into());
    properties.insert("MessageType".into(), "EventRequest".into());
    properties.insert("EventId".into(), "e1".into());
    properties.insert("EventTypeId".into(), "OrderPlaced".into());
    Message {
        message_id: Some("m1".into()),
        session_id: Some("s1".into()),
        properties,
        body: MessageContent::event(EventContent::new("OrderPlaced", r#"{"OrderId":"1"}"#))
            .to_json_bytes(),
        ..Message::default()
    }
}

fn with(mut message: Message, name: &str, value: Option<PropertyValue>) -> Message {
    match value {
        Some(v) => message.properties.insert(name.into(), v),
        None => message.properties.remove(name),
    };
    message
}

fn decoded(message: &Message) -> NimbusMessage {
    NimbusMessage::from_transport(message).unwrap()
}

#[test]
fn a_well_formed_event_request_validates() {
    let message = decoded(&event_request());
    assert_eq!(message.validate(), Ok(()));
    assert_eq!(message.retry_count, 0, "absent RetryCount reads as 0");
    assert_eq!(
        message.parent_message_id, None,
        "absent lineage reads as self"
    );
}

/// Every envelope name is read into the model, whatever else the message
/// carries; only the others stay user properties.
#[test]
fn no_envelope_property_is_left_among_the_user_properties() {
    let mut message = with(event_request(), "Custom", Some("kept".into()));
    for name in prop::ENVELOPE {
        message.properties.insert(name.into(), "x".into());
    }
    // "x" is no MessageType: the partial model is what was read.
    let decoded = match NimbusMessage::from_transport(&message) {
        Ok(decoded) => decoded,
        Err(error) => *error.partial,
    };
    let left: Vec<&str> = decoded.properties.keys().map(String::as_str).collect();
    assert_eq!(left, ["Custom"]);
    assert_eq!(decoded.to.as_deref(), Some("x"));
    assert_eq!(decoded.handoff_reason.as_deref(), Some("x"));
}

/// A consumer decodes a received message in place: it decodes the same as
/// the transport message alone, the stamps and the lock stay, and a
/// settlement taken from it settles the same delivery.
#[test]
fn decoding_a_received_message_keeps_its_stamps_and_lock() {
    let mut message = with(event_request(), "Custom", Some(PropertyValue::Int(7)));
    message.correlation_id = Some("c1".into());
    let lock_token = LockToken::new();
    let received = ReceivedMessage {
        message: message.clone(),
        sequence_number: 3,
        enqueued_time: SystemTime::UNIX_EPOCH,
        delivery_count: 2,
        dead_letter_reason: None,
        dead_letter_description: None,
        lock_token,
        locked_until: SystemTime::UNIX_EPOCH,
    };
    let (decoded_received, defect) = NimbusMessage::decode_received(received);
    assert_eq!(defect, None);
    assert_eq!(decoded_received.message, decoded(&message));
    assert_eq!(decoded_received.sequence_number, 3);
    assert_eq!(decoded_received.delivery_count, 2);
    let delivery = Delivery::from(&decoded_received);
    assert_eq!(delivery.lock_token, lock_token);
    assert_eq!(delivery.message_id, "m1");
}

/// A message that cannot be decoded comes back read as far as it could be,
/// its defect beside it.
#[test]
fn a_received_message_that_cannot_be_decoded_keeps_what_could_be_read() {
    let message = with(event_request(), prop::MESSAGE_TYPE, Some("Nonsense".into()));
    let received = ReceivedMessage {
        message,
        sequence_number: 4,
        enqueued_time: SystemTime::UNIX_EPOCH,
        delivery_count: 1,
        dead_letter_reason: None,
        dead_letter_description: None,
        lock_token: LockToken::new(),
        locked_until: SystemTime::UNIX_EPOCH,
    };
    let (partial, defect) = NimbusMessage::decode_received(received);
    assert_eq!(
        defect,
        Some(Defect::UnknownMessageType("Nonsense".to_owned()))
    );
    assert_eq!(partial.message.message_id.as_deref(), Some("m1"));
    assert_eq!(partial.message.message_type, MessageType::Unknown);
    assert_eq!(partial.sequence_number, 4);
}

#[test]
fn message_type_accepts_numeric_strings_and_integers() {
    let m = with(event_request(), prop::MESSAGE_TYPE, Some("8".into()));
    assert_eq!(decoded(&m).message_type, MessageType::RetryRequest);
    let m = with(
        event_request(),
        prop::MESSAGE_TYPE,
        Some(PropertyValue::Int(6)),
    );
    assert_eq!(decoded(&m).message_type, MessageType::ResubmissionRequest);
}

#[test]
fn an_unknown_message_type_fails_decoding_but_keeps_what_could_be_read() {
    let m = with(
        event_request(),
        prop::MESSAGE_TYPE,
        Some("eventrequest".into()),
    );
    let err = NimbusMessage::from_transport(&m).unwrap_err();
    assert_eq!(
        err.defect,
        Defect::UnknownMessageType("eventrequest".into())
    );
    assert_eq!(
        err.to_string(),
        "Validation failed: MessageType 'eventrequest' is not a known NimBus message type"
    );
    assert_eq!(err.partial.event_id.as_deref(), Some("e1"));
    assert_eq!(err.partial.session_id.as_deref(), Some("s1"));
    assert_eq!(err.partial.event_type(), Some("OrderPlaced"));
    assert!(err.partial.content.is_some(), "the body still reads");

    let m = with(event_request(), prop::MESSAGE_TYPE, None);
    let err = NimbusMessage::from_transport(&m).unwrap_err();
    assert_eq!(err.defect, Defect::MissingMessageType);
}

#[test]
fn an_undecodable_body_fails_decoding_and_names_the_problem() {
    let mut m = event_request();
    m.body = b"{\"EventContent\":".to_vec();
    let err = NimbusMessage::from_transport(&m).unwrap_err();
    assert!(matches!(err.defect, Defect::Body(_)), "{:?}", err.defect);
    assert!(
        err.to_string()
            .starts_with("Validation failed: body is not a NimBus MessageContent")
    );
    assert_eq!(err.partial.message_type, MessageType::EventRequest);
    assert_eq!(err.partial.event_id.as_deref(), Some("e1"));
}

#[test]
fn a_missing_or_blank_event_id_is_named() {
    for value in [None, Some("".into()), Some("  ".into())] {
        let m = decoded(&with(event_request(), prop::EVENT_ID, value));
        assert_eq!(m.validate(), Err(Defect::MissingEventId));
    }
    assert_eq!(
        Defect::MissingEventId.to_string(),
        "Validation failed: EventId is required"
    );
}

#[test]
fn a_missing_event_type_is_named_with_the_message_type() {
    let mut m = with(event_request(), prop::EVENT_TYPE_ID, None);
    m.body = MessageContent::event(EventContent {
        event_type_id: None,
        event_json: Some("{}".into()),
    })
    .to_json_bytes();
    let err = decoded(&m).validate().unwrap_err();
    assert_eq!(err, Defect::MissingEventTypeId(MessageType::EventRequest));
    assert_eq!(
        err.to_string(),
        "Validation failed: EventTypeId is required for EventRequest"
    );
}

#[test]
fn the_body_event_type_is_used_when_the_property_is_absent() {
    let m = decoded(&with(event_request(), prop::EVENT_TYPE_ID, None));
    assert_eq!(m.event_type(), Some("OrderPlaced"));
    assert_eq!(m.validate(), Ok(()));
}

#[test]
fn an_event_type_mismatch_between_property_and_body_is_named() {
    let m = decoded(&with(
        event_request(),
        prop::EVENT_TYPE_ID,
        Some("UserPropEventType".into()),
    ));
    assert_eq!(
        m.event_type(),
        Some("UserPropEventType"),
        "the property wins"
    );
    let err = m.validate().unwrap_err();
    assert_eq!(
        err.to_string(),
        "Validation failed: EventTypeId mismatch: property 'UserPropEventType', body 'OrderPlaced'"
    );
}

#[test]
fn a_handler_message_without_payload_or_with_bad_json_is_named() {
    let mut m = event_request();
    m.body = MessageContent::default().to_json_bytes();
    let err = decoded(&m).validate().unwrap_err();
    assert_eq!(err, Defect::MissingEventJson(MessageType::EventRequest));

    m.body = Vec::new();
    assert_eq!(
        decoded(&m).validate(),
        Err(Defect::MissingEventJson(MessageType::EventRequest)),
        "zero bytes is no content"
    );

    m.body = MessageContent::event(EventContent::new("OrderPlaced", "{not json")).to_json_bytes();
    let err = decoded(&m).validate().unwrap_err();
    assert!(matches!(err, Defect::EventJsonNotJson(_)), "{err:?}");
}

#[test]
fn control_requests_need_no_payload_but_do_need_an_event_id() {
    let mut m = with(
        event_request(),
        prop::MESSAGE_TYPE,
        Some("SkipRequest".into()),
    );
    m.body = MessageContent::default().to_json_bytes();
    let m = with(m, prop::FROM, Some("manager".into()));
    assert_eq!(
        decoded(&m).validate(),
        Ok(()),
        "From compared ignoring case"
    );
    let m = with(m, prop::EVENT_ID, None);
    assert_eq!(decoded(&m).validate(), Err(Defect::MissingEventId));
}

#[test]
fn control_requests_must_come_from_the_manager() {
    for kind in [
        "ResubmissionRequest",
        "SkipRequest",
        "HandoffCompletedRequest",
        "HandoffFailedRequest",
    ] {
        let m = with(event_request(), prop::MESSAGE_TYPE, Some(kind.into()));
        let err = decoded(&m).validate().unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("Validation failed: {kind} must come from Manager")
        );
        let m = with(m, prop::FROM, None);
        assert!(matches!(
            decoded(&m).validate(),
            Err(Defect::NotFromManager(_))
        ));
    }
    let external = with(event_request(), prop::FROM, None);
    assert_eq!(
        decoded(&external).validate(),
        Ok(()),
        "an external publish is accepted"
    );
}

#[test]
fn a_heartbeat_probe_with_a_blank_payload_is_valid() {
    let mut m = with(
        event_request(),
        prop::EVENT_TYPE_ID,
        Some("nimbus.platform.HEARTBEAT".into()),
    );
    m.body = Vec::new();
    let message = decoded(&m);
    assert!(message.is_heartbeat(), "detected ignoring case");
    assert_eq!(message.validate(), Ok(()));
}

#[test]
fn heartbeat_is_detected_from_the_body_when_the_property_is_absent() {
    let mut m = with(event_request(), prop::EVENT_TYPE_ID, None);
    m.body =
        MessageContent::event(EventContent::new("NimBus.Platform.Heartbeat", "{}")).to_json_bytes();
    assert!(decoded(&m).is_heartbeat());
}

#[test]
fn unknown_message_type_value_unknown_is_unhandled() {
    let m = decoded(&with(
        event_request(),
        prop::MESSAGE_TYPE,
        Some("Unknown".into()),
    ));
    assert_eq!(m.validate(), Err(Defect::UnhandledMessageType));
}

#[test]
fn tolerant_reads_of_odd_property_values() {
    let m = with(event_request(), prop::RETRY_COUNT, Some("3".into()));
    assert_eq!(decoded(&m).retry_count, 3, "numeric string");
    let m = with(event_request(), prop::RETRY_COUNT, Some("three".into()));
    assert_eq!(
        decoded(&m).retry_count,
        0,
        "non-numeric reads as 0, as upstream"
    );
    let m = with(
        event_request(),
        prop::RETRY_COUNT,
        Some(PropertyValue::Int(-4)),
    );
    assert_eq!(decoded(&m).retry_count, 0);
    let m = with(event_request(), prop::DEFERRAL_SEQUENCE, Some("5".into()));
    assert_eq!(decoded(&m).deferral_sequence, Some(5));
    let m = with(
        event_request(),
        prop::EVENT_ID,
        Some(PropertyValue::Int(42)),
    );
    assert_eq!(decoded(&m).event_id.as_deref(), Some("42"));
    let m = with(
        event_request(),
        prop::PARENT_MESSAGE_ID,
        Some("SELF".into()),
    );
    assert_eq!(decoded(&m).parent_message_id, None, "self ignoring case");
}

#[test]
fn user_properties_are_kept_as_is() {
    let m = with(event_request(), "Tenant", Some(PropertyValue::Float(1.5)));
    let m = with(m, "traceparent", Some("00-abc-01".into()));
    let message = decoded(&m);
    assert_eq!(message.properties.len(), 2);
    let back = message.to_transport();
    assert_eq!(back.properties["Tenant"], PropertyValue::Float(1.5));
    assert_eq!(
        back.properties["traceparent"],
        PropertyValue::from("00-abc-01")
    );
}

#[test]
fn typed_fields_win_over_user_properties_with_envelope_names() {
    let mut message = decoded(&event_request());
    message.properties.insert("To".into(), "elsewhere".into());
    message.properties.insert("Stray".into(), "kept".into());
    let t = message.to_transport();
    assert_eq!(t.properties["To"], PropertyValue::from("billing"));
    assert_eq!(t.properties["Stray"], PropertyValue::from("kept"));
}

// ---- property-based ----

fn id() -> impl Strategy<Value = String> {
    "[A-Za-z0-9._:-]{1,24}".prop_filter("not the self marker", |s| !s.eq_ignore_ascii_case("self"))
}

fn opt_id() -> impl Strategy<Value = Option<String>> {
    proptest::option::of(id())
}

fn time() -> impl Strategy<Value = SystemTime> {
    // Whole 100 ns ticks: the precision the ISO-8601 round-trip format carries.
    (0u64..4_000_000_000, 0u64..10_000_000).prop_map(|(secs, ticks)| {
        SystemTime::UNIX_EPOCH + Duration::new(secs, (ticks * 100) as u32)
    })
}

fn user_properties() -> impl Strategy<Value = Properties> {
    let value = prop_oneof![
        any::<String>().prop_map(PropertyValue::String),
        any::<i64>().prop_map(PropertyValue::Int),
        (-1e9f64..1e9).prop_map(PropertyValue::Float),
        any::<bool>().prop_map(PropertyValue::Bool),
    ];
    proptest::collection::btree_map(
        "[A-Za-z][A-Za-z0-9-]{0,12}".prop_filter("not an envelope name", |n| !prop::is_envelope(n)),
        value,
        0..4,
    )
}

fn content() -> impl Strategy<Value = Option<MessageContent>> {
    let event = proptest::option::of(
        (
            proptest::option::of(id()),
            proptest::option::of(any::<String>()),
        )
            .prop_map(|(t, j)| EventContent {
                event_type_id: t,
                event_json: j,
            }),
    );
    let error = proptest::option::of(
        (
            proptest::option::of(any::<String>()),
            proptest::option::of(id()),
        )
            .prop_map(|(text, kind)| ErrorContent::new(text, kind)),
    );
    proptest::option::of(
        (event, error).prop_map(|(event_content, error_content)| MessageContent {
            event_content,
            error_content,
        }),
    )
}

prop_compose! {
    fn broker()(
        message_id in opt_id(), session_id in opt_id(), correlation_id in opt_id(),
        reply_to in opt_id(), reply_to_session_id in opt_id(),
        scheduled in proptest::option::of(time()),
        ttl in proptest::option::of((0u64..1_000_000).prop_map(Duration::from_millis)),
    ) -> NimbusMessage {
        NimbusMessage {
            message_id, session_id, correlation_id, reply_to, reply_to_session_id,
            scheduled_enqueue_time: scheduled, time_to_live: ttl,
            ..NimbusMessage::default()
        }
    }
}

prop_compose! {
    fn nimbus_message()(
        base in broker(),
        to in opt_id(), from in opt_id(),
        kind in proptest::sample::select(MessageType::all().to_vec()),
        event_id in opt_id(), event_type_id in opt_id(),
        originating_message_id in opt_id(), parent_message_id in opt_id(),
        retry_count in any::<u32>(), originating_from in opt_id(),
        original_session_id in opt_id(), deferral_sequence in proptest::option::of(any::<u32>()),
        queue in proptest::option::of(0u64..=i64::MAX as u64),
        processing in proptest::option::of(0u64..=i64::MAX as u64),
        texts in proptest::collection::vec(proptest::option::of(any::<String>()), 4),
        expected_by in proptest::option::of(time()),
        properties in user_properties(),
        content in content(),
    ) -> NimbusMessage {
        NimbusMessage {
            to, from, message_type: kind, event_id, event_type_id,
            originating_message_id, parent_message_id, retry_count, originating_from,
            original_session_id, deferral_sequence,
            queue_time_ms: queue, processing_time_ms: processing,
            dead_letter_reason: texts[0].clone(),
            dead_letter_error_description: texts[1].clone(),
            handoff_reason: texts[2].clone(),
            external_job_id: texts[3].clone(),
            expected_by, properties, content,
            ..base
        }
    }
}

fn any_property_value() -> impl Strategy<Value = PropertyValue> {
    prop_oneof![
        any::<String>().prop_map(PropertyValue::String),
        "-?[0-9]{1,25}".prop_map(PropertyValue::String),
        proptest::sample::select(
            MessageType::all()
                .iter()
                .map(|t| t.as_str().to_owned())
                .collect::<Vec<_>>()
        )
        .prop_map(PropertyValue::String),
        any::<i64>().prop_map(PropertyValue::Int),
        any::<f64>().prop_map(PropertyValue::Float),
        any::<bool>().prop_map(PropertyValue::Bool),
    ]
}

fn any_body() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..64),
        any::<String>().prop_map(String::into_bytes),
        content().prop_map(|c| c.map(|c| c.to_json_bytes()).unwrap_or_default()),
        Just(b"{\"EventContent\":{\"EventTypeId\":7}}".to_vec()),
        (1usize..200).prop_map(|n| "[".repeat(n).into_bytes()),
    ]
}

proptest! {
    #[test]
    fn encode_then_decode_is_the_identity(message in nimbus_message()) {
        let decoded = NimbusMessage::from_transport(&message.to_transport());
        prop_assert_eq!(decoded, Ok(message));
    }

    #[test]
    fn decode_never_panics_on_arbitrary_properties_and_bodies(
        names in proptest::collection::vec(
            prop_oneof![
                proptest::sample::select(prop::ENVELOPE.to_vec()).prop_map(str::to_owned),
                "[A-Za-z]{1,10}",
            ],
            0..12,
        ),
        values in proptest::collection::vec(any_property_value(), 12),
        body in any_body(),
    ) {
        let properties: Properties = names.into_iter().zip(values).collect();
        let message = Message { properties, body, ..Message::default() };
        match NimbusMessage::from_transport(&message) {
            Ok(decoded) => {
                let _ = decoded.validate();
                let _ = decoded.to_transport();
            }
            Err(err) => {
                prop_assert!(err.to_string().starts_with("Validation failed: "));
                let _ = err.partial.validate();
            }
        }
    }
}

fn all_builds(inbound: &NimbusMessage) -> Vec<(&'static str, NimbusMessage)> {
    use nimbus_wire::build::{self, Handoff, ResponseTimes};
    let times = ResponseTimes {
        queue_time_ms: Some(1),
        processing_time_ms: Some(2),
    };
    let failure = nimbus_wire::Failure::new("E", "m");
    let at = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    let handoff = Handoff {
        reason: "r".into(),
        external_job_id: Some("j".into()),
        expected_by: Some(at),
    };
    vec![
        ("resolution", build::resolution_response(inbound, times)),
        ("error", build::error_response(inbound, times, &failure)),
        (
            "handoff-failed",
            build::handoff_failed_response(inbound, times),
        ),
        ("deferral", build::deferral_response(inbound, times, "b")),
        (
            "behind",
            build::deferral_response_behind_parked(inbound, times, 2),
        ),
        ("skip", build::skip_response(inbound, times)),
        ("duplicate", build::duplicate_response(inbound, times)),
        (
            "discard",
            build::discard_response(inbound, times, &failure, "x"),
        ),
        ("unsupported", build::unsupported_response(inbound, times)),
        (
            "handoff",
            build::pending_handoff_response(inbound, times, &handoff),
        ),
        (
            "dead-letter",
            build::dead_letter_notification(inbound, times, "r", "d", Some(&failure)),
        ),
        (
            "heartbeat",
            build::heartbeat_response(inbound, times, at, "v"),
        ),
        ("retry", build::retry_request(inbound, at)),
        ("parked", build::parked_copy(inbound, 4)),
        ("replay", build::replay_from_parked(inbound, "billing")),
        ("trigger", build::process_deferred_request(inbound)),
        (
            "resubmit",
            build::resubmission_request(inbound, "billing", None),
        ),
        ("skip-request", build::skip_request(inbound, "billing")),
        (
            "handoff-completed",
            build::handoff_completed_request(inbound, "billing", Some("{}"), None),
        ),
        (
            "handoff-failed-request",
            build::handoff_failed_request(inbound, "billing", &failure, None),
        ),
    ]
}

proptest! {
    #[test]
    fn every_built_message_round_trips_and_keeps_session_and_correlation(
        inbound in nimbus_message()
    ) {
        for (what, built) in all_builds(&inbound) {
            let back = NimbusMessage::from_transport(&built.to_transport());
            prop_assert_eq!(back.as_ref(), Ok(&built), "{}", what);
            prop_assert_eq!(&built.session_id, &inbound.session_id, "{}", what);
            prop_assert_eq!(&built.correlation_id, &inbound.correlation_id, "{}", what);
            prop_assert_eq!(&built.event_id, &inbound.event_id, "{}", what);
            prop_assert!(built.content.is_some(), "{}: every NimBus message has a body", what);
        }
    }
}
