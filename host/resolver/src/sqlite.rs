//! The SQLite Resolver store.

use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use rusqlite::{CachedStatement, Connection, OptionalExtension, Row as SqlRow, params};

use crate::guard::{self, Row, Verdict};
use crate::observation::{HandoffDetails, Observation};
use crate::status::{MessageKind, Status};
use crate::store::{
    DEAD_LETTER_REPLAY, EventDetail, EventFilter, EventRecord, Heartbeat, HistoryEntry,
    REBUILT_FROM_BROKER, Recorded, ReplayNote, ResolverStore, StoreError, StoreRows,
};
use nimbus_checkpointer::{
    BACKSTOP_AUTOCHECKPOINT_PAGES, Checkpointer, StartError, interval as checkpoint_interval,
};

mod file;
mod session_index;

pub use file::StoreFile;

/// The columns of `events` after its key, in the order the table declares
/// them (an older store is copied into a new table column by column).
const EVENT_TABLE_COLUMNS: &str = "
    endpoint TEXT NOT NULL,
    event_id TEXT NOT NULL,
    session_id TEXT,
    status TEXT NOT NULL,
    sub_status TEXT,
    status_source TEXT NOT NULL,
    event_type TEXT,
    correlation_id TEXT,
    last_message_id TEXT,
    request_message_id TEXT,
    request_from TEXT,
    originating_message_id TEXT,
    originating_from TEXT,
    retry_count INTEGER NOT NULL,
    error_type TEXT,
    error_text TEXT,
    dead_letter_reason TEXT,
    dead_letter_description TEXT,
    handoff_reason TEXT,
    external_job_id TEXT,
    expected_by TEXT,
    handler_version TEXT,
    queue_time_ms INTEGER,
    processing_time_ms INTEGER,
    payload TEXT,
    first_seen_ms INTEGER NOT NULL,
    updated_ms INTEGER NOT NULL,
    properties TEXT";

/// `CREATE TABLE` for `events` under `name`.
///
/// `id` numbers events in the order they were first seen, so the history
/// rows of recent events, keyed by it, sit together at the end of their
/// index: a commit rewrites a few pages there instead of one random page
/// per event, as an index keyed by the (random) event id did. Declaring it
/// `INTEGER PRIMARY KEY` keeps it stable (a bare rowid may change on
/// `VACUUM`). The unique key leads with `event_id`, so a lookup by id alone
/// searches it.
fn events_table(name: &str) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {name} (
            id INTEGER PRIMARY KEY,{EVENT_TABLE_COLUMNS},
            UNIQUE (event_id, endpoint)
        )"
    )
}

/// The columns of `history` after its key, in the order the table declares
/// them (a store of an older build is copied column by column).
const HISTORY_COLUMNS: &str =
    "endpoint, event_id, message_id, message_type, status, at_ms, from_endpoint, retry_count,
    error_type, error_text, handler_version, refused, event_ref, handoff, replaced_payload";

/// `CREATE TABLE` for `history` under `name`.
///
/// `seq` is a plain rowid alias, not `AUTOINCREMENT`: rows are only
/// appended (retention deletes an event's rows together with the event),
/// so SQLite's next rowid (the largest plus one) numbers rows in the order
/// they were written. Once retention has removed the newest rows (an idle
/// store), a number may be used again; nothing refers to a deleted row, so
/// that is harmless. `AUTOINCREMENT` would cost a write of `sqlite_sequence`,
/// one more WAL page per commit (~4 % of the store's pages in `nimbus
/// bench`).
///
/// `handoff` is one column holding a small JSON object
/// ([`HandoffDetails`]) rather than a column per fact: the facts differ by
/// message (job id, reason and deadline on a `PendingHandoffResponse`,
/// details on a `HandoffCompletedRequest`) and nearly every row has none.
/// Every declared column costs each new row a byte even when NULL (SQLite
/// does not trim trailing NULLs), so one column costs the hot path a byte
/// a row where four would cost four; encoding happens only for the rare
/// handoff message; and a later handoff fact needs no migration.
///
/// `replaced_payload` is set only on a `ResubmissionRequest` whose edited
/// payload replaced another: the event's row keeps only the latest
/// payload, and the history keeps no payloads (that would double the bytes
/// each event writes), so without it an edit would erase the payload that
/// failed.
fn history_table(name: &str) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {name} (
            seq INTEGER PRIMARY KEY,
            endpoint TEXT NOT NULL,
            event_id TEXT NOT NULL,
            message_id TEXT,
            message_type TEXT NOT NULL,
            status TEXT NOT NULL,
            at_ms INTEGER NOT NULL,
            from_endpoint TEXT,
            retry_count INTEGER NOT NULL,
            error_type TEXT,
            error_text TEXT,
            handler_version TEXT,
            refused TEXT,
            event_ref INTEGER,
            handoff TEXT,
            replaced_payload TEXT
        )"
    )
}

const SCHEMA: &str = "
CREATE INDEX IF NOT EXISTS events_by_status ON events (status, updated_ms);
CREATE INDEX IF NOT EXISTS events_by_endpoint ON events (endpoint, updated_ms);
DROP INDEX IF EXISTS events_by_update;
CREATE TABLE IF NOT EXISTS heartbeats (
    endpoint TEXT PRIMARY KEY,
    message_type TEXT NOT NULL,
    at_ms INTEGER NOT NULL
);
-- One index serves both an event's history listing (its few rows, sorted
-- by seq, the rowid every entry ends with) and the once-per-message check,
-- which reads those rows. Keyed by the event's row number alone, its
-- entries are small and a response's lands beside its request's: keyed
-- also by message id and type (history_by_ref, unique), they were ~6 times
-- larger and that index wrote ~3.5 pages a commit (decision 0121). The
-- check runs before every insert, in the one writer's transaction, so
-- nothing relied on the unique key. Stores made before keyed the history
-- by event id (random pages per commit); those indexes go too.
DROP INDEX IF EXISTS history_by_event;
DROP INDEX IF EXISTS history_once;
DROP INDEX IF EXISTS history_key;
DROP INDEX IF EXISTS history_by_ref;
CREATE INDEX IF NOT EXISTS history_of_event ON history (event_ref);
";

/// How many event ids one status lookup binds: well under SQLite's limit
/// on parameters (32,766), and few enough statement shapes to cache.
const STATUS_LOOKUP_CHUNK: usize = 500;

/// An event's status as a listing shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventStatus {
    /// The status.
    pub status: Status,
    /// The sub-status (`Handoff` for a Pending event an external job has).
    pub sub_status: Option<String>,
}

/// The default cap on how many events one listing returns.
const DEFAULT_LIST_LIMIT: usize = 1000;

/// A Resolver store in one SQLite file (WAL mode).
pub struct SqliteResolverStore {
    conn: Mutex<Connection>,
    /// Operator reads (listings, an event with its history) on a connection
    /// of their own: in WAL mode they read the last commit while the
    /// recorder writes, so a slow listing never holds up recording, nor a
    /// recorder batch a listing. `None` for an in-memory store, whose one
    /// connection is the database.
    reader: Option<Mutex<Connection>>,
    /// The database file, for a lookup that scans (by message id): it opens
    /// a connection of its own rather than hold `reader` from other reads.
    /// `None` for an in-memory store.
    path: Option<std::path::PathBuf>,
    refused: AtomicU64,
    /// Declared after `conn`: dropped after it, so its last checkpoint
    /// runs once the writer has closed.
    _checkpointer: Option<Checkpointer>,
}

/// What a committed record survives. The Resolver completes a bus message
/// only after its record committed, so the store should promise what the
/// broker promises, or a power loss could lose an audit record of a message
/// the bus has already let go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StoreDurability {
    /// Survives a power loss: the WAL is fsynced at every commit (one per
    /// recorder batch, shared by every session's records in it).
    PowerLoss,
    /// Survives a killed process, not a power loss: fsync only at
    /// checkpoints.
    #[default]
    ProcessCrash,
}

/// How many problems the integrity check reports at most: the first few
/// say what happened; a wrecked file would list thousands.
const INTEGRITY_PROBLEMS_SHOWN: u32 = 5;

/// Refuses a damaged file before anything reads or writes it. `quick_check`
/// reads every page once (not the cross-check of every index against its
/// table that `integrity_check` adds), so a start pays one read of the file.
fn check_integrity(conn: &Connection, path: &Path) -> Result<(), StoreError> {
    let damaged = |problems: String| StoreError::Damaged {
        path: path.to_owned(),
        problems,
    };
    let checked = conn
        .prepare(&format!("PRAGMA quick_check({INTEGRITY_PROBLEMS_SHOWN})"))
        .and_then(|mut check| {
            check
                .query_map([], |row| row.get::<_, String>(0))?
                .collect::<Result<Vec<_>, _>>()
        });
    match checked {
        Ok(problems) if problems.len() == 1 && problems[0] == "ok" => Ok(()),
        Ok(problems) => Err(damaged(problems.join("; "))),
        Err(rusqlite::Error::SqliteFailure(failure, message))
            if matches!(
                failure.code,
                rusqlite::ErrorCode::DatabaseCorrupt | rusqlite::ErrorCode::NotADatabase
            ) =>
        {
            Err(damaged(message.unwrap_or_else(|| failure.to_string())))
        }
        Err(source) => Err(StoreError::Database {
            context: "checking the database's integrity",
            source,
        }),
    }
}

impl SqliteResolverStore {
    /// Opens (creating if needed) the store at `path`, surviving a killed
    /// process ([`StoreDurability::ProcessCrash`]).
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        Self::open_with(path, StoreDurability::ProcessCrash)
    }

    /// Opens (creating if needed) the store at `path` with `durability`.
    pub fn open_with(path: &Path, durability: StoreDurability) -> Result<Self, StoreError> {
        let conn = Connection::open(path).map_err(db("opening the database"))?;
        check_integrity(&conn, path)?;
        let mut store = Self::init(conn, durability)?;
        store
            .lock()
            .pragma_update(None, "wal_autocheckpoint", BACKSTOP_AUTOCHECKPOINT_PAGES)
            .map_err(db("setting wal_autocheckpoint"))?;
        // Another process holding the write lock for a moment (an operator's
        // sqlite3 shell, a backup) delays a record rather than failing it.
        store
            .lock()
            .busy_timeout(std::time::Duration::from_secs(5))
            .map_err(db("setting the busy timeout"))?;
        let reader = Connection::open(path).map_err(db("opening the read connection"))?;
        reader
            .pragma_update(None, "query_only", true)
            .map_err(db("making the read connection read-only"))?;
        reader
            .busy_timeout(std::time::Duration::from_secs(5))
            .map_err(db("setting the read connection's busy timeout"))?;
        store.reader = Some(Mutex::new(reader));
        store.path = Some(path.to_owned());
        store._checkpointer = Some(
            Checkpointer::start(
                path,
                "nimbus-resolver-ckpt",
                "resolver store",
                checkpoint_interval(durability == StoreDurability::PowerLoss),
            )
            .map_err(|e| match e {
                StartError::Open(source) => StoreError::Database {
                    context: "opening the checkpoint connection",
                    source,
                },
                thread @ StartError::Thread(_) => StoreError::Panicked(thread.to_string()),
            })?,
        );
        Ok(store)
    }

    /// An in-memory store, for tools and tests.
    pub fn open_in_memory() -> Result<Self, StoreError> {
        let conn = Connection::open_in_memory().map_err(db("opening the database"))?;
        Self::init(conn, StoreDurability::ProcessCrash)
    }

    fn init(conn: Connection, durability: StoreDurability) -> Result<Self, StoreError> {
        let synchronous = match durability {
            StoreDurability::PowerLoss => "FULL",
            StoreDurability::ProcessCrash => "NORMAL",
        };
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(db("enabling WAL"))?;
        conn.pragma_update(None, "synchronous", synchronous)
            .map_err(db("setting synchronous"))?;
        migrate(&conn)?;
        let builds_history_index = conn
            .query_row(
                "SELECT EXISTS (SELECT 1 FROM history)
                    AND NOT EXISTS (SELECT 1 FROM sqlite_schema WHERE name = 'history_of_event')",
                [],
                |r| r.get::<_, bool>(0),
            )
            .map_err(db("reading the schema"))?;
        if builds_history_index {
            // Once, and a while on a large store: say why the start waits.
            tracing::info!(
                "resolver store: indexing the history (once, for a store an earlier build wrote)"
            );
        }
        conn.execute_batch(SCHEMA)
            .map_err(db("creating the schema"))?;
        session_index::open(&conn)?;
        Ok(SqliteResolverStore {
            conn: Mutex::new(conn),
            reader: None,
            path: None,
            refused: AtomicU64::new(0),
            _checkpointer: None,
        })
    }

    /// Deletes up to `max_events` events that need nothing more
    /// ([`Status::is_expendable`]) and were last updated before
    /// `updated_before_ms`, with their history, in one transaction; returns
    /// how many it deleted. Call again while it returns `max_events`.
    ///
    /// Events that still ask for an operator (Failed, Deferred, Pending,
    /// DeadLettered) are kept however old they are, and so is every event
    /// of a session in `in_use` (endpoint, session): a blocked session's
    /// blocker may be Unsupported and still owe the operator an action, and
    /// a parked event an operator skipped still runs when the session
    /// drains, so neither has heard its last word.
    pub fn prune_expendable(
        &self,
        updated_before_ms: i64,
        max_events: usize,
        in_use: &BTreeSet<(String, String)>,
    ) -> Result<usize, StoreError> {
        let limit = i64::try_from(max_events).unwrap_or(i64::MAX);
        let mut conn = self.lock();
        let tx = write_transaction(&mut conn)?;
        // A temporary table (this connection's, outside the WAL) so the
        // selection skips those sessions in SQL: skipping them afterwards
        // would select the same kept rows first on every call. Endpoints
        // compare ignoring case, as Service Bus names do.
        tx.execute_batch(
            "CREATE TEMP TABLE IF NOT EXISTS prune_in_use (
                 endpoint TEXT NOT NULL COLLATE NOCASE, session_id TEXT NOT NULL,
                 PRIMARY KEY (endpoint, session_id));
             DELETE FROM temp.prune_in_use;",
        )
        .map_err(db("noting the sessions in use"))?;
        for (endpoint, session_id) in in_use {
            exec(
                &tx,
                "INSERT OR IGNORE INTO temp.prune_in_use (endpoint, session_id) VALUES (?1, ?2)",
                params![endpoint, session_id],
            )
            .map_err(db("noting the sessions in use"))?;
        }
        let mut ids = Vec::new();
        for status in Status::ALL.into_iter().filter(|s| s.is_expendable()) {
            let room = limit - i64::try_from(ids.len()).unwrap_or(i64::MAX);
            if room <= 0 {
                break;
            }
            let mut stmt = tx
                .prepare_cached(
                    "SELECT id, session_id FROM events WHERE status = ?1 AND updated_ms < ?2
                     AND NOT EXISTS (SELECT 1 FROM temp.prune_in_use AS u
                                     WHERE u.endpoint = events.endpoint
                                       AND u.session_id = events.session_id)
                     LIMIT ?3",
                )
                .map_err(db("finding expired events"))?;
            let found = stmt
                .query_map(params![status.as_str(), updated_before_ms, room], |r| {
                    Ok((r.get::<_, i64>(0)?, r.get::<_, Option<String>>(1)?))
                })
                .map_err(db("finding expired events"))?
                .collect::<Result<Vec<_>, _>>()
                .map_err(db("finding expired events"))?;
            ids.extend(found);
        }
        for (id, session_id) in &ids {
            exec(&tx, "DELETE FROM history WHERE event_ref = ?1", params![id])
                .map_err(db("deleting an expired event's history"))?;
            exec(&tx, "DELETE FROM events WHERE id = ?1", params![id])
                .map_err(db("deleting an expired event"))?;
            if let Some(session_id) = session_id {
                session_index::forget(&tx, *id, session_id)?;
            }
        }
        session_index::lower_mark(&tx)?;
        tx.commit().map_err(db("committing"))?;
        Ok(ids.len())
    }

    /// The status of each event in `events` (endpoint, event id) that the
    /// store has, read in one snapshot by a statement per
    /// [`STATUS_LOOKUP_CHUNK`] ids, without history. The sessions listing
    /// names each blocked session's blocker with its status; in an outage
    /// that is thousands of events, where an event-with-history lookup each
    /// would take a read (and a blocking task) per session.
    pub fn statuses(
        &self,
        events: &[(String, String)],
    ) -> Result<HashMap<(String, String), EventStatus>, StoreError> {
        let wanted: BTreeSet<&(String, String)> = events.iter().collect();
        let ids: Vec<&str> = wanted
            .iter()
            .map(|(_, event_id)| event_id.as_str())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let mut conn = self.read();
        let tx = conn
            .transaction()
            .map_err(db("starting a read transaction"))?;
        let mut found = HashMap::with_capacity(wanted.len());
        for chunk in ids.chunks(STATUS_LOOKUP_CHUNK) {
            let mut stmt = tx
                .prepare_cached(&statuses_sql(chunk.len()))
                .map_err(db("reading statuses"))?;
            let rows = stmt
                .query_map(rusqlite::params_from_iter(chunk), |r| {
                    Ok((
                        r.get::<_, String>(0)?,
                        r.get::<_, String>(1)?,
                        r.get::<_, String>(2)?,
                        r.get::<_, Option<String>>(3)?,
                    ))
                })
                .map_err(db("reading statuses"))?;
            for row in rows {
                let (endpoint, event_id, status, sub_status) =
                    row.map_err(db("reading statuses"))?;
                let key = (endpoint, event_id);
                // The id may also name the event at endpoints not asked about.
                if wanted.contains(&key) {
                    let status = parse_status(status)?;
                    found.insert(key, EventStatus { status, sub_status });
                }
            }
        }
        Ok(found)
    }

    /// The events `sql` selects by its one parameter (event columns, then
    /// `id`), each with its history.
    fn details(&self, sql: &str, key: &str) -> Result<Vec<EventDetail>, StoreError> {
        details_on(&mut self.read(), sql, key)
    }

    /// Counts refused writes once their transaction committed.
    fn count_refused(&self, outcomes: &[Recorded]) {
        let refused = outcomes
            .iter()
            .filter(|o| matches!(o, Recorded::Refused { .. }))
            .count();
        self.refused.fetch_add(
            u64::try_from(refused).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
    }

    /// The connection for reads: the reader, or the one connection of an
    /// in-memory store.
    fn read(&self) -> std::sync::MutexGuard<'_, Connection> {
        match &self.reader {
            Some(reader) => reader
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner()),
            None => self.lock(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Connection> {
        // A panic while holding the lock leaves SQLite consistent (the
        // transaction rolls back), so a poisoned lock is still usable.
        self.conn
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// The events `sql` selects by its one parameter (event columns, then
/// `id`), each with its history, read on `conn` in one snapshot: the
/// recorder may commit between the statements.
fn details_on(conn: &mut Connection, sql: &str, key: &str) -> Result<Vec<EventDetail>, StoreError> {
    let conn = conn
        .transaction()
        .map_err(db("starting a read transaction"))?;
    let mut stmt = conn.prepare(sql).map_err(db("reading the event"))?;
    let records = stmt
        .query_map(params![key], |r| {
            Ok((r.get::<_, i64>(EVENT_COLUMN_COUNT)?, event_record(r)?))
        })
        .map_err(db("reading the event"))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(db("reading the event"))?;
    let mut history_stmt = conn
        .prepare(HISTORY_OF_EVENT_SQL)
        .map_err(db("reading history"))?;
    let mut details = Vec::with_capacity(records.len());
    for (id, record) in records {
        let record = record?;
        let history = history_stmt
            .query_map(params![id], history_entry)
            .map_err(db("reading history"))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(db("reading history"))?
            .into_iter()
            .collect::<Result<Vec<_>, _>>()?;
        details.push(EventDetail { record, history });
    }
    Ok(details)
}

/// Columns added to `events` after the first schema: a store written by an
/// older build gains them (empty) before it is copied to the current table.
const ADDED_EVENT_COLUMNS: [&str; 5] = [
    "request_message_id",
    "request_from",
    "originating_message_id",
    "originating_from",
    "properties",
];

/// Brings a store written by an older build to the current tables, in one
/// transaction, keeping every row; a new store just gets the tables. The
/// indexes are (re)made by [`SCHEMA`] afterwards.
fn migrate(conn: &Connection) -> Result<(), StoreError> {
    let events = columns(conn, "events")?;
    let history = columns(conn, "history")?;
    if events.is_empty() {
        return conn
            .execute_batch(&format!(
                "{}; {}",
                events_table("events"),
                history_table("history")
            ))
            .map_err(db("creating the schema"));
    }
    if history.is_empty() {
        conn.execute_batch(&history_table("history"))
            .map_err(db("creating the schema"))?;
    }
    let events_current = events.iter().any(|c| c == "id");
    let events_have_properties = events.iter().any(|c| c == "properties");
    let history_current = history.is_empty() || history.iter().any(|c| c == "event_ref");
    let history_has_handoff = history.is_empty() || history.iter().any(|c| c == "handoff");
    let history_has_replaced_payload =
        history.is_empty() || history.iter().any(|c| c == "replaced_payload");
    let history_autoincrement = !history.is_empty() && autoincrement(conn, "history")?;
    if events_current
        && events_have_properties
        && history_current
        && history_has_handoff
        && history_has_replaced_payload
        && !history_autoincrement
    {
        return Ok(());
    }
    let mut script = String::from("BEGIN IMMEDIATE;");
    if events_current && !events_have_properties {
        // Appended: every statement names its columns, so the order in
        // which the table declares them does not matter.
        script.push_str("ALTER TABLE events ADD COLUMN properties TEXT;");
    }
    if !events_current {
        for column in ADDED_EVENT_COLUMNS {
            if !events.iter().any(|c| c == column) {
                script.push_str(&format!("ALTER TABLE events ADD COLUMN {column} TEXT;"));
            }
        }
        // Numbered in the order they were first seen, like new events.
        script.push_str(&format!(
            "{};
             INSERT INTO events_current ({EVENT_COLUMNS}) SELECT {EVENT_COLUMNS} FROM events ORDER BY first_seen_ms, rowid;
             DROP TABLE events;
             ALTER TABLE events_current RENAME TO events;",
            events_table("events_current")
        ));
    }
    if !history_current {
        script.push_str(
            "ALTER TABLE history ADD COLUMN event_ref INTEGER;
             UPDATE history SET event_ref =
                 (SELECT id FROM events WHERE events.event_id = history.event_id AND events.endpoint = history.endpoint);",
        );
    }
    // Before the rebuild below, which copies every column of the current
    // table. Rows of the older build read as saying nothing of a handoff.
    if !history_has_handoff {
        script.push_str("ALTER TABLE history ADD COLUMN handoff TEXT;");
    }
    if !history_has_replaced_payload {
        script.push_str("ALTER TABLE history ADD COLUMN replaced_payload TEXT;");
    }
    if history_autoincrement {
        // Every row keeps its `seq`, so the order of each event's history
        // and the numbers already shown to operators stay as they were.
        // Dropping the old table also drops its `sqlite_sequence` row and
        // its index (`SCHEMA` makes the index again).
        script.push_str(&format!(
            "{};
             INSERT INTO history_current (seq, {HISTORY_COLUMNS}) SELECT seq, {HISTORY_COLUMNS} FROM history ORDER BY seq;
             DROP TABLE history;
             ALTER TABLE history_current RENAME TO history;",
            history_table("history_current")
        ));
    }
    script.push_str("COMMIT;");
    tracing::info!("resolver store: upgrading the tables of an older build");
    conn.execute_batch(&script).map_err(|source| {
        // Leave the store as it was for the next attempt.
        let _ = conn.execute_batch("ROLLBACK");
        StoreError::Database {
            context: "upgrading the schema",
            source,
        }
    })
}

/// Whether `table` was declared with an `AUTOINCREMENT` key (builds before
/// this one declared the history so).
fn autoincrement(conn: &Connection, table: &str) -> Result<bool, StoreError> {
    let sql: Option<String> = conn
        .query_row(
            "SELECT sql FROM sqlite_schema WHERE type = 'table' AND name = ?1",
            [table],
            |r| r.get(0),
        )
        .optional()
        .map_err(db("reading the schema"))?;
    Ok(sql.is_some_and(|sql| sql.to_ascii_uppercase().contains("AUTOINCREMENT")))
}

/// The column names of `table`; empty when it does not exist.
fn columns(conn: &Connection, table: &str) -> Result<Vec<String>, StoreError> {
    let mut stmt = conn
        .prepare("SELECT name FROM pragma_table_info(?1)")
        .map_err(db("reading the schema"))?;
    stmt.query_map([table], |r| r.get::<_, String>(0))
        .map_err(db("reading the schema"))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(db("reading the schema"))
}

/// A transaction that takes the write lock at once: a deferred one would
/// start as a read and, finding the lock held when it first writes, fail
/// at once without waiting out the busy timeout.
fn write_transaction(conn: &mut Connection) -> Result<rusqlite::Transaction<'_>, StoreError> {
    conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
        .map_err(db("starting a transaction"))
}

/// Runs a statement through the connection's statement cache: the
/// Resolver records the same few statements for every message.
fn exec(
    tx: &rusqlite::Transaction<'_>,
    sql: &str,
    params: impl rusqlite::Params,
) -> rusqlite::Result<usize> {
    tx.prepare_cached(sql)?.execute(params)
}

fn db(context: &'static str) -> impl FnOnce(rusqlite::Error) -> StoreError {
    move |source| StoreError::Database { context, source }
}

impl ResolverStore for SqliteResolverStore {
    fn record(&self, obs: &Observation) -> Result<Recorded, StoreError> {
        let mut conn = self.lock();
        let tx = write_transaction(&mut conn)?;
        let outcome = record_in(&tx, &mut RecordStatements::prepare(&tx)?, obs)?;
        session_index::catch_up_if_due(&tx)?;
        tx.commit().map_err(db("committing"))?;
        self.count_refused(std::slice::from_ref(&outcome));
        Ok(outcome)
    }

    fn record_batch(&self, observations: &[Observation]) -> Result<Vec<Recorded>, StoreError> {
        let mut conn = self.lock();
        let tx = write_transaction(&mut conn)?;
        let mut statements = RecordStatements::prepare(&tx)?;
        let outcomes = observations
            .iter()
            .map(|obs| record_in(&tx, &mut statements, obs))
            .collect::<Result<Vec<_>, _>>()?;
        drop(statements);
        session_index::catch_up_if_due(&tx)?;
        tx.commit().map_err(db("committing"))?;
        self.count_refused(&outcomes);
        Ok(outcomes)
    }

    fn event(&self, event_id: &str) -> Result<Vec<EventDetail>, StoreError> {
        self.details(&event_by_id_sql(), event_id)
    }

    fn events_of_message(&self, message_id: &str) -> Result<Vec<EventDetail>, StoreError> {
        let Some(path) = &self.path else {
            return self.details(&events_of_message_sql(), message_id);
        };
        // It reads the whole history: on a connection of its own, so other
        // operator reads do not queue behind it.
        let mut conn = Connection::open_with_flags(
            path,
            rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(db("opening a connection for a lookup by message id"))?;
        conn.busy_timeout(std::time::Duration::from_secs(5))
            .map_err(db("setting the busy timeout"))?;
        details_on(&mut conn, &events_of_message_sql(), message_id)
    }

    fn events(&self, filter: &EventFilter) -> Result<Vec<EventRecord>, StoreError> {
        let conn = self.read();
        let (sql, values) = list_sql(filter);
        let mut stmt = conn.prepare(&sql).map_err(db("listing events"))?;
        let rows = stmt
            .query_map(rusqlite::params_from_iter(values), event_record)
            .map_err(db("listing events"))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(db("listing events"))?;
        rows.into_iter().collect()
    }

    fn refused_writes(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    fn rows_written(&self) -> Result<Option<StoreRows>, StoreError> {
        // Both are rowid aliases: their max is a seek, not a scan.
        let (events, history): (Option<i64>, Option<i64>) = self
            .read()
            .query_row(
                "SELECT (SELECT max(id) FROM events), (SELECT max(seq) FROM history)",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .map_err(db("counting rows"))?;
        let rows = |n: Option<i64>| u64::try_from(n.unwrap_or(0)).unwrap_or(0);
        Ok(Some(StoreRows {
            events: rows(events),
            history: rows(history),
        }))
    }

    fn record_heartbeat(&self, heartbeat: &Heartbeat) -> Result<(), StoreError> {
        // A redelivered older answer must not replace a newer one.
        self.lock()
            .prepare_cached(
                "INSERT INTO heartbeats (endpoint, message_type, at_ms) VALUES (?1, ?2, ?3)
                 ON CONFLICT (endpoint) DO UPDATE SET message_type = excluded.message_type, at_ms = excluded.at_ms
                 WHERE excluded.at_ms >= heartbeats.at_ms",
            )
            .and_then(|mut stmt| {
                stmt.execute(params![
                    heartbeat.endpoint,
                    heartbeat.message_type,
                    heartbeat.at_ms
                ])
            })
            .map_err(db("recording a heartbeat"))?;
        Ok(())
    }

    fn record_replay(&self, replay: &ReplayNote) -> Result<Option<Status>, StoreError> {
        let mut conn = self.lock();
        let tx = write_transaction(&mut conn)?;
        let current = tx
            .prepare_cached(CURRENT_ROW_SQL)
            .and_then(|mut stmt| {
                stmt.query_row(params![replay.event_id, replay.endpoint], |r| {
                    Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?))
                })
                .optional()
            })
            .map_err(db("reading the event"))?;
        let Some((event_ref, status)) = current else {
            return Ok(None);
        };
        // No message id: each replay is a row of its own (the unique key
        // holds for NULL ids), and the note names the message.
        tx.prepare_cached(
            "INSERT INTO history (event_ref, endpoint, event_id, message_type, status, at_ms, from_endpoint, retry_count, error_text)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 0, ?8)",
        )
        .and_then(|mut stmt| {
            stmt.execute(params![
                event_ref,
                replay.endpoint,
                replay.event_id,
                DEAD_LETTER_REPLAY,
                status,
                replay.at_ms,
                nimbus_wire::addr::MANAGER,
                replay.note,
            ])
        })
        .map_err(db("recording the replay"))?;
        tx.commit().map_err(db("committing"))?;
        status
            .parse()
            .map(Some)
            .map_err(|_| StoreError::Corrupt(format!("event status '{status}'")))
    }

    fn record_rebuilt(&self, rebuilt: &EventRecord, note: &str) -> Result<bool, StoreError> {
        // The guard reads the source of every later write's row.
        if rebuilt.status_source.parse::<MessageKind>().is_err() {
            return Err(StoreError::Corrupt(format!(
                "a rebuilt event's status source '{}' is no message type the Resolver records",
                rebuilt.status_source
            )));
        }
        let mut conn = self.lock();
        let tx = write_transaction(&mut conn)?;
        // Every column the record has: the row reads back as it was
        // rebuilt. A row recorded meanwhile (the Resolver met a message of
        // the event) is left alone.
        let inserted = exec(
            &tx,
            &format!(
                "INSERT INTO events ({EVENT_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9,
                 ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22, ?23, ?24, ?25,
                 ?26, ?27, ?28)
                 ON CONFLICT (event_id, endpoint) DO NOTHING"
            ),
            params![
                rebuilt.endpoint,
                rebuilt.event_id,
                rebuilt.session_id,
                rebuilt.status.as_str(),
                rebuilt.sub_status,
                rebuilt.status_source,
                rebuilt.event_type,
                rebuilt.correlation_id,
                rebuilt.last_message_id,
                rebuilt.request_message_id,
                rebuilt.request_from,
                rebuilt.originating_message_id,
                rebuilt.originating_from,
                rebuilt.retry_count,
                rebuilt.error_type,
                rebuilt.error_text,
                rebuilt.dead_letter_reason,
                rebuilt.dead_letter_description,
                rebuilt.handoff_reason,
                rebuilt.external_job_id,
                rebuilt.expected_by,
                rebuilt.handler_version,
                rebuilt.queue_time_ms,
                rebuilt.processing_time_ms,
                rebuilt.payload,
                rebuilt.first_seen_ms,
                rebuilt.updated_ms,
                rebuilt.properties,
            ],
        )
        .map_err(db("recording a rebuilt event"))?;
        if inserted == 0 {
            return Ok(false);
        }
        let event_ref = tx.last_insert_rowid();
        // No message id: the entry is no message's, so no message recorded
        // later can be taken for it.
        exec(
            &tx,
            "INSERT INTO history (event_ref, endpoint, event_id, message_type, status, at_ms, from_endpoint, retry_count, error_text)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 0, ?8)",
            params![
                event_ref,
                rebuilt.endpoint,
                rebuilt.event_id,
                REBUILT_FROM_BROKER,
                rebuilt.status.as_str(),
                rebuilt.updated_ms,
                nimbus_wire::addr::MANAGER,
                note,
            ],
        )
        .map_err(db("recording a rebuilt event's history"))?;
        tx.commit().map_err(db("committing"))?;
        Ok(true)
    }

    fn heartbeats(&self) -> Result<Vec<Heartbeat>, StoreError> {
        let conn = self.read();
        let mut stmt = conn
            .prepare("SELECT endpoint, message_type, at_ms FROM heartbeats ORDER BY endpoint")
            .map_err(db("listing heartbeats"))?;
        stmt.query_map([], |r| {
            Ok(Heartbeat {
                endpoint: r.get(0)?,
                message_type: r.get(1)?,
                at_ms: r.get(2)?,
            })
        })
        .map_err(db("listing heartbeats"))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(db("listing heartbeats"))
    }
}

/// Looks an event up by id in every endpoint, through the unique key that
/// leads with the id; the row's `id` comes last, after [`EVENT_COLUMNS`].
/// The statuses of `ids` event ids, at every endpoint.
fn statuses_sql(ids: usize) -> String {
    let marks = vec!["?"; ids].join(", ");
    format!("SELECT endpoint, event_id, status, sub_status FROM events WHERE event_id IN ({marks})")
}

fn event_by_id_sql() -> String {
    format!("SELECT {EVENT_COLUMNS}, id FROM events WHERE event_id = ?1 ORDER BY endpoint")
}

/// The events whose history has a message with this id. The history has no
/// index by message id on purpose: a random page per recorded message would
/// cost every commit, for a lookup operators make by hand.
fn events_of_message_sql() -> String {
    format!(
        "SELECT {EVENT_COLUMNS}, id FROM events
         WHERE id IN (SELECT event_ref FROM history WHERE message_id = ?1)
         ORDER BY endpoint, event_id"
    )
}

/// The listing query with only the filters given, so SQLite can search by
/// the matching index (a `?n IS NULL OR column = ?n` term can use none: the
/// plan is made before the value is known), and its values in order.
fn list_sql(filter: &EventFilter) -> (String, Vec<rusqlite::types::Value>) {
    use rusqlite::types::Value;
    let mut conditions = Vec::new();
    let mut values = Vec::new();
    // A session has few events, an endpoint or a status may have millions:
    // given a session, the other filters only check its events (`+column`
    // keeps SQLite from walking their index instead, to save a sort).
    let check_only = if filter.session_id.is_some() { "+" } else { "" };
    let mut add = |column: &str, value: Option<&str>| {
        if let Some(value) = value {
            values.push(Value::Text(value.to_owned()));
            conditions.push(format!("{check_only}{column} = ?{}", values.len()));
        }
    };
    add("endpoint", filter.endpoint.as_deref());
    add("status", filter.status.map(Status::as_str));
    add("sub_status", filter.sub_status.as_deref());
    if let Some(session_id) = filter.session_id.as_deref() {
        values.push(Value::Text(session_id.to_owned()));
        conditions.push(session_index::events_of_session(values.len()));
    }
    let limit = i64::try_from(filter.limit.unwrap_or(DEFAULT_LIST_LIMIT)).unwrap_or(i64::MAX);
    values.push(Value::Integer(limit));
    let limit = values.len();
    const ORDER: &str = "ORDER BY updated_ms DESC, endpoint, event_id";
    let narrowed =
        filter.endpoint.is_some() || filter.status.is_some() || filter.session_id.is_some();
    if narrowed {
        let filters = format!("WHERE {}", conditions.join(" AND "));
        let sql =
            format!("SELECT {LISTED_EVENT_COLUMNS} FROM events {filters} {ORDER} LIMIT ?{limit}");
        return (sql, values);
    }
    // The most recent events of all: the most recent of each status, read
    // backwards along `events_by_status`, then merged. An index on the
    // update time alone would serve this with one walk, but it is one more
    // tail page every commit writes (decision 0120).
    let branches: Vec<String> = Status::ALL
        .iter()
        .map(|status| {
            let mut filters = vec![format!("status = '{}'", status.as_str())];
            filters.extend(conditions.iter().cloned());
            format!(
                "SELECT * FROM (SELECT {LISTED_EVENT_COLUMNS} FROM events WHERE {} {ORDER} LIMIT ?{limit})",
                filters.join(" AND ")
            )
        })
        .collect();
    let sql = format!(
        "SELECT * FROM ({}) {ORDER} LIMIT ?{limit}",
        branches.join(" UNION ALL ")
    );
    (sql, values)
}

/// An event's row before a write, and whether the message (?3, ?4) is in
/// its history already (a message without an id never is).
const CURRENT_ROW_AND_SEEN_SQL: &str = "SELECT id, status, status_source, session_id,
        EXISTS (SELECT 1 FROM history WHERE event_ref = events.id AND message_id = ?3 AND message_type = ?4)
     FROM events WHERE event_id = ?1 AND endpoint = ?2";

/// An event's row before a write.
const CURRENT_ROW_SQL: &str = "SELECT id, status, status_source, session_id FROM events WHERE event_id = ?1 AND endpoint = ?2";

/// What a write needs to know of the event's row before it.
struct Current {
    /// The row's `id`.
    id: i64,
    /// Its status and what set it, for the guard.
    row: Row,
    /// Its session, so the write touches the session's index entry only
    /// when the session changes.
    session_id: Option<String>,
}

/// An event's history, oldest first.
const HISTORY_OF_EVENT_SQL: &str = "SELECT message_id, message_type, status, at_ms, from_endpoint, retry_count, error_type, error_text, handler_version, refused, handoff, replaced_payload
     FROM history WHERE event_ref = ?1 ORDER BY seq";

/// Writes a status to an event's row: a new row, or the existing one with
/// what this message carries (see [`write_status`]).
const UPSERT_EVENT_SQL: &str = "INSERT INTO events (endpoint, event_id, session_id, status, sub_status, status_source, event_type, correlation_id, last_message_id,
                             retry_count, error_type, error_text, dead_letter_reason, dead_letter_description, handoff_reason, external_job_id,
                             expected_by, handler_version, queue_time_ms, processing_time_ms, payload, first_seen_ms, updated_ms,
                             request_message_id, request_from, originating_message_id, originating_from, properties)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22, ?22, ?23, ?24, ?25, ?26, ?29)
         ON CONFLICT (event_id, endpoint) DO UPDATE SET
            request_message_id = CASE WHEN ?23 IS NOT NULL AND (?27 OR request_message_id IS NULL) THEN ?23 ELSE request_message_id END,
            request_from = CASE WHEN ?23 IS NOT NULL AND (?27 OR request_message_id IS NULL) THEN ?24 ELSE request_from END,
            originating_message_id = CASE WHEN ?23 IS NOT NULL AND (?27 OR request_message_id IS NULL) THEN ?25 ELSE originating_message_id END,
            originating_from = CASE WHEN ?23 IS NOT NULL AND (?27 OR request_message_id IS NULL) THEN ?26 ELSE originating_from END,
            status = excluded.status,
            sub_status = excluded.sub_status,
            status_source = excluded.status_source,
            event_type = COALESCE(excluded.event_type, event_type),
            correlation_id = COALESCE(excluded.correlation_id, correlation_id),
            last_message_id = COALESCE(excluded.last_message_id, last_message_id),
            retry_count = excluded.retry_count,
            error_type = excluded.error_type,
            error_text = excluded.error_text,
            dead_letter_reason = excluded.dead_letter_reason,
            dead_letter_description = excluded.dead_letter_description,
            handoff_reason = excluded.handoff_reason,
            external_job_id = excluded.external_job_id,
            expected_by = excluded.expected_by,
            handler_version = COALESCE(excluded.handler_version, handler_version),
            queue_time_ms = COALESCE(excluded.queue_time_ms, queue_time_ms),
            processing_time_ms = COALESCE(excluded.processing_time_ms, processing_time_ms),
            payload = CASE WHEN ?28 THEN COALESCE(excluded.payload, payload) ELSE COALESCE(payload, excluded.payload) END,
            properties = COALESCE(excluded.properties, properties),
            updated_ms = excluded.updated_ms";

/// Appends one history entry.
const INSERT_HISTORY_SQL: &str = "INSERT INTO history (event_ref, endpoint, event_id, message_id, message_type, status, at_ms, from_endpoint, retry_count, error_type, error_text, handler_version, refused, handoff, replaced_payload)
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)";

/// The statements every record runs, looked up once per transaction rather
/// than once per record: the statement cache hashes a statement's whole
/// text on each lookup, the upsert's is ~2.5 KB, and the recorder ran
/// three lookups per message on its one thread.
struct RecordStatements<'t> {
    current_row: CachedStatement<'t>,
    upsert: CachedStatement<'t>,
    history: CachedStatement<'t>,
}

impl<'t> RecordStatements<'t> {
    fn prepare(tx: &'t rusqlite::Transaction<'_>) -> Result<Self, StoreError> {
        let prepare = |sql| {
            tx.prepare_cached(sql)
                .map_err(db("preparing a record's statements"))
        };
        Ok(RecordStatements {
            current_row: prepare(CURRENT_ROW_AND_SEEN_SQL)?,
            upsert: prepare(UPSERT_EVENT_SQL)?,
            history: prepare(INSERT_HISTORY_SQL)?,
        })
    }
}

/// An event's payload now, read before a resubmission may replace it.
const PAYLOAD_SQL: &str = "SELECT payload FROM events WHERE id = ?1";

/// Records one message inside `tx`: the guarded status write, the history
/// row (keyed by the event's `id`), then the request coordinates.
fn record_in(
    tx: &rusqlite::Transaction<'_>,
    statements: &mut RecordStatements<'_>,
    obs: &Observation,
) -> Result<Recorded, StoreError> {
    let (current, already_recorded) = current_row(&mut statements.current_row, obs)?;
    // A redelivered message changes nothing, unless it is a control
    // request, whose verdict the guard still gives.
    if already_recorded && !obs.kind.is_control_request() {
        return Ok(Recorded::AlreadyRecorded);
    }
    let row = current.as_ref().map(|c| c.row);
    let (status, sub_status) = obs.status();
    let verdict = guard::judge(row, obs.kind, already_recorded);
    // Read only for a resubmission that carries a payload (rare), before
    // the write below replaces it.
    let replaced_payload = match (&current, obs.kind, &obs.payload) {
        (Some(Current { id, .. }), MessageKind::ResubmissionRequest, Some(payload))
            if !already_recorded && matches!(verdict, Verdict::Apply) =>
        {
            tx.prepare_cached(PAYLOAD_SQL)
                .and_then(|mut stmt| stmt.query_row(params![id], |r| r.get::<_, Option<String>>(0)))
                .map_err(db("reading the payload"))?
                .filter(|before| before != payload)
        }
        _ => None,
    };
    let (event_ref, outcome) = match verdict {
        Verdict::Apply => (
            write_status(
                tx,
                &mut statements.upsert,
                current.as_ref(),
                obs,
                status,
                sub_status,
            )?,
            Recorded::Applied { status },
        ),
        Verdict::Refuse(reason) => {
            tracing::info!(
                endpoint = %obs.endpoint,
                event_id = %obs.event_id,
                message_type = obs.kind.as_str(),
                %reason,
                "resolver: ignored stale status write"
            );
            // The guard refuses only a write to an existing row.
            let Some(Current { id, row, .. }) = current else {
                return Err(StoreError::Corrupt(format!(
                    "a refused write to event '{}' has no row",
                    obs.event_id
                )));
            };
            // Coordinates are facts about the request, not a status: a
            // late request copy whose status write is refused still
            // supplies them.
            if let Some(coordinates) = Coordinates::of(obs) {
                write_coordinates(tx, id, &coordinates)?;
            }
            (
                id,
                Recorded::Refused {
                    current: row.status,
                    reason,
                },
            )
        }
    };
    if !already_recorded {
        let refused = match &outcome {
            Recorded::Refused { reason, .. } => Some(reason.as_str()),
            _ => None,
        };
        let handoff = obs
            .handoff
            .as_ref()
            .filter(|h| !h.is_empty())
            .map(serde_json::to_string)
            .transpose()
            .map_err(|source| StoreError::Encode {
                context: "a history entry's handoff",
                source,
            })?;
        statements
            .history
            .execute(params![
                event_ref,
                obs.endpoint,
                obs.event_id,
                obs.message_id,
                obs.kind.as_str(),
                status.as_str(),
                obs.at_ms,
                obs.from,
                obs.retry_count,
                obs.error_type,
                obs.error_text,
                obs.handler_version,
                refused,
                handoff,
                replaced_payload,
            ])
            .map_err(db("appending history"))?;
    }
    Ok(outcome)
}

/// The event's row as it is before this write, if it has one, and whether
/// this message is in its history already (one lookup for both).
fn current_row(
    statement: &mut CachedStatement<'_>,
    obs: &Observation,
) -> Result<(Option<Current>, bool), StoreError> {
    let found = statement
        .query_row(
            params![
                obs.event_id,
                obs.endpoint,
                obs.message_id,
                obs.kind.as_str()
            ],
            |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, Option<String>>(3)?,
                    r.get::<_, bool>(4)?,
                ))
            },
        )
        .optional()
        .map_err(db("reading the event"))?;
    let Some((id, status, source, session_id, seen)) = found else {
        // No row yet: nothing about this event was recorded.
        return Ok((None, false));
    };
    let current = Current {
        id,
        row: Row {
            status: status
                .parse()
                .map_err(|e| StoreError::Corrupt(format!("{e}")))?,
            source: source
                .parse()
                .map_err(|e| StoreError::Corrupt(format!("{e}")))?,
        },
        session_id,
    };
    Ok((Some(current), seen))
}

/// Applies a status write to the event's row (`current`, or a new one) and
/// returns the row's `id`, keeping what
/// earlier messages established when this one does not carry it (a
/// Resolution has no error; the failure before it stays readable in
/// history, not in the row).
///
/// The session is written by its own statement, and only when it changes
/// (with its entry in the session index): SQLite rewrites the entry of
/// every index whose column an `UPDATE` names, changed or not, and an
/// index keyed by the session has one tail page per busy session, so
/// naming it in the upsert cost a page per response (~1.3 WAL pages per
/// event in `nimbus bench`, then the largest item; decision 0103).
fn write_status(
    tx: &rusqlite::Transaction<'_>,
    upsert: &mut CachedStatement<'_>,
    current: Option<&Current>,
    obs: &Observation,
    status: Status,
    sub_status: Option<&str>,
) -> Result<i64, StoreError> {
    // The row's handoff columns describe a handoff in flight only, so any
    // later message clears them (a settled event showing a job would read
    // as still waiting on it); each park's history entry keeps its job.
    let handoff = obs.handoff.clone().unwrap_or_default();
    // Error columns describe the current status only.
    let carries_error = matches!(
        status,
        Status::Failed | Status::DeadLettered | Status::Skipped | Status::Deferred
    );
    let (error_type, error_text) = if carries_error {
        (obs.error_type.as_deref(), obs.error_text.as_deref())
    } else {
        (None, None)
    };
    // The coordinates ride on the same statement (see `write_coordinates`
    // for the rule); ?23 is NULL when this message supplies none.
    let coordinates = Coordinates::of(obs);
    let (request_message_id, request_from, originating_message_id, originating_from, authoritative) =
        match &coordinates {
            Some(c) => (
                Some(c.request_message_id),
                c.request_from,
                c.originating_message_id,
                c.originating_from,
                c.authoritative,
            ),
            None => (None, None, None, None, false),
        };
    // A request carries the event as it is to run (a resubmission may carry
    // an edited one), so it replaces the payload. A response copies its
    // request's body, which for a handoff completion is the job's details,
    // not the event: it only fills a payload still unknown.
    let payload_authoritative = obs.kind.is_request();
    upsert
        .execute(params![
            obs.endpoint,
            obs.event_id,
            obs.session_id,
            status.as_str(),
            sub_status,
            obs.kind.as_str(),
            obs.event_type,
            obs.correlation_id,
            obs.message_id,
            obs.retry_count,
            error_type,
            error_text,
            obs.dead_letter_reason,
            obs.dead_letter_description,
            handoff.reason,
            handoff.external_job_id,
            handoff.expected_by,
            obs.handler_version,
            obs.queue_time_ms,
            obs.processing_time_ms,
            obs.payload,
            obs.at_ms,
            request_message_id,
            request_from,
            originating_message_id,
            originating_from,
            authoritative,
            payload_authoritative,
            obs.properties,
        ])
        .map_err(db("writing the status"))?;
    let Some(current) = current else {
        // A new row's id is the last one inserted; `RETURNING` would cost
        // the upsert a temporary table on every write.
        return Ok(tx.last_insert_rowid());
    };
    // As `COALESCE(new, old)`: a message without a session keeps the row's.
    if let Some(session_id) = obs.session_id.as_deref()
        && current.session_id.as_deref() != Some(session_id)
    {
        exec(
            tx,
            "UPDATE events SET session_id = ?2 WHERE id = ?1",
            params![current.id, session_id],
        )
        .map_err(db("writing the session"))?;
        session_index::moved(tx, current.id, current.session_id.as_deref(), session_id)?;
    }
    Ok(current.id)
}

/// Records where the event came from, so the Manager can address a control
/// message from the store alone. The EventRequest copy is the authority and
/// always writes the lineage; any other message fills it only while it is
/// unknown (a response's `ParentMessageId` is the request's `MessageId`).
/// The lineage is written as one group, since `NULL` means `self`.
fn write_coordinates(
    tx: &rusqlite::Transaction<'_>,
    id: i64,
    coordinates: &Coordinates<'_>,
) -> Result<(), StoreError> {
    exec(
        tx,
        "UPDATE events SET request_message_id = ?2, request_from = ?3, originating_message_id = ?4, originating_from = ?5
         WHERE id = ?1 AND (?6 OR request_message_id IS NULL)",
        params![
            id,
            coordinates.request_message_id,
            coordinates.request_from,
            coordinates.originating_message_id,
            coordinates.originating_from,
            coordinates.authoritative,
        ],
    )
    .map_err(db("writing the request coordinates"))?;
    Ok(())
}

/// What one message tells about the request the endpoint received.
struct Coordinates<'a> {
    request_message_id: &'a str,
    request_from: Option<&'a str>,
    originating_message_id: Option<&'a str>,
    originating_from: Option<&'a str>,
    /// The EventRequest copy itself: it overrides what responses supplied.
    authoritative: bool,
}

impl<'a> Coordinates<'a> {
    fn of(obs: &'a Observation) -> Option<Coordinates<'a>> {
        let (request_message_id, request_from) = match obs.kind {
            MessageKind::EventRequest => (obs.message_id.as_deref(), obs.from.as_deref()),
            kind if kind.is_request() => return None,
            // A response's OriginatingFrom is the request's From (or, for an
            // external publish, the lineage's own OriginatingFrom).
            _ => (
                obs.parent_message_id.as_deref(),
                obs.originating_from.as_deref(),
            ),
        };
        Some(Coordinates {
            request_message_id: request_message_id?,
            request_from,
            originating_message_id: obs.originating_message_id.as_deref(),
            originating_from: obs.originating_from.as_deref(),
            authoritative: obs.kind == MessageKind::EventRequest,
        })
    }
}

/// The columns an [`EventRecord`] is read from, with `$payload` where the
/// payload goes.
macro_rules! event_columns {
    ($payload:literal) => {
        concat!(
            "endpoint, event_id, session_id, status, sub_status, status_source, event_type, correlation_id, last_message_id,
    request_message_id, request_from, originating_message_id, originating_from,
    retry_count, error_type, error_text, dead_letter_reason, dead_letter_description, handoff_reason, external_job_id, expected_by,
    handler_version, queue_time_ms, processing_time_ms, ",
            $payload,
            ", first_seen_ms, updated_ms, properties"
        )
    };
}

const EVENT_COLUMNS: &str = event_columns!("payload");

/// [`EVENT_COLUMNS`] for a listing, which leaves the payload out: a
/// payload may be up to 2 MiB, a listing holds up to a thousand events by
/// default, and the event's own view has it.
const LISTED_EVENT_COLUMNS: &str = event_columns!("NULL");

/// How many columns [`EVENT_COLUMNS`] names (a query's next column index).
const EVENT_COLUMN_COUNT: usize = 28;

fn parse_status(text: String) -> Result<Status, StoreError> {
    text.parse()
        .map_err(|e| StoreError::Corrupt(format!("{e}")))
}

fn event_record(r: &SqlRow<'_>) -> rusqlite::Result<Result<EventRecord, StoreError>> {
    let status: String = r.get(3)?;
    let record = EventRecord {
        endpoint: r.get(0)?,
        event_id: r.get(1)?,
        session_id: r.get(2)?,
        status: Status::Pending,
        sub_status: r.get(4)?,
        status_source: r.get(5)?,
        event_type: r.get(6)?,
        correlation_id: r.get(7)?,
        last_message_id: r.get(8)?,
        request_message_id: r.get(9)?,
        request_from: r.get(10)?,
        originating_message_id: r.get(11)?,
        originating_from: r.get(12)?,
        retry_count: r.get(13)?,
        error_type: r.get(14)?,
        error_text: r.get(15)?,
        dead_letter_reason: r.get(16)?,
        dead_letter_description: r.get(17)?,
        handoff_reason: r.get(18)?,
        external_job_id: r.get(19)?,
        expected_by: r.get(20)?,
        handler_version: r.get(21)?,
        queue_time_ms: r.get(22)?,
        processing_time_ms: r.get(23)?,
        payload: r.get(24)?,
        first_seen_ms: r.get(25)?,
        updated_ms: r.get(26)?,
        properties: r.get(27)?,
    };
    Ok(parse_status(status).map(|status| EventRecord { status, ..record }))
}

fn history_entry(r: &SqlRow<'_>) -> rusqlite::Result<Result<HistoryEntry, StoreError>> {
    let status: String = r.get(2)?;
    let handoff: Option<String> = r.get(10)?;
    let handoff = match handoff
        .as_deref()
        .map(serde_json::from_str::<HandoffDetails>)
        .transpose()
    {
        Ok(handoff) => handoff,
        Err(e) => {
            return Ok(Err(StoreError::Corrupt(format!(
                "a history entry's handoff is not readable: {e}"
            ))));
        }
    };
    let entry = HistoryEntry {
        message_id: r.get(0)?,
        message_type: r.get(1)?,
        status: Status::Pending,
        at_ms: r.get(3)?,
        from: r.get(4)?,
        retry_count: r.get(5)?,
        error_type: r.get(6)?,
        error_text: r.get(7)?,
        handler_version: r.get(8)?,
        refused: r.get(9)?,
        handoff,
        replaced_payload: r.get(11)?,
    };
    Ok(parse_status(status).map(|status| HistoryEntry { status, ..entry }))
}

#[cfg(test)]
mod query_plans {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;

    /// SQLite's plan for `sql`, one line per step.
    fn plan(sql: &str) -> String {
        let conn = Connection::open_in_memory().unwrap();
        migrate(&conn).unwrap();
        conn.execute_batch(SCHEMA).unwrap();
        session_index::open(&conn).unwrap();
        let mut stmt = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
        // The plan does not depend on the values; bind NULLs.
        let nulls = vec![rusqlite::types::Value::Null; stmt.parameter_count()];
        let steps: Vec<String> = stmt
            .query_map(rusqlite::params_from_iter(nulls), |r| r.get::<_, String>(3))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        steps.join("\n")
    }

    /// An operator looks events up on a store of millions: by id, by
    /// status, by session. None of those may read the whole table.
    #[test]
    fn lookups_and_filtered_listings_search_an_index() {
        let statuses = plan(&statuses_sql(3));
        assert!(
            statuses.contains("SEARCH events USING INDEX sqlite_autoindex_events_1"),
            "{statuses}"
        );
        assert!(!statuses.contains("SCAN"), "{statuses}");
        let by_id = plan(&event_by_id_sql());
        assert!(
            by_id.contains("SEARCH events USING INDEX sqlite_autoindex_events_1"),
            "{by_id}"
        );
        assert!(!by_id.contains("SCAN"), "{by_id}");
        for (filter, index) in [
            (
                EventFilter {
                    status: Some(Status::Failed),
                    ..EventFilter::default()
                },
                "events_by_status",
            ),
            (
                EventFilter {
                    endpoint: Some("billing".to_owned()),
                    ..EventFilter::default()
                },
                "events_by_endpoint",
            ),
        ] {
            let listing = plan(&list_sql(&filter).0);
            assert!(
                listing.contains(&format!("SEARCH events USING INDEX {index}")),
                "{filter:?}: {listing}"
            );
            assert!(!listing.contains("SCAN events"), "{filter:?}: {listing}");
        }
    }

    /// A session's events: the indexed ones through the session index,
    /// those beyond its mark by the events' key, each event then by key.
    #[test]
    fn a_listing_by_session_searches_the_session_index_and_the_key() {
        let listing = plan(
            &list_sql(&EventFilter {
                session_id: Some("s".to_owned()),
                ..EventFilter::default()
            })
            .0,
        );
        assert!(
            listing.contains("SEARCH session_events USING PRIMARY KEY (session_id=?)"),
            "{listing}"
        );
        assert!(
            listing.contains("SEARCH events USING INTEGER PRIMARY KEY (rowid>?)"),
            "{listing}"
        );
        assert!(
            listing.contains("SEARCH events USING INTEGER PRIMARY KEY (rowid=?)"),
            "{listing}"
        );
        // The mark is the one row of its table.
        assert!(!listing.contains("SCAN events"), "{listing}");
        assert!(!listing.contains("SCAN session_events"), "{listing}");
    }

    /// Given a session and an endpoint or status too, the session decides
    /// what is read: the endpoint's or status's index would walk all of
    /// their events.
    #[test]
    fn a_session_with_other_filters_is_still_read_by_session() {
        for filter in [
            EventFilter {
                endpoint: Some("billing".to_owned()),
                session_id: Some("s".to_owned()),
                ..EventFilter::default()
            },
            EventFilter {
                status: Some(Status::Failed),
                sub_status: Some("Handoff".to_owned()),
                session_id: Some("s".to_owned()),
                ..EventFilter::default()
            },
        ] {
            let listing = plan(&list_sql(&filter).0);
            assert!(
                listing.contains("SEARCH events USING INTEGER PRIMARY KEY (rowid=?)"),
                "{filter:?}: {listing}"
            );
            assert!(
                listing.contains("SEARCH session_events USING PRIMARY KEY (session_id=?)"),
                "{filter:?}: {listing}"
            );
            assert!(
                !listing.contains("USING INDEX events_by"),
                "{filter:?}: {listing}"
            );
        }
    }

    /// Every record reads the event's row and its history: by key, and the
    /// history by the event's `id` (whose recent values share pages).
    #[test]
    fn recording_searches_by_key_and_history_by_event_ref() {
        for sql in [CURRENT_ROW_SQL, CURRENT_ROW_AND_SEEN_SQL] {
            let row = plan(sql);
            assert!(
                row.contains("SEARCH events USING INDEX sqlite_autoindex_events_1"),
                "{row}"
            );
        }
        for sql in [CURRENT_ROW_AND_SEEN_SQL, HISTORY_OF_EVENT_SQL] {
            let steps = plan(sql);
            assert!(
                steps.contains("SEARCH history USING INDEX history_of_event (event_ref=?)"),
                "{sql}: {steps}"
            );
            assert!(!steps.contains("SCAN"), "{sql}: {steps}");
        }
    }

    /// The unfiltered listing (the most recent events) reads the most
    /// recent of each status from the status index and merges them, rather
    /// than sorting the whole table; so does one by sub-status alone.
    #[test]
    fn the_unfiltered_listing_reads_the_most_recent_of_each_status() {
        for filter in [
            EventFilter::default(),
            EventFilter {
                sub_status: Some("Handoff".to_owned()),
                ..EventFilter::default()
            },
        ] {
            let listing = plan(&list_sql(&filter).0);
            assert_eq!(
                listing
                    .matches("SEARCH events USING INDEX events_by_status (status=?)")
                    .count(),
                Status::ALL.len(),
                "{filter:?}: {listing}"
            );
            assert!(
                listing.contains("MERGE (UNION ALL)"),
                "{filter:?}: {listing}"
            );
            assert!(!listing.contains("SCAN events"), "{filter:?}: {listing}");
        }
    }

    /// The select list, the table's declaration (which an upgrade copies
    /// by the select list) and the count name the same columns in order.
    #[test]
    fn event_columns_are_counted_right() {
        let selected: Vec<&str> = EVENT_COLUMNS.split(',').map(str::trim).collect();
        let declared: Vec<&str> = EVENT_TABLE_COLUMNS
            .split(',')
            .filter_map(|line| line.split_whitespace().next())
            .collect();
        assert_eq!(selected, declared);
        assert_eq!(selected.len(), EVENT_COLUMN_COUNT);
    }

    #[test]
    fn listing_binds_only_the_filters_given_then_the_limit() {
        let (sql, values) = list_sql(&EventFilter {
            endpoint: Some("billing".to_owned()),
            session_id: Some("s-1".to_owned()),
            limit: Some(5),
            ..EventFilter::default()
        });
        assert!(sql.contains("+endpoint = ?1 AND session_id = ?2"), "{sql}");
        assert!(sql.contains("LIMIT ?3"), "{sql}");
        assert_eq!(
            values,
            [
                rusqlite::types::Value::Text("billing".to_owned()),
                rusqlite::types::Value::Text("s-1".to_owned()),
                rusqlite::types::Value::Integer(5),
            ]
        );
        let (sql, values) = list_sql(&EventFilter::default());
        for status in Status::ALL {
            assert!(
                sql.contains(&format!("WHERE status = '{}' ORDER", status.as_str())),
                "{sql}"
            );
        }
        assert_eq!(values, [rusqlite::types::Value::Integer(1000)]);
    }
}

#[cfg(test)]
mod durability {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;

    fn synchronous(store: &SqliteResolverStore) -> i64 {
        store
            .lock()
            .pragma_query_value(None, "synchronous", |r| r.get(0))
            .unwrap()
    }

    /// SQLite's levels: 1 is NORMAL (fsync at checkpoints), 2 is FULL
    /// (fsync at every commit).
    #[test]
    fn each_durability_sets_its_sync_level() {
        let dir = tempfile::tempdir().unwrap();
        let power = SqliteResolverStore::open_with(
            &dir.path().join("power.db"),
            StoreDurability::PowerLoss,
        )
        .unwrap();
        assert_eq!(synchronous(&power), 2);
        let crash = SqliteResolverStore::open(&dir.path().join("crash.db")).unwrap();
        assert_eq!(synchronous(&crash), 1);
    }
}
