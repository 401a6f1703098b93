//! Conversions between the generated bindings and the public types.

use crate::bindings::types as wit;
use crate::event::{
    ErrorDetail, ErrorKind, Event, HandlerError, Outcome, PendingHandoff, Property, PropertyValue,
};

pub(crate) fn event_to_wit(event: Event) -> wit::Event {
    wit::Event {
        event_id: event.event_id,
        event_type: event.event_type,
        message_id: event.message_id,
        session_id: event.session_id,
        correlation_id: event.correlation_id,
        parent_message_id: event.parent_message_id,
        originating_message_id: event.originating_message_id,
        retry_count: event.retry_count,
        enqueued_time: event.enqueued_time_ms,
        payload: event.payload,
        properties: event.properties.into_iter().map(property_to_wit).collect(),
    }
}

fn property_to_wit(property: Property) -> wit::Property {
    wit::Property {
        name: property.name,
        value: match property.value {
            PropertyValue::Str(s) => wit::PropertyValue::Str(s),
            PropertyValue::Int(i) => wit::PropertyValue::Int(i),
            PropertyValue::Float(f) => wit::PropertyValue::Float(f),
            PropertyValue::Boolean(b) => wit::PropertyValue::Boolean(b),
        },
    }
}

pub(crate) fn property_from_wit(property: wit::Property) -> Property {
    Property {
        name: property.name,
        value: match property.value {
            wit::PropertyValue::Str(s) => PropertyValue::Str(s),
            wit::PropertyValue::Int(i) => PropertyValue::Int(i),
            wit::PropertyValue::Float(f) => PropertyValue::Float(f),
            wit::PropertyValue::Boolean(b) => PropertyValue::Boolean(b),
        },
    }
}

pub(crate) fn result_from_wit(
    result: Result<wit::Outcome, wit::Error>,
) -> Result<Outcome, HandlerError> {
    match result {
        Ok(wit::Outcome::Completed) => Ok(Outcome::Completed),
        Ok(wit::Outcome::PendingHandoff(handoff)) => Ok(Outcome::PendingHandoff(PendingHandoff {
            reason: handoff.reason,
            external_job_id: handoff.external_job_id,
            expected_by_ms: handoff.expected_by,
        })),
        Err(error) => {
            let (kind, detail) = match error {
                wit::Error::Failed(d) => (ErrorKind::Failed, d),
                wit::Error::Transient(d) => (ErrorKind::Transient, d),
                wit::Error::Permanent(d) => (ErrorKind::Permanent, d),
            };
            Err(HandlerError {
                kind,
                detail: ErrorDetail {
                    error_type: detail.error_type,
                    message: detail.message,
                    retry_after_ms: detail.retry_after,
                },
            })
        }
    }
}
