//! The SDK's allocator in a real component: a handler that allocates and
//! frees in a loop stays within a small memory limit however many times it
//! goes round, because freed blocks are reused (`guest-sdk/src/arena.rs`);
//! the same loop keeping its blocks runs into the limit, which shows the
//! limit is tight enough for the first test to mean something.

use crate::support;

use std::collections::BTreeMap;

use nimbus_handler::{ErrorKind, Outcome};
use nimbus_sandbox::{HandlerVersion, Limits};
use support::{event, guest, sandbox};

/// Small arena classes, the largest one, and two sizes past it (the backing
/// allocator's), one of them larger than a wasm page.
const SIZES: &str = "[16, 24, 100, 1000, 4096, 10000, 70000]";
const ROUNDS: u64 = 3000;
/// What one round allocates: the sum of `SIZES`.
const ROUND_BYTES: u64 = 16 + 24 + 100 + 1000 + 4096 + 10000 + 70000;
const MEMORY_LIMIT: u64 = 2 << 20;

fn echo() -> HandlerVersion {
    let bytes = std::fs::read(guest("echo")).expect("read guest");
    let limits = Limits {
        memory_bytes: MEMORY_LIMIT,
        ..Limits::default()
    };
    sandbox()
        .load_bytes("echo", &bytes, limits, BTreeMap::new())
        .expect("guest loads")
}

fn churn(keep_all: bool) -> String {
    format!(r#"{{"Churn":{{"Sizes":{SIZES},"Rounds":{ROUNDS},"KeepAll":{keep_all}}}}}"#)
}

#[test]
fn allocating_and_freeing_in_a_loop_stays_within_a_small_memory_limit() {
    let total = ROUNDS * ROUND_BYTES;
    assert!(
        total > 100 * MEMORY_LIMIT,
        "the loop must allocate far more than the limit"
    );
    let invocation = echo().invoke(event("Echo", &churn(false)));
    assert_eq!(
        invocation.report.result,
        Ok(Outcome::Completed),
        "{:?}",
        invocation.logs
    );
    let logged = &invocation.logs[0];
    assert_eq!(logged.message, format!("churned {total} bytes"));
}

#[test]
fn the_same_loop_keeping_its_blocks_runs_into_the_limit() {
    let invocation = echo().invoke(event("Echo", &churn(true)));
    let error = invocation
        .report
        .result
        .expect_err("a leak must hit the limit");
    assert_eq!(error.kind, ErrorKind::Failed, "{error}");
    assert_eq!(error.error_type, "MemoryLimit", "{error}");
}
