//! What a connection's receive links hold, for the subscription's
//! `$management` node: session state and lock renewal act on the session
//! lock a link of the same connection holds (spec §A.10), never on one
//! another client holds; a delivery settled or renewed by lock token goes
//! to the link that sent it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::SystemTime;

use nimbus_dialect::Outcome;
use nimbus_transport::LockToken;
use tokio::sync::{mpsc, oneshot};

/// Session locks held on one connection, by subscription and session id.
pub(crate) struct HeldSessions<S> {
    locks: Mutex<HashMap<(String, String), Arc<S>>>,
}

impl<S> Default for HeldSessions<S> {
    fn default() -> Self {
        HeldSessions {
            locks: Mutex::default(),
        }
    }
}

/// Entity paths are compared ignoring case, as Service Bus names are.
fn key(entity_path: &str, session_id: &str) -> (String, String) {
    (entity_path.to_ascii_lowercase(), session_id.to_owned())
}

impl<S> HeldSessions<S> {
    pub(crate) fn insert(&self, entity_path: &str, session_id: &str, lock: Arc<S>) {
        self.locks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(key(entity_path, session_id), lock);
    }

    pub(crate) fn remove(&self, entity_path: &str, session_id: &str) {
        self.locks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&key(entity_path, session_id));
    }

    pub(crate) fn get(&self, entity_path: &str, session_id: &str) -> Option<Arc<S>> {
        self.locks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&key(entity_path, session_id))
            .cloned()
    }
}

/// What the subscription's `$management` node asks of the link that holds
/// a delivery: settle it by lock token (`update-disposition`, which Python
/// falls back on), or renew its lock (`renew-lock`).
#[derive(Debug)]
pub(crate) enum LinkCommand {
    Settle {
        token: LockToken,
        outcome: Outcome,
        reply: oneshot::Sender<Result<(), SettleFailure>>,
    },
    Renew {
        token: LockToken,
        reply: oneshot::Sender<Result<SystemTime, SettleFailure>>,
    },
}

/// Why a settlement or renewal did not take effect.
#[derive(Debug, Clone)]
pub(crate) enum SettleFailure {
    /// The message's lock is gone (or the token is unknown).
    LockLost,
    /// The session's lock is gone.
    SessionLockLost,
    /// The operation does not apply (e.g. renewing a message's lock in a
    /// session).
    Invalid(String),
    /// The broker failed; nothing took effect.
    Busy(String),
}

/// Which link holds each delivery a connection's links sent and the client
/// has not settled, by lock token.
#[derive(Default)]
pub(crate) struct HeldDeliveries {
    links: Mutex<HashMap<LockToken, mpsc::UnboundedSender<LinkCommand>>>,
}

impl HeldDeliveries {
    pub(crate) fn insert(&self, token: LockToken, link: mpsc::UnboundedSender<LinkCommand>) {
        self.links
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(token, link);
    }

    pub(crate) fn remove(&self, token: LockToken) {
        self.links
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&token);
    }

    pub(crate) fn link(&self, token: LockToken) -> Option<mpsc::UnboundedSender<LinkCommand>> {
        self.links
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&token)
            .cloned()
    }
}
