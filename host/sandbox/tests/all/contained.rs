//! Hostile handlers are contained: each misbehaviour comes back as an
//! ordinary `failed` error of the right type, and the sandbox keeps serving.

use crate::support;

use std::collections::BTreeMap;
use std::time::Duration;

use nimbus_handler::{ErrorKind, Outcome};
use nimbus_sandbox::{HandlerVersion, Limits, Sandbox};
use support::{event, guest, sandbox};

fn load(sandbox: &Sandbox, crate_name: &str, limits: Limits) -> HandlerVersion {
    let bytes = std::fs::read(guest(crate_name)).expect("read guest");
    sandbox
        .load_bytes(crate_name, &bytes, limits, BTreeMap::new())
        .expect("guest loads")
}

fn assert_failed(invocation: &nimbus_sandbox::Invocation, error_type: &str) -> String {
    let error = invocation
        .report
        .result
        .as_ref()
        .expect_err("the invocation must fail");
    assert_eq!(error.kind, ErrorKind::Failed, "{error}");
    assert_eq!(error.error_type, error_type, "{error}");
    error.message.clone()
}

#[test]
fn a_panic_is_failed_with_error_type_panic_and_the_panic_message() {
    let sandbox = sandbox();
    let panicker = load(&sandbox, "panicker", Limits::default());
    let invocation = panicker.invoke(event("Panic", "{}"));
    let message = assert_failed(&invocation, "Panic");
    assert!(
        message.contains("panicker: deliberate panic for the host's tests"),
        "{message}"
    );
    assert!(
        invocation
            .logs
            .iter()
            .any(|r| r.message.contains("panicker: about to panic")),
        "logs written before the panic are kept: {:?}",
        invocation.logs
    );
}

#[test]
fn a_memory_bomb_is_stopped_at_its_memory_limit() {
    let sandbox = sandbox();
    let limits = Limits {
        memory_bytes: 16 << 20,
        ..Limits::default()
    };
    let bomb = load(&sandbox, "memory-bomb", limits);
    let invocation = bomb.invoke(event("MemoryBomb", "{}"));
    let message = assert_failed(&invocation, "MemoryLimit");
    assert!(message.contains(&(16u64 << 20).to_string()), "{message}");
}

#[test]
fn deep_recursion_is_a_trap_naming_the_stack_overflow() {
    let sandbox = sandbox();
    let recursion = load(&sandbox, "deep-recursion", Limits::default());
    let invocation = recursion.invoke(event("Recurse", "{}"));
    let message = assert_failed(&invocation, "Trap");
    // The guest's shadow stack overflows below address 0 (an out-of-bounds
    // access) before wasmtime's native stack guard is reached.
    assert!(message.contains("stack overflow"), "{message}");
    assert!(
        invocation
            .logs
            .iter()
            .any(|r| r.message.contains("deep-recursion: descending")),
        "{:?}",
        invocation.logs
    );
}

#[test]
fn an_endless_loop_alone_is_stopped_with_error_type_timeout() {
    let sandbox = sandbox();
    let limits = Limits {
        timeout: Duration::from_millis(200),
        ..Limits::default()
    };
    let endless = load(&sandbox, "endless-loop", limits);
    let invocation = endless.invoke(event("Loop", "{}"));
    let message = assert_failed(&invocation, "Timeout");
    assert!(message.contains("200ms"), "{message}");
}

#[test]
fn called_asynchronously_every_misbehaviour_is_contained_the_same_way() {
    // A pool of one: a misbehaving call that kept its instance or fiber
    // stack would make the next call `SandboxBusy`.
    let sandbox = support::sandbox_with(None, |config| config.max_concurrent_instances = 1);
    let memory = Limits {
        memory_bytes: 16 << 20,
        ..Limits::default()
    };
    let short = Limits {
        timeout: Duration::from_millis(200),
        ..Limits::default()
    };
    let cases = [
        (
            load(&sandbox, "panicker", Limits::default()),
            "Panic",
            "Panic",
        ),
        (
            load(&sandbox, "memory-bomb", memory),
            "MemoryBomb",
            "MemoryLimit",
        ),
        (
            load(&sandbox, "deep-recursion", Limits::default()),
            "Recurse",
            "Trap",
        ),
        (load(&sandbox, "endless-loop", short), "Loop", "Timeout"),
    ];
    let noop = load(&sandbox, "noop", Limits::default());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        for (hostile, event_type, error_type) in &cases {
            let invocation = hostile.invoke_async(event(event_type, "{}")).await;
            assert_failed(&invocation, error_type);
            let served = noop.invoke_async(event("Noop", "{}")).await;
            assert_eq!(
                served.report.result,
                Ok(Outcome::Completed),
                "after {event_type}"
            );
        }
    });
}

#[test]
fn the_sandbox_keeps_serving_after_every_kind_of_misbehaviour() {
    let sandbox = sandbox();
    let limits = Limits {
        memory_bytes: 16 << 20,
        timeout: Duration::from_millis(200),
        ..Limits::default()
    };
    let noop = load(&sandbox, "noop", Limits::default());
    for (crate_name, event_type) in [
        ("panicker", "Panic"),
        ("memory-bomb", "MemoryBomb"),
        ("deep-recursion", "Recurse"),
        ("endless-loop", "Loop"),
    ] {
        let hostile = load(&sandbox, crate_name, limits);
        for _ in 0..3 {
            assert!(
                hostile
                    .invoke(event(event_type, "{}"))
                    .report
                    .result
                    .is_err()
            );
            let served = noop.invoke(event("Noop", "{}"));
            assert_eq!(
                served.report.result,
                Ok(Outcome::Completed),
                "after {crate_name}"
            );
        }
    }
}

#[test]
fn two_events_in_a_row_share_no_state() {
    let sandbox = sandbox();
    let stateful = load(&sandbox, "stateful", Limits::default());
    for _ in 0..3 {
        let invocation = stateful.invoke(event("Stateful", "{}"));
        assert_eq!(invocation.report.result, Ok(Outcome::Completed));
        assert_eq!(invocation.report.follow_ups.len(), 1);
        let payload: serde_json::Value =
            serde_json::from_str(&invocation.report.follow_ups[0].payload).expect("JSON");
        assert_eq!(
            payload["Count"], 1,
            "every event sees a fresh instance, so the counter starts again"
        );
    }
}

#[test]
fn the_invocation_reports_the_digest_and_name_of_the_version_that_ran_it() {
    let sandbox = sandbox();
    let bytes = std::fs::read(guest("noop")).expect("read");
    let noop = load(&sandbox, "noop", Limits::default());
    let invocation = noop.invoke(event("Noop", "{}"));
    assert_eq!(invocation.digest, nimbus_sandbox::Digest::of(&bytes));
    assert_eq!(invocation.handler, "noop");
    assert_eq!(noop.event_types(), ["Noop"]);
}
