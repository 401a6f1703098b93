//! Canonical text of parsed filters and actions: keywords upper case, every
//! property with its scope, `<>` for inequality, and only the parentheses
//! precedence needs. Parsing this text gives back the same tree, which the
//! property tests check.

use std::fmt;

use crate::ast::{Expr, LikePattern, Literal, Predicate, Property, Scope, Statement};
use crate::lexer::{is_ident_continue, is_ident_start};

/// Writes `s` as a SQL string literal, doubling single quotes.
pub(crate) fn write_string_literal(f: &mut fmt::Formatter<'_>, s: &str) -> fmt::Result {
    f.write_str("'")?;
    for (i, part) in s.split('\'').enumerate() {
        if i > 0 {
            f.write_str("''")?;
        }
        f.write_str(part)?;
    }
    f.write_str("'")
}

/// Writes a float so that it reads back as the same float, and as a float
/// (never as an integer literal: `1` would come back as an `Int`).
pub(crate) fn write_float(f: &mut fmt::Formatter<'_>, x: f64) -> fmt::Result {
    // `{:?}` is the shortest text that round-trips, and always has a `.` or
    // an exponent (`1.0`, `1e300`, `1.5e-7`).
    write!(f, "{x:?}")
}

/// Binding strength of a condition, loosest first.
fn predicate_level(p: &Predicate) -> u8 {
    match p {
        Predicate::Or(_) => 1,
        Predicate::And(_) => 2,
        Predicate::Not(_) => 3,
        _ => 4,
    }
}

/// Binding strength of a value, loosest first.
fn expr_level(e: &Expr) -> u8 {
    use crate::ast::ArithOp;
    match e {
        Expr::Arith(ArithOp::Add | ArithOp::Sub, ..) => 1,
        Expr::Arith(..) => 2,
        _ => 3,
    }
}

pub(crate) struct PredicateText<'a>(pub(crate) &'a Predicate);
pub(crate) struct PropertyText<'a>(pub(crate) &'a Property);
pub(crate) struct StatementsText<'a>(pub(crate) &'a [Statement]);

impl fmt::Display for PredicateText<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_predicate(f, self.0, 0)
    }
}

impl fmt::Display for PropertyText<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_property(f, self.0)
    }
}

impl fmt::Display for StatementsText<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, statement) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            match statement {
                Statement::Set { target, value } => {
                    f.write_str("SET ")?;
                    write_property(f, target)?;
                    f.write_str(" = ")?;
                    write_expr(f, value, 0)?;
                }
                Statement::Remove(target) => {
                    f.write_str("REMOVE ")?;
                    write_property(f, target)?;
                }
            }
        }
        Ok(())
    }
}

/// Writes `p`, in parentheses if it binds more loosely than `min_level`
/// requires.
fn write_predicate(f: &mut fmt::Formatter<'_>, p: &Predicate, min_level: u8) -> fmt::Result {
    let level = predicate_level(p);
    if level < min_level {
        f.write_str("(")?;
    }
    match p {
        Predicate::Or(items) | Predicate::And(items) => {
            let joiner = if level == 1 { " OR " } else { " AND " };
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    f.write_str(joiner)?;
                }
                // A nested chain of the same operator keeps its parentheses,
                // so the tree shape survives a round trip.
                write_predicate(f, item, level + 1)?;
            }
        }
        Predicate::Not(inner) => {
            f.write_str("NOT ")?;
            write_predicate(f, inner, 3)?;
        }
        Predicate::Compare(op, l, r) => {
            write_expr(f, l, 0)?;
            write!(f, " {} ", op.text())?;
            write_expr(f, r, 0)?;
        }
        Predicate::IsNull { expr, negated } => {
            write_expr(f, expr, 0)?;
            f.write_str(if *negated { " IS NOT NULL" } else { " IS NULL" })?;
        }
        Predicate::In {
            expr,
            list,
            negated,
        } => {
            write_expr(f, expr, 0)?;
            f.write_str(if *negated { " NOT IN (" } else { " IN (" })?;
            for (i, item) in list.iter().enumerate() {
                if i > 0 {
                    f.write_str(", ")?;
                }
                write_expr(f, item, 0)?;
            }
            f.write_str(")")?;
        }
        Predicate::Like {
            expr,
            pattern,
            negated,
        } => {
            write_expr(f, expr, 0)?;
            f.write_str(if *negated { " NOT LIKE " } else { " LIKE " })?;
            match pattern {
                LikePattern::Compiled {
                    pattern, escape, ..
                } => {
                    write_string_literal(f, pattern)?;
                    if let Some(c) = escape {
                        f.write_str(" ESCAPE ")?;
                        write_string_literal(f, c.encode_utf8(&mut [0; 4]))?;
                    }
                }
                LikePattern::Dynamic { pattern, escape } => {
                    write_expr(f, pattern, 0)?;
                    if let Some(escape) = escape {
                        f.write_str(" ESCAPE ")?;
                        write_expr(f, escape, 0)?;
                    }
                }
            }
        }
        Predicate::Exists(property) => {
            f.write_str("EXISTS(")?;
            write_property(f, property)?;
            f.write_str(")")?;
        }
    }
    if level < min_level {
        f.write_str(")")?;
    }
    Ok(())
}

fn write_expr(f: &mut fmt::Formatter<'_>, e: &Expr, min_level: u8) -> fmt::Result {
    let level = expr_level(e);
    if level < min_level {
        f.write_str("(")?;
    }
    match e {
        Expr::Literal(literal) => match literal {
            Literal::Null => f.write_str("NULL")?,
            Literal::Bool(true) => f.write_str("TRUE")?,
            Literal::Bool(false) => f.write_str("FALSE")?,
            Literal::Int(i) => write!(f, "{i}")?,
            Literal::Float(x) => write_float(f, *x)?,
            Literal::String(s) => write_string_literal(f, s)?,
        },
        Expr::Property(property) => write_property(f, property)?,
        Expr::NewId => f.write_str("newid()")?,
        // Always parenthesised: `-5` would read back as the literal -5.
        Expr::Negate(inner) => {
            f.write_str("-(")?;
            write_expr(f, inner, 0)?;
            f.write_str(")")?;
        }
        Expr::Plus(inner) => {
            f.write_str("+(")?;
            write_expr(f, inner, 0)?;
            f.write_str(")")?;
        }
        Expr::Arith(op, l, r) => {
            // Left-associative: the right operand needs parentheses at the
            // same level (`a - (b - c)`).
            write_expr(f, l, level)?;
            write!(f, " {} ", op.text())?;
            write_expr(f, r, level + 1)?;
        }
    }
    if level < min_level {
        f.write_str(")")?;
    }
    Ok(())
}

fn write_property(f: &mut fmt::Formatter<'_>, property: &Property) -> fmt::Result {
    f.write_str(match property.scope {
        Scope::System => "sys.",
        Scope::User => "user.",
    })?;
    let name = &property.name;
    let mut chars = name.chars();
    let regular = chars.next().is_some_and(is_ident_start) && chars.all(is_ident_continue);
    if regular {
        f.write_str(name)
    } else {
        f.write_str("[")?;
        f.write_str(&name.replace(']', "]]"))?;
        f.write_str("]")
    }
}
