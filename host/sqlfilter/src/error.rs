//! The three error types: one per operation (parse, evaluate, apply).

use std::fmt;

/// Where in the expression text an error is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Position {
    /// Byte offset into the text, 0-based.
    pub offset: usize,
    /// Line, 1-based.
    pub line: usize,
    /// Column in characters (Unicode scalar values), 1-based.
    pub column: usize,
}

impl Position {
    /// The position of byte `offset` in `text`. An offset past the end or
    /// inside a character is clamped to the nearest character start before
    /// it, so this never panics.
    pub fn in_text(text: &str, offset: usize) -> Position {
        let mut offset = offset.min(text.len());
        while !text.is_char_boundary(offset) {
            offset -= 1;
        }
        let before = &text[..offset];
        let line = before.matches('\n').count() + 1;
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        let column = before[line_start..].chars().count() + 1;
        Position {
            offset,
            line,
            column,
        }
    }
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "line {}, column {} (byte {})",
            self.line, self.column, self.offset
        )
    }
}

/// A filter or action text that is not valid: where, and what is wrong.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{message} at {position}")]
#[non_exhaustive]
pub struct ParseError {
    /// Where the problem is.
    pub position: Position,
    /// What was expected and what was found there.
    pub message: String,
}

impl ParseError {
    pub(crate) fn at(text: &str, offset: usize, message: impl Into<String>) -> ParseError {
        ParseError {
            position: Position::in_text(text, offset),
            message: message.into(),
        }
    }

    /// The line of `text` (the text that failed to parse) holding the error,
    /// with a caret under the error's column, for a terminal:
    ///
    /// ```text
    /// user.To = 'billing' AN From IS NULL
    ///                     ^ expected an operator, AND, OR or the end of the filter, found `AN`
    /// ```
    pub fn excerpt(&self, text: &str) -> String {
        let line = text
            .split('\n')
            .nth(self.position.line - 1)
            .unwrap_or_default()
            .trim_end_matches('\r');
        // Tabs keep their width so the caret lines up under them.
        let pad: String = line
            .chars()
            .take(self.position.column - 1)
            .map(|c| if c == '\t' { '\t' } else { ' ' })
            .collect();
        format!("{line}\n{pad}^ {}", self.message)
    }
}

/// Evaluating a well-formed expression against one message failed.
///
/// Service Bus treats this as a filter evaluation exception (a subscription
/// may dead-letter such messages); it is distinct from "does not match".
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum EvalError {
    /// Integer arithmetic overflowed `i64`.
    #[error("integer overflow in `{left} {op} {right}`")]
    Overflow {
        /// The operator.
        op: &'static str,
        /// The left operand.
        left: i64,
        /// The right operand.
        right: i64,
    },
    /// Integer division or remainder by zero.
    #[error("integer division by zero in `{left} {op} 0`")]
    DivisionByZero {
        /// The operator (`/` or `%`).
        op: &'static str,
        /// The left operand.
        left: i64,
    },
    /// An arithmetic operator applied to types it does not take.
    #[error("operator `{op}` cannot be applied to {left} and {right}")]
    ArithmeticType {
        /// The operator.
        op: &'static str,
        /// The left operand's type (`string`, `int`, ...).
        left: &'static str,
        /// The right operand's type.
        right: &'static str,
    },
    /// A sign (unary `-` or `+`) applied to a non-number.
    #[error("unary `{op}` cannot be applied to {operand}")]
    UnaryType {
        /// The sign.
        op: &'static str,
        /// The operand's type.
        operand: &'static str,
    },
    /// A `LIKE ... ESCAPE` character that is not a one-character string.
    #[error("LIKE escape must be a string of exactly one character, found {found}")]
    InvalidEscape {
        /// What the escape expression evaluated to.
        found: String,
    },
    /// A LIKE pattern that ends in its escape character.
    #[error("LIKE pattern `{pattern}` ends with its escape character")]
    DanglingEscape {
        /// The pattern.
        pattern: String,
    },
}

/// A rule action could not be applied to a message.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ActionError {
    /// Evaluating the value of a `SET` failed.
    #[error("SET {property}: {source}")]
    Eval {
        /// The property being set, as written (`user.X` or `sys.X`).
        property: String,
        /// Why evaluation failed.
        source: EvalError,
    },
    /// A system property cannot be set to NULL (it can only be replaced).
    #[error("SET sys.{name}: a system property cannot be set to NULL")]
    NullSystemProperty {
        /// The system property.
        name: String,
    },
    /// The broker refuses to set this system property (it stamps it itself).
    #[error("SET sys.{name}: {reason}")]
    SystemPropertyNotSettable {
        /// The system property.
        name: String,
        /// Why (e.g. "the broker assigns it").
        reason: String,
    },
    /// The value has the wrong type for this system property.
    #[error("SET sys.{name}: expected a {expected} value, found {found}")]
    SystemPropertyType {
        /// The system property.
        name: String,
        /// The type the property holds.
        expected: &'static str,
        /// The type of the value given.
        found: &'static str,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn position_inside_a_character_moves_to_its_start() {
        let p = Position::in_text("aé", 2);
        assert_eq!((p.offset, p.line, p.column), (1, 1, 2));
    }

    #[test]
    fn position_past_the_end_is_clamped() {
        let p = Position::in_text("ab\ncd", 99);
        assert_eq!((p.offset, p.line, p.column), (5, 2, 3));
    }

    #[test]
    fn excerpt_points_at_the_error() {
        let text = "a = 1\n\tAND é = @";
        let error = ParseError::at(text, 17, "unexpected character `@`");
        assert_eq!(
            error.excerpt(text),
            "\tAND é = @\n\t         ^ unexpected character `@`"
        );
        let error = ParseError::at("a =", 3, "expected a value");
        assert_eq!(error.excerpt("a ="), "a =\n   ^ expected a value");
    }

    #[test]
    fn position_counts_lines() {
        let p = Position::in_text("a\n\nbc", 4);
        assert_eq!((p.line, p.column), (3, 2));
        assert_eq!(p.to_string(), "line 3, column 2 (byte 4)");
    }
}
