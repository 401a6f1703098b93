//! What a rule costs the broker per publish: evaluating NimBus's filters and
//! applying its forwarding action, next to a hand-written Rust check of the
//! same condition (the floor an interpreter is measured against).
//!
//! Run: `cargo bench -p nimbus-sqlfilter --bench evaluate`, then
//! `host/sqlfilter/benches/medians.sh` prints each median and the ratio of
//! the interpreted filter to the hand-written one.

#![allow(
    missing_docs,
    reason = "criterion's macros generate undocumented items"
)]
#![allow(clippy::unwrap_used, reason = "benchmark setup")]

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use nimbus_sqlfilter::{MessageProperties, PropertyBag, SqlFilter, SqlRuleAction, Value};

const FORWARDING: &str = "user.EventTypeId = 'OrderPlaced' AND user.From IS NULL";

fn message() -> PropertyBag {
    let mut msg = PropertyBag::new();
    msg.insert_user("To", "OrderPlaced");
    msg.insert_user("EventTypeId", "OrderPlaced");
    msg.insert_user("MessageType", "EventRequest");
    msg.insert_user("EventId", "c0ffee00-0000-4000-8000-000000000000");
    msg.insert_system("MessageId", "OrderPlaced-4f1c").unwrap();
    msg
}

/// The forwarding filter written by hand against the same trait.
fn hand_written(msg: &dyn MessageProperties) -> bool {
    matches!(msg.user("EventTypeId"), Some(Value::String(s)) if s == "OrderPlaced")
        && msg.user("From").is_none()
}

fn bench(c: &mut Criterion) {
    let msg = message();
    let forwarding = SqlFilter::parse(FORWARDING).unwrap();
    let complex = SqlFilter::parse(
        "(sys.MessageId LIKE 'OrderPlaced-%' OR user.To IN ('billing', 'shipping')) \
         AND NOT EXISTS(user.Skip) AND user.EventTypeId <> 'Heartbeat'",
    )
    .unwrap();
    let action = SqlRuleAction::parse(
        "SET user.From = 'storefront'; SET user.EventId = newid(); SET user.To = 'billing';",
    )
    .unwrap();
    assert!(
        forwarding.evaluate(&msg).unwrap() && hand_written(&msg) && complex.evaluate(&msg).unwrap()
    );

    let mut group = c.benchmark_group("forwarding_filter");
    group.bench_function("hand_written_rust", |b| {
        b.iter(|| hand_written(black_box(&msg)))
    });
    group.bench_function("sql_filter_evaluate", |b| {
        b.iter(|| black_box(&forwarding).evaluate(black_box(&msg)))
    });
    group.finish();

    c.bench_function("like_in_exists_filter_evaluate", |b| {
        b.iter(|| black_box(&complex).evaluate(black_box(&msg)))
    });
    c.bench_function("forwarding_filter_parse", |b| {
        b.iter(|| SqlFilter::parse(black_box(FORWARDING)))
    });
    c.bench_function("forwarding_action_apply_on_clone", |b| {
        b.iter(|| {
            let mut copy = msg.clone();
            action.apply(&mut copy).unwrap();
            copy
        })
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
