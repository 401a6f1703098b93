//! The hosts' control key: which one a host runs with, and the AMQP
//! endpoint's check built on it (issue 40, decision 0141).
//!
//! The key comes from `NIMBUS_CONTROL_KEY` or `[manager] control_key`
//! (validation reads both). On the embedded broker with neither, the host
//! keeps its own in `<data_dir>/control.key`, made with 32 random bytes on
//! its first start and readable by its owner alone: one host is the only
//! sender and the only checker of its control messages, so it needs no
//! setup. On Service Bus several hosts share a namespace, and validation
//! requires the configured key they share.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context as _;
use nimbus_transport::Message;
use nimbus_wire::{ControlKey, control_signature, prop};

use crate::config::{BrokerKind, CONTROL_KEY_ENV, ValidConfig};

/// The key file's name inside the data directory.
pub const CONTROL_KEY_FILE: &str = "control.key";

/// Random bytes in a made key (written as twice as many hex digits).
const MADE_KEY_BYTES: usize = 32;

/// Where the key a host runs with comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeySource {
    /// `NIMBUS_CONTROL_KEY` or `[manager] control_key`.
    Configured,
    /// The data directory's key file, there already.
    File(PathBuf),
    /// The data directory's key file, to be made at the host's first start.
    ToBeMade(PathBuf),
}

impl std::fmt::Display for KeySource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KeySource::Configured => {
                write!(f, "configured ({CONTROL_KEY_ENV} or [manager] control_key)")
            }
            KeySource::File(path) => write!(f, "{}", path.display()),
            KeySource::ToBeMade(path) => write!(f, "{} (made at first start)", path.display()),
        }
    }
}

/// Where `config`'s host takes its key from, checking a key file that is
/// there without making one: what `nimbus check` reports.
///
/// # Errors
///
/// The key file is there but cannot be read or holds no valid key.
pub fn key_source(config: &ValidConfig) -> anyhow::Result<KeySource> {
    if config.control_key.is_some() {
        return Ok(KeySource::Configured);
    }
    let path = key_file(config);
    if path.exists() {
        read_key_file(&path)?;
        Ok(KeySource::File(path))
    } else {
        Ok(KeySource::ToBeMade(path))
    }
}

/// The key `config`'s host runs with: the configured one, else (on the
/// embedded broker) the data directory's, made now if it is not there yet.
/// Call it with the data directory's lock held, so no other host makes one
/// at the same time.
///
/// # Errors
///
/// On Service Bus without a configured key; a key file that cannot be
/// read, holds no valid key, or cannot be made.
pub(crate) fn host_key(config: &ValidConfig) -> anyhow::Result<ControlKey> {
    if let Some(key) = &config.control_key {
        return Ok(key.clone());
    }
    anyhow::ensure!(
        config.config.broker.kind == BrokerKind::Embedded,
        "manager.control_key: every host on a Service Bus namespace must share one control key; \
         set [manager] control_key or {CONTROL_KEY_ENV}"
    );
    let path = key_file(config);
    if path.exists() {
        return read_key_file(&path);
    }
    let key = make_key_file(&path)?;
    tracing::info!(
        file = %path.display(),
        "made this host's control key: its Manager signs control messages with it, and its \
         endpoints act only on those so signed"
    );
    Ok(key)
}

fn key_file(config: &ValidConfig) -> PathBuf {
    config.config.host.data_dir.join(CONTROL_KEY_FILE)
}

/// A new key, as text: [`MADE_KEY_BYTES`] random bytes in hex.
///
/// # Errors
///
/// The operating system's random source failed.
pub fn new_key_text() -> anyhow::Result<String> {
    let mut bytes = [0u8; MADE_KEY_BYTES];
    getrandom::fill(&mut bytes)
        .map_err(|e| anyhow::anyhow!("reading the system's random source: {e}"))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

fn read_key_file(path: &Path) -> anyhow::Result<ControlKey> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading the control key {}", path.display()))?;
    let key = ControlKey::new(text.trim_end_matches(['\n', '\r'])).map_err(|why| {
        anyhow::anyhow!(
            "{}: not a control key ({why}). nimbus made it at the host's first start; delete it \
             to have a new one made (control messages sent but not yet handled are then refused), \
             or set [manager] control_key",
            path.display()
        )
    })?;
    warn_if_shared(path);
    Ok(key)
}

/// The key file is a secret: say so when others may read it.
#[cfg(unix)]
fn warn_if_shared(path: &Path) {
    use std::os::unix::fs::PermissionsExt as _;
    if let Ok(meta) = std::fs::metadata(path)
        && meta.permissions().mode() & 0o077 != 0
    {
        tracing::warn!(
            file = %path.display(),
            mode = %format_args!("{:o}", meta.permissions().mode() & 0o777),
            "the control key file may be read by other users, who could then act as this \
             host's Manager: chmod 600 it"
        );
    }
}

#[cfg(not(unix))]
fn warn_if_shared(_path: &Path) {}

/// Makes the key file: written whole to a temporary file (created for the
/// owner alone, mode 0600) and renamed into place, so a crash leaves
/// either no key file or a whole one.
fn make_key_file(path: &Path) -> anyhow::Result<ControlKey> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let text = new_key_text()?;
    let key = ControlKey::new(&text).map_err(|why| anyhow::anyhow!("a made key: {why}"))?;
    let context = || format!("making the control key {}", path.display());
    let mut file = tempfile::NamedTempFile::new_in(dir).with_context(context)?;
    writeln!(file, "{text}").with_context(context)?;
    file.as_file().sync_all().with_context(context)?;
    file.persist_noclobber(path)
        .map_err(|e| e.error)
        .with_context(context)?;
    // The rename is durable once the directory is.
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .with_context(context)?;
    Ok(key)
}

/// The AMQP endpoint's check on what SDK clients publish: a message that
/// claims the Manager's authority (a control request type, or `From =
/// Manager`) is refused unless it carries a valid signature. Another nimbus
/// host's Manager, publishing through this endpoint, signs with the same
/// key, so it still gets in.
pub fn publish_check(key: ControlKey) -> nimbus_amqp::PublishCheck {
    Arc::new(move |message: &Message| {
        if !control_signature::needs_signature(message) {
            return Ok(());
        }
        control_signature::verify(&key, message).map_err(|why| {
            let claim = match control_signature::control_type(message) {
                Some(kind) => format!("a {kind}"),
                None => format!("a message with {} = Manager", prop::FROM),
            };
            format!("only a nimbus host's Manager may send {claim}, and {why}")
        })
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use std::path::Path;

    use nimbus_transport::Message;
    use nimbus_wire::{ControlKey, control_signature, prop};

    use super::*;
    use crate::config::Config;

    fn config(dir: &Path, text: &str) -> ValidConfig {
        Config::parse(text, Path::new("nimbus.toml"), dir).unwrap()
    }

    #[test]
    fn a_single_host_makes_its_key_once_for_its_owner_alone() {
        let dir = tempfile::tempdir().unwrap();
        let config = config(dir.path(), "[host]\ndata_dir = \".\"\n");
        let path = dir.path().join(CONTROL_KEY_FILE);
        assert_eq!(
            key_source(&config).unwrap(),
            KeySource::ToBeMade(path.clone())
        );
        let made = host_key(&config).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.trim_end().len(), 2 * MADE_KEY_BYTES);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        // The next start reads the same key: what one signed, the other
        // verifies.
        let again = host_key(&config).unwrap();
        let mut message = Message::new(b"{}".to_vec());
        control_signature::sign(&made, &mut message);
        assert_eq!(control_signature::verify(&again, &message), Ok(()));
        assert_eq!(key_source(&config).unwrap(), KeySource::File(path.clone()));

        std::fs::write(&path, "short\n").unwrap();
        let err = host_key(&config).unwrap_err().to_string();
        assert!(
            err.contains("not a control key") && !err.contains("short"),
            "{err}"
        );
        assert!(key_source(&config).is_err(), "check reports it as run does");
    }

    #[test]
    fn a_configured_key_is_used_and_no_file_is_made() {
        let dir = tempfile::tempdir().unwrap();
        let key = "configured-control-key-0123456789ab";
        let config = config(
            dir.path(),
            &format!("[host]\ndata_dir = \".\"\n[manager]\ncontrol_key = \"{key}\"\n"),
        );
        let used = host_key(&config).unwrap();
        let mut message = Message::new(b"{}".to_vec());
        control_signature::sign(&ControlKey::new(key).unwrap(), &mut message);
        assert_eq!(control_signature::verify(&used, &message), Ok(()));
        assert!(!dir.path().join(CONTROL_KEY_FILE).exists());
        assert!(!format!("{config:?}").contains(key), "never shown");
    }

    #[test]
    fn the_endpoint_lets_in_only_the_managers_claims_to_be_the_manager() {
        let key = ControlKey::new("endpoint-control-key-0123456789abc").unwrap();
        let check = publish_check(key.clone());
        let mut event = Message::new(b"{}".to_vec());
        event
            .properties
            .insert(prop::MESSAGE_TYPE.into(), "EventRequest".into());
        assert_eq!(check(&event), Ok(()), "an ordinary publish");

        let mut skip = event.clone();
        skip.properties
            .insert(prop::MESSAGE_TYPE.into(), "SkipRequest".into());
        let refused = check(&skip).unwrap_err();
        assert!(refused.contains("a SkipRequest"), "{refused}");
        assert!(refused.contains("NimbusControlSignature"), "{refused}");

        let mut from_manager = event.clone();
        from_manager
            .properties
            .insert(prop::FROM.into(), "MANAGER".into());
        let refused = check(&from_manager).unwrap_err();
        assert!(refused.contains("From = Manager"), "{refused}");

        for mut message in [skip, from_manager] {
            control_signature::sign(&key, &mut message);
            assert_eq!(check(&message), Ok(()), "signed by a host's Manager");
        }
    }
}
