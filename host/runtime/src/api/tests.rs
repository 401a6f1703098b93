//! The API in-process (`tower::ServiceExt::oneshot`) on a real host: the
//! embedded broker on a temp dir, the `orders` example component, the
//! Resolver and the Manager. Waits poll with a generous deadline; nothing
//! asserts a duration.

#![allow(clippy::unwrap_used, reason = "tests")]
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use serde_json::{Value, json};
use tower::ServiceExt as _;

use crate::{ApiState, Config, Host, router};

const DEADLINE: Duration = Duration::from_secs(90);

/// The `Host` a client of the default `[api] listen` sends.
const HOST: &str = "127.0.0.1:7300";

fn guest(name: &str) -> PathBuf {
    let dirs = [
        std::env::var_os("NIMBUS_GUESTS_DIR").map(PathBuf::from),
        std::env::var_os("CARGO_TARGET_DIR")
            .map(|t| PathBuf::from(t).join("wasm32-wasip2/release")),
        Some(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/wasm32-wasip2/release")),
    ];
    dirs.into_iter()
        .flatten()
        .map(|d| d.join(format!("{name}.wasm")))
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!(
                "guest component {name}.wasm is missing: run scripts/build-guests.sh (same \
                 CARGO_TARGET_DIR) or set NIMBUS_GUESTS_DIR"
            )
        })
}

/// A host on `root` with `orders` serving endpoint `billing` and
/// `erp_import` serving endpoint `erp`.
async fn start(root: &Path) -> Host {
    start_with(root, &[("billing", "orders"), ("erp", "erp_import")], "").await
}

/// A host on `root` serving each (endpoint, component) of `handlers`, with
/// `extra` TOML after the test settings.
async fn start_with(root: &Path, handlers: &[(&str, &str)], extra: &str) -> Host {
    for (endpoint, name) in handlers {
        let dir = root.join("handlers").join(endpoint);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::copy(guest(name), dir.join(format!("{name}.wasm"))).unwrap();
    }
    let text = format!(
        r#"
[broker]
durability = "os"
lock_duration = "5s"
[engine]
session_idle_timeout = "200ms"
shutdown_grace = "10s"
[sandbox]
timeout = "20s"
{extra}
"#
    );
    let config = Config::parse(&text, &root.join("nimbus.toml"), root).unwrap();
    Host::start(config).await.unwrap()
}

struct Api(axum::Router);

impl Api {
    async fn call(&self, method: Method, uri: &str, body: Option<&str>) -> (StatusCode, Value) {
        let (status, _, value) = self.call_with_headers(method, uri, body).await;
        (status, value)
    }

    /// A GET that must succeed: its body and its `x-nimbus-truncated`
    /// header, if any.
    async fn listing(&self, uri: &str) -> (Value, Option<String>) {
        let (status, headers, value) = self.call_with_headers(Method::GET, uri, None).await;
        assert_eq!(status, StatusCode::OK, "{uri}: {value}");
        let truncated = headers
            .get("x-nimbus-truncated")
            .map(|v| v.to_str().unwrap().to_owned());
        (value, truncated)
    }

    async fn call_with_headers(
        &self,
        method: Method,
        uri: &str,
        body: Option<&str>,
    ) -> (StatusCode, axum::http::HeaderMap, Value) {
        let request = Request::builder()
            .method(method)
            .uri(uri)
            .header("host", HOST)
            .header("content-type", "application/json")
            .body(body.map_or_else(Body::empty, |b| Body::from(b.to_owned())))
            .unwrap();
        self.send(request).await
    }

    /// `request` as built; the answer, whose body must be JSON.
    async fn send(&self, request: Request<Body>) -> (StatusCode, axum::http::HeaderMap, Value) {
        let uri = request.uri().clone();
        let response = self.0.clone().oneshot(request).await.unwrap();
        let status = response.status();
        let headers = response.headers().clone();
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        let value = serde_json::from_slice(&bytes).unwrap_or_else(|e| {
            panic!(
                "{uri}: the body is not JSON ({e}): {}",
                String::from_utf8_lossy(&bytes)
            )
        });
        (status, headers, value)
    }

    async fn post(&self, uri: &str, body: &Value) -> (StatusCode, Value) {
        self.call(Method::POST, uri, Some(&body.to_string())).await
    }

    async fn ok(&self, method: Method, uri: &str, body: Option<&Value>) -> Value {
        let text = body.map(Value::to_string);
        let (status, value) = self.call(method, uri, text.as_deref()).await;
        assert_eq!(status, StatusCode::OK, "{uri}: {value}");
        value
    }

    async fn publish(&self, event_type: &str, session: &str, data: Value) -> String {
        let published = self
            .ok(
                Method::POST,
                "/api/publish",
                Some(&json!({"event_type": event_type, "session_id": session, "data": data})),
            )
            .await;
        published["message_id"].as_str().unwrap().to_owned()
    }

    /// Polls until the event published as `message_id` at `endpoint` has
    /// `status`; returns its record.
    async fn wait_status(
        &self,
        endpoint: &str,
        session: &str,
        message_id: &str,
        status: &str,
    ) -> Value {
        let started = Instant::now();
        loop {
            let events = self
                .ok(
                    Method::GET,
                    &format!("/api/events?endpoint={endpoint}&session={session}"),
                    None,
                )
                .await;
            let found = events
                .as_array()
                .unwrap()
                .iter()
                .find(|r| r["request_message_id"] == message_id)
                .cloned();
            if let Some(record) = &found
                && record["status"] == status
            {
                return record.clone();
            }
            assert!(
                started.elapsed() < DEADLINE,
                "{message_id} at {endpoint} never became {status}: {found:#?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

fn order(id: &str, fail: bool) -> Value {
    json!({"OrderId": id, "Customer": "acme", "Total": 10.0, "Fail": fail,
           "Lines": [{"Sku": "A-1", "Quantity": 1, "UnitPrice": 10.0}]})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_flow_publish_block_skip_resubmit_handoff() {
    let root = tempfile::tempdir().unwrap();
    let host = start(root.path()).await;
    let api = Api(router(ApiState::new(&host)));

    let health = api.ok(Method::GET, "/health", None).await;
    assert_eq!(health, json!({"status": "ok", "version": crate::VERSION}));

    let handlers = api.ok(Method::GET, "/api/handlers", None).await;
    let orders = handlers["handlers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["endpoint"] == "billing")
        .cloned()
        .unwrap();
    assert_eq!(orders["handler"], "orders");
    assert_eq!(orders["event_types"], json!(["OrderPlaced"]));
    assert_eq!(orders["status"], "serving");
    let version = orders["version"].as_str().unwrap();
    let hex = version.strip_prefix("sha256:").unwrap_or_default();
    assert!(
        hex.len() == 64 && hex.chars().all(|c| c.is_ascii_hexdigit()),
        "{version}"
    );
    assert!(orders["load_error"].is_null());
    // A known endpoint with nothing recorded yet lists nothing (not 404).
    let none_yet = api
        .ok(Method::GET, "/api/events?endpoint=billing", None)
        .await;
    assert_eq!(none_yet, json!([]));

    // Publish -> Completed with the serving handler version.
    let published = api
        .ok(
            Method::POST,
            "/api/publish",
            Some(&json!({"event_type": "OrderPlaced", "session_id": "s-ok", "data": order("o-1", false)})),
        )
        .await;
    assert_eq!(published["topic"], "publisher");
    assert_eq!(published["consumed_by"], json!(["billing"]));
    let ok_id = published["message_id"].as_str().unwrap();
    let done = api.wait_status("billing", "s-ok", ok_id, "Completed").await;
    assert_eq!(done["handler_version"].as_str(), orders["version"].as_str());

    // The detail has the event at its endpoint with its history.
    let event_id = done["event_id"].as_str().unwrap();
    let detail = api
        .ok(Method::GET, &format!("/api/events/{event_id}"), None)
        .await;
    assert_eq!(detail["event_id"], event_id);
    let at = &detail["endpoints"][0];
    assert_eq!(at["record"]["endpoint"], "billing");
    let history: Vec<&str> = at["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["status"].as_str().unwrap())
        .collect();
    assert!(history.contains(&"Completed"), "{history:?}");
    assert!(detail.get("message_id").is_none(), "{detail}");

    // The message id `publish` answered finds the same event.
    let by_message = api
        .ok(Method::GET, &format!("/api/events/{ok_id}"), None)
        .await;
    assert_eq!(by_message["message_id"], ok_id);
    assert_eq!(by_message["event_id"], event_id);
    assert_eq!(by_message["endpoints"], detail["endpoints"]);

    // A failing event blocks its session; the next one is parked.
    let failing = api
        .publish("OrderPlaced", "s-block", order("o-2", true))
        .await;
    let failed = api
        .wait_status("billing", "s-block", &failing, "Failed")
        .await;
    assert_eq!(failed["error_type"], "OrderRejected");
    let parked = api
        .publish("OrderPlaced", "s-block", order("o-3", false))
        .await;
    api.wait_status("billing", "s-block", &parked, "Deferred")
        .await;
    let failed_id = failed["event_id"].as_str().unwrap();
    let sessions = api
        .ok(
            Method::GET,
            "/api/sessions?endpoint=billing&blocked=true",
            None,
        )
        .await;
    let blocked = sessions
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["session_id"] == "s-block")
        .cloned()
        .unwrap_or_else(|| panic!("s-block is not listed as blocked: {sessions}"));
    assert_eq!(blocked["blocked_by"], failed_id);
    assert_eq!(blocked["parked"], 1);
    assert!(
        sessions
            .as_array()
            .unwrap()
            .iter()
            .all(|s| !s["blocked_by"].is_null()),
        "blocked=true lists only blocked sessions: {sessions}"
    );

    // Skip: Skipped, and the parked one runs.
    let sent = api
        .ok(Method::POST, &format!("/api/events/{failed_id}/skip"), None)
        .await;
    assert_eq!(sent["message_type"], "SkipRequest");
    assert!(sent["message_id"].as_str().is_some_and(|id| !id.is_empty()));
    api.wait_status("billing", "s-block", &failing, "Skipped")
        .await;
    api.wait_status("billing", "s-block", &parked, "Completed")
        .await;
    let sessions = api
        .ok(
            Method::GET,
            "/api/sessions?endpoint=billing&blocked=true",
            None,
        )
        .await;
    assert!(
        sessions
            .as_array()
            .unwrap()
            .iter()
            .all(|s| s["session_id"] != "s-block"),
        "s-block is unblocked: {sessions}"
    );

    // Resubmit with an edited payload.
    let failing = api
        .publish("OrderPlaced", "s-fix", order("o-4", true))
        .await;
    let failed = api
        .wait_status("billing", "s-fix", &failing, "Failed")
        .await;
    let failed_id = failed["event_id"].as_str().unwrap();
    let sent = api
        .ok(
            Method::POST,
            &format!("/api/events/{failed_id}/resubmit"),
            Some(&json!({"endpoint": "billing", "data": order("o-4", false)})),
        )
        .await;
    assert_eq!(sent["message_type"], "ResubmissionRequest");
    api.wait_status("billing", "s-fix", &failing, "Completed")
        .await;

    // Handoff: pending with sub-status Handoff, then completed.
    let import = json!({"ImportId": "imp-1", "Entity": "Customers", "Rows": 10});
    let handed = api
        .publish("ErpImportRequested", "s-erp", import.clone())
        .await;
    let pending = api.wait_status("erp", "s-erp", &handed, "Pending").await;
    let pending = if pending["sub_status"] == "Handoff" {
        pending
    } else {
        let started = Instant::now();
        loop {
            let r = api.wait_status("erp", "s-erp", &handed, "Pending").await;
            if r["sub_status"] == "Handoff" {
                break r;
            }
            assert!(started.elapsed() < DEADLINE, "never handed off: {r}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    let erp_id = pending["event_id"].as_str().unwrap();
    let sent = api
        .ok(
            Method::POST,
            &format!("/api/events/{erp_id}/handoff/complete"),
            Some(&json!({"details": {"rows_imported": 10}})),
        )
        .await;
    assert_eq!(sent["message_type"], "HandoffCompletedRequest");
    api.wait_status("erp", "s-erp", &handed, "Completed").await;

    // Handoff failed: Failed with the operator's error.
    let handed = api.publish("ErpImportRequested", "s-erp2", import).await;
    let started = Instant::now();
    let pending = loop {
        let r = api.wait_status("erp", "s-erp2", &handed, "Pending").await;
        if r["sub_status"] == "Handoff" {
            break r;
        }
        assert!(started.elapsed() < DEADLINE, "never handed off: {r}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let erp_id = pending["event_id"].as_str().unwrap();
    api.ok(
        Method::POST,
        &format!("/api/events/{erp_id}/handoff/fail"),
        Some(&json!({"error": "DMF job 42 failed", "error_type": "DmfFailed"})),
    )
    .await;
    let failed = api.wait_status("erp", "s-erp2", &handed, "Failed").await;
    // The engine records the handoff failure with its own error type; the
    // operator's text is what reaches the record.
    assert!(
        failed["error_text"]
            .as_str()
            .is_some_and(|t| t.contains("DMF job 42 failed")),
        "{failed}"
    );

    // Nothing is dead-lettered in this flow.
    let dlq = api.ok(Method::GET, "/api/dlq?endpoint=billing", None).await;
    assert_eq!(dlq, json!([]));

    host.shutdown().await;
}

/// The message `forged-skip` in `billing`'s own dead-letter queue, once it
/// is there (a replay takes it out until the engine dead-letters it again).
async fn forged_dead_letter(api: &Api) -> Value {
    let started = Instant::now();
    loop {
        let (listed, _) = api.listing("/api/dlq?endpoint=billing").await;
        let found = listed
            .as_array()
            .unwrap()
            .iter()
            .find(|d| d["message_id"] == "forged-skip" && d["subscription"] == "billing");
        if let Some(found) = found {
            return found.clone();
        }
        assert!(started.elapsed() < DEADLINE, "not dead-lettered: {listed}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Issue 40 through the API: a publish cannot make a control message (no
/// envelope property, the signature's included; `Manager` is no producer),
/// and a forged one that reached the bus and was dead-lettered, replayed
/// from the API, is refused again by the engine: the event stays as it was
/// and the operator's skip works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_api_path_makes_a_control_message_the_engine_acts_on() {
    let root = tempfile::tempdir().unwrap();
    let host = start(root.path()).await;
    let api = Api(router(ApiState::new(&host)));
    let failing = api
        .publish("OrderPlaced", "s-forged", order("o-forged", true))
        .await;
    let failed = api
        .wait_status("billing", "s-forged", &failing, "Failed")
        .await;
    let event_id = failed["event_id"].as_str().unwrap().to_owned();

    for (body, says) in [
        (
            json!({"event_type": "OrderPlaced", "data": {}, "session_id": "s-forged",
                   "properties": {"MessageType": "SkipRequest"}}),
            "properties.MessageType: a NimBus envelope property",
        ),
        (
            json!({"event_type": "OrderPlaced", "data": {}, "session_id": "s-forged",
                   "properties": {"From": "Manager"}}),
            "properties.From: a NimBus envelope property",
        ),
        (
            json!({"event_type": "OrderPlaced", "data": {}, "session_id": "s-forged",
                   "properties": {"NimbusControlSignature": format!("v1:{}", "0".repeat(64))}}),
            "properties.NimbusControlSignature: a NimBus envelope property",
        ),
        (
            json!({"event_type": "OrderPlaced", "data": {}, "from": "Manager"}),
            "unknown producer 'Manager'",
        ),
    ] {
        let (status, answer) = api.post("/api/publish", &body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {answer}");
        assert!(answer.to_string().contains(says), "{body}: {answer}");
    }

    // On a namespace a client can put one on the bus; the engine
    // dead-letters it, and a replay from the API meets the same check.
    let forged = nimbus_wire::NimbusMessage {
        message_id: Some("forged-skip".to_owned()),
        session_id: Some("s-forged".to_owned()),
        to: Some("billing".to_owned()),
        from: Some("Manager".to_owned()),
        message_type: nimbus_wire::MessageType::SkipRequest,
        event_id: Some(event_id.clone()),
        event_type_id: Some("OrderPlaced".to_owned()),
        content: Some(nimbus_wire::MessageContent::default()),
        ..nimbus_wire::NimbusMessage::default()
    };
    nimbus_transport::Transport::publish(
        &**host.broker().unwrap(),
        "billing",
        vec![forged.to_transport()],
    )
    .await
    .unwrap();
    let dead = forged_dead_letter(&api).await;
    assert_eq!(dead["reason"], "UnauthorizedControlMessage", "{dead}");
    let replayed = api
        .ok(
            Method::POST,
            "/api/dlq/replay",
            Some(&json!({"endpoint": "billing", "subscription": "billing",
                         "message_id": "forged-skip", "force": true})),
        )
        .await;
    assert_eq!(
        replayed["replayed"][0]["message_id"], "forged-skip",
        "{replayed}"
    );
    let again = forged_dead_letter(&api).await;
    assert_eq!(again["reason"], "UnauthorizedControlMessage", "{again}");

    let still = api
        .wait_status("billing", "s-forged", &failing, "Failed")
        .await;
    assert_eq!(still["status_source"], "ErrorResponse", "{still}");
    api.ok(Method::POST, &format!("/api/events/{event_id}/skip"), None)
        .await;
    api.wait_status("billing", "s-forged", &failing, "Skipped")
        .await;
    host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_a_4xx_that_names_the_problem() {
    let root = tempfile::tempdir().unwrap();
    let host = start(root.path()).await;
    let api = Api(router(ApiState::new(&host)));

    // One byte over Service Bus's limit on a session id.
    let long_session = format!(
        r#"{{"event_type": "OrderPlaced", "data": {{}}, "session_id": "{}"}}"#,
        "s".repeat(129)
    );
    let cases: Vec<(Method, &str, Option<&str>, StatusCode, &str)> = vec![
        (
            Method::POST,
            "/api/publish",
            Some(r#"{"data": {}}"#),
            StatusCode::BAD_REQUEST,
            "event_type",
        ),
        (
            Method::POST,
            "/api/publish",
            Some(r#"{"event_type": "OrderPlaced"}"#),
            StatusCode::BAD_REQUEST,
            "data is missing",
        ),
        (
            Method::POST,
            "/api/publish",
            Some(r#"{"event_type": "OrderPlaced", "data": {}, "properties": {"EventId": "x"}}"#),
            StatusCode::BAD_REQUEST,
            "properties.EventId: a NimBus envelope property",
        ),
        (
            Method::POST,
            "/api/publish",
            Some(r#"{"event_type": "OrderPlaced", "data": {}, "properties": {"Tags": [1]}}"#),
            StatusCode::BAD_REQUEST,
            "properties.Tags: [1] is not a string, a number or a boolean",
        ),
        (
            Method::POST,
            "/api/publish",
            Some(r#"{"event_type": " ", "data": 1}"#),
            StatusCode::BAD_REQUEST,
            "event_type must not be empty",
        ),
        (
            Method::POST,
            "/api/publish",
            Some("{not json"),
            StatusCode::BAD_REQUEST,
            "not valid",
        ),
        (
            Method::POST,
            "/api/publish",
            None,
            StatusCode::BAD_REQUEST,
            "needs a JSON body",
        ),
        (
            Method::POST,
            "/api/publish",
            Some(r#"{"event_type": "T", "data": 1, "sesion_id": "x"}"#),
            StatusCode::BAD_REQUEST,
            "sesion_id",
        ),
        (
            Method::POST,
            "/api/publish",
            Some(r#"{"event_type": "T", "data": 1, "from": "nowhere"}"#),
            StatusCode::BAD_REQUEST,
            "unknown producer 'nowhere'",
        ),
        (
            Method::GET,
            "/api/events?status=Bogus",
            None,
            StatusCode::BAD_REQUEST,
            "unknown status 'Bogus'",
        ),
        (
            Method::GET,
            "/api/events?limit=many",
            None,
            StatusCode::BAD_REQUEST,
            "limit",
        ),
        (
            Method::GET,
            "/api/events?limit=0",
            None,
            StatusCode::BAD_REQUEST,
            "limit",
        ),
        (
            Method::GET,
            "/api/events/no-such-event",
            None,
            StatusCode::NOT_FOUND,
            "no-such-event",
        ),
        (
            Method::POST,
            "/api/events/no-such-event/resubmit",
            None,
            StatusCode::NOT_FOUND,
            "no-such-event",
        ),
        (
            Method::POST,
            "/api/events/no-such-event/skip",
            Some(r#"{"endpoint": 3}"#),
            StatusCode::BAD_REQUEST,
            "endpoint",
        ),
        (
            Method::POST,
            "/api/events/no-such-event/handoff/fail",
            Some("{}"),
            StatusCode::BAD_REQUEST,
            "error is missing",
        ),
        (
            Method::GET,
            "/api/sessions?endpoint=nowhere",
            None,
            StatusCode::NOT_FOUND,
            "nowhere",
        ),
        (
            Method::GET,
            "/api/sessions?blocked=maybe",
            None,
            StatusCode::BAD_REQUEST,
            "blocked",
        ),
        (
            Method::GET,
            "/api/dlq?endpoint=nowhere",
            None,
            StatusCode::NOT_FOUND,
            "nowhere",
        ),
        (
            Method::GET,
            "/api/dlq?limit=0",
            None,
            StatusCode::BAD_REQUEST,
            "limit",
        ),
        (
            Method::GET,
            "/api/events?endpoint=nowhere",
            None,
            StatusCode::NOT_FOUND,
            "no endpoint 'nowhere'",
        ),
        (
            Method::POST,
            "/api/publish",
            Some(r#"{"event_type": "OrderPlaced", "data": {}, "session_id": " "}"#),
            StatusCode::BAD_REQUEST,
            "session_id is empty",
        ),
        (
            Method::POST,
            "/api/publish",
            Some(r#"{"event_type": "OrderPlaced", "data": {}, "message_id": ""}"#),
            StatusCode::BAD_REQUEST,
            "message_id is empty",
        ),
        (
            Method::POST,
            "/api/publish",
            Some(&long_session),
            StatusCode::BAD_REQUEST,
            "session_id is 129 bytes, over Service Bus's limit of 128",
        ),
        (
            Method::POST,
            "/api/dlq/replay",
            Some(r#"{"endpoint": "billing"}"#),
            StatusCode::BAD_REQUEST,
            "exactly one of",
        ),
        (
            Method::POST,
            "/api/dlq/replay",
            Some(r#"{"endpoint": "billing", "sequence_number": 1, "all": true}"#),
            StatusCode::BAD_REQUEST,
            "exactly one of",
        ),
        (
            Method::POST,
            "/api/dlq/replay",
            Some(r#"{"all": true}"#),
            StatusCode::BAD_REQUEST,
            "endpoint is missing",
        ),
        (
            Method::POST,
            "/api/dlq/replay",
            Some(r#"{"endpoint": "billing", "sequence_number": 99}"#),
            StatusCode::NOT_FOUND,
            "sequence number 99",
        ),
        (
            Method::POST,
            "/api/dlq/replay",
            Some(r#"{"endpoint": "billing", "all": true, "subscription": "Bogus"}"#),
            StatusCode::BAD_REQUEST,
            "no subscription 'Bogus'",
        ),
        (
            Method::POST,
            "/api/dlq/replay",
            Some(r#"{"endpoint": "billing", "sequence_number": 1, "subscription": "Bogus"}"#),
            StatusCode::BAD_REQUEST,
            "name 'billing' (its own), 'Resolver', 'Deferred', 'DeferredProcessor' or one of its \
             topic's forwarders",
        ),
        (
            Method::POST,
            "/api/dlq/remove",
            Some(r#"{"settled": true}"#),
            StatusCode::BAD_REQUEST,
            "endpoint is missing",
        ),
        (
            Method::POST,
            "/api/dlq/remove",
            Some(r#"{"endpoint": "billing"}"#),
            StatusCode::BAD_REQUEST,
            "exactly one of sequence_number, message_id or settled",
        ),
        (
            Method::POST,
            "/api/dlq/remove",
            Some(r#"{"endpoint": "billing", "settled": true, "force": true}"#),
            StatusCode::BAD_REQUEST,
            "force removes one named message",
        ),
        (
            Method::POST,
            "/api/dlq/remove",
            Some(r#"{"endpoint": "billing", "settled": true, "subscription": "Resolver"}"#),
            StatusCode::BAD_REQUEST,
            "names no subscription",
        ),
        (
            Method::POST,
            "/api/dlq/remove",
            Some(r#"{"endpoint": "billing", "message_id": "nope"}"#),
            StatusCode::NOT_FOUND,
            "MessageId 'nope'",
        ),
        (
            Method::GET,
            "/api/nothing",
            None,
            StatusCode::NOT_FOUND,
            "no route GET /api/nothing",
        ),
        (
            Method::DELETE,
            "/api/events",
            None,
            StatusCode::METHOD_NOT_ALLOWED,
            "DELETE",
        ),
    ];
    for (method, uri, body, want_status, want_text) in cases {
        let (status, value) = api.call(method.clone(), uri, body).await;
        assert_eq!(status, want_status, "{method} {uri} {body:?}: {value}");
        let error = value["error"]
            .as_str()
            .unwrap_or_else(|| panic!("{uri}: no error: {value}"));
        assert!(
            error.contains(want_text),
            "{method} {uri}: '{error}' does not name '{want_text}'"
        );
    }

    // A handoff operation on an event that is not pending a handoff is refused.
    let message_id = api
        .publish("OrderPlaced", "s-done", order("o-9", false))
        .await;
    let done = api
        .wait_status("billing", "s-done", &message_id, "Completed")
        .await;
    let (status, value) = api
        .post(
            &format!(
                "/api/events/{}/handoff/complete",
                done["event_id"].as_str().unwrap()
            ),
            &json!({}),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{value}");
    assert!(
        value["error"]
            .as_str()
            .unwrap()
            .contains("not pending a handoff"),
        "{value}"
    );

    // Publishing from an endpoint's topic is allowed (it is a producer).
    let (status, value) = api
        .post(
            "/api/publish",
            &json!({"event_type": "Noted", "data": {}, "from": "billing"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{value}");
    assert_eq!(value["topic"], "billing");
    assert_eq!(value["consumed_by"], json!([]));
    assert_eq!(value["not_loading"], json!([]));
    assert_eq!(value["waiting_at"], json!([]));

    // A handler that does not load (no earlier version): its endpoint is
    // named, since its kept forwarding may still take the event.
    let broken = root.path().join("handlers").join("shipping");
    std::fs::create_dir_all(&broken).unwrap();
    std::fs::write(broken.join("labels.wasm"), b"not a component").unwrap();
    host.registry().reconcile().unwrap();
    let (status, value) = api
        .post("/api/publish", &json!({"event_type": "Noted", "data": {}}))
        .await;
    assert_eq!(status, StatusCode::OK, "{value}");
    assert_eq!(value["consumed_by"], json!([]));
    assert_eq!(value["not_loading"], json!(["shipping"]));
    assert_eq!(
        value["waiting_at"],
        json!([]),
        "shipping never forwarded Noted"
    );

    // A newer billing file that does not load: the version before it serves.
    let billing = root
        .path()
        .join("handlers")
        .join("billing")
        .join("orders.wasm");
    std::fs::write(&billing, b"\0asm but not a component").unwrap();
    host.registry().reconcile().unwrap();
    let handlers = api.ok(Method::GET, "/api/handlers", None).await;
    let status_of = |endpoint: &str| {
        handlers["handlers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|h| h["endpoint"] == endpoint)
            .map(|h| {
                (
                    h["status"].clone(),
                    h["load_error"].is_string(),
                    h["version"].is_string(),
                )
            })
            .unwrap()
    };
    assert_eq!(
        status_of("billing"),
        (json!("serving-previous"), true, true)
    );
    assert_eq!(status_of("shipping"), (json!("failed"), true, false));

    host.shutdown().await;
}

/// An order the `orders` handler dead-letters at once (no lines).
fn empty_order(id: &str) -> Value {
    json!({"OrderId": id, "Customer": "acme", "Total": 0.0, "Lines": []})
}

/// `/api/dlq`'s limit is per endpoint, so a busy endpoint hides no other;
/// the header names each endpoint that has more than it lists.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dead_letter_limit_applies_per_endpoint_and_names_those_cut() {
    let root = tempfile::tempdir().unwrap();
    let host = start_with(
        root.path(),
        &[("audit", "orders"), ("billing", "orders")],
        "",
    )
    .await;
    let api = Api(router(ApiState::new(&host)));
    // Two dead letters at each endpoint (each gets its own copy).
    for (session, id) in [("s-1", "o-1"), ("s-2", "o-2")] {
        api.publish("OrderPlaced", session, empty_order(id)).await;
    }
    let started = Instant::now();
    loop {
        let (all, _) = api.listing("/api/dlq").await;
        if all.as_array().unwrap().len() == 4 {
            break;
        }
        assert!(started.elapsed() < DEADLINE, "never 4 dead letters: {all}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let endpoints = |listed: &Value| -> Vec<String> {
        listed
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d["endpoint"].as_str().unwrap().to_owned())
            .collect()
    };

    let (one_each, truncated) = api.listing("/api/dlq?limit=1").await;
    assert_eq!(endpoints(&one_each), ["audit", "billing"], "{one_each}");
    assert_eq!(truncated.as_deref(), Some("audit, billing"));

    let (billing, truncated) = api.listing("/api/dlq?endpoint=billing&limit=1").await;
    assert_eq!(endpoints(&billing), ["billing"]);
    assert_eq!(truncated.as_deref(), Some("billing"));

    // Exactly the limit is not "more".
    let (two_each, truncated) = api.listing("/api/dlq?limit=2").await;
    assert_eq!(two_each.as_array().unwrap().len(), 4, "{two_each}");
    assert_eq!(truncated, None);

    host.shutdown().await;
}

/// `/api/events` says with its header when more events match than it
/// lists; exactly the limit is not more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_events_listing_cut_at_its_limit_says_so() {
    let root = tempfile::tempdir().unwrap();
    let host = start(root.path()).await;
    let api = Api(router(ApiState::new(&host)));
    for (session, id) in [("s-1", "o-1"), ("s-2", "o-2")] {
        let message_id = api.publish("OrderPlaced", session, order(id, false)).await;
        api.wait_status("billing", session, &message_id, "Completed")
            .await;
    }
    let (one, truncated) = api.listing("/api/events?endpoint=billing&limit=1").await;
    assert_eq!(one.as_array().unwrap().len(), 1, "{one}");
    assert_eq!(truncated.as_deref(), Some("true"));
    let (two, truncated) = api.listing("/api/events?endpoint=billing&limit=2").await;
    assert_eq!(two.as_array().unwrap().len(), 2, "{two}");
    assert_eq!(truncated, None);
    let (all, truncated) = api.listing("/api/events").await;
    assert_eq!(all.as_array().unwrap().len(), 2, "{all}");
    assert_eq!(truncated, None);

    host.shutdown().await;
}

/// An endpoint whose only handler file does not load is known (`nimbus
/// handlers` lists it), though the broker has no subscription for it: its
/// events list as empty, not as an unknown endpoint.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_of_an_endpoint_whose_handler_does_not_load_list_empty() {
    let root = tempfile::tempdir().unwrap();
    let host = start(root.path()).await;
    let api = Api(router(ApiState::new(&host)));
    let broken = root.path().join("handlers").join("shipping");
    std::fs::create_dir_all(&broken).unwrap();
    std::fs::write(broken.join("labels.wasm"), b"not a component").unwrap();
    host.registry().reconcile().unwrap();

    let (listed, _) = api.listing("/api/events?endpoint=shipping").await;
    assert_eq!(listed, json!([]));
    let (status, value) = api
        .call(Method::GET, "/api/events?endpoint=shiping", None)
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{value}");

    // A retired endpoint (no handler file, no queues) keeps its records: a
    // filter they do not match lists nothing rather than "no endpoint".
    let mut old = nimbus_resolver::Observation::new(
        "retired",
        "e-old",
        nimbus_resolver::MessageKind::ResolutionResponse,
        1,
    );
    old.message_id = Some("m-old".into());
    nimbus_resolver::ResolverStore::record(&**host.resolver(), &old).unwrap();
    let (listed, _) = api.listing("/api/events?endpoint=retired").await;
    assert_eq!(listed.as_array().map(Vec::len), Some(1), "{listed}");
    let (listed, _) = api
        .listing("/api/events?endpoint=retired&status=Failed")
        .await;
    assert_eq!(listed, json!([]));

    host.shutdown().await;
}

/// An unknown event id may be one the Resolver pruned: the 404 says so,
/// with the configured period; with retention forever it does not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_event_id_names_the_retention_period_unless_events_are_kept_forever() {
    let root = tempfile::tempdir().unwrap();
    let host = start_with(
        root.path(),
        &[("billing", "orders")],
        "[resolver]\nretention = \"12h\"\n",
    )
    .await;
    let api = Api(router(ApiState::new(&host)));
    let (status, value) = api.call(Method::GET, "/api/events/gone", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{value}");
    let error = value["error"].as_str().unwrap();
    assert!(
        error.contains("no event 'gone'")
            && error.contains("Completed, Skipped, Unsupported")
            && error.contains("removed 12h after its last update ([resolver] retention)"),
        "{error}"
    );
    // The operations on an event say the same.
    for (path, body) in [
        ("/api/events/gone/skip", "{}"),
        ("/api/events/gone/resubmit", "{}"),
        ("/api/events/gone/handoff/complete", "{}"),
        ("/api/events/gone/handoff/fail", r#"{"error": "job lost"}"#),
    ] {
        let (status, value) = api.call(Method::POST, path, Some(body)).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}: {value}");
        let error = value["error"].as_str().unwrap();
        assert!(
            error.contains("no event 'gone'") && error.contains("removed 12h after"),
            "{path}: {error}"
        );
    }
    host.shutdown().await;

    let root = tempfile::tempdir().unwrap();
    let host = start_with(
        root.path(),
        &[("billing", "orders")],
        "[resolver]\nretention = \"Forever\"\n",
    )
    .await;
    let api = Api(router(ApiState::new(&host)));
    let (status, value) = api.call(Method::GET, "/api/events/gone", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{value}");
    let error = value["error"].as_str().unwrap();
    assert!(
        error.contains("no event 'gone'") && !error.contains("retention"),
        "{error}"
    );
    host.shutdown().await;
}

/// A sample's value in a Prometheus text document, if the exact series is
/// there.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

/// `GET /metrics` counts what the Resolver recorded (outcomes, handler
/// time) and reads the broker's and the registry's state at scrape time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_outcomes_and_show_blocked_sessions_and_handlers() {
    let root = tempfile::tempdir().unwrap();
    let host = start(root.path()).await;
    let api = Api(router(ApiState::new(&host)));
    let completing = api
        .publish("OrderPlaced", "s-ok", order("o-1", false))
        .await;
    let failing = api
        .publish("OrderPlaced", "s-block", order("o-2", true))
        .await;
    api.wait_status("billing", "s-ok", &completing, "Completed")
        .await;
    api.wait_status("billing", "s-block", &failing, "Failed")
        .await;
    // A parked copy the replayer dead-lettered counts as a dead letter of
    // the endpoint, though it is not in the endpoint's own queue.
    dead_letter_a_parked_copy(&host, "s-parked").await;
    // What the Resolver cannot record waits in its own dead-letter queue,
    // counted and listed under `Resolver`.
    use nimbus_transport::Transport as _;
    let mut junk = nimbus_transport::Message::new(b"not json".to_vec());
    junk.session_id = Some("s-junk".to_owned());
    junk.message_id = Some("junk-1".to_owned());
    host.broker()
        .unwrap()
        .publish("Resolver", vec![junk])
        .await
        .unwrap();

    let wanted = [
        "nimbus_dead_letter_messages{endpoint=\"Resolver\"}",
        "nimbus_events_recorded_total{endpoint=\"billing\",status=\"Completed\"}",
        "nimbus_events_recorded_total{endpoint=\"billing\",status=\"Failed\"}",
        "nimbus_handler_processing_seconds_count{endpoint=\"billing\"}",
        "nimbus_queue_wait_seconds_count{endpoint=\"billing\"}",
    ];
    // The store commits a status a moment before the wrapper counts it.
    let started = Instant::now();
    let text = loop {
        let request = Request::get("/metrics")
            .header("host", HOST)
            .body(Body::empty())
            .unwrap();
        let response = api.0.clone().oneshot(request).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(
            response.headers()["content-type"],
            "text/plain; version=0.0.4; charset=utf-8"
        );
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        let text = String::from_utf8(bytes.to_vec()).unwrap();
        if wanted.iter().all(|s| sample(&text, s) >= Some(1.0)) {
            break text;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "some of {wanted:#?} are missing or 0:\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(
        sample(&text, "nimbus_blocked_sessions{endpoint=\"billing\"}"),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        sample(&text, "nimbus_retrying_events{endpoint=\"billing\"}"),
        Some(0.0),
        "nothing failed transiently: {text}"
    );
    assert_eq!(
        sample(&text, "nimbus_dead_letter_messages{endpoint=\"billing\"}"),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        sample(&text, "nimbus_dead_letter_messages{endpoint=\"Resolver\"}"),
        Some(1.0),
        "{text}"
    );
    let (listed, _) = api.listing("/api/dlq").await;
    let last = listed.as_array().unwrap().last().unwrap();
    assert_eq!(last["endpoint"], "Resolver", "{listed}");
    assert_eq!(last["subscription"], "Resolver", "{listed}");
    assert_eq!(last["message_id"], "junk-1", "{listed}");
    assert_eq!(
        sample(
            &text,
            "nimbus_handlers{endpoint=\"billing\",handler=\"orders\",status=\"serving\"}"
        ),
        Some(1.0),
        "{text}"
    );
    assert!(
        text.contains("# TYPE nimbus_handler_processing_seconds histogram\n"),
        "{text}"
    );
    assert!(
        text.contains("nimbus_handler_processing_seconds_bucket{endpoint=\"billing\",le=\"+Inf\"}"),
        "{text}"
    );
    host.shutdown().await;
}

/// Parks a message of `session` in billing's `Deferred` subscription and
/// dead-letters it there, as a replayer failing it over and over would.
async fn dead_letter_a_parked_copy(host: &Host, session: &str) {
    use nimbus_transport::{
        Message, PropertyValue, SessionLock as _, SessionSelector, SubscriptionPath, Transport as _,
    };
    let mut parked = Message::new(b"{}".to_vec());
    parked.session_id = Some(session.to_owned());
    for (name, value) in [("To", "Deferred"), ("OriginalSessionId", session)] {
        parked
            .properties
            .insert(name.to_owned(), PropertyValue::String(value.to_owned()));
    }
    let broker = host.broker().unwrap();
    broker.publish("billing", vec![parked]).await.unwrap();
    let lock = broker
        .accept_session(
            &SubscriptionPath::new("billing", "Deferred"),
            SessionSelector::Named(session.to_owned()),
            Duration::from_secs(10),
        )
        .await
        .unwrap();
    let message = lock
        .receive(Duration::from_secs(10))
        .await
        .unwrap()
        .unwrap();
    lock.dead_letter(message, "MaxDeliveryCountExceeded".into(), "test".into())
        .await
        .unwrap();
    lock.close().await;
}

/// A body over the limit is refused like any bad input: a 413 whose JSON
/// names the limit (axum's own answer is plain text).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_body_is_a_413_that_names_the_limit() {
    let root = tempfile::tempdir().unwrap();
    let host = start_with(root.path(), &[("billing", "orders")], "").await;
    let api = Api(router(ApiState::new(&host)));
    let data = "x".repeat(crate::api::MAX_REQUEST_BODY);
    let body = json!({"event_type": "OrderPlaced", "data": data}).to_string();
    let (status, value) = api.call(Method::POST, "/api/publish", Some(&body)).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{value}");
    assert_eq!(
        value["error"],
        "the request body is larger than the API takes (2 MiB)"
    );
    host.shutdown().await;
}

/// A publish's user properties reach the bus typed as given, beside the
/// envelope nimbus writes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn published_user_properties_travel_typed() {
    use nimbus_transport::{
        Admin as _, PropertyValue, Receiver as _, SubQueue, SubscriptionPath, SubscriptionSettings,
        Transport as _,
    };
    let root = tempfile::tempdir().unwrap();
    let host = start(root.path()).await;
    let api = Api(router(ApiState::new(&host)));
    let tap = SubscriptionPath::new("publisher", "tap");
    host.broker()
        .unwrap()
        .create_subscription(&tap, SubscriptionSettings::default())
        .await
        .unwrap();
    let receiver = host
        .broker()
        .unwrap()
        .receiver(&tap, SubQueue::Main)
        .await
        .unwrap();
    api.ok(
        Method::POST,
        "/api/publish",
        Some(
            &json!({"event_type": "OrderPlaced", "data": order("o-p", false),
                     "properties": {"Region": "EU", "Priority": 3, "Weight": 1.5, "Rush": true}}),
        ),
    )
    .await;
    let message = receiver
        .receive(Duration::from_secs(10))
        .await
        .unwrap()
        .expect("the publish");
    let properties = &message.message.properties;
    assert_eq!(properties["Region"], PropertyValue::String("EU".into()));
    assert_eq!(properties["Priority"], PropertyValue::Int(3));
    assert_eq!(properties["Weight"], PropertyValue::Float(1.5));
    assert_eq!(properties["Rush"], PropertyValue::Bool(true));
    assert_eq!(
        properties["EventTypeId"],
        PropertyValue::String("OrderPlaced".into())
    );
    receiver.complete(message).await.unwrap();
    host.shutdown().await;
}

/// A publish that a producer's forwarder cannot forward (its target topic
/// is gone) reaches no endpoint and no Resolver: the unfiltered `/api/dlq`
/// lists it under the producer's topic, and a replay says what to do
/// instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publish_no_forwarder_could_forward_is_listed_under_its_producer() {
    use nimbus_transport::{Admin as _, RuleDescription, SubscriptionPath, SubscriptionSettings};
    let root = tempfile::tempdir().unwrap();
    let host = start(root.path()).await;
    let api = Api(router(ApiState::new(&host)));
    let broker = host.broker().unwrap();
    broker
        .create_topic("ghost", nimbus_transport::TopicSettings::default())
        .await
        .unwrap();
    let forwarder = SubscriptionPath::new("publisher", "ghost");
    broker
        .create_subscription(&forwarder, SubscriptionSettings::forwarding_to("ghost"))
        .await
        .unwrap();
    broker.delete_rule(&forwarder, "$Default").await.unwrap();
    broker
        .create_rule(
            &forwarder,
            RuleDescription::new("orders", "user.EventTypeId = 'OrderPlaced'"),
        )
        .await
        .unwrap();
    broker.delete_topic("ghost").await.unwrap();

    let message_id = api.publish("OrderPlaced", "s-1", order("o-1", false)).await;
    // The forwarder to billing delivered it.
    api.wait_status("billing", "s-1", &message_id, "Completed")
        .await;
    let (listed, _) = api.listing("/api/dlq").await;
    let listed = listed.as_array().unwrap();
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0]["endpoint"], "publisher");
    assert_eq!(listed[0]["subscription"], "ghost");
    assert_eq!(listed[0]["message_id"], message_id.as_str());
    assert_eq!(listed[0]["reason"], "ForwardToTargetNotFound");
    // The dead-letter gauge counts it under the producer, for an alert.
    let request = Request::get("/metrics")
        .header("host", HOST)
        .body(Body::empty())
        .unwrap();
    let response = api.0.clone().oneshot(request).await.unwrap();
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    let text = String::from_utf8(bytes.to_vec()).unwrap();
    assert_eq!(
        sample(&text, "nimbus_dead_letter_messages{endpoint=\"publisher\"}"),
        Some(1.0),
        "{text}"
    );

    let (status, refused) = api
        .post(
            "/api/dlq/replay",
            &json!({"endpoint": "publisher", "message_id": message_id}),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{refused}");
    assert!(
        refused["error"]
            .as_str()
            .is_some_and(|e| e.contains("was never forwarded")),
        "{refused}"
    );
    host.shutdown().await;
}

/// A request to `uri` with exactly `headers` and `body`.
fn raw(method: Method, uri: &str, headers: &[(&str, &str)], body: &str) -> Request<Body> {
    let mut request = Request::builder().method(method).uri(uri);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let body = if body.is_empty() {
        Body::empty()
    } else {
        Body::from(body.to_owned())
    };
    request.body(body).unwrap()
}

fn error_of(value: &Value) -> &str {
    value["error"].as_str().unwrap_or_default()
}

/// The events recorded at `billing` in `session` (their count).
async fn events_in(api: &Api, session: &str) -> usize {
    // The Resolver records a publish a moment after the broker took it:
    // one that went out is seen by a later accepted publish's wait.
    let (listed, _) = api
        .listing(&format!("/api/events?endpoint=billing&session={session}"))
        .await;
    listed.as_array().unwrap().len()
}

/// What a web page can send (a `text/plain` POST needs no CORS preflight,
/// and a re-pointed name reaches loopback) is refused before any route runs,
/// naming the header; nothing is published or paused by it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_a_web_page_could_send_are_refused_naming_the_header() {
    let root = tempfile::tempdir().unwrap();
    let host = start_with(
        root.path(),
        &[("billing", "orders")],
        "[api]\nallowed_hosts = [\"nimbus.internal\"]\n",
    )
    .await;
    let api = Api(router(ApiState::new(&host)));
    let publish =
        json!({"event_type": "OrderPlaced", "session_id": "s-web", "data": order("web", false)})
            .to_string();

    type Case<'a> = (&'a [(&'a str, &'a str)], StatusCode, &'a str);
    let cases: [Case<'_>; 7] = [
        // A page elsewhere posting as a form would, to a rebound name.
        (
            &[
                ("host", HOST),
                ("origin", "http://evil.example"),
                ("content-type", "text/plain"),
            ],
            StatusCode::FORBIDDEN,
            "Origin header 'http://evil.example' is not this API's",
        ),
        (
            &[
                ("host", HOST),
                ("origin", "null"),
                ("content-type", "application/json"),
            ],
            StatusCode::FORBIDDEN,
            "Origin header 'null'",
        ),
        (
            &[
                ("host", "evil.example"),
                ("content-type", "application/json"),
            ],
            StatusCode::MISDIRECTED_REQUEST,
            "Host header 'evil.example' does not name this API",
        ),
        (
            &[
                ("host", "localhost:7301"),
                ("content-type", "application/json"),
            ],
            StatusCode::MISDIRECTED_REQUEST,
            "Host header 'localhost:7301'",
        ),
        (
            &[("content-type", "application/json")],
            StatusCode::MISDIRECTED_REQUEST,
            "no Host header",
        ),
        (
            &[("host", HOST), ("content-type", "text/plain")],
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "Content-Type 'text/plain'; this API takes JSON only",
        ),
        (
            &[("host", HOST)],
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "no Content-Type header",
        ),
    ];
    for (headers, status, says) in cases {
        let (got, _, value) = api
            .send(raw(Method::POST, "/api/publish", headers, &publish))
            .await;
        assert_eq!(got, status, "{headers:?}: {value}");
        assert!(error_of(&value).contains(says), "{headers:?}: {value}");
    }
    let (status, _, value) = api
        .send(raw(
            Method::POST,
            "/api/endpoints/billing/pause",
            &[("host", HOST), ("origin", "http://evil.example")],
            "",
        ))
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{value}");

    // What the CLI and a same-origin page send is taken: the JSON type with
    // its parameters, the API's own origin, an allowed host on any port.
    for headers in [
        &[
            ("host", HOST),
            ("content-type", "application/json; charset=utf-8"),
        ][..],
        &[
            ("host", "localhost:7300"),
            ("origin", "http://localhost:7300"),
            ("content-type", "Application/JSON"),
        ],
        &[
            ("host", "Nimbus.Internal:8443"),
            ("origin", "https://nimbus.internal"),
            ("content-type", "application/json"),
        ],
    ] {
        let (status, _, value) = api
            .send(raw(Method::POST, "/api/publish", headers, &publish))
            .await;
        assert_eq!(status, StatusCode::OK, "{headers:?}: {value}");
    }
    // A liveness probe names the host by its pod address.
    let (status, _, value) = api
        .send(raw(
            Method::GET,
            "/health",
            &[("host", "10.1.2.3:7300")],
            "",
        ))
        .await;
    assert_eq!(status, StatusCode::OK, "{value}");

    // Three accepted, none of the refused (sent before them in the same
    // session, they would be recorded first); and billing is not paused.
    let started = Instant::now();
    while events_in(&api, "s-web").await < 3 {
        assert!(
            started.elapsed() < DEADLINE,
            "the accepted publishes were never recorded"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(events_in(&api, "s-web").await, 3);
    let endpoints = api.ok(Method::GET, "/api/endpoints", None).await;
    assert_eq!(endpoints[0]["endpoint"], "billing", "{endpoints}");
    assert_eq!(endpoints[0]["paused"], false, "{endpoints}");
    host.shutdown().await;
}

/// With `[api] token`, every request but `GET /health` needs it as a
/// bearer token; a missing or wrong one is a 401 that says what to send.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configured_token_is_required_everywhere_but_health() {
    let root = tempfile::tempdir().unwrap();
    let token = "t0ken-of-sixteen-plus";
    let host = start_with(
        root.path(),
        &[("billing", "orders")],
        &format!("[api]\ntoken = \"{token}\"\nrequest_timeout = \"1s\"\n"),
    )
    .await;
    let api = Api(router(ApiState::new(&host)));
    let bearer = format!("Bearer {token}");
    for (authorization, says) in [
        (None, "needs an Authorization: Bearer <token> header"),
        (Some("Bearer wrong-token-of-length"), "is not this API's"),
        (Some(&*format!("Basic {token}")), "needs an Authorization"),
        (Some(&*format!("Bearer {token}x")), "is not this API's"),
    ] {
        for uri in ["/api/events", "/metrics", "/api/no-such-route"] {
            let mut headers = vec![("host", HOST)];
            headers.extend(authorization.map(|a| ("authorization", a)));
            let response = api
                .0
                .clone()
                .oneshot(raw(Method::GET, uri, &headers, ""))
                .await
                .unwrap();
            assert_eq!(
                response.status(),
                StatusCode::UNAUTHORIZED,
                "{uri} {authorization:?}"
            );
            assert_eq!(response.headers()["www-authenticate"], "Bearer");
            let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
                .await
                .unwrap();
            let value: Value = serde_json::from_slice(&bytes).unwrap();
            assert!(error_of(&value).contains(says), "{uri}: {value}");
            assert!(error_of(&value).contains("NIMBUS_API_TOKEN"), "{value}");
            assert!(!error_of(&value).contains(token), "{value}");
        }
    }
    for authorization in [bearer.as_str(), &format!("bearer  {token} ")] {
        let (status, _, value) = api
            .send(raw(
                Method::GET,
                "/api/events",
                &[("host", HOST), ("authorization", authorization)],
                "",
            ))
            .await;
        assert_eq!(status, StatusCode::OK, "{value}");
    }
    let (status, _, value) = api
        .send(raw(Method::GET, "/health", &[("host", HOST)], ""))
        .await;
    assert_eq!(status, StatusCode::OK, "{value}");

    // A body that never ends holds no request beyond request_timeout.
    let (_writer, reader) = tokio::io::duplex(64);
    let endless = Body::from_stream(tokio_util::io::ReaderStream::new(reader));
    let request = Request::post("/api/publish")
        .header("host", HOST)
        .header("authorization", &bearer)
        .header("content-type", "application/json")
        .body(endless)
        .unwrap();
    let (status, _, value) = tokio::time::timeout(DEADLINE, api.send(request))
        .await
        .expect("the request timeout never answered");
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{value}");
    assert!(
        error_of(&value).contains("longer than 1s ([api] request_timeout)"),
        "{value}"
    );
    host.shutdown().await;
}

/// A listing's `limit` is at most `MAX_LIMIT` (its default): one over is a
/// 400 naming `limit`, not a listing of everything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_limit_over_the_maximum_is_refused_naming_it() {
    let root = tempfile::tempdir().unwrap();
    let host = start_with(root.path(), &[("billing", "orders")], "").await;
    let api = Api(router(ApiState::new(&host)));
    let over = crate::api::MAX_LIMIT + 1;
    for (method, uri, body) in [
        (Method::GET, format!("/api/events?limit={over}"), None),
        (Method::GET, format!("/api/dlq?limit={over}"), None),
        (
            Method::POST,
            "/api/failed/skip".to_owned(),
            Some(json!({"limit": over, "dry_run": true}).to_string()),
        ),
    ] {
        let (status, value) = api.call(method, &uri, body.as_deref()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{uri}: {value}");
        assert_eq!(
            error_of(&value),
            format!(
                "limit: {over} is over the maximum of 1000 (narrow the listing with its filters \
                 instead)"
            ),
            "{uri}"
        );
    }
    for uri in ["/api/events?limit=1000", "/api/dlq?limit=1000"] {
        api.listing(uri).await;
    }
    host.shutdown().await;
}

/// Arbitrary methods, paths, queries, headers and bodies through the whole
/// router on a real host: nothing panics and nothing malformed is a 5xx.
/// Bounded (a few hundred cases), so it runs in CI in seconds.
#[test]
fn malformed_requests_never_panic_or_answer_a_5xx() {
    use proptest::prelude::*;
    use proptest::test_runner::{Config as RunnerConfig, TestCaseError, TestRunner};

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let root = tempfile::tempdir().unwrap();
    let host = runtime.block_on(start_with(root.path(), &[("billing", "orders")], ""));
    let api = router(ApiState::new(&host));

    let segment = "[A-Za-z0-9%._~!$&'()*+,;=:@-]{0,24}";
    let path = prop_oneof![
        Just("/api/publish".to_owned()),
        Just("/api/events".to_owned()),
        Just("/api/dlq".to_owned()),
        Just("/api/sessions".to_owned()),
        Just("/api/endpoints".to_owned()),
        Just("/api/failed/skip".to_owned()),
        Just("/api/dlq/replay".to_owned()),
        Just("/api/dlq/remove".to_owned()),
        Just("/health".to_owned()),
        Just("/metrics".to_owned()),
        segment.prop_map(|s| format!("/api/events/{s}")),
        segment.prop_map(|s| format!("/api/events/{s}/skip")),
        segment.prop_map(|s| format!("/api/events/{s}/resubmit")),
        segment.prop_map(|s| format!("/api/events/{s}/handoff/fail")),
        segment.prop_map(|s| format!("/api/endpoints/{s}/resume")),
        (segment, segment).prop_map(|(a, b)| format!("/{a}/{b}")),
    ];
    let query = prop_oneof![
        Just(String::new()),
        "[A-Za-z0-9%=&_.+-]{0,40}".prop_map(|q| format!("?{q}")),
        (
            prop_oneof![
                Just("limit"),
                Just("status"),
                Just("endpoint"),
                Just("session")
            ],
            "[A-Za-z0-9%_.+-]{0,30}"
        )
            .prop_map(|(k, v)| format!("?{k}={v}")),
    ];
    let method = prop_oneof![
        Just(Method::GET),
        Just(Method::POST),
        Just(Method::PUT),
        Just(Method::DELETE),
        Just(Method::HEAD),
        Just(Method::OPTIONS),
        Just(Method::from_bytes(b"BREW").unwrap()),
    ];
    let content_type = prop_oneof![
        Just(Some("application/json".to_owned())),
        Just(Some("application/json; charset=utf-8".to_owned())),
        Just(None),
        "[ -~]{0,30}".prop_map(Some),
    ];
    let host_header = prop_oneof![
        4 => Just(Some(HOST.to_owned())),
        1 => Just(None),
        1 => "[ -~]{0,30}".prop_map(Some),
    ];
    let origin = prop_oneof![
        3 => Just(None),
        1 => Just(Some("http://127.0.0.1:7300".to_owned())),
        1 => "[ -~]{0,30}".prop_map(Some),
    ];
    let json_value = prop_oneof![
        Just("null".to_owned()),
        any::<i64>().prop_map(|n| n.to_string()),
        any::<f64>().prop_map(|n| n.to_string()),
        "[ -~]{0,20}".prop_map(|s| Value::String(s).to_string()),
        Just("[1,{\"a\":[]}]".to_owned()),
        Just("{\"OrderId\":\"x\"}".to_owned()),
    ];
    let field = prop_oneof![
        proptest::sample::select(vec![
            "event_type",
            "data",
            "session_id",
            "message_id",
            "properties",
            "limit",
            "endpoint",
            "error_text",
            "not_updated_for",
            "dry_run",
        ])
        .prop_map(str::to_owned),
        "[a-z_]{1,12}",
    ];
    let body = prop_oneof![
        Just(String::new()),
        proptest::collection::vec(any::<u8>(), 0..64)
            .prop_map(|b| String::from_utf8_lossy(&b).into_owned()),
        proptest::collection::vec((field, json_value), 0..5).prop_map(|fields| {
            let inner: Vec<String> = fields
                .into_iter()
                .map(|(k, v)| format!("{}:{v}", Value::String(k)))
                .collect();
            format!("{{{}}}", inner.join(","))
        }),
    ];
    let request = (method, path, query, content_type, host_header, origin, body);

    let mut runner = TestRunner::new(RunnerConfig {
        cases: 300,
        failure_persistence: None,
        ..RunnerConfig::default()
    });
    let outcome = runner.run(
        &request,
        |(method, path, query, content_type, host_header, origin, body)| {
            let uri = format!("{path}{query}");
            let mut builder = Request::builder().method(method.clone()).uri(&uri);
            for (name, value) in [
                ("content-type", &content_type),
                ("host", &host_header),
                ("origin", &origin),
            ] {
                if let Some(value) = value {
                    builder = builder.header(name, value);
                }
            }
            // What the http crate will not build, no client can send.
            let Ok(request) = builder.body(Body::from(body.clone())) else {
                return Ok(());
            };
            let response = runtime.block_on(api.clone().oneshot(request)).unwrap();
            if response.status().is_server_error() {
                let bytes = runtime
                    .block_on(axum::body::to_bytes(response.into_body(), usize::MAX))
                    .unwrap_or_default();
                return Err(TestCaseError::fail(format!(
                    "{method} {uri} (content-type {content_type:?}, host {host_header:?}, origin \
                     {origin:?}, body {body:?}) answered a 5xx: {}",
                    String::from_utf8_lossy(&bytes)
                )));
            }
            Ok(())
        },
    );
    runtime.block_on(host.shutdown());
    if let Err(failure) = outcome {
        panic!("{failure}");
    }
}

/// While the broker cannot write its log (a full disk), `/health` answers
/// 503 naming why and a publish is refused with 503 saying the same,
/// instead of `ok` and an opaque 500; once writes work again both recover
/// without a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_and_changes_say_503_while_the_broker_cannot_write_and_recover() {
    let root = tempfile::tempdir().unwrap();
    let host = start(root.path()).await;
    let api = Api(router(ApiState::new(&host)));
    let first = api
        .publish("OrderPlaced", "disk-1", order("o-1", false))
        .await;
    api.wait_status("billing", "disk-1", &first, "Completed")
        .await;

    host.broker().unwrap().inject_write_failures(true);
    // The broker finds out at its next write; a publish makes one.
    let held = tokio::spawn({
        let api = Api(router(ApiState::new(&host)));
        async move {
            api.post(
                "/api/publish",
                &json!({"event_type": "OrderPlaced", "session_id": "disk-2",
                        "data": order("o-2", false)}),
            )
            .await
        }
    });
    let started = Instant::now();
    let health = loop {
        let (status, health) = api.call(Method::GET, "/health", None).await;
        if status == StatusCode::SERVICE_UNAVAILABLE {
            break health;
        }
        assert_eq!(status, StatusCode::OK, "{health}");
        assert!(started.elapsed() < DEADLINE, "never unhealthy");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(health["status"], "unhealthy", "{health}");
    let reason = health["reason"].as_str().unwrap();
    assert!(
        reason.contains("cannot write its log") && reason.contains("No space left on device"),
        "{health}"
    );

    let (status, refused) = api
        .post(
            "/api/publish",
            &json!({"event_type": "OrderPlaced", "session_id": "disk-3",
                    "data": order("o-3", false)}),
        )
        .await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{refused}");
    assert!(
        refused["error"]
            .as_str()
            .unwrap()
            .contains("No space left on device"),
        "{refused}"
    );

    host.broker().unwrap().inject_write_failures(false);
    let started = Instant::now();
    loop {
        let (status, health) = api.call(Method::GET, "/health", None).await;
        if status == StatusCode::OK {
            assert_eq!(health["status"], "ok");
            break;
        }
        assert!(
            started.elapsed() < DEADLINE,
            "never healthy again: {health}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The publish held while the disk was full is written, not lost.
    let (status, held) = held.await.unwrap();
    assert_eq!(status, StatusCode::OK, "{held}");
    let held_id = held["message_id"].as_str().unwrap().to_owned();
    api.wait_status("billing", "disk-2", &held_id, "Completed")
        .await;
    let after = api
        .publish("OrderPlaced", "disk-4", order("o-4", false))
        .await;
    api.wait_status("billing", "disk-4", &after, "Completed")
        .await;
    host.shutdown().await;
}

/// What a host logs at `nimbus run`'s default level (warnings and errors),
/// one entry per line.
#[derive(Clone, Default)]
struct LogLines(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for LogLines {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl LogLines {
    fn lines(&self) -> Vec<String> {
        String::from_utf8_lossy(&self.0.lock().unwrap())
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// A subscriber writing here, made the default of every thread of a
    /// runtime of its own (and of the thread that blocks on it): the other
    /// tests of this binary, running meanwhile, log elsewhere.
    fn runtime(&self) -> (tokio::runtime::Runtime, tracing::Dispatch) {
        let lines = self.clone();
        let dispatch = tracing::Dispatch::new(
            tracing_subscriber::fmt()
                .with_max_level(tracing::Level::WARN)
                .with_ansi(false)
                .without_time()
                .with_writer(move || lines.clone())
                .finish(),
        );
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .on_thread_start({
                let dispatch = dispatch.clone();
                // The thread is this runtime's for its whole life.
                move || std::mem::forget(tracing::dispatcher::set_default(&dispatch))
            })
            .build()
            .unwrap();
        (runtime, dispatch)
    }
}

/// Issue 40: while the broker cannot write (a full disk), an idle host
/// used to log ~140 lines a second (every Resolver session worker and every
/// endpoint retrying twice a second, a line each time), refilling the disk
/// with its log, and two lines per refused request. Its consumers now back
/// off and say so once per cause, and a refused request is one line, once
/// a minute per route: over seconds of a full disk the log grows by a
/// handful of lines, and once writes work the host goes on by itself.
#[test]
fn an_idle_host_on_a_full_disk_logs_a_bounded_number_of_lines() {
    let log = LogLines::default();
    let (runtime, dispatch) = log.runtime();
    tracing::dispatcher::with_default(&dispatch, || {
        runtime.block_on(async {
            let root = tempfile::tempdir().unwrap();
            let host = start(root.path()).await;
            let api = Api(router(ApiState::new(&host)));
            let first = api
                .publish("OrderPlaced", "idle-1", order("o-1", false))
                .await;
            api.wait_status("billing", "idle-1", &first, "Completed")
                .await;
            let before = log.lines().len();

            host.broker().unwrap().inject_write_failures(true);
            // The broker finds out at its next write; a publish makes one,
            // and waits for the disk.
            let held = tokio::spawn({
                let api = Api(router(ApiState::new(&host)));
                async move {
                    api.post(
                        "/api/publish",
                        &json!({"event_type": "OrderPlaced", "session_id": "idle-2",
                                "data": order("o-2", false)}),
                    )
                    .await
                }
            });
            let started = Instant::now();
            while api.call(Method::GET, "/health", None).await.0 != StatusCode::SERVICE_UNAVAILABLE
            {
                assert!(started.elapsed() < DEADLINE, "never unhealthy");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            // A client retrying its publish: each is refused 503, and
            // logged once (it was twice each), then held back.
            for attempt in 0..20 {
                let (status, refused) = api
                    .post(
                        "/api/publish",
                        &json!({"event_type": "OrderPlaced", "session_id": "idle-3",
                                "data": order(&format!("o-3-{attempt}"), false)}),
                    )
                    .await;
                assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{refused}");
            }
            // Seconds of an idle host on a full disk: at the old rate, some
            // 700 lines.
            tokio::time::sleep(Duration::from_secs(5)).await;
            let during: Vec<String> = log.lines().split_off(before);
            // Six causes (the Resolver's accepts, each endpoint's accepts
            // and replay triggers, the publish route), each at most a
            // failure line and the line of its end within a minute.
            assert!(
                during.len() <= 12,
                "{} lines in 5 s of a full disk:\n{}",
                during.len(),
                during.join("\n")
            );

            host.broker().unwrap().inject_write_failures(false);
            let (status, held) = held.await.unwrap();
            assert_eq!(status, StatusCode::OK, "{held}");
            let held_id = held["message_id"].as_str().unwrap().to_owned();
            api.wait_status("billing", "idle-2", &held_id, "Completed")
                .await;
            host.shutdown().await;
        });
    });
}
