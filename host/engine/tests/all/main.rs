//! This crate's integration tests, linked as one binary: each file is a
//! module, so the suite links once instead of once per file.

mod support;

mod engine_on_broker;
mod replayer;
