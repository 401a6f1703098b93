//! A `nimbus run` child process on a scratch area, for the black-box tests
//! of the host and the client commands: it is started with a free port
//! (`[api] listen = "127.0.0.1:0"`, the bound address read from what
//! `nimbus run` prints), driven only through the `nimbus` CLI, and killed
//! when dropped, even when the test fails.

use std::io::{BufRead as _, BufReader, Read as _};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::{Run, Scratch, nimbus_bin};

/// How long any wait may take before the test fails. Generous on purpose:
/// tests run on a shared 2-core box; none measures time.
pub const DEADLINE: Duration = Duration::from_secs(120);

/// The configuration the tests run with, plus `extra` TOML.
pub fn config_text(extra: &str) -> String {
    format!(
        r#"
[host]
data_dir = "data"
handlers_dir = "handlers"
removal_grace = "1s"

[api]
listen = "127.0.0.1:0"

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
    )
}

/// A running `nimbus run`.
pub struct RunningHost {
    child: Child,
    /// The API's base URL, e.g. `http://127.0.0.1:41234`.
    pub api: String,
    /// Where its stderr goes; `None` when a test holds it as a pipe.
    stderr_path: Option<PathBuf>,
    stdout_lines: mpsc::Receiver<String>,
}

/// The read end of a host's stderr pipe that nobody reads, as a log shipper
/// that stalls would leave it.
pub struct StalledStderr(std::io::PipeReader);

impl StalledStderr {
    /// How many bytes wait in the pipe. Once it stops growing while the
    /// host logs, its writes are blocked: a write of a line that does not
    /// fit in the room left waits whole (lines are under `PIPE_BUF`).
    pub fn buffered(&self) -> u64 {
        rustix::io::ioctl_fionread(&self.0).expect("FIONREAD on the stderr pipe")
    }

    /// Starts reading the pipe to its end on a thread; join it for
    /// everything the host wrote from the start.
    pub fn drain(self) -> std::thread::JoinHandle<String> {
        let mut pipe = self.0;
        std::thread::spawn(move || {
            let mut text = String::new();
            let _ = pipe.read_to_string(&mut text);
            text
        })
    }
}

impl RunningHost {
    /// Writes `nimbus.toml` into the scratch root and starts `nimbus run`
    /// on it; returns once the API address is printed.
    ///
    /// # Panics
    /// When the host does not start within [`DEADLINE`], with its stderr.
    pub fn start(scratch: &Scratch, extra_config: &str) -> RunningHost {
        RunningHost::start_with_config(scratch, &config_text(extra_config))
    }

    /// As [`RunningHost::start`] with the whole configuration given (to
    /// change what [`config_text`] sets). Its stderr file starts empty, so
    /// a host started again on the same scratch area logs afresh.
    pub fn start_with_config(scratch: &Scratch, config: &str) -> RunningHost {
        RunningHost::start_with_run_args(scratch, config, &[])
    }

    /// As [`RunningHost::start_with_config`], with `run_args` after
    /// `nimbus run --config FILE` (e.g. `--new-resolver-store`).
    pub fn start_with_run_args(scratch: &Scratch, config: &str, run_args: &[&str]) -> RunningHost {
        let stderr_path = scratch.path("nimbus-run.stderr");
        let stderr = std::fs::File::create(&stderr_path).expect("create the stderr file");
        let child = spawn(scratch, config, run_args, "info", stderr.into());
        RunningHost::started(child, Some(stderr_path))
    }

    /// As [`RunningHost::start`], logging at `rust_log`, with its stderr a
    /// pipe of one page that the caller holds and does not read.
    pub fn start_with_stalled_stderr(
        scratch: &Scratch,
        extra_config: &str,
        rust_log: &str,
    ) -> (RunningHost, StalledStderr) {
        let config = config_text(extra_config);
        let (reader, writer) = std::io::pipe().expect("a pipe for stderr");
        // The smallest pipe Linux makes, set before the host can write, so a
        // few lines fill it.
        rustix::pipe::fcntl_setpipe_size(&writer, 4096).expect("shrink the stderr pipe");
        let child = spawn(scratch, &config, &[], rust_log, writer.into());
        (RunningHost::started(child, None), StalledStderr(reader))
    }

    fn started(mut child: Child, stderr_path: Option<PathBuf>) -> RunningHost {
        let stdout = child.stdout.take().expect("piped stdout");
        let (lines_tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if lines_tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut host = RunningHost {
            child,
            api: String::new(),
            stderr_path,
            stdout_lines: lines,
        };
        let started = Instant::now();
        loop {
            let left = DEADLINE.saturating_sub(started.elapsed());
            match host.stdout_lines.recv_timeout(left) {
                Ok(line) => {
                    if let Some(url) = line.strip_prefix("API:") {
                        host.api = url.trim().to_owned();
                        return host;
                    }
                }
                Err(_) => panic!(
                    "nimbus run did not print its API address; stderr:\n{}",
                    host.stderr()
                ),
            }
        }
    }

    /// The value of the first line of what `nimbus run` printed after its
    /// `API:` line that starts with `label` (`"AMQP:"`), trimmed.
    ///
    /// # Panics
    /// When no such line comes within [`DEADLINE`].
    pub fn banner_value(&self, label: &str) -> String {
        let started = Instant::now();
        loop {
            let left = DEADLINE.saturating_sub(started.elapsed());
            match self.stdout_lines.recv_timeout(left) {
                Ok(line) => {
                    if let Some(value) = line.strip_prefix(label) {
                        return value.trim().to_owned();
                    }
                }
                Err(_) => panic!(
                    "nimbus run printed no {label} line; stderr:\n{}",
                    self.stderr()
                ),
            }
        }
    }

    /// The host's process id (to read its memory and threads in /proc).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The file its stderr (its log) goes to, if it goes to one.
    pub fn stderr_path(&self) -> Option<&std::path::Path> {
        self.stderr_path.as_deref()
    }

    /// What the host logged so far.
    pub fn stderr(&self) -> String {
        match &self.stderr_path {
            Some(path) => std::fs::read_to_string(path).unwrap_or_default(),
            None => "(a pipe the test holds unread)".to_owned(),
        }
    }

    /// Runs `nimbus --api <this host> args...`.
    pub fn cli(&self, args: &[&str]) -> Run {
        let output = Command::new(nimbus_bin())
            .arg("--api")
            .arg(&self.api)
            .args(args)
            .env_remove("NIMBUS_API")
            .env_remove("RUST_LOG")
            .output()
            .expect("run nimbus");
        Run { output }
    }

    /// Runs a CLI command that must succeed and print JSON.
    #[track_caller]
    pub fn cli_json(&self, args: &[&str]) -> serde_json::Value {
        let run = self.cli(args);
        run.expect_code(0);
        run.json()
    }

    /// `nimbus event ID --json`, or `None` while the Resolver does not know
    /// the event yet (it records a publish shortly after the broker
    /// acknowledged it). Any other failure panics.
    #[track_caller]
    pub fn event_json(&self, id: &str) -> Option<serde_json::Value> {
        let run = self.cli(&["event", id, "--json"]);
        if run.code() != Some(0) && run.stderr().contains("is known to the Resolver") {
            return None;
        }
        run.expect_code(0);
        Some(run.json())
    }

    /// `GET /metrics` (the CLI has no command for it: Prometheus scrapes
    /// it), over a plain HTTP/1.0 request; the body.
    #[track_caller]
    pub fn metrics(&self) -> String {
        let (status, body) = self.get("/metrics");
        assert_eq!(status, 200, "{body}");
        body
    }

    /// `GET path` over a plain HTTP/1.0 request, as a probe or a scraper
    /// makes it: the status code and the body.
    #[track_caller]
    pub fn get(&self, path: &str) -> (u16, String) {
        use std::io::Write as _;
        let address = self.api.trim_start_matches("http://");
        let mut stream = std::net::TcpStream::connect(address).expect("connect to the API");
        write!(stream, "GET {path} HTTP/1.0\r\nHost: {address}\r\n\r\n").expect("send");
        let mut response = String::new();
        stream
            .read_to_string(&mut response)
            .expect("read the response");
        let (head, body) = response
            .split_once("\r\n\r\n")
            .unwrap_or_else(|| panic!("no HTTP response: {response}"));
        let status = head
            .split(' ')
            .nth(1)
            .and_then(|code| code.parse().ok())
            .unwrap_or_else(|| panic!("no status in {head}"));
        (status, body.to_owned())
    }

    /// Polls `check` until it returns `Some`; panics with `what` and the
    /// host's log after [`DEADLINE`].
    #[track_caller]
    pub fn eventually<T>(&self, what: &str, mut check: impl FnMut() -> Option<T>) -> T {
        let started = Instant::now();
        loop {
            if let Some(found) = check() {
                return found;
            }
            assert!(
                started.elapsed() < DEADLINE,
                "never happened: {what}; host stderr:\n{}",
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The event published as `message_id` in `session`, once its status is
    /// `status` (polls `nimbus events --session S --json`).
    #[track_caller]
    pub fn wait_status(&self, session: &str, message_id: &str, status: &str) -> serde_json::Value {
        let started = Instant::now();
        loop {
            let events = self.cli_json(&["events", "--session", session, "--json"]);
            let record = events
                .as_array()
                .into_iter()
                .flatten()
                .find(|r| r["request_message_id"] == message_id)
                .cloned();
            if let Some(record) = &record
                && record["status"] == status
            {
                return record.clone();
            }
            assert!(
                started.elapsed() < DEADLINE,
                "{message_id} in session {session} never became {status}; last record: \
                 {record:#?}; host stderr:\n{}",
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Sends SIGTERM and waits for the process to exit; returns its exit
    /// code and everything it printed to stdout after starting.
    ///
    /// # Panics
    /// When it does not exit within [`DEADLINE`].
    pub fn terminate(self) -> (Option<i32>, String) {
        self.sigterm();
        self.wait_exit()
    }

    /// SIGKILL, as a crash: nothing is shut down.
    pub fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Sends SIGTERM, without waiting.
    pub fn sigterm(&self) {
        let status = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -TERM failed");
    }

    /// Waits for the process to exit (after a signal); returns its exit
    /// code and everything it printed to stdout after starting.
    ///
    /// # Panics
    /// When it does not exit within [`DEADLINE`].
    pub fn wait_exit(mut self) -> (Option<i32>, String) {
        let started = Instant::now();
        loop {
            if let Some(exit) = self.child.try_wait().expect("wait for nimbus run") {
                let rest: Vec<String> = self.stdout_lines.try_iter().collect();
                return (exit.code(), rest.join("\n"));
            }
            assert!(
                started.elapsed() < DEADLINE,
                "nimbus run did not exit after SIGTERM; stderr:\n{}",
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// Starts `nimbus run` on `config`, written to `nimbus.toml` in the scratch
/// root, with `run_args`, logging at `rust_log` into `stderr`.
fn spawn(
    scratch: &Scratch,
    config: &str,
    run_args: &[&str],
    rust_log: &str,
    stderr: Stdio,
) -> Child {
    let config = scratch.write("nimbus.toml", config.as_bytes());
    Command::new(nimbus_bin())
        .arg("run")
        .arg("--config")
        .arg(&config)
        .args(run_args)
        .env("RUST_LOG", rust_log)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .expect("spawn nimbus run")
}

impl Drop for RunningHost {
    fn drop(&mut self) {
        // Killing an exited child is a harmless error.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
