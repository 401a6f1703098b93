//! Shared by the sandbox's integration tests: finding the guest components
//! `scripts/build-guests.sh` built, and laying out handlers directories.

#![allow(missing_docs, reason = "test support")]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use nimbus_handler::Event;
use nimbus_sandbox::{Registry, Sandbox, SandboxConfig};

/// Where the guest components are: `NIMBUS_GUESTS_DIR`, else
/// `$CARGO_TARGET_DIR/wasm32-wasip2/release`, else the workspace's
/// `target/wasm32-wasip2/release`.
pub(crate) fn guests_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("NIMBUS_GUESTS_DIR") {
        return PathBuf::from(dir);
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"));
    target.join("wasm32-wasip2").join("release")
}

/// The component built from the guest crate `crate_name` (dashes allowed).
pub(crate) fn guest(crate_name: &str) -> PathBuf {
    let file = format!("{}.wasm", crate_name.replace('-', "_"));
    let path = guests_dir().join(&file);
    assert!(
        path.is_file(),
        "guest component {} is missing: run scripts/build-guests.sh \
         (with the same CARGO_TARGET_DIR), or point NIMBUS_GUESTS_DIR at the built components",
        path.display()
    );
    path
}

/// A sandbox with test-friendly settings and, if given, a cache directory.
pub(crate) fn sandbox_with(
    cache_dir: Option<&Path>,
    tweak: impl FnOnce(&mut SandboxConfig),
) -> Sandbox {
    let mut config = SandboxConfig {
        cache_dir: cache_dir.map(Path::to_owned),
        max_concurrent_instances: 32,
        ..SandboxConfig::default()
    };
    tweak(&mut config);
    Sandbox::new(config).expect("sandbox starts")
}

/// A default test sandbox without a cache.
pub(crate) fn sandbox() -> Sandbox {
    sandbox_with(None, |_| {})
}

/// An event of `event_type` carrying `payload`.
pub(crate) fn event(event_type: &str, payload: &str) -> Event {
    Event {
        event_id: format!("evt-{event_type}"),
        event_type: event_type.to_owned(),
        message_id: format!("msg-{event_type}"),
        session_id: "session-1".to_owned(),
        payload: payload.to_owned(),
        ..Event::default()
    }
}

/// A temporary handlers directory.
pub(crate) struct HandlersDir {
    pub(crate) dir: tempfile::TempDir,
}

impl HandlersDir {
    pub(crate) fn new() -> Self {
        Self {
            dir: tempfile::tempdir().expect("tempdir"),
        }
    }

    pub(crate) fn path(&self) -> &Path {
        self.dir.path()
    }

    /// `<dir>/<endpoint>/<handler>.wasm`.
    pub(crate) fn component_path(&self, endpoint: &str, handler: &str) -> PathBuf {
        self.dir
            .path()
            .join(endpoint)
            .join(format!("{handler}.wasm"))
    }

    /// Installs `guest` as `<endpoint>/<handler>.wasm` by write-then-rename.
    pub(crate) fn install(&self, endpoint: &str, handler: &str, guest: &Path) -> PathBuf {
        let bytes = std::fs::read(guest).expect("read guest");
        self.install_bytes(endpoint, handler, &bytes)
    }

    /// Writes `bytes` as `<endpoint>/<handler>.wasm` by write-then-rename.
    pub(crate) fn install_bytes(&self, endpoint: &str, handler: &str, bytes: &[u8]) -> PathBuf {
        let dir = self.dir.path().join(endpoint);
        std::fs::create_dir_all(&dir).expect("mkdir endpoint");
        let temp = dir.join(format!(".{handler}.wasm.tmp"));
        std::fs::write(&temp, bytes).expect("write temp");
        let path = self.component_path(endpoint, handler);
        std::fs::rename(&temp, &path).expect("rename into place");
        path
    }

    /// Writes the manifest `<endpoint>/<handler>.toml`.
    pub(crate) fn manifest(&self, endpoint: &str, handler: &str, text: &str) {
        let dir = self.dir.path().join(endpoint);
        std::fs::create_dir_all(&dir).expect("mkdir endpoint");
        std::fs::write(dir.join(format!("{handler}.toml")), text).expect("write manifest");
    }

    pub(crate) fn remove(&self, endpoint: &str, handler: &str) {
        std::fs::remove_file(self.component_path(endpoint, handler)).expect("remove component");
    }
}

/// Waits until `condition` holds, waking on each new registry snapshot. The
/// 120 s bound only turns a hang into a failure; nothing asserts how long
/// it took.
pub(crate) fn wait_for(
    registry: &Arc<Registry>,
    what: &str,
    condition: impl Fn(&Registry) -> bool,
) {
    let mut changes = registry.subscribe();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime");
    let waited = runtime.block_on(async {
        // Built inside the runtime: the timer needs its context.
        tokio::time::timeout(Duration::from_secs(120), async {
            loop {
                changes.borrow_and_update();
                if condition(registry) {
                    return;
                }
                if changes.changed().await.is_err() {
                    return;
                }
            }
        })
        .await
    });
    assert!(
        waited.is_ok() && condition(registry),
        "gave up waiting for: {what}"
    );
}
