//! Folds the Resolver store's WAL back into the database on a thread of its
//! own, so the recorder's commits never wait for a checkpoint.
//!
//! SQLite checkpoints inline by default: the commit that crosses
//! `wal_autocheckpoint` pages copies them back and fsyncs the database file
//! before it returns, and every record queued behind it waits (a 100+ ms
//! stall in `nimbus bench`'s open loop at a 16k-page interval). Here the
//! writer's automatic checkpoint is pushed far out, as a backstop only, and
//! this thread runs a `PASSIVE` checkpoint (never blocks the writer or a
//! reader) on a second connection every [`CHECKPOINT_EVERY`].

use std::path::Path;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

use rusqlite::Connection;

use crate::store::StoreError;

/// How often the background thread checkpoints.
pub(crate) const CHECKPOINT_EVERY: Duration = Duration::from_millis(250);

/// The writer's own automatic checkpoint, in WAL pages (~256 MiB): reached
/// only if the background thread falls far behind or is gone.
pub(crate) const BACKSTOP_AUTOCHECKPOINT_PAGES: i64 = 65_536;

/// The running thread; stops (after one last checkpoint) when dropped.
pub(crate) struct Checkpointer {
    stop: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Checkpointer {
    /// Opens a second connection to the database at `path` and starts the
    /// thread.
    pub(crate) fn start(path: &Path) -> Result<Checkpointer, StoreError> {
        let conn = Connection::open(path).map_err(|source| StoreError::Database {
            context: "opening the checkpoint connection",
            source,
        })?;
        let (stop, stopped) = mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("nimbus-resolver-ckpt".to_owned())
            .spawn(move || run(&conn, &stopped))
            .map_err(|e| StoreError::Panicked(format!("starting the checkpoint thread: {e}")))?;
        Ok(Checkpointer {
            stop: Some(stop),
            thread: Some(thread),
        })
    }
}

fn run(conn: &Connection, stopped: &mpsc::Receiver<()>) {
    loop {
        let stopping = !matches!(
            stopped.recv_timeout(CHECKPOINT_EVERY),
            Err(mpsc::RecvTimeoutError::Timeout)
        );
        // PASSIVE copies what no reader still needs and never waits for a
        // lock; what it leaves is taken by the next round.
        if let Err(error) = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(())) {
            tracing::warn!(%error, "resolver store: background checkpoint failed; retrying");
        }
        if stopping {
            return;
        }
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take()
            && thread.join().is_err()
        {
            tracing::warn!("resolver store: the checkpoint thread panicked");
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;

    fn main_file_len(path: &Path) -> u64 {
        std::fs::metadata(path).unwrap().len()
    }

    /// With the writer's automatic checkpoint off, committed pages live only
    /// in the WAL; the checkpointer is what moves them into the database
    /// file (its last round runs when it is dropped).
    #[test]
    fn committed_pages_reach_the_database_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("store.db");
        let writer = Connection::open(&path).unwrap();
        writer.pragma_update(None, "journal_mode", "WAL").unwrap();
        writer.pragma_update(None, "wal_autocheckpoint", 0).unwrap();
        writer
            .execute_batch("CREATE TABLE t (v BLOB NOT NULL)")
            .unwrap();
        let before = main_file_len(&path);
        for _ in 0..500 {
            writer
                .execute("INSERT INTO t (v) VALUES (zeroblob(2048))", [])
                .unwrap();
        }
        assert_eq!(
            main_file_len(&path),
            before,
            "nothing is checkpointed without the checkpointer"
        );

        drop(Checkpointer::start(&path).unwrap());

        assert!(
            main_file_len(&path) > 500 * 2048,
            "the rows are in the database file: {} bytes",
            main_file_len(&path)
        );
        let rows: i64 = writer
            .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
            .unwrap();
        assert_eq!(rows, 500);
    }
}
