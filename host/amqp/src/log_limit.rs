//! Log lines about what peers do, at most one per cause per interval.
//!
//! Anyone who can reach the port chooses how often a refused token, an
//! undecodable frame or a dropped handshake happens: a line for each let a
//! client without a key write 77 MB of log in 18 s (issue 40). Each cause
//! gets one line per [`INTERVAL`]; the next line that goes out says how
//! many were held back in between. `tracing` has no such filter of its
//! own, and a subscriber-side one would also hold back the host's own
//! lines, so the endpoint counts at the call.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use nimbus_transport::FailureLog;

/// How often each cause may write a line.
pub(crate) const INTERVAL: Duration = Duration::from_secs(10);

/// What a peer did that is worth a line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Cause {
    /// A token put on `$cbs` was refused, for the reason named (each
    /// reason has its own line, so an operator learns each of them).
    TokenRefused(&'static str),
    /// A delivery did not decode as an AMQP message.
    NotAMessage,
    /// A connection sent bytes past the endpoint's bounds and was closed.
    ConnectionRefused,
    /// A connection did not get through TLS, SASL and `open`.
    HandshakeFailed,
    /// A connection put no valid token in time, or made room for a newer
    /// one.
    NoToken,
    /// Accepting a connection failed (out of file descriptors, most often).
    AcceptFailed,
    /// A settlement without an outcome, or another odd disposition.
    OddDisposition,
}

/// Counts lines per cause, each with the one windowing rule the host has
/// ([`FailureLog`]: the first at once, then one per interval saying how
/// many it stands for).
#[derive(Debug)]
pub(crate) struct LogLimit {
    interval: Duration,
    causes: Mutex<HashMap<Cause, FailureLog>>,
}

impl LogLimit {
    /// A limit of one line per cause per `interval`.
    pub(crate) fn new(interval: Duration) -> LogLimit {
        LogLimit {
            interval,
            causes: Mutex::default(),
        }
    }

    /// The endpoint's limit.
    pub(crate) fn global() -> &'static LogLimit {
        static GLOBAL: OnceLock<LogLimit> = OnceLock::new();
        GLOBAL.get_or_init(|| LogLimit::new(INTERVAL))
    }

    /// Writes `line()` at INFO unless `cause` wrote one within the interval.
    pub(crate) fn info(&self, cause: Cause, line: impl FnOnce() -> String) {
        if let Some(held) = self.admit(cause) {
            tracing::info!(?cause, held, "{}{}", line(), suffix(held, self.interval));
        }
    }

    /// Writes `line()` at WARN unless `cause` wrote one within the interval.
    pub(crate) fn warn(&self, cause: Cause, line: impl FnOnce() -> String) {
        if let Some(held) = self.admit(cause) {
            tracing::warn!(?cause, held, "{}{}", line(), suffix(held, self.interval));
        }
    }

    /// `Some(lines held back before this one)` if a line may go out now.
    fn admit(&self, cause: Cause) -> Option<u64> {
        let mut causes = self.causes.lock().unwrap_or_else(PoisonError::into_inner);
        causes
            .entry(cause)
            .or_insert_with(|| FailureLog::new(self.interval))
            .failed(Instant::now())
            .map(|line| line.held_back)
    }
}

fn suffix(held: u64, interval: Duration) -> String {
    if held == 0 {
        String::new()
    } else {
        format!(
            " ({held} more like it held back in the last {} s)",
            interval.as_secs()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_cause_per_interval_then_the_count_held_back() {
        let limit = LogLimit::new(Duration::from_millis(500));
        assert_eq!(limit.admit(Cause::NotAMessage), Some(0));
        for _ in 0..10_000 {
            assert_eq!(limit.admit(Cause::NotAMessage), None);
        }
        // Another cause has its own window.
        assert_eq!(limit.admit(Cause::TokenRefused("expired")), Some(0));
        assert_eq!(limit.admit(Cause::TokenRefused("bad signature")), Some(0));
        std::thread::sleep(Duration::from_millis(600));
        assert_eq!(limit.admit(Cause::NotAMessage), Some(10_000));
        assert_eq!(limit.admit(Cause::NotAMessage), None);
        assert_eq!(
            suffix(3, Duration::from_secs(10)),
            " (3 more like it held back in the last 10 s)"
        );
    }
}
