//! The operator API against what a web page, a stranger on the network or
//! a forgotten token can send, through the real `nimbus` binary: a
//! cross-origin or non-JSON request is refused before it acts, a foreign
//! `Host` is refused, a configured token is required (and the CLI sends
//! it), an API beyond loopback without a token does not start, listings
//! are capped. Waits poll with a generous deadline; nothing asserts a
//! duration.

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::process::{Child, Command, Stdio};

use nimbus_blackbox_tests::orders::{order, publish};
use nimbus_blackbox_tests::running::{DEADLINE, RunningHost, config_text};
use nimbus_blackbox_tests::{Run, Scratch, nimbus_bin};
use serde_json::{Value, json};

/// A token as `[api] token` and `NIMBUS_API_TOKEN` take it.
const TOKEN: &str = "blackbox-token-0123456789";

/// The test configuration with `[api]` keys added after `listen`.
fn config_with_api(listen: &str, api_keys: &str) -> String {
    config_text("").replace(
        "listen = \"127.0.0.1:0\"",
        &format!("listen = \"{listen}\"\n{api_keys}"),
    )
}

/// An HTTP/1.1 request written by hand (the headers a browser would send,
/// which no client library lets a test choose freely); the status code and
/// the JSON body.
fn request(
    api: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, Value) {
    let address = api.trim_start_matches("http://");
    let mut stream = std::net::TcpStream::connect(address).expect("connect to the API");
    stream
        .set_read_timeout(Some(DEADLINE))
        .expect("a read timeout");
    let mut head = format!("{method} {path} HTTP/1.1\r\nConnection: close\r\n");
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
    stream.write_all(head.as_bytes()).expect("send the head");
    stream.write_all(body.as_bytes()).expect("send the body");
    let mut response = String::new();
    stream
        .read_to_string(&mut response)
        .expect("read the response");
    let (head, body) = response
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("no HTTP response: {response}"));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("no status in {head}"));
    let value = serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {body}"));
    (status, value)
}

fn error_of(value: &Value) -> &str {
    value["error"].as_str().unwrap_or_default()
}

/// `nimbus --api <api> args...` with `NIMBUS_API_TOKEN` set to `token`, or
/// unset.
fn cli_with_token(api: &str, token: Option<&str>, args: &[&str]) -> Run {
    let mut command = Command::new(nimbus_bin());
    command
        .arg("--api")
        .arg(api)
        .args(args)
        .env_remove("NIMBUS_API")
        .env_remove("NIMBUS_API_TOKEN")
        .env_remove("RUST_LOG");
    if let Some(token) = token {
        command.env("NIMBUS_API_TOKEN", token);
    }
    Run {
        output: command.output().expect("run nimbus"),
    }
}

/// A page on another site posts a publish as `text/plain` (no CORS
/// preflight for that) to the loopback API: refused, and nothing is
/// published; so is the same without an Origin, and an operation.
#[test]
fn a_text_plain_post_from_a_foreign_origin_is_refused_and_publishes_nothing() {
    let scratch = Scratch::new();
    scratch.install("billing", "orders", "orders");
    let host = RunningHost::start(&scratch, "");
    let own = host.api.trim_start_matches("http://").to_owned();
    let body = json!({"event_type": "OrderPlaced", "session_id": "s-web",
                      "data": serde_json::from_str::<Value>(&order("web", false)).expect("an order is JSON")})
    .to_string();

    let (status, refused) = request(
        &host.api,
        "POST",
        "/api/publish",
        &[
            ("Host", &own),
            ("Origin", "http://evil.example"),
            ("Content-Type", "text/plain"),
        ],
        &body,
    );
    assert_eq!(status, 403, "{refused}");
    assert!(
        error_of(&refused).contains("Origin header 'http://evil.example' is not this API's"),
        "{refused}"
    );
    let (status, refused) = request(
        &host.api,
        "POST",
        "/api/publish",
        &[("Host", &own), ("Content-Type", "text/plain;charset=UTF-8")],
        &body,
    );
    assert_eq!(status, 415, "{refused}");
    assert!(
        error_of(&refused).contains("send Content-Type: application/json"),
        "{refused}"
    );
    let (status, refused) = request(
        &host.api,
        "POST",
        "/api/endpoints/billing/pause",
        &[("Host", &own), ("Origin", "http://evil.example")],
        "",
    );
    assert_eq!(status, 403, "{refused}");

    // What the CLI sends goes through; recorded after the refused ones
    // would have been (one session, in order), it alone is there.
    let sent = publish(&host, "OrderPlaced", "s-web", &order("cli", false));
    let record = host.wait_status("s-web", &sent, "Completed");
    assert_eq!(record["request_message_id"], sent.as_str());
    let events = host.cli_json(&["events", "--session", "s-web", "--json"]);
    assert_eq!(events.as_array().map(Vec::len), Some(1), "{events:#}");
    let endpoints = host.cli(&["endpoints", "--json"]);
    if endpoints.code() == Some(0) {
        assert!(
            !endpoints.stdout().contains("\"paused\":true"),
            "{}",
            endpoints.stdout()
        );
    }
}

/// A page whose name an attacker re-pointed at 127.0.0.1 (DNS rebinding)
/// sends its own name as `Host`: refused, naming what the API answers to.
#[test]
fn a_request_for_another_host_name_is_refused() {
    let scratch = Scratch::new();
    let host = RunningHost::start(&scratch, "");
    let (status, refused) = request(
        &host.api,
        "GET",
        "/api/events",
        &[("Host", "evil.example")],
        "",
    );
    assert_eq!(status, 421, "{refused}");
    let error = error_of(&refused);
    assert!(
        error.contains("Host header 'evil.example' does not name this API")
            && error.contains("[api] allowed_hosts"),
        "{refused}"
    );
    let (status, refused) = request(
        &host.api,
        "GET",
        "/api/events",
        &[("Host", "evil.example"), ("Origin", "http://evil.example")],
        "",
    );
    assert_eq!(status, 421, "{refused}");
}

/// With `[api] token`, the CLI works when `NIMBUS_API_TOKEN` holds it and
/// fails naming the token otherwise; with the token given to the host by
/// `NIMBUS_API_TOKEN` instead, the same.
#[test]
fn a_token_is_required_when_set_and_the_cli_sends_it() {
    let scratch = Scratch::new();
    scratch.install("billing", "orders", "orders");
    let host = RunningHost::start_with_config(
        &scratch,
        &config_with_api("127.0.0.1:0", &format!("token = \"{TOKEN}\"")),
    );
    let listed = cli_with_token(&host.api, Some(TOKEN), &["events", "--json"]);
    listed.expect_code(0);
    assert_eq!(listed.json(), json!([]));
    cli_with_token(&host.api, Some(TOKEN), &["handlers"]).expect_code(0);

    let missing = cli_with_token(&host.api, None, &["events"]);
    assert_eq!(missing.code(), Some(1), "{}", missing.stderr());
    assert!(
        missing.stderr().contains("401")
            && missing
                .stderr()
                .contains("needs an Authorization: Bearer <token> header")
            && missing.stderr().contains("NIMBUS_API_TOKEN"),
        "{}",
        missing.stderr()
    );
    let wrong = cli_with_token(&host.api, Some("not-the-token-at-all"), &["events"]);
    assert_eq!(wrong.code(), Some(1), "{}", wrong.stderr());
    assert!(
        wrong.stderr().contains("is not this API's"),
        "{}",
        wrong.stderr()
    );
    assert!(!wrong.stderr().contains(TOKEN), "{}", wrong.stderr());
    let malformed = cli_with_token(&host.api, Some("short"), &["events"]);
    assert_eq!(malformed.code(), Some(1));
    assert!(
        malformed
            .stderr()
            .contains("NIMBUS_API_TOKEN: must be at least 16 characters"),
        "{}",
        malformed.stderr()
    );
    // A liveness probe needs no token.
    let own = host.api.trim_start_matches("http://").to_owned();
    let (status, health) = request(&host.api, "GET", "/health", &[("Host", &own)], "");
    assert_eq!(status, 200, "{health}");
    drop(host);

    // The host's token from its environment.
    let other = Scratch::new();
    other.install("billing", "orders", "orders");
    let (mut child, api) = start_with_env_token(&other, &config_text(""));
    let sent = cli_with_token(
        &api,
        Some(TOKEN),
        &[
            "publish",
            "--event-type",
            "OrderPlaced",
            "--session",
            "s-env",
            "--data",
            &order("env", false),
        ],
    );
    sent.expect_code(0);
    let listed = cli_with_token(
        &api,
        Some(TOKEN),
        &["events", "--session", "s-env", "--json"],
    );
    listed.expect_code(0);
    let refused = cli_with_token(&api, None, &["events"]);
    assert_eq!(refused.code(), Some(1), "{}", refused.stderr());
    let _ = child.kill();
    let _ = child.wait();
}

/// `nimbus run` on `config` with `NIMBUS_API_TOKEN` set; the child and its
/// API address once printed.
fn start_with_env_token(scratch: &Scratch, config: &str) -> (Child, String) {
    let config = scratch.write("nimbus.toml", config.as_bytes());
    let mut child = Command::new(nimbus_bin())
        .arg("run")
        .arg("--config")
        .arg(&config)
        .env("NIMBUS_API_TOKEN", TOKEN)
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn nimbus run");
    let stdout = child.stdout.take().expect("piped stdout");
    let api = BufReader::new(stdout)
        .lines()
        .map_while(Result::ok)
        .find_map(|line| line.strip_prefix("API:").map(|url| url.trim().to_owned()));
    match api {
        Some(api) => (child, api),
        None => {
            let _ = child.kill();
            panic!("nimbus run with NIMBUS_API_TOKEN did not print its API address");
        }
    }
}

/// An API beyond loopback without a token would let anyone who reaches it
/// operate the host: `nimbus run` refuses to start and `nimbus check`
/// refuses the file, naming `[api] token`. With a token it starts, and the
/// CLI reaches it by the address it printed.
#[test]
fn an_api_beyond_loopback_without_a_token_does_not_start() {
    let scratch = Scratch::new();
    let open = config_with_api("0.0.0.0:0", "");
    let path = scratch.write("open.toml", open.as_bytes());
    // Killed and failed if it starts and runs instead.
    let run = scratch.run_host_to_exit_with(&path);
    assert_eq!(run.code(), Some(1), "{}", run.stderr());
    let refusal = run.stderr();
    assert!(
        refusal
            .contains("api.token: the API listens on 0.0.0.0:0, beyond loopback, and has no token")
            && refusal.contains("Set [api] token (or NIMBUS_API_TOKEN)"),
        "{refusal}"
    );
    let check = scratch.run_raw(&["check", "--config", path.to_str().expect("utf-8 temp path")]);
    assert_eq!(check.code(), Some(1), "{}", check.stdout());
    assert!(check.stderr().contains("[api] token"), "{}", check.stderr());

    let guarded = Scratch::new();
    let host = RunningHost::start_with_config(
        &guarded,
        &config_with_api("0.0.0.0:0", &format!("token = \"{TOKEN}\"")),
    );
    cli_with_token(&host.api, Some(TOKEN), &["events"]).expect_code(0);
    assert!(
        !host.stderr().contains("has no authentication"),
        "{}",
        host.stderr()
    );
}

/// A listing asked for more than the host lists at once is refused naming
/// `limit`, not answered with everything.
#[test]
fn a_listing_limit_over_the_maximum_is_refused() {
    let scratch = Scratch::new();
    let host = RunningHost::start(&scratch, "");
    let over = host.cli(&["events", "--limit", "5000"]);
    assert_eq!(over.code(), Some(1), "{}", over.stderr());
    assert!(
        over.stderr()
            .contains("limit: 5000 is over the maximum of 1000"),
        "{}",
        over.stderr()
    );
    host.cli(&["events", "--limit", "1000"]).expect_code(0);
}
