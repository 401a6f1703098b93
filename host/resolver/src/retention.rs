//! Retention: the store forgets events that need nothing more once they
//! are older than the configured period, so it does not grow without bound.
//!
//! Only events whose status asks nothing of anyone are removed
//! ([`Status::is_expendable`](crate::Status::is_expendable)), each with its
//! whole history, so what is left is always a complete trail; and none of a
//! session the broker shows blocked or with parked events, whose events may
//! still be acted on or run. The work is done in small transactions, so
//! recording waits at most for one of them.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use nimbus_transport::{Admin, AdminError, SubscriptionPath};
use nimbus_wire::SessionState;
use tokio_util::sync::CancellationToken;

use crate::sqlite::SqliteResolverStore;

/// Events deleted per transaction.
const EVENTS_PER_TRANSACTION: usize = 500;

/// How long a pass pauses between two transactions.
const PAUSE_BETWEEN_TRANSACTIONS: Duration = Duration::from_millis(20);

/// The longest pause between two passes.
const MAX_PASS_INTERVAL: Duration = Duration::from_secs(3600);

/// How often a store with `keep_for` retention is pruned: a tenth of the
/// period (so an event outlives it by at most a tenth), between one second
/// and an hour.
pub fn pass_interval(keep_for: Duration) -> Duration {
    (keep_for / 10).clamp(Duration::from_secs(1), MAX_PASS_INTERVAL)
}

/// Prunes `store` every [`pass_interval`] until `shutdown`: events that
/// need nothing more and were last updated more than `keep_for` ago go,
/// with their history. A failed pass is logged and tried again next time.
pub async fn run_retention<A: Admin>(
    admin: Arc<A>,
    store: Arc<SqliteResolverStore>,
    keep_for: Duration,
    shutdown: CancellationToken,
) {
    let interval = pass_interval(keep_for);
    loop {
        match prune_pass(&*admin, &store, keep_for, &shutdown).await {
            Ok(0) => {}
            Ok(removed) => tracing::info!(
                removed,
                keep_for = %humantime::format_duration(keep_for),
                "resolver: removed events past their retention"
            ),
            Err(e) => tracing::warn!(error = %e, "resolver: pruning past retention failed"),
        }
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(interval) => {}
        }
    }
}

/// One pass: transactions of [`EVENTS_PER_TRANSACTION`] until none is full.
async fn prune_pass<A: Admin>(
    admin: &A,
    store: &Arc<SqliteResolverStore>,
    keep_for: Duration,
    shutdown: &CancellationToken,
) -> Result<usize, String> {
    // Read before the cutoff is set. A session that blocks after this does
    // so with a response whose time (its enqueue time, which `updated_ms`
    // holds) is now, younger than the cutoff. Only a Resolver catching up
    // on a backlog older than the retention period could record such a
    // blocker old enough to prune between this read and the pruning; that
    // narrow window is accepted.
    let in_use = Arc::new(
        sessions_in_use(admin)
            .await
            .map_err(|e| format!("reading the sessions in use: {e}"))?,
    );
    let cutoff = SystemTime::now()
        .checked_sub(keep_for)
        .and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
    let mut removed = 0;
    while !shutdown.is_cancelled() {
        let store = Arc::clone(store);
        let in_use = Arc::clone(&in_use);
        let deleted = tokio::task::spawn_blocking(move || {
            store.prune_expendable(cutoff, EVENTS_PER_TRANSACTION, &in_use)
        })
        .await
        .map_err(|e| format!("the pruning task failed: {e}"))?
        .map_err(|e| e.to_string())?;
        removed += deleted;
        if deleted < EVENTS_PER_TRANSACTION {
            break;
        }
        // A first pass over a large store is many transactions on the
        // recorder's connection: a pause between them lets recording in.
        tokio::time::sleep(PAUSE_BETWEEN_TRANSACTIONS).await;
    }
    Ok(removed)
}

/// The (endpoint, session) pairs whose session state says blocked or has
/// parked events, on every endpoint topic (a topic with a session
/// subscription of its own name). A state that does not decode counts as in
/// use: better kept than lost.
pub async fn sessions_in_use<A: Admin>(
    admin: &A,
) -> Result<BTreeSet<(String, String)>, AdminError> {
    let mut in_use = BTreeSet::new();
    for endpoint in nimbus_wire::topology::endpoint_topics(admin).await? {
        let own = SubscriptionPath::new(endpoint.as_str(), endpoint.as_str());
        let sessions = match admin.list_sessions(&own).await {
            Ok(sessions) => sessions,
            // Deleted between the two calls.
            Err(AdminError::NotFound { .. }) => continue,
            Err(e) => return Err(e),
        };
        for session in sessions {
            let busy = match session.state.as_deref() {
                None | Some([]) => false,
                Some(blob) => SessionState::from_bytes(blob)
                    .map_or(true, |state| state.is_blocked() || state.has_parked()),
            };
            if busy {
                in_use.insert((endpoint.clone(), session.session_id));
            }
        }
    }
    Ok(in_use)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pass_runs_every_tenth_of_the_period_within_bounds() {
        assert_eq!(
            pass_interval(Duration::from_secs(30 * 24 * 3600)),
            MAX_PASS_INTERVAL
        );
        assert_eq!(
            pass_interval(Duration::from_secs(600)),
            Duration::from_secs(60)
        );
        assert_eq!(
            pass_interval(Duration::from_millis(500)),
            Duration::from_secs(1)
        );
    }
}
