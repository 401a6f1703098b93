//! The request/response nodes' vocabulary (spec §A.4, §A.10, §A.11): the
//! operations an entity's `$management` node serves, the keys of their
//! request and answer maps, and `$cbs`'s `put-token`.
//!
//! A request names its operation in the `operation` application property
//! and carries a map with string keys; the answer carries `statusCode`
//! (an AMQP int), `statusDescription` and, on failure, `errorCondition`,
//! with the request's message id as its correlation id. `$cbs` answers
//! the same way with `status-code` and `status-description`.

use fe2o3_amqp::types::primitives::{Array, OrderedMap, Value};
use nimbus_transport::LockToken;

/// The application property naming a request's operation.
pub const OPERATION: &str = "operation";

/// The application property of `put-token` naming the audience its token
/// is for.
pub const AUDIENCE: &str = "name";

/// The operations of `$management` and `$cbs`.
pub mod operation {
    /// Publishes messages, each at its scheduled time (a topic's node).
    pub const SCHEDULE_MESSAGE: &str = "com.microsoft:schedule-message";
    /// Cancels scheduled messages by sequence number (a topic's node).
    pub const CANCEL_SCHEDULED_MESSAGE: &str = "com.microsoft:cancel-scheduled-message";
    /// Reads a held session's state.
    pub const GET_SESSION_STATE: &str = "com.microsoft:get-session-state";
    /// Writes a held session's state.
    pub const SET_SESSION_STATE: &str = "com.microsoft:set-session-state";
    /// Renews a session's lock.
    pub const RENEW_SESSION_LOCK: &str = "com.microsoft:renew-session-lock";
    /// Renews messages' locks by lock token.
    pub const RENEW_LOCK: &str = "com.microsoft:renew-lock";
    /// Settles messages by lock token.
    pub const UPDATE_DISPOSITION: &str = "com.microsoft:update-disposition";
    /// Reads messages without locking them.
    pub const PEEK_MESSAGE: &str = "com.microsoft:peek-message";
    /// Puts a token on `$cbs`.
    pub const PUT_TOKEN: &str = "put-token";
}

/// The application properties of an answer.
pub mod status {
    /// A `$management` answer's status (an AMQP int, as HTTP's).
    pub const CODE: &str = "statusCode";
    /// A `$management` answer's description.
    pub const DESCRIPTION: &str = "statusDescription";
    /// A failed `$management` answer's condition (a symbol).
    pub const ERROR_CONDITION: &str = "errorCondition";
    /// A `$cbs` answer's status.
    pub const CBS_CODE: &str = "status-code";
    /// A `$cbs` answer's description.
    pub const CBS_DESCRIPTION: &str = "status-description";
}

/// The keys of request and answer maps.
pub mod key {
    /// The messages of `schedule-message` or of a peek's answer (a list of
    /// maps).
    pub const MESSAGES: &str = "messages";
    /// One message, encoded whole (binary).
    pub const MESSAGE: &str = "message";
    /// A scheduled message's id.
    pub const MESSAGE_ID: &str = "message-id";
    /// The session a request is about (a string).
    pub const SESSION_ID: &str = "session-id";
    /// A session's state (binary, or null for none).
    pub const SESSION_STATE: &str = "session-state";
    /// Sequence numbers (an array of longs).
    pub const SEQUENCE_NUMBERS: &str = "sequence-numbers";
    /// Where a peek starts (a long).
    pub const FROM_SEQUENCE_NUMBER: &str = "from-sequence-number";
    /// How many messages a peek asks for (an int).
    pub const MESSAGE_COUNT: &str = "message-count";
    /// Messages' lock tokens (an array of uuids, in RFC order).
    pub const LOCK_TOKENS: &str = "lock-tokens";
    /// A renewed session lock's expiry (a timestamp).
    pub const EXPIRATION: &str = "expiration";
    /// Renewed message locks' expiries (an array of timestamps).
    pub const EXPIRATIONS: &str = "expirations";
    /// What `update-disposition` does: one of [`super::disposition`].
    pub const DISPOSITION_STATUS: &str = "disposition-status";
    /// A dead-letter's reason, in `update-disposition`.
    pub const DEADLETTER_REASON: &str = "deadletter-reason";
    /// A dead-letter's description, in `update-disposition`.
    pub const DEADLETTER_DESCRIPTION: &str = "deadletter-description";
    /// The properties an abandon sets, in `update-disposition`.
    pub const PROPERTIES_TO_MODIFY: &str = "properties-to-modify";
}

/// The values of `disposition-status`.
pub mod disposition {
    /// Complete.
    pub const COMPLETED: &str = "completed";
    /// Abandon.
    pub const ABANDONED: &str = "abandoned";
    /// Dead-letter.
    pub const SUSPENDED: &str = "suspended";
    /// Defer, as .NET spells it.
    pub const DEFERRED: &str = "deferred";
    /// Defer, as older SDKs spell it.
    pub const DEFERED: &str = "defered";
}

/// A map with string keys, as requests and answers are written.
pub fn map<const N: usize>(entries: [(&str, Value); N]) -> Value {
    Value::Map(
        entries
            .into_iter()
            .map(|(key, value)| (Value::String(key.to_owned()), value))
            .collect(),
    )
}

/// The value under `key`, written as a string or a symbol.
pub fn field<'a>(map: &'a OrderedMap<Value, Value>, key: &str) -> Option<&'a Value> {
    map.iter()
        .find(|(k, _)| text(k).as_deref() == Some(key))
        .map(|(_, value)| value)
}

/// A string written as a string or a symbol.
pub fn text(value: &Value) -> Option<String> {
    match value {
        Value::String(text) => Some(text.clone()),
        Value::Symbol(symbol) => Some(symbol.0.clone()),
        _ => None,
    }
}

/// `tokens` as `lock-tokens` carries them: an array of uuids in RFC order
/// (not the .NET order of a delivery tag).
pub fn lock_tokens(tokens: impl IntoIterator<Item = LockToken>) -> Value {
    Value::Array(Array(
        tokens
            .into_iter()
            .map(|token| {
                Value::Uuid(fe2o3_amqp::types::primitives::Uuid::from(
                    *token.as_uuid().as_bytes(),
                ))
            })
            .collect(),
    ))
}

/// The lock tokens `value` carries (an array or a list of uuids); `None`
/// when it is anything else.
pub fn lock_tokens_in(value: &Value) -> Option<Vec<LockToken>> {
    let values = match value {
        Value::Array(values) => &values.0,
        Value::List(values) => values,
        _ => return None,
    };
    values
        .iter()
        .map(|value| match value {
            Value::Uuid(uuid) => Some(LockToken::from_uuid(uuid::Uuid::from_bytes(
                uuid.clone().into_inner(),
            ))),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use fe2o3_amqp::types::primitives::Symbol;

    use super::*;

    #[test]
    fn lock_tokens_read_back_in_order_and_anything_else_is_refused() {
        let tokens = [LockToken::new(), LockToken::new()];
        assert_eq!(lock_tokens_in(&lock_tokens(tokens)), Some(tokens.to_vec()));
        let as_list = Value::List(vec![Value::Uuid(
            fe2o3_amqp::types::primitives::Uuid::from(*tokens[0].as_uuid().as_bytes()),
        )]);
        assert_eq!(lock_tokens_in(&as_list), Some(vec![tokens[0]]));
        assert_eq!(lock_tokens_in(&Value::List(vec![Value::Long(1)])), None);
        assert_eq!(lock_tokens_in(&Value::Null), None);
    }

    #[test]
    fn a_field_is_found_under_a_string_or_a_symbol_key() {
        let Value::Map(mut body) = map([(key::SESSION_ID, Value::String("s-1".to_owned()))]) else {
            panic!("a map");
        };
        body.insert(
            Value::Symbol(Symbol::from(key::MESSAGE_COUNT)),
            Value::Int(3),
        );
        assert_eq!(
            field(&body, key::SESSION_ID).and_then(text).as_deref(),
            Some("s-1")
        );
        assert_eq!(field(&body, key::MESSAGE_COUNT), Some(&Value::Int(3)));
        assert_eq!(field(&body, key::LOCK_TOKENS), None);
    }
}
