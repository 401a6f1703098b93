//! `nimbus bench` on the real stack: every event it publishes ends, and ends
//! the way the load said (completed, failed then skipped, or blocking its
//! session), through the native handlers and through the real `noop` and
//! `orders` components. Counts only: speed is for the bench itself to report.

#![allow(clippy::unwrap_used, reason = "tests")]

use std::path::{Path, PathBuf};

use nimbus_runtime::bench::{
    self, BenchOptions, Durability, HandlerChoice, Mode, OnFailure, ResolverStoreChoice,
};

fn guests_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("NIMBUS_GUESTS_DIR") {
        return PathBuf::from(dir);
    }
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"))
        .join("wasm32-wasip2/release")
}

fn small(handler: HandlerChoice, modes: Vec<Mode>) -> BenchOptions {
    BenchOptions {
        sessions: 4,
        events: 60,
        warmup: 8,
        payload_bytes: 300,
        handler,
        guests_dir: guests_dir(),
        durability: Durability::Os,
        modes,
        // A fixed open-loop rate, so the test does not depend on the
        // machine's speed for what it publishes.
        rate: Some(500.0),
        ..BenchOptions::default()
    }
}

async fn run(options: &BenchOptions) -> bench::BenchReport {
    bench::run(options, &|_: &str| {}).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_event_completes_through_wasm_and_native_noop() {
    let report = run(&small(HandlerChoice::Noop, vec![Mode::Wasm, Mode::Native])).await;
    assert_eq!(report.modes.len(), 2);
    for mode in &report.modes {
        for phase in [&mode.closed, &mode.open] {
            assert_eq!(phase.completed.count, 60, "{:?}", mode.mode);
            assert_eq!(phase.ended, 60);
            assert_eq!((phase.blocked, phase.parked, phase.lost), (0, 0, 0));
            assert!(phase.throughput > 0.0);
            assert!(phase.completed.p50 <= phase.completed.p99);
            assert!(phase.completed.p99 <= phase.completed.max);
            // The p99 event (the 60th of 60 by nearest rank) and any that
            // tie it are the tail, in at least one burst.
            let tail = phase.tail;
            assert!(tail.events >= 1 && tail.events <= 60, "{tail:?}");
            assert!(tail.bursts >= 1 && tail.bursts <= tail.events, "{tail:?}");
            assert!(tail.largest >= 1 && tail.largest <= tail.events, "{tail:?}");
        }
    }
    assert_eq!(report.modes[1].open.offered_rate, Some(500.0));
    let printed = report.to_string();
    assert!(printed.contains("wasm / native"), "{printed}");
    assert!(printed.contains("slowest 1 %:"), "{printed}");
    if cfg!(target_os = "linux") {
        // Where the CPU went, by the stack's threads.
        for mode in &report.modes {
            let groups: Vec<&str> = mode.closed.threads.iter().map(|t| t.group).collect();
            for expected in ["tokio workers", "Resolver recorder", "broker writer"] {
                assert!(groups.contains(&expected), "{:?}: {groups:?}", mode.mode);
            }
            let busiest = mode
                .closed
                .busiest_thread
                .as_ref()
                .expect("a busiest thread");
            assert!(!busiest.name.starts_with("tokio-"), "{busiest:?}");
        }
        assert!(printed.contains("cpu µs by thread: "), "{printed}");
        assert!(
            printed.contains("alone would be busy all the time at ~"),
            "{printed}"
        );
    }
}

/// With the store discarded the Resolver still hears, settles and reports
/// every event, so the run measures the rest of the stack; the report says
/// loudly that no audit trail was written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_with_the_resolver_store_discarded_still_ends_every_event() {
    let options = BenchOptions {
        resolver_store: ResolverStoreChoice::Discard,
        ..small(HandlerChoice::Noop, vec![Mode::Native])
    };
    let report = run(&options).await;
    let mode = &report.modes[0];
    for phase in [&mode.closed, &mode.open] {
        assert_eq!(phase.completed.count, 60);
        assert_eq!((phase.blocked, phase.parked, phase.lost), (0, 0, 0));
    }
    let printed = report.to_string();
    assert!(
        printed.contains("Resolver store DISCARDED (no audit trail written)"),
        "{printed}"
    );
    let with_store = run(&small(HandlerChoice::Noop, vec![Mode::Native])).await;
    assert!(!with_store.to_string().contains("DISCARDED"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_orders_are_skipped_through_the_manager() {
    let options = BenchOptions {
        failure_rate: 0.1,
        on_failure: OnFailure::Skip,
        ..small(HandlerChoice::Orders, vec![Mode::Wasm, Mode::Native])
    };
    let report = run(&options).await;
    for mode in &report.modes {
        for phase in [&mode.closed, &mode.open] {
            assert_eq!(phase.completed.count, 54, "{:?}", mode.mode);
            assert_eq!(phase.skipped.count, 6, "{:?}", mode.mode);
            assert_eq!((phase.blocked, phase.parked, phase.lost), (0, 0, 0));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_orders_left_blocking_park_what_follows() {
    let options = BenchOptions {
        failure_rate: 0.1,
        on_failure: OnFailure::Block,
        ..small(HandlerChoice::Orders, vec![Mode::Native])
    };
    let report = run(&options).await;
    let mode = &report.modes[0];
    // Failing events are numbers 9, 19, ..., 59. Closed loop, one in
    // flight per session: a session that fails stops taking events, so the
    // four sessions block on the first four failures and the run ends at
    // event 39, with nothing parked.
    assert_eq!(mode.closed.blocked, 4);
    assert_eq!(mode.closed.completed.count, 36);
    assert_eq!(mode.closed.parked, 0);
    // Open loop, round robin: the failures fall in sessions 1 and 3
    // (n % 4); each blocks at its first failure (9 and 19) and every later
    // event of the session parks behind it, failing ones included.
    assert_eq!(mode.open.blocked, 2);
    assert_eq!(mode.open.parked, 12 + 10);
    assert_eq!(mode.open.completed.count, 36);
}
