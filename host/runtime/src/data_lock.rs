//! One host per data directory (decision record 0109).
//!
//! The broker and the Resolver store each assume they are the only writer
//! of their files: a second host on the same directory corrupts both. So
//! `Host::start` takes an exclusive OS advisory lock (`flock`) on
//! `<data_dir>/nimbus.lock` before it opens anything there, and holds it for
//! the host's lifetime. The kernel drops the lock when the process ends,
//! however it ends (SIGKILL included), so a lock file left behind by a
//! crash never blocks a restart; only a live holder does.
//!
//! The holder writes its pid, start time and API address into the file, so
//! that a refused host can say who holds the directory. Those details are
//! informational only: the lock is what excludes, and the file's contents
//! are read leniently (empty, partial or foreign text just names no holder).

use std::fmt;
use std::fs::{File, OpenOptions, TryLockError};
use std::io::{self, Read as _, Seek as _, SeekFrom, Write as _};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use tracing::{debug, warn};

/// The lock file's name inside the data directory.
pub(crate) const LOCK_FILE: &str = "nimbus.lock";

/// How much of the lock file a refused host reads: the holder's details
/// take under a hundred bytes, and the file may hold anything.
const HOLDER_MAX_BYTES: u64 = 4096;

/// The exclusive lock on a data directory; released when dropped (or when
/// the process ends).
#[derive(Debug)]
pub struct DataLock {
    // The lock belongs to this open file; closing it releases the lock.
    file: File,
    /// The lock file, for log messages.
    path: PathBuf,
    /// What this host wrote about itself.
    me: Holder,
}

/// Why the data directory could not be locked.
#[derive(Debug, thiserror::Error)]
pub enum DataLockError {
    /// The data directory cannot be created.
    #[error("creating the data directory {}: {error}", dir.display())]
    CreateDir {
        /// The data directory.
        dir: PathBuf,
        /// Why.
        error: io::Error,
    },
    /// Another live process holds the lock.
    #[error(
        "the data directory {} is in use by another nimbus host ({holder}); \
         stop it or give this host another [host] data_dir",
        dir.display()
    )]
    InUse {
        /// The data directory.
        dir: PathBuf,
        /// What the holder wrote about itself.
        holder: Holder,
    },
    /// The lock file cannot be opened or locked (permissions, a file
    /// system without locks). Refused rather than run unprotected.
    #[error("cannot lock the data directory {} ({}): {error}", dir.display(), path.display())]
    Io {
        /// The data directory.
        dir: PathBuf,
        /// The lock file.
        path: PathBuf,
        /// Why.
        error: io::Error,
    },
}

impl DataLock {
    /// Creates the data directory `dir` if needed and takes its lock, for a
    /// host whose API listens on `api`, before anything in it is opened: a
    /// second host on the same data corrupts the broker and the Resolver
    /// store.
    ///
    /// # Errors
    ///
    /// [`DataLockError`]: the directory cannot be created or locked, or
    /// another host holds it.
    pub fn take(dir: &Path, api: SocketAddr) -> Result<DataLock, DataLockError> {
        std::fs::create_dir_all(dir).map_err(|error| DataLockError::CreateDir {
            dir: dir.to_owned(),
            error,
        })?;
        DataLock::acquire(dir, api)
    }

    /// The data directory this lock holds.
    pub fn dir(&self) -> &Path {
        self.path.parent().unwrap_or(&self.path)
    }

    /// Records the API's address once it is bound (the configuration may
    /// say port 0), so a refused host names the real one.
    pub fn record_api(&mut self, api: SocketAddr) {
        self.me.api = Some(api);
        if let Err(error) = self.me.write(&mut self.file) {
            warn!(path = %self.path.display(), %error, "writing this host's details into the lock file failed");
        }
    }

    /// Takes the lock of `dir` for an offline reader (`nimbus broker
    /// verify`), so no host starts on the files while they are read. A
    /// directory without a lock file (no host ever ran there) is `None`:
    /// nothing is created. The reader writes its pid and start time, so a
    /// host refused meanwhile names the process to wait for.
    ///
    /// # Errors
    ///
    /// [`DataLockError::InUse`] while a host runs on `dir`;
    /// [`DataLockError::Io`] when the lock file cannot be opened or locked.
    pub fn take_to_read(dir: &Path) -> Result<Option<DataLock>, DataLockError> {
        let path = dir.join(LOCK_FILE);
        let io_error = io_error(dir, &path);
        // A restored copy on a read-only mount is read all the same: no
        // host can write there either, and flock needs no write access.
        let opened = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .or_else(|error| match error.kind() {
                io::ErrorKind::PermissionDenied | io::ErrorKind::ReadOnlyFilesystem => {
                    File::open(&path)
                }
                _ => Err(error),
            });
        let file = match opened {
            Ok(file) => file,
            Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(error) => return Err(io_error(error)),
        };
        lock(file, dir, path, None).map(Some)
    }

    /// Takes the lock on `dir` (which must exist) for a host whose API
    /// listens on `api`, or says who holds it. Never waits.
    pub(crate) fn acquire(dir: &Path, api: SocketAddr) -> Result<DataLock, DataLockError> {
        let path = dir.join(LOCK_FILE);
        let io_error = io_error(dir, &path);
        // Not truncated on open: until the lock is ours, the contents are
        // the holder's, which a refusal quotes.
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io_error)?;
        lock(file, dir, path, Some(api))
    }
}

/// The error for an I/O failure on the lock file `path` of `dir`.
fn io_error(dir: &Path, path: &Path) -> impl Fn(io::Error) -> DataLockError + use<> {
    let (dir, path) = (dir.to_owned(), path.to_owned());
    move |error| DataLockError::Io {
        dir: dir.clone(),
        path: path.clone(),
        error,
    }
}

/// Takes the lock of `file` (the lock file `path` in `dir`) without
/// waiting, and writes this process's details into it: a host's with its
/// API address, a reader's without.
fn lock(
    mut file: File,
    dir: &Path,
    path: PathBuf,
    api: Option<SocketAddr>,
) -> Result<DataLock, DataLockError> {
    match file.try_lock() {
        Ok(()) => {}
        Err(TryLockError::WouldBlock) => {
            return Err(DataLockError::InUse {
                dir: dir.to_owned(),
                holder: Holder::read(&mut file),
            });
        }
        Err(TryLockError::Error(error)) => return Err(io_error(dir, &path)(error)),
    }
    let me = Holder {
        pid: Some(std::process::id()),
        started: Some(SystemTime::now()),
        api,
    };
    // The details only improve a refusal's message; the lock is held
    // whether or not they are written (a full disk stops the broker soon
    // enough, with its own error; a reader may be on a read-only copy).
    if let Err(error) = me.write(&mut file) {
        if me.api.is_some() {
            warn!(path = %path.display(), %error, "writing this host's details into the lock file failed");
        } else {
            debug!(path = %path.display(), %error, "writing this reader's details into the lock file failed");
        }
    }
    Ok(DataLock { file, path, me })
}

/// What the holder of a data directory's lock wrote about itself; each
/// part is absent when the file does not say it legibly.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Holder {
    pid: Option<u32>,
    started: Option<SystemTime>,
    api: Option<SocketAddr>,
}

impl Holder {
    /// Reads the holder's details; anything unreadable is left out.
    fn read(file: &mut File) -> Holder {
        let mut bytes = Vec::new();
        let read = file
            .seek(SeekFrom::Start(0))
            .and_then(|_| file.take(HOLDER_MAX_BYTES).read_to_end(&mut bytes));
        match read {
            Ok(_) => Holder::parse(&String::from_utf8_lossy(&bytes)),
            Err(_) => Holder::default(),
        }
    }

    /// Parses `key=value` lines. Only values that parse are kept, so the
    /// file's text never reaches the message as it is.
    fn parse(text: &str) -> Holder {
        let mut holder = Holder::default();
        for line in text.lines() {
            let Some((key, value)) = line.split_once('=') else {
                continue;
            };
            let value = value.trim();
            match key.trim() {
                "pid" => holder.pid = value.parse().ok(),
                "started" => holder.started = humantime::parse_rfc3339(value).ok(),
                "api" => holder.api = value.parse().ok(),
                _ => {}
            }
        }
        holder
    }

    /// Replaces the file's contents with these details.
    fn write(&self, file: &mut File) -> io::Result<()> {
        file.set_len(0)?;
        file.seek(SeekFrom::Start(0))?;
        let mut text = String::new();
        if let Some(pid) = self.pid {
            text.push_str(&format!("pid={pid}\n"));
        }
        if let Some(started) = self.started {
            text.push_str(&format!(
                "started={}\n",
                humantime::format_rfc3339_seconds(started)
            ));
        }
        if let Some(api) = self.api {
            text.push_str(&format!("api={api}\n"));
        }
        file.write_all(text.as_bytes())?;
        file.flush()
    }
}

impl fmt::Display for Holder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        if let Some(pid) = self.pid {
            parts.push(format!("pid {pid}"));
        }
        if let Some(started) = self.started {
            parts.push(format!(
                "started {}",
                humantime::format_rfc3339_seconds(started)
            ));
        }
        match self.api {
            // Port 0 means the OS picked one at bind time, which the lock
            // (taken from the configuration) does not know.
            Some(api) if api.port() == 0 => {
                parts.push(format!("API on {}, port chosen at start", api.ip()));
            }
            Some(api) => parts.push(format!("API http://{api}")),
            None => {}
        }
        if parts.is_empty() {
            // The holder has locked but not yet written, or the file was
            // overwritten: the lock still excludes.
            return f.write_str("its details are not in the lock file");
        }
        f.write_str(&parts.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn api() -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], 7300))
    }

    #[test]
    fn a_second_lock_is_refused_naming_the_directory_and_the_holder() {
        let dir = tempfile::tempdir().expect("tempdir");
        let _held = DataLock::acquire(dir.path(), api()).expect("first lock");
        // flock excludes across open files even within one process, so this
        // stands in for a second host.
        let error = DataLock::acquire(dir.path(), SocketAddr::from(([127, 0, 0, 1], 7417)))
            .expect_err("second lock refused");
        let DataLockError::InUse { holder, .. } = &error else {
            panic!("not InUse: {error}");
        };
        assert_eq!(holder.pid, Some(std::process::id()));
        assert_eq!(holder.api, Some(api()));
        assert!(holder.started.is_some());
        let message = error.to_string();
        assert!(
            message.starts_with(&format!(
                "the data directory {} is in use by another nimbus host (pid {}, started ",
                dir.path().display(),
                std::process::id()
            )),
            "{message}"
        );
        assert!(
            message.ends_with(
                ", API http://127.0.0.1:7300); stop it or give this host another [host] data_dir"
            ),
            "{message}"
        );
    }

    #[test]
    fn a_reader_is_refused_while_a_host_holds_the_directory_and_keeps_a_host_out() {
        let dir = tempfile::tempdir().expect("temp dir");
        assert!(
            DataLock::take_to_read(dir.path())
                .expect("no lock file")
                .is_none(),
            "a directory no host ran in"
        );
        assert!(
            !dir.path().join(LOCK_FILE).exists(),
            "the reader creates nothing"
        );

        let host = DataLock::take(dir.path(), api()).expect("host");
        let refused = DataLock::take_to_read(dir.path()).expect_err("a host holds it");
        assert!(matches!(refused, DataLockError::InUse { .. }), "{refused}");
        assert!(
            refused
                .to_string()
                .contains(&std::process::id().to_string()),
            "{refused}"
        );
        drop(host);

        let reader = DataLock::take_to_read(dir.path())
            .expect("free")
            .expect("a lock file");
        let host = DataLock::acquire(dir.path(), api()).expect_err("a reader holds it");
        assert!(matches!(host, DataLockError::InUse { .. }), "{host}");
        assert!(
            host.to_string()
                .contains(&format!("pid {}", std::process::id())),
            "names the reader: {host}"
        );
        drop(reader);
        DataLock::acquire(dir.path(), api()).expect("free again");
    }

    #[test]
    fn the_lock_is_released_when_dropped() {
        let dir = tempfile::tempdir().expect("tempdir");
        drop(DataLock::acquire(dir.path(), api()).expect("first lock"));
        DataLock::acquire(dir.path(), api()).expect("lock again after the holder let go");
    }

    #[test]
    fn a_lock_file_left_behind_does_not_block_and_is_rewritten() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join(LOCK_FILE);
        // What a killed host leaves: a file naming a process that is gone.
        std::fs::write(
            &path,
            "pid=999999\nstarted=2020-01-01T00:00:00Z\napi=10.0.0.1:1\n",
        )
        .expect("write stale lock file");
        let _held = DataLock::acquire(dir.path(), api()).expect("a stale file does not block");
        let text = std::fs::read_to_string(&path).expect("read lock file");
        assert!(
            text.starts_with(&format!("pid={}\n", std::process::id())),
            "{text}"
        );
        assert!(text.contains("api=127.0.0.1:7300\n"), "{text}");
        assert!(!text.contains("999999"), "{text}");
    }

    #[test]
    fn garbage_in_the_lock_file_names_no_holder() {
        for text in [
            "",
            "\0\u{fffd}garbage",
            "pid=abc\nstarted=yesterday\napi=nowhere",
        ] {
            let holder = Holder::parse(text);
            assert_eq!(holder, Holder::default(), "{text:?}");
            assert_eq!(holder.to_string(), "its details are not in the lock file");
        }
    }

    #[test]
    fn holder_details_round_trip_and_unknown_lines_are_ignored() {
        let holder = Holder {
            pid: Some(1234),
            started: Some(SystemTime::UNIX_EPOCH + Duration::from_secs(1_796_101_200)),
            api: Some(api()),
        };
        let dir = tempfile::tempdir().expect("tempdir");
        let mut file = File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(dir.path().join("holder"))
            .expect("open");
        holder.write(&mut file).expect("write");
        assert_eq!(Holder::read(&mut file), holder);
        assert_eq!(
            holder.to_string(),
            "pid 1234, started 2026-12-01T05:00:00Z, API http://127.0.0.1:7300"
        );
        let partial = Holder::parse("version=9\npid = 42\n");
        assert_eq!(partial.to_string(), "pid 42");
    }

    #[test]
    fn a_port_chosen_at_start_is_not_shown_as_port_zero() {
        let holder = Holder {
            api: Some(SocketAddr::from(([127, 0, 0, 1], 0))),
            ..Holder::default()
        };
        assert_eq!(holder.to_string(), "API on 127.0.0.1, port chosen at start");
    }
}
