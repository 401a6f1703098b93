//! Folds sealed segments into a snapshot, off the writer's path, so the log
//! on disk stays near the size of what is live.
//!
//! When the writer seals a segment it tells the compactor, which waits until
//! the sealed segments add up to at least the current snapshot's size (so a
//! large backlog is not rewritten for every small segment), then reads the
//! snapshot and those segments, writes their fold as the next snapshot under
//! a temporary name, syncs it, renames it into place, and removes the files
//! it replaces. A crash at any point leaves either the old files or the new
//! snapshot as the newest complete state; leftovers are removed at open.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};
use std::thread::JoinHandle;

use crate::live::LiveState;
use crate::log;
use crate::records::StoreOp;

/// Ops per snapshot frame: frames of a few hundred KiB at most for the
/// reader's buffer.
const OPS_PER_FRAME: usize = 256;

/// The compactor thread.
pub(crate) struct Compactor {
    tx: Option<mpsc::Sender<u64>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

/// What the writer holds to report a sealed segment.
pub(crate) struct Handle(mpsc::Sender<u64>);

impl Handle {
    /// Every segment up to and including `number` is sealed.
    pub(crate) fn sealed(&self, number: u64) {
        // A stopped compactor means shutdown: the next open compacts.
        let _ = self.0.send(number);
    }
}

impl Compactor {
    pub(crate) fn start(dir: PathBuf) -> io::Result<Compactor> {
        let (tx, rx) = mpsc::channel();
        let stop = Arc::new(AtomicBool::new(false));
        let thread_stop = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("nimbus-broker-compact".to_owned())
            .spawn(move || run(&dir, &rx, &thread_stop))?;
        Ok(Compactor {
            tx: Some(tx),
            stop,
            thread: Some(thread),
        })
    }

    pub(crate) fn handle(&self) -> Handle {
        Handle(self.tx.clone().unwrap_or_else(|| mpsc::channel().0))
    }
}

impl Drop for Compactor {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        self.tx.take();
        if let Some(thread) = self.thread.take()
            && thread.join().is_err()
        {
            tracing::error!("the broker compactor thread panicked");
        }
    }
}

fn run(dir: &Path, rx: &mpsc::Receiver<u64>, stop: &AtomicBool) {
    while let Ok(mut sealed) = rx.recv() {
        while let Ok(more) = rx.try_recv() {
            sealed = sealed.max(more);
        }
        if stop.load(Ordering::Acquire) {
            return;
        }
        match compact(dir, sealed, stop) {
            Ok(Some(bytes)) => {
                tracing::debug!(sealed, bytes, "broker log compacted");
            }
            Ok(None) => {}
            // The log is still whole and correct, only longer; the next
            // seal tries again.
            Err(error) => tracing::warn!(%error, sealed, "compacting the broker log failed"),
        }
    }
}

/// Folds the snapshot and the segments up to `sealed` into snapshot
/// `sealed`, if they are worth it; returns the new snapshot's size.
fn compact(dir: &Path, sealed: u64, stop: &AtomicBool) -> io::Result<Option<u64>> {
    let listing = log::list(dir)?;
    let folded: Vec<u64> = listing
        .segments
        .iter()
        .copied()
        .filter(|&n| n <= sealed)
        .collect();
    if folded.is_empty() {
        return Ok(None);
    }
    let snapshot_len = match listing.snapshot {
        Some(n) => std::fs::metadata(log::snapshot_path(dir, n))?.len(),
        None => 0,
    };
    let mut folded_len = 0;
    for &n in &folded {
        folded_len += std::fs::metadata(log::segment_path(dir, n))?.len();
    }
    if folded_len < snapshot_len {
        return Ok(None);
    }
    let mut live = LiveState::default();
    let mut apply = |op| {
        live.apply(op);
        Ok(())
    };
    let mut files: Vec<PathBuf> = listing
        .snapshot
        .map(|n| log::snapshot_path(dir, n))
        .into_iter()
        .collect();
    files.extend(folded.iter().map(|&n| log::segment_path(dir, n)));
    for path in &files {
        if stop.load(Ordering::Acquire) {
            return Ok(None);
        }
        match log::read(path, &mut apply) {
            Ok(log::End::Clean { .. }) => {}
            Ok(log::End::Torn { valid_len }) => {
                return Err(io::Error::other(format!(
                    "{} is damaged at byte {valid_len}",
                    path.display()
                )));
            }
            Err(log::ReadError::Io(e)) => return Err(e),
            Err(log::ReadError::Corrupt(reason)) => {
                return Err(io::Error::other(format!("{}: {reason}", path.display())));
            }
        }
    }
    if !write_snapshot(dir, sealed, live, stop)? {
        return Ok(None);
    }
    for path in files.iter().chain(&listing.stale) {
        if path != &log::snapshot_path(dir, sealed) {
            remove_gradually(path)?;
        }
    }
    log::sync_dir(dir)?;
    Ok(Some(
        std::fs::metadata(log::snapshot_path(dir, sealed))?.len(),
    ))
}

/// How much of a file one truncation step frees.
const TRUNCATE_STEP: u64 = 1 << 20;
/// The pause between steps, for the writer's syncs to go first.
const TRUNCATE_PAUSE: std::time::Duration = std::time::Duration::from_millis(1);

/// Removes a file, first shrinking it a step at a time. Unlinking a 64 MiB
/// segment at once held ext4's journal for ~60-90 ms here, and the
/// writer's `fdatasync`s waited behind it; small truncations with a pause
/// between them keep each journal transaction short (decision 0115).
fn remove_gradually(path: &Path) -> io::Result<()> {
    let file = std::fs::OpenOptions::new().write(true).open(path)?;
    let mut len = file.metadata()?.len();
    while len > TRUNCATE_STEP {
        len -= TRUNCATE_STEP;
        file.set_len(len)?;
        std::thread::sleep(TRUNCATE_PAUSE);
    }
    drop(file);
    std::fs::remove_file(path)
}

/// Writes `live` as snapshot `number`: complete and synced, or not at all.
/// Returns `false` when `stop` cut it short.
pub(crate) fn write_snapshot(
    dir: &Path,
    number: u64,
    live: LiveState,
    stop: &AtomicBool,
) -> io::Result<bool> {
    let temp = log::temp_snapshot_path(dir, number);
    let written = write_ops(&temp, live, stop);
    match written {
        Ok(true) => {
            std::fs::rename(&temp, log::snapshot_path(dir, number))?;
            log::sync_dir(dir)?;
            Ok(true)
        }
        other => {
            let _ = std::fs::remove_file(&temp);
            other
        }
    }
}

fn write_ops(path: &Path, live: LiveState, stop: &AtomicBool) -> io::Result<bool> {
    let mut out =
        BufWriter::with_capacity(1 << 20, log::create(path, log::Header::default(), false)?);
    let mut ops: Vec<StoreOp> = Vec::with_capacity(OPS_PER_FRAME);
    let mut frame = Vec::new();
    let mut flush = |ops: &mut Vec<StoreOp>, out: &mut BufWriter<File>| -> io::Result<()> {
        if ops.is_empty() {
            return Ok(());
        }
        log::encode_frame(ops.iter(), &mut frame)?;
        out.write_all(&frame)?;
        ops.clear();
        Ok(())
    };
    for op in live.into_ops() {
        ops.push(op);
        if ops.len() == OPS_PER_FRAME {
            if stop.load(Ordering::Acquire) {
                return Ok(false);
            }
            flush(&mut ops, &mut out)?;
        }
    }
    flush(&mut ops, &mut out)?;
    let file = out.into_inner().map_err(io::IntoInnerError::into_error)?;
    file.sync_all()?;
    Ok(true)
}
