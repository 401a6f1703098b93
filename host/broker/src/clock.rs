//! Broker time: what "now" is for lock expiry, schedules, TTL and duplicate
//! detection, and how the timer task sleeps until a deadline.
//!
//! Injected so tests are exact (STYLE habit 17): [`ManualClock`] only moves
//! when a test advances it. Waiting for a message to *arrive* (receive and
//! accept timeouts) is not broker time and uses tokio's clock.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use tokio::sync::watch;

/// A boxed future the clock returns from [`Clock::sleep_until`].
pub type Sleep = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// The source of broker time.
pub trait Clock: Send + Sync + 'static {
    /// The current time.
    fn now(&self) -> SystemTime;

    /// A future that completes once [`now`](Clock::now) has reached
    /// `deadline`.
    fn sleep_until(&self, deadline: SystemTime) -> Sleep;
}

/// The real wall clock, sleeping on tokio timers.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> SystemTime {
        SystemTime::now()
    }

    fn sleep_until(&self, deadline: SystemTime) -> Sleep {
        Box::pin(async move {
            // Re-check after waking: the wall clock may have been adjusted.
            loop {
                let left = deadline
                    .duration_since(SystemTime::now())
                    .unwrap_or(Duration::ZERO);
                if left.is_zero() {
                    return;
                }
                tokio::time::sleep(left).await;
            }
        })
    }
}

/// A clock that stands still until [`advance`](ManualClock::advance)d.
///
/// Clones share one time. Sleepers wake as soon as an advance reaches their
/// deadline.
#[derive(Debug, Clone)]
pub struct ManualClock {
    now: Arc<Mutex<SystemTime>>,
    changed: watch::Sender<SystemTime>,
}

impl ManualClock {
    /// A clock showing `start`.
    pub fn new(start: SystemTime) -> Self {
        let (changed, _) = watch::channel(start);
        ManualClock {
            now: Arc::new(Mutex::new(start)),
            changed,
        }
    }

    /// A clock showing a fixed, recent instant (2026-01-01T00:00:00Z), so
    /// tests print stable times.
    pub fn at_fixed_start() -> Self {
        ManualClock::new(SystemTime::UNIX_EPOCH + Duration::from_secs(1_767_225_600))
    }

    /// Moves time forward by `by`, waking every sleeper whose deadline is
    /// reached.
    pub fn advance(&self, by: Duration) {
        let mut now = self.now.lock().unwrap_or_else(PoisonError::into_inner);
        *now += by;
        self.changed.send_replace(*now);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> SystemTime {
        *self.now.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn sleep_until(&self, deadline: SystemTime) -> Sleep {
        let mut changes = self.changed.subscribe();
        Box::pin(async move {
            loop {
                if *changes.borrow_and_update() >= deadline {
                    return;
                }
                if changes.changed().await.is_err() {
                    // The clock is gone: time will never move again.
                    std::future::pending::<()>().await;
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn manual_clock_sleeper_wakes_only_when_advanced_past_its_deadline() {
        let clock = ManualClock::at_fixed_start();
        let deadline = clock.now() + Duration::from_secs(10);
        let mut sleep = clock.sleep_until(deadline);
        assert!(futures_poll_once(&mut sleep).await.is_none());
        clock.advance(Duration::from_secs(9));
        assert!(futures_poll_once(&mut sleep).await.is_none());
        clock.advance(Duration::from_secs(1));
        assert!(futures_poll_once(&mut sleep).await.is_some());
    }

    async fn futures_poll_once(sleep: &mut Sleep) -> Option<()> {
        std::future::poll_fn(|cx| match sleep.as_mut().poll(cx) {
            std::task::Poll::Ready(()) => std::task::Poll::Ready(Some(())),
            std::task::Poll::Pending => std::task::Poll::Ready(None),
        })
        .await
    }
}
