//! Azure Service Bus SQL filters and rule actions: parse once, evaluate on
//! every publish.
//!
//! The embedded broker (`nimbus-broker`) calls this crate for each
//! subscription rule: [`SqlFilter::parse`] when the rule is created (a
//! malformed filter is rejected there, with the position of the error),
//! [`SqlFilter::evaluate`] for every published message, and
//! [`SqlRuleAction::apply`] on each copy a matching rule with an action
//! yields. The crate knows nothing of how messages are stored: it reads and
//! writes properties through [`MessageProperties`] and
//! [`MessagePropertiesMut`], which the broker implements over its own
//! message type. It does no I/O and keeps no state between calls.
//!
//! Key decision: evaluation uses SQL three-valued logic, and a type mismatch
//! in a comparison (a string against a number, say) is *unknown*, like a
//! missing property, rather than an error: a filter matches only when it is
//! definitely TRUE, so one publisher's odd property types cannot make a
//! subscription fail. Only arithmetic that cannot be computed (overflow,
//! division by zero, adding a string to a number) is an [`EvalError`]. See
//! `docs/decisions/0030-sql-filter-semantics.md`.
//!
//! # Grammar
//!
//! As Microsoft documents it for Service Bus ("Subscription Rule SQL Filter
//! syntax", "SQL rule action syntax"); keywords are case-insensitive.
//!
//! | Construct | Example |
//! |---|---|
//! | comparison `= <> != < > <= >=` | `user.Priority >= 5` |
//! | `AND`, `OR`, `NOT`, parentheses (`NOT` binds tightest, then `AND`) | `NOT (a = 1 OR b = 2) AND c = 3` |
//! | `IS [NOT] NULL` | `user.From IS NULL` |
//! | `[NOT] IN (..)` | `user.To NOT IN ('billing', 'shipping')` |
//! | `[NOT] LIKE` with `%`, `_`, `ESCAPE` | `sys.Label LIKE 'order\_%' ESCAPE '\'` |
//! | `EXISTS(..)` | `NOT EXISTS(user.Skip)` |
//! | literals: string (`''` escapes), integer, float, `TRUE`, `FALSE`, `NULL` | `'O''Brien'`, `-12`, `2.5e-3` |
//! | arithmetic `+ - * / %`, unary `-`/`+` | `user.Quantity * 2 > 10` |
//! | names: `sys.X` (see [`SYSTEM_PROPERTIES`]), `user.X`, bare `X` (user), `[any name]`, `"any name"` | `[order id] = 7` |
//! | always-true / always-false | `1=1`, `1=0` |
//! | action statements, `;`-separated | `SET user.To = 'billing'; SET user.EventId = newid(); REMOVE user.Tmp` |
//!
//! Beware: as in T-SQL, double quotes delimit a *name*, not a string:
//! `To = "billing"` compares `To` with the property called `billing`.
//!
//! # Limits
//!
//! [`MAX_EXPRESSION_CHARS`], [`MAX_NESTING_DEPTH`] and
//! [`MAX_ACTION_STATEMENTS`] bound the work any input can cause; no input
//! panics (property-tested).

#![cfg_attr(test, allow(clippy::unwrap_used, reason = "tests"))]

pub(crate) mod action;
pub(crate) mod ast;
pub(crate) mod bag;
pub(crate) mod error;
pub(crate) mod eval;
pub(crate) mod filter;
pub(crate) mod lexer;
pub(crate) mod like;
pub(crate) mod parser;
#[cfg(test)]
mod proptests;
pub(crate) mod render;
pub(crate) mod value;

pub use action::SqlRuleAction;
pub use bag::PropertyBag;
pub use error::{ActionError, EvalError, ParseError, Position};
pub use filter::SqlFilter;
pub use value::{MessageProperties, MessagePropertiesMut, Value};

/// The longest filter or action text accepted, in characters.
///
/// Service Bus's own quota ("Size of SQL filters or actions": 1,024 for a
/// filter condition and for a rule action): a rule that works locally must
/// also be accepted by Azure.
pub const MAX_EXPRESSION_CHARS: usize = 1024;

/// The deepest nesting accepted: parentheses, `NOT` and signs inside each
/// other, and the height of the parsed tree (a comparison of two properties
/// is 2 high; `AND`/`OR` chains are flat, but `a + b + c` is a left-deep
/// tree). Bounds every recursion in parsing, evaluation and drop: at the
/// limit, parsing takes under 1 MiB of stack even in a debug build
/// (`tests/all/stack.rs`), so no filter can overflow a 2 MiB worker thread.
pub const MAX_NESTING_DEPTH: usize = 32;

/// The most `SET`/`REMOVE` statements one rule action may hold (Service
/// Bus's quota: "Maximum number of expressions per rule action: 32").
pub const MAX_ACTION_STATEMENTS: usize = 32;

/// The system properties a filter may name after `sys.`, in the spelling
/// passed to [`MessageProperties::system`].
///
/// Naming any other system property is a parse error: Service Bus documents
/// access to a non-existent system property as an error, and catching it
/// when the rule is created is kinder than at every publish.
pub const SYSTEM_PROPERTIES: &[&str] = &[
    "MessageId",
    "CorrelationId",
    "SessionId",
    "ReplyToSessionId",
    "To",
    "ReplyTo",
    "Label",
    "Subject",
    "ContentType",
    "PartitionKey",
    "ViaPartitionKey",
    "TimeToLive",
    "ScheduledEnqueueTimeUtc",
    "SequenceNumber",
    "EnqueuedSequenceNumber",
    "EnqueuedTimeUtc",
    "ExpiresAtUtc",
    "DeliveryCount",
    "LockedUntilUtc",
    "LockToken",
    "Size",
    "DeadLetterSource",
    "State",
];

// The broker shares parsed rules across tasks.
const _: () = {
    const fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<SqlFilter>();
    assert_send_sync::<SqlRuleAction>();
};
