//! Folds a SQLite database's WAL back into the database file on a thread of
//! its own, so the writer's commits never wait for a checkpoint.
//!
//! SQLite checkpoints inline by default: the commit that crosses
//! `wal_autocheckpoint` pages copies them back and fsyncs the database file
//! before it returns, and every commit queued behind it waits. For the
//! Resolver store that was a 100+ ms stall in `nimbus bench`'s open loop (at
//! a 16k-page interval); for the broker, whose default 1,000-page interval
//! comes round every few hundred events, it doubled the open loop's p99 at
//! `os` durability (decision 0104). So the writer's own automatic checkpoint
//! is pushed out to [`BACKSTOP_AUTOCHECKPOINT_PAGES`], as a backstop only,
//! and this thread runs a `PASSIVE` checkpoint (never blocks the writer or a
//! reader) on a second connection every [`CHECKPOINT_EVERY`].
//!
//! Used by the broker's log (`nimbus-broker`) and the Resolver's store
//! (`nimbus-resolver`).

use std::path::Path;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

use rusqlite::Connection;

/// How often the background thread checkpoints.
pub const CHECKPOINT_EVERY: Duration = Duration::from_millis(250);

/// The writer's own automatic checkpoint, in WAL pages (~256 MiB at 4 KiB
/// pages): reached only if the background thread falls far behind or is
/// gone. Set it on the writer's connection with
/// `PRAGMA wal_autocheckpoint`.
pub const BACKSTOP_AUTOCHECKPOINT_PAGES: i64 = 65_536;

/// Starting the checkpoint thread failed.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The second connection could not be opened.
    #[error("opening the checkpoint connection: {0}")]
    Open(#[from] rusqlite::Error),
    /// The thread could not be spawned.
    #[error("starting the checkpoint thread: {0}")]
    Thread(#[from] std::io::Error),
}

/// The running thread; stops (after one last checkpoint) when dropped.
#[derive(Debug)]
pub struct Checkpointer {
    stop: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
    what: &'static str,
}

impl Checkpointer {
    /// Opens a second connection to the WAL-mode database at `path` and
    /// starts the thread, named `thread_name`; `what` names the database in
    /// log lines ("broker log", "resolver store").
    pub fn start(
        path: &Path,
        thread_name: &str,
        what: &'static str,
    ) -> Result<Checkpointer, StartError> {
        let conn = Connection::open(path)?;
        let (stop, stopped) = mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name(thread_name.to_owned())
            .spawn(move || run(&conn, &stopped, what))?;
        Ok(Checkpointer {
            stop: Some(stop),
            thread: Some(thread),
            what,
        })
    }
}

fn run(conn: &Connection, stopped: &mpsc::Receiver<()>, what: &str) {
    loop {
        let stopping = !matches!(
            stopped.recv_timeout(CHECKPOINT_EVERY),
            Err(mpsc::RecvTimeoutError::Timeout)
        );
        // PASSIVE copies what no reader still needs and never waits for a
        // lock; what it leaves is taken by the next round.
        if let Err(error) = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(())) {
            tracing::warn!(%error, "{what}: background checkpoint failed; retrying");
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
            tracing::warn!("{}: the checkpoint thread panicked", self.what);
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

        drop(Checkpointer::start(&path, "test-ckpt", "test store").unwrap());

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
