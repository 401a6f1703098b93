//! [`SqlFilter`]: a subscription rule's condition.

use std::fmt;
use std::str::FromStr;

use crate::ast::{CompareOp, Expr, Literal, Predicate};
use crate::error::{EvalError, ParseError};
use crate::eval::{self, Truth};
use crate::parser;
use crate::render::PredicateText;
use crate::value::MessageProperties;

/// A parsed Service Bus SQL filter: the condition of a subscription rule.
///
/// Parse once when the rule is created, then [`evaluate`](Self::evaluate)
/// for every message; the filter is immutable and `Send + Sync`, so one
/// instance can serve every publisher.
///
/// ```
/// use nimbus_sqlfilter::{PropertyBag, SqlFilter};
///
/// let filter = SqlFilter::parse("user.EventTypeId = 'OrderPlaced' AND user.From IS NULL")?;
/// let mut msg = PropertyBag::new();
/// msg.insert_user("EventTypeId", "OrderPlaced");
/// assert!(filter.evaluate(&msg)?);
/// msg.insert_user("From", "storefront");
/// assert!(!filter.evaluate(&msg)?);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct SqlFilter {
    text: String,
    predicate: Predicate,
}

impl SqlFilter {
    /// Parses a filter expression such as `user.To = 'billing'`.
    ///
    /// # Errors
    ///
    /// A [`ParseError`] with the position of the problem and what was
    /// expected there: bad syntax, an unknown `sys.` property or function, a
    /// text longer than [`MAX_EXPRESSION_CHARS`](crate::MAX_EXPRESSION_CHARS)
    /// or nested deeper than [`MAX_NESTING_DEPTH`](crate::MAX_NESTING_DEPTH).
    pub fn parse(text: &str) -> Result<SqlFilter, ParseError> {
        Ok(SqlFilter {
            text: text.to_owned(),
            predicate: parser::parse_filter(text)?,
        })
    }

    /// Whether `msg` matches: `true` only when the filter is definitely TRUE
    /// (FALSE and unknown both mean no match).
    ///
    /// # Errors
    ///
    /// An [`EvalError`] when arithmetic in the filter cannot be computed for
    /// this message (overflow, division by zero, a string added to a
    /// number). Service Bus calls this a filter evaluation exception; it is
    /// not the same as "no match".
    pub fn evaluate(&self, msg: &dyn MessageProperties) -> Result<bool, EvalError> {
        Ok(eval::predicate(&self.predicate, msg)? == Truth::True)
    }

    /// The exact text the filter was parsed from (provisioning compares it).
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The filter in canonical form: keywords upper case, every property
    /// with its scope, minimal parentheses. Two filters with the same
    /// canonical text behave the same; parsing it gives the same filter.
    pub fn canonical(&self) -> String {
        PredicateText(&self.predicate).to_string()
    }

    /// Whether this is the always-true filter `1=1` (Service Bus's
    /// `TrueFilter`), however it is spaced.
    pub fn is_true_filter(&self) -> bool {
        let one = Expr::Literal(Literal::Int(1));
        matches!(&self.predicate, Predicate::Compare(CompareOp::Eq, l, r) if *l == one && *r == one)
    }
}

impl fmt::Display for SqlFilter {
    /// The original text.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl FromStr for SqlFilter {
    type Err = ParseError;

    fn from_str(text: &str) -> Result<SqlFilter, ParseError> {
        SqlFilter::parse(text)
    }
}

impl PartialEq for SqlFilter {
    /// Filters are equal when their texts are: provisioning treats any text
    /// change as a rule change.
    fn eq(&self, other: &Self) -> bool {
        self.text == other.text
    }
}

impl Eq for SqlFilter {}

#[cfg(test)]
impl SqlFilter {
    pub(crate) fn predicate(&self) -> &Predicate {
        &self.predicate
    }
}
