//! This crate's integration tests, linked as one binary: each file is a
//! module, so the suite links once instead of once per file.

mod conformance;
mod crash;
mod embedded;
mod list_sessions;
mod provision;
mod recovery;
mod routing;
mod write_failures;
