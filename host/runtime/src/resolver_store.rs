//! Opening the Resolver store at start, checked against the broker as the
//! broker checks its own log (decision 0140).
//!
//! SQLite creates a database that is not there, so a store deleted,
//! truncated or moved aside would start empty without a word: `nimbus
//! events` empty, the audit trail of every earlier event gone, and the
//! operator left to find out from a blocked session whose blocker nothing
//! knows. So where the broker holds the history of earlier runs, a missing
//! or empty store stops the start, naming the file and the two ways on:
//! restore it, or start a new one deliberately with `--new-resolver-store`
//! ([`ResolverStoreStart::New`]). That flag never removes anything, and it
//! is refused where a store is there, so it cannot stay on by mistake.

use std::path::Path;

use anyhow::Context as _;
use nimbus_resolver::{SqliteResolverStore, StoreDurability, StoreFile};
use tracing::warn;

/// The `nimbus run` flag that starts a new Resolver store.
pub const NEW_RESOLVER_STORE_FLAG: &str = "--new-resolver-store";

/// How the host treats a Resolver store that is not there at start.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ResolverStoreStart {
    /// A missing or empty store is refused where the broker holds history
    /// (a fresh data directory gets a new one).
    #[default]
    Existing,
    /// The operator moved a lost or damaged store aside and starts a new,
    /// empty one ([`NEW_RESOLVER_STORE_FLAG`]); refused where a store is
    /// there.
    New,
}

/// Opens the store at `path`: refused when it is missing or empty while
/// `broker_history` (the broker's log held history before this start) and
/// a new store was not asked for, or when a new one was asked for where a
/// store is.
pub(crate) fn open(
    path: &Path,
    durability: StoreDurability,
    start: ResolverStoreStart,
    broker_history: Option<&Path>,
) -> anyhow::Result<SqliteResolverStore> {
    let file = StoreFile::inspect(path);
    match (start, &file) {
        (ResolverStoreStart::Existing, StoreFile::Missing { .. } | StoreFile::Empty { .. }) => {
            if let Some(broker) = broker_history {
                anyhow::bail!("{}", lost_store(path, &file, broker));
            }
        }
        (ResolverStoreStart::Existing, StoreFile::Held) => {}
        (ResolverStoreStart::New, StoreFile::Held) => anyhow::bail!(
            "{NEW_RESOLVER_STORE_FLAG} starts a new, empty Resolver store, but {} holds one: start \
             without the flag to keep it (move it aside first, with its -wal and -shm files, if a \
             new store is really meant)",
            path.display()
        ),
        (
            ResolverStoreStart::New,
            StoreFile::Missing { leftover_wal } | StoreFile::Empty { leftover_wal },
        ) => {
            if let Some(wal) = leftover_wal {
                // SQLite would replay the old store's last commits into the
                // new one: pages of another database.
                anyhow::bail!(
                    "{} is left from the Resolver store that was at {}: move it aside with that \
                     store (with its -shm file), then start with {NEW_RESOLVER_STORE_FLAG} again",
                    wal.display(),
                    path.display()
                );
            }
            warn!(
                store = %path.display(),
                "starting a new, empty Resolver store ({NEW_RESOLVER_STORE_FLAG}): events \
                 recorded before are not in it; blocked sessions are still listed (`nimbus \
                 sessions --blocked`), and their blockers are rebuilt from the broker's session \
                 state when resubmitted, skipped or their handoff settled"
            );
        }
    }
    SqliteResolverStore::open_with(path, durability)
        .with_context(|| format!("opening the resolver store {}", path.display()))
}

/// Why a missing or empty store is refused, and the ways on.
fn lost_store(path: &Path, file: &StoreFile, broker: &Path) -> String {
    let what = match file {
        StoreFile::Missing { .. } => "is missing",
        _ => "is empty (it holds no Resolver store)",
    };
    format!(
        "the Resolver store {} {what}, but the broker in {} holds the history of earlier runs: \
         started without it, the status and history of every event recorded so far would be gone \
         without a word. Restore the file (with its -wal file) from a backup; or, if it is lost for \
         good, start anew deliberately with `nimbus run {NEW_RESOLVER_STORE_FLAG}`: blocked \
         sessions are still listed, and their blockers can be resubmitted, skipped or their \
         handoff settled from the broker's session state",
        path.display(),
        broker.display()
    )
}

/// Whether the embedded broker's directory held anything before this start:
/// its log, written by every run, is the history a Resolver store was kept
/// beside.
pub(crate) fn broker_holds_history(broker_dir: &Path) -> bool {
    std::fs::read_dir(broker_dir).is_ok_and(|mut entries| entries.next().is_some())
}
