//! A Service Bus connection string, as the portal and the emulators give
//! it: `Endpoint=sb://HOST[:PORT]/;SharedAccessKeyName=K;SharedAccessKey=S;`
//! and, for an emulator, `UseDevelopmentEmulator=true;`.

use nimbus_dialect::SharedAccessKey;

/// The parts of a connection string this client uses.
#[derive(Clone)]
pub struct ConnectionString {
    /// The namespace's host name.
    pub host: String,
    /// The AMQP port: as written, else 5672 for an emulator (plain AMQP)
    /// and 5671 for a namespace (AMQP over TLS).
    pub port: u16,
    /// Whether this is an emulator (plain AMQP, no TLS).
    pub development_emulator: bool,
    /// The key tokens are signed with.
    pub key: SharedAccessKey,
}

impl std::fmt::Debug for ConnectionString {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnectionString")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("development_emulator", &self.development_emulator)
            .field("key_name", &self.key.name())
            .finish_non_exhaustive()
    }
}

/// What is wrong with a connection string, naming the part.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConnectionStringError {
    /// A part it must have.
    #[error("the connection string has no {0}")]
    Missing(&'static str),
    /// A part that does not read.
    #[error("the connection string's {part} '{value}' {why}")]
    Invalid {
        /// The part.
        part: &'static str,
        /// As written.
        value: String,
        /// Why it does not read.
        why: &'static str,
    },
    /// A shared access signature in place of a key: it expires, and the
    /// host must sign its own tokens for as long as it runs.
    #[error(
        "the connection string carries a SharedAccessSignature; give a SharedAccessKeyName and \
         SharedAccessKey, which the host signs its own tokens with"
    )]
    SignatureInsteadOfKey,
}

impl std::str::FromStr for ConnectionString {
    type Err = ConnectionStringError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let mut endpoint = None;
        let mut key_name = None;
        let mut key = None;
        let mut emulator = false;
        for part in text.split(';').map(str::trim).filter(|p| !p.is_empty()) {
            // The key may hold '=' (base64): split at the first one only.
            let Some((name, value)) = part.split_once('=') else {
                // Not shown: it may be a piece of the key.
                return Err(ConnectionStringError::Invalid {
                    part: "part",
                    value: format!("of {} characters", part.chars().count()),
                    why: "is not NAME=VALUE",
                });
            };
            match name.trim().to_ascii_lowercase().as_str() {
                "endpoint" => endpoint = Some(value.trim().to_owned()),
                "sharedaccesskeyname" => key_name = Some(value.trim().to_owned()),
                "sharedaccesskey" => key = Some(value.trim().to_owned()),
                "usedevelopmentemulator" => {
                    emulator = match value.trim().to_ascii_lowercase().as_str() {
                        "true" => true,
                        "false" => false,
                        _ => {
                            return Err(ConnectionStringError::Invalid {
                                part: "UseDevelopmentEmulator",
                                value: value.to_owned(),
                                why: "is not true or false",
                            });
                        }
                    }
                }
                "sharedaccesssignature" => {
                    return Err(ConnectionStringError::SignatureInsteadOfKey);
                }
                // EntityPath and others name nothing the host uses: the
                // host addresses its entities itself.
                _ => {}
            }
        }
        let endpoint = endpoint.ok_or(ConnectionStringError::Missing("Endpoint"))?;
        let authority = endpoint
            .strip_prefix("sb://")
            .ok_or_else(|| ConnectionStringError::Invalid {
                part: "Endpoint",
                value: endpoint.clone(),
                why: "does not start with sb://",
            })?
            .trim_end_matches('/');
        let (host, port) = match authority.rsplit_once(':') {
            Some((host, port)) => {
                let port = port.parse().map_err(|_| ConnectionStringError::Invalid {
                    part: "Endpoint",
                    value: endpoint.clone(),
                    why: "has a port that is not a number from 1 to 65535",
                })?;
                (host.to_owned(), Some(port))
            }
            None => (authority.to_owned(), None),
        };
        if host.is_empty() || host.contains('/') {
            return Err(ConnectionStringError::Invalid {
                part: "Endpoint",
                value: endpoint,
                why: "is not sb://HOST[:PORT]/",
            });
        }
        let key_name = key_name.ok_or(ConnectionStringError::Missing("SharedAccessKeyName"))?;
        let key = key.ok_or(ConnectionStringError::Missing("SharedAccessKey"))?;
        Ok(ConnectionString {
            port: port.unwrap_or(if emulator { 5672 } else { 5671 }),
            host,
            development_emulator: emulator,
            key: SharedAccessKey::new(key_name, key),
        })
    }
}

impl ConnectionString {
    /// The audience of a token for the whole namespace.
    pub fn namespace_audience(&self) -> String {
        format!("sb://{}/", self.host)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "tests")]
mod tests {
    use super::*;

    #[test]
    fn an_emulator_string_reads_with_its_port_and_key() {
        let cs: ConnectionString = "Endpoint=sb://localhost:5673;SharedAccessKeyName=Root;\
                                    SharedAccessKey=abc/d+e==;UseDevelopmentEmulator=true;"
            .parse()
            .unwrap();
        assert_eq!((cs.host.as_str(), cs.port), ("localhost", 5673));
        assert!(cs.development_emulator);
        assert_eq!(cs.key.name(), "Root");
        assert_eq!(cs.namespace_audience(), "sb://localhost/");
    }

    #[test]
    fn a_namespace_string_defaults_to_the_tls_port() {
        let cs: ConnectionString = "Endpoint=sb://acme.servicebus.windows.net/;\
                                    SharedAccessKeyName=Root;SharedAccessKey=k;EntityPath=x"
            .parse()
            .unwrap();
        assert_eq!(
            (cs.host.as_str(), cs.port, cs.development_emulator),
            ("acme.servicebus.windows.net", 5671, false)
        );
    }

    #[test]
    fn what_is_wrong_is_named() {
        let err = |text: &str| text.parse::<ConnectionString>().unwrap_err().to_string();
        assert_eq!(
            err("SharedAccessKeyName=a;SharedAccessKey=b"),
            "the connection string has no Endpoint"
        );
        assert!(
            err("Endpoint=http://x/;SharedAccessKeyName=a;SharedAccessKey=b").contains("sb://")
        );
        assert!(
            err("Endpoint=sb://x:port/;SharedAccessKeyName=a;SharedAccessKey=b").contains("port")
        );
        assert_eq!(
            err("Endpoint=sb://x/;SharedAccessKey=b"),
            "the connection string has no SharedAccessKeyName"
        );
        assert!(
            err("Endpoint=sb://x/;SharedAccessSignature=SharedAccessSignature sr=x")
                .contains("SharedAccessKey")
        );
        assert!(err("Endpoint=sb://x/;UseDevelopmentEmulator=yes;SharedAccessKeyName=a;SharedAccessKey=b").contains("UseDevelopmentEmulator"));
    }
}
