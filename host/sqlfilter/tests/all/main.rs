//! This crate's integration tests, linked as one binary: each file is a
//! module, so the suite links once instead of once per file.

mod actions;
mod allocation;
mod filters;
mod nimbus_topology;
mod parse_errors;
mod stack;
