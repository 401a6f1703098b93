//! Support code for the black-box tests: they run the built `nimbus` binary
//! as a user would (no library calls), on handlers directories laid out in
//! temporary directories with components built from `examples/` and
//! `tests/guests/`.
//!
//! `scripts/test.sh` builds the guests and the binary before `cargo test`;
//! run it (or `scripts/build-guests.sh` and `cargo build --bin nimbus`)
//! first when running these tests alone.

pub mod orders;
pub mod running;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"))
}

/// The `nimbus` binary: `NIMBUS_BIN`, else `<target>/debug/nimbus`.
pub fn nimbus_bin() -> PathBuf {
    let path = std::env::var_os("NIMBUS_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| target_dir().join("debug").join("nimbus"));
    assert!(
        path.is_file(),
        "the nimbus binary {} is missing: run `cargo build --bin nimbus` (scripts/test.sh does), \
         with the same CARGO_TARGET_DIR, or set NIMBUS_BIN",
        path.display()
    );
    path
}

/// Where the guest components are: `NIMBUS_GUESTS_DIR`, else
/// `<target>/wasm32-wasip2/release`.
pub fn guests_dir() -> PathBuf {
    std::env::var_os("NIMBUS_GUESTS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| target_dir().join("wasm32-wasip2").join("release"))
}

/// The component built from the guest crate `crate_name`.
pub fn guest(crate_name: &str) -> PathBuf {
    let path = guests_dir().join(format!("{}.wasm", crate_name.replace('-', "_")));
    assert!(
        path.is_file(),
        "guest component {} is missing: run scripts/build-guests.sh (with the same \
         CARGO_TARGET_DIR), or point NIMBUS_GUESTS_DIR at the built components",
        path.display()
    );
    path
}

/// A scratch area: a handlers directory and a private compile cache, so
/// tests neither share state nor touch the user's cache.
pub struct Scratch {
    root: tempfile::TempDir,
}

impl Default for Scratch {
    fn default() -> Self {
        Self::new()
    }
}

impl Scratch {
    /// A fresh scratch area with an empty `handlers/` directory.
    pub fn new() -> Self {
        let root = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(root.path().join("handlers")).expect("mkdir handlers");
        Self { root }
    }

    /// The handlers directory.
    pub fn handlers(&self) -> PathBuf {
        self.root.path().join("handlers")
    }

    /// Any path inside the scratch area.
    pub fn path(&self, name: &str) -> PathBuf {
        self.root.path().join(name)
    }

    /// Copies the guest `crate_name` to `handlers/<endpoint>/<handler>.wasm`.
    pub fn install(&self, endpoint: &str, handler: &str, crate_name: &str) -> PathBuf {
        let dir = self.handlers().join(endpoint);
        std::fs::create_dir_all(&dir).expect("mkdir endpoint");
        let path = dir.join(format!("{handler}.wasm"));
        std::fs::copy(guest(crate_name), &path).expect("copy guest");
        path
    }

    /// Writes a file (e.g. a manifest or a bogus component) under the scratch root.
    pub fn write(&self, relative: &str, contents: &[u8]) -> PathBuf {
        let path = self.root.path().join(relative);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).expect("mkdir");
        }
        std::fs::write(&path, contents).expect("write");
        path
    }

    /// Runs `nimbus` with `args` followed by a private `--cache-dir` (every
    /// subcommand that loads components takes one); use [`Scratch::run_raw`]
    /// for anything else, e.g. `--help`.
    pub fn run(&self, args: &[&str]) -> Run {
        let cache = self.path("cache");
        self.run_raw(&with_cache(args, &cache))
    }

    /// Runs `nimbus` with exactly `args`, with `XDG_CACHE_HOME` pointing
    /// into the scratch area.
    pub fn run_raw(&self, args: &[&str]) -> Run {
        let output = self.command(args).output().expect("run nimbus");
        Run { output }
    }

    /// As [`Scratch::run`], for a command that might not end: killed, and
    /// the test failed, if it runs longer than `limit`.
    pub fn run_within(&self, args: &[&str], limit: std::time::Duration) -> Run {
        let cache = self.path("cache");
        let child = self
            .command(&with_cache(args, &cache))
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("run nimbus");
        wait_within(
            child,
            limit,
            &format!("nimbus {args:?} still ran after {limit:?}"),
        )
    }

    /// `nimbus run --config <scratch>/nimbus.toml` that must stop by itself
    /// (a refused start), in the scratch root, with neither `RUST_LOG` nor
    /// `NIMBUS_API_TOKEN` from the test's environment: killed, and the test
    /// failed, if it still runs after a generous minute.
    pub fn run_host_to_exit(&self) -> Run {
        self.run_host_to_exit_with(&self.path("nimbus.toml"))
    }

    /// [`Scratch::run_host_to_exit`] with another configuration file.
    pub fn run_host_to_exit_with(&self, config: &Path) -> Run {
        self.run_host_to_exit_with_args(config, &[])
    }

    /// [`Scratch::run_host_to_exit_with`] with `run_args` after `--config
    /// FILE` (e.g. `--new-resolver-store`).
    pub fn run_host_to_exit_with_args(&self, config: &Path, run_args: &[&str]) -> Run {
        let child = Command::new(nimbus_bin())
            .arg("run")
            .arg("--config")
            .arg(config)
            .args(run_args)
            .current_dir(self.path("."))
            .env_remove("NIMBUS_API_TOKEN")
            .env_remove("RUST_LOG")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn nimbus run");
        wait_within(
            child,
            std::time::Duration::from_secs(60),
            "nimbus run started, where it had to refuse to",
        )
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(nimbus_bin());
        command
            .args(args)
            .env("XDG_CACHE_HOME", self.path("xdg-cache"))
            .env_remove("RUST_LOG");
        command
    }
}

/// `child`'s output once it ends; killed, and the test failed with
/// `running`, if it still runs after `limit`.
fn wait_within(mut child: std::process::Child, limit: std::time::Duration, running: &str) -> Run {
    let started = std::time::Instant::now();
    while child.try_wait().expect("wait for nimbus").is_none() {
        if started.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{running}");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    Run {
        output: child.wait_with_output().expect("nimbus output"),
    }
}

/// `args` followed by `--cache-dir cache`.
fn with_cache<'a>(args: &[&'a str], cache: &'a Path) -> Vec<&'a str> {
    let mut all = args.to_vec();
    all.extend(["--cache-dir", cache.to_str().expect("utf-8 temp path")]);
    all
}

/// What one run of the binary produced.
pub struct Run {
    /// The raw output.
    pub output: Output,
}

impl Run {
    /// The exit code (`None` if killed by a signal).
    pub fn code(&self) -> Option<i32> {
        self.output.status.code()
    }

    /// Stdout as text.
    pub fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.output.stdout).into_owned()
    }

    /// Stderr as text.
    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.output.stderr).into_owned()
    }

    /// Stdout parsed as JSON; panics with both streams if it is not.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.output.stdout).unwrap_or_else(|error| {
            panic!(
                "stdout is not JSON ({error}); stdout:\n{}\nstderr:\n{}",
                self.stdout(),
                self.stderr()
            )
        })
    }

    /// Asserts the exit code, showing both streams on mismatch.
    #[track_caller]
    pub fn expect_code(&self, code: i32) -> &Self {
        assert_eq!(
            self.code(),
            Some(code),
            "unexpected exit code; stdout:\n{}\nstderr:\n{}",
            self.stdout(),
            self.stderr()
        );
        self
    }
}
