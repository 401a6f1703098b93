//! Watches the handlers directory and reconciles the registry after each
//! burst of changes. One thread; it holds only a weak reference to the
//! registry and stops when the [`WatchGuard`] is dropped.
//!
//! Debouncing: after the first relevant event the thread waits until no
//! event has arrived for the quiet period, then reconciles once. A
//! write-then-rename produces a create, a few modifies and a rename within
//! microseconds; an in-place write is caught by the registry's re-read check
//! even if it outlasts the quiet period.

use std::path::Path;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

use notify::event::{AccessKind, AccessMode};
use notify::{EventKind, RecursiveMode, Watcher};

use crate::error::RegistryError;
use crate::registry::WeakRegistry;

/// Keeps the directory watched; dropping it stops the watcher thread.
pub struct WatchGuard {
    watcher: Option<notify::RecommendedWatcher>,
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
        drop(self.watcher.take());
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
    let thread = std::thread::Builder::new()
        .name("nimbus-handlers-watch".to_owned())
        .spawn(move || run(&registry, &received, debounce))
        .map_err(|e| watch_error(e.to_string()))?;
    Ok(WatchGuard {
        watcher: Some(watcher),
        thread: Some(thread),
    })
}

fn run(
    registry: &WeakRegistry,
    received: &mpsc::Receiver<notify::Result<notify::Event>>,
    debounce: Duration,
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
        if let Err(error) = registry.reconcile() {
            tracing::error!(%error, "cannot reload the handlers directory");
        }
    }
}
