//! What the tokens a client put on `$cbs` grant its connection
//! ([`Grants`]), and the right each node needs: every link attach,
//! publish and `$management` request is checked against them. `$cbs`
//! ([`crate::cbs`]) adds to them; the rest only reads.

use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::SystemTime;

use nimbus_dialect::{EntityAddress, Grant, Right, SubQueue};
use tokio::sync::watch;

/// What the tokens put on one connection grant.
#[derive(Debug)]
pub(crate) struct Grants {
    grants: Mutex<Vec<Grant>>,
    /// The host the client named in its `open`: a token's audience must
    /// be for it.
    host: OnceLock<String>,
    /// Whether a valid token has been put at all: until then the
    /// connection is held to the bounds of one without a token.
    authenticated: watch::Sender<bool>,
}

impl Default for Grants {
    fn default() -> Self {
        Grants {
            grants: Mutex::default(),
            host: OnceLock::new(),
            authenticated: watch::Sender::new(false),
        }
    }
}

impl Grants {
    /// Keeps `grant`, dropping those expired and the one it renews (the
    /// SDKs put a fresh token for the same audience before the last
    /// expires), so a long connection holds a handful, not one per renewal.
    pub(crate) fn add(&self, grant: Grant) {
        let now = SystemTime::now();
        let mut grants = self.grants.lock().unwrap_or_else(PoisonError::into_inner);
        grants.retain(|kept| kept.expires() > now && !kept.renewed_by(&grant));
        grants.push(grant);
        self.authenticated.send_replace(true);
    }

    /// Whether a token put on this connection gives `right` on
    /// `entity_path` now.
    pub(crate) fn allow(&self, right: Right, entity_path: &str) -> bool {
        let now = SystemTime::now();
        self.grants
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .any(|grant| grant.allows(right, entity_path, now))
    }

    /// `Ok` if a token gives `right` on `entity_path` now, else why not, as
    /// the refusal's description.
    pub(crate) fn check(&self, right: Right, entity_path: &str) -> Result<(), String> {
        if self.allow(right, entity_path) {
            return Ok(());
        }
        Err(format!(
            "no token put on $cbs on this connection gives {right} on '{entity_path}' now: put \
             one whose audience covers it, signed with a configured key that has {right} rights"
        ))
    }

    /// Whether a valid token has been put on this connection.
    pub(crate) fn authenticated(&self) -> bool {
        *self.authenticated.borrow()
    }

    /// Tells when a first valid token is put.
    pub(crate) fn watch_authenticated(&self) -> watch::Receiver<bool> {
        self.authenticated.subscribe()
    }

    /// The host the client connected to, from its `open`.
    pub(crate) fn set_host(&self, host: &str) {
        let _ = self.host.set(host.to_owned());
    }

    /// The host the client named in its `open`, once it has: a token's
    /// audience must be for it.
    pub(crate) fn host(&self) -> Option<&str> {
        self.host.get().map(String::as_str)
    }

    /// How many grants are kept.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.grants
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

/// The right a client needs on `entity`'s `$management` node: a topic's
/// schedules messages (Send), a subscription's and its dead-letter queue's
/// read and settle them (Listen).
pub(crate) fn management_right(entity: &EntityAddress) -> Right {
    if entity.subscription.is_some() || entity.sub_queue != SubQueue::Main {
        Right::Listen
    } else {
        Right::Send
    }
}
