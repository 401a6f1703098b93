//! Rule actions: SET and REMOVE applied to a message's properties.

#![allow(clippy::unwrap_used, reason = "tests")]

use nimbus_sqlfilter::{
    ActionError, EvalError, MessageProperties, MessagePropertiesMut, PropertyBag, SqlRuleAction,
    Value,
};

fn s(text: &str) -> Value<'static> {
    Value::from(text.to_owned())
}

fn apply(action: &str, msg: &mut PropertyBag) {
    SqlRuleAction::parse(action)
        .unwrap_or_else(|e| panic!("`{action}` should parse: {e}"))
        .apply(msg)
        .unwrap_or_else(|e| panic!("`{action}` should apply: {e}"));
}

fn apply_error(action: &str, msg: &mut dyn MessagePropertiesMut) -> ActionError {
    SqlRuleAction::parse(action)
        .unwrap_or_else(|e| panic!("`{action}` should parse: {e}"))
        .apply(msg)
        .expect_err("applying should fail")
}

#[test]
fn set_adds_and_replaces_user_properties() {
    let mut m = PropertyBag::new();
    m.insert_user("To", "Retry");
    apply(
        "SET To = 'billing'; SET user.Count = 3; SET Ratio = 0.5; SET Ok = TRUE",
        &mut m,
    );
    assert_eq!(m.user_value("To"), Some(&s("billing")));
    assert_eq!(m.user_value("Count"), Some(&Value::Int(3)));
    assert_eq!(m.user_value("Ratio"), Some(&Value::Float(0.5)));
    assert_eq!(m.user_value("Ok"), Some(&Value::Bool(true)));
}

#[test]
fn remove_deletes_user_properties_and_ignores_absent_ones() {
    let mut m = PropertyBag::new();
    m.insert_user("From", "x");
    m.insert_user("Keep", "y");
    apply("REMOVE From; REMOVE user.Never", &mut m);
    assert_eq!(m.user_value("From"), None);
    assert_eq!(m.user_value("Keep"), Some(&s("y")));
}

#[test]
fn statements_run_in_order_and_see_earlier_effects() {
    let mut m = PropertyBag::new();
    m.insert_user("n", 1);
    apply(
        "SET n = n + 1; SET m = n * 10; REMOVE n; SET gone = n",
        &mut m,
    );
    assert_eq!(m.user_value("m"), Some(&Value::Int(20)));
    assert_eq!(m.user_value("n"), None);
    assert_eq!(m.user_value("gone"), None, "SET to NULL removes");
}

#[test]
fn set_copies_other_properties_including_system_ones() {
    let mut m = PropertyBag::new();
    m.insert_system("SessionId", "order-42").unwrap();
    m.insert_user("Old", "v");
    apply(
        "SET user.OriginalSessionId = sys.SessionId; SET New = Old + '-copy'",
        &mut m,
    );
    assert_eq!(m.user_value("OriginalSessionId"), Some(&s("order-42")));
    assert_eq!(m.user_value("New"), Some(&s("v-copy")));
}

#[test]
fn set_null_removes_a_user_property() {
    let mut m = PropertyBag::new();
    m.insert_user("x", 1);
    apply("SET x = NULL", &mut m);
    assert_eq!(m.user_value("x"), None);
}

/// `newid()` numbers what it makes in the order made (UUID version 7):
/// forwarders give each event its id with it, and the Resolver keys its
/// events by that id, so new ids land at the end of the key instead of on
/// a random page each (decision 0117).
#[test]
fn newid_makes_ids_in_increasing_order() {
    let action = SqlRuleAction::parse("SET EventId = newid()").unwrap();
    let ids: Vec<String> = (0..2000)
        .map(|_| {
            let mut m = PropertyBag::new();
            action.apply(&mut m).unwrap();
            m.user_value("EventId")
                .and_then(Value::as_str)
                .expect("a string")
                .to_owned()
        })
        .collect();
    for pair in ids.windows(2) {
        assert!(pair[0] < pair[1], "{} then {}", pair[0], pair[1]);
    }
    // The version nibble: a standard UUID, time-ordered.
    assert!(ids.iter().all(|id| id.as_bytes()[14] == b'7'), "{}", ids[0]);
}

#[test]
fn newid_sets_a_fresh_lowercase_hyphenated_uuid() {
    let mut m = PropertyBag::new();
    apply("SET a = newid(); SET b = NEWID()", &mut m);
    let a = m
        .user_value("a")
        .and_then(Value::as_str)
        .expect("a is a string")
        .to_owned();
    let b = m
        .user_value("b")
        .and_then(Value::as_str)
        .expect("b is a string")
        .to_owned();
    assert_ne!(a, b, "fresh per call");
    for id in [&a, &b] {
        assert_eq!(id.len(), 36);
        let groups: Vec<&str> = id.split('-').collect();
        assert_eq!(
            groups.iter().map(|g| g.len()).collect::<Vec<_>>(),
            vec![8, 4, 4, 4, 12]
        );
        assert!(
            id.chars()
                .all(|c| c == '-' || c.is_ascii_digit() || ('a'..='f').contains(&c)),
            "{id}"
        );
    }
}

#[test]
fn semicolon_inside_a_string_does_not_split() {
    let mut m = PropertyBag::new();
    apply("SET a = 'x; SET b = 1'; SET c = ';'", &mut m);
    assert_eq!(m.user_value("a"), Some(&s("x; SET b = 1")));
    assert_eq!(m.user_value("b"), None);
    assert_eq!(m.user_value("c"), Some(&s(";")));
}

#[test]
fn semicolons_between_statements_are_optional() {
    let mut m = PropertyBag::new();
    apply("SET a = 1 SET b = a + 1 REMOVE a", &mut m);
    assert_eq!(m.user_value("a"), None);
    assert_eq!(m.user_value("b"), Some(&Value::Int(2)));
}

#[test]
fn trailing_semicolon_and_whitespace_are_allowed() {
    let mut m = PropertyBag::new();
    apply("  set a = 1 ;\n", &mut m);
    assert_eq!(m.user_value("a"), Some(&Value::Int(1)));
}

#[test]
fn set_sys_goes_through_set_system() {
    let mut m = PropertyBag::new();
    apply(
        "SET sys.Label = 'relabelled'; SET sys.correlationid = 'c-1'",
        &mut m,
    );
    assert_eq!(m.system_value("Subject"), Some(&s("relabelled")));
    assert_eq!(m.system_value("CorrelationId"), Some(&s("c-1")));
    assert_eq!(m.user_value("Label"), None);
}

/// A broker-like message that refuses the properties the broker stamps.
#[derive(Default)]
struct StrictMessage {
    bag: PropertyBag,
}

impl MessageProperties for StrictMessage {
    fn system(&self, name: &str) -> Option<Value<'_>> {
        self.bag.system(name)
    }
    fn user(&self, name: &str) -> Option<Value<'_>> {
        self.bag.user(name)
    }
}

impl MessagePropertiesMut for StrictMessage {
    fn set_user(&mut self, name: &str, value: Value<'_>) {
        self.bag.set_user(name, value);
    }
    fn remove_user(&mut self, name: &str) {
        self.bag.remove_user(name);
    }
    fn set_system(&mut self, name: &str, value: Value<'_>) -> Result<(), ActionError> {
        if name == "SequenceNumber" {
            return Err(ActionError::SystemPropertyNotSettable {
                name: name.to_owned(),
                reason: "the broker assigns it".to_owned(),
            });
        }
        if value.as_str().is_none() {
            return Err(ActionError::SystemPropertyType {
                name: name.to_owned(),
                expected: "string",
                found: value.type_name(),
            });
        }
        self.bag.set_system(name, value)
    }
}

#[test]
fn broker_refusals_surface_and_stop_later_statements() {
    let mut m = StrictMessage::default();
    let error = apply_error("SET a = 1; SET sys.SequenceNumber = 5; SET b = 2", &mut m);
    assert_eq!(
        error.to_string(),
        "SET sys.SequenceNumber: the broker assigns it"
    );
    assert_eq!(
        m.user("a"),
        Some(Value::Int(1)),
        "statements before the failure were applied"
    );
    assert_eq!(m.user("b"), None, "statements after it were not");
    let error = apply_error("SET sys.To = 5", &mut m);
    assert_eq!(
        error.to_string(),
        "SET sys.To: expected a string value, found int"
    );
}

#[test]
fn setting_a_system_property_to_null_is_an_error() {
    let mut m = PropertyBag::new();
    let error = apply_error("SET sys.ReplyTo = missing", &mut m);
    assert_eq!(
        error,
        ActionError::NullSystemProperty {
            name: "ReplyTo".to_owned()
        }
    );
}

#[test]
fn evaluation_errors_name_the_property() {
    let mut m = PropertyBag::new();
    m.insert_user("s", "x");
    let error = apply_error("SET [total sum] = s + 1", &mut m);
    assert!(
        matches!(&error, ActionError::Eval { property, source: EvalError::ArithmeticType { .. } } if property == "user.[total sum]")
    );
    assert_eq!(
        error.to_string(),
        "SET user.[total sum]: operator `+` cannot be applied to string and int"
    );
}

#[test]
fn action_text_is_kept_and_canonical_form_normalises() {
    let text = "set To='billing';remove user.From;";
    let action = SqlRuleAction::parse(text).unwrap();
    assert_eq!(action.text(), text);
    assert_eq!(action.to_string(), text);
    assert_eq!(
        action.canonical(),
        "SET user.To = 'billing'; REMOVE user.From"
    );
    assert_eq!(
        SqlRuleAction::parse(&action.canonical())
            .unwrap()
            .canonical(),
        action.canonical()
    );
}
