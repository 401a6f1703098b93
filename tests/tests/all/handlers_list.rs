//! `nimbus handlers list --handlers DIR`.

use nimbus_blackbox_tests::Scratch;

#[test]
fn list_shows_each_endpoint_handler_version_and_status_as_json() {
    let scratch = Scratch::new();
    scratch.install("billing", "orders", "orders");
    scratch.install("warehouse", "orders", "orders");
    scratch.write("handlers/billing/broken.wasm", b"not a component");
    let handlers = scratch.handlers();
    let run = scratch.run(&[
        "handlers",
        "list",
        "--handlers",
        handlers.to_str().expect("utf-8"),
        "--json",
    ]);
    // Listed all the same, but a pre-check that fails: one does not load.
    run.expect_code(1);
    assert!(
        run.stderr().contains("1 handler in") && run.stderr().contains("does not load"),
        "{}",
        run.stderr()
    );
    // The load error is in the listing, not said again as a log line.
    assert!(
        !run.stderr().contains("not a valid handler component"),
        "{}",
        run.stderr()
    );
    let json = run.json();
    let handlers = json["handlers"].as_array().expect("handlers");
    assert_eq!(handlers.len(), 3, "{json:#}");
    let find = |endpoint: &str, handler: &str| {
        handlers
            .iter()
            .find(|h| h["endpoint"] == endpoint && h["handler"] == handler)
            .unwrap_or_else(|| panic!("{endpoint}/{handler} listed: {json:#}"))
    };
    let orders = find("billing", "orders");
    assert_eq!(orders["status"], "serving");
    assert_eq!(
        orders["serving"]["event_types"],
        serde_json::json!(["OrderPlaced"])
    );
    // Loaded by this command, not swapped in by a host: no swap time.
    assert!(orders.get("last_swap_ms").is_none(), "{orders}");
    assert_eq!(find("warehouse", "orders")["status"], "serving");
    let broken = find("billing", "broken");
    assert_eq!(broken["status"], "failed");
    assert!(broken["serving"].is_null());
    assert!(
        broken["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("not a valid handler component")),
        "{broken:#}"
    );
}

#[test]
fn list_prints_text_and_reports_layout_problems() {
    let scratch = Scratch::new();
    scratch.install("billing", "noop", "noop");
    scratch.write("handlers/stray.wasm", b"x");
    let handlers = scratch.handlers();
    let run = scratch.run(&[
        "handlers",
        "list",
        "--handlers",
        handlers.to_str().expect("utf-8"),
    ]);
    run.expect_code(0);
    let text = run.stdout();
    assert!(text.contains("billing/noop  serving"), "{text}");
    assert!(text.contains("event types: Noop"), "{text}");
    assert!(
        text.contains("problem:") && text.contains("stray.wasm"),
        "{text}"
    );
    assert!(!run.stderr().contains("stray.wasm"), "{}", run.stderr());
}

/// Components straight under the handlers directory (no endpoint
/// directory): nothing would serve, so the pre-check fails.
#[test]
fn a_directory_where_nothing_loads_fails_the_check() {
    let scratch = Scratch::new();
    scratch.install("billing", "noop", "noop");
    let endpoint = scratch.handlers().join("billing");
    let run = scratch.run(&[
        "handlers",
        "list",
        "--handlers",
        endpoint.to_str().expect("utf-8"),
    ]);
    run.expect_code(1);
    assert!(
        run.stderr().contains("no handler in") && run.stdout().contains("noop.wasm"),
        "{}\n{}",
        run.stdout(),
        run.stderr()
    );
}

#[test]
fn a_missing_handlers_directory_is_a_clear_error() {
    let scratch = Scratch::new();
    let missing = scratch.path("no-such-dir");
    let run = scratch.run(&[
        "handlers",
        "list",
        "--handlers",
        missing.to_str().expect("utf-8"),
    ]);
    run.expect_code(1);
    assert!(run.stderr().contains("no-such-dir"), "{}", run.stderr());
    // The OS's reason once, not once per link of the error chain.
    assert_eq!(
        run.stderr().matches("No such file or directory").count(),
        1,
        "{}",
        run.stderr()
    );
}
