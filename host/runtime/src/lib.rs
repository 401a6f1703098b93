//! The host: one process that runs on a [`Bus`] (the embedded broker in its
//! data directory, or a Service Bus namespace reached over AMQP), provisions
//! the NimBus topology for the handlers it serves (on Service Bus: checks that
//! it exists), runs each endpoint's session processor and replayer, the
//! Resolver, the operator API and, on the embedded broker, the AMQP
//! endpoint.
//!
//! It is the composition root and the only crate that knows every other
//! part; the parts know nothing of each other beyond their traits.
//! [`Host::run`] assembles everything `nimbus run` runs; the CLI parses
//! arguments, loads the configuration, calls it and waits for signals. The
//! key decision: everything the engine needs from outside — handlers,
//! transport — arrives through the engine's traits, so this crate only
//! adapts and wires.

mod amqp_endpoint;
pub mod api;
pub mod bench;
pub mod bus;
pub mod config;
pub mod control;
mod data_lock;
pub mod handlers;
mod host;
pub mod metrics;
pub mod observed_store;
mod open_files;
mod pauses;
mod resolver_store;
mod running;
mod wiring;

pub use api::{ApiError, ApiState, router, serve};
pub use bus::Bus;
pub use config::{Config, ConfigError, DEFAULT_PRODUCER, ValidConfig};
pub use data_lock::{DataLock, DataLockError, Holder};
pub use handlers::SandboxHandlers;
pub use host::{BROKER_DIR, Host, RESOLVER_STORE_FILE, VERSION};
pub use metrics::Metrics;
pub use pauses::{PauseState, Pauses};
pub use resolver_store::{NEW_RESOLVER_STORE_FLAG, ResolverStoreStart};
pub use running::{RunError, RunOptions, Running};
