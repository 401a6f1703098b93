//! The per-event store data, and the narrow views through which each host
//! interface reaches it (one view per WIT interface, STYLE habit 6).

use std::collections::BTreeMap;
use std::sync::Arc;

use nimbus_handler::{Delivery, FollowUp};
use wasmtime::component::ResourceTable;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use crate::config::Limits;
use crate::digest::Digest;
use crate::invocation::LogRecord;
use crate::limiter::HandlerLimiter;
use crate::stdio::CapturedOutput;

/// Who is running, for tagging log records and tracing events.
#[derive(Clone, Debug)]
pub(crate) struct InvocationTags {
    /// The endpoint whose handlers directory it was loaded from, if any.
    pub(crate) endpoint: Option<Arc<str>>,
    pub(crate) handler: Arc<str>,
    pub(crate) digest: Digest,
    /// The whole version id (digest and settings), for log lines.
    pub(crate) version_id: Arc<str>,
    pub(crate) event_id: String,
    pub(crate) session_id: String,
}

/// Log records written so far in this invocation.
pub(crate) struct LogCapture {
    pub(crate) tags: InvocationTags,
    pub(crate) records: Vec<LogRecord>,
    /// Records dropped over the per-event bound.
    pub(crate) dropped: usize,
}

/// Follow-up events held for settlement.
#[derive(Default)]
pub(crate) struct Outbox {
    pub(crate) follow_ups: Vec<FollowUp>,
    pub(crate) bytes: usize,
}

/// The guest's WASI context and the captured streams it writes to.
pub(crate) struct Stdio {
    wasi: WasiCtx,
    pub(crate) stdout: CapturedOutput,
    pub(crate) stderr: CapturedOutput,
}

impl Stdio {
    fn new() -> Self {
        let stdout = CapturedOutput::default();
        let stderr = CapturedOutput::default();
        // Nothing granted: no preopened directories, no environment, no
        // arguments, no network, stdin empty; stdio captured, not inherited.
        let wasi = WasiCtx::builder()
            .stdout(stdout.clone())
            .stderr(stderr.clone())
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false)
            .build();
        Self {
            wasi,
            stdout,
            stderr,
        }
    }
}

/// Everything one store holds for one event.
pub(crate) struct InvocationState {
    /// Built on the guest's first WASI call, not with the store: most events
    /// never touch WASI, and building the context (it seeds its random
    /// generators from the thread's RNG and boxes a dozen defaults) and the
    /// two capture buffers was ~5 k instructions of an event that does not
    /// (docs/decisions/0003-dispatch-cost.md).
    pub(crate) stdio: Option<Stdio>,
    table: ResourceTable,
    pub(crate) limiter: HandlerLimiter,
    pub(crate) log: LogCapture,
    pub(crate) panic_message: Option<String>,
    pub(crate) outbox: Outbox,
    pub(crate) config: Arc<BTreeMap<String, String>>,
    /// What the `delivery` interface answers; `None` while the host asks
    /// for `subscriptions`, when there is no event.
    pub(crate) delivery: Option<Delivery>,
}

impl InvocationState {
    pub(crate) fn new(
        tags: InvocationTags,
        limits: &Limits,
        config: Arc<BTreeMap<String, String>>,
    ) -> Self {
        Self {
            stdio: None,
            table: ResourceTable::new(),
            limiter: HandlerLimiter::new(limits),
            log: LogCapture {
                tags,
                records: Vec::new(),
                dropped: 0,
            },
            panic_message: None,
            outbox: Outbox::default(),
            config,
            delivery: None,
        }
    }

    pub(crate) fn log_view(&mut self) -> LogView<'_> {
        LogView {
            capture: &mut self.log,
            panic_message: &mut self.panic_message,
        }
    }

    pub(crate) fn publish_view(&mut self) -> PublishView<'_> {
        PublishView {
            outbox: &mut self.outbox,
        }
    }

    pub(crate) fn config_view(&mut self) -> ConfigView<'_> {
        ConfigView {
            config: &self.config,
        }
    }

    pub(crate) fn delivery_view(&mut self) -> DeliveryView<'_> {
        DeliveryView {
            delivery: self.delivery.as_ref(),
        }
    }
}

impl WasiView for InvocationState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.stdio.get_or_insert_with(Stdio::new).wasi,
            table: &mut self.table,
        }
    }
}

/// What the `log` interface may touch.
pub(crate) struct LogView<'a> {
    pub(crate) capture: &'a mut LogCapture,
    pub(crate) panic_message: &'a mut Option<String>,
}

/// What the `publish` interface may touch.
pub(crate) struct PublishView<'a> {
    pub(crate) outbox: &'a mut Outbox,
}

/// What the `config` interface may touch.
pub(crate) struct ConfigView<'a> {
    pub(crate) config: &'a BTreeMap<String, String>,
}

/// What the `delivery` interface may touch.
pub(crate) struct DeliveryView<'a> {
    pub(crate) delivery: Option<&'a Delivery>,
}
