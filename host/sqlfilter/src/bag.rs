//! [`PropertyBag`]: message properties held in two maps, for tests,
//! examples and tools that have no message of their own.

use std::collections::BTreeMap;

use crate::SYSTEM_PROPERTIES;
use crate::error::ActionError;
use crate::value::{MessageProperties, MessagePropertiesMut, Value};

/// System and user properties in maps; implements both property traits.
///
/// System property names are matched case-insensitively against
/// [`SYSTEM_PROPERTIES`] and stored in that spelling, with `Label` and
/// `Subject` as one property. Any system property may be set: the broker's
/// own implementation is where read-only properties are refused.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PropertyBag {
    system: BTreeMap<&'static str, Value<'static>>,
    user: BTreeMap<String, Value<'static>>,
}

impl PropertyBag {
    /// An empty bag.
    pub fn new() -> PropertyBag {
        PropertyBag::default()
    }

    /// Adds or replaces a user property.
    pub fn insert_user<'v>(&mut self, name: impl Into<String>, value: impl Into<Value<'v>>) {
        self.user.insert(name.into(), value.into().into_owned());
    }

    /// Adds or replaces a system property.
    ///
    /// # Errors
    ///
    /// [`ActionError::SystemPropertyNotSettable`] for a name not in
    /// [`SYSTEM_PROPERTIES`].
    pub fn insert_system<'v>(
        &mut self,
        name: &str,
        value: impl Into<Value<'v>>,
    ) -> Result<(), ActionError> {
        let key = system_key(name).ok_or_else(|| ActionError::SystemPropertyNotSettable {
            name: name.to_owned(),
            reason: "not a Service Bus system property".to_owned(),
        })?;
        self.system.insert(key, value.into().into_owned());
        Ok(())
    }

    /// The user property `name`, if set.
    pub fn user_value(&self, name: &str) -> Option<&Value<'static>> {
        self.user.get(name)
    }

    /// The system property `name` (case-insensitive), if set.
    pub fn system_value(&self, name: &str) -> Option<&Value<'static>> {
        self.system.get(system_key(name)?)
    }

    /// The user properties, by name.
    pub fn user_properties(&self) -> impl Iterator<Item = (&str, &Value<'static>)> {
        self.user.iter().map(|(k, v)| (k.as_str(), v))
    }
}

/// The storage key of a system property: its canonical spelling, with
/// `Subject` stored as `Label`.
fn system_key(name: &str) -> Option<&'static str> {
    let canonical = SYSTEM_PROPERTIES
        .iter()
        .find(|known| known.eq_ignore_ascii_case(name))?;
    Some(if *canonical == "Subject" {
        "Label"
    } else {
        canonical
    })
}

fn borrowed<'a>(value: &'a Value<'static>) -> Value<'a> {
    match value {
        Value::String(s) => Value::String(std::borrow::Cow::Borrowed(s)),
        other => other.clone(),
    }
}

impl MessageProperties for PropertyBag {
    fn system(&self, name: &str) -> Option<Value<'_>> {
        self.system_value(name).map(borrowed)
    }

    fn user(&self, name: &str) -> Option<Value<'_>> {
        self.user.get(name).map(borrowed)
    }
}

impl MessagePropertiesMut for PropertyBag {
    fn set_user(&mut self, name: &str, value: Value<'_>) {
        self.user.insert(name.to_owned(), value.into_owned());
    }

    fn remove_user(&mut self, name: &str) {
        self.user.remove(name);
    }

    fn set_system(&mut self, name: &str, value: Value<'_>) -> Result<(), ActionError> {
        self.insert_system(name, value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_system_property_is_refused() {
        let mut bag = PropertyBag::new();
        let error = bag.insert_system("Colour", "red").unwrap_err();
        assert_eq!(
            error.to_string(),
            "SET sys.Colour: not a Service Bus system property"
        );
        assert_eq!(bag, PropertyBag::new(), "nothing was stored");
    }

    #[test]
    fn system_names_are_case_insensitive_and_subject_is_label() {
        let mut bag = PropertyBag::new();
        bag.insert_system("messageid", "m-1").unwrap();
        bag.insert_system("Subject", "s").unwrap();
        assert_eq!(bag.system("MessageId"), Some(Value::from("m-1")));
        assert_eq!(bag.system_value("LABEL"), Some(&Value::from("s")));
        assert_eq!(bag.system("To"), None);
        assert_eq!(bag.system("Nonsense"), None);
    }

    #[test]
    fn user_names_are_exact_and_reads_borrow() {
        let mut bag = PropertyBag::new();
        bag.insert_user("To", "billing");
        assert_eq!(bag.user("to"), None);
        assert!(matches!(
            bag.user("To"),
            Some(Value::String(std::borrow::Cow::Borrowed("billing")))
        ));
        bag.remove_user("To");
        assert_eq!(bag.user_properties().count(), 0);
    }
}
