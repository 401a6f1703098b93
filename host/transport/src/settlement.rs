//! The atomic settlement batch.
//!
//! The engine settles one delivery together with everything it caused:
//! follow-up events, the response, the new session state, a scheduled retry,
//! and the message's own outcome. A [`Settlement`] carries all of that, and
//! a transport applies it all or nothing (the embedded broker in one SQLite
//! transaction, under the session lock).

use std::time::SystemTime;

use crate::{Delivery, Message, Properties};

/// What happens to the received message itself.
#[derive(Debug, Clone, PartialEq)]
pub enum Disposition {
    /// Remove it: it was handled.
    Complete,
    /// Give it back: it is redelivered (first in its session) with its
    /// delivery count raised by one, after merging `properties` into its
    /// application properties. At the subscription's max delivery count it
    /// is dead-lettered with reason `MaxDeliveryCountExceeded` instead.
    Abandon {
        /// Application properties to set on the redelivered message.
        properties: Properties,
    },
    /// Move it to the subscription's dead-letter queue.
    DeadLetter {
        /// The reason (short, machine-readable).
        reason: String,
        /// The description (for a human).
        description: String,
    },
}

/// Several operations committed as one atomic unit.
///
/// Build it with the methods below; hand it to a session's or receiver's
/// `settle`. An empty settlement is valid and does nothing.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Settlement {
    outcome: Option<(Delivery, Disposition)>,
    publishes: Vec<(String, Message)>,
    session_state: Option<Option<Vec<u8>>>,
    inbox: Vec<InboxRecord>,
}

/// A record in a consumer's inbox: "this scope has handled this key", kept
/// until `expires_at`. Written in the same commit as the settlement that
/// handled the message, so a crash can neither lose the record of a handled
/// message nor record one that was not handled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InboxRecord {
    /// Whose inbox (e.g. the endpoint).
    pub scope: String,
    /// The deduplication key (e.g. a hash of endpoint and message id).
    pub key: String,
    /// When the record may be forgotten.
    pub expires_at: SystemTime,
}

/// The parts of a [`Settlement`], for transports that apply it.
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct SettlementParts {
    /// The delivery settled and what to do with its message, if any.
    pub outcome: Option<(Delivery, Disposition)>,
    /// Messages to publish, with their topic, in order. A message with a
    /// future `scheduled_enqueue_time` is scheduled.
    pub publishes: Vec<(String, Message)>,
    /// `Some(new)` replaces the session state (`Some(None)` clears it).
    pub session_state: Option<Option<Vec<u8>>>,
    /// Inbox records to write.
    pub inbox: Vec<InboxRecord>,
}

impl Settlement {
    /// An empty settlement.
    pub fn new() -> Self {
        Settlement::default()
    }

    /// A settlement that completes `message`.
    pub fn complete(message: impl Into<Delivery>) -> Self {
        Settlement::new().with_outcome(message, Disposition::Complete)
    }

    /// A settlement that abandons `message`, merging `properties` into it.
    pub fn abandon(message: impl Into<Delivery>, properties: Properties) -> Self {
        Settlement::new().with_outcome(message, Disposition::Abandon { properties })
    }

    /// A settlement that dead-letters `message`.
    pub fn dead_letter(
        message: impl Into<Delivery>,
        reason: impl Into<String>,
        description: impl Into<String>,
    ) -> Self {
        Settlement::new().with_outcome(
            message,
            Disposition::DeadLetter {
                reason: reason.into(),
                description: description.into(),
            },
        )
    }

    /// Sets what happens to the received message (replacing any earlier
    /// outcome: a settlement settles at most one message).
    pub fn with_outcome(mut self, message: impl Into<Delivery>, disposition: Disposition) -> Self {
        self.outcome = Some((message.into(), disposition));
        self
    }

    /// Adds a message to publish to `topic` (scheduled if its
    /// `scheduled_enqueue_time` is in the future).
    pub fn publish(mut self, topic: impl Into<String>, message: Message) -> Self {
        self.publishes.push((topic.into(), message));
        self
    }

    /// Replaces the session state (`None` clears it). Only valid on a
    /// session lock.
    pub fn set_session_state(mut self, state: Option<Vec<u8>>) -> Self {
        self.session_state = Some(state);
        self
    }

    /// Records `key` in `scope`'s inbox until `expires_at`, in the same commit.
    pub fn record_inbox(
        mut self,
        scope: impl Into<String>,
        key: impl Into<String>,
        expires_at: SystemTime,
    ) -> Self {
        self.inbox.push(InboxRecord {
            scope: scope.into(),
            key: key.into(),
            expires_at,
        });
        self
    }

    /// The parts, for a transport to apply.
    pub fn into_parts(self) -> SettlementParts {
        SettlementParts {
            outcome: self.outcome,
            publishes: self.publishes,
            session_state: self.session_state,
            inbox: self.inbox,
        }
    }
}

/// What a successful settlement assigned.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SettleReceipt {
    /// The sequence number of each published message, in the order they were
    /// added (for a scheduled one, the number to cancel it with).
    pub sequence_numbers: Vec<i64>,
}

impl SettleReceipt {
    /// A receipt listing these sequence numbers.
    pub fn new(sequence_numbers: Vec<i64>) -> Self {
        SettleReceipt { sequence_numbers }
    }
}
