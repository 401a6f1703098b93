//! Per-store resource limits that also remember which limit was hit, so a
//! trap that follows a refused `memory.grow` is reported as `MemoryLimit`
//! rather than as the bare trap the guest's allocator turns it into.

use crate::config::Limits;

/// Table elements per table: generous for real toolchains (wasmtime's pool
/// default), bounded so a table cannot be used to exhaust host memory.
pub(crate) const MAX_TABLE_ELEMENTS: usize = 20_000;
/// Linear memories per store: a Rust component has one; a few spare.
pub(crate) const MAX_MEMORIES: usize = 4;

/// The store's `ResourceLimiter`.
pub(crate) struct HandlerLimiter {
    memory_bytes: usize,
    instances: usize,
    tables: usize,
    /// The size the guest asked for when memory growth was refused.
    memory_refused_at: Option<usize>,
}

impl HandlerLimiter {
    pub(crate) fn new(limits: &Limits) -> Self {
        Self {
            memory_bytes: usize::try_from(limits.memory_bytes).unwrap_or(usize::MAX),
            instances: limits.instances as usize,
            tables: limits.tables as usize,
            memory_refused_at: None,
        }
    }

    /// The desired size of the first refused memory growth, if any.
    pub(crate) fn memory_refused_at(&self) -> Option<usize> {
        self.memory_refused_at
    }
}

impl wasmtime::ResourceLimiter for HandlerLimiter {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.memory_bytes {
            self.memory_refused_at.get_or_insert(desired);
            return Ok(false);
        }
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= MAX_TABLE_ELEMENTS)
    }

    fn instances(&self) -> usize {
        self.instances
    }

    fn tables(&self) -> usize {
        self.tables
    }

    fn memories(&self) -> usize {
        MAX_MEMORIES
    }
}
