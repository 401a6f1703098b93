//! What filters match: every construct of the grammar, evaluated against
//! real property sets.

#![allow(clippy::unwrap_used, reason = "tests")]

use nimbus_sqlfilter::{EvalError, PropertyBag, SqlFilter, Value};

/// A message with these user properties.
fn msg(user: &[(&str, Value<'static>)]) -> PropertyBag {
    let mut bag = PropertyBag::new();
    for (name, value) in user {
        bag.insert_user(*name, value.clone());
    }
    bag
}

fn s(text: &str) -> Value<'static> {
    Value::from(text.to_owned())
}

/// Whether `filter` matches `m`; panics on parse or evaluation errors.
fn matches(filter: &str, m: &PropertyBag) -> bool {
    SqlFilter::parse(filter)
        .unwrap_or_else(|e| panic!("`{filter}` should parse: {e}"))
        .evaluate(m)
        .unwrap_or_else(|e| panic!("`{filter}` should evaluate: {e}"))
}

fn eval_error(filter: &str, m: &PropertyBag) -> EvalError {
    SqlFilter::parse(filter)
        .unwrap_or_else(|e| panic!("`{filter}` should parse: {e}"))
        .evaluate(m)
        .expect_err("evaluation should fail")
}

#[test]
fn true_and_false_filters() {
    let empty = PropertyBag::new();
    assert!(matches("1=1", &empty));
    assert!(matches("1 = 1", &empty));
    assert!(!matches("1=0", &empty));
    assert!(SqlFilter::parse(" 1 =1 ").unwrap().is_true_filter());
    assert!(!SqlFilter::parse("1=0").unwrap().is_true_filter());
    assert!(!SqlFilter::parse("1=1 AND 1=1").unwrap().is_true_filter());
    assert!(!SqlFilter::parse("1.0=1").unwrap().is_true_filter());
    let parsed: SqlFilter = "1=1".parse().unwrap();
    assert!(parsed.is_true_filter());
}

#[test]
fn every_comparison_operator_on_integers() {
    let m = msg(&[("n", Value::Int(5))]);
    for (filter, expected) in [
        ("n = 5", true),
        ("n = 4", false),
        ("n <> 4", true),
        ("n <> 5", false),
        ("n != 4", true),
        ("n != 5", false),
        ("n < 6", true),
        ("n < 5", false),
        ("n <= 5", true),
        ("n <= 4", false),
        ("n > 4", true),
        ("n > 5", false),
        ("n >= 5", true),
        ("n >= 6", false),
    ] {
        assert_eq!(matches(filter, &m), expected, "{filter}");
    }
}

#[test]
fn strings_compare_ordinally_and_case_sensitively() {
    let m = msg(&[("To", s("billing"))]);
    assert!(matches("To = 'billing'", &m));
    assert!(!matches("To = 'Billing'", &m));
    assert!(!matches("To = 'billing '", &m));
    assert!(
        matches("To > 'Billing'", &m),
        "lower case sorts after upper case"
    );
    assert!(matches("To < 'billinh'", &m));
    assert!(matches("'a' < 'b'", &m));
    assert!(matches("'é' > 'z'", &m), "code point order, not a locale's");
}

#[test]
fn user_property_names_are_case_sensitive() {
    let m = msg(&[("To", s("billing"))]);
    assert!(!matches("to = 'billing'", &m));
    assert!(matches("to IS NULL", &m));
}

#[test]
fn integers_and_floats_compare_as_numbers() {
    let m = msg(&[
        ("i", Value::Int(2)),
        ("f", Value::Float(2.0)),
        ("h", Value::Float(2.5)),
    ]);
    assert!(matches("i = 2.0", &m));
    assert!(matches("f = 2", &m));
    assert!(matches("i = f", &m));
    assert!(matches("h > i", &m));
    assert!(matches("i < 2.5", &m));
    assert!(matches("1.5e0 < i", &m));
    assert!(matches("2E-1 = 0.2", &m));
    assert!(matches(".5 = 0.5", &m));
}

#[test]
fn string_against_number_is_unknown_not_an_error() {
    let m = msg(&[("n", s("5"))]);
    assert!(!matches("n = 5", &m));
    assert!(
        !matches("n <> 5", &m),
        "unknown, so NOT equal does not match either"
    );
    assert!(!matches("NOT (n = 5)", &m));
    assert!(matches("n = '5'", &m));
}

#[test]
fn booleans_compare_for_equality_only() {
    let m = msg(&[("urgent", Value::Bool(true))]);
    assert!(matches("urgent = TRUE", &m));
    assert!(matches("urgent = true", &m));
    assert!(!matches("urgent = FALSE", &m));
    assert!(matches("urgent <> FALSE", &m));
    assert!(
        !matches("urgent > FALSE", &m),
        "ordering booleans is unknown"
    );
    assert!(!matches("NOT (urgent > FALSE)", &m));
}

#[test]
fn missing_property_makes_comparisons_unknown() {
    let empty = PropertyBag::new();
    assert!(!matches("x = 1", &empty));
    assert!(!matches("x <> 1", &empty));
    assert!(!matches("NOT x = 1", &empty));
    assert!(
        !matches("x = NULL", &empty),
        "NULL is never equal, even to NULL"
    );
    assert!(!matches("NULL = NULL", &empty));
}

#[test]
fn three_valued_and_or_not() {
    let m = msg(&[("a", Value::Int(1))]);
    // unknown AND false = false, so NOT of it is true.
    assert!(matches("NOT (missing = 1 AND a = 2)", &m));
    // unknown AND true = unknown.
    assert!(!matches("NOT (missing = 1 AND a = 1)", &m));
    // unknown OR true = true.
    assert!(matches("missing = 1 OR a = 1", &m));
    // unknown OR false = unknown.
    assert!(!matches("NOT (missing = 1 OR a = 2)", &m));
}

#[test]
fn not_binds_tighter_than_and_which_binds_tighter_than_or() {
    let m = msg(&[("a", Value::Int(1)), ("b", Value::Int(2))]);
    // a=1 OR (a=2 AND b=3): true.
    assert!(matches("a = 1 OR a = 2 AND b = 3", &m));
    // (a=2 AND b=3) OR a=1 written the other way round.
    assert!(matches("a = 2 AND b = 3 OR a = 1", &m));
    // Parentheses override: (a=1 OR a=2) AND b=3 is false.
    assert!(!matches("(a = 1 OR a = 2) AND b = 3", &m));
    // NOT applies to the comparison only: (NOT a=2) AND b=2.
    assert!(matches("NOT a = 2 AND b = 2", &m));
    // NOT a=1 OR b=2: (NOT a=1) OR b=2 is true.
    assert!(matches("NOT a = 1 OR b = 2", &m));
    assert!(!matches("NOT (a = 1 OR b = 2)", &m));
    assert!(matches("NOT NOT a = 1", &m));
}

#[test]
fn keywords_are_case_insensitive() {
    let m = msg(&[("a", Value::Int(1)), ("s", s("x"))]);
    assert!(matches("a = 1 and not a = 2 or false = true", &m));
    assert!(matches(
        "s like 'x' AnD s In ('x') aNd s is not null AND exists(s)",
        &m
    ));
}

#[test]
fn is_null_and_is_not_null() {
    let m = msg(&[("From", s("storefront"))]);
    assert!(matches("From IS NOT NULL", &m));
    assert!(!matches("From IS NULL", &m));
    assert!(matches("Other IS NULL", &m));
    assert!(!matches("Other IS NOT NULL", &m));
    assert!(matches("NULL IS NULL", &m));
    assert!(matches("(From + 'x') IS NOT NULL", &m));
    assert!(
        matches("(Other + 'x') IS NULL", &m),
        "arithmetic on NULL is NULL"
    );
}

#[test]
fn in_and_not_in() {
    let m = msg(&[("t", s("b")), ("n", Value::Int(3))]);
    assert!(matches("t IN ('a', 'b', 'c')", &m));
    assert!(!matches("t IN ('a', 'c')", &m));
    assert!(matches("t NOT IN ('a', 'c')", &m));
    assert!(!matches("t NOT IN ('a', 'b')", &m));
    assert!(matches("t IN ('b')", &m));
    assert!(matches("n IN (1, 2.0, 3)", &m));
    assert!(matches("n IN (1 + 2)", &m));
    // A missing value is unknown either way.
    assert!(!matches("missing IN ('a')", &m));
    assert!(!matches("missing NOT IN ('a')", &m));
    // NULL in the list: found is TRUE, not found is unknown.
    assert!(matches("t IN (NULL, 'b')", &m));
    assert!(!matches("t NOT IN (NULL, 'a')", &m));
}

#[test]
fn like_with_wildcards() {
    let m = msg(&[("e", s("OrderPlaced"))]);
    assert!(matches("e LIKE 'Order%'", &m));
    assert!(matches("e LIKE '%Placed'", &m));
    assert!(matches("e LIKE '%der%'", &m));
    assert!(matches("e LIKE 'Order_laced'", &m));
    assert!(!matches("e LIKE 'order%'", &m), "case-sensitive");
    assert!(!matches("e LIKE 'Order'", &m), "whole string");
    assert!(matches("e NOT LIKE 'Invoice%'", &m));
    assert!(!matches("e NOT LIKE 'Order%'", &m));
    assert!(!matches("missing LIKE '%'", &m));
    assert!(!matches("missing NOT LIKE '%'", &m));
}

#[test]
fn operands_fail_the_same_whatever_the_other_operands_types() {
    // Found by the property tests: a computed pattern used to be skipped
    // when the value was not a string, hiding its error.
    let m = msg(&[("flag", Value::Bool(false)), ("z", Value::Int(0))]);
    assert!(matches!(
        eval_error("flag LIKE flag + ''", &m),
        EvalError::ArithmeticType { .. }
    ));
    assert!(matches!(
        eval_error("missing IN (1 / z)", &m),
        EvalError::DivisionByZero { .. }
    ));
    // But IN stops at the first match, like OR.
    assert!(matches("z IN (0, 1 / z)", &m));
}

#[test]
fn like_on_a_number_is_unknown() {
    let m = msg(&[("n", Value::Int(10))]);
    assert!(!matches("n LIKE '1%'", &m));
    assert!(!matches("n NOT LIKE '1%'", &m));
}

#[test]
fn like_escape_makes_wildcards_literal() {
    let m = msg(&[("p", s("ABC%")), ("q", s("ABCD")), ("u", s("a_b"))]);
    assert!(matches(r"p LIKE 'ABC\%' ESCAPE '\'", &m));
    assert!(!matches(r"q LIKE 'ABC\%' ESCAPE '\'", &m));
    assert!(matches("u LIKE 'a!_b' ESCAPE '!'", &m));
    assert!(matches("u LIKE 'a!_%' ESCAPE '!'", &m));
    assert!(matches("p LIKE 'ABC%%'", &m));
}

#[test]
fn like_with_a_computed_pattern_and_escape() {
    let m = msg(&[
        ("v", s("a%c")),
        ("pat", s("a!%c")),
        ("esc", s("!")),
        ("bad", s("!!")),
        ("prefix", s("a")),
    ]);
    assert!(matches("v LIKE pat ESCAPE esc", &m));
    assert!(matches("v LIKE prefix + '%'", &m));
    assert!(!matches("v LIKE missing", &m));
    assert!(!matches("v LIKE pat ESCAPE missing", &m));
    assert!(matches!(
        eval_error("v LIKE pat ESCAPE bad", &m),
        EvalError::InvalidEscape { .. }
    ));
    assert!(matches!(
        eval_error("v LIKE 'a' + esc ESCAPE esc", &m),
        EvalError::DanglingEscape { .. }
    ));
}

#[test]
fn exists_tests_presence_only() {
    let m = msg(&[("From", s("")), ("Flag", Value::Bool(false))]);
    assert!(matches("EXISTS(From)", &m));
    assert!(matches("EXISTS(Flag)", &m));
    assert!(matches("EXISTS (user.From)", &m));
    assert!(!matches("EXISTS(To)", &m));
    assert!(matches("NOT EXISTS(To)", &m));
    assert!(!matches("NOT EXISTS(From)", &m));
}

#[test]
fn scoped_and_unqualified_names() {
    let mut m = msg(&[
        ("To", s("user-to")),
        ("my prop", Value::Int(1)),
        ("In", Value::Int(2)),
    ]);
    m.insert_system("To", "sys-to").unwrap();
    m.insert_system("MessageId", "m-1").unwrap();
    assert!(matches("To = 'user-to'", &m));
    assert!(matches("user.To = 'user-to'", &m));
    assert!(matches("USER.To = 'user-to'", &m));
    assert!(matches("sys.To = 'sys-to'", &m));
    assert!(
        matches("SYS.to = 'sys-to'", &m),
        "system names are case-insensitive"
    );
    assert!(matches("sys.messageid = 'm-1'", &m));
    assert!(matches("[my prop] = 1", &m));
    assert!(matches("user.[my prop] = 1", &m));
    assert!(matches("\"my prop\" = 1", &m));
    assert!(
        matches("[In] = 2", &m),
        "a keyword is a name when delimited"
    );
    assert!(matches("user.In = 2", &m), "or when scoped");
    assert!(matches("sys.CorrelationId IS NULL", &m));
}

#[test]
fn label_and_subject_are_one_system_property() {
    let mut m = PropertyBag::new();
    m.insert_system("Subject", "hello").unwrap();
    assert!(matches("sys.Label = 'hello'", &m));
    assert!(matches("sys.Subject = 'hello'", &m));
}

#[test]
fn double_quotes_delimit_a_name_not_a_string() {
    let m = msg(&[("To", s("billing")), ("billing", s("billing"))]);
    // As in T-SQL: `"billing"` is the property called billing.
    assert!(matches("To = \"billing\"", &m));
    let only_to = msg(&[("To", s("billing"))]);
    assert!(!matches("To = \"billing\"", &only_to));
    assert!(matches("To = 'billing'", &only_to));
}

#[test]
fn delimited_names_escape_their_closing_character() {
    let m = msg(&[("a]b", Value::Int(1)), ("say \"hi\"", Value::Int(2))]);
    assert!(matches("[a]]b] = 1", &m));
    assert!(matches("\"say \"\"hi\"\"\" = 2", &m));
}

#[test]
fn string_literals_double_their_quotes() {
    let m = msg(&[("name", s("O'Brien")), ("semi", s("a;b"))]);
    assert!(matches("name = 'O''Brien'", &m));
    assert!(matches("semi = 'a;b'", &m));
    assert!(matches("'' = ''", &m));
    assert!(matches("name LIKE '%''%'", &m));
}

#[test]
fn arithmetic_follows_usual_precedence() {
    let m = msg(&[("n", Value::Int(7)), ("f", Value::Float(0.5))]);
    assert!(matches("n + 1 = 8", &m));
    assert!(matches("1 + 2 * 3 = 7", &m));
    assert!(matches("(1 + 2) * 3 = 9", &m));
    assert!(matches("10 - 4 - 3 = 3", &m), "left-associative");
    assert!(matches("n / 2 = 3", &m), "integer division truncates");
    assert!(matches("-7 / 2 = -3", &m), "towards zero");
    assert!(matches("n % 4 = 3", &m));
    assert!(matches("n * f = 3.5", &m), "int with float is float");
    assert!(matches("-n = -7", &m));
    assert!(matches("- (n) = -7", &m));
    assert!(matches("+n = 7", &m));
    assert!(matches("+(n) = +7", &m));
    assert!(matches("2 - -3 = 5", &m));
    assert!(
        matches("1.0 / 0 > 1e308", &m),
        "float division by zero is infinity"
    );
    assert!(
        matches("-9223372036854775808 < 0", &m),
        "i64::MIN is a literal"
    );
    assert!(matches("'a' + 'b' = 'ab'", &m), "+ joins strings");
    assert!(!matches("missing + 1 = 1", &m));
}

#[test]
fn arithmetic_errors_are_evaluation_errors() {
    let m = msg(&[
        ("n", Value::Int(i64::MAX)),
        ("z", Value::Int(0)),
        ("s", s("x")),
    ]);
    assert!(matches!(
        eval_error("n + 1 = 0", &m),
        EvalError::Overflow { op: "+", .. }
    ));
    assert!(matches!(
        eval_error("n * 2 = 0", &m),
        EvalError::Overflow { op: "*", .. }
    ));
    assert!(matches!(
        eval_error("-9223372036854775808 / -1 = 0", &m),
        EvalError::Overflow { op: "/", .. }
    ));
    assert!(matches!(
        eval_error("-(-9223372036854775808) = 0", &m),
        EvalError::Overflow { op: "-", .. }
    ));
    assert!(matches!(
        eval_error("1 / z = 0", &m),
        EvalError::DivisionByZero { op: "/", left: 1 }
    ));
    assert!(matches!(
        eval_error("1 % z = 0", &m),
        EvalError::DivisionByZero { op: "%", left: 1 }
    ));
    let err = eval_error("s + 1 = 0", &m);
    assert_eq!(
        err.to_string(),
        "operator `+` cannot be applied to string and int"
    );
    assert!(matches!(
        eval_error("s * s = 0", &m),
        EvalError::ArithmeticType { .. }
    ));
    assert!(matches!(
        eval_error("-s = 0", &m),
        EvalError::UnaryType {
            op: "-",
            operand: "string"
        }
    ));
    assert_eq!(
        eval_error("+s = 'x'", &m).to_string(),
        "unary `+` cannot be applied to string"
    );
    assert!(matches!(
        eval_error("TRUE + 1 = 0", &m),
        EvalError::ArithmeticType { .. }
    ));
}

#[test]
fn and_stops_at_the_first_false_and_or_at_the_first_true() {
    let m = msg(&[("z", Value::Int(0))]);
    assert!(!matches("1 = 0 AND 1 / z = 1", &m));
    assert!(matches("1 = 1 OR 1 / z = 1", &m));
    assert!(matches!(
        eval_error("1 = 1 AND 1 / z = 1", &m),
        EvalError::DivisionByZero { .. }
    ));
}

#[test]
fn newid_in_a_filter_is_a_fresh_string() {
    let m = PropertyBag::new();
    assert!(matches("newid() IS NOT NULL", &m));
    assert!(matches(
        "NEWID() LIKE '________-____-7___-____-____________'",
        &m
    ));
    assert!(!matches("newid() = newid()", &m));
}

#[test]
fn whitespace_and_newlines_are_free() {
    let m = msg(&[("a", Value::Int(1))]);
    assert!(matches("\n\ta\n=\r\n1\n", &m));
    assert!(
        matches("a=1AND(a=1)", &m),
        "a letter may follow a number directly, as in T-SQL"
    );
    assert!(matches("(a)=(1)", &m));
}

#[test]
fn filter_text_is_kept_exactly_and_canonical_form_normalises() {
    let text = "user.To='billing'  and From is null";
    let filter = SqlFilter::parse(text).unwrap();
    assert_eq!(filter.text(), text);
    assert_eq!(filter.to_string(), text);
    assert_eq!(
        filter.canonical(),
        "user.To = 'billing' AND user.From IS NULL"
    );
    assert_eq!(
        SqlFilter::parse("NOT (a = 1 OR (b = 2 AND c != 3)) AND [x y] IN (1, -2.5) ")
            .unwrap()
            .canonical(),
        "NOT (user.a = 1 OR b = 2 AND user.c <> 3) AND user.[x y] IN (1, -2.5)"
            .replace("OR b", "OR user.b")
    );
    assert_eq!(
        SqlFilter::parse("a - (b - c) = 1").unwrap().canonical(),
        "user.a - (user.b - user.c) = 1"
    );
    assert_eq!(
        SqlFilter::parse("(a - b) - c = 1").unwrap().canonical(),
        "user.a - user.b - user.c = 1"
    );
}

#[test]
fn filters_compare_by_text() {
    assert_eq!(
        SqlFilter::parse("a = 1").unwrap(),
        SqlFilter::parse("a = 1").unwrap()
    );
    assert_ne!(
        SqlFilter::parse("a = 1").unwrap(),
        SqlFilter::parse("a=1").unwrap()
    );
}
