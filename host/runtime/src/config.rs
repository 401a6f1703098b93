//! `nimbus.toml`: every key with a default, validated before anything starts
//! (STYLE habit 12). A bad value stops the host with a message naming the
//! key. Relative paths are relative to the file's directory.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use nimbus_broker::Durability;
use nimbus_engine::policy_config::{ClassifierConfig, RetryConfig};
use nimbus_engine::{Classifier, RetryPolicies};
use nimbus_wire::topology::Topology;
use serde::Deserialize;

mod allowed_host;
mod amqp;
mod api_token;
mod manager;
mod servicebus;
pub use allowed_host::AllowedHost;
pub use amqp::{AmqpConfig, AmqpKey};
pub use api_token::{API_TOKEN_ENV, ApiToken, MIN_TOKEN_LEN};
pub use manager::{CONTROL_KEY_ENV, ControlKeyText, ManagerConfig};
pub use servicebus::{BrokerKind, CONNECTION_STRING_ENV, ConnectionStringText};

/// The whole configuration file.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// `[host]`: where things live.
    #[serde(default)]
    pub host: HostConfig,
    /// `[api]`: the operator HTTP API.
    #[serde(default)]
    pub api: ApiConfig,
    /// `[broker]`: the embedded broker.
    #[serde(default)]
    pub broker: BrokerConfig,
    /// `[engine]`: session processing.
    #[serde(default)]
    pub engine: EngineConfig,
    /// `[sandbox]`: handler limits.
    #[serde(default)]
    pub sandbox: SandboxSection,
    /// `[resolver]`: the audit trail's store.
    #[serde(default)]
    pub resolver: ResolverConfig,
    /// `[retry]`: retry policies (see `nimbus_engine::policy_config`).
    #[serde(default)]
    pub retry: RetryConfig,
    /// `[classifier]`: failure classification.
    #[serde(default)]
    pub classifier: ClassifierConfig,
    /// `[amqp]`: the AMQP endpoint for Service Bus SDKs.
    #[serde(default)]
    pub amqp: AmqpConfig,
    /// `[manager]`: the key control messages are signed with.
    #[serde(default)]
    pub manager: ManagerConfig,
}

/// `[host]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostConfig {
    /// The data directory: broker, resolver store, compile cache.
    #[serde(default = "default_data_dir")]
    pub data_dir: PathBuf,
    /// The handlers directory: one subdirectory per endpoint.
    #[serde(default = "default_handlers_dir")]
    pub handlers_dir: PathBuf,
    /// Topics that publishers publish to besides the endpoints' own (an
    /// external system publishing as endpoint `storefront`, say).
    #[serde(default)]
    pub producers: Vec<String>,
    /// How long a handler whose component file was deleted keeps serving
    /// before its event types are unregistered (a file for it that comes
    /// back first makes it a swap).
    #[serde(
        default = "default_removal_grace",
        deserialize_with = "duration::deserialize"
    )]
    pub removal_grace: Duration,
}

fn default_data_dir() -> PathBuf {
    PathBuf::from(".nimbus")
}

fn default_handlers_dir() -> PathBuf {
    PathBuf::from("handlers")
}

fn default_removal_grace() -> Duration {
    nimbus_sandbox::DEFAULT_REMOVAL_GRACE
}

impl Default for HostConfig {
    fn default() -> Self {
        HostConfig {
            data_dir: default_data_dir(),
            handlers_dir: default_handlers_dir(),
            producers: Vec::new(),
            removal_grace: default_removal_grace(),
        }
    }
}

/// The producer topic an external publish goes to when it names none; a
/// producer topic whatever `[host] producers` lists.
pub const DEFAULT_PRODUCER: &str = "publisher";

/// `[api]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApiConfig {
    /// Where the HTTP API listens. Loopback by default; beyond loopback a
    /// `token` is required.
    #[serde(default = "default_listen", deserialize_with = "socket_address")]
    pub listen: SocketAddr,
    /// Host names (`name` or `name:port`) the API answers to besides the
    /// loopback names and the listen address: the name a proxy or a
    /// container's published port is reached by. Any other `Host` is
    /// refused (DNS rebinding).
    #[serde(default)]
    pub allowed_hosts: Vec<String>,
    /// The bearer token every request but `/health` must carry;
    /// `NIMBUS_API_TOKEN` wins over it (see [`ValidConfig::with_environment`]).
    #[serde(default)]
    pub token: Option<ApiToken>,
    /// The longest one request may take, reading its body included.
    #[serde(
        default = "default_request_timeout",
        deserialize_with = "duration::deserialize"
    )]
    pub request_timeout: Duration,
    /// A connection that sends no complete request head for this long (new,
    /// or idle between requests) is closed.
    #[serde(
        default = "default_idle_timeout",
        deserialize_with = "duration::deserialize"
    )]
    pub idle_timeout: Duration,
}

/// `[api] listen` when the configuration sets none; the CLI's client
/// commands call it there when nothing else names the API.
pub const DEFAULT_API_LISTEN: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 7300);

fn default_listen() -> SocketAddr {
    DEFAULT_API_LISTEN
}

fn default_request_timeout() -> Duration {
    Duration::from_secs(30)
}

fn default_idle_timeout() -> Duration {
    Duration::from_secs(30)
}

/// The longest `api.request_timeout` and `api.idle_timeout`.
const MAX_API_TIMEOUT: Duration = Duration::from_secs(60 * 60);

impl Default for ApiConfig {
    fn default() -> Self {
        ApiConfig {
            listen: default_listen(),
            allowed_hosts: Vec::new(),
            token: None,
            request_timeout: default_request_timeout(),
            idle_timeout: default_idle_timeout(),
        }
    }
}

/// `[broker]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BrokerConfig {
    /// `"embedded"` (the broker in the data directory) or `"servicebus"`
    /// (a namespace, with `connection_string`).
    #[serde(default)]
    pub kind: BrokerKind,
    /// With `kind = "servicebus"`: the namespace's connection string
    /// (`NIMBUS_SERVICEBUS_CONNECTION_STRING` replaces it).
    #[serde(default)]
    pub connection_string: Option<ConnectionStringText>,
    /// With `kind = "servicebus"`: a PEM file of the certificate
    /// authorities to trust for the namespace's TLS certificate instead of
    /// the system's (a private CA in front of an emulator).
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
    /// `"fsync"` (an acknowledged write survives power loss) or `"os"`
    /// (survives a killed process, not a crashed machine).
    #[serde(default)]
    pub durability: DurabilityConfig,
    /// How long a session lock lasts unless renewed.
    #[serde(
        default = "default_lock_duration",
        deserialize_with = "duration::deserialize"
    )]
    pub lock_duration: Duration,
    /// Deliveries before the broker dead-letters a message.
    #[serde(default = "default_max_delivery_count")]
    pub max_delivery_count: u32,
    /// The most one request may store, every copy counted, e.g. `"256MiB"`
    /// (the most, and the default).
    #[serde(default = "default_max_request_size")]
    pub max_request_size: String,
}

fn default_max_request_size() -> String {
    "256MiB".to_owned()
}

/// Service Bus's longest message and session lock.
const MAX_LOCK_DURATION: Duration = Duration::from_secs(5 * 60);

fn default_lock_duration() -> Duration {
    Duration::from_secs(30)
}

fn default_max_delivery_count() -> u32 {
    10
}

impl Default for BrokerConfig {
    fn default() -> Self {
        BrokerConfig {
            kind: BrokerKind::default(),
            connection_string: None,
            ca_file: None,
            durability: DurabilityConfig::default(),
            lock_duration: default_lock_duration(),
            max_delivery_count: default_max_delivery_count(),
            max_request_size: default_max_request_size(),
        }
    }
}

/// `broker.durability`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DurabilityConfig {
    /// Survives power loss (group commit with fsync).
    #[default]
    Fsync,
    /// Survives `kill -9` of the process.
    Os,
}

impl From<DurabilityConfig> for Durability {
    fn from(value: DurabilityConfig) -> Self {
        match value {
            DurabilityConfig::Fsync => Durability::Fsync,
            DurabilityConfig::Os => Durability::Os,
        }
    }
}

/// `[engine]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EngineConfig {
    /// Sessions one endpoint processes at once.
    #[serde(default = "default_max_concurrent_sessions")]
    pub max_concurrent_sessions: usize,
    /// A session with no message for this long is released.
    #[serde(
        default = "default_session_idle_timeout",
        deserialize_with = "duration::deserialize"
    )]
    pub session_idle_timeout: Duration,
    /// A busy session held this long is released after its current message,
    /// so sessions waiting beyond `max_concurrent_sessions` get their turn
    /// (the endpoints' session processors and the Resolver consumer alike).
    #[serde(
        default = "default_session_max_hold",
        deserialize_with = "duration::deserialize"
    )]
    pub session_max_hold: Duration,
    /// On shutdown, how long in-flight deliveries may take to finish.
    #[serde(
        default = "default_shutdown_grace",
        deserialize_with = "duration::deserialize"
    )]
    pub shutdown_grace: Duration,
    /// The first backoff before a transient failure is abandoned.
    #[serde(
        default = "default_transient_base",
        deserialize_with = "duration::deserialize"
    )]
    pub transient_backoff: Duration,
    /// The longest backoff before a transient failure is abandoned.
    #[serde(
        default = "default_transient_max",
        deserialize_with = "duration::deserialize"
    )]
    pub transient_backoff_max: Duration,
    /// Sessions the Resolver consumer processes at once.
    #[serde(default = "default_resolver_sessions")]
    pub resolver_sessions: usize,
    /// Deduplicate by MessageId per endpoint: a message id handled before
    /// is answered `SkipResponse` "DuplicateDetected" without running the
    /// handler. The record commits with the settlement.
    #[serde(default)]
    pub inbox: bool,
    /// How long the inbox remembers a handled message id.
    #[serde(
        default = "default_inbox_retention",
        deserialize_with = "duration::deserialize"
    )]
    pub inbox_retention: Duration,
}

fn default_inbox_retention() -> Duration {
    Duration::from_secs(7 * 24 * 3600)
}

fn default_max_concurrent_sessions() -> usize {
    8
}

fn default_session_idle_timeout() -> Duration {
    Duration::from_secs(1)
}

fn default_session_max_hold() -> Duration {
    Duration::from_secs(5)
}

fn default_shutdown_grace() -> Duration {
    Duration::from_secs(30)
}

fn default_transient_base() -> Duration {
    Duration::from_millis(500)
}

fn default_transient_max() -> Duration {
    Duration::from_secs(30)
}

fn default_resolver_sessions() -> usize {
    64
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            max_concurrent_sessions: default_max_concurrent_sessions(),
            session_idle_timeout: default_session_idle_timeout(),
            session_max_hold: default_session_max_hold(),
            shutdown_grace: default_shutdown_grace(),
            transient_backoff: default_transient_base(),
            transient_backoff_max: default_transient_max(),
            resolver_sessions: default_resolver_sessions(),
            inbox: false,
            inbox_retention: default_inbox_retention(),
        }
    }
}

/// `[sandbox]`: defaults for handlers whose manifest sets no limits.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SandboxSection {
    /// Linear memory per handler instance, e.g. `"64MiB"`.
    #[serde(default = "default_memory")]
    pub memory: String,
    /// Wall-clock deadline per event.
    #[serde(
        default = "default_timeout",
        deserialize_with = "duration::deserialize"
    )]
    pub timeout: Duration,
    /// Handler instances that may run at once.
    #[serde(default = "default_max_instances")]
    pub max_concurrent_instances: u32,
}

fn default_memory() -> String {
    "64MiB".to_owned()
}

fn default_timeout() -> Duration {
    nimbus_sandbox::DEFAULT_TIMEOUT
}

fn default_max_instances() -> u32 {
    200
}

impl Default for SandboxSection {
    fn default() -> Self {
        SandboxSection {
            memory: default_memory(),
            timeout: default_timeout(),
            max_concurrent_instances: default_max_instances(),
        }
    }
}

/// `[resolver]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResolverConfig {
    /// How long an event that needs nothing more (Completed, Skipped,
    /// Unsupported) is kept after its last update.
    #[serde(default)]
    pub retention: Retention,
}

/// How long the Resolver keeps events that need nothing more.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retention {
    /// Keep every event (`"forever"`).
    Forever,
    /// Remove such an event, with its history, this long after its last
    /// update.
    For(Duration),
}

impl Default for Retention {
    /// Thirty days, as an audit store usually keeps successful messages.
    fn default() -> Self {
        Retention::For(Duration::from_secs(30 * 24 * 3600))
    }
}

impl<'de> Deserialize<'de> for Retention {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        let text = text.trim();
        // Operators write `Forever` as readily as `forever`; the word is
        // not a duration, so no spelling of it can be ambiguous.
        if text.eq_ignore_ascii_case("forever") {
            return Ok(Retention::Forever);
        }
        humantime::parse_duration(text)
            .map(Retention::For)
            .map_err(|e| {
                serde::de::Error::custom(format!(
                    "'{text}': {e}; give a duration such as \"30d\", or \"forever\""
                ))
            })
    }
}

/// An IP address and port; a host name is refused with an example, since
/// the API binds before any name could be resolved.
fn socket_address<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<SocketAddr, D::Error> {
    let text = String::deserialize(deserializer)?;
    text.parse().map_err(|_| {
        serde::de::Error::custom(format!(
            "`{text}` is not an IP address and port, such as \"127.0.0.1:8080\" (a host name \
             such as localhost is not resolved)"
        ))
    })
}

/// Durations as the configuration writes them (`"5s"`, `"200ms"`,
/// `"1h 30m"`), refused in the words a handler manifest uses.
mod duration {
    use std::fmt;
    use std::time::Duration;

    struct Text;

    impl serde::de::Visitor<'_> for Text {
        type Value = Duration;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a duration like \"5s\" or \"200ms\"")
        }

        fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<Duration, E> {
            humantime::parse_duration(text).map_err(|e| {
                E::custom(format!(
                    "`{text}` is not a duration like \"5s\" or \"200ms\": {e}"
                ))
            })
        }
    }

    pub(super) fn deserialize<'de, D: serde::Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Duration, D::Error> {
        deserializer.deserialize_str(Text)
    }
}

/// A configuration that cannot be used, naming the file and the key.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The file is not valid TOML for this schema (the message names the
    /// key and the line).
    #[error("{path}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// What is wrong, with the key.
        message: String,
    },
    /// Values that parse but cannot be used, each with its key.
    #[error("{path}: invalid configuration:\n{}", problems.join("\n"))]
    Invalid {
        /// The file.
        path: PathBuf,
        /// One line per bad key: `key: what is wrong`.
        problems: Vec<String>,
    },
}

/// A configuration that passed validation, with what it resolves to.
#[derive(Debug, Clone)]
pub struct ValidConfig {
    /// The configuration as written, paths made absolute.
    pub config: Config,
    /// The retry policies.
    pub retry: RetryPolicies,
    /// The classifier.
    pub classifier: Classifier,
    /// `sandbox.memory` in bytes.
    pub sandbox_memory_bytes: u64,
    /// `broker.max_request_size` in bytes.
    pub broker_max_request_bytes: usize,
    /// `broker.connection_string` read (or, once
    /// [`ValidConfig::with_environment`] ran, the environment's).
    pub connection_string: Option<nimbus_servicebus::ConnectionString>,
    /// The authorities of `broker.ca_file`, read.
    pub namespace_roots: Option<nimbus_servicebus::TrustedRoots>,
    /// `[amqp] tls_certificate` and `tls_key`, read.
    pub amqp_tls: Option<nimbus_amqp::ServerTls>,
    /// `manager.control_key` read (or, once [`ValidConfig::with_environment`]
    /// ran, `NIMBUS_CONTROL_KEY`). `None` on the embedded broker: the host
    /// then keeps one in its data directory (see [`crate::control`]).
    pub control_key: Option<nimbus_wire::ControlKey>,
}

impl ValidConfig {
    /// Applies what the environment adds to the file: `NIMBUS_API_TOKEN`
    /// replaces `[api] token`, `NIMBUS_SERVICEBUS_CONNECTION_STRING` the
    /// connection string, `NIMBUS_CONTROL_KEY` `[manager] control_key`.
    /// Then refuses a host on Service Bus without a control key, and an
    /// API listening beyond loopback without a token: anyone who reaches
    /// it could publish, resubmit, skip and replay. `nimbus run` and
    /// `nimbus check` call this; [`Config::parse`] does not, so it reads
    /// the file alone.
    ///
    /// # Errors
    ///
    /// When a variable is set but not valid, a host on Service Bus has no
    /// connection string or no control key, or the API would listen beyond
    /// loopback with no token; `path` names the configuration in the error.
    pub fn with_environment(mut self, path: &Path) -> Result<ValidConfig, ConfigError> {
        let invalid = |problem: String| ConfigError::Invalid {
            path: path.to_owned(),
            problems: vec![problem],
        };
        if let Some(token) = ApiToken::from_env().map_err(invalid)? {
            self.config.api.token = Some(token);
        }
        if let Some(connection) = servicebus::connection_string_from_env().map_err(invalid)? {
            self.connection_string = Some(connection);
        }
        if let Some(key) = manager::control_key_from_env().map_err(invalid)? {
            self.control_key = Some(key);
        }
        if self.config.broker.kind == BrokerKind::ServiceBus && self.connection_string.is_none() {
            return Err(invalid(format!(
                "broker.connection_string: broker.kind is \"servicebus\" and no connection \
                 string is given; set it (or {CONNECTION_STRING_ENV}) to the namespace's \
                 `Endpoint=sb://...;SharedAccessKeyName=...;SharedAccessKey=...`"
            )));
        }
        if self.config.broker.kind == BrokerKind::ServiceBus && self.control_key.is_none() {
            // Each host checks the control messages every other host's
            // Manager sends, so none can make up its own key.
            return Err(invalid(format!(
                "manager.control_key: broker.kind is \"servicebus\" and no control key is given; \
                 set [manager] control_key (or {CONTROL_KEY_ENV}) to a secret of at least {} \
                 characters (e.g. the output of `openssl rand -hex 32`), the same on every host \
                 that shares the namespace: each host acts only on control messages signed with it",
                nimbus_wire::control_signature::MIN_CONTROL_KEY_LEN
            )));
        }
        let listen = self.config.api.listen;
        if !listen.ip().is_loopback() && self.config.api.token.is_none() {
            return Err(invalid(format!(
                "api.token: the API listens on {listen}, beyond loopback, and has no token: \
                 anyone who reaches it could publish, resubmit, skip and replay events. Set \
                 [api] token (or {}) to a secret of at least {} characters, or listen on \
                 127.0.0.1",
                API_TOKEN_ENV, MIN_TOKEN_LEN
            )));
        }
        Ok(self)
    }
}

impl Config {
    /// Reads and validates `path`.
    pub fn load(path: &Path) -> Result<ValidConfig, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        let base = path.parent().unwrap_or(Path::new("."));
        Config::parse(&text, path, base)
    }

    /// Parses and validates `text`; `path` names it in errors, relative
    /// paths resolve against `base`.
    pub fn parse(text: &str, path: &Path, base: &Path) -> Result<ValidConfig, ConfigError> {
        let parse_error = |message: String| ConfigError::Parse {
            path: path.to_owned(),
            message,
        };
        let document = toml::Deserializer::parse(text).map_err(|e| parse_error(e.to_string()))?;
        // The TOML error shows the line but not the table it is in; the
        // path names the key in full (`engine.shutdown_grace`).
        let mut config: Config = serde_path_to_error::deserialize(document).map_err(|e| {
            let key = e.path().to_string();
            let detail = e.into_inner().to_string();
            parse_error(if key == "." {
                detail
            } else {
                format!("{key}: {detail}")
            })
        })?;
        // An empty path stays empty, for `validate` to refuse: joined, it
        // would quietly be the configuration's own directory.
        for dir in [&mut config.host.data_dir, &mut config.host.handlers_dir] {
            if !dir.as_os_str().is_empty() {
                *dir = base.join(&*dir);
            }
        }
        for file in [
            &mut config.broker.ca_file,
            &mut config.amqp.tls_certificate,
            &mut config.amqp.tls_key,
        ]
        .into_iter()
        .flatten()
        {
            *file = base.join(&*file);
        }
        config.validate(path)
    }

    /// The defaults, rooted at `base`.
    pub fn defaults(base: &Path) -> Result<ValidConfig, ConfigError> {
        Config::parse("", Path::new("(defaults)"), base)
    }

    /// Checks every value, naming each bad key.
    pub fn validate(self, path: &Path) -> Result<ValidConfig, ConfigError> {
        let mut problems = Vec::new();
        for (key, count, most) in [
            (
                "engine.max_concurrent_sessions",
                self.engine.max_concurrent_sessions,
                MAX_CONCURRENT_SESSIONS,
            ),
            (
                "engine.resolver_sessions",
                self.engine.resolver_sessions,
                MAX_RESOLVER_SESSIONS,
            ),
        ] {
            if count == 0 {
                problems.push(format!("{key}: must be at least 1"));
            } else if count > most {
                problems.push(format!("{key}: {count} is over the maximum of {most}"));
            }
        }
        if self.host.data_dir.as_os_str().is_empty() {
            problems.push("host.data_dir: must not be empty".to_owned());
        }
        if self.host.handlers_dir.as_os_str().is_empty() {
            problems.push("host.handlers_dir: must not be empty".to_owned());
        }
        if self.engine.inbox_retention.is_zero() {
            problems.push(
                "engine.inbox_retention: must be longer than 0 (the inbox forgets a message id \
                 once it has passed)"
                    .to_owned(),
            );
        }
        if self.engine.session_idle_timeout.is_zero() {
            problems.push("engine.session_idle_timeout: must be longer than 0".to_owned());
        }
        problems.extend(self.durations_over_their_maximum());
        if self.engine.transient_backoff > self.engine.transient_backoff_max {
            problems.push(format!(
                "engine.transient_backoff: {:?} is longer than engine.transient_backoff_max ({:?})",
                self.engine.transient_backoff, self.engine.transient_backoff_max
            ));
        }
        if self.host.removal_grace > nimbus_sandbox::MAX_REMOVAL_GRACE {
            problems.push(format!(
                "host.removal_grace: {} is over the maximum of {}",
                humantime::format_duration(self.host.removal_grace),
                humantime::format_duration(nimbus_sandbox::MAX_REMOVAL_GRACE)
            ));
        }
        if self.broker.lock_duration < Duration::from_secs(1) {
            problems.push("broker.lock_duration: must be at least 1s".to_owned());
        } else if self.broker.lock_duration > MAX_LOCK_DURATION {
            // The embedded broker would take it, but the same configuration
            // must provision on Service Bus. A handler that runs longer keeps
            // its lock by renewal.
            problems.push(format!(
                "broker.lock_duration: {} is over Service Bus's maximum of 5m (the lock is \
                 renewed while a handler runs, so a long handler needs no long lock)",
                humantime::format_duration(self.broker.lock_duration)
            ));
        }
        if let Retention::For(keep_for) = self.resolver.retention
            && keep_for < Duration::from_secs(1)
        {
            problems.push(
                "resolver.retention: must be at least 1s (or \"forever\" to keep every event)"
                    .to_owned(),
            );
        }
        for (key, timeout) in [
            ("api.request_timeout", self.api.request_timeout),
            ("api.idle_timeout", self.api.idle_timeout),
        ] {
            if timeout.is_zero() {
                problems.push(format!("{key}: must be longer than 0"));
            } else if timeout > MAX_API_TIMEOUT {
                problems.push(format!(
                    "{key}: {} is over the maximum of 1h",
                    humantime::format_duration(timeout)
                ));
            }
        }
        if let Some(token) = &self.api.token
            && let Err(why) = ApiToken::new(token.expose())
        {
            problems.push(format!("api.token: {why}"));
        }
        for (i, host) in self.api.allowed_hosts.iter().enumerate() {
            if let Err(why) = AllowedHost::parse(host) {
                problems.push(format!("api.allowed_hosts[{i}]: {why}"));
            }
        }
        let (amqp_problems, amqp_tls) = self.amqp.problems();
        problems.extend(amqp_problems);
        let control_key = match self.manager.control_key.as_ref().map(ControlKeyText::parse) {
            None => None,
            Some(Ok(key)) => Some(key),
            Some(Err(why)) => {
                problems.push(format!("manager.control_key: {why}"));
                None
            }
        };
        let mut namespace_roots = None;
        if let Some(file) = &self.broker.ca_file {
            if self.broker.kind == BrokerKind::Embedded {
                problems.push(
                    "broker.ca_file: given, but broker.kind is \"embedded\" (it is for a \
                     namespace's TLS certificate)"
                        .to_owned(),
                );
            } else {
                match servicebus::trusted_roots(file) {
                    Ok(roots) => namespace_roots = Some(roots),
                    Err(why) => problems.push(format!("broker.ca_file: {why}")),
                }
            }
        }
        let connection_string = match self
            .broker
            .connection_string
            .as_ref()
            .map(|text| text.parse())
        {
            None => None,
            Some(Ok(connection)) => Some(connection),
            Some(Err(why)) => {
                problems.push(format!("broker.connection_string: {why}"));
                None
            }
        };
        if self.broker.kind == BrokerKind::Embedded && self.broker.connection_string.is_some() {
            problems.push(
                "broker.connection_string: given, but broker.kind is \"embedded\"; set \
                 kind = \"servicebus\" to run on the namespace, or remove it"
                    .to_owned(),
            );
        }
        if self.broker.kind == BrokerKind::ServiceBus
            && let Some(listen) = self.amqp.listen
        {
            problems.push(format!(
                "amqp.listen: the AMQP endpoint ({listen}) serves the embedded broker, and with \
                 broker.kind = \"servicebus\" the host has none; remove [amqp] listen, or run \
                 the endpoint on a host with the embedded broker"
            ));
        }
        if self.broker.max_delivery_count == 0 {
            problems.push("broker.max_delivery_count: must be at least 1".to_owned());
        }
        if self.sandbox.timeout.is_zero() {
            problems.push("sandbox.timeout: must be longer than 0".to_owned());
        } else if self.sandbox.timeout > nimbus_sandbox::MAX_TIMEOUT {
            // The ceiling a manifest's `[limits] timeout` has too.
            problems.push(format!(
                "sandbox.timeout: {} is over the maximum of {}",
                humantime::format_duration(self.sandbox.timeout),
                humantime::format_duration(nimbus_sandbox::MAX_TIMEOUT)
            ));
        }
        if self.sandbox.max_concurrent_instances == 0 {
            problems.push("sandbox.max_concurrent_instances: must be at least 1".to_owned());
        } else if self.sandbox.max_concurrent_instances > nimbus_sandbox::MAX_CONCURRENT_INSTANCES {
            problems.push(format!(
                "sandbox.max_concurrent_instances: {} is over the maximum of {} (each instance's \
                 pool slot reserves about 8 GiB of address space, and a larger pool cannot be \
                 mapped)",
                self.sandbox.max_concurrent_instances,
                nimbus_sandbox::MAX_CONCURRENT_INSTANCES
            ));
        }
        let sandbox_memory_bytes = match nimbus_sandbox::parse_byte_size(&self.sandbox.memory) {
            Ok(bytes) if bytes > nimbus_sandbox::DEFAULT_MAX_MEMORY_BYTES => {
                problems.push(format!(
                    "sandbox.memory: {} is over the sandbox maximum of {} bytes (1GiB)",
                    self.sandbox.memory,
                    nimbus_sandbox::DEFAULT_MAX_MEMORY_BYTES
                ));
                0
            }
            Ok(bytes) => bytes,
            Err(e) => {
                problems.push(format!("sandbox.memory: {e}"));
                0
            }
        };
        let broker_max_request_bytes = match max_request_bytes(&self.broker.max_request_size) {
            Ok(bytes) => bytes,
            Err(e) => {
                problems.push(format!("broker.max_request_size: {e}"));
                0
            }
        };
        for (i, producer) in self.host.producers.iter().enumerate() {
            let first = self.host.producers[..i]
                .iter()
                .position(|earlier| earlier.eq_ignore_ascii_case(producer));
            if let Some(first) = first {
                problems.push(format!(
                    "host.producers[{i}]: '{producer}' names the same topic as \
                     host.producers[{first}] ('{}'): topic names ignore case, as on Service Bus",
                    self.host.producers[first]
                ));
            } else if producer.trim().is_empty() {
                problems.push(format!("host.producers[{i}]: must not be empty"));
            } else if let Err(e) = Topology::new().producer_topic(producer).validate() {
                // The topology's own naming rules, checked here so `nimbus
                // check` refuses what provisioning would.
                problems.push(format!("host.producers[{i}]: {e}"));
            }
        }
        let retry = self
            .retry
            .validate()
            .map_err(|e| e.0.iter().map(ToString::to_string).collect::<Vec<_>>());
        let classifier = self
            .classifier
            .validate()
            .map_err(|e| e.0.iter().map(ToString::to_string).collect::<Vec<_>>());
        let (retry, classifier) = match (retry, classifier) {
            (Ok(retry), Ok(classifier)) if problems.is_empty() => (retry, classifier),
            (retry, classifier) => {
                problems.extend(retry.err().unwrap_or_default());
                problems.extend(classifier.err().unwrap_or_default());
                return Err(ConfigError::Invalid {
                    path: path.to_owned(),
                    problems,
                });
            }
        };
        Ok(ValidConfig {
            config: self,
            retry,
            classifier,
            sandbox_memory_bytes,
            broker_max_request_bytes,
            connection_string,
            namespace_roots,
            amqp_tls,
            control_key,
        })
    }
}

impl Config {
    /// The durations the host would otherwise clamp or read as something
    /// else, one problem each, naming the key and its maximum (issue 40):
    /// `nimbus check` refuses what `nimbus run` would not honour as written.
    fn durations_over_their_maximum(&self) -> Vec<String> {
        let engine = &self.engine;
        let mut bounded = vec![
            (
                "engine.session_idle_timeout",
                engine.session_idle_timeout,
                MAX_SESSION_WAIT,
            ),
            (
                "engine.session_max_hold",
                engine.session_max_hold,
                MAX_SESSION_WAIT,
            ),
            (
                "engine.shutdown_grace",
                engine.shutdown_grace,
                MAX_SHUTDOWN_GRACE,
            ),
            // The engine caps every backoff at the longest delay it
            // schedules anything for.
            (
                "engine.transient_backoff",
                engine.transient_backoff,
                nimbus_engine::MAX_DELAY,
            ),
            (
                "engine.transient_backoff_max",
                engine.transient_backoff_max,
                nimbus_engine::MAX_DELAY,
            ),
            (
                "engine.inbox_retention",
                engine.inbox_retention,
                MAX_RETENTION,
            ),
        ];
        if let Retention::For(keep_for) = self.resolver.retention {
            bounded.push(("resolver.retention", keep_for, MAX_RETENTION));
        }
        bounded
            .into_iter()
            .filter(|&(_, value, most)| value > most)
            .map(|(key, value, most)| {
                format!(
                    "{key}: {} is over the maximum of {}",
                    nimbus_engine::policy_config::in_days(value),
                    nimbus_engine::policy_config::in_days(most)
                )
            })
            .collect()
    }
}

/// The most sessions one endpoint holds at once: far more than the sandbox
/// can run at once, and each held session takes a lock and a slot.
const MAX_CONCURRENT_SESSIONS: usize = 10_000;

/// The most Resolver session workers: each is a task asking the broker for
/// a session, and a thousand already record far faster than endpoints
/// respond.
const MAX_RESOLVER_SESSIONS: usize = 1_000;

/// The longest `engine.session_idle_timeout` and `engine.session_max_hold`:
/// a session kept longer keeps every other session of the endpoint waiting.
const MAX_SESSION_WAIT: Duration = Duration::from_secs(60 * 60);

/// The longest `engine.shutdown_grace`: longer than any handler may run
/// (`sandbox.timeout` is at most 5m) with its settlement.
const MAX_SHUTDOWN_GRACE: Duration = Duration::from_secs(60 * 60);

/// The longest `engine.inbox_retention` and `[resolver] retention`: ten
/// years. A longer one would pass the timestamps the stores can hold (and
/// the Resolver would read a period past 1970 as keeping everything); write
/// `"forever"` for that.
const MAX_RETENTION: Duration = Duration::from_secs(3650 * 24 * 60 * 60);

/// The smallest `broker.max_request_size`. The engine's largest settlement
/// of one event without follow-ups (its error response and a scheduled
/// retry, each carrying the event's payload, up to the API's 2 MiB, plus
/// the error text) must always fit: one refused would hand the message back
/// to run again and again. Follow-ups over the limit fail the event instead
/// (`FollowUpsRefused`).
const MIN_MAX_REQUEST_BYTES: usize = 16 << 20;

/// `broker.max_request_size` in bytes, between [`MIN_MAX_REQUEST_BYTES`] and
/// the broker's own limit.
fn max_request_bytes(text: &str) -> Result<usize, String> {
    let bytes = nimbus_sandbox::parse_byte_size(text)?;
    let most = nimbus_broker::DEFAULT_MAX_REQUEST_BYTES;
    match usize::try_from(bytes) {
        Ok(bytes) if bytes > most => Err(format!(
            "{text} is over the broker's maximum of 256MiB (a request is one frame of its log)"
        )),
        Ok(bytes) if bytes < MIN_MAX_REQUEST_BYTES => Err(format!(
            "{text} is under the minimum of 16MiB (an event's own settlement, up to two \
                 copies of a 2 MiB payload and its error, must always fit)"
        )),
        Ok(bytes) => Ok(bytes),
        Err(_) => Err(format!("{text} is over the broker's maximum of 256MiB")),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;

    fn parse(text: &str) -> Result<ValidConfig, ConfigError> {
        Config::parse(text, Path::new("nimbus.toml"), Path::new("/srv/app"))
    }

    #[test]
    fn the_request_size_is_read_with_its_unit_and_held_to_the_broker_limits() {
        assert_eq!(parse("").unwrap().broker_max_request_bytes, 256 << 20);
        let valid = parse("[broker]\nmax_request_size = \"32MiB\"\n").unwrap();
        assert_eq!(valid.broker_max_request_bytes, 32 << 20);
        for (value, says) in [
            (
                "\"512MiB\"",
                "broker.max_request_size: 512MiB is over the broker's maximum of 256MiB",
            ),
            (
                "\"8MiB\"",
                "broker.max_request_size: 8MiB is under the minimum of 16MiB",
            ),
            ("\"lots\"", "broker.max_request_size: `lots` is not a size"),
        ] {
            let err = parse(&format!("[broker]\nmax_request_size = {value}\n"))
                .unwrap_err()
                .to_string();
            assert!(err.contains(says), "{value}: {err}");
        }
    }

    #[test]
    fn empty_file_gives_defaults_rooted_at_the_file() {
        let valid = parse("").unwrap();
        assert_eq!(valid.config.host.data_dir, Path::new("/srv/app/.nimbus"));
        assert_eq!(valid.config.engine.max_concurrent_sessions, 8);
        assert_eq!(valid.config.broker.durability, DurabilityConfig::Fsync);
        assert_eq!(valid.sandbox_memory_bytes, 64 << 20);
        assert!(valid.retry.default.is_none(), "no implicit retry");
    }

    #[test]
    fn resolver_retention_is_a_duration_or_forever_and_defaults_to_thirty_days() {
        assert_eq!(
            parse("").unwrap().config.resolver.retention,
            Retention::For(Duration::from_secs(30 * 24 * 3600))
        );
        assert_eq!(
            parse("[resolver]\nretention = \"forever\"\n")
                .unwrap()
                .config
                .resolver
                .retention,
            Retention::Forever
        );
        for spelling in ["Forever", "FOREVER", " forever "] {
            assert_eq!(
                parse(&format!("[resolver]\nretention = \"{spelling}\"\n"))
                    .unwrap()
                    .config
                    .resolver
                    .retention,
                Retention::Forever,
                "{spelling}"
            );
        }
        assert_eq!(
            parse("[resolver]\nretention = \"12h\"\n")
                .unwrap()
                .config
                .resolver
                .retention,
            Retention::For(Duration::from_secs(12 * 3600))
        );
        let err = parse("[resolver]\nretention = \"a while\"\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("retention") && err.contains("\"forever\""),
            "{err}"
        );
        let err = parse("[resolver]\nretention = \"0s\"\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("resolver.retention: must be at least 1s"),
            "{err}"
        );
    }

    #[test]
    fn unknown_key_is_named() {
        let err = parse("[engine]\nmax_sessions = 3\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("max_sessions"), "{err}");
    }

    /// What `nimbus run` would refuse only once it starts (the sandbox's
    /// memory ceiling, the topology's naming rules) `nimbus check` refuses
    /// too, naming the key.
    #[test]
    fn values_the_host_would_refuse_at_start_are_named_by_key() {
        let err = parse(
            "[host]\nproducers = [\"shop\", \"Resolver\", \"fwd-x\"]\n[sandbox]\nmemory = \"100GiB\"\ntimeout = \"1h\"\n",
        )
        .unwrap_err()
        .to_string();
        for expected in [
            "sandbox.memory: 100GiB is over the sandbox maximum",
            "sandbox.timeout: 1h is over the maximum of 5m",
            "host.producers[1]",
            "'Resolver' is a NimBus fixed id",
            "host.producers[2]",
        ] {
            assert!(err.contains(expected), "{expected} missing from: {err}");
        }
        assert!(!err.contains("host.producers[0]"), "{err}");
        assert_eq!(
            parse("[sandbox]\nmemory = \"1GiB\"\n")
                .unwrap()
                .sandbox_memory_bytes,
            1 << 30
        );
    }

    /// Issue 40: counts that `nimbus run` cannot honour (a pool too large
    /// to map, more sessions than a semaphore holds, a task per Resolver
    /// session) and durations it would clamp are refused by the validation
    /// `run` and `check` share, naming the key and the bound; the bounds
    /// themselves are accepted.
    #[test]
    fn counts_run_cannot_honour_and_durations_it_would_clamp_are_refused_with_their_bound() {
        let huge = "\"18446744073709551615s\"";
        let err = parse(&format!(
            "[sandbox]\nmax_concurrent_instances = 1000000000\n\
             [engine]\nmax_concurrent_sessions = 18446744073709551615\nresolver_sessions = 1001\n\
             session_idle_timeout = {huge}\nsession_max_hold = \"2h\"\nshutdown_grace = {huge}\n\
             transient_backoff = \"366d\"\ntransient_backoff_max = {huge}\n\
             inbox_retention = \"3651d\"\n[resolver]\nretention = {huge}\n"
        ))
        .unwrap_err()
        .to_string();
        for expected in [
            "sandbox.max_concurrent_instances: 1000000000 is over the maximum of 10000",
            "engine.max_concurrent_sessions: 18446744073709551615 is over the maximum of 10000",
            "engine.resolver_sessions: 1001 is over the maximum of 1000",
            "engine.session_idle_timeout: ",
            "engine.session_max_hold: 2h is over the maximum of 1h",
            "engine.shutdown_grace: ",
            "engine.transient_backoff: 366days is over the maximum of 365days",
            "engine.transient_backoff_max: ",
            "engine.inbox_retention: 3651days is over the maximum of 3650days",
            "resolver.retention: ",
        ] {
            assert!(err.contains(expected), "{expected} missing from: {err}");
        }
        assert_eq!(
            err.matches(" is over the maximum of ").count(),
            10,
            "one line per key: {err}"
        );
        let at_bounds = parse(
            "[sandbox]\nmax_concurrent_instances = 10000\n\
             [engine]\nmax_concurrent_sessions = 10000\nresolver_sessions = 1000\n\
             session_idle_timeout = \"1h\"\nsession_max_hold = \"1h\"\nshutdown_grace = \"1h\"\n\
             transient_backoff = \"365d\"\ntransient_backoff_max = \"365d\"\n\
             inbox_retention = \"3650d\"\n[resolver]\nretention = \"3650d\"\n",
        );
        assert!(at_bounds.is_ok(), "{:?}", at_bounds.err());
    }

    /// Values that parse but would quietly do what nobody meant: data in
    /// the configuration's own directory, an inbox that forgets at once,
    /// two producer topics Service Bus would take for one.
    #[test]
    fn values_that_would_quietly_mislead_are_named_by_key() {
        let err = parse(
            "[host]\ndata_dir = \"\"\nhandlers_dir = \"\"\nproducers = [\"shop\", \"web\", \"Shop\"]\n[engine]\ninbox_retention = \"0s\"\n",
        )
        .unwrap_err()
        .to_string();
        for expected in [
            "host.data_dir: must not be empty",
            "host.handlers_dir: must not be empty",
            "engine.inbox_retention: must be longer than 0",
            "host.producers[2]: 'Shop' names the same topic as host.producers[0] ('shop')",
        ] {
            assert!(err.contains(expected), "{expected} missing from: {err}");
        }
        assert!(!err.contains("host.producers[1]"), "{err}");
    }

    #[test]
    fn bad_values_are_named_by_key() {
        let err = parse(
            "[engine]\nmax_concurrent_sessions = 0\n[sandbox]\nmemory = \"lots\"\n[retry.default]\nmax_retries = 3\njitter = \"bounded\"\njitter_factor = -1.0\n",
        )
        .unwrap_err()
        .to_string();
        for key in [
            "engine.max_concurrent_sessions",
            "sandbox.memory",
            "retry.default.jitter_factor",
        ] {
            assert!(err.contains(key), "{key} missing from: {err}");
        }
    }

    #[test]
    fn the_session_hold_reaches_the_session_processor() {
        assert_eq!(
            crate::wiring::processor_settings(&parse("").unwrap()).session_max_hold,
            Duration::from_secs(5)
        );
        let zero = parse("[engine]\nsession_max_hold = \"0s\"\n").unwrap();
        assert_eq!(
            crate::wiring::processor_settings(&zero).session_max_hold,
            Duration::ZERO
        );
        let err = parse("[engine]\nsession_max_hold = \"a while\"\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("session_max_hold"), "{err}");
    }

    #[test]
    fn a_removal_grace_over_a_day_is_refused() {
        let err = parse("[host]\nremoval_grace = \"18446744073709551615s\"\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("host.removal_grace: ") && err.contains("is over the maximum of 1day"),
            "{err}"
        );
        assert!(parse("[host]\nremoval_grace = \"1day\"\n").is_ok());
    }

    #[test]
    fn a_lock_longer_than_service_bus_allows_is_refused() {
        let err = parse("[broker]\nlock_duration = \"6m\"\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("broker.lock_duration: 6m is over Service Bus's maximum of 5m"),
            "{err}"
        );
        assert!(parse("[broker]\nlock_duration = \"5m\"\n").is_ok());
    }

    #[test]
    fn bad_duration_is_named() {
        let err = parse("[broker]\nlock_duration = \"soon\"\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("lock_duration"), "{err}");
        // The full key and the manifest's wording, whatever the mistake.
        let err = parse("[engine]\nshutdown_grace = \"soon\"\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("engine.shutdown_grace: ")
                && err.contains("`soon` is not a duration like \"5s\""),
            "{err}"
        );
        let err = parse("[engine]\nshutdown_grace = 5\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("engine.shutdown_grace: ")
                && err.contains("invalid type: integer `5`, expected a duration like \"5s\""),
            "{err}"
        );
    }

    #[test]
    fn a_host_name_for_the_api_is_refused_with_an_example() {
        let err = parse("[api]\nlisten = \"localhost:8080\"\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("api.listen: ") && err.contains("such as \"127.0.0.1:8080\""),
            "{err}"
        );
        let valid = parse("[api]\nlisten = \"127.0.0.1:8080\"\n").unwrap();
        assert_eq!(valid.config.api.listen.port(), 8080);
    }

    #[test]
    fn bad_api_guard_values_are_named_by_key_without_the_secret() {
        for (text, says) in [
            (
                "[api]\ntoken = \"hunter2\"\n",
                "api.token: must be at least 16 characters",
            ),
            (
                "[api]\ntoken = \"a token with spaces\"\n",
                "api.token: character 2 is not visible ASCII",
            ),
            (
                "[api]\nallowed_hosts = [\"http://nimbus.example\"]\n",
                "api.allowed_hosts[0]: 'http://nimbus.example' is not a host name",
            ),
            (
                "[api]\nrequest_timeout = \"0s\"\n",
                "api.request_timeout: must be longer than 0",
            ),
            (
                "[api]\nidle_timeout = \"2h\"\n",
                "api.idle_timeout: 2h is over the maximum of 1h",
            ),
        ] {
            let err = parse(text).unwrap_err().to_string();
            assert!(err.contains(says), "{text}: {err}");
            assert!(!err.contains("hunter2"), "{err}");
        }
        let valid = parse(
            "[api]\ntoken = \"0123456789abcdef\"\nallowed_hosts = [\"nimbus.internal:7300\"]\n",
        )
        .unwrap();
        assert!(valid.config.api.token.is_some());
        assert!(!format!("{valid:?}").contains("0123456789abcdef"));
    }

    #[test]
    fn an_api_beyond_loopback_without_a_token_is_refused_naming_the_key() {
        // Only meaningful without a token in this process's environment.
        if std::env::var_os(API_TOKEN_ENV).is_some() {
            return;
        }
        let path = Path::new("/etc/nimbus.toml");
        let wide = parse("[api]\nlisten = \"0.0.0.0:7300\"\n").unwrap();
        let err = wide.with_environment(path).unwrap_err().to_string();
        assert!(
            err.contains("api.token: the API listens on 0.0.0.0:7300, beyond loopback"),
            "{err}"
        );
        assert!(err.contains("[api] token (or NIMBUS_API_TOKEN)"), "{err}");
        let guarded =
            parse("[api]\nlisten = \"0.0.0.0:7300\"\ntoken = \"0123456789abcdef\"\n").unwrap();
        assert!(guarded.with_environment(path).is_ok());
        let local = parse("").unwrap();
        assert!(local.with_environment(path).is_ok());
    }

    const NAMESPACE: &str = "Endpoint=sb://localhost:5672;SharedAccessKeyName=Root;\
                             SharedAccessKey=s3cret-key-value;UseDevelopmentEmulator=true;";

    const CONTROL_KEY: &str = "c0ntrol-key-shared-by-the-hosts-0123";

    /// Issue 40: hosts on a namespace check each other's control messages,
    /// so each needs the key they share; it is never shown.
    #[test]
    fn a_host_on_service_bus_needs_the_shared_control_key_and_it_is_never_shown() {
        // Only meaningful without a key in this process's environment.
        if std::env::var_os(CONTROL_KEY_ENV).is_some() {
            return;
        }
        let path = Path::new("/etc/nimbus.toml");
        let keyless = parse(&format!(
            "[broker]\nkind = \"servicebus\"\nconnection_string = \"{NAMESPACE}\"\n"
        ))
        .unwrap();
        let err = keyless.with_environment(path).unwrap_err().to_string();
        assert!(
            err.contains("manager.control_key: broker.kind is \"servicebus\"")
                && err.contains(CONTROL_KEY_ENV)
                && err.contains("the same on every host"),
            "{err}"
        );
        // The embedded broker needs none: the host keeps its own.
        let embedded = parse("").unwrap().with_environment(path).unwrap();
        assert!(embedded.control_key.is_none());

        let short = parse("[manager]\ncontrol_key = \"sh0rt-secret\"\n")
            .unwrap_err()
            .to_string();
        assert!(
            short.contains("manager.control_key: must be at least 32 characters")
                && !short.contains("sh0rt-secret"),
            "{short}"
        );
        let spaced = parse("[manager]\ncontrol_key = \"a key with spaces in it, long enough\"\n")
            .unwrap_err()
            .to_string();
        assert!(
            spaced.contains("manager.control_key: character 2 is not"),
            "{spaced}"
        );
        let valid = parse(&format!("[manager]\ncontrol_key = \"{CONTROL_KEY}\"\n")).unwrap();
        assert!(valid.control_key.is_some());
        assert!(!format!("{valid:?}").contains(CONTROL_KEY));
    }

    #[test]
    fn a_host_on_service_bus_needs_a_connection_string_and_no_amqp_endpoint() {
        let path = Path::new("/etc/nimbus.toml");
        let on_namespace = parse(&format!(
            "[broker]\nkind = \"servicebus\"\nconnection_string = \"{NAMESPACE}\"\n\
             [manager]\ncontrol_key = \"{CONTROL_KEY}\"\n"
        ))
        .unwrap();
        assert_eq!(on_namespace.config.broker.kind, BrokerKind::ServiceBus);
        let connection = on_namespace.connection_string.as_ref().unwrap();
        assert_eq!(
            (connection.host.as_str(), connection.port),
            ("localhost", 5672)
        );
        assert!(!format!("{on_namespace:?}").contains("s3cret"));
        assert!(on_namespace.with_environment(path).is_ok());

        // Only meaningful without a connection string in the environment.
        if std::env::var_os(CONNECTION_STRING_ENV).is_none() {
            let err = parse("[broker]\nkind = \"servicebus\"\n")
                .unwrap()
                .with_environment(path)
                .unwrap_err()
                .to_string();
            assert!(
                err.contains("broker.connection_string: broker.kind is \"servicebus\"")
                    && err.contains(CONNECTION_STRING_ENV),
                "{err}"
            );
        }

        let bad = parse("[broker]\nkind = \"servicebus\"\nconnection_string = \"Endpoint=x\"\n")
            .unwrap_err()
            .to_string();
        assert!(bad.contains("broker.connection_string:"), "{bad}");
        // Whatever is wrong, the key is not shown, neither by the file's
        // parse nor by validation.
        for wrong in [
            "UseDevelopmentEmulator=yes",
            "UseDevelopmentEmulator=true;stray",
        ] {
            let text = NAMESPACE.replace("UseDevelopmentEmulator=true;", "") + wrong;
            let err = parse(&format!(
                "[broker]\nkind = \"servicebus\"\nconnection_string = \"{text}\"\n"
            ))
            .unwrap_err()
            .to_string();
            assert!(
                err.contains("broker.connection_string:") && !err.contains("s3cret"),
                "{err}"
            );
        }
        let kind = parse("[broker]\nkind = \"azure\"\n")
            .unwrap_err()
            .to_string();
        assert!(
            kind.contains("broker.kind") && kind.contains("servicebus"),
            "{kind}"
        );

        let both = parse(&format!(
            "[broker]\nkind = \"servicebus\"\nconnection_string = \"{NAMESPACE}\"\n\
             [amqp]\nlisten = \"127.0.0.1:5672\"\n[[amqp.keys]]\nname = \"k\"\nkey = \"v\"\n"
        ))
        .unwrap_err()
        .to_string();
        assert!(
            both.contains(
                "amqp.listen: the AMQP endpoint (127.0.0.1:5672) serves the embedded broker"
            ),
            "{both}"
        );
        let missing_ca = parse(&format!(
            "[broker]\nkind = \"servicebus\"\nconnection_string = \"{NAMESPACE}\"\n\
             ca_file = \"certs/ca.pem\"\n"
        ))
        .unwrap_err()
        .to_string();
        assert!(
            missing_ca.contains("broker.ca_file: cannot read /srv/app/certs/ca.pem"),
            "{missing_ca}"
        );
        let unused = parse(&format!("[broker]\nconnection_string = \"{NAMESPACE}\"\n"))
            .unwrap_err()
            .to_string();
        assert!(
            unused.contains("broker.connection_string: given, but broker.kind is \"embedded\"")
                && !unused.contains("s3cret"),
            "{unused}"
        );
    }

    #[test]
    fn an_unknown_key_is_named_with_its_table() {
        let err = parse("[engine]\nshutdown_grac = \"5s\"\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("engine.shutdown_grac"), "{err}");
        assert!(err.contains("line 2"), "{err}");
    }
}
