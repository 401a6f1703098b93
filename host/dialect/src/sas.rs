//! Shared access signatures: the tokens a client puts on `$cbs` before it
//! attaches a link, checked against the configured keys (issue 29: a wrong
//! key is refused, where an emulator would take anything).
//!
//! A token is `SharedAccessSignature sr=<audience>&sig=<signature>&se=<expiry>&skn=<key name>`,
//! each value URL-encoded, in any order. The signature is the base64 of an
//! HMAC-SHA256, keyed with the key's text as UTF-8, over the encoded
//! audience, a newline, and the expiry in Unix seconds: both SDKs sign the
//! audience as they encode it, so the token's own `sr` text is what was
//! signed. The audience is a URI whose path names what the token grants
//! (`sb://localhost:5672/orders` covers the topic and its subscriptions; a
//! bare namespace covers everything), and whose host is the one the client
//! connected to.
//!
//! A key has rights, as a Service Bus shared access policy has claims:
//! `Send`, `Listen`, `Manage` (which includes the other two). A token
//! grants its key's rights and no more.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use hmac::{Hmac, Mac as _};
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, percent_decode_str, utf8_percent_encode};
use sha2::Sha256;

use crate::address::MANAGEMENT_SUFFIX;

const PREFIX: &str = "SharedAccessSignature ";

/// The token type a shared access signature is put on `$cbs` as.
pub const SAS_TOKEN_TYPE: &str = "servicebus.windows.net:sastoken";

/// The longest a token may still have to run when it is put: the SDKs
/// sign tokens for an hour and put a fresh one before it ends; a token
/// good for years is a credential that cannot be taken back.
pub const MAX_TOKEN_LIFETIME: Duration = Duration::from_secs(30 * 24 * 3600);

/// What a key (and so a token it signs) may do, as Service Bus's claims.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Right {
    /// Publish to a topic, and schedule or cancel its messages.
    Send,
    /// Receive from a subscription or its dead-letter queue, settle, peek,
    /// and keep session state.
    Listen,
    /// Everything, entity management included.
    Manage,
}

impl Right {
    /// Every right, as a key without `rights` configured has them (as
    /// Service Bus's `RootManageSharedAccessKey`).
    pub const ALL: [Right; 3] = [Right::Manage, Right::Listen, Right::Send];

    /// The right's name as Service Bus writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Right::Send => "Send",
            Right::Listen => "Listen",
            Right::Manage => "Manage",
        }
    }

    /// The right called `name` (ignoring case).
    pub fn parse(name: &str) -> Option<Right> {
        Right::ALL
            .into_iter()
            .find(|right| right.as_str().eq_ignore_ascii_case(name))
    }
}

impl std::fmt::Display for Right {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A set of rights.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rights {
    send: bool,
    listen: bool,
    manage: bool,
}

impl Rights {
    /// Exactly `rights` (`Manage` brings `Send` and `Listen`, as on
    /// Service Bus, where a Manage policy must have both).
    pub fn of(rights: impl IntoIterator<Item = Right>) -> Rights {
        let mut set = Rights {
            send: false,
            listen: false,
            manage: false,
        };
        for right in rights {
            match right {
                Right::Send => set.send = true,
                Right::Listen => set.listen = true,
                Right::Manage => {
                    set = Rights {
                        send: true,
                        listen: true,
                        manage: true,
                    };
                }
            }
        }
        set
    }

    /// Every right.
    pub fn all() -> Rights {
        Rights::of([Right::Manage])
    }

    /// Whether `right` is in the set.
    pub fn has(self, right: Right) -> bool {
        match right {
            Right::Send => self.send,
            Right::Listen => self.listen,
            Right::Manage => self.manage,
        }
    }
}

impl std::fmt::Display for Rights {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = [Right::Manage, Right::Listen, Right::Send]
            .into_iter()
            .filter(|right| self.has(*right))
            .map(Right::as_str)
            .collect();
        if names.is_empty() {
            f.write_str("no rights")
        } else {
            f.write_str(&names.join(", "))
        }
    }
}

/// A key a client may sign tokens with: `[[amqp.keys]]`'s name and key.
#[derive(Clone, PartialEq, Eq)]
pub struct SharedAccessKey {
    name: String,
    key: String,
    rights: Rights,
}

impl SharedAccessKey {
    /// The key called `name` (`SharedAccessKeyName` of a connection
    /// string) whose text is `key` (`SharedAccessKey`).
    /// It has every right, until [`SharedAccessKey::with_rights`] says
    /// otherwise.
    pub fn new(name: impl Into<String>, key: impl Into<String>) -> SharedAccessKey {
        SharedAccessKey {
            name: name.into(),
            key: key.into(),
            rights: Rights::all(),
        }
    }

    /// The same key with only `rights`.
    pub fn with_rights(mut self, rights: Rights) -> SharedAccessKey {
        self.rights = rights;
        self
    }

    /// The key's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// What tokens signed with it may do.
    pub fn rights(&self) -> Rights {
        self.rights
    }

    /// A token for `audience` (`sb://host/` for the whole namespace, or an
    /// entity's URI) signed with this key, valid until `expires`: what a
    /// client puts on `$cbs`. The audience and signature are encoded as the
    /// SDKs encode them (`quote_plus`).
    pub fn sign(&self, audience: &str, expires: SystemTime) -> String {
        let expiry = expires
            .duration_since(UNIX_EPOCH)
            .map_or(0, |since| since.as_secs());
        let audience = utf8_percent_encode(audience, QUOTE_PLUS).to_string();
        // HMAC takes a key of any length: this never fails.
        let signature = match Hmac::<Sha256>::new_from_slice(self.key.as_bytes()) {
            Ok(mut mac) => {
                mac.update(audience.as_bytes());
                mac.update(b"\n");
                mac.update(expiry.to_string().as_bytes());
                base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes())
            }
            Err(_) => String::new(),
        };
        format!(
            "{PREFIX}sr={audience}&sig={}&se={expiry}&skn={}",
            utf8_percent_encode(&signature, QUOTE_PLUS),
            utf8_percent_encode(&self.name, QUOTE_PLUS)
        )
    }
}

/// What Python's `quote_plus` leaves as it is (letters, digits, `_.-~`);
/// the rest is percent-encoded.
const QUOTE_PLUS: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'_')
    .remove(b'.')
    .remove(b'-')
    .remove(b'~');

impl std::fmt::Debug for SharedAccessKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedAccessKey")
            .field("name", &self.name)
            .field("rights", &self.rights)
            .finish_non_exhaustive()
    }
}

/// What a valid token grants: its key's rights on the entities under its
/// audience's path, until it expires.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    /// The audience's path segments, lower-cased (empty: the namespace).
    path: Vec<String>,
    /// When the token stops granting.
    expires: SystemTime,
    /// The key that signed it.
    key_name: String,
    /// The key's rights.
    rights: Rights,
}

/// Why a token is refused. The messages name what is wrong, never the
/// token's signature or a key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SasError {
    /// Not a shared access signature at all.
    #[error(
        "the token is not a shared access signature (it does not start with `SharedAccessSignature `)"
    )]
    NotSas,
    /// A part is missing or given twice.
    #[error("the token's `{0}` is missing or given more than once")]
    Field(&'static str),
    /// A part does not read as what it should be.
    #[error("the token's `{field}` is not valid: {why}")]
    Malformed {
        /// The part.
        field: &'static str,
        /// What is wrong with it.
        why: String,
    },
    /// No key of that name is configured.
    #[error("the token is signed with key '{0}', which this endpoint does not have")]
    UnknownKey(String),
    /// The signature is not the named key's.
    #[error("the token's signature does not match key '{0}'")]
    BadSignature(String),
    /// The token's expiry has passed.
    #[error("the token expired {0} seconds ago")]
    Expired(u64),
    /// The token runs for longer than the endpoint takes.
    #[error(
        "the token is valid for {days} more days; this endpoint takes tokens valid for at most \
         {max} days (the SDKs sign them for an hour and renew them)"
    )]
    TooLong {
        /// How many days it has left.
        days: u64,
        /// The most this endpoint takes.
        max: u64,
    },
    /// The audience names another host than the one the client connected to.
    #[error(
        "the token's audience is for host '{audience}', not '{connected}' that the client connected to"
    )]
    OtherHost {
        /// The audience's host.
        audience: String,
        /// The host the client named in its `open`.
        connected: String,
    },
}

impl SasError {
    /// What kind of refusal this is, in a few words.
    pub fn kind(&self) -> &'static str {
        match self {
            SasError::NotSas => "not a shared access signature",
            SasError::Field(_) | SasError::Malformed { .. } => "malformed",
            SasError::UnknownKey(_) => "unknown key",
            SasError::BadSignature(_) => "bad signature",
            SasError::Expired(_) => "expired",
            SasError::TooLong { .. } => "too long",
            SasError::OtherHost { .. } => "another host",
        }
    }
}

impl Grant {
    /// Checks `token` against `keys` at `now`: the key it names exists, its
    /// signature is that key's, it has not expired and does not run past
    /// [`MAX_TOKEN_LIFETIME`], and, when the client named the host it
    /// connected to (`host`, from its `open`), its audience is for that
    /// host (ignoring case and port).
    ///
    /// # Errors
    ///
    /// [`SasError`] naming what is wrong.
    pub fn from_token(
        token: &str,
        keys: &[SharedAccessKey],
        now: SystemTime,
        host: Option<&str>,
    ) -> Result<Grant, SasError> {
        let fields = token.strip_prefix(PREFIX).ok_or(SasError::NotSas)?;
        let raw = |name: &'static str| -> Result<&str, SasError> {
            let mut values = fields
                .split('&')
                .filter_map(|pair| pair.split_once('='))
                .filter(|(key, _)| *key == name)
                .map(|(_, value)| value);
            match (values.next(), values.next()) {
                (Some(value), None) => Ok(value),
                _ => Err(SasError::Field(name)),
            }
        };
        let audience = raw("sr")?;
        let expiry = raw("se")?;
        let key_name = decode("skn", raw("skn")?)?;
        // Percent-decoded only: a `+` in base64 is a `+`, whether or not the
        // maker encoded it.
        let signature = percent_decode_str(raw("sig")?)
            .decode_utf8()
            .map_err(|_| SasError::Malformed {
                field: "sig",
                why: "not UTF-8 once decoded".to_owned(),
            })?
            .into_owned();

        let key = keys
            .iter()
            .find(|k| k.name == key_name)
            .ok_or_else(|| SasError::UnknownKey(key_name.clone()))?;
        let signature = base64::engine::general_purpose::STANDARD
            .decode(signature.as_bytes())
            .map_err(|e| SasError::Malformed {
                field: "sig",
                why: format!("not base64 ({e})"),
            })?;
        // HMAC takes a key of any length; the error is never met.
        let mut mac = Hmac::<Sha256>::new_from_slice(key.key.as_bytes())
            .map_err(|_| SasError::BadSignature(key_name.clone()))?;
        mac.update(audience.as_bytes());
        mac.update(b"\n");
        mac.update(expiry.as_bytes());
        // Constant time: a client learns nothing from how long a refusal takes.
        mac.verify_slice(&signature)
            .map_err(|_| SasError::BadSignature(key_name.clone()))?;

        let expiry: u64 = expiry.parse().map_err(|_| SasError::Malformed {
            field: "se",
            why: format!("'{expiry}' is not a number of seconds since 1970"),
        })?;
        let expires = UNIX_EPOCH
            .checked_add(Duration::from_secs(expiry))
            .ok_or_else(|| SasError::Malformed {
                field: "se",
                why: format!("{expiry} is past any time"),
            })?;
        if let Ok(ago) = now.duration_since(expires) {
            return Err(SasError::Expired(ago.as_secs()));
        }
        if let Ok(left) = expires.duration_since(now)
            && left > MAX_TOKEN_LIFETIME
        {
            return Err(SasError::TooLong {
                days: left.as_secs() / 86_400,
                max: MAX_TOKEN_LIFETIME.as_secs() / 86_400,
            });
        }
        let audience = decode("sr", audience)?;
        if let (Some(connected), Some(named)) = (host, audience_host(&audience))
            && !named.eq_ignore_ascii_case(connected)
        {
            return Err(SasError::OtherHost {
                audience: named.to_owned(),
                connected: connected.to_owned(),
            });
        }
        Ok(Grant {
            path: audience_path(&audience),
            expires,
            key_name,
            rights: key.rights,
        })
    }

    /// Whether this grant covers `entity_path` (`orders`,
    /// `orders/Subscriptions/billing`) at `now`: its audience is the
    /// namespace, the entity, or a path the entity lies under, compared
    /// segment by segment ignoring case.
    pub fn covers(&self, entity_path: &str, now: SystemTime) -> bool {
        if now >= self.expires {
            return false;
        }
        self.is_under(entity_path)
    }

    /// Whether this grant gives `right` on `entity_path` at `now`.
    pub fn allows(&self, right: Right, entity_path: &str, now: SystemTime) -> bool {
        self.rights.has(right) && self.covers(entity_path, now)
    }

    fn is_under(&self, entity_path: &str) -> bool {
        let entity: Vec<String> = segments(entity_path);
        entity.len() >= self.path.len() && entity.iter().zip(&self.path).all(|(e, g)| e == g)
    }

    /// Whether `newer` grants the same path with the same key, as a token
    /// put again before this one expires does.
    pub fn renewed_by(&self, newer: &Grant) -> bool {
        self.path == newer.path && self.key_name == newer.key_name
    }

    /// When the token stops granting.
    pub fn expires(&self) -> SystemTime {
        self.expires
    }

    /// The key that signed it.
    pub fn key_name(&self) -> &str {
        &self.key_name
    }

    /// The rights it gives.
    pub fn rights(&self) -> Rights {
        self.rights
    }
}

/// `value` URL-decoded (`+` is a space, as form encoding writes it).
fn decode(field: &'static str, value: &str) -> Result<String, SasError> {
    percent_decode_str(&value.replace('+', " "))
        .decode_utf8()
        .map(|text| text.into_owned())
        .map_err(|_| SasError::Malformed {
            field,
            why: "not UTF-8 once decoded".to_owned(),
        })
}

/// The path segments of an audience URI (`sb://host:port/a/b`), or of a
/// bare path, lower-cased.
///
/// An audience naming an entity's `$management` node grants the entity:
/// the JavaScript SDK puts its token for the management link's own address
/// (`sb://host/orders/$management`) and then schedules or peeks on
/// `orders` with it, which Service Bus allows.
fn audience_path(audience: &str) -> Vec<String> {
    let path = match audience.split_once("://") {
        Some((_, rest)) => rest.find('/').map_or("", |slash| &rest[slash..]),
        None => audience,
    };
    let mut path = segments(path);
    let node = MANAGEMENT_SUFFIX.trim_start_matches('/');
    if path.len() > 1 && path.last().is_some_and(|last| last == node) {
        path.pop();
    }
    path
}

/// The host of an audience URI (`sb://host:port/a`), without its port;
/// `None` for a bare path.
fn audience_host(audience: &str) -> Option<&str> {
    let (_, rest) = audience.split_once("://")?;
    let authority = rest.split('/').next().unwrap_or_default();
    let host = match authority.rsplit_once(':') {
        // An IPv6 literal keeps its brackets and colons.
        Some((host, port)) if !port.contains(']') => host,
        _ => authority,
    };
    (!host.is_empty()).then_some(host)
}

fn segments(path: &str) -> Vec<String> {
    path.split('/')
        .filter(|s| !s.is_empty())
        .map(str::to_ascii_lowercase)
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;

    /// Made by the algorithm of azure-servicebus 7.15's `generate_sas_token`
    /// (Python's hmac, hashlib and urllib.parse), key name `RootManageSharedAccessKey`,
    /// key `SAS_KEY_VALUE`, audience `sb://localhost:5672/orders`, expiry
    /// 2000000000 (2033-05-18).
    const PYTHON_TOKEN: &str = include_str!("sas_vector.txt");

    fn keys() -> Vec<SharedAccessKey> {
        vec![
            SharedAccessKey::new("listen-only", "another key"),
            SharedAccessKey::new("RootManageSharedAccessKey", "SAS_KEY_VALUE"),
        ]
    }

    /// An hour before the test vectors expire.
    const NEAR: u64 = 2_000_000_000 - 3600;

    fn at(secs: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(secs)
    }

    #[test]
    fn a_token_from_the_python_sdk_is_taken_and_covers_its_topic() {
        let grant = Grant::from_token(PYTHON_TOKEN.trim(), &keys(), at(NEAR), None).unwrap();
        assert_eq!(grant.key_name(), "RootManageSharedAccessKey");
        assert_eq!(grant.expires(), at(2_000_000_000));
        let now = at(NEAR);
        assert!(grant.covers("orders", now));
        assert!(
            grant.allows(Right::Listen, "orders", now),
            "a key has every right unless told"
        );
        assert!(grant.covers("Orders/Subscriptions/billing", now));
        assert!(!grant.covers("payments", now));
        assert!(!grant.covers("orders-archive", now));
        assert!(
            !grant.covers("orders", at(2_000_000_000)),
            "not once expired"
        );
    }

    #[test]
    fn a_wrong_key_an_unknown_name_or_a_late_token_is_refused() {
        let token = PYTHON_TOKEN.trim();
        let wrong_key = [SharedAccessKey::new("RootManageSharedAccessKey", "not it")];
        assert_eq!(
            Grant::from_token(token, &wrong_key, at(NEAR), None),
            Err(SasError::BadSignature(
                "RootManageSharedAccessKey".to_owned()
            ))
        );
        let other_name = [SharedAccessKey::new("Send", "SAS_KEY_VALUE")];
        assert_eq!(
            Grant::from_token(token, &other_name, at(NEAR), None),
            Err(SasError::UnknownKey("RootManageSharedAccessKey".to_owned()))
        );
        assert_eq!(
            Grant::from_token(token, &keys(), at(2_000_000_060), None),
            Err(SasError::Expired(60))
        );
        // The audience is signed: widening it to the namespace breaks it.
        let widened = token.replace(
            "sr=sb%3A%2F%2Flocalhost%3A5672%2Forders",
            "sr=sb%3A%2F%2Flocalhost%3A5672%2F",
        );
        assert_ne!(widened, token);
        assert!(matches!(
            Grant::from_token(&widened, &keys(), at(NEAR), None),
            Err(SasError::BadSignature(_))
        ));
    }

    #[test]
    fn a_namespace_token_covers_every_entity_and_a_raw_plus_in_the_signature_is_a_plus() {
        let namespace = [SharedAccessKey::new("k", "key")];
        // Signed over "sb%3A%2F%2Fh%2F" and an expiry past 2033 with key "key"; its
        // base64 holds a '+', written raw here, as a hand-made token may.
        let token = include_str!("sas_vector_namespace.txt").trim();
        assert!(token.contains('+'), "{token}");
        let grant = Grant::from_token(token, &namespace, at(NEAR), None).unwrap();
        assert!(grant.covers("orders", at(NEAR)));
        assert!(grant.covers("payments/Subscriptions/audit", at(NEAR)));
    }

    #[test]
    fn malformed_tokens_name_the_part_at_fault() {
        for (token, field) in [
            ("SharedAccessSignature se=1&skn=k&sig=x", "sr"),
            ("SharedAccessSignature sr=a&sr=b&se=1&skn=k&sig=x", "sr"),
            ("SharedAccessSignature sr=a&skn=k&sig=x", "se"),
        ] {
            assert_eq!(
                Grant::from_token(token, &keys(), at(NEAR), None),
                Err(SasError::Field(field))
            );
        }
        assert_eq!(
            Grant::from_token("Bearer abc", &keys(), at(NEAR), None),
            Err(SasError::NotSas)
        );
        let error = Grant::from_token(
            "SharedAccessSignature sr=a&se=1&skn=listen-only&sig=%%%",
            &keys(),
            at(NEAR),
            None,
        )
        .unwrap_err();
        assert!(
            matches!(error, SasError::Malformed { field: "sig", .. }),
            "{error}"
        );
        assert!(
            !format!("{:?}", keys()).contains("SAS_KEY_VALUE"),
            "keys are not shown"
        );
    }

    #[test]
    fn a_token_for_an_entitys_management_node_covers_the_entity() {
        // As the JavaScript SDK puts it before `scheduleMessages` or
        // `peekMessages` on a sender or receiver that has put none yet.
        let key = SharedAccessKey::new("k", "a key of some length");
        let now = SystemTime::now();
        let later = now + Duration::from_secs(3600);
        let grant = |audience: &str| {
            Grant::from_token(
                &key.sign(audience, later),
                std::slice::from_ref(&key),
                now,
                None,
            )
            .expect("valid")
        };
        let topic = grant("sb://localhost:5672/interop/$management");
        assert!(topic.allows(Right::Send, "interop", now));
        assert!(topic.covers("interop/Subscriptions/s1", now));
        assert!(!topic.covers("payments", now));
        let subscription = grant("sb://localhost:5672/interop/Subscriptions/s1/$Management");
        assert!(subscription.covers("interop/subscriptions/s1", now));
        assert!(!subscription.covers("interop", now), "not its topic");
        let namespace_node = grant("sb://localhost:5672/$management");
        assert!(
            !namespace_node.covers("interop", now),
            "the namespace's own node is no entity"
        );
    }

    #[test]
    fn a_token_this_endpoint_signs_is_one_it_accepts() {
        let key = SharedAccessKey::new("RootManageSharedAccessKey", "a+secret/with=odd chars");
        let now = SystemTime::now();
        let token = key.sign("sb://localhost:5672/", now + Duration::from_secs(3600));
        assert!(token.starts_with("SharedAccessSignature sr=sb%3A%2F%2Flocalhost%3A5672%2F&sig="));
        let grant =
            Grant::from_token(&token, std::slice::from_ref(&key), now, None).expect("valid");
        assert!(grant.covers("orders/Subscriptions/billing", now));
        let other = SharedAccessKey::new("RootManageSharedAccessKey", "another");
        assert!(matches!(
            Grant::from_token(&token, &[other], now, None),
            Err(SasError::BadSignature(_))
        ));
    }

    #[test]
    fn a_token_good_for_years_or_for_another_host_is_refused() {
        let key = SharedAccessKey::new("k", "a key of some length");
        let now = SystemTime::now();
        let long = key.sign(
            "sb://localhost:5672/",
            now + Duration::from_secs(34_000 * 365 * 86_400),
        );
        assert!(matches!(
            Grant::from_token(&long, std::slice::from_ref(&key), now, None),
            Err(SasError::TooLong { max: 30, .. })
        ));
        let hour = key.sign(
            "sb://Localhost:5672/orders",
            now + Duration::from_secs(3600),
        );
        let keys = std::slice::from_ref(&key);
        assert!(Grant::from_token(&hour, keys, now, Some("localhost")).is_ok());
        assert!(
            Grant::from_token(&hour, keys, now, None).is_ok(),
            "no host named, none checked"
        );
        let refused = Grant::from_token(&hour, keys, now, Some("nimbus.example.com")).unwrap_err();
        assert_eq!(
            refused.to_string(),
            "the token's audience is for host 'Localhost', not 'nimbus.example.com' that the \
             client connected to"
        );
        assert_eq!(audience_host("sb://[::1]:5672/x"), Some("[::1]"));
        assert_eq!(audience_host("amqps://h/x"), Some("h"));
        assert_eq!(audience_host("orders"), None);
    }

    #[test]
    fn a_token_gives_its_keys_rights_and_manage_gives_all() {
        let now = SystemTime::now();
        let until = now + Duration::from_secs(3600);
        let send = SharedAccessKey::new("send", "k1").with_rights(Rights::of([Right::Send]));
        let listen = SharedAccessKey::new("listen", "k2").with_rights(Rights::of([Right::Listen]));
        let keys = [send.clone(), listen.clone()];
        let sender = Grant::from_token(&send.sign("sb://h/", until), &keys, now, None).unwrap();
        assert!(sender.allows(Right::Send, "orders", now));
        assert!(!sender.allows(Right::Listen, "orders/Subscriptions/billing", now));
        let listener = Grant::from_token(&listen.sign("sb://h/", until), &keys, now, None).unwrap();
        assert!(listener.allows(Right::Listen, "orders/Subscriptions/billing", now));
        assert!(!listener.allows(Right::Send, "orders", now));
        let manage = Rights::of([Right::Manage]);
        assert!(Right::ALL.into_iter().all(|right| manage.has(right)));
        assert_eq!(manage.to_string(), "Manage, Listen, Send");
        assert_eq!(
            Rights::of([Right::Listen, Right::Send]).to_string(),
            "Listen, Send"
        );
        assert_eq!(Right::parse("listen"), Some(Right::Listen));
        assert_eq!(Right::parse("Read"), None);
    }
}
