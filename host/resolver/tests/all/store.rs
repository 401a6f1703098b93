//! The Resolver store on a real SQLite file.

#![allow(clippy::unwrap_used, reason = "tests")]

use std::collections::BTreeSet;

use nimbus_resolver::{
    EventFilter, EventStatus, HandoffDetails, Heartbeat, MessageKind, Observation, Recorded,
    ResolverStore, SqliteResolverStore, Status, StoreRows,
};

fn obs(kind: MessageKind, message_id: &str, at_ms: i64) -> Observation {
    let mut o = Observation::new("billing", "e1", kind, at_ms);
    o.message_id = Some(message_id.to_owned());
    o.session_id = Some("order-1".to_owned());
    o.event_type = Some("OrderPlaced".to_owned());
    o
}

fn open() -> (tempfile::TempDir, SqliteResolverStore) {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteResolverStore::open(&dir.path().join("resolver.db")).unwrap();
    (dir, store)
}

fn status_of(store: &SqliteResolverStore) -> Status {
    store.event("e1").unwrap()[0].record.status
}

#[test]
fn request_then_resolution_records_completed_with_two_history_entries() {
    let (_dir, store) = open();
    assert_eq!(
        store
            .record(&obs(MessageKind::EventRequest, "m1", 1))
            .unwrap(),
        Recorded::Applied {
            status: Status::Pending
        }
    );
    let mut resolution = obs(MessageKind::ResolutionResponse, "r1", 2);
    resolution.handler_version = Some("sha256:abc".to_owned());
    resolution.queue_time_ms = Some(12);
    resolution.processing_time_ms = Some(3);
    store.record(&resolution).unwrap();
    let detail = &store.event("e1").unwrap()[0];
    assert_eq!(detail.record.status, Status::Completed);
    assert_eq!(detail.record.handler_version.as_deref(), Some("sha256:abc"));
    assert_eq!(
        (
            detail.record.queue_time_ms,
            detail.record.processing_time_ms
        ),
        (Some(12), Some(3))
    );
    let kinds: Vec<_> = detail
        .history
        .iter()
        .map(|h| h.message_type.as_str())
        .collect();
    assert_eq!(kinds, ["EventRequest", "ResolutionResponse"]);
}

/// A soak reads the rows written without a scan: the highest row number
/// of each table, none on an empty store.
#[test]
fn rows_written_count_events_and_history() {
    let (_dir, store) = open();
    assert_eq!(store.rows_written().unwrap(), Some(StoreRows::default()));
    store
        .record(&obs(MessageKind::EventRequest, "m1", 1))
        .unwrap();
    store
        .record(&obs(MessageKind::ResolutionResponse, "r1", 2))
        .unwrap();
    let mut other = obs(MessageKind::EventRequest, "m2", 3);
    other.event_id = "e2".to_owned();
    store.record(&other).unwrap();
    assert_eq!(
        store.rows_written().unwrap(),
        Some(StoreRows {
            events: 2,
            history: 3
        })
    );
}

#[test]
fn failure_keeps_error_then_retry_reopens_and_resolution_completes() {
    let (_dir, store) = open();
    store
        .record(&obs(MessageKind::EventRequest, "m1", 1))
        .unwrap();
    let mut error = obs(MessageKind::ErrorResponse, "r1", 2);
    error.error_type = Some("PartnerUnavailable".into());
    error.error_text = Some("credit check said 503".into());
    store.record(&error).unwrap();
    let record = &store.event("e1").unwrap()[0].record;
    assert_eq!(record.status, Status::Failed);
    assert_eq!(record.error_type.as_deref(), Some("PartnerUnavailable"));
    let mut retry = obs(MessageKind::RetryRequest, "m2", 3);
    retry.retry_count = 1;
    store.record(&retry).unwrap();
    assert_eq!(status_of(&store), Status::Pending);
    store
        .record(&obs(MessageKind::ResolutionResponse, "r2", 4))
        .unwrap();
    let record = &store.event("e1").unwrap()[0].record;
    assert_eq!((record.status, record.retry_count), (Status::Completed, 0));
    assert_eq!(
        record.error_type, None,
        "the row describes the current status"
    );
}

#[test]
fn late_request_copy_is_refused_counted_and_noted_in_history() {
    let (_dir, store) = open();
    store
        .record(&obs(MessageKind::ResolutionResponse, "r1", 2))
        .unwrap();
    let outcome = store
        .record(&obs(MessageKind::EventRequest, "m1", 1))
        .unwrap();
    assert!(
        matches!(
            outcome,
            Recorded::Refused {
                current: Status::Completed,
                ..
            }
        ),
        "{outcome:?}"
    );
    assert_eq!(status_of(&store), Status::Completed);
    assert_eq!(store.refused_writes(), 1);
    let history = &store.event("e1").unwrap()[0].history;
    assert_eq!(history.len(), 2, "history is always written");
    assert!(
        history[1]
            .refused
            .as_deref()
            .unwrap()
            .contains("EventRequest")
    );
}

#[test]
fn redelivered_message_is_recorded_once() {
    let (_dir, store) = open();
    store
        .record(&obs(MessageKind::EventRequest, "m1", 1))
        .unwrap();
    assert_eq!(
        store
            .record(&obs(MessageKind::EventRequest, "m1", 1))
            .unwrap(),
        Recorded::AlreadyRecorded
    );
    assert_eq!(store.event("e1").unwrap()[0].history.len(), 1);
}

#[test]
fn dead_letter_notification_records_dead_lettered_with_reason() {
    let (_dir, store) = open();
    store
        .record(&obs(MessageKind::EventRequest, "m1", 1))
        .unwrap();
    let mut dl = obs(MessageKind::ErrorResponse, "r1", 2);
    dl.dead_letter_reason = Some("Permanent failure: Validation: Total must be positive".into());
    dl.dead_letter_description = Some("Validation: Total must be positive".into());
    dl.error_type = Some("Validation".into());
    store.record(&dl).unwrap();
    let record = &store.event("e1").unwrap()[0].record;
    assert_eq!(record.status, Status::DeadLettered);
    assert_eq!(
        record.dead_letter_reason.as_deref(),
        Some("Permanent failure: Validation: Total must be positive")
    );
}

#[test]
fn handoff_is_pending_with_sub_status_until_completed() {
    let (_dir, store) = open();
    store
        .record(&obs(MessageKind::EventRequest, "m1", 1))
        .unwrap();
    let mut park = obs(MessageKind::PendingHandoffResponse, "r1", 2);
    park.handoff = Some(HandoffDetails {
        reason: Some("DMF import in flight".into()),
        external_job_id: Some("dmf-42".into()),
        expected_by: Some("2026-11-30T10:15:00.0000000Z".into()),
        details: None,
    });
    store.record(&park).unwrap();
    let record = &store.event("e1").unwrap()[0].record;
    assert_eq!(
        (record.status, record.sub_status.as_deref()),
        (Status::Pending, Some("Handoff"))
    );
    assert_eq!(record.external_job_id.as_deref(), Some("dmf-42"));
    store
        .record(&obs(MessageKind::HandoffCompletedRequest, "m2", 3))
        .unwrap();
    let record = &store.event("e1").unwrap()[0].record;
    assert_eq!(
        (record.status, record.sub_status.as_deref()),
        (Status::Pending, None)
    );
    store
        .record(&obs(MessageKind::ResolutionResponse, "r2", 4))
        .unwrap();
    assert_eq!(status_of(&store), Status::Completed);
    // A handoff park arriving late cannot reopen the completed event.
    assert!(matches!(
        store
            .record(&obs(MessageKind::PendingHandoffResponse, "r3", 5))
            .unwrap(),
        Recorded::Refused { .. }
    ));
}

/// The published message's user properties are kept on the event (a
/// resubmission sends them again), and a store of the build before them
/// gains the column on open, its rows kept.
#[test]
fn user_properties_are_kept_and_an_older_store_gains_the_column() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("resolver.db");
    {
        let store = SqliteResolverStore::open(&path).unwrap();
        store
            .record(&obs(MessageKind::EventRequest, "m0", 1))
            .unwrap();
    }
    // The layout of the build before: no `properties` column.
    let raw = rusqlite::Connection::open(&path).unwrap();
    raw.execute_batch("ALTER TABLE events DROP COLUMN properties")
        .unwrap();
    drop(raw);

    let store = SqliteResolverStore::open(&path).unwrap();
    assert_eq!(store.event("e1").unwrap()[0].record.properties, None);
    let mut request = Observation::new("billing", "e2", MessageKind::EventRequest, 2);
    request.message_id = Some("m1".into());
    request.properties = Some(r#"{"Tenant":"acme"}"#.into());
    store.record(&request).unwrap();
    let mut response = Observation::new("billing", "e2", MessageKind::ResolutionResponse, 3);
    response.message_id = Some("r1".into());
    store.record(&response).unwrap();
    let record = &store.event("e2").unwrap()[0].record;
    assert_eq!(record.status, Status::Completed);
    assert_eq!(record.properties.as_deref(), Some(r#"{"Tenant":"acme"}"#));
}

/// The sessions listing reads every blocker's status at once: each event
/// asked about at the endpoint asked about, with a handoff's sub-status,
/// across more ids than one statement binds, and nothing for an event the
/// store does not have at that endpoint.
#[test]
fn statuses_are_read_for_many_events_at_once() {
    let (_dir, store) = open();
    let at = |endpoint: &str, event_id: &str, kind: MessageKind, message_id: &str| {
        let mut o = Observation::new(endpoint, event_id, kind, 1);
        o.message_id = Some(message_id.to_owned());
        o.session_id = Some(format!("s-{event_id}"));
        o
    };
    let mut batch = Vec::new();
    for i in 0..1200 {
        batch.push(at(
            "billing",
            &format!("e{i}"),
            MessageKind::EventRequest,
            &format!("m{i}"),
        ));
        if i % 2 == 0 {
            let mut failed = at(
                "billing",
                &format!("e{i}"),
                MessageKind::ErrorResponse,
                &format!("r{i}"),
            );
            failed.error_text = Some("boom".into());
            batch.push(failed);
        }
    }
    // An endpoint not asked about has some of the same ids.
    batch.push(at("audit", "e3", MessageKind::EventRequest, "a-m3"));
    // The same event id at a second endpoint, parked for a handoff there.
    batch.push(at("shipping", "e1", MessageKind::EventRequest, "s-m1"));
    let mut park = at(
        "shipping",
        "e1",
        MessageKind::PendingHandoffResponse,
        "s-r1",
    );
    park.handoff = Some(HandoffDetails {
        external_job_id: Some("job-1".into()),
        ..HandoffDetails::default()
    });
    batch.push(park);
    store.record_batch(&batch).unwrap();

    let mut asked: Vec<(String, String)> = (0..1200)
        .map(|i| ("billing".to_owned(), format!("e{i}")))
        .collect();
    asked.push(("shipping".to_owned(), "e1".to_owned()));
    asked.push(("shipping".to_owned(), "e2".to_owned()));
    asked.push(("billing".to_owned(), "unknown".to_owned()));
    let statuses = store.statuses(&asked).unwrap();

    assert_eq!(
        statuses.len(),
        1201,
        "every known (endpoint, event) and nothing else"
    );
    for i in 0..1200 {
        let expected = if i % 2 == 0 {
            Status::Failed
        } else {
            Status::Pending
        };
        assert_eq!(
            statuses[&("billing".to_owned(), format!("e{i}"))],
            EventStatus {
                status: expected,
                sub_status: None
            },
            "e{i}"
        );
    }
    assert_eq!(
        statuses[&("shipping".to_owned(), "e1".to_owned())],
        EventStatus {
            status: Status::Pending,
            sub_status: Some("Handoff".to_owned())
        }
    );
    assert!(store.statuses(&[]).unwrap().is_empty());
}

/// The event's handoff fields describe the handoff in flight only; each
/// message's history entry keeps what it said, so the job that ran (and
/// what it reported) stays readable once the handoff is settled.
#[test]
fn the_history_keeps_each_messages_handoff_after_it_settles() {
    let (_dir, store) = open();
    let park = |message_id: &str, job: &str, at_ms: i64| {
        let mut park = obs(MessageKind::PendingHandoffResponse, message_id, at_ms);
        park.handoff = Some(HandoffDetails {
            reason: Some("DMF import in flight".into()),
            external_job_id: Some(job.into()),
            expected_by: Some("2026-11-30T10:15:00.0000000Z".into()),
            details: None,
        });
        park
    };
    store
        .record(&obs(MessageKind::EventRequest, "m1", 1))
        .unwrap();
    store.record(&park("r1", "dmf-42", 2)).unwrap();
    let mut completed = obs(MessageKind::HandoffCompletedRequest, "m2", 3);
    completed.handoff = Some(HandoffDetails {
        details: Some(r#"{"RowsImported":1200}"#.into()),
        ..HandoffDetails::default()
    });
    store.record(&completed).unwrap();
    store
        .record(&obs(MessageKind::ResolutionResponse, "r2", 4))
        .unwrap();

    let detail = &store.event("e1").unwrap()[0];
    assert_eq!(detail.record.status, Status::Completed);
    assert_eq!(detail.record.external_job_id, None, "no handoff in flight");
    let handoffs: Vec<(&str, Option<&HandoffDetails>)> = detail
        .history
        .iter()
        .map(|h| (h.message_type.as_str(), h.handoff.as_ref()))
        .collect();
    let parked = park("r1", "dmf-42", 2).handoff;
    assert_eq!(
        handoffs,
        [
            ("EventRequest", None),
            ("PendingHandoffResponse", parked.as_ref()),
            ("HandoffCompletedRequest", completed.handoff.as_ref()),
            ("ResolutionResponse", None),
        ]
    );
    // The details are the job's, not the event's.
    assert_eq!(detail.record.payload, None);

    // A failed handoff: the job is in the park's entry, the failure in the
    // request's error fields.
    store
        .record(&obs(MessageKind::ResubmissionRequest, "m3", 5))
        .unwrap();
    store.record(&park("r3", "dmf-43", 6)).unwrap();
    let mut failed = obs(MessageKind::HandoffFailedRequest, "m4", 7);
    failed.error_type = Some("DmfRejected".into());
    failed.error_text = Some("3 rows rejected".into());
    store.record(&failed).unwrap();
    let mut error = obs(MessageKind::ErrorResponse, "r4", 8);
    error.error_type = Some("DmfRejected".into());
    error.error_text = Some("3 rows rejected".into());
    store.record(&error).unwrap();

    let detail = &store.event("e1").unwrap()[0];
    assert_eq!(detail.record.status, Status::Failed);
    assert_eq!(detail.record.external_job_id, None);
    let jobs: Vec<&str> = detail
        .history
        .iter()
        .filter_map(|h| h.handoff.as_ref()?.external_job_id.as_deref())
        .collect();
    assert_eq!(jobs, ["dmf-42", "dmf-43"]);
    let request = detail
        .history
        .iter()
        .find(|h| h.message_type == "HandoffFailedRequest")
        .unwrap();
    assert_eq!(
        (
            request.error_type.as_deref(),
            request.error_text.as_deref(),
            request.handoff.as_ref()
        ),
        (Some("DmfRejected"), Some("3 rows rejected"), None)
    );

    // What the history column holds: a small object of the facts given.
    drop(store);
    let conn = rusqlite::Connection::open(_dir.path().join("resolver.db")).unwrap();
    let stored: Vec<Option<String>> = conn
        .prepare("SELECT handoff FROM history WHERE message_id IN ('m1', 'm2') ORDER BY seq")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(
        stored,
        [
            None,
            Some(r#"{"details":"{\"RowsImported\":1200}"}"#.to_owned())
        ]
    );
}

#[test]
fn status_and_history_survive_reopening_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("resolver.db");
    {
        let store = SqliteResolverStore::open(&path).unwrap();
        store
            .record(&obs(MessageKind::EventRequest, "m1", 1))
            .unwrap();
        store
            .record(&obs(MessageKind::ErrorResponse, "r1", 2))
            .unwrap();
    }
    let store = SqliteResolverStore::open(&path).unwrap();
    let detail = &store.event("e1").unwrap()[0];
    assert_eq!(detail.record.status, Status::Failed);
    assert_eq!(detail.history.len(), 2);
}

/// A published message fans out to an event per consuming endpoint, each
/// with its own id; the message's id finds them all, and so does the id of
/// a later message of one of them.
#[test]
fn events_are_found_by_the_id_of_any_message_in_their_history() {
    let (_dir, store) = open();
    for (endpoint, event_id) in [("billing", "e-billing"), ("shipping", "e-shipping")] {
        let mut request = Observation::new(endpoint, event_id, MessageKind::EventRequest, 1);
        request.message_id = Some("published-1".into());
        store.record(&request).unwrap();
    }
    let mut resolution =
        Observation::new("billing", "e-billing", MessageKind::ResolutionResponse, 2);
    resolution.message_id = Some("resolution-1".into());
    store.record(&resolution).unwrap();
    let mut other = Observation::new("billing", "e-other", MessageKind::EventRequest, 3);
    other.message_id = Some("published-2".into());
    store.record(&other).unwrap();

    let fanned_out = store.events_of_message("published-1").unwrap();
    let found: Vec<(&str, &str)> = fanned_out
        .iter()
        .map(|d| (d.record.endpoint.as_str(), d.record.event_id.as_str()))
        .collect();
    assert_eq!(
        found,
        [("billing", "e-billing"), ("shipping", "e-shipping")]
    );
    assert_eq!(fanned_out[0].history.len(), 2, "with the whole history");
    assert_eq!(fanned_out[0].record.status, Status::Completed);

    let by_response = store.events_of_message("resolution-1").unwrap();
    assert_eq!(by_response.len(), 1);
    assert_eq!(by_response[0].record.event_id, "e-billing");
    assert!(
        store
            .events_of_message("no-such-message")
            .unwrap()
            .is_empty()
    );
    assert!(
        store.events_of_message("e-billing").unwrap().is_empty(),
        "an event id is not a message id"
    );
}

#[test]
fn events_filter_by_endpoint_status_and_session() {
    let (_dir, store) = open();
    for (endpoint, event_id, session, kind) in [
        ("billing", "a", "s1", MessageKind::ResolutionResponse),
        ("billing", "b", "s1", MessageKind::ErrorResponse),
        ("billing", "c", "s2", MessageKind::DeferralResponse),
        ("shipping", "a", "s1", MessageKind::ErrorResponse),
    ] {
        let mut o = Observation::new(endpoint, event_id, kind, 1);
        o.session_id = Some(session.into());
        store.record(&o).unwrap();
    }
    let failed = store
        .events(&EventFilter {
            status: Some(Status::Failed),
            ..EventFilter::default()
        })
        .unwrap();
    assert_eq!(failed.len(), 2);
    let billing_failed = store
        .events(&EventFilter {
            endpoint: Some("billing".into()),
            status: Some(Status::Failed),
            ..EventFilter::default()
        })
        .unwrap();
    assert_eq!(
        billing_failed
            .iter()
            .map(|r| r.event_id.as_str())
            .collect::<Vec<_>>(),
        ["b"]
    );
    let s2 = store
        .events(&EventFilter {
            session_id: Some("s2".into()),
            ..EventFilter::default()
        })
        .unwrap();
    assert_eq!(s2.len(), 1);
    assert_eq!(s2[0].status, Status::Deferred);
    assert_eq!(store.event("a").unwrap().len(), 2, "one row per endpoint");
}

#[test]
fn request_copy_sets_coordinates_and_a_response_only_fills_them_while_unknown() {
    let (_dir, store) = open();
    // A response first: its ParentMessageId is the request's MessageId.
    let mut response = obs(MessageKind::ErrorResponse, "r1", 2);
    response.parent_message_id = Some("from-response".into());
    response.originating_message_id = Some("origin".into());
    response.originating_from = Some("storefront".into());
    store.record(&response).unwrap();
    let record = &store.event("e1").unwrap()[0].record;
    assert_eq!(record.request_message_id.as_deref(), Some("from-response"));
    assert_eq!(record.request_from.as_deref(), Some("storefront"));

    // The request copy is the authority, even when its status is refused.
    let mut request = obs(MessageKind::EventRequest, "m1", 1);
    request.from = Some("storefront".into());
    request.originating_from = Some("storefront".into());
    assert!(matches!(
        store.record(&request).unwrap(),
        Recorded::Refused { .. }
    ));
    let record = &store.event("e1").unwrap()[0].record;
    assert_eq!(record.request_message_id.as_deref(), Some("m1"));
    assert_eq!(
        record.originating_message_id, None,
        "self, as the copy says"
    );

    // Later responses and control requests leave them alone.
    let mut later = obs(MessageKind::ResolutionResponse, "r2", 3);
    later.parent_message_id = Some("resubmit-1".into());
    store.record(&later).unwrap();
    let mut resubmit = obs(MessageKind::ResubmissionRequest, "resubmit-1", 4);
    resubmit.parent_message_id = Some("m1".into());
    store.record(&resubmit).unwrap();
    let record = &store.event("e1").unwrap()[0].record;
    assert_eq!(record.request_message_id.as_deref(), Some("m1"));
    assert_eq!(record.request_from.as_deref(), Some("storefront"));
}

#[test]
fn heartbeats_keep_the_newest_answer_per_endpoint() {
    let (_dir, store) = open();
    let beat = |endpoint: &str, message_type: &str, at_ms| Heartbeat {
        endpoint: endpoint.into(),
        message_type: message_type.into(),
        at_ms,
    };
    store
        .record_heartbeat(&beat("billing", "ResolutionResponse", 20))
        .unwrap();
    // A redelivered older answer does not replace the newer one.
    store
        .record_heartbeat(&beat("billing", "ErrorResponse", 10))
        .unwrap();
    store
        .record_heartbeat(&beat("shipping", "UnsupportedResponse", 5))
        .unwrap();
    assert_eq!(
        store.heartbeats().unwrap(),
        [
            beat("billing", "ResolutionResponse", 20),
            beat("shipping", "UnsupportedResponse", 5)
        ]
    );
    assert!(store.event("e1").unwrap().is_empty(), "not an event");
}

#[test]
fn a_database_from_before_the_coordinate_columns_is_upgraded_on_open() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("resolver.db");
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch(
            "CREATE TABLE events (
                endpoint TEXT NOT NULL, event_id TEXT NOT NULL, session_id TEXT, status TEXT NOT NULL,
                sub_status TEXT, status_source TEXT NOT NULL, event_type TEXT, correlation_id TEXT,
                last_message_id TEXT, retry_count INTEGER NOT NULL, error_type TEXT, error_text TEXT,
                dead_letter_reason TEXT, dead_letter_description TEXT, handoff_reason TEXT,
                external_job_id TEXT, expected_by TEXT, handler_version TEXT, queue_time_ms INTEGER,
                processing_time_ms INTEGER, payload TEXT, first_seen_ms INTEGER NOT NULL,
                updated_ms INTEGER NOT NULL, PRIMARY KEY (endpoint, event_id));
             INSERT INTO events (endpoint, event_id, status, status_source, retry_count, first_seen_ms, updated_ms)
                VALUES ('billing', 'old', 'Failed', 'ErrorResponse', 0, 1, 1);",
        )
        .unwrap();
    }
    let store = SqliteResolverStore::open(&path).unwrap();
    let old = &store.event("old").unwrap()[0].record;
    assert_eq!(old.status, Status::Failed);
    assert_eq!(old.request_message_id, None);
    store
        .record(&obs(MessageKind::EventRequest, "m1", 1))
        .unwrap();
    assert_eq!(
        store.event("e1").unwrap()[0]
            .record
            .request_message_id
            .as_deref(),
        Some("m1")
    );
}

#[test]
fn a_batch_is_recorded_in_order_as_one_unit() {
    let (_dir, store) = open();
    let mut second = obs(MessageKind::EventRequest, "m2", 1);
    second.event_id = "e2".into();
    let outcomes = store
        .record_batch(&[
            obs(MessageKind::EventRequest, "m1", 1),
            second,
            obs(MessageKind::ResolutionResponse, "r1", 2),
            obs(MessageKind::EventRequest, "m1", 1),
        ])
        .unwrap();
    assert_eq!(
        outcomes,
        [
            Recorded::Applied {
                status: Status::Pending
            },
            Recorded::Applied {
                status: Status::Pending
            },
            Recorded::Applied {
                status: Status::Completed
            },
            Recorded::AlreadyRecorded,
        ]
    );
    assert_eq!(status_of(&store), Status::Completed);
    assert_eq!(store.event("e2").unwrap()[0].record.status, Status::Pending);
}

fn index_names(path: &std::path::Path) -> Vec<String> {
    indexes_of(path, "history")
}

/// The indexes on `table`, by name.
fn indexes_of(path: &std::path::Path, table: &str) -> Vec<String> {
    let conn = rusqlite::Connection::open(path).unwrap();
    let mut stmt = conn
        .prepare(
            "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = ?1 ORDER BY name",
        )
        .unwrap();
    stmt.query_map([table], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

/// The indexes a current store has on `events`.
const EVENT_INDEXES: [&str; 3] = [
    "events_by_endpoint",
    "events_by_status",
    "sqlite_autoindex_events_1",
];

/// The tables as builds before the history was keyed by the event's `id`
/// wrote them, with `history_indexes` on the history.
fn previous_layout(path: &std::path::Path, history_indexes: &str) {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.execute_batch(&format!(
        "CREATE TABLE events (
            endpoint TEXT NOT NULL, event_id TEXT NOT NULL, session_id TEXT, status TEXT NOT NULL,
            sub_status TEXT, status_source TEXT NOT NULL, event_type TEXT, correlation_id TEXT,
            last_message_id TEXT, retry_count INTEGER NOT NULL, error_type TEXT, error_text TEXT,
            dead_letter_reason TEXT, dead_letter_description TEXT, handoff_reason TEXT,
            external_job_id TEXT, expected_by TEXT, handler_version TEXT, queue_time_ms INTEGER,
            processing_time_ms INTEGER, payload TEXT, first_seen_ms INTEGER NOT NULL,
            updated_ms INTEGER NOT NULL, request_message_id TEXT, request_from TEXT,
            originating_message_id TEXT, originating_from TEXT,
            PRIMARY KEY (endpoint, event_id));
         CREATE INDEX events_by_status ON events (status, updated_ms);
         CREATE INDEX events_by_session ON events (session_id);
         CREATE TABLE history (
            seq INTEGER PRIMARY KEY AUTOINCREMENT, endpoint TEXT NOT NULL, event_id TEXT NOT NULL,
            message_id TEXT, message_type TEXT NOT NULL, status TEXT NOT NULL, at_ms INTEGER NOT NULL,
            from_endpoint TEXT, retry_count INTEGER NOT NULL, error_type TEXT, error_text TEXT,
            handler_version TEXT, refused TEXT);
         {history_indexes}
         INSERT INTO events (endpoint, event_id, session_id, status, status_source, retry_count, first_seen_ms, updated_ms, request_message_id)
            VALUES ('billing', 'e1', 's-1', 'Failed', 'ErrorResponse', 0, 1, 2, 'm1'),
                   ('billing', 'e0', 's-1', 'Completed', 'ResolutionResponse', 0, 0, 1, 'm0');
         INSERT INTO history (endpoint, event_id, message_id, message_type, status, at_ms, retry_count)
            VALUES ('billing', 'e0', 'm0', 'EventRequest', 'Pending', 0, 0),
                   ('billing', 'e1', 'm1', 'EventRequest', 'Pending', 1, 0),
                   ('billing', 'e0', 'r0', 'ResolutionResponse', 'Completed', 1, 0),
                   ('billing', 'e1', 'r1', 'ErrorResponse', 'Failed', 2, 0);"
    ))
    .unwrap();
}

/// Every history row as (seq, event_id, message_id, message_type).
fn history_rows_by_event(path: &std::path::Path) -> Vec<(i64, String, Option<String>, String)> {
    let conn = rusqlite::Connection::open(path).unwrap();
    let mut stmt = conn
        .prepare("SELECT seq, event_id, message_id, message_type FROM history ORDER BY seq")
        .unwrap();
    stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

/// Stores of earlier builds (the history keyed by event id, through one
/// index or the two before it) are upgraded on open: every event and
/// history row kept, in order, and each message still recorded once.
#[test]
fn stores_of_earlier_builds_are_upgraded_on_open() {
    for history_indexes in [
        "CREATE UNIQUE INDEX history_key ON history (event_id, endpoint, message_id, message_type);",
        "CREATE INDEX history_by_event ON history (event_id, endpoint, seq);
         CREATE UNIQUE INDEX history_once ON history (endpoint, event_id, message_id, message_type)
             WHERE message_id IS NOT NULL;",
    ] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("resolver.db");
        previous_layout(&path, history_indexes);

        let before = history_rows_by_event(&path);
        let store = SqliteResolverStore::open(&path).unwrap();
        assert_eq!(
            index_names(&path),
            ["history_of_event"],
            "{history_indexes}"
        );
        assert!(!table_sql(&path, "history").contains("AUTOINCREMENT"));
        assert_eq!(history_rows_by_event(&path), before, "{history_indexes}");
        let e1 = &store.event("e1").unwrap()[0];
        assert_eq!(e1.record.status, Status::Failed);
        assert_eq!(e1.record.request_message_id.as_deref(), Some("m1"));
        let kinds: Vec<&str> = e1.history.iter().map(|h| h.message_type.as_str()).collect();
        assert_eq!(kinds, ["EventRequest", "ErrorResponse"]);
        assert_eq!(store.event("e0").unwrap()[0].history.len(), 2);

        assert_eq!(
            store
                .record(&obs(MessageKind::EventRequest, "m1", 1))
                .unwrap(),
            Recorded::AlreadyRecorded
        );
        store
            .record(&obs(MessageKind::ResubmissionRequest, "m2", 3))
            .unwrap();
        let e1 = &store.event("e1").unwrap()[0];
        assert_eq!(e1.record.status, Status::Pending);
        assert_eq!(e1.history.len(), 3);
        let listed = store
            .events(&EventFilter {
                endpoint: Some("billing".to_owned()),
                ..EventFilter::default()
            })
            .unwrap();
        assert_eq!(listed.len(), 2);
        // Its session index is the store's own now (decision 0119); the
        // resubmission above moved e1 to its own session.
        for (session, event_id) in [("s-1", "e0"), ("order-1", "e1")] {
            let in_session: Vec<String> = store
                .events(&EventFilter {
                    session_id: Some(session.to_owned()),
                    ..EventFilter::default()
                })
                .unwrap()
                .into_iter()
                .map(|r| r.event_id)
                .collect();
            assert_eq!(in_session, [event_id], "{history_indexes}");
        }
        let conn = rusqlite::Connection::open(&path).unwrap();
        let session_entries: i64 = conn
            .query_row("SELECT COUNT(*) FROM session_events", [], |r| r.get(0))
            .unwrap();
        assert_eq!(session_entries, 2, "indexed at the upgrade");
        drop(conn);
        assert_eq!(
            indexes_of(&path, "events"),
            EVENT_INDEXES,
            "the per-commit session index is gone"
        );
        drop(store);
        // A second open finds nothing to upgrade and loses nothing.
        let store = SqliteResolverStore::open(&path).unwrap();
        assert_eq!(store.event("e1").unwrap()[0].history.len(), 3);
    }
}

/// The declaration of `table` as SQLite keeps it.
fn table_sql(path: &std::path::Path, table: &str) -> String {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.query_row(
        "SELECT sql FROM sqlite_schema WHERE type = 'table' AND name = ?1",
        [table],
        |r| r.get(0),
    )
    .unwrap()
}

/// Every history row as (seq, event_ref, message_id, message_type), in
/// `seq` order, read straight from the file.
fn history_rows(path: &std::path::Path) -> Vec<(i64, i64, Option<String>, String)> {
    let conn = rusqlite::Connection::open(path).unwrap();
    let mut stmt = conn
        .prepare("SELECT seq, event_ref, message_id, message_type FROM history ORDER BY seq")
        .unwrap();
    stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

/// A store of the build before this one: the current `events`, and a
/// history keyed by the event's `id` but declared `AUTOINCREMENT`, whose
/// numbers have gaps, which the rebuild must keep as they are (numbers an
/// operator may already have seen).
fn autoincrement_layout(path: &std::path::Path) {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.execute_batch(
        "CREATE TABLE events (
            id INTEGER PRIMARY KEY,
            endpoint TEXT NOT NULL, event_id TEXT NOT NULL, session_id TEXT, status TEXT NOT NULL,
            sub_status TEXT, status_source TEXT NOT NULL, event_type TEXT, correlation_id TEXT,
            last_message_id TEXT, request_message_id TEXT, request_from TEXT,
            originating_message_id TEXT, originating_from TEXT, retry_count INTEGER NOT NULL,
            error_type TEXT, error_text TEXT, dead_letter_reason TEXT, dead_letter_description TEXT,
            handoff_reason TEXT, external_job_id TEXT, expected_by TEXT, handler_version TEXT,
            queue_time_ms INTEGER, processing_time_ms INTEGER, payload TEXT,
            first_seen_ms INTEGER NOT NULL, updated_ms INTEGER NOT NULL,
            UNIQUE (event_id, endpoint));
         CREATE INDEX events_by_status ON events (status, updated_ms);
         CREATE INDEX events_by_session ON events (session_id);
         CREATE INDEX events_by_endpoint ON events (endpoint, updated_ms);
         CREATE INDEX events_by_update ON events (updated_ms);
         CREATE TABLE history (
            seq INTEGER PRIMARY KEY AUTOINCREMENT, endpoint TEXT NOT NULL, event_id TEXT NOT NULL,
            message_id TEXT, message_type TEXT NOT NULL, status TEXT NOT NULL, at_ms INTEGER NOT NULL,
            from_endpoint TEXT, retry_count INTEGER NOT NULL, error_type TEXT, error_text TEXT,
            handler_version TEXT, refused TEXT, event_ref INTEGER);
         CREATE UNIQUE INDEX history_by_ref ON history (event_ref, message_id, message_type);
         INSERT INTO events (id, endpoint, event_id, session_id, status, status_source, retry_count, first_seen_ms, updated_ms, request_message_id)
            VALUES (1, 'billing', 'e0', 's-1', 'Completed', 'ResolutionResponse', 0, 0, 1, 'm0'),
                   (2, 'billing', 'e1', 's-1', 'Failed', 'ErrorResponse', 0, 1, 2, 'm1');
         INSERT INTO history (seq, event_ref, endpoint, event_id, message_id, message_type, status, at_ms, retry_count, error_text)
            VALUES (3, 1, 'billing', 'e0', 'm0', 'EventRequest', 'Pending', 0, 0, NULL),
                   (7, 2, 'billing', 'e1', 'm1', 'EventRequest', 'Pending', 1, 0, NULL),
                   (8, 1, 'billing', 'e0', 'r0', 'ResolutionResponse', 'Completed', 1, 0, NULL),
                   (12, 2, 'billing', 'e1', 'r1', 'ErrorResponse', 'Failed', 2, 0, 'credit check said 503');",
    )
    .unwrap();
}

/// A store whose history was declared `AUTOINCREMENT` is rebuilt on open
/// without it: every row keeps its number and its columns, the index is
/// back, the next message is numbered after the last, and a second open
/// changes nothing.
#[test]
fn an_autoincrement_history_is_rebuilt_keeping_every_row_and_number() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("resolver.db");
    autoincrement_layout(&path);
    let before = history_rows(&path);
    assert!(table_sql(&path, "history").contains("AUTOINCREMENT"));

    let store = SqliteResolverStore::open(&path).unwrap();
    assert!(
        !table_sql(&path, "history").contains("AUTOINCREMENT"),
        "{}",
        table_sql(&path, "history")
    );
    assert_eq!(history_rows(&path), before);
    assert_eq!(index_names(&path), ["history_of_event"]);
    // `events_by_session` and `events_by_update` are dropped (decisions
    // 0119, 0120).
    assert_eq!(indexes_of(&path, "events"), EVENT_INDEXES);
    let e1 = &store.event("e1").unwrap()[0];
    assert_eq!(e1.record.status, Status::Failed);
    let kinds: Vec<&str> = e1.history.iter().map(|h| h.message_type.as_str()).collect();
    assert_eq!(kinds, ["EventRequest", "ErrorResponse"]);
    assert_eq!(
        e1.history[1].error_text.as_deref(),
        Some("credit check said 503")
    );
    assert_eq!(
        store
            .record(&obs(MessageKind::ErrorResponse, "r1", 2))
            .unwrap(),
        Recorded::AlreadyRecorded
    );
    store
        .record(&obs(MessageKind::ResubmissionRequest, "m2", 3))
        .unwrap();
    let after = history_rows(&path);
    assert_eq!(after[..before.len()], before[..]);
    assert_eq!(
        after[before.len()],
        (
            13,
            2,
            Some("m2".to_owned()),
            "ResubmissionRequest".to_owned()
        )
    );
    drop(store);

    let store = SqliteResolverStore::open(&path).unwrap();
    assert_eq!(history_rows(&path), after);
    assert_eq!(store.event("e1").unwrap()[0].history.len(), 3);
}

/// A store of the build before the history kept handoffs: its history has
/// no `handoff` column. It opens with every row kept (saying nothing of a
/// handoff), and new messages record theirs.
#[test]
fn a_history_from_before_the_handoff_column_is_upgraded_on_open() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("resolver.db");
    autoincrement_layout(&path);
    {
        // The layout of the build before: as above, without AUTOINCREMENT.
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch(
            "CREATE TABLE history_plain (
                seq INTEGER PRIMARY KEY, endpoint TEXT NOT NULL, event_id TEXT NOT NULL,
                message_id TEXT, message_type TEXT NOT NULL, status TEXT NOT NULL, at_ms INTEGER NOT NULL,
                from_endpoint TEXT, retry_count INTEGER NOT NULL, error_type TEXT, error_text TEXT,
                handler_version TEXT, refused TEXT, event_ref INTEGER);
             INSERT INTO history_plain SELECT * FROM history;
             DROP TABLE history;
             ALTER TABLE history_plain RENAME TO history;
             CREATE UNIQUE INDEX history_by_ref ON history (event_ref, message_id, message_type);",
        )
        .unwrap();
    }
    assert!(!table_sql(&path, "history").contains("handoff"));
    let before = history_rows(&path);

    let store = SqliteResolverStore::open(&path).unwrap();
    assert!(table_sql(&path, "history").contains("handoff"));
    assert_eq!(history_rows(&path), before);
    assert_eq!(index_names(&path), ["history_of_event"]);
    let e1 = &store.event("e1").unwrap()[0];
    assert_eq!(e1.record.status, Status::Failed);
    assert_eq!(e1.history.len(), 2);
    assert_eq!(
        e1.history[1].error_text.as_deref(),
        Some("credit check said 503")
    );
    assert!(e1.history.iter().all(|h| h.handoff.is_none()));

    let mut park = obs(MessageKind::PendingHandoffResponse, "r2", 3);
    park.handoff = Some(HandoffDetails {
        external_job_id: Some("dmf-7".into()),
        ..HandoffDetails::default()
    });
    store
        .record(&obs(MessageKind::ResubmissionRequest, "m2", 2))
        .unwrap();
    store.record(&park).unwrap();
    drop(store);
    // A second open finds nothing to upgrade and loses nothing.
    let store = SqliteResolverStore::open(&path).unwrap();
    let e1 = &store.event("e1").unwrap()[0];
    assert_eq!(e1.history.len(), 4);
    assert_eq!(e1.history[3].handoff, park.handoff);
    assert_eq!(history_rows(&path)[..before.len()], before[..]);
}

/// The session is written apart from the status (so a status write leaves
/// the session index alone), with the rule it always had: a message with
/// a session sets it, one without keeps the row's.
#[test]
fn a_message_with_another_session_moves_the_event_and_one_without_keeps_it() {
    let (_dir, store) = open();
    let in_session = |session: &str| {
        store
            .events(&EventFilter {
                session_id: Some(session.to_owned()),
                ..EventFilter::default()
            })
            .unwrap()
            .iter()
            .map(|e| e.event_id.clone())
            .collect::<Vec<_>>()
    };
    store
        .record(&obs(MessageKind::EventRequest, "m1", 1))
        .unwrap();
    let mut without = obs(MessageKind::ErrorResponse, "r1", 2);
    without.session_id = None;
    store.record(&without).unwrap();
    let record = &store.event("e1").unwrap()[0].record;
    assert_eq!(record.session_id.as_deref(), Some("order-1"));
    assert_eq!(record.status, Status::Failed);
    assert_eq!(in_session("order-1"), ["e1"]);

    let mut moved = obs(MessageKind::ResubmissionRequest, "m2", 3);
    moved.session_id = Some("order-2".to_owned());
    store.record(&moved).unwrap();
    let record = &store.event("e1").unwrap()[0].record;
    assert_eq!(record.session_id.as_deref(), Some("order-2"));
    assert_eq!(record.status, Status::Pending);
    assert_eq!(in_session("order-2"), ["e1"]);
    assert!(in_session("order-1").is_empty());
}

#[test]
fn a_response_fills_the_payload_only_while_unknown_and_a_resubmission_replaces_it() {
    let (_dir, store) = open();
    let payload =
        |store: &SqliteResolverStore| store.event("e1").unwrap()[0].record.payload.clone();
    let mut request = obs(MessageKind::EventRequest, "m1", 1);
    request.payload = Some(r#"{"Rows":10}"#.into());
    store.record(&request).unwrap();
    let mut handed_off = obs(MessageKind::PendingHandoffResponse, "r1", 2);
    handed_off.payload = Some(r#"{"Rows":10}"#.into());
    store.record(&handed_off).unwrap();
    // The engine's answer to a handoff completion copies that request's
    // body: the external job's details, not the event.
    let mut completed = obs(MessageKind::ResolutionResponse, "r2", 3);
    completed.payload = Some(r#"{"rows":10,"job":"dmf-1"}"#.into());
    store.record(&completed).unwrap();
    assert_eq!(payload(&store).as_deref(), Some(r#"{"Rows":10}"#));

    let mut resubmission = obs(MessageKind::ResubmissionRequest, "m2", 4);
    resubmission.payload = Some(r#"{"Rows":11}"#.into());
    store.record(&resubmission).unwrap();
    assert_eq!(payload(&store).as_deref(), Some(r#"{"Rows":11}"#));

    // An event first known from a response takes the payload it carries.
    let mut only_response = Observation::new("billing", "e2", MessageKind::ResolutionResponse, 5);
    only_response.message_id = Some("r9".into());
    only_response.payload = Some(r#"{"Rows":1}"#.into());
    store.record(&only_response).unwrap();
    assert_eq!(
        store.event("e2").unwrap()[0].record.payload.as_deref(),
        Some(r#"{"Rows":1}"#)
    );

    // A listing leaves payloads out (up to 2 MiB each, a thousand events
    // by default); the event's own view has them.
    let listed = store.events(&EventFilter::default()).unwrap();
    assert_eq!(listed.len(), 2);
    assert!(listed.iter().all(|r| r.payload.is_none()), "{listed:?}");
}

/// Operator reads have a connection of their own: a listing answers while
/// a record waits for the database's write lock (here held by another
/// connection), instead of queueing behind it.
#[test]
fn a_listing_answers_while_a_record_waits_to_write() {
    let (dir, store) = open();
    store
        .record(&obs(MessageKind::EventRequest, "m1", 1))
        .unwrap();
    let store = std::sync::Arc::new(store);
    let other = rusqlite::Connection::open(dir.path().join("resolver.db")).unwrap();
    other.execute_batch("BEGIN IMMEDIATE").unwrap();

    let writing = std::thread::spawn({
        let store = std::sync::Arc::clone(&store);
        move || store.record(&obs(MessageKind::ResolutionResponse, "r1", 2))
    });
    // Give the record time to take the store's writer and start waiting.
    std::thread::sleep(std::time::Duration::from_millis(200));
    let listed = store.events(&EventFilter::default()).unwrap();
    if writing.is_finished() {
        panic!("the record did not wait: {:?}", writing.join());
    }
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].status, Status::Pending, "the last commit");
    assert_eq!(store.event("e1").unwrap()[0].history.len(), 1);

    other.execute_batch("ROLLBACK").unwrap();
    writing.join().unwrap().unwrap();
    assert_eq!(status_of(&store), Status::Completed);
}

/// Retention removes, with their history, only old events that need nothing
/// more; an old Failed, DeadLettered, Pending or Deferred event stays for
/// its operator, and so does a recent Completed one.
#[test]
fn pruning_removes_only_old_events_that_need_nothing_more() {
    let (dir, store) = open();
    let record = |event_id: &str, kind: MessageKind, at_ms: i64| {
        let mut request = Observation::new("billing", event_id, MessageKind::EventRequest, at_ms);
        request.message_id = Some(format!("{event_id}-request"));
        store.record(&request).unwrap();
        if kind != MessageKind::EventRequest {
            let mut outcome = Observation::new("billing", event_id, kind, at_ms);
            outcome.message_id = Some(format!("{event_id}-outcome"));
            if event_id.ends_with("dead") {
                outcome.dead_letter_description = Some("MaxDeliveryCountExceeded".into());
            }
            store.record(&outcome).unwrap();
        }
    };
    for (i, kind) in [
        MessageKind::ResolutionResponse,
        MessageKind::SkipResponse,
        MessageKind::UnsupportedResponse,
    ]
    .into_iter()
    .enumerate()
    {
        record(&format!("old-{i}"), kind, 1_000);
    }
    record("old-failed", MessageKind::ErrorResponse, 1_000);
    record("old-dead", MessageKind::ErrorResponse, 1_000);
    record("old-pending", MessageKind::EventRequest, 1_000);
    record("old-deferred", MessageKind::DeferralResponse, 1_000);
    record("recent-completed", MessageKind::ResolutionResponse, 5_000);

    // An old completed event of a session the broker shows blocked or with
    // parked events stays, however many calls come first.
    let mut busy = Observation::new(
        "billing",
        "old-busy",
        MessageKind::ResolutionResponse,
        1_000,
    );
    busy.session_id = Some("s-busy".into());
    store.record(&busy).unwrap();
    let in_use = BTreeSet::from([("billing".to_owned(), "s-busy".to_owned())]);

    assert_eq!(
        store.prune_expendable(2_000, 2, &in_use).unwrap(),
        2,
        "at most the batch"
    );
    assert_eq!(
        store.prune_expendable(2_000, 2, &in_use).unwrap(),
        1,
        "then the rest"
    );
    assert_eq!(store.prune_expendable(2_000, 2, &in_use).unwrap(), 0);
    assert_eq!(
        store.event("old-busy").unwrap().len(),
        1,
        "its session is in use"
    );

    // Read from the file itself: a lookup through `events` could not see
    // history rows left behind by a deleted event.
    let history = history_rows_by_event(&dir.path().join("resolver.db"));
    for gone in ["old-0", "old-1", "old-2"] {
        assert!(store.event(gone).unwrap().is_empty(), "{gone} is pruned");
        assert!(
            !history.iter().any(|(_, event_id, _, _)| event_id == gone),
            "{gone}'s history went with it"
        );
    }
    assert!(
        history
            .iter()
            .any(|(_, event_id, _, _)| event_id == "old-failed"),
        "a kept event's history stays"
    );
    let kept: Vec<(String, Status)> = store
        .events(&EventFilter::default())
        .unwrap()
        .into_iter()
        .map(|r| (r.event_id, r.status))
        .collect();
    let mut kept_ids: Vec<&str> = kept.iter().map(|(id, _)| id.as_str()).collect();
    kept_ids.sort_unstable();
    assert_eq!(
        kept_ids,
        [
            "old-busy",
            "old-dead",
            "old-deferred",
            "old-failed",
            "old-pending",
            "recent-completed"
        ]
    );
    let mut kept_statuses: Vec<Status> = kept.iter().map(|(_, status)| *status).collect();
    kept_statuses.sort_by_key(|s| s.as_str());
    assert_eq!(
        kept_statuses,
        [
            Status::Completed,
            Status::Completed,
            Status::DeadLettered,
            Status::Deferred,
            Status::Failed,
            Status::Pending
        ]
    );
    assert_eq!(store.event("old-failed").unwrap()[0].history.len(), 2);
}

/// The event keeps only its latest payload; a resubmission with an edited
/// one keeps the payload it replaced in its history entry, so the payload
/// that failed is not lost. A resubmission of the same payload, or one
/// without a payload, keeps nothing.
#[test]
fn an_edited_resubmission_keeps_the_payload_it_replaced() {
    let (_dir, store) = open();
    let with_payload = |kind, message_id: &str, at_ms, payload: Option<&str>| {
        let mut o = obs(kind, message_id, at_ms);
        o.payload = payload.map(str::to_owned);
        o
    };
    let failing = r#"{"Lines":[]}"#;
    let fixed = r#"{"Lines":[{"Sku":"B"}]}"#;
    store
        .record(&with_payload(
            MessageKind::EventRequest,
            "m1",
            1,
            Some(failing),
        ))
        .unwrap();
    store
        .record(&obs(MessageKind::ErrorResponse, "r1", 2))
        .unwrap();
    store
        .record(&with_payload(
            MessageKind::ResubmissionRequest,
            "m2",
            3,
            Some(failing),
        ))
        .unwrap();
    store
        .record(&with_payload(
            MessageKind::ResubmissionRequest,
            "m3",
            4,
            Some(fixed),
        ))
        .unwrap();
    store
        .record(&with_payload(
            MessageKind::ResubmissionRequest,
            "m4",
            5,
            None,
        ))
        .unwrap();

    let detail = &store.event("e1").unwrap()[0];
    assert_eq!(detail.record.payload.as_deref(), Some(fixed));
    let replaced: Vec<(&str, Option<&str>)> = detail
        .history
        .iter()
        .map(|h| {
            (
                h.message_id.as_deref().unwrap_or(""),
                h.replaced_payload.as_deref(),
            )
        })
        .collect();
    assert_eq!(
        replaced,
        [
            ("m1", None),
            ("r1", None),
            ("m2", None),
            ("m3", Some(failing)),
            ("m4", None),
        ]
    );
}

/// A dead-letter replay sends the Resolver no message: the Manager notes
/// it, as a history row of its own that leaves the status alone, and each
/// replay of the same message is a row of its own.
#[test]
fn a_dead_letter_replay_is_noted_in_a_known_events_history_only() {
    let (_dir, store) = open();
    store
        .record(&obs(MessageKind::EventRequest, "m1", 1))
        .unwrap();
    let note = |event_id: &str, at_ms: i64| nimbus_resolver::ReplayNote {
        endpoint: "billing".to_owned(),
        event_id: event_id.to_owned(),
        at_ms,
        note: "replayed from the dead-letter queue (message m1, dead-lettered: boom)".to_owned(),
    };
    assert_eq!(
        store.record_replay(&note("e1", 5)).unwrap(),
        Some(Status::Pending)
    );
    assert!(store.record_replay(&note("e1", 6)).unwrap().is_some());
    assert_eq!(store.record_replay(&note("unknown", 7)).unwrap(), None);
    let detail = &store.event("e1").unwrap()[0];
    assert_eq!(
        detail.record.status,
        Status::Pending,
        "the status is left alone"
    );
    let replays: Vec<_> = detail
        .history
        .iter()
        .filter(|h| h.message_type == nimbus_resolver::DEAD_LETTER_REPLAY)
        .map(|h| {
            (
                h.at_ms,
                h.status,
                h.from.as_deref(),
                h.message_id.as_deref(),
            )
        })
        .collect();
    assert_eq!(
        replays,
        [
            (5, Status::Pending, Some("Manager"), None),
            (6, Status::Pending, Some("Manager"), None)
        ]
    );
    assert!(
        store.event("unknown").unwrap().is_empty(),
        "nothing made up"
    );
}

/// The most recent events of all, across statuses, newest first, ties in
/// endpoint then id order, up to the limit; as many of one status as the
/// limit allows.
#[test]
fn the_unfiltered_listing_is_the_most_recent_across_statuses() {
    let (_dir, store) = open();
    for (endpoint, event_id, kind, at_ms) in [
        ("billing", "a", MessageKind::ResolutionResponse, 10),
        ("billing", "b", MessageKind::ErrorResponse, 40),
        ("shipping", "c", MessageKind::EventRequest, 30),
        ("billing", "d", MessageKind::DeferralResponse, 30),
        ("billing", "e", MessageKind::ResolutionResponse, 50),
        ("billing", "f", MessageKind::ResolutionResponse, 20),
        ("billing", "g", MessageKind::SkipResponse, 5),
        ("billing", "h", MessageKind::PendingHandoffResponse, 1),
    ] {
        store
            .record(&Observation::new(endpoint, event_id, kind, at_ms))
            .unwrap();
    }
    let listed = |limit: usize| {
        store
            .events(&EventFilter {
                limit: Some(limit),
                ..EventFilter::default()
            })
            .unwrap()
            .into_iter()
            .map(|r| r.event_id)
            .collect::<Vec<_>>()
    };
    assert_eq!(listed(4), ["e", "b", "d", "c"]);
    assert_eq!(listed(100), ["e", "b", "d", "c", "f", "a", "g", "h"]);
    let handoffs = store
        .events(&EventFilter {
            sub_status: Some("Handoff".to_owned()),
            ..EventFilter::default()
        })
        .unwrap();
    assert_eq!(handoffs.len(), 1);
    assert_eq!(handoffs[0].event_id, "h");
}
