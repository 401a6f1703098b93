//! Malformed filters and actions are rejected when the rule is created, with
//! the position of the problem and what was expected there.

#![allow(clippy::unwrap_used, reason = "tests")]

use nimbus_sqlfilter::{
    MAX_ACTION_STATEMENTS, MAX_EXPRESSION_CHARS, MAX_NESTING_DEPTH, ParseError, Position,
    SqlFilter, SqlRuleAction,
};

fn filter_error(text: &str) -> ParseError {
    match SqlFilter::parse(text) {
        Ok(_) => panic!("`{text}` should not parse"),
        Err(e) => e,
    }
}

fn action_error(text: &str) -> ParseError {
    match SqlRuleAction::parse(text) {
        Ok(_) => panic!("`{text}` should not parse"),
        Err(e) => e,
    }
}

/// Asserts the error is at byte `offset` and its message contains `needle`.
fn assert_error(error: &ParseError, offset: usize, needle: &str) {
    assert_eq!(error.position.offset, offset, "offset of: {error}");
    assert!(error.message.contains(needle), "`{needle}` not in: {error}");
}

#[test]
fn display_shows_message_line_column_and_offset() {
    let error = filter_error("user.To = ");
    assert_eq!(
        error.to_string(),
        "expected a value (a literal, a property or a parenthesised expression), found end of input at line 1, column 11 (byte 10)"
    );
    assert_eq!(
        error.position,
        Position {
            offset: 10,
            line: 1,
            column: 11
        }
    );
}

#[test]
fn positions_count_lines_and_characters() {
    let error = filter_error("a = 1\n  AND é = @");
    assert_eq!(error.position.line, 2);
    assert_eq!(error.position.column, 11, "é is one column");
    assert_eq!(error.position.offset, 17, "é is two bytes");
    assert!(error.message.contains("unexpected character `@`"));
}

#[test]
fn empty_filter() {
    assert_error(&filter_error(""), 0, "found end of input");
    assert_error(&filter_error("   "), 3, "found end of input");
}

#[test]
fn missing_right_operand() {
    assert_error(&filter_error("a = 1 AND"), 9, "expected a value");
    assert_error(&filter_error("a ="), 3, "found end of input");
    assert_error(
        &filter_error("a = 1 OR OR b = 1"),
        9,
        "found the keyword OR",
    );
}

#[test]
fn unbalanced_parentheses() {
    assert_error(&filter_error("(a = 1"), 6, "expected `)` to close the `(`");
    assert_error(&filter_error("a = 1)"), 5, "found `)`");
    assert_error(&filter_error("((a = 1) AND (b = 2)"), 20, "`)`");
}

#[test]
fn unterminated_literals_and_identifiers() {
    assert_error(&filter_error("a = 'abc"), 4, "unterminated string literal");
    assert_error(
        &filter_error("a = 'it''s"),
        4,
        "unterminated string literal",
    );
    assert_error(
        &filter_error("[my prop = 1"),
        0,
        "unterminated delimited identifier",
    );
    assert_error(
        &filter_error("\"my prop = 1"),
        0,
        "unterminated quoted identifier",
    );
    assert_error(&filter_error("[] = 1"), 0, "empty identifier");
}

#[test]
fn unexpected_characters() {
    assert_error(&filter_error("a == 1"), 3, "expected a value");
    assert_error(
        &filter_error("a = 1 && b = 2"),
        6,
        "unexpected character `&`",
    );
    assert_error(&filter_error("a ! 1"), 2, "unexpected character `!`");
    assert_error(&filter_error("a = #"), 4, "unexpected character `#`");
}

#[test]
fn malformed_numbers() {
    assert_error(
        &filter_error("a = 1e"),
        5,
        "expected digits after the exponent",
    );
    assert_error(&filter_error("a = 1.2.3"), 7, "malformed number");
    assert_error(&filter_error("a = 9223372036854775808"), 4, "out of range");
    assert_error(&filter_error("a = -9223372036854775809"), 4, "out of range");
    assert_error(&filter_error("a = 1e999"), 4, "out of range for a float");
}

#[test]
fn value_where_a_condition_is_needed() {
    assert_error(&filter_error("a"), 0, "expected a condition");
    assert_error(&filter_error("1 + 1"), 0, "expected a condition");
    assert_error(&filter_error("a = 1 AND b"), 10, "expected a condition");
    assert_error(&filter_error("NOT a"), 4, "expected a condition");
    assert_error(&filter_error("(a + 1)"), 0, "expected a condition");
    assert_error(&filter_error("TRUE"), 0, "expected a condition");
}

#[test]
fn condition_where_a_value_is_needed() {
    assert_error(
        &filter_error("(a = 1) = TRUE"),
        0,
        "expected a value, found a condition",
    );
    assert_error(&filter_error("a = (b = 1)"), 4, "expected a value");
    assert_error(&filter_error("(a = 1) + 1 = 2"), 0, "expected a value");
    assert_error(&filter_error("EXISTS(a) IN (1)"), 0, "expected a value");
}

#[test]
fn chained_comparisons() {
    assert_error(&filter_error("1 < a < 3"), 6, "cannot be chained");
}

#[test]
fn keyword_used_as_a_name() {
    assert_error(
        &filter_error("In = 1"),
        0,
        "found the keyword IN; write [In]",
    );
    assert_error(&filter_error("a = like"), 4, "keyword LIKE");
}

#[test]
fn is_without_null() {
    assert_error(&filter_error("a IS 1"), 5, "expected NULL after IS");
    assert_error(&filter_error("a IS NOT 1"), 9, "expected NULL after IS NOT");
}

#[test]
fn malformed_in_lists() {
    assert_error(&filter_error("a IN ()"), 6, "at least one value");
    assert_error(
        &filter_error("a IN 'x'"),
        5,
        "expected `(` to open the IN list",
    );
    assert_error(&filter_error("a IN ('x' 'y')"), 10, "or `,` in the IN list");
    assert_error(&filter_error("a IN ('x',)"), 10, "expected a value");
    assert_error(
        &filter_error("a NOT 'x'"),
        6,
        "expected IN or LIKE after NOT",
    );
}

#[test]
fn malformed_like() {
    assert_error(&filter_error("a LIKE"), 6, "expected a value");
    assert_error(&filter_error("a LIKE 5"), 7, "expected a string pattern");
    assert_error(
        &filter_error("a LIKE TRUE ESCAPE b"),
        7,
        "expected a string pattern after LIKE, found a boolean",
    );
    assert_error(&filter_error("a LIKE 'x' ESCAPE"), 17, "expected a value");
    assert_error(
        &filter_error("a LIKE 'x' ESCAPE 'ab'"),
        18,
        "one-character string",
    );
    assert_error(
        &filter_error("a LIKE 'x' ESCAPE ''"),
        18,
        "one-character string",
    );
    assert_error(&filter_error("a LIKE 'x' ESCAPE 1"), 18, "found an integer");
    assert_error(
        &filter_error("a LIKE 'x!' ESCAPE '!'"),
        7,
        "ends with its escape character",
    );
}

#[test]
fn malformed_exists() {
    assert_error(&filter_error("EXISTS a"), 7, "expected `(` after EXISTS");
    assert_error(&filter_error("EXISTS(a"), 8, "to close EXISTS(");
    assert_error(&filter_error("EXISTS('a')"), 7, "expected a property name");
    assert_error(&filter_error("EXISTS()"), 7, "expected a property name");
}

#[test]
fn unknown_scope_system_property_and_function() {
    assert_error(
        &filter_error("app.x = 1"),
        0,
        "unknown property scope `app`",
    );
    let error = filter_error("sys.Colour = 'red'");
    assert_error(&error, 4, "unknown system property `Colour`");
    assert!(
        error.message.contains("MessageId"),
        "lists the known ones: {error}"
    );
    assert_error(&filter_error("user.a.b = 1"), 6, "one scope and one name");
    assert_error(
        &filter_error("user. = 1"),
        6,
        "expected a property name after `user.`",
    );
    assert_error(
        &filter_error("upper(a) = 'X'"),
        0,
        "unknown function `upper`",
    );
    assert_error(
        &filter_error("newid(1) = 'X'"),
        6,
        "newid takes no arguments",
    );
}

#[test]
fn too_long_text_is_rejected_at_the_limit() {
    let at_limit = format!("a = '{}'", "x".repeat(MAX_EXPRESSION_CHARS - 6));
    assert_eq!(at_limit.chars().count(), MAX_EXPRESSION_CHARS);
    SqlFilter::parse(&at_limit).expect("exactly at the limit is fine");
    let over = format!("a = '{}'", "x".repeat(MAX_EXPRESSION_CHARS - 5));
    assert_error(
        &filter_error(&over),
        MAX_EXPRESSION_CHARS,
        "expression too long: 1025 characters",
    );
    // Characters, not bytes, are counted.
    let multibyte = format!("a = '{}'", "é".repeat(MAX_EXPRESSION_CHARS - 6));
    SqlFilter::parse(&multibyte).expect("1024 characters in 2042 bytes is fine");
    assert_error(
        &action_error(&format!("SET a = '{}'", "x".repeat(2000))),
        1024,
        "too long",
    );
}

#[test]
fn too_deep_nesting_is_rejected() {
    let ok = format!(
        "{}a = 1{}",
        "(".repeat(MAX_NESTING_DEPTH),
        ")".repeat(MAX_NESTING_DEPTH)
    );
    SqlFilter::parse(&ok).expect("at the limit is fine");
    let deep = format!(
        "{}a = 1{}",
        "(".repeat(MAX_NESTING_DEPTH + 1),
        ")".repeat(MAX_NESTING_DEPTH + 1)
    );
    assert_error(&filter_error(&deep), MAX_NESTING_DEPTH, "nested too deeply");
    let nots = format!("{}a = 1", "NOT ".repeat(MAX_NESTING_DEPTH + 1));
    assert!(filter_error(&nots).message.contains("nested too deeply"));
    let minuses = format!("{}a = 1", "- ".repeat(MAX_NESTING_DEPTH + 1));
    assert!(filter_error(&minuses).message.contains("nested too deeply"));
    let sum = format!("a{} = 1", " + a".repeat(MAX_NESTING_DEPTH + 1));
    assert!(
        filter_error(&sum).message.contains("nested too deeply"),
        "a long left-deep chain is deep too"
    );
}

#[test]
fn long_and_chains_are_flat_not_deep() {
    let chain = vec!["a = 1"; 100].join(" AND ");
    assert!(chain.len() < MAX_EXPRESSION_CHARS);
    SqlFilter::parse(&chain).expect("a flat chain of 100 conditions is fine");
}

#[test]
fn action_errors() {
    assert_error(
        &action_error(""),
        0,
        "expected SET or REMOVE, found end of input",
    );
    assert_error(&action_error(";"), 0, "expected SET or REMOVE");
    assert_error(&action_error("SET a = 1;;"), 10, "expected SET or REMOVE");
    assert_error(
        &action_error("SET a = 1 x = 2"),
        10,
        "expected `;`, SET, REMOVE or the end of the action",
    );
    assert_error(
        &action_error("SET a 1"),
        6,
        "expected `=` after the property in SET",
    );
    assert_error(&action_error("SET a ="), 7, "expected a value");
    assert_error(&action_error("SET = 1"), 4, "expected a property name");
    assert_error(
        &action_error("SET a = b = 1"),
        10,
        "expected `;`, SET, REMOVE",
    );
    assert_error(
        &action_error("SET a = (b = 1)"),
        8,
        "expected a value, found a condition",
    );
    assert_error(
        &action_error("UPDATE a = 1"),
        0,
        "expected SET or REMOVE, found `UPDATE`",
    );
    assert_error(&action_error("REMOVE sys.To"), 7, "cannot be removed");
    assert_error(
        &action_error("SET sys.Nope = 1"),
        8,
        "unknown system property",
    );
    assert_error(
        &action_error("SET a = 'x;"),
        8,
        "unterminated string literal",
    );
}

#[test]
fn too_many_action_statements() {
    let ok = vec!["SET a = 1"; MAX_ACTION_STATEMENTS].join("; ");
    SqlRuleAction::parse(&ok).expect("at the limit is fine");
    let over = vec!["SET a = 1"; MAX_ACTION_STATEMENTS + 1].join("; ");
    let error = action_error(&over);
    assert!(error.message.contains("too many statements"), "{error}");
    assert_eq!(
        error.position.offset,
        MAX_ACTION_STATEMENTS * "SET a = 1; ".len()
    );
}

#[test]
fn excerpt_shows_the_line_with_a_caret() {
    let text = "user.To = 'billing' AN From IS NULL";
    let error = filter_error(text);
    assert_eq!(
        error.excerpt(text),
        "user.To = 'billing' AN From IS NULL\n                    ^ expected an operator, AND, OR or the end of the filter, found `AN`"
    );
}
