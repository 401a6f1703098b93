//! One loaded handler version: its pre-linked `InstancePre`, its limits and
//! configuration, and the event types it declared. Every event runs in a
//! fresh `Store` and instance made from it.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nimbus_handler::{Event, Report};
use wasmtime::component::Component;
use wasmtime::{Store, Trap, UpdateDeadline};

use crate::bindings::asynchronous::HandlerPre as AsyncHandlerPre;
use crate::bindings::{HandlerPre, types};
use crate::cache::ArtifactSource;
use crate::classify::classify;
use crate::config::Limits;
use crate::digest::Digest;
use crate::error::LoadError;
use crate::host::convert::{event_to_wit, result_from_wit};
use crate::host::log::ShortId;
use crate::invocation::{Invocation, LogLevel, LogRecord, LogSource};
use crate::manifest::Manifest;
use crate::process::SandboxInner;
use crate::state::{InvocationState, InvocationTags};

/// Event types one component may declare.
pub(crate) const MAX_EVENT_TYPES: usize = 256;

/// A handler version ready to run events. Share it as `Arc<HandlerVersion>`:
/// an invocation that started on a version finishes on it even if the
/// registry has swapped in another meanwhile.
pub struct HandlerVersion {
    sandbox: Arc<SandboxInner>,
    /// The endpoint it serves, when a registry loaded it: log lines name
    /// it, since one component may serve several endpoints.
    endpoint: Option<Arc<str>>,
    name: Arc<str>,
    digest: Digest,
    /// What outcomes record: the digest, plus the settings' when they differ
    /// from the defaults (see [`HandlerVersion::id`]).
    id: Arc<str>,
    limits: Limits,
    config: Arc<BTreeMap<String, String>>,
    event_types: Vec<String>,
    imports: Vec<String>,
    exports: Vec<String>,
    source: ArtifactSource,
    pre: HandlerPre<InvocationState>,
    /// The same component linked for [`HandlerVersion::invoke_async`].
    pre_async: AsyncHandlerPre<InvocationState>,
}

impl fmt::Debug for HandlerVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HandlerVersion")
            .field("name", &self.name)
            .field("digest", &self.digest)
            .field("event_types", &self.event_types)
            .field("limits", &self.limits)
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

impl HandlerVersion {
    /// Links, instantiates once and asks for the subscriptions.
    pub(crate) fn prepare(
        sandbox: Arc<SandboxInner>,
        name: &str,
        digest: Digest,
        component: &Component,
        source: ArtifactSource,
        settings: Settings,
    ) -> Result<Self, LoadError> {
        let Settings {
            limits,
            config,
            declared,
        } = settings;
        let link_error = |e: wasmtime::Error| LoadError::Link {
            name: name.to_owned(),
            message: format!("{e:#}"),
        };
        let instance_pre = sandbox
            .linker
            .instantiate_pre(component)
            .map_err(link_error)?;
        let pre = HandlerPre::new(instance_pre).map_err(link_error)?;
        let instance_pre_async = sandbox
            .linker_async
            .instantiate_pre(component)
            .map_err(link_error)?;
        let pre_async = AsyncHandlerPre::new(instance_pre_async).map_err(link_error)?;
        let component_type = component.component_type();
        let imports = component_type
            .imports(&sandbox.engine)
            .map(|(name, _)| name.to_owned())
            .collect();
        let exports = component_type
            .exports(&sandbox.engine)
            .map(|(name, _)| name.to_owned())
            .collect();
        let id = version_id(&digest, &declared, &config);
        let mut version = Self {
            sandbox,
            name: Arc::from(name),
            digest,
            id: Arc::from(id),
            limits,
            config,
            event_types: Vec::new(),
            imports,
            exports,
            source,
            pre,
            pre_async,
            endpoint: None,
        };
        version.event_types = version.subscriptions()?;
        Ok(version)
    }

    fn subscriptions(&self) -> Result<Vec<String>, LoadError> {
        let validate_error = |message: String| LoadError::Validate {
            name: self.name.to_string(),
            message,
        };
        // On a thread of its own, with a runtime of its own: loading is
        // called from the registry's watcher thread and from async code
        // alike, and the yielding call (whose waits in WASI the deadline
        // cuts off, unlike a synchronous call's) needs a runtime to poll it.
        let declared = std::thread::scope(|scope| {
            std::thread::Builder::new()
                .name("nimbus-load".to_owned())
                .spawn_scoped(scope, || self.call_subscriptions())
                .map_err(|e| format!("cannot start a thread to call `subscriptions`: {e}"))?
                .join()
                .map_err(|_| "calling `subscriptions` panicked in the host".to_owned())?
        })
        .map_err(validate_error)?;
        check_declared(&declared).map_err(validate_error)?;
        Ok(declared)
    }

    /// Instantiates the component and calls `subscriptions` under the
    /// version's limits and deadline, as an event's call would run.
    fn call_subscriptions(&self) -> Result<Vec<String>, String> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .map_err(|e| format!("cannot start a runtime to call `subscriptions`: {e}"))?;
        let deadline = Instant::now() + self.limits.timeout;
        let mut store = self.new_yielding_store(
            InvocationTags {
                endpoint: self.endpoint.clone(),
                handler: Arc::clone(&self.name),
                digest: self.digest,
                version_id: Arc::clone(&self.id),
                event_id: String::new(),
                session_id: String::new(),
            },
            deadline,
        );
        let call = async {
            let handler = self.pre_async.instantiate_async(&mut store).await?;
            handler
                .nimbus_handler_dispatch()
                .call_subscriptions(&mut store)
                .await
        };
        let cut_off = deadline + self.sandbox.config.epoch_tick;
        let called = runtime.block_on(async {
            tokio::time::timeout_at(tokio::time::Instant::from_std(cut_off), call)
                .await
                .unwrap_or_else(|_| Err(wasmtime::Error::from(Trap::Interrupt)))
        });
        called.map_err(|e| {
            let error = classify(&e, store.data(), &self.limits);
            format!(
                "instantiating it and calling `subscriptions` failed: {}: {}",
                error.error_type, error.message
            )
        })
    }

    /// A store under this version's limits, with no epoch behaviour yet.
    fn limited_store(&self, tags: InvocationTags) -> Store<InvocationState> {
        let state = InvocationState::new(tags, &self.limits, Arc::clone(&self.config));
        let mut store = Store::new(&self.sandbox.engine, state);
        store.limiter(|state| &mut state.limiter);
        store
    }

    /// A store for synchronous calls: it traps at the deadline.
    fn new_store(&self, tags: InvocationTags) -> Store<InvocationState> {
        let mut store = self.limited_store(tags);
        store.set_epoch_deadline(self.deadline_ticks());
        store.epoch_deadline_trap();
        store
    }

    /// A store for [`Self::invoke_async`]: at every epoch tick the handler
    /// yields to the executor, so a long handler shares its thread with the
    /// tasks beside it; at `deadline` it traps as [`Self::new_store`]'s
    /// does (a `Timeout`).
    fn new_yielding_store(
        &self,
        tags: InvocationTags,
        deadline: Instant,
    ) -> Store<InvocationState> {
        let mut store = self.limited_store(tags);
        store.set_epoch_deadline(1);
        // After a yield the deadline is due again at once (delta 0), so the
        // clock is read as soon as the handler runs again: a deadline that
        // passed while the task waited in the run queue stops it there,
        // instead of after one more tick of guest code.
        let mut just_resumed = false;
        store.epoch_deadline_callback(move |_| {
            if Instant::now() >= deadline {
                return Ok(UpdateDeadline::Interrupt);
            }
            if std::mem::take(&mut just_resumed) {
                return Ok(UpdateDeadline::Continue(1));
            }
            just_resumed = true;
            // Tokio's own yield, so the task's cooperative budget and the
            // scheduler's fairness see it.
            Ok(UpdateDeadline::YieldCustom(
                0,
                Box::pin(tokio::task::yield_now()),
            ))
        });
        store
    }

    /// The deadline in epoch ticks, rounded up, plus one because the next
    /// tick may come at any moment after the store is created.
    fn deadline_ticks(&self) -> u64 {
        let tick = self.sandbox.config.epoch_tick.as_nanos().max(1);
        let ticks = self.limits.timeout.as_nanos().div_ceil(tick);
        u64::try_from(ticks).unwrap_or(u64::MAX).saturating_add(1)
    }

    /// Runs one event in a fresh instance, under this version's limits.
    ///
    /// Synchronous and CPU-bound: call it from a blocking thread (e.g.
    /// `tokio::task::spawn_blocking`), not from an async task. It never
    /// panics on guest behaviour: traps, overruns and refused resources come
    /// back as `failed` errors in the [`Invocation::report`]'s result.
    pub fn invoke(&self, event: Event) -> Invocation {
        let started = Instant::now();
        let mut store = self.new_store(self.tags(&event));
        let (event, delivery) = event_to_wit(event);
        store.data_mut().delivery = Some(delivery);
        let called = self.pre.instantiate(&mut store).and_then(|handler| {
            handler
                .nimbus_handler_dispatch()
                .call_handle(&mut store, &event)
        });
        self.finish(started, store, called)
    }

    /// Runs one event as [`Self::invoke`] does, on the async executor that
    /// polls the returned future: no thread hand-off per event. The handler
    /// runs on a fiber and yields at every epoch tick
    /// ([`crate::SandboxConfig::epoch_tick`]), so a slow handler delays the
    /// executor's other tasks by at most a tick at a time; limits, traps
    /// and the deadline are the same as [`Self::invoke`]'s.
    ///
    /// A guest waiting inside a WASI call (a sleep, a poll) runs no wasm,
    /// so no epoch check can stop it; the wait itself is cut off one epoch
    /// tick after the deadline, and that is a `Timeout` too. Dropping the
    /// future stops the handler and returns its instance slot.
    ///
    /// Poll it on a Tokio runtime with its timer enabled (WASI's host
    /// functions and the deadline use Tokio's).
    pub async fn invoke_async(&self, event: Event) -> Invocation {
        let started = Instant::now();
        let deadline = started + self.limits.timeout;
        let mut store = self.new_yielding_store(self.tags(&event), deadline);
        let (event, delivery) = event_to_wit(event);
        store.data_mut().delivery = Some(delivery);
        let call = async {
            let handler = self.pre_async.instantiate_async(&mut store).await?;
            handler
                .nimbus_handler_dispatch()
                .call_handle(&mut store, &event)
                .await
        };
        let cut_off = tokio::time::Instant::from_std(deadline + self.sandbox.config.epoch_tick);
        let called = tokio::time::timeout_at(cut_off, call)
            .await
            .unwrap_or_else(|_| Err(wasmtime::Error::from(Trap::Interrupt)));
        self.finish(started, store, called)
    }

    fn tags(&self, event: &Event) -> InvocationTags {
        InvocationTags {
            endpoint: self.endpoint.clone(),
            handler: Arc::clone(&self.name),
            digest: self.digest,
            version_id: Arc::clone(&self.id),
            event_id: event.event_id.clone(),
            session_id: event.session_id.clone(),
        }
    }

    /// The invocation's report, from what the call returned and what the
    /// store collected.
    fn finish(
        &self,
        started: Instant,
        store: Store<InvocationState>,
        called: wasmtime::Result<Result<types::Outcome, types::Error>>,
    ) -> Invocation {
        let result = match called {
            Ok(result) => result_from_wit(result),
            Err(error) => Err(classify(&error, store.data(), &self.limits)),
        };
        let duration = started.elapsed();
        // Dropping the store returns the instance's pool slot.
        let mut state = store.into_data();
        collect_stdio(&mut state);
        if state.log.dropped > 0 {
            let dropped = state.log.dropped;
            state.log.records.push(LogRecord {
                level: LogLevel::Warn,
                source: LogSource::Sandbox,
                message: format!("{dropped} more log records were dropped (per-event bound)"),
                fields: Vec::new(),
            });
        }
        if let Err(error) = &result {
            tracing::debug!(
                handler = &*self.name,
                version = %ShortId { digest: &self.digest, id: &self.id },
                event_id = %state.log.tags.event_id,
                %error,
                "handler returned an error"
            );
        }
        Invocation {
            report: Report {
                result,
                follow_ups: state.outbox.follow_ups,
                version: self.id.to_string(),
            },
            logs: state.log.records,
            digest: self.digest,
            handler: self.name.to_string(),
            duration,
        }
    }

    /// The same version, serving `endpoint` (its log lines say so).
    #[must_use]
    pub fn at_endpoint(mut self, endpoint: &str) -> Self {
        self.endpoint = Some(Arc::from(endpoint));
        self
    }

    /// The endpoint it serves, when a registry loaded it.
    pub fn endpoint(&self) -> Option<&str> {
        self.endpoint.as_deref()
    }

    /// The handler's name (the component's file name without `.wasm`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The SHA-256 digest of the component: the version's identity.
    pub fn digest(&self) -> Digest {
        self.digest
    }

    /// The version as outcomes record it: `sha256:<hex>` of the component,
    /// followed by `+<12 hex>` of its effective settings (limits and
    /// `[config]`) when a manifest changes them from the sandbox's defaults.
    /// A manifest-only fix thus shows as a new version in the audit trail,
    /// and the same component with the same settings is always the same
    /// version (a manifest's comments or key order change nothing).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The version for a log line: the digest's short form, and the
    /// settings suffix (`+…`) when there is one, which is what tells a
    /// manifest-only fix from the version before it.
    pub fn short_id(&self) -> String {
        ShortId {
            digest: &self.digest,
            id: &self.id,
        }
        .to_string()
    }

    /// The event types the component declared, in its order.
    pub fn event_types(&self) -> &[String] {
        &self.event_types
    }

    /// The limits each event runs under.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// The manifest's `[config]` table.
    pub fn config(&self) -> &BTreeMap<String, String> {
        &self.config
    }

    /// The component's imports (interface names).
    pub fn imports(&self) -> &[String] {
        &self.imports
    }

    /// The component's exports (interface names).
    pub fn exports(&self) -> &[String] {
        &self.exports
    }

    /// Whether the compiled code came from the cache or was compiled.
    pub fn artifact_source(&self) -> ArtifactSource {
        self.source
    }
}

/// Turns captured stdout/stderr into log records (also emitted to tracing).
fn collect_stdio(state: &mut InvocationState) {
    // No WASI call, no context: nothing was written.
    let Some(stdio) = state.stdio.take() else {
        return;
    };
    for (output, source, level) in [
        (stdio.stdout, LogSource::Stdout, LogLevel::Info),
        (stdio.stderr, LogSource::Stderr, LogLevel::Warn),
    ] {
        let (lines, dropped) = output.take_lines();
        for line in lines {
            state.log.push(LogRecord {
                level,
                source,
                message: crate::host::log::truncate(line, crate::host::log::MAX_LOG_MESSAGE_BYTES),
                fields: Vec::new(),
            });
        }
        if dropped > 0 {
            state.log.push(LogRecord {
                level: LogLevel::Warn,
                source: LogSource::Sandbox,
                message: format!(
                    "{dropped} bytes of {source:?} output were dropped (per-event bound)"
                ),
                fields: Vec::new(),
            });
        }
    }
}

/// Checks the event types a component declared: at least one, at most
/// [`MAX_EVENT_TYPES`], each once, each a name the topology accepts.
fn check_declared(declared: &[String]) -> Result<(), String> {
    if declared.is_empty() {
        return Err(
            "it declares no event types (`subscriptions` returned an empty list)".to_owned(),
        );
    }
    if declared.len() > MAX_EVENT_TYPES {
        return Err(format!(
            "it declares {} event types; at most {MAX_EVENT_TYPES} are allowed",
            declared.len()
        ));
    }
    let mut seen = BTreeSet::new();
    for event_type in declared {
        // The topology's rule: anything else would be served here and then
        // refused by provisioning, which stops routing host-wide.
        if let Err(e) = nimbus_wire::topology::check_event_type(event_type) {
            return Err(format!(
                "it declares an event type the topology refuses: {e}"
            ));
        }
        if !seen.insert(event_type.as_str()) {
            return Err(format!("it declares the event type `{event_type}` twice"));
        }
    }
    Ok(())
}

/// What a version runs with, and what of it the handler's files declared.
pub(crate) struct Settings {
    /// The effective limits.
    pub(crate) limits: Limits,
    /// The manifest's `[config]`.
    pub(crate) config: Arc<BTreeMap<String, String>>,
    /// What of the limits the manifest set, for the version id.
    pub(crate) declared: DeclaredLimits,
}

/// The limits a handler's own files set (its manifest's `[limits]`), each
/// `None` where the host's default applies. With its `[config]`, this is
/// what a version id covers beyond the component: the host's defaults are
/// not in it, so the host and the offline tools (`handlers check|list`,
/// `invoke`) give one version the same id whatever `[sandbox]` says.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DeclaredLimits {
    memory_bytes: Option<u64>,
    timeout: Option<Duration>,
    instances: Option<u32>,
    tables: Option<u32>,
}

impl DeclaredLimits {
    /// What `manifest` sets.
    pub(crate) fn of(manifest: &Manifest) -> Self {
        DeclaredLimits {
            memory_bytes: manifest.memory_bytes,
            timeout: manifest.timeout,
            instances: manifest.instances,
            tables: manifest.tables,
        }
    }

    /// Explicit `limits`, as far as they differ from `defaults`.
    pub(crate) fn differing(limits: &Limits, defaults: &Limits) -> Self {
        fn unless_default<T: PartialEq>(value: T, default: T) -> Option<T> {
            (value != default).then_some(value)
        }
        DeclaredLimits {
            memory_bytes: unless_default(limits.memory_bytes, defaults.memory_bytes),
            timeout: unless_default(limits.timeout, defaults.timeout),
            instances: unless_default(limits.instances, defaults.instances),
            tables: unless_default(limits.tables, defaults.tables),
        }
    }
}

fn version_id(
    digest: &Digest,
    declared: &DeclaredLimits,
    config: &BTreeMap<String, String>,
) -> String {
    if config.is_empty() && *declared == DeclaredLimits::default() {
        return digest.to_string();
    }
    // Spelled out rather than `Debug`, whose format is no contract: the same
    // settings must give the same id across toolchains. `-` is "the host's
    // default". The map is sorted.
    fn value(v: Option<impl std::fmt::Display>) -> String {
        v.map_or_else(|| "-".to_owned(), |v| v.to_string())
    }
    let mut settings = format!(
        "memory_bytes={} timeout_ns={} instances={} tables={}",
        value(declared.memory_bytes),
        value(declared.timeout.map(|t| t.as_nanos())),
        value(declared.instances),
        value(declared.tables)
    );
    for (key, value) in config {
        // Length-prefixed, so no key or value can pass for another pair.
        settings.push_str(&format!("\n{}:{key}{}:{value}", key.len(), value.len()));
    }
    format!("{digest}+{}", Digest::of(settings.as_bytes()).short())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn types(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| (*n).to_owned()).collect()
    }

    #[test]
    fn declared_event_types_follow_the_topologys_naming_rules() {
        assert_eq!(
            check_declared(&types(&["OrderPlaced", "erp.import-v2_1"])),
            Ok(())
        );
        for (declared, expected) in [
            (types(&[]), "declares no event types"),
            (types(&["Order:Placed"]), "contains ':'"),
            (types(&["Order Placed"]), "contains ' '"),
            (types(&[&"X".repeat(51)]), "1 to 50 characters"),
            (types(&["-Order"]), "must start with a letter or digit"),
            (types(&["OrderPlaced", "OrderPlaced"]), "twice"),
        ] {
            let error = check_declared(&declared).expect_err("refused");
            assert!(error.contains(expected), "{declared:?}: {error}");
        }
        // Event types only name rules, so a fixed id is a valid one.
        assert_eq!(check_declared(&types(&["Resolver"])), Ok(()));
    }

    #[test]
    fn explicit_limits_declare_only_what_differs_from_the_defaults() {
        let defaults = Limits::default();
        assert_eq!(
            DeclaredLimits::differing(&defaults, &defaults),
            DeclaredLimits::default()
        );
        let longer = Limits {
            timeout: defaults.timeout * 2,
            ..defaults
        };
        let declared = DeclaredLimits::differing(&longer, &defaults);
        assert_eq!(declared.timeout, Some(defaults.timeout * 2));
        assert_eq!(declared.memory_bytes, None);
        let digest = Digest::of(b"component");
        assert_eq!(
            version_id(&digest, &DeclaredLimits::default(), &BTreeMap::new()),
            digest.to_string()
        );
        assert_ne!(
            version_id(&digest, &declared, &BTreeMap::new()),
            digest.to_string()
        );
    }
}
