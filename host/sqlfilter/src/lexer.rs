//! Splits filter and action text into tokens, each with its byte offset.
//!
//! Keywords are not tokens of their own: they are identifiers the parser
//! compares case-insensitively, because whether `In` is a keyword or a
//! property name depends on where it stands (`user.In` is a property).

use crate::error::ParseError;

/// One token and where it starts.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Token {
    pub(crate) kind: TokenKind,
    /// Byte offset of the token's first character.
    pub(crate) offset: usize,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum TokenKind {
    /// A regular identifier (or a keyword), as written.
    Ident(String),
    /// A `[delimited]` or `"quoted"` identifier, unescaped. Never a keyword.
    QuotedIdent(String),
    /// A string literal, unescaped.
    Str(String),
    /// An integer literal's digits (range-checked by the parser, which knows
    /// whether a minus sign precedes it).
    Int(String),
    /// A float literal (decimal point or exponent), already known finite.
    Float(f64),
    Symbol(Symbol),
    Eof,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Symbol {
    Eq,
    NotEq,
    Lt,
    Le,
    Gt,
    Ge,
    Plus,
    Minus,
    Star,
    Slash,
    Percent,
    LParen,
    RParen,
    Comma,
    Dot,
    Semicolon,
}

impl Symbol {
    pub(crate) fn text(self) -> &'static str {
        match self {
            Symbol::Eq => "=",
            Symbol::NotEq => "<>",
            Symbol::Lt => "<",
            Symbol::Le => "<=",
            Symbol::Gt => ">",
            Symbol::Ge => ">=",
            Symbol::Plus => "+",
            Symbol::Minus => "-",
            Symbol::Star => "*",
            Symbol::Slash => "/",
            Symbol::Percent => "%",
            Symbol::LParen => "(",
            Symbol::RParen => ")",
            Symbol::Comma => ",",
            Symbol::Dot => ".",
            Symbol::Semicolon => ";",
        }
    }
}

impl TokenKind {
    /// How the token reads in an error message ("found ...").
    pub(crate) fn describe(&self) -> String {
        match self {
            TokenKind::Ident(s) => format!("`{s}`"),
            TokenKind::QuotedIdent(s) => format!("identifier `[{s}]`"),
            TokenKind::Str(s) => {
                let shown: String = s.chars().take(20).collect();
                let ellipsis = if shown.len() < s.len() { "..." } else { "" };
                format!("string '{shown}{ellipsis}'")
            }
            TokenKind::Int(s) => format!("number {s}"),
            TokenKind::Float(x) => format!("number {x:?}"),
            TokenKind::Symbol(s) => format!("`{}`", s.text()),
            TokenKind::Eof => "end of input".to_owned(),
        }
    }
}

/// Whether `c` may start a regular identifier (a letter or `_`).
pub(crate) fn is_ident_start(c: char) -> bool {
    c.is_alphabetic() || c == '_'
}

/// Whether `c` may continue a regular identifier.
pub(crate) fn is_ident_continue(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// Tokenizes all of `text`; the last token is always `Eof`.
pub(crate) fn tokenize(text: &str) -> Result<Vec<Token>, ParseError> {
    let mut lexer = Lexer {
        text,
        pos: 0,
        tokens: Vec::new(),
    };
    lexer.run()?;
    Ok(lexer.tokens)
}

struct Lexer<'t> {
    text: &'t str,
    pos: usize,
    tokens: Vec<Token>,
}

impl Lexer<'_> {
    fn peek(&self) -> Option<char> {
        self.text[self.pos..].chars().next()
    }

    fn peek_second(&self) -> Option<char> {
        self.text[self.pos..].chars().nth(1)
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.pos += c.len_utf8();
        Some(c)
    }

    fn push(&mut self, kind: TokenKind, offset: usize) {
        self.tokens.push(Token { kind, offset });
    }

    fn run(&mut self) -> Result<(), ParseError> {
        while let Some(c) = self.peek() {
            let start = self.pos;
            if c.is_whitespace() {
                self.bump();
            } else if is_ident_start(c) {
                while self.peek().is_some_and(is_ident_continue) {
                    self.bump();
                }
                self.push(
                    TokenKind::Ident(self.text[start..self.pos].to_owned()),
                    start,
                );
            } else if c.is_ascii_digit()
                || (c == '.' && self.peek_second().is_some_and(|d| d.is_ascii_digit()))
            {
                self.number(start)?;
            } else if c == '\'' {
                let s = self.delimited('\'', '\'', "string literal")?;
                self.push(TokenKind::Str(s), start);
            } else if c == '[' {
                let s = self.delimited('[', ']', "delimited identifier")?;
                self.check_identifier(&s, start)?;
                self.push(TokenKind::QuotedIdent(s), start);
            } else if c == '"' {
                let s = self.delimited('"', '"', "quoted identifier")?;
                self.check_identifier(&s, start)?;
                self.push(TokenKind::QuotedIdent(s), start);
            } else {
                let symbol = self.symbol(c, start)?;
                self.push(TokenKind::Symbol(symbol), start);
            }
        }
        self.push(TokenKind::Eof, self.text.len());
        Ok(())
    }

    fn check_identifier(&self, name: &str, start: usize) -> Result<(), ParseError> {
        if name.is_empty() {
            return Err(ParseError::at(self.text, start, "empty identifier"));
        }
        Ok(())
    }

    /// Reads `open ... close` where a doubled `close` stands for itself.
    fn delimited(&mut self, open: char, close: char, what: &str) -> Result<String, ParseError> {
        let start = self.pos;
        let opened = self.bump();
        debug_assert_eq!(opened, Some(open));
        let mut out = String::new();
        loop {
            match self.bump() {
                None => {
                    return Err(ParseError::at(
                        self.text,
                        start,
                        format!("unterminated {what}: expected a closing `{close}`"),
                    ));
                }
                Some(c) if c == close => {
                    if self.peek() == Some(close) {
                        self.bump();
                        out.push(close);
                    } else {
                        return Ok(out);
                    }
                }
                Some(c) => out.push(c),
            }
        }
    }

    fn digits(&mut self) -> usize {
        let start = self.pos;
        while self.peek().is_some_and(|c| c.is_ascii_digit()) {
            self.bump();
        }
        self.pos - start
    }

    fn number(&mut self, start: usize) -> Result<(), ParseError> {
        self.digits();
        let mut is_float = false;
        if self.peek() == Some('.') {
            is_float = true;
            self.bump();
            self.digits();
        }
        if matches!(self.peek(), Some('e' | 'E')) {
            let exponent_at = self.pos;
            self.bump();
            if matches!(self.peek(), Some('+' | '-')) {
                self.bump();
            }
            if self.digits() == 0 {
                return Err(ParseError::at(
                    self.text,
                    exponent_at,
                    "malformed number: expected digits after the exponent `e`",
                ));
            }
            is_float = true;
        }
        // `1.2.3` is a typo. (A letter may follow, as in T-SQL: `a=1AND b=2`.)
        if let Some(c) = self.peek().filter(|&c| c == '.') {
            return Err(ParseError::at(
                self.text,
                self.pos,
                format!(
                    "malformed number: unexpected `{c}` after `{}`",
                    &self.text[start..self.pos]
                ),
            ));
        }
        let literal = &self.text[start..self.pos];
        if is_float {
            match literal.parse::<f64>() {
                Ok(x) if x.is_finite() => self.push(TokenKind::Float(x), start),
                _ => {
                    return Err(ParseError::at(
                        self.text,
                        start,
                        format!("number {literal} is out of range for a float"),
                    ));
                }
            }
        } else {
            self.push(TokenKind::Int(literal.to_owned()), start);
        }
        Ok(())
    }

    fn symbol(&mut self, c: char, start: usize) -> Result<Symbol, ParseError> {
        self.bump();
        let next = self.peek();
        let (symbol, two_chars) = match (c, next) {
            ('<', Some('>')) => (Symbol::NotEq, true),
            ('<', Some('=')) => (Symbol::Le, true),
            ('>', Some('=')) => (Symbol::Ge, true),
            ('!', Some('=')) => (Symbol::NotEq, true),
            ('<', _) => (Symbol::Lt, false),
            ('>', _) => (Symbol::Gt, false),
            ('=', _) => (Symbol::Eq, false),
            ('+', _) => (Symbol::Plus, false),
            ('-', _) => (Symbol::Minus, false),
            ('*', _) => (Symbol::Star, false),
            ('/', _) => (Symbol::Slash, false),
            ('%', _) => (Symbol::Percent, false),
            ('(', _) => (Symbol::LParen, false),
            (')', _) => (Symbol::RParen, false),
            (',', _) => (Symbol::Comma, false),
            ('.', _) => (Symbol::Dot, false),
            (';', _) => (Symbol::Semicolon, false),
            _ => {
                return Err(ParseError::at(
                    self.text,
                    start,
                    format!("unexpected character `{}`", c.escape_debug()),
                ));
            }
        };
        if two_chars {
            self.bump();
        }
        Ok(symbol)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(text: &str) -> Vec<TokenKind> {
        tokenize(text)
            .unwrap()
            .into_iter()
            .map(|t| t.kind)
            .collect()
    }

    #[test]
    fn numbers_in_every_documented_form() {
        for (text, expected) in [
            ("1.", 1.0),
            (".5", 0.5),
            ("1.5", 1.5),
            ("1e3", 1000.0),
            ("1E+3", 1000.0),
            ("2.5e-3", 0.0025),
            ("1.e2", 100.0),
        ] {
            assert_eq!(
                kinds(text),
                vec![TokenKind::Float(expected), TokenKind::Eof],
                "{text}"
            );
        }
        assert_eq!(
            kinds("007"),
            vec![TokenKind::Int("007".to_owned()), TokenKind::Eof]
        );
    }

    #[test]
    fn offsets_are_byte_offsets() {
        let tokens = tokenize("é = 'x'").unwrap();
        let offsets: Vec<usize> = tokens.iter().map(|t| t.offset).collect();
        assert_eq!(offsets, vec![0, 3, 5, 8]);
    }

    #[test]
    fn two_character_operators() {
        assert_eq!(
            kinds("<> != <= >= < > ="),
            vec![
                TokenKind::Symbol(Symbol::NotEq),
                TokenKind::Symbol(Symbol::NotEq),
                TokenKind::Symbol(Symbol::Le),
                TokenKind::Symbol(Symbol::Ge),
                TokenKind::Symbol(Symbol::Lt),
                TokenKind::Symbol(Symbol::Gt),
                TokenKind::Symbol(Symbol::Eq),
                TokenKind::Eof,
            ]
        );
    }

    #[test]
    fn long_strings_are_shortened_in_error_descriptions() {
        let long = TokenKind::Str("a".repeat(50));
        assert_eq!(long.describe(), format!("string '{}...'", "a".repeat(20)));
        assert_eq!(TokenKind::Str("é".into()).describe(), "string 'é'");
    }
}
