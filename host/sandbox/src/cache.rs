//! The on-disk cache of compiled components, keyed by the component's SHA-256
//! digest and the engine's compatibility hash, so a restart (or a hot swap
//! back to a known version) deserializes in well under a millisecond instead
//! of compiling for tens of milliseconds.
//!
//! Entries are written to a temporary file and renamed into place, and are
//! never modified afterwards: `Component::deserialize_file` maps the file and
//! requires exactly that.

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;
use sha2::Digest as _;
use wasmtime::Engine;
use wasmtime::component::Component;

use crate::digest::Digest;

/// Where a loaded version's compiled code came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ArtifactSource {
    /// Deserialized from the on-disk cache: no compilation.
    CacheHit,
    /// Compiled now, and written to the cache.
    Compiled,
    /// Compiled now; no cache is configured (or writing to it failed).
    CompiledUncached,
}

/// Counters of the cache since the sandbox started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct CacheStats {
    /// Loads served from the cache.
    pub hits: u64,
    /// Loads that compiled.
    pub compiles: u64,
}

#[derive(Default)]
pub(crate) struct Counters {
    hits: AtomicU64,
    compiles: AtomicU64,
}

impl Counters {
    pub(crate) fn record(&self, source: ArtifactSource) {
        let counter = match source {
            ArtifactSource::CacheHit => &self.hits,
            ArtifactSource::Compiled | ArtifactSource::CompiledUncached => &self.compiles,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self) -> CacheStats {
        CacheStats {
            hits: self.hits.load(Ordering::Relaxed),
            compiles: self.compiles.load(Ordering::Relaxed),
        }
    }
}

/// The cache directory plus the engine's compatibility key.
pub(crate) struct ArtifactCache {
    dir: PathBuf,
    engine_key: String,
}

/// Feeds `Hash` output into SHA-256, so the engine's compatibility hash
/// becomes a stable file-name component (std's `DefaultHasher` is not stable
/// across Rust releases).
struct Sha256Hasher(sha2::Sha256);

impl Hasher for Sha256Hasher {
    fn finish(&self) -> u64 {
        let digest = self.0.clone().finalize();
        let mut first = [0u8; 8];
        first.copy_from_slice(&digest[..8]);
        u64::from_le_bytes(first)
    }

    fn write(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }
}

impl ArtifactCache {
    pub(crate) fn open(dir: &Path, engine: &Engine) -> std::io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        let mut hasher = Sha256Hasher(sha2::Sha256::new());
        engine.precompile_compatibility_hash().hash(&mut hasher);
        Ok(Self {
            dir: dir.to_owned(),
            engine_key: format!("{:016x}", hasher.finish()),
        })
    }

    fn entry(&self, digest: &Digest) -> PathBuf {
        self.dir
            .join(format!("{}-{}.cwasm", digest.hex(), self.engine_key))
    }

    /// The compiled component for `bytes`, from the cache if present.
    pub(crate) fn load_or_compile(
        &self,
        engine: &Engine,
        digest: &Digest,
        bytes: &[u8],
    ) -> wasmtime::Result<(Component, ArtifactSource)> {
        let entry = self.entry(digest);
        if entry.exists() {
            // SAFETY: the cache directory is ours: entries are written only by
            // `store` below from `Component::serialize` output, by write then
            // rename, and never modified in place. The key includes the
            // engine's compatibility hash, and wasmtime rejects artifacts of
            // other versions with an error, not UB.
            #[allow(
                unsafe_code,
                reason = "deserializing our own cache entries, see SAFETY"
            )]
            let loaded = unsafe { Component::deserialize_file(engine, &entry) };
            match loaded {
                Ok(component) => return Ok((component, ArtifactSource::CacheHit)),
                Err(error) => tracing::warn!(
                    entry = %entry.display(),
                    %error,
                    "unusable compile cache entry; recompiling"
                ),
            }
        }
        let component = Component::new(engine, bytes)?;
        let source = match self.store(&entry, &component) {
            Ok(()) => ArtifactSource::Compiled,
            Err(error) => {
                tracing::warn!(entry = %entry.display(), %error, "cannot write compile cache entry");
                ArtifactSource::CompiledUncached
            }
        };
        Ok((component, source))
    }

    fn store(&self, entry: &Path, component: &Component) -> std::io::Result<()> {
        let serialized = component
            .serialize()
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        // Unique per process and per write, so concurrent writers of one
        // entry never share a temporary file; the rename decides the winner.
        static NEXT_TEMP: AtomicU64 = AtomicU64::new(0);
        let temp = self.dir.join(format!(
            ".{}.{}.{}.tmp",
            entry
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or("entry"),
            std::process::id(),
            NEXT_TEMP.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::write(&temp, &serialized)?;
        std::fs::rename(&temp, entry).inspect_err(|_| {
            let _ = std::fs::remove_file(&temp);
        })
    }
}
