//! The engine: the strict NimBus procedure that turns each received message
//! into a handler call and a settlement (SEMANTICS.md §2–§6).
//!
//! It sits between the transport and the sandbox: transport receive →
//! engine (session guard, dispatch decision) → sandbox → engine (outcome,
//! settlement) → transport settle. It knows neither which broker nor how
//! wasm runs.
//!
//! Key decision: every decision is a pure function, apart from the I/O that
//! carries it out — the retry policy ([`retry`]), the failure classifier
//! ([`classifier`]), the session guard and outcome table ([`session_state`]),
//! the settlement of a delivery (`settlement`: redeliver or dead-letter,
//! which retry, replay or not, why dead-lettered) and their configuration
//! ([`policy_config`]) take their inputs (attempt number, delays, random
//! source, session state) as arguments, so each rule of the spec is tested
//! exactly, without a broker, a clock or a handler; the delivery only
//! carries the decision out.
#![cfg_attr(test, allow(clippy::unwrap_used, reason = "tests"))]

pub mod classifier;
mod delivery;
mod handler;
mod horizon;
mod pause;
mod policies;
pub mod policy_config;
mod processor;
mod replayer;
pub mod retry;
mod retrying;
pub mod session_state;
mod settlement;

pub use delivery::Endpoint;
pub use handler::{HandlerCall, Handlers};
pub use horizon::MAX_DELAY;
pub use pause::{PauseSwitch, Paused, pause_switch};
pub use policies::{Policies, TransientBackoff};
pub use processor::{ProcessorSettings, run_endpoint};
pub use replayer::run_replayer;
pub use retrying::{Retrying, TransientAttempt};

pub use classifier::{
    Classification, Classifier, ClassifierRule, Disposition, ErrorTypePattern, PatternError,
};
pub use policy_config::{ClassifierConfig, ConfigError, ConfigErrors, RetryConfig};
pub use retry::{
    Backoff, ErrorMatch, ErrorRule, Jitter, PolicyMatch, PolicySource, RandomSource, RetryPolicies,
    RetryPolicy, StdRandom,
};
