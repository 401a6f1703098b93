//! Operating a running host through the `nimbus` binary only: `nimbus run`
//! on a scratch directory with a free port, then the client commands
//! (publish, events, event, sessions, skip, resubmit, handoff, handlers,
//! dlq) against it. Every host is killed when its test ends, pass or fail.
//! Waits poll with a generous deadline; nothing asserts a duration.

use std::process::Command;

use nimbus_blackbox_tests::Scratch;
use nimbus_blackbox_tests::orders::{id, order, publish, publish_run};
use nimbus_blackbox_tests::running::RunningHost;
use serde_json::json;

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

#[test]
fn a_published_event_completes_a_failed_one_blocks_until_skipped_and_sigterm_exits_cleanly() {
    let scratch = Scratch::new();
    scratch.install("billing", "orders", "orders");
    let host = RunningHost::start(&scratch, "");

    // The host's handlers, as the API reports them.
    let handlers = host.cli_json(&["handlers", "--json"]);
    let orders = &handlers["handlers"][0];
    assert_eq!(orders["endpoint"], "billing");
    assert_eq!(orders["event_types"], json!(["OrderPlaced"]));
    let version = orders["version"]
        .as_str()
        .expect("a version serves")
        .to_owned();
    let table = host.cli(&["handlers"]);
    table.expect_code(0);
    assert!(table.stdout().contains("billing") && table.stdout().contains("OrderPlaced"));

    // Publish, watch it complete, read it back with its history.
    let ok = publish(&host, "OrderPlaced", "s-ok", &order("o-1", false));
    let done = host.wait_status("s-ok", &ok, "Completed");
    assert_eq!(done["handler_version"], version.as_str());
    let event = host.cli_json(&["event", &id(&done), "--json"]);
    let history = event["endpoints"][0]["history"]
        .as_array()
        .expect("history");
    assert!(
        history.iter().any(|h| h["status"] == "Completed"),
        "{history:#?}"
    );
    let text = host.cli(&["event", &id(&done)]);
    text.expect_code(0);
    assert!(text.stdout().contains("Completed"), "{}", text.stdout());
    assert!(text.stdout().contains(&version), "{}", text.stdout());
    let listed = host.cli(&["events", "--endpoint", "billing"]);
    listed.expect_code(0);
    assert!(listed.stdout().contains(&id(&done)), "{}", listed.stdout());
    // The message id `publish` printed finds the event too.
    let by_message = host.cli(&["event", &ok]);
    by_message.expect_code(0);
    assert!(
        by_message
            .stdout()
            .contains(&format!("message {ok} belongs to 1 event"))
            && by_message.stdout().contains(&id(&done)),
        "{}",
        by_message.stdout()
    );
    let typo = host.cli(&["events", "--endpoint", "biling"]);
    typo.expect_code(1);
    assert!(
        typo.stderr().contains("no endpoint 'biling'") && !typo.stderr().contains("did you mean"),
        "{}",
        typo.stderr()
    );
    let case = host.cli(&["events", "--endpoint", "Billing"]);
    case.expect_code(1);
    assert!(
        case.stderr().contains("did you mean 'billing'?"),
        "{}",
        case.stderr()
    );

    // A failing event blocks its session; the next one is parked behind it.
    let failing = publish(&host, "OrderPlaced", "s-block", &order("o-2", true));
    let failed = host.wait_status("s-block", &failing, "Failed");
    assert_eq!(failed["error_type"], "OrderRejected");
    let parked = publish(&host, "OrderPlaced", "s-block", &order("o-3", false));
    host.wait_status("s-block", &parked, "Deferred");
    assert_eq!(
        blocked_sessions(&host, "billing"),
        vec![("s-block".to_owned(), id(&failed), 1)]
    );
    // The log at its default level (warn) tells the operator on call what
    // blocked which session, and why.
    let log = host.stderr();
    assert!(
        log.lines().any(|line| line.contains("WARN")
            && line.contains("no retry policy applies: its session is blocked")
            && line.contains("session=s-block")
            && line.contains(&id(&failed))
            && line.contains("error_type=OrderRejected")),
        "{log}"
    );
    let sessions = host.cli(&["sessions", "--blocked"]);
    sessions.expect_code(0);
    assert!(
        sessions
            .stdout()
            .contains(&format!("{} (Failed, no retry)", id(&failed))),
        "{}",
        sessions.stdout()
    );

    // Skip: the failed event is Skipped and the parked one runs.
    let skip = host.cli(&["skip", &id(&failed)]);
    skip.expect_code(0);
    assert!(skip.stdout().contains("SkipRequest"), "{}", skip.stdout());
    host.wait_status("s-block", &failing, "Skipped");
    host.wait_status("s-block", &parked, "Completed");
    assert!(blocked_sessions(&host, "billing").is_empty());
    let none = host.cli(&["sessions", "--endpoint", "billing", "--blocked"]);
    none.expect_code(0);
    assert_eq!(none.stdout(), "no session is blocked\n");

    // An API refusal is a clear message and a non-zero exit.
    let unknown = host.cli(&["skip", "no-such-event"]);
    unknown.expect_code(1);
    assert!(
        unknown.stderr().contains("no event 'no-such-event'"),
        "{}",
        unknown.stderr()
    );
    let bad_status = host.cli(&["events", "--status", "Done"]);
    bad_status.expect_code(1);
    assert!(
        bad_status.stderr().contains("unknown status 'Done'"),
        "{}",
        bad_status.stderr()
    );
    let bad_data = host.cli(&["publish", "--event-type", "OrderPlaced", "--data", "{oops"]);
    bad_data.expect_code(1);
    assert!(
        bad_data.stderr().contains("--data is not valid JSON"),
        "{}",
        bad_data.stderr()
    );
    let dlq = host.cli_json(&["dlq", "list", "--endpoint", "billing", "--json"]);
    assert_eq!(dlq, json!([]));

    // SIGTERM: the host drains and exits 0.
    let (code, _) = host.terminate();
    assert_eq!(code, Some(0));
}

#[test]
fn a_failed_event_is_fixed_by_dropping_in_a_new_version_and_resubmitting() {
    let scratch = Scratch::new();
    scratch.install("app", "swap", "swap-v1");
    let host = RunningHost::start(&scratch, "");
    let v1 = host.cli_json(&["handlers", "--json"])["handlers"][0]["version"].clone();

    let buggy = publish(&host, "Swap", "s-swap", r#"{"Bug":true}"#);
    let failed = host.wait_status("s-swap", &buggy, "Failed");
    assert_eq!(failed["error_type"], "SwapV1Bug");
    assert_eq!(failed["handler_version"], v1);
    let behind = publish(&host, "Swap", "s-swap", "{}");
    host.wait_status("s-swap", &behind, "Deferred");

    // Drop in the fixed version (write beside, then rename: never half a file).
    let partial = scratch.path("handlers/app/.swap.wasm.partial");
    std::fs::copy(nimbus_blackbox_tests::guest("swap-v2"), &partial).expect("copy v2");
    std::fs::rename(&partial, scratch.path("handlers/app/swap.wasm")).expect("swap in v2");
    let v2 = host.eventually("the fixed version serves", || {
        let version = host.cli_json(&["handlers", "--json"])["handlers"][0]["version"].clone();
        (version != v1 && !version.is_null()).then_some(version)
    });

    let resubmit = host.cli(&["resubmit", &id(&failed)]);
    resubmit.expect_code(0);
    assert!(
        resubmit.stdout().contains("ResubmissionRequest"),
        "{}",
        resubmit.stdout()
    );
    let fixed = host.wait_status("s-swap", &buggy, "Completed");
    assert_eq!(fixed["handler_version"], v2);
    let after = host.wait_status("s-swap", &behind, "Completed");
    assert_eq!(after["handler_version"], v2);
}

/// What each history entry of `event_id` said about a handoff, by message
/// type, once the entry of `awaited` is recorded (the Resolver may record
/// the request's copy after the engine's answer to it).
fn handoff_history(host: &RunningHost, event_id: &str, awaited: &str) -> serde_json::Value {
    host.eventually(&format!("{awaited} is in the history"), || {
        let event = host.event_json(event_id)?;
        let history = event["endpoints"][0]["history"].as_array()?.clone();
        history
            .iter()
            .any(|h| h["message_type"] == awaited)
            .then(|| {
                history
                    .iter()
                    .map(|h| (text_of(&h["message_type"]), h["handoff"].clone()))
                    .collect::<serde_json::Map<_, _>>()
                    .into()
            })
    })
}

fn text_of(value: &serde_json::Value) -> String {
    value.as_str().unwrap_or_default().to_owned()
}

#[test]
fn a_handed_off_event_is_completed_or_failed_by_the_operator() {
    let scratch = Scratch::new();
    scratch.install("erp", "import", "erp-import");
    let host = RunningHost::start(&scratch, "");
    let import = r#"{"ImportId":"imp-1","Entity":"Customers","Rows":10}"#;

    let first = publish(&host, "ErpImportRequested", "s-erp-1", import);
    let handed = host.eventually("the import is handed off", || {
        let r = host.wait_status("s-erp-1", &first, "Pending");
        (r["sub_status"] == "Handoff").then_some(r)
    });
    // Its session says why it is blocked: a handoff, not a failure.
    let sessions = host.cli_json(&["sessions", "--blocked", "--json"]);
    assert_eq!(
        sessions[0]["blocked_by"], handed["event_id"],
        "{sessions:#}"
    );
    assert_eq!(
        sessions[0]["blocker_status"], "Pending/Handoff",
        "{sessions:#}"
    );
    // The operator finds what waits on an external job by its status.
    let waiting = host.cli_json(&["events", "--status", "Pending/Handoff", "--json"]);
    assert_eq!(
        waiting
            .as_array()
            .map(|w| w.iter().map(|r| r["event_id"].clone()).collect::<Vec<_>>()),
        Some(vec![handed["event_id"].clone()]),
        "{waiting:#}"
    );
    // A handoff operation on the wrong event is refused with the reason.
    let wrong = host.cli(&["handoff", "fail", "no-such-event", "--error", "x"]);
    wrong.expect_code(1);
    assert!(
        wrong.stderr().contains("no-such-event"),
        "{}",
        wrong.stderr()
    );
    // With --json, what was sent, for a script.
    let complete = host.cli_json(&[
        "handoff",
        "complete",
        &id(&handed),
        "--details",
        r#"{"RowsImported":10,"Total":1.10}"#,
        "--json",
    ]);
    assert_eq!(
        complete["message_type"], "HandoffCompletedRequest",
        "{complete:#}"
    );
    assert_eq!(complete["event_id"], handed["event_id"], "{complete:#}");
    let done = host.wait_status("s-erp-1", &first, "Completed");
    // The event's handoff fields clear once it settles; its history keeps
    // the job the handler named and the details the operator sent.
    let job = handed["external_job_id"]
        .as_str()
        .expect("a job id while handed off")
        .to_owned();
    assert!(done["external_job_id"].is_null(), "{done}");
    let history = handoff_history(&host, &id(&done), "HandoffCompletedRequest");
    assert_eq!(
        history["PendingHandoffResponse"]["external_job_id"],
        job.as_str(),
        "{history:#}"
    );
    assert_eq!(
        history["HandoffCompletedRequest"]["details"], r#"{"RowsImported":10,"Total":1.10}"#,
        "{history:#}"
    );
    let text = host.cli(&["event", &id(&done)]);
    text.expect_code(0);
    assert!(
        text.stdout().contains(&format!("job {job} (expected by "))
            && text
                .stdout()
                .contains(r#"details {"RowsImported":10,"Total":1.10}"#),
        "{}",
        text.stdout()
    );

    let second = publish(&host, "ErpImportRequested", "s-erp-2", import);
    let handed = host.eventually("the second import is handed off", || {
        let r = host.wait_status("s-erp-2", &second, "Pending");
        (r["sub_status"] == "Handoff").then_some(r)
    });
    let fail = host.cli(&[
        "handoff",
        "fail",
        &id(&handed),
        "--error",
        "DMF job failed: 3 rows rejected",
        "--error-type",
        "DmfRejected",
    ]);
    fail.expect_code(0);
    let failed = host.wait_status("s-erp-2", &second, "Failed");
    assert!(
        failed["error_text"]
            .as_str()
            .is_some_and(|t| t.contains("DMF job failed: 3 rows rejected")),
        "{failed}"
    );
    // Which job failed stays readable in the history.
    let history = handoff_history(&host, &id(&failed), "HandoffFailedRequest");
    assert_eq!(
        history["PendingHandoffResponse"]["external_job_id"], handed["external_job_id"],
        "{history:#}"
    );
    assert_eq!(
        blocked_sessions(&host, "erp"),
        vec![("s-erp-2".to_owned(), id(&failed), 0)]
    );
    // A failed handoff is never retried: the operator is told to act.
    let sessions = host.cli(&["sessions", "--blocked"]);
    assert!(
        sessions
            .stdout()
            .contains(&format!("{} (Failed, no retry)", id(&failed))),
        "{}",
        sessions.stdout()
    );
}

#[test]
fn a_bad_configuration_key_stops_the_host_before_it_starts_and_names_the_key() {
    let scratch = Scratch::new();
    let config = scratch.write("nimbus.toml", b"[engine]\nmax_concurrent_sesions = 4\n");
    let config = config.to_str().expect("utf-8 path");
    let run = scratch.run_raw(&["run", "--config", config]);
    run.expect_code(1);
    assert!(
        run.stderr().contains("max_concurrent_sesions"),
        "{}",
        run.stderr()
    );
    assert!(
        !scratch.path("data").exists(),
        "nothing started: no data directory"
    );

    let check = scratch.run_raw(&["check", "--config", config]);
    check.expect_code(1);
    assert!(
        check.stderr().contains("max_concurrent_sesions"),
        "{}",
        check.stderr()
    );

    let invalid = scratch.write("invalid.toml", b"[broker]\nmax_delivery_count = 0\n");
    let check = scratch.run_raw(&["check", "--config", invalid.to_str().expect("utf-8")]);
    check.expect_code(1);
    assert!(
        check.stderr().contains("broker.max_delivery_count"),
        "{}",
        check.stderr()
    );

    let too_large = scratch.write("large.toml", b"[broker]\nmax_request_size = \"1GiB\"\n");
    let check = scratch.run_raw(&["check", "--config", too_large.to_str().expect("utf-8")]);
    check.expect_code(1);
    assert!(
        check
            .stderr()
            .contains("broker.max_request_size: 1GiB is over the broker's maximum of 256MiB"),
        "{}",
        check.stderr()
    );

    let good = scratch.write("good.toml", b"[api]\nlisten = \"127.0.0.1:7399\"\n");
    let check = scratch.run_raw(&["check", "--config", good.to_str().expect("utf-8")]);
    check.expect_code(0);
    assert!(check.stdout().contains("valid"), "{}", check.stdout());
    assert!(
        check.stdout().contains("127.0.0.1:7399"),
        "{}",
        check.stdout()
    );
}

#[test]
fn an_unreachable_host_is_a_clear_error_naming_the_url() {
    let scratch = Scratch::new();
    // Port 9 (discard) on loopback: nothing listens there in a test box.
    let run = scratch.run_raw(&["--api", "http://127.0.0.1:9", "events"]);
    run.expect_code(1);
    let stderr = run.stderr();
    assert!(stderr.contains("cannot reach the nimbus host"), "{stderr}");
    assert!(stderr.contains("http://127.0.0.1:9"), "{stderr}");

    // A bare host:port, as `[api] listen` writes it, is an http:// URL.
    let bare = scratch.run_raw(&["--api", "127.0.0.1:9", "events"]);
    bare.expect_code(1);
    assert!(
        bare.stderr()
            .contains("cannot reach the nimbus host at http://127.0.0.1:9"),
        "{}",
        bare.stderr()
    );

    // A blank id is a usage error, not a request for "/api/events/".
    for command in [
        &["event", ""][..],
        &["skip", " "],
        &["handoff", "complete", ""],
    ] {
        let mut args = vec!["--api", "http://127.0.0.1:9"];
        args.extend_from_slice(command);
        let blank = scratch.run_raw(&args);
        blank.expect_code(2);
        assert!(
            blank.stderr().contains("must not be empty"),
            "{command:?}: {}",
            blank.stderr()
        );
    }

    let bad_url = scratch.run_raw(&["--api", "ftp://localhost:7300", "events"]);
    bad_url.expect_code(1);
    assert!(
        bad_url
            .stderr()
            .contains("not an http:// URL or a host:port"),
        "{}",
        bad_url.stderr()
    );
}

/// The host's log lines are written by a thread of their own: a stderr that
/// nobody reads (a log shipper that stalls) must not stop the workers that
/// emit them. A direct write blocks the worker at the first line that does
/// not fit in the pipe, and with it the API and the engine.
#[test]
fn a_host_whose_stderr_nobody_reads_goes_on_processing_events() {
    let scratch = Scratch::new();
    scratch.install("billing", "orders", "orders");
    let (host, stderr) = RunningHost::start_with_stalled_stderr(&scratch, "", "debug");
    // Each event logs (the handler's line, the host's), so once the bytes
    // waiting in the pipe stop growing over a few events, its writes block.
    let (mut events, mut unchanged, mut waiting) = (0, 0, stderr.buffered());
    while unchanged < 3 {
        assert!(
            events < 200,
            "the host's stderr never filled ({waiting} bytes), so this test shows nothing"
        );
        let session = format!("fill-{events}");
        let id = publish(&host, "OrderPlaced", &session, &order("o-fill", false));
        host.wait_status(&session, &id, "Completed");
        events += 1;
        let now = stderr.buffered();
        if now == waiting {
            unchanged += 1;
        } else {
            (unchanged, waiting) = (0, now);
        }
    }
    // From here every line the host logs is a write that would block.
    for i in 0..5 {
        let session = format!("after-{i}");
        let id = publish(&host, "OrderPlaced", &session, &order("o-after", false));
        host.wait_status(&session, &id, "Completed");
    }
    assert_eq!(stderr.buffered(), waiting, "nobody read the pipe");

    let log = stderr.drain();
    let (code, _) = host.terminate();
    assert_eq!(code, Some(0));
    let log = log.join().expect("the reading thread");
    assert!(
        log.contains("nimbus host stopped"),
        "every line is written, the last one too:\n{log}"
    );
}

/// `--api` is global so every client command takes it; typed for a command
/// that does not talk to a host (`nimbus run` listens where its
/// configuration says) it is refused rather than silently ignored.
#[test]
fn api_given_to_a_command_that_does_not_use_it_is_refused() {
    let scratch = Scratch::new();
    for command in [&["run"][..], &["check"], &["bench", "--events", "1"]] {
        let mut args = vec!["--api", "http://127.0.0.1:7394"];
        args.extend_from_slice(command);
        let run = scratch.run_raw(&args);
        run.expect_code(1);
        assert!(
            run.stderr().contains("does not take it") && run.stderr().contains("[api] listen"),
            "{command:?}: {}",
            run.stderr()
        );
    }
    // NIMBUS_API in the environment is for the client commands; it does
    // not stop the others.
    let check = Command::new(nimbus_blackbox_tests::nimbus_bin())
        .arg("check")
        .env("NIMBUS_API", "http://127.0.0.1:7394")
        .current_dir(scratch.path(""))
        .output()
        .expect("run nimbus check");
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );
}

/// A permanent failure is dead-lettered; `dlq list` shows the message id
/// that `dlq replay --message-id` takes, and `--json` gives the time as the
/// bus writes times.
#[test]
fn a_dead_lettered_event_is_listed_with_its_message_id_and_replayed_by_it() {
    let scratch = Scratch::new();
    scratch.install("billing", "orders", "orders");
    let host = RunningHost::start(&scratch, "");
    let empty = json!({"OrderId": "o-9", "Customer": "acme", "Total": 0.0, "Lines": []});
    let published = publish(&host, "OrderPlaced", "s-dl", &empty.to_string());
    let dead = host.wait_status("s-dl", &published, "DeadLettered");
    let log = host.stderr();
    assert!(
        log.lines().any(|line| line.contains("WARN")
            && line.contains("event dead-lettered")
            && line.contains("session=s-dl")
            && line.contains(&id(&dead))
            && line.contains("Permanent failure")),
        "{log}"
    );

    let listed = host.cli_json(&["dlq", "list", "--endpoint", "billing", "--json"]);
    let own = listed
        .as_array()
        .expect("a list")
        .iter()
        .find(|d| d["subscription"] == "billing")
        .expect("dead-lettered in the endpoint's own queue")
        .clone();
    let message_id = own["message_id"].as_str().expect("a message id").to_owned();
    let enqueued = own["enqueued_time"].as_str().expect("a time as text");
    assert!(
        enqueued.len() > 20 && enqueued.ends_with('Z') && enqueued.contains('T'),
        "{enqueued}"
    );

    let table = host.cli(&["dlq", "list", "--endpoint", "billing"]);
    table.expect_code(0);
    assert!(table.stdout().contains("MESSAGE ID"), "{}", table.stdout());
    assert!(table.stdout().contains(&message_id), "{}", table.stdout());

    // Fixed by a resubmission with a good order: the dead-lettered copy
    // would now run the event again, so it stays unless forced.
    let event = host.wait_status("s-dl", &published, "DeadLettered");
    host.cli(&["resubmit", &id(&event), "--data", &order("o-9", false)])
        .expect_code(0);
    host.wait_status("s-dl", &published, "Completed");
    let replay_args = [
        "dlq",
        "replay",
        "--endpoint",
        "billing",
        "--subscription",
        "billing",
        "--message-id",
        &message_id,
    ];
    let refused = host.cli(&replay_args);
    refused.expect_code(1);
    assert!(
        refused.stderr().contains("is Completed") && refused.stderr().contains("run it again"),
        "{}",
        refused.stderr()
    );
    let as_json = host.cli_json(&["dlq", "replay", "--endpoint", "billing", "--all", "--json"]);
    assert_eq!(as_json["replayed"], json!([]), "{as_json:#}");
    assert_eq!(as_json["left"][0]["reason"], "settled", "{as_json:#}");
    assert!(as_json.get("stopped").is_none(), "{as_json:#}");
    let all = host.cli(&["dlq", "replay", "--endpoint", "billing", "--all"]);
    all.expect_code(0);
    assert!(all.stdout().contains("replayed 0"), "{}", all.stdout());
    assert!(all.stderr().contains("left in place"), "{}", all.stderr());

    let mut forced = replay_args.to_vec();
    forced.push("--force");
    let replay = host.cli(&forced);
    replay.expect_code(0);
    assert!(
        replay.stdout().contains("replayed 1 dead-lettered message"),
        "{}",
        replay.stdout()
    );
}

/// `--api` pointing at some other web server: a short error saying so,
/// not that server's whole page.
#[test]
fn an_api_address_that_is_not_a_nimbus_host_is_named_as_such() {
    use std::io::{Read as _, Write as _};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("address"));
    let page = format!("<html>\n{}</html>\n", "<p>Not Found</p>\n".repeat(200));
    let server = std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().expect("accept");
        let mut request = [0_u8; 4096];
        let _ = stream.read(&mut request);
        let answer = format!(
            "HTTP/1.1 404 Not Found\r\nContent-Type: text/html\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{page}",
            page.len()
        );
        let _ = stream.write_all(answer.as_bytes());
    });
    let scratch = Scratch::new();
    let run = scratch.run_raw(&["--api", &url, "events"]);
    server.join().expect("the server thread");
    run.expect_code(1);
    let stderr = run.stderr();
    assert!(
        stderr.contains("not as a nimbus host does") && stderr.contains(&url),
        "{stderr}"
    );
    assert!(stderr.lines().count() <= 2, "the whole page: {stderr}");
}

/// The README's fix: a manifest change, no new component. The outcome
/// after the fix names a different version than the failure did, in the
/// JSON and in the history table, so the audit trail shows the fix ran.
#[test]
fn a_manifest_only_fix_is_a_new_version_in_the_events_history() {
    let scratch = Scratch::new();
    scratch.install("billing", "orders", "orders");
    scratch.write(
        "handlers/billing/orders.toml",
        b"[config]\nreject_over_total = \"1000\"\n",
    );
    let host = RunningHost::start(&scratch, "");
    let big = json!({"OrderId": "o-big", "Customer": "acme", "Total": 5000.0,
                     "Lines": [{"Sku": "A-1", "Quantity": 1, "UnitPrice": 5000.0}]});
    let published = publish(&host, "OrderPlaced", "s-big", &big.to_string());
    let failed = host.wait_status("s-big", &published, "Failed");
    let before = failed["handler_version"]
        .as_str()
        .expect("a version")
        .to_owned();
    assert!(
        before.starts_with("sha256:") && before.contains('+'),
        "{before}"
    );

    let partial = scratch.write(
        "handlers/billing/.orders.toml.partial",
        b"[config]\nreject_over_total = \"10000\"\n",
    );
    std::fs::rename(&partial, scratch.path("handlers/billing/orders.toml")).expect("rename");
    host.eventually("the fixed settings serve", || {
        let version = host.cli_json(&["handlers", "--json"])["handlers"][0]["version"].clone();
        (version.as_str().is_some_and(|v| v != before)).then_some(())
    });
    host.cli(&["resubmit", &id(&failed)]).expect_code(0);
    let fixed = host.wait_status("s-big", &published, "Completed");
    let after = fixed["handler_version"]
        .as_str()
        .expect("a version")
        .to_owned();
    assert_ne!(after, before);
    let (digest_before, _) = before.split_once('+').expect("a settings suffix");
    assert!(
        after.starts_with(&format!("{digest_before}+")),
        "same component: {after}"
    );

    let text = host.cli(&["event", &id(&fixed)]);
    text.expect_code(0);
    let suffix = |v: &str| {
        v.split_once('+')
            .map(|(_, s)| s.to_owned())
            .unwrap_or_default()
    };
    assert!(
        text.stdout().contains(&suffix(&before)) && text.stdout().contains(&suffix(&after)),
        "both versions in the history table:\n{}",
        text.stdout()
    );
}

/// `[resolver] retention`: a completed event leaves the store once it is
/// older than the period; an older failed one stays, blocking its session,
/// for its operator.
#[test]
fn a_completed_event_leaves_the_store_after_the_retention_period_a_failed_one_stays() {
    let scratch = Scratch::new();
    scratch.install("billing", "orders", "orders");
    let host = RunningHost::start(&scratch, "[resolver]\nretention = \"2s\"\n");
    let failing = publish(&host, "OrderPlaced", "s-keep", &order("o-1", true));
    let failed = host.wait_status("s-keep", &failing, "Failed");
    let ok = publish(&host, "OrderPlaced", "s-go", &order("o-2", false));
    let done = host.wait_status("s-go", &ok, "Completed");

    let gone = host.eventually("the completed event to be pruned", || {
        let run = host.cli(&["event", &id(&done)]);
        (run.code() == Some(1)).then_some(run)
    });
    assert!(
        gone.stderr().contains(&format!("no event '{}'", id(&done))),
        "{}",
        gone.stderr()
    );
    let kept = host.cli_json(&["event", &id(&failed), "--json"]);
    let at = &kept["endpoints"][0];
    assert_eq!(at["record"]["status"], "Failed");
    assert!(
        at["history"].as_array().is_some_and(|h| h.len() >= 2),
        "its whole history stays: {at:#}"
    );
    assert_eq!(
        blocked_sessions(&host, "billing"),
        vec![("s-keep".to_owned(), id(&failed), 0)]
    );
}

/// A deploy that deletes the old component and copies the new one in
/// later is a swap: through `[host] removal_grace` the deleted version
/// keeps serving and its event types stay registered, so what is published
/// in between is handled, not dropped as reaching no endpoint.
#[test]
fn a_component_deleted_then_copied_back_loses_nothing_published_between() {
    let scratch = Scratch::new();
    let component = scratch.install("billing", "orders", "orders");
    let config = nimbus_blackbox_tests::running::config_text("")
        .replace("removal_grace = \"1s\"", "removal_grace = \"10m\"");
    let host = RunningHost::start_with_config(&scratch, &config);
    let first = publish(&host, "OrderPlaced", "s-1", &order("o-1", false));
    host.wait_status("s-1", &first, "Completed");

    std::fs::remove_file(&component).expect("delete the component");
    let handlers = host.eventually("the deletion to be seen", || {
        let handlers = host.cli_json(&["handlers", "--json"]);
        (handlers["handlers"][0]["status"] == "removing").then_some(handlers)
    });
    assert!(
        handlers["handlers"][0]["removing_at"].is_string(),
        "{handlers:#}"
    );
    let table = host.cli(&["handlers"]).expect_code(0).stdout();
    assert!(table.contains("removing (until "), "{table}");

    let between = publish_run(&host, "OrderPlaced", "s-2", &order("o-2", false));
    between.expect_code(0);
    assert!(
        !between.stderr().contains("reaches no endpoint"),
        "{}",
        between.stderr()
    );
    let between = between.stdout().trim().to_owned();
    host.wait_status("s-2", &between, "Completed");

    scratch.install("billing", "orders", "orders");
    host.eventually("the handler to serve again", || {
        let handlers = host.cli_json(&["handlers", "--json"]);
        (handlers["handlers"][0]["status"] == "serving"
            && handlers["handlers"][0]["removing_at"].is_null())
        .then_some(())
    });
    let after = publish(&host, "OrderPlaced", "s-3", &order("o-3", false));
    host.wait_status("s-3", &after, "Completed");
}

/// A handler deleted while its endpoint has a blocked session and a dead
/// letter: listing every endpoint still shows both, since the endpoint's
/// queues stay.
#[test]
fn a_deleted_handler_leaves_its_blocked_sessions_and_dead_letters_listed() {
    let scratch = Scratch::new();
    let component = scratch.install("billing", "orders", "orders");
    let host = RunningHost::start(&scratch, "");
    let failing = publish(&host, "OrderPlaced", "s-block", &order("o-1", true));
    let failed = host.wait_status("s-block", &failing, "Failed");
    let empty = json!({"OrderId": "o-2", "Customer": "acme", "Total": 0.0, "Lines": []});
    let dead = publish(&host, "OrderPlaced", "s-dl", &empty.to_string());
    host.wait_status("s-dl", &dead, "DeadLettered");

    std::fs::remove_file(&component).expect("delete the component");
    host.eventually("the handler to be unregistered", || {
        let handlers = host.cli_json(&["handlers", "--json"]);
        let listed = handlers["handlers"].as_array().map_or(0, Vec::len);
        (listed == 0).then_some(())
    });

    let blocked = host.cli_json(&["sessions", "--blocked", "--json"]);
    let blocked: Vec<(&str, &str)> = blocked
        .as_array()
        .expect("a list")
        .iter()
        .map(|s| {
            (
                s["endpoint"].as_str().unwrap_or_default(),
                s["blocked_by"].as_str().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(blocked, [("billing", id(&failed).as_str())]);
    let dead_letters = host.cli_json(&["dlq", "list", "--json"]);
    assert!(
        dead_letters
            .as_array()
            .expect("a list")
            .iter()
            .any(|d| d["endpoint"] == "billing" && d["subscription"] == "billing"),
        "{dead_letters:#}"
    );
    // A resubmission now cannot run: said before the operator waits on it.
    let resubmit = host.cli(&["resubmit", &id(&failed)]);
    resubmit.expect_code(0);
    assert!(
        resubmit
            .stderr()
            .contains("note: no handler at 'billing' serves OrderPlaced now"),
        "{}",
        resubmit.stderr()
    );
}

/// A follow-up nothing consumes reaches no event history: the host's log
/// (info, `-v`) is where its author sees that it went out.
#[test]
fn a_follow_up_is_logged_when_it_goes_out() {
    let scratch = Scratch::new();
    scratch.install("app", "echo", "echo");
    let host = RunningHost::start(&scratch, "");
    let sent = publish(&host, "Echo", "s-follow", r#"{"Publish":1}"#);
    let done = host.wait_status("s-follow", &sent, "Completed");
    let event_id = id(&done);
    host.eventually("the follow-up's log line", || {
        host.stderr()
            .lines()
            .any(|line| {
                line.contains("follow-up published with the event's settlement")
                    && line.contains(&event_id)
                    && line.contains("follow_up_type=EchoFollowUp")
                    && line.contains(&format!("follow_up_message_id={event_id}:echo:0"))
            })
            .then_some(())
    });
}

/// A new version that no longer handles an event type its predecessor did
/// is taken (the author may mean it), and the host says so at the default
/// level: that type's events there are answered Unsupported from now on.
#[test]
fn a_swap_that_drops_an_event_type_is_warned() {
    let scratch = Scratch::new();
    scratch.install("billing", "orders", "orders");
    let host = RunningHost::start(&scratch, "");
    let partial = scratch.path("handlers/billing/.orders.wasm.partial");
    std::fs::copy(nimbus_blackbox_tests::guest("noop"), &partial).expect("copy noop");
    std::fs::rename(&partial, scratch.path("handlers/billing/orders.wasm")).expect("swap");
    host.eventually("the swap's warning", || {
        host.stderr()
            .lines()
            .any(|line| {
                line.contains("WARN")
                    && line.contains("no longer handles these event types")
                    && line.contains("OrderPlaced")
            })
            .then_some(())
    });
}

/// After a restart with handlers that do not load, `publish` says where an
/// event waits (the endpoint whose kept forwarding carries its type; it runs
/// once the handler is fixed) and when nothing will receive it.
#[test]
fn publish_says_whether_an_event_for_a_handler_that_does_not_load_waits_or_reaches_nothing() {
    let scratch = Scratch::new();
    let component = scratch.install("billing", "orders", "orders");
    let host = RunningHost::start(&scratch, "");
    let first = publish(&host, "OrderPlaced", "s-1", &order("o-1", false));
    host.wait_status("s-1", &first, "Completed");
    host.terminate();

    std::fs::write(&component, b"not a component").expect("break the component");
    scratch.write("handlers/shipping/labels.wasm", b"not a component either");
    let host = RunningHost::start(&scratch, "");
    let waits = publish_run(&host, "OrderPlaced", "s-2", &order("o-2", false));
    waits.expect_code(0);
    assert!(
        waits
            .stderr()
            .contains("the event waits in the queue of billing"),
        "{}",
        waits.stderr()
    );
    let waiting = waits.stdout().trim().to_owned();
    // The event itself says why it is Pending and not running.
    let view = host.eventually("the waiting event is recorded", || {
        host.event_json(&waiting)
    });
    assert!(
        view["endpoints"][0]["waiting_for_handler"]
            .as_str()
            .is_some_and(|w| w.starts_with("no handler at 'billing' loads (orders: ")),
        "{view:#}"
    );
    // The listing says so too, so a page of Pending events tells the
    // stuck ones from those in flight.
    let listed = host.cli_json(&["events", "--session", "s-2", "--json"]);
    assert!(
        listed[0]["waiting_for_handler"]
            .as_str()
            .is_some_and(|w| w.starts_with("no handler at 'billing' loads (")),
        "{listed:#}"
    );
    let table = host.cli(&["events", "--session", "s-2"]);
    table.expect_code(0);
    assert!(
        table
            .stdout()
            .contains("Pending (waiting: no handler serves; see nimbus event)"),
        "{}",
        table.stdout()
    );
    let shown = host.cli(&["event", &waiting]);
    shown.expect_code(0);
    assert!(
        shown
            .stdout()
            .contains("waiting     no handler at 'billing' loads (orders: "),
        "{}",
        shown.stdout()
    );
    let lost = host.cli(&["publish", "--event-type", "LabelPrinted", "--data", "{}"]);
    lost.expect_code(0);
    assert!(
        lost.stderr()
            .contains("billing, shipping have a handler that does not load")
            && lost
                .stderr()
                .contains("will not reach them even once fixed"),
        "{}",
        lost.stderr()
    );

    scratch.install("billing", "orders", "orders");
    host.wait_status("s-2", &waiting, "Completed");
    let settled = host.event_json(&waiting).expect("recorded");
    assert!(
        settled["endpoints"][0].get("waiting_for_handler").is_none(),
        "{settled:#}"
    );
}

/// An order `orders` dead-letters at once (no lines).
fn empty_order(id: &str) -> String {
    json!({"OrderId": id, "Customer": "acme", "Total": 0.0, "Lines": []}).to_string()
}

/// `dlq list --limit N` caps each endpoint's listing, so a busy endpoint
/// hides no other, and a listing cut at its limit says so on stderr;
/// `events` says the same when more events match than it shows.
#[test]
fn a_listing_cut_at_its_limit_says_so_and_the_dead_letter_limit_is_per_endpoint() {
    let scratch = Scratch::new();
    scratch.install("audit", "orders", "orders");
    scratch.install("billing", "orders", "orders");
    let host = RunningHost::start(&scratch, "");
    // Each endpoint gets its copy of each: two dead letters at each.
    publish(&host, "OrderPlaced", "s-1", &empty_order("o-1"));
    publish(&host, "OrderPlaced", "s-2", &empty_order("o-2"));
    host.eventually("four dead letters", || {
        let listed = host.cli_json(&["dlq", "list", "--json"]);
        (listed.as_array().map_or(0, Vec::len) == 4).then_some(())
    });

    let cut = host.cli(&["dlq", "list", "--limit", "1"]);
    cut.expect_code(0);
    let rows: Vec<String> = cut.stdout().lines().skip(1).map(str::to_owned).collect();
    assert!(
        rows.len() == 2 && rows[0].starts_with("audit") && rows[1].starts_with("billing"),
        "one row per endpoint:\n{}",
        cut.stdout()
    );
    for endpoint in ["audit", "billing"] {
        assert!(
            cut.stderr().contains(&format!(
                "note: {endpoint} has more dead-lettered messages than the 1 shown; --limit N \
                 shows more"
            )),
            "{}",
            cut.stderr()
        );
    }
    let json = host.cli(&[
        "dlq",
        "list",
        "--endpoint",
        "billing",
        "--limit",
        "1",
        "--json",
    ]);
    json.expect_code(0);
    assert_eq!(json.json().as_array().map_or(0, Vec::len), 1);
    assert!(
        json.stderr().contains("note: billing has more"),
        "{}",
        json.stderr()
    );
    // Exactly the limit is all there is: no note.
    let whole = host.cli(&["dlq", "list", "--limit", "2"]);
    whole.expect_code(0);
    assert_eq!(whole.stdout().lines().count(), 5, "{}", whole.stdout());
    assert!(!whole.stderr().contains("note:"), "{}", whole.stderr());

    let events = host.cli(&["events", "--endpoint", "billing", "--limit", "1"]);
    events.expect_code(0);
    assert!(
        events
            .stderr()
            .contains("note: more events match than the 1 shown"),
        "{}",
        events.stderr()
    );
    let events = host.cli(&["events", "--endpoint", "billing", "--limit", "2"]);
    events.expect_code(0);
    assert!(!events.stderr().contains("note:"), "{}", events.stderr());
}

/// `dlq replay --all` that leaves everything in place says so once, with
/// the reason's own advice (not a second `--force` hint), and prints no
/// empty table beside it.
#[test]
fn a_replay_that_leaves_every_message_says_so_without_an_empty_table() {
    let scratch = Scratch::new();
    scratch.install("billing", "orders", "orders");
    let host = RunningHost::start(&scratch, "");
    let published = publish(&host, "OrderPlaced", "s-dl", &empty_order("o-9"));
    let event = host.wait_status("s-dl", &published, "DeadLettered");
    host.cli(&["resubmit", &id(&event), "--data", &order("o-9", false)])
        .expect_code(0);
    host.wait_status("s-dl", &published, "Completed");

    let all = host.cli(&["dlq", "replay", "--endpoint", "billing", "--all"]);
    all.expect_code(0);
    assert_eq!(
        all.stdout().trim(),
        "replayed 0, left 1 (see above)",
        "{}",
        all.stdout()
    );
    let stderr = all.stderr();
    assert_eq!(stderr.matches("left in place:").count(), 1, "{stderr}");
    assert!(
        stderr.contains("(force the replay to do it anyway)") && !stderr.contains("--force"),
        "{stderr}"
    );
}

/// A handler that serves the type at one endpoint while another's does not
/// load but its kept forwarding carries the type: `publish` names where the
/// event's copy waits.
#[test]
fn publish_names_where_a_copy_waits_even_when_another_endpoint_handles_it() {
    let scratch = Scratch::new();
    scratch.install("audit", "orders", "orders");
    let billing = scratch.install("billing", "orders", "orders");
    let host = RunningHost::start(&scratch, "");
    let first = publish(&host, "OrderPlaced", "s-1", &order("o-1", false));
    host.wait_status("s-1", &first, "Completed");
    host.terminate();

    std::fs::write(&billing, b"not a component").expect("break billing's component");
    let host = RunningHost::start(&scratch, "");
    let run = publish_run(&host, "OrderPlaced", "s-2", &order("o-2", false));
    run.expect_code(0);
    assert!(
        run.stderr().contains(
            "note: OrderPlaced is handled at audit now; its copy for billing waits in its queue"
        ) && run.stderr().contains("until it is fixed"),
        "{}",
        run.stderr()
    );
}

/// `retention = "Forever"` is taken as `"forever"`; an unknown event id
/// then has no pruning hint, while the default period is named.
#[test]
fn an_unknown_event_names_the_retention_period_and_forever_is_case_insensitive() {
    let scratch = Scratch::new();
    scratch.install("billing", "orders", "orders");
    let host = RunningHost::start(&scratch, "");
    let run = host.cli(&["event", "gone"]);
    run.expect_code(1);
    assert!(
        run.stderr().contains("no event 'gone'")
            && run
                .stderr()
                .contains("removed 30 days after its last update ([resolver] retention)"),
        "{}",
        run.stderr()
    );
    host.terminate();

    let host = RunningHost::start(&scratch, "[resolver]\nretention = \"Forever\"\n");
    let run = host.cli(&["event", "gone"]);
    run.expect_code(1);
    assert!(
        run.stderr().contains("no event 'gone'") && !run.stderr().contains("retention"),
        "{}",
        run.stderr()
    );
}

/// An endpoint whose handler file does not load is listed by `nimbus
/// handlers`; `nimbus events --endpoint` takes it too.
#[test]
fn events_of_an_endpoint_whose_handler_does_not_load_are_listed_not_refused() {
    let scratch = Scratch::new();
    scratch.install("billing", "orders", "orders");
    scratch.write("handlers/shipping/labels.wasm", b"not a component");
    let host = RunningHost::start(&scratch, "");
    let handlers = host.cli_json(&["handlers", "--json"]);
    assert!(
        handlers["handlers"]
            .as_array()
            .expect("a list")
            .iter()
            .any(|h| h["endpoint"] == "shipping" && h["status"] == "failed"),
        "{handlers:#}"
    );
    let run = host.cli(&["events", "--endpoint", "shipping"]);
    run.expect_code(0);
    assert_eq!(run.stdout(), "no events\n");
}

/// A dead letter whose event a resubmission fixed is removed with
/// `dlq remove --settled`; while the event is still open it is kept, and
/// the command says why.
#[test]
fn a_dead_letter_is_removed_once_its_event_is_fixed_and_kept_while_it_is_open() {
    let scratch = Scratch::new();
    scratch.install("billing", "orders", "orders");
    let host = RunningHost::start(&scratch, "");
    let published = publish(&host, "OrderPlaced", "s-rm", &empty_order("o-7"));
    let event = host.wait_status("s-rm", &published, "DeadLettered");

    let kept = host.cli(&["dlq", "remove", "--endpoint", "billing", "--settled"]);
    kept.expect_code(0);
    assert_eq!(kept.stdout(), "removed 0, kept 1 (see above)\n");
    assert!(
        kept.stderr().contains("is DeadLettered, not settled")
            && kept.stderr().contains(&id(&event)),
        "{}",
        kept.stderr()
    );
    let one = host.cli_json(&["dlq", "list", "--endpoint", "billing", "--json"]);
    assert_eq!(one[0]["event_status"], "DeadLettered", "{one:#}");
    let sequence = one[0]["sequence_number"]
        .as_i64()
        .expect("a sequence number");
    let refused = host.cli(&[
        "dlq",
        "remove",
        "--endpoint",
        "billing",
        "--sequence",
        &sequence.to_string(),
    ]);
    refused.expect_code(1);
    assert!(
        refused.stderr().contains("force removes it anyway"),
        "{}",
        refused.stderr()
    );

    host.cli(&["resubmit", &id(&event), "--data", &order("o-7", false)])
        .expect_code(0);
    host.wait_status("s-rm", &published, "Completed");
    // The listing tells a fixed event's dead letter from a live problem.
    let fixed = host.cli(&["dlq", "list", "--endpoint", "billing"]);
    fixed.expect_code(0);
    assert!(
        fixed.stdout().contains("EVENT NOW") && fixed.stdout().contains("Completed"),
        "{}",
        fixed.stdout()
    );
    let removed = host.cli_json(&[
        "dlq",
        "remove",
        "--endpoint",
        "billing",
        "--settled",
        "--json",
    ]);
    assert_eq!(
        removed["removed"][0]["sequence_number"], sequence,
        "{removed:#}"
    );
    assert_eq!(removed["kept"], json!([]), "{removed:#}");
    assert_eq!(
        host.cli_json(&["dlq", "list", "--endpoint", "billing", "--json"]),
        json!([])
    );
    // Removed, not run again: the event is still the resubmission's.
    let after = host.cli_json(&["event", &id(&event), "--json"]);
    let history = after["endpoints"][0]["history"]
        .as_array()
        .expect("history");
    // The edit replaced the payload that failed; the history keeps it.
    let resubmission = history
        .iter()
        .find(|h| h["message_type"] == "ResubmissionRequest")
        .expect("the resubmission is in the history");
    let before: serde_json::Value = serde_json::from_str(
        resubmission["replaced_payload"]
            .as_str()
            .expect("the replaced payload"),
    )
    .expect("JSON");
    assert_eq!(before["Lines"], json!([]), "{before:#}");
    let shown = host.cli(&["event", &id(&event)]);
    assert!(
        shown.stdout().contains("payload edited; before: "),
        "{}",
        shown.stdout()
    );
    assert_eq!(
        history
            .iter()
            .filter(|h| h["status"] == "Completed")
            .count(),
        1,
        "{history:#?}"
    );
}

/// An endpoint runs while one of its handlers does not load (another
/// does): an event of the broken handler's type must not be settled for
/// good as Unsupported. It fails, naming the handler, and blocks its
/// session; fixed and resubmitted, it completes.
#[test]
fn an_event_of_a_handler_that_stopped_loading_waits_for_the_fix_not_unsupported() {
    let scratch = Scratch::new();
    scratch.install("billing", "orders", "orders");
    scratch.install("billing", "noop", "noop");
    let host = RunningHost::start(&scratch, "");
    let first = publish(&host, "Noop", "s-noop", "{}");
    host.wait_status("s-noop", &first, "Completed");
    let (code, _) = host.terminate();
    assert_eq!(code, Some(0));

    // Broken while the host was down: it starts without it, the forwarding
    // of `Noop` to billing kept as it was.
    scratch.write("handlers/billing/noop.wasm", b"\0asm not a component");
    let host = RunningHost::start(&scratch, "");
    let said = publish_run(&host, "Noop", "s-noop-2", "{}");
    said.expect_code(0);
    assert!(
        said.stderr()
            .contains("the event fails there (HandlerNotLoaded)"),
        "{}",
        said.stderr()
    );
    let waiting = said.stdout().trim().to_owned();
    let failed = host.wait_status("s-noop-2", &waiting, "Failed");
    assert_eq!(failed["error_type"], "HandlerNotLoaded", "{failed:#}");
    assert!(
        failed["error_text"]
            .as_str()
            .is_some_and(|e| e.contains("'noop'") && e.contains("resubmit")),
        "{failed:#}"
    );
    let sessions = host.cli_json(&["sessions", "--blocked", "--json"]);
    assert_eq!(
        sessions[0]["blocked_by"], failed["event_id"],
        "{sessions:#}"
    );

    scratch.install("billing", "noop", "noop");
    host.eventually("the fixed handler serves", || {
        let handlers = host.cli_json(&["handlers", "--json"]);
        handlers["handlers"]
            .as_array()?
            .iter()
            .any(|h| h["handler"] == "noop" && h["status"] == "serving")
            .then_some(())
    });
    host.cli(&["resubmit", &id(&failed)]).expect_code(0);
    host.wait_status("s-noop-2", &waiting, "Completed");
}

/// A host that has run on a data directory must find its handlers
/// directory again: a mistyped path stops the start, naming the key,
/// instead of unregistering every endpoint. A fresh data directory still
/// gets one made.
#[test]
fn a_missing_handlers_directory_on_a_used_data_directory_stops_the_start() {
    let scratch = Scratch::new();
    scratch.install("billing", "orders", "orders");
    let host = RunningHost::start(&scratch, "");
    let (code, _) = host.terminate();
    assert_eq!(code, Some(0));

    let config = scratch.write(
        "typo.toml",
        nimbus_blackbox_tests::running::config_text("")
            .replace(
                r#"handlers_dir = "handlers""#,
                r#"handlers_dir = "handlrs""#,
            )
            .as_bytes(),
    );
    let run = scratch.run_raw(&["run", "--config", config.to_str().expect("utf-8 path")]);
    run.expect_code(1);
    assert!(
        run.stderr().contains("[host] handlers_dir")
            && run.stderr().contains("handlrs")
            && run.stderr().contains("does not exist"),
        "{}",
        run.stderr()
    );
    assert!(!scratch.path("handlrs").exists(), "nothing made");
}

/// Data over the API's limit is refused by the CLI before it is sent,
/// naming the limit, rather than as a broken connection.
#[test]
fn publish_of_data_over_the_limit_names_the_limit() {
    let scratch = Scratch::new();
    let big = format!("\"{}\"", "x".repeat(3 * 1024 * 1024));
    let file = scratch.write("big.json", big.as_bytes());
    let data = format!("@{}", file.to_str().expect("utf-8 path"));
    let run = scratch.run_raw(&[
        "publish",
        "--api",
        "http://127.0.0.1:9",
        "--event-type",
        "OrderPlaced",
        "--data",
        &data,
    ]);
    run.expect_code(1);
    assert!(
        run.stderr().contains("3.0 MiB") && run.stderr().contains("at most 2 MiB"),
        "{}",
        run.stderr()
    );
}

/// `nimbus bench` with failures asked for: its report, not a warning per
/// failed event (the engine logs each at the default level in a host).
#[test]
fn a_bench_with_failures_reports_them_without_a_warning_each() {
    let scratch = Scratch::new();
    let guests = nimbus_blackbox_tests::guests_dir();
    let run = scratch.run_raw(&[
        "bench",
        "--native-only",
        "--handler",
        "orders",
        "--failure-rate",
        "0.1",
        "--sessions",
        "8",
        "--events",
        "100",
        "--warmup",
        "10",
        "--durability",
        "os",
        "--guests-dir",
        guests.to_str().expect("utf-8 path"),
    ]);
    run.expect_code(0);
    assert!(
        run.stdout().contains("failed then skipped: 10"),
        "{}",
        run.stdout()
    );
    assert!(!run.stderr().contains("WARN"), "{}", run.stderr());
}

/// `nimbus bench --duration` soaks: a line a window with the process's and
/// the broker's figures, then the RSS slope; a session that went idle is
/// let go, so the partitions the broker keeps stay within the sessions
/// the load uses.
#[test]
fn a_soak_prints_a_line_a_window_and_the_rss_slope() {
    let scratch = Scratch::new();
    let guests = nimbus_blackbox_tests::guests_dir();
    let run = scratch.run_raw(&[
        "bench",
        "--native-only",
        "--sessions",
        "8",
        "--events",
        "200",
        "--warmup",
        "20",
        "--rate",
        "100",
        "--durability",
        "os",
        "--duration",
        "4s",
        "--every",
        "1s",
        "--guests-dir",
        guests.to_str().expect("utf-8 path"),
    ]);
    run.expect_code(0);
    let stdout = run.stdout();
    let header = stdout
        .lines()
        .position(|l| l.trim_start().starts_with("minute"))
        .unwrap_or_else(|| panic!("no soak table:\n{stdout}"));
    let rows: Vec<Vec<&str>> = stdout
        .lines()
        .skip(header + 1)
        .take_while(|l| !l.starts_with("RSS slope"))
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert!(rows.len() >= 3, "a line a second for 4 s:\n{stdout}");
    for row in &rows {
        assert_eq!(row.len(), 14, "{row:?}");
        let events_per_s: f64 = row[1].parse().expect("events/s");
        let rss_mb: f64 = row[5].parse().expect("RSS");
        let history_rows: u64 = row[9].parse().expect("history rows");
        let partitions: usize = row[10].parse().expect("partitions");
        assert!(history_rows > 0, "{row:?}");
        assert!(events_per_s > 50.0, "the rate is held: {row:?}");
        assert!(rss_mb > 1.0, "{row:?}");
        // The soak's 8 sessions on the endpoint and the Resolver; the
        // earlier phases' sessions were let go.
        assert!(partitions <= 16, "{row:?}");
    }
    assert!(
        stdout.contains("RSS slope over the second half:"),
        "{stdout}"
    );
}

/// The event's data travels as it was written: a decimal keeps its digits,
/// an integer beyond 64 bits keeps its value, keys keep their order. A .NET
/// publisher's `decimal` amounts and large ids must reach the handler and
/// the audit trail unchanged; an edited resubmission's data too.
#[test]
fn published_data_reaches_the_audit_trail_as_written() {
    let scratch = Scratch::new();
    scratch.install("app", "echo", "echo");
    scratch.install("app", "noop", "noop");
    let host = RunningHost::start(&scratch, "");
    let written = r#"{"Zed":1,"Amount":1.10,"Big":12345678901234567890123,"Id":9007199254740993}"#;
    let sent = publish(&host, "Noop", "s-raw", written);
    let record = host.wait_status("s-raw", &sent, "Completed");
    // A listing leaves payloads out; the event's own view has it.
    assert!(record["payload"].is_null(), "{record:#}");
    assert_eq!(payload_of(&host, &record), written);

    let failing = publish(&host, "Echo", "s-edit", r#"{"Outcome":"Failed"}"#);
    let failed = host.wait_status("s-edit", &failing, "Failed");
    let edited = r#"{ "Outcome" : "Completed", "Logs": [] }"#;
    host.cli(&["resubmit", &id(&failed), "--data", edited])
        .expect_code(0);
    let fixed = host.wait_status("s-edit", &failing, "Completed");
    assert_eq!(payload_of(&host, &fixed), edited);
}

/// The payload `nimbus event --json` shows for a listed record's event.
fn payload_of(host: &RunningHost, record: &serde_json::Value) -> String {
    let view = host
        .event_json(&id(record))
        .expect("a listed event is recorded");
    view["endpoints"][0]["record"]["payload"]
        .as_str()
        .unwrap_or_else(|| panic!("no payload in {view:#}"))
        .to_owned()
}

/// An operator paged at night tells a session that will heal by itself
/// from one that needs them: while a retry is scheduled `sessions` and
/// `event` say when; once the retries are spent they say so, and the log
/// says it at the default level.
#[test]
fn a_blocked_session_and_its_event_say_whether_a_retry_is_coming() {
    let scratch = Scratch::new();
    scratch.install("app", "echo", "echo");
    let host = RunningHost::start(
        &scratch,
        "[retry.default]\nmax_retries = 1\nbase_delay = \"5s\"\n",
    );
    let failing = publish(
        &host,
        "Echo",
        "s-retry",
        r#"{"Outcome":"Failed","ErrorType":"Boom"}"#,
    );
    let failed = host.wait_status("s-retry", &failing, "Failed");
    let blocked = host.cli(&["sessions", "--blocked"]);
    blocked.expect_code(0);
    assert!(
        blocked
            .stdout()
            .contains(&format!("{} (Failed, retry at ", id(&failed))),
        "{}",
        blocked.stdout()
    );
    let event = host.cli_json(&["event", &id(&failed), "--json"]);
    let sessions = host.cli_json(&["sessions", "--blocked", "--json"]);
    // The retry may have run between the two reads; then both say so.
    if sessions[0]["awaits_retry"] == true {
        assert_eq!(event["endpoints"][0]["awaits_retry"], true, "{event:#}");
        assert_eq!(
            event["endpoints"][0]["retry_at"], sessions[0]["retry_at"],
            "{event:#}"
        );
        let shown = host.cli(&["event", &id(&failed)]).expect_code(0).stdout();
        // Its time may pass between the reads: then it is shown as due.
        assert!(
            shown.contains("status      Failed, retry at ")
                || shown.contains("status      Failed, retry due since "),
            "{shown}"
        );
    }
    let spent = host.eventually("the retry ran and failed", || {
        let sessions = host.cli_json(&["sessions", "--blocked", "--json"]);
        (sessions[0]["awaits_retry"] == false).then_some(sessions)
    });
    assert!(spent[0]["retry_at"].is_null(), "{spent:#}");
    let shown = host.cli(&["event", &id(&failed)]).expect_code(0).stdout();
    assert!(
        shown.contains("status      Failed, no retry left: resubmit or skip it"),
        "{shown}"
    );
    let blocked = host.cli(&["sessions", "--blocked"]);
    assert!(
        blocked
            .stdout()
            .contains(&format!("{} (Failed, no retry)", id(&failed))),
        "{}",
        blocked.stdout()
    );
    let log = host.stderr();
    assert!(
        log.lines().any(|line| line.contains("WARN")
            && line.contains("no retry is left")
            && line.contains(&id(&failed))),
        "{log}"
    );
}

/// A host whose `app` endpoint runs `echo` (three deliveries, the transient
/// backoff between `base` and `max`), and the message id of an event
/// published to it that fails transiently every time.
fn publish_flaky(scratch: &Scratch, base: &str, max: &str) -> (RunningHost, String) {
    scratch.install("app", "echo", "echo");
    let config = nimbus_blackbox_tests::running::config_text("")
        .replace("[broker]\n", "[broker]\nmax_delivery_count = 3\n")
        .replace(
            "[engine]\n",
            &format!(
                "[engine]\ntransient_backoff = \"{base}\"\ntransient_backoff_max = \"{max}\"\n"
            ),
        );
    let host = RunningHost::start_with_config(scratch, &config);
    let flaky = publish(
        &host,
        "Echo",
        "s-flaky",
        r#"{"Outcome":"Transient","ErrorType":"PartnerDown"}"#,
    );
    (host, flaky)
}

/// While an event is delivered again after a transient failure, the
/// Resolver still says Pending (no response is sent, SEMANTICS §3);
/// `nimbus event` says which delivery failed, why, and when the next comes.
#[test]
fn an_event_failing_transiently_shows_its_failure_while_it_waits() {
    let scratch = Scratch::new();
    // A backoff longer than the test: the event stays in its first wait.
    let (host, flaky) = publish_flaky(&scratch, "10m", "10m");
    let event = host.eventually("the transient failure is shown", || {
        let event = host.event_json(&flaky)?;
        (!event["endpoints"][0]["transient_failure"].is_null()).then_some(event)
    });
    let at = &event["endpoints"][0];
    assert_eq!(at["record"]["status"], "Pending", "{event:#}");
    let failure = &at["transient_failure"];
    assert_eq!(
        (
            &failure["delivery"],
            &failure["max_deliveries"],
            &failure["error_type"]
        ),
        (&json!(1), &json!(3), &json!("PartnerDown")),
        "{event:#}"
    );
    let shown = host.cli(&["event", &flaky]);
    let line = shown
        .stdout()
        .lines()
        .find(|l| l.starts_with("retrying"))
        .unwrap_or_else(|| panic!("no retrying line in\n{}", shown.stdout()))
        .to_owned();
    assert!(
        line.contains("delivery 1 of 3 failed transiently at ")
            && line.contains("(PartnerDown: ")
            && line.contains("; next delivery after "),
        "{line}"
    );
    let metrics = host.metrics();
    assert!(
        metrics
            .lines()
            .any(|l| l == "nimbus_retrying_events{endpoint=\"app\"} 1"),
        "{metrics}"
    );
    // The listing says it too, in the status and error columns.
    let listed = host.cli_json(&["events", "--json"]);
    assert_eq!(listed[0]["transient_failure"]["delivery"], 1, "{listed:#}");
    let table = host.cli(&["events"]).expect_code(0).stdout();
    let row = table
        .lines()
        .find(|l| l.contains("s-flaky"))
        .unwrap_or_else(|| panic!("no row in\n{table}"));
    assert!(
        row.contains("Pending (retrying: delivery 1 of 3 failed)") && row.ends_with("PartnerDown"),
        "{row}"
    );
}

/// A host killed while an event waits out its transient backoff does not
/// forget the failed delivery: the next one after the restart is the second,
/// so a crash loop still ends at the max delivery count.
#[test]
fn a_delivery_that_failed_transiently_still_counts_after_a_crash() {
    let scratch = Scratch::new();
    let (host, flaky) = publish_flaky(&scratch, "10m", "10m");
    let failed_once = |host: &RunningHost, delivery: u64| {
        host.eventually("the transient failure is noted", || {
            let event = host.event_json(&flaky)?;
            (event["endpoints"][0]["transient_failure"]["delivery"] == delivery).then_some(())
        });
    };
    failed_once(&host, 1);
    host.kill();
    let host = RunningHost::start_with_config(
        &scratch,
        &std::fs::read_to_string(scratch.path("nimbus.toml")).expect("the config"),
    );
    failed_once(&host, 2);
}

/// A transient failure sends no response (SEMANTICS §3): the warning, once
/// per event, is what tells an operator why its session waits.
#[test]
fn a_transient_failure_is_said_once_at_the_default_level() {
    let scratch = Scratch::new();
    let (host, flaky) = publish_flaky(&scratch, "50ms", "100ms");
    let dead = host.wait_status("s-flaky", &flaky, "DeadLettered");
    let log = host.stderr();
    let said: Vec<&str> = log
        .lines()
        .filter(|line| line.contains("failed transiently") && line.contains(&id(&dead)))
        .collect();
    assert_eq!(said.len(), 1, "{log}");
    assert!(
        said[0].contains("WARN") && said[0].contains("error_type=PartnerDown"),
        "{}",
        said[0]
    );
}

/// The event ids a bulk answer lists under `key`, sorted.
fn bulk_ids(answer: &serde_json::Value, key: &str) -> Vec<String> {
    let mut ids: Vec<String> = answer[key]
        .as_array()
        .unwrap_or_else(|| panic!("no {key} in {answer:#}"))
        .iter()
        .map(|e| e["event_id"].as_str().unwrap_or_default().to_owned())
        .collect();
    ids.sort();
    ids
}

/// After an outage an operator settles many blocked sessions at once:
/// `--dry-run` lists the Failed events a filter names and sends nothing;
/// the run sends one control message each; an event whose retry is
/// scheduled is left out unless asked for; a typo in the endpoint is an
/// error, not "nothing matched".
#[test]
fn every_failed_event_a_filter_names_is_resubmitted_or_skipped_at_once() {
    let scratch = Scratch::new();
    scratch.install("app", "echo", "echo");
    let host = RunningHost::start(
        &scratch,
        "[[retry.rules]]\nerror_type = \"Flaky\"\npolicy = { max_retries = 1, base_delay = \"1h\" }\n",
    );
    let failing = |session: &str, error_type: &str| {
        let message = publish(
            &host,
            "Echo",
            session,
            &format!(r#"{{"Outcome":"Failed","ErrorType":"{error_type}"}}"#),
        );
        id(&host.wait_status(session, &message, "Failed"))
    };
    let boom_1 = failing("s-1", "Boom");
    let boom_2 = failing("s-2", "Boom");
    let other = failing("s-3", "Other");
    let flaky = failing("s-4", "Flaky");
    let mut operator_owned = vec![boom_1.clone(), boom_2.clone(), other.clone()];
    operator_owned.sort();

    // A dry run chooses and sends nothing.
    let preview = host.cli(&["resubmit", "--all", "--dry-run"]);
    preview.expect_code(0);
    for event in &operator_owned {
        assert!(
            preview.stdout().contains(event.as_str()),
            "{}",
            preview.stdout()
        );
    }
    assert!(
        !preview.stdout().contains(flaky.as_str())
            && preview
                .stdout()
                .contains("dry run: would resubmit 3 event(s); nothing was sent"),
        "{}",
        preview.stdout()
    );
    assert!(
        preview
            .stderr()
            .contains("left out: 1 event(s) whose session waits for a scheduled retry"),
        "{}",
        preview.stderr()
    );
    let preview = host.cli_json(&["skip", "--all", "--dry-run", "--json"]);
    assert_eq!(bulk_ids(&preview, "chosen"), operator_owned);
    assert_eq!(bulk_ids(&preview, "awaiting_retry"), [flaky.as_str()]);
    assert_eq!(bulk_ids(&preview, "sent"), Vec::<String>::new());
    for session in ["s-1", "s-2", "s-3", "s-4"] {
        let events = host.cli_json(&["events", "--session", session, "--json"]);
        assert_eq!(events[0]["status"], "Failed", "{events:#}");
    }

    // Skip narrowed to one session, by error type in any case.
    let skipped = host.cli(&["skip", "--all", "--error-type", "boom", "--session", "s-2"]);
    skipped.expect_code(0);
    assert!(
        skipped.stdout().contains("skipped 1 of 1 event(s)") && skipped.stdout().contains(&boom_2),
        "{}",
        skipped.stdout()
    );
    host.eventually("the skip is recorded", || {
        let events = host.cli_json(&["events", "--session", "s-2", "--json"]);
        (events[0]["status"] == "Skipped").then_some(())
    });

    // Resubmit by error type: only the Boom event still Failed.
    let resubmitted = host.cli_json(&["resubmit", "--all", "--error-type", "Boom", "--json"]);
    assert_eq!(bulk_ids(&resubmitted, "chosen"), [boom_1.as_str()]);
    assert_eq!(bulk_ids(&resubmitted, "sent"), [boom_1.as_str()]);
    assert_eq!(
        resubmitted["sent"][0]["message_type"],
        "ResubmissionRequest"
    );
    host.eventually("the resubmission is in the event's history", || {
        let event = host.event_json(&boom_1)?;
        event["endpoints"][0]["history"]
            .as_array()?
            .iter()
            .any(|h| h["message_type"] == "ResubmissionRequest")
            .then_some(())
    });

    // The event awaiting its retry is resubmitted only when asked for.
    let nothing = host.cli(&["resubmit", "--all", "--session", "s-4"]);
    nothing.expect_code(0);
    assert!(
        nothing.stdout().contains("no Failed event matches"),
        "{}",
        nothing.stdout()
    );
    let asked = host.cli_json(&[
        "resubmit",
        "--all",
        "--session",
        "s-4",
        "--include-awaiting-retry",
        "--json",
    ]);
    assert_eq!(bulk_ids(&asked, "sent"), [flaky]);

    // Nothing has been Failed for an hour.
    let recent = host.cli(&["resubmit", "--all", "--older-than", "1h"]);
    recent.expect_code(0);
    assert!(
        recent.stdout().contains("no Failed event matches"),
        "{}",
        recent.stdout()
    );

    // Mistakes are named.
    let typo = host.cli(&["skip", "--all", "--endpoint", "ap"]);
    typo.expect_code(1);
    assert!(
        typo.stderr().contains("there is no endpoint 'ap'"),
        "{}",
        typo.stderr()
    );
    let bad_age = host.cli(&["skip", "--all", "--older-than", "soon"]);
    bad_age.expect_code(1);
    assert!(
        bad_age.stderr().contains("not_updated_for: 'soon'"),
        "{}",
        bad_age.stderr()
    );
    host.cli(&["resubmit", &other, "--all"]).expect_code(2);
    host.cli(&["resubmit", "--all", "--data", "{}"])
        .expect_code(2);
    host.cli(&["skip", "--dry-run"]).expect_code(2);
    host.cli(&["skip"]).expect_code(2);
}

/// While a system its handlers call is down, an operator pauses the
/// endpoint: its events wait in its queue instead of failing, the pause
/// holds across a restart, and a resume runs what waited.
#[test]
fn a_paused_endpoint_runs_nothing_across_a_restart_until_it_is_resumed() {
    let scratch = Scratch::new();
    scratch.install("app", "echo", "echo");
    let host = RunningHost::start(&scratch, "");
    let before = publish(&host, "Echo", "s-p", "{}");
    host.wait_status("s-p", &before, "Completed");

    let paused = host.cli(&["pause", "app"]);
    paused.expect_code(0);
    assert!(
        paused.stdout().contains("endpoint app is paused since "),
        "{}",
        paused.stdout()
    );
    assert!(
        host.cli(&["pause", "app"])
            .expect_code(0)
            .stdout()
            .contains("(it already was)")
    );
    let published = publish_run(&host, "Echo", "s-p", "{}");
    published.expect_code(0);
    assert!(
        published
            .stderr()
            .contains("note: app is paused: the event waits in its queue until `nimbus resume`"),
        "{}",
        published.stderr()
    );
    let waiting = published.stdout().trim().to_owned();
    host.wait_status("s-p", &waiting, "Pending");
    let listed = host.cli(&["events", "--session", "s-p"]);
    assert!(
        listed
            .stdout()
            .contains("Pending (waiting: endpoint paused)"),
        "{}",
        listed.stdout()
    );
    // Long enough for an accept, a receive and a run.
    std::thread::sleep(std::time::Duration::from_millis(1500));
    host.wait_status("s-p", &waiting, "Pending");
    let (code, _) = host.terminate();
    assert_eq!(code, Some(0));

    let host = RunningHost::start(&scratch, "");
    let endpoints = host.cli_json(&["endpoints", "--json"]);
    assert_eq!(endpoints[0]["endpoint"], "app", "{endpoints:#}");
    assert_eq!(endpoints[0]["paused"], true, "{endpoints:#}");
    assert!(
        host.cli(&["endpoints"])
            .expect_code(0)
            .stdout()
            .contains("paused since "),
    );
    assert!(
        host.metrics()
            .contains("nimbus_endpoint_paused{endpoint=\"app\"} 1"),
        "{}",
        host.metrics()
    );
    host.eventually("the start says the endpoint is paused", || {
        host.stderr()
            .contains("endpoint started paused")
            .then_some(())
    });
    std::thread::sleep(std::time::Duration::from_millis(1500));
    host.wait_status("s-p", &waiting, "Pending");

    let resumed = host.cli(&["resume", "app"]);
    resumed.expect_code(0);
    assert!(
        resumed.stdout().contains("endpoint app is running"),
        "{}",
        resumed.stdout()
    );
    host.wait_status("s-p", &waiting, "Completed");
    assert_eq!(host.cli_json(&["endpoints", "--json"])[0]["paused"], false);
    assert!(
        host.metrics()
            .contains("nimbus_endpoint_paused{endpoint=\"app\"} 0"),
        "{}",
        host.metrics()
    );

    let unknown = host.cli(&["pause", "ap"]);
    unknown.expect_code(1);
    assert!(
        unknown
            .stderr()
            .contains("there is no endpoint 'ap' (known: app)"),
        "{}",
        unknown.stderr()
    );
}
