//! The handler sandbox: loads handler components, limits them, runs one event
//! per fresh instance, and swaps new versions in while the host keeps serving.
//!
//! Its place in the system: the engine hands it one `nimbus_handler::Event`
//! at a time on the session's own task ([`HandlerVersion::invoke_async`];
//! tools and tests call [`HandlerVersion::invoke`] on a plain thread) and
//! gets back an [`Invocation`]: the handler's `nimbus_handler::Report` (its
//! outcome or error, the follow-up events it asked for, the version that
//! ran it), its logs and the digest of the component. The handler's
//! vocabulary is `nimbus_handler`'s; the generated WIT bindings are
//! converted to and from it here, once, in `host/convert.rs`. The sandbox
//! never talks to a broker and never settles anything; follow-ups are held,
//! not sent.
//!
//! Of wasmtime it uses exactly this: the component model with synchronous
//! calls and calls on a fiber that yield at every epoch tick, the pooling allocator with a pre-linked `InstancePre` per handler
//! version, epoch interruption for wall-clock deadlines (one ticker thread), a
//! `ResourceLimiter` for memory, instance and table counts, and WASI preview 2
//! with nothing granted (no directories, network, environment or inherited
//! stdio). Compiled artifacts are cached on disk by this crate, not by
//! wasmtime's cache.
//!
//! The key design decision: **a fresh `Store` and instance for every event**,
//! created from an `InstancePre` shared by all events of a handler version.
//! Nothing leaks from one event to the next, a trap or overrun poisons only
//! the one store, and a hot swap is just replacing an `Arc<HandlerVersion>` in
//! the registry's snapshot: in-flight invocations hold the old `Arc` and
//! finish on it. See `docs/decisions/0001-sandbox-design.md`.
//!
//! Entry points: [`Sandbox`] (the process-wide engine), [`Sandbox::load_file`]
//! (one [`HandlerVersion`]), [`Registry`] (the handlers directory, with
//! [`Registry::watch`] for hot swap).

pub(crate) mod bindings;
pub(crate) mod cache;
pub(crate) mod classify;
pub(crate) mod config;
pub(crate) mod digest;
pub(crate) mod error;
pub(crate) mod host;
pub(crate) mod invocation;
pub(crate) mod layout;
pub(crate) mod limiter;
pub(crate) mod manifest;
pub(crate) mod process;
pub(crate) mod registry;
pub(crate) mod runtime;
pub(crate) mod state;
pub(crate) mod stdio;
pub(crate) mod ticker;
pub(crate) mod version;
pub(crate) mod watcher;

pub use cache::{ArtifactSource, CacheStats};
pub use config::{
    DEFAULT_EPOCH_TICK, DEFAULT_INSTANCES, DEFAULT_KEEP_RESIDENT_BYTES,
    DEFAULT_MAX_CONCURRENT_INSTANCES, DEFAULT_MAX_MEMORY_BYTES, DEFAULT_MEMORY_BYTES,
    DEFAULT_REMOVAL_GRACE, DEFAULT_TABLES, DEFAULT_TIMEOUT, DEFAULT_WATCH_DEBOUNCE, Limits,
    MAX_CONCURRENT_INSTANCES, MAX_INSTANCES, MAX_REMOVAL_GRACE, MAX_TABLES, SandboxConfig,
};
pub use digest::Digest;
pub use error::{Error, LoadError, ManifestError, RegistryError, SandboxError};
pub use host::publish::{
    MAX_FOLLOW_UP_BYTES_PER_EVENT, MAX_FOLLOW_UP_PAYLOAD_BYTES, MAX_FOLLOW_UPS_PER_EVENT,
    MAX_MESSAGE_ID_LEN,
};
pub use invocation::{Invocation, LogLevel, LogRecord, LogSource};
pub use layout::HandlerKey;
pub use manifest::{MAX_TIMEOUT, Manifest, parse_byte_size};
pub use registry::{HandlerStatus, Registry, Snapshot};
pub use runtime::Sandbox;
pub use version::HandlerVersion;
pub use watcher::WatchGuard;

#[cfg(test)]
mod send_sync {
    // The engine shares these across tasks and threads.
    const fn assert_send_sync<T: Send + Sync>() {}
    const _: () = {
        assert_send_sync::<crate::Sandbox>();
        assert_send_sync::<crate::HandlerVersion>();
        assert_send_sync::<crate::Registry>();
        assert_send_sync::<crate::Snapshot>();
    };
}
