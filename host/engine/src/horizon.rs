//! How far ahead the engine schedules or promises anything.
//!
//! A handler's retry-after hint and pending-handoff `expected-within`, and
//! the configured retry and transient delays, are durations from outside:
//! any `u64` of milliseconds a guest returns, any span humantime parses.
//! Turned into times with a plain `+` they overflowed and panicked the host
//! (issue 28). So each is capped at [`MAX_DELAY`] before it becomes a time,
//! and the time is built saturating ([`after`]). The configuration refuses a
//! retry delay over the cap (`nimbus check`); a guest's value, and the
//! engine's own spans the configuration leaves uncapped (the transient
//! backoff), are clamped in flight.

use std::time::{Duration, SystemTime};

/// The longest delay the engine acts on: a scheduled retry (policy delay or
/// retry-after hint), the hold before a transient failure is handed back,
/// and a handoff's `expected-within`. A handler's longer value is taken as
/// this one; a configured longer one is refused. 365 days: longer than any
/// retry or handoff an operator waits for, far inside every clock's range.
pub const MAX_DELAY: Duration = Duration::from_secs(365 * 24 * 60 * 60);

/// `delay`, at most [`MAX_DELAY`].
pub(crate) fn capped(delay: Duration) -> Duration {
    delay.min(MAX_DELAY)
}

/// The time `delay` (capped at [`MAX_DELAY`]) after `now`.
pub(crate) fn after(now: SystemTime, delay: Duration) -> SystemTime {
    nimbus_wire::saturating_add(now, capped(delay))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_delay_past_the_horizon_is_the_horizon() {
        let now = SystemTime::now();
        assert_eq!(after(now, Duration::MAX), now + MAX_DELAY);
        assert_eq!(after(now, Duration::from_millis(u64::MAX)), now + MAX_DELAY);
        let minute = Duration::from_secs(60);
        assert_eq!(after(now, minute), now + minute);
        assert_eq!(capped(Duration::MAX), MAX_DELAY);
    }
}
