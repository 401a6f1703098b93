//! The configured decisions one endpoint applies to failures: retry
//! policies, the failure classifier, and the backoff before a transient
//! failure is handed back to the broker.

use std::sync::Mutex;
use std::time::Duration;

use nimbus_wire::Failure;

use crate::classifier::Classifier;
use crate::retry::{RetryPolicies, StdRandom};

/// How long the engine holds a session after a transient failure before it
/// abandons the message: `base × 2^(delivery − 1)`, at most `max`, and at
/// least the handler's retry-after hint (still capped at `max`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TransientBackoff {
    /// The first backoff.
    pub base: Duration,
    /// The cap.
    pub max: Duration,
}

impl Default for TransientBackoff {
    fn default() -> Self {
        TransientBackoff {
            base: Duration::from_millis(500),
            max: Duration::from_secs(30),
        }
    }
}

impl TransientBackoff {
    /// The backoff before abandoning delivery number `delivery_count` (1 for
    /// the first delivery), never over [`crate::MAX_DELAY`].
    pub fn delay(&self, delivery_count: u32, hint: Option<Duration>) -> Duration {
        let doublings = delivery_count.saturating_sub(1).min(31);
        let backoff = self.base.saturating_mul(1 << doublings).min(self.max);
        crate::horizon::capped(hint.map_or(backoff, |hint| backoff.max(hint)).min(self.max))
    }
}

/// Retry policies, classifier and transient backoff, with the random source
/// retry jitter draws from.
#[derive(Debug)]
pub struct Policies {
    /// The retry policies.
    pub retry: RetryPolicies,
    /// The failure classifier.
    pub classifier: Classifier,
    /// The backoff before abandoning a transient failure.
    pub transient: TransientBackoff,
    random: Mutex<StdRandom>,
}

impl Default for Policies {
    fn default() -> Self {
        Policies::new(
            RetryPolicies::default(),
            Classifier::default(),
            TransientBackoff::default(),
        )
    }
}

impl Policies {
    /// Policies from their parts.
    pub fn new(retry: RetryPolicies, classifier: Classifier, transient: TransientBackoff) -> Self {
        Policies {
            retry,
            classifier,
            transient,
            random: Mutex::new(StdRandom::new()),
        }
    }

    /// The delay before the next automatic retry of a failure at attempt
    /// `retry_count` (the inbound `RetryCount`), honouring the handler's
    /// retry-after `hint`, never over [`crate::MAX_DELAY`] (an exponential
    /// policy without `max_delay`, or a handler's hint, can ask for more);
    /// `None` when no policy matches or its budget is spent.
    pub fn retry_delay(
        &self,
        event_type: Option<&str>,
        failure: &Failure,
        retry_count: u32,
        hint: Option<Duration>,
    ) -> Option<Duration> {
        let matched = self.retry.policy_for(event_type, failure)?;
        // Jitter draws are independent; a poisoned lock still holds a usable
        // generator.
        let mut random = self
            .random
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        matched
            .policy
            .next_retry(retry_count, hint, &mut *random)
            .map(crate::horizon::capped)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transient_backoff_doubles_per_delivery_up_to_the_cap_and_honours_hints() {
        let backoff = TransientBackoff {
            base: Duration::from_millis(100),
            max: Duration::from_secs(1),
        };
        assert_eq!(backoff.delay(1, None), Duration::from_millis(100));
        assert_eq!(backoff.delay(3, None), Duration::from_millis(400));
        assert_eq!(backoff.delay(40, None), Duration::from_secs(1));
        assert_eq!(
            backoff.delay(1, Some(Duration::from_millis(700))),
            Duration::from_millis(700)
        );
        assert_eq!(
            backoff.delay(1, Some(Duration::from_secs(9))),
            Duration::from_secs(1)
        );
    }

    /// Issue 28: a handler's huge retry-after was scheduled as given, and
    /// the time it made panicked the engine and the API.
    #[test]
    fn a_huge_retry_after_hint_is_capped_at_the_max_delay() {
        let retry = RetryPolicies {
            rules: Vec::new(),
            event_types: Vec::new(),
            default: Some(crate::RetryPolicy {
                max_retries: 3,
                ..crate::RetryPolicy::default()
            }),
        };
        let policies = Policies::new(retry, Classifier::default(), TransientBackoff::default());
        let failure = Failure::new("EchoError", "asked to fail");
        let huge = Some(Duration::from_millis(u64::MAX));
        assert_eq!(
            policies.retry_delay(Some("Echo"), &failure, 0, huge),
            Some(crate::MAX_DELAY)
        );
        let unbounded = TransientBackoff {
            base: Duration::from_secs(1),
            max: Duration::MAX,
        };
        assert_eq!(unbounded.delay(1, huge), crate::MAX_DELAY);
        assert_eq!(unbounded.delay(200, None), crate::MAX_DELAY);
    }
}
