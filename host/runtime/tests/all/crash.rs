//! The host under `kill -9` (SEMANTICS.md §8): a child process runs the real
//! [`Host`] on a data directory and publishes a load of `echo` events —
//! most complete, some fail with a retry policy and then block their
//! session, some are transient until the broker dead-letters them, some
//! hand off — and the parent kills it with SIGKILL at a random point, round
//! after round. Then the parent restarts the host itself, waits for quiet
//! and checks:
//!
//! - every event published is in the Resolver; each one is settled or
//!   parked behind an event of its session that owns the block (Failed or
//!   pending a handoff), which an operator can act on;
//! - once the operator resubmits every blocker and completes every handoff,
//!   every event ends in exactly one terminal status (Completed, or
//!   DeadLettered for the transient ones);
//! - per session, the handler completed the events in publish order, each
//!   exactly once: every completion publishes a `Trace` follow-up in the
//!   same settlement, and a tap subscription records them in broker order;
//! - after shutdown, no session state is left blocked or counting parked
//!   messages.
//!
//! Re-run with the printed seed through `NIMBUS_HOST_CRASH_SEED` to repeat
//! the kill points (the child's timing still varies).

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nimbus_broker::{Broker, BrokerOptions, Durability};
use nimbus_resolver::{EventFilter, EventRecord, HANDOFF_SUB_STATUS, ResolverStore, Status};
use nimbus_transport::{SessionLock, SessionSelector, SubscriptionPath, Transport};
use nimbus_wire::SessionState;
use serde_json::{Value, json};
use support::{create_tap, drain_tap, install, manager, publish, start_host};

const ENDPOINT: &str = "echoes";
const ROUNDS: u32 = 10;
const SESSIONS: u32 = 12;
const PER_SESSION_PER_ROUND: u32 = 4;
/// High enough that kills alone never exhaust a message's deliveries.
const MAX_DELIVERY_COUNT: u32 = 10;
const ROOT_VAR: &str = "NIMBUS_HOST_CRASH_ROOT";
const ROUND_VAR: &str = "NIMBUS_HOST_CRASH_ROUND";

/// What an event asks the `echo` handler to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Completes.
    Ok,
    /// Fails with `Flaky` every time: retried twice by policy, then blocks
    /// its session until the operator resubmits it fixed.
    Flaky,
    /// Transient every time: abandoned until the broker dead-letters it.
    Transient,
    /// Hands off; the operator completes the handoff.
    Handoff,
}

/// One published event, known by its MessageId `c{session}-r{round}-i{index}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct EventKey {
    session: u32,
    round: u32,
    index: u32,
}

impl EventKey {
    fn message_id(self) -> String {
        format!("c{}-r{}-i{}", self.session, self.round, self.index)
    }

    fn session_id(self) -> String {
        session_id(self.session)
    }

    fn parse(message_id: &str) -> Option<EventKey> {
        let mut parts = message_id.strip_prefix('c')?.split('-');
        let session = parts.next()?.parse().ok()?;
        let round = parts.next()?.strip_prefix('r')?.parse().ok()?;
        let index = parts.next()?.strip_prefix('i')?.parse().ok()?;
        Some(EventKey {
            session,
            round,
            index,
        })
    }

    /// A fixed mix, the same in parent and child: about 70 % complete,
    /// 10 % each of the others.
    fn kind(self) -> Kind {
        let mut h = u64::from(self.session) * 1_000_003
            + u64::from(self.round) * 10_007
            + u64::from(self.index) * 101
            + 17;
        h ^= h >> 7;
        h = h.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        match (h >> 32) % 10 {
            0 => Kind::Flaky,
            1 => Kind::Transient,
            2 => Kind::Handoff,
            _ => Kind::Ok,
        }
    }

    fn script(self) -> Value {
        let mut script = match self.kind() {
            Kind::Ok => json!({}),
            Kind::Flaky => json!({"Outcome": "Failed", "ErrorType": "Flaky"}),
            Kind::Transient => json!({"Outcome": "Transient", "ErrorType": "PartnerUnavailable"}),
            Kind::Handoff => json!({"Outcome": "PendingHandoff", "JobId": self.message_id()}),
        };
        traced(&mut script, &self.message_id());
        script
    }
}

fn session_id(session: u32) -> String {
    format!("crash-{session}")
}

/// Adds the `Trace` follow-up naming the event, published only when the
/// handler completes (or hands off).
fn traced(script: &mut Value, message_id: &str) {
    script["FollowUps"] = json!([{
        "EventType": "Trace",
        "MessageId": format!("{message_id}:trace"),
        "Payload": {"MessageId": message_id},
    }]);
}

/// The child: starts the host, publishes this round's events (printing
/// `P <id>` once each publish is acknowledged), then runs until killed. A
/// no-op when run as an ordinary test.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_child_host() {
    let Ok(root) = std::env::var(ROOT_VAR) else {
        return;
    };
    let round: u32 = std::env::var(ROUND_VAR)
        .expect("round")
        .parse()
        .expect("round number");
    let host = start_host(Path::new(&root), MAX_DELIVERY_COUNT).await;
    println!("READY");
    for index in 0..PER_SESSION_PER_ROUND {
        for session in 0..SESSIONS {
            let key = EventKey {
                session,
                round,
                index,
            };
            publish(
                host.broker().unwrap(),
                "Echo",
                &key.session_id(),
                &key.message_id(),
                &key.script(),
            )
            .await;
            println!("P {}", key.message_id());
        }
    }
    println!("PUBLISHED");
    // Serve until the parent kills this process.
    std::future::pending::<()>().await;
}

/// The test's data directory, kept (and named on stderr) when the test
/// fails, so the broker's and the Resolver's databases of a failed run can
/// be read afterwards; removed otherwise.
struct KeepOnFailure(Option<tempfile::TempDir>);

impl KeepOnFailure {
    fn path(&self) -> &Path {
        self.0.as_ref().expect("present until dropped").path()
    }
}

impl Drop for KeepOnFailure {
    fn drop(&mut self) {
        if std::thread::panicking()
            && let Some(dir) = self.0.take()
        {
            eprintln!(
                "kept the failed run's data directory: {}",
                dir.keep().display()
            );
        }
    }
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// Runs one child round: start, let it run a random while, SIGKILL.
/// Returns the events whose publish was acknowledged.
fn run_child_round(root: &Path, round: u32, rng: &mut Rng) -> Vec<EventKey> {
    let exe = std::env::current_exe().expect("test binary");
    let mut child = Command::new(exe)
        .args([
            "--exact",
            "crash::crash_child_host",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(ROOT_VAR, root)
        .env(ROUND_VAR, round.to_string())
        .env("RUST_LOG", "off")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn the child host");
    let stdout = child.stdout.take().expect("child stdout");
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let reader = std::thread::spawn(move || {
        let mut reader = BufReader::new(stdout);
        loop {
            let mut line = String::new();
            match reader.read_line(&mut line) {
                // A line cut short by the kill was never acknowledged.
                Ok(0) | Err(_) => break,
                Ok(_) if !line.ends_with('\n') => break,
                Ok(_) => {
                    line.pop();
                    if tx.send(line).is_err() {
                        break;
                    }
                }
            }
        }
    });
    let mut lines = Vec::new();
    loop {
        let line = rx
            .recv_timeout(Duration::from_secs(120))
            .expect("the child host starts");
        // libtest prints "test crash_child_host ... " without a newline first.
        let ready = line.ends_with("READY");
        lines.push(line);
        if ready {
            break;
        }
    }
    // Kill somewhere between mid-publish and well after: handlers running,
    // settlements committing, retries scheduled, sessions parking.
    let run_for = Duration::from_millis(rng.next() % 2_500);
    let deadline = Instant::now() + run_for;
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        match rx.recv_timeout(left) {
            Ok(line) => lines.push(line),
            Err(_) => break,
        }
    }
    if let Some(status) = child.try_wait().expect("child status") {
        panic!("round {round}: the child host died on its own ({status})");
    }
    child.kill().expect("SIGKILL the child"); // Child::kill is SIGKILL on Unix
    let status = child.wait().expect("reap the child");
    assert!(!status.success(), "the child ran to completion: {status}");
    while let Ok(line) = rx.recv() {
        lines.push(line);
    }
    reader.join().expect("reader thread");
    lines
        .iter()
        .filter_map(|line| line.strip_prefix("P "))
        .map(|id| EventKey::parse(id).expect("a published id"))
        .collect()
}

/// Every crash event the Resolver knows, by key.
fn crash_records(store: &dyn ResolverStore) -> BTreeMap<EventKey, EventRecord> {
    store
        .events(&EventFilter {
            endpoint: Some(ENDPOINT.to_owned()),
            limit: Some(1_000_000),
            ..EventFilter::default()
        })
        .expect("list events")
        .into_iter()
        .filter_map(|r| {
            let key = EventKey::parse(r.request_message_id.as_deref()?)?;
            Some((key, r))
        })
        .collect()
}

fn owns_block(record: &EventRecord) -> bool {
    record.status == Status::Failed
        || (record.status == Status::Pending
            && record.sub_status.as_deref() == Some(HANDOFF_SUB_STATUS))
}

/// Quiet: every event known is settled or parked, nothing is in flight or
/// waiting for a retry, and every session with parked events has an event
/// that owns the block. Returns what is not yet quiet.
fn not_quiet(
    published: &BTreeSet<EventKey>,
    records: &BTreeMap<EventKey, EventRecord>,
) -> Vec<String> {
    let mut problems = Vec::new();
    for key in published {
        if !records.contains_key(key) {
            problems.push(format!("{} not in the Resolver", key.message_id()));
        }
    }
    let mut owners: BTreeSet<u32> = BTreeSet::new();
    for (key, record) in records {
        if owns_block(record) {
            owners.insert(key.session);
        }
    }
    for (key, record) in records {
        let settled = match record.status {
            Status::Completed | Status::DeadLettered => true,
            // A Flaky event waits for its two retries before it blocks.
            Status::Failed => record.retry_count >= 2,
            Status::Pending => record.sub_status.as_deref() == Some(HANDOFF_SUB_STATUS),
            Status::Deferred => owners.contains(&key.session),
            Status::Skipped | Status::Unsupported => false,
        };
        if !settled {
            problems.push(format!(
                "{}: {} (retry count {}, sub-status {:?})",
                key.message_id(),
                record.status,
                record.retry_count,
                record.sub_status
            ));
        }
    }
    problems
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_event_reaches_one_terminal_status_in_order_across_sigkills() {
    if std::env::var(ROOT_VAR).is_ok() {
        return;
    }
    let root_dir = KeepOnFailure(Some(
        tempfile::Builder::new()
            .prefix("host-crash-")
            .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
            .expect("temp dir"),
    ));
    let root = root_dir.path();
    install(&root.join("handlers"), ENDPOINT, "echo", "echo");
    let seed = std::env::var("NIMBUS_HOST_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .expect("clock")
                .as_nanos() as u64
                | 1
        });
    eprintln!("host crash test seed {seed} (NIMBUS_HOST_CRASH_SEED)");
    let mut rng = Rng(seed);

    // Provision once and put a tap on the endpoint topic for the traces.
    let host = start_host(root, MAX_DELIVERY_COUNT).await;
    let tap = create_tap(host.broker().unwrap(), ENDPOINT, "Trace").await;
    host.shutdown().await;

    let mut published = BTreeSet::new();
    for round in 0..ROUNDS {
        let acknowledged = run_child_round(root, round, &mut rng);
        eprintln!(
            "round {round}: {} publishes acknowledged before the kill",
            acknowledged.len()
        );
        published.extend(acknowledged);
    }
    assert!(
        !published.is_empty(),
        "no child acknowledged a publish: the kills came too early"
    );

    // The final restart: wait for quiet, check every parked event has an
    // owner an operator can act on.
    let host = start_host(root, MAX_DELIVERY_COUNT).await;
    let store: Arc<dyn ResolverStore> = host.resolver().clone();
    let started = Instant::now();
    loop {
        let problems = not_quiet(&published, &crash_records(&*store));
        if problems.is_empty() {
            break;
        }
        assert!(
            started.elapsed() < support::DEADLINE,
            "after the last restart the host never became quiet: {problems:#?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // The operator: fix and resubmit every blocker, complete every handoff,
    // until nothing is blocked.
    let operator = manager(&host);
    let mut acted: BTreeMap<EventKey, BTreeSet<Option<String>>> = BTreeMap::new();
    let started = Instant::now();
    loop {
        let records = crash_records(&*store);
        let problems = not_quiet(&published, &records);
        let blockers: Vec<(EventKey, EventRecord)> = records
            .iter()
            .filter(|(_, r)| owns_block(r))
            .map(|(k, r)| (*k, r.clone()))
            .collect();
        if problems.is_empty() && blockers.is_empty() {
            break;
        }
        assert!(
            started.elapsed() < support::DEADLINE * 2,
            "the operator could not drain the sessions: {problems:#?}; blockers {blockers:#?}"
        );
        if problems.is_empty() {
            for (key, record) in blockers {
                // Act once per state of the row: until the Resolver records
                // the control message, the row still looks blocked.
                let seen = acted.entry(key).or_default();
                if seen.contains(&record.last_message_id) {
                    continue;
                }
                seen.insert(record.last_message_id.clone());
                if record.status == Status::Failed {
                    let mut fixed = json!({});
                    traced(&mut fixed, &key.message_id());
                    operator
                        .resubmit(&record.event_id, Some(ENDPOINT), Some(&fixed.to_string()))
                        .await
                        .expect("resubmit a blocker");
                } else {
                    operator
                        .complete_handoff(&record.event_id, Some(ENDPOINT), None)
                        .await
                        .expect("complete a handoff");
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Exactly one terminal status each, by kind.
    let records = crash_records(&*store);
    let all: BTreeSet<EventKey> = records.keys().copied().collect();
    assert!(
        published.is_subset(&all),
        "acknowledged publishes missing from the Resolver"
    );
    for (key, record) in &records {
        let expected = match key.kind() {
            Kind::Transient => Status::DeadLettered,
            Kind::Ok | Kind::Flaky | Kind::Handoff => Status::Completed,
        };
        assert_eq!(
            record.status,
            expected,
            "{} ({:?}): {record:#?}",
            key.message_id(),
            key.kind()
        );
    }

    // Per session: completions in publish order, each exactly once.
    let traces = drain_tap(host.broker().unwrap(), &tap).await;
    let mut per_session: BTreeMap<u32, Vec<EventKey>> = BTreeMap::new();
    for trace in &traces {
        let payload: Value =
            serde_json::from_str(trace.event_json().expect("trace payload")).expect("JSON");
        let key = EventKey::parse(payload["MessageId"].as_str().expect("MessageId"))
            .expect("a crash event id");
        assert_eq!(
            trace.session_id.as_deref(),
            Some(key.session_id().as_str()),
            "a trace keeps its event's session"
        );
        per_session.entry(key.session).or_default().push(key);
    }
    for key in records.keys() {
        let completions = per_session
            .get(&key.session)
            .map_or(0, |keys| keys.iter().filter(|k| *k == key).count());
        let expected = usize::from(key.kind() != Kind::Transient);
        assert_eq!(
            completions,
            expected,
            "{} ({:?}) completed {completions} times",
            key.message_id(),
            key.kind()
        );
    }
    for (session, keys) in &per_session {
        assert!(
            keys.windows(2).all(|w| w[0] < w[1]),
            "session {session} completed out of publish order: {:?}",
            keys.iter().map(|k| k.message_id()).collect::<Vec<_>>()
        );
    }
    host.shutdown().await;

    // After shutdown: no session state left blocked or counting parked
    // messages.
    let broker =
        Broker::open(BrokerOptions::new(root.join("data/broker")).durability(Durability::Os))
            .await
            .expect("reopen the broker");
    let inbox = SubscriptionPath::new(ENDPOINT, ENDPOINT);
    for session in 0..SESSIONS {
        let lock = broker
            .accept_session(
                &inbox,
                SessionSelector::Named(session_id(session)),
                Duration::from_secs(30),
            )
            .await
            .expect("accept the session");
        let blob = lock.get_state().await.expect("read the session state");
        let state = SessionState::from_bytes(blob.as_deref().unwrap_or_default())
            .expect("a NimBus session state");
        assert!(
            state.blocked_by_event_id.is_none() && state.deferred_count == 0,
            "session {} left {state:?}",
            session_id(session)
        );
        lock.close().await;
    }
    let kinds = records.keys().fold(BTreeMap::new(), |mut m, k| {
        *m.entry(format!("{:?}", k.kind())).or_insert(0u32) += 1;
        m
    });
    eprintln!(
        "host crash test: {ROUNDS} kills, {} events ({kinds:?}), {} acknowledged, {} operator actions",
        records.len(),
        published.len(),
        acted.values().map(BTreeSet::len).sum::<usize>()
    );
}
