//! `LIKE` patterns: `%` is any run of characters, `_` is exactly one, and the
//! escape character makes the character after it literal.
//!
//! Matching is by Unicode scalar value and case-sensitive (ordinal), like
//! every other string comparison in this crate. The matcher is the classic
//! iterative wildcard algorithm that backtracks only to the last `%`, so it
//! runs in O(pattern × text) time without recursion, whatever the input.

/// One element of a compiled pattern.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Token {
    /// This exact character.
    Char(char),
    /// `_`: any one character.
    One,
    /// `%`: any run of characters, possibly empty.
    Any,
}

/// A compiled LIKE pattern.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Pattern {
    tokens: Vec<Token>,
}

/// The pattern ends in its escape character, which escapes nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DanglingEscape;

impl Pattern {
    /// Compiles `pattern`, with `escape` as the escape character if given.
    pub(crate) fn compile(pattern: &str, escape: Option<char>) -> Result<Pattern, DanglingEscape> {
        let mut tokens = Vec::with_capacity(pattern.len());
        let mut chars = pattern.chars();
        while let Some(c) = chars.next() {
            let token = if Some(c) == escape {
                Token::Char(chars.next().ok_or(DanglingEscape)?)
            } else if c == '%' {
                // `%%` matches what `%` matches; one is cheaper to run.
                if tokens.last() == Some(&Token::Any) {
                    continue;
                }
                Token::Any
            } else if c == '_' {
                Token::One
            } else {
                Token::Char(c)
            };
            tokens.push(token);
        }
        Ok(Pattern { tokens })
    }

    /// Whether all of `text` matches the pattern.
    pub(crate) fn matches(&self, text: &str) -> bool {
        let tokens = &self.tokens;
        let mut ti = 0; // next pattern token
        let mut si = 0; // byte offset of the next text character
        // After a `%`: the token after it, and the text offset it was tried at.
        let mut backtrack: Option<(usize, usize)> = None;
        loop {
            let next_char = text[si..].chars().next();
            let advanced = match (tokens.get(ti), next_char) {
                (Some(Token::Any), _) => {
                    backtrack = Some((ti + 1, si));
                    ti += 1;
                    continue;
                }
                (Some(Token::One), Some(c)) => Some(c),
                (Some(Token::Char(p)), Some(c)) if *p == c => Some(c),
                (None, None) => return true,
                _ => None,
            };
            if let Some(c) = advanced {
                ti += 1;
                si += c.len_utf8();
                continue;
            }
            // Mismatch: let the last `%` swallow one more character.
            match backtrack {
                Some((after_any, tried_at)) => match text[tried_at..].chars().next() {
                    Some(c) => {
                        let retry_at = tried_at + c.len_utf8();
                        backtrack = Some((after_any, retry_at));
                        ti = after_any;
                        si = retry_at;
                    }
                    None => return false,
                },
                None => return false,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn like(text: &str, pattern: &str) -> bool {
        Pattern::compile(pattern, None).unwrap().matches(text)
    }

    #[test]
    fn percent_matches_any_run_including_empty() {
        assert!(like("Order", "Or%"));
        assert!(like("Or", "Or%"));
        assert!(like("OrderPlaced", "%Placed"));
        assert!(like("OrderPlaced", "%der%"));
        assert!(like("", "%"));
        assert!(!like("Order", "%x%"));
    }

    #[test]
    fn underscore_matches_exactly_one_character() {
        assert!(like("abc", "a_c"));
        assert!(!like("ac", "a_c"));
        assert!(!like("abbc", "a_c"));
        assert!(like("aéc", "a_c"), "one character, two bytes");
    }

    #[test]
    fn matching_is_case_sensitive_and_whole_string() {
        assert!(!like("order", "Order"));
        assert!(!like("Orders", "Order"));
        assert!(like("Order", "Order"));
    }

    #[test]
    fn backtracking_finds_later_occurrences() {
        assert!(like("abcabcabd", "%abd"));
        assert!(like("aaa", "%a%a%a%"));
        assert!(!like("aa", "%a%a%a%"));
        assert!(like("mississippi", "m%iss%ppi"));
    }

    #[test]
    fn escape_makes_wildcards_literal() {
        let p = Pattern::compile("ABC\\%", Some('\\')).unwrap();
        assert!(p.matches("ABC%"));
        assert!(!p.matches("ABCD"));
        let p = Pattern::compile("a!_b", Some('!')).unwrap();
        assert!(p.matches("a_b"));
        assert!(!p.matches("axb"));
        let p = Pattern::compile("a!!b", Some('!')).unwrap();
        assert!(p.matches("a!b"));
    }

    #[test]
    fn escape_at_end_of_pattern_is_rejected() {
        assert_eq!(Pattern::compile("abc!", Some('!')), Err(DanglingEscape));
    }

    #[test]
    fn pathological_pattern_finishes() {
        let text = "a".repeat(1000);
        let pattern = format!("{}b", "%a".repeat(100));
        assert!(!like(&text, &pattern));
    }
}
