//! Evaluation of parsed filters and actions against one message.
//!
//! SQL three-valued logic: a condition is TRUE, FALSE or unknown, and a
//! value may be NULL (a missing property, the NULL literal, or arithmetic on
//! either). Comparisons involving NULL, or values of types that do not
//! compare (a string against a number, booleans with `<`), are unknown.
//! Strings compare ordinally, case-sensitively. Numbers compare across
//! integer and float as C# does (the integer is converted to a double).
//! `AND` and `OR` run left to right and stop at the first FALSE / TRUE.
//!
//! Reads borrow from the message and the parsed filter, so evaluating a
//! typical filter allocates nothing.

use std::borrow::Cow;
use std::cmp::Ordering;

use crate::ast::{ArithOp, CompareOp, Expr, LikePattern, Literal, Predicate, Property, Scope};
use crate::error::EvalError;
use crate::like;
use crate::value::{MessageProperties, Value};

/// The result of a condition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Truth {
    True,
    False,
    Unknown,
}

impl Truth {
    fn not(self) -> Truth {
        match self {
            Truth::True => Truth::False,
            Truth::False => Truth::True,
            Truth::Unknown => Truth::Unknown,
        }
    }

    fn from_bool(b: bool) -> Truth {
        if b { Truth::True } else { Truth::False }
    }
}

/// A value during evaluation: a [`Value`] or NULL.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Val<'a> {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(Cow<'a, str>),
}

impl<'a> Val<'a> {
    fn type_name(&self) -> &'static str {
        match self {
            Val::Null => "NULL",
            Val::Bool(_) => "bool",
            Val::Int(_) => "int",
            Val::Float(_) => "float",
            Val::Str(_) => "string",
        }
    }

    /// The value to store, or `None` for NULL.
    pub(crate) fn into_value(self) -> Option<Value<'a>> {
        match self {
            Val::Null => None,
            Val::Bool(b) => Some(Value::Bool(b)),
            Val::Int(i) => Some(Value::Int(i)),
            Val::Float(x) => Some(Value::Float(x)),
            Val::Str(s) => Some(Value::String(s)),
        }
    }
}

impl<'a> From<Value<'a>> for Val<'a> {
    fn from(value: Value<'a>) -> Self {
        match value {
            Value::String(s) => Val::Str(s),
            Value::Int(i) => Val::Int(i),
            Value::Float(x) => Val::Float(x),
            Value::Bool(b) => Val::Bool(b),
        }
    }
}

/// Looks a property up on the message; absent is NULL.
pub(crate) fn read_property<'a>(
    property: &Property,
    msg: &'a dyn MessageProperties,
) -> Option<Value<'a>> {
    match property.scope {
        Scope::System => msg.system(&property.name),
        Scope::User => msg.user(&property.name),
    }
}

pub(crate) fn predicate(p: &Predicate, msg: &dyn MessageProperties) -> Result<Truth, EvalError> {
    Ok(match p {
        Predicate::And(items) => {
            let mut result = Truth::True;
            for item in items {
                match predicate(item, msg)? {
                    Truth::False => return Ok(Truth::False),
                    Truth::Unknown => result = Truth::Unknown,
                    Truth::True => {}
                }
            }
            result
        }
        Predicate::Or(items) => {
            let mut result = Truth::False;
            for item in items {
                match predicate(item, msg)? {
                    Truth::True => return Ok(Truth::True),
                    Truth::Unknown => result = Truth::Unknown,
                    Truth::False => {}
                }
            }
            result
        }
        Predicate::Not(inner) => predicate(inner, msg)?.not(),
        Predicate::Compare(op, l, r) => compare(*op, &expr(l, msg)?, &expr(r, msg)?),
        Predicate::IsNull { expr: e, negated } => {
            let is_null = matches!(expr(e, msg)?, Val::Null);
            Truth::from_bool(is_null != *negated)
        }
        Predicate::In {
            expr: e,
            list,
            negated,
        } => {
            // Like a chain of `OR`s: items run left to right and stop at
            // the first match. A NULL value matches nothing, so every item
            // is still evaluated (and can fail) and the result is unknown.
            let value = expr(e, msg)?;
            let mut found = Truth::False;
            for item in list {
                match compare(CompareOp::Eq, &value, &expr(item, msg)?) {
                    Truth::True => {
                        found = Truth::True;
                        break;
                    }
                    Truth::Unknown => found = Truth::Unknown,
                    Truth::False => {}
                }
            }
            if *negated { found.not() } else { found }
        }
        Predicate::Like {
            expr: e,
            pattern,
            negated,
        } => {
            let matched = like_match(&expr(e, msg)?, pattern, msg)?;
            if *negated { matched.not() } else { matched }
        }
        Predicate::Exists(property) => Truth::from_bool(read_property(property, msg).is_some()),
    })
}

/// `value LIKE pattern [ESCAPE escape]`. A computed pattern and escape are
/// evaluated even when `value` is not a string, so whether an expression
/// fails never depends on another operand's type.
fn like_match(
    value: &Val<'_>,
    pattern: &LikePattern,
    msg: &dyn MessageProperties,
) -> Result<Truth, EvalError> {
    match pattern {
        LikePattern::Compiled { compiled, .. } => Ok(match value {
            Val::Str(text) => Truth::from_bool(compiled.matches(text)),
            _ => Truth::Unknown,
        }),
        LikePattern::Dynamic { pattern, escape } => {
            let pattern = expr(pattern, msg)?;
            let escape = match escape {
                None => None,
                Some(escape) => Some(expr(escape, msg)?),
            };
            let escape_char = match &escape {
                None => None,
                Some(Val::Null) => return Ok(Truth::Unknown),
                Some(Val::Str(s)) if s.chars().count() == 1 => s.chars().next(),
                Some(other) => {
                    return Err(EvalError::InvalidEscape {
                        found: describe(other),
                    });
                }
            };
            let (Val::Str(text), Val::Str(pattern)) = (value, &pattern) else {
                return Ok(Truth::Unknown);
            };
            let compiled = like::Pattern::compile(pattern, escape_char).map_err(|_| {
                EvalError::DanglingEscape {
                    pattern: pattern.clone().into_owned(),
                }
            })?;
            Ok(Truth::from_bool(compiled.matches(text)))
        }
    }
}

fn describe(value: &Val<'_>) -> String {
    match value {
        Val::Str(s) => format!("'{s}'"),
        Val::Null => "NULL".to_owned(),
        Val::Bool(b) => b.to_string(),
        Val::Int(i) => i.to_string(),
        Val::Float(x) => format!("{x:?}"),
    }
}

fn compare(op: CompareOp, left: &Val<'_>, right: &Val<'_>) -> Truth {
    let ordering = match (left, right) {
        (Val::Int(a), Val::Int(b)) => Some(a.cmp(b)),
        // C#'s numeric promotion: the integer becomes a double.
        (Val::Int(a), Val::Float(b)) => (*a as f64).partial_cmp(b),
        (Val::Float(a), Val::Int(b)) => a.partial_cmp(&(*b as f64)),
        (Val::Float(a), Val::Float(b)) => a.partial_cmp(b),
        // Ordinal: UTF-8 byte order is Unicode code point order.
        (Val::Str(a), Val::Str(b)) => Some(a.as_bytes().cmp(b.as_bytes())),
        (Val::Bool(a), Val::Bool(b)) => {
            return match op {
                CompareOp::Eq => Truth::from_bool(a == b),
                CompareOp::NotEq => Truth::from_bool(a != b),
                _ => Truth::Unknown,
            };
        }
        _ => None,
    };
    let Some(ordering) = ordering else {
        return Truth::Unknown;
    };
    Truth::from_bool(match op {
        CompareOp::Eq => ordering == Ordering::Equal,
        CompareOp::NotEq => ordering != Ordering::Equal,
        CompareOp::Lt => ordering == Ordering::Less,
        CompareOp::Le => ordering != Ordering::Greater,
        CompareOp::Gt => ordering == Ordering::Greater,
        CompareOp::Ge => ordering != Ordering::Less,
    })
}

pub(crate) fn expr<'a>(e: &'a Expr, msg: &'a dyn MessageProperties) -> Result<Val<'a>, EvalError> {
    Ok(match e {
        Expr::Literal(literal) => match literal {
            Literal::Null => Val::Null,
            Literal::Bool(b) => Val::Bool(*b),
            Literal::Int(i) => Val::Int(*i),
            Literal::Float(x) => Val::Float(*x),
            Literal::String(s) => Val::Str(Cow::Borrowed(s)),
        },
        Expr::Property(property) => read_property(property, msg).map_or(Val::Null, Val::from),
        Expr::NewId => Val::Str(Cow::Owned(uuid::Uuid::now_v7().hyphenated().to_string())),
        Expr::Negate(inner) => match expr(inner, msg)? {
            Val::Null => Val::Null,
            Val::Int(i) => Val::Int(i.checked_neg().ok_or(EvalError::Overflow {
                op: "-",
                left: 0,
                right: i,
            })?),
            Val::Float(x) => Val::Float(-x),
            other => {
                return Err(EvalError::UnaryType {
                    op: "-",
                    operand: other.type_name(),
                });
            }
        },
        Expr::Plus(inner) => match expr(inner, msg)? {
            number @ (Val::Null | Val::Int(_) | Val::Float(_)) => number,
            other => {
                return Err(EvalError::UnaryType {
                    op: "+",
                    operand: other.type_name(),
                });
            }
        },
        Expr::Arith(op, l, r) => arith(*op, expr(l, msg)?, expr(r, msg)?)?,
    })
}

fn arith<'a>(op: ArithOp, left: Val<'a>, right: Val<'a>) -> Result<Val<'a>, EvalError> {
    Ok(match (left, right) {
        (Val::Null, _) | (_, Val::Null) => Val::Null,
        (Val::Int(a), Val::Int(b)) => Val::Int(int_arith(op, a, b)?),
        (Val::Int(a), Val::Float(b)) => Val::Float(float_arith(op, a as f64, b)),
        (Val::Float(a), Val::Int(b)) => Val::Float(float_arith(op, a, b as f64)),
        (Val::Float(a), Val::Float(b)) => Val::Float(float_arith(op, a, b)),
        (Val::Str(a), Val::Str(b)) if op == ArithOp::Add => Val::Str(Cow::Owned(format!("{a}{b}"))),
        (l, r) => {
            return Err(EvalError::ArithmeticType {
                op: op.text(),
                left: l.type_name(),
                right: r.type_name(),
            });
        }
    })
}

fn int_arith(op: ArithOp, a: i64, b: i64) -> Result<i64, EvalError> {
    if matches!(op, ArithOp::Div | ArithOp::Rem) && b == 0 {
        return Err(EvalError::DivisionByZero {
            op: op.text(),
            left: a,
        });
    }
    let result = match op {
        ArithOp::Add => a.checked_add(b),
        ArithOp::Sub => a.checked_sub(b),
        ArithOp::Mul => a.checked_mul(b),
        ArithOp::Div => a.checked_div(b),
        ArithOp::Rem => a.checked_rem(b),
    };
    result.ok_or(EvalError::Overflow {
        op: op.text(),
        left: a,
        right: b,
    })
}

fn float_arith(op: ArithOp, a: f64, b: f64) -> f64 {
    match op {
        ArithOp::Add => a + b,
        ArithOp::Sub => a - b,
        ArithOp::Mul => a * b,
        ArithOp::Div => a / b,
        ArithOp::Rem => a % b,
    }
}
