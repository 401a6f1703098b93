//! What the Resolver's store costs per event in steady state, the way the
//! bench and a busy host drive it: random (UUID-like) event ids, 64
//! sessions, a ~300-byte payload, each event's request copy and resolution
//! recorded in group-committed batches, on a store that already holds
//! `NIMBUS_STEADY_PREFILL` events (default 20 000).
//!
//! With `NIMBUS_STEADY_SPLIT=1` an event's two records land in different
//! commits, as they do end to end (the request copy is recorded when it is
//! published, the response a round trip later): each commit carries the
//! responses of the previous batch's events and the requests of its own.
//!
//! Prints process CPU µs per event and bytes written per event (WAL,
//! checkpoints), which track how many pages a record dirties; both are
//! steadier than wall time on a shared machine.
//!
//! Run: `cargo bench -p nimbus-resolver --bench steady`.

#![allow(missing_docs, reason = "bench entry point")]
#![allow(clippy::unwrap_used, reason = "bench")]

use std::time::Instant;

use nimbus_resolver::{
    MessageKind, Observation, ResolverStore, SqliteResolverStore, StoreDurability,
};

/// Events per group commit (two records each), unless `NIMBUS_STEADY_BATCH`
/// says otherwise.
fn batch_events() -> usize {
    std::env::var("NIMBUS_STEADY_BATCH")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(32)
}

struct Ids(u64);

impl Ids {
    fn next_hex(&mut self) -> String {
        // xorshift: cheap, deterministic, spread like a UUID's bits.
        let mut word = || {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        };
        let (a, b) = (word(), word());
        format!(
            "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
            a >> 32,
            (a >> 16) & 0xffff,
            a & 0xfff,
            b >> 52,
            b & 0xffff_ffff_ffff
        )
    }
}

fn event(ids: &mut Ids, n: usize, at_ms: i64) -> [Observation; 2] {
    let event_id = ids.next_hex();
    let session = format!("session-{}", n % 64);
    let payload = format!(
        r#"{{"orderId":"{event_id}","customer":"acme-industries","lines":[{{"sku":"A-100","qty":2,"price":19.5}},{{"sku":"B-220","qty":1,"price":240.0}}],"currency":"EUR","note":"{}"}}"#,
        "x".repeat(120)
    );
    let request_id = ids.next_hex();
    let mut request = Observation::new("billing", &event_id, MessageKind::EventRequest, at_ms);
    request.message_id = Some(request_id.clone());
    request.session_id = Some(session.clone());
    request.correlation_id = Some(ids.next_hex());
    request.event_type = Some("OrderPlaced".into());
    request.from = Some("orders".into());
    request.payload = Some(payload);
    let mut response = Observation::new(
        "billing",
        &event_id,
        MessageKind::ResolutionResponse,
        at_ms + 2,
    );
    response.message_id = Some(ids.next_hex());
    response.session_id = Some(session);
    response.parent_message_id = Some(request_id);
    response.handler_version = Some(format!("sha256:{}", ids.next_hex()));
    response.queue_time_ms = Some(1);
    response.processing_time_ms = Some(1);
    [request, response]
}

fn batch(ids: &mut Ids, first: usize, at_ms: i64) -> Vec<Observation> {
    (first..first + batch_events())
        .flat_map(|n| event(ids, n, at_ms))
        .collect()
}

/// Whether an event's request and response go to different commits.
fn split() -> bool {
    std::env::var("NIMBUS_STEADY_SPLIT").is_ok_and(|v| v == "1")
}

/// Regroups whole-event batches so each commit holds the previous batch's
/// responses and this batch's requests (and a last commit for the last
/// responses).
fn split_commits(batches: Vec<Vec<Observation>>) -> Vec<Vec<Observation>> {
    let mut commits = Vec::with_capacity(batches.len() + 1);
    let mut responses: Vec<Observation> = Vec::new();
    for batch in batches {
        let (requests, next): (Vec<_>, Vec<_>) = batch
            .into_iter()
            .partition(|o| o.kind == MessageKind::EventRequest);
        let mut commit = std::mem::replace(&mut responses, next);
        commit.extend(requests);
        commits.push(commit);
    }
    commits.push(responses);
    commits
}

/// (process CPU seconds, bytes written) so far, from procfs.
fn usage() -> Option<(f64, u64)> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let fields: Vec<&str> = stat.rsplit(')').next()?.split_whitespace().collect();
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    let io = std::fs::read_to_string("/proc/self/io").ok()?;
    let wchar = io
        .lines()
        .find_map(|l| l.strip_prefix("wchar: "))?
        .trim()
        .parse()
        .ok()?;
    // USER_HZ is 100 on Linux.
    Some((ticks as f64 / 100.0, wchar))
}

fn main() {
    let prefill: usize = std::env::var("NIMBUS_STEADY_PREFILL")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000);
    let measured: usize = std::env::var("NIMBUS_STEADY_EVENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000);
    let dir = tempfile::tempdir().unwrap();
    let store =
        SqliteResolverStore::open_with(&dir.path().join("resolver.db"), StoreDurability::PowerLoss)
            .unwrap();
    let mut ids = Ids(0x9e37_79b9_7f4a_7c15);
    let mut n = 0;
    while n < prefill {
        store.record_batch(&batch(&mut ids, n, n as i64)).unwrap();
        n += batch_events();
    }
    let mut batches: Vec<Vec<Observation>> = (0..measured / batch_events())
        .map(|i| batch(&mut ids, n + i * batch_events(), (n + i) as i64))
        .collect();
    if split() {
        batches = split_commits(batches);
    }
    let before = usage();
    let started = Instant::now();
    for b in &batches {
        store.record_batch(b).unwrap();
    }
    let wall = started.elapsed();
    let events = (measured / batch_events() * batch_events()) as f64;
    print!(
        "resolver steady: {} events on a store of {prefill}, batches of {}{}: wall {:.1} µs/event",
        events,
        batch_events(),
        if split() { " (split)" } else { "" },
        wall.as_secs_f64() * 1e6 / events
    );
    if let (Some((cpu0, w0)), Some((cpu1, w1))) = (before, usage()) {
        print!(
            ", cpu {:.1} µs/event, written {:.0} bytes/event",
            (cpu1 - cpu0) * 1e6 / events,
            (w1 - w0) as f64 / events
        );
    }
    println!();
}
