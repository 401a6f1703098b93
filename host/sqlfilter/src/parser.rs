//! Recursive-descent parser for filters and actions.
//!
//! Precedence, loosest first: `OR`, `AND`, `NOT`, the comparison-like
//! operators (`=`, `IS NULL`, `IN`, `LIKE`, ...), `+ -`, `* / %`, unary
//! `-`/`+`, then literals, properties, `newid()`, `EXISTS(..)` and
//! parentheses. A parenthesised group may hold either a condition or a value
//! (`(a OR b)` versus `(a + 1) * 2`), so each level returns a [`Node`] and
//! the level that uses it checks which kind it got, which is also where the
//! errors "expected a condition" / "expected a value" come from.

use crate::ast::{
    ArithOp, CompareOp, Expr, LikePattern, Literal, Predicate, Property, Scope, Statement,
};
use crate::error::ParseError;
use crate::lexer::{Symbol, Token, TokenKind, tokenize};
use crate::like;
use crate::{MAX_ACTION_STATEMENTS, MAX_EXPRESSION_CHARS, MAX_NESTING_DEPTH, SYSTEM_PROPERTIES};

/// Words that cannot be unqualified property names (write `user.[In]` or
/// `[In]` for a property called `In`).
pub(crate) const RESERVED_WORDS: &[&str] = &[
    "AND", "OR", "NOT", "IS", "NULL", "IN", "LIKE", "ESCAPE", "EXISTS", "TRUE", "FALSE",
];

/// Parses a filter expression.
pub(crate) fn parse_filter(text: &str) -> Result<Predicate, ParseError> {
    let mut parser = Parser::new(text)?;
    let node = parser.or()?;
    let predicate = parser.require_predicate(node)?;
    parser.expect_end("an operator, AND, OR or the end of the filter")?;
    Ok(predicate)
}

/// Parses a rule action: `SET` and `REMOVE` statements, each optionally
/// ended by `;` (Service Bus documents the semicolon as optional, so
/// `SET a = 1 SET b = 2` is two statements).
pub(crate) fn parse_action(text: &str) -> Result<Vec<Statement>, ParseError> {
    let mut parser = Parser::new(text)?;
    let mut statements = Vec::new();
    loop {
        if statements.len() == MAX_ACTION_STATEMENTS {
            return Err(parser.error_here(format!(
                "too many statements: a rule action holds at most {MAX_ACTION_STATEMENTS}"
            )));
        }
        statements.push(parser.statement()?);
        let ended = parser.eat_symbol(Symbol::Semicolon);
        if parser.at_end() {
            break;
        }
        if !ended && !parser.is_keyword("SET") && !parser.is_keyword("REMOVE") {
            return Err(parser.unexpected("`;`, SET, REMOVE or the end of the action"));
        }
    }
    Ok(statements)
}

/// What a precedence level produced: a condition or a value, and where it
/// started (for errors about it).
struct Node {
    kind: NodeKind,
    offset: usize,
    /// Height of the tree below this node, bounded by `MAX_NESTING_DEPTH`.
    height: usize,
}

enum NodeKind {
    Predicate(Predicate),
    Expr(Expr),
}

struct Parser<'t> {
    text: &'t str,
    tokens: Vec<Token>,
    /// Index of the next token; always valid because the last is `Eof`.
    next: usize,
    /// Current recursion depth (parentheses, `NOT`, unary minus).
    depth: usize,
}

impl<'t> Parser<'t> {
    fn new(text: &'t str) -> Result<Parser<'t>, ParseError> {
        // Byte length bounds character count from above: only long texts
        // need counting.
        if text.len() > MAX_EXPRESSION_CHARS
            && let Some((offset, _)) = text.char_indices().nth(MAX_EXPRESSION_CHARS)
        {
            return Err(ParseError::at(
                text,
                offset,
                format!(
                    "expression too long: {} characters, at most {MAX_EXPRESSION_CHARS} are allowed",
                    text.chars().count()
                ),
            ));
        }
        Ok(Parser {
            text,
            tokens: tokenize(text)?,
            next: 0,
            depth: 0,
        })
    }

    // ---- token access ----------------------------------------------------

    fn peek(&self) -> &Token {
        &self.tokens[self.next.min(self.tokens.len() - 1)]
    }

    fn peek_at(&self, ahead: usize) -> &Token {
        &self.tokens[(self.next + ahead).min(self.tokens.len() - 1)]
    }

    fn advance(&mut self) -> Token {
        let token = self.peek().clone();
        if self.next < self.tokens.len() - 1 {
            self.next += 1;
        }
        token
    }

    fn at_end(&self) -> bool {
        self.peek().kind == TokenKind::Eof
    }

    fn is_keyword(&self, keyword: &str) -> bool {
        matches!(&self.peek().kind, TokenKind::Ident(s) if s.eq_ignore_ascii_case(keyword))
    }

    fn eat_keyword(&mut self, keyword: &str) -> bool {
        let found = self.is_keyword(keyword);
        if found {
            self.advance();
        }
        found
    }

    fn is_symbol(&self, symbol: Symbol) -> bool {
        self.peek().kind == TokenKind::Symbol(symbol)
    }

    fn eat_symbol(&mut self, symbol: Symbol) -> bool {
        let found = self.is_symbol(symbol);
        if found {
            self.advance();
        }
        found
    }

    fn expect_symbol(&mut self, symbol: Symbol, context: &str) -> Result<(), ParseError> {
        if self.eat_symbol(symbol) {
            Ok(())
        } else {
            Err(self.unexpected(&format!("`{}` {context}", symbol.text())))
        }
    }

    fn expect_keyword(&mut self, keyword: &str, context: &str) -> Result<(), ParseError> {
        if self.eat_keyword(keyword) {
            Ok(())
        } else {
            Err(self.unexpected(&format!("{keyword} {context}")))
        }
    }

    fn expect_end(&mut self, expected: &str) -> Result<(), ParseError> {
        if self.at_end() {
            Ok(())
        } else {
            Err(self.unexpected(expected))
        }
    }

    // ---- errors -----------------------------------------------------------

    fn error_at(&self, offset: usize, message: impl Into<String>) -> ParseError {
        ParseError::at(self.text, offset, message)
    }

    fn error_here(&self, message: impl Into<String>) -> ParseError {
        self.error_at(self.peek().offset, message)
    }

    fn unexpected(&self, expected: &str) -> ParseError {
        self.error_here(format!(
            "expected {expected}, found {}",
            self.peek().kind.describe()
        ))
    }

    // ---- depth ------------------------------------------------------------

    /// Counts one level of recursion for the token at `offset` (a `(`,
    /// `NOT` or sign), which is where the error points.
    fn enter(&mut self, offset: usize) -> Result<(), ParseError> {
        self.depth += 1;
        if self.depth > MAX_NESTING_DEPTH {
            return Err(self.error_at(
                offset,
                format!(
                    "expression nested too deeply: at most {MAX_NESTING_DEPTH} levels are allowed"
                ),
            ));
        }
        Ok(())
    }

    fn leave(&mut self) {
        self.depth -= 1;
    }

    fn node(&self, kind: NodeKind, offset: usize, height: usize) -> Result<Node, ParseError> {
        if height > MAX_NESTING_DEPTH {
            return Err(self.error_at(
                offset,
                format!(
                    "expression nested too deeply: at most {MAX_NESTING_DEPTH} levels are allowed"
                ),
            ));
        }
        Ok(Node {
            kind,
            offset,
            height,
        })
    }

    // ---- kind checks ------------------------------------------------------

    fn require_predicate(&self, node: Node) -> Result<Predicate, ParseError> {
        match node.kind {
            NodeKind::Predicate(p) => Ok(p),
            NodeKind::Expr(_) => Err(self.error_at(
                node.offset,
                "expected a condition (a comparison, IS NULL, IN, LIKE or EXISTS), found a value",
            )),
        }
    }

    fn require_expr(&self, node: Node) -> Result<Expr, ParseError> {
        match node.kind {
            NodeKind::Expr(e) => Ok(e),
            NodeKind::Predicate(_) => Err(self.error_at(
                node.offset,
                "expected a value, found a condition (conditions can only be combined with AND, OR and NOT)",
            )),
        }
    }

    // ---- conditions -------------------------------------------------------

    fn or(&mut self) -> Result<Node, ParseError> {
        self.chain("OR", Self::and, Predicate::Or)
    }

    fn and(&mut self) -> Result<Node, ParseError> {
        self.chain("AND", Self::not, Predicate::And)
    }

    /// `operand (KEYWORD operand)*`, collected into one flat list.
    fn chain(
        &mut self,
        keyword: &str,
        operand: fn(&mut Self) -> Result<Node, ParseError>,
        build: fn(Vec<Predicate>) -> Predicate,
    ) -> Result<Node, ParseError> {
        let first = operand(self)?;
        if !self.is_keyword(keyword) {
            return Ok(first);
        }
        let offset = first.offset;
        let mut height = first.height;
        let mut items = vec![self.require_predicate(first)?];
        while self.eat_keyword(keyword) {
            let next = operand(self)?;
            height = height.max(next.height);
            items.push(self.require_predicate(next)?);
        }
        self.node(NodeKind::Predicate(build(items)), offset, height + 1)
    }

    fn not(&mut self) -> Result<Node, ParseError> {
        if !self.is_keyword("NOT") {
            return self.comparison();
        }
        let offset = self.advance().offset;
        self.enter(offset)?;
        let operand = self.not()?;
        self.leave();
        let height = operand.height + 1;
        let inner = self.require_predicate(operand)?;
        self.node(
            NodeKind::Predicate(Predicate::Not(Box::new(inner))),
            offset,
            height,
        )
    }

    fn comparison(&mut self) -> Result<Node, ParseError> {
        let left = self.additive()?;
        let offset = left.offset;
        let compare = match self.peek().kind {
            TokenKind::Symbol(Symbol::Eq) => Some(CompareOp::Eq),
            TokenKind::Symbol(Symbol::NotEq) => Some(CompareOp::NotEq),
            TokenKind::Symbol(Symbol::Lt) => Some(CompareOp::Lt),
            TokenKind::Symbol(Symbol::Le) => Some(CompareOp::Le),
            TokenKind::Symbol(Symbol::Gt) => Some(CompareOp::Gt),
            TokenKind::Symbol(Symbol::Ge) => Some(CompareOp::Ge),
            _ => None,
        };
        if let Some(op) = compare {
            self.advance();
            let right = self.additive()?;
            let height = left.height.max(right.height) + 1;
            let l = self.require_expr(left)?;
            let r = self.require_expr(right)?;
            let node = self.node(
                NodeKind::Predicate(Predicate::Compare(op, l, r)),
                offset,
                height,
            )?;
            if matches!(
                self.peek().kind,
                TokenKind::Symbol(
                    Symbol::Eq | Symbol::NotEq | Symbol::Lt | Symbol::Le | Symbol::Gt | Symbol::Ge
                )
            ) {
                return Err(
                    self.error_here("comparisons cannot be chained: combine them with AND or OR")
                );
            }
            return Ok(node);
        }
        if self.is_keyword("IS") {
            self.advance();
            let negated = self.eat_keyword("NOT");
            self.expect_keyword("NULL", if negated { "after IS NOT" } else { "after IS" })?;
            let height = left.height + 1;
            let expr = self.require_expr(left)?;
            return self.node(
                NodeKind::Predicate(Predicate::IsNull { expr, negated }),
                offset,
                height,
            );
        }
        let negated = if self.is_keyword("NOT")
            && matches!(&self.peek_at(1).kind, TokenKind::Ident(s)
                if s.eq_ignore_ascii_case("IN") || s.eq_ignore_ascii_case("LIKE"))
        {
            self.advance();
            true
        } else {
            false
        };
        if self.eat_keyword("IN") {
            return self.in_list(left, negated);
        }
        if self.eat_keyword("LIKE") {
            return self.like(left, negated);
        }
        if self.is_keyword("NOT") && matches!(left.kind, NodeKind::Expr(_)) {
            self.advance();
            return Err(self.unexpected("IN or LIKE after NOT"));
        }
        Ok(left)
    }

    fn in_list(&mut self, left: Node, negated: bool) -> Result<Node, ParseError> {
        let offset = left.offset;
        let mut height = left.height;
        let expr = self.require_expr(left)?;
        self.expect_symbol(Symbol::LParen, "to open the IN list")?;
        let mut list = Vec::new();
        loop {
            if self.is_symbol(Symbol::RParen) && list.is_empty() {
                return Err(
                    self.error_here("expected at least one value in the IN list, found `)`")
                );
            }
            let item = self.additive()?;
            height = height.max(item.height);
            list.push(self.require_expr(item)?);
            if self.eat_symbol(Symbol::Comma) {
                continue;
            }
            self.expect_symbol(Symbol::RParen, "or `,` in the IN list")?;
            break;
        }
        self.node(
            NodeKind::Predicate(Predicate::In {
                expr,
                list,
                negated,
            }),
            offset,
            height + 1,
        )
    }

    fn like(&mut self, left: Node, negated: bool) -> Result<Node, ParseError> {
        let offset = left.offset;
        let expr = self.require_expr(left)?;
        let pattern_node = self.additive()?;
        let pattern_offset = pattern_node.offset;
        let mut height = pattern_node.height;
        let pattern = self.require_expr(pattern_node)?;
        let escape = if self.eat_keyword("ESCAPE") {
            let escape_node = self.additive()?;
            height = height.max(escape_node.height);
            Some((escape_node.offset, self.require_expr(escape_node)?))
        } else {
            None
        };
        let pattern = self.like_pattern(pattern, pattern_offset, escape)?;
        self.node(
            NodeKind::Predicate(Predicate::Like {
                expr,
                pattern,
                negated,
            }),
            offset,
            height + 1,
        )
    }

    /// Compiles a literal pattern (and escape) now, so errors in it surface
    /// when the rule is created and evaluation does no compiling.
    fn like_pattern(
        &self,
        pattern: Expr,
        pattern_offset: usize,
        escape: Option<(usize, Expr)>,
    ) -> Result<LikePattern, ParseError> {
        if let Expr::Literal(literal) = &pattern
            && !matches!(literal, Literal::String(_) | Literal::Null)
        {
            return Err(self.error_at(
                pattern_offset,
                format!(
                    "expected a string pattern after LIKE, found {}",
                    literal_kind(literal)
                ),
            ));
        }
        let escape_char = match escape {
            None => None,
            Some((offset, Expr::Literal(Literal::String(s)))) => {
                let mut chars = s.chars();
                match (chars.next(), chars.next()) {
                    (Some(c), None) => Some(c),
                    _ => {
                        return Err(self.error_at(
                            offset,
                            format!(
                                "expected a one-character string after ESCAPE, found '{s}' ({} characters)",
                                s.chars().count()
                            ),
                        ));
                    }
                }
            }
            Some((offset, Expr::Literal(other))) => {
                return Err(self.error_at(
                    offset,
                    format!(
                        "expected a one-character string after ESCAPE, found {}",
                        literal_kind(&other)
                    ),
                ));
            }
            Some((_, computed)) => {
                return Ok(LikePattern::Dynamic {
                    pattern: Box::new(pattern),
                    escape: Some(Box::new(computed)),
                });
            }
        };
        match pattern {
            Expr::Literal(Literal::String(text)) => {
                let compiled = like::Pattern::compile(&text, escape_char).map_err(|_| {
                    self.error_at(
                        pattern_offset,
                        format!(
                            "LIKE pattern '{text}' ends with its escape character, which escapes nothing"
                        ),
                    )
                })?;
                Ok(LikePattern::Compiled {
                    pattern: text,
                    escape: escape_char,
                    compiled,
                })
            }
            computed => Ok(LikePattern::Dynamic {
                pattern: Box::new(computed),
                escape: escape_char
                    .map(|c| Box::new(Expr::Literal(Literal::String(c.to_string())))),
            }),
        }
    }

    // ---- values -----------------------------------------------------------

    fn additive(&mut self) -> Result<Node, ParseError> {
        self.arithmetic(
            &[(Symbol::Plus, ArithOp::Add), (Symbol::Minus, ArithOp::Sub)],
            Self::multiplicative,
        )
    }

    fn multiplicative(&mut self) -> Result<Node, ParseError> {
        self.arithmetic(
            &[
                (Symbol::Star, ArithOp::Mul),
                (Symbol::Slash, ArithOp::Div),
                (Symbol::Percent, ArithOp::Rem),
            ],
            Self::unary,
        )
    }

    /// A left-associative chain of binary operators.
    fn arithmetic(
        &mut self,
        operators: &[(Symbol, ArithOp)],
        operand: fn(&mut Self) -> Result<Node, ParseError>,
    ) -> Result<Node, ParseError> {
        let mut left = operand(self)?;
        loop {
            let Some(op) = operators
                .iter()
                .find(|(symbol, _)| self.is_symbol(*symbol))
                .map(|(_, op)| *op)
            else {
                return Ok(left);
            };
            self.advance();
            let right = operand(self)?;
            let offset = left.offset;
            let height = left.height.max(right.height) + 1;
            let l = self.require_expr(left)?;
            let r = self.require_expr(right)?;
            left = self.node(
                NodeKind::Expr(Expr::Arith(op, Box::new(l), Box::new(r))),
                offset,
                height,
            )?;
        }
    }

    fn unary(&mut self) -> Result<Node, ParseError> {
        let negate = if self.is_symbol(Symbol::Minus) {
            true
        } else if self.is_symbol(Symbol::Plus) {
            false
        } else {
            return self.primary();
        };
        let offset = self.advance().offset;
        // `-5` is the literal -5 (the only way to write i64::MIN), not a
        // negation of 5; `+5` is just 5.
        let sign = if negate { "-" } else { "" };
        match &self.peek().kind {
            TokenKind::Int(digits) => {
                let digits = digits.clone();
                self.advance();
                let value = format!("{sign}{digits}").parse::<i64>().map_err(|_| {
                    self.error_at(
                        offset,
                        format!("integer {sign}{digits} is out of range for a 64-bit integer"),
                    )
                })?;
                return self.node(
                    NodeKind::Expr(Expr::Literal(Literal::Int(value))),
                    offset,
                    1,
                );
            }
            TokenKind::Float(x) => {
                let x = if negate { -*x } else { *x };
                self.advance();
                return self.node(NodeKind::Expr(Expr::Literal(Literal::Float(x))), offset, 1);
            }
            _ => {}
        }
        self.enter(offset)?;
        let operand = self.unary()?;
        self.leave();
        let height = operand.height + 1;
        let expr = self.require_expr(operand)?;
        let signed = if negate {
            Expr::Negate(Box::new(expr))
        } else {
            Expr::Plus(Box::new(expr))
        };
        self.node(NodeKind::Expr(signed), offset, height)
    }

    fn primary(&mut self) -> Result<Node, ParseError> {
        let token = self.peek().clone();
        let offset = token.offset;
        let literal =
            |parser: &Self, l: Literal| parser.node(NodeKind::Expr(Expr::Literal(l)), offset, 1);
        match token.kind {
            TokenKind::Symbol(Symbol::LParen) => {
                self.advance();
                self.enter(offset)?;
                let inner = self.or()?;
                self.leave();
                self.expect_symbol(Symbol::RParen, "to close the `(`")?;
                // Keep the group's start, so errors about it point at `(`.
                Ok(Node { offset, ..inner })
            }
            TokenKind::Int(digits) => {
                self.advance();
                let value = digits.parse::<i64>().map_err(|_| {
                    self.error_at(
                        offset,
                        format!("integer {digits} is out of range for a 64-bit integer"),
                    )
                })?;
                literal(self, Literal::Int(value))
            }
            TokenKind::Float(x) => {
                self.advance();
                literal(self, Literal::Float(x))
            }
            TokenKind::Str(s) => {
                self.advance();
                literal(self, Literal::String(s))
            }
            TokenKind::QuotedIdent(_) => {
                let property = self.property()?;
                self.node(NodeKind::Expr(Expr::Property(property)), offset, 1)
            }
            TokenKind::Ident(word) => self.word(&word, offset),
            TokenKind::Symbol(_) | TokenKind::Eof => {
                Err(self
                    .unexpected("a value (a literal, a property or a parenthesised expression)"))
            }
        }
    }

    /// A primary that starts with a word: a keyword literal, `EXISTS`, a
    /// function call or a property.
    fn word(&mut self, word: &str, offset: usize) -> Result<Node, ParseError> {
        let literal = |l: Literal| NodeKind::Expr(Expr::Literal(l));
        if word.eq_ignore_ascii_case("TRUE") {
            self.advance();
            return self.node(literal(Literal::Bool(true)), offset, 1);
        }
        if word.eq_ignore_ascii_case("FALSE") {
            self.advance();
            return self.node(literal(Literal::Bool(false)), offset, 1);
        }
        if word.eq_ignore_ascii_case("NULL") {
            self.advance();
            return self.node(literal(Literal::Null), offset, 1);
        }
        if word.eq_ignore_ascii_case("EXISTS") {
            self.advance();
            self.expect_symbol(Symbol::LParen, "after EXISTS")?;
            let property = self.property()?;
            self.expect_symbol(Symbol::RParen, "to close EXISTS(")?;
            return self.node(NodeKind::Predicate(Predicate::Exists(property)), offset, 1);
        }
        if RESERVED_WORDS.iter().any(|r| r.eq_ignore_ascii_case(word)) {
            return Err(self.error_at(
                offset,
                format!(
                    "expected a value, found the keyword {}; write [{word}] for a property of that name",
                    word.to_ascii_uppercase()
                ),
            ));
        }
        if self.peek_at(1).kind == TokenKind::Symbol(Symbol::LParen) {
            return self.function(word, offset);
        }
        let property = self.property()?;
        self.node(NodeKind::Expr(Expr::Property(property)), offset, 1)
    }

    fn function(&mut self, name: &str, offset: usize) -> Result<Node, ParseError> {
        if !name.eq_ignore_ascii_case("newid") {
            return Err(self.error_at(
                offset,
                format!("unknown function `{name}`: the only function is newid()"),
            ));
        }
        self.advance();
        self.expect_symbol(Symbol::LParen, "after newid")?;
        self.expect_symbol(Symbol::RParen, "after `newid(`: newid takes no arguments")?;
        self.node(NodeKind::Expr(Expr::NewId), offset, 1)
    }

    /// `[sys. | user.] name`, where name is a regular, `[delimited]` or
    /// `"quoted"` identifier.
    fn property(&mut self) -> Result<Property, ParseError> {
        let token = self.advance();
        let scope_word = match &token.kind {
            TokenKind::Ident(w) if self.is_symbol(Symbol::Dot) => Some(w.clone()),
            _ => None,
        };
        let Some(scope_word) = scope_word else {
            return match token.kind {
                TokenKind::Ident(name) | TokenKind::QuotedIdent(name) => Ok(Property {
                    scope: Scope::User,
                    name,
                }),
                other => Err(self.error_at(
                    token.offset,
                    format!("expected a property name, found {}", other.describe()),
                )),
            };
        };
        let scope = if scope_word.eq_ignore_ascii_case("sys") {
            Scope::System
        } else if scope_word.eq_ignore_ascii_case("user") {
            Scope::User
        } else {
            return Err(self.error_at(
                token.offset,
                format!("unknown property scope `{scope_word}`: expected sys or user"),
            ));
        };
        self.advance(); // the dot
        let name_token = self.advance();
        let name = match name_token.kind {
            TokenKind::Ident(name) | TokenKind::QuotedIdent(name) => name,
            other => {
                return Err(self.error_at(
                    name_token.offset,
                    format!(
                        "expected a property name after `{scope_word}.`, found {}",
                        other.describe()
                    ),
                ));
            }
        };
        if self.is_symbol(Symbol::Dot) {
            return Err(self.error_here(
                "property names have one scope and one name; write [a.b] for a name with a dot",
            ));
        }
        match scope {
            Scope::User => Ok(Property { scope, name }),
            Scope::System => match SYSTEM_PROPERTIES
                .iter()
                .find(|known| known.eq_ignore_ascii_case(&name))
            {
                Some(canonical) => Ok(Property {
                    scope,
                    name: (*canonical).to_owned(),
                }),
                None => Err(self.error_at(
                    name_token.offset,
                    format!(
                        "unknown system property `{name}`; known: {}",
                        SYSTEM_PROPERTIES.join(", ")
                    ),
                )),
            },
        }
    }

    // ---- actions ----------------------------------------------------------

    fn statement(&mut self) -> Result<Statement, ParseError> {
        if self.eat_keyword("SET") {
            let target = self.property()?;
            self.expect_symbol(Symbol::Eq, "after the property in SET")?;
            let value = self.additive()?;
            let value = self.require_expr(value)?;
            return Ok(Statement::Set { target, value });
        }
        if self.is_keyword("REMOVE") {
            self.advance();
            let offset = self.peek().offset;
            let target = self.property()?;
            if target.scope == Scope::System {
                return Err(self.error_at(
                    offset,
                    format!(
                        "system property sys.{} cannot be removed; SET it to a new value instead",
                        target.name
                    ),
                ));
            }
            return Ok(Statement::Remove(target));
        }
        Err(self.unexpected("SET or REMOVE"))
    }
}

fn literal_kind(literal: &Literal) -> &'static str {
    match literal {
        Literal::Null => "NULL",
        Literal::Bool(_) => "a boolean",
        Literal::Int(_) => "an integer",
        Literal::Float(_) => "a float",
        Literal::String(_) => "a string",
    }
}
