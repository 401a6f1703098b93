//! Text from the host, a peer or a guest, made safe for a terminal.
//!
//! Session ids, event types, error texts and handler logs are chosen by
//! whoever publishes or whatever a handler returns. Printed raw, an escape
//! sequence in one can move the cursor, rewrite the lines above it, set the
//! window title or hide text, and a bidi override can make a table say
//! something other than what it holds: an operator at 3 a.m. must see what
//! is there. So every byte the CLI writes passes [`for_terminal`], table
//! cells pass [`for_cell`], and JSON passes [`for_json`], which keeps it
//! valid JSON.

use std::borrow::Cow;
use std::fmt::Write as _;

/// Bidi embeddings, overrides and isolates, and the Arabic letter mark:
/// invisible, they reorder what a terminal shows.
fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// What no terminal should receive raw: C0 and C1 controls and DEL
/// (`char::is_control`), and bidi controls.
fn is_unsafe(c: char) -> bool {
    c.is_control() || is_bidi_control(c)
}

/// `s` with every unsafe character but newline and tab written out as
/// `\x1b` (below U+0100) or `\u{202e}`, so it shows what it is.
pub(crate) fn for_terminal(s: &str) -> Cow<'_, str> {
    escape(s, |c| c == '\n' || c == '\t')
}

/// [`for_terminal`] for one table cell, which must stay one line at its
/// width: newline and tab are written out too.
pub(crate) fn for_cell(s: &str) -> Cow<'_, str> {
    escape(s, |_| false)
}

fn escape(s: &str, keep: impl Fn(char) -> bool) -> Cow<'_, str> {
    if !s.chars().any(|c| is_unsafe(c) && !keep(c)) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if !is_unsafe(c) || keep(c) {
            out.push(c);
        } else if c == '\n' {
            out.push_str("\\n");
        } else if c == '\t' {
            out.push_str("\\t");
        } else if c == '\r' {
            out.push_str("\\r");
        } else if u32::from(c) < 0x100 {
            let _ = write!(out, "\\x{:02x}", u32::from(c));
        } else {
            let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
        }
    }
    Cow::Owned(out)
}

/// Serialized JSON with DEL, C1 and bidi controls written as `\uXXXX`.
/// `serde_json` escapes C0 controls itself but writes these raw; outside
/// strings JSON holds none of them, so each one found is in a string, where
/// `\uXXXX` is the same character to any JSON reader.
pub(crate) fn for_json(json: &str) -> Cow<'_, str> {
    if !json.chars().any(|c| is_unsafe(c) && c != '\n') {
        return Cow::Borrowed(json);
    }
    let mut out = String::with_capacity(json.len() + 8);
    for c in json.chars() {
        if is_unsafe(c) && c != '\n' {
            let _ = write!(out, "\\u{:04x}", u32::from(c));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_text_is_borrowed_unchanged() {
        let text = "s-1 OrderPlaced café 注文\n\tindented";
        assert!(matches!(for_terminal(text), Cow::Borrowed(t) if t == text));
        let json = "{\n  \"session\": \"café 注文\"\n}";
        assert!(matches!(for_json(json), Cow::Borrowed(t) if t == json));
    }

    #[test]
    fn escape_sequences_and_bidi_controls_are_written_out() {
        let hostile = "s\u{1b}[2J\u{1b}]0;pwned\u{7}\r\u{9b}31m\u{7f}\u{202e}gpj.exe";
        let shown = for_terminal(hostile);
        assert_eq!(
            shown,
            "s\\x1b[2J\\x1b]0;pwned\\x07\\r\\x9b31m\\x7f\\u{202e}gpj.exe"
        );
        assert!(!shown.chars().any(is_unsafe), "{shown:?}");
    }

    #[test]
    fn a_cell_stays_on_one_line() {
        assert_eq!(for_cell("a\nb\tc"), "a\\nb\\tc");
        assert_eq!(for_terminal("a\nb\tc"), "a\nb\tc");
    }

    #[test]
    fn json_stays_json_and_means_the_same() {
        let value = serde_json::json!({
            "session": "s\u{1b}[31m\u{7f}\u{85}\u{202e}x",
            "lines": ["a\nb"],
        });
        let pretty = serde_json::to_string_pretty(&value).expect("serializes");
        let safe = for_json(&pretty);
        assert!(!safe.chars().any(|c| is_unsafe(c) && c != '\n'), "{safe:?}");
        let back: serde_json::Value = serde_json::from_str(&safe).expect("still JSON");
        assert_eq!(back, value);
    }
}
