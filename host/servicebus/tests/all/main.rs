//! This crate's integration tests, linked as one binary: each file is a
//! module, so the suite links once instead of once per file.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

mod common;

mod conformance;
mod crash_windows;
mod lock_lost;
mod publish;
mod reconnect;
mod rhea_keys;
mod tls;
