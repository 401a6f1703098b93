//! The endpoints an operator paused, kept in the data directory so a
//! restart does not resume them behind the operator's back.
//!
//! One switch per endpoint (created on first use, so an endpoint whose
//! handler arrives later starts paused if it was); the file
//! (`paused-endpoints.json`) is rewritten whole, to a temporary name and
//! renamed, at every change.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::SystemTime;

use anyhow::Context as _;
use nimbus_engine::{PauseSwitch, Paused, pause_switch};
use serde::{Deserialize, Serialize};

/// The file's name in the data directory.
pub(crate) const FILE_NAME: &str = "paused-endpoints.json";

/// What the file holds: each paused endpoint, with when it was paused
/// (milliseconds since the Unix epoch).
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Saved {
    paused: BTreeMap<String, i64>,
}

/// The pause switches of this host's endpoints.
#[derive(Debug)]
pub struct Pauses {
    path: PathBuf,
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    switches: BTreeMap<String, PauseSwitch>,
    /// Paused endpoints and since when, as the file has them.
    since: BTreeMap<String, i64>,
}

/// An endpoint's pause state, as the API shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PauseState {
    /// The endpoint.
    pub endpoint: String,
    /// Whether it is paused.
    pub paused: bool,
    /// Since when, in milliseconds since the Unix epoch, when paused.
    pub paused_since_ms: Option<i64>,
    /// Whether this request changed it.
    pub changed: bool,
}

impl Pauses {
    /// The pauses saved in `data_dir` (none when there is no file yet).
    ///
    /// # Errors
    ///
    /// When the file exists but cannot be read or is not what this host
    /// writes: starting would resume endpoints the operator paused.
    pub fn open(data_dir: &Path) -> anyhow::Result<Pauses> {
        let path = data_dir.join(FILE_NAME);
        let saved = match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice::<Saved>(&bytes).with_context(|| {
                format!(
                    "{} is not a list of paused endpoints; fix or remove it (removing it \
                     resumes every endpoint)",
                    path.display()
                )
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Saved::default(),
            Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
        };
        Ok(Pauses {
            path,
            inner: Mutex::new(Inner {
                switches: BTreeMap::new(),
                since: saved.paused,
            }),
        })
    }

    /// The processor's side of `endpoint`'s switch, paused if it was.
    pub fn reader(&self, endpoint: &str) -> Paused {
        let mut inner = self.lock();
        let paused = inner.since.contains_key(endpoint);
        inner
            .switches
            .entry(endpoint.to_owned())
            .or_insert_with(|| pause_switch(paused).0)
            .reader()
    }

    /// Pauses (`true`) or resumes `endpoint`, saving the change first: a
    /// change that cannot be saved is not made.
    ///
    /// # Errors
    ///
    /// When the file cannot be written.
    pub fn set(&self, endpoint: &str, paused: bool) -> anyhow::Result<PauseState> {
        let mut inner = self.lock();
        let was = inner.since.get(endpoint).copied();
        let changed = was.is_some() != paused;
        if changed {
            let mut since = inner.since.clone();
            if paused {
                since.insert(
                    endpoint.to_owned(),
                    nimbus_wire::unix_millis(SystemTime::now()),
                );
            } else {
                since.remove(endpoint);
            }
            self.save(&since)?;
            inner.since = since;
        }
        let switch = inner
            .switches
            .entry(endpoint.to_owned())
            .or_insert_with(|| pause_switch(paused).0);
        switch.set(paused);
        Ok(PauseState {
            endpoint: endpoint.to_owned(),
            paused,
            paused_since_ms: inner.since.get(endpoint).copied(),
            changed,
        })
    }

    /// Since when `endpoint` is paused, if it is.
    pub fn paused_since(&self, endpoint: &str) -> Option<i64> {
        self.lock().since.get(endpoint).copied()
    }

    fn save(&self, since: &BTreeMap<String, i64>) -> anyhow::Result<()> {
        let text = serde_json::to_vec_pretty(&Saved {
            paused: since.clone(),
        })
        .context("encoding the paused endpoints")?;
        let partial = self.path.with_extension("json.partial");
        std::fs::write(&partial, text)
            .and_then(|()| std::fs::File::open(&partial)?.sync_all())
            .and_then(|()| std::fs::rename(&partial, &self.path))
            .with_context(|| format!("saving the paused endpoints to {}", self.path.display()))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // The map is never left half-changed: a panic elsewhere while it
        // was held changes nothing in it.
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;

    #[test]
    fn a_pause_survives_reopening_and_a_resume_is_saved_too() {
        let dir = tempfile::tempdir().unwrap();
        let pauses = Pauses::open(dir.path()).unwrap();
        let sales = pauses.reader("sales");
        assert!(!sales.is_paused());
        let state = pauses.set("sales", true).unwrap();
        assert!(state.paused && state.changed && state.paused_since_ms.is_some());
        assert!(sales.is_paused(), "a running processor sees it");
        assert!(!pauses.set("sales", true).unwrap().changed);

        let reopened = Pauses::open(dir.path()).unwrap();
        assert!(reopened.reader("sales").is_paused());
        assert!(!reopened.reader("erp").is_paused());
        assert_eq!(reopened.paused_since("sales"), state.paused_since_ms);
        assert!(reopened.set("sales", false).unwrap().changed);
        assert!(
            !Pauses::open(dir.path())
                .unwrap()
                .reader("sales")
                .is_paused()
        );
    }

    #[test]
    fn a_file_this_host_did_not_write_stops_the_start_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(FILE_NAME), "{\"paused\": [\"sales\"]}").unwrap();
        let error = format!("{:#}", Pauses::open(dir.path()).unwrap_err());
        assert!(
            error.contains(FILE_NAME) && error.contains("is not a list of paused endpoints"),
            "{error}"
        );
    }
}
