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
//! reader) on a second connection every [`interval`]: 250 ms when the
//! commits are fsynced, 50 ms when they are not.
//!
//! Used by the broker's log (`nimbus-broker`) and the Resolver's store
//! (`nimbus-resolver`).

use std::path::Path;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

use rusqlite::Connection;

/// How often the background thread checkpoints a database whose commits
/// are fsynced (`synchronous = FULL`): each checkpoint also syncs the
/// database file, and more of them meet the commits' own syncs more often
/// (at 50 ms the open loop's p99 rose, decision 0104).
pub const CHECKPOINT_EVERY_SYNCED: Duration = Duration::from_millis(250);

/// How often it checkpoints a database whose commits are only written to
/// the OS (`synchronous = NORMAL`): the checkpoint is the only sync, and
/// smaller ones stall the writer less (at 50 ms rather than 250 the open
/// loop's p99 at `os` fell from ~90 to ~38 ms, decision 0104).
pub const CHECKPOINT_EVERY_UNSYNCED: Duration = Duration::from_millis(50);

/// The checkpoint interval for a database whose commits are fsynced
/// (`commits_synced`) or not.
pub fn interval(commits_synced: bool) -> Duration {
    if commits_synced {
        CHECKPOINT_EVERY_SYNCED
    } else {
        CHECKPOINT_EVERY_UNSYNCED
    }
}

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
    /// starts the thread, named `thread_name`, checkpointing `every` (see
    /// [`interval`]); `what` names the database in log lines ("broker log",
    /// "resolver store").
    pub fn start(
        path: &Path,
        thread_name: &str,
        what: &'static str,
        every: Duration,
    ) -> Result<Checkpointer, StartError> {
        let conn = Connection::open(path)?;
        let (stop, stopped) = mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name(thread_name.to_owned())
            .spawn(move || run(&conn, &stopped, what, every))?;
        Ok(Checkpointer {
            stop: Some(stop),
            thread: Some(thread),
            what,
        })
    }
}

fn run(conn: &Connection, stopped: &mpsc::Receiver<()>, what: &str, every: Duration) {
    loop {
        let stopping = !matches!(
            stopped.recv_timeout(every),
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

        drop(Checkpointer::start(&path, "test-ckpt", "test store", interval(true)).unwrap());

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

    /// A writer with its automatic checkpoint off and 200 rows committed to
    /// the WAL only.
    fn wal_only_rows(path: &Path) -> Connection {
        let writer = Connection::open(path).unwrap();
        writer.pragma_update(None, "journal_mode", "WAL").unwrap();
        writer.pragma_update(None, "wal_autocheckpoint", 0).unwrap();
        writer
            .execute_batch("CREATE TABLE t (v BLOB NOT NULL)")
            .unwrap();
        for _ in 0..200 {
            writer
                .execute("INSERT INTO t (v) VALUES (zeroblob(2048))", [])
                .unwrap();
        }
        writer
    }

    /// The thread checkpoints at the interval it is given, not at a fixed
    /// one: with an hour nothing moves while it runs; with 10 ms the rows
    /// reach the database file while it runs.
    #[test]
    fn it_checkpoints_at_the_interval_it_is_given() {
        let dir = tempfile::tempdir().unwrap();
        let slow_path = dir.path().join("slow.db");
        let _slow_writer = wal_only_rows(&slow_path);
        let before = main_file_len(&slow_path);
        let slow = Checkpointer::start(
            &slow_path,
            "test-slow",
            "slow store",
            Duration::from_secs(3600),
        )
        .unwrap();
        let fast_path = dir.path().join("fast.db");
        let _fast_writer = wal_only_rows(&fast_path);
        let fast = Checkpointer::start(
            &fast_path,
            "test-fast",
            "fast store",
            Duration::from_millis(10),
        )
        .unwrap();
        let started = std::time::Instant::now();
        while main_file_len(&fast_path) <= 200 * 2048 {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "a 10 ms checkpointer never folded the WAL"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        // Well past the 250 ms the synced interval would have waited.
        std::thread::sleep(Duration::from_millis(600).saturating_sub(started.elapsed()));
        assert_eq!(
            main_file_len(&slow_path),
            before,
            "an hour's interval checkpointed early"
        );
        drop(fast);
        drop(slow);
        assert!(
            main_file_len(&slow_path) > 200 * 2048,
            "its last round on drop"
        );
        assert!(interval(false) < interval(true));
    }
}
