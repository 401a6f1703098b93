//! What filters read from and write to a message: [`Value`] and the two
//! property-access traits the broker implements.

use std::borrow::Cow;
use std::fmt;

/// A property value as filters see it.
///
/// Strings are a [`Cow`] so a broker can hand out borrowed views of the
/// message's properties: evaluating a filter then allocates nothing for
/// property reads. NULL is not a value here: a property that is absent is
/// `None` in [`MessageProperties`], and an expression that yields NULL in a
/// rule action removes the property (see [`SqlRuleAction`](crate::SqlRuleAction)).
#[derive(Debug, Clone, PartialEq)]
pub enum Value<'a> {
    /// A string.
    String(Cow<'a, str>),
    /// A 64-bit signed integer (Service Bus `int` and `long`).
    Int(i64),
    /// A 64-bit float (Service Bus `double`).
    Float(f64),
    /// A boolean.
    Bool(bool),
}

impl Value<'_> {
    /// This value with no borrow left in it.
    pub fn into_owned(self) -> Value<'static> {
        match self {
            Value::String(s) => Value::String(Cow::Owned(s.into_owned())),
            Value::Int(i) => Value::Int(i),
            Value::Float(f) => Value::Float(f),
            Value::Bool(b) => Value::Bool(b),
        }
    }

    /// The type's name as error messages spell it (`string`, `int`, `float`,
    /// `bool`).
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::String(_) => "string",
            Value::Int(_) => "int",
            Value::Float(_) => "float",
            Value::Bool(_) => "bool",
        }
    }

    /// The string inside, if this is a string.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }
}

impl fmt::Display for Value<'_> {
    /// SQL literal syntax: strings quoted with `''` escaping. (NaN and the
    /// infinities have no SQL literal; they print as `NaN`, `inf`, `-inf`.)
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::String(s) => crate::render::write_string_literal(f, s),
            Value::Int(i) => write!(f, "{i}"),
            Value::Float(x) => crate::render::write_float(f, *x),
            Value::Bool(true) => f.write_str("TRUE"),
            Value::Bool(false) => f.write_str("FALSE"),
        }
    }
}

impl<'a> From<&'a str> for Value<'a> {
    fn from(value: &'a str) -> Self {
        Value::String(Cow::Borrowed(value))
    }
}

impl From<String> for Value<'static> {
    fn from(value: String) -> Self {
        Value::String(Cow::Owned(value))
    }
}

impl From<i64> for Value<'static> {
    fn from(value: i64) -> Self {
        Value::Int(value)
    }
}

impl From<f64> for Value<'static> {
    fn from(value: f64) -> Self {
        Value::Float(value)
    }
}

impl From<bool> for Value<'static> {
    fn from(value: bool) -> Self {
        Value::Bool(value)
    }
}

/// Read access to a message's properties, implemented by the broker.
pub trait MessageProperties {
    /// A system property by its Service Bus name without the `sys.` prefix.
    ///
    /// The parser only accepts names from
    /// [`SYSTEM_PROPERTIES`](crate::SYSTEM_PROPERTIES) and always passes the
    /// spelling listed there, whatever case the filter used; `Label` and
    /// `Subject` are the same property under two names. `None` means the
    /// property is not set on this message (NULL to the filter).
    fn system(&self, name: &str) -> Option<Value<'_>>;

    /// A user (application) property by exact, case-sensitive name; `None`
    /// when the message does not carry it.
    fn user(&self, name: &str) -> Option<Value<'_>>;
}

/// Write access for rule actions, implemented by the broker.
pub trait MessagePropertiesMut: MessageProperties {
    /// Sets (adds or replaces) the user property `name`.
    fn set_user(&mut self, name: &str, value: Value<'_>);

    /// Removes the user property `name`; removing an absent one is a no-op.
    fn remove_user(&mut self, name: &str);

    /// Sets the system property `name` (spelled as in
    /// [`SYSTEM_PROPERTIES`](crate::SYSTEM_PROPERTIES)).
    ///
    /// # Errors
    ///
    /// The broker refuses properties it stamps itself (sequence number,
    /// enqueued time, ...) or a value of the wrong type, with an
    /// [`ActionError`](crate::ActionError) naming the property.
    fn set_system(&mut self, name: &str, value: Value<'_>) -> Result<(), crate::ActionError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_is_sql_literal_syntax() {
        assert_eq!(Value::from("it's").to_string(), "'it''s'");
        assert_eq!(Value::Int(-3).to_string(), "-3");
        assert_eq!(Value::Float(2.0).to_string(), "2.0");
        assert_eq!(Value::Bool(false).to_string(), "FALSE");
    }

    #[test]
    fn into_owned_keeps_the_value() {
        let text = String::from("x");
        let borrowed = Value::from(text.as_str());
        assert_eq!(borrowed.clone().into_owned(), borrowed);
        assert_eq!(borrowed.type_name(), "string");
        assert_eq!(borrowed.as_str(), Some("x"));
        assert_eq!(Value::Int(1).as_str(), None);
    }
}
