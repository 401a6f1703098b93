//! Pausing an endpoint: while paused its session processor takes no
//! session, and a session in hand is let go after the message it is on, so
//! the endpoint's events wait in its queue instead of running. What an
//! operator does while a system the handlers call is down: events queue,
//! rather than fail and block session after session.
//!
//! The switch is held by whoever pauses (the host, from its API); the
//! processor holds a [`Paused`] and only reads it.

use tokio::sync::watch;

/// The processor's side of an endpoint's pause switch.
#[derive(Debug, Clone)]
pub struct Paused(watch::Receiver<bool>);

/// The operator's side of an endpoint's pause switch.
#[derive(Debug)]
pub struct PauseSwitch(watch::Sender<bool>);

/// A pause switch, starting paused or not, and the processor's side of it.
pub fn pause_switch(paused: bool) -> (PauseSwitch, Paused) {
    let (tx, rx) = watch::channel(paused);
    (PauseSwitch(tx), Paused(rx))
}

impl PauseSwitch {
    /// Pauses (`true`) or resumes (`false`); whether that changed anything.
    pub fn set(&self, paused: bool) -> bool {
        self.0.send_if_modified(|now| {
            let changed = *now != paused;
            *now = paused;
            changed
        })
    }

    /// Whether it is paused now.
    pub fn is_paused(&self) -> bool {
        *self.0.borrow()
    }

    /// Another reader of this switch, for a processor started later (an
    /// endpoint's handler dropped in again).
    pub fn reader(&self) -> Paused {
        Paused(self.0.subscribe())
    }
}

impl Default for Paused {
    /// A switch nobody can throw: never paused.
    fn default() -> Paused {
        pause_switch(false).1
    }
}

impl Paused {
    /// Whether the endpoint is paused now.
    pub fn is_paused(&self) -> bool {
        *self.0.borrow()
    }

    /// Resolves once the endpoint is paused (at once if it is). Never, when
    /// the switch is gone while not paused.
    pub async fn paused(&self) {
        let mut rx = self.0.clone();
        if rx.wait_for(|paused| *paused).await.is_err() {
            std::future::pending::<()>().await;
        }
    }

    /// Resolves once the endpoint is not paused (at once if it is not), or
    /// the switch is gone.
    pub async fn resumed(&self) {
        let mut rx = self.0.clone();
        let _ = rx.wait_for(|paused| !*paused).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_switch_pauses_and_resumes_its_readers() {
        let (switch, paused) = pause_switch(false);
        assert!(!paused.is_paused());
        paused.resumed().await;
        assert!(switch.set(true), "a change");
        assert!(!switch.set(true), "no change");
        assert!(paused.is_paused() && switch.reader().is_paused());
        paused.paused().await;
        let waiting = tokio::spawn({
            let paused = paused.clone();
            async move { paused.resumed().await }
        });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "still paused");
        assert!(switch.set(false));
        waiting.await.unwrap();
        assert!(!Paused::default().is_paused());
    }
}
