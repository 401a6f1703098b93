//! Configuration of the retry policy and the failure classifier: the
//! `[retry]` and `[classifier]` sections of `nimbus.toml`.
//!
//! Deserialized strictly (`deny_unknown_fields`, durations as `"5s"`,
//! `"5m"`, `"1h"`), then [`RetryConfig::validate`] and
//! [`ClassifierConfig::validate`] turn them into the engine's types or name
//! every bad key by its path, so a bad policy stops the host at start rather
//! than after a message was settled (upstream's F17). Both can be called
//! alone, e.g. by a `nimbus check` command.
//!
//! Every key, with its default:
//!
//! ```toml
#![doc = include_str!("policy_config.example.toml")]
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::MAX_DELAY;
use crate::classifier::{Classifier, ClassifierRule, Disposition, ErrorTypePattern};
use crate::retry::{
    Backoff, DEFAULT_BOUNDED_JITTER_FACTOR, ErrorMatch, ErrorRule, Jitter, RetryPolicies,
    RetryPolicy,
};

/// The `[retry]` section.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetryConfig {
    /// The fallback policy; absent means no retry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<PolicyConfig>,
    /// Policies per event type.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub event_types: BTreeMap<String, PolicyConfig>,
    /// Error rules, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<RetryRuleConfig>,
}

/// One retry policy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyConfig {
    /// Retries while `RetryCount < max_retries`.
    #[serde(default)]
    pub max_retries: u32,
    /// How the delay grows.
    #[serde(default)]
    pub backoff: BackoffConfig,
    /// The first delay.
    #[serde(default = "default_base_delay", with = "humantime_serde")]
    pub base_delay: Duration,
    /// The cap.
    #[serde(
        default,
        with = "humantime_serde",
        skip_serializing_if = "Option::is_none"
    )]
    pub max_delay: Option<Duration>,
    /// The random spread.
    #[serde(default)]
    pub jitter: JitterConfig,
    /// The spread of `jitter = "bounded"`.
    #[serde(default = "default_jitter_factor")]
    pub jitter_factor: f64,
}

fn default_base_delay() -> Duration {
    RetryPolicy::default().base_delay
}

fn default_jitter_factor() -> f64 {
    DEFAULT_BOUNDED_JITTER_FACTOR
}

impl Default for PolicyConfig {
    fn default() -> Self {
        PolicyConfig {
            max_retries: 0,
            backoff: BackoffConfig::default(),
            base_delay: default_base_delay(),
            max_delay: None,
            jitter: JitterConfig::default(),
            jitter_factor: default_jitter_factor(),
        }
    }
}

/// `backoff`: `"fixed"`, `"linear"` or `"exponential"`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BackoffConfig {
    /// Always the base delay.
    #[default]
    Fixed,
    /// `base × (n + 1)`.
    Linear,
    /// `base × 2ⁿ`.
    Exponential,
}

/// `jitter`: `"none"`, `"full"` or `"bounded"`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JitterConfig {
    /// No jitter.
    #[default]
    None,
    /// `[d, 2d)`.
    Full,
    /// `[d, d × (1 + jitter_factor))`.
    Bounded,
}

/// One `[[retry.rules]]` entry: exactly one of `error_type` or `contains`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetryRuleConfig {
    /// Match the handler's error type (exact or glob, ignoring case).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_type: Option<String>,
    /// Match a substring of `"{type}: {message}"`, ignoring case.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contains: Option<String>,
    /// Limit the rule to these event types.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event_types: Option<Vec<String>>,
    /// The policy when the rule matches (required).
    pub policy: PolicyConfig,
}

/// The `[classifier]` section.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClassifierConfig {
    /// Add upstream's permanent error types (after the configured rules) as DeadLetter.
    #[serde(default)]
    pub upstream_permanent_types: bool,
    /// The disposition when no rule matches.
    #[serde(default)]
    pub default: DispositionConfig,
    /// Rules, first match wins.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<ClassifierRuleConfig>,
}

/// A disposition: `"retry"`, `"dead_letter"` or `"discard"`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DispositionConfig {
    /// Block and maybe retry.
    #[default]
    Retry,
    /// Dead-letter now.
    #[serde(alias = "dead-letter")]
    DeadLetter,
    /// Skip with the classifier's reason.
    Discard,
}

/// One `[[classifier.rules]]` entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClassifierRuleConfig {
    /// The error type, exact or glob, ignoring case.
    pub error_type: String,
    /// Limit the rule to these event types.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event_types: Option<Vec<String>>,
    /// What a matching failure does.
    pub disposition: DispositionConfig,
}

/// One bad configuration value: where, and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The key path, e.g. `retry.event_types.OrderPlaced.jitter_factor`.
    pub path: String,
    /// What is wrong with it.
    pub problem: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.problem)
    }
}

/// Every bad value of a section (never empty).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, error) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{error}")?;
        }
        Ok(())
    }
}

#[derive(Default)]
struct Problems(Vec<ConfigError>);

impl Problems {
    fn add(&mut self, path: impl Into<String>, problem: impl Into<String>) {
        self.0.push(ConfigError {
            path: path.into(),
            problem: problem.into(),
        });
    }

    fn finish<T>(self, value: T) -> Result<T, ConfigErrors> {
        if self.0.is_empty() {
            Ok(value)
        } else {
            Err(ConfigErrors(self.0))
        }
    }
}

/// A TOML key as it would appear in a path (quoted when not a bare key).
fn key(name: &str) -> String {
    let bare = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if bare {
        name.to_owned()
    } else {
        format!("{name:?}")
    }
}

/// A long delay as days where whole (humantime counts a year as 365.25
/// days, so `"365d"` would read back as "11months 30days 3h 50m 24s"):
/// how configuration errors show a duration and its bound.
pub fn in_days(delay: Duration) -> String {
    const DAY: u64 = 24 * 60 * 60;
    if delay.subsec_nanos() == 0 && delay.as_secs().is_multiple_of(DAY) {
        format!("{}days", delay.as_secs() / DAY)
    } else {
        humantime::format_duration(delay).to_string()
    }
}

impl PolicyConfig {
    fn validate(&self, path: &str, problems: &mut Problems) -> RetryPolicy {
        if !(self.jitter_factor.is_finite() && self.jitter_factor >= 0.0) {
            problems.add(
                format!("{path}.jitter_factor"),
                "must be a finite number ≥ 0",
            );
        }
        // A retry further out than the engine schedules would run at
        // another time than configured: refused, not clamped (issue 28).
        for (key, delay) in [
            ("base_delay", Some(self.base_delay)),
            ("max_delay", self.max_delay),
        ] {
            if let Some(delay) = delay
                && delay > MAX_DELAY
            {
                problems.add(
                    format!("{path}.{key}"),
                    format!(
                        "{} is over the maximum of {} (the longest delay nimbus schedules a \
                         retry for)",
                        in_days(delay),
                        in_days(MAX_DELAY)
                    ),
                );
            }
        }
        // The cap applies after the backoff: below the first delay it makes
        // every retry wait the cap, which is never what was meant.
        if let Some(max_delay) = self.max_delay
            && max_delay < self.base_delay
        {
            problems.add(
                format!("{path}.max_delay"),
                format!(
                    "{} is below base_delay ({}): every retry would wait {0}; raise max_delay \
                     or lower base_delay",
                    humantime::format_duration(max_delay),
                    humantime::format_duration(self.base_delay)
                ),
            );
        }
        RetryPolicy {
            max_retries: self.max_retries,
            backoff: match self.backoff {
                BackoffConfig::Fixed => Backoff::Fixed,
                BackoffConfig::Linear => Backoff::Linear,
                BackoffConfig::Exponential => Backoff::Exponential,
            },
            base_delay: self.base_delay,
            max_delay: self.max_delay,
            jitter: match self.jitter {
                JitterConfig::None => Jitter::None,
                JitterConfig::Full => Jitter::Full,
                JitterConfig::Bounded => Jitter::Bounded(self.jitter_factor),
            },
        }
    }
}

fn validate_scope(
    scope: &Option<Vec<String>>,
    path: &str,
    problems: &mut Problems,
) -> Option<Vec<String>> {
    let scope = scope.as_ref()?;
    if scope.is_empty() {
        problems.add(
            format!("{path}.event_types"),
            "must name at least one event type (omit it to apply to all)",
        );
    }
    for (i, name) in scope.iter().enumerate() {
        if name.trim().is_empty() {
            problems.add(format!("{path}.event_types[{i}]"), "must not be empty");
        }
    }
    Some(scope.clone())
}

impl RetryConfig {
    /// Checks every value and builds the policies, or names every bad key.
    pub fn validate(&self) -> Result<RetryPolicies, ConfigErrors> {
        let mut problems = Problems::default();
        let default = self
            .default
            .as_ref()
            .map(|p| p.validate("retry.default", &mut problems));

        let mut event_types: Vec<(String, RetryPolicy)> = Vec::new();
        for (name, policy) in &self.event_types {
            let path = format!("retry.event_types.{}", key(name));
            if name.trim().is_empty() {
                problems.add(&path, "an event type name must not be empty");
            }
            if let Some((earlier, _)) = event_types
                .iter()
                .find(|(other, _)| other.to_lowercase() == name.to_lowercase())
            {
                problems.add(
                    &path,
                    format!("same event type as '{earlier}' (names are compared ignoring case)"),
                );
            }
            let policy = policy.validate(&path, &mut problems);
            event_types.push((name.clone(), policy));
        }

        let mut rules = Vec::new();
        for (i, rule) in self.rules.iter().enumerate() {
            let path = format!("retry.rules[{i}]");
            let matches = match (&rule.error_type, &rule.contains) {
                (Some(pattern), None) => match ErrorTypePattern::new(pattern) {
                    Ok(p) => Some(ErrorMatch::ErrorType(p)),
                    Err(e) => {
                        problems.add(format!("{path}.error_type"), e.to_string());
                        None
                    }
                },
                (None, Some(text)) => Some(ErrorMatch::Text(text.clone())),
                _ => {
                    problems.add(&path, "set exactly one of `error_type` or `contains`");
                    None
                }
            };
            let event_types = validate_scope(&rule.event_types, &path, &mut problems);
            let policy = rule
                .policy
                .validate(&format!("{path}.policy"), &mut problems);
            if let Some(matches) = matches {
                rules.push(ErrorRule {
                    matches,
                    event_types,
                    policy,
                });
            }
        }
        problems.finish(RetryPolicies {
            rules,
            event_types,
            default,
        })
    }
}

impl From<DispositionConfig> for Disposition {
    fn from(value: DispositionConfig) -> Self {
        match value {
            DispositionConfig::Retry => Disposition::Retry,
            DispositionConfig::DeadLetter => Disposition::DeadLetter,
            DispositionConfig::Discard => Disposition::Discard,
        }
    }
}

impl ClassifierConfig {
    /// Checks every value and builds the classifier (configured rules first,
    /// then the upstream preset if enabled), or names every bad key.
    pub fn validate(&self) -> Result<Classifier, ConfigErrors> {
        let mut problems = Problems::default();
        let mut rules = Vec::new();
        for (i, rule) in self.rules.iter().enumerate() {
            let path = format!("classifier.rules[{i}]");
            let event_types = validate_scope(&rule.event_types, &path, &mut problems);
            match ErrorTypePattern::new(&rule.error_type) {
                Ok(error_type) => rules.push(ClassifierRule {
                    error_type,
                    event_types,
                    disposition: rule.disposition.into(),
                }),
                Err(e) => problems.add(format!("{path}.error_type"), e.to_string()),
            }
        }
        if self.upstream_permanent_types {
            rules.extend(crate::classifier::upstream_permanent_rules());
        }
        problems.finish(Classifier {
            rules,
            default: self.default.into(),
        })
    }
}

#[cfg(test)]
mod tests;
