//! What the host's scenario and crash tests share: finding the guest
//! components, laying out a handlers directory, starting a real [`Host`] on
//! a temp dir, publishing events the way an external producer does, and
//! observing outcomes in the Resolver store and on a tap subscription.
//!
//! Everything here drives real parts: the embedded broker, real wasm
//! components built by `scripts/build-guests.sh`, the Resolver, the Manager.
//! Waiting is polling with a generous deadline; nothing asserts a duration.

#![allow(
    dead_code,
    reason = "each test binary uses a different part of the support module"
)]
#![allow(unreachable_pub, reason = "a test support module, not a library")]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nimbus_broker::Broker;
use nimbus_manager::Manager;
use nimbus_resolver::{EventDetail, EventFilter, EventRecord, ResolverStore, Status};
use nimbus_runtime::{Config, DEFAULT_PRODUCER, Host};
use nimbus_transport::{
    Admin, DEFAULT_RULE_NAME, Properties, Receiver, RuleDescription, SessionLock, SessionSelector,
    SubQueue, SubscriptionPath, SubscriptionSettings, Transport,
};
use nimbus_wire::build::{self, Publish};
use nimbus_wire::{NimbusMessage, SessionState, addr};

/// How long any wait for an outcome may take before the test fails. Generous
/// on purpose: the suite runs on a shared 2-core box; no test measures time.
pub const DEADLINE: Duration = Duration::from_secs(90);

/// The directory that holds the built guest components.
///
/// `NIMBUS_GUESTS_DIR` first, then `$CARGO_TARGET_DIR/wasm32-wasip2/release`,
/// then the workspace's `target/wasm32-wasip2/release`.
pub fn guests_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("NIMBUS_GUESTS_DIR") {
        return PathBuf::from(dir);
    }
    if let Some(target) = std::env::var_os("CARGO_TARGET_DIR") {
        let dir = PathBuf::from(target).join("wasm32-wasip2/release");
        if dir.join("echo.wasm").is_file() {
            return dir;
        }
    }
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/wasm32-wasip2/release")
}

/// The built component `name` (`echo`, `orders`, `swap_v1`, ...).
///
/// # Panics
/// When it is missing, with what to run.
pub fn guest(name: &str) -> PathBuf {
    let path = guests_dir().join(format!("{name}.wasm"));
    assert!(
        path.is_file(),
        "guest component {} is missing: run scripts/build-guests.sh (with the same \
         CARGO_TARGET_DIR), or point NIMBUS_GUESTS_DIR at the directory holding the .wasm files",
        path.display()
    );
    path
}

/// Copies component `name` into `<handlers>/<endpoint>/<file>.wasm`.
pub fn install(handlers: &Path, endpoint: &str, name: &str, file: &str) -> PathBuf {
    let dir = handlers.join(endpoint);
    std::fs::create_dir_all(&dir).expect("create the endpoint directory");
    let target = dir.join(format!("{file}.wasm"));
    // Write to a temp name then rename, so the registry's watcher never
    // sees a half-written component.
    let partial = dir.join(format!(".{file}.wasm.partial"));
    std::fs::copy(guest(name), &partial).expect("copy the component");
    std::fs::rename(&partial, &target).expect("move the component into place");
    target
}

/// The configuration every test host uses, plus `extra` TOML appended.
/// Short delays so retries and backoffs happen within a test; durability
/// `os` (survives a killed process, which is what the crash test kills).
/// Error type `Flaky` is retried twice 200 ms apart, `Slow` once after 2 s;
/// nothing else is retried.
pub fn config_text(max_delivery_count: u32, extra: &str) -> String {
    format!(
        r#"
[host]
data_dir = "data"
handlers_dir = "handlers"
# A deleted handler is unregistered at the reconcile that sees it gone (the
# grace has tests of its own: the registry's and the black-box suite's).
removal_grace = "0s"

[broker]
durability = "os"
lock_duration = "5s"
max_delivery_count = {max_delivery_count}

[engine]
max_concurrent_sessions = 32
session_idle_timeout = "200ms"
shutdown_grace = "10s"
transient_backoff = "50ms"
transient_backoff_max = "200ms"

[sandbox]
timeout = "20s"

[[retry.rules]]
error_type = "Flaky"
policy = {{ max_retries = 2, base_delay = "200ms", backoff = "fixed" }}

[[retry.rules]]
error_type = "Slow"
policy = {{ max_retries = 1, base_delay = "2s", backoff = "fixed" }}

{extra}
"#
    )
}

/// Starts a host rooted at `root` (`root/data`, `root/handlers`) that
/// dead-letters a message at its `max_delivery_count`th delivery.
pub async fn start_host(root: &Path, max_delivery_count: u32) -> Host {
    let text = config_text(max_delivery_count, "");
    let config = Config::parse(&text, &root.join("nimbus.toml"), root).expect("valid test config");
    Host::start(config).await.expect("host starts")
}

/// A Manager on the host's broker and Resolver store.
pub fn manager(host: &Host) -> Manager<Broker> {
    let store: Arc<dyn ResolverStore> = host.resolver().clone();
    Manager::new(
        Arc::clone(host.broker().unwrap()),
        store,
        host.control_key().clone(),
    )
}

/// Publishes one event the way an external producer does: an original
/// publish to the `publisher` topic, which forwarding routes to every
/// endpoint consuming `event_type`.
pub async fn publish(
    broker: &Broker,
    event_type: &str,
    session: &str,
    message_id: &str,
    payload: &serde_json::Value,
) {
    let message = build::original_publish(&Publish {
        event_type_id: event_type.to_owned(),
        payload: payload.to_string(),
        session_id: Some(session.to_owned()),
        correlation_id: Some(format!("corr-{message_id}")),
        message_id: Some(message_id.to_owned()),
        publisher: None,
        properties: Properties::new(),
    });
    send(broker, DEFAULT_PRODUCER, &message).await;
}

/// Sends one NimBus message to `topic`.
pub async fn send(broker: &Broker, topic: &str, message: &NimbusMessage) {
    broker
        .publish(topic, vec![message.to_transport()])
        .await
        .unwrap_or_else(|e| panic!("publishing to {topic}: {e}"));
}

/// Sends `message` as the host's Manager does: signed with its control key.
pub async fn send_signed(host: &Host, topic: &str, message: &NimbusMessage) {
    let mut sealed = message.to_transport();
    nimbus_wire::control_signature::sign(host.control_key(), &mut sealed);
    host.broker()
        .expect("an embedded broker")
        .publish(topic, vec![sealed])
        .await
        .unwrap_or_else(|e| panic!("publishing to {topic}: {e}"));
}

/// The Resolver's record of the event published as `message_id` at
/// `endpoint` (events get a fresh EventId per consumer, so the test knows
/// them by the MessageId it published).
pub fn record(
    store: &dyn ResolverStore,
    endpoint: &str,
    session: &str,
    message_id: &str,
) -> Option<EventRecord> {
    store
        .events(&EventFilter {
            endpoint: Some(endpoint.to_owned()),
            session_id: Some(session.to_owned()),
            limit: Some(100_000),
            ..EventFilter::default()
        })
        .expect("listing events")
        .into_iter()
        .find(|r| r.request_message_id.as_deref() == Some(message_id))
}

/// The event's record with its history.
pub fn detail(store: &dyn ResolverStore, event_id: &str, endpoint: &str) -> EventDetail {
    store
        .event(event_id)
        .expect("reading the event")
        .into_iter()
        .find(|d| d.record.endpoint == endpoint)
        .expect("the event is at the endpoint")
}

/// Waits until the event published as `message_id` at `endpoint` satisfies
/// `done`, and returns its record.
///
/// # Panics
/// After [`DEADLINE`], with what the store holds for it.
pub async fn wait_for(
    store: &dyn ResolverStore,
    endpoint: &str,
    session: &str,
    message_id: &str,
    what: &str,
    done: impl Fn(&EventRecord) -> bool,
) -> EventRecord {
    let started = Instant::now();
    loop {
        let found = record(store, endpoint, session, message_id);
        if let Some(found) = &found
            && done(found)
        {
            return found.clone();
        }
        if started.elapsed() > DEADLINE {
            let history = found
                .as_ref()
                .map(|r| detail(store, &r.event_id, endpoint).history);
            panic!(
                "{message_id} at {endpoint} (session {session}) never became {what}; \
                 record: {found:#?}; history: {history:#?}"
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until the event published as `message_id` has status `status`.
pub async fn wait_status(
    store: &dyn ResolverStore,
    endpoint: &str,
    session: &str,
    message_id: &str,
    status: Status,
) -> EventRecord {
    wait_for(store, endpoint, session, message_id, status.as_str(), |r| {
        r.status == status
    })
    .await
}

/// Waits until `check` holds, polling; panics with `what` after [`DEADLINE`].
pub async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let started = Instant::now();
    while !check() {
        assert!(started.elapsed() < DEADLINE, "never happened: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A subscription on `topic` that keeps a copy of every message whose event
/// type is `event_type`: how a test sees the follow-ups handlers publish,
/// in the order the broker stored them.
pub async fn create_tap(broker: &Broker, topic: &str, event_type: &str) -> SubscriptionPath {
    let path = SubscriptionPath::new(topic, format!("tap-{event_type}"));
    broker
        .create_subscription(&path, SubscriptionSettings::default())
        .await
        .expect("create the tap subscription");
    // Ignore a missing default rule: a backend may create none.
    let _ = broker.delete_rule(&path, DEFAULT_RULE_NAME).await;
    broker
        .create_rule(
            &path,
            RuleDescription::new(
                "tap",
                format!("user.EventTypeId = '{event_type}' AND user.MessageType = 'EventRequest'"),
            ),
        )
        .await
        .expect("create the tap rule");
    path
}

/// Everything on the tap now, oldest first, as NimBus messages; each is
/// completed, so the next call returns only newer ones.
pub async fn drain_tap(broker: &Broker, tap: &SubscriptionPath) -> Vec<NimbusMessage> {
    let receiver = broker
        .receiver(tap, SubQueue::Main)
        .await
        .expect("open the tap");
    let mut out = Vec::new();
    while let Some(received) = receiver
        .receive(Duration::from_millis(200))
        .await
        .expect("receive from the tap")
    {
        out.push(NimbusMessage::from_received(&received).expect("a NimBus message on the tap"));
        receiver
            .complete(received)
            .await
            .expect("complete the tap copy");
    }
    receiver.close().await;
    out
}

/// The session state `endpoint` holds for `session` now (the empty state
/// when the session has none), as the operator's session listing reads it:
/// it neither locks nor changes anything.
pub async fn session_state(broker: &Broker, endpoint: &str, session: &str) -> SessionState {
    let path = SubscriptionPath::new(endpoint, endpoint);
    let listed = broker
        .list_sessions(&path)
        .await
        .unwrap_or_else(|e| panic!("listing the sessions of {path}: {e}"));
    match listed
        .into_iter()
        .find(|info| info.session_id == session)
        .and_then(|info| info.state)
    {
        Some(blob) => SessionState::from_bytes(&blob).expect("NimBus session state"),
        None => SessionState::default(),
    }
}

/// The MessageIds of the messages of `session` parked in `endpoint`'s
/// `Deferred` subscription now, in the order it holds them.
///
/// Takes the parked session's lock for a moment and releases it without
/// settling anything (no delivery is counted), so only call it while the
/// session stays blocked: a replay in the meantime would wait for the lock.
pub async fn parked_message_ids(broker: &Broker, endpoint: &str, session: &str) -> Vec<String> {
    let path = SubscriptionPath::new(endpoint, addr::DEFERRED);
    let lock = broker
        .accept_session(
            &path,
            SessionSelector::Named(session.to_owned()),
            Duration::from_secs(10),
        )
        .await
        .unwrap_or_else(|e| panic!("locking session {session} of {path}: {e}"));
    let mut ids = Vec::new();
    while let Some(received) = lock
        .receive(Duration::from_millis(200))
        .await
        .expect("receive a parked message")
    {
        let parked = NimbusMessage::from_received(&received).expect("a NimBus parked copy");
        ids.push(parked.message_id.unwrap_or_default());
    }
    lock.close().await;
    ids
}
