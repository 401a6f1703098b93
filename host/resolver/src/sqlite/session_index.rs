//! The events of each session, indexed in arrears (decision 0119).
//!
//! An index keyed by session has one insertion point per busy session, so
//! every commit of the recorder rewrote one page per session it touched:
//! with 64 busy sessions that was a third of the store's WAL pages, for a
//! lookup operators make by hand. `session_events` holds the same entries,
//! but the recorder adds them only once [`LAG`] events have gathered beyond
//! `session_index_mark`, all in one commit, so each session's page is
//! written once per batch of events instead of once per commit.
//!
//! A lookup by session reads the index up to the mark and the events after
//! it (at most about [`LAG`] of them, by their key), in one snapshot: both
//! halves and the mark change only together, inside a write transaction.
//!
//! What keeps it exact:
//! - every event with `id <= mark` and a session has its entry;
//! - a session written to such an event moves its entry ([`moved`]);
//! - an event deleted takes its entry with it ([`forget`]), and the mark
//!   never stays above the largest `id` left ([`lower_mark`]), since SQLite
//!   numbers a new row after the largest one there is and would otherwise
//!   number new events below the mark, unindexed.

use rusqlite::{Connection, Transaction, params};

use super::{db, exec};
use crate::store::StoreError;

/// How many events may wait beyond the mark before a commit indexes them.
/// Larger batches write fewer pages per event (each busy session's tail
/// page once per batch); a lookup by session reads the waiting events by
/// key, ~1 ms for a thousand.
pub(super) const LAG: i64 = 1024;

const TABLES: &str = "
CREATE TABLE IF NOT EXISTS session_events (
    session_id TEXT NOT NULL,
    event_ref INTEGER NOT NULL,
    PRIMARY KEY (session_id, event_ref)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS session_index_mark (
    only INTEGER PRIMARY KEY CHECK (only = 0),
    indexed_through INTEGER NOT NULL
);";

/// The condition on `events` that selects the events of the session bound
/// to `?{n}`.
pub(super) fn events_of_session(n: usize) -> String {
    format!(
        "session_id = ?{n} AND id IN (
            SELECT event_ref FROM session_events WHERE session_id = ?{n}
            UNION ALL
            SELECT id FROM events
             WHERE id > (SELECT indexed_through FROM session_index_mark) AND session_id = ?{n})"
    )
}

/// Makes the tables and, in one transaction, indexes every event there is
/// when the index cannot be trusted: a store without it (new, or of an
/// earlier build), or one an earlier build has opened since this one
/// (its `events_by_session` is back, and it moved and pruned events
/// without keeping this index, nor the mark below new row numbers).
pub(super) fn open(conn: &Connection) -> Result<(), StoreError> {
    conn.execute_batch(&format!("BEGIN IMMEDIATE; {TABLES}"))
        .map_err(db("creating the session index"))?;
    let result = (|| {
        let marked = conn.query_row(
            "SELECT EXISTS (SELECT 1 FROM session_index_mark)",
            [],
            |r| r.get::<_, bool>(0),
        )?;
        let earlier_build_ran = conn
            .query_row(
                "SELECT COUNT(*) FROM sqlite_schema WHERE type = 'index' AND name = 'events_by_session'",
                [],
                |r| r.get::<_, i64>(0),
            )?
            > 0;
        if !marked || earlier_build_ran {
            let has_events = conn.query_row("SELECT EXISTS (SELECT 1 FROM events)", [], |r| {
                r.get::<_, bool>(0)
            })?;
            // On a large store this takes a while, once; say why the start waits.
            if has_events {
                tracing::info!(
                    "resolver store: indexing each session's events (once, for a store an earlier build wrote)"
                );
            }
            conn.execute_batch(
                "DROP INDEX IF EXISTS events_by_session;
                 DELETE FROM session_events;
                 DELETE FROM session_index_mark;",
            )?;
            conn.execute(
                "INSERT INTO session_events (session_id, event_ref)
                 SELECT session_id, id FROM events WHERE session_id IS NOT NULL",
                [],
            )?;
            conn.execute(
                "INSERT INTO session_index_mark (only, indexed_through)
                 VALUES (0, (SELECT COALESCE(MAX(id), 0) FROM events))",
                [],
            )?;
        }
        conn.execute_batch("COMMIT")
    })();
    result.map_err(|source| {
        let _ = conn.execute_batch("ROLLBACK");
        StoreError::Database {
            context: "indexing the events of each session",
            source,
        }
    })
}

/// Indexes the events beyond the mark when [`LAG`] of them have gathered.
pub(super) fn catch_up_if_due(tx: &Transaction<'_>) -> Result<(), StoreError> {
    let (mark, last) = tx
        .prepare_cached(
            "SELECT indexed_through, (SELECT COALESCE(MAX(id), 0) FROM events) FROM session_index_mark",
        )
        .and_then(|mut stmt| stmt.query_row([], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?))))
        .map_err(db("reading the session index's mark"))?;
    if last - mark < LAG {
        return Ok(());
    }
    exec(
        tx,
        "INSERT OR IGNORE INTO session_events (session_id, event_ref)
         SELECT session_id, id FROM events WHERE id > ?1 AND id <= ?2 AND session_id IS NOT NULL",
        params![mark, last],
    )
    .map_err(db("indexing the events of each session"))?;
    exec(
        tx,
        "UPDATE session_index_mark SET indexed_through = ?1",
        params![last],
    )
    .map_err(db("moving the session index's mark"))?;
    Ok(())
}

/// Moves event `id`'s entry from session `from` to `to`. An event beyond
/// the mark has none yet: the entry made here is the one the catch-up
/// would make.
pub(super) fn moved(
    tx: &Transaction<'_>,
    id: i64,
    from: Option<&str>,
    to: &str,
) -> Result<(), StoreError> {
    if let Some(from) = from {
        forget(tx, id, from)?;
    }
    exec(
        tx,
        "INSERT OR IGNORE INTO session_events (session_id, event_ref) VALUES (?1, ?2)",
        params![to, id],
    )
    .map_err(db("indexing the event's session"))?;
    Ok(())
}

/// Removes event `id`'s entry under `session`, if it has one.
pub(super) fn forget(tx: &Transaction<'_>, id: i64, session: &str) -> Result<(), StoreError> {
    exec(
        tx,
        "DELETE FROM session_events WHERE session_id = ?1 AND event_ref = ?2",
        params![session, id],
    )
    .map_err(db("removing the event from the session index"))?;
    Ok(())
}

/// After events were deleted: keeps the mark at or below the largest `id`
/// left, so the next event inserted is numbered beyond it.
pub(super) fn lower_mark(tx: &Transaction<'_>) -> Result<(), StoreError> {
    exec(
        tx,
        "UPDATE session_index_mark
            SET indexed_through = MIN(indexed_through, (SELECT COALESCE(MAX(id), 0) FROM events))",
        [],
    )
    .map_err(db("moving the session index's mark"))?;
    Ok(())
}
