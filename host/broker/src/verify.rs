//! Checks a broker log offline, changing nothing: the same reading open
//! does, with every repair reported instead of made (decision 0130).

use std::path::{Path, PathBuf};

use crate::error::OpenError;
use crate::log;
use crate::store::{self, FileReport, Finding, Repair};

/// What [`verify`] found.
#[derive(Debug)]
#[non_exhaustive]
pub struct Verification {
    /// The log directory read.
    pub log_dir: PathBuf,
    /// Each file read, in the order open reads them, up to the first one
    /// open would refuse.
    pub files: Vec<FileReport>,
    /// What open would say: the live state's size, or why it refuses.
    pub outcome: Result<LiveSummary, OpenError>,
}

/// The size of the state a log holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct LiveSummary {
    /// Topics.
    pub topics: usize,
    /// Subscriptions.
    pub subscriptions: usize,
    /// Message copies held (main and dead-letter queues).
    pub messages: usize,
    /// Scheduled messages.
    pub scheduled: usize,
}

impl Verification {
    /// Whether open would start on this log (perhaps after repairing what a
    /// crash left, which the files' findings name).
    pub fn is_ok(&self) -> bool {
        self.outcome.is_ok()
    }

    /// Whether open would repair anything: a torn tail, a header-less or
    /// redundant file, a gap at `os`.
    pub fn needs_repair(&self) -> bool {
        self.files
            .iter()
            .any(|f| !matches!(f.finding, Finding::Whole { .. }))
    }
}

/// Reads the broker log under `data_dir` as open would, without writing,
/// creating, removing or locking anything.
pub fn verify(data_dir: &Path) -> Verification {
    let log_dir = data_dir.join(log::DIR_NAME);
    let mut files = Vec::new();
    let outcome = read(data_dir, &log_dir, &mut files);
    Verification {
        log_dir,
        files,
        outcome,
    }
}

fn read(
    data_dir: &Path,
    log_dir: &Path,
    files: &mut Vec<FileReport>,
) -> Result<LiveSummary, OpenError> {
    if !log_dir.is_dir() {
        store::refuse_earlier_database(data_dir, &log::Listing::default())?;
        return Err(OpenError::Corrupt {
            path: log_dir.display().to_string(),
            reason: "no broker log here (is this a nimbus data directory?)".to_owned(),
        });
    }
    let listing = log::list(log_dir).map_err(|source| OpenError::Log {
        path: log_dir.display().to_string(),
        source,
    })?;
    store::refuse_earlier_database(data_dir, &listing)?;
    files.extend(listing.stale.iter().map(|path| FileReport {
        path: path.clone(),
        finding: Finding::Redundant,
    }));
    let (live, _) = store::read_log(log_dir, &listing, Repair::Report, files)?;
    let snapshot = live.into_snapshot().map_err(|reason| OpenError::Corrupt {
        path: log_dir.display().to_string(),
        reason,
    })?;
    Ok(LiveSummary {
        topics: snapshot.topics.len(),
        subscriptions: snapshot.subscriptions.len(),
        messages: snapshot.entries.len(),
        scheduled: snapshot.scheduled.len(),
    })
}
