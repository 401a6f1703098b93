//! This crate's integration tests, linked as one binary: each file is a
//! module, so the suite links once instead of once per file.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

mod support;

mod bench;
mod crash;
mod hot_routing;
mod scenarios;
