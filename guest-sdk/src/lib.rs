//! The SDK a nimbus handler author writes against.
//!
//! A nimbus handler is a WebAssembly component (`wasm32-wasip2`) that the
//! nimbus host loads from its handlers directory and calls once per event, each
//! time in a fresh instance. This crate hides the component plumbing (the
//! `wit-bindgen` bindings for `wit/handler.wit`, the `dispatch` export, payload
//! decoding, the panic hook) behind one type per event, one trait impl per
//! handler and one export macro. It deliberately knows nothing of sessions,
//! retries or settlement: a handler only says what happened to one event, and
//! the host does the rest.
//!
//! The key decision: handlers are **typed**. The author declares a serde type
//! per event type ([`Event`]); the SDK deserializes the JSON payload before the
//! handler runs, so a payload that does not fit is answered for the author as a
//! `permanent` error of type `InvalidPayload` whose message names the field
//! (`Lines[0].Quantity`), and an unregistered event type as `permanent`
//! `UnknownEventType`.
//!
//! # Writing a handler
//!
//! 1. A serde type per event type, with `impl Event` giving its name.
//! 2. A handler type with `impl Handler<ThatEvent>`, returning an [`Outcome`]
//!    or an [`Error`] ([`Error::failed`], [`Error::transient`],
//!    [`Error::permanent`], each with an optional
//!    [`retry_after`](Error::retry_after)).
//! 3. One [`export!`] listing which handler handles which event types.
//!
//! Inside the handler, the [`Context`] carries the event's metadata (ids,
//! session, correlation, lineage, retry count, enqueued time, user properties)
//! and the host's services: [`Context::publish`] a [`FollowUp`], log with
//! [`info!`] and friends (or [`Context::info`]), read configuration with
//! [`Context::config`], and ask how the event came: the broker's
//! [`Context::delivery_count`] (above 1 after a `transient` error or a lost
//! lock: check whether the last attempt's side effect happened before
//! repeating it), the [`Context::message_type`] (`RetryRequest`,
//! `ResubmissionRequest`) and its [`Context::sender`]. A panic is reported by the host as `failed` with error
//! type `Panic` and the panic message.
//!
//! Handler logic is unit-tested natively with [`testing::TestHost`], which
//! runs a handler as the component would and records what it logged and
//! published (see `examples/*/src/tests.rs`).
//!
//! This is `examples/orders`, complete:
//!
//! ```no_run
#![doc = include_str!("../../examples/orders/src/lib.rs")]
//! ```
//!
//! # Building
//!
//! A handler crate is a `cdylib` that depends on this crate and `serde`:
//!
//! ```toml
//! [lib]
//! crate-type = ["cdylib"]
//!
//! [dependencies]
//! nimbus-guest = { path = "../guest-sdk" }
//! serde = { version = "1", features = ["derive"] }
//! ```
//!
//! Build it with `cargo build --target wasm32-wasip2 --release` and drop
//! `target/wasm32-wasip2/release/<crate_name>.wasm` into the host's handlers
//! directory. Link it with a small stack, in `.cargo/config.toml`:
//!
//! ```toml
//! [target.wasm32-wasip2]
//! rustflags = ["-C", "link-arg=-zstack-size=65536", "-C", "strip=debuginfo"]
//! ```
//!
//! Every event runs in a fresh instance, and the default 1 MiB stack spreads
//! what a fresh instance touches over more than a MiB of linear memory; with
//! 64 KiB it stays within the memory the host keeps resident between
//! instances, which makes an event about twice as cheap (measured
//! 22 µs against 7.2 µs, decision 0011). 64 KiB holds the SDK plus `serde_json` at its
//! maximum nesting depth (128) with room to spare; a handler that recurses
//! deeply itself can take 128 KiB at no measurable cost (see
//! `docs/decisions/0011-guest-stack-size.md`). A stack overflow traps (the
//! host reports `failed`/`Trap`), it never corrupts memory. `strip=debuginfo`
//! keeps a component around 100-400 KB instead of ~3 MB.
//!
//! The SDK is the component's global allocator (`#[global_allocator]`, on
//! wasm32 only): small blocks come from a per-instance arena with free lists
//! per size class, large ones from wasi-libc's allocator as before. An
//! instance lives for one event, and this cut the instructions of an event
//! by ~5 % for `examples/orders` (`docs/decisions/0003-dispatch-cost.md`).
//! A handler crate therefore cannot declare a `#[global_allocator]` of its
//! own (the compiler refuses two).
//!
//! # Mistakes the compiler catches
//!
//! A handler registered for an event type it has no `impl Handler` for
//! ("`Orders` does not handle `OrderPlaced` events", with the impl to write):
//!
//! ```compile_fail,E0277
//! #[derive(serde::Deserialize)]
//! struct OrderPlaced {}
//! impl nimbus_guest::Event for OrderPlaced { const EVENT_TYPE: &'static str = "OrderPlaced"; }
//! struct Orders;
//! nimbus_guest::export!(Orders => OrderPlaced);
//! # fn main() {}
//! ```
//!
//! An event type without its name ("`OrderPlaced` is not a nimbus event
//! type", with the impl to write):
//!
//! ```compile_fail,E0277
//! #[derive(serde::Deserialize)]
//! struct OrderPlaced {}
//! struct Orders;
//! impl nimbus_guest::Handler<OrderPlaced> for Orders {
//!     fn handle(&self, _: OrderPlaced, _: &nimbus_guest::Context) -> Result<nimbus_guest::Outcome, nimbus_guest::Error> {
//!         Ok(nimbus_guest::Outcome::Completed)
//!     }
//! }
//! # fn main() {}
//! ```
//!
//! A payload type that serde cannot deserialize ("the payload of
//! `OrderPlaced` cannot be deserialized", with the derive to add):
//!
//! ```compile_fail,E0277
//! struct OrderPlaced {}
//! impl nimbus_guest::Event for OrderPlaced { const EVENT_TYPE: &'static str = "OrderPlaced"; }
//! struct Orders;
//! impl nimbus_guest::Handler<OrderPlaced> for Orders {
//!     fn handle(&self, _: OrderPlaced, _: &nimbus_guest::Context) -> Result<nimbus_guest::Outcome, nimbus_guest::Error> {
//!         Ok(nimbus_guest::Outcome::Completed)
//!     }
//! }
//! nimbus_guest::export!(Orders => OrderPlaced);
//! # fn main() {}
//! ```
//!
//! The same event type registered twice ("an event type is registered
//! twice"):
//!
//! ```compile_fail,E0080
//! #[derive(serde::Deserialize)]
//! struct OrderPlaced {}
//! impl nimbus_guest::Event for OrderPlaced { const EVENT_TYPE: &'static str = "OrderPlaced"; }
//! struct Orders;
//! impl nimbus_guest::Handler<OrderPlaced> for Orders {
//!     fn handle(&self, _: OrderPlaced, _: &nimbus_guest::Context) -> Result<nimbus_guest::Outcome, nimbus_guest::Error> {
//!         Ok(nimbus_guest::Outcome::Completed)
//!     }
//! }
//! nimbus_guest::export!(Orders => OrderPlaced, OrderPlaced);
//! # fn main() {}
//! ```
//!
//! A malformed `export!` (the message shows the expected form):
//!
//! ```compile_fail
//! struct Orders;
//! nimbus_guest::export!(Orders);
//! # fn main() {}
//! ```
//!
//! A wrong `handle` signature is the compiler's own E0050/E0053, which prints
//! the expected signature. One mistake only shows when the component is
//! loaded: a crate that never invokes `export!` builds a component that
//! exports nothing, and the host refuses it because it does not export
//! `nimbus:handler/dispatch@0.1.0` (`nimbus handlers check FILE` says so).
#![cfg_attr(test, allow(clippy::unwrap_used, reason = "tests"))]

// Lets the generated bindings name this crate as `::nimbus_guest`, the same
// path the `export!` macro uses from a handler's crate.
extern crate self as nimbus_guest;

// The guest's global allocator (wasm32 only; natively only its tests).
#[cfg(any(test, all(target_arch = "wasm32", not(target_feature = "atomics"))))]
#[allow(
    unsafe_code,
    reason = "a global allocator hands out raw memory; each unsafe block says why it holds"
)]
mod arena;
mod context;
mod dispatch;
mod error;
mod event;
mod follow_up;
mod handler;
mod host;
mod level;
mod macros;
mod outcome;
pub mod testing;

/// Not part of the API: the generated bindings, public only so the
/// `export!` macro can reach them from a handler's crate.
#[doc(hidden)]
#[path = "bindings.rs"]
#[allow(
    missing_docs,
    unreachable_pub,
    unsafe_code,
    clippy::all,
    reason = "generated by wit-bindgen; documented by the WIT"
)]
pub mod __bindings;
use __bindings as bindings;

pub use context::Context;
pub use error::{Error, ErrorKind, ResultExt};
pub use event::Event;
pub use follow_up::{FollowUp, Property, PropertyValue, PublishError};
pub use handler::Handler;
pub use level::Level;
pub use outcome::{Outcome, PendingHandoff, pending_handoff};

/// Not part of the API: what the `export!` macro expands to call.
#[doc(hidden)]
pub mod __private {
    pub use crate::dispatch::{
        HandlerRoute, Payload, Route, WitError, WitEvent, WitOutcome, assert_registrations, handle,
        require_payload, subscriptions,
    };
}

/// A duration in whole milliseconds, as the WIT carries it; saturates rather
/// than wrapping for absurdly long durations.
pub(crate) fn duration_ms(duration: std::time::Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests;
