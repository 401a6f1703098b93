//! From a message on the Resolver topic to what the store records.
//!
//! Pure: no I/O, so every rule is unit-tested without a broker. The
//! consumer settles by what this returns: record, note a heartbeat, complete
//! without recording, or dead-letter with the named defect.

use nimbus_transport::{PropertyValue, ReceivedMessage};
use nimbus_wire::{
    ControlKey, MessageContent, MessageType, NimbusMessage, control_signature, prop,
};

use crate::observation::{HandoffDetails, Observation};
use crate::status::MessageKind;
use crate::store::Heartbeat;

/// The dead-letter reason of a Resolver message the consumer cannot record.
pub const UNRECORDABLE_REASON: &str = "ResolverCannotRecord";

/// What to do with one message.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Decoded {
    /// Record it.
    Event(Box<Observation>),
    /// A heartbeat answer: note it per endpoint, no event history.
    Heartbeat(Heartbeat),
    /// Complete it without recording (a heartbeat probe's copy).
    Skip(&'static str),
}

/// Why a message cannot be recorded: the dead-letter description.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Unrecordable(pub(crate) String);

/// Decodes `received` in place (one received message, its content
/// decoded, from here to its settlement) and says what to do with it. The
/// observation takes the decoded strings rather than copying them: what
/// stays in the message is its id, the lock and the stamps, all that
/// settling it and reporting on it read.
///
/// With a `control_key`, a control request's copy must carry the Manager's
/// signature: the engine dead-letters one that does not without acting on
/// it, and recording it would set its event Pending, which refuses the
/// operator's own handoff completion (issue 40).
pub(crate) fn decode(
    received: ReceivedMessage,
    control_key: Option<&ControlKey>,
) -> (
    ReceivedMessage<NimbusMessage>,
    Result<Decoded, Unrecordable>,
) {
    let unsigned = control_key.and_then(|key| {
        let kind = control_signature::control_type(&received.message)?;
        let why = control_signature::verify(key, &received.message).err()?;
        Some(Unrecordable(format!(
            "a {kind} not sent by a nimbus Manager is not recorded, so it changes no \
             event's status: {why}"
        )))
    });
    let (mut received, defect) = NimbusMessage::decode_received(received);
    let decided = match (unsigned, defect) {
        (Some(unsigned), _) => Err(unsigned),
        (None, Some(defect)) => Err(Unrecordable(format!(
            "the message cannot be decoded: {defect}"
        ))),
        (None, None) => {
            let at_ms = nimbus_wire::unix_millis(received.enqueued_time);
            // The id stays for the settlement and the report.
            let kept = NimbusMessage {
                message_id: received.message.message_id.clone(),
                ..NimbusMessage::default()
            };
            observe(std::mem::replace(&mut received.message, kept), at_ms)
        }
    };
    (received, decided)
}

/// What to do with a decoded message enqueued at `at_ms`.
fn observe(message: NimbusMessage, at_ms: i64) -> Result<Decoded, Unrecordable> {
    let type_name = message.message_type.as_str();

    if message.is_heartbeat() {
        if !message.message_type.is_response() {
            return Ok(Decoded::Skip("a heartbeat probe's copy"));
        }
        let endpoint = non_blank(message.from.as_deref()).ok_or_else(|| {
            Unrecordable(format!(
                "a heartbeat {type_name} without From names no endpoint"
            ))
        })?;
        return Ok(Decoded::Heartbeat(Heartbeat {
            endpoint: endpoint.to_owned(),
            message_type: type_name.to_owned(),
            at_ms,
        }));
    }

    let kind: MessageKind = type_name
        .parse()
        .map_err(|e| Unrecordable(format!("{e}")))?;
    let event_id = non_blank(message.event_id.as_deref()).ok_or_else(|| {
        Unrecordable(format!(
            "a {type_name} without EventId cannot be tracked (Validation failed: EventId is required)"
        ))
    })?;
    let (endpoint, field) = if kind.is_request() {
        (message.to.as_deref(), "To")
    } else {
        (message.from.as_deref(), "From")
    };
    let endpoint = non_blank(endpoint).ok_or_else(|| {
        Unrecordable(format!(
            "a {type_name} without {field} names no endpoint for event {event_id}"
        ))
    })?;

    let mut obs = Observation::new(endpoint, event_id, kind, at_ms);
    // The observation takes the model's strings; the two it reads through
    // the model's accessors (the event type, the handler version) are
    // copied before the model is taken apart.
    obs.event_type = message.event_type().map(str::to_owned);
    obs.handler_version = message
        .properties
        .get(prop::HANDLER_VERSION)
        .and_then(PropertyValue::as_str)
        .map(str::to_owned);
    // A handoff request's EventContent holds the external job's details,
    // not the event: keeping it as the payload would make a later resubmit
    // send the details to the handler.
    let carries_event = !matches!(
        message.message_type,
        MessageType::HandoffCompletedRequest | MessageType::HandoffFailedRequest
    );
    let NimbusMessage {
        message_id,
        session_id,
        correlation_id,
        from,
        parent_message_id,
        originating_message_id,
        originating_from,
        retry_count,
        dead_letter_reason,
        dead_letter_error_description,
        handoff_reason,
        external_job_id,
        expected_by,
        queue_time_ms,
        processing_time_ms,
        content,
        properties,
        ..
    } = message;
    // The publisher's own properties, kept so a resubmission carries them;
    // other messages' properties are the host's, about the message.
    if kind == MessageKind::EventRequest && !properties.is_empty() {
        obs.properties = Some(nimbus_wire::user_properties::to_json(&properties));
    }
    let MessageContent {
        event_content,
        error_content,
    } = content.unwrap_or_default();
    let mut event_json = event_content.and_then(|c| c.event_json);
    obs.message_id = message_id;
    obs.session_id = session_id;
    obs.correlation_id = correlation_id;
    obs.from = from;
    obs.parent_message_id = parent_message_id;
    obs.originating_message_id = originating_message_id;
    obs.originating_from = originating_from;
    obs.retry_count = retry_count;
    if let Some(error) = error_content {
        obs.error_type = error.error_type;
        obs.error_text = error.error_text;
    }
    obs.dead_letter_reason = dead_letter_reason;
    obs.dead_letter_description = dead_letter_error_description;
    match kind {
        MessageKind::PendingHandoffResponse => {
            obs.handoff = Some(HandoffDetails {
                reason: handoff_reason,
                external_job_id,
                expected_by: expected_by.map(nimbus_wire::format_round_trip),
                details: None,
            });
        }
        // The details go to the history only (see `carries_event` above).
        MessageKind::HandoffCompletedRequest => {
            obs.handoff = event_json.take().map(|details| HandoffDetails {
                details: Some(details),
                ..HandoffDetails::default()
            });
        }
        _ => {}
    }
    obs.queue_time_ms = queue_time_ms.map(saturating_i64);
    obs.processing_time_ms = processing_time_ms.map(saturating_i64);
    if carries_event {
        obs.payload = event_json;
    }
    Ok(Decoded::Event(Box::new(obs)))
}

fn non_blank(value: Option<&str>) -> Option<&str> {
    value.filter(|v| !v.trim().is_empty())
}

fn saturating_i64(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use nimbus_transport::{LockToken, Message};
    use nimbus_wire::build::{self, ResponseTimes};
    use nimbus_wire::{EventContent, Failure, MessageContent};

    use super::*;
    use crate::status::Status;

    fn received(message: Message) -> ReceivedMessage {
        ReceivedMessage {
            message,
            sequence_number: 7,
            enqueued_time: UNIX_EPOCH + Duration::from_millis(1_700_000_000_123),
            delivery_count: 1,
            dead_letter_reason: None,
            dead_letter_description: None,
            lock_token: LockToken::new(),
            locked_until: UNIX_EPOCH,
        }
    }

    fn forwarded() -> NimbusMessage {
        NimbusMessage {
            message_id: Some("msg-pub-1".into()),
            session_id: Some("order-1".into()),
            correlation_id: Some("corr-7".into()),
            to: Some("billing".into()),
            from: Some("storefront".into()),
            message_type: MessageType::EventRequest,
            event_id: Some("e1".into()),
            event_type_id: Some("OrderPlaced".into()),
            originating_from: Some("storefront".into()),
            content: Some(MessageContent::event(EventContent::new(
                "OrderPlaced",
                r#"{"OrderId":"o-1"}"#,
            ))),
            ..NimbusMessage::default()
        }
    }

    /// Decodes as a Resolver without a control key: the rules other than
    /// the signature's.
    fn decode_unchecked(received: ReceivedMessage) -> Result<Decoded, Unrecordable> {
        decode(received, None).1
    }

    fn event(decoded: Result<Decoded, Unrecordable>) -> Observation {
        match decoded {
            Ok(Decoded::Event(obs)) => *obs,
            other => panic!("expected an event, got {other:?}"),
        }
    }

    /// The observation takes the decoded strings; what the consumer settles
    /// and reports by stays.
    #[test]
    fn a_decoded_message_keeps_what_settling_it_reads() {
        let given = received(forwarded().to_transport());
        let lock_token = given.lock_token;
        let (kept, decided) = decode(given, None);
        assert!(matches!(decided, Ok(Decoded::Event(_))));
        assert_eq!(kept.message.message_id.as_deref(), Some("msg-pub-1"));
        assert_eq!(kept.lock_token, lock_token);
        assert_eq!(
            nimbus_transport::Delivery::from(&kept).message_id,
            "msg-pub-1"
        );
    }

    #[test]
    fn request_copy_is_recorded_at_its_to_with_payload_and_coordinates() {
        let obs = event(decode_unchecked(received(forwarded().to_transport())));
        assert_eq!(obs.endpoint, "billing");
        assert_eq!(obs.kind, MessageKind::EventRequest);
        assert_eq!(obs.message_id.as_deref(), Some("msg-pub-1"));
        assert_eq!(obs.from.as_deref(), Some("storefront"));
        assert_eq!(obs.payload.as_deref(), Some(r#"{"OrderId":"o-1"}"#));
        assert_eq!(obs.originating_message_id, None, "self reads as None");
        assert_eq!(obs.at_ms, 1_700_000_000_123);
        assert_eq!(obs.status(), (Status::Pending, None));
        assert_eq!(obs.properties, None, "none published");

        let mut with_properties = forwarded();
        with_properties
            .properties
            .insert("Tenant".into(), PropertyValue::String("acme".into()));
        let obs = event(decode_unchecked(received(with_properties.to_transport())));
        assert_eq!(obs.properties.as_deref(), Some(r#"{"Tenant":"acme"}"#));
    }

    #[test]
    fn error_response_is_recorded_at_its_from_with_error_version_and_timings() {
        let failure = Failure::new("PartnerUnavailable", "credit check said 503");
        let times = ResponseTimes {
            queue_time_ms: Some(12),
            processing_time_ms: Some(3),
        };
        let mut response = build::error_response(&forwarded(), times, &failure);
        response.from = Some("billing".into());
        let mut wire = response.to_transport();
        wire.properties.insert(
            prop::HANDLER_VERSION.into(),
            PropertyValue::String("sha256:abc".into()),
        );
        let obs = event(decode_unchecked(received(wire)));
        assert_eq!(obs.endpoint, "billing");
        assert_eq!(obs.kind, MessageKind::ErrorResponse);
        assert_eq!(obs.error_type.as_deref(), Some("PartnerUnavailable"));
        assert_eq!(obs.error_text.as_deref(), Some("credit check said 503"));
        assert_eq!(obs.handler_version.as_deref(), Some("sha256:abc"));
        // A response's properties are the host's, about the response.
        assert_eq!(obs.properties, None);
        assert_eq!(
            (obs.queue_time_ms, obs.processing_time_ms),
            (Some(12), Some(3))
        );
        assert_eq!(obs.parent_message_id.as_deref(), Some("msg-pub-1"));
    }

    #[test]
    fn pending_handoff_response_carries_its_details() {
        let handoff = build::Handoff {
            reason: "DMF import".into(),
            external_job_id: Some("job-9".into()),
            expected_by: Some(UNIX_EPOCH + Duration::from_secs(1_800_000_000)),
        };
        let mut response =
            build::pending_handoff_response(&forwarded(), ResponseTimes::default(), &handoff);
        response.from = Some("billing".into());
        let obs = event(decode_unchecked(received(response.to_transport())));
        let details = obs.handoff.clone().expect("handoff details");
        assert_eq!(details.reason.as_deref(), Some("DMF import"));
        assert_eq!(details.external_job_id.as_deref(), Some("job-9"));
        assert!(
            details
                .expected_by
                .as_deref()
                .is_some_and(|e| e.starts_with("2027-01-15T08:00:00")),
            "{details:?}"
        );
        assert_eq!(obs.status(), (Status::Pending, Some("Handoff")));
    }

    #[test]
    fn handoff_details_are_not_taken_for_the_event_payload() {
        let request = build::handoff_completed_request(
            &forwarded(),
            "billing",
            Some(r#"{"done":true}"#),
            None,
        );
        let obs = event(decode_unchecked(received(request.to_transport())));
        assert_eq!(obs.kind, MessageKind::HandoffCompletedRequest);
        assert_eq!(obs.payload, None);
        // They are kept for the request's history entry instead.
        assert_eq!(
            obs.handoff,
            Some(HandoffDetails {
                details: Some(r#"{"done":true}"#.into()),
                ..HandoffDetails::default()
            })
        );

        let bare = build::handoff_completed_request(&forwarded(), "billing", None, None);
        assert_eq!(
            event(decode_unchecked(received(bare.to_transport()))).handoff,
            None
        );
    }

    /// Issue 40: a forged handoff completion recorded would set the event
    /// Pending and refuse the operator's own; only the Manager's is recorded.
    #[test]
    fn a_control_request_copy_is_recorded_only_with_the_managers_signature() {
        let key = ControlKey::new("test-control-key-0123456789abcdef").unwrap();
        for kind in [
            MessageType::ResubmissionRequest,
            MessageType::SkipRequest,
            MessageType::HandoffCompletedRequest,
            MessageType::HandoffFailedRequest,
        ] {
            let mut request = build::handoff_completed_request(&forwarded(), "billing", None, None);
            request.message_type = kind;
            let forged = request.to_transport();
            let err = decode(received(forged.clone()), Some(&key))
                .1
                .expect_err("unsigned");
            assert!(err.0.contains("not sent by a nimbus Manager"), "{}", err.0);
            assert!(err.0.contains(kind.as_str()), "{}", err.0);

            let mut signed = forged;
            control_signature::sign(&key, &mut signed);
            let obs = event(decode(received(signed), Some(&key)).1);
            assert_eq!(obs.kind.as_str(), kind.as_str());
        }
        // Other messages need no signature.
        event(decode(received(forwarded().to_transport()), Some(&key)).1);
    }

    #[test]
    fn dead_letter_notification_reads_as_dead_lettered() {
        let mut notice = build::dead_letter_notification(
            &forwarded(),
            ResponseTimes::default(),
            "MaxDeliveryCountExceeded",
            "delivered 10 times",
            None,
        );
        notice.from = Some("billing".into());
        let obs = event(decode_unchecked(received(notice.to_transport())));
        assert_eq!(
            obs.dead_letter_reason.as_deref(),
            Some("MaxDeliveryCountExceeded")
        );
        assert_eq!(obs.status(), (Status::DeadLettered, None));
    }

    #[test]
    fn heartbeat_answer_is_noted_and_probe_copy_skipped() {
        let probe = NimbusMessage {
            event_type_id: Some(nimbus_wire::addr::HEARTBEAT_EVENT_TYPE.into()),
            from: Some("Manager".into()),
            ..forwarded()
        };
        assert!(matches!(
            decode_unchecked(received(probe.to_transport())),
            Ok(Decoded::Skip(_))
        ));
        let mut answer =
            build::heartbeat_response(&probe, ResponseTimes::default(), UNIX_EPOCH, "nimbus-test");
        answer.from = Some("billing".into());
        assert_eq!(
            decode_unchecked(received(answer.to_transport())),
            Ok(Decoded::Heartbeat(Heartbeat {
                endpoint: "billing".into(),
                message_type: "ResolutionResponse".into(),
                at_ms: 1_700_000_000_123,
            }))
        );
    }

    #[test]
    fn defects_are_named() {
        let mut no_event_id = forwarded();
        no_event_id.event_id = None;
        let err = decode_unchecked(received(no_event_id.to_transport())).expect_err("no EventId");
        assert!(err.0.contains("EventId is required"), "{}", err.0);

        let mut no_from = build::resolution_response(&forwarded(), ResponseTimes::default());
        no_from.from = None;
        let err = decode_unchecked(received(no_from.to_transport())).expect_err("no From");
        assert!(err.0.contains("without From"), "{}", err.0);

        let mut garbage = forwarded().to_transport();
        garbage.body = b"not json".to_vec();
        let err = decode_unchecked(received(garbage)).expect_err("bad body");
        assert!(err.0.contains("cannot be decoded"), "{}", err.0);

        let deferred = build::process_deferred_request(&forwarded());
        let err = decode_unchecked(received(deferred.to_transport())).expect_err("unrecorded type");
        assert!(err.0.contains("ProcessDeferredRequest"), "{}", err.0);
    }
}
