//! The Resolver: the audit trail of every outcome.
//!
//! Every message about an event reaches the `Resolver` topic: the copy of
//! each request addressed to an endpoint, and each response the endpoint
//! sends (with `From` stamped by the forwarding rule). [`run_resolver`]
//! consumes `Resolver/Resolver`, turns each NimBus message into an
//! [`Observation`] and records it in a [`ResolverStore`]. The store keeps,
//! per event and endpoint, the current status (with the handoff
//! sub-status), the error, the handler version, retry count, timings and the
//! request's coordinates (so the Manager can address a control message from
//! the store alone); and, per message, an append-only history that is always
//! written.
//!
//! The key decision: **the store, not arrival order, decides the status.**
//! Copies of one event's messages can arrive out of causal order, so every
//! status write passes the stale-write guard of SEMANTICS.md §7; a refused
//! write is logged, counted and noted in the history. The consumer completes
//! a message only after the store committed it, and recording is idempotent
//! per (message id, type), so a redelivery changes nothing. The store knows
//! nothing of brokers or wasm: it is fed decoded observations.
//!
//! [`run_retention`] keeps the store from growing without bound: events that
//! need nothing more leave it, with their history, after a set period
//! (decision 0108).

#![cfg_attr(test, allow(clippy::unwrap_used, reason = "tests"))]

mod consumer;
mod decode;
mod guard;
mod observation;
mod recorder;
mod retention;
mod sqlite;
mod status;
mod store;

pub use consumer::{Consumed, Progress, ResolverError, ResolverSettings, run_resolver};
pub use decode::UNRECORDABLE_REASON;
pub use observation::{HandoffDetails, Observation};
pub use retention::{pass_interval, run_retention, sessions_in_use};
pub use sqlite::{EventStatus, SqliteResolverStore, StoreDurability, StoreFile};
pub use status::{HANDOFF_SUB_STATUS, MessageKind, Status, UnknownStatus, UnrecordedKind};
pub use store::{
    DEAD_LETTER_REPLAY, EventDetail, EventFilter, EventRecord, Heartbeat, HistoryEntry,
    REBUILT_FROM_BROKER, Recorded, ReplayNote, ResolverStore, StoreError, StoreRows,
};
