//! The registry: which handler version serves (endpoint, event type) now.
//!
//! Readers take an `Arc<Snapshot>` (one read-lock, one `Arc` clone) and keep
//! using it however long they like; a reload builds a new snapshot off to the
//! side, validates the new version completely, and only then replaces the
//! snapshot. That is the whole hot-swap protocol: in-flight invocations hold
//! the old `Arc<HandlerVersion>` and finish on it; new lookups see the new
//! one; a version that fails to load never becomes visible.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::SystemTime;

use tokio::sync::watch;

use crate::config::MAX_REMOVAL_GRACE;
use crate::digest::Digest;
use crate::error::{LoadError, RegistryError};
use crate::layout::{self, HandlerKey};
use crate::manifest::Manifest;
use crate::runtime::Sandbox;
use crate::version::HandlerVersion;
use crate::watcher::{self, WatchGuard};

/// Times a component is re-read when it changed while being loaded, before
/// the load is given up as unstable (the next change event retries).
const MAX_UNSTABLE_READS: usize = 3;

/// The state of one handler in the handlers directory.
#[derive(Clone, Debug)]
pub struct HandlerStatus {
    /// Endpoint and handler name.
    pub key: HandlerKey,
    /// The component file.
    pub path: PathBuf,
    /// The version serving now; `None` if no version of it ever loaded.
    pub serving: Option<Arc<HandlerVersion>>,
    /// When the serving version was swapped in.
    pub last_swap: Option<SystemTime>,
    /// Why the last load failed, if it did (the serving version, if any, is
    /// still the one before that load).
    pub last_error: Option<String>,
    /// How many versions have been swapped in since the registry opened.
    pub swaps: u64,
    /// Its component file is gone: the serving version keeps serving until
    /// then ([`crate::SandboxConfig::removal_grace`]), and its event types
    /// are unregistered unless a file for it comes back first.
    pub removing_at: Option<SystemTime>,
    /// The inputs of the last load attempt (component digest and manifest
    /// digest), so an unchanged file is not loaded again.
    attempted: Option<(Digest, Digest)>,
}

impl HandlerStatus {
    /// In a word, for operators: `serving`, `serving-previous` (a newer
    /// file failed to load; the version before it serves), `removing` (its
    /// file was deleted; it serves until [`HandlerStatus::removing_at`]) or
    /// `failed` (no version of it loaded).
    pub fn state(&self) -> &'static str {
        match (&self.serving, &self.last_error) {
            (Some(_), _) if self.removing_at.is_some() => "removing",
            (Some(_), None) => "serving",
            (Some(_), Some(_)) => "serving-previous",
            (None, _) => "failed",
        }
    }
}

/// An immutable view of the registry at one moment.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    generation: u64,
    handlers: BTreeMap<HandlerKey, HandlerStatus>,
    routes: BTreeMap<String, BTreeMap<String, Arc<HandlerVersion>>>,
    problems: Vec<String>,
}

impl Snapshot {
    /// Increases with every change; 0 is the empty registry before the first scan.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The version serving `event_type` in `endpoint`, if any.
    pub fn lookup(&self, endpoint: &str, event_type: &str) -> Option<&Arc<HandlerVersion>> {
        self.routes.get(endpoint)?.get(event_type)
    }

    /// Every endpoint that has a handler for `event_type` (fan-out).
    pub fn endpoints_for(&self, event_type: &str) -> Vec<&str> {
        self.routes
            .iter()
            .filter(|(_, types)| types.contains_key(event_type))
            .map(|(endpoint, _)| endpoint.as_str())
            .collect()
    }

    /// The endpoints with at least one serving handler.
    pub fn endpoints(&self) -> impl Iterator<Item = &str> {
        self.routes.keys().map(String::as_str)
    }

    /// The event types served in `endpoint`, sorted.
    pub fn event_types(&self, endpoint: &str) -> Vec<&str> {
        self.routes
            .get(endpoint)
            .map(|types| types.keys().map(String::as_str).collect())
            .unwrap_or_default()
    }

    /// Every handler found in the directory, serving or not, by key.
    pub fn handlers(&self) -> impl Iterator<Item = &HandlerStatus> {
        self.handlers.values()
    }

    /// The endpoints with a handler file that has never loaded (no
    /// earlier version serves in its place), each once, sorted: what those
    /// endpoints consume is not fully known.
    pub fn endpoints_not_loading(&self) -> Vec<&str> {
        let mut endpoints: Vec<&str> = self
            .handlers
            .values()
            .filter(|h| h.serving.is_none() && h.last_error.is_some())
            .map(|h| h.key.endpoint.as_str())
            .collect();
        endpoints.dedup();
        endpoints
    }

    /// Whether some handler at `endpoint` serves now (a version loaded,
    /// even one removed and in its grace): the endpoint's sessions run.
    pub fn endpoint_runs(&self, endpoint: &str) -> bool {
        self.handlers
            .values()
            .any(|h| h.key.endpoint == endpoint && h.serving.is_some())
    }

    /// One handler's status.
    pub fn handler(&self, key: &HandlerKey) -> Option<&HandlerStatus> {
        self.handlers.get(key)
    }

    /// Layout problems from the last scan (stray files, bad endpoint names).
    pub fn problems(&self) -> &[String] {
        &self.problems
    }

    fn rebuild_routes(&mut self) {
        let mut routes: BTreeMap<String, BTreeMap<String, Arc<HandlerVersion>>> = BTreeMap::new();
        for status in self.handlers.values() {
            if let Some(version) = &status.serving {
                let types = routes.entry(status.key.endpoint.clone()).or_default();
                for event_type in version.event_types() {
                    types.insert(event_type.clone(), Arc::clone(version));
                }
            }
        }
        self.routes = routes;
    }

    /// The handler in `key`'s endpoint, other than `key`, serving `event_type`.
    fn claimed_by_other(&self, key: &HandlerKey, event_type: &str) -> Option<&str> {
        self.handlers
            .values()
            .filter(|s| s.key.endpoint == key.endpoint && s.key != *key)
            .find(|s| {
                s.serving
                    .as_ref()
                    .is_some_and(|v| v.event_types().iter().any(|t| t == event_type))
            })
            .map(|s| s.key.handler.as_str())
    }
}

/// The handlers directory, loaded and kept current.
pub struct Registry {
    sandbox: Sandbox,
    dir: PathBuf,
    current: RwLock<Arc<Snapshot>>,
    changes: watch::Sender<Arc<Snapshot>>,
    /// Serializes reloads; readers never take it.
    reloading: Mutex<()>,
    /// The symbolic links the last scan followed.
    links: Mutex<Vec<PathBuf>>,
}

impl Registry {
    /// Opens the handlers directory `dir` and loads every component in it.
    /// A component that fails to load does not fail the open: it is reported
    /// in its [`HandlerStatus::last_error`] (and logged).
    pub fn open(sandbox: Sandbox, dir: &Path) -> Result<Arc<Self>, RegistryError> {
        let metadata = std::fs::metadata(dir).map_err(|reason| RegistryError::Dir {
            path: dir.to_owned(),
            reason,
        })?;
        if !metadata.is_dir() {
            return Err(RegistryError::Dir {
                path: dir.to_owned(),
                reason: std::io::Error::new(std::io::ErrorKind::NotADirectory, "not a directory"),
            });
        }
        let empty = Arc::new(Snapshot::default());
        let (changes, _) = watch::channel(Arc::clone(&empty));
        let registry = Arc::new(Self {
            sandbox,
            dir: dir.to_owned(),
            current: RwLock::new(empty),
            changes,
            reloading: Mutex::new(()),
            links: Mutex::new(Vec::new()),
        });
        registry.reconcile()?;
        Ok(registry)
    }

    /// The handlers directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The sandbox the registry loads into.
    pub fn sandbox(&self) -> &Sandbox {
        &self.sandbox
    }

    /// The current snapshot.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        Arc::clone(&self.current.read().unwrap_or_else(PoisonError::into_inner))
    }

    /// The version serving `event_type` in `endpoint` now.
    pub fn lookup(&self, endpoint: &str, event_type: &str) -> Option<Arc<HandlerVersion>> {
        self.snapshot().lookup(endpoint, event_type).cloned()
    }

    /// A receiver that sees every new snapshot, e.g. so the engine can add
    /// broker subscriptions when a handler for a new event type appears.
    pub fn subscribe(&self) -> watch::Receiver<Arc<Snapshot>> {
        self.changes.subscribe()
    }

    /// Starts watching the directory: changes are picked up after a short
    /// quiet period ([`crate::SandboxConfig::watch_debounce`]). Watching stops
    /// when the guard is dropped.
    pub fn watch(self: &Arc<Self>) -> Result<WatchGuard, RegistryError> {
        watcher::start(
            Arc::downgrade(self),
            &self.dir,
            self.sandbox.config().watch_debounce,
        )
    }

    /// Brings the registry in line with the directory: loads new and changed
    /// components (and components whose manifest changed), unregisters
    /// deleted ones. Unchanged files are not reloaded. Called by the watcher;
    /// callable directly (e.g. after writing files without a watcher).
    pub fn reconcile(&self) -> Result<(), RegistryError> {
        let _reloading = self
            .reloading
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let mut next = Snapshot::clone(&self.snapshot());
        let known: BTreeSet<&str> = next.handlers.keys().map(|k| k.endpoint.as_str()).collect();
        let scan = layout::scan(&self.dir, &known).map_err(|reason| RegistryError::Dir {
            path: self.dir.clone(),
            reason,
        })?;
        let mut changed = next.problems != scan.problems;
        for problem in &scan.problems {
            if !next.problems.contains(problem) {
                tracing::warn!(dir = %self.dir.display(), "{problem}");
            }
        }
        next.problems = scan.problems;
        let now = SystemTime::now();
        let grace = self.sandbox.config().removal_grace;
        let mut removed = Vec::new();
        for status in next.handlers.values_mut() {
            let present = scan.components.contains_key(&status.key)
                || scan.unreadable.contains(&status.key.endpoint);
            changed |= mark_removal(status, present, now, grace);
            // A handler that never loaded serves nothing to keep.
            if !present
                && (status.serving.is_none() || status.removing_at.is_some_and(|at| at <= now))
            {
                removed.push(status.key.clone());
            }
        }
        for key in removed {
            if let Some(status) = next.handlers.remove(&key) {
                changed = true;
                if let Some(version) = status.serving {
                    tracing::info!(
                        handler = %key,
                        version = %version.short_id(),
                        event_types = ?version.event_types(),
                        "component deleted; its event types are unregistered"
                    );
                }
            }
        }
        next.rebuild_routes();
        for (key, path) in scan.components {
            changed |= self.reload_one(&mut next, key, path);
        }
        if changed {
            next.generation += 1;
            let next = Arc::new(next);
            *self.current.write().unwrap_or_else(PoisonError::into_inner) = Arc::clone(&next);
            self.changes.send_replace(next);
        }
        *self.links.lock().unwrap_or_else(PoisonError::into_inner) = scan.links;
        Ok(())
    }

    /// When the next deleted handler's grace ends (the watcher reconciles
    /// then, to unregister it).
    pub(crate) fn next_removal(&self) -> Option<SystemTime> {
        self.snapshot()
            .handlers
            .values()
            .filter_map(|status| status.removing_at)
            .min()
    }

    /// The symbolic links the last scan followed, so the watcher can watch
    /// their targets.
    pub(crate) fn links(&self) -> Vec<PathBuf> {
        self.links
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Loads `key` if its inputs changed; returns whether `next` changed.
    fn reload_one(&self, next: &mut Snapshot, key: HandlerKey, path: PathBuf) -> bool {
        let status = next
            .handlers
            .entry(key.clone())
            .or_insert_with(|| HandlerStatus {
                key: key.clone(),
                path: path.clone(),
                serving: None,
                last_swap: None,
                last_error: None,
                swaps: 0,
                removing_at: None,
                attempted: None,
            });
        let inputs = match Inputs::read(&path) {
            Ok(inputs) => inputs,
            // Gone between the scan and the read: the next event removes it.
            Err(error) => return record_failure(status, None, &error.to_string()),
        };
        if status.attempted == Some(inputs.fingerprint) {
            return false;
        }
        let version = match self.load_stable(&key, &path, inputs) {
            Ok(version) => version,
            Err((fingerprint, error)) => {
                return record_failure(status, Some(fingerprint), &error);
            }
        };
        let conflict = version.event_types().iter().find_map(|event_type| {
            next.claimed_by_other(&key, event_type)
                .map(|serving| RegistryError::Conflict {
                    endpoint: key.endpoint.clone(),
                    event_type: event_type.clone(),
                    serving: serving.to_owned(),
                    rejected: key.handler.clone(),
                })
        });
        let Some(status) = next.handlers.get_mut(&key) else {
            return false;
        };
        if let Some(conflict) = conflict {
            // Not remembered as attempted: once the other handler lets go of
            // the event type, the next reconcile loads this one.
            return record_failure(status, None, &conflict.to_string());
        }
        let FingerprintedVersion {
            version,
            fingerprint,
        } = version;
        // The file is back to the version serving (a broken copy undone):
        // the error clears, but nothing was swapped, so the swap count and
        // time an operator reads still say when the version last changed.
        if status
            .serving
            .as_ref()
            .is_some_and(|serving| serving.id() == version.id())
        {
            tracing::info!(
                handler = %key,
                version = %version.short_id(),
                "handler file restored to the version serving"
            );
            status.attempted = Some(fingerprint);
            let changed = status.last_error.take().is_some();
            return changed;
        }
        let version = Arc::new(version);
        tracing::info!(
            handler = %key,
            version = %version.short_id(),
            previous = status.serving.as_ref().map(|v| v.short_id()).as_deref(),
            event_types = ?version.event_types(),
            artifact = ?version.artifact_source(),
            "handler version swapped in"
        );
        // An event type the previous version served and this one does not:
        // its events at the endpoint are answered Unsupported from now on,
        // which an author should hear of when it happens.
        if let Some(previous) = &status.serving {
            let dropped: Vec<&String> = previous
                .event_types()
                .iter()
                .filter(|t| !version.event_types().contains(t))
                .collect();
            if !dropped.is_empty() {
                tracing::warn!(
                    handler = %key,
                    version = %version.short_id(),
                    dropped = ?dropped,
                    "the new version no longer handles these event types: their events at this \
                     endpoint are answered Unsupported unless another handler claims them"
                );
            }
        }
        status.attempted = Some(fingerprint);
        status.serving = Some(version);
        status.last_swap = Some(SystemTime::now());
        status.last_error = None;
        status.swaps += 1;
        next.rebuild_routes();
        true
    }

    /// Loads the component at `path`, re-reading it afterwards: if it
    /// changed meanwhile (an in-place write in progress), loads again.
    fn load_stable(
        &self,
        key: &HandlerKey,
        path: &Path,
        mut inputs: Inputs,
    ) -> Result<FingerprintedVersion, ((Digest, Digest), String)> {
        for _ in 0..MAX_UNSTABLE_READS {
            let fingerprint = inputs.fingerprint;
            let loaded = self.load(key, path, &inputs);
            let reread = match Inputs::read(path) {
                Ok(reread) => reread,
                Err(error) => return Err((fingerprint, error.to_string())),
            };
            if reread.fingerprint == fingerprint {
                return loaded
                    .map(|version| FingerprintedVersion {
                        version,
                        fingerprint,
                    })
                    .map_err(|error| (fingerprint, error.to_string()));
            }
            inputs = reread;
        }
        Err((
            inputs.fingerprint,
            LoadError::Unstable {
                path: path.to_owned(),
            }
            .to_string(),
        ))
    }

    fn load(
        &self,
        key: &HandlerKey,
        path: &Path,
        inputs: &Inputs,
    ) -> Result<HandlerVersion, LoadError> {
        let manifest_path = path.with_extension("toml");
        let manifest = match &inputs.manifest {
            Some(text) => Manifest::parse(&manifest_path, text)?,
            None => Manifest::default(),
        };
        self.sandbox
            .load_with_manifest(&key.handler, &inputs.component, &manifest_path, manifest)
            .map(|version| version.at_endpoint(&key.endpoint))
    }
}

/// A loaded version with the fingerprint of the files it was loaded from.
struct FingerprintedVersion {
    version: HandlerVersion,
    fingerprint: (Digest, Digest),
}

impl std::ops::Deref for FingerprintedVersion {
    type Target = HandlerVersion;
    fn deref(&self) -> &HandlerVersion {
        &self.version
    }
}

/// The bytes a version is loaded from: the component and its manifest.
struct Inputs {
    component: Vec<u8>,
    manifest: Option<String>,
    /// Digests of the component and of the manifest text ("" if none).
    fingerprint: (Digest, Digest),
}

impl Inputs {
    fn read(path: &Path) -> Result<Self, LoadError> {
        let component = std::fs::read(path).map_err(|source| LoadError::Read {
            path: path.to_owned(),
            source,
        })?;
        let manifest = crate::manifest::read_text(&path.with_extension("toml"))?;
        let fingerprint = (
            Digest::of(&component),
            Digest::of(manifest.as_deref().unwrap_or("").as_bytes()),
        );
        Ok(Self {
            component,
            manifest,
            fingerprint,
        })
    }
}

/// Records a failed load; the serving version (if any) stays. Returns
/// whether the status changed.
/// Starts or ends the grace of a handler whose file is gone (`present`
/// false) or back; whether its status changed. A grace over
/// [`MAX_REMOVAL_GRACE`] is that long.
fn mark_removal(
    status: &mut HandlerStatus,
    present: bool,
    now: SystemTime,
    grace: std::time::Duration,
) -> bool {
    match (present, status.removing_at) {
        (true, Some(_)) => {
            status.removing_at = None;
            tracing::info!(handler = %status.key, "component back before its removal; it stays registered");
            true
        }
        (false, None) if status.serving.is_some() => {
            let grace = grace.min(MAX_REMOVAL_GRACE);
            status.removing_at = Some(now + grace);
            // It was about a file that is gone.
            status.last_error = None;
            if !grace.is_zero() {
                tracing::info!(
                    handler = %status.key,
                    grace = %humantime::format_duration(grace),
                    "component deleted; it keeps serving for the grace in case a new version \
                     follows, then its event types are unregistered"
                );
            }
            true
        }
        _ => false,
    }
}

fn record_failure(
    status: &mut HandlerStatus,
    attempted: Option<(Digest, Digest)>,
    message: &str,
) -> bool {
    let message = &one_line(message);
    let changed = status.last_error.as_deref() != Some(message) || status.attempted != attempted;
    if status.last_error.as_deref() != Some(message) {
        tracing::warn!(
            handler = %status.key,
            serving = status.serving.as_ref().map(|v| v.short_id()).as_deref(),
            "handler not loaded: {message}"
        );
    }
    status.last_error = Some(message.to_owned());
    status.attempted = attempted;
    changed
}

/// `message` on one line: some parser errors pretty-print byte arrays over
/// a dozen lines, which broke the `nimbus handlers` table and the log.
fn one_line(message: &str) -> String {
    if !message.contains('\n') {
        return message.to_owned();
    }
    message.split_whitespace().collect::<Vec<_>>().join(" ")
}

impl watcher::Watched for Registry {
    fn reconcile(&self) -> Result<(), RegistryError> {
        Registry::reconcile(self)
    }

    fn links(&self) -> Vec<PathBuf> {
        Registry::links(self)
    }

    fn next_removal(&self) -> Option<SystemTime> {
        Registry::next_removal(self)
    }
}
