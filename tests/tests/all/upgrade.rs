//! A data directory an earlier build wrote: the host upgrades the Resolver
//! store's indexes at start, says so (on a large store it takes a while),
//! and every lookup still finds its events.

use nimbus_blackbox_tests::Scratch;
use nimbus_blackbox_tests::orders::{order, publish};
use nimbus_blackbox_tests::running::RunningHost;

#[test]
fn a_resolver_store_of_an_earlier_build_is_upgraded_at_start_and_says_so() {
    let scratch = Scratch::new();
    scratch.install("billing", "orders", "orders");
    let host = RunningHost::start(&scratch, "");
    let first = publish(&host, "OrderPlaced", "s-1", &order("o-1", false));
    host.wait_status("s-1", &first, "Completed");
    let (code, _) = host.terminate();
    assert_eq!(code, Some(0));

    // The indexes an earlier build kept (decisions 0119 and 0121).
    let store = rusqlite::Connection::open(scratch.path("data/resolver.db")).expect("open store");
    store
        .execute_batch(
            "DROP INDEX history_of_event;
             DROP TABLE session_events;
             DROP TABLE session_index_mark;
             CREATE UNIQUE INDEX history_by_ref ON history (event_ref, message_id, message_type);
             CREATE INDEX events_by_session ON events (session_id);",
        )
        .expect("write the earlier layout");
    drop(store);

    let host = RunningHost::start(&scratch, "");
    let logs = host.eventually("the upgrade's notes", || {
        let stderr = host.stderr();
        (stderr.contains("resolver store: indexing the history")
            && stderr.contains("resolver store: indexing each session's events"))
        .then_some(stderr)
    });
    assert!(!logs.contains("ERROR"), "{logs}");
    let in_session = host.cli_json(&["events", "--session", "s-1", "--json"]);
    assert_eq!(
        in_session.as_array().map(Vec::len),
        Some(1),
        "{in_session:#}"
    );
    let second = publish(&host, "OrderPlaced", "s-1", &order("o-2", false));
    let record = host.wait_status("s-1", &second, "Completed");
    let in_session = host.cli_json(&["events", "--session", "s-1", "--json"]);
    assert_eq!(
        in_session.as_array().map(Vec::len),
        Some(2),
        "{in_session:#}"
    );
    let event_id = record["event_id"].as_str().expect("an event id");
    let history = host.cli_json(&["event", event_id, "--json"]);
    assert!(
        history.to_string().contains("ResolutionResponse"),
        "{history:#}"
    );
}
