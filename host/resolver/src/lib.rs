//! The Resolver: the audit trail of every outcome.
//!
//! The engine's Resolver consumer reads the Resolver topic, turns each NimBus
//! message into an [`Observation`] and records it here. The store keeps, per
//! event and endpoint, the current status (with the handoff sub-status), the
//! error, the handler version, retry count and timings; and, per message, an
//! append-only history that is always written.
//!
//! The key decision: **the store, not arrival order, decides the status.**
//! Copies of one event's messages can arrive out of causal order, so every
//! status write passes the stale-write guard of SEMANTICS.md §7; a refused
//! write is logged, counted and noted in the history. This crate knows nothing
//! of brokers or wasm: it is fed decoded observations.

#![cfg_attr(test, allow(clippy::unwrap_used, reason = "tests"))]

mod guard;
mod observation;
mod sqlite;
mod status;
mod store;

pub use observation::{HandoffDetails, Observation};
pub use sqlite::SqliteResolverStore;
pub use status::{HANDOFF_SUB_STATUS, MessageKind, Status, UnknownStatus, UnrecordedKind};
pub use store::{
    EventDetail, EventFilter, EventRecord, HistoryEntry, Recorded, ResolverStore, StoreError,
};
