//! What a commit makes visible: a message is handed out only once the
//! commit that queued it is done (decision 0107), and the receivers waiting
//! for it are woken then. The store sets these when its writer commits;
//! the broker's state carries them on each entry.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};

use tokio::sync::Notify;

/// Notifies collected under the topic lock and fired after it is released.
#[derive(Default)]
pub(crate) struct Wakeups(Vec<Arc<Notify>>);

impl Wakeups {
    pub(crate) fn add(&mut self, notify: &Arc<Notify>) {
        if !self.0.iter().any(|n| Arc::ptr_eq(n, notify)) {
            self.0.push(Arc::clone(notify));
        }
    }

    pub(crate) fn fire(self) {
        for notify in self.0 {
            notify.notify_waiters();
        }
    }
}

/// Set once the transaction of the request that inserted a message has
/// committed. Until then the message is not handed out: a consumer that
/// acted on it (a handler calling a partner, the Resolver writing its own
/// database) would act on a message a crash can still take back (decision
/// 0107).
#[derive(Debug, Default)]
pub(crate) struct CommitFlag {
    done: AtomicBool,
    /// Receivers that met a message of this request first in line in a
    /// state its request's own wakes do not cover (a session let go after
    /// the message arrived), woken when it commits.
    late: Mutex<Vec<Arc<Notify>>>,
}

impl CommitFlag {
    /// Whether the request committed; if not, `notify` is woken when it
    /// does. A receiver registers for its wake before it looks, so it sees
    /// one or the other.
    pub(crate) fn is_set_or_wake(&self, notify: &Arc<Notify>) -> bool {
        if self.done.load(Ordering::Acquire) {
            return true;
        }
        let mut late = self.late.lock().unwrap_or_else(PoisonError::into_inner);
        // Checked again under the lock `set` takes after setting it.
        if self.done.load(Ordering::Acquire) {
            return true;
        }
        if !late.iter().any(|n| Arc::ptr_eq(n, notify)) {
            late.push(Arc::clone(notify));
        }
        false
    }

    /// Whether the request committed.
    pub(crate) fn is_set(&self) -> bool {
        self.done.load(Ordering::Acquire)
    }

    pub(crate) fn set(&self) {
        self.done.store(true, Ordering::Release);
        let late = std::mem::take(&mut *self.late.lock().unwrap_or_else(PoisonError::into_inner));
        for notify in late {
            notify.notify_waiters();
        }
    }
}

/// What a request makes deliverable when it commits: the flag its new
/// messages carry, and the receivers to wake for them.
#[derive(Default)]
pub(crate) struct OnCommit {
    flag: Option<Arc<CommitFlag>>,
    pub(crate) wake: Wakeups,
}

impl OnCommit {
    /// The flag for one more message of this request.
    pub(crate) fn flag(&mut self) -> Arc<CommitFlag> {
        Arc::clone(self.flag.get_or_insert_with(Arc::default))
    }

    /// Makes what the request inserted deliverable, and wakes its receivers.
    pub(crate) fn committed(self) {
        if let Some(flag) = self.flag {
            // Set before the wake: a receiver checks the flag after it
            // registered for the wake, so it sees one or the other.
            flag.set();
        }
        self.wake.fire();
    }
}

/// Lets a test keep the writer from committing, to look at the broker while
/// requests wait for their commit.
#[derive(Debug, Default)]
pub(crate) struct CommitGate {
    held: Mutex<bool>,
    released: Condvar,
}

impl CommitGate {
    pub(crate) fn hold(&self) {
        *self.held.lock().unwrap_or_else(PoisonError::into_inner) = true;
    }

    pub(crate) fn release(&self) {
        *self.held.lock().unwrap_or_else(PoisonError::into_inner) = false;
        self.released.notify_all();
    }

    /// Waits while a test holds the gate.
    pub(crate) fn wait_open(&self) {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        while *held {
            held = self
                .released
                .wait(held)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }
}
