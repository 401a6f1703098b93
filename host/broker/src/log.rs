//! The broker's files: numbered segments of checksummed frames, appended to
//! and never rewritten, and snapshots that replace the segments they fold.
//!
//! `<data_dir>/broker-log/` holds
//! - `NNNNNNNNNNNNNNNNNNNN.log`: a segment. A header (magic, format version,
//!   flags: whether its commits were synced one by one; the data length of
//!   the segment before it, when known), then frames: `[payload length u32 LE][CRC-32 of the payload u32 LE]
//!   [payload]`, the payload being the postcard encodings of one commit's
//!   [`StoreOp`]s back to back. One frame per commit, so a commit is on disk
//!   whole or, torn by a crash, dropped whole at open. No frame is empty: a
//!   zero frame header is the end of the data, followed by space the writer
//!   allocated ahead.
//! - `NNNNNNNNNNNNNNNNNNNN.snapshot`: the same format, holding the live state
//!   after every segment numbered up to and including NNN. It is written under
//!   a temporary name, synced and renamed, so it is complete or absent.
//!
//! State is the newest snapshot, then the segments after it, in order.
//! Decision 0115.

use std::fs::{File, OpenOptions};
use std::io::{self, BufReader, Read, Write};
use std::path::{Path, PathBuf};

use crate::records::StoreOp;

/// The directory under the data directory.
pub(crate) const DIR_NAME: &str = "broker-log";

const MAGIC: &[u8; 8] = b"nimbusbl";
/// The format this build writes and reads.
pub(crate) const FORMAT_VERSION: u32 = 1;
pub(crate) const HEADER_LEN: u64 = 24;
/// Header flag: the file's commits were acknowledged without a sync each
/// (`Durability::Os`), so after a power cut a gap may precede later data.
const FLAG_UNSYNCED: u32 = 1;
/// Header flag: history came before this file: segment `number - 1`, or a
/// snapshot that folds it. A build that predates the flag ignores it (and
/// writes 0), so the format version stays 1 (decision 0130).
const FLAG_CONTINUES: u32 = 2;
const FRAME_HEADER_LEN: usize = 8;
/// A frame longer than this is damage, not data: no commit comes near it.
const MAX_FRAME: u32 = 1 << 30;

const SEGMENT_EXT: &str = "log";
const SNAPSHOT_EXT: &str = "snapshot";
const TEMP_EXT: &str = "tmp";

pub(crate) fn segment_path(dir: &Path, number: u64) -> PathBuf {
    dir.join(format!("{number:020}.{SEGMENT_EXT}"))
}

pub(crate) fn snapshot_path(dir: &Path, number: u64) -> PathBuf {
    dir.join(format!("{number:020}.{SNAPSHOT_EXT}"))
}

pub(crate) fn temp_snapshot_path(dir: &Path, number: u64) -> PathBuf {
    dir.join(format!("{number:020}.{SNAPSHOT_EXT}.{TEMP_EXT}"))
}

/// Why a file of the log cannot be read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ReadError {
    #[error("{0}")]
    Io(#[from] io::Error),
    #[error("{0}")]
    Corrupt(String),
}

/// What the directory holds.
#[derive(Debug, Default)]
pub(crate) struct Listing {
    /// The newest snapshot's number.
    pub(crate) snapshot: Option<u64>,
    /// Segments after the snapshot, ascending.
    pub(crate) segments: Vec<u64>,
    /// Files a finished compaction made redundant (or an unfinished one
    /// left behind): older snapshots, segments the snapshot folds, temporary
    /// files.
    pub(crate) stale: Vec<PathBuf>,
}

/// Lists the directory (which must exist).
/// Whether `path` is a temporary file of the log (a snapshot being written).
pub(crate) fn is_temporary(path: &Path) -> bool {
    path.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|name| name.ends_with(&format!(".{TEMP_EXT}")))
}

pub(crate) fn list(dir: &Path) -> io::Result<Listing> {
    let mut snapshots = Vec::new();
    let mut segments = Vec::new();
    let mut stale = Vec::new();
    for item in std::fs::read_dir(dir)? {
        let path = item?.path();
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        if is_temporary(&path) {
            stale.push(path);
            continue;
        }
        let Some((stem, ext)) = name.split_once('.') else {
            continue;
        };
        let Ok(number) = stem.parse::<u64>() else {
            continue;
        };
        match ext {
            SEGMENT_EXT => segments.push(number),
            SNAPSHOT_EXT => snapshots.push(number),
            _ => {}
        }
    }
    snapshots.sort_unstable();
    segments.sort_unstable();
    let snapshot = snapshots.last().copied();
    if let Some(newest) = snapshot {
        stale.extend(
            snapshots
                .iter()
                .filter(|&&n| n < newest)
                .map(|&n| snapshot_path(dir, n)),
        );
        stale.extend(
            segments
                .iter()
                .filter(|&&n| n <= newest)
                .map(|&n| segment_path(dir, n)),
        );
        segments.retain(|&n| n > newest);
    }
    Ok(Listing {
        snapshot,
        segments,
        stale,
    })
}

/// What a file's header says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Header {
    /// The commits were acknowledged without a sync each
    /// (`Durability::Os`), so after a power cut a gap may precede later data.
    pub(crate) unsynced_commits: bool,
    /// The data length of the segment before this one when this one was
    /// started (0: none, or not known): a shorter predecessor lost its end.
    pub(crate) prev_data_len: u64,
    /// The log held history when this file began, ending at its number
    /// minus one (a segment, or a snapshot folding it): a log that holds
    /// neither lost it (decision 0130). Always false in files of builds
    /// before the flag.
    pub(crate) continues: bool,
}

/// Creates a new file with `header` written; `sync_now` syncs it. A file
/// whose header could not be written (a full disk) is removed again, so a
/// retry can create it.
pub(crate) fn create(path: &Path, header: Header, sync_now: bool) -> io::Result<File> {
    let mut file = OpenOptions::new().write(true).create_new(true).open(path)?;
    let mut flags = 0;
    if header.unsynced_commits {
        flags |= FLAG_UNSYNCED;
    }
    if header.continues {
        flags |= FLAG_CONTINUES;
    }
    let mut bytes = Vec::with_capacity(HEADER_LEN as usize);
    bytes.extend_from_slice(MAGIC);
    bytes.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    bytes.extend_from_slice(&flags.to_le_bytes());
    bytes.extend_from_slice(&header.prev_data_len.to_le_bytes());
    let written = file
        .write_all(&bytes)
        .and_then(|()| if sync_now { file.sync_all() } else { Ok(()) });
    if let Err(error) = written {
        drop(file);
        let _ = std::fs::remove_file(path);
        return Err(error);
    }
    Ok(file)
}

/// Makes the directory's entries (a created, renamed or removed file) durable.
pub(crate) fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Puts one frame holding `ops` in `out` (cleared first).
pub(crate) fn encode_frame<'a>(
    ops: impl IntoIterator<Item = &'a StoreOp>,
    out: &mut Vec<u8>,
) -> io::Result<()> {
    out.clear();
    out.extend_from_slice(&[0; FRAME_HEADER_LEN]);
    for op in ops {
        *out = postcard::to_extend(op, std::mem::take(out))
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
    }
    if out.len() == FRAME_HEADER_LEN {
        // A zero header marks the end of the data (see the module's doc).
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "an empty frame",
        ));
    }
    let len = u32::try_from(out.len() - FRAME_HEADER_LEN)
        .ok()
        .filter(|&l| l < MAX_FRAME)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "commit too large"))?;
    let crc = crc32fast::hash(&out[FRAME_HEADER_LEN..]);
    out[..4].copy_from_slice(&len.to_le_bytes());
    out[4..FRAME_HEADER_LEN].copy_from_slice(&crc.to_le_bytes());
    Ok(())
}

/// How a file ended.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum End {
    /// The data ends with a whole frame at `data_len`; anything after it
    /// is allocated space.
    Clean { data_len: u64 },
    /// A frame is cut short or fails its checksum at this offset, or zeros
    /// stand where more data follows: the commit a crash interrupted, or
    /// pages a power cut lost. A file without a header is torn at 0.
    Torn { valid_len: u64 },
}

/// Reads a file's header: `None` when the file is shorter than a header or
/// its header is zeros (created, and a crash came before the header was on
/// disk: it holds no commit).
pub(crate) fn read_header(path: &Path) -> Result<Option<Header>, ReadError> {
    let mut bytes = [0u8; HEADER_LEN as usize];
    if read_full(&mut File::open(path)?, &mut bytes)? < bytes.len()
        || bytes == [0; HEADER_LEN as usize]
    {
        return Ok(None);
    }
    parse_header(&bytes).map(Some)
}

fn parse_header(bytes: &[u8; HEADER_LEN as usize]) -> Result<Header, ReadError> {
    if &bytes[..8] != MAGIC {
        return Err(ReadError::Corrupt("not a broker log file".into()));
    }
    let word =
        |at: usize| u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]);
    let version = word(8);
    if version != FORMAT_VERSION {
        return Err(ReadError::Corrupt(format!(
            "log format version {version}, this build reads version {FORMAT_VERSION}"
        )));
    }
    let mut prev = [0u8; 8];
    prev.copy_from_slice(&bytes[16..24]);
    Ok(Header {
        unsynced_commits: word(12) & FLAG_UNSYNCED != 0,
        prev_data_len: u64::from_le_bytes(prev),
        continues: word(12) & FLAG_CONTINUES != 0,
    })
}

/// Reads every frame of `path`, handing each op to `apply` in order.
pub(crate) fn read(
    path: &Path,
    mut apply: impl FnMut(StoreOp) -> Result<(), String>,
) -> Result<End, ReadError> {
    let file = File::open(path)?;
    let file_len = file.metadata()?.len();
    let mut reader = BufReader::with_capacity(1 << 20, file);
    let mut header = [0u8; HEADER_LEN as usize];
    if read_full(&mut reader, &mut header)? < header.len() || header == [0; HEADER_LEN as usize] {
        return Ok(End::Torn { valid_len: 0 });
    }
    parse_header(&header)?;
    let mut offset = HEADER_LEN;
    let mut payload = Vec::new();
    loop {
        let mut frame_header = [0u8; FRAME_HEADER_LEN];
        match read_full(&mut reader, &mut frame_header)? {
            0 => return Ok(End::Clean { data_len: offset }),
            FRAME_HEADER_LEN => {}
            _ => return Ok(End::Torn { valid_len: offset }),
        }
        if frame_header == [0; FRAME_HEADER_LEN] {
            // Space the writer allocated ahead (no frame is empty), unless
            // data follows: then pages before it were lost.
            return Ok(if only_zeros_left(&mut reader)? {
                End::Clean { data_len: offset }
            } else {
                End::Torn { valid_len: offset }
            });
        }
        let len = u32::from_le_bytes([
            frame_header[0],
            frame_header[1],
            frame_header[2],
            frame_header[3],
        ]);
        let crc = u32::from_le_bytes([
            frame_header[4],
            frame_header[5],
            frame_header[6],
            frame_header[7],
        ]);
        // A damaged length must not make us allocate what the file cannot hold.
        let frame_end = offset + FRAME_HEADER_LEN as u64 + u64::from(len);
        if len >= MAX_FRAME || frame_end > file_len {
            return Ok(End::Torn { valid_len: offset });
        }
        payload.resize(len as usize, 0);
        if read_full(&mut reader, &mut payload)? < payload.len() || crc32fast::hash(&payload) != crc
        {
            return Ok(End::Torn { valid_len: offset });
        }
        let mut rest = payload.as_slice();
        while !rest.is_empty() {
            let (op, tail) = postcard::take_from_bytes::<StoreOp>(rest).map_err(|e| {
                ReadError::Corrupt(format!(
                    "frame at byte {offset} passes its checksum but does not decode: {e}"
                ))
            })?;
            apply(op).map_err(ReadError::Corrupt)?;
            rest = tail;
        }
        offset += FRAME_HEADER_LEN as u64 + u64::from(len);
    }
}

/// The offset of the first whole frame (a plausible length, its checksum
/// right) that starts after byte `after` of `path`, if any. A damaged frame
/// with one after it is not a commit a crash cut short: commits were
/// written after it (decision 0130). Reads the rest of the file at once:
/// this runs only when a file is damaged.
pub(crate) fn next_whole_frame(path: &Path, after: u64) -> io::Result<Option<u64>> {
    let mut file = File::open(path)?;
    let start = after.saturating_add(1);
    if start >= file.metadata()?.len() {
        return Ok(None);
    }
    std::io::Seek::seek(&mut file, io::SeekFrom::Start(start))?;
    let mut rest = Vec::new();
    file.read_to_end(&mut rest)?;
    Ok(find_whole_frame(&rest).map(|at| start + at as u64))
}

/// Where in `bytes` the first whole frame starts.
fn find_whole_frame(bytes: &[u8]) -> Option<usize> {
    let word =
        |at: usize| u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]);
    (0..bytes.len().saturating_sub(FRAME_HEADER_LEN - 1)).find(|&at| {
        let len = word(at);
        if len == 0 || len >= MAX_FRAME {
            return false;
        }
        let start = at + FRAME_HEADER_LEN;
        let Some(end) = start
            .checked_add(len as usize)
            .filter(|&e| e <= bytes.len())
        else {
            return false;
        };
        crc32fast::hash(&bytes[start..end]) == word(at + 4)
    })
}

fn only_zeros_left(reader: &mut impl Read) -> io::Result<bool> {
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        let n = read_full(reader, &mut chunk)?;
        if chunk[..n].iter().any(|&b| b != 0) {
            return Ok(false);
        }
        if n < chunk.len() {
            return Ok(true);
        }
    }
}

/// Reads until `buf` is full or the file ends; returns the bytes read.
fn read_full(reader: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match reader.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(n: i64) -> StoreOp {
        StoreOp::DeleteScheduled { seq: n }
    }

    fn seqs(path: &Path) -> (Vec<i64>, End) {
        let mut seen = Vec::new();
        let end = read(path, |op| {
            if let StoreOp::DeleteScheduled { seq } = op {
                seen.push(seq);
            }
            Ok(())
        })
        .unwrap();
        (seen, end)
    }

    /// A segment of three commits: (1), (2, 3), (4).
    fn three_commits(dir: &Path) -> (PathBuf, Vec<u64>) {
        let path = segment_path(dir, 1);
        let mut file = create(&path, Header::default(), false).unwrap();
        let mut ends = vec![HEADER_LEN];
        let mut frame = Vec::new();
        for ops in [vec![op(1)], vec![op(2), op(3)], vec![op(4)]] {
            encode_frame(&ops, &mut frame).unwrap();
            file.write_all(&frame).unwrap();
            ends.push(ends.last().unwrap() + frame.len() as u64);
        }
        (path, ends)
    }

    #[test]
    fn a_file_cut_anywhere_reads_as_its_whole_commits_and_where_they_end() {
        let dir = tempfile::tempdir().unwrap();
        let (path, ends) = three_commits(dir.path());
        let whole = std::fs::read(&path).unwrap();
        assert_eq!(
            seqs(&path),
            (vec![1, 2, 3, 4], End::Clean { data_len: ends[3] })
        );
        for cut in 0..whole.len() {
            std::fs::write(&path, &whole[..cut]).unwrap();
            let (seen, end) = seqs(&path);
            let whole_commits = ends.iter().filter(|&&e| e <= cut as u64).count();
            let expected: &[i64] = match whole_commits {
                0 | 1 => &[],
                2 => &[1],
                3 => &[1, 2, 3],
                _ => unreachable!("the file is cut short"),
            };
            assert_eq!(seen, expected, "cut at {cut}");
            let valid_len = ends
                .iter()
                .copied()
                .filter(|&e| e <= cut as u64)
                .max()
                .unwrap_or(0);
            if cut as u64 == valid_len && cut as u64 >= HEADER_LEN {
                assert_eq!(
                    end,
                    End::Clean {
                        data_len: valid_len
                    },
                    "cut at {cut}"
                );
            } else {
                assert_eq!(end, End::Torn { valid_len }, "cut at {cut}");
            }
        }
    }

    #[test]
    fn zeros_after_the_data_are_space_allocated_ahead() {
        let dir = tempfile::tempdir().unwrap();
        let (path, ends) = three_commits(dir.path());
        let mut file = OpenOptions::new().append(true).open(&path).unwrap();
        file.write_all(&[0; 4096]).unwrap();
        assert_eq!(
            seqs(&path),
            (vec![1, 2, 3, 4], End::Clean { data_len: ends[3] })
        );
        let mut frame = Vec::new();
        assert!(encode_frame(&[], &mut frame).is_err(), "no frame is empty");

        // Data after the zeros: pages in between were lost.
        file.write_all(&[1; 16]).unwrap();
        assert_eq!(
            seqs(&path),
            (vec![1, 2, 3, 4], End::Torn { valid_len: ends[3] })
        );
    }

    #[test]
    fn a_file_without_its_header_holds_no_commits() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.log");
        for bytes in [&b""[..], &[0; 24][..], &[0; 4096][..], &MAGIC[..]] {
            std::fs::write(&path, bytes).unwrap();
            assert_eq!(read_header(&path).unwrap(), None, "{} bytes", bytes.len());
            assert_eq!(seqs(&path), (vec![], End::Torn { valid_len: 0 }));
        }
        let header = Header {
            unsynced_commits: true,
            prev_data_len: 77,
            continues: true,
        };
        std::fs::remove_file(&path).unwrap();
        drop(create(&path, header, false).unwrap());
        assert_eq!(read_header(&path).unwrap(), Some(header));
    }

    #[test]
    fn a_flipped_bit_ends_the_file_at_the_commit_it_damaged() {
        let dir = tempfile::tempdir().unwrap();
        let (path, ends) = three_commits(dir.path());
        let mut bytes = std::fs::read(&path).unwrap();
        let in_second = usize::try_from(ends[1]).unwrap() + FRAME_HEADER_LEN + 1;
        bytes[in_second] ^= 0x10;
        std::fs::write(&path, &bytes).unwrap();
        assert_eq!(seqs(&path), (vec![1], End::Torn { valid_len: ends[1] }));
    }

    #[test]
    fn a_file_that_is_not_a_broker_log_is_named_so() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.log");
        std::fs::write(&path, b"SQLite format 3\0 and more").unwrap();
        let Err(ReadError::Corrupt(reason)) = read(&path, |_| Ok(())) else {
            panic!("refused");
        };
        assert!(reason.contains("not a broker log"), "{reason}");
    }

    #[test]
    fn a_listing_keeps_the_newest_snapshot_and_the_segments_after_it() {
        let dir = tempfile::tempdir().unwrap();
        for path in [
            snapshot_path(dir.path(), 2),
            snapshot_path(dir.path(), 5),
            segment_path(dir.path(), 4),
            segment_path(dir.path(), 5),
            segment_path(dir.path(), 6),
            segment_path(dir.path(), 7),
            temp_snapshot_path(dir.path(), 7),
        ] {
            std::fs::write(path, b"").unwrap();
        }
        let listing = list(dir.path()).unwrap();
        assert_eq!(listing.snapshot, Some(5));
        assert_eq!(listing.segments, vec![6, 7]);
        let mut stale = listing.stale.clone();
        stale.sort();
        assert_eq!(
            stale,
            vec![
                snapshot_path(dir.path(), 2),
                segment_path(dir.path(), 4),
                segment_path(dir.path(), 5),
                temp_snapshot_path(dir.path(), 7),
            ]
        );
    }
}
