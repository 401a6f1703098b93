//! The failure classifier: what an ordinary handler failure (`failed`, a
//! trap, a timeout, a memory overrun) does — Retry (block the session, maybe
//! schedule a retry), DeadLetter now, or Discard (skip it).
//!
//! Configuration, not code (SEMANTICS.md §3): rules map error types, exactly
//! or by glob pattern and ignoring case, to a disposition; the first
//! matching rule wins; otherwise the default, Retry unless configured.
//! Upstream's opt-in list of permanent error types is a preset
//! ([`upstream_permanent_rules`]) a configuration can switch on.

use std::fmt;

/// What happens to a failed event.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Disposition {
    /// ErrorResponse, the session blocks, a retry is scheduled if a policy matches.
    #[default]
    Retry,
    /// Dead-letter now (the session is not blocked).
    DeadLetter,
    /// SkipResponse with the classifier's reason; the session is not blocked.
    Discard,
}

impl fmt::Display for Disposition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Disposition::Retry => "Retry",
            Disposition::DeadLetter => "DeadLetter",
            Disposition::Discard => "Discard",
        })
    }
}

/// An error-type pattern: exact, or a glob (`*`, `?`, `[...]`), compared
/// ignoring case.
#[derive(Debug, Clone, PartialEq)]
pub struct ErrorTypePattern {
    text: String,
    kind: PatternKind,
}

#[derive(Debug, Clone, PartialEq)]
enum PatternKind {
    Exact(String),
    Glob(glob::Pattern),
}

/// A pattern that is not a valid glob.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid pattern '{pattern}': {reason}")]
pub struct PatternError {
    /// The pattern as written.
    pub pattern: String,
    /// What is wrong with it.
    pub reason: String,
}

const GLOB_OPTIONS: glob::MatchOptions = glob::MatchOptions {
    case_sensitive: false,
    require_literal_separator: false,
    require_literal_leading_dot: false,
};

impl ErrorTypePattern {
    /// Parses a pattern; one without `*`, `?` or `[` matches exactly.
    pub fn new(pattern: &str) -> Result<ErrorTypePattern, PatternError> {
        if pattern.trim().is_empty() {
            return Err(PatternError {
                pattern: pattern.to_owned(),
                reason: "must not be empty".to_owned(),
            });
        }
        let kind = if pattern.contains(['*', '?', '[']) {
            let glob = glob::Pattern::new(pattern).map_err(|e| PatternError {
                pattern: pattern.to_owned(),
                reason: e.msg.to_owned(),
            })?;
            PatternKind::Glob(glob)
        } else {
            PatternKind::Exact(pattern.to_lowercase())
        };
        Ok(ErrorTypePattern {
            text: pattern.to_owned(),
            kind,
        })
    }

    /// Whether `error_type` matches, ignoring case.
    pub fn matches(&self, error_type: &str) -> bool {
        match &self.kind {
            PatternKind::Exact(lower) => error_type.to_lowercase() == *lower,
            PatternKind::Glob(glob) => glob.matches_with(error_type, GLOB_OPTIONS),
        }
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }
}

impl fmt::Display for ErrorTypePattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// One classifier rule.
#[derive(Debug, Clone, PartialEq)]
pub struct ClassifierRule {
    /// The error types it applies to.
    pub error_type: ErrorTypePattern,
    /// The event types it is limited to (ignoring case); `None` for all.
    pub event_types: Option<Vec<String>>,
    /// What a matching failure does.
    pub disposition: Disposition,
}

/// Upstream's `DefaultPermanentFailureClassifier` list, as DeadLetter rules:
/// type names containing `Serialization`, `Deserialization` or
/// `Validation`; `FormatException`, `InvalidCastException`,
/// `ArgumentException` (and its `ArgumentNullException`,
/// `ArgumentOutOfRangeException`), `NotSupportedException`; and nimbus's own
/// `InvalidPayload` (a payload the handler could not decode).
pub fn upstream_permanent_rules() -> Vec<ClassifierRule> {
    const PATTERNS: [&str; 10] = [
        "*Serialization*",
        "*Deserialization*",
        "*Validation*",
        "FormatException",
        "InvalidCastException",
        "ArgumentException",
        "ArgumentNullException",
        "ArgumentOutOfRangeException",
        "NotSupportedException",
        "InvalidPayload",
    ];
    PATTERNS
        .iter()
        .filter_map(|p| ErrorTypePattern::new(p).ok())
        .map(|error_type| ClassifierRule {
            error_type,
            event_types: None,
            disposition: Disposition::DeadLetter,
        })
        .collect()
}

/// The classifier: rules in order, then the default.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Classifier {
    /// The rules, first match wins.
    pub rules: Vec<ClassifierRule>,
    /// The disposition when no rule matches.
    pub default: Disposition,
}

/// The classifier's answer for one failure.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Classification<'a> {
    /// What to do.
    pub disposition: Disposition,
    /// The rule that decided, `None` for the default.
    pub rule: Option<&'a ClassifierRule>,
}

impl Classification<'_> {
    /// Who decided, for the Discard SkipResponse's text
    /// (`... Classified as Discard by {this}.`) and for logs.
    pub fn decided_by(&self) -> String {
        match self.rule {
            Some(rule) => format!("nimbus classifier rule '{}'", rule.error_type),
            None => "nimbus classifier default".to_owned(),
        }
    }
}

fn same_name(a: &str, b: &str) -> bool {
    a.chars()
        .flat_map(char::to_lowercase)
        .eq(b.chars().flat_map(char::to_lowercase))
}

impl Classifier {
    /// Classifies a failure of type `error_type` of an event of `event_type`.
    pub fn classify(&self, error_type: &str, event_type: Option<&str>) -> Classification<'_> {
        let rule = self.rules.iter().find(|rule| {
            let in_scope = match (&rule.event_types, event_type) {
                (None, _) => true,
                (Some(scope), Some(t)) => scope.iter().any(|s| same_name(s, t)),
                (Some(_), None) => false,
            };
            in_scope && rule.error_type.matches(error_type)
        });
        Classification {
            disposition: rule.map_or(self.default, |r| r.disposition),
            rule,
        }
    }
}

#[cfg(test)]
mod tests;
