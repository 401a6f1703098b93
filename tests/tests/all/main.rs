//! This crate's integration tests, linked as one binary: each file is a
//! module, so the suite links once instead of once per file.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

mod amqp_sdks;
mod api_guard;
mod broker_verify;
mod closed_stdout;
mod damaged_store;
mod data_dir_lock;
mod handlers_check;
mod handlers_list;
mod hostile_guest;
mod invoke;
mod operate;
mod retention;
mod servicebus_host;
mod shutdown;
mod terminal_output;
mod upgrade;
