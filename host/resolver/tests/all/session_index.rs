//! The session index, which the store keeps in arrears (decision 0119): a
//! listing by session must find every event of the session, indexed yet or
//! not, through moves between sessions and pruning.

#![allow(clippy::unwrap_used, reason = "tests")]

use std::collections::BTreeSet;
use std::path::Path;

use nimbus_resolver::{
    EventFilter, MessageKind, Observation, ResolverStore, SqliteResolverStore, Status,
};

/// More than the store lets wait beyond its mark, so a run of this many
/// events has been indexed, at least in part.
const BEYOND_THE_LAG: usize = 2_500;

fn request(event_id: &str, session: Option<&str>, at_ms: i64) -> Observation {
    let mut o = Observation::new("billing", event_id, MessageKind::EventRequest, at_ms);
    o.message_id = Some(format!("{event_id}-request"));
    o.session_id = session.map(str::to_owned);
    o
}

fn completed(event_id: &str, at_ms: i64) -> Observation {
    let mut o = Observation::new("billing", event_id, MessageKind::ResolutionResponse, at_ms);
    o.message_id = Some(format!("{event_id}-done"));
    o
}

/// Records `observations` in commits of 100, as the recorder batches them.
fn record_all(store: &SqliteResolverStore, observations: &[Observation]) {
    for batch in observations.chunks(100) {
        store.record_batch(batch).unwrap();
    }
}

fn listed(store: &SqliteResolverStore, session: &str) -> BTreeSet<String> {
    store
        .events(&EventFilter {
            session_id: Some(session.to_owned()),
            limit: Some(100_000),
            ..EventFilter::default()
        })
        .unwrap()
        .into_iter()
        .map(|r| r.event_id)
        .collect()
}

/// The mark, and the entries at or below it, read from the file.
fn index_state(path: &Path) -> (i64, i64) {
    let conn = rusqlite::Connection::open(path).unwrap();
    let mark: i64 = conn
        .query_row("SELECT indexed_through FROM session_index_mark", [], |r| {
            r.get(0)
        })
        .unwrap();
    let entries: i64 = conn
        .query_row(
            "SELECT COUNT(*) FROM session_events WHERE event_ref <= ?1",
            [mark],
            |r| r.get(0),
        )
        .unwrap();
    (mark, entries)
}

fn entry_count(path: &Path) -> i64 {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.query_row("SELECT COUNT(*) FROM session_events", [], |r| r.get(0))
        .unwrap()
}

/// The sessions `event_id` has an entry under, read from the file.
fn entries_of(path: &Path, event_id: &str) -> Vec<String> {
    let conn = rusqlite::Connection::open(path).unwrap();
    let mut stmt = conn
        .prepare(
            "SELECT s.session_id FROM session_events AS s JOIN events AS e ON e.id = s.event_ref
             WHERE e.event_id = ?1 ORDER BY s.session_id",
        )
        .unwrap();
    stmt.query_map([event_id], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

/// A store on a file where `event_id` of `session` came first and more than
/// the lag came after it, so it is indexed.
fn with_an_indexed_event(
    event_id: &str,
    session: &str,
) -> (tempfile::TempDir, SqliteResolverStore) {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteResolverStore::open(&dir.path().join("resolver.db")).unwrap();
    let mut observations = vec![request(event_id, Some(session), 1)];
    observations.extend((0..BEYOND_THE_LAG).map(|i| request(&format!("x{i}"), Some("other"), 1)));
    record_all(&store, &observations);
    (dir, store)
}

#[test]
fn a_session_lists_every_event_whether_indexed_yet_or_not() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("resolver.db");
    let store = SqliteResolverStore::open(&path).unwrap();
    let sessions = ["s0", "s1", "s2", "s3"];
    // Every fifth event has no session.
    let session_of = |i: usize| (i % 5 < 4).then(|| sessions[i % 5]);
    let requests: Vec<Observation> = (0..BEYOND_THE_LAG)
        .map(|i| request(&format!("e{i:05}"), session_of(i), 1))
        .collect();
    record_all(&store, &requests);

    let (mark, entries) = index_state(&path);
    assert!(
        mark >= 2_048 && mark < i64::try_from(BEYOND_THE_LAG).unwrap(),
        "some events indexed, the last ones not yet: mark {mark}"
    );
    let sessioned_through_mark = (0..usize::try_from(mark).unwrap())
        .filter(|&i| session_of(i).is_some())
        .count();
    assert_eq!(entries, i64::try_from(sessioned_through_mark).unwrap());

    for session in sessions {
        let expected: BTreeSet<String> = (0..BEYOND_THE_LAG)
            .filter(|&i| session_of(i) == Some(session))
            .map(|i| format!("e{i:05}"))
            .collect();
        assert_eq!(listed(&store, session), expected, "{session}");
    }
    // A status change does not touch the session, nor lose the event.
    store.record(&completed("e00000", 2)).unwrap();
    assert!(listed(&store, "s0").contains("e00000"));
    // With other filters too.
    let completed_in_s0 = store
        .events(&EventFilter {
            session_id: Some("s0".to_owned()),
            status: Some(Status::Completed),
            ..EventFilter::default()
        })
        .unwrap();
    assert_eq!(completed_in_s0.len(), 1);
    drop(store);

    // Reopened, nothing is indexed again and nothing is lost.
    let store = SqliteResolverStore::open(&path).unwrap();
    assert_eq!(index_state(&path), (mark, entries));
    assert_eq!(listed(&store, "s3").len(), BEYOND_THE_LAG / 5);
}

#[test]
fn an_event_that_changes_session_moves_its_entry() {
    let (dir, store) = with_an_indexed_event("moved", "s-a");
    let path = dir.path().join("resolver.db");
    assert_eq!(entries_of(&path, "moved"), ["s-a"], "indexed by now");

    let mut resubmitted = request("moved", Some("s-b"), 2);
    resubmitted.kind = MessageKind::ResubmissionRequest;
    resubmitted.message_id = Some("moved-resubmitted".to_owned());
    store.record(&resubmitted).unwrap();
    assert_eq!(entries_of(&path, "moved"), ["s-b"]);
    assert_eq!(listed(&store, "s-b"), BTreeSet::from(["moved".to_owned()]));
    assert!(listed(&store, "s-a").is_empty());

    // One beyond the mark moves too, and is indexed once.
    store.record(&request("late", Some("s-a"), 3)).unwrap();
    let mut late_moved = request("late", Some("s-c"), 4);
    late_moved.kind = MessageKind::ResubmissionRequest;
    late_moved.message_id = Some("late-resubmitted".to_owned());
    store.record(&late_moved).unwrap();
    assert_eq!(listed(&store, "s-c"), BTreeSet::from(["late".to_owned()]));
    let more: Vec<Observation> = (0..BEYOND_THE_LAG)
        .map(|i| request(&format!("y{i}"), Some("other"), 5))
        .collect();
    record_all(&store, &more);
    assert_eq!(entries_of(&path, "late"), ["s-c"]);
    assert!(listed(&store, "s-a").is_empty());
}

/// SQLite numbers a new row after the largest left: once pruning took the
/// newest events, new ones are numbered at or below the old mark, and must
/// still be found.
#[test]
fn pruning_takes_the_entries_and_new_events_are_still_found() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("resolver.db");
    let store = SqliteResolverStore::open(&path).unwrap();
    let mut observations = Vec::new();
    for i in 0..BEYOND_THE_LAG {
        let event_id = format!("old{i}");
        observations.push(request(&event_id, Some("s"), 1_000));
        observations.push(completed(&event_id, 1_000));
    }
    record_all(&store, &observations);
    assert!(index_state(&path).0 > 0);

    while store
        .prune_expendable(2_000, 1_000, &BTreeSet::new())
        .unwrap()
        > 0
    {}
    assert!(listed(&store, "s").is_empty());
    assert_eq!(entry_count(&path), 0, "the entries went with the events");
    assert_eq!(
        index_state(&path).0,
        0,
        "the mark is not above the last event"
    );

    store.record(&request("new", Some("s"), 3_000)).unwrap();
    assert_eq!(listed(&store, "s"), BTreeSet::from(["new".to_owned()]));
}

/// An earlier build opened after this one keeps no session index: it moves
/// events between sessions and prunes the newest ones (so its new events
/// are numbered at or below the mark) without a word to it. Its
/// `events_by_session` shows it ran, and the index is made again.
#[test]
fn a_store_an_earlier_build_wrote_to_since_is_indexed_again() {
    let (dir, store) = with_an_indexed_event("moved", "s-a");
    let path = dir.path().join("resolver.db");
    let (mark, _) = index_state(&path);
    assert!(mark > 0);
    drop(store);

    // What an earlier build's writes come to, in SQL.
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute_batch(&format!(
        "CREATE INDEX events_by_session ON events (session_id);
         UPDATE events SET session_id = 's-b' WHERE event_id = 'moved';
         DELETE FROM events WHERE id > {mark} - 10;
         INSERT INTO events (endpoint, event_id, session_id, status, status_source, retry_count, first_seen_ms, updated_ms)
             VALUES ('billing', 'by-an-earlier-build', 's-c', 'Pending', 'EventRequest', 0, 2, 2);"
    ))
    .unwrap();
    let reused: i64 = conn
        .query_row(
            "SELECT id FROM events WHERE event_id = 'by-an-earlier-build'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert!(reused <= mark, "numbered below the mark: {reused}");
    drop(conn);

    let store = SqliteResolverStore::open(&path).unwrap();
    assert_eq!(listed(&store, "s-b"), BTreeSet::from(["moved".to_owned()]));
    assert_eq!(
        listed(&store, "s-c"),
        BTreeSet::from(["by-an-earlier-build".to_owned()])
    );
    assert!(listed(&store, "s-a").is_empty());
    assert_eq!(entries_of(&path, "moved"), ["s-b"]);
    drop(store);
    // Its index is gone again, so the next open trusts this one.
    let conn = rusqlite::Connection::open(&path).unwrap();
    let old_index: i64 = conn
        .query_row(
            "SELECT COUNT(*) FROM sqlite_schema WHERE name = 'events_by_session'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(old_index, 0);
}
