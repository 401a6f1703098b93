//! The process-wide scope (STYLE habit 4): one wasmtime `Engine` (pooling
//! allocator, epoch interruption), two `Linker`s with every host import
//! added once (one for synchronous calls, one for calls on an async
//! executor), the epoch ticker and the compile cache. Every loaded version
//! holds it; [`Sandbox`](crate::Sandbox) is the cheap handle to it.

use wasmtime::component::Linker;
use wasmtime::{Config, Enabled, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

use crate::cache::{ArtifactCache, Counters};
use crate::config::{MAX_CONCURRENT_INSTANCES, MAX_INSTANCES, MAX_TABLES, SandboxConfig};
use crate::error::SandboxError;
use crate::state::InvocationState;
use crate::ticker::EpochTicker;

/// Core instances the pool reserves per concurrent component instance, on
/// average: a Rust `wasm32-wasip2` component has the main module plus a few
/// shim modules. The pool's totals are this times the slot count.
const CORE_INSTANCES_PER_SLOT: u32 = 8;
/// Tables the pool reserves per slot, on average.
const TABLES_PER_SLOT: u32 = 4;
/// Memories per component instance (and per slot): a Rust component has one.
const MEMORIES_PER_COMPONENT: u32 = 2;

/// What every loaded version shares.
pub(crate) struct SandboxInner {
    pub(crate) engine: Engine,
    pub(crate) linker: Linker<InvocationState>,
    pub(crate) linker_async: Linker<InvocationState>,
    pub(crate) config: SandboxConfig,
    pub(crate) cache: Option<ArtifactCache>,
    pub(crate) counters: Counters,
    _ticker: EpochTicker,
}

impl SandboxInner {
    /// Builds the engine, the linkers and the epoch ticker, and opens the
    /// compile cache if one is configured.
    pub(crate) fn new(config: SandboxConfig) -> Result<SandboxInner, SandboxError> {
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
        Ok(SandboxInner {
            engine,
            linker,
            linker_async,
            config,
            cache,
            counters: Counters::default(),
            _ticker: ticker,
        })
    }
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
