//! Shutdown as SEMANTICS.md §8 promises it, through the `nimbus` binary: on
//! SIGTERM the host takes no new sessions, lets a handler in flight finish
//! within `engine.shutdown_grace` and settles it; a handler the grace cuts
//! off has no outcome, and its message is handled again after a restart.
//!
//! The `endless-loop` guest's `Sleep` logs a marker, then waits in WASI (a
//! handler waiting on a slow partner) until the sandbox's deadline ends it
//! as `Failed`/`Timeout`: that deadline is how long the handler runs. A host
//! started again on the same scratch area logs into a fresh stderr file, so
//! the marker there means the handler ran again.

use nimbus_blackbox_tests::Scratch;
use nimbus_blackbox_tests::running::{RunningHost, config_text};
use serde_json::Value;

const MARKER: &str = "endless-loop: going to sleep";

/// The test configuration with the handler's deadline and the shutdown
/// grace given.
fn config(handler_deadline: &str, grace: &str) -> String {
    let text = config_text("")
        .replace(
            r#"timeout = "20s""#,
            &format!("timeout = \"{handler_deadline}\""),
        )
        .replace(
            r#"shutdown_grace = "10s""#,
            &format!("shutdown_grace = \"{grace}\""),
        );
    assert!(
        text.contains(handler_deadline) && text.contains(grace),
        "the settings are in place: {text}"
    );
    text
}

fn publish_sleep(host: &RunningHost) -> String {
    nimbus_blackbox_tests::orders::publish(host, "Sleep", "s-1", "{}")
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

/// SIGTERM; the host exits 0. Returns what it logged.
fn stop(host: RunningHost, scratch: &Scratch) -> String {
    let (code, _) = host.terminate();
    assert_eq!(code, Some(0));
    std::fs::read_to_string(scratch.path("nimbus-run.stderr")).expect("the host's stderr file")
}

#[test]
fn sigterm_lets_a_handler_in_flight_finish_and_settles_it_before_exit() {
    let scratch = Scratch::new();
    scratch.install("sleepers", "endless", "endless_loop");
    // The handler ends (at its deadline) well within the grace.
    let settings = config("1500ms", "20s");
    let host = RunningHost::start_with_config(&scratch, &settings);
    let id = publish_sleep(&host);
    wait_for_marker(&host);

    let log = stop(host, &scratch);
    assert!(
        !log.contains("shutdown grace elapsed"),
        "the handler finished within the grace:\n{log}"
    );

    // Settled before exit: the host started again has nothing to run.
    let host = RunningHost::start_with_config(&scratch, &settings);
    let failed = host.wait_status("s-1", &id, "Failed");
    assert_eq!(failed["error_type"], "Timeout");
    assert_eq!(
        history_types(&host, &failed),
        ["EventRequest", "ErrorResponse"]
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
    scratch.install("sleepers", "endless", "endless_loop");
    let host = RunningHost::start_with_config(&scratch, &config("20s", "500ms"));
    let id = publish_sleep(&host);
    wait_for_marker(&host);

    let log = stop(host, &scratch);
    assert!(
        log.contains("shutdown grace elapsed with 1 handler call(s) still running"),
        "the handler outlived the grace, and the log counts it:\n{log}"
    );

    // Nothing was settled: the message is delivered again and runs to its
    // only outcome.
    let host = RunningHost::start_with_config(&scratch, &config("1500ms", "20s"));
    wait_for_marker(&host);
    let failed = host.wait_status("s-1", &id, "Failed");
    assert_eq!(failed["error_type"], "Timeout");
    assert_eq!(
        history_types(&host, &failed),
        ["EventRequest", "ErrorResponse"]
    );
}

/// A second SIGTERM during the drain stops the host at once, as a killed
/// process would: the handler in flight settles nothing and runs again
/// after a restart.
#[test]
fn a_second_sigterm_stops_at_once_and_the_event_in_flight_runs_again() {
    let scratch = Scratch::new();
    scratch.install("sleepers", "endless", "endless_loop");
    let host = RunningHost::start_with_config(&scratch, &config("20s", "60s"));
    let id = publish_sleep(&host);
    wait_for_marker(&host);

    host.sigterm();
    host.eventually("the drain began", || {
        host.stderr()
            .contains("SIGTERM again stops at once")
            .then_some(())
    });
    host.sigterm();
    let stderr = scratch.path("nimbus-run.stderr");
    let (code, _) = host.wait_exit();
    assert_eq!(code, Some(130));
    let log = std::fs::read_to_string(stderr).expect("the host's stderr file");
    assert!(log.contains("SIGTERM again: stopping now"), "{log}");

    let host = RunningHost::start_with_config(&scratch, &config("1500ms", "20s"));
    wait_for_marker(&host);
    let failed = host.wait_status("s-1", &id, "Failed");
    assert_eq!(failed["error_type"], "Timeout");
}
