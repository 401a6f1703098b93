//! The embedded broker: Azure Service Bus semantics inside the host, durable
//! on a local data directory, behind the `nimbus-transport` traits.
//!
//! Topics fan messages out to subscriptions through SQL filter rules (with
//! per-rule action copies); subscriptions hold messages for peek-lock
//! receivers or, when session-enabled, for exclusive session locks that keep
//! strict order per session. Lock expiry, max delivery count, dead-letter
//! queues, scheduled messages, TTL, auto-forward and duplicate detection
//! behave as on Service Bus. The engine never names this crate's types: it
//! sees [`Broker`] only as a `Transport` + `Admin`.
//!
//! Key decisions (see `docs/broker.md`):
//! - **An append-only log is the record, memory holds the hot state.**
//!   Every acknowledged operation is appended by one writer thread that
//!   group-commits whatever is queued as one checksummed frame, so
//!   concurrent operations share one sync. Sealed segments are folded into
//!   snapshots in the background. Memory is rebuilt from the log on open.
//! - **One mutex per topic, never held across I/O**; operations spanning
//!   topics lock them in id order. Receivers wake on per-session and
//!   per-subscription `Notify`s; deadlines run on one timer task over a heap,
//!   on an injected [`Clock`]. Nothing polls.
//! - It knows nothing of NimBus: topology provisioning lives elsewhere and
//!   uses only the traits.

#![cfg_attr(test, allow(clippy::unwrap_used, reason = "tests"))]

mod api;
mod broker;
mod clock;
mod codec;
mod commit;
mod compact;
mod durability;
mod error;
mod handles;
mod live;
mod log;
#[cfg(test)]
mod log_fuzz;
mod op_serde;
mod records;
mod rules;
mod state;
mod store;
mod timers;
mod verify;
mod wait;

pub use api::{Broker, CommitHold};
pub use broker::{
    BrokerOptions, DEFAULT_MAX_REQUEST_BYTES, Footprint, MAX_FORWARD_HOPS, REASON_EXPIRED,
    REASON_FILTER_FAILED, REASON_FORWARD_TARGET_MISSING, REASON_MAX_HOPS,
};
pub use clock::{Clock, ManualClock, Sleep, SystemClock};
pub use durability::Durability;
pub use error::OpenError;
pub use handles::{BrokerReceiver, BrokerSession};
pub use store::{FileReport, Finding};
pub use verify::{LiveSummary, Verification, verify};

/// The log's directory inside a broker's data directory.
pub const LOG_DIR: &str = log::DIR_NAME;
