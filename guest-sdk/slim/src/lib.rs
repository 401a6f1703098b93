//! Strips from a handler component the WASI imports that Rust's standard
//! library links in only for its panic path, so that each event's fresh
//! instance has fewer host functions to wire up.
//!
//! A Rust `wasm32-wasip2` component imports 19 WASI functions (stdio streams,
//! terminals, the environment, `exit`) even when the handler never prints:
//! std's default panic hook and its "aborting due to panic" message can write
//! to stderr and read `RUST_BACKTRACE`, and that code stays linked because the
//! hook is chosen at run time. The nimbus SDK installs its own hook before any
//! handler code runs, so in a handler those imports are dead weight that
//! wasmtime still lowers, one function reference each, on every instantiation
//! (docs/decisions/0003-dispatch-cost.md: about 15-20 % of an event's
//! instructions).
//!
//! The key decision: **rewrite the core module, then componentize it again**,
//! rather than edit the component. The main core module is taken out of the
//! component, each strippable import is replaced by a local function (an empty
//! environment for `get-environment`, `unreachable` for the rest, named
//! `stripped-import:<import>` so a backtrace says what happened), and
//! `wit-component` builds the component again from the module and the
//! component's own WIT world; it imports only what the module still imports.
//! The rewrite is **refused**, and the component left as it is, when the
//! handler could use what would be stripped: when its code names std's stdio,
//! environment or exit API, when a removed import is reachable by direct calls
//! from an export other than through the panic machinery, or when it imports
//! any other WASI interface (files or sockets share the stream types). It is an
//! optimisation applied by `scripts/build-guests.sh`; a plain
//! `cargo build --target wasm32-wasip2` component keeps working as it is.

mod component;
mod error;
mod imports;
mod rewrite;
mod usage;

pub use component::{Slimmed, slim};
pub use error::SlimError;
pub use imports::STRIPPABLE_INTERFACES;
