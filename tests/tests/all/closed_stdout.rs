//! A command whose stdout is a pipe nobody reads any more (`nimbus events
//! | head -1` once `head` has exited) ends quietly with success instead of
//! panicking on the broken pipe.

use std::process::{Command, Stdio};

use nimbus_blackbox_tests::running::RunningHost;
use nimbus_blackbox_tests::{Scratch, nimbus_bin};

/// Runs `nimbus args...` with stdout a pipe whose read end is already
/// closed, so its first write fails with a broken pipe; returns the exit
/// code and stderr.
fn with_closed_stdout(args: &[&str]) -> (Option<i32>, String) {
    let (reader, writer) = std::io::pipe().expect("a pipe");
    drop(reader);
    let output = Command::new(nimbus_bin())
        .args(args)
        .env_remove("RUST_LOG")
        .stdout(writer)
        .stderr(Stdio::piped())
        .output()
        .expect("run nimbus");
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn a_closed_stdout_ends_a_command_quietly() {
    let scratch = Scratch::new();
    scratch.install("billing", "orders", "orders");
    let config = scratch.write("check.toml", b"[host]\ndata_dir = \"data\"\n");
    let config = config.to_str().expect("utf-8 path");
    let (code, stderr) = with_closed_stdout(&["check", "--config", config]);
    assert_eq!(code, Some(0), "stderr: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");

    let host = RunningHost::start(&scratch, "");
    for args in [
        &["--api", &host.api, "events"][..],
        &["--api", &host.api, "handlers", "--json"][..],
    ] {
        let (code, stderr) = with_closed_stdout(args);
        assert_eq!(code, Some(0), "{args:?}, stderr: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
}

/// The same for stderr (`nimbus check ... 2>&1 >/dev/null | true`): the
/// error line is lost, but the exit code still says the configuration is
/// bad, rather than 101 from a panic on the broken pipe.
#[test]
fn a_closed_stderr_keeps_the_exit_code() {
    let scratch = Scratch::new();
    let config = scratch.write("bad.toml", b"[engine]\nshutdown_grac = \"5s\"\n");
    let (reader, writer) = std::io::pipe().expect("a pipe");
    drop(reader);
    let status = Command::new(nimbus_bin())
        .args(["check", "--config", config.to_str().expect("utf-8 path")])
        .env_remove("RUST_LOG")
        .stdout(Stdio::null())
        .stderr(writer)
        .status()
        .expect("run nimbus");
    assert_eq!(status.code(), Some(1));
}
