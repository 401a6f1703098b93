//! The Manager: what an operator does to an event, as control messages on
//! the bus.
//!
//! The HTTP API and the CLI call it to resubmit an event (with its recorded
//! payload or an edited one), skip it, complete or fail its pending
//! handoff, to resubmit or skip every Failed event a selection names, and
//! to list, replay and remove an endpoint's dead-lettered messages.
//! Like upstream's ManagerClient it never touches an endpoint's session or
//! state: it publishes a `ResubmissionRequest`, `SkipRequest`,
//! `HandoffCompletedRequest` or `HandoffFailedRequest` with `From = Manager`
//! to the endpoint's topic with `To = E`, and the endpoint's engine acts on
//! it in session order (SEMANTICS.md §6, nimbus-semantics.md §9). The
//! Resolver records the copy like any other request. Every control message
//! is signed with the hosts' control key (`nimbus_wire::control_signature`,
//! decision 0141): an endpoint acts only on one a nimbus Manager sent.
//!
//! Key decision: **the Resolver store is the source of an event's
//! coordinates.** Session, correlation id, event type, payload, the
//! request's `MessageId` (the control message's `ParentMessageId`) and the
//! lineage are read from the store, so an operator names an event by its id
//! alone; an unknown id, an ambiguous endpoint, a handoff operation on an
//! event not pending a handoff or a payload that is not JSON is refused
//! with a [`ManagerError`] that names the problem, before anything is sent.
//! The one exception: a session's blocker the store has no record of (the
//! store was lost) is rebuilt from what the broker's session state keeps of
//! it, and the store notes that in the event's history (decision 0140).

#![cfg_attr(test, allow(clippy::unwrap_used, reason = "tests"))]

mod bulk;
mod dead_letters;
mod error;
mod operations;
mod rebuilt;

pub use bulk::{
    AwaitingRetry, BulkAction, BulkOutcome, BulkSelection, Chosen, DEFAULT_BULK_LIMIT, NotSent,
};
pub use dead_letters::{
    DEFAULT_DEAD_LETTER_LIMIT, DeadLetter, DeadLetterId, RemovedAll, Replayed, ReplayedAll,
    check_dead_letter_queue,
};
pub use error::ManagerError;
pub use operations::{DEFAULT_HANDOFF_ERROR_TYPE, Manager, Sent};
