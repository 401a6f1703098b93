//! `[resolver] retention` through the `nimbus` binary: what needs nothing
//! more leaves the store, but never an event an operator may still act on
//! or that may still run: a blocker the retention would count as settled
//! (Unsupported once its handler is gone) and a parked event an operator
//! skipped (its message is still parked until the session drains, when it
//! is dropped without running).

use nimbus_blackbox_tests::Scratch;
use nimbus_blackbox_tests::orders::{id, order, publish};
use nimbus_blackbox_tests::running::RunningHost;

/// Polls until the Resolver no longer knows `event_id`.
fn wait_pruned(host: &RunningHost, event_id: &str) {
    host.eventually(&format!("{event_id} to be pruned"), || {
        (host.cli(&["event", event_id]).code() == Some(1)).then_some(())
    });
}

#[test]
fn retention_keeps_a_sessions_blocker_and_its_skipped_parked_event_until_they_are_done() {
    let scratch = Scratch::new();
    let orders = scratch.install("billing", "orders", "orders");
    scratch.install("billing", "noop", "noop");
    let host = RunningHost::start(&scratch, "[resolver]\nretention = \"2s\"\n");

    // s-parked: a blocker and an event parked behind it, which the operator
    // skips (it is recorded Skipped; its message stays parked until the
    // session drains).
    let blocker = publish(&host, "OrderPlaced", "s-parked", &order("o-1", true));
    let blocker = host.wait_status("s-parked", &blocker, "Failed");
    let parked = publish(&host, "OrderPlaced", "s-parked", &order("o-2", false));
    let parked_record = host.wait_status("s-parked", &parked, "Deferred");
    host.cli(&["skip", &id(&parked_record)]).expect_code(0);
    host.wait_status("s-parked", &parked, "Skipped");
    // The session still counts it parked, and says it will be dropped.
    let sessions = host.cli_json(&["sessions", "--json"]);
    let session = sessions
        .as_array()
        .into_iter()
        .flatten()
        .find(|s| s["session_id"] == "s-parked")
        .cloned()
        .unwrap_or_else(|| panic!("s-parked is not listed: {sessions}"));
    assert_eq!(session["parked"], 1, "{session}");
    assert_eq!(
        session["settled_while_parked"],
        serde_json::json!([id(&parked_record)]),
        "{session}"
    );
    let table = host.cli(&["sessions"]).expect_code(0).stdout();
    assert!(table.contains("1 (1 settled, to drop)"), "{table}");

    // s-gone: a blocker whose handler is then deleted; resubmitted, it is
    // Unsupported and keeps the block (SEMANTICS.md §2.6).
    let gone = publish(&host, "OrderPlaced", "s-gone", &order("o-3", true));
    let gone = host.wait_status("s-gone", &gone, "Failed");
    std::fs::rename(&orders, scratch.path("orders.wasm.away")).expect("remove the handler");
    host.eventually("orders to be unregistered", || {
        let handlers = host.cli_json(&["handlers", "--json"]);
        let listed = handlers["handlers"].as_array().map_or(0, Vec::len);
        (listed == 1).then_some(())
    });
    host.cli(&["resubmit", &id(&gone)]).expect_code(0);
    let unsupported_id = id(&gone);
    host.eventually("the blocker to be Unsupported", || {
        let event = host.event_json(&unsupported_id)?;
        (event["endpoints"][0]["record"]["status"] == "Unsupported").then_some(())
    });
    // Settled without running: the host says so at the default level.
    let log = host.stderr();
    assert!(
        log.lines().any(|line| line.contains("WARN")
            && line.contains("answered UnsupportedResponse")
            && line.contains(&unsupported_id)),
        "{log}"
    );

    // A completed event younger than both: once it is pruned, both would
    // have been, had they not been kept.
    let later = publish(&host, "Noop", "s-later", "{}");
    let later = host.wait_status("s-later", &later, "Completed");
    wait_pruned(&host, &id(&later));

    let kept = host.cli_json(&["event", &unsupported_id, "--json"]);
    assert_eq!(kept["endpoints"][0]["record"]["status"], "Unsupported");
    let skipped = host.cli_json(&["event", &id(&parked_record), "--json"]);
    assert_eq!(skipped["endpoints"][0]["record"]["status"], "Skipped");

    // Both are still there to act on; the skipped parked event never runs,
    // the session's next event does.
    host.cli(&["skip", &unsupported_id]).expect_code(0);
    std::fs::rename(scratch.path("orders.wasm.away"), &orders).expect("restore the handler");
    host.eventually("orders to be back", || {
        let handlers = host.cli_json(&["handlers", "--json"]);
        let listed = handlers["handlers"].as_array().map_or(0, Vec::len);
        (listed == 2).then_some(())
    });
    host.cli(&["skip", &id(&blocker)]).expect_code(0);
    let next = publish(&host, "OrderPlaced", "s-parked", &order("o-4", false));
    host.wait_status("s-parked", &next, "Completed");
    // Its parked copy came back before `next` ran, and was dropped. (The
    // record itself may be pruned by now: nothing keeps it any more.)
    let parked_id = id(&parked_record);
    host.eventually("the parked copy to be dropped", || {
        host.stderr()
            .lines()
            .any(|line| line.contains("replayed copy is dropped") && line.contains(&parked_id))
            .then_some(())
    });
    let completed = host
        .cli(&["events", "--session", "s-parked", "--status", "completed"])
        .expect_code(0)
        .stdout();
    assert!(
        !completed.contains(&parked_id),
        "the skipped parked event ran: {completed}"
    );
}
