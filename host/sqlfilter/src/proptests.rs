//! Property tests: no input panics the parser; evaluation agrees with a
//! deliberately naive reference evaluator; canonical text round-trips.
//!
//! The generator has its own little AST (`G*` types), renders it to text
//! with its own precedence rules and spelling variations, and evaluates it
//! directly. The crate's parser and evaluator never see that AST, so a
//! parser bug (wrong precedence, a dropped `NOT`) shows up as a
//! disagreement.

use proptest::prelude::*;
use proptest::test_runner::Config;

use crate::{PropertyBag, SqlFilter, SqlRuleAction, Value};

// ---- the generator's AST -----------------------------------------------

#[derive(Debug, Clone, PartialEq)]
enum GVal {
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
}

/// A property from a fixed pool, so generated messages and filters meet.
#[derive(Debug, Clone, Copy, PartialEq)]
enum GProp {
    User(&'static str),
    Sys(&'static str),
}

const USER_NAMES: &[&str] = &["a", "b", "To", "my prop"];
const SYS_NAMES: &[&str] = &["MessageId", "Label"];

#[derive(Debug, Clone)]
enum GExpr {
    Null,
    Lit(GVal),
    Prop(GProp),
    Neg(Box<GExpr>),
    Pos(Box<GExpr>),
    Bin(&'static str, Box<GExpr>, Box<GExpr>),
}

#[derive(Debug, Clone)]
enum GLike {
    Char(char),
    One,
    Any,
    Escaped(char),
}

#[derive(Debug, Clone)]
enum GPred {
    And(Box<GPred>, Box<GPred>),
    Or(Box<GPred>, Box<GPred>),
    Not(Box<GPred>),
    Cmp(&'static str, GExpr, GExpr),
    IsNull(GExpr, bool),
    In(GExpr, Vec<GExpr>, bool),
    Like(GExpr, Vec<GLike>, bool),
    /// LIKE with a computed pattern (no escape).
    LikeComputed(GExpr, GExpr, bool),
    Exists(GProp),
}

/// Spelling choices that must not change the meaning.
#[derive(Debug, Clone, Copy)]
struct Style {
    lower_keywords: bool,
    /// 0: bare names, 1: `user.` prefix, 2: `[name]`.
    user_form: u8,
    bang_not_equal: bool,
    tight: bool,
}

// ---- strategies ---------------------------------------------------------

fn short_string() -> impl Strategy<Value = String> {
    proptest::collection::vec(
        prop::sample::select(vec!['a', 'b', 'A', '%', '_', '\'', ';', 'é', ' ']),
        0..4,
    )
    .prop_map(|chars| chars.into_iter().collect())
}

fn gval() -> impl Strategy<Value = GVal> {
    prop_oneof![
        any::<bool>().prop_map(GVal::Bool),
        (-20i64..20).prop_map(GVal::Int),
        prop::sample::select(vec![i64::MAX, i64::MIN, 1 << 40]).prop_map(GVal::Int),
        prop::sample::select(vec![0.0, -0.0, 0.5, 2.0, -2.5, 1e300, 1.5e-7]).prop_map(GVal::Float),
        short_string().prop_map(GVal::Str),
    ]
}

fn gprop() -> impl Strategy<Value = GProp> {
    prop_oneof![
        3 => prop::sample::select(USER_NAMES).prop_map(GProp::User),
        1 => prop::sample::select(SYS_NAMES).prop_map(GProp::Sys),
    ]
}

fn gexpr_leaf() -> impl Strategy<Value = GExpr> {
    prop_oneof![
        1 => Just(GExpr::Null),
        4 => gval().prop_map(GExpr::Lit),
        5 => gprop().prop_map(GExpr::Prop),
    ]
}

/// Mostly plain operands: arithmetic on random types fails often, and a
/// failure anywhere fails the whole filter, which would leave few cases
/// that test matching.
fn gexpr() -> impl Strategy<Value = GExpr> {
    let arithmetic = gexpr_leaf().prop_recursive(3, 8, 2, |inner| {
        prop_oneof![
            1 => inner.clone().prop_map(|e| GExpr::Neg(Box::new(e))),
            1 => inner.clone().prop_map(|e| GExpr::Pos(Box::new(e))),
            3 => (prop::sample::select(vec!["+", "-", "*", "/", "%"]), inner.clone(), inner)
                .prop_map(|(op, l, r)| GExpr::Bin(op, Box::new(l), Box::new(r))),
        ]
    });
    prop_oneof![6 => gexpr_leaf(), 1 => arithmetic]
}

/// A LIKE pattern that is not a literal pattern: a property, NULL, or a
/// string built from one. (A literal that is not a string is a parse error.)
fn computed_pattern() -> impl Strategy<Value = GExpr> {
    prop_oneof![
        3 => gprop().prop_map(GExpr::Prop),
        1 => Just(GExpr::Null),
        2 => (gprop(), short_string()).prop_map(|(p, s)| {
            GExpr::Bin("+", Box::new(GExpr::Prop(p)), Box::new(GExpr::Lit(GVal::Str(s))))
        }),
    ]
}

fn glike() -> impl Strategy<Value = Vec<GLike>> {
    proptest::collection::vec(
        prop_oneof![
            3 => prop::sample::select(vec!['a', 'b', 'é', '\'']).prop_map(GLike::Char),
            1 => Just(GLike::One),
            1 => Just(GLike::Any),
            1 => prop::sample::select(vec!['%', '_', '!', 'a']).prop_map(GLike::Escaped),
        ],
        0..5,
    )
}

fn gpred() -> impl Strategy<Value = GPred> {
    let cmp = prop::sample::select(vec!["=", "<>", "<", "<=", ">", ">="]);
    let leaf = prop_oneof![
        (cmp, gexpr(), gexpr()).prop_map(|(op, l, r)| GPred::Cmp(op, l, r)),
        (gexpr(), any::<bool>()).prop_map(|(e, n)| GPred::IsNull(e, n)),
        (
            gexpr(),
            proptest::collection::vec(gexpr(), 1..4),
            any::<bool>()
        )
            .prop_map(|(e, list, n)| GPred::In(e, list, n)),
        (gexpr(), glike(), any::<bool>()).prop_map(|(e, p, n)| GPred::Like(e, p, n)),
        (gexpr(), computed_pattern(), any::<bool>())
            .prop_map(|(e, p, n)| GPred::LikeComputed(e, p, n)),
        gprop().prop_map(GPred::Exists),
    ];
    leaf.prop_recursive(4, 16, 2, |inner| {
        prop_oneof![
            (inner.clone(), inner.clone()).prop_map(|(l, r)| GPred::And(Box::new(l), Box::new(r))),
            (inner.clone(), inner.clone()).prop_map(|(l, r)| GPred::Or(Box::new(l), Box::new(r))),
            inner.prop_map(|p| GPred::Not(Box::new(p))),
        ]
    })
}

fn style() -> impl Strategy<Value = Style> {
    (any::<bool>(), 0u8..3, any::<bool>(), any::<bool>()).prop_map(
        |(lower_keywords, user_form, bang_not_equal, tight)| Style {
            lower_keywords,
            user_form,
            bang_not_equal,
            tight,
        },
    )
}

/// A message: each pool property present or not, with any value (NaN too).
fn message() -> impl Strategy<Value = Vec<(GProp, GVal)>> {
    let value = prop_oneof![5 => gval(), 1 => Just(GVal::Float(f64::NAN))];
    let props: Vec<GProp> = USER_NAMES
        .iter()
        .map(|n| GProp::User(n))
        .chain(SYS_NAMES.iter().map(|n| GProp::Sys(n)))
        .collect();
    proptest::collection::vec(proptest::option::of(value), props.len()).prop_map(move |values| {
        props
            .iter()
            .zip(values)
            .filter_map(|(p, v)| v.map(|v| (*p, v)))
            .collect()
    })
}

fn bag(message: &[(GProp, GVal)]) -> PropertyBag {
    let mut bag = PropertyBag::new();
    for (prop, value) in message {
        let value = match value {
            GVal::Bool(b) => Value::Bool(*b),
            GVal::Int(i) => Value::Int(*i),
            GVal::Float(x) => Value::Float(*x),
            GVal::Str(s) => Value::from(s.clone()),
        };
        match prop {
            GProp::User(name) => bag.insert_user(*name, value),
            GProp::Sys(name) => bag
                .insert_system(name, value)
                .expect("known system property"),
        }
    }
    bag
}

// ---- rendering (the generator's own) -----------------------------------

fn kw(style: Style, word: &str) -> String {
    if style.lower_keywords {
        word.to_lowercase()
    } else {
        word.to_owned()
    }
}

fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

fn render_prop(style: Style, prop: GProp) -> String {
    match prop {
        GProp::Sys(name) => format!("sys.{name}"),
        GProp::User(name) if name.contains(' ') => format!("[{name}]"),
        GProp::User(name) => match style.user_form {
            0 => name.to_owned(),
            1 => format!("user.{name}"),
            _ => format!("[{name}]"),
        },
    }
}

fn render_val(style: Style, v: &GVal) -> String {
    match v {
        GVal::Bool(b) => kw(style, if *b { "TRUE" } else { "FALSE" }),
        GVal::Int(i) => i.to_string(),
        GVal::Float(x) => format!("{x:?}"),
        GVal::Str(s) => quote(s),
    }
}

/// Expression levels: 1 `+ -`, 2 `* / %`, 3 unary and atoms.
fn render_expr(style: Style, e: &GExpr, min: u8) -> String {
    let (level, text) = match e {
        GExpr::Null => (3, kw(style, "NULL")),
        GExpr::Lit(v) => (3, render_val(style, v)),
        GExpr::Prop(p) => (3, render_prop(style, *p)),
        GExpr::Neg(inner) => (3, format!("-{}", render_expr(style, inner, 3))),
        GExpr::Pos(inner) => (3, format!("+{}", render_expr(style, inner, 3))),
        GExpr::Bin(op, l, r) => {
            let level = if matches!(*op, "+" | "-") { 1 } else { 2 };
            let sep = if style.tight { "" } else { " " };
            // A `-` right after `-` would still lex as two minus signs, but
            // keep them apart for readability of failures.
            let right = render_expr(style, r, level + 1);
            let sep_r = if sep.is_empty() && right.starts_with('-') {
                " "
            } else {
                sep
            };
            (
                level,
                format!("{}{sep}{op}{sep_r}{right}", render_expr(style, l, level)),
            )
        }
    };
    if level < min {
        format!("({text})")
    } else {
        text
    }
}

/// Predicate levels: 1 OR, 2 AND, 3 NOT, 4 atoms.
fn render_pred(style: Style, p: &GPred, min: u8) -> String {
    let (level, text) = match p {
        GPred::Or(l, r) => (
            1,
            format!(
                "{} {} {}",
                render_pred(style, l, 1),
                kw(style, "OR"),
                render_pred(style, r, 2)
            ),
        ),
        GPred::And(l, r) => (
            2,
            format!(
                "{} {} {}",
                render_pred(style, l, 2),
                kw(style, "AND"),
                render_pred(style, r, 3)
            ),
        ),
        GPred::Not(inner) => (
            3,
            format!("{} {}", kw(style, "NOT"), render_pred(style, inner, 3)),
        ),
        GPred::Cmp(op, l, r) => {
            let op = if *op == "<>" && style.bang_not_equal {
                "!="
            } else {
                op
            };
            (
                4,
                format!(
                    "{} {op} {}",
                    render_expr(style, l, 1),
                    render_expr(style, r, 1)
                ),
            )
        }
        GPred::IsNull(e, negated) => {
            let is = if *negated { "IS NOT NULL" } else { "IS NULL" };
            (4, format!("{} {}", render_expr(style, e, 1), kw(style, is)))
        }
        GPred::In(e, list, negated) => {
            let items: Vec<String> = list.iter().map(|i| render_expr(style, i, 1)).collect();
            let op = if *negated { "NOT IN" } else { "IN" };
            (
                4,
                format!(
                    "{} {} ({})",
                    render_expr(style, e, 1),
                    kw(style, op),
                    items.join(", ")
                ),
            )
        }
        GPred::Like(e, pattern, negated) => {
            let mut text = String::new();
            let mut escaped = false;
            for token in pattern {
                match token {
                    GLike::Char(c) => text.push(*c),
                    GLike::One => text.push('_'),
                    GLike::Any => text.push('%'),
                    GLike::Escaped(c) => {
                        escaped = true;
                        text.push('!');
                        text.push(*c);
                    }
                }
            }
            let op = if *negated { "NOT LIKE" } else { "LIKE" };
            let escape = if escaped {
                format!(" {} '!'", kw(style, "ESCAPE"))
            } else {
                String::new()
            };
            (
                4,
                format!(
                    "{} {} {}{escape}",
                    render_expr(style, e, 1),
                    kw(style, op),
                    quote(&text)
                ),
            )
        }
        GPred::LikeComputed(e, pattern, negated) => {
            let op = if *negated { "NOT LIKE" } else { "LIKE" };
            (
                4,
                format!(
                    "{} {} {}",
                    render_expr(style, e, 1),
                    kw(style, op),
                    render_expr(style, pattern, 1)
                ),
            )
        }
        GPred::Exists(prop) => (
            4,
            format!("{}({})", kw(style, "EXISTS"), render_prop(style, *prop)),
        ),
    };
    if level < min {
        format!("({text})")
    } else {
        text
    }
}

// ---- the reference evaluator ------------------------------------------

/// An evaluation error; which one does not matter for agreement.
#[derive(Debug, PartialEq)]
struct Failed;

type RVal = Option<GVal>;

fn lookup(message: &[(GProp, GVal)], prop: GProp) -> RVal {
    let same = |p: &GProp| match (p, prop) {
        (GProp::User(a), GProp::User(b)) => *a == b,
        (GProp::Sys(a), GProp::Sys(b)) => *a == b,
        _ => false,
    };
    message
        .iter()
        .find(|(p, _)| same(p))
        .map(|(_, v)| v.clone())
}

fn ref_expr(message: &[(GProp, GVal)], e: &GExpr) -> Result<RVal, Failed> {
    Ok(match e {
        GExpr::Null => None,
        GExpr::Lit(v) => Some(v.clone()),
        GExpr::Prop(p) => lookup(message, *p),
        GExpr::Neg(inner) => match ref_expr(message, inner)? {
            None => None,
            Some(GVal::Int(i)) => Some(GVal::Int(i.checked_neg().ok_or(Failed)?)),
            Some(GVal::Float(x)) => Some(GVal::Float(-x)),
            Some(_) => return Err(Failed),
        },
        GExpr::Pos(inner) => match ref_expr(message, inner)? {
            Some(GVal::Str(_) | GVal::Bool(_)) => return Err(Failed),
            number => number,
        },
        GExpr::Bin(op, l, r) => {
            let l = ref_expr(message, l)?;
            let r = ref_expr(message, r)?;
            match (l, r) {
                (None, _) | (_, None) => None,
                (Some(GVal::Int(a)), Some(GVal::Int(b))) => Some(GVal::Int(
                    match *op {
                        "+" => a.checked_add(b),
                        "-" => a.checked_sub(b),
                        "*" => a.checked_mul(b),
                        "/" => a.checked_div(b),
                        _ => a.checked_rem(b),
                    }
                    .ok_or(Failed)?,
                )),
                (Some(GVal::Str(a)), Some(GVal::Str(b))) if *op == "+" => Some(GVal::Str(a + &b)),
                (Some(a), Some(b)) => {
                    let (Some(x), Some(y)) = (as_f64(&a), as_f64(&b)) else {
                        return Err(Failed);
                    };
                    Some(GVal::Float(match *op {
                        "+" => x + y,
                        "-" => x - y,
                        "*" => x * y,
                        "/" => x / y,
                        _ => x % y,
                    }))
                }
            }
        }
    })
}

fn as_f64(v: &GVal) -> Option<f64> {
    match v {
        GVal::Int(i) => Some(*i as f64),
        GVal::Float(x) => Some(*x),
        _ => None,
    }
}

/// `None` is unknown.
fn ref_compare(op: &str, l: &RVal, r: &RVal) -> Option<bool> {
    let (l, r) = (l.as_ref()?, r.as_ref()?);
    let ordering = match (l, r) {
        (GVal::Int(a), GVal::Int(b)) => a.cmp(b),
        (GVal::Str(a), GVal::Str(b)) => {
            // Compare by code point, written differently from the crate.
            let a: Vec<u32> = a.chars().map(u32::from).collect();
            let b: Vec<u32> = b.chars().map(u32::from).collect();
            a.cmp(&b)
        }
        (GVal::Bool(a), GVal::Bool(b)) => {
            return match op {
                "=" => Some(a == b),
                "<>" => Some(a != b),
                _ => None,
            };
        }
        (a, b) => as_f64(a)?.partial_cmp(&as_f64(b)?)?,
    };
    Some(match op {
        "=" => ordering.is_eq(),
        "<>" => ordering.is_ne(),
        "<" => ordering.is_lt(),
        "<=" => ordering.is_le(),
        ">" => ordering.is_gt(),
        _ => ordering.is_ge(),
    })
}

/// Naive recursive LIKE over the generator's tokens.
fn ref_like(pattern: &[GLike], text: &[char]) -> bool {
    match pattern.split_first() {
        None => text.is_empty(),
        Some((GLike::Any, rest)) => (0..=text.len()).any(|skip| ref_like(rest, &text[skip..])),
        Some((GLike::One, rest)) => !text.is_empty() && ref_like(rest, &text[1..]),
        Some((GLike::Char(c) | GLike::Escaped(c), rest)) => {
            text.first() == Some(c) && ref_like(rest, &text[1..])
        }
    }
}

fn ref_pred(message: &[(GProp, GVal)], p: &GPred) -> Result<Option<bool>, Failed> {
    Ok(match p {
        GPred::And(l, r) => match ref_pred(message, l)? {
            Some(false) => Some(false),
            left => match (left, ref_pred(message, r)?) {
                (_, Some(false)) => Some(false),
                (Some(true), Some(true)) => Some(true),
                _ => None,
            },
        },
        GPred::Or(l, r) => match ref_pred(message, l)? {
            Some(true) => Some(true),
            left => match (left, ref_pred(message, r)?) {
                (_, Some(true)) => Some(true),
                (Some(false), Some(false)) => Some(false),
                _ => None,
            },
        },
        GPred::Not(inner) => ref_pred(message, inner)?.map(|b| !b),
        GPred::Cmp(op, l, r) => {
            let l = ref_expr(message, l)?;
            let r = ref_expr(message, r)?;
            ref_compare(op, &l, &r)
        }
        GPred::IsNull(e, negated) => Some(ref_expr(message, e)?.is_none() != *negated),
        GPred::In(e, list, negated) => {
            // `e IN (x, y)` is `e = x OR e = y`.
            let v = ref_expr(message, e)?;
            let mut result = Some(false);
            for item in list {
                let item = ref_expr(message, item)?;
                match ref_compare("=", &v, &item) {
                    Some(true) => {
                        result = Some(true);
                        break;
                    }
                    None => result = None,
                    Some(false) => {}
                }
            }
            if *negated { result.map(|b| !b) } else { result }
        }
        GPred::Like(e, pattern, negated) => match ref_expr(message, e)? {
            Some(GVal::Str(s)) => {
                let chars: Vec<char> = s.chars().collect();
                Some(ref_like(pattern, &chars) != *negated)
            }
            _ => None,
        },
        GPred::LikeComputed(e, pattern, negated) => {
            let value = ref_expr(message, e)?;
            let pattern = ref_expr(message, pattern)?;
            match (value, pattern) {
                (Some(GVal::Str(s)), Some(GVal::Str(p))) => {
                    let tokens: Vec<GLike> = p
                        .chars()
                        .map(|c| match c {
                            '%' => GLike::Any,
                            '_' => GLike::One,
                            c => GLike::Char(c),
                        })
                        .collect();
                    let chars: Vec<char> = s.chars().collect();
                    Some(ref_like(&tokens, &chars) != *negated)
                }
                _ => None,
            }
        }
        GPred::Exists(prop) => Some(lookup(message, *prop).is_some()),
    })
}

// ---- mutation -----------------------------------------------------------

/// Applies `edits` (position, kind, character) to `text`, at character
/// boundaries.
fn mutate(text: &str, edits: &[(usize, u8, char)]) -> String {
    let mut chars: Vec<char> = text.chars().collect();
    for &(at, kind, c) in edits {
        let at = if chars.is_empty() {
            0
        } else {
            at % (chars.len() + 1)
        };
        match kind % 3 {
            0 => chars.insert(at, c),
            1 if at < chars.len() => {
                chars.remove(at);
            }
            _ if at < chars.len() => chars[at] = c,
            _ => chars.push(c),
        }
    }
    chars.into_iter().collect()
}

fn sql_char() -> impl Strategy<Value = char> {
    prop::sample::select(
        "()'\"[]=<>!-+*/%,.;_ eE0123456789aANDORNOTISNULLIKEXSTSESCAPEsysuser\n\u{e9}\u{0}"
            .chars()
            .collect::<Vec<_>>(),
    )
}

/// One generated action statement: `SET user.<name> = <expr>` or, with no
/// expression, `REMOVE user.<name>`.
type GStatement = (&'static str, Option<GExpr>);

fn gstatements() -> impl Strategy<Value = Vec<GStatement>> {
    proptest::collection::vec(
        (
            prop::sample::select(USER_NAMES),
            proptest::option::weighted(0.8, gexpr()),
        ),
        1..6,
    )
}

fn render_statements(style: Style, statements: &[GStatement], separator: &str) -> String {
    statements
        .iter()
        .map(|(name, value)| {
            let target = render_prop(style, GProp::User(name));
            match value {
                Some(e) => format!(
                    "{} {target} = {}",
                    kw(style, "SET"),
                    render_expr(style, e, 0)
                ),
                None => format!("{} {target}", kw(style, "REMOVE")),
            }
        })
        .collect::<Vec<_>>()
        .join(separator)
}

/// Applies the statements to a model of the message, in order; stops at the
/// first failure, keeping what was applied before it.
fn ref_apply(message: &mut Vec<(GProp, GVal)>, statements: &[GStatement]) -> Result<(), Failed> {
    for (name, value) in statements {
        let new = match value {
            Some(e) => ref_expr(message, e)?,
            None => None,
        };
        message.retain(|(p, _)| *p != GProp::User(name));
        if let Some(v) = new {
            message.push((GProp::User(name), v));
        }
    }
    Ok(())
}

fn same_value(a: &Value<'_>, b: &Value<'_>) -> bool {
    match (a, b) {
        // NaN is not equal to itself.
        (Value::Float(x), Value::Float(y)) => x.to_bits() == y.to_bits() || x == y,
        _ => a == b,
    }
}

/// 384 cases keep the suite at about a second; set `PROPTEST_CASES` for a
/// deeper run (`PROPTEST_CASES=50000 cargo test -p nimbus-sqlfilter --release proptests`).
fn config() -> Config {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(384);
    Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn no_string_panics_the_parsers(text in any::<String>(), message in message()) {
        if let Ok(filter) = SqlFilter::parse(&text) {
            let _ = filter.evaluate(&bag(&message));
        }
        if let Ok(action) = SqlRuleAction::parse(&text) {
            let _ = action.apply(&mut bag(&message));
        }
    }

    #[test]
    fn no_sql_like_string_panics_the_parsers(
        chars in proptest::collection::vec(sql_char(), 0..80),
        message in message(),
    ) {
        let text: String = chars.into_iter().collect();
        if let Ok(filter) = SqlFilter::parse(&text) {
            let _ = filter.evaluate(&bag(&message));
        }
        if let Ok(action) = SqlRuleAction::parse(&text) {
            let _ = action.apply(&mut bag(&message));
        }
    }

    #[test]
    fn no_mutated_filter_panics_the_parser(
        p in gpred(),
        style in style(),
        edits in proptest::collection::vec((any::<usize>(), any::<u8>(), sql_char()), 1..4),
        message in message(),
    ) {
        let text = mutate(&render_pred(style, &p, 0), &edits);
        if let Ok(filter) = SqlFilter::parse(&text) {
            let _ = filter.evaluate(&bag(&message));
        }
        let action = mutate(&format!("SET x = {}; REMOVE y", render_expr(style, &GExpr::Prop(GProp::User("a")), 0)), &edits);
        let _ = SqlRuleAction::parse(&action);
    }

    #[test]
    fn evaluation_agrees_with_the_reference(p in gpred(), style in style(), message in message()) {
        let text = render_pred(style, &p, 0);
        let filter = SqlFilter::parse(&text);
        prop_assume!(!matches!(&filter, Err(e) if e.message.contains("too long") || e.message.contains("too deeply")));
        let filter = filter.map_err(|e| TestCaseError::fail(format!("`{text}` does not parse: {e}")))?;
        let expected = ref_pred(&message, &p).map(|truth| truth == Some(true));
        let actual = filter.evaluate(&bag(&message)).map_err(|_| Failed);
        prop_assert_eq!(actual, expected, "filter `{}` on {:?}", text, message);
    }

    #[test]
    fn canonical_text_round_trips(p in gpred(), style in style()) {
        let text = render_pred(style, &p, 0);
        let Ok(first) = SqlFilter::parse(&text) else {
            return Err(TestCaseError::reject("too long or too deep"));
        };
        let canonical = first.canonical();
        let second = SqlFilter::parse(&canonical)
            .map_err(|e| TestCaseError::fail(format!("canonical `{canonical}` of `{text}` does not parse: {e}")))?;
        prop_assert_eq!(second.predicate(), first.predicate(), "`{}` -> `{}`", text, canonical);
        prop_assert_eq!(second.canonical(), canonical);
    }

    #[test]
    fn set_action_stores_what_the_reference_computes(e in gexpr(), style in style(), message in message()) {
        let text = format!("SET user.out = {}; SET [other] = 1;", render_expr(style, &e, 0));
        let action = SqlRuleAction::parse(&text)
            .map_err(|err| TestCaseError::fail(format!("`{text}` does not parse: {err}")))?;
        let mut target = bag(&message);
        let result = action.apply(&mut target);
        match ref_expr(&message, &e) {
            Err(Failed) => prop_assert!(result.is_err(), "`{}` should fail", text),
            Ok(expected) => {
                prop_assert!(result.is_ok(), "`{}` failed: {:?}", text, result);
                let stored = target.user_value("out").cloned();
                let expected = expected.map(|v| match v {
                    GVal::Bool(b) => Value::Bool(b),
                    GVal::Int(i) => Value::Int(i),
                    GVal::Float(x) => Value::Float(x),
                    GVal::Str(s) => Value::from(s),
                });
                // NaN is not equal to itself; compare its bits instead.
                let same = match (&stored, &expected) {
                    (Some(Value::Float(a)), Some(Value::Float(b))) => a.to_bits() == b.to_bits() || a == b,
                    _ => stored == expected,
                };
                prop_assert!(same, "`{}`: stored {:?}, expected {:?}", text, stored, expected);
                prop_assert_eq!(target.user_value("other"), Some(&Value::Int(1)));
                let canonical = action.canonical();
                prop_assert_eq!(SqlRuleAction::parse(&canonical).map(|a| a.canonical()).ok(), Some(canonical));
            }
        }
    }

    #[test]
    fn action_statements_apply_in_order_like_the_reference(
        statements in gstatements(),
        style in style(),
        semicolons in any::<bool>(),
        message in message(),
    ) {
        let separator = if semicolons { "; " } else { " " };
        let text = render_statements(style, &statements, separator);
        let action = SqlRuleAction::parse(&text)
            .map_err(|err| TestCaseError::fail(format!("`{text}` does not parse: {err}")))?;
        let mut target = bag(&message);
        let result = action.apply(&mut target);
        let mut model = message.clone();
        let expected = ref_apply(&mut model, &statements);
        prop_assert_eq!(result.is_ok(), expected.is_ok(), "`{}`: {:?}", text, result);
        // Applied or not, both sides hold the same user properties after.
        for name in USER_NAMES {
            let actual = target.user_value(name);
            let wanted = lookup(&model, GProp::User(name)).map(|v| match v {
                GVal::Bool(b) => Value::Bool(b),
                GVal::Int(i) => Value::Int(i),
                GVal::Float(x) => Value::Float(x),
                GVal::Str(s) => Value::from(s),
            });
            let same = match (actual, &wanted) {
                (Some(a), Some(w)) => same_value(a, w),
                (None, None) => true,
                _ => false,
            };
            prop_assert!(same, "`{}`: {} is {:?}, expected {:?}", text, name, actual, wanted);
        }
    }
}
