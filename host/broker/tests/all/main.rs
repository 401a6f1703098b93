//! This crate's integration tests, linked as one binary: each file is a
//! module, so the suite links once instead of once per file.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

mod conformance;
mod crash;
mod embedded;
mod footprint;
mod list_sessions;
mod provision;
mod recovery;
mod routing;
mod write_failures;
