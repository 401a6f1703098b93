//! The sandbox's handle: loading a component (compiled once, or read from
//! the compile cache) gives a [`HandlerVersion`], which owns its pre-linked
//! `InstancePre`. What every version shares (the wasmtime `Engine`, the
//! linkers, the epoch ticker, the cache) is [`crate::process`]'s.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use wasmtime::component::Component;

use crate::cache::{ArtifactSource, CacheStats};
use crate::config::{Limits, SandboxConfig};
use crate::digest::Digest;
use crate::error::{LoadError, SandboxError};
use crate::manifest::Manifest;
use crate::process::SandboxInner;
use crate::version::{DeclaredLimits, HandlerVersion, Settings};

/// The handler sandbox: cheap to clone, shared by the registry, the engine
/// and every loaded version.
#[derive(Clone)]
pub struct Sandbox {
    inner: Arc<SandboxInner>,
}

impl Sandbox {
    /// Builds the engine, the linker and the epoch ticker, and opens the
    /// compile cache if one is configured.
    pub fn new(config: SandboxConfig) -> Result<Self, SandboxError> {
        Ok(Self {
            inner: Arc::new(SandboxInner::new(config)?),
        })
    }

    /// The configuration the sandbox was built with.
    pub fn config(&self) -> &SandboxConfig {
        &self.inner.config
    }

    /// Cache hits and compilations since the sandbox started.
    pub fn cache_stats(&self) -> CacheStats {
        self.inner.counters.snapshot()
    }

    /// Loads the component at `path` with the manifest beside it
    /// (`<name>.toml`, optional), compiles it (or loads it from the cache),
    /// instantiates it and asks it which event types it handles.
    pub fn load_file(&self, path: &Path) -> Result<HandlerVersion, LoadError> {
        let bytes = std::fs::read(path).map_err(|source| LoadError::Read {
            path: path.to_owned(),
            source,
        })?;
        let manifest_path = path.with_extension("toml");
        let manifest = Manifest::read_optional(&manifest_path)?.unwrap_or_default();
        self.load_with_manifest(&handler_name(path), &bytes, &manifest_path, manifest)
    }

    /// Loads a component from bytes with a parsed manifest (`manifest_path`
    /// is only used to name the manifest in errors).
    pub(crate) fn load_with_manifest(
        &self,
        name: &str,
        bytes: &[u8],
        manifest_path: &Path,
        manifest: Manifest,
    ) -> Result<HandlerVersion, LoadError> {
        let limits = manifest.limits(manifest_path, &self.inner.config)?;
        let declared = DeclaredLimits::of(&manifest);
        self.load(name, bytes, limits, manifest.config, declared)
    }

    /// Loads a component from bytes with explicit limits and configuration.
    pub fn load_bytes(
        &self,
        name: &str,
        bytes: &[u8],
        limits: Limits,
        config: BTreeMap<String, String>,
    ) -> Result<HandlerVersion, LoadError> {
        let declared = DeclaredLimits::differing(&limits, &self.inner.config.default_limits);
        self.load(name, bytes, limits, config, declared)
    }

    fn load(
        &self,
        name: &str,
        bytes: &[u8],
        limits: Limits,
        config: BTreeMap<String, String>,
        declared: DeclaredLimits,
    ) -> Result<HandlerVersion, LoadError> {
        let digest = Digest::of(bytes);
        let (component, source) = self.compile(name, &digest, bytes)?;
        self.inner.counters.record(source);
        HandlerVersion::prepare(
            Arc::clone(&self.inner),
            name,
            digest,
            &component,
            source,
            Settings {
                limits,
                config: Arc::new(config),
                declared,
            },
        )
    }

    fn compile(
        &self,
        name: &str,
        digest: &Digest,
        bytes: &[u8],
    ) -> Result<(Component, ArtifactSource), LoadError> {
        // The parser's own message for this prints the expected and found
        // bytes as Debug arrays; a file that is not wasm at all (a text
        // file, an ELF binary, an empty file) deserves a plain sentence.
        if !bytes.starts_with(WASM_MAGIC) {
            let message = if bytes.is_empty() {
                "the file is empty"
            } else {
                "not a WebAssembly file (it does not start with \\0asm)"
            };
            return Err(LoadError::Compile {
                name: name.to_owned(),
                message: message.to_owned(),
            });
        }
        // wasmtime's message ("attempted to parse a wasm module with a
        // component parser") does not say how to get a component.
        if bytes.get(WASM_MAGIC.len()..WASM_MAGIC.len() + 4) == Some(CORE_MODULE_VERSION) {
            return Err(LoadError::Compile {
                name: name.to_owned(),
                message: "a core WebAssembly module, not a component: build the handler for \
                          `--target wasm32-wasip2` (a component), or make one of the module \
                          with `wasm-tools component new`"
                    .to_owned(),
            });
        }
        let compiled = match &self.inner.cache {
            Some(cache) => cache.load_or_compile(&self.inner.engine, digest, bytes),
            None => Component::new(&self.inner.engine, bytes)
                .map(|c| (c, ArtifactSource::CompiledUncached)),
        };
        compiled.map_err(|e| LoadError::Compile {
            name: name.to_owned(),
            message: format!("{e:#}"),
        })
    }
}

/// The first four bytes of every WebAssembly binary, module or component.
const WASM_MAGIC: &[u8] = b"\0asm";

/// The version field after the magic in a core module (a component's is
/// `0d 00 01 00`).
const CORE_MODULE_VERSION: &[u8] = &[1, 0, 0, 0];

/// The handler's name: the component's file name without `.wasm`.
pub(crate) fn handler_name(path: &Path) -> String {
    path.file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pool too large to map is refused in words, before wasmtime tries
    /// to reserve it (issue 40).
    #[test]
    fn a_pool_over_the_maximum_is_refused_before_it_is_mapped() {
        let config = SandboxConfig {
            max_concurrent_instances: 1_000_000_000,
            ..SandboxConfig::default()
        };
        match Sandbox::new(config) {
            Err(SandboxError::Config(why)) => assert_eq!(
                why,
                "max_concurrent_instances: 1000000000 is over the maximum of 10000"
            ),
            Err(other) => panic!("refused for another reason: {other}"),
            Ok(_) => panic!("a pool of a billion instances was accepted"),
        }
    }
}
