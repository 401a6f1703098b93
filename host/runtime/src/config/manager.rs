//! `[manager]`: the key the hosts' Manager signs control messages with
//! (issue 40, decision 0141), from the file or, since it is a secret, from
//! the environment.
//!
//! Hosts that share a bus must share the key: each verifies the control
//! messages any of them sends. On the embedded broker a host needs none
//! configured (it keeps one in its data directory, see
//! [`crate::control`]); on Service Bus validation requires one.

use nimbus_wire::ControlKey;
use serde::Deserialize;

/// The variable the control key may come from instead of the file (it
/// replaces `[manager] control_key`).
pub const CONTROL_KEY_ENV: &str = "NIMBUS_CONTROL_KEY";

/// `[manager]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ManagerConfig {
    /// The key control messages are signed and checked with; at least 32
    /// visible ASCII characters, the same on every host of a bus.
    /// `NIMBUS_CONTROL_KEY` replaces it.
    #[serde(default)]
    pub control_key: Option<ControlKeyText>,
}

/// `manager.control_key` as written: a secret, so never shown (a parse
/// error of the file would quote its line), and read into a
/// [`ControlKey`] by validation, which says what is wrong without it.
#[derive(Clone, Deserialize)]
#[serde(transparent)]
pub struct ControlKeyText(String);

impl std::fmt::Debug for ControlKeyText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ControlKeyText(<redacted>)")
    }
}

impl ControlKeyText {
    /// The key it holds.
    ///
    /// # Errors
    ///
    /// What is wrong, never quoting it.
    pub fn parse(&self) -> Result<ControlKey, String> {
        ControlKey::new(&self.0).map_err(|why| why.to_string())
    }
}

/// The control key in the environment, if set.
///
/// # Errors
///
/// When it is set but not a key, naming the variable.
pub(super) fn control_key_from_env() -> Result<Option<ControlKey>, String> {
    match std::env::var(CONTROL_KEY_ENV) {
        Ok(text) => ControlKey::new(&text)
            .map(Some)
            .map_err(|why| format!("{CONTROL_KEY_ENV}: {why}")),
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(_)) => Err(format!(
            "{CONTROL_KEY_ENV}: is not valid Unicode (a control key is visible ASCII)"
        )),
    }
}
