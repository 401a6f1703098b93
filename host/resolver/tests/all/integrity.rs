//! A damaged store file is refused at open, naming the file, rather than
//! opened to answer some reads and fail others.

#![allow(clippy::unwrap_used, reason = "tests")]

use std::io::{Seek as _, SeekFrom, Write as _};
use std::path::Path;

use nimbus_resolver::{MessageKind, Observation, ResolverStore, SqliteResolverStore, StoreError};

/// A store on `path` holding enough events to span many pages, closed.
fn a_store_of_many_pages(path: &Path) {
    let store = SqliteResolverStore::open(path).unwrap();
    let observations: Vec<Observation> = (0..3_000)
        .map(|i| {
            let mut o =
                Observation::new("billing", &format!("e{i:05}"), MessageKind::EventRequest, i);
            o.message_id = Some(format!("m{i:05}"));
            o.session_id = Some(format!("s{}", i % 7));
            o
        })
        .collect();
    for batch in observations.chunks(100) {
        store.record_batch(batch).unwrap();
    }
    // Dropped, its last checkpoint moves everything into the main file.
}

/// Bytes no page holds: a fixed pseudo-random run, so a failure repeats.
fn noise(len: usize) -> Vec<u8> {
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state.to_le_bytes()[0]
        })
        .collect()
}

#[test]
fn a_store_with_overwritten_pages_is_refused_at_open_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("resolver.db");
    a_store_of_many_pages(&path);
    let len = std::fs::metadata(&path).unwrap().len();
    assert!(len > 64 * 4096, "the store spans many pages: {len} bytes");

    // Three pages in the middle overwritten, as a disk fault would leave them.
    let mut file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    file.seek(SeekFrom::Start((len / 2) / 4096 * 4096)).unwrap();
    file.write_all(&noise(3 * 4096)).unwrap();
    file.sync_all().unwrap();
    drop(file);

    let error = match SqliteResolverStore::open(&path) {
        Ok(_) => panic!("a damaged store opened"),
        Err(error) => error,
    };
    assert!(matches!(error, StoreError::Damaged { .. }), "{error:?}");
    let message = error.to_string();
    assert!(
        message.contains(&path.display().to_string()) && message.contains("damaged"),
        "{message}"
    );
}

#[test]
fn a_file_that_is_not_a_database_is_refused_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("resolver.db");
    std::fs::write(&path, noise(8 * 4096)).unwrap();
    let error = match SqliteResolverStore::open(&path) {
        Ok(_) => panic!("a file of noise opened as a store"),
        Err(error) => error,
    };
    assert!(matches!(error, StoreError::Damaged { .. }), "{error:?}");
    assert!(
        error.to_string().contains(&path.display().to_string()),
        "{error}"
    );
}

#[test]
fn a_sound_store_reopens_with_everything_in_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("resolver.db");
    a_store_of_many_pages(&path);
    let store = SqliteResolverStore::open(&path).unwrap();
    assert_eq!(store.event("e02999").unwrap().len(), 1);
}
