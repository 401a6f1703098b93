//! Times a handler or a configuration asks for past any calendar do not
//! break the host (issue 28): a handoff expected within u64::MAX ms and a
//! failure asking for a retry after u64::MAX ms are capped at 365 days,
//! run the handler once, and leave every operator command answering; a
//! `[retry]` delay past the cap is refused by `nimbus check`, naming the
//! key, instead of being accepted and failing at run time.

use nimbus_blackbox_tests::Scratch;
use nimbus_blackbox_tests::orders::{id, publish};
use nimbus_blackbox_tests::running::{RunningHost, config_text};

/// 365 days and a day of slack, in seconds: what a capped time may be from now.
const CAP_WITH_SLACK_SECS: u64 = 366 * 24 * 60 * 60;

/// Seconds from now until an RFC 3339 time the API returned.
fn seconds_until(time: &str) -> u64 {
    let at = std::process::Command::new("date")
        .args(["-u", "-d", time, "+%s"])
        .output()
        .expect("date");
    let at: u64 = String::from_utf8_lossy(&at.stdout)
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("not a time: {time}"));
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_secs();
    at.saturating_sub(now)
}

fn assert_no_panic(host: &RunningHost) {
    let log = host.stderr();
    assert!(!log.contains("panicked"), "the host panicked:\n{log}");
}

#[test]
fn a_handoff_expected_within_u64_max_ms_waits_once_and_the_operator_completes_it() {
    let scratch = Scratch::new();
    scratch.install("app", "echo", "echo");
    let host = RunningHost::start(&scratch, "");
    let waiting = publish(
        &host,
        "Echo",
        "s-forever",
        r#"{"Outcome":"PendingHandoff","Reason":"a job for ever","JobId":"job-1","ExpectedWithinMs":18446744073709551615}"#,
    );
    let parked = publish(&host, "Echo", "s-forever", r#"{"Outcome":"Completed"}"#);
    let handed = host.eventually("the event is handed off", || {
        let record = host.wait_status("s-forever", &waiting, "Pending");
        (record["sub_status"] == "Handoff").then_some(record)
    });
    let expected_by = handed["expected_by"]
        .as_str()
        .unwrap_or_else(|| panic!("an expected-by time: {handed:#}"));
    assert!(
        seconds_until(expected_by) <= CAP_WITH_SLACK_SECS,
        "expected by {expected_by}: capped at 365 days"
    );

    let sessions = host.cli_json(&["sessions", "--blocked", "--json"]);
    assert_eq!(
        sessions[0]["blocker_status"], "Pending/Handoff",
        "{sessions:#}"
    );
    let shown = host.cli(&["event", &id(&handed)]);
    shown.expect_code(0);
    assert!(shown.stdout().contains("job-1"), "{}", shown.stdout());
    // The handler ran once: one response recorded, not a redelivery loop.
    assert!(
        host.metrics()
            .contains("nimbus_handler_processing_seconds_count{endpoint=\"app\"} 1\n"),
        "{}",
        host.metrics()
    );

    host.cli(&["handoff", "complete", &id(&handed)])
        .expect_code(0);
    host.wait_status("s-forever", &waiting, "Completed");
    host.wait_status("s-forever", &parked, "Completed");
    assert_no_panic(&host);
    let (code, _) = host.terminate();
    assert_eq!(code, Some(0));
}

#[test]
fn a_failure_asking_for_a_retry_after_u64_max_ms_leaves_the_api_answering() {
    let scratch = Scratch::new();
    scratch.install("app", "echo", "echo");
    let host = RunningHost::start(
        &scratch,
        "[retry.default]\nmax_retries = 2\nbase_delay = \"1s\"\n",
    );
    let failing = publish(
        &host,
        "Echo",
        "s-later",
        r#"{"Outcome":"Failed","ErrorType":"Later","RetryAfterMs":18446744073709551615}"#,
    );
    let failed = host.wait_status("s-later", &failing, "Failed");
    let sessions = host.eventually("the retry is scheduled", || {
        let sessions = host.cli_json(&["sessions", "--blocked", "--json"]);
        (sessions[0]["awaits_retry"] == true).then_some(sessions)
    });
    let retry_at = sessions[0]["retry_at"]
        .as_str()
        .unwrap_or_else(|| panic!("a retry time: {sessions:#}"));
    assert!(
        seconds_until(retry_at) <= CAP_WITH_SLACK_SECS,
        "retry at {retry_at}: capped at 365 days"
    );
    let event = host.cli_json(&["event", &id(&failed), "--json"]);
    assert_eq!(event["endpoints"][0]["retry_at"], retry_at, "{event:#}");
    host.cli(&["events", "--session", "s-later"]).expect_code(0);

    // The operator does not wait a year: skipping unblocks the session.
    host.cli(&["skip", &id(&failed)]).expect_code(0);
    host.wait_status("s-later", &failing, "Skipped");
    let after = publish(&host, "Echo", "s-later", r#"{"Outcome":"Completed"}"#);
    host.wait_status("s-later", &after, "Completed");
    assert_no_panic(&host);
    let (code, _) = host.terminate();
    assert_eq!(code, Some(0));
}

#[test]
fn check_refuses_a_retry_delay_past_the_cap_naming_the_key() {
    let scratch = Scratch::new();
    let config = config_text("[retry.default]\nmax_retries = 3\nbase_delay = \"3000000d\"\n");
    let path = scratch.write("nimbus.toml", config.as_bytes());
    let check = scratch.run_raw(&["check", "--config", path.to_str().expect("utf-8 path")]);
    check.expect_code(1);
    assert!(
        check.stderr().contains("retry.default.base_delay")
            && check.stderr().contains("over the maximum"),
        "{}",
        check.stderr()
    );
}
