//! Watches the handlers directory and reconciles the registry after each
//! burst of changes. One thread; it holds only a weak reference to the
//! registry and stops when the [`WatchGuard`] is dropped.
//!
//! Debouncing: after the first relevant event the thread waits until no
//! event has arrived for the quiet period, then reconciles once. A
//! write-then-rename produces a create, a few modifies and a rename within
//! microseconds; an in-place write is caught by the registry's re-read check
//! even if it outlasts the quiet period.
//!
//! Symbolic links: replacing a link (`ln -sfn new.wasm swap.wasm`) is an
//! event in the watched directory like any other. What lies behind a link
//! may be outside it, though, or (an endpoint directory linked in after the
//! watch started) not walked by the recursive watch; so after each
//! reconcile the thread works out, from the links the scan followed, what
//! else must be watched ([`LinkWatches`]), watches what is new, unwatches
//! what no link needs any more, and reads the directory once more when it
//! added a watch, for what changed behind a link before the watch existed.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError, Weak, mpsc};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime};

use notify::event::{AccessKind, AccessMode};
use notify::{EventKind, RecursiveMode, Watcher};

use crate::error::RegistryError;

/// What the watcher keeps in step with the directory (the registry),
/// reached through this trait so the watcher needs nothing else of it.
pub(crate) trait Watched: Send + Sync + 'static {
    /// Reads the directory again and applies what changed.
    fn reconcile(&self) -> Result<(), RegistryError>;
    /// The symbolic links the last reading followed.
    fn links(&self) -> Vec<PathBuf>;
    /// When the next deleted handler's grace ends, if one is pending.
    fn next_removal(&self) -> Option<SystemTime>;
}

/// The watcher, shared with the thread so it can watch and unwatch what
/// lies behind links; `None` once the guard dropped it.
type SharedWatcher = Arc<Mutex<Option<notify::RecommendedWatcher>>>;

/// Keeps the directory watched; dropping it stops the watcher thread.
pub struct WatchGuard {
    watcher: SharedWatcher,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for WatchGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WatchGuard").finish_non_exhaustive()
    }
}

impl Drop for WatchGuard {
    fn drop(&mut self) {
        // Dropping the watcher drops its sender, which ends the thread's loop.
        let watcher = self
            .watcher
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        drop(watcher);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Whether `event` can change what the registry should hold. Reads (our
/// own included) are not changes; a close after writing is.
fn relevant(event: &notify::Result<notify::Event>) -> bool {
    match event {
        Ok(event) => match event.kind {
            EventKind::Access(AccessKind::Close(AccessMode::Write)) => true,
            EventKind::Access(_) => false,
            _ => true,
        },
        // Errors (e.g. an overflowed event queue) mean "something changed".
        Err(_) => true,
    }
}

/// Watches `dir` for `registry`, holding it weakly: the watcher thread
/// ends once the registry is gone or the guard is dropped.
pub(crate) fn start<W: Watched>(
    registry: Weak<W>,
    dir: &Path,
    debounce: Duration,
) -> Result<WatchGuard, RegistryError> {
    let watch_error = |message: String| RegistryError::Watch {
        path: dir.to_owned(),
        message,
    };
    let (events, received) = mpsc::channel::<notify::Result<notify::Event>>();
    // Symbolic links are not followed by the recursive walk: what lies
    // behind every link the scan followed is watched by `LinkWatches`, by
    // its resolved path. Followed here too, one directory would be watched
    // under two paths sharing one inotify watch, and removing either (notify
    // does when a link is deleted; `LinkWatches` does when a link goes away)
    // would silently end the other.
    let config = notify::Config::default().with_follow_symlinks(false);
    let mut watcher =
        notify::RecommendedWatcher::new(events, config).map_err(|e| watch_error(e.to_string()))?;
    watcher
        .watch(dir, RecursiveMode::Recursive)
        .map_err(|e| watch_error(e.to_string()))?;
    let watcher: SharedWatcher = Arc::new(Mutex::new(Some(watcher)));
    let mut links = LinkWatches::new(dir);
    // The scan the registry opened with followed these links before the
    // watch existed; what changed behind them since is read again.
    if let Some(registry) = registry.upgrade()
        && links.update(&watcher, &registry.links()) > 0
    {
        reconcile_and_watch(&*registry, &watcher, &mut links);
    }
    let shared = Arc::clone(&watcher);
    let thread = std::thread::Builder::new()
        .name("nimbus-handlers-watch".to_owned())
        .spawn(move || run(&registry, &shared, &received, debounce, links))
        .map_err(|e| watch_error(e.to_string()))?;
    Ok(WatchGuard {
        watcher,
        thread: Some(thread),
    })
}

/// The watches added for what lies behind links, beside the recursive watch
/// on the handlers directory.
struct LinkWatches {
    /// The handlers directory, resolved: what lies inside it is watched
    /// already.
    root: PathBuf,
    /// Each path watched, with how, and what was there when it was watched.
    watched: HashMap<PathBuf, LinkWatch>,
}

/// One path watched behind links.
struct LinkWatch {
    mode: RecursiveMode,
    identity: Option<Identity>,
}

impl LinkWatches {
    fn new(dir: &Path) -> Self {
        Self {
            root: std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_owned()),
            watched: HashMap::new(),
        }
    }

    /// What `links` need watched: path and mode.
    ///
    /// For a link to a file, the directory holding the file, not the file:
    /// build tools and deploy scripts replace a file by renaming a new one
    /// over it, and a watch on the file stays with the old inode (inotify
    /// drops it once that is deleted), so every rebuild after the first
    /// would go unseen; a rename in the directory is seen every time. For a
    /// link to a directory, the directory, recursively.
    fn wanted(&self, links: &[PathBuf]) -> HashMap<PathBuf, RecursiveMode> {
        let mut wanted: HashMap<PathBuf, RecursiveMode> = HashMap::new();
        for link in links {
            // The link can vanish or dangle between the scan and here; the
            // event that changed it triggers the next reconcile.
            let Ok(target) = std::fs::canonicalize(link) else {
                continue;
            };
            let (path, mut mode) = if target.is_dir() {
                (target, RecursiveMode::Recursive)
            } else if let Some(parent) = target.parent() {
                (parent.to_owned(), RecursiveMode::NonRecursive)
            } else {
                continue;
            };
            // Inside the handlers directory it is watched already; a second
            // watch would share the inotify watch (see `start`).
            if path.starts_with(&self.root) {
                continue;
            }
            // A directory holding the handlers directory: recursively, it
            // would take in the handlers directory's own watches (and
            // unwatching it would remove them). The scan reads only the
            // directory a link points to, so its entries are what matter.
            if self.root.starts_with(&path) {
                mode = RecursiveMode::NonRecursive;
            }
            let entry = wanted.entry(path).or_insert(mode);
            if mode == RecursiveMode::Recursive {
                *entry = mode;
            }
        }
        // Likewise, nothing under a directory watched recursively gets a
        // watch of its own.
        let recursive: Vec<PathBuf> = wanted
            .iter()
            .filter(|(_, mode)| **mode == RecursiveMode::Recursive)
            .map(|(path, _)| path.clone())
            .collect();
        wanted.retain(|path, _| {
            !recursive
                .iter()
                .any(|outer| path != outer && path.starts_with(outer))
        });
        wanted
    }

    /// Brings the watches in line with `links`, which the last scan
    /// followed: unwatches what no link needs any more (a retargeted link's
    /// old target), watches what is new, and returns how many watches it
    /// added. A watched directory replaced since (deleted and made again)
    /// is watched anew: its watch went with the old one.
    fn update(&mut self, watcher: &SharedWatcher, links: &[PathBuf]) -> usize {
        let mut watcher = watcher.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(watcher) = watcher.as_mut() else {
            return 0;
        };
        let wanted = self.wanted(links);
        // Unwatching first: notify keys its watches by path, so a path
        // watched anew (another mode, or replaced) must lose its old watch
        // first, and unwatching a directory watched recursively removes
        // the watches under it, which `wanted` may now name on their own.
        self.watched.retain(|path, watch| {
            let keep = wanted.get(path) == Some(&watch.mode) && identity(path) == watch.identity;
            if !keep {
                // Fails when the path is gone (its watch went with it).
                let _ = watcher.unwatch(path);
            }
            keep
        });
        let mut added = 0;
        for (path, mode) in wanted {
            if self.watched.contains_key(&path) {
                continue;
            }
            // Before the watch: if the directory is replaced in between,
            // the next update sees a different one and watches again.
            let identity = identity(&path);
            match watcher.watch(&path, mode) {
                Ok(()) => {
                    self.watched.insert(path, LinkWatch { mode, identity });
                    added += 1;
                }
                Err(error) => {
                    tracing::debug!(path = %path.display(), %error, "cannot watch behind a link");
                }
            }
        }
        added
    }
}

/// Which directory is at a path: a replaced one differs though the path
/// does not.
#[cfg(unix)]
type Identity = (u64, u64);
#[cfg(not(unix))]
type Identity = ();

#[cfg(unix)]
fn identity(path: &Path) -> Option<Identity> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

#[cfg(not(unix))]
fn identity(_path: &Path) -> Option<Identity> {
    None
}

/// Reconciles, then brings the watches behind links up to date. A change
/// behind a link made after the scan but before its target was watched
/// raised no event, so while watches are added the directory is read once
/// more.
fn reconcile_and_watch(registry: &impl Watched, watcher: &SharedWatcher, links: &mut LinkWatches) {
    // Bounded: each pass needs a link created or replaced since the last.
    for _ in 0..4 {
        if let Err(error) = registry.reconcile() {
            tracing::error!(%error, "cannot reload the handlers directory");
            return;
        }
        if links.update(watcher, &registry.links()) == 0 {
            return;
        }
    }
}

fn run<W: Watched>(
    registry: &Weak<W>,
    watcher: &SharedWatcher,
    received: &mpsc::Receiver<notify::Result<notify::Event>>,
    debounce: Duration,
    mut links: LinkWatches,
) {
    loop {
        // A deleted handler's grace ending is a change too: woken for it.
        let removal = registry.upgrade().and_then(|r| r.next_removal());
        let event = match removal {
            None => match received.recv() {
                Ok(event) => event,
                Err(_) => return,
            },
            Some(at) => {
                let wait = at.duration_since(SystemTime::now()).unwrap_or_default();
                match received.recv_timeout(wait) {
                    Ok(event) => event,
                    Err(mpsc::RecvTimeoutError::Timeout) => {
                        let Some(registry) = registry.upgrade() else {
                            return;
                        };
                        reconcile_and_watch(&*registry, watcher, &mut links);
                        continue;
                    }
                    Err(mpsc::RecvTimeoutError::Disconnected) => return,
                }
            }
        };
        if !relevant(&event) {
            continue;
        }
        loop {
            match received.recv_timeout(debounce) {
                Ok(_) => continue,
                Err(mpsc::RecvTimeoutError::Timeout) => break,
                Err(mpsc::RecvTimeoutError::Disconnected) => return,
            }
        }
        let Some(registry) = registry.upgrade() else {
            return;
        };
        reconcile_and_watch(&*registry, watcher, &mut links);
    }
}
