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
//! reconcile the thread watches the target of every link the scan followed
//! (a retargeted link gets its new target watched), and reads the directory
//! once more when it added one, for what changed behind the link before.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError, mpsc};
use std::thread::JoinHandle;
use std::time::Duration;

use notify::event::{AccessKind, AccessMode};
use notify::{EventKind, RecursiveMode, Watcher};

use crate::error::RegistryError;
use crate::registry::WeakRegistry;

/// The watcher, shared with the thread so it can add the targets of links;
/// `None` once the guard dropped it.
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

pub(crate) fn start(
    registry: WeakRegistry,
    dir: &Path,
    debounce: Duration,
) -> Result<WatchGuard, RegistryError> {
    let watch_error = |message: String| RegistryError::Watch {
        path: dir.to_owned(),
        message,
    };
    let (events, received) = mpsc::channel::<notify::Result<notify::Event>>();
    let mut watcher =
        notify::recommended_watcher(events).map_err(|e| watch_error(e.to_string()))?;
    watcher
        .watch(dir, RecursiveMode::Recursive)
        .map_err(|e| watch_error(e.to_string()))?;
    let watcher: SharedWatcher = Arc::new(Mutex::new(Some(watcher)));
    // The scan the registry opened with followed these links before the
    // watch existed; what changed behind them since is read again.
    let mut watched = HashSet::new();
    if let Some(registry) = registry.upgrade()
        && watch_links(&watcher, &mut watched, &registry.links()) > 0
    {
        reconcile_and_watch(&registry, &watcher, &mut watched);
    }
    let shared = Arc::clone(&watcher);
    let thread = std::thread::Builder::new()
        .name("nimbus-handlers-watch".to_owned())
        .spawn(move || run(&registry, &shared, &received, debounce, watched))
        .map_err(|e| watch_error(e.to_string()))?;
    Ok(WatchGuard {
        watcher,
        thread: Some(thread),
    })
}

/// Watches what each link points to, so a change behind it is seen, and
/// returns how many targets were not watched before (`watched` holds the
/// targets, resolved, so a retargeted link gets its new target watched).
fn watch_links(
    watcher: &SharedWatcher,
    watched: &mut HashSet<PathBuf>,
    links: &[PathBuf],
) -> usize {
    let mut watcher = watcher.lock().unwrap_or_else(PoisonError::into_inner);
    let Some(watcher) = watcher.as_mut() else {
        return 0;
    };
    let mut added = 0;
    for link in links {
        // The link can vanish or dangle between the scan and here; the
        // event that changed it triggers the next reconcile.
        let Ok(target) = std::fs::canonicalize(link) else {
            continue;
        };
        if watched.contains(&target) {
            continue;
        }
        // Only a link to a directory needs its contents watched; for a
        // file, the watch is on the file the link points to.
        let mode = if target.is_dir() {
            RecursiveMode::Recursive
        } else {
            RecursiveMode::NonRecursive
        };
        match watcher.watch(&target, mode) {
            Ok(()) => {
                watched.insert(target);
                added += 1;
            }
            Err(error) => {
                tracing::debug!(link = %link.display(), %error, "cannot watch a link's target");
            }
        }
    }
    added
}

/// Reconciles, then watches the targets of new links. A change behind a
/// link made after the scan but before its target was watched raised no
/// event, so while new targets turn up the directory is read once more.
fn reconcile_and_watch(
    registry: &crate::registry::Registry,
    watcher: &SharedWatcher,
    watched: &mut HashSet<PathBuf>,
) {
    // Bounded: each pass needs a link created since the last one.
    for _ in 0..4 {
        if let Err(error) = registry.reconcile() {
            tracing::error!(%error, "cannot reload the handlers directory");
            return;
        }
        if watch_links(watcher, watched, &registry.links()) == 0 {
            return;
        }
    }
}

fn run(
    registry: &WeakRegistry,
    watcher: &SharedWatcher,
    received: &mpsc::Receiver<notify::Result<notify::Event>>,
    debounce: Duration,
    mut watched: HashSet<PathBuf>,
) {
    while let Ok(event) = received.recv() {
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
        reconcile_and_watch(&registry, watcher, &mut watched);
    }
}
