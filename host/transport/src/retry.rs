//! Retrying a transport call that keeps failing, as a consumer's loop does
//! (accepting a session, opening a receiver) while the broker cannot write
//! its log or the namespace cannot be reached: how long to wait before the
//! next attempt, and when to say so in the log (issue 40).
//!
//! Waiting a fixed half second and logging every failure, an idle host on
//! a full disk wrote ~140 lines a second, refilling the disk its log shares
//! with the broker. [`RetryBackoff`] doubles the wait up to a cap and starts
//! again after a success; [`FailureLog`] lets one line through per
//! interval, counting those it held back, and one when the failure ends.
//! Both take the time as an argument, so their schedules are tested
//! without a clock; neither logs itself.

use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// The wait before the next attempt of a call that failed: `first` after
/// the first failure, doubling per failure in a row up to `max`, `first`
/// again after a success.
#[derive(Debug, Clone)]
pub struct RetryBackoff {
    first: Duration,
    max: Duration,
    failures: u32,
}

impl RetryBackoff {
    /// The first wait after a failure: short enough that a blip costs
    /// little.
    pub const FIRST: Duration = Duration::from_millis(500);
    /// The longest wait: a failure that lasts (a full disk) is tried twice
    /// a minute, and a call that works again is back within half a minute.
    pub const MAX: Duration = Duration::from_secs(30);

    /// A backoff from `first` to `max` (`max` below `first` is `first`).
    pub fn new(first: Duration, max: Duration) -> RetryBackoff {
        RetryBackoff {
            first,
            max: max.max(first),
            failures: 0,
        }
    }

    /// The wait after `failures` failures in a row (the first is 1):
    /// `first × 2^(failures − 1)`, at most `max`; zero after none.
    pub fn delay(first: Duration, max: Duration, failures: u32) -> Duration {
        if failures == 0 {
            return Duration::ZERO;
        }
        // 2^31 times any wait is past every cap worth having.
        let doublings = (failures - 1).min(31);
        first.saturating_mul(1 << doublings).min(max.max(first))
    }

    /// Notes a failure; the wait before the next attempt.
    pub fn failed(&mut self) -> Duration {
        self.failures = self.failures.saturating_add(1);
        RetryBackoff::delay(self.first, self.max, self.failures)
    }

    /// Notes a success: the next failure waits `first` again.
    pub fn succeeded(&mut self) {
        self.failures = 0;
    }
}

impl Default for RetryBackoff {
    /// From [`RetryBackoff::FIRST`] to [`RetryBackoff::MAX`].
    fn default() -> Self {
        RetryBackoff::new(RetryBackoff::FIRST, RetryBackoff::MAX)
    }
}

/// When to log a failure that repeats, shared by everything that meets it
/// (every worker of a consumer): the first failure at once, then at most
/// one line per interval, which says how many failures it stands for; and
/// one line when the failure ends, if any was logged.
#[derive(Debug)]
pub struct FailureLog {
    interval: Duration,
    state: Mutex<FailureState>,
}

#[derive(Debug, Default)]
struct FailureState {
    /// Since when the call has failed, and how often, while it fails.
    failing: Option<(Instant, u64)>,
    /// When the last line was let through, and whether it was of the
    /// failure in progress.
    last_line: Option<Instant>,
    reported: bool,
    /// Failures since the last line let through.
    held_back: u64,
}

/// A failure line to write: it stands for itself and `held_back` more
/// since the last one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FailureLine {
    /// Failures since the last line that were not logged.
    pub held_back: u64,
}

/// The line to write when a failure ends: how long it lasted and how many
/// attempts failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecoveryLine {
    /// From the first failure to the success.
    pub failed_for: Duration,
    /// Attempts that failed in that time.
    pub failures: u64,
}

impl FailureLog {
    /// How often a failure that goes on is logged again.
    pub const INTERVAL: Duration = Duration::from_secs(60);

    /// At most one failure line per `interval`.
    pub fn new(interval: Duration) -> FailureLog {
        FailureLog {
            interval,
            state: Mutex::default(),
        }
    }

    /// Notes a failure at `now`; the line to write, if one is due.
    pub fn failed(&self, now: Instant) -> Option<FailureLine> {
        let mut state = self.lock();
        let (_, failures) = state.failing.get_or_insert((now, 0));
        *failures += 1;
        let due = state
            .last_line
            .is_none_or(|last| now.saturating_duration_since(last) >= self.interval);
        if !due {
            state.held_back += 1;
            return None;
        }
        state.last_line = Some(now);
        state.reported = true;
        Some(FailureLine {
            held_back: std::mem::take(&mut state.held_back),
        })
    }

    /// Notes a success at `now`; the line to write when it ends a failure
    /// that was logged. A failure whose every line was held back (a blip
    /// within the interval of the last) ends without one, so a call that
    /// fails and works by turns writes at most two lines per interval.
    pub fn succeeded(&self, now: Instant) -> Option<RecoveryLine> {
        let mut state = self.lock();
        let (since, failures) = state.failing.take()?;
        if !std::mem::take(&mut state.reported) {
            return None;
        }
        Some(RecoveryLine {
            failed_for: now.saturating_duration_since(since),
            failures,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, FailureState> {
        // The state is a few counters, whole after any panic.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Default for FailureLog {
    /// One line per [`FailureLog::INTERVAL`].
    fn default() -> Self {
        FailureLog::new(FailureLog::INTERVAL)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn the_wait_doubles_from_half_a_second_to_thirty_and_starts_again_after_a_success() {
        let mut backoff = RetryBackoff::default();
        let waits: Vec<Duration> = (0..9).map(|_| backoff.failed()).collect();
        assert_eq!(
            waits,
            [
                500, 1_000, 2_000, 4_000, 8_000, 16_000, 30_000, 30_000, 30_000
            ]
            .map(ms)
        );
        backoff.succeeded();
        assert_eq!(backoff.failed(), ms(500));
        assert_eq!(backoff.failed(), ms(1_000));
    }

    #[test]
    fn the_schedule_never_overflows_and_never_passes_its_cap() {
        let (first, max) = (ms(500), ms(30_000));
        assert_eq!(RetryBackoff::delay(first, max, 0), Duration::ZERO);
        assert_eq!(RetryBackoff::delay(first, max, u32::MAX), max);
        assert_eq!(
            RetryBackoff::delay(Duration::MAX, Duration::MAX, 40),
            Duration::MAX
        );
        // A cap below the first wait is the first wait.
        assert_eq!(RetryBackoff::delay(first, ms(1), 3), first);
        let mut failures = RetryBackoff::new(first, ms(1));
        assert_eq!(failures.failed(), first);
    }

    #[test]
    fn a_failure_that_goes_on_is_logged_once_per_interval_with_what_was_held_back() {
        let log = FailureLog::new(Duration::from_secs(60));
        let start = Instant::now();
        let at = |n: u64| start + ms(n);
        assert_eq!(log.failed(at(0)), Some(FailureLine { held_back: 0 }));
        // 64 workers failing twice a second for a minute: no line.
        for i in 1..7_680 {
            assert_eq!(log.failed(at(i * 7)), None, "failure {i}");
        }
        assert_eq!(
            log.failed(at(60_000)),
            Some(FailureLine { held_back: 7_679 })
        );
        assert_eq!(log.failed(at(60_001)), None);
        assert_eq!(
            log.succeeded(at(61_000)),
            Some(RecoveryLine {
                failed_for: ms(61_000),
                failures: 7_682,
            })
        );
        // Working, it says nothing more.
        assert_eq!(log.succeeded(at(61_001)), None);
    }

    #[test]
    fn a_call_failing_and_working_by_turns_writes_at_most_two_lines_per_interval() {
        let log = FailureLog::new(Duration::from_secs(60));
        let start = Instant::now();
        let mut lines = 0;
        for i in 0..1_000u64 {
            let now = start + ms(i * 50);
            if i % 2 == 0 {
                lines += usize::from(log.failed(now).is_some());
            } else {
                lines += usize::from(log.succeeded(now).is_some());
            }
        }
        // 50 s: within one interval.
        assert_eq!(lines, 2);
        // The next failure after the interval is logged, with the count of
        // those held back.
        assert_eq!(
            log.failed(start + ms(60_000)),
            Some(FailureLine { held_back: 499 })
        );
    }
}
