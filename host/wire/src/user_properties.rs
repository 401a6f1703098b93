//! A message's user (application) properties as one JSON object, for a
//! store that keeps them beside the payload: `{"Tenant": "acme", "N": 3}`.
//! Strings, integers, floats and booleans map to JSON's own types, so the
//! text reads as the publish API's `properties` is written.

use nimbus_transport::{Properties, PropertyValue};
use serde_json::{Map, Number, Value};

/// `properties` as a JSON object's text.
pub fn to_json(properties: &Properties) -> String {
    let object: Map<String, Value> = properties
        .iter()
        .map(|(name, value)| {
            let value = match value {
                PropertyValue::String(s) => Value::String(s.clone()),
                PropertyValue::Int(n) => Value::Number((*n).into()),
                // A float JSON cannot hold (NaN, infinity) is kept as text
                // rather than lost.
                PropertyValue::Float(x) => {
                    Number::from_f64(*x).map_or_else(|| Value::String(x.to_string()), Value::Number)
                }
                PropertyValue::Bool(b) => Value::Bool(*b),
            };
            (name.clone(), value)
        })
        .collect();
    Value::Object(object).to_string()
}

/// The properties [`to_json`] wrote.
///
/// # Errors
///
/// The text is not a JSON object of strings, numbers and booleans.
pub fn from_json(text: &str) -> Result<Properties, String> {
    let Value::Object(object) = serde_json::from_str::<Value>(text)
        .map_err(|e| format!("user properties are not JSON: {e}"))?
    else {
        return Err("user properties are not a JSON object".to_owned());
    };
    object
        .into_iter()
        .map(|(name, value)| match from_json_value(&value) {
            Ok(value) => Ok((name, value)),
            Err(why) => Err(format!("user property '{name}': {why}")),
        })
        .collect()
}

/// One property value from JSON: a string, a number or a boolean, as the
/// publish API's `properties` and [`to_json`] write them.
///
/// # Errors
///
/// Why the value cannot be a property (another JSON type, a number out of
/// range), to follow the property's name.
pub fn from_json_value(value: &Value) -> Result<PropertyValue, String> {
    Ok(match value {
        Value::String(s) => PropertyValue::String(s.clone()),
        Value::Bool(b) => PropertyValue::Bool(*b),
        Value::Number(n) => match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => PropertyValue::Int(i),
            (None, Some(x)) => PropertyValue::Float(x),
            (None, None) => return Err(format!("{n} is out of range")),
        },
        other => return Err(format!("{other} is not a string, a number or a boolean")),
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;

    #[test]
    fn every_kind_of_value_round_trips() {
        let properties: Properties = [
            ("Tenant".to_owned(), PropertyValue::String("acme".into())),
            ("Count".to_owned(), PropertyValue::Int(-3)),
            ("Ratio".to_owned(), PropertyValue::Float(1.5)),
            ("Whole".to_owned(), PropertyValue::Float(2.0)),
            ("Ok".to_owned(), PropertyValue::Bool(true)),
        ]
        .into_iter()
        .collect();
        let text = to_json(&properties);
        assert_eq!(
            text,
            r#"{"Count":-3,"Ok":true,"Ratio":1.5,"Tenant":"acme","Whole":2.0}"#
        );
        assert_eq!(from_json(&text).unwrap(), properties);
        assert!(from_json("[1]").is_err());
        assert!(from_json(r#"{"a":[1]}"#).unwrap_err().contains("'a'"));
    }
}
