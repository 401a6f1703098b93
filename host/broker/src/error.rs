//! The store's errors: why a commit failed, and why opening the data
//! directory did.

use nimbus_transport::TransientError;

/// Why the store cannot commit.
#[derive(Debug, Clone, thiserror::Error)]
pub(crate) enum StoreError {
    /// For good: the broker is poisoned until reopened.
    #[error("storage failed: {0}; reopen the broker")]
    Failed(String),
    /// The log cannot be written now (a full disk, an I/O error): the
    /// writer retries the commit it holds, and changes are refused until
    /// it succeeds (decision 0130).
    #[error(
        "the broker cannot write its log ({0}); changes are refused until it can, and it retries by itself"
    )]
    Unwritable(String),
}

impl From<StoreError> for TransientError {
    fn from(value: StoreError) -> Self {
        TransientError::new(value.to_string())
    }
}

/// Opening the data directory failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenError {
    /// The data directory could not be created.
    #[error("cannot create data directory {path}: {source}")]
    DataDir {
        /// The directory.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A file of the broker's log could not be read, written or created.
    #[error("cannot use broker log {path}: {source}")]
    Log {
        /// The file or directory.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The data directory holds the SQLite database of a build before the
    /// broker log (decision 0115) and no log. This build does not read it,
    /// and refuses rather than start an empty broker beside it.
    #[error(
        "{path} is the broker database of an earlier nimbus build, which this build does not read; \
         refusing to start an empty broker beside it. Move the file aside (or delete it) to start \
         with an empty broker"
    )]
    EarlierDatabase {
        /// The database file.
        path: String,
    },
    /// A file holds data nimbus cannot read.
    #[error("broker data {path} is unreadable: {reason}")]
    Corrupt {
        /// The file.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// A frame of a segment whose commits were each synced is damaged, and
    /// a whole frame follows it: acknowledged commits come after the
    /// damage, so it is not the torn tail a crash leaves. Nothing is
    /// changed (decision 0130).
    #[error(
        "broker log {path} is damaged at byte {offset} (a bad checksum or length), and a whole frame follows at byte {next}: \
         acknowledged commits come after the damage, so this is corruption, not a torn tail; \
         nothing was changed. Restore the file, or check the log with `nimbus broker verify`"
    )]
    DamagedFrame {
        /// The segment.
        path: String,
        /// Where the damaged frame starts.
        offset: u64,
        /// Where the next whole frame starts.
        next: u64,
    },
    /// A segment's header says history came before it, and the log holds
    /// neither the segment before it nor a snapshot folding it: a deleted
    /// or lost file, which open refuses rather than start without it
    /// (decision 0130).
    #[error(
        "broker log {path} continues earlier history, but {missing} is missing: \
         refusing to open a broker without it; restore the file"
    )]
    Missing {
        /// The segment whose predecessor is missing.
        path: String,
        /// What is missing, by file name.
        missing: String,
    },
    /// The writer thread could not be started.
    #[error("cannot start the broker writer thread: {0}")]
    Thread(std::io::Error),
}
