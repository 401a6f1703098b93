//! Retry policy: how long to wait before the next automatic retry, and
//! which policy applies to a failure (SEMANTICS.md §5, nimbus-semantics.md §7).
//!
//! Pure arithmetic: the caller passes the attempt number, the handler's
//! retry-after hint and a [`RandomSource`], so every delay is reproducible
//! in tests. The math never panics: products and sums saturate, and a
//! saturated delay is capped by `max_delay` like any other (upstream's
//! exponential backoff overflowed, F-flag in §7.1).

use std::hash::{BuildHasher, RandomState};
use std::time::Duration;

use nimbus_wire::Failure;

use crate::classifier::ErrorTypePattern;

/// How the base delay grows with the attempt number `n` (0 for the first retry).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Backoff {
    /// Always the base delay.
    #[default]
    Fixed,
    /// `base × (n + 1)`.
    Linear,
    /// `base × 2ⁿ`.
    Exponential,
}

/// Random spread added on top of the backoff delay `d`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub enum Jitter {
    /// No jitter; the random source is never consulted.
    #[default]
    None,
    /// A delay in `[d, 2d)`.
    Full,
    /// A delay in `[d, d × (1 + factor))`. The factor must be finite and ≥ 0
    /// (configuration validation enforces it; the math treats anything else as 0).
    Bounded(f64),
}

/// Upstream's default factor for [`Jitter::Bounded`].
pub const DEFAULT_BOUNDED_JITTER_FACTOR: f64 = 0.25;

/// A retry policy (upstream's `RetryPolicy`).
#[derive(Debug, Clone, PartialEq)]
pub struct RetryPolicy {
    /// How many automatic retries; the decision is `retry_count < max_retries`,
    /// so there are at most `max_retries + 1` handler runs.
    pub max_retries: u32,
    /// How the delay grows.
    pub backoff: Backoff,
    /// The delay of the first retry (before jitter).
    pub base_delay: Duration,
    /// The longest delay, applied after jitter and after the retry-after hint.
    pub max_delay: Option<Duration>,
    /// The random spread.
    pub jitter: Jitter,
}

impl Default for RetryPolicy {
    /// Upstream's defaults: never retries, Fixed, 1 minute, no cap, no jitter.
    fn default() -> Self {
        RetryPolicy {
            max_retries: 0,
            backoff: Backoff::Fixed,
            base_delay: Duration::from_secs(60),
            max_delay: None,
            jitter: Jitter::None,
        }
    }
}

/// A source of uniform random numbers in `[0, 1)`.
///
/// Injected so tests are exact; any `FnMut() -> f64` is one.
pub trait RandomSource {
    /// The next number in `[0, 1)`.
    fn next_unit(&mut self) -> f64;
}

impl<F: FnMut() -> f64> RandomSource for F {
    fn next_unit(&mut self) -> f64 {
        self()
    }
}

/// The production random source: std's randomly keyed SipHash over a
/// counter. Jitter only spreads retries apart; it needs no cryptographic
/// quality, so this avoids a dependency.
#[derive(Debug, Clone)]
pub struct StdRandom {
    state: RandomState,
    counter: u64,
}

impl StdRandom {
    /// A source keyed from the OS's randomness.
    pub fn new() -> Self {
        StdRandom {
            state: RandomState::new(),
            counter: 0,
        }
    }
}

impl Default for StdRandom {
    fn default() -> Self {
        StdRandom::new()
    }
}

impl RandomSource for StdRandom {
    fn next_unit(&mut self) -> f64 {
        self.counter = self.counter.wrapping_add(1);
        let bits = self.state.hash_one(self.counter);
        // The top 53 bits as a fraction: uniform in [0, 1).
        (bits >> 11) as f64 / (1u64 << 53) as f64
    }
}

const NANOS_PER_SEC: u128 = 1_000_000_000;

fn to_duration(nanos: u128) -> Duration {
    match u64::try_from(nanos / NANOS_PER_SEC) {
        // The remainder is below 10⁹ and fits a u32.
        Ok(secs) => Duration::new(secs, (nanos % NANOS_PER_SEC) as u32),
        Err(_) => Duration::MAX,
    }
}

/// The largest `f64` strictly below 1.
const BELOW_ONE: f64 = 1.0 - f64::EPSILON / 2.0;

impl RetryPolicy {
    /// Whether a failure whose inbound `RetryCount` is `retry_count` may be retried.
    pub fn allows_retry(&self, retry_count: u32) -> bool {
        retry_count < self.max_retries
    }

    /// The backoff delay of attempt `attempt` (0-based, the inbound
    /// `RetryCount`) before jitter and cap, in nanoseconds, saturating.
    fn backoff_nanos(&self, attempt: u32) -> u128 {
        let base = self.base_delay.as_nanos();
        match self.backoff {
            Backoff::Fixed => base,
            Backoff::Linear => base.saturating_mul(u128::from(attempt) + 1),
            Backoff::Exponential => match 1u128.checked_shl(attempt) {
                Some(factor) => base.saturating_mul(factor),
                None if base == 0 => 0,
                None => u128::MAX,
            },
        }
    }

    /// The delay before retry attempt `attempt` (0-based: the inbound
    /// `RetryCount`), upstream's `GetDelay(n)`: backoff, then jitter
    /// `j = floor(d × f × U)` kept below `d × f`, then the `max_delay` cap.
    pub fn delay(&self, attempt: u32, random: &mut dyn RandomSource) -> Duration {
        let d = self.backoff_nanos(attempt);
        let factor = match self.jitter {
            Jitter::None => None,
            Jitter::Full => Some(1.0),
            Jitter::Bounded(f) if f.is_finite() && f >= 0.0 => Some(f),
            Jitter::Bounded(_) => Some(0.0),
        };
        let mut total = d;
        if let Some(factor) = factor {
            let unit = random.next_unit();
            let unit = if unit.is_nan() {
                0.0
            } else {
                unit.clamp(0.0, BELOW_ONE)
            };
            let max_jitter = d as f64 * factor;
            let mut jitter = if unit == 0.0 {
                0.0
            } else {
                (max_jitter * unit).floor()
            };
            if max_jitter > 0.0 && jitter >= max_jitter {
                jitter = max_jitter.ceil() - 1.0;
            }
            // Float-to-int `as` saturates (and maps NaN to 0): overflow-safe by construction.
            total = d.saturating_add(jitter as u128);
        }
        self.capped(to_duration(total))
    }

    fn capped(&self, delay: Duration) -> Duration {
        match self.max_delay {
            Some(cap) if delay > cap => cap,
            _ => delay,
        }
    }

    /// The delay honouring the handler's retry-after `hint`: the longer of
    /// the policy delay and the hint, capped at `max_delay` (SEMANTICS.md §5).
    pub fn delay_with_hint(
        &self,
        attempt: u32,
        hint: Option<Duration>,
        random: &mut dyn RandomSource,
    ) -> Duration {
        let policy = self.delay(attempt, random);
        self.capped(hint.map_or(policy, |hint| policy.max(hint)))
    }

    /// The retry decision for a failure whose inbound `RetryCount` is
    /// `retry_count`: the delay of the next retry, or `None` when the budget
    /// is spent.
    pub fn next_retry(
        &self,
        retry_count: u32,
        hint: Option<Duration>,
        random: &mut dyn RandomSource,
    ) -> Option<Duration> {
        self.allows_retry(retry_count)
            .then(|| self.delay_with_hint(retry_count, hint, random))
    }
}

/// Upstream's `GetDelayMinutes`: a delay rounded up to whole minutes, for
/// senders that can only schedule by the minute.
pub fn whole_minutes(delay: Duration) -> u64 {
    u64::try_from(delay.as_nanos().div_ceil(60 * NANOS_PER_SEC)).unwrap_or(u64::MAX)
}

/// What an error rule matches.
#[derive(Debug, Clone, PartialEq)]
pub enum ErrorMatch {
    /// The handler's error type, exactly or by glob pattern, ignoring case.
    ErrorType(ErrorTypePattern),
    /// A substring of the error text `"{type}: {message}"`, ignoring case.
    /// An empty substring matches every failure (as upstream).
    Text(String),
}

/// A retry policy chosen by what failed.
#[derive(Debug, Clone, PartialEq)]
pub struct ErrorRule {
    /// What the rule matches.
    pub matches: ErrorMatch,
    /// The event types the rule is limited to (ignoring case); `None` for all.
    pub event_types: Option<Vec<String>>,
    /// The policy when the rule matches.
    pub policy: RetryPolicy,
}

/// Where the chosen policy came from, for logs and the audit trail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PolicySource<'a> {
    /// Error rule number `index` (0-based, configuration order), matched on the error type.
    ErrorTypeRule(usize),
    /// Error rule number `index`, matched on the error text.
    ErrorTextRule(usize),
    /// The policy of this event type.
    EventType(&'a str),
    /// The default policy.
    Default,
}

/// The policy for one failure and why it was chosen.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PolicyMatch<'a> {
    /// The policy.
    pub policy: &'a RetryPolicy,
    /// Why this one.
    pub source: PolicySource<'a>,
}

/// Every configured retry policy, and the lookup of the one that applies.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RetryPolicies {
    /// Error rules, in order.
    pub rules: Vec<ErrorRule>,
    /// Per event type (names compared ignoring case; the first wins).
    pub event_types: Vec<(String, RetryPolicy)>,
    /// The fallback; `None` means no retry.
    pub default: Option<RetryPolicy>,
}

fn lowercase(text: &str) -> String {
    text.to_lowercase()
}

fn same_name(a: &str, b: &str) -> bool {
    a.chars()
        .flat_map(char::to_lowercase)
        .eq(b.chars().flat_map(char::to_lowercase))
}

impl ErrorRule {
    fn in_scope(&self, event_type: Option<&str>) -> bool {
        match (&self.event_types, event_type) {
            (None, _) => true,
            (Some(scope), Some(event_type)) => scope.iter().any(|t| same_name(t, event_type)),
            (Some(_), None) => false,
        }
    }
}

impl RetryPolicies {
    /// The policy for `failure` of an event of `event_type` (SEMANTICS.md §5):
    /// error rules matched on the error type, in order; then error rules
    /// matched on the text `"{type}: {message}"`, in order (each only within
    /// its event types); then the event type's policy; then the default.
    /// `None`: no retry.
    pub fn policy_for(
        &self,
        event_type: Option<&str>,
        failure: &Failure,
    ) -> Option<PolicyMatch<'_>> {
        let scoped = || {
            self.rules
                .iter()
                .enumerate()
                .filter(move |(_, rule)| rule.in_scope(event_type))
        };
        let by_type = scoped().find_map(|(index, rule)| match &rule.matches {
            ErrorMatch::ErrorType(pattern) if pattern.matches(&failure.error_type) => {
                Some(PolicyMatch {
                    policy: &rule.policy,
                    source: PolicySource::ErrorTypeRule(index),
                })
            }
            _ => None,
        });
        if by_type.is_some() {
            return by_type;
        }
        let text = lowercase(&failure.text());
        let by_text = scoped().find_map(|(index, rule)| match &rule.matches {
            ErrorMatch::Text(needle) if text.contains(&lowercase(needle)) => Some(PolicyMatch {
                policy: &rule.policy,
                source: PolicySource::ErrorTextRule(index),
            }),
            _ => None,
        });
        if by_text.is_some() {
            return by_text;
        }
        let by_event_type = event_type.filter(|t| !t.is_empty()).and_then(|event_type| {
            self.event_types
                .iter()
                .find(|(name, _)| same_name(name, event_type))
                .map(|(name, policy)| PolicyMatch {
                    policy,
                    source: PolicySource::EventType(name),
                })
        });
        by_event_type.or_else(|| {
            self.default.as_ref().map(|policy| PolicyMatch {
                policy,
                source: PolicySource::Default,
            })
        })
    }
}

#[cfg(test)]
mod tests;
