//! The one boundary between the generated bindings and the handler's
//! vocabulary (`nimbus_handler`): the event goes in as the WIT record, the
//! answer and follow-up properties come back out. WIT carries durations and
//! times in milliseconds; the vocabulary carries `Duration`s and
//! `SystemTime`s, converted here and nowhere else.

use std::time::{Duration, UNIX_EPOCH};

use nimbus_handler::{Delivery, ErrorKind, Event, HandlerError, Outcome, PendingHandoff};
use nimbus_transport::PropertyValue;

use crate::bindings::types as wit;
use crate::host::log::truncate;

/// The most of an error's type a handler may report: a type names a kind
/// of failure, and classifier rules and operators match on it.
pub(crate) const MAX_ERROR_TYPE_BYTES: usize = 256;
/// The most of an error's message, or a handoff's reason, a handler may
/// report. Each travels in a bus message to the Resolver and into a log
/// line; a handler's 1.5 MB message was stored twice and logged whole.
pub(crate) const MAX_ERROR_MESSAGE_BYTES: usize = 16 << 10;
/// The most of a handoff's external job id.
pub(crate) const MAX_JOB_ID_BYTES: usize = 1 << 10;

/// The WIT `event` record, and the delivery facts the `delivery` interface
/// answers with.
pub(crate) fn event_to_wit(event: Event) -> (wit::Event, Delivery) {
    // Before the epoch, or past u64 milliseconds: neither is a broker's
    // enqueue time, and the record has no way to say so.
    let enqueued_time = event
        .enqueued_time
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    let record = wit::Event {
        event_id: event.event_id,
        event_type: event.event_type,
        message_id: event.message_id,
        session_id: event.session_id,
        correlation_id: event.correlation_id,
        parent_message_id: event.parent_message_id,
        originating_message_id: event.originating_message_id,
        retry_count: event.retry_count,
        enqueued_time,
        payload: event.payload,
        properties: event
            .properties
            .into_iter()
            .map(|(name, value)| wit::Property {
                name,
                value: value_to_wit(value),
            })
            .collect(),
    };
    (record, event.delivery)
}

fn value_to_wit(value: PropertyValue) -> wit::PropertyValue {
    match value {
        PropertyValue::String(s) => wit::PropertyValue::Str(s),
        PropertyValue::Int(i) => wit::PropertyValue::Int(i),
        PropertyValue::Float(f) => wit::PropertyValue::Float(f),
        PropertyValue::Bool(b) => wit::PropertyValue::Boolean(b),
    }
}

/// A follow-up's property, as the message that publishes it carries it.
pub(crate) fn property_from_wit(property: wit::Property) -> (String, PropertyValue) {
    let value = match property.value {
        wit::PropertyValue::Str(s) => PropertyValue::String(s),
        wit::PropertyValue::Int(i) => PropertyValue::Int(i),
        wit::PropertyValue::Float(f) => PropertyValue::Float(f),
        wit::PropertyValue::Boolean(b) => PropertyValue::Bool(b),
    };
    (property.name, value)
}

/// The handler's answer, with every text the handler controls bounded.
pub(crate) fn result_from_wit(
    result: Result<wit::Outcome, wit::Error>,
) -> Result<Outcome, HandlerError> {
    match result {
        Ok(wit::Outcome::Completed) => Ok(Outcome::Completed),
        Ok(wit::Outcome::PendingHandoff(handoff)) => Ok(Outcome::PendingHandoff(PendingHandoff {
            reason: truncate(handoff.reason, MAX_ERROR_MESSAGE_BYTES),
            external_job_id: handoff
                .external_job_id
                .map(|id| truncate(id, MAX_JOB_ID_BYTES)),
            expected_by: handoff.expected_by.map(Duration::from_millis),
        })),
        Err(error) => {
            let (kind, detail) = match error {
                wit::Error::Failed(d) => (ErrorKind::Failed, d),
                wit::Error::Transient(d) => (ErrorKind::Transient, d),
                wit::Error::Permanent(d) => (ErrorKind::Permanent, d),
            };
            Err(HandlerError {
                kind,
                error_type: truncate(detail.error_type, MAX_ERROR_TYPE_BYTES),
                message: truncate(detail.message, MAX_ERROR_MESSAGE_BYTES),
                retry_after: detail.retry_after.map(Duration::from_millis),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_oversized_error_or_handoff_is_cut_and_marked() {
        let detail = wit::ErrorDetail {
            error_type: "T".repeat(MAX_ERROR_TYPE_BYTES + 1),
            message: "m".repeat(1_500_000),
            retry_after: None,
        };
        let Err(error) = result_from_wit(Err(wit::Error::Failed(detail))) else {
            panic!("a failure");
        };
        assert!(error.error_type.len() < MAX_ERROR_TYPE_BYTES + 20);
        assert!(error.error_type.ends_with("…[truncated]"));
        assert!(error.message.len() < MAX_ERROR_MESSAGE_BYTES + 20);
        assert!(error.message.ends_with("…[truncated]"));

        let handoff = wit::PendingHandoff {
            reason: "r".repeat(MAX_ERROR_MESSAGE_BYTES * 2),
            external_job_id: Some("j".repeat(MAX_JOB_ID_BYTES * 2)),
            expected_by: None,
        };
        let Ok(Outcome::PendingHandoff(handoff)) =
            result_from_wit(Ok(wit::Outcome::PendingHandoff(handoff)))
        else {
            panic!("a handoff");
        };
        assert!(handoff.reason.len() < MAX_ERROR_MESSAGE_BYTES + 20);
        assert!(
            handoff
                .external_job_id
                .is_some_and(|id| id.len() < MAX_JOB_ID_BYTES + 20)
        );

        let small = wit::ErrorDetail {
            error_type: "Boom".to_owned(),
            message: "it broke".to_owned(),
            retry_after: Some(5),
        };
        let Err(error) = result_from_wit(Err(wit::Error::Failed(small))) else {
            panic!("a failure");
        };
        assert_eq!(
            (error.error_type.as_str(), error.message.as_str()),
            ("Boom", "it broke")
        );
    }
}
