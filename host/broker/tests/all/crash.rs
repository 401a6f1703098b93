//! Crash test: a child process publishes and settles under load, printing
//! every acknowledged operation; the parent kills it with SIGKILL at random
//! points, many times, and after each kill reopens the data directory and
//! checks that nothing acknowledged was lost, nothing is duplicated, and
//! per-session order holds.
//!
//! The child is this same test binary re-invoked on `crash_child` with
//! `NIMBUS_CRASH_DIR` set. Power loss cannot be simulated here (SIGKILL
//! leaves the OS page cache intact), so this proves the `os` promise for
//! both levels; the `fsync` promise rests on `fdatasync`'s.

#![allow(clippy::unwrap_used, reason = "test")]

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nimbus_broker::{Broker, BrokerOptions, Durability};
use nimbus_transport::{
    Admin, ErrorKind, Message, SessionLock, SessionSelector, Settlement, SubscriptionPath,
    SubscriptionSettings, TopicSettings, Transport,
};

const TOPIC: &str = "crash";
const SUB: &str = "inbox";
const SESSIONS: usize = 6;
const ROUNDS: u64 = 16;
const SEGMENT_BYTES: u64 = 16 * 1024;

/// (round, counter): the publish order within a session.
type Stamp = (u64, u64);

fn parse_stamp(body: &[u8]) -> (String, Stamp) {
    let text = String::from_utf8_lossy(body);
    let mut parts = text.split(':');
    let session = parts.next().unwrap().to_owned();
    let round = parts.next().unwrap().parse().unwrap();
    let n = parts.next().unwrap().parse().unwrap();
    (session, (round, n))
}

fn durability(round: u64) -> Durability {
    if round.is_multiple_of(2) {
        Durability::Fsync
    } else {
        Durability::Os
    }
}

async fn open(dir: &str, round: u64) -> Broker {
    // Small segments, so the kills also land in rotations and in the
    // compactor's snapshot writes and removals.
    let broker = Broker::open(
        BrokerOptions::new(dir)
            .durability(durability(round))
            .log_segment_bytes(SEGMENT_BYTES),
    )
    .await
    .unwrap();
    if broker.get_topic(TOPIC).await.unwrap().is_none() {
        broker
            .create_topic(TOPIC, TopicSettings::default())
            .await
            .unwrap();
        broker
            .create_subscription(
                &SubscriptionPath::new(TOPIC, SUB),
                SubscriptionSettings::sessions().with_max_delivery_count(1000),
            )
            .await
            .unwrap();
    }
    broker
}

fn emit(line: &str) {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}").unwrap();
    out.flush().unwrap();
}

/// The child: runs until killed. A no-op when run as an ordinary test.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_child() {
    let Ok(dir) = std::env::var("NIMBUS_CRASH_DIR") else {
        return;
    };
    let round: u64 = std::env::var("NIMBUS_CRASH_ROUND")
        .unwrap()
        .parse()
        .unwrap();
    let broker = open(&dir, round).await;
    emit("READY");
    let mut tasks = Vec::new();
    for p in 0..SESSIONS / 2 {
        let broker = broker.clone();
        tasks.push(tokio::spawn(async move {
            let mut n = 0u64;
            loop {
                let mut batch = Vec::new();
                let mut stamps = Vec::new();
                for s in [2 * p, 2 * p + 1] {
                    n += 1;
                    let session = format!("s{s}");
                    let mut m = Message::new(format!("{session}:{round}:{n}").into_bytes());
                    m.session_id = Some(session.clone());
                    batch.push(m);
                    stamps.push(format!("P {session} {round} {n}"));
                }
                broker.publish(TOPIC, batch).await.unwrap();
                for s in stamps {
                    emit(&s);
                }
            }
        }));
    }
    for c in 0..2u64 {
        let broker = broker.clone();
        tasks.push(tokio::spawn(async move {
            let path = SubscriptionPath::new(TOPIC, SUB);
            let mut last: BTreeMap<String, Stamp> = BTreeMap::new();
            let mut k = 0u64;
            loop {
                let lock = match broker
                    .accept_session(
                        &path,
                        SessionSelector::NextAvailable,
                        Duration::from_secs(1),
                    )
                    .await
                {
                    Ok(lock) => lock,
                    Err(e) if e.kind() == ErrorKind::NoSessionAvailable => continue,
                    Err(e) => panic!("accept: {e}"),
                };
                for _ in 0..25 {
                    let Some(m) = lock.receive(Duration::from_millis(50)).await.unwrap() else {
                        break;
                    };
                    let (session, stamp) = parse_stamp(&m.message.body);
                    if let Some(prev) = last.get(&session) {
                        assert!(
                            stamp > *prev,
                            "order violated in {session}: {stamp:?} after {prev:?}"
                        );
                    }
                    k += 1;
                    if (k + c).is_multiple_of(9) {
                        lock.abandon(m, Default::default()).await.unwrap();
                        continue;
                    }
                    let state = format!("{}:{}", stamp.0, stamp.1).into_bytes();
                    lock.settle(Settlement::complete(m).set_session_state(Some(state)))
                        .await
                        .unwrap();
                    last.insert(session.clone(), stamp);
                    emit(&format!("C {session} {} {}", stamp.0, stamp.1));
                }
                lock.close().await;
            }
        }));
    }
    // The tasks loop until the parent kills this process; a task that
    // returns has panicked, which fails the child loudly.
    let (result, _, _) = futures_select_first(tasks).await;
    result.unwrap();
}

async fn futures_select_first(
    tasks: Vec<tokio::task::JoinHandle<()>>,
) -> (Result<(), tokio::task::JoinError>, usize, usize) {
    let count = tasks.len();
    let mut tasks: Vec<_> = tasks.into_iter().map(Box::pin).collect();
    std::future::poll_fn(|cx| {
        for (i, t) in tasks.iter_mut().enumerate() {
            if let std::task::Poll::Ready(r) = t.as_mut().poll(cx) {
                return std::task::Poll::Ready((r, i, count));
            }
        }
        std::task::Poll::Pending
    })
    .await
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_operations_survive_sigkill_at_random_points() {
    if std::env::var("NIMBUS_CRASH_DIR").is_ok() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let dir_str = dir.path().to_str().unwrap().to_owned();
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
        | 1;
    eprintln!("crash test seed {seed}");
    let mut rng = Rng(seed);
    let exe = std::env::current_exe().unwrap();
    let mut published: BTreeSet<(String, Stamp)> = BTreeSet::new();
    let mut completed: BTreeSet<(String, Stamp)> = BTreeSet::new();
    let mut total_ops = 0usize;
    for round in 0..ROUNDS {
        let mut child = Command::new(&exe)
            .args([
                "--exact",
                "crash::crash_child",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("NIMBUS_CRASH_DIR", &dir_str)
            .env("NIMBUS_CRASH_ROUND", round.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
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
        // Wait until the child is up, then let it run a random while.
        let mut ready = false;
        let started = Instant::now();
        let mut lines = Vec::new();
        while !ready {
            let line = rx
                .recv_timeout(Duration::from_secs(60))
                .expect("child starts");
            // libtest prints "test crash_child ... " without a newline first.
            ready = line.ends_with("READY");
            lines.push(line);
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "child never ready"
            );
        }
        let run_for = Duration::from_millis(150 + rng.next() % 600);
        let deadline = Instant::now() + run_for;
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            match rx.recv_timeout(left) {
                Ok(line) => lines.push(line),
                Err(_) => break,
            }
        }
        if let Some(status) = child.try_wait().unwrap() {
            panic!("round {round}: the child died on its own ({status}); see its stderr");
        }
        child.kill().unwrap(); // SIGKILL
        let status = child.wait().unwrap();
        assert!(
            !status.success(),
            "the child ran to completion instead of dying: {status}"
        );
        while let Ok(line) = rx.recv() {
            lines.push(line);
        }
        reader.join().unwrap();
        for line in &lines {
            assert!(!line.contains("panicked"), "child failed: {line}");
            let parts: Vec<&str> = line.split(' ').collect();
            if parts.len() != 4 || !["P", "C"].contains(&parts[0]) {
                continue;
            }
            let key = (
                parts[1].to_owned(),
                (parts[2].parse().unwrap(), parts[3].parse().unwrap()),
            );
            match parts[0] {
                "P" => {
                    published.insert(key);
                }
                "C" => {
                    completed.insert(key);
                }
                _ => {}
            }
            total_ops += 1;
        }
        verify(&dir_str, round, &published, &completed).await;
    }
    eprintln!(
        "crash test: {ROUNDS} kills, {total_ops} acknowledged operations, {} publishes, {} completions",
        published.len(),
        completed.len()
    );
    assert!(
        total_ops > 100,
        "the child did too little work to prove anything"
    );
}

/// Reopens the data dir and checks the acknowledged history against it.
async fn verify(
    dir: &str,
    round: u64,
    published: &BTreeSet<(String, Stamp)>,
    completed: &BTreeSet<(String, Stamp)>,
) {
    let broker = Arc::new(open(dir, round).await);
    let path = SubscriptionPath::new(TOPIC, SUB);
    let mut present: BTreeMap<String, Vec<Stamp>> = BTreeMap::new();
    let mut states: BTreeMap<String, Option<Stamp>> = BTreeMap::new();
    for s in 0..SESSIONS {
        let session = format!("s{s}");
        let lock = broker
            .accept_session(
                &path,
                SessionSelector::Named(session.clone()),
                Duration::ZERO,
            )
            .await
            .unwrap();
        let mut held = Vec::new();
        while let Some(m) = lock.receive(Duration::ZERO).await.unwrap() {
            let (from, stamp) = parse_stamp(&m.message.body);
            assert_eq!(from, session);
            present.entry(session.clone()).or_default().push(stamp);
            held.push(m);
        }
        let state = lock.get_state().await.unwrap().map(|b| {
            let text = String::from_utf8(b).unwrap();
            let (r, n) = text.split_once(':').unwrap();
            (r.parse().unwrap(), n.parse().unwrap())
        });
        states.insert(session, state);
        // Released uncounted when the lock drops.
        drop(held);
    }
    for (session, stamps) in &present {
        let mut sorted = stamps.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(
            &sorted, stamps,
            "round {round}: {session} out of order or duplicated"
        );
    }
    // The consumer completes in session order and records the completed
    // stamp in the session state in the same atomic settlement, so "settled"
    // means "at or before the session state", acknowledged or not.
    for (session, stamp) in published {
        let here = present
            .get(session)
            .is_some_and(|v| v.binary_search(stamp).is_ok());
        let settled = states
            .get(session)
            .copied()
            .flatten()
            .is_some_and(|last| *stamp <= last);
        assert!(
            here != settled,
            "round {round}: acknowledged publish {session} {stamp:?} is {}",
            if here {
                "present although settled"
            } else {
                "lost"
            }
        );
    }
    for (session, stamp) in completed {
        assert!(
            present
                .get(session)
                .is_none_or(|v| v.binary_search(stamp).is_err()),
            "round {round}: acknowledged completion {session} {stamp:?} came back"
        );
        let last = states.get(session).copied().flatten();
        assert!(
            last.is_some_and(|l| l >= *stamp),
            "round {round}: session state of {session} ({last:?}) predates acknowledged completion {stamp:?}"
        );
    }
}
