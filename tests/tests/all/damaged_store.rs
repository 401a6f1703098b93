//! A host whose Resolver store was damaged on disk refuses to start and
//! names the file, rather than starting to answer the operator with 500s.

use std::io::{Seek as _, SeekFrom, Write as _};

use nimbus_blackbox_tests::Scratch;
use nimbus_blackbox_tests::orders::{id, order, publish};
use nimbus_blackbox_tests::running::RunningHost;

#[test]
fn a_damaged_resolver_store_stops_the_host_naming_the_file() {
    let scratch = Scratch::new();
    scratch.install("billing", "orders", "orders");
    let host = RunningHost::start(&scratch, "");
    let mut last = String::new();
    for i in 0..40 {
        last = publish(&host, "OrderPlaced", &format!("s-{i}"), &order("o", false));
    }
    host.wait_status("s-39", &last, "Completed");
    let (code, _) = host.terminate();
    assert_eq!(code, Some(0));

    // Every page after the header overwritten, as a failing disk leaves them.
    let store = scratch.path("data/resolver.db");
    let len = std::fs::metadata(&store).expect("the store exists").len();
    assert!(
        len > 4096,
        "the store has pages past its header: {len} bytes"
    );
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .open(&store)
        .expect("open the store");
    file.seek(SeekFrom::Start(4096)).expect("seek");
    let noise: Vec<u8> = (0..len - 4096)
        .map(|i| u8::try_from((i * 7919 + 13) % 251).expect("below 251"))
        .collect();
    file.write_all(&noise).expect("overwrite");
    drop(file);

    let run = scratch.run_host_to_exit();
    run.expect_code(1);
    assert!(
        run.stderr().contains(&store.display().to_string()) && run.stderr().contains("damaged"),
        "{}",
        run.stderr()
    );
    assert!(!run.stdout().contains("API:"), "{}", run.stdout());
}

/// Blocks `session` at `billing`: a failing order, then one parked behind
/// it. The failing one's record, and the parked one's message id.
fn block_session(host: &RunningHost, session: &str) -> (serde_json::Value, String) {
    let failing = publish(host, "OrderPlaced", session, &order("o-fail", true));
    let failed = host.wait_status(session, &failing, "Failed");
    let parked = publish(host, "OrderPlaced", session, &order("o-next", false));
    host.wait_status(session, &parked, "Deferred");
    (failed, parked)
}

/// Moves the Resolver store aside with its -wal and -shm files, as an
/// operator does with a damaged one.
fn move_store_aside(scratch: &Scratch) {
    let aside = scratch.path("aside");
    std::fs::create_dir_all(&aside).expect("mkdir aside");
    for name in ["resolver.db", "resolver.db-wal", "resolver.db-shm"] {
        let file = scratch.path(&format!("data/{name}"));
        if file.exists() {
            std::fs::rename(&file, aside.join(name)).expect("move the store aside");
        }
    }
}

/// The blocked sessions of `endpoint` as (session, blocked by, parked).
fn blocked_sessions(host: &RunningHost, endpoint: &str) -> Vec<(String, String, u64)> {
    host.cli_json(&["sessions", "--endpoint", endpoint, "--blocked", "--json"])
        .as_array()
        .expect("a list")
        .iter()
        .map(|s| {
            (
                s["session_id"].as_str().unwrap_or_default().to_owned(),
                s["blocked_by"].as_str().unwrap_or_default().to_owned(),
                s["parked"].as_u64().unwrap_or_default(),
            )
        })
        .collect()
}

/// The message types of `event_id`'s history once it has `last`, oldest
/// first.
fn history_types(host: &RunningHost, event_id: &str, last: &str) -> Vec<String> {
    host.eventually(&format!("{last} is in the history of {event_id}"), || {
        let event = host.event_json(event_id)?;
        let types: Vec<String> = event["endpoints"][0]["history"]
            .as_array()?
            .iter()
            .map(|h| h["message_type"].as_str().unwrap_or_default().to_owned())
            .collect();
        types.iter().any(|t| t == last).then_some(types)
    })
}

/// Issue 40, item 5: with the store deleted (or truncated) the host started
/// empty without a word, and the blocked session could never be unblocked.
#[test]
fn a_lost_resolver_store_stops_the_start_until_a_new_one_is_asked_for() {
    let scratch = Scratch::new();
    scratch.install("billing", "orders", "orders");
    let host = RunningHost::start(&scratch, "");
    block_session(&host, "s-lost");
    let (code, _) = host.terminate();
    assert_eq!(code, Some(0));
    let store = scratch.path("data/resolver.db");
    let store_name = store.display().to_string();
    move_store_aside(&scratch);

    let refused = |run: &nimbus_blackbox_tests::Run, what: &str| {
        run.expect_code(1);
        let stderr = run.stderr();
        assert!(
            stderr.contains(&store_name)
                && stderr.contains(what)
                && stderr.contains("nimbus run --new-resolver-store"),
            "{stderr}"
        );
        assert!(!run.stdout().contains("API:"), "{}", run.stdout());
    };
    refused(&scratch.run_host_to_exit(), "is missing");
    std::fs::write(&store, b"").expect("truncate the store");
    refused(&scratch.run_host_to_exit(), "is empty");
    std::fs::remove_file(&store).expect("remove the empty store");

    // Starting anew refuses what the old store left beside it.
    let config = scratch.path("nimbus.toml");
    let wal = scratch.path("data/resolver.db-wal");
    std::fs::write(&wal, b"frames of the store moved aside").expect("leave a wal");
    let run = scratch.run_host_to_exit_with_args(&config, &["--new-resolver-store"]);
    run.expect_code(1);
    assert!(
        run.stderr().contains(&wal.display().to_string()),
        "{}",
        run.stderr()
    );
    std::fs::remove_file(&wal).expect("move the wal aside");

    let host = RunningHost::start_with_run_args(
        &scratch,
        &std::fs::read_to_string(&config).expect("the configuration"),
        &["--new-resolver-store"],
    );
    assert!(
        host.stderr()
            .contains("starting a new, empty Resolver store"),
        "{}",
        host.stderr()
    );
    assert_eq!(host.cli_json(&["events", "--json"]), serde_json::json!([]));
    let (code, _) = host.terminate();
    assert_eq!(code, Some(0));

    // The flag never replaces a store that is there.
    let run = scratch.run_host_to_exit_with_args(&config, &["--new-resolver-store"]);
    run.expect_code(1);
    assert!(
        run.stderr().contains(&store_name) && run.stderr().contains("holds one"),
        "{}",
        run.stderr()
    );
}

#[test]
fn a_blocker_the_resolver_lost_is_skipped_from_the_broker_state_and_its_session_drains() {
    let scratch = Scratch::new();
    scratch.install("billing", "orders", "orders");
    let host = RunningHost::start(&scratch, "");
    let (failed, parked) = block_session(&host, "s-lost");
    let blocker = id(&failed);
    let (code, _) = host.terminate();
    assert_eq!(code, Some(0));
    move_store_aside(&scratch);

    let host = RunningHost::start_with_run_args(
        &scratch,
        &nimbus_blackbox_tests::running::config_text(""),
        &["--new-resolver-store"],
    );
    assert_eq!(host.cli_json(&["events", "--json"]), serde_json::json!([]));
    assert_eq!(
        blocked_sessions(&host, "billing"),
        vec![("s-lost".to_owned(), blocker.clone(), 1)]
    );

    let skip = host.cli(&["skip", &blocker]);
    skip.expect_code(0);
    assert!(skip.stdout().contains("SkipRequest"), "{}", skip.stdout());
    assert!(
        skip.stderr()
            .contains("rebuilt from the broker's state of session 's-lost' at 'billing'"),
        "{}",
        skip.stderr()
    );
    host.wait_status("s-lost", &parked, "Completed");
    let failing = failed["request_message_id"].as_str().unwrap_or_default();
    let skipped = host.wait_status("s-lost", failing, "Skipped");
    assert_eq!(id(&skipped), blocker);
    assert!(blocked_sessions(&host, "billing").is_empty());

    // Its history says, once and first, where its record came from.
    let types = history_types(&host, &blocker, "SkipResponse");
    assert_eq!(types[0], "RebuiltFromBroker", "{types:?}");
    assert_eq!(
        types.iter().filter(|t| *t == "RebuiltFromBroker").count(),
        1,
        "{types:?}"
    );
    let shown = host.cli(&["event", &blocker]);
    shown.expect_code(0);
    assert!(
        shown.stdout().contains("RebuiltFromBroker")
            && shown
                .stdout()
                .contains("the Resolver had no record of this event"),
        "{}",
        shown.stdout()
    );
}

#[test]
fn blockers_the_resolver_lost_are_resubmitted_and_their_handoffs_settled_from_the_broker_state() {
    let scratch = Scratch::new();
    scratch.install("app", "swap", "swap-v1");
    scratch.install("billing", "orders", "orders");
    scratch.install("erp", "import", "erp-import");
    let host = RunningHost::start(&scratch, "");
    // A bug the next version fixes: resubmitted as it was, it completes.
    let buggy = publish(&host, "Swap", "s-swap", r#"{"Bug":true}"#);
    let swap_failed = host.wait_status("s-swap", &buggy, "Failed");
    let swap_parked = publish(&host, "Swap", "s-swap", "{}");
    host.wait_status("s-swap", &swap_parked, "Deferred");
    // An order only an edited payload fixes.
    let (order_failed, order_parked) = block_session(&host, "s-order");
    // Two imports handed off, each with an import parked behind it.
    let import = r#"{"ImportId":"imp-1","Entity":"Customers","Rows":10}"#;
    let mut handed = Vec::new();
    for session in ["s-erp-done", "s-erp-failed"] {
        let first = publish(&host, "ErpImportRequested", session, import);
        let pending = host.eventually("the import is handed off", || {
            let r = host.wait_status(session, &first, "Pending");
            (r["sub_status"] == "Handoff").then_some(r)
        });
        let next = publish(&host, "ErpImportRequested", session, import);
        host.wait_status(session, &next, "Deferred");
        handed.push((session, first, id(&pending), next));
    }
    let (code, _) = host.terminate();
    assert_eq!(code, Some(0));
    move_store_aside(&scratch);
    std::fs::copy(
        nimbus_blackbox_tests::guest("swap-v2"),
        scratch.path("handlers/app/swap.wasm"),
    )
    .expect("install the fixed version");

    let host = RunningHost::start_with_run_args(
        &scratch,
        &nimbus_blackbox_tests::running::config_text(""),
        &["--new-resolver-store"],
    );
    let sessions = host.cli_json(&["sessions", "--blocked", "--json"]);
    assert_eq!(sessions.as_array().map(Vec::len), Some(4), "{sessions:#}");

    // Resubmitted with the payload the broker kept.
    host.cli(&["resubmit", &id(&swap_failed)]).expect_code(0);
    host.wait_status("s-swap", &buggy, "Completed");
    host.wait_status("s-swap", &swap_parked, "Completed");
    let payload =
        host.event_json(&id(&swap_failed)).expect("recorded")["endpoints"][0]["record"]["payload"]
            .clone();
    assert_eq!(payload, r#"{"Bug":true}"#);

    // Resubmitted with an edited payload.
    let fixed = order("o-fail", false);
    host.cli(&["resubmit", &id(&order_failed), "--data", &fixed])
        .expect_code(0);
    let done = host.wait_status(
        "s-order",
        order_failed["request_message_id"]
            .as_str()
            .unwrap_or_default(),
        "Completed",
    );
    assert_eq!(id(&done), id(&order_failed));
    host.wait_status("s-order", &order_parked, "Completed");
    assert_eq!(
        history_types(&host, &id(&order_failed), "ResolutionResponse")[0],
        "RebuiltFromBroker"
    );

    // A handoff completed, and one failed, then skipped: each parked
    // import runs (and is handed off in its turn).
    let (session, first, pending, next) = &handed[0];
    host.cli(&[
        "handoff",
        "complete",
        pending,
        "--details",
        r#"{"Rows":10}"#,
    ])
    .expect_code(0);
    host.wait_status(session, first, "Completed");
    host.eventually("the parked import runs", || {
        let r = host.wait_status(session, next, "Pending");
        (r["sub_status"] == "Handoff").then_some(())
    });
    let (session, first, pending, next) = &handed[1];
    host.cli(&["handoff", "fail", pending, "--error", "DMF job failed"])
        .expect_code(0);
    host.wait_status(session, first, "Failed");
    host.cli(&["skip", pending]).expect_code(0);
    host.wait_status(session, first, "Skipped");
    host.eventually("the parked import runs", || {
        let r = host.wait_status(session, next, "Pending");
        (r["sub_status"] == "Handoff").then_some(())
    });
    assert_eq!(
        history_types(&host, pending, "SkipResponse")
            .iter()
            .filter(|t| *t == "RebuiltFromBroker")
            .count(),
        1
    );
}
