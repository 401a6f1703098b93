//! The parsed form of filters and actions.
//!
//! Predicates (which are TRUE, FALSE or unknown) and expressions (which
//! yield a value or NULL) are separate types, so "`'a' AND 1`" cannot even be
//! represented. `AND`/`OR` chains are flat lists, so a long chain of
//! conditions does not make a deep tree.

/// Where a property lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scope {
    /// Broker properties (`sys.`).
    System,
    /// Application properties (`user.`, or no prefix).
    User,
}

/// A reference to one property.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Property {
    pub(crate) scope: Scope,
    /// For `System`: the canonical spelling from `SYSTEM_PROPERTIES`. For
    /// `User`: exactly as written (user names are case-sensitive).
    pub(crate) name: String,
}

/// A constant.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Literal {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    String(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ArithOp {
    Add,
    Sub,
    Mul,
    Div,
    Rem,
}

impl ArithOp {
    pub(crate) fn text(self) -> &'static str {
        match self {
            ArithOp::Add => "+",
            ArithOp::Sub => "-",
            ArithOp::Mul => "*",
            ArithOp::Div => "/",
            ArithOp::Rem => "%",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CompareOp {
    Eq,
    NotEq,
    Lt,
    Le,
    Gt,
    Ge,
}

impl CompareOp {
    pub(crate) fn text(self) -> &'static str {
        match self {
            CompareOp::Eq => "=",
            CompareOp::NotEq => "<>",
            CompareOp::Lt => "<",
            CompareOp::Le => "<=",
            CompareOp::Gt => ">",
            CompareOp::Ge => ">=",
        }
    }
}

/// A value-producing expression.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Expr {
    Literal(Literal),
    Property(Property),
    /// `newid()`: a fresh UUID string, version 7 (time-ordered) so that
    /// ids made later sort later (decision 0117).
    NewId,
    /// Unary minus.
    Negate(Box<Expr>),
    /// Unary plus: the number unchanged, an error on anything else.
    Plus(Box<Expr>),
    Arith(ArithOp, Box<Expr>, Box<Expr>),
}

/// A LIKE pattern, compiled when the pattern and escape are literals.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum LikePattern {
    /// Literal pattern and escape, compiled once at parse time.
    Compiled {
        pattern: String,
        escape: Option<char>,
        compiled: crate::like::Pattern,
    },
    /// Computed pattern or escape, compiled per evaluation.
    Dynamic {
        pattern: Box<Expr>,
        escape: Option<Box<Expr>>,
    },
}

/// A condition: TRUE, FALSE or unknown.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Predicate {
    /// Two or more conditions, all TRUE.
    And(Vec<Predicate>),
    /// Two or more conditions, any TRUE.
    Or(Vec<Predicate>),
    Not(Box<Predicate>),
    Compare(CompareOp, Expr, Expr),
    /// `expr IS [NOT] NULL`.
    IsNull {
        expr: Expr,
        negated: bool,
    },
    /// `expr [NOT] IN (list)`.
    In {
        expr: Expr,
        list: Vec<Expr>,
        negated: bool,
    },
    /// `expr [NOT] LIKE pattern [ESCAPE c]`.
    Like {
        expr: Expr,
        pattern: LikePattern,
        negated: bool,
    },
    /// `EXISTS(property)`.
    Exists(Property),
}

/// One statement of a rule action.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Statement {
    Set { target: Property, value: Expr },
    Remove(Property),
}
