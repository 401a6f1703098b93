//! The log reader against damaged files: whatever the bytes, it neither
//! panics nor invents a commit. It reads a prefix of what was written, or
//! says the file is damaged (decision 0130). Runs `PROPTEST_CASES` cases
//! (256 by default) per property, a few seconds in all.

use std::io::Write;
use std::path::Path;

use proptest::prelude::*;

use crate::log::{self, End};
use crate::records::StoreOp;
use crate::store::{self, Finding, Repair};

/// A segment of `commits` frames, commit `i` holding `i + 1` ops; returns
/// the bytes and the ops' sequence numbers in order.
fn segment(commits: usize, unsynced_commits: bool) -> (Vec<u8>, Vec<i64>) {
    let (bytes, seqs, _) = segment_with_ends(commits, unsynced_commits);
    (bytes, seqs)
}

/// [`segment`], with where each frame ends.
fn segment_with_ends(commits: usize, unsynced_commits: bool) -> (Vec<u8>, Vec<i64>, Vec<usize>) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("segment");
    let header = log::Header {
        unsynced_commits,
        ..log::Header::default()
    };
    let mut file = log::create(&path, header, false).unwrap();
    let mut frame = Vec::new();
    let mut seqs = Vec::new();
    let mut next = 0;
    let mut ends = vec![log::HEADER_LEN as usize];
    for commit in 0..commits {
        let ops: Vec<StoreOp> = (0..=commit)
            .map(|_| {
                next += 1;
                seqs.push(next);
                StoreOp::DeleteScheduled { seq: next }
            })
            .collect();
        log::encode_frame(&ops, &mut frame).unwrap();
        file.write_all(&frame).unwrap();
        ends.push(ends[ends.len() - 1] + frame.len());
    }
    drop(file);
    (std::fs::read(&path).unwrap(), seqs, ends)
}

/// Reads `bytes` as a file; the ops' sequence numbers, or `None` when the
/// reader refused the file.
fn read(dir: &Path, bytes: &[u8]) -> Option<(Vec<i64>, End)> {
    let path = dir.join("x.log");
    std::fs::write(&path, bytes).unwrap();
    let mut seen = Vec::new();
    let end = log::read(&path, |op| {
        if let StoreOp::DeleteScheduled { seq } = op {
            seen.push(seq);
        }
        Ok(())
    });
    // Never panics, whatever it finds after the damage.
    if let Ok(End::Torn { valid_len }) = end {
        let _ = log::next_whole_frame(&path, valid_len).unwrap();
    }
    end.ok().map(|end| (seen, end))
}

/// A mutation of a file: bytes flipped, then perhaps cut.
fn mutation() -> impl Strategy<Value = (Vec<(usize, u8)>, Option<usize>)> {
    (
        prop::collection::vec((any::<usize>(), 1..=255u8), 0..6),
        prop::option::of(any::<usize>()),
    )
}

fn mutate(mut bytes: Vec<u8>, flips: &[(usize, u8)], cut: Option<usize>) -> Vec<u8> {
    for &(at, xor) in flips {
        let len = bytes.len();
        bytes[at % len] ^= xor;
    }
    if let Some(cut) = cut {
        bytes.truncate(cut % (bytes.len() + 1));
    }
    bytes
}

proptest! {
    #[test]
    fn arbitrary_bytes_after_a_header_never_panic_the_reader(
        body in prop::collection::vec(any::<u8>(), 0..2048),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let (mut bytes, _) = segment(0, false);
        bytes.extend_from_slice(&body);
        // A random frame passing its checksum is all but impossible; one
        // that does and does not decode is refused, not applied.
        if let Some((seen, _)) = read(dir.path(), &bytes) {
            prop_assert!(seen.is_empty(), "{seen:?}");
        }
        let _ = read(dir.path(), &body);
    }

    #[test]
    fn a_damaged_segment_reads_as_a_prefix_of_its_commits_or_is_refused(
        commits in 1..12usize,
        (flips, cut) in mutation(),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let (bytes, seqs) = segment(commits, false);
        let damaged = mutate(bytes, &flips, cut);
        if let Some((seen, end)) = read(dir.path(), &damaged) {
            prop_assert!(seqs.starts_with(&seen), "{seen:?} is not a prefix of {seqs:?}");
            let (End::Clean { data_len } | End::Torn { valid_len: data_len }) = end;
            {
                prop_assert!(data_len <= damaged.len() as u64);
            }
        }
    }

    #[test]
    fn open_keeps_a_prefix_of_a_damaged_last_segment_or_refuses_it(
        commits in 1..12usize,
        unsynced_commits in any::<bool>(),
        (flips, cut) in mutation(),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let log_dir = dir.path().join(log::DIR_NAME);
        std::fs::create_dir_all(&log_dir).unwrap();
        let (original, seqs) = segment(commits, unsynced_commits);
        let damaged = mutate(original.clone(), &flips, cut);
        let path = log::segment_path(&log_dir, 1);
        std::fs::write(&path, &damaged).unwrap();
        let listing = log::list(&log_dir).unwrap();
        let mut reports = Vec::new();
        // Report-only, as `nimbus broker verify` reads: nothing changes.
        match store::read_log(&log_dir, &listing, Repair::Report, &mut reports) {
            Ok((live, kept)) => {
                let snapshot = live.into_snapshot().unwrap();
                prop_assert!(snapshot.entries.is_empty());
                if let [(1, len)] = kept.as_slice() {
                    prop_assert!(*len <= damaged.len() as u64);
                    // What was kept reads back whole.
                    let (seen, _) = read(dir.path(), &damaged[..usize::try_from(*len).unwrap()]).unwrap();
                    prop_assert!(seqs.starts_with(&seen));
                }
                if damaged == original {
                    prop_assert!(
                        matches!(reports.as_slice(), [r] if r.finding == Finding::Whole { data_len: original.len() as u64 }),
                        "{:?}", reports
                    );
                }
            }
            Err(error) => {
                prop_assert!(error.to_string().contains(&path.display().to_string()), "{error}");
            }
        }
        prop_assert_eq!(std::fs::read(&path).unwrap(), damaged, "report-only changes nothing");
    }

    #[test]
    fn a_frame_damaged_under_later_synced_commits_is_refused_where_it_starts(
        commits in 2..12usize,
        frame in any::<prop::sample::Index>(),
        at in any::<prop::sample::Index>(),
        xor in 1..=255u8,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let log_dir = dir.path().join(log::DIR_NAME);
        std::fs::create_dir_all(&log_dir).unwrap();
        let (mut bytes, _, ends) = segment_with_ends(commits, false);
        // Any frame but the last: whole frames follow it.
        let k = frame.index(commits - 1);
        bytes[ends[k] + at.index(ends[k + 1] - ends[k])] ^= xor;
        let path = log::segment_path(&log_dir, 1);
        std::fs::write(&path, &bytes).unwrap();
        let listing = log::list(&log_dir).unwrap();
        match store::read_log(&log_dir, &listing, Repair::Report, &mut Vec::new()) {
            Err(crate::error::OpenError::DamagedFrame { offset, next, .. }) => {
                prop_assert_eq!(offset, ends[k] as u64);
                prop_assert!(next > offset);
            }
            Err(other) => prop_assert!(false, "{other}"),
            Ok(_) => prop_assert!(false, "frame {k} of {commits} damaged, yet read"),
        }
    }
}
