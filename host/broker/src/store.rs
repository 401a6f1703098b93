//! The log of record: an append-only file of frames, written by one thread
//! that group-commits.
//!
//! Every mutation the broker acknowledges is a [`StoreOp`]. Callers submit
//! their ops in the order they applied them in memory (they submit while
//! holding the topic locks, so the channel order is the memory order); the
//! writer thread takes everything queued, appends it as ONE frame, syncs
//! (one `fdatasync` at `Durability::Fsync`), then acknowledges every request
//! in the batch. So concurrent operations share a sync, and a crash leaves
//! the log at a prefix of the memory history. Sealed segments are folded
//! into snapshots off the writer's path ([`crate::compact`]). See
//! `docs/broker.md` and decision 0115.

use std::fs::File;
use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use tokio::sync::oneshot;

use crate::commit::{CommitGate, OnCommit};
use crate::compact::Compactor;
use crate::durability::Durability;
use crate::error::{OpenError, StoreError};
use crate::live::LiveState;
use crate::log;
use crate::records::{Snapshot, StoreOp};

/// Most requests folded into one transaction: bounds the latency a request
/// waits behind others when the queue is long.
const MAX_REQUESTS_PER_COMMIT: usize = 8192;

/// The bytes of messages past which the writer takes no more requests into
/// a commit. A frame must stay under the log's 1 GiB limit, or the write
/// fails and poisons the broker; a burst of large messages (a few hundred
/// of the API's 2 MiB) could reach it within the request bound alone. A
/// request is never split; one is refused before it reaches the writer if
/// its messages pass [`DEFAULT_MAX_REQUEST_BYTES`](crate::DEFAULT_MAX_REQUEST_BYTES)
/// (or the lower limit the broker was opened with).
#[cfg(not(test))]
const COMMIT_BYTES: usize = 64 << 20;
/// Small in unit tests, so a test can cross it without a large load.
#[cfg(test)]
const COMMIT_BYTES: usize = 256 << 10;

/// The size at which the writer starts a new segment, unless
/// [`BrokerOptions::log_segment_bytes`](crate::BrokerOptions::log_segment_bytes)
/// says otherwise.
pub(crate) const DEFAULT_SEGMENT_BYTES: u64 = 64 << 20;

/// Where builds before the log (decision 0115) kept the broker's state, a
/// SQLite database in the data directory. None of them was released, and
/// this build does not read it: open refuses a data directory that holds
/// it and no log.
pub(crate) const EARLIER_DATABASE: &str = "broker.sqlite3";

struct Request {
    ops: Vec<StoreOp>,
    /// [`StoreOp::size_hint`] over `ops`, counted by the submitter.
    bytes: usize,
    ack: Option<oneshot::Sender<Result<(), StoreError>>>,
    on_commit: OnCommit,
}

impl Request {
    fn new(
        ops: Vec<StoreOp>,
        ack: Option<oneshot::Sender<Result<(), StoreError>>>,
        on_commit: OnCommit,
    ) -> Request {
        Request {
            bytes: ops.iter().map(StoreOp::size_hint).sum(),
            ops,
            ack,
            on_commit,
        }
    }
}

/// The handle to the writer thread.
pub(crate) struct Store {
    tx: Mutex<Option<mpsc::Sender<Request>>>,
    failure: Arc<Mutex<Option<StoreError>>>,
    /// Set at shutdown: a writer retrying a commit gives up.
    stopping: Arc<AtomicBool>,
    /// Makes writes fail, for tests of a full disk.
    faults: Arc<AtomicBool>,
    thread: Mutex<Option<JoinHandle<()>>>,
    /// Folds sealed segments into snapshots off the writer's path.
    compactor: Mutex<Option<Compactor>>,
    hold: Arc<CommitGate>,
}

/// Waits for the commit of one request.
pub(crate) struct Ack(
    Option<oneshot::Receiver<Result<(), StoreError>>>,
    Option<StoreError>,
);

impl Ack {
    /// Resolves once the request's frame is on disk (or failed).
    pub(crate) async fn committed(self) -> Result<(), StoreError> {
        if let Some(error) = self.1 {
            return Err(error);
        }
        match self.0 {
            None => Ok(()),
            Some(rx) => rx.await.unwrap_or_else(|_| {
                Err(StoreError::Failed("the writer thread stopped".to_owned()))
            }),
        }
    }
}

/// How far ahead of the data a segment's file is allocated.
const PREALLOCATE_BYTES: u64 = 8 << 20;

/// The segment being appended to.
struct ActiveSegment {
    dir: PathBuf,
    file: File,
    number: u64,
    len: u64,
    /// The file's size: data, then zeros allocated ahead of it.
    allocated: u64,
    limit: u64,
    sync: bool,
    /// The frame being built, kept to reuse its allocation.
    frame: Vec<u8>,
    /// The segment this one replaced, until the compactor is told.
    sealed: Option<u64>,
    /// While set, writes fail as on a full disk (tests).
    faults: Arc<AtomicBool>,
}

/// Why a commit was not appended.
#[derive(Debug)]
enum AppendError {
    /// The batch cannot be encoded as a frame: retrying cannot help.
    Encode(std::io::Error),
    /// Creating, writing or syncing the file failed: it may work later.
    Io(std::io::Error),
}

impl ActiveSegment {
    /// Starts segment `number`; `prev_data_len` is the data length of the
    /// segment before it (0 when there is none).
    fn create(
        dir: &Path,
        number: u64,
        prev_data_len: u64,
        continues: bool,
        limit: u64,
        sync: bool,
        faults: Arc<AtomicBool>,
    ) -> std::io::Result<Self> {
        let header = log::Header {
            unsynced_commits: !sync,
            prev_data_len,
            continues,
        };
        let path = log::segment_path(dir, number);
        if faults.load(Ordering::Acquire) {
            return Err(injected_fault());
        }
        let file = log::create(&path, header, sync)?;
        if sync && let Err(error) = log::sync_dir(dir) {
            // Gone again, so a retry can create it.
            drop(file);
            let _ = std::fs::remove_file(&path);
            return Err(error);
        }
        Ok(ActiveSegment {
            dir: dir.to_owned(),
            file,
            number,
            len: log::HEADER_LEN,
            allocated: log::HEADER_LEN,
            limit,
            sync,
            frame: Vec::new(),
            sealed: None,
            faults,
        })
    }

    /// Appends the batch as one frame. A segment sealed to make room is
    /// left in [`ActiveSegment::sealed`].
    fn append(&mut self, batch: &[Request]) -> Result<(), AppendError> {
        if self.len >= self.limit {
            let next = ActiveSegment::create(
                &self.dir,
                self.number + 1,
                self.len,
                true,
                self.limit,
                self.sync,
                Arc::clone(&self.faults),
            )
            .map_err(AppendError::Io)?;
            let old = std::mem::replace(self, next);
            self.sealed = old.sealed.max(Some(old.number));
        }
        // One high-water mark per frame, the batch's largest.
        let high_water = batch
            .iter()
            .flat_map(|r| &r.ops)
            .filter_map(|op| match op {
                StoreOp::SequenceHighWater(n) => Some(*n),
                _ => None,
            })
            .max()
            .map(StoreOp::SequenceHighWater);
        let ops = batch
            .iter()
            .flat_map(|r| &r.ops)
            .filter(|op| !matches!(op, StoreOp::SequenceHighWater(_)))
            .chain(high_water.as_ref());
        let mut frame = std::mem::take(&mut self.frame);
        let written = log::encode_frame(ops, &mut frame)
            .map_err(AppendError::Encode)
            .and_then(|()| self.write(&frame).map_err(AppendError::Io));
        if written.is_ok() {
            self.len += frame.len() as u64;
        }
        self.frame = frame;
        written
    }

    fn write(&mut self, frame: &[u8]) -> std::io::Result<()> {
        if self.faults.load(Ordering::Acquire) {
            // Half a frame reaches the file, as when the disk fills up in
            // the middle of a write.
            self.file.write_all(&frame[..frame.len() / 2])?;
            return Err(injected_fault());
        }
        self.allocate_for(frame.len() as u64);
        self.file.write_all(frame)?;
        if self.sync {
            self.file.sync_data()?;
        }
        Ok(())
    }

    /// Puts the file back to where its data ends, after a failed append:
    /// the write may have left part of a frame, and a failed sync may have
    /// dropped the written pages, so the frame is written whole again.
    fn resync(&mut self) -> std::io::Result<()> {
        self.file.set_len(self.len)?;
        self.file.seek(SeekFrom::Start(self.len))?;
        self.allocated = self.len;
        Ok(())
    }
}

/// The error a write fails with while faults are injected.
fn injected_fault() -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::StorageFull,
        "No space left on device (injected)",
    )
}

impl ActiveSegment {
    /// Extends the file with zeros ahead of a write that would grow it. An
    /// append that grows the file makes every sync write the inode too;
    /// into allocated space it does not, which measured ~25 % less time per
    /// `fdatasync` here (decision 0115). The reader takes a zero frame
    /// header for the end of the data. Where the filesystem cannot
    /// allocate, writes simply grow the file.
    fn allocate_for(&mut self, bytes: u64) {
        let needed = self.len + bytes;
        if needed <= self.allocated {
            return;
        }
        // Up to the segment's size: the frame that crosses it is its last.
        let target = needed.max((self.allocated + PREALLOCATE_BYTES).min(self.limit));
        match rustix::fs::fallocate(
            &self.file,
            rustix::fs::FallocateFlags::empty(),
            self.allocated,
            target - self.allocated,
        ) {
            Ok(()) => self.allocated = target,
            Err(error) => {
                tracing::debug!(%error, "cannot allocate ahead in the broker log");
                self.allocated = u64::MAX;
            }
        }
    }
}

impl Store {
    /// Opens (creating if needed) the log in `dir`, reads it, and starts the
    /// writer on a new segment.
    pub(crate) fn open(
        dir: &Path,
        durability: Durability,
        segment_bytes: u64,
    ) -> Result<(Store, Snapshot), OpenError> {
        std::fs::create_dir_all(dir).map_err(|source| OpenError::DataDir {
            path: dir.display().to_string(),
            source,
        })?;
        let log_dir = dir.join(log::DIR_NAME);
        if !log_dir.is_dir() {
            refuse_earlier_database(dir, &log::Listing::default())?;
        }
        std::fs::create_dir_all(&log_dir).map_err(log_error(&log_dir))?;
        let mut listing = log::list(&log_dir).map_err(log_error(&log_dir))?;
        refuse_earlier_database(dir, &listing)?;
        // Temporary files first: a compaction interrupted by a crash left
        // its temporary snapshot. Files folded into the newest snapshot go
        // only once it has been read whole: they are what could rebuild a
        // damaged one.
        let (temporary, folded): (Vec<PathBuf>, Vec<PathBuf>) = std::mem::take(&mut listing.stale)
            .into_iter()
            .partition(|path| log::is_temporary(path));
        for stale in &temporary {
            std::fs::remove_file(stale).map_err(log_error(stale))?;
        }

        let (live, kept) = read_log(&log_dir, &listing, Repair::Apply, &mut Vec::new())?;
        let snapshot = live.into_snapshot().map_err(|reason| OpenError::Corrupt {
            path: log_dir.display().to_string(),
            reason,
        })?;
        for stale in folded.iter().chain(&listing.stale) {
            std::fs::remove_file(stale).map_err(log_error(stale))?;
        }
        // Whatever was read is on disk before anything new is acknowledged,
        // so a later commit at `fsync` never sits on top of a segment a
        // power cut can still shorten.
        for &(number, _) in &kept {
            let path = log::segment_path(&log_dir, number);
            File::open(&path)
                .and_then(|f| f.sync_all())
                .map_err(log_error(&path))?;
        }
        log::sync_dir(&log_dir).map_err(log_error(&log_dir))?;

        let sync = durability == Durability::Fsync;
        let last = kept.last().map(|&(number, _)| number);
        // Numbered right after what was kept, so the chain has no hole a
        // later open would take for a lost segment (decision 0130): the
        // files above it, if any, were removed while reading.
        let newest = last.or(listing.snapshot).unwrap_or(0);
        let next = newest.checked_add(1).ok_or_else(|| OpenError::Corrupt {
            path: log_dir.display().to_string(),
            reason: format!("a file of the log is numbered {newest}, the last number there is"),
        })?;
        let prev_data_len = kept.last().map_or(0, |&(_, len)| len);
        let continues = last.is_some() || listing.snapshot.is_some();
        let faults = Arc::new(AtomicBool::new(false));
        let active = ActiveSegment::create(
            &log_dir,
            next,
            prev_data_len,
            continues,
            segment_bytes.max(1),
            sync,
            Arc::clone(&faults),
        )
        .map_err(log_error(&log::segment_path(&log_dir, next)))?;
        let compactor = Compactor::start(log_dir.clone()).map_err(OpenError::Thread)?;
        let compactor_handle = compactor.handle();
        if let Some(sealed) = last {
            compactor_handle.sealed(sealed);
        }
        let (tx, rx) = mpsc::channel();
        let failure = Arc::new(Mutex::new(None));
        let thread_failure = Arc::clone(&failure);
        let hold = Arc::new(CommitGate::default());
        let thread_hold = Arc::clone(&hold);
        let stopping = Arc::new(AtomicBool::new(false));
        let writer = Writer {
            failure: thread_failure,
            hold: thread_hold,
            compactor: compactor_handle,
            stopping: Arc::clone(&stopping),
        };
        let thread = std::thread::Builder::new()
            .name("nimbus-broker-writer".to_owned())
            .spawn(move || writer_loop(active, rx, &writer))
            .map_err(OpenError::Thread)?;
        Ok((
            Store {
                tx: Mutex::new(Some(tx)),
                failure,
                stopping,
                faults,
                thread: Mutex::new(Some(thread)),
                compactor: Mutex::new(Some(compactor)),
                hold,
            },
            snapshot,
        ))
    }

    /// The gate tests hold to keep commits waiting.
    pub(crate) fn commit_gate(&self) -> &Arc<CommitGate> {
        &self.hold
    }

    /// Why the store cannot commit now, if it cannot: poisoned for good,
    /// or retrying a write that failed.
    pub(crate) fn failure(&self) -> Option<StoreError> {
        // Checked on every operation: a plain lock of an uncontended mutex
        // that is almost always `None`.
        self.failure
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// While `failing`, every write of the log fails as on a full disk.
    pub(crate) fn inject_write_failures(&self, failing: bool) {
        self.faults.store(failing, Ordering::Release);
    }

    /// Queues `ops` for the next commit. Call while holding the locks under
    /// which the ops were applied in memory, so the log order is the memory
    /// order. Await the returned [`Ack`] after releasing them. `on_commit`
    /// runs after the commit, before the acknowledgement.
    pub(crate) fn submit(&self, ops: Vec<StoreOp>, on_commit: OnCommit) -> Ack {
        if ops.is_empty() {
            on_commit.committed();
            return Ack(None, None);
        }
        let (ack, rx) = oneshot::channel();
        let guard = self.tx.lock().unwrap_or_else(PoisonError::into_inner);
        let sent = guard
            .as_ref()
            .map(|tx| tx.send(Request::new(ops, Some(ack), on_commit)));
        match sent {
            Some(Ok(())) => Ack(Some(rx), None),
            _ => Ack(
                None,
                Some(
                    self.failure()
                        .unwrap_or_else(|| StoreError::Failed("the broker is shut down".into())),
                ),
            ),
        }
    }

    /// Queues `ops` without waiting for their commit (timer work, whose
    /// loss in a crash is harmless: the timer fires again after a restart).
    pub(crate) fn submit_detached(&self, ops: Vec<StoreOp>, on_commit: OnCommit) {
        if ops.is_empty() {
            on_commit.committed();
            return;
        }
        let guard = self.tx.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(tx) = guard.as_ref() {
            // A closed channel means shutdown; the failure is reported to
            // every acknowledged caller instead.
            let _ = tx.send(Request::new(ops, None, on_commit));
        }
    }

    /// Stops the writer after it committed everything queued (or gave up
    /// retrying a commit that cannot be written).
    pub(crate) fn shutdown(&self) {
        self.stopping.store(true, Ordering::Release);
        self.tx
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        let thread = self
            .thread
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(thread) = thread
            && thread.join().is_err()
        {
            tracing::error!("the broker writer thread panicked");
        }
        // After the writer, which may seal one more segment on its way out;
        // a compaction in progress is abandoned, its temporary file removed.
        drop(
            self.compactor
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take(),
        );
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// An I/O error on a file or directory of the log, naming it.
fn log_error(path: &Path) -> impl FnOnce(std::io::Error) -> OpenError {
    let path = path.display().to_string();
    move |source| OpenError::Log { path, source }
}

fn read_error(path: &Path) -> impl FnOnce(log::ReadError) -> OpenError {
    let path = path.display().to_string();
    move |error| match error {
        log::ReadError::Io(source) => OpenError::Log { path, source },
        log::ReadError::Corrupt(reason) => OpenError::Corrupt { path, reason },
    }
}

/// Reads one file of the log into `apply`, naming the file in any error.
fn read_file(
    path: &Path,
    apply: &mut impl FnMut(StoreOp) -> Result<(), String>,
) -> Result<log::End, OpenError> {
    log::read(path, apply).map_err(read_error(path))
}

/// Whether reading the log repairs what a crash left (open) or only
/// reports it (`nimbus broker verify`, which changes nothing).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Repair {
    Apply,
    Report,
}

/// What reading one file of the log found.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct FileReport {
    /// The file.
    pub path: PathBuf,
    /// What it holds.
    pub finding: Finding,
}

/// The state of one file of the log.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Finding {
    /// Whole frames up to `data_len`, then nothing or allocated space.
    Whole {
        /// Where the data ends.
        data_len: u64,
    },
    /// The last segment ends in a frame a crash cut short, at `valid_len`,
    /// with nothing whole after it: the commit was never acknowledged, and
    /// open cuts it off.
    TornTail {
        /// Where the whole frames end.
        valid_len: u64,
    },
    /// Written at `os`, the segment has a gap a power cut can leave at
    /// `valid_len`: open keeps what precedes it.
    GapAtOs {
        /// Where the whole frames end.
        valid_len: u64,
    },
    /// Commits after a gap at `os` in an earlier segment: open removes it.
    AfterGap,
    /// A segment created just before a crash, without a header: open
    /// removes it.
    NoHeader,
    /// Folded into a newer snapshot, or a temporary file: open removes it.
    Redundant,
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Finding::Whole { data_len } => write!(f, "ok, {data_len} bytes of data"),
            Finding::TornTail { valid_len } => write!(
                f,
                "torn tail at byte {valid_len}: a commit a crash cut short, never acknowledged; open cuts it off"
            ),
            Finding::GapAtOs { valid_len } => write!(
                f,
                "gap at byte {valid_len} (written at durability os, a power cut can leave it); open keeps the data before it"
            ),
            Finding::AfterGap => f.write_str("after a gap at durability os; open removes it"),
            Finding::NoHeader => f.write_str(
                "no header (created just before a crash, holds no commit); open removes it",
            ),
            Finding::Redundant => {
                f.write_str("redundant (folded into a newer snapshot); open removes it")
            }
        }
    }
}

/// Reads the snapshot and the segments after it into a state, repairing
/// what a crash left or reporting it. Returns the segments kept, with
/// their data lengths.
pub(crate) fn read_log(
    log_dir: &Path,
    listing: &log::Listing,
    repair: Repair,
    reports: &mut Vec<FileReport>,
) -> Result<(LiveState, Vec<(u64, u64)>), OpenError> {
    let mut live = LiveState::default();
    let mut apply = |op| {
        live.apply(op);
        Ok(())
    };
    if let Some(number) = listing.snapshot {
        let path = log::snapshot_path(log_dir, number);
        match read_file(&path, &mut apply)? {
            log::End::Clean { data_len } => reports.push(FileReport {
                path,
                finding: Finding::Whole { data_len },
            }),
            log::End::Torn { valid_len } => {
                return Err(OpenError::Corrupt {
                    path: path.display().to_string(),
                    reason: format!("snapshot damaged at byte {valid_len}"),
                });
            }
        }
    }
    let kept = read_segments(log_dir, listing, &mut apply, repair, reports)?;
    Ok((live, kept))
}

/// Reads the segments after the snapshot in order into `apply`, and repairs
/// what a crash or a power cut left (docs/broker.md, "Open"), or with
/// [`Repair::Report`] says what it would repair. Returns the segments kept,
/// with their data lengths.
fn read_segments(
    log_dir: &Path,
    listing: &log::Listing,
    apply: &mut impl FnMut(StoreOp) -> Result<(), String>,
    repair: Repair,
    reports: &mut Vec<FileReport>,
) -> Result<Vec<(u64, u64)>, OpenError> {
    let numbers = &listing.segments;
    // (number, data length, written at `os`)
    let mut kept: Vec<(u64, u64, bool)> = Vec::new();
    // The newest file of the chain so far, header-less segments included.
    let mut chain_end = listing.snapshot;
    for (i, &number) in numbers.iter().enumerate() {
        let path = log::segment_path(log_dir, number);
        let Some(header) = log::read_header(&path).map_err(read_error(&path))? else {
            let later = &numbers[i..];
            if later.len() > 1 {
                // A crash leaves a header-less segment only at the end: one
                // with segments after it lost its header afterwards. At `os`
                // a power cut can do that, and what follows is dropped as
                // after any gap; otherwise it is damage.
                let reason = format!(
                    "segment {number} has no header, but segments follow it: damage, not a \
                     segment a crash cut short"
                );
                let Some(&(prev, _, prev_unsynced)) = kept.last() else {
                    return Err(OpenError::Corrupt {
                        path: path.display().to_string(),
                        reason,
                    });
                };
                drop_after_gap(
                    log_dir,
                    &log::segment_path(log_dir, prev),
                    prev_unsynced,
                    later,
                    reason,
                    repair,
                    reports,
                )?;
                break;
            }
            if repair == Repair::Apply {
                tracing::warn!(segment = %path.display(), "removing a segment created just before a crash; it holds no commit");
                std::fs::remove_file(&path).map_err(log_error(&path))?;
            }
            reports.push(FileReport {
                path,
                finding: Finding::NoHeader,
            });
            chain_end = Some(number);
            continue;
        };
        check_predecessor(log_dir, number, header, chain_end)?;
        chain_end = Some(number);
        if let Some(&(prev, prev_len, prev_unsynced)) = kept.last()
            && header.prev_data_len > prev_len
        {
            // The segment before ended further on when this one started:
            // a power cut took its end.
            let prev_path = log::segment_path(log_dir, prev);
            let reason = format!(
                "ends at byte {prev_len}, but segment {number} was started after byte {}",
                header.prev_data_len
            );
            drop_after_gap(
                log_dir,
                &prev_path,
                prev_unsynced,
                &numbers[i..],
                reason,
                repair,
                reports,
            )?;
            break;
        }
        match read_file(&path, apply)? {
            log::End::Clean { data_len } => {
                kept.push((number, data_len, header.unsynced_commits));
                reports.push(FileReport {
                    path,
                    finding: Finding::Whole { data_len },
                });
            }
            log::End::Torn { valid_len } => {
                // A whole frame after the damage: commits were written
                // after it, so at `fsync` (each commit synced before the
                // next) it is not a crash's torn tail (decision 0130).
                if !header.unsynced_commits
                    && let Some(next) =
                        log::next_whole_frame(&path, valid_len).map_err(log_error(&path))?
                {
                    return Err(OpenError::DamagedFrame {
                        path: path.display().to_string(),
                        offset: valid_len,
                        next,
                    });
                }
                let later = &numbers[i + 1..];
                // A damaged segment under later synced ones is refused just
                // below, by name: no finding of what open would repair.
                let finding = if later.is_empty() {
                    Some(Finding::TornTail { valid_len })
                } else if header.unsynced_commits {
                    Some(Finding::GapAtOs { valid_len })
                } else {
                    None
                };
                reports.extend(finding.map(|finding| FileReport {
                    path: path.clone(),
                    finding,
                }));
                let reason = format!("segment damaged at byte {valid_len}, with segments after it");
                drop_after_gap(
                    log_dir,
                    &path,
                    header.unsynced_commits || later.is_empty(),
                    later,
                    reason,
                    repair,
                    reports,
                )?;
                if repair == Repair::Apply {
                    // The commit a crash cut short, never acknowledged; or,
                    // at `os`, the first commit a power cut lost.
                    tracing::warn!(segment = %path.display(), valid_len, later_segments_dropped = later.len(), "dropping the torn end of the broker log");
                    let file = std::fs::OpenOptions::new()
                        .write(true)
                        .open(&path)
                        .map_err(log_error(&path))?;
                    file.set_len(valid_len).map_err(log_error(&path))?;
                    file.sync_all().map_err(log_error(&path))?;
                }
                kept.push((number, valid_len, header.unsynced_commits));
                break;
            }
        }
    }
    Ok(kept
        .into_iter()
        .map(|(number, len, _)| (number, len))
        .collect())
}

/// Refuses segment `number` when its header says history came before it
/// and the log does not hold that history: a deleted snapshot or segment
/// would otherwise open as a broker that silently lost it (decision 0130).
/// `chain_end` is the newest file before it: a segment, or the snapshot.
fn check_predecessor(
    log_dir: &Path,
    number: u64,
    header: log::Header,
    chain_end: Option<u64>,
) -> Result<(), OpenError> {
    let expected = number.saturating_sub(1);
    // Files of earlier builds carry no flag: only "there was one" is known.
    let missing = if header.continues {
        chain_end != Some(expected)
    } else {
        header.prev_data_len > 0 && chain_end.is_none()
    };
    if !missing {
        return Ok(());
    }
    let file_name = |path: PathBuf| {
        path.file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned())
    };
    let what = match chain_end {
        None => format!(
            "the snapshot {} (or the segment {}) that held the history before it",
            file_name(log::snapshot_path(log_dir, expected)),
            file_name(log::segment_path(log_dir, expected)),
        ),
        Some(end) if end.checked_add(1) == Some(expected) => {
            format!(
                "the segment {}",
                file_name(log::segment_path(log_dir, expected))
            )
        }
        Some(end) => format!(
            "the segments {} to {}",
            file_name(log::segment_path(log_dir, end.saturating_add(1))),
            file_name(log::segment_path(log_dir, expected)),
        ),
    };
    Err(OpenError::Missing {
        path: log::segment_path(log_dir, number).display().to_string(),
        missing: what,
    })
}

/// A gap in the segment at `gap_in`: the segments `later` hold commits made
/// after it. Dropping them keeps a prefix of the history, which is what a
/// power cut at `os` may cost (`droppable`); a gap where every commit was
/// synced, or under a later segment whose commits were, is damage.
fn drop_after_gap(
    log_dir: &Path,
    gap_in: &Path,
    droppable: bool,
    later: &[u64],
    reason: String,
    repair: Repair,
    reports: &mut Vec<FileReport>,
) -> Result<(), OpenError> {
    let corrupt = || OpenError::Corrupt {
        path: gap_in.display().to_string(),
        reason: reason.clone(),
    };
    if !droppable {
        return Err(corrupt());
    }
    for &number in later {
        let path = log::segment_path(log_dir, number);
        if log::read_header(&path)
            .map_err(read_error(&path))?
            .is_some_and(|h| !h.unsynced_commits)
        {
            return Err(corrupt());
        }
    }
    reports.extend(later.iter().map(|&number| FileReport {
        path: log::segment_path(log_dir, number),
        finding: Finding::AfterGap,
    }));
    if repair == Repair::Report {
        return Ok(());
    }
    // Newest first, and the directory synced before the cut: a crash in
    // between must not leave later segments on top of a shortened one.
    for &number in later.iter().rev() {
        let path = log::segment_path(log_dir, number);
        std::fs::remove_file(&path).map_err(log_error(&path))?;
    }
    if !later.is_empty() {
        log::sync_dir(log_dir).map_err(log_error(log_dir))?;
    }
    Ok(())
}

/// Refuses a data directory that holds the database of a build before the
/// log and, in `listing`, no log: this build does not read that database,
/// and an empty broker started beside it would look like the data was lost
/// (decision 0115).
pub(crate) fn refuse_earlier_database(dir: &Path, listing: &log::Listing) -> Result<(), OpenError> {
    let earlier = dir.join(EARLIER_DATABASE);
    if listing.snapshot.is_none() && listing.segments.is_empty() && earlier.exists() {
        return Err(OpenError::EarlierDatabase {
            path: earlier.display().to_string(),
        });
    }
    Ok(())
}

/// What the writer thread shares with the store.
struct Writer {
    failure: Arc<Mutex<Option<StoreError>>>,
    hold: Arc<CommitGate>,
    compactor: crate::compact::Handle,
    stopping: Arc<AtomicBool>,
}

/// The first pause before retrying a write that failed; it doubles up to
/// [`RETRY_MAX`].
const RETRY_FIRST: Duration = Duration::from_millis(20);
const RETRY_MAX: Duration = Duration::from_secs(2);

impl Writer {
    fn set_failure(&self, error: Option<StoreError>) {
        *self.failure.lock().unwrap_or_else(PoisonError::into_inner) = error;
    }

    /// Appends `batch`; when the file cannot be written, marks the store
    /// unwritable (changes are refused, the host's health says why) and
    /// retries with a growing pause until it can, or until shutdown
    /// (decision 0130). The batch's ops are in memory already, so they
    /// must reach the log before anything after them: the commit is held,
    /// not dropped.
    fn append(&self, segment: &mut ActiveSegment, batch: &[Request]) -> Result<(), StoreError> {
        let mut error = match segment.append(batch) {
            Ok(()) => return Ok(()),
            Err(AppendError::Encode(e)) => return Err(self.poison(&e)),
            Err(AppendError::Io(e)) => e,
        };
        let mut pause = RETRY_FIRST;
        let mut attempts = 1u32;
        tracing::error!(%error, "cannot write the broker log; refusing changes and retrying");
        loop {
            self.set_failure(Some(StoreError::Unwritable(error.to_string())));
            if !self.pause(pause) {
                return Err(self.poison(&format!(
                    "shut down while the log could not be written ({error})"
                )));
            }
            pause = (pause * 2).min(RETRY_MAX);
            attempts += 1;
            let retried = segment
                .resync()
                .map_err(AppendError::Io)
                .and_then(|()| segment.append(batch));
            match retried {
                Ok(()) => {
                    self.set_failure(None);
                    tracing::warn!(attempts, "the broker log is writable again");
                    return Ok(());
                }
                Err(AppendError::Encode(e)) => return Err(self.poison(&e)),
                Err(AppendError::Io(e)) => {
                    tracing::debug!(error = %e, attempts, "the broker log is still not writable");
                    error = e;
                }
            }
        }
    }

    /// Sleeps `pause`; false when shutdown began meanwhile.
    fn pause(&self, pause: Duration) -> bool {
        const STEP: Duration = Duration::from_millis(10);
        let until = std::time::Instant::now() + pause;
        while !self.stopping.load(Ordering::Acquire) {
            let now = std::time::Instant::now();
            if now >= until {
                return true;
            }
            std::thread::sleep(STEP.min(until - now));
        }
        false
    }

    fn poison(&self, cause: &dyn std::fmt::Display) -> StoreError {
        let message = format!("writing the broker log failed: {cause}");
        tracing::error!(error = %message, "the broker is poisoned");
        let error = StoreError::Failed(message);
        self.set_failure(Some(error.clone()));
        error
    }
}

fn writer_loop(mut segment: ActiveSegment, rx: mpsc::Receiver<Request>, writer: &Writer) {
    let mut batch: Vec<Request> = Vec::new();
    while let Ok(first) = rx.recv() {
        let mut bytes = first.bytes;
        batch.push(first);
        // Give the submitters a turn before taking the batch. On a busy
        // machine the threads that are about to submit are runnable but not
        // running; one yield lets them queue their requests, so this commit
        // carries them and its fixed cost (a write and a sync) is shared by
        // more requests (decision 0102). An idle machine has nothing to run,
        // so the yield returns at once and adds no latency.
        std::thread::yield_now();
        writer.hold.wait_open();
        while batch.len() < MAX_REQUESTS_PER_COMMIT && bytes < COMMIT_BYTES {
            match rx.try_recv() {
                Ok(next) => {
                    bytes += next.bytes;
                    batch.push(next);
                }
                Err(_) => break,
            }
        }
        let poisoned = writer
            .failure
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let result = match poisoned {
            Some(error) => Err(error),
            None => writer.append(&mut segment, &batch),
        };
        if let Some(sealed) = segment.sealed.take() {
            writer.compactor.sealed(sealed);
        }
        for request in batch.drain(..) {
            // A failed commit leaves its messages undeliverable: memory is
            // ahead of the log, and the broker is poisoned until reopened.
            if result.is_ok() {
                request.on_commit.committed();
            }
            if let Some(ack) = request.ack {
                // The caller may have given up waiting; nothing to do then.
                let _ = ack.send(result.clone());
            }
        }
    }
    // At `os`, a clean shutdown still leaves everything on disk: the sealed
    // segments not yet folded into a snapshot, the active one, and their
    // directory entries.
    if !segment.sync
        && let Err(error) = sync_segments(&segment.dir, segment.number)
    {
        tracing::warn!(%error, "syncing the broker log at shutdown failed");
    }
    if let Err(error) = segment.file.sync_data() {
        tracing::warn!(%error, "syncing the broker log at shutdown failed");
    }
}

/// Syncs every segment up to `upto` still in `dir`, then `dir`. A directory
/// removed under the broker (a bench's or a test's temporary one) has
/// nothing left to keep.
fn sync_segments(dir: &Path, upto: u64) -> std::io::Result<()> {
    let gone = |e: &std::io::Error| e.kind() == std::io::ErrorKind::NotFound;
    let listing = match log::list(dir) {
        Ok(listing) => listing,
        Err(e) if gone(&e) => return Ok(()),
        Err(e) => return Err(e),
    };
    for number in listing.segments {
        if number > upto {
            continue;
        }
        match File::open(log::segment_path(dir, number)) {
            Ok(file) => file.sync_data()?,
            // Folded into a snapshot and removed meanwhile.
            Err(e) if gone(&e) => {}
            Err(e) => return Err(e),
        }
    }
    match log::sync_dir(dir) {
        Err(e) if gone(&e) => Ok(()),
        other => other,
    }
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "tests")]
mod tests {
    use std::time::UNIX_EPOCH;

    use nimbus_transport::Message;

    use super::*;
    use crate::records::EntryRow;

    fn row(id: i64) -> EntryRow {
        EntryRow {
            id,
            topic: "t".into(),
            subscription: "s".into(),
            dead_letter: false,
            seq: id,
            enqueued: UNIX_EPOCH,
            expires: None,
            failures: 0,
            dead_letter_reason: None,
            dead_letter_description: None,
            message: crate::codec::encode(&Message::new(vec![7; 300])),
        }
    }

    fn ids(dir: &Path) -> Vec<i64> {
        let (store, snapshot) = Store::open(dir, Durability::Fsync, DEFAULT_SEGMENT_BYTES).unwrap();
        store.shutdown();
        snapshot.entries.iter().map(|e| e.row.id).collect()
    }

    #[test]
    fn every_request_of_concurrent_submitters_is_acknowledged_and_durable() {
        let dir = tempfile::tempdir().unwrap();
        let (store, _) = Store::open(dir.path(), Durability::Fsync, DEFAULT_SEGMENT_BYTES).unwrap();
        let store = Arc::new(store);
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .build()
            .unwrap();
        runtime.block_on(async {
            let tasks: Vec<_> = (0..8i64)
                .map(|submitter| {
                    let store = Arc::clone(&store);
                    tokio::spawn(async move {
                        for n in 0..50 {
                            let id = submitter * 1000 + n;
                            store
                                .submit(
                                    vec![StoreOp::InsertEntry(Box::new(row(id)))],
                                    OnCommit::default(),
                                )
                                .committed()
                                .await
                                .unwrap();
                        }
                    })
                })
                .collect();
            for task in tasks {
                task.await.unwrap();
            }
        });
        store.shutdown();
        let expected: Vec<i64> = (0..8i64)
            .flat_map(|s| (0..50).map(move |n| s * 1000 + n))
            .collect();
        assert_eq!(ids(dir.path()), expected);
    }

    /// A burst of large messages is committed in frames of about
    /// `COMMIT_BYTES` each (256 KiB in unit tests), not in one frame that
    /// could outgrow the log's limit and poison the broker.
    #[test]
    fn a_burst_of_large_messages_is_split_across_commits() {
        let dir = tempfile::tempdir().unwrap();
        let (store, _) = Store::open(dir.path(), Durability::Fsync, DEFAULT_SEGMENT_BYTES).unwrap();
        let gate = Arc::clone(store.commit_gate());
        gate.hold();
        // Each request's high-water op marks its frame: a frame keeps one,
        // its batch's largest.
        let large = |id: i64| {
            let mut row = row(id);
            row.message = vec![1; 100 << 10];
            vec![
                StoreOp::InsertEntry(Box::new(row)),
                StoreOp::SequenceHighWater(id),
            ]
        };
        let acks: Vec<Ack> = (1..=8)
            .map(|id| store.submit(large(id), OnCommit::default()))
            .collect();
        gate.release();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        runtime.block_on(async {
            for ack in acks {
                ack.committed().await.unwrap();
            }
        });
        store.shutdown();
        let log_dir = dir.path().join(log::DIR_NAME);
        let mut frame_marks = Vec::new();
        for number in log::list(&log_dir).unwrap().segments {
            log::read(&log::segment_path(&log_dir, number), |op| {
                if let StoreOp::SequenceHighWater(n) = op {
                    frame_marks.push(n);
                }
                Ok(())
            })
            .unwrap();
        }
        // 100 KiB each: the third request takes a commit past 256 KiB.
        assert_eq!(frame_marks, [3, 6, 8]);
        assert_eq!(ids(dir.path()), (1..=8).collect::<Vec<i64>>());
    }

    #[test]
    fn a_commit_torn_by_a_crash_is_dropped_at_open_and_the_log_goes_on() {
        let dir = tempfile::tempdir().unwrap();
        let (store, _) = Store::open(dir.path(), Durability::Fsync, DEFAULT_SEGMENT_BYTES).unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let insert = |store: &Store, id| {
            runtime
                .block_on(
                    store
                        .submit(
                            vec![StoreOp::InsertEntry(Box::new(row(id)))],
                            OnCommit::default(),
                        )
                        .committed(),
                )
                .unwrap();
        };
        insert(&store, 1);
        insert(&store, 2);
        store.shutdown();
        // A crash in the middle of appending the next commit.
        let log_dir = dir.path().join(log::DIR_NAME);
        let listing = log::list(&log_dir).unwrap();
        let last = log::segment_path(&log_dir, *listing.segments.last().unwrap());
        let log::End::Clean { data_len } = log::read(&last, |_| Ok(())).unwrap() else {
            panic!("a clean shutdown leaves whole frames");
        };
        let mut frame = Vec::new();
        log::encode_frame(&[StoreOp::InsertEntry(Box::new(row(3)))], &mut frame).unwrap();
        let file = std::fs::OpenOptions::new().write(true).open(&last).unwrap();
        rustix::io::pwrite(&file, &frame[..frame.len() / 2], data_len).unwrap();
        drop(file);

        assert_eq!(ids(dir.path()), vec![1, 2], "the torn commit is not there");
        // Cut off, or this segment, no longer the last, would be refused.
        let (store, _) = Store::open(dir.path(), Durability::Fsync, DEFAULT_SEGMENT_BYTES).unwrap();
        insert(&store, 4);
        store.shutdown();
        assert_eq!(ids(dir.path()), vec![1, 2, 4]);
    }

    /// Two segments of one entry each, the first followed by junk: a torn
    /// sealed segment. Returns the first segment's path.
    fn torn_sealed_segment(log_dir: &Path, unsynced_commits: bool) -> PathBuf {
        let first = segment(log_dir, 1, header(unsynced_commits, 0), &[1]);
        segment(log_dir, 2, header(unsynced_commits, 0), &[2]);
        append_junk(&first);
        first
    }

    fn append_junk(path: &Path) {
        std::fs::OpenOptions::new()
            .append(true)
            .open(path)
            .unwrap()
            .write_all(b"junk")
            .unwrap();
    }

    #[test]
    fn a_damaged_segment_with_segments_after_it_is_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let first = torn_sealed_segment(&dir.path().join(log::DIR_NAME), false);
        let Err(error) = Store::open(dir.path(), Durability::Fsync, DEFAULT_SEGMENT_BYTES) else {
            panic!("refused");
        };
        assert!(matches!(error, OpenError::Corrupt { .. }), "{error}");
        assert!(
            error.to_string().contains(&first.display().to_string()),
            "{error}"
        );
    }

    #[test]
    fn a_gap_in_a_segment_written_at_os_ends_the_log_there() {
        // After a power cut at `os`, a later segment's pages may have reached
        // the disk before an earlier one's: what is kept is the prefix.
        let dir = tempfile::tempdir().unwrap();
        let log_dir = dir.path().join(log::DIR_NAME);
        torn_sealed_segment(&log_dir, true);
        assert_eq!(ids(dir.path()), vec![1]);
        // Segment 2 is the next open's own now (decision 0130 numbers it
        // right after what was kept).
        assert_eq!(
            ids(dir.path()),
            vec![1],
            "the commits after the gap are dropped, not replayed later"
        );
    }

    /// Writes segment `number` holding one entry per id.
    fn segment(log_dir: &Path, number: u64, header: log::Header, ids: &[i64]) -> PathBuf {
        std::fs::create_dir_all(log_dir).unwrap();
        let path = log::segment_path(log_dir, number);
        let mut file = log::create(&path, header, false).unwrap();
        let mut frame = Vec::new();
        for &id in ids {
            log::encode_frame(&[StoreOp::InsertEntry(Box::new(row(id)))], &mut frame).unwrap();
            file.write_all(&frame).unwrap();
        }
        path
    }

    fn header(unsynced_commits: bool, prev_data_len: u64) -> log::Header {
        log::Header {
            unsynced_commits,
            prev_data_len,
            continues: false,
        }
    }

    /// The header of a segment that continues the one before it.
    fn continuing(unsynced_commits: bool) -> log::Header {
        log::Header {
            continues: true,
            ..header(unsynced_commits, 0)
        }
    }

    #[test]
    fn a_data_directory_holding_only_an_earlier_builds_database_is_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let database = dir.path().join(EARLIER_DATABASE);
        std::fs::write(&database, b"SQLite format 3\0").unwrap();
        for _ in 0..2 {
            let Err(error) = Store::open(dir.path(), Durability::Fsync, DEFAULT_SEGMENT_BYTES)
            else {
                panic!("refused");
            };
            assert!(
                matches!(error, OpenError::EarlierDatabase { .. }),
                "{error}"
            );
            let message = error.to_string();
            assert!(
                message.contains(&database.display().to_string()),
                "{message}"
            );
            assert!(message.contains("this build does not read"), "{message}");
            let verification = crate::verify(dir.path());
            assert!(
                matches!(verification.outcome, Err(OpenError::EarlierDatabase { .. })),
                "{:?}",
                verification.outcome
            );
        }
        assert!(database.exists(), "the database is left where it was");
        assert!(
            !dir.path().join(log::DIR_NAME).exists(),
            "nothing is created"
        );

        // Beside a log, the log is what is read.
        std::fs::remove_file(&database).unwrap();
        let (store, _) = Store::open(dir.path(), Durability::Fsync, DEFAULT_SEGMENT_BYTES).unwrap();
        store.shutdown();
        std::fs::write(&database, b"SQLite format 3\0").unwrap();
        assert_eq!(ids(dir.path()), Vec::<i64>::new());
    }

    #[test]
    fn a_segment_missing_from_the_middle_of_the_chain_is_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let log_dir = dir.path().join(log::DIR_NAME);
        let continues = continuing(false);
        segment(&log_dir, 1, header(false, 0), &[1]);
        segment(&log_dir, 2, continues, &[2]);
        segment(&log_dir, 3, continues, &[3]);
        assert_eq!(ids(dir.path()), vec![1, 2, 3], "a whole chain opens");
        // That open started segment 4 and folds the rest into a snapshot
        // in the background; start again from the three segments.
        std::fs::remove_dir_all(&log_dir).unwrap();
        segment(&log_dir, 1, header(false, 0), &[1]);
        segment(&log_dir, 3, continues, &[3]);
        let Err(error) = Store::open(dir.path(), Durability::Fsync, DEFAULT_SEGMENT_BYTES) else {
            panic!("refused");
        };
        assert!(matches!(error, OpenError::Missing { .. }), "{error}");
        assert!(
            error.to_string().contains(&format!("{:020}.log", 2)),
            "{error}"
        );
    }

    #[test]
    fn a_segment_after_one_removed_for_its_missing_header_takes_its_number() {
        // A later open must not take the hole for a lost segment.
        let dir = tempfile::tempdir().unwrap();
        let log_dir = dir.path().join(log::DIR_NAME);
        segment(&log_dir, 1, header(false, 0), &[1]);
        std::fs::write(log::segment_path(&log_dir, 2), b"").unwrap();
        let (store, _) = Store::open(dir.path(), Durability::Fsync, DEFAULT_SEGMENT_BYTES).unwrap();
        store.shutdown();
        assert_eq!(
            log::read_header(&log::segment_path(&log_dir, 2))
                .unwrap()
                .map(|h| h.continues),
            Some(true)
        );
        assert_eq!(ids(dir.path()), vec![1]);
    }

    #[test]
    fn a_segment_that_lost_its_header_under_later_segments_is_refused_and_kept() {
        let dir = tempfile::tempdir().unwrap();
        let log_dir = dir.path().join(log::DIR_NAME);
        let continues = continuing(false);
        segment(&log_dir, 1, header(false, 0), &[1]);
        let second = segment(&log_dir, 2, continues, &[2]);
        segment(&log_dir, 3, continues, &[3]);
        let mut bytes = std::fs::read(&second).unwrap();
        bytes[..log::HEADER_LEN as usize].fill(0);
        std::fs::write(&second, &bytes).unwrap();
        let Err(error) = Store::open(dir.path(), Durability::Fsync, DEFAULT_SEGMENT_BYTES) else {
            panic!("a header lost under synced commits must not open");
        };
        assert!(matches!(error, OpenError::Corrupt { .. }), "{error}");
        assert!(
            error
                .to_string()
                .contains("has no header, but segments follow it"),
            "{error}"
        );
        assert_eq!(std::fs::read(&second).unwrap(), bytes, "kept as it was");
    }

    #[test]
    fn at_os_a_segment_that_lost_its_header_ends_the_log_there() {
        let dir = tempfile::tempdir().unwrap();
        let log_dir = dir.path().join(log::DIR_NAME);
        let continues = continuing(true);
        segment(&log_dir, 1, header(true, 0), &[1]);
        std::fs::write(log::segment_path(&log_dir, 2), [0u8; 64]).unwrap();
        segment(&log_dir, 3, continues, &[3]);
        assert_eq!(ids(dir.path()), vec![1], "the prefix before the gap");
    }

    #[test]
    fn a_segment_created_just_before_a_crash_is_removed_and_later_opens_go_on() {
        let dir = tempfile::tempdir().unwrap();
        let log_dir = dir.path().join(log::DIR_NAME);
        segment(&log_dir, 1, header(false, 0), &[1]);
        // The crash came between creating segment 2 and writing its header.
        std::fs::write(log::segment_path(&log_dir, 2), b"").unwrap();
        assert_eq!(ids(dir.path()), vec![1]);
        assert_eq!(ids(dir.path()), vec![1], "and again");
        assert!(
            log::read_header(&log::segment_path(&log_dir, 2))
                .unwrap()
                .is_some(),
            "the empty file was replaced by the next open's segment"
        );
    }

    #[test]
    fn a_segment_that_lost_its_end_before_the_next_began_is_a_gap() {
        for (unsynced_commits, kept) in [(true, Some(vec![1])), (false, None)] {
            let dir = tempfile::tempdir().unwrap();
            let log_dir = dir.path().join(log::DIR_NAME);
            let first = segment(&log_dir, 1, header(unsynced_commits, 0), &[1]);
            let first_len = std::fs::metadata(&first).unwrap().len();
            // Segment 2 began after more of segment 1 than is left of it.
            segment(&log_dir, 2, header(unsynced_commits, first_len + 100), &[2]);
            match (
                Store::open(dir.path(), Durability::Fsync, DEFAULT_SEGMENT_BYTES),
                kept,
            ) {
                (Ok((store, snapshot)), Some(kept)) => {
                    store.shutdown();
                    let ids: Vec<i64> = snapshot.entries.iter().map(|e| e.row.id).collect();
                    assert_eq!(ids, kept, "a prefix at os");
                    let reopened = self::ids(dir.path());
                    assert_eq!(reopened, kept, "segment 2's commits are not replayed");
                }
                (Err(error), None) => {
                    assert!(
                        error.to_string().contains("was started after byte"),
                        "{error}"
                    );
                }
                (Ok(_), None) => panic!("a gap under synced commits must be refused"),
                (Err(error), Some(_)) => panic!("{error}"),
            }
        }
    }

    #[test]
    fn a_gap_at_os_under_a_segment_whose_commits_were_synced_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let log_dir = dir.path().join(log::DIR_NAME);
        let first = segment(&log_dir, 1, header(true, 0), &[1]);
        append_junk(&first);
        segment(&log_dir, 2, header(false, 0), &[2]);
        let Err(error) = Store::open(dir.path(), Durability::Fsync, DEFAULT_SEGMENT_BYTES) else {
            panic!("refused");
        };
        assert!(matches!(error, OpenError::Corrupt { .. }), "{error}");
        assert!(log::segment_path(&log_dir, 2).exists(), "nothing removed");
    }
}
