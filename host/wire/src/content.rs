//! The message body: `MessageContent` with its `EventContent` and
//! `ErrorContent`, as upstream's Newtonsoft serializer writes them.
//!
//! Written: PascalCase in declaration order, nulls included, `EventJson` a
//! JSON *string* holding the event (double-encoded). Read: tolerant like
//! Newtonsoft (missing members are null, unknown members ignored, camelCase
//! accepted), but a body that is not a JSON object of this shape is an error
//! the caller must surface (SEMANTICS.md §2.1).

use serde::{Deserialize, Serialize};

/// The body of every NimBus message.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MessageContent {
    /// The event: its type and payload.
    #[serde(rename = "EventContent", alias = "eventContent", default)]
    pub event_content: Option<EventContent>,
    /// The error, on error-carrying responses and HandoffFailedRequest.
    #[serde(rename = "ErrorContent", alias = "errorContent", default)]
    pub error_content: Option<ErrorContent>,
}

/// An event type and its payload.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventContent {
    /// The event type, e.g. `OrderPlaced`.
    #[serde(rename = "EventTypeId", alias = "eventTypeId", default)]
    pub event_type_id: Option<String>,
    /// The event itself, as JSON text (a string inside the body's JSON).
    #[serde(rename = "EventJson", alias = "eventJson", default)]
    pub event_json: Option<String>,
}

/// Why something failed, as the Resolver shows it.
///
/// `ExceptionStackTrace` and `ExceptionSource` exist on the wire for
/// compatibility and are always written as null: stack traces never go into
/// the body (nimbus-semantics.md §2.4).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorContent {
    /// The error message.
    #[serde(rename = "ErrorText", alias = "errorText", default)]
    pub error_text: Option<String>,
    /// The error type, e.g. `PartnerUnavailable`.
    #[serde(rename = "ErrorType", alias = "errorType", default)]
    pub error_type: Option<String>,
    #[serde(
        rename = "ExceptionStackTrace",
        default,
        skip_deserializing,
        serialize_with = "always_null"
    )]
    stack_trace: (),
    #[serde(
        rename = "ExceptionSource",
        default,
        skip_deserializing,
        serialize_with = "always_null"
    )]
    source: (),
}

fn always_null<S: serde::Serializer>(_: &(), serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_none()
}

impl ErrorContent {
    /// An error with this text and type.
    pub fn new(error_text: Option<String>, error_type: Option<String>) -> Self {
        ErrorContent {
            error_text,
            error_type,
            ..ErrorContent::default()
        }
    }
}

impl EventContent {
    /// An event of this type with this payload (JSON text).
    pub fn new(event_type_id: impl Into<String>, event_json: impl Into<String>) -> Self {
        EventContent {
            event_type_id: Some(event_type_id.into()),
            event_json: Some(event_json.into()),
        }
    }
}

/// Why a body is not a `MessageContent`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("body is not a NimBus MessageContent JSON object: {0}")]
pub struct BodyError(pub String);

/// Upstream reads bodies with MaxDepth 32; deeper JSON is refused rather than
/// risking the stack on hostile input.
const MAX_BODY_DEPTH: usize = 32;

impl MessageContent {
    /// Content carrying only this event.
    pub fn event(event: EventContent) -> Self {
        MessageContent {
            event_content: Some(event),
            error_content: None,
        }
    }

    /// The body bytes: compact JSON, PascalCase, nulls included.
    pub fn to_json_bytes(&self) -> Vec<u8> {
        // Serializing plain strings and options cannot fail.
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// Reads a body. An empty (or all-whitespace) body is `Ok(None)`, "no
    /// content", as upstream; anything else must be a `MessageContent` object.
    pub fn from_json_bytes(body: &[u8]) -> Result<Option<MessageContent>, BodyError> {
        if body.iter().all(u8::is_ascii_whitespace) {
            return Ok(None);
        }
        if json_depth_exceeds(body, MAX_BODY_DEPTH) {
            return Err(BodyError(format!(
                "nested deeper than {MAX_BODY_DEPTH} levels"
            )));
        }
        serde_json::from_slice::<MessageContent>(body)
            .map(Some)
            .map_err(|e| BodyError(e.to_string()))
    }

    /// The event type named in the body, if any.
    pub fn event_type_id(&self) -> Option<&str> {
        self.event_content
            .as_ref()
            .and_then(|c| c.event_type_id.as_deref())
    }

    /// The event payload (JSON text), if any.
    pub fn event_json(&self) -> Option<&str> {
        self.event_content
            .as_ref()
            .and_then(|c| c.event_json.as_deref())
    }
}

/// Whether the JSON text nests objects/arrays deeper than `max` (a cheap
/// scan that ignores brackets inside strings).
fn json_depth_exceeds(body: &[u8], max: usize) -> bool {
    // Nesting needs an opening bracket per level, and a count is one
    // vectorised pass where the scan below goes byte by byte; the engine
    // and the Resolver read every message's body, almost all shallow.
    let openings = body.iter().filter(|&&b| b == b'{' || b == b'[').count();
    if openings <= max {
        return false;
    }
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    for &b in body {
        if in_string {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'{' | b'[' => {
                depth += 1;
                if depth > max {
                    return true;
                }
            }
            b'}' | b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_pascal_case_with_nulls_and_a_double_encoded_event() {
        let content = MessageContent {
            event_content: Some(EventContent::new("OrderPlaced", r#"{"OrderId":"1"}"#)),
            error_content: Some(ErrorContent::new(Some("boom".into()), None)),
        };
        let text = String::from_utf8(content.to_json_bytes()).expect("utf8");
        assert_eq!(
            text,
            r#"{"EventContent":{"EventTypeId":"OrderPlaced","EventJson":"{\"OrderId\":\"1\"}"},"ErrorContent":{"ErrorText":"boom","ErrorType":null,"ExceptionStackTrace":null,"ExceptionSource":null}}"#
        );
        assert_eq!(
            String::from_utf8(MessageContent::default().to_json_bytes()).expect("utf8"),
            r#"{"EventContent":null,"ErrorContent":null}"#
        );
    }

    #[test]
    fn reads_tolerantly_but_refuses_what_is_not_content() {
        assert_eq!(MessageContent::from_json_bytes(b""), Ok(None));
        assert_eq!(MessageContent::from_json_bytes(b"  \n"), Ok(None));
        assert_eq!(
            MessageContent::from_json_bytes(b"{}"),
            Ok(Some(MessageContent::default()))
        );
        let read = MessageContent::from_json_bytes(
            br#"{"eventContent":{"eventTypeId":"A","eventJson":"{}"},"Extra":1,"ErrorContent":{"ErrorText":"x","ExceptionStackTrace":"at Foo()"}}"#,
        )
        .expect("tolerant read");
        let read = read.expect("content");
        assert_eq!(read.event_type_id(), Some("A"));
        assert_eq!(
            read.error_content,
            Some(ErrorContent::new(Some("x".into()), None))
        );
        assert!(MessageContent::from_json_bytes(b"not json").is_err());
        assert!(MessageContent::from_json_bytes(b"[1,2]").is_err());
        assert!(MessageContent::from_json_bytes(br#"{"EventContent":"text"}"#).is_err());
        let deep = format!("{}{}", "[".repeat(40), "]".repeat(40));
        let err = MessageContent::from_json_bytes(deep.as_bytes()).expect_err("too deep");
        assert!(err.to_string().contains("deeper than 32"), "{err}");
    }

    /// The limit is on nesting, not on how many brackets a body holds, and
    /// brackets inside strings do not nest.
    #[test]
    fn the_depth_limit_counts_levels_not_brackets() {
        let nested = |levels: usize| {
            format!(
                r#"{{"Extra":{}{}}}"#,
                "[".repeat(levels - 1),
                "]".repeat(levels - 1)
            )
        };
        assert!(MessageContent::from_json_bytes(nested(32).as_bytes()).is_ok());
        let err = MessageContent::from_json_bytes(nested(33).as_bytes()).expect_err("33 deep");
        assert!(err.to_string().contains("deeper than 32"), "{err}");

        let wide = format!(r#"{{"Extra":[{}[]]}}"#, "{},".repeat(40));
        assert!(MessageContent::from_json_bytes(wide.as_bytes()).is_ok());
        let in_strings = format!(
            r#"{{"EventContent":{{"EventTypeId":"A","EventJson":"{}"}}}}"#,
            "{[".repeat(40)
        );
        let read = MessageContent::from_json_bytes(in_strings.as_bytes())
            .expect("brackets in a string")
            .expect("content");
        assert_eq!(read.event_json(), Some("{[".repeat(40).as_str()));
    }
}
