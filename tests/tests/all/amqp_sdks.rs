//! Microsoft's Python SDK (`azure-servicebus`, pinned in
//! `tests/python/requirements.txt`) against the AMQP endpoint of the real
//! `nimbus run` (issue 29): the pytest suite in `tests/python` publishes
//! NimBus events that the wasm handler runs, and checks that tokens not
//! signed with the configured key, expired, or for another entity are
//! refused, and an unknown topic is not found; it receives from sessions
//! (named and next available) and the dead-letter queue, settles, keeps
//! session state, and meets the errors of a lost or held lock; and that a
//! client forging the Manager's control messages is refused while the
//! operator's own commands work (issue 40). Locks last 5 s here, so a lapse
//! is quick to reach. A second host serves its endpoint over TLS, which the
//! SDK reaches as it reaches a namespace.
//!
//! Microsoft's JavaScript SDK (`@azure/service-bus`, pinned in
//! `tests/js/package-lock.json`) then runs the suite in `tests/js` against
//! the same host: what it does differently from the Python SDK (string
//! keys in a dead-letter's error, tokens put for `$management` only,
//! closing) (issue 39).
//!
//! The environments are made by `scripts/python-env.sh` and
//! `scripts/js-env.sh`, which the README's test command runs;
//! `NIMBUS_PYTHON` names the Python interpreter and `NIMBUS_JS_ENV` the
//! directory holding the SDK's `node_modules`.

use std::path::{Path, PathBuf};
use std::process::Command;

use nimbus_blackbox_tests::Scratch;
use nimbus_blackbox_tests::running::RunningHost;

const KEY_NAME: &str = "RootManageSharedAccessKey";
const KEY: &str = "a key only this test knows";
/// Keys with one right each, as Service Bus policies with one claim.
const SEND_KEY: (&str, &str) = ("SendOnly", "a key that may only send");
const LISTEN_KEY: (&str, &str) = ("ListenOnly", "a key that may only listen");

/// What an environment script made: the path `var` names, else `made`
/// under the target directory, where `ready` holds of it.
fn prepared(var: &str, made: &str, ready: impl Fn(&Path) -> bool, script: &str) -> PathBuf {
    let path = std::env::var_os(var).map(PathBuf::from).unwrap_or_else(|| {
        let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(
            || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target"),
            PathBuf::from,
        );
        target.join(made)
    });
    assert!(
        ready(&path),
        "no environment at {}: run {script} (the README's test command, scripts/test.sh, \
         does), or set {var}",
        path.display()
    );
    path
}

/// The interpreter of the environment `scripts/python-env.sh` made.
fn python() -> PathBuf {
    prepared(
        "NIMBUS_PYTHON",
        "pyenv/bin/python",
        Path::is_file,
        "scripts/python-env.sh",
    )
}

/// The directory `scripts/js-env.sh` installed the JavaScript SDK in.
fn js_env() -> PathBuf {
    prepared(
        "NIMBUS_JS_ENV",
        "jsenv",
        |dir| dir.join("node_modules/@azure/service-bus").is_dir(),
        "scripts/js-env.sh",
    )
}

/// The port of an `AMQP:` address `nimbus run` printed.
fn port_of(amqp: &str) -> String {
    amqp.rsplit(':')
        .next()
        .unwrap_or_else(|| panic!("no port in {amqp}"))
        .to_owned()
}

#[test]
fn microsofts_python_and_javascript_sdks_work_through_the_amqp_endpoint() {
    let python = python();
    let js_env = js_env();
    let scratch = Scratch::new();
    scratch.install("billing", "orders", "orders");
    // A handler that hands an event off, for test_amqp_control.py's forged
    // handoff completions and failures.
    scratch.install("echoes", "echo", "echo");
    let host = RunningHost::start(
        &scratch,
        &format!(
            "[amqp]\nlisten = \"127.0.0.1:0\"\n[[amqp.keys]]\nname = \"{KEY_NAME}\"\nkey = \"{KEY}\"\n\
             [[amqp.keys]]\nname = \"{}\"\nkey = \"{}\"\nrights = [\"Send\"]\n\
             [[amqp.keys]]\nname = \"{}\"\nkey = \"{}\"\nrights = [\"Listen\"]\n",
            SEND_KEY.0, SEND_KEY.1, LISTEN_KEY.0, LISTEN_KEY.1
        ),
    );
    let port = port_of(&host.banner_value("AMQP:"));
    // A second host serving its endpoint over TLS, for test_amqp_tls.py.
    let tls_scratch = Scratch::new();
    let fixtures = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../host/servicebus/tests/tls");
    let tls_host = RunningHost::start(
        &tls_scratch,
        &format!(
            "[amqp]\nlisten = \"127.0.0.1:0\"\ntls_certificate = \"{}\"\ntls_key = \"{}\"\n\
             [[amqp.keys]]\nname = \"{KEY_NAME}\"\nkey = \"{KEY}\"\n",
            fixtures.join("localhost.pem").display(),
            fixtures.join("localhost.key").display()
        ),
    );
    let tls_amqp = tls_host.banner_value("AMQP:");
    assert!(tls_amqp.starts_with("amqps://"), "{tls_amqp}");
    let tls_port = port_of(&tls_amqp);
    let suite = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("python");
    let pytest = Command::new(&python)
        .args([
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "--durations=8",
        ])
        .arg(&suite)
        .env("NIMBUS_TEST_AMQP", format!("localhost:{port}"))
        .env("NIMBUS_TEST_API", &host.api)
        .env("NIMBUS_TEST_KEY_NAME", KEY_NAME)
        .env("NIMBUS_TEST_KEY", KEY)
        .env("NIMBUS_TEST_AMQPS", format!("localhost:{tls_port}"))
        .env("NIMBUS_TEST_PID", host.pid().to_string())
        .env("NIMBUS_TEST_TLS_PID", tls_host.pid().to_string())
        .env(
            "NIMBUS_TEST_LOG",
            host.stderr_path().expect("the host logs to a file"),
        )
        .env("NIMBUS_TEST_SEND_KEY_NAME", SEND_KEY.0)
        .env("NIMBUS_TEST_SEND_KEY", SEND_KEY.1)
        .env("NIMBUS_TEST_LISTEN_KEY_NAME", LISTEN_KEY.0)
        .env("NIMBUS_TEST_LISTEN_KEY", LISTEN_KEY.1)
        .env("NIMBUS_TEST_CA", fixtures.join("ca.pem"))
        .output()
        .expect("run pytest");
    let report = String::from_utf8_lossy(&pytest.stdout);
    // Shown with --nocapture: which cases ran, and how long they took.
    println!("{report}");
    assert!(
        pytest.status.success(),
        "pytest failed:\n{report}\n{}\nhost log:\n{}",
        String::from_utf8_lossy(&pytest.stderr),
        host.stderr()
    );
    // Every case ran: none skipped or deselected by a missing fixture.
    assert!(
        report.contains(" passed") && !report.contains("skipped") && !report.contains("deselected"),
        "{report}"
    );
    // The SDK shows a refused token only as "client error"; the host's log
    // says why each was refused.
    let log = host.stderr();
    for why in [
        "the token's signature does not match key 'RootManageSharedAccessKey'",
        "the token is signed with key 'NoSuchKey', which this endpoint does not have",
        "the token expired ",
    ] {
        assert!(
            log.contains(why),
            "the host log does not say {why:?}:\n{log}"
        );
    }

    // The JavaScript SDK, against the same host.
    let js_suite = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("js/endpoint.test.mjs");
    let node = Command::new("node")
        .arg("--test")
        .arg(&js_suite)
        .env("NIMBUS_JS_ENV", &js_env)
        .env("NIMBUS_TEST_AMQP", format!("localhost:{port}"))
        .env("NIMBUS_TEST_KEY_NAME", KEY_NAME)
        .env("NIMBUS_TEST_KEY", KEY)
        .output()
        .expect("run node (Node.js 20 or later)");
    let report = String::from_utf8_lossy(&node.stdout);
    println!("{report}");
    assert!(
        node.status.success(),
        "the JavaScript suite failed:\n{report}\n{}\nhost log:\n{}",
        String::from_utf8_lossy(&node.stderr),
        host.stderr()
    );
    // Every case ran and passed (node's TAP summary).
    assert!(
        report.contains("# pass 3") && report.contains("# fail 0"),
        "{report}"
    );

    let (code, _) = host.terminate();
    assert_eq!(code, Some(0));
    let (code, _) = tls_host.terminate();
    assert_eq!(code, Some(0));
}
