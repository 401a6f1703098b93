//! One host per data directory (decision record 0109), through the `nimbus`
//! binary: a second `nimbus run` on a data directory a live host holds is
//! refused before it opens anything, naming the directory and the holder;
//! once the holder is killed with SIGKILL, the lock file it left behind does
//! not stop a new host on the same directory.

use std::io::{BufRead as _, BufReader};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::Instant;

use nimbus_blackbox_tests::running::{DEADLINE, RunningHost, config_text};
use nimbus_blackbox_tests::{Scratch, nimbus_bin};

/// A `nimbus run` child whose pid the test needs; killed (SIGKILL) when
/// dropped, even when the test fails.
struct Spawned {
    child: Child,
    stdout_lines: mpsc::Receiver<String>,
}

impl Spawned {
    /// `stderr` is read only by [`Spawned::wait_exit`]; a host that keeps
    /// running gets none, so it never blocks on a full pipe.
    fn start(config: &Path, stderr: Stdio) -> Spawned {
        let mut child = Command::new(nimbus_bin())
            .arg("run")
            .arg("--config")
            .arg(config)
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .expect("spawn nimbus run");
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, stdout_lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Spawned {
            child,
            stdout_lines,
        }
    }

    /// Waits for the `API:` line of a host that started; returns the URL.
    fn wait_started(&self) -> String {
        let started = Instant::now();
        loop {
            let left = DEADLINE.saturating_sub(started.elapsed());
            let line = self
                .stdout_lines
                .recv_timeout(left)
                .expect("nimbus run printed its API address");
            if let Some(url) = line.strip_prefix("API:") {
                return url.trim().to_owned();
            }
        }
    }

    /// Waits for the process to exit; panics if it starts serving instead
    /// (what a second host did before the lock), or after [`DEADLINE`].
    fn wait_exit(mut self) -> (ExitStatus, String) {
        let started = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().expect("wait for nimbus run") {
                let mut stderr = String::new();
                if let Some(mut pipe) = self.child.stderr.take() {
                    let _ = std::io::Read::read_to_string(&mut pipe, &mut stderr);
                }
                return (status, stderr);
            }
            if let Ok(line) = self.stdout_lines.try_recv() {
                assert!(
                    !line.starts_with("API:"),
                    "a second host started on a data directory in use: {line}"
                );
            }
            assert!(
                started.elapsed() < DEADLINE,
                "nimbus run neither started nor exited"
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        // Child::kill is SIGKILL on Unix; killing an exited child is a
        // harmless error.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn a_second_host_on_a_data_directory_in_use_is_refused_until_the_holder_dies() {
    let scratch = Scratch::new();
    // Port 0: the holder records the port it was given, not the 0.
    let config = scratch.write("nimbus.toml", config_text("").as_bytes());
    let first = Spawned::start(&config, Stdio::null());
    let api = first.wait_started();
    assert!(!api.ends_with(":0"), "{api}");
    let holder_pid = first.child.id();

    // On the holder's very port: refused for the data directory (named with
    // its holder), which is checked before the API is bound.
    let same_port = config_text("").replace(
        r#"listen = "127.0.0.1:0""#,
        &format!(r#"listen = "{}""#, api.trim_start_matches("http://")),
    );
    assert!(
        same_port.contains(api.trim_start_matches("http://")),
        "{same_port}"
    );
    let same_port = scratch.write("same-port.toml", same_port.as_bytes());
    let (status, stderr) = Spawned::start(&same_port, Stdio::piped()).wait_exit();
    assert_eq!(
        status.code(),
        Some(1),
        "refused with exit 1; stderr:\n{stderr}"
    );
    let data_dir = scratch.path("data");
    let expected_start = format!(
        "error: the data directory {} is in use by another nimbus host (pid {holder_pid}, started ",
        data_dir.display()
    );
    let expected_end = format!(", API {api}); stop it or give this host another [host] data_dir");
    assert!(
        stderr.contains(&expected_start) && stderr.contains(&expected_end),
        "the refusal names the data directory and the holder; stderr:\n{stderr}"
    );
    assert!(
        !stderr.contains("opening the broker") && !stderr.contains("cannot listen"),
        "refused before the broker opened and the API bound; stderr:\n{stderr}"
    );

    // kill -9: nothing runs on exit, the lock file stays, naming a dead pid.
    drop(first);
    let left_behind =
        std::fs::read_to_string(data_dir.join("nimbus.lock")).expect("the lock file stays");
    assert!(
        left_behind.contains(&format!("pid={holder_pid}\n")),
        "{left_behind}"
    );

    let host = RunningHost::start(&scratch, "");
    let events = host.cli_json(&["events", "--json"]);
    assert!(events.is_array(), "the new host serves: {events}");
}
