//! The handler's vocabulary: what goes into a handler and what comes out,
//! defined once for the whole host.
//!
//! Its place in the system: the engine builds an [`Event`] from a received
//! message, the sandbox hands it to a component (converting it to the WIT
//! record there, and only there) and answers with a [`Report`], and the
//! engine settles by it. `nimbus bench`'s native handlers and the `nimbus
//! invoke` command speak the same words. It is the Rust side of
//! `wit/handler.wit`'s `types` interface, minus the generated bindings.
//!
//! What it deliberately does not know: NimBus's wire format (message types,
//! envelope property names, responses), brokers and wasm. So the sandbox can
//! use it without learning NimBus, and the engine without learning wasm.
//!
//! Key decision: the handler's answer is `Result<Outcome, HandlerError>`, as
//! in the WIT contract, and durations are [`std::time::Duration`]s: the
//! milliseconds of the WIT records are converted at the sandbox's boundary,
//! once (decision 0143).

mod error;
pub mod error_type;
mod event;
mod follow_up;
mod outcome;
mod report;

pub use error::{ErrorKind, HandlerError};
pub use event::{Delivery, Event};
pub use follow_up::FollowUp;
pub use outcome::{Outcome, PendingHandoff};
pub use report::Report;
