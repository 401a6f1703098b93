//! What a Resolver store's path holds before the host opens it, so the host
//! can refuse to start on a lost store where the broker holds history
//! (decision 0140): opening creates whatever is missing, which would hide
//! the loss.

use std::path::{Path, PathBuf};

use rusqlite::{Connection, OpenFlags};

/// What is at a Resolver store's path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreFile {
    /// No file.
    Missing {
        /// A write-ahead log left beside it (`…-wal`, not empty): the
        /// store's last commits, which belong to the file that is gone.
        leftover_wal: Option<PathBuf>,
    },
    /// A file that holds no Resolver store: zero bytes (truncated), or a
    /// database with no `events` table.
    Empty {
        /// As for [`StoreFile::Missing`].
        leftover_wal: Option<PathBuf>,
    },
    /// A store, as far as a look tells: opening checks its pages.
    Held,
}

impl StoreFile {
    /// Looks at `path` without creating or changing anything there. A
    /// file that cannot be read as a database is [`StoreFile::Held`]:
    /// opening it then reports it as damaged, naming the file.
    pub fn inspect(path: &Path) -> StoreFile {
        let leftover_wal = || {
            let mut wal = path.as_os_str().to_owned();
            wal.push("-wal");
            let wal = PathBuf::from(wal);
            std::fs::metadata(&wal)
                .is_ok_and(|m| m.len() > 0)
                .then_some(wal)
        };
        let metadata = match std::fs::metadata(path) {
            Ok(metadata) => metadata,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return StoreFile::Missing {
                    leftover_wal: leftover_wal(),
                };
            }
            // Unreadable: opening says why.
            Err(_) => return StoreFile::Held,
        };
        if metadata.len() == 0 || !has_events_table(path) {
            return StoreFile::Empty {
                leftover_wal: leftover_wal(),
            };
        }
        StoreFile::Held
    }
}

/// Whether the database at `path` has the Resolver's `events` table; `true`
/// when it cannot tell (opening reports a file that is not a database).
fn has_events_table(path: &Path) -> bool {
    // Read-write without create: a read-only connection cannot open a
    // store in WAL mode whose shared-memory file is gone.
    let Ok(conn) = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    ) else {
        return true;
    };
    conn.query_row(
        "SELECT EXISTS (SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = 'events')",
        [],
        |r| r.get::<_, bool>(0),
    )
    .unwrap_or(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_truncated_schemaless_or_real_store_is_told_apart() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("resolver.db");
        assert_eq!(
            StoreFile::inspect(&path),
            StoreFile::Missing { leftover_wal: None }
        );
        std::fs::write(&path, b"").unwrap();
        assert_eq!(
            StoreFile::inspect(&path),
            StoreFile::Empty { leftover_wal: None }
        );
        let wal = dir.path().join("resolver.db-wal");
        std::fs::write(&wal, b"frames").unwrap();
        assert_eq!(
            StoreFile::inspect(&path),
            StoreFile::Empty {
                leftover_wal: Some(wal.clone())
            }
        );
        std::fs::remove_file(&path).unwrap();
        assert_eq!(
            StoreFile::inspect(&path),
            StoreFile::Missing {
                leftover_wal: Some(wal.clone())
            }
        );
        std::fs::remove_file(&wal).unwrap();
        Connection::open(&path)
            .unwrap()
            .execute_batch("CREATE TABLE other (x)")
            .unwrap();
        assert_eq!(
            StoreFile::inspect(&path),
            StoreFile::Empty { leftover_wal: None }
        );
        std::fs::remove_file(&path).unwrap();
        drop(crate::SqliteResolverStore::open(&path).unwrap());
        assert_eq!(StoreFile::inspect(&path), StoreFile::Held);
        std::fs::write(&path, b"not a database, but something").unwrap();
        assert_eq!(StoreFile::inspect(&path), StoreFile::Held, "open says");
    }
}
