//! What a receive link's attach carries in the dialect (spec §A.7.1): the
//! session asked for in the source's filter, how long the broker may wait
//! for one in the attach's properties, and, in the broker's answer, the
//! session given (echoed in the filter) and its lock's expiry.
//!
//! The client writes what the endpoint reads and the endpoint answers
//! what the client reads: each key is named once here, with its reader
//! and its writer side by side.

use std::time::{Duration, SystemTime};

use fe2o3_amqp::types::definitions::Fields;
use fe2o3_amqp::types::messaging::FilterSet;
use fe2o3_amqp::types::primitives::{Symbol, Value};

use crate::convert::{from_ticks, ticks};

/// The session filter's key in a receive link's source.
pub const SESSION_FILTER: &str = "com.microsoft:session-filter";

/// The attach property saying how long a next-available attach may wait
/// for a session, in milliseconds.
pub const TIMEOUT: &str = "com.microsoft:timeout";

/// The answer's property carrying the session lock's expiry, in .NET
/// ticks.
pub const LOCKED_UNTIL_UTC: &str = "com.microsoft:locked-until-utc";

/// How long a next-available attach waits for a session when the client
/// does not say.
pub const DEFAULT_SESSION_WAIT: Duration = Duration::from_secs(60);

/// The longest a next-available attach may wait: Service Bus caps any
/// wait at 65 s.
pub const MAX_SESSION_WAIT: Duration = Duration::from_secs(65);

/// The filter entry asking for the session `id`, or for the next
/// available one (`None`); an endpoint echoes the session it gave the
/// same way.
pub fn session_filter(id: Option<&str>) -> (Symbol, Value) {
    let value = id.map_or(Value::Null, |id| Value::String(id.to_owned()));
    (Symbol::from(SESSION_FILTER), value)
}

/// The session a source's filters ask for (or, in an answer, give):
/// `None` without a session filter, `Some(None)` for the next available,
/// `Some(Some(id))` for a named one. The value may be plain or described.
pub fn session_in(filter: Option<&FilterSet>) -> Option<Option<String>> {
    let value = filter?.get(&Symbol::from(SESSION_FILTER))?;
    let value = match value {
        Value::Described(described) => &described.value,
        other => other,
    };
    Some(match value {
        Value::String(id) if !id.is_empty() => Some(id.clone()),
        _ => None,
    })
}

/// The attach property asking the broker to wait up to `wait` for a
/// session.
pub fn wait_property(wait: Duration) -> (Symbol, Value) {
    let ms = u32::try_from(wait.as_millis()).unwrap_or(u32::MAX);
    (Symbol::from(TIMEOUT), Value::Uint(ms))
}

/// How long a next-available attach with `properties` may wait: its
/// [`TIMEOUT`] when set (any integer type), [`DEFAULT_SESSION_WAIT`]
/// when not, and never past [`MAX_SESSION_WAIT`].
pub fn wait_in(properties: Option<&Fields>) -> Duration {
    let asked = properties
        .and_then(|p| p.get(&Symbol::from(TIMEOUT)))
        .and_then(|value| match value {
            Value::Uint(ms) => Some(u64::from(*ms)),
            Value::Int(ms) => u64::try_from(*ms).ok(),
            Value::Long(ms) => u64::try_from(*ms).ok(),
            Value::Ulong(ms) => Some(*ms),
            _ => None,
        });
    asked.map_or(DEFAULT_SESSION_WAIT, |ms| {
        Duration::from_millis(ms).min(MAX_SESSION_WAIT)
    })
}

/// The answer's property saying the session lock lasts until `at`.
pub fn locked_until_property(at: SystemTime) -> (Symbol, Value) {
    (Symbol::from(LOCKED_UNTIL_UTC), Value::Long(ticks(at)))
}

/// When the session lock an answer gave lapses, if it says.
pub fn locked_until_in(properties: Option<&Fields>) -> Option<SystemTime> {
    match properties?.get(&Symbol::from(LOCKED_UNTIL_UTC))? {
        Value::Long(ticks) => Some(from_ticks(*ticks)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use std::time::UNIX_EPOCH;

    use super::*;

    /// A filter set or fields (one type) holding one entry.
    fn one((key, value): (Symbol, Value)) -> Fields {
        let mut map = Fields::new();
        map.insert(key, value);
        map
    }

    #[test]
    fn the_session_a_client_asks_for_is_the_one_the_endpoint_reads() {
        assert_eq!(
            session_in(Some(&one(session_filter(Some("order-1"))))),
            Some(Some("order-1".to_owned()))
        );
        assert_eq!(session_in(Some(&one(session_filter(None)))), Some(None));
        assert_eq!(session_in(Some(&Fields::new())), None);
        assert_eq!(session_in(None), None);
    }

    #[test]
    fn the_wait_asked_is_read_back_and_capped_as_service_bus_caps_it() {
        let asked = |wait| wait_in(Some(&one(wait_property(wait))));
        assert_eq!(asked(Duration::from_secs(5)), Duration::from_secs(5));
        assert_eq!(asked(Duration::from_secs(600)), MAX_SESSION_WAIT);
        assert_eq!(wait_in(None), DEFAULT_SESSION_WAIT);
    }

    #[test]
    fn the_lock_s_expiry_travels_in_ticks_to_the_millisecond() {
        let at = UNIX_EPOCH + Duration::from_millis(1_796_515_200_123);
        assert_eq!(
            locked_until_in(Some(&one(locked_until_property(at)))),
            Some(at)
        );
        assert_eq!(locked_until_in(None), None);
    }
}
