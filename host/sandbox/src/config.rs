//! Sandbox-wide settings and per-handler limits. `nimbus.toml` (a later part)
//! fills a [`SandboxConfig`]; a handler's manifest overrides its [`Limits`].

use std::path::PathBuf;
use std::time::Duration;

use serde::Serialize;

/// Default linear memory per handler instance: enough for serde-heavy Rust
/// handlers, small enough that a runaway handler cannot hurt the host.
pub const DEFAULT_MEMORY_BYTES: u64 = 64 << 20;
/// Default wall-clock deadline per event; also the host's `[sandbox]
/// timeout` default, so `nimbus invoke` runs a handler as the host would.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// Default core instances per store. A Rust `wasm32-wasip2` component uses a
/// handful (the module plus the shims `wit-component` adds).
pub const DEFAULT_INSTANCES: u32 = 16;
/// Default tables per store.
pub const DEFAULT_TABLES: u32 = 16;
/// The most core instances a manifest may allow (the pool's per-component cap).
pub const MAX_INSTANCES: u32 = 32;
/// The most tables a manifest may allow (the pool's per-component cap).
pub const MAX_TABLES: u32 = 32;

/// The limits one handler runs under, per event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Limits {
    /// Bytes of linear memory (across the instance's memories).
    pub memory_bytes: u64,
    /// Wall-clock deadline for instantiation plus the call.
    #[serde(serialize_with = "serialize_duration_ms")]
    pub timeout: Duration,
    /// Core instances per store.
    pub instances: u32,
    /// Tables per store.
    pub tables: u32,
}

fn serialize_duration_ms<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_u128(d.as_millis())
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            memory_bytes: DEFAULT_MEMORY_BYTES,
            timeout: DEFAULT_TIMEOUT,
            instances: DEFAULT_INSTANCES,
            tables: DEFAULT_TABLES,
        }
    }
}

/// Settings for the whole sandbox.
#[derive(Clone, Debug)]
pub struct SandboxConfig {
    /// Limits for handlers whose manifest does not set them.
    pub default_limits: Limits,
    /// The most linear memory any manifest may ask for; also the size of a
    /// pool slot. A manifest asking for more is a load error.
    pub max_memory_bytes: u64,
    /// How many handler instances may run at once (the pool's size; as many
    /// fiber stacks are reserved for calls on the async executor), at most
    /// [`MAX_CONCURRENT_INSTANCES`].
    pub max_concurrent_instances: u32,
    /// The epoch tick: the granularity of deadlines, and the longest slice
    /// of CPU a handler called asynchronously runs before it yields its
    /// thread (decision 0106).
    pub epoch_tick: Duration,
    /// Linear memory kept resident (not returned to the OS) when a pool slot
    /// is reused: what the next instance touches first (stack, data) stays
    /// mapped, which is most of the per-event cost otherwise.
    pub keep_resident_bytes: usize,
    /// Reset reused pool slots with Linux's `PAGEMAP_SCAN` (kernel 6.7+,
    /// ignored elsewhere): only the pages the last instance dirtied are
    /// restored, instead of the whole resident prefix. Off by default: for a
    /// handler whose memory use fits in the resident prefix, the scan's
    /// ioctl costs more than zeroing the prefix saves (about 0.5 µs of 11
    /// per event, docs/decisions/0003-dispatch-cost.md). Worth turning on
    /// when handlers touch far more than `keep_resident_bytes`, or touch it
    /// sparsely: the scan then resets only dirty pages wherever they are.
    pub pagemap_scan: bool,
    /// Where compiled artifacts are cached; `None` compiles every load.
    pub cache_dir: Option<PathBuf>,
    /// How long the directory watcher waits for quiet before reloading.
    pub watch_debounce: Duration,
    /// How long a handler whose component file was deleted keeps serving
    /// before its event types are unregistered, so that a deploy that
    /// deletes the old file and then copies the new one is a swap, not a
    /// removal that drops the events published in between. Zero unregisters
    /// at the deletion.
    pub removal_grace: Duration,
}

/// Default upper bound for a manifest's memory limit.
pub const DEFAULT_MAX_MEMORY_BYTES: u64 = 1 << 30;
/// Default pool size.
pub const DEFAULT_MAX_CONCURRENT_INSTANCES: u32 = 200;
/// The largest pool: each slot reserves address space for two linear
/// memories (wasmtime's 4 GiB reservation plus guard each, about 8 GiB),
/// so 10,000 slots reserve about 80 TiB of the 128 TiB a 64-bit Linux
/// process can address, and a pool much larger fails to map at start
/// (issue 40).
pub const MAX_CONCURRENT_INSTANCES: u32 = 10_000;
/// Default epoch tick (as Spin does).
pub const DEFAULT_EPOCH_TICK: Duration = Duration::from_millis(10);
/// Default resident memory kept per pool slot.
pub const DEFAULT_KEEP_RESIDENT_BYTES: usize = 256 << 10;
/// Default [`SandboxConfig::removal_grace`]: longer than a deploy script
/// takes between deleting a file and copying its replacement.
pub const DEFAULT_REMOVAL_GRACE: Duration = Duration::from_secs(30);
/// The longest [`SandboxConfig::removal_grace`] (a longer one is this long):
/// a day, far past any deploy, and a time the clock can always add.
pub const MAX_REMOVAL_GRACE: Duration = Duration::from_secs(24 * 60 * 60);
/// Default watcher quiet period: long enough to coalesce the events of one
/// write-then-rename, short enough to keep swap latency low.
pub const DEFAULT_WATCH_DEBOUNCE: Duration = Duration::from_millis(20);

impl Default for SandboxConfig {
    fn default() -> Self {
        Self {
            default_limits: Limits::default(),
            max_memory_bytes: DEFAULT_MAX_MEMORY_BYTES,
            max_concurrent_instances: DEFAULT_MAX_CONCURRENT_INSTANCES,
            epoch_tick: DEFAULT_EPOCH_TICK,
            keep_resident_bytes: DEFAULT_KEEP_RESIDENT_BYTES,
            pagemap_scan: false,
            cache_dir: None,
            watch_debounce: DEFAULT_WATCH_DEBOUNCE,
            removal_grace: DEFAULT_REMOVAL_GRACE,
        }
    }
}
