//! The process-wide part: one wasmtime `Engine` (pooling allocator, epoch
//! interruption), two `Linker`s with every host import added once (one for
//! synchronous calls, one for calls on an async executor), the epoch
//! ticker and the compile cache. Loading a component gives a
//! [`HandlerVersion`], which owns its pre-linked `InstancePre`.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use wasmtime::component::{Component, Linker};
use wasmtime::{Config, Enabled, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

use crate::cache::{ArtifactCache, ArtifactSource, CacheStats, Counters};
use crate::config::{Limits, MAX_CONCURRENT_INSTANCES, MAX_INSTANCES, MAX_TABLES, SandboxConfig};
use crate::digest::Digest;
use crate::error::{LoadError, SandboxError};
use crate::manifest::Manifest;
use crate::state::InvocationState;
use crate::ticker::EpochTicker;
use crate::version::{DeclaredLimits, HandlerVersion, Settings};

/// Core instances the pool reserves per concurrent component instance, on
/// average: a Rust `wasm32-wasip2` component has the main module plus a few
/// shim modules. The pool's totals are this times the slot count.
const CORE_INSTANCES_PER_SLOT: u32 = 8;
/// Tables the pool reserves per slot, on average.
const TABLES_PER_SLOT: u32 = 4;
/// Memories per component instance (and per slot): a Rust component has one.
const MEMORIES_PER_COMPONENT: u32 = 2;

/// The handler sandbox: cheap to clone, shared by the registry, the engine
/// and every loaded version.
#[derive(Clone)]
pub struct Sandbox {
    inner: Arc<SandboxInner>,
}

pub(crate) struct SandboxInner {
    pub(crate) engine: Engine,
    pub(crate) linker: Linker<InvocationState>,
    pub(crate) linker_async: Linker<InvocationState>,
    pub(crate) config: SandboxConfig,
    cache: Option<ArtifactCache>,
    counters: Counters,
    _ticker: EpochTicker,
}

impl Sandbox {
    /// Builds the engine, the linker and the epoch ticker, and opens the
    /// compile cache if one is configured.
    pub fn new(config: SandboxConfig) -> Result<Self, SandboxError> {
        if config.epoch_tick.is_zero() {
            return Err(SandboxError::Config(
                "epoch_tick must be more than zero".to_owned(),
            ));
        }
        if config.default_limits.memory_bytes > config.max_memory_bytes {
            return Err(SandboxError::Config(format!(
                "default memory limit {} is over max_memory_bytes {}",
                config.default_limits.memory_bytes, config.max_memory_bytes
            )));
        }
        let engine = Engine::new(&engine_config(&config)?)
            .map_err(|e| SandboxError::Engine(format!("{e:#}")))?;
        let mut linker = Linker::new(&engine);
        crate::host::add_to_linker(&mut linker)
            .map_err(|e| SandboxError::Engine(format!("{e:#}")))?;
        let mut linker_async = Linker::new(&engine);
        crate::host::add_to_linker_async(&mut linker_async)
            .map_err(|e| SandboxError::Engine(format!("{e:#}")))?;
        let cache = match &config.cache_dir {
            Some(dir) => Some(ArtifactCache::open(dir, &engine).map_err(|source| {
                SandboxError::CacheDir {
                    path: dir.clone(),
                    source,
                }
            })?),
            None => None,
        };
        let ticker = EpochTicker::start(engine.clone(), config.epoch_tick)
            .map_err(|e| SandboxError::Engine(format!("cannot start the epoch ticker: {e}")))?;
        Ok(Self {
            inner: Arc::new(SandboxInner {
                engine,
                linker,
                linker_async,
                config,
                cache,
                counters: Counters::default(),
                _ticker: ticker,
            }),
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

fn engine_config(config: &SandboxConfig) -> Result<Config, SandboxError> {
    let slots = config.max_concurrent_instances;
    if slots == 0 {
        return Err(SandboxError::Config(
            "max_concurrent_instances must be at least 1".to_owned(),
        ));
    }
    if slots > MAX_CONCURRENT_INSTANCES {
        // Refused in words rather than as the mmap failure a pool this
        // large meets.
        return Err(SandboxError::Config(format!(
            "max_concurrent_instances: {slots} is over the maximum of {MAX_CONCURRENT_INSTANCES}"
        )));
    }
    let max_memory = usize::try_from(config.max_memory_bytes).map_err(|_| {
        SandboxError::Config("max_memory_bytes does not fit this machine".to_owned())
    })?;
    let mut pool = PoolingAllocationConfig::default();
    pool.total_component_instances(slots)
        .total_core_instances(slots.saturating_mul(CORE_INSTANCES_PER_SLOT))
        .total_memories(slots.saturating_mul(MEMORIES_PER_COMPONENT))
        .total_tables(slots.saturating_mul(TABLES_PER_SLOT))
        .max_memories_per_component(MEMORIES_PER_COMPONENT)
        .max_tables_per_component(MAX_TABLES)
        .max_core_instances_per_component(MAX_INSTANCES)
        .max_memory_size(max_memory)
        // One fiber stack per instance called asynchronously. Never zeroed
        // nor decommitted on return (wasmtime's defaults), so a reused stack
        // costs no page faults.
        .total_stacks(slots)
        .linear_memory_keep_resident(config.keep_resident_bytes)
        .table_keep_resident(config.keep_resident_bytes)
        .pagemap_scan(if config.pagemap_scan {
            Enabled::Auto
        } else {
            Enabled::No
        });
    let mut wasm = Config::new();
    wasm.allocation_strategy(InstanceAllocationStrategy::Pooling(pool))
        .epoch_interruption(true)
        .memory_init_cow(true);
    Ok(wasm)
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
