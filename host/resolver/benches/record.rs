//! What a store commit costs the Resolver: recording one message per
//! transaction (a lone session) against batches of 64 (what the consumer's
//! group commit does when many sessions are busy). Each iteration records a
//! request copy and a resolution for 512 events on a fresh file store.
//!
//! Run: `cargo bench -p nimbus-resolver --bench record`.

#![allow(missing_docs, reason = "criterion generates the entry point")]
#![allow(clippy::unwrap_used, reason = "bench")]

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use nimbus_resolver::{MessageKind, Observation, ResolverStore, SqliteResolverStore};

const EVENTS: usize = 512;

fn observations() -> Vec<Observation> {
    let mut all = Vec::with_capacity(EVENTS * 2);
    for i in 0..EVENTS {
        for (kind, id) in [
            (MessageKind::EventRequest, format!("m-{i}")),
            (MessageKind::ResolutionResponse, format!("r-{i}")),
        ] {
            let mut o = Observation::new("billing", &format!("e-{i}"), kind, 1);
            o.message_id = Some(id);
            o.session_id = Some(format!("s-{}", i % 64));
            o.event_type = Some("OrderPlaced".into());
            o.payload = Some(r#"{"OrderId":"o-1001","Customer":"acme","Total":150.0}"#.into());
            all.push(o);
        }
    }
    all
}

fn fresh_store() -> (tempfile::TempDir, SqliteResolverStore) {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteResolverStore::open(&dir.path().join("resolver.db")).unwrap();
    (dir, store)
}

fn bench(c: &mut Criterion) {
    let all = observations();
    let mut group = c.benchmark_group("resolver_record");
    group.throughput(Throughput::Elements(all.len() as u64));
    group.sample_size(10);
    group.bench_function("one_per_commit", |b| {
        b.iter_batched(
            fresh_store,
            |(_dir, store)| {
                for o in &all {
                    store.record(o).unwrap();
                }
            },
            BatchSize::PerIteration,
        );
    });
    group.bench_function("batches_of_64", |b| {
        b.iter_batched(
            fresh_store,
            |(_dir, store)| {
                for batch in all.chunks(64) {
                    store.record_batch(batch).unwrap();
                }
            },
            BatchSize::PerIteration,
        );
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
