//! `nimbus invoke`: one event through the sandbox, printed as JSON.

use nimbus_blackbox_tests::Scratch;

const ORDER: &str = r#"{"OrderId":"o-1001","Customer":"acme","Total":150.0,"Lines":[{"Sku":"A-1","Quantity":3,"UnitPrice":50.0}]}"#;

fn examples() -> Scratch {
    let scratch = Scratch::new();
    scratch.install("billing", "orders", "orders");
    scratch.install("billing", "notifier", "notifier");
    scratch.install("erp", "erp-import", "erp-import");
    scratch
}

/// [`invoke`] for a handler that might not end: killed, and the test
/// failed, after a minute.
fn invoke_within_a_minute(scratch: &Scratch, extra: &[&str]) -> nimbus_blackbox_tests::Run {
    let handlers = scratch.handlers();
    let mut args = vec!["invoke", "--handlers", handlers.to_str().expect("utf-8")];
    args.extend_from_slice(extra);
    scratch.run_within(&args, std::time::Duration::from_secs(60))
}

fn invoke(scratch: &Scratch, extra: &[&str]) -> nimbus_blackbox_tests::Run {
    let handlers = scratch.handlers();
    let mut args = vec!["invoke", "--handlers", handlers.to_str().expect("utf-8")];
    args.extend_from_slice(extra);
    scratch.run(&args)
}

#[test]
fn a_completed_event_prints_the_outcome_version_and_logs() {
    let scratch = examples();
    let run = invoke(
        &scratch,
        &[
            "--event-type",
            "OrderPlaced",
            "--data",
            ORDER,
            "--session",
            "o-1001",
        ],
    );
    run.expect_code(0);
    let json = run.json();
    assert_eq!(json["result"]["status"], "completed", "{json:#}");
    assert_eq!(json["endpoint"], "billing");
    assert_eq!(json["handler"], "orders");
    assert!(
        json["version"]
            .as_str()
            .is_some_and(|v| v.starts_with("sha256:"))
    );
    assert_eq!(json["follow_ups"], serde_json::json!([]));
    let logs = json["logs"].as_array().expect("logs");
    assert!(
        logs.iter()
            .any(|l| l["message"].as_str().is_some_and(|m| m.contains("o-1001"))),
        "{json:#}"
    );
}

#[test]
fn a_failing_event_prints_the_error_with_all_fields_and_exits_3() {
    let scratch = examples();
    let failing = ORDER.replace("\"Total\"", "\"Fail\":true,\"Total\"");
    let run = invoke(
        &scratch,
        &["--event-type", "OrderPlaced", "--data", &failing],
    );
    run.expect_code(3);
    let result = &run.json()["result"];
    assert_eq!(result["status"], "error");
    assert_eq!(result["kind"], "failed");
    assert_eq!(result["error_type"], "OrderRejected");
    assert!(
        result["message"]
            .as_str()
            .is_some_and(|m| m.contains("o-1001"))
    );
    assert!(result.get("retry_after_ms").is_some(), "{result:#}");
}

#[test]
fn a_follow_up_event_is_printed_not_sent() {
    let scratch = examples();
    let shipped = r#"{"OrderId":"o-1","Customer":"acme","Carrier":"DHL","TrackingNumber":"JD1"}"#;
    let run = invoke(
        &scratch,
        &[
            "--event-type",
            "OrderShipped",
            "--data",
            shipped,
            "--event-id",
            "evt-7",
        ],
    );
    run.expect_code(0);
    let json = run.json();
    let follow_ups = json["follow_ups"].as_array().expect("follow-ups");
    assert_eq!(follow_ups.len(), 1, "{json:#}");
    assert_eq!(follow_ups[0]["event_type"], "CustomerNotified");
    assert_eq!(follow_ups[0]["message_id"], "evt-7:customer-notified");
    let payload: serde_json::Value =
        serde_json::from_str(follow_ups[0]["payload"].as_str().expect("payload")).expect("JSON");
    assert!(payload.is_object());
}

/// `--property` gives the handler user properties, as a publish does; a
/// NimBus envelope name is refused, as the API refuses it.
#[test]
fn properties_given_reach_the_handler() {
    let scratch = Scratch::new();
    scratch.install("ep", "echo", "echo");
    let run = invoke(
        &scratch,
        &[
            "--event-type",
            "Echo",
            "--data",
            r#"{"Describe":true}"#,
            "--property",
            "Tenant=acme",
            "--property",
            "Region=eu=west",
        ],
    );
    run.expect_code(0);
    let json = run.json();
    let described = json["follow_ups"]
        .as_array()
        .and_then(|f| f.iter().find(|f| f["event_type"] == "EchoDescribed"))
        .unwrap_or_else(|| panic!("no EchoDescribed follow-up: {json:#}"));
    let seen: serde_json::Value =
        serde_json::from_str(described["payload"].as_str().expect("payload")).expect("JSON");
    assert_eq!(
        seen["Properties"],
        serde_json::json!({"Tenant": "acme", "Region": "eu=west"}),
        "{seen:#}"
    );

    let refused = invoke(
        &scratch,
        &[
            "--event-type",
            "Echo",
            "--data",
            "{}",
            "--property",
            "EventId=x",
        ],
    );
    refused.expect_code(1);
    assert!(
        refused
            .stderr()
            .contains("--property EventId: a NimBus envelope property"),
        "{}",
        refused.stderr()
    );

    // A component's own path is not a handlers directory: said how to lay one out.
    let component = scratch.handlers().join("ep/echo.wasm");
    let file = scratch.run_raw(&[
        "invoke",
        "--handlers",
        component.to_str().expect("utf-8"),
        "--event-type",
        "Echo",
        "--data",
        "{}",
    ]);
    file.expect_code(1);
    assert!(
        file.stderr()
            .contains("is a file: give the handlers directory it is in"),
        "{}",
        file.stderr()
    );
}

/// What `echo`'s `EchoDescribed` follow-up says the handler saw.
fn described(run: &nimbus_blackbox_tests::Run) -> serde_json::Value {
    let json = run.json();
    let described = json["follow_ups"]
        .as_array()
        .and_then(|f| f.iter().find(|f| f["event_type"] == "EchoDescribed"))
        .unwrap_or_else(|| panic!("no EchoDescribed follow-up: {json:#}"));
    serde_json::from_str(described["payload"].as_str().expect("payload")).expect("JSON")
}

#[test]
fn a_redelivery_or_a_resubmission_can_be_rehearsed() {
    let scratch = Scratch::new();
    scratch.install("ep", "echo", "echo");
    let script = r#"{"Describe":true,"TransientBeforeDelivery":2}"#;

    let first = invoke(&scratch, &["--event-type", "Echo", "--data", script]);
    first.expect_code(3);
    assert_eq!(first.json()["result"]["error_type"], "NotYet");

    let again = invoke(
        &scratch,
        &[
            "--event-type",
            "Echo",
            "--data",
            script,
            "--delivery-count",
            "2",
            "--message-type",
            "ResubmissionRequest",
        ],
    );
    again.expect_code(0);
    let seen = described(&again);
    assert_eq!(seen["DeliveryCount"], 2, "{seen:#}");
    assert_eq!(seen["MessageType"], "ResubmissionRequest");
    assert_eq!(seen["From"], "Manager");

    let zero = invoke(
        &scratch,
        &[
            "--event-type",
            "Echo",
            "--data",
            "{}",
            "--delivery-count",
            "0",
        ],
    );
    zero.expect_code(2);
    assert!(
        zero.stderr().contains("--delivery-count"),
        "{}",
        zero.stderr()
    );
}

#[test]
fn a_pending_handoff_prints_reason_job_id_and_expected_by() {
    let scratch = examples();
    scratch.write(
        "handlers/erp/erp-import.toml",
        b"[config]\nexpected_minutes = \"5\"\n",
    );
    let data = scratch.write(
        "import.json",
        br#"{"ImportId":"i-1","Entity":"Customers","Rows":42}"#,
    );
    let data = format!("@{}", data.display());
    let run = invoke(
        &scratch,
        &[
            "--event-type",
            "ErpImportRequested",
            "--data",
            &data,
            "--event-id",
            "e-9",
        ],
    );
    run.expect_code(0);
    let result = &run.json()["result"];
    assert_eq!(result["status"], "pending_handoff", "{result:#}");
    assert_eq!(result["external_job_id"], "dmf-e-9");
    assert_eq!(result["expected_by_ms"], 5 * 60 * 1000);
    assert!(result["reason"].as_str().is_some_and(|r| r.contains("42")));
}

#[test]
fn data_that_is_not_json_is_refused_before_running_anything() {
    let scratch = examples();
    let run = invoke(
        &scratch,
        &["--event-type", "OrderPlaced", "--data", "{not json"],
    );
    run.expect_code(1);
    assert!(
        run.stderr().contains("--data is not valid JSON"),
        "{}",
        run.stderr()
    );
    assert!(run.stdout().is_empty());
}

#[test]
fn a_missing_data_file_is_a_clear_error() {
    let scratch = examples();
    let run = invoke(
        &scratch,
        &[
            "--event-type",
            "OrderPlaced",
            "--data",
            "@/no/such/payload.json",
        ],
    );
    run.expect_code(1);
    assert!(
        run.stderr().contains("/no/such/payload.json"),
        "{}",
        run.stderr()
    );
}

#[test]
fn an_unknown_event_type_is_a_clear_error_listing_what_is_known() {
    let scratch = examples();
    let run = invoke(&scratch, &["--event-type", "InvoicePaid", "--data", "{}"]);
    run.expect_code(1);
    let stderr = run.stderr();
    assert!(
        stderr.contains("no handler for event type `InvoicePaid`"),
        "{stderr}"
    );
    assert!(stderr.contains("billing/OrderPlaced"), "{stderr}");
}

#[test]
fn an_event_type_in_several_endpoints_needs_endpoint() {
    let scratch = examples();
    scratch.install("warehouse", "orders", "orders");
    let run = invoke(&scratch, &["--event-type", "OrderPlaced", "--data", ORDER]);
    run.expect_code(1);
    assert!(run.stderr().contains("--endpoint"), "{}", run.stderr());
    let run = invoke(
        &scratch,
        &[
            "--event-type",
            "OrderPlaced",
            "--data",
            ORDER,
            "--endpoint",
            "warehouse",
        ],
    );
    run.expect_code(0);
    assert_eq!(run.json()["endpoint"], "warehouse");
    let typo = invoke(
        &scratch,
        &[
            "--event-type",
            "OrderPlaced",
            "--data",
            ORDER,
            "--endpoint",
            "warehose",
        ],
    );
    typo.expect_code(1);
    assert!(
        typo.stderr()
            .contains("no endpoint `warehose` in the handlers directory")
            && typo.stderr().contains("warehouse"),
        "{}",
        typo.stderr()
    );
}

#[test]
fn a_trapping_handler_is_reported_not_fatal() {
    let scratch = Scratch::new();
    scratch.install("ep", "panicker", "panicker");
    let run = invoke(&scratch, &["--event-type", "Panic", "--data", "{}"]);
    run.expect_code(3);
    let result = &run.json()["result"];
    assert_eq!(result["kind"], "failed");
    assert_eq!(result["error_type"], "Panic");
}

/// A handler waiting inside a WASI call runs no wasm for an epoch check to
/// stop; `invoke` still ends it at the deadline, as the host does.
#[test]
fn a_handler_asleep_in_a_wasi_call_times_out_at_its_deadline() {
    let scratch = Scratch::new();
    scratch.install("ep", "endless", "endless-loop");
    scratch.write("handlers/ep/endless.toml", b"[limits]\ntimeout = \"1s\"\n");
    let run = invoke_within_a_minute(&scratch, &["--event-type", "Sleep", "--data", "{}"]);
    run.expect_code(3);
    let result = &run.json()["result"];
    assert_eq!(result["error_type"], "Timeout", "{result:#}");
}

#[test]
fn every_command_has_help() {
    let scratch = Scratch::new();
    for args in [
        vec!["--help"],
        vec!["handlers", "--help"],
        vec!["handlers", "check", "--help"],
        vec!["handlers", "list", "--help"],
        vec!["invoke", "--help"],
    ] {
        let run = scratch.run_raw(&args);
        run.expect_code(0);
        assert!(
            run.stdout().contains("Usage:"),
            "{args:?}: {}",
            run.stdout()
        );
    }
    let run = scratch.run_raw(&["invoke"]);
    run.expect_code(2);
    assert!(run.stderr().contains("--handlers"), "{}", run.stderr());
}

/// `--config` gives `invoke` the host's `[sandbox]` defaults: the deadline
/// a handler meets here is the one it meets under `nimbus run`.
#[test]
fn the_hosts_sandbox_defaults_apply_with_config() {
    let scratch = Scratch::new();
    scratch.install("ep", "endless", "endless-loop");
    let config = scratch.write("nimbus.toml", b"[sandbox]\ntimeout = \"1s\"\n");
    let run = invoke_within_a_minute(
        &scratch,
        &[
            "--config",
            config.to_str().expect("utf-8"),
            "--event-type",
            "Loop",
            "--data",
            "{}",
        ],
    );
    run.expect_code(3);
    let result = &run.json()["result"];
    assert_eq!(result["error_type"], "Timeout", "{result:#}");
    assert!(
        result["message"]
            .as_str()
            .is_some_and(|m| m.contains("deadline of 1s")),
        "{result:#}"
    );
}
