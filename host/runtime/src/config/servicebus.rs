//! `[broker] kind` and what running on Service Bus needs (issue 29): the
//! namespace's connection string, from the file or, since it holds a key,
//! from the environment.

use std::path::Path;

use nimbus_servicebus::{ConnectionString, TrustedRoots};
use serde::Deserialize;

/// The variable a connection string may come from instead of the file
/// (it replaces `[broker] connection_string`).
pub const CONNECTION_STRING_ENV: &str = "NIMBUS_SERVICEBUS_CONNECTION_STRING";

/// `broker.kind`: what the host runs on.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
pub enum BrokerKind {
    /// The broker inside the host, in the data directory.
    #[default]
    #[serde(rename = "embedded")]
    Embedded,
    /// A Service Bus namespace (or an emulator, or another host's AMQP
    /// endpoint), reached over AMQP with `broker.connection_string`.
    #[serde(rename = "servicebus")]
    ServiceBus,
}

/// `broker.connection_string` as written: it holds a key, so it is never
/// shown (a parse error of the file would quote its line), and is read
/// into a [`ConnectionString`] by validation, which names only the part
/// that is wrong.
#[derive(Clone, Deserialize)]
#[serde(transparent)]
pub struct ConnectionStringText(String);

impl std::fmt::Debug for ConnectionStringText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ConnectionStringText(<redacted>)")
    }
}

impl ConnectionStringText {
    /// The connection string it holds.
    ///
    /// # Errors
    ///
    /// What is wrong, naming the part and never the key.
    pub fn parse(&self) -> Result<ConnectionString, String> {
        self.0
            .parse()
            .map_err(|e: nimbus_servicebus::ConnectionStringError| e.to_string())
    }
}

/// The connection string in the environment, if set.
///
/// # Errors
///
/// When it is set but does not read, naming the variable.
pub(super) fn connection_string_from_env() -> Result<Option<ConnectionString>, String> {
    match std::env::var(CONNECTION_STRING_ENV) {
        Ok(text) => text
            .parse()
            .map(Some)
            .map_err(|why| format!("{CONNECTION_STRING_ENV}: {why}")),
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(_)) => {
            Err(format!("{CONNECTION_STRING_ENV}: is not valid Unicode"))
        }
    }
}

/// The certificate authorities in `broker.ca_file`.
///
/// # Errors
///
/// When the file cannot be read or holds no certificate, naming it.
pub(crate) fn trusted_roots(file: &Path) -> Result<TrustedRoots, String> {
    let pem = std::fs::read(file).map_err(|e| format!("cannot read {}: {e}", file.display()))?;
    TrustedRoots::from_pem(&pem).map_err(|e| format!("{}: {e}", file.display()))
}
