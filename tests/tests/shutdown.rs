//! Shutdown as SEMANTICS.md §8 promises it, through the `nimbus` binary: on
//! SIGTERM the host takes no new sessions, lets a handler in flight finish
//! within `engine.shutdown_grace` and settles it; a handler the grace cuts
//! off has no outcome, and its message is handled again after a restart.
//!
//! The `echo` guest logs a marker, then sleeps in WASI (a handler waiting on
//! a slow partner). A host started again on the same scratch area logs into
//! a fresh stderr file, so the marker there means the handler ran again.

use nimbus_blackbox_tests::Scratch;
use nimbus_blackbox_tests::running::{RunningHost, config_text};
use serde_json::{Value, json};

const MARKER: &str = "echo handler started";

/// An `Echo` payload that logs [`MARKER`] and then sleeps `sleep_ms`.
fn sleeper(sleep_ms: u64) -> String {
    json!({"Logs": [{"Level": "Info", "Message": MARKER}], "SleepMs": sleep_ms}).to_string()
}

fn publish(host: &RunningHost, session: &str, data: &str) -> String {
    let run = host.cli(&[
        "publish",
        "--event-type",
        "Echo",
        "--session",
        session,
        "--data",
        data,
    ]);
    run.expect_code(0);
    run.stdout().trim().to_owned()
}

/// The history's message types of the event recorded as `record`.
fn history_types(host: &RunningHost, record: &Value) -> Vec<String> {
    let id = record["event_id"].as_str().expect("event id");
    let event = host.cli_json(&["event", id, "--json"]);
    event["endpoints"][0]["history"]
        .as_array()
        .expect("history")
        .iter()
        .map(|h| h["message_type"].as_str().unwrap_or_default().to_owned())
        .collect()
}

fn wait_for_marker(host: &RunningHost) {
    host.eventually("the handler started", || {
        host.stderr().contains(MARKER).then_some(())
    });
}

#[test]
fn sigterm_lets_a_handler_in_flight_finish_and_settles_it_before_exit() {
    let scratch = Scratch::new();
    scratch.install("echoes", "echo", "echo");
    let host = RunningHost::start(&scratch, "");
    let id = publish(&host, "s-1", &sleeper(1_500));
    wait_for_marker(&host);

    let (code, _) = host.terminate();
    assert_eq!(code, Some(0));
    let log = std::fs::read_to_string(scratch.path("nimbus-run.stderr")).expect("stderr file");
    assert!(
        !log.contains("shutdown grace elapsed"),
        "the handler finished within the grace:\n{log}"
    );

    // Settled before exit: the host started again has nothing to run.
    let host = RunningHost::start(&scratch, "");
    let done = host.wait_status("s-1", &id, "Completed");
    assert_eq!(
        history_types(&host, &done),
        ["EventRequest", "ResolutionResponse"]
    );
    assert!(
        !host.stderr().contains(MARKER),
        "the handler ran again after the restart:\n{}",
        host.stderr()
    );
}

#[test]
fn a_handler_cut_off_by_the_shutdown_grace_settles_nothing_and_runs_again_after_restart() {
    let scratch = Scratch::new();
    scratch.install("echoes", "echo", "echo");
    let short_grace =
        config_text("").replace(r#"shutdown_grace = "10s""#, r#"shutdown_grace = "500ms""#);
    assert!(short_grace.contains("500ms"), "the grace is set");
    let host = RunningHost::start_with_config(&scratch, &short_grace);
    let id = publish(&host, "s-1", &sleeper(4_000));
    wait_for_marker(&host);

    let (code, _) = host.terminate();
    assert_eq!(code, Some(0));
    let log = std::fs::read_to_string(scratch.path("nimbus-run.stderr")).expect("stderr file");
    assert!(
        log.contains("shutdown grace elapsed"),
        "the handler outlived the grace:\n{log}"
    );

    // Nothing was settled: the message is delivered again and runs to its
    // only outcome.
    let host = RunningHost::start(&scratch, "");
    wait_for_marker(&host);
    let done = host.wait_status("s-1", &id, "Completed");
    assert_eq!(
        history_types(&host, &done),
        ["EventRequest", "ResolutionResponse"]
    );
}
