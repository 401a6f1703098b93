//! The delivery scenarios of `reference/scenarios.md`, group by group, on the
//! real host (SEMANTICS.md wins where they differ): `Host::start` on a temp
//! dir, real components from `examples/` and `tests/guests/` in the handlers
//! directory, events published to the `publisher` topic, operator actions
//! through `nimbus-manager`, outcomes read from the Resolver store and, for
//! the follow-ups handlers publish, from tap subscriptions on the endpoint
//! topics (the broker's sequence order is the order handlers completed in).
//!
//! One host serves every test of this file (each test uses its own
//! sessions), so the components compile once. The `echo` guest is driven by
//! its payload; every traced event publishes a `Trace` follow-up naming its
//! MessageId, which is published only when the handler's outcome is
//! completed or a pending handoff (SEMANTICS.md §9) — so the tap tells which
//! events a handler completed, how often, and in which order.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

use crate::support;

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::OnceLock;

use nimbus_resolver::{EventRecord, HANDOFF_SUB_STATUS, ResolverStore, Status};
use nimbus_runtime::Host;
use nimbus_transport::SubscriptionPath;
use nimbus_wire::{EventContent, MessageContent, MessageType, NimbusMessage, build};
use serde_json::{Value, json};
use support::{
    create_tap, detail, drain_tap, eventually, install, manager, parked_message_ids, publish,
    record, send, send_signed, session_state, start_host, wait_for, wait_status,
};

const ECHO: &str = "echoes";
const NOTIFY: &str = "notify";
const SWAP: &str = "swap";
const ALPHA: &str = "alpha";
const BETA: &str = "beta";
/// An endpoint whose only handler (`panicker`, serving `Panic`) a test
/// removes while the host runs.
const RETIRED: &str = "retired";

/// Each tap by (topic, event type): its subscription and what it has seen.
type Taps = BTreeMap<(String, String), (SubscriptionPath, Vec<NimbusMessage>)>;

/// The host every test of this file shares, with its runtime and taps.
struct Shared {
    runtime: tokio::runtime::Runtime,
    host: Host,
    taps: tokio::sync::Mutex<Taps>,
    _root: tempfile::TempDir,
}

static SHARED: OnceLock<Shared> = OnceLock::new();

fn shared() -> &'static Shared {
    SHARED.get_or_init(|| {
        let root = tempfile::Builder::new()
            .prefix("scenarios-")
            .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
            .expect("temp dir");
        let handlers = root.path().join("handlers");
        install(&handlers, ECHO, "echo", "echo");
        install(&handlers, NOTIFY, "notifier", "notifier");
        install(&handlers, SWAP, "swap_v1", "swap");
        install(&handlers, ALPHA, "noop", "noop");
        install(&handlers, BETA, "noop", "noop");
        install(&handlers, RETIRED, "panicker", "panicker");
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        let (host, taps) = runtime.block_on(async {
            let host = start_host(root.path(), 3).await;
            let mut taps = BTreeMap::new();
            for (topic, event_type) in [
                (ECHO, "Trace"),
                (ECHO, "EchoFollowUp"),
                (ECHO, "EchoDescribed"),
                (NOTIFY, "CustomerNotified"),
                (SWAP, "SwapServed"),
            ] {
                let path = create_tap(host.broker().unwrap(), topic, event_type).await;
                taps.insert(
                    (topic.to_owned(), event_type.to_owned()),
                    (path, Vec::new()),
                );
            }
            (host, taps)
        });
        Shared {
            runtime,
            host,
            taps: tokio::sync::Mutex::new(taps),
            _root: root,
        }
    })
}

/// Runs a test body on the shared host's runtime.
fn on_host<F: Future<Output = ()>>(body: impl FnOnce(&'static Host) -> F) {
    let shared = shared();
    shared.runtime.block_on(body(&shared.host));
}

/// Every message the tap on `topic` for `event_type` has seen so far, in
/// broker order.
async fn tapped(topic: &str, event_type: &str) -> Vec<NimbusMessage> {
    let shared = shared();
    let mut taps = shared.taps.lock().await;
    let (path, seen) = taps
        .get_mut(&(topic.to_owned(), event_type.to_owned()))
        .expect("a tap for this topic and event type");
    let new = drain_tap(shared.host.broker().unwrap(), path).await;
    seen.extend(new);
    seen.clone()
}

/// The MessageIds of the traced events of `session` the handler completed,
/// in the order it completed them.
async fn traces(session: &str) -> Vec<String> {
    tapped(ECHO, "Trace")
        .await
        .iter()
        .filter(|m| m.session_id.as_deref() == Some(session))
        .map(|m| {
            let payload: Value = serde_json::from_str(m.event_json().expect("trace payload"))
                .expect("trace payload is JSON");
            payload["MessageId"].as_str().expect("MessageId").to_owned()
        })
        .collect()
}

/// Waits until `session`'s traces are exactly `expected`.
async fn wait_traces(session: &str, expected: &[&str]) {
    let started = std::time::Instant::now();
    loop {
        let seen = traces(session).await;
        if seen == expected {
            return;
        }
        assert!(
            seen.len() <= expected.len() && started.elapsed() < support::DEADLINE,
            "session {session}: handler completions {seen:?}, expected {expected:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// An `echo` script that also publishes a `Trace` naming `message_id`.
fn traced(message_id: &str, mut script: Value) -> Value {
    script["FollowUps"] = json!([{
        "EventType": "Trace",
        "MessageId": format!("{message_id}:trace"),
        "Payload": {"MessageId": message_id},
    }]);
    script
}

fn fails(error_type: &str) -> Value {
    json!({"Outcome": "Failed", "ErrorType": error_type, "Message": format!("{error_type} on purpose")})
}

async fn echo(host: &Host, session: &str, message_id: &str, script: Value) {
    publish(host.broker().unwrap(), "Echo", session, message_id, &script).await;
}

async fn status(host: &Host, session: &str, message_id: &str, status: Status) -> EventRecord {
    wait_status(&**host.resolver(), ECHO, session, message_id, status).await
}

fn ok() -> Value {
    json!({})
}

/// How many history entries of the event have this message type.
fn count_in_history(host: &Host, record: &EventRecord, message_type: &str) -> usize {
    detail(&**host.resolver(), &record.event_id, &record.endpoint)
        .history
        .iter()
        .filter(|h| h.message_type == message_type)
        .count()
}

/// The `RetryCount` of each ErrorResponse in the event's history, in order:
/// one entry per failed handler run.
fn error_retry_counts(host: &Host, record: &EventRecord) -> Vec<u32> {
    detail(&**host.resolver(), &record.event_id, &record.endpoint)
        .history
        .iter()
        .filter(|h| h.message_type == "ErrorResponse")
        .map(|h| h.retry_count)
        .collect()
}

/// Waits until the event has at least `n` ErrorResponses (failed handler
/// runs), then returns their retry counts.
async fn wait_error_responses(host: &Host, record: &EventRecord, n: usize) -> Vec<u32> {
    let started = std::time::Instant::now();
    loop {
        let counts = error_retry_counts(host, record);
        if counts.len() >= n {
            return counts;
        }
        assert!(
            started.elapsed() < support::DEADLINE,
            "{} never had {n} ErrorResponses; their retry counts: {counts:?}",
            record.event_id
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

fn digest_of(host: &Host, endpoint: &str, event_type: &str) -> String {
    host.registry()
        .lookup(endpoint, event_type)
        .expect("a handler serves the event type")
        .id()
        .to_owned()
}

// ---- 1. Happy path -------------------------------------------------------

#[test]
fn hp_an_event_whose_handler_completes_is_recorded_completed_with_its_version_and_correlation() {
    on_host(|host| async move {
        echo(host, "hp-1", "hp-1-e1", traced("hp-1-e1", ok())).await;
        let done = status(host, "hp-1", "hp-1-e1", Status::Completed).await;
        assert_eq!(
            done.handler_version.as_deref(),
            Some(digest_of(host, ECHO, "Echo").as_str())
        );
        assert_eq!(done.correlation_id.as_deref(), Some("corr-hp-1-e1"));
        assert_eq!(done.event_type.as_deref(), Some("Echo"));
        assert_eq!(count_in_history(host, &done, "ResolutionResponse"), 1);
        wait_traces("hp-1", &["hp-1-e1"]).await;
    });
}

// ---- 2/3. Failure, block, parking ----------------------------------------

#[test]
fn fb_a_failed_event_blocks_its_session_and_parks_later_events_while_other_sessions_run() {
    on_host(|host| async move {
        echo(
            host,
            "fb-1",
            "fb-1-e1",
            traced("fb-1-e1", fails("EchoError")),
        )
        .await;
        echo(host, "fb-1", "fb-1-e2", traced("fb-1-e2", ok())).await;
        echo(host, "fb-1", "fb-1-e3", traced("fb-1-e3", ok())).await;
        echo(host, "fb-other", "fb-other-e1", ok()).await;
        let failed = status(host, "fb-1", "fb-1-e1", Status::Failed).await;
        assert_eq!(failed.error_type.as_deref(), Some("EchoError"));
        assert!(
            failed
                .error_text
                .as_deref()
                .unwrap_or("")
                .contains("EchoError on purpose"),
            "{failed:?}"
        );
        // No policy matches EchoError: no automatic retry.
        assert_eq!(failed.retry_count, 0);
        status(host, "fb-1", "fb-1-e2", Status::Deferred).await;
        status(host, "fb-1", "fb-1-e3", Status::Deferred).await;
        status(host, "fb-other", "fb-other-e1", Status::Completed).await;
        // Failed outcomes publish nothing, and the parked events never ran.
        assert_eq!(traces("fb-1").await, Vec::<String>::new());
    });
}

// ---- 4. Resubmit ---------------------------------------------------------

#[test]
fn rs_resubmitting_the_blocker_replays_parked_events_in_order_before_later_arrivals() {
    on_host(|host| async move {
        let s = "rs-1";
        echo(host, s, "rs-1-e1", traced("rs-1-e1", fails("EchoError"))).await;
        echo(host, s, "rs-1-e2", traced("rs-1-e2", ok())).await;
        echo(host, s, "rs-1-e3", traced("rs-1-e3", ok())).await;
        let blocker = status(host, s, "rs-1-e1", Status::Failed).await;
        status(host, s, "rs-1-e3", Status::Deferred).await;
        let fixed = traced("rs-1-e1", ok()).to_string();
        let sent = manager(host)
            .resubmit(&blocker.event_id, Some(ECHO), Some(&fixed))
            .await
            .expect("resubmit");
        assert_eq!(sent.status_before, Status::Failed);
        // Arrives while the parked events may still be replaying: it must
        // not overtake them (SEMANTICS.md §4, F2).
        echo(host, s, "rs-1-e4", traced("rs-1-e4", ok())).await;
        wait_traces(s, &["rs-1-e1", "rs-1-e2", "rs-1-e3", "rs-1-e4"]).await;
        for id in ["rs-1-e1", "rs-1-e2", "rs-1-e3", "rs-1-e4"] {
            status(host, s, id, Status::Completed).await;
        }
    });
}

#[test]
fn rs_a_failed_resubmission_keeps_the_block_and_the_parked_events() {
    on_host(|host| async move {
        let s = "rs-2";
        echo(host, s, "rs-2-e1", fails("EchoError")).await;
        echo(host, s, "rs-2-e2", traced("rs-2-e2", ok())).await;
        let blocker = status(host, s, "rs-2-e1", Status::Failed).await;
        status(host, s, "rs-2-e2", Status::Deferred).await;
        let still_broken = fails("StillBroken").to_string();
        manager(host)
            .resubmit(&blocker.event_id, Some(ECHO), Some(&still_broken))
            .await
            .expect("resubmit");
        let failed = wait_for(
            &**host.resolver(),
            ECHO,
            s,
            "rs-2-e1",
            "failed again",
            |r| r.status == Status::Failed && r.error_type.as_deref() == Some("StillBroken"),
        )
        .await;
        assert_eq!(failed.status, Status::Failed);
        // Still parked behind it; skipping it now lets it through.
        status(host, s, "rs-2-e2", Status::Deferred).await;
        manager(host)
            .skip(&blocker.event_id, Some(ECHO))
            .await
            .expect("skip");
        status(host, s, "rs-2-e1", Status::Skipped).await;
        wait_traces(s, &["rs-2-e2"]).await;
    });
}

#[test]
fn rs05_a_failed_resubmission_matching_a_retry_rule_is_retried_with_a_fresh_budget() {
    on_host(|host| async move {
        let s = "rs-5";
        echo(host, s, "rs-5-e1", traced("rs-5-e1", fails("Flaky"))).await;
        echo(host, s, "rs-5-e2", traced("rs-5-e2", ok())).await;
        // `Flaky`: max_retries = 2, spent by the first attempt's retries.
        let spent = wait_for(
            &**host.resolver(),
            ECHO,
            s,
            "rs-5-e1",
            "failed after 2 retries",
            |r| r.status == Status::Failed && r.retry_count == 2,
        )
        .await;
        assert_eq!(error_retry_counts(host, &spent), vec![0, 1, 2]);
        status(host, s, "rs-5-e2", Status::Deferred).await;
        let still_flaky = traced("rs-5-e1", fails("Flaky")).to_string();
        manager(host)
            .resubmit(&spent.event_id, Some(ECHO), Some(&still_flaky))
            .await
            .expect("resubmit");
        // F14: the failed resubmission keeps the block and is retried by the
        // policy with a fresh budget: two more retries, counted from 1 again.
        let counts = wait_error_responses(host, &spent, 6).await;
        assert_eq!(counts, vec![0, 1, 2, 0, 1, 2], "retry counts");
        let failed = record(&**host.resolver(), ECHO, s, "rs-5-e1").expect("recorded");
        assert_eq!(failed.status, Status::Failed);
        assert_eq!(failed.retry_count, 2);
        let state = session_state(host.broker().unwrap(), ECHO, s).await;
        assert_eq!(
            state.blocked_by(),
            Some(spent.event_id.as_str()),
            "{state:?}"
        );
        let parked = record(&**host.resolver(), ECHO, s, "rs-5-e2").expect("recorded");
        assert_eq!(parked.status, Status::Deferred, "the block stays");
        assert_eq!(traces(s).await, Vec::<String>::new());
        let fixed = traced("rs-5-e1", ok()).to_string();
        manager(host)
            .resubmit(&spent.event_id, Some(ECHO), Some(&fixed))
            .await
            .expect("resubmit the fix");
        wait_traces(s, &["rs-5-e1", "rs-5-e2"]).await;
    });
}

#[test]
fn rs05_a_failed_resubmission_carrying_a_spent_retry_count_still_gets_a_fresh_budget() {
    on_host(|host| async move {
        let s = "rs-6";
        echo(host, s, "rs-6-e1", fails("Flaky")).await;
        let spent = wait_for(
            &**host.resolver(),
            ECHO,
            s,
            "rs-6-e1",
            "failed after 2 retries",
            |r| r.status == Status::Failed && r.retry_count == 2,
        )
        .await;
        assert_eq!(error_retry_counts(host, &spent), vec![0, 1, 2]);
        // A resubmission as a Manager may send it: the failed message's
        // RetryCount (2, the budget spent) carried over.
        let event = NimbusMessage {
            message_id: Some("rs-6-e1".to_owned()),
            session_id: Some(s.to_owned()),
            correlation_id: Some("corr-rs-6-e1".to_owned()),
            to: Some(ECHO.to_owned()),
            from: Some("publisher".to_owned()),
            message_type: MessageType::EventRequest,
            event_id: Some(spent.event_id.clone()),
            event_type_id: Some("Echo".to_owned()),
            content: Some(MessageContent::event(EventContent::new(
                "Echo".to_owned(),
                fails("Flaky").to_string(),
            ))),
            ..NimbusMessage::default()
        };
        let mut resubmission = build::resubmission_request(&event, ECHO, None);
        resubmission.message_id = Some("rs-6-resubmission".to_owned());
        resubmission.retry_count = 2;
        send_signed(host, ECHO, &resubmission).await;
        // Fresh budget (F14): the resubmission's failure is retried twice,
        // with RetryCount 1 then 2, whatever RetryCount it arrived with.
        let counts = wait_error_responses(host, &spent, 6).await;
        assert_eq!(counts.len(), 6, "{counts:?}");
        assert_eq!(counts[..3], [0, 1, 2], "{counts:?}");
        assert_eq!(counts[4..], [1, 2], "the retries of the resubmission");
        let failed = record(&**host.resolver(), ECHO, s, "rs-6-e1").expect("recorded");
        assert_eq!(failed.status, Status::Failed);
        assert_eq!(failed.retry_count, 2);
        manager(host)
            .skip(&spent.event_id, Some(ECHO))
            .await
            .expect("skip");
        status(host, s, "rs-6-e1", Status::Skipped).await;
    });
}

#[test]
fn rs04_a_resubmission_no_handler_serves_any_more_is_unsupported_and_the_block_stays() {
    on_host(|host| async move {
        let s = "rs-4";
        let store = &**host.resolver();
        // `panicker` fails every `Panic` event: e1 blocks, e2 is parked.
        publish(host.broker().unwrap(), "Panic", s, "rs-4-e1", &json!({})).await;
        publish(host.broker().unwrap(), "Panic", s, "rs-4-e2", &json!({})).await;
        let failed = wait_status(store, RETIRED, s, "rs-4-e1", Status::Failed).await;
        assert_eq!(failed.error_type.as_deref(), Some("Panic"));
        wait_status(store, RETIRED, s, "rs-4-e2", Status::Deferred).await;
        // The handler is removed: no handler serves `Panic` any more.
        let root = host.config().config.host.handlers_dir.clone();
        std::fs::remove_file(root.join(RETIRED).join("panicker.wasm")).expect("remove");
        host.registry().reconcile().expect("reload the handlers");
        assert!(host.registry().lookup(RETIRED, "Panic").is_none());
        manager(host)
            .resubmit(&failed.event_id, Some(RETIRED), None)
            .await
            .expect("resubmit");
        // F11: UnsupportedResponse and completed; the event owns the block,
        // so the block stays until an operator acts.
        let unsupported = wait_status(store, RETIRED, s, "rs-4-e1", Status::Unsupported).await;
        assert_eq!(
            count_in_history(host, &unsupported, "UnsupportedResponse"),
            1
        );
        assert_eq!(count_in_history(host, &unsupported, "ErrorResponse"), 1);
        let state = session_state(host.broker().unwrap(), RETIRED, s).await;
        assert_eq!(
            state.blocked_by(),
            Some(failed.event_id.as_str()),
            "the block stays: {state:?}"
        );
        assert_eq!(state.deferred_count, 1, "{state:?}");
        let parked = record(store, RETIRED, s, "rs-4-e2").expect("recorded");
        assert_eq!(parked.status, Status::Deferred);
        // The operator skips it: e2 runs, and has no handler either.
        manager(host)
            .skip(&failed.event_id, Some(RETIRED))
            .await
            .expect("skip");
        wait_status(store, RETIRED, s, "rs-4-e1", Status::Skipped).await;
        wait_status(store, RETIRED, s, "rs-4-e2", Status::Unsupported).await;
    });
}

// ---- 5. Skip -------------------------------------------------------------

#[test]
fn sk_skipping_the_blocker_records_it_skipped_and_replays_the_parked_events_in_order() {
    on_host(|host| async move {
        let s = "sk-1";
        echo(host, s, "sk-1-e1", traced("sk-1-e1", fails("EchoError"))).await;
        for id in ["sk-1-e2", "sk-1-e3", "sk-1-e4"] {
            echo(host, s, id, traced(id, ok())).await;
        }
        let blocker = status(host, s, "sk-1-e1", Status::Failed).await;
        status(host, s, "sk-1-e4", Status::Deferred).await;
        manager(host)
            .skip(&blocker.event_id, Some(ECHO))
            .await
            .expect("skip");
        echo(host, s, "sk-1-e5", traced("sk-1-e5", ok())).await;
        wait_traces(s, &["sk-1-e2", "sk-1-e3", "sk-1-e4", "sk-1-e5"]).await;
        let skipped = status(host, s, "sk-1-e1", Status::Skipped).await;
        assert_eq!(count_in_history(host, &skipped, "SkipResponse"), 1);
    });
}

#[test]
fn sk_a_parked_event_the_operator_skipped_stays_skipped_and_never_runs() {
    on_host(|host| async move {
        let s = "sk-2";
        echo(host, s, "sk-2-e1", traced("sk-2-e1", fails("EchoError"))).await;
        for id in ["sk-2-e2", "sk-2-e3", "sk-2-e4"] {
            echo(host, s, id, traced(id, ok())).await;
        }
        let blocker = status(host, s, "sk-2-e1", Status::Failed).await;
        let parked = status(host, s, "sk-2-e3", Status::Deferred).await;
        status(host, s, "sk-2-e4", Status::Deferred).await;
        let sent = manager(host)
            .skip(&parked.event_id, Some(ECHO))
            .await
            .expect("skip the parked event");
        assert!(
            sent.notes
                .iter()
                .any(|n| n.contains("dropped without running")),
            "{:?}",
            sent.notes
        );
        status(host, s, "sk-2-e3", Status::Skipped).await;
        let fixed = traced("sk-2-e1", ok()).to_string();
        manager(host)
            .resubmit(&blocker.event_id, Some(ECHO), Some(&fixed))
            .await
            .expect("resubmit the blocker");
        echo(host, s, "sk-2-e5", traced("sk-2-e5", ok())).await;
        // e3's parked copy came back with the others and was dropped: the
        // handler ran the rest in order and never e3.
        wait_traces(s, &["sk-2-e1", "sk-2-e2", "sk-2-e4", "sk-2-e5"]).await;
        status(host, s, "sk-2-e5", Status::Completed).await;
        let skipped = status(host, s, "sk-2-e3", Status::Skipped).await;
        assert_eq!(count_in_history(host, &skipped, "SkipResponse"), 1);
        assert_eq!(count_in_history(host, &skipped, "ResolutionResponse"), 0);
        let state = session_state(host.broker().unwrap(), ECHO, s).await;
        assert_eq!(
            state,
            nimbus_wire::SessionState::default(),
            "nothing parked or remembered"
        );
    });
}

#[test]
fn rs_a_parked_event_resubmitted_out_of_turn_runs_once_not_again_on_replay() {
    on_host(|host| async move {
        let s = "rs-6";
        echo(host, s, "rs-6-e1", traced("rs-6-e1", fails("EchoError"))).await;
        for id in ["rs-6-e2", "rs-6-e3"] {
            echo(host, s, id, traced(id, ok())).await;
        }
        let blocker = status(host, s, "rs-6-e1", Status::Failed).await;
        let parked = status(host, s, "rs-6-e3", Status::Deferred).await;
        let sent = manager(host)
            .resubmit(&parked.event_id, Some(ECHO), None)
            .await
            .expect("resubmit the parked event");
        assert!(
            sent.notes
                .iter()
                .any(|n| n.contains("ahead of the events parked before it")),
            "{:?}",
            sent.notes
        );
        // It runs now, out of turn; the block stays.
        wait_traces(s, &["rs-6-e3"]).await;
        status(host, s, "rs-6-e3", Status::Completed).await;
        let fixed = traced("rs-6-e1", ok()).to_string();
        manager(host)
            .resubmit(&blocker.event_id, Some(ECHO), Some(&fixed))
            .await
            .expect("resubmit the blocker");
        echo(host, s, "rs-6-e4", traced("rs-6-e4", ok())).await;
        wait_traces(s, &["rs-6-e3", "rs-6-e1", "rs-6-e2", "rs-6-e4"]).await;
        status(host, s, "rs-6-e4", Status::Completed).await;
        let once = status(host, s, "rs-6-e3", Status::Completed).await;
        assert_eq!(count_in_history(host, &once, "ResolutionResponse"), 1);
        let state = session_state(host.broker().unwrap(), ECHO, s).await;
        assert_eq!(state, nimbus_wire::SessionState::default());
    });
}

#[test]
fn dr_a_replayed_event_that_fails_blocks_again_and_the_rest_stay_parked_in_order() {
    on_host(|host| async move {
        let s = "dr-1";
        echo(host, s, "dr-1-e1", fails("EchoError")).await;
        echo(
            host,
            s,
            "dr-1-e2",
            traced("dr-1-e2", fails("SecondFailure")),
        )
        .await;
        echo(host, s, "dr-1-e3", traced("dr-1-e3", ok())).await;
        echo(host, s, "dr-1-e4", traced("dr-1-e4", ok())).await;
        let first = status(host, s, "dr-1-e1", Status::Failed).await;
        status(host, s, "dr-1-e4", Status::Deferred).await;
        manager(host)
            .skip(&first.event_id, Some(ECHO))
            .await
            .expect("skip");
        let second = status(host, s, "dr-1-e2", Status::Failed).await;
        assert_eq!(second.error_type.as_deref(), Some("SecondFailure"));
        // A new arrival now must queue behind the still-parked e3 and e4.
        echo(host, s, "dr-1-e5", traced("dr-1-e5", ok())).await;
        status(host, s, "dr-1-e5", Status::Deferred).await;
        for id in ["dr-1-e3", "dr-1-e4"] {
            let parked = record(&**host.resolver(), ECHO, s, id).expect("recorded");
            assert_eq!(parked.status, Status::Deferred, "{id}");
        }
        assert_eq!(traces(s).await, Vec::<String>::new());
        let fixed = traced("dr-1-e2", ok()).to_string();
        manager(host)
            .resubmit(&second.event_id, Some(ECHO), Some(&fixed))
            .await
            .expect("resubmit");
        wait_traces(s, &["dr-1-e2", "dr-1-e3", "dr-1-e4", "dr-1-e5"]).await;
    });
}

#[test]
fn rb01_a_redelivery_of_the_blocking_event_is_completed_silently_and_the_block_stays() {
    on_host(|host| async move {
        let s = "rb-1";
        echo(host, s, "rb-1-e1", traced("rb-1-e1", fails("EchoError"))).await;
        let blocker = status(host, s, "rb-1-e1", Status::Failed).await;
        let responses_before = count_in_history(host, &blocker, "ErrorResponse");
        assert_eq!(responses_before, 1);
        // The same request again, as the broker would redeliver it: same
        // EventId, MessageId and session, straight to the endpoint.
        let redelivery = NimbusMessage {
            message_id: Some("rb-1-e1".to_owned()),
            session_id: Some(s.to_owned()),
            correlation_id: Some("corr-rb-1-e1".to_owned()),
            to: Some(ECHO.to_owned()),
            from: Some("publisher".to_owned()),
            message_type: MessageType::EventRequest,
            event_id: Some(blocker.event_id.clone()),
            event_type_id: Some("Echo".to_owned()),
            content: Some(MessageContent::event(EventContent::new(
                "Echo".to_owned(),
                traced("rb-1-e1", ok()).to_string(),
            ))),
            ..NimbusMessage::default()
        };
        send(host.broker().unwrap(), ECHO, &redelivery).await;
        // Session order: once a later event is parked, the redelivery was
        // handled before it.
        echo(host, s, "rb-1-e2", traced("rb-1-e2", ok())).await;
        status(host, s, "rb-1-e2", Status::Deferred).await;
        let after = record(&**host.resolver(), ECHO, s, "rb-1-e1").expect("recorded");
        assert_eq!(after.status, Status::Failed, "the block stays");
        assert_eq!(count_in_history(host, &after, "ErrorResponse"), 1);
        assert_eq!(count_in_history(host, &after, "ResolutionResponse"), 0);
        // Upstream's hazard (F3): the blocker parked behind itself, with a
        // DeferralResponse, to run again once unblocked. Only e2 is parked.
        assert_eq!(
            count_in_history(host, &after, "DeferralResponse"),
            0,
            "the redelivered blocker was not parked behind itself"
        );
        let state = session_state(host.broker().unwrap(), ECHO, s).await;
        assert_eq!(state.blocked_by(), Some(blocker.event_id.as_str()));
        assert_eq!(state.deferred_count, 1, "only e2 is parked: {state:?}");
        assert_eq!(
            parked_message_ids(host.broker().unwrap(), ECHO, s).await,
            vec!["rb-1-e2".to_owned()],
            "the Deferred subscription holds e2 only"
        );
        assert_eq!(
            traces(s).await,
            Vec::<String>::new(),
            "the handler did not run"
        );
    });
}

// ---- 6. Retry policy -----------------------------------------------------

#[test]
fn rp_a_failure_matching_a_retry_rule_is_retried_by_policy_then_blocks() {
    on_host(|host| async move {
        let s = "rp-1";
        echo(host, s, "rp-1-e1", traced("rp-1-e1", fails("Flaky"))).await;
        echo(host, s, "rp-1-e2", traced("rp-1-e2", ok())).await;
        // max_retries = 2: the first attempt and two retries, then it stays
        // Failed with RetryCount 2.
        let failed = wait_for(
            &**host.resolver(),
            ECHO,
            s,
            "rp-1-e1",
            "failed after 2 retries",
            |r| r.status == Status::Failed && r.retry_count == 2,
        )
        .await;
        let history = detail(&**host.resolver(), &failed.event_id, ECHO).history;
        let error_retry_counts: Vec<u32> = history
            .iter()
            .filter(|h| h.message_type == "ErrorResponse")
            .map(|h| h.retry_count)
            .collect();
        assert_eq!(error_retry_counts, vec![0, 1, 2], "{history:#?}");
        status(host, s, "rp-1-e2", Status::Deferred).await;
        assert_eq!(traces(s).await, Vec::<String>::new());
        let fixed = traced("rp-1-e1", ok()).to_string();
        manager(host)
            .resubmit(&failed.event_id, Some(ECHO), Some(&fixed))
            .await
            .expect("resubmit");
        wait_traces(s, &["rp-1-e1", "rp-1-e2"]).await;
    });
}

#[test]
fn rp_a_failure_no_policy_matches_is_not_retried() {
    on_host(|host| async move {
        let s = "rp-2";
        echo(host, s, "rp-2-e1", fails("NoPolicyForThis")).await;
        let failed = status(host, s, "rp-2-e1", Status::Failed).await;
        assert_eq!(failed.retry_count, 0);
        // A RetryRequest has no Resolver copy, so a retry shows only when it
        // runs: as another failed run (ErrorResponse). The latest any policy
        // of this host retries is `Slow`'s 2 s. A control event in another
        // session fails with `Slow` after e1 failed: once its retry has run,
        // any retry of e1 a policy could have scheduled is enqueued too.
        echo(host, "rp-2-control", "rp-2-c1", fails("Slow")).await;
        let control = wait_for(
            &**host.resolver(),
            ECHO,
            "rp-2-control",
            "rp-2-c1",
            "retried once",
            |r| r.status == Status::Failed && r.retry_count == 1,
        )
        .await;
        assert_eq!(error_retry_counts(host, &control), vec![0, 1]);
        // Session order: e2 arrives after any such retry of e1, so once e2 is
        // parked that retry would have run (and failed) before it.
        echo(host, s, "rp-2-e2", ok()).await;
        status(host, s, "rp-2-e2", Status::Deferred).await;
        let after = record(&**host.resolver(), ECHO, s, "rp-2-e1").expect("recorded");
        assert_eq!(after.status, Status::Failed);
        assert_eq!(after.retry_count, 0, "not retried: {after:?}");
        assert_eq!(
            error_retry_counts(host, &after),
            vec![0],
            "the handler ran exactly once"
        );
    });
}

#[test]
fn rb04_a_retry_that_arrives_after_the_operator_resubmitted_is_dropped_silently() {
    on_host(|host| async move {
        let s = "rb-4";
        // `Slow`: one retry, scheduled 2 s out.
        echo(host, s, "rb-4-e1", traced("rb-4-e1", fails("Slow"))).await;
        let blocker = status(host, s, "rb-4-e1", Status::Failed).await;
        let fixed = traced("rb-4-e1", ok()).to_string();
        manager(host)
            .resubmit(&blocker.event_id, Some(ECHO), Some(&fixed))
            .await
            .expect("resubmit");
        let done = status(host, s, "rb-4-e1", Status::Completed).await;
        assert_eq!(done.status, Status::Completed);
        // The retry is scheduled 2 s after the failure and the Resolver keeps
        // no copy of it, so nothing observable says it has fired: wait past
        // its time. Should it fire later, the checks below still hold; they
        // only become weaker, never wrong.
        tokio::time::sleep(std::time::Duration::from_secs(3)).await;
        // Session order: once a later event completes, the stale retry was
        // handled before it.
        echo(host, s, "rb-4-e2", traced("rb-4-e2", ok())).await;
        status(host, s, "rb-4-e2", Status::Completed).await;
        let after = record(&**host.resolver(), ECHO, s, "rb-4-e1").expect("recorded");
        assert_eq!(
            after.status,
            Status::Completed,
            "the stale retry changed nothing"
        );
        assert_eq!(count_in_history(host, &after, "ErrorResponse"), 1);
        assert_eq!(count_in_history(host, &after, "ResolutionResponse"), 1);
        wait_traces(s, &["rb-4-e1", "rb-4-e2"]).await;
    });
}

// ---- 7. Transient --------------------------------------------------------

#[test]
fn tr_a_transient_failure_is_abandoned_and_dead_lettered_at_the_max_delivery_count() {
    on_host(|host| async move {
        let s = "tr-1";
        let transient =
            json!({"Outcome": "Transient", "ErrorType": "PartnerUnavailable", "Message": "503"});
        echo(host, s, "tr-1-e1", traced("tr-1-e1", transient)).await;
        echo(host, s, "tr-1-e2", traced("tr-1-e2", ok())).await;
        let dead = status(host, s, "tr-1-e1", Status::DeadLettered).await;
        assert!(
            dead.dead_letter_reason
                .as_deref()
                .unwrap_or("")
                .contains("MaxDeliveryCount"),
            "{dead:?}"
        );
        // The session is not blocked.
        status(host, s, "tr-1-e2", Status::Completed).await;
        wait_traces(s, &["tr-1-e2"]).await;
    });
}

/// What `echo` saw of the deliveries of the event `event_id` that completed
/// (its `EchoDescribed` follow-ups, sent only with a completed outcome).
async fn described(event_id: &str) -> Vec<Value> {
    let started = std::time::Instant::now();
    loop {
        let seen: Vec<Value> = tapped(ECHO, "EchoDescribed")
            .await
            .iter()
            .map(|m| serde_json::from_str(m.event_json().expect("payload")).expect("JSON"))
            .filter(|d: &Value| d["EventId"] == event_id)
            .collect();
        if !seen.is_empty() {
            return seen;
        }
        assert!(
            started.elapsed() < support::DEADLINE,
            "no EchoDescribed for {event_id}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

#[test]
fn a_handler_sees_the_delivery_count_message_type_and_sender_of_each_delivery() {
    on_host(|host| async move {
        let s = "dc-1";
        // Transient on deliveries 1 and 2, completed on the 3rd (the max).
        let patient = json!({"TransientBeforeDelivery": 3, "Describe": true});
        echo(host, s, "dc-1-e1", patient).await;
        let done = status(host, s, "dc-1-e1", Status::Completed).await;
        let seen = described(&done.event_id).await;
        assert_eq!(seen.len(), 1, "{seen:?}");
        assert_eq!(seen[0]["DeliveryCount"], 3, "{seen:?}");
        assert_eq!(seen[0]["MessageType"], "EventRequest");
        assert_eq!(seen[0]["From"], nimbus_runtime::DEFAULT_PRODUCER);

        // A resubmission is a new message: counted from 1, sent by the Manager.
        echo(host, s, "dc-1-e2", fails("EchoError")).await;
        let failed = status(host, s, "dc-1-e2", Status::Failed).await;
        let edited = json!({"Describe": true}).to_string();
        manager(host)
            .resubmit(&failed.event_id, Some(ECHO), Some(&edited))
            .await
            .expect("resubmit");
        status(host, s, "dc-1-e2", Status::Completed).await;
        let seen = described(&failed.event_id).await;
        assert_eq!(seen.len(), 1, "{seen:?}");
        assert_eq!(seen[0]["DeliveryCount"], 1);
        assert_eq!(seen[0]["MessageType"], "ResubmissionRequest");
        assert_eq!(seen[0]["From"], "Manager");
    });
}

// ---- 8. Dead-letter ------------------------------------------------------

#[test]
fn dl_a_permanent_failure_is_dead_lettered_at_once_and_does_not_block_the_session() {
    on_host(|host| async move {
        let s = "dl-1";
        let permanent =
            json!({"Outcome": "Permanent", "ErrorType": "BadData", "Message": "no such customer"});
        echo(host, s, "dl-1-e1", traced("dl-1-e1", permanent)).await;
        echo(host, s, "dl-1-e2", traced("dl-1-e2", ok())).await;
        let dead = status(host, s, "dl-1-e1", Status::DeadLettered).await;
        let said = format!(
            "{} {}",
            dead.dead_letter_reason.as_deref().unwrap_or(""),
            dead.dead_letter_description.as_deref().unwrap_or("")
        );
        assert!(
            said.contains("BadData") && said.contains("no such customer"),
            "{dead:?}"
        );
        status(host, s, "dl-1-e2", Status::Completed).await;
        wait_traces(s, &["dl-1-e2"]).await;
    });
}

#[test]
fn dl_a_payload_the_handler_cannot_read_is_dead_lettered_naming_the_field() {
    on_host(|host| async move {
        let s = "dl-2";
        echo(host, s, "dl-2-e1", json!({"Publsh": 1})).await;
        let dead = status(host, s, "dl-2-e1", Status::DeadLettered).await;
        let said = format!(
            "{} {}",
            dead.dead_letter_reason.as_deref().unwrap_or(""),
            dead.dead_letter_description.as_deref().unwrap_or("")
        );
        assert!(
            said.contains("InvalidPayload") && said.contains("Publsh"),
            "{dead:?}"
        );
    });
}

// ---- 9. Unsupported ------------------------------------------------------

#[test]
fn un_an_event_no_handler_serves_is_unsupported_and_does_not_block() {
    on_host(|host| async move {
        let s = "un-1";
        let unknown = NimbusMessage {
            message_id: Some("un-1-e1".to_owned()),
            session_id: Some(s.to_owned()),
            correlation_id: Some("corr-un-1-e1".to_owned()),
            to: Some(ECHO.to_owned()),
            from: Some("publisher".to_owned()),
            message_type: MessageType::EventRequest,
            event_id: Some("un-1-event".to_owned()),
            event_type_id: Some("NoSuchType".to_owned()),
            content: Some(MessageContent::event(EventContent::new(
                "NoSuchType".to_owned(),
                "{}".to_owned(),
            ))),
            ..NimbusMessage::default()
        };
        send(host.broker().unwrap(), ECHO, &unknown).await;
        echo(host, s, "un-1-e2", traced("un-1-e2", ok())).await;
        let unsupported = status(host, s, "un-1-e1", Status::Unsupported).await;
        assert_eq!(unsupported.event_id, "un-1-event");
        status(host, s, "un-1-e2", Status::Completed).await;
    });
}

// ---- 10. Heartbeat -------------------------------------------------------

#[test]
fn hb_a_heartbeat_on_a_blocked_session_is_answered_by_the_host_and_not_parked() {
    on_host(|host| async move {
        let s = "hb-1";
        echo(host, s, "hb-1-e1", fails("EchoError")).await;
        status(host, s, "hb-1-e1", Status::Failed).await;
        assert!(
            host.resolver()
                .heartbeats()
                .unwrap()
                .iter()
                .all(|h| h.endpoint != ECHO),
            "no heartbeat answered before the probe"
        );
        let probe = NimbusMessage {
            message_id: Some("hb-1-probe".to_owned()),
            session_id: Some(s.to_owned()),
            to: Some(ECHO.to_owned()),
            from: Some("Manager".to_owned()),
            message_type: MessageType::EventRequest,
            event_id: Some("hb-1-probe-event".to_owned()),
            event_type_id: Some("NimBus.Platform.Heartbeat".to_owned()),
            content: Some(MessageContent::event(EventContent::new(
                "NimBus.Platform.Heartbeat".to_owned(),
                r#"{"ForwardSendTime":"2026-11-30T10:00:00Z"}"#.to_owned(),
            ))),
            ..NimbusMessage::default()
        };
        send(host.broker().unwrap(), ECHO, &probe).await;
        eventually("the heartbeat is answered", || {
            host.resolver()
                .heartbeats()
                .unwrap()
                .iter()
                .any(|h| h.endpoint == ECHO && h.message_type == "ResolutionResponse")
        })
        .await;
        // The block stays for real events.
        echo(host, s, "hb-1-e2", ok()).await;
        status(host, s, "hb-1-e2", Status::Deferred).await;
        let blocker = record(&**host.resolver(), ECHO, s, "hb-1-e1").expect("recorded");
        assert_eq!(blocker.status, Status::Failed);
    });
}

// ---- 11. Pending handoff -------------------------------------------------

fn handoff(job: &str) -> Value {
    json!({"Outcome": "PendingHandoff", "Reason": "DMF import", "JobId": job, "ExpectedWithinMs": 60000})
}

#[test]
fn ph_a_pending_handoff_blocks_the_session_until_the_operator_completes_it() {
    on_host(|host| async move {
        let s = "ph-1";
        echo(host, s, "ph-1-e1", traced("ph-1-e1", handoff("job-ph-1"))).await;
        echo(host, s, "ph-1-e2", traced("ph-1-e2", ok())).await;
        let pending = status(host, s, "ph-1-e1", Status::Pending).await;
        let pending = if pending.sub_status.is_none() {
            wait_for(
                &**host.resolver(),
                ECHO,
                s,
                "ph-1-e1",
                "pending handoff",
                |r| r.sub_status.as_deref() == Some(HANDOFF_SUB_STATUS),
            )
            .await
        } else {
            pending
        };
        assert_eq!(pending.sub_status.as_deref(), Some(HANDOFF_SUB_STATUS));
        assert_eq!(pending.external_job_id.as_deref(), Some("job-ph-1"));
        assert_eq!(pending.handoff_reason.as_deref(), Some("DMF import"));
        status(host, s, "ph-1-e2", Status::Deferred).await;
        // A pending handoff settles the handler's follow-ups.
        wait_traces(s, &["ph-1-e1"]).await;
        manager(host)
            .complete_handoff(&pending.event_id, Some(ECHO), Some(r#"{"Rows":12}"#))
            .await
            .expect("complete the handoff");
        status(host, s, "ph-1-e1", Status::Completed).await;
        // The handler did not run again: one trace for e1, then e2.
        wait_traces(s, &["ph-1-e1", "ph-1-e2"]).await;
    });
}

#[test]
fn ph_a_failed_handoff_leaves_the_event_failed_with_the_operator_text_until_skipped() {
    on_host(|host| async move {
        let s = "ph-2";
        echo(host, s, "ph-2-e1", handoff("job-ph-2")).await;
        echo(host, s, "ph-2-e2", traced("ph-2-e2", ok())).await;
        let pending = wait_for(
            &**host.resolver(),
            ECHO,
            s,
            "ph-2-e1",
            "pending handoff",
            |r| r.status == Status::Pending && r.sub_status.as_deref() == Some(HANDOFF_SUB_STATUS),
        )
        .await;
        status(host, s, "ph-2-e2", Status::Deferred).await;
        manager(host)
            .fail_handoff(
                &pending.event_id,
                Some(ECHO),
                "DMF job 7 rejected 3 rows",
                None,
            )
            .await
            .expect("fail the handoff");
        let failed = status(host, s, "ph-2-e1", Status::Failed).await;
        assert!(
            failed
                .error_text
                .as_deref()
                .unwrap_or("")
                .contains("DMF job 7 rejected 3 rows"),
            "{failed:?}"
        );
        let parked = record(&**host.resolver(), ECHO, s, "ph-2-e2").expect("recorded");
        assert_eq!(parked.status, Status::Deferred, "the block stays");
        manager(host)
            .skip(&failed.event_id, Some(ECHO))
            .await
            .expect("skip");
        status(host, s, "ph-2-e1", Status::Skipped).await;
        wait_traces(s, &["ph-2-e2"]).await;
    });
}

#[test]
fn ph_the_manager_refuses_to_complete_a_handoff_for_an_event_not_pending_one() {
    on_host(|host| async move {
        let s = "ph-3";
        echo(host, s, "ph-3-e1", ok()).await;
        let done = status(host, s, "ph-3-e1", Status::Completed).await;
        let refused = manager(host)
            .complete_handoff(&done.event_id, Some(ECHO), None)
            .await
            .expect_err("not pending a handoff");
        assert!(refused.to_string().contains(&done.event_id), "{refused}");
    });
}

/// Issue 40: any client that can send to the endpoint's topic can write
/// `From = Manager` (on Service Bus, any Send key). Each control request
/// the host's Manager did not sign is dead-lettered by the endpoint and,
/// its copy, by the Resolver: the event stays pending its handoff, nothing
/// runs, and the operator's own completion still works.
#[test]
fn ph_control_messages_the_manager_did_not_sign_change_nothing() {
    on_host(|host| async move {
        let s = "ph-4";
        echo(host, s, "ph-4-e1", handoff("job-ph-4")).await;
        echo(host, s, "ph-4-e2", traced("ph-4-e2", ok())).await;
        let pending = wait_for(
            &**host.resolver(),
            ECHO,
            s,
            "ph-4-e1",
            "pending handoff",
            |r| r.status == Status::Pending && r.sub_status.as_deref() == Some(HANDOFF_SUB_STATUS),
        )
        .await;
        status(host, s, "ph-4-e2", Status::Deferred).await;

        let mut forged_ids = Vec::new();
        for kind in [
            MessageType::ResubmissionRequest,
            MessageType::SkipRequest,
            MessageType::HandoffCompletedRequest,
            MessageType::HandoffFailedRequest,
        ] {
            let id = format!("ph-4-forged-{kind}");
            let forged = NimbusMessage {
                message_id: Some(id.clone()),
                session_id: Some(s.to_owned()),
                to: Some(ECHO.to_owned()),
                from: Some("Manager".to_owned()),
                message_type: kind,
                event_id: Some(pending.event_id.clone()),
                event_type_id: Some("Echo".to_owned()),
                content: Some(MessageContent::event(EventContent::new(
                    "Echo".to_owned(),
                    ok().to_string(),
                ))),
                ..NimbusMessage::default()
            };
            send(host.broker().unwrap(), ECHO, &forged).await;
            forged_ids.push(id);
        }
        let manager = manager(host);
        for (queue, reason) in [
            (ECHO, nimbus_wire::dead_letter::UNAUTHORIZED_CONTROL),
            ("Resolver", nimbus_resolver::UNRECORDABLE_REASON),
        ] {
            let mut listed = Vec::new();
            for _ in 0..900 {
                listed = manager.dead_letters(queue, None).await.expect("listed");
                listed.retain(|d| {
                    d.message_id
                        .as_ref()
                        .is_some_and(|id| forged_ids.contains(id))
                });
                if listed.len() == forged_ids.len() {
                    break;
                }
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
            assert_eq!(listed.len(), forged_ids.len(), "{queue}: {listed:?}");
            for dead in &listed {
                assert_eq!(dead.reason.as_deref(), Some(reason), "{dead:?}");
                let description = dead.description.as_deref().unwrap_or_default();
                assert!(
                    description.contains("NimbusControlSignature"),
                    "{queue}: {description}"
                );
            }
        }
        let still = record(&**host.resolver(), ECHO, s, "ph-4-e1").expect("recorded");
        assert_eq!(
            (still.status, still.sub_status.as_deref()),
            (Status::Pending, Some(HANDOFF_SUB_STATUS)),
            "no forged request changed the event"
        );
        let history = detail(&**host.resolver(), &still.event_id, ECHO).history;
        assert!(
            history.iter().all(|h| h
                .message_id
                .as_ref()
                .is_none_or(|id| !forged_ids.contains(id))),
            "{history:?}"
        );
        assert_eq!(
            record(&**host.resolver(), ECHO, s, "ph-4-e2")
                .expect("recorded")
                .status,
            Status::Deferred,
            "the block stays"
        );

        manager
            .complete_handoff(&pending.event_id, Some(ECHO), None)
            .await
            .expect("the operator's completion is sent");
        status(host, s, "ph-4-e1", Status::Completed).await;
        status(host, s, "ph-4-e2", Status::Completed).await;
        wait_traces(s, &["ph-4-e2"]).await;
    });
}

// ---- Ordering across many sessions ---------------------------------------

#[test]
fn or_one_hundred_concurrent_sessions_each_complete_in_publish_order() {
    on_host(|host| async move {
        const SESSIONS: usize = 100;
        const PER_SESSION: usize = 5;
        for n in 0..PER_SESSION {
            for s in 0..SESSIONS {
                let session = format!("or-{s}");
                let id = format!("or-{s}-e{n}");
                echo(host, &session, &id, traced(&id, ok())).await;
            }
        }
        let store = host.resolver().clone();
        eventually("every ordering event completed", || {
            store
                .events(&nimbus_resolver::EventFilter {
                    endpoint: Some(ECHO.to_owned()),
                    status: Some(Status::Completed),
                    limit: Some(100_000),
                    ..Default::default()
                })
                .unwrap()
                .iter()
                .filter(|r| {
                    r.session_id
                        .as_deref()
                        .is_some_and(|s| s.starts_with("or-"))
                })
                .count()
                == SESSIONS * PER_SESSION
        })
        .await;
        for s in 0..SESSIONS {
            let session = format!("or-{s}");
            let expected: Vec<String> = (0..PER_SESSION).map(|n| format!("or-{s}-e{n}")).collect();
            let expected: Vec<&str> = expected.iter().map(String::as_str).collect();
            wait_traces(&session, &expected).await;
        }
    });
}

// ---- Handler versions ----------------------------------------------------

#[test]
fn a_handler_fixed_mid_stream_completes_the_resubmitted_event_on_the_new_version() {
    on_host(|host| async move {
        let s = "swap-1";
        let v1 = digest_of(host, SWAP, "Swap");
        publish(
            host.broker().unwrap(),
            "Swap",
            s,
            "swap-1-e1",
            &json!({"Bug": true}),
        )
        .await;
        publish(host.broker().unwrap(), "Swap", s, "swap-1-e2", &json!({})).await;
        let store = &**host.resolver();
        let failed = wait_status(store, SWAP, s, "swap-1-e1", Status::Failed).await;
        assert_eq!(failed.error_type.as_deref(), Some("SwapV1Bug"));
        assert_eq!(failed.handler_version.as_deref(), Some(v1.as_str()));
        wait_status(store, SWAP, s, "swap-1-e2", Status::Deferred).await;
        // The fix: version 2 replaces the component in place.
        let root = host.config().config.host.handlers_dir.clone();
        install(&root, SWAP, "swap_v2", "swap");
        host.registry().reconcile().expect("reload the handlers");
        let v2 = digest_of(host, SWAP, "Swap");
        assert_ne!(v1, v2, "the registry serves the new version");
        manager(host)
            .resubmit(&failed.event_id, Some(SWAP), None)
            .await
            .expect("resubmit");
        let e1 = wait_status(store, SWAP, s, "swap-1-e1", Status::Completed).await;
        let e2 = wait_status(store, SWAP, s, "swap-1-e2", Status::Completed).await;
        assert_eq!(e1.handler_version.as_deref(), Some(v2.as_str()));
        assert_eq!(e2.handler_version.as_deref(), Some(v2.as_str()));
        let served: Vec<(String, Value)> = tapped(SWAP, "SwapServed")
            .await
            .iter()
            .filter(|m| m.session_id.as_deref() == Some(s))
            .map(|m| {
                (
                    m.parent_message_id.clone().unwrap_or_default(),
                    serde_json::from_str(m.event_json().unwrap()).unwrap(),
                )
            })
            .collect();
        let versions: Vec<&Value> = served.iter().map(|(_, v)| &v["Version"]).collect();
        assert_eq!(versions, vec![&json!(2), &json!(2)], "{served:?}");
    });
}

// ---- Follow-ups (SEMANTICS.md §9) -----------------------------------------

#[test]
fn a_completed_handler_publishes_its_follow_up_with_the_event_session_and_correlation() {
    on_host(|host| async move {
        let s = "fu-1";
        let shipped = json!({"OrderId": "o-77", "Customer": "acme", "Carrier": "DHL", "TrackingNumber": "TN-1"});
        publish(
            host.broker().unwrap(),
            "OrderShipped",
            s,
            "fu-1-e1",
            &shipped,
        )
        .await;
        let done = wait_status(&**host.resolver(), NOTIFY, s, "fu-1-e1", Status::Completed).await;
        let expected_id = format!("{}:customer-notified", done.event_id);
        let mut notices = Vec::new();
        let started = std::time::Instant::now();
        while notices.is_empty() {
            notices = tapped(NOTIFY, "CustomerNotified")
                .await
                .into_iter()
                .filter(|m| m.session_id.as_deref() == Some(s))
                .collect();
            assert!(started.elapsed() < support::DEADLINE, "no CustomerNotified");
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        assert_eq!(notices.len(), 1, "{notices:?}");
        let notice = &notices[0];
        assert_eq!(notice.message_id.as_deref(), Some(expected_id.as_str()));
        assert_eq!(notice.correlation_id.as_deref(), Some("corr-fu-1-e1"));
        assert_eq!(notice.parent_message_id.as_deref(), Some("fu-1-e1"));
        assert_eq!(notice.originating_from.as_deref(), Some(NOTIFY));
        let body: Value = serde_json::from_str(notice.event_json().unwrap()).unwrap();
        assert_eq!(body["OrderId"], "o-77");
        assert_eq!(body["Customer"], "acme");
    });
}

#[test]
fn a_handler_that_fails_after_publishing_publishes_nothing() {
    on_host(|host| async move {
        let s = "fu-2";
        let mut failing = fails("EchoError");
        failing["Publish"] = json!(2);
        echo(host, s, "fu-2-e1", failing).await;
        let failed = status(host, s, "fu-2-e1", Status::Failed).await;
        manager(host)
            .skip(&failed.event_id, Some(ECHO))
            .await
            .expect("skip");
        echo(host, s, "fu-2-e2", json!({"Publish": 1})).await;
        let done = status(host, s, "fu-2-e2", Status::Completed).await;
        let mut follow_ups = Vec::new();
        let started = std::time::Instant::now();
        while follow_ups.is_empty() {
            follow_ups = tapped(ECHO, "EchoFollowUp")
                .await
                .into_iter()
                .filter(|m| m.session_id.as_deref() == Some(s))
                .collect();
            assert!(started.elapsed() < support::DEADLINE, "no EchoFollowUp");
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        let ids: Vec<Option<String>> = follow_ups.iter().map(|m| m.message_id.clone()).collect();
        assert_eq!(ids, vec![Some(format!("{}:echo:0", done.event_id))]);
    });
}

// ---- Routing -------------------------------------------------------------

#[test]
fn ef02_an_event_type_consumed_by_two_endpoints_reaches_both_with_their_own_event_ids() {
    on_host(|host| async move {
        let s = "ef-2";
        publish(
            host.broker().unwrap(),
            "Noop",
            s,
            "ef-2-e1",
            &json!({"Any": [1, 2]}),
        )
        .await;
        let store = &**host.resolver();
        let alpha = wait_status(store, ALPHA, s, "ef-2-e1", Status::Completed).await;
        let beta = wait_status(store, BETA, s, "ef-2-e1", Status::Completed).await;
        assert_ne!(alpha.event_id, beta.event_id);
        assert_eq!(alpha.request_from.as_deref(), Some("publisher"));
        assert_eq!(beta.request_from.as_deref(), Some("publisher"));
        let ambiguous = manager(host)
            .skip(&alpha.event_id, Some(ECHO))
            .await
            .expect_err("the event is not at echoes");
        assert!(ambiguous.to_string().contains(ALPHA), "{ambiguous}");
    });
}
