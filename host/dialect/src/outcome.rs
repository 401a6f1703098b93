//! The settlement a client asks of a delivery it holds, and how it travels
//! as a disposition's delivery state (spec §A.8): `accepted` completes,
//! `modified` abandons (its annotations the properties to set, and
//! `undeliverable-here` a deferral), `rejected` dead-letters (the reason
//! and description in its error's `info`), `released` gives the message
//! back uncounted.
//!
//! The client writes an [`Outcome`] with [`Outcome::delivery_state`]; the
//! endpoint reads it with [`Outcome::asked_by`].

use fe2o3_amqp::types::definitions::{Error, Fields};
use fe2o3_amqp::types::messaging::{Accepted, DeliveryState, Modified, Rejected, Released};
use fe2o3_amqp::types::primitives::{Symbol, Value};
use nimbus_transport::{Properties, PropertyValue};

use crate::condition;

// Where a dead-letter's reason and description travel: in a `rejected`'s
// error `info`, and as application properties of a message in a
// dead-letter queue. Defined with the transport's received message.
pub use nimbus_transport::{DEAD_LETTER_ERROR_DESCRIPTION, DEAD_LETTER_REASON};

/// What a client asks done with a delivery.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Remove it.
    Complete,
    /// Give it back counted, setting these properties.
    Abandon(Properties),
    /// Move it to the dead-letter queue.
    DeadLetter {
        /// Why, in a word or two.
        reason: String,
        /// Why, at length.
        description: String,
    },
    /// Give it back uncounted.
    Release,
}

/// Why a disposition asks no outcome the broker applies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotAnOutcome {
    /// `modified` with `undeliverable-here`: a deferral.
    Deferral,
    /// No state, or one that is not an outcome (`received`, a
    /// transaction's).
    Missing,
}

impl Outcome {
    /// The delivery state a client's disposition sends for it.
    pub fn delivery_state(self) -> DeliveryState {
        match self {
            Outcome::Complete => DeliveryState::Accepted(Accepted {}),
            Outcome::Abandon(properties) => DeliveryState::Modified(Modified {
                delivery_failed: Some(true),
                undeliverable_here: Some(false),
                message_annotations: (!properties.is_empty()).then(|| annotations(&properties)),
            }),
            Outcome::DeadLetter {
                reason,
                description,
            } => {
                let mut info = Fields::new();
                info.insert(
                    Symbol::from(DEAD_LETTER_REASON),
                    Value::String(reason.clone()),
                );
                info.insert(
                    Symbol::from(DEAD_LETTER_ERROR_DESCRIPTION),
                    Value::String(description),
                );
                DeliveryState::Rejected(Rejected {
                    error: Some(Error::new(
                        condition::named(condition::DEAD_LETTER),
                        Some(reason),
                        Some(info),
                    )),
                })
            }
            Outcome::Release => DeliveryState::Released(Released {}),
        }
    }

    /// What a client's disposition with `state` asks.
    ///
    /// # Errors
    ///
    /// [`NotAnOutcome`] for a deferral or a state that is no outcome.
    pub fn asked_by(state: Option<&DeliveryState>) -> Result<Outcome, NotAnOutcome> {
        Ok(match state {
            Some(DeliveryState::Accepted(_)) => Outcome::Complete,
            Some(DeliveryState::Modified(modified))
                if modified.undeliverable_here == Some(true) =>
            {
                return Err(NotAnOutcome::Deferral);
            }
            Some(DeliveryState::Modified(modified)) => Outcome::Abandon(
                modified
                    .message_annotations
                    .as_ref()
                    .map(|fields| {
                        fields
                            .iter()
                            .filter_map(|(key, value)| Some((key.0.clone(), property(value)?)))
                            .collect()
                    })
                    .unwrap_or_default(),
            ),
            Some(DeliveryState::Rejected(rejected)) => {
                let (reason, description) = dead_letter_reason(rejected);
                Outcome::DeadLetter {
                    reason,
                    description,
                }
            }
            Some(DeliveryState::Released(_)) => Outcome::Release,
            _ => return Err(NotAnOutcome::Missing),
        })
    }
}

/// A property an abandon asks to set, if the broker keeps its type.
pub fn property(value: &Value) -> Option<PropertyValue> {
    Some(match value {
        Value::String(text) => PropertyValue::String(text.clone()),
        Value::Bool(flag) => PropertyValue::Bool(*flag),
        Value::Int(n) => PropertyValue::Int((*n).into()),
        Value::Long(n) => PropertyValue::Int(*n),
        Value::Double(f) => PropertyValue::Float(f.into_inner()),
        _ => return None,
    })
}

/// The properties an abandon sets, as `modified`'s annotations: the
/// inverse of [`property`].
fn annotations(properties: &Properties) -> Fields {
    properties
        .iter()
        .map(|(name, value)| {
            let value = match value {
                PropertyValue::String(text) => Value::String(text.clone()),
                PropertyValue::Int(n) => Value::Long(*n),
                PropertyValue::Float(f) => Value::Double((*f).into()),
                PropertyValue::Bool(flag) => Value::Bool(*flag),
            };
            (Symbol::from(name.as_str()), value)
        })
        .collect()
}

/// The reason and description of a dead-letter: Python and .NET put them in
/// the error's `info`; a bare description is taken as the reason.
fn dead_letter_reason(rejected: &Rejected) -> (String, String) {
    let Some(error) = &rejected.error else {
        return (String::new(), String::new());
    };
    let info = |key: &str| {
        error
            .info
            .as_ref()
            .and_then(|info| info.get(&Symbol::from(key)))
            .and_then(|value| match value {
                Value::String(text) => Some(text.clone()),
                _ => None,
            })
    };
    let reason = info(DEAD_LETTER_REASON)
        .or_else(|| error.description.clone())
        .unwrap_or_default();
    let description = info(DEAD_LETTER_ERROR_DESCRIPTION).unwrap_or_default();
    (reason, description)
}

#[cfg(test)]
mod tests {
    use fe2o3_amqp::types::messaging::Received;

    use super::*;

    #[test]
    fn each_outcome_a_client_sends_is_the_one_the_endpoint_reads() {
        let mut properties = Properties::new();
        properties.insert("RetryCount".to_owned(), PropertyValue::Int(2));
        properties.insert("Total".to_owned(), PropertyValue::Float(10.5));
        properties.insert("Urgent".to_owned(), PropertyValue::Bool(true));
        properties.insert(
            "Why".to_owned(),
            PropertyValue::String("a timeout".to_owned()),
        );
        for outcome in [
            Outcome::Complete,
            Outcome::Abandon(Properties::new()),
            Outcome::Abandon(properties),
            Outcome::DeadLetter {
                reason: "Permanent failure".to_owned(),
                description: "order o-9 has no lines".to_owned(),
            },
            Outcome::Release,
        ] {
            let state = outcome.clone().delivery_state();
            assert_eq!(Outcome::asked_by(Some(&state)), Ok(outcome));
        }
    }

    #[test]
    fn a_dead_letter_with_only_a_description_takes_it_as_its_reason() {
        let rejected = DeliveryState::Rejected(Rejected {
            error: Some(Error::new(
                condition::named(condition::DEAD_LETTER),
                Some("BadData".to_owned()),
                None,
            )),
        });
        assert_eq!(
            Outcome::asked_by(Some(&rejected)),
            Ok(Outcome::DeadLetter {
                reason: "BadData".to_owned(),
                description: String::new(),
            })
        );
    }

    #[test]
    fn a_deferral_or_a_state_that_is_no_outcome_is_told_apart() {
        let deferral = DeliveryState::Modified(Modified {
            delivery_failed: None,
            undeliverable_here: Some(true),
            message_annotations: None,
        });
        assert_eq!(
            Outcome::asked_by(Some(&deferral)),
            Err(NotAnOutcome::Deferral)
        );
        let received = DeliveryState::Received(Received {
            section_number: 0,
            section_offset: 0,
        });
        assert_eq!(
            Outcome::asked_by(Some(&received)),
            Err(NotAnOutcome::Missing)
        );
        assert_eq!(Outcome::asked_by(None), Err(NotAnOutcome::Missing));
    }
}
