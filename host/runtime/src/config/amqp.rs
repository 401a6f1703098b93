//! `[amqp]`: the AMQP endpoint Service Bus SDKs connect to (issue 29).
//! Off unless `listen` is set; then at least one key is needed, since every
//! link is authorised by a token signed with one.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use nimbus_amqp::{ServerTls, ServerTlsError};
use nimbus_dialect::{Right, Rights, SharedAccessKey};
use serde::Deserialize;

/// `[amqp]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AmqpConfig {
    /// Where the endpoint listens (`"127.0.0.1:5672"`); absent, there is
    /// no endpoint.
    #[serde(default, deserialize_with = "optional_socket_address")]
    pub listen: Option<SocketAddr>,
    /// The keys a client's shared access signature may be signed with: a
    /// connection string's `SharedAccessKeyName` and `SharedAccessKey`.
    #[serde(default)]
    pub keys: Vec<AmqpKey>,
    /// The largest message (or batch) a client may send, as the attach
    /// tells it (`"1MiB"`); the SDKs check it before sending.
    #[serde(default = "default_max_message_size")]
    pub max_message_size: String,
    /// A PEM file of the endpoint's certificate (then any intermediates):
    /// with `tls_key`, the endpoint serves AMQP over TLS, as Service Bus
    /// does, for connection strings without `UseDevelopmentEmulator=true`.
    #[serde(default)]
    pub tls_certificate: Option<PathBuf>,
    /// A PEM file of the certificate's private key.
    #[serde(default)]
    pub tls_key: Option<PathBuf>,
    /// Serve plain AMQP on an address beyond loopback anyway: tokens are
    /// bearer secrets, and without TLS anyone on the path can read one.
    #[serde(default)]
    pub allow_plaintext: bool,
    /// Connections served at once (at most the open files the process may
    /// have, less a reserve for the HTTP API and the data files).
    #[serde(default = "default_max_connections")]
    pub max_connections: usize,
}

fn default_max_connections() -> usize {
    nimbus_amqp::MAX_CONNECTIONS
}

/// The most `max_connections` may be: beyond it the process's open-file
/// limit, not this setting, is what bounds the endpoint.
const MOST_CONNECTIONS: usize = 65_536;

fn default_max_message_size() -> String {
    "1MiB".to_owned()
}

/// The largest `max_message_size`: Service Bus premium's limit.
const MOST_MESSAGE_BYTES: u64 = 100 * 1024 * 1024;

/// The smallest: a NimBus event's properties and envelope fit with room.
const LEAST_MESSAGE_BYTES: u64 = 64 * 1024;

impl Default for AmqpConfig {
    fn default() -> Self {
        AmqpConfig {
            listen: None,
            keys: Vec::new(),
            max_message_size: default_max_message_size(),
            tls_certificate: None,
            tls_key: None,
            allow_plaintext: false,
            max_connections: default_max_connections(),
        }
    }
}

/// `[[amqp.keys]]`: a named key.
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AmqpKey {
    /// The key's name (`SharedAccessKeyName`).
    pub name: String,
    /// The key (`SharedAccessKey`), a secret.
    pub key: String,
    /// What tokens signed with it may do: `Send`, `Listen`, `Manage` (which
    /// has the other two), as a Service Bus policy's claims. All of them
    /// unless given, as Service Bus's `RootManageSharedAccessKey`.
    #[serde(default)]
    pub rights: Option<Vec<String>>,
}

impl AmqpKey {
    /// The key as the endpoint checks tokens with it (rights that do not
    /// parse, which validation refuses, are left out).
    pub fn shared_access_key(&self) -> SharedAccessKey {
        let key = SharedAccessKey::new(&self.name, &self.key);
        match &self.rights {
            None => key,
            Some(names) => key.with_rights(Rights::of(
                names.iter().filter_map(|name| Right::parse(name)),
            )),
        }
    }
}

impl std::fmt::Debug for AmqpKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AmqpKey")
            .field("name", &self.name)
            .field("rights", &self.rights)
            .finish_non_exhaustive()
    }
}

impl AmqpConfig {
    /// `max_message_size` in bytes (the default's when it does not parse,
    /// which validation refuses).
    pub fn max_message_bytes(&self) -> u64 {
        self.parsed_max_message_size().unwrap_or(1024 * 1024)
    }

    fn parsed_max_message_size(&self) -> Result<u64, String> {
        let text = &self.max_message_size;
        match nimbus_sandbox::parse_byte_size(text)? {
            bytes if bytes > MOST_MESSAGE_BYTES => Err(format!(
                "{text} is over the maximum of 100MiB (Service Bus premium's)"
            )),
            bytes if bytes < LEAST_MESSAGE_BYTES => {
                Err(format!("{text} is under the minimum of 64KiB"))
            }
            bytes => Ok(bytes),
        }
    }

    /// The certificate and key `tls_certificate` and `tls_key` name, if
    /// both are set.
    ///
    /// # Errors
    ///
    /// What does not read, naming the key.
    pub fn tls(&self) -> Result<Option<ServerTls>, String> {
        let (certificate, key) = match (&self.tls_certificate, &self.tls_key) {
            (None, None) => return Ok(None),
            (Some(certificate), Some(key)) => (certificate, key),
            (Some(_), None) => {
                return Err("amqp.tls_key: tls_certificate is set and its key is not".to_owned());
            }
            (None, Some(_)) => {
                return Err(
                    "amqp.tls_certificate: tls_key is set and its certificate is not".to_owned(),
                );
            }
        };
        let read = |key: &str, path: &Path| {
            std::fs::read(path)
                .map_err(|e| format!("amqp.{key}: cannot read {}: {e}", path.display()))
        };
        let certificate_pem = read("tls_certificate", certificate)?;
        let key_pem = read("tls_key", key)?;
        ServerTls::from_pem(&certificate_pem, &key_pem)
            .map(Some)
            .map_err(|e| match e {
                ServerTlsError::Key(_) => format!("amqp.tls_key: {}: {e}", key.display()),
                _ => format!("amqp.tls_certificate: {}: {e}", certificate.display()),
            })
    }

    /// What is wrong, each naming its key, and the certificate and key
    /// read, if given and good.
    pub(crate) fn problems(&self) -> (Vec<String>, Option<ServerTls>) {
        let mut problems = Vec::new();
        let tls = match self.tls() {
            Err(why) => {
                problems.push(why);
                None
            }
            Ok(Some(_)) if self.listen.is_none() => {
                problems.push(
                    "amqp.tls_certificate: given, but amqp.listen is not: there is no endpoint \
                     to serve TLS on"
                        .to_owned(),
                );
                None
            }
            Ok(tls) => tls,
        };
        if let Err(why) = self.parsed_max_message_size() {
            problems.push(format!("amqp.max_message_size: {why}"));
        }
        if let Some(listen) = self.listen
            && self.keys.is_empty()
        {
            problems.push(format!(
                "amqp.keys: the AMQP endpoint on {listen} needs at least one key \
                 ([[amqp.keys]] name = \"...\", key = \"...\"): every link is authorised by a \
                 token signed with one"
            ));
        }
        if let Some(listen) = self.listen
            && !listen.ip().is_loopback()
            && self.tls_certificate.is_none()
            && !self.allow_plaintext
        {
            problems.push(format!(
                "amqp.tls_certificate: the AMQP endpoint listens on {listen}, beyond loopback, \
                 without TLS: clients' tokens would cross the network in clear. Give \
                 tls_certificate and tls_key, or set allow_plaintext = true to serve plain AMQP \
                 anyway"
            ));
        }
        if !(1..=MOST_CONNECTIONS).contains(&self.max_connections) {
            problems.push(format!(
                "amqp.max_connections: {} is outside 1 to {MOST_CONNECTIONS}",
                self.max_connections
            ));
        }
        for (i, key) in self.keys.iter().enumerate() {
            if key.name.is_empty() {
                problems.push(format!("amqp.keys[{i}].name: must not be empty"));
            }
            let length = key.key.chars().count();
            if length < super::MIN_TOKEN_LEN {
                problems.push(format!(
                    "amqp.keys[{i}].key: must be at least {} characters (it has {length}): a \
                     token's signature is only as hard to forge as its key is to guess; Service \
                     Bus's keys are 44",
                    super::MIN_TOKEN_LEN
                ));
            }
            match &key.rights {
                Some(rights) if rights.is_empty() => problems.push(format!(
                    "amqp.keys[{i}].rights: empty, so the key could do nothing: name some of \
                     Send, Listen, Manage, or leave rights out for all of them"
                )),
                Some(rights) => {
                    for (j, right) in rights.iter().enumerate() {
                        if Right::parse(right).is_none() {
                            problems.push(format!(
                                "amqp.keys[{i}].rights[{j}]: '{right}' is not a right: Send, \
                                 Listen or Manage"
                            ));
                        }
                    }
                }
                None => {}
            }
            if self.keys[..i].iter().any(|k| k.name == key.name) {
                problems.push(format!(
                    "amqp.keys[{i}].name: '{}' is given twice",
                    key.name
                ));
            }
        }
        (problems, tls)
    }
}

fn optional_socket_address<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<SocketAddr>, D::Error> {
    super::socket_address(deserializer).map(Some)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use std::path::Path;

    use crate::Config;

    fn parse(text: &str) -> Result<crate::ValidConfig, crate::ConfigError> {
        Config::parse(text, Path::new("nimbus.toml"), Path::new("/srv/app"))
    }

    #[test]
    fn no_endpoint_unless_listen_is_set_and_then_a_key_is_needed() {
        assert!(parse("").unwrap().config.amqp.listen.is_none());
        let err = parse("[amqp]\nlisten = \"127.0.0.1:5672\"\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("amqp.keys: the AMQP endpoint on 127.0.0.1:5672 needs at least one key"),
            "{err}"
        );
        let valid = parse(
            "[amqp]\nlisten = \"127.0.0.1:5672\"\n[[amqp.keys]]\nname = \"Root\"\nkey = \"SAS_KEY_VALUE_OF_SOME_LENGTH\"\n",
        )
        .unwrap();
        assert_eq!(valid.config.amqp.keys.len(), 1);
        assert!(
            !format!("{valid:?}").contains("SAS_KEY_VALUE_OF_SOME_LENGTH"),
            "the key is not shown"
        );
    }

    #[test]
    fn tls_needs_a_certificate_and_its_key_that_read_together() {
        let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../servicebus/tests/tls");
        let table = |certificate: &str, key: &str| {
            format!(
                "[amqp]\ntls_certificate = \"{}\"\ntls_key = \"{}\"\n",
                fixtures.join(certificate).display(),
                fixtures.join(key).display()
            )
        };
        let served = parse(&format!(
            "{}listen = \"127.0.0.1:5671\"\n[[amqp.keys]]\nname = \"k\"\nkey = \"a key long enough\"\n",
            table("localhost.pem", "localhost.key")
        ))
        .unwrap();
        assert!(served.config.amqp.tls().unwrap().is_some());
        assert!(parse("").unwrap().config.amqp.tls().unwrap().is_none());

        let alone = parse("[amqp]\ntls_certificate = \"certs/endpoint.pem\"\n")
            .unwrap_err()
            .to_string();
        assert!(
            alone.contains("amqp.tls_key: tls_certificate is set and its key is not"),
            "{alone}"
        );
        let missing = parse("[amqp]\ntls_certificate = \"c.pem\"\ntls_key = \"k.pem\"\n")
            .unwrap_err()
            .to_string();
        assert!(
            missing.contains("amqp.tls_certificate: cannot read /srv/app/c.pem"),
            "{missing}"
        );
        let not_a_key = parse(&table("localhost.pem", "ca.pem"))
            .unwrap_err()
            .to_string();
        assert!(not_a_key.contains("amqp.tls_key: "), "{not_a_key}");
        let no_endpoint = parse(&table("localhost.pem", "localhost.key"))
            .unwrap_err()
            .to_string();
        assert!(
            no_endpoint.contains("amqp.tls_certificate: given, but amqp.listen is not"),
            "{no_endpoint}"
        );
    }

    #[test]
    fn bad_keys_are_named_by_their_place() {
        let err = parse(
            "[[amqp.keys]]\nname = \"\"\nkey = \"k\"\n[[amqp.keys]]\nname = \"a\"\nkey = \"\"\n\
             [[amqp.keys]]\nname = \"a\"\nkey = \"k\"\n\
             [[amqp.keys]]\nname = \"b\"\nkey = \"a key long enough\"\nrights = [\"Send\", \"Read\"]\n\
             [[amqp.keys]]\nname = \"c\"\nkey = \"a key long enough\"\nrights = []\n",
        )
        .unwrap_err()
        .to_string();
        for says in [
            "amqp.keys[0].name: must not be empty",
            "amqp.keys[0].key: must be at least 16 characters (it has 1)",
            "amqp.keys[1].key: must be at least 16 characters (it has 0)",
            "amqp.keys[2].name: 'a' is given twice",
            "amqp.keys[3].rights[1]: 'Read' is not a right: Send, Listen or Manage",
            "amqp.keys[4].rights: empty",
        ] {
            assert!(err.contains(says), "{says}: {err}");
        }
        let err = parse("[amqp]\nlisten = \"localhost:5672\"\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("amqp.listen"), "{err}");
        let err = parse("[amqp]\nmax_message_size = \"1GiB\"\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("amqp.max_message_size: 1GiB is over the maximum"),
            "{err}"
        );
        let small = parse("[amqp]\nmax_message_size = \"256KiB\"\n").unwrap();
        assert_eq!(small.config.amqp.max_message_bytes(), 256 * 1024);
        assert_eq!(
            parse("").unwrap().config.amqp.max_message_bytes(),
            1024 * 1024
        );
    }

    #[test]
    fn a_keys_rights_reach_the_endpoint_and_all_are_had_unless_given() {
        let valid = parse(
            "[[amqp.keys]]\nname = \"send\"\nkey = \"a key long enough\"\nrights = [\"Send\"]\n\
             [[amqp.keys]]\nname = \"root\"\nkey = \"a key long enough\"\n",
        )
        .unwrap();
        let keys: Vec<_> = valid
            .config
            .amqp
            .keys
            .iter()
            .map(super::AmqpKey::shared_access_key)
            .collect();
        assert_eq!(
            keys[0].rights(),
            nimbus_dialect::Rights::of([nimbus_dialect::Right::Send])
        );
        assert_eq!(keys[1].rights(), nimbus_dialect::Rights::all());
    }

    #[test]
    fn plain_amqp_beyond_loopback_is_refused_unless_allowed() {
        let key = "[[amqp.keys]]\nname = \"k\"\nkey = \"a key long enough\"\n";
        let err = parse(&format!("[amqp]\nlisten = \"0.0.0.0:5672\"\n{key}"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("amqp.tls_certificate: the AMQP endpoint listens on 0.0.0.0:5672, beyond loopback, without TLS"),
            "{err}"
        );
        assert!(
            parse(&format!(
                "[amqp]\nlisten = \"0.0.0.0:5672\"\nallow_plaintext = true\n{key}"
            ))
            .is_ok()
        );
        assert!(parse(&format!("[amqp]\nlisten = \"127.0.0.1:5672\"\n{key}")).is_ok());
        let err = parse("[amqp]\nmax_connections = 0\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("amqp.max_connections: 0 is outside 1 to 65536"),
            "{err}"
        );
    }
}
