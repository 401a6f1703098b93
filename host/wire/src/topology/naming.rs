//! The names a topology may use: endpoint and producer topic names (entity
//! names on Service Bus, and values in rule text) and event types (rule
//! names).

use crate::addr::{
    CONTINUATION, DEFERRED, DEFERRED_PROCESSOR, MANAGER, RESOLVER, RETRY, SELF,
    SELF_FORWARDER_PREFIX,
};

/// NimBus's fixed ids: an endpoint or producer topic may not be named so,
/// because the rules route on them (`To = 'Retry'`, ...). `self` is
/// upstream's placeholder for "this message".
const RESERVED_NAMES: [&str; 7] = [
    RESOLVER,
    MANAGER,
    CONTINUATION,
    RETRY,
    DEFERRED_PROCESSOR,
    DEFERRED,
    SELF,
];

/// Service Bus's limit on subscription and rule names. An endpoint name is
/// also a subscription name, and `fwd-{name}` must fit too.
pub(super) const MAX_ENTITY_NAME: usize = 50;
/// The longest endpoint name, so that `fwd-{name}` is a valid subscription name.
pub const MAX_ENDPOINT_NAME: usize = MAX_ENTITY_NAME - SELF_FORWARDER_PREFIX.len();
/// The longest event type id (it names a rule).
pub const MAX_EVENT_TYPE: usize = MAX_ENTITY_NAME;

/// Checks one endpoint name as [`Topology::validate`](crate::topology::Topology::validate) does (length,
/// characters, fixed ids, the `fwd-` prefix), so a caller that discovers
/// endpoints (the handlers directory) can refuse a name before it reaches a
/// topology, where it would fail the whole provisioning. Uniqueness ignoring
/// case needs every name; the caller checks that.
///
/// # Errors
///
/// [`TopologyError::InvalidName`] with the reason.
pub fn check_endpoint_name(name: &str) -> Result<(), TopologyError> {
    check_name("endpoint", name, MAX_ENDPOINT_NAME, false)
}

/// Checks an event type against the topology's rules: it names a
/// forwarding rule and goes into its filter, so a handler declaring one the
/// topology refuses is refused when it loads, not when provisioning.
///
/// # Errors
///
/// [`TopologyError::InvalidName`] with the reason.
pub fn check_event_type(event_type: &str) -> Result<(), TopologyError> {
    check_name("event type", event_type, MAX_EVENT_TYPE, true)
}

/// Checks an entity or rule name; `reservable` names (event types, which
/// only name rules) may also be a fixed id or start with `fwd-`.
pub(super) fn check_name(
    what: &'static str,
    name: &str,
    max: usize,
    reservable: bool,
) -> Result<(), TopologyError> {
    let invalid = |reason: String| TopologyError::InvalidName {
        what,
        name: name.to_owned(),
        reason,
    };
    if name.is_empty() || name.len() > max {
        return Err(invalid(format!("must be 1 to {max} characters")));
    }
    if !name.starts_with(|c: char| c.is_ascii_alphanumeric()) {
        return Err(invalid("must start with a letter or digit".to_owned()));
    }
    // The name goes verbatim into SQL string literals and entity paths.
    if let Some(bad) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_')))
    {
        return Err(invalid(format!(
            "contains '{bad}'; only letters, digits, '.', '-' and '_' are allowed"
        )));
    }
    if !reservable {
        if let Some(reserved) = RESERVED_NAMES.iter().find(|r| r.eq_ignore_ascii_case(name)) {
            return Err(invalid(format!("'{reserved}' is a NimBus fixed id")));
        }
        let prefix = name.get(..SELF_FORWARDER_PREFIX.len());
        if prefix.is_some_and(|p| p.eq_ignore_ascii_case(SELF_FORWARDER_PREFIX)) {
            return Err(invalid(format!(
                "the prefix '{SELF_FORWARDER_PREFIX}' is reserved for self-forwarders"
            )));
        }
    }
    Ok(())
}

/// Why a topology cannot be provisioned.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TopologyError {
    /// A name cannot be used.
    #[error("{what} name '{name}' is invalid: {reason}")]
    InvalidName {
        /// What the name names (`endpoint`, `event type`, `producer topic`).
        what: &'static str,
        /// The name.
        name: String,
        /// Why it is invalid.
        reason: String,
    },
    /// Two endpoints share a name (ignoring case, as Service Bus does).
    #[error("endpoints '{first}' and '{second}' have the same name (names ignore case)")]
    DuplicateEndpoint {
        /// The first.
        first: String,
        /// The second.
        second: String,
    },
    /// A setting is out of range.
    #[error("invalid topology setting: {reason}")]
    InvalidSetting {
        /// What is wrong.
        reason: String,
    },
}
