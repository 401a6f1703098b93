//! [`SqlRuleAction`]: the `SET`/`REMOVE` statements a matching rule applies
//! to its copy of the message.

use std::fmt;
use std::str::FromStr;

use crate::ast::{Expr, Scope, Statement};
use crate::error::{ActionError, ParseError};
use crate::eval;
use crate::parser;
use crate::render::{PropertyText, StatementsText};
use crate::value::{MessagePropertiesMut, Value};

/// A parsed Service Bus SQL rule action.
///
/// Statements run in order and each sees the effect of the ones before it
/// (`SET user.A = 1; SET user.B = user.A + 1` sets B to 2). A `SET` whose
/// value is NULL (a missing property, say) removes a user property, since a
/// message property cannot hold NULL.
///
/// ```
/// use nimbus_sqlfilter::{PropertyBag, SqlRuleAction, Value};
///
/// let action = SqlRuleAction::parse("SET user.To = 'billing'; SET user.From = 'Retry'")?;
/// let mut msg = PropertyBag::new();
/// msg.insert_user("To", "Retry");
/// action.apply(&mut msg)?;
/// assert_eq!(msg.user_value("To"), Some(&Value::from("billing")));
/// assert_eq!(msg.user_value("From"), Some(&Value::from("Retry")));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct SqlRuleAction {
    text: String,
    statements: Vec<Statement>,
}

impl SqlRuleAction {
    /// Parses an action such as `SET user.To = 'billing'; SET user.From = 'Retry'`.
    ///
    /// Each statement may end with `;` (optional, as Service Bus documents;
    /// a trailing `;` is fine, and a `;` inside a string literal is part of
    /// the string). `REMOVE sys.X` is rejected: system properties can only
    /// be replaced.
    ///
    /// # Errors
    ///
    /// A [`ParseError`] with the position of the problem; also when there
    /// are more than [`MAX_ACTION_STATEMENTS`](crate::MAX_ACTION_STATEMENTS)
    /// statements.
    pub fn parse(text: &str) -> Result<SqlRuleAction, ParseError> {
        Ok(SqlRuleAction {
            text: text.to_owned(),
            statements: parser::parse_action(text)?,
        })
    }

    /// Applies the statements to `msg`, in order.
    ///
    /// # Errors
    ///
    /// An [`ActionError`] naming the statement that failed. Statements
    /// before it have been applied, so a caller that must not deliver a
    /// half-modified copy should apply the action to a scratch copy first.
    pub fn apply(&self, msg: &mut dyn MessagePropertiesMut) -> Result<(), ActionError> {
        for statement in &self.statements {
            match statement {
                Statement::Set { target, value } => {
                    // Evaluate against the message as it is now, then let go
                    // of the borrow before writing.
                    let current: &dyn crate::MessageProperties = &*msg;
                    let value = eval::expr(value, current)
                        .map_err(|source| ActionError::Eval {
                            property: PropertyText(target).to_string(),
                            source,
                        })?
                        .into_value()
                        .map(Value::into_owned);
                    match (target.scope, value) {
                        (Scope::User, Some(value)) => msg.set_user(&target.name, value),
                        (Scope::User, None) => msg.remove_user(&target.name),
                        (Scope::System, Some(value)) => msg.set_system(&target.name, value)?,
                        (Scope::System, None) => {
                            return Err(ActionError::NullSystemProperty {
                                name: target.name.clone(),
                            });
                        }
                    }
                }
                Statement::Remove(target) => msg.remove_user(&target.name),
            }
        }
        Ok(())
    }

    /// Whether [`SqlRuleAction::apply`] cannot fail, whatever the message:
    /// every statement removes a user property or sets one to a literal or
    /// `newid()`. A router may then apply it to the message itself rather
    /// than to a scratch copy.
    pub fn cannot_fail(&self) -> bool {
        self.statements.iter().all(|statement| match statement {
            Statement::Remove(_) => true,
            Statement::Set { target, value } => {
                target.scope == Scope::User && matches!(value, Expr::Literal(_) | Expr::NewId)
            }
        })
    }

    /// The exact text the action was parsed from.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The action in canonical form (see [`SqlFilter::canonical`](crate::SqlFilter::canonical)).
    pub fn canonical(&self) -> String {
        StatementsText(&self.statements).to_string()
    }
}

impl fmt::Display for SqlRuleAction {
    /// The original text.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl FromStr for SqlRuleAction {
    type Err = ParseError;

    fn from_str(text: &str) -> Result<SqlRuleAction, ParseError> {
        SqlRuleAction::parse(text)
    }
}

impl PartialEq for SqlRuleAction {
    /// Actions are equal when their texts are.
    fn eq(&self, other: &Self) -> bool {
        self.text == other.text
    }
}

impl Eq for SqlRuleAction {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_literal_and_newid_sets_and_removes_of_user_properties_cannot_fail() {
        for text in [
            "SET user.To = 'billing'; SET user.EventId = newid(); SET user.N = 1",
            "SET user.X = NULL; REMOVE user.Tmp",
        ] {
            assert!(SqlRuleAction::parse(text).unwrap().cannot_fail(), "{text}");
        }
        for text in [
            // Arithmetic on a string property fails.
            "SET user.N = user.Text + 1",
            "SET user.N = -user.M",
            // A system property may refuse the value or its type.
            "SET sys.To = 'billing'",
            "SET user.To = 'billing'; SET sys.Label = 1",
        ] {
            assert!(!SqlRuleAction::parse(text).unwrap().cannot_fail(), "{text}");
        }
    }
}
