//! Open tells a torn tail (a commit a crash cut short, never acknowledged)
//! from damage under acknowledged commits, and refuses a log that lost a
//! file of its chain (decision 0130).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use nimbus_broker::{Broker, BrokerOptions, Durability, Finding, OpenError};
use nimbus_transport::{
    Admin, Message, Receiver, SubQueue, SubscriptionPath, SubscriptionSettings, TopicSettings,
    Transport,
};

const EVENTS: usize = 4013;
const PUBLISHERS: usize = 16;

fn options(dir: &Path) -> BrokerOptions {
    BrokerOptions::new(dir).durability(Durability::Fsync)
}

/// Opens a broker on `dir` with topic `t` and subscription `s`, publishes
/// `count` acknowledged messages from concurrent publishers, and closes it.
async fn publish_acknowledged(dir: &Path, count: usize) {
    let broker = Arc::new(Broker::open(options(dir)).await.expect("open"));
    broker
        .create_topic("t", TopicSettings::default())
        .await
        .expect("topic");
    broker
        .create_subscription(
            &SubscriptionPath::new("t", "s"),
            SubscriptionSettings::default(),
        )
        .await
        .expect("subscription");
    let tasks: Vec<_> = (0..PUBLISHERS)
        .map(|p| {
            let broker = Arc::clone(&broker);
            tokio::spawn(async move {
                for n in (p..count).step_by(PUBLISHERS) {
                    broker
                        .publish("t", vec![Message::new(format!("event {n}").into_bytes())])
                        .await
                        .expect("publish");
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("publisher");
    }
    drop(Arc::into_inner(broker).expect("the only handle"));
}

fn log_dir(dir: &Path) -> PathBuf {
    dir.join("broker-log")
}

/// Every file of the log with its bytes.
fn files(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    std::fs::read_dir(log_dir(dir))
        .expect("log dir")
        .map(|e| {
            let path = e.expect("entry").path();
            let bytes = std::fs::read(&path).expect("read");
            (path, bytes)
        })
        .collect()
}

/// The names of the log's files, for polling while the broker runs.
fn file_names(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(log_dir(dir))
        .expect("log dir")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect()
}

/// Waits until the open broker on `dir` has folded what it read into a
/// snapshot, the new segment its only one; the snapshot.
async fn folded_into_a_snapshot(dir: &Path) -> PathBuf {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        // Names only: compaction may remove a file between listing and reading.
        let names = file_names(dir);
        let snapshot = names
            .iter()
            .find(|p| p.extension().is_some_and(|e| e == "snapshot"))
            .cloned();
        let segments = names
            .iter()
            .filter(|p| p.extension().is_some_and(|e| e == "log"))
            .count();
        if let Some(snapshot) = snapshot
            && segments == 1
        {
            return snapshot;
        }
        assert!(std::time::Instant::now() < deadline, "no compaction");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The newest segment holding data, and where its data ends, as the
/// offline check reads it.
fn last_segment_with_data(dir: &Path) -> (PathBuf, u64) {
    let verification = nimbus_broker::verify(dir);
    assert!(verification.is_ok(), "{:?}", verification.outcome);
    verification
        .files
        .iter()
        .rev()
        .find_map(|f| match f.finding {
            Finding::Whole { data_len }
                if data_len > 24 && f.path.extension().is_some_and(|e| e == "log") =>
            {
                Some((f.path.clone(), data_len))
            }
            _ => None,
        })
        .expect("a segment with data")
}

async fn bodies(dir: &Path) -> Vec<String> {
    let broker = Broker::open(options(dir)).await.expect("open");
    let receiver = broker
        .receiver(&SubscriptionPath::new("t", "s"), SubQueue::Main)
        .await
        .expect("receiver");
    let mut seen = Vec::new();
    while let Some(m) = receiver
        .receive(Duration::from_millis(100))
        .await
        .expect("receive")
    {
        seen.push(String::from_utf8_lossy(&m.message.body).into_owned());
        receiver.complete(m).await.expect("complete");
    }
    seen.sort();
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_frame_under_acknowledged_commits_is_refused_by_file_and_offset() {
    let dir = tempfile::tempdir().expect("dir");
    publish_acknowledged(dir.path(), EVENTS).await;
    let (segment, data_len) = last_segment_with_data(dir.path());
    let mut bytes = std::fs::read(&segment).expect("read");
    let middle = usize::try_from(data_len / 2).expect("fits");
    for byte in &mut bytes[middle..middle + 4] {
        *byte ^= 0xa5;
    }
    std::fs::write(&segment, &bytes).expect("damage");
    let before = files(dir.path());

    let Err(error) = Broker::open(options(dir.path())).await else {
        panic!("a log with acknowledged commits after a damaged frame must not open");
    };
    let message = error.to_string();
    let OpenError::DamagedFrame { path, offset, next } = error else {
        panic!("{message}");
    };
    assert_eq!(path, segment.display().to_string());
    // Group commit under concurrent publishers makes frames of any size:
    // the damage lies inside the frame named, and a whole frame follows it.
    assert!(
        offset <= middle as u64 && (middle as u64) < next && next < data_len,
        "{message}"
    );
    assert!(
        message.contains(&path) && message.contains(&format!("byte {offset}")),
        "{message}"
    );
    assert_eq!(
        files(dir.path()),
        before,
        "nothing cut, compacted or removed"
    );

    // The offline check says the same, and changes nothing either.
    let verification = nimbus_broker::verify(dir.path());
    assert!(
        matches!(verification.outcome, Err(OpenError::DamagedFrame { offset: o, .. }) if o == offset),
        "{:?}",
        verification.outcome
    );
    assert_eq!(files(dir.path()), before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_cut_short_at_the_end_of_the_last_segment_is_still_dropped() {
    let dir = tempfile::tempdir().expect("dir");
    publish_acknowledged(dir.path(), 200).await;
    let (segment, data_len) = last_segment_with_data(dir.path());
    // Half of a frame: a length, a checksum, and part of the payload.
    let mut torn = Vec::new();
    torn.extend_from_slice(&300u32.to_le_bytes());
    torn.extend_from_slice(&0xdead_beef_u32.to_le_bytes());
    torn.extend_from_slice(&[7; 150]);
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&segment)
        .expect("open");
    std::os::unix::fs::FileExt::write_all_at(&file, &torn, data_len).expect("tear");
    drop(file);

    let verification = nimbus_broker::verify(dir.path());
    assert!(verification.is_ok(), "{:?}", verification.outcome);
    assert!(
        verification.files.iter().any(|f| f.path == segment
            && f.finding
                == Finding::TornTail {
                    valid_len: data_len
                }),
        "{:?}",
        verification.files
    );
    let mut expected: Vec<String> = (0..200).map(|n| format!("event {n}")).collect();
    expected.sort();
    assert_eq!(
        bodies(dir.path()).await,
        expected,
        "every acknowledged event"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_snapshot_is_refused_by_name() {
    let dir = tempfile::tempdir().expect("dir");
    publish_acknowledged(dir.path(), 50).await;
    // Open folds the segments read into a snapshot in the background.
    let broker = Broker::open(options(dir.path())).await.expect("open");
    let snapshot = folded_into_a_snapshot(dir.path()).await;
    broker
        .publish("t", vec![Message::new(b"after".to_vec())])
        .await
        .expect("publish");
    drop(broker);

    std::fs::remove_file(&snapshot).expect("delete the snapshot");
    let Err(error) = Broker::open(options(dir.path())).await else {
        panic!("a log that lost its snapshot must not open as an empty broker");
    };
    let name = snapshot
        .file_name()
        .and_then(|n| n.to_str())
        .expect("name")
        .to_owned();
    assert!(matches!(error, OpenError::Missing { .. }), "{error}");
    assert!(error.to_string().contains(&name), "{error}");
    assert!(
        !files(dir.path())
            .into_keys()
            .any(|p| p.extension().is_some_and(|e| e == "snapshot")),
        "no new snapshot hides the loss"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_snapshot_is_refused_and_the_files_it_folded_are_kept() {
    let dir = tempfile::tempdir().expect("dir");
    publish_acknowledged(dir.path(), 50).await;
    let broker = Broker::open(options(dir.path())).await.expect("open");
    let snapshot = folded_into_a_snapshot(dir.path()).await;
    drop(broker);
    // An older snapshot, as a crash between writing a snapshot and removing
    // what it folded leaves one: what could rebuild a damaged newer one.
    let older = log_dir(dir.path()).join(format!("{:020}.snapshot", 0));
    std::fs::copy(&snapshot, &older).expect("an older snapshot");
    let mut bytes = std::fs::read(&snapshot).expect("read");
    let middle = bytes.len() / 2;
    for byte in &mut bytes[middle..middle + 4] {
        *byte ^= 0xa5;
    }
    std::fs::write(&snapshot, &bytes).expect("damage");
    let before = files(dir.path());

    let Err(error) = Broker::open(options(dir.path())).await else {
        panic!("a damaged snapshot must not open");
    };
    assert!(
        error.to_string().contains(&snapshot.display().to_string()),
        "{error}"
    );
    assert_eq!(
        files(dir.path()),
        before,
        "nothing removed, older files kept"
    );
}
