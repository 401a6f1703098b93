//! The broker of earlier builds kept its log in SQLite
//! (`<data_dir>/broker.sqlite3`, schema version 1). At the first open of such
//! a data directory its rows are read as [`StoreOp`]s, written to the log as
//! its first snapshot, and the database file is renamed with an `.imported`
//! suffix (decision 0115).

use std::path::Path;
use std::time::Duration;

use rusqlite::{Connection, OpenFlags, OptionalExtension};

use nimbus_transport::{SubscriptionSettings, TopicSettings};

use crate::error::OpenError;
use crate::op_serde::from_millis;
use crate::records::{EntryRow, StoreOp};

/// The earlier database's file name in the data directory.
pub(crate) const FILE_NAME: &str = "broker.sqlite3";
/// The one schema version earlier builds wrote.
const SCHEMA_VERSION: i64 = 1;

/// Reads every row of the database at `path` as ops that rebuild it; `None`
/// when the file holds no schema (an empty database).
pub(crate) fn read(path: &Path) -> Result<Option<Vec<StoreOp>>, OpenError> {
    let db = |source| OpenError::Database {
        path: path.display().to_string(),
        source,
    };
    let conn = Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_WRITE).map_err(db)?;
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .map_err(db)?;
    if version == 0 {
        return Ok(None);
    }
    if version != SCHEMA_VERSION {
        return Err(OpenError::Corrupt {
            path: path.display().to_string(),
            reason: format!(
                "schema version {version}, this build imports version {SCHEMA_VERSION}"
            ),
        });
    }
    let ops = read_rows(&conn).map_err(db)?;
    // Closing the last connection folds the WAL into the file, so the one
    // file is all there is to rename.
    conn.close().map_err(|(_, source)| db(source))?;
    Ok(Some(ops))
}

fn read_rows(conn: &Connection) -> rusqlite::Result<Vec<StoreOp>> {
    let mut ops = Vec::new();
    let ms = |v: Option<i64>| v.map(|v| Duration::from_millis(v.max(0).unsigned_abs()));
    if let Some(sequence) = conn
        .query_row("SELECT value FROM meta WHERE key = 'sequence'", [], |r| {
            r.get(0)
        })
        .optional()?
    {
        ops.push(StoreOp::SequenceHighWater(sequence));
    }

    push_rows(
        conn,
        "SELECT name, default_ttl_ms, dedup_window_ms FROM topics",
        &mut ops,
        |r| {
            let mut settings = TopicSettings::default();
            settings.default_message_ttl = ms(r.get(1)?);
            settings.duplicate_detection_window = ms(r.get(2)?);
            Ok(StoreOp::PutTopic {
                name: r.get(0)?,
                settings,
            })
        },
    )?;

    push_rows(
        conn,
        "SELECT topic, name, requires_session, lock_ms, max_delivery, default_ttl_ms,
         dead_letter_on_expiry, forward_to FROM subscriptions",
        &mut ops,
        |r| {
            let mut settings = SubscriptionSettings::default();
            settings.requires_session = r.get(2)?;
            settings.lock_duration =
                Duration::from_millis(r.get::<_, i64>(3)?.max(0).unsigned_abs());
            settings.max_delivery_count = r.get(4)?;
            settings.default_message_ttl = ms(r.get(5)?);
            settings.dead_letter_on_expiry = r.get(6)?;
            settings.forward_to = r.get(7)?;
            Ok(StoreOp::PutSubscription {
                topic: r.get(0)?,
                name: r.get(1)?,
                settings,
            })
        },
    )?;

    push_rows(
        conn,
        "SELECT topic, subscription, name, filter, action, ord FROM rules",
        &mut ops,
        |r| {
            Ok(StoreOp::PutRule {
                topic: r.get(0)?,
                subscription: r.get(1)?,
                name: r.get(2)?,
                filter: r.get(3)?,
                action: r.get(4)?,
                order: r.get(5)?,
            })
        },
    )?;

    push_rows(
        conn,
        "SELECT id, topic, subscription, dead_letter, seq, enqueued_ms, expires_ms, failures,
         dl_reason, dl_description, message FROM entries ORDER BY id",
        &mut ops,
        |r| {
            Ok(StoreOp::InsertEntry(Box::new(EntryRow {
                id: r.get(0)?,
                topic: r.get(1)?,
                subscription: r.get(2)?,
                dead_letter: r.get(3)?,
                seq: r.get(4)?,
                enqueued: from_millis(r.get(5)?),
                expires: r.get::<_, Option<i64>>(6)?.map(from_millis),
                failures: r.get(7)?,
                dead_letter_reason: r.get(8)?,
                dead_letter_description: r.get(9)?,
                message: r.get(10)?,
            })))
        },
    )?;

    push_rows(
        conn,
        "SELECT seq, topic, at_ms, message FROM scheduled",
        &mut ops,
        |r| {
            Ok(StoreOp::InsertScheduled {
                seq: r.get(0)?,
                topic: r.get(1)?,
                at: from_millis(r.get(2)?),
                message: r.get(3)?,
            })
        },
    )?;

    push_rows(
        conn,
        "SELECT topic, subscription, session, state FROM session_state",
        &mut ops,
        |r| {
            Ok(StoreOp::SetSessionState {
                topic: r.get(0)?,
                subscription: r.get(1)?,
                session: r.get(2)?,
                state: Some(r.get(3)?),
            })
        },
    )?;

    push_rows(
        conn,
        "SELECT topic, message_id, at_ms, seq FROM dedup",
        &mut ops,
        |r| {
            Ok(StoreOp::PutDedup {
                topic: r.get(0)?,
                message_id: r.get(1)?,
                at: from_millis(r.get(2)?),
                seq: r.get(3)?,
            })
        },
    )?;

    push_rows(
        conn,
        "SELECT scope, key, expires_ms FROM inbox",
        &mut ops,
        |r| {
            Ok(StoreOp::PutInbox {
                scope: r.get(0)?,
                key: r.get(1)?,
                expires: from_millis(r.get(2)?),
            })
        },
    )?;
    Ok(ops)
}

/// Runs `sql` and pushes the op `to_op` makes of each row.
fn push_rows(
    conn: &Connection,
    sql: &str,
    ops: &mut Vec<StoreOp>,
    to_op: impl FnMut(&rusqlite::Row<'_>) -> rusqlite::Result<StoreOp>,
) -> rusqlite::Result<()> {
    let mut stmt = conn.prepare(sql)?;
    for op in stmt.query_map([], to_op)? {
        ops.push(op?);
    }
    Ok(())
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "tests")]
mod tests {
    use super::*;

    /// The schema earlier builds created, verbatim.
    pub(crate) const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS topics (
    name TEXT PRIMARY KEY,
    default_ttl_ms INTEGER,
    dedup_window_ms INTEGER
);
CREATE TABLE IF NOT EXISTS subscriptions (
    topic TEXT NOT NULL,
    name TEXT NOT NULL,
    requires_session INTEGER NOT NULL,
    lock_ms INTEGER NOT NULL,
    max_delivery INTEGER NOT NULL,
    default_ttl_ms INTEGER,
    dead_letter_on_expiry INTEGER NOT NULL,
    forward_to TEXT,
    PRIMARY KEY (topic, name)
);
CREATE TABLE IF NOT EXISTS rules (
    topic TEXT NOT NULL,
    subscription TEXT NOT NULL,
    name TEXT NOT NULL,
    filter TEXT NOT NULL,
    action TEXT,
    ord INTEGER NOT NULL,
    PRIMARY KEY (topic, subscription, name)
);
CREATE TABLE IF NOT EXISTS entries (
    id INTEGER PRIMARY KEY,
    topic TEXT NOT NULL,
    subscription TEXT NOT NULL,
    dead_letter INTEGER NOT NULL,
    seq INTEGER NOT NULL,
    enqueued_ms INTEGER NOT NULL,
    expires_ms INTEGER,
    failures INTEGER NOT NULL,
    dl_reason TEXT,
    dl_description TEXT,
    message BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS scheduled (
    seq INTEGER PRIMARY KEY,
    topic TEXT NOT NULL,
    at_ms INTEGER NOT NULL,
    message BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS session_state (
    topic TEXT NOT NULL,
    subscription TEXT NOT NULL,
    session TEXT NOT NULL,
    state BLOB NOT NULL,
    PRIMARY KEY (topic, subscription, session)
);
CREATE TABLE IF NOT EXISTS dedup (
    topic TEXT NOT NULL,
    message_id TEXT NOT NULL,
    at_ms INTEGER NOT NULL,
    seq INTEGER NOT NULL,
    PRIMARY KEY (topic, message_id)
);
CREATE TABLE IF NOT EXISTS inbox (
    scope TEXT NOT NULL,
    key TEXT NOT NULL,
    expires_ms INTEGER NOT NULL,
    PRIMARY KEY (scope, key)
);
";

    /// A database as an earlier build left it: one of every row.
    fn earlier_database(path: &Path) {
        let conn = Connection::open(path).unwrap();
        conn.execute_batch(SCHEMA).unwrap();
        conn.pragma_update(None, "user_version", 1).unwrap();
        let mut message = nimbus_transport::Message::new(b"kept".to_vec());
        message.session_id = Some("k".into());
        let blob = crate::codec::encode(&message);
        conn.execute_batch(
            "INSERT INTO meta VALUES ('sequence', 41);
             INSERT INTO topics VALUES ('t', NULL, 60000);
             INSERT INTO subscriptions VALUES ('t', 's', 1, 30000, 7, NULL, 1, NULL);
             INSERT INTO rules VALUES ('t', 's', 'b', 'n = 2', NULL, 2);
             INSERT INTO rules VALUES ('t', 's', 'a', 'n = 1', 'SET x = 1', 1);
             INSERT INTO session_state VALUES ('t', 's', 'k', x'0102');
             INSERT INTO dedup VALUES ('t', 'm-1', 1700000000000, 40);
             INSERT INTO inbox VALUES ('scope', 'key', 4102444800000);",
        )
        .unwrap();
        conn.execute(
            "INSERT INTO entries VALUES (40, 't', 's', 0, 40, 1700000000000, NULL, 2, NULL, NULL, ?1)",
            [&blob],
        )
        .unwrap();
        conn.execute(
            "INSERT INTO scheduled VALUES (41, 't', 4102444800000, ?1)",
            [&blob],
        )
        .unwrap();
    }

    fn open(dir: &Path) -> crate::records::Snapshot {
        let (store, snapshot) = crate::store::Store::open(
            dir,
            crate::Durability::Fsync,
            crate::store::DEFAULT_SEGMENT_BYTES,
        )
        .unwrap();
        store.shutdown();
        snapshot
    }

    #[test]
    fn an_earlier_database_is_imported_whole_once_and_renamed_aside() {
        let dir = tempfile::tempdir().unwrap();
        earlier_database(&dir.path().join(FILE_NAME));
        for round in ["import", "reopen from the log"] {
            let snapshot = open(dir.path());
            assert_eq!(snapshot.sequence, 41, "{round}");
            assert_eq!(snapshot.topics.len(), 1, "{round}");
            assert_eq!(
                snapshot.topics[0].1.duplicate_detection_window,
                Some(Duration::from_secs(60)),
                "{round}"
            );
            let (_, _, settings) = &snapshot.subscriptions[0];
            assert!(
                settings.requires_session && settings.dead_letter_on_expiry,
                "{round}"
            );
            assert_eq!(settings.max_delivery_count, 7, "{round}");
            let rule_names: Vec<_> = snapshot.rules.iter().map(|r| r.2.as_str()).collect();
            assert_eq!(rule_names, ["a", "b"], "rules in creation order ({round})");
            assert_eq!(snapshot.rules[0].4.as_deref(), Some("SET x = 1"), "{round}");
            assert_eq!(snapshot.entries.len(), 1, "{round}");
            let entry = &snapshot.entries[0];
            assert_eq!((entry.row.id, entry.row.failures), (40, 2), "{round}");
            assert_eq!(entry.decoded.body, b"kept", "{round}");
            assert_eq!(snapshot.scheduled.len(), 1, "{round}");
            assert_eq!(snapshot.session_states[0].3, vec![1, 2], "{round}");
            assert_eq!(snapshot.dedup[0].1, "m-1", "{round}");
            assert_eq!(snapshot.inbox[0].1, "key", "{round}");
            assert!(!dir.path().join(FILE_NAME).exists(), "{round}");
            assert!(
                dir.path().join("broker.sqlite3.imported").exists(),
                "{round}"
            );
        }
    }

    #[test]
    fn an_earlier_database_of_an_unknown_schema_is_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE_NAME);
        let conn = Connection::open(&path).unwrap();
        conn.pragma_update(None, "user_version", 99).unwrap();
        drop(conn);
        let Err(error) = crate::store::Store::open(
            dir.path(),
            crate::Durability::Fsync,
            crate::store::DEFAULT_SEGMENT_BYTES,
        ) else {
            panic!("refused");
        };
        assert!(error.to_string().contains("schema version 99"), "{error}");
        assert!(path.exists(), "nothing renamed");
    }

    #[test]
    fn a_database_without_a_schema_imports_nothing_and_is_renamed_aside() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE_NAME);
        drop(Connection::open(&path).unwrap());
        assert!(read(&path).unwrap().is_none());
        let snapshot = open(dir.path());
        assert!(snapshot.topics.is_empty() && snapshot.entries.is_empty());
        assert!(!path.exists());
        assert!(dir.path().join("broker.sqlite3.imported").exists());
    }
}
